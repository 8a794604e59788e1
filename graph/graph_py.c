/* The Python face of a graph: _C.Graph (callable, inspectable) and _C.Node. */
#include "ir.h"
#include "../core/policy.h"
#include "../vocab/callables.h"
#include "serial.h"
#include "../core/pyutil.h"
#include <structmember.h>

/* ------------------------------------------------------------------ Node ---- */

typedef struct {
    PyObject_HEAD PyObject *op, *target, *inputs, *dtype, *shape, *lib, *source;   /* all strong */
    PyObject *filename, *lineno, *line, *funcname;                    /* strong */
} SjNodeObject;

static void node_dealloc(SjNodeObject *n)
{
    Py_XDECREF(n->op);
    Py_XDECREF(n->target);
    Py_XDECREF(n->inputs);
    Py_XDECREF(n->dtype);
    Py_XDECREF(n->shape);
    Py_XDECREF(n->lib);
    Py_XDECREF(n->source);
    Py_XDECREF(n->filename);
    Py_XDECREF(n->lineno);
    Py_XDECREF(n->line);
    Py_XDECREF(n->funcname);
    Py_TYPE(n)->tp_free((PyObject *)n);
}

static PyObject *node_repr(SjNodeObject *n)
{
    return PyUnicode_FromFormat("<shapejit Node %S %S%S inputs=%S>", n->op, n->dtype, n->shape, n->inputs);
}

#define NODE_MEMBER(name, doc) {#name, T_OBJECT, offsetof(SjNodeObject, name), READONLY, doc}
static PyMemberDef node_members[] = {
    NODE_MEMBER(op, "op name (vocab/ops.def) or 'input'"),
    NODE_MEMBER(target, "the callable eager mode calls; None for inputs"),
    NODE_MEMBER(inputs, "indices of the nodes whose values this node reads"),
    NODE_MEMBER(dtype, "dtype name of the (first) output"),
    NODE_MEMBER(shape, "shape of the (first) output"),
    NODE_MEMBER(lib, "'torch' or 'numpy'"),
    NODE_MEMBER(source, "for inputs: where the value comes from, e.g. L['x']"),
    NODE_MEMBER(filename, "user file the op came from"),
    NODE_MEMBER(lineno, "user line number"),
    NODE_MEMBER(line, "user source line"),
    NODE_MEMBER(funcname, "user function"),
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject SjNode_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shapejit._C.Node",
    .tp_basicsize = sizeof(SjNodeObject),
    .tp_dealloc = (destructor)node_dealloc,
    .tp_repr = (reprfunc)node_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_members = node_members,
    .tp_doc = "One op of a captured graph.",
};

static int collect_inputs(Graph *g, const Arg *a, PyObject *list)
{
    if (a->kind == ARG_VALUE) {
        PyObject *i = PyLong_FromLong(g->values[a->a].node);
        int r = i ? PyList_Append(list, i) : -1;
        Py_XDECREF(i);
        return r;
    }
    if (a->kind == ARG_LIST || a->kind == ARG_TUPLE)
        for (int32_t k = 0; k < a->n; k++)
            if (collect_inputs(g, &g->pool[a->a + k], list) < 0)
                return -1;
    return 0;
}

