/* The capture's side of its shape environment (shapes/env.h holds the symbols and the
 * relations relied on, and compiles them into SHAPE_ENV guards): which input sizes and
 * ints become symbols, symbolic ints as values of the evaluator, and how a symbolic int is
 * computed at run time when an op needs it.
 *
 * Dynamic or static: for each dim of a tensor input (and each int input), highest
 * precedence first: dynamic_sources (and unbacked_sources), static_sources, the tensor's
 * marks (mark_static, mark_dynamic, maybe_mark_dynamic, mark_unbacked: the attributes
 * torch's marking functions set, which shapejit's set too), parameters under
 * force_parameter_static_shapes, compile(dynamic=False), compile(dynamic=True) or
 * assume_static_by_default=False, and automatic dynamic: the code's frame state (what the
 * inputs looked like at every compile so far) says the size changed. A dynamic size of 0
 * or 1 is specialised (0/1 specialisation) unless backed_size_oblivious.
 *
 * Memory: the SymEnv belongs to the capture's graph (g->env); c->shape is freed by
 * symb_release; symvals/violations are strong. */
#include "capture.h"
#include "../vocab/libs.h"
#include "../core/config.h"
#include "../core/log.h"
#include "../core/policy.h"
#include "../core/trace.h"
#include "sj_opcodes.h"
#include "../core/errors.h"
#include "../core/pyutil.h"

PyObject *SjConstraintViolation;

/* The relation rel holds at the hints: guard it. 0 or -1. */
static int symb_guard(Capture *c, SymNode *rel);
/* A size-arithmetic node of op calling target over graph values vals[i] (or, where
 * vals[i] < 0, the constant consts[i]): its value id, counted as graph work. -1. */
static int32_t symb_size_node(Capture *c, OpId op, PyObject *target, const int32_t *vals, const SymNode *const *consts,
                              int n);

/* ------------------------------------------------------------ bookkeeping ---- */

static int rule_guard(void *ctx, SymNode *rel)
{
    return symb_guard((Capture *)ctx, rel);
}

static int rule_expect(void *ctx, SymNode *rel)
{
    return symb_runtime_assert((Capture *)ctx, rel);
}

int symb_ensure(Capture *c)
{
    if (c->env)
        return 0;
    if (!c->g->env && !(c->g->env = sym_env_new()))
        return -1;
    c->env = c->g->env;
    c->rctx.env = c->env;
    c->rctx.guard = rule_guard;
    c->rctx.expect = rule_expect;
    c->rctx.ctx = c;
    if (!c->symvals && !(c->symvals = PyDict_New()))
        return -1;
    return shape_env_open(&c->shape, c->env);
}

void symb_release(Capture *c)
{
    shape_env_clear(&c->shape);
    Py_CLEAR(c->symvals);
    Py_CLEAR(c->violations);
    c->env = NULL;   /* the graph owns it */
}

/* The name of a symbol in printed guards: its source. */
static const char *source_name(void *ctx, const SymNode *sym)
{
    Capture *c = ctx;
    if (sym->kind != SK_SYMBOL || sym->slot < 0 || sym->slot >= c->shape.nsyms)
        return NULL;
    return PyUnicode_AsUTF8(sources_repr(&c->src, c->shape.syms[sym->slot].src));
}

PyObject *symb_where_text(Capture *c)
{
    PyObject *w = cap_where(c);
    if (!w) {
        sj_err_clear();
        return PyUnicode_FromString("");
    }
    PyObject *line = PyTuple_GET_ITEM(w, 3);
    PyObject *s = PyUnicode_FromFormat("%S  # %U:%S in %U", line, PyTuple_GET_ITEM(w, 0), PyTuple_GET_ITEM(w, 1),
                                       PyTuple_GET_ITEM(w, 2));
    Py_DECREF(w);
    return s;
}

/* -------------------------------------------------------------- policy ---- */

/* DIM_DUCK: dynamic because everything is (dynamic=True); only such sizes are duck sized,
 * as in torch, where marks, source lists and automatic dynamic give each size its own
 * symbol. */
/* DIM_UNBACKED: mark_unbacked / unbacked_sources: an unbacked symbol u<N> read from the
 * input at run time, with no hint to decide by and no guard (not even 0/1). */
typedef enum { DIM_STATIC, DIM_DYNAMIC, DIM_STRICT, DIM_DUCK, DIM_UNBACKED } DimPolicy;

/* 1 when attribute attr of t (a set of dims) holds dim; 0 when not or absent. */
static int mark_has(PyObject *t, const char *attr, int dim)
{
    PyObject *marks = PyObject_GetAttrString(t, attr);
    if (!marks) {
        sj_err_clear();
        return 0;
    }
    PyObject *d = PyLong_FromLong(dim);
    int r = d ? PySequence_Contains(marks, d) : -1;
    Py_XDECREF(d);
    Py_DECREF(marks);
    if (r < 0) {
        sj_err_clear();
        r = 0;
    }
    return r;
}

/* The dynsources_lookup policy (knob, name): None, True, or a frozenset of dims. New ref or
 * NULL (unset, or an exception, cleared: a broken lookup is "not listed"). */
static PyObject *sources_listed(const char *knob, PyObject *name)
{
    PyObject *v = NULL;
    if (!strcmp(knob, "dynamic_sources"))
        v = sj_config.dynamic_sources;
    else if (!strcmp(knob, "static_sources"))
        v = sj_config.static_sources;
    else
        v = sj_config.unbacked_sources;
    if (!v || !PyUnicode_Check(v) || PyUnicode_GET_LENGTH(v) == 0)
        return NULL;
    PyObject *lookup = policy_get(POLICY_DYNSOURCES_LOOKUP);   /* borrowed */
    if (!lookup)
        return NULL;
    Py_INCREF(lookup);   /* held over the call: it may register another */
    PyObject *r = PyObject_CallFunction(lookup, "sO", knob, name);
    Py_DECREF(lookup);
    if (!r)
        sj_err_clear();
    return r;
}

static int listed_dim(PyObject *r, int dim)
{
    if (!r || r == Py_None)
        return 0;
    if (r == Py_True)
        return 1;
    PyObject *d = PyLong_FromLong(dim);
    int k = d ? PySequence_Contains(r, d) : -1;
    Py_XDECREF(d);
    if (k < 0) {
        sj_err_clear();
        k = 0;
    }
    return k;
}

/* The frame state entry of a source, merged with what is seen now: a list of sizes (None
 * where they differed) or, for ints, the value (None once it differed). New reference. */
