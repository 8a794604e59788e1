/* Guard trees: shared sources and leaves, the per-call memo, the check of one entry and
 * the tree form of the guards log. Dispatch across entries is in dispatch.c. */
#include "tree.h"
#include "../vocab/tensor_reader.h"
#include <string.h>
#include "../core/errors.h"
#include "../core/pyutil.h"

/* ------------------------------------------------------------------- tree ---- */

static void free_retired(GuardTree *t)
{
    for (int32_t i = 0; i < t->nretired; i++)
        sources_clear(&t->retired[i]);
    PyMem_Free(t->retired);
    t->retired = NULL;
    t->nretired = 0;
    for (int32_t i = 0; i < t->nretired_leaves; i++)
        PyMem_Free(t->retired_leaves[i]);   /* shallow copies: the live array owns the guards */
    PyMem_Free(t->retired_leaves);
    t->retired_leaves = NULL;
    t->nretired_leaves = 0;
}

void guard_tree_clear(GuardTree *t)
{
    dispatch_clear(t);
    free_retired(t);
    if (!t->scratch_busy) {   /* a call in progress keeps it; freed with the next clear */
        PyMem_Free(t->scratch);
        t->scratch = NULL;
        t->scratch_size = 0;
    }
    sources_clear(&t->src);
    guards_clear(&t->leaves);
    PyMem_Free(t->entries);
    t->entries = NULL;
    t->nentries = t->capentries = 0;
    t->seq = 0;
}

void guard_entry_clear(GuardEntry *ge)
{
    PyMem_Free(ge->leaves);
    PyMem_Free(ge->words);
    PyMem_Free(ge->covered);
    ge->leaves = NULL;
    ge->words = NULL;
    ge->covered = NULL;
    ge->nleaves = ge->nwords = ge->ncovered = 0;
    ge->sig = -1;
}

int guard_tree_copy_sources(const GuardTree *t, SourceTable *dst)
{
    if (t->src.n == 0)
        return 0;
    dst->e = PyMem_Malloc(sizeof(SourceEntry) * (size_t)t->src.cap);
    if (!dst->e) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(dst->e, t->src.e, sizeof(SourceEntry) * (size_t)t->src.n);
    for (int32_t i = 0; i < t->src.n; i++) {
        Py_XINCREF(dst->e[i].key);
        Py_XINCREF(dst->e[i].obj);
        Py_XINCREF(dst->e[i].repr);
    }
    dst->n = t->src.n;
    dst->cap = t->src.cap;
    return 0;
}

/* 1 when src starts with exactly t's sources (it was copied from t and only grew). */
static int extends(const SourceTable *src, const SourceTable *t)
{
    if (src->n < t->n)
        return 0;
    for (int32_t i = 0; i < t->n; i++)
        if (src->e[i].repr != t->e[i].repr)   /* copies share the repr objects */
            return 0;
    return 1;
}

/* Room for n more leaves without moving the array under a reader: a bigger array is a
 * copy, and the old one is retired, not freed. */
static int reserve_leaves(GuardTree *t, int32_t n)
{
    GuardSet *ls = &t->leaves;
    if (ls->n + n <= ls->cap)
        return 0;
    Guard **r = PyMem_Realloc(t->retired_leaves, sizeof(Guard *) * ((size_t)t->nretired_leaves + 1));
    if (!r) {
        PyErr_NoMemory();
        return -1;
    }
    t->retired_leaves = r;
    int32_t ncap = (ls->n + n) * 2;
    Guard *g = PyMem_Malloc(sizeof(Guard) * (size_t)ncap);
    if (!g) {
        PyErr_NoMemory();
        return -1;
    }
    if (ls->n)
        memcpy(g, ls->g, sizeof(Guard) * (size_t)ls->n);
    if (ls->g)
        t->retired_leaves[t->nretired_leaves++] = ls->g;
    ls->g = g;
    ls->cap = ncap;
    return 0;
}

static int32_t intern_leaf(GuardTree *t, const Guard *g)
{
    for (int32_t i = 0; i < t->leaves.n; i++)
        if (guards_same(&t->leaves.g[i], g))
            return i;
    return guards_append(&t->leaves, g);
}

/* Depth of a source in the tree (roots are 0). */
static int depth(const SourceTable *s, int32_t id)
{
    int d = 0;
    while (id >= 0 && s->e[id].base >= 0) {
        id = s->e[id].base;
        d++;
    }
    return d;
}

