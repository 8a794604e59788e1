/* The C compiler driver: which compiler, with which flags, what it is (the probe that
 * enters the cache key), and running it.
 *
 * The compiler is $CC (split on blanks, no shell quoting: "ccache gcc" works) or `cc`,
 * found on PATH. It runs through posix_spawnp, never a shell, in its own process group
 * (so a timeout kills cc1/as/ld too), with stdin from /dev/null and stdout+stderr into a
 * pipe whose text goes into the error. The GIL is released while it runs. The compiler's
 * environment is ours minus LD_PRELOAD (an AddressSanitizer build of _C preloads libasan
 * into the interpreter; it must not reach gcc). */
#include "codegen_int.h"
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

PyObject *cc_CompileError;

/* The compile flags, in order (docs/notes/issue6_plan.md section 3): no -ffast-math (it
 * folds isnan); -ffp-contract=off so chains of + - * / round after every op as eager
 * does; -fvisibility=hidden with CG_EXPORT marking entry points. */
static const char *const cc_flags[] = {
    "-O3", "-march=native", "-fno-math-errno", "-ffp-contract=off", "-fPIC", "-shared",
    "-fopenmp", "-fvisibility=hidden", "-DCG_EXPORT=__attribute__((visibility(\"default\")))",
};
static const char *const cc_libs[] = {"-lmvec", "-lm"};   /* after the source */

#define CC_ARGS_MAX 32            /* words of $CC */
#define CC_OUTPUT_MAX (64 * 1024) /* compiler output kept for the error message */
#define CC_TIMEOUT_S 120.0        /* default; SHAPEJIT_CC_TIMEOUT overrides */

#define N_FLAGS (sizeof cc_flags / sizeof cc_flags[0])
#define N_LIBS (sizeof cc_libs / sizeof cc_libs[0])

/* ----------------------------------------------------------------- running ---- */

typedef struct {
    char *out;          /* owned: stdout+stderr, NUL-terminated, at most CC_OUTPUT_MAX */
    size_t outlen;
    int status;         /* waitpid status when exited */
    int exited;         /* the child was reaped */
    int timed_out;
    int err;            /* errno of a failed spawn/pipe/wait, else 0 */
    const char *what;   /* which call failed when err != 0 */
} RunResult;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Our environment without LD_PRELOAD; owned array of borrowed strings. */
static char **child_env(void)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = malloc((n + 1) * sizeof *env);
    if (!env)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0)
            env[k++] = environ[i];
    env[k] = NULL;
    return env;
}

static void keep_output(RunResult *r, const char *buf, size_t n)
{
    if (r->outlen >= CC_OUTPUT_MAX)
        return;
    if (n > CC_OUTPUT_MAX - r->outlen)
        n = CC_OUTPUT_MAX - r->outlen;
    memcpy(r->out + r->outlen, buf, n);
    r->outlen += n;
    r->out[r->outlen] = '\0';
}

/* Reads the child's output until EOF or the deadline, then reaps it (killing its process
 * group at the deadline). Needs no GIL. */
static void collect(pid_t pid, int fd, double deadline, RunResult *r)
{
    char buf[4096];
    int open_ = 1;
    while (open_) {
        double left = deadline - now_s();
        if (left <= 0) {
            r->timed_out = 1;
            break;
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int rc = poll(&p, 1, (int)(left * 1000) + 1);
        if (rc < 0 && errno != EINTR) {
            r->err = errno, r->what = "poll";
            break;
        }
        if (rc <= 0)
            continue;
        ssize_t n = read(fd, buf, sizeof buf);
        if (n > 0)
            keep_output(r, buf, (size_t)n);
        else if (n == 0 || errno != EINTR)
            open_ = 0;
    }
    /* output closed: the child is exiting; still bounded by the deadline */
    while (!r->timed_out && !r->err) {
        pid_t w = waitpid(pid, &r->status, WNOHANG);
        if (w == pid) {
            r->exited = 1;
            return;
        }
        if (w < 0 && errno != EINTR) {
            r->err = errno, r->what = "waitpid";
            return;
        }
        if (now_s() >= deadline)
            r->timed_out = 1;
        else
            nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
    while (waitpid(pid, &r->status, 0) < 0 && errno == EINTR)
        ;
}

/* Runs argv[0] (searched on PATH) with argv; fills `r` (r->out owned by the caller, also
 * on failure). Needs no GIL. */
static void run(char *const argv[], double timeout_s, RunResult *r)
{
    memset(r, 0, sizeof *r);
    r->out = malloc(CC_OUTPUT_MAX + 1);
    char **env = child_env();
    if (!r->out || !env) {
        free(env);
        r->err = ENOMEM, r->what = "malloc";
        return;
    }
    r->out[0] = '\0';
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0) {
        free(env);
        r->err = errno, r->what = "pipe";
        return;
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    sigset_t none, dfl;
    sigemptyset(&none);
    sigemptyset(&dfl);
    sigaddset(&dfl, SIGPIPE);   /* Python ignores these; ignored dispositions survive exec */
    sigaddset(&dfl, SIGXFSZ);
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 2);
    posix_spawnattr_init(&at);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                  POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &dfl);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, &at, argv, env);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    free(env);
    close(pfd[1]);
    if (rc != 0) {
        close(pfd[0]);
        r->err = rc, r->what = "posix_spawnp";
        return;
    }
    collect(pid, pfd[0], now_s() + timeout_s, r);
    close(pfd[0]);
}

