/* shapes_infer's dispatch table (generated from ops.def) and the helpers the rule families
 * share: reading constant arguments, dim wraparound, broadcasting. */
#include "../vocab/np.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "rules.h"
#include "rules_util.h"
#include "sym.h"
#include "../core/errors.h"

SymRuleCtx *sj_symctx;

static const ShapeRule rule_table[OP_COUNT] = {
#define X(e, name, kind, rule) [e] = rule,
#include "../vocab/ops.def"
#undef X
};

int shapes_infer(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    if ((int)op < 0 || op >= OP_COUNT)
        return sj_err(err, "bad op id %d", (int)op);
    err->msg[0] = 0;
    int cap = *nout;
    int symbolic = shapes_rule_is_symbolic(op);
    if (!symbolic && shapes_args_symbolic(b))
        return 1;
    /* rules fill the fields they compute (many write only ndim, size and sym through
     * sj_broadcast): the rest starts as a plain tensor's, never as the caller's stack */
    if (cap > 0)
        memset(out, 0, sizeof *out * (size_t)cap);
    int r = rule_table[op](op, lib, b, out, nout, err);
    if (r == 0 && (!symbolic || !sj_symctx))   /* only symbolic rules produce symbols */
        for (int i = 0; i < *nout && i < cap; i++)
            memset(out[i].sym, 0, sizeof out[i].sym);
    if (r == 0 && (*nout < 0 || *nout > cap))
        return sj_err(err, "%s: rule produced %d outputs", op_info[op].name, *nout);
    if (r != 0 && !err->msg[0])
        sj_err(err, "%s: not supported", op_info[op].name);
    if (r == 0 && lib == LIB_TORCH) {
        /* autograd tracks floating results of differentiable ops on tracked inputs; the
         * evaluator clears this under no_grad */
        int rg = op_info[op].kind != OPK_FACTORY && op != OP_DETACH && sj_requires_grad(b);
        for (int i = 0; i < *nout; i++)
            out[i].requires_grad =
                (unsigned char)(out[i].requires_grad || (rg && dtype_info[out[i].dtype].category >= CAT_FLOAT));
        if (op == OP_DETACH)
            for (int i = 0; i < *nout; i++)
                out[i].requires_grad = 0;
    }
    return r;
}

void sj_meta(TensorMeta *out, Lib lib, DType dt)
{
    memset(out, 0, sizeof *out);
    out->lib = (unsigned char)lib;
    out->dtype = (unsigned char)dt;
}

const TensorMeta *sj_tensor(const BoundArgs *b, const char *name, ShapeErr *err)
{
    const BoundArg *a = ba_get(b, name);
    if (!a) {
        sj_err(err, "argument '%s' is required", name);
        return NULL;
    }
    if (a->kind != BA_TENSOR) {
        sj_err(err, "argument '%s' must be a tensor", name);
        return NULL;
    }
    return a->meta;
}

/* sj_int without the specialisation of a symbolic int (the hint is read). */
static int int_value(const BoundArg *a, const char *what, int64_t *out, ShapeErr *err)
{
    if (!a || a->kind != BA_CONST)
        return sj_err(err, "%s must be a constant int", what);
    PyObject *v = a->value;    /* borrowed */
    if (PyBool_Check(v) || PyFloat_Check(v) || !PyIndex_Check(v))
        return sj_err(err, "%s must be an int, not %.50s", what, Py_TYPE(v)->tp_name);
    PyObject *idx = PyNumber_Index(v);    /* new */
    if (!idx) {
        sj_err_clear();
        return sj_err(err, "%s must be an int", what);
    }
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(idx, &overflow);
    Py_DECREF(idx);
    if ((x == -1 && PyErr_Occurred()) || overflow) {
        sj_err_clear();
        return sj_err(err, "%s is out of range", what);
    }
    *out = x;
    return 0;
}

int sj_int(const BoundArg *a, const char *what, int64_t *out, ShapeErr *err)
{
    if (int_value(a, what, out, err))
        return -1;
    /* a rule that reads the value of a symbolic int relies on it: guard it */
    return a->sym && sj_symctx ? sj_pin(a->sym, out, err) : 0;
}

