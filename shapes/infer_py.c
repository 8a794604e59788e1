/* _C._infer and _C._callable_rows: the shape rules reachable from Python, for tests and
 * debugging. Live example values stand in for the graph values capture would have. */
#include "infer_py.h"

#include <string.h>

#include "../vocab/meta.h"
#include "rules.h"
#include "../core/pyutil.h"

typedef struct {
    const char *id, *kind, *path;
    OpId op;
    const char *schema, *flags;
} Row;

static const Row rows[] = {
#define X(id, kind, path, op, schema, flags) {#id, #kind, path, op, schema, #flags},
#include "../vocab/callables.def"
#undef X
};

#define NROWS ((int)(sizeof rows / sizeof rows[0]))
#define POOL 512

/* Storage for one call's converted arguments. */
typedef struct {
    TensorMeta metas[POOL];
    int nmeta;
    BoundArg items[POOL];    /* list items */
    int nitems;
    int have_lib;
    Lib first_lib;           /* the library of the first tensor seen */
} Conv;

static int has_tensor(PyObject *v, int depth);

/* 1 when v is a tensor/array/numpy scalar, or a list/tuple containing one. */
static int is_value(PyObject *v, int depth)
{
    TensorMeta m;
    const char *why;
    int r = meta_from_value(v, &m, NULL, &why);
    if (r != 1)
        return r == 0 ? 1 : -1;
    return has_tensor(v, depth);
}

static int has_tensor(PyObject *v, int depth)
{
    if (depth > 8 || !(PyList_Check(v) || PyTuple_Check(v)))
        return 0;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(v);
    for (Py_ssize_t i = 0; i < n; i++) {
        int r = is_value(PySequence_Fast_GET_ITEM(v, i), depth + 1);
        if (r)
            return r;
    }
    return 0;
}

/* Converts v (borrowed; must outlive *out) to a BoundArg. Returns 0 or -1 with an
 * exception set. */
