/* Per-op facts generated from ops.def (the shape rules are dispatched in shapes/rules.c). */
#include "ops.h"

const OpInfo op_info[OP_COUNT] = {
#define X(e, name, kind, rule) [e] = {name, kind},
#include "ops.def"
#undef X
};

/* The kind and rule columns as ops.def spells them, for _C._op_rows only: the rule is a
 * name here, its function lives in shapes/. */
static const char *const op_spelling[OP_COUNT][2] = {
#define X(e, name, kind, rule) [e] = {#kind, #rule},
#include "ops.def"
#undef X
};

PyObject *ops_py_rows(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    PyObject *list = PyList_New(OP_COUNT);    /* new */
    if (!list)
        return NULL;
    for (int i = 0; i < OP_COUNT; i++) {
        PyObject *t = Py_BuildValue("(sss)", op_info[i].name, op_spelling[i][0], op_spelling[i][1]);    /* new */
        if (!t) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, t);    /* steals t */
    }
    return list;
}
