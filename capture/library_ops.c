/* Operators of torch.library called as torch.ops.<namespace>.<name>[.<overload>]: the
 * custom operators libraries register (transformers' grouped_mm_fallback, a user's
 * @torch.library.custom_op) and aten's own, named directly.
 *
 * The capture cannot see into an operator's kernel, so the call becomes one graph node that
 * calls the operator (an eager step), as torch.compile puts it in its graph as an opaque
 * call. Its results' shapes, dtypes and requires_grad come from calling the operator once
 * at capture on meta tensors shaped like the arguments: an operator answers there with its
 * meta kernel or the fake implementation registered with torch.library.register_fake (the
 * one torch.compile runs); the first run of the graph checks them against the real results,
 * like every shape rule.
 *
 * Only functional operators are recorded: one whose schema lets it write to an argument
 * (add_, out=) or return a view of one breaks, since the graph would not know the write or
 * the alias. An overload packet (torch.ops.aten.add) is resolved to the overload the
 * arguments select, as the call itself does, and the node calls that overload. */
#include "capture.h"
#include "../vocab/libs.h"
#include "../core/errors.h"
#include "../core/pyutil.h"

static PyObject *packet_type;     /* strong: torch._ops.OpOverloadPacket */
static PyObject *overload_type;   /* strong: torch._ops.OpOverload */
static PyObject *resolve_fn;      /* strong: torch._C._jit_resolve_packet */

/* 0 when torch's operator types are known, 1 when torch is not loaded or is another torch
 * (calls of its operators then break as unsupported calls). */
static int init(void)
{
    if (packet_type)
        return 0;
    if (!libs.torch)
        return 1;
    PyObject *p = libs_get_path(libs.torch, "_ops.OpOverloadPacket");
    PyObject *o = p ? libs_get_path(libs.torch, "_ops.OpOverload") : NULL;
    PyObject *r = o ? libs_get_path(libs.torch, "_C._jit_resolve_packet") : NULL;
    if (!r || !PyType_Check(p) || !PyType_Check(o)) {
        sj_err_clear();
        Py_XDECREF(p);
        Py_XDECREF(o);
        Py_XDECREF(r);
        return 1;
    }
    packet_type = p;
    overload_type = o;
    resolve_fn = r;
    return 0;
}

int library_op_is(PyObject *fn)
{
    /* exact types: a TorchBindOpOverload takes script objects the capture does not model */
    return fn && init() == 0 && ((PyObject *)Py_TYPE(fn) == packet_type || (PyObject *)Py_TYPE(fn) == overload_type);
}

/* Record the pending exception as an internal failure: NULL. */
static Var *fail_internal(Capture *c)
{
    cap_fail_exc(c, BR_INTERNAL);
    return NULL;
}

/* ---------------------------------------------------------- arguments ---- */

/* New reference: the stand-in of argument a for the meta run, or NULL: with *why set (a
 * static string) when a is not an argument this path takes, else with an exception. */
static PyObject *standin_of(Capture *c, Var *a, const char **why, int depth)
{
    if (a->kind == VK_TENSOR) {
        for (int d = 0; d < a->u.t.meta.ndim; d++)
            if (a->u.t.meta.sym[d]) {
                *why = "a tensor of symbolic shape (the meta run gives static sizes only)";
                return NULL;
            }
        if (a->u.t.meta.lib != LIB_TORCH) {
            *why = "a numpy array";
            return NULL;
        }
        return cap_meta_standin(&a->u.t.meta);
    }
    if ((a->kind == VK_LIST || a->kind == VK_TUPLE) && !var_deep_const(a)) {
        if (depth >= 4) {
            *why = "sequences nested this deep";
            return NULL;
        }
        PyObject *seq = a->kind == VK_LIST ? PyList_New(a->u.seq.n) : PyTuple_New(a->u.seq.n);
        for (int32_t i = 0; seq && i < a->u.seq.n; i++) {
            PyObject *s = standin_of(c, a->u.seq.items[i], why, depth + 1);
            if (!s) {
                Py_CLEAR(seq);
                break;
            }
            if (a->kind == VK_LIST)
                PyList_SET_ITEM(seq, i, s);
            else
                PyTuple_SET_ITEM(seq, i, s);
        }
        return seq;
    }
    if (a->kind == VK_SYMINT) {
        *why = "a symbolic int";
        return NULL;
    }
    if (!var_is_const(a)) {
        *why = "an argument that is not a tensor or a constant";
        return NULL;
    }
    return var_to_py(c, a);
}

