/* Shape and dtype rules: given the metadata of an op's arguments, the metadata of its
 * outputs. One rule function per family of ops (vocab/ops.def names the rule of each op).
 *
 * Arguments arrive bound to the op's canonical parameter names (see vocab/callables.def
 * for the schema syntax and vocab/bind.h for the binder). A rule reads them with ba_get().
 */
#ifndef SJ_RULES_H
#define SJ_RULES_H

#include "../vocab/bind.h"
#include "../vocab/meta.h"
#include "../vocab/ops.h"

#define SJ_MAX_OUTS 64

/* The contract of every rule: fill out[0..*nout-1] (on entry *nout is the capacity,
 * SJ_MAX_OUTS) and set *nout; return 0. Return -1 with err->msg set when the arguments are
 * invalid (the user's code would raise in eager: capture then runs the frame eagerly so the
 * user sees the library's own error) or not supported yet. Rules never set a Python
 * exception; if one is raised while reading a constant they clear it and return -1. */
typedef int (*ShapeRule)(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err);

/* Symbolic sizes. While a rule runs, sj_symctx is the capture's shape
 * environment when some argument is symbolic (a tensor with a symbolic dim, a symbolic
 * int), else NULL. A rule that handles symbols (shapes_rule_is_symbolic) builds its output
 * dims as nodes of env (rules_util.h: sj_dim, sj_set_dim) and, when its answer depends on a
 * relation between sizes that holds at the hints (two broadcast dims equal), records that
 * relation with guard(ctx, rel) so the entry is guarded by it. */
struct SymEnv;
typedef struct {
    struct SymEnv *env;
    int (*guard)(void *ctx, struct SymNode *rel);   /* 0, or -1 with a Python exception */
    /* rel must hold and depends on unbacked symbols (no hint to decide it by): asserted at
     * run time instead (torch's deferred runtime assertion). 0, or -1 with an exception. */
    int (*expect)(void *ctx, struct SymNode *rel);
    void *ctx;
} SymRuleCtx;
extern SymRuleCtx *sj_symctx;

/* 1 when op's rule computes symbolic sizes; the others see only static arguments (capture
 * specialises the symbols first, guarding their values). */
int shapes_rule_is_symbolic(OpId op);
/* 1 when some bound argument (lists included) is symbolic. */
int shapes_args_symbolic(const BoundArgs *b);

/* Dispatch through the table in ops.def. With symbolic arguments and a rule that does not
 * handle them, returns 1 without running the rule (err unset): the caller specialises. */
int shapes_infer(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err);

/* In-place ops (CF_INPLACE rows: x.add_(y), x += y) write the op's result into their first
 * argument: the result must have self's shape and be castable to self's dtype (torch: no
 * complex -> real, float -> integer or non-bool -> bool; numpy: 'same_kind'). On success
 * *out is self's metadata. Returns 0 or -1 with err set. */
int shapes_inplace(Lib lib, const TensorMeta *self, const TensorMeta *result, TensorMeta *out, ShapeErr *err);

/* The named result type numpy gives op's multi-output call with these arguments
 * (numpy.linalg's namedtuples) as "module:qualname", or NULL for a plain tuple.
 * shapes/rules_np_more.c. */
const char *shapes_np_result_type(OpId op, const BoundArgs *b);

/* The range of the data-dependent dim `dim` of output `out` of an OPK_DATA_SHAPE op with
 * these arguments (the dims its rule left at SJ_UNBACKED_HINT): *lo, and *hi or -1 for no
 * upper bound. shapes/rules_np_more.c. */
void shapes_data_dim_range(OpId op, const BoundArgs *b, int out, int dim, int64_t *lo, int64_t *hi);

#endif
