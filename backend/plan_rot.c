/* Rotated reads: the rotary embeddings' rotate_half,
 *
 *     cat((-x[..., h:], x[..., :h]), dim=-1)       (x's last dim 2h, static)
 *
 * computed inside a pointwise kernel as one element of x read at the last-dim index
 * j + h (negated) for j < h, else j - h, instead of two slicing steps, a negation kernel
 * and a concatenation step, each a separate allocation and call; and the interleaved form
 * (GPT-J, CodeGen, Cohere: rotate_every_two),
 *
 *     stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)
 *
 * as x read at j + 1 (negated) for even j, else j - 1. The slices and the
 * negation stay in the kernel's node list (so a kernel that hands its nodes back to eager
 * runs them all, in graph order); the emitter writes nothing for them and reads x at the
 * rotated offset for the cat (emit.c).
 *
 * Memory: nothing here holds a Python reference (the index constants are borrowed from the
 * graph's constants). */
#include <string.h>

#include "lower_int.h"

/* 1 when meta m is a tensor of a floating kernel dtype a rotated read serves. */
static int rot_meta_ok(const TensorMeta *m)
{
    return m->lib == LIB_TORCH && (m->dtype == DT_F32 || m->dtype == DT_F64) && !m->requires_grad && !m->symint &&
           !m->np_scalar && m->ndim >= 1 && m->ndim <= SJ_MAX_RANK;
}

/* The node that makes value v when it is a plain single-output node of op `op`, else -1. */
static int32_t maker(const Graph *g, int32_t v, OpId op)
{
    int32_t ni = g->values[v].node;
    const Node *nd = &g->nodes[ni];
    if (nd->op != op || nd->nout != 1 || (nd->flags & (NODE_INPLACE | NODE_OUT)))
        return -1;
    return ni;
}

/* Node ni is getitem(x, (..., slice(lo, hi, step))) (or the leading dims as full slices) of
 * a static last dim d: 0 and *x, [*lo, *hi) by *step (positive); 1 when not. */
static int last_dim_slice(const Graph *g, int32_t ni, int32_t *x, int64_t *lo, int64_t *hi, int64_t *stepp)
{
    const Arg *in = graph_node_arg(g, ni, "input"), *ix = graph_node_arg(g, ni, "index");
    if (!in || !ix || in->kind != ARG_VALUE || ix->kind != ARG_CONST)
        return 1;
    const TensorMeta *m = &g->values[in->a].meta;
    if (!rot_meta_ok(m) || m->sym[m->ndim - 1])
        return 1;
    PyObject *t = PyList_GET_ITEM(g->consts, ix->a);   /* borrowed */
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) < 2)
        return 1;
    Py_ssize_t n = PyTuple_GET_SIZE(t);
    PyObject *s = PyTuple_GET_ITEM(t, n - 1);   /* borrowed */
    if (!PySlice_Check(s))
        return 1;
    if (!(n == 2 && PyTuple_GET_ITEM(t, 0) == Py_Ellipsis)) {
        if (n != m->ndim)
            return 1;
        for (Py_ssize_t i = 0; i < n - 1; i++) {
            PySliceObject *f = (PySliceObject *)PyTuple_GET_ITEM(t, i);
            if (!PySlice_Check((PyObject *)f) || f->start != Py_None || f->stop != Py_None || f->step != Py_None)
                return 1;
        }
    }
    Py_ssize_t start, stop, step;
    if (PySlice_Unpack(s, &start, &stop, &step) < 0) {
        PyErr_Clear();
        return 1;
    }
    PySlice_AdjustIndices((Py_ssize_t)m->size[m->ndim - 1], &start, &stop, step);
    if (step < 1)
        return 1;
    *x = in->a;
    *lo = start;
    *hi = stop;
    *stepp = step;
    return 0;
}

/* Every parameter of node ni but those named a and b absent or None (out=, dtype=). */
static int only_params(const Graph *g, int32_t ni, const char *a, const char *b)
{
    const Node *nd = &g->nodes[ni];
    const SchemaParam *ps;
    int np = graph_node_params(g, ni, &ps);
    for (int i = 0; i < np; i++) {
        const Arg *x = &g->pool[nd->bound + i];
        if (x->kind != ARG_ABSENT && strcmp(ps[i].name, a) && strcmp(ps[i].name, b) &&
            !(x->kind == ARG_CONST && PyList_GET_ITEM(g->consts, x->a) == Py_None))
            return 0;
    }
    return 1;
}

/* The constant int of node ni's parameter `name` in *v (absent: dflt); 1 when not a
 * constant int. */
static int const_param(const Graph *g, int32_t ni, const char *name, int64_t dflt, int64_t *v)
{
    const Arg *a = graph_node_arg(g, ni, name);
    *v = dflt;
    if (!a || a->kind == ARG_ABSENT)
        return 0;
    return a->kind != ARG_CONST || lower_const_int(PyList_GET_ITEM(g->consts, a->a), v);
}

