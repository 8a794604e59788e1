/* Recording a call of a callables.def row: choosing the library and the op the arguments
 * select, binding the arguments to the row's schema for its shape rule, and adding the
 * node with its raw arguments (for the eager replay) and its bound slots (for backends). */
#include "capture.h"
#include "../vocab/libs.h"
#include "../core/config.h"
#include "../shapes/rules.h"
#include "../core/errors.h"

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
static int numpy_on_torch(const CallableRow *r, PyObject *target, OpId op, Var **args, int32_t nargs, PyObject *kwnames,
                          DType *dt)
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

/* ------------------------------------------------------------ recording ---- */

/* A call bound to its row's schema for the shape rule, and where each bound argument came
 * from (the node's bound slots are made from it). */
typedef struct {
    BoundArg *pos;        /* arena: the positional, then the keyword arguments the binder saw */
    const char **kwn;     /* arena: the keywords' names */
    int32_t npos, nkw;    /* the call's positional and keyword argument counts */
    int32_t nkw_bind;     /* the keywords the binder saw: numpy's out=array is dropped */
    int32_t out_kw;       /* which keyword was out=array, or -1 */
    Var *out_var;         /* that array (borrowed from the call's args), or NULL */
    BoundArgs bound;
} RecBind;

/* The library the call computes in (*lib, from its tensors, or the row's kind when it has
 * none) and *args possibly replaced by numpy values for numpy scalars known at run time.
 * 0, or -1 with the failure recorded. */
static int record_lib(Capture *c, const CallableRow *r, Var ***args, int32_t nargs, Lib *lib, int *found)
{
    *lib = lib_of_args(*args, nargs, found);
    if (!*found && r->kind == CK_NUMPY && op_info[r->op].kind != OPK_FACTORY) {
        /* numpy math on numpy scalars known only at run time (np.exp(-alpha) of an
         * np.float64 argument): numpy sees each as a 0-d value of its dtype, and so does
         * the rule */
        Var **conv = cap_alloc(c, sizeof(Var *) * (size_t)(nargs + 1));   /* the caller's
                                                                              array stays */
        if (!conv)
            return -1;
        int any = 0;
        for (int32_t i = 0; i < nargs; i++) {
            if (!(conv[i] = gscalar_as_np_value(c, (*args)[i])))
                return -1;
            any |= conv[i] != (*args)[i];
        }
        if (any) {
            *args = conv;
            *lib = lib_of_args(*args, nargs, found);
        }
    }
    if (!*found)
        *lib = (r->kind == CK_NUMPY || r->kind == CK_NDARRAY_METHOD) ? LIB_NUMPY : LIB_TORCH;
    return check_one_lib(c, *args, nargs, *lib);
}

/* Calls the capture refuses before binding: 0, or -1 with the failure recorded. */
static int record_refuse(Capture *c, const CallableRow *r, OpId op, Lib lib, Var **args, int32_t nargs, int np_on_torch)
{
    if (op == OP_TO_NUMPY && nargs >= 1 && args[0] && args[0]->kind == VK_TENSOR && args[0]->u.t.meta.requires_grad &&
        c->grad_mode)
        /* eager raises while grad mode is on (under no_grad it gives the array) */
        return cap_fail(c, BR_UNSUPPORTED_CALL, "Tensor.numpy() of a tensor that requires grad raises");
    /* torch.from_numpy is the torch call that takes numpy values, np.asarray recorded as
     * to_numpy the numpy call that takes a torch tensor (their rules check them) */
    if ((lib == LIB_NUMPY && (r->kind == CK_TORCH || r->kind == CK_TENSOR_METHOD) && op != OP_FROM_NUMPY) ||
        (lib == LIB_TORCH && (r->kind == CK_NUMPY || r->kind == CK_NDARRAY_METHOD) && !np_on_torch &&
         op != OP_TO_NUMPY))
        return cap_fail(c, BR_UNSUPPORTED_CALL, "%s called on %s values", r->path,
                        lib == LIB_NUMPY ? "numpy" : "torch");
    if (op_info[op].kind == OPK_DATA_SHAPE && !sj_config.capture_dynamic_output_shape_ops)
        return cap_fail(c, BR_DYNAMIC_OUTPUT,
                        "%s; to capture it, set shapejit.config."
                        "capture_dynamic_output_shape_ops = True",
                        r->path);
    return 0;
}

