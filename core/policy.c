/* See policy.h. Touched with the GIL held. */
#include "policy.h"

#include <string.h>

static const char *const policy_names[POLICY_COUNT] = {
#define X(e, name, doc) name,
#include "policies.def"
#undef X
};

static const char *const policy_docs[POLICY_COUNT] = {
#define X(e, name, doc) doc,
#include "policies.def"
#undef X
};

static PyObject *policies[POLICY_COUNT];   /* strong or NULL, one per table row */

PyObject *policy_get(Policy p)
{
    return (unsigned)p < POLICY_COUNT ? policies[p] : NULL;
}

static PyObject *py_set_policy(PyObject *self, PyObject *args)
{
    (void)self;
    const char *name;
    PyObject *fn;
    if (!PyArg_ParseTuple(args, "sO:_set_policy", &name, &fn))
        return NULL;
    if (fn != Py_None && !PyCallable_Check(fn)) {
        PyErr_Format(PyExc_TypeError, "_set_policy: %s needs a callable or None, not %s", name, Py_TYPE(fn)->tp_name);
        return NULL;
    }
    for (int p = 0; p < POLICY_COUNT; p++) {
        if (strcmp(policy_names[p], name) != 0)
            continue;
        Py_XSETREF(policies[p], fn == Py_None ? NULL : Py_NewRef(fn));
        Py_RETURN_NONE;
    }
    PyErr_Format(PyExc_ValueError, "_set_policy: no policy named %R (core/policies.def)", PyTuple_GET_ITEM(args, 0));
    return NULL;
}

static PyObject *py_policies(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    PyObject *d = PyDict_New();   /* new */
    for (int p = 0; d && p < POLICY_COUNT; p++) {
        PyObject *row = Py_BuildValue("(sO)", policy_docs[p], policies[p] ? policies[p] : Py_None);   /* new */
        if (!row || PyDict_SetItemString(d, policy_names[p], row) < 0)
            Py_CLEAR(d);
        Py_XDECREF(row);
    }
    return d;
}

PyMethodDef sj_policy_methods[] = {
    {"_set_policy", py_set_policy, METH_VARARGS,
     "_set_policy(name, callable or None): the Python side of a C decision (core/policies.def)."},
    {"_policies", py_policies, METH_NOARGS,
     "{policy name: (what it is called with, the callable or None)} (core/policies.def)."},
    {NULL, NULL, 0, NULL},
};
