/* Small things every layer builds: a growable array, a tuple of sizes, a joined string. One
 * helper each, so that every caller builds them the same way and writes no cleanup of its
 * own. */
#ifndef SJ_PYUTIL_H
#define SJ_PYUTIL_H

#include <Python.h>
#include <stdint.h>

/* Room for need items of elem bytes in *arr (PyMem; *cap items now): the capacity doubles,
 * from first, until it holds need. 0, or -1 with MemoryError (*arr and *cap unchanged). */
int sj_grow(void **arr, int32_t *cap, int32_t need, size_t elem, int32_t first);

/* (v[0], ..., v[n-1]) as Python ints. New reference, or NULL with an exception set. */
PyObject *sj_int64_tuple(const int64_t *v, int n);

/* sep.join(items) for a list or tuple of str. Steals items (NULL is accepted: then the
 * answer is NULL and the exception already set stays). New reference, or NULL with an
 * exception set. */
PyObject *sj_join(const char *sep, PyObject *items);

/* sep.join(names[0..n)) for C strings (a table's names). New reference, or NULL with an
 * exception set. */
PyObject *sj_join_names(const char *sep, const char *const *names, int n);

/* Installs sink (borrowed; None uninstalls) in *slot (a strong reference or NULL): 0, or
 * -1 with TypeError when it is neither callable nor None (what names it: "log sink"). */
int sj_sink_set(PyObject **slot, PyObject *sink, const char *what);

#endif
