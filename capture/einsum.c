/* torch.einsum of two tensors as a matmul: each operand permuted to (batch, free,
 * contracted) / (batch, contracted, free) labels, its free and contracted groups
 * flattened (or a size-1 dim added for an empty group), one torch.matmul over the batch
 * dims, then the result reshaped to the free labels and permuted to the output's order.
 * The graph then holds views and a matmul the backend runs as a oneDNN step, where an
 * einsum node would run eagerly (XLNet's 18 einsums a call: 27 us each; a matmul of those
 * shapes is a few). torch's own einsum computes the same contraction through bmm.
 *
 * One operand whose output is a permutation of its labels is a permute. Equations
 * decomposed: two operands, letters only (no "..."), no label twice in one
 * operand or in the output, every label of the output in an operand, and every label of
 * one operand only in the output (a label summed away inside one operand is left to
 * einsum). Sizes of the labels both operands share must be equal (batch labels may be
 * 1 on one side: matmul broadcasts them as einsum does). Anything else, and numpy's
 * einsum, is recorded as the einsum node it is.
 *
 * Memory: everything lives in the capture's arena or is a constant it keeps. */
#include <string.h>

#include "capture.h"
#include "../core/errors.h"
#include "../vocab/libs.h"

#define EIN_MAX 12   /* labels of one operand */

typedef struct {
    char labels[EIN_MAX];
    int n;
} Sub;

static int parse_sub(const char *s, const char *end, Sub *out)
{
    out->n = 0;
    for (; s < end; s++) {
        if (*s == ' ')
            continue;
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z')) || out->n == EIN_MAX ||
            memchr(out->labels, *s, (size_t)out->n))
            return -1;
        out->labels[out->n++] = *s;
    }
    return 0;
}

static int pos_of(const Sub *s, char l)
{
    const char *p = memchr(s->labels, l, (size_t)s->n);
    return p ? (int)(p - s->labels) : -1;
}

/* A size of dim d of tensor var t: a constant, or its symbol. */
static Var *dim_size(Capture *c, Var *t, int d)
{
    const TensorMeta *m = &t->u.t.meta;
    if (m->sym[d])
        return symb_var(c, m->sym[d]);
    return var_const_steal(c, PyLong_FromLongLong(m->size[d]));
}

static int same_size(const TensorMeta *a, int da, const TensorMeta *b, int db)
{
    if (a->sym[da] || b->sym[db])
        return a->sym[da] == b->sym[db];
    return a->size[da] == b->size[db];
}

static Var *int_tuple(Capture *c, const int *v, int n)
{
    PyObject *t = PyTuple_New(n);
    for (int i = 0; t && i < n; i++) {
        PyObject *x = PyLong_FromLong(v[i]);
        if (!x) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, x);
    }
    return t ? var_const_steal(c, t) : NULL;
}

static Var *permute(Capture *c, Var *t, const int *order, int n)
{
    int ident = 1;
    for (int i = 0; i < n; i++)
        ident &= order[i] == i;
    if (ident)
        return t;
    Var *dims = int_tuple(c, order, n);
    Var *a[2] = {t, dims};
    return dims ? op_record_path(c, "torch.permute", a, 2) : NULL;
}

/* Dims [start, start + k) of t as one dim: flattened (k > 1), added (k == 0), or t. */
static Var *group(Capture *c, Var *t, int start, int k)
{
    if (k == 1)
        return t;
    if (k == 0) {
        Var *a[2] = {t, var_const_steal(c, PyLong_FromLong(start))};
        return a[1] ? op_record_path(c, "torch.unsqueeze", a, 2) : NULL;
    }
    Var *a[3] = {t, var_const_steal(c, PyLong_FromLong(start)), var_const_steal(c, PyLong_FromLong(start + k - 1))};
    return a[1] && a[2] ? op_record_path(c, "torch.flatten", a, 3) : NULL;
}

/* The output labels of torch.einsum(eq) over operands of the sizes of ma and mb, in the
 * order eager lays them out in memory (outermost first; size-1 dims left out, their
 * strides never matter): run on meta tensors, whose strides follow the same code (the
 * result's layout depends on the equation and the sizes, not the operands' strides).
 * Returns the count written to order, or -1 (an error cleared: not decomposed). */
