/* Operators and recorded library calls: where vars meet the graph. */
#include "capture.h"
#include "../vocab/libs.h"
#include "../core/config.h"
#include "../shapes/rules.h"
#include "sj_opcodes.h"
#include "../core/errors.h"

/* ------------------------------------------------------- argument lowering ---- */

/* The hint of a symbolic int as a Python int the capture keeps alive (borrowed). */
static PyObject *hint_obj(Capture *c, SymNode *e, const char *specialize)
{
    int64_t h;
    if (!specialize && sym_has_unbacked(e))
        h = SJ_UNBACKED_HINT;   /* a symbolic rule reads the symbol, not this stand-in */
    else if ((specialize ? symb_specialize(c, e, &h, specialize) : sym_eval_hint(c->env, e, &h)) < 0) {
        cap_fail_exc(c, BR_DATA_DEPENDENT);
        return NULL;
    }
    PyObject *o = cap_keep_steal(c, PyLong_FromLongLong(h));
    if (!o)
        cap_fail_exc(c, BR_INTERNAL);
    return o;
}

/* A slice with a symbolic int among its parts (x[:n], x[s0 // 2:]). */
static int slice_symbolic(const Var *v)
{
    return v->kind == VK_SLICE && ((v->u.slice.start && v->u.slice.start->kind == VK_SYMINT) ||
                                   (v->u.slice.stop && v->u.slice.stop->kind == VK_SYMINT) ||
                                   (v->u.slice.step && v->u.slice.step->kind == VK_SYMINT));
}

/* A symbolic slice for a rule that handles symbols: the slice of the parts' hints, and
 * their symbols in out->slice_sym (getitem's rule computes the slice length from them). */
static int bound_slice(Capture *c, Var *v, BoundArg *out)
{
    Var *parts[3] = {v->u.slice.start, v->u.slice.stop, v->u.slice.step};
    SymNode **syms = cap_alloc(c, sizeof(SymNode *) * 3);
    PyObject *objs[3] = {NULL, NULL, NULL};   /* new references */
    if (!syms)
        return -1;
    int ok = 1;
    for (int k = 0; k < 3 && ok; k++) {
        if (parts[k] && parts[k]->kind == VK_SYMINT) {
            syms[k] = parts[k]->u.s.e;
            objs[k] = Py_XNewRef(hint_obj(c, syms[k], NULL));   /* hint_obj's is the capture's */
        } else {
            objs[k] = parts[k] ? var_to_py(c, parts[k]) : Py_NewRef(Py_None);
        }
        ok = objs[k] != NULL;
    }
    PyObject *sl = ok ? PySlice_New(objs[0], objs[1], objs[2]) : NULL;   /* new */
    for (int k = 0; k < 3; k++)
        Py_XDECREF(objs[k]);
    if (!sl || !cap_keep_steal(c, sl))
        return cap_failed(c) ? -1 : cap_fail_exc(c, BR_UNSUPPORTED_VALUE);
    out->kind = BA_CONST;
    out->value = sl;
    out->slice_sym = syms;
    return 0;
}

/* Var -> BoundArg for the shape rules. Lists/tuples made only of constants become one
 * constant; those holding tensors become BA_LIST. With specialize (the reason, logged),
 * symbolic sizes and ints are pinned to their hints (guarded) for a rule that only handles
 * static shapes. */
static int to_bound(Capture *c, Var *v, BoundArg *out, const char *specialize)
{
    memset(out, 0, sizeof *out);
    if (!v) {
        out->kind = BA_CONST;
        out->value = Py_None;
        return 0;
    }
    switch (v->kind) {
    case VK_TENSOR: {
        out->kind = BA_TENSOR;
        out->meta = &v->u.t.meta;
        int sym = 0;
        for (int i = 0; i < v->u.t.meta.ndim; i++)
            sym |= v->u.t.meta.sym[i] != NULL;
        if (specialize && sym) {
            TensorMeta *m = cap_alloc(c, sizeof *m);
            if (!m)
                return -1;
            *m = v->u.t.meta;
            for (int i = 0; i < m->ndim; i++) {
                int64_t h;
                if (m->sym[i] && symb_specialize(c, m->sym[i], &h, specialize) < 0)
                    return cap_fail_exc(c, BR_INTERNAL);
                m->sym[i] = NULL;
            }
            out->meta = m;
        }
        return 0;
    }
    case VK_GSCALAR:
        out->kind = BA_CONST;
        out->data = 1;
        out->value = gscalar_standin(c, v);
        return out->value ? 0 : -1;
    case VK_SYMINT:
        if (sym_is_bool(v->u.s.e))
            return cap_fail(c, BR_DATA_DEPENDENT, "a condition on data-dependent sizes passed to an op");
        out->kind = BA_CONST;
        out->sym = specialize ? NULL : v->u.s.e;
        out->value = hint_obj(c, v->u.s.e, specialize);
        return out->value ? 0 : -1;
    case VK_CONST:
        out->kind = BA_CONST;
        out->value = v->obj;
        return 0;
    case VK_TUPLE:
    case VK_LIST:
    case VK_DICT:
    case VK_SLICE: {
        if (v->kind == VK_SLICE) {
            /* x[a[i]:a[i + 1]]: the bound's __index__ reads array data into Python, as
             * .item() does (torch.compile breaks there too) */
            Var *parts[3] = {v->u.slice.start, v->u.slice.stop, v->u.slice.step};
            for (int k = 0; k < 3; k++)
                if (parts[k] && parts[k]->kind == VK_TENSOR)
                    return cap_fail(c, BR_SCALAR_OUTPUT, "%s element used as a slice bound is read "
                                    "into Python (its __index__)",
                                    parts[k]->u.t.meta.lib == LIB_NUMPY ? "an ndarray" : "a tensor");
        }
        if (!specialize && slice_symbolic(v))
            return bound_slice(c, v, out);
        int has_tensor = (v->kind == VK_TUPLE || v->kind == VK_LIST) && !var_deep_const(v);
        if (has_tensor && specialize && (v->kind == VK_TUPLE || v->kind == VK_LIST)) {
            /* only symbolic ints among constants: specialise them into one constant */
            int only_ints = 1;
            for (int32_t i = 0; i < v->u.seq.n; i++)
                only_ints &= v->u.seq.items[i] && (v->u.seq.items[i]->kind == VK_CONST ||
                                                   v->u.seq.items[i]->kind == VK_SYMINT);
            has_tensor = !only_ints;
        }
        if (!has_tensor) {
            PyObject *py = var_to_py(c, v);
            if (!py || !cap_keep_steal(c, py))
                return cap_fail_exc(c, BR_UNSUPPORTED_VALUE);
            out->kind = BA_CONST;
            out->value = py;
            return 0;
        }
        BoundArg *items = cap_alloc(c, sizeof(BoundArg) * (size_t)(v->u.seq.n + 1));
        if (!items)
            return -1;
        for (int32_t i = 0; i < v->u.seq.n; i++)
            if (to_bound(c, v->u.seq.items[i], &items[i], specialize) < 0)
                return -1;
        out->kind = BA_LIST;
        out->n = v->u.seq.n;
        out->items = items;
        return 0;
    }
    case VK_CALLABLE:
    case VK_PYMODULE:
        out->kind = BA_CONST;   /* e.g. a dtype given as np.float32 */
        out->value = v->obj;
        return 0;
    default:
        return cap_fail(c, BR_UNSUPPORTED_VALUE, "%s passed to a tensor op", var_a(c, v));
    }
}

static int to_arg(Capture *c, Var *v, int32_t slot);

/* slice(start, stop, step) built at run time from symbolic parts: its value id. */
static int32_t slice_node(Capture *c, Var *v)
{
    Var *parts[3] = {v->u.slice.start, v->u.slice.stop, v->u.slice.step};
    int32_t first = graph_pool(c->g, 3);
    if (first < 0)
        return -1;
    for (int k = 0; k < 3; k++)
        if (to_arg(c, parts[k], first + k) < 0)
            return -1;
    return cap_scalar_node(c, OP_SYM_SLICE, (PyObject *)&PySlice_Type, first, 3);
}

int32_t cap_scalar_node(Capture *c, OpId op, PyObject *target, int32_t first, int32_t n)
{
    TensorMeta m;
    memset(&m, 0, sizeof m);
    m.symint = 1;   /* not a tensor: the meta check skips it */
    m.dtype = DT_I64;   /* printed as a Python scalar (meta_format): not a float or bool */
    PyObject *where = cap_where(c);   /* new or NULL */
    if (!where)
        sj_err_clear();
    int32_t r = graph_add_node(c->g, op, 0, target, first, n, first + n, 0, NULL, &m, 1, where);
    Py_XDECREF(where);
    return r;
}

/* Var -> graph Arg (pool slot already reserved at *slot). */
static int to_arg(Capture *c, Var *v, int32_t slot)
{
    Graph *g = c->g;
    Arg a = {0, 0, 0};
    if (!v) {
        a.kind = ARG_CONST;
        if ((a.a = graph_const(g, Py_None)) < 0)
            return -1;
    } else if (v->kind == VK_TENSOR) {
        a.kind = ARG_VALUE;
        a.a = v->u.t.value;
    } else if (v->kind == VK_SYMINT) {
        a.kind = ARG_VALUE;
        if ((a.a = symb_materialize(c, v->u.s.e)) < 0)
            return -1;
    } else if (v->kind == VK_GSCALAR) {
        a.kind = ARG_VALUE;   /* the Python float/bool the graph computes */
        a.a = v->u.gs.value;
    } else if (slice_symbolic(v)) {
        a.kind = ARG_VALUE;
        if ((a.a = slice_node(c, v)) < 0)
            return -1;
    } else if ((v->kind == VK_TUPLE || v->kind == VK_LIST)) {
        if (!var_deep_const(v)) {
            int32_t first = graph_pool(g, v->u.seq.n);
            if (first < 0)
                return -1;
            for (int32_t i = 0; i < v->u.seq.n; i++)
                if (to_arg(c, v->u.seq.items[i], first + i) < 0)
                    return -1;
            a.kind = v->kind == VK_LIST ? ARG_LIST : ARG_TUPLE;
            a.a = first;
            a.n = v->u.seq.n;
        } else {
            PyObject *py = var_to_py(c, v);
            if (!py)
                return -1;
            a.kind = ARG_CONST;
            a.a = graph_const(g, py);
            Py_DECREF(py);
            if (a.a < 0)
                return -1;
        }
    } else {
        PyObject *py = var_to_py(c, v);
        if (!py)
            return cap_fail_exc(c, BR_UNSUPPORTED_VALUE);
        a.kind = ARG_CONST;
        a.a = graph_const(g, py);
        Py_DECREF(py);
        if (a.a < 0)
            return -1;
    }
    g->pool[slot] = a;
    return 0;
}

