"""Pointwise values recomputed by the later kernels that read them instead of stored
(backend/plan_remat.c): results equal eager's, the count of recomputed nodes says when it
happened, and the cases it must leave alone (a reader that is not a kernel, a graph output,
more full-size reads, a value made of broadcasts only) store the value as before."""
import numpy as np
import pytest
import torch

import shapejit
from lowering import close, lowering
from shapejit import _C  # noqa: F401  (the backend's extension, through lowering)

pytestmark = pytest.mark.usefixtures("fresh_shapejit")


def column_moments(x):
    """Per column: mean, variance, and the third and fourth standardised moments."""
    n = x.shape[0]
    mu = x.sum(axis=0) / n
    d = x - mu
    var = (d * d).sum(axis=0) / n
    z = d / np.sqrt(var)
    z2 = z * z
    skew = (z2 * z).sum(axis=0) / n
    return mu, var, skew, (z2 * z2).sum(axis=0) / n


def _compiled(fn, **kw):
    backend, made = lowering()
    return shapejit.compile(fn, backend=backend, **kw), made


def _recomputed(made):
    return sum(m.stats["recomputed_nodes"] for m in made if hasattr(m, "stats"))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("rows", [1, 3, 100, 1000, 8192])
def test_numpy_column_moments(threads, rows):
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        x = np.random.default_rng(rows).standard_normal((rows, 64)).astype(np.float32) * 3 + 1
        fn, made = _compiled(column_moments)
        with np.errstate(all="ignore"):   # one row: var is 0, z is nan
            got, want = fn(x), column_moments(x)
        for g, w in zip(got, want):
            assert isinstance(g, np.ndarray) and g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-4, equal_nan=True)
        # d (x - mu) and z2 ((d / sqrt(var)) ** 2) are recomputed by the reductions reading them
        assert _recomputed(made) >= 4
    finally:
        torch.set_num_threads(old)


def test_nonfinite_values_flow_through_recomputed_chains():
    x = np.random.default_rng(0).standard_normal((40, 8)).astype(np.float32)
    x[3, 1] = np.nan
    x[5, 2] = np.inf
    x[:, 4] = 0.0   # var 0: z is nan (0 / 0)
    fn, made = _compiled(column_moments)
    with np.errstate(all="ignore"):
        got, want = fn(x), column_moments(x)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-4, equal_nan=True)
    assert _recomputed(made) >= 4


def _norm_rows(x):
    m = x.mean(-1, keepdim=True)
    d = x - m
    var = (d * d).mean(-1, keepdim=True)
    return d * torch.rsqrt(var + 1e-5), var


@pytest.mark.parametrize("shape", [(5, 7), (4, 33, 16), (2, 3, 1, 129)])
def test_torch_centered_value_recomputed(shape):
    x = torch.randn(*shape) * 2 + 0.5
    fn, made = _compiled(_norm_rows)
    close(fn(x), _norm_rows(x))
    assert _recomputed(made) >= 1


def test_dynamic_sizes_share_one_graph():
    fn, made = _compiled(_norm_rows, dynamic=True)
    for n in (3, 17, 64, 5):
        x = torch.randn(n, n + 3)
        close(fn(x), _norm_rows(x))
    graphs = [m for m in made if hasattr(m, "stats")]
    assert len(graphs) == 1 and _recomputed(made) >= 1


def test_chain_of_recomputed_values_equals_eager():
    def f(x, m):
        a = x - m                              # recomputed by the later reductions
        b = torch.clamp(a * 0.5, -1.0, 1.0)    # recomputed by both, with a
        return a.sum(0), (b * b).sum(0), (b * a).amax(0)

    x, m = torch.randn(50, 12), torch.randn(12)
    fn, made = _compiled(f)
    close(fn(x, m), f(x, m))
    assert _recomputed(made) >= 4   # a, and b (with a) in both later kernels


def test_costly_values_stay_stored():
    def f(x, m):
        a = torch.tanh(x - m)      # a libm call per element: stored once, read back
        q = torch.exp(x) * m       # the same, below a cheap op
        return a.sum(0), (a * a).amax(0), q.sum(0), (q + 1.0).amax(0)

    x, m = torch.randn(50, 12), torch.randn(12) + 3.0
    fn, made = _compiled(f)
    close(fn(x, m), f(x, m))
    assert _recomputed(made) == 0


