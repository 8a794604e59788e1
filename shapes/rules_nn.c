/* Neural-network layers: normalisations, convolution, pooling, embedding, attention, pad. */
#include <string.h>

#include "rules.h"
#include "rules_util.h"
#include "sym.h"
#include "../core/errors.h"

static int need_float(const TensorMeta *x, const char *name, ShapeErr *err)
{
    if (dtype_info[x->dtype].category != CAT_FLOAT)
        return sj_err(err, "%s is not implemented for %s", name, dtype_info[x->dtype].name);
    return 0;
}

/* An optional tensor parameter must share the input's dtype (torch's layers do not promote). */
static int same_dtype_opt(const BoundArgs *b, const char *name, const TensorMeta *x, const TensorMeta **out,
                          ShapeErr *err)
{
    const BoundArg *a = ba_get(b, name);
    *out = NULL;
    if (!a)
        return 0;
    if (a->kind != BA_TENSOR)
        return sj_err(err, "%s must be a tensor", name);
    if (a->meta->dtype != x->dtype)
        return sj_err(err, "expected %s to have dtype %s, got %s", name, dtype_info[x->dtype].name,
                      dtype_info[a->meta->dtype].name);
    *out = a->meta;
    return 0;
}

/* m (optional) must be a vector as long as dim d of x (guarded equal when symbolic). */
static int vec_of(const TensorMeta *m, const TensorMeta *x, int d, const char *name, ShapeErr *err)
{
    if (!m)
        return 0;
    int eq = m->ndim == 1 ? sj_dims_equal(m, 0, x, d, err) : 0;
    if (eq < 0)
        return -1;
    return eq ? 0 : sj_err(err, "%s should have %lld elements", name, (long long)x->size[d]);
}

/* The product of x's dims other than d > 1 (batch_norm's "more than 1 value per channel"),
 * decided (guarded) when some of those dims are symbolic. */
static int values_per_channel_above_1(const TensorMeta *x, int d, int *above, ShapeErr *err)
{
    int symbolic = 0;
    int64_t n = 1;
    for (int i = 0; i < x->ndim; i++)
        if (i != d) {
            n *= x->size[i];
            symbolic |= sj_symctx && x->sym[i];
        }
    if (!symbolic) {
        *above = n > 1;
        return 0;
    }
    SymEnv *env = sj_symctx->env;
    SymNode *p = sym_const(env, 1);
    for (int i = 0; p && i < x->ndim; i++)
        if (i != d) {
            SymNode *di = sj_dimsym(x, i, err);
            if (!di)
                return -1;
            p = sym_mul(env, p, di);
        }
    SymNode *one = sym_const(env, 1);
    if (!p || !one)
        return sj_sym_error(err);
    return sj_decide(sym_gt(env, p, one), above, err);
}

/* Output: the input's metadata, its symbolic dims kept. The sizes the parameters must
 * match are compared with sj_dims_equal (guarded when symbolic). */
