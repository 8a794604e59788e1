"""Stances: default, force_eager, eager_on_recompile, fail_on_recompile and
eager_then_compile, set as a call, a context manager and a decorator. Graph counts are
checked against torch.compile's under torch.compiler.set_stance in the same run; results
equal eager."""
import pytest
import torch
import torch._dynamo
from torch._dynamo.testing import CompileCounter

import shapejit

STANCES = ["default", "force_eager", "eager_on_recompile", "eager_then_compile"]


@pytest.fixture(autouse=True)
def _fresh():
    shapejit.reset()
    shapejit.set_stance("default")
    yield
    shapejit.set_stance("default")
    shapejit.reset()


def sized(x, n):
    return x * n + x.shape[0]


CALLS = [
    ("sizes", lambda: [(torch.randn(k, 2), 2) for k in (3, 4, 5, 6)]),
    ("ints", lambda: [(torch.randn(3, 2), n) for n in (2, 3, 4, 5)]),
    ("same", lambda: [(torch.randn(3, 2), 2) for _ in range(3)]),
    ("both", lambda: [(torch.randn(k, 2), n) for k, n in ((3, 2), (4, 2), (4, 3), (7, 9))]),
]


def _torch_count(stance, calls):
    torch._dynamo.reset()
    cnt = CompileCounter()
    cf = torch.compile(sized, backend=cnt)
    with torch.compiler.set_stance(stance):
        outs = [cf(*a) for a in calls]
    torch._dynamo.reset()
    return cnt.frame_count, outs


@pytest.mark.parametrize("stance", STANCES)
@pytest.mark.parametrize("name,make", CALLS, ids=[c[0] for c in CALLS])
def test_stance_graph_counts_match_torch(stance, name, make):
    calls = make()
    expected, touts = _torch_count(stance, calls)
    cf = shapejit.compile(sized)
    with shapejit.set_stance(stance):
        outs = [cf(*a) for a in calls]
    for a, got, want in zip(calls, outs, touts):
        torch.testing.assert_close(got, sized(*a))
        torch.testing.assert_close(got, want)
    assert shapejit.stats()["graphs"] == expected


def test_force_eager_compiles_nothing_and_default_resumes():
    cf = shapejit.compile(sized)
    shapejit.set_stance("force_eager")
    cf(torch.randn(3, 2), 2)
    assert shapejit.stats()["frames"] == 0
    shapejit.set_stance("default")
    cf(torch.randn(3, 2), 2)
    assert shapejit.stats()["graphs"] == 1


def test_eager_on_recompile_keeps_entries():
    cf = shapejit.compile(sized, dynamic=False)
    cf(torch.randn(3, 2), 2)
    with shapejit.set_stance("eager_on_recompile"):
        for k in (4, 5, 3):
            x = torch.randn(k, 2)
            torch.testing.assert_close(cf(x, 2), sized(x, 2))
    s = shapejit.stats()
    assert s["graphs"] == 1 and s["recompiles"] == 0


def test_fail_on_recompile_message_and_decorator():
    cf = shapejit.compile(sized, dynamic=False)
    cf(torch.randn(3, 2), 2)

    @shapejit.set_stance("fail_on_recompile")
    def serve(x):
        return cf(x, 2)

    torch.testing.assert_close(serve(torch.ones(3, 2)), sized(torch.ones(3, 2), 2))   # a hit
    with pytest.raises(RuntimeError) as e:
        serve(torch.ones(5, 2))
    msg = str(e.value)
    assert "Detected recompile when torch.compile stance is 'fail_on_recompile'" in msg
    assert "function name: 'sized'" in msg and "test_stances.py" in msg
    assert shapejit.config.stance == "default"
    torch.testing.assert_close(cf(torch.ones(5, 2), 2), sized(torch.ones(5, 2), 2))   # default again


def test_eager_then_compile_makes_changed_dims_dynamic(capfd):
    shapejit.set_logs(dynamic=True)
    try:
        cf = shapejit.compile(sized)
        with shapejit.set_stance("eager_then_compile"):
            cf(torch.randn(3, 2), 2)
            assert shapejit.stats()["frames"] == 0      # the first call ran eagerly
            for k in (4, 9, 12):
                torch.testing.assert_close(cf(torch.ones(k, 2), 2), sized(torch.ones(k, 2), 2))
    finally:
        shapejit.set_logs(dynamic=False)
    assert shapejit.stats()["graphs"] == 1
    err = capfd.readouterr().err
    assert "create_symbol s0 = 4 for L['x'].size()[0]" in err
    assert "L['x'].size()[1]" not in err          # the dim that did not change stays static
