/* numpy routines with no torch counterpart row: numpy.linalg (solve, inv, cholesky, qr,
 * det, slogdet, eigh, eigvalsh, svd, pinv, matrix_rank, lstsq, matrix_power), statistics and interpolation
 * (cov, corrcoef, trapezoid, interp), products (tensordot, kron), binning (searchsorted,
 * digitize, histogram, bincount). The backend runs each as an eager step (the library
 * routine itself), so these rules only predict the metadata numpy gives: shapes, dtypes,
 * and whether a result is a numpy scalar. Anything whose metadata depends on the data is
 * refused, except the dims OPK_DATA_SHAPE ops mark with SJ_UNBACKED_HINT (bincount's
 * length, lstsq's residuals), which capture names by unbacked symbols. */
#include <string.h>

#include "promote.h"
#include "rules_util.h"
#include "sym.h"
#include "../core/errors.h"

/* ------------------------------------------------------------ helpers ---- */

/* numpy.linalg's result type of its operands (_commonType): integer and bool arrays
 * compute in float64; float32/complex64 stay single precision only when every operand is
 * single precision; float16 is refused as numpy refuses it. */
static int la_common(const TensorMeta *const *xs, int n, DType *res, ShapeErr *err)
{
    int dbl = 0, cplx = 0;
    for (int i = 0; i < n; i++) {
        DType d = (DType)xs[i]->dtype;
        switch (d) {
        case DT_F32:
            break;
        case DT_C64:
            cplx = 1;
            break;
        case DT_F64:
            dbl = 1;
            break;
        case DT_C128:
            dbl = cplx = 1;
            break;
        case DT_F16:
        case DT_BF16:
            return sj_err(err, "array type %s is unsupported in linalg", dtype_info[d].name);
        default:
            dbl = 1;
            break;   /* bool and integers */
        }
    }
    *res = cplx ? (dbl ? DT_C128 : DT_C64) : (dbl ? DT_F64 : DT_F32);
    return 0;
}

static int la_type(const TensorMeta *x, DType *res, ShapeErr *err)
{
    return la_common(&x, 1, res, err);
}

/* A stack of matrices (..., m, n): numpy's LinAlgError otherwise. */
static int la_matrices(const TensorMeta *x, ShapeErr *err)
{
    if (x->ndim < 2)
        return sj_err(err, "%d-dimensional array given. Array must be at least two-dimensional", x->ndim);
    return 0;
}

/* A stack of square matrices (..., n, n): numpy's LinAlgError otherwise. The two last
 * dims are guarded equal when symbolic. */
static int la_square(const TensorMeta *x, ShapeErr *err)
{
    if (la_matrices(x, err))
        return -1;
    int eq = sj_dims_equal(x, x->ndim - 2, x, x->ndim - 1, err);
    if (eq < 0)
        return -1;
    return eq ? 0 : sj_err(err, "Last 2 dimensions of the array must be square");
}

/* The input of a numpy.linalg function of one stack of matrices (square ones when square)
 * and the dtype it computes in (la_type). Borrowed, or NULL with err set. */
static const TensorMeta *la_input(const BoundArgs *b, int square, DType *dt, ShapeErr *err)
{
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x || (square ? la_square : la_matrices)(x, err) || la_type(x, dt, err))
        return NULL;
    return x;
}

/* In a la_shape dims list: min(m, n) of x's two last dims (svd's and qr's k). */
#define LA_K (-1)

/* out = x's first `keep` dims, then the dims listed: a dim of x by index, or LA_K. A
 * symbolic k is min(m, n) as an expression (no guard). 0, or -1 with err set. */
static int la_shape(TensorMeta *out, const TensorMeta *x, int keep, const int *dims, int ndims, ShapeErr *err)
{
    if (keep + ndims > SJ_MAX_RANK)
        return sj_err(err, "rank above %d is not supported", SJ_MAX_RANK);
    for (int i = 0; i < keep; i++)
        sj_copy_dim(out, i, x, i);
    int m = x->ndim - 2, n = x->ndim - 1;
    for (int k = 0; k < ndims; k++) {
        if (dims[k] != LA_K) {
            sj_copy_dim(out, keep + k, x, dims[k]);
        } else if (sj_symctx && (x->sym[m] || x->sym[n])) {
            SymNode *a = sj_dimsym(x, m, err), *b = a ? sj_dimsym(x, n, err) : NULL;
            if (!b || sj_set_dim(out, keep + k, sym_min(sj_symctx->env, a, b), err))
                return -1;
        } else {
            out->size[keep + k] = x->size[m] < x->size[n] ? x->size[m] : x->size[n];
            out->sym[keep + k] = NULL;
        }
    }
    out->ndim = (unsigned char)(keep + ndims);
    return 0;
}

static int const_str(const BoundArgs *b, const char *name, const char *dflt, const char **out, ShapeErr *err)
{
    const BoundArg *a = ba_get(b, name);
    if (!a) {
        *out = dflt;
        return 0;
    }
    if (a->kind != BA_CONST || !PyUnicode_Check(a->value))
        return sj_err(err, "%s must be a constant string", name);
    *out = PyUnicode_AsUTF8(a->value);
    if (!*out) {
        sj_err_clear();
        return sj_err(err, "bad %s", name);
    }
    return 0;
}

