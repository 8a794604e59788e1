/* Objects made during capture: namedtuples (tuple vars with a subtype) and instances of
 * plain user classes such as dataclasses (VK_USEROBJ: a type and a dict of attributes).
 * Their __init__ is inlined; attribute writes stay inside the capture, so nothing needs
 * replaying unless the object escapes (then the result plan rebuilds it). */
#include "capture.h"
#include "libs.h"

PyObject *objects_fields(PyTypeObject *t)
{
    PyObject *f = PyObject_GetAttrString((PyObject *)t, "_fields");
    if (!f) {
        PyErr_Clear();
        f = PyObject_GetAttrString((PyObject *)t, "__match_args__");
    }
    if (!f) {
        PyErr_Clear();
        return NULL;
    }
    if (!PyTuple_Check(f)) {
        Py_DECREF(f);
        return NULL;
    }
    return f;
}

static Var *construct_namedtuple(Capture *c, PyTypeObject *t, PyObject *fields, Var **args, int32_t nargs,
                                 PyObject *kwnames)
{
    Py_ssize_t nf = PyTuple_GET_SIZE(fields);
    int32_t nkw = kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0;
    int32_t npos = nargs - nkw;
    Var **items = cap_alloc(c, sizeof(Var *) * (size_t)(nf + 1));
    if (!items)
        return NULL;
    if (npos > nf) {
        cap_fail(c, BR_USER_EXCEPTION, "%s() takes %zd arguments", t->tp_name, nf);
        return NULL;
    }
    for (int32_t i = 0; i < npos; i++)
        items[i] = args[i];
    for (int32_t k = 0; k < nkw; k++) {
        PyObject *kn = PyTuple_GET_ITEM(kwnames, k);
        Py_ssize_t i;
        for (i = 0; i < nf; i++)
            if (PyUnicode_Compare(PyTuple_GET_ITEM(fields, i), kn) == 0)
                break;
        if (i == nf) {
            cap_fail(c, BR_USER_EXCEPTION, "%s() got an unexpected keyword '%U'", t->tp_name, kn);
            return NULL;
        }
        items[i] = args[npos + k];
    }
    PyObject *defaults = PyObject_GetAttrString((PyObject *)t, "_field_defaults");
    if (!defaults)
        PyErr_Clear();
    for (Py_ssize_t i = 0; i < nf; i++) {
        if (items[i])
            continue;
        PyObject *d = defaults && PyDict_Check(defaults) ? PyDict_GetItem(defaults, PyTuple_GET_ITEM(fields, i)) : NULL;
        if (!d || !(items[i] = wrap_untracked(c, d))) {
            Py_XDECREF(defaults);
            if (!cap_failed(c))
                cap_fail(c, BR_USER_EXCEPTION, "%s() missing field %U", t->tp_name, PyTuple_GET_ITEM(fields, i));
            return NULL;
        }
    }
    Py_XDECREF(defaults);
    Var *v = var_seq(c, VK_TUPLE, items, (int32_t)nf);
    if (v && cap_keep(c, (PyObject *)t))
        v->u.seq.subtype = t;
    return v;
}

/* A class capture can instantiate: a Python-level __init__, object's __new__, no metaclass
 * magic, no __slots__-only storage surprises. */
static int plain_class(PyTypeObject *t)
{
    if (t->tp_new != PyBaseObject_Type.tp_new)
        return 0;
    if (Py_TYPE(t) != &PyType_Type)
        return 0;
    return (t->tp_flags & Py_TPFLAGS_HEAPTYPE) != 0;
}

