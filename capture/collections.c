/* The collections module's containers in a compiled frame, made there or passed in.
 *
 * OrderedDict, defaultdict and Counter are dict vars (VK_DICT) with u.dict.subtype set (a
 * defaultdict's factory in u.dict.factory); a deque is a list var (VK_LIST) with
 * u.seq.subtype = deque and u.seq.maxlen. What dict and list vars already model (items,
 * iteration, len, `in`, get, keys/values/items, setdefault, pop) stays theirs. Every other
 * method, operator and constructor runs on a shadow: a real object of the type holding
 * the var's constants and, for each other value, a placeholder; its effect on the shadow
 * and its result are read back into vars. A placeholder only stands for a value the method
 * moves around: one that looks at it (compares, adds, hashes, sorts, tests it) raises on
 * it, and that is a graph break, never a value computed otherwise than eager.
 *
 * Also here: namedtuple methods (_make, _replace, _asdict, class attributes, methods of
 * typing.NamedTuple classes) on tuple vars with a subtype, collections.namedtuple called
 * with constants, and dict.fromkeys on dict and its subclasses.
 *
 * References: every PyObject local is owned unless marked borrowed. */
#include "capture.h"
#include "../vocab/libs.h"
#include "../core/errors.h"
#include "../core/pyutil.h"

static PyObject *od_type, *dd_type, *counter_type, *deque_type;   /* strong, from collections */
static PyObject *nt_make_code, *nt_replace_code, *nt_asdict_code;  /* strong: the code objects every
                                                                      namedtuple's methods share */
static PyObject *namedtuple_fn;                                    /* strong */

static int load_types(void)
{
    if (od_type)
        return 0;
    PyObject *m = PyImport_ImportModule("collections");
    if (!m)
        return -1;
    od_type = PyObject_GetAttrString(m, "OrderedDict");
    dd_type = PyObject_GetAttrString(m, "defaultdict");
    counter_type = PyObject_GetAttrString(m, "Counter");
    deque_type = PyObject_GetAttrString(m, "deque");
    namedtuple_fn = PyObject_GetAttrString(m, "namedtuple");
    PyObject *probe = namedtuple_fn ? PyObject_CallFunction(namedtuple_fn, "ss", "_SjProbe", "a") : NULL;
    Py_DECREF(m);
    if (!probe)
        goto fail;
    const char *names[3] = {"_make", "_replace", "_asdict"};
    PyObject **codes[3] = {&nt_make_code, &nt_replace_code, &nt_asdict_code};
    for (int i = 0; i < 3; i++) {
        PyObject *f = PyObject_GetAttrString(probe, names[i]);
        PyObject *fn = f && PyMethod_Check(f) ? PyMethod_GET_FUNCTION(f) : f;
        *codes[i] = fn && PyFunction_Check(fn) ? Py_NewRef(PyFunction_GET_CODE(fn)) : NULL;
        Py_XDECREF(f);
        if (!*codes[i]) {
            Py_DECREF(probe);
            goto fail;
        }
    }
    Py_DECREF(probe);
    if (od_type && dd_type && counter_type && deque_type)
        return 0;
fail:
    Py_CLEAR(od_type);
    Py_CLEAR(dd_type);
    Py_CLEAR(counter_type);
    Py_CLEAR(deque_type);
    Py_CLEAR(namedtuple_fn);
    Py_CLEAR(nt_make_code);
    Py_CLEAR(nt_replace_code);
    Py_CLEAR(nt_asdict_code);
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_RuntimeError, "shapejit: collections types not found");
    return -1;
}

static int is_dict_type(PyObject *t)
{
    return t && (t == od_type || t == dd_type || t == counter_type);
}

PyTypeObject *collections_type_of(const Var *v)
{
    if (v->kind == VK_DICT)
        return v->u.dict.subtype;
    if (v->kind == VK_LIST)
        return v->u.seq.subtype;
    return NULL;
}

/* ------------------------------------------------------------ placeholders ---- */
/* A stand-in for a value the capture holds as a var: it can be stored and moved, and
 * raises when anything looks at it. */

static PyObject *ph_refuse(PyObject *self, PyObject *other, int op)
{
    (void)self;
    (void)other;
    (void)op;
    PyErr_SetString(PyExc_TypeError, "shapejit: a value computed in the graph was compared");
    return NULL;
}

static Py_hash_t ph_hash(PyObject *self)
{
    (void)self;
    PyErr_SetString(PyExc_TypeError, "shapejit: a value computed in the graph was hashed");
    return -1;
}

static int ph_bool(PyObject *self)
{
    (void)self;
    PyErr_SetString(PyExc_TypeError, "shapejit: a value computed in the graph was tested");
    return -1;
}

static PyNumberMethods ph_number = {.nb_bool = ph_bool};

static PyTypeObject PlaceholderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shapejit._C._Placeholder",
    .tp_basicsize = sizeof(PyObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_richcompare = ph_refuse,
    .tp_hash = ph_hash,
    .tp_as_number = &ph_number,
};

/* ----------------------------------------------------------------- shadows ---- */