/* (rules_util.h) */
int sj_np_array_like(const BoundArg *a, const char *what, TensorMeta *out, ShapeErr *err)
{
    if (!a)
        return sj_err(err, "%s is required", what);
    if (a->kind == BA_TENSOR) {
        *out = *a->meta;
        return 0;
    }
    if (a->kind != BA_CONST || a->data)
        return sj_err(err, "%s must be an array or a constant sequence of numbers", what);
    PyObject *v = a->value;   /* borrowed */
    const char *why;
    int r = meta_from_value(v, out, NULL, &why);   /* a numpy scalar or array constant */
    if (r < 0) {
        sj_err_clear();
        return sj_err(err, "%s: unreadable constant", what);
    }
    if (r == 0) {
        if (out->lib != LIB_NUMPY)
            return sj_err(err, "%s: a torch tensor constant in a numpy call", what);
        return 0;
    }
    sj_meta(out, LIB_NUMPY, DT_I64);
    int rank = 0;
    PyObject *items = NULL;
    if (PyList_Check(v) || PyTuple_Check(v)) {
        rank = 1;
        items = v;
    }
    Py_ssize_t n = items ? PySequence_Fast_GET_SIZE(items) : 1;
    int cat = -1;   /* the widest kind seen: 0 bool, 1 int, 2 float, 3 complex */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *e = items ? PySequence_Fast_GET_ITEM(items, i) : v;
        int k = PyBool_Check(e)           ? 0
                : PyLong_CheckExact(e)    ? 1
                : PyFloat_CheckExact(e)   ? 2
                : PyComplex_CheckExact(e) ? 3
                                          : -1;
        if (k < 0)
            return sj_err(err, "%s must be an array or a constant sequence of numbers", what);
        if (k == 1) {
            /* asarray of Python ints is int64 unless a value needs more (numpy then
             * picks uint64 or an object array) */
            int overflow;
            PyLong_AsLongLongAndOverflow(e, &overflow);
            if (overflow)
                return sj_err(err, "%s holds an int outside int64", what);
        }
        if (k > cat)
            cat = k;
    }
    /* an empty sequence is float64 */
    out->dtype = (unsigned char)(cat == 0 ? DT_BOOL : cat == 1 ? DT_I64 : cat == 3 ? DT_C128 : DT_F64);
    out->ndim = (unsigned char)rank;
    if (rank)
        out->size[0] = n;
    return 0;
}

/* ------------------------------------------------------------ numpy.linalg ---- */

/* inv, cholesky, matrix_power: one stack of square matrices in, one like it out. */
int rule_np_la_square(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x || la_square(x, err))
        return -1;
    DType dt;
    if (op == OP_NP_MATRIX_POWER) {
        int64_t n;
        if (sj_get_int(b, "n", 0, &n, err))
            return -1;
        /* a negative power inverts first (linalg's types); otherwise products of the input
         * itself, or for n == 0 an identity of its dtype */
        if (n < 0 ? la_type(x, &dt, err) : (dt = (DType)x->dtype, 0))
            return -1;
    } else if (la_type(x, &dt, err)) {
        return -1;
    }
    *out = *x;
    out->dtype = (unsigned char)dt;
    out->np_scalar = 0;
    (void)lib;
    *nout = 1;
    return 0;
}

/* det: the batch dims (a 2-d input gives a numpy scalar); slogdet: (sign, logabsdet), the
 * sign complex for complex input, the log always real. */
int rule_np_det(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    DType dt;
    const TensorMeta *x = la_input(b, 1, &dt, err);
    if (!x)
        return -1;
    sj_meta(out, lib, dt);
    if (la_shape(out, x, x->ndim - 2, NULL, 0, err))
        return -1;
    sj_np_scalarize(lib, out);
    if (op == OP_NP_SLOGDET) {
        out[1] = out[0];
        out[1].dtype = (unsigned char)promote_real_of(dt);
        *nout = 2;
    } else {
        *nout = 1;
    }
    return 0;
}

/* eigh: (eigenvalues real (..., n), eigenvectors (..., n, n)); eigvalsh: the eigenvalues. */
int rule_np_eigh(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    DType dt;
    const TensorMeta *x = la_input(b, 1, &dt, err);
    if (!x)
        return -1;
    const char *uplo;
    if (const_str(b, "UPLO", "L", &uplo, err))
        return -1;
    if (strcmp(uplo, "L") && strcmp(uplo, "U"))
        return sj_err(err, "UPLO argument must be 'L' or 'U'");
    int nd = x->ndim;
    sj_meta(&out[0], lib, promote_real_of(dt));
    if (la_shape(&out[0], x, nd - 1, NULL, 0, err))
        return -1;
    *nout = 1;
    if (op == OP_NP_EIGH) {
        out[1] = *x;
        out[1].dtype = (unsigned char)dt;
        out[1].np_scalar = 0;
        *nout = 2;
    }
    return 0;
}

/* svd: u (..., m, m|k), s real (..., k), vh (..., n|k, n) with k = min(m, n); only s when
 * compute_uv is false. */
