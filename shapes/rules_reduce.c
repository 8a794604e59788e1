/* Reductions (sum, mean, std, argmax, norm, ...), max/min in their three torch forms,
 * scans (cumsum) and softmax. */
#include <string.h>

#include "promote.h"
#include "rules.h"
#include "rules_util.h"
#include "sym.h"

/* Which dims a `dim`/`axis` argument reduces, as a bitmask over input dims. Absent means
 * all dims; so does an empty list in torch (numpy reduces nothing for axis=()). */
static int reduce_mask(Lib lib, const BoundArg *dim, int ndim, unsigned *mask, ShapeErr *err)
{
    *mask = 0;
    if (!dim) {
        *mask = (1u << ndim) - 1;
        return 0;
    }
    int64_t dims[SJ_MAX_RANK + 1];
    int n;
    if (sj_int_list(dim, "dim", dims, &n, SJ_MAX_RANK + 1, err))
        return -1;
    if (n == 0 && lib == LIB_TORCH) {
        *mask = (1u << ndim) - 1;
        return 0;
    }
    for (int i = 0; i < n; i++) {
        int d;
        if (sj_dim(lib, dims[i], ndim, &d, err))
            return -1;
        if (ndim == 0)
            continue;    /* torch: dim 0/-1 of a 0-d tensor reduces nothing */
        if (*mask & (1u << d))
            return sj_err(err, "dim %d appears multiple times in the list of dims", d);
        *mask |= 1u << d;
    }
    return 0;
}

/* Output shape of reducing mask. */
static void reduce_shape(const TensorMeta *x, unsigned mask, int keepdim, TensorMeta *out)
{
    int k = 0;
    for (int i = 0; i < x->ndim; i++) {
        if (mask & (1u << i)) {
            if (keepdim) {
                out->sym[k] = NULL;
                out->size[k++] = 1;
            }
        } else {
            out->sym[k] = x->sym[i];
            out->size[k++] = x->size[i];
        }
    }
    out->ndim = (unsigned char)k;
}

/* The sum/prod accumulator: torch widens every integer and bool to int64; numpy to its
 * default int for the signed types narrower than it, and to uint64 for unsigned ones. */
static int sum_dtype(Lib lib, DType d, DType *out, ShapeErr *err)
{
    (void)err;
    *out = d;
    if (dtype_info[d].category > CAT_INT)
        return 0;
    *out = lib == LIB_NUMPY && dtype_is_unsigned(d) ? DT_U64 : DT_I64;
    return 0;
}