/* The list of two tensor values node ni reads as `tensors`: 0 and *a, *b; 1 when not. */
static int two_tensors(const Graph *g, int32_t ni, int32_t *a, int32_t *b)
{
    const Arg *list = graph_node_arg(g, ni, "tensors");
    if (!list || (list->kind != ARG_LIST && list->kind != ARG_TUPLE) || list->n != 2)
        return 1;
    const Arg *a0 = &g->pool[list->a], *a1 = &g->pool[list->a + 1];
    if (a0->kind != ARG_VALUE || a1->kind != ARG_VALUE)
        return 1;
    *a = a0->a;
    *b = a1->a;
    return 0;
}

/* Sorts parts[0..n) by graph order (node ids are graph order). */
static void sort_parts(int32_t *p, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && p[j - 1] > p[j]; j--) {
            int32_t t = p[j];
            p[j] = p[j - 1];
            p[j - 1] = t;
        }
}

int plan_rot_head_op(const Graph *g, int32_t ni)
{
    return g->nodes[ni].op == OP_CAT || g->nodes[ni].op == OP_FLATTEN;
}

/* Node ni is flatten(stack((-x[..., 1::2], x[..., ::2]), dim=-1), -2) of a float x whose
 * last dim is static and even: 0 and *rr; 1 when not. */
static int match_pairs(const Graph *g, int32_t ni, RotRead *rr)
{
    const Node *nd = &g->nodes[ni];
    const TensorMeta *om = &g->values[nd->first_value].meta;
    const Arg *in = graph_node_arg(g, ni, "input");
    int64_t sd, ed;
    if (!in || in->kind != ARG_VALUE || !only_params(g, ni, "input", "start_dim") ||
        const_param(g, ni, "start_dim", 0, &sd) || const_param(g, ni, "end_dim", -1, &ed))
        return 1;
    int32_t st = maker(g, in->a, OP_STACK);
    const TensorMeta *sm = &g->values[in->a].meta;
    if (st < 0 || sm->ndim != om->ndim + 1 || (sd != -2 && sd != sm->ndim - 2) || (ed != -1 && ed != sm->ndim - 1) ||
        sm->sym[sm->ndim - 1] || sm->size[sm->ndim - 1] != 2)
        return 1;
    int64_t dim;
    int32_t a0, a1;
    if (!only_params(g, st, "tensors", "dim") || const_param(g, st, "dim", 0, &dim) ||
        (dim != -1 && dim != sm->ndim - 1) || two_tensors(g, st, &a0, &a1))
        return 1;
    int32_t neg = maker(g, a0, OP_NEG), even = maker(g, a1, OP_GETITEM);
    if (neg < 0 || even < 0)
        return 1;
    const Arg *ni_in = graph_node_arg(g, neg, "input");
    if (!ni_in || ni_in->kind != ARG_VALUE)
        return 1;
    int32_t odd = maker(g, ni_in->a, OP_GETITEM), x_odd, x_even;
    int64_t o0, o1, os, e0, e1, es;
    if (odd < 0 || last_dim_slice(g, odd, &x_odd, &o0, &o1, &os) || last_dim_slice(g, even, &x_even, &e0, &e1, &es) ||
        x_odd != x_even)
        return 1;
    const TensorMeta *xm = &g->values[x_odd].meta;
    int64_t d = xm->size[xm->ndim - 1];
    if (d < 2 || d % 2 || o0 != 1 || os != 2 || e0 != 0 || es != 2 || o1 < d - 1 || e1 < d - 2 ||
        xm->dtype != om->dtype || !lower_same_dims(xm, om))
        return 1;
    int32_t vals[4] = {a0, a1, ni_in->a, in->a};
    for (int i = 0; i < 4; i++)
        if (!rot_meta_ok(&g->values[vals[i]].meta) || g->values[vals[i]].meta.dtype != om->dtype)
            return 1;
    rr->x = x_odd;
    rr->half = 1;
    rr->pairs = 1;
    rr->cat = ni;
    rr->nparts = 4;
    int32_t p[4] = {odd, even, neg, st};
    sort_parts(p, 4);
    memcpy(rr->parts, p, sizeof p);
    return 0;
}

