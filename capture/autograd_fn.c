/* torch.autograd.Function.apply inside captured code.
 *
 * With grad mode off (inference code), apply runs forward and nothing else: capture
 * inlines forward(ctx, *args) (or forward(*args) then setup_context(ctx, args, output)),
 * with ctx a FunctionCtx made during capture (a VK_USEROBJ): save_for_backward,
 * mark_non_differentiable, mark_dirty and set_materialize_grads are FunctionCtx's own
 * Python methods, which only store attributes, and attributes written on ctx stay in the
 * capture.
 *
 * With grad mode on, apply must build its node of the autograd graph, which capture does
 * not model: the call becomes one graph node that runs cls.apply itself (an eager step),
 * so the graph goes on around it and gradients flow through it as in eager. Its outputs'
 * shapes, dtypes and requires_grad come from running cls.apply once at capture on meta
 * tensors shaped like the arguments; the first run of the graph checks them against the
 * real outputs, like every shape rule. */
#include "capture.h"
#include "../vocab/libs.h"
#include "../core/errors.h"
#include "../core/pyutil.h"

static PyObject *apply_fn;        /* strong: the function under Function.apply (a classmethod) */
static PyObject *function_type;   /* strong: torch.autograd.Function */
static PyObject *ctx_type;        /* strong: torch.autograd.function.FunctionCtx */
static PyObject *base_setup;      /* strong: _SingleLevelFunction.setup_context (the default) */

/* Record the pending exception as an internal failure: NULL. */
static Var *fail_internal(Capture *c)
{
    cap_fail_exc(c, BR_INTERNAL);
    return NULL;
}

static int init(void)
{
    if (apply_fn)
        return 0;
    if (!libs.torch)
        return 1;
    PyObject *fn = libs_get_path(libs.torch, "autograd.Function");
    PyObject *ap = fn ? PyObject_GetAttrString(fn, "apply") : NULL;
    PyObject *ct = ap ? libs_get_path(libs.torch, "autograd.function.FunctionCtx") : NULL;
    PyObject *bs = ct ? libs_get_path(libs.torch, "autograd.function._SingleLevelFunction.setup_context") : NULL;
    if (!bs || !PyMethod_Check(ap)) {
        sj_err_clear();
        Py_XDECREF(fn);
        Py_XDECREF(ap);
        Py_XDECREF(ct);
        Py_XDECREF(bs);
        return 1;   /* another torch: apply is not recognised, calls of it break as before */
    }
    function_type = fn;
    ctx_type = ct;
    base_setup = bs;
    apply_fn = Py_NewRef(PyMethod_GET_FUNCTION(ap));
    Py_DECREF(ap);
    return 0;
}

int autograd_fn_is_apply(PyObject *fn)
{
    return fn && init() == 0 && fn == apply_fn;
}

/* ------------------------------------------------------------ inlining ---- */

static Var *call_static(Capture *c, PyObject *fn, Var **args, int32_t nargs, PyObject *kwnames)
{
    Var *f = wrap_untracked(c, fn);
    return f ? call_var(c, f, args, nargs, kwnames) : NULL;
}

static Var *outputs_as_apply_gives(Capture *c, Var *ctx, Var *out, Var **args, int32_t nargs);

