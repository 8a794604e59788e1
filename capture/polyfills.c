/* torch functions the capture inlines a Python version of (shapejit/_polyfills.py), and
 * the checks those versions ask of the capture.
 *
 * A torch function whose own code the capture cannot follow (a higher-order operator
 * dispatching through torch's modes, vmap) but whose result ordinary ops can compute has
 * a polyfill: a call of it inlines the polyfill in its place. A failure inside the
 * polyfill breaks the graph at the user's call, which then runs torch's own function, so
 * the polyfill needs to be right only where the capture succeeds. The list is Python's
 * (_polyfills.POLYFILLS), handed over once through the "polyfills" policy
 * (core/policies.def): C never imports a shapejit module.
 *
 * _C._static_int(n) is n outside a capture, and None under capture when n is a symbolic
 * size, so a polyfill can unroll a loop over a static count without pinning a symbolic one.
 *
 * _C._pointwise_call(fn, *args) is fn(*args) at run time; under capture it inlines fn and
 * fails unless every op it recorded is pointwise (associative_scan's combine_fn, which
 * torch runs under vmap one element at a time and the polyfill on whole slices).
 *
 * Memory: the table's strings and functions are strong references kept for the life of
 * the process (PyMem array). */
#include "capture.h"
#include "../vocab/libs.h"
#include "../core/errors.h"
#include "../core/policy.h"

typedef struct {
    PyObject *module;   /* strong: the str naming torch's module */
    PyObject *name;     /* strong: the function's name in it */
    PyObject *repl;     /* strong: the polyfill */
    PyObject *fn;       /* strong once resolved: torch's function; NULL before */
    int tried;
} Polyfill;

static Polyfill *table;          /* PyMem: ntable rows */
static Py_ssize_t ntable = -1;   /* -1 until the policy gave the list */

static PyObject *pointwise_fn;   /* strong: _C._pointwise_call, set by polyfills_init_module */
static PyObject *static_int_fn;  /* strong: _C._static_int, set by polyfills_init_module */

/* The list from the policy, once: (module, name, function) rows. A list of another form
 * gives no polyfills (the calls are not replaced). */
static void load_table(void)
{
    if (ntable >= 0 || libs_refresh() < 0 || !libs.torch) {
        sj_err_clear();
        return;   /* loaded; or no torch yet, so nothing to replace (the list imports it) */
    }
    PyObject *policy = policy_get(POLICY_POLYFILLS);   /* borrowed */
    if (!policy)
        return;   /* the package has not registered it yet */
    ntable = 0;
    PyObject *rows = PyObject_CallNoArgs(policy);
    PyObject *seq = rows ? PySequence_Fast(rows, "polyfills") : NULL;
    Py_XDECREF(rows);
    Py_ssize_t n = seq ? PySequence_Fast_GET_SIZE(seq) : 0;
    table = n ? PyMem_Calloc((size_t)n, sizeof *table) : NULL;
    for (Py_ssize_t i = 0; table && i < n; i++) {
        PyObject *r = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 3 || !PyUnicode_Check(PyTuple_GET_ITEM(r, 0)) ||
            !PyUnicode_Check(PyTuple_GET_ITEM(r, 1)) || !PyFunction_Check(PyTuple_GET_ITEM(r, 2)))
            continue;
        Polyfill *p = &table[ntable++];
        p->module = Py_NewRef(PyTuple_GET_ITEM(r, 0));
        p->name = Py_NewRef(PyTuple_GET_ITEM(r, 1));
        p->repl = Py_NewRef(PyTuple_GET_ITEM(r, 2));
    }
    Py_XDECREF(seq);
    sj_err_clear();
}

/* Resolves row p once its torch module is loaded (never imports it: a function of a
 * module not loaded cannot be called). */
static void resolve(Polyfill *p)
{
    if (p->tried)
        return;
    PyObject *mod = PyImport_GetModule(p->module);
    if (!mod) {
        sj_err_clear();
        return;   /* tried again at the next call */
    }
    p->tried = 1;
    p->fn = PyObject_GetAttr(mod, p->name);   /* NULL in another torch: not replaced */
    Py_DECREF(mod);
    sj_err_clear();
}

PyObject *polyfill_for(PyObject *fn)
{
    load_table();
    for (Py_ssize_t i = 0; i < ntable; i++) {
        resolve(&table[i]);
        if (table[i].fn && table[i].fn == fn)
            return table[i].repl;
    }
    return NULL;
}

int polyfill_is_pointwise_call(PyObject *fn)
{
    return fn && fn == pointwise_fn;
}

int polyfill_is_static_int(PyObject *fn)
{
    return fn && fn == static_int_fn;
}

Var *polyfill_static_int(Capture *c, Var **args, int32_t nargs, PyObject *kwnames)
{
    if (nargs != 1 || kwnames) {
        cap_fail(c, BR_UNSUPPORTED_CALL, "_static_int(n) takes one positional argument");
        return NULL;
    }
    return args[0]->kind == VK_SYMINT ? var_const(c, Py_None) : args[0];
}

Var *polyfill_pointwise_call(Capture *c, Var **args, int32_t nargs, PyObject *kwnames)
{
    if (nargs < 1 || kwnames) {
        cap_fail(c, BR_UNSUPPORTED_CALL, "_pointwise_call(fn, *args) takes positional arguments");
        return NULL;
    }
    int32_t first = c->g->nnodes;
    Var *r = call_var(c, args[0], args + 1, nargs - 1, NULL);
    if (!r)
        return NULL;
    for (int32_t ni = first; ni < c->g->nnodes; ni++) {
        OpId op = (OpId)c->g->nodes[ni].op;
        if (op_info[op].kind != OPK_POINTWISE && op_info[op].kind != OPK_SIZE) {
            cap_fail(c, BR_UNSUPPORTED_CALL,
                     "%s is not pointwise (it calls %s): its result on whole slices could differ from torch's, "
                     "element by element",
                     var_a(c, args[0]), op_info[op].name);
            return NULL;
        }
    }
    return r;
}

/* _C._pointwise_call(fn, *args): fn(*args), outside a capture. */
static PyObject *pointwise_call(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    (void)self;
    if (n < 1) {
        PyErr_SetString(PyExc_TypeError, "_pointwise_call(fn, *args)");
        return NULL;
    }
    return PyObject_Vectorcall(args[0], args + 1, (size_t)(n - 1), NULL);
}

/* _C._static_int(n): n, outside a capture. */
static PyObject *static_int(PyObject *self, PyObject *n)
{
    (void)self;
    return Py_NewRef(n);
}

static PyMethodDef methods[] = {
    {"_pointwise_call", (PyCFunction)(void (*)(void))pointwise_call, METH_FASTCALL,
     "_pointwise_call(fn, *args): fn(*args); under capture, fn must record only pointwise ops."},
    {"_static_int", static_int, METH_O,
     "_static_int(n): n; under capture None when n is a symbolic size (nothing is guarded)."},
    {NULL, NULL, 0, NULL},
};

int polyfills_init_module(PyObject *m)
{
    if (PyModule_AddFunctions(m, methods) < 0)
        return -1;
    Py_XSETREF(pointwise_fn, PyObject_GetAttrString(m, "_pointwise_call"));
    Py_XSETREF(static_int_fn, PyObject_GetAttrString(m, "_static_int"));
    return pointwise_fn && static_int_fn ? 0 : -1;
}
