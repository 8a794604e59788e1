"""RMS norm as one row kernel (plan_rms.c): x * rsqrt(mean(x ** 2, -1, keepdim) + eps),
times a weight of the last dim or not, in the spellings transformers' T5, Llama and Qwen2
norms use (pow(2), x * x, square(); the weight on either side). Compiled vs eager for row
lengths around the vector widths, rank 2 and 3, a transposed input (the strided loops),
dynamic shapes, a residual sum before it that is read again later, an epilogue after it;
and the near misses that must stay as they were (keepdim=False, another dim, the mean read
twice, a weight of another shape).

The rms_norm op itself (F.rms_norm, torch.rms_norm, nn.RMSNorm; plan_reduce.c): each
spelling and form (eps given or None, a weight or none, one or two normalized dims, an int
or a tuple for the module), static and dynamic shapes, rows 0 and 1, strided and
channels-last inputs, a fused epilogue and prologue: one graph with no break (as
torch.compile makes), eager's values and layout, a kernel for float32 and torch's own call
for the rest (float64, float16, a weight of another dtype, a result that needs grad)."""
import pytest
import torch
import torch._dynamo
import torch.nn.functional as F

import shapejit
from shapejit import _C
from graph_counter import GraphCounter
from lowering import kernel_ops, lowering as _lowering

pytestmark = pytest.mark.usefixtures("fresh_shapejit")

RTOL, ATOL = 1e-5, 1e-5   # the sum of squares in another order than eager's


def _rms_kernels(made):
    """Per compiled graph, the kernel steps that hold a mean and an rsqrt together."""
    return [sum({"mean", "rsqrt"} <= set(ops) for ops in kernels) for kernels in kernel_ops(made)]


def _run(f, inputs, fused, dynamic=False):
    backend, made = _lowering()
    cf = shapejit.compile(f, backend=backend, dynamic=dynamic)
    for args in inputs:
        want = f(*[a.clone() for a in args])
        got = cf(*args)
        want = want if isinstance(want, tuple) else (want,)
        got = got if isinstance(got, tuple) else (got,)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            torch.testing.assert_close(g, w, rtol=RTOL, atol=ATOL, equal_nan=True)
    assert made and _rms_kernels(made) == [fused] * len(made), _rms_kernels(made)
    return made


def t5_norm(x, w):
    var = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
    x = x * torch.rsqrt(var + 1e-6)
    return w * x


def llama_norm(x, w):
    h = x.to(torch.float32)
    var = (h * h).mean(-1, keepdim=True)
    h = h * torch.rsqrt(var + 1e-5)
    return w * h.to(x.dtype)


def plain_norm(x, w):
    return torch.rsqrt(1e-6 + x.square().mean(dim=-1, keepdim=True)) * x


@pytest.mark.parametrize("n", [1, 15, 16, 17, 64, 255, 1023])
@pytest.mark.parametrize("norm", [t5_norm, llama_norm, plain_norm])
def test_norms_of_every_spelling(norm, n, threads):
    gen = torch.Generator().manual_seed(n)
    x, w = torch.randn(3, 7, n, generator=gen), torch.randn(n, generator=gen)
    _run(norm, [(x, w)], fused=1)


def test_rank_two_weight_after_and_strided():
    def f(x, w):
        var = x.pow(2).mean(-1, keepdim=True)
        return (x * torch.rsqrt(var + 1e-6)) * w

    gen = torch.Generator().manual_seed(1)
    w = torch.randn(40, generator=gen)
    _run(f, [(torch.randn(100, 40, generator=gen), w)], fused=1)
    _run(f, [(torch.randn(40, 100, generator=gen).t(), w)], fused=1)


def test_dynamic_rows_and_length():
    gen = torch.Generator().manual_seed(2)
    xs = [(torch.randn(2, s, h, generator=gen), torch.randn(h, generator=gen))
          for s, h in ((5, 32), (9, 32), (13, 48))]
    _run(t5_norm, xs, fused=1, dynamic=True)


