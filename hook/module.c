/* shapejit._C: module init and the functions the Python package calls. */
#include <Python.h>
#include "../core/config.h"
#include "../core/log.h"
#include "../core/policy.h"
#include "../core/trace.h"
#include "../graph/ir.h"
#include "../guards/code_cache.h"
#include "compile.h"
#include "events.h"
#include "../shapes/infer_py.h"
#include "../shapes/sym.h"
#include "../vocab/tensor_reader.h"
#include "../vocab/callables.h"
#include "../vocab/ops.h"
#include "../native/native.h"

int hook_init_types(PyObject *m);
int symb_init_module(PyObject *m);
int checks_init_module(PyObject *m);
int polyfills_init_module(PyObject *m);
int lower_init_module(PyObject *m);

static PyObject *py_reset(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    code_cache_reset_all();
    compile_forget_breaks();
    events_reset();
    Py_RETURN_NONE;
}

static PyObject *py_stats(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return Py_BuildValue("{sl,sl,sl,sl,sl,sl,sl,sd}", "frames", sj_stats.frames, "graphs", sj_stats.graphs,
                         "graph_breaks", sj_stats.graph_breaks, "recompiles", sj_stats.recompiles, "cache_entries",
                         sj_stats.cache_entries, "unique_graphs", sj_stats.unique_graphs, "eager_frames",
                         sj_stats.eager_frames, "compile_time_s", sj_stats.compile_time_s);
}

static PyObject *py_disable_code(PyObject *self, PyObject *code)
{
    (void)self;
    if (!PyCode_Check(code)) {
        PyErr_Format(PyExc_TypeError, "disable_code expects a code object, not %s", Py_TYPE(code)->tp_name);
        return NULL;
    }
    if (code_cache_disable((PyCodeObject *)code) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *py_generated_codes(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return code_cache_generated();
}

static PyMethodDef core_methods[] = {
    {"reset", py_reset, METH_NOARGS, "Forget every compiled entry and zero the counters."},
    {"stats", py_stats, METH_NOARGS, "Counters: frames, graphs, graph_breaks, recompiles, ..."},
    {"disable_code", py_disable_code, METH_O, "Never compile this code object."},
    {"set_event_sink", events_py_set_sink, METH_O, "Deliver capture events to a callable (explain)."},
    {"_set_exception_classes", hook_py_set_exception_classes, METH_O,
     "{shapejit error class: subclass to raise instead} or None (the torch compat layer)."},
    {"callables_missing", callables_py_missing, METH_NOARGS, "Table rows whose path did not resolve."},
    {"_generated_codes", py_generated_codes, METH_NOARGS, "Continuation and resume code objects (tests)."},
    {"_eval_source", sources_py_eval, METH_VARARGS, "Resolve a chain of source accessors (tests)."},
    {"_infer", shapes_py_infer, METH_VARARGS, "Run a shape rule on example values (tests)."},
    {"_callable_rows", shapes_py_callable_rows, METH_NOARGS, "The callables table (tests)."},
    {"_op_rows", ops_py_rows, METH_NOARGS, "The ops table: (name, kind, rule) (tests)."},
    {"_tensor_reader_info", treader_py_info, METH_NOARGS,
     "The tensor reader's fast path: on, why not, offsets (tests)."},
    {"_tensor_read", treader_py_read, METH_O, "(dtype, sizes, strides, requires_grad, path) or None (tests)."},
    {"_tensor_data", treader_py_data, METH_O, "(data pointer, 'fast'), (None, 'slow') or None (tests)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "shapejit._C",
    "shapejit's C core: frame hook, capture, guards, graphs.",
    -1,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
};

static int add_methods(PyObject *m, PyMethodDef *defs)
{
    for (PyMethodDef *d = defs; d->ml_name; d++) {
        PyObject *f = PyCFunction_NewEx(d, NULL, PyModule_GetNameObject(m));
        if (!f || PyModule_AddObject(m, d->ml_name, f) < 0) {
            Py_XDECREF(f);
            return -1;
        }
    }
    return 0;
}

PyMODINIT_FUNC PyInit__C(void)
{
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    if (config_init() < 0 || add_methods(m, core_methods) < 0 || add_methods(m, sj_config_methods) < 0 ||
        add_methods(m, sj_log_methods) < 0 || add_methods(m, sj_trace_methods) < 0 ||
        add_methods(m, sj_policy_methods) < 0 || graph_py_init_types(m) < 0 || hook_init_types(m) < 0 ||
        symb_init_module(m) < 0 || checks_init_module(m) < 0 || polyfills_init_module(m) < 0 ||
        sym_py_init_types(m) < 0 || codegen_init_module(m) < 0 || lower_init_module(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
