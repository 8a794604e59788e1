/* Per-code-object compiled state (stored in co_extra) and its cache entries. */
#ifndef SJ_CODE_CACHE_H
#define SJ_CODE_CACHE_H

#include <Python.h>
#include "../guards/guards.h"

typedef enum {
    ENTRY_GRAPH,   /* run the compiled graph and rebuild the result */
    ENTRY_EAGER,   /* run the frame normally (capture failed, or it had no ops) */
} EntryAction;

typedef struct CacheEntry CacheEntry;
struct CacheEntry {
    CacheEntry *next;
    EntryAction action;
    SourceTable src;       /* owned */
    GuardSet guards;       /* owned */
    int32_t *inputs;       /* owned: source id of each graph input, in call order */
    int32_t ninputs;
    PyObject *compiled;    /* strong: what the backend returned (called with the inputs) */
    PyObject *graph;       /* strong: the _C.Graph, or NULL */
    PyObject *plan;        /* strong: how to rebuild the frame's result (see compile.c) */
    PyObject *reason;      /* strong str: for ENTRY_EAGER, why; else NULL */
    int has_mutation;
    int compile_id;        /* the N of "frame/N" */
};

typedef struct {
    CacheEntry *entries;   /* most recent first */
    int nentries;
    int skip;              /* never compile: disabled, library or generator code */
    int frame_id;          /* -1 until first compiled */
    int ncompiles;
    long calls;            /* frames seen (eager_then_compile counts them) */
    PyObject *last_reason; /* strong: the last recompile reason, or NULL */
    int warned_limit;
} CodeState;

/* Global counters behind shapejit.stats(). */
typedef struct {
    long frames, graphs, graph_breaks, recompiles, cache_entries, unique_graphs, eager_frames;
    double compile_time_s;
} SjStats;
extern SjStats sj_stats;

int code_cache_init(void);
/* Borrowed pointer to the state of co, created on first use; NULL with an exception set. */
CodeState *code_state_get(PyCodeObject *co);
/* Mark co as never compiled. */
int code_cache_disable(PyCodeObject *co);
void code_cache_reset_all(void);
void cache_entry_free(CacheEntry *e);

#endif
