/* Building a plan's kernels: their C source in translation units, compiled (or found in
 * the disk cache) and loaded, each kernel's function looked up and its libffi call
 * prepared.
 *
 * Kernels are named after their text (lower_name_kernels): an unrolled loop's iterations
 * are one function, compiled once. What is compiled is bounded (the knobs cpu_unit_ops
 * and cpu_graph_ops, or $SHAPEJIT_CPU_UNIT_OPS / $SHAPEJIT_CPU_GRAPH_OPS): a kernel
 * counts its nodes plus LOWER_KERNEL_OPS (the cost of its loops); the distinct kernels
 * past the graph's budget run as eager steps (logged on output_code), the rest go into
 * units of at most cpu_unit_ops each, so the compiler never sees a file that takes it
 * minutes. A graph of several kernels is at least two units when this process may use
 * two CPUs: cold compile time is mostly the compiler's, and the units are independent.
 *
 * Units are compiled by the caller's thread (even units) and one helper thread (odd
 * units) at the same time. The helper holds the GIL except while its compiler runs
 * (cc_compile releases it), so all Python-level work (cache bookkeeping, errors, logs)
 * stays serialised; an exception it raises is handed back to the caller's thread. The
 * caller waits for it running signal handlers: an interrupt stops both.
 *
 * Memory: *source receives a new str (the units' sources, concatenated); CgLib handles
 * are immortal (native/native.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lower.h"
#include "../native/native.h"
#include "../native/native_int.h"
#include "../core/config.h"
#include "../core/log.h"
#include "../core/pyutil.h"

#define SPLIT_MIN_KERNELS 4

typedef struct {
    int32_t from, to;                 /* its kernels: uniq[from, to) */
    PyObject *src;                    /* strong: its C source */
    CgLib *lib;                       /* after its build */
} Unit;

/* The helper thread's share: the odd units. */
typedef struct {
    Unit *units;
    int32_t nunits;
    PyObject *et, *ev, *tb;           /* strong, or NULL: the exception of a failed build */
    int abort;                        /* set under the GIL: start no further build */
    int done;                         /* set (atomically) when the helper thread is through */
} Helper;

/* Builds units first, first + 2, ... 0, or -1 with an exception. Needs the GIL. */
static int build_units(Unit *units, int32_t nunits, int32_t first, const int *abort)
{
    for (int32_t i = first; i < nunits; i += 2) {
        if (abort && *abort)
            return 0;
        Py_ssize_t len;
        const char *c = PyUnicode_AsUTF8AndSize(units[i].src, &len);
        if (!c || !(units[i].lib = cg_build(c, (size_t)len, "graph")))
            return -1;
    }
    return 0;
}

static void *helper_main(void *arg)
{
    Helper *h = arg;
    PyGILState_STATE st = PyGILState_Ensure();
    if (build_units(h->units, h->nunits, 1, &h->abort) < 0)
        PyErr_Fetch(&h->et, &h->ev, &h->tb);
    __atomic_store_n(&h->done, 1, __ATOMIC_RELEASE);
    PyGILState_Release(st);
    return NULL;
}

/* ------------------------------------------------------------------ budget ---- */

/* `knob`, or the environment variable `var` when it is set. 0, or -1 with ValueError
 * naming the variable. */
static int env_ops(const char *var, long knob, long *out)
{
    const char *v = getenv(var);
    *out = knob;
    if (!v || !*v)
        return 0;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (end == v || *end || errno || x < 0) {
        PyErr_Format(PyExc_ValueError, "shapejit: %s='%s': expected a whole number of ops >= 0 (0: no limit)", var, v);
        return -1;
    }
    *out = x;
    return 0;
}

int lower_budget(long *unit_ops, long *graph_ops)
{
    return env_ops("SHAPEJIT_CPU_UNIT_OPS", sj_config.cpu_unit_ops, unit_ops) < 0 ||
                   env_ops("SHAPEJIT_CPU_GRAPH_OPS", sj_config.cpu_graph_ops, graph_ops) < 0
               ? -1
               : 0;
}

static int64_t cost(const Kernel *k)
{
    return (int64_t)k->nnodes + LOWER_KERNEL_OPS;
}

static int usable_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) < 0)
        return 1;
    return CPU_COUNT(&set);
}

/* Looks up kernel function `name` in lib into *fn and prepares its libffi call (the
 * kernels' signature: an int64 result of sizes, data pointers, strides and the dense flag).
 * 0, or -1 with an exception. */
static int bind_fn(CgLib *lib, const char *name, void **fn, CgFn *call)
{
    return (*fn = cg_sym(lib, name)) && cg_fn_prepare(call, *fn, "lpppl") == 0 ? 0 : -1;
}

/* Looks up kernels which[from, to) in lib. 0, or -1 with an exception. */
static int bind(LowerPlan *p, CgLib *lib, const int32_t *which, int32_t from, int32_t to)
{
    for (int32_t i = from; i < to; i++) {
        Kernel *k = &p->kernels[which[i]];
        if (bind_fn(lib, k->name, &k->fn, &k->call) < 0)
            return -1;
    }
    return 0;
}

