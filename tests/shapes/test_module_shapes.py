"""nn.Module attributes under the shape knobs: allow_unspec_int_on_nn_module,
force_nn_module_property_static_shapes, force_parameter_static_shapes and mark_static on a
module class. Each scenario's graph count equals torch.compile's in the same run, and
results equal eager."""
import pytest
import torch
import torch._dynamo
import torch.nn as nn
from torch._dynamo.testing import CompileCounter

import shapejit


@pytest.fixture(autouse=True)
def _fresh():
    shapejit.reset()
    yield
    shapejit.reset()


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.k = 1
        self.fc = nn.Linear(6, 6)

    def forward(self, x):
        return self.fc(x) * self.k + self.k


class Table(nn.Module):
    """A plain tensor attribute (not a parameter or buffer) of a user module."""
    def __init__(self):
        super().__init__()
        self.table = torch.randn(4, 6)

    def forward(self, x):
        return x @ self.table.t() + self.table.shape[0]


class Norm(nn.Module):
    """A torch.nn module's buffer read directly."""
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(4).eval()

    def forward(self, x):
        return x + self.bn.running_mean.shape[0]


class Grow(nn.Module):
    """A parameter whose size changes between calls (replaced)."""
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4))

    def forward(self, x):
        return x.sum() * self.w.sum() + self.w.shape[0]


def ints(m):
    for k in (1, 2, 3, 4):
        m.k = k
        yield (torch.randn(3, 6),)


def tables(m):
    for n in (4, 5, 7, 9):
        m.table = torch.randn(n, 6)
        yield (torch.randn(3, 6),)


def norms(m):
    for n in (4, 5, 7, 9):
        m.bn = nn.BatchNorm1d(n).eval()
        yield (torch.randn(3, n),)


def params(m):
    for n in (4, 5, 7, 9):
        m.w = nn.Parameter(torch.randn(n))
        yield (torch.randn(3),)


SCENARIOS = [("int_attr", Scaled, ints), ("tensor_attr", Table, tables),
             ("nn_buffer", Norm, norms), ("parameter", Grow, params)]
CONFIGS = [{}, {"allow_unspec_int_on_nn_module": True},
           {"force_nn_module_property_static_shapes": False},
           {"force_parameter_static_shapes": False}]


def _count(system, cls, scenario, marked, cfg):
    torch.manual_seed(0)
    m = cls()
    if marked:   # a fresh subclass, so the class mark does not leak into other tests
        m.__class__ = type("Marked" + cls.__name__, (cls,), {})
        (torch._dynamo.mark_static if system == "torch" else shapejit.mark_static)(type(m))
    if system == "torch":
        torch._dynamo.reset()
        cnt = CompileCounter()
        with torch._dynamo.config.patch(**cfg):
            cm = torch.compile(m, backend=cnt)
            for args in scenario(m):
                torch.testing.assert_close(cm(*args), m(*args))
        torch._dynamo.reset()
        return cnt.frame_count
    shapejit.reset()
    with shapejit.config.patch(**cfg):
        cm = shapejit.compile(m)
        for args in scenario(m):
            torch.testing.assert_close(cm(*args), m(*args))
    return shapejit.stats()["graphs"]


@pytest.mark.parametrize("marked", [False, True], ids=["plain", "marked_static"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=["default", "unspec_int", "props_dynamic", "params_dynamic"])
@pytest.mark.parametrize("name,cls,scenario", SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_module_knobs_match_torch(name, cls, scenario, cfg, marked):
    expected = _count("torch", cls, scenario, marked, cfg)
    assert _count("shapejit", cls, scenario, marked, cfg) == expected


def test_mark_static_module_rejects_dim():
    with pytest.raises(TypeError, match="module"):
        shapejit.mark_static(Scaled, 0)
