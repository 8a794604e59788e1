/* Interrupts survive shapejit's fallbacks.
 *
 * The compiler clears exceptions in many places and falls back: a guard whose source
 * cannot be read fails, an exception during capture becomes a graph break, a graph that
 * raises reruns eagerly, a log sink that raises is reported and ignored. An exception that
 * is not an Exception (KeyboardInterrupt from Ctrl-C or a signal handler, SystemExit,
 * GeneratorExit) must never be lost that way. So shapejit's C code clears with
 * sj_err_clear(), never PyErr_Clear(): an Exception is cleared as before; any other
 * exception is kept aside for the thread instead, and the frame hook raises it again
 * before it runs, compiles or returns anything more (sj_err_raise_deferred). The first one
 * kept wins; a later one while it waits is dropped (the user sees one interrupt).
 * tests/hook/test_interrupts.py checks that no raw PyErr_Clear() is left outside this file. */
#ifndef SJ_ERRORS_H
#define SJ_ERRORS_H

#include <Python.h>

/* PyErr_Clear(), except that an exception which is not an Exception is kept aside. */
void sj_err_clear(void);
/* 1 when an exception is kept aside on this thread. */
int sj_err_deferred(void);
/* The kept exception becomes the current one again: -1 (exception set), or 0 when none
 * was kept (nothing changes). */
int sj_err_raise_deferred(void);
/* hasattr(obj, name) as Python 3 has it: 1 or 0, or -1 with the exception when looking
 * the attribute up raised something other than AttributeError (PyObject_HasAttr would
 * swallow it, an interrupt included). */
int sj_hasattr(PyObject *obj, PyObject *name);
/* 1 when the current exception must not be turned into a fallback (it is not an
 * Exception): the caller propagates it instead. 0 when none is set. */
int sj_err_is_interrupt(void);

#endif
