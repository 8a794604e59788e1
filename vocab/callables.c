/* The callables table (vocab/callables.def): each row's path resolved to its object once
 * the library is imported, and looked up by identity during capture. */
#include "callables.h"
#include "libs.h"
#include "../core/errors.h"

const CallableRow callable_rows[] = {
#define X(id, kind, path, op, schema, flags) {#id, kind, path, op, schema, flags},
#include "callables.def"
#undef X
};
const int callable_nrows = (int)(sizeof callable_rows / sizeof callable_rows[0]);

static PyObject *row_objects;    /* strong list: resolved object per row, or None */
static PyObject *by_id;          /* strong dict: id(obj) -> row */
static PyObject *method_rows[2]; /* strong dicts: method name -> row, per Lib */
static PyObject *missing;        /* strong list of paths that did not resolve */
static int resolved_torch, resolved_numpy, resolved_operator;

static int resolve_kind(int want_lib)
{
    /* want_lib: 0 torch rows, 1 numpy rows, 2 operator rows */
    for (int i = 0; i < callable_nrows; i++) {
        const CallableRow *r = &callable_rows[i];
        int lib = (r->kind == CK_TORCH || r->kind == CK_TENSOR_METHOD)    ? 0
                  : (r->kind == CK_NUMPY || r->kind == CK_NDARRAY_METHOD) ? 1
                                                                          : 2;
        if (lib != want_lib)
            continue;
        PyObject *root = NULL;
        const char *rest = strchr(r->path, '.');
        rest = rest ? rest + 1 : "";
        if (r->kind == CK_TORCH)
            root = Py_XNewRef(libs.torch);
        else if (r->kind == CK_TENSOR_METHOD)
            root = Py_XNewRef(libs.tensor_type);
        else if (r->kind == CK_NUMPY)
            root = Py_XNewRef(libs.numpy);
        else if (r->kind == CK_NDARRAY_METHOD)
            root = Py_XNewRef(libs.ndarray_type);
        else
            root = PyImport_ImportModule("operator");
        if (!root)
            return -1;
        PyObject *obj = libs_get_path(root, rest);
        Py_DECREF(root);
        if (!obj) {
            sj_err_clear();
            PyObject *p = PyUnicode_FromString(r->path);
            if (!p || PyList_Append(missing, p) < 0) {
                Py_XDECREF(p);
                return -1;
            }
            Py_DECREF(p);
            continue;
        }
        if (PyList_SetItem(row_objects, i, Py_NewRef(obj)) < 0) {
            Py_DECREF(obj);
            return -1;
        }
        PyObject *key = PyLong_FromVoidPtr(obj);
        PyObject *row = PyLong_FromLong(i);
        int bad = !key || !row;
        if (!bad && !PyDict_Contains(by_id, key))
            bad = PyDict_SetItem(by_id, key, row) < 0;
        if (!bad && (r->kind == CK_TENSOR_METHOD || r->kind == CK_NDARRAY_METHOD)) {
            PyObject *d = method_rows[r->kind == CK_TENSOR_METHOD ? LIB_TORCH : LIB_NUMPY];
            PyObject *name = PyUnicode_FromString(rest);
            bad = !name || (!PyDict_Contains(d, name) && PyDict_SetItem(d, name, row) < 0);
            Py_XDECREF(name);
        }
        Py_XDECREF(key);
        Py_XDECREF(row);
        Py_DECREF(obj);
        if (bad)
            return -1;
    }
    return 0;
}

int callables_init(void)
{
    if (!row_objects) {
        row_objects = PyList_New(callable_nrows);
        if (!row_objects)
            return -1;
        for (int i = 0; i < callable_nrows; i++)
            PyList_SET_ITEM(row_objects, i, Py_NewRef(Py_None));
        by_id = PyDict_New();
        method_rows[0] = PyDict_New();
        method_rows[1] = PyDict_New();
        missing = PyList_New(0);
        if (!by_id || !method_rows[0] || !method_rows[1] || !missing)
            return -1;
    }
    if (!resolved_operator) {
        resolved_operator = 1;
        if (resolve_kind(2) < 0)
            return -1;
    }
    if (libs.torch && !resolved_torch) {
        resolved_torch = 1;
        if (resolve_kind(0) < 0)
            return -1;
    }
    if (libs.numpy && !resolved_numpy) {
        resolved_numpy = 1;
        if (resolve_kind(1) < 0)
            return -1;
    }
    return 0;
}

int callables_lookup(PyObject *fn)
{
    if (!by_id)
        return -1;
    PyObject *key = PyLong_FromVoidPtr(fn);
    if (!key) {
        sj_err_clear();
        return -1;
    }
    PyObject *row = PyDict_GetItemWithError(by_id, key);
    Py_DECREF(key);
    if (!row) {
        sj_err_clear();
        return -1;
    }
    return (int)PyLong_AsLong(row);
}

int callables_lookup_method(Lib lib, PyObject *name)
{
    if (!method_rows[lib])
        return -1;
    PyObject *row = PyDict_GetItemWithError(method_rows[lib], name);
    if (!row) {
        sj_err_clear();
        return -1;
    }
    return (int)PyLong_AsLong(row);
}

PyObject *callables_object(int row)
{
    if (!row_objects || row < 0 || row >= callable_nrows)
        return NULL;
    PyObject *o = PyList_GET_ITEM(row_objects, row);
    return o == Py_None ? NULL : o;
}

int callables_operator_row(const char *path)
{
    for (int i = 0; i < callable_nrows; i++)
        if (callable_rows[i].kind == CK_OPERATOR && strcmp(callable_rows[i].path, path) == 0)
            return i;
    return -1;
}

int callables_path_row(const char *path)
{
    for (int i = 0; i < callable_nrows; i++)
        if (strcmp(callable_rows[i].path, path) == 0)
            return i;
    return -1;
}

/* _C.callables_missing(): rows whose path did not resolve (a table error). */
PyObject *callables_py_missing(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    if (libs_refresh() < 0 || callables_init() < 0)
        return NULL;
    return PyList_GetSlice(missing, 0, PY_SSIZE_T_MAX);
}