static int reduce_dtype(OpId op, Lib lib, DType d, int dtype_given, DType given, DType *out, ShapeErr *err)
{
    DTypeCategory c = dtype_info[d].category;
    const char *name = op_info[op].name;
    if (lib == LIB_NUMPY && d == DT_BF16)
        return sj_err(err, "numpy has no bfloat16");
    switch (op) {
    case OP_SUM:
    case OP_PROD:
        if (dtype_given) {
            *out = given;
            return 0;
        }
        return sum_dtype(lib, d, out, err);
    case OP_MEAN:
        if (dtype_given) {
            *out = given;
            return 0;
        }
        if (c <= CAT_INT) {
            if (lib == LIB_TORCH)
                return sj_err(err,
                              "mean(): could not infer output dtype. Input dtype must "
                              "be either a floating point or complex dtype. Got: %s",
                              dtype_info[d].name);
            *out = DT_F64;
            return 0;
        }
        *out = d;
        return 0;
    case OP_STD:
    case OP_VAR:
        if (dtype_given && lib == LIB_NUMPY) {
            d = given;
            c = dtype_info[d].category;
        }
        if (c <= CAT_INT) {
            if (lib == LIB_TORCH)
                return sj_err(err, "std and var only support floating point and complex "
                                   "dtypes");
            *out = DT_F64;
            return 0;
        }
        *out = promote_real_of(d);
        return 0;
    case OP_NORM:
        if (dtype_given && lib == LIB_TORCH) {
            d = given;
            c = dtype_info[d].category;
        }
        if (c <= CAT_INT) {
            if (lib == LIB_TORCH)
                return sj_err(err,
                              "norm(): input dtype should be either floating point or "
                              "complex. Got %s instead.",
                              dtype_info[d].name);
            *out = DT_F64;
            return 0;
        }
        *out = promote_real_of(d);
        return 0;
    case OP_LOGSUMEXP:
        *out = promote_to_float(lib, d);
        return 0;
    case OP_AMAX:
    case OP_AMIN:
        if (lib == LIB_TORCH && c == CAT_COMPLEX)
            return sj_err(err, "%s is not supported for complex inputs", name);
        *out = d;
        return 0;
    case OP_ALL:
    case OP_ANY:
        /* torch keeps uint8 for backward compatibility */
        *out = (lib == LIB_TORCH && d == DT_U8) ? DT_U8 : DT_BOOL;
        return 0;
    case OP_MEDIAN:
        /* numpy only (torch.median returns values and indices): the mean's dtype rule */
        if (c <= CAT_INT) {
            *out = DT_F64;
            return 0;
        }
        *out = d;
        return 0;
    case OP_COUNT_NONZERO:
        *out = DT_I64;
        return 0;
    case OP_ARGMAX:
    case OP_ARGMIN:
        if (lib == LIB_TORCH && (c == CAT_COMPLEX || c == CAT_BOOL))
            return sj_err(err, "%s is not implemented for %s", name, dtype_info[d].name);
        *out = DT_I64;
        return 0;
    default:
        return sj_err(err, "%s is not a reduction", name);
    }
}

/* The common path of every reduction once the dims are known. */
static int reduce_into(OpId op, Lib lib, const BoundArgs *b, const TensorMeta *x, const BoundArg *dim, TensorMeta *out,
                       ShapeErr *err)
{
    int keepdim;
    if (sj_get_bool(b, "keepdim", 0, &keepdim, err))
        return -1;
    unsigned mask;
    if (reduce_mask(lib, dim, x->ndim, &mask, err))
        return -1;
    DType given = DT_F32, r = DT_F32;
    int dtype_given;
    if (sj_get_dtype(b, "dtype", lib, &given, &dtype_given, err))
        return -1;
    if (reduce_dtype(op, lib, (DType)x->dtype, dtype_given, given, &r, err))
        return -1;
    /* torch's argmax/argmin take one dim only; without one they index the flattened
     * tensor (keepdim then keeps every dim as 1) */
    if ((op == OP_ARGMAX || op == OP_ARGMIN) && dim && dim->kind != BA_CONST)
        return sj_err(err, "%s: dim must be an int", op_info[op].name);
    if ((op == OP_ARGMAX || op == OP_ARGMIN) && dim && !PyLong_Check(dim->value) && !PyIndex_Check(dim->value))
        return sj_err(err, "%s: dim must be an int", op_info[op].name);
    if (lib == LIB_TORCH && op == OP_PROD && dim && !(dim->kind == BA_CONST && PyLong_Check(dim->value)))
        return sj_err(err, "prod(): argument 'dim' must be int");
    if (lib == LIB_TORCH && (op == OP_LOGSUMEXP) && !dim)
        return sj_err(err, "logsumexp() missing required argument 'dim'");
    /* a reduction over an empty dim has no identity for max/min/argmax */
    if (op == OP_AMAX || op == OP_AMIN || op == OP_ARGMAX || op == OP_ARGMIN) {
        for (int i = 0; i < x->ndim; i++)
            if ((mask & (1u << i)) && x->size[i] == 0)
                return sj_err(err, "%s of an empty dimension has no identity", op_info[op].name);
        if (sj_numel(x) == 0 && !dim)
            return sj_err(err, "%s of an empty tensor has no identity", op_info[op].name);
    }
    sj_meta(out, lib, r);
    reduce_shape(x, mask, keepdim, out);
    if (lib == LIB_NUMPY && out->ndim == 0)
        out->np_scalar = 1;
    return 0;
}

