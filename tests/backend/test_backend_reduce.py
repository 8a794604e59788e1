"""Generated-C reductions and row kernels: sum, mean, amax/amin (numpy max/min,
torch max/min without a dim) over any dims with keepdim, softmax/log_softmax over one dim
and layer_norm over the trailing dims, float32, torch and numpy. Compared with eager over
random shapes (sizes 0, 1, odd, 1e6 for summation accuracy), non-contiguous and
broadcast-produced inputs; a pointwise chain feeding the reduction fuses as its prologue."""
import itertools
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import shapejit
from shapejit import _C
from lowering import lowering as _lowering   # a backend that lowers and keeps what it made
from repo import bench

pytestmark = pytest.mark.usefixtures("fresh_shapejit")

RTOL, ATOL = 1e-4, 1e-5


def _close(got, want):
    """Same types (numpy scalars included), dtypes and shapes; torch results contiguous."""
    if isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want)
        for g, w in zip(got, want):
            _close(g, w)
        return
    assert type(got) is type(want)
    if isinstance(want, torch.Tensor):
        assert got.is_contiguous()
        got, want = got.numpy(), want.numpy()
    assert got.dtype == want.dtype and np.shape(got) == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, equal_nan=True)


def _stats(made):
    cgs = [m for m in made if isinstance(m, _C.CompiledGraph)]
    return {k: sum(m.stats[k] for m in cgs) for k in ("kernels", "kernel_calls", "eager_fallbacks")}


def _run(fn, *args, kernels=None):
    backend, made = _lowering()
    _close(shapejit.compile(fn, backend=backend)(*args), fn(*args))
    st = _stats(made)
    assert st["eager_fallbacks"] == 0
    if kernels is not None:
        assert st["kernels"] == kernels and st["kernel_calls"] >= 1, st
    return made


def _dim_choices(rank, rng):
    """None, every single dim (positive and negative), a pair and all dims as a tuple."""
    out = [None] + list(range(rank)) + [d - rank for d in range(rank)]
    if rank >= 2:
        out.append(tuple(sorted(rng.sample(range(rank), 2))))
        out.append((-1, 0))
    if rank:
        out.append(tuple(range(rank)))
    return out


SHAPES = [(7,), (1,), (3, 5), (1, 9), (4, 1, 6), (2, 3, 4, 5)]


def _reduction_cases():
    rng = random.Random(6)
    cases = []
    for shape in SHAPES:
        for dim in _dim_choices(len(shape), rng):
            for op in ("sum", "mean", "amax", "amin"):
                keepdim = rng.random() < 0.5
                cases.append((op, shape, dim, keepdim))
    return cases


@pytest.mark.parametrize("op,shape,dim,keepdim", _reduction_cases())
def test_torch_reduction(op, shape, dim, keepdim):
    x = torch.randn(*shape)
    if dim is None:
        if op in ("amax", "amin"):
            def fn(x):
                return getattr(x, op)()
        else:
            def fn(x):
                return getattr(torch, op)(x)
    else:
        def fn(x):
            return getattr(x, op)(dim, keepdim=keepdim)
    _run(fn, x, kernels=1)


@pytest.mark.parametrize("op", ["sum", "mean"])
def test_sum_over_empty(op):
    x = torch.randn(0, 4)
    _run(lambda x: getattr(x, op)(0), x, kernels=1)            # 0 / 0 is nan for mean
    _run(lambda x: getattr(x, op)(1, keepdim=True), x, kernels=1)
    _run(lambda x: getattr(x, op)(), x, kernels=1)


def test_max_min_full_and_0d():
    x = torch.randn(5, 3)
    _run(lambda x: (torch.max(x), torch.min(x), x.max(), x.amax(())), x, kernels=4)
    _run(lambda x: x.sum(), torch.randn(()), kernels=1)


