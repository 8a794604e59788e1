/* Guard trees: every cache entry of one code object, checked together.
 *
 * A GuardTree belongs to one code object. Its SourceTable is shared by all the entries:
 * a capture starts from a copy of it and only appends, so a source keeps its id for the
 * life of the tree and an accessor path that several entries use (L['self']._modules['fc'])
 * is resolved once per call however many entries look at it. Leaves are interned the same
 * way: a leaf two entries share (ID_MATCH on G['torch'], GLOBAL_STATE) is evaluated once
 * per call. An entry is then the list of its leaves, in tree order (a node's leaves before
 * its children), plus its dispatch key.
 *
 * Dispatch: each entry's cheap facts about the frame's own variables (types, dtypes,
 * ranks, static sizes, identities, small constants: see dispatch.c) form a signature and a
 * key (xxHash of their bytes). A call hashes the same facts of its frame once per distinct
 * signature (almost always one) and checks only the entries filed under that key, newest
 * first, so the cost of a hit does not grow with the number of entries. The full leaf
 * list of the candidate still decides.
 */
#ifndef SJ_GUARD_TREE_H
#define SJ_GUARD_TREE_H

#include "guards.h"

typedef struct GuardEntry GuardEntry;
struct GuardEntry {
    int32_t *leaves;          /* owned: leaf ids in the tree, in check order */
    int32_t nleaves;
    int32_t sig;              /* dispatch signature id, -1 before guard_tree_add */
    uint64_t *words;          /* owned: the facts' words (dispatch.c) */
    int32_t nwords;
    int32_t *covered;         /* owned: leaves that equal words prove to pass */
    int32_t ncovered;
    uint64_t seq;             /* insertion order: newer entries win */
    GuardEntry *next_same;    /* borrowed: next (older) entry filed under the same key */
    void *owner;              /* borrowed: the CacheEntry this belongs to */
};

typedef struct Signature Signature;   /* dispatch.c */

typedef struct {
    SourceTable src;          /* owned, append-only: ids are stable */
    GuardSet leaves;          /* owned, append-only: interned leaves of every entry */
    GuardEntry **entries;     /* owned array of borrowed pointers, oldest first */
    int32_t nentries, capentries;
    Signature **sigs;         /* owned */
    int32_t nsigs;
    uint64_t seq;
    SourceTable *retired;     /* owned: source tables and leaf arrays replaced while the tree
                                 grew, kept (with their references) until it is cleared: a
                                 call on another thread may still be reading them while a
                                 guard runs Python code that releases the GIL */
    int32_t nretired;
    Guard **retired_leaves;   /* owned */
    int32_t nretired_leaves;
    int adding;               /* guard_tree_add in progress (it can run Python: __eq__) */
    void *scratch;            /* owned: the per-call arrays of big frames, reused by calls
                                 that do not overlap (a guard can re-enter the function) */
    size_t scratch_size;
    int scratch_busy;
} GuardTree;

/* The most sources one code object's guards may read: a call numbers the tensors it reads
 * in int16 slots. A frame that would need more runs in the interpreter. */
#define GUARD_MAX_SOURCES 0x7000

/* Per-call state: what has been resolved, read and checked for this frame so far. */
struct GuardCall {
    GuardTree *t;
    const FrameView *fv;
    PyObject *options;        /* borrowed: the compile options key of this call (BACKEND_MATCH) */
    PyObject **memo;          /* nsrc slots, strong or NULL: resolved sources */
    int8_t *res;              /* nleaves slots: 0 not yet checked, 1 passed, -1 failed */
    int16_t *fslot;           /* nsrc slots: 0 tensor facts not read, -1 not a tensor,
                                 k > 0: facts[k - 1] */
    TensorFacts *facts;       /* read tensor facts (small_facts or heap) */
    int32_t nfacts, capfacts;
    int32_t nsrc, nleaves;    /* sizes at guard_call_begin (the tree may grow later) */
    uint64_t seq0;            /* entries with a larger seq were added during this call */
    int heap;                 /* 1: memo/res/fslot/facts are t->scratch; 2: a heap block */
    PyObject *small_memo[32];
    int16_t small_fslot[32];
    int8_t small_res[128];
    TensorFacts small_facts[4];
};

/* Borrowed facts of the tensor at source src (resolved value v), read once per call;
 * NULL when v is not a supported tensor (*why set) or on error (exception set, *why NULL). */
const TensorFacts *guard_call_facts(GuardCall *call, int32_t src, PyObject *v, const char **why);

void guard_tree_clear(GuardTree *t);
/* Copy t's sources into dst (empty) so a capture appends to them. 0 or -1. */
int guard_tree_copy_sources(const GuardTree *t, SourceTable *dst);
/* Take a capture's sources (a superset of t's, as copied above: moved into t) and its
 * guards (interned; gs keeps its own), and file ge under its dispatch key. Returns 0, 1
 * when the capture started from an older copy of the sources (another thread compiled in
 * between: nothing is taken and the caller drops the entry), or -1 with an exception. */
int guard_tree_add(GuardTree *t, SourceTable *src, const GuardSet *gs, GuardEntry *ge, void *owner);
void guard_entry_clear(GuardEntry *ge);

/* options: borrowed, the key of the compile options the frame is called under (compared
 * by BACKEND_MATCH leaves), or NULL (no BACKEND_MATCH leaf passes). */
int guard_call_begin(GuardCall *call, GuardTree *t, const FrameView *fv, PyObject *options);
void guard_call_end(GuardCall *call);

/* The newest entry whose guards all pass, or NULL (a miss; any exception raised while
 * checking counts as a failure and is cleared). */
GuardEntry *guard_tree_find(GuardCall *call);
/* New str: why ge fails for this call (the first failing leaf, in torch.compile's words), or
 * Py_None when it passes; NULL on error. */
PyObject *guard_entry_explain(GuardCall *call, const GuardEntry *ge);
/* New str: ge's tree in the indented form of the guards log. */
PyObject *guard_entry_format(const GuardTree *t, const GuardEntry *ge);
/* New list of str: one line per leaf of ge (explain()'s Out Guards). */
PyObject *guard_entry_lines(const GuardTree *t, const GuardEntry *ge);

/* dispatch.c */
int dispatch_file(GuardTree *t, GuardEntry *ge);
void dispatch_clear(GuardTree *t);
/* Candidates for this call, newest first, into out (at most cap); returns the count, or
 * -1 when the index cannot decide (then every entry is a candidate). */
int32_t dispatch_candidates(GuardCall *call, GuardEntry **out, int32_t cap);

#endif
