/* Values computed once: nodes that read no graph input, only constants and other such
 * nodes, through deterministic torch ops (pointwise, views, reductions, copies, and the
 * factories arange / zeros / ones / full / linspace / eye), give the same tensors on every
 * call the graph's guards admit: sizes are fixed (a symbolic size is a graph input) and
 * the constants they read are immutable Python values. Models build their causal masks and
 * position ids this way (transformers' masking utilities: arange, comparisons, cumsum,
 * indexing, ~30 small eager steps in a small Llama). One step at the head of the plan runs
 * them, in graph order, on the first call and keeps the values later steps read; later
 * calls hand the kept tensors on.
 *
 * What must not change a kept tensor: no node that runs every call writes into one or into
 * a value that may share its memory (a view, a cast or contiguous() that returns its
 * argument), and no graph output may share its memory (the caller could write into it); in
 * either case nothing is folded. A folded node may write in place into a folded value when
 * nothing that runs every call reads a folded value before it (`t[i] = v` too: a table of
 * indices filled from aranges). Random draws, empty() (undefined contents), Python-number
 * results and numpy are never folded.
 *
 * Memory: the step array and its node/value lists are PyMem of the plan; each kept value is
 * a strong reference held from the first run until the plan is freed. */
#include <string.h>

#include "lower_int.h"

/* The most a graph keeps between calls (its folded values' bytes, a view counted as its
 * sizes): a causal mask of 2 x 2048 x 2048 bools is 8 MB. */
#define CONST_MAX_BYTES (64.0 * 1024 * 1024)

struct ConstStep {
    int32_t *nodes;     /* PyMem: the folded nodes, in graph order */
    int32_t nnodes;
    int32_t *keep;      /* PyMem: the values made here that other steps read */
    PyObject **kept;    /* PyMem, nkeep: strong, NULL until the first run */
    int32_t nkeep;
    int filled;
    long long calls;
};

/* ----------------------------------------------------------------- plan ---- */

static int foldable_op(OpId op)
{
    switch (op_info[op].kind) {
    case OPK_POINTWISE:
        return op != OP_DROPOUT;
    case OPK_VIEW:
        return op != OP_TO_NUMPY && op != OP_FROM_NUMPY && op != OP_FN_OUTPUT_VIEW;
    case OPK_REDUCTION:
    case OPK_SHAPE:
        return 1;
    case OPK_MUTATION:   /* t[i] = v into a folded t: BEiT's relative position index table */
        return op == OP_SETITEM;
    case OPK_FACTORY:
        return op == OP_ZEROS || op == OP_ONES || op == OP_FULL || op == OP_ZEROS_LIKE || op == OP_ONES_LIKE ||
               op == OP_FULL_LIKE || op == OP_ARANGE || op == OP_LINSPACE || op == OP_EYE || op == OP_NEW_FULL;
    default:
        return 0;
    }
}

/* 1 when constant v cannot change between calls: None, Ellipsis, numbers, str, slices and
 * tuples of them, torch's dtype / device / layout / memory_format objects. */
static int immutable(PyObject *v, int depth)
{
    if (v == Py_None || v == Py_Ellipsis || PyLong_CheckExact(v) || PyBool_Check(v) || PyFloat_CheckExact(v) ||
        PyUnicode_CheckExact(v))
        return 1;
    if (depth > 4)
        return 0;
    if (PySlice_Check(v)) {
        PySliceObject *s = (PySliceObject *)v;
        return immutable(s->start, depth + 1) && immutable(s->stop, depth + 1) && immutable(s->step, depth + 1);
    }
    if (PyTuple_CheckExact(v)) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(v); i++)
            if (!immutable(PyTuple_GET_ITEM(v, i), depth + 1))
                return 0;
        return 1;
    }
    const char *tn = Py_TYPE(v)->tp_name;
    return !strcmp(tn, "torch.dtype") || !strcmp(tn, "torch.device") || !strcmp(tn, "torch.layout") ||
           !strcmp(tn, "torch.memory_format");
}

/* 1 when slot x (an argument, or a list / tuple of them) reads only immutable constants and
 * folded values. */
