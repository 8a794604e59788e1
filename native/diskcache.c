/* The disk cache of compiled kernel libraries.
 *
 * Where: <root>/kernels, root being shapejit's cache root as shapejit/pgo.py resolves it
 * ($SHAPEJIT_CACHE_DIR, else $XDG_CACHE_HOME/shapejit, else ~/.cache/shapejit), read at
 * every build so a changed variable takes effect. Missing directories are made with mode
 * 0700. Then lstat must show: the root a real directory (not a symlink) owned by
 * geteuid() and not writable by group or others (else someone else could swap kernels/
 * out), kernels/ the same with no group/other bits at all. Otherwise the cache is not used
 * for that root: one Python warning names the path and the problem, and kernels go to a
 * private mkdtemp directory for the rest of the process (removed at exit).
 *
 * Entries: <key>.so, key = XXH3-128 of (format version, cc_identity(), source) in hex,
 * beside <key>.c, the source it was built from (rewritten before every compile, kept for
 * inspection and named in compile errors). An entry is the compiler's output followed by
 * a 48-byte trailer: magic "SJK2", format u32, payload length u64, XXH3-128 of the
 * payload, then the binding: XXH3-128 of (that hash, the key, cc_identity()); hashes
 * canonical (big-endian), integers little-endian. The binding ties an entry to the one
 * key and compiler it was built for: a valid entry of another key (or compiler) placed
 * under this name is refused like a corrupt one, never loaded.
 *
 * Write: the compiler writes a mkstemp-named temp (.tmp.<key>.XXXXXX.so) in the same
 * directory; we append the trailer, fsync, and rename it onto <key>.so. Two processes
 * building the same key each write their own temp, and rename is atomic, so readers see
 * one whole entry or none. Temps older than an hour (a killed process's) are removed the
 * first time a directory is used.
 *
 * Read: open(O_NOFOLLOW), fstat (a regular file of ours), check the trailer and hash the
 * payload, all before dlopen ever sees it (a truncated .so makes dlopen die of SIGBUS).
 * A bad entry is unlinked, logged (output_code channel) and rebuilt. The verified
 * descriptor is what the loader dlopens (/proc/self/fd/<n>), so a concurrent replacement
 * of the path cannot swap another file in. Entries are made read-only (0400): nothing
 * ever modifies one in place.
 *
 * Size: the entries (.so and .c) are kept under a cap, the knob kernel_cache_max_bytes
 * or $SHAPEJIT_KERNEL_CACHE_MAX_BYTES (bytes, or with a K/M/G/T suffix: powers of 1024;
 * 0: no cap), 1 GiB by default. Using an entry sets its times to now; after a compile,
 * if the directory is over the cap, the least recently used entries are removed until it
 * is at 90% of it (not the one just built). One process evicts at a time (flock on
 * <dir>/.lock; a process that finds it taken leaves the work to the holder). Removing an
 * entry another process is loading is harmless: it loads from the descriptor it opened
 * (an unlinked file lives on while open or mapped); one that looks a moment later finds
 * no entry and compiles it again. */
#include "native_int.h"
#include "../core/log.h"
#include "../core/trace.h"
#include "../core/errors.h"
#include "../core/config.h"
#include "../core/policy.h"
#include <dirent.h>
#include <stdarg.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#define DC_FORMAT "shapejit-kernel-2"   /* in the key: bump to orphan every old entry */
#define DC_FORMAT_NUM 2u                 /* in the trailer */
#define DC_MAGIC "SJK2"
#define DC_TRAILER 48
#define DC_STALE_S 3600                  /* a temp older than this belongs to a dead build */
#define DC_SUBDIR "kernels"

DcStats dc_stats;

static struct {
    char *requested;            /* owned: the root the state below was resolved for */
    char dir[PATH_MAX];         /* the kernels directory in use */
    int is_private;             /* dir is the private fallback */
    char private_dir[PATH_MAX]; /* made on first need; "" before */
} dc;

/* ------------------------------------------------------------------ helpers ---- */

