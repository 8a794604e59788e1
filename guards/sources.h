/* Sources: how to reach a value from a frame (L['x'], G['w'], L['self']._modules['fc']).
 *
 * Capture interns every source it names into a SourceTable (index = source id; a source's
 * base always has a smaller id), and a cache entry keeps the table to fetch its inputs and
 * check its guards on each call. */
#ifndef SJ_SOURCES_H
#define SJ_SOURCES_H

#include <Python.h>
#include <stdint.h>

#include "readcache.h"

typedef enum {
    SRC_LOCAL,      /* frame local: index = localsplus slot, key = name */
    SRC_FREEVAR,    /* closure variable of the frame's function: index = cell number, key = name */
    SRC_GLOBAL,     /* key = name, in the frame's globals, then builtins */
    SRC_MODGLOBAL,  /* key = name, in dict obj (another module's globals; printed via modname) */
    SRC_ATTR,       /* getattr(base, key) */
    SRC_ITEM,       /* base[key] (key: a constant int or str) */
    SRC_CELL,       /* base.__closure__[index].cell_contents (base: a function) */
    SRC_DEFAULT,    /* base.__defaults__[index] (base: a function) */
    SRC_KWDEFAULT,  /* base.__kwdefaults__[key] */
    SRC_SIZE,       /* base.size()[index] (base: a tensor or array), read by the tensor reader */
    SRC_STRIDE,     /* base.stride()[index], in elements */
    SRC_CALL,       /* obj(*key[0], **key[1]): a library query called again on each check
                       (key[2]: its printed form); no base */
    SRC_HELD,       /* obj itself, held by the table: a function the capture inlined that
                       was reached without a source (a method found on its class), so that
                       the outside objects in its cells and defaults have sources; no base */
    SRC_DICT_ITEM,  /* dict.__getitem__(base, key): the entry of a dict or dict subclass read
                       by dict's own lookup, whatever __getitem__ the subclass defines (a
                       subclass's own may build a new object on each read); key: a constant */
} SourceKind;

typedef struct {
    uint8_t kind;       /* SourceKind */
    int32_t base;       /* source id of the base, or -1 */
    int32_t index;
    PyObject *key;      /* strong: name or item key, or NULL */
    PyObject *obj;      /* strong: SRC_MODGLOBAL's dict, SRC_CALL's callable, SRC_HELD's object, else NULL */
    PyObject *repr;     /* strong: "L['self']._modules['fc']" */
    ReadCache rc;       /* the last value read (SRC_ATTR, SRC_ITEM of a dict, SRC_DICT_ITEM,
                           SRC_GLOBAL, SRC_MODGLOBAL): the one field resolution writes, under
                           the GIL */
} SourceEntry;

typedef struct {
    SourceEntry *e;
    int32_t n, cap;
} SourceTable;

/* What a frame offers to source resolution: borrowed pointers valid during one call. */
typedef struct {
    PyObject *const *locals;   /* the frame's localsplus (raw arguments at frame entry) */
    PyObject *closure;         /* tuple of cells of the frame's function, or NULL */
    PyObject *globals;
    PyObject *builtins;
} FrameView;

void sources_clear(SourceTable *t);
/* 1 when a and b are the same object or equal values of the same type (errors: 0). */
int sources_same_key(PyObject *a, PyObject *b);
/* Intern a source; returns its id or -1 with an exception set. key and obj borrowed. */
int32_t sources_add(SourceTable *t, SourceKind kind, int32_t base, int32_t index, PyObject *key, PyObject *obj);
/* Borrowed: the printed form. */
static inline PyObject *sources_repr(const SourceTable *t, int32_t id)
{
    return t->e[id].repr;
}

/* Resolve every source up to and including id into memo (new references; memo[i] NULL =
 * not yet resolved). Returns a borrowed pointer into memo, or NULL with an exception set
 * (an attribute that is gone, a key that is missing). */
PyObject *sources_resolve(const SourceTable *t, int32_t id, const FrameView *fv, PyObject **memo);
void sources_memo_clear(PyObject **memo, int32_t n);

/* _C._eval_source (tests): resolve a chain of accessors against given locals. */
PyObject *sources_py_eval(PyObject *self, PyObject *args);

#endif
