/* Views and data movement: view/reshape, permute, transpose, squeeze/unsqueeze, flatten,
 * expand, narrow/select, movedim, split/chunk/unbind, repeat, cat/stack. Indexing
 * (getitem/setitem) lives in rules_index.c. */
#include <string.h>

#include "promote.h"
#include "rules.h"
#include "rules_util.h"
#include "sym.h"

/* The output starts as the input with another shape. numpy views of numpy scalars are
 * arrays. */
static void like(const TensorMeta *x, TensorMeta *out)
{
    *out = *x;
    out->np_scalar = 0;
}

/* Static sizes[0..n) that must multiply to total, one of them possibly -1: that one is
 * inferred (filled in). torch's and numpy's reshape rule, and unflatten's for one dim.
 * 0, or -1 with err set. */
static int infer_size(int64_t *sizes, int n, int64_t total, ShapeErr *err)
{
    int infer = -1;
    int64_t known = 1;
    for (int i = 0; i < n; i++) {
        if (sizes[i] == -1) {
            if (infer >= 0)
                return sj_err(err, "only one dimension can be inferred");
            infer = i;
        } else if (sizes[i] < 0) {
            return sj_err(err, "invalid shape dimension %lld", (long long)sizes[i]);
        } else {
            known *= sizes[i];
        }
    }
    if (infer >= 0 ? known == 0 || total % known != 0 : known != total)
        return sj_err(err, "shape is invalid for input of size %lld", (long long)total);
    if (infer >= 0)
        sizes[infer] = total / known;
    return 0;
}

/* view/reshape with symbolic sizes: the element counts must agree as expressions (a
 * relation the ranges cannot decide is guarded); a -1 entry is numel // known. */
static int view_symbolic(OpId op, const TensorMeta *x, const int64_t *shape, SymNode *const *syms, int n,
                         TensorMeta *out, int *nout, ShapeErr *err)
{
    SymEnv *env = sj_symctx->env;
    SymNode *total = sym_const(env, 1), *known = total;
    int infer = -1;
    for (int i = 0; total && i < x->ndim; i++) {
        SymNode *d = sj_dimsym(x, i, err);
        if (!d)
            return -1;
        total = sym_mul(env, total, d);
    }
    for (int i = 0; known && i < n; i++) {
        if (!syms[i] && shape[i] == -1) {
            if (infer >= 0)
                return sj_err(err, "only one dimension can be inferred");
            infer = i;
            continue;
        }
        if (!syms[i] && shape[i] < 0)
            return sj_err(err, "invalid shape dimension %lld", (long long)shape[i]);
        if (syms[i] && shape[i] < 0)
            return sj_err(err, "%s: a symbolic size is negative (%lld)", op_info[op].name, (long long)shape[i]);
        known = sym_mul(env, known, syms[i] ? syms[i] : sym_const(env, shape[i]));
    }
    if (!total || !known)
        return sj_set_dim(out, 0, NULL, err);
    like(x, out);
    out->ndim = (unsigned char)n;
    for (int i = 0; i < n; i++) {
        out->size[i] = shape[i];
        out->sym[i] = syms[i];
    }
    if (infer >= 0) {
        if (known->kind == SK_CONST && known->value == 0)
            return sj_err(err, "shape is invalid for input of size %lld", (long long)sj_numel(x));
        /* the known sizes must divide the total (asserted at run time when that depends
         * on data) */
        if (sj_require(sym_eq(env, sym_mod(env, total, known), sym_const(env, 0)), err) < 0)
            return sj_err(err, "shape is invalid for input of size %lld", (long long)sj_numel(x));
        if (sj_set_dim(out, infer, sj_sym_div(total, known), err) < 0)
            return -1;
    } else if (sj_require(sym_eq(env, total, known), err) < 0) {
        return sj_err(err, "shape is invalid for input of size %lld", (long long)sj_numel(x));
    }
    *nout = 1;
    return 0;
}

/* reshape_as(input, other): the input with other's shape (the element counts agree);
 * with symbolic sizes, other's expressions, as reshape(input, other.shape). */
int rule_reshape_as(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)lib;
    const TensorMeta *x, *o;
    if (sj_tensor2(b, "input", &x, "other", &o, err))
        return -1;
    if (sj_symctx) {   /* as rule_view */
        int64_t shape[SJ_MAX_RANK];
        SymNode *syms[SJ_MAX_RANK];
        for (int i = 0; i < o->ndim; i++) {
            shape[i] = o->size[i];
            syms[i] = o->sym[i];
        }
        return view_symbolic(op, x, shape, syms, o->ndim, out, nout, err);
    }
    if (sj_numel(x) != sj_numel(o))
        return sj_err(err, "shape is invalid for input of size %lld", (long long)sj_numel(x));
    *out = *x;
    out->ndim = o->ndim;
    for (int i = 0; i < o->ndim; i++) {
        out->size[i] = o->size[i];
        out->sym[i] = NULL;
    }
    *nout = 1;
    return 0;
}

int rule_view(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)lib;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    int64_t shape[SJ_MAX_RANK + 1];
    SymNode *syms[SJ_MAX_RANK + 1];
    int n;
    if (sj_int_list_sym(ba_get(b, "shape"), "shape", shape, syms, &n, SJ_MAX_RANK + 1, err))
        return -1;
    if (n > SJ_MAX_RANK)
        return sj_err(err, "rank above %d is not supported", SJ_MAX_RANK);
    if (sj_symctx)
        return view_symbolic(op, x, shape, syms, n, out, nout, err);
    if (infer_size(shape, n, sj_numel(x), err))
        return -1;
    like(x, out);
    out->ndim = (unsigned char)n;
    memcpy(out->size, shape, sizeof(int64_t) * (size_t)n);
    *nout = 1;
    return 0;
}

int rule_permute(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    int64_t dims[SJ_MAX_RANK];
    int n;
    const BoundArg *d = ba_get(b, "dims");
    if (!d || (d->kind == BA_LIST && d->n == 0)) {
        /* numpy transpose without axes reverses the dims */
        if (lib == LIB_TORCH)
            return sj_err(err, "permute needs dims");
        n = x->ndim;
        for (int i = 0; i < n; i++)
            dims[i] = n - 1 - i;
    } else if (sj_int_list(d, "dims", dims, &n, SJ_MAX_RANK, err)) {
        return -1;
    }
    if (n != x->ndim)
        return sj_err(err, "number of dims don't match in permute");
    unsigned seen = 0;
    like(x, out);
    for (int i = 0; i < n; i++) {
        int k;
        if (sj_dim(lib, dims[i], x->ndim, &k, err))
            return -1;
        if (seen & (1u << k))
            return sj_err(err, "repeated dim in permute");
        seen |= 1u << k;
        sj_copy_dim(out, i, x, k);
    }
    /* np.transpose(scalar) goes through the scalar's own method, which returns a scalar */
    out->np_scalar = x->np_scalar;
    *nout = 1;
    return 0;
}