typedef struct {
    Capture *c;
    PyObject *by_var;    /* strong dict: Var address -> the object standing for it */
    PyObject *by_obj;    /* strong dict: id(object) -> Var address (placeholders, the shadows
                            of collection vars, the real lists made for list vars) */
    PyObject *keep;      /* strong list: every object in by_obj, alive as long as the map */
    Var **synced;        /* collection and list vars whose shadow a call may change */
    int32_t nsynced, capsynced;
    int placeholders;    /* some value stands in as a placeholder */
} Shadow;

static int sh_init(Shadow *s, Capture *c)
{
    memset(s, 0, sizeof *s);
    s->c = c;
    if (PyType_Ready(&PlaceholderType) < 0 || load_types() < 0)
        return -1;
    s->by_var = PyDict_New();
    s->by_obj = PyDict_New();
    s->keep = PyList_New(0);
    return s->by_var && s->by_obj && s->keep ? 0 : -1;
}

static void sh_free(Shadow *s)
{
    Py_CLEAR(s->by_var);
    Py_CLEAR(s->by_obj);
    Py_CLEAR(s->keep);
    PyMem_Free(s->synced);
    s->synced = NULL;
}

/* Record that obj (borrowed) stands for v. 0 or -1. */
static int sh_bind(Shadow *s, Var *v, PyObject *obj)
{
    PyObject *vk = PyLong_FromVoidPtr(v), *ok = PyLong_FromVoidPtr(obj);
    int r = vk && ok && PyDict_SetItem(s->by_var, vk, obj) == 0 && PyDict_SetItem(s->by_obj, ok, vk) == 0 &&
                    PyList_Append(s->keep, obj) == 0
                ? 0
                : -1;
    Py_XDECREF(vk);
    Py_XDECREF(ok);
    return r;
}

static int sh_sync_later(Shadow *s, Var *v)
{
    if (sj_grow((void **)&s->synced, &s->capsynced, s->nsynced + 1, sizeof(Var *), 8) < 0)
        return -1;
    s->synced[s->nsynced++] = v;
    return 0;
}

static int immutable_constant(PyObject *o)
{
    PyTypeObject *t = Py_TYPE(o);
    if (t == &PyTuple_Type) {   /* (name, 1) as a Counter key */
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); i++)
            if (!immutable_constant(PyTuple_GET_ITEM(o, i)))
                return 0;
        return 1;
    }
    return o == Py_None || o == Py_Ellipsis || t == &PyLong_Type || t == &PyFloat_Type || t == &PyBool_Type ||
           t == &PyUnicode_Type || t == &PyBytes_Type || t == &PyComplex_Type || t == &PyRange_Type ||
           (t == &PyFrozenSet_Type) || PyType_Check(o) || PyCFunction_Check(o);
}

/* A defaultdict factory the shadow may call at capture time: a builtin type or a
 * collections container type, which makes a new empty object and does nothing else. */
static int safe_factory(PyObject *f)
{
    return f == Py_None || f == (PyObject *)&PyList_Type || f == (PyObject *)&PyDict_Type ||
           f == (PyObject *)&PySet_Type || f == (PyObject *)&PyLong_Type || f == (PyObject *)&PyFloat_Type ||
           f == (PyObject *)&PyUnicode_Type || f == (PyObject *)&PyTuple_Type || f == (PyObject *)&PyBool_Type ||
           f == (PyObject *)&PyFrozenSet_Type || f == (PyObject *)&PyBytes_Type || f == od_type || f == counter_type ||
           f == deque_type || f == dd_type;
}

static PyObject *to_py(Shadow *s, Var *v);

/* The object standing for v. New reference, or NULL with an exception or the capture's
 * failure set. */
