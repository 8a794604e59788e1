/* The C compiler driver: which compiler, with which flags, what it is (the probe that
 * enters the cache key), and running it.
 *
 * The compiler is $CC (split on blanks, no shell quoting: "ccache gcc" works) or `cc`,
 * found on PATH. It runs without a shell, with stdin from /dev/null and stdout+stderr
 * into a pipe whose text goes into the error. The compiler's environment is ours minus
 * LD_PRELOAD (an AddressSanitizer build of _C preloads libasan into the interpreter; it
 * must not reach gcc).
 *
 * The compiler's processes never outlive us. A compiler is a tree (cc, then cc1, as,
 * collect2, ld), and only its root is our child, so a parent-death signal on it alone
 * would leave cc1 running. We fork a small watcher first: it leads a process group of its
 * own, asks the kernel for SIGTERM when the thread that forked it dies
 * (PR_SET_PDEATHSIG), and forks the compiler into that group. On the signal (we were
 * killed, even by SIGKILL) it kills the whole group, itself included; otherwise it waits
 * for the compiler and exits as the compiler did. A timeout, or an interrupt, kills the
 * group from our side. Between fork and exec only async-signal-safe calls run (the
 * interpreter has threads); the executable is resolved on PATH before the fork. Where
 * fork itself fails (a large process under strict memory overcommit), the compiler is
 * spawned directly (posix_spawn, a vfork: no copy of our memory) in its own process
 * group: a timeout or an interrupt still kills it all, only our death does not.
 *
 * While the compiler runs the GIL is released, taken back every CC_SLICE_MS to run
 * Python's signal handlers: Ctrl-C (or any handler that raises) kills the compiler and
 * its exception propagates instead of the compile finishing unseen; other compiles in
 * flight (build.c's second unit) are stopped too. */
#define _GNU_SOURCE
#include "native_int.h"
#include "../core/config.h"
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

PyObject *cc_CompileError;

/* The compile flags, in order (docs/internals/backend_measurements.md, section 3): no -ffast-math (it
 * folds isnan); -ffp-contract=off so chains of + - * / round after every op as eager
 * does; -fno-trapping-math because no kernel reads the FP exception flags, and without
 * it GCC keeps compares and arithmetic that sit under a condition from running on every
 * lane, so on AVX2 (no mask registers) floor/ceil/trunc, isinf and many selects stay
 * scalar; it changes no value (no reassociation, NaN and signed zeros kept);
 * -fvisibility=hidden with CG_EXPORT marking entry points. */
static const char *const cc_flags[] = {
    "-O3",
    "-march=native",
    "-fno-math-errno",
    "-ffp-contract=off",
    "-fno-trapping-math",
    "-fPIC",
    "-shared",
    "-fopenmp",
    "-fvisibility=hidden",
    "-DCG_EXPORT=__attribute__((visibility(\"default\")))",
};
#define MARCH_FLAG 1   /* cc_flags[MARCH_FLAG] is native's; a cpu_target replaces it */
static const char *const cc_libs[] = {"-lmvec", "-lm"};   /* after the source */

#define CC_ARGS_MAX 32            /* words of $CC */
#define CC_OUTPUT_MAX (64 * 1024) /* compiler output kept for the error message */
#define CC_TIMEOUT_S 120.0        /* default; SHAPEJIT_CC_TIMEOUT overrides */
#define CC_SLICE_MS 50            /* the longest a pending Ctrl-C waits */

#define N_FLAGS (sizeof cc_flags / sizeof cc_flags[0])
#define N_LIBS (sizeof cc_libs / sizeof cc_libs[0])

/* ----------------------------------------------------------------- running ---- */

typedef struct {
    char *out;          /* owned: stdout+stderr, NUL-terminated, at most CC_OUTPUT_MAX */
    size_t outlen;
    int status;         /* waitpid status when exited */
    int exited;         /* the child was reaped */
    int timed_out;
    int interrupted;    /* a signal handler raised (its exception is set) or another run did */
    int err;            /* errno of a failed spawn/pipe/wait, else 0 */
    const char *what;   /* which call failed when err != 0 */
} RunResult;

