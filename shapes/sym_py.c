/* The test harness of the symbolic integers (sym.h): shapejit._C._SymEnv.
 *
 *   env = _C._SymEnv()
 *   s = env.symbol(10)                  # s0, hint 10, range [2, int_oo]
 *   u = env.unbacked()                  # u0, range [-int_oo, int_oo]
 *   e = (s + 1) * 2 // 3                # handles and ints mix: + - * // % and unary -
 *   r = s >= 2                          # == != < <= > >= build relations; True/False fold
 *   str(e), e.hint(), e.range(), r.truth(), e.eval({s: 5}), e.print_with({s: "L['x']"})
 *   env.min(a, b, ...), env.max(...), env.narrow(s, lo, hi) -> changed
 *
 * One handle object per node while it lives, so `is` is hash-consed equality: the env
 * keeps a borrowed pointer to each live handle (indexed by node id) and a handle clears
 * its entry when it dies. Handles hold the env strongly; the env holds no Python objects,
 * so there is no cycle and no GC support is needed. Not a public API. */
#include "sym.h"

/* ---------------------------------------------------------------- types ---- */

typedef struct {
    PyObject_HEAD SymEnv *env;            /* owned; freed in dealloc, after the last handle died */
    PyObject **handles;     /* owned array of borrowed pointers: the live handle of node id i */
    uint32_t cap;           /* entries in handles */
} SymEnvObject;

typedef struct {
    PyObject_HEAD SymEnvObject *owner;    /* strong: keeps the env, and so node, alive */
    SymNode *node;          /* owned by owner->env's arena */
} SymHandleObject;

static PyTypeObject SymEnv_Type;
static PyTypeObject SymHandle_Type;

#define IS_HANDLE(o) Py_IS_TYPE((o), &SymHandle_Type)

/* New reference to the handle of node (NULL passes an error through). */
static PyObject *wrap(SymEnvObject *owner, SymNode *node)
{
    if (!node)
        return NULL;
    if (node->id >= owner->cap) {
        uint32_t cap = owner->cap ? owner->cap : 64;
        while (cap <= node->id)
            cap *= 2;
        PyObject **h = PyMem_Realloc(owner->handles, cap * sizeof *h);
        if (!h)
            return PyErr_NoMemory();
        memset(h + owner->cap, 0, (cap - owner->cap) * sizeof *h);
        owner->handles = h;
        owner->cap = cap;
    }
    if (owner->handles[node->id])
        return Py_NewRef(owner->handles[node->id]);
    SymHandleObject *o = PyObject_New(SymHandleObject, &SymHandle_Type);
    if (!o)
        return NULL;
    o->owner = (SymEnvObject *)Py_NewRef(owner);
    o->node = node;
    owner->handles[node->id] = (PyObject *)o;
    return (PyObject *)o;
}

static void handle_dealloc(SymHandleObject *h)
{
    if (h->owner->handles[h->node->id] == (PyObject *)h)
        h->owner->handles[h->node->id] = NULL;
    Py_DECREF(h->owner);
    PyObject_Free(h);
}

static void env_dealloc(SymEnvObject *e)
{
    sym_env_free(e->env);
    PyMem_Free(e->handles);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

static PyObject *env_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    if (!PyArg_ParseTuple(args, ":_SymEnv") || (kw && PyDict_GET_SIZE(kw))) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "_SymEnv() takes no arguments");
        return NULL;
    }
    SymEnvObject *e = (SymEnvObject *)type->tp_alloc(type, 0);
    if (!e)
        return NULL;
    e->handles = NULL;
    e->cap = 0;
    if (!(e->env = sym_env_new())) {
        Py_DECREF(e);
        return NULL;
    }
    return (PyObject *)e;
}

/* ------------------------------------------------------------- operands ---- */

/* A handle of owner, or an int made a constant: 0 with *out set, 1 when o is neither
 * (NotImplemented), -1 with an exception. o borrowed. */
