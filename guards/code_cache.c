/* co_extra storage: the compiled state dies with its code object. */
#include "code_cache.h"
#include <stddef.h>
#include "../core/errors.h"

SjStats sj_stats;

static Py_ssize_t extra_index = -1;

/* Every live CodeState, so reset() can reach them; a code object's free function unlinks. */
typedef struct StateLink {
    struct StateLink *prev, *next;
    CodeState st;
} StateLink;
static StateLink all_states = {.prev = &all_states, .next = &all_states};

void cache_entry_free(CacheEntry *e)
{
    guard_entry_clear(&e->ge);
    PyMem_Free(e->inputs);
    Py_XDECREF(e->compiled);
    Py_XDECREF(e->graph);
    Py_XDECREF(e->plan);
    Py_XDECREF(e->reason);
    Py_XDECREF(e->cont);
    for (int i = 0; i < e->nresume; i++)
        Py_XDECREF(e->resume[i]);
    PyMem_Free(e);
}

static int busy;            /* hook activities holding pointers into entries and trees */
static int reset_pending;   /* reset() was asked for while busy */
static int clear_pending;   /* some state's clear_pending is set */

static void clear_entries(CodeState *st)
{
    /* detach first: freeing an entry can run a finalizer that comes back here */
    CacheEntry *e = st->entries;
    st->entries = NULL;
    st->nentries = 0;
    while (e) {
        CacheEntry *n = e->next;
        cache_entry_free(e);
        sj_stats.cache_entries--;
        e = n;
    }
    st->entries = NULL;
    st->nentries = 0;
    guard_tree_clear(&st->tree);
    Py_CLEAR(st->last_reason);
}

int code_cache_insert(CodeState *st, CacheEntry *e, SourceTable *src, const GuardSet *gs)
{
    int r = guard_tree_add(&st->tree, src, gs, &e->ge, e);
    if (r != 0)
        return r;
    e->next = st->entries;
    st->entries = e;
    st->nentries++;
    return 0;
}

static void free_state(void *p)
{
    if (!p)
        return;
    StateLink *l = (StateLink *)((char *)p - offsetof(StateLink, st));
    clear_entries(&l->st);
    Py_CLEAR(l->st.orig);
    Py_CLEAR(l->st.resumes);
    Py_CLEAR(l->st.fstate);
    l->prev->next = l->next;
    l->next->prev = l->prev;
    PyMem_Free(l);
}

int code_cache_init(void)
{
    if (extra_index < 0) {
        extra_index = _PyEval_RequestCodeExtraIndex(free_state);
        if (extra_index < 0) {
            PyErr_SetString(PyExc_RuntimeError, "shapejit: no co_extra slot available");
            return -1;
        }
    }
    return 0;
}

CodeState *code_state_get(PyCodeObject *co)
{
    void *p = NULL;
    if (_PyCode_GetExtra((PyObject *)co, extra_index, &p) < 0)
        return NULL;
    if (p)
        return p;
    StateLink *l = PyMem_Calloc(1, sizeof(StateLink));
    if (!l) {
        PyErr_NoMemory();
        return NULL;
    }
    l->st.frame_id = -1;
    l->st.skip = -1;   /* not decided yet */
    if (_PyCode_SetExtra((PyObject *)co, extra_index, &l->st) < 0) {
        PyMem_Free(l);
        return NULL;
    }
    l->next = all_states.next;
    l->prev = &all_states;
    all_states.next->prev = l;
    all_states.next = l;
    return &l->st;
}

int code_cache_disable(PyCodeObject *co)
{
    return code_cache_disable_calls(co, 0);
}

int code_cache_disable_calls(PyCodeObject *co, int recursive)
{
    CodeState *st = code_state_get(co);
    if (!st)
        return -1;
    if (st->skip == SKIP_DISABLED_WITH_CALLEES && !recursive)
        return 0;   /* a recursive disable of the same code stays */
    st->skip = recursive ? SKIP_DISABLED_WITH_CALLEES : 2;   /* disabled by the user: reset() keeps it */
    if (busy) {
        st->clear_pending = 1;
        clear_pending = 1;
        return 0;
    }
    clear_entries(st);
    return 0;
}

void code_cache_busy_enter(void)
{
    busy++;
}

void code_cache_busy_leave(void)
{
    if (--busy > 0)
        return;
    if (clear_pending) {
        clear_pending = 0;
        for (StateLink *l = all_states.next; l != &all_states; l = l->next)
            if (l->st.clear_pending) {
                l->st.clear_pending = 0;
                clear_entries(&l->st);   /* may free other states: restart the walk */
                l = &all_states;
            }
    }
    if (reset_pending) {
        reset_pending = 0;
        code_cache_reset_all();
    }
}

void code_cache_reset_all(void)
{
    if (busy) {
        reset_pending = 1;
        return;
    }
    /* Freeing an entry can free the continuation and resume codes it holds, and with them
     * their states: unlink everything first, free after the walk. */
    CacheEntry *dead = NULL;
    PyObject *graveyard = PyList_New(0);
    for (StateLink *l = all_states.next; l != &all_states; l = l->next) {
        CacheEntry *e = l->st.entries;
        while (e) {
            CacheEntry *n = e->next;
            e->next = dead;
            dead = e;
            e = n;
        }
        l->st.entries = NULL;
        l->st.nentries = 0;
        guard_tree_clear(&l->st.tree);
        Py_CLEAR(l->st.last_reason);
        Py_CLEAR(l->st.fstate);   /* automatic dynamic starts over */
        if (l->st.resumes) {
            if (graveyard && PyList_Append(graveyard, l->st.resumes) == 0)
                Py_CLEAR(l->st.resumes);
            else
                sj_err_clear();   /* kept: its codes stay cached, which is harmless */
        }
        if (l->st.skip != 2 && l->st.skip != SKIP_DISABLED_WITH_CALLEES)
            l->st.skip = -1;
        l->st.frame_id = -1;
        l->st.ncompiles = 0;
        l->st.calls = 0;
        l->st.warned_limit = 0;
    }
    while (dead) {
        CacheEntry *n = dead->next;
        cache_entry_free(dead);
        dead = n;
    }
    Py_XDECREF(graveyard);
    sj_err_clear();
    memset(&sj_stats, 0, sizeof sj_stats);
}

PyObject *code_cache_generated(void)
{
    PyObject *list = PyList_New(0);
    for (StateLink *l = all_states.next; list && l != &all_states; l = l->next)
        for (CacheEntry *e = l->st.entries; e; e = e->next) {
            if (e->action != ENTRY_BREAK)
                continue;
            if (PyList_Append(list, e->cont) < 0)
                Py_CLEAR(list);
            for (int i = 0; list && i < e->nresume; i++)
                if (PyWeakref_GetObject(e->resume[i]) != Py_None &&
                    PyList_Append(list, PyWeakref_GetObject(e->resume[i])) < 0)
                    Py_CLEAR(list);
        }
    return list;
}