static PyObject *make_node(Graph *g, int32_t ni)
{
    const Node *nd = &g->nodes[ni];
    SjNodeObject *n = PyObject_New(SjNodeObject, &SjNode_Type);
    if (!n)
        return NULL;
    n->op = n->target = n->inputs = n->dtype = n->shape = n->lib = n->source = NULL;
    n->filename = n->lineno = n->line = n->funcname = NULL;
    const TensorMeta *m = nd->nout > 0 ? &g->values[nd->first_value].meta : NULL;
    n->op = PyUnicode_FromString(nd->op == OP_INPUT ? "input" : op_info[nd->op].name);
    n->target = Py_NewRef(nd->target >= 0 ? PyList_GET_ITEM(g->consts, nd->target) : Py_None);
    n->inputs = PyList_New(0);
    n->dtype = m ? PyUnicode_FromString(dtype_info[m->dtype].name) : Py_NewRef(Py_None);
    n->shape = m ? sj_int64_tuple(m->size, m->ndim) : Py_NewRef(Py_None);
    n->lib = m ? PyUnicode_FromString(m->lib == LIB_TORCH ? "torch" : "numpy") : Py_NewRef(Py_None);
    n->source = Py_NewRef(nd->source >= 0 ? PyList_GET_ITEM(g->consts, nd->source) : Py_None);
    if (nd->where >= 0) {
        PyObject *w = PyList_GET_ITEM(g->consts, nd->where);
        n->filename = Py_NewRef(PyTuple_GET_ITEM(w, 0));
        n->lineno = Py_NewRef(PyTuple_GET_ITEM(w, 1));
        n->funcname = Py_NewRef(PyTuple_GET_ITEM(w, 2));
        n->line = Py_NewRef(PyTuple_GET_ITEM(w, 3));
    } else {
        n->filename = Py_NewRef(Py_None);
        n->lineno = Py_NewRef(Py_None);
        n->funcname = Py_NewRef(Py_None);
        n->line = Py_NewRef(Py_None);
    }
    if (!n->op || !n->inputs || !n->dtype || !n->shape || !n->lib)
        goto fail;
    for (int32_t i = 0; i < nd->nargs; i++)
        if (collect_inputs(g, &g->pool[nd->args + i], n->inputs) < 0)
            goto fail;
    for (int32_t i = 0; i < nd->nkw; i++)
        if (collect_inputs(g, &g->pool[nd->kwargs + i], n->inputs) < 0)
            goto fail;
    return (PyObject *)n;
fail:
    Py_DECREF(n);
    return NULL;
}

/* ----------------------------------------------------------------- Graph ---- */

static void graph_dealloc(SjGraphObject *self)
{
    graph_free(self->g);
    Py_XDECREF(self->name);
    Py_XDECREF(self->mismatch);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

int graph_py_link_once(SjGraphObject *self)
{
    if (self->unlinked) {   /* a graph read from text: its library objects first */
        if (graph_link(self->g) < 0)
            return -1;
        self->unlinked = 0;
    }
    return 0;
}

static PyObject *graph_call(SjGraphObject *self, PyObject *args, PyObject *kwargs)
{
    if (kwargs && PyDict_GET_SIZE(kwargs)) {
        PyErr_SetString(PyExc_TypeError, "shapejit Graph takes positional inputs only");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    if (n != self->g->ninputs) {
        PyErr_Format(PyExc_TypeError, "shapejit Graph %U takes %d inputs, got %zd", self->name, (int)self->g->ninputs,
                     n);
        return NULL;
    }
    if (graph_py_link_once(self) < 0)
        return NULL;
    int verify = self->verify_next;
    self->verify_next = 0;
    PyObject *mismatch = NULL;
    PyObject *r = graph_run(self->g, &PyTuple_GET_ITEM(args, 0), verify ? &mismatch : NULL);
    if (r && verify) {
        self->verified = 1;
        Py_XSETREF(self->mismatch, mismatch);
    } else {
        Py_XDECREF(mismatch);
    }
    return r;
}

static PyObject *graph_get_nodes(SjGraphObject *self, void *c)
{
    (void)c;
    PyObject *list = PyList_New(self->g->nnodes);
    if (!list)
        return NULL;
    for (int32_t i = 0; i < self->g->nnodes; i++) {
        PyObject *n = make_node(self->g, i);
        if (!n) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, n);
    }
    return list;
}

static PyObject *graph_get_inputs(SjGraphObject *self, void *c)
{
    (void)c;
    Graph *g = self->g;
    PyObject *list = PyList_New(g->ninputs);
    if (!list)
        return NULL;
    for (int32_t i = 0; i < g->ninputs; i++) {
        const Node *nd = &g->nodes[g->values[g->inputs[i]].node];
        PyList_SET_ITEM(list, i, Py_NewRef(PyList_GET_ITEM(g->consts, nd->source)));
    }
    return list;
}

static PyObject *graph_get_outputs(SjGraphObject *self, void *c)
{
    (void)c;
    return PyLong_FromLong(self->g->noutputs);
}

static PyObject *graph_get_code(SjGraphObject *self, void *c)
{
    (void)c;
    const char *name = PyUnicode_AsUTF8(self->name);
    return name ? graph_format(self->g, name) : NULL;
}

static PyObject *graph_py_format(SjGraphObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"bound", NULL};
    int bound = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$p:format", kwlist, &bound))
        return NULL;
    const char *name = PyUnicode_AsUTF8(self->name);
    if (!name)
        return NULL;
    return bound ? graph_format_bound(self->g, name) : graph_format(self->g, name);
}

