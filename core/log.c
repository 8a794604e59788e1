/* Log channels: levels, the sink, and message emission. core/logs.def is the table. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdarg.h>
#include <string.h>

#include "log.h"
#include "errors.h"
#include "pyutil.h"

int sj_log_levels[LOG_COUNT];

const char *const sj_log_names[LOG_COUNT] = {
#define X(e, name, doc) name,
#include "logs.def"
#undef X
};

static const char *const log_docs[LOG_COUNT] = {
#define X(e, name, doc) doc,
#include "logs.def"
#undef X
};

static PyObject *log_sink;  /* strong or NULL: callable(channel_name, level, message) */

/* ------------------------------------------------------------------------------------
 * Emission
 * ---------------------------------------------------------------------------------- */

/* Hands msg (borrowed) to the sink or stderr. Any exception is reported and cleared. */
static void emit(LogChannel c, int level, PyObject *msg)
{
    if (!log_sink) {
        PySys_FormatStderr("[shapejit] %U\n", msg);
        sj_err_clear();  /* PySys_FormatStderr reports nothing useful on failure */
        return;
    }
    PyObject *sink = Py_NewRef(log_sink);  /* strong: the sink may replace itself */
    PyObject *r = PyObject_CallFunction(sink, "siO", sj_log_names[c], level, msg);  /* strong */
    if (!r)
        sj_err_unraisable(sink);
    Py_XDECREF(r);
    Py_DECREF(sink);
}

void sj_log_str(LogChannel c, int level, PyObject *msg)
{
    if ((unsigned)c >= LOG_COUNT || !sj_log_on(c, level))
        return;
    PyObject *et, *ev, *tb;  /* strong: the caller's pending exception, put back below */
    PyErr_Fetch(&et, &ev, &tb);
    emit(c, level, msg);
    PyErr_Restore(et, ev, tb);  /* steals all three */
}

void sj_log(LogChannel c, int level, const char *fmt, ...)
{
    if ((unsigned)c >= LOG_COUNT || !sj_log_on(c, level))
        return;
    PyObject *et, *ev, *tb;  /* strong: the caller's pending exception, put back below */
    PyErr_Fetch(&et, &ev, &tb);
    va_list ap;
    va_start(ap, fmt);
    PyObject *msg = PyUnicode_FromFormatV(fmt, ap);  /* strong */
    va_end(ap);
    if (msg) {
        emit(c, level, msg);
        Py_DECREF(msg);
    } else {
        PyErr_WriteUnraisable(Py_None);  /* a bad format in C: report, never raise */
    }
    PyErr_Restore(et, ev, tb);  /* steals all three */
}

/* ------------------------------------------------------------------------------------
 * _C functions
 * ---------------------------------------------------------------------------------- */

/* New reference: ", "-joined channel names, or NULL. */
static PyObject *channel_list(void)
{
    return sj_join_names(", ", sj_log_names, LOG_COUNT);
}

/* The channel named by `name` (borrowed); -1 with TypeError/ValueError set. */
static int channel_lookup(PyObject *name)
{
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "shapejit: a log channel name must be a str, not %.100s", Py_TYPE(name)->tp_name);
        return -1;
    }
    for (int i = 0; i < LOG_COUNT; i++)
        if (PyUnicode_CompareWithASCIIString(name, sj_log_names[i]) == 0)
            return i;
    PyObject *valid = channel_list();  /* strong */
    if (valid)
        PyErr_Format(PyExc_ValueError, "shapejit: unknown log channel %R; valid channels: %U", name, valid);
    Py_XDECREF(valid);
    return -1;
}

static PyObject *py_log_channels(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    PyObject *out = PyList_New(LOG_COUNT);  /* strong */
    if (!out)
        return NULL;
    for (int i = 0; i < LOG_COUNT; i++) {
        PyObject *row = Py_BuildValue("(ss)", sj_log_names[i], log_docs[i]);  /* strong */
        if (!row) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, row);  /* steals row */
    }
    return out;
}

static PyObject *py_log_levels(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    PyObject *out = PyDict_New();  /* strong */
    if (!out)
        return NULL;
    for (int i = 0; i < LOG_COUNT; i++) {
        PyObject *v = PyLong_FromLong(sj_log_levels[i]);  /* strong */
        if (!v || PyDict_SetItemString(out, sj_log_names[i], v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(v);
    }
    return out;
}

static PyObject *py_set_log_level(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *name, *level;  /* borrowed */
    if (!PyArg_ParseTuple(args, "OO:set_log_level", &name, &level))
        return NULL;
    int c = channel_lookup(name);
    if (c < 0)
        return NULL;
    if (!PyLong_Check(level) || PyBool_Check(level)) {
        PyErr_Format(PyExc_TypeError,
                     "shapejit: the level of log channel '%s' must be a logging level int "
                     "(0 off, 10 DEBUG, 20 INFO), got %.100s",
                     sj_log_names[c], Py_TYPE(level)->tp_name);
        return NULL;
    }
    long v = PyLong_AsLong(level);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    if (v < 0 || v > 100) {
        PyErr_Format(PyExc_ValueError, "shapejit: the level of log channel '%s' must be between 0 and 100, got %ld",
                     sj_log_names[c], v);
        return NULL;
    }
    sj_log_levels[c] = (int)v;
    Py_RETURN_NONE;
}

static PyObject *py_set_log_sink(PyObject *self, PyObject *sink)
{
    (void)self;
    if (sj_sink_set(&log_sink, sink, "log sink") < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* For tests of the Python side: emits msg on a channel exactly as C code would. */
static PyObject *py_log(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *name, *msg;  /* borrowed */
    int level;
    if (!PyArg_ParseTuple(args, "OiU:_log", &name, &level, &msg))
        return NULL;
    int c = channel_lookup(name);
    if (c < 0)
        return NULL;
    sj_log_str((LogChannel)c, level, msg);
    Py_RETURN_NONE;
}

PyMethodDef sj_log_methods[] = {
    {"log_channels", py_log_channels, METH_NOARGS, "log_channels() -> [(name, doc)]"},
    {"log_levels", py_log_levels, METH_NOARGS, "log_levels() -> {name: level} (0 off)"},
    {"set_log_level", py_set_log_level, METH_VARARGS,
     "set_log_level(name, level): level a logging level int (10 DEBUG, 20 INFO, 0 off)"},
    {"set_log_sink", py_set_log_sink, METH_O, "set_log_sink(callable(channel_name, level, message) or None)"},
    {"_log", py_log, METH_VARARGS, "_log(channel, level, message): emit as C does (tests)"},
    {NULL, NULL, 0, NULL},
};
