"""numpy routines captured as graph ops that run the library routine as an eager step:
numpy.linalg (solve, inv, cholesky, qr, det, slogdet, norm, eigh, svd, pinv, matrix_rank,
lstsq, matrix_power, batched where numpy stacks), cov/corrcoef, einsum, tensordot, kron, roll,
pad, clip, searchsorted, sort/argsort, cumsum/cumprod, diff, trapezoid, interp,
histogram/digitize; bincount's data-dependent length breaks unless
capture_dynamic_output_shape_ops is set (tests/shapes/test_np_ops2.py)."""
import numpy as np

from ._base import A, AP, AI, numpy_case, with_breaks


def SPD(n, *batch, dtype=np.float64):
    """A symmetric positive-definite matrix (a stack of them with batch dims)."""
    m = A(*batch, n, n)
    return (m @ np.swapaxes(m, -1, -2) + n * np.eye(n)).astype(dtype)


def SORTED(n, dtype=np.float64):
    return np.sort(A(n)).astype(dtype)


# ---- numpy.linalg ---------------------------------------------------------------------
@numpy_case(lambda: (SPD(4), A(4), A(4, 2)))
def np_op2_solve_vector_and_matrix(a, b, bm):
    x = np.linalg.solve(a, b)
    return x, np.linalg.solve(a, bm), a @ x - b


@numpy_case(lambda: (SPD(3, 2), A(2, 3, 2)))
def np_op2_solve_batched(a, b):
    return np.linalg.solve(a, b), np.linalg.solve(a, b[0])


@numpy_case(lambda: (SPD(3, dtype=np.float32), A(3, dtype=np.float32)))
def np_op2_solve_float32(a, b):
    return np.linalg.solve(a, b) * 2, np.linalg.inv(a)


@numpy_case(lambda: (SPD(3), SPD(3, 2)))
def np_op2_inv_plain_and_stacked(a, s):
    ai = np.linalg.inv(a)
    return ai, ai @ a, np.linalg.inv(s).sum(axis=0)


@numpy_case(lambda: (AI(3, 3, low=1, high=5) + 4 * np.eye(3, dtype=np.int64),))
def np_op2_inv_integer_is_float64(a):
    return np.linalg.inv(a), np.linalg.det(a)


@numpy_case(lambda: (SPD(4), SPD(3, 2)))
def np_op2_cholesky_lower_upper(a, s):
    l = np.linalg.cholesky(a)
    return l, np.linalg.cholesky(a, upper=True), l @ l.T, np.linalg.cholesky(s)


@numpy_case(lambda: (A(5, 3),))
def np_op2_qr_reduced_fields(a):
    q, r = np.linalg.qr(a)
    res = np.linalg.qr(a)
    return q, r, res.Q - q, res.R, q @ r


@numpy_case(lambda: (A(4, 3), A(2, 3, 5)))
def np_op2_qr_modes(a, s):
    return (np.linalg.qr(a, mode='complete'), np.linalg.qr(a, mode='r'),
            np.linalg.qr(a, 'raw'), np.linalg.qr(s))


@numpy_case(lambda: (A(3, 3), A(2, 4, 4)))
def np_op2_det_scalar_and_batched(a, s):
    d = np.linalg.det(a)
    return d, d * 2.0, np.linalg.det(s), np.linalg.det(a.astype(np.float32))


@numpy_case(lambda: (A(3, 3), A(2, 3, 3)))
def np_op2_slogdet_named_result(a, s):
    res = np.linalg.slogdet(a)
    sign, logdet = np.linalg.slogdet(s)
    return res, res.sign * np.exp(res.logabsdet), sign, logdet


@numpy_case(lambda: (A(3, 4), A(2, 3, 4), A(5)))
def np_op2_norm_ord_axis_keepdims(m, t, v):
    return (np.linalg.norm(m), np.linalg.norm(m, 'fro'), np.linalg.norm(m, ord=1),
            np.linalg.norm(m, ord=np.inf), np.linalg.norm(v, ord=3), np.linalg.norm(v, 1),
            np.linalg.norm(t, axis=-1), np.linalg.norm(t, axis=(1, 2), keepdims=True),
            np.linalg.norm(m, axis=0, ord=-np.inf), np.linalg.norm(v, ord=0))


@numpy_case(lambda: (A(3, 4),))
def np_op2_norm_matrix_spectral(m):
    return np.linalg.norm(m, 2), np.linalg.norm(m, 'nuc'), np.linalg.norm(m, -2)