/* The call's arguments as the rule sees them (spec: cap_to_bound's specialize), bound to
 * the row's schema into rb->bound. 0, or -1 with the failure recorded. */
static int bind_call(Capture *c, const CallableRow *r, Var **args, RecBind *rb, const char *spec)
{
    for (int32_t i = 0; i < rb->npos; i++)
        if (cap_to_bound(c, args[i], &rb->pos[i], spec) < 0)
            return -1;
    for (int32_t k = 0, j = 0; k < rb->nkw; k++) {
        if (k == rb->out_kw)
            continue;
        if (cap_to_bound(c, args[rb->npos + k], &rb->pos[rb->npos + j++], spec) < 0)
            return -1;
    }
    ShapeErr err;
    err.msg[0] = 0;
    if (bind_args(r->schema, rb->pos, rb->npos, rb->kwn, rb->pos + rb->npos, rb->nkw_bind, &rb->bound, &err) < 0)
        return cap_fail(c, BR_SHAPE_RULE, "%s: %s", r->path, err.msg);
    return 0;
}

/* Binds the call (rb, filled here) and runs op's shape rule: outs[*nout]. When the rule
 * needs a dynamic float or numpy scalar as a number (its stand-in is data to the rules),
 * that is specialised; when it handles static shapes only, the symbols its arguments use
 * are pinned; then the call is bound again. 0, or -1 with the failure recorded. */
static int bind_and_infer(Capture *c, const CallableRow *r, OpId op, Lib lib, Var **args, int32_t nargs,
                          PyObject *kwnames, RecBind *rb, TensorMeta *outs, int *nout)
{
    rb->nkw = kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0;
    rb->npos = nargs - rb->nkw;
    rb->pos = cap_alloc(c, sizeof(BoundArg) * (size_t)(nargs + 1));
    rb->kwn = cap_alloc(c, sizeof(char *) * (size_t)(rb->nkw + 1));
    if (!rb->pos || !rb->kwn)
        return -1;
    rb->out_kw = -1;
    rb->out_var = NULL;
    rb->nkw_bind = 0;
    for (int32_t k = 0; k < rb->nkw; k++) {
        const char *name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, k));
        if (!name)
            return -1;
        /* numpy's out=array: the op writes its result into that array and returns it; the
         * rule sees the call without it */
        Var *a = args[rb->npos + k];
        if (rb->out_kw < 0 && !strcmp(name, "out") && lib == LIB_NUMPY && a && a->kind == VK_TENSOR &&
            !a->u.t.meta.np_scalar) {
            rb->out_kw = k;
            rb->out_var = a;
            continue;
        }
        rb->kwn[rb->nkw_bind++] = name;
    }
    if (bind_call(c, r, args, rb, NULL) < 0)
        return -1;
    ShapeErr err;
    err.msg[0] = 0;
    *nout = SJ_MAX_OUTS;
    sj_symctx = c->env ? &c->rctx : NULL;
    int ir = shapes_infer(op, lib, &rb->bound, outs, nout, &err);
    sj_symctx = NULL;
    for (int round = 0; ir != 0 && round < 2; round++) {
        char why[160];
        snprintf(why, sizeof why, "the shape rule of %s needs its value", r->path);
        int pinned = gscalar_pin_hinted(c, args, nargs, why);
        if (pinned < 0)
            return -1;
        if (ir != 1 && pinned == 0)
            break;
        snprintf(why, sizeof why, "%s has a shape rule for static sizes only", r->path);
        const char *spec = ir == 1 ? why : NULL;
        if (bind_call(c, r, args, rb, spec) < 0)
            return -1;
        *nout = SJ_MAX_OUTS;
        sj_symctx = spec ? NULL : (c->env ? &c->rctx : NULL);
        ir = shapes_infer(op, lib, &rb->bound, outs, nout, &err);
        sj_symctx = NULL;
    }
    if (ir != 0) {
        if (PyErr_Occurred())
            sj_err_clear();
        return cap_fail(c, BR_SHAPE_RULE, "%s: %s", r->path, err.msg);
    }
    return 0;
}

/* The node's bound slots (ir.h): one per schema parameter, each a copy of the raw pool
 * Arg it was bound from. first: the call's raw arguments (positional, then keywords) in
 * the pool. Returns the first slot, or -1 with an exception set. */
