/* The structured trace (TORCH_TRACE): compile events handed to shapejit.trace, which
 * writes them in the line format torch's trace_structured writes, for the tlparse report.
 *
 * The C side only says what happened and where; the Python side (shapejit/trace.py) owns
 * the file, the compile-id context and the JSON. Emission is skipped unless a trace is
 * open, so the hot path pays one int test:
 *
 *     if (sj_trace_on)
 *         SJ_TRACE("guard_added", "(OO)", expr, user_stack);
 *
 * The sink is called as sink(kind, (file, line, func), *args): the C site is the
 * framework frame torch would show as "stack". Never raises; a pending exception is kept.
 */
#ifndef SJ_TRACE_H
#define SJ_TRACE_H

#include <Python.h>

/* 1 while shapejit.trace has installed its sink (a trace directory is set). */
extern int sj_trace_on;

/* Builds the arguments with Py_BuildValue(fmt, ...) (a tuple format, "(...)") and hands
 * them to the sink. Errors in building or in the sink are reported and cleared. */
void sj_trace_at(const char *file, int line, const char *func, const char *kind, const char *fmt, ...);

#define SJ_TRACE(kind, ...) sj_trace_at(__FILE__, __LINE__, __func__, kind, __VA_ARGS__)

/* _C.set_trace_sink; NULL-terminated. */
extern PyMethodDef sj_trace_methods[];

#endif