int rule_transpose(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    int64_t d0, d1;
    int a, c;
    if (sj_int(ba_get(b, "dim0"), "dim0", &d0, err) || sj_int(ba_get(b, "dim1"), "dim1", &d1, err))
        return -1;
    if (sj_dim(lib, d0, x->ndim, &a, err) || sj_dim(lib, d1, x->ndim, &c, err))
        return -1;
    like(x, out);
    if (x->ndim) {
        sj_copy_dim(out, a, x, c);
        sj_copy_dim(out, c, x, a);
    }
    *nout = 1;
    return 0;
}

int rule_t(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    (void)lib;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    if (x->ndim > 2)
        return sj_err(err, "t() expects a tensor with <= 2 dimensions, but self is %dD", x->ndim);
    like(x, out);
    if (x->ndim == 2) {
        sj_copy_dim(out, 0, x, 1);
        sj_copy_dim(out, 1, x, 0);
    }
    *nout = 1;
    return 0;
}

int rule_unsqueeze(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    int64_t dims[SJ_MAX_RANK];
    int n;
    if (sj_int_list(ba_get(b, "dim"), "dim", dims, &n, SJ_MAX_RANK, err))
        return -1;
    const BoundArg *d = ba_get(b, "dim");
    if (lib == LIB_TORCH && !(d->kind == BA_CONST && PyLong_Check(d->value)))
        return sj_err(err, "unsqueeze takes one int dim");
    int nd = x->ndim + n;
    if (nd > SJ_MAX_RANK)
        return sj_err(err, "rank above %d is not supported", SJ_MAX_RANK);
    unsigned mask = 0;
    for (int i = 0; i < n; i++) {
        int k;
        /* the new dims index the output */
        if (sj_dim(LIB_NUMPY, dims[i], nd, &k, err))
            return -1;
        if (mask & (1u << k))
            return sj_err(err, "repeated axis");
        mask |= 1u << k;
    }
    like(x, out);
    out->ndim = (unsigned char)nd;
    for (int i = 0, j = 0; i < nd; i++) {
        if (mask & (1u << i)) {
            out->size[i] = 1;
            out->sym[i] = NULL;
        } else {
            sj_copy_dim(out, i, x, j++);
        }
    }
    *nout = 1;
    return 0;
}

int rule_squeeze(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    const BoundArg *d = ba_get(b, "dim");
    unsigned mask = 0;
    if (!d) {
        for (int i = 0; i < x->ndim; i++) {
            int one = sj_dim_equals(x, i, 1, err);   /* a symbolic dim: decided, guarded */
            if (one < 0)
                return -1;
            if (one)
                mask |= 1u << i;
        }
    } else {
        int64_t dims[SJ_MAX_RANK];
        int n;
        if (sj_int_list(d, "dim", dims, &n, SJ_MAX_RANK, err))
            return -1;
        for (int i = 0; i < n; i++) {
            int k;
            if (sj_dim(lib, dims[i], x->ndim, &k, err))
                return -1;
            if (x->ndim == 0)
                continue;
            int one = sj_dim_equals(x, k, 1, err);
            if (one < 0)
                return -1;
            if (!one) {
                /* torch leaves a non-1 dim alone; numpy refuses */
                if (lib == LIB_NUMPY)
                    return sj_err(err, "cannot select an axis to squeeze out which has "
                                       "size not equal to one");
                continue;
            }
            mask |= 1u << k;
        }
    }
    like(x, out);
    int k = 0;
    for (int i = 0; i < x->ndim; i++)
        if (!(mask & (1u << i)))
            sj_copy_dim(out, k++, x, i);
    out->ndim = (unsigned char)k;
    *nout = 1;
    return 0;
}

int rule_flatten(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    int64_t s0, e0;
    if (sj_get_int(b, "start_dim", 0, &s0, err) || sj_get_int(b, "end_dim", -1, &e0, err))
        return -1;
    like(x, out);
    if (x->ndim == 0) {
        out->ndim = 1;
        out->size[0] = 1;
        out->sym[0] = NULL;
        *nout = 1;
        return 0;
    }
    int s, e;
    if (sj_dim(lib, s0, x->ndim, &s, err) || sj_dim(lib, e0, x->ndim, &e, err))
        return -1;
    if (s > e)
        return sj_err(err, "flatten() has invalid args: start_dim cannot come after end_dim");
    int64_t m = 1;
    for (int i = s; i <= e; i++)
        m *= x->size[i];
    SymNode *ms = NULL;
    if (sj_symctx) {
        ms = sym_const(sj_symctx->env, 1);
        for (int i = s; ms && i <= e; i++) {
            SymNode *d = sj_dimsym(x, i, err);
            if (!d)
                return -1;
            ms = sym_mul(sj_symctx->env, ms, d);
        }
        if (!ms)
            return sj_set_dim(out, 0, NULL, err);
    }
    int k = 0;
    for (int i = 0; i < s; i++, k++)
        sj_copy_dim(out, k, x, i);
    out->size[k] = m;
    out->sym[k++] = ms && ms->kind != SK_CONST ? ms : NULL;
    for (int i = e + 1; i < x->ndim; i++, k++)
        sj_copy_dim(out, k, x, i);
    out->ndim = (unsigned char)k;
    *nout = 1;
    return 0;
}