@numpy_case(lambda: (SPD(4), SPD(3, 2)))
def np_op2_eigh_values_vectors(a, s):
    w, v = np.linalg.eigh(a)
    res = np.linalg.eigh(s, UPLO='U')
    return w, v, res, res.eigenvalues.sum(-1), np.linalg.eigvalsh(a)


@numpy_case(lambda: (A(5, 3), A(2, 3, 4)))
def np_op2_svd_full_and_reduced(a, s):
    u, sv, vh = np.linalg.svd(a)
    res = np.linalg.svd(a, full_matrices=False)
    return u, sv, vh, res, res.U * res.S @ res.Vh, np.linalg.svd(s, full_matrices=False)


@numpy_case(lambda: (A(4, 3), SPD(3)))
def np_op2_svd_values_only_hermitian(a, h):
    return (np.linalg.svd(a, compute_uv=False), np.linalg.svd(h, hermitian=True),
            np.linalg.svd(a.astype(np.float32), compute_uv=False))


@numpy_case(lambda: (A(5, 3), A(2, 3, 4), SPD(3)))
def np_op2_pinv_matrix_rank(a, s, h):
    p = np.linalg.pinv(a)
    return (p, p @ a, np.linalg.pinv(s, rcond=1e-8), np.linalg.pinv(h, hermitian=True),
            np.linalg.matrix_rank(a), np.linalg.matrix_rank(s), np.linalg.matrix_rank(h, hermitian=True))


@with_breaks("numpy", lambda: (A(6, 3), A(6)), graphs=2, breaks=1)
def np_op2_lstsq_breaks_on_residuals(a, b):
    a2 = a * 2.0
    x, res, rank, sv = np.linalg.lstsq(a2, b, rcond=None)
    return x + 1, res, rank, sv


@numpy_case(lambda: (A(3, 3), AI(3, 3, low=-2, high=3)))
def np_op2_matrix_power(a, k):
    return (np.linalg.matrix_power(a, 3), np.linalg.matrix_power(a, 0),
            np.linalg.matrix_power(k, 2), np.linalg.matrix_power(a @ a.T + 3 * np.eye(3), -2))


# ---- statistics -----------------------------------------------------------------------
@numpy_case(lambda: (A(3, 6), A(6, 2), A(6)))
def np_op2_cov_forms(m, obs, v):
    return (np.cov(m), np.cov(obs, rowvar=False), np.cov(m, bias=True), np.cov(m, ddof=2),
            np.cov(v), np.cov(v, A(6) if False else v * 2), np.cov(m.astype(np.float32)),
            np.cov(m, dtype=np.float32))


@numpy_case(lambda: (A(3, 6), A(6), A(6)))
def np_op2_corrcoef_forms(m, x, y):
    return np.corrcoef(m), np.corrcoef(x, y), np.corrcoef(m.T, rowvar=False), np.corrcoef(x)


# ---- products -------------------------------------------------------------------------
@numpy_case(lambda: (A(2, 3, 4), A(2, 4, 5), A(3, 4)))
def np_op2_einsum_ellipsis_implicit(a, b, m):
    return (np.einsum('...ij,...jk->...ik', a, b), np.einsum('...ij,...jk', a, b),
            np.einsum('ij->', m), np.einsum('ii', m[:, :3]), np.einsum('ij,ij->i', m, m),
            np.einsum('bij->bji', a), np.einsum('i...->...', a), np.einsum('...i,i', a, m[0]))


@numpy_case(lambda: (A(3, 4), A(4, 5), AI(4, 2)))
def np_op2_einsum_mixed_dtypes(a, b, k):
    return np.einsum('ij,jk', a, b), np.einsum('ij,jk->ki', a, k), np.einsum('ij', k)


@numpy_case(lambda: (A(3, 4, 5), A(4, 5, 2), A(5, 3)))
def np_op2_tensordot_axes_forms(a, b, c):
    return (np.tensordot(a, b), np.tensordot(a, b, axes=2), np.tensordot(a, c, axes=([2, 0], [0, 1])),
            np.tensordot(a[0], c, axes=1), np.tensordot(a[0, 0], c[:, 0], axes=0),
            np.tensordot(c, a, axes=([1], [0])), np.tensordot(a[0, 0], a[0, 0], axes=1))


@numpy_case(lambda: (A(2, 2), A(2, 3), AI(3), A(2, 1, 2)))
def np_op2_kron_ranks_dtypes(a, b, k, t):
    return (np.kron(a, b), np.kron(k, a), np.kron(a, t), np.kron(k, k), np.kron(k > 4, k > 4),
            np.kron(a.astype(np.float32), 2), np.kron([1.0, -1.0], k))


