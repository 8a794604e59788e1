/* torch functions the capture inlines a Python version of (shapejit/_polyfills.py), and
 * the checks those versions ask of the capture.
 *
 * A torch function whose own code the capture cannot follow (a higher-order operator
 * dispatching through torch's modes, vmap) but whose result ordinary ops can compute is
 * listed here with its polyfill: a call of it inlines the polyfill in its place. A failure
 * inside the polyfill breaks the graph at the user's call, which then runs torch's own
 * function, so the polyfill needs to be right only where the capture succeeds.
 *
 * _C._static_int(n) is n outside a capture, and None under capture when n is a symbolic
 * size, so a polyfill can unroll a loop over a static count without pinning a symbolic one.
 *
 * _C._pointwise_call(fn, *args) is fn(*args) at run time; under capture it inlines fn and
 * fails unless every op it recorded is pointwise (associative_scan's combine_fn, which
 * torch runs under vmap one element at a time and the polyfill on whole slices).
 *
 * Memory: the function objects of the table are looked up once and kept as strong
 * references for the life of the process. The polyfills come from the package's
 * "polyfill" policy (core/policies.def). */
#include "capture.h"
#include "../vocab/libs.h"
#include "../core/errors.h"
#include "../core/policy.h"

typedef struct {
    const char *module;   /* torch's function: its module and name */
    const char *name;
    PyObject *fn;         /* strong once resolved: torch's function */
    PyObject *repl;       /* strong once resolved: the polyfill */
    int tried;
} Polyfill;

static Polyfill table[] = {
    {"torch._higher_order_ops.associative_scan", "associative_scan", NULL, NULL, 0},
};

static PyObject *pointwise_fn;   /* strong: _C._pointwise_call, set by polyfills_init_module */
static PyObject *static_int_fn;  /* strong: _C._static_int, set by polyfills_init_module */

/* Resolves row p once its torch module is loaded (never imports it: a function of a
 * module not loaded cannot be called): torch's function, and the polyfill the package's
 * policy names for it (C never imports a shapejit module). */
static void resolve(Polyfill *p)
{
    if (p->tried)
        return;
    PyObject *lookup = policy_get(POLICY_POLYFILL);   /* borrowed */
    PyObject *name = lookup ? PyUnicode_FromString(p->module) : NULL;
    PyObject *mod = name ? PyImport_GetModule(name) : NULL;
    Py_XDECREF(name);
    if (!mod) {
        sj_err_clear();
        return;   /* tried again at the next call */
    }
    p->tried = 1;
    PyObject *fn = PyObject_GetAttrString(mod, p->name);
    Py_DECREF(mod);
    PyObject *repl = fn ? PyObject_CallFunction(lookup, "ss", p->module, p->name) : NULL;
    if (!repl || !PyFunction_Check(repl)) {
        sj_err_clear();
        Py_XDECREF(fn);
        Py_XDECREF(repl);
        return;   /* another torch, or no polyfill: the call is not replaced */
    }
    p->fn = fn;
    p->repl = repl;
}

PyObject *polyfill_for(PyObject *fn)
{
    for (size_t i = 0; i < sizeof table / sizeof *table; i++) {
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