/* Check order: leaves without a source first (global state), then by source in tree
 * order (a base has a smaller id than what hangs off it), cheap kinds before dear ones;
 * aliasing checks last, once everything they compare is resolved. */
static int rank_of(const Guard *g, const SourceTable *s)
{
    switch ((GuardKind)g->kind) {
    case GK_BACKEND_MATCH:
    case GK_GLOBAL_STATE:
        return 0;
    case GK_DISTINCT:
    case GK_SAME_OBJECT:
        return 1 << 30;
    default:
        return 1 + depth(s, g->src) * 4 + (g->kind == GK_TENSOR_MATCH || g->kind == GK_DICT_KEYS);
    }
}

typedef struct {
    int32_t leaf;
    int rank;
    int32_t src;
} OrderItem;

static int cmp_order(const void *a, const void *b)
{
    const OrderItem *x = a, *y = b;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    if (x->src != y->src)
        return x->src < y->src ? -1 : 1;
    return x->leaf < y->leaf ? -1 : x->leaf > y->leaf;
}

static int tree_add(GuardTree *t, SourceTable *src, const GuardSet *gs, GuardEntry *ge, void *owner);

int guard_tree_add(GuardTree *t, SourceTable *src, const GuardSet *gs, GuardEntry *ge, void *owner)
{
    if (t->adding || !extends(src, &t->src))
        return 1;   /* another add is under way (interning runs __eq__) or the sources moved on */
    t->adding = 1;
    int r = tree_add(t, src, gs, ge, owner);
    t->adding = 0;
    return r;
}

static int tree_add(GuardTree *t, SourceTable *src, const GuardSet *gs, GuardEntry *ge, void *owner)
{
    OrderItem *order = PyMem_Malloc(sizeof(OrderItem) * ((size_t)gs->n + 1));
    int32_t *ids = PyMem_Malloc(sizeof(int32_t) * ((size_t)gs->n + 1));
    if (!order || !ids) {
        PyMem_Free(order);
        PyMem_Free(ids);
        PyErr_NoMemory();
        return -1;
    }
    if (sj_grow((void **)&t->entries, &t->capentries, t->nentries + 1, sizeof(GuardEntry *), 8) < 0) {
        PyMem_Free(order);
        PyMem_Free(ids);
        return -1;
    }
    /* the capture's table becomes the tree's: same ids for the old sources; the old one is
     * retired (see GuardTree.retired) */
    SourceTable *r = PyMem_Realloc(t->retired, sizeof(SourceTable) * ((size_t)t->nretired + 1));
    if (!r || reserve_leaves(t, gs->n) < 0) {
        if (r)
            t->retired = r;
        PyMem_Free(order);
        PyMem_Free(ids);
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        return -1;
    }
    t->retired = r;
    if (t->src.e)
        t->retired[t->nretired++] = t->src;
    t->src = *src;
    memset(src, 0, sizeof *src);
    for (int32_t i = 0; i < gs->n; i++) {
        int32_t id = intern_leaf(t, &gs->g[i]);
        if (id < 0) {
            PyMem_Free(order);
            PyMem_Free(ids);
            return -1;
        }
        order[i].leaf = id;
        order[i].rank = rank_of(&gs->g[i], &t->src);
        order[i].src = gs->g[i].src;
    }
    qsort(order, (size_t)gs->n, sizeof *order, cmp_order);
    int32_t n = 0;
    for (int32_t i = 0; i < gs->n; i++)
        if (n == 0 || ids[n - 1] != order[i].leaf)
            ids[n++] = order[i].leaf;
    PyMem_Free(order);
    ge->leaves = ids;
    ge->nleaves = n;
    ge->owner = owner;
    ge->seq = ++t->seq;
    ge->next_same = NULL;
    ge->sig = -1;
    if (dispatch_file(t, ge) < 0) {
        guard_entry_clear(ge);
        return -1;
    }
    t->entries[t->nentries++] = ge;
    return 0;
}

/* -------------------------------------------------------------- per call ---- */

