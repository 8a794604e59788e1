"""Sibling reductions: two float sums (or means) over the same space and dims, the later
reading nothing made after the earlier, run as one kernel of two results (one pass, the
prologues they share computed once). Compiled vs eager for column sums (numpy's moments),
row sums, several reduced dims, keepdim, float64, strided inputs, a column split across
threads, dynamic shapes; and the forms that must stay two kernels (the second reads the
first's result, a write between them, different dims or flavours)."""
import numpy as np
import pytest
import torch

import shapejit
from lowering import kernel_ops, lowering as _lowering
from repo import bench

pytestmark = pytest.mark.usefixtures("fresh_shapejit")

RTOL, ATOL = 1e-4, 1e-4   # float32 sums of up to 33000 terms in another order than eager's


def _merged(made):
    """Per compiled graph, the number of kernel steps that compute two reductions."""
    return [sum(sum(op in ("sum", "mean") for op in ops) == 2 for ops in kernels) for kernels in kernel_ops(made)]


def _close(got, want):
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert type(g) is type(w) and g.shape == w.shape and g.dtype == w.dtype
        if isinstance(w, np.ndarray):
            np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)
        else:
            torch.testing.assert_close(g, w, rtol=RTOL, atol=ATOL)


def _run(f, inputs, merged, dynamic=False):
    backend, made = _lowering()
    cf = shapejit.compile(f, backend=backend, dynamic=dynamic)
    for args in inputs:
        want = f(*[a.copy() if isinstance(a, np.ndarray) else a.clone() for a in args])
        _close(cf(*args), want)
        _close(cf(*args), want)
    assert made and _merged(made) == [merged] * len(_merged(made)), _merged(made)
    return made


column_moments = bench("workloads").column_moments   # the suite's numpy_moments


@pytest.mark.filterwarnings("ignore:invalid value encountered")   # one row: sd is 0
@pytest.mark.parametrize("rows", [1, 7, 100, 1000, 33000])
@pytest.mark.parametrize("cols", [3, 64, 130])
def test_numpy_column_moments(rows, cols, threads):
    x = np.random.default_rng(rows + cols).standard_normal((rows, cols)).astype(np.float32)
    _run(column_moments, [(x,)], merged=1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_moments_in_float64_and_dynamic_rows(dtype):
    xs = [(np.random.default_rng(n).standard_normal((n, 16)).astype(dtype),) for n in (50, 301, 2049)]
    _run(column_moments, xs, merged=1, dynamic=True)


@pytest.mark.parametrize("n", [1, 16, 17, 255, 1025, 3000])
def test_row_sums_of_two_expressions(n, threads):
    def f(x, w):
        y = x * w
        return y.sum(-1), (y * y).sum(-1)

    gen = torch.Generator().manual_seed(n)
    _run(f, [(torch.randn(6, 5, n, generator=gen), torch.randn(n, generator=gen))], merged=1)


def test_means_keepdim_and_several_dims(threads):
    def f(x):
        return x.mean((0, 2), keepdim=True), torch.exp(x).mean((0, 2), keepdim=True)

    gen = torch.Generator().manual_seed(4)
    _run(f, [(torch.randn(9, 33, 70, generator=gen),)], merged=1)


def test_an_input_and_an_expression_of_it_strided(threads):
    """x.sum(0) reads the input itself; a transposed x takes the strided loops."""
    def f(x):
        return x.sum(0), (x * x).sum(0)

    gen = torch.Generator().manual_seed(5)
    x = torch.randn(300, 40, generator=gen)
    _run(f, [(x,), (x.t().contiguous().t(),), (torch.randn(40, 300, generator=gen).t(),)], merged=1)


def test_a_prologue_value_read_after_the_kernel():
    def f(x, mu):
        d = x - mu
        return (d * d * d).sum(0), (d * d).sum(0), d * 2.0

    gen = torch.Generator().manual_seed(6)
    _run(f, [(torch.randn(500, 24, generator=gen), torch.randn(24, generator=gen))], merged=1)


def test_empty_reduced_dim():
    def f(x):
        return x.sum(0), torch.abs(x).sum(0)

    _run(f, [(torch.randn(0, 5),), (torch.randn(3, 5),)], merged=1)


def test_second_reads_the_firsts_result_stays_two():
    def f(x):
        m = x.mean(0)
        return m, ((x - m) ** 2).mean(0)

    gen = torch.Generator().manual_seed(7)
    _run(f, [(torch.randn(200, 10, generator=gen),)], merged=0)


def test_a_write_between_stays_two():
    def f(x, y):
        a = (x * 2.0).sum(0)
        y.add_(1.0)
        return a, (x * y).sum(0)

    gen = torch.Generator().manual_seed(8)
    x, y = torch.randn(50, 6, generator=gen), torch.randn(50, 6, generator=gen)
    backend, made = _lowering()
    cf = shapejit.compile(f, backend=backend)
    y1, y2 = y.clone(), y.clone()
    _close(cf(x, y1), f(x, y2))
    torch.testing.assert_close(y1, y2)
    assert _merged(made) == [0]


def test_other_dims_or_flavours_stay_apart():
    def f(x):
        return x.sum(0), (x * x).sum(1), x.mean(0), (x * x).amax(0)

    gen = torch.Generator().manual_seed(9)
    _run(f, [(torch.randn(30, 30, generator=gen),)], merged=0)


def test_a_value_a_later_kernel_recomputes_from_is_still_stored():
    """v feeds both siblings' prologues and a third kernel that recomputes d = v * 2 from v
    (plan_remat): merging the siblings must not stop storing v."""
    def f(x):
        v = torch.exp(x)
        d = v * 2
        return d.sum(0), (d * v).sum(0), (d + 1).sum(1)

    gen = torch.Generator().manual_seed(10)
    _run(f, [(torch.randn(64, 32, generator=gen),)], merged=1)
