"""The frame hook: recursion, threads, exceptions of user code, skipped frames."""
import threading
import traceback

import numpy as np
import pytest
import torch

import shapejit


@pytest.fixture(autouse=True)
def _fresh():
    shapejit.reset()
    yield
    shapejit.reset()


def test_recursive_compiled_function_matches_eager():
    def fact_like(x, n):
        if n == 0:
            return x
        return fact_like(x * 2, n - 1) + 1

    compiled = shapejit.compile(fact_like)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x, 4), fact_like(x, 4))
    torch.testing.assert_close(compiled(x, 4), fact_like(x, 4))   # cached


def test_compiled_function_from_several_threads():
    def f(x, y):
        return (x @ y).relu() + 1

    compiled = shapejit.compile(f)
    errors, results = [], {}

    def worker(i):
        try:
            g = torch.Generator().manual_seed(i)
            x, y = torch.randn(4, 5, generator=g), torch.randn(5, 3, generator=g)
            for _ in range(200):
                out = compiled(x, y)
            results[i] = (out, f(x, y))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(results) == 4
    for out, ref in results.values():
        torch.testing.assert_close(out, ref)
    assert shapejit.stats()["cache_entries"] == 1


def test_user_exception_keeps_type_and_user_traceback():
    def f(x):
        y = x + 1
        raise KeyError("boom from user code")

    compiled = shapejit.compile(f)
    with pytest.raises(KeyError, match="boom from user code") as info:
        compiled(torch.ones(2))
    frames = traceback.extract_tb(info.value.__traceback__)
    assert any(fr.name == "f" and "raise KeyError" in (fr.line or "") for fr in frames), frames


def test_library_error_surfaces_from_user_line():
    def f(a, b):
        return a @ b   # mismatched shapes: eager's own error

    compiled = shapejit.compile(f)
    with pytest.raises(RuntimeError) as info:
        compiled(torch.ones(2, 3), torch.ones(4, 5))
    frames = traceback.extract_tb(info.value.__traceback__)
    assert any(fr.name == "f" and "a @ b" in (fr.line or "") for fr in frames), frames
    assert shapejit.stats()["graphs"] == 0   # the shape rule refused: the frame ran eagerly


def test_generator_frames_run_normally_and_are_reported():
    def gen(x):
        for i in range(3):
            yield x * i

    def f(x):
        return sum(gen(x))   # a generator *function* called from compiled code is inlined

    compiled = shapejit.compile(f)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), f(x))
    assert shapejit.stats()["graphs"] == 1

    compiled_gen = shapejit.compile(gen)   # compiling a generator function: runs normally
    assert [t.tolist() for t in compiled_gen(x)] == [t.tolist() for t in gen(x)]


def test_disable_keeps_a_function_eager():
    calls = []

    @shapejit.disable
    def helper(x):
        calls.append(1)
        return x.sum().item()    # .item() would stop capture if this were compiled

    def f(x):
        return helper(x)

    a = np.arange(6.0)
    t = torch.tensor(a)
    assert shapejit.compile(f)(t) == pytest.approx(a.sum())
    assert calls == [1]


def test_numpy_and_torch_in_one_process_do_not_mix_caches():
    def f(x):
        return x * 2 + 1

    compiled = shapejit.compile(f)
    a = np.arange(4.0)
    t = torch.arange(4.0)
    np.testing.assert_allclose(compiled(a), a * 2 + 1)
    torch.testing.assert_close(compiled(t), t * 2 + 1)
    assert isinstance(compiled(a), np.ndarray) and isinstance(compiled(t), torch.Tensor)
    assert shapejit.stats()["cache_entries"] == 2


def test_torch_marks_on_tensors_make_dims_dynamic():
    """torch's own marking functions leave index sets on the tensor; shapejit honours them:
    the marked dim is symbolic from the first compile, so new sizes reuse the graph."""
    x = torch.randn(5, 3)
    torch._dynamo.mark_dynamic(x, 0)       # torch's own marking function

    def f(t):
        return t * 2

    cf = shapejit.compile(f)
    torch.testing.assert_close(cf(x), x * 2)
    for n in (6, 9, 40):
        y = torch.randn(n, 3)
        torch.testing.assert_close(cf(y), y * 2)
    assert shapejit.stats()["graphs"] == 1
    y = torch.randn(6, 4)                  # dim 1 was not marked: static, recompiles
    torch.testing.assert_close(cf(y), y * 2)
    assert shapejit.stats()["graphs"] == 2
