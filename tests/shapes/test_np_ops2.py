"""numpy routines run as eager steps (shapes/rules_np_more.c): symbolic sizes through
their rules, data-dependent lengths (bincount, lstsq's residuals) as unbacked symbols under
capture_dynamic_output_shape_ops, and the errors eager raises for bad arguments. The
static cases are corpus entries (tests/support/corpus/np_ops2.py)."""
import numpy as np
import pytest

import shapejit

pytestmark = pytest.mark.usefixtures("fresh_shapejit")

RNG = np.random.default_rng(0)


def A(*shape):
    return RNG.standard_normal(shape)


def SPD(n, *batch):
    m = A(*batch, n, n)
    return m @ np.swapaxes(m, -1, -2) + n * np.eye(n)


def same(actual, expected):
    assert type(actual) is type(expected), (type(actual), type(expected))
    if isinstance(expected, tuple):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            same(a, e)
    elif isinstance(expected, (np.ndarray, np.generic)):
        assert actual.dtype == expected.dtype and actual.shape == expected.shape
        np.testing.assert_array_equal(actual, expected)
    else:
        assert actual == expected


# ---- symbolic sizes: one graph over every size -------------------------------------------
def la_square_ops(a, v):
    w, q = np.linalg.eigh(a)
    return (np.linalg.inv(a), np.linalg.det(a), np.linalg.slogdet(a), w, q,
            np.linalg.cholesky(a), np.linalg.solve(a, v), np.linalg.matrix_power(a, 2))


def np_binning(x, xp):
    return (np.searchsorted(xp, x), np.digitize(x, xp), np.interp(x, xp, xp * 2),
            np.trapezoid(x), np.trapezoid(xp, xp), np.kron(x, xp))


def batched_det(s):
    return np.linalg.det(s) + 1.0, np.linalg.inv(s)


@pytest.mark.parametrize("fn,make", [
    (la_square_ops, lambda n: (SPD(n), A(n))),
    (np_binning, lambda n: (A(n + 2), np.sort(A(n)))),
    (batched_det, lambda n: (SPD(3, n),)),
])
def test_symbolic_rules_one_graph(fn, make):
    cf = shapejit.compile(fn, dynamic=True)
    for n in (4, 6, 9):   # never 3: duck sizing would share one symbol with the 3x3 matrices
        args = make(n)
        same(cf(*args), fn(*args))
    assert shapejit.stats()["graphs"] == 1


def qr_svd_cov(a, y):
    return (np.linalg.qr(a), np.linalg.qr(a.T, mode='complete'), np.linalg.svd(a, full_matrices=False),
            np.linalg.svd(a.T), np.cov(a), np.cov(a, y, rowvar=False), np.corrcoef(a.T),
            np.tensordot(a, a, axes=([0], [0])), np.tensordot(a, a.T, axes=1))


def test_min_dims_and_stacked_variables_are_symbolic():
    cf = shapejit.compile(qr_svd_cov, dynamic=True)
    for n in (3, 5, 8):
        a, y = A(n + 1, n), A(n + 1)
        same(cf(a, y), qr_svd_cov(a, y))
    assert shapejit.stats()["graphs"] == 1


def hist(a, w, edges):
    return np.histogram(a, bins=4), np.histogram(a, bins=edges, weights=w), np.digitize(a, edges)


def test_histogram_over_changing_sample_counts_one_graph():
    cf = shapejit.compile(hist, dynamic=True)
    for n in (6, 9, 13):
        a, w, edges = A(n), RNG.random(n), np.sort(A(n - 3))
        same(cf(a, w, edges), hist(a, w, edges))
    assert shapejit.stats()["graphs"] == 1


def lstsq_x(a, b):
    return np.linalg.lstsq(a, b, rcond=None)[0]


def test_specialised_rule_recompiles_per_size_and_stays_right():
    with shapejit.config.patch(capture_dynamic_output_shape_ops=True):
        cf = shapejit.compile(lstsq_x, dynamic=True)
        for n in (6, 9, 6):
            a, b = A(n, 3), A(n)
            same(cf(a, b), lstsq_x(a, b))
        assert shapejit.stats()["graphs"] == 2   # lstsq's sizes are guarded by value


# ---- data-dependent lengths -------------------------------------------------------------
def bincount_stats(k, w):
    c = np.bincount(k)
    cw = np.bincount(k, weights=w, minlength=12)
    return c, c.shape[0] + 1, cw / cw.sum()


def test_bincount_unbacked_length_no_recompile():
    with shapejit.config.patch(capture_dynamic_output_shape_ops=True):
        cf = shapejit.compile(bincount_stats, fullgraph=True)
        for hi in (4, 9, 15):
            k = RNG.integers(0, hi, 20)
            w = RNG.random(20)
            same(cf(k, w), bincount_stats(k, w))
        assert shapejit.stats()["graphs"] == 1
        assert shapejit.stats()["recompiles"] == 0


