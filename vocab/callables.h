/* The callables table (callables.def): the Python callables capture maps to graph ops, each
 * row's path resolved to its object once its library is imported, looked up by identity. */
#ifndef SJ_CALLABLES_H
#define SJ_CALLABLES_H

#include <Python.h>
#include "meta.h"
#include "ops.h"

typedef struct {
    const char *id;
    int kind;        /* CK_* */
    const char *path;
    OpId op;
    const char *schema;
    int flags;       /* CF_* */
} CallableRow;
enum { CK_TORCH, CK_TENSOR_METHOD, CK_NUMPY, CK_NDARRAY_METHOD, CK_OPERATOR };
enum {
    CF_NONE = 0,
    CF_INPLACE = 1,
    CF_RETURNS_NONE = 2
};  /* CF_RETURNS_NONE: in-place, and the call returns None (ndarray.fill) */
extern const CallableRow callable_rows[];
extern const int callable_nrows;

int callables_init(void);                        /* once torch or numpy is seen */
int callables_lookup(PyObject *fn);              /* row index or -1 */
int callables_lookup_method(Lib lib, PyObject *name);   /* Tensor/ndarray method row or -1 */
PyObject *callables_object(int row);   /* borrowed: the resolved callable, or NULL */
int callables_operator_row(const char *path);   /* row of "operator.add" etc., or -1 */
int callables_path_row(const char *path);       /* the first row of a path, or -1 */
/* _C.callables_missing(): the rows whose path did not resolve (a list of str). */
PyObject *callables_py_missing(PyObject *self, PyObject *unused);

#endif
