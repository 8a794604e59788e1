/* Graph IR construction and eager execution. */
#include "ir.h"
#include "../vocab/callables.h"
#include "../shapes/sym.h"
#include <string.h>
#include "../core/errors.h"
#include "../core/pyutil.h"

/* ---------------------------------------------------------------- growth ---- */

#define GROW(g, field, countf, capf, extra) \
    sj_grow((void **)&(g)->field, &(g)->capf, (g)->countf + (extra), sizeof(*(g)->field), 16)

Graph *graph_new(void)
{
    Graph *g = PyMem_Calloc(1, sizeof(Graph));
    if (!g) {
        PyErr_NoMemory();
        return NULL;
    }
    g->grad_query = -1;
    g->consts = PyList_New(0);
    if (!g->consts) {
        PyMem_Free(g);
        return NULL;
    }
    return g;
}

void graph_free(Graph *g)
{
    if (!g)
        return;
    PyMem_Free(g->nodes);
    PyMem_Free(g->values);
    PyMem_Free(g->pool);
    PyMem_Free(g->inputs);
    PyMem_Free(g->outputs);
    Py_XDECREF(g->consts);
    sym_env_free(g->env);
    PyMem_Free(g);
}

int32_t graph_const(Graph *g, PyObject *obj)
{
    /* Identity dedupe over the last few entries keeps repeated targets cheap without a
     * hash table; the list is only a keep-alive table, so duplicates are harmless. */
    Py_ssize_t n = PyList_GET_SIZE(g->consts);
    for (Py_ssize_t i = n - 1; i >= 0 && i >= n - 8; i--)
        if (PyList_GET_ITEM(g->consts, i) == obj)
            return (int32_t)i;
    if (PyList_Append(g->consts, obj) < 0)
        return -1;
    return (int32_t)n;
}

int32_t graph_pool(Graph *g, int32_t n)
{
    if (GROW(g, pool, npool, cap_pool, n) < 0)
        return -1;
    int32_t first = g->npool;
    memset(g->pool + first, 0, (size_t)n * sizeof(Arg));
    g->npool += n;
    return first;
}

static int32_t new_node(Graph *g)
{
    if (GROW(g, nodes, nnodes, cap_nodes, 1) < 0)
        return -1;
    Node *nd = &g->nodes[g->nnodes];
    memset(nd, 0, sizeof(*nd));
    nd->target = nd->kwnames = nd->where = nd->source = nd->bound = -1;
    nd->row = -1;
    return g->nnodes++;
}

static int32_t new_values(Graph *g, int32_t node, const TensorMeta *metas, int32_t n)
{
    if (GROW(g, values, nvalues, cap_values, n) < 0)
        return -1;
    int32_t first = g->nvalues;
    for (int32_t i = 0; i < n; i++) {
        g->values[first + i].meta = metas[i];
        g->values[first + i].node = node;
        g->values[first + i].index = i;
    }
    g->nvalues += n;
    return first;
}

int32_t graph_add_input(Graph *g, const TensorMeta *meta, PyObject *source)
{
    int32_t src = graph_const(g, source);
    if (src < 0)
        return -1;
    int32_t ni = new_node(g);
    if (ni < 0)
        return -1;
    int32_t v = new_values(g, ni, meta, 1);
    if (v < 0 || GROW(g, inputs, ninputs, cap_inputs, 1) < 0)
        return -1;
    Node *nd = &g->nodes[ni];
    nd->op = OP_INPUT;
    nd->source = src;
    nd->first_value = v;
    nd->nout = 1;
    g->inputs[g->ninputs++] = v;
    return v;
}

