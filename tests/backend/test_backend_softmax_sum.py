"""softmax/log_softmax row kernels: exp(x - max) by the kernels' own exp of t <= 0
(sj_expf_neg), contiguous rows two at a time (an odd row count leaves one alone), and a
float32 sum or mean of the same input over the same dim computed in
the row kernel's max pass (one kernel, two outputs: the reductions workload's x.sum(-1)
and softmax(x, -1)). Compiled vs eager for row lengths around the 32-lane blocks and the
1024-element sum blocks, -inf/NaN/inf in rows, 1 and 2 threads, strided inputs, dynamic
shapes, and the forms that must not fuse."""
import pytest
import torch

import shapejit
from shapejit import _C
from lowering import lowering as _lowering

pytestmark = pytest.mark.usefixtures("fresh_shapejit")

RTOL, ATOL = 1e-4, 1e-5   # sums in another order than eager's (as test_backend_reduce)
LENGTHS = [1, 3, 17, 31, 32, 33, 255, 256, 257, 1024, 1057, 2100]


def _graphs(made):
    return [m for m in made if isinstance(m, _C.CompiledGraph)]


def _fused(made):
    """1 when some kernel step runs a sum or mean and a softmax or log_softmax together."""
    for cg in _graphs(made):
        for kind, nodes in zip(cg.step_kinds, cg.step_nodes):
            ops = {cg.graph.nodes[i].op for i in nodes}
            if kind == "kernel" and ops & {"sum", "mean"} and ops & {"softmax", "log_softmax"}:
                return True
    return False


def _close(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        torch.testing.assert_close(g, w, rtol=RTOL, atol=ATOL, equal_nan=True)


def _run(f, inputs, dynamic=False, fused=True):
    backend, made = _lowering()
    fn = shapejit.compile(f, backend=backend, dynamic=dynamic)
    for x in inputs:
        want = f(x.clone())
        _close(fn(x), want)
        _close(fn(x), want)   # a second call: same values
    assert _fused(made) == fused
    return made


@pytest.mark.parametrize("n", LENGTHS)
def test_sum_and_softmax_of_one_input(n, threads):
    def f(x):
        return x.sum(dim=-1), x.mean(dim=1), torch.softmax(x, dim=-1)

    gen = torch.Generator().manual_seed(n)
    _run(f, [torch.randn(5, 67, n, generator=gen)])


@pytest.mark.parametrize("n", [1, 17, 257, 1057])
def test_mean_keepdim_and_log_softmax(n, threads):
    def f(x):
        return x.mean(-1, keepdim=True), torch.log_softmax(x, -1) * 2.0

    gen = torch.Generator().manual_seed(n)
    _run(f, [torch.randn(66, n, generator=gen)])


def test_middle_dim_and_strided_input(threads):
    """The row over a middle dim, and a transposed input (the kernel's strided path)."""
    def f(x):
        return x.sum(1), torch.softmax(x, 1)

    gen = torch.Generator().manual_seed(3)
    _run(f, [torch.randn(4, 257, 9, generator=gen)])

    def g(x):
        y = x.transpose(1, 2)
        return y.sum(-1), torch.softmax(y, -1)

    _run(g, [torch.randn(3, 1030, 6, generator=gen)])


@pytest.mark.parametrize("n", [3, 17, 40, 257, 1100])
def test_rows_with_inf_and_nan(n, threads):
    """Per row: a -inf, all -inf, a NaN, a +inf, two +inf, +inf and -inf, and huge and tiny
    values (exp of x - max far below the normal range: denormal results as eager's)."""
    def f(x):
        return x.sum(-1), torch.softmax(x, -1), x.mean(-1)

    gen = torch.Generator().manual_seed(n)
    x = torch.randn(9, n, generator=gen)
    x[0, n // 2] = float("-inf")
    x[1, :] = float("-inf")
    x[2, n - 1] = float("nan")
    x[3, 0] = float("inf")
    x[4, :2] = float("inf")
    x[5, 0], x[5, n - 1] = float("inf"), float("-inf")
    x[6] *= 1e30
    x[7] = -torch.arange(n, dtype=torch.float32) * 2.0
    x[8] = -torch.arange(n, dtype=torch.float32) * 0.35
    _run(f, [x])
    _run(lambda x: (torch.log_softmax(x, -1), torch.softmax(x.flip(0), -1)), [x, x[1:]], fused=False)


def test_exp_range_against_eager():
    """softmax over rows whose x - max covers [-110, 0] finely: the inline exp matches eager
    (denormal outputs included) within the tests' tolerance, and 0 where eager is 0."""
    def f(x):
        return (torch.softmax(x, -1),)

    t = -torch.linspace(0, 110, 64 * 1001)
    x = t.reshape(64, 1001)
    x[:, 0] = 0
    backend, made = _lowering()
    fn = shapejit.compile(f, backend=backend)
    got, want = fn(x)[0], f(x)[0]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=0)
    assert torch.equal(got == 0, want == 0)


def test_dynamic_shapes(threads):
    def f(x):
        return x.sum(-1), torch.softmax(x, -1)

    gen = torch.Generator().manual_seed(5)
    made = _run(f, [torch.randn(s, generator=gen) for s in ((4, 7, 33), (3, 5, 257), (2, 9, 1), (1, 3, 1100))],
                dynamic=True)
    assert _graphs(made)


def test_not_fused_across_an_in_place_write():
    """x.add_ between the sum and the softmax: the softmax reads the new x (no fusion)."""
    def f(x):
        s = x.sum(-1)
        x.add_(1.0)
        return s, torch.softmax(x, -1) * x

    gen = torch.Generator().manual_seed(6)
    x = torch.randn(6, 40, generator=gen)
    backend, made = _lowering()
    fn = shapejit.compile(f, backend=backend)
    a, b = x.clone(), x.clone()
    _close(fn(a), f(b))
    assert torch.equal(a, b)
    assert not _fused(made)


def test_sum_read_between_and_other_dims():
    """The sum read by a node before the softmax (it is still an output of the fused
    kernel); a sum over another dim, a float64 sum or a prologue do not fuse."""
    def f(x):
        s = x.sum(-1)
        return s * 2.0, torch.softmax(x, -1)

    gen = torch.Generator().manual_seed(7)
    _run(f, [torch.randn(5, 300, generator=gen)])

    def g(x):
        return x.sum(0), x.sum(-1, dtype=torch.float64), (x * 2).sum(-1), torch.softmax(x, -1)

    _run(g, [torch.randn(5, 300, generator=gen)], fused=False)
