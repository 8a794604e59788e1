/* Events for explain: delivered to a Python sink; never raise into the frame. */
#include "events.h"
#include "../core/errors.h"
#include "../core/pyutil.h"

static PyObject *sink;   /* strong or NULL */
static long frame_ids;

int events_active(void)
{
    return sink != NULL;
}

static void emit(const char *kind, PyObject *payload)
{
    if (!sink || !payload)
        return;
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyObject *s = Py_NewRef(sink);   /* strong: the sink may replace itself */
    PyObject *r = PyObject_CallFunction(s, "sO", kind, payload);
    if (!r)
        sj_err_unraisable(s);
    Py_XDECREF(r);
    Py_DECREF(s);
    PyErr_Restore(et, ev, tb);
}

void events_emit_graph(PyObject *graph)
{
    emit("graph", graph);
}

void events_emit_break(PyObject *reason, PyObject *stack)
{
    if (!sink)
        return;
    PyObject *p = Py_BuildValue("(OO)", reason, stack ? stack : Py_None);
    if (!p) {
        sj_err_clear();
        return;
    }
    emit("break", p);
    Py_DECREF(p);
}

void events_emit_guards(PyObject *lines)
{
    emit("guards", lines);
}

void events_emit_compile_time(double seconds)
{
    if (!sink)
        return;
    PyObject *f = PyFloat_FromDouble(seconds);
    if (!f) {
        sj_err_clear();
        return;
    }
    emit("compile_time", f);
    Py_DECREF(f);
}

long events_next_frame_id(void)
{
    return frame_ids++;
}

void events_reset(void)
{
    frame_ids = 0;
}

PyObject *events_py_set_sink(PyObject *self, PyObject *s)
{
    (void)self;
    if (sj_sink_set(&sink, s, "event sink") < 0)
        return NULL;
    Py_RETURN_NONE;
}
