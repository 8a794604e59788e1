/* Symbolic integers: hash-consed canonical expressions, simplification at construction,
 * value ranges, evaluation and sympy-like printing. API, ownership, the canonical form and
 * the printing rules: sym.h.
 */
#include "sym.h"
#include "sym_int.h"
#include "../vocab/meta.h"
#include "../core/pyutil.h"
#include <assert.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* node_cmp sorts leaves by kind row first (sym_ops.def says the order matters). */
_Static_assert(SK_CONST == 0 && SK_BOOL == 1 && SK_SYMBOL == 2 && SK_UNBACKED == 3 && SK_ADD == 4,
               "sym_ops.def: leaves first, in node_cmp's order");

#define INL 16   /* inline capacity of scratch vectors: most expressions are small */

static inline int64_t imin(int64_t a, int64_t b)
{
    return a < b ? a : b;
}
static inline int64_t imax(int64_t a, int64_t b)
{
    return a > b ? a : b;
}
static inline SymRange rng(int64_t lo, int64_t hi)
{
    SymRange r = {lo, hi};
    return r;
}
static inline int is_inf(int64_t v)
{
    return v == OO || v == NEG_OO;
}

/* ------------------------------------------------ folds (Python semantics) ---- */

static int fold_add(int64_t a, int64_t b, int64_t *o)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r) || !fin(r))
        return SYM_EOVF;
    *o = r;
    return 0;
}

static int fold_mul(int64_t a, int64_t b, int64_t *o)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r) || !fin(r))
        return SYM_EOVF;
    *o = r;
    return 0;
}

/* Operands are finite, so a is never INT64_MIN and a / b cannot trap. */
static int fold_floordiv(int64_t a, int64_t b, int64_t *o)
{
    if (b == 0)
        return SYM_EDIV;
    int64_t q = sj_floordiv(a, b);
    if (!fin(q))
        return SYM_EOVF;
    *o = q;
    return 0;
}

static int fold_mod(int64_t a, int64_t b, int64_t *o)
{
    if (b == 0)
        return SYM_EDIV;
    *o = sj_floormod(a, b);
    return 0;
}

static int fold_min(int64_t a, int64_t b, int64_t *o)
{
    *o = imin(a, b);
    return 0;
}
static int fold_max(int64_t a, int64_t b, int64_t *o)
{
    *o = imax(a, b);
    return 0;
}
static int fold_eq(int64_t a, int64_t b, int64_t *o)
{
    *o = a == b;
    return 0;
}
static int fold_ne(int64_t a, int64_t b, int64_t *o)
{
    *o = a != b;
    return 0;
}
static int fold_lt(int64_t a, int64_t b, int64_t *o)
{
    *o = a < b;
    return 0;
}
static int fold_le(int64_t a, int64_t b, int64_t *o)
{
    *o = a <= b;
    return 0;
}

/* ------------------------------------------ interval rules (saturating) ---- */

static const SymRange FULL = {NEG_OO, OO};

static inline int64_t clampv(int64_t v)
{
    return v >= OO ? OO : v <= NEG_OO ? NEG_OO : v;
}

/* A bound at int_oo stands for "past the int64 range" (which ranges over exact integers
 * must say when a bound overflows), so +int_oo + -int_oo is unknown: mixed is the answer
 * on the safe side (-int_oo for a lower bound, +int_oo for an upper one). */
static int64_t sat_add(int64_t a, int64_t b, int64_t mixed)
{
    if (is_inf(a) && is_inf(b) && a != b)
        return mixed;
    if (is_inf(a))
        return a;
    if (is_inf(b))
        return b;
    int64_t r;
    if (__builtin_add_overflow(a, b, &r))
        return a < 0 ? NEG_OO : OO;
    return clampv(r);
}

/* 0 * int_oo is 0: the bounds stand for finite values. */
static int64_t sat_mul(int64_t a, int64_t b)
{
    if (a == 0 || b == 0)
        return 0;
    int neg = (a < 0) != (b < 0);
    int64_t r;
    if (is_inf(a) || is_inf(b) || __builtin_mul_overflow(a, b, &r))
        return neg ? NEG_OO : OO;
    return clampv(r);
}

/* A range holding one finite value: the expression is that constant. */
static inline int single(SymRange r)
{
    return r.lo == r.hi && fin(r.lo);
}

/* Ranges bound exact integers, so simplifications they justify stay exact even where an
 * int64 evaluation would overflow. A lower bound saturated to +int_oo ("at least the
 * largest int64") weakens to the largest finite value, and likewise for upper bounds, so
 * every range keeps lo < +int_oo and hi > -int_oo and the rules may read int_oo as a limit. */
static inline SymRange fix(SymRange r)
{
    if (r.lo == OO)
        r.lo = OO - 1;
    if (r.hi == NEG_OO)
        r.hi = NEG_OO + 1;
    return r;
}

static SymRange rneg(SymRange a)
{
    return rng(-a.hi, -a.lo);
}
static SymRange runion(SymRange a, SymRange b)
{
    return rng(imin(a.lo, b.lo), imax(a.hi, b.hi));
}

static SymRange range_add(SymRange a, SymRange b)
{
    return rng(sat_add(a.lo, b.lo, NEG_OO), sat_add(a.hi, b.hi, OO));
}

static SymRange range_mul(SymRange a, SymRange b)
{
    int64_t p[4] = {sat_mul(a.lo, b.lo), sat_mul(a.lo, b.hi), sat_mul(a.hi, b.lo), sat_mul(a.hi, b.hi)};
    SymRange r = {p[0], p[0]};
    for (int i = 1; i < 4; i++)
        r = runion(r, rng(p[i], p[i]));
    return r;
}

