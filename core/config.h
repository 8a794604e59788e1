/* Config knobs (core/config.def is the table): the live values C reads on its hot paths,
 * and the _C functions behind shapejit.config.
 *
 * Readers use the struct fields directly (sj_config.cache_size_limit); only config.c
 * writes them, through config_set(), which keeps derived values (sj_stance) in sync.
 * Everything here is touched with the GIL held.
 */
#ifndef SJ_CONFIG_H
#define SJ_CONFIG_H

#include <Python.h>

typedef enum { CFG_BOOL, CFG_INT, CFG_STR } ConfigKind;

/* The C type of a knob of each kind (pasted from the KIND column). */
#define SJ_CFG_CTYPE_CFG_BOOL int        /* 0 or 1 */
#define SJ_CFG_CTYPE_CFG_INT long        /* >= 0 */
#define SJ_CFG_CTYPE_CFG_STR \
    PyObject *  /* strong reference to an exact str; never NULL
                                            after config_init() */

typedef struct {
#define X(name, kind, def, doc) SJ_CFG_CTYPE_##kind name;
#define XA(alias, target)
#include "config.def"
#undef X
#undef XA
} SjConfig;

extern SjConfig sj_config;

/* The longest cpu_target text (a gcc -march name). */
#define SJ_CPU_TARGET_MAX 64

/* 1 when `t` is a valid cpu_target: 1..SJ_CPU_TARGET_MAX characters of [a-z0-9._-].
 * The text is passed to the compiler as -march=<t> and enters file names of nothing, but
 * the charset keeps it one harmless word. */
int sj_cpu_target_valid(const char *t);

/* Stances: the valid values of the `stance` knob, in one table.
 * S(ENUM, "name"). STANCE_DEFAULT must stay first (it is the zero value). */
#define SJ_STANCES(S) \
    S(STANCE_DEFAULT, "default") \
    S(STANCE_FORCE_EAGER, "force_eager") \
    S(STANCE_EAGER_ON_RECOMPILE, "eager_on_recompile") \
    S(STANCE_FAIL_ON_RECOMPILE, "fail_on_recompile") \
    S(STANCE_EAGER_THEN_COMPILE, "eager_then_compile")

typedef enum {
#define S(e, name) e,
    SJ_STANCES(S)
#undef S
        STANCE_COUNT
} Stance;

extern const char *const sj_stance_names[STANCE_COUNT];

/* The current stance as an enum (a Stance value), equal to sj_config.stance's text.
 * An int so the hook reads it without a conversion. */
extern int sj_stance;

/* Fills every knob with its default (and resets sj_stance). Called once by the module
 * init; calling it again restores all defaults. Returns 0, or -1 with an exception set. */
int config_init(void);

/* _C.config_knobs, config_get, config_set, config_aliases; NULL-terminated. The module
 * init adds every entry to the module. */
extern PyMethodDef sj_config_methods[];

#endif
