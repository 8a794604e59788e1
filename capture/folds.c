/* Constant folds of library queries (capture/folds.def): each row's path resolved to its
 * object from sys.modules, looked up by identity during capture, and its call answered
 * with a constant, guarded where the answer can change between calls. Also the public
 * name of a callable, for the rows' lookup by path and for break messages. */
#include "capture.h"
#include "../vocab/libs.h"
#include "../core/errors.h"
#include "../core/pyutil.h"

typedef enum { FOLD_PURE, FOLD_META, FOLD_GUARDED, FOLD_FIXED } FoldPolicy;
typedef enum { FA_CALL, FA_FALSE, FA_TRUE, FA_NONE } FoldAnswer;

typedef struct {
    const char *path;
    FoldPolicy policy;
    FoldAnswer answer;
} FoldRow;

static const FoldRow rows[] = {
#define X(path, policy, answer) {path, policy, answer},
#include "folds.def"
#undef X
};
enum { NROWS = (int)(sizeof rows / sizeof rows[0]) };

static PyObject *objs[NROWS];       /* strong: the resolved callable of each row, or NULL */
static PyObject *by_id;             /* strong dict: id(callable) -> row */
static int nresolved;
static Py_ssize_t seen_modules = -1;   /* len(sys.modules) at the last resolution */

/* Resolve the rows whose module is imported now. A row's module is only looked up in
 * sys.modules: capture never imports (torch.onnx is imported lazily by torch, on the
 * user's first use of it). 0, or -1 with an exception. */
static int resolve(void)
{
    PyObject *mods = PyImport_GetModuleDict();   /* borrowed */
    if (nresolved == NROWS || PyDict_GET_SIZE(mods) == seen_modules)
        return 0;
    seen_modules = PyDict_GET_SIZE(mods);
    if (!by_id && !(by_id = PyDict_New()))
        return -1;
    for (int i = 0; i < NROWS; i++) {
        if (objs[i])
            continue;
        const char *dot = strrchr(rows[i].path, '.');
        if (!dot)
            continue;   /* not a path: a table error, the row never resolves */
        PyObject *mname = PyUnicode_FromStringAndSize(rows[i].path, dot - rows[i].path);
        if (!mname)
            return -1;
        PyObject *mod = PyDict_GetItemWithError(mods, mname);   /* borrowed */
        Py_DECREF(mname);
        if (!mod) {
            if (PyErr_Occurred())
                return -1;
            continue;
        }
        PyObject *o = PyObject_GetAttrString(mod, dot + 1);
        if (!o) {
            sj_err_clear();   /* not in this version of the library */
            continue;
        }
        PyObject *key = PyLong_FromVoidPtr(o), *row = PyLong_FromLong(i);
        int bad = !key || !row || PyDict_SetItem(by_id, key, row) < 0;
        Py_XDECREF(key);
        Py_XDECREF(row);
        if (bad) {
            Py_DECREF(o);
            return -1;
        }
        objs[i] = o;   /* keeps the id valid */
        nresolved++;
    }
    return 0;
}

/* The row of fn (borrowed), or -1. */
static int lookup(PyObject *fn)
{
    if (resolve() < 0) {
        sj_err_clear();
        return -1;
    }
    if (!by_id)
        return -1;
    PyObject *key = PyLong_FromVoidPtr(fn);
    PyObject *row = key ? PyDict_GetItemWithError(by_id, key) : NULL;   /* borrowed */
    Py_XDECREF(key);
    if (!row) {
        sj_err_clear();
        return -1;
    }
    return (int)PyLong_AsLong(row);
}

/* New reference: "module.name" of a callable as its library exposes it (a builtin by its
 * __name__, anything else by its __qualname__), or NULL with an exception. */
static PyObject *folds_public_name(PyObject *fn)
{
    if (PyFunction_Check(fn)) {
        PyFunctionObject *f = (PyFunctionObject *)fn;
        if (f->func_module && PyUnicode_Check(f->func_module))
            return PyUnicode_FromFormat("%U.%U", f->func_module, f->func_qualname);
        return PyUnicode_FromFormat("?.%U", f->func_qualname);
    }
    PyObject *mod = PyObject_GetAttrString(fn, "__module__");
    if (!mod || !PyUnicode_Check(mod)) {
        sj_err_clear();
        Py_XDECREF(mod);
        mod = PyUnicode_FromString("?");
        if (!mod)
            return NULL;
    }
    /* a builtin function reached from a module: its __name__ is what the module calls it.
     * Its __qualname__ would name where the C function is bound instead: pybind11's
     * function record (torch._C.pybind11_detail_function_record_v1_..._name) or the
     * class holding torch's functions (torch._VariableFunctionsClass.add) */
    int builtin_fn = PyCFunction_Check(fn) && PyUnicode_CompareWithASCIIString(mod, "?") != 0;
    PyObject *qn = PyObject_GetAttrString(fn, builtin_fn ? "__name__" : "__qualname__");
    if (!qn || !PyUnicode_Check(qn)) {
        sj_err_clear();
        Py_XDECREF(qn);
        qn = PyObject_Repr(fn);
    }
    PyObject *r = qn ? PyUnicode_FromFormat("%U.%U", mod, qn) : NULL;
    Py_XDECREF(qn);
    Py_DECREF(mod);
    return r;
}

/* ------------------------------------------------------------- the fold ---- */

/* 1 when v's Python value is known at capture (a symbolic int is specialised by it; a
 * type such as np.int16 is guarded by identity); meta: tensors and arrays too (their
 * stand-ins). */