/* unflatten(dim, sizes): one dim becomes several; one size may be -1. */
int rule_unflatten(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    int64_t sizes[SJ_MAX_RANK];
    int n = 0, d;
    const TensorMeta *x = sj_input_dim(b, lib, "dim", 0, NULL, &d, err);
    if (!x)
        return -1;
    const BoundArg *sa = ba_get(b, "sizes");
    if (!sa || sj_int_list(sa, "sizes", sizes, &n, SJ_MAX_RANK, err))
        return sa ? -1 : sj_err(err, "unflatten() needs sizes");
    /* a symbolic dim being split: pinned (its parts would need exact division); the other
     * dims keep their symbols below */
    int64_t pinned = x->size[d];
    if (sj_symctx && x->sym[d] && sj_pin(x->sym[d], &pinned, err) < 0)
        return -1;
    if (n == 0)
        return sj_err(err, "unflatten: sizes must be non-empty");
    if (x->ndim - 1 + n > SJ_MAX_RANK)
        return sj_err(err, "unflatten: rank above %d", SJ_MAX_RANK);
    if (infer_size(sizes, n, x->size[d], err))
        return -1;
    like(x, out);
    int k = 0;
    for (int i = 0; i < d; i++, k++)
        sj_copy_dim(out, k, x, i);
    for (int i = 0; i < n; i++, k++) {
        out->size[k] = sizes[i];
        out->sym[k] = NULL;
    }
    for (int i = d + 1; i < x->ndim; i++, k++)
        sj_copy_dim(out, k, x, i);
    out->ndim = (unsigned char)k;
    *nout = 1;
    return 0;
}

/* One dim of expand with symbols: the wanted size want (node) against the input's dim
 * have (node, or NULL for a new leading dim). As torch: -1 keeps the input's dim, an equal
 * size stays, otherwise the input's dim must be 1. Each relation the ranges cannot decide
 * is guarded. *res receives the output dim. */
static int expand_dim_sym(Lib lib, SymNode *want, SymNode *have, int i, SymNode **res, ShapeErr *err)
{
    SymEnv *env = sj_symctx->env;
    int t;
    if (want->kind != SK_CONST || want->value == -1) {
        if (sj_decide(sym_eq(env, want, sym_const(env, -1)), &t, err) < 0)
            return -1;
        if (t) {
            if (!have || lib == LIB_NUMPY)
                return sj_err(err, "-1 is not allowed in a leading, non-existing dimension");
            *res = have;
            return 0;
        }
    }
    if (sj_decide(sym_ge(env, want, sym_const(env, 0)), &t, err) < 0)
        return -1;
    if (!t)
        return sj_err(err, "invalid size %lld at dimension %d", want->kind == SK_CONST ? (long long)want->value : -1LL,
                      i);
    *res = want;
    if (!have)
        return 0;
    if (sj_decide(sym_eq(env, have, want), &t, err) < 0)
        return -1;
    if (t)
        return 0;
    if (sj_decide(sym_eq(env, have, sym_const(env, 1)), &t, err) < 0)
        return -1;
    return t ? 0 : sj_err(err, "the expanded size must match the existing size at non-singleton dimension %d", i);
}

/* x expanded to shape (syms: the symbols of its entries, or NULL). */
static int expand_to(Lib lib, const TensorMeta *x, const int64_t *shape, SymNode *const *syms, int n, TensorMeta *out,
                     ShapeErr *err)
{
    if (n < x->ndim)
        return sj_err(err,
                      "the number of sizes provided (%d) must be greater or equal to "
                      "the number of dimensions in the tensor (%d)",
                      n, x->ndim);
    like(x, out);
    out->ndim = (unsigned char)n;
    int off = n - x->ndim, symbolic = 0;
    for (int i = 0; sj_symctx && i < n; i++)
        symbolic |= (syms && syms[i]) || (i >= off && x->sym[i - off]);
    for (int i = 0; i < n; i++) {
        if (symbolic) {
            SymNode *have = i >= off ? sj_dimsym(x, i - off, err) : NULL, *res;
            SymNode *want = syms && syms[i] ? syms[i] : sym_const(sj_symctx->env, shape[i]);
            if ((i >= off && !have) || !want)
                return want ? -1 : sj_sym_error(err);
            if (expand_dim_sym(lib, want, have, i, &res, err) < 0 || sj_set_dim(out, i, res, err) < 0)
                return -1;
            continue;
        }
        int64_t want = shape[i];
        int64_t have = i >= off ? x->size[i - off] : -2;
        if (want == -1) {
            if (have == -2 || lib == LIB_NUMPY)
                return sj_err(err, "-1 is not allowed in a leading, non-existing dimension");
            want = have;
        } else if (want < 0) {
            return sj_err(err, "invalid size %lld", (long long)want);
        }
        if (have >= 0 && have != want && have != 1)
            return sj_err(err,
                          "the expanded size %lld must match the existing size %lld "
                          "at non-singleton dimension %d",
                          (long long)want, (long long)have, i);
        out->size[i] = want;
    }
    return 0;
}

int rule_expand(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    int64_t shape[SJ_MAX_RANK];
    SymNode *syms[SJ_MAX_RANK];
    int n;
    if (sj_int_list_sym(ba_get(b, "size"), "size", shape, syms, &n, SJ_MAX_RANK, err) ||
        expand_to(lib, x, shape, syms, n, out, err))
        return -1;
    *nout = 1;
    return 0;
}

int rule_expand_as(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *x, *o;
    if (sj_tensor2(b, "input", &x, "other", &o, err) ||
        expand_to(lib, x, o->size, sj_symctx ? o->sym : NULL, o->ndim, out, err))
        return -1;
    *nout = 1;
    return 0;
}

/* narrow(dim, start, length) with a symbolic size, start or length, checked as torch does
 * (each relation guarded unless the ranges decide it): length >= 0, -size <= start <= size,
 * the sign of start (a negative start counts from the end), start + length <= size. */
static int narrow_sym(const TensorMeta *x, int d, int64_t start, SymNode *ss, int64_t length, SymNode *ls,
                      TensorMeta *out, ShapeErr *err)
{
    SymEnv *env = sj_symctx->env;
    SymNode *size = sj_dimsym(x, d, err);
    if (!size)
        return -1;
    SymNode *st = ss ? ss : sym_const(env, start), *len = ls ? ls : sym_const(env, length);
    SymNode *zero = sym_const(env, 0), *lo = sym_neg(env, size);
    if (!st || !len || !zero || !lo)
        return sj_sym_error(err);
    int ok, neg;
    if (sj_decide(sym_ge(env, len, zero), &ok, err) < 0)
        return -1;
    if (!ok)
        return sj_err(err, "narrow(): length must be non-negative.");
    if (sj_decide(sym_le(env, lo, st), &ok, err) < 0 || (ok && sj_decide(sym_le(env, st, size), &ok, err) < 0))
        return -1;
    if (!ok)
        return sj_err(err, "start out of range");
    if (sj_decide(sym_lt(env, st, zero), &neg, err) < 0)
        return -1;
    if (neg && !(st = sym_add(env, st, size)))
        return sj_sym_error(err);
    if (sj_decide(sym_le(env, st, sym_sub(env, size, len)), &ok, err) < 0)
        return -1;
    if (!ok)
        return sj_err(err, "start (%lld) + length (%lld) exceeds dimension size (%lld).", (long long)start,
                      (long long)length, (long long)x->size[d]);
    like(x, out);
    return sj_set_dim(out, d, len, err);
}