Var *objects_construct(Capture *c, PyObject *cls, Var **args, int32_t nargs, PyObject *kwnames, int *handled)
{
    *handled = 0;
    if (!PyType_Check(cls))
        return NULL;
    PyTypeObject *t = (PyTypeObject *)cls;
    if (PyType_IsSubtype(t, &PyTuple_Type) && t != &PyTuple_Type) {
        PyObject *fields = objects_fields(t);
        if (!fields || (libs.size_type && cls == libs.size_type)) {
            Py_XDECREF(fields);
            return NULL;
        }
        *handled = 1;
        Var *r = construct_namedtuple(c, t, fields, args, nargs, kwnames);
        Py_DECREF(fields);
        return r;
    }
    if (!plain_class(t) || (libs.module_type && PyType_IsSubtype(t, (PyTypeObject *)libs.module_type)))
        return NULL;
    static PyObject *s_init;
    if (!s_init && !(s_init = PyUnicode_InternFromString("__init__")))
        return NULL;
    PyObject *init = _PyType_Lookup(t, s_init);   /* borrowed */
    *handled = 1;
    if (!cap_keep(c, cls))
        return NULL;
    Var *o = var_new(c, VK_USEROBJ);
    Var *attrs = o ? var_dict(c) : NULL;
    if (!attrs)
        return NULL;
    o->u.uobj.type = t;
    o->u.uobj.attrs = attrs;
    if (init && PyFunction_Check(init)) {
        Var *fn = wrap_untracked(c, init);
        Var **all = fn ? cap_alloc(c, sizeof(Var *) * (size_t)(nargs + 1)) : NULL;
        if (!all)
            return NULL;
        all[0] = o;
        memcpy(all + 1, args, sizeof(Var *) * (size_t)nargs);
        if (!call_var(c, fn, all, nargs + 1, kwnames))
            return NULL;
        return o;
    }
    if (nargs == 0)
        return o;   /* object.__init__ */
    cap_fail(c, BR_UNSUPPORTED_CALL, "constructing %s (its __init__ is not Python code)", t->tp_name);
    return NULL;
}

Var *objects_attr_load(Capture *c, Var *o, PyObject *name)
{
    Var *key = var_const(c, name);
    if (!key)
        return NULL;
    int found;
    Var *v = var_dict_get(c, o->u.uobj.attrs, key, &found);
    if (found)
        return v;
    if (PyErr_Occurred())
        return NULL;
    PyObject *descr = _PyType_Lookup(o->u.uobj.type, name);   /* borrowed */
    if (!descr) {
        PyErr_Format(PyExc_AttributeError, "'%s' object has no attribute '%U'", o->u.uobj.type->tp_name, name);
        cap_fail_exc(c, BR_USER_EXCEPTION);
        return NULL;
    }
    if (PyFunction_Check(descr)) {
        Var *fn = wrap_untracked(c, descr);
        Var *m = fn ? var_new(c, VK_METHOD) : NULL;
        if (m) {
            m->u.method.self = o;
            m->u.method.fn = fn;
        }
        return m;
    }
    if (Py_TYPE(descr) == &PyProperty_Type) {
        PyObject *fget = PyObject_GetAttrString(descr, "fget");
        Var *fn = fget && PyFunction_Check(fget) ? wrap_untracked(c, fget) : NULL;
        Py_XDECREF(fget);
        if (!fn) {
            PyErr_Clear();
            cap_fail(c, BR_UNSUPPORTED_VALUE, "property '%U' of %s", name, o->u.uobj.type->tp_name);
            return NULL;
        }
        Var *a[1] = {o};
        return call_var(c, fn, a, 1, NULL);
    }
    if (Py_TYPE(descr) == &PyStaticMethod_Type || Py_TYPE(descr) == &PyClassMethod_Type ||
        Py_TYPE(descr)->tp_descr_get == NULL) {
        PyObject *v2 = PyObject_GetAttr((PyObject *)o->u.uobj.type, name);
        if (!v2) {
            cap_fail_exc(c, BR_USER_EXCEPTION);
            return NULL;
        }
        Var *r = wrap_untracked(c, v2);
        Py_DECREF(v2);
        return r;
    }
    cap_fail(c, BR_UNSUPPORTED_VALUE, "attribute '%U' of %s (a %s)", name, o->u.uobj.type->tp_name,
             Py_TYPE(descr)->tp_name);
    return NULL;
}

int objects_attr_store(Capture *c, Var *o, PyObject *name, Var *val)
{
    Var *key = var_const(c, name);
    if (!key)
        return -1;
    return var_dict_set(c, o->u.uobj.attrs, key, val);
}
