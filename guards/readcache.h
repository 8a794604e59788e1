/* Read caches: a source's last value, reused while nothing it was read from has changed.
 *
 * A guard tree resolves the same few hundred attribute and dict reads on every call
 * (L['self']._modules['fc']._parameters['weight'], the hooks dicts of every module,
 * module globals). CPython 3.11 gives every dict a version tag that changes with each
 * write (PEP 509; tags come from one global counter, so two dicts never share one) and
 * every type a version tag that changes when the type or a base is modified. A value read
 * out of a dict is therefore the same object, still held by that dict, for as long as the
 * dict's tag is unchanged; an attribute found in an instance's __dict__ by the generic
 * lookup is the same while the instance's type and __dict__ keep their tags.
 *
 * The cache holds no references: it answers only after checking the tags on objects the
 * caller holds, and the value it hands out is then owned by the dict it was read from.
 * Reads with other semantics (properties and other data descriptors, a __getattribute__
 * written in Python, __slots__, non-dict containers) are never cached: they run every
 * time. The rules mirrored here are CPython 3.11's PyObject_GenericGetAttr
 * (Objects/object.c) and slot_tp_getattr_hook (Objects/typeobject.c). */
#ifndef SJ_READCACHE_H
#define SJ_READCACHE_H

#include <Python.h>
#include <stdint.h>

#define READCACHE_MAX_DEPS 3

typedef struct {
    uint64_t tag;         /* version tag of the dict val was read from; 0: nothing cached */
    PyTypeObject *type;   /* borrowed, only compared: the instance's type (attribute reads) */
    unsigned int tver;    /* that type's tp_version_tag when filled */
    uint8_t absent;       /* attribute reads: 1 = the attribute was missing (val NULL) */
    uint8_t ndeps;
    PyObject *val;        /* borrowed: held by the dict while its tag is unchanged */
    PyObject *deps[READCACHE_MAX_DEPS];   /* borrowed: more dicts a miss looked in, held by
                                             the instance dict while its tag is unchanged */
    uint64_t dep_tags[READCACHE_MAX_DEPS];
    PyObject *hook;       /* borrowed (held by the class): the modelled __getattr__ a miss
                             went through, or NULL */
} ReadCache;

/* The version tag of a dict (PyDict_Check(d)). */
uint64_t readcache_dict_tag(PyObject *d);

/* 1 when getattr on instances of tp is the generic lookup (PyObject_GenericGetAttr, a
 * module's, or a class whose __getattribute__ is the generic lookup's slot wrapper, with
 * or without a __getattr__ for misses); 0 for a class with a __getattribute__ of its own. */
int readcache_generic_getattr(PyTypeObject *tp);

/* base.name (an exact str name) when the cache still answers for it: borrowed, or NULL
 * (no exception) when the caller must read it. */
PyObject *readcache_attr_get(const ReadCache *c, PyObject *base);
/* After val = getattr(base, name) succeeded: fill the cache when the read went through the
 * generic lookup to base's __dict__. Never raises. */
void readcache_attr_fill(ReadCache *c, PyObject *base, PyObject *name, PyObject *val);

/* 1 when the cache still knows base.name to be missing (getattr would raise
 * AttributeError), else 0. */
int readcache_attr_absent(const ReadCache *c, PyObject *base);
/* After getattr(base, name) raised AttributeError: remember the miss when it came from the
 * generic lookup (no attribute on the type, none in the instance dict, and no __getattr__,
 * or torch.nn.Module's, which looks in three more dicts of the instance). Never raises;
 * the caller's exception is kept. */
void readcache_absent_fill(ReadCache *c, PyObject *base, PyObject *name);

/* d[key] for a dict d, through the cache: borrowed, or NULL (a missing key: no exception;
 * an error while comparing keys: exception set). */
static inline PyObject *readcache_dict_read(ReadCache *c, PyObject *d, PyObject *key)
{
    if (c->tag && c->type == NULL && readcache_dict_tag(d) == c->tag)
        return c->val;
    uint64_t tag0 = readcache_dict_tag(d);
    PyObject *v = PyDict_GetItemWithError(d, key);
    if (v && readcache_dict_tag(d) == tag0)   /* no write while the keys compared */
        *c = (ReadCache){.tag = tag0, .val = v};
    return v;
}

#endif