int rule_np_svd(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    DType dt;
    const TensorMeta *x = la_input(b, 0, &dt, err);
    if (!x)
        return -1;
    int full, uv, herm;
    if (sj_get_bool(b, "full_matrices", 1, &full, err) || sj_get_bool(b, "compute_uv", 1, &uv, err) ||
        sj_get_bool(b, "hermitian", 0, &herm, err))
        return -1;
    int nd = x->ndim, bd = nd - 2;
    if (herm && la_square(x, err))
        return -1;
    int ks[1] = {LA_K};
    TensorMeta s;
    sj_meta(&s, lib, promote_real_of(dt));
    if (la_shape(&s, x, bd, ks, 1, err))
        return -1;
    if (!uv) {
        out[0] = s;
        *nout = 1;
        return 0;
    }
    sj_meta(&out[0], lib, dt);
    sj_meta(&out[2], lib, dt);
    int ud[2] = {bd, full ? bd : LA_K}, vd[2] = {full ? bd + 1 : LA_K, bd + 1};
    if (la_shape(&out[0], x, bd, ud, 2, err) || la_shape(&out[2], x, bd, vd, 2, err))
        return -1;
    out[1] = s;
    *nout = 3;
    return 0;
}

/* qr: 'reduced' (q (..., m, k), r (..., k, n)), 'complete' (q (..., m, m), r (..., m, n)),
 * 'r' (r (..., k, n)), 'raw' (h (..., n, m), tau (..., k)). */
int rule_np_qr(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    DType dt;
    const TensorMeta *x = la_input(b, 0, &dt, err);
    if (!x)
        return -1;
    const char *mode;
    if (const_str(b, "mode", "reduced", &mode, err))
        return -1;
    int bd = x->ndim - 2;
    int k = LA_K;
    sj_meta(&out[0], lib, dt);
    sj_meta(&out[1], lib, dt);
    int rc;
    if (!strcmp(mode, "reduced")) {
        int q[2] = {bd, k}, r[2] = {k, bd + 1};
        rc = la_shape(&out[0], x, bd, q, 2, err) || la_shape(&out[1], x, bd, r, 2, err);
        *nout = 2;
    } else if (!strcmp(mode, "complete")) {
        int q[2] = {bd, bd}, r[2] = {bd, bd + 1};
        rc = la_shape(&out[0], x, bd, q, 2, err) || la_shape(&out[1], x, bd, r, 2, err);
        *nout = 2;
    } else if (!strcmp(mode, "r")) {
        int r[2] = {k, bd + 1};
        rc = la_shape(&out[0], x, bd, r, 2, err);
        *nout = 1;
    } else if (!strcmp(mode, "raw")) {
        int h[2] = {bd + 1, bd}, tau[1] = {k};
        rc = la_shape(&out[0], x, bd, h, 2, err) || la_shape(&out[1], x, bd, tau, 1, err);
        *nout = 2;
    } else {
        return sj_err(err, "Unrecognized mode '%s'", mode);
    }
    return rc ? -1 : 0;
}

/* pinv: (..., n, m) for (..., m, n); matrix_rank: int64 batch dims (a numpy scalar for one
 * matrix; numpy answers a 1-d input with a Python int computed from the data: refused). */
int rule_np_pinv(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    const TensorMeta *x = sj_tensor(b, "input", err);
    DType dt;
    if (!x || la_type(x, &dt, err))
        return -1;
    int herm;
    if (sj_get_bool(b, "hermitian", 0, &herm, err))
        return -1;
    if (x->ndim < 2)
        return sj_err(err,
                      op == OP_NP_MATRIX_RANK ? "matrix_rank of a %d-d array is a Python int read from the data"
                                              : "%d-dimensional array given. Array must be at least two-dimensional",
                      x->ndim);
    if (herm && la_square(x, err))
        return -1;
    int bd = x->ndim - 2;
    *nout = 1;
    if (op == OP_NP_MATRIX_RANK) {
        sj_meta(out, lib, DT_I64);
        if (la_shape(out, x, bd, NULL, 0, err))
            return -1;
        sj_np_scalarize(lib, out);
        return 0;
    }
    sj_meta(out, lib, dt);
    int t[2] = {bd + 1, bd};
    return la_shape(out, x, bd, t, 2, err);
}

/* solve(a (..., m, m), b (m,) or (..., m, k)): b is one vector only when 1-d (numpy 2);
 * the batch dims broadcast. */
int rule_np_solve(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *a = sj_tensor(b, "input", err);
    const BoundArg *ob = a ? ba_get(b, "other") : NULL;
    TensorMeta bm;
    if (!a || la_square(a, err) || sj_np_array_like(ob, "b", &bm, err))
        return -1;
    const TensorMeta *both[2] = {a, &bm};
    DType dt;
    if (la_common(both, 2, &dt, err))
        return -1;
    int m = a->ndim - 1;
    sj_meta(out, lib, dt);
    if (bm.ndim == 1) {
        int eq = sj_dims_equal(a, m, &bm, 0, err);
        if (eq <= 0)
            return eq < 0 ? -1 : sj_err(err, "solve: Input operand 1 has a mismatch in its core dimension 0");
        *out = *a;
        out->dtype = (unsigned char)dt;
        out->np_scalar = 0;
        out->ndim = (unsigned char)(a->ndim - 1);
        *nout = 1;
        return 0;
    }
    if (bm.ndim < 2)
        return sj_err(err, "solve: b must be at least 1-dimensional");
    int eq = sj_dims_equal(a, m, &bm, bm.ndim - 2, err);
    if (eq <= 0)
        return eq < 0 ? -1 : sj_err(err, "solve: Input operand 1 has a mismatch in its core dimension 0");
    TensorMeta ba = *a, bb = bm;
    ba.ndim = (unsigned char)(a->ndim - 2);
    bb.ndim = (unsigned char)(bm.ndim - 2);
    const TensorMeta *ms[2] = {&ba, &bb};
    if (sj_broadcast(ms, 2, out, err))
        return -1;
    int nd = out->ndim;
    if (nd + 2 > SJ_MAX_RANK)
        return sj_err(err, "rank above %d is not supported", SJ_MAX_RANK);
    sj_copy_dim(out, nd, a, m);
    sj_copy_dim(out, nd + 1, &bm, bm.ndim - 1);
    out->ndim = (unsigned char)(nd + 2);
    *nout = 1;
    return 0;
}