static int32_t bound_slots(Capture *c, const CallableRow *r, const RecBind *rb, int32_t first)
{
    Graph *g = c->g;
    const BoundArgs *b = &rb->bound;
    const SchemaParam *ps;
    ShapeErr err;
    if (bind_schema(r->schema, &ps, &err) != b->n) {
        PyErr_Format(PyExc_RuntimeError, "schema of %s: %s", r->path, err.msg);
        return -1;
    }
    int32_t slots = graph_pool(g, b->n > 0 ? b->n : 1);
    if (slots < 0)
        return -1;
    for (int i = 0; i < b->n; i++) {
        Arg a = {ARG_ABSENT, 0, 0};
        int32_t from = b->from[i];
        if (from >= rb->npos && rb->out_kw >= 0 && from - rb->npos >= rb->out_kw)
            from++;   /* a keyword after out=, which the binder did not see */
        if (b->nfrom[i] > 0) {
            a.kind = ARG_TUPLE;   /* *varargs: the positional arguments it gathered */
            a.a = first + from;
            a.n = b->nfrom[i];
        } else if (from >= 0) {
            a = g->pool[first + from];
        } else if (ps[i].fixed) {
            a.kind = ARG_CONST;
            if ((a.a = graph_const(g, ps[i].fixed_value)) < 0)
                return -1;
        } else if (rb->out_var && !strcmp(ps[i].call_name, "out")) {
            a = g->pool[first + rb->npos + rb->out_kw];
        }
        g->pool[slots + i] = a;
    }
    return slots;
}

/* The dims a rule of a data-dependent shape (OPK_DATA_SHAPE) left at SJ_UNBACKED_HINT are
 * data (nonzero's rows, bincount's length): an unbacked symbol each, read from the result
 * (values v ..) at run time; numpy.nonzero's index arrays, and np.unique's values, indices
 * and counts, all have the one count. 0, or -1 with the failure recorded. */
static int data_dims(Capture *c, OpId op, const BoundArgs *bound, int32_t v, TensorMeta *outs, int nout)
{
    SymNode *shared = NULL;
    for (int i = 0; i < nout; i++)
        for (int d = 0; d < outs[i].ndim; d++) {
            if (outs[i].size[d] != SJ_UNBACKED_HINT || outs[i].sym[d])
                continue;
            SymNode *u = op == OP_NONZERO || op == OP_UNIQUE ? shared : NULL;
            if (!u) {
                int64_t lo, hi;
                shapes_data_dim_range(op, bound, i, d, &lo, &hi);
                u = symb_unbacked(c, -1, v + i, d, (SymRange){lo, hi < 0 ? SYM_INT_OO : hi});
                if (!u)
                    return cap_fail_exc(c, BR_INTERNAL);
                shared = u;
            }
            outs[i].sym[d] = c->g->values[v + i].meta.sym[d] = u;
        }
    return 0;
}

/* The var a recorded node's results make: None, the array written in place, one tensor, or
 * a tuple (torch's named structseqs, numpy's named results). NULL on failure. */
static Var *record_result(Capture *c, const CallableRow *r, OpId op, Lib lib, int32_t v, const TensorMeta *outs,
                          int nout, Var *target_var, const BoundArgs *bound)
{
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
    const char *named = tup && lib == LIB_NUMPY ? shapes_np_result_type(r->op, bound) : NULL;
    if (named && np_result_subtype(c, tup, named) < 0)
        return NULL;
    return tup;
}

/* Adds the node: the raw arguments (what the eager replay calls target with) and the
 * bound slots. Returns the first value id, or -1 with an exception set. */
static int32_t add_node(Capture *c, int row, PyObject *target, OpId op, int flags, Var **args, int32_t nargs,
                        PyObject *kwnames, const RecBind *rb, const TensorMeta *outs, int nout)
{
    const CallableRow *r = &callable_rows[row];
    int32_t first = graph_pool(c->g, nargs > 0 ? nargs : 1);
    if (first < 0)
        return -1;
    for (int32_t i = 0; i < nargs; i++)
        if (cap_to_arg(c, args[i], first + i) < 0)
            return -1;
    int32_t slots = bound_slots(c, r, rb, first);
    if (slots < 0)
        return -1;
    PyObject *where = cap_where(c);   /* new */
    if (!where)
        return -1;
    int32_t v =
        graph_add_node(c->g, op, flags, target, first, rb->npos, first + rb->npos, rb->nkw, kwnames, outs, nout, where);
    Py_DECREF(where);
    if (v >= 0)
        graph_node_bind(c->g, c->g->nnodes - 1, row, slots, rb->bound.n);
    return v;
}

