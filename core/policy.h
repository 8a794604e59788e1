/* Policies (core/policies.def is the table): Python callables the C core calls, registered
 * by the Python package with _C._set_policy(name, callable) when it is imported. Lower
 * layers reach Python's decisions through here instead of importing shapejit modules, so
 * what the C needs from Python is one table and no C file depends on the package layout. */
#ifndef SJ_POLICY_H
#define SJ_POLICY_H

#include <Python.h>

typedef enum {
#define X(e, name, doc) e,
#include "policies.def"
#undef X
    POLICY_COUNT
} Policy;

/* The callable registered for p: borrowed (valid until the next _set_policy of p; take a
 * reference before calling anything that can run Python), or NULL when unset. No
 * exception is set either way. */
PyObject *policy_get(Policy p);

/* _set_policy(name, callable or None) and _policies() -> {name: (doc, callable or None)}. */
extern PyMethodDef sj_policy_methods[];

#endif