Var **cap_node_outputs(Capture *c, int32_t v, const TensorMeta *outs, int nout)
{
    Var **items = cap_alloc(c, sizeof(Var *) * (size_t)(nout > 0 ? nout : 1));
    for (int i = 0; items && i < nout; i++) {
        if (!(items[i] = var_new(c, VK_TENSOR)))
            return NULL;
        items[i]->u.t.value = v + i;
        items[i]->u.t.meta = outs[i];
    }
    return items;
}

int cap_to_arg(Capture *c, Var *v, int32_t slot)
{
    return to_arg(c, v, slot);
}

static Lib lib_of_args(Var **args, int32_t n, int *found)
{
    for (int32_t i = 0; i < n; i++) {
        Var *v = args[i];
        if (!v)
            continue;
        if (v->kind == VK_TENSOR) {
            *found = 1;
            return (Lib)v->u.t.meta.lib;
        }
        if (v->kind == VK_TUPLE || v->kind == VK_LIST) {
            Lib l = lib_of_args(v->u.seq.items, v->u.seq.n, found);
            if (*found)
                return l;
        }
    }
    *found = 0;
    return LIB_TORCH;
}

static int check_one_lib(Capture *c, Var **args, int32_t n, Lib lib)
{
    for (int32_t i = 0; i < n; i++) {
        Var *v = args[i];
        if (!v)
            continue;
        if (v->kind == VK_TENSOR && v->u.t.meta.lib != lib)
            return cap_fail(c, BR_UNSUPPORTED_VALUE, "an op mixes torch tensors and numpy arrays");
        if ((v->kind == VK_TUPLE || v->kind == VK_LIST) && check_one_lib(c, v->u.seq.items, v->u.seq.n, lib) < 0)
            return -1;
    }
    return 0;
}

/* The op a row records for this call when its arguments pick a different mechanism than the
 * row's own op: x[mask] (a bool mask index has a data-dependent result length) and numpy's
 * one-argument where(cond), which is nonzero(cond). The node keeps the row's target, which
 * computes the same thing at run time. */
static OpId mech_op(const CallableRow *r, Lib lib, Var **args, int32_t nargs, PyObject *kwnames)
{
    if (r->op == OP_GETITEM && nargs == 2 && !kwnames && args[1] && args[1]->kind == VK_TENSOR &&
        args[1]->u.t.meta.dtype == DT_BOOL && args[1]->u.t.meta.ndim > 0 && !args[1]->u.t.meta.np_scalar)
        return OP_MASK_INDEX;
    if (r->op == OP_WHERE && lib == LIB_NUMPY && nargs == 1 && !kwnames)
        return OP_NONZERO;
    /* np.asarray(t) of a torch tensor is t.numpy() (the tensor's __array__): the same memory */
    if (r->op == OP_TENSOR && r->kind == CK_NUMPY && lib == LIB_TORCH && nargs == 1 && !kwnames && args[0] &&
        args[0]->kind == VK_TENSOR && !args[0]->u.t.meta.symint && !strcmp(r->path, "numpy.asarray"))
        return OP_TO_NUMPY;
    return r->op;
}

/* numpy's ufuncs called on torch tensors (np.sin(t)) return a torch tensor (torch's
 * __array_wrap__), computed by numpy in numpy's dtype (numpy's other functions call the
 * tensor's methods with numpy's keywords first: not these). A pointwise ufunc row is
 * recorded as a torch op when that dtype is the one torch gives: every tensor is float32 or float64, all of
 * one dtype, not tracked by autograd (eager raises for those), and the other arguments are
 * Python numbers; the result must keep that dtype (comparisons give uint8 tensors there).
 * *dt is the tensors' dtype. */
static int numpy_on_torch(const CallableRow *r, PyObject *target, OpId op, Var **args, int32_t nargs,
                          PyObject *kwnames, DType *dt)
{
    if (r->kind != CK_NUMPY || op_info[op].kind != OPK_POINTWISE || kwnames ||
        strcmp(Py_TYPE(target)->tp_name, "numpy.ufunc") != 0)
        return 0;
    int n = 0;
    for (int32_t i = 0; i < nargs; i++) {
        const Var *v = args[i];
        if (v && v->kind == VK_TENSOR) {
            const TensorMeta *m = &v->u.t.meta;
            if ((m->dtype != DT_F32 && m->dtype != DT_F64) || m->requires_grad || (n && m->dtype != *dt))
                return 0;
            *dt = (DType)m->dtype;
            n++;
        } else if (!v || v->kind != VK_CONST || PyBool_Check(v->obj) ||
                   !(PyLong_CheckExact(v->obj) || PyFloat_CheckExact(v->obj))) {
            return 0;
        }
    }
    return n > 0;
}

/* Give tuple var tup numpy's named result type "module:qualname" (numpy.linalg's
 * SlogdetResult): the frame's result is then built as that namedtuple. 0 or -1 (failure
 * recorded). */
static int np_result_subtype(Capture *c, Var *tup, const char *named)
{
    const char *colon = strchr(named, ':');
    PyObject *modname = PyUnicode_FromStringAndSize(named, colon - named);   /* new */
    PyObject *mod = modname ? PyImport_GetModule(modname) : NULL;            /* new */
    PyObject *t = mod ? PyObject_GetAttrString(mod, colon + 1) : NULL;       /* new */
    Py_XDECREF(modname);
    Py_XDECREF(mod);
    if (!t || !PyType_Check(t) || !PyType_IsSubtype((PyTypeObject *)t, &PyTuple_Type)) {
        Py_XDECREF(t);
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_RuntimeError, "numpy result type %s is not a tuple type", named);
        cap_fail_exc(c, BR_INTERNAL);
        return -1;
    }
    int ok = cap_keep(c, t) != NULL;
    if (ok)
        tup->u.seq.subtype = (PyTypeObject *)t;
    Py_DECREF(t);
    if (!ok) {
        cap_fail_exc(c, BR_INTERNAL);
        return -1;
    }
    return 0;
}

/* The core: record one call of a table row. */
/* Whether a cast to the input's own dtype gives the input object itself: 1 with no
 * copy=True (by keyword, or a True among Tensor.to's positional bools) and no
 * memory_format but preserve_format; 0 (a new tensor) with copy=True; -1 when it depends
 * on the input's layout, which the capture does not know (memory_format=contiguous_format
 * or channels_last: eager returns the input when it already has that layout). */
static int cast_returns_input(const BoundArgs *b)
{
    const BoundArg *a;
    if ((a = ba_get(b, "copy")) && !(a->kind == BA_CONST && (a->value == Py_False || a->value == Py_None)))
        return 0;
    if ((a = ba_get(b, "memory_format")) && !(a->kind == BA_CONST && a->value == Py_None)) {
        PyObject *keep = PyObject_GetAttrString(libs.torch, "preserve_format");   /* new */
        int same = keep && a->kind == BA_CONST && a->value == keep;
        Py_XDECREF(keep);
        sj_err_clear();
        if (!same)
            return -1;
    }
    if ((a = ba_get(b, "args"))) {
        if (a->kind != BA_LIST)
            return 0;
        for (int i = 0; i < a->n; i++)
            if (a->items[i].kind == BA_CONST && a->items[i].value == Py_True)
                return 0;
    }
    return 1;
}

