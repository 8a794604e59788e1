"""Modules with parameters are guarded by their type, as torch.compile guards the modules
it inlines: each parameter, buffer and attribute their forward reads is guarded through
its own source, so another instance of the class runs the same compiled code on its own
tensors. A graph break inside a layer's forward then compiles once for every layer (not
once per layer, which ran past cache_size_limit and sent the deeper layers to eager), and
the backend's kept weight copies (a row-major copy per linear weight, a reordered copy
per convolution weight) hold one slot per layer instead of remaking one copy per call.
Every value is compared with eager; graph counts with torch.compile's (backend "eager")."""
import functools
import types
import warnings

import pytest
import torch
import torch._dynamo
import torch.nn as nn
from torch._dynamo.testing import CompileCounter

import shapejit
from shapejit import _C


@pytest.fixture(autouse=True)
def _fresh(fresh_compilers):
    yield


def _break():
    print("", end="")   # a graph break: print is not captured


class Block(nn.Module):
    def __init__(self, d=32, bias=True, scale=1.0):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 2 * d, bias=bias)
        self.fc2 = nn.Linear(2 * d, d)
        self.scale = scale

    def forward(self, x):
        h = torch.relu(self.fc1(self.ln(x)))
        _break()
        return x + self.scale * self.fc2(h)


class Stack(nn.Module):
    def __init__(self, blocks):
        super().__init__()
        self.layers = nn.ModuleList(blocks)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def _torch_graphs(model, x, calls=3):
    torch._dynamo.reset()
    cnt = CompileCounter()
    cf = torch.compile(model, backend=cnt)
    with torch.no_grad():
        for _ in range(calls):
            cf(x)
    torch._dynamo.reset()
    return cnt.frame_count


def _graphs(backend="cpu"):
    made = []

    def be(gm, ex):
        cg = shapejit.backends.cpu(gm, ex) if backend == "cpu" else gm
        made.append(cg)
        return cg

    return be, made


def _stat(made, key):
    return sum(m.stats.get(key, 0) for m in made if isinstance(m, _C.CompiledGraph))


def _check(model, x, calls=3, backend="cpu"):
    be, made = _graphs(backend)
    cf = shapejit.compile(model, backend=be)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # a cache_size_limit warning fails the test
        with torch.no_grad():
            for i in range(calls):
                torch.testing.assert_close(cf(x), model(x), msg=f"call {i}")
    return shapejit.stats(), made


@pytest.mark.parametrize("n", [3, 12])
def test_break_inside_layer_compiles_once_for_all_layers(n):
    torch.manual_seed(0)
    model = Stack([Block() for _ in range(n)]).eval()
    x = torch.randn(2, 8, 32)
    s, made = _check(model, x)
    theirs = _torch_graphs(model, x)
    assert s["graphs"] <= theirs, (s, theirs)
    assert s["recompiles"] == 0, s
    assert s["graphs"] == 2, s   # the layer's two halves; the loop frame runs around them


def test_kept_weight_copies_one_per_layer():
    """The two linear steps are shared by every layer; each keeps one row-major copy per
    layer's weight, made on the first call and reused after."""
    torch.manual_seed(0)
    n = 10
    model = Stack([Block() for _ in range(n)]).eval()
    x = torch.randn(2, 8, 32)
    be, made = _graphs()
    cf = shapejit.compile(model, backend=be)
    with torch.no_grad():
        torch.testing.assert_close(cf(x), model(x))
        first = _stat(made, "matmul_weight_copies")
        for _ in range(4):
            torch.testing.assert_close(cf(x), model(x))
        assert _stat(made, "matmul_weight_copies") == first, made
        assert first == 2 * n, first
        # an in-place write to one layer's weight remakes that layer's copy only
        model.layers[3].fc1.weight.mul_(0.5)
        torch.testing.assert_close(cf(x), model(x))
        assert _stat(made, "matmul_weight_copies") == first + 1


class ConvBlock(nn.Module):
    def __init__(self, c=8):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        _break()
        return y + x


