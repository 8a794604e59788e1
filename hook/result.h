/* The result plan of a compiled frame (result.c): planned at capture, built at every call
 * (compile_build_result, compile.h). */
#ifndef SJ_RESULT_H
#define SJ_RESULT_H

#include "../capture/capture.h"

/* The plan of the frame's result r: a new reference, or NULL with the capture's failure
 * recorded (cap_failed) or an exception set. Graph outputs the plan needs are added to
 * c->g. */
PyObject *result_plan(Capture *c, Var *r);

#endif