static Var *record(Capture *c, int row, PyObject *target, Var **args, int32_t nargs, PyObject *kwnames)
{
    const CallableRow *r = &callable_rows[row];
    int32_t nkw = kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0;
    int32_t npos = nargs - nkw;
    int found;
    Lib lib = lib_of_args(args, nargs, &found);
    if (!found && r->kind == CK_NUMPY && op_info[r->op].kind != OPK_FACTORY) {
        /* numpy math on numpy scalars known only at run time (np.exp(-alpha) of an
         * np.float64 argument): numpy sees each as a 0-d value of its dtype, and so does
         * the rule */
        Var **conv = cap_alloc(c, sizeof(Var *) * (size_t)(nargs + 1));   /* the caller's
                                                                              array stays */
        if (!conv)
            return NULL;
        int any = 0;
        for (int32_t i = 0; i < nargs; i++) {
            if (!(conv[i] = gscalar_as_np_value(c, args[i])))
                return NULL;
            any |= conv[i] != args[i];
        }
        if (any) {
            args = conv;
            lib = lib_of_args(args, nargs, &found);
        }
    }
    if (!found)
        lib = (r->kind == CK_NUMPY || r->kind == CK_NDARRAY_METHOD) ? LIB_NUMPY : LIB_TORCH;
    if (check_one_lib(c, args, nargs, lib) < 0)
        return NULL;
    OpId op = mech_op(r, lib, args, nargs, kwnames);
    if (op == OP_TO_NUMPY && nargs >= 1 && args[0] && args[0]->kind == VK_TENSOR &&
        args[0]->u.t.meta.requires_grad && c->grad_mode) {
        /* eager raises while grad mode is on (under no_grad it gives the array) */
        cap_fail(c, BR_UNSUPPORTED_CALL, "Tensor.numpy() of a tensor that requires grad raises");
        return NULL;
    }
    if (!found && (r->kind == CK_NUMPY || r->kind == CK_NDARRAY_METHOD) &&
        op_info[op].kind != OPK_FACTORY && var_all_const(args, nargs)) {
        /* numpy math on Python constants (np.sqrt(2.0)) folds to a numpy scalar */
        return cap_fold_call(c, target, args, nargs, kwnames);
    }
    DType np_torch_dt = DT_F32;
    int np_on_torch = lib == LIB_TORCH && numpy_on_torch(r, target, op, args, nargs, kwnames, &np_torch_dt);
    /* torch.from_numpy is the torch call that takes numpy values, np.asarray recorded as
     * to_numpy the numpy call that takes a torch tensor (their rules check them) */
    if ((lib == LIB_NUMPY && (r->kind == CK_TORCH || r->kind == CK_TENSOR_METHOD) && op != OP_FROM_NUMPY) ||
        (lib == LIB_TORCH && (r->kind == CK_NUMPY || r->kind == CK_NDARRAY_METHOD) && !np_on_torch &&
         op != OP_TO_NUMPY)) {
        cap_fail(c, BR_UNSUPPORTED_CALL, "%s called on %s values", r->path, lib == LIB_NUMPY ? "numpy" : "torch");
        return NULL;
    }
    if (op_info[op].kind == OPK_DATA_SHAPE && !sj_config.capture_dynamic_output_shape_ops) {
        cap_fail(c, BR_DYNAMIC_OUTPUT, "%s; to capture it, set shapejit.config.capture_dynamic_output_shape_ops "
                 "= True", r->path);
        return NULL;
    }
    /* bind for the rule */
    BoundArg *pos = cap_alloc(c, sizeof(BoundArg) * (size_t)(nargs + 1));
    const char **kwn = cap_alloc(c, sizeof(char *) * (size_t)(nkw + 1));
    if (!pos || !kwn)
        return NULL;
    for (int32_t i = 0; i < nargs; i++)
        if (to_bound(c, args[i], &pos[i], NULL) < 0)
            return NULL;
    for (int32_t i = 0; i < nkw; i++)
        if (!(kwn[i] = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, i))))
            return NULL;
    /* numpy's out=array: the op writes its result into that array and returns it; the rule
     * sees the call without it */
    Var *out_var = NULL;
    int32_t nkw_bind = nkw;
    for (int32_t k = 0; k < nkw; k++)
        if (!strcmp(kwn[k], "out") && lib == LIB_NUMPY && args[npos + k] && args[npos + k]->kind == VK_TENSOR &&
            !args[npos + k]->u.t.meta.np_scalar) {
            out_var = args[npos + k];
            for (int32_t j = k; j + 1 < nkw; j++) {   /* drop it from what the binder sees */
                kwn[j] = kwn[j + 1];
                pos[npos + j] = pos[npos + j + 1];
            }
            nkw_bind--;
            break;
        }
    BoundArgs bound;
    ShapeErr err;
    err.msg[0] = 0;
    if (bind_args(r->schema, pos, npos, kwn, pos + npos, nkw_bind, &bound, &err) < 0) {
        cap_fail(c, BR_SHAPE_RULE, "%s: %s", r->path, err.msg);
        return NULL;
    }
    TensorMeta outs[SJ_MAX_OUTS];
    int nout = SJ_MAX_OUTS;
    sj_symctx = c->env ? &c->rctx : NULL;
    int ir = shapes_infer(op, lib, &bound, outs, &nout, &err);
    sj_symctx = NULL;
    for (int round = 0; ir != 0 && round < 2; round++) {
        /* a dynamic float or numpy scalar the rule needs as a number (its stand-in is data
         * to the rules) is specialised; for a rule for static shapes only, the symbols its
         * arguments use are pinned. Then bind again (the args keep their positions; out=
         * was dropped above the same way) */
        char why[160];
        snprintf(why, sizeof why, "the shape rule of %s needs its value", r->path);
        int pinned = gscalar_pin_hinted(c, args, nargs, why);
        if (pinned < 0)
            return NULL;
        if (ir != 1 && pinned == 0)
            break;
        snprintf(why, sizeof why, "%s has a shape rule for static sizes only", r->path);
        const char *spec = ir == 1 ? why : NULL;
        for (int32_t i = 0; i < nargs; i++)
            if (to_bound(c, args[i], &pos[i], spec) < 0)
                return NULL;
        if (out_var)
            for (int32_t k = 0, j = 0; k < nkw; k++) {
                if (args[npos + k] == out_var)
                    continue;
                if (to_bound(c, args[npos + k], &pos[npos + j++], spec) < 0)
                    return NULL;
            }
        if (bind_args(r->schema, pos, npos, kwn, pos + npos, nkw_bind, &bound, &err) < 0) {
            cap_fail(c, BR_SHAPE_RULE, "%s: %s", r->path, err.msg);
            return NULL;
        }
        nout = SJ_MAX_OUTS;
        sj_symctx = spec ? NULL : (c->env ? &c->rctx : NULL);
        ir = shapes_infer(op, lib, &bound, outs, &nout, &err);
        sj_symctx = NULL;
    }
    if (ir != 0) {
        if (PyErr_Occurred())
            sj_err_clear();
        cap_fail(c, BR_SHAPE_RULE, "%s: %s", r->path, err.msg);
        return NULL;
    }
    if (np_on_torch && (nout != 1 || outs[0].dtype != np_torch_dt)) {
        cap_fail(c, BR_UNSUPPORTED_CALL, "%s called on torch values gives a dtype torch would not", r->path);
        return NULL;
    }
    /* inplace=True keywords (F.relu(x, inplace=True)) make a functional row in-place */
    int inplace_kw = 0;
    const BoundArg *ipa = ba_get(&bound, "inplace");
    if (ipa && ipa->kind == BA_CONST && ipa->value == Py_True)
        inplace_kw = 1;
    for (int i = 0; i < nout; i++) {
        if (outs[i].lib == LIB_TORCH)
            c->used_torch = 1;
        if (!c->grad_mode)
            outs[i].requires_grad = 0;   /* the rules assume grad mode is on */
    }
    /* Tensor.to / .type / .type_as / .float and friends to the dtype the tensor already has
     * return the tensor itself in eager (`y is x`; writes through y reach x): no node, the
     * result is the input's own var, and no step runs */
    if (op == OP_CAST && r->kind == CK_TENSOR_METHOD && lib == LIB_TORCH && nout == 1 && nargs > 0 && args[0] &&
        args[0]->kind == VK_TENSOR && outs[0].dtype == args[0]->u.t.meta.dtype) {
        int same = cast_returns_input(&bound);
        if (same > 0)
            return args[0];
        if (same < 0) {
            cap_fail(c, BR_UNSUPPORTED_CALL, "%s with a memory_format to the tensor's own dtype: whether it returns "
                     "the tensor itself depends on its layout", r->path);
            return NULL;
        }
    }
    /* lower the arguments */
    int32_t first = graph_pool(c->g, nargs > 0 ? nargs : 1);
    if (first < 0)
        return NULL;
    for (int32_t i = 0; i < nargs; i++)
        if (to_arg(c, args[i], first + i) < 0)
            return NULL;
    PyObject *where = cap_where(c);
    if (!where)
        return NULL;
    int flags = ((r->flags & (CF_INPLACE | CF_RETURNS_NONE)) || inplace_kw) ? NODE_INPLACE : 0;
    Var *target_var = out_var ? out_var : (flags && nargs > 0 && args[0] && args[0]->kind == VK_TENSOR) ? args[0] : NULL;
    if (target_var && target_var->u.t.meta.np_scalar && !out_var) {
        flags = 0;   /* numpy scalars are immutable: `s += 1` rebinds s */
        target_var = NULL;
    }
    if (target_var) {
        TensorMeta res;
        if (nout < 1 || shapes_inplace(lib, &target_var->u.t.meta, &outs[0], &res, &err) < 0) {
            cap_fail(c, BR_SHAPE_RULE, "%s: %s", r->path, nout < 1 ? "no result to write" : err.msg);
            return NULL;
        }
        outs[0] = res;
        if (out_var && graph_value_may_alias_input(c->g, out_var->u.t.value))
            c->g->has_mutation = 1;
    }
    int32_t v = graph_add_node(c->g, op, flags, target, first, npos, first + npos, nkw, kwnames,
                               outs, nout, where);
    Py_DECREF(where);
    if (v < 0)
        return NULL;
    c->nops++;
    if (op_info[op].kind == OPK_DATA_SHAPE) {
        /* the dims the rule left at SJ_UNBACKED_HINT are data (nonzero's rows, bincount's
         * length): an unbacked symbol each, read from the result at run time; numpy.nonzero's
         * index arrays, and np.unique's values, indices and counts, all have the one count */
        SymNode *shared = NULL;
        for (int i = 0; i < nout; i++)
            for (int d = 0; d < outs[i].ndim; d++) {
                if (outs[i].size[d] != SJ_UNBACKED_HINT || outs[i].sym[d])
                    continue;
                SymNode *u = op == OP_NONZERO || op == OP_UNIQUE ? shared : NULL;
                if (!u) {
                    int64_t lo, hi;
                    shapes_data_dim_range(op, &bound, i, d, &lo, &hi);
                    u = symb_unbacked(c, -1, v + i, d, (SymRange){lo, hi < 0 ? SYM_INT_OO : hi});
                    if (!u) {
                        cap_fail_exc(c, BR_INTERNAL);
                        return NULL;
                    }
                    shared = u;
                }
                outs[i].sym[d] = c->g->values[v + i].meta.sym[d] = u;
            }
    }
    if (op == OP_SET_GRAD_ENABLED && c->g->grad_query < 0) {
        PyObject *q = PyObject_GetAttrString(libs.torch, "is_grad_enabled");
        if (!q)
            return NULL;
        c->g->grad_query = graph_const(c->g, q);
        Py_DECREF(q);
        if (c->g->grad_query < 0)
            return NULL;
    }
    /* results */
    if (r->flags & CF_RETURNS_NONE)
        return var_const(c, Py_None);
    if (target_var)
        return target_var;   /* the same object, written in place */
    if (nout == 0)
        return var_const(c, Py_None);
    Var **items = cap_node_outputs(c, v, outs, nout);
    if (!items)
        return NULL;
    /* ops returning a plain tuple of any length, one tensor included */
    int always_tuple = op == OP_SPLIT || op == OP_CHUNK || op == OP_UNBIND || op == OP_MESHGRID ||
                       (op == OP_NONZERO && lib == LIB_NUMPY);
    if (nout == 1 && !always_tuple)
        return items[0];
    Var *tup = var_seq(c, VK_TUPLE, items, nout);
    if (tup && lib == LIB_TORCH && !always_tuple) {
        /* torch returns a named structseq (torch.return_types.max): values/indices */
        PyObject *rt = PyObject_GetAttrString(libs.torch, "return_types");
        PyObject *t = rt ? PyObject_GetAttrString(rt, op_info[op].name) : NULL;
        Py_XDECREF(rt);
        if (t && PyType_Check(t) && cap_keep(c, t))
            tup->u.seq.subtype = (PyTypeObject *)t;
        Py_XDECREF(t);
        sj_err_clear();
    }
    const char *named = tup && lib == LIB_NUMPY ? shapes_np_result_type(r->op, &bound) : NULL;
    if (named && np_result_subtype(c, tup, named) < 0)
        return NULL;
    return tup;
}

