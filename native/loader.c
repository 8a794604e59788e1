/* Loading kernel libraries and describing calls into them.
 *
 * A library is dlopened (RTLD_NOW | RTLD_LOCAL) from the descriptor the disk cache
 * verified, so a concurrent replacement of the entry's path cannot swap another file in,
 * and the descriptor is closed right after: a long-lived process loads thousands of
 * libraries, and their mappings keep the files alive, not descriptors (the common limit
 * of 1024 open files was reached). dlopen is given a name that reaches the descriptor,
 * a symbolic link to /proc/self/fd/<n> named after a per-process counter
 * (<dir>/.tmp.ld.<pid>.<seq>.so, removed right after): glibc answers dlopen of a name any
 * loaded object carries with that object, and a bare /proc/self/fd/<n> would be reused
 * once <n> is closed. For the same reason a file that is already loaded (same device and
 * inode: the memo forgot it, or another source hashed to a file we hold) is never dlopened
 * under a second name (glibc would attach that name to the old object): its CgLib is
 * reused. A mapped file's inode cannot be freed, so its number is never another file's.
 * Without /proc, the entry's path itself is the name (unique per key).
 *
 * Call descriptions are libffi cifs. The argument-type array a cif points to is interned
 * per signature string and never freed, so a prepared CgFn is a plain value. */
#include "native_int.h"
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct CgLib {
    void *handle;             /* from dlopen; never closed */
    dev_t dev;                /* the loaded file's identity */
    ino_t ino;
    char key[DC_KEY_HEX];     /* the source's cache key */
    char *tag;                /* owned: names the library in messages */
    int memo;                 /* answers cg_build for its key (cleared by cg_forget) */
    CgLib *next;
};

static CgLib *libs;           /* every library loaded, newest first; immortal */
static unsigned long loads;   /* names handed to dlopen so far */

/* ------------------------------------------------------------------ libraries ---- */

static CgLib *memo_find(const char *key)
{
    for (CgLib *l = libs; l; l = l->next)
        if (l->memo && !strcmp(l->key, key))
            return l;
    return NULL;
}

/* dlopen of the file open at fd (the entry at `path`) under a name no loaded object has
 * carried; the caller closes fd. NULL with dlerror() set. */
static void *load_fd(int fd, const char *path, const char *key)
{
    char proc[64], link[4096];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    const char *slash = strrchr(path, '/');
    int n = slash ? snprintf(link, sizeof link, "%.*s/.tmp.ld.%ld.%lu.%s.so", (int)(slash - path), path, (long)getpid(),
                             ++loads, key)
                  : -1;
    if (n < 0 || (size_t)n >= sizeof link || access("/proc/self/fd", X_OK) != 0 || symlink(proc, link) != 0)
        return dlopen(path, RTLD_NOW | RTLD_LOCAL);   /* no /proc (or no link): the entry's own name */
    void *h = dlopen(link, RTLD_NOW | RTLD_LOCAL);
    int e = errno;
    unlink(link);
    errno = e;
    return h;
}

CgLib *cg_build(const char *src, size_t len, const char *tag)
{
    char key[DC_KEY_HEX], path[4096];
    if (dc_key(src, len, key) < 0)
        return NULL;
    CgLib *lib = memo_find(key);
    if (lib) {
        dc_stats.mem_hits++;
        return lib;
    }
    int fd = dc_entry_fd(key, src, len, tag);
    if (fd < 0)
        return NULL;
    if (dc_entry_path(key, path, sizeof path) < 0)
        snprintf(path, sizeof path, "<%s>", key);
    struct stat st;
    if (fstat(fd, &st) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        close(fd);
        return NULL;
    }
    for (CgLib *l = libs; l; l = l->next) {
        if (l->dev == st.st_dev && l->ino == st.st_ino) {   /* loaded before: never a second name */
            close(fd);
            l->memo = 1;
            return l;
        }
    }
    void *h = load_fd(fd, path, key);
    close(fd);
    if (!h) {
        const char *e = dlerror();
        PyErr_Format(PyExc_ImportError, "shapejit: cannot load the kernel library for %s (%s): %s", tag, path,
                     e ? e : "unknown dlopen error");
        return NULL;
    }
    lib = calloc(1, sizeof *lib);
    char *tag_copy = strdup(tag);
    if (!lib || !tag_copy) {
        free(lib);
        free(tag_copy);
        dlclose(h);
        PyErr_NoMemory();
        return NULL;
    }
    lib->handle = h;
    lib->dev = st.st_dev;
    lib->ino = st.st_ino;
    memcpy(lib->key, key, sizeof key);
    lib->tag = tag_copy;
    lib->memo = 1;
    lib->next = libs;
    libs = lib;
    return lib;
}

