/* The one way shapejit includes the numpy C API. Every C file that needs numpy includes
 * this header; the module init (core) calls import_array() in the file that defines
 * SJ_NUMPY_IMPORT_ARRAY before including it, so the API table exists exactly once. */
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

#endif
