/* The tensor reader: tensor and array metadata for guards, without Python method calls on
 * the hot path for dense CPU torch tensors.
 *
 * The fast path reads a torch.Tensor's TensorImpl directly. Nothing about torch's memory
 * layout is written down here: once torch is imported, treader_init_torch() finds the
 * offsets by scanning probe tensors and checks every probe against meta_from_value (the
 * official Python API); the fast path is on only when all of them agree. Everything the
 * fast path does not cover, and everything when it is off, goes to meta_from_value. */
#ifndef SJ_TENSOR_READER_H
#define SJ_TENSOR_READER_H

#include <Python.h>
#include <stdint.h>

#include "meta.h"

/* Same contract as meta_from_value (vocab/meta.h): 0 and *m filled; 1 when the value is not
 * a supported tensor (*why: a static string, the one meta_from_value gives); -1 with an
 * exception set. strides may be NULL, else it receives m->ndim strides in elements.
 * v is borrowed. Runs treader_init_torch() lazily the first time torch is seen imported. */
int treader_read(PyObject *v, TensorMeta *m, int64_t *strides, const char **why);

/* treader_read, and the data pointer as v.data_ptr() gives it: 0 with *data read from
 * memory (NULL for a tensor of no element); 2 when the metadata was read but the data
 * pointer is for data_ptr() to give (*data NULL): the fast path is off, or the storage is
 * copy-on-write or set to throw or warn on access, where data_ptr() does more than read; 1 and
 * -1 as treader_read. */
int treader_read_data(PyObject *v, TensorMeta *m, int64_t *strides, char **data, const char **why);

/* Probes torch's layout (once; later calls return the recorded answer). Returns 1 when the
 * fast path is on, 0 when it is off (the reason is recorded for treader_py_info). Never
 * raises: any Python error during the probes is cleared and becomes the reason; an
 * exception set by the caller before the call is preserved. Runs Python code (torch calls
 * that build the probe tensors), so call it where that is allowed (guards: the hook is off). */
int treader_init_torch(void);

/* New dict: {"fast": bool, "why_not": str|None, "offsets": {...}, "validated_tensors": int,
 * "key_sets": [int], "dtype_index": {name: int}, "types": [str]}. For tests and diagnostics;
 * probes torch first when it is imported. */
PyObject *treader_py_info(PyObject *self, PyObject *unused);

/* _C._tensor_read(obj) for tests: (dtype_name, sizes, strides, requires_grad, path) with
 * path "fast" or "slow", or None when the value is unsupported. New reference. */
PyObject *treader_py_read(PyObject *self, PyObject *obj);

/* _C._tensor_data(obj) for tests: (data pointer, "fast") read from memory (0 for a tensor of
 * no element), (None, "slow") when data_ptr() would be called, or None when the value is
 * unsupported. New reference. */
PyObject *treader_py_data(PyObject *self, PyObject *obj);

#endif