void *cg_sym(CgLib *lib, const char *name)
{
    dlerror();
    void *p = dlsym(lib->handle, name);
    if (!p) {
        PyErr_Format(PyExc_AttributeError,
                     "shapejit: the kernel library for %s (key %s) exports no symbol "
                     "'%s' (entry points must be declared CG_EXPORT)",
                     lib->tag, lib->key, name);
        return NULL;
    }
    return p;
}

/* The memo forgets every library, so the next cg_build of any source goes to the disk
 * cache again (tests). The libraries stay loaded. */
void cg_forget(void)
{
    for (CgLib *l = libs; l; l = l->next)
        l->memo = 0;
}

/* ----------------------------------------------------------------- signatures ---- */

typedef struct Sig {
    struct Sig *next;
    char *text;               /* owned: the signature string */
    ffi_type *ret;
    int nargs;
    ffi_type *args[];         /* what a cif's arg_types points at */
} Sig;

static Sig *sigs;             /* interned signatures; immortal */

static const char sig_letters[] = {
#define X(ch, ft, ctype, doc) ch,
#include "sig.def"
#undef X
    '\0'};

static ffi_type *letter_type(char c)
{
    switch (c) {
#define X(ch, ft, ctype, doc) \
    case ch: \
        return &ft;
#include "sig.def"
#undef X
    default:
        return NULL;
    }
}

/* The interned Sig for `text`, parsing it the first time; NULL + ValueError. */
static Sig *sig_get(const char *text)
{
    for (Sig *s = sigs; s; s = s->next)
        if (!strcmp(s->text, text))
            return s;
    size_t n = strlen(text);
    if (n == 0) {
        PyErr_Format(PyExc_ValueError,
                     "shapejit: empty kernel signature (expected a return letter then one "
                     "letter per argument, from \"%s\")",
                     sig_letters);
        return NULL;
    }
    if (n - 1 > CG_MAX_ARGS) {
        PyErr_Format(PyExc_ValueError, "shapejit: kernel signature has %zu arguments; at most %d", n - 1, CG_MAX_ARGS);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        if (!letter_type(text[i]) || (i > 0 && text[i] == 'v')) {
            PyErr_Format(PyExc_ValueError,
                         "shapejit: kernel signature '%s': bad letter '%c' at %zu (the "
                         "first letter is the return type, from \"%s\"; the others are arguments, from "
                         "\"%s\" without v)",
                         text, text[i], i, sig_letters, sig_letters);
            return NULL;
        }
    }
    Sig *s = malloc(sizeof *s + (n - 1) * sizeof(ffi_type *));
    char *copy = strdup(text);
    if (!s || !copy) {
        free(s);
        free(copy);
        PyErr_NoMemory();
        return NULL;
    }
    s->text = copy;
    s->ret = letter_type(text[0]);
    s->nargs = (int)(n - 1);
    for (size_t i = 1; i < n; i++)
        s->args[i - 1] = letter_type(text[i]);
    s->next = sigs;
    sigs = s;
    return s;
}

int cg_fn_prepare(CgFn *f, void *fn, const char *sig)
{
    Sig *s = sig_get(sig);
    if (!s)
        return -1;
    ffi_status st = ffi_prep_cif(&f->cif, FFI_DEFAULT_ABI, (unsigned)s->nargs, s->ret, s->args);
    if (st != FFI_OK) {
        PyErr_Format(PyExc_RuntimeError, "shapejit: libffi cannot prepare a call of signature '%s' (status %d)", sig,
                     (int)st);
        return -1;
    }
    f->fn = fn;
    f->nargs = s->nargs;
    f->ret = sig[0];
    f->sig = s->text;
    return 0;
}