/* torch's C-bound functions and Tensor methods also take numpy's spellings of two keywords,
 * axis for dim and keepdims for keepdim (its argument parser's numpy compatibility: funnel
 * calls torch.cat(..., axis=0)); the rows spell torch's names, so such keywords are renamed
 * before binding. torch's Python functions (F.softmax) do not accept them: their keywords
 * stay as written, and binding refuses them as Python would. Returns kwnames itself, or a
 * renamed tuple the capture holds (borrowed either way); NULL with the capture failed. */
static PyObject *numpy_keywords(Capture *c, const CallableRow *r, PyObject *target, PyObject *kwnames)
{
    static const char *const spelled[][2] = {{"axis", "dim"}, {"keepdims", "keepdim"}};
    if (!kwnames || (r->kind != CK_TORCH && r->kind != CK_TENSOR_METHOD) ||
        !(PyCFunction_Check(target) || Py_TYPE(target) == &PyMethodDescr_Type))
        return kwnames;
    PyObject *renamed = NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++) {
        const char *k = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, i));
        if (!k) {
            cap_fail_exc(c, BR_INTERNAL);
            return NULL;
        }
        for (size_t j = 0; j < sizeof spelled / sizeof *spelled; j++) {
            /* a row that spells the numpy name itself (torch.concatenate's axis) keeps it */
            if (strcmp(k, spelled[j][0]) != 0 || strstr(r->schema, spelled[j][0]))
                continue;
            if (!renamed) {
                /* a new tuple (kwnames may be a code object's constant), held by the
                 * capture: cap_keep_steal takes the reference */
                Py_ssize_t n = PyTuple_GET_SIZE(kwnames);
                renamed = PyTuple_New(n);
                for (Py_ssize_t m = 0; renamed && m < n; m++)
                    PyTuple_SET_ITEM(renamed, m, Py_NewRef(PyTuple_GET_ITEM(kwnames, m)));
                if (!renamed || !cap_keep_steal(c, renamed)) {
                    cap_fail_exc(c, BR_INTERNAL);
                    return NULL;
                }
            }
            PyObject *name = PyUnicode_FromString(spelled[j][1]);
            if (!name) {
                cap_fail_exc(c, BR_INTERNAL);
                return NULL;
            }
            PyObject *old = PyTuple_GET_ITEM(renamed, i);
            PyTuple_SET_ITEM(renamed, i, name);   /* steals name; the tuple is ours alone */
            Py_DECREF(old);
        }
    }
    return renamed ? renamed : kwnames;
}

Var *op_record(Capture *c, int row, Var **args, int32_t nargs, PyObject *kwnames)
{
    PyObject *target = callables_object(row);
    if (!target) {
        cap_fail(c, BR_INTERNAL, "callable %s did not resolve", callable_rows[row].path);
        return NULL;
    }
    PyObject *names = numpy_keywords(c, &callable_rows[row], target, kwnames);
    if (kwnames && !names)
        return NULL;
    return record(c, row, target, args, nargs, names);
}

/* Record through the operator row of a given name ("operator.add"). */
static Var *record_operator(Capture *c, const char *path, Var **args, int32_t nargs)
{
    int row = callables_operator_row(path);
    if (row < 0) {
        cap_fail(c, BR_UNSUPPORTED_CALL, "%s on tensors is not supported", path);
        return NULL;
    }
    return op_record(c, row, args, nargs, NULL);
}

static Var *call_dunder(Capture *c, Var *obj, const char *name, Var **args, int n);

/* ------------------------------------------------------------ folding ---- */

static PyObject *operator_mod;   /* strong */

static Var *fold_operator(Capture *c, const char *name, Var **args, int n)
{
    if (!operator_mod && !(operator_mod = PyImport_ImportModule("operator")))
        return NULL;
    PyObject *fn = PyObject_GetAttrString(operator_mod, name);
    if (!fn)
        return NULL;
    PyObject *a[3];
    int k;
    for (k = 0; k < n; k++)
        if (!(a[k] = var_to_py(c, args[k])))
            break;
    PyObject *r = k == n ? PyObject_Vectorcall(fn, a, (size_t)n, NULL) : NULL;
    for (int i = 0; i < k; i++)
        Py_DECREF(a[i]);
    Py_DECREF(fn);
    if (!r) {
        cap_fail_exc(c, BR_USER_EXCEPTION);
        return NULL;
    }
    return var_const_steal(c, r);
}

static int is_tensor(Var *v) { return v && v->kind == VK_TENSOR; }

static int is_foldable(Var *v)
{
    return v && (v->kind == VK_CONST || v->kind == VK_SYMINT ||
                 ((v->kind == VK_TUPLE || v->kind == VK_LIST) && var_all_const(v->u.seq.items, v->u.seq.n)));
}

/* ------------------------------------------------------------ operators ---- */

static const char *const nb_names[] = {
    /* index = BINARY_OP oparg (order from the interpreter's _nb_ops) */
    [SJ_NB_ADD] = "add", [SJ_NB_AND] = "and_", [SJ_NB_FLOOR_DIVIDE] = "floordiv",
    [SJ_NB_LSHIFT] = "lshift", [SJ_NB_MATRIX_MULTIPLY] = "matmul", [SJ_NB_MULTIPLY] = "mul",
    [SJ_NB_REMAINDER] = "mod", [SJ_NB_OR] = "or_", [SJ_NB_POWER] = "pow", [SJ_NB_RSHIFT] = "rshift",
    [SJ_NB_SUBTRACT] = "sub", [SJ_NB_TRUE_DIVIDE] = "truediv", [SJ_NB_XOR] = "xor",
    [SJ_NB_INPLACE_ADD] = "iadd", [SJ_NB_INPLACE_AND] = "iand",
    [SJ_NB_INPLACE_FLOOR_DIVIDE] = "ifloordiv", [SJ_NB_INPLACE_LSHIFT] = "ilshift",
    [SJ_NB_INPLACE_MATRIX_MULTIPLY] = "imatmul", [SJ_NB_INPLACE_MULTIPLY] = "imul",
    [SJ_NB_INPLACE_REMAINDER] = "imod", [SJ_NB_INPLACE_OR] = "ior", [SJ_NB_INPLACE_POWER] = "ipow",
    [SJ_NB_INPLACE_RSHIFT] = "irshift", [SJ_NB_INPLACE_SUBTRACT] = "isub",
    [SJ_NB_INPLACE_TRUE_DIVIDE] = "itruediv", [SJ_NB_INPLACE_XOR] = "ixor",
};

/* seq * n and n * seq for a list or tuple var and an int (a symbolic one is specialised:
 * the length of the result is a Python fact); `lst *= n` repeats the list in place.
 * NULL without a failure when the operands are not such a pair. */
static Var *seq_repeat(Capture *c, int inplace, Var *a, Var *b)
{
    int seq_first = a->kind == VK_TUPLE || a->kind == VK_LIST;
    Var *seq = seq_first ? a : b, *count = seq_first ? b : a;
    if ((seq->kind != VK_TUPLE && seq->kind != VK_LIST) ||
        !((var_is_const(count) && PyLong_Check(count->obj)) || count->kind == VK_SYMINT))
        return NULL;
    PyObject *py = var_to_py(c, count);   /* new reference */
    if (!py)
        return NULL;
    long k = PyLong_AsLong(py);
    Py_DECREF(py);
    if (k == -1 && PyErr_Occurred()) {
        cap_fail_exc(c, BR_USER_EXCEPTION);   /* OverflowError, as eager's MemoryError path */
        return NULL;
    }
    int32_t n = seq->u.seq.n;
    if (k > 0 && n > 0 && k > (INT32_MAX / 4) / n) {
        cap_fail(c, BR_UNSUPPORTED_VALUE, "a %s repeated %ld times", var_kind_name(seq), k);
        return NULL;
    }
    /* the items first: seq may be the list being extended */
    Var **items = n ? cap_alloc(c, sizeof(Var *) * (size_t)n) : NULL;
    if (n && !items)
        return NULL;
    if (n)
        memcpy(items, seq->u.seq.items, sizeof(Var *) * (size_t)n);
    Var *r;
    if (inplace && seq_first && seq->kind == VK_LIST && !seq->u.seq.subtype) {
        if (seq->src >= 0 && !seq->fresh && cap_note_mutation(c, seq, "*=") < 0)
            return NULL;
        seq->u.seq.n = 0;
        r = seq;
    } else if (seq->kind == VK_LIST && seq->u.seq.subtype) {
        cap_fail(c, BR_UNSUPPORTED_VALUE, "operator * on a %s", seq->u.seq.subtype->tp_name);
        return NULL;
    } else if ((r = var_seq(c, seq->kind, NULL, 0)) && libs.size_type &&
               (PyObject *)seq->u.seq.subtype == libs.size_type) {
        r->u.seq.subtype = seq->u.seq.subtype;   /* torch.Size repeats into a Size; a
                                                    namedtuple into a plain tuple */
    }
    for (long j = 0; r && j < k; j++)
        for (int32_t i = 0; i < n; i++)
            if (var_seq_append(c, r, items[i]) < 0)
                return NULL;
    return r;
}

