/* nn.LSTM / nn.GRU / nn.RNN modules: the call of their own forward is recorded as the call
 * of the library function that forward makes (torch.lstm / gru / rnn_tanh / rnn_relu).
 *
 * Their forward is Python over torch's flat-weight bookkeeping (weak references to the
 * parameters, cuDNN flattening) that capture does not follow; of the module, the library
 * call needs only the settings and the parameters. Capture reads those through the
 * module's source (settings as guarded constants, each weight a graph input as any
 * parameter, by the names forward reads them by) and records what forward does for a 2-D
 * or 3-D tensor input: unsqueeze an unbatched input and its states, zeros for absent
 * states, the library call (a user's call of it: its callables row, its shape rule), then
 * squeeze back. The graph names values and constants only, so it serialises and runs with
 * no module alive.
 *
 * forward's checks are decided at capture on the metadata and settings they read, all
 * guarded: a call forward would refuse breaks the graph (BR_SHAPE_RULE), and the eager
 * call raises forward's own error. An input that is not a 2-D or 3-D tensor (a
 * PackedSequence) is left to the ordinary inlining of forward; a subclass that overrides
 * a method forward calls breaks the graph, since its forward is no longer the one
 * recorded here. */
#include "capture.h"
#include "../vocab/libs.h"
#include "../core/errors.h"

/* The three forwards, the classes defining them, and the modes each accepts. */
enum { RNN_LSTM, RNN_GRU, RNN_RNN, RNN_NCLASSES };
static PyObject *classes[RNN_NCLASSES];    /* strong: nn.LSTM, nn.GRU, nn.RNN */
static PyObject *forwards[RNN_NCLASSES];   /* strong: their forward functions */
static const char *const class_names[RNN_NCLASSES] = {"nn.LSTM", "nn.GRU", "nn.RNN"};

/* Methods the forwards call on the module: a subclass overriding one runs other code. */
static const char *const forward_calls[] = {
    "_update_flat_weights",     "_weights_have_changed",  "_init_flat_weights", "check_forward_args", "check_input",
    "get_expected_hidden_size", "get_expected_cell_size", "check_hidden_size",  "permute_hidden",
};

static int init(void)
{
    if (forwards[0])
        return 0;
    if (!libs.torch)
        return 1;
    for (int i = 0; i < RNN_NCLASSES; i++) {
        classes[i] = libs_get_path(libs.torch, class_names[i]);
        forwards[i] = classes[i] ? PyObject_GetAttrString(classes[i], "forward") : NULL;
        if (!forwards[i]) {
            sj_err_clear();
            for (int j = 0; j <= i; j++) {
                Py_CLEAR(classes[j]);
                Py_CLEAR(forwards[j]);
            }
            return 1;
        }
    }
    return 0;
}

static int forward_index(PyObject *fn)
{
    if (!fn || init() != 0)
        return -1;
    for (int i = 0; i < RNN_NCLASSES; i++)
        if (fn == forwards[i])
            return i;
    return -1;
}

int rnn_is_forward(PyObject *fn)
{
    return forward_index(fn) >= 0;
}

/* ---------------------------------------------------------------- settings ---- */

/* The module's settings, each read through attr_load (guarded). The vars are constants. */
typedef struct {
    Var *bias, *dropout, *training, *bidirectional, *batch_first, *num_layers;
    int op_row;                  /* callables row of the library function forward calls */
    int lstm;                    /* (h, c) states */
    long input_size, hidden, proj, layers, bidir, batch_first_i;
    const char *name;            /* "nn.LSTM", ... for break reasons */
} Settings;

/* m.name as a constant var, or NULL with the failure recorded. */
static Var *setting(Capture *c, Var *m, const char *name)
{
    PyObject *n = PyUnicode_FromString(name);
    if (!n) {
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    Var *v = attr_load(c, m, n);
    Py_DECREF(n);
    if (v && v->kind != VK_CONST) {
        cap_fail(c, BR_UNSUPPORTED_VALUE, "%s.%s is not a constant", Py_TYPE(m->obj)->tp_name, name);
        return NULL;
    }
    return v;
}

static int int_setting(Capture *c, Var *m, const char *name, long *out, Var **var)
{
    Var *v = setting(c, m, name);
    if (!v)
        return -1;
    if (!PyLong_Check(v->obj))   /* bool included */
        return cap_fail(c, BR_UNSUPPORTED_VALUE, "%s.%s is not an int", Py_TYPE(m->obj)->tp_name, name);
    *out = PyLong_AsLong(v->obj);
    if (*out == -1 && PyErr_Occurred())
        return cap_fail_exc(c, BR_UNSUPPORTED_VALUE);
    if (var)
        *var = v;
    return 0;
}

/* The library row for mode under forward `which`: forward's own dispatch. -1 when forward
 * would refuse the mode. */
static int mode_row(int which, PyObject *mode, int *lstm)
{
    static const struct {
        int which;
        const char *mode, *path;
    } rows[] = {
        {RNN_LSTM, "LSTM", "torch.lstm"},
        {RNN_GRU, "GRU", "torch.gru"},
        {RNN_RNN, "RNN_TANH", "torch.rnn_tanh"},
        {RNN_RNN, "RNN_RELU", "torch.rnn_relu"},
    };
    if (!PyUnicode_Check(mode))
        return -1;
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++)
        if (rows[i].which == which && PyUnicode_CompareWithASCIIString(mode, rows[i].mode) == 0) {
            *lstm = which == RNN_LSTM;
            return callables_path_row(rows[i].path);
        }
    return -1;
}