# ---- data movement --------------------------------------------------------------------
@numpy_case(lambda: (A(3, 4), A(5)))
def np_op2_roll_shift_axis_forms(a, v):
    return (np.roll(a, 1), np.roll(a, -5), np.roll(a, 2, axis=1), np.roll(a, (1, 2), axis=(0, 1)),
            np.roll(a, 1, axis=(0, 1)), np.roll(v, 7), np.roll(a, (1, -1), axis=(1, 1)))


@numpy_case(lambda: (A(3, 4), AI(4)))
def np_op2_pad_modes(a, k):
    return (np.pad(a, 1), np.pad(a, ((1, 2), (0, 3))), np.pad(a, (2, 1), mode='edge'),
            np.pad(a, ((1, 1), (2, 2)), mode='reflect'), np.pad(a, 2, mode='wrap'),
            np.pad(a, ((0, 1), (1, 0)), constant_values=-1.5), np.pad(k, (1, 2), constant_values=7),
            np.pad(a, ((1,), (2,)), mode='symmetric'))


@numpy_case(lambda: (A(3, 4), A(4), AI(3, 4)))
def np_op2_clip_scalar_array_bounds(a, lo, k):
    return (np.clip(a, -0.5, 0.5), np.clip(a, lo, 1.0), np.clip(a, None, lo), np.clip(k, 2, 7),
            np.clip(k, 2.5, 7), a.clip(lo, lo + 1), np.clip(a, min=0))


@numpy_case(lambda: (A(4, 5), AI(6)))
def np_op2_sort_axis_kind(a, k):
    return (np.sort(a), np.sort(a, axis=0), np.sort(a, axis=None), np.sort(a, kind='stable'),
            np.sort(a, kind='mergesort', axis=1), np.sort(k, kind='heapsort'))


@numpy_case(lambda: (AI(4, 5, high=4), A(6)))
def np_op2_argsort_stable_ties(k, v):
    return (np.argsort(k, kind='stable'), np.argsort(k, axis=0, kind='stable'),
            np.argsort(k, axis=None, kind='stable'), np.argsort(v), np.argsort(-v, stable=True))


@numpy_case(lambda: (AI(3, 4), A(3, 4)))
def np_op2_cumsum_cumprod_axes_dtypes(k, a):
    return (np.cumsum(k), np.cumsum(k, axis=0), np.cumsum(a, axis=1, dtype=np.float32),
            np.cumprod(a), np.cumprod(k, axis=-1), np.cumprod(k, axis=1, dtype=np.float64),
            k.cumsum(axis=1), a.cumprod(0))


@numpy_case(lambda: (A(5, 4), AI(6)))
def np_op2_diff_order_axis(a, k):
    return np.diff(a), np.diff(a, n=2), np.diff(a, axis=0), np.diff(a, n=3, axis=0), np.diff(k, n=0), np.diff(k, 2)


@numpy_case(lambda: (A(5, 4), AI(6)))
def np_op2_diff_prepend_append(a, k):
    return (np.diff(a, prepend=0), np.diff(a, append=a[:, -1:]), np.diff(k, prepend=k[0], append=100),
            np.diff(a, axis=0, prepend=np.zeros((1, 4))), np.diff(k, prepend=1.5),
            np.diff(k.astype(np.int32), prepend=np.int64(0)), np.diff(k, append=[1.0, 2.0]))


# ---- integration and interpolation ----------------------------------------------------
@numpy_case(lambda: (A(4, 6), SORTED(6), AI(5)))
def np_op2_trapezoid_x_dx(y, x, k):
    return (np.trapezoid(y), np.trapezoid(y, dx=0.5), np.trapezoid(y, x), np.trapezoid(y, x=x[:4], axis=0),
            np.trapezoid(y[0]), np.trapezoid(k), np.trapezoid(k, dx=2), np.trapezoid(y.astype(np.float32)))


@numpy_case(lambda: (A(7), SORTED(5), A(5), A(2, 3)))
def np_op2_interp_forms(x, xp, fp, x2):
    return (np.interp(x, xp, fp), np.interp(x2, xp, fp), np.interp(x, xp, fp, left=-1.0, right=1.0),
            np.interp(x, [0.0, 1.0, 2.0], [1, 3, 2]), np.interp(x, xp, fp.astype(np.float32)),
            np.interp(x * 4, xp, fp, period=2.0))


@numpy_case(lambda: (A(4),))
def np_op2_interp_scalar_point(xp):
    xp = np.sort(xp)
    return np.interp(0.25, xp, xp * 2), np.interp(xp[1], xp, xp)