/* The distinct kernels of p in plan order into uniq (their count); p's kernels whose name
 * an earlier one has point at it in dup_of (else -1). -1 with an exception. */
static int32_t distinct(LowerPlan *p, int32_t *uniq, int32_t *dup_of)
{
    PyObject *seen = PyDict_New();   /* new: name -> index of its first kernel */
    int32_t nu = 0;
    if (!seen)
        return -1;
    for (int32_t i = 0; i < p->nkernels; i++) {
        PyObject *name = PyUnicode_FromString(p->kernels[i].name);   /* new */
        PyObject *idx = name ? PyLong_FromLong(i) : NULL;             /* new */
        PyObject *had = idx ? PyDict_SetDefault(seen, name, idx) : NULL;   /* borrowed */
        if (had)
            dup_of[i] = had == idx ? -1 : (int32_t)PyLong_AsLong(had);
        Py_XDECREF(name);
        Py_XDECREF(idx);
        if (!had) {
            Py_DECREF(seen);
            return -1;
        }
        if (dup_of[i] < 0)
            uniq[nu++] = i;
    }
    Py_DECREF(seen);
    return nu;
}

/* Cuts the distinct kernels uniq[0..nu) into units of at most unit_ops each (a kernel
 * bigger than that alone), at least two when `split`. The unit count. */
static int32_t cut_units(const LowerPlan *p, const int32_t *uniq, int32_t nu, long unit_ops, int split, Unit *units)
{
    int32_t n = 0;
    int64_t acc = 0, total = 0;
    for (int32_t i = 0; i < nu; i++)
        total += cost(&p->kernels[uniq[i]]);
    for (int32_t i = 0; i < nu; i++) {
        int64_t c = cost(&p->kernels[uniq[i]]);
        if (n == 0 || (unit_ops > 0 && acc + c > unit_ops && acc > 0)) {
            units[n++] = (Unit){i, i, NULL, NULL};
            acc = 0;
        }
        units[n - 1].to = i + 1;
        acc += c;
    }
    if (n == 1 && split) {   /* two halves of about equal cost */
        int32_t mid = 0;
        for (acc = 0; mid < nu - 1 && 2 * (acc + cost(&p->kernels[uniq[mid]])) <= total; mid++)
            acc += cost(&p->kernels[uniq[mid]]);
        if (mid == 0)
            mid = 1;
        units[0].to = mid;
        units[n++] = (Unit){mid, nu, NULL, NULL};
    }
    return n;
}

/* Compiles and loads units[0..n): even ones here, odd ones on a helper thread. 0, or -1
 * with an exception (an interrupt stops both). */
static int build_all(Unit *units, int32_t n)
{
    Helper h = {units, n, NULL, NULL, NULL, 0, 0};
    pthread_t th;
    int started = n >= 2 && pthread_create(&th, NULL, helper_main, &h) == 0;
    int rc = build_units(units, n, 0, NULL);
    if (!started && rc == 0)
        rc = build_units(units, n, 1, NULL);   /* no thread: one after the other */
    if (!started)
        return rc;
    if (rc < 0 && !PyErr_ExceptionMatches(PyExc_Exception)) {   /* an interrupt: the helper stops too */
        h.abort = 1;
        cc_abort_runs();
    }
    /* wait for the helper, running signal handlers meanwhile: only this thread runs them,
     * and Ctrl-C must stop the helper's compile too */
    while (rc == 0 && !__atomic_load_n(&h.done, __ATOMIC_ACQUIRE)) {
        Py_BEGIN_ALLOW_THREADS nanosleep(&(struct timespec){0, 20000000}, NULL);
        Py_END_ALLOW_THREADS if (PyErr_CheckSignals() < 0)
        {
            rc = -1;
            h.abort = 1;
            cc_abort_runs();
        }
    }
    Py_BEGIN_ALLOW_THREADS pthread_join(th, NULL);
    Py_END_ALLOW_THREADS if (rc < 0)
    {
        Py_XDECREF(h.et);
        Py_XDECREF(h.ev);
        Py_XDECREF(h.tb);
        return -1;
    }
    if (h.et) {
        PyErr_Restore(h.et, h.ev, h.tb);
        return -1;
    }
    return 0;
}