int rule_narrow(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    int64_t d0, start, length;
    SymNode *ss, *ls;
    int d;
    if (sj_int(ba_get(b, "dim"), "dim", &d0, err) || sj_int_sym(ba_get(b, "start"), "start", &start, &ss, err) ||
        sj_int_sym(ba_get(b, "length"), "length", &length, &ls, err))
        return -1;
    if (x->ndim == 0)
        return sj_err(err, "narrow() cannot be applied to a 0-dim tensor.");
    if (sj_dim(lib, d0, x->ndim, &d, err))
        return -1;
    *nout = 1;
    if (sj_symctx && (x->sym[d] || ss || ls))
        return narrow_sym(x, d, start, ss, length, ls, out, err);
    int64_t size = x->size[d];
    if (start < -size || start > size)
        return sj_err(err, "start out of range");
    if (start < 0)
        start += size;
    if (length < 0 || start + length > size)
        return sj_err(err, "start (%lld) + length (%lld) exceeds dimension size (%lld).", (long long)start,
                      (long long)length, (long long)size);
    like(x, out);
    out->size[d] = length;
    return 0;
}

int rule_select(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    int64_t d0, index;
    SymNode *is;
    int d;
    if (sj_int(ba_get(b, "dim"), "dim", &d0, err) || sj_int_sym(ba_get(b, "index"), "index", &index, &is, err))
        return -1;
    if (x->ndim == 0)
        return sj_err(err, "select() cannot be applied to a 0-dim tensor.");
    if (sj_dim(lib, d0, x->ndim, &d, err))
        return -1;
    int outside = sj_index_in_range(x, d, index, is, err);
    if (outside < 0)
        return -1;
    if (outside)
        return sj_err(err, "select(): index %lld out of range for tensor of size %lld", (long long)index,
                      (long long)x->size[d]);
    like(x, out);
    for (int i = d; i + 1 < x->ndim; i++)
        sj_copy_dim(out, i, x, i + 1);
    out->ndim--;
    *nout = 1;
    return 0;
}

int rule_movedim(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    int64_t src[SJ_MAX_RANK], dst[SJ_MAX_RANK];
    int ns, nd;
    if (sj_int_list(ba_get(b, "source"), "source", src, &ns, SJ_MAX_RANK, err) ||
        sj_int_list(ba_get(b, "destination"), "destination", dst, &nd, SJ_MAX_RANK, err))
        return -1;
    if (ns != nd)
        return sj_err(err, "movedim: source and destination must have the same length");
    int order[SJ_MAX_RANK];    /* order[output position] = input dim, -1 = not yet */
    unsigned used_src = 0, used_dst = 0;
    for (int i = 0; i < x->ndim; i++)
        order[i] = -1;
    for (int i = 0; i < ns; i++) {
        int s, d;
        if (sj_dim(lib, src[i], x->ndim, &s, err) || sj_dim(lib, dst[i], x->ndim, &d, err))
            return -1;
        if ((used_src & (1u << s)) || (used_dst & (1u << d)))
            return sj_err(err, "movedim: repeated dim");
        used_src |= 1u << s;
        used_dst |= 1u << d;
        if (x->ndim)
            order[d] = s;
    }
    int next = 0;
    for (int i = 0; i < x->ndim; i++) {
        if (order[i] >= 0)
            continue;
        while (used_src & (1u << next))
            next++;
        order[i] = next++;
    }
    like(x, out);
    for (int i = 0; i < x->ndim; i++)
        sj_copy_dim(out, i, x, order[i]);   /* a permutation: symbols move with their dims */
    *nout = 1;
    return 0;
}

/* The tensor pieces of dim d with the given lengths: lsym[i] (a node) when lsym and
 * lsym[i] are set, else len[i]. */
static int pieces(const TensorMeta *x, int d, const int64_t *len, SymNode *const *lsym, int n, TensorMeta *out,
                  int *nout, ShapeErr *err)
{
    if (n > *nout)
        return sj_err(err, "more than %d outputs are not supported", *nout);
    for (int i = 0; i < n; i++) {
        like(x, &out[i]);
        if (lsym && lsym[i]) {
            if (sj_set_dim(&out[i], d, lsym[i], err) < 0)
                return -1;
        } else {
            out[i].size[d] = len[i];
            out[i].sym[d] = NULL;
        }
    }
    *nout = n;
    return 0;
}

/* ceil(a / b) for sizes, b > 0: (a + b - 1) // b. NULL with a Python exception on failure. */
static SymNode *ceil_div(SymEnv *env, SymNode *a, SymNode *b)
{
    SymNode *m1 = a && b ? sym_const(env, -1) : NULL;
    SymNode *up = m1 ? sym_add(env, a, b) : NULL;
    up = up ? sym_add(env, up, m1) : NULL;
    return up ? sym_floordiv(env, up, b) : NULL;
}

/* torch's split of dim d into pieces of k (k > 0 decided), the last one shorter, with a
 * symbolic size or k: the number of pieces, ceil(size / k), is a Python-level count, so it
 * is specialised (guarded equal to its value at the hints, as torch does); the pieces are
 * then k, ..., k and size - (count - 1) * k, which the count guard keeps in [1, k]. A count
 * of 0 (size 0 at the hints) gives one empty piece, as torch. */
static int split_by_sym(const TensorMeta *x, int d, SymNode *k, TensorMeta *out, int *nout, ShapeErr *err)
{
    SymEnv *env = sj_symctx->env;
    SymNode *size = sj_dimsym(x, d, err), *lsym[SJ_MAX_OUTS];
    if (!size)
        return -1;
    int64_t count;
    if (sj_pin(ceil_div(env, size, k), &count, err) < 0)
        return -1;
    if (count > *nout)
        return sj_err(err, "more than %d outputs are not supported", *nout);
    if (count == 0) {
        int64_t zero = 0;
        return pieces(x, d, &zero, NULL, 1, out, nout, err);
    }
    for (int64_t i = 0; i + 1 < count; i++)
        lsym[i] = k;
    SymNode *before = sym_const(env, count - 1), *done = before ? sym_mul(env, before, k) : NULL;
    if (!done || !(lsym[count - 1] = sym_sub(env, size, done)))
        return sj_sym_error(err);
    return pieces(x, d, NULL, lsym, (int)count, out, nout, err);
}