static int read_settings(Capture *c, Var *m, int which, Settings *s)
{
    s->name = class_names[which];
    Var *mode = setting(c, m, "mode");
    if (!mode)
        return -1;
    s->op_row = mode_row(which, mode->obj, &s->lstm);
    if (s->op_row < 0)
        return cap_fail(c, BR_UNSUPPORTED_CALL, "%s.forward on a module of mode %R", s->name, mode->obj);
    long ignored;
    if (int_setting(c, m, "input_size", &s->input_size, NULL) < 0 ||
        int_setting(c, m, "hidden_size", &s->hidden, NULL) < 0 || int_setting(c, m, "proj_size", &s->proj, NULL) < 0 ||
        int_setting(c, m, "num_layers", &s->layers, &s->num_layers) < 0 ||
        int_setting(c, m, "bidirectional", &s->bidir, &s->bidirectional) < 0 ||
        int_setting(c, m, "batch_first", &s->batch_first_i, &s->batch_first) < 0 ||
        int_setting(c, m, "bias", &ignored, &s->bias) < 0 || int_setting(c, m, "training", &ignored, &s->training) < 0)
        return -1;
    s->dropout = setting(c, m, "dropout");
    return s->dropout ? 0 : -1;
}

/* A subclass of the class defining forward that overrides a method forward calls. */
static int overrides_forward_calls(PyObject *obj, int which)
{
    PyTypeObject *t = Py_TYPE(obj), *base = (PyTypeObject *)classes[which];
    if (t == base)
        return 0;
    for (size_t i = 0; i < sizeof forward_calls / sizeof *forward_calls; i++) {
        PyObject *n = PyUnicode_FromString(forward_calls[i]);
        if (!n) {
            sj_err_clear();
            return 1;
        }
        int differs = _PyType_Lookup(t, n) != _PyType_Lookup(base, n);
        Py_DECREF(n);
        if (differs)
            return 1;
    }
    return 0;
}

/* The weights forward passes, read by the names it reads them by (its _flat_weights are
 * these parameters, refreshed from them when they were replaced): a new list var of
 * tensors, or NULL with the failure recorded. */
static Var *flat_weights(Capture *c, Var *m, const Settings *s, const TensorMeta *xm)
{
    PyObject *attr = PyUnicode_FromString("_flat_weights_names");
    Var *nv = attr ? attr_load(c, m, attr) : NULL;
    Py_XDECREF(attr);
    if (!nv)
        return cap_failed(c) ? NULL : (cap_fail_exc(c, BR_INTERNAL), NULL);
    PyObject *names = nv->kind == VK_LIST ? cap_keep_steal(c, var_to_py(c, nv)) : NULL;
    if (!names || !PyList_Check(names)) {
        if (!cap_failed(c) && PyErr_Occurred())
            cap_fail_exc(c, BR_INTERNAL);
        else if (!cap_failed(c))
            cap_fail(c, BR_UNSUPPORTED_VALUE, "%s._flat_weights_names is not a list of names", s->name);
        return NULL;
    }
    Var *list = var_seq(c, VK_LIST, NULL, 0);
    for (Py_ssize_t i = 0; list && i < PyList_GET_SIZE(names); i++) {
        PyObject *n = PyList_GET_ITEM(names, i);
        if (!PyUnicode_Check(n)) {
            cap_fail(c, BR_UNSUPPORTED_VALUE, "%s._flat_weights_names holds a non-str", s->name);
            return NULL;
        }
        Var *w = attr_load(c, m, n);
        if (!w)
            return NULL;
        if (w->kind != VK_TENSOR || w->u.t.meta.lib != LIB_TORCH) {
            cap_fail(c, BR_UNSUPPORTED_VALUE, "%s.%U is %s", s->name, n, var_a(c, w));
            return NULL;
        }
        if (w->u.t.meta.dtype != xm->dtype) {   /* check_input's dtype check */
            cap_fail(c, BR_SHAPE_RULE, "%s: input dtype %s does not match weight dtype %s", s->name,
                     dtype_info[xm->dtype].name, dtype_info[w->u.t.meta.dtype].name);
            return NULL;
        }
        if (var_seq_append(c, list, w) < 0)
            return NULL;
    }
    return list;
}