int rule_norm_like(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)lib;
    const char *name = op_info[op].name;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x || need_float(x, name, err))
        return -1;
    const TensorMeta *w, *bias;
    if (op == OP_RMS_NORM) {
        /* rms_norm takes a weight of any dtype (eager's composite form multiplies by it and
         * casts the product back to the input's dtype); it has no bias */
        const BoundArg *wa = ba_get(b, "weight");
        if (wa && wa->kind != BA_TENSOR)
            return sj_err(err, "weight must be a tensor");
        w = wa ? wa->meta : NULL;
        bias = NULL;
    } else if (same_dtype_opt(b, "weight", x, &w, err) || same_dtype_opt(b, "bias", x, &bias, err)) {
        return -1;
    }
    if (op == OP_LAYER_NORM || op == OP_RMS_NORM) {
        TensorMeta ns;   /* normalized_shape as a meta, to compare dims with their symbols */
        SymNode *syms[SJ_MAX_RANK];
        int n;
        const BoundArg *nsa = ba_get(b, "normalized_shape");
        memset(&ns, 0, sizeof ns);
        if (!nsa)
            return sj_err(err, "normalized_shape is required");
        /* torch takes a sequence only (an int raises), and not an empty one */
        if (nsa->kind == BA_CONST && PyLong_Check(nsa->value))
            return sj_err(err, "%s: normalized_shape must be a tuple of ints, not int", name);
        if (sj_int_list_sym(nsa, "normalized_shape", ns.size, syms, &n, SJ_MAX_RANK, err))
            return -1;
        if (n == 0)
            return sj_err(err, "%s: normalized_shape must have at least one element", name);
        if (n > x->ndim)
            return sj_err(err, "%s: normalized_shape is longer than the input rank", name);
        ns.ndim = (unsigned char)n;
        memcpy(ns.sym, syms, sizeof(SymNode *) * (size_t)n);
        for (int i = 0; i < n; i++) {
            int eq = sj_dims_equal(x, x->ndim - n + i, &ns, i, err);
            if (eq < 0)
                return -1;
            if (!eq)
                return sj_err(err, "%s: input shape does not end with normalized_shape", name);
        }
        for (int k = 0; k < 2; k++) {
            const TensorMeta *m = k ? bias : w;
            if (!m)
                continue;
            if (m->ndim != n)
                return sj_err(err, "%s: weight/bias must have normalized_shape", name);
            for (int i = 0; i < n; i++) {
                int eq = sj_dims_equal(m, i, &ns, i, err);
                if (eq < 0)
                    return -1;
                if (!eq)
                    return sj_err(err, "%s: weight/bias must have normalized_shape", name);
            }
        }
    } else if (op == OP_BATCH_NORM) {
        if (x->ndim < 2)
            return sj_err(err, "batch_norm expects at least 2-D input");
        const TensorMeta *rm, *rv;
        if (same_dtype_opt(b, "running_mean", x, &rm, err) || same_dtype_opt(b, "running_var", x, &rv, err))
            return -1;
        if (vec_of(rm, x, 1, "running_mean", err) || vec_of(rv, x, 1, "running_var", err) ||
            vec_of(w, x, 1, "weight", err) || vec_of(bias, x, 1, "bias", err))
            return -1;
        int training, above;
        if (sj_get_bool(b, "training", 0, &training, err))
            return -1;
        if (!training && (!rm || !rv))
            return sj_err(err, "batch_norm in eval mode needs running_mean and running_var");
        if (training && x->size[1] && values_per_channel_above_1(x, 1, &above, err) < 0)
            return -1;
        if (training && x->size[1] && !above)
            return sj_err(err, "Expected more than 1 value per channel when training");
    } else {    /* group_norm */
        int64_t g;
        const BoundArg *ga = ba_get(b, "num_groups");
        if (sj_int(ga, "num_groups", &g, err))
            return -1;
        if (x->ndim < 2)
            return sj_err(err, "group_norm expects at least 2-D input");
        int64_t c = x->size[1];
        if (g <= 0 || c % g != 0)
            return sj_err(err, "Expected number of channels in input to be divisible by "
                               "num_groups");
        if (sj_symctx && x->sym[1]) {
            /* the channels stay a multiple of the groups */
            SymEnv *env = sj_symctx->env;
            SymNode *gk = sym_const(env, g), *zero = sym_const(env, 0);
            SymNode *rem = gk ? sym_mod(env, x->sym[1], gk) : NULL;
            if (!rem || !zero)
                return sj_sym_error(err);
            if (sj_require(sym_eq(env, rem, zero), err) < 0)
                return -1;
        }
        if (vec_of(w, x, 1, "weight", err) || vec_of(bias, x, 1, "bias", err))
            return -1;
    }
    *out = *x;
    out->requires_grad = (unsigned char)sj_requires_grad(b);
    *nout = 1;
    return 0;
}

/* The extent of a sliding window over dim i of x, into dim i of out: effective kernel k
 * (ksym: its node when symbolic, else NULL), padding p on each side, stride s. The count of
 * window positions is floor((in + 2p - k) / s) + 1; with ceil_mode the division rounds up,
 * less one when the last window would start past the input and its left pad (torch's
 * pooling). conv refuses a padded input shorter than the kernel, pooling an empty output.
 * With a symbolic input size or kernel the extent is an expression, and each of those
 * checks is a decided relation (guarded unless the ranges decide it). */
static int window_extent(const TensorMeta *x, int i, int64_t k, SymNode *ksym, int64_t p, int64_t s, int ceil_mode,
                         int conv, TensorMeta *out, ShapeErr *err)
{
    int64_t c = ceil_mode ? s - 1 : 0;
    if (!sj_symctx || (!x->sym[i] && !ksym)) {
        int64_t in = x->size[i], num = in + 2 * p - k + c;
        if (conv && in + 2 * p < k)
            return sj_err(err, "kernel size can't be greater than actual input size");
        /* floor division, also for a negative numerator */
        int64_t o = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
        if (ceil_mode && (o - 1) * s >= in + p)
            o--;
        if (!conv && o <= 0)
            return sj_err(err, "output size is too small");
        out->size[i] = o;
        out->sym[i] = NULL;
        return 0;
    }
    SymEnv *env = sj_symctx->env;
    SymNode *in = sj_dimsym(x, i, err);
    if (!in)
        return -1;
    SymNode *kn = ksym ? ksym : sym_const(env, k), *two_p = sym_const(env, 2 * p), *sn = sym_const(env, s);
    SymNode *one = sym_const(env, 1), *cn = sym_const(env, c), *pn = sym_const(env, p);
    SymNode *span = kn && two_p && sn && one && cn && pn ? sym_add(env, in, two_p) : NULL;
    SymNode *num = span ? sym_sub(env, span, kn) : NULL;
    num = num ? sym_add(env, num, cn) : NULL;
    SymNode *q = num ? sym_floordiv(env, num, sn) : NULL, *o = q ? sym_add(env, q, one) : NULL;
    if (!o)
        return sj_sym_error(err);
    int t;
    if (conv && sj_decide(sym_ge(env, span, kn), &t, err) < 0)
        return -1;
    if (conv && !t)
        return sj_err(err, "kernel size can't be greater than actual input size");
    if (ceil_mode) {
        SymNode *last = sym_mul(env, q, sn), *edge = sym_add(env, in, pn);
        if (sj_decide(last && edge ? sym_ge(env, last, edge) : NULL, &t, err) < 0)
            return -1;
        if (t && !(o = q))
            return sj_sym_error(err);
    }
    if (!conv && sj_decide(sym_ge(env, o, one), &t, err) < 0)
        return -1;
    if (!conv && !t)
        return sj_err(err, "output size is too small");
    return sj_set_dim(out, i, o, err);
}

