/* Debug entries of shapejit._C for the shape rules (docs/internals/c_api.md, "Shape rules").
 * Both are METH_VARARGS / METH_NOARGS functions returning a new reference, or NULL with an
 * exception set. */
#ifndef SJ_INFER_PY_H
#define SJ_INFER_PY_H

#include <Python.h>

/* _C._infer(path, args_tuple, kwargs_dict_or_None) -> [(dtype_name, shape, np_scalar)];
 * ValueError(msg) when the rule (or the binder) refuses, KeyError for an unknown path. */
PyObject *shapes_py_infer(PyObject *self, PyObject *args);

/* _C._callable_rows() -> [(id_name, kind_str, path, op_name, schema, flags_str)], kind_str
 * and flags_str spelled as in callables.def ("CK_TORCH", "CF_INPLACE"). */
PyObject *shapes_py_callable_rows(PyObject *self, PyObject *unused);

#endif