/* Compiles in flight in this process and whether they must stop (an interrupt reached
 * one of them); both read and written under the GIL only. */
static int runs_in_flight, runs_abort;

void cc_abort_runs(void)
{
    runs_abort = 1;
}

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

/* The executable `name` names: itself when it has a '/', else the first executable
 * regular file of that name on $PATH (execvp's rule). 0, or -1 with errno (ENOENT). */
static int resolve(const char *name, char *buf, size_t size)
{
    if (strchr(name, '/')) {
        if ((size_t)snprintf(buf, size, "%s", name) >= size)
            return errno = ENAMETOOLONG, -1;
        return access(buf, X_OK);
    }
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin";
    for (const char *d = path;;) {
        const char *end = strchr(d, ':');
        size_t n = end ? (size_t)(end - d) : strlen(d);
        struct stat st;
        int w = snprintf(buf, size, "%.*s%s%s", (int)n, d, n ? "/" : "", name);
        if (w > 0 && (size_t)w < size && stat(buf, &st) == 0 && S_ISREG(st.st_mode) && access(buf, X_OK) == 0)
            return 0;
        if (!end)
            break;
        d = end + 1;
    }
    return errno = ENOENT, -1;
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

/* fork() without the atfork handlers where glibc has it: the child of a threaded
 * interpreter must run none of the libraries' code (a handler could wait on a lock another
 * thread held at the fork). */
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
#define bare_fork _Fork
#else
#define bare_fork fork
#endif

/* The watcher's SIGTERM (its parent thread died): the compiler's whole group goes. */
static void watcher_orphaned(int sig)
{
    (void)sig;
    kill(0, SIGKILL);
}

/* The forked watcher (see the top of the file); never returns. All signals are blocked
 * on entry. Async-signal-safe calls only. */
static void watcher(const char *exe, char *const argv[], char *const envp[], int out_w, pid_t parent)
{
    struct sigaction dfl = {.sa_handler = SIG_DFL}, term = {.sa_handler = watcher_orphaned};
    for (int s = 1; s < NSIG; s++)   /* the interpreter's handlers and ignores are not ours */
        if (s != SIGKILL && s != SIGSTOP)
            sigaction(s, &dfl, NULL);
    setpgid(0, 0);
    sigaction(SIGTERM, &term, NULL);
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || getppid() != parent)
        _exit(125);   /* the parent is already gone */
    sigset_t none, only_term;
    sigemptyset(&none);
    sigfillset(&only_term);
    sigdelset(&only_term, SIGTERM);
    pid_t cc = bare_fork();
    if (cc == 0) {
        int nul = open("/dev/null", O_RDONLY);
        if (nul < 0 || dup2(nul, 0) < 0 || dup2(out_w, 1) < 0 || dup2(out_w, 2) < 0)
            _exit(127);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execve(exe, argv, envp);
        static const char msg[] = "shapejit: exec of the C compiler failed\n";
        if (write(2, msg, sizeof msg - 1) < 0)
            _exit(127);
        _exit(127);
    }
    close(out_w);
    if (cc < 0)
        _exit(126);
    sigprocmask(SIG_SETMASK, &only_term, NULL);
    int st;
    while (waitpid(cc, &st, 0) < 0)
        if (errno != EINTR)
            _exit(126);
    if (WIFEXITED(st))
        _exit(WEXITSTATUS(st));
    int sig = WTERMSIG(st);   /* die of the same signal, so our caller reads it as the compiler's */
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    sigprocmask(SIG_UNBLOCK, &one, NULL);
    kill(getpid(), sig);
    _exit(128 + sig);
}

/* The compiler spawned without a watcher, in a process group of its own (when fork
 * fails). The pid, or -1 with errno. */
