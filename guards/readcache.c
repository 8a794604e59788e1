/* Read caches (readcache.h): the tag checks, and which attribute reads qualify. */
#include "readcache.h"

/* PEP 509's tag is deprecated from 3.12 on (dict watchers replace it); 3.11 keeps it on
 * every write. */
_Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wdeprecated-declarations\"") uint64_t
    readcache_dict_tag(PyObject *d)
{
    return ((PyDictObject *)d)->ma_version_tag;
}
_Pragma("GCC diagnostic pop")

    /* object.__getattribute__, the slot wrapper every class inherits unless it defines its own.
 * Borrowed from object's dict, which never loses it. */
    static PyObject *object_getattribute(void)
{
    static PyObject *cached;
    if (!cached) {
        PyObject *name = PyUnicode_InternFromString("__getattribute__");
        if (!name)
            return NULL;
        cached = _PyType_Lookup(&PyBaseObject_Type, name);
        Py_DECREF(name);
    }
    return cached;
}

/* 1 when getattr on instances of tp is the generic lookup, possibly followed by a
 * __getattr__ fallback (which a value found in the instance dict never reaches):
 * PyObject_GenericGetAttr itself, a module's getattro (generic, then the module's
 * __getattr__), or a class whose __getattribute__ is object's (CPython then installs
 * slot_tp_getattr_hook, which calls the generic lookup first). A class with its own
 * __getattribute__, in Python or C, owns its wrapper in its dict and fails the last test. */
static int generic_getattr(PyTypeObject *tp)
{
    if (tp->tp_getattro == PyObject_GenericGetAttr || tp->tp_getattro == PyModule_Type.tp_getattro)
        return 1;
    static PyObject *name;
    if (!name && !(name = PyUnicode_InternFromString("__getattribute__")))
        return 0;
    PyObject *ga = object_getattribute();
    return ga && _PyType_Lookup(tp, name) == ga;
}

PyObject *readcache_attr_get(const ReadCache *c, PyObject *base)
{
    PyTypeObject *tp = Py_TYPE(base);
    if (!c->tag || tp != c->type || tp->tp_version_tag != c->tver || !(tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG))
        return NULL;
    PyObject **dp = _PyObject_GetDictPtr(base);
    return dp && *dp && readcache_dict_tag(*dp) == c->tag ? c->val : NULL;
}

void readcache_attr_fill(ReadCache *c, PyObject *base, PyObject *name, PyObject *val)
{
    PyTypeObject *tp = Py_TYPE(base);
    if (!PyUnicode_CheckExact(name) || !generic_getattr(tp))
        return;
    /* A data descriptor on the type (a property, a slot, __dict__ itself) wins over the
     * instance dict: such reads run every time. */
    PyObject *descr = _PyType_Lookup(tp, name);
    if (descr && Py_TYPE(descr)->tp_descr_set)
        return;
    if (!(tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) || tp->tp_version_tag == 0)
        return;
    unsigned int tver = tp->tp_version_tag;
    /* materializes a 3.11 instance's inline values into its __dict__ (what reading
     * obj.__dict__ does), after which every write to the instance bumps the dict's tag */
    PyObject **dp = _PyObject_GetDictPtr(base);
    if (!dp || !*dp || !PyDict_Check(*dp))
        return;
    PyObject *d = *dp;
    uint64_t tag0 = readcache_dict_tag(d);
    PyObject *dv = PyDict_GetItemWithError(d, name);
    if (!dv) {
        PyErr_Clear();
        return;
    }
    if (dv != val || readcache_dict_tag(d) != tag0 || tp->tp_version_tag != tver)
        return;
    c->tag = tag0;
    c->type = tp;
    c->tver = tver;
    c->val = val;
}