static PyObject *to_py(Shadow *s, Var *v)
{
    Capture *c = s->c;
    PyObject *vk = PyLong_FromVoidPtr(v);
    if (!vk)
        return NULL;
    PyObject *hit = PyDict_GetItemWithError(s->by_var, vk);
    Py_DECREF(vk);
    if (hit || PyErr_Occurred())
        return Py_XNewRef(hit);
    if (var_dict_force(c, v) < 0)
        return NULL;
    if (v->kind == VK_CONST && immutable_constant(v->obj))
        return Py_NewRef(v->obj);
    if ((v->kind == VK_CALLABLE || v->kind == VK_FUNC) && v->obj && safe_factory(v->obj))
        return Py_NewRef(v->obj);
    PyTypeObject *ct = collections_type_of(v);
    PyObject *obj = NULL;
    if (ct && v->kind == VK_DICT) {
        PyObject *f = Py_None;
        if ((PyObject *)ct == dd_type && v->u.dict.factory) {
            Var *fv = v->u.dict.factory;
            PyObject *fo = fv->kind == VK_CONST || fv->kind == VK_CALLABLE || fv->kind == VK_FUNC ? fv->obj : NULL;
            f = fo && safe_factory(fo) ? fo : Py_None;   /* others are called as vars (collections_missing) */
        }
        obj = (PyObject *)ct == dd_type ? PyObject_CallOneArg(dd_type, f) : PyObject_CallNoArgs((PyObject *)ct);
    } else if (ct && v->kind == VK_LIST) {
        PyObject *ml = v->u.seq.maxlen ? v->u.seq.maxlen->obj : Py_None;
        obj = PyObject_CallFunction(deque_type, "()O", ml);
    } else if (v->kind == VK_LIST) {
        obj = PyList_New(0);
    } else if (v->kind == VK_DICT) {
        obj = PyDict_New();
    } else if (v->kind == VK_TUPLE && !v->u.seq.subtype) {
        PyObject *t = PyTuple_New(v->u.seq.n);
        for (int32_t i = 0; t && i < v->u.seq.n; i++) {
            PyObject *it = to_py(s, v->u.seq.items[i]);
            if (!it)
                Py_CLEAR(t);
            else
                PyTuple_SET_ITEM(t, i, it);
        }
        return t;
    }
    if (!obj && PyErr_Occurred())
        return NULL;
    if (obj) {
        /* a container var: its contents now, read back after the call */
        if (sh_bind(s, v, obj) < 0 || sh_sync_later(s, v) < 0) {
            Py_DECREF(obj);
            return NULL;
        }
        if (v->kind == VK_DICT) {
            for (int32_t i = 0; i < v->u.dict.n; i++) {
                PyObject *val = to_py(s, v->u.dict.vals[i]);
                if (val && v->u.dict.keys[i]->kind != VK_CONST) {
                    Py_CLEAR(val);
                    PyErr_SetString(PyExc_TypeError, "shapejit: a dict keyed by a tensor");
                }
                int r = val ? PyObject_SetItem(obj, v->u.dict.keys[i]->obj, val) : -1;
                Py_XDECREF(val);
                if (r < 0) {
                    Py_DECREF(obj);
                    return NULL;
                }
            }
        } else {
            for (int32_t i = 0; i < v->u.seq.n; i++) {
                PyObject *it = to_py(s, v->u.seq.items[i]);
                PyObject *r = !it                 ? NULL
                              : PyList_Check(obj) ? (PyList_Append(obj, it) < 0 ? NULL : Py_NewRef(Py_None))
                                                  : PyObject_CallMethod(obj, "append", "O", it);
                Py_XDECREF(it);
                if (!r) {
                    Py_DECREF(obj);
                    return NULL;
                }
                Py_DECREF(r);
            }
        }
        return obj;
    }
    if (v->kind == VK_ITER || v->kind == VK_DICTVIEW) {
        /* the methods that take an iterable (constructors, fromkeys, update, extend) read it
         * whole: read it now (an iterator is left exhausted, as the call leaves it) and hand
         * the method a list of its items */
        Var **items = NULL;
        int32_t n = 0;
        if (v->kind == VK_ITER) {
            if (iter_drain(c, v, &items, &n) < 0)
                return NULL;
        } else {
            Var *l = var_view_list(c, v);
            if (!l)
                return NULL;
            items = l->u.seq.items;
            n = l->u.seq.n;
        }
        PyObject *l = PyList_New(n);
        for (int32_t i = 0; l && i < n; i++) {
            PyObject *it = to_py(s, items[i]);
            if (!it)
                Py_CLEAR(l);
            else
                PyList_SET_ITEM(l, i, it);
        }
        return l;
    }
    /* anything else is only moved: a placeholder */
    obj = PyType_GenericNew(&PlaceholderType, NULL, NULL);
    if (!obj || sh_bind(s, v, obj) < 0) {
        Py_XDECREF(obj);
        return NULL;
    }
    s->placeholders = 1;
    return obj;
}

static Var *from_py(Shadow *s, PyObject *o);

/* 1 when `what` ("dict.get", "collections.deque.count") names a method that only reads
 * its container. */
static int read_only_method(const char *what)
{
    static const char *const names[] = {"get",          "keys",
                                        "values",       "items",
                                        "copy",         "count",
                                        "index",        "most_common",
                                        "elements",     "total",
                                        "__contains__", "__getitem__",
                                        "__len__",      "__iter__",
                                        "__reversed__", "isdisjoint",
                                        "issubset",     "issuperset",
                                        "union",        "intersection",
                                        "difference",   "symmetric_difference",
                                        "fromkeys"};
    const char *dot = strrchr(what, '.');
    const char *n = dot ? dot + 1 : what;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(n, names[i]))
            return 1;
    return 0;
}

/* The contents of real container obj (borrowed) as the contents of var v, v's kind
 * already matching: 1 when they differ from v's, 0 when equal, -1 on failure. */