static PyObject *fstate_merge(Capture *c, PyObject *name, PyObject *now, int is_tensor)
{
    if (!c->fstate || !sj_config.automatic_dynamic_shapes || c->dynamic == 0)
        return Py_NewRef(now);
    PyObject *old = PyDict_GetItemWithError(c->fstate, name);   /* borrowed */
    if (!old && PyErr_Occurred())
        return NULL;
    PyObject *merged;
    if (!old) {
        merged = Py_NewRef(now);
    } else if (is_tensor && PyList_Check(old) && PyList_Check(now) && PyList_GET_SIZE(old) == PyList_GET_SIZE(now)) {
        merged = PyList_New(PyList_GET_SIZE(now));
        for (Py_ssize_t i = 0; merged && i < PyList_GET_SIZE(now); i++) {
            PyObject *a = PyList_GET_ITEM(old, i), *b = PyList_GET_ITEM(now, i);
            int same = a != Py_None && PyObject_RichCompareBool(a, b, Py_EQ) == 1;
            PyList_SET_ITEM(merged, i, Py_NewRef(same ? a : Py_None));
        }
    } else if (!is_tensor && !PyList_Check(old)) {
        int same = old != Py_None && PyObject_RichCompareBool(old, now, Py_EQ) == 1;
        merged = Py_NewRef(same ? old : Py_None);
    } else {
        /* the rank or the kind changed: every dim dynamic from now on */
        if (is_tensor) {
            merged = PyList_New(PyList_GET_SIZE(now));
            for (Py_ssize_t i = 0; merged && i < PyList_GET_SIZE(now); i++)
                PyList_SET_ITEM(merged, i, Py_NewRef(Py_None));
        } else {
            merged = Py_NewRef(Py_None);
        }
    }
    sj_err_clear();
    if (merged && PyDict_SetItem(c->fstate, name, merged) < 0)
        Py_CLEAR(merged);
    return merged;
}

/* ------------------------------------------------------------- symbols ---- */

static SymNode *new_symbol(Capture *c, int32_t src, int64_t hint, SymRange r, int32_t tensor_value, int dim, int strict,
                           int is_int)
{
    SymNode *s = shape_env_symbol(&c->shape, src, hint, r, tensor_value, dim, strict, is_int);
    if (!s)
        return NULL;
    if (sj_log_on(LOG_DYNAMIC, SJ_INFO)) {
        PyObject *range = sym_range_str(r), *w = symb_where_text(c);
        sj_log(LOG_DYNAMIC, SJ_INFO, "create_symbol s%lld = %lld for %U %U (%U)", (long long)s->value, (long long)hint,
               sources_repr(&c->src, src), range ? range : Py_None, w ? w : Py_None);
        Py_XDECREF(range);
        Py_XDECREF(w);
        sj_err_clear();
    }
    if (sj_trace_on) {
        PyObject *range = sym_range_str(r), *stack = cap_user_stack(c);
        if (range && stack)
            SJ_TRACE("create_symbol", "(LLOOO)", (long long)s->value, (long long)hint, range,
                     sources_repr(&c->src, src), stack);
        Py_XDECREF(range);
        Py_XDECREF(stack);
        sj_err_clear();
    }
    return s;
}

static int add_violation(Capture *c, int32_t slot, int64_t value)
{
    if (!c->violations && !(c->violations = PyList_New(0)))
        return -1;
    PyObject *name = sources_repr(&c->src, c->shape.syms[slot].src);
    PyObject *w = symb_where_text(c);
    PyObject *msg = PyUnicode_FromFormat(
        "  - You marked %U as dynamic but your code specialized it to be a constant (%lld). If you're using "
        "mark_dynamic, either remove it or use maybe_mark_dynamic.\n    (at %U)",
        name, (long long)value, w ? w : Py_None);
    Py_XDECREF(w);
    if (!msg)
        return -1;
    int r = PyList_Append(c->violations, msg);
    Py_DECREF(msg);
    c->shape.syms[slot].strict = 0;   /* reported once */
    return r;
}

/* A module buffer: reached through ..._buffers['name'] (torch treats buffers like
 * parameters under force_parameter_static_shapes). */
static int from_buffers(Capture *c, int32_t src)
{
    const SourceEntry *e = &c->src.e[src];
    if (e->kind != SRC_ITEM || e->base < 0)
        return 0;
    const SourceEntry *b = &c->src.e[e->base];
    return b->kind == SRC_ATTR && b->key && PyUnicode_Check(b->key) &&
           PyUnicode_CompareWithASCIIString(b->key, "_buffers") == 0;
}

/* The frame-state form of a tensor's sizes: a new list of ints. */
static PyObject *sizes_list(const TensorMeta *m)
{
    PyObject *now = PyList_New(m->ndim);
    for (int i = 0; now && i < m->ndim; i++) {
        PyObject *d = PyLong_FromLongLong(m->size[i]);
        if (!d)
            Py_CLEAR(now);
        else
            PyList_SET_ITEM(now, i, d);
    }
    return now;
}

/* mark_static(module) or mark_static(ModuleClass) (torch's attribute name). */
static int module_marked_static(PyObject *mod)
{
    PyObject *v = PyObject_GetAttrString(mod, "_dynamo_marked_static");
    int r = v ? PyObject_IsTrue(v) == 1 : 0;
    Py_XDECREF(v);
    sj_err_clear();
    return r;
}

/* A module class of torch.nn itself (nn.BatchNorm1d, nn.Linear), not a user subclass. */
static int builtin_nn_module(PyObject *mod)
{
    PyObject *name = PyObject_GetAttrString((PyObject *)Py_TYPE(mod), "__module__");
    const char *n = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
    int r = n && !strncmp(n, "torch.nn.", 9);
    Py_XDECREF(name);
    sj_err_clear();
    return r;
}

/* Dim `dim` of input tensor graph value `value` as an unbacked symbol: range [0, int_oo],
 * or mark_unbacked's min/max (kept in _dynamo_unbacked_range). Read at run time. */