static Var *inline_forward(Capture *c, PyObject *cls, Var **args, int32_t nargs, PyObject *kwnames)
{
    PyObject *fwd = PyObject_GetAttrString(cls, "forward");
    PyObject *setup = fwd ? PyObject_GetAttrString(cls, "setup_context") : NULL;
    if (!setup || !cap_keep_steal(c, fwd) || !cap_keep_steal(c, setup)) {
        Py_XDECREF(setup);
        cap_fail_exc(c, BR_USER_EXCEPTION);
        return NULL;
    }
    Var *ctx = var_new(c, VK_USEROBJ);
    Var *attrs = ctx ? var_dict(c) : NULL;
    if (!attrs)
        return NULL;
    ctx->u.uobj.type = (PyTypeObject *)ctx_type;
    ctx->u.uobj.attrs = attrs;
    /* ctx.needs_input_grad: which arguments are tensors that require grad (whatever the
     * grad mode, as torch gives it) */
    int32_t npos = nargs - (kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0);
    PyObject *needs = PyTuple_New(npos);
    if (!needs || !cap_keep_steal(c, needs))
        return NULL;
    for (int32_t i = 0; i < npos; i++) {
        int rg = args[i]->kind == VK_TENSOR && args[i]->u.t.meta.requires_grad;
        PyTuple_SET_ITEM(needs, i, Py_NewRef(rg ? Py_True : Py_False));
    }
    PyObject *nk = PyUnicode_FromString("needs_input_grad");
    Var *key = nk ? var_const_steal(c, nk) : NULL;
    Var *val = key ? var_const(c, needs) : NULL;
    if (!val || var_dict_set(c, attrs, key, val) < 0)
        return NULL;
    Var **all = cap_alloc(c, sizeof(Var *) * (size_t)(nargs + 1));
    if (!all)
        return NULL;
    if (setup == base_setup) {
        all[0] = ctx;
        if (nargs)
            memcpy(all + 1, args, sizeof(Var *) * (size_t)nargs);
        return outputs_as_apply_gives(c, ctx, call_static(c, fwd, all, nargs + 1, kwnames), args, nargs);
    }
    /* forward(*args) then setup_context(ctx, inputs, output) */
    if (kwnames) {
        cap_fail(c, BR_UNSUPPORTED_CALL, "%s.apply with keyword arguments", ((PyTypeObject *)cls)->tp_name);
        return NULL;
    }
    Var *out = call_static(c, fwd, args, nargs, NULL);
    Var *inputs = out ? var_seq(c, VK_TUPLE, args, nargs) : NULL;
    if (!inputs)
        return NULL;
    Var *sa[3] = {ctx, inputs, out};
    return call_static(c, setup, sa, 3, NULL) ? outputs_as_apply_gives(c, ctx, out, args, nargs) : NULL;
}

/* apply returns an input that forward returned as is (and did not mark dirty) as a new
 * view of it, not the input itself: out, or such a view node. */
