/* Linear algebra: matmul/mm/bmm/dot, linear, addmm/baddbmm, outer, einsum. */
#include <string.h>

#include "promote.h"
#include "rules.h"
#include "rules_util.h"
#include "sym.h"
#include "../core/errors.h"

/* torch's matrix products do not promote: both operands must share a dtype. numpy
 * promotes. Also refuses bool in torch (no bool BLAS kernels). */
static int product_dtype(Lib lib, const TensorMeta *a, const TensorMeta *b, DType *out, ShapeErr *err)
{
    if (lib == LIB_TORCH) {
        if (a->dtype != b->dtype)
            return sj_err(err,
                          "expected both operands to have the same dtype, but got %s "
                          "and %s",
                          dtype_info[a->dtype].name, dtype_info[b->dtype].name);
        if (a->dtype == DT_BOOL)
            return sj_err(err, "matrix products are not implemented for bool");
        *out = (DType)a->dtype;
        return 0;
    }
    return promote_pair(lib, (DType)a->dtype, (DType)b->dtype, out, err);
}

static int mismatch(ShapeErr *err, int64_t k1, int64_t k2)
{
    return sj_err(err, "size mismatch in matrix product: %lld vs %lld", (long long)k1, (long long)k2);
}

/* The general matmul: 1-d operands are promoted to matrices and the added dim removed,
 * batch dims broadcast. */
static int matmul_shape(const TensorMeta *a, const TensorMeta *b, TensorMeta *out, ShapeErr *err)
{
    if (a->ndim == 0 || b->ndim == 0)
        return sj_err(err, "both arguments to matmul need to be at least 1D");
    int64_t k1 = a->size[a->ndim - 1];
    int jb = b->ndim == 1 ? 0 : b->ndim - 2;
    int eq = sj_dims_equal(a, a->ndim - 1, b, jb, err);
    if (eq < 0)
        return -1;
    if (!eq)
        return mismatch(err, k1, b->size[jb]);
    TensorMeta ba = *a, bb = *b;
    /* batch parts */
    ba.ndim = a->ndim >= 2 ? (unsigned char)(a->ndim - 2) : 0;
    bb.ndim = b->ndim >= 2 ? (unsigned char)(b->ndim - 2) : 0;
    const TensorMeta *ms[2] = {&ba, &bb};
    if (sj_broadcast(ms, 2, out, err))
        return -1;
    int nd = out->ndim;
    if (nd + (a->ndim >= 2) + (b->ndim >= 2) > SJ_MAX_RANK)
        return sj_err(err, "rank above %d is not supported", SJ_MAX_RANK);
    if (a->ndim >= 2)
        sj_copy_dim(out, nd++, a, a->ndim - 2);
    if (b->ndim >= 2)
        sj_copy_dim(out, nd++, b, b->ndim - 1);
    if (nd > SJ_MAX_RANK)
        return sj_err(err, "rank above %d is not supported", SJ_MAX_RANK);
    out->ndim = (unsigned char)nd;
    return 0;
}

/* numpy.dot: sum over the last dim of a and the second-to-last of b, no broadcasting. */
static int np_dot_shape(const TensorMeta *a, const TensorMeta *b, TensorMeta *out, ShapeErr *err)
{
    if (a->ndim == 0 || b->ndim == 0) {
        const TensorMeta *ms[2] = {a->ndim ? a : NULL, b->ndim ? b : NULL};
        return sj_broadcast(ms, 2, out, err);
    }
    int64_t k1 = a->size[a->ndim - 1];
    int64_t k2 = b->ndim == 1 ? b->size[0] : b->size[b->ndim - 2];
    int eq = sj_dims_equal(a, a->ndim - 1, b, b->ndim == 1 ? 0 : b->ndim - 2, err);
    if (eq < 0)
        return -1;
    if (!eq)
        return sj_err(err, "shapes not aligned: %lld (dim %d) != %lld", (long long)k1, a->ndim - 1, (long long)k2);
    int nd = 0;
    for (int i = 0; i + 1 < a->ndim; i++)
        sj_copy_dim(out, nd++, a, i);
    for (int i = 0; i + 2 < b->ndim; i++)
        sj_copy_dim(out, nd++, b, i);
    if (b->ndim >= 2)
        sj_copy_dim(out, nd++, b, b->ndim - 1);
    out->ndim = (unsigned char)nd;
    return 0;
}

