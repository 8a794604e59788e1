/* The event sink behind shapejit.explain (see docs/internals/c_api.md). */
#ifndef SJ_EVENTS_H
#define SJ_EVENTS_H

#include <Python.h>

int events_active(void);
void events_emit_graph(PyObject *graph);                   /* borrowed */
void events_emit_break(PyObject *reason, PyObject *stack); /* borrowed; stack may be NULL */
void events_emit_guards(PyObject *lines);                  /* borrowed list of str */
void events_emit_compile_time(double seconds);
long events_next_frame_id(void);
void events_reset(void);
PyObject *events_py_set_sink(PyObject *self, PyObject *sink);

#endif
