/* The compiler collective (shapejit/collectives.py): at the start of each compile, the
 * ranks of a torch.distributed job join what automatic dynamic knows of the frame's
 * arguments, so a size that differs across ranks is dynamic on all of them. */
#ifndef SJ_COLLECTIVE_H
#define SJ_COLLECTIVE_H

#include <Python.h>
#include "../guards/code_cache.h"

/* With config.enable_compiler_collectives on and a process group of several ranks,
 * replaces st->fstate by its join with every rank's; otherwise does nothing. Never fails:
 * the exchange's own problems are warnings, an interrupt is kept for the hook to raise. */
void collective_exchange(CodeState *st, PyCodeObject *co, PyObject *const *locals);

/* Before the first capture of a compile: a copy of st->fstate (new reference) when the
 * collective may be active, NULL otherwise (then collective_retrace is not called). */
PyObject *collective_snapshot(CodeState *st);

/* After the first capture: the ranks join what the capture read that the arguments did not
 * reach (attributes, globals, closures: the entries of st->fstate that are new or changed
 * since `before`). 1 when a dim turned out to differ across ranks: st->fstate holds the join
 * and the caller captures once more; 0 otherwise. Every rank that exchanged before the
 * capture takes part, so the ranks' rounds stay in step. Never fails, like collective_exchange;
 * an error set by the capture is kept. */
int collective_retrace(CodeState *st, PyCodeObject *co, PyObject *before);

#endif
