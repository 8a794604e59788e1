/* Break reasons: why capture stopped. breaks.def is the table. */
#ifndef SJ_BREAKS_H
#define SJ_BREAKS_H

typedef enum {
    BR_NONE = 0,
#define X(e, name, msg) e,
#include "breaks.def"
#undef X
    BR_COUNT
} BreakReason;

/* The message of each reason (breaks.def's third column); core/breaks.c. */
extern const char *const break_messages[BR_COUNT];

#endif