static int convert(Conv *c, PyObject *v, BoundArg *out, int depth)
{
    memset(out, 0, sizeof *out);
    TensorMeta m;
    const char *why;
    int r = meta_from_value(v, &m, NULL, &why);
    if (r < 0)
        return -1;
    if (r == 0) {
        if (c->nmeta >= POOL) {
            PyErr_SetString(PyExc_ValueError, "too many tensors");
            return -1;
        }
        c->metas[c->nmeta] = m;
        out->kind = BA_TENSOR;
        out->meta = &c->metas[c->nmeta++];
        if (!c->have_lib) {
            c->have_lib = 1;
            c->first_lib = (Lib)m.lib;
        }
        return 0;
    }
    int t = has_tensor(v, depth);
    if (t < 0)
        return -1;
    if (!t) {
        out->kind = BA_CONST;
        out->value = v;
        return 0;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(v);
    if (c->nitems + n > POOL) {
        PyErr_SetString(PyExc_ValueError, "too many list items");
        return -1;
    }
    BoundArg *items = &c->items[c->nitems];
    c->nitems += (int)n;
    for (Py_ssize_t i = 0; i < n; i++)
        if (convert(c, PySequence_Fast_GET_ITEM(v, i), &items[i], depth + 1))
            return -1;
    out->kind = BA_LIST;
    out->n = (int)n;
    out->items = items;
    return 0;
}

static PyObject *meta_to_tuple(const TensorMeta *m)
{
    PyObject *shape = sj_int64_tuple(m->size, m->ndim);    /* new */
    if (!shape)
        return NULL;
    return Py_BuildValue("(sNO)", dtype_info[m->dtype].name, shape,
                         m->np_scalar ? Py_True : Py_False);    /* N steals shape */
}

PyObject *shapes_py_infer(PyObject *self, PyObject *args)
{
    (void)self;
    const char *path;
    PyObject *pargs, *kwargs = NULL;
    if (!PyArg_ParseTuple(args, "sO!|O:_infer", &path, &PyTuple_Type, &pargs, &kwargs))
        return NULL;
    if (kwargs == Py_None)
        kwargs = NULL;
    if (kwargs && !PyDict_Check(kwargs)) {
        PyErr_SetString(PyExc_TypeError, "_infer: kwargs must be a dict");
        return NULL;
    }
    const Row *row = NULL;
    for (int i = 0; i < NROWS; i++)
        if (strcmp(rows[i].path, path) == 0) {
            row = &rows[i];
            break;
        }
    if (!row) {
        PyErr_Format(PyExc_KeyError, "no callables.def row for %s", path);
        return NULL;
    }
    if (meta_refresh_torch_default() < 0)
        return NULL;

    Conv *c = PyMem_Calloc(1, sizeof *c);
    if (!c)
        return PyErr_NoMemory();
    PyObject *result = NULL;
    BoundArg pos[SJ_MAX_PARAMS * 2];
    BoundArg kw[SJ_MAX_PARAMS];
    const char *kwnames[SJ_MAX_PARAMS];
    Py_ssize_t npos = PyTuple_GET_SIZE(pargs);
    Py_ssize_t nkw = kwargs ? PyDict_Size(kwargs) : 0;
    if (npos > SJ_MAX_PARAMS * 2 || nkw > SJ_MAX_PARAMS) {
        PyErr_SetString(PyExc_ValueError, "too many arguments");
        goto done;
    }
    for (Py_ssize_t i = 0; i < npos; i++)
        if (convert(c, PyTuple_GET_ITEM(pargs, i), &pos[i], 0))
            goto done;
    if (kwargs) {
        Py_ssize_t it = 0, k = 0;
        PyObject *key, *value;    /* borrowed */
        while (PyDict_Next(kwargs, &it, &key, &value)) {
            if (!PyUnicode_Check(key)) {
                PyErr_SetString(PyExc_TypeError, "keywords must be strings");
                goto done;
            }
            if (!(kwnames[k] = PyUnicode_AsUTF8(key)) || convert(c, value, &kw[k], 0))
                goto done;
            k++;
        }
    }
    Lib lib;
    if (strcmp(row->kind, "CK_TORCH") == 0 || strcmp(row->kind, "CK_TENSOR_METHOD") == 0)
        lib = LIB_TORCH;
    else if (strcmp(row->kind, "CK_NUMPY") == 0 || strcmp(row->kind, "CK_NDARRAY_METHOD") == 0)
        lib = LIB_NUMPY;
    else
        lib = c->have_lib ? c->first_lib : LIB_NUMPY;

    BoundArgs b;
    ShapeErr err;
    err.msg[0] = 0;
    if (bind_args(row->schema, pos, (int)npos, kwnames, kw, (int)nkw, &b, &err)) {
        PyErr_SetString(PyExc_ValueError, err.msg);
        goto done;
    }
    TensorMeta outs[SJ_MAX_OUTS];
    int nout = SJ_MAX_OUTS;
    if (shapes_infer(row->op, lib, &b, outs, &nout, &err)) {
        PyErr_SetString(PyExc_ValueError, err.msg);
        goto done;
    }
    if (strstr(row->flags, "CF_INPLACE") || strstr(row->flags, "CF_RETURNS_NONE")) {
        /* `3 += t` is not in place: Python rebinds the name to 3 + t */
        const BoundArg *self_arg = ba_get(&b, "input");
        TensorMeta r = outs[0];
        if (self_arg && self_arg->kind == BA_TENSOR && nout == 1 &&
            shapes_inplace(lib, self_arg->meta, &r, &outs[0], &err)) {
            PyErr_SetString(PyExc_ValueError, err.msg);
            goto done;
        }
    }
    result = PyList_New(nout);    /* new */
    if (!result)
        goto done;
    for (int i = 0; i < nout; i++) {
        PyObject *t = meta_to_tuple(&outs[i]);
        if (!t) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, i, t);    /* steals t */
    }
done:
    PyMem_Free(c);
    return result;
}

PyObject *shapes_py_callable_rows(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    PyObject *list = PyList_New(NROWS);    /* new */
    if (!list)
        return NULL;
    for (int i = 0; i < NROWS; i++) {
        const Row *r = &rows[i];
        PyObject *t =
            Py_BuildValue("(ssssss)", r->id, r->kind, r->path, op_info[r->op].name, r->schema, r->flags);    /* new */
        if (!t) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, t);    /* steals t */
    }
    return list;
}
