"""Which cache entry serves a call: an entry records the backend and options it was
compiled with (the BACKEND_MATCH guard), so one function compiled with several backends
or options keeps one entry per choice. And what a failing backend does: raise
BackendCompilerFailed naming it (config.suppress_errors: a warning and an eager run)."""
import warnings

import numpy as np
import pytest
import torch

import shapejit
from repo import package_parent


class Counting:
    """A backend that counts its compiles and the runs of what it returned."""

    def __init__(self, name):
        self.__name__ = self.__qualname__ = name
        self.compiles = 0
        self.runs = 0

    def __call__(self, graph, example_inputs):
        self.compiles += 1

        def run(*args):
            self.runs += 1
            return graph(*args)

        return run


@pytest.fixture(autouse=True)
def _fresh(fresh_shapejit):
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def torch_fn(x):
    return (x.sin() * 2 + 1).sum(0)


def numpy_fn(x):
    return np.cos(x) * 3 - x


@pytest.mark.parametrize("fn, make", [
    (torch_fn, lambda: torch.arange(12.0).reshape(3, 4)),
    (numpy_fn, lambda: np.arange(6.0)),
], ids=["torch", "numpy"])
def test_two_backends_each_compile_once_and_alternate(fn, make):
    a, b = Counting("a"), Counting("b")
    fa, fb = shapejit.compile(fn, backend=a), shapejit.compile(fn, backend=b)
    x = make()
    want = fn(x)
    for i in range(4):
        for compiled, be in ((fa, a), (fb, b)):
            got = compiled(x)
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)
            assert type(got) is type(want) and got.dtype == want.dtype
            assert be.runs == i + 1, be.__name__   # its own entry ran, not the other's
    assert (a.compiles, b.compiles) == (1, 1)
    assert shapejit.stats()["cache_entries"] == 2


def test_backend_counts_match_torch_compile():
    """Alternating two backends: torch.compile compiles once per backend, so do we."""
    x = torch.randn(5)
    ours = [Counting("a"), Counting("b")]
    theirs = [Counting("a"), Counting("b")]
    ours_fns = [shapejit.compile(torch_fn, backend=be) for be in ours]
    theirs_fns = [torch.compile(torch_fn, backend=be) for be in theirs]
    for _ in range(3):
        for f_ours, f_theirs in zip(ours_fns, theirs_fns):
            torch.testing.assert_close(f_ours(x), f_theirs(x))
    assert [be.compiles for be in ours] == [be.compiles for be in theirs] == [1, 1]
    assert [be.runs for be in ours] == [be.runs for be in theirs] == [3, 3]


def test_eager_and_cpu_backends_keep_separate_entries():
    x = torch.randn(4, 3)
    fe = shapejit.compile(torch_fn, backend="eager")
    fc = shapejit.compile(torch_fn, backend="cpu")
    torch.testing.assert_close(fe(x), torch_fn(x))
    torch.testing.assert_close(fc(x), torch_fn(x))
    st = shapejit.stats()
    assert (st["graphs"], st["cache_entries"]) == (2, 2)
    for _ in range(5):   # alternating: no recompile storm
        torch.testing.assert_close(fe(x), torch_fn(x))
        torch.testing.assert_close(fc(x), torch_fn(x))
    st = shapejit.stats()
    assert (st["graphs"], st["recompiles"], st["cache_entries"]) == (2, 1, 2)


def test_same_backend_and_options_share_entries():
    """Two compile() calls with the same backend and options: one entry serves both
    (as torch's equal backends do); "default" is the "cpu" backend."""
    be = Counting("be")
    x = torch.randn(3)
    shapejit.compile(torch_fn, backend=be)(x)
    shapejit.compile(torch_fn, backend=be)(x)
    assert be.compiles == 1 and be.runs == 2
    shapejit.compile(torch_fn, backend="cpu")(x)
    shapejit.compile(torch_fn)(x)
    assert shapejit.stats()["cache_entries"] == 2


def test_options_are_part_of_the_entry():
    """fullgraph and dynamic are recorded too: a fullgraph=True call never reuses an entry
    compiled with a graph break (torch 2.13 reuses it and does not raise)."""
    def g(x):
        y = x + 1
        print("break")
        return y * 2

    x = torch.ones(3)
    torch.testing.assert_close(shapejit.compile(g, backend="eager")(x), g(x))
    with pytest.raises(shapejit._C.Unsupported):
        shapejit.compile(g, backend="eager", fullgraph=True)(x)
    be = Counting("be")
    shapejit.compile(torch_fn, backend=be, dynamic=False)(x)
    shapejit.compile(torch_fn, backend=be, dynamic=True)(x)
    shapejit.compile(torch_fn, backend=be, dynamic=False)(x)
    assert be.compiles == 2 and be.runs == 3


