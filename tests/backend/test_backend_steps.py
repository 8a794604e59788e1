"""The cpu backend's step kinds come from one table (backend/steps.def): each step of a
compiled graph names its kind (CompiledGraph.step_kinds, in run order), and the kinds'
counters are in CompiledGraph.stats."""
import pytest
import torch
import torch.nn.functional as F

import shapejit
from lowering import lowering as _lowering
from shapejit import _C

pytestmark = pytest.mark.usefixtures("fresh_shapejit")



def _rows():
    """(enum name, name) of each row of backend/steps.def, as the build has them."""
    return [(kind, name) for kind, name, _ in _C._step_kinds()]


def test_table_names():
    rows = _rows()
    assert [k for k, _ in rows] == [n.upper() for _, n in rows]
    assert {n for _, n in rows} == {"kernel", "matmul", "conv", "cat", "embed", "attention", "alias", "views", "const",
                                     "eager"}
    assert {n for _, n, lowers in _C._step_kinds() if lowers} == {"kernel", "matmul", "conv", "cat", "embed",
                                                                  "attention"}


def test_each_kind_runs_and_counts():
    def f(x, w, c):
        h = torch.relu(x @ w)                              # matmul with a relu post-op
        h = F.dropout(h, 0.1, training=False)              # alias
        v = h.view(8, 4, 16).transpose(0, 1).reshape(4, 128)   # a view chain
        y = torch.cat([v, v * 2.0], dim=1)                 # cat
        z = torch.tanh(y + 1.0) * 0.5                      # kernel
        return F.conv1d(z.unsqueeze(0), c)                 # unsqueeze: eager; conv

    torch.manual_seed(0)
    x, w, c = torch.randn(8, 16), torch.randn(16, 64), torch.randn(3, 4, 3)
    backend, made = _lowering()
    fn = shapejit.compile(f, backend=backend)
    torch.testing.assert_close(fn(x, w, c), f(x, w, c), rtol=1e-4, atol=1e-4)
    cg = [m for m in made if hasattr(m, "step_kinds")]
    assert len(cg) == 1
    kinds = cg[0].step_kinds
    assert len(kinds) == cg[0].stats["steps"]
    names = {n for _, n in _rows()}
    assert set(kinds) <= names
    assert {"matmul", "alias", "views", "cat", "kernel", "conv", "eager"} <= set(kinds), kinds
    st = cg[0].stats
    assert st["matmul_steps"] == kinds.count("matmul") and st["matmul_calls"] == 1
    assert st["conv_steps"] == kinds.count("conv")
    assert st["cat_steps"] == kinds.count("cat") and st["cat_calls"] == 1
    assert st["view_chains"] == kinds.count("views")
    assert st["kernels"] == kinds.count("kernel") and st["kernel_calls"] >= 1
    assert st["eager_steps"] == kinds.count("eager") == sum(st["eager_ops"].values())
    assert "unsqueeze" in st["eager_ops"]


def test_profile_step_times_and_nodes():
    def f(x, w):
        h = torch.relu(x @ w)
        return torch.tanh(h.unsqueeze(0) + 1.0)

    x, w = torch.randn(8, 16), torch.randn(16, 32)
    backend, made = _lowering()
    fn = shapejit.compile(f, backend=backend)
    fn(x, w)
    cg = made[0]
    n = len(cg.step_kinds)
    assert cg.profile is False and cg.step_times == (0.0,) * n
    # every non-input node is run by exactly one step; step_nodes names them
    nodes = cg.step_nodes
    assert len(nodes) == n and all(nodes)
    ops = [[cg.graph.nodes[i].op for i in s] for s in nodes]
    assert ["unsqueeze"] in ops
    ran = sorted(i for s in nodes for i in s)
    assert ran == [i for i, nd in enumerate(cg.graph.nodes) if nd.op != "input"]
    cg.profile = True
    for _ in range(3):
        torch.testing.assert_close(fn(x, w), f(x, w))
    t = cg.step_times
    assert len(t) == n and all(s > 0 for s in t)
    cg.profile = True   # starts from zero
    assert cg.step_times == (0.0,) * n
    cg.profile = False
    assert cg.profile is False and cg.step_times == (0.0,) * n
