/* copy.deepcopy and copy.copy of values the capture models: constants, lists, tuples,
 * dicts, instances of user classes made in the frame, and user objects read through a
 * source (a transformers config: PreTrainedConfig.get_text_config deep-copies one, and
 * to_dict deep-copies its __dict__). The copy is a value made in the frame: new list,
 * tuple and dict vars, and for an object a VK_USEROBJ of its class whose attributes are
 * the copied __dict__. Reading an outside object's __dict__ guards its keys and each value
 * through its own source, so a compiled copy holds what a fresh copy would hold.
 *
 * What copy.py would do for anything else is not modelled: a tensor, a class with its own
 * __deepcopy__, __copy__, __reduce__, __reduce_ex__, __getstate__ or __setstate__, an
 * entry in copyreg.dispatch_table, __slots__, another metaclass, a container subclass;
 * then *handled is 0 and copy.py's code is inlined (and breaks where it cannot be
 * followed). An object reached twice in one copy is copied once (the memo), as copy.py
 * does.
 *
 * Memory: the memo lives in the capture's arena; the copy and deepcopy functions are
 * borrowed from sys.modules["copy"] at each call. */
#include "capture.h"
#include "../vocab/libs.h"
#include "../core/errors.h"

#define MEMO_MAX 256   /* distinct containers and objects one copy may reach */

typedef struct {
    Var *from[MEMO_MAX], *to[MEMO_MAX];
    int n;
} Memo;

/* The function copy.<name> (borrowed from the imported module), or NULL when copy is not
 * imported or has no such attribute. */
static PyObject *copy_fn(const char *name)
{
    PyObject *mods = PyImport_GetModuleDict();   /* borrowed */
    PyObject *mod = PyDict_GetItemString(mods, "copy");   /* borrowed */
    if (!mod || !PyModule_Check(mod))
        return NULL;
    PyObject *d = PyModule_GetDict(mod);   /* borrowed */
    return d ? PyDict_GetItemString(d, name) : NULL;
}

static int is_object_slot(PyTypeObject *t, const char *name)
{
    PyObject *n = PyUnicode_InternFromString(name);   /* new */
    if (!n) {
        sj_err_clear();
        return 0;
    }
    PyObject *mine = _PyType_Lookup(t, n), *base = _PyType_Lookup(&PyBaseObject_Type, n);   /* borrowed */
    Py_DECREF(n);
    return mine == base;
}

/* 1 when copy.py copies instances of t by object's own reduction: y = t.__new__(t), then
 * y.__dict__.update(state), state being the instance dict (copied for deepcopy). */
static int plain_copy_type(PyTypeObject *t)
{
    if (!(t->tp_flags & Py_TPFLAGS_HEAPTYPE) || t->tp_new != PyBaseObject_Type.tp_new || !t->tp_dictoffset ||
        t->tp_itemsize || (Py_TYPE(t) != &PyType_Type && strcmp(Py_TYPE(t)->tp_name, "ABCMeta") != 0))
        return 0;
    static const char *const own[] = {"__deepcopy__", "__copy__", "__setstate__"};
    for (size_t i = 0; i < sizeof own / sizeof *own; i++)
        if (!is_object_slot(t, own[i]))
            return 0;
    static const char *const objects[] = {"__reduce_ex__", "__reduce__", "__getstate__"};
    for (size_t i = 0; i < sizeof objects / sizeof *objects; i++)
        if (!is_object_slot(t, objects[i]))
            return 0;
    /* no __slots__ anywhere in the MRO (their values are not in __dict__) */
    PyObject *mro = t->tp_mro;
    for (Py_ssize_t i = 0; mro && i < PyTuple_GET_SIZE(mro); i++) {
        PyTypeObject *b = (PyTypeObject *)PyTuple_GET_ITEM(mro, i);
        if (b->tp_dict && PyDict_GetItemString(b->tp_dict, "__slots__"))
            return 0;
    }
    PyObject *copyreg = PyDict_GetItemString(PyImport_GetModuleDict(), "copyreg");   /* borrowed */
    PyObject *table = copyreg ? PyObject_GetAttrString(copyreg, "dispatch_table") : NULL;   /* new */
    int listed = table && PyDict_Check(table) ? PyDict_Contains(table, (PyObject *)t) : 1;
    Py_XDECREF(table);
    sj_err_clear();
    return listed == 0;
}

static Var *copy_var(Capture *c, Var *v, int deep, Memo *m, int *handled);

static Var *memo_find(Memo *m, Var *v)
{
    for (int i = 0; i < m->n; i++)
        if (m->from[i] == v)
            return m->to[i];
    return NULL;
}

static int memo_add(Memo *m, Var *from, Var *to)
{
    if (m->n == MEMO_MAX)
        return -1;
    m->from[m->n] = from;
    m->to[m->n++] = to;
    return 0;
}

static Var *copy_items(Capture *c, Var *v, int deep, Memo *m, int *handled)
{
    Var **items = cap_alloc(c, sizeof(Var *) * (size_t)(v->u.seq.n + 1));
    if (!items)
        return NULL;
    for (int32_t i = 0; i < v->u.seq.n; i++) {
        items[i] = deep ? copy_var(c, v->u.seq.items[i], 1, m, handled) : v->u.seq.items[i];
        if (!items[i])
            return NULL;
    }
    Var *r = var_seq(c, v->kind, items, v->u.seq.n);
    if (r)
        r->u.seq.subtype = v->u.seq.subtype;   /* a namedtuple's class (kept alive already) */
    return r;
}