/* x // y for y >= 1, with the limits at the infinities (x // int_oo is 0 or -1). */
static int64_t div_lim(int64_t x, int64_t y)
{
    if (is_inf(x))
        return x;
    if (y == OO)
        return x >= 0 ? 0 : -1;
    int64_t q = 0;
    (void)fold_floordiv(x, y, &q);   /* y >= 1: cannot fail */
    return q;
}

/* a // b for b in [b1, b2], b1 >= 1. Monotone in a; in b non-increasing for a >= 0 and
 * non-decreasing for a < 0, so each end comes from one corner. */
static SymRange fd_pos(SymRange a, int64_t b1, int64_t b2)
{
    return rng(a.lo >= 0 ? div_lim(a.lo, b2) : div_lim(a.lo, b1), a.hi >= 0 ? div_lim(a.hi, b1) : div_lim(a.hi, b2));
}

/* Negative divisors use floor(a / b) == floor(-a / -b); a divisor range holding 0 is the
 * union of its two signed parts (0 itself raises at run time). */
static SymRange range_floordiv(SymRange a, SymRange b)
{
    SymRange r = FULL;
    int have = 0;
    if (b.hi >= 1) {
        r = fd_pos(a, imax(b.lo, 1), b.hi);
        have = 1;
    }
    if (b.lo <= -1) {
        SymRange n = fd_pos(rneg(a), imax(-b.hi, 1), -b.lo);
        r = have ? runion(r, n) : n;
        have = 1;
    }
    return have ? r : FULL;
}

static SymRange range_mod(SymRange a, SymRange b)
{
    if (b.lo == b.hi && b.lo != 0 && !is_inf(a.lo) && !is_inf(a.hi)) {
        /* one constant divisor and the dividend inside one of its multiples: exact */
        int64_t q1, q2, r1, r2;
        if (!fold_floordiv(a.lo, b.lo, &q1) && !fold_floordiv(a.hi, b.lo, &q2) && q1 == q2) {
            (void)fold_mod(a.lo, b.lo, &r1);
            (void)fold_mod(a.hi, b.lo, &r2);
            return rng(r1, r2);
        }
    }
    if (b.lo >= 1 && a.lo >= 0 && a.hi < b.lo)
        return a;
    if (b.hi <= -1 && a.hi <= 0 && a.lo > b.hi)
        return a;
    SymRange r = FULL;
    int have = 0;
    if (b.hi >= 1) {   /* the result has the divisor's sign and is smaller in size */
        r = rng(0, b.hi == OO ? OO : b.hi - 1);
        if (a.lo >= 0 && a.hi < r.hi)
            r.hi = a.hi;
        have = 1;
    }
    if (b.lo <= -1) {
        SymRange n = rng(b.lo == NEG_OO ? NEG_OO : b.lo + 1, 0);
        if (a.hi <= 0 && a.lo > n.lo)
            n.lo = a.lo;
        r = have ? runion(r, n) : n;
        have = 1;
    }
    return have ? r : FULL;
}

static SymRange range_min(SymRange a, SymRange b)
{
    return rng(imin(a.lo, b.lo), imin(a.hi, b.hi));
}
static SymRange range_max(SymRange a, SymRange b)
{
    return rng(imax(a.lo, b.lo), imax(a.hi, b.hi));
}

/* ------------------------------------------------------ the kind table ---- */

#define fold_none NULL
#define range_none NULL

const SymKindInfo sym_kinds[SK_COUNT] = {
#define X(e, name, arity, flags, print, token, fold, range) {name, arity, flags, print, token, fold, range},
#include "sym_ops.def"
#undef X
};

const char *sym_kind_name(SymKind kind)
{
    return (unsigned)kind < SK_COUNT ? sym_kinds[kind].name : "?";
}
int sym_is_bool(const SymNode *e)
{
    return (sym_kinds[e->kind].flags & SF_BOOL) != 0;
}
int sym_is_symbol(const SymNode *e)
{
    return e->kind == SK_SYMBOL || e->kind == SK_UNBACKED;
}

int sym_has_unbacked(const SymNode *e)
{
    if (e->kind == SK_UNBACKED)
        return 1;
    for (uint32_t i = 0; i < e->nargs; i++)
        if (sym_has_unbacked(e->args[i]))
            return 1;
    return 0;
}

/* ------------------------------------------------ the env and its arena ---- */

typedef struct Block {
    struct Block *next;
    size_t used, cap;
    max_align_t data[];   /* nodes, bump-allocated */
} Block;

struct SymEnv {
    Block *blocks;              /* owned: every node lives here */
    SymNode **table;            /* owned: hash-cons buckets (chained through node->next) */
    size_t tcap, tcount;
    SymNode **syms;             /* owned array, borrowed nodes: symbols by slot */
    int32_t nsyms, capsyms;
    int64_t nbacked, nunbacked; /* the next N of s<N> / u<N> */
    uint32_t nnodes;
    uint64_t epoch;             /* bumped when a range narrows: invalidates range caches */
    SymNode *truth[2];          /* the False and True nodes */
};

#define BLOCK_BYTES (32 * 1024)

static void *arena_alloc(SymEnv *env, size_t size)
{
    size = (size + 15) & ~(size_t)15;
    Block *b = env->blocks;
    if (!b || b->cap - b->used < size) {
        size_t cap = size > BLOCK_BYTES / 4 ? size : BLOCK_BYTES;
        Block *nb = PyMem_Malloc(sizeof(Block) + cap);
        if (!nb) {
            PyErr_NoMemory();
            return NULL;
        }
        nb->used = 0;
        nb->cap = cap;
        if (b && cap != BLOCK_BYTES) {   /* an oversized node: keep filling the current block */
            nb->next = b->next;
            b->next = nb;
        } else {
            nb->next = b;
            env->blocks = nb;
        }
        b = nb;
    }
    void *p = (char *)b->data + b->used;
    b->used += size;
    return p;
}