def test_two_new_full_size_reads_keep_a_chain_stored():
    def f(x, y):
        a = x * 2.0 + y            # the last reduction would read x and y instead of a
        b = torch.tanh(a) - y
        return a.sum(0), (b * b).sum(0), (b * a).amax(0)

    x, y = torch.randn(50, 12), torch.randn(50, 12)
    fn, made = _compiled(f)
    close(fn(x, y), f(x, y))
    assert _recomputed(made) == 0


def test_reader_outside_kernels_keeps_it_stored():
    def f(x):
        d = x - x.mean(0)
        return (d * d).sum(0), torch.cumsum(d, 0)   # cumsum is an eager step

    x = torch.randn(30, 9)
    fn, made = _compiled(f)
    # cumsum of centred values: sums near zero, compared at a sum's tolerance
    torch.testing.assert_close(fn(x), f(x), rtol=1e-4, atol=1e-4)
    assert _recomputed(made) == 0


def test_graph_output_stays_stored():
    def f(x):
        d = x - x.mean(0)
        return d, (d * d).sum(0), (d * 3.0).amax(0)

    x = torch.randn(30, 9)
    fn, made = _compiled(f)
    close(fn(x), f(x))
    assert _recomputed(made) == 0


def test_more_full_size_reads_keep_it_stored():
    def f(a, b, c):
        v = a * b + c                  # three full-size reads to recompute v
        return v.sum(0), (v * v).amax(1)

    a, b, c = torch.randn(20, 8), torch.randn(20, 8), torch.randn(20, 8)
    fn, made = _compiled(f)
    close(fn(a, b, c), f(a, b, c))
    assert _recomputed(made) == 0


def test_value_of_broadcasts_only_keeps_it_stored():
    def f(r, c):
        v = r[:, None] + c[None, :]   # full size, made of broadcasts: the reader's space
        return v.sum(0), (v * 2.0).amax(0)

    r, c = torch.randn(20), torch.randn(8)
    fn, made = _compiled(f)
    close(fn(r, c), f(r, c))
    assert _recomputed(made) == 0


def test_integer_division_by_zero_raises_as_eager():
    def f(x, y):
        q = x // y
        return q.sum(0), (q * 2).amax(0)

    x = torch.randint(-50, 50, (16, 5))
    y = torch.randint(1, 4, (16, 5))
    fn, made = _compiled(f)
    close(fn(x, y), f(x, y))
    y[3, 2] = 0
    with pytest.raises(Exception) as want:
        f(x, y)
    with pytest.raises(type(want.value)):
        fn(x, y)


def test_write_in_place_between_maker_and_reader_keeps_it_stored():
    def f(x, m):
        d = x - m
        s = d.sum(0)
        x[1:].add_(1.0)            # x (through a view) changes after d was made
        return s, (d * d).amax(0), x * 1.0

    x, m = torch.randn(12, 5), torch.randn(5)
    fn, made = _compiled(f)
    x1 = x.clone()
    got, want = fn(x1, m), f(x.clone(), m)
    close(got, want)
    assert _recomputed(made) == 0


def test_numpy_out_between_maker_and_reader_keeps_it_stored():
    def f(x, m):
        d = x - m
        s = d.sum(axis=0)
        np.multiply(x, 2.0, out=x)  # x changes after d was made
        return s, (d * d).max(axis=0)

    x = np.random.default_rng(3).standard_normal((12, 5)).astype(np.float32)
    m = np.random.default_rng(4).standard_normal(5).astype(np.float32)
    fn, made = _compiled(f)
    got, want = fn(x.copy(), m), f(x.copy(), m)
    close(got, want)
    assert _recomputed(made) == 0


def test_knob_off_stores_every_value():
    x = np.random.default_rng(5).standard_normal((300, 16)).astype(np.float32)
    with shapejit.config.patch(cpu_recompute=False):
        fn, made = _compiled(column_moments)
        got = fn(x)
    for g, w in zip(got, column_moments(x)):
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-4)
    assert _recomputed(made) == 0
