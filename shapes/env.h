/* The shape environment of one capture: its symbols, each with where its value is read at
 * run time; the relations the capture relied on; and the compiler that turns those into
 * SHAPE_ENV guard programs, whose format is declared here (guards/shape_guard.c runs them).
 *
 * Which input dims and ints become symbols (dim policy, marks, automatic dynamic) is the
 * capture's decision (capture/symbolic.c). Sources and graph values are only ids here: a
 * source id is what a guard reads (guards/sources.h), a value id a graph value.
 *
 * Memory: env is borrowed (the capture's graph owns the SymEnv); syms, aliases and rels
 * are PyMem arrays and rel_where a strong list, all freed by shape_env_clear.
 * Errors: -1 or NULL with a Python exception set, as in sym.h. */
#ifndef SJ_SHAPE_ENV_H
#define SJ_SHAPE_ENV_H

#include "sym.h"

/* One symbol, by slot (SymNode.slot). */
typedef struct {
    int32_t src;           /* where its value is read: L['x'].size()[0], or L['n'] for an int;
                              -1 for an unbacked symbol (no input holds it) */
    int32_t value;         /* graph value holding it at run time, -1 until an op needs it */
    int32_t tensor_value;  /* a size: the graph value whose dim it is; an int: -1 */
    int8_t dim;
    uint8_t strict;        /* mark_dynamic: specialising it is an error */
    uint8_t is_int;        /* an int input (no 0/1 specialisation, no range guard) */
    uint8_t duck;          /* made dynamic by dynamic=True / assume_static_by_default=False:
                              an equal size of the same kind shares it (duck sizing) */
    SymRange range0;       /* the range it was created with (guarded at the end) */
} SymInfo;

/* A second source whose size duck sizing gave an existing symbol (guarded equal). */
typedef struct {
    int32_t src;
    int32_t slot;
} SymAlias;

typedef struct {
    SymEnv *env;                                      /* borrowed; NULL until shape_env_open */
    SymInfo *syms;
    int32_t nsyms, capsyms;           /* PyMem, by slot */
    SymAlias *aliases;
    int32_t naliases, capaliases; /* PyMem */
    SymNode **rels;
    int32_t nrels, caprels;          /* PyMem: relations the capture relied on */
    PyObject *rel_where;                             /* strong list of str, parallel to rels */
} ShapeEnv;

/* Start using env (borrowed). 0 or -1. */
int shape_env_open(ShapeEnv *se, SymEnv *env);
/* Free what se owns; se is empty (and closed) afterwards. */
void shape_env_clear(ShapeEnv *se);

/* A new backed symbol s<N> with hint and range r, read from source src at run time
 * (tensor_value/dim: the size it is; is_int: an int input). Borrowed node or NULL. */
SymNode *shape_env_symbol(ShapeEnv *se, int32_t src, int64_t hint, SymRange r, int32_t tensor_value, int dim,
                          int strict, int is_int);
/* A new unbacked symbol u<N>: computed by graph value `value`, or (value -1) the size of
 * dim `dim` of graph value tensor_value. Borrowed node or NULL. */
SymNode *shape_env_unbacked(ShapeEnv *se, int32_t value, int32_t tensor_value, int dim, SymRange r);
/* Duck sizing: the duck-sized symbol whose hint is `hint`, read from another source than
 * src, or NULL. */
SymNode *shape_env_duck(const ShapeEnv *se, int64_t hint, int32_t src);
/* Source src reads the same size as symbol s (guarded equal at the end). 0 or -1. */
int shape_env_alias(ShapeEnv *se, int32_t src, const SymNode *s);

/* 1 when the capture already relies on rel, else 0. */
int shape_env_relies_on(const ShapeEnv *se, const SymNode *rel);
/* The capture relies on rel (a relation, not yet relied on); where: a borrowed str naming
 * the user line, kept with it. 0 or -1. */
int shape_env_rely(ShapeEnv *se, SymNode *rel, PyObject *where);
/* Narrow symbol ranges from a relation between a symbol and a constant that holds
 * (guarded or asserted); logs the new range (dynamic). Never fails. */
void shape_env_refine(ShapeEnv *se, SymNode *rel);
/* The slot of a strict (mark_dynamic) symbol that rel, Eq(s, k), pins to k, or -1. */
int32_t shape_env_strict_pinned(const ShapeEnv *se, const SymNode *rel, int64_t *k);

/* ---- SHAPE_ENV guard programs ----
 * A relation over sizes and ints read from sources, in postfix, two int64 words an
 * instruction (op, arg): SG_CONST k pushes k; SG_SRC id pushes the int read from source
 * id; SG_ADD/SG_MUL/SG_MIN/SG_MAX n pop n operands and push their sum, product, minimum or
 * maximum; SG_FLOORDIV, SG_MOD and the relations pop two (a, b: b on top) and push Python's
 * a // b, a % b, or 1/0 for a == b, a != b, a < b, a <= b. A program leaves one value,
 * never holding more than SG_MAX_DEPTH. Stored in a guard as the bytes of its words. */
enum { SG_CONST = 1, SG_SRC, SG_ADD, SG_MUL, SG_FLOORDIV, SG_MOD, SG_MIN, SG_MAX, SG_EQ, SG_NE, SG_LT, SG_LE };
#define SG_MAX_DEPTH 64

/* The text of source id src in a guard: a borrowed str (the source's repr). */
typedef PyObject *(*ShapeSrcName)(void *ctx, int32_t src);
/* Receives one compiled guard: program (a new bytes object of its words, borrowed by the
 * call), the distinct sources it reads (borrowed, nsrcs >= 1), its text, the user line
 * (a str, or None for the guards that hold by construction). 0 or -1. */
typedef int (*ShapeGuardSink)(void *ctx, PyObject *program, const int32_t *srcs, int32_t nsrcs, PyObject *text,
                              PyObject *where);
/* Compile what the capture relied on into guard programs, in this order: the ranges of
 * the size symbols (2 <= L['x'].size()[0] after 0/1 specialisation; a mark's min and max),
 * the relations relied on (a relation between constants needs none), and the sources
 * duck sizing aliased (Eq of the two). Each goes to sink. 0 or -1. */
int shape_env_compile_guards(ShapeEnv *se, ShapeSrcName name, ShapeGuardSink sink, void *ctx);

#endif