int op_nb_index(const char *name)
{
    for (int nb = 0; nb < SJ_NB_COUNT; nb++)
        if (nb_names[nb] && !strcmp(nb_names[nb], name))
            return nb;
    return -1;
}

static Var *seq_concat(Capture *c, Var *a, Var *b)
{
    Var *r = var_seq(c, a->kind, a->u.seq.items, a->u.seq.n);
    if (!r)
        return NULL;
    for (int32_t i = 0; i < b->u.seq.n; i++)
        if (var_seq_append(c, r, b->u.seq.items[i]) < 0)
            return NULL;
    return r;
}

Var *op_binary(Capture *c, int nb, Var *a, Var *b)
{
    if (nb < 0 || nb >= SJ_NB_COUNT) {
        cap_fail(c, BR_UNSUPPORTED_OPCODE, "BINARY_OP %d", nb);
        return NULL;
    }
    const char *name = nb_names[nb];
    if (!is_tensor(a) && !is_tensor(b)) {
        int handled;
        Var *r = collections_operator(c, nb, a, b, &handled);
        if (handled)
            return r;
    }
    if (is_tensor(a) || is_tensor(b)) {
        char path[48];
        snprintf(path, sizeof path, "operator.%s", name);
        Var *args[2] = {a, b};
        /* x += y on a tensor whose name is rebound: in-place only when the left side is a
         * tensor; on a constant left side Python falls back to the reflected binary op */
        if (name[0] == 'i' && !is_tensor(a) && strcmp(name, "imatmul") != 0) {
            snprintf(path, sizeof path, "operator.%s", name + 1);
        }
        return record_operator(c, path, args, 2);
    }
    if (a->kind == VK_GSCALAR || b->kind == VK_GSCALAR)
        return gscalar_binary(c, nb, a, b);
    if (a->kind == VK_SYMINT || b->kind == VK_SYMINT) {
        int handled;
        Var *r = symb_binary(c, nb, a, b, &handled);
        if (handled)
            return r;   /* otherwise (a float, true division, ...) the int is specialised */
    }
    if (is_foldable(a) && is_foldable(b)) {
        if (name[0] == 'i' && a->src >= 0 && PySet_CheckExact(a->obj)) {
            /* `s |= t` on a set from outside: folding would write it now, at capture */
            cap_fail(c, BR_SIDE_EFFECT, "in-place %s on a set from outside the frame", name);
            return NULL;
        }
        Var *args[2] = {a, b};
        return fold_operator(c, name, args, 2);
    }
    /* list/tuple arithmetic on vars holding graph values */
    int is_add = nb == SJ_NB_ADD || nb == SJ_NB_INPLACE_ADD;
    if (is_add && (a->kind == VK_TUPLE || a->kind == VK_LIST) && b->kind == a->kind) {
        if (nb == SJ_NB_INPLACE_ADD && a->kind == VK_LIST) {
            if (a->src >= 0 && !a->fresh && cap_note_mutation(c, a, "+=") < 0)
                return NULL;
            for (int32_t i = 0; i < b->u.seq.n; i++)
                if (var_seq_append(c, a, b->u.seq.items[i]) < 0)
                    return NULL;
            return a;
        }
        return seq_concat(c, a, b);
    }
    if (is_add && (a->kind == VK_TUPLE || a->kind == VK_LIST) && var_is_const(b) &&
        ((a->kind == VK_TUPLE && PyTuple_Check(b->obj)) || (a->kind == VK_LIST && PyList_Check(b->obj)))) {
        Var **items;
        int32_t n;
        Var *bs;
        if (op_iterate(c, b, &items, &n) < 0 || !(bs = var_seq(c, a->kind, items, n)))
            return NULL;
        return seq_concat(c, a, bs);
    }
    if (is_add && var_is_const(a) && (b->kind == VK_TUPLE || b->kind == VK_LIST) &&
        ((b->kind == VK_TUPLE && PyTuple_Check(a->obj)) || (b->kind == VK_LIST && PyList_Check(a->obj)))) {
        Var **items;
        int32_t n;
        Var *as;
        if (op_iterate(c, a, &items, &n) < 0 || !(as = var_seq(c, b->kind, items, n)))
            return NULL;
        return seq_concat(c, as, b);
    }
    if (nb == SJ_NB_MULTIPLY || nb == SJ_NB_INPLACE_MULTIPLY) {
        Var *r = seq_repeat(c, nb == SJ_NB_INPLACE_MULTIPLY, a, b);
        if (r || cap_failed(c))
            return r;
    }
    cap_fail(c, BR_UNSUPPORTED_VALUE, "operator %s on %s and %s", sj_nb_symbols[nb],
             var_a(c, a), var_a(c, b));
    return NULL;
}

/* A dict's keys view, or a set constant, as a frozenset of its keys (new reference); NULL
 * without an error when v is neither or holds a key that is not a constant. */
static PyObject *keys_as_set(Capture *c, Var *v)
{
    if (var_is_const(v) && PyAnySet_Check(v->obj))
        return PyFrozenSet_New(v->obj);
    if (v->kind != VK_DICTVIEW || v->u.dview.which != 'k')
        return NULL;
    Var *l = var_view_list(c, v);
    if (!l)
        return NULL;
    PyObject *set = PyFrozenSet_New(NULL);
    for (int32_t i = 0; set && i < l->u.seq.n; i++) {
        Var *k = l->u.seq.items[i];
        if (!var_is_const(k) || PySet_Add(set, k->obj) < 0)
            Py_CLEAR(set);
    }
    return set;
}

Var *op_compare(Capture *c, int cmp, Var *a, Var *b)
{
    static const char *const names[] = {"lt", "le", "eq", "ne", "gt", "ge"};
    if (cmp < 0 || cmp > 5) {
        cap_fail(c, BR_UNSUPPORTED_OPCODE, "COMPARE_OP %d", cmp);
        return NULL;
    }
    if (is_tensor(a) || is_tensor(b)) {
        char path[32];
        snprintf(path, sizeof path, "operator.%s", names[cmp]);
        Var *args[2] = {a, b};
        return record_operator(c, path, args, 2);
    }
    if (a->kind == VK_GSCALAR || b->kind == VK_GSCALAR)
        return gscalar_compare(c, cmp, a, b);
    {
        int handled;
        Var *r = collections_operator(c, -1 - cmp, a, b, &handled);
        if (handled)
            return r;
    }
    if (a->kind == VK_SYMINT || b->kind == VK_SYMINT) {
        int handled;
        Var *r = symb_compare(c, cmp, a, b, &handled);
        if (handled)
            return r;
    }
    if (is_foldable(a) && is_foldable(b)) {
        Var *args[2] = {a, b};
        return fold_operator(c, names[cmp], args, 2);
    }
    if (cmp == SJ_CMP_EQ || cmp == SJ_CMP_NE) {
        int handled;
        Var *r = objects_compare(c, cmp, a, b, &handled);
        if (handled)
            return r;
    }
    if ((cmp == SJ_CMP_EQ || cmp == SJ_CMP_NE) && a->obj && b->obj &&
        a->kind != VK_TUPLE && b->kind != VK_TUPLE && a->kind != VK_LIST && b->kind != VK_LIST) {
        Var *args[2] = {a, b};
        return fold_operator(c, names[cmp], args, 2);
    }
    if ((cmp == SJ_CMP_EQ || cmp == SJ_CMP_NE) && c->env && (a->kind == VK_TUPLE || a->kind == VK_LIST ||
                                                            (var_is_const(a) && PyTuple_Check(a->obj))) &&
        (b->kind == VK_TUPLE || b->kind == VK_LIST || (var_is_const(b) && PyTuple_Check(b->obj)))) {
        /* shapes with symbolic sizes: equal when every item is (decided item by item) */
        Var **ia, **ib;
        int32_t na, nb;
        if (op_iterate(c, a, &ia, &na) < 0 || op_iterate(c, b, &ib, &nb) < 0)
            return NULL;
        int eq = na == nb;
        for (int32_t i = 0; eq && i < na; i++) {
            Var *r = op_compare(c, SJ_CMP_EQ, ia[i], ib[i]);
            if (!r || op_truth(c, r, &eq) < 0)
                return NULL;
        }
        return var_const(c, (cmp == SJ_CMP_EQ) == (eq != 0) ? Py_True : Py_False);
    }
    if ((cmp == SJ_CMP_EQ || cmp == SJ_CMP_NE) && a->kind != b->kind &&
        ((var_is_const(a) && a->obj == Py_None) || (var_is_const(b) && b->obj == Py_None)))
        return var_const(c, cmp == SJ_CMP_NE ? Py_True : Py_False);
    if ((cmp == SJ_CMP_EQ || cmp == SJ_CMP_NE) && (a->kind == VK_DICTVIEW || b->kind == VK_DICTVIEW)) {
        /* keys views compare as sets of their keys (with each other and with sets) */
        PyObject *sa = keys_as_set(c, a), *sb = sa ? keys_as_set(c, b) : NULL;
        int eq = sb ? PyObject_RichCompareBool(sa, sb, Py_EQ) : -1;
        Py_XDECREF(sa);
        Py_XDECREF(sb);
        if (eq >= 0)
            return var_const(c, (eq == (cmp == SJ_CMP_EQ)) ? Py_True : Py_False);
        if (PyErr_Occurred()) {
            cap_fail_exc(c, BR_USER_EXCEPTION);
            return NULL;
        }
    }
    cap_fail(c, BR_UNSUPPORTED_VALUE, "comparison of %s and %s", var_a(c, a), var_a(c, b));
    return NULL;
}

