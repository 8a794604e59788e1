/* What the oneDNN steps (step_matmul.c, step_conv.c) share: finding the value behind a
 * bound argument, appending a step to the plan, running a step's nodes eagerly, adding
 * their counters to CompiledGraph.stats, and telling whether a weight copy kept across
 * calls is still the weight's.
 *
 * Memory: nothing here holds a Python reference beyond a call, except KeptId's weak
 * reference (owned by the KeptId, released by lower_kept_clear). */
#include "lower_int.h"

int32_t lower_value_of(const Graph *g, const BoundArg *ba)
{
    if (!ba || ba->kind != BA_TENSOR)
        return -1;
    return (int32_t)((const Value *)(const void *)ba->meta - g->values);
}

int lower_push_step(LowerPlan *p, StepKind kind, void **arr, int32_t *n, size_t item, const void *x)
{
    Step st = {kind, *n};
    if (plan_push(arr, n, item, x) < 0)
        return -1;
    if (plan_push((void **)&p->steps, &p->nsteps, sizeof st, &st) < 0) {
        (*n)--;   /* the item stays allocated in *arr, unused: freed with the plan */
        return -1;
    }
    return 0;
}

int lower_exec_nodes(Graph *g, int32_t first, const int32_t *more, int n, PyObject **vals)
{
    if (graph_exec_node(g, first, vals, NULL) < 0)
        return -1;
    for (int i = 0; i < n; i++)
        if (graph_exec_node(g, more[i], vals, NULL) < 0)
            return -1;
    return 0;
}

int lower_put_counts(PyObject *d, int n, const char *const *names, const long long *vals)
{
    for (int i = 0; i < n; i++) {
        PyObject *v = PyLong_FromLongLong(vals[i]);   /* new */
        if (!v || PyDict_SetItemString(d, names[i], v) < 0) {
            Py_XDECREF(v);
            return -1;
        }
        Py_DECREF(v);
    }
    return 0;
}

static PyObject *str_version;   /* strong, interned "_version" */

int lower_kept_version(PyObject *w, long long *version)
{
    if (!str_version && !(str_version = PyUnicode_InternFromString("_version"))) {
        PyErr_Clear();
        return 0;
    }
    PyObject *v = PyObject_GetAttr(w, str_version);   /* new */
    *version = v ? PyLong_AsLongLong(v) : -1;
    Py_XDECREF(v);
    if (*version == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

int lower_kept_matches(const KeptId *id, PyObject *w, const void *ptr, long long version)
{
    return id->wref && PyWeakref_GetObject(id->wref) == w && id->ptr == ptr && id->version == version;
}

int lower_kept_set(KeptId *id, PyObject *w, const void *ptr, long long version)
{
    PyObject *ref = PyWeakref_NewRef(w, NULL);   /* new: owned by id */
    if (!ref) {
        PyErr_Clear();
        return 0;
    }
    Py_XSETREF(id->wref, ref);
    id->ptr = ptr;
    id->version = version;
    return 1;
}

void lower_kept_clear(KeptId *id)
{
    Py_CLEAR(id->wref);
}