/* torch.split(x, k) with a symbolic size or k: k >= 0; k == 0 only for an empty dim (one
 * empty piece); else split_by_sym. */
static int split_size_sym(const TensorMeta *x, int d, SymNode *k, TensorMeta *out, int *nout, ShapeErr *err)
{
    SymEnv *env = sj_symctx->env;
    SymNode *zero = sym_const(env, 0), *size = sj_dimsym(x, d, err);
    if (!size)
        return -1;
    if (!zero || !k)
        return sj_sym_error(err);
    int ok, empty;
    if (sj_decide(sym_ge(env, k, zero), &ok, err) < 0 || (ok && sj_decide(sym_eq(env, k, zero), &empty, err) < 0))
        return -1;
    if (ok && !empty)
        return split_by_sym(x, d, k, out, nout, err);
    if (ok && sj_decide(sym_eq(env, size, zero), &ok, err) < 0)
        return -1;
    if (!ok)
        return sj_err(err, "split_size can only be 0 if dimension size is 0");
    return pieces(x, d, &x->size[d], NULL, 1, out, nout, err);
}

/* torch.split(x, [a, b, ...]) with symbolic entries or size: each entry >= 0 and their sum
 * equal to the size (guarded unless the ranges decide: a constant sum against a symbolic
 * size specialises it, as torch). The pieces are the entries. */
static int split_sizes_sym(const TensorMeta *x, int d, const int64_t *v, SymNode **vs, int m, TensorMeta *out,
                           int *nout, ShapeErr *err)
{
    SymEnv *env = sj_symctx->env;
    SymNode *sum = sym_const(env, 0), *zero = sum, *size = sj_dimsym(x, d, err);
    if (!size)
        return -1;
    for (int i = 0; sum && i < m; i++) {
        int ok;
        if (!vs[i] && !(vs[i] = sym_const(env, v[i])))
            return sj_sym_error(err);
        if (sj_decide(sym_ge(env, vs[i], zero), &ok, err) < 0)
            return -1;
        if (!ok)
            return sj_err(err, "split_with_sizes expects non-negative sizes");
        sum = sym_add(env, sum, vs[i]);
    }
    if (!sum)
        return sj_sym_error(err);
    if (sj_require(sym_eq(env, sum, size), err) < 0)
        return sj_err(err, "split_with_sizes expects split_sizes to sum exactly to %lld", (long long)x->size[d]);
    return pieces(x, d, NULL, vs, m, out, nout, err);
}

/* numpy.split(a, k) into k equal sections of a symbolic dim: k divides it (guarded). */
static int split_sections_sym(const TensorMeta *x, int d, int64_t k, TensorMeta *out, int *nout, ShapeErr *err)
{
    SymEnv *env = sj_symctx->env;
    SymNode *size = sj_dimsym(x, d, err), *lsym[SJ_MAX_OUTS];
    if (!size)
        return -1;
    if (k <= 0)
        return sj_err(err, "array split does not result in an equal division");
    if (k > *nout)
        return sj_err(err, "more than %d outputs are not supported", *nout);
    SymNode *kn = sym_const(env, k), *zero = sym_const(env, 0);
    SymNode *rem = kn && zero ? sym_mod(env, size, kn) : NULL;
    if (!rem)
        return sj_sym_error(err);
    if (sj_require(sym_eq(env, rem, zero), err) < 0)
        return sj_err(err, "array split does not result in an equal division");
    SymNode *part = sj_sym_div(size, kn);
    for (int64_t i = 0; i < k; i++)
        lsym[i] = part;
    return part ? pieces(x, d, NULL, lsym, (int)k, out, nout, err) : sj_sym_error(err);
}

int rule_split(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    int d;
    const TensorMeta *x = sj_input_dim(b, lib, "dim", 0, "split expects at least a 1-dimensional tensor", &d, err);
    if (!x)
        return -1;
    const BoundArg *s = ba_get(b, "split_size");
    if (!s || (s->kind != BA_CONST && s->kind != BA_LIST))
        return sj_err(err, "split needs constant sizes");
    int64_t size = x->size[d];
    SymNode *ds = sj_symctx ? x->sym[d] : NULL;
    int64_t len[SJ_MAX_OUTS];
    int n = 0;
    if (s->kind == BA_CONST && PyLong_Check(s->value)) {
        int64_t k;
        SymNode *ks;
        if (sj_int_sym(s, "split_size", &k, &ks, err))
            return -1;
        if (lib == LIB_NUMPY) {
            /* numpy: k equal sections (the count is pinned) */
            if (ks && sj_pin(ks, &k, err) < 0)
                return -1;
            if (ds)
                return split_sections_sym(x, d, k, out, nout, err);
            if (k <= 0 || size % k != 0)
                return sj_err(err, "array split does not result in an equal division");
            if (k > SJ_MAX_OUTS)
                return sj_err(err, "more than %d outputs are not supported", SJ_MAX_OUTS);
            for (n = 0; n < k; n++)
                len[n] = size / k;
        } else if (ds || ks) {
            return split_size_sym(x, d, ks ? ks : sym_const(sj_symctx->env, k), out, nout, err);
        } else {
            /* torch: pieces of k, the last one shorter */
            if (k < 0 || (k == 0 && size != 0))
                return sj_err(err, "split_size can only be 0 if dimension size is 0");
            if (k == 0) {
                len[n++] = 0;
            } else {
                for (int64_t at = 0; at < size || n == 0; at += k) {
                    if (n >= SJ_MAX_OUTS)
                        return sj_err(err, "more than %d outputs are not supported", SJ_MAX_OUTS);
                    len[n++] = size - at < k ? size - at : k;
                    if (size == 0)
                        break;
                }
            }
        }
    } else {
        int64_t v[SJ_MAX_OUTS];
        SymNode *vs[SJ_MAX_OUTS];
        int m, symbolic = ds != NULL;
        if (sj_int_list_sym(s, "split_size", v, vs, &m, SJ_MAX_OUTS, err))
            return -1;
        for (int i = 0; sj_symctx && i < m; i++)
            symbolic |= vs[i] != NULL;
        if (lib == LIB_TORCH && symbolic)
            return split_sizes_sym(x, d, v, vs, m, out, nout, err);
        if (lib == LIB_TORCH) {
            int64_t sum = 0;
            for (int i = 0; i < m; i++) {
                if (v[i] < 0)
                    return sj_err(err, "split_with_sizes expects non-negative sizes");
                len[n++] = v[i];
                sum += v[i];
            }
            if (sum != size)
                return sj_err(err,
                              "split_with_sizes expects split_sizes to sum exactly to "
                              "%lld",
                              (long long)size);
        } else {
            /* numpy: split points, clipped to the axis like slices (a symbolic axis or
             * point is specialised) */
            for (int i = 0; symbolic && i < m; i++)
                if (vs[i] && sj_pin(vs[i], &v[i], err) < 0)
                    return -1;
            if (ds && sj_pin(ds, &size, err) < 0)
                return -1;
            if (m + 1 > SJ_MAX_OUTS)
                return sj_err(err, "more than %d outputs are not supported", SJ_MAX_OUTS);
            int64_t prev = 0;
            for (int i = 0; i <= m; i++) {
                int64_t at = i < m ? v[i] : size;
                if (at < 0)
                    at += size;
                if (at < 0)
                    at = 0;
                if (at > size)
                    at = size;
                int64_t lo = prev > size ? size : prev;
                len[n++] = at > lo ? at - lo : 0;
                prev = i < m ? (v[i] < 0 ? v[i] + size : v[i]) : size;
                if (prev < 0)
                    prev = 0;
            }
        }
    }
    return pieces(x, d, len, NULL, n, out, nout, err);
}

