/* View chains of the cpu backend: consecutive view ops on a torch tensor (view, reshape,
 * transpose, permute, unsqueeze, squeeze, getitem, ...) whose intermediate results nothing
 * else reads run as one step, one torch.as_strided call from the chain's input, instead of
 * one eager step (a Python method call, ~0.7 us) per op. nn.MultiheadAttention's
 * q/k/v split is `proj[0].view(L, B*H, D).transpose(0, 1).view(B, H, L, D)`: four eager
 * steps per projection before this, one now.
 *
 * The step needs no model of each op: a view op's result sizes, strides and offset from its
 * input's are a function of the input's sizes and strides (the offset shifts with the
 * input's). The first run (and any run whose input has strides unlike the recorded ones)
 * runs the chain's nodes eagerly, as eager steps would, and records the result's sizes,
 * strides and storage offset from the input's; it keeps that record only when the result
 * shares the input's storage (a reshape that copied is no view) and torch.as_strided from
 * the input gives a tensor of the same type, sizes, strides and offset. Later runs whose
 * input has the recorded sizes and strides make the result with one as_strided call.
 * contiguous() is a chain op too, and ends its chain: it returns its input when that is
 * contiguous (attention's `out.transpose(1, 2).contiguous()` after torch's SDPA, whose
 * result is laid out (B, L, H, D)), else copies (Swin's window partition, a permute then
 * contiguous()). When the last node is a reshape,
 * flatten or contiguous() that copied (the layout before it has no view of the new shape:
 * transformers' repeat_kv, expand then reshape) and the value before it is such a view, the record is that view's layout and later runs copy its elements in
 * order into a new contiguous tensor (from the graph's pool), as the reshape did, instead of
 * running the nodes (~5-9 us for repeat_kv's chains, ~2 us as a copy).
 *
 * Plan: a chain (of two or more nodes, or of one whose result is lazy, below) is planned
 * over eager steps when every node is a whitelisted view op of one
 * torch output with static sizes and no grad, reading the previous node's result as its
 * first argument (the first node: any torch value) and only constants besides, and every
 * intermediate result is read by the next node alone (not a graph output). The chain runs
 * where its first node ran; the other nodes' steps are removed.
 *
 * Memory: the chain array is PyMem of the plan; each chain holds strong references to its
 * recorded sizes and strides tuples (released with the plan). */
#include <string.h>

#include "lower_int.h"
#include "../vocab/libs.h"
#include "../vocab/tensor_reader.h"
#include "../shapes/rules_util.h"

#define VC_MAX_NODES 16

struct ViewChain {
    int32_t nodes[VC_MAX_NODES];   /* graph nodes, in order */
    int n;
    int32_t base;                  /* the value the first node reads */
    int32_t out;                   /* the value the last node makes */
    /* the record: valid when sizes != NULL */
    int base_ndim;
    int64_t base_size[SJ_MAX_RANK], base_stride[SJ_MAX_RANK];
    PyTypeObject *base_type;       /* borrowed: a type the record was made for (types live on) */
    PyObject *sizes, *strides;     /* strong tuples, or NULL */
    long long delta;               /* result's storage offset minus the input's */
    /* copy mode: the last node (a reshape or flatten of a layout no view has, repeat_kv's
     * expand then reshape) copied; the record is then the layout of the value before it
     * and the result a contiguous tensor of res_size filled from that view in order */
    int copy;
    /* no record for the input layout base_*: a run found none (a copy in the middle of the
     * chain, such as a contiguous() of a permuted view before a view of it); later runs of
     * that layout run the nodes without trying again */
    int norec;
    DType dt;
    /* lazy: every reader of the result is a kernel, matmul or attention step (which read it
     * as an Operand), no node between writes in place, and it is not returned: the result
     * is a LazyView (lazyview.c), not a tensor */
    int lazy;
    int res_ndim;
    int64_t res_size[SJ_MAX_RANK];
    /* defer: in copy mode, its result a lazy copy (lazyview.c): every reader is the first
     * node of a lazy chain, which composes its record with the copy's source view */
    int defer;
    long long calls, eager_runs, copies, lazies, deferred;
};

/* ----------------------------------------------------------------- plan ---- */

