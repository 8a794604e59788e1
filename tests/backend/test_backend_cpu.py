"""The generated-C backend, first slice: runs of float32 pointwise ops fuse into
one generated loop each; every other op runs as an eager step. Compiled results are
compared with eager over random shapes (sizes 0, 1 and odd, 0-d, non-contiguous and
broadcast inputs), for torch and numpy; one build serves every size."""
import math
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import shapejit
from lowering import close as _close
from lowering import lowering as _lowering
from shapejit import _C

pytestmark = pytest.mark.usefixtures("fresh_shapejit")


def chain10(x):
    y = x * 1.5 + 0.25
    y = torch.relu(y) - 0.5
    y = torch.sigmoid(y) * 2.0
    y = torch.tanh(y) + y
    return torch.exp(-y) / (1.0 + y * y)


def gelu_bias(x, b):
    return F.gelu(x + b) * torch.sigmoid(x)


def act_mix(x, y):
    a = F.leaky_relu(x, 0.2) + F.elu(y, alpha=0.5)
    b = torch.clamp(a, min=-0.3) * F.hardtanh(y, -0.5, 0.7)
    c = torch.maximum(a, b) - torch.minimum(x, 0.1 * y)
    return F.silu(c) + F.hardswish(b) + F.mish(a), torch.add(x, y, alpha=2.5)


def math_mix(x):
    ax = torch.abs(x) + 0.5
    return torch.sqrt(ax) + torch.log(ax) * torch.rsqrt(ax) + torch.sin(x) * torch.cos(x) + x ** 2 \
        + torch.pow(ax, 1.5) + torch.atan2(x, ax) + torch.floor(x * 3) - torch.trunc(x * 2)


def with_reduction(x, w):
    h = torch.relu(x * 2 + 1)
    s = h.sum(-1, keepdim=True)        # eager step between two kernels
    return (h / s).tanh() @ w, s


def np_chain(x, y):
    z = np.tanh(x * 0.5) + np.exp(-y * y)
    return np.maximum(z, 0.1) * np.sqrt(np.abs(x) + 1.0)


def _t(*shape):
    return torch.randn(*shape)


def _strided(*shape):
    """A non-contiguous tensor of the given shape (every other column of a wider one)."""
    full = torch.randn(*shape[:-1], shape[-1] * 2) if shape else torch.randn(())
    return full[..., ::2] if shape else full


CASES = [
    (chain10, lambda: (_t(64, 33),)),
    (chain10, lambda: (_t(0, 5),)),
    (chain10, lambda: (_t(1),)),
    (chain10, lambda: (torch.randn(()),)),
    (chain10, lambda: (_t(7, 9).t(),)),
    (chain10, lambda: (_strided(5, 13),)),
    (chain10, lambda: (_t(4, 3, 5).permute(2, 0, 1),)),
    (gelu_bias, lambda: (_t(8, 31), _t(31))),
    (gelu_bias, lambda: (_t(8, 31), _t(8, 1))),
    (gelu_bias, lambda: (_t(3, 1, 5), _t(4, 1))),
    (gelu_bias, lambda: (_strided(6, 7), _t(1))),
    (act_mix, lambda: (_t(17, 4), _t(17, 4))),
    (act_mix, lambda: (_t(1, 4), _t(3, 1))),
    (math_mix, lambda: (_t(5, 11),)),
    (with_reduction, lambda: (_t(6, 10), _t(10, 3))),
]


@pytest.mark.parametrize("fn,make", CASES, ids=[f.__name__ + str(i) for i, (f, _) in enumerate(CASES)])
def test_torch_matches_eager(fn, make):
    args = make()
    backend, made = _lowering()
    got = shapejit.compile(fn, backend=backend)(*args)
    _close(got, fn(*args))
    assert made and all(m.stats["kernels"] >= 1 for m in made)
    assert sum(m.stats["kernel_calls"] for m in made) >= 1
    assert sum(m.stats["eager_fallbacks"] for m in made) == 0


@pytest.mark.parametrize("shape", [(5, 7), (0,), (1, 1), (), (129,)])
def test_numpy_matches_eager(shape):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    y = rng.standard_normal(shape).astype(np.float32)
    if not shape:   # numpy turns 0-d results into scalars: those run eagerly
        x, y = x.reshape(1), y.reshape(1)
    backend, made = _lowering()
    _close(shapejit.compile(np_chain, backend=backend)(x, y), np_chain(x, y))
    assert made[0].stats["kernels"] == 1 and made[0].stats["kernel_calls"] == 1


