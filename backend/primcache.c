/* The oneDNN primitive cache: primitives by the XXH3-64 hash of their packed key (an
 * MmKey: op class, dtype, rank, layout permutation of each operand, post-op list, thread
 * count; or a CvKey: op class, concrete sizes, parameters, post-ops, thread count), the
 * full key compared on a hit. Matmul keys hold no sizes (every dim is a runtime dim), so
 * a sweep over sizes creates nothing after the first call; convolution, pooling and batch
 * norm keys hold every size, so each new shape creates its primitives once (never a new
 * graph). The first byte of both keys is the op class, so the two kinds never compare
 * equal.
 *
 * Bounded: at most PC_CAPACITY entries; a miss when full evicts the least recently used
 * entry that no caller has pinned (a pinned primitive may be running with the GIL
 * released). A key oneDNN refused is kept as an entry without a primitive, so it is not
 * retried on every call.
 *
 * Memory: entries are PyMem, owned by the cache for the process lifetime (or until
 * evicted); callers hold pins, never ownership. Needs the GIL. */
#include <Python.h>
#include <string.h>
#include <xxhash.h>

#include "dnnl_api.h"
#include "../core/log.h"

#define PC_CAPACITY 1024
#define PC_BUCKETS 256   /* a power of two */

typedef union {
    MmKey mm;
    CvKey cv;
} AnyKey;

struct PcEntry {
    AnyKey key;          /* the key's bytes, zero past len */
    size_t len;
    uint64_t hash;
    void *prim;          /* owned: a dnnl primitive (matmul) or a dnnl_api_conv_create
                            bundle (conv); NULL: oneDNN refused the key */
    uint64_t last_use;   /* tick of the last get */
    int pins;            /* callers between get and release */
    PcEntry *next;       /* bucket chain */
};

static PcEntry *buckets[PC_BUCKETS];
static uint64_t tick;
static PcStats stats = {.capacity = PC_CAPACITY};

static int is_conv(const PcEntry *e)
{
    return e->key.mm.op_class != MM_CLASS_MATMUL;
}

static void evict_one(void)
{
    PcEntry **victim = NULL;
    for (int b = 0; b < PC_BUCKETS; b++)
        for (PcEntry **pp = &buckets[b]; *pp; pp = &(*pp)->next)
            if (!(*pp)->pins && (!victim || (*pp)->last_use < (*victim)->last_use))
                victim = pp;
    if (!victim)
        return;   /* everything pinned: grow past the bound for now */
    PcEntry *e = *victim;
    *victim = e->next;
    if (is_conv(e))
        dnnl_api_conv_destroy(e->prim);
    else
        dnnl_api_destroy(e->prim);
    PyMem_Free(e);
    stats.entries--;
    stats.evictions++;
}

static PcEntry *get(const void *key, size_t len)
{
    uint64_t h = XXH3_64bits(key, len);
    PcEntry **head = &buckets[h & (PC_BUCKETS - 1)];
    for (PcEntry *e = *head; e; e = e->next)
        if (e->hash == h && e->len == len && !memcmp(&e->key, key, len)) {
            stats.hits++;
            e->last_use = ++tick;
            e->pins++;
            return e;
        }
    stats.misses++;
    if (stats.entries >= PC_CAPACITY)
        evict_one();
    PcEntry *e = PyMem_Calloc(1, sizeof *e);
    if (!e) {
        PyErr_NoMemory();
        return NULL;
    }
    char err[200] = "";   /* a refusal's message, or a note on success ("": none) */
    int ref_avoided = 0;
    memcpy(&e->key, key, len);
    e->len = len;
    e->hash = h;
    e->prim = is_conv(e) ? dnnl_api_conv_create(&e->key.cv, &ref_avoided, err, sizeof err)
                         : dnnl_api_matmul_create(&e->key.mm, &ref_avoided, err, sizeof err);
    if (e->prim) {
        stats.creations++;
        stats.created[e->key.mm.op_class & 7]++;
    } else {
        stats.failures++;
    }
    stats.ref_avoided += ref_avoided;
    /* what oneDNN refused, or how a reference implementation was avoided: once per key */
    if (err[0] && sj_log_on(LOG_OUTPUT_CODE, SJ_INFO))
        sj_log(LOG_OUTPUT_CODE, SJ_INFO, "%s", err);
    e->last_use = ++tick;
    e->pins = 1;
    e->next = *head;
    *head = e;
    stats.entries++;
    return e;
}