static int operand(SymEnvObject *owner, PyObject *o, SymNode **out)
{
    if (IS_HANDLE(o)) {
        if (((SymHandleObject *)o)->owner != owner) {
            PyErr_SetString(PyExc_TypeError, "symbolic expressions from different _SymEnv objects");
            return -1;
        }
        *out = ((SymHandleObject *)o)->node;
        return 0;
    }
    if (!PyLong_Check(o))
        return 1;
    long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred())
        return -1;
    return (*out = sym_const(owner->env, v)) ? 0 : -1;
}

/* None is the infinity on that side; else an int. */
static int bound(PyObject *o, int64_t inf, int64_t *out)
{
    if (!o || o == Py_None) {
        *out = inf;
        return 0;
    }
    long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred())
        return -1;
    *out = v;
    return 0;
}

typedef SymNode *(*BinFn)(SymEnv *, SymNode *, SymNode *);

static PyObject *binop(PyObject *a, PyObject *b, BinFn fn)
{
    SymEnvObject *owner = IS_HANDLE(a) ? ((SymHandleObject *)a)->owner : ((SymHandleObject *)b)->owner;
    SymNode *x, *y;
    int ra = operand(owner, a, &x);
    if (ra)
        return ra < 0 ? NULL : Py_NewRef(Py_NotImplemented);
    int rb = operand(owner, b, &y);
    if (rb)
        return rb < 0 ? NULL : Py_NewRef(Py_NotImplemented);
    return wrap(owner, fn(owner->env, x, y));
}

static PyObject *h_add(PyObject *a, PyObject *b)
{
    return binop(a, b, sym_add);
}
static PyObject *h_sub(PyObject *a, PyObject *b)
{
    return binop(a, b, sym_sub);
}
static PyObject *h_mul(PyObject *a, PyObject *b)
{
    return binop(a, b, sym_mul);
}
static PyObject *h_floordiv(PyObject *a, PyObject *b)
{
    return binop(a, b, sym_floordiv);
}
static PyObject *h_mod(PyObject *a, PyObject *b)
{
    return binop(a, b, sym_mod);
}

static PyObject *h_neg(SymHandleObject *h)
{
    return wrap(h->owner, sym_neg(h->owner->env, h->node));
}
static PyObject *h_pos(PyObject *h)
{
    return Py_NewRef(h);
}

/* bool(): a decided relation (or True/False); anything else has no truth value. */
static int h_bool(SymHandleObject *h)
{
    if (sym_is_bool(h->node)) {
        SymTruth t = sym_static_truth(h->owner->env, h->node);
        if (t != SYM_UNKNOWN)
            return t == SYM_TRUE;
    }
    PyObject *s = sym_print(h->owner->env, h->node, NULL, NULL);
    if (s) {
        PyErr_Format(PyExc_TypeError, "cannot determine the truth value of %U", s);
        Py_DECREF(s);
    }
    return -1;
}

static PyObject *h_richcompare(PyObject *a, PyObject *b, int op)
{
    static const BinFn fns[] = {
        [Py_LT] = sym_lt, [Py_LE] = sym_le, [Py_EQ] = sym_eq, [Py_NE] = sym_ne, [Py_GT] = sym_gt, [Py_GE] = sym_ge,
    };
    return binop(a, b, fns[op]);
}

static Py_hash_t h_hash(SymHandleObject *h)
{
    Py_hash_t v = (Py_hash_t)h->node->hash;
    return v == -1 ? -2 : v;
}

static PyObject *h_str(SymHandleObject *h)
{
    return sym_print(h->owner->env, h->node, NULL, NULL);
}

static PyNumberMethods handle_number = {
    .nb_add = h_add,
    .nb_subtract = h_sub,
    .nb_multiply = h_mul,
    .nb_remainder = h_mod,
    .nb_floor_divide = h_floordiv,
    .nb_negative = (unaryfunc)h_neg,
    .nb_positive = h_pos,
    .nb_bool = (inquiry)h_bool,
};

/* -------------------------------------------------------- handle methods ---- */

static PyObject *bound_obj(int64_t v)
{
    if (v == SYM_INT_OO || v == SYM_NEG_INT_OO)
        Py_RETURN_NONE;
    return PyLong_FromLongLong(v);
}