int plan_rot_match(const Graph *g, int32_t ni, RotRead *rr)
{
    const Node *nd = &g->nodes[ni];
    if (!plan_rot_head_op(g, ni) || nd->nout != 1 || (nd->flags & (NODE_INPLACE | NODE_OUT)))
        return 1;
    const TensorMeta *om = &g->values[nd->first_value].meta;
    if (!rot_meta_ok(om))
        return 1;
    if (nd->op == OP_FLATTEN)
        return match_pairs(g, ni, rr);
    const Arg *list = graph_node_arg(g, ni, "tensors"), *dimv = graph_node_arg(g, ni, "dim");
    int64_t dim = 0;
    if (!list || (list->kind != ARG_LIST && list->kind != ARG_TUPLE) || list->n != 2 ||
        (dimv && (dimv->kind != ARG_CONST || lower_const_int(PyList_GET_ITEM(g->consts, dimv->a), &dim))))
        return 1;
    if (dim != -1 && dim != om->ndim - 1)
        return 1;
    if (!only_params(g, ni, "tensors", "dim"))   /* out=, dtype= absent or None */
        return 1;
    const Arg *a0 = &g->pool[list->a], *a1 = &g->pool[list->a + 1];
    if (a0->kind != ARG_VALUE || a1->kind != ARG_VALUE)
        return 1;
    int32_t neg = maker(g, a0->a, OP_NEG), lo_node = maker(g, a1->a, OP_GETITEM);
    if (neg < 0 || lo_node < 0)
        return 1;
    const Arg *ni_in = graph_node_arg(g, neg, "input");
    if (!ni_in || ni_in->kind != ARG_VALUE)
        return 1;
    int32_t hi_node = maker(g, ni_in->a, OP_GETITEM);
    int32_t x_hi, x_lo;
    int64_t h0, h1, hs, l0, l1, ls;
    if (hi_node < 0 || last_dim_slice(g, hi_node, &x_hi, &h0, &h1, &hs) ||
        last_dim_slice(g, lo_node, &x_lo, &l0, &l1, &ls) || x_hi != x_lo || hs != 1 || ls != 1)
        return 1;
    const TensorMeta *xm = &g->values[x_hi].meta;
    int64_t d = xm->size[xm->ndim - 1];
    if (d < 2 || d % 2 || h0 != d / 2 || h1 != d || l0 != 0 || l1 != d / 2 || xm->dtype != om->dtype ||
        !lower_same_dims(xm, om))
        return 1;
    /* the negation, the slices: this dtype, nothing but their graph order around them */
    int32_t vals[3] = {a0->a, a1->a, ni_in->a};
    for (int i = 0; i < 3; i++)
        if (!rot_meta_ok(&g->values[vals[i]].meta) || g->values[vals[i]].meta.dtype != om->dtype)
            return 1;
    rr->x = x_hi;
    rr->half = d / 2;
    rr->pairs = 0;
    rr->cat = ni;
    rr->nparts = 3;
    /* graph order: the slices and the negation come before the cat, the negation after its
     * slice */
    int32_t p[3] = {hi_node, lo_node, neg};
    if (p[0] > p[1]) {
        int32_t t = p[0];
        p[0] = p[1];
        p[1] = t;
    }
    if (p[2] < p[1]) {
        int32_t t = p[2];
        p[2] = p[1];
        p[1] = t;
    }
    memcpy(rr->parts, p, sizeof p);
    rr->parts[3] = -1;
    return 0;
}

int plan_rot_role(const Graph *g, const Kernel *k, int32_t ni)
{
    for (int32_t j = 0; k->rot && j < k->nnodes; j++) {
        RotRead rr;
        int32_t c = k->nodes[j];
        if (!plan_rot_head_op(g, c) || plan_rot_match(g, c, &rr))
            continue;
        if (c == ni)
            return 2;
        for (int i = 0; i < rr.nparts; i++)
            if (rr.parts[i] == ni)
                return 1;
    }
    return 0;
}

static void count_read(void *ctx, int32_t ni, int32_t v)
{
    (void)ni;
    ((int32_t *)ctx)[v]++;
}

int plan_rot_mark(Graph *g, int32_t *rot_of, int32_t *last_use)
{
    for (int32_t ni = 0; ni < g->nnodes; ni++)
        rot_of[ni] = -1;
    int32_t *reads = PyMem_Calloc((size_t)(g->nvalues ? g->nvalues : 1), sizeof(int32_t));
    if (!reads) {
        PyErr_NoMemory();
        return -1;
    }
    for (int32_t ni = 0; ni < g->nnodes; ni++)
        graph_node_reads(g, ni, count_read, reads);
    for (int32_t i = 0; i < g->noutputs; i++)
        reads[g->outputs[i]] += 2;   /* returned: must be made */
    for (int32_t ni = 0; ni < g->nnodes; ni++) {
        RotRead rr;
        if (!plan_rot_head_op(g, ni) || plan_rot_match(g, ni, &rr))
            continue;
        /* the slices and the negation (and the stack) are read by the pattern alone, and
         * belong to no other */
        int alone = 1;
        for (int i = 0; i < rr.nparts && alone; i++)
            alone = reads[g->nodes[rr.parts[i]].first_value] == 1 && rot_of[rr.parts[i]] < 0;
        if (!alone)
            continue;
        for (int i = 0; i < rr.nparts; i++)
            rot_of[rr.parts[i]] = ni;
        rot_of[ni] = ni;
        /* x is read where the cat runs (the slices no longer read it on their own) */
        if (last_use[rr.x] < ni)
            last_use[rr.x] = ni;
    }
    PyMem_Free(reads);
    return 0;
}