int guard_call_begin(GuardCall *call, GuardTree *t, const FrameView *fv, PyObject *options)
{
    call->t = t;
    call->fv = fv;
    call->options = options;
    call->nsrc = t->src.n;
    call->nleaves = t->leaves.n;
    call->seq0 = t->seq;
    if (call->nsrc > GUARD_MAX_SOURCES) {   /* fslot is an int16 */
        PyErr_SetString(PyExc_OverflowError, "shapejit: too many sources in one frame's guards");
        return -1;
    }
    call->facts = call->small_facts;
    call->nfacts = 0;
    call->capfacts = (int32_t)(sizeof call->small_facts / sizeof call->small_facts[0]);
    call->heap = 0;
    if (call->nsrc <= 32 && call->nleaves <= 128) {
        call->memo = call->small_memo;
        call->fslot = call->small_fslot;
        call->res = call->small_res;
    } else {
        /* one block: facts (one slot per source at most), memo, fslot, res */
        size_t ns = (size_t)call->nsrc + 1, nl = (size_t)call->nleaves + 1;
        size_t need = ns * (sizeof(TensorFacts) + sizeof(PyObject *) + sizeof(int16_t)) + nl;
        char *block;
        if (!t->scratch_busy && t->scratch_size >= need) {
            block = t->scratch;
            t->scratch_busy = 1;
            call->heap = 1;
        } else if (!t->scratch_busy) {
            PyMem_Free(t->scratch);
            t->scratch = NULL;
            t->scratch_size = 0;
            if (!(block = PyMem_Malloc(need)))
                return PyErr_NoMemory(), -1;
            t->scratch = block;
            t->scratch_size = need;
            t->scratch_busy = 1;
            call->heap = 1;
        } else {
            if (!(block = PyMem_Malloc(need)))
                return PyErr_NoMemory(), -1;
            call->heap = 2;
        }
        call->facts = (TensorFacts *)block;
        call->capfacts = (int32_t)ns;
        call->memo = (PyObject **)(block + ns * sizeof(TensorFacts));
        call->fslot = (int16_t *)((char *)call->memo + ns * sizeof(PyObject *));
        call->res = (int8_t *)((char *)call->fslot + ns * sizeof(int16_t));
    }
    memset(call->memo, 0, sizeof(PyObject *) * (size_t)call->nsrc);
    memset(call->fslot, 0, sizeof(int16_t) * (size_t)call->nsrc);
    memset(call->res, 0, (size_t)call->nleaves);
    return 0;
}

void guard_call_end(GuardCall *call)
{
    sources_memo_clear(call->memo, call->nsrc);
    if (call->heap == 1)
        call->t->scratch_busy = 0;
    else if (call->heap == 2)
        PyMem_Free(call->facts);
    else if (call->facts != call->small_facts)
        PyMem_Free(call->facts);
    call->memo = NULL;
    call->facts = NULL;
}

const TensorFacts *guard_call_facts(GuardCall *call, int32_t src, PyObject *v, const char **why)
{
    *why = NULL;
    int16_t k = src < call->nsrc ? call->fslot[src] : 0;
    if (k > 0)
        return &call->facts[k - 1];
    if (k < 0) {
        *why = "not a supported tensor";
        return NULL;
    }
    if (call->nfacts == call->capfacts) {
        if (call->capfacts >= 0x7000) {
            PyErr_SetString(PyExc_OverflowError, "shapejit: too many tensors in one frame");
            return NULL;
        }
        /* only the small layout grows (the big one has a slot per source): once, to nsrc */
        int32_t ncap = call->nsrc > call->capfacts * 4 ? call->nsrc : call->capfacts * 4;
        TensorFacts *p = PyMem_Malloc(sizeof(TensorFacts) * (size_t)ncap);
        if (!p) {
            PyErr_NoMemory();
            return NULL;
        }
        memcpy(p, call->facts, sizeof(TensorFacts) * (size_t)call->nfacts);
        if (call->facts != call->small_facts)
            PyMem_Free(call->facts);
        call->facts = p;
        call->capfacts = ncap;
    }
    TensorFacts *f = &call->facts[call->nfacts];
    int r = treader_read(v, &f->m, f->stride, why);
    if (r != 0) {
        if (r > 0 && src < call->nsrc)
            call->fslot[src] = -1;
        return NULL;
    }
    call->nfacts++;
    if (src < call->nsrc)
        call->fslot[src] = (int16_t)call->nfacts;
    return f;
}