static int slot_folds(const Graph *g, const Arg *x, const uint8_t *fold)
{
    switch (x->kind) {
    case ARG_ABSENT:
        return 1;
    case ARG_CONST:
        return immutable(PyList_GET_ITEM(g->consts, x->a), 0);
    case ARG_VALUE:
        return fold[g->values[x->a].node];
    case ARG_LIST:
    case ARG_TUPLE:
        for (int32_t k = 0; k < x->n; k++)
            if (!slot_folds(g, &g->pool[x->a + k], fold))
                return 0;
        return 1;
    }
    return 0;
}

/* 1 when the callable is a library function or method of C (a builtin, a method or slot
 * descriptor), or a plain Python function of torch's own without a closure
 * (torch.meshgrid, torch.functional's wrappers): no Python closure or bound object that
 * could change between calls. */
static int library_callable(PyObject *f)
{
    if (PyFunction_Check(f)) {
        PyObject *mod = PyFunction_GET_MODULE(f);   /* borrowed */
        const char *m = mod && PyUnicode_Check(mod) ? PyUnicode_AsUTF8(mod) : NULL;
        if (!m)
            PyErr_Clear();
        return m && (!strcmp(m, "torch") || !strncmp(m, "torch.", 6)) && !PyFunction_GET_CLOSURE(f);
    }
    if (PyCFunction_Check(f)) {
        PyObject *self = PyCFunction_GET_SELF(f);   /* borrowed */
        return !self || PyModule_Check(self) || PyType_Check(self);
    }
    const char *tn = Py_TYPE(f)->tp_name;
    return !strcmp(tn, "method_descriptor") || !strcmp(tn, "wrapper_descriptor") ||
           !strcmp(tn, "classmethod_descriptor");
}

static int node_folds(const Graph *g, int32_t ni, const uint8_t *fold)
{
    const Node *nd = &g->nodes[ni];
    if (nd->op == OP_INPUT || nd->row < 0 || nd->nout < 1 || (nd->flags & NODE_OUT) || !foldable_op((OpId)nd->op) ||
        nd->target < 0 || !library_callable(PyList_GET_ITEM(g->consts, nd->target)))
        return 0;
    for (int32_t j = 0; j < nd->nout; j++) {
        const TensorMeta *m = &g->values[nd->first_value + j].meta;
        if (m->lib != LIB_TORCH || m->symint || m->np_scalar || m->requires_grad)
            return 0;
    }
    for (int32_t i = 0; i < nd->nbound; i++)
        if (!slot_folds(g, &g->pool[nd->bound + i], fold))
            return 0;
    /* the raw arguments eager replays must be the same ones */
    for (int32_t i = 0; i < nd->nargs; i++)
        if (!slot_folds(g, &g->pool[nd->args + i], fold))
            return 0;
    for (int32_t i = 0; i < nd->nkw; i++)
        if (!slot_folds(g, &g->pool[nd->kwargs + i], fold))
            return 0;
    return 1;
}

/* The kind of node nd's op; -1 for a graph input (OP_INPUT is no row of op_info). */
static int node_kind(const Node *nd)
{
    return nd->op == OP_INPUT ? -1 : (int)op_info[nd->op].kind;
}

/* 1 when value v is made by a folded node or may share the memory of one's value. */
static int may_alias_folded(const Graph *g, int32_t v, const uint8_t *fold)
{
    for (;;) {
        const Node *def = &g->nodes[g->values[v].node];
        if (fold[g->values[v].node])
            return 1;
        if (!(node_kind(def) == OPK_VIEW || node_kind(def) == OPK_MUTATION || def->op == OP_CAST ||
              def->op == OP_CONTIGUOUS || (def->flags & NODE_INPLACE)) ||
            def->nargs < 1)
            return 0;
        const Arg *a = &g->pool[def->args];
        if (a->kind != ARG_VALUE)
            return 0;
        v = a->a;
    }
}

struct writes {
    const Graph *g;
    const uint8_t *fold;
    int hit;
    int32_t *inplace;   /* PyMem: pairs (folded node writing in place, the base it writes) */
    int32_t ninplace;
    int32_t reader;     /* the node whose reads note_early_read is given */
};

/* The node whose value v is, or shares the memory of, through views, casts, contiguous()
 * and in-place writes (the chain may_alias_folded follows). */