static PyObject *graph_get_op_count(SjGraphObject *self, void *c)
{
    (void)c;
    return PyLong_FromLong(self->g->nnodes - self->g->ninputs);
}

static PyObject *graph_repr(SjGraphObject *self)
{
    return PyUnicode_FromFormat("<shapejit Graph %U: %d inputs, %d ops, %d outputs>", self->name, (int)self->g->ninputs,
                                (int)(self->g->nnodes - self->g->ninputs), (int)self->g->noutputs);
}

/* One argument as plain Python data for shapejit.fx: ("v", value id), ("c", constant),
 * ("l", [items]) or ("t", [items]). Tagged, so a constant tuple never reads as a value. */
static PyObject *arg_parts(Graph *g, const Arg *a)
{
    switch (a->kind) {
    case ARG_VALUE:
        return Py_BuildValue("(si)", "v", (int)a->a);
    case ARG_CONST:
        return Py_BuildValue("(sO)", "c", PyList_GET_ITEM(g->consts, a->a));
    case ARG_LIST:
    case ARG_TUPLE: {
        PyObject *items = PyList_New(a->n);
        if (!items)
            return NULL;
        for (int32_t i = 0; i < a->n; i++) {
            PyObject *it = arg_parts(g, &g->pool[a->a + i]);
            if (!it) {
                Py_DECREF(items);
                return NULL;
            }
            PyList_SET_ITEM(items, i, it);
        }
        PyObject *r = Py_BuildValue("(sN)", a->kind == ARG_LIST ? "l" : "t", items);
        return r;
    }
    }
    PyErr_SetString(PyExc_SystemError, "shapejit: bad graph argument kind");
    return NULL;
}

static PyObject *arg_range(Graph *g, int32_t first, int32_t n)
{
    PyObject *t = PyTuple_New(n);
    if (!t)
        return NULL;
    for (int32_t i = 0; i < n; i++) {
        PyObject *it = arg_parts(g, &g->pool[first + i]);
        if (!it) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, it);
    }
    return t;
}

/* The graph as plain data, for shapejit.fx (to_fx): (inputs, nodes, outputs) with
 * inputs [(value id, source)], nodes [(op, target, args, kwnames, kwargs, first value,
 * nout, writes_first_arg)] in execution order (inputs excluded) and outputs [value id].
 * writes_first_arg: the node writes into its first argument and the value it defines is
 * that argument (what graph_exec_node does when such an op returns None). */
