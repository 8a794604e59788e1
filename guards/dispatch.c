/* xxHash dispatch across the entries of one guard tree.
 *
 * A fact is one cheap, discriminating thing an entry's leaves pin down about a variable of
 * the frame itself (a local, a closure variable, a global; nothing reached through
 * attributes, which may run Python code): its type (TYPE_MATCH, SEQUENCE_LENGTH), its
 * identity (ID_MATCH), its value when it is a small constant (EQUALS_MATCH on an int, a
 * bool, None or a str), or for a tensor its type, dtype, rank, requires_grad and static
 * sizes (TENSOR_MATCH). An entry's facts, sorted by source, are its signature; the bytes
 * of the facts' values, hashed with XXH3, are its key. A call computes the key of each
 * distinct signature from the live values (the same byte writer, so an entry whose leaves
 * pass always has the call's key) and looks the key up.
 *
 * Each signature keeps an open-addressing table from key to a chain of entries, newest
 * first. Almost every function has one signature; candidates of several are merged by
 * age, so the answer is the same as trying every entry from the newest. */
#include "tree.h"
#include "../vocab/tensor_reader.h"
#include <xxhash.h>
#include <string.h>
#include "../core/errors.h"

typedef enum { FACT_TYPE, FACT_ID, FACT_VALUE, FACT_TENSOR } FactKind;

typedef struct {
    int32_t src;
    uint8_t kind;     /* FactKind */
} Fact;

typedef struct {
    uint64_t key;
    GuardEntry *head;  /* borrowed: newest entry with this key */
} Bucket;

struct Signature {
    Fact *facts;       /* owned */
    int32_t nfacts;
    Bucket *table;     /* owned, capacity a power of two */
    uint32_t mask;
    int32_t used;
};

/* ---------------------------------------------------------------- fact words ---- */

/* The values of facts as 64-bit words, written the same way from leaves and from live
 * values, in the signature's order. Each fact's words parse on their own (a value that
 * could not be read is one 0 word; otherwise a non-NULL type or object pointer first, and
 * a tensor's header word gives its rank), so equal word sequences mean equal facts,
 * exactly, except for str constants, which are written as their hash. */
typedef struct {
    uint64_t *w;      /* the caller's buffer, or heap when it was too small */
    uint64_t *small;  /* the caller's buffer */
    int32_t n, cap;
    int heap;
} FactWords;

#define FACT_MAX_WORDS (2 + 2 * SJ_MAX_RANK)   /* the most one fact writes */
#define FACT_STACK_WORDS 512                   /* the callers' buffers */

static void fw_init(FactWords *fw, uint64_t *buf, int32_t cap)
{
    fw->w = fw->small = buf;
    fw->n = 0;
    fw->cap = cap;
    fw->heap = 0;
}

static void fw_free(FactWords *fw)
{
    if (fw->heap)
        PyMem_Free(fw->w);
}

/* Room for one more fact; -1 with an exception when memory ran out. */
static int fw_room(FactWords *fw)
{
    if (fw->n + FACT_MAX_WORDS <= fw->cap)
        return 0;
    int32_t ncap = fw->cap * 2;
    uint64_t *p = PyMem_Malloc(sizeof(uint64_t) * (size_t)ncap);
    if (!p) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(p, fw->w, sizeof(uint64_t) * (size_t)fw->n);
    if (fw->heap)
        PyMem_Free(fw->w);
    fw->w = p;
    fw->cap = ncap;
    fw->heap = 1;
    return 0;
}

/* Room for nfacts facts at once (one allocation for big frames, none for small ones). */
static int fw_reserve(FactWords *fw, int32_t nfacts)
{
    int32_t need = nfacts * FACT_MAX_WORDS;
    if (need <= fw->cap)
        return 0;
    if (!(fw->w = PyMem_Malloc(sizeof(uint64_t) * (size_t)need))) {
        fw->w = fw->small;
        PyErr_NoMemory();
        return -1;
    }
    fw->cap = need;
    fw->heap = 1;
    return 0;
}

static inline void put(FactWords *fw, uint64_t x)
{
    fw->w[fw->n++] = x;
}

