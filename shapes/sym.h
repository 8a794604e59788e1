/* Symbolic integers of the shape environment: the expression core.
 *
 * A SymEnv owns every node it hands out (an arena, freed with the env; no refcounts, no
 * Python references). Nodes are hash-consed: two structurally equal canonical expressions
 * are the same SymNode pointer, so equality of expressions is pointer equality. Nodes are
 * immutable to callers (read the fields, never write them), except that a symbol's range
 * narrows through sym_set_range.
 *
 * Values are int64. +int_oo and -int_oo (SYM_INT_OO, SYM_NEG_INT_OO) appear only as range
 * bounds, never as constants: a constant or an evaluated value outside
 * (SYM_NEG_INT_OO, SYM_INT_OO) is an OverflowError. Ranges bound the exact integer value
 * and saturate at int_oo ("past int64"), so what they justify stays exact: an evaluation
 * that returns a value returns Python's.
 *
 * Errors: every function returning a SymNode * returns NULL, and every int function -1,
 * with a Python exception set (they run under the GIL): TypeError for a boolean where an
 * integer is needed (or the reverse), ZeroDivisionError for a constant divisor 0,
 * OverflowError for int64 overflow of a constant, MemoryError.
 * All SymNode * arguments are borrowed and must belong to the env passed with them.
 *
 * Canonical form (what hash-consing compares, so what "the same expression" means):
 *  - Add: args = [constant, when non-zero] + terms sorted by their factor lists; a term is
 *    a non-Add, non-constant node or a Mul with a coefficient. Like terms combine
 *    (s0 + s0 -> 2*s0, 2*s0 - s0 -> s0), zero terms go; one term and no constant is that
 *    term, no term is the constant.
 *  - Mul: args = [coefficient, when not 1] + factors in canonical order (a repeated factor
 *    stays repeated: s0*s0). Only a constant times an Add distributes, as in sympy
 *    (2*(s0 + 1) -> 2*s0 + 2), so linear expressions stay one flat Add.
 *  - Min/Max: flattened, constants folded into one, duplicates dropped, and an operand that
 *    another operand bounds under the ranges dropped (Max(s0, 1) -> s0); then sorted. One
 *    operand left is that operand.
 *  - FloorDiv/Mod by a constant d: the dividend's terms (and constant) whose coefficient d
 *    divides leave the division ((2*s0 + s1)//2 -> s0 + (s1//2)); Mod drops them and
 *    reduces its constant modulo d (torch's FloorDiv/Mod do the same); a//1 -> a,
 *    (a//c)//d -> a//(c*d) for c, d > 0; when the ranges put the dividend inside one
 *    multiple of d the result is linear (Mod(s, 8) -> s for s in [0, 7]). As in sympy,
 *    a//a -> 1, Mod(a, a) -> 0 and x*0 -> 0 even where a divisor could be 0 at run time.
 *  - Relations: Eq, Ne, Lt, Le; a > b is stored as b < a, a >= b as b <= a. When one side
 *    is a constant and the other an Add with a constant, that constant moves across
 *    (s0 + 1 <= 31 -> s0 <= 30). Eq/Ne put a constant on the right, otherwise the lesser
 *    operand (canonical order) on the left. We do not rewrite a <= b as a - b <= 0 (it would
 *    print unnaturally); the deciding step uses the range of a - b with like terms
 *    cancelled (diff_range), so s0 < s0 + 1 is True. Decided relations are True/False.
 *  - The canonical order (node_cmp) puts constants (by value) < booleans < s<N> (by N) < u<N> < compound kinds
 *    (by sym_ops.def row, then operands, then operand count): structural, so the printed
 *    order never depends on addresses or on the order things were built in.
 * Ranges only ever narrow (sym_set_range), so a simplification made under the ranges of
 * the moment stays valid; cached ranges of compound nodes carry the env's epoch.
 *
 * Printing follows sympy's StrPrinter, with torch's FloorDiv:
 *  - Add: terms in canonical order, the constant last (s0 + 1, s0 - s1, -s0 + s1), except
 *    that a positive constant goes first when every other term is negative (1 - s0).
 *  - Mul: the coefficient first (2*s0, -s0*s1), a repeated factor as a power (s0**2), an
 *    Add factor in parentheses (s1*(s0 + 1)).
 *  - FloorDiv always in parentheses, a non-atomic operand too: (s0//2), ((s0 + 1)//2).
 *    Mod, Min, Max, Eq, Ne as calls: Mod(s0, 2), Min(s0, s1), Eq(s0, 10).
 *  - Lt/Le infix with the operands as stored: s0 < 10, s0 <= 30; s0 >= 2 is stored as
 *    Le(2, s0) and prints 2 <= s0 (Dynamo's form for range guards); True, False. */