def test_residual_before_read_again_and_epilogue_after():
    def f(a, b, w):
        h = a + b
        var = h.pow(2).mean(-1, keepdim=True)
        y = w * (h * torch.rsqrt(var + 1e-6))
        return F.gelu(y) * 2.0, h + 1.0

    gen = torch.Generator().manual_seed(3)
    a, b = torch.randn(4, 16, 64, generator=gen), torch.randn(4, 16, 64, generator=gen)
    _run(f, [(a, b, torch.randn(64, generator=gen))], fused=1)


def test_near_misses_stay_apart():
    gen = torch.Generator().manual_seed(4)
    x, w = torch.randn(6, 32, generator=gen), torch.randn(32, generator=gen)

    def no_keepdim(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1) + 1e-6).unsqueeze(-1)

    def other_dim(x, w):
        return x * torch.rsqrt(x.pow(2).mean(0, keepdim=True) + 1e-6)

    def mean_read_twice(x, w):
        var = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(var + 1e-6), var

    def cube(x, w):
        return x * torch.rsqrt(x.pow(3).mean(-1, keepdim=True) + 1e-6)

    def weight_of_rows(x, w):
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)) * w[:6, None]

    # the weight of rows is no weight of the last dim: the norm fuses, the product does not
    for f, fused in ((no_keepdim, 0), (other_dim, 0), (mean_read_twice, 0), (cube, 0), (weight_of_rows, 1)):
        shapejit.reset()
        _run(f, [(x, w)], fused=fused)


def test_weight_made_beside_the_residual_sum():
    """A weight computed in the pointwise kernel the norm takes as prologue (possible for a
    rank-1 x): the norm reads it whole, so that kernel stays apart and stores it."""
    def f(a, b, c):
        x = a + b
        w = c * 2
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w

    gen = torch.Generator().manual_seed(11)
    _run(f, [tuple(torch.randn(64, generator=gen) for _ in range(3))], fused=1)


# ------------------------------------------------------- the rms_norm op ----
# F.rms_norm, torch.rms_norm and nn.RMSNorm (whose forward calls F.rms_norm) are one graph
# op, planned as the same row kernel as the spelled-out pattern above: float32 only, eps
# None as torch's finfo(float32).eps, normalized_shape any count of trailing dims; other
# dtypes, a weight of another dtype and channels-last inputs run torch's own call.

EPS32 = torch.finfo(torch.float32).eps


