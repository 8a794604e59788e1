/* Internal interfaces between the planner and emitter files of the generated-C backend:
 * plan.c / plan_reduce.c (which nodes a kernel computes) and emit.c / emit_reduce.c (its
 * C source). */
#ifndef SJ_LOWER_INT_H
#define SJ_LOWER_INT_H

#include "lower.h"
#include "../shapes/rules.h"

/* ---------------------------------------------------------------- plan.c ---- */

/* A node's arguments bound by its callable's schema: bound, and in src[i] the graph
 * argument each bound item came from (NULL when absent). pos/kw are the storage the bound
 * items point into. */
typedef struct {
    BoundArgs bound;
    BoundArg pos[SJ_MAX_PARAMS], kw[SJ_MAX_PARAMS];
    const Arg *src[SJ_MAX_PARAMS];
} NodeArgs;

/* Binds node ni's arguments into *na. 1 when bound, 0 when not (no exception). */
int lower_bind_node(Graph *g, int32_t ni, NodeArgs *na);

/* 1 when node ni is a pointwise op a kernel computes (lower.def): its operand args in *a,
 * *b (NULL when absent) and parameter values in p[2]. */
int lower_node_args(Graph *g, int32_t ni, const Arg **a, const Arg **b, double p[2]);

/* Appends item x (of `item` bytes) to the PyMem array *arr of *n. 0, or -1 (MemoryError). */
int plan_push(void **arr, int32_t *n, size_t item, const void *x);
/* Adds value v as an input of k (once). 0, or 1 when k has no room left. */
int plan_add_input(Kernel *k, int32_t v);
/* 1 when a node of k makes value v. */
int plan_kernel_makes(const Graph *g, const Kernel *k, int32_t v);

/* ---------------------------------------------------------------- emit.c ---- */

typedef struct {
    char *s;            /* PyMem */
    size_t n, cap;
    int failed;         /* out of memory or a node that no longer lowers */
} Buf;

void emit_put(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The statements computing nodes [0, upto) of k at one element: each input loaded once
 * (`const float xI = inI[off]`), each node into `float tV` (V its value id). off_fmt is the
 * element offset of operand j (outputs first): a format given j for each %d (at most
 * two). */
void emit_compute(Buf *b, Graph *g, const Kernel *k, const char *off_fmt, int32_t upto);

/* The C name of value v inside k's loop body: "xI" for an input, "tV" for a node's. */
void emit_value(Buf *b, const Kernel *k, int32_t v);

/* ---------------------------------------------------------- emit_reduce.c ---- */

/* The function of a reduction or row kernel (k->flavour != KF_POINTWISE). */
void emit_reduce_kernel(Buf *b, Graph *g, const Kernel *k);

#endif