/* 1 pass, 0 fail; leaves the tree has grown since the call began are checked uncached. */
static int leaf_passes(GuardCall *call, int32_t id)
{
    if (id < call->nleaves && call->res[id])
        return call->res[id] > 0;
    const Guard *g = &call->t->leaves.g[id];
    int ok = 0;
    int in_range = g->src < call->nsrc && g->src2 < call->nsrc;
    for (int32_t i = 0; i < g->nsrcs; i++)
        in_range &= g->srcs[i] < call->nsrc;
    if (in_range)   /* else the tree grew during this call: the memo has no slot for it */
        ok = guards_check_one(g, &call->t->src, call);
    if (ok < 0) {
        sj_err_clear();
        ok = 0;
    }
    if (id < call->nleaves)
        call->res[id] = ok ? 1 : -1;
    return ok;
}

/* 1 when every leaf of ge passes, else 0 (*failed = the first failing leaf id). */
static int guard_entry_check(GuardCall *call, const GuardEntry *ge, int32_t *failed)
{
    for (int32_t i = 0; i < ge->nleaves; i++)
        if (!leaf_passes(call, ge->leaves[i])) {
            *failed = ge->leaves[i];
            return 0;
        }
    return 1;
}

GuardEntry *guard_tree_find(GuardCall *call)
{
    const GuardTree *t = call->t;
    int32_t failed;
    if (t->nentries <= 2) {
        for (int32_t i = t->nentries - 1; i >= 0; i--)
            if (t->entries[i]->seq <= call->seq0 && guard_entry_check(call, t->entries[i], &failed))
                return t->entries[i];
        return NULL;
    }
    GuardEntry *small[16];
    int32_t n = dispatch_candidates(call, small, 16);
    if (n >= 0) {
        for (int32_t i = 0; i < n; i++)
            if (guard_entry_check(call, small[i], &failed))
                return small[i];
        return NULL;
    }
    sj_err_clear();
    for (int32_t i = t->nentries - 1; i >= 0; i--)
        if (t->entries[i]->seq <= call->seq0 && guard_entry_check(call, t->entries[i], &failed))
            return t->entries[i];
    return NULL;
}

PyObject *guard_entry_explain(GuardCall *call, const GuardEntry *ge)
{
    int32_t failed;
    if (ge->seq > call->seq0)
        return PyUnicode_FromString("(an entry added while this call was checked)");
    if (guard_entry_check(call, ge, &failed))
        Py_RETURN_NONE;
    return guards_explain_one(&call->t->leaves.g[failed], &call->t->src, call);
}

/* ------------------------------------------------------------ printed tree ---- */

/* How a source is reached from its base, as the guards log names it. New str. */
static PyObject *accessor_name(const SourceTable *s, int32_t id)
{
    const SourceEntry *e = &s->e[id];
    switch ((SourceKind)e->kind) {
    case SRC_LOCAL:
        return PyUnicode_FromFormat("FrameLocalsGuardAccessor(key=%R, framelocals_idx=%d)", e->key, e->index);
    case SRC_FREEVAR:
        return PyUnicode_FromFormat("ClosureGuardAccessor(key=%R, index=%d)", e->key, e->index);
    case SRC_GLOBAL:
        return PyUnicode_FromFormat("GlobalsGuardAccessor(key=%R)", e->key);
    case SRC_MODGLOBAL:
        return PyUnicode_FromFormat("ModuleGlobalsGuardAccessor(key=%R)", e->key);
    case SRC_ATTR:
        return PyUnicode_FromFormat("GetAttrGuardAccessor(%U)", e->key);
    case SRC_ITEM:
        if (PyUnicode_Check(e->key))
            return PyUnicode_FromFormat("DictGetItemGuardAccessor(%R)", e->key);
        return PyUnicode_FromFormat("GetItemGuardAccessor(%R)", e->key);
    case SRC_DICT_ITEM:
        return PyUnicode_FromFormat("DictSubclassGetItemGuardAccessor(%R)", e->key);
    case SRC_CELL:
        return PyUnicode_FromFormat("FuncClosureGuardAccessor(index=%d)", e->index);
    case SRC_DEFAULT:
        return PyUnicode_FromFormat("FuncDefaultsGuardAccessor(index=%d)", e->index);
    case SRC_KWDEFAULT:
        return PyUnicode_FromFormat("FuncKwDefaultsGuardAccessor(key=%R)", e->key);
    case SRC_SIZE:
        return PyUnicode_FromFormat("TensorSizeGuardAccessor(index=%d)", e->index);
    case SRC_STRIDE:
        return PyUnicode_FromFormat("TensorStrideGuardAccessor(index=%d)", e->index);
    case SRC_CALL:
        return PyUnicode_FromFormat("CallFunctionGuardAccessor(%U)", PyTuple_GET_ITEM(e->key, 2));
    case SRC_HELD:
        return PyUnicode_FromFormat("HeldObjectGuardAccessor(%U)", e->repr);
    }
    return PyUnicode_FromString("?");
}