int sj_int_sym(const BoundArg *a, const char *what, int64_t *out, SymNode **sym, ShapeErr *err)
{
    *sym = NULL;
    if (int_value(a, what, out, err))
        return -1;
    *sym = sj_symctx ? a->sym : NULL;
    return 0;
}

int sj_get_int(const BoundArgs *b, const char *name, int64_t dflt, int64_t *out, ShapeErr *err)
{
    const BoundArg *a = ba_get(b, name);
    if (!a) {
        *out = dflt;
        return 0;
    }
    return sj_int(a, name, out, err);
}

int sj_get_bool(const BoundArgs *b, const char *name, int dflt, int *out, ShapeErr *err)
{
    const BoundArg *a = ba_get(b, name);
    if (!a) {
        *out = dflt;
        return 0;
    }
    if (a->kind != BA_CONST || a->data)
        return sj_err(err, "%s must be a constant", name);
    if (a->sym && sj_symctx) {
        /* a symbolic int used as a flag: its truth is decided by the hint and guarded */
        SymNode *zero = sym_const(sj_symctx->env, 0);
        return zero ? sj_decide(sym_ne(sj_symctx->env, a->sym, zero), out, err) : sj_sym_error(err);
    }
    int t = PyObject_IsTrue(a->value);
    if (t < 0) {
        sj_err_clear();
        return sj_err(err, "%s must be a bool", name);
    }
    *out = t;
    return 0;
}

int sj_get_float(const BoundArgs *b, const char *name, double dflt, double *out, ShapeErr *err)
{
    const BoundArg *a = ba_get(b, name);
    if (!a) {
        *out = dflt;
        return 0;
    }
    if (a->kind != BA_CONST || a->data || !(PyFloat_Check(a->value) || PyLong_Check(a->value)))
        return sj_err(err, "%s must be a constant number", name);
    if (a->sym && sj_symctx) {
        int64_t h;   /* a symbolic int read as a number: specialised to its hint, guarded */
        if (sj_pin(a->sym, &h, err) < 0)
            return -1;
        *out = (double)h;
        return 0;
    }
    double v = PyFloat_AsDouble(a->value);
    if (v == -1.0 && PyErr_Occurred()) {
        sj_err_clear();
        return sj_err(err, "%s must be a number", name);
    }
    *out = v;
    return 0;
}

/* Appends the ints of one constant (an int or a sequence of ints). */
static int ints_of_const(PyObject *v, const char *what, int64_t *out, int *n, int max, ShapeErr *err)
{
    BoundArg tmp = {BA_CONST, NULL, NULL, 0, NULL, NULL, NULL, 0};
    if (PyTuple_Check(v) || PyList_Check(v)) {
        /* torch.Size is a tuple subclass, so it lands here too */
        Py_ssize_t len = PySequence_Fast_GET_SIZE(v);
        for (Py_ssize_t i = 0; i < len; i++) {
            if (*n >= max)
                return sj_err(err, "%s has too many entries", what);
            tmp.value = PySequence_Fast_GET_ITEM(v, i);    /* borrowed */
            if (sj_int(&tmp, what, &out[*n], err))
                return -1;
            (*n)++;
        }
        return 0;
    }
    if (*n >= max)
        return sj_err(err, "%s has too many entries", what);
    tmp.value = v;
    if (sj_int(&tmp, what, &out[*n], err))
        return -1;
    (*n)++;
    return 0;
}

