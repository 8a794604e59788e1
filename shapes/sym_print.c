/* Symbolic integers, continued (see sym.h): evaluating an expression at the symbols'
 * values or hints, and printing it the way torch's ShapeEnv prints sympy expressions. */
#include "sym.h"
#include "sym_int.h"
#include "../vocab/meta.h"
#include "../core/pyutil.h"
#include <assert.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------- evaluation ---- */

PyObject *sym_data_dependent_error;

typedef struct {
    SymEnv *env;
    SymNode *root;            /* for messages */
    int hints;                /* backed symbols at their hints, unbacked ones an error */
    const int64_t *values;    /* borrowed: by slot (not hints); NULL: nothing given */
    const uint8_t *known;     /* borrowed: by slot, or NULL (every value given) */
} Eval;

static int eval_fail(Eval *ev, PyObject *type, const char *fmt, const SymNode *sym)
{
    PyObject *text = sym_print(ev->env, ev->root, NULL, NULL);
    if (!text)
        return -1;
    if (sym)
        PyErr_Format(type, fmt, text, sym_kinds[sym->kind].token, (long long)sym->value);
    else
        PyErr_Format(type, fmt, text);
    Py_DECREF(text);
    return -1;
}

static int eval_node(Eval *ev, SymNode *e, int64_t *out)
{
    switch (e->kind) {
    case SK_CONST:
    case SK_BOOL:
        *out = e->value;
        return 0;
    case SK_SYMBOL:
    case SK_UNBACKED:
        if (ev->hints) {
            if (e->kind == SK_UNBACKED)
                return eval_fail(ev, sym_data_dependent_error ? sym_data_dependent_error : PyExc_RuntimeError,
                                 "cannot evaluate %U with hints: it depends on the unbacked symbol "
                                 "%s%lld, which has no hint (a data-dependent value)",
                                 e);
            *out = e->hint;
            return 0;
        }
        if (!ev->values || (ev->known && !ev->known[e->slot]))
            return eval_fail(ev, PyExc_ValueError, "cannot evaluate %U: no value given for %s%lld", e);
        if (!fin(ev->values[e->slot]))
            return eval_fail(ev, PyExc_OverflowError,
                             "cannot evaluate %U: the value of %s%lld is "
                             "outside the int64 range of symbolic integers",
                             e);
        *out = ev->values[e->slot];
        return 0;
    default:
        break;
    }
    FoldFn f = sym_kinds[e->kind].fold;
    int64_t acc, v;
    if (eval_node(ev, e->args[0], &acc) < 0)
        return -1;
    for (uint32_t i = 1; i < e->nargs; i++) {
        if (eval_node(ev, e->args[i], &v) < 0)
            return -1;
        int rc = f(acc, v, &acc);
        if (rc == SYM_EDIV) {
            sym_zero_division();
            return -1;
        }
        if (rc)
            return eval_fail(ev, PyExc_OverflowError, "int64 overflow evaluating %U", NULL);
    }
    *out = acc;
    return 0;
}

int sym_eval_hint(SymEnv *env, SymNode *e, int64_t *out)
{
    Eval ev = {env, e, 1, NULL, NULL};
    return eval_node(&ev, e, out);
}

int sym_eval_with(SymEnv *env, SymNode *e, const int64_t *values, const uint8_t *known, int64_t *out)
{
    Eval ev = {env, e, 0, values, known};
    return eval_node(&ev, e, out);
}

/* meta_format's printer: the expression alone (printing needs no env). */
static PyObject *meta_print(SymNode *e)
{
    return sym_print(NULL, e, NULL, NULL);
}

int sym_init(PyObject *module)
{
    meta_sym_printer = meta_print;
    if (!sym_data_dependent_error) {
        sym_data_dependent_error =
            PyErr_NewExceptionWithDoc("shapejit._C.DataDependentError",
                                      "A symbolic expression needed a concrete value but depends on an unbacked "
                                      "(data-dependent) symbol, which has no hint.",
                                      PyExc_RuntimeError, NULL);
        if (!sym_data_dependent_error)
            return -1;
    }
    return PyModule_AddObjectRef(module, "DataDependentError", sym_data_dependent_error);
}

/* ------------------------------------------------------------- printing ---- */

enum { P_REL = 1, P_ADD, P_MUL, P_POW, P_ATOM };   /* sympy's precedence levels */

typedef struct {
    char *p;
    size_t n, cap;
    int oom;
    SymNameFn name;
    void *ctx;
    char inl[256];
} Pr;

static void put(Pr *pr, const char *s, size_t len)
{
    if (pr->oom)
        return;
    if (pr->n + len > pr->cap) {
        size_t cap = (pr->n + len) * 2;
        char *p = PyMem_Malloc(cap);
        if (!p) {
            pr->oom = 1;
            return;
        }
        memcpy(p, pr->p, pr->n);
        if (pr->p != pr->inl)
            PyMem_Free(pr->p);
        pr->p = p;
        pr->cap = cap;
    }
    memcpy(pr->p + pr->n, s, len);
    pr->n += len;
}

static void puts_(Pr *pr, const char *s)
{
    put(pr, s, strlen(s));
}

static void put_int(Pr *pr, int64_t v)
{
    char b[32];
    int k = snprintf(b, sizeof b, "%lld", (long long)v);
    put(pr, b, (size_t)k);
}