/* lstsq(a (m, n), b (m,) or (m, k)): (x (n,) or (n, k), residuals, rank (a numpy int32),
 * s (min(m, n),) real). The residuals are empty unless m > n and a has full rank: their
 * length is data when m > n (an unbacked dim), else 0. */
int rule_np_lstsq(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *a = sj_tensor(b, "input", err);
    const BoundArg *ob = a ? ba_get(b, "other") : NULL;
    TensorMeta bm;
    if (!a || sj_np_array_like(ob, "b", &bm, err))
        return -1;
    if (a->ndim != 2)
        return sj_err(err, "%d-dimensional array given. Array must be two-dimensional", a->ndim);
    if (bm.ndim != 1 && bm.ndim != 2)
        return sj_err(err, "%d-dimensional array given. Array must be one or two-dimensional", bm.ndim);
    const TensorMeta *both[2] = {a, &bm};
    DType dt;
    if (la_common(both, 2, &dt, err))
        return -1;
    int64_t m = a->size[0], n = a->size[1], k = bm.ndim == 2 ? bm.size[1] : 1;
    if (bm.size[0] != m)
        return sj_err(err, "Incompatible dimensions");
    if (m == SJ_UNBACKED_HINT || n == SJ_UNBACKED_HINT || k == SJ_UNBACKED_HINT)
        return sj_err(err, "lstsq: a size of %d is reserved for the data-dependent dim", SJ_UNBACKED_HINT);
    sj_meta(&out[0], lib, dt);
    out[0].ndim = bm.ndim;
    out[0].size[0] = n;
    out[0].size[1] = k;
    sj_meta(&out[1], lib, promote_real_of(dt));
    out[1].ndim = 1;
    out[1].size[0] = m > n ? SJ_UNBACKED_HINT : 0;
    sj_meta(&out[2], lib, DT_I32);
    out[2].np_scalar = 1;
    sj_meta(&out[3], lib, promote_real_of(dt));
    out[3].ndim = 1;
    out[3].size[0] = m < n ? m : n;
    *nout = 4;
    return 0;
}

/* ------------------------------------------------------------ statistics ---- */

/* cov / corrcoef: observations in the columns (rowvar) or rows; y adds its variables.
 * (p, p) for p variables, a 0-d array for one variable given as a 1-d array (corrcoef then
 * gives a numpy scalar). The dtype is at least float64 unless dtype= is given. */
/* The dims of cov's m (or y) holding its variables and its observations, -1 for an
 * implicit 1 (a 0-d or 1-d input is one variable). */
static void cov_dims(const TensorMeta *m, int rowvar, int *vd, int *od)
{
    *vd = m->ndim <= 1 ? -1 : rowvar ? 0 : 1;
    *od = m->ndim == 0 ? -1 : m->ndim == 1 ? 0 : rowvar ? 1 : 0;
}

/* dim d of m as a node (d == -1: the constant 1); NULL with err set. */
static SymNode *cov_sym(const TensorMeta *m, int d, ShapeErr *err)
{
    if (d < 0) {
        SymNode *one = sym_const(sj_symctx->env, 1);
        if (!one)
            sj_sym_error(err);
        return one;
    }
    return sj_dimsym(m, d, err);
}

int rule_np_cov(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    if (x->ndim > 2)
        return sj_err(err, "m has more than 2 dimensions");
    int rowvar;
    if (sj_get_bool(b, "rowvar", 1, &rowvar, err))
        return -1;
    int xv, xo;
    cov_dims(x, rowvar, &xv, &xo);
    DType dt = (DType)x->dtype;
    const BoundArg *ya = ba_get(b, "y");
    TensorMeta ym;
    int yv = -1, yo = -1;
    if (ya) {
        if (sj_np_array_like(ya, "y", &ym, err))
            return -1;
        if (ym.ndim > 2)
            return sj_err(err, "y has more than 2 dimensions");
        cov_dims(&ym, rowvar, &yv, &yo);
        /* m and y are stacked as rows: their observations must agree (guarded when
         * symbolic) */
        int eq = xo >= 0 && yo >= 0 ? sj_dims_equal(x, xo, &ym, yo, err)
                 : xo >= 0          ? sj_dim_equals(x, xo, 1, err)
                 : yo >= 0          ? sj_dim_equals(&ym, yo, 1, err)
                                    : 1;
        if (eq <= 0)
            return eq < 0
                       ? -1
                       : sj_err(err,
                                "all the input array dimensions except for the concatenation axis must match exactly");
        if (promote_pair(lib, dt, (DType)ym.dtype, &dt, err))
            return -1;
    }
    /* fweights/aweights scale the observations: no effect on the result's metadata */
    if (promote_pair(lib, dt, DT_F64, &dt, err))
        return -1;
    if (sj_dtype_or(b, "dtype", lib, &dt, err))
        return -1;
    sj_meta(out, lib, dt);
    int one_var = 0;
    if (!ya) {
        one_var = xv < 0 ? 1 : sj_dim_equals(x, xv, 1, err);
        if (one_var < 0)
            return -1;
    }
    *nout = 1;
    if (one_var) {
        out->ndim = 0;   /* the (1, 1) result is squeezed to a 0-d array */
        if (op == OP_NP_CORRCOEF)
            out->np_scalar = 1;   /* c / c of two 0-d arrays */
        return 0;
    }
    out->ndim = 2;
    if (!ya) {
        sj_copy_dim(out, 0, x, xv);
        sj_copy_dim(out, 1, x, xv);
        return 0;
    }
    if (sj_symctx) {
        SymNode *a = cov_sym(x, xv, err), *c = a ? cov_sym(&ym, yv, err) : NULL;
        if (!c)
            return -1;
        SymNode *v = sym_add(sj_symctx->env, a, c);
        return sj_set_dim(out, 0, v, err) || sj_set_dim(out, 1, v, err) ? -1 : 0;
    }
    out->size[0] = out->size[1] = (xv < 0 ? 1 : x->size[xv]) + (yv < 0 ? 1 : ym.size[yv]);
    return 0;
}