static int chain_op(OpId op)
{
    switch (op) {
    case OP_VIEW:
    case OP_RESHAPE:
    case OP_PERMUTE:
    case OP_TRANSPOSE:
    case OP_T:
    case OP_UNSQUEEZE:
    case OP_SQUEEZE:
    case OP_FLATTEN:
    case OP_UNFLATTEN:
    case OP_EXPAND:
    case OP_GETITEM:
    case OP_NARROW:
    case OP_DIAGONAL:
    case OP_SELECT:
    case OP_MOVEDIM:
    case OP_CONTIGUOUS:   /* returns its input when contiguous, else copies (copy mode) */
        return 1;
    default:
        return 0;
    }
}

/* 1 when a tensor value of meta m can be a chain's input or result. */
static int plain_torch(const TensorMeta *m)
{
    if (m->lib != LIB_TORCH || m->symint || m->np_scalar || m->requires_grad)
        return 0;
    for (int d = 0; d < m->ndim; d++)
        if (m->sym[d])
            return 0;
    return 1;
}

/* 1 when every bound slot of node ni but `input` is a constant (or absent, or a *varargs
 * list of constants). */
static int rest_constant(const Graph *g, int32_t ni)
{
    const Node *nd = &g->nodes[ni];
    const SchemaParam *ps;
    int n = graph_node_params(g, ni, &ps);
    for (int i = 0; i < n; i++) {
        const Arg *x = &g->pool[nd->bound + i];
        if (!strcmp(ps[i].name, "input") || x->kind == ARG_ABSENT || x->kind == ARG_CONST)
            continue;
        if (!ps[i].varargs || x->kind != ARG_TUPLE)
            return 0;
        for (int32_t k = 0; k < x->n; k++)
            if (g->pool[x->a + k].kind != ARG_CONST)
                return 0;
    }
    return n > 0;
}

/* The value node ni's chain continues from (its input), or -1 when ni cannot be in a
 * chain. */
static int32_t chain_input(const Graph *g, int32_t ni)
{
    const Node *nd = &g->nodes[ni];
    if (!chain_op((OpId)nd->op) || nd->nout != 1 || (nd->flags & (NODE_INPLACE | NODE_OUT)) ||
        !plain_torch(&g->values[nd->first_value].meta))
        return -1;
    const Arg *in = graph_node_arg(g, ni, "input");
    if (!in || in->kind != ARG_VALUE || !plain_torch(&g->values[in->a].meta) || !rest_constant(g, ni))
        return -1;
    return in->a;
}

static void count_read(void *ctx, int32_t ni, int32_t v)
{
    (void)ni;
    ((int32_t *)ctx)[v]++;
}

/* 1 when chain c's result may be a LazyView: each of its `nread` readers runs in a kernel,
 * matmul or attention step, and no node from the chain's first to the last reader writes
 * in place (a resize_ or set_ of the input would move the memory the record points into). */
static int lazy_readers(const Graph *g, const LowerPlan *p, const int32_t *node_step, const ViewChain *c, int32_t nread)
{
    int32_t last = -1, seen = 0;
    for (int32_t ni = c->nodes[c->n - 1] + 1; ni < g->nnodes && seen < nread; ni++) {
        if (!plan_node_reads_value(g, ni, c->out))
            continue;
        int32_t si = node_step[ni];
        if (si < 0)
            return 0;
        StepKind k = p->steps[si].kind;
        if (k != STEP_KERNEL && k != STEP_MATMUL && k != STEP_ATTENTION)
            return 0;
        seen += plan_node_reads_value(g, ni, c->out);
        last = ni;
    }
    if (seen != nread || last < 0)
        return 0;
    for (int32_t ni = c->nodes[0]; ni <= last; ni++)
        if (g->nodes[ni].flags & (NODE_INPLACE | NODE_OUT))
            return 0;
    return 1;
}

/* Marks the chains whose copy may stay lazy (ViewChain.defer): the chain may end in a copy
 * (contiguous, reshape or flatten), every one of its `reads` readers is the first node of
 * another chain whose result is lazy and whose input is this result (so the copy is read
 * only through their records), and nothing from this chain's first node to those chains
 * writes in place (the lazy chains check the rest up to their readers). */
static void mark_deferred_copies(const Graph *g, LowerPlan *p, const int32_t *reads)
{
    for (int32_t ci = 0; ci < p->nviews; ci++) {
        ViewChain *c = &p->views[ci];
        OpId last = (OpId)g->nodes[c->nodes[c->n - 1]].op;
        if (c->lazy || (last != OP_CONTIGUOUS && last != OP_RESHAPE && last != OP_FLATTEN))
            continue;
        int32_t found = 0, upto = -1;
        for (int32_t cj = 0; cj < p->nviews; cj++) {
            const ViewChain *d = &p->views[cj];
            if (d->base != c->out)
                continue;
            if (!d->lazy || d->n < 1) {
                found = -1;
                break;
            }
            found++;
            upto = d->nodes[0] > upto ? d->nodes[0] : upto;
        }
        if (found <= 0 || found != reads[c->out])
            continue;
        int clean = 1;
        for (int32_t ni = c->nodes[0]; ni <= upto && clean; ni++)
            clean = !(g->nodes[ni].flags & (NODE_INPLACE | NODE_OUT));
        c->defer = clean;
    }
}