/* a * g == b for dims (a of m, b of n, g a constant): compared, or guarded when symbolic. */
static int dims_times_equal(const TensorMeta *m, int a, int64_t g, const TensorMeta *n, int b, ShapeErr *err)
{
    if (!sj_symctx || (!m->sym[a] && !n->sym[b]))
        return m->size[a] * g == n->size[b];
    if (m->size[a] * g != n->size[b])
        return 0;
    SymEnv *env = sj_symctx->env;
    SymNode *x = sj_dimsym(m, a, err), *y = x ? sj_dimsym(n, b, err) : NULL, *gn = sym_const(env, g);
    if (!y)
        return -1;
    SymNode *xg = gn ? sym_mul(env, x, gn) : NULL;
    return sj_require(xg ? sym_eq(env, xg, y) : NULL, err) < 0 ? -1 : 1;
}

/* unfold(input, kernel_size, dilation=1, padding=0, stride=1) (im2col): (N, C, H, W) gives
 * (N, C * kh * kw, L) and (C, H, W) gives (C * kh * kw, L), L the number of blocks: the
 * product of the window extents over H and W (a convolution's, so symbolic sizes give
 * expressions, and the window fitting the padded input is a decided relation). */
int rule_unfold(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    (void)lib;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    if (x->ndim != 3 && x->ndim != 4)
        return sj_err(err, "Input Error: Only 3D or 4D input Tensors are supported (got %dD)", x->ndim);
    if (dtype_info[x->dtype].category != CAT_FLOAT)
        return sj_err(err, "\"im2col_out_cpu\" is implemented for floating dtypes only");
    int64_t k[2], d[2], p[2], s[2];
    if (!ba_get(b, "kernel_size"))
        return sj_err(err, "unfold() missing required argument 'kernel_size'");
    if (sj_int_tuple(b, "kernel_size", 1, 2, k, err) || sj_int_tuple(b, "dilation", 1, 2, d, err) ||
        sj_int_tuple(b, "padding", 0, 2, p, err) || sj_int_tuple(b, "stride", 1, 2, s, err))
        return -1;
    for (int i = 0; i < 2; i++)
        if (k[i] <= 0 || d[i] <= 0 || s[i] <= 0 || p[i] < 0)
            return sj_err(err, "unfold: kernel, dilation and stride must be positive, padding non-negative");
    int batched = x->ndim == 4;
    TensorMeta ext = *x;   /* the window extents, in the spatial dims' places */
    for (int i = 0; i < 2; i++) {
        int dim = batched + 1 + i;
        int64_t keff = d[i] * (k[i] - 1) + 1;
        if (!(sj_symctx && x->sym[dim]) && x->size[dim] + 2 * p[i] < keff)
            return sj_err(err, "unfold: the calculated shape of the array of sliding blocks must be at least one");
        if (window_extent(x, dim, keff, NULL, p[i], s[i], 0, 1, &ext, err) < 0)
            return -1;
    }
    *out = *x;
    out->requires_grad = (unsigned char)sj_requires_grad(b);
    int o = 0, h = batched + 1;
    if (batched)
        sj_copy_dim(out, o++, x, 0);
    if (!sj_symctx || (!x->sym[batched] && !ext.sym[h] && !ext.sym[h + 1])) {
        out->size[o] = x->size[batched] * k[0] * k[1];
        out->sym[o++] = NULL;
        out->size[o] = ext.size[h] * ext.size[h + 1];
        out->sym[o++] = NULL;
    } else {
        SymEnv *env = sj_symctx->env;
        SymNode *c = sj_dimsym(x, batched, err), *kk = sym_const(env, k[0] * k[1]);
        SymNode *eh = c ? sj_dimsym(&ext, h, err) : NULL, *ew = eh ? sj_dimsym(&ext, h + 1, err) : NULL;
        if (!ew)
            return -1;
        if (sj_set_dim(out, o++, kk ? sym_mul(env, c, kk) : NULL, err) < 0 ||
            sj_set_dim(out, o++, sym_mul(env, eh, ew), err) < 0)
            return -1;
    }
    out->ndim = (unsigned char)o;
    for (int i = o; i < SJ_MAX_RANK; i++)
        out->sym[i] = NULL;
    *nout = 1;
    return 0;
}

