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

#define MAX_CANDS 32
#define NPROBES 5
#define NREQUIRED 3   /* probes 0..2 must run; the others are skipped when refused */

/* One run of the operator on stand-ins: probe 0 gives every size its hint, the others
 * other values (probe_values), so that sizes of the results can be matched to the
 * arguments'. */
typedef struct {
    Capture *c;
    int probe;
    const int64_t *vals;          /* per symbol slot: its value in this probe */
    int symbolic;                 /* an argument has a symbolic size */
    int ntensors;                 /* tensors among the arguments (nested ones too) */
    SymNode *cands[MAX_CANDS];    /* the arguments' symbolic sizes and ints, distinct */
    int ncands;
} Probe;

static void add_cand(Probe *p, SymNode *e)
{
    p->symbolic = 1;
    for (int i = 0; i < p->ncands; i++)
        if (p->cands[i] == e)
            return;
    if (p->ncands < MAX_CANDS)
        p->cands[p->ncands++] = e;
}

/* e's value in probe p: 0, or 1 with *why set (e depends on data), -1 with an exception. */
static int probe_value(Probe *p, SymNode *e, int64_t *out, const char **why)
{
    if (sym_has_unbacked(e)) {
        *why = "a size that depends on data";
        return 1;
    }
    if (p->probe == 0)
        add_cand(p, e);
    return p->probe == 0 ? sym_eval_hint(p->c->env, e, out) : sym_eval_with(p->c->env, e, p->vals, NULL, out);
}

/* New reference: the stand-in of argument a for probe p, or NULL: with *why set (a static
 * string) when a is not an argument this path takes, else with an exception. */