int step_views_plan(Graph *g, LowerPlan *p, int32_t *node_step)
{
    int32_t nv = g->nvalues ? g->nvalues : 1;
    int32_t *reads = PyMem_Calloc((size_t)nv, sizeof(int32_t));
    int32_t *step_of = PyMem_Malloc(sizeof(int32_t) * (size_t)(g->nnodes ? g->nnodes : 1));
    int32_t *keep = PyMem_Malloc(sizeof(int32_t) * (size_t)(p->nsteps ? p->nsteps : 1));
    int rc = -1;
    if (!reads || !step_of || !keep) {
        PyErr_NoMemory();
        goto done;
    }
    for (int32_t ni = 0; ni < g->nnodes; ni++)
        lower_node_reads(g, ni, count_read, reads);
    for (int32_t i = 0; i < g->noutputs; i++)
        reads[g->outputs[i]] += 2;   /* returned: never an intermediate */
    for (int32_t ni = 0; ni < g->nnodes; ni++)
        step_of[ni] = -1;
    for (int32_t i = 0; i < p->nsteps; i++)
        if (p->steps[i].kind == STEP_EAGER)
            step_of[p->steps[i].index] = i;
    for (int32_t i = 0; i < p->nsteps; i++)
        keep[i] = 1;
    for (int32_t i = 0; i < p->nsteps; i++) {
        if (p->steps[i].kind != STEP_EAGER || !keep[i])
            continue;
        int32_t first = p->steps[i].index, base = chain_input(g, first);
        if (base < 0)
            continue;
        ViewChain c;
        memset(&c, 0, sizeof c);
        c.base = base;
        c.nodes[c.n++] = first;
        int32_t cur = g->nodes[first].first_value;
        /* a contiguous() ends a chain: when it copies, the copy is the chain's result (copy
         * mode), and views of the copy are a chain of their own */
        while (c.n < VC_MAX_NODES && reads[cur] == 1 && g->nodes[c.nodes[c.n - 1]].op != OP_CONTIGUOUS) {
            /* the one reader of cur: the next node whose chain input it is */
            int32_t next = -1;
            for (int32_t nj = c.nodes[c.n - 1] + 1; nj < g->nnodes && next < 0; nj++)
                if (step_of[nj] >= 0 && chain_input(g, nj) == cur)
                    next = nj;
            if (next < 0)
                break;
            c.nodes[c.n++] = next;
            cur = g->nodes[next].first_value;
        }
        c.out = cur;
        c.lazy = lazy_readers(g, p, node_step, &c, reads[cur]);
        /* one view op alone: an as_strided costs what the op does, so it is a chain only
         * when lazy (no tensor made at all) */
        if (c.n < 2 && !c.lazy)
            continue;
        if (plan_push((void **)&p->views, &p->nviews, sizeof c, &c) < 0)
            goto done;
        p->steps[i].kind = STEP_VIEWS;
        p->steps[i].index = p->nviews - 1;
        for (int k = 1; k < c.n; k++)
            keep[step_of[c.nodes[k]]] = 0;
        for (int k = 0; k < c.n; k++)
            node_step[c.nodes[k]] = i;
    }
    mark_deferred_copies(g, p, reads);
    /* drop the steps the chains took; node_step follows the renumbering */
    int32_t n = 0;
    for (int32_t i = 0; i < p->nsteps; i++) {
        if (keep[i])
            p->steps[n] = p->steps[i];
        keep[i] = keep[i] ? n++ : -1;
    }
    for (int32_t ni = 0; ni < g->nnodes; ni++)
        if (node_step[ni] >= 0)
            node_step[ni] = keep[node_step[ni]];
    for (int32_t ci = 0; ci < p->nviews; ci++)   /* the chain's later nodes: its step */
        for (int k = 1; k < p->views[ci].n; k++)
            node_step[p->views[ci].nodes[k]] = node_step[p->views[ci].nodes[0]];
    p->nsteps = n;
    rc = 0;
done:
    PyMem_Free(reads);
    PyMem_Free(step_of);
    PyMem_Free(keep);
    return rc;
}