def test_recompile_reason_names_the_backends(capsys):
    x = torch.ones(3)
    shapejit.compile(torch_fn, backend=Counting("first"))(x)
    shapejit.set_logs(recompiles=True)
    shapejit.compile(torch_fn, backend=Counting("second"))(x)
    err = capsys.readouterr().err
    assert "BACKEND_MATCH failure" in err
    assert "backend='first'" in err and "backend='second'" in err


# ------------------------------------------------------------- failing backends ----

def raising_backend(graph, example_inputs):
    raise ValueError("backend bug")


def not_callable_backend(graph, example_inputs):
    return 42


@pytest.mark.parametrize("fn, make", [
    (torch_fn, lambda: torch.ones(2, 3)),
    (numpy_fn, lambda: np.ones(3)),
], ids=["torch", "numpy"])
def test_raising_backend_raises_naming_it(fn, make):
    with pytest.raises(shapejit.BackendCompilerFailed, match="backend='raising_backend'") as info:
        shapejit.compile(fn, backend=raising_backend)(make())
    assert isinstance(info.value.__cause__, ValueError)
    assert str(info.value.__cause__) == "backend bug"
    # nothing was cached: a good backend still compiles and runs
    be = Counting("good")
    x = make()
    np.testing.assert_allclose(np.asarray(shapejit.compile(fn, backend=be)(x)), np.asarray(fn(x)))
    assert be.compiles == 1


def test_raising_backend_raises_like_torch():
    x = torch.ones(3)
    with pytest.raises(Exception) as theirs:
        torch.compile(torch_fn, backend=raising_backend)(x)
    with pytest.raises(shapejit.BackendCompilerFailed) as ours:
        shapejit.compile(torch_fn, backend=raising_backend)(x)
    assert type(theirs.value).__name__ == type(ours.value).__name__ == "BackendCompilerFailed"
    with pytest.raises(shapejit.BackendCompilerFailed):   # fullgraph too
        shapejit.compile(torch_fn, backend=raising_backend, fullgraph=True)(x)


def test_non_callable_result_is_an_error_naming_the_backend():
    with pytest.raises(shapejit.BackendCompilerFailed, match="not_callable_backend") as info:
        shapejit.compile(torch_fn, backend=not_callable_backend)(torch.ones(3))
    assert isinstance(info.value.__cause__, TypeError)
    assert "not callable" in str(info.value)


@pytest.mark.parametrize("backend", [raising_backend, not_callable_backend])
def test_suppress_errors_warns_once_and_runs_eagerly(backend):
    x = torch.randn(4)
    with shapejit.config.patch(suppress_errors=True), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        compiled = shapejit.compile(torch_fn, backend=backend)
        for _ in range(3):
            torch.testing.assert_close(compiled(x), torch_fn(x))
    msgs = [str(m.message) for m in w if "suppress_errors" in str(m.message)]
    assert len(msgs) == 1 and backend.__name__ in msgs[0]
    assert shapejit.stats()["graphs"] == 0


@pytest.mark.parametrize("suppress", [False, True])
@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
def test_backend_interrupt_propagates_unchanged(exc, suppress):
    def backend(graph, example_inputs):
        raise exc()

    with shapejit.config.patch(suppress_errors=suppress):
        with pytest.raises(exc):
            shapejit.compile(torch_fn, backend=backend)(torch.ones(3))
    be = Counting("after")
    torch.testing.assert_close(shapejit.compile(torch_fn, backend=be)(torch.ones(3)),
                               torch_fn(torch.ones(3)))
    assert be.compiles == 1


@pytest.mark.parametrize("value, expect", [("1", "True"), ("0", "False")])
def test_suppress_errors_from_the_environment(value, expect):
    import os
    import subprocess
    import sys
    root = package_parent()
    env = dict(os.environ, TORCHDYNAMO_SUPPRESS_ERRORS=value)
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in [env.get("PYTHONPATH")] if p])
    out = subprocess.run([sys.executable, "-c", "import shapejit; print(shapejit.config.suppress_errors)"],
                         env=env, cwd=root, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == expect


def test_torch_compile_mode_is_part_of_the_entry():
    """Through the compat layer, mode= and options= are recorded with the entry (torch's
    backend equality compares them too): two modes, two entries; the same mode, one."""
    shapejit.install_torch_compat()
    try:
        x = torch.randn(3)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for mode in (None, "max-autotune", None, "max-autotune"):
                torch.testing.assert_close(torch.compile(torch_fn, mode=mode)(x), torch_fn(x))
    finally:
        shapejit.uninstall_torch_compat()
    st = shapejit.stats()
    assert (st["cache_entries"], st["frames"]) == (2, 2)
