/* The methods of numpy's ufuncs: np.add.reduce, np.multiply.accumulate, np.add.outer,
 * np.add.at. Each bound method is a fresh object (np.add.reduce is not np.add.reduce), so
 * they are recognised by their ufunc and method name rather than by identity, and recorded
 * through rows that compute the same thing:
 *   reduce      the numpy reduction of that ufunc (add -> numpy.sum, maximum -> numpy.max,
 *               logical_and -> numpy.all on bool arrays), with the ufunc's default axis=0
 *               passed explicitly (numpy.sum is itself add.reduce with axis=None);
 *   accumulate  numpy.cumsum / numpy.cumprod for add / multiply, and the rows of the bound
 *               methods themselves for maximum / minimum ("numpy.maximum.accumulate");
 *   outer       the ufunc on A[..., None, ...] and B (A gets one new dim per dim of B);
 *   at          the row of the bound method ("numpy.add.at"): an in-place node that runs
 *               numpy's own unbuffered call, so repeated indices accumulate as in eager.
 * Anything else (out=, where=, an unknown keyword, a ufunc without a row) is not handled
 * and the call breaks as an unsupported function. */
#include "capture.h"
#include "../vocab/libs.h"
#include "../core/errors.h"

typedef struct {
    const char *ufunc;        /* ufunc.__name__ */
    const char *reduce;       /* row path of its reduce, or NULL */
    const char *accumulate;   /* row path of its accumulate, or NULL */
    int bool_only;            /* the reduction row is only the same for bool arrays */
} UfuncRow;

static const UfuncRow ufunc_rows[] = {
    {"add", "numpy.sum", "numpy.cumsum", 0},
    {"multiply", "numpy.prod", "numpy.cumprod", 0},
    {"maximum", "numpy.max", "numpy.maximum.accumulate", 0},
    {"minimum", "numpy.min", "numpy.minimum.accumulate", 0},
    {"logical_and", "numpy.all", NULL, 1},
    {"logical_or", "numpy.any", NULL, 1},
};

#define MAX_PARAMS 8

/* Bind args to the parameters names (the first npos_max may be positional). 0 bound, 1 a
 * call this file does not take (an unknown keyword, too many arguments). */
static int bind(const char *const *names, int nnames, int npos_max, Var **args, int32_t nargs, PyObject *kwnames,
                Var **slots)
{
    int32_t nkw = kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0;
    int32_t npos = nargs - nkw;
    for (int i = 0; i < nnames; i++)
        slots[i] = NULL;
    if (npos > npos_max)
        return 1;
    for (int32_t i = 0; i < npos; i++)
        slots[i] = args[i];
    for (int32_t k = 0; k < nkw; k++) {
        const char *kn = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, k));
        if (!kn) {
            sj_err_clear();
            return 1;
        }
        int found = -1;
        for (int i = 0; found < 0 && i < nnames; i++)
            if (!strcmp(kn, names[i]))
                found = i;
        if (found < 0 || slots[found])
            return 1;
        slots[found] = args[npos + k];
    }
    return 0;
}

static int is_none(const Var *v)
{
    return !v || (v->kind == VK_CONST && v->obj == Py_None);
}

static int is_numpy_array(const Var *v)
{
    return v && v->kind == VK_TENSOR && v->u.t.meta.lib == LIB_NUMPY;
}

/* Record row path with positional args and the keyword arguments (names[i], vals[i]) whose
 * value is given. NULL with the capture failed, or *handled = 0 when the row is absent. */
