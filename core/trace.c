/* The structured trace's C side: one sink, installed by shapejit.trace. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdarg.h>

#include "trace.h"
#include "errors.h"

int sj_trace_on;
static PyObject *trace_sink;   /* strong or NULL: callable(kind, site, *args) */

void sj_trace_at(const char *file, int line, const char *func, const char *kind, const char *fmt, ...)
{
    if (!trace_sink)
        return;
    PyObject *et, *ev, *tb;   /* strong: the caller's pending exception, put back below */
    PyErr_Fetch(&et, &ev, &tb);
    va_list ap;
    va_start(ap, fmt);
    PyObject *args = Py_VaBuildValue(fmt, ap);   /* strong */
    va_end(ap);
    PyObject *sink = Py_XNewRef(trace_sink);     /* strong: the sink may remove itself */
    PyObject *r = NULL;
    if (args && PyTuple_Check(args) && sink) {
        PyObject *head = Py_BuildValue("(s(sis))", kind, file, line, func);   /* strong */
        PyObject *all = head ? PySequence_Concat(head, args) : NULL;          /* strong */
        r = all ? PyObject_Call(sink, all, NULL) : NULL;
        Py_XDECREF(all);
        Py_XDECREF(head);
    } else if (args) {
        PyErr_Format(PyExc_SystemError, "shapejit trace event %s: arguments are not a tuple", kind);
    }
    if (!r && sj_err_is_interrupt())
        sj_err_clear();   /* kept aside: the hook raises it */
    else if (!r && PyErr_Occurred())
        PyErr_WriteUnraisable(sink ? sink : Py_None);   /* prints and clears */
    Py_XDECREF(r);
    Py_XDECREF(args);
    Py_XDECREF(sink);
    PyErr_Restore(et, ev, tb);   /* steals all three */
}

static PyObject *py_set_trace_sink(PyObject *self, PyObject *sink)
{
    (void)self;
    if (sink != Py_None && !PyCallable_Check(sink)) {
        PyErr_Format(PyExc_TypeError, "shapejit: the trace sink must be callable or None, not %.100s",
                     Py_TYPE(sink)->tp_name);
        return NULL;
    }
    Py_XSETREF(trace_sink, sink == Py_None ? NULL : Py_NewRef(sink));   /* trace_sink: strong */
    sj_trace_on = trace_sink != NULL;
    Py_RETURN_NONE;
}

PyMethodDef sj_trace_methods[] = {
    {"set_trace_sink", py_set_trace_sink, METH_O,
     "set_trace_sink(callable(kind, (file, line, func), *args) or None): where compile events go"},
    {NULL, NULL, 0, NULL},
};