int32_t graph_add_node(Graph *g, OpId op, int flags, PyObject *target, int32_t args, int32_t nargs, int32_t kwargs,
                       int32_t nkw, PyObject *kwnames, const TensorMeta *metas, int32_t nout, PyObject *where)
{
    int32_t t = graph_const(g, target);
    if (t < 0)
        return -1;
    int32_t kn = -1, w = -1;
    if (kwnames && (kn = graph_const(g, kwnames)) < 0)
        return -1;
    if (where && (w = graph_const(g, where)) < 0)
        return -1;
    int32_t ni = new_node(g);
    if (ni < 0)
        return -1;
    int32_t v = new_values(g, ni, metas, nout);
    if (v < 0)
        return -1;
    Node *nd = &g->nodes[ni];
    nd->op = (uint16_t)op;
    nd->flags = (uint8_t)flags;
    nd->target = t;
    nd->args = args;
    nd->nargs = nargs;
    nd->kwargs = kwargs;
    nd->nkw = nkw;
    nd->kwnames = kn;
    nd->first_value = v;
    nd->nout = nout;
    nd->where = w;
    if (nkw == 0) {   /* row -1: the positional arguments are the bound form */
        nd->bound = args;
        nd->nbound = nargs;
    }
    if ((flags & NODE_INPLACE || op_info[op].kind == OPK_MUTATION) && nargs > 0 &&
        (g->pool[args].kind != ARG_VALUE || graph_value_may_alias_input(g, g->pool[args].a)))
        g->has_mutation = 1;
    /* a draw from the default generator changes state outside the graph: running the frame
     * again after the graph (on an error, or a shape rule that disagreed) would draw twice */
    if (op == OP_RANDOM_FILL || op == OP_DROPOUT || op == OP_RAND || op == OP_RAND_LIKE)
        g->has_mutation = 1;
    return v;
}

void graph_node_bind(Graph *g, int32_t ni, int row, int32_t bound, int32_t nbound)
{
    Node *nd = &g->nodes[ni];
    nd->row = (int16_t)row;
    nd->bound = bound;
    nd->nbound = nbound;
}

int graph_node_params(const Graph *g, int32_t ni, const SchemaParam **params)
{
    const Node *nd = &g->nodes[ni];
    if (nd->row < 0 || nd->row >= callable_nrows)
        return 0;
    ShapeErr err;
    int n = bind_schema(callable_rows[nd->row].schema, params, &err);
    /* a row that failed to parse recorded no node; a mismatch would be a capture bug */
    return n == nd->nbound ? n : 0;
}

const Arg *graph_node_arg(const Graph *g, int32_t ni, const char *name)
{
    const SchemaParam *ps;
    int n = graph_node_params(g, ni, &ps);
    const Node *nd = &g->nodes[ni];
    for (int i = 0; i < n; i++) {
        if (strcmp(ps[i].name, name) != 0)
            continue;
        const Arg *a = &g->pool[nd->bound + i];
        if (a->kind == ARG_ABSENT || (a->kind == ARG_CONST && PyList_GET_ITEM(g->consts, a->a) == Py_None))
            continue;
        return a;
    }
    return NULL;
}

void graph_node_reads(const Graph *g, int32_t ni, void (*fn)(void *ctx, int32_t ni, int32_t v), void *ctx)
{
    const Node *nd = &g->nodes[ni];
    for (int part = 0; part < 2; part++) {
        int32_t first = part ? nd->kwargs : nd->args, n = part ? nd->nkw : nd->nargs;
        for (int32_t i = 0; i < n; i++) {
            const Arg *x = &g->pool[first + i];
            if (x->kind == ARG_VALUE)
                fn(ctx, ni, x->a);
            else if (x->kind == ARG_LIST || x->kind == ARG_TUPLE)
                for (int32_t k = 0; k < x->n; k++)
                    if (g->pool[x->a + k].kind == ARG_VALUE)
                        fn(ctx, ni, g->pool[x->a + k].a);
        }
    }
}

/* Whether an op's result may share memory with its first argument: views, writes in
 * place (their result is the argument), and casts (`x.float()` of a float tensor, numpy's
 * astype(copy=False) return the argument itself). */
static int result_may_alias_arg(const Node *nd)
{
    return op_info[nd->op].kind == OPK_VIEW || op_info[nd->op].kind == OPK_MUTATION || nd->op == OP_CAST ||
           (nd->flags & NODE_INPLACE);
}