/* 1 when view chain i reads value v as its input and its result equals, up to aliasing,
 * what it gives from v laid out any other way: no node is a view() (which refuses layouts
 * it cannot view) and the last is contiguous(), so the result is laid out row-major
 * whatever v's strides (a copy, or v's own memory when that is already row-major). */
int step_views_reads_any_layout(const Graph *g, const LowerPlan *p, int32_t i, int32_t v)
{
    const ViewChain *c = &p->views[i];
    if (c->base != v || g->nodes[c->nodes[c->n - 1]].op != OP_CONTIGUOUS)
        return 0;
    for (int k = 0; k < c->n; k++)
        if (g->nodes[c->nodes[k]].op == OP_VIEW)
            return 0;
    return 1;
}

/* ------------------------------------------------------------------ run ---- */

static PyObject *as_strided_fn, *str_storage_offset, *str_untyped_storage, *str_data_ptr_v, *str_reshape,
    *str_contiguous;   /* strong, once */

static int init_names(void)
{
    if (as_strided_fn)
        return 0;
    if (!libs.torch) {
        PyErr_SetString(PyExc_RuntimeError, "shapejit: torch is not imported");
        return -1;
    }
    if (!(str_storage_offset = PyUnicode_InternFromString("storage_offset")) ||
        !(str_untyped_storage = PyUnicode_InternFromString("untyped_storage")) ||
        !(str_data_ptr_v = PyUnicode_InternFromString("data_ptr")) ||
        !(str_reshape = PyUnicode_InternFromString("reshape")) ||
        !(str_contiguous = PyUnicode_InternFromString("contiguous")))
        return -1;
    as_strided_fn = PyObject_GetAttrString(libs.torch, "as_strided");
    return as_strided_fn ? 0 : -1;
}

