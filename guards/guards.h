/* Guards: the checks that decide whether a cache entry may run for a frame.
 * (Issue 4 turns this flat list into trees with xxHash dispatch.) */
#ifndef SJ_GUARDS_H
#define SJ_GUARDS_H

#include "sources.h"
#include "../graph/meta.h"

typedef enum {
#define X(e, name, check, explain) e,
#include "guard_kinds.def"
#undef X
    GK_COUNT
} GuardKind;

typedef struct {
    uint8_t kind;                   /* GuardKind */
    int32_t src;                    /* source id, -1 for GLOBAL_STATE */
    int32_t src2;                   /* OBJECT_ALIASING: the other source */
    PyObject *expected;             /* strong or NULL: the type, object, value or key tuple */
    Py_ssize_t len;                 /* SEQUENCE_LENGTH / DICT_LENGTH */
    TensorMeta meta;                /* TENSOR_MATCH */
    int64_t stride[SJ_MAX_RANK];    /* TENSOR_MATCH */
    int32_t *srcs, nsrcs;           /* NO_TENSOR_ALIASING: owned array */
    int grad_enabled;               /* GLOBAL_STATE */
    int default_dtype;              /* GLOBAL_STATE: DType */
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

/* 1 when every guard passes; 0 when one fails (*failed = its index); any exception raised
 * while checking counts as a failure and is cleared. memo: t->n slots, NULL on entry;
 * the caller clears it (sources_memo_clear). */
int guards_check(const GuardSet *s, const SourceTable *t, const FrameView *fv, PyObject **memo,
                 int32_t *failed);
/* New str: why guard i fails for this frame, in the anchors' words. */
PyObject *guards_explain(const GuardSet *s, int32_t i, const SourceTable *t, const FrameView *fv,
                         PyObject **memo);
/* New list of str: one line per guard, as the guards log prints them. */
PyObject *guards_format(const GuardSet *s, const SourceTable *t);

/* Global state read at capture: grad mode and torch's default dtype (-1 when torch is not
 * loaded). Returns 0 or -1. */
int guards_read_global_state(int *grad_enabled, int *default_dtype);

#endif
