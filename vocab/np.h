/* The one way shapejit includes the numpy C API. Every C file that needs numpy includes
 * this header; vocab/libs.c defines SJ_NUMPY_IMPORT_ARRAY before including it, so the API
 * table exists exactly once.
 *
 * shapejit never imports numpy itself (a program that does not use numpy does not load
 * it): the table is loaded once numpy has been imported, by the user or by torch. Every
 * use of the API is behind sj_np_ready(). */
#ifndef SJ_NP_H
#define SJ_NP_H

#include <Python.h>

#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL sj_ARRAY_API
#ifndef SJ_NUMPY_IMPORT_ARRAY
#define NO_IMPORT_ARRAY
#endif
#include <numpy/arrayobject.h>
#include <numpy/arrayscalars.h>

/* Loads the API table when numpy has been imported: 1 loaded, 0 numpy not imported (no
 * numpy object can exist, so there is nothing to look at). vocab/libs.c. */
int sj_np_load(void);
static inline int sj_np_ready(void)
{
    return PyArray_API != NULL || sj_np_load();
}

#endif