static Var *as_view_of_input(Capture *c, Var *out, Var **args, int32_t nargs, Var *dirty)
{
    if (!out || out->kind != VK_TENSOR)
        return out;
    int is_input = 0;
    for (int32_t i = 0; i < nargs; i++)
        if (args[i] == out || (args[i]->kind == VK_TENSOR && args[i]->u.t.value == out->u.t.value))
            is_input = 1;
    for (int32_t i = 0; dirty && i < dirty->u.seq.n; i++)
        if (dirty->u.seq.items[i] == out ||
            (dirty->u.seq.items[i]->kind == VK_TENSOR && dirty->u.seq.items[i]->u.t.value == out->u.t.value))
            is_input = 0;
    if (!is_input)
        return out;
    static PyObject *view_as;   /* strong: Tensor.view_as */
    if (!view_as && !(view_as = PyObject_GetAttrString(libs.tensor_type, "view_as"))) {
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    int32_t first = graph_pool(c->g, 2);
    if (first < 0)
        return fail_internal(c);
    if (cap_to_arg(c, out, first) < 0 || cap_to_arg(c, out, first + 1) < 0)
        return NULL;
    TensorMeta m = out->u.t.meta;
    m.requires_grad = 0;   /* grad mode is off here */
    PyObject *where = cap_where(c);
    int32_t v =
        where ? graph_add_node(c->g, OP_FN_OUTPUT_VIEW, 0, view_as, first, 2, first + 2, 0, NULL, &m, 1, where) : -1;
    Py_XDECREF(where);
    Var *t = v >= 0 ? var_new(c, VK_TENSOR) : NULL;
    if (!t) {
        if (!cap_failed(c))
            cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    c->nops++;
    t->u.t.value = v;
    t->u.t.meta = m;
    return t;
}

static Var *outputs_as_apply_gives(Capture *c, Var *ctx, Var *out, Var **args, int32_t nargs)
{
    if (!out)
        return NULL;
    PyObject *dn = PyUnicode_FromString("dirty_tensors");
    Var *key = dn ? var_const_steal(c, dn) : NULL;
    int found = 0;
    Var *dirty = key ? var_dict_get(c, ctx->u.uobj.attrs, key, &found) : NULL;
    if (!key)
        return NULL;
    if (!found || !dirty || dirty->kind != VK_TUPLE)
        dirty = NULL;
    if (out->kind != VK_TUPLE)
        return as_view_of_input(c, out, args, nargs, dirty);
    Var **items = cap_alloc(c, sizeof(Var *) * (size_t)(out->u.seq.n ? out->u.seq.n : 1));
    if (!items)
        return NULL;
    for (int32_t i = 0; i < out->u.seq.n; i++)
        if (!(items[i] = as_view_of_input(c, out->u.seq.items[i], args, nargs, dirty)))
            return NULL;
    return var_seq(c, VK_TUPLE, items, out->u.seq.n);
}

/* ---------------------------------------------------------- opaque node ---- */

static Var *opaque_apply(Capture *c, PyObject *cls, Var **args, int32_t nargs, PyObject *kwnames)
{
    const char *name = ((PyTypeObject *)cls)->tp_name;
    if (kwnames) {
        cap_fail(c, BR_UNSUPPORTED_CALL, "%s.apply with keyword arguments under grad mode", name);
        return NULL;
    }
    PyObject *standins = PyTuple_New(nargs);
    if (!standins)
        return NULL;
    for (int32_t i = 0; i < nargs; i++) {
        Var *a = args[i];
        PyObject *s = NULL;
        if (a->kind == VK_TENSOR) {
            for (int d = 0; d < a->u.t.meta.ndim; d++)
                if (a->u.t.meta.sym[d]) {
                    Py_DECREF(standins);
                    cap_fail(c, BR_UNSUPPORTED_CALL, "%s.apply on a tensor of symbolic shape under grad mode", name);
                    return NULL;
                }
            if (a->u.t.meta.lib != LIB_TORCH) {
                Py_DECREF(standins);
                cap_fail(c, BR_UNSUPPORTED_CALL, "%s.apply on a numpy array", name);
                return NULL;
            }
            s = cap_meta_standin(&a->u.t.meta);
        } else if (a->kind == VK_CONST) {
            s = Py_NewRef(a->obj);
        } else {
            Py_DECREF(standins);
            cap_fail(c, BR_UNSUPPORTED_CALL, "%s.apply with %s argument under grad mode", name, var_a(c, a));
            return NULL;
        }
        if (!s) {
            Py_DECREF(standins);
            return fail_internal(c);
        }
        PyTuple_SET_ITEM(standins, i, s);
    }
    /* the stand-in run happens in the grad mode of the captured program */
    PyObject *apply = PyObject_GetAttrString(cls, "apply");
    PyObject *out = apply ? cap_standin_call(c, apply, &PyTuple_GET_ITEM(standins, 0), nargs, NULL) : NULL;
    Py_DECREF(standins);
    if (!out) {
        Py_XDECREF(apply);
        cap_fail_exc(c, BR_UNSUPPORTED_CALL);
        return NULL;
    }
    int is_tuple = PyTuple_Check(out);
    int32_t nout = is_tuple ? (int32_t)PyTuple_GET_SIZE(out) : 1;
    TensorMeta outs[SJ_MAX_OUTS];
    int bad = nout < 1 || nout > SJ_MAX_OUTS;
    for (int32_t i = 0; !bad && i < nout; i++) {
        int r = cap_meta_of_standin(is_tuple ? PyTuple_GET_ITEM(out, i) : out, &outs[i]);
        if (r < 0) {
            Py_DECREF(out);
            Py_DECREF(apply);
            return fail_internal(c);
        }
        bad = r;
    }
    Py_DECREF(out);
    if (bad || !cap_keep_steal(c, apply)) {
        if (bad)
            Py_DECREF(apply);
        cap_fail(c, BR_UNSUPPORTED_CALL, "%s.apply returns something other than tensors", name);
        return NULL;
    }
    /* the node: cls.apply(*args) */
    return cap_opaque_node(c, OP_AUTOGRAD_FUNCTION, apply, args, nargs, NULL, outs, nout,
                           is_tuple ? VK_TUPLE : VK_TENSOR);
}

/* ----------------------------------------------------------------- entry ---- */

Var *autograd_fn_apply(Capture *c, Var **args, int32_t nargs, PyObject *kwnames)
{
    int32_t nkw = kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0;
    if (nargs - nkw < 1 || !args[0]->obj || !PyType_Check(args[0]->obj) ||
        !PyType_IsSubtype((PyTypeObject *)args[0]->obj, (PyTypeObject *)function_type) ||
        args[0]->obj == function_type) {
        cap_fail(c, BR_UNSUPPORTED_CALL, "torch.autograd.Function.apply on this receiver");
        return NULL;
    }
    PyObject *cls = args[0]->obj;
    int any_grad = 0;
    for (int32_t i = 1; i < nargs; i++)
        if (args[i]->kind == VK_TENSOR && args[i]->u.t.meta.requires_grad)
            any_grad = 1;
    if (!c->grad_mode)
        return inline_forward(c, cls, args + 1, nargs - 1, kwnames);
    (void)any_grad;
    return opaque_apply(c, cls, args + 1, nargs - 1, kwnames);
}