Var *op_unary(Capture *c, int opcode, Var *a)
{
    if (a->kind == VK_GSCALAR)
        return gscalar_unary(c, opcode, a);   /* `not b` too: a graph bool, decided at run time */
    if (opcode == SJOP_UNARY_NOT) {
        int t;
        if (op_truth(c, a, &t) < 0)
            return NULL;
        return var_const(c, t ? Py_False : Py_True);
    }
    const char *name = opcode == SJOP_UNARY_NEGATIVE ? "neg" : opcode == SJOP_UNARY_POSITIVE ? "pos" : "invert";
    if (is_tensor(a)) {
        char path[32];
        snprintf(path, sizeof path, "operator.%s", name);
        return record_operator(c, path, &a, 1);
    }
    if (a->kind == VK_SYMINT && opcode == SJOP_UNARY_NEGATIVE)
        return symb_var(c, sym_neg(c->env, a->u.s.e));
    if (a->kind == VK_SYMINT && opcode == SJOP_UNARY_POSITIVE)
        return a;
    if (is_foldable(a))
        return fold_operator(c, name, &a, 1);
    cap_fail(c, BR_UNSUPPORTED_VALUE, "unary %s on %s", name, var_a(c, a));
    return NULL;
}

int op_truth(Capture *c, Var *v, int *truth)
{
    switch (v->kind) {
    case VK_CONST: {
        int t = PyObject_IsTrue(v->obj);
        if (t < 0)
            return cap_fail_exc(c, BR_USER_EXCEPTION);
        *truth = t;
        return 0;
    }
    case VK_TUPLE:
    case VK_LIST:
        *truth = v->u.seq.n > 0;
        return 0;
    case VK_DICT:
        *truth = v->u.dict.n > 0;
        return 0;
    case VK_DICTVIEW:
        *truth = v->u.dview.dict->u.dict.n > 0;
        return 0;
    case VK_SYMINT: {
        SymNode *e = v->u.s.e, *z = sym_is_bool(e) ? NULL : sym_const(c->env, 0);
        if (sym_is_bool(e) ? symb_decide(c, e, truth) < 0 : !z || symb_decide(c, sym_ne(c->env, e, z), truth) < 0)
            return cap_fail_exc(c, BR_INTERNAL);
        return 0;
    }
    case VK_GSCALAR:
        return gscalar_truth(c, v, truth);
    case VK_TENSOR:
        return cap_fail(c, BR_DATA_DEPENDENT, "branching on the value of %s (%s)", var_a(c, v),
                        v->u.t.meta.lib == LIB_TORCH ? "Tensor.__bool__" : "ndarray.__bool__");
    case VK_FUNC:
    case VK_CALLABLE:
    case VK_PYMODULE:
    case VK_METHOD:
    case VK_PARTIAL:
        *truth = 1;
        return 0;
    case VK_USEROBJ: {
        PyTypeObject *t = v->u.uobj.type;
        if ((t->tp_as_number && t->tp_as_number->nb_bool) || (t->tp_as_mapping && t->tp_as_mapping->mp_length) ||
            (t->tp_as_sequence && t->tp_as_sequence->sq_length))
            return cap_fail(c, BR_UNSUPPORTED_VALUE, "truth value of %s made during capture", sj_type_a(c, t, NULL));
        *truth = 1;
        return 0;
    }
    case VK_MODULE:
    case VK_OBJECT: {
        PyTypeObject *t = Py_TYPE(v->obj);
        int has_bool = t->tp_as_number && t->tp_as_number->nb_bool;
        int has_len = (t->tp_as_mapping && t->tp_as_mapping->mp_length) ||
                      (t->tp_as_sequence && t->tp_as_sequence->sq_length);
        if (!has_bool && !has_len) {
            *truth = 1;
            return 0;
        }
        int r = PyObject_IsTrue(v->obj);
        if (r < 0)
            return cap_fail_exc(c, BR_USER_EXCEPTION);
        *truth = r;
        return 0;
    }
    default:
        return cap_fail(c, BR_UNSUPPORTED_VALUE, "truth value of %s", var_a(c, v));
    }
}

Var *op_contains(Capture *c, Var *item, Var *container)
{
    if (is_foldable(item) && is_foldable(container)) {
        Var *args[2] = {container, item};
        return fold_operator(c, "contains", args, 2);
    }
    if (container->kind == VK_USEROBJ && container->u.uobj.record && var_is_const(item)) {
        int handled;
        return objects_record_call(c, container, "__contains__", &item, 1, &handled);
    }
    if (container->kind == VK_DICTVIEW) {
        /* keys: a dict lookup; values and items: a search of what the view holds now */
        Var *in = container->u.dview.which == 'k' ? container->u.dview.dict : var_view_list(c, container);
        return in ? op_contains(c, item, in) : NULL;
    }
    if (container->kind == VK_DICT && var_is_dict_key(item)) {
        int found;
        var_dict_get(c, container, item, &found);
        if (PyErr_Occurred()) {
            cap_fail_exc(c, BR_USER_EXCEPTION);
            return NULL;
        }
        return var_const(c, found ? Py_True : Py_False);
    }
    if ((container->kind == VK_TUPLE || container->kind == VK_LIST) && var_is_const(item)) {
        for (int32_t i = 0; i < container->u.seq.n; i++) {
            Var *e = container->u.seq.items[i];
            int number = PyLong_Check(item->obj) || PyFloat_Check(item->obj);
            if (e->kind == VK_TENSOR || e->kind == VK_GSCALAR) {
                /* `3 in [t]` asks bool(t == 3): the tensor's data (and numpy compares
                 * with anything elementwise) */
                cap_fail(c, BR_DATA_DEPENDENT, "'in' comparing a constant with a value computed in the graph");
                return NULL;
            }
            if (e->kind == VK_SYMINT && number) {
                PyObject *size = var_to_py(c, e);   /* specialised, with its guard */
                int eq = size ? PyObject_RichCompareBool(size, item->obj, Py_EQ) : -1;
                Py_XDECREF(size);
                if (eq < 0) {
                    cap_fail_exc(c, BR_INTERNAL);
                    return NULL;
                }
                if (eq)
                    return var_const(c, Py_True);
                continue;
            }
            if (!var_is_const(e))
                continue;   /* other kinds: a constant is never equal to them here */
            int eq = PyObject_RichCompareBool(e->obj, item->obj, Py_EQ);
            if (eq < 0) {
                cap_fail_exc(c, BR_USER_EXCEPTION);
                return NULL;
            }
            if (eq)
                return var_const(c, Py_True);
        }
        return var_const(c, Py_False);
    }
    if (container->kind == VK_OBJECT || (container->kind == VK_USEROBJ && !container->u.uobj.record)) {
        PyTypeObject *t = container->kind == VK_USEROBJ ? container->u.uobj.type : Py_TYPE(container->obj);
        if (!PyObject_HasAttrString((PyObject *)t, "__contains__")) {
            /* Python falls back to iterating it (or raises TypeError): not the user's error */
            cap_fail(c, BR_UNSUPPORTED_VALUE, "'in' on %s, which has no __contains__", var_a(c, container));
            return NULL;
        }
        Var *args[1] = {item};
        return call_dunder(c, container, "__contains__", args, 1);
    }
    if ((container->kind == VK_TUPLE || container->kind == VK_LIST) && item->obj) {
        for (int32_t i = 0; i < container->u.seq.n; i++)
            if (container->u.seq.items[i] == item || container->u.seq.items[i]->obj == item->obj)
                return var_const(c, Py_True);
        return var_const(c, Py_False);
    }
    cap_fail(c, BR_UNSUPPORTED_VALUE, "'in' on %s", var_a(c, container));
    return NULL;
}

/* ---------------------------------------------------------------- subscripts ---- */

/* The source of m._modules (m has a source), its keys guarded: what is read from it by
 * position (iteration, slices) depends on them. -1 when m has no source, -2 on error. */
static int32_t modules_source(Capture *c, Var *m, PyObject *mods)
{
    if (m->src < 0)
        return -1;
    int32_t msrc = guard_dict_attr_keys(c, m->src, "_modules", mods);
    return msrc < 0 ? -2 : msrc;
}

/* m[sl] of a ModuleList / Sequential is a new container every call, holding entries of m:
 * its var has no source (so no guard on the temporary's identity) and records, for each of
 * its entries, the source of the entry of m it holds (m._modules[key], or the recorded source
 * when m is itself such a temporary). NULL without a failure when fresh is not the plain
 * positional slice of m's entries (a custom __getitem__): the caller guards it as a value. */