static Var *copy_dict(Capture *c, Var *v, int deep, Memo *m, int *handled)
{
    if (var_dict_force(c, v) < 0)
        return NULL;
    Var *d = var_dict(c);
    if (!d)
        return NULL;
    if (memo_add(m, v, d) < 0) {
        *handled = 0;
        return NULL;
    }
    for (int32_t i = 0; i < v->u.dict.n; i++) {
        Var *val = deep ? copy_var(c, v->u.dict.vals[i], 1, m, handled) : v->u.dict.vals[i];
        if (!val || var_dict_set(c, d, v->u.dict.keys[i], val) < 0)
            return NULL;
    }
    return d;
}

/* 1 when the dict var state of a config holds a _heterogeneity_spec that is not None. */
static int config_is_heterogeneous(Var *state)
{
    for (int32_t i = 0; i < state->u.dict.n; i++) {
        Var *k = state->u.dict.keys[i], *val = state->u.dict.vals[i];
        if (k->obj && PyUnicode_Check(k->obj) && PyUnicode_CompareWithASCIIString(k->obj, "_heterogeneity_spec") == 0)
            return !(val->kind == VK_CONST && val->obj == Py_None);
    }
    return 0;
}

/* An instance of type t whose instance dict is the dict var state: copied (deep) or
 * shared entries (shallow) in a new VK_USEROBJ. */
static Var *copy_object(Capture *c, Var *v, PyTypeObject *t, Var *state, int deep, Memo *m, int *handled)
{
    if (!cap_keep(c, (PyObject *)t))
        return NULL;
    if (attr_is_config_type(t) && config_is_heterogeneous(state)) {
        *handled = 0;   /* its __getattribute__ is the heterogeneity mixin's own */
        return NULL;
    }
    Var *o = var_new(c, VK_USEROBJ);
    if (!o)
        return NULL;
    if (memo_add(m, v, o) < 0) {
        *handled = 0;
        return NULL;
    }
    o->u.uobj.type = t;
    o->u.uobj.attrs = copy_dict(c, state, deep, m, handled);
    return o->u.uobj.attrs ? o : NULL;
}

/* The copy of v, or NULL: with *handled 0 when v holds something this file does not
 * model (no failure recorded), else with the capture's failure set. */
static Var *copy_var(Capture *c, Var *v, int deep, Memo *m, int *handled)
{
    Var *seen = memo_find(m, v);
    if (seen)
        return seen;
    switch (v->kind) {
    case VK_CONST: {
        /* immutable values: copy.py returns them (a tuple of them: the tuple) */
        PyObject *fn = copy_fn(deep ? "deepcopy" : "copy");
        PyObject *r = fn ? PyObject_CallOneArg(fn, v->obj) : NULL;   /* new */
        if (!r) {
            sj_err_clear();
            *handled = 0;
            return NULL;
        }
        int same = r == v->obj;
        Py_DECREF(r);
        if (!same)
            *handled = 0;
        return same ? v : NULL;
    }
    case VK_SYMINT:
    case VK_GSCALAR:
        return v;   /* numbers: immutable */
    case VK_TUPLE:
        if (v->u.seq.subtype && PyType_IsSubtype(v->u.seq.subtype, &PyTuple_Type) &&
            !objects_fields(v->u.seq.subtype)) {
            sj_err_clear();
            *handled = 0;
            return NULL;
        }
        return deep ? copy_items(c, v, 1, m, handled) : v;
    case VK_LIST: {
        /* a deque; a list from outside the frame without a source (its items unguarded) */
        if (v->u.seq.subtype || (v->untracked && v->src < 0)) {
            *handled = 0;
            return NULL;
        }
        Var *r = copy_items(c, v, deep, m, handled);
        if (r && memo_add(m, v, r) < 0) {
            *handled = 0;
            return NULL;
        }
        return r;
    }
    case VK_DICT:
        if (v->u.dict.subtype || (v->untracked && v->src < 0)) {   /* OrderedDict, defaultdict, Counter */
            *handled = 0;
            return NULL;
        }
        return copy_dict(c, v, deep, m, handled);
    case VK_USEROBJ:
        if (v->u.uobj.record || !plain_copy_type(v->u.uobj.type)) {
            *handled = 0;
            return NULL;
        }
        return copy_object(c, v, v->u.uobj.type, v->u.uobj.attrs, deep, m, handled);
    case VK_OBJECT: {
        if (!v->obj || v->src < 0 || !plain_copy_type(Py_TYPE(v->obj))) {
            *handled = 0;
            return NULL;
        }
        static PyObject *s_dict;   /* strong, interned */
        if (!s_dict && !(s_dict = PyUnicode_InternFromString("__dict__"))) {
            cap_fail_exc(c, BR_INTERNAL);
            return NULL;
        }
        Var *state = attr_load(c, v, s_dict);   /* keys and values guarded through their sources */
        if (!state)
            return NULL;
        if (state->kind != VK_DICT) {
            *handled = 0;
            return NULL;
        }
        return copy_object(c, v, Py_TYPE(v->obj), state, deep, m, handled);
    }
    default:
        *handled = 0;
        return NULL;
    }
}

Var *copies_call(Capture *c, PyObject *fn, Var **args, int32_t nargs, PyObject *kwnames, int *handled)
{
    *handled = 0;
    if (nargs != 1 || kwnames)
        return NULL;   /* deepcopy(x, memo): copy.py's own code */
    int deep;
    if (fn == copy_fn("deepcopy"))
        deep = 1;
    else if (fn == copy_fn("copy"))
        deep = 0;
    else
        return NULL;
    Memo *m = cap_alloc(c, sizeof(Memo));
    if (!m)
        return NULL;
    m->n = 0;
    *handled = 1;
    Var *r = copy_var(c, args[0], deep, m, handled);
    if (!r && *handled && !cap_failed(c))
        cap_fail(c, BR_INTERNAL, "copy of %s", var_a(c, args[0]));
    return r;
}