/* trapezoid(y, x=None, dx=1.0, axis=-1): the sum along axis of (y[1:] + y[:-1]) * d / 2,
 * d being dx or diff(x). */
int rule_np_trapezoid(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *y = sj_tensor(b, "input", err);
    if (!y)
        return -1;
    int64_t ax;
    int d;
    if (sj_get_int(b, "dim", -1, &ax, err) || sj_dim(lib, ax, y->ndim, &d, err))
        return -1;
    /* d * (y[1:] + y[:-1]) / 2.0, d being dx (numpy's default dx=1.0, a Python float) or
     * diff(x); y[1:] + y[:-1] keeps y's dtype (a bool sum is numpy's or) */
    DType dt = (DType)y->dtype;
    const BoundArg *xa = ba_get(b, "x");
    const BoundArg *dxa = ba_get(b, "dx");
    BoundArg yb = {.kind = BA_TENSOR, .meta = y};
    PyObject *f2 = PyFloat_FromDouble(2.0);   /* new: stands for 2.0 and the default dx */
    if (!f2) {
        sj_err_clear();
        return sj_err(err, "out of memory");
    }
    BoundArg two = {.kind = BA_CONST, .value = f2};
    int rc = -1;
    TensorMeta xm, pm;
    if (xa) {
        if (sj_np_array_like(xa, "x", &xm, err))
            goto done;
        /* the sizes are compared as the rule compares sizes (guarded when symbolic) */
        int ok = 0;
        if (xm.ndim == 1)
            ok = sj_dims_equal(&xm, 0, y, d, err);
        if (ok == 0 && xm.ndim == y->ndim) {
            ok = 1;
            for (int i = 0; ok == 1 && i < y->ndim; i++)
                ok = sj_dims_equal(&xm, i, y, i, err);
        }
        if (ok <= 0) {
            if (ok == 0)
                sj_err(err, "trapezoid: x must be 1-d along axis or have y's shape");
            goto done;
        }
        if (xm.dtype == DT_BOOL) {   /* diff(x) of bools raises */
            sj_err(err, "numpy boolean subtract, the `-` operator, is not supported");
            goto done;
        }
        xm.np_scalar = 0;
        BoundArg xb = {.kind = BA_TENSOR, .meta = &xm};
        const BoundArg *ps[2] = {&yb, &xb};
        if (promote_args(lib, ps, 2, 0, &dt, NULL, err))
            goto done;
    } else {
        const BoundArg *ps[2] = {&yb, dxa ? dxa : &two};
        if (promote_args(lib, ps, 2, 0, &dt, NULL, err))
            goto done;
    }
    sj_meta(&pm, lib, dt);   /* the product, an array, divided by the Python float 2.0 */
    pm.ndim = 1;
    BoundArg pb = {.kind = BA_TENSOR, .meta = &pm};
    const BoundArg *ps[2] = {&pb, &two};
    rc = promote_args(lib, ps, 2, 0, &dt, NULL, err);
done:
    Py_DECREF(f2);
    if (rc)
        return -1;
    if (dt == DT_BOOL)
        return sj_err(err, "trapezoid of bool values is not supported");
    sj_meta(out, lib, dt);
    int k = 0;
    for (int i = 0; i < y->ndim; i++)
        if (i != d)
            sj_copy_dim(out, k++, y, i);
    out->ndim = (unsigned char)k;
    sj_np_scalarize(lib, out);
    *nout = 1;
    return 0;
}

/* interp(x, xp, fp): x's shape, float64 (complex128 for complex fp); a scalar x gives a
 * numpy scalar. */