static Var *module_slice(Capture *c, Var *m, PyObject *sl, PyObject *fresh)
{
    PyObject *mods = PyObject_GetAttrString(m->obj, "_modules");
    PyObject *fmods = mods && libs_is_module(fresh) ? PyObject_GetAttrString(fresh, "_modules") : NULL;
    sj_err_clear();
    Py_ssize_t start, stop, step, len = -1, n = mods && PyDict_Check(mods) ? PyDict_GET_SIZE(mods) : 0;
    if (fmods && PyDict_Check(fmods) && n > 0 && (m->src >= 0 || m->u.mod.kids) &&
        PySlice_Unpack(sl, &start, &stop, &step) == 0)
        len = PySlice_AdjustIndices(n, &start, &stop, step);
    sj_err_clear();
    Var *r = NULL;
    int32_t *kids = len >= 0 && len == PyDict_GET_SIZE(fmods)
                        ? cap_alloc(c, sizeof(int32_t) * (size_t)(len + 1)) : NULL;
    PyObject *keys = kids ? PyDict_Keys(mods) : NULL, *vals = keys ? PyDict_Values(mods) : NULL;
    int32_t msrc = vals ? modules_source(c, m, mods) : -2;
    Py_ssize_t pos = 0, k = 0;
    PyObject *fk, *fv;
    while (msrc > -2 && PyDict_Next(fmods, &pos, &fk, &fv)) {
        Py_ssize_t i = start + k * step;
        if (PyList_GET_ITEM(vals, i) != fv)
            break;
        kids[k] = msrc >= 0 ? sources_add(&c->src, SRC_ITEM, msrc, 0, PyList_GET_ITEM(keys, i), NULL)
                            : (i < m->u.mod.n ? m->u.mod.kids[i] : -1);
        if (msrc >= 0 && kids[k] < 0) {
            msrc = -2;
            break;
        }
        k++;
    }
    if (msrc == -2 && PyErr_Occurred())
        cap_fail_exc(c, BR_INTERNAL);
    else if (kids && k == len && (r = wrap_untracked(c, fresh)) != NULL && r->kind == VK_MODULE) {
        r->u.mod.kids = kids;
        r->u.mod.n = (int32_t)len;
    }
    Py_XDECREF(mods);
    Py_XDECREF(fmods);
    Py_XDECREF(keys);
    Py_XDECREF(vals);
    return r;
}


static Var *seq_index(Capture *c, Var *s, PyObject *key)
{
    if (PyIndex_Check(key)) {
        Py_ssize_t i = PyNumber_AsSsize_t(key, PyExc_IndexError);
        if (i == -1 && PyErr_Occurred()) {
            cap_fail_exc(c, BR_USER_EXCEPTION);
            return NULL;
        }
        if (i < 0)
            i += s->u.seq.n;
        if (i < 0 || i >= s->u.seq.n) {
            PyErr_SetString(PyExc_IndexError, "index out of range");
            cap_fail_exc(c, BR_USER_EXCEPTION);
            return NULL;
        }
        return s->u.seq.items[i];
    }
    if (PySlice_Check(key) && s->kind == VK_LIST && s->u.seq.subtype) {
        PyErr_Format(PyExc_TypeError, "sequence index must be integer, not 'slice'");
        cap_fail_exc(c, BR_USER_EXCEPTION);
        return NULL;
    }
    if (PySlice_Check(key)) {
        Py_ssize_t start, stop, step, len;
        if (PySlice_Unpack(key, &start, &stop, &step) < 0) {
            cap_fail_exc(c, BR_USER_EXCEPTION);
            return NULL;
        }
        len = PySlice_AdjustIndices(s->u.seq.n, &start, &stop, step);
        Var *r = var_seq(c, s->kind, NULL, 0);
        for (Py_ssize_t k = 0; r && k < len; k++)
            if (var_seq_append(c, r, s->u.seq.items[start + k * step]) < 0)
                return NULL;
        if (r && libs.size_type && (PyObject *)s->u.seq.subtype == libs.size_type)
            r->u.seq.subtype = s->u.seq.subtype;   /* a slice of a namedtuple is a tuple */
        return r;
    }
    cap_fail(c, BR_UNSUPPORTED_VALUE, "index of type %s", Py_TYPE(key)->tp_name);
    return NULL;
}

static Var *call_dunder(Capture *c, Var *obj, const char *name, Var **args, int n)
{
    PyObject *nm = PyUnicode_FromString(name);
    if (!nm)
        return NULL;
    Var *m = attr_load(c, obj, nm);
    Py_DECREF(nm);
    if (!m)
        return NULL;
    return call_var(c, m, args, n, NULL);
}

Var *op_subscr(Capture *c, Var *obj, Var *key)
{
    if (is_tensor(obj)) {
        Var *args[2] = {obj, key};
        return record_operator(c, "operator.getitem", args, 2);
    }
    if ((obj->kind == VK_TUPLE || obj->kind == VK_LIST) && var_is_const(key))
        return seq_index(c, obj, key->obj);
    if (obj->kind == VK_DICT && var_is_dict_key(key)) {
        int found;
        Var *v = var_dict_get(c, obj, key, &found);
        if (!found && !PyErr_Occurred() && collections_type_of(obj)) {
            int handled;
            Var *r = collections_missing(c, obj, key, &handled);
            if (handled || cap_failed(c))
                return r;
        }
        if (!found) {
            if (!PyErr_Occurred())
                PyErr_SetObject(PyExc_KeyError, key->obj);
            cap_fail_exc(c, BR_USER_EXCEPTION);
            return NULL;
        }
        return v;
    }
    if (is_foldable(obj) && is_foldable(key)) {
        Var *args[2] = {obj, key};
        return fold_operator(c, "getitem", args, 2);
    }
    if (obj->kind == VK_MODULE && var_is_const(key)) {
        /* ModuleList / Sequential / ModuleDict indexing: read the live container */
        PyObject *v = PyObject_GetItem(obj->obj, key->obj);
        if (!v) {
            cap_fail_exc(c, BR_USER_EXCEPTION);
            return NULL;
        }
        Var *r = NULL;
        if (PySlice_Check(key->obj) && (r = module_slice(c, obj, key->obj, v)) == NULL && cap_failed(c)) {
            Py_DECREF(v);
            return NULL;
        }
        if (!r) {
            int32_t s = obj->src >= 0 ? sources_add(&c->src, SRC_ITEM, obj->src, 0, key->obj, NULL)
                                      : module_kid_source(obj, NULL, v);
            r = (obj->src < 0 || s >= 0) ? wrap_value(c, v, s) : NULL;
        }
        Py_DECREF(v);
        return r;
    }
    if (obj->kind == VK_OBJECT || (obj->kind == VK_USEROBJ)) {
        Var *args[1] = {key};
        return call_dunder(c, obj, "__getitem__", args, 1);
    }
    cap_fail(c, BR_UNSUPPORTED_VALUE, "subscript of %s with %s", var_a(c, obj), var_a(c, key));
    return NULL;
}

int op_store_subscr(Capture *c, Var *obj, Var *key, Var *val)
{
    if (is_tensor(obj)) {
        Var *args[3] = {obj, key, val};
        return record_operator(c, "operator.setitem", args, 3) ? 0 : -1;
    }
    int handled;
    int rc = attr_store_item(c, obj, key, val, &handled);   /* a ModelOutput from outside */
    if (handled)
        return rc;
    if (obj->src >= 0 && !obj->fresh && cap_note_mutation(c, obj, "item assignment") < 0)
        return -1;
    if (obj->kind == VK_LIST && var_is_const(key) && PyIndex_Check(key->obj)) {
        Py_ssize_t i = PyNumber_AsSsize_t(key->obj, PyExc_IndexError);
        if (i < 0)
            i += obj->u.seq.n;
        if (i < 0 || i >= obj->u.seq.n) {
            sj_err_clear();
            PyErr_SetString(PyExc_IndexError, "list assignment index out of range");
            return cap_fail_exc(c, BR_USER_EXCEPTION);
        }
        obj->u.seq.items[i] = val;
        return 0;
    }
    if (obj->kind == VK_DICT && key->kind != VK_CONST && var_is_dict_key(key) &&
        ((obj->src >= 0 && !obj->fresh) || obj->u.dict.subtype))
        return cap_fail(c, BR_UNSUPPORTED_VALUE, "a tensor as the key of %s (%s from constant keys only)",
                        obj->u.dict.subtype ? "a collections dict" : "a dict from outside the frame",
                        obj->u.dict.subtype ? "rebuilt" : "written back");
    if (obj->kind == VK_DICT && var_is_dict_key(key))
        return var_dict_set(c, obj, key, val) < 0 ? cap_fail_exc(c, BR_UNSUPPORTED_VALUE) : 0;
    if (obj->kind == VK_LIST && !obj->u.seq.subtype && var_is_const(key) && PySlice_Check(key->obj))
        return op_list_slice_write(c, obj, key->obj, val);
    if (obj->kind == VK_DICT || obj->kind == VK_LIST)   /* the key is what is not modelled */
        return cap_fail(c, BR_UNSUPPORTED_VALUE, "item assignment on %s with %s as the %s", var_a(c, obj),
                        var_a(c, key), obj->kind == VK_DICT ? "key (keys must be constants)" : "index");
    return cap_fail(c, BR_SIDE_EFFECT, "item assignment on %s", var_a(c, obj));
}