static PyObject *graph_parts(SjGraphObject *self, PyObject *unused)
{
    (void)unused;
    Graph *g = self->g;
    PyObject *inputs = PyList_New(0), *nodes = PyList_New(0), *outputs = PyList_New(0);
    if (!inputs || !nodes || !outputs)
        goto fail;
    for (int32_t i = 0; i < g->ninputs; i++) {
        const Node *nd = &g->nodes[g->values[g->inputs[i]].node];
        PyObject *t = Py_BuildValue("(iO)", (int)g->inputs[i], PyList_GET_ITEM(g->consts, nd->source));
        if (!t || PyList_Append(inputs, t) < 0) {
            Py_XDECREF(t);
            goto fail;
        }
        Py_DECREF(t);
    }
    for (int32_t ni = 0; ni < g->nnodes; ni++) {
        const Node *nd = &g->nodes[ni];
        if (nd->op == OP_INPUT)
            continue;
        int writes_first = nd->nout == 1 && nd->nargs > 0 &&
                           (op_info[nd->op].kind == OPK_MUTATION || (nd->flags & NODE_INPLACE)) &&
                           g->pool[nd->args].kind == ARG_VALUE;
        PyObject *args = arg_range(g, nd->args, nd->nargs);
        PyObject *kw = args ? arg_range(g, nd->kwargs, nd->nkw) : NULL;
        PyObject *t = kw ? Py_BuildValue("(sOOOOiiO)", op_info[nd->op].name, PyList_GET_ITEM(g->consts, nd->target),
                                         args, nd->kwnames >= 0 ? PyList_GET_ITEM(g->consts, nd->kwnames) : Py_None, kw,
                                         (int)nd->first_value, (int)nd->nout, writes_first ? Py_True : Py_False)
                         : NULL;
        Py_XDECREF(args);
        Py_XDECREF(kw);
        if (!t || PyList_Append(nodes, t) < 0) {
            Py_XDECREF(t);
            goto fail;
        }
        Py_DECREF(t);
    }
    for (int32_t i = 0; i < g->noutputs; i++) {
        PyObject *v = PyLong_FromLong(g->outputs[i]);
        if (!v || PyList_Append(outputs, v) < 0) {
            Py_XDECREF(v);
            goto fail;
        }
        Py_DECREF(v);
    }
    return Py_BuildValue("(NNN)", inputs, nodes, outputs);
fail:
    Py_XDECREF(inputs);
    Py_XDECREF(nodes);
    Py_XDECREF(outputs);
    return NULL;
}

/* to_fx(): a torch.fx.GraphModule computing the same values (the to_fx policy: shapejit/fx.py
 * builds it, imported on first use, so numpy-only users never import torch). */
static PyObject *graph_to_fx(SjGraphObject *self, PyObject *unused)
{
    (void)unused;
    PyObject *fn = Py_XNewRef(policy_get(POLICY_TO_FX));   /* new: held over the call */
    if (!fn) {
        PyErr_SetString(PyExc_RuntimeError, "shapejit: Graph.to_fx needs the shapejit package (no to_fx policy)");
        return NULL;
    }
    PyObject *r = PyObject_CallOneArg(fn, (PyObject *)self);
    Py_DECREF(fn);
    return r;
}

/* _bound(): (pool, nodes) as plain data, for the tests of the bound form (ir.h). pool: a
 * (kind, a, n) per slot; nodes: per node a tuple (op, flags, row, row's op or None, params,
 * bound, nbound, args, nargs, kwargs, nkw, kwnames) where params is a tuple of (name,
 * call_name, varargs, fixed) per schema parameter, or None for row -1. */