/* ------------------------------------------------------------- the call ---- */

/* Whether dim i of t is e (a size expression, or the constant k when e is NULL): 1 or 0,
 * the answer guarded when it involves a symbol; -1 with the failure recorded. */
static int dim_is(Capture *c, const TensorMeta *t, int i, SymNode *e, int64_t k)
{
    if (!t->sym[i] && !e)
        return t->size[i] == k;
    SymNode *a = t->sym[i] ? t->sym[i] : sym_const(c->env, t->size[i]);
    SymNode *b = e ? e : sym_const(c->env, k);
    int truth = 0;
    if (!a || !b || symb_decide(c, sym_eq(c->env, a, b), &truth) < 0)
        return cap_failed(c) ? -1 : cap_fail_exc(c, BR_INTERNAL);
    return truth;
}

/* forward's check of an initial state h (as given: 2-D for an unbatched input, else 3-D)
 * against (layers * directions, batch, size): 0, or -1 with the failure recorded (a
 * BR_SHAPE_RULE break where forward raises). */
static int check_state(Capture *c, const Settings *s, const TensorMeta *h, int batched, const TensorMeta *xm, int bdim,
                       long size, const char *what)
{
    if (h->ndim != (batched ? 3 : 2))
        return cap_fail(c, BR_SHAPE_RULE, "%s: a %d-D %s for a %d-D input", s->name, h->ndim, what, batched ? 3 : 2);
    int ok = dim_is(c, h, 0, NULL, (s->bidir ? 2 : 1) * s->layers);
    if (ok > 0 && batched)
        ok = dim_is(c, h, 1, xm->sym[bdim], xm->size[bdim]);
    if (ok > 0)
        ok = dim_is(c, h, h->ndim - 1, NULL, size);
    if (ok < 0)
        return -1;
    return ok ? 0 : cap_fail(c, BR_SHAPE_RULE, "%s: %s of the wrong size", s->name, what);
}

/* A recorded call of callables row `path` (a Tensor method or torch function). */
static Var *call_row(Capture *c, const char *path, Var **args, int32_t nargs, PyObject *kwnames)
{
    int row = callables_path_row(path);
    if (row < 0) {
        cap_fail(c, BR_INTERNAL, "no callables row %s", path);
        return NULL;
    }
    return op_record(c, row, args, nargs, kwnames);
}

static Var *squeeze_or_unsqueeze(Capture *c, const char *path, Var *t, long dim)
{
    Var *d = var_const_steal(c, PyLong_FromLong(dim));
    Var *a[2] = {t, d};
    return d ? call_row(c, path, a, 2, NULL) : NULL;
}

/* forward's zero initial state: torch.zeros(layers * directions, batch, size,
 * dtype=input.dtype, device=input.device), input already batched. */