/* ----------------------------------------------------------------- errors ---- */

/* Raises CompileError(message) with attributes `output` (the compiler's text, str) and
 * `source_path` (str or None). `fmt` is PyUnicode_FromFormat syntax. */
static void compile_error(const RunResult *r, const char *source_path, const char *fmt, ...)
{
    PyObject *msg = NULL, *out = NULL, *src = NULL, *exc = NULL;
    va_list ap;
    va_start(ap, fmt);
    PyObject *head = PyUnicode_FromFormatV(fmt, ap);   /* new */
    va_end(ap);
    if (!head)
        return;
    out = PyUnicode_DecodeUTF8(r && r->out ? r->out : "", r && r->out ? (Py_ssize_t)r->outlen : 0,
                               "replace");   /* new */
    src = source_path ? PyUnicode_DecodeFSDefault(source_path) : Py_NewRef(Py_None);  /* new */
    if (!out || !src)
        goto done;
    msg = PyUnicode_FromFormat("%U%s%U", head, PyUnicode_GET_LENGTH(out) ? ":\n" : "", out);
    if (!msg)
        goto done;
    exc = PyObject_CallOneArg(cc_CompileError, msg);   /* new */
    if (!exc || PyObject_SetAttrString(exc, "output", out) < 0 ||
        PyObject_SetAttrString(exc, "source_path", src) < 0)
        goto done;
    PyErr_SetObject(cc_CompileError, exc);
done:
    Py_XDECREF(exc);
    Py_XDECREF(msg);
    Py_XDECREF(src);
    Py_XDECREF(out);
    Py_DECREF(head);
}

/* Raises the error for a run that did not exit 0; `doing` says what was run. */
static void run_failed(const RunResult *r, const char *cc, const char *doing, const char *source_path,
                       double timeout_s)
{
    if (r->err == ENOENT && r->what && !strcmp(r->what, "posix_spawnp"))
        compile_error(r, source_path, "shapejit: C compiler '%s' not found on PATH (set $CC to a C "
                      "compiler, e.g. gcc) while %s", cc, doing);
    else if (r->err)
        compile_error(r, source_path, "shapejit: could not run the C compiler '%s' while %s: %s: %s",
                      cc, doing, r->what, strerror(r->err));
    else if (r->timed_out) {
        char limit[32];
        snprintf(limit, sizeof limit, "%g", timeout_s);   /* PyUnicode_FromFormat has no %g */
        compile_error(r, source_path, "shapejit: the C compiler '%s' timed out after %s s while %s "
                      "(killed; SHAPEJIT_CC_TIMEOUT sets the limit)%s%s", cc, limit, doing,
                      source_path ? "; source kept at " : "", source_path ? source_path : "");
    }
    else if (WIFSIGNALED(r->status))
        compile_error(r, source_path, "shapejit: the C compiler '%s' was killed by signal %d while %s%s%s",
                      cc, WTERMSIG(r->status), doing, source_path ? "; source kept at " : "",
                      source_path ? source_path : "");
    else
        compile_error(r, source_path, "shapejit: the C compiler '%s' failed (exit status %d) while %s%s%s",
                      cc, WEXITSTATUS(r->status), doing, source_path ? "; source kept at " : "",
                      source_path ? source_path : "");
}

