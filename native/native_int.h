/* Internal interfaces between native/'s files: the compiler driver (cc.c), the disk
 * cache (diskcache.c) and the loader (loader.c). Everything here needs the GIL unless it
 * says otherwise. */
#ifndef SJ_CODEGEN_INT_H
#define SJ_CODEGEN_INT_H

#include "native.h"
#include <stdint.h>

/* ------------------------------------------------------------------------- cc.c ---- */

/* shapejit._C.CompileError (a RuntimeError subclass); strong, set by cc_init_module. */
extern PyObject *cc_CompileError;

/* Text that identifies what the compiler would produce: $CC as given, the compiler's
 * version and target lines, the expansion of -march=<cpu_target> (the knob, or
 * $SHAPEJIT_CPU_TARGET), and the flags. It enters the cache key. Probed once per process
 * per ($CC, target) (compiler runs, GIL released); a target other than native is first
 * checked to run on this CPU by a probe program run in a child. Borrowed string, valid
 * until the GIL is next released, or NULL + CompileError when the compiler cannot be run
 * or the target is refused (kept: later calls refuse without probing), or ValueError for
 * a malformed $SHAPEJIT_CPU_TARGET. */
const char *cc_identity(void);

/* Compiles the C file `src_path` into the shared object `out_path` with the flags of
 * cc_identity(). 0, or -1 with CompileError (compiler message, exit status or timeout,
 * `src_path` named as the source kept for inspection) or OSError set. Releases the GIL
 * while the compiler runs. `tag` names the source in the message. */
int cc_compile(const char *src_path, const char *out_path, const char *tag);

/* Stops every compile in flight: each kills its compiler and fails at its next look (at
 * most CC_SLICE_MS later). For a thread that saw an interrupt while another thread
 * compiles. */
void cc_abort_runs(void);

/* Adds CompileError to the module. */
int cc_init_module(PyObject *m);

/* -------------------------------------------------------------------- diskcache.c --- */

#define DC_KEY_HEX 33   /* 32 hex digits of an XXH3-128 key + NUL */

typedef struct {
    long mem_hits;    /* cg_build answered from this process's memo (loader.c) */
    long hits;        /* a verified entry was on disk */
    long misses;      /* no entry: compiled */
    long rebuilds;    /* a bad entry (truncated, corrupt, not ours) was removed and rebuilt */
    long compiles;    /* compiler runs that produced an entry */
    long evictions;   /* entries removed to keep the cache under its size cap */
} DcStats;

extern DcStats dc_stats;

/* The key of a source: XXH3-128 over the format version, cc_identity() and the source,
 * as 32 lowercase hex digits into `hex`. -1 with an exception when the compiler cannot
 * be probed. */
int dc_key(const char *src, size_t len, char hex[DC_KEY_HEX]);

/* An open, verified, read-only descriptor of the entry for `hex`, compiling it first
 * when it is missing or bad. The caller owns the descriptor. -1 with an exception. */
int dc_entry_fd(const char *hex, const char *src, size_t len, const char *tag);

/* The path of the entry for `hex` in the current cache directory (for messages). */
int dc_entry_path(const char *hex, char *buf, size_t size);

/* {"dir", "requested", "private", + the DcStats counters}; new reference. */
PyObject *dc_info(void);

/* ----------------------------------------------------------------- loader.c ---- */

/* Forgets the in-process memo: the next cg_build of any source goes to the disk cache
 * (tests); loaded libraries stay loaded. */
void cg_forget(void);

#endif