static PyObject *h_range(SymHandleObject *h, PyObject *unused)
{
    (void)unused;
    SymRange r = sym_range(h->owner->env, h->node);
    PyObject *lo = bound_obj(r.lo), *hi = lo ? bound_obj(r.hi) : NULL;
    PyObject *t = hi ? PyTuple_Pack(2, lo, hi) : NULL;
    Py_XDECREF(lo);
    Py_XDECREF(hi);
    return t;
}

static PyObject *h_range_str(SymHandleObject *h, PyObject *unused)
{
    (void)unused;
    return sym_range_str(sym_range(h->owner->env, h->node));
}

static PyObject *result(SymNode *node, int64_t v)
{
    return sym_is_bool(node) ? PyBool_FromLong(v != 0) : PyLong_FromLongLong(v);
}

static PyObject *h_hint(SymHandleObject *h, PyObject *unused)
{
    (void)unused;
    int64_t v;
    if (sym_eval_hint(h->owner->env, h->node, &v) < 0)
        return NULL;
    return result(h->node, v);
}

static PyObject *h_truth(SymHandleObject *h, PyObject *unused)
{
    (void)unused;
    SymTruth t = sym_static_truth(h->owner->env, h->node);
    if (t == SYM_UNKNOWN)
        Py_RETURN_NONE;
    return PyBool_FromLong(t == SYM_TRUE);
}

/* The symbol node of a dict key (borrowed), or NULL with TypeError. */
static SymNode *key_symbol(SymHandleObject *h, PyObject *key)
{
    if (!IS_HANDLE(key) || ((SymHandleObject *)key)->owner != h->owner ||
        !sym_is_symbol(((SymHandleObject *)key)->node)) {
        PyErr_SetString(PyExc_TypeError, "keys must be symbols of the same _SymEnv");
        return NULL;
    }
    return ((SymHandleObject *)key)->node;
}

/* h.eval({symbol: int, ...}) -> int, or bool for a relation. */
static PyObject *h_eval(SymHandleObject *h, PyObject *values)
{
    if (!PyDict_Check(values)) {
        PyErr_SetString(PyExc_TypeError, "eval() expects a dict {symbol: int}");
        return NULL;
    }
    int32_t n = sym_env_nsymbols(h->owner->env);
    int64_t *vals = PyMem_Calloc((size_t)n + 1, sizeof *vals);
    uint8_t *known = PyMem_Calloc((size_t)n + 1, 1);
    PyObject *key, *value, *out = NULL;
    Py_ssize_t pos = 0;
    if (!vals || !known) {
        PyErr_NoMemory();
        goto done;
    }
    while (PyDict_Next(values, &pos, &key, &value)) {
        SymNode *s = key_symbol(h, key);
        if (!s)
            goto done;
        long long v = PyLong_AsLongLong(value);
        if (v == -1 && PyErr_Occurred())
            goto done;
        vals[s->slot] = v;
        known[s->slot] = 1;
    }
    int64_t v;
    if (sym_eval_with(h->owner->env, h->node, vals, known, &v) == 0)
        out = result(h->node, v);
done:
    PyMem_Free(vals);
    PyMem_Free(known);
    return out;
}

static const char *name_by_slot(void *ctx, const SymNode *sym)
{
    return ((const char **)ctx)[sym->slot];
}

/* h.print_with({symbol: "L['x'].size()[0]", ...}) -> str; absent symbols print as s<N>. */
static PyObject *h_print_with(SymHandleObject *h, PyObject *names)
{
    if (!PyDict_Check(names)) {
        PyErr_SetString(PyExc_TypeError, "print_with() expects a dict {symbol: str}");
        return NULL;
    }
    int32_t n = sym_env_nsymbols(h->owner->env);
    /* borrowed UTF-8 buffers of the dict's strings: nothing runs Python code meanwhile */
    const char **table = PyMem_Calloc((size_t)n + 1, sizeof *table);
    PyObject *key, *value, *out = NULL;
    Py_ssize_t pos = 0;
    if (!table)
        return PyErr_NoMemory();
    while (PyDict_Next(names, &pos, &key, &value)) {
        SymNode *s = key_symbol(h, key);
        if (!s)
            goto done;
        if (!PyUnicode_Check(value)) {
            PyErr_SetString(PyExc_TypeError, "print_with() names must be str");
            goto done;
        }
        if (!(table[s->slot] = PyUnicode_AsUTF8(value)))
            goto done;
    }
    out = sym_print(h->owner->env, h->node, name_by_slot, table);
done:
    PyMem_Free(table);
    return out;
}