static int read_timeout(double *out)
{
    const char *v = getenv("SHAPEJIT_CC_TIMEOUT");
    *out = CC_TIMEOUT_S;
    if (!v || !*v)
        return 0;
    char *end;
    double t = strtod(v, &end);
    if (*end || !(t > 0) || t > 1e6) {
        PyErr_Format(PyExc_ValueError, "shapejit: SHAPEJIT_CC_TIMEOUT='%s': expected a positive number of "
                     "seconds (the C compiler's time limit; default %d)", v, (int)CC_TIMEOUT_S);
        return -1;
    }
    *out = t;
    return 0;
}

/* --------------------------------------------------------------- the probe ---- */

static struct {
    char *cc;        /* owned: the $CC text this probe is for */
    char *ident;     /* owned: cc_identity()'s text */
} probe;

static const char *cc_name(void)
{
    const char *cc = getenv("CC");
    return cc && *cc ? cc : "cc";
}

/* Splits `text` (copied into `buf`) on blanks into argv; the count, or -1 when empty or
 * too long. */
static int split_words(const char *text, char *buf, size_t size, char *argv[], int max)
{
    if (strlen(text) >= size)
        return -1;
    strcpy(buf, text);
    int n = 0;
    for (char *save = NULL, *w = strtok_r(buf, " \t", &save); w; w = strtok_r(NULL, " \t", &save)) {
        if (n >= max)
            return -1;
        argv[n++] = w;
    }
    return n ? n : -1;
}

/* Appends `s` to the growing text (*t, *len); 0 or -1 on memory. */
static int append(char **t, size_t *len, const char *s, size_t n)
{
    char *grown = realloc(*t, *len + n + 1);
    if (!grown)
        return -1;
    memcpy(grown + *len, s, n);
    *len += n;
    grown[*len] = '\0';
    *t = grown;
    return 0;
}

/* The line of `text` that starts with (or, `anywhere`, contains) `needle`, appended. */
static int append_line(char **t, size_t *len, const char *text, const char *needle, int anywhere)
{
    for (const char *line = text; *line;) {
        const char *end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line) : strlen(line);
        const char *hit = anywhere ? memmem(line, n, needle, strlen(needle))
                                   : (strncmp(line, needle, strlen(needle)) ? NULL : line);
        if (hit)
            return append(t, len, line, n) < 0 || append(t, len, "\n", 1) < 0 ? -1 : 0;
        line = end ? end + 1 : line + n;
    }
    return 0;
}

/* What -march=native means on this machine: gcc's cc1 line shows the chosen -march,
 * -mtune, every -m feature and the cache --params; clang's -cc1 line shows -target-cpu
 * and -target-feature. Keeps those words (not paths or file names, which vary). Without
 * such a line (another compiler), the whole -v text stands in. */
static int append_native(char **t, size_t *len, const char *text)
{
    const char *line = strstr(text, " -march=");
    if (!line)
        line = strstr(text, " -target-cpu ");
    if (!line)
        return append(t, len, text, strlen(text));
    while (line > text && line[-1] != '\n')
        line--;
    const char *end = strchr(line, '\n');
    size_t n = end ? (size_t)(end - line) : strlen(line);
    int keep_next = 0;
    for (size_t i = 0; i < n;) {
        while (i < n && line[i] == ' ')
            i++;
        size_t j = i;
        while (j < n && line[j] != ' ')
            j++;
        const char *w = line + i;
        size_t wn = j - i;
        int takes_value = (wn == 7 && !memcmp(w, "--param", 7)) || (wn == 11 && !memcmp(w, "-target-cpu", 11)) ||
                          (wn == 15 && !memcmp(w, "-target-feature", 15));
        if (wn && (keep_next || takes_value || (wn > 2 && w[0] == '-' && w[1] == 'm'))) {
            if (append(t, len, w, wn) < 0 || append(t, len, " ", 1) < 0)
                return -1;
        }
        keep_next = takes_value;
        i = j;
    }
    return append(t, len, "\n", 1);
}