static Var *record_path(Capture *c, const char *path, Var **pos, int npos, const char *const *names, Var **vals,
                        int nkw, int *handled)
{
    int row = callables_path_row(path);
    if (row < 0)
        return NULL;
    *handled = 1;
    Var *all[MAX_PARAMS * 2];
    int n = 0, k = 0;
    for (int i = 0; i < npos; i++)
        all[n++] = pos[i];
    for (int i = 0; i < nkw; i++)
        k += vals[i] != NULL;
    PyObject *kn = k ? PyTuple_New(k) : NULL;
    if (k && (!kn || !cap_keep_steal(c, kn))) {
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    for (int i = 0, j = 0; i < nkw; i++) {
        if (!vals[i])
            continue;
        PyObject *s = PyUnicode_InternFromString(names[i]);
        if (!s) {
            cap_fail_exc(c, BR_INTERNAL);
            return NULL;
        }
        PyTuple_SET_ITEM(kn, j++, s);
        all[n++] = vals[i];
    }
    return op_record(c, row, all, n, kn);
}

/* The constant 0 (the ufunc methods' default axis); NULL with the capture failed. */
static Var *zero(Capture *c, int *handled)
{
    Var *v = var_const_steal(c, PyLong_FromLong(0));
    if (!v) {
        *handled = 1;
        cap_fail_exc(c, BR_INTERNAL);
    }
    return v;
}

static Var *reduce_call(Capture *c, const UfuncRow *u, Var **args, int32_t nargs, PyObject *kwnames, int *handled)
{
    static const char *const names[] = {"array", "axis", "dtype", "out", "keepdims", "initial", "where"};
    Var *s[7];
    if (!u->reduce || bind(names, 7, 7, args, nargs, kwnames, s) || !is_numpy_array(s[0]) || !is_none(s[3]) || s[6])
        return NULL;
    if (u->bool_only && (s[0]->u.t.meta.dtype != DT_BOOL || s[2] || s[5]))
        return NULL;   /* numpy.all/any have no dtype= or initial= */
    if ((!strcmp(u->ufunc, "maximum") || !strcmp(u->ufunc, "minimum")) && s[2])
        return NULL;   /* numpy.max has no dtype= */
    Var *axis = s[1] ? s[1] : zero(c, handled);
    if (!axis)
        return NULL;
    static const char *const kw[] = {"axis", "dtype", "keepdims", "initial"};
    Var *vals[4] = {axis, s[2], s[4], s[5]};
    return record_path(c, u->reduce, s, 1, kw, vals, 4, handled);
}

static Var *accumulate_call(Capture *c, const UfuncRow *u, Var **args, int32_t nargs, PyObject *kwnames, int *handled)
{
    static const char *const names[] = {"array", "axis", "dtype", "out"};
    Var *s[4];
    if (!u->accumulate || bind(names, 4, 4, args, nargs, kwnames, s) || !is_numpy_array(s[0]) || !is_none(s[3]))
        return NULL;
    if (s[1] && is_none(s[1]))
        return NULL;   /* accumulate(axis=None) is not cumsum's flattening */
    Var *axis = s[1] ? s[1] : zero(c, handled);
    if (!axis)
        return NULL;
    static const char *const kw[] = {"axis", "dtype"};
    Var *vals[2] = {axis, s[2]};
    return record_path(c, u->accumulate, s, 1, kw, vals, 2, handled);
}

static Var *outer_call(Capture *c, PyObject *ufunc, Var **args, int32_t nargs, PyObject *kwnames, int *handled)
{
    if (nargs != 2 || kwnames || !is_numpy_array(args[0]))
        return NULL;
    Var *b = args[1];
    int bdim;
    if (is_numpy_array(b))
        bdim = b->u.t.meta.ndim;
    else if (b->kind == VK_CONST && (PyLong_Check(b->obj) || PyFloat_Check(b->obj)))
        bdim = 0;
    else
        return NULL;
    int row = callables_lookup(ufunc), gi = callables_operator_row("operator.getitem");
    if (row < 0 || gi < 0)
        return NULL;
    *handled = 1;
    Var *a = args[0];
    if (bdim > 0) {
        /* A[..., None, ..., None]: one new trailing dim per dim of B */
        PyObject *ix = PyTuple_New(1 + bdim);
        if (!ix) {
            cap_fail_exc(c, BR_INTERNAL);
            return NULL;
        }
        PyTuple_SET_ITEM(ix, 0, Py_NewRef(Py_Ellipsis));
        for (int i = 0; i < bdim; i++)
            PyTuple_SET_ITEM(ix, 1 + i, Py_NewRef(Py_None));
        Var *iv = var_const_steal(c, ix);
        if (!iv) {
            cap_fail_exc(c, BR_INTERNAL);
            return NULL;
        }
        Var *ga[2] = {a, iv};
        if (!(a = op_record(c, gi, ga, 2, NULL)))
            return NULL;
    }
    Var *ua[2] = {a, b};
    return op_record(c, row, ua, 2, NULL);
}

static Var *at_call(Capture *c, const char *name, Var **args, int32_t nargs, PyObject *kwnames, int *handled)
{
    if (kwnames || nargs != 3 || !is_numpy_array(args[0]) || args[0]->u.t.meta.np_scalar)
        return NULL;
    char path[96];
    snprintf(path, sizeof path, "numpy.%s.at", name);
    return record_path(c, path, args, 3, NULL, NULL, 0, handled);
}

Var *ufunc_method_call(Capture *c, PyObject *fn, Var **args, int32_t nargs, PyObject *kwnames, int *handled)
{
    *handled = 0;
    if (!libs.numpy || !PyCFunction_Check(fn) || nargs < 1)
        return NULL;
    PyObject *self = PyCFunction_GET_SELF(fn);   /* borrowed */
    if (!self || strcmp(Py_TYPE(self)->tp_name, "numpy.ufunc") != 0)
        return NULL;
    const char *method = ((PyCFunctionObject *)fn)->m_ml->ml_name;
    PyObject *uname = PyObject_GetAttrString(self, "__name__");   /* new */
    const char *un = uname && PyUnicode_Check(uname) ? PyUnicode_AsUTF8(uname) : NULL;
    if (!un) {
        sj_err_clear();
        Py_XDECREF(uname);
        return NULL;
    }
    Var *r = NULL;
    if (!strcmp(method, "outer")) {
        r = outer_call(c, self, args, nargs, kwnames, handled);
    } else if (!strcmp(method, "at")) {
        r = at_call(c, un, args, nargs, kwnames, handled);
    } else {
        for (size_t i = 0; i < sizeof ufunc_rows / sizeof *ufunc_rows; i++) {
            if (strcmp(ufunc_rows[i].ufunc, un) != 0)
                continue;
            if (!strcmp(method, "reduce"))
                r = reduce_call(c, &ufunc_rows[i], args, nargs, kwnames, handled);
            else if (!strcmp(method, "accumulate"))
                r = accumulate_call(c, &ufunc_rows[i], args, nargs, kwnames, handled);
            break;
        }
    }
    Py_DECREF(uname);
    return r;
}