int rule_conv(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)lib;
    int sp = op == OP_CONV1D ? 1 : 2;    /* spatial dims */
    const TensorMeta *x, *w;
    if (sj_tensor2(b, "input", &x, "weight", &w, err) || need_float(x, op_info[op].name, err))
        return -1;
    if (w->dtype != x->dtype)
        return sj_err(err, "input and weight should have the same dtype");
    int batched = x->ndim == sp + 2;
    if (!batched && x->ndim != sp + 1)
        return sj_err(err, "%s expects %d-D (unbatched) or %d-D (batched) input", op_info[op].name, sp + 1, sp + 2);
    if (w->ndim != sp + 2)
        return sj_err(err, "%s: weight must be %d-D", op_info[op].name, sp + 2);
    int64_t stride[2], pad[2], dil[2], groups;
    if (sj_int_tuple(b, "stride", 1, sp, stride, err) || sj_int_tuple(b, "dilation", 1, sp, dil, err) ||
        sj_get_int(b, "groups", 1, &groups, err))
        return -1;
    const BoundArg *pa = ba_get(b, "padding");
    int same = 0;
    if (pa && pa->kind == BA_CONST && PyUnicode_Check(pa->value)) {
        if (PyUnicode_CompareWithASCIIString(pa->value, "same") == 0)
            same = 1;
        else if (PyUnicode_CompareWithASCIIString(pa->value, "valid") != 0)
            return sj_err(err, "padding must be 'same', 'valid' or ints");
        pad[0] = pad[1] = 0;
    } else if (sj_int_tuple(b, "padding", 0, sp, pad, err)) {
        return -1;
    }
    if (groups <= 0)
        return sj_err(err, "non-positive groups is not supported");
    for (int i = 0; i < sp; i++)
        if (stride[i] <= 0 || dil[i] <= 0 || pad[i] < 0)
            return sj_err(err, "non-positive stride/dilation or negative padding");
    if (same)
        for (int i = 0; i < sp; i++)
            if (stride[i] != 1)
                return sj_err(err, "padding='same' is not supported for strided convolutions");
    int off = batched ? 1 : 0;
    int64_t cin = x->size[off];
    if (w->size[0] % groups != 0)
        return sj_err(err, "out_channels must be divisible by groups");
    if (sj_symctx && w->sym[0] && groups != 1) {
        /* symbolic out_channels stay a multiple of groups */
        SymNode *gk = sym_const(sj_symctx->env, groups), *zero = sym_const(sj_symctx->env, 0);
        SymNode *rem = gk && zero ? sym_mod(sj_symctx->env, w->sym[0], gk) : NULL;
        if (sj_require(rem ? sym_eq(sj_symctx->env, rem, zero) : NULL, err) < 0)
            return -1;
    }
    int match = dims_times_equal(w, 1, groups, x, off, err);
    if (match < 0)
        return -1;
    if (!match)
        return sj_err(err, "expected input to have %lld channels, but got %lld channels",
                      (long long)(w->size[1] * groups), (long long)cin);
    const TensorMeta *bias;
    if (same_dtype_opt(b, "bias", x, &bias, err) || vec_of(bias, w, 0, "bias", err))
        return -1;
    *out = *x;   /* the batch dim, and the spatial dims under padding='same' */
    sj_copy_dim(out, off, w, 0);
    for (int i = 0; i < sp && !same; i++) {
        /* the effective kernel d * (k - 1) + 1, an expression when the weight's is */
        int64_t k = dil[i] * (w->size[2 + i] - 1) + 1;
        SymNode *ks = NULL;
        if (sj_symctx && w->sym[2 + i]) {
            SymEnv *env = sj_symctx->env;
            SymNode *m1 = sym_const(env, -1), *dn = sym_const(env, dil[i]), *one = sym_const(env, 1);
            SymNode *km = m1 && dn && one ? sym_add(env, w->sym[2 + i], m1) : NULL;
            km = km ? sym_mul(env, km, dn) : NULL;
            if (!km || !(ks = sym_add(env, km, one)))
                return sj_sym_error(err);
        }
        if (window_extent(x, off + 1 + i, k, ks, pad[i], stride[i], 0, 1, out, err) < 0)
            return -1;
    }
    out->requires_grad = (unsigned char)sj_requires_grad(b);
    *nout = 1;
    return 0;
}