static pid_t spawn_direct(const char *exe, char *const argv[], char *const envp[], int out_w)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    sigset_t none, dfl;
    sigemptyset(&none);
    sigemptyset(&dfl);
    sigaddset(&dfl, SIGPIPE);   /* Python ignores these; ignored dispositions survive exec */
    sigaddset(&dfl, SIGXFSZ);
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, out_w, 1);
    posix_spawn_file_actions_adddup2(&fa, out_w, 2);
    posix_spawnattr_init(&at);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &dfl);
    pid_t pid;
    int rc = posix_spawn(&pid, exe, &fa, &at, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (rc != 0) {
        errno = rc;
        return -1;
    }
    return pid;
}

/* Kills the watcher's group and reaps the watcher. Needs no GIL. */
static void kill_group(pid_t pid, RunResult *r)
{
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
    while (waitpid(pid, &r->status, 0) < 0 && errno == EINTR)
        ;
}

/* 1 when the run must stop now: a Python signal handler raised (its exception stays
 * set) or another run was interrupted. Needs the GIL. */
static int must_stop(RunResult *r)
{
    if (!runs_abort && PyErr_CheckSignals() == 0)
        return 0;
    if (PyErr_Occurred())
        runs_abort = 1;
    else
        PyErr_SetString(PyExc_RuntimeError, "shapejit: compile stopped: another compile was interrupted");
    r->interrupted = 1;
    return 1;
}

/* Reads the watcher's output until EOF, then reaps it; kills its group at the deadline
 * or on an interrupt. Called with the GIL, which it releases while it waits. */
static void collect(pid_t pid, int fd, double deadline, RunResult *r)
{
    char buf[4096];
    int open_ = 1;
    while (!r->timed_out && !r->err && !r->interrupted) {
        double left = deadline - now_s();
        if (left <= 0) {
            r->timed_out = 1;
            break;
        }
        int slice = left * 1000 < CC_SLICE_MS ? (int)(left * 1000) + 1 : CC_SLICE_MS;
        int rc = 0;
        ssize_t n = 0;
        pid_t w = 0;
        int e = 0;
        Py_BEGIN_ALLOW_THREADS if (open_)
        {
            struct pollfd p = {.fd = fd, .events = POLLIN};
            rc = poll(&p, 1, slice);
            e = errno;
            if (rc > 0) {
                n = read(fd, buf, sizeof buf);
                e = errno;
            }
        }
        else
        {
            /* output closed: the compiler is exiting */
            w = waitpid(pid, &r->status, WNOHANG);
            e = errno;
            if (w == 0)
                nanosleep(&(struct timespec){0, 1000000}, NULL);
        }
        Py_END_ALLOW_THREADS if (open_)
        {
            if (rc < 0 && e != EINTR)
                r->err = e, r->what = "poll";
            else if (rc > 0 && n > 0)
                keep_output(r, buf, (size_t)n);
            else if (rc > 0 && (n == 0 || e != EINTR))
                open_ = 0;
        }
        else if (w == pid)
        {
            r->exited = 1;
            return;
        }
        else if (w < 0 && e != EINTR)
        {
            r->err = e, r->what = "waitpid";
        }
        if (must_stop(r))
            break;
    }
    Py_BEGIN_ALLOW_THREADS kill_group(pid, r);
    Py_END_ALLOW_THREADS
}

/* Runs argv[0] (searched on PATH) with argv under a watcher; fills `r` (r->out owned by
 * the caller, also on failure). Called with the GIL; an interrupt leaves its exception
 * set with r->interrupted. */
