/* How shapejit's C functions answer. Every function follows one of these; a function
 * that departs from them says so in its comment.
 *
 *   int status       0 success; -1 error with a Python exception set.
 *   int, 3 answers   0 done (outputs filled); 1 not handled, no exception: the caller
 *                    falls back (runs eagerly, tries the next model, breaks the graph);
 *                    -1 error with an exception set. "Not handled" is 1, never 0, so that
 *                    `if (f(...))` reads "did not do it" for both kinds of int function.
 *   predicates       is_*, has_*, *_ok, *_check (and other yes/no questions): 1 or 0,
 *                    never fail, never set an exception. One that can fail (sj_hasattr)
 *                    returns -1 with the exception.
 *   lookups          an index >= 0, or -1 when absent (no exception: absence is no error).
 *   iterators        *_next: 1 and the item, 0 when exhausted, -1 error (as tp_iternext
 *                    and PyIter_Next answer, so loops read `while ((r = x_next(..)) > 0)`).
 *   PyObject *       new reference (or borrowed, when the comment says so), or NULL with
 *                    an exception set.
 *   other pointers   constructors and arena allocations: the pointer, or NULL with an
 *                    exception set.
 *   capture          functions taking a Capture report a failure in it (cap_fail, with
 *                    the graph-break reason) and return -1 or NULL; no exception is left
 *                    set. Those that may decline take `int *handled` (0: not handled, the
 *                    caller goes on) or return 1 as above.
 *   shape rules      0, or -1 with a ShapeErr filled (shapes/rules.h); never an exception.
 *
 * Functions named after the same verb (bind, read, get, find) answer the same way: a
 * reader that fills outputs returns 0 when it did and 1 when the value is not one it
 * takes, never 1 for success. */

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
/* Ends the current exception of a callback whose error has nowhere to go (a log or trace
 * sink): an interrupt is kept aside (sj_err_clear), anything else is printed as
 * unraisable, naming where (borrowed), and cleared. Nothing when none is set. */
void sj_err_unraisable(PyObject *where);

#endif
