/* User hints on sizes and the run-time assertions of the shape environment.
 *
 * shapejit.check(cond) and shapejit.constrain_range(n, min=, max=) (shapejit/checks.py),
 * and torch's torch._check / torch._check_is_size, called inside a compiled function: a
 * condition that the ranges already decide costs nothing; one on backed sizes is decided
 * by the hints and guarded, like any branch; one on unbacked values (t.item(), nonzero()'s
 * rows, mark_unbacked dims), which no hint decides, narrows the symbols' ranges and stays
 * in the graph as an assertion checked at run time (torch's deferred runtime assertions).
 * The shape rules use the same assertions when a relation they need (two broadcast sizes
 * equal, a size not negative) depends on unbacked values.
 *
 * Memory: the functions recognised are cached as strong references for the life of the
 * process (fns[]); everything else is borrowed from the capture. */
#include "capture.h"
#include "../vocab/libs.h"
#include "../core/log.h"
#include "../core/trace.h"
#include "../core/errors.h"

/* ------------------------------------------------------------ assertions ---- */

static PyObject *assert_fn;   /* strong: _C._sym_assert, set by checks_init_module */

/* One argument of an assertion node: graph value of e, or e's value as a constant. */
static int assert_arg(Capture *c, SymNode *e, Arg *out)
{
    if (e->kind != SK_CONST) {
        int32_t v = symb_materialize(c, e);
        *out = (Arg){ARG_VALUE, v, 0};
        return v < 0 ? -1 : 0;
    }
    PyObject *k = PyLong_FromLongLong(e->value);   /* new */
    int32_t id = k ? graph_const(c->g, k) : -1;
    Py_XDECREF(k);
    *out = (Arg){ARG_CONST, id, 0};
    return id < 0 ? -1 : 0;
}

int symb_runtime_assert(Capture *c, SymNode *rel)
{
    if (rel->nargs != 2 || !sym_is_bool(rel)) {
        PyErr_SetString(PyExc_SystemError, "shapejit: a run-time assertion needs a relation");
        return -1;
    }
    PyObject *key = PyLong_FromVoidPtr(rel);   /* new: asserted once per capture */
    if (!key)
        return -1;
    int seen = PyDict_Contains(c->symvals, key);
    if (seen != 0) {
        Py_DECREF(key);
        return seen < 0 ? -1 : 0;
    }
    PyObject *text = sym_print(c->env, rel, NULL, NULL);   /* new */
    PyObject *w = text ? symb_where_text(c) : NULL;         /* new */
    if (!w)
        goto fail;
    sj_log(LOG_DYNAMIC, SJ_INFO, "runtime_assert %U [guard added] %U", text, w);
    if (sj_trace_on) {
        PyObject *stack = cap_user_stack(c);
        if (stack)
            SJ_TRACE("guard_added", "(OO)", text, stack);
        Py_XDECREF(stack);
        sj_err_clear();
    }
    shape_env_refine(&c->shape, rel);
    if (!assert_fn) {
        PyErr_SetString(PyExc_SystemError, "shapejit: _C._sym_assert is not registered");
        goto fail;
    }
    PyObject *kind = PyLong_FromLong(rel->kind);   /* new */
    PyObject *msg = PyUnicode_FromFormat("%U  (%U)", text, w);   /* new */
    int32_t kid = kind ? graph_const(c->g, kind) : -1, mid = msg ? graph_const(c->g, msg) : -1;
    Py_XDECREF(kind);
    Py_XDECREF(msg);
    int32_t first = kid >= 0 && mid >= 0 ? graph_pool(c->g, 4) : -1;
    /* the operands are made before they are stored: making one adds nodes, which can move
     * the pool */
    Arg lhs, rhs;
    if (first < 0 || assert_arg(c, rel->args[0], &lhs) < 0 || assert_arg(c, rel->args[1], &rhs) < 0)
        goto fail;
    c->g->pool[first] = lhs;
    c->g->pool[first + 1] = rhs;
    c->g->pool[first + 2] = (Arg){ARG_CONST, kid, 0};
    c->g->pool[first + 3] = (Arg){ARG_CONST, mid, 0};
    int32_t v = cap_scalar_node(c, OP_SYM_ASSERT, assert_fn, first, 4);
    PyObject *val = v >= 0 ? PyLong_FromLong(v) : NULL;   /* new */
    int rc = val ? PyDict_SetItem(c->symvals, key, val) : -1;
    Py_XDECREF(val);
    if (rc < 0)
        goto fail;
    c->nops++;
    Py_DECREF(text);
    Py_DECREF(w);
    Py_DECREF(key);
    return 0;
fail:
    Py_XDECREF(text);
    Py_XDECREF(w);
    Py_DECREF(key);
    return -1;
}

