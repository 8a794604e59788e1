/* See env.h. */
#include "env.h"
#include "../core/log.h"
#include "../core/errors.h"
#include "../core/pyutil.h"

#include <string.h>

/* ----------------------------------------------------------------- life ---- */

int shape_env_open(ShapeEnv *se, SymEnv *env)
{
    se->env = env;
    if (!se->rel_where && !(se->rel_where = PyList_New(0)))
        return -1;
    return 0;
}

void shape_env_clear(ShapeEnv *se)
{
    PyMem_Free(se->syms);
    PyMem_Free(se->aliases);
    PyMem_Free(se->rels);
    Py_CLEAR(se->rel_where);
    memset(se, 0, sizeof *se);
}

/* -------------------------------------------------------------- symbols ---- */

/* The SymInfo of a symbol just made in se->env (room reserved by the caller), zeroed; NULL
 * with SystemError if the environment's slots and ours drifted apart. */
static SymInfo *info_for(ShapeEnv *se, const SymNode *s)
{
    if (s->slot != se->nsyms) {
        PyErr_SetString(PyExc_SystemError, "shapejit: symbol slots out of step");
        return NULL;
    }
    SymInfo *si = &se->syms[se->nsyms++];
    memset(si, 0, sizeof *si);
    return si;
}

SymNode *shape_env_symbol(ShapeEnv *se, int32_t src, int64_t hint, SymRange r, int32_t tensor_value, int dim,
                          int strict, int is_int)
{
    if (sj_grow((void **)&se->syms, &se->capsyms, se->nsyms + 1, sizeof(SymInfo), 8) < 0)
        return NULL;
    SymNode *s = sym_symbol(se->env, hint, r);
    SymInfo *si = s ? info_for(se, s) : NULL;
    if (!si)
        return NULL;
    si->src = src;
    si->value = -1;
    si->tensor_value = tensor_value;
    si->dim = (int8_t)dim;
    si->strict = (uint8_t)strict;
    si->is_int = (uint8_t)is_int;
    si->range0 = r;
    return s;
}

SymNode *shape_env_unbacked(ShapeEnv *se, int32_t value, int32_t tensor_value, int dim, SymRange r)
{
    if (sj_grow((void **)&se->syms, &se->capsyms, se->nsyms + 1, sizeof(SymInfo), 8) < 0)
        return NULL;
    SymNode *u = sym_unbacked(se->env, r);
    SymInfo *si = u ? info_for(se, u) : NULL;
    if (!si)
        return NULL;
    si->src = -1;                      /* no input holds it: no guard can read it */
    si->value = value;                 /* the graph value computing it (item), or -1 ... */
    si->tensor_value = tensor_value;   /* ... then the size of this graph tensor's dim */
    si->dim = (int8_t)dim;
    si->range0 = r;
    return u;
}

SymNode *shape_env_duck(const ShapeEnv *se, int64_t hint, int32_t src)
{
    for (int32_t k = 0; k < se->nsyms; k++) {
        SymNode *o = sym_env_symbol_at(se->env, k);
        if (se->syms[k].duck && o && o->hint == hint && se->syms[k].src != src)
            return o;
    }
    return NULL;
}

int shape_env_alias(ShapeEnv *se, int32_t src, const SymNode *s)
{
    if (sj_grow((void **)&se->aliases, &se->capaliases, se->naliases + 1, sizeof(SymAlias), 8) < 0)
        return -1;
    se->aliases[se->naliases].src = src;
    se->aliases[se->naliases++].slot = s->slot;
    return 0;
}

/* ------------------------------------------------------------ relations ---- */

int shape_env_relies_on(const ShapeEnv *se, const SymNode *rel)
{
    for (int32_t i = 0; i < se->nrels; i++)
        if (se->rels[i] == rel)
            return 1;
    return 0;
}

int shape_env_rely(ShapeEnv *se, SymNode *rel, PyObject *where)
{
    if (sj_grow((void **)&se->rels, &se->caprels, se->nrels + 1, sizeof(SymNode *), 8) < 0 ||
        PyList_Append(se->rel_where, where) < 0)
        return -1;
    se->rels[se->nrels++] = rel;
    return 0;
}

static void log_range(const SymNode *s, const char *why)
{
    if (!sj_log_on(LOG_DYNAMIC, SJ_DEBUG))
        return;
    PyObject *r = sym_range_str(s->range);
    if (r)
        sj_log(LOG_DYNAMIC, SJ_DEBUG, "_update_var_to_range %s%lld = VR%U (%s)", s->kind == SK_UNBACKED ? "u" : "s",
               (long long)s->value, r, why);
    Py_XDECREF(r);
    sj_err_clear();
}

