/* Sibling reductions: two float sums (or two means) over the same iteration space and the
 * same dims, where the later one reads nothing made after the earlier one's step and no
 * node between them writes into a tensor, become one kernel with two results. Its loop
 * computes the prologues both share once per element: numpy's column moments sum z**3 and
 * z**4 of z = (x - mu) / sd, and the two kernels each divided every element; one kernel
 * divides once and reads x once.
 *
 * The merged kernel keeps the earlier step. Its nodes are the union of both prologues in
 * graph order (a node both recompute appears once), then the earlier reduction, then the
 * later one (red.nsib = 1, red.sib_src its reduced value); its outputs are both results,
 * then the prologue values read outside it (find_outputs in plan.c). The later kernel is
 * left with no node and leaves the plan with the other dead kernels.
 *
 * Runs after plan_remat, before the outputs are chosen. Memory: node lists are PyMem of the
 * plan. */
#include <stdlib.h>
#include <string.h>

#include "lower_int.h"

#define SIB_MAX_GAP 16     /* steps looked ahead for a sibling */
#define SIB_MAX_NODES 64   /* nodes of a merged kernel: one unit of the compile budget */

static int is_float_sum(const Graph *g, const Kernel *k)
{
    if ((k->flavour != KF_SUM && k->flavour != KF_MEAN) || k->nnodes < 1 || k->red.nsib || k->red.nsum || k->red.nepi ||
        k->rot || k->rank < 1 || k->red.mask == (1u << k->rank) - 1)
        return 0;   /* a whole-tensor reduction keeps its split across the threads */
    DType t = (DType)g->values[g->nodes[k->nodes[k->nnodes - 1]].first_value].meta.dtype;
    return t == DT_F32 || t == DT_F64;
}

static int siblings(const Graph *g, const Kernel *a, const Kernel *b)
{
    return is_float_sum(g, b) && a->flavour == b->flavour && a->lib == b->lib && a->rank == b->rank &&
           a->red.mask == b->red.mask && a->red.keepdim == b->red.keepdim &&
           g->values[g->nodes[a->nodes[a->nnodes - 1]].first_value].meta.dtype ==
               g->values[g->nodes[b->nodes[b->nnodes - 1]].first_value].meta.dtype &&
           lower_same_dims(&g->values[a->red.src].meta, &g->values[b->red.src].meta);
}

/* The step that makes value v: -1 for a graph input, else the first step whose kernel has
 * its node or the step node_step gives. */
static int32_t made_at(const Graph *g, const LowerPlan *p, const int32_t *node_step, int32_t v)
{
    int32_t ni = g->values[v].node;
    if (g->nodes[ni].op == OP_INPUT)
        return -1;
    if (node_step[ni] >= 0)
        return node_step[ni];
    for (int32_t s = 0; s < p->nsteps; s++)
        if (p->steps[s].kind == STEP_KERNEL && plan_kernel_makes(g, &p->kernels[p->steps[s].index], v))
            return s;
    return p->nsteps;   /* not found: never merged across */
}

static int cmp_i32(const void *x, const void *y)
{
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return (a > b) - (a < b);
}

/* b joins a (the step sa). 1 merged, 0 not (a and b untouched), -1 MemoryError. */
static int merge(Graph *g, LowerPlan *p, const int32_t *node_step, int32_t sa, Kernel *a, Kernel *b)
{
    int32_t ra = a->nodes[a->nnodes - 1], rb = b->nodes[b->nnodes - 1];
    for (int32_t nj = ra + 1; nj < rb; nj++)
        if (lower_node_writes(&g->nodes[nj]))
            return 0;   /* b's inputs may differ at a's step */
    for (int32_t i = 0; i < b->nin; i++) {
        if (b->ins[i] == g->nodes[ra].first_value)
            return 0;   /* b reads a's result: it comes after a, not beside it */
        if (!plan_kernel_makes(g, a, b->ins[i]) && made_at(g, p, node_step, b->ins[i]) >= sa)
            return 0;
    }
    int32_t n = a->nnodes + b->nnodes;
    if (n > SIB_MAX_NODES)
        return 0;
    int32_t *nodes = PyMem_Malloc(sizeof(int32_t) * (size_t)n);
    if (!nodes) {
        PyErr_NoMemory();
        return -1;
    }
    int32_t m = 0;
    for (int32_t i = 0; i < a->nnodes - 1; i++)
        nodes[m++] = a->nodes[i];
    for (int32_t i = 0; i < b->nnodes - 1; i++)
        nodes[m++] = b->nodes[i];
    qsort(nodes, (size_t)m, sizeof *nodes, cmp_i32);
    int32_t u = 0;
    for (int32_t i = 0; i < m; i++)
        if (u == 0 || nodes[u - 1] != nodes[i])
            nodes[u++] = nodes[i];
    nodes[u++] = ra;
    nodes[u++] = rb;
    Kernel t = *a;
    t.nodes = nodes;
    t.nnodes = u;
    /* inputs: both kernels', less what the merged kernel makes itself */
    t.nin = 0;
    int full = 0;
    for (int pass = 0; pass < 2; pass++) {
        const Kernel *k = pass ? b : a;
        for (int32_t i = 0; i < k->nin; i++)
            if (!plan_kernel_makes(g, &t, k->ins[i]))
                full |= plan_add_input(&t, k->ins[i]);
    }
    /* every prologue value might be stored: keep room for them and both results */
    if (full || t.nin + (u - 2) + 2 > SJ_KMAX_OPERANDS - 2) {
        PyMem_Free(nodes);
        return 0;
    }
    t.red.nsib = 1;
    t.red.sib_src = b->red.src;
    PyMem_Free(a->nodes);
    *a = t;
    PyMem_Free(b->nodes);
    b->nodes = NULL;
    b->nnodes = 0;
    b->nin = 0;
    return 1;
}

int plan_siblings(Graph *g, LowerPlan *p, const int32_t *node_step)
{
    for (int32_t sa = 0; sa < p->nsteps; sa++) {
        if (p->steps[sa].kind != STEP_KERNEL)
            continue;
        Kernel *a = &p->kernels[p->steps[sa].index];
        if (!is_float_sum(g, a))
            continue;
        for (int32_t sb = sa + 1; sb < p->nsteps && sb <= sa + SIB_MAX_GAP; sb++) {
            if (p->steps[sb].kind != STEP_KERNEL)
                continue;
            Kernel *b = &p->kernels[p->steps[sb].index];
            if (!siblings(g, a, b))
                continue;
            int r = merge(g, p, node_step, sa, a, b);
            if (r < 0)
                return -1;
            if (r > 0)
                break;
        }
    }
    return 0;
}
