"""Unbacked sizes: t.item() under capture_scalar_outputs and nonzero() /
masked_select() under capture_dynamic_output_shape_ops give unbacked symbols u<N>; with the knobs off they break
the graph; a branch on an unbacked value breaks the graph. Results equal eager, and the
graph counts equal torch.compile's in the same run."""
import pytest
import torch

import shapejit
from unbacked_oracle import same, torch_graphs


pytestmark = pytest.mark.usefixtures("fresh_shapejit")


def nonzero_sum(x):
    idx = x.nonzero()
    return idx.sum() + idx.shape[0] * 2, idx


def nonzero_method_chain(x):
    idx = torch.nonzero(x > 0)
    return (idx * 2 + 1).float().mean(0), idx.shape[0] - 1


def item_arith(x, y):
    n = x.sum().item()
    return y * n + n * 3, n - 1, n // 2


def item_branch(x, y):
    n = x.sum().item()
    if n > 3:
        return y + 1
    return y - 1


def item_float(x, y):
    return y * x.sum().item()


def masked_select_stats(x, m):
    sel = torch.masked_select(x, m)
    return sel.sum() / (sel.shape[0] + 1), sel * 2


def masked_select_broadcast(x, t):
    sel = x.masked_select(x > t)          # mask (3, 4) against x (3, 4); t broadcasts
    return sel.exp().mean(), sel.shape[0] + 1


CASES = [
    (masked_select_stats, lambda: (torch.arange(6.), torch.tensor([True, False, True, True, False, False]))),
    (masked_select_broadcast, lambda: (torch.randn(3, 4, generator=torch.Generator().manual_seed(1)),
                                       torch.zeros(4))),
    (nonzero_sum, lambda: (torch.tensor([0., 1., 2., 0.]),)),
    (nonzero_method_chain, lambda: (torch.randn(5, 3, generator=torch.Generator().manual_seed(3)),)),
    (item_arith, lambda: (torch.tensor([2, 3]), torch.randn(3))),
    (item_branch, lambda: (torch.tensor([2, 3]), torch.randn(3))),
    (item_branch, lambda: (torch.tensor([0, 1]), torch.randn(3))),
    (item_float, lambda: (torch.tensor([0.5, 1.5]), torch.randn(3))),
]


@pytest.mark.parametrize("knob", [False, True], ids=["off", "on"])
@pytest.mark.parametrize("fn,make", CASES, ids=[f.__name__ + str(i) for i, (f, _) in enumerate(CASES)])
def test_graph_counts_match_torch(fn, make, knob):
    args = make()
    want = fn(*args)
    expected, tout = torch_graphs(fn, args, capture_scalar_outputs=knob, capture_dynamic_output_shape_ops=knob)
    same(tout, want)
    with shapejit.config.patch(capture_scalar_outputs=knob, capture_dynamic_output_shape_ops=knob):
        got = shapejit.compile(fn)(*args)
    same(got, want)
    assert shapejit.stats()["graphs"] == expected


def test_knobs_on_capture_without_breaks_and_log(capfd):
    shapejit.set_logs(dynamic=True)
    with shapejit.config.patch(capture_scalar_outputs=True, capture_dynamic_output_shape_ops=True):
        cf = shapejit.compile(nonzero_sum)
        for x in (torch.tensor([0., 1., 2., 0.]), torch.tensor([3., 0., 0., 1.]), torch.tensor([1., 1., 1., 1.])):
            same(cf(x), nonzero_sum(x))
        ci = shapejit.compile(item_arith)
        for a in ([2, 3], [7, -1], [0, 0]):
            x, y = torch.tensor(a), torch.randn(3)
            same(ci(x, y), item_arith(x, y))
    s = shapejit.stats()
    # the data changes, the sizes do not: one graph each, never recompiled
    assert s["graphs"] == 2 and s["graph_breaks"] == 0 and s["recompiles"] == 0
    err = capfd.readouterr().err
    assert "create_unbacked_symint u0 [0, int_oo] (idx = x.nonzero()" in err
    assert "create_unbacked_symint u0 [-int_oo, int_oo] (n = x.sum().item()" in err


def test_knobs_off_break_with_reasons():
    with shapejit.config.patch(capture_scalar_outputs=False, capture_dynamic_output_shape_ops=False):
        ex = shapejit.explain(nonzero_sum)(torch.tensor([0., 1.]))
        (r,) = ex.break_reasons
        assert "dynamic shape operator" in r.reason and "capture_dynamic_output_shape_ops" in r.reason
        ex = shapejit.explain(item_arith)(torch.tensor([2, 3]), torch.randn(3))
        (r,) = ex.break_reasons
        assert "Tensor.item()" in r.reason
    with shapejit.config.patch(capture_scalar_outputs=True):
        ex = shapejit.explain(item_branch)(torch.tensor([2, 3]), torch.randn(3))
        (r,) = ex.break_reasons
        assert "data-dependent" in r.reason and "u0" in r.reason


def test_branch_on_unbacked_breaks_and_runs_both_ways():
    with shapejit.config.patch(capture_scalar_outputs=True):
        cf = shapejit.compile(item_branch)
        for a in ([2, 3], [0, 1], [5, 5]):
            x, y = torch.tensor(a), torch.randn(3)
            same(cf(x, y), item_branch(x, y))
    assert shapejit.stats()["graph_breaks"] >= 1


def test_masked_select_counts_change_without_recompile():
    with shapejit.config.patch(capture_dynamic_output_shape_ops=True):
        cf = shapejit.compile(masked_select_stats)
        x = torch.arange(6.)
        for bits in ([1, 0, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1]):
            m = torch.tensor(bits, dtype=torch.bool)
            same(cf(x, m), masked_select_stats(x, m))
    s = shapejit.stats()
    assert s["graphs"] == 1 and s["recompiles"] == 0 and s["graph_breaks"] == 0