static void put_tensor(FactWords *fw, PyTypeObject *type, const TensorMeta *m, const int64_t *strides)
{
    uint64_t *d = fw->w + fw->n;
    d[0] = (uint64_t)(uintptr_t)type;
    d[1] = (uint64_t)m->lib | (uint64_t)m->dtype << 8 | (uint64_t)m->ndim << 16 | (uint64_t)m->requires_grad << 24 |
           (uint64_t)m->np_scalar << 32;
    for (int i = 0; i < m->ndim; i++) {
        d[2 + i] = (uint64_t)m->size[i];
        d[2 + m->ndim + i] = (uint64_t)strides[i];
    }
    fw->n += 2 + 2 * m->ndim;
}

/* 0 with the words, or 1 when the constant is not one the index files (the fact is left
 * out of the signature). *exact: the words decide equality (not a str's hash). */
static int put_value(FactWords *fw, PyObject *v, int *exact)
{
    PyTypeObject *t = Py_TYPE(v);
    *exact = 1;
    if (v == Py_None || t == &PyBool_Type) {
        put(fw, (uint64_t)(uintptr_t)t);
        put(fw, (uint64_t)(uintptr_t)v);
        return 0;
    }
    if (t == &PyLong_Type) {
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow || (x == -1 && PyErr_Occurred())) {
            sj_err_clear();
            return 1;
        }
        put(fw, (uint64_t)(uintptr_t)t);
        put(fw, (uint64_t)x);
        return 0;
    }
    if (t == &PyUnicode_Type) {
        Py_hash_t h = PyObject_Hash(v);   /* cached on the str */
        if (h == -1) {
            sj_err_clear();
            return 1;
        }
        put(fw, (uint64_t)(uintptr_t)t);
        put(fw, (uint64_t)h);
        *exact = 0;
        return 0;
    }
    return 1;
}

/* The fact a leaf pins down: 0 and *f (*exact: equal words prove the leaf passes), or 1
 * when it pins none. */
static int fact_of_leaf(const Guard *g, Fact *f, int *exact)
{
    f->src = g->src;
    *exact = 1;
    switch ((GuardKind)g->kind) {
    case GK_TYPE_MATCH:
        f->kind = FACT_TYPE;
        return 0;
    case GK_SEQ_LENGTH:
        f->kind = FACT_TYPE;
        *exact = 0;   /* the length is not a fact */
        return 0;
    case GK_ID_MATCH:
        f->kind = FACT_ID;
        return 0;
    case GK_EQUALS_MATCH: {
        uint64_t w[2];   /* put_value writes at most 2 words */
        FactWords one;
        fw_init(&one, w, 2);
        f->kind = FACT_VALUE;
        return put_value(&one, g->expected, exact) == 0 ? 0 : 1;
    }
    case GK_TENSOR_MATCH:
        f->kind = FACT_TENSOR;
        return g->dyn == 0 ? 0 : 1;   /* a dynamic size is no fact */
    default:
        return 1;
    }
}

static void words_of_leaf(const Guard *g, const Fact *f, FactWords *fw)
{
    int exact;
    switch ((FactKind)f->kind) {
    case FACT_TYPE:
        put(fw, (uint64_t)(uintptr_t)g->expected);
        break;
    case FACT_ID:
        put(fw, (uint64_t)(uintptr_t)g->expected);
        break;
    case FACT_VALUE:
        (void)put_value(fw, g->expected, &exact);
        break;
    case FACT_TENSOR:
        put_tensor(fw, (PyTypeObject *)g->expected, &g->meta, g->stride);
        break;
    }
}

/* Words of the live value of fact f; a value that cannot be read writes a marker no
 * entry has (a NULL type). */
static void words_of_call(GuardCall *call, const Fact *f, FactWords *fw)
{
    PyObject *v = sources_resolve(&call->t->src, f->src, call->fv, call->memo);
    if (!v) {
        sj_err_clear();
        put(fw, 0);
        return;
    }
    switch ((FactKind)f->kind) {
    case FACT_TYPE:
        put(fw, (uint64_t)(uintptr_t)Py_TYPE(v));
        break;
    case FACT_ID:
        put(fw, (uint64_t)(uintptr_t)v);
        break;
    case FACT_VALUE: {
        int exact;
        if (put_value(fw, v, &exact))
            put(fw, 0);
        break;
    }
    case FACT_TENSOR: {
        const char *why;
        const TensorFacts *tf = guard_call_facts(call, f->src, v, &why);
        if (!tf) {
            sj_err_clear();
            put(fw, 0);
            break;
        }
        put_tensor(fw, Py_TYPE(v), &tf->m, tf->stride);
        break;
    }
    }
}

