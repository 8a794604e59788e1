/* Interning, printing and resolving sources. */
#include "sources.h"
#include "../vocab/tensor_reader.h"
#include "../core/errors.h"
#include "../core/pyutil.h"

void sources_clear(SourceTable *t)
{
    for (int32_t i = 0; i < t->n; i++) {
        Py_XDECREF(t->e[i].key);
        Py_XDECREF(t->e[i].obj);
        Py_XDECREF(t->e[i].repr);
    }
    PyMem_Free(t->e);
    t->e = NULL;
    t->n = t->cap = 0;
}

static PyObject *make_repr(const SourceTable *t, SourceKind kind, int32_t base, int32_t index, PyObject *key,
                           PyObject *obj)
{
    PyObject *b = base >= 0 ? t->e[base].repr : NULL;
    switch (kind) {
    case SRC_LOCAL:
    case SRC_FREEVAR:
        return PyUnicode_FromFormat("L[%R]", key);
    case SRC_GLOBAL:
        return PyUnicode_FromFormat("G[%R]", key);
    case SRC_MODGLOBAL: {
        PyObject *mod = PyDict_GetItemString(obj, "__name__");   /* borrowed */
        if (mod && PyUnicode_Check(mod))
            return PyUnicode_FromFormat("G['__import_%U'].%U", mod, key);
        return PyUnicode_FromFormat("G['<module>'].%U", key);
    }
    case SRC_ATTR:
        return PyUnicode_FromFormat("%U.%U", b, key);
    case SRC_ITEM:
        return PyUnicode_FromFormat("%U[%R]", b, key);
    case SRC_DICT_ITEM:
        return PyUnicode_FromFormat("dict.__getitem__(%U, %R)", b, key);
    case SRC_CELL:
        return PyUnicode_FromFormat("%U.__closure__[%d].cell_contents", b, index);
    case SRC_DEFAULT:
        return PyUnicode_FromFormat("%U.__defaults__[%d]", b, index);
    case SRC_KWDEFAULT:
        return PyUnicode_FromFormat("%U.__kwdefaults__[%R]", b, key);
    case SRC_SIZE:
        return PyUnicode_FromFormat("%U.size()[%d]", b, index);
    case SRC_STRIDE:
        return PyUnicode_FromFormat("%U.stride()[%d]", b, index);
    case SRC_CALL:
        return Py_NewRef(PyTuple_GET_ITEM(key, 2));
    case SRC_HELD: {
        PyObject *q = PyObject_GetAttrString(obj, "__qualname__");   /* new */
        PyObject *r = q && PyUnicode_Check(q) ? PyUnicode_FromFormat("___held[%R]", q)
                                              : (sj_err_clear(), PyUnicode_FromString("___held[?]"));
        Py_XDECREF(q);
        return r;
    }
    }
    PyErr_SetString(PyExc_SystemError, "shapejit: bad source kind");
    return NULL;
}

int sources_same_key(PyObject *a, PyObject *b)
{
    if (a == b)
        return 1;
    if (!a || !b || Py_TYPE(a) != Py_TYPE(b))
        return 0;
    int r = PyObject_RichCompareBool(a, b, Py_EQ);
    if (r < 0) {
        sj_err_clear();
        return 0;
    }
    return r;
}

int32_t sources_add(SourceTable *t, SourceKind kind, int32_t base, int32_t index, PyObject *key, PyObject *obj)
{
    for (int32_t i = 0; i < t->n; i++) {
        SourceEntry *e = &t->e[i];
        if (e->kind == kind && e->base == base && e->index == index && e->obj == obj && sources_same_key(e->key, key))
            return i;
    }
    if (sj_grow((void **)&t->e, &t->cap, t->n + 1, sizeof(SourceEntry), 16) < 0)
        return -1;
    PyObject *repr = make_repr(t, kind, base, index, key, obj);
    if (!repr)
        return -1;
    SourceEntry *e = &t->e[t->n];
    e->kind = (uint8_t)kind;
    e->base = base;
    e->index = index;
    e->key = Py_XNewRef(key);
    e->obj = Py_XNewRef(obj);
    e->repr = repr;
    e->rc = (ReadCache){0};
    return t->n++;
}

