/* Read caches (readcache.h): the tag checks, and which attribute reads qualify. */
#include "readcache.h"
#include "../core/errors.h"

/* strong, once recognized: torch.nn.Module.__getattr__'s code and globals (see
 * is_module_getattr) */
static PyObject *module_getattr_code, *module_getattr_globals;

/* PEP 509's tag is deprecated from 3.12 on (dict watchers replace it); 3.11 keeps it on
 * every write. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
uint64_t readcache_dict_tag(PyObject *d)
{
    return ((PyDictObject *)d)->ma_version_tag;
}
#pragma GCC diagnostic pop

/* PyObject_GenericGetAttr itself, a module's getattro (generic, then the module's
 * __getattr__), or a class whose __getattribute__ is the slot wrapper of the generic lookup
 * (object's, or a builtin base's such as dict's): CPython then installs
 * slot_tp_getattr_hook, which makes the same test and calls the generic lookup first. A
 * class with its own __getattribute__, in Python or C, fails the last test. */
int readcache_generic_getattr(PyTypeObject *tp)
{
    if (tp->tp_getattro == PyObject_GenericGetAttr || tp->tp_getattro == PyModule_Type.tp_getattro)
        return 1;
    static PyObject *name;   /* strong, interned, never released */
    if (!name && !(name = PyUnicode_InternFromString("__getattribute__"))) {
        sj_err_clear();
        return 0;
    }
    PyObject *ga = _PyType_Lookup(tp, name);   /* borrowed */
    return ga && Py_TYPE(ga) == &PyWrapperDescr_Type &&
           ((PyWrapperDescrObject *)ga)->d_wrapped == (void *)PyObject_GenericGetAttr;
}

/* 1 when c's tags all still hold for base: same type at the same version, the instance
 * dict and every dependency unwritten. */
static int still_valid(const ReadCache *c, PyObject *base)
{
    PyTypeObject *tp = Py_TYPE(base);
    if (!c->tag || tp != c->type || tp->tp_version_tag != c->tver || !(tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG))
        return 0;
    PyObject **dp = _PyObject_GetDictPtr(base);
    if (!dp || !*dp || readcache_dict_tag(*dp) != c->tag)
        return 0;
    for (int i = 0; i < c->ndeps; i++)
        if (readcache_dict_tag(c->deps[i]) != c->dep_tags[i])
            return 0;
    return 1;
}

PyObject *readcache_attr_get(const ReadCache *c, PyObject *base)
{
    return !c->absent && still_valid(c, base) ? c->val : NULL;
}

int readcache_attr_absent(const ReadCache *c, PyObject *base)
{
    /* c->hook is held by the class, whose tag still_valid checks first */
    return c->absent && still_valid(c, base) && (!c->hook || PyFunction_GET_CODE(c->hook) == module_getattr_code);
}

/* The instance dict of base (materialized, see below) and the type's version, or NULL
 * when the type has no valid version tag or the instance no dict. */
static PyObject *tagged_dict(PyObject *base, unsigned int *tver)
{
    PyTypeObject *tp = Py_TYPE(base);
    if (!(tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) || tp->tp_version_tag == 0)
        return NULL;
    *tver = tp->tp_version_tag;
    /* materializes a 3.11 instance's inline values into its __dict__ (what reading
     * obj.__dict__ does), after which every write to the instance bumps the dict's tag */
    PyObject **dp = _PyObject_GetDictPtr(base);
    return dp && *dp && PyDict_Check(*dp) ? *dp : NULL;
}

void readcache_attr_fill(ReadCache *c, PyObject *base, PyObject *name, PyObject *val)
{
    PyTypeObject *tp = Py_TYPE(base);
    if (!PyUnicode_CheckExact(name) || !readcache_generic_getattr(tp))
        return;
    /* A data descriptor on the type (a property, a slot, __dict__ itself) wins over the
     * instance dict: such reads run every time. So do reads shadowing a class attribute of
     * a mutable class: that class could gain __set__ (or the attribute its __class__), and
     * become a data descriptor, with neither tp nor the instance dict changing its tag. */
    PyObject *descr = _PyType_Lookup(tp, name);
    if (descr && (Py_TYPE(descr)->tp_descr_set || !PyType_HasFeature(Py_TYPE(descr), Py_TPFLAGS_IMMUTABLETYPE)))
        return;
    unsigned int tver;
    PyObject *d = tagged_dict(base, &tver);
    if (!d)
        return;
    uint64_t tag0 = readcache_dict_tag(d);
    PyObject *dv = PyDict_GetItemWithError(d, name);
    if (!dv) {
        sj_err_clear();
        return;
    }
    if (dv != val || readcache_dict_tag(d) != tag0 || tp->tp_version_tag != tver)
        return;
    *c = (ReadCache){.tag = tag0, .type = tp, .tver = tver, .val = val};
}