static int read_back(Shadow *s, Var *v, PyObject *obj, int write)
{
    Capture *c = s->c;
    if (var_dict_force(c, v) < 0)
        return -1;
    if (v->kind == VK_DICT) {
        PyObject *keys = PySequence_List(obj);   /* iteration order: an OrderedDict's own */
        if (!keys)
            return -1;
        Py_ssize_t n = PyList_GET_SIZE(keys);
        Var **kv = cap_alloc(c, sizeof(Var *) * (size_t)(n + 1)), **vv = cap_alloc(c, sizeof(Var *) * (size_t)(n + 1));
        int differ = n != v->u.dict.n;
        for (Py_ssize_t i = 0; kv && vv && i < n; i++) {
            PyObject *k = PyList_GET_ITEM(keys, i);
            PyObject *val = PyObject_GetItem(obj, k);
            if (!val || !immutable_constant(k)) {
                Py_XDECREF(val);
                Py_DECREF(keys);
                if (!PyErr_Occurred())
                    cap_fail(c, BR_UNSUPPORTED_VALUE, "%s key in a dict", sj_type_a(c, Py_TYPE(k), NULL));
                return -1;
            }
            /* an unchanged constant keeps its var: only real changes are writes */
            Var *old = i < v->u.dict.n ? v->u.dict.vals[i] : NULL;
            vv[i] = old && var_is_const(old) && old->obj == val ? old : from_py(s, val);
            Py_DECREF(val);
            kv[i] = vv[i] ? var_const(c, k) : NULL;
            if (!kv[i]) {
                Py_DECREF(keys);
                return -1;
            }
            if (!differ && v->u.dict.keys[i]->kind != VK_CONST) {
                differ = 1;
            } else if (!differ && (v->u.dict.vals[i] != vv[i] || v->u.dict.keys[i]->obj != k)) {
                int eq = PyObject_RichCompareBool(v->u.dict.keys[i]->obj, k, Py_EQ);
                if (eq < 0) {
                    Py_DECREF(keys);
                    return -1;
                }
                differ = !eq || v->u.dict.vals[i] != vv[i];
            }
        }
        Py_DECREF(keys);
        if (!kv || !vv)
            return -1;
        if (differ && write) {
            v->u.dict.keys = kv;
            v->u.dict.vals = vv;
            v->u.dict.n = v->u.dict.cap = (int32_t)n;
            if (v->u.dict.cap == 0) {
                v->u.dict.cap = 1;
            }
        }
        return differ;
    }
    PyObject *items = PySequence_List(obj);
    if (!items)
        return -1;
    Py_ssize_t n = PyList_GET_SIZE(items);
    Var **iv = cap_alloc(c, sizeof(Var *) * (size_t)(n + 1));
    int differ = n != v->u.seq.n;
    for (Py_ssize_t i = 0; iv && i < n; i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        Var *old = i < v->u.seq.n ? v->u.seq.items[i] : NULL;
        if (old && var_is_const(old) && old->obj == item) {
            iv[i] = old;
            continue;
        }
        if (!(iv[i] = from_py(s, item))) {
            Py_DECREF(items);
            return -1;
        }
        differ = differ || v->u.seq.items[i] != iv[i];
    }
    Py_DECREF(items);
    if (!iv)
        return -1;
    if (differ && write) {
        v->u.seq.items = iv;
        v->u.seq.n = (int32_t)n;
        v->u.seq.cap = (int32_t)(n + 1);
    }
    return differ;
}

/* A new var for o (borrowed), an object a shadowed call returned or stored: the var o
 * stands for, a constant, or a new container var with its contents read back. */
static Var *from_py(Shadow *s, PyObject *o)
{
    Capture *c = s->c;
    PyObject *ok = PyLong_FromVoidPtr(o);
    if (!ok)
        return NULL;
    PyObject *hit = PyDict_GetItemWithError(s->by_obj, ok);
    Py_DECREF(ok);
    if (hit)
        return PyLong_AsVoidPtr(hit);
    if (PyErr_Occurred())
        return NULL;
    if (PyType_Check(o) || PyCFunction_Check(o))
        return wrap_untracked(c, o);
    if (immutable_constant(o))
        return var_const(c, o);
    PyTypeObject *t = Py_TYPE(o);
    if (t == &PyTuple_Type) {
        Var *r = var_seq(c, VK_TUPLE, NULL, 0);
        for (Py_ssize_t i = 0; r && i < PyTuple_GET_SIZE(o); i++) {
            Var *it = from_py(s, PyTuple_GET_ITEM(o, i));
            if (!it || var_seq_append(c, r, it) < 0)
                return NULL;
        }
        return r;
    }
    Var *v = NULL;
    if (t == &PyList_Type || (PyObject *)t == deque_type) {
        v = var_seq(c, VK_LIST, NULL, 0);
        if (v && (PyObject *)t == deque_type) {
            PyObject *ml = PyObject_GetAttrString(o, "maxlen");
            v->u.seq.subtype = t;
            v->u.seq.maxlen = ml ? var_const_steal(c, ml) : NULL;
            if (!v->u.seq.maxlen)
                return NULL;
        }
    } else if (t == &PyDict_Type || is_dict_type((PyObject *)t)) {
        v = var_dict(c);
        if (v && t != &PyDict_Type) {
            v->u.dict.subtype = t;
            if ((PyObject *)t == dd_type) {
                PyObject *f = PyObject_GetAttrString(o, "default_factory");
                v->u.dict.factory = f ? wrap_untracked(c, f) : NULL;
                Py_XDECREF(f);
                if (!v->u.dict.factory)
                    return NULL;
            }
        }
    } else if (PySet_CheckExact(o)) {
        /* a set made by a factory: a mutable constant, as the frame's own sets are */
        PyObject *copy = PySet_New(o);
        return copy ? var_const_steal(c, copy) : NULL;
    } else {
        cap_fail(c, BR_UNSUPPORTED_VALUE, "%s from a collections method", sj_type_a(c, t, NULL));
        return NULL;
    }
    if (!v || sh_bind(s, v, o) < 0)
        return NULL;
    return read_back(s, v, o, 1) < 0 ? NULL : v;
}