static int path_join(char *buf, size_t size, const char *a, const char *b)
{
    int n = snprintf(buf, size, "%s/%s", a, b);
    if (n < 0 || (size_t)n >= size) {
        PyErr_Format(PyExc_OSError, "shapejit: path too long: %s/%s", a, b);
        return -1;
    }
    return 0;
}

static void raise_os(const char *what, const char *path)
{
    int e = errno;
    PyErr_Format(PyExc_OSError, "shapejit: kernel cache: %s %s: %s", what, path, strerror(e));
}

static int write_all(int fd, const void *buf, size_t n, off_t at)
{
    const char *p = buf;
    while (n) {
        ssize_t w = pwrite(fd, p, n, at);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w, n -= (size_t)w, at += w;
    }
    return 0;
}

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* XXH3-128 of the first `len` bytes of fd into `out`; 0, or -1 when they could not all
 * be read (errno set; EIO for a file shorter than len). */
static int hash_fd(int fd, uint64_t len, XXH128_canonical_t *out)
{
    /* the read buffer is on the heap: compiles run deep in the frame hook's recursion
     * and on threads with small stacks, where 64 KiB of C stack may not be there */
    enum { BUF_SIZE = 1 << 16 };
    XXH3_state_t *st = XXH3_createState();
    char *buf = st ? malloc(BUF_SIZE) : NULL;
    if (!buf) {
        if (st)
            XXH3_freeState(st);
        errno = ENOMEM;
        return -1;
    }
    XXH3_128bits_reset(st);
    uint64_t at = 0;
    int rc = 0;
    while (at < len) {
        size_t want = len - at < BUF_SIZE ? (size_t)(len - at) : BUF_SIZE;
        ssize_t n = pread(fd, buf, want, (off_t)at);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0)
                errno = EIO;
            rc = -1;
            break;
        }
        XXH3_128bits_update(st, buf, (size_t)n);
        at += (uint64_t)n;
    }
    if (rc == 0)
        XXH128_canonicalFromHash(out, XXH3_128bits_digest(st));
    XXH3_freeState(st);
    free(buf);
    return rc;
}

/* XXH3-128 of three byte strings in order; 0, or -1 with MemoryError. */
static int hash3(const void *a, size_t an, const void *b, size_t bn, const void *c, size_t cn, XXH128_canonical_t *out)
{
    XXH3_state_t *st = XXH3_createState();
    if (!st) {
        PyErr_NoMemory();
        return -1;
    }
    XXH3_128bits_reset(st);
    XXH3_128bits_update(st, a, an);
    XXH3_128bits_update(st, b, bn);
    XXH3_128bits_update(st, c, cn);
    XXH128_canonicalFromHash(out, XXH3_128bits_digest(st));
    XXH3_freeState(st);
    return 0;
}

/* The binding of a payload hash to the entry's key and the compiler identity (strings
 * with their NULs: separators); 0, or -1 with an exception (the compiler cannot be
 * probed). */
static int binding(const XXH128_canonical_t *payload, const char *key, XXH128_canonical_t *out)
{
    const char *ident = cc_identity();
    return ident ? hash3(payload->digest, sizeof payload->digest, key, strlen(key) + 1, ident, strlen(ident) + 1, out)
                 : -1;
}

/* --------------------------------------------------------------- directory ---- */

/* The cache root by pgo.py's rule, into buf; 0, or -1 with `problem` set. */
static int cache_root(char *buf, size_t size, char *problem, size_t psize)
{
    const char *explicit = getenv("SHAPEJIT_CACHE_DIR");
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    int n;
    if (explicit && *explicit)
        n = snprintf(buf, size, "%s", explicit);
    else if (xdg && *xdg)
        n = snprintf(buf, size, "%s/shapejit", xdg);
    else {
        if (!home || !*home) {
            struct passwd *pw = getpwuid(geteuid());
            home = pw ? pw->pw_dir : NULL;
        }
        if (!home || !*home) {
            snprintf(problem, psize, "cannot be found (no $SHAPEJIT_CACHE_DIR, $XDG_CACHE_HOME or home)");
            snprintf(buf, size, "~/.cache/shapejit");
            return -1;
        }
        n = snprintf(buf, size, "%s/.cache/shapejit", home);
    }
    if (n < 0 || (size_t)n >= size) {
        snprintf(problem, psize, "is too long a path");
        return -1;
    }
    return 0;
}