/* 0 when no argument and no result of op's schema carries alias information (the operator
 * neither writes to an argument nor returns a view of one), 1 when one does (*what names
 * it, a new str), -1 with an exception. */
static int schema_aliases(PyObject *op, PyObject **what)
{
    *what = NULL;
    PyObject *schema = PyObject_GetAttrString(op, "_schema");
    if (!schema)
        return -1;
    int r = 0;
    const char *lists[2] = {"arguments", "returns"};
    for (int k = 0; k < 2 && r == 0; k++) {
        PyObject *items = PyObject_GetAttrString(schema, lists[k]);
        PyObject *seq = items ? PySequence_Fast(items, "schema lists") : NULL;
        Py_XDECREF(items);
        if (!seq) {
            r = -1;
            break;
        }
        for (Py_ssize_t i = 0; r == 0 && i < PySequence_Fast_GET_SIZE(seq); i++) {
            PyObject *arg = PySequence_Fast_GET_ITEM(seq, i);
            PyObject *info = PyObject_GetAttrString(arg, "alias_info");
            if (!info) {
                r = -1;
            } else if (info != Py_None) {
                PyObject *name = k == 0 ? PyObject_GetAttrString(arg, "name") : NULL;
                *what = k == 0 ? (name ? PyUnicode_FromFormat("writes to or aliases its argument '%S'", name) : NULL)
                               : PyUnicode_FromString("returns a view of an argument");
                Py_XDECREF(name);
                r = *what ? 1 : -1;
            }
            Py_XDECREF(info);
        }
        Py_DECREF(seq);
    }
    Py_DECREF(schema);
    return r;
}

/* New reference: the overload of fn the stand-in arguments select (fn itself when it is an
 * overload), or NULL with an exception (the arguments fit no overload: the call raises). */
static PyObject *resolve(PyObject *fn, PyObject *const *standins, Py_ssize_t npos, PyObject *kwnames)
{
    if ((PyObject *)Py_TYPE(fn) == overload_type)
        return Py_NewRef(fn);
    PyObject *qual = PyObject_GetAttrString(fn, "_qualified_op_name");
    if (!qual)
        return NULL;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject **all = PyMem_Malloc(sizeof(PyObject *) * (size_t)(npos + nkw + 1));
    if (!all) {
        Py_DECREF(qual);
        return PyErr_NoMemory();
    }
    all[0] = qual;
    for (Py_ssize_t i = 0; i < npos + nkw; i++)
        all[i + 1] = standins[i];
    PyObject *name = PyObject_Vectorcall(resolve_fn, all, (size_t)(npos + 1), kwnames);
    PyMem_Free(all);
    Py_DECREF(qual);
    if (!name)
        return NULL;
    PyObject *op = PyUnicode_Check(name) && PyUnicode_GET_LENGTH(name) == 0 ? PyObject_GetAttrString(fn, "default")
                                                                            : PyObject_GetAttr(fn, name);
    Py_DECREF(name);
    return op;
}

/* --------------------------------------------------------------- results ---- */

/* 0 when the meta run's result is a tensor or a tuple or list of 1..SJ_MAX_OUTS tensors,
 * none of them an argument or a view: outs and *nout filled, *seq the var kind of the
 * result (VK_TENSOR, VK_TUPLE or VK_LIST). 1 when it is something else (*why set), -1 with an exception. */
