/* Argument lowering: capture's vars as the shape rules see them (BoundArg, to_bound) and
 * as the graph stores them (pool Args, to_arg), and the graph nodes that compute Python
 * scalars (size arithmetic, run-time slices). */
#include "capture.h"
#include "../shapes/rules.h"
#include "../core/errors.h"

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

/* Var -> BoundArg for the shape rules (cap_to_bound). Lists/tuples made only of constants become one
 * constant; those holding tensors become BA_LIST. With specialize (the reason, logged),
 * symbolic sizes and ints are pinned to their hints (guarded) for a rule that only handles
 * static shapes. */
int cap_to_bound(Capture *c, Var *v, BoundArg *out, const char *specialize)
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
                    return cap_fail(c, BR_SCALAR_OUTPUT,
                                    "%s element used as a slice bound is read "
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
                only_ints &=
                    v->u.seq.items[i] && (v->u.seq.items[i]->kind == VK_CONST || v->u.seq.items[i]->kind == VK_SYMINT);
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
            if (cap_to_bound(c, v->u.seq.items[i], &items[i], specialize) < 0)
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