static int32_t alias_base(const Graph *g, int32_t v)
{
    for (;;) {
        const Node *def = &g->nodes[g->values[v].node];
        if (!(node_kind(def) == OPK_VIEW || node_kind(def) == OPK_MUTATION || def->op == OP_CAST ||
              def->op == OP_CONTIGUOUS || (def->flags & NODE_INPLACE)) ||
            def->nargs < 1 || g->pool[def->args].kind != ARG_VALUE)
            return g->values[v].node;
        v = g->pool[def->args].a;
    }
}

/* w->inplace: each folded node that writes in place and the base of what it writes (its
 * first argument). 0, or -1 with MemoryError. */
static int note_inplace(const Graph *g, const uint8_t *fold, struct writes *w)
{
    for (int32_t ni = 0; ni < g->nnodes; ni++) {
        const Node *nd = &g->nodes[ni];
        if (!fold[ni] || !lower_node_writes(nd))   /* in place, or t[i] = v */
            continue;
        if (nd->nargs < 1 || g->pool[nd->args].kind != ARG_VALUE) {
            w->hit = 1;   /* what it writes is not known here: fold nothing */
            return 0;
        }
        if (!w->inplace && !(w->inplace = PyMem_Malloc(sizeof(int32_t) * 2 * (size_t)g->nnodes))) {
            PyErr_NoMemory();
            return -1;
        }
        w->inplace[2 * w->ninplace] = ni;
        w->inplace[2 * w->ninplace + 1] = alias_base(g, g->pool[nd->args].a);
        w->ninplace++;
    }
    return 0;
}

/* a node that runs every call reads memory a later folded node writes in place */
static void note_early_read(void *ctx, int32_t ni, int32_t v)
{
    struct writes *w = ctx;
    (void)ni;
    int32_t base = alias_base(w->g, v);
    for (int32_t k = 0; k < w->ninplace; k++)
        if (w->inplace[2 * k] > w->reader && w->inplace[2 * k + 1] == base)
            w->hit = 1;
}

static void note_write(void *ctx, int32_t ni, int32_t v)
{
    struct writes *w = ctx;
    (void)ni;
    w->hit |= may_alias_folded(w->g, v, w->fold);
}

static void note_read(void *ctx, int32_t ni, int32_t v)
{
    int32_t *reader = ctx;
    if (reader[v] < ni)
        reader[v] = ni;
}

int step_const_plan(Graph *g, LowerPlan *p, uint8_t *fold, int32_t *node_step)
{
    /* a graph output is never a folded value (the caller may write into it): its node is
     * marked first, and what reads it cannot fold either */
    memset(fold, 0, (size_t)g->nnodes);
    for (int32_t i = 0; i < g->noutputs; i++)
        fold[g->values[g->outputs[i]].node] = 2;
    int32_t nfold = 0;
    for (int32_t ni = 0; ni < g->nnodes; ni++) {
        if (fold[ni] == 2) {
            fold[ni] = 0;
            continue;
        }
        nfold += fold[ni] = (uint8_t)node_folds(g, ni, fold);
    }
    if (nfold == 0)
        return 0;
    /* ... nor shares memory with one; and no node that runs every call writes into one. A
     * folded node may write in place (T5's `buckets += torch.where(...)`): its operands are
     * all folded, so it runs in order inside the step, but a node that runs every call and
     * reads that memory before the write would see the kept value after it */
    struct writes w = {g, fold, 0, NULL, 0, 0};
    for (int32_t i = 0; i < g->noutputs && !w.hit; i++)
        w.hit |= may_alias_folded(g, g->outputs[i], fold);
    for (int32_t ni = 0; ni < g->nnodes && !w.hit; ni++) {
        const Node *nd = &g->nodes[ni];
        if (!fold[ni] && lower_node_writes(nd))
            lower_node_reads(g, ni, note_write, &w);
    }
    if (!w.hit && note_inplace(g, fold, &w) < 0)
        return -1;
    for (int32_t ni = 0; ni < g->nnodes && !w.hit && w.ninplace; ni++)
        if (!fold[ni]) {
            w.reader = ni;
            lower_node_reads(g, ni, note_early_read, &w);
        }
    PyMem_Free(w.inplace);
    if (w.hit) {
        memset(fold, 0, (size_t)g->nnodes);
        return 0;
    }
    ConstStep s;
    memset(&s, 0, sizeof s);
    int32_t *reader = PyMem_Malloc(sizeof(int32_t) * (size_t)(g->nvalues ? g->nvalues : 1));
    s.nodes = PyMem_Malloc(sizeof(int32_t) * (size_t)nfold);
    s.keep = PyMem_Malloc(sizeof(int32_t) * (size_t)(g->nvalues ? g->nvalues : 1));
    if (!reader || !s.nodes || !s.keep) {
        PyErr_NoMemory();
        goto fail;
    }
    /* kept: the values a node that is not folded reads */
    for (int32_t v = 0; v < g->nvalues; v++)
        reader[v] = -1;
    for (int32_t ni = 0; ni < g->nnodes; ni++)
        if (!fold[ni])
            lower_node_reads(g, ni, note_read, reader);
    double bytes = 0;   /* of the kept values */
    for (int32_t ni = 0; ni < g->nnodes; ni++) {
        if (!fold[ni])
            continue;
        s.nodes[s.nnodes++] = ni;
        for (int32_t j = 0; j < g->nodes[ni].nout; j++) {
            int32_t v = g->nodes[ni].first_value + j;
            if (reader[v] < 0)
                continue;
            s.keep[s.nkeep++] = v;
            const TensorMeta *m = &g->values[v].meta;
            double n = dtype_info[m->dtype].itemsize;
            for (int d = 0; d < m->ndim; d++)
                n *= (double)m->size[d];
            bytes += n;
        }
    }
    if (bytes > CONST_MAX_BYTES) {   /* not worth holding between calls */
        memset(fold, 0, (size_t)g->nnodes);
        PyMem_Free(reader);
        PyMem_Free(s.nodes);
        PyMem_Free(s.keep);
        return 0;
    }
    for (int32_t j = 0; j < s.nnodes; j++)
        node_step[s.nodes[j]] = p->nsteps;
    if (!(s.kept = PyMem_Calloc((size_t)(s.nkeep ? s.nkeep : 1), sizeof(PyObject *)))) {
        PyErr_NoMemory();
        goto fail;
    }
    if (lower_push_step(p, STEP_CONST, (void **)&p->consts, &p->nconsts, sizeof s, &s) < 0)
        goto fail;
    PyMem_Free(reader);
    return 0;
fail:
    PyMem_Free(reader);
    PyMem_Free(s.nodes);
    PyMem_Free(s.keep);
    PyMem_Free(s.kept);
    return -1;
}

