/* Rules of the ops added for calls seen in transformers models (the last section of
 * vocab/callables.def; tools/torch_call_coverage.py lists the calls): index_select,
 * index_add, repeat_interleave, one_hot, glu, reshape_as. None handles symbolic sizes:
 * capture specialises their arguments first. */
#include <string.h>

#include "rules.h"
#include "rules_util.h"
#include "sym.h"
#include "../core/errors.h"

/* The index of index_select and index_add (what names the op): an int32 or int64 vector
 * or scalar. */
static int index_vector(const TensorMeta *ix, const char *what, ShapeErr *err)
{
    if (ix->dtype != DT_I64 && ix->dtype != DT_I32)
        return sj_err(err, "%s(): Expected dtype int32 or int64 for index", what);
    if (ix->ndim > 1)
        return sj_err(err, "%s(): Index is supposed to be a vector", what);
    return 0;
}

/* index_select(input, dim, index): dim takes the index's length; the index is int32/int64
 * and at most 1-d. */
int rule_index_select(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    int d;
    const TensorMeta *x = sj_input_dim(b, lib, "dim", 0, NULL, &d, err);
    const TensorMeta *ix = x ? sj_tensor(b, "index", err) : NULL;
    if (!ix)
        return -1;
    if (index_vector(ix, "index_select", err))
        return -1;
    *out = *x;
    out->requires_grad = (unsigned char)sj_requires_grad(b);
    if (x->ndim == 0) {
        if (sj_numel(ix) != 1)
            return sj_err(err, "index_select(): Index to scalar can have only 1 value");
    } else {
        out->size[d] = sj_numel(ix);
    }
    *nout = 1;
    return 0;
}

/* index_add(input, dim, index, source, alpha=1): the input's shape and dtype. The source
 * has the input's dtype and rank, the index's length on dim, the input's sizes elsewhere. */
int rule_index_add(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    int d;
    const TensorMeta *x = sj_input_dim(b, lib, "dim", 0, NULL, &d, err);
    const TensorMeta *ix = x ? sj_tensor(b, "index", err) : NULL;
    const TensorMeta *src = ix ? sj_tensor(b, "source", err) : NULL;
    if (!src)
        return -1;
    if (index_vector(ix, "index_add_", err))
        return -1;
    if (src->dtype != x->dtype)
        return sj_err(err, "index_add_(): self and source must have the same scalar type");
    if (x->ndim == 0 || src->ndim == 0) {
        if (x->ndim != src->ndim || sj_numel(ix) != 1)
            return sj_err(err, "index_add_(): a scalar source goes with a scalar self and one index");
    } else {
        if (src->ndim != x->ndim)
            return sj_err(err, "index_add_(): source and self must have the same number of dimensions");
        if (src->size[d] != sj_numel(ix))
            return sj_err(err, "index_add_(): Number of indices should be equal to source.size(dim)");
        for (int i = 0; i < x->ndim; i++)
            if (i != d && src->size[i] != x->size[i])
                return sj_err(err, "index_add_(): source and self differ at dimension %d", i);
    }
    *out = *x;
    out->requires_grad = (unsigned char)sj_requires_grad(b);
    *nout = 1;
    return 0;
}

/* repeat_interleave(input, repeats: int, dim=None): each element repeated `repeats` times
 * along dim (the flattened input without one). A tensor of repeats sizes the output by its
 * values: refused (data-dependent), as is the one-argument form. */
int rule_repeat_interleave(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    const BoundArg *r = ba_get(b, "repeats");
    if (!r)
        return sj_err(err, "repeat_interleave(input) sizes its output by the data: not supported");
    if (r->kind != BA_CONST)
        return sj_err(err, "repeat_interleave with a tensor of repeats sizes its output by the data: "
                           "not supported");
    int64_t n;
    if (sj_int(r, "repeats", &n, err))
        return -1;
    if (n < 0)
        return sj_err(err, "repeats can not be negative");
    *out = *x;
    out->requires_grad = (unsigned char)sj_requires_grad(b);
    const BoundArg *dim = ba_get(b, "dim");
    int d = 0;   /* the dim of out that grows */
    if (dim && x->ndim == 0)   /* eager wraps dim against the result's rank 1 and raises */
        return sj_err(err, "repeat_interleave: a dim for a 0-d input is out of range");
    /* the grown dim as an expression when the sizes are symbolic: the dim's size (or the
     * element count, without a dim) times n; the other dims keep theirs */
    SymEnv *env = sj_symctx ? sj_symctx->env : NULL;
    SymNode *grown = NULL;
    if (!dim) {
        grown = env ? sym_const(env, n) : NULL;
        for (int i = 0; grown && i < x->ndim; i++) {
            SymNode *s = sj_dimsym(x, i, err);
            if (!s)
                return -1;
            grown = sym_mul(env, grown, s);
        }
        out->ndim = 1;
        memset(out->sym, 0, sizeof out->sym);
        out->size[0] = sj_numel(x) * n;
    } else {
        int64_t d0;
        if (sj_int(dim, "dim", &d0, err) || sj_dim(lib, d0, x->ndim, &d, err))
            return -1;
        out->size[d] = x->size[d] * n;
        SymNode *s = env ? sj_dimsym(x, d, err) : NULL;
        if (env && !s)
            return -1;
        grown = s ? sym_mul(env, s, sym_const(env, n)) : NULL;
    }
    if (env && sj_set_dim(out, d, grown, err) < 0)   /* (a constant is stored static) */
        return -1;
    const BoundArg *os = ba_get(b, "output_size");
    int64_t want;
    if (os) {
        SymNode *wsym = NULL;
        if (env ? sj_int_sym(os, "output_size", &want, &wsym, err) : sj_int(os, "output_size", &want, err))
            return -1;
        int same = want == out->size[d];
        if (env && sj_decide(sym_eq(env, grown, wsym ? wsym : sym_const(env, want)), &same, err) < 0)
            return -1;
        if (!same)
            return sj_err(err, "repeat_interleave: output_size does not match");
    }
    *nout = 1;
    return 0;
}