/* The call fn(*args) has run on the shadows: read back every container the call may
 * have changed (noting writes to outside ones) and the result. what names the call. */
static Var *finish(Shadow *s, PyObject *result, const char *what)
{
    Capture *c = s->c;
    if (!result) {
        if (!s->placeholders && !cap_failed(c) && PyErr_Occurred() && PyErr_ExceptionMatches(PyExc_Exception)) {
            cap_fail_exc(c, BR_USER_EXCEPTION);   /* raised by the values eager has too */
            return NULL;
        }
        if (!cap_failed(c)) {
            sj_err_clear();
            cap_fail(c, BR_UNSUPPORTED_VALUE, "%s on a container holding values computed in the graph", what);
        }
        return NULL;
    }
    for (int32_t i = 0; i < s->nsynced; i++) {
        Var *v = s->synced[i];
        PyObject *vk = PyLong_FromVoidPtr(v);
        PyObject *obj = vk ? PyDict_GetItemWithError(s->by_var, vk) : NULL;   /* borrowed */
        Py_XDECREF(vk);
        if (!obj)
            return NULL;
        int differ = read_back(s, v, obj, 0);
        if (differ < 0)
            return NULL;
        if (differ && var_is_outside(v) && cap_note_mutation(c, v, what) < 0)
            return NULL;
        /* (differ also holds when values that are not constants were only read back) */
        if (differ && !read_only_method(what) && cap_note_change(c, v, 0) < 0)
            return NULL;
        if (differ && read_back(s, v, obj, 1) < 0)
            return NULL;
    }
    return from_py(s, result);
}