static void run(char *const argv[], double timeout_s, RunResult *r)
{
    memset(r, 0, sizeof *r);
    r->out = malloc(CC_OUTPUT_MAX + 1);
    char **env = child_env();
    char exe[PATH_MAX];
    if (!r->out || !env) {
        free(env);
        r->err = ENOMEM, r->what = "malloc";
        return;
    }
    r->out[0] = '\0';
    if (resolve(argv[0], exe, sizeof exe) < 0) {
        free(env);
        r->err = errno, r->what = "exec";
        return;
    }
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0) {
        free(env);
        r->err = errno, r->what = "pipe";
        return;
    }
    if (runs_in_flight++ == 0)
        runs_abort = 0;
    /* no signal handler of ours may run in the child before it resets them */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    pid_t parent = getpid();
    pid_t pid = bare_fork();
    if (pid == 0)
        watcher(exe, argv, env, pfd[1], parent);
    int fork_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (pid < 0 && (fork_errno == ENOMEM || fork_errno == EAGAIN)) {
        pid = spawn_direct(exe, argv, env, pfd[1]);
        fork_errno = errno;
    }
    free(env);
    close(pfd[1]);
    if (pid < 0) {
        close(pfd[0]);
        r->err = fork_errno, r->what = "fork";
    } else {
        setpgid(pid, pid);   /* also here: a kill of the group must not race the child's setpgid */
        collect(pid, pfd[0], now_s() + timeout_s, r);
        close(pfd[0]);
    }
    runs_in_flight--;
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
    out = PyUnicode_DecodeUTF8(r && r->out ? r->out : "", r && r->out ? (Py_ssize_t)r->outlen : 0, "replace"); /* new */
    src = source_path ? PyUnicode_DecodeFSDefault(source_path) : Py_NewRef(Py_None); /* new */
    if (!out || !src)
        goto done;
    msg = PyUnicode_FromFormat("%U%s%U", head, PyUnicode_GET_LENGTH(out) ? ":\n" : "", out);
    if (!msg)
        goto done;
    exc = PyObject_CallOneArg(cc_CompileError, msg); /* new */
    if (!exc || PyObject_SetAttrString(exc, "output", out) < 0 || PyObject_SetAttrString(exc, "source_path", src) < 0)
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
static void run_failed(const RunResult *r, const char *cc, const char *doing, const char *source_path, double timeout_s)
{
    if (r->interrupted)
        return; /* the interrupt's exception stands */
    if (r->err == ENOENT && r->what && !strcmp(r->what, "exec"))
        compile_error(r, source_path,
                      "shapejit: C compiler '%s' not found on PATH (set $CC to a C "
                      "compiler, e.g. gcc) while %s",
                      cc, doing);
    else if (r->err)
        compile_error(r, source_path, "shapejit: could not run the C compiler '%s' while %s: %s: %s", cc, doing,
                      r->what, strerror(r->err));
    else if (r->timed_out) {
        char limit[32];
        snprintf(limit, sizeof limit, "%g", timeout_s); /* PyUnicode_FromFormat has no %g */
        compile_error(r, source_path,
                      "shapejit: the C compiler '%s' timed out after %s s while %s "
                      "(killed; SHAPEJIT_CC_TIMEOUT sets the limit)%s%s",
                      cc, limit, doing, source_path ? "; source kept at " : "", source_path ? source_path : "");
    } else if (WIFSIGNALED(r->status))
        compile_error(r, source_path, "shapejit: the C compiler '%s' was killed by signal %d while %s%s%s", cc,
                      WTERMSIG(r->status), doing, source_path ? "; source kept at " : "",
                      source_path ? source_path : "");
    else
        compile_error(r, source_path, "shapejit: the C compiler '%s' failed (exit status %d) while %s%s%s", cc,
                      WEXITSTATUS(r->status), doing, source_path ? "; source kept at " : "",
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
        PyErr_Format(PyExc_ValueError,
                     "shapejit: SHAPEJIT_CC_TIMEOUT='%s': expected a positive number of "
                     "seconds (the C compiler's time limit; default %d)",
                     v, (int)CC_TIMEOUT_S);
        return -1;
    }
    *out = t;
    return 0;
}

/* --------------------------------------------------------------- the probe ---- */

/* One probed (compiler, target) pair. The table holds the pairs this process used;
 * when it is full the oldest goes (callers use an entry's text under the GIL before any
 * release, so no one holds a freed one). */
typedef struct {
    char *cc; /* owned: the $CC text */
    char *target; /* owned: the cpu_target text */
    char *march; /* owned: "-march=<target>" */
    char *ident; /* owned: cc_identity()'s text, or NULL when the target is refused */
    char *refusal; /* owned: why this CPU cannot run code built for the target, or NULL */
} Probe;

#define PROBES_MAX 8
static Probe probes[PROBES_MAX];
static int nprobes;