int rule_matmul(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    const TensorMeta *x, *y;
    if (sj_tensor2(b, "input", &x, "other", &y, err))
        return -1;
    DType dt;
    if (lib == LIB_TORCH) {
        int want = op == OP_MM ? 2 : op == OP_BMM ? 3 : op == OP_DOT || op == OP_VDOT ? 1 : 0;
        if (op == OP_MV && (x->ndim != 2 || y->ndim != 1))
            return sj_err(err, "mv: expected a 2-D and a 1-D tensor, got %d-D and %d-D", x->ndim, y->ndim);
        if (want && (x->ndim != want || y->ndim != want))
            return sj_err(err, "%s: expected %d-D tensors, got %d-D and %d-D", op_info[op].name, want, x->ndim,
                          y->ndim);
        if (op == OP_BMM) {
            int eq = sj_dims_equal(x, 0, y, 0, err);
            if (eq <= 0)
                return eq < 0 ? -1 : sj_err(err, "bmm: batch sizes differ");
        }
    }
    if (product_dtype(lib, x, y, &dt, err))
        return -1;
    sj_meta(out, lib, dt);
    if (lib == LIB_NUMPY && op == OP_DOT) {
        if (np_dot_shape(x, y, out, err))
            return -1;
    } else if (matmul_shape(x, y, out, err)) {
        return -1;
    }
    out->requires_grad = (unsigned char)sj_requires_grad(b);
    sj_np_scalarize(lib, out);
    *nout = 1;
    return 0;
}

int rule_linear(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *x, *w;
    if (sj_tensor2(b, "input", &x, "weight", &w, err))
        return -1;
    if (w->ndim != 1 && w->ndim != 2)
        return sj_err(err, "linear: weight must be 1-D or 2-D");
    if (x->ndim == 0)
        return sj_err(err, "linear: input must be at least 1-D");
    DType dt;
    if (product_dtype(lib, x, w, &dt, err))
        return -1;
    int64_t in = w->size[w->ndim - 1];
    int eq = sj_dims_equal(x, x->ndim - 1, w, w->ndim - 1, err);
    if (eq < 0)
        return -1;
    if (!eq)
        return mismatch(err, x->size[x->ndim - 1], in);
    sj_meta(out, lib, dt);
    sj_copy_shape(out, x);
    if (w->ndim == 2)
        sj_copy_dim(out, x->ndim - 1, w, 0);
    else
        out->ndim--;
    const BoundArg *bias = ba_get(b, "bias");
    if (bias && bias->kind == BA_TENSOR) {
        if (bias->meta->dtype != dt)
            return sj_err(err, "linear: bias dtype differs");
        const TensorMeta *ms[2] = {out, bias->meta};
        TensorMeta r = *out;
        if (sj_broadcast(ms, 2, &r, err))
            return -1;
        if (r.ndim != out->ndim || memcmp(r.size, out->size, sizeof(int64_t) * r.ndim))
            return sj_err(err, "linear: bias does not broadcast to the output");
    }
    out->requires_grad = (unsigned char)sj_requires_grad(b);
    *nout = 1;
    return 0;
}

int rule_addmm(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    const TensorMeta *c = sj_tensor(b, "input", err);
    const TensorMeta *m1 = c ? sj_tensor(b, "mat1", err) : NULL;
    const TensorMeta *m2 = m1 ? sj_tensor(b, "mat2", err) : NULL;
    if (!m2)
        return -1;
    int want = op == OP_BADDBMM ? 3 : 2;
    if (m1->ndim != want || m2->ndim != want)
        return sj_err(err, "%s: expected %d-D matrices", op_info[op].name, want);
    int same_batch = op == OP_BADDBMM ? sj_dims_equal(m1, 0, m2, 0, err) : 1;   /* guarded when symbolic */
    if (same_batch < 0)
        return -1;
    if (!same_batch)
        return sj_err(err, "baddbmm: batch sizes differ");
    DType dt;
    if (product_dtype(lib, m1, m2, &dt, err) || product_dtype(lib, c, m1, &dt, err))
        return -1;
    TensorMeta prod;
    sj_meta(&prod, lib, dt);
    if (matmul_shape(m1, m2, &prod, err))
        return -1;
    const TensorMeta *ms[2] = {c, &prod};
    TensorMeta r = prod;
    if (sj_broadcast(ms, 2, &r, err))
        return -1;
    if (r.ndim != prod.ndim || memcmp(r.size, prod.size, sizeof(int64_t) * r.ndim))
        return sj_err(err, "%s: input does not broadcast to the product", op_info[op].name);
    *out = prod;
    out->requires_grad = (unsigned char)sj_requires_grad(b);
    *nout = 1;
    return 0;
}

