"""User hints on sizes and unbacked inputs: shapejit.check / constrain_range (and
torch._check / torch._check_is_size inside compiled code), run-time assertions on unbacked
values, size-oblivious decisions, mark_unbacked and unbacked_sources. Graph counts are
checked against torch.compile in the same run; results against eager."""
import logging
import os
import subprocess
import sys

import pytest
import torch
import torch._dynamo
from torch._dynamo.decorators import mark_unbacked as torch_mark_unbacked
from torch._dynamo.testing import CompileCounter

import shapejit
from repo import package_parent


pytestmark = pytest.mark.usefixtures("fresh_shapejit")


# ---------------------------------------------------------------------------------------
# Eager behaviour and bad arguments
# ---------------------------------------------------------------------------------------

def test_check_eager():
    shapejit.check(True)
    shapejit.check(3 > 2, "never shown")
    with pytest.raises(RuntimeError, match="shapejit.check failed: n must be small"):
        shapejit.check(False, "n must be small")
    with pytest.raises(RuntimeError, match="shapejit.check failed: lazy"):
        shapejit.check(False, lambda: "lazy")
    with pytest.raises(TypeError, match="expects a bool.*got int"):
        shapejit.check(1)
    with pytest.raises(TypeError, match="expects a bool.*got Tensor"):
        shapejit.check(torch.tensor(True))
    with pytest.raises(TypeError, match="message must be a str"):
        shapejit.check(True, 5)


def test_constrain_range_eager():
    shapejit.constrain_range(5, min=0, max=10)
    shapejit.constrain_range(5)
    with pytest.raises(ValueError, match=r"11 is outside \[0, 10\]"):
        shapejit.constrain_range(11, min=0, max=10)
    with pytest.raises(ValueError, match=r"-1 is outside \[0, inf\]"):
        shapejit.constrain_range(-1, min=0)
    with pytest.raises(ValueError, match=r"min \(4\) is greater than max \(2\)"):
        shapejit.constrain_range(3, min=4, max=2)
    with pytest.raises(TypeError, match="n must be an int, got float"):
        shapejit.constrain_range(2.0, min=0)
    with pytest.raises(TypeError, match="max must be an int or None, got str"):
        shapejit.constrain_range(2, max="9")
    with pytest.raises(TypeError):
        shapejit.constrain_range(2, 0, 9)   # bounds are keyword-only, as in torch


def test_mark_unbacked_bounds():
    t = torch.ones(4)
    with pytest.raises(ValueError, match=r"min \(5\) is greater than max \(2\)"):
        shapejit.mark_unbacked(t, 0, min=5, max=2)
    with pytest.raises(ValueError, match="min must be >= 0"):
        shapejit.mark_unbacked(t, 0, min=-1)
    with pytest.raises(TypeError, match="unsupported argument"):
        shapejit.mark_unbacked(t, 0, strict=True)
    shapejit.mark_unbacked(t, 0, min=2, max=64)
    assert t._dynamo_unbacked_indices == {0} and t._dynamo_unbacked_range == {0: (2, 64)}


# ---------------------------------------------------------------------------------------
# Against torch.compile
# ---------------------------------------------------------------------------------------

def checked_zeros(x, n):
    k = n.sum().item()
    torch._check(k >= 0)
    torch._check(k <= 5)
    return torch.zeros(k) + x.sum()


def checked_branch(x, n):
    k = n.sum().item()
    torch._check(k >= 2)
    if k >= 1:          # decided by the range the check gave: no break
        return x + 1
    return x - 1


def item_zeros(x, n):
    k = n.sum().item()   # zeros(k): k >= 0 asserted, then never 0 or 1 (size-oblivious)
    return torch.zeros(k) + x.sum()


def item_view(x, n):
    k = n.sum().item()
    return x.view(k, -1).sum(0)


def unb_double(x):
    return x * 2


def unb_branch(x):
    if x.shape[0] > 5:
        return x + 1
    return x - 1


def unb_view(x):
    return x.view(-1, 2).sum(0)


def unb_add(x, y):
    return x + y


def unb_checked_branch(x):
    torch._check(x.shape[0] >= 4)
    if x.shape[0] > 2:
        return x + 1
    return x - 1


def unb_matmul(x, w):
    return torch.relu(x @ w).sum(1)


def unb_cat(x, y):
    return torch.cat([x, y]).softmax(0)