/* sj_int_list; pin: specialise symbolic items (sj_int) or only read their hints. */
static int int_list(const BoundArg *a, const char *what, int64_t *out, int *n, int max, int pin, ShapeErr *err)
{
    *n = 0;
    if (!a)
        return sj_err(err, "%s is required", what);
    if (a->kind == BA_CONST && a->sym) {
        /* one symbolic int (ints_of_const would read only its hint) */
        if ((pin ? sj_int : int_value)(a, what, &out[0], err))
            return -1;
        *n = 1;
        return 0;
    }
    if (a->kind == BA_CONST)
        return ints_of_const(a->value, what, out, n, max, err);
    if (a->kind == BA_LIST) {
        if (a->n == 1 && a->items[0].kind == BA_CONST &&
            (PyTuple_Check(a->items[0].value) || PyList_Check(a->items[0].value)))
            return ints_of_const(a->items[0].value, what, out, n, max, err);
        for (int i = 0; i < a->n; i++) {
            if (*n >= max)
                return sj_err(err, "%s has too many entries", what);
            if (a->items[i].kind != BA_CONST)
                return sj_err(err,
                              "%s must be constant ints (data-dependent sizes are "
                              "not supported)",
                              what);
            if ((pin ? sj_int : int_value)(&a->items[i], what, &out[*n], err))
                return -1;
            (*n)++;
        }
        return 0;
    }
    return sj_err(err, "%s must be constant ints (data-dependent sizes are not supported)", what);
}

int sj_int_list(const BoundArg *a, const char *what, int64_t *out, int *n, int max, ShapeErr *err)
{
    return int_list(a, what, out, n, max, 1, err);
}

int sj_int_tuple(const BoundArgs *b, const char *name, int64_t dflt, int n, int64_t *v, ShapeErr *err)
{
    const BoundArg *a = ba_get(b, name);
    if (!a) {
        for (int i = 0; i < n; i++)
            v[i] = dflt;
        return 0;
    }
    int64_t tmp[SJ_MAX_RANK];
    int m;
    if (sj_int_list(a, name, tmp, &m, SJ_MAX_RANK, err))
        return -1;
    if (m != 1 && m != n)
        return sj_err(err, "%s must be an int or a tuple of %d ints", name, n);
    for (int i = 0; i < n; i++)
        v[i] = tmp[m == 1 ? 0 : i];
    return 0;
}

int sj_dim(Lib lib, int64_t d, int ndim, int *out, ShapeErr *err)
{
    int span = (ndim == 0 && lib == LIB_TORCH) ? 1 : ndim;
    if (d < -span || d >= span) {
        if (lib == LIB_NUMPY)
            return sj_err(err, "axis %lld is out of bounds for array of dimension %d", (long long)d, ndim);
        return sj_err(err,
                      "Dimension out of range (expected to be in range of [%d, %d], "
                      "but got %lld)",
                      -span, span - 1, (long long)d);
    }
    *out = (int)(d < 0 ? d + span : d);
    return 0;
}

int sj_get_dim(const BoundArgs *b, const char *name, int64_t dflt, Lib lib, int ndim, int *out, ShapeErr *err)
{
    int64_t d;
    return sj_get_int(b, name, dflt, &d, err) || sj_dim(lib, d, ndim, out, err) ? -1 : 0;
}

const TensorMeta *sj_input_dim(const BoundArgs *b, Lib lib, const char *name, int64_t dflt, const char *msg, int *d,
                               ShapeErr *err)
{
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return NULL;
    if (msg && x->ndim == 0) {
        sj_err(err, "%s", msg);
        return NULL;
    }
    return sj_get_dim(b, name, dflt, lib, x->ndim, d, err) ? NULL : x;
}

int sj_tensor2(const BoundArgs *b, const char *n1, const TensorMeta **t1, const char *n2, const TensorMeta **t2,
               ShapeErr *err)
{
    *t1 = sj_tensor(b, n1, err);
    *t2 = *t1 ? sj_tensor(b, n2, err) : NULL;
    return *t2 ? 0 : -1;
}

int sj_passed_none(const BoundArgs *b, const char *name)
{
    for (int i = 0; i < b->n; i++)
        if (strcmp(b->names[i], name) == 0)
            return b->args[i].kind == BA_CONST && b->args[i].value == Py_None;
    return 0;
}

/* Broadcasting one dim: r (the result so far) against s. Static dims compare as numbers. A
 * symbolic dim is 1 or not by its hint, and equal to another dim by the hints; the
 * relation that decided is guarded (nothing is guarded when the ranges decide: a size
 * symbol is never 1). */