int rule_outer(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const BoundArg *ops[2] = {ba_get(b, "input"), ba_get(b, "other")};
    const TensorMeta *x, *y;
    if (sj_tensor2(b, "input", &x, "other", &y, err))
        return -1;
    if (lib == LIB_TORCH && (x->ndim != 1 || y->ndim != 1))
        return sj_err(err, "outer: expected 1-D tensors");
    DType dt;
    /* torch.outer multiplies (promotion like mul); numpy.outer too, on flattened inputs */
    if (promote_args(lib, ops, 2, 0, &dt, NULL, err))
        return -1;
    sj_meta(out, lib, dt);
    out->ndim = 2;
    out->size[0] = sj_numel(x);
    out->size[1] = sj_numel(y);
    out->requires_grad = (unsigned char)sj_requires_grad(b);
    *nout = 1;
    return 0;
}

/* einsum: "ij,jk->ik". Labels are letters; "..." stands for the dims an operand has beyond
 * its labels (broadcast together, right-aligned, across operands). An implicit output is
 * the broadcast dims followed by the labels used once, in ASCII order (A-Z before a-z). */
static int einsum_letter(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* Dim j of operand m joins a label's (or, label 0, a broadcast dim's) running size: the
 * first occurrence is taken as is (with its symbol), a later one must equal it or one of
 * them be 1 (on symbols: decided and guarded, as broadcasting does). 0, or -1 with err
 * set. */
static int einsum_join(int64_t *size, SymNode **sym, const TensorMeta *m, int j, char label, ShapeErr *err)
{
    SymNode *ms = sj_symctx ? m->sym[j] : NULL;
    if (*size == -1) {
        *size = m->size[j];
        *sym = ms;
        return 0;
    }
    if (!ms && !*sym) {
        if (*size == 1)
            *size = m->size[j];
        else if (m->size[j] != *size && m->size[j] != 1)
            return label ? sj_err(err, "einsum: size of label '%c' differs between operands", label)
                         : sj_err(err, "einsum: operands could not be broadcast together");
        return 0;
    }
    TensorMeta a, c, r;
    memset(&a, 0, sizeof a);
    memset(&c, 0, sizeof c);
    a.ndim = c.ndim = 1;
    a.size[0] = *size;
    a.sym[0] = *sym;
    c.size[0] = m->size[j];
    c.sym[0] = ms;
    const TensorMeta *ins[2] = {&a, &c};
    if (sj_broadcast(ins, 2, &r, err))
        return -1;
    *size = r.size[0];
    *sym = r.sym[0];
    return 0;
}

/* Output dim d of an einsum: a joined size (-1: a broadcast dim no operand reached, 1). */
static void einsum_out(TensorMeta *out, int d, int64_t size, SymNode *sym)
{
    out->size[d] = size < 0 ? 1 : size;
    out->sym[d] = size < 0 ? NULL : sym;
}