def _small(*shape, seed=0):
    """Values whose mean square (about 1e-6) is near eps, so a wrong eps shows."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 1e-3


def _norm_steps(made):
    """Per compiled graph: (kernel steps holding an rms_norm node, eager steps of rms_norm).
    A graph with nothing to lower comes back as it is, every node run eagerly."""
    out = []
    for cg in made:
        if isinstance(cg, _C.CompiledGraph):
            kernels = kernel_ops([cg])[0]
            out.append((sum("rms_norm" in ops for ops in kernels), cg.stats["eager_ops"].get("rms_norm", 0)))
        else:
            out.append((0, sum(nd.op == "rms_norm" for nd in cg.nodes)))
    return out


def _run_op(f, inputs, dynamic=False, kernel=True, graphs=None, norms=1):
    """f compiled whole (fullgraph: a break raises) against eager on each input tuple: the
    same values, dtype, shape and strides; with `kernel`, each of a graph's `norms` norms a
    kernel step of its own that never fell back to eager, else an eager step. `graphs`: how
    many graphs the calls compile (one per call without dynamic shapes by default)."""
    backend, made = _lowering()
    cf = shapejit.compile(f, backend=backend, dynamic=dynamic, fullgraph=True)
    for args in inputs:
        want = f(*args)
        got = cf(*args)
        want = want if isinstance(want, tuple) else (want,)
        got = got if isinstance(got, tuple) else (got,)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype and g.requires_grad == w.requires_grad
            assert g.stride() == w.stride(), (g.stride(), w.stride())
            torch.testing.assert_close(g, w, rtol=RTOL, atol=1e-6, equal_nan=True)
    st = shapejit.stats()
    assert st["graph_breaks"] == 0
    assert len(made) == (graphs if graphs is not None else 1 if dynamic else len(inputs)), len(made)
    assert _norm_steps(made) == [(norms, 0) if kernel else (0, norms)] * len(made), _norm_steps(made)
    if kernel:
        assert all(cg.stats["eager_fallbacks"] == 0 and cg.stats["kernel_calls"] >= 1 for cg in made)
    return made


def _oracle_graphs(f, args, dynamic=False):
    """How many graphs torch.compile makes of one call (run as captured, no inductor)."""
    torch._dynamo.reset()
    counter = GraphCounter()
    torch.compile(f, backend=counter, dynamic=dynamic)(*args)
    torch._dynamo.reset()
    return counter.graphs


@pytest.mark.parametrize("nd", [1, 2])
@pytest.mark.parametrize("eps", [None, 1e-6])
@pytest.mark.parametrize("weight", [False, True])
@pytest.mark.parametrize("fn", [F.rms_norm, torch.rms_norm], ids=["F", "torch"])
def test_op_each_spelling_one_kernel(fn, weight, eps, nd):
    x = _small(3, 5, 24, seed=nd)
    ns = tuple(x.shape[-nd:])
    w = torch.rand(*ns, generator=torch.Generator().manual_seed(7)) + 0.5
    if weight:
        def f(x, w):
            return fn(x, ns, w, eps)
    else:
        def f(x, w):
            return fn(x, list(ns), eps=eps)
    _run_op(f, [(x, w)])


def test_op_eps_none_is_float32_finfo():
    """Rows whose mean square is far below eps: the result is x / sqrt(eps), so only torch's
    own eps (finfo(float32).eps, as a float) gives eager's values."""
    def f(x):
        return F.rms_norm(x, (x.shape[-1],))

    x = _small(4, 33) * 1e-3
    made = _run_op(f, [(x,)])
    assert "1.1920928955078125e-07" in made[0].source
    torch.testing.assert_close(f(x), x / torch.sqrt(torch.tensor(EPS32)), rtol=1e-4, atol=0)


def test_op_dynamic_one_graph():
    def f(x, w):
        return F.rms_norm(x, (x.shape[-1],), w, 1e-5), torch.rms_norm(x, x.shape[-2:])

    inputs = [(_small(2, s, h, seed=s), torch.rand(h) + 0.5) for s, h in ((5, 32), (9, 32), (13, 48), (3, 17))]
    _run_op(f, inputs, dynamic=True, graphs=1, norms=2)
    assert _oracle_graphs(f, inputs[0], dynamic=True) == 1


def test_op_rows_zero_one_rank_one_and_long_rows():
    def f(x):
        return F.rms_norm(x, x.shape[-1:], eps=1e-5)

    for shape in ((0, 16), (1, 16), (16,), (1, 1), (2, 1, 7), (3, 1023), (2, 5000)):
        shapejit.reset()
        _run_op(f, [(_small(*shape),)])


def test_op_static_shapes_recompile_per_shape():
    def f(x, w):
        return F.rms_norm(x, (x.shape[-1],), w)

    inputs = [(_small(4, 40, seed=1), torch.rand(40)), (_small(6, 24, seed=2), torch.rand(24))]
    _run_op(f, inputs, dynamic=False)


def test_op_strided_inputs():
    """A transposed and a sliced input: the kernel's strided loops (full variant), a
    row-major result as eager's."""
    def f(x, w):
        return F.rms_norm(x, (x.shape[-1],), w)

    w = torch.rand(32) + 0.5
    _run_op(f, [(_small(32, 12).t(), w)])
    shapejit.reset()
    _run_op(f, [(_small(3, 64)[:, ::2], w)])