int graph_value_may_alias_input(const Graph *g, int32_t vid)
{
    for (;;) {
        const Node *def = &g->nodes[g->values[vid].node];
        if (def->op == OP_INPUT)
            return 1;
        if (!result_may_alias_arg(def) || def->nargs < 1)
            return 0;
        const Arg *a = &g->pool[def->args];
        if (a->kind == ARG_CONST)
            return 1;   /* a view of a tensor the graph holds as a constant */
        if (a->kind != ARG_VALUE)
            return 0;   /* a list (cat's tensors, say): the ops reading lists copy */
        vid = a->a;
    }
}

int graph_add_output(Graph *g, int32_t value)
{
    if (GROW(g, outputs, noutputs, cap_outputs, 1) < 0)
        return -1;
    g->outputs[g->noutputs++] = value;
    return 0;
}

/* ------------------------------------------------------------- execution ---- */

/* New reference to the Python value of one argument. vals: the run's value table. */
static PyObject *arg_value(Graph *g, const Arg *a, PyObject **vals)
{
    switch (a->kind) {
    case ARG_VALUE: {
        PyObject *v = vals[a->a];
        if (!v) {
            PyErr_SetString(PyExc_RuntimeError, "shapejit: graph value used before definition");
            return NULL;
        }
        return Py_NewRef(v);
    }
    case ARG_CONST:
        return Py_NewRef(PyList_GET_ITEM(g->consts, a->a));
    case ARG_LIST:
    case ARG_TUPLE: {
        PyObject *seq = a->kind == ARG_LIST ? PyList_New(a->n) : PyTuple_New(a->n);
        if (!seq)
            return NULL;
        for (int32_t i = 0; i < a->n; i++) {
            PyObject *item = arg_value(g, &g->pool[a->a + i], vals);
            if (!item) {
                Py_DECREF(seq);
                return NULL;
            }
            if (a->kind == ARG_LIST)
                PyList_SET_ITEM(seq, i, item);
            else
                PyTuple_SET_ITEM(seq, i, item);
        }
        return seq;
    }
    }
    PyErr_SetString(PyExc_SystemError, "shapejit: bad graph argument kind");
    return NULL;
}

/* New reference: the node's result (a tuple/list for multi-output nodes). */
static PyObject *run_node(Graph *g, const Node *nd, PyObject **vals)
{
    PyObject *small[8];
    int32_t total = nd->nargs + nd->nkw;
    PyObject **stack = total <= 8 ? small : PyMem_Malloc(sizeof(PyObject *) * (size_t)total);
    PyObject *res = NULL;
    int32_t filled = 0;
    if (!stack)
        return PyErr_NoMemory();
    for (; filled < total; filled++) {
        const Arg *a = filled < nd->nargs ? &g->pool[nd->args + filled] : &g->pool[nd->kwargs + (filled - nd->nargs)];
        if (!(stack[filled] = arg_value(g, a, vals)))
            goto done;
    }
    res = PyObject_Vectorcall(PyList_GET_ITEM(g->consts, nd->target), stack, (size_t)nd->nargs,
                              nd->kwnames >= 0 ? PyList_GET_ITEM(g->consts, nd->kwnames) : NULL);
done:
    for (int32_t i = 0; i < filled; i++)
        Py_DECREF(stack[i]);
    if (stack != small)
        PyMem_Free(stack);
    return res;
}