static int read_results(PyObject *out, PyObject *standins, TensorMeta *outs, int32_t *nout, VarKind *seq,
                        const char **why)
{
    int is_seq = PyTuple_Check(out) || PyList_Check(out);
    *seq = PyList_Check(out) ? VK_LIST : is_seq ? VK_TUPLE : VK_TENSOR;
    Py_ssize_t n = is_seq ? PySequence_Fast_GET_SIZE(out) : 1;
    if (n < 1 || n > SJ_MAX_OUTS) {
        *why = n < 1 ? "returns no tensor" : "returns more tensors than a graph node holds";
        return 1;
    }
    *nout = (int32_t)n;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = is_seq ? PySequence_Fast_GET_ITEM(out, i) : out;
        int r = cap_meta_of_standin(t, &outs[i]);
        if (r) {
            *why = "returns something other than tensors";
            return r;
        }
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(standins); k++)
            if (PyTuple_GET_ITEM(standins, k) == t) {
                *why = "returns its argument";
                return 1;
            }
        PyObject *view = PyObject_CallMethod(t, "_is_view", NULL);
        if (!view)
            return -1;
        int is_view = view == Py_True;
        Py_DECREF(view);
        if (is_view) {
            *why = "returns a view";
            return 1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ call ---- */

static Var *refuse(Capture *c, PyObject *fn, const char *why)
{
    cap_fail(c, BR_UNSUPPORTED_CALL, "torch.ops.%S: %s", fn, why);
    return NULL;
}

Var *library_op_call(Capture *c, PyObject *fn, Var **args, int32_t nargs, PyObject *kwnames)
{
    int32_t nkw = kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0;
    int32_t npos = nargs - nkw;
    PyObject *standins = PyTuple_New(nargs);
    if (!standins)
        return fail_internal(c);
    for (int32_t i = 0; i < nargs; i++) {
        const char *why = NULL;
        PyObject *s = standin_of(c, args[i], &why, 0);
        if (!s) {
            Py_DECREF(standins);
            if (why)
                return refuse(c, fn, why);
            return fail_internal(c);
        }
        PyTuple_SET_ITEM(standins, i, s);
    }
    PyObject *const *sv = &PyTuple_GET_ITEM(standins, 0);
    /* arguments no overload takes raise here as the call itself would: the break lets
     * eager raise it */
    PyObject *op = resolve(fn, sv, npos, kwnames);
    if (!op) {
        Py_DECREF(standins);
        cap_fail_exc(c, BR_UNSUPPORTED_CALL);
        return NULL;
    }
    PyObject *what = NULL;
    int aliases = schema_aliases(op, &what);
    if (aliases) {
        Py_DECREF(standins);
        if (aliases > 0) {
            cap_fail(c, BR_UNSUPPORTED_CALL, "torch.ops.%S %U (the graph would not see the write or the alias)", op,
                     what);
            Py_DECREF(what);
        } else {
            cap_fail_exc(c, BR_INTERNAL);
        }
        Py_DECREF(op);
        return NULL;
    }
    PyObject *out = cap_standin_call(c, op, sv, npos, kwnames);
    if (!out) {
        /* no meta kernel or fake implementation, or arguments the operator refuses */
        Py_DECREF(standins);
        Py_DECREF(op);
        cap_fail_exc(c, BR_UNSUPPORTED_CALL);
        return NULL;
    }
    TensorMeta outs[SJ_MAX_OUTS];
    int32_t nout = 0;
    VarKind seq;
    const char *why = NULL;
    int bad = read_results(out, standins, outs, &nout, &seq, &why);
    Py_DECREF(out);
    Py_DECREF(standins);
    if (bad) {
        if (bad > 0)
            refuse(c, op, why);
        else
            cap_fail_exc(c, BR_INTERNAL);
        Py_DECREF(op);
        return NULL;
    }
    if (!cap_keep_steal(c, op))
        return fail_internal(c);
    /* the node: op(*args, **kwargs), an eager step */
    return cap_opaque_node(c, OP_LIBRARY_OP, op, args, nargs, kwnames, outs, nout, seq);
}