static int broadcast_dim(TensorMeta *r, int k, const TensorMeta *m, int j, int dim, ShapeErr *err)
{
    int64_t s = m->size[j];
    /* without an environment no dim is symbolic (rules for static shapes may hand in
     * metas whose sym[] they never set) */
    SymNode *ss = sj_symctx ? m->sym[j] : NULL, *rs = sj_symctx ? r->sym[k] : NULL;
    if (!ss && !rs) {
        if (s == r->size[k] || s == 1)
            return 0;
        if (r->size[k] == 1) {
            r->size[k] = s;
            return 0;
        }
        return sj_err(err, "shapes cannot be broadcast together: size %lld against %lld at dimension %d", (long long)s,
                      (long long)r->size[k], dim);
    }
    if (ss && ss == rs)
        return 0;
    int unbacked = (ss && sym_has_unbacked(ss)) || (rs && sym_has_unbacked(rs));
    int is1;
    if (ss) {
        if (sj_decide(sym_eq(sj_symctx->env, ss, sym_const(sj_symctx->env, 1)), &is1, err) < 0)
            return -1;
        if (is1)
            return 0;
    } else if (s == 1) {
        return 0;
    }
    if (rs) {
        if (sj_decide(sym_eq(sj_symctx->env, rs, sym_const(sj_symctx->env, 1)), &is1, err) < 0)
            return -1;
    } else {
        is1 = r->size[k] == 1;
    }
    if (is1) {
        r->size[k] = s;
        r->sym[k] = ss;
        return 0;
    }
    if (s != r->size[k] && !unbacked)
        return sj_err(err, "shapes cannot be broadcast together: size %lld against %lld at dimension %d", (long long)s,
                      (long long)r->size[k], dim);
    /* equal hints (or a size without one), different expressions: they must stay equal */
    SymNode *a = ss ? ss : sym_const(sj_symctx->env, s), *b = rs ? rs : sym_const(sj_symctx->env, r->size[k]);
    if (sj_require(sym_eq(sj_symctx->env, a, b), err) < 0)
        return -1;
    if (!ss || !rs) {
        r->sym[k] = NULL;   /* equal to a constant: the constant */
        r->size[k] = ss ? r->size[k] : s;
    }
    return 0;
}

int sj_broadcast(const TensorMeta *const *ins, int n, TensorMeta *out, ShapeErr *err)
{
    int nd = 0;
    for (int i = 0; i < n; i++)
        if (ins[i] && ins[i]->ndim > nd)
            nd = ins[i]->ndim;
    TensorMeta r;
    memset(&r, 0, sizeof r);
    for (int k = 0; k < nd; k++)
        r.size[k] = 1;
    unsigned seen = 0;   /* dims some input has reached: the first one is copied as is, so a
                            lone (even data-dependent) size needs no relation decided */
    for (int i = 0; i < n; i++) {
        const TensorMeta *m = ins[i];
        if (!m)
            continue;
        int off = nd - m->ndim;
        for (int k = 0; k < m->ndim; k++) {
            if (!(seen & (1u << (off + k)))) {
                seen |= 1u << (off + k);
                r.size[off + k] = m->size[k];
                r.sym[off + k] = sj_symctx ? m->sym[k] : NULL;
                continue;
            }
            if (broadcast_dim(&r, off + k, m, k, off + k, err) < 0)
                return -1;
        }
    }
    out->ndim = (unsigned char)nd;
    memcpy(out->size, r.size, sizeof(int64_t) * (size_t)nd);
    memcpy(out->sym, r.sym, sizeof(SymNode *) * (size_t)nd);
    return 0;
}

/* ------------------------------------------------------- symbolic sizes ---- */

int sj_sym_error(ShapeErr *err)
{
    if (sj_err_is_interrupt()) {
        sj_err_clear();   /* kept aside: the hook raises it */
        sj_err(err, "interrupted");
        return -1;
    }
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *s = value ? PyObject_Str(value) : NULL;
    const char *m = s ? PyUnicode_AsUTF8(s) : NULL;
    sj_err(err, "symbolic size arithmetic failed: %s", m ? m : "?");
    Py_XDECREF(s);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    sj_err_clear();
    return -1;
}