int rule_reduce(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    const BoundArg *dim = ba_get(b, "dim");
    /* torch.std(x, False) and x.var(True): the old positional `unbiased` */
    if (dim && dim->kind == BA_CONST && PyBool_Check(dim->value) && (op == OP_STD || op == OP_VAR))
        dim = NULL;
    if (op == OP_NORM) {
        /* torch.norm's and np.linalg.norm's `p`/`ord` strings and numbers do not change
         * the shape; a matrix norm needs 2 dims */
        const BoundArg *p = ba_get(b, "p");
        if (p && p->kind == BA_CONST && PyUnicode_Check(p->value) && !dim && x->ndim != 2 && lib == LIB_NUMPY)
            return sj_err(err, "a matrix norm needs a 2-d input");
    }
    if (reduce_into(op, lib, b, x, dim, out, err))
        return -1;
    *nout = 1;
    return 0;
}

int rule_max_min(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    const BoundArg *dim = ba_get(b, "dim");
    const BoundArg *other = ba_get(b, "other");
    OpId as = op == OP_MAX ? OP_AMAX : OP_AMIN;
    if (lib == LIB_NUMPY) {
        if (reduce_into(as, lib, b, x, dim, out, err))
            return -1;
        *nout = 1;
        return 0;
    }
    if (dim && dim->kind == BA_TENSOR) {
        other = dim;
        dim = NULL;
    }
    if (other) {
        /* torch.max(a, b) is torch.maximum(a, b) */
        BoundArgs bb = {0};
        bb.n = 2;
        bb.names[0] = "input";
        bb.names[1] = "other";
        bb.args[0] = (BoundArg){BA_TENSOR, x, NULL, 0, NULL, NULL, NULL, 0};
        bb.args[1] = *other;
        return shapes_infer(op == OP_MAX ? OP_MAXIMUM : OP_MINIMUM, lib, &bb, out, nout, err);
    }
    if (!dim) {
        if (ba_get(b, "keepdim"))
            return sj_err(err, "max/min: keepdim needs a dim");
        if (sj_numel(x) == 0)
            return sj_err(err, "max(): Expected reduction dim to be specified for "
                               "input.numel() == 0");
        if (reduce_into(as, lib, b, x, NULL, out, err))
            return -1;
        *nout = 1;
        return 0;
    }
    if (dim->kind != BA_CONST || !PyIndex_Check(dim->value) || PyBool_Check(dim->value))
        return sj_err(err, "max/min: dim must be an int");
    if (reduce_into(as, lib, b, x, dim, &out[0], err))
        return -1;
    sj_with_indices(out, nout);
    return 0;
}

/* out becomes 1-d with x's element count (numpy's axis=None): under symbolic sizes the
 * product of x's dims. */
static int flattened(const TensorMeta *x, TensorMeta *out, ShapeErr *err)
{
    out->ndim = 1;
    out->size[0] = sj_numel(x);
    out->sym[0] = NULL;
    if (!sj_symctx)
        return 0;
    SymNode *p = sym_const(sj_symctx->env, 1);
    for (int i = 0; p && i < x->ndim; i++) {
        SymNode *d = sj_dimsym(x, i, err);
        if (!d)
            return -1;
        p = sym_mul(sj_symctx->env, p, d);
    }
    return sj_set_dim(out, 0, p, err);
}

int rule_scan(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    DType d;
    if (sum_dtype(lib, (DType)x->dtype, &d, err) || sj_dtype_or(b, "dtype", lib, &d, err))
        return -1;
    if (lib == LIB_NUMPY && d == DT_BF16)
        return sj_err(err, "numpy has no bfloat16");
    const BoundArg *dim = ba_get(b, "dim");
    *out = *x;
    out->dtype = (unsigned char)d;
    out->np_scalar = 0;
    if (!dim) {
        if (lib == LIB_TORCH)
            return sj_err(err, "%s() missing required argument 'dim'", op_info[op].name);
        /* numpy scans the flattened array */
        if (flattened(x, out, err) < 0)
            return -1;
        *nout = 1;
        return 0;
    }
    int dn;
    if (sj_get_dim(b, "dim", 0, lib, x->ndim, &dn, err))
        return -1;
    *nout = 1;
    return 0;
}

