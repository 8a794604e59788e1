/* From a frame to a cache entry: capture, guards, the backend, the result plan. */
#ifndef SJ_COMPILE_H
#define SJ_COMPILE_H

#include "../guards/code_cache.h"

typedef struct {
    PyObject *backend;     /* borrowed: backend(graph, example_inputs) -> callable */
    int fullgraph;
    int dynamic;           /* compile(dynamic=): -1 None (automatic), 0 False, 1 True */
    PyObject *name;        /* borrowed str: the backend's name, for messages */
    int internal;          /* 1: one of shapejit's own backends (its failure is internal) */
    PyObject *key;         /* borrowed: what an entry records of these options (backend,
                              fullgraph, dynamic, extras); an entry serves only calls with
                              an equal key (BACKEND_MATCH) */
} CompileOptions;

/* Capture the frame (code, its live localsplus, closure, globals, builtins). Returns the
 * new entry, already first in st's entries with its guards in st's tree (borrowed:
 * ENTRY_GRAPH, ENTRY_BREAK, or ENTRY_EAGER with the reason), or NULL: with an exception
 * set when the user must see an error (fullgraph=True) or memory ran out, without one
 * when the frame should just run eagerly this time. */
CacheEntry *compile_frame(PyCodeObject *co, PyObject *const *locals, PyObject *closure, PyObject *globals,
                          PyObject *builtins, const CompileOptions *opts, CodeState *st);

/* Rebuild the frame's result from the graph outputs (result.c); sources the plan names are resolved
 * into memo (t->n slots) on demand. New reference, or NULL with an exception. *wrote is
 * set when the final contents of an outside list or dict were written back (the
 * write-backs come first): after that, a failure of the rest (a record class whose
 * constructor raises, say) has changed the frame's inputs, so the frame must not run again. */
PyObject *compile_build_result(PyObject *plan, PyObject *outputs, PyObject **memo, const SourceTable *t,
                               const FrameView *fv, int *wrote);

/* Forget which graph breaks were already logged in full (reset()). */
void compile_forget_breaks(void);

extern PyObject *SjUnsupported;   /* exception: fullgraph capture failed */
extern PyObject *SjBackendCompilerFailed;   /* exception: a user backend raised */
extern PyObject *SjRecompileError;   /* exception: a recompile under stance fail_on_recompile */

/* The class an error of shapejit's is raised as: the subclass set by
 * _C._set_exception_classes (the torch compat layer's, which also derives from torch's
 * exception of that name), else the class itself. Borrowed. */
PyObject *sj_raise_class(PyObject *cls);
PyObject *hook_py_set_exception_classes(PyObject *self, PyObject *map);   /* METH_O */

/* capture/symbolic.c: eager_then_compile's first call runs eagerly; record the sizes of
 * its tensor arguments in st's frame state, so that the first compile already makes dynamic
 * the dims that changed between the two calls. 0, or -1 with an exception. */
int symb_record_call(CodeState *st, PyCodeObject *co, PyObject *const *locals);

#endif