int lower_build(Graph *g, LowerPlan *p, PyObject **source)
{
    *source = NULL;
    long unit_ops, graph_ops;
    for (int32_t i = 0; i < p->nkernels; i++)
        p->kernels[i].lean = sj_config.cpu_lean_reductions && p->kernels[i].flavour != KF_POINTWISE;
    if (lower_budget(&unit_ops, &graph_ops) < 0 || lower_name_kernels(g, p) < 0)
        return -1;
    int32_t n = p->nkernels;
    int32_t *uniq = PyMem_Calloc((size_t)n + 1, sizeof *uniq);
    int32_t *dup_of = PyMem_Calloc((size_t)n + 1, sizeof *dup_of);
    Unit *units = PyMem_Calloc((size_t)n + 2, sizeof *units);
    PyObject *srcs = NULL;   /* new: the units' sources */
    PyObject *attn = NULL;   /* new: the attention kernels' source, or NULL */
    int rc = -1;
    if (!uniq || !dup_of || !units) {
        PyErr_NoMemory();
        goto done;
    }
    int32_t nu = distinct(p, uniq, dup_of);
    if (nu < 0)
        goto done;
    /* the budget per graph: the distinct kernels past it stay eager */
    int32_t kept = nu;
    int64_t total = 0;
    for (int32_t i = 0; i < nu; i++) {
        if (graph_ops > 0 && total + cost(&p->kernels[uniq[i]]) > graph_ops && kept == nu)
            kept = i;
        total += cost(&p->kernels[uniq[i]]);
    }
    if (kept < nu) {
        for (int32_t i = kept; i < nu; i++)
            p->kernels[uniq[i]].over_budget = 1;
        for (int32_t i = 0; i < n; i++)
            if (dup_of[i] >= 0)
                p->kernels[i].over_budget = p->kernels[dup_of[i]].over_budget;
        sj_log(LOG_OUTPUT_CODE, SJ_WARNING,
               "a graph's generated C would be %lld ops in %d distinct kernels, past "
               "the budget of %ld ops per graph (cpu_graph_ops): its last %d distinct kernels run as eager steps",
               (long long)total, (int)nu, graph_ops, (int)(nu - kept));
    }
    int32_t nunits =
        kept ? cut_units(p, uniq, kept, unit_ops, kept >= SPLIT_MIN_KERNELS && usable_cpus() >= 2, units) : 0;
    /* the attention steps' row kernels go into the first unit (one of their own when the
     * plan has no kernels) */
    if (p->nattns && !(attn = step_attn_source(p)))
        goto done;
    if (attn && nunits == 0)
        units[nunits++] = (Unit){0, 0, NULL, NULL};
    if (!(srcs = PyList_New(nunits)))
        goto done;
    for (int32_t u = 0; u < nunits; u++) {
        if (!(units[u].src =
                  lower_emit_with(g, p, uniq + units[u].from, units[u].to - units[u].from, u == 0 ? attn : NULL)))
            goto done;
        PyList_SET_ITEM(srcs, u, Py_NewRef(units[u].src));
    }
    /* the compiler's identity is probed once, before two builds could race to probe it */
    if (nunits && (!cc_identity() || build_all(units, nunits) < 0))
        goto done;
    for (int32_t u = 0; u < nunits; u++)
        if (bind(p, units[u].lib, uniq, units[u].from, units[u].to) < 0)
            goto done;
    if (attn && step_attn_bind(p, units[0].lib) < 0)
        goto done;
    for (int32_t i = 0; i < n; i++)   /* a duplicate calls its name's function */
        if (dup_of[i] >= 0 && !p->kernels[i].over_budget) {
            p->kernels[i].fn = p->kernels[dup_of[i]].fn;
            p->kernels[i].call = p->kernels[dup_of[i]].call;
        }
    *source = sj_join("", srcs);   /* srcs stolen */
    srcs = NULL;
    rc = *source ? 0 : -1;
done:
    for (int32_t u = 0; units && u < n + 2; u++)
        Py_XDECREF(units[u].src);
    Py_XDECREF(srcs);
    Py_XDECREF(attn);
    PyMem_Free(uniq);
    PyMem_Free(dup_of);
    PyMem_Free(units);
    return rc;
}

int lower_build_full(Graph *g, LowerPlan *p, int32_t i)
{
    Kernel *k = &p->kernels[i];
    if (k->full)
        return 0;
    if (k->full_building || k->full_failed)
        return 1;
    Kernel c = *k;   /* the full variant, named after its own text */
    c.lean = 0;
    KernelFull *f = PyMem_Calloc(1, sizeof *f);
    if (!f) {
        PyErr_NoMemory();
        return -1;
    }
    PyObject *src = NULL;   /* new */
    CgLib *lib = NULL;
    k->full_building = 1;
    int ok = lower_name_kernel(g, &c) == 0 && (src = lower_emit_kernel(g, &c)) != NULL && cc_identity() != NULL;
    if (ok) {
        Py_ssize_t len;
        const char *text = PyUnicode_AsUTF8AndSize(src, &len);
        /* cg_build releases the GIL while the compiler runs: k may be called meanwhile */
        ok = text && (lib = cg_build(text, (size_t)len, "graph")) && bind_fn(lib, c.name, &f->fn, &f->call) == 0;
    }
    Py_XDECREF(src);
    k->full_building = 0;
    if (!ok) {
        PyMem_Free(f);
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            return -1;   /* an interrupt */
        /* never wrong without it: the kernel's nodes run eagerly when it would be needed */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        sj_log(LOG_OUTPUT_CODE, SJ_WARNING,
               "the full variant of kernel %s could not be built (%S): its strided calls run eagerly", k->name,
               ev ? ev : Py_None);
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
        k->full_failed = 1;
        return 1;
    }
    sj_log(LOG_OUTPUT_CODE, SJ_DEBUG, "built the full variant %s of lean kernel %s (rows not contiguous)", c.name,
           k->name);
    k->full = f;
    return 0;
}