def test_bincount_breaks_without_the_knob():
    e = shapejit.explain(bincount_stats)(np.arange(5), np.ones(5))
    assert e.graph_break_count >= 1
    assert "capture_dynamic_output_shape_ops" in e.break_reasons[0].reason


def lstsq_fit(a, b):
    x, res, rank, sv = np.linalg.lstsq(a, b, rcond=None)
    return x, res, rank, sv, res.shape[0]


def test_lstsq_residuals_full_and_deficient_rank():
    with shapejit.config.patch(capture_dynamic_output_shape_ops=True):
        cf = shapejit.compile(lstsq_fit, fullgraph=True)
        a = A(6, 3)
        b = A(6, 2)
        same(cf(a, b), lstsq_fit(a, b))          # full rank: residuals (2,)
        a[:, 2] = a[:, 0]
        same(cf(a, b), lstsq_fit(a, b))          # rank 2: residuals empty
        wide = A(3, 5)
        same(cf(wide, b[:3]), lstsq_fit(wide, b[:3]))   # m < n: always empty
        assert shapejit.stats()["graph_breaks"] == 0


# ---- errors are eager's -----------------------------------------------------------------
def _raises_like_eager(fn, *args):
    with pytest.raises(Exception) as eager:
        fn(*args)
    with pytest.raises(type(eager.value)) as got:
        shapejit.compile(fn)(*args)
    assert str(got.value) == str(eager.value)


@pytest.mark.parametrize("fn,args", [
    (lambda a: np.linalg.inv(a) + 1, (np.ones((3, 3)),)),                  # singular: raised at run time
    (lambda a: np.linalg.inv(a) + 1, (np.ones((3, 4)),)),                  # not square
    (lambda a: np.linalg.det(a) + 1, (np.ones(3),)),                       # 1-d
    (lambda a: np.linalg.cholesky(a) + 1, (-np.eye(3),)),                  # not positive definite
    (lambda a: np.linalg.inv(a) + 1, (np.eye(3, dtype=np.float16),)),      # float16 refused by linalg
    (lambda a, b: np.linalg.solve(a, b) + 1, (np.eye(3), np.ones(4))),     # sizes differ
    (lambda a: np.linalg.qr(a, mode='bogus'), (np.eye(3),)),
    (lambda k: np.bincount(k) + 1, (np.array([1, -1, 2]),)),               # negative counts
    (lambda x: np.searchsorted(x, x, side='middle'), (np.arange(3.0),)),
    (lambda x: np.histogram(x, bins=0)[0] + 1, (np.arange(3.0),)),
    (lambda x: np.interp(x, x[:2], x) + 1, (np.arange(3.0),)),
    (lambda a, b: np.tensordot(a, b, axes=1) + 1, (np.ones((2, 3)), np.ones((2, 3)))),
    (lambda a, b: np.einsum('...ij,...jk', a, b), (np.ones((2, 3, 4)), np.ones((3, 3, 2)))),
])
def test_bad_arguments_raise_as_eager(fn, args):
    _raises_like_eager(fn, *args)


def test_bincount_symbolic_input_and_unbacked_output_one_graph():
    with shapejit.config.patch(capture_dynamic_output_shape_ops=True):
        cf = shapejit.compile(bincount_stats, dynamic=True, fullgraph=True)
        for n, hi in ((10, 4), (17, 9), (25, 3)):
            k = RNG.integers(0, hi, n)
            w = RNG.random(n)
            same(cf(k, w), bincount_stats(k, w))
        assert shapejit.stats()["graphs"] == 1


def bincount_head(k):
    c = np.bincount(k, minlength=5)
    return c[:5] * 2, c[0]


def lstsq_branch(a, b):
    x, res, rank, sv = np.linalg.lstsq(a, b, rcond=None)
    if res.shape[0] > 2:          # decided by the range: at most one residual per column of b
        return x * 0
    return x, res


def test_unbacked_lengths_have_ranges():
    """bincount is at least minlength long (so c[:5] needs no data-dependent guard); lstsq
    has at most one residual per column of b (so the branch is decided at capture)."""
    with shapejit.config.patch(capture_dynamic_output_shape_ops=True):
        cf = shapejit.compile(bincount_head, fullgraph=True)
        for k in ([0, 1, 1, 3], [0, 1, 1, 9]):
            k = np.array(k)
            same(cf(k), bincount_head(k))
        cl = shapejit.compile(lstsq_branch, fullgraph=True)
        a, b = A(6, 3), A(6, 2)
        same(cl(a, b), lstsq_branch(a, b))
        assert shapejit.stats()["graph_breaks"] == 0