/* self.name(*args) (self NULL: fn(*args)) run on shadows. */
static Var *shadow_call(Capture *c, PyObject *fn, Var *self, const char *name, Var **args, int32_t nargs,
                        PyObject *kwnames, const char *what)
{
    Shadow s;
    Var *r = NULL;
    if (sh_init(&s, c) < 0) {
        sh_free(&s);
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    PyObject **a = PyMem_Calloc((size_t)nargs + 2, sizeof(PyObject *));
    PyObject *callee = NULL, *result = NULL;
    int32_t k = 0;
    if (!a)
        goto done;
    if (self) {
        PyObject *so = to_py(&s, self);
        callee = so ? PyObject_GetAttrString(so, name) : NULL;
        Py_XDECREF(so);
    } else {
        callee = Py_NewRef(fn);
    }
    if (!callee)
        goto done;
    for (k = 0; k < nargs; k++)
        if (!(a[k] = to_py(&s, args[k])))
            goto done;
    result = PyObject_Vectorcall(callee, a, (size_t)(nargs - (kwnames ? PyTuple_GET_SIZE(kwnames) : 0)), kwnames);
    r = finish(&s, result, what);
done:
    if (!r && !cap_failed(c)) {
        if (PyErr_Occurred())
            cap_fail_exc(c, BR_INTERNAL);
        else
            cap_fail(c, BR_INTERNAL, "%s", what);
    }
    for (int32_t i = 0; a && i < k; i++)
        Py_DECREF(a[i]);
    PyMem_Free(a);
    Py_XDECREF(callee);
    Py_XDECREF(result);
    sh_free(&s);
    return r;
}

/* ------------------------------------------------------------ constructors ---- */

Var *collections_construct(Capture *c, PyObject *cls, Var **args, int32_t nargs, PyObject *kwnames, int *handled)
{
    *handled = 0;
    if (load_types() < 0) {
        sj_err_clear();
        return NULL;
    }
    if (!is_dict_type(cls) && cls != deque_type)
        return NULL;
    *handled = 1;
    Var *factory = NULL;
    Var **a = args;
    int32_t nkw = kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0;
    if (cls == dd_type && nargs - nkw >= 1) {
        factory = args[0];
        PyObject *fo =
            factory->kind == VK_CONST || factory->kind == VK_CALLABLE || factory->kind == VK_FUNC ? factory->obj : NULL;
        if (!(fo && safe_factory(fo))) {
            /* a factory run as code (a lambda, a user function): the shadow holds None,
             * the var the factory, called when a key is missing (collections_missing) */
            if (fo && !PyCallable_Check(fo)) {
                PyErr_SetString(PyExc_TypeError, "first argument must be callable or None");
                cap_fail_exc(c, BR_USER_EXCEPTION);
                return NULL;
            }
            if (factory->kind != VK_FUNC && factory->kind != VK_CALLABLE && factory->kind != VK_METHOD &&
                factory->kind != VK_PARTIAL) {
                cap_fail(c, BR_UNSUPPORTED_VALUE, "a defaultdict factory that is %s", var_a(c, factory));
                return NULL;
            }
            a = cap_alloc(c, sizeof(Var *) * (size_t)(nargs + 1));
            if (!a || !(a[0] = var_const(c, Py_None)))
                return NULL;
            memcpy(a + 1, args + 1, sizeof(Var *) * (size_t)(nargs - 1));
        }
    }
    if (!cap_keep(c, cls))
        return NULL;
    Var *r = shadow_call(c, cls, NULL, NULL, a, nargs, kwnames, ((PyTypeObject *)cls)->tp_name);
    if (r && cls == dd_type && factory && a != args)
        r->u.dict.factory = factory;
    return r;
}

/* ----------------------------------------------------------------- reading ---- */

Var *collections_missing(Capture *c, Var *d, Var *key, int *handled)
{
    *handled = 0;
    PyObject *t = (PyObject *)collections_type_of(d);
    if (!t || load_types() < 0) {
        sj_err_clear();
        return NULL;
    }
    if (t == counter_type) {
        *handled = 1;
        return var_const_steal(c, PyLong_FromLong(0));   /* Counter.__missing__: 0, nothing stored */
    }
    if (t != dd_type || !d->u.dict.factory || (var_is_const(d->u.dict.factory) && d->u.dict.factory->obj == Py_None))
        return NULL;
    *handled = 1;
    Var *v = call_var(c, d->u.dict.factory, NULL, 0, NULL);
    if (!v)
        return NULL;
    if (var_is_outside(d) && cap_note_mutation(c, d, "defaultdict's missing key") < 0)
        return NULL;
    return var_dict_set(c, d, key, v) < 0 ? NULL : v;
}

Var *collections_attr(Capture *c, Var *o, PyObject *name, int *handled)
{
    *handled = 0;
    if (load_types() < 0) {
        sj_err_clear();
        return NULL;
    }
    const char *n = PyUnicode_AsUTF8(name);
    if (!n)
        return NULL;
    PyTypeObject *own = o->kind == VK_TUPLE ? o->u.seq.subtype : collections_type_of(o);
    if (own && !strcmp(n, "__class__")) {
        *handled = 1;
        return wrap_untracked(c, (PyObject *)own);
    }
    if (o->kind == VK_TUPLE) {
        PyTypeObject *t = o->u.seq.subtype;
        if (!t || (libs.size_type && (PyObject *)t == libs.size_type) ||
            !PyObject_HasAttrString((PyObject *)t, "_fields"))
            return NULL;
        PyObject *d = _PyType_Lookup(t, name);   /* borrowed */
        if (!d || _PyType_Lookup(&PyTuple_Type, name) == d)
            return NULL;   /* fields and tuple's own methods: the caller's */
        *handled = 1;
        if (PyFunction_Check(d)) {
            return var_method(c, o, wrap_untracked(c, d));
        }
        if (Py_TYPE(d) == &PyProperty_Type) {
            return attr_property(c, o, d, name, t->tp_name);
        }
        /* class attributes (_fields, _field_defaults), classmethods (_make), staticmethods:
         * what the class gives */
        return wrap_untracked_attr(c, (PyObject *)t, name);
    }
    PyObject *t = (PyObject *)collections_type_of(o);
    if (!t)
        return NULL;
    if (!strcmp(n, "maxlen") && o->kind == VK_LIST) {
        *handled = 1;
        return o->u.seq.maxlen;
    }
    if (!strcmp(n, "default_factory") && t == dd_type) {
        *handled = 1;
        return o->u.dict.factory ? o->u.dict.factory : var_const(c, Py_None);
    }
    PyObject *attr = PyObject_GetAttr(t, name);
    if (!attr) {
        cap_fail_exc(c, BR_USER_EXCEPTION);
        *handled = 1;
        return NULL;
    }
    Py_DECREF(attr);
    return NULL;   /* a method: the caller binds it by name (calls.c dispatches here) */
}

/* ----------------------------------------------------------------- methods ---- */

/* dict methods whose dict var model is also the subclass's (container_call's). */
static int dict_model_applies(PyObject *t, const char *n)
{
    static const char *const same[] = {"keys", "values", "items", "get", "setdefault", "pop", "clear"};
    for (size_t i = 0; i < sizeof same / sizeof *same; i++)
        if (!strcmp(n, same[i]))
            return 1;
    return !strcmp(n, "update") && t != counter_type;   /* Counter.update adds counts */
}

typedef struct {
    Var *deque;
    const char *what;   /* "deque.append" or "deque.appendleft" */
} DequeAdd;

static int deque_add_item(Capture *c, void *ctx, Var *item)
{
    DequeAdd *a = ctx;
    return shadow_call(c, NULL, a->deque, a->what + 6, &item, 1, NULL, a->what) ? 0 : -1;
}

Var *collections_method(Capture *c, Var *self, const char *name, Var **args, int32_t nargs, PyObject *kwnames,
                        int *handled)
{
    *handled = 0;
    PyObject *t = (PyObject *)collections_type_of(self);
    if (!t || load_types() < 0) {
        sj_err_clear();
        return NULL;
    }
    if (self->kind == VK_DICT && dict_model_applies(t, name))
        return NULL;
    *handled = 1;
    if (t == dd_type && (!strcmp(name, "__missing__") || !strcmp(name, "__getitem__")) && nargs == 1 &&
        var_is_const(args[0])) {
        int found;
        Var *v = var_dict_get(c, self, args[0], &found);
        if (found)
            return v;
        int h;
        Var *r = collections_missing(c, self, args[0], &h);
        if (h || cap_failed(c))
            return r;
    }
    char what[96];
    snprintf(what, sizeof what, "%s.%s", ((PyTypeObject *)t)->tp_name, name);
    int left = !strcmp(name, "extendleft");
    if (t == deque_type && (left || !strcmp(name, "extend")) && nargs == 1 && !kwnames && iter_is_lazy(args[0])) {
        /* one item per append, as deque.extend and extendleft read an iterator: the
         * function a map calls may read the deque */
        DequeAdd add = {self, left ? "deque.appendleft" : "deque.append"};
        return iter_each(c, args[0], deque_add_item, &add) < 0 ? NULL : var_const(c, Py_None);
    }
    return shadow_call(c, NULL, self, name, args, nargs, kwnames, what);
}

Var *collections_operator(Capture *c, int nb, Var *a, Var *b, int *handled)
{
    *handled = 0;
    /* plain dicts compared: the same shadow (values compared only when they are constants) */
    int dicts = nb < 0 && a->kind == VK_DICT && b->kind == VK_DICT;
    if (!collections_type_of(a) && !collections_type_of(b) && !dicts)
        return NULL;
    *handled = 1;
    PyObject *op = PyImport_ImportModule("operator");
    static const char *const cmp_names[] = {"lt", "le", "eq", "ne", "gt", "ge"};
    static const char *const nb_names[] = {"add",  "and_",      "floordiv", "lshift",   "matmul",  "mul",  "mod",
                                           "or_",  "pow",       "rshift",   "sub",      "truediv", "xor",  "iadd",
                                           "iand", "ifloordiv", "ilshift",  "imatmul",  "imul",    "imod", "ior",
                                           "ipow", "irshift",   "isub",     "itruediv", "ixor"};
    const char *name = nb >= 0 ? (nb < (int)(sizeof nb_names / sizeof *nb_names) ? nb_names[nb] : NULL)
                               : (-1 - nb < 6 ? cmp_names[-1 - nb] : NULL);
    PyObject *fn = op && name ? PyObject_GetAttrString(op, name) : NULL;
    Py_XDECREF(op);
    if (!fn) {
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    Var *args[2] = {a, b};
    char what[64];
    snprintf(what, sizeof what, "operator.%s", name);
    Var *r = shadow_call(c, fn, NULL, NULL, args, 2, NULL, what);
    Py_DECREF(fn);
    return r;
}

/* ---------------------------------------------------------------- namedtuple ---- */

static Var *nt_make(Capture *c, PyTypeObject *t, Var *iterable)
{
    Var **items;
    int32_t n;
    if (op_iterate(c, iterable, &items, &n) < 0)
        return NULL;
    PyObject *fields = objects_fields(t);
    Py_ssize_t nf = fields ? PyTuple_GET_SIZE(fields) : -1;
    Py_XDECREF(fields);
    if (nf != n) {
        PyErr_Format(PyExc_TypeError, "Expected %zd arguments, got %d", nf, (int)n);
        cap_fail_exc(c, BR_USER_EXCEPTION);
        return NULL;
    }
    Var *v = var_seq(c, VK_TUPLE, items, n);
    if (v && cap_keep(c, (PyObject *)t))
        v->u.seq.subtype = t;
    return v;
}

Var *collections_call_function(Capture *c, PyObject *fn, Var **args, int32_t nargs, PyObject *kwnames, int *handled)
{
    *handled = 0;
    if (!PyFunction_Check(fn))
        return NULL;
    if (load_types() < 0) {
        sj_err_clear();
        return NULL;
    }
    PyObject *code = PyFunction_GET_CODE(fn);
    int32_t nkw = kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0, npos = nargs - nkw;
    if (fn == namedtuple_fn) {
        /* a class made from constants: made now, as a constant (each eager call makes a
         * new class of the same shape) */
        for (int32_t i = 0; i < nargs; i++)
            if (!var_deep_const(args[i]))   /* field names given as a list are constants too */
                return NULL;
        *handled = 1;
        PyObject *cls = cap_call_live(c, fn, args, nargs, kwnames);
        Var *r = cls ? wrap_untracked(c, cls) : NULL;
        Py_XDECREF(cls);
        return r;
    }
    if (code == nt_make_code && npos == 2 && !nkw && args[0]->obj && PyType_Check(args[0]->obj)) {
        *handled = 1;
        return nt_make(c, (PyTypeObject *)args[0]->obj, args[1]);
    }
    Var *self = npos >= 1 ? args[0] : NULL;
    if (!self || self->kind != VK_TUPLE || !self->u.seq.subtype)
        return NULL;
    PyTypeObject *t = self->u.seq.subtype;
    if (code == nt_asdict_code && nargs == 1) {
        *handled = 1;
        PyObject *fields = objects_fields(t);
        if (!fields) {
            cap_fail(c, BR_UNSUPPORTED_VALUE, "_asdict of %s", sj_type_a(c, t, NULL));
            return NULL;
        }
        Var *d = var_dict(c);
        for (Py_ssize_t i = 0; d && i < PyTuple_GET_SIZE(fields) && i < self->u.seq.n; i++) {
            Var *k = var_const(c, PyTuple_GET_ITEM(fields, i));
            if (!k || var_dict_set(c, d, k, self->u.seq.items[i]) < 0)
                d = NULL;
        }
        Py_DECREF(fields);
        return d;
    }
    if (code == nt_replace_code && npos == 1) {
        *handled = 1;
        PyObject *fields = objects_fields(t);
        if (!fields) {
            cap_fail(c, BR_UNSUPPORTED_VALUE, "_replace of %s", sj_type_a(c, t, NULL));
            return NULL;
        }
        Var *v = var_seq(c, VK_TUPLE, self->u.seq.items, self->u.seq.n);
        for (int32_t k = 0; v && k < nkw; k++) {
            PyObject *kn = PyTuple_GET_ITEM(kwnames, k);
            Py_ssize_t i;
            for (i = 0; i < PyTuple_GET_SIZE(fields); i++)
                if (PyUnicode_Compare(PyTuple_GET_ITEM(fields, i), kn) == 0)
                    break;
            if (i == PyTuple_GET_SIZE(fields) || i >= v->u.seq.n) {
                PyErr_Format(PyExc_ValueError, "Got unexpected field names: ['%U']", kn);
                cap_fail_exc(c, BR_USER_EXCEPTION);
                Py_DECREF(fields);
                return NULL;
            }
            v->u.seq.items[i] = args[npos + k];
        }
        Py_DECREF(fields);
        if (v)
            v->u.seq.subtype = t;
        return v;
    }
    return NULL;
}

/* ---------------------------------------------------------------- fromkeys ---- */

Var *collections_call_builtin(Capture *c, PyObject *fn, Var **args, int32_t nargs, PyObject *kwnames, int *handled)
{
    *handled = 0;
    if (!PyCFunction_Check(fn) || load_types() < 0) {
        sj_err_clear();
        return NULL;
    }
    PyObject *owner = PyCFunction_GET_SELF(fn);   /* borrowed: the class of a classmethod */
    const char *mn = ((PyCFunctionObject *)fn)->m_ml->ml_name;
    if (!owner || !mn || strcmp(mn, "fromkeys") != 0 || (owner != (PyObject *)&PyDict_Type && !is_dict_type(owner)))
        return NULL;
    *handled = 1;
    if (!cap_keep(c, fn))
        return NULL;
    return shadow_call(c, fn, NULL, NULL, args, nargs, kwnames, "fromkeys");
}

/* ------------------------------------------------------------------ inputs ---- */

int collections_is_container(PyObject *obj)
{
    if (!od_type && load_types() < 0) {
        sj_err_clear();
        return 0;
    }
    PyObject *t = (PyObject *)Py_TYPE(obj);
    return is_dict_type(t) || t == deque_type;
}

int collections_wrap_extra(Capture *c, Var *v, PyObject *obj, int32_t src)
{
    PyTypeObject *t = Py_TYPE(obj);
    if (!cap_keep(c, (PyObject *)t))
        return -1;
    const char *attr = (PyObject *)t == dd_type ? "default_factory" : (PyObject *)t == deque_type ? "maxlen" : NULL;
    if (v->kind == VK_DICT)
        v->u.dict.subtype = t;
    else
        v->u.seq.subtype = t;
    if (!attr)
        return 0;
    PyObject *n = PyUnicode_FromString(attr);
    PyObject *val = n ? PyObject_GetAttr(obj, n) : NULL;
    int32_t s = val && src >= 0 ? sources_add(&c->src, SRC_ATTR, src, 0, n, NULL) : -1;
    Py_XDECREF(n);
    if (!val || (src >= 0 && s < 0)) {
        Py_XDECREF(val);
        return -1;
    }
    Var *w;
    if ((PyObject *)t == deque_type) {
        /* the bound every append obeys: guarded by value, never a symbol */
        w = guard_add_simple(c, GK_EQUALS_MATCH, s, val) < 0 ? NULL : var_const(c, val);
        v->u.seq.maxlen = w;
    } else {
        w = wrap_value(c, val, s);
        v->u.dict.factory = w;
    }
    Py_DECREF(val);
    return w ? 0 : -1;
}
