/* Graph ops: the enum and per-op facts, generated from ops.def. */
#ifndef SJ_OPS_H
#define SJ_OPS_H

#include <Python.h>

typedef enum {
    OPK_POINTWISE,
    OPK_REDUCTION,
    OPK_VIEW,
    OPK_SHAPE,
    OPK_MATMUL,
    OPK_NN,
    OPK_FACTORY,
    OPK_MUTATION,
    OPK_STATE,
    OPK_SIZE,
    OPK_DATA_SHAPE
} OpKind;

typedef enum {
#define X(e, name, kind, rule) e,
#include "ops.def"
#undef X
    OP_COUNT
} OpId;

typedef struct {
    const char *name;
    OpKind kind;
} OpInfo;

extern const OpInfo op_info[OP_COUNT];

/* _C._op_rows() -> [(name, kind, rule)] in OpId order, kind and rule spelled as in ops.def
 * ("OPK_POINTWISE", "rule_same"): what tests check the shape rules against. New
 * reference, or NULL with an exception. */
PyObject *ops_py_rows(PyObject *self, PyObject *unused);

#endif
