/* numpy's coordinate grids: np.meshgrid of arrays, and np.mgrid[...], np.ogrid[...] and
 * np.indices(...) of constants.
 *
 * meshgrid is recorded through existing rows: each 1-D input gets new axes around its own
 * position (operator.getitem with None), then np.broadcast_to the grid's shape and
 * ndarray.copy, as numpy's own implementation does. The others depend on constants only:
 * numpy computes the grid at capture time and the graph holds it as a constant array
 * (numpy.array of its values, in its dtype), so the values are numpy's to the last bit. */
#include "capture.h"
#include "../vocab/libs.h"
#include "../core/errors.h"
#include "../core/pyutil.h"

/* The largest constant grid held in a graph (its values are a constant of the graph). */
#define MAX_CONST_ELEMENTS 65536

static PyObject *np_meshgrid, *np_indices;   /* strong once numpy is seen */
static int meshgrid_tuple = -1;              /* numpy >= 2 returns a tuple, older a list */

static int init(void)
{
    if (np_meshgrid)
        return 0;
    if (!libs.numpy)
        return -1;
    np_meshgrid = libs_get_path(libs.numpy, "meshgrid");
    np_indices = np_meshgrid ? libs_get_path(libs.numpy, "indices") : NULL;
    PyObject *empty = np_indices ? PyObject_CallNoArgs(np_meshgrid) : NULL;   /* new */
    if (!empty) {
        Py_CLEAR(np_meshgrid);
        Py_CLEAR(np_indices);
        sj_err_clear();
        return -1;
    }
    meshgrid_tuple = PyTuple_Check(empty);
    Py_DECREF(empty);
    return 0;
}

static int is_nd_grid_getitem(PyObject *fn)
{
    if (!PyFunction_Check(fn))
        return 0;
    PyObject *qn = ((PyFunctionObject *)fn)->func_qualname, *mod = ((PyFunctionObject *)fn)->func_module;
    const char *q = qn && PyUnicode_Check(qn) ? PyUnicode_AsUTF8(qn) : NULL;
    const char *m = mod && PyUnicode_Check(mod) ? PyUnicode_AsUTF8(mod) : NULL;
    if (!q || !m) {
        sj_err_clear();
        return 0;
    }
    return !strcmp(q, "nd_grid.__getitem__") && !strncmp(m, "numpy.", 6);
}

