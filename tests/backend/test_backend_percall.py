"""What a kernel step costs besides its loops: a kernel runs its loops in a function of
their own, inside an OpenMP parallel region only when there is more than one thread and
enough work (else called directly, no team of one); torch outputs come from torch's lean
CPU allocator when it is there. Compiled vs eager at 1 and 2 threads, below and above the
parallel threshold, integer division by zero from a parallel and a serial run, and the
outputs' sizes, strides, dtype and inference flag as torch.empty makes them."""
import pytest
import torch

import shapejit
from shapejit import _C
from lowering import close, lowering

pytestmark = pytest.mark.usefixtures("fresh_shapejit")


def _layout(t):
    """Strides where they place elements (a size-1 dim's stride places none)."""
    return tuple(st if n != 1 else None for n, st in zip(t.shape, t.stride()))


def _close_sums(got, want):
    """Within the reduction tolerances (sums add in another order than eager's), laid out
    as eager's."""
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.dtype == b.dtype and (_layout(a) == _layout(b) or not b.numel())
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, equal_nan=True)


def _stats(made, key):
    return sum(m.stats[key] for m in made if isinstance(m, _C.CompiledGraph))


def _with_threads(n, body):
    old = shapejit.config.threads
    shapejit.config.threads = n
    try:
        body()
    finally:
        shapejit.config.threads = old


@pytest.mark.parametrize("threads", [1, 2])
def test_kernels_serial_and_parallel(threads):
    """Pointwise (dense, dense in a transposed order, strided, rank 1 strided) and
    reduction/row kernels equal eager on either side of the 32768-element threshold; the
    source calls the loops' function both ways and opens a parallel region only behind the
    thread check."""
    def f(x):
        y = torch.relu(x * 2 + 1)
        return (y, x.sum(-1), x.mean(1), torch.softmax(x, -1), (x.transpose(0, 2) + 1),
                x[:, :, ::2] * 2 + x.transpose(1, 2)[:, ::2, :].transpose(1, 2))

    def g(v):
        return v * 3 - 1

    def body():
        backend, made = lowering()
        c = shapejit.compile(f, backend=backend, dynamic=True)
        c1 = shapejit.compile(g, backend=backend, dynamic=True)
        gen = torch.Generator().manual_seed(threads)
        for shape in ((3, 5, 7), (4, 64, 256), (2, 1, 40000), (0, 3, 4)):
            x = torch.randn(shape, generator=gen)
            _close_sums(c(x), f(x))
            v = torch.randn(shape[-1] * 2, generator=gen)[::2]   # rank 1, strided
            close(c1(v), g(v))
        assert _stats(made, "eager_fallbacks") == 0
        assert all(m.stats["threads"] == threads for m in made if isinstance(m, _C.CompiledGraph))
        for m in made:
            src = m.source
            assert "_part(n, p, st, dense, &sj_bad)" in src
            for at in range(len(src)):
                at = src.find("#pragma omp parallel\n", at)
                if at < 0:
                    break
                # the region sits in the branch taken with more than one thread
                assert "omp_get_max_threads() > 1) {\n" in src[max(0, at - 120):at]
                at += 1

    _with_threads(threads, body)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("n", [1000, 100_003])
def test_int_division_by_zero_from_parts(threads, n):
    """A zero divisor found by any thread's part of the loops sends the kernel to eager,
    which raises as eager does; without one the kernel's values are eager's."""
    def f(x, y):
        return (x // y) + 1

    def body():
        backend, made = lowering()
        c = shapejit.compile(f, backend=backend)
        gen = torch.Generator().manual_seed(n)
        x = torch.randint(-1000, 1000, (n,), generator=gen)
        y = torch.randint(1, 9, (n,), generator=gen)
        close(c(x, y), f(x, y))
        y[n - 3] = 0   # in the last thread's share
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            c(x, y)
        assert _stats(made, "eager_fallbacks") == 1
        y[n - 3] = 2
        close(c(x, y), f(x, y))

    _with_threads(threads, body)


@pytest.mark.parametrize("shape", [(), (5,), (2, 1, 3), (2, 0, 3), (1, 1), (3, 4, 1)])
def test_outputs_as_torch_empty_makes_them(shape):
    """Kernel outputs: contiguous with torch.empty's strides (also over dims of size 0 and
    1), the graph's dtype, no grad, and inference tensors exactly when eager's are."""
    def f(x):
        return x * 2, (x + 1).to(torch.float64), x > 0

    backend, made = lowering()
    c = shapejit.compile(f, backend=backend)
    x = torch.randn(shape)
    for mode in (torch.no_grad, torch.inference_mode):
        with mode():
            got, want = c(x), f(x)
        close(got, want)
        for a, b in zip(got, want):
            assert a.stride() == torch.empty(shape).stride() == b.stride()
            assert a.dtype == b.dtype and not a.requires_grad
            assert a.is_inference() == b.is_inference()
    assert _stats(made, "kernel_calls") >= 2 and _stats(made, "eager_fallbacks") == 0
