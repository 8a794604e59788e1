/* nn.LSTM / nn.GRU / nn.RNN modules: the call of their own forward is one graph node.
 *
 * Their forward is Python over torch's flat-weight bookkeeping (weak references, cuDNN
 * flattening) around one torch.lstm / gru / rnn_* call. Capture records instead a node
 * that runs the module's forward itself (an eager step, flattened by flat_call to
 * (output, h_n[, c_n])) and shapes its outputs from the module's settings, each read
 * through the module's source (so guarded): mode, hidden_size, proj_size, num_layers,
 * bidirectional, batch_first. An input that is not a 2-D or 3-D tensor (a PackedSequence)
 * is left to the ordinary inlining of forward. */
#include "capture.h"
#include "../vocab/libs.h"
#include "../core/errors.h"

static PyObject *forwards[3];   /* strong: nn.LSTM.forward, nn.GRU.forward, nn.RNN.forward */
static PyObject *flat_target;   /* strong: the PyCFunction below */

/* flat_call(forward, module, input, hx): forward(module, input, hx) with its result
 * (output, hidden) flattened to (output, h_n) or (output, h_n, c_n). New reference. */
static PyObject *flat_call(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "shapejit rnn node: 4 arguments expected");
        return NULL;
    }
    PyObject *r = PyObject_Vectorcall(args[0], args + 1, 3, NULL);
    if (!r)
        return NULL;
    PyObject *flat = NULL;
    if (PyTuple_Check(r) && PyTuple_GET_SIZE(r) == 2) {
        PyObject *out = PyTuple_GET_ITEM(r, 0), *hid = PyTuple_GET_ITEM(r, 1);
        if (PyTuple_Check(hid) && PyTuple_GET_SIZE(hid) == 2)
            flat = PyTuple_Pack(3, out, PyTuple_GET_ITEM(hid, 0), PyTuple_GET_ITEM(hid, 1));
        else
            flat = PyTuple_Pack(2, out, hid);
    } else {
        PyErr_SetString(PyExc_TypeError, "shapejit rnn node: forward did not return (output, hidden)");
    }
    Py_DECREF(r);
    return flat;
}

static PyMethodDef flat_def = {"rnn_flat_call", (PyCFunction)(void (*)(void))flat_call, METH_FASTCALL,
                               "forward(module, input, hx) flattened to (output, h_n[, c_n])"};

static int init(void)
{
    if (flat_target)
        return 0;
    if (!libs.torch)
        return 1;
    static const char *const paths[3] = {"nn.LSTM.forward", "nn.GRU.forward", "nn.RNN.forward"};
    for (int i = 0; i < 3; i++)
        if (!(forwards[i] = libs_get_path(libs.torch, paths[i]))) {
            sj_err_clear();
            for (int j = 0; j < i; j++)
                Py_CLEAR(forwards[j]);
            return 1;
        }
    flat_target = PyCFunction_New(&flat_def, NULL);
    if (!flat_target) {
        sj_err_clear();
        return 1;
    }
    return 0;
}

int rnn_is_forward(PyObject *fn)
{
    if (!fn || init() != 0)
        return 0;
    for (int i = 0; i < 3; i++)
        if (fn == forwards[i])
            return 1;
    return 0;
}

/* A module setting read through attr_load (guarded): a new reference to its constant
 * value, or NULL (failure recorded, or *soft set when it is not a constant). */
static PyObject *setting(Capture *c, Var *m, const char *name)
{
    PyObject *n = PyUnicode_FromString(name);
    if (!n)
        return NULL;
    Var *v = attr_load(c, m, n);
    Py_DECREF(n);
    if (!v)
        return NULL;
    if (v->kind != VK_CONST) {
        cap_fail(c, BR_UNSUPPORTED_VALUE, "%s.%s is not a constant", Py_TYPE(m->obj)->tp_name, name);
        return NULL;
    }
    return Py_NewRef(v->obj);
}

static int int_setting(Capture *c, Var *m, const char *name, long *out)
{
    PyObject *v = setting(c, m, name);
    if (!v)
        return -1;
    *out = PyLong_AsLong(v);
    Py_DECREF(v);
    if (*out == -1 && PyErr_Occurred())
        return cap_fail_exc(c, BR_UNSUPPORTED_VALUE);
    return 0;
}

/* requires_grad of any parameter of module obj (live; the outputs' flag with grad on). */
static int any_param_requires_grad(PyObject *obj)
{
    PyObject *params = PyObject_GetAttrString(obj, "_parameters");
    int any = 0;
    if (params && PyDict_Check(params)) {
        Py_ssize_t pos = 0;
        PyObject *k, *p;
        while (!any && PyDict_Next(params, &pos, &k, &p)) {
            PyObject *rg = p != Py_None ? PyObject_GetAttrString(p, "requires_grad") : NULL;
            any = rg == Py_True;
            Py_XDECREF(rg);
        }
    }
    Py_XDECREF(params);
    sj_err_clear();
    return any;
}

