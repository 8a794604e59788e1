/* The break reasons' messages, from the table (breaks.def). */
#include "breaks.h"

const char *const break_messages[BR_COUNT] = {
    [BR_NONE] = "",
#define X(e, name, msg) [e] = msg,
#include "breaks.def"
#undef X
};