int rule_chunk(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    int64_t chunks;
    int d;
    const TensorMeta *x = sj_input_dim(b, lib, "dim", 0, "chunk expects at least a 1-dimensional tensor", &d, err);
    if (!x || sj_int(ba_get(b, "chunks"), "chunks", &chunks, err))
        return -1;
    if (chunks <= 0)
        return sj_err(err, "chunk expects `chunks` to be greater than 0");
    int64_t size = x->size[d];
    int64_t len[SJ_MAX_OUTS];
    int n = 0;
    int64_t step = (size + chunks - 1) / chunks;
    if (sj_symctx && x->sym[d]) {
        /* as torch: a split by ceil(size / chunks), unless that is 0 (decided) */
        SymEnv *env = sj_symctx->env;
        SymNode *n = sym_const(env, chunks), *k = n ? ceil_div(env, x->sym[d], n) : NULL;
        SymNode *none = k ? sym_const(env, 0) : NULL;
        int zero;
        if (sj_decide(none ? sym_eq(env, k, none) : NULL, &zero, err) < 0)
            return -1;
        if (!zero)
            return split_by_sym(x, d, k, out, nout, err);
        step = 0;
    }
    if (step == 0) {
        /* an empty dim still gives `chunks` empty pieces */
        if (chunks > SJ_MAX_OUTS)
            return sj_err(err, "more than %d outputs are not supported", SJ_MAX_OUTS);
        for (n = 0; n < chunks; n++)
            len[n] = 0;
    } else {
        for (int64_t at = 0; at < size; at += step) {
            if (n >= SJ_MAX_OUTS)
                return sj_err(err, "more than %d outputs are not supported", SJ_MAX_OUTS);
            len[n++] = size - at < step ? size - at : step;
        }
    }
    return pieces(x, d, len, NULL, n, out, nout, err);
}

int rule_unbind(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    int d;
    const TensorMeta *x =
        sj_input_dim(b, lib, "dim", 0, "Dimension specified as 0 but tensor has no dimensions", &d, err);
    if (!x)
        return -1;
    /* the number of results is the size: a symbolic one is specialised (as torch); the
     * other dims keep their symbols */
    int64_t count = x->size[d];
    if (sj_symctx && x->sym[d] && sj_pin(x->sym[d], &count, err) < 0)
        return -1;
    if (count > *nout)
        return sj_err(err, "more than %d outputs are not supported", *nout);
    for (int i = 0; i < count; i++) {
        like(x, &out[i]);
        for (int k = d; k + 1 < x->ndim; k++)
            sj_copy_dim(&out[i], k, x, k + 1);
        out[i].ndim--;
    }
    *nout = (int)count;
    return 0;
}

int rule_repeat(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    int64_t reps[SJ_MAX_RANK];
    SymNode *syms[SJ_MAX_RANK];
    int n;
    if (sj_int_list_sym(ba_get(b, "sizes"), "sizes", reps, syms, &n, SJ_MAX_RANK, err))
        return -1;
    if (n < x->ndim) {
        if (lib == LIB_TORCH)
            return sj_err(err, "Number of dimensions of repeat dims can not be smaller than "
                               "number of dimensions of tensor");
        /* np.tile pads the repetitions with leading ones */
        int pad = x->ndim - n;
        memmove(reps + pad, reps, sizeof(int64_t) * (size_t)n);
        memmove(syms + pad, syms, sizeof(SymNode *) * (size_t)n);
        for (int i = 0; i < pad; i++) {
            reps[i] = 1;
            syms[i] = NULL;
        }
        n = x->ndim;
    }
    like(x, out);
    out->ndim = (unsigned char)n;
    int off = n - x->ndim;
    for (int i = 0; i < n; i++) {
        if (reps[i] < 0)
            return sj_err(err, "repeat: negative repetitions");
        out->size[i] = reps[i] * (i >= off ? x->size[i - off] : 1);
        out->sym[i] = NULL;
        if (sj_symctx && (syms[i] || (i >= off && x->sym[i - off]))) {
            /* a symbolic count must stay non-negative (guarded); the size is the product */
            SymEnv *env = sj_symctx->env;
            SymNode *r = syms[i] ? syms[i] : sym_const(env, reps[i]);
            SymNode *d = i >= off ? sj_dimsym(x, i - off, err) : sym_const(env, 1);
            if (!d || !r)
                return d ? sj_sym_error(err) : -1;
            if ((syms[i] && sj_require(sym_ge(env, r, sym_const(env, 0)), err) < 0) ||
                sj_set_dim(out, i, sym_mul(env, r, d), err) < 0)
                return -1;
        }
    }
    *nout = 1;
    return 0;
}