static Var *zero_state(Capture *c, const Settings *s, Var *x, int bdim, long size)
{
    const TensorMeta *xm = &x->u.t.meta;
    PyObject *kw = Py_BuildValue("(ss)", "dtype", "device");
    if (!kw || !cap_keep_steal(c, kw)) {
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    PyObject *dn = PyUnicode_FromString("dtype"), *vn = PyUnicode_FromString("device");
    Var *dtype = dn ? attr_load(c, x, dn) : NULL;
    Var *device = dtype && vn ? attr_load(c, x, vn) : NULL;
    Py_XDECREF(dn);
    Py_XDECREF(vn);
    if (!device)
        return cap_failed(c) ? NULL : (cap_fail_exc(c, BR_INTERNAL), NULL);
    Var *a[5] = {var_const_steal(c, PyLong_FromLong((s->bidir ? 2 : 1) * s->layers)),
                 xm->sym[bdim] ? symb_var(c, xm->sym[bdim]) : var_const_steal(c, PyLong_FromLongLong(xm->size[bdim])),
                 var_const_steal(c, PyLong_FromLong(size)), dtype, device};
    if (!a[0] || !a[1] || !a[2])
        return NULL;
    return call_row(c, "torch.zeros", a, 5, kw);
}

/* The initial states as the library call takes them (3-D; a pair for an LSTM), checked as
 * forward checks them. hx: None (absent), a tensor, or for an LSTM a pair of tensors. */
static Var *initial_states(Capture *c, const Settings *s, Var *hx, Var *x, int batched, int bdim)
{
    const TensorMeta *xm = &x->u.t.meta;   /* batched */
    long hout = s->proj > 0 ? s->proj : s->hidden;
    Var *st[2] = {NULL, NULL};
    int n = s->lstm ? 2 : 1;
    if (!hx) {
        for (int i = 0; i < n; i++)
            if (!(st[i] = zero_state(c, s, x, bdim, i == 1 ? s->hidden : hout)))
                return NULL;
    } else {
        if (s->lstm ? !(hx->kind == VK_TUPLE && hx->u.seq.n == 2 && hx->u.seq.items[0]->kind == VK_TENSOR &&
                        hx->u.seq.items[1]->kind == VK_TENSOR)
                    : hx->kind != VK_TENSOR) {
            cap_fail(c, BR_UNSUPPORTED_CALL, "%s with this initial state", s->name);
            return NULL;
        }
        for (int i = 0; i < n; i++) {
            Var *h = s->lstm ? hx->u.seq.items[i] : hx;
            if (h->u.t.meta.lib != LIB_TORCH) {
                cap_fail(c, BR_UNSUPPORTED_CALL, "%s with a numpy initial state", s->name);
                return NULL;
            }
            if (check_state(c, s, &h->u.t.meta, batched, xm, bdim, i == 1 ? s->hidden : hout,
                            !s->lstm ? "hx"
                            : i      ? "hx[1]"
                                     : "hx[0]") < 0)
                return NULL;
            st[i] = batched ? h : squeeze_or_unsqueeze(c, "Tensor.unsqueeze", h, 1);
            if (!st[i])
                return NULL;
        }
    }
    return s->lstm ? var_seq(c, VK_TUPLE, st, 2) : st[0];
}

Var *rnn_module_call(Capture *c, Var *m, Var *fwd, Var **args, int32_t nargs, PyObject *kwnames, int *handled)
{
    *handled = 0;
    int which = forward_index(fwd->obj);
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
    if (which < 0 || npos > 2 || !x || x->kind != VK_TENSOR || x->u.t.meta.lib != LIB_TORCH ||
        (x->u.t.meta.ndim != 2 && x->u.t.meta.ndim != 3))
        return NULL;
    *handled = 1;
    if (overrides_forward_calls(m->obj, which)) {
        cap_fail(c, BR_UNSUPPORTED_CALL, "%s.forward on a %s, which overrides a method it calls", class_names[which],
                 Py_TYPE(m->obj)->tp_name);
        return NULL;
    }
    Settings s;
    if (read_settings(c, m, which, &s) < 0)
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
    Var *weights = flat_weights(c, m, &s, xm);
    if (!weights)
        return NULL;
    if (xm->size[xm->ndim - 1] != s.input_size) {   /* check_input */
        cap_fail(c, BR_SHAPE_RULE, "%s: input.size(-1) is %lld, input_size %ld", s.name,
                 (long long)xm->size[xm->ndim - 1], s.input_size);
        return NULL;
    }
    if (hx && hx->kind == VK_CONST && hx->obj == Py_None)
        hx = NULL;
    int batched = xm->ndim == 3, bdim = s.batch_first_i ? 0 : 1;
    Var *xb = batched ? x : squeeze_or_unsqueeze(c, "Tensor.unsqueeze", x, bdim);
    Var *states = xb ? initial_states(c, &s, hx, xb, batched, bdim) : NULL;
    if (!states)
        return NULL;
    Var *a[9] = {xb, states, weights, s.bias, s.num_layers, s.dropout, s.training, s.bidirectional, s.batch_first};
    Var *r = op_record(c, s.op_row, a, 9, NULL);
    if (!r)
        return NULL;
    if (r->kind != VK_TUPLE || r->u.seq.n != (s.lstm ? 3 : 2)) {
        cap_fail(c, BR_INTERNAL, "%s: unexpected result of its library call", s.name);
        return NULL;
    }
    Var *outs[3];
    for (int i = 0; i < r->u.seq.n; i++) {
        outs[i] = batched ? r->u.seq.items[i]
                          : squeeze_or_unsqueeze(c, "Tensor.squeeze", r->u.seq.items[i], i == 0 ? bdim : 1);
        if (!outs[i])
            return NULL;
    }
    Var *hidden = s.lstm ? var_seq(c, VK_TUPLE, outs + 1, 2) : outs[1];
    if (!hidden)
        return NULL;
    Var *pair[2] = {outs[0], hidden};
    return var_seq(c, VK_TUPLE, pair, 2);
}