int rule_einsum(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const BoundArg *eq = ba_get(b, "equation");
    const BoundArg *ops = ba_get(b, "operands");
    if (!eq || eq->kind != BA_CONST || !PyUnicode_Check(eq->value))
        return sj_err(err, "einsum needs a constant equation string");
    if (!ops || ops->kind != BA_LIST)
        return sj_err(err, "einsum needs tensor operands");
    /* torch.einsum("..", [a, b]) passes the operands as one list */
    if (ops->n == 1 && ops->items[0].kind == BA_LIST)
        ops = &ops->items[0];
    const char *s = PyUnicode_AsUTF8(eq->value);
    if (!s) {
        sj_err_clear();
        return sj_err(err, "bad einsum equation");
    }
    int64_t label_size[128];
    SymNode *label_sym[128];
    int label_count[128];
    for (int i = 0; i < 128; i++) {
        label_size[i] = -1;
        label_sym[i] = NULL;
        label_count[i] = 0;
    }
    const char *arrow = strstr(s, "->");
    const char *in_end = arrow ? arrow : s + strlen(s);
    int64_t ell[SJ_MAX_RANK];   /* the broadcast "..." dims, right-aligned: ell[SJ_MAX_RANK - nell ..] */
    SymNode *ell_sym[SJ_MAX_RANK];
    int nell = 0;
    for (int i = 0; i < SJ_MAX_RANK; i++) {
        ell[i] = -1;
        ell_sym[i] = NULL;
    }
    int operand = 0;
    const BoundArg *promo[SJ_MAX_OUTS];
    for (const char *c = s; c <= in_end; operand++) {
        if (operand >= ops->n)
            return sj_err(err, "einsum: more operands in the equation than given");
        if (ops->items[operand].kind != BA_TENSOR)
            return sj_err(err, "einsum operands must be tensors");
        const TensorMeta *cur = ops->items[operand].meta;
        if (operand < SJ_MAX_OUTS)
            promo[operand] = &ops->items[operand];
        const char *term_end = c;
        while (term_end < in_end && *term_end != ',')
            term_end++;
        int nlabels = 0, has_ell = 0;
        for (const char *t = c; t < term_end; t++) {
            if (einsum_letter(*t)) {
                nlabels++;
            } else if (*t == '.' && t + 2 < term_end && t[1] == '.' && t[2] == '.' && !has_ell) {
                has_ell = 1;
                t += 2;
            } else if (*t != ' ') {
                return sj_err(err, "einsum: invalid subscript '%c'", *t);
            }
        }
        int ne = cur->ndim - nlabels;
        if (has_ell ? ne < 0 : ne != 0)
            return sj_err(err, "einsum: operand %d has %d dims but the equation gives %d", operand, cur->ndim, nlabels);
        int axis = 0;
        for (const char *t = c; t < term_end; t++) {
            if (*t == '.') {
                for (int j = 0; j < ne; j++) {
                    int pos = SJ_MAX_RANK - ne + j;
                    if (einsum_join(&ell[pos], &ell_sym[pos], cur, axis++, 0, err))
                        return -1;
                }
                if (ne > nell)
                    nell = ne;
                t += 2;
                continue;
            }
            if (*t == ' ')
                continue;
            if (einsum_join(&label_size[(int)*t], &label_sym[(int)*t], cur, axis++, *t, err))
                return -1;
            label_count[(int)*t]++;
        }
        c = term_end + 1;
    }
    if (operand != ops->n)
        return sj_err(err, "einsum: %d operands given, the equation has %d", ops->n, operand);
    DType dt;
    if (lib == LIB_TORCH) {
        for (int i = 1; i < ops->n; i++)
            if (ops->items[i].meta->dtype != ops->items[0].meta->dtype)
                return sj_err(err, "einsum(): operands do not all have the same dtype");
        dt = (DType)ops->items[0].meta->dtype;
    } else if (promote_args(lib, promo, ops->n < SJ_MAX_OUTS ? ops->n : SJ_MAX_OUTS, 0, &dt, NULL, err)) {
        return -1;
    }
    if (sj_dtype_or(b, "dtype", lib, &dt, err))
        return -1;
    sj_meta(out, lib, dt);
    int nd = 0;
    if (arrow) {
        unsigned long long seen = 0;
        int out_ell = 0;
        for (const char *c = arrow + 2; *c; c++) {
            if (*c == ' ')
                continue;
            if (*c == '.' && c[1] == '.' && c[2] == '.' && !out_ell) {
                out_ell = 1;
                if (nd + nell > SJ_MAX_RANK)
                    return sj_err(err, "rank above %d is not supported", SJ_MAX_RANK);
                for (int j = 0; j < nell; j++, nd++)
                    einsum_out(out, nd, ell[SJ_MAX_RANK - nell + j], ell_sym[SJ_MAX_RANK - nell + j]);
                c += 2;
                continue;
            }
            if (!einsum_letter(*c) || label_count[(int)*c] == 0)
                return sj_err(err,
                              "einsum: output subscript '%c' does not appear in the "
                              "inputs",
                              *c);
            int bit = *c >= 'a' ? *c - 'a' : 26 + *c - 'A';
            if (seen & (1ull << bit))
                return sj_err(err, "einsum: output subscript '%c' appears more than once", *c);
            seen |= 1ull << bit;
            if (nd >= SJ_MAX_RANK)
                return sj_err(err, "rank above %d is not supported", SJ_MAX_RANK);
            einsum_out(out, nd++, label_size[(int)*c], label_sym[(int)*c]);
        }
        /* torch sums broadcast dims the output leaves out; numpy refuses them */
        if (nell > 0 && !out_ell && lib == LIB_NUMPY)
            return sj_err(err, "output has more dimensions than subscripts given in einstein sum, "
                               "but no '...' ellipsis provided to broadcast the extra dimensions.");
    } else {
        for (int j = 0; j < nell; j++, nd++)
            einsum_out(out, nd, ell[SJ_MAX_RANK - nell + j], ell_sym[SJ_MAX_RANK - nell + j]);
        for (int c = 'A'; c <= 'z'; c++)
            if (label_count[c] == 1) {
                if (nd >= SJ_MAX_RANK)
                    return sj_err(err, "rank above %d is not supported", SJ_MAX_RANK);
                einsum_out(out, nd++, label_size[c], label_sym[c]);
            }
    }
    out->ndim = (unsigned char)nd;
    out->requires_grad = (unsigned char)sj_requires_grad(b);
    sj_np_scalarize(lib, out);
    *nout = 1;
    return 0;
}