/* Record the first disagreement between a predicted meta and a live value. */
static int verify_value(Graph *g, const Node *nd, int32_t vid, PyObject *v, PyObject **mismatch)
{
    if (!mismatch || *mismatch)
        return 0;
    if (g->values[vid].meta.symint)
        return 0;   /* a size computed at run time: any int */
    for (int i = 0; i < g->values[vid].meta.ndim; i++)
        if (g->values[vid].meta.sym[i] && sym_has_unbacked(g->values[vid].meta.sym[i]))
            return 0;   /* a data-dependent size has no prediction to check */
    int ok = meta_matches_value(&g->values[vid].meta, v);
    if (ok < 0)
        return -1;
    if (ok)
        return 0;
    char want[160];
    meta_format(&g->values[vid].meta, want, sizeof want);
    PyObject *got = PyObject_GetAttrString(v, "shape");
    PyObject *dt = got ? PyObject_GetAttrString(v, "dtype") : NULL;
    if (!dt)
        sj_err_clear();
    *mismatch =
        PyUnicode_FromFormat("the shape rule of op '%s' predicted %s but eager gave %s %S %S", op_info[nd->op].name,
                             want, Py_TYPE(v)->tp_name, dt ? dt : Py_None, got ? got : Py_None);
    Py_XDECREF(got);
    Py_XDECREF(dt);
    return *mismatch ? 0 : -1;
}

int graph_exec_node(Graph *g, int32_t ni, PyObject **vals, PyObject **mismatch)
{
    const Node *nd = &g->nodes[ni];
    PyObject *r = run_node(g, nd, vals);
    if (!r)
        return -1;
    if (r == Py_None && nd->nout == 1 && nd->nargs > 0 &&
        (op_info[nd->op].kind == OPK_MUTATION || (nd->flags & NODE_INPLACE))) {
        /* operator.setitem, np.copyto, ndarray.fill return None: the value the node
         * defines is the argument it wrote into */
        Py_SETREF(r, arg_value(g, &g->pool[nd->args], vals));
        if (!r)
            return -1;
    }
    if (nd->nout == 1) {
        vals[nd->first_value] = r;
        if (verify_value(g, nd, nd->first_value, r, mismatch) < 0)
            return -1;
    } else {
        /* multi-output ops return a tuple or list; state ops return None (nout 0) */
        if (nd->nout > 0) {
            PyObject *seq = PySequence_Fast(r, "shapejit: multi-output op did not return a sequence");
            if (!seq || PySequence_Fast_GET_SIZE(seq) != nd->nout) {
                if (seq) {
                    PyErr_Format(PyExc_RuntimeError, "shapejit: op '%s' returned %zd values, expected %d",
                                 op_info[nd->op].name, PySequence_Fast_GET_SIZE(seq), nd->nout);
                    Py_DECREF(seq);
                }
                Py_DECREF(r);
                return -1;
            }
            for (int32_t k = 0; k < nd->nout; k++) {
                PyObject *item = PySequence_Fast_GET_ITEM(seq, k);
                vals[nd->first_value + k] = Py_NewRef(item);
                if (verify_value(g, nd, nd->first_value + k, item, mismatch) < 0) {
                    Py_DECREF(seq);
                    Py_DECREF(r);
                    return -1;
                }
            }
            Py_DECREF(seq);
        }
        Py_DECREF(r);
    }
    return 0;
}

static int exec_all(void *ctx, Graph *g, PyObject **vals, PyObject **mismatch)
{
    (void)ctx;
    for (int32_t ni = 0; ni < g->nnodes; ni++)
        if (g->nodes[ni].op != OP_INPUT && graph_exec_node(g, ni, vals, mismatch) < 0)
            return -1;
    return 0;
}

PyObject *graph_run(Graph *g, PyObject *const *inputs, PyObject **mismatch)
{
    return graph_run_with(g, inputs, mismatch, exec_all, NULL);
}

