/* Generated C to callable functions: compile a translation unit with the system C compiler
 * (cc.c), keep the shared object in a per-user disk cache (diskcache.c), load it and call
 * its functions through prepared libffi call descriptions (loader.c). This layer knows
 * nothing of graphs; the lowering above it writes C source and names the entry points.
 *
 *     CgLib *lib = cg_build(src, strlen(src), "graph f:12");   // compile or cache hit
 *     void *p = lib ? cg_sym(lib, "k0") : NULL;                // NULL + exception on error
 *     CgFn k;
 *     if (!p || cg_fn_prepare(&k, p, "vppl") < 0) goto error;  // void k0(ptr, ptr, int64)
 *     void *args[] = {&x, &y, &n};
 *     cg_fn_call(&k, NULL, args);
 *
 * Source conventions: the compiler runs with -fvisibility=hidden, so every entry point is
 * declared `CG_EXPORT` (defined on the command line as visibility("default")). The flags
 * are the table in cc.c; docs/internals/backend_measurements.md, section 3 says why each is there.
 *
 * Every function here needs the GIL; cg_build releases it while the compiler runs. */
#ifndef SJ_CODEGEN_H
#define SJ_CODEGEN_H

#include <Python.h>
#include <ffi.h>

/* A loaded kernel library. Owned by the loader and kept for the process lifetime (never
 * unloaded: code pointers into it may be held anywhere), so callers borrow it freely. */
typedef struct CgLib CgLib;

/* The library built from `len` bytes of C source `src` (need not be NUL-terminated):
 * from this process's memo, else a verified disk-cache entry, else one compiler run.
 * `tag` names the source in messages and logs (e.g. the graph's function); not part of
 * the key. NULL with an exception set on failure: shapejit._C.CompileError when the
 * compiler fails, cannot be run or times out (its output and the kept source path in the
 * exception), ValueError for a bad $CC or SHAPEJIT_CC_TIMEOUT, OSError for the file
 * system, ImportError when dlopen refuses a verified entry, or whatever the cache
 * directory's warning raised under -W error. Borrowed result, valid for the process
 * lifetime. */
CgLib *cg_build(const char *src, size_t len, const char *tag);

/* The address of the exported symbol `name` in `lib`; NULL with AttributeError set when
 * it is missing. */
void *cg_sym(CgLib *lib, const char *name);

/* A call description. Signature strings: the return type's letter, then one letter per
 * argument, from native/sig.def (v void (return only), p pointer, l int64, i int32,
 * d double, f float): "vppl" is void f(void *, void *, int64_t).
 * A CgFn may be copied freely after preparation (arg_types point at an interned,
 * immortal array per signature string). */
#define CG_MAX_ARGS 255

typedef struct {
    void *fn;          /* the function's address (borrowed from its CgLib) */
    ffi_cif cif;       /* prepared once by cg_fn_prepare */
    int nargs;
    char ret;          /* the signature's return letter */
    const char *sig;   /* the interned signature string (immortal) */
} CgFn;

/* Prepares `f` to call `fn` with signature `sig`. 0, or -1 with ValueError (bad
 * signature) or RuntimeError (libffi refused it) set. */
int cg_fn_prepare(CgFn *f, void *fn, const char *sig);

/* Calls the prepared function. `args[i]` points at the i-th argument's value (an
 * int64_t for 'l', a void * for 'p', ...). `ret` is NULL for 'v', else it points at
 * 8 bytes: libffi widens integer results narrower than a register to ffi_arg, so an 'i'
 * result is read as (int32_t)*(ffi_arg *)ret; 'd' and 'f' are written as double/float.
 * Never fails; the callee's own behaviour is the caller's business. */
static inline void cg_fn_call(CgFn *f, void *ret, void **args)
{
    ffi_call(&f->cif, FFI_FN(f->fn), ret, args);
}

/* Adds shapejit._C.CompileError and the test hooks (_cg_build, _cg_call, _cg_cache_info,
 * _cg_forget) to the module. 0 or -1 with an exception. */
int codegen_init_module(PyObject *m);

#endif