/* mkdir -p with mode 0700 for every directory it makes. */
static int make_dirs(const char *path)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(p, 0700) < 0 && errno != EEXIST)
            return -1;
        *s = '/';
    }
    return mkdir(p, 0700) < 0 && errno != EEXIST ? -1 : 0;
}

/* Empty when `path` is a safe directory, else what is wrong. `forbidden`: the mode bits
 * that must be off. */
static void check_dir(const char *path, mode_t forbidden, char *problem, size_t psize)
{
    struct stat st;
    problem[0] = '\0';
    if (lstat(path, &st) < 0)
        snprintf(problem, psize, "cannot be used (%s)", strerror(errno));
    else if (S_ISLNK(st.st_mode))
        snprintf(problem, psize, "is a symbolic link (the cache must be a real directory)");
    else if (!S_ISDIR(st.st_mode))
        snprintf(problem, psize, "is not a directory");
    else if (st.st_uid != geteuid())
        snprintf(problem, psize, "is owned by uid %ld, not by this process's uid %ld", (long)st.st_uid,
                 (long)geteuid());
    else if (st.st_mode & forbidden)
        snprintf(problem, psize, "has mode 0%o: group/other permission bits 0%o must be off (chmod %s)",
                 (unsigned)(st.st_mode & 07777), (unsigned)(st.st_mode & forbidden), forbidden == 077 ? "700" : "go-w");
}