static int prec(const SymNode *e)
{
    switch (sym_kinds[e->kind].print) {
    case SP_ATOM:
        return e->kind == SK_CONST && e->value < 0 ? P_ADD : P_ATOM;
    case SP_SUM:
        return P_ADD;
    case SP_PRODUCT:
        return coef_of(e) < 0 ? P_ADD : P_MUL;
    case SP_INFIX:
        return P_REL;
    default:
        return P_ATOM;
    }
}

static void pr_expr(Pr *pr, SymNode *e, int minp);

static void pr_product(Pr *pr, int64_t coef, SymNode *const *f, uint32_t nf)
{
    if (coef == -1)
        puts_(pr, "-");
    else if (coef != 1) {
        put_int(pr, coef);
        puts_(pr, "*");
    }
    for (uint32_t i = 0, j; i < nf; i = j) {
        for (j = i + 1; j < nf && f[j] == f[i]; j++)
            ;
        if (i)
            puts_(pr, "*");
        pr_expr(pr, f[i], j - i > 1 ? P_ATOM : P_POW);
        if (j - i > 1) {
            puts_(pr, "**");
            put_int(pr, j - i);
        }
    }
}

static void pr_sum(Pr *pr, SymNode *e)
{
    uint32_t k = (uint32_t)has_const(e);
    int64_t c = k ? e->args[0]->value : 0;
    int all_neg = 1;
    for (uint32_t i = k; i < e->nargs; i++)
        all_neg &= coef_of(e->args[i]) < 0;
    int const_first = c > 0 && all_neg, first = 1;
    if (const_first) {
        put_int(pr, c);
        first = 0;
    }
    for (uint32_t i = k; i < e->nargs; i++) {
        SymNode *const *f;
        uint32_t nf = sym_factors_of(&e->args[i], &f);
        int64_t coef = coef_of(e->args[i]);
        if (!first)
            puts_(pr, coef < 0 ? " - " : " + ");
        pr_product(pr, first || coef > 0 ? coef : -coef, f, nf);
        first = 0;
    }
    if (c != 0 && !const_first) {
        puts_(pr, c < 0 ? " - " : " + ");
        put_int(pr, c < 0 ? -c : c);
    }
}

static void pr_expr(Pr *pr, SymNode *e, int minp)
{
    int paren = prec(e) < minp;
    const char *tok = sym_kinds[e->kind].token;
    if (paren)
        puts_(pr, "(");
    switch (sym_kinds[e->kind].print) {
    case SP_ATOM:
        if (e->kind == SK_CONST)
            put_int(pr, e->value);
        else if (e->kind == SK_BOOL)
            puts_(pr, e->value ? "True" : "False");
        else {
            const char *name = pr->name ? pr->name(pr->ctx, e) : NULL;
            if (name)
                puts_(pr, name);
            else {
                puts_(pr, tok);
                put_int(pr, e->value);
            }
        }
        break;
    case SP_SUM:
        pr_sum(pr, e);
        break;
    case SP_PRODUCT: {
        SymNode *const *f;
        uint32_t nf = sym_factors_of(&e, &f);
        pr_product(pr, coef_of(e), f, nf);
        break;
    }
    case SP_PAREN:
        puts_(pr, "(");
        pr_expr(pr, e->args[0], P_ATOM);
        puts_(pr, tok);
        pr_expr(pr, e->args[1], P_ATOM);
        puts_(pr, ")");
        break;
    case SP_CALL:
        puts_(pr, tok);
        puts_(pr, "(");
        for (uint32_t i = 0; i < e->nargs; i++) {
            if (i)
                puts_(pr, ", ");
            pr_expr(pr, e->args[i], 0);
        }
        puts_(pr, ")");
        break;
    case SP_INFIX:
        pr_expr(pr, e->args[0], P_ADD);
        puts_(pr, tok);
        pr_expr(pr, e->args[1], P_ADD);
        break;
    }
    if (paren)
        puts_(pr, ")");
}

PyObject *sym_print(SymEnv *env, SymNode *e, SymNameFn name, void *ctx)
{
    (void)env;
    Pr pr;
    pr.p = pr.inl;
    pr.n = 0;
    pr.cap = sizeof pr.inl;
    pr.oom = 0;
    pr.name = name;
    pr.ctx = ctx;
    pr_expr(&pr, e, 0);
    PyObject *s = pr.oom ? PyErr_NoMemory() : PyUnicode_DecodeUTF8(pr.p, (Py_ssize_t)pr.n, NULL);
    if (pr.p != pr.inl)
        PyMem_Free(pr.p);
    return s;
}

PyObject *sym_range_str(SymRange r)
{
    char lo[32] = "-int_oo", hi[32] = "int_oo";
    if (r.lo != NEG_OO)
        snprintf(lo, sizeof lo, "%lld", (long long)r.lo);
    if (r.hi != OO)
        snprintf(hi, sizeof hi, "%lld", (long long)r.hi);
    return PyUnicode_FromFormat("[%s, %s]", lo, hi);
}

SymNode *sym_not(SymEnv *env, SymNode *rel)
{
    switch ((SymKind)rel->kind) {
    case SK_BOOL:
        return sym_bool(env, !rel->value);
    case SK_EQ:
        return sym_ne(env, rel->args[0], rel->args[1]);
    case SK_NE:
        return sym_eq(env, rel->args[0], rel->args[1]);
    case SK_LT:
        return sym_le(env, rel->args[1], rel->args[0]);
    case SK_LE:
        return sym_lt(env, rel->args[1], rel->args[0]);
    default:
        PyErr_SetString(PyExc_TypeError, "shapejit: sym_not of an integer expression");
        return NULL;
    }
}