@pytest.mark.parametrize("spelling", ["op", "pattern"])
def test_channels_last_input_keeps_its_layout(spelling):
    """Eager's result of a channels-last input (4-D and 5-D) is channels-last. The
    rms_norm op's row kernel writes row-major, so such a call runs its nodes eagerly; the
    spelled-out pattern's kernel stores in TensorIterator's layout (result_layout) and
    runs. The same input laid out row-major (a graph of its own: the guards hold strides)
    runs the kernel either way."""
    def f(x, w):
        if spelling == "op":
            return F.rms_norm(x, (x.shape[-1],), w)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    w = torch.rand(32) + 0.5
    for cl, fmt in ((_small(2, 3, 4, 32), torch.channels_last), (_small(2, 3, 2, 4, 32), torch.channels_last_3d)):
        shapejit.reset()
        backend, made = _lowering()
        cf = shapejit.compile(f, backend=backend, dynamic=False)
        for x, falls_back in ((cl.to(memory_format=fmt), int(spelling == "op")), (cl, 0)):
            got, want = cf(x, w), f(x, w)
            assert got.stride() == want.stride(), (got.stride(), want.stride())
            torch.testing.assert_close(got, want, rtol=RTOL, atol=1e-6)
            assert made[-1].stats["eager_fallbacks"] == falls_back and made[-1].stats["kernel_calls"] == 1 - falls_back
        assert len(made) == 2 and shapejit.stats()["graph_breaks"] == 0


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_op_other_dtypes_run_eagerly(dtype):
    def f(x, w):
        return F.rms_norm(x, (x.shape[-1],), w) * 2, torch.rms_norm(x, (x.shape[-1],))

    x = _small(3, 20).to(dtype) * 100
    _run_op(f, [(x, torch.rand(20).to(dtype))], kernel=False, norms=2)


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")
def test_op_weight_of_another_dtype_runs_eagerly():
    """torch multiplies a float64 weight in and casts back to float32: no kernel."""
    def f(x, w):
        return F.rms_norm(x, (x.shape[-1],), w)

    _run_op(f, [(_small(3, 20), torch.rand(20, dtype=torch.float64))], kernel=False)


def test_op_epilogue_and_prologue_fused():
    def epilogue(x, w):
        return torch.tanh(F.rms_norm(x, (x.shape[-1],), w)) * 3.0

    def residual(a, b, w):
        h = a + b
        return F.rms_norm(h, (64,), w, 1e-6) + 1.0, h * 2

    gen = torch.Generator().manual_seed(5)
    made = _run_op(epilogue, [(torch.randn(5, 7, generator=gen), torch.randn(7, generator=gen))], dynamic=True)
    assert kernel_ops(made) == [[["rms_norm", "tanh", "mul"]]]
    shapejit.reset()
    a, b, w = torch.randn(4, 16, 64, generator=gen), torch.randn(4, 16, 64, generator=gen), torch.rand(64)
    made = _run_op(residual, [(a, b, w)])
    assert kernel_ops(made)[0][0] == ["add", "rms_norm", "add"]


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("form", ["int", "tuple1", "tuple2", "no_affine", "eps"])
def test_rmsnorm_module(form, dynamic):
    """nn.RMSNorm: its forward (F.rms_norm with the module's normalized_shape, weight and
    eps) is captured into the caller's graph; under no_grad the norm is a kernel, with grad
    (the weight is a parameter) the result needs grad and torch runs it."""
    shape = {"int": 24, "tuple1": (24,), "tuple2": (5, 24), "no_affine": 24, "eps": (24,)}[form]
    m = torch.nn.RMSNorm(shape, eps=1e-5 if form == "eps" else None, elementwise_affine=form != "no_affine")
    if m.weight is not None:
        with torch.no_grad():
            m.weight.uniform_(0.5, 1.5)

    def f(x):
        return m(x) * 2.0

    xs = [(_small(3, 5, 24, seed=1),), (_small(7, 5, 24, seed=2),)]
    with torch.no_grad():
        _run_op(f, xs, dynamic=dynamic, graphs=1 if dynamic else 2)
    shapejit.reset()
    _run_op(f, xs[:1], dynamic=dynamic, kernel=m.weight is None)
    assert _oracle_graphs(f, xs[0], dynamic=dynamic) == 1