SymNode *sj_dimsym(const TensorMeta *m, int i, ShapeErr *err)
{
    if (m->sym[i])
        return m->sym[i];
    if (!sj_symctx) {
        sj_err(err, "internal: a symbolic size without a shape environment");
        return NULL;
    }
    SymNode *e = sym_const(sj_symctx->env, m->size[i]);
    if (!e)
        sj_sym_error(err);
    return e;
}

int sj_set_dim(TensorMeta *out, int i, SymNode *e, ShapeErr *err)
{
    if (!e)
        return sj_sym_error(err);
    if (e->kind == SK_CONST) {
        out->size[i] = e->value;
        out->sym[i] = NULL;
        return 0;
    }
    if (sym_has_unbacked(e)) {
        /* no hint: the stand-in size, and the size must not be negative (asserted at run
         * time unless the ranges show it) */
        SymNode *zero = sym_const(sj_symctx->env, 0);
        if (!zero || sj_require(sym_ge(sj_symctx->env, e, zero), err) < 0)
            return -1;
        out->size[i] = SJ_UNBACKED_HINT;
        out->sym[i] = e;
        return 0;
    }
    int64_t h;
    if (sym_eval_hint(sj_symctx->env, e, &h) < 0)
        return sj_sym_error(err);
    if (h < 0)
        return sj_err(err, "negative size %lld", (long long)h);
    out->size[i] = h;
    out->sym[i] = e;
    return 0;
}

int sj_decide(SymNode *rel, int *truth, ShapeErr *err)
{
    if (!rel)
        return sj_sym_error(err);
    /* a question about sizes that depend on data is answered size-obliviously (such a
     * size is never 0 or 1), with no guard and no assertion, as torch does; a question
     * the ranges cannot answer that way needs the data: an error (a graph break) */
    SymTruth t = sym_static_truth_oblivious(sj_symctx->env, rel);
    if (t != SYM_UNKNOWN) {
        *truth = t == SYM_TRUE;
        return 0;
    }
    int64_t h;
    if (sym_eval_hint(sj_symctx->env, rel, &h) < 0)
        return sj_sym_error(err);
    SymNode *held = h ? rel : sym_not(sj_symctx->env, rel);
    if (!held || sj_symctx->guard(sj_symctx->ctx, held) < 0)
        return sj_sym_error(err);
    *truth = h != 0;
    return 0;
}

int sj_require(SymNode *rel, ShapeErr *err)
{
    if (rel && sym_has_unbacked(rel) && sj_symctx->expect) {
        SymTruth st = sym_static_truth(sj_symctx->env, rel);
        if (st == SYM_FALSE)
            return sj_err(err, "size relation does not hold");
        if (st == SYM_UNKNOWN && sj_symctx->expect(sj_symctx->ctx, rel) < 0)
            return sj_sym_error(err);
        return 0;
    }
    int t;
    if (sj_decide(rel, &t, err) < 0)
        return -1;
    return t ? 0 : sj_err(err, "size relation does not hold");
}

int sj_pin(SymNode *e, int64_t *value, ShapeErr *err)
{
    if (!e)
        return sj_sym_error(err);
    if (sym_eval_hint(sj_symctx->env, e, value) < 0)
        return sj_sym_error(err);
    if (e->kind == SK_CONST)
        return 0;
    SymNode *k = sym_const(sj_symctx->env, *value);
    return k ? sj_require(sym_eq(sj_symctx->env, e, k), err) : sj_sym_error(err);
}

int sj_pin_dims(TensorMeta *m, ShapeErr *err)
{
    for (int i = 0; sj_symctx && i < m->ndim; i++)
        if (m->sym[i]) {
            if (sj_pin(m->sym[i], &m->size[i], err) < 0)
                return -1;
            m->sym[i] = NULL;
        }
    return 0;
}