int rule_np_interp(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    TensorMeta x, xp, fp;
    if (sj_np_array_like(ba_get(b, "input"), "x", &x, err) || sj_np_array_like(ba_get(b, "xp"), "xp", &xp, err) ||
        sj_np_array_like(ba_get(b, "fp"), "fp", &fp, err))
        return -1;
    if (xp.ndim != 1 || fp.ndim != 1)
        return sj_err(err, "object too deep for desired array");
    int eq = sj_dims_equal(&xp, 0, &fp, 0, err);   /* guarded when symbolic */
    if (eq <= 0)
        return eq < 0 ? -1 : sj_err(err, "fp and xp are not of the same length.");
    if (!xp.sym[0] && xp.size[0] == 0)
        return sj_err(err, "array of sample points is empty");   /* a size symbol is never 0 */
    if (dtype_info[xp.dtype].category == CAT_COMPLEX || dtype_info[x.dtype].category == CAT_COMPLEX)
        return sj_err(err, "interp: complex x or xp is not supported");
    const BoundArg *per = ba_get(b, "period");
    if (per && per->kind != BA_CONST)
        return sj_err(err, "interp: period= must be a constant");
    const BoundArg *ends[2] = {ba_get(b, "left"), ba_get(b, "right")};
    for (int i = 0; i < 2; i++)
        if (ends[i] && ends[i]->kind != BA_CONST)
            return sj_err(err, "interp: left= and right= must be constants");
    sj_meta(out, lib, dtype_info[fp.dtype].category == CAT_COMPLEX ? DT_C128 : DT_F64);
    sj_copy_shape(out, &x);
    sj_np_scalarize(lib, out);
    *nout = 1;
    return 0;
}

/* ------------------------------------------------------------ products ---- */

/* tensordot(a, b, axes): a's free dims then b's; axes an int N (a's last N with b's first
 * N) or a pair of axis lists. */
int rule_np_tensordot(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *x, *y;
    if (sj_tensor2(b, "input", &x, "other", &y, err))
        return -1;
    int64_t ax[SJ_MAX_RANK], bx[SJ_MAX_RANK];
    int na = 0, nb = 0;
    const BoundArg *axes = ba_get(b, "axes");
    PyObject *av = axes && axes->kind == BA_CONST ? axes->value : NULL;
    if (!axes) {
        na = nb = 2;
    } else if (av && PyLong_Check(av)) {
        int64_t n;
        if (sj_int(axes, "axes", &n, err))
            return -1;
        if (n < 0 || n > x->ndim || n > y->ndim)
            return sj_err(err, "shape-mismatch for sum");
        na = nb = (int)n;
    } else {
        na = nb = -1;
    }
    if (na >= 0) {
        for (int i = 0; i < na; i++) {
            ax[i] = x->ndim - na + i;
            bx[i] = i;
        }
    } else {
        if (!av || !PySequence_Check(av) || PySequence_Size(av) != 2) {
            sj_err_clear();
            return sj_err(err, "tensordot: axes must be an int or a constant pair of axis lists");
        }
        for (int s = 0; s < 2; s++) {
            PyObject *part = PySequence_GetItem(av, s);   /* new */
            if (!part) {
                sj_err_clear();
                return sj_err(err, "tensordot: bad axes");
            }
            BoundArg pa = {.kind = BA_CONST, .value = part};
            int r = sj_int_list(&pa, "axes", s ? bx : ax, s ? &nb : &na, SJ_MAX_RANK, err);
            Py_DECREF(part);
            if (r)
                return -1;
        }
        if (na != nb)
            return sj_err(err, "shape-mismatch for sum");
    }
    int useda[SJ_MAX_RANK] = {0}, usedb[SJ_MAX_RANK] = {0};
    for (int i = 0; i < na; i++) {
        int da, db;
        if (sj_dim(lib, ax[i], x->ndim, &da, err) || sj_dim(lib, bx[i], y->ndim, &db, err))
            return -1;
        int eq = sj_dims_equal(x, da, y, db, err);   /* guarded when symbolic */
        if (eq <= 0)
            return eq < 0 ? -1 : sj_err(err, "shape-mismatch for sum");
        if (useda[da] || usedb[db])
            return sj_err(err, "tensordot: repeated axis");
        useda[da] = usedb[db] = 1;
    }
    DType dt;
    if (promote_pair(lib, (DType)x->dtype, (DType)y->dtype, &dt, err))
        return -1;
    sj_meta(out, lib, dt);
    int k = 0;
    for (int i = 0; i < x->ndim; i++)
        if (!useda[i])
            sj_copy_dim(out, k++, x, i);
    for (int i = 0; i < y->ndim; i++)
        if (!usedb[i]) {
            if (k >= SJ_MAX_RANK)
                return sj_err(err, "rank above %d is not supported", SJ_MAX_RANK);
            sj_copy_dim(out, k++, y, i);
        }
    out->ndim = (unsigned char)k;
    *nout = 1;   /* a 0-d result stays a 0-d array (numpy's dot of reshaped operands) */
    return 0;
}

/* kron(a, b): the ranks are padded to the larger with leading 1s; each dim multiplies. The
 * dtype is the product's. */
int rule_np_kron(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const BoundArg *ps[2] = {ba_get(b, "input"), ba_get(b, "other")};
    TensorMeta xm, ym;
    if (sj_np_array_like(ps[0], "a", &xm, err) || sj_np_array_like(ps[1], "b", &ym, err))
        return -1;
    const TensorMeta *x = &xm, *y = &ym;
    /* kron multiplies asanyarray()s: a Python number is a strong 0-d array there */
    DType dt;
    if (promote_pair(lib, (DType)x->dtype, (DType)y->dtype, &dt, err))
        return -1;
    int nd = x->ndim > y->ndim ? x->ndim : y->ndim;
    sj_meta(out, lib, dt);
    for (int i = 0; i < nd; i++) {
        int ix = i - (nd - x->ndim), iy = i - (nd - y->ndim);
        int64_t sx = ix >= 0 ? x->size[ix] : 1, sy = iy >= 0 ? y->size[iy] : 1;
        if (sj_symctx) {
            SymNode *a = ix >= 0 ? sj_dimsym(x, ix, err) : sym_const(sj_symctx->env, 1);
            SymNode *c = a && iy >= 0 ? sj_dimsym(y, iy, err) : a ? sym_const(sj_symctx->env, 1) : NULL;
            if (!a || !c)
                return err->msg[0] ? -1 : sj_sym_error(err);
            if (sj_set_dim(out, i, sym_mul(sj_symctx->env, a, c), err))
                return -1;
        } else {
            out->size[i] = sx * sy;
        }
    }
    out->ndim = (unsigned char)nd;
    *nout = 1;
    return 0;
}