static int append_line(PyObject *list, int level, PyObject *text, PyObject *where)
{
    char pre[128];
    int k = 0;
    for (int i = 0; i < level && k < 120; i++) {
        pre[k++] = '|';
        pre[k++] = ' ';
    }
    pre[k] = 0;
    PyObject *line =
        where ? PyUnicode_FromFormat("%s+- %U  # %U", pre, text, where) : PyUnicode_FromFormat("%s+- %U", pre, text);
    if (!line)
        return -1;
    int r = PyList_Append(list, line);
    Py_DECREF(line);
    return r;
}

static int leaf_line(PyObject *list, int level, const GuardTree *t, const Guard *g)
{
    PyObject *text = guards_format_one(g, &t->src);
    if (!text)
        return -1;
    int r = append_line(list, level, text, g->where);
    Py_DECREF(text);
    return r;
}

/* The node for source id with its leaves (those of ge) and its children, depth first. */
static int node_lines(PyObject *list, int level, const GuardTree *t, const GuardEntry *ge, const uint8_t *used,
                      int32_t id)
{
    PyObject *acc = accessor_name(&t->src, id);
    PyObject *text =
        acc ? PyUnicode_FromFormat("GuardManager: source=%U, accessed_by=%U", t->src.e[id].repr, acc) : NULL;
    Py_XDECREF(acc);
    if (!text)
        return -1;
    int r = append_line(list, level, text, NULL);
    Py_DECREF(text);
    if (r < 0)
        return -1;
    for (int32_t i = 0; i < ge->nleaves; i++) {
        const Guard *g = &t->leaves.g[ge->leaves[i]];
        if (g->src == id && g->kind != GK_DISTINCT && leaf_line(list, level + 1, t, g) < 0)
            return -1;
    }
    for (int32_t c = id + 1; c < t->src.n; c++)
        if (used[c] && t->src.e[c].base == id && node_lines(list, level + 1, t, ge, used, c) < 0)
            return -1;
    return 0;
}

PyObject *guard_entry_format(const GuardTree *t, const GuardEntry *ge)
{
    uint8_t *used = PyMem_Calloc((size_t)t->src.n + 1, 1);
    PyObject *list = PyList_New(0);
    if (!used || !list)
        goto fail;
    for (int32_t i = 0; i < ge->nleaves; i++) {
        const Guard *g = &t->leaves.g[ge->leaves[i]];
        for (int32_t s = g->src; s >= 0; s = t->src.e[s].base)
            used[s] = 1;
        for (int32_t s = g->src2; s >= 0; s = t->src.e[s].base)
            used[s] = 1;
    }
    if (PyList_Append(list, Py_None) < 0)   /* replaced by the root line below */
        goto fail;
    for (int32_t i = 0; i < ge->nleaves; i++) {
        const Guard *g = &t->leaves.g[ge->leaves[i]];
        if ((g->src < 0 || g->kind == GK_DISTINCT) && leaf_line(list, 1, t, g) < 0)
            goto fail;
    }
    for (int32_t id = 0; id < t->src.n; id++)
        if (used[id] && t->src.e[id].base < 0 && node_lines(list, 1, t, ge, used, id) < 0)
            goto fail;
    PyObject *root = PyUnicode_FromString("TREE_GUARD_MANAGER:\n+- RootGuardManager");
    if (!root)
        goto fail;
    PyList_SetItem(list, 0, root);   /* steals */
    PyMem_Free(used);
    return sj_join("\n", list);
fail:
    PyMem_Free(used);
    Py_XDECREF(list);
    if (!PyErr_Occurred())
        PyErr_NoMemory();
    return NULL;
}

PyObject *guard_entry_lines(const GuardTree *t, const GuardEntry *ge)
{
    PyObject *list = PyList_New(0);
    for (int32_t i = 0; list && i < ge->nleaves; i++) {
        const Guard *g = &t->leaves.g[ge->leaves[i]];
        PyObject *line = guards_format_one(g, &t->src);
        if (line && g->where)
            Py_SETREF(line, PyUnicode_FromFormat("%U  # %U", line, g->where));
        if (!line || PyList_Append(list, line) < 0)
            Py_CLEAR(list);
        Py_XDECREF(line);
    }
    return list;
}