/* Removes .tmp.* files older than DC_STALE_S from dir (each a dead build's). Best effort. */
static void remove_stale(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    time_t now = time(NULL);
    for (struct dirent *e; (e = readdir(d));) {
        struct stat st;
        if (strncmp(e->d_name, ".tmp.", 5) != 0 || fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (now - st.st_mtime > DC_STALE_S)
            unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
}

/* At exit: empties and removes the private directory (loaded libraries stay mapped). */
static void remove_private(void)
{
    if (!dc.private_dir[0])
        return;
    DIR *d = opendir(dc.private_dir);
    if (d) {
        for (struct dirent *e; (e = readdir(d));)
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                unlinkat(dirfd(d), e->d_name, 0);
        closedir(d);
    }
    rmdir(dc.private_dir);
}

static int make_private(void)
{
    if (dc.private_dir[0])
        return 0;
    const char *tmp = getenv("TMPDIR");
    char tmpl[PATH_MAX];
    int n = snprintf(tmpl, sizeof tmpl, "%s/shapejit-kernels-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (n < 0 || (size_t)n >= sizeof tmpl || !mkdtemp(tmpl)) {
        raise_os("cannot make a private directory", tmpl);
        return -1;
    }
    snprintf(dc.private_dir, sizeof dc.private_dir, "%s", tmpl);
    Py_AtExit(remove_private);
    return 0;
}

/* The kernels directory for the current root, resolving (make, check, warn, clean) only
 * when the root differs from the last build's. Borrowed string, or NULL + exception. */
static const char *cache_dir(void)
{
    char root[PATH_MAX], kernels[PATH_MAX], problem[256] = "";
    const char *bad = root;
    int have_root = cache_root(root, sizeof root, problem, sizeof problem) == 0;
    if (dc.requested && !strcmp(dc.requested, root))
        return dc.dir;
    if (have_root) {
        if (make_dirs(root) < 0)
            snprintf(problem, sizeof problem, "cannot be made (%s)", strerror(errno));
        else
            check_dir(root, 022, problem, sizeof problem);
    }
    if (!problem[0]) {
        if (path_join(kernels, sizeof kernels, root, DC_SUBDIR) < 0)
            return NULL;
        bad = kernels;
        if (mkdir(kernels, 0700) < 0 && errno != EEXIST)
            snprintf(problem, sizeof problem, "cannot be made (%s)", strerror(errno));
        else
            check_dir(kernels, 077, problem, sizeof problem);
    }
    char *copy = strdup(root);
    if (!copy) {
        PyErr_NoMemory();
        return NULL;
    }
    if (problem[0]) {
        if (make_private() < 0 ||
            PyErr_WarnFormat(PyExc_UserWarning, 1,
                             "shapejit: kernel cache directory %s %s; compiled kernels go to a private "
                             "directory %s for this process instead (not kept across runs)",
                             bad, problem, dc.private_dir) < 0) {
            free(copy);
            return NULL;
        }
        snprintf(dc.dir, sizeof dc.dir, "%s", dc.private_dir);
        dc.is_private = 1;
    } else {
        snprintf(dc.dir, sizeof dc.dir, "%s", kernels);
        dc.is_private = 0;
        remove_stale(kernels);
    }
    free(dc.requested);
    dc.requested = copy;
    return dc.dir;
}

/* ---------------------------------------------------------------- size cap ---- */

/* The cap in bytes (0: none) from the knob or the environment variable; 0, or -1 with
 * ValueError naming the variable. */
static int max_bytes(long long *out)
{
    static const char var[] = "SHAPEJIT_KERNEL_CACHE_MAX_BYTES";
    const char *v = getenv(var);
    *out = sj_config.kernel_cache_max_bytes;
    if (!v || !*v)
        return 0;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    int shift = 0;
    switch (*end) {
    case 'k':
    case 'K':
        shift = 10;
        break;
    case 'm':
    case 'M':
        shift = 20;
        break;
    case 'g':
    case 'G':
        shift = 30;
        break;
    case 't':
    case 'T':
        shift = 40;
        break;
    }
    if (shift) {
        end++;
        if (*end == 'i' && end[1] == 'B')
            end += 2;
        else if (*end == 'B')
            end++;
    }
    if (end == v || *end || errno || x < 0 || (shift && x > (LLONG_MAX >> shift))) {
        PyErr_Format(PyExc_ValueError,
                     "shapejit: %s='%s': expected a size in bytes >= 0, optionally with a "
                     "K, M, G or T suffix (powers of 1024), e.g. 1G; 0 means no cap",
                     var, v);
        return -1;
    }
    *out = x << shift;
    return 0;
}

typedef struct {
    char key[DC_KEY_HEX];
    long long bytes;         /* .so + .c */
    struct timespec used;    /* the .so's mtime (else the .c's): its last use */
    int has_so;
} Entry;

/* 1 when `name` is <32 hex digits><ext>, the key into key. */
static int entry_name(const char *name, const char *ext, char key[DC_KEY_HEX])
{
    size_t n = strlen(name), e = strlen(ext);
    if (n != DC_KEY_HEX - 1 + e || strcmp(name + n - e, ext))
        return 0;
    for (int i = 0; i < DC_KEY_HEX - 1; i++)
        if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
            return 0;
    memcpy(key, name, DC_KEY_HEX - 1);
    key[DC_KEY_HEX - 1] = '\0';
    return 1;
}

static int by_key(const void *a, const void *b)
{
    return strcmp(((const Entry *)a)->key, ((const Entry *)b)->key);
}

static int by_use(const void *a, const void *b)
{
    const struct timespec *x = &((const Entry *)a)->used, *y = &((const Entry *)b)->used;
    return x->tv_sec != y->tv_sec     ? (x->tv_sec < y->tv_sec ? -1 : 1)
           : x->tv_nsec != y->tv_nsec ? (x->tv_nsec < y->tv_nsec ? -1 : 1)
                                      : 0;
}

/* Removes least recently used entries of dir until it holds at most 90% of the cap, never
 * `keep`. Best effort: file system errors skip the work, they never fail a build. -1 only
 * for a malformed cap variable (ValueError) or memory. */
static int evict(const char *dir, const char *keep)
{
    long long cap;
    if (max_bytes(&cap) < 0)
        return -1;
    if (cap <= 0)
        return 0;
    char lock[PATH_MAX];
    if (path_join(lock, sizeof lock, dir, ".lock") < 0) {
        PyErr_Clear();
        return 0;
    }
    int lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (lfd < 0)
        return 0;
    if (flock(lfd, LOCK_EX | LOCK_NB) < 0) {   /* another process is at it */
        close(lfd);
        return 0;
    }
    DIR *d = opendir(dir);
    Entry *es = NULL;
    size_t n = 0, cap_n = 0;
    long long total = 0;
    int rc = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        char key[DC_KEY_HEX];
        int so = entry_name(e->d_name, ".so", key);
        struct stat st;
        if ((!so && !entry_name(e->d_name, ".c", key)) || fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (n == cap_n) {
            Entry *grown = realloc(es, (cap_n = cap_n ? 2 * cap_n : 256) * sizeof *es);
            if (!grown) {
                PyErr_NoMemory();
                rc = -1;
                goto done;
            }
            es = grown;
        }
        Entry *x = &es[n++];
        memcpy(x->key, key, sizeof key);
        x->bytes = (long long)st.st_size;
        x->used = st.st_mtim;
        x->has_so = so;
        total += (long long)st.st_size;
    }
    if (total <= cap)
        goto done;
    /* one row per key: sizes summed, the .so's time */
    qsort(es, n, sizeof *es, by_key);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m && !strcmp(es[m - 1].key, es[i].key)) {
            es[m - 1].bytes += es[i].bytes;
            if (es[i].has_so) {
                es[m - 1].used = es[i].used;
                es[m - 1].has_so = 1;
            }
        } else {
            es[m++] = es[i];
        }
    }
    qsort(es, m, sizeof *es, by_use);
    long long target = cap - cap / 10, freed = 0;
    int removed = 0;
    for (size_t i = 0; i < m && total - freed > target; i++) {
        if (!strcmp(es[i].key, keep))
            continue;
        char name[DC_KEY_HEX + 3];
        snprintf(name, sizeof name, "%s.so", es[i].key);
        unlinkat(dirfd(d), name, 0);
        snprintf(name, sizeof name, "%s.c", es[i].key);
        unlinkat(dirfd(d), name, 0);
        freed += es[i].bytes;
        removed++;
    }
    dc_stats.evictions += removed;
    if (removed && sj_log_on(LOG_OUTPUT_CODE, SJ_INFO))
        sj_log(LOG_OUTPUT_CODE, SJ_INFO,
               "kernel cache %s held %lld bytes, over its cap of %lld "
               "(kernel_cache_max_bytes): removed the %d least recently used entries (%lld bytes)",
               dir, total, cap, removed, freed);
done:
    free(es);
    if (d)
        closedir(d);
    close(lfd);   /* releases the lock */
    return rc;
}