int rule_softmax(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    DType d = (DType)x->dtype;
    if (sj_dtype_or(b, "dtype", lib, &d, err))
        return -1;
    DTypeCategory c = dtype_info[d].category;
    if (c <= CAT_INT)
        return sj_err(err, "%s is not implemented for %s", op_info[op].name, dtype_info[d].name);
    if (c == CAT_COMPLEX)
        return sj_err(err, "%s is not implemented for complex", op_info[op].name);
    const BoundArg *dim = ba_get(b, "dim");
    int dn;
    if (dim) {
        if (sj_get_dim(b, "dim", 0, lib, x->ndim, &dn, err))
            return -1;
    } else if (ba_get(b, "implicit_dim_ok") == NULL) {
        return sj_err(err, "%s() missing required argument 'dim'", op_info[op].name);
    }
    *out = *x;
    out->dtype = (unsigned char)d;
    *nout = 1;
    return 0;
}

/* diff(input, n=1, dim=-1): the dim shrinks by n (not below 0); the dtype stays (bool diff
 * is a logical xor in both libraries). */
int rule_diff(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    int64_t n;
    int d;
    const TensorMeta *x = sj_input_dim(b, lib, "dim", -1, "diff expects input to be at least one-dimensional", &d, err);
    if (!x || sj_get_int(b, "n", 1, &n, err))
        return -1;
    if (n < 0)
        return sj_err(err, "order must be non-negative but got %lld", (long long)n);
    int64_t len = x->size[d];
    SymNode *slen = sj_symctx ? sj_dimsym(x, d, err) : NULL;   /* the same, symbolic */
    if (sj_symctx && !slen)
        return -1;
    DType dt = (DType)x->dtype;
    const char *const ends[2] = {"prepend", "append"};
    for (int k = 0; k < 2; k++) {
        const BoundArg *e = ba_get(b, ends[k]);
        if (!e)
            continue;
        TensorMeta asarray;   /* numpy: the end as np.asanyarray makes it (a Python number is strong there) */
        const TensorMeta *m = e->kind == BA_TENSOR ? e->meta : NULL;
        if (!m && lib == LIB_NUMPY) {
            if (sj_np_array_like(e, ends[k], &asarray, err))
                return -1;
            m = &asarray;
        }
        if (!m)
            return sj_err(err, "diff %s= other than a tensor is not supported", ends[k]);
        if (m->ndim == 0 && lib == LIB_NUMPY) {
            /* numpy broadcasts a 0-d end to one slice along the axis, then concatenates */
            DType p;
            if (promote_pair(lib, dt, (DType)m->dtype, &p, err))
                return -1;
            dt = p;
            len += 1;
            if (slen && !(slen = sym_add(sj_symctx->env, slen, sym_const(sj_symctx->env, 1))))
                return sj_sym_error(err);
            continue;
        }
        if (m->ndim != x->ndim)
            return sj_err(err, "diff %s= must have the input's rank", ends[k]);
        DType p;
        if (promote_pair(lib, dt, (DType)m->dtype, &p, err))   /* the ends are concatenated */
            return -1;
        dt = p;
        for (int i = 0; i < x->ndim; i++) {
            int eq = i == d ? 1 : sj_dims_equal(m, i, x, i, err);   /* guarded when symbolic */
            if (eq < 0)
                return -1;
            if (!eq)
                return sj_err(err, "diff %s= size mismatch at dimension %d", ends[k], i);
        }
        len += m->size[d];
        if (slen) {
            SymNode *e = sj_dimsym(m, d, err);
            if (!e || !(slen = sym_add(sj_symctx->env, slen, e)))
                return e ? sj_sym_error(err) : -1;
        }
    }
    *out = *x;
    out->dtype = (unsigned char)dt;
    out->np_scalar = 0;
    if (slen) {
        /* n differences shorten the dim by n, down to 0: which case it is, is guarded */
        SymEnv *env = sj_symctx->env;
        SymNode *kn = sym_const(env, n);
        int longer;
        if (!kn || sj_decide(sym_gt(env, slen, kn), &longer, err) < 0)
            return kn ? -1 : sj_sym_error(err);
        return sj_set_dim(out, d, longer ? sym_sub(env, slen, kn) : sym_const(env, 0), err) < 0 ? -1 : (*nout = 1, 0);
    }
    out->size[d] = len > n ? len - n : 0;
    *nout = 1;
    return 0;
}

