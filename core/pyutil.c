/* Small things every layer builds (see pyutil.h). */
#include "pyutil.h"

int sj_grow(void **arr, int32_t *cap, int32_t need, size_t elem, int32_t first)
{
    if (need <= *cap)
        return 0;
    int32_t ncap = *cap ? *cap * 2 : first;
    while (ncap < need)
        ncap *= 2;
    void *p = PyMem_Realloc(*arr, (size_t)ncap * elem);
    if (!p) {
        PyErr_NoMemory();
        return -1;
    }
    *arr = p;
    *cap = ncap;
    return 0;
}

PyObject *sj_int64_tuple(const int64_t *v, int n)
{
    PyObject *t = PyTuple_New(n);   /* new */
    for (int i = 0; t && i < n; i++) {
        PyObject *x = PyLong_FromLongLong(v[i]);   /* new, stolen below */
        if (!x) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, x);
    }
    return t;
}

PyObject *sj_join(const char *sep, PyObject *items)
{
    if (!items)
        return NULL;
    PyObject *s = PyUnicode_FromString(sep);   /* new */
    PyObject *r = s ? PyUnicode_Join(s, items) : NULL;
    Py_XDECREF(s);
    Py_DECREF(items);
    return r;
}

PyObject *sj_join_names(const char *sep, const char *const *names, int n)
{
    PyObject *l = PyList_New(n);   /* new, stolen by sj_join */
    for (int i = 0; l && i < n; i++) {
        PyObject *s = PyUnicode_FromString(names[i]);   /* new, stolen below */
        if (!s) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, i, s);
    }
    return sj_join(sep, l);
}

int sj_sink_set(PyObject **slot, PyObject *sink, const char *what)
{
    if (sink != Py_None && !PyCallable_Check(sink)) {
        PyErr_Format(PyExc_TypeError, "shapejit: the %s must be callable or None, not %.100s", what,
                     Py_TYPE(sink)->tp_name);
        return -1;
    }
    Py_XSETREF(*slot, sink == Py_None ? NULL : Py_NewRef(sink));
    return 0;
}