int sj_dims_equal(const TensorMeta *a, int i, const TensorMeta *b, int j, ShapeErr *err)
{
    if (sj_symctx && ((a->sym[i] && sym_has_unbacked(a->sym[i])) || (b->sym[j] && sym_has_unbacked(b->sym[j])))) {
        /* a size without a hint: the dims the op needs equal are asserted equal */
        SymNode *x = sj_dimsym(a, i, err), *y = x ? sj_dimsym(b, j, err) : NULL;
        return !y || sj_require(sym_eq(sj_symctx->env, x, y), err) < 0 ? -1 : 1;
    }
    if (a->size[i] != b->size[j])
        return 0;
    if (!sj_symctx || a->sym[i] == b->sym[j])
        return 1;
    SymNode *x = sj_dimsym(a, i, err), *y = x ? sj_dimsym(b, j, err) : NULL;
    if (!y)
        return -1;
    return sj_require(sym_eq(sj_symctx->env, x, y), err) < 0 ? -1 : 1;
}

int sj_dim_equals(const TensorMeta *m, int i, int64_t v, ShapeErr *err)
{
    if (!sj_symctx || !m->sym[i])
        return m->size[i] == v;
    SymNode *k = sym_const(sj_symctx->env, v);
    int t;
    return sj_decide(k ? sym_eq(sj_symctx->env, m->sym[i], k) : NULL, &t, err) < 0 ? -1 : t;
}

int sj_index_in_range(const TensorMeta *x, int d, int64_t v, SymNode *isym, ShapeErr *err)
{
    if (!sj_symctx || (!x->sym[d] && !isym))
        return v < -x->size[d] || v >= x->size[d];
    SymEnv *env = sj_symctx->env;
    SymNode *size = sj_dimsym(x, d, err);
    if (!size)
        return -1;
    SymNode *i = isym ? isym : sym_const(env, v), *zero = sym_const(env, 0);
    SymNode *lo = i ? sym_neg(env, size) : NULL;
    if (!lo || !zero)
        return sj_sym_error(err);
    int above, below = 0, neg;
    if (sj_decide(sym_ge(env, i, lo), &above, err) < 0 || (above && sj_decide(sym_lt(env, i, size), &below, err) < 0))
        return -1;
    if (!below)
        return 1;
    /* a negative index counts from the end (size + i): which one it is, is guarded */
    if (isym && sj_decide(sym_lt(env, i, zero), &neg, err) < 0)
        return -1;
    return 0;
}

int sj_int_list_sym(const BoundArg *a, const char *what, int64_t *out, struct SymNode **syms, int *n, int max,
                    ShapeErr *err)
{
    /* varargs holding one sequence with symbolic items: x.view((s0, 2)), x.new_ones(x.shape) */
    if (a && a->kind == BA_LIST && a->n == 1 && a->items[0].kind == BA_LIST)
        a = &a->items[0];
    if (int_list(a, what, out, n, max, 0, err))
        return -1;
    for (int i = 0; i < *n; i++)
        syms[i] = NULL;
    if (a->kind == BA_CONST && a->sym)
        syms[0] = a->sym;
    if (a->kind == BA_LIST && !(a->n == 1 && a->items[0].kind == BA_CONST && !a->items[0].sym &&
                                (PyTuple_Check(a->items[0].value) || PyList_Check(a->items[0].value))))
        for (int i = 0; i < *n && i < a->n; i++)
            syms[i] = a->items[i].sym;
    return 0;
}

/* a / b when b divides a exactly as expressions (3*s0*s1 / s1 -> 3*s0), else NULL. */
static SymNode *exact_div(SymEnv *env, SymNode *a, SymNode *b)
{
    int64_t ca = 1, cb = 1;
    SymNode *fa[16], *fb[16];
    uint32_t na = 0, nb = 0;
    SymNode *xs[2] = {a, b};
    for (int w = 0; w < 2; w++) {
        SymNode *x = xs[w];
        int64_t *c = w ? &cb : &ca;
        SymNode **f = w ? fb : fa;
        uint32_t *n = w ? &nb : &na;
        if (x->kind == SK_CONST) {
            *c = x->value;
        } else if (x->kind == SK_MUL) {
            for (uint32_t k = 0; k < x->nargs; k++) {
                if (x->args[k]->kind == SK_CONST)
                    *c = x->args[k]->value;
                else if (*n < 16)
                    f[(*n)++] = x->args[k];
                else
                    return NULL;
            }
        } else {
            f[(*n)++] = x;
        }
    }
    if (cb == 0 || ca % cb != 0)
        return NULL;
    for (uint32_t k = 0; k < nb; k++) {
        uint32_t m = 0;
        while (m < na && fa[m] != fb[k])
            m++;
        if (m == na)
            return NULL;
        fa[m] = fa[--na];
    }
    SymNode *r = sym_const(env, ca / cb);
    for (uint32_t k = 0; r && k < na; k++)
        r = sym_mul(env, r, fa[k]);
    return r;
}