void shape_env_refine(ShapeEnv *se, SymNode *rel)
{
    if (rel->nargs != 2)
        return;
    SymNode *a = rel->args[0], *b = rel->args[1];
    SymNode *s = sym_is_symbol(a) && b->kind == SK_CONST ? a : sym_is_symbol(b) && a->kind == SK_CONST ? b : NULL;
    if (!s)
        return;
    int64_t k = s == a ? b->value : a->value;
    SymRange r = s->range;
    switch ((SymKind)rel->kind) {
    case SK_EQ:
        r.lo = r.hi = k;
        break;
    case SK_LT:   /* a < b */
        if (s == a)
            r.hi = k - 1;
        else
            r.lo = k + 1;
        break;
    case SK_LE:
        if (s == a)
            r.hi = k;
        else
            r.lo = k;
        break;
    default:
        return;
    }
    if (r.lo < s->range.lo)
        r.lo = s->range.lo;
    if (r.hi > s->range.hi)
        r.hi = s->range.hi;
    int ch = sym_set_range(se->env, s, r);
    if (ch < 0)
        sj_err_clear();
    else if (ch > 0)
        log_range(s, "update");
}

int32_t shape_env_strict_pinned(const ShapeEnv *se, const SymNode *rel, int64_t *k)
{
    if (rel->kind != SK_EQ)
        return -1;
    const SymNode *a = rel->args[0], *b = rel->args[1];
    if (a->kind == SK_SYMBOL && b->kind == SK_CONST && a->slot >= 0 && a->slot < se->nsyms &&
        se->syms[a->slot].strict) {
        *k = b->value;
        return a->slot;
    }
    if (b->kind == SK_SYMBOL && a->kind == SK_CONST && b->slot >= 0 && b->slot < se->nsyms &&
        se->syms[b->slot].strict) {
        *k = a->value;
        return b->slot;
    }
    return -1;
}

/* -------------------------------------------------------- guard programs ---- */

typedef struct {
    int64_t *w;
    int32_t n, cap;
    int depth, max_depth;
    int32_t *srcs;
    int32_t nsrcs, capsrcs;
} Prog;

static int emit(Prog *p, int64_t op, int64_t arg, int delta)
{
    if (sj_grow((void **)&p->w, &p->cap, p->n + 2, sizeof(int64_t), 8) < 0)   /* room for two words */
        return -1;
    p->w[p->n++] = op;
    p->w[p->n++] = arg;
    p->depth += delta;
    if (p->depth > p->max_depth)
        p->max_depth = p->depth;
    return 0;
}

static int note_src(Prog *p, int32_t src)
{
    for (int32_t i = 0; i < p->nsrcs; i++)
        if (p->srcs[i] == src)
            return 0;
    if (sj_grow((void **)&p->srcs, &p->capsrcs, p->nsrcs + 1, sizeof(int32_t), 8) < 0)
        return -1;
    p->srcs[p->nsrcs++] = src;
    return 0;
}

static int push_src(Prog *p, int32_t src)
{
    return note_src(p, src) < 0 ? -1 : emit(p, SG_SRC, src, 1);
}

static int compile_node(const ShapeEnv *se, Prog *p, SymNode *e)
{
    switch ((SymKind)e->kind) {
    case SK_CONST:
    case SK_BOOL:
        return emit(p, SG_CONST, e->value, 1);
    case SK_SYMBOL:
        return push_src(p, se->syms[e->slot].src);
    default:
        break;
    }
    static const struct {
        SymKind k;
        int op;
    } map[] = {
        {SK_ADD, SG_ADD}, {SK_MUL, SG_MUL}, {SK_MIN, SG_MIN}, {SK_MAX, SG_MAX}, {SK_FLOORDIV, SG_FLOORDIV},
        {SK_MOD, SG_MOD}, {SK_EQ, SG_EQ},   {SK_NE, SG_NE},   {SK_LT, SG_LT},   {SK_LE, SG_LE},
    };
    for (size_t m = 0; m < sizeof map / sizeof *map; m++) {
        if (map[m].k != e->kind)
            continue;
        for (uint32_t i = 0; i < e->nargs; i++)
            if (compile_node(se, p, e->args[i]) < 0)
                return -1;
        int nary = e->kind == SK_ADD || e->kind == SK_MUL || e->kind == SK_MIN || e->kind == SK_MAX;
        return emit(p, map[m].op, nary ? (int64_t)e->nargs : 0, 1 - (int)e->nargs);
    }
    PyErr_Format(PyExc_TypeError, "shapejit: a %s cannot be guarded", sym_kind_name((SymKind)e->kind));
    return -1;
}

typedef struct {
    ShapeEnv *se;
    ShapeSrcName name;
    ShapeGuardSink sink;
    void *ctx;
} Compiler;