static SymNode *unbacked_input(Capture *c, PyObject *obj, int32_t src, int32_t value, int dim)
{
    SymRange r = {0, SYM_INT_OO};
    PyObject *ranges = PyObject_GetAttrString(obj, "_dynamo_unbacked_range");   /* new or NULL */
    PyObject *key = ranges ? PyLong_FromLong(dim) : NULL;
    PyObject *rg = key && PyDict_Check(ranges) ? PyDict_GetItemWithError(ranges, key) : NULL;   /* borrowed */
    if (rg && PyTuple_Check(rg) && PyTuple_GET_SIZE(rg) == 2) {
        PyObject *a = PyTuple_GET_ITEM(rg, 0), *b = PyTuple_GET_ITEM(rg, 1);
        if (PyLong_Check(a))
            r.lo = PyLong_AsLongLong(a);
        if (PyLong_Check(b))
            r.hi = PyLong_AsLongLong(b);
    }
    Py_XDECREF(key);
    Py_XDECREF(ranges);
    sj_err_clear();
    if (r.lo < 0 || r.lo > r.hi)
        r = (SymRange){0, SYM_INT_OO};
    SymNode *u = symb_unbacked(c, -1, value, dim, r);
    if (u && sj_log_on(LOG_DYNAMIC, SJ_INFO)) {
        PyObject *rs = sym_range_str(r);
        sj_log(LOG_DYNAMIC, SJ_INFO, "constrain_symbol_range u%lld %U for %U", (long long)u->value, rs ? rs : Py_None,
               sources_repr(&c->src, src));
        Py_XDECREF(rs);
        sj_err_clear();
    }
    return u;
}

int symb_wrap_tensor(Capture *c, PyObject *obj, int32_t src, TensorMeta *m, int32_t value, uint8_t *dyn)
{
    *dyn = 0;
    if (m->ndim == 0)
        return 0;
    PyObject *name = sources_repr(&c->src, src);
    PyObject *now = sizes_list(m);
    if (!now)
        return -1;
    PyObject *seen = fstate_merge(c, name, now, 1);
    Py_DECREF(now);
    if (!seen)
        return -1;
    PyObject *ds = sources_listed("dynamic_sources", name);
    PyObject *us = sources_listed("unbacked_sources", name);
    PyObject *ss = sources_listed("static_sources", name);
    int is_torch = m->lib == LIB_TORCH;
    int param = is_torch && sj_config.force_parameter_static_shapes &&
                ((libs.param_type && PyObject_TypeCheck(obj, (PyTypeObject *)libs.param_type)) || from_buffers(c, src));
    /* under force_nn_module_property_static_shapes, tensors held by a torch.nn module (its
     * buffers) or by a module whose class is marked static are static like parameters */
    int modstatic = is_torch && c->wrap_owner && sj_config.force_nn_module_property_static_shapes &&
                    (module_marked_static(c->wrap_owner) || builtin_nn_module(c->wrap_owner));
    int rc = 0;
    for (int i = 0; i < m->ndim && rc == 0; i++) {
        DimPolicy p = DIM_STATIC;
        int64_t lo = 2, hi = SYM_INT_OO;
        int oblivious = sj_config.backed_size_oblivious;
        if (listed_dim(us, i)) {
            p = DIM_UNBACKED;
        } else if (listed_dim(ds, i)) {
            p = DIM_DYNAMIC;
        } else if (param || modstatic) {
            p = DIM_STATIC;   /* torch: static shapes before any mark is read */
        } else if (listed_dim(ss, i) || (is_torch && mark_has(obj, "_dynamo_static_indices", i))) {
            p = DIM_STATIC;
        } else if (is_torch && mark_has(obj, "_dynamo_dynamic_indices", i)) {
            p = DIM_STRICT;
            /* mark_dynamic(min=, max=) leaves {dim: (min, max)} */
            PyObject *ranges = PyObject_GetAttrString(obj, "_dynamo_dynamic_range");
            PyObject *key = ranges ? PyLong_FromLong(i) : NULL;
            PyObject *rg = key && PyDict_Check(ranges) ? PyDict_GetItemWithError(ranges, key) : NULL;
            if (rg && PyTuple_Check(rg) && PyTuple_GET_SIZE(rg) == 2) {
                PyObject *a = PyTuple_GET_ITEM(rg, 0), *b = PyTuple_GET_ITEM(rg, 1);
                if (PyLong_Check(a) && PyLong_AsLongLong(a) > lo)
                    lo = PyLong_AsLongLong(a);
                if (PyLong_Check(b))
                    hi = PyLong_AsLongLong(b);
            }
            Py_XDECREF(key);
            Py_XDECREF(ranges);
            sj_err_clear();
        } else if (is_torch && mark_has(obj, "_dynamo_unbacked_indices", i)) {
            p = DIM_UNBACKED;
        } else if (is_torch && mark_has(obj, "_dynamo_weak_dynamic_indices", i)) {
            p = DIM_DYNAMIC;
        } else if (c->dynamic == 0) {
            p = DIM_STATIC;
        } else if (PyList_Check(seen) && i < PyList_GET_SIZE(seen) && PyList_GET_ITEM(seen, i) == Py_None) {
            /* automatic dynamic comes before dynamic=True, as in torch: a size that changed
             * since an earlier compile gets its own symbol, never a duck-sized one, of the
             * kind automatic_dynamic_shapes_mark_as names */
            PyObject *as = sj_config.automatic_dynamic_shapes_mark_as;
            p = DIM_DYNAMIC;
            if (as && PyUnicode_CompareWithASCIIString(as, "unbacked") == 0)
                p = DIM_UNBACKED;
            else if (as && PyUnicode_CompareWithASCIIString(as, "oblivious") == 0)
                oblivious = 1;
        } else if (c->dynamic == 1 || !sj_config.assume_static_by_default) {
            p = DIM_DUCK;
        }
        if (p == DIM_STATIC)
            continue;
        if (p == DIM_UNBACKED) {
            if (symb_ensure(c) < 0 || !(m->sym[i] = unbacked_input(c, obj, src, value, i))) {
                rc = -1;
                break;
            }
            m->size[i] = SJ_UNBACKED_HINT;   /* rules never see the value, as for nonzero() */
            *dyn |= (uint8_t)(1u << i);
            continue;
        }
        int64_t h = m->size[i];
        if ((h == 0 || h == 1) && !oblivious) {
            /* sizes 0 and 1 stay static, marked or not (torch does not call a mark on
             * them a violation either) */
            continue;
        }
        if (symb_ensure(c) < 0) {
            rc = -1;
            break;
        }
        if (hi < h)
            hi = h;
        if (lo > h)
            lo = h;
        if (oblivious && lo > 0)
            lo = 0;
        int32_t ssrc = sources_add(&c->src, SRC_SIZE, src, i, NULL, NULL);
        if (ssrc < 0) {
            rc = -1;
            break;
        }
        /* duck sizing: an equal size already symbolic shares its symbol (guarded equal) */
        SymNode *s = p == DIM_DUCK ? shape_env_duck(&c->shape, h, ssrc) : NULL;
        if (s) {
            if (shape_env_alias(&c->shape, ssrc, s) < 0) {
                rc = -1;
                break;
            }
        } else {
            SymRange r = {lo, hi};
            s = new_symbol(c, ssrc, h, r, value, i, p == DIM_STRICT, 0);
            if (!s) {
                rc = -1;
                break;
            }
            c->shape.syms[s->slot].duck = p == DIM_DUCK;
        }
        m->sym[i] = s;
        *dyn |= (uint8_t)(1u << i);
    }
    Py_DECREF(seen);
    Py_XDECREF(ds);
    Py_XDECREF(us);
    Py_XDECREF(ss);
    if (rc < 0)
        cap_fail_exc(c, BR_INTERNAL);
    return rc;
}