ITEM = [
    (checked_zeros, [(torch.randn(3), torch.tensor([4])), (torch.randn(3), torch.tensor([2]))]),
    (checked_branch, [(torch.randn(3), torch.tensor([4])), (torch.randn(3), torch.tensor([7]))]),
    (item_zeros, [(torch.randn(3), torch.tensor([4])), (torch.randn(3), torch.tensor([2]))]),
    (item_view, [(torch.randn(12), torch.tensor([3])), (torch.randn(12), torch.tensor([4]))]),
]

UNBACKED = [
    (unb_double, [(torch.randn(3),), (torch.randn(1),), (torch.randn(0),), (torch.randn(7),)]),
    (unb_branch, [(torch.randn(3),), (torch.randn(8),)]),
    (unb_view, [(torch.randn(6),), (torch.randn(8),)]),
    (unb_add, [(torch.randn(6), torch.randn(6)), (torch.randn(8), torch.randn(8))]),
    (unb_add, [(torch.randn(6), torch.randn(1)), (torch.randn(8), torch.randn(1))]),
    (unb_checked_branch, [(torch.randn(6),), (torch.randn(9),)]),
    (unb_matmul, [(torch.randn(5, 4), torch.randn(4, 3)), (torch.randn(1, 4), torch.randn(4, 3)),
                  (torch.randn(9, 4), torch.randn(4, 3))]),
    (unb_cat, [(torch.randn(5), torch.randn(3)), (torch.randn(2), torch.randn(3))]),
]


def _clone(args):
    return tuple(a.clone() for a in args)


def _torch_counts(fn, calls, mark):
    torch._dynamo.reset()
    cnt = CompileCounter()
    counts = []
    with torch._dynamo.config.patch(capture_scalar_outputs=True):
        g = torch.compile(fn, backend=cnt)
        for args in calls:
            args = _clone(args)
            if mark:
                torch_mark_unbacked(args[0], 0)
            torch.testing.assert_close(g(*args), fn(*args))
            counts.append(cnt.frame_count)
    torch._dynamo.reset()
    return counts


def _shapejit_counts(fn, calls, mark):
    shapejit.reset()
    counts = []
    with shapejit.config.patch(capture_scalar_outputs=True):
        g = shapejit.compile(fn)
        for args in calls:
            args = _clone(args)
            if mark:
                shapejit.mark_unbacked(args[0], 0)
            torch.testing.assert_close(g(*args), fn(*args))
            counts.append(shapejit.stats()["graphs"])
    return counts


@pytest.mark.parametrize("fn,calls", ITEM, ids=[f.__name__ for f, _ in ITEM])
def test_item_checks_match_torch(fn, calls):
    assert _shapejit_counts(fn, calls, False) == _torch_counts(fn, calls, False)


@pytest.mark.parametrize("fn,calls", UNBACKED, ids=[f.__name__ + str(i) for i, (f, _) in enumerate(UNBACKED)])
def test_mark_unbacked_matches_torch(fn, calls):
    assert _shapejit_counts(fn, calls, True) == _torch_counts(fn, calls, True)


def test_shapejit_check_is_torch_check():
    """shapejit.check and constrain_range capture like torch._check: no break."""
    def f(x, n):
        k = n.sum().item()
        shapejit.check(k >= 0)
        shapejit.constrain_range(k, max=5)
        if k < 6:       # decided by the range
            return torch.zeros(k) + x.sum()
        return x

    with shapejit.config.patch(capture_scalar_outputs=True):
        g = shapejit.compile(f)
        for k in (4, 2, 5, 0):
            x, n = torch.randn(3), torch.tensor([k])
            torch.testing.assert_close(g(x, n), f(x, n))
    st = shapejit.stats()
    assert st["graphs"] == 1 and st["graph_breaks"] == 0 and st["recompiles"] == 0


def test_failed_assertion_raises_the_users_error():
    """A run-time assertion that fails reruns the frame in the interpreter, so the user's
    own check raises its own error (torch raises from inside its graph)."""
    with shapejit.config.patch(capture_scalar_outputs=True):
        g = shapejit.compile(checked_zeros)
        g(torch.randn(3), torch.tensor([4]))
        with pytest.raises(RuntimeError, match="Expected cond to be True"):
            g(torch.randn(3), torch.tensor([7]))

        def f(x, n):
            k = n.sum().item()
            shapejit.check(k <= 5, "k too big")
            return x * k

        h = shapejit.compile(f)
        torch.testing.assert_close(h(torch.ones(2), torch.tensor([3])), torch.full((2,), 3.))
        with pytest.raises(RuntimeError, match="k too big"):
            h(torch.ones(2), torch.tensor([9]))
    assert shapejit.stats()["recompiles"] == 0