def test_nan_propagates():
    x = torch.tensor([[1.0, float("nan"), 3.0], [-1.0, 2.0, float("inf")], [float("-inf")] * 3])
    _run(lambda x: (x.amax(1), x.amin(1), x.sum(1), torch.softmax(x, 1), torch.log_softmax(x, 1)), x)


@pytest.mark.parametrize("n", [1_000_000, 1_000_003])
def test_sum_accuracy_large(n):
    """Blocked pairwise accumulation in float: within 1e-4 of torch for a million floats."""
    x = torch.rand(n)
    _run(lambda x: (x.sum(), x.mean(), (x - 0.25).sum()), x)
    y = torch.rand(1000, n // 1000 + 1)
    _run(lambda y: (y.sum(), y.sum(0), y.sum(1)), y)


def test_non_contiguous_inputs():
    base = torch.randn(6, 14)
    _run(lambda x: (x.sum(0), x.amax(1), x.mean((0, 1))), base[:, ::2], kernels=3)
    _run(lambda x: (x.sum(0), x.amin(-1, keepdim=True)), base.t(), kernels=2)
    p = torch.randn(3, 4, 5).permute(2, 0, 1)
    _run(lambda x: (x.sum((1, 2)), x.mean(0), torch.softmax(x, 1)), p, kernels=3)
    neg = torch.randn(9, 8).flip(0)
    _run(lambda x: x.sum(1), neg, kernels=1)


def test_broadcast_produced_inputs():
    """A stride-0 input (an expand) and a prologue whose operands broadcast."""
    a, b = torch.randn(5, 1), torch.randn(1, 7)
    _run(lambda a, b: (a + b).sum(0), a, b, kernels=1)
    _run(lambda a, b: (a * b).amax(-1, keepdim=True), a, b, kernels=1)
    _run(lambda a: a.expand(5, 9).sum(1), a, kernels=1)
    _run(lambda a: torch.softmax(a.expand(5, 9), -1), a, kernels=1)


def test_prologue_fuses():
    """The pointwise chain is computed inside the reduction loop and never written."""
    made = _run(lambda x: torch.tanh(x * 2 + 1).sum(-1), torch.randn(8, 33), kernels=1)
    src = made[0].source
    assert "tanhf" in src and "sj_cascade_push" in src
    assert "in1" not in src and "out1" not in src


def test_prologue_read_later_is_stored():
    """A reduction reads each element once, so prologue values read after it are stored by
    the same kernel (extra outputs, row and column order); a row op reads its row several
    times and keeps a separate pointwise kernel."""
    def row(x):
        h = x * 2 + 1
        return h.sum(-1), h
    made = _run(row, torch.randn(4, 6), kernels=1)
    assert "out1[" in made[0].source

    def col(x):
        h = torch.relu(x - 0.5)
        g = h * h
        return g.amax(0), h, g.sum(0) + h.mean(0)
    for shape in ((4, 6), (130, 67), (1, 1), (0, 5)):
        if 0 in shape:
            continue   # amax of an empty dim raises in eager
        shapejit.reset()
        _run(col, torch.randn(*shape))
    shapejit.reset()
    _run(lambda x: (lambda h: (torch.softmax(h, -1), h))(x * 2), torch.randn(4, 6), kernels=2)


def test_reduction_then_pointwise():
    def fn(x, w):
        h = torch.relu(x * 2 + 1)
        s = h.sum(-1, keepdim=True)
        return h / s, s.mean()
    _run(fn, torch.randn(6, 10), torch.randn(10, 3))


def test_unsupported_forms_stay_eager():
    x = torch.randn(4, 5)
    backend, made = _lowering()
    fn = shapejit.compile(lambda x: torch.max(x, 1), backend=backend)
    _close(fn(x), torch.max(x, 1))
    assert _stats(made)["kernels"] == 0
    # dtype= and int inputs lower (tests/backend/test_backend_dtypes.py covers them)
    i = torch.arange(12).reshape(3, 4)
    _close(shapejit.compile(lambda i: i.sum(0), backend=backend)(i), i.sum(0))
    _run(lambda x: x.sum(1, dtype=torch.float32), x, kernels=1)
    _run(lambda x: x.sum(1, dtype=torch.float64), x, kernels=1)


# ------------------------------------------------------------------ numpy ----

@pytest.mark.parametrize("shape", [(5, 7), (1, 3, 4), (0, 3), (9,)])
def test_numpy_reductions(shape):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    r = len(shape)

    def fn(x):
        out = [np.sum(x, axis=-1), x.mean(axis=0, keepdims=True)]
        if r >= 2:
            out += [x.sum(axis=(0, r - 1)), np.mean(x, axis=(-1,), keepdims=True)]
            if 0 not in shape:
                out += [np.max(x, axis=1), x.min(axis=0), np.min(x, axis=-1, keepdims=True)]
        return tuple(out)
    made = _run(fn, x)
    # reductions to 0-d give numpy scalars: those stay eager
    assert _stats(made)["kernels"] == sum(isinstance(o, np.ndarray) for o in fn(x))


def test_numpy_scalar_results_stay_eager():
    x = np.random.default_rng(1).standard_normal(10).astype(np.float32)
    backend, made = _lowering()
    got = shapejit.compile(lambda x: (np.sum(x * 2), x.max(), np.mean(x, axis=0)), backend=backend)(x)
    want = (np.sum(x * 2), x.max(), np.mean(x, axis=0))
    _close(got, want)
    assert isinstance(got[0], np.float32)
    assert _stats(made)["eager_fallbacks"] == 0


def test_numpy_strided():
    x = np.random.default_rng(2).standard_normal((8, 12)).astype(np.float32)[::2, ::-3]
    _run(lambda x: (x.sum(axis=0), np.max(x * 2, axis=1), x.mean(axis=1)), x, kernels=3)


# ------------------------------------------------------------ row kernels ----

ROW_SHAPES = [(3, 7), (1, 1), (0, 5), (2, 3, 5), (4, 129), (5,)]


@pytest.mark.parametrize("op", [torch.softmax, torch.log_softmax, F.softmax, F.log_softmax])
@pytest.mark.parametrize("shape", ROW_SHAPES)
def test_softmax_every_dim(op, shape):
    x = torch.randn(*shape) * 3
    for d in list(range(len(shape))) + [-1]:
        _run(lambda x: op(x, dim=d), x, kernels=1)
        shapejit.reset()


def test_softmax_method_and_large_rows():
    x = torch.randn(3, 5000) * 4
    _run(lambda x: (x.softmax(-1), x.log_softmax(1), x.softmax(0)), x, kernels=3)


def test_softmax_scale_mask_prologue():
    q = torch.randn(2, 4, 9, 9)
    mask = torch.zeros(1, 1, 9, 9)
    mask[..., 5:] = float("-inf")

    def fn(s, m):
        return torch.softmax(s * 0.125 + m, dim=-1)
    made = _run(fn, q, mask, kernels=1)
    assert "out1" not in made[0].source


@pytest.mark.parametrize("shape,nd", [((4, 16), 1), ((2, 3, 8), 1), ((2, 3, 8), 2), ((5, 1), 1), ((0, 7), 1),
                                      ((3, 769), 1), ((6,), 1)])
@pytest.mark.parametrize("affine", ["none", "weight", "both"])
def test_layer_norm(shape, nd, affine):
    x = torch.randn(*shape) * 2 + 0.5
    ns = shape[-nd:]
    w = torch.rand(*ns) + 0.5
    b = torch.randn(*ns)
    if affine == "none":
        def fn(x, w, b):
            return F.layer_norm(x, ns)
    elif affine == "weight":
        def fn(x, w, b):
            return F.layer_norm(x, ns, w, eps=1e-3)
    else:
        def fn(x, w, b):
            return F.layer_norm(x, ns, w, b)
    _run(fn, x, w, b, kernels=1)


def test_layer_norm_residual_prologue_and_strided():
    x, r = torch.randn(6, 32), torch.randn(6, 32)
    w, b = torch.rand(32), torch.randn(32)
    made = _run(lambda x, r, w, b: F.layer_norm(x + r, (32,), w, b), x, r, w, b, kernels=1)
    assert "out1" not in made[0].source
    xs = torch.randn(32, 12).t()
    _run(lambda x, w, b: F.layer_norm(x, (32,), w, b), xs, w, b, kernels=1)
    _run(lambda x, w, b: F.layer_norm(x, (32,), w[::1], b), torch.randn(3, 64)[:, ::2], w, b, kernels=1)


def test_layer_norm_module_no_grad():
    ln = torch.nn.LayerNorm(24)
    with torch.no_grad():
        ln.weight.uniform_(0.5, 1.5)
        ln.bias.normal_()
        x = torch.randn(5, 24)
        backend, made = _lowering()
        _close(shapejit.compile(ln, backend=backend)(x), ln(x))
        assert _stats(made)["kernel_calls"] >= 1


def test_layer_norm_of_an_int_shape_raises_as_eager():
    """torch takes a normalized_shape sequence only: F.layer_norm(x, 8) raises a TypeError.
    Its rule refuses the call, so the compiled function raises too instead of a kernel
    returning a norm."""
    def fn(x):
        return F.layer_norm(x, 8) * 2

    x = torch.randn(3, 8)
    with pytest.raises(TypeError):
        fn(x)
    with pytest.raises(TypeError, match="normalized_shape"):
        shapejit.compile(fn)(x)


# --------------------------------------------------------------- dynamic ----

def test_dynamic_one_build():
    def fn(x, w, b):
        return (x * 2).sum(-1), torch.softmax(x, -1), F.layer_norm(x, (x.shape[-1],), w, b), x.amax(0)
    backend, made = _lowering()
    g = shapejit.compile(fn, backend=backend, dynamic=True)
    for n, m in ((3, 8), (17, 8), (64, 8), (5, 8), (2, 8)):
        x, w, b = torch.randn(n, m), torch.rand(m), torch.randn(m)
        _close(g(x, w, b), fn(x, w, b))
    assert len(made) == 1 and shapejit.stats()["graphs"] == 1
    assert made[0].stats["eager_fallbacks"] == 0
    assert made[0].stats["kernel_calls"] == 5 * made[0].stats["kernels"]


def test_dynamic_last_dim():
    backend, made = _lowering()

    def fn(x):
        return torch.log_softmax(x * 0.5, -1), x.mean(1)
    g = shapejit.compile(fn, backend=backend, dynamic=True)
    for m in (7, 100, 3, 2049):
        x = torch.randn(4, m)
        _close(g(x), fn(x))
    assert len(made) == 1
    assert "2049" not in made[0].source and "100" not in made[0].source


def test_random_differential():
    """Random shapes, dims and prologues against eager."""
    rng = random.Random(61)
    for _ in range(25):
        rank = rng.randint(1, 4)
        shape = tuple(rng.choice([1, 2, 3, 5, 8, 13]) for _ in range(rank))
        dims = tuple(sorted(rng.sample(range(rank), rng.randint(1, rank))))
        keep = rng.random() < 0.5
        op = rng.choice(["sum", "mean", "amax", "amin"])
        x = torch.randn(*shape)
        if rng.random() < 0.3:
            x = x.transpose(0, rank - 1)

        def fn(x):
            return getattr(torch.sigmoid(x) * 3 - 1, op)(dims, keepdim=keep)
        shapejit.reset()
        _run(fn, x, kernels=1)


def test_row_epilogue_fuses():
    """Float pointwise ops of a row op's result and constants are applied as it is stored:
    layer_norm then GELU, softmax then scale and shift, one kernel each; a result read by
    anything else is not taken."""
    x, w, b = torch.randn(33, 96), torch.randn(96), torch.randn(96)

    def ln_gelu(x, w, b):
        return F.gelu(F.layer_norm(x, (96,), w, b))

    def sm_affine(x):
        return 1.0 - torch.softmax(x * 0.5, -1) * 2.0

    def lsm_relu(x):
        return torch.relu(torch.log_softmax(x, 0) + 3.0)

    def shared(x):
        s = torch.softmax(x, -1)
        return torch.tanh(s), s

    for fn, args, kernels in ((ln_gelu, (x, w, b), 1), (sm_affine, (x,), 1), (lsm_relu, (x,), 1),
                              (shared, (x,), 2)):
        shapejit.reset()
        backend, made = _lowering()
        _close(shapejit.compile(fn, backend=backend)(*args), fn(*args))
        assert made[0].stats["kernels"] == kernels, fn.__name__
        assert made[0].stats["kernel_calls"] == kernels and made[0].stats["eager_fallbacks"] == 0


@pytest.mark.parametrize("epi", ["gelu", "tanh_scale", "relu", "sigmoid_relu"])
def test_row_epilogue_math_pass(epi):
    """An epilogue that calls math functions (erf, tanh, exp) runs over the stored row in
    a second loop of the row kernel, a cheap one (relu) in the last pass: both equal eager
    for layer_norm and softmax rows, odd and strided rows, and across sizes of one
    dynamic graph."""
    ops = {"gelu": F.gelu, "tanh_scale": lambda y: torch.tanh(y) * 0.5, "relu": torch.relu,
           "sigmoid_relu": lambda y: torch.relu(torch.sigmoid(y) - 0.3)}
    op = ops[epi]

    split = epi in ("gelu", "tanh_scale", "sigmoid_relu")

    def ln256(x, w, b):   # the normalised shape a constant, as nn.LayerNorm's
        return op(F.layer_norm(x, (256,), w, b))

    def ln7(x, w, b):
        return op(F.layer_norm(x, (7,), w, b))

    def sm(x, w, b):
        return op(torch.softmax(x, -1))

    for n, fns in ((256, (ln256, sm)), (7, (ln7, sm))):
        for fn in fns:
            shapejit.reset()
            backend, made = _lowering()
            c = shapejit.compile(fn, backend=backend, dynamic=True)
            for rows in (3, 64, 5):
                x, w, b = torch.randn(rows, n) * 2, torch.randn(n), torch.randn(n)
                _close(c(x, w, b), fn(x, w, b))
                xt = torch.randn(n, rows).t()   # rows of stride 1 across, n apart
                _close(c(xt, w, b), fn(xt, w, b))
            assert made and all(m.stats["eager_fallbacks"] == 0 for m in made)
            # the strided rows ran the full variant, built at their first call
            assert sum(m.stats["full_variants_built"] for m in made) >= 1
            src = made[0].source   # the lean kernel: the contiguous layout only
            body = src[src.index("_part("):]   # the kernel, after the prelude
            # the epilogue's own pass reads the stored rows (queued, and the thread's last
            # ones after its loop); a cheap epilogue stays in the last pass
            assert body.count("float y = out0[") == (3 if split else 1), (fn.__name__, epi)
            assert ("pend[npend++]" in body) == split, (fn.__name__, epi)


@pytest.mark.parametrize("n", [7, 256])
def test_row_epilogue_queued_rows(n, threads):
    """Contiguous rows queue for a math epilogue and it runs over several rows at a time:
    row counts below, at and past the queue's length and not a multiple of it, split over
    the threads, and rows not adjacent in memory (a permuted batch; the RMS norm's result
    laid out as its input, the others row-major) all equal eager, for layer_norm, RMS
    norm, softmax and log_softmax rows."""
    def ln(x, w):
        return F.gelu(F.layer_norm(x, (x.shape[-1],), w, w * 0.5))

    def rms(x, w):
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
        return torch.tanh(y) * 3.0

    def sm(x, w):
        return torch.erf(torch.softmax(x * w, -1) * 4.0)

    def lsm(x, w):
        return torch.exp(torch.log_softmax(x, -1) * 0.5)

    for fn in (ln, rms, sm, lsm):
        shapejit.reset()
        backend, made = _lowering()
        c = shapejit.compile(fn, backend=backend, dynamic=True)
        w = torch.randn(n)
        for rows in (1, 7, 8, 9, 16, 17, 203):
            x = torch.randn(rows, n) * 2
            _close(c(x, w), fn(x, w))
        for a, b in ((3, 5), (9, 7), (16, 16)):
            x = torch.randn(a, b, n).transpose(0, 1)   # rows contiguous, batches swapped
            got, want = c(x, w), fn(x, w)
            torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)
            assert got.stride() == want.stride(), fn.__name__
        assert made and all(m.stats["eager_fallbacks"] == 0 for m in made), fn.__name__
        assert any("pend[npend++]" in m.source for m in made), fn.__name__