/* Whether a Python number read through src is dynamic: the frame's own locals, closure
 * variables (a function made in a loop sees another cell each time) and what hangs off
 * them (items, the cells of a closure they hold, attributes of user objects not reached
 * through a module, as torch.compile; nn.Module attributes stay constants unless
 * module_ok), listed in dynamic_sources, or seen to change (automatic dynamic;
 * from_start: dynamic at once). 1 dynamic, 0 static, -1 error. */
static int number_dynamic(Capture *c, PyObject *obj, int32_t src, int module_ok, int from_start)
{
    const SourceEntry *e = &c->src.e[src];
    int32_t root = src;
    while (c->src.e[root].base >= 0)
        root = c->src.e[root].base;
    if (c->wrap_owner && !module_ok)
        return 0;   /* read from a module (self.k, self.normalized_shape[0]) */
    int module_num = e->kind == SRC_ATTR && (c->wrap_owner || c->wrap_plain_attr);
    int rk = c->src.e[root].kind;
    if ((rk != SRC_LOCAL && rk != SRC_FREEVAR) ||
        (e->kind != SRC_LOCAL && e->kind != SRC_FREEVAR && e->kind != SRC_ITEM && e->kind != SRC_CELL && !module_num))
        return 0;
    PyObject *name = sources_repr(&c->src, src);
    PyObject *ds = sources_listed("dynamic_sources", name);
    int listed = ds && ds != Py_None;
    Py_XDECREF(ds);
    PyObject *ss = listed ? NULL : sources_listed("static_sources", name);
    int stat = ss && ss != Py_None;
    Py_XDECREF(ss);
    PyObject *seen = fstate_merge(c, name, obj, 0);
    if (!seen)
        return -1;
    int dynamic = listed || (!stat && c->dynamic != 0 &&
                             (from_start || c->dynamic == 1 || !sj_config.assume_static_by_default || seen == Py_None));
    Py_DECREF(seen);
    return dynamic;
}

/* A graph input read from src at run time: its value id, obj handed to the graph. */
static int32_t number_input(Capture *c, PyObject *obj, int32_t src, PyTypeObject *type, DType dt)
{
    if (symb_ensure(c) < 0 || guard_add_simple(c, GK_TYPE_MATCH, src, (PyObject *)type) < 0) {
        cap_fail_exc(c, BR_INTERNAL);
        return -1;
    }
    if (!cap_keep(c, obj))
        return -1;
    TensorMeta im;
    memset(&im, 0, sizeof im);
    im.symint = 1;   /* not a tensor */
    im.dtype = dt;
    return graph_add_input(c->g, &im, sources_repr(&c->src, src));
}

/* by_obj order is graph input order: compile_frame hands v->obj to the graph. */
static int add_by_obj(Capture *c, Var *v)
{
    if (sj_grow((void **)&c->by_obj, &c->cap_by_obj, c->nby_obj + 1, sizeof(Var *), 8) < 0)
        return -1;
    c->by_obj[c->nby_obj++] = v;
    return 0;
}

Var *symb_wrap_int(Capture *c, PyObject *obj, int32_t src, int *handled)
{
    *handled = 0;
    if (src < 0 || !PyLong_CheckExact(obj) || sj_config.specialize_int)
        return NULL;
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        sj_err_clear();
        return NULL;
    }
    int dynamic = number_dynamic(c, obj, src, sj_config.allow_unspec_int_on_nn_module, 0);
    if (dynamic <= 0)
        return NULL;   /* an int is not a size: 0 and 1 get a symbol too, as in torch */
    *handled = 1;
    int32_t value = number_input(c, obj, src, &PyLong_Type, DT_I64);
    if (value < 0)
        return NULL;
    SymNode *s = new_symbol(c, src, v, sym_range_full(), -1, -1, 0, 1);
    if (!s)
        return NULL;
    c->shape.syms[s->slot].value = value;
    Var *var = var_new(c, VK_SYMINT);
    if (!var)
        return NULL;
    var->u.s.e = s;
    var->obj = obj;   /* the live int: compile_frame hands it to the graph as an input */
    var->src = src;
    return add_by_obj(c, var) < 0 ? NULL : var;
}

/* A real numpy scalar (np.int64, np.float32; not bool, complex or datetime): its dtype, or
 * DT_COUNT when obj is none. */
static DType numpy_real_dtype(PyObject *obj)
{
    if (!libs.np_generic || !PyObject_TypeCheck(obj, (PyTypeObject *)libs.np_generic))
        return DT_COUNT;
    PyObject *dt = PyObject_GetAttrString(obj, "dtype");
    PyObject *k = dt ? PyObject_GetAttrString(dt, "kind") : NULL;
    const char *ks = k && PyUnicode_Check(k) ? PyUnicode_AsUTF8(k) : NULL;
    DType r = !ks ? DT_COUNT : (ks[0] == 'i' || ks[0] == 'u') ? DT_I64 : ks[0] == 'f' ? DT_F64 : DT_COUNT;
    Py_XDECREF(dt);
    Py_XDECREF(k);
    sj_err_clear();
    return r;
}

Var *symb_wrap_float(Capture *c, PyObject *obj, int32_t src, int *handled)
{
    *handled = 0;
    DType npdt = src >= 0 && !PyFloat_CheckExact(obj) ? numpy_real_dtype(obj) : DT_COUNT;
    int numpy = npdt != DT_COUNT;
    if (src < 0 || (!PyFloat_CheckExact(obj) && !numpy) ||
        (numpy ? (npdt == DT_I64 ? sj_config.specialize_int : sj_config.specialize_float) : sj_config.specialize_float))
        return NULL;
    if (number_dynamic(c, obj, src, 0, numpy) <= 0)
        return NULL;
    *handled = 1;
    int32_t value = number_input(c, obj, src, numpy ? Py_TYPE(obj) : &PyFloat_Type, numpy ? npdt : DT_F64);
    PyObject *name = sources_repr(&c->src, src);
    Var *var = value >= 0 ? gscalar_input(c, value, obj, src, name, numpy ? GS_NUMPY : GS_FLOAT) : NULL;
    if (var && sj_log_on(LOG_DYNAMIC, SJ_INFO)) {
        PyObject *w = symb_where_text(c);
        sj_log(LOG_DYNAMIC, SJ_INFO, "create_symfloat %U = %R (%U)", name, obj, w ? w : Py_None);
        Py_XDECREF(w);
        sj_err_clear();
    }
    return var && add_by_obj(c, var) == 0 ? var : NULL;
}