PcEntry *primcache_get(const MmKey *key)
{
    return get(key, sizeof *key);
}

PcEntry *primcache_get_conv(const CvKey *key)
{
    return get(key, sizeof *key);
}

void *primcache_prim(const PcEntry *e)
{
    return e->prim;
}

void primcache_release(PcEntry *e)
{
    e->pins--;
}

/* The implementations oneDNN chose for the cached primitives of op_class (0: all): a new
 * set of str, or NULL with an exception. */
static PyObject *impls_of(int op_class)
{
    PyObject *set = PySet_New(NULL);   /* new */
    for (int b = 0; set && b < PC_BUCKETS; b++)
        for (PcEntry *e = buckets[b]; e; e = e->next) {
            if (!e->prim || (op_class && e->key.mm.op_class != op_class))
                continue;
            const char *impl = is_conv(e) ? dnnl_api_conv_impl(e->prim) : dnnl_api_impl(e->prim);
            PyObject *name = PyUnicode_FromString(impl);   /* new */
            if (!name || PySet_Add(set, name) < 0) {
                Py_XDECREF(name);
                Py_CLEAR(set);
                break;
            }
            Py_DECREF(name);
        }
    return set;
}

/* _C._cg_primcache_info(): the oneDNN primitive cache's counters . */
static PyObject *py_primcache_info(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    PcStats st = stats;
    static const struct {
        const char *name;
        int op_class;
    } classes[4] = {
        {"matmul", MM_CLASS_MATMUL}, {"conv", CV_CLASS_CONV}, {"pool", CV_CLASS_POOL}, {"batch_norm", CV_CLASS_BNORM}};
    PyObject *by = PyDict_New(), *impls_by = PyDict_New();   /* new, new */
    PyObject *impls = by && impls_by ? impls_of(0) : NULL;   /* new */
    for (int i = 0; impls && i < 4; i++) {
        PyObject *n = PyLong_FromLong(st.created[classes[i].op_class]);   /* new */
        PyObject *set = n ? impls_of(classes[i].op_class) : NULL;  /* new */
        if (!set || PyDict_SetItemString(by, classes[i].name, n) < 0 ||
            PyDict_SetItemString(impls_by, classes[i].name, set) < 0)
            Py_CLEAR(impls);
        Py_XDECREF(n);
        Py_XDECREF(set);
    }
    if (!impls) {
        Py_XDECREF(by);
        Py_XDECREF(impls_by);
        return NULL;
    }
    /* N steals impls, by and impls_by */
    return Py_BuildValue("{s:l,s:l,s:l,s:l,s:l,s:l,s:l,s:l,s:N,s:N,s:N}", "hits", st.hits, "misses", st.misses,
                         "creations", st.creations, "failures", st.failures, "evictions", st.evictions, "entries",
                         st.entries, "capacity", st.capacity, "ref_avoided", st.ref_avoided, "impls", impls, "created",
                         by, "impls_by_class", impls_by);
}

static PyObject *py_dnnl_avx512(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyBool_FromLong(dnnl_api_avx512());
}

static PyMethodDef primcache_methods[] = {
    {"_cg_primcache_info", py_primcache_info, METH_NOARGS, "The oneDNN primitive cache's counters (tests)."},
    {"_cg_dnnl_avx512", py_dnnl_avx512, METH_NOARGS,
     "Whether oneDNN may dispatch to AVX-512 kernels here (its effective ISA; tests)."},
    {NULL, NULL, 0, NULL},
};

int primcache_init_module(PyObject *m)
{
    return PyModule_AddFunctions(m, primcache_methods);
}