static PyObject *graph_bound(SjGraphObject *self, PyObject *unused)
{
    (void)unused;
    Graph *g = self->g;
    PyObject *pool = PyList_New(g->npool), *nodes = PyList_New(g->nnodes);
    for (int32_t i = 0; pool && nodes && i < g->npool; i++) {
        PyObject *t = Py_BuildValue("(iii)", g->pool[i].kind, (int)g->pool[i].a, (int)g->pool[i].n);
        if (!t)
            goto fail;
        PyList_SET_ITEM(pool, i, t);   /* steals t */
    }
    for (int32_t ni = 0; pool && nodes && ni < g->nnodes; ni++) {
        const Node *nd = &g->nodes[ni];
        const SchemaParam *ps;
        int np = graph_node_params(g, ni, &ps);
        PyObject *params = nd->row >= 0 ? PyTuple_New(np) : Py_NewRef(Py_None);
        for (int i = 0; params && params != Py_None && i < np; i++) {
            PyObject *t = Py_BuildValue("(ssii)", ps[i].name, ps[i].call_name, ps[i].varargs, ps[i].fixed);
            if (!t) {
                Py_CLEAR(params);
                break;
            }
            PyTuple_SET_ITEM(params, i, t);   /* steals t */
        }
        if (!params)
            goto fail;
        PyObject *t = Py_BuildValue("(siisNiiiiiiO)", nd->op == OP_INPUT ? "input" : op_info[nd->op].name, nd->flags,
                                    nd->row, nd->row >= 0 ? op_info[callable_rows[nd->row].op].name : NULL, params,
                                    (int)nd->bound, (int)nd->nbound, (int)nd->args, (int)nd->nargs, (int)nd->kwargs,
                                    (int)nd->nkw, nd->kwnames >= 0 ? PyList_GET_ITEM(g->consts, nd->kwnames) : Py_None);
        if (!t)
            goto fail;
        PyList_SET_ITEM(nodes, ni, t);   /* steals t */
    }
    if (!pool || !nodes)
        goto fail;
    return Py_BuildValue("(NN)", pool, nodes);
fail:
    Py_XDECREF(pool);
    Py_XDECREF(nodes);
    return NULL;
}

/* ---------------------------------------------------- serialised form ---- */

static PyObject *graph_py_serialize(SjGraphObject *self, PyObject *unused)
{
    (void)unused;
    return graph_serialize(self->g, self->name);
}

static PyObject *graph_py_equals(SjGraphObject *self, PyObject *other)
{
    if (!PyObject_TypeCheck(other, &SjGraph_Type)) {
        PyErr_Format(PyExc_TypeError, "Graph.equals expects a Graph, not %s", Py_TYPE(other)->tp_name);
        return NULL;
    }
    int r = graph_equal(self->g, ((SjGraphObject *)other)->g);
    return r < 0 ? NULL : PyBool_FromLong(r);
}

static PyObject *graph_py_link(SjGraphObject *self, PyObject *unused)
{
    (void)unused;
    if (graph_link(self->g) < 0)
        return NULL;
    self->unlinked = 0;
    return Py_NewRef((PyObject *)self);
}

static PyObject *graph_get_linked(SjGraphObject *self, void *c)
{
    (void)c;
    return PyBool_FromLong(graph_is_linked(self->g));
}

/* Tests: a copy of the constants table, and a constant appended to it. */
static PyObject *graph_py_constants(SjGraphObject *self, PyObject *unused)
{
    (void)unused;
    return PyList_GetSlice(self->g->consts, 0, PY_SSIZE_T_MAX);
}

static PyObject *graph_py_add_constant(SjGraphObject *self, PyObject *obj)
{
    if (PyList_Append(self->g->consts, obj) < 0)
        return NULL;
    return PyLong_FromSsize_t(PyList_GET_SIZE(self->g->consts) - 1);
}

/* _C.graph_deserialize(text) -> Graph */
static PyObject *graph_py_deserialize(PyObject *module, PyObject *text)
{
    (void)module;
    PyObject *name = NULL;
    Graph *g = graph_deserialize(text, &name);
    if (!g)
        return NULL;
    PyObject *o = graph_py_wrap(g, name);
    Py_DECREF(name);
    if (o)
        ((SjGraphObject *)o)->unlinked = !graph_is_linked(g);
    return o;
}

static PyMethodDef graph_module_functions[] = {
    {"graph_deserialize", graph_py_deserialize, METH_O,
     "graph_deserialize(text) -> Graph: a graph read from Graph.serialize()'s text. Library "
     "objects stay unresolved GraphRefs (no torch or numpy import) until the graph is linked "
     "(link(), or its first call). ValueError naming the line for a malformed text."},
    {NULL, NULL, 0, NULL},
};