# ---- binning --------------------------------------------------------------------------
@numpy_case(lambda: (SORTED(8), A(3, 2), SORTED(5, dtype=np.float32)))
def np_op2_searchsorted_sides(a, v, f):
    return (np.searchsorted(a, v), np.searchsorted(a, v, side='right'), np.searchsorted(a, 0.0),
            a.searchsorted(v[0]), np.searchsorted(f, v), np.searchsorted(a, [0.5, -0.5]),
            np.searchsorted(a[::-1], v, sorter=np.argsort(a[::-1])))


@numpy_case(lambda: (A(10), SORTED(4), AI(3, 3)))
def np_op2_digitize_right(x, bins, k):
    return (np.digitize(x, bins), np.digitize(x, bins, right=True), np.digitize(k, [1, 3, 5]),
            np.digitize(x, bins[::-1]), np.digitize(x.astype(np.float32), bins))


@numpy_case(lambda: (A(50), AP(50), AI(30)))
def np_op2_histogram_int_bins(a, w, k):
    h, e = np.histogram(a, bins=8)
    return (h, e, np.histogram(a, bins=5, range=(-2.0, 2.0)), np.histogram(a, 4, density=True),
            np.histogram(a, bins=6, weights=w), np.histogram(k), np.histogram(a.astype(np.float32), 3))


@numpy_case(lambda: (A(40), SORTED(6)))
def np_op2_histogram_edges(a, edges):
    return np.histogram(a, bins=edges), np.histogram(a, bins=[-1, 0, 1]), np.histogram(a, edges, density=True)


@numpy_case(lambda: (A(40, dtype=np.float32),))
def np_op2_histogram_range_from_data(a):
    lo, hi = a.min(), a.max()
    h, e = np.histogram(a, bins=6, range=(lo, hi))
    return h, e, np.histogram(a, bins=4, range=(np.float64(-1), 1))[1], (h * np.diff(e)).sum()


@with_breaks("numpy", lambda: (AI(12, high=6),), graphs=2, breaks=1)
def np_op2_bincount_breaks(k):
    counts = np.bincount(k * 1, minlength=3)
    return counts / counts.sum()


# ---- realistic compositions -----------------------------------------------------------
@numpy_case(lambda: (A(20, 3), A(20)))
def np_op2_normal_equations(x, y):
    xtx = x.T @ x
    l = np.linalg.cholesky(xtx)
    z = np.linalg.solve(l, x.T @ y)
    beta = np.linalg.solve(l.T, z)
    resid = y - x @ beta
    return beta, (resid ** 2).sum(), np.linalg.norm(resid)


@numpy_case(lambda: (A(30, 4),))
def np_op2_pca_whiten(x):
    xc = x - x.mean(axis=0)
    c = np.cov(xc, rowvar=False)
    w, v = np.linalg.eigh(c)
    order = np.argsort(w)[::-1]
    return xc @ v[:, order] / np.sqrt(w[order]), w


@numpy_case(lambda: (A(3, 3),))
def np_op2_gaussian_logpdf_terms(a):
    cov = a @ a.T + np.eye(3)
    sign, logdet = np.linalg.slogdet(cov)
    prec = np.linalg.inv(cov)
    x = np.ones(3)
    return -0.5 * (x @ prec @ x + logdet + 3 * np.log(2 * np.pi)), sign


@numpy_case(lambda: (A(16),))
def np_op2_signal_smoothing(x):
    k = np.array([0.25, 0.5, 0.25])
    padded = np.pad(x, 1, mode='edge')
    sm = np.einsum('i,i->', padded[:3], k) + np.roll(x, 1)
    return np.cumsum(sm) / (np.arange(16) + 1), np.clip(np.diff(x, prepend=x[0]), -1, 1)


@numpy_case(lambda: (AP(6),))
def np_op2_piecewise_cdf(p):
    edges = np.cumsum(p) / p.sum()
    u = np.linspace(0.0, 1.0, 9)
    idx = np.searchsorted(edges, u, side='right')
    return idx, np.interp(u, edges, np.arange(6.0)), np.digitize(u, edges)


@numpy_case(lambda: (A(4, 4),))
def np_op2_low_rank_approx(m):
    u, s, vh = np.linalg.svd(m)
    r = (u[:, :2] * s[:2]) @ vh[:2]
    q, _ = np.linalg.qr(r)
    return r, np.linalg.norm(m - r, 'fro'), np.abs(np.linalg.det(q[:, :2].T @ q[:, :2]))