static PyObject *standin_of(Probe *p, Var *a, const char **why, int depth)
{
    if (a->kind == VK_TENSOR) {
        if (a->u.t.meta.lib != LIB_TORCH) {
            *why = "a numpy array";
            return NULL;
        }
        TensorMeta m = a->u.t.meta;
        int any = 0;
        p->ntensors++;
        for (int d = 0; d < m.ndim; d++)
            if (m.sym[d]) {
                int r = probe_value(p, m.sym[d], &m.size[d], why);
                if (r)
                    return NULL;
                any = 1;
            }
        if (any && p->probe == 0) {   /* its element count, what a flattening op gives */
            SymEnv *env = p->c->env;
            SymNode *numel = sym_const(env, 1);
            for (int d = 0; numel && d < m.ndim; d++)
                numel = sym_mul(env, numel, m.sym[d] ? m.sym[d] : sym_const(env, m.size[d]));
            if (!numel)
                return NULL;
            add_cand(p, numel);
        }
        return cap_meta_standin(&m);
    }
    if (var_deep_const(a))
        return var_to_py(p->c, a);   /* a constant, a list of ints included */
    if (a->kind == VK_LIST || a->kind == VK_TUPLE) {
        if (depth >= 4) {
            *why = "sequences nested this deep";
            return NULL;
        }
        PyObject *seq = a->kind == VK_LIST ? PyList_New(a->u.seq.n) : PyTuple_New(a->u.seq.n);
        for (int32_t i = 0; seq && i < a->u.seq.n; i++) {
            PyObject *s = standin_of(p, a->u.seq.items[i], why, depth + 1);
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
        int64_t v;
        return probe_value(p, a->u.s.e, &v, why) ? NULL : PyLong_FromLongLong(v);
    }
    if (!var_is_const(a)) {
        *why = "an argument that is not a tensor or a constant";
        return NULL;
    }
    return var_to_py(p->c, a);
}

/* New reference: the tuple of stand-ins of args for probe p, or NULL (as standin_of). */
static PyObject *standins_for(Probe *p, Var **args, int32_t nargs, const char **why)
{
    PyObject *standins = PyTuple_New(nargs);
    for (int32_t i = 0; standins && i < nargs; i++) {
        PyObject *s = standin_of(p, args[i], why, 0);
        if (!s) {
            Py_CLEAR(standins);
            break;
        }
        PyTuple_SET_ITEM(standins, i, s);
    }
    return standins;
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

/* Probe p (> 0) of op: the sizes of its results in sizes[i * SJ_MAX_RANK + d]. 0; 1 with
 * *why set when the operator refuses those sizes or gives results of another form; -1
 * with an exception (an interrupt). */
static int run_probe(Probe *p, PyObject *op, Var **args, int32_t nargs, int32_t npos, PyObject *kwnames,
                     const TensorMeta *outs, int32_t nout, int64_t *sizes, const char **why)
{
    PyObject *standins = standins_for(p, args, nargs, why);
    if (!standins)
        return *why ? 1 : -1;
    PyObject *out = cap_standin_call(p->c, op, &PyTuple_GET_ITEM(standins, 0), npos, kwnames);
    if (!out) {
        Py_DECREF(standins);
        if (sj_err_is_interrupt())
            return -1;
        sj_err_clear();
        *why = "its fake implementation refuses other values of the symbolic sizes";
        return 1;
    }
    TensorMeta m[SJ_MAX_OUTS];
    int32_t n = 0;
    VarKind seq;
    int r = read_results(out, standins, m, &n, &seq, why);
    Py_DECREF(out);
    Py_DECREF(standins);
    if (r)
        return r;
    for (int32_t i = 0; i < nout; i++) {
        if (n != nout || m[i].ndim != outs[i].ndim || m[i].dtype != outs[i].dtype) {
            *why = "its results change form with the symbolic sizes";
            return 1;
        }
        for (int d = 0; d < m[i].ndim; d++)
            sizes[i * SJ_MAX_RANK + d] = m[i].size[d];
    }
    return 0;
}

/* The value of every symbol in probe k > 0: 2 and 3 times its hint (multiples keep the
 * divisibility the hints have), then half of it and 1000 times it (sizes clamped by the
 * operator from above or below show there); the hint + k where that leaves the symbol's
 * range. 0, or 1 when no value fits. */
static int probe_values(SymEnv *env, int k, int64_t *vals)
{
    for (int32_t i = 0; i < sym_env_nsymbols(env); i++) {
        const SymNode *s = sym_env_symbol_at(env, i);
        vals[i] = 0;
        if (!s || s->kind != SK_SYMBOL)
            continue;   /* unbacked: no argument of the call has one (probe_value) */
        int64_t h = s->hint;
        int64_t v = k == 1 ? 2 * h : k == 2 ? 3 * h : k == 3 ? h / 2 : 1000 * h;
        if (v < s->range.lo || v > s->range.hi || v == h)
            v = h + k;
        if (v < s->range.lo || v > s->range.hi)
            return 1;
        vals[i] = v;
    }
    return 0;
}

/* Sizes of the results under symbolic arguments. Each size becomes the first argument size
 * or int whose value it equals in every probe, or a constant when it is one in every probe,
 * and the graph asserts at run time that the real result has it (an unbacked symbol read
 * from the result, equal to the expression): the probes see a few points of the fake
 * implementation, the assertion stops a wrong guess with an error naming the call instead
 * of letting later steps read the result with the wrong size. A size matching neither
 * is an unbacked symbol read from the result, like nonzero's rows. exprs[i * SJ_MAX_RANK +
 * d] gets the expression, NULL for an unbacked size. 0; 1 with *why set; -1. */
static int symbolic_sizes(Probe *p0, PyObject *op, Var **args, int32_t nargs, int32_t npos, PyObject *kwnames,
                          TensorMeta *outs, int32_t nout, SymNode **exprs, const char **why)
{
    Capture *c = p0->c;
    SymEnv *env = c->env;
    int32_t nsyms = sym_env_nsymbols(env);
    int64_t *vals[NPROBES] = {NULL};
    int64_t *sizes[NPROBES] = {NULL};
    int ran[NPROBES] = {1};
    for (int k = 1; k < NPROBES; k++) {
        vals[k] = cap_alloc(c, sizeof(int64_t) * (size_t)(nsyms + 1));
        sizes[k] = cap_alloc(c, sizeof(int64_t) * SJ_MAX_OUTS * SJ_MAX_RANK);
        if (!vals[k] || !sizes[k])
            return -1;
        const char *pwhy = NULL;
        int r = 1;
        if (probe_values(env, k, vals[k]) == 0) {
            Probe p = {.c = c, .probe = k, .vals = vals[k]};
            r = run_probe(&p, op, args, nargs, npos, kwnames, outs, nout, sizes[k], &pwhy);
        } else {
            pwhy = "a symbolic size whose range leaves no other value to probe";
        }
        if (r < 0 || (r > 0 && k < NREQUIRED)) {
            *why = pwhy;
            return r;
        }
        ran[k] = r == 0;
    }
    for (int32_t i = 0; i < nout; i++)
        for (int d = 0; d < outs[i].ndim; d++) {
            int64_t at[NPROBES];
            at[0] = outs[i].size[d];
            for (int k = 1; k < NPROBES; k++)
                at[k] = ran[k] ? sizes[k][i * SJ_MAX_RANK + d] : 0;
            int same = 1;
            for (int k = 1; k < NPROBES; k++)
                same &= !ran[k] || at[k] == at[0];
            SymNode *e = same ? sym_const(env, at[0]) : NULL;
            for (int j = 0; !e && j < p0->ncands; j++) {
                int match = 1;
                for (int k = 0; match && k < NPROBES; k++) {
                    int64_t x;
                    if (!ran[k])
                        continue;
                    if ((k == 0 ? sym_eval_hint(env, p0->cands[j], &x)
                                : sym_eval_with(env, p0->cands[j], vals[k], NULL, &x)) < 0)
                        return -1;
                    match = x == at[k];
                }
                if (match)
                    e = p0->cands[j];
            }
            exprs[i * SJ_MAX_RANK + d] = e;
            if (!e)
                outs[i].size[d] = SJ_UNBACKED_HINT;
            else if (e->kind != SK_CONST)
                outs[i].sym[d] = e;
        }
    return 0;
}

/* After the node: each result size of a symbolic call read at run time, asserted equal to
 * its expression or made an unbacked symbol of the result. 0 or -1 (failure recorded). */
static int bind_sizes(Capture *c, Var *res, int32_t nout, SymNode **exprs)
{
    for (int32_t i = 0; i < nout; i++) {
        Var *t = nout == 1 && res->kind == VK_TENSOR ? res : res->u.seq.items[i];
        int32_t v = t->u.t.value;
        for (int d = 0; d < t->u.t.meta.ndim; d++) {
            SymNode *e = exprs[i * SJ_MAX_RANK + d];
            SymNode *u = symb_unbacked(c, -1, v, d, (SymRange){0, SYM_INT_OO});
            if (!u)
                return cap_fail_exc(c, BR_INTERNAL);
            if (!e) {
                t->u.t.meta.sym[d] = c->g->values[v].meta.sym[d] = u;
                continue;
            }
            SymNode *rel = sym_eq(c->env, u, e);
            if (!rel || symb_runtime_assert(c, rel) < 0)
                return cap_fail_exc(c, BR_INTERNAL);
        }
    }
    return 0;
}

Var *library_op_call(Capture *c, PyObject *fn, Var **args, int32_t nargs, PyObject *kwnames)
{
    int32_t nkw = kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0;
    int32_t npos = nargs - nkw;
    Probe p0 = {.c = c, .probe = 0};
    const char *why = NULL;
    PyObject *standins = standins_for(&p0, args, nargs, &why);
    if (!standins)
        return why ? refuse(c, fn, why) : fail_internal(c);
    if (p0.ntensors == 0) {
        /* nothing would send the call to the meta kernels: the run at capture would be the
         * real kernel, its draws and side effects one more time than eager's */
        Py_DECREF(standins);
        return refuse(c, fn, "no tensor argument (a run at capture would call the operator's real kernel)");
    }
    if (p0.symbolic && !c->env) {
        Py_DECREF(standins);
        PyErr_SetString(PyExc_SystemError, "shapejit: symbolic sizes without a symbol environment");
        return fail_internal(c);
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
    int bad = read_results(out, standins, outs, &nout, &seq, &why);
    Py_DECREF(out);
    Py_DECREF(standins);
    SymNode *exprs[SJ_MAX_OUTS * SJ_MAX_RANK];
    if (!bad && p0.symbolic)
        bad = symbolic_sizes(&p0, op, args, nargs, npos, kwnames, outs, nout, exprs, &why);
    if (bad) {
        if (bad > 0)
            refuse(c, op, why);
        else if (!cap_failed(c))
            cap_fail_exc(c, BR_INTERNAL);
        Py_DECREF(op);
        return NULL;
    }
    if (!cap_keep_steal(c, op))
        return fail_internal(c);
    /* the node: op(*args, **kwargs), an eager step */
    Var *res = cap_opaque_node(c, OP_LIBRARY_OP, op, args, nargs, kwnames, outs, nout, seq);
    if (res && p0.symbolic && bind_sizes(c, res, nout, exprs) < 0)
        return NULL;
    return res;
}
