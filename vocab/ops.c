/* Per-op facts generated from ops.def (the shape rules are dispatched in shapes/rules.c). */
#include "ops.h"

const OpInfo op_info[OP_COUNT] = {
#define X(e, name, kind, rule) [e] = {name, kind},
#include "ops.def"
#undef X
};