static const char *cc_name(void)
{
    const char *cc = getenv("CC");
    return cc && *cc ? cc : "cc";
}

/* The target kernels are built for: $SHAPEJIT_CPU_TARGET when set, else the knob
 * cpu_target. Borrowed text, or NULL with ValueError naming the variable. */
static const char *cc_target(void)
{
    const char *v = getenv("SHAPEJIT_CPU_TARGET");
    if (v && *v) {
        if (!sj_cpu_target_valid(v)) {
            PyErr_Format(PyExc_ValueError,
                         "shapejit: SHAPEJIT_CPU_TARGET='%.100s': expected native, x86-64-v2, "
                         "x86-64-v3, x86-64-v4 or a gcc -march name (1 to %d characters of a-z 0-9 . _ -)",
                         v, SJ_CPU_TARGET_MAX);
            return NULL;
        }
        return v;
    }
    return PyUnicode_AsUTF8(sj_config.cpu_target);
}

static void probe_free(Probe *p)
{
    free(p->cc);
    free(p->target);
    free(p->march);
    free(p->ident);
    free(p->refusal);
    memset(p, 0, sizeof *p);
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
        const char *hit =
            anywhere ? memmem(line, n, needle, strlen(needle)) : (strncmp(line, needle, strlen(needle)) ? NULL : line);
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

/* The runnability probe: built with the target's -march and run in a child. Its startup
 * and loop are compiled for the target (an instruction this CPU lacks is a SIGILL, in
 * the child), and for each instruction set the compiler enables it asks the CPU (and the
 * kernel's saved state, which __builtin_cpu_supports includes) whether it is there, so a
 * target whose extra instructions the tiny program happens not to use is still refused.
 * Exit 0: runnable; else the missing feature is printed. */
static const char runnable_src[] =
    "#include <stdio.h>\n"
    "#if defined(__x86_64__) || defined(__i386__)\n"
    "#include <cpuid.h>\n"
    "static int leaf7(int reg, int bit) {\n"
    "    unsigned a, b, c, d;\n"
    "    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;\n"
    "    unsigned v = reg == 1 ? b : reg == 2 ? c : d;\n"
    "    return (v >> bit) & 1;\n"
    "}\n"
    "#define NEED(m, name) if (!__builtin_cpu_supports(name)) { puts(\"missing \" name); return 3; }\n"
    "#define NEED7(reg, bit, name) if (!leaf7(reg, bit)) { puts(\"missing \" name); return 3; }\n"
    "#endif\n"
    "static volatile int n = 64;\n"
    "int main(void) {\n"
    "#if defined(__x86_64__) || defined(__i386__)\n"
    "    __builtin_cpu_init();\n"
    "#ifdef __SSE4_2__\n NEED(0, \"sse4.2\")\n#endif\n"
    "#ifdef __POPCNT__\n NEED(0, \"popcnt\")\n#endif\n"
    "#ifdef __AVX__\n NEED(0, \"avx\")\n#endif\n"
    "#ifdef __AVX2__\n NEED(0, \"avx2\")\n#endif\n"
    "#ifdef __FMA__\n NEED(0, \"fma\")\n#endif\n"
    "#ifdef __BMI__\n NEED(0, \"bmi\")\n#endif\n"
    "#ifdef __BMI2__\n NEED(0, \"bmi2\")\n#endif\n"
    "#ifdef __AVX512F__\n NEED(0, \"avx512f\")\n#endif\n"
    "#ifdef __AVX512CD__\n NEED(0, \"avx512cd\")\n#endif\n"
    "#ifdef __AVX512BW__\n NEED(0, \"avx512bw\")\n#endif\n"
    "#ifdef __AVX512DQ__\n NEED(0, \"avx512dq\")\n#endif\n"
    "#ifdef __AVX512VL__\n NEED(0, \"avx512vl\")\n#endif\n"
    "#ifdef __AVX512VNNI__\n NEED7(2, 11, \"avx512vnni\")\n#endif\n"
    "#ifdef __AVX512VBMI__\n NEED7(2, 1, \"avx512vbmi\")\n#endif\n"
    "#ifdef __AVX512VBMI2__\n NEED7(2, 6, \"avx512vbmi2\")\n#endif\n"
    "#ifdef __AVX512IFMA__\n NEED7(1, 21, \"avx512ifma\")\n#endif\n"
    "#ifdef __AVX512BITALG__\n NEED7(2, 12, \"avx512bitalg\")\n#endif\n"
    "#ifdef __AVX512VPOPCNTDQ__\n NEED7(2, 14, \"avx512vpopcntdq\")\n#endif\n"
    "#ifdef __AVX512FP16__\n NEED7(3, 23, \"avx512fp16\")\n#endif\n"
    "#ifdef __AMX_TILE__\n NEED7(3, 24, \"amx-tile\")\n#endif\n"
    "#endif\n"
    "    float a[64], b[64];\n"
    "    double s = 0;\n"
    "    for (int i = 0; i < n; i++) a[i] = (float)i * 0.5f;\n"
    "    for (int i = 0; i < n; i++) b[i] = a[i] * a[i] + a[i];\n"
    "    for (int i = 0; i < n; i++) s += b[i];\n"
    "    return s > 0 ? 0 : 4;\n"
    "}\n";

/* The "model name" of /proc/cpuinfo, into buf (or "this CPU"). */
static const char *cpu_model(char *buf, size_t size)
{
    snprintf(buf, size, "this CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return buf;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0)
            continue;
        const char *v = strchr(line, ':');
        if (v) {
            v++;
            while (*v == ' ' || *v == '\t')
                v++;
            size_t n = strcspn(v, "\n");
            if (n)
                snprintf(buf, size, "%.*s", (int)n, v);
        }
        break;
    }
    fclose(f);
    return buf;
}

/* Why output `r` means "refused": a short owned text, or NULL on memory. */
static char *refusal_text(const char *what, const RunResult *r)
{
    char head[160];
    if (r->timed_out)
        snprintf(head, sizeof head, "%s timed out", what);
    else if (WIFSIGNALED(r->status))
        snprintf(head, sizeof head, "%s died of signal %d%s", what, WTERMSIG(r->status),
                 WTERMSIG(r->status) == SIGILL ? " (SIGILL: an instruction this CPU lacks)" : "");
    else
        snprintf(head, sizeof head, "%s failed (exit status %d)", what, WEXITSTATUS(r->status));
    size_t n = r->out ? strnlen(r->out, 600) : 0;
    while (n && (r->out[n - 1] == '\n' || r->out[n - 1] == ' '))
        n--;
    size_t size = strlen(head) + n + 3;
    char *t = malloc(size);
    if (t)
        snprintf(t, size, "%s%s%.*s", head, n ? ": " : "", (int)n, n ? r->out : "");
    return t;
}

static int run_ok(const RunResult *r)
{
    return !r->err && !r->timed_out && r->exited && WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0;
}

/* Builds and runs the runnability probe for `march` with the compiler words cc_argv[0,
 * ncc). 0 (runnable), 1 (refused, *why an owned text) or -1 with an exception (an
 * interrupt, an OS error). */
static int check_runnable(char *cc_argv[], int ncc, const char *march, double limit, char **why)
{
    const char *tmp = getenv("TMPDIR");
    char dir[PATH_MAX], src[PATH_MAX + 16], exe[PATH_MAX + 16];
    if (!tmp || !*tmp)
        tmp = "/tmp";
    if ((size_t)snprintf(dir, sizeof dir, "%s/shapejit-target-XXXXXX", tmp) >= sizeof dir || !mkdtemp(dir)) {
        PyErr_SetFromErrnoWithFilename(PyExc_OSError, dir);
        return -1;
    }
    snprintf(src, sizeof src, "%s/probe.c", dir);
    snprintf(exe, sizeof exe, "%s/probe", dir);
    int rc = -1;
    RunResult r = {0};
    FILE *f = fopen(src, "w");
    if (!f || fwrite(runnable_src, 1, sizeof runnable_src - 1, f) != sizeof runnable_src - 1) {
        PyErr_SetFromErrnoWithFilename(PyExc_OSError, src);
        if (f)
            fclose(f);
        goto done;
    }
    if (fclose(f) != 0) {
        PyErr_SetFromErrnoWithFilename(PyExc_OSError, src);
        goto done;
    }
    char *argv[CC_ARGS_MAX + 8];
    int n = ncc;
    memcpy(argv, cc_argv, (size_t)ncc * sizeof *argv);
    argv[n++] = (char *)march;
    argv[n++] = "-O2";
    argv[n++] = "-o";
    argv[n++] = exe;
    argv[n++] = src;
    argv[n] = NULL;
    run(argv, limit, &r);
    if (r.interrupted)
        goto done;
    if (!run_ok(&r)) {
        if (r.err) {
            run_failed(&r, cc_argv[0], "building the target probe", NULL, limit);
            goto done;
        }
        rc = (*why = refusal_text("the compiler, building a probe for it,", &r)) ? 1 : (PyErr_NoMemory(), -1);
        goto done;
    }
    free(r.out);
    char *run_argv[] = {exe, NULL};
    run(run_argv, limit, &r);
    if (r.interrupted)
        goto done;
    if (r.err) { /* e.g. $TMPDIR mounted noexec: nothing built for the target can be vouched for */
        char text[256];
        snprintf(text, sizeof text, "the probe built for it could not be run (%s: %s; is %s mounted noexec?)",
                 r.what ? r.what : "?", strerror(r.err), tmp);
        rc = (*why = strdup(text)) ? 1 : (PyErr_NoMemory(), -1);
        goto done;
    }
    if (run_ok(&r))
        rc = 0;
    else
        rc = (*why = refusal_text("a probe built for it", &r)) ? 1 : (PyErr_NoMemory(), -1);
done:
    free(r.out);
    unlink(exe);
    unlink(src);
    rmdir(dir);
    return rc;
}

/* Raises CompileError for a refused probe entry. */
static void refuse(const Probe *p)
{
    char model[256];
    compile_error(NULL, NULL,
                  "shapejit: cpu_target '%s' cannot run on this CPU (%s), so its kernels are not "
                  "built (set shapejit.config.cpu_target or $SHAPEJIT_CPU_TARGET to native or a target this "
                  "CPU has): %s",
                  p->target, cpu_model(model, sizeof model), p->refusal);
}

/* The probe entry of the current compiler and target, probing them when new. NULL with
 * an exception; a refused target raises CompileError (its refusal is kept: the probe
 * is not run again). */
static Probe *current_probe(void)
{
    const char *cc = cc_name();
    const char *target = cc_target();
    if (!target)
        return NULL;
    for (int i = 0; i < nprobes; i++)
        if (!strcmp(probes[i].cc, cc) && !strcmp(probes[i].target, target)) {
            if (probes[i].refusal) {
                refuse(&probes[i]);
                return NULL;
            }
            return &probes[i];
        }
    char words[4096];
    char *argv[CC_ARGS_MAX + 16];
    int n = split_words(cc, words, sizeof words, argv, CC_ARGS_MAX);
    if (n < 0) {
        PyErr_Format(PyExc_ValueError, "shapejit: $CC='%s' is empty or too long for a compiler command", cc);
        return NULL;
    }
    int native = !strcmp(target, "native");
    Probe p = {0};
    size_t mlen = strlen(target) + 8;
    if (!(p.cc = strdup(cc)) || !(p.target = strdup(target)) || !(p.march = malloc(mlen))) {
        probe_free(&p);
        PyErr_NoMemory();
        return NULL;
    }
    snprintf(p.march, mlen, "-march=%s", target);
    double limit;
    if (read_timeout(&limit) < 0) {
        probe_free(&p);
        return NULL;
    }
    RunResult r = {0};
    char *t = NULL;
    size_t len = 0;
    int ncc = n;
    if (!native) {
        int ok = check_runnable(argv, ncc, p.march, limit, &p.refusal);
        if (ok < 0)
            goto error;
    }
    if (!p.refusal) {
        const char *extra[] = {p.march, "-E", "-v", "-x", "c", "/dev/null", "-o", "/dev/null", NULL};
        for (int i = 0; extra[i]; i++)
            argv[n++] = (char *)extra[i];
        argv[n] = NULL;
        run(argv, limit, &r);
        if (!run_ok(&r)) {
            if (native || r.err || r.interrupted) {
                char doing[128];
                snprintf(doing, sizeof doing, "probing it (%s -E -v)", p.march);
                run_failed(&r, cc, doing, NULL, limit);
                goto error;
            }
            if (!(p.refusal = refusal_text("the compiler, asked for it,", &r)))
                goto nomem;
        }
    }
    if (!p.refusal) {
        /* native's text is what it was before targets existed, so existing caches stay valid */
        if (append(&t, &len, "cc: ", 4) < 0 || append(&t, &len, cc, strlen(cc)) < 0 || append(&t, &len, "\n", 1) < 0 ||
            append_line(&t, &len, r.out, " version ", 1) < 0 || append_line(&t, &len, r.out, "Target: ", 0) < 0 ||
            append_native(&t, &len, r.out) < 0)
            goto nomem;
        for (size_t i = 0; i < N_FLAGS; i++) {
            const char *fl = i == MARCH_FLAG ? p.march : cc_flags[i];
            if (append(&t, &len, fl, strlen(fl)) < 0 || append(&t, &len, " ", 1) < 0)
                goto nomem;
        }
        for (size_t i = 0; i < N_LIBS; i++)
            if (append(&t, &len, cc_libs[i], strlen(cc_libs[i])) < 0 || append(&t, &len, " ", 1) < 0)
                goto nomem;
        p.ident = t;
        t = NULL;
    }
    free(r.out);
    if (nprobes == PROBES_MAX) { /* the oldest goes */
        probe_free(&probes[0]);
        memmove(probes, probes + 1, (PROBES_MAX - 1) * sizeof *probes);
        nprobes--;
    }
    probes[nprobes] = p;
    Probe *e = &probes[nprobes++];
    if (e->refusal) {
        refuse(e);
        return NULL;
    }
    return e;
nomem:
    PyErr_NoMemory();
error:
    free(t);
    free(r.out);
    probe_free(&p);
    return NULL;
}

const char *cc_identity(void)
{
    Probe *p = current_probe();
    return p ? p->ident : NULL;
}

/* ---------------------------------------------------------------- compiling ---- */

int cc_compile(const char *src_path, const char *out_path, const char *tag)
{
    double limit;
    Probe *p = current_probe();
    if (!p || read_timeout(&limit) < 0)
        return -1;
    const char *cc = p->cc;
    char words[4096];
    char *argv[CC_ARGS_MAX + N_FLAGS + N_LIBS + 4];
    int n = split_words(cc, words, sizeof words, argv, CC_ARGS_MAX);
    if (n < 0) {
        PyErr_Format(PyExc_ValueError, "shapejit: $CC='%s' is empty or too long for a compiler command", cc);
        return -1;
    }
    for (size_t i = 0; i < N_FLAGS; i++)
        argv[n++] = i == MARCH_FLAG ? p->march : (char *)cc_flags[i];
    argv[n++] = "-o";
    argv[n++] = (char *)out_path;
    argv[n++] = (char *)src_path;
    for (size_t i = 0; i < N_LIBS; i++)
        argv[n++] = (char *)cc_libs[i];
    argv[n] = NULL;
    RunResult r;
    run(argv, limit, &r);
    int ok = run_ok(&r);
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
        cc_CompileError =
            PyErr_NewExceptionWithDoc("shapejit._C.CompileError",
                                      "The C compiler failed on generated code. Attributes: output (the compiler's "
                                      "messages) and source_path (the C file kept for inspection, or None).",
                                      PyExc_RuntimeError, NULL); /* strong, kept for the process */
        if (!cc_CompileError)
            return -1;
    }
    return PyModule_AddObjectRef(m, "CompileError", cc_CompileError);
}