SymNode *sj_sym_div(SymNode *a, SymNode *b)
{
    SymNode *r = exact_div(sj_symctx->env, a, b);
    return r ? r : sym_floordiv(sj_symctx->env, a, b);
}

/* The rules that compute symbolic sizes (each reviewed for it: every output dim is copied
 * from an input with its symbol, is a constant, or is built with sym_* operations). */
int shapes_rule_is_symbolic(OpId op)
{
    static const ShapeRule symbolic[] = {
        rule_same,
        rule_unary_float,
        rule_unary_bool,
        rule_binary,
        rule_compare,
        rule_truediv,
        rule_binary_float,
        rule_where,
        rule_masked_fill,
        rule_lerp,
        rule_clamp,
        rule_cast,
        rule_copy,
        rule_reduce,
        rule_softmax,
        rule_matmul,
        rule_linear,
        rule_view,
        rule_permute,
        rule_transpose,
        rule_t,
        rule_unsqueeze,
        rule_flatten,
        rule_cat,
        rule_stack,
        rule_gather,
        rule_embedding,
        rule_unflatten,
        rule_sdpa,
        rule_getitem,
        rule_expand,
        rule_expand_as,
        rule_repeat,
        rule_repeat_interleave,
        rule_reshape_as,
        rule_einsum,
        rule_unfold,
        rule_factory,
        rule_factory_like,
        rule_random_factory,
        rule_new_factory,
        rule_arange,
        rule_norm_like,
        rule_scan,
        rule_squeeze,
        rule_narrow,
        rule_select,
        rule_split,
        rule_chunk,
        rule_unbind,
        rule_setitem,
        rule_conv,
        rule_pool,
        rule_adaptive_pool,
        rule_diff,
        rule_addmm,
        rule_eye,
        rule_max_min,
        rule_movedim,
        rule_sort,
        rule_topk,
        rule_histc,
        rule_np_la_square,
        rule_np_det,
        rule_np_eigh,
        rule_np_solve,
        rule_np_kron,
        rule_np_searchsorted,
        rule_np_interp,
        rule_np_trapezoid,
        rule_np_svd,
        rule_np_qr,
        rule_np_tensordot,
        rule_np_cov,
        rule_np_histogram,
        rule_np_bincount,
        rule_np_pinv,
        rule_pad,
        rule_conv_transpose,
        rule_interpolate,
        rule_addc,
        rule_tensor_new,
        rule_random_fill,
        rule_tensor_data,
        rule_to_numpy,
        rule_from_numpy,
        rule_rnn,
    };
    if ((int)op < 0 || op >= OP_COUNT)
        return 0;
    for (size_t i = 0; i < sizeof symbolic / sizeof *symbolic; i++)
        if (rule_table[op] == symbolic[i])
            return 1;
    return 0;
}

/* 1 when is(a) holds for one of args[0..n), the items of list arguments (nested lists
 * included) standing for the lists. */
static int any_arg(const BoundArg *args, int n, int (*is)(const BoundArg *a))
{
    for (int i = 0; i < n; i++)
        if (args[i].kind == BA_LIST ? any_arg(args[i].items, args[i].n, is) : is(&args[i]))
            return 1;
    return 0;
}

static int is_symbolic(const BoundArg *a)
{
    if (a->kind == BA_CONST)
        return a->sym != NULL || a->slice_sym != NULL;
    for (int i = 0; a->kind == BA_TENSOR && i < a->meta->ndim; i++)
        if (a->meta->sym[i])
            return 1;
    return 0;
}