/* ------------------------------------------------------------ binning ---- */

/* searchsorted(a, v, side): int64 indices shaped like v (a numpy scalar for a scalar v).
 * digitize(x, bins): the same, shaped like x. */
int rule_np_searchsorted(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    TensorMeta sorted, v;
    int ss = op == OP_NP_SEARCHSORTED;
    if (sj_np_array_like(ba_get(b, ss ? "input" : "bins"), ss ? "a" : "bins", &sorted, err) ||
        sj_np_array_like(ba_get(b, ss ? "values" : "input"), ss ? "v" : "x", &v, err))
        return -1;
    if (sorted.ndim != 1)
        return sj_err(err, ss ? "object too deep for desired array" : "bins must be one-dimensional");
    if (dtype_info[v.dtype].category == CAT_COMPLEX || dtype_info[sorted.dtype].category == CAT_COMPLEX)
        return sj_err(err, "%s of complex values is not supported", ss ? "searchsorted" : "digitize");
    if (ss) {
        const char *side;
        if (const_str(b, "side", "left", &side, err))
            return -1;
        if (strcmp(side, "left") && strcmp(side, "right"))
            return sj_err(err, "side must be 'left' or 'right' (got '%s')", side);
        const BoundArg *so = ba_get(b, "sorter");
        if (so) {
            /* indices that sort a: numpy checks their values at run time */
            TensorMeta sm;
            if (sj_np_array_like(so, "sorter", &sm, err))
                return -1;
            int eq = sm.ndim == 1 ? sj_dims_equal(&sm, 0, &sorted, 0, err) : 0;
            if (eq <= 0)
                return eq < 0 ? -1 : sj_err(err, "sorter.size must equal a.size");
            if (dtype_info[sm.dtype].category != CAT_INT)
                return sj_err(err, "sorter must only contain integers");
        }
    }
    /* digitize's check that the bins are monotonic reads the data: eager makes it at run time */
    sj_meta(out, lib, DT_I64);
    sj_copy_shape(out, &v);
    sj_np_scalarize(lib, out);
    *nout = 1;
    return 0;
}

/* histogram(a, bins=int or edges, range, density, weights): (hist, bin_edges). hist is
 * int64, or float64 with density, or the weights' dtype; the edges of an int bins are
 * floating (a's float type, float64 for integer a), given edges come back as passed. */
int rule_np_histogram(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    TensorMeta a;
    if (sj_np_array_like(ba_get(b, "input"), "a", &a, err))
        return -1;
    if (dtype_info[a.dtype].category == CAT_COMPLEX)
        return sj_err(err, "histogram of complex values is not supported");
    const BoundArg *bins = ba_get(b, "bins");
    int64_t nbins = 10;
    TensorMeta edges;
    if (bins && bins->kind == BA_CONST && PyUnicode_Check(bins->value))
        return sj_err(err, "histogram: bins='%s' gives a data-dependent number of bins",
                      PyUnicode_AsUTF8(bins->value) ? PyUnicode_AsUTF8(bins->value) : "?");
    if (!bins || (bins->kind == BA_CONST && PyLong_Check(bins->value))) {
        if (bins && sj_int(bins, "bins", &nbins, err))
            return -1;
        if (nbins < 1)
            return sj_err(err, "`bins` must be positive, when an integer");
        /* the edges' type is result_type(first_edge, last_edge, a), float64 when that is
         * not floating: the range's Python numbers are weak, numpy scalars and graph
         * scalars strong; without a range the edges come from a.min() and a.max() */
        DType et;
        BoundArg ab = {.kind = BA_TENSOR, .meta = &a}, ends[2];
        const BoundArg *ps[3] = {&ab, NULL, NULL};
        const BoundArg *range = ba_get(b, "range");
        if (range && range->kind == BA_LIST && range->n == 2) {
            ps[1] = &range->items[0];
            ps[2] = &range->items[1];
        } else if (range && range->kind == BA_CONST && (PyTuple_Check(range->value) || PyList_Check(range->value)) &&
                   PySequence_Fast_GET_SIZE(range->value) == 2) {
            for (int i = 0; i < 2; i++) {
                ends[i] = (BoundArg){.kind = BA_CONST, .value = PySequence_Fast_GET_ITEM(range->value, i)};
                ps[1 + i] = &ends[i];
            }
        } else if (range) {
            return sj_err(err, "histogram: range= must be a pair of numbers");
        }
        if (promote_args(lib, ps, 3, 0, &et, NULL, err))
            return -1;
        if (dtype_info[et].category != CAT_FLOAT)
            et = dtype_info[et].category == CAT_COMPLEX ? et : DT_F64;
        sj_meta(&edges, lib, et);
        edges.ndim = 1;
        edges.size[0] = nbins + 1;
    } else {
        if (sj_np_array_like(bins, "bins", &edges, err))
            return -1;
        if (edges.ndim != 1)
            return sj_err(err, "`bins` must be 1d, when an array");
        if (edges.size[0] < 1)
            return sj_err(err, "`bins` must have at least one edge");
        nbins = edges.size[0] - 1;   /* symbolic: set below from the edges' symbol */
        edges.lib = (unsigned char)lib;
        edges.np_scalar = 0;
        if (ba_get(b, "range"))
            return sj_err(err, "histogram: range= with bin edges is not supported");
    }
    int density;
    if (sj_get_bool(b, "density", 0, &density, err))
        return -1;
    DType ht = DT_I64;
    const BoundArg *w = ba_get(b, "weights");
    if (w) {
        TensorMeta wm;
        if (sj_np_array_like(w, "weights", &wm, err))
            return -1;
        int eq = wm.ndim == a.ndim;
        for (int i = 0; eq == 1 && i < a.ndim; i++)
            eq = sj_dims_equal(&wm, i, &a, i, err);   /* guarded when symbolic */
        if (eq <= 0)
            return eq < 0 ? -1 : sj_err(err, "weights should have the same shape as a.");
        ht = (DType)wm.dtype;   /* the counts accumulate in the weights' own dtype */
    }
    if (density)
        ht = DT_F64;
    sj_meta(&out[0], lib, ht);
    out[0].ndim = 1;
    out[0].size[0] = nbins;
    if (edges.sym[0] && sj_symctx) {
        SymNode *e = sj_dimsym(&edges, 0, err), *one = e ? sym_const(sj_symctx->env, 1) : NULL;
        if (!e || !one || sj_set_dim(&out[0], 0, sym_sub(sj_symctx->env, e, one), err))
            return e && !one ? sj_sym_error(err) : -1;
    }
    out[1] = edges;
    *nout = 2;
    return 0;
}

