/* Per-code-object compiled state (stored in co_extra) and its cache entries. */
#ifndef SJ_CODE_CACHE_H
#define SJ_CODE_CACHE_H

#include <Python.h>
#include "tree.h"

typedef enum {
    ENTRY_GRAPH,   /* run the compiled graph and rebuild the result */
    ENTRY_EAGER,   /* run the frame normally (capture failed, or it had no ops) */
    ENTRY_BREAK,   /* run the graph up to a graph break, then the continuation code with
                      its result (the breaking instruction, then a resume function) */
} EntryAction;

typedef struct CacheEntry CacheEntry;
struct CacheEntry {
    CacheEntry *next;
    EntryAction action;
    GuardEntry ge;         /* its leaves in the code's guard tree (ge.owner = this entry) */
    int32_t *inputs;       /* owned: source id (in the code's tree) of each graph input */
    int32_t ninputs;
    PyObject *compiled;    /* strong: what the backend returned (called with the inputs) */
    PyObject *graph;       /* strong: the _C.Graph, or NULL */
    PyObject *plan;        /* strong: how to rebuild the frame's result (see compile.c) */
    PyObject *reason;      /* strong str: for ENTRY_EAGER, why; else NULL */
    int has_mutation;
    int compile_id;        /* the N of "frame/N" */
    /* ENTRY_BREAK: the plan builds the continuation's arguments; the resume functions
     * (one per way out of the breaking instruction) are made per call with the frame's
     * globals and closure and passed after them */
    PyObject *cont;        /* strong code object, or NULL */
    PyObject *resume[2];   /* strong weak references to the resume codes: the user's code
                              holds them (CodeState.resumes), so an entry of a resume
                              function that resumes into itself (a loop) makes no cycle */
    int nresume;
};

typedef enum {
    ROLE_USER,     /* a user's code object */
    ROLE_CONT,     /* a continuation shapejit wrote: never compiled */
    ROLE_RESUME,   /* a resume function shapejit wrote: compiled whenever it is called */
    ROLE_RESUME_LOOP,   /* a resume function whose code leads back to the break it resumes
                           from (a loop): run by the interpreter, never compiled, so a loop
                           with a break costs a bounded stack; frames it calls are compiled */
} CodeRole;

/* CodeState.skip values whose frames run eagerly with their callees not compiled either
 * (the callees use the entries they have). */
#define SKIP_DISABLED_WITH_CALLEES 3
#define SKIP_INIT_WITH_CALLEES 4

typedef struct {
    GuardTree tree;        /* owned: sources and guards of every entry */
    CacheEntry *entries;   /* most recent first */
    int nentries;
    int skip;              /* never compile: -1 undecided, 0 compile, 1 library or generator
                              code or a frame with nothing to capture, 2 disabled by the user,
                              3 disabled by the user with what it calls
                              (SKIP_DISABLED_WITH_CALLEES), 4 an nn.Module's __init__: run
                              eagerly with its callees (SKIP_INIT_WITH_CALLEES) */
    int frame_id;          /* -1 until first compiled */
    int ncompiles;
    long calls;            /* frames seen (eager_then_compile counts them) */
    PyObject *last_reason; /* strong: the last recompile reason, or NULL */
    PyObject *fstate;      /* strong dict or NULL: automatic dynamic's frame state, what the
                              inputs looked like over the compiles so far (symbolic.c) */
    int warned_limit;
    int clear_pending;     /* disabled while the hook was busy: entries cleared at its end */
    CodeRole role;
    /* ROLE_RESUME: the user's code it continues, the code units of its prologue, and how
     * many argument slots it adds after the user's locals (cells shift by that much) */
    PyObject *orig;        /* strong weakref to the user's code (no cycle through co_extra), or NULL */
    int32_t shift, nextra;
    PyObject *resumes;     /* strong dict or NULL: resume codes made from this code, by key */
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
/* The same; with recursive set, nothing its frames call compiles either (skip 3:
 * torch.compiler.disable's default). */
int code_cache_disable_calls(PyCodeObject *co, int recursive);
/* Forget every entry (reset()). While the hook holds pointers into entries (between
 * code_cache_busy_enter and _leave: guards, the graph, compiling) this is deferred to the
 * moment the last such hook activity ends, because any Python code run there (a property,
 * a backend, a log sink, a finalizer) may call it. */
void code_cache_reset_all(void);
void code_cache_busy_enter(void);
void code_cache_busy_leave(void);
void cache_entry_free(CacheEntry *e);
/* Put a new entry in front of st's entries and file its guards (gs; src, a copy of the
 * tree's sources that the capture extended, is taken). 0; 1 when another compile of the
 * same code finished first (the caller frees e); -1 with an exception. */
int code_cache_insert(CodeState *st, CacheEntry *e, SourceTable *src, const GuardSet *gs);
/* New list: every continuation and resume code object the live entries hold (tests). */
PyObject *code_cache_generated(void);

#endif