int shapes_args_symbolic(const BoundArgs *b)
{
    return any_arg(b->args, b->n, is_symbolic);
}

int sj_get_dtype(const BoundArgs *b, const char *name, Lib lib, DType *out, int *given, ShapeErr *err)
{
    const BoundArg *a = ba_get(b, name);
    *given = 0;
    if (!a)
        return 0;
    if (a->kind != BA_CONST)
        return sj_err(err, "%s must be a constant dtype", name);
    int r = dtype_from_py(a->value, lib, out);
    if (r < 0) {
        sj_err_clear();
        return sj_err(err, "could not read %s", name);
    }
    if (r == 1)
        return sj_err(err, "%s: unsupported or invalid dtype %.60s", name, Py_TYPE(a->value)->tp_name);
    *given = 1;
    return 0;
}

int sj_dtype_or(const BoundArgs *b, const char *name, Lib lib, DType *dt, ShapeErr *err)
{
    DType d;
    int given;
    if (sj_get_dtype(b, name, lib, &d, &given, err))
        return -1;
    if (given)
        *dt = d;
    return 0;
}

int sj_cpu_device(PyObject *v, ShapeErr *err)
{
    PyObject *s = PyObject_Str(v);    /* new: "cpu", "cpu:0", "cuda:0" */
    if (!s) {
        sj_err_clear();
        return sj_err(err, "unreadable device");
    }
    const char *c = PyUnicode_AsUTF8(s);
    int ok = c && (strcmp(c, "cpu") == 0 || strncmp(c, "cpu:", 4) == 0);
    if (!c)
        sj_err_clear();
    Py_DECREF(s);
    return ok ? 0 : sj_err(err, "only the cpu device is supported");
}

void sj_np_scalarize(Lib lib, TensorMeta *out)
{
    if (lib == LIB_NUMPY && out->ndim == 0)
        out->np_scalar = 1;
}

int64_t sj_numel(const TensorMeta *m)
{
    int64_t n = 1;
    for (int i = 0; i < m->ndim; i++)
        n *= m->size[i];
    return n;
}

static int is_grad_tensor(const BoundArg *a)
{
    return a->kind == BA_TENSOR && a->meta->requires_grad;
}

int sj_requires_grad(const BoundArgs *b)
{
    return any_arg(b->args, b->n, is_grad_tensor);
}

int rule_none(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    (void)lib;
    (void)b;
    (void)out;
    (void)err;
    *nout = 0;
    return 0;
}

int shapes_inplace(Lib lib, const TensorMeta *self, const TensorMeta *result, TensorMeta *out, ShapeErr *err)
{
    if (self->np_scalar || !result) {
        /* numpy scalars are immutable: `s += 1` rebinds s to the plain result */
        *out = *result;
        return 0;
    }
    if (result->ndim != self->ndim || memcmp(result->size, self->size, sizeof(int64_t) * self->ndim) != 0) {
        char a[96], c[96];
        meta_format(self, a, sizeof a);
        meta_format(result, c, sizeof c);
        return sj_err(err, "in-place result %s does not match the shape of %s", c, a);
    }
    DTypeCategory from = dtype_info[result->dtype].category;
    DTypeCategory to = dtype_info[self->dtype].category;
    int ok = from <= to;
    if (lib == LIB_NUMPY && ok && from == CAT_INT && to == CAT_INT && !dtype_is_unsigned((DType)result->dtype) &&
        dtype_is_unsigned((DType)self->dtype))
        ok = 0;    /* numpy: a signed result is not the same kind as an unsigned target */
    if (lib == LIB_TORCH && from == CAT_BOOL)
        ok = 1;
    if (lib == LIB_TORCH && to == CAT_COMPLEX && from != CAT_COMPLEX && from != CAT_BOOL)
        return sj_err(err, "in-place %s result into a complex tensor is not supported", dtype_info[result->dtype].name);
    if (!ok)
        return sj_err(err, "result type %s can't be cast to the desired output type %s", dtype_info[result->dtype].name,
                      dtype_info[self->dtype].name);
    *out = *self;
    return 0;
}
