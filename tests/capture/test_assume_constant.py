"""torch._dynamo.assume_constant_result: a marked function called with constant arguments
runs once, at capture, and its result is used as a constant on every call, unguarded, as
torch.compile does (transformers marks its `is_*_available` checks so, under
functools.lru_cache: traced, they walk importlib.metadata). A marked function called with
a tensor, or returning something that is not a constant, is not folded."""
import functools
import warnings

import pytest
import torch
import torch._dynamo
from torch._dynamo.testing import CompileCounter

import shapejit


@pytest.fixture(autouse=True)
def _fresh(fresh_compilers):
    yield


CALLS = [0]


@torch._dynamo.assume_constant_result
def _scale(k):
    CALLS[0] += 1
    return 2.5 * k


@functools.lru_cache
@torch._dynamo.assume_constant_result
def _package_version():
    import importlib.metadata
    return importlib.metadata.version("torch")


def test_marked_function_runs_once_and_folds():
    def f(x):
        return x * _scale(3) + len(_package_version())

    x = torch.randn(4)
    cf = shapejit.compile(f)
    CALLS[0] = 0
    for _ in range(3):
        torch.testing.assert_close(cf(x), f(x))
    assert CALLS[0] == 1 + 3   # once at capture, then only the eager reference calls
    s = shapejit.stats()
    assert s["graphs"] == 1 and s["graph_breaks"] == 0, s
    cnt = CompileCounter()
    torch._dynamo.reset()
    torch.compile(f, backend=cnt)(x)
    torch._dynamo.reset()
    assert s["graphs"] <= cnt.frame_count


def test_the_result_is_not_guarded():
    """As in torch.compile: the result is assumed constant, so a changed answer is not
    seen by the compiled code (the user's promise)."""
    state = {"k": 1.0}

    @torch._dynamo.assume_constant_result
    def read():
        return state["k"]

    def f(x):
        return x * read()

    x = torch.ones(2)
    cf = shapejit.compile(f)
    torch.testing.assert_close(cf(x), x * 1.0)
    state["k"] = 5.0
    torch.testing.assert_close(cf(x), x * 1.0)
    assert shapejit.stats()["recompiles"] == 0


def test_not_folded_with_a_tensor_argument_or_a_non_constant_result():
    @torch._dynamo.assume_constant_result
    def double(t):
        return t * 2

    @torch._dynamo.assume_constant_result
    def items():
        return [1, 2]

    def f(x):
        return double(x) + len(items())

    x = torch.randn(3)
    cf = shapejit.compile(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(2):
            torch.testing.assert_close(cf(x), f(x))
