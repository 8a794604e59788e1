/* Var constructors and conversions. Vars live in the capture's arena; the Python objects
 * they point at are kept alive by Capture.keepalive. */
#include "capture.h"

static const char *const kind_names[] = {
    [VK_CONST] = "constant",     [VK_TENSOR] = "tensor",       [VK_TUPLE] = "tuple",
    [VK_LIST] = "list",          [VK_DICT] = "dict",           [VK_SLICE] = "slice",
    [VK_ITER] = "iterator",      [VK_FUNC] = "function",       [VK_CELL] = "cell",
    [VK_OBJECT] = "object",      [VK_MODULE] = "nn.Module",    [VK_PYMODULE] = "module",
    [VK_CALLABLE] = "callable",  [VK_METHOD] = "method",       [VK_PARTIAL] = "functools.partial",
    [VK_GRADMODE] = "grad mode", [VK_EXIT] = "__exit__",       [VK_USEROBJ] = "object",
    [VK_SUPER] = "super",        [VK_SYMINT] = "symbolic int", [VK_GSCALAR] = "graph scalar",
    [VK_DICTVIEW] = "dict view",
};

const char *var_kind_name(const Var *v)
{
    return v ? kind_names[v->kind] : "NULL";
}

Var *var_new(Capture *c, VarKind k)
{
    Var *v = cap_alloc(c, sizeof(Var));
    if (!v)
        return NULL;
    v->kind = (uint8_t)k;
    v->src = -1;
    v->born = c->serial++;
    return v;
}

Var *var_const(Capture *c, PyObject *obj)
{
    return var_const_steal(c, Py_XNewRef(obj));
}

Var *var_const_steal(Capture *c, PyObject *obj)
{
    if (!cap_keep_steal(c, obj))
        return NULL;
    Var *v = var_new(c, VK_CONST);
    if (v)
        v->obj = obj;
    return v;
}

Var *var_method(Capture *c, Var *self, Var *fn)
{
    Var *m = fn ? var_new(c, VK_METHOD) : NULL;
    if (m) {
        m->u.method.self = self;
        m->u.method.fn = fn;
    }
    return m;
}

Var *var_seq(Capture *c, VarKind k, Var **items, int32_t n)
{
    Var *v = var_new(c, k);
    if (!v)
        return NULL;
    int32_t cap = n < 4 ? 4 : n;
    v->u.seq.items = cap_alloc(c, sizeof(Var *) * (size_t)cap);
    if (!v->u.seq.items)
        return NULL;
    if (n)
        memcpy(v->u.seq.items, items, sizeof(Var *) * (size_t)n);
    v->u.seq.n = n;
    v->u.seq.cap = cap;
    return v;
}

int var_seq_append(Capture *c, Var *seq, Var *item)
{
    if (seq->u.seq.n == seq->u.seq.cap) {
        int32_t ncap = seq->u.seq.cap * 2;
        Var **p = cap_alloc(c, sizeof(Var *) * (size_t)ncap);
        if (!p)
            return -1;
        memcpy(p, seq->u.seq.items, sizeof(Var *) * (size_t)seq->u.seq.n);
        seq->u.seq.items = p;
        seq->u.seq.cap = ncap;
    }
    seq->u.seq.items[seq->u.seq.n++] = item;
    return 0;
}

Var *var_dict(Capture *c)
{
    Var *v = var_new(c, VK_DICT);
    if (!v)
        return NULL;
    v->u.dict.cap = 8;
    v->u.dict.keys = cap_alloc(c, sizeof(Var *) * 8);
    v->u.dict.vals = cap_alloc(c, sizeof(Var *) * 8);
    return v->u.dict.keys && v->u.dict.vals ? v : NULL;
}

int var_is_dict_key(const Var *v)
{
    return v->kind == VK_CONST || (v->kind == VK_TENSOR && v->u.t.meta.lib == LIB_TORCH);
}

/* Keys are constants, hashable and compared by Python equality, or torch tensors, compared
 * by identity as Python's dict does (a tensor hashes by id): the same var, or two vars
 * read from the same live tensor. A tensor never equals a constant key. */