Var *rnn_module_call(Capture *c, Var *m, Var *fwd, Var **args, int32_t nargs, PyObject *kwnames, int *handled)
{
    *handled = 0;
    int32_t nkw = kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0;
    int32_t npos = nargs - nkw;
    Var *x = npos >= 1 ? args[0] : NULL, *hx = npos >= 2 ? args[1] : NULL;
    for (int32_t k = 0; k < nkw; k++) {
        PyObject *kn = PyTuple_GET_ITEM(kwnames, k);
        if (PyUnicode_CompareWithASCIIString(kn, "input") == 0 && !x)
            x = args[npos + k];
        else if (PyUnicode_CompareWithASCIIString(kn, "hx") == 0 && !hx)
            hx = args[npos + k];
        else
            return NULL;   /* forward's own error */
    }
    if (npos > 2 || !x || x->kind != VK_TENSOR || x->u.t.meta.lib != LIB_TORCH ||
        (x->u.t.meta.ndim != 2 && x->u.t.meta.ndim != 3))
        return NULL;
    int batched = x->u.t.meta.ndim == 3;
    *handled = 1;
    PyObject *mode = setting(c, m, "mode");
    if (!mode)
        return NULL;
    int lstm = PyUnicode_Check(mode) && PyUnicode_CompareWithASCIIString(mode, "LSTM") == 0;
    Py_DECREF(mode);
    /* the initial state: None, a tensor, or (h0, c0) for an LSTM; forward checks the shapes */
    if (hx && hx->kind == VK_CONST && hx->obj == Py_None)
        hx = NULL;
    if (hx && !(lstm ? (hx->kind == VK_TUPLE && hx->u.seq.n == 2 && hx->u.seq.items[0]->kind == VK_TENSOR &&
                        hx->u.seq.items[1]->kind == VK_TENSOR)
                     : hx->kind == VK_TENSOR)) {
        cap_fail(c, BR_UNSUPPORTED_CALL, "%s with this initial state", Py_TYPE(m->obj)->tp_name);
        return NULL;
    }
    long hidden, proj, layers, bidir, batch_first;
    if (int_setting(c, m, "hidden_size", &hidden) < 0 || int_setting(c, m, "proj_size", &proj) < 0 ||
        int_setting(c, m, "num_layers", &layers) < 0 || int_setting(c, m, "bidirectional", &bidir) < 0 ||
        int_setting(c, m, "batch_first", &batch_first) < 0)
        return NULL;
    const TensorMeta *xm = &x->u.t.meta;
    if (xm->dtype != DT_F32 && xm->dtype != DT_F64) {
        cap_fail(c, BR_UNSUPPORTED_CALL, "%s on a %s input", Py_TYPE(m->obj)->tp_name, dtype_info[xm->dtype].name);
        return NULL;
    }
    if (xm->sym[xm->ndim - 1]) {
        cap_fail(c, BR_UNSUPPORTED_CALL, "%s on an input of symbolic feature size", Py_TYPE(m->obj)->tp_name);
        return NULL;
    }
    long dirs = bidir ? 2 : 1, hout = proj > 0 ? proj : hidden;
    int bdim = batched ? (batch_first ? 0 : 1) : -1;
    int rg = c->grad_mode && (xm->requires_grad || any_param_requires_grad(m->obj) ||
                              (hx && hx->kind == VK_TENSOR && hx->u.t.meta.requires_grad) ||
                              (hx && hx->kind == VK_TUPLE && (hx->u.seq.items[0]->u.t.meta.requires_grad ||
                                                              hx->u.seq.items[1]->u.t.meta.requires_grad)));
    TensorMeta outs[3];
    int nout = lstm ? 3 : 2;
    outs[0] = *xm;
    outs[0].size[xm->ndim - 1] = dirs * hout;
    outs[0].sym[xm->ndim - 1] = NULL;
    for (int i = 1; i < nout; i++) {
        TensorMeta *h = &outs[i];
        memset(h, 0, sizeof *h);
        h->lib = LIB_TORCH;
        h->dtype = xm->dtype;
        h->ndim = batched ? 3 : 2;
        h->size[0] = dirs * layers;
        if (batched) {
            h->size[1] = xm->size[bdim];
            h->sym[1] = xm->sym[bdim];
        }
        h->size[h->ndim - 1] = i == 2 ? hidden : hout;
    }
    for (int i = 0; i < nout; i++)
        outs[i].requires_grad = (unsigned char)rg;
    /* the node: flat_call(forward, module, input, hx) */
    Var *none = var_const(c, Py_None);
    if (!none)
        return NULL;
    Var *a[4] = {fwd, m, x, hx ? hx : none};
    int32_t first = graph_pool(c->g, 4);
    if (first < 0) {
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    for (int i = 0; i < 4; i++)
        if (cap_to_arg(c, a[i], first + i) < 0)
            return NULL;
    PyObject *where = cap_where(c);
    if (!where)
        return NULL;
    int32_t v = graph_add_node(c->g, OP_RNN_MODULE, 0, flat_target, first, 4, first + 4, 0, NULL, outs, nout,
                               where);
    Py_DECREF(where);
    if (v < 0) {
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    c->nops++;
    c->used_torch = 1;
    Var **t = cap_node_outputs(c, v, outs, nout);
    if (!t)
        return NULL;
    Var *hidden_v = lstm ? var_seq(c, VK_TUPLE, t + 1, 2) : t[1];
    if (!hidden_v)
        return NULL;
    Var *pair[2] = {t[0], hidden_v};
    return var_seq(c, VK_TUPLE, pair, 2);
}
