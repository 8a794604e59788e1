/* The compiler collective (shapejit/collectives.py): at the start of each compile, the
 * ranks of a torch.distributed job join what automatic dynamic knows of the frame's
 * arguments, so a size that differs across ranks is dynamic on all of them. */
#ifndef SJ_COLLECTIVE_H
#define SJ_COLLECTIVE_H

#include <Python.h>
#include "code_cache.h"

/* With config.enable_compiler_collectives on and a process group of several ranks,
 * replaces st->fstate by its join with every rank's; otherwise does nothing. Never fails:
 * the exchange's own problems are warnings, an interrupt is kept for the hook to raise. */
void collective_exchange(CodeState *st, PyCodeObject *co, PyObject *const *locals);

#endif