static int eager_order(const char *eq, const TensorMeta *ma, const TensorMeta *mb, const Sub *so, char *order)
{
    static PyObject *empty, *einsum, *kw;   /* strong, never released */
    if (!empty && !(empty = libs_get_path(libs.torch, "empty")))
        goto fail;
    if (!einsum && !(einsum = libs_get_path(libs.torch, "einsum")))
        goto fail;
    if (!kw && !(kw = Py_BuildValue("{s:s}", "device", "meta")))
        goto fail;
    PyObject *ops[2] = {NULL, NULL}, *r = NULL;
    const TensorMeta *ms[2] = {ma, mb};
    for (int i = 0; i < 2; i++) {
        PyObject *sizes = PyTuple_New(ms[i]->ndim);
        for (int d = 0; sizes && d < ms[i]->ndim; d++)
            PyTuple_SET_ITEM(sizes, d, PyLong_FromLongLong(ms[i]->size[d]));
        ops[i] = sizes ? PyObject_Call(empty, sizes, kw) : NULL;
        Py_XDECREF(sizes);
    }
    if (ops[0] && ops[1])
        r = PyObject_CallFunction(einsum, "sOO", eq, ops[0], ops[1]);
    Py_XDECREF(ops[0]);
    Py_XDECREF(ops[1]);
    PyObject *st = r ? PyObject_CallMethod(r, "stride", NULL) : NULL;
    PyObject *sz = r ? PyObject_GetAttrString(r, "shape") : NULL;
    Py_XDECREF(r);
    if (!st || !sz || !PyTuple_Check(st) || PySequence_Size(sz) != so->n || PyTuple_GET_SIZE(st) != so->n) {
        Py_XDECREF(st);
        Py_XDECREF(sz);
        goto fail;
    }
    int64_t stride[EIN_MAX], size[EIN_MAX];
    int n = 0, idx[EIN_MAX];
    for (int d = 0; d < so->n; d++) {
        PyObject *x = PySequence_GetItem(sz, d);
        size[d] = x ? PyLong_AsLongLong(x) : -1;
        Py_XDECREF(x);
        stride[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(st, d));
        if (size[d] > 1)
            idx[n++] = d;
    }
    Py_DECREF(st);
    Py_DECREF(sz);
    if (PyErr_Occurred())
        goto fail;
    for (int i = 1; i < n; i++)   /* by stride, largest first (stable) */
        for (int j = i; j > 0 && stride[idx[j]] > stride[idx[j - 1]]; j--) {
            int t = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = t;
        }
    for (int i = 0; i < n; i++)
        order[i] = so->labels[idx[i]];
    return n;
fail:
    sj_err_clear();
    return -1;
}

/* Reorders the labels of g (n of them) to their order in mem (m labels), those not in mem
 * last, in their order. */
static void follow(char *g, int n, const char *mem, int m)
{
    char out[EIN_MAX];
    int k = 0;
    for (int i = 0; i < m; i++)
        if (memchr(g, mem[i], (size_t)n))
            out[k++] = mem[i];
    for (int i = 0; i < n; i++)
        if (!memchr(mem, g[i], (size_t)m))
            out[k++] = g[i];
    memcpy(g, out, (size_t)n);
}

/* The position in mem (m labels) of the first label of g that is there, or m. */
static int first_in(const char *g, int n, const char *mem, int m)
{
    int best = m;
    for (int i = 0; i < n; i++) {
        const char *p = memchr(mem, g[i], (size_t)m);
        if (p && (int)(p - mem) < best)
            best = (int)(p - mem);
    }
    return best;
}

/* The position in mem of the last label of g that is there, or -1. */
static int last_in(const char *g, int n, const char *mem, int m)
{
    int best = -1;
    for (int i = 0; i < n; i++) {
        const char *p = memchr(mem, g[i], (size_t)m);
        if (p && (int)(p - mem) > best)
            best = (int)(p - mem);
    }
    return best;
}

