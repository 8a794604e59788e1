/* A view chain's result that is never made into a tensor when only the backend's own steps
 * read it (step_views.c decides): the chain's input tensor and the recorded layout (sizes,
 * strides, the element offset from the input's data). Kernels, oneDNN products and the
 * attention step read it as an Operand (lower_read_input_dt) at no cost; anything that
 * needs the tensor itself (a step's eager fallback, through lower_exec_node) gets it made
 * then, with the same torch.as_strided the chain would have called. This saves that call
 * (about a microsecond) for each chain between two lowered steps: a transformer layer's
 * q, k and v views and the heads merged back.
 *
 * A lazy copy is the result of a view chain ending in a copy (contiguous() or a reshape
 * of a layout no view has) that only other view chains read: the copy's source view and
 * the copy's sizes. A chain reading it composes its own record with the source view
 * (step_views.c) and reads the chain's input directly, so the copy is never made:
 * nn.MultiheadAttention's packed projection, `proj.unflatten(-1, (3, E)).unsqueeze(0)
 * .transpose(0, -2).squeeze(-2).contiguous()`, then q, k and v as views of it, which the
 * attention step reads with the projection's strides. Read as an Operand it refuses (1:
 * the step reads the tensor instead); made a tensor, it is the copy.
 *
 * Memory: a LazyView holds a strong reference to its input tensor and to the record's
 * sizes and strides tuples; it lives in a run's vals[] like any value and is released with
 * it. It is never a graph output and never offered to the buffer pool (which keeps only
 * what the run allocated). */
#include "lower_int.h"

typedef struct {
    PyObject_HEAD PyObject *base;   /* strong: the chain's input tensor */
    PyObject *sizes, *strides;      /* strong: the record's tuples (as_strided's arguments) */
    int ndim;
    int64_t size[SJ_MAX_RANK], stride[SJ_MAX_RANK];
    long long delta;                /* elements from base's first element to the view's */
    int copy;                       /* a lazy copy: the view's elements in order, sizes res_size */
    int res_ndim;
    int64_t res_size[SJ_MAX_RANK];
    /* a view read through a lazy copy: eager's tensor is the view (sizes, lay_strides,
     * lay_delta) of the copy `via` (strong), laid out by lay */
    PyObject *via, *lay_strides;
    long long lay_delta;
    int64_t lay[SJ_MAX_RANK];
} LazyView;

static void lazyview_dealloc(PyObject *self)
{
    LazyView *v = (LazyView *)self;
    Py_XDECREF(v->base);
    Py_XDECREF(v->sizes);
    Py_XDECREF(v->strides);
    Py_XDECREF(v->via);
    Py_XDECREF(v->lay_strides);
    Py_TYPE(self)->tp_free(self);
}

static PyTypeObject LazyView_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shapejit._C._LazyView",
    .tp_basicsize = sizeof(LazyView),
    .tp_dealloc = lazyview_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A view chain's result the backend's steps read without a tensor (internal).",
};

int lazyview_init_type(void)
{
    return PyType_Ready(&LazyView_Type);
}

int lazyview_check(PyObject *o)
{
    return o && Py_TYPE(o) == &LazyView_Type;
}

PyObject *lazyview_new(PyObject *base, PyObject *sizes, PyObject *strides, long long delta)
{
    int n = (int)PyTuple_GET_SIZE(sizes);
    if (n > SJ_MAX_RANK || PyTuple_GET_SIZE(strides) != n) {
        PyErr_SetString(PyExc_RuntimeError, "shapejit: a view record of an unexpected rank");
        return NULL;
    }
    LazyView *v = PyObject_New(LazyView, &LazyView_Type);
    if (!v)
        return NULL;
    v->base = Py_NewRef(base);
    v->sizes = Py_NewRef(sizes);
    v->strides = Py_NewRef(strides);
    v->ndim = n;
    v->delta = delta;
    v->copy = 0;
    v->res_ndim = 0;
    v->via = v->lay_strides = NULL;
    v->lay_delta = 0;
    for (int d = 0; d < n; d++) {
        v->size[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(sizes, d));
        v->stride[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(strides, d));
    }
    if (PyErr_Occurred()) {
        Py_DECREF(v);
        return NULL;
    }
    return (PyObject *)v;
}