/* ------------------------------------------------------------------ entries ---- */

int dc_key(const char *src, size_t len, char hex[DC_KEY_HEX])
{
    const char *ident = cc_identity();
    XXH128_canonical_t c;
    /* the format and the identity with their NULs: separators */
    if (!ident || hash3(DC_FORMAT, sizeof DC_FORMAT, ident, strlen(ident) + 1, src, len, &c) < 0)
        return -1;
    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", c.digest[i]);
    return 0;
}

int dc_entry_path(const char *hex, char *buf, size_t size)
{
    int n = snprintf(buf, size, "%s/%s.so", dc.dir, hex);
    return n < 0 || (size_t)n >= size ? -1 : 0;
}

enum { ENTRY_OK, ENTRY_ABSENT, ENTRY_BAD, ENTRY_ERROR };

/* Opens and verifies the entry at `path` for `key`: ENTRY_OK with *fd set (read-only,
 * close-on-exec), ENTRY_ABSENT, ENTRY_BAD with `why` set, or ENTRY_ERROR with an
 * exception. */
static int open_verified(const char *path, const char *key, int *out, char *why, size_t wsize)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        if (errno == ENOENT)
            return ENTRY_ABSENT;
        if (errno == ELOOP) {
            snprintf(why, wsize, "it is a symbolic link");
            return ENTRY_BAD;
        }
        raise_os("cannot open", path);
        return ENTRY_ERROR;
    }
    struct stat st;
    unsigned char tr[DC_TRAILER];
    XXH128_canonical_t h, b;
    if (fstat(fd, &st) < 0) {
        raise_os("cannot stat", path);
        close(fd);
        return ENTRY_ERROR;
    }
    uint64_t size = (uint64_t)st.st_size;
    why[0] = '\0';
    if (!S_ISREG(st.st_mode))
        snprintf(why, wsize, "it is not a regular file");
    else if (st.st_uid != geteuid())
        snprintf(why, wsize, "it is owned by uid %ld", (long)st.st_uid);
    else if (size <= DC_TRAILER)
        snprintf(why, wsize, "it is truncated (%llu bytes)", (unsigned long long)size);
    else if (pread(fd, tr, DC_TRAILER, (off_t)(size - DC_TRAILER)) != DC_TRAILER)
        snprintf(why, wsize, "its trailer cannot be read (%s)", strerror(errno));
    else if (memcmp(tr, DC_MAGIC, 4) != 0)
        snprintf(why, wsize, "it has no shapejit trailer (truncated, or not written by shapejit)");
    else if (get_u64(tr + 8) != size - DC_TRAILER)
        snprintf(why, wsize, "its length is wrong (%llu bytes, the trailer says %llu)",
                 (unsigned long long)(size - DC_TRAILER), (unsigned long long)get_u64(tr + 8));
    else if (hash_fd(fd, size - DC_TRAILER, &h) < 0)
        snprintf(why, wsize, "it cannot be read (%s)", strerror(errno));
    else if (memcmp(h.digest, tr + 16, 16) != 0)
        snprintf(why, wsize, "its content does not match its hash (corrupt)");
    else if (binding(&h, key, &b) < 0) {
        close(fd);
        return ENTRY_ERROR;
    } else if (memcmp(b.digest, tr + 32, 16) != 0)
        snprintf(why, wsize,
                 "it was built for another entry or another compiler (a valid kernel file placed "
                 "under this entry's name)");
    if (why[0]) {
        close(fd);
        return ENTRY_BAD;
    }
    *out = fd;
    return ENTRY_OK;
}