/* New reference, or NULL with an exception set. e's read cache is written. */
static PyObject *resolve_one(const SourceTable *t, SourceEntry *e, const FrameView *fv, PyObject **memo)
{
    PyObject *base = NULL;
    if (e->base >= 0 && !(base = sources_resolve(t, e->base, fv, memo)))
        return NULL;
    switch ((SourceKind)e->kind) {
    case SRC_LOCAL: {
        PyObject *v = fv->locals[e->index];
        if (!v) {
            PyErr_Format(PyExc_NameError, "local %R is not set", e->key);
            return NULL;
        }
        return Py_NewRef(v);
    }
    case SRC_FREEVAR: {
        if (!fv->closure || e->index >= PyTuple_GET_SIZE(fv->closure)) {
            PyErr_Format(PyExc_NameError, "free variable %R has no cell", e->key);
            return NULL;
        }
        PyObject *v = PyCell_GET(PyTuple_GET_ITEM(fv->closure, e->index));
        if (!v) {
            PyErr_Format(PyExc_NameError, "free variable %R is empty", e->key);
            return NULL;
        }
        return Py_NewRef(v);
    }
    case SRC_GLOBAL: {
        PyObject *v = readcache_dict_read(&e->rc, fv->globals, e->key);
        if (!v && !PyErr_Occurred() && fv->builtins && PyDict_Check(fv->builtins))
            v = PyDict_GetItemWithError(fv->builtins, e->key);
        if (!v) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_NameError, "global %R is not defined", e->key);
            return NULL;
        }
        return Py_NewRef(v);
    }
    case SRC_MODGLOBAL: {
        PyObject *v = readcache_dict_read(&e->rc, e->obj, e->key);
        if (!v && !PyErr_Occurred()) {
            /* a builtin read from another module's code: that module's __builtins__ */
            PyObject *b = PyDict_GetItemString(e->obj, "__builtins__");   /* borrowed */
            if (b && PyModule_Check(b))
                b = PyModule_GetDict(b);
            if (b && PyDict_Check(b))
                v = PyDict_GetItemWithError(b, e->key);
        }
        if (!v) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_NameError, "global %R is not defined", e->key);
            return NULL;
        }
        return Py_NewRef(v);
    }
    case SRC_ATTR: {
        PyObject *v = readcache_attr_get(&e->rc, base);
        if (v)
            return Py_NewRef(v);
        if ((v = PyObject_GetAttr(base, e->key)))
            readcache_attr_fill(&e->rc, base, e->key, v);
        return v;
    }
    case SRC_ITEM:
        if (PyDict_CheckExact(base)) {
            PyObject *v = readcache_dict_read(&e->rc, base, e->key);
            if (!v && !PyErr_Occurred())
                PyErr_SetObject(PyExc_KeyError, e->key);
            return Py_XNewRef(v);
        }
        if (PyList_CheckExact(base) || PyTuple_CheckExact(base)) {
            Py_ssize_t i = PyLong_AsSsize_t(e->key);
            if (i == -1 && PyErr_Occurred())
                return NULL;
            return PySequence_GetItem(base, i);
        }
        return PyObject_GetItem(base, e->key);
    case SRC_DICT_ITEM: {
        if (!PyDict_Check(base)) {
            PyErr_Format(PyExc_TypeError, "a dict was expected, not %s", Py_TYPE(base)->tp_name);
            return NULL;
        }
        /* no __missing__: a key that is gone fails the read, and the leaves on it */
        PyObject *v = readcache_dict_read(&e->rc, base, e->key);
        if (!v && !PyErr_Occurred())
            PyErr_SetObject(PyExc_KeyError, e->key);
        return Py_XNewRef(v);
    }
    case SRC_CELL: {
        PyObject *clo = PyFunction_Check(base) ? PyFunction_GET_CLOSURE(base) : NULL;
        if (!clo || e->index >= PyTuple_GET_SIZE(clo)) {
            PyErr_SetString(PyExc_AttributeError, "function has no such closure cell");
            return NULL;
        }
        PyObject *v = PyCell_GET(PyTuple_GET_ITEM(clo, e->index));
        if (!v) {
            PyErr_SetString(PyExc_NameError, "closure cell is empty");
            return NULL;
        }
        return Py_NewRef(v);
    }
    case SRC_DEFAULT: {
        PyObject *d = PyFunction_Check(base) ? PyFunction_GET_DEFAULTS(base) : NULL;
        if (!d || e->index >= PyTuple_GET_SIZE(d)) {
            PyErr_SetString(PyExc_AttributeError, "function has no such default");
            return NULL;
        }
        return Py_NewRef(PyTuple_GET_ITEM(d, e->index));
    }
    case SRC_KWDEFAULT: {
        PyObject *d = PyFunction_Check(base) ? PyFunction_GET_KW_DEFAULTS(base) : NULL;
        PyObject *v = d ? PyDict_GetItemWithError(d, e->key) : NULL;
        if (!v) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_AttributeError, "function has no such keyword default");
            return NULL;
        }
        return Py_NewRef(v);
    }
    case SRC_SIZE:
    case SRC_STRIDE: {
        TensorMeta m;
        int64_t st[SJ_MAX_RANK];
        const char *why = NULL;
        int r = treader_read(base, &m, st, &why);
        if (r != 0) {
            if (r > 0)
                PyErr_Format(PyExc_TypeError, "%s is not a supported tensor: %s", Py_TYPE(base)->tp_name, why);
            return NULL;
        }
        if (e->index >= m.ndim) {
            PyErr_Format(PyExc_IndexError, "dimension %d out of range for a tensor of rank %d", e->index, (int)m.ndim);
            return NULL;
        }
        return PyLong_FromLongLong(e->kind == SRC_SIZE ? m.size[e->index] : st[e->index]);
    }
    case SRC_CALL: {
        PyObject *kw = PyTuple_GET_ITEM(e->key, 1);
        return PyObject_Call(e->obj, PyTuple_GET_ITEM(e->key, 0), kw == Py_None ? NULL : kw);
    }
    case SRC_HELD:
        return Py_NewRef(e->obj);
    }
    PyErr_SetString(PyExc_SystemError, "shapejit: bad source kind");
    return NULL;
}