static int key_index(Capture *c, Var *d, Var *key, int32_t *idx)
{
    if (!var_is_dict_key(key)) {
        if (key->kind == VK_TENSOR)
            PyErr_SetString(PyExc_TypeError, "unhashable type: 'numpy.ndarray'");
        else
            PyErr_Format(PyExc_TypeError, "shapejit: dict key must be a constant, got %s", var_a(c, key));
        return -1;
    }
    for (int32_t i = 0; i < d->u.dict.n; i++) {
        Var *kv = d->u.dict.keys[i];
        if (kv->kind != VK_CONST || key->kind != VK_CONST) {
            if (kv == key || (kv->kind == key->kind && kv->obj && kv->obj == key->obj)) {
                *idx = i;
                return 1;
            }
            continue;
        }
        PyObject *k = kv->obj;
        int eq = k == key->obj ? 1 : PyObject_RichCompareBool(k, key->obj, Py_EQ);
        if (eq < 0)
            return -1;
        if (eq) {
            *idx = i;
            return 1;
        }
    }
    return 0;
}

int var_dict_set(Capture *c, Var *d, Var *key, Var *val)
{
    int32_t i;
    if (var_dict_force(c, d) < 0)
        return -1;
    int r = key_index(c, d, key, &i);
    if (r < 0)
        return -1;
    if (r) {
        d->u.dict.vals[i] = val;
        return 0;
    }
    if (key->kind != VK_CONST && (var_is_outside(d) || d->u.dict.subtype)) {
        /* written back (or rebuilt as its collections type) from constant keys only */
        PyErr_SetString(PyExc_TypeError,
                        d->u.dict.subtype
                            ? "shapejit: a tensor as the key of a collections dict (rebuilt from constant keys only)"
                            : "shapejit: a tensor as the key of a dict from outside the frame (written back from "
                              "constant keys only)");
        return -1;
    }
    if (d->u.dict.n == d->u.dict.cap) {
        int32_t ncap = d->u.dict.cap * 2;
        Var **k = cap_alloc(c, sizeof(Var *) * (size_t)ncap), **v = cap_alloc(c, sizeof(Var *) * (size_t)ncap);
        if (!k || !v)
            return -1;
        memcpy(k, d->u.dict.keys, sizeof(Var *) * (size_t)d->u.dict.n);
        memcpy(v, d->u.dict.vals, sizeof(Var *) * (size_t)d->u.dict.n);
        d->u.dict.keys = k;
        d->u.dict.vals = v;
        d->u.dict.cap = ncap;
    }
    d->u.dict.keys[d->u.dict.n] = key;
    d->u.dict.vals[d->u.dict.n] = val;
    d->u.dict.n++;
    return 0;
}

int var_dict_del(Capture *c, Var *d, Var *key)
{
    int32_t i;
    if (var_dict_force(c, d) < 0)
        return -1;
    int r = key_index(c, d, key, &i);
    if (r <= 0)
        return r;
    memmove(d->u.dict.keys + i, d->u.dict.keys + i + 1, sizeof(Var *) * (size_t)(d->u.dict.n - i - 1));
    memmove(d->u.dict.vals + i, d->u.dict.vals + i + 1, sizeof(Var *) * (size_t)(d->u.dict.n - i - 1));
    d->u.dict.n--;
    return 1;
}

int var_dict_merge(Capture *c, Var *d, Var *src)
{
    if (var_dict_force(c, d) < 0 || var_dict_force(c, src) < 0)
        return -1;
    if (src->kind == VK_DICT) {
        for (int32_t i = 0; i < src->u.dict.n; i++)
            if (var_dict_set(c, d, src->u.dict.keys[i], src->u.dict.vals[i]) < 0)
                return cap_fail_exc(c, BR_UNSUPPORTED_VALUE);
        return 0;
    }
    /* dict(x) and d.update(x) read a mapping (anything with keys()) through its keys, and
     * anything else as an iterable of pairs: only pairs are modelled here */
    int pairs = src->kind == VK_LIST || src->kind == VK_TUPLE || src->kind == VK_ITER ||
                (src->kind == VK_DICTVIEW && src->u.dview.which == 'i') ||
                (src->kind == VK_CONST && !PyObject_HasAttrString(src->obj, "keys"));
    if (!pairs)
        return cap_fail(c, BR_UNSUPPORTED_VALUE, "a dict updated from %s", var_a(c, src));
    Var **items;
    int32_t n;
    if (op_iterate(c, src, &items, &n) < 0)
        return -1;
    for (int32_t i = 0; i < n; i++) {
        Var **kv;
        int32_t two;
        if (op_iterate(c, items[i], &kv, &two) < 0)
            return -1;
        if (two != 2) {
            PyErr_Format(PyExc_ValueError, "dictionary update sequence element #%d has length %d; 2 is required",
                         (int)i, (int)two);
            return cap_fail_exc(c, BR_USER_EXCEPTION);
        }
        if (var_dict_set(c, d, kv[0], kv[1]) < 0)
            return cap_fail_exc(c, BR_UNSUPPORTED_VALUE);
    }
    return 0;
}