/* Writes `len` bytes of source to <dir>/<hex>.c by temp + rename. */
static int write_source(const char *dir, const char *hex, const char *src, size_t len, char *path, size_t psize)
{
    char tmp[PATH_MAX];
    int n = snprintf(tmp, sizeof tmp, "%s/.tmp.%s.XXXXXX.c", dir, hex);
    int m = snprintf(path, psize, "%s/%s.c", dir, hex);
    if (n < 0 || (size_t)n >= sizeof tmp || m < 0 || (size_t)m >= psize) {
        PyErr_Format(PyExc_OSError, "shapejit: kernel cache path too long: %s", dir);
        return -1;
    }
    int fd = mkstemps(tmp, 2);
    if (fd < 0) {
        raise_os("cannot create", tmp);
        return -1;
    }
    if (write_all(fd, src, len, 0) < 0) {
        raise_os("cannot write", tmp);
        close(fd);
        unlink(tmp);
        return -1;
    }
    close(fd);
    if (rename(tmp, path) < 0) {
        raise_os("cannot rename a temp onto", path);
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* Appends the trailer (bound to `key`) to the compiler's output at `tmp`, makes it
 * read-only, fsyncs. */
static int seal(const char *tmp, const char *key)
{
    int fd = open(tmp, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        raise_os("cannot open the compiler's output", tmp);
        if (fd >= 0)
            close(fd);
        return -1;
    }
    uint64_t len = (uint64_t)st.st_size;
    unsigned char tr[DC_TRAILER];
    XXH128_canonical_t h, b;
    memcpy(tr, DC_MAGIC, 4);
    put_u32(tr + 4, DC_FORMAT_NUM);
    put_u64(tr + 8, len);
    if (hash_fd(fd, len, &h) < 0) {
        raise_os("cannot seal the compiler's output", tmp);
        close(fd);
        return -1;
    }
    if (binding(&h, key, &b) < 0) {
        close(fd);
        return -1;
    }
    memcpy(tr + 16, h.digest, 16);
    memcpy(tr + 32, b.digest, 16);
    int rc = write_all(fd, tr, DC_TRAILER, (off_t)len);
    if (rc == 0)
        rc = fchmod(fd, 0400);
    if (rc == 0)
        rc = fsync(fd);
    if (rc < 0)
        raise_os("cannot seal the compiler's output", tmp);
    close(fd);
    return rc;
}

/* Compiles src into a temp, seals it and renames it onto `path`. */
static int store(const char *dir, const char *hex, const char *path, const char *src, size_t len, const char *tag)
{
    char src_path[PATH_MAX], tmp[PATH_MAX];
    if (write_source(dir, hex, src, len, src_path, sizeof src_path) < 0)
        return -1;
    int n = snprintf(tmp, sizeof tmp, "%s/.tmp.%s.XXXXXX.so", dir, hex);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        PyErr_Format(PyExc_OSError, "shapejit: kernel cache path too long: %s", dir);
        return -1;
    }
    int fd = mkstemps(tmp, 3);
    if (fd < 0) {
        raise_os("cannot create", tmp);
        return -1;
    }
    close(fd);   /* the linker replaces the file; we reopen it by name after */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (cc_compile(src_path, tmp, tag) < 0 || seal(tmp, hex) < 0) {
        unlink(tmp);
        return -1;
    }
    if (rename(tmp, path) < 0) {
        raise_os("cannot rename a temp onto", path);
        unlink(tmp);
        return -1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    dc_stats.compiles++;
    if (sj_log_on(LOG_OUTPUT_CODE, SJ_INFO))
        sj_log(LOG_OUTPUT_CODE, SJ_INFO, "compiled %s in %d ms: %s (source %s)", tag,
               (int)((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000), path, src_path);
    return 0;
}

/* ------------------------------------------------------------ remote cache ---- */
/* With the knob kernel_remote_cache (the kernel_remote_* policies, shapejit/kernel_remote.py,
 * which checks its secret and the server): a local miss asks the server before compiling, and a compiled entry is
 * offered to it. Python does the network and the authentication; what it fetches is only
 * a payload, sealed and verified here like the compiler's own output. Neither ever fails
 * a build: Python warns about its problems, errors are cleared (interrupts kept aside). */

static PyObject *remote_call(Policy fn, const char *fmt, ...)
{
    PyObject *f = Py_XNewRef(policy_get(fn));   /* new: held over the call */
    PyObject *r = NULL;
    if (f) {
        va_list ap;
        va_start(ap, fmt);
        PyObject *args = Py_VaBuildValue(fmt, ap);
        va_end(ap);
        r = args ? PyObject_CallObject(f, args) : NULL;
        Py_XDECREF(args);
        Py_DECREF(f);
    }
    if (!r)
        sj_err_clear();
    return r;
}

/* 1 when `path` now holds a verified-to-be-sealed entry fetched from the server, else 0. */
static int remote_fetch(const char *dir, const char *hex, const char *path)
{
    const char *ident = cc_identity();
    if (!sj_config.kernel_remote_cache || !ident)
        return 0;
    char tmp[PATH_MAX];
    int n = snprintf(tmp, sizeof tmp, "%s/.tmp.%s.XXXXXX.so", dir, hex);
    if (n < 0 || (size_t)n >= sizeof tmp)
        return 0;
    int fd = mkstemps(tmp, 3);
    if (fd < 0)
        return 0;
    close(fd);
    PyObject *r = remote_call(POLICY_KERNEL_REMOTE_FETCH, "(sss)", hex, ident, tmp);
    int ok = r == Py_True;
    Py_XDECREF(r);
    if (ok && seal(tmp, hex) == 0 && rename(tmp, path) == 0)
        return 1;
    if (PyErr_Occurred())
        sj_err_clear();
    unlink(tmp);
    return 0;
}

/* Offers the entry just built at `path` (its payload: all but the trailer) to the server. */
static void remote_push(const char *hex, const char *path)
{
    const char *ident = cc_identity();
    struct stat st;
    if (!sj_config.kernel_remote_cache || !ident || stat(path, &st) < 0 || st.st_size <= DC_TRAILER)
        return;
    PyObject *r =
        remote_call(POLICY_KERNEL_REMOTE_PUSH, "(sssL)", hex, ident, path, (long long)(st.st_size - DC_TRAILER));
    Py_XDECREF(r);
}

int dc_entry_fd(const char *hex, const char *src, size_t len, const char *tag)
{
    const char *dir = cache_dir();
    char path[PATH_MAX], why[256];
    long long cap;
    if (!dir || max_bytes(&cap) < 0)   /* a malformed cap is an error at every build, hit or not */
        return -1;
    if (dc_entry_path(hex, path, sizeof path) < 0) {
        PyErr_Format(PyExc_OSError, "shapejit: kernel cache path too long: %s", dir);
        return -1;
    }
    if (sj_trace_on)   /* the generated code, hit or miss: what this graph runs */
    {
        PyObject *code = PyUnicode_DecodeUTF8(src, (Py_ssize_t)len, "replace");   /* new */
        if (code)
            SJ_TRACE("kernel_code", "(sNs)", tag, code, hex);   /* steals code */
        else
            sj_err_clear();
    }
    /* attempt 0 reads what is there; after a compile, the entry (ours, or an identical
     * one another process renamed over it) is verified again before use */
    for (int attempt = 0; attempt < 3; attempt++) {
        int fd = -1;
        int state = open_verified(path, hex, &fd, why, sizeof why);
        if (state == ENTRY_OK) {
            dc_stats.hits += attempt == 0;
            futimens(fd, NULL);   /* used now: the last an eviction takes */
            if (attempt > 0 && evict(dir, hex) < 0) {   /* the cache grew */
                close(fd);
                return -1;
            }
            return fd;
        }
        if (state == ENTRY_ERROR)
            return -1;
        if (state == ENTRY_BAD) {
            if (unlink(path) < 0 && errno != ENOENT) {
                raise_os("cannot remove the bad entry", path);
                return -1;
            }
            dc_stats.rebuilds++;
            sj_log(LOG_OUTPUT_CODE, SJ_WARNING, "kernel cache entry %s for %s was bad (%s): removed, rebuilding", path,
                   tag, why);
        } else if (attempt == 0) {
            dc_stats.misses++;
            if (remote_fetch(dir, hex, path))
                continue;   /* the next attempt verifies it like any entry */
        }
        if (attempt == 2)
            break;
        if (store(dir, hex, path, src, len, tag) < 0)
            return -1;
        remote_push(hex, path);
    }
    PyErr_Format(PyExc_OSError,
                 "shapejit: kernel cache entry %s is bad right after it was written (%s); "
                 "is the file system of %s faulty?",
                 path, why, dir);
    return -1;
}

PyObject *dc_info(void)
{
    PyObject *requested = dc.requested ? PyUnicode_DecodeFSDefault(dc.requested) : Py_NewRef(Py_None);   /* new */
    PyObject *dir = dc.requested ? PyUnicode_DecodeFSDefault(dc.dir) : Py_NewRef(Py_None);   /* new */
    PyObject *r = NULL;   /* new: the result */
    if (requested && dir)
        r = Py_BuildValue("{sOsOsOslslslslslsl}", "dir", dir, "requested", requested, "private",
                          dc.is_private ? Py_True : Py_False, "mem_hits", dc_stats.mem_hits, "hits", dc_stats.hits,
                          "misses", dc_stats.misses, "rebuilds", dc_stats.rebuilds, "compiles", dc_stats.compiles,
                          "evictions", dc_stats.evictions);
    Py_XDECREF(requested);
    Py_XDECREF(dir);
    return r;
}