int rule_pool(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)lib;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    int sp = op == OP_MAX_POOL1D || op == OP_AVG_POOL1D ? 1 : 2;   /* spatial dims */
    int is_max = op == OP_MAX_POOL2D || op == OP_MAX_POOL1D;
    if (x->ndim != sp + 1 && x->ndim != sp + 2)
        return sj_err(err, "%s expects %d-D or %d-D input", op_info[op].name, sp + 1, sp + 2);
    DTypeCategory c = dtype_info[x->dtype].category;
    /* avg_pool1d has int64 and floating kernels */
    if (c == CAT_COMPLEX || c == CAT_BOOL || (op == OP_AVG_POOL1D && c != CAT_FLOAT && x->dtype != DT_I64))
        return sj_err(err, "%s is not implemented for %s", op_info[op].name, dtype_info[x->dtype].name);
    int64_t k[2] = {1, 1}, s[2] = {1, 1}, p[2] = {0, 0}, d[2] = {1, 1};
    if (sj_int_tuple(b, "kernel_size", 1, sp, k, err) || sj_int_tuple(b, "padding", 0, sp, p, err))
        return -1;
    const BoundArg *sa = ba_get(b, "stride");
    if (!sa || (sa->kind == BA_CONST && PySequence_Check(sa->value) && PySequence_Size(sa->value) == 0)) {
        sj_err_clear();
        s[0] = k[0];
        s[1] = k[1];
    } else if (sj_int_tuple(b, "stride", 1, sp, s, err)) {
        return -1;
    }
    if (is_max && sj_int_tuple(b, "dilation", 1, sp, d, err))
        return -1;
    int ceil_mode, ret_idx = 0;
    if (sj_get_bool(b, "ceil_mode", 0, &ceil_mode, err))
        return -1;
    if (is_max && sj_get_bool(b, "return_indices", 0, &ret_idx, err))
        return -1;
    /* max_pool1d without indices has floating kernels only (with them, integer ones too) */
    if (op == OP_MAX_POOL1D && !ret_idx && c != CAT_FLOAT)
        return sj_err(err, "max_pool1d is not implemented for %s", dtype_info[x->dtype].name);
    *out = *x;
    int off = x->ndim - sp;
    for (int i = 0; i < sp; i++) {
        if (k[i] <= 0 || s[i] <= 0 || d[i] <= 0)
            return sj_err(err, "kernel size, stride and dilation must be greater than zero");
        if (p[i] < 0 || p[i] > k[i] / 2)
            return sj_err(err, "pad should be at most half of effective kernel size");
        if (window_extent(x, off + i, d[i] * (k[i] - 1) + 1, NULL, p[i], s[i], ceil_mode, 0, out, err) < 0)
            return -1;
    }
    for (int i = off - 1; i < off; i++) {
        int empty = sj_dim_equals(x, i, 0, err);
        if (empty)
            return empty < 0 ? -1 : sj_err(err, "expected non-empty channels");
    }
    if (sp == 1)
        for (int i = 0; i < x->ndim; i++) {
            int empty = sj_dim_equals(x, i, 0, err);
            if (empty)
                return empty < 0 ? -1 : sj_err(err, "%s: empty input", op_info[op].name);
        }
    out[0].requires_grad = x->requires_grad;
    if (ret_idx)
        sj_with_indices(out, nout);
    else
        *nout = 1;
    return 0;
}

/* One output size of adaptive pooling into dim i of out: None keeps the input's, an int
 * (a symbolic one stays symbolic, non-negative guarded) is the size. */
static int adaptive_size(const BoundArg *a, TensorMeta *out, int i, ShapeErr *err)
{
    if (a->kind == BA_CONST && a->value == Py_None)
        return 0;
    int64_t n;
    SymNode *ns;
    if (sj_int_sym(a, "output_size", &n, &ns, err))
        return -1;
    if (ns) {
        SymNode *zero = sym_const(sj_symctx->env, 0);
        if (sj_require(zero ? sym_ge(sj_symctx->env, ns, zero) : NULL, err) < 0)
            return sj_err(err, "output_size must be non-negative");
        return sj_set_dim(out, i, ns, err);
    }
    if (n < 0)
        return sj_err(err, "output_size must be non-negative");
    out->size[i] = n;
    out->sym[i] = NULL;
    return 0;
}