/* A lazy dict's lookup by a constant key reads that entry alone (wrap.c); any other key
 * (a tensor, by identity) needs all of them. A failure leaves an exception set, as the
 * callers check. */
Var *var_dict_get(Capture *c, Var *d, Var *key, int *found)
{
    int32_t i;
    *found = 0;
    if (d->u.dict.lazy && key->kind != VK_CONST && var_dict_force(c, d) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "shapejit: a dict read through its source could not be read");
        return NULL;
    }
    int r = key_index(c, d, key, &i);
    if (r == 0 && d->u.dict.lazy) {
        Var *v = NULL;
        r = var_dict_lazy_lookup(c, d, key, &v);
        *found = r > 0;
        return r > 0 ? v : NULL;
    }
    *found = r > 0;
    if (r <= 0)
        return NULL;
    return d->u.dict.vals[i];
}

Var *var_dict_view(Capture *c, Var *d, char which, int skip_none)
{
    if (var_dict_force(c, d) < 0)
        return NULL;
    Var *l = var_seq(c, VK_LIST, NULL, 0);
    for (int32_t i = 0; l && i < d->u.dict.n; i++) {
        Var *k = d->u.dict.keys[i], *v = d->u.dict.vals[i];
        if (skip_none && v->kind == VK_CONST && v->obj == Py_None)
            continue;
        Var *item = which == 'k' ? k : which == 'v' ? v : var_seq(c, VK_TUPLE, (Var *[]){k, v}, 2);
        if (!item || var_seq_append(c, l, item) < 0)
            return NULL;
    }
    return l;
}

Var *var_dict_live_view(Capture *c, Var *d, char which)
{
    Var *v = var_new(c, VK_DICTVIEW);
    if (v) {
        v->u.dview.dict = d;
        v->u.dview.which = which;
    }
    return v;
}

Var *var_view_list(Capture *c, Var *view)
{
    return var_dict_view(c, view->u.dview.dict, view->u.dview.which, 0);
}

const char *var_view_method(const Var *view)
{
    return view->u.dview.which == 'k' ? "keys" : view->u.dview.which == 'v' ? "values" : "items";
}

int var_deep_const(const Var *v)
{
    if (!v || v->kind == VK_CONST)
        return 1;
    if (v->kind != VK_TUPLE && v->kind != VK_LIST)
        return 0;
    for (int32_t i = 0; i < v->u.seq.n; i++)
        if (!var_deep_const(v->u.seq.items[i]))
            return 0;
    return 1;
}

int var_is_const(const Var *v)
{
    return v && v->kind == VK_CONST;
}

int var_all_const(Var *const *vs, int32_t n)
{
    for (int32_t i = 0; i < n; i++)
        if (!var_is_const(vs[i]))
            return 0;
    return 1;
}

