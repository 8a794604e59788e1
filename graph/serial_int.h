/* Internals shared by the serialised graph's writer (serial.c) and reader (serial_read.c). */
#ifndef SJ_SERIAL_INT_H
#define SJ_SERIAL_INT_H

#include "serial.h"

#define SERIAL_VERSION 1
#define MAX_DEPTH 64          /* nesting of constants and of pool lists */

/* The library objects a graph may hold as constants, one row each: kind name, library
 * imported to resolve it (NULL: the callable's own module), number of data items (-1: any). */
#define REF_KINDS(X) \
    X(RK_TORCH_DTYPE, "torch.dtype", "torch", 1) \
    X(RK_TORCH_DEVICE, "torch.device", "torch", 1) \
    X(RK_TORCH_MEMORY_FORMAT, "torch.memory_format", "torch", 1) \
    X(RK_TORCH_LAYOUT, "torch.layout", "torch", 1) \
    X(RK_TORCH_SIZE, "torch.Size", "torch", -1) \
    X(RK_TORCH_TENSOR, "torch.Tensor", "torch", 4) \
    X(RK_NUMPY_DTYPE, "numpy.dtype", "numpy", 1) \
    X(RK_NUMPY_SCALAR, "numpy.scalar", "numpy", 2) \
    X(RK_NUMPY_NDARRAY, "numpy.ndarray", "numpy", 3) \
    X(RK_ROW, "callable.row", NULL, 1) \
    X(RK_GLOBAL, "callable.global", NULL, 2) \
    X(RK_METHOD, "callable.method", NULL, 3) \
    X(RK_TORCH_OP, "callable.torch_op", "torch", 3)

typedef enum {
#define X(e, name, lib, ndata) e,
    REF_KINDS(X)
#undef X
        RK_COUNT
} RefKind;

extern const char *const serial_ref_kind_names[RK_COUNT];
extern const int serial_ref_ndata[RK_COUNT];
extern const char *const serial_arg_kind_names[ARG_ABSENT + 1];   /* "value", ... "absent" */
extern PyTypeObject SjGraphRef_Type;

int serial_ref_kind(const char *name);   /* RefKind, or -1 */
/* A new GraphRef. kind: a REF_KINDS name; data: a tuple; repr, name: a str or NULL, not
 * both NULL. Borrows all. */
PyObject *serial_ref_new(const char *kind, PyObject *data, PyObject *repr, PyObject *name);

#endif