/* ------------------------------------------------------------- misses ---- */

/* The dicts torch.nn.Module.__getattr__ looks in, in its order, after the generic lookup
 * missed. */
static const char *const module_dicts[READCACHE_MAX_DEPS] = {"_parameters", "_buffers", "_modules"};

/* The code of torch.nn.Module.__getattr__ as this cache models it (strong, once
 * recognized), and the globals it runs in (strong): the function looks name up in the
 * instance dict's _parameters, _buffers and _modules, else raises AttributeError. The names
 * its code uses are checked, so a torch whose __getattr__ reads anything else is not
 * modelled (its misses are read every time). A cached miss keeps the function and checks
 * that it still runs this code (readcache_attr_absent): assigning its __code__ changes
 * neither the class nor any dict. */
static int is_module_getattr(PyObject *fn)
{
    if (!PyFunction_Check(fn))
        return 0;
    PyObject *code = PyFunction_GET_CODE(fn);
    if (module_getattr_code)
        return code == module_getattr_code && PyFunction_GET_GLOBALS(fn) == module_getattr_globals;
    PyCodeObject *co = (PyCodeObject *)code;
    PyObject *mod = PyFunction_GET_MODULE(fn);
    if (!mod || !PyUnicode_Check(mod) || PyUnicode_CompareWithASCIIString(mod, "torch.nn.modules.module") != 0 ||
        PyUnicode_CompareWithASCIIString(co->co_qualname, "Module.__getattr__") != 0)
        return 0;
    static const char *const names[] = {"__dict__", "AttributeError", "type", "__name__"};
    if (PyTuple_GET_SIZE(co->co_names) != 4)
        return 0;
    for (int i = 0; i < 4; i++)
        if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(co->co_names, i), names[i]) != 0)
            return 0;
    int k = 0;   /* the first str constants: the three dicts, in order */
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(co->co_consts) && k < READCACHE_MAX_DEPS; i++) {
        PyObject *x = PyTuple_GET_ITEM(co->co_consts, i);
        if (PyUnicode_Check(x) && PyUnicode_CompareWithASCIIString(x, module_dicts[k++]) != 0)
            return 0;
    }
    if (k != READCACHE_MAX_DEPS)
        return 0;
    module_getattr_code = Py_NewRef(code);
    module_getattr_globals = Py_NewRef(PyFunction_GET_GLOBALS(fn));
    return 1;
}

void readcache_absent_fill(ReadCache *c, PyObject *base, PyObject *name)
{
    static PyObject *getattr_name;
    if (!getattr_name && !(getattr_name = PyUnicode_InternFromString("__getattr__")))
        return (void)sj_err_clear();
    PyTypeObject *tp = Py_TYPE(base);
    if (!PyUnicode_CheckExact(name) || !readcache_generic_getattr(tp) || PyModule_Check(base))
        return;
    PyObject *hook = _PyType_Lookup(tp, getattr_name);
    int module_hook = hook && is_module_getattr(hook);
    if ((hook && !module_hook) || _PyType_Lookup(tp, name))
        return;   /* an unknown __getattr__, or a class attribute whose read raised */
    unsigned int tver;
    PyObject *d = tagged_dict(base, &tver);
    if (!d || PyDict_Contains(d, name) != 0)
        return (void)sj_err_clear();
    ReadCache n = {
        .tag = readcache_dict_tag(d), .type = tp, .tver = tver, .absent = 1, .hook = module_hook ? hook : NULL};
    for (int i = 0; module_hook && i < READCACHE_MAX_DEPS; i++) {
        PyObject *sub = PyDict_GetItemString(d, module_dicts[i]);   /* borrowed */
        if (!sub)
            continue;
        uint64_t sub_tag = PyDict_CheckExact(sub) ? readcache_dict_tag(sub) : 0;
        if (!sub_tag || PyDict_Contains(sub, name) != 0 || readcache_dict_tag(sub) != sub_tag)
            return (void)sj_err_clear();
        n.deps[n.ndeps] = sub;
        n.dep_tags[n.ndeps++] = sub_tag;
    }
    if (readcache_dict_tag(d) == n.tag && tp->tp_version_tag == tver)
        *c = n;
}