static PyObject *h_kind(SymHandleObject *h, void *unused)
{
    (void)unused;
    return PyUnicode_FromString(sym_kind_name((SymKind)h->node->kind));
}

static PyObject *h_args(SymHandleObject *h, void *unused)
{
    (void)unused;
    PyObject *t = PyTuple_New(h->node->nargs);
    for (uint32_t i = 0; t && i < h->node->nargs; i++) {
        PyObject *a = wrap(h->owner, h->node->args[i]);
        if (!a)
            Py_CLEAR(t);
        else
            PyTuple_SET_ITEM(t, i, a);
    }
    return t;
}

static PyMethodDef handle_methods[] = {
    {"hint", (PyCFunction)h_hint, METH_NOARGS, "Value with every backed symbol at its hint."},
    {"range", (PyCFunction)h_range, METH_NOARGS, "(lo, hi), None for an infinite bound."},
    {"range_str", (PyCFunction)h_range_str, METH_NOARGS, "The range as the dynamic log prints it."},
    {"truth", (PyCFunction)h_truth, METH_NOARGS, "Static truth of a relation: True, False or None."},
    {"eval", (PyCFunction)h_eval, METH_O, "Value under {symbol: int}."},
    {"print_with", (PyCFunction)h_print_with, METH_O, "Text with symbols named by {symbol: str}."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef handle_getset[] = {
    {"kind", (getter)h_kind, NULL, "node kind (shapes/sym_ops.def)", NULL},
    {"args", (getter)h_args, NULL, "operands, in canonical order", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* ----------------------------------------------------------- env methods ---- */

static PyObject *env_symbol(SymEnvObject *e, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"hint", "lo", "hi", NULL};
    long long hint;
    PyObject *lo = NULL, *hi = NULL;
    SymRange r = sym_range_default_backed();
    if (!PyArg_ParseTupleAndKeywords(args, kw, "L|OO:symbol", kwlist, &hint, &lo, &hi) ||
        (lo && bound(lo, SYM_NEG_INT_OO, &r.lo) < 0) || (hi && bound(hi, SYM_INT_OO, &r.hi) < 0))
        return NULL;
    return wrap(e, sym_symbol(e->env, hint, r));
}

static PyObject *env_unbacked(SymEnvObject *e, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"lo", "hi", NULL};
    PyObject *lo = NULL, *hi = NULL;
    SymRange r;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OO:unbacked", kwlist, &lo, &hi) ||
        bound(lo, SYM_NEG_INT_OO, &r.lo) < 0 || bound(hi, SYM_INT_OO, &r.hi) < 0)
        return NULL;
    return wrap(e, sym_unbacked(e->env, r));
}

static PyObject *env_const(SymEnvObject *e, PyObject *v)
{
    SymNode *n;
    int rc = operand(e, v, &n);
    if (rc > 0)
        PyErr_SetString(PyExc_TypeError, "const() expects an int");
    return rc == 0 ? wrap(e, n) : NULL;
}

static PyObject *env_minmax(SymEnvObject *e, PyObject *args, SymNode *(*fn)(SymEnv *, SymNode *const *, uint32_t))
{
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    if (n < 1) {
        PyErr_SetString(PyExc_TypeError, "min()/max() need at least one operand");
        return NULL;
    }
    SymNode **v = PyMem_Calloc((size_t)n, sizeof *v);
    PyObject *out = NULL;
    if (!v)
        return PyErr_NoMemory();
    Py_ssize_t i = 0;
    for (; i < n; i++) {
        int rc = operand(e, PyTuple_GET_ITEM(args, i), &v[i]);
        if (rc) {
            if (rc > 0)
                PyErr_SetString(PyExc_TypeError, "min()/max() operands must be ints or expressions");
            break;
        }
    }
    if (i == n)
        out = wrap(e, fn(e->env, v, (uint32_t)n));
    PyMem_Free(v);
    return out;
}

static PyObject *env_min(SymEnvObject *e, PyObject *args)
{
    return env_minmax(e, args, sym_min_n);
}
static PyObject *env_max(SymEnvObject *e, PyObject *args)
{
    return env_minmax(e, args, sym_max_n);
}

/* env.narrow(sym, lo=None, hi=None) -> whether the range changed. */
static PyObject *env_narrow(SymEnvObject *e, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"sym", "lo", "hi", NULL};
    PyObject *s, *lo = NULL, *hi = NULL;
    SymRange r;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|OO:narrow", kwlist, &SymHandle_Type, &s, &lo, &hi) ||
        bound(lo, SYM_NEG_INT_OO, &r.lo) < 0 || bound(hi, SYM_INT_OO, &r.hi) < 0)
        return NULL;
    if (((SymHandleObject *)s)->owner != e) {
        PyErr_SetString(PyExc_TypeError, "narrow() needs a symbol of this _SymEnv");
        return NULL;
    }
    int rc = sym_set_range(e->env, ((SymHandleObject *)s)->node, r);
    return rc < 0 ? NULL : PyBool_FromLong(rc);
}

