"""Past the cache limit a frame runs as eager code, and so does everything it calls for that
call: callees are never compiled on its behalf (torch's RUN_ONLY), so code that asks
torch.compiler.is_compiling() gets the eager answer, as under torch.compile."""
import warnings

import numpy as np
import pytest
import torch

import shapejit


@pytest.fixture(autouse=True)
def _fresh(fresh_shapejit):
    torch._dynamo.reset()
    warnings.simplefilter("ignore")
    yield
    torch._dynamo.reset()


def helper(x):
    if torch.compiler.is_compiling():
        return x + 2
    return x


def with_break(x, n):
    y = x * n
    print("break")
    return helper(y).sum() - 1


def without_break(x, n):
    return helper(x * n).sum() - 1


def looped(x, n):
    total = x.sum()
    for i in range(2):
        total = total + helper(x * (n + i)).sum()
    return total


@pytest.mark.parametrize("fn", [with_break, without_break, looped])
def test_past_the_limit_values_match_torch_compile(fn):
    ns = [2, 3, 4, 5]
    x = torch.ones(3)
    with shapejit.config.patch(cache_size_limit=1):
        compiled = shapejit.compile(fn, dynamic=False, backend="eager")
        ours = [float(compiled(x, n)) for n in ns]
        frames_at_limit = shapejit.stats()["frames"]
        ours += [float(compiled(x, n)) for n in ns[1:]]
        assert shapejit.stats()["frames"] == frames_at_limit   # nothing compiled past it
    with torch._dynamo.config.patch(recompile_limit=1):
        theirs = torch.compile(fn, dynamic=False, backend="eager")
        expect = [float(theirs(x, n)) for n in ns] + [float(theirs(x, n)) for n in ns[1:]]
    assert ours == expect
    eager = [float(fn(x, n)) for n in ns[1:]]
    assert ours[1:len(ns)] == eager   # past the limit: eager values


def np_helper(x, k):
    return np.sin(x) * k


def np_caller(x, n):
    y = x + n
    print("break")
    return np_helper(y, 2).sum()


def test_numpy_callees_are_not_compiled_past_the_limit():
    x = np.linspace(0.0, 1.0, 5)
    with shapejit.config.patch(cache_size_limit=1):
        compiled = shapejit.compile(np_caller, dynamic=False)
        for n in range(6):
            got = compiled(x, n)
            np.testing.assert_allclose(got, np_caller(x, n), rtol=1e-12)
            assert type(got) is type(np_caller(x, n))
        frames = shapejit.stats()["frames"]
        for n in range(6, 9):
            compiled(x, n)
        assert shapejit.stats()["frames"] == frames


def test_a_compiled_function_called_past_the_limit_still_compiles():
    """shapejit.compile(inner) called from a frame past its limit is the user's own
    request: it compiles (its entries are its own)."""
    inner = shapejit.compile(lambda t: t.cos() + 1, backend="eager")

    def outer(x, n):
        if n >= 3:
            return inner(x * n)
        return x * n

    x = torch.randn(3)
    with shapejit.config.patch(cache_size_limit=1):
        compiled = shapejit.compile(outer, dynamic=False, backend="eager")
        torch.testing.assert_close(compiled(x, 2), x * 2)
        assert shapejit.stats()["frames"] == 1
        torch.testing.assert_close(compiled(x, 3), (x * 3).cos() + 1)   # outer past its limit
        assert shapejit.stats()["frames"] == 2                          # inner compiled
        assert shapejit.stats()["graphs"] == 2


# ------------------------------------- is_compiling() on every path, as torch reads it ----

ic = torch.compiler.is_compiling


def ic_plain(x):
    return x + ic()


def ic_break(x):
    y = x + ic()
    print(end="")
    return y + ic()


def ic_break_in_try(x):   # a break inside try: the frame runs as eager code
    try:
        y = x + ic()
        print(end="")
    except ValueError:
        y = x
    return y + ic()


def ic_callee(x):
    return x * 10 + ic()


def ic_break_in_with(x):
    with torch.no_grad():
        y = ic_callee(x)
        print(end="")
    return y


def ic_item(x):
    int(x.sum().item())
    return x + ic()


@pytest.mark.parametrize("fn", [ic_plain, ic_break, ic_break_in_try, ic_break_in_with, ic_item])
def test_is_compiling_reads_as_under_torch_compile(fn):
    x = torch.zeros(2)
    ours = shapejit.compile(fn, backend="eager")(x)
    theirs = torch.compile(fn, backend="eager")(x)
    torch.testing.assert_close(ours, theirs)
    with shapejit.set_stance("force_eager"):
        torch.testing.assert_close(shapejit.compile(fn, backend="eager")(x), fn(x))