/* A constant ndarray as a graph value: numpy.array(values, dtype=its dtype). */
static Var *const_array(Capture *c, PyObject *arr)
{
    int row = callables_path_row("numpy.array");
    PyObject *values = PyObject_CallMethod(arr, "tolist", NULL);   /* new */
    PyObject *dtype = PyObject_GetAttrString(arr, "dtype");        /* new */
    PyObject *kn = Py_BuildValue("(s)", "dtype");                  /* new */
    if (row < 0 || !values || !dtype || !kn) {
        Py_XDECREF(values);
        Py_XDECREF(dtype);
        Py_XDECREF(kn);
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    /* each steals its object, also when it fails */
    Var *vv = var_const_steal(c, values), *dv = var_const_steal(c, dtype);
    if (!vv || !dv || !cap_keep_steal(c, kn)) {
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    Var *a[2] = {vv, dv};
    return op_record(c, row, a, 2, kn);
}

/* The element count of ndarray a, or -1 (no exception) when a is not an ndarray. */
static Py_ssize_t array_size(PyObject *a)
{
    if (!libs_is_ndarray(a))
        return -1;
    PyObject *s = PyObject_GetAttrString(a, "size");   /* new */
    Py_ssize_t n = s ? PyLong_AsSsize_t(s) : -1;
    Py_XDECREF(s);
    if (n < 0)
        sj_err_clear();
    return n;
}

/* 1 when v is a value known now: a constant (slices, ints, a dtype, np.float32) or a tuple
 * or list of them. */
static int known(const Var *v)
{
    if (v->kind == VK_TUPLE || v->kind == VK_LIST) {
        for (int32_t i = 0; i < v->u.seq.n; i++)
            if (!known(v->u.seq.items[i]))
                return 0;
        return 1;
    }
    return v->obj && (v->kind == VK_CONST || v->kind == VK_CALLABLE);
}

/* np.mgrid[...] / np.ogrid[...] / np.indices(...) of constants, computed now. */
static Var *fold_grid(Capture *c, PyObject *fn, Var **args, int32_t nargs, PyObject *kwnames, int *handled)
{
    int getitem = is_nd_grid_getitem(fn);
    for (int32_t i = 0; i < nargs; i++)
        if (!(getitem && i == 0) && !known(args[i]))
            return NULL;
    /* the receiver of nd_grid.__getitem__: np.mgrid or np.ogrid, a numpy global */
    if (getitem && (nargs != 2 || !args[0]->obj))
        return NULL;
    *handled = 1;
    PyObject *res = cap_call_live(c, fn, args, nargs, kwnames);   /* new */
    if (!res) {
        /* eager raises the same from the interpreter at the break */
        if (!cap_failed(c)) {
            sj_err_clear();
            cap_fail(c, BR_UNSUPPORTED_CALL, "a coordinate grid numpy refuses to build");
        }
        return NULL;
    }
    int is_seq = PyTuple_Check(res) || PyList_Check(res);
    Py_ssize_t n = is_seq ? PySequence_Fast_GET_SIZE(res) : 1;
    Var **items = cap_alloc(c, sizeof(Var *) * (size_t)(n > 0 ? n : 1));
    Var *out = NULL;
    if (!items)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = is_seq ? PySequence_Fast_GET_ITEM(res, i) : res;   /* borrowed */
        Py_ssize_t size = array_size(a);
        if (size < 0 || size > MAX_CONST_ELEMENTS) {
            cap_fail(c, BR_UNSUPPORTED_CALL, "a coordinate grid of more than %d elements", MAX_CONST_ELEMENTS);
            goto done;
        }
        if (!(items[i] = const_array(c, a)))
            goto done;
    }
    out = is_seq ? var_seq(c, PyTuple_Check(res) ? VK_TUPLE : VK_LIST, items, (int32_t)n) : items[0];
done:
    Py_DECREF(res);
    return out;
}

static Var *meshgrid(Capture *c, Var **args, int32_t nargs, PyObject *kwnames, int *handled)
{
    int32_t nkw = kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0, n = nargs - nkw;
    int copy = 1, sparse = 0, xy = 1;
    for (int32_t k = 0; k < nkw; k++) {
        const char *kn = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, k));
        Var *v = args[n + k];
        if (!kn || v->kind != VK_CONST) {
            sj_err_clear();
            return NULL;
        }
        if ((!strcmp(kn, "copy") || !strcmp(kn, "sparse")) && PyBool_Check(v->obj))
            *(!strcmp(kn, "copy") ? &copy : &sparse) = v->obj == Py_True;
        else if (!strcmp(kn, "indexing") && PyUnicode_Check(v->obj) &&
                 (!PyUnicode_CompareWithASCIIString(v->obj, "xy") || !PyUnicode_CompareWithASCIIString(v->obj, "ij")))
            xy = !PyUnicode_CompareWithASCIIString(v->obj, "xy");
        else
            return NULL;   /* eager raises (a bad indexing) or an option not modelled */
    }
    if (n < 1 || n > SJ_MAX_RANK)
        return NULL;
    int64_t shape[SJ_MAX_RANK];
    int pos[SJ_MAX_RANK];
    for (int32_t i = 0; i < n; i++) {
        const Var *x = args[i];
        if (x->kind != VK_TENSOR || x->u.t.meta.lib != LIB_NUMPY || x->u.t.meta.np_scalar)
            return NULL;
        int64_t len = 1;
        for (int d = 0; d < x->u.t.meta.ndim; d++) {
            if (x->u.t.meta.sym[d])
                return NULL;   /* symbolic lengths would be pinned */
            len *= x->u.t.meta.size[d];
        }
        pos[i] = (xy && n >= 2 && i < 2) ? 1 - i : i;
        shape[pos[i]] = len;
    }
    int gi = callables_operator_row("operator.getitem"), bt = callables_path_row("numpy.broadcast_to"),
        cp = callables_path_row("ndarray.copy"), rv = callables_path_row("numpy.ravel");
    if (gi < 0 || bt < 0 || cp < 0 || rv < 0)
        return NULL;
    *handled = 1;
    /* numpy ravels inputs of other ranks (a view where their layout allows, as here) */
    Var **flat = cap_alloc(c, sizeof(Var *) * (size_t)n);
    if (!flat)
        return NULL;
    for (int32_t i = 0; i < n; i++) {
        Var *ra[1] = {args[i]};
        flat[i] = args[i]->u.t.meta.ndim == 1 ? args[i] : op_record(c, rv, ra, 1, NULL);
        if (!flat[i])
            return NULL;
    }
    args = flat;
    Var **items = cap_alloc(c, sizeof(Var *) * (size_t)n);
    PyObject *shp = sj_int64_tuple(shape, (int)n);   /* new, stolen by cap_keep_steal */
    if (!shp || !cap_keep_steal(c, shp) || !items) {
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    Var *shape_var = var_const(c, shp);
    if (!shape_var)
        return NULL;
    for (int32_t i = 0; i < n; i++) {
        PyObject *ix = PyTuple_New(n);   /* new: None everywhere but the input's own axis */
        if (!ix) {
            cap_fail_exc(c, BR_INTERNAL);
            return NULL;
        }
        for (int32_t d = 0; d < n; d++) {
            PyObject *it = d == pos[i] ? PySlice_New(NULL, NULL, NULL) : Py_NewRef(Py_None);
            if (!it) {
                Py_DECREF(ix);
                cap_fail_exc(c, BR_INTERNAL);
                return NULL;
            }
            PyTuple_SET_ITEM(ix, d, it);
        }
        Var *iv = var_const_steal(c, ix);
        if (!iv) {
            cap_fail_exc(c, BR_INTERNAL);
            return NULL;
        }
        Var *ga[2] = {args[i], iv};
        Var *v = op_record(c, gi, ga, 2, NULL);
        if (v && !sparse) {
            Var *ba[2] = {v, shape_var};
            v = op_record(c, bt, ba, 2, NULL);
        }
        if (v && copy) {
            Var *ca[1] = {v};
            v = op_record(c, cp, ca, 1, NULL);
        }
        if (!v)
            return NULL;
        items[i] = v;
    }
    return var_seq(c, meshgrid_tuple ? VK_TUPLE : VK_LIST, items, n);
}

Var *npgrid_call(Capture *c, PyObject *fn, Var **args, int32_t nargs, PyObject *kwnames, int *handled)
{
    *handled = 0;
    if (!libs.numpy || init() < 0)
        return NULL;
    if (fn == np_meshgrid)
        return meshgrid(c, args, nargs, kwnames, handled);
    if (fn == np_indices || is_nd_grid_getitem(fn))
        return fold_grid(c, fn, args, nargs, kwnames, handled);
    return NULL;
}