/* The tensors of a cat/stack sequence, and their common dtype. */
static int seq_tensors(Lib lib, const BoundArgs *b, const TensorMeta **ts, int *n, DType *dt, ShapeErr *err)
{
    const BoundArg *s = ba_get(b, "tensors");
    if (!s || s->kind != BA_LIST)
        return sj_err(err, "expected a sequence of tensors");
    if (s->n == 0)
        return sj_err(err, "expected a non-empty list of tensors");
    if (s->n > SJ_MAX_OUTS)
        return sj_err(err, "more than %d tensors are not supported", SJ_MAX_OUTS);
    for (int i = 0; i < s->n; i++) {
        if (s->items[i].kind != BA_TENSOR)
            return sj_err(err, "expected a sequence of tensors (item %d is not one)", i);
        ts[i] = s->items[i].meta;
    }
    *n = s->n;
    /* cat does not weaken 0-d operands the way arithmetic does: every item counts */
    DType r = (DType)ts[0]->dtype;
    for (int i = 1; i < s->n; i++)
        if (promote_pair(lib, r, (DType)ts[i]->dtype, &r, err))
            return -1;
    *dt = r;
    return 0;
}

int rule_cat(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *ts[SJ_MAX_OUTS];
    int n;
    DType dt;
    if (seq_tensors(lib, b, ts, &n, &dt, err) || sj_dtype_or(b, "dtype", lib, &dt, err))
        return -1;
    const BoundArg *da = ba_get(b, "dim");
    sj_meta(out, lib, dt);
    if (lib == LIB_NUMPY && !da && sj_passed_none(b, "dim")) {
        /* np.concatenate(..., axis=None) concatenates the flattened arrays */
        int64_t total = 0;
        for (int i = 0; i < n; i++)
            total += sj_numel(ts[i]);
        out->ndim = 1;
        out->size[0] = total;
        if (sj_symctx) {   /* the sum of the numels, as an expression */
            SymNode *e = sym_const(sj_symctx->env, 0);
            for (int i = 0; e && i < n; i++) {
                SymNode *m = sym_const(sj_symctx->env, 1);
                for (int k = 0; m && k < ts[i]->ndim; k++) {
                    SymNode *dk = sj_dimsym(ts[i], k, err);
                    if (!dk)
                        return -1;
                    m = sym_mul(sj_symctx->env, m, dk);
                }
                e = m ? sym_add(sj_symctx->env, e, m) : NULL;
            }
            if (sj_set_dim(out, 0, e, err) < 0)
                return -1;
        }
        *nout = 1;
        return 0;
    }
    int64_t d0 = 0;
    if (da && sj_int(da, "dim", &d0, err))
        return -1;
    /* torch skips legacy empty 1-d tensors of shape (0,) */
    const TensorMeta *ref = NULL;
    for (int i = 0; i < n; i++) {
        if (lib == LIB_TORCH && ts[i]->ndim == 1 && ts[i]->size[0] == 0)
            continue;
        ref = ts[i];
        break;
    }
    if (!ref) {
        out->ndim = 1;
        out->size[0] = 0;
        *nout = 1;
        return 0;
    }
    if (ref->ndim == 0)
        return sj_err(err, "zero-dimensional arrays cannot be concatenated");
    int d;
    if (sj_dim(lib, d0, ref->ndim, &d, err))
        return -1;
    int64_t total = 0;
    SymNode *stotal = sj_symctx ? sym_const(sj_symctx->env, 0) : NULL;
    for (int i = 0; i < n; i++) {
        const TensorMeta *t = ts[i];
        if (lib == LIB_TORCH && t->ndim == 1 && t->size[0] == 0)
            continue;
        if (t->ndim != ref->ndim)
            return sj_err(err, "all the input arrays must have the same number of dimensions");
        for (int k = 0; k < t->ndim; k++) {
            if (k == d)
                continue;
            int eq = sj_dims_equal(t, k, ref, k, err);
            if (eq < 0)
                return -1;
            if (!eq)
                return sj_err(err, "sizes of tensors must match except in dimension %d", d);
        }
        total += t->size[d];
        if (stotal) {
            SymNode *td = sj_dimsym(t, d, err);
            if (!td)
                return -1;
            stotal = sym_add(sj_symctx->env, stotal, td);
        }
    }
    out->ndim = ref->ndim;
    for (int k = 0; k < ref->ndim; k++)
        sj_copy_dim(out, k, ref, k);
    out->size[d] = total;
    out->sym[d] = NULL;
    if (sj_symctx && sj_set_dim(out, d, stotal, err) < 0)
        return -1;
    out->requires_grad = (unsigned char)sj_requires_grad(b);
    *nout = 1;
    return 0;
}

int rule_stack(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *ts[SJ_MAX_OUTS];
    int n;
    DType dt;
    if (seq_tensors(lib, b, ts, &n, &dt, err) || sj_dtype_or(b, "dtype", lib, &dt, err))
        return -1;
    int d;
    const TensorMeta *ref = ts[0];
    if (ref->ndim + 1 > SJ_MAX_RANK)
        return sj_err(err, "rank above %d is not supported", SJ_MAX_RANK);
    if (sj_get_dim(b, "dim", 0, LIB_NUMPY, ref->ndim + 1, &d, err))
        return -1;
    for (int i = 1; i < n; i++) {
        if (ts[i]->ndim != ref->ndim)
            return sj_err(err, "stack expects each tensor to be equal size");
        for (int k = 0; k < ref->ndim; k++) {
            int eq = sj_dims_equal(ts[i], k, ref, k, err);
            if (eq < 0)
                return -1;
            if (!eq)
                return sj_err(err, "stack expects each tensor to be equal size");
        }
    }
    sj_meta(out, lib, dt);
    out->ndim = (unsigned char)(ref->ndim + 1);
    for (int i = 0, k = 0; i < out->ndim; i++) {
        if (i == d) {
            out->size[i] = n;
            out->sym[i] = NULL;
        } else {
            sj_copy_dim(out, i, ref, k++);
        }
    }
    out->requires_grad = (unsigned char)sj_requires_grad(b);
    *nout = 1;
    return 0;
}

/* gather(input, dim, index): the index's shape, the input's dtype; index is int64 and of
 * the input's rank, and no larger than the input off the gathered dim. */