static PyMethodDef graph_methods[] = {
    {"serialize", (PyCFunction)graph_py_serialize, METH_NOARGS,
     "serialize() -> str: the graph as versioned text (graph/serial.c); TypeError naming the "
     "constant and its node when a constant has no serialised form."},
    {"equals", (PyCFunction)graph_py_equals, METH_O,
     "equals(other) -> bool: the same graph structurally, constants compared by value "
     "(whatever their place in the constants table, live or unresolved)."},
    {"format", (PyCFunction)(void (*)(void))graph_py_format, METH_VARARGS | METH_KEYWORDS,
     "format(*, bound=False) -> str: the listing (as .code); bound=True shows each call as the "
     "backends read it, by its callables.def path with its arguments bound to that row's "
     "parameter names."},
    {"_constants", (PyCFunction)graph_py_constants, METH_NOARGS, "a copy of the constants table (tests)"},
    {"_add_constant", (PyCFunction)graph_py_add_constant, METH_O, "append a constant no node uses; its index (tests)"},
    {"link", (PyCFunction)graph_py_link, METH_NOARGS,
     "link() -> self: resolve the library objects of a graph read from text (imports torch / "
     "numpy as needed)."},
    {"to_fx", (PyCFunction)graph_to_fx, METH_NOARGS,
     "to_fx() -> torch.fx.GraphModule: one call_function node per op, calling the op's "
     "original callable with its arguments; a placeholder per input; the outputs as a tuple."},
    {"_parts", (PyCFunction)graph_parts, METH_NOARGS, "(inputs, nodes, outputs) as plain data, for shapejit.fx."},
    {"_bound", (PyCFunction)graph_bound, METH_NOARGS,
     "(pool, nodes): each node's row and arguments bound to its schema, as plain data."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef graph_getset[] = {
    {"nodes", (getter)graph_get_nodes, NULL, "the nodes in execution order", NULL},
    {"inputs", (getter)graph_get_inputs, NULL, "source of each input, in call order", NULL},
    {"outputs", (getter)graph_get_outputs, NULL, "number of outputs", NULL},
    {"code", (getter)graph_get_code, NULL, "readable listing", NULL},
    {"op_count", (getter)graph_get_op_count, NULL, "number of ops (inputs excluded)", NULL},
    {"linked", (getter)graph_get_linked, NULL, "no constant is an unresolved GraphRef", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef graph_members[] = {
    {"name", T_OBJECT, offsetof(SjGraphObject, name), READONLY, "graph name"},
    {"mismatch", T_OBJECT, offsetof(SjGraphObject, mismatch), READONLY,
     "what the verified first run found wrong with the predicted shapes, or None"},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject SjGraph_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shapejit._C.Graph",
    .tp_basicsize = sizeof(SjGraphObject),
    .tp_dealloc = (destructor)graph_dealloc,
    .tp_repr = (reprfunc)graph_repr,
    .tp_call = (ternaryfunc)graph_call,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_getset = graph_getset,
    .tp_members = graph_members,
    .tp_methods = graph_methods,
    .tp_doc = "A captured graph. Call it with its inputs to run the ops eagerly.",
};

PyObject *graph_py_wrap(Graph *g, PyObject *name)
{
    SjGraphObject *o = PyObject_New(SjGraphObject, &SjGraph_Type);
    if (!o) {
        graph_free(g);
        return NULL;
    }
    o->g = g;
    o->name = Py_NewRef(name);
    o->verify_next = 0;
    o->verified = 0;
    o->mismatch = NULL;
    o->unlinked = 0;
    return (PyObject *)o;
}

int graph_py_init_types(PyObject *module)
{
    if (PyType_Ready(&SjGraph_Type) < 0 || PyType_Ready(&SjNode_Type) < 0)
        return -1;
    if (PyModule_AddObjectRef(module, "Graph", (PyObject *)&SjGraph_Type) < 0 ||
        PyModule_AddObjectRef(module, "Node", (PyObject *)&SjNode_Type) < 0 || serial_init_types(module) < 0 ||
        PyModule_AddFunctions(module, graph_module_functions) < 0)
        return -1;
    return 0;
}