int rule_adaptive_pool(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)lib;
    const char *name = op_info[op].name;
    int sp = op == OP_ADAPTIVE_AVG_POOL1D || op == OP_ADAPTIVE_MAX_POOL1D ? 1 : 2;
    int is_max = op == OP_ADAPTIVE_MAX_POOL1D || op == OP_ADAPTIVE_MAX_POOL2D;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x || need_float(x, name, err))
        return -1;
    if (x->ndim != sp + 1 && x->ndim != sp + 2)
        return sj_err(err, "%s expects %d-D or %d-D input", name, sp + 1, sp + 2);
    int off = x->ndim - sp;
    for (int i = 0; i < sp; i++) {
        int empty = sj_dim_equals(x, off + i, 0, err);
        if (empty)
            return empty < 0 ? -1 : sj_err(err, "%s: empty spatial dims", name);
    }
    const BoundArg *os = ba_get(b, "output_size");
    if (!os || (os->kind != BA_CONST && os->kind != BA_LIST))
        return sj_err(err, "output_size must be constant");
    *out = *x;
    BoundArg items[2] = {{BA_CONST, NULL, NULL, 0, NULL, NULL, NULL, 0},
                         {BA_CONST, NULL, NULL, 0, NULL, NULL, NULL, 0}};
    const BoundArg *its = items;
    if (os->kind == BA_LIST) {
        if (os->n != sp)
            return sj_err(err, "output_size must be an int or %d ints", sp);
        its = os->items;
    } else if (PyTuple_Check(os->value) || PyList_Check(os->value)) {
        if (PySequence_Fast_GET_SIZE(os->value) != sp)
            return sj_err(err, "output_size must be an int or %d ints", sp);
        for (int i = 0; i < sp; i++)
            items[i].value = PySequence_Fast_GET_ITEM(os->value, i);
    } else {
        items[0] = items[1] = *os;   /* one int for every dim */
    }
    for (int i = 0; i < sp; i++) {
        if (sp == 1 && its[i].kind == BA_CONST && its[i].value == Py_None)
            return sj_err(err, "%s: output_size must be an int", name);
        if (adaptive_size(&its[i], out, off + i, err) < 0)
            return -1;
    }
    int ret_idx = 0;
    if (is_max && sj_get_bool(b, "return_indices", 0, &ret_idx, err))
        return -1;
    if (ret_idx)
        sj_with_indices(out, nout);
    else
        *nout = 1;
    return 0;
}

int rule_embedding(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    (void)lib;
    const TensorMeta *ix, *w;
    if (sj_tensor2(b, "input", &ix, "weight", &w, err))
        return -1;
    if (ix->dtype != DT_I64 && ix->dtype != DT_I32)
        return sj_err(err, "Expected tensor for argument #1 'indices' to have one of the "
                           "following scalar types: Long, Int");
    if (w->ndim != 2)
        return sj_err(err, "'weight' must be 2-D");
    if (ix->ndim + 1 > SJ_MAX_RANK)
        return sj_err(err, "rank above %d is not supported", SJ_MAX_RANK);
    *out = *w;
    out->ndim = (unsigned char)(ix->ndim + 1);
    for (int i = 0; i < ix->ndim; i++)
        sj_copy_dim(out, i, ix, i);   /* the indices' shape, symbols included ... */
    sj_copy_dim(out, ix->ndim, w, 1);   /* ... then the embedding width */
    *nout = 1;
    return 0;
}