def test_numpy_strided_and_broadcast():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((9, 16)).astype(np.float32)[:, ::3]
    y = rng.standard_normal((12,)).astype(np.float32)[::-2]   # negative stride
    backend, made = _lowering()
    _close(shapejit.compile(np_chain, backend=backend)(x, y), np_chain(x, y))
    # y's own chain has y's shape: a kernel of its own before the (9, 6) one
    assert made[0].stats["kernel_calls"] == made[0].stats["kernels"] >= 2
    assert made[0].stats["eager_fallbacks"] == 0


def test_nan_and_inf_as_eager():
    x = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1.0, -2.0])
    y = torch.tensor([1.0, float("nan"), 0.0, float("nan"), 2.0, -1.0, float("inf")])

    def f(x, y):
        return (torch.relu(x), torch.maximum(x, y), torch.minimum(x, y), torch.clamp(x, -1.0, 1.0),
                F.relu6(x), torch.sigmoid(x) + 0 * y, F.leaky_relu(x))

    backend, made = _lowering()
    _close(shapejit.compile(f, backend=backend)(x, y), f(x, y))
    assert made[0].stats["kernel_calls"] == 1


def test_shape_generic_one_build():
    """dynamic=True: one graph, one kernel library, every size served by it."""
    backend, made = _lowering()
    g = shapejit.compile(chain10, backend=backend, dynamic=True)
    for n in (3, 17, 64, 1000, 5):
        x = torch.randn(n, 7)
        _close(g(x), chain10(x))
    assert len(made) == 1 and made[0].stats["kernel_calls"] == 5
    assert shapejit.stats()["graphs"] == 1


def test_unlowerable_graphs_stay_eager():
    """Ops outside lower.def, dtypes kernels do not take (int16) and tensors that need grad
    run eagerly."""
    def ints(x):
        return x * 2 + 1

    def grads(w):
        return torch.tanh(w * 2)

    backend, made = _lowering()
    x = torch.arange(6, dtype=torch.int16)
    assert torch.equal(shapejit.compile(ints, backend=backend)(x), ints(x))
    w = torch.randn(4, requires_grad=True)
    out = shapejit.compile(grads, backend=backend)(w)
    torch.testing.assert_close(out, grads(w))
    assert out.requires_grad and out.grad_fn is not None
    assert all(not isinstance(m, _C.CompiledGraph) for m in made)


def test_source_is_shape_generic():
    backend, made = _lowering()
    shapejit.compile(gelu_bias, backend=backend, dynamic=True)(_t(4, 6), _t(6))
    src = made[0].source
    assert "sj_k" in src and "erff" in src
    for size in ("4", "6"):
        assert "n[0] = " + size not in src
    assert made[0].stats["kernels"] == 1


def test_fusion_writes_only_what_is_read():
    """Intermediate values of a fused chain are never materialised."""
    backend, made = _lowering()
    shapejit.compile(chain10, backend=backend)(_t(5, 5))
    src = made[0].source
    # one input, one output: the nine intermediates stay in registers
    assert "out0[" in src and "out1" not in src and "in0[" in src and "in1" not in src


@pytest.mark.parametrize("n", [16, 17, 31, 40, 70])
@pytest.mark.parametrize("lib", ["torch", "numpy"])
def test_many_results_read_later_split_kernels(n, lib):
    """n independent pointwise results all read after them (a scan's steps stacked, a list
    comprehension over inputs): the kernels split before their inputs and outputs outgrow
    a kernel's operands, every result right (31 or more of them crashed the interpreter)."""
    if lib == "torch":
        xs = [torch.randn(2, 5, 3) for _ in range(n)]
        fn = lambda *xs: torch.stack([x * 1.5 + i for i, x in enumerate(xs)], dim=2)  # noqa: E731
    else:
        xs = [np.random.default_rng(i).standard_normal((2, 5, 3)) for i in range(n)]
        fn = lambda *xs: np.stack([x * 1.5 + i for i, x in enumerate(xs)], axis=2)  # noqa: E731
    backend, made = _lowering()
    got, want = shapejit.compile(fn, backend=backend)(*xs), fn(*xs)
    _close(got, want)
    kinds = [k for m in made for k in m.step_kinds]
    assert kinds.count("kernel") >= 1 and kinds.count("kernel") <= n, kinds


def test_backend_by_name():
    x = torch.randn(33, 3)
    got = shapejit.compile(chain10, backend="cpu")(x)
    _close(got, chain10(x))
    assert math.isfinite(float(got.sum()))