static uint64_t fw_hash(const FactWords *fw)
{
    return XXH3_64bits(fw->w, sizeof(uint64_t) * (size_t)fw->n);
}

/* ------------------------------------------------------------- signatures ---- */

/* Variables of the frame itself: reading them runs no Python code. */
static int is_root(const SourceTable *s, int32_t id)
{
    if (id < 0)
        return 0;
    switch ((SourceKind)s->e[id].kind) {
    case SRC_LOCAL:
    case SRC_FREEVAR:
    case SRC_GLOBAL:
    case SRC_MODGLOBAL:
    case SRC_HELD:
        return 1;
    default:
        return 0;
    }
}

static int cmp_fact(const void *a, const void *b)
{
    const Fact *x = a, *y = b;
    if (x->src != y->src)
        return x->src < y->src ? -1 : 1;
    return (int)x->kind - (int)y->kind;
}

static void sig_free(Signature *s)
{
    if (!s)
        return;
    PyMem_Free(s->facts);
    PyMem_Free(s->table);
    PyMem_Free(s);
}

void dispatch_clear(GuardTree *t)
{
    for (int32_t i = 0; i < t->nsigs; i++)
        sig_free(t->sigs[i]);
    PyMem_Free(t->sigs);
    t->sigs = NULL;
    t->nsigs = 0;
}

static Bucket *lookup(Signature *s, uint64_t key)
{
    uint32_t h = (uint32_t)(key ^ (key >> 32)) & s->mask;
    while (s->table[h].head && s->table[h].key != key)
        h = (h + 1) & s->mask;
    return &s->table[h];
}

static int grow(Signature *s)
{
    uint32_t ncap = s->table ? (s->mask + 1) * 2 : 16;
    Bucket *old = s->table;
    uint32_t oldcap = old ? s->mask + 1 : 0;
    s->table = PyMem_Calloc(ncap, sizeof(Bucket));
    if (!s->table) {
        s->table = old;
        PyErr_NoMemory();
        return -1;
    }
    s->mask = ncap - 1;
    for (uint32_t i = 0; i < oldcap; i++)
        if (old[i].head)
            *lookup(s, old[i].key) = old[i];
    PyMem_Free(old);
    return 0;
}