#ifndef SJ_SYM_H
#define SJ_SYM_H

#include <Python.h>
#include <stdint.h>

#define SYM_INT_OO INT64_MAX         /* +int_oo: range bounds only */
#define SYM_NEG_INT_OO (-INT64_MAX)  /* -int_oo (INT64_MIN is never a value) */
#define SYM_NARY (-1)                /* sym_ops.def arity of flattened n-ary kinds */

typedef enum {
#define X(e, name, arity, flags, print, token, fold, range) e,
#include "sym_ops.def"
#undef X
    SK_COUNT
} SymKind;

typedef struct {
    int64_t lo, hi;
} SymRange;   /* inclusive; lo < SYM_INT_OO, hi > SYM_NEG_INT_OO */

typedef struct SymNode {
    uint8_t kind;               /* SymKind */
    uint32_t nargs;             /* operands in args */
    uint32_t id;                /* creation order within its env: 0, 1, ... */
    int32_t slot;               /* SYMBOL/UNBACKED: index in the env's symbol table
                                   (sym_eval_with's arrays); -1 otherwise */
    int64_t value;              /* CONST: the value; BOOL: 0 or 1; SYMBOL/UNBACKED: N of s<N>/u<N> */
    int64_t hint;               /* SYMBOL: the value seen when it was created */
    SymRange range;             /* SYMBOL/UNBACKED: current range; compound: cache (sym.c) */
    uint64_t range_epoch;       /* compound: env epoch the cached range was computed at */
    uint64_t hash;              /* structural hash (xxHash) */
    struct SymNode *next;       /* hash-cons chain */
    struct SymNode *args[];     /* operands, canonical order */
} SymNode;

typedef struct SymEnv SymEnv;

typedef enum { SYM_FALSE = 0, SYM_TRUE = 1, SYM_UNKNOWN = 2 } SymTruth;

/* Fold error codes (sym_ops.def's FOLD functions). */
enum { SYM_EDIV = 1, SYM_EOVF = 2 };

/* ---- the environment ---- */
SymEnv *sym_env_new(void);                  /* NULL with MemoryError set */
void sym_env_free(SymEnv *env);             /* frees every node of env; NULL is fine */
int32_t sym_env_nsymbols(const SymEnv *env);  /* symbols created so far (slots 0..n-1) */
SymNode *sym_env_symbol_at(const SymEnv *env, int32_t slot);  /* borrowed, or NULL */
uint32_t sym_env_nnodes(const SymEnv *env); /* nodes created so far (ids 0..n-1) */

/* ---- leaves ---- */
SymNode *sym_const(SymEnv *env, int64_t v);
SymNode *sym_bool(SymEnv *env, int truth);  /* the True / False node */
/* A new backed symbol s<N> (N counts backed symbols), hint within range (ValueError). */
SymNode *sym_symbol(SymEnv *env, int64_t hint, SymRange range);
/* A new unbacked symbol u<N>: no hint. */
SymNode *sym_unbacked(SymEnv *env, SymRange range);
SymRange sym_range_default_backed(void);    /* [2, int_oo] */
SymRange sym_range_full(void);              /* [-int_oo, int_oo] */

/* ---- integer operations (canonical, simplified at construction) ---- */
SymNode *sym_add(SymEnv *env, SymNode *a, SymNode *b);
SymNode *sym_sub(SymEnv *env, SymNode *a, SymNode *b);
SymNode *sym_mul(SymEnv *env, SymNode *a, SymNode *b);
SymNode *sym_neg(SymEnv *env, SymNode *a);
SymNode *sym_floordiv(SymEnv *env, SymNode *a, SymNode *b);   /* Python's a // b */
SymNode *sym_mod(SymEnv *env, SymNode *a, SymNode *b);        /* Python's a % b */
SymNode *sym_min(SymEnv *env, SymNode *a, SymNode *b);
SymNode *sym_min_n(SymEnv *env, SymNode *const *args, uint32_t n);   /* n >= 1 */
SymNode *sym_max_n(SymEnv *env, SymNode *const *args, uint32_t n);

