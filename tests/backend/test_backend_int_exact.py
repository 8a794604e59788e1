"""Integer arithmetic in generated kernels is exact, as in eager: every Python number that
reaches a kernel (an operand, an `alpha`, a clamp bound, a comparison's other side, a fill
value) keeps all its bits for the kernel's dtype. int64 takes its full range (2**53 + 1
stays odd, 2**62 - 1 is not 2**62), int32 wraps as torch and numpy wrap, a number the
kernel's type cannot hold runs as eager does (torch wraps it, numpy raises), floats in
int kernels follow each library's promotion, and a float kernel never rounds a large int
twice. Each function runs with the default backend, static and dynamic, torch and numpy,
against eager (values and dtypes); the kernel-only variants also check that the nodes
really ran as generated C (so the test fails if they quietly went eager)."""
import numpy as np
import pytest
import torch

import shapejit
from lowering import lowering as _lowering

pytestmark = pytest.mark.usefixtures("fresh_shapejit")

BIG = [2**53 + 1, 4611686018427387903, 2**63 - 1, -(2**63), -(2**53) - 3, 9007199254740993 * 3]


def _mul(x, c):
    return x * c


def _mul_add(x, c):
    return x * c + 1


def _add_sub(x, c):
    return (x + c) - (c - 7)


def _alpha(x, c):
    return torch.add(x, x, alpha=c) if isinstance(x, torch.Tensor) else np.add(x, x * c)


def _clamp(x, c):
    return torch.clamp(x * 3, min=-c if c > -(2**63) else c, max=c) if isinstance(x, torch.Tensor) \
        else np.clip(x * 3, min(c, -c if c > -(2**63) else c), c)


def _cmp(x, c):
    y = x + c
    return (y == c + 0), (y > c), (y != c)


def _where(x, c):
    if isinstance(x, torch.Tensor):
        return torch.where(x > 0, x, c) + x.masked_fill(x < 0, c)
    return np.where(x > 0, x, c) + x


def _bits(x, c):
    return (x & c) | (x ^ c)


def _floordiv_mod(x, c):
    return (x * 3 + c) // 7, (x + c) % 11


FUNCS = [_mul, _mul_add, _add_sub, _alpha, _clamp, _cmp, _where, _bits, _floordiv_mod]


def _inputs(lib, dtype):
    a = np.arange(-6, 7, dtype=dtype) * 1000003
    return torch.from_numpy(a.copy()) if lib == "torch" else a


def _eager(fn, x, c):
    try:
        return fn(x, c), None
    except Exception as e:   # numpy raises for some out-of-range constants: compiled must too
        return None, type(e)


def _same(got, want):
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
        return
    assert type(got) is type(want)
    if isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype
        got, want = got.numpy(), want.numpy()
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=0, atol=0)


def _check(fn, x, c, dynamic):
    want, err = _eager(fn, x.copy() if isinstance(x, np.ndarray) else x.clone(), c)
    compiled = shapejit.compile(lambda t: fn(t, c), dynamic=dynamic)
    if err is not None:
        with pytest.raises(err):
            compiled(x)
        return
    _same(compiled(x), want)


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("lib", ["torch", "numpy"])
@pytest.mark.parametrize("fn", FUNCS, ids=lambda f: f.__name__)
def test_int64_constants_exact(fn, lib, dynamic):
    for c in BIG:
        if fn in (_cmp, _add_sub, _floordiv_mod, _mul_add) and not -(2**62) < c < 2**62:
            continue   # c + small overflows Python-side before any tensor sees it
        shapejit.reset()
        _check(fn, _inputs(lib, np.int64), c, dynamic)


@pytest.mark.parametrize("lib", ["torch", "numpy"])
def test_int64_runs_as_kernels(lib):
    """The exact constants are in generated C, not an eager fallback."""
    for fn in (_mul_add, _add_sub, _bits):
        for c in (2**53 + 1, 4611686018427387903, -(2**53) - 3):
            backend, made = _lowering()
            x = _inputs(lib, np.int64)
            _same(shapejit.compile(lambda t: fn(t, c), backend=backend)(x), fn(x, c))
            st = made[0].stats
            assert st["kernels"] >= 1 and st["steps"] == st["kernels"] and st["eager_fallbacks"] == 0, st
            shapejit.reset()


def test_int64_alpha_and_clamp_bounds_exact():
    x = torch.arange(-6, 7, dtype=torch.int64) * 1000003
    for c in (2**53 + 1, 2**62 - 1, -(2**53) - 3):
        for fn in (lambda t: torch.add(t, t, alpha=c), lambda t: torch.sub(t, 1, alpha=c),
                   lambda t: torch.clamp(t * (2**40 + 1), min=-abs(c), max=abs(c)),
                   lambda t: torch.clamp(t * (2**40 + 1), max=c)):
            backend, made = _lowering()
            _same(shapejit.compile(fn, backend=backend)(x), fn(x))
            assert made[0].stats["eager_fallbacks"] == 0
            shapejit.reset()


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("lib", ["torch", "numpy"])
def test_int32_wraps_and_out_of_range(lib, dynamic):
    """int32 results wrap; constants past int32 do what each library does with them."""
    for c in (2**31 - 1, -(2**31), 65537, 2**40, 2**40 + 5, -(2**33) + 1):
        for fn in (_mul, _mul_add, _add_sub, _cmp, _bits):
            if fn in (_add_sub, _cmp) and abs(c) > 2**32:
                continue
            shapejit.reset()
            _check(fn, _inputs(lib, np.int32), c, dynamic)


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("lib", ["torch", "numpy"])
def test_bool_and_float_constants(lib, dynamic):
    """bool constants in int and bool kernels; float constants in int kernels promote as the
    library promotes (torch: the default float dtype, numpy: float64); large ints with a
    float32 tensor round once, as eager does."""
    xi = _inputs(lib, np.int64)
    xb = xi > 0
    xf = _inputs(lib, np.float32)
    cases = [(xi, _mul, True), (xi, _add_sub, False), (xb, _bits, True), (xb, _bits, False),
             (xi, _mul, 2.5), (xi, _mul_add, 1e300), (xi, _add_sub, -0.5), (xi, _cmp, 2.0**53 + 2),
             (xf, _mul, 2**60 + 2**36 + 1), (xf, _add_sub, 2**53 + 1), (xf, _mul, 16777217),
             (_inputs(lib, np.float64), _mul, 2**60 + 2**36 + 1)]
    for x, fn, c in cases:
        shapejit.reset()
        _check(fn, x, c, dynamic)


@pytest.mark.parametrize("lib", ["torch", "numpy"])
def test_numpy_scalar_constants(lib):
    """numpy scalars as constants (np.int64 is strong in NEP 50; torch takes it as an int)."""
    x = _inputs(lib, np.int64)
    for c in (np.int64(2**53 + 1), np.int64(4611686018427387903), np.int32(7), np.float64(2.5), np.bool_(True)):
        for fn in (_mul, _mul_add):
            shapejit.reset()
            _check(fn, x, c, None)