/* *out = obj.name() as a long long: 0, or -1 with an exception. */
static int call_ll(PyObject *obj, PyObject *name, long long *out)
{
    PyObject *r = PyObject_CallMethodNoArgs(obj, name);   /* new */
    if (!r)
        return -1;
    *out = PyLong_AsLongLong(r);
    Py_DECREF(r);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* The address of t's storage: 0, or -1 with an exception. */
static int storage_ptr(PyObject *t, long long *out)
{
    PyObject *s = PyObject_CallMethodNoArgs(t, str_untyped_storage);   /* new */
    if (!s)
        return -1;
    int r = call_ll(s, str_data_ptr_v, out);
    Py_DECREF(s);
    return r;
}

/* torch.as_strided(base, sizes, strides, offset): a new reference or NULL. */
static PyObject *make_view(PyObject *base, PyObject *sizes, PyObject *strides, long long offset)
{
    PyObject *off = PyLong_FromLongLong(offset);   /* new */
    if (!off)
        return NULL;
    PyObject *args[4] = {base, sizes, strides, off};
    PyObject *r = PyObject_Vectorcall(as_strided_fn, args, 4, NULL);
    Py_DECREF(off);
    return r;
}

/* Records chain c from a run that made `res` (borrowed) from `base` (borrowed, read into
 * bm/bst): kept only when as_strided from base reproduces res. 0, or -1 with an exception. */
static int record(ViewChain *c, PyObject *base, const TensorMeta *bm, const int64_t *bst, PyObject *res)
{
    Py_CLEAR(c->sizes);
    Py_CLEAR(c->strides);
    TensorMeta rm;
    int64_t rst[SJ_MAX_RANK];
    const char *why = NULL;
    int r = treader_read(res, &rm, rst, &why);
    if (r != 0 || Py_TYPE(res) != (PyTypeObject *)libs.tensor_type)
        return r < 0 ? -1 : 0;
    long long bp, rp, boff, roff;
    if (storage_ptr(base, &bp) < 0 || storage_ptr(res, &rp) < 0 || call_ll(base, str_storage_offset, &boff) < 0 ||
        call_ll(res, str_storage_offset, &roff) < 0)
        return -1;
    if (bp != rp || bp == 0)
        return 0;   /* a copy (reshape of a non-viewable layout), or no memory to share */
    PyObject *sizes = sj_int64_tuple(rm.size, rm.ndim);     /* new */
    PyObject *strides = sj_int64_tuple(rst, rm.ndim);       /* new */
    PyObject *again = sizes && strides ? make_view(base, sizes, strides, roff) : NULL;   /* new */
    if (!again) {
        Py_XDECREF(sizes);
        Py_XDECREF(strides);
        return -1;
    }
    TensorMeta am;
    int64_t ast[SJ_MAX_RANK];
    long long aoff;
    int same = Py_TYPE(again) == Py_TYPE(res) && treader_read(again, &am, ast, &why) == 0 && am.ndim == rm.ndim &&
               am.dtype == rm.dtype && !memcmp(am.size, rm.size, sizeof(int64_t) * (size_t)rm.ndim) &&
               !memcmp(ast, rst, sizeof(int64_t) * (size_t)rm.ndim);
    if (PyErr_Occurred()) {
        Py_DECREF(again);
        Py_DECREF(sizes);
        Py_DECREF(strides);
        return -1;
    }
    if (same && (call_ll(again, str_storage_offset, &aoff) < 0)) {
        Py_DECREF(again);
        Py_DECREF(sizes);
        Py_DECREF(strides);
        return -1;
    }
    Py_DECREF(again);
    if (!same || aoff != roff) {
        Py_DECREF(sizes);
        Py_DECREF(strides);
        return 0;
    }
    c->sizes = sizes;
    c->strides = strides;
    c->delta = roff - boff;
    c->base_ndim = bm->ndim;
    memcpy(c->base_size, bm->size, sizeof(int64_t) * (size_t)bm->ndim);
    memcpy(c->base_stride, bst, sizeof(int64_t) * (size_t)bm->ndim);
    c->base_type = Py_TYPE(base);
    return 0;
}

/* Records chain c in copy mode from a run whose value before the last node was `pen` and
 * whose result `res` (both borrowed) is a contiguous copy of it: kept when pen is a view
 * record() keeps and res a plain contiguous tensor of pen's dtype and element count, a
 * dtype kernels write. 0, or -1 with an exception. */
static int record_copy(ViewChain *c, PyObject *base, const TensorMeta *bm, const int64_t *bst, PyObject *pen,
                       PyObject *res)
{
    TensorMeta rm, pm;
    int64_t rst[SJ_MAX_RANK], pst[SJ_MAX_RANK];
    const char *why = NULL;
    int r = treader_read(res, &rm, rst, &why);
    if (r != 0)
        return r < 0 ? -1 : 0;
    if ((r = treader_read(pen, &pm, pst, &why)) != 0)
        return r < 0 ? -1 : 0;
    if (Py_TYPE(res) != (PyTypeObject *)libs.tensor_type || rm.dtype != pm.dtype || !lower_dtype_ok((DType)rm.dtype) ||
        rm.requires_grad || rm.ndim > SJ_MAX_RANK)
        return 0;
    int64_t n = 1, m = 1, expect = 1;
    for (int d = 0; d < pm.ndim; d++)
        n *= pm.size[d];
    for (int d = rm.ndim - 1; d >= 0; d--) {
        if (rm.size[d] != 1 && rst[d] != expect)
            return 0;   /* not contiguous */
        expect *= rm.size[d];
        m *= rm.size[d];
    }
    if (n != m)
        return 0;
    long long bp, rp;
    if (storage_ptr(base, &bp) < 0 || storage_ptr(res, &rp) < 0)
        return -1;
    if (bp == rp)
        return 0;
    if (record(c, base, bm, bst, pen) < 0)
        return -1;
    if (!c->sizes)
        return 0;
    c->copy = 1;
    c->dt = (DType)rm.dtype;
    c->res_ndim = rm.ndim;
    memcpy(c->res_size, rm.size, sizeof(int64_t) * (size_t)rm.ndim);
    return 0;
}

PyObject *lower_view_of(PyObject *base, PyObject *sizes, PyObject *strides, long long delta)
{
    long long boff;
    if (init_names() < 0 || call_ll(base, str_storage_offset, &boff) < 0)
        return NULL;
    return make_view(base, sizes, strides, boff + delta);
}

/* The recorded view of base. New reference or NULL. */
static PyObject *recorded_view(const ViewChain *c, PyObject *base)
{
    return lower_view_of(base, c->sizes, c->strides, c->delta);
}

/* Copy mode's run when the view's last dim is not contiguous in memory (a transpose:
 * patch embeddings' flatten(2).transpose(1, 2) before a reshape): torch's own copy
 * (vectorized, tiled, and threaded like the rest of eager) of the view made with
 * as_strided, then reshaped as the last node did; a view of the result's own shape (the
 * chain ends in contiguous(): Speech2Text's transpose(1, 2).contiguous()) is copied by
 * contiguous(), since reshape to the same shape would return the view itself. An
 * element-at-a-time copy here measured ten times slower (120 us against 12 us for 64K
 * floats). New reference or NULL. */
PyObject *lower_copy_view(PyObject *t, const int64_t *res_size, int res_ndim)
{
    TensorMeta m;
    const char *why = NULL;
    int r = init_names() < 0 ? -1 : treader_read(t, &m, NULL, &why);
    if (r < 0)
        return NULL;
    int same = r == 0 && m.ndim == res_ndim && !memcmp(m.size, res_size, sizeof(int64_t) * (size_t)res_ndim);
    if (same)
        return PyObject_CallMethodNoArgs(t, str_contiguous);
    PyObject *shape = sj_int64_tuple(res_size, res_ndim);   /* new */
    PyObject *res = shape ? PyObject_CallMethodOneArg(t, str_reshape, shape) : NULL;
    Py_XDECREF(shape);
    return res;
}

static PyObject *copy_by_torch(ViewChain *c, PyObject *base)
{
    PyObject *v = recorded_view(c, base);   /* new */
    if (!v)
        return NULL;
    PyObject *r = lower_copy_view(v, c->res_size, c->res_ndim);
    Py_DECREF(v);
    return r;
}

/* Copy mode's run: the view's elements from base's memory into a new contiguous output. */
static int run_copy(ViewChain *c, PyObject *base, PyObject **vals)
{
    Operand b;
    int r = lower_read_input_dt(base, LIB_TORCH, c->dt, &b);
    if (r != 0)
        return r < 0 ? -1 : 1;
    int pr = (int)PyTuple_GET_SIZE(c->sizes);
    if (pr < 1 || pr > SJ_MAX_RANK)
        return 1;
    int64_t n[SJ_MAX_RANK], ss[SJ_MAX_RANK];
    for (int d = 0; d < pr; d++) {
        n[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(c->sizes, d));
        ss[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(c->strides, d));
    }
    if (PyErr_Occurred())
        return -1;
    if (ss[pr - 1] != 1 && n[pr - 1] > 1) {
        PyObject *o = copy_by_torch(c, base);   /* new */
        if (!o)
            return -1;
        Py_XSETREF(vals[c->out], o);
        c->copies++;
        return 0;
    }
    PyObject *o = lower_new_output_dt(LIB_TORCH, c->dt, c->res_size, c->res_ndim);   /* new */
    if (!o)
        return -1;
    Operand out;
    if ((r = lower_read_input_dt(o, LIB_TORCH, c->dt, &out)) != 0) {
        Py_DECREF(o);
        return r < 0 ? -1 : 1;
    }
    size_t item = (size_t)dtype_info[c->dt].itemsize;
    int64_t ds[SJ_MAX_RANK], e = 1;   /* the view's elements in order: contiguous strides */
    for (int d = pr - 1; d >= 0; d--) {
        ds[d] = e;
        e *= n[d];
    }
    lower_copy_strided(out.data, ds, b.data + c->delta * (long long)item, ss, n, pr, item);
    Py_XSETREF(vals[c->out], o);
    c->copies++;
    return 0;
}

/* Chain c's record composed with the lazy copy it reads (vals[c->base]): 1 with c's
 * result a lazy view of the copy's source tensor, 0 when the record does not compose
 * (then the copy is made), -1 with an exception.
 *
 * The copy holds the source view's elements in row-major order over its sizes vs, so an
 * offset o into the copy is the view's index unravel(o, vs). c's record steps each of its
 * dims by a stride into the copy; it composes when each such stride is a whole number of
 * one dim j of vs (cs[j] <= stride < cs[j] * vs[j], cs the row-major strides over vs),
 * and the record's start coordinate in j plus every step into j stays below vs[j]: then no
 * step carries into another dim, and a dim of c steps m * (the source's stride of j). */
static int through_copy(ViewChain *c, PyObject **vals)
{
    PyObject *src;
    int vn, rn;
    const int64_t *vs, *vst, *rs;
    long long vd;
    /* (a chain that copies in turn, a merge the copy's layout has no view of, copies from
     * the copy made) */
    if (!c->sizes || c->copy || !lazyview_copy_source(vals[c->base], &src, &vn, &vs, &vst, &vd, &rn, &rs))
        return 0;
    /* the record must be of the copy's layout: contiguous over its sizes */
    int64_t e = 1;
    if (c->base_ndim != rn || c->base_type != (PyTypeObject *)libs.tensor_type ||
        memcmp(c->base_size, rs, sizeof(int64_t) * (size_t)rn))
        return 0;
    for (int d = rn - 1; d >= 0; d--) {
        if (rs[d] != 1 && c->base_stride[d] != e)
            return 0;
        e *= rs[d];
    }
    int64_t cs[SJ_MAX_RANK], span[SJ_MAX_RANK], q[SJ_MAX_RANK], total = 1;
    for (int j = vn - 1; j >= 0; j--) {
        cs[j] = total;
        total *= vs[j];
        span[j] = 0;
    }
    if (c->delta < 0 || c->delta >= total)
        return 0;
    for (int j = 0; j < vn; j++)
        q[j] = (c->delta / cs[j]) % vs[j];
    int n = (int)PyTuple_GET_SIZE(c->sizes);
    int64_t st[SJ_MAX_RANK];
    for (int k = 0; k < n; k++) {
        int64_t sz = PyLong_AsLongLong(PyTuple_GET_ITEM(c->sizes, k)),
                s = PyLong_AsLongLong(PyTuple_GET_ITEM(c->strides, k));
        if (PyErr_Occurred())
            return -1;
        if (sz == 1 || s == 0) {
            st[k] = 0;
            continue;
        }
        int j = vn - 1;
        while (j >= 0 && !(vs[j] > 1 && cs[j] <= s && s < cs[j] * vs[j]))
            j--;
        if (s < 0 || j < 0 || s % cs[j])
            return 0;
        span[j] += s / cs[j] * (sz - 1);
        st[k] = s / cs[j] * vst[j];
    }
    long long delta = vd;
    for (int j = 0; j < vn; j++) {
        if (q[j] + span[j] >= vs[j])
            return 0;
        delta += q[j] * vst[j];
    }
    PyObject *strides = sj_int64_tuple(st, n); /* new */
    PyObject *v = strides ? lazyview_new_through(src, c->sizes, strides, delta, vals[c->base], c->strides, c->delta)
                          : NULL; /* new */
    Py_XDECREF(strides);
    if (!v)
        return -1;
    c->calls++;
    c->lazies++;
    vals[c->out] = v;
    return 1;
}

int step_views_run(Graph *g, LowerPlan *p, int32_t i, PyObject **vals)
{
    ViewChain *c = &p->views[i];
    if (init_names() < 0)
        return -1;
    if (lazyview_check(vals[c->base])) {   /* a lazy copy (a plain lazy view has no chain reading it) */
        int r = c->lazy ? through_copy(c, vals) : 0;
        if (r != 0)
            return r < 0 ? -1 : 0;
        PyObject *t = lazyview_tensor(vals[c->base]);   /* new: the copy made */
        if (!t)
            return -1;
        c->copies++;
        Py_SETREF(vals[c->base], t);
    }
    PyObject *base = vals[c->base];   /* borrowed */
    c->calls++;
    TensorMeta bm;
    int64_t bst[SJ_MAX_RANK];
    const char *why = NULL;
    int r = base ? treader_read(base, &bm, bst, &why) : 1;
    if (r < 0)
        return -1;
    int same = r == 0 && (c->sizes || c->norec) && Py_TYPE(base) == c->base_type && bm.ndim == c->base_ndim &&
               !memcmp(bm.size, c->base_size, sizeof(int64_t) * (size_t)bm.ndim) &&
               !memcmp(bst, c->base_stride, sizeof(int64_t) * (size_t)bm.ndim);
    if (same && c->sizes) {
        if (c->copy && c->defer) {
            PyObject *v = lazyview_new_copy(base, c->sizes, c->strides, c->delta, c->res_size, c->res_ndim); /* new */
            if (!v)
                return -1;
            c->deferred++;
            vals[c->out] = v;
            return 0;
        }
        if (c->copy) {
            int cr = run_copy(c, base, vals);
            if (cr <= 0)
                return cr;
            goto eager;   /* not a tensor the copy reads: the nodes */
        }
        PyObject *v = c->lazy ? lazyview_new(base, c->sizes, c->strides, c->delta) : recorded_view(c, base); /* new */
        if (!v)
            return -1;
        c->lazies += c->lazy;
        vals[c->out] = v;
        return 0;
    }
eager:
    /* the nodes as eager steps; their intermediates are dropped as the chain goes (the one
     * before the last kept until the record is made) */
    c->eager_runs++;
    PyObject *pen = NULL; /* strong: the value before the last node */
    for (int k = 0; k < c->n; k++) {
        if (lower_exec_node(g, c->nodes[k], vals) < 0) {
            Py_XDECREF(pen);
            return -1;
        }
        if (k > 0) {
            PyObject **prev = &vals[g->nodes[c->nodes[k - 1]].first_value];
            if (k == c->n - 1 && !pen)
                pen = *prev ? Py_NewRef(*prev) : NULL;
            Py_CLEAR(*prev);
        }
    }
    int rc = 0;
    if (r == 0 && !same) {
        c->copy = 0;
        c->norec = 0;
        rc = record(c, base, &bm, bst, vals[c->out]);
        OpId last = (OpId)g->nodes[c->nodes[c->n - 1]].op;
        if (rc == 0 && !c->sizes && pen && vals[c->out] &&
            (last == OP_RESHAPE || last == OP_FLATTEN || last == OP_CONTIGUOUS))
            rc = record_copy(c, base, &bm, bst, pen, vals[c->out]);
        if (rc == 0 && !c->sizes) {
            c->norec = 1;
            c->base_ndim = bm.ndim;
            memcpy(c->base_size, bm.size, sizeof(int64_t) * (size_t)bm.ndim);
            memcpy(c->base_stride, bst, sizeof(int64_t) * (size_t)bm.ndim);
            c->base_type = Py_TYPE(base);
        }
    }
    Py_XDECREF(pen);
    return rc;
}

void step_views_free(LowerPlan *p)
{
    for (int32_t i = 0; i < p->nviews; i++) {
        Py_CLEAR(p->views[i].sizes);
        Py_CLEAR(p->views[i].strides);
    }
    PyMem_Free(p->views);
    p->views = NULL;
    p->nviews = 0;
}

int step_views_stats(const Graph *g, const LowerPlan *p, PyObject *d)
{
    (void)g;
    long long calls = 0, eager = 0, nodes = 0, copies = 0, lazies = 0, deferred = 0;
    for (int32_t i = 0; i < p->nviews; i++) {
        calls += p->views[i].calls;
        eager += p->views[i].eager_runs;
        nodes += p->views[i].n;
        copies += p->views[i].copies;
        lazies += p->views[i].lazies;
        deferred += p->views[i].deferred;
    }
    static const char *const names[7] = {
        "view_chains",       "view_chain_nodes", "view_chain_calls",          "view_chain_eager_runs",
        "view_chain_copies", "view_chain_lazy",  "view_chain_copies_deferred"};
    long long vals[7] = {p->nviews, nodes, calls, eager, copies, lazies, deferred};
    return lower_put_counts(d, 7, names, vals);
}

/* ---------------------------------------------------------- pass-through ---- */

/* Dropout outside training (nn.Dropout in eval mode, F.dropout(x, p, training=False)) is
 * torch's identity: it returns its input tensor itself, the same object. An eager step
 * costs a call through torch.nn.functional (~3 us); STEP_ALIAS hands the object on. Only a
 * constant training=False qualifies, with p a constant in [0, 1] (else torch raises). */
int step_alias_plan(Graph *g, LowerPlan *p, int32_t *node_step)
{
    (void)node_step;
    for (int32_t i = 0; i < p->nsteps; i++) {
        if (p->steps[i].kind != STEP_EAGER)
            continue;
        int32_t ni = p->steps[i].index;
        const Node *nd = &g->nodes[ni];
        if (nd->op != OP_DROPOUT || nd->nout != 1)
            continue;
        const Arg *a0 = graph_node_arg(g, ni, "input");
        if (!a0 || a0->kind != ARG_VALUE || g->values[a0->a].meta.lib != LIB_TORCH)
            continue;
        NodeArgs na;
        ShapeErr err;
        int training = 1;
        double prob = 0.5;
        if (lower_bind_node(g, ni, &na) || sj_tensor(&na.bound, "input", &err) != &g->values[a0->a].meta ||
            sj_get_bool(&na.bound, "training", 1, &training, &err) || training ||
            sj_get_float(&na.bound, "p", 0.5, &prob, &err) || !(prob >= 0.0 && prob <= 1.0))
            continue;
        p->steps[i].kind = STEP_ALIAS;
    }
    return 0;
}

int step_alias_run(Graph *g, LowerPlan *p, int32_t ni, PyObject **vals)
{
    (void)p;
    const Node *nd = &g->nodes[ni];
    const Arg *in = graph_node_arg(g, ni, "input"); /* a value: step_alias_plan checked */
    PyObject *x = vals[in->a]; /* borrowed from vals */
    /* a Tensor subclass may override dropout (__torch_function__): its own call */
    if (!x || !libs_is_tensor(x))
        return lower_exec_node(g, ni, vals);
    Py_XSETREF(vals[nd->first_value], Py_NewRef(x));
    return 0;
}