PyObject *sources_resolve(const SourceTable *t, int32_t id, const FrameView *fv, PyObject **memo)
{
    if (memo[id])
        return memo[id];
    /* the table is const to its readers except for the entries' read caches */
    PyObject *v = resolve_one(t, (SourceEntry *)&t->e[id], fv, memo);
    memo[id] = v;
    return v;
}

void sources_memo_clear(PyObject **memo, int32_t n)
{
    for (int32_t i = 0; i < n; i++)
        Py_CLEAR(memo[i]);
}

/* ------------------------------------------------------------ tests ---- */

/* _C._eval_source(chain, locals, globals, closure) -> (repr, value): builds the source
 * chain [(kind, index, key, obj), ...] (each item's base is the one before it) and
 * resolves it against a frame whose localsplus is the tuple locals. For the tests of
 * every accessor; errors of resolution are raised as they are. */
PyObject *sources_py_eval(PyObject *self, PyObject *args)
{
    (void)self;
    static const char *const names[] = {"local", "freevar", "global",    "modglobal", "attr",   "item",
                                        "cell",  "default", "kwdefault", "size",      "stride", "dict_item"};
    static const SourceKind kinds[] = {SRC_LOCAL, SRC_FREEVAR, SRC_GLOBAL,    SRC_MODGLOBAL, SRC_ATTR,   SRC_ITEM,
                                       SRC_CELL,  SRC_DEFAULT, SRC_KWDEFAULT, SRC_SIZE,      SRC_STRIDE, SRC_DICT_ITEM};
    PyObject *chain, *locals, *globals, *closure;
    if (!PyArg_ParseTuple(args, "O!O!O!O:_eval_source", &PyList_Type, &chain, &PyTuple_Type, &locals, &PyDict_Type,
                          &globals, &closure))
        return NULL;
    if (closure != Py_None && !PyTuple_Check(closure))
        return PyErr_Format(PyExc_TypeError, "closure must be a tuple of cells or None");
    for (Py_ssize_t i = 0; closure != Py_None && i < PyTuple_GET_SIZE(closure); i++)
        if (!PyCell_Check(PyTuple_GET_ITEM(closure, i)))
            return PyErr_Format(PyExc_TypeError, "closure must be a tuple of cells or None");
    SourceTable t = {0};
    int32_t id = -1;
    PyObject *r = NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(chain); i++) {
        const char *kind;
        int index;
        PyObject *key, *obj;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(chain, i), "siOO", &kind, &index, &key, &obj))
            goto done;
        size_t k = 0;
        while (k < sizeof names / sizeof *names && strcmp(names[k], kind) != 0)
            k++;
        if (k == sizeof names / sizeof *names) {
            PyErr_Format(PyExc_ValueError, "unknown source kind %s", kind);
            goto done;
        }
        /* what the frame hook guarantees by construction, checked here */
        SourceKind sk = kinds[k];
        int rooted = sk == SRC_LOCAL || sk == SRC_FREEVAR || sk == SRC_GLOBAL || sk == SRC_MODGLOBAL;
        int keyed = sk != SRC_CELL && sk != SRC_DEFAULT && sk != SRC_SIZE && sk != SRC_STRIDE;
        if (index < 0 || (rooted != (id < 0)) || (keyed && key == Py_None) ||
            (keyed && sk != SRC_ITEM && sk != SRC_DICT_ITEM && !PyUnicode_Check(key)) ||
            (sk == SRC_MODGLOBAL && !PyDict_Check(obj)) || (sk == SRC_LOCAL && index >= PyTuple_GET_SIZE(locals))) {
            PyErr_Format(PyExc_ValueError, "bad source chain item %zd: %R", i, PyList_GET_ITEM(chain, i));
            goto done;
        }
        id = sources_add(&t, kinds[k], id, index, key == Py_None ? NULL : key, obj == Py_None ? NULL : obj);
        if (id < 0)
            goto done;
    }
    if (id < 0) {
        PyErr_SetString(PyExc_ValueError, "empty source chain");
        goto done;
    }
    FrameView fv = {&PyTuple_GET_ITEM(locals, 0), closure == Py_None ? NULL : closure, globals, PyEval_GetBuiltins()};
    PyObject **memo = PyMem_Calloc((size_t)t.n, sizeof(PyObject *));
    if (!memo) {
        PyErr_NoMemory();
        goto done;
    }
    PyObject *v = sources_resolve(&t, id, &fv, memo);
    if (v)
        r = PyTuple_Pack(2, t.e[id].repr, v);
    sources_memo_clear(memo, t.n);
    PyMem_Free(memo);
done:
    sources_clear(&t);
    return r;
}