PyObject *graph_run_with(Graph *g, PyObject *const *inputs, PyObject **mismatch, GraphExec exec, void *ctx)
{
    PyObject *small[32];
    PyObject **vals = g->nvalues <= 32 ? small : PyMem_Malloc(sizeof(PyObject *) * (size_t)g->nvalues);
    PyObject *out = NULL;
    if (!vals)
        return PyErr_NoMemory();
    memset(vals, 0, sizeof(PyObject *) * (size_t)g->nvalues);
    PyObject *grad0 = NULL;   /* grad mode before the run, when the graph switches it */
    PyObject *et = NULL, *ev = NULL, *tb = NULL;   /* a failed run's exception, kept aside */
    if (g->grad_query >= 0 && !(grad0 = PyObject_CallNoArgs(PyList_GET_ITEM(g->consts, g->grad_query)))) {
        if (vals != small)
            PyMem_Free(vals);
        return NULL;
    }
    for (int32_t i = 0; i < g->ninputs; i++)
        vals[g->inputs[i]] = Py_NewRef(inputs[i]);
    if (exec(ctx, g, vals, mismatch) < 0)
        goto done;
    out = PyTuple_New(g->noutputs);
    if (!out)
        goto done;
    for (int32_t i = 0; i < g->noutputs; i++) {
        PyObject *v = vals[g->outputs[i]];
        PyTuple_SET_ITEM(out, i, Py_NewRef(v ? v : Py_None));
    }
done:
    if (!out)
        PyErr_Fetch(&et, &ev, &tb);
    /* newest first: the guard objects of inference_mode blocks a failed run left open
     * restore their modes innermost first (they restore the grad mode too, so the grad
     * mode from before the run is put back after them) */
    for (int32_t i = g->nvalues - 1; i >= 0; i--)
        Py_XDECREF(vals[i]);
    if (!out && grad0) {
        /* a failed run must not leave the grad mode it switched to */
        for (int32_t ni = 0; ni < g->nnodes; ni++)
            if (g->nodes[ni].op == OP_SET_GRAD_ENABLED) {
                PyObject *r = PyObject_CallOneArg(PyList_GET_ITEM(g->consts, g->nodes[ni].target), grad0);
                if (!r)
                    sj_err_clear();
                Py_XDECREF(r);
                break;
            }
    }
    if (!out)
        PyErr_Restore(et, ev, tb);
    Py_XDECREF(grad0);
    if (vals != small)
        PyMem_Free(vals);
    return out;
}

/* ------------------------------------------------------------- listing ---- */

static int fmt_arg(Graph *g, const Arg *a, PyObject *acc)
{
    PyObject *s = NULL;
    switch (a->kind) {
    case ARG_VALUE:
        s = PyUnicode_FromFormat("v%d", (int)a->a);
        break;
    case ARG_CONST: {
        PyObject *c = PyList_GET_ITEM(g->consts, a->a);
        s = graph_const_by_name(c) ? graph_target_name(c) : PyObject_Repr(c);
        break;
    }
    case ARG_LIST:
    case ARG_TUPLE: {
        PyObject *parts = PyList_New(0);
        if (!parts)
            return -1;
        for (int32_t i = 0; i < a->n; i++) {
            if (fmt_arg(g, &g->pool[a->a + i], parts) < 0) {
                Py_DECREF(parts);
                return -1;
            }
        }
        PyObject *joined = sj_join(", ", parts);   /* parts stolen */
        if (!joined)
            return -1;
        s = a->kind == ARG_LIST ? PyUnicode_FromFormat("[%U]", joined)
                                : PyUnicode_FromFormat("(%U%s)", joined, a->n == 1 ? "," : "");
        Py_DECREF(joined);
        break;
    }
    }
    if (!s)
        return -1;
    int r = PyList_Append(acc, s);
    Py_DECREF(s);
    return r;
}

PyObject *graph_torch_op_data(PyObject *t)
{
    static PyObject *s_ops;   /* interned "torch._ops", kept for the process */
    if (!s_ops && !(s_ops = PyUnicode_InternFromString("torch._ops"))) {
        sj_err_clear();
        return NULL;
    }
    /* looked up, never imported: an OpOverload exists only once torch is loaded */
    PyObject *ops = PyImport_GetModule(s_ops);
    PyObject *type = ops ? PyObject_GetAttrString(ops, "OpOverload") : NULL;
    Py_XDECREF(ops);
    PyObject *res = NULL;
    if (type && (PyObject *)Py_TYPE(t) == type) {
        PyObject *ns = PyObject_GetAttrString(t, "namespace");
        PyObject *name = ns ? PyObject_GetAttrString(t, "_opname") : NULL;
        PyObject *ov = name ? PyObject_GetAttrString(t, "_overloadname") : NULL;
        if (ov && PyUnicode_Check(ns) && PyUnicode_Check(name) && PyUnicode_Check(ov))
            res = PyTuple_Pack(3, ns, name, ov);
        Py_XDECREF(ns);
        Py_XDECREF(name);
        Py_XDECREF(ov);
    }
    Py_XDECREF(type);
    sj_err_clear();
    return res;
}