/* The core: record one call of a table row. */
static Var *record(Capture *c, int row, PyObject *target, Var **args, int32_t nargs, PyObject *kwnames)
{
    const CallableRow *r = &callable_rows[row];
    int found;
    Lib lib;
    if (record_lib(c, r, &args, nargs, &lib, &found) < 0)
        return NULL;
    OpId op = mech_op(r, lib, args, nargs, kwnames);
    DType np_torch_dt = DT_F32;
    int np_on_torch = lib == LIB_TORCH && numpy_on_torch(r, target, op, args, nargs, kwnames, &np_torch_dt);
    if (!found && (r->kind == CK_NUMPY || r->kind == CK_NDARRAY_METHOD) && op_info[op].kind != OPK_FACTORY &&
        var_all_const(args, nargs)) {
        /* numpy math on Python constants (np.sqrt(2.0)) folds to a numpy scalar */
        return cap_fold_call(c, target, args, nargs, kwnames);
    }
    if (record_refuse(c, r, op, lib, args, nargs, np_on_torch) < 0)
        return NULL;
    RecBind rb;
    TensorMeta outs[SJ_MAX_OUTS];
    int nout;
    if (bind_and_infer(c, r, op, lib, args, nargs, kwnames, &rb, outs, &nout) < 0)
        return NULL;
    if (np_on_torch && (nout != 1 || outs[0].dtype != np_torch_dt)) {
        cap_fail(c, BR_UNSUPPORTED_CALL, "%s called on torch values gives a dtype torch would not", r->path);
        return NULL;
    }
    /* inplace=True keywords (F.relu(x, inplace=True)) make a functional row in-place */
    const BoundArg *ipa = ba_get(&rb.bound, "inplace");
    int inplace_kw = ipa && ipa->kind == BA_CONST && ipa->value == Py_True;
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
        int same = cast_returns_input(&rb.bound);
        if (same > 0)
            return args[0];
        if (same < 0) {
            cap_fail(c, BR_UNSUPPORTED_CALL,
                     "%s with a memory_format to the tensor's own dtype: whether it returns "
                     "the tensor itself depends on its layout",
                     r->path);
            return NULL;
        }
    }
    int flags = ((r->flags & (CF_INPLACE | CF_RETURNS_NONE)) || inplace_kw) ? NODE_INPLACE : 0;
    Var *target_var = rb.out_var                                                      ? rb.out_var
                      : (flags && nargs > 0 && args[0] && args[0]->kind == VK_TENSOR) ? args[0]
                                                                                      : NULL;
    if (target_var && target_var->u.t.meta.np_scalar && !rb.out_var) {
        flags = 0;   /* numpy scalars are immutable: `s += 1` rebinds s */
        target_var = NULL;
    }
    if (rb.out_var)
        flags |= NODE_OUT;
    if (target_var && cap_note_change(c, NULL, 1) < 0)
        return NULL;
    if (target_var) {
        TensorMeta res;
        ShapeErr err;
        if (nout < 1 || shapes_inplace(lib, &target_var->u.t.meta, &outs[0], &res, &err) < 0) {
            cap_fail(c, BR_SHAPE_RULE, "%s: %s", r->path, nout < 1 ? "no result to write" : err.msg);
            return NULL;
        }
        outs[0] = res;
        if (rb.out_var && graph_value_may_alias_input(c->g, rb.out_var->u.t.value))
            c->g->has_mutation = 1;
    }
    int32_t v = add_node(c, row, target, op, flags, args, nargs, kwnames, &rb, outs, nout);
    if (v < 0)
        return NULL;
    c->nops++;
    if (op_info[op].kind == OPK_DATA_SHAPE && data_dims(c, op, &rb.bound, v, outs, nout) < 0)
        return NULL;
    if (op == OP_SET_GRAD_ENABLED && c->g->grad_query < 0) {
        PyObject *q = PyObject_GetAttrString(libs.torch, "is_grad_enabled");   /* new */
        if (!q)
            return NULL;
        c->g->grad_query = graph_const(c->g, q);
        Py_DECREF(q);
        if (c->g->grad_query < 0)
            return NULL;
    }
    return record_result(c, r, op, lib, v, outs, nout, target_var, &rb.bound);
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