const char *cc_identity(void)
{
    const char *cc = cc_name();
    if (probe.ident && !strcmp(probe.cc, cc))
        return probe.ident;
    char words[4096];
    char *argv[CC_ARGS_MAX + 16];
    int n = split_words(cc, words, sizeof words, argv, CC_ARGS_MAX);
    if (n < 0) {
        PyErr_Format(PyExc_ValueError, "shapejit: $CC='%s' is empty or too long for a compiler command", cc);
        return NULL;
    }
    const char *extra[] = {"-march=native", "-E", "-v", "-x", "c", "/dev/null", "-o", "/dev/null", NULL};
    for (int i = 0; extra[i]; i++)
        argv[n++] = (char *)extra[i];
    argv[n] = NULL;
    double limit;
    if (read_timeout(&limit) < 0)
        return NULL;
    RunResult r;
    Py_BEGIN_ALLOW_THREADS
    run(argv, limit, &r);
    Py_END_ALLOW_THREADS
    char *t = NULL;
    size_t len = 0;
    if (r.err || r.timed_out || !r.exited || !WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0) {
        run_failed(&r, cc, "probing it (-march=native -E -v)", NULL, limit);
        goto error;
    }
    if (append(&t, &len, "cc: ", 4) < 0 || append(&t, &len, cc, strlen(cc)) < 0 ||
        append(&t, &len, "\n", 1) < 0 || append_line(&t, &len, r.out, " version ", 1) < 0 ||
        append_line(&t, &len, r.out, "Target: ", 0) < 0 || append_native(&t, &len, r.out) < 0)
        goto nomem;
    for (size_t i = 0; i < N_FLAGS; i++)
        if (append(&t, &len, cc_flags[i], strlen(cc_flags[i])) < 0 || append(&t, &len, " ", 1) < 0)
            goto nomem;
    for (size_t i = 0; i < N_LIBS; i++)
        if (append(&t, &len, cc_libs[i], strlen(cc_libs[i])) < 0 || append(&t, &len, " ", 1) < 0)
            goto nomem;
    char *cc_copy = strdup(cc);
    if (!cc_copy)
        goto nomem;
    free(probe.cc);
    free(probe.ident);   /* callers use the text under the GIL before any release: no one holds the old */
    probe.cc = cc_copy;
    probe.ident = t;
    free(r.out);
    return probe.ident;
nomem:
    PyErr_NoMemory();
error:
    free(t);
    free(r.out);
    return NULL;
}

/* ---------------------------------------------------------------- compiling ---- */

int cc_compile(const char *src_path, const char *out_path, const char *tag)
{
    double limit;
    if (!cc_identity() || read_timeout(&limit) < 0)
        return -1;
    const char *cc = probe.cc;
    char words[4096];
    char *argv[CC_ARGS_MAX + N_FLAGS + N_LIBS + 4];
    int n = split_words(cc, words, sizeof words, argv, CC_ARGS_MAX);
    if (n < 0) {
        PyErr_Format(PyExc_ValueError, "shapejit: $CC='%s' is empty or too long for a compiler command", cc);
        return -1;
    }
    for (size_t i = 0; i < N_FLAGS; i++)
        argv[n++] = (char *)cc_flags[i];
    argv[n++] = "-o";
    argv[n++] = (char *)out_path;
    argv[n++] = (char *)src_path;
    for (size_t i = 0; i < N_LIBS; i++)
        argv[n++] = (char *)cc_libs[i];
    argv[n] = NULL;
    RunResult r;
    Py_BEGIN_ALLOW_THREADS
    run(argv, limit, &r);
    Py_END_ALLOW_THREADS
    int ok = !r.err && !r.timed_out && r.exited && WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0;
    if (!ok) {
        char doing[256];
        snprintf(doing, sizeof doing, "compiling %s", tag);
        run_failed(&r, cc, doing, src_path, limit);
    }
    free(r.out);
    return ok ? 0 : -1;
}

int cc_init_module(PyObject *m)
{
    if (!cc_CompileError) {
        cc_CompileError = PyErr_NewExceptionWithDoc(
            "shapejit._C.CompileError",
            "The C compiler failed on generated code. Attributes: output (the compiler's "
            "messages) and source_path (the C file kept for inspection, or None).",
            PyExc_RuntimeError, NULL);   /* strong, kept for the process */
        if (!cc_CompileError)
            return -1;
    }
    return PyModule_AddObjectRef(m, "CompileError", cc_CompileError);
}