PyObject *lazyview_new_copy(PyObject *base, PyObject *sizes, PyObject *strides, long long delta,
                            const int64_t *res_size, int res_ndim)
{
    if (res_ndim > SJ_MAX_RANK) {
        PyErr_SetString(PyExc_RuntimeError, "shapejit: a view record of an unexpected rank");
        return NULL;
    }
    LazyView *v = (LazyView *)lazyview_new(base, sizes, strides, delta);
    if (!v)
        return NULL;
    v->copy = 1;
    v->res_ndim = res_ndim;
    memcpy(v->res_size, res_size, sizeof(int64_t) * (size_t)res_ndim);
    return (PyObject *)v;
}

PyObject *lazyview_new_through(PyObject *base, PyObject *sizes, PyObject *strides, long long delta, PyObject *via,
                               PyObject *lay_strides, long long lay_delta)
{
    LazyView *v = (LazyView *)lazyview_new(base, sizes, strides, delta);
    if (!v)
        return NULL;
    if (PyTuple_GET_SIZE(lay_strides) != v->ndim) {
        Py_DECREF(v);
        PyErr_SetString(PyExc_RuntimeError, "shapejit: a view record of an unexpected rank");
        return NULL;
    }
    for (int d = 0; d < v->ndim; d++)
        v->lay[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(lay_strides, d));
    if (PyErr_Occurred()) {
        Py_DECREF(v);
        return NULL;
    }
    v->via = Py_NewRef(via);
    v->lay_strides = Py_NewRef(lay_strides);
    v->lay_delta = lay_delta;
    return (PyObject *)v;
}

int lazyview_copy_source(PyObject *o, PyObject **base, int *ndim, const int64_t **size, const int64_t **stride,
                         long long *delta, int *res_ndim, const int64_t **res_size)
{
    LazyView *v = (LazyView *)o;
    if (!v->copy)
        return 0;
    *base = v->base;
    *ndim = v->ndim;
    *size = v->size;
    *stride = v->stride;
    *delta = v->delta;
    *res_ndim = v->res_ndim;
    *res_size = v->res_size;
    return 1;
}

int lazyview_read(PyObject *o, DType dt, Operand *op)
{
    const LazyView *v = (const LazyView *)o;
    if (v->copy)
        return 1;   /* (planned never to happen: only view chains read a lazy copy) */
    Operand b;
    int r = lower_read_input_dt(v->base, LIB_TORCH, dt, &b);
    if (r != 0)
        return r;
    memset(op, 0, sizeof *op);
    op->ndim = v->ndim;
    memcpy(op->size, v->size, sizeof(int64_t) * (size_t)v->ndim);
    memcpy(op->stride, v->stride, sizeof(int64_t) * (size_t)v->ndim);
    op->data = b.data + v->delta * (long long)dtype_info[dt].itemsize;
    op->lay = v->via ? v->lay : NULL;
    return 0;
}

PyObject *lazyview_tensor(PyObject *o)
{
    const LazyView *v = (const LazyView *)o;
    if (v->via) {   /* eager's tensor: the view of the copy, made */
        PyObject *c = lazyview_tensor(v->via); /* new */
        PyObject *t = c ? lower_view_of(c, v->sizes, v->lay_strides, v->lay_delta) : NULL;
        Py_XDECREF(c);
        return t;
    }
    PyObject *t = lower_view_of(v->base, v->sizes, v->strides, v->delta); /* new */
    if (!t || !v->copy)
        return t;
    PyObject *r = lower_copy_view(t, v->res_size, v->res_ndim);
    Py_DECREF(t);
    return r;
}

/* Replaces a lazy value read by node ni with its tensor. */
static void make_real(void *ctx, int32_t ni, int32_t v)
{
    (void)ni;
    PyObject **vals = ((PyObject ***)ctx)[0];
    int *failed = ((int **)ctx)[1];
    if (*failed || !lazyview_check(vals[v]))
        return;
    PyObject *t = lazyview_tensor(vals[v]);   /* new */
    if (!t) {
        *failed = 1;
        return;
    }
    Py_SETREF(vals[v], t);
}

int lower_exec_node(Graph *g, int32_t ni, PyObject **vals)
{
    int failed = 0;
    void *ctx[2] = {vals, &failed};
    graph_node_reads(g, ni, make_real, ctx);
    if (failed)
        return -1;
    return graph_exec_node(g, ni, vals, NULL);
}