static uint64_t key_hash(int kind, int64_t value, SymNode *const *args, uint32_t n)
{
    uint64_t head[2] = {(uint64_t)kind | ((uint64_t)n << 8), (uint64_t)value};
    uint64_t h = XXH3_64bits(head, sizeof head);
    for (uint32_t i = 0; i < n; i++)
        h = XXH3_64bits_withSeed(&args[i]->hash, sizeof args[i]->hash, h);
    return h;
}

static SymNode *node_new(SymEnv *env, int kind, int64_t value, SymNode *const *args, uint32_t n, uint64_t hash)
{
    SymNode *e = arena_alloc(env, sizeof(SymNode) + n * sizeof(SymNode *));
    if (!e)
        return NULL;
    memset(e, 0, sizeof *e);
    e->kind = (uint8_t)kind;
    e->nargs = n;
    e->id = env->nnodes++;
    e->slot = -1;
    e->value = value;
    e->range = FULL;
    e->hash = hash;
    if (n)
        memcpy(e->args, args, n * sizeof *args);
    return e;
}

static int table_grow(SymEnv *env)
{
    size_t cap = env->tcap ? env->tcap * 2 : 256;
    SymNode **t = PyMem_Calloc(cap, sizeof *t);
    if (!t) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < env->tcap; i++) {
        for (SymNode *e = env->table[i], *next; e; e = next) {
            next = e->next;
            size_t j = e->hash & (cap - 1);
            e->next = t[j];
            t[j] = e;
        }
    }
    PyMem_Free(env->table);
    env->table = t;
    env->tcap = cap;
    return 0;
}

/* The one node for (kind, value, args): looked up, or made. Args must be canonical. */
static SymNode *intern(SymEnv *env, int kind, int64_t value, SymNode *const *args, uint32_t n)
{
    assert(sym_kinds[kind].arity == SYM_NARY ? n >= 2 : n == (uint32_t)sym_kinds[kind].arity);
    uint64_t h = key_hash(kind, value, args, n);
    for (SymNode *e = env->table[h & (env->tcap - 1)]; e; e = e->next)
        if (e->hash == h && e->kind == kind && e->value == value && e->nargs == n &&
            (n == 0 || memcmp(e->args, args, n * sizeof *args) == 0))
            return e;
    if ((env->tcount + 1) * 4 > env->tcap * 3 && table_grow(env) < 0)
        return NULL;
    SymNode *e = node_new(env, kind, value, args, n, h);
    if (!e)
        return NULL;
    size_t j = h & (env->tcap - 1);
    e->next = env->table[j];
    env->table[j] = e;
    env->tcount++;
    return e;
}

SymEnv *sym_env_new(void)
{
    SymEnv *env = PyMem_Calloc(1, sizeof *env);
    if (!env) {
        PyErr_NoMemory();
        return NULL;
    }
    env->epoch = 1;   /* nodes start at epoch 0: no cached range yet */
    if (table_grow(env) < 0 || !(env->truth[0] = intern(env, SK_BOOL, 0, NULL, 0)) ||
        !(env->truth[1] = intern(env, SK_BOOL, 1, NULL, 0))) {
        sym_env_free(env);
        return NULL;
    }
    return env;
}

void sym_env_free(SymEnv *env)
{
    if (!env)
        return;
    for (Block *b = env->blocks, *next; b; b = next) {
        next = b->next;
        PyMem_Free(b);
    }
    PyMem_Free(env->table);
    PyMem_Free(env->syms);
    PyMem_Free(env);
}

int32_t sym_env_nsymbols(const SymEnv *env)
{
    return env->nsyms;
}
uint32_t sym_env_nnodes(const SymEnv *env)
{
    return env->nnodes;
}

SymNode *sym_env_symbol_at(const SymEnv *env, int32_t slot)
{
    return slot >= 0 && slot < env->nsyms ? env->syms[slot] : NULL;
}

/* ------------------------------------------------------------- errors ---- */

void *sym_overflow(void)
{
    PyErr_SetString(PyExc_OverflowError, "symbolic integer overflow: a constant left the int64 range");
    return NULL;
}

void *sym_zero_division(void)
{
    PyErr_SetString(PyExc_ZeroDivisionError, "integer division or modulo by zero");
    return NULL;
}