static PyObject *env_true(SymEnvObject *e, PyObject *unused)
{
    (void)unused;
    return wrap(e, sym_bool(e->env, 1));
}

static PyObject *env_false(SymEnvObject *e, PyObject *unused)
{
    (void)unused;
    return wrap(e, sym_bool(e->env, 0));
}

static PyObject *env_nodes(SymEnvObject *e, void *unused)
{
    (void)unused;
    return PyLong_FromUnsignedLong(sym_env_nnodes(e->env));
}

static PyMethodDef env_methods[] = {
    {"symbol", (PyCFunction)(void (*)(void))env_symbol, METH_VARARGS | METH_KEYWORDS,
     "symbol(hint, lo=2, hi=None): a new backed symbol s<N>."},
    {"unbacked", (PyCFunction)(void (*)(void))env_unbacked, METH_VARARGS | METH_KEYWORDS,
     "unbacked(lo=None, hi=None): a new unbacked symbol u<N>."},
    {"const", (PyCFunction)env_const, METH_O, "The constant node of an int."},
    {"min", (PyCFunction)env_min, METH_VARARGS, "Min of expressions and ints."},
    {"max", (PyCFunction)env_max, METH_VARARGS, "Max of expressions and ints."},
    {"narrow", (PyCFunction)(void (*)(void))env_narrow, METH_VARARGS | METH_KEYWORDS,
     "narrow(sym, lo=None, hi=None): intersect sym's range; True when it changed."},
    {"true", (PyCFunction)env_true, METH_NOARGS, "The True node."},
    {"false", (PyCFunction)env_false, METH_NOARGS, "The False node."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef env_getset[] = {
    {"nodes", (getter)env_nodes, NULL, "nodes created so far (hash-consing keeps this small)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SymHandle_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shapejit._C._Sym",
    .tp_basicsize = sizeof(SymHandleObject),
    .tp_dealloc = (destructor)handle_dealloc,
    .tp_repr = (reprfunc)h_str,
    .tp_str = (reprfunc)h_str,
    .tp_hash = (hashfunc)h_hash,
    .tp_as_number = &handle_number,
    .tp_richcompare = h_richcompare,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_methods = handle_methods,
    .tp_getset = handle_getset,
    .tp_doc = "A symbolic integer or relation of a _SymEnv (test harness).",
};

static PyTypeObject SymEnv_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shapejit._C._SymEnv",
    .tp_basicsize = sizeof(SymEnvObject),
    .tp_dealloc = (destructor)env_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_methods = env_methods,
    .tp_getset = env_getset,
    .tp_new = env_new,
    .tp_doc = "A symbolic-integer environment (test harness of shapes/sym.h).",
};

int sym_py_init_types(PyObject *module)
{
    if (sym_init(module) < 0 || PyType_Ready(&SymHandle_Type) < 0 || PyType_Ready(&SymEnv_Type) < 0)
        return -1;
    return PyModule_AddObjectRef(module, "_SymEnv", (PyObject *)&SymEnv_Type);
}