/* sort: torch gives (values, int64 indices), numpy one sorted array (axis=None flattens);
 * argsort: the int64 indices. */
int rule_sort(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    TensorMeta v = *x;
    v.np_scalar = 0;
    const BoundArg *da = b ? ba_get(b, "dim") : NULL;
    /* numpy's axis defaults to -1 and None means "flattened" */
    int axis_none = lib == LIB_NUMPY && sj_passed_none(b, "dim"), d;
    if (axis_none) {
        if (flattened(x, &v, err) < 0)
            return -1;
    } else if (x->ndim > 0 || da) {
        /* of a 0-d input torch takes dim -1 or 0, numpy no axis (sj_dim refuses them all) */
        if (sj_get_dim(b, "dim", -1, lib, x->ndim, &d, err))
            return -1;
    } else if (lib == LIB_NUMPY) {
        if (op != OP_ARGSORT)
            return sj_err(err, "Cannot sort a 0-d array");
        v.ndim = 1;   /* numpy's argsort of a 0-d array is [0] */
        v.size[0] = 1;
    }
    TensorMeta idx = v;
    idx.dtype = DT_I64;
    idx.requires_grad = 0;
    if (op == OP_ARGSORT) {
        out[0] = idx;
        *nout = 1;
        return 0;
    }
    out[0] = v;
    if (lib == LIB_NUMPY) {
        *nout = 1;
        return 0;
    }
    out[1] = idx;
    *nout = 2;
    return 0;
}

/* topk(input, k, dim=-1): (values, int64 indices) with k along dim. Symbolic: the size
 * along dim and k may be expressions; 0 <= k <= size is decided (guarded). */
int rule_topk(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    int64_t k;
    SymNode *ks = NULL;
    int d = 0;
    const TensorMeta *x = sj_input_dim(b, lib, "dim", -1, NULL, &d, err);
    if (!x)
        return -1;
    const BoundArg *ka = ba_get(b, "k");
    if (!ka || sj_int_sym(ka, "k", &k, &ks, err))
        return ka ? -1 : sj_err(err, "topk() needs k");
    out[0] = *x;
    if (sj_symctx && ((x->ndim && x->sym[d]) || ks)) {
        SymEnv *env = sj_symctx->env;
        SymNode *len = x->ndim ? sj_dimsym(x, d, err) : sym_const(env, 1);
        SymNode *kn = ks ? ks : sym_const(env, k);
        SymNode *zero = sym_const(env, 0);
        if (!len || !kn || !zero)
            return len ? sj_sym_error(err) : -1;
        int ok;
        if (sj_decide(sym_ge(env, kn, zero), &ok, err) < 0 || (ok && sj_decide(sym_le(env, kn, len), &ok, err) < 0))
            return -1;
        if (!ok)
            return sj_err(err, "selected index k out of range");
        if (x->ndim && sj_set_dim(&out[0], d, kn, err))
            return -1;
        sj_with_indices(out, nout);
        return 0;
    }
    int64_t len = x->ndim ? x->size[d] : 1;
    if (k < 0 || k > len)
        return sj_err(err, "selected index k out of range");
    if (x->ndim)
        out[0].size[d] = k;
    sj_with_indices(out, nout);
    return 0;
}