int op_list_slice_write(Capture *c, Var *list, PyObject *slice, Var *val)
{
    Py_ssize_t start, stop, step;
    if (PySlice_Unpack(slice, &start, &stop, &step) < 0)
        return cap_fail_exc(c, BR_USER_EXCEPTION);
    int32_t n = list->u.seq.n;
    Py_ssize_t len = PySlice_AdjustIndices(n, &start, &stop, step);
    Var **items = NULL;
    int32_t m = 0;
    if (val) {
        Var **vi;
        if (op_iterate(c, val, &vi, &m) < 0)
            return -1;
        /* a copy: the value may be the list itself (m[1:] = m) */
        if (!(items = cap_alloc(c, sizeof(Var *) * (size_t)(m + 1))))
            return -1;
        if (m)
            memcpy(items, vi, sizeof(Var *) * (size_t)m);
    }
    if (step != 1) {
        if (val && m != len) {
            PyErr_Format(PyExc_ValueError, "attempt to assign sequence of size %d to extended slice of size %zd",
                         (int)m, len);
            return cap_fail_exc(c, BR_USER_EXCEPTION);
        }
        if (val) {
            for (Py_ssize_t k = 0; k < len; k++)
                list->u.seq.items[start + k * step] = items[k];
            return 0;
        }
        /* del m[::2]: keep what the slice does not name */
        int32_t w = 0;
        for (int32_t i = 0; i < n; i++) {
            Py_ssize_t off = (Py_ssize_t)i - start;
            int named = off % step == 0 && off / step >= 0 && off / step < len;
            if (!named)
                list->u.seq.items[w++] = list->u.seq.items[i];
        }
        list->u.seq.n = w;
        return 0;
    }
    if (stop < start)
        stop = start;   /* m[3:1] = [...] inserts at 3 */
    Var **rest = cap_alloc(c, sizeof(Var *) * (size_t)(n - stop + 1));
    if (!rest)
        return -1;
    if (n - stop)
        memcpy(rest, list->u.seq.items + stop, sizeof(Var *) * (size_t)(n - stop));
    list->u.seq.n = (int32_t)start;
    for (int32_t i = 0; i < m; i++)
        if (var_seq_append(c, list, items[i]) < 0)
            return -1;
    for (Py_ssize_t i = 0; i < n - stop; i++)
        if (var_seq_append(c, list, rest[i]) < 0)
            return -1;
    return 0;
}

/* ---------------------------------------------------------------- iteration ---- */

static int module_items(Capture *c, Var *m, Var ***items, int32_t *n)
{
    PyObject *mods = PyObject_GetAttrString(m->obj, "_modules");
    if (!mods || !PyDict_Check(mods)) {
        Py_XDECREF(mods);
        sj_err_clear();
        return cap_fail(c, BR_UNSUPPORTED_VALUE, "iterating over %s", sj_type_a(c, Py_TYPE(m->obj), "module"));
    }
    const char *tn = Py_TYPE(m->obj)->tp_name;
    int keys_only = strcmp(tn, "ModuleDict") == 0;
    int32_t msrc = modules_source(c, m, mods);
    if (msrc == -2) {
        Py_DECREF(mods);
        return -1;
    }
    Py_ssize_t cnt = PyDict_GET_SIZE(mods);
    *items = cap_alloc(c, sizeof(Var *) * (size_t)(cnt + 1));
    *n = 0;
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (*items && PyDict_Next(mods, &pos, &k, &v)) {
        Var *item;
        if (keys_only) {
            item = var_const(c, k);
        } else {
            if (v == Py_None)
                continue;
            int32_t s = msrc >= 0 ? sources_add(&c->src, SRC_ITEM, msrc, 0, k, NULL)
                                  : module_kid_source(m, k, NULL);
            item = (msrc < 0 || s >= 0) ? wrap_value(c, v, s) : NULL;
        }
        if (!item) {
            Py_DECREF(mods);
            return -1;
        }
        (*items)[(*n)++] = item;
    }
    Py_DECREF(mods);
    return *items ? 0 : -1;
}

int op_iterate(Capture *c, Var *v, Var ***items, int32_t *n)
{
    switch (v->kind) {
    case VK_TUPLE:
    case VK_LIST:
        *items = v->u.seq.items;
        *n = v->u.seq.n;
        return 0;
    case VK_ITER:
        return iter_drain(c, v, items, n);
    case VK_DICT:
        *items = v->u.dict.keys;
        *n = v->u.dict.n;
        return 0;
    case VK_DICTVIEW: {
        Var *l = var_view_list(c, v);   /* what the view holds now */
        if (!l)
            return -1;
        *items = l->u.seq.items;
        *n = l->u.seq.n;
        return 0;
    }
    case VK_CONST: {
        PyObject *seq = PySequence_Fast(v->obj, "not iterable");
        if (!seq)
            return cap_fail_exc(c, BR_USER_EXCEPTION);
        Py_ssize_t cnt = PySequence_Fast_GET_SIZE(seq);
        if (cnt > 100000) {
            Py_DECREF(seq);
            return cap_fail(c, BR_UNSUPPORTED_VALUE, "iterating over %zd constants", cnt);
        }
        *items = cap_alloc(c, sizeof(Var *) * (size_t)(cnt + 1));
        for (Py_ssize_t i = 0; *items && i < cnt; i++)
            if (!((*items)[i] = var_const(c, PySequence_Fast_GET_ITEM(seq, i)))) {
                Py_DECREF(seq);
                return -1;
            }
        Py_DECREF(seq);
        *n = (int32_t)cnt;
        return *items ? 0 : -1;
    }
    case VK_TENSOR: {
        if (v->u.t.meta.ndim == 0)
            return cap_fail(c, BR_USER_EXCEPTION, "iteration over a 0-d tensor");
        int64_t cnt = v->u.t.meta.size[0];
        if (v->u.t.meta.sym[0] &&
            symb_specialize(c, v->u.t.meta.sym[0], &cnt, "iterating over a tensor unrolls its first dim") < 0)
            return cap_fail_exc(c, BR_INTERNAL);   /* unrolling fixes the count */
        *items = cap_alloc(c, sizeof(Var *) * (size_t)(cnt + 1));
        for (int64_t i = 0; *items && i < cnt; i++) {
            PyObject *k = PyLong_FromLongLong(i);
            Var *kv = k ? var_const_steal(c, k) : NULL;
            if (!kv || !((*items)[i] = op_subscr(c, v, kv)))
                return -1;
        }
        *n = (int32_t)cnt;
        return *items ? 0 : -1;
    }
    case VK_MODULE:
        return module_items(c, v, items, n);
    case VK_USEROBJ:
        if (v->u.uobj.record) {   /* iterating a ModelOutput yields its keys */
            Var *a = v->u.uobj.attrs;
            *items = cap_alloc(c, sizeof(Var *) * (size_t)(a->u.dict.n + 1));
            *n = 0;
            for (int32_t i = 0; *items && i < a->u.dict.n; i++)
                if (!(a->u.dict.vals[i]->kind == VK_CONST && a->u.dict.vals[i]->obj == Py_None))
                    (*items)[(*n)++] = a->u.dict.keys[i];
            return *items ? 0 : -1;
        }
        /* a user class iterates through its own __iter__ */
        /* fall through */
    case VK_OBJECT: {
        PyTypeObject *t = v->kind == VK_USEROBJ ? v->u.uobj.type : Py_TYPE(v->obj);
        static PyObject *s_iter;
        if (!s_iter && !(s_iter = PyUnicode_InternFromString("__iter__")))
            return -1;
        PyObject *it = _PyType_Lookup(t, s_iter);   /* borrowed */
        if (!it || !PyFunction_Check(it))
            return cap_fail(c, BR_UNSUPPORTED_VALUE, "iteration over %s", sj_type_a(c, t, "object"));
        Var *r = call_dunder(c, v, "__iter__", NULL, 0);
        if (!r)
            return -1;
        return op_iterate(c, r, items, n);
    }
    default:
        return cap_fail(c, BR_UNSUPPORTED_VALUE, "iteration over %s", var_a(c, v));
    }
}

Var *op_len(Capture *c, Var *v)
{
    Py_ssize_t n;
    switch (v->kind) {
    case VK_TUPLE:
    case VK_LIST:
        n = v->u.seq.n;
        break;
    case VK_DICT:
        n = v->u.dict.n;
        break;
    case VK_TENSOR:
        if (v->u.t.meta.ndim == 0) {
            PyErr_SetString(PyExc_TypeError, "len() of a 0-d tensor");
            cap_fail_exc(c, BR_USER_EXCEPTION);
            return NULL;
        }
        if (v->u.t.meta.sym[0])
            return symb_var(c, v->u.t.meta.sym[0]);
        n = (Py_ssize_t)v->u.t.meta.size[0];
        break;
    case VK_CONST:
    case VK_MODULE:
        n = PyObject_Length(v->obj);
        if (n < 0) {
            cap_fail_exc(c, BR_USER_EXCEPTION);
            return NULL;
        }
        break;
    case VK_DICTVIEW: {
        Var *l = var_view_list(c, v);
        if (!l)
            return NULL;
        n = l->u.seq.n;
        break;
    }
    case VK_ITER:
        PyErr_SetString(PyExc_TypeError, "object of type 'iterator' has no len()");
        cap_fail_exc(c, BR_USER_EXCEPTION);
        return NULL;
    case VK_OBJECT:
        if (!(Py_TYPE(v->obj)->tp_flags & Py_TPFLAGS_HEAPTYPE)) {
            /* a builtin type (mappingproxy, range, ...): its length runs no user code;
             * read now, so guarded with the type when the object comes from outside */
            n = PyObject_Length(v->obj);
            if (n < 0) {
                cap_fail_exc(c, BR_USER_EXCEPTION);
                return NULL;
            }
            if (v->src >= 0) {
                if (guard_add_simple(c, GK_SEQ_LENGTH, v->src, (PyObject *)Py_TYPE(v->obj)) < 0)
                    return NULL;
                c->guards.g[c->guards.n - 1].len = n;
            }
            break;
        }
        return call_dunder(c, v, "__len__", NULL, 0);   /* a Python class's own __len__ */
    case VK_USEROBJ:
        if (v->u.uobj.record) {
            Var *t = objects_record_tuple(c, v);
            return t ? op_len(c, t) : NULL;
        }
        return call_dunder(c, v, "__len__", NULL, 0);
    default:
        cap_fail(c, BR_UNSUPPORTED_VALUE, "len() of %s", var_a(c, v));
        return NULL;
    }
    PyObject *r = PyLong_FromSsize_t(n);
    return r ? var_const_steal(c, r) : NULL;
}