/* numpy.inner(a, b): contracts the last dims: a.shape[:-1] + b.shape[:-1]; a 0-d operand
 * multiplies. */
int rule_inner(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *x, *y;
    if (sj_tensor2(b, "input", &x, "other", &y, err))
        return -1;
    DType dt;
    if (promote_pair(lib, (DType)x->dtype, (DType)y->dtype, &dt, err))
        return -1;
    sj_meta(out, lib, dt);
    if (x->ndim == 0 || y->ndim == 0) {
        const TensorMeta *t = x->ndim ? x : y;
        out->ndim = t->ndim;
        memcpy(out->size, t->size, sizeof(int64_t) * t->ndim);
    } else {
        if (x->size[x->ndim - 1] != y->size[y->ndim - 1])
            return sj_err(err, "shapes not aligned: last dimensions %lld and %lld differ",
                          (long long)x->size[x->ndim - 1], (long long)y->size[y->ndim - 1]);
        if (x->ndim + y->ndim - 2 > SJ_MAX_RANK)
            return sj_err(err, "rank above %d is not supported", SJ_MAX_RANK);
        int k = 0;
        for (int i = 0; i < x->ndim - 1; i++)
            out->size[k++] = x->size[i];
        for (int i = 0; i < y->ndim - 1; i++)
            out->size[k++] = y->size[i];
        out->ndim = (unsigned char)k;
    }
    sj_np_scalarize(lib, out);
    *nout = 1;
    return 0;
}

/* numpy.diag(v, k=0): a 1-d v becomes a square matrix with v on diagonal k; a 2-d v gives
 * its diagonal k. */
int rule_diag(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    int64_t k;
    if (sj_get_int(b, "k", 0, &k, err))
        return -1;
    *out = *x;
    out->np_scalar = 0;
    if (x->ndim == 1) {
        int64_t n = x->size[0] + (k < 0 ? -k : k);
        out->ndim = 2;
        out->size[0] = out->size[1] = n;
    } else if (x->ndim == 2) {
        int64_t s1 = x->size[0], s2 = x->size[1], len;
        len = k >= 0 ? (s1 < s2 - k ? s1 : s2 - k) : (s1 + k < s2 ? s1 + k : s2);
        out->ndim = 1;
        out->size[0] = len < 0 ? 0 : len;
    } else {
        return sj_err(err, "Input must be 1- or 2-d.");
    }
    (void)lib;
    *nout = 1;
    return 0;
}
