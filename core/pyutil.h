/* Small things every layer builds: a growable array, Python's floor division, a tuple of
 * sizes, a joined string. One
 * helper each, so that every caller builds them the same way and writes no cleanup of its
 * own. */
#ifndef SJ_PYUTIL_H
#define SJ_PYUTIL_H

#include <Python.h>
#include <stdint.h>

/* Room for need items of elem bytes in *arr (PyMem; *cap items now): the capacity doubles,
 * from first, until it holds need. 0, or -1 with MemoryError (*arr and *cap unchanged). */
int sj_grow(void **arr, int32_t *cap, int32_t need, size_t elem, int32_t first);

/* a // b and a % b as Python computes them on ints (the quotient rounds toward minus
 * infinity, the remainder takes b's sign). b != 0, and not a == INT64_MIN with b == -1:
 * the caller checks (C's / would trap). */
static inline int64_t sj_floordiv(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static inline int64_t sj_floormod(int64_t a, int64_t b)
{
    int64_t r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

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