/* one_hot(tensor, num_classes): int64, the input's shape and a last dim of num_classes.
 * The input is int64; num_classes=-1 (the default) sizes the output by the input's
 * maximum: refused (data-dependent). Values out of [0, num_classes) raise at run time, as
 * eager. */
int rule_one_hot(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    (void)lib;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    int64_t n;
    if (sj_get_int(b, "num_classes", -1, &n, err))
        return -1;
    if (x->dtype != DT_I64)
        return sj_err(err, "one_hot is only applicable to index tensor of type LongTensor.");
    if (n == -1)
        return sj_err(err, "one_hot without num_classes sizes its output by the data: not supported");
    if (n < -1)
        return sj_err(err, "num_classes should be positive");
    if (x->ndim >= SJ_MAX_RANK)
        return sj_err(err, "one_hot: rank too high");
    *out = *x;
    out->requires_grad = 0;
    out->size[x->ndim] = n;
    out->sym[x->ndim] = NULL;
    out->ndim = (unsigned char)(x->ndim + 1);
    *nout = 1;
    return 0;
}

/* glu(input, dim=-1): dim halves (it must be even); floating inputs only. */
int rule_glu(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    int d;
    const TensorMeta *x =
        sj_input_dim(b, lib, "dim", -1, "glu does not support scalars because halving size must be even", &d, err);
    if (!x)
        return -1;
    if (x->size[d] % 2)
        return sj_err(err, "Halving dimension must be even, but dimension %d is size %lld", d, (long long)x->size[d]);
    int cat = dtype_info[x->dtype].category;
    if (cat != CAT_FLOAT)
        return sj_err(err, "glu: a floating input is required");
    *out = *x;
    out->requires_grad = (unsigned char)sj_requires_grad(b);
    out->size[d] = x->size[d] / 2;
    *nout = 1;
    return 0;
}

/* histc(input, bins=100, min=0, max=0): a 1-d count of `bins` bins, in the input's
 * floating dtype (integer inputs raise on CPU). */
int rule_histc(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    (void)lib;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    int64_t bins;
    if (sj_get_int(b, "bins", 100, &bins, err))
        return -1;
    if (bins <= 0)
        return sj_err(err, "torch.histogram(): bins must be > 0, but got %lld", (long long)bins);
    if (dtype_info[x->dtype].category != CAT_FLOAT)
        return sj_err(err, "\"histogram_cpu\" is implemented for floating dtypes only");
    *out = *x;
    out->requires_grad = 0;
    out->ndim = 1;
    out->size[0] = bins;
    memset(out->sym, 0, sizeof out->sym);   /* (bins,) whatever the input's sizes */
    *nout = 1;
    return 0;
}

/* meshgrid(*tensors, indexing=None): n 0-d or 1-d tensors of one dtype give n tensors of
 * shape (len_0, ..., len_n-1) ('xy' swaps the first two). One list argument holds them. */
int rule_meshgrid(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    (void)lib;
    const BoundArg *t = ba_get(b, "tensors");
    if (t && t->kind == BA_LIST && t->n == 1 && t->items[0].kind == BA_LIST)
        t = &t->items[0];
    if (!t || t->kind != BA_LIST || t->n == 0)
        return sj_err(err, "meshgrid expects a non-empty TensorList");
    if (t->n > SJ_MAX_RANK || t->n > *nout)
        return sj_err(err, "meshgrid of more than %d tensors is not supported", SJ_MAX_RANK);
    int xy = 0;
    const BoundArg *ix = ba_get(b, "indexing");
    if (ix) {
        const char *s = ix->kind == BA_CONST && PyUnicode_Check(ix->value) ? PyUnicode_AsUTF8(ix->value) : NULL;
        if (!s) {
            sj_err_clear();
            return sj_err(err, "torch.meshgrid: indexing must be a string");
        }
        if (strcmp(s, "xy") == 0)
            xy = 1;
        else if (strcmp(s, "ij") != 0)
            return sj_err(err, "torch.meshgrid: indexing must be one of \"xy\" or \"ij\", but received: %.40s", s);
    }
    TensorMeta grid;
    memset(&grid, 0, sizeof grid);
    for (int i = 0; i < t->n; i++) {
        const BoundArg *a = &t->items[i];
        if (a->kind != BA_TENSOR)
            return sj_err(err, "meshgrid expects tensors");
        const TensorMeta *m = a->meta;
        if (m->ndim > 1)
            return sj_err(err, "torch.meshgrid: Expected 0D or 1D tensor in the tensor list but got a %dD tensor",
                          m->ndim);
        if (i == 0)
            grid = *m;
        else if (m->dtype != grid.dtype)
            return sj_err(err, "meshgrid expects all tensors to have the same dtype");
        grid.size[i] = m->ndim ? m->size[0] : 1;
        grid.sym[i] = NULL;
    }
    grid.ndim = (unsigned char)t->n;
    grid.requires_grad = (unsigned char)sj_requires_grad(b);
    if (xy && t->n >= 2) {
        int64_t s0 = grid.size[0];
        grid.size[0] = grid.size[1];
        grid.size[1] = s0;
    }
    for (int i = 0; i < t->n; i++)
        out[i] = grid;
    *nout = t->n;
    return 0;
}