/* ------------------------------------------------------------------ run ---- */

int step_const_run(Graph *g, LowerPlan *p, int32_t i, PyObject **vals)
{
    ConstStep *s = &p->consts[i];
    s->calls++;
    if (s->filled) {
        for (int32_t j = 0; j < s->nkeep; j++)
            Py_XSETREF(vals[s->keep[j]], Py_NewRef(s->kept[j]));
        return 0;
    }
    for (int32_t j = 0; j < s->nnodes; j++)
        if (lower_exec_node(g, s->nodes[j], vals) < 0)
            return -1;
    for (int32_t j = 0; j < s->nkeep; j++)
        if (!vals[s->keep[j]]) {
            PyErr_SetString(PyExc_RuntimeError, "shapejit: a node computed once left no value");
            return -1;
        }
    /* another thread's first run may have filled it while torch ran without the GIL: its
     * values are the same, keep those */
    if (s->filled)
        return 0;
    for (int32_t j = 0; j < s->nkeep; j++)
        s->kept[j] = Py_NewRef(vals[s->keep[j]]);
    s->filled = 1;
    return 0;
}

void step_const_free(LowerPlan *p)
{
    for (int32_t i = 0; i < p->nconsts; i++) {
        ConstStep *s = &p->consts[i];
        for (int32_t j = 0; s->kept && j < s->nkeep; j++)
            Py_CLEAR(s->kept[j]);
        PyMem_Free(s->nodes);
        PyMem_Free(s->keep);
        PyMem_Free(s->kept);
    }
    PyMem_Free(p->consts);
    p->consts = NULL;
    p->nconsts = 0;
}

int step_const_stats(const Graph *g, const LowerPlan *p, PyObject *d)
{
    (void)g;
    long long n[3] = {0, 0, 0};
    for (int32_t i = 0; i < p->nconsts; i++) {
        n[0] += p->consts[i].nnodes;
        n[1] += p->consts[i].nkeep;
        n[2] += p->consts[i].calls;
    }
    static const char *const names[3] = {"const_nodes", "const_values", "const_calls"};
    return lower_put_counts(d, 3, names, n);
}