/* Hand program p, checking text, to the sink; frees p. */
static int deliver(Compiler *cc, Prog *p, PyObject *text, PyObject *where)
{
    int r = -1;
    if (p->max_depth > SG_MAX_DEPTH) {
        PyErr_SetString(PyExc_ValueError, "shapejit: a shape guard is too deep");
    } else {
        PyObject *bytes = PyBytes_FromStringAndSize((const char *)p->w, (Py_ssize_t)(sizeof(int64_t) * (size_t)p->n));
        r = bytes ? cc->sink(cc->ctx, bytes, p->srcs, p->nsrcs, text, where) : -1;
        Py_XDECREF(bytes);
    }
    PyMem_Free(p->w);
    PyMem_Free(p->srcs);
    return r;
}

/* The end of a guard built in p with its text (a new reference or NULL, released here):
 * delivered when ok (every step succeeded), else dropped (-1, the failed step's exception
 * stays set). */
static int deliver_built(Compiler *cc, Prog *p, int ok, PyObject *text)
{
    int r = ok ? deliver(cc, p, text, Py_None) : -1;
    if (!ok) {
        PyMem_Free(p->w);
        PyMem_Free(p->srcs);
    }
    Py_XDECREF(text);
    return r;
}

/* The name of a symbol in printed guards: its source. */
static const char *symbol_name(void *ctx, const SymNode *sym)
{
    Compiler *cc = ctx;
    if (sym->kind != SK_SYMBOL || sym->slot < 0 || sym->slot >= cc->se->nsyms)
        return NULL;
    return PyUnicode_AsUTF8(cc->name(cc->ctx, cc->se->syms[sym->slot].src));
}

static int guard_relation(Compiler *cc, SymNode *rel, PyObject *where)
{
    Prog p;
    memset(&p, 0, sizeof p);
    int r = -1;
    PyObject *text = sym_print(cc->se->env, rel, symbol_name, cc);
    if (text && compile_node(cc->se, &p, rel) == 0 && p.nsrcs > 0) {
        r = deliver(cc, &p, text, where);
        Py_DECREF(text);
        return r;
    }
    if (text && p.nsrcs == 0 && !PyErr_Occurred())
        r = 0;   /* a relation between constants: nothing to check */
    Py_XDECREF(text);
    PyMem_Free(p.w);
    PyMem_Free(p.srcs);
    return r;
}

/* bound <= src (side 0) or src <= bound (side 1). */
static int guard_bound(Compiler *cc, int32_t src, int64_t bound, int side)
{
    Prog p;
    memset(&p, 0, sizeof p);
    PyObject *name = cc->name(cc->ctx, src);
    PyObject *text = side ? PyUnicode_FromFormat("%U <= %lld", name, (long long)bound)
                          : PyUnicode_FromFormat("%lld <= %U", (long long)bound, name);
    int ok = text &&
             (side ? push_src(&p, src) == 0 && emit(&p, SG_CONST, bound, 1) == 0
                   : emit(&p, SG_CONST, bound, 1) == 0 && push_src(&p, src) == 0) &&
             emit(&p, SG_LE, 0, -1) == 0;
    return deliver_built(cc, &p, ok, text);
}

/* Eq(a, b): two sources of one duck-sized symbol. */
static int guard_alias(Compiler *cc, int32_t a, int32_t b)
{
    Prog p;
    memset(&p, 0, sizeof p);
    PyObject *text = PyUnicode_FromFormat("Eq(%U, %U)", cc->name(cc->ctx, a), cc->name(cc->ctx, b));
    int ok = text && push_src(&p, a) == 0 && push_src(&p, b) == 0 && emit(&p, SG_EQ, 0, -1) == 0;
    return deliver_built(cc, &p, ok, text);
}

int shape_env_compile_guards(ShapeEnv *se, ShapeSrcName name, ShapeGuardSink sink, void *ctx)
{
    if (!se->env)
        return 0;
    Compiler cc = {se, name, sink, ctx};
    /* ranges of size symbols: what the capture assumed about every value (2 <= s0 from
     * 0/1 specialisation, a mark's min and max) */
    for (int32_t k = 0; k < se->nsyms; k++) {
        if (se->syms[k].is_int || se->syms[k].src < 0)
            continue;   /* ints have no range guard; unbacked symbols have no source */
        SymRange r = se->syms[k].range0;
        if (r.lo > 0 && guard_bound(&cc, se->syms[k].src, r.lo, 0) < 0)
            return -1;
        if (r.hi < SYM_INT_OO && guard_bound(&cc, se->syms[k].src, r.hi, 1) < 0)
            return -1;
    }
    for (int32_t i = 0; i < se->nrels; i++)
        if (guard_relation(&cc, se->rels[i], PyList_GET_ITEM(se->rel_where, i)) < 0)
            return -1;
    /* duck sizing: the other sources of a shared symbol */
    for (int32_t i = 0; i < se->naliases; i++)
        if (guard_alias(&cc, se->aliases[i].src, se->syms[se->aliases[i].slot].src) < 0)
            return -1;
    return 0;
}