/* _C._sym_assert(a, b, kind, text): the run-time side: a <kind> b must hold. */
static PyObject *sym_assert(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    (void)self;
    if (n != 4 || !PyLong_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "_sym_assert(a, b, kind, text)");
        return NULL;
    }
    int op;
    switch ((SymKind)PyLong_AsLong(args[2])) {
    case SK_EQ:
        op = Py_EQ;
        break;
    case SK_NE:
        op = Py_NE;
        break;
    case SK_LT:
        op = Py_LT;
        break;
    case SK_LE:
        op = Py_LE;
        break;
    default:
        PyErr_SetString(PyExc_ValueError, "_sym_assert: not a relation kind");
        return NULL;
    }
    int ok = PyObject_RichCompareBool(args[0], args[1], op);
    if (ok < 0)
        return NULL;
    if (!ok) {
        PyErr_Format(PyExc_RuntimeError, "Runtime assertion failed for expression %S: the values were %R and %R",
                     args[3], args[0], args[1]);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* ----------------------------------------------------------------- hints ---- */

/* rel must hold: nothing when the ranges show it, a guard when the hints decide it (a
 * failure when they say it does not hold: the interpreter then runs the call and raises),
 * a run-time assertion when it depends on unbacked values. 0 or -1 (failure recorded). */
static int expect(Capture *c, SymNode *rel, const char *what)
{
    if (!rel)
        return cap_fail_exc(c, BR_INTERNAL);
    SymTruth t = sym_static_truth(c->env, rel);
    if (t == SYM_TRUE)
        return 0;
    if (t == SYM_UNKNOWN && sym_has_unbacked(rel))
        return symb_runtime_assert(c, rel) < 0 ? cap_fail_exc(c, BR_INTERNAL) : 0;
    int holds = 0;
    if (t == SYM_UNKNOWN && symb_decide(c, rel, &holds) < 0)
        return cap_fail_exc(c, BR_INTERNAL);
    return holds ? 0 : cap_fail(c, BR_USER_EXCEPTION, "%s does not hold", what);
}

typedef enum { CK_CHECK, CK_CONSTRAIN, CK_TORCH_CHECK, CK_TORCH_IS_SIZE, CK_COUNT } CheckFn;

static PyObject *fns[CK_COUNT];   /* strong (None when absent), resolved once */

static int resolve(void)
{
    if (fns[CK_CHECK])
        return 0;
    static const struct {
        const char *mod, *name;
    } where[CK_COUNT] = {
        [CK_CHECK] = {"shapejit.checks", "check"},
        [CK_CONSTRAIN] = {"shapejit.checks", "constrain_range"},
        [CK_TORCH_CHECK] = {"torch", "_check"},
        [CK_TORCH_IS_SIZE] = {"torch", "_check_is_size"},
    };
    for (int i = CK_COUNT - 1; i >= 0; i--) {
        PyObject *f = NULL;
        if (strcmp(where[i].mod, "torch") != 0 || libs.torch) {
            PyObject *m = PyImport_ImportModule(where[i].mod);   /* new */
            f = m ? PyObject_GetAttrString(m, where[i].name) : NULL;
            Py_XDECREF(m);
        }
        if (!f) {
            sj_err_clear();
            f = Py_NewRef(Py_None);
        }
        fns[i] = f;   /* fns[CK_CHECK] last: it marks the table complete */
    }
    return 0;
}

/* An int bound of constrain_range: 0 and *given (1 with *out, or 0 when absent or None);
 * 1 when it is not an int (no exception: the interpreter runs the call and raises). */
static int bound_of(Var *v, int64_t *out, int *given)
{
    *given = 0;
    if (!v || (v->kind == VK_CONST && v->obj == Py_None))
        return 0;
    if (v->kind != VK_CONST || !PyLong_CheckExact(v->obj))
        return 1;
    int overflow;
    *out = PyLong_AsLongLongAndOverflow(v->obj, &overflow);
    if (overflow || (*out == -1 && PyErr_Occurred())) {
        sj_err_clear();
        return 1;
    }
    *given = 1;
    return 0;
}

Var *check_call(Capture *c, PyObject *fn, Var **args, int32_t nargs, PyObject *kwnames, int *handled)
{
    *handled = 0;
    resolve();
    int k = 0;
    while (k < CK_COUNT && fns[k] != fn)
        k++;
    if (k == CK_COUNT)
        return NULL;
    *handled = 1;
    Var *x = cap_arg(args, nargs, kwnames, 0, k == CK_CONSTRAIN ? "n" : k == CK_TORCH_IS_SIZE ? "i" : "cond");
    if (!x) {
        cap_fail(c, BR_USER_EXCEPTION, "a check without its argument");
        return NULL;
    }
    int is_int = x->kind == VK_SYMINT && !sym_is_bool(x->u.s.e);
    if (k == CK_CHECK || k == CK_TORCH_CHECK) {
        if (x->kind == VK_SYMINT && sym_is_bool(x->u.s.e)) {
            if (expect(c, x->u.s.e, "the checked condition") < 0)
                return NULL;
        } else if (k == CK_TORCH_CHECK && is_int) {
            /* torch._check(n): n is true, that is, not zero */
            SymNode *zero = sym_const(c->env, 0);
            if (expect(c, zero ? sym_ne(c->env, x->u.s.e, zero) : NULL, "n != 0") < 0)
                return NULL;
        } else if (x->kind == VK_CONST && (PyBool_Check(x->obj) || k == CK_TORCH_CHECK)) {
            int t = PyObject_IsTrue(x->obj);
            if (t < 0) {
                cap_fail_exc(c, BR_USER_EXCEPTION);
                return NULL;
            }
            if (!t) {   /* the interpreter runs it and raises the check's own error */
                cap_fail(c, BR_USER_EXCEPTION, "the checked condition is False");
                return NULL;
            }
        } else {
            cap_fail(c, BR_UNSUPPORTED_VALUE, "check() of %s", var_a(c, x));
            return NULL;
        }
        return var_const(c, Py_None);
    }
    int64_t lo = 0, hi = 0;
    int has_lo = 1, has_hi = 0, bad = 0;   /* _check_is_size(n): 0 <= n */
    if (k != CK_TORCH_IS_SIZE)
        bad = bound_of(cap_arg(args, nargs, kwnames, 1, "min"), &lo, &has_lo) ||
              bound_of(cap_arg(args, nargs, kwnames, 2, "max"), &hi, &has_hi);
    if (bad || (has_lo && has_hi && lo > hi) || !(is_int || (x->kind == VK_CONST && PyLong_CheckExact(x->obj)))) {
        /* a wrong argument: the interpreter runs the call and raises its error */
        cap_fail(c, BR_USER_EXCEPTION, "%s with bad arguments",
                 k == CK_CONSTRAIN ? "constrain_range" : "_check_is_size");
        return NULL;
    }
    if (symb_ensure(c) < 0) {
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    SymNode *n = symb_node_of(c, x);
    if (!n) {
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    SymNode *klo = sym_const(c->env, lo), *khi = sym_const(c->env, hi);
    if (!klo || !khi) {
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    if ((has_lo && expect(c, sym_le(c->env, klo, n), "the lower bound") < 0) ||
        (has_hi && expect(c, sym_le(c->env, n, khi), "the upper bound") < 0))
        return NULL;
    return var_const(c, Py_None);
}

static PyMethodDef check_methods[] = {
    {"_sym_assert", (PyCFunction)(void (*)(void))sym_assert, METH_FASTCALL,
     "_sym_assert(a, b, kind, text): the run-time check of a size assertion"},
    {NULL, NULL, 0, NULL},
};

int checks_init_module(PyObject *m)
{
    if (PyModule_AddFunctions(m, check_methods) < 0)
        return -1;
    /* the graphs call the module's own function object (the target of their assertions) */
    Py_XSETREF(assert_fn, PyObject_GetAttrString(m, "_sym_assert"));
    return assert_fn ? 0 : -1;
}
