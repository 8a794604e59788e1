"""RMS norm as one row kernel (plan_rms.c): x * rsqrt(mean(x ** 2, -1, keepdim) + eps),
times a weight of the last dim or not, in the spellings transformers' T5, Llama and Qwen2
norms use (pow(2), x * x, square(); the weight on either side). Compiled vs eager for row
lengths around the vector widths, rank 2 and 3, a transposed input (the strided loops),
dynamic shapes, a residual sum before it that is read again later, an epilogue after it;
and the near misses that must stay as they were (keepdim=False, another dim, the mean read
twice, a weight of another shape)."""
import pytest
import torch
import torch.nn.functional as F

import shapejit
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
