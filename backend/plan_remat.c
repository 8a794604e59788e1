/* Recomputing instead of storing: a pointwise value one kernel makes and a later kernel
 * reads is recomputed inside that reader from what it was made of, when that lets the
 * first kernel skip storing it at all. A column statistic written as
 *
 *     d = x - mu; var = (d * d).sum(0); z = d / sd; ...(z * z * z).sum(0)
 *
 * otherwise stores d (a full-size write) for the second reduction to read back; recomputed,
 * the second reduction reads x and mu (the same full-size traffic as reading d) and the
 * write, the allocation and the cache space of d are gone. Eager stores every
 * intermediate; Inductor recomputes pointwise producers the same way.
 *
 * A value v made in the pointwise part of kernel A (a pointwise kernel, or the prologue of
 * a sum/mean/max/min kernel) is recomputed when every node outside A that reads it sits in
 * a later kernel K of the same kind (not rotated reads, not a row op) where:
 *   - its chain (v's node and, back from it, every pointwise node whose value is not
 *     stored: made inside its kernel only, or already recomputed) has at most
 *     REMAT_MAX_NODES nodes, each cheap (lower.def's COST) and of the library and the
 *     iteration space of K;
 *   - the chain's leaves (stored values and graph inputs) add at most one full-size input
 *     to K (the one that replaces reading v), and K still reads one afterwards, so its
 *     iteration space (the broadcast of its inputs) is unchanged;
 *   - K keeps room for its operands.
 * Then in each such K the chain joins the node list (in graph order, so a reduction's
 * node stays last) and v leaves the inputs; A no longer stores v (lower_plan's outputs:
 * only the first kernel making a value stores it, and a recomputed value is not stored).
 * A kernel that hands its nodes back to eager runs them all, the chain included: the same
 * values again. Nodes that write in place or into an out= array are never copied, and no
 * chain spans one (its leaves, read again later, could have changed in between).
 *
 * Memory: PyMem scratch arrays freed before return; nothing here holds a Python
 * reference. */
#include <string.h>

#include "lower_int.h"
#include "../core/config.h"

#define REMAT_MAX_NODES 8

typedef struct {
    Graph *g;
    LowerPlan *p;
    const int32_t *last_use;
    int32_t *writes;      /* per node: how many nodes before it write into memory (in place,
                             setitem, out=), nnodes + 1 entries */
    int32_t *first;       /* per node: the first kernel computing it, -1 */
    uint8_t *recomputed;  /* per value: no longer stored */
    int32_t *rstart;      /* per value: its readers, rnode[rstart[v] .. rstart[v + 1]) */
    int32_t *rnode;
    int64_t ncopies;      /* node copies made */
} Remat;

static int reduces(const Kernel *k)
{
    return k->flavour >= KF_SUM && k->flavour <= KF_MIN;
}

/* 1 when kernel k computes its nodes elementwise over one space a chain can join. */
static int takes_chain(const Kernel *k)
{
    return !k->rot && (k->flavour == KF_POINTWISE || reduces(k));
}

/* The value whose dims are kernel k's iteration space. */
static int32_t space_of(const Kernel *k)
{
    return reduces(k) ? k->red.src : k->space;
}

/* 1 when node ni of kernel k is in its pointwise part (not a reduction's own node). */
static int pointwise_part(const Kernel *k, int32_t ni)
{
    return !reduces(k) || k->nodes[k->nnodes - 1] != ni;
}

/* 1 when value v is stored (or is an input): a chain reads it rather than recomputing. */
static int stored(const Remat *r, int32_t v)
{
    const Graph *g = r->g;
    int32_t ni = g->values[v].node;
    int32_t a = r->first[ni];
    if (g->nodes[ni].op == OP_INPUT || a < 0 || !pointwise_part(&r->p->kernels[a], ni))
        return 1;   /* an input, another step's result, a reduction's result */
    if (r->recomputed[v])
        return 0;
    const Kernel *k = &r->p->kernels[a];
    for (int32_t i = 0; i < r->g->noutputs; i++)
        if (r->g->outputs[i] == v)
            return 1;
    return r->last_use[v] > k->nodes[k->nnodes - 1];
}

/* A node a chain may copy: one output, pure, lowered by kernels, cheap to compute again
 * (lower.def's COST: a libm call per element costs more than storing the value once and
 * reading it back; a division does not: numpy_moments' (x - mu) / sd recomputed by two
 * reductions, about 50 us each, against 80 us for the one storing it and 22 us for the
 * one reading it back, (8192, 64) float32, AVX-512, 1 thread). */
static int copyable(Graph *g, int32_t ni)
{
    NodeLower nl;
    const Node *nd = &g->nodes[ni];
    return nd->nout == 1 && !(nd->flags & (NODE_INPLACE | NODE_OUT)) && !lower_node_typed(g, ni, &nl) &&
           nl.row->cost == LR_CHEAP;
}

typedef struct {
    int32_t nodes[REMAT_MAX_NODES];
    int n;
    int32_t leaves[2 * REMAT_MAX_NODES + 2];
    int nleaves;
    int over;   /* cannot be built */
} Chain;

