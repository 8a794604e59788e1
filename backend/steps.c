/* The step kinds' dispatch table, generated from steps.def (the functions are declared in
 * lower.h, next to the files that define them).
 *
 * Memory: a static table; nothing here holds a reference. */
#include "lower.h"

const StepKindInfo step_kinds[STEP_COUNT] = {
#define X(KIND, name, lowers, node_plan, pass, run, free, stats) \
    [STEP_##KIND] = {name, lowers, node_plan, pass, run, free, stats},
#include "steps.def"
#undef X
};
