"""Row and column kernels in the forms the benchmark suite has: layer_norm whose
normalized_shape is the input's own run-time size (`(x.shape[-1],)` under dynamic shapes)
runs in the fused kernel; column sums (the kept last dim, rows added four at a time) over
row counts around multiples of four;
softmax/log_softmax reading their input directly (no prologue) and after a prologue."""
import pytest
import torch
import torch.nn.functional as F

import shapejit
from shapejit import _C
from lowering import lowering as _lowering

pytestmark = pytest.mark.usefixtures("fresh_shapejit")

RTOL, ATOL = 1e-4, 1e-5


def _graphs(made):
    return [m for m in made if isinstance(m, _C.CompiledGraph)]


def _eager_ops(made):
    ops = {}
    for cg in _graphs(made):
        for k, v in cg.stats["eager_ops"].items():
            ops[k] = ops.get(k, 0) + v
    return ops


def test_layer_norm_runtime_shape_fuses():
    def f(x, w, b):
        return F.gelu(F.layer_norm(x, (x.shape[-1],), w, b))

    torch.manual_seed(0)
    w, b = torch.randn(48), torch.randn(48)
    backend, made = _lowering()
    fn = shapejit.compile(f, backend=backend, dynamic=True)
    for shape in ((2, 5, 48), (3, 7, 48), (1, 1, 48)):
        x = torch.randn(shape)
        torch.testing.assert_close(fn(x, w, b), f(x, w, b), rtol=RTOL, atol=ATOL)
    assert "layer_norm" not in _eager_ops(made), _eager_ops(made)
    assert any("kernel" in cg.step_kinds for cg in _graphs(made))


def test_layer_norm_runtime_shape_two_dims():
    def f(x):
        return F.layer_norm(x, (x.shape[-2], x.shape[-1]))

    torch.manual_seed(1)
    backend, made = _lowering()
    fn = shapejit.compile(f, backend=backend, dynamic=True)
    for shape in ((2, 3, 4, 5), (3, 3, 6, 7)):
        x = torch.randn(shape)
        torch.testing.assert_close(fn(x), f(x), rtol=RTOL, atol=ATOL)
    assert "layer_norm" not in _eager_ops(made), _eager_ops(made)


def test_layer_norm_shape_of_another_tensor_same_symbol():
    """y.shape[-1] equal to x's last dim is captured as x's size (one symbol): fused."""
    def f(x, y):
        return F.layer_norm(x, (y.shape[-1],))

    torch.manual_seed(2)
    backend, made = _lowering()
    fn = shapejit.compile(f, backend=backend, dynamic=True)
    for n in (3, 5):
        x, y = torch.randn(n, 16), torch.randn(2, 16)
        torch.testing.assert_close(fn(x, y), f(x, y), rtol=RTOL, atol=ATOL)
    assert "layer_norm" not in _eager_ops(made), _eager_ops(made)


@pytest.mark.parametrize("rows", [1, 3, 4, 5, 7, 8, 127, 128, 129, 131, 1000])
@pytest.mark.parametrize("cols", [1, 17, 64, 100])
def test_column_sums(rows, cols):
    def f(x, y):
        return x.sum(0), (x * y).mean(0), x.sum(1), (x + 1.0).mean(-2, keepdim=True)

    torch.manual_seed(rows * 131 + cols)
    x, y = torch.randn(rows, cols), torch.randn(rows, cols)
    x3 = torch.randn(2, rows, cols)
    backend, made = _lowering()
    got = shapejit.compile(f, backend=backend)(x, y)
    for g, w in zip(got, f(x, y)):
        torch.testing.assert_close(g, w, rtol=RTOL, atol=ATOL)
    g3 = shapejit.compile(lambda t: t.mean(1), backend=backend)(x3)
    torch.testing.assert_close(g3, x3.mean(1), rtol=RTOL, atol=ATOL)


def test_column_sum_stores_prologue():
    def f(x):
        h = x * 2.0 + 1.0
        return h.sum(0), h

    x = torch.randn(37, 70)
    backend, made = _lowering()
    got = shapejit.compile(f, backend=backend)(x)
    for g, w in zip(got, f(x)):
        torch.testing.assert_close(g, w, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("n", [8, 33, 768])
def test_layer_norm_stores_the_residual_sum_it_reads(n, threads):
    """A pre-LN block: h = x + attn is normalised and read again by the next residual sum.
    One row kernel computes h in its first pass and stores it (output 1) beside the norm
    (output 0), with an epilogue after the norm; both equal eager's."""
    def f(x, a, w, b):
        h = x + a
        y = F.gelu(F.layer_norm(h, (n,), w, b))
        return y * 2.0, h + y

    gen = torch.Generator().manual_seed(n)
    x, a = torch.randn(3, 5, n, generator=gen), torch.randn(3, 5, n, generator=gen)
    w, b = torch.randn(n, generator=gen), torch.randn(n, generator=gen)
    backend, made = _lowering()
    got = shapejit.compile(f, backend=backend)(x, a, w, b)
    for g, want in zip(got, f(x, a, w, b)):
        torch.testing.assert_close(g, want, rtol=RTOL, atol=ATOL)
    fused = [[cg.graph.nodes[i].op for i in nodes] for cg in _graphs(made)
             for kind, nodes in zip(cg.step_kinds, cg.step_nodes) if kind == "kernel"]
    assert any(ops[:2] == ["add", "layer_norm"] for ops in fused), fused


@pytest.mark.parametrize("op", [torch.softmax, torch.log_softmax])
@pytest.mark.parametrize("shape", [(3, 1), (4, 7), (5, 256), (2, 3, 1000)])
def test_softmax_direct_and_prologue(op, shape):
    torch.manual_seed(3)
    x = torch.randn(shape) * 4.0
    x[0, 0] = float("nan") if shape[-1] > 1 else x[0, 0]
    backend, made = _lowering()
    for fn in (lambda t: op(t, -1), lambda t: op(t * 0.5 - 1.0, -1), lambda t: op(t.transpose(0, -1), 0)):
        got = shapejit.compile(fn, backend=backend)(x)
        torch.testing.assert_close(got, fn(x), rtol=RTOL, atol=ATOL, equal_nan=True)