/* ------------------------------------------------------------- guards ---- */

/* A relation the capture relies on that pins a mark_dynamic dim to a constant is a
 * violation of the mark (reported at the end, as torch does). */
static int check_strict(Capture *c, SymNode *rel)
{
    int64_t k;
    int32_t slot = shape_env_strict_pinned(&c->shape, rel, &k);
    return slot < 0 ? 0 : add_violation(c, slot, k);
}

static int symb_guard(Capture *c, SymNode *rel)
{
    if (!rel)
        return -1;
    if (rel->kind == SK_BOOL)
        return rel->value ? 0 : (PyErr_SetString(PyExc_RuntimeError, "shapejit: guarding a false relation"), -1);
    if (shape_env_relies_on(&c->shape, rel))
        return 0;
    PyObject *w = symb_where_text(c);
    if (!w || shape_env_rely(&c->shape, rel, w) < 0) {
        Py_XDECREF(w);
        return -1;
    }
    if (sj_log_on(LOG_DYNAMIC, SJ_INFO)) {
        PyObject *text = sym_print(c->env, rel, NULL, NULL);
        if (text)
            sj_log(LOG_DYNAMIC, SJ_INFO, "eval %U [guard added] %U", text, w);
        Py_XDECREF(text);
        sj_err_clear();
    }
    if (sj_trace_on) {
        PyObject *text = sym_print(c->env, rel, NULL, NULL), *stack = cap_user_stack(c);
        if (text && stack)
            SJ_TRACE("guard_added", "(OO)", text, stack);
        Py_XDECREF(text);
        Py_XDECREF(stack);
        sj_err_clear();
    }
    Py_DECREF(w);
    if (check_strict(c, rel) < 0)
        return -1;
    shape_env_refine(&c->shape, rel);
    return 0;
}

int symb_decide(Capture *c, SymNode *rel, int *truth)
{
    if (!rel)
        return -1;
    SymTruth t = sym_static_truth(c->env, rel);
    if (t != SYM_UNKNOWN) {
        *truth = t == SYM_TRUE;
        return 0;
    }
    int64_t h;
    if (sym_eval_hint(c->env, rel, &h) < 0)
        return -1;
    SymNode *held = h ? rel : sym_not(c->env, rel);
    if (!held || symb_guard(c, held) < 0)
        return -1;
    *truth = h != 0;
    return 0;
}

int symb_specialize(Capture *c, SymNode *e, int64_t *value, const char *why)
{
    if (sym_eval_hint(c->env, e, value) < 0)
        return -1;
    if (e->kind == SK_CONST)
        return 0;
    SymNode *k = sym_const(c->env, *value), *rel = k ? sym_eq(c->env, e, k) : NULL;
    if (!rel)
        return -1;
    if (sym_static_truth(c->env, rel) == SYM_TRUE)
        return 0;   /* pinned already */
    if (sj_log_on(LOG_DYNAMIC, SJ_INFO)) {
        PyObject *text = sym_print(c->env, e, source_name, c), *w = symb_where_text(c);
        if (text && w)
            sj_log(LOG_DYNAMIC, SJ_INFO, "specialize %U = %lld because %s (%U)", text, (long long)*value, why, w);
        Py_XDECREF(text);
        Py_XDECREF(w);
        sj_err_clear();
    }
    if (sj_trace_on) {
        PyObject *sym = sym_print(c->env, e, NULL, NULL), *src = sym_print(c->env, e, source_name, c);
        PyObject *stack = cap_user_stack(c);
        if (sym && src && stack)
            SJ_TRACE("specialize", "(OOLsO)", sym, src, (long long)*value, why, stack);
        Py_XDECREF(sym);
        Py_XDECREF(src);
        Py_XDECREF(stack);
        sj_err_clear();
    }
    return symb_guard(c, rel);
}

/* -------------------------------------------------------------- unbacked ---- */

/* A new unbacked symbol and its SymInfo, logged as create_unbacked_<what> (torch's words:
 * symint, symbool). */
static SymNode *unbacked_symbol(Capture *c, int32_t value, int32_t tensor_value, int dim, SymRange r, const char *what)
{
    SymNode *u = symb_ensure(c) < 0 ? NULL : shape_env_unbacked(&c->shape, value, tensor_value, dim, r);
    if (!u)
        return NULL;
    if (sj_log_on(LOG_DYNAMIC, SJ_INFO)) {
        PyObject *range = sym_range_str(r), *w = symb_where_text(c);
        sj_log(LOG_DYNAMIC, SJ_INFO, "create_unbacked_%s u%lld %U (%U)", what, (long long)u->value,
               range ? range : Py_None, w ? w : Py_None);
        Py_XDECREF(range);
        Py_XDECREF(w);
        sj_err_clear();
    }
    return u;
}

SymNode *symb_unbacked(Capture *c, int32_t value, int32_t tensor_value, int dim, SymRange r)
{
    return unbacked_symbol(c, value, tensor_value, dim, r, "symint");
}

SymNode *symb_unbacked_bool(Capture *c, int32_t value)
{
    return unbacked_symbol(c, value, -1, 0, (SymRange){0, 1}, "symbool");
}