int dispatch_file(GuardTree *t, GuardEntry *ge)
{
    Fact *facts = PyMem_Calloc((size_t)ge->nleaves + 1, sizeof(Fact));   /* zeroed: compared with memcmp */
    if (!facts) {
        PyErr_NoMemory();
        return -1;
    }
    int32_t n = 0;
    for (int32_t i = 0; i < ge->nleaves; i++) {
        const Guard *g = &t->leaves.g[ge->leaves[i]];
        int exact;
        if (is_root(&t->src, g->src) && fact_of_leaf(g, &facts[n], &exact) == 0)
            n++;
    }
    qsort(facts, (size_t)n, sizeof(Fact), cmp_fact);
    /* one fact per (source, kind) */
    int32_t k = 0;
    for (int32_t i = 0; i < n; i++) {
        if (k && facts[k - 1].src == facts[i].src && facts[k - 1].kind == facts[i].kind)
            continue;
        facts[k++] = facts[i];
    }
    n = k;
    int32_t sid = -1;
    for (int32_t i = 0; i < t->nsigs && sid < 0; i++)
        if (t->sigs[i]->nfacts == n && memcmp(t->sigs[i]->facts, facts, sizeof(Fact) * (size_t)n) == 0)
            sid = i;
    if (sid < 0) {
        Signature **p = PyMem_Realloc(t->sigs, sizeof(Signature *) * ((size_t)t->nsigs + 1));
        Signature *s = PyMem_Calloc(1, sizeof(Signature));
        if (p)
            t->sigs = p;
        if (!p || !s || grow(s) < 0) {
            sig_free(s);
            PyMem_Free(facts);
            if (!PyErr_Occurred())
                PyErr_NoMemory();
            return -1;
        }
        s->facts = facts;
        s->nfacts = n;
        facts = NULL;
        sid = t->nsigs;
        t->sigs[t->nsigs++] = s;
    }
    PyMem_Free(facts);
    Signature *s = t->sigs[sid];
    /* the words and key from the leaves' expected values; the leaves those words decide */
    uint64_t buf[FACT_STACK_WORDS];
    FactWords fw;
    fw_init(&fw, buf, FACT_STACK_WORDS);
    int32_t *covered = PyMem_Malloc(sizeof(int32_t) * ((size_t)ge->nleaves + 1));
    int32_t ncovered = 0;
    if (!covered) {
        PyErr_NoMemory();
        return -1;
    }
    for (int32_t i = 0; i < s->nfacts; i++) {
        const Fact *f = &s->facts[i];
        if (fw_room(&fw) < 0) {
            PyMem_Free(covered);
            fw_free(&fw);
            return -1;
        }
        int32_t at = fw.n;
        for (int32_t j = 0; j < ge->nleaves; j++) {
            const Guard *g = &t->leaves.g[ge->leaves[j]];
            Fact mine;
            int exact;
            if (g->src != f->src || fact_of_leaf(g, &mine, &exact) != 0 || mine.kind != f->kind)
                continue;
            if (fw.n == at) {   /* the fact's words come from the first such leaf */
                words_of_leaf(g, f, &fw);
                if (exact)
                    covered[ncovered++] = ge->leaves[j];
            } else if (exact) {   /* another leaf on the same fact: covered if its words agree */
                uint64_t w1[FACT_MAX_WORDS];
                FactWords one;
                fw_init(&one, w1, FACT_MAX_WORDS);
                words_of_leaf(g, f, &one);
                if (one.n == fw.n - at && memcmp(one.w, fw.w + at, sizeof(uint64_t) * (size_t)one.n) == 0)
                    covered[ncovered++] = ge->leaves[j];
            }
        }
    }
    uint64_t h = fw_hash(&fw);
    ge->words = PyMem_Malloc(sizeof(uint64_t) * ((size_t)fw.n + 1));
    if (!ge->words) {
        PyMem_Free(covered);
        fw_free(&fw);
        PyErr_NoMemory();
        return -1;
    }
    memcpy(ge->words, fw.w, sizeof(uint64_t) * (size_t)fw.n);
    ge->nwords = fw.n;
    ge->covered = covered;
    ge->ncovered = ncovered;
    fw_free(&fw);
    if ((uint32_t)(s->used + 1) * 2 > s->mask + 1 && grow(s) < 0)
        return -1;
    Bucket *b = lookup(s, h);
    if (!b->head) {
        b->key = h;
        s->used++;
    }
    ge->next_same = b->head;
    b->head = ge;
    ge->sig = sid;
    return 0;
}

int32_t dispatch_candidates(GuardCall *call, GuardEntry **out, int32_t cap)
{
    const GuardTree *t = call->t;
    int32_t n = 0;
    uint64_t buf[FACT_STACK_WORDS];
    FactWords fw;
    for (int32_t si = 0; si < t->nsigs; si++) {
        Signature *s = t->sigs[si];
        fw_init(&fw, buf, FACT_STACK_WORDS);
        if (fw_reserve(&fw, s->nfacts) < 0)
            return -1;
        for (int32_t i = 0; i < s->nfacts; i++) {
            if (s->facts[i].src >= call->nsrc || fw_room(&fw) < 0) {
                fw_free(&fw);
                return -1;
            }
            words_of_call(call, &s->facts[i], &fw);
        }
        Bucket *b = lookup(s, fw_hash(&fw));
        for (GuardEntry *e = b->head; e; e = e->next_same) {
            if (e->seq > call->seq0)
                continue;   /* filed while this call ran: its leaves have no slots here */
            if (n == cap) {
                fw_free(&fw);
                return -1;
            }
            /* words equal to the entry's decide its covered leaves for this call */
            if (e->nwords == fw.n && memcmp(e->words, fw.w, sizeof(uint64_t) * (size_t)fw.n) == 0)
                for (int32_t k = 0; k < e->ncovered; k++)
                    if (e->covered[k] < call->nleaves)
                        call->res[e->covered[k]] = 1;
            /* insertion by age, newest first */
            int32_t j = n++;
            while (j > 0 && out[j - 1]->seq < e->seq) {
                out[j] = out[j - 1];
                j--;
            }
            out[j] = e;
        }
        fw_free(&fw);
    }
    return n;
}
