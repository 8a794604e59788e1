/* See errors.h: exceptions that are not Exceptions are kept aside, never cleared. */
#include "errors.h"

/* strong or NULL: the exception kept aside on this thread (PyErr_Fetch's triple) */
static _Thread_local PyObject *kept_type, *kept_value, *kept_tb;

int sj_err_is_interrupt(void)
{
    PyObject *t = PyErr_Occurred();   /* borrowed */
    return t && !PyErr_GivenExceptionMatches(t, PyExc_Exception);
}

void sj_err_unraisable(PyObject *where)
{
    if (sj_err_is_interrupt())
        sj_err_clear();   /* kept aside: the hook raises it */
    else if (PyErr_Occurred())
        PyErr_WriteUnraisable(where);   /* prints and clears */
}

void sj_err_clear(void)
{
    if (!sj_err_is_interrupt()) {
        PyErr_Clear();
        return;
    }
    if (kept_type) {
        PyErr_Clear();   /* one is already waiting to be raised */
        return;
    }
    PyErr_Fetch(&kept_type, &kept_value, &kept_tb);
}

int sj_hasattr(PyObject *obj, PyObject *name)
{
    PyObject *v = NULL;
    int r = _PyObject_LookupAttr(obj, name, &v);   /* AttributeError: 0, no exception */
    Py_XDECREF(v);
    return r;
}

int sj_err_deferred(void)
{
    return kept_type != NULL;
}

int sj_err_raise_deferred(void)
{
    if (!kept_type)
        return 0;
    PyObject *t = kept_type, *v = kept_value, *tb = kept_tb;
    kept_type = kept_value = kept_tb = NULL;
    PyErr_Restore(t, v, tb);   /* steals all three */
    return -1;
}