int rule_gather(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    int d;
    const TensorMeta *x = sj_input_dim(b, lib, "dim", 0, NULL, &d, err);
    const TensorMeta *ix = x ? sj_tensor(b, "index", err) : NULL;
    if (!ix)
        return -1;
    if (ix->dtype != DT_I64 && ix->dtype != DT_I32)
        return sj_err(err, "gather(): Expected dtype int32/int64 for index");
    if (ix->ndim != x->ndim && !(x->ndim == 0 && ix->ndim <= 1))
        return sj_err(err, "Index tensor must have the same number of dimensions as input tensor");
    for (int i = 0; i < ix->ndim && i < x->ndim; i++) {
        if (i == d)
            continue;
        int ok = ix->size[i] <= x->size[i];
        if (sj_symctx && (ix->sym[i] || x->sym[i])) {
            SymNode *a = sj_dimsym(ix, i, err), *c = a ? sj_dimsym(x, i, err) : NULL;
            if (!c || sj_decide(sym_le(sj_symctx->env, a, c), &ok, err) < 0)
                return -1;
        }
        if (!ok)
            return sj_err(err, "Size does not match at dimension %d", i);
    }
    like(x, out);
    sj_copy_shape(out, ix);   /* the output has the index's shape */
    *nout = 1;
    return 0;
}

/* diagonal(offset=0, dim1=0, dim2=1): both dims go, the diagonal's length is appended. */
int rule_diagonal(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    if (x->ndim < 2)
        return sj_err(err, "diagonal requires an array of at least two dimensions");
    int64_t off, a0, b0;
    int d1, d2;
    if (sj_get_int(b, "offset", 0, &off, err) || sj_get_int(b, "dim1", 0, &a0, err) ||
        sj_get_int(b, "dim2", 1, &b0, err) || sj_dim(lib, a0, x->ndim, &d1, err) || sj_dim(lib, b0, x->ndim, &d2, err))
        return -1;
    if (d1 == d2)
        return sj_err(err, "diagonal dimensions cannot be identical %lld, %lld", (long long)a0, (long long)b0);
    int64_t s1 = x->size[d1], s2 = x->size[d2], len;
    if (off >= 0)
        len = s1 < s2 - off ? s1 : s2 - off;
    else
        len = s1 + off < s2 ? s1 + off : s2;
    if (len < 0)
        len = 0;
    like(x, out);
    int k = 0;
    for (int i = 0; i < x->ndim; i++)
        if (i != d1 && i != d2)
            out->size[k++] = x->size[i];
    out->size[k++] = len;
    out->ndim = (unsigned char)k;
    *nout = 1;
    return 0;
}

/* numpy.vstack / hstack(arrays): vstack makes each array at least 2-d ((n,) -> (1, n)) and
 * joins along dim 0; hstack makes them at least 1-d and joins along dim 1 (dim 0 for 1-d
 * arrays). The other dims must match; dtypes promote. */
static int join_arrays(Lib lib, const BoundArgs *b, int vertical, TensorMeta *out, int *nout, ShapeErr *err)
{
    const char *name = vertical ? "vstack" : "hstack";
    const BoundArg *t = ba_get(b, "tensors");
    if (!t || t->kind != BA_LIST || t->n == 0)
        return sj_err(err, "%s needs a non-empty sequence of arrays", name);
    TensorMeta acc;
    memset(&acc, 0, sizeof acc);
    DType dt = DT_BOOL;
    int axis = 0;
    for (int i = 0; i < t->n; i++) {
        const BoundArg *a = &t->items[i];
        if (a->kind != BA_TENSOR)
            return sj_err(err, "%s of a non-array item is not supported", name);
        TensorMeta m = *a->meta;
        if (m.ndim == 0) {
            m.ndim = 1;
            m.size[0] = 1;
        }
        if (vertical && m.ndim == 1) {
            m.ndim = 2;
            m.size[1] = m.size[0];
            m.size[0] = 1;
        }
        if (i == 0) {
            acc = m;
            dt = (DType)m.dtype;
            axis = (vertical || m.ndim == 1) ? 0 : 1;
            continue;
        }
        if (m.ndim != acc.ndim)
            return sj_err(err, "all the input arrays must have same number of dimensions");
        for (int d = 0; d < m.ndim; d++)
            if (d != axis && m.size[d] != acc.size[d])
                return sj_err(err,
                              "all the input array dimensions except for the concatenation axis must match exactly");
        acc.size[axis] += m.size[axis];
        if (promote_pair(lib, dt, (DType)m.dtype, &dt, err))
            return -1;
    }
    *out = acc;
    out->dtype = (unsigned char)dt;
    out->np_scalar = 0;
    *nout = 1;
    return 0;
}

int rule_vstack(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    return join_arrays(lib, b, 1, out, nout, err);
}

int rule_hstack(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    return join_arrays(lib, b, 0, out, nout, err);
}

/* t.numpy(): the same memory seen as a numpy array of t's dtype and shape. Eager raises
 * for bfloat16 (numpy has no such type), and for a tensor that requires grad while grad
 * mode is on (the caller refuses that: rules do not see the mode); complex tensors are
 * refused because a graph value does not record torch's conjugate and negative bits, with
 * which numpy() raises too (the interpreter then runs the call and raises or answers). */
int rule_to_numpy(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    (void)lib;
    /* np.asarray(t) is recorded as this op with numpy.asarray's parameters (its "data") */
    const TensorMeta *x = sj_tensor(b, ba_get(b, "data") ? "data" : "input", err);
    if (!x)
        return -1;
    if (x->lib != LIB_TORCH || x->symint)
        return sj_err(err, "numpy() needs a torch tensor");
    if (x->dtype == DT_BF16)
        return sj_err(err, "numpy has no bfloat16");
    if (dtype_info[x->dtype].category == CAT_COMPLEX)
        return sj_err(err, "numpy() of a complex tensor (its conjugate bit is not modelled)");
    *out = *x;
    out->lib = LIB_NUMPY;
    out->np_scalar = 0;
    out->requires_grad = 0;
    *nout = 1;
    return 0;
}

/* torch.from_numpy(a): the same memory seen as a torch tensor. Eager raises for numpy
 * scalars (not arrays) and for dtypes torch has no tensors of. */
int rule_from_numpy(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    (void)lib;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    if (x->lib != LIB_NUMPY || x->symint)
        return sj_err(err, "from_numpy() needs a numpy array");
    if (x->np_scalar)
        return sj_err(err, "from_numpy() of a numpy scalar raises (it takes arrays)");
    if (!dtype_in_torch((DType)x->dtype))
        return sj_err(err, "torch has no tensors of numpy's %s", dtype_info[x->dtype].name);
    *out = *x;
    out->lib = LIB_TORCH;
    out->requires_grad = 0;
    *nout = 1;
    return 0;
}
