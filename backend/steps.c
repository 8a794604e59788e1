/* The step kinds' dispatch table, generated from steps.def (the functions are declared in
 * lower.h, next to the files that define them).
 *
 * Memory: a static table; nothing here holds a reference. */
#include "lower.h"

const StepKindInfo step_kinds[STEP_COUNT] = {
#define X(KIND, name, lowers, node_plan, pass, run, free, stats) \
    [STEP_##KIND] = {name, lowers, node_plan, pass, run, free, stats},
#include "steps.def"
#undef X
};

/* The enum column as steps.def spells it ("KERNEL"), for _C._step_kinds only. */
static const char *const kind_spelling[STEP_COUNT] = {
#define X(KIND, name, lowers, node_plan, pass, run, free, stats) [STEP_##KIND] = #KIND,
#include "steps.def"
#undef X
};

PyObject *steps_py_kinds(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    PyObject *list = PyList_New(STEP_COUNT);    /* new */
    if (!list)
        return NULL;
    for (int k = 0; k < STEP_COUNT; k++) {
        PyObject *t = Py_BuildValue("(ssO)", kind_spelling[k], step_kinds[k].name,
                                    step_kinds[k].lowers ? Py_True : Py_False);    /* new */
        if (!t) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, k, t);    /* steals t */
    }
    return list;
}