int rule_sdpa(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    (void)lib;
    const TensorMeta *q = sj_tensor(b, "query", err);
    const TensorMeta *k = q ? sj_tensor(b, "key", err) : NULL;
    const TensorMeta *v = k ? sj_tensor(b, "value", err) : NULL;
    if (!v || need_float(q, "scaled_dot_product_attention", err))
        return -1;
    if (k->dtype != q->dtype || v->dtype != q->dtype)
        return sj_err(err, "Expected query, key, and value to have the same dtype");
    if (q->ndim < 2 || k->ndim < 2 || v->ndim < 2)
        return sj_err(err, "query, key and value must be at least 2-D");
    int same = sj_dims_equal(k, k->ndim - 1, q, q->ndim - 1, err);
    if (same < 0)
        return -1;
    if (!same)
        return sj_err(err, "query and key must have the same embedding size");
    if ((same = sj_dims_equal(k, k->ndim - 2, v, v->ndim - 2, err)) < 0)
        return -1;
    if (!same)
        return sj_err(err, "key and value must have the same sequence length");
    int gqa;
    if (sj_get_bool(b, "enable_gqa", 0, &gqa, err))
        return -1;
    TensorMeta bq = *q, bk = *k, bv = *v;
    bq.ndim -= 2;
    bk.ndim -= 2;
    bv.ndim -= 2;
    if (gqa && bq.ndim >= 1 && bk.ndim >= 1 && bq.ndim == bk.ndim && bk.ndim == bv.ndim) {
        /* grouped-query attention: key/value heads divide the query heads */
        int h = bq.ndim - 1;
        TensorMeta *heads[3] = {&bq, &bk, &bv};
        for (int i = 0; i < 3; i++)   /* head counts: pinned (divisibility is not modelled) */
            if (sj_symctx && heads[i]->sym[h]) {
                if (sj_pin(heads[i]->sym[h], &heads[i]->size[h], err) < 0)
                    return -1;
                heads[i]->sym[h] = NULL;
            }
        if (bk.size[h] != bv.size[h] || bk.size[h] == 0 || bq.size[h] % bk.size[h] != 0)
            return sj_err(err, "number of heads in key/value must divide the query heads");
        bk.size[h] = bv.size[h] = bq.size[h];
    }
    const TensorMeta *ms[3] = {&bq, &bk, &bv};
    if (sj_broadcast(ms, 3, out, err))
        return -1;
    if (out->ndim + 2 > SJ_MAX_RANK)
        return sj_err(err, "rank above %d is not supported", SJ_MAX_RANK);
    int nd = out->ndim;
    sj_copy_dim(out, nd, q, q->ndim - 2);       /* query length */
    sj_copy_dim(out, nd + 1, v, v->ndim - 1);   /* value width */
    out->ndim = (unsigned char)(nd + 2);
    out->lib = q->lib;
    out->dtype = q->dtype;
    out->np_scalar = 0;
    out->requires_grad = (unsigned char)sj_requires_grad(b);
    const BoundArg *mask = ba_get(b, "attn_mask");
    int causal;
    if (sj_get_bool(b, "is_causal", 0, &causal, err))
        return -1;
    if (mask && causal)
        return sj_err(err, "_scaled_dot_product_attention: Explicit attn_mask should not be "
                           "set when is_causal=True");
    if (mask && mask->kind == BA_TENSOR) {
        const TensorMeta *m = mask->meta;
        if (m->dtype != DT_BOOL && m->dtype != q->dtype)
            return sj_err(err, "attn_mask dtype must be bool or match the query dtype");
        TensorMeta sc = *out, r;
        sj_copy_dim(&sc, sc.ndim - 1, k, k->ndim - 2);   /* scores: (..., L, S) */
        const TensorMeta *mm[2] = {&sc, m};
        if (sj_broadcast(mm, 2, &r, err))
            return -1;
        if (r.ndim != sc.ndim)
            return sj_err(err, "attn_mask does not broadcast to the attention scores");
        for (int i = 0; i < r.ndim; i++) {
            int eq = r.sym[i] == sc.sym[i] && r.size[i] == sc.size[i];
            if (!eq && (eq = sj_dims_equal(&r, i, &sc, i, err)) < 0)
                return -1;
            if (!eq)
                return sj_err(err, "attn_mask does not broadcast to the attention scores");
        }
    }
    *nout = 1;
    return 0;
}

/* One torch pad pair on dim d of x into out: size + left + right (symbols kept: of the dim
 * and of the pads), which must stay >= least. For reflect each pad must be below the size,
 * for circular at most the size (wrapping around once). Relations are decided (guarded)
 * when symbolic. */
static int pad_dim(const TensorMeta *x, int d, const int64_t *p, SymNode *const *ps, int i, const char *mode,
                   int64_t least, TensorMeta *out, ShapeErr *err)
{
    int64_t l = p[2 * i], r = p[2 * i + 1];
    int reflect = !strcmp(mode, "reflect"), circular = !strcmp(mode, "circular");
    if (!sj_symctx || (!x->sym[d] && !ps[2 * i] && !ps[2 * i + 1])) {
        int64_t n = x->size[d];
        if (reflect && (l >= n || r >= n))
            return sj_err(err, "Padding size should be less than the corresponding input dimension");
        if (circular && (l > n || r > n))
            return sj_err(err, "Padding value causes wrapping around more than once.");
        if (n + l + r < least)
            return sj_err(err, "resulting padded dimension is too small");
        out->size[d] = n + l + r;
        out->sym[d] = NULL;
        return 0;
    }
    SymEnv *env = sj_symctx->env;
    SymNode *n = sj_dimsym(x, d, err);
    if (!n)
        return -1;
    SymNode *ln = ps[2 * i] ? ps[2 * i] : sym_const(env, l), *rn = ps[2 * i + 1] ? ps[2 * i + 1] : sym_const(env, r);
    SymNode *lk = sym_const(env, least);
    SymNode *o = ln && rn && lk ? sym_add(env, n, ln) : NULL;
    o = o ? sym_add(env, o, rn) : NULL;
    if (!o)
        return sj_sym_error(err);
    int t;
    for (int k = 0; k < 2 && (reflect || circular); k++) {
        SymNode *pk = k ? rn : ln;
        if (sj_decide(reflect ? sym_lt(env, pk, n) : sym_le(env, pk, n), &t, err) < 0)
            return -1;
        if (!t)
            return sj_err(err, "Padding size is too large for the input dimension");
    }
    if (sj_decide(sym_ge(env, o, lk), &t, err) < 0)
        return -1;
    if (!t)
        return sj_err(err, "resulting padded dimension is too small");
    return sj_set_dim(out, d, o, err);
}

/* torch F.pad: pairs (left, right) from the last dim backwards; negative pads crop. The
 * modes other than constant pad the last 1-3 dims of an input with one or two more (batch,
 * channels), whose padded dims must be non-empty.
 * numpy.pad: pad_width per axis from the first: n, (before, after) or one pair per axis. */