PyObject *graph_target_name(PyObject *t)
{
    PyObject *op = graph_torch_op_data(t);
    if (op) {
        PyObject *r = PyUnicode_FromFormat("torch.ops.%U.%U.%U", PyTuple_GET_ITEM(op, 0), PyTuple_GET_ITEM(op, 1),
                                           PyTuple_GET_ITEM(op, 2));
        Py_DECREF(op);
        return r;
    }
    PyObject *mod = PyObject_GetAttrString(t, "__module__");
    if (!mod)
        sj_err_clear();
    PyObject *qn = PyObject_GetAttrString(t, "__qualname__");
    if (!qn) {
        sj_err_clear();
        qn = PyObject_GetAttrString(t, "__name__");
    }
    if (!qn) {
        sj_err_clear();
        Py_XDECREF(mod);
        return PyObject_Repr(t);
    }
    PyObject *r = (mod && PyUnicode_Check(mod)) ? PyUnicode_FromFormat("%U.%U", mod, qn) : Py_NewRef(qn);
    Py_XDECREF(mod);
    Py_DECREF(qn);
    return r;
}

int graph_const_by_name(PyObject *c)
{
    return PyCallable_Check(c) && !PyType_Check(c);
}

/* Node ni's arguments bound to its row's schema, "name=value" in the schema's order, into
 * parts; a parameter the call did not pass is left out (its default applies). 1 when ni
 * has no bound parameters to show (row -1), 0 done, -1 error. */
static int fmt_bound(Graph *g, int32_t ni, PyObject *parts)
{
    const Node *nd = &g->nodes[ni];
    const SchemaParam *ps;
    int n = graph_node_params(g, ni, &ps);
    if (nd->row < 0 || n != nd->nbound)
        return 1;
    for (int i = 0; i < n; i++) {
        const Arg *a = &g->pool[nd->bound + i];
        if (a->kind == ARG_ABSENT)
            continue;
        PyObject *tmp = PyList_New(0);    /* new */
        PyObject *kv =
            tmp && fmt_arg(g, a, tmp) == 0 ? PyUnicode_FromFormat("%s=%U", ps[i].name, PyList_GET_ITEM(tmp, 0)) : NULL;
        int r = kv ? PyList_Append(parts, kv) : -1;
        Py_XDECREF(tmp);
        Py_XDECREF(kv);
        if (r < 0)
            return -1;
    }
    return 0;
}