@pytest.mark.parametrize("n", [1, 7, 8, 31, 32, 33, 40, 71, 1000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_row_extremes_blocked(n, dtype):
    """Float max/min over a row run in blocks of lanes, then blocks of 8, then a tail: every
    length, a NaN in any of those parts, -inf/inf and a strided row equal eager (amax, amin,
    softmax, log_softmax; one dynamic graph across row counts)."""
    def f(x):
        return x.amax(-1), x.amin(-1), torch.softmax(x, -1), torch.log_softmax(x, -1)

    backend, made = _lowering()
    c = shapejit.compile(f, backend=backend, dynamic=True)
    gen = torch.Generator().manual_seed(n)
    for rows in (5, 2):
        x = torch.randn(rows, n, generator=gen, dtype=dtype) * 4
        if n > 1:
            x[0, n - 1] = float("nan")          # the tail (or the last block)
            x[1, 0] = float("inf")
            x[-1, n // 2] = -float("inf")
        if rows > 2 and n > 3:
            x[2, n // 3] = float("nan")         # a block
        for arg in (x, x.t().contiguous().t()):
            for g, w in zip(c(arg), f(arg)):
                torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6, equal_nan=True)
    assert made and all(m.stats["eager_fallbacks"] == 0 for m in made)


# ------------------------------------------------------------- column order ----

COLUMN_CASES = [
    ((8192, 64), 0), ((3, 200), 0), ((129, 65), 0), ((2, 7, 130), 1), ((2, 7, 130), (0, 1)),
    ((5, 1, 3), (0, 1)), ((4, 6, 3, 70), (0, 2)), ((1, 9), 0), ((300, 1), 0), ((0, 70), 0),
]


@pytest.mark.parametrize("shape,dim", COLUMN_CASES)
@pytest.mark.parametrize("op", ["sum", "mean", "amax", "amin"])
def test_column_order(op, shape, dim):
    """Reductions that keep the last dim run rows of the input into a tile of outputs
    (vectorised across columns): contiguous, transposed-back (non-unit last stride) and
    sliced inputs, each against eager."""
    if op in ("amax", "amin") and 0 in shape:
        return
    # sums of positive values: no cancellation, so rtol compares the summation itself
    gen = torch.randn if op in ("amax", "amin") else torch.rand
    x = gen(*shape) * 3
    made = _run(lambda x: getattr(x, op)(dim), x, kernels=1)
    assert "ntile" in made[0].source
    shapejit.reset()
    xt = gen(*reversed(shape)).permute(*reversed(range(len(shape))))
    _run(lambda x: getattr(x, op)(dim, keepdim=True), xt, kernels=1)
    shapejit.reset()
    big = gen(*shape[:-1], shape[-1] * 2)[..., ::2]
    _run(lambda x: getattr(x * 0.5 + 1, op)(dim), big, kernels=1)


@pytest.mark.parametrize("dtype", [torch.float64, torch.int64, torch.int32, torch.bool])
def test_column_order_dtypes(dtype):
    if dtype.is_floating_point:
        x = torch.randn(257, 70, dtype=dtype)
    elif dtype == torch.bool:
        x = torch.rand(257, 70) > 0.5
    else:
        x = torch.randint(-1000, 1000, (257, 70), dtype=dtype)
    ops = ["sum"] if dtype == torch.bool else ["sum", "amax", "amin"]
    for op in ops:
        shapejit.reset()
        backend, made = _lowering()
        got = shapejit.compile(lambda x: getattr(x, op)(0), backend=backend)(x)
        want = getattr(x, op)(0)
        assert got.dtype == want.dtype
        if dtype.is_floating_point:
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-9)
        else:
            assert torch.equal(got, want)
        assert _stats(made)["kernels"] == 1 and _stats(made)["eager_fallbacks"] == 0


def test_column_nan_per_column():
    x = torch.randn(50, 70)
    x[7, 3] = float("nan")
    x[49, 69] = float("nan")
    x[:, 10] = float("inf")
    _run(lambda x: (x.amax(0), x.amin(0), x.sum(0)), x, kernels=3)


def test_column_sum_accuracy():
    """A million rows summed per column stays within 1e-4 (relative) of a float64 sum:
    blocks of rows cascaded pairwise."""
    x = torch.rand(1_000_003, 3)
    backend, made = _lowering()
    got = shapejit.compile(lambda x: x.sum(0), backend=backend)(x)
    want = x.double().sum(0)
    assert ((got.double() - want).abs() / want).max() < 1e-5


def test_numpy_column_moments():
    """Column mean / std / skewness / kurtosis (the suite's numpy_moments workload): each
    reduction stores the prologue values read later, so no large temporary is made twice,
    and the third and fourth power sums are one kernel (plan_sibling.c)."""
    moments = bench("workloads").column_moments
    x = np.random.default_rng(3).standard_normal((2049, 67)).astype(np.float32)
    backend, made = _lowering()
    got = shapejit.compile(moments, backend=backend)(x)
    for g, w in zip(got, moments(x)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    st = _stats(made)
    assert st["kernels"] == 7 and st["eager_fallbacks"] == 0, st


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_whole_reduction_split_across_threads(dtype):
    """A whole-tensor reduction of a long contiguous tensor splits its row across the
    threads (each a run of whole blocks, partials combined in order): sum, mean, amax and
    amin equal eager with 2 threads, for a length that is no multiple of the block, a NaN in
    the second thread's part, a 2-D input and a strided one (not split, same values)."""
    def f(x):
        out = (x.sum(), x.amax(), x.amin())
        return out + ((x * 2).mean(),) if x.dtype.is_floating_point else out

    old = shapejit.config.threads
    shapejit.config.threads = 2
    try:
        backend, made = _lowering()
        c = shapejit.compile(f, backend=backend)
        gen = torch.Generator().manual_seed(1)
        for n in (200_003, 70_000, 1000):
            if dtype.is_floating_point:
                x = torch.randn(n, generator=gen, dtype=dtype)
            else:
                x = torch.randint(-1000, 1000, (n,), generator=gen, dtype=dtype)
            xs = [x, x[: n // 2 * 2].view(2, -1), x[::2]]
            if dtype.is_floating_point:
                y = x.clone()
                y[n - 5] = float("nan")
                xs.append(y)
            for a in xs:
                for g, w in zip(c(a), f(a)):
                    torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-3, equal_nan=True)
        assert made and all(m.stats["eager_fallbacks"] == 0 for m in made)
        assert all(m.stats["threads"] == 2 for m in made)
        assert "omp_get_thread_num" in made[0].source
    finally:
        shapejit.config.threads = old


SPLIT_COLUMN_CASES = [
    ((8192, 64), 0), ((30001, 3), 0), ((9000, 63), 0), ((5000, 65), 0), ((1500, 1000), 0),
    ((2, 9001, 7), 1), ((9001, 2, 5), (0, 1)), ((40000, 1), 0),
]


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_column_split_across_threads(dtype, threads):
    """A column reduction with fewer tiles of 64 columns than threads splits its rows into
    runs of whole blocks, one per thread, combined in row order: sum, mean, amax and amin
    equal eager for 1, 3, 63, 64, 65 and 1000 columns, a NaN in the last thread's rows, a
    transposed input (non-unit column stride), a fused prologue, and 1 to 3 threads; a
    second call gives the same bits."""
    def f(x):
        out = (x.sum(0), x.amax(0), x.amin(0))
        return out + ((x * 0.5 - 1).mean(0),) if x.dtype.is_floating_point else out

    def f3(x):   # the reduced dims as the case gives them, through a prologue
        return ((x + 1) * 2).sum(dim), x.amax(dim)

    old = shapejit.config.threads
    shapejit.config.threads = threads
    try:
        gen = torch.Generator().manual_seed(4)
        for shape, dim in SPLIT_COLUMN_CASES:
            if dtype.is_floating_point:
                # positive values: no cancellation, rtol compares the summation itself
                x = torch.rand(*shape, generator=gen, dtype=dtype)
            else:
                x = torch.randint(-1000, 1000, shape, generator=gen, dtype=dtype)
            xs = [x, x.transpose(-1, -2).contiguous().transpose(-1, -2)]
            if dtype.is_floating_point:
                y = x.clone()
                at = [0] * x.dim()
                at[max(range(x.dim()), key=lambda d: shape[d])] = -5   # the longest reduced dim
                y[tuple(at)] = float("nan")
                xs.append(y)
            fn = f if dim == 0 else f3
            shapejit.reset()
            backend, made = _lowering()
            c = shapejit.compile(fn, backend=backend)
            for a in xs:
                got, again = c(a), c(a)
                for g, g2, w in zip(got, again, fn(a)):
                    assert torch.equal(g.isnan(), g2.isnan()) and torch.equal(g.nan_to_num(), g2.nan_to_num())
                    if dtype.is_floating_point:
                        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6, equal_nan=True)
                    else:
                        assert torch.equal(g, w)
            assert made and all(m.stats["eager_fallbacks"] == 0 for m in made)
            assert all(m.stats["threads"] == threads for m in made)
    finally:
        shapejit.config.threads = old


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_numpy_column_moments_split(dtype, threads):
    """numpy's column moments (sums over axis 0 with (x - m)**k prologues, the prologue
    values read later stored by the reduction) under dynamic sizes, at row counts that do
    and do not split across the threads, for 3, 64 and 65 columns."""
    moments = bench("workloads").column_moments

    def cubes(x):
        n = x.shape[0]
        m = x.mean(axis=0)
        return ((x - m) ** 3).sum(axis=0) / n, x.sum(axis=0)

    old = shapejit.config.threads
    shapejit.config.threads = threads
    try:
        rng = np.random.default_rng(5)
        for fn in (moments, cubes):
            backend, made = _lowering()
            c = shapejit.compile(fn, backend=backend, dynamic=True)
            for rows, cols in ((100, 64), (1000, 3), (33001, 64), (20000, 65), (70000, 3)):
                x = rng.standard_normal((rows, cols)).astype(dtype)
                for g, w in zip(c(x), fn(x)):
                    assert g.dtype == w.dtype and g.shape == w.shape
                    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
            assert made and all(m.stats["eager_fallbacks"] == 0 for m in made)
            shapejit.reset()
    finally:
        shapejit.config.threads = old
