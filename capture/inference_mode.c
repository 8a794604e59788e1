/* torch.inference_mode: its blocks and its decorator (a with block over a clone of the
 * decorating object, like no_grad's).
 *
 * An inference_mode(mode) object is a VK_GRADMODE var with u.grad.inference set (1 for
 * mode True, 2 for False) and u.grad.enabled the grad mode inside the block: torch's
 * InferenceMode(mode) sets grad mode to !mode. Entering the block records a graph node
 * calling torch.autograd.grad_mode._enter_inference_mode(mode), whose value (torch's
 * guard object) the node of the exit, _exit_inference_mode(ctx), consumes; the graph
 * runs them where the program does, so tensors made inside are inference tensors as in
 * eager. A graph that fails half-way drops its values newest first (graph/ir.c), so the
 * guard objects restore the modes in order. */
#include "capture.h"
#include "../vocab/libs.h"
#include "../core/errors.h"

Var *infmode_new(Capture *c, Var **args, int32_t nargs, PyObject *kwnames)
{
    int32_t nkw = kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0;
    int mode = 1;
    if (nargs > 1 || (nkw && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "mode") != 0)) {
        cap_fail(c, BR_UNSUPPORTED_CALL, "torch.inference_mode with these arguments");
        return NULL;
    }
    if (nargs == 1) {
        Var *a = args[0];
        if (a->kind != VK_CONST || !PyBool_Check(a->obj)) {
            /* inference_mode(fn) decorates fn: not modelled inside a frame */
            cap_fail(c, BR_UNSUPPORTED_CALL, "torch.inference_mode(%s)", var_a(c, a));
            return NULL;
        }
        mode = a->obj == Py_True;
    }
    Var *v = var_new(c, VK_GRADMODE);
    if (!v)
        return NULL;
    v->u.grad.inference = mode ? 1 : 2;
    v->u.grad.enabled = !mode;
    v->u.grad.ctx = -1;
    return v;
}

int infmode_wrap(Capture *c, Var *v, PyObject *obj, int32_t src)
{
    /* a live inference_mode object (the one a decorator holds): its mode, read through
     * its attribute, is guarded by identity (True / False) */
    PyObject *mode = PyObject_GetAttrString(obj, "mode");
    if (!mode)
        return cap_fail_exc(c, BR_UNSUPPORTED_VALUE);
    int ok = PyBool_Check(mode);
    int on = mode == Py_True;
    Py_DECREF(mode);
    if (!ok)
        return cap_fail(c, BR_UNSUPPORTED_VALUE, "torch.inference_mode object with a mode that is not a bool");
    if (src >= 0) {
        PyObject *n = PyUnicode_FromString("mode");
        int32_t s = n ? sources_add(&c->src, SRC_ATTR, src, 0, n, NULL) : -1;
        Py_XDECREF(n);
        if (s < 0 || guard_add_simple(c, GK_ID_MATCH, s, on ? Py_True : Py_False) < 0)
            return -1;
    }
    v->u.grad.inference = on ? 1 : 2;
    v->u.grad.enabled = !on;
    v->u.grad.ctx = -1;
    return 0;
}

Var *infmode_attr(Capture *c, Var *o, PyObject *name)
{
    if (PyUnicode_CompareWithASCIIString(name, "__class__") == 0)
        return wrap_untracked(c, libs.inference_mode);
    if (PyUnicode_CompareWithASCIIString(name, "mode") == 0)
        return var_const(c, o->u.grad.inference == 1 ? Py_True : Py_False);
    cap_fail(c, BR_UNSUPPORTED_VALUE, "attribute '%U' of torch.inference_mode", name);
    return NULL;
}

int infmode_enter(Capture *c, Var *mgr, Var *ex)
{
    Var *flag = var_const(c, mgr->u.grad.inference == 1 ? Py_True : Py_False);
    if (!flag)
        return -1;
    int32_t first = graph_pool(c->g, 1);
    if (first < 0)
        return cap_fail_exc(c, BR_INTERNAL);
    Arg a = {ARG_CONST, 0, 0};
    if ((a.a = graph_const(c->g, flag->obj)) < 0)
        return cap_fail_exc(c, BR_INTERNAL);
    c->g->pool[first] = a;
    int32_t v = cap_scalar_node(c, OP_ENTER_INFERENCE_MODE, libs.enter_inference_mode, first, 1);
    if (v < 0)
        return cap_fail_exc(c, BR_INTERNAL);
    c->nops++;
    c->used_torch = 1;
    ex->u.grad.inference = mgr->u.grad.inference;
    ex->u.grad.ctx = v;
    c->grad_mode = mgr->u.grad.enabled;
    c->infer_depth++;
    return 0;
}

int infmode_exit(Capture *c, Var *ex)
{
    int32_t first = graph_pool(c->g, 1);
    if (first < 0)
        return cap_fail_exc(c, BR_INTERNAL);
    Arg a = {ARG_VALUE, ex->u.grad.ctx, 0};
    c->g->pool[first] = a;
    if (cap_scalar_node(c, OP_EXIT_INFERENCE_MODE, libs.exit_inference_mode, first, 1) < 0)
        return cap_fail_exc(c, BR_INTERNAL);
    c->nops++;
    c->grad_mode = ex->u.grad.prev;
    c->infer_depth--;
    return 0;
}