int rule_pad(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    const BoundArg *pa = ba_get(b, "pad");
    if (!pa || (pa->kind != BA_CONST && pa->kind != BA_LIST))
        return sj_err(err, "pad must be constant");
    *out = *x;
    out->np_scalar = 0;
    if (lib == LIB_TORCH) {
        int64_t p[SJ_MAX_RANK * 2];
        SymNode *ps[SJ_MAX_RANK * 2];
        int n;
        if (sj_int_list_sym(pa, "pad", p, ps, &n, SJ_MAX_RANK * 2, err))
            return -1;
        if (!sj_symctx)
            memset(ps, 0, sizeof ps);
        if (n % 2 != 0)
            return sj_err(err, "Padding length must be divisible by 2");
        if (n / 2 > x->ndim)
            return sj_err(err, "Padding length too large");
        const char *mode = "constant";
        const BoundArg *ma = ba_get(b, "mode");
        if (ma) {
            mode = ma->kind == BA_CONST && PyUnicode_Check(ma->value) ? PyUnicode_AsUTF8(ma->value) : NULL;
            if (!mode) {
                sj_err_clear();
                return sj_err(err, "mode must be a string");
            }
        }
        int k = n / 2;
        if (strcmp(mode, "constant") != 0) {
            if (strcmp(mode, "reflect") && strcmp(mode, "replicate") && strcmp(mode, "circular"))
                return sj_err(err, "Unrecognised padding mode %.40s", mode);
            if (ba_get(b, "value"))
                return sj_err(err, "Padding mode \"%s\" doesn't take in value argument", mode);
            if (k < 1 || k > 3 || (x->ndim != k + 1 && x->ndim != k + 2))
                return sj_err(err, "Padding size %d is not supported for %dD input tensor", n, x->ndim);
            /* circular padding is slicing and cat (any dtype, empty dims too); the others
             * have kernels for every dtype but bool, and need non-empty dims */
            int circular = !strcmp(mode, "circular");
            if (!circular && x->dtype == DT_BOOL)
                return sj_err(err, "%s padding is not implemented for bool", mode);
            for (int d = x->ndim - k - (x->ndim == k + 2 ? 1 : 0); !circular && d < x->ndim; d++) {
                int empty = sj_dim_equals(x, d, 0, err);
                if (empty)
                    return empty < 0 ? -1 : sj_err(err, "%s padding needs non-empty dims", mode);
            }
        }
        int64_t least = strcmp(mode, "constant") ? 1 : 0;
        for (int i = 0; i < k; i++)
            if (pad_dim(x, x->ndim - 1 - i, p, ps, i, mode, least, out, err) < 0)
                return -1;
        *nout = 1;
        return 0;
    }
    if (pa->kind != BA_CONST)
        return sj_err(err, "pad_width must be constant");
    if (sj_pin_dims(out, err) < 0)
        return -1;
    PyObject *v = pa->value;
    int64_t before[SJ_MAX_RANK], after[SJ_MAX_RANK];
    int64_t flat[SJ_MAX_RANK * 2];
    int n;
    if (PyLong_Check(v)) {
        if (sj_int(pa, "pad_width", &flat[0], err))
            return -1;
        for (int i = 0; i < x->ndim; i++)
            before[i] = after[i] = flat[0];
    } else if ((PyTuple_Check(v) || PyList_Check(v)) && PySequence_Fast_GET_SIZE(v) > 0 &&
               (PyTuple_Check(PySequence_Fast_GET_ITEM(v, 0)) || PyList_Check(PySequence_Fast_GET_ITEM(v, 0)))) {
        Py_ssize_t m = PySequence_Fast_GET_SIZE(v);
        if (m != x->ndim && m != 1)
            return sj_err(err, "pad_width does not match the array rank");
        for (int i = 0; i < x->ndim; i++) {
            BoundArg t = {BA_CONST, NULL, PySequence_Fast_GET_ITEM(v, m == 1 ? 0 : i), 0, NULL, NULL, NULL, 0};
            if (sj_int_list(&t, "pad_width", flat, &n, 2, err))
                return -1;
            before[i] = flat[0];
            after[i] = n == 2 ? flat[1] : flat[0];
        }
    } else {
        if (sj_int_list(pa, "pad_width", flat, &n, 2, err))
            return -1;
        for (int i = 0; i < x->ndim; i++) {
            before[i] = flat[0];
            after[i] = n == 2 ? flat[1] : flat[0];
        }
    }
    for (int i = 0; i < x->ndim; i++) {
        if (before[i] < 0 || after[i] < 0)
            return sj_err(err, "index can't contain negative values");
        out->size[i] = out->size[i] + before[i] + after[i];
    }
    *nout = 1;
    return 0;
}