static int need_int(const SymNode *a, const SymNode *b)
{
    if (sym_is_bool(a) || (b && sym_is_bool(b))) {
        PyErr_SetString(PyExc_TypeError, "symbolic integer operation on a boolean expression");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ leaves ---- */

SymRange sym_range_default_backed(void)
{
    return rng(2, OO);
}
SymRange sym_range_full(void)
{
    return FULL;
}

SymNode *sym_const(SymEnv *env, int64_t v)
{
    if (!fin(v))
        return sym_overflow();
    return intern(env, SK_CONST, v, NULL, 0);
}

SymNode *sym_bool(SymEnv *env, int truth)
{
    return env->truth[truth != 0];
}

/* INT64_MIN reads as -int_oo; an empty or inverted range is refused. */
static int check_range(SymRange *r)
{
    r->lo = imax(r->lo, NEG_OO);
    if (r->lo > r->hi || r->lo == OO || r->hi == NEG_OO) {
        PyErr_Format(PyExc_ValueError, "invalid symbol range [%lld, %lld]", (long long)r->lo, (long long)r->hi);
        return -1;
    }
    return 0;
}

static SymNode *new_symbol(SymEnv *env, int kind, int64_t hint, SymRange r)
{
    if (check_range(&r) < 0)
        return NULL;
    if (sj_grow((void **)&env->syms, &env->capsyms, env->nsyms + 1, sizeof *env->syms, 16) < 0)
        return NULL;
    int64_t n = kind == SK_SYMBOL ? env->nbacked : env->nunbacked;
    SymNode *e = node_new(env, kind, n, NULL, 0, key_hash(kind, n, NULL, 0));
    if (!e)
        return NULL;
    e->hint = hint;
    e->range = r;
    e->slot = env->nsyms;
    env->syms[env->nsyms++] = e;
    if (kind == SK_SYMBOL)
        env->nbacked++;
    else
        env->nunbacked++;
    return e;
}

SymNode *sym_symbol(SymEnv *env, int64_t hint, SymRange range)
{
    if (!fin(hint) || hint < range.lo || hint > range.hi) {
        PyErr_Format(PyExc_ValueError, "symbol hint %lld is outside its range", (long long)hint);
        return NULL;
    }
    return new_symbol(env, SK_SYMBOL, hint, range);
}

SymNode *sym_unbacked(SymEnv *env, SymRange range)
{
    return new_symbol(env, SK_UNBACKED, 0, range);
}

/* ------------------------------------------------------ canonical order ---- */

static int node_cmp(const SymNode *a, const SymNode *b)
{
    if (a == b)
        return 0;
    if (a->kind != b->kind)
        return a->kind < b->kind ? -1 : 1;
    if (a->value != b->value)
        return a->value < b->value ? -1 : 1;
    uint32_t n = a->nargs < b->nargs ? a->nargs : b->nargs;
    for (uint32_t i = 0; i < n; i++) {
        int c = node_cmp(a->args[i], b->args[i]);
        if (c)
            return c;
    }
    return a->nargs < b->nargs ? -1 : a->nargs > b->nargs;
}

static int cmp_nodes(const void *x, const void *y)
{
    return node_cmp(*(SymNode *const *)x, *(SymNode *const *)y);
}

/* ---------------------------------------------------- scratch vectors ---- */

/* The doubled copy of a full scratch vector v (its inline storage inl released), or NULL
 * with MemoryError (v untouched). */
static void *vec_grow(void *v, const void *inl, uint32_t n, uint32_t *cap, size_t size)
{
    void *p = PyMem_Malloc(2 * (size_t)*cap * size);
    if (!p)
        return PyErr_NoMemory();
    memcpy(p, v, n * size);
    if (v != inl)
        PyMem_Free(v);
    *cap *= 2;
    return p;
}

typedef struct {
    SymNode **v;
    uint32_t n, cap;
    SymNode *inl[INL];
} Nodes;

static void nodes_init(Nodes *s)
{
    s->v = s->inl;
    s->n = 0;
    s->cap = INL;
}
static void nodes_free(Nodes *s)
{
    if (s->v != s->inl)
        PyMem_Free(s->v);
}

/* Appends e; NULL e (a failed constructor) passes its error on. */
static int nodes_push(Nodes *s, SymNode *e)
{
    SymNode **v = s->v;
    if (!e || (s->n == s->cap && !(v = vec_grow(s->v, s->inl, s->n, &s->cap, sizeof *v))))
        return -1;
    s->v = v;
    s->v[s->n++] = e;
    return 0;
}

/* A term of a sum: coef times the factors of node, where node is the term as an Add holds
 * it (a Mul with its own coefficient, or any other non-constant node). */
typedef struct {
    int64_t coef;
    SymNode *node;
} Term;
typedef struct {
    Term *v;
    uint32_t n, cap;
    Term inl[INL];
} Terms;

static void terms_init(Terms *s)
{
    s->v = s->inl;
    s->n = 0;
    s->cap = INL;
}
static void terms_free(Terms *s)
{
    if (s->v != s->inl)
        PyMem_Free(s->v);
}

static int terms_push(Terms *s, int64_t coef, SymNode *node)
{
    Term *v = s->v;
    if (s->n == s->cap && !(v = vec_grow(s->v, s->inl, s->n, &s->cap, sizeof *v)))
        return -1;
    s->v = v;
    s->v[s->n].coef = coef;
    s->v[s->n++].node = node;
    return 0;
}

/* ------------------------------------------------- sums and products ---- */

/* The factors of the term in slot *pe (a Mul's after its coefficient; else the node). */
uint32_t sym_factors_of(SymNode *const *pe, SymNode *const **f)
{
    const SymNode *e = *pe;
    if (e->kind != SK_MUL) {
        *f = pe;
        return 1;
    }
    uint32_t k = (uint32_t)has_coef(e);
    *f = e->args + k;
    return e->nargs - k;
}

static int term_cmp(const void *x, const void *y)
{
    SymNode *const *fa, *const *fb;
    uint32_t na = sym_factors_of(&((const Term *)x)->node, &fa);
    uint32_t nb = sym_factors_of(&((const Term *)y)->node, &fb);
    for (uint32_t i = 0; i < na && i < nb; i++) {
        int c = node_cmp(fa[i], fb[i]);
        if (c)
            return c;
    }
    return na < nb ? -1 : na > nb;
}

/* c += e's constant * k; e's terms * k appended to ts. */
static int collect(Terms *ts, int64_t *c, SymNode *e, int64_t k)
{
    uint32_t n = e->kind == SK_ADD ? e->nargs : 1;
    SymNode *const *args = e->kind == SK_ADD ? e->args : &e;
    for (uint32_t i = 0; i < n; i++) {
        int64_t p;
        if (args[i]->kind == SK_CONST) {
            if (fold_mul(args[i]->value, k, &p) || fold_add(*c, p, c)) {
                sym_overflow();
                return -1;
            }
        } else if (fold_mul(coef_of(args[i]), k, &p)) {
            sym_overflow();
            return -1;
        } else if (terms_push(ts, p, args[i]) < 0) {
            return -1;
        }
    }
    return 0;
}

/* Sort, add up like terms, drop zeros. */
static int combine(Terms *ts)
{
    qsort(ts->v, ts->n, sizeof *ts->v, term_cmp);
    uint32_t out = 0;
    for (uint32_t i = 0; i < ts->n; i++) {
        if (out && term_cmp(&ts->v[out - 1], &ts->v[i]) == 0) {
            if (fold_add(ts->v[out - 1].coef, ts->v[i].coef, &ts->v[out - 1].coef)) {
                sym_overflow();
                return -1;
            }
        } else {
            ts->v[out++] = ts->v[i];
        }
        if (ts->v[out - 1].coef == 0)
            out--;
    }
    ts->n = out;
    return 0;
}

/* coef * f[0] * ... (f sorted, no constant among them). */
static SymNode *product(SymEnv *env, int64_t coef, SymNode *const *f, uint32_t nf)
{
    if (coef == 0 || nf == 0)
        return sym_const(env, nf ? 0 : coef);
    if (coef == 1 && nf == 1)
        return f[0];
    Nodes args;
    nodes_init(&args);
    SymNode *r = NULL;
    if (coef == 1 || nodes_push(&args, sym_const(env, coef)) == 0) {
        uint32_t i = 0;
        while (i < nf && nodes_push(&args, f[i]) == 0)
            i++;
        if (i == nf)
            r = intern(env, SK_MUL, 0, args.v, args.n);
    }
    nodes_free(&args);
    return r;
}

static SymNode *term_node(SymEnv *env, Term *t)
{
    if (t->coef == coef_of(t->node))
        return t->node;
    SymNode *const *f;
    uint32_t nf = sym_factors_of(&t->node, &f);
    return product(env, t->coef, f, nf);
}

/* c + the terms (sorted and combined). */
static SymNode *build_sum(SymEnv *env, int64_t c, Terms *ts)
{
    if (ts->n == 0)
        return sym_const(env, c);
    if (ts->n == 1 && c == 0)
        return term_node(env, &ts->v[0]);
    Nodes args;
    nodes_init(&args);
    SymNode *r = NULL;
    if (c == 0 || nodes_push(&args, sym_const(env, c)) == 0) {
        uint32_t i = 0;
        while (i < ts->n && nodes_push(&args, term_node(env, &ts->v[i])) == 0)
            i++;
        if (i == ts->n)
            r = intern(env, SK_ADD, 0, args.v, args.n);
    }
    nodes_free(&args);
    return r;
}

/* ka*a + kb*b (b may be NULL): every linear rewrite goes through here. */
static SymNode *lincomb(SymEnv *env, SymNode *a, int64_t ka, SymNode *b, int64_t kb)
{
    Terms ts;
    terms_init(&ts);
    int64_t c = 0;
    SymNode *r = NULL;
    if (collect(&ts, &c, a, ka) == 0 && (!b || collect(&ts, &c, b, kb) == 0) && combine(&ts) == 0)
        r = build_sum(env, c, &ts);
    terms_free(&ts);
    return r;
}

static SymNode *scale(SymEnv *env, SymNode *e, int64_t k)
{
    return k == 1 ? e : lincomb(env, e, k, NULL, 0);
}

SymNode *sym_add(SymEnv *env, SymNode *a, SymNode *b)
{
    return need_int(a, b) < 0 ? NULL : lincomb(env, a, 1, b, 1);
}

SymNode *sym_sub(SymEnv *env, SymNode *a, SymNode *b)
{
    return need_int(a, b) < 0 ? NULL : lincomb(env, a, 1, b, -1);
}

SymNode *sym_neg(SymEnv *env, SymNode *a)
{
    return need_int(a, NULL) < 0 ? NULL : lincomb(env, a, -1, NULL, 0);
}

SymNode *sym_mul(SymEnv *env, SymNode *a, SymNode *b)
{
    if (need_int(a, b) < 0)
        return NULL;
    if (a->kind == SK_CONST)
        return scale(env, b, a->value);
    if (b->kind == SK_CONST)
        return scale(env, a, b->value);
    int64_t coef;
    if (fold_mul(coef_of(a), coef_of(b), &coef))
        return sym_overflow();
    Nodes f;
    nodes_init(&f);
    SymNode *r = NULL;
    SymNode *const *fa, *const *fb;
    uint32_t na = sym_factors_of(&a, &fa), nb = sym_factors_of(&b, &fb), i = 0;
    while (i < na + nb && nodes_push(&f, i < na ? fa[i] : fb[i - na]) == 0)
        i++;
    if (i == na + nb) {
        qsort(f.v, f.n, sizeof *f.v, cmp_nodes);
        r = product(env, coef, f.v, f.n);
    }
    nodes_free(&f);
    return r;
}

/* ----------------------------------------------- ranges of expressions ---- */

static SymTruth rel_truth(SymEnv *env, int kind, SymNode *a, SymNode *b);

SymRange sym_range(SymEnv *env, SymNode *e)
{
    switch (e->kind) {
    case SK_CONST:
    case SK_BOOL:
        return rng(e->value, e->value);
    case SK_SYMBOL:
    case SK_UNBACKED:
        return e->range;
    default:
        break;
    }
    if (sym_kinds[e->kind].flags & SF_BOOL) {
        SymTruth t = rel_truth(env, e->kind, e->args[0], e->args[1]);
        return t == SYM_UNKNOWN ? rng(0, 1) : rng(t, t);
    }
    if (e->range_epoch == env->epoch)
        return e->range;
    RangeFn f = sym_kinds[e->kind].range;
    SymRange r = sym_range(env, e->args[0]);
    for (uint32_t i = 1; i < e->nargs; i++)
        r = fix(f(r, sym_range(env, e->args[i])));
    e->range = r;
    e->range_epoch = env->epoch;
    return r;
}

/* Range of a - b with like terms cancelled first (so s0 - s0 is [0, 0], not [-oo, oo]).
 * Allocation-free (never fails): past INL terms it falls back to range(a) - range(b). */
static SymRange diff_range(SymEnv *env, SymNode *a, SymNode *b)
{
    SymRange fallback = fix(range_add(sym_range(env, a), rneg(sym_range(env, b))));
    Term ts[INL];
    uint32_t n = 0;
    SymRange r = rng(0, 0);
    SymNode *side[2] = {a, b};
    for (int s = 0; s < 2; s++) {
        SymNode *e = side[s];
        uint32_t ne = e->kind == SK_ADD ? e->nargs : 1;
        SymNode *const *args = e->kind == SK_ADD ? e->args : &side[s];
        for (uint32_t i = 0; i < ne; i++) {
            if (args[i]->kind == SK_CONST) {
                int64_t v = s ? -args[i]->value : args[i]->value;
                r = fix(range_add(r, rng(v, v)));
            } else if (n == INL) {
                return fallback;
            } else {
                ts[n].coef = s ? -coef_of(args[i]) : coef_of(args[i]);
                ts[n++].node = args[i];
            }
        }
    }
    qsort(ts, n, sizeof *ts, term_cmp);
    for (uint32_t i = 0; i < n;) {
        int64_t coef = ts[i].coef;
        uint32_t j = i + 1;
        for (; j < n && term_cmp(&ts[i], &ts[j]) == 0; j++)
            if (fold_add(coef, ts[j].coef, &coef))
                return fallback;
        if (coef) {
            SymNode *const *f;
            uint32_t nf = sym_factors_of(&ts[i].node, &f);
            SymRange t = rng(coef, coef);
            for (uint32_t k = 0; k < nf; k++)
                t = fix(range_mul(t, sym_range(env, f[k])));
            r = fix(range_add(r, t));
        }
        i = j;
    }
    /* the cancelled form is never looser in theory; intersecting guards rounding at int_oo */
    return fix(rng(imax(r.lo, fallback.lo), imin(r.hi, fallback.hi)));
}

static SymTruth rel_truth(SymEnv *env, int kind, SymNode *a, SymNode *b)
{
    SymRange d = diff_range(env, a, b);
    switch (kind) {
    case SK_LT:
        return d.hi < 0 ? SYM_TRUE : d.lo >= 0 ? SYM_FALSE : SYM_UNKNOWN;
    case SK_LE:
        return d.hi <= 0 ? SYM_TRUE : d.lo > 0 ? SYM_FALSE : SYM_UNKNOWN;
    case SK_EQ:
        return d.lo == 0 && d.hi == 0 ? SYM_TRUE : d.lo > 0 || d.hi < 0 ? SYM_FALSE : SYM_UNKNOWN;
    case SK_NE:
        return d.lo == 0 && d.hi == 0 ? SYM_FALSE : d.lo > 0 || d.hi < 0 ? SYM_TRUE : SYM_UNKNOWN;
    default:
        return SYM_UNKNOWN;
    }
}

SymTruth sym_static_truth(SymEnv *env, SymNode *e)
{
    if (e->kind == SK_BOOL)
        return e->value ? SYM_TRUE : SYM_FALSE;
    if (sym_kinds[e->kind].flags & SF_BOOL)
        return rel_truth(env, e->kind, e->args[0], e->args[1]);
    return SYM_UNKNOWN;
}

SymTruth sym_static_truth_oblivious(SymEnv *env, SymNode *e)
{
    SymTruth t = sym_static_truth(env, e);
    if (t != SYM_UNKNOWN || !sym_has_unbacked(e))
        return t;
    /* size-oblivious: every unbacked size (a symbol whose range lies in [0, int_oo]) is
     * taken to be at least 2 for this one question, then the ranges are put back */
    int32_t n = env->nsyms;
    int64_t *lo = PyMem_Malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    if (!lo)
        return SYM_UNKNOWN;   /* no memory: no answer (the caller treats it as undecided) */
    int changed = 0;
    for (int32_t i = 0; i < n; i++) {
        SymNode *s = env->syms[i];
        lo[i] = s->range.lo;
        if (s->kind == SK_UNBACKED && s->range.lo >= 0 && s->range.lo < 2 && s->range.hi >= 2) {
            s->range.lo = 2;
            changed = 1;
        }
    }
    if (changed) {
        env->epoch++;
        t = sym_static_truth(env, e);
        for (int32_t i = 0; i < n; i++)
            env->syms[i]->range.lo = lo[i];
        env->epoch++;
    }
    PyMem_Free(lo);
    return t;
}

int sym_set_range(SymEnv *env, SymNode *s, SymRange r)
{
    if (!sym_is_symbol(s)) {
        PyErr_SetString(PyExc_TypeError, "only a symbol's range can be narrowed");
        return -1;
    }
    if (check_range(&r) < 0)
        return -1;
    SymRange n = rng(imax(s->range.lo, r.lo), imin(s->range.hi, r.hi));
    if (n.lo > n.hi || (s->kind == SK_SYMBOL && (s->hint < n.lo || s->hint > n.hi))) {
        PyErr_Format(PyExc_ValueError, "narrowing %s%lld to [%lld, %lld] leaves %s", sym_kinds[s->kind].token,
                     (long long)s->value, (long long)r.lo, (long long)r.hi, n.lo > n.hi ? "no value" : "out its hint");
        return -1;
    }
    if (n.lo == s->range.lo && n.hi == s->range.hi)
        return 0;
    s->range = n;
    env->epoch++;
    return 1;
}

/* ----------------------------------------------- division and modulo ---- */

static SymNode *fold_const(SymEnv *env, FoldFn f, int64_t a, int64_t b)
{
    int64_t v;
    int rc = f(a, b, &v);
    return rc == SYM_EDIV ? sym_zero_division() : rc ? sym_overflow() : sym_const(env, v);
}

static SymNode *floordiv_const(SymEnv *env, SymNode *a, int64_t k);

/* R // k, R with nothing left that k divides. */
static SymNode *floordiv_rest(SymEnv *env, SymNode *r, int64_t k)
{
    if (r->kind == SK_CONST)
        return fold_const(env, fold_floordiv, r->value, k);
    SymRange q = range_floordiv(sym_range(env, r), rng(k, k));
    if (single(q))
        return sym_const(env, q.lo);
    int64_t kk;
    if (k > 0 && r->kind == SK_FLOORDIV && r->args[1]->kind == SK_CONST && r->args[1]->value > 0 &&
        !fold_mul(r->args[1]->value, k, &kk))
        return floordiv_const(env, r->args[0], kk);
    SymNode *args[2] = {r, sym_const(env, k)};
    return args[1] ? intern(env, SK_FLOORDIV, 0, args, 2) : NULL;
}

/* a = k*Q + R: Q gathers a's terms whose coefficient k divides (divided by k), and a's
 * constant when k divides it; R the rest. For Mod (q NULL) R's constant is reduced modulo
 * k instead and Q is not built. */
static int split_multiples(SymEnv *env, SymNode *a, int64_t k, SymNode **q, SymNode **r)
{
    Terms ts, qs, rs;
    terms_init(&ts);
    terms_init(&qs);
    terms_init(&rs);
    int64_t c = 0, qc = 0;
    int rc = -1;
    uint32_t i = 0;
    if (collect(&ts, &c, a, 1) < 0)
        goto done;
    for (; i < ts.n; i++) {
        Term *t = &ts.v[i];
        if ((t->coef % k == 0 ? terms_push(&qs, t->coef / k, t->node) : terms_push(&rs, t->coef, t->node)) < 0)
            goto done;
    }
    if (!q) {
        (void)fold_mod(c, k, &c);
    } else if (c % k == 0) {
        qc = c / k;
        c = 0;
    }
    /* subsets of a's canonical terms: still sorted, combined, non-zero */
    if ((!q || (*q = build_sum(env, qc, &qs))) && (*r = build_sum(env, c, &rs)))
        rc = 0;
done:
    terms_free(&ts);
    terms_free(&qs);
    terms_free(&rs);
    return rc;
}

/* a // k = Q + R // k (split_multiples). */
static SymNode *floordiv_const(SymEnv *env, SymNode *a, int64_t k)
{
    if (k == 0)
        return sym_zero_division();
    if (a->kind == SK_CONST)
        return fold_const(env, fold_floordiv, a->value, k);
    if (k == 1)
        return a;
    if (k == -1)
        return sym_neg(env, a);
    SymNode *q, *r, *inner;
    if (split_multiples(env, a, k, &q, &r) < 0 || !(inner = floordiv_rest(env, r, k)))
        return NULL;
    return sym_add(env, q, inner);
}

SymNode *sym_floordiv(SymEnv *env, SymNode *a, SymNode *b)
{
    if (need_int(a, b) < 0)
        return NULL;
    if (b->kind == SK_CONST)
        return floordiv_const(env, a, b->value);
    if (a->kind == SK_CONST && a->value == 0)
        return a;
    if (a == b)
        return sym_const(env, 1);
    SymRange ra = sym_range(env, a), rb = sym_range(env, b);
    if (ra.lo >= 0 && rb.lo >= 1 && diff_range(env, a, b).hi < 0)
        return sym_const(env, 0);
    SymRange q = range_floordiv(ra, rb);
    if (single(q))
        return sym_const(env, q.lo);
    SymNode *args[2] = {a, b};
    return intern(env, SK_FLOORDIV, 0, args, 2);
}

/* Mod(a, k): a's terms that k divides drop out, its constant reduces modulo k. */
static SymNode *mod_const(SymEnv *env, SymNode *a, int64_t k)
{
    if (k == 0)
        return sym_zero_division();
    if (a->kind == SK_CONST)
        return fold_const(env, fold_mod, a->value, k);
    if (k == 1 || k == -1)
        return sym_const(env, 0);
    SymNode *args[2];
    if (split_multiples(env, a, k, NULL, &args[0]) < 0)
        return NULL;
    if (args[0]->kind == SK_CONST)
        return fold_const(env, fold_mod, args[0]->value, k);
    SymRange ra = sym_range(env, args[0]);
    int64_t q1, q2, qk;
    if (!is_inf(ra.lo) && !is_inf(ra.hi) && !fold_floordiv(ra.lo, k, &q1) && !fold_floordiv(ra.hi, k, &q2) &&
        q1 == q2 && !fold_mul(q1, k, &qk)) {
        /* one multiple of k under the ranges: Mod(a, k) = a - q*k */
        SymNode *off = sym_const(env, -qk);
        return off ? sym_add(env, args[0], off) : NULL;
    }
    return (args[1] = sym_const(env, k)) ? intern(env, SK_MOD, 0, args, 2) : NULL;
}

SymNode *sym_mod(SymEnv *env, SymNode *a, SymNode *b)
{
    if (need_int(a, b) < 0)
        return NULL;
    if (b->kind == SK_CONST)
        return mod_const(env, a, b->value);
    if (a->kind == SK_CONST && a->value == 0)
        return a;
    if (a == b)
        return sym_const(env, 0);
    SymRange ra = sym_range(env, a), rb = sym_range(env, b);
    if (ra.lo >= 0 && rb.lo >= 1 && diff_range(env, a, b).hi < 0)
        return a;
    SymRange m = range_mod(ra, rb);
    if (single(m))
        return sym_const(env, m.lo);
    SymNode *args[2] = {a, b};
    return intern(env, SK_MOD, 0, args, 2);
}

/* ---------------------------------------------------------- min, max ---- */

static SymNode *minmax(SymEnv *env, int kind, SymNode *const *in, uint32_t n)
{
    Nodes v;
    nodes_init(&v);
    SymNode *r = NULL;
    int have_c = 0;
    int64_t c = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (need_int(in[i], NULL) < 0)
            goto done;
        uint32_t m = in[i]->kind == kind ? in[i]->nargs : 1;
        SymNode *const *args = in[i]->kind == kind ? in[i]->args : &in[i];
        for (uint32_t j = 0; j < m; j++) {
            if (args[j]->kind == SK_CONST) {
                int64_t x = args[j]->value;
                c = !have_c ? x : kind == SK_MIN ? imin(c, x) : imax(c, x);
                have_c = 1;
            } else if (nodes_push(&v, args[j]) < 0) {
                goto done;
            }
        }
    }
    if (have_c && nodes_push(&v, sym_const(env, c)) < 0)
        goto done;
    qsort(v.v, v.n, sizeof *v.v, cmp_nodes);
    /* drop duplicates, then each operand some other live operand always wins over */
    uint32_t out = 0;
    for (uint32_t i = 0; i < v.n; i++)
        if (!out || v.v[out - 1] != v.v[i])
            v.v[out++] = v.v[i];
    v.n = out;
    out = 0;
    for (uint32_t i = 0; i < v.n; i++) {
        int dominated = 0;
        for (uint32_t j = 0; j < v.n && !dominated; j++) {
            if (j == i || (j < i && !v.v[j]))
                continue;
            SymRange d = diff_range(env, v.v[i], v.v[j]);
            dominated = kind == SK_MAX ? d.hi <= 0 : d.lo >= 0;
        }
        if (dominated)
            v.v[i] = NULL;   /* later operands compare against live ones only */
    }
    for (uint32_t i = 0; i < v.n; i++)
        if (v.v[i])
            v.v[out++] = v.v[i];
    v.n = out;
    r = v.n == 1 ? v.v[0] : intern(env, kind, 0, v.v, v.n);
done:
    nodes_free(&v);
    return r;
}

SymNode *sym_min_n(SymEnv *env, SymNode *const *args, uint32_t n)
{
    return minmax(env, SK_MIN, args, n);
}
SymNode *sym_max_n(SymEnv *env, SymNode *const *args, uint32_t n)
{
    return minmax(env, SK_MAX, args, n);
}

SymNode *sym_min(SymEnv *env, SymNode *a, SymNode *b)
{
    SymNode *args[2] = {a, b};
    return minmax(env, SK_MIN, args, 2);
}

/* ------------------------------------------------------------ relations ---- */

/* c REL x + k -> c - k REL x (and mirrored); nothing when c - k would overflow. */
static int move_constant(SymEnv *env, SymNode **side, SymNode **cside)
{
    int64_t k = (*side)->args[0]->value, nc;
    if (fold_add((*cside)->value, -k, &nc))
        return 0;
    SymNode *s = sym_sub(env, *side, (*side)->args[0]), *c = s ? sym_const(env, nc) : NULL;
    if (!c)
        return -1;
    *side = s;
    *cside = c;
    return 0;
}

static SymNode *relation(SymEnv *env, int kind, SymNode *a, SymNode *b)
{
    if (need_int(a, b) < 0)
        return NULL;
    if (a->kind == SK_CONST && b->kind == SK_CONST) {
        int64_t t;
        (void)sym_kinds[kind].fold(a->value, b->value, &t);
        return sym_bool(env, (int)t);
    }
    if (b->kind == SK_CONST && has_const(a) && move_constant(env, &a, &b) < 0)
        return NULL;
    if (a->kind == SK_CONST && has_const(b) && move_constant(env, &b, &a) < 0)
        return NULL;
    SymTruth t = rel_truth(env, kind, a, b);
    if (t != SYM_UNKNOWN)
        return sym_bool(env, t == SYM_TRUE);
    if ((kind == SK_EQ || kind == SK_NE) && (a->kind == SK_CONST || (b->kind != SK_CONST && node_cmp(a, b) > 0))) {
        SymNode *tmp = a;
        a = b;
        b = tmp;
    }
    SymNode *args[2] = {a, b};
    return intern(env, kind, 0, args, 2);
}

SymNode *sym_eq(SymEnv *env, SymNode *a, SymNode *b)
{
    return relation(env, SK_EQ, a, b);
}
SymNode *sym_ne(SymEnv *env, SymNode *a, SymNode *b)
{
    return relation(env, SK_NE, a, b);
}
SymNode *sym_lt(SymEnv *env, SymNode *a, SymNode *b)
{
    return relation(env, SK_LT, a, b);
}
SymNode *sym_le(SymEnv *env, SymNode *a, SymNode *b)
{
    return relation(env, SK_LE, a, b);
}
SymNode *sym_gt(SymEnv *env, SymNode *a, SymNode *b)
{
    return relation(env, SK_LT, b, a);
}
SymNode *sym_ge(SymEnv *env, SymNode *a, SymNode *b)
{
    return relation(env, SK_LE, b, a);
}

/* For rebuilding an expression read back from a serialised graph (graph/serial.c): the
 * operands were canonical where it was written, so it is interned as it stands; running it
 * through the constructors again could simplify it further under narrower ranges and so
 * change what the graph prints. */
SymNode *sym_node_raw(SymEnv *env, SymKind kind, SymNode *const *args, uint32_t n)
{
    if ((unsigned)kind >= SK_COUNT || (sym_kinds[kind].flags & SF_LEAF) ||
        (sym_kinds[kind].arity == SYM_NARY ? n < 2 : n != (uint32_t)sym_kinds[kind].arity)) {
        PyErr_Format(PyExc_ValueError, "symbolic node %s with %u operands", sym_kind_name(kind), n);
        return NULL;
    }
    for (uint32_t i = 0; i < n; i++)
        if (need_int(args[i], NULL) < 0)
            return NULL;
    return intern(env, kind, 0, args, n);
}
