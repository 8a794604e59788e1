/* Internal to shapes/sym.c and shapes/sym_print.c: the table of node kinds and the small
 * helpers both read. */
#ifndef SJ_SYM_INT_H
#define SJ_SYM_INT_H

#include "sym.h"

#define OO SYM_INT_OO
#define NEG_OO SYM_NEG_INT_OO

enum { SF_LEAF = 1, SF_BOOL = 2 };                                  /* FLAGS column */
enum { SP_ATOM, SP_SUM, SP_PRODUCT, SP_PAREN, SP_CALL, SP_INFIX }; /* PRINT column */

typedef int (*FoldFn)(int64_t a, int64_t b, int64_t *out);
typedef SymRange (*RangeFn)(SymRange a, SymRange b);

/* One row of sym_ops.def. */
typedef struct {
    const char *name;
    int arity, flags, print;
    const char *token;
    FoldFn fold;   /* constant folding, or NULL */
    RangeFn range; /* the interval rule, or NULL */
} SymKindInfo;
extern const SymKindInfo sym_kinds[SK_COUNT];

/* A finite value: INT64_MAX and -INT64_MAX are the infinities, INT64_MIN is unused. */
static inline int fin(int64_t v)
{
    return v > NEG_OO && v < OO;
}

static inline int has_coef(const SymNode *e)
{
    return e->kind == SK_MUL && e->args[0]->kind == SK_CONST;
}

static inline int64_t coef_of(const SymNode *e)
{
    return has_coef(e) ? e->args[0]->value : 1;
}

static inline int has_const(const SymNode *e)
{
    return e->kind == SK_ADD && e->args[0]->kind == SK_CONST;
}

/* The factors of the term in slot *pe (a Mul's after its coefficient; else the node). */
uint32_t sym_factors_of(SymNode *const *pe, SymNode *const **f);
/* Set OverflowError / ZeroDivisionError; return NULL. */
void *sym_overflow(void);
void *sym_zero_division(void);

#endif