Var *symb_unbacked_value(Capture *c, int32_t value)
{
    SymNode *u = symb_unbacked(c, value, -1, 0, sym_range_full());
    if (!u) {
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    /* symb_materialize finds the value without making a node */
    PyObject *key = PyLong_FromVoidPtr(u), *val = PyLong_FromLong(value);   /* new */
    int r = key && val ? PyDict_SetItem(c->symvals, key, val) : -1;
    Py_XDECREF(key);
    Py_XDECREF(val);
    if (r < 0) {
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    return symb_var(c, u);
}

Var *symb_item(Capture *c, Var *t)
{
    const TensorMeta *m = &c->g->values[t->u.t.value].meta;
    int64_t numel = 1;
    for (int i = 0; i < m->ndim; i++) {
        if (m->sym[i]) {
            cap_fail(c, BR_SCALAR_OUTPUT, "Tensor.item() of a tensor with symbolic sizes");
            return NULL;
        }
        numel *= m->size[i];
    }
    if (numel != 1) {
        cap_fail(c, BR_SCALAR_OUTPUT, "Tensor.item() of a tensor with %lld elements", (long long)numel);
        return NULL;
    }
    DTypeCategory cat = dtype_info[m->dtype].category;
    if (cat == CAT_FLOAT || m->dtype == DT_BOOL)
        return gscalar_item(c, t);   /* torch's unbacked SymFloat / SymBool */
    if (cat != CAT_INT) {
        cap_fail(c, BR_SCALAR_OUTPUT,
                 "Tensor.item() of a %s tensor: only real and bool values are captured "
                 "(capture_scalar_outputs)",
                 dtype_info[m->dtype].name);
        return NULL;
    }
    if (symb_ensure(c) < 0) {
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    PyObject *fn = libs.tensor_type ? PyObject_GetAttrString(libs.tensor_type, "item") : NULL;   /* new */
    int32_t vals[1] = {t->u.t.value};
    const SymNode *consts[1] = {NULL};
    int32_t v = fn ? symb_size_node(c, OP_ITEM, fn, vals, consts, 1) : -1;
    Py_XDECREF(fn);
    if (v < 0) {
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    return symb_unbacked_value(c, v);
}

/* ---------------------------------------------------------------- vars ---- */

Var *symb_var(Capture *c, SymNode *e)
{
    if (!e) {
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    if (e->kind == SK_CONST)
        return var_const_steal(c, PyLong_FromLongLong(e->value));
    if (sym_is_bool(e)) {
        int t;
        if (symb_decide(c, e, &t) < 0) {
            cap_fail_exc(c, BR_INTERNAL);
            return NULL;
        }
        return var_const(c, t ? Py_True : Py_False);
    }
    Var *v = var_new(c, VK_SYMINT);
    if (v)
        v->u.s.e = e;
    return v;
}

SymNode *symb_node_of(Capture *c, Var *v)
{
    if (v->kind == VK_SYMINT)
        return sym_is_bool(v->u.s.e) ? NULL : v->u.s.e;   /* a symbolic bool is no int */
    if (v->kind == VK_CONST && PyLong_CheckExact(v->obj) && c->env) {
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v->obj, &overflow);
        if (overflow || (x == -1 && PyErr_Occurred())) {
            sj_err_clear();
            return NULL;
        }
        return sym_const(c->env, x);
    }
    return NULL;
}

Var *symb_binary(Capture *c, int nb, Var *a, Var *b, int *handled)
{
    *handled = 0;
    if (a->kind != VK_SYMINT && b->kind != VK_SYMINT)
        return NULL;
    SymNode *x = symb_node_of(c, a), *y = symb_node_of(c, b);
    if (!x || !y)
        return NULL;   /* a float or another type: the caller specialises */
    SymEnv *env = c->env;
    SymNode *r;
    switch (nb) {
    case SJ_NB_ADD:
    case SJ_NB_INPLACE_ADD:
        r = sym_add(env, x, y);
        break;
    case SJ_NB_SUBTRACT:
    case SJ_NB_INPLACE_SUBTRACT:
        r = sym_sub(env, x, y);
        break;
    case SJ_NB_MULTIPLY:
    case SJ_NB_INPLACE_MULTIPLY:
        r = sym_mul(env, x, y);
        break;
    case SJ_NB_FLOOR_DIVIDE:
    case SJ_NB_INPLACE_FLOOR_DIVIDE:
    case SJ_NB_REMAINDER:
    case SJ_NB_INPLACE_REMAINDER: {
        /* a divisor that can be 0 under the guards: branch on it (guarded) and raise as
         * Python does when it is, before any simplification (s0 % s0 is 0 only if s0 != 0) */
        int nz = y->kind == SK_CONST ? y->value != 0 : 0;
        if (y->kind != SK_CONST && symb_decide(c, sym_ne(env, y, sym_const(env, 0)), &nz) < 0)
            goto fail;
        if (!nz) {
            PyErr_SetString(PyExc_ZeroDivisionError, "integer division or modulo by zero");
            goto fail;
        }
        int fd = nb == SJ_NB_FLOOR_DIVIDE || nb == SJ_NB_INPLACE_FLOOR_DIVIDE;
        r = fd ? sym_floordiv(env, x, y) : sym_mod(env, x, y);
        break;
    }
    default:
        return NULL;
    }
    *handled = 1;
    if (!r)
        goto fail;
    return symb_var(c, r);
fail:
    *handled = 1;
    cap_fail_exc(c, BR_USER_EXCEPTION);
    return NULL;
}

Var *symb_compare(Capture *c, int cmp, Var *a, Var *b, int *handled)
{
    *handled = 0;
    if (a->kind != VK_SYMINT && b->kind != VK_SYMINT)
        return NULL;
    SymNode *x = symb_node_of(c, a), *y = symb_node_of(c, b);
    if (!x || !y)
        return NULL;
    SymEnv *env = c->env;
    SymNode *r;
    switch (cmp) {
    case SJ_CMP_LT:
        r = sym_lt(env, x, y);
        break;
    case SJ_CMP_LE:
        r = sym_le(env, x, y);
        break;
    case SJ_CMP_EQ:
        r = sym_eq(env, x, y);
        break;
    case SJ_CMP_NE:
        r = sym_ne(env, x, y);
        break;
    case SJ_CMP_GT:
        r = sym_gt(env, x, y);
        break;
    case SJ_CMP_GE:
        r = sym_ge(env, x, y);
        break;
    default:
        return NULL;
    }
    *handled = 1;
    if (r && sym_is_bool(r) && sym_static_truth(env, r) == SYM_UNKNOWN && sym_has_unbacked(r)) {
        /* a relation on data-dependent values stays a symbolic bool: a branch on it
         * breaks the graph, shapejit.check(rel) asserts it at run time */
        Var *v = var_new(c, VK_SYMINT);
        if (v)
            v->u.s.e = r;
        return v;
    }
    int t;
    if (!r || symb_decide(c, r, &t) < 0) {
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    return var_const(c, t ? Py_True : Py_False);
}

/* ---------------------------------------------------------- run time ---- */

static PyObject *size_fn;   /* strong: _C._size_of, set by symb_init_module */

static int32_t symb_size_node(Capture *c, OpId op, PyObject *target, const int32_t *vals, const SymNode *const *consts,
                              int n)
{
    int32_t first = graph_pool(c->g, n);
    if (first < 0)
        return -1;
    for (int i = 0; i < n; i++) {
        Arg a = {ARG_VALUE, vals[i], 0};
        if (vals[i] < 0) {
            PyObject *k = PyLong_FromLongLong(consts[i]->value);
            a.kind = ARG_CONST;
            a.a = k ? graph_const(c->g, k) : -1;
            Py_XDECREF(k);
            if (a.a < 0)
                return -1;
        }
        c->g->pool[first + i] = a;
    }
    int32_t v = cap_scalar_node(c, op, target, first, n);
    if (v >= 0)
        c->nops++;   /* size work at run time is work: the frame gets a graph, as in torch */
    return v;
}

static PyObject *builtin_obj(const char *name)
{
    PyObject *b = PyEval_GetBuiltins();   /* borrowed */
    return b ? PyDict_GetItemString(b, name) : NULL;
}

static PyObject *operator_fn(const char *name)
{
    static PyObject *op;
    if (!op && !(op = PyImport_ImportModule("operator")))
        return NULL;
    PyObject *f = PyObject_GetAttrString(op, name);
    Py_XDECREF(f);   /* the operator module keeps it alive */
    return f;
}

int32_t symb_materialize(Capture *c, SymNode *e)
{
    PyObject *key = PyLong_FromVoidPtr(e);
    if (!key)
        return -1;
    PyObject *hit = PyDict_GetItemWithError(c->symvals, key);
    if (hit) {
        Py_DECREF(key);
        return (int32_t)PyLong_AsLong(hit);
    }
    int32_t v = -1;
    switch ((SymKind)e->kind) {
    case SK_SYMBOL:
    case SK_UNBACKED: {
        SymInfo *si = &c->shape.syms[e->slot];
        if (si->value >= 0) {
            v = si->value;
            break;
        }
        if (!size_fn) {
            PyErr_SetString(PyExc_SystemError, "shapejit: _C._size_of is not registered");
            break;
        }
        int32_t vals[2] = {si->tensor_value, -1};
        SymNode *dim = sym_const(c->env, si->dim);
        const SymNode *consts[2] = {NULL, dim};
        v = dim ? symb_size_node(c, OP_SYM_SIZE, size_fn, vals, consts, 2) : -1;
        si->value = v;
        break;
    }
    case SK_ADD:
    case SK_MUL:
    case SK_MIN:
    case SK_MAX:
    case SK_FLOORDIV:
    case SK_MOD: {
        static const struct {
            SymKind k;
            OpId op;
            const char *fn;
            int builtin;
        } map[] = {
            {SK_ADD, OP_SYM_ADD, "add", 0},
            {SK_MUL, OP_SYM_MUL, "mul", 0},
            {SK_FLOORDIV, OP_SYM_FLOORDIV, "floordiv", 0},
            {SK_MOD, OP_SYM_MOD, "mod", 0},
            {SK_MIN, OP_SYM_MIN, "min", 1},
            {SK_MAX, OP_SYM_MAX, "max", 1},
        };
        size_t m = 0;
        while (map[m].k != e->kind)
            m++;
        PyObject *target = map[m].builtin ? builtin_obj(map[m].fn) : operator_fn(map[m].fn);
        if (!target)
            break;
        /* left fold for the n-ary kinds; min/max take every operand at once */
        int32_t acc = -1;
        const SymNode *acc_const = NULL;
        uint32_t n = e->nargs;
        if (map[m].builtin) {
            int32_t *vals = PyMem_Calloc(n, sizeof(int32_t));
            const SymNode **cs = PyMem_Calloc(n, sizeof(SymNode *));
            if (!vals || !cs) {
                PyMem_Free(vals);
                PyMem_Free(cs);
                PyErr_NoMemory();
                break;
            }
            int ok = 1;
            for (uint32_t i = 0; i < n && ok; i++) {
                cs[i] = e->args[i];
                vals[i] = e->args[i]->kind == SK_CONST ? -1 : symb_materialize(c, e->args[i]);
                ok = e->args[i]->kind == SK_CONST || vals[i] >= 0;
            }
            v = ok ? symb_size_node(c, map[m].op, target, vals, cs, (int)n) : -1;
            PyMem_Free(vals);
            PyMem_Free(cs);
            break;
        }
        for (uint32_t i = 0; i < n; i++) {
            int32_t x = e->args[i]->kind == SK_CONST ? -1 : symb_materialize(c, e->args[i]);
            if (e->args[i]->kind != SK_CONST && x < 0) {
                acc = -2;
                break;
            }
            if (i == 0) {
                acc = x;
                acc_const = e->args[i];
                continue;
            }
            int32_t vals[2] = {acc, x};
            const SymNode *cs[2] = {acc_const, e->args[i]};
            acc = symb_size_node(c, map[m].op, target, vals, cs, 2);
            acc_const = NULL;
            if (acc < 0) {
                acc = -2;
                break;
            }
        }
        v = acc >= 0 ? acc : -1;
        break;
    }
    case SK_EQ:
    case SK_NE:
    case SK_LT:
    case SK_LE: {
        /* a relation the capture could not decide (it depends on data): its truth at run
         * time, for the interpreter to branch on after a graph break */
        PyObject *target = operator_fn(e->kind == SK_EQ   ? "eq"
                                       : e->kind == SK_NE ? "ne"
                                       : e->kind == SK_LT ? "lt"
                                                          : "le");
        int32_t vals[2];
        const SymNode *cs[2] = {e->args[0], e->args[1]};
        for (int i = 0; i < 2; i++)
            vals[i] = e->args[i]->kind == SK_CONST ? -1 : symb_materialize(c, e->args[i]);
        if (target && (vals[0] >= 0 || e->args[0]->kind == SK_CONST) && (vals[1] >= 0 || e->args[1]->kind == SK_CONST))
            v = symb_size_node(c, OP_SYM_CMP, target, vals, cs, 2);
        break;
    }
    default:
        PyErr_Format(PyExc_TypeError, "shapejit: cannot compute a %s at run time", sym_kind_name((SymKind)e->kind));
        break;
    }
    if (v >= 0) {
        PyObject *val = PyLong_FromLong(v);
        if (!val || PyDict_SetItem(c->symvals, key, val) < 0)
            v = -1;
        Py_XDECREF(val);
    }
    Py_DECREF(key);
    if (v < 0 && !cap_failed(c))
        cap_fail_exc(c, BR_INTERNAL);
    return v;
}

/* -------------------------------------------------------------- finish ---- */

/* The text of a source in a shape guard: its repr (borrowed). */
static PyObject *guard_src_name(void *ctx, int32_t src)
{
    return sources_repr(&((Capture *)ctx)->src, src);
}

/* One SHAPE_ENV leaf checking text's relation with program (shapes/env.h's format). */
static int add_shape_guard(void *ctx, PyObject *program, const int32_t *srcs, int32_t nsrcs, PyObject *text,
                           PyObject *where)
{
    Capture *c = ctx;
    PyObject *exp = PyTuple_Pack(2, program, text);
    if (!exp)
        return -1;
    Guard g;
    memset(&g, 0, sizeof g);
    g.kind = GK_SHAPE_ENV;
    /* filed under its deepest source, so it runs after the tensors it reads are matched */
    g.src = srcs[0];
    for (int32_t i = 1; i < nsrcs; i++)
        if (srcs[i] > g.src)
            g.src = srcs[i];
    g.src2 = -1;
    g.expected = exp;
    g.srcs = (int32_t *)srcs;   /* guards_add copies them */
    g.nsrcs = nsrcs;
    g.where = where != Py_None ? where : NULL;
    int r = guards_add(&c->guards, &g);
    Py_DECREF(exp);
    return r;
}

int symb_finish(Capture *c, PyObject **violation)
{
    *violation = NULL;
    if (c->violations && PyList_GET_SIZE(c->violations) > 0) {
        PyObject *body = sj_join("\n", Py_NewRef(c->violations));   /* the new reference stolen */
        if (!body)
            return -1;
        *violation = PyUnicode_FromFormat(
            "Constraints violated! For more information, run with TORCH_LOGS=\"+dynamic\".\n%U", body);
        Py_DECREF(body);
        return *violation ? 0 : -1;
    }
    return shape_env_compile_guards(&c->shape, guard_src_name, add_shape_guard, c);
}

/* -------------------------------------------------- eager_then_compile ---- */

int symb_record_call(CodeState *st, PyCodeObject *co, PyObject *const *locals)
{
    if (!sj_config.automatic_dynamic_shapes)
        return 0;
    if (!st->fstate && !(st->fstate = PyDict_New()))
        return -1;
    /* names from a source table, so that they are the ones capture will look up */
    SourceTable names = {0};
    int rc = 0;
    int nargs = co->co_argcount + co->co_kwonlyargcount;
    for (int i = 0; i < nargs && rc == 0; i++) {
        PyObject *v = locals[i];   /* borrowed */
        if (!v)
            continue;
        TensorMeta m;
        const char *why;
        int r = meta_from_value(v, &m, NULL, &why);
        if (r != 0 || m.np_scalar) {
            rc = r < 0 ? -1 : 0;
            continue;   /* not a tensor (ints too: torch's eager call records tensors only) */
        }
        int32_t src = sources_add(&names, SRC_LOCAL, -1, i, PyTuple_GET_ITEM(co->co_localsplusnames, i), NULL);
        PyObject *now = src >= 0 ? sizes_list(&m) : NULL;
        rc = now ? PyDict_SetItem(st->fstate, sources_repr(&names, src), now) : -1;
        Py_XDECREF(now);
    }
    sources_clear(&names);
    return rc;
}

/* ------------------------------------------------------------------ PGO ---- */

/* The PGO store's policy p (a new reference), or NULL (unset, or not enabled: no job id in
 * the environment). */
static PyObject *pgo_fn(Policy p)
{
    const char *job = getenv("TORCH_COMPILE_JOB_ID");
    if (!job || !*job)
        return NULL;
    return Py_XNewRef(policy_get(p));
}

/* After a call into the PGO store: it warns about its own problems (a bad file, a server
 * down) and returns normally, so an exception here is a fault of the store's code: shown
 * as an unraisable exception (not lost), and compiling goes on. */
static void pgo_call_done(const char *what)
{
    if (!PyErr_Occurred())
        return;
    PyObject *name =
        sj_err_is_interrupt() ? NULL : PyUnicode_FromFormat("shapejit's PGO store (%s)", what);   /* strong */
    sj_err_unraisable(name);
    Py_XDECREF(name);
}

void symb_pgo_load(CodeState *st, PyCodeObject *co, PyObject *closure)
{
    if (st->fstate)
        return;
    PyObject *fn = pgo_fn(POLICY_PGO_LOAD);
    PyObject *r = fn ? PyObject_CallFunction(fn, "OiOO", co->co_filename, co->co_firstlineno, co->co_name,
                                             closure ? closure : Py_None)
                     : NULL;
    Py_XDECREF(fn);
    if (r && PyDict_Check(r))
        st->fstate = Py_NewRef(r);
    Py_XDECREF(r);
    pgo_call_done("load_frame_state");
}

void symb_pgo_save(CodeState *st, PyCodeObject *co, PyObject *closure)
{
    if (!st->fstate || PyDict_GET_SIZE(st->fstate) == 0)
        return;
    const char *job = getenv("TORCH_COMPILE_JOB_ID");
    if (!job || !*job)
        return;
    PyObject *et, *ev, *tb;   /* the compile's own error (if any) reaches the user intact */
    PyErr_Fetch(&et, &ev, &tb);
    PyObject *fn = pgo_fn(POLICY_PGO_SAVE);
    PyObject *r = fn ? PyObject_CallFunction(fn, "OiOOO", co->co_filename, co->co_firstlineno, co->co_name, st->fstate,
                                             closure ? closure : Py_None)
                     : NULL;
    Py_XDECREF(fn);
    Py_XDECREF(r);
    pgo_call_done("save_frame_state");
    PyErr_Restore(et, ev, tb);
}

/* _C._size_of(x, d): x.size(d) for tensors, x.shape[d] for arrays (the run-time read of a
 * size symbol). */
static PyObject *size_of(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    (void)self;
    if (n != 2) {
        PyErr_SetString(PyExc_TypeError, "_size_of(x, dim)");
        return NULL;
    }
    PyObject *shape = PyObject_GetAttrString(args[0], "shape");
    if (!shape)
        return NULL;
    PyObject *r = PyObject_GetItem(shape, args[1]);
    Py_DECREF(shape);
    return r;
}

static PyMethodDef symb_methods[] = {
    {"_size_of", (PyCFunction)(void (*)(void))size_of, METH_FASTCALL, "x.shape[d] (run-time size read)"},
    {NULL, NULL, 0, NULL},
};

int symb_init_module(PyObject *m)
{
    SjConstraintViolation = PyErr_NewException("shapejit._C.ConstraintViolationError", PyExc_RuntimeError, NULL);
    if (!SjConstraintViolation || PyModule_AddObjectRef(m, "ConstraintViolationError", SjConstraintViolation) < 0 ||
        PyModule_AddFunctions(m, symb_methods) < 0)
        return -1;
    /* the graphs call the module's own function object (the target of their size reads) */
    Py_XSETREF(size_fn, PyObject_GetAttrString(m, "_size_of"));
    return size_fn ? 0 : -1;
}