def test_conv_layers_share_steps_and_keep_their_weights():
    torch.manual_seed(0)
    n = 9
    model = nn.Sequential(*[ConvBlock() for _ in range(n)]).eval()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):   # running stats unlike the defaults: a real fold
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    x = torch.randn(2, 8, 16, 16)
    be, made = _graphs()
    cf = shapejit.compile(model, backend=be)
    with torch.no_grad():
        for i in range(4):
            torch.testing.assert_close(cf(x), model(x), msg=f"call {i}")
            if i == 0:
                first = _stat(made, "conv_weight_reorders")
    s = shapejit.stats()
    assert s["recompiles"] == 0 and s["graphs"] == 2, s
    assert _stat(made, "conv_weight_reorders") == first, made
    assert first in (0, n), first   # one reordered copy per layer, or none (plain layout)


def test_instances_that_differ_recompile_or_read_their_own_values():
    """What the compiled code read of the first layer is guarded on the others: a
    different attribute value, a missing bias, a different width."""
    torch.manual_seed(0)
    blocks = [Block(), Block(scale=0.5), Block(bias=False), Block(), Block(d=32)]
    model = Stack(blocks).eval()
    x = torch.randn(2, 8, 32)
    s, _ = _check(model, x, backend="eager")
    theirs = _torch_graphs(model, x)
    assert s["graphs"] <= theirs, (s, theirs)


def test_replaced_parameter_and_in_place_write():
    torch.manual_seed(0)
    model = Stack([Block() for _ in range(4)]).eval()
    x = torch.randn(2, 8, 32)
    cf = shapejit.compile(model, backend="cpu")
    with torch.no_grad():
        torch.testing.assert_close(cf(x), model(x))
        model.layers[1].fc2.weight = nn.Parameter(torch.randn(32, 64))
        torch.testing.assert_close(cf(x), model(x))
        model.layers[2].fc1.bias.add_(1.0)
        torch.testing.assert_close(cf(x), model(x))
        model.layers[0].ln.eps = 1e-2
        torch.testing.assert_close(cf(x), model(x))


def test_tied_modules_and_weights():
    """One module used by two layers, and two layers whose linears share a weight."""
    torch.manual_seed(0)
    a, b, c = Block(), Block(), Block()
    c.fc1.weight = a.fc1.weight
    model = Stack([a, b, a, c]).eval()
    x = torch.randn(2, 8, 32)
    s, _ = _check(model, x)
    assert s["recompiles"] == 0, s


class Plain(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        return torch.tanh(self.fc(x))


@pytest.mark.parametrize("backend", ["eager", "cpu"])
def test_forward_assigned_on_the_instance(backend):
    """An instance attribute named forward is what nn.Module.__call__ runs: captured in
    the graph when it is there at compile time, and guarded absent otherwise (assigning
    one later recompiles)."""
    torch.manual_seed(0)
    blocks = [Plain() for _ in range(3)]
    blocks[1].forward = lambda x: x * 2.0
    model = Stack(blocks).eval()
    x = torch.randn(4, 16)
    s, _ = _check(model, x, backend=backend)
    assert s["graphs"] == 1 and s["graph_breaks"] == 0, s
    cf = shapejit.compile(model, backend=backend)
    with torch.no_grad():
        torch.testing.assert_close(cf(x), model(x))
        blocks[2].forward = types.MethodType(lambda self, x: self.fc(x) - 1.0, blocks[2])
        torch.testing.assert_close(cf(x), model(x))
        del blocks[1].forward
        torch.testing.assert_close(cf(x), model(x))
        blocks[0].forward = functools.partial(torch.mul, other=3.0)
        torch.testing.assert_close(cf(x), model(x))


def test_identity_guards_when_asked():
    """inline_inbuilt_nn_modules=False: modules with parameters are guarded by identity,
    one compiled entry per layer."""
    torch.manual_seed(0)
    model = Stack([Block() for _ in range(3)]).eval()
    x = torch.randn(2, 8, 32)
    old = shapejit.config.inline_inbuilt_nn_modules
    shapejit.config.inline_inbuilt_nn_modules = False
    try:
        s, _ = _check(model, x, backend="eager")
    finally:
        shapejit.config.inline_inbuilt_nn_modules = old
    assert s["graphs"] == 6, s