static void chain_leaf(void *ctx, int32_t ni, int32_t v);

typedef struct {
    const Remat *r;
    const Kernel *k;
    Chain *c;
} ChainCtx;

/* Adds node ni (making a value not stored) and, back from it, what it needs. */
static void chain_add(ChainCtx *cx, int32_t ni)
{
    Chain *c = cx->c;
    for (int i = 0; i < c->n; i++)
        if (c->nodes[i] == ni)
            return;
    const Graph *g = cx->r->g;
    const TensorMeta *m = &g->values[g->nodes[ni].first_value].meta;
    const TensorMeta *space = &g->values[space_of(cx->k)].meta;
    if (c->n == REMAT_MAX_NODES || m->lib != cx->k->lib || !lower_same_dims(m, space) || !copyable(cx->r->g, ni)) {
        c->over = 1;
        return;
    }
    c->nodes[c->n++] = ni;
    graph_node_reads(g, ni, chain_leaf, cx);
}

static void chain_leaf(void *ctx, int32_t ni, int32_t v)
{
    (void)ni;
    ChainCtx *cx = ctx;
    Chain *c = cx->c;
    if (c->over || plan_kernel_makes(cx->r->g, cx->k, v))
        return;
    if (!stored(cx->r, v)) {
        chain_add(cx, cx->r->g->values[v].node);
        return;
    }
    for (int i = 0; i < c->nleaves; i++)
        if (c->leaves[i] == v)
            return;
    if (c->nleaves == (int)(sizeof c->leaves / sizeof c->leaves[0]))
        c->over = 1;
    else
        c->leaves[c->nleaves++] = v;
}

/* The chain recomputing value v inside kernel k, checked against the rules above. 0 and
 * *c, or 1 when v stays stored. */
static int chain_for(const Remat *r, const Kernel *k, int32_t v, Chain *c)
{
    memset(c, 0, sizeof *c);
    ChainCtx cx = {r, k, c};
    chain_add(&cx, r->g->values[v].node);
    if (c->over)
        return 1;
    const Graph *g = r->g;
    const TensorMeta *space = &g->values[space_of(k)].meta;
    int full = 0, fresh_full = 0, fresh = 0;
    for (int i = 0; i < c->nleaves; i++) {
        int is_in = 0;
        for (int32_t j = 0; j < k->nin; j++)
            is_in |= k->ins[j] == c->leaves[i];
        int big = lower_same_dims(&g->values[c->leaves[i]].meta, space);
        full |= big;
        fresh_full += big && !is_in;
        fresh += !is_in;
    }
    for (int32_t j = 0; j < k->nin && !full; j++)   /* the inputs k keeps */
        full = k->ins[j] != v && lower_same_dims(&g->values[k->ins[j]].meta, space);
    if (!full || fresh_full > 1)
        return 1;
    /* the leaves are read again when k runs: nothing may have written into any memory
     * (a leaf or what it views) since the chain's nodes read them */
    int32_t from = c->nodes[0];
    for (int i = 1; i < c->n; i++)
        from = c->nodes[i] < from ? c->nodes[i] : from;
    if (r->writes[k->nodes[k->nnodes - 1] + 1] != r->writes[from])
        return 1;
    /* outputs are not known yet: keep room for as many as the kernel has nodes */
    return k->nin - 1 + fresh + k->nnodes + c->n + 3 >= SJ_KMAX_OPERANDS - 2;
}

/* Puts the chain's nodes into k in graph order, its leaves in and v out of k's inputs.
 * 0, or -1 with MemoryError. */
static int chain_join(Remat *r, Kernel *k, int32_t v, const Chain *c)
{
    int32_t n = k->nnodes + c->n;
    int32_t *nodes = PyMem_Malloc(sizeof(int32_t) * (size_t)n);
    if (!nodes) {
        PyErr_NoMemory();
        return -1;
    }
    int32_t have = 0;
    for (int32_t i = 0; i < k->nnodes; i++)
        nodes[have++] = k->nodes[i];
    for (int i = 0; i < c->n; i++) {
        int32_t at = have++;
        while (at > 0 && nodes[at - 1] > c->nodes[i]) {
            nodes[at] = nodes[at - 1];
            at--;
        }
        nodes[at] = c->nodes[i];
    }
    PyMem_Free(k->nodes);
    k->nodes = nodes;
    k->nnodes = n;
    int32_t keep = 0;
    for (int32_t j = 0; j < k->nin; j++)
        if (k->ins[j] != v)
            k->ins[keep++] = k->ins[j];
    k->nin = keep;
    for (int i = 0; i < c->nleaves; i++)
        plan_add_input(k, c->leaves[i]);   /* chain_for left room */
    r->ncopies += c->n;
    return 0;
}

/* Value v, made by node pn in the pointwise part of kernel a: recomputed by every kernel
 * reading it when each can. 0, or -1 with MemoryError. */