PyObject *var_to_py(Capture *c, Var *v)
{
    switch (v->kind) {
    case VK_SYMINT: {
        /* a symbolic int used where only a value will do: specialise it (guarded) */
        int64_t h;
        if (symb_specialize(c, v->u.s.e, &h, "Python code needs its value as an int") < 0)
            return NULL;
        return PyLong_FromLongLong(h);
    }
    case VK_GSCALAR: {
        /* computed from dynamic float inputs: specialise them; else its value is data: the
         * use breaks the graph as data-dependent (cap_fail_exc) */
        PyObject *h = gscalar_pin(c, v, "Python code needs its value");
        if (h || cap_failed(c))
            return Py_XNewRef(h);
        PyErr_Format(sym_data_dependent_error ? sym_data_dependent_error : PyExc_RuntimeError,
                     "%U is a %s computed in the graph (Tensor.item()); its Python value is data", v->u.gs.text,
                     v->u.gs.type == GS_BOOL ? "bool" : "float");
        return NULL;
    }
    case VK_CONST:
    case VK_OBJECT:
    case VK_MODULE:
    case VK_PYMODULE:
    case VK_CALLABLE:
        return Py_NewRef(v->obj);
    case VK_FUNC:
        if (v->obj)
            return Py_NewRef(v->obj);
        break;
    case VK_TUPLE:
    case VK_LIST: {
        PyObject *seq = v->kind == VK_TUPLE ? PyTuple_New(v->u.seq.n) : PyList_New(v->u.seq.n);
        if (!seq)
            return NULL;
        for (int32_t i = 0; i < v->u.seq.n; i++) {
            PyObject *item = var_to_py(c, v->u.seq.items[i]);
            if (!item) {
                Py_DECREF(seq);
                return NULL;
            }
            if (v->kind == VK_TUPLE)
                PyTuple_SET_ITEM(seq, i, item);
            else
                PyList_SET_ITEM(seq, i, item);
        }
        if (v->kind == VK_TUPLE && v->u.seq.subtype) {
            /* a tuple subclass: torch.Size takes the tuple; namedtuples take fields */
            PyObject *t = (PyObject *)v->u.seq.subtype;
            PyObject *r = PyObject_HasAttrString(t, "_make") ? PyObject_CallMethod(t, "_make", "(O)", seq)
                                                             : PyObject_CallOneArg(t, seq);
            Py_DECREF(seq);
            return r;
        }
        if (v->kind == VK_LIST && v->u.seq.subtype) {   /* a deque */
            PyObject *r = PyObject_CallFunction((PyObject *)v->u.seq.subtype, "OO", seq,
                                                v->u.seq.maxlen ? v->u.seq.maxlen->obj : Py_None);
            Py_DECREF(seq);
            return r;
        }
        return seq;
    }
    case VK_DICT: {
        if (var_dict_force(c, v) < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_RuntimeError, "shapejit: a dict read through its source could not be read");
            return NULL;
        }
        PyObject *d = PyDict_New();
        if (!d)
            return NULL;
        for (int32_t i = 0; i < v->u.dict.n; i++) {
            PyObject *val = var_to_py(c, v->u.dict.vals[i]);
            if (val && v->u.dict.keys[i]->kind != VK_CONST) {
                Py_CLEAR(val);
                cap_fail(c, BR_UNSUPPORTED_VALUE, "a dict keyed by a tensor used as a Python value");
            }
            if (!val || PyDict_SetItem(d, v->u.dict.keys[i]->obj, val) < 0) {
                Py_XDECREF(val);
                Py_DECREF(d);
                return NULL;
            }
            Py_DECREF(val);
        }
        if (v->u.dict.subtype) {
            /* OrderedDict(d), Counter(d), defaultdict(factory, d): d's order is the var's */
            PyObject *f = v->u.dict.factory ? var_to_py(c, v->u.dict.factory)
                          : !strcmp(v->u.dict.subtype->tp_name, "collections.defaultdict") ? Py_NewRef(Py_None)
                                                                                           : NULL;
            if (v->u.dict.factory && !f) {
                Py_DECREF(d);   /* the factory's own failure */
                return NULL;
            }
            PyObject *r = f ? PyObject_CallFunctionObjArgs((PyObject *)v->u.dict.subtype, f, d, NULL)
                            : PyObject_CallOneArg((PyObject *)v->u.dict.subtype, d);
            Py_XDECREF(f);
            Py_DECREF(d);
            return r;
        }
        return d;
    }
    case VK_DICTVIEW: {
        PyObject *d = var_to_py(c, v->u.dview.dict);
        PyObject *r = d ? PyObject_CallMethod(d, var_view_method(v), NULL) : NULL;
        Py_XDECREF(d);
        return r;
    }
    case VK_SLICE: {
        PyObject *a = var_to_py(c, v->u.slice.start), *b = a ? var_to_py(c, v->u.slice.stop) : NULL,
                 *s = b ? var_to_py(c, v->u.slice.step) : NULL;
        PyObject *r = s ? PySlice_New(a, b, s) : NULL;
        Py_XDECREF(a);
        Py_XDECREF(b);
        Py_XDECREF(s);
        return r;
    }
    default:
        break;
    }
    PyErr_Format(PyExc_TypeError, "shapejit: %s has no constant value here", var_a(c, v));
    return NULL;
}
