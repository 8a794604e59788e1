/* Meta tensors standing in for graph values: code the capture cannot see into (an autograd
 * Function's apply under grad mode, an operator of torch.library) is run once at capture on
 * meta tensors shaped like its tensor arguments, and its results' shapes, dtypes and
 * requires_grad are read back from what it returns. */
#include "capture.h"
#include "../vocab/libs.h"
#include "../core/errors.h"
#include "../core/pyutil.h"

/* New reference: a meta tensor shaped like m, or NULL with an exception. */
PyObject *cap_meta_standin(const TensorMeta *m)
{
    PyObject *shape = sj_int64_tuple(m->size, m->ndim);
    if (!shape)
        return NULL;
    PyObject *empty = PyObject_GetAttrString(libs.torch, "empty");
    PyObject *dt = dtype_to_py((DType)m->dtype, LIB_TORCH);
    PyObject *kw = empty && dt ? Py_BuildValue("{sOsssO}", "dtype", dt, "device", "meta", "requires_grad",
                                               m->requires_grad ? Py_True : Py_False)
                               : NULL;
    PyObject *a = kw ? PyTuple_Pack(1, shape) : NULL;
    PyObject *r = a ? PyObject_Call(empty, a, kw) : NULL;
    Py_XDECREF(a);
    Py_XDECREF(kw);
    Py_XDECREF(dt);
    Py_XDECREF(empty);
    Py_DECREF(shape);
    return r;
}

/* The meta of a meta tensor the stand-in run returned: 0, 1 when it is not a tensor this
 * can describe, -1 with an exception. */
int cap_meta_of_standin(PyObject *t, TensorMeta *m)
{
    if (!PyObject_TypeCheck(t, (PyTypeObject *)libs.tensor_type))
        return 1;
    memset(m, 0, sizeof *m);
    m->lib = LIB_TORCH;
    PyObject *shape = PyObject_GetAttrString(t, "shape");
    PyObject *dt = shape ? PyObject_GetAttrString(t, "dtype") : NULL;
    PyObject *rg = dt ? PyObject_GetAttrString(t, "requires_grad") : NULL;
    int r = -1;
    if (!rg)
        goto done;
    Py_ssize_t n = PyTuple_Check(shape) ? PyTuple_GET_SIZE(shape) : -1;
    DType d;
    int bad = dtype_from_py(dt, LIB_TORCH, &d);
    if (bad < 0)
        goto done;
    if (n < 0 || n > SJ_MAX_RANK || bad) {
        r = 1;
        goto done;
    }
    m->ndim = (unsigned char)n;
    m->dtype = (unsigned char)d;
    m->requires_grad = rg == Py_True;
    for (Py_ssize_t i = 0; i < n; i++) {
        m->size[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
        if (m->size[i] == -1 && PyErr_Occurred())
            goto done;
    }
    r = 0;
done:
    Py_XDECREF(shape);
    Py_XDECREF(dt);
    Py_XDECREF(rg);
    return r;
}

/* Record the pending exception as an internal failure: NULL. */
static Var *fail_internal(Capture *c)
{
    cap_fail_exc(c, BR_INTERNAL);
    return NULL;
}

/* fn(*args, **kw) (a vectorcall: npos positional, kwnames the names of the rest) with
 * torch's grad mode set to the captured program's for the run and restored after, so a
 * stand-in output's requires_grad is what the real call's would be; the default
 * generator's state is restored too, so that code the run reaches that draws on the cpu
 * (a composite kernel written in Python) leaves eager's later draws as they were. New
 * reference, or NULL with the exception fn raised. */
PyObject *cap_standin_call(Capture *c, PyObject *fn, PyObject *const *args, Py_ssize_t npos, PyObject *kwnames)
{
    PyObject *query = PyObject_GetAttrString(libs.torch, "is_grad_enabled");
    PyObject *was = query ? PyObject_CallNoArgs(query) : NULL;
    Py_XDECREF(query);
    PyObject *rng = was ? PyObject_CallMethod(libs.torch, "get_rng_state", NULL) : NULL;
    if (!rng) {
        Py_XDECREF(was);
        return NULL;
    }
    PyObject *out = NULL;
    PyObject *r = PyObject_CallOneArg(libs.set_grad_fn, c->grad_mode ? Py_True : Py_False);
    Py_XDECREF(r);
    if (r)
        out = PyObject_Vectorcall(fn, args, (size_t)npos, kwnames);
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    r = PyObject_CallOneArg(libs.set_grad_fn, was);
    if (!r)
        sj_err_clear();
    Py_XDECREF(r);
    r = PyObject_CallMethod(libs.torch, "set_rng_state", "O", rng);
    if (!r)
        sj_err_clear();
    Py_XDECREF(r);
    PyErr_Restore(et, ev, tb);
    Py_DECREF(rng);
    Py_DECREF(was);
    return out;
}

Var *cap_opaque_node(Capture *c, OpId op, PyObject *target, Var **args, int32_t nargs, PyObject *kwnames,
                     const TensorMeta *outs, int32_t nout, VarKind seq)
{
    int32_t nkw = kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0;
    int32_t first = graph_pool(c->g, nargs > 0 ? nargs : 1);
    if (first < 0)
        return fail_internal(c);
    for (int32_t i = 0; i < nargs; i++)
        if (cap_to_arg(c, args[i], first + i) < 0)
            return NULL;
    PyObject *where = cap_where(c);   /* new */
    if (!where)
        return NULL;
    int32_t v =
        graph_add_node(c->g, op, 0, target, first, nargs - nkw, first + nargs - nkw, nkw, kwnames, outs, nout, where);
    Py_DECREF(where);
    if (v < 0)
        return fail_internal(c);
    c->nops++;
    c->used_torch = 1;
    Var **items = cap_node_outputs(c, v, outs, nout);
    if (!items)
        return NULL;
    return seq == VK_TENSOR ? items[0] : var_seq(c, seq, items, nout);
}