/* bincount(x, weights=None, minlength=0): x non-negative 1-d integers; the length is
 * max(x) + 1 (at least minlength): data, an unbacked dim. int64, float64 with weights. */
int rule_np_bincount(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    if (x->ndim != 1)
        return sj_err(err, "object too deep for desired array");
    if (dtype_info[x->dtype].category > CAT_INT)
        return sj_err(err, "Cannot cast array data from dtype('%s') to dtype('int64') according to the rule 'safe'",
                      dtype_info[x->dtype].name);
    int64_t minlength;
    if (sj_get_int(b, "minlength", 0, &minlength, err))
        return -1;
    if (minlength < 0)
        return sj_err(err, "'minlength' must not be negative");
    DType dt = DT_I64;
    const BoundArg *w = ba_get(b, "weights");
    if (w) {
        TensorMeta wm;
        if (sj_np_array_like(w, "weights", &wm, err))
            return -1;
        int eq = wm.ndim == 1 ? sj_dims_equal(&wm, 0, x, 0, err) : 0;   /* guarded when symbolic */
        if (eq <= 0)
            return eq < 0 ? -1 : sj_err(err, "The weights and list don't have the same length.");
        if (dtype_info[wm.dtype].category == CAT_COMPLEX)
            return sj_err(err, "bincount: complex weights are not supported");
        dt = DT_F64;
    }
    sj_meta(out, lib, dt);
    out->ndim = 1;
    out->size[0] = SJ_UNBACKED_HINT;
    *nout = 1;
    return 0;
}

/* The named result type numpy gives a multi-output call (numpy.linalg's namedtuples), as
 * "module:qualname", or NULL for a plain tuple. */
const char *shapes_np_result_type(OpId op, const BoundArgs *b)
{
    switch (op) {
    case OP_NP_SLOGDET:
        return "numpy.linalg._linalg:SlogdetResult";
    case OP_NP_EIGH:
        return "numpy.linalg._linalg:EighResult";
    case OP_NP_SVD:
        return "numpy.linalg._linalg:SVDResult";
    case OP_NP_QR: {
        const BoundArg *m = ba_get(b, "mode");
        if (m && m->kind == BA_CONST && PyUnicode_Check(m->value) &&
            PyUnicode_CompareWithASCIIString(m->value, "raw") == 0)
            return NULL;
        return "numpy.linalg._linalg:QRResult";
    }
    default:
        return NULL;
    }
}

/* (rules.h) */
void shapes_data_dim_range(OpId op, const BoundArgs *b, int out, int dim, int64_t *lo, int64_t *hi)
{
    *lo = 0;
    *hi = -1;
    if (op == OP_NP_BINCOUNT) {
        /* at least minlength long (an empty x gives exactly minlength) */
        const BoundArg *m = ba_get(b, "minlength");
        int64_t v;
        ShapeErr ignored;
        if (m && sj_int(m, "minlength", &v, &ignored) == 0 && v > 0)
            *lo = v;
    } else if (op == OP_NP_LSTSQ && out == 1 && dim == 0) {
        /* the residuals: none, or one per column of b */
        const BoundArg *bb = ba_get(b, "other");
        TensorMeta bm;
        ShapeErr ignored;
        if (bb && sj_np_array_like(bb, "b", &bm, &ignored) == 0 && bm.ndim >= 1)
            *hi = bm.ndim == 2 ? bm.size[1] : 1;
    }
}