def test_graph_holds_the_assertions():
    graphs = []
    with shapejit.config.patch(capture_scalar_outputs=True):
        shapejit.compile(checked_zeros, backend=lambda g, ex: graphs.append(g) or g)(torch.randn(3),
                                                                                      torch.tensor([4]))
    code = graphs[0].code if hasattr(graphs[0], "code") else str(graphs[0])
    assert code.count("_sym_assert") == 2, code
    assert "0 <= u0" in code and "u0 <= 5" in code


def test_check_logs(capfd):
    shapejit.set_logs(dynamic=logging.DEBUG)
    with shapejit.config.patch(capture_scalar_outputs=True):
        shapejit.compile(checked_zeros)(torch.randn(3), torch.tensor([4]))
    err = capfd.readouterr().err
    assert "runtime_assert 0 <= u0 [guard added] torch._check(k >= 0)" in err
    assert "runtime_assert u0 <= 5 [guard added] torch._check(k <= 5)" in err
    assert "_update_var_to_range u0 = VR[0, 5] (update)" in err


def test_check_on_backed_size_is_a_guard():
    """On a backed size the check is decided by the hint and guarded, as in torch: a
    size that breaks it recompiles, and the recompiled check raises eagerly."""
    def f(x):
        shapejit.check(x.shape[0] > 3)
        return x * 2

    g = shapejit.compile(f, dynamic=True)
    for n in (5, 9):
        x = torch.randn(n)
        torch.testing.assert_close(g(x), x * 2)
    assert shapejit.stats()["graphs"] == 1
    with pytest.raises(RuntimeError, match="shapejit.check failed"):
        g(torch.randn(2))


def test_branch_on_unbacked_is_a_break_with_reason():
    x = torch.randn(3)
    shapejit.mark_unbacked(x, 0)
    ex = shapejit.explain(unb_branch)(x)
    assert ex.graph_break_count == 1
    assert "data-dependent" in ex.break_reasons[0].reason and "u0" in ex.break_reasons[0].reason


def test_unbacked_dim_has_no_guard_and_no_01_specialisation():
    g = shapejit.compile(unb_double)
    for n in (3, 1, 0, 70):
        x = torch.randn(n)
        shapejit.mark_unbacked(x, 0)
        torch.testing.assert_close(g(x), x * 2)
    st = shapejit.stats()
    assert st["graphs"] == 1 and st["recompiles"] == 0
    x = torch.randn(4)
    shapejit.mark_unbacked(x, 0)
    guards = "\n".join(str(gd) for gd in shapejit.explain(unb_double)(x).out_guards)
    assert "size=[None]" in guards and "L['x'].size()[0]" not in guards


def test_mark_unbacked_range_is_asserted():
    """mark_unbacked(min=, max=) gives the symbol its range: a relation it decides needs
    no break, and nothing is guarded."""
    def f(x):
        if x.shape[0] >= 2:
            return x + 1
        return x - 1

    g = shapejit.compile(f)
    for n in (3, 8):
        x = torch.randn(n)
        shapejit.mark_unbacked(x, 0, min=2, max=16)
        torch.testing.assert_close(g(x), x + 1)
    st = shapejit.stats()
    assert st["graphs"] == 1 and st["graph_breaks"] == 0


_CHILD = """
import torch, shapejit
def f(x):
    return (x * 2).sum(0)
g = shapejit.compile(f)
for n in (3, 1, 0, 7):
    x = torch.randn(n, 2)
    torch.testing.assert_close(g(x), f(x))
ex = shapejit.explain(f)(torch.randn(5, 2))
print("GRAPHS", shapejit.stats()["graphs"], "RECOMPILES", shapejit.stats()["recompiles"])
print("GUARDS", [str(gd) for gd in ex.out_guards if "TENSOR_MATCH" in str(gd)])
"""


def test_unbacked_sources_env():
    env = {k: v for k, v in os.environ.items() if not k.endswith("_SOURCES") and k != "TORCH_LOGS"}
    root = package_parent()
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in [env.get("PYTHONPATH")] if p])
    env["TORCH_COMPILE_UNBACKED_SOURCES"] = "L['x']:0"
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, cwd=root,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "GRAPHS 1 RECOMPILES 0" in out.stdout, out.stdout
    assert "size=[None, 2]" in out.stdout, out.stdout
