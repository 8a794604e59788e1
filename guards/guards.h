/* Guard leaves: the checks that decide whether a cache entry may run for a frame. A
 * capture collects them in a GuardSet; tree.h files them under the code object's guard
 * tree, where entries share sources and leaves. Each kind's check, explanation and
 * printed form come from one row of guard_kinds.def. */
#ifndef SJ_GUARDS_H
#define SJ_GUARDS_H

#include "sources.h"
#include "../vocab/meta.h"

typedef enum {
#define X(e, name, check, explain, format) e,
#include "guard_kinds.def"
#undef X
    GK_COUNT
} GuardKind;

/* What the tensor reader (tensor_reader.h) says about a tensor or array. */
typedef struct {
    TensorMeta m;
    int64_t stride[SJ_MAX_RANK];
} TensorFacts;

/* Interpreter-wide state a graph depends on. */
typedef struct {
    int grad_enabled;               /* torch's grad mode (1 when torch is not loaded) */
    int default_dtype;              /* DType of torch.get_default_dtype(), -1 without torch */
    int num_threads;                /* torch.get_num_threads(), -1 without torch */
    int autocast;                   /* torch._C._is_any_autocast_enabled(), -1 without torch */
} GlobalState;

typedef struct GuardCall GuardCall;   /* tree.h: per-call memo */

typedef struct {
    uint8_t kind;                   /* GuardKind */
    int32_t src;                    /* source id, -1 for GLOBAL_STATE */
    int32_t src2;                   /* OBJECT_ALIASING: the other source */
    PyObject *expected;             /* strong or NULL: the type, object, value or key tuple;
                                       SHAPE_ENV: (program bytes, printed relation str);
                                       SCALAR_RELATION: (recipe, printed relation str, truth) */
    Py_ssize_t len;                 /* SEQUENCE_LENGTH / DICT_LENGTH */
    uint64_t version;               /* DICT_VERSION: ma_version_tag at capture */
    TensorMeta meta;                /* TENSOR_MATCH (sym unused) */
    int64_t stride[SJ_MAX_RANK];    /* TENSOR_MATCH */
    uint8_t dyn;                    /* TENSOR_MATCH: bit i set = dim i is dynamic (its size is
                                       not checked here; SHAPE_ENV leaves constrain it) */
    uint8_t dense;                  /* TENSOR_MATCH with dyn: 1 = the strides must be the dense
                                       strides of the actual sizes in the order perm (innermost
                                       first), 0 = exactly stride[] */
    int8_t perm[SJ_MAX_RANK];
    int32_t *srcs, nsrcs;           /* NO_TENSOR_ALIASING, SHAPE_ENV: owned array */
    GlobalState gs;                 /* GLOBAL_STATE */
    PyObject *where;                /* strong or NULL: "file.py:12 in f: <line>" */
} Guard;

typedef struct {
    Guard *g;
    int32_t n, cap;
} GuardSet;

void guards_clear(GuardSet *s);
/* Add a guard unless the same check on the same source exists; returns 0 or -1.
 * The guard's expected/where are borrowed and taken as new references. */
int guards_add(GuardSet *s, const Guard *g);
/* Append a copy of g (no duplicate check); returns its index or -1. */
int32_t guards_append(GuardSet *s, const Guard *g);
/* 1 when a and b check exactly the same thing. */
int guards_same(const Guard *a, const Guard *b);

/* Check one leaf: 1 pass, 0 fail, -1 error (a failure for the caller). */
int guards_check_one(const Guard *g, const SourceTable *t, GuardCall *call);
/* New str: why leaf g fails for this call, in torch.compile's words. */
PyObject *guards_explain_one(const Guard *g, const SourceTable *t, GuardCall *call);
/* New str: the leaf as the guards log prints it (without its user line). */
PyObject *guards_format_one(const Guard *g, const SourceTable *t);

/* Evaluate a SHAPE_ENV program (shape_guard.c; the format: shapes/env.h); 0 with *out, or -1 (a source could not be read: exception set; or
 * the arithmetic failed: *bad set, no exception). */
int shape_guard_eval(const Guard *g, GuardCall *call, int64_t *out, int *bad);

/* Read the interpreter-wide state (C calls into torch's own functions, no Python
 * frames). Returns 0 or -1. global_state.c */
int guards_read_global_state(GlobalState *gs);

#endif