def test_threads_knob():
    """threads=0 follows torch.set_num_threads (one OpenMP runtime); a positive value
    overrides it for the run only. Results do not depend on it."""
    x = torch.randn(300, 257)
    want = chain10(x)
    backend, made = _lowering()
    g = shapejit.compile(chain10, backend=backend)
    old = torch.get_num_threads()
    try:
        for torch_threads, knob, expect in ((1, 0, 1), (2, 0, 2), (1, 2, 2), (2, 1, 1)):
            torch.set_num_threads(torch_threads)
            with shapejit.config.patch(threads=knob):
                _close(g(x), want)
            # torch's thread count is global state the guards check: a change recompiles
            assert made[-1].stats["threads"] == expect
            assert torch.get_num_threads() == torch_threads   # put back after the run
    finally:
        torch.set_num_threads(old)
    with pytest.raises((TypeError, ValueError)):
        shapejit.config.threads = -1


def test_small_integer_powers_are_products():
    """x ** 2 and x ** 3 are computed as products, bit for bit what torch gives, negative
    bases included (GPT-2's gelu_new cubes its input)."""
    x = torch.linspace(-30, 30, 4099)
    backend, made = _lowering()
    fn = shapejit.compile(lambda x: (torch.pow(x, 3.0), x ** 2, 0.044715 * x ** 3), backend=backend)
    for g, w in zip(fn(x), (torch.pow(x, 3.0), x ** 2, 0.044715 * x ** 3)):
        assert torch.equal(g, w)
    assert made and made[0].stats["kernels"] == 1


@pytest.mark.parametrize("shape", [(33, 70), (5, 1), (1, 9), (3, 4, 17), (0, 5)])
def test_broadcast_along_last_dim(shape):
    """An input of size 1 in the last dim (a per-row scale or a keepdim statistic) is read
    once per row in the vectorised row loop (stride 0 known when the kernel is written);
    transposed inputs take the general loop. Compared with eager each way."""
    x = torch.randn(*shape)
    m = torch.randn(*shape[:-1], 1)

    def f(x, m):
        return (x - m) * 2.0 + m

    backend, made = _lowering()
    fn = shapejit.compile(f, backend=backend)
    _close(fn(x, m), f(x, m))
    if shape[-1] != 1:
        assert "u2 = 0" in made[0].source
    xt = torch.randn(*reversed(shape)).transpose(0, -1)
    mt = torch.randn(*reversed(shape[:-1]), 1).transpose(0, -1) if len(shape) > 1 else m
    if xt.shape == x.shape and mt.shape == m.shape:
        _close(fn(xt, mt), f(xt, mt))


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: one compiler at a time")
def test_many_kernels_compile_as_two_units():
    """A graph of four kernels or more is compiled as two translation units by two
    compiler processes at once; every kernel is found and gives eager's results."""
    def f(x, w):
        a = torch.tanh(x * 2.0).sum(-1)          # reduction kernels and pointwise runs
        b = torch.softmax(x - 1.0, -1)           # separated by matmuls
        c = torch.relu(b @ w) * 3.0
        d = (c - c.mean(0)).amax(0)
        return a, torch.sigmoid(c) + 1.0, d
    gen = torch.Generator().manual_seed(271)
    x, w = torch.randn(37, 64, generator=gen), torch.randn(64, 48, generator=gen)
    backend, made = _lowering()
    fn = shapejit.compile(f, backend=backend)
    # sums over 64 and 37 terms in another order than torch's: the reductions' documented
    # tolerance (docs/internals/backend.md), not the pointwise one
    for got, want in zip(fn(x, w), f(x, w)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert made[0].stats["kernels"] >= 4
    assert made[0].source.count("#include <math.h>") == 2


def test_grad_operands_under_no_grad():
    # RMSNorm's `self.weight * x` under no_grad: the weight requires grad, the result does
    # not; the kernel reads the weight. With grad on, the node stays eager and autograd sees it.
    w = torch.randn(8, requires_grad=True)

    def f(x):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)) + 1.0

    x = torch.randn(3, 5, 8)
    with torch.no_grad():
        backend, made = _lowering()
        got = shapejit.compile(f, backend=backend)(x)
        _close(got, f(x))
        assert not got.requires_grad
        assert not made[0].stats.get("eager_ops"), made[0].stats.get("eager_ops")
    backend, made = _lowering()
    got = shapejit.compile(f, backend=backend)(x)
    assert got.requires_grad
    got.sum().backward()
    g1 = w.grad.clone()
    w.grad = None
    f(x).sum().backward()
    torch.testing.assert_close(g1, w.grad, rtol=1e-5, atol=1e-6)