/* The listing; bound: each call as the backends read it (graph_format_bound). */
static PyObject *format_graph(Graph *g, const char *name, int bound)
{
    PyObject *lines = PyList_New(0), *res = NULL;
    if (!lines)
        return NULL;
    PyObject *line = PyUnicode_FromFormat("def %s(%d inputs):", name, (int)g->ninputs);
    if (!line || PyList_Append(lines, line) < 0)
        goto done;
    Py_CLEAR(line);
    for (int32_t ni = 0; ni < g->nnodes; ni++) {
        const Node *nd = &g->nodes[ni];
        char metas[256] = "";
        size_t off = 0;
        for (int32_t k = 0; k < nd->nout && off < sizeof metas - 2; k++) {
            if (k)
                off += (size_t)snprintf(metas + off, sizeof metas - off, ", ");
            if (off < sizeof metas)
                meta_format(&g->values[nd->first_value + k].meta, metas + off, sizeof metas - off);
            off = strlen(metas);
        }
        if (nd->op == OP_INPUT) {
            line = PyUnicode_FromFormat("    v%d: %s = %U", (int)nd->first_value, metas,
                                        PyList_GET_ITEM(g->consts, nd->source));
        } else {
            PyObject *parts = PyList_New(0);
            if (!parts)
                goto done;
            int by_row = bound ? fmt_bound(g, ni, parts) : 1;
            int bad = by_row < 0;
            by_row = by_row == 0;
            for (int32_t i = 0; i < nd->nargs && !bad && !by_row; i++)
                bad = fmt_arg(g, &g->pool[nd->args + i], parts) < 0;
            for (int32_t i = 0; i < nd->nkw && !bad && !by_row; i++) {
                PyObject *kn = PyTuple_GET_ITEM(PyList_GET_ITEM(g->consts, nd->kwnames), i);
                PyObject *tmp = PyList_New(0);
                bad = !tmp || fmt_arg(g, &g->pool[nd->kwargs + i], tmp) < 0;
                if (!bad) {
                    PyObject *kv = PyUnicode_FromFormat("%U=%U", kn, PyList_GET_ITEM(tmp, 0));
                    bad = !kv || PyList_Append(parts, kv) < 0;
                    Py_XDECREF(kv);
                }
                Py_XDECREF(tmp);
            }
            PyObject *joined = NULL;
            if (bad)
                Py_DECREF(parts);
            else
                joined = sj_join(", ", parts);   /* parts stolen */
            PyObject *tname = !joined  ? NULL
                              : by_row ? PyUnicode_FromString(callable_rows[nd->row].path)
                                       : graph_target_name(PyList_GET_ITEM(g->consts, nd->target));
            if (!tname) {
                Py_XDECREF(joined);
                goto done;
            }
            PyObject *lhs = nd->nout == 1   ? PyUnicode_FromFormat("v%d", (int)nd->first_value)
                            : nd->nout == 0 ? PyUnicode_FromString("_")
                                            : PyUnicode_FromFormat("v%d..v%d", (int)nd->first_value,
                                                                   (int)(nd->first_value + nd->nout - 1));
            const char *op = bound ? op_info[nd->op].name : "";   /* the bound form names the op */
            if (nd->where >= 0) {
                PyObject *w = PyList_GET_ITEM(g->consts, nd->where);
                line = PyUnicode_FromFormat("    %U: %s = %U(%U)%s  # %s%s%U:%S  %U", lhs, metas, tname, joined,
                                            (nd->flags & NODE_INPLACE) ? " [in-place]" : "", op, bound ? ", " : "",
                                            PyTuple_GET_ITEM(w, 0), PyTuple_GET_ITEM(w, 1), PyTuple_GET_ITEM(w, 3));
            } else {
                line =
                    PyUnicode_FromFormat("    %U: %s = %U(%U)%s%s", lhs, metas, tname, joined, bound ? "  # " : "", op);
            }
            Py_XDECREF(lhs);
            Py_DECREF(tname);
            Py_DECREF(joined);
        }
        if (!line || PyList_Append(lines, line) < 0)
            goto done;
        Py_CLEAR(line);
    }
    {
        PyObject *outs = PyList_New(0);
        if (!outs)
            goto done;
        for (int32_t i = 0; i < g->noutputs; i++) {
            PyObject *o = PyUnicode_FromFormat("v%d", (int)g->outputs[i]);
            if (!o || PyList_Append(outs, o) < 0) {
                Py_XDECREF(o);
                Py_DECREF(outs);
                goto done;
            }
            Py_DECREF(o);
        }
        PyObject *joined = sj_join(", ", outs);   /* outs stolen */
        if (!joined)
            goto done;
        line = PyUnicode_FromFormat("    return (%U)", joined);
        Py_DECREF(joined);
        if (!line || PyList_Append(lines, line) < 0)
            goto done;
        Py_CLEAR(line);
    }
    res = sj_join("\n", lines);   /* lines stolen */
    lines = NULL;
done:
    Py_XDECREF(line);
    Py_XDECREF(lines);
    return res;
}

PyObject *graph_format(Graph *g, const char *name)
{
    return format_graph(g, name, 0);
}

PyObject *graph_format_bound(Graph *g, const char *name)
{
    return format_graph(g, name, 1);
}
