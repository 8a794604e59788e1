"""Python's integer arithmetic on sizes and ints keeps its exceptions under compilation: a
divisor that can be 0 under the guards is branched on, and where it is 0 the compiled call
raises ZeroDivisionError as eager does, whatever simplification the symbolic result allows
(s0 % s0 is 0 only when s0 != 0). Every call is compared with eager: value, dtype, or the
exception's type."""
import numpy as np
import pytest
import torch

import shapejit


@pytest.fixture(autouse=True)
def _fresh():
    shapejit.reset()
    yield
    shapejit.reset()


def _outcome(fn, args):
    try:
        return "ok", fn(*args)
    except Exception as e:   # the exception's type is what must match
        return "raise", type(e)


def _check(fn, calls, **compile_kw):
    cf = shapejit.compile(fn, **compile_kw)
    for args in calls:
        want = _outcome(fn, args)
        got = _outcome(cf, args)
        assert got[0] == want[0], (args, want, got)
        if want[0] == "raise":
            assert got[1] is want[1], (args, want, got)
            continue
        w, g = want[1], got[1]
        if isinstance(w, torch.Tensor):
            assert g.dtype == w.dtype
            torch.testing.assert_close(g, w)
        elif isinstance(w, np.ndarray):
            assert g.dtype == w.dtype
            np.testing.assert_array_equal(g, w)
        else:
            assert type(g) is type(w) and g == w, (args, w, g)


def _size_mod_self(x):
    return x * (x.shape[0] % x.shape[0])


def _size_mod_shifted(x):
    return x.shape[0] % (x.shape[0] - 3)


def _size_floordiv_shifted(x):
    return x * (x.shape[0] // (x.shape[0] - 3))


def _const_over_size(x):
    return x * (7 // (x.shape[0] - 1))


def _size_mod_zero(x):
    return x.shape[0] % 0


def _loop_of_divisors(x):
    n, r = x.shape[0], 0
    for i in range(3):
        r += n % (n - 3 - i)
    return x * r


def _while_of_divisors(x):
    n, r, i = x.shape[0], 0, 0
    while i < 3:
        r += n // (n - 2 - i)
        i += 1
    return x * r


SIZE_CASES = [_size_mod_self, _size_mod_shifted, _size_floordiv_shifted, _const_over_size,
              _size_mod_zero, _loop_of_divisors, _while_of_divisors]
SIZES = (5, 4, 3, 6, 0, 1, 2, 3, 7)


@pytest.mark.parametrize("lib", ["torch", "numpy"])
@pytest.mark.parametrize("mode", ["automatic", "dynamic", "oblivious", "static"])
@pytest.mark.parametrize("fn", SIZE_CASES, ids=[f.__name__.lstrip("_") for f in SIZE_CASES])
def test_size_arithmetic_raises_as_eager(fn, mode, lib):
    make = (lambda n: torch.ones(n, dtype=torch.int64)) if lib == "torch" else (lambda n: np.ones(n, np.int64))
    calls = [(make(n),) for n in SIZES]
    dynamic = {"automatic": None, "dynamic": True, "oblivious": True, "static": False}[mode]
    with shapejit.config.patch(backed_size_oblivious=mode == "oblivious"):
        _check(fn, calls, dynamic=dynamic)


def test_unbacked_size_arithmetic_raises_as_eager():
    def f(x):
        return x * (x.shape[0] % x.shape[0]) + 7 // x.shape[0]

    cf = shapejit.compile(f)
    for n in (4, 0, 3, 0):
        x = torch.ones(n)
        shapejit.mark_unbacked(x, 0)
        want, got = _outcome(f, (x,)), _outcome(cf, (x,))
        assert want[0] == got[0] and (want[0] == "ok" or want[1] is got[1]), (n, want, got)


def _int_mod(a, b):
    return a % b


def _int_floordiv_shifted(a, b):
    return (a + 1) // (b - 2)


def _int_mod_self(a, b):
    return (b % b) + a


def _int_divmod(a, b):
    return divmod(a, b)


def _tensor_times_int_mod(a, b):
    return torch.arange(3) * (a % b)


def _numpy_times_int_floordiv(a, b):
    return np.arange(3) * (a // b)


INT_CASES = [_int_mod, _int_floordiv_shifted, _int_mod_self, _int_divmod, _tensor_times_int_mod,
             _numpy_times_int_floordiv]
PAIRS = ((7, 3), (9, 4), (8, 0), (5, 2), (6, 0), (10, 2), (11, 0), (5, 5), (0, 0))


@pytest.mark.parametrize("mode", ["automatic", "dynamic"])
@pytest.mark.parametrize("fn", INT_CASES, ids=[f.__name__.lstrip("_") for f in INT_CASES])
def test_int_arithmetic_raises_as_eager(fn, mode):
    _check(fn, PAIRS, dynamic=None if mode == "automatic" else True)


def test_int_arguments_from_a_list_raise_as_eager():
    def f(x, xs):
        return x * (xs[0] % xs[1])

    _check(f, [(torch.ones(2), [n + 3, n]) for n in (2, 4, 0, 6, 0, 8)])