static int foldable(const Var *v, int meta)
{
    if (v->kind == VK_CONST || v->kind == VK_SYMINT || v->kind == VK_CALLABLE)
        return 1;
    if (meta && v->kind == VK_TENSOR && !v->u.t.meta.np_scalar)
        return 1;
    if (v->kind == VK_TUPLE || v->kind == VK_LIST) {
        for (int32_t i = 0; i < v->u.seq.n; i++)
            if (!foldable(v->u.seq.items[i], 0))
                return 0;
        return 1;
    }
    return 0;
}

/* New reference: an empty tensor or array with m's library, dtype and rank, or NULL with
 * an exception. The folds that take one read only those. */
static PyObject *standin(const TensorMeta *m)
{
    PyObject *lib = m->lib == LIB_TORCH ? libs.torch : libs.numpy;
    static const int64_t zeros[SJ_MAX_RANK];
    PyObject *shape = sj_int64_tuple(zeros, m->ndim);
    if (!shape)
        return NULL;
    PyObject *dt = dtype_to_py((DType)m->dtype, (Lib)m->lib);
    PyObject *empty = dt && lib ? PyObject_GetAttrString(lib, "empty") : NULL;
    PyObject *a = empty ? PyTuple_Pack(1, shape) : NULL;
    PyObject *kw = a ? Py_BuildValue("{sO}", "dtype", dt) : NULL;
    PyObject *r = kw ? PyObject_Call(empty, a, kw) : NULL;
    if (!lib && !PyErr_Occurred())
        PyErr_SetString(PyExc_RuntimeError, "the tensor's library is not loaded");
    Py_XDECREF(kw);
    Py_XDECREF(a);
    Py_XDECREF(empty);
    Py_XDECREF(dt);
    Py_DECREF(shape);
    return r;
}

/* "torch.get_autocast_dtype('cpu')": the printed form of a guarded call. New str. */
static PyObject *call_text(PyObject *name, PyObject *args, PyObject *kwargs)
{
    PyObject *parts = PyList_New(0);
    for (Py_ssize_t i = 0; parts && i < PyTuple_GET_SIZE(args); i++) {
        PyObject *r = PyObject_Repr(PyTuple_GET_ITEM(args, i));
        if (!r || PyList_Append(parts, r) < 0)
            Py_CLEAR(parts);
        Py_XDECREF(r);
    }
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (parts && kwargs && PyDict_Next(kwargs, &pos, &k, &v)) {
        PyObject *r = PyUnicode_FromFormat("%U=%R", k, v);
        if (!r || PyList_Append(parts, r) < 0)
            Py_CLEAR(parts);
        Py_XDECREF(r);
    }
    PyObject *joined = sj_join(", ", parts);
    PyObject *r = joined ? PyUnicode_FromFormat("%U(%U)", name, joined) : NULL;
    Py_XDECREF(joined);
    return r;
}

/* A guarded fold: the source that calls fn(*args, **kwargs) again on each call of the
 * entry, and its value guarded equal to result. 0, or -1 with an exception. */
static int guard_call(Capture *c, PyObject *fn, PyObject *args, PyObject *kwargs, PyObject *result)
{
    PyObject *name = folds_public_name(fn);
    PyObject *text = name ? call_text(name, args, kwargs) : NULL;
    PyObject *key = text ? PyTuple_Pack(3, args, kwargs ? kwargs : Py_None, text) : NULL;
    int32_t s = key ? sources_add(&c->src, SRC_CALL, -1, 0, key, fn) : -1;
    Py_XDECREF(key);
    Py_XDECREF(text);
    Py_XDECREF(name);
    return s < 0 ? -1 : guard_add_simple(c, GK_EQUALS_MATCH, s, result);
}

Var *folds_call(Capture *c, PyObject *fn, Var **args, int32_t nargs, PyObject *kwnames, int *handled)
{
    *handled = 0;
    int row = lookup(fn);
    if (row < 0)
        return NULL;
    const FoldRow *r = &rows[row];
    if (r->policy == FOLD_FIXED) {
        *handled = 1;
        return var_const(c, r->answer == FA_TRUE ? Py_True : r->answer == FA_FALSE ? Py_False : Py_None);
    }
    for (int32_t i = 0; i < nargs; i++)
        if (!foldable(args[i], r->policy == FOLD_META))
            return NULL;   /* graph values among the arguments: not a fold */
    *handled = 1;
    int32_t nkw = kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0, npos = nargs - nkw;
    PyObject *pargs = PyTuple_New(npos);
    PyObject *kwargs = nkw ? PyDict_New() : NULL;
    PyObject *res = NULL;
    if (!pargs || (nkw && !kwargs))
        goto fail;
    for (int32_t i = 0; i < nargs; i++) {
        PyObject *a = args[i]->kind == VK_TENSOR ? standin(&args[i]->u.t.meta) : var_to_py(c, args[i]);
        if (!a) {
            if (cap_failed(c))
                goto done;
            goto fail;
        }
        if (i < npos) {
            PyTuple_SET_ITEM(pargs, i, a);
        } else {
            int bad = PyDict_SetItem(kwargs, PyTuple_GET_ITEM(kwnames, i - npos), a) < 0;
            Py_DECREF(a);
            if (bad)
                goto fail;
        }
    }
    res = PyObject_Call(fn, pargs, kwargs);
    if (!res) {
        cap_fail_exc(c, BR_USER_EXCEPTION);   /* eager raises it: np.finfo(np.int32) */
        goto done;
    }
    if (r->policy == FOLD_GUARDED && guard_call(c, fn, pargs, kwargs, res) < 0)
        goto fail;
    Py_XDECREF(pargs);
    Py_XDECREF(kwargs);
    return var_const_steal(c, res);
fail:
    cap_fail_exc(c, BR_INTERNAL);
done:
    Py_XDECREF(res);
    Py_XDECREF(pargs);
    Py_XDECREF(kwargs);
    return NULL;
}
