/* Graph breaks that split a frame: the continuation code and the resume functions.
 *
 * When the compiled frame's own instruction cannot be captured (a call shapejit does not
 * model, a branch on a tensor's value), capture runs again and stops before it. The entry
 * then runs the graph of everything before the break and calls a *continuation*: a code
 * object that pushes the instruction's operands, runs the instruction in the interpreter
 * and calls the *resume function* of the way it went out, handing over the live locals
 * and the rest of the evaluation stack. A resume function (resume_in_f_at_12) is the
 * user's code with a prologue that rebuilds that state and jumps to the instruction after
 * the break; the frame hook compiles it like any other frame. */
#ifndef SJ_RESUME_H
#define SJ_RESUME_H

#include "../capture/capture.h"
#include "../guards/code_cache.h"

typedef struct {
    Var *args;             /* VK_TUPLE: the continuation's arguments before the resume functions */
    PyObject *cont;        /* new reference: the continuation code */
    PyObject *resume[2];   /* new references */
    int loop[2];           /* 1: that way out re-enters a loop holding the break; its resume
                              function runs in the interpreter (ROLE_RESUME_LOOP) */
    int nresume;
} BreakCode;

/* 1 when the instruction starting at code unit pc of co may be a graph break: a call, a
 * conditional jump or a simple operator, outside try/with blocks. */
int resume_breakable(PyCodeObject *co, int32_t pc);

/* From a capture stopped before its break instruction (c->stopped): the continuation and
 * resume codes, and the values to hand over. -1 with the failure recorded in c (the frame
 * then runs eagerly) or a Python exception set. */
int resume_build(Capture *c, PyCodeObject *co, CodeState *st, BreakCode *out);
void resume_code_clear(BreakCode *b);

#endif
