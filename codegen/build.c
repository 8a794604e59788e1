/* Building a plan's kernels: their C source in one or two translation units, compiled
 * (or found in the disk cache) and loaded, each kernel's function looked up and its libffi
 * call prepared.
 *
 * A graph of many kernels is split in two units of about equal node counts, compiled at
 * the same time by two compiler processes when the machine has two CPUs for this process
 * or more: cold compile time is mostly the compiler's, and a model's kernels are
 * independent. The second unit is built on a helper thread that holds the GIL except
 * while the compiler runs (cc_compile releases it), so all Python-level work (cache
 * bookkeeping, errors, logs) stays serialised; an exception it raises is handed back to
 * the caller's thread.
 *
 * Memory: *source receives a new str (the units' sources, concatenated); CgLib handles
 * are immortal (codegen.h). */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#include "lower.h"
#include "codegen.h"
#include "codegen_int.h"

#define SPLIT_MIN_KERNELS 4

typedef struct {
    const char *src;
    size_t len;
    CgLib *lib;                       /* NULL: failed, with the exception in et/ev/tb */
    PyObject *et, *ev, *tb;           /* strong, or NULL */
    int abort;                        /* set under the GIL: do not start (an interrupt came) */
    int done;                         /* set (atomically) when the helper thread is through */
} Unit;

static void *build_unit(void *arg)
{
    Unit *u = arg;
    PyGILState_STATE st = PyGILState_Ensure();
    u->lib = u->abort ? NULL : cg_build(u->src, u->len, "graph");
    if (!u->lib && PyErr_Occurred())
        PyErr_Fetch(&u->et, &u->ev, &u->tb);
    __atomic_store_n(&u->done, 1, __ATOMIC_RELEASE);
    PyGILState_Release(st);
    return NULL;
}

static int usable_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) < 0)
        return 1;
    return CPU_COUNT(&set);
}

/* Looks up kernels [from, to) in lib. 0, or -1 with an exception. */
static int bind(LowerPlan *p, CgLib *lib, int32_t from, int32_t to)
{
    for (int32_t i = from; i < to; i++) {
        Kernel *k = &p->kernels[i];
        if (!(k->fn = cg_sym(lib, k->name)) || cg_fn_prepare(&k->call, k->fn, "lpppl") < 0)
            return -1;
    }
    return 0;
}

int lower_build(Graph *g, LowerPlan *p, PyObject **source)
{
    *source = NULL;
    int32_t n = p->nkernels, mid = n;
    if (n >= SPLIT_MIN_KERNELS && usable_cpus() >= 2) {
        int64_t total = 0, acc = 0;
        for (int32_t i = 0; i < n; i++)
            total += p->kernels[i].nnodes;
        for (mid = 0; mid < n - 1 && 2 * (acc + p->kernels[mid].nnodes) <= total; mid++)
            acc += p->kernels[mid].nnodes;
        if (mid == 0)
            mid = 1;
    }
    PyObject *s1 = lower_emit(g, p, 0, mid);              /* new */
    PyObject *s2 = mid < n ? lower_emit(g, p, mid, n) : NULL;   /* new */
    if (!s1 || (mid < n && !s2)) {
        Py_XDECREF(s1);
        Py_XDECREF(s2);
        return -1;
    }
    Py_ssize_t l1, l2 = 0;
    const char *c1 = PyUnicode_AsUTF8AndSize(s1, &l1);
    const char *c2 = s2 ? PyUnicode_AsUTF8AndSize(s2, &l2) : NULL;
    int rc = -1;
    if (!c1 || (s2 && !c2))
        goto done;
    Unit second = {c2, (size_t)l2, NULL, NULL, NULL, NULL, 0, 0};
    /* the compiler's identity is probed once, before two builds could race to probe it */
    if (!cc_identity())
        goto done;
    pthread_t th;
    int started = s2 && pthread_create(&th, NULL, build_unit, &second) == 0;
    CgLib *first = cg_build(c1, (size_t)l1, "graph");
    if (!first && !PyErr_ExceptionMatches(PyExc_Exception)) {   /* an interrupt: the helper stops too */
        second.abort = 1;
        cc_abort_runs();
    }
    if (s2 && !started && first)
        build_unit(&second);   /* no thread: one after the other */
    else if (started) {
        /* wait for the helper, running signal handlers meanwhile: only this thread runs
         * them, and Ctrl-C must stop the helper's compile too */
        while (first && !__atomic_load_n(&second.done, __ATOMIC_ACQUIRE)) {
            Py_BEGIN_ALLOW_THREADS
            nanosleep(&(struct timespec){0, 20000000}, NULL);
            Py_END_ALLOW_THREADS
            if (PyErr_CheckSignals() < 0) {
                first = NULL;
                second.abort = 1;
                cc_abort_runs();
            }
        }
        Py_BEGIN_ALLOW_THREADS
        pthread_join(th, NULL);
        Py_END_ALLOW_THREADS
    }
    if (!first) {
        Py_XDECREF(second.et);
        Py_XDECREF(second.ev);
        Py_XDECREF(second.tb);
        goto done;
    }
    if (s2 && !second.lib) {
        if (second.et)
            PyErr_Restore(second.et, second.ev, second.tb);
        else
            PyErr_SetString(PyExc_RuntimeError, "shapejit: the second kernel unit was not built (interpreter exiting?)");
        goto done;
    }
    if (bind(p, first, 0, mid) < 0 || (s2 && bind(p, second.lib, mid, n) < 0))
        goto done;
    *source = s2 ? PyUnicode_Concat(s1, s2) : Py_NewRef(s1);
    rc = *source ? 0 : -1;
done:
    Py_DECREF(s1);
    Py_XDECREF(s2);
    return rc;
}