static int try_value(Remat *r, int32_t a, int32_t v)
{
    LowerPlan *p = r->p;
    int32_t readers[SJ_KMAX_OPERANDS];
    int nk = 0;
    for (int32_t i = r->rstart[v]; i < r->rstart[v + 1]; i++) {
        /* every kernel after a computing the reader (its own or a chain's copy of it) */
        int32_t rn = r->rnode[i];
        int found = plan_kernel_has(&p->kernels[a], rn);
        for (int32_t ki = a + 1; ki < p->nkernels; ki++) {
            if (!plan_kernel_has(&p->kernels[ki], rn))
                continue;
            found = 1;
            int dup = 0;
            for (int j = 0; j < nk; j++)
                dup |= readers[j] == ki;
            if (dup)
                continue;
            if (!takes_chain(&p->kernels[ki]) || nk == SJ_KMAX_OPERANDS)
                return 0;
            readers[nk++] = ki;
        }
        if (!found)
            return 0;   /* read by a step that is not a kernel */
    }
    if (nk == 0)
        return 0;
    Chain chains[SJ_KMAX_OPERANDS];
    for (int j = 0; j < nk; j++)
        if (chain_for(r, &p->kernels[readers[j]], v, &chains[j]))
            return 0;
    for (int j = 0; j < nk; j++)
        if (chain_join(r, &p->kernels[readers[j]], v, &chains[j]) < 0)
            return -1;
    r->recomputed[v] = 1;
    return 0;
}

static void count_reader(void *ctx, int32_t ni, int32_t v)
{
    (void)ni;
    ((int32_t *)ctx)[v + 1]++;
}

static void fill_reader(void *ctx, int32_t ni, int32_t v)
{
    Remat *r = ctx;
    int32_t at = r->rstart[v + 1]++;   /* rstart is shifted by one while filling */
    r->rnode[at] = ni;
}

int plan_remat(Graph *g, LowerPlan *p, const int32_t *last_use, uint8_t *recomputed)
{
    p->kernel_copies = 0;
    if (!sj_config.cpu_recompute)
        return 0;
    size_t nn = (size_t)(g->nnodes ? g->nnodes : 1), nv = (size_t)g->nvalues + 1;
    Remat r = {g,
               p,
               last_use,
               PyMem_Malloc(sizeof(int32_t) * (nn + 1)),
               PyMem_Malloc(sizeof(int32_t) * nn),
               recomputed,
               PyMem_Calloc(nv + 1, sizeof(int32_t)),
               NULL,
               0};
    int rc = -1;
    if (!r.writes || !r.first || !r.rstart)
        goto nomem;
    r.writes[0] = 0;
    for (int32_t ni = 0; ni < g->nnodes; ni++)
        r.writes[ni + 1] = r.writes[ni] + lower_node_writes(&g->nodes[ni]);
    for (int32_t ni = 0; ni < g->nnodes; ni++)
        r.first[ni] = -1;
    for (int32_t ki = p->nkernels - 1; ki >= 0; ki--)
        for (int32_t i = 0; i < p->kernels[ki].nnodes; i++)
            r.first[p->kernels[ki].nodes[i]] = ki;
    /* readers per value (a node reading a value twice is listed twice) */
    for (int32_t ni = 0; ni < g->nnodes; ni++)
        graph_node_reads(g, ni, count_reader, r.rstart);
    for (int32_t v = 0; v < g->nvalues; v++)
        r.rstart[v + 1] += r.rstart[v];
    r.rnode = PyMem_Malloc(sizeof(int32_t) * (size_t)(r.rstart[g->nvalues] ? r.rstart[g->nvalues] : 1));
    if (!r.rnode)
        goto nomem;
    /* fill: rstart[v + 1] walks from v's start; afterwards it is v's end again */
    memmove(r.rstart + 1, r.rstart, sizeof(int32_t) * (size_t)g->nvalues);
    r.rstart[0] = 0;
    for (int32_t ni = 0; ni < g->nnodes; ni++)
        graph_node_reads(g, ni, fill_reader, &r);
    for (int32_t a = 0; a < p->nkernels; a++) {
        if (!takes_chain(&p->kernels[a]))
            continue;
        /* the kernel's own nodes as planned (chains joined later come after them) */
        for (int32_t i = 0; i < p->kernels[a].nnodes; i++) {
            int32_t ni = p->kernels[a].nodes[i];
            int32_t v = g->nodes[ni].first_value;
            if (r.first[ni] != a || !pointwise_part(&p->kernels[a], ni) || !stored(&r, v) || !copyable(g, ni))
                continue;
            int graph_out = 0;
            for (int32_t o = 0; o < g->noutputs; o++)
                graph_out |= g->outputs[o] == v;
            if (!graph_out && try_value(&r, a, v) < 0)
                goto done;
        }
    }
    p->kernel_copies = r.ncopies;
    rc = 0;
    goto done;
nomem:
    PyErr_NoMemory();
done:
    PyMem_Free(r.writes);
    PyMem_Free(r.first);
    PyMem_Free(r.rstart);
    PyMem_Free(r.rnode);
    return rc;
}