Var *einsum_as_matmul(Capture *c, Var **args, int32_t nargs, PyObject *kwnames, int *handled)
{
    *handled = 0;
    if (kwnames || nargs < 2 || !var_is_const(args[0]) || !PyUnicode_Check(args[0]->obj))
        return NULL;
    const char *eq1 = PyUnicode_AsUTF8(args[0]->obj);
    Var *one = nargs == 2 && args[1]->kind == VK_TENSOR ? args[1]
               : nargs == 2 && (args[1]->kind == VK_LIST || args[1]->kind == VK_TUPLE) && args[1]->u.seq.n == 1
                   ? args[1]->u.seq.items[0]
                   : NULL;
    if (one && eq1 && one->kind == VK_TENSOR && one->u.t.meta.lib == LIB_TORCH) {
        /* one operand whose output is a permutation of its labels: a permute */
        const char *arrow1 = strstr(eq1, "->");
        Sub s1, o1;
        if (!arrow1 || strchr(eq1, ',') || parse_sub(eq1, arrow1, &s1) ||
            parse_sub(arrow1 + 2, eq1 + strlen(eq1), &o1) || s1.n != o1.n || s1.n != one->u.t.meta.ndim)
            return NULL;
        int order[EIN_MAX];
        for (int i = 0; i < o1.n; i++)
            if ((order[i] = pos_of(&s1, o1.labels[i])) < 0)
                return NULL;
        *handled = 1;
        return permute(c, one, order, o1.n);
    }
    Var *ops[2];
    if (nargs == 3) {
        ops[0] = args[1];
        ops[1] = args[2];
    } else if (nargs == 2 && (args[1]->kind == VK_LIST || args[1]->kind == VK_TUPLE) && args[1]->u.seq.n == 2) {
        ops[0] = args[1]->u.seq.items[0];
        ops[1] = args[1]->u.seq.items[1];
    } else {
        return NULL;
    }
    for (int i = 0; i < 2; i++) {
        const TensorMeta *m = ops[i]->kind == VK_TENSOR ? &ops[i]->u.t.meta : NULL;
        if (!m || m->lib != LIB_TORCH || m->dtype != DT_F32)
            return NULL;
    }
    const char *eq = PyUnicode_AsUTF8(args[0]->obj);
    const char *comma = eq ? strchr(eq, ',') : NULL, *arrow = eq ? strstr(eq, "->") : NULL;
    if (!eq || !comma || !arrow || arrow < comma || strchr(comma + 1, ',') || strchr(arrow + 2, '-'))
        return NULL;
    Sub sa, sb, so;
    if (parse_sub(eq, comma, &sa) || parse_sub(comma + 1, arrow, &sb) || parse_sub(arrow + 2, eq + strlen(eq), &so))
        return NULL;
    const TensorMeta *ma = &ops[0]->u.t.meta, *mb = &ops[1]->u.t.meta;
    if (sa.n != ma->ndim || sb.n != mb->ndim || ma->ndim > EIN_MAX || mb->ndim > EIN_MAX)
        return NULL;
    /* classify: batch (both, output), contracted (both, not output), free (one, output) */
    char batch[EIN_MAX], contr[EIN_MAX], fa[EIN_MAX], fb[EIN_MAX];
    int nbat = 0, ncon = 0, nfa = 0, nfb = 0;
    for (int i = 0; i < so.n; i++)
        if (pos_of(&sa, so.labels[i]) < 0 && pos_of(&sb, so.labels[i]) < 0)
            return NULL;
    for (int i = 0; i < sa.n; i++) {
        char l = sa.labels[i];
        int pb = pos_of(&sb, l), po = pos_of(&so, l);
        if (pb >= 0 && po >= 0) {
            int pa = i;
            if (!same_size(ma, pa, mb, pb) && !(ma->size[pa] == 1 && !ma->sym[pa]) &&
                !(mb->size[pb] == 1 && !mb->sym[pb]))
                return NULL;
            batch[nbat++] = l;
        } else if (pb >= 0) {
            if (!same_size(ma, i, mb, pb))
                return NULL;   /* a broadcast contracted label: einsum's */
            contr[ncon++] = l;
        } else if (po >= 0) {
            fa[nfa++] = l;
        } else {
            return NULL;   /* summed inside a alone */
        }
    }
    for (int i = 0; i < sb.n; i++) {
        char l = sb.labels[i];
        if (pos_of(&sa, l) >= 0)
            continue;
        if (pos_of(&so, l) < 0)
            return NULL;
        fb[nfb++] = l;
    }
    if (nbat + 2 > 4)
        return NULL;   /* more batch dims than the matmul step keeps */
    /* the result laid out as eager's: batch labels outermost, then one operand's free
     * labels, then the other's (the operands swapped when eager has b's first), each
     * group in eager's order; any other layout is left to the einsum node */
    char mem[EIN_MAX];
    int nm = eager_order(eq, ma, mb, &so, mem);
    if (nm < 0 || last_in(batch, nbat, mem, nm) > first_in(fa, nfa, mem, nm) ||
        last_in(batch, nbat, mem, nm) > first_in(fb, nfb, mem, nm))
        return NULL;
    int swap = first_in(fb, nfb, mem, nm) < first_in(fa, nfa, mem, nm);
    if (swap ? last_in(fb, nfb, mem, nm) > first_in(fa, nfa, mem, nm)
             : last_in(fa, nfa, mem, nm) > first_in(fb, nfb, mem, nm))
        return NULL;
    follow(batch, nbat, mem, nm);
    follow(fa, nfa, mem, nm);
    follow(fb, nfb, mem, nm);
    if (swap) {   /* b's free labels first: the product of b and a */
        Var *t = ops[0];
        ops[0] = ops[1];
        ops[1] = t;
        Sub ts = sa;
        sa = sb;
        sb = ts;
        const TensorMeta *tm = ma;
        ma = mb;
        mb = tm;
        char tf[EIN_MAX];
        int tn = nfa;
        memcpy(tf, fa, (size_t)nfa);
        memcpy(fa, fb, (size_t)nfb);
        nfa = nfb;
        memcpy(fb, tf, (size_t)tn);
        nfb = tn;
    }
    /* a: (batch, free a, contracted); b: (batch, contracted, free b) */
    int oa[EIN_MAX], ob[EIN_MAX], k = 0;
    for (int i = 0; i < nbat; i++)
        oa[k++] = pos_of(&sa, batch[i]);
    for (int i = 0; i < nfa; i++)
        oa[k++] = pos_of(&sa, fa[i]);
    for (int i = 0; i < ncon; i++)
        oa[k++] = pos_of(&sa, contr[i]);
    k = 0;
    for (int i = 0; i < nbat; i++)
        ob[k++] = pos_of(&sb, batch[i]);
    for (int i = 0; i < ncon; i++)
        ob[k++] = pos_of(&sb, contr[i]);
    for (int i = 0; i < nfb; i++)
        ob[k++] = pos_of(&sb, fb[i]);
    *handled = 1;
    Var *a = permute(c, ops[0], oa, sa.n);
    a = a ? group(c, a, nbat, nfa) : NULL;
    a = a ? group(c, a, nbat + 1, ncon) : NULL;
    Var *b = permute(c, ops[1], ob, sb.n);
    b = b ? group(c, b, nbat, ncon) : NULL;
    b = b ? group(c, b, nbat + 1, nfb) : NULL;
    if (!a || !b)
        return NULL;
    Var *mm[2] = {a, b};
    Var *r = op_record_path(c, "torch.matmul", mm, 2);   /* (batch, M, N) */
    if (!r)
        return NULL;
    /* (batch, free a..., free b...): sizes from the operands, batch ones from the result
     * (a broadcast batch label takes the larger size) */
    if (nfa != 1 || nfb != 1) {
        int nd = nbat + nfa + nfb;
        Var **sizes = cap_alloc(c, sizeof(Var *) * (size_t)(nd + 1));
        if (!sizes)
            return NULL;
        for (int i = 0; i < nbat; i++)
            sizes[i] = dim_size(c, r, i);
        for (int i = 0; i < nfa; i++)
            sizes[nbat + i] = dim_size(c, ops[0], pos_of(&sa, fa[i]));
        for (int i = 0; i < nfb; i++)
            sizes[nbat + nfa + i] = dim_size(c, ops[1], pos_of(&sb, fb[i]));
        for (int i = 0; i < nd; i++)
            if (!sizes[i])
                return NULL;
        Var *shape = var_seq(c, VK_TUPLE, sizes, nd);
        Var *ra[2] = {r, shape};
        if (!shape || !(r = op_record_path(c, "torch.reshape", ra, 2)))
            return NULL;
    }
    /* to the output's order */
    char have[EIN_MAX];
    int nh = 0, order[EIN_MAX];
    memcpy(have, batch, (size_t)nbat);
    nh = nbat;
    memcpy(have + nh, fa, (size_t)nfa);
    nh += nfa;
    memcpy(have + nh, fb, (size_t)nfb);
    nh += nfb;
    for (int i = 0; i < so.n; i++) {
        const char *p = memchr(have, so.labels[i], (size_t)nh);
        order[i] = (int)(p - have);
    }
    return permute(c, r, order, so.n);
}