/* ---- relations: a truth node (sym_bool) when decided by constants or ranges ---- */
SymNode *sym_eq(SymEnv *env, SymNode *a, SymNode *b);
SymNode *sym_ne(SymEnv *env, SymNode *a, SymNode *b);
SymNode *sym_lt(SymEnv *env, SymNode *a, SymNode *b);
SymNode *sym_le(SymEnv *env, SymNode *a, SymNode *b);
SymNode *sym_gt(SymEnv *env, SymNode *a, SymNode *b);   /* stored as b < a */
SymNode *sym_ge(SymEnv *env, SymNode *a, SymNode *b);   /* stored as b <= a */

/* The negation of a relation (Eq <-> Ne, a < b <-> b <= a); True <-> False. */
SymNode *sym_not(SymEnv *env, SymNode *rel);

/* The compound node (kind, args) interned exactly as given, with no simplification: for
 * reading back expressions that were canonical when written (graph/serial.c). ValueError
 * for a leaf kind or a wrong operand count, TypeError for a boolean operand. */
SymNode *sym_node_raw(SymEnv *env, SymKind kind, SymNode *const *args, uint32_t n);

/* ---- facts ---- */
const char *sym_kind_name(SymKind kind);    /* sym_ops.def's name: "Add", "Eq", ... */
int sym_is_bool(const SymNode *e);          /* a relation or True/False */
int sym_is_symbol(const SymNode *e);        /* SYMBOL or UNBACKED */
int sym_has_unbacked(const SymNode *e);     /* 1 when an unbacked symbol occurs in e */

/* Value range of e under the symbols' current ranges; a relation: [1,1], [0,0] or [0,1].
 * Never fails. */
SymRange sym_range(SymEnv *env, SymNode *e);
/* Narrow a symbol's range to its intersection with r. Returns 1 when it changed, 0 when
 * not, -1 (TypeError: not a symbol; ValueError: empty, or the hint falls outside). */
int sym_set_range(SymEnv *env, SymNode *sym, SymRange r);
/* Truth of a relation under the current ranges (True/False nodes: their value). */
SymTruth sym_static_truth(SymEnv *env, SymNode *e);
/* The same, size-obliviously: unbacked symbols whose range lies in [0, int_oo] are taken
 * to be >= 2 (never 0 or 1), the answer torch's size-oblivious checks give about sizes that
 * depend on data. Nothing is narrowed for good. */
SymTruth sym_static_truth_oblivious(SymEnv *env, SymNode *e);

/* ---- evaluation (relations give 0 or 1) ---- */
/* With every backed symbol at its hint; an unbacked symbol raises
 * shapejit._C.DataDependentError (sym_data_dependent_error). */
int sym_eval_hint(SymEnv *env, SymNode *e, int64_t *out);
/* With symbol slot i worth values[i] (borrowed array of sym_env_nsymbols(env) entries);
 * known: NULL (all given) or a borrowed array of flags, a 0 flag is "no value"
 * (ValueError if needed). Values outside a symbol's range give unspecified results. */
int sym_eval_with(SymEnv *env, SymNode *e, const int64_t *values, const uint8_t *known, int64_t *out);

/* ---- printing ---- */
/* Name of a symbol for the printer: a borrowed UTF-8 string that lives through the call,
 * or NULL for the default s<N>/u<N>. */
typedef const char *(*SymNameFn)(void *ctx, const SymNode *sym);
/* Sympy-like text of e, symbols named by name(ctx, sym) (name may be NULL): a new str. */
PyObject *sym_print(SymEnv *env, SymNode *e, SymNameFn name, void *ctx);
/* "[2, int_oo]": a new str (the dynamic log's create_symbol / VR[...] ranges). */
PyObject *sym_range_str(SymRange r);

/* shapejit._C.DataDependentError (a RuntimeError); strong, set by sym_init. */
extern PyObject *sym_data_dependent_error;
int sym_init(PyObject *module);             /* creates and registers the exception */

/* ---- test harness (sym_py.c): registers _C._SymEnv and DataDependentError ---- */
int sym_py_init_types(PyObject *module);

#endif
