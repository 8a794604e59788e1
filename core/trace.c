/* The structured trace's C side: one sink, installed by shapejit.trace. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdarg.h>

#include "trace.h"
#include "errors.h"
#include "pyutil.h"

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
    if (!r)
        sj_err_unraisable(sink ? sink : Py_None);
    Py_XDECREF(r);
    Py_XDECREF(args);
    Py_XDECREF(sink);
    PyErr_Restore(et, ev, tb);   /* steals all three */
}

static PyObject *py_set_trace_sink(PyObject *self, PyObject *sink)
{
    (void)self;
    if (sj_sink_set(&trace_sink, sink, "trace sink") < 0)
        return NULL;
    sj_trace_on = trace_sink != NULL;
    Py_RETURN_NONE;
}

PyMethodDef sj_trace_methods[] = {
    {"set_trace_sink", py_set_trace_sink, METH_O,
     "set_trace_sink(callable(kind, (file, line, func), *args) or None): where compile events go"},
    {NULL, NULL, 0, NULL},
};
