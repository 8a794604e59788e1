/* Log channels (core/logs.def is the table). C formats a message only when its channel is
 * on at that level, then hands it to the sink the Python package installed
 * (_C.set_log_sink), which routes it to logging.getLogger("shapejit.<channel>").
 *
 *     if (sj_log_on(LOG_RECOMPILES, SJ_INFO))
 *         sj_log(LOG_RECOMPILES, SJ_INFO, "Recompiling function %U in %U:%d", ...);
 *
 * (sj_log checks too; the test in front only saves building the arguments.)
 */
#ifndef SJ_LOG_H
#define SJ_LOG_H

#include <Python.h>

typedef enum {
#define X(e, name, doc) e,
#include "logs.def"
#undef X
    LOG_COUNT
} LogChannel;

/* The `logging` module's levels, for C callers. */
#define SJ_DEBUG 10
#define SJ_INFO 20
#define SJ_WARNING 30

/* Per channel: 0 off, else the lowest `logging` level that is emitted. */
extern int sj_log_levels[LOG_COUNT];

extern const char *const sj_log_names[LOG_COUNT];

static inline int sj_log_on(LogChannel c, int level)
{
    int min = sj_log_levels[c];
    return min > 0 && level >= min;
}

/* Formats (PyUnicode_FromFormat syntax) and emits one message if the channel is on at
 * `level`. Never raises and leaves any pending exception as it was: an error while
 * formatting or in the sink is reported with PyErr_WriteUnraisable and cleared.
 * Without a sink, writes "[shapejit] <msg>" to sys.stderr. Needs the GIL. */
void sj_log(LogChannel c, int level, const char *fmt, ...);

/* The same for a ready message (borrowed str). */
void sj_log_str(LogChannel c, int level, PyObject *msg);

/* _C.log_channels, set_log_level, set_log_sink, _log; NULL-terminated. The module init
 * adds every entry to the module. */
extern PyMethodDef sj_log_methods[];

#endif
