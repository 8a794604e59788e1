/* Partitioning a graph into steps: runs of pointwise nodes that lower.def computes, over
 * tensors of the kernel dtypes (lower_types.c) of one iteration space, become one fused
 * kernel each; every other node is an eager step (its original library call).
 *
 * A node joins the open kernel when it is lowerable, has the kernel's output shape (the
 * same dims, symbol for symbol), the same library, and reads only values that are either
 * made by the kernel or available before it. A value a kernel makes is written to memory
 * only when something after the kernel (a later node or the graph's outputs) reads it.
 * Each value that is not a graph output is released after the last step that makes or
 * reads it.
 *
 * Memory: the plan's arrays are PyMem; nothing here holds a Python reference. */
#include <string.h>

#include "lower_int.h"
#include "../shapes/rules.h"

/* A bound slot as a rule's BoundArg: 0, or 1 for a list or tuple (which no backend reader
 * takes apart). */
static int slot_bound(const Graph *g, const Arg *x, BoundArg *ba)
{
    memset(ba, 0, sizeof *ba);
    if (x->kind == ARG_VALUE) {
        ba->kind = BA_TENSOR;
        ba->meta = &g->values[x->a].meta;
    } else if (x->kind == ARG_CONST) {
        ba->kind = BA_CONST;
        ba->value = PyList_GET_ITEM(g->consts, x->a);   /* borrowed */
    } else if (x->kind != ARG_ABSENT) {
        return 1;
    }
    return 0;
}

/* lower_bind_node, and with `lists` a list or tuple slot bound as a BA_LIST of its items. */
static int bind_node(Graph *g, int32_t ni, NodeArgs *na, int lists)
{
    const Node *nd = &g->nodes[ni];
    const SchemaParam *ps;
    int n = graph_node_params(g, ni, &ps);
    /* numpy's out=array: the node writes into that array, not a buffer of its own */
    if (nd->row < 0 || (nd->flags & NODE_OUT))
        return 1;
    BoundArgs *b = &na->bound;
    b->n = n;
    int used = 0;   /* items of na->items the *varargs parameters take */
    for (int i = 0; i < n; i++) {
        const Arg *x = &g->pool[nd->bound + i];
        BoundArg *ba = &b->args[i];
        b->names[i] = ps[i].name;
        b->from[i] = -1;
        b->nfrom[i] = 0;
        na->src[i] = x->kind == ARG_VALUE || x->kind == ARG_CONST ? x : NULL;
        if ((ps[i].varargs && x->kind == ARG_TUPLE && x->a >= nd->args && x->a + x->n <= nd->args + nd->nargs) ||
            (lists && (x->kind == ARG_TUPLE || x->kind == ARG_LIST))) {
            /* the positional arguments it gathered (or the items): a list of their bound forms */
            if (used + x->n > SJ_MAX_PARAMS)
                return 1;
            memset(ba, 0, sizeof *ba);
            ba->kind = BA_LIST;
            ba->n = x->n;
            ba->items = &na->items[used];
            for (int32_t k = 0; k < x->n; k++)
                if (slot_bound(g, &g->pool[x->a + k], &na->items[used + k]) || na->items[used + k].kind == BA_ABSENT)
                    return 1;
            used += x->n;
            continue;
        }
        if (slot_bound(g, x, ba))
            return 1;
        if (ps[i].fixed)
            na->src[i] = NULL;   /* not an argument of the call */
    }
    return 0;
}

int lower_bind_node(Graph *g, int32_t ni, NodeArgs *na)
{
    return bind_node(g, ni, na, 0);
}

int lower_bind_node_lists(Graph *g, int32_t ni, NodeArgs *na)
{
    return bind_node(g, ni, na, 1);
}

int lower_node_args(Graph *g, int32_t ni, const Arg **a, const Arg **b, double p[2])
{
    NodeLower nl;
    if (lower_node_typed(g, ni, &nl) || nl.row->nin > 2 || nl.out != DT_F32 || nl.ct != DT_F32)
        return 1;
    for (int s = 0; s < 2; s++)
        if (nl.x[s] && nl.x[s]->kind == ARG_VALUE && g->values[nl.x[s]->a].meta.dtype != DT_F32)
            return 1;
    *a = nl.x[0];
    *b = nl.x[1];
    p[0] = nl.p[0];
    p[1] = nl.p[1];
    return 0;
}

/* ----------------------------------------------------------------- plan ---- */

int lower_same_dims(const TensorMeta *x, const TensorMeta *y)
{
    if (x->ndim != y->ndim)
        return 0;
    for (int i = 0; i < x->ndim; i++)
        if (x->sym[i] != y->sym[i] || (!x->sym[i] && x->size[i] != y->size[i]))
            return 0;
    return 1;
}

int plan_push(void **arr, int32_t *n, size_t item, const void *x)
{
    void *q = PyMem_Realloc(*arr, item * (size_t)(*n + 1));
    if (!q) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy((char *)q + item * (size_t)*n, x, item);
    *arr = q;
    (*n)++;
    return 0;
}

/* Adds value v as an input of k (once). 0, or 1 when k has no room left. */
int plan_add_input(Kernel *k, int32_t v)
{
    for (int32_t i = 0; i < k->nin; i++)
        if (k->ins[i] == v)
            return 0;
    if (k->nin + k->nout >= SJ_KMAX_OPERANDS - 2)
        return 1;
    k->ins[k->nin++] = v;
    return 0;
}

int lower_node_writes(const Node *nd)
{
    return (nd->flags & (NODE_INPLACE | NODE_OUT)) || (nd->op != OP_INPUT && op_info[nd->op].kind == OPK_MUTATION);
}

int plan_kernel_makes(const Graph *g, const Kernel *k, int32_t v)
{
    for (int32_t i = 0; i < k->nnodes; i++)
        if (g->nodes[k->nodes[i]].first_value == v)
            return 1;
    return 0;
}

struct value_reads {
    int32_t v;
    int n;
};

static void count_read(void *ctx, int32_t ni, int32_t v)
{
    (void)ni;
    struct value_reads *r = ctx;
    r->n += v == r->v;
}

int plan_node_reads_value(const Graph *g, int32_t ni, int32_t v)
{
    struct value_reads r = {v, 0};
    graph_node_reads(g, ni, count_read, &r);
    return r.n;
}

int plan_kernel_has(const Kernel *k, int32_t ni)
{
    for (int32_t i = 0; i < k->nnodes; i++)
        if (k->nodes[i] == ni)
            return 1;
    return 0;
}

/* 1 when a node outside k reads v (a merged kernel's nodes are not one run of the graph's
 * order, so "read after its last node" does not say it), or a node of k that another kernel
 * computes again (plan_remat's copies read v from memory there). */
static int read_outside(const Graph *g, const LowerPlan *p, const Kernel *k, int32_t v)
{
    for (int32_t i = 0; i < g->noutputs; i++)
        if (g->outputs[i] == v)
            return 1;
    for (int32_t ni = g->values[v].node + 1; ni < g->nnodes; ni++) {
        if (!plan_node_reads_value(g, ni, v))
            continue;
        if (!plan_kernel_has(k, ni))
            return 1;
        for (int32_t j = 0; j < p->nkernels; j++)
            if (&p->kernels[j] != k && plan_kernel_has(&p->kernels[j], ni))
                return 1;
    }
    return 0;
}

/* Which values made inside k (kernel ki) are read after it: its outputs. A reduction's
 * value (its last node: reductions take no epilogue) comes first, then the prologue values
 * it stores (lower_out_layout); a row kernel with a fused sum has its result and the sum.
 * A value is stored by the first kernel computing it (first[node]) unless every later
 * reader recomputes it (recomputed[v], plan_remat.c). */
static void find_outputs(const Graph *g, const LowerPlan *p, Kernel *k, int32_t ki, const int32_t *last_use,
                         const int32_t *first, const uint8_t *recomputed)
{
    k->nout = 0;
    if (k->nnodes == 0)
        return;   /* merged into its sibling (plan_sibling.c) */
    int32_t last = k->nodes[k->nnodes - 1];
    int reduces = k->flavour >= KF_SUM && k->flavour <= KF_MIN, sib = k->red.nsib;
    if (k->red.nsum) {
        /* the row's result, then the fused sum (read after the kernel wherever it was) */
        k->outs[k->nout++] = g->nodes[last].first_value;
        k->outs[k->nout++] = g->nodes[k->nodes[0]].first_value;
        return;
    }
    /* a layer or RMS norm with a prologue: its result is output 0 whatever else it stores */
    int row = (k->flavour == KF_RMS_NORM || k->flavour == KF_LAYER_NORM) && k->red.nextra + 1 + k->red.nepi < k->nnodes;
    if (reduces || row)
        k->outs[k->nout++] = g->nodes[k->nodes[k->nnodes - 1 - sib]].first_value;
    if (sib)
        k->outs[k->nout++] = g->nodes[last].first_value;
    for (int32_t i = 0; i < k->nnodes - reduces - sib - row; i++) {
        int32_t v = g->nodes[k->nodes[i]].first_value;
        if (first[k->nodes[i]] == ki && !recomputed[v] && (sib ? read_outside(g, p, k, v) : last_use[v] > last))
            k->outs[k->nout++] = v;
    }
    if (row && k->nout == 1 && last_use[k->outs[0]] <= last)
        k->nout = 0;   /* nothing it makes is read (a graph output's last use is nnodes) */
}

void lower_node_reads(const Graph *g, int32_t ni, void (*fn)(void *ctx, int32_t ni, int32_t v), void *ctx)
{
    graph_node_reads(g, ni, fn, ctx);
}

static void note_use(void *last_use, int32_t ni, int32_t v)
{
    ((int32_t *)last_use)[v] = ni;
}

/* 1 when kernel k's inputs and outputs outgrow SJ_KMAX_OPERANDS (the passes after the
 * planning bound add nodes and outputs it did not see). */
static int kernel_too_wide(const Kernel *k)
{
    return k->nin + k->nout > SJ_KMAX_OPERANDS - 2;
}

/* Kernels that store nothing (every value they make is recomputed by a later kernel, or
 * read by no one) leave the plan: neither built nor run. Kernels too wide for their
 * operands become eager steps of their nodes, in order: slower, never out of bounds.
 * Steps and kernels are renumbered; node_step (filled for the other steps so far)
 * follows. 0, or -1 with MemoryError. */
static int drop_dead_kernels(LowerPlan *p, int32_t *node_step, int32_t nnodes)
{
    int32_t gone = 0, extra = 0;
    for (int32_t i = 0; i < p->nkernels; i++) {
        const Kernel *k = &p->kernels[i];
        gone += k->nout == 0 || kernel_too_wide(k);
        extra += k->nout != 0 && kernel_too_wide(k) ? k->nnodes : 0;
    }
    if (gone == 0)
        return 0;
    Step *steps = PyMem_Malloc(sizeof(Step) * (size_t)(p->nsteps + extra + 1));
    int32_t *kmap = PyMem_Malloc(sizeof(int32_t) * (size_t)p->nkernels);
    int32_t *smap = PyMem_Malloc(sizeof(int32_t) * (size_t)(p->nsteps ? p->nsteps : 1));
    if (!steps || !kmap || !smap) {
        PyMem_Free(steps);
        PyMem_Free(kmap);
        PyMem_Free(smap);
        PyErr_NoMemory();
        return -1;
    }
    int32_t nk = 0, ns = 0;
    for (int32_t i = 0; i < p->nkernels; i++)
        kmap[i] = p->kernels[i].nout == 0 || kernel_too_wide(&p->kernels[i]) ? -1 : nk++;
    for (int32_t i = 0; i < p->nsteps; i++) {
        Step st = p->steps[i];
        smap[i] = -1;
        if (st.kind == STEP_KERNEL && kmap[st.index] < 0) {
            const Kernel *k = &p->kernels[st.index];
            if (k->nout == 0)
                continue;
            smap[i] = ns;
            for (int32_t j = 0; j < k->nnodes; j++)
                steps[ns++] = (Step){STEP_EAGER, k->nodes[j]};
            continue;
        }
        if (st.kind == STEP_KERNEL)
            st.index = kmap[st.index];
        smap[i] = ns;
        steps[ns++] = st;
    }
    for (int32_t ni = 0; ni < nnodes; ni++)
        if (node_step[ni] >= 0)
            node_step[ni] = smap[node_step[ni]];
    for (int32_t i = 0; i < ns; i++)   /* the nodes of unfused kernels: their own steps */
        if (steps[i].kind == STEP_EAGER)
            node_step[steps[i].index] = i;
    for (int32_t i = 0, j = 0; i < p->nkernels; i++) {
        if (kmap[i] < 0)
            PyMem_Free(p->kernels[i].nodes);
        else
            p->kernels[j++] = p->kernels[i];
    }
    p->nkernels = nk;
    PyMem_Free(p->steps);
    p->steps = steps;
    p->nsteps = ns;
    PyMem_Free(kmap);
    PyMem_Free(smap);
    return 0;
}

/* ------------------------------------------------------------- releases ---- */

struct late {
    const Graph *g;
    const int32_t *node_step;
    int32_t *at;        /* per value: the last step that makes or reads it */
};

static void note_step(void *ctx, int32_t ni, int32_t v)
{
    struct late *l = ctx;
    if (l->node_step[ni] > l->at[v])
        l->at[v] = l->node_step[ni];
}

/* p->release / p->release_at from node_step (the step that runs each node, -1 for inputs
 * and nodes no step runs). 0, or -1 with MemoryError. */
static int plan_releases(const Graph *g, LowerPlan *p, const int32_t *node_step)
{
    int32_t *at = PyMem_Malloc(sizeof(int32_t) * (size_t)(g->nvalues ? g->nvalues : 1));
    p->release_at = PyMem_Calloc((size_t)p->nsteps + 1, sizeof(int32_t));
    p->release = PyMem_Malloc(sizeof(int32_t) * (size_t)(g->nvalues ? g->nvalues : 1));
    if (!at || !p->release_at || !p->release) {
        PyMem_Free(at);
        PyErr_NoMemory();
        return -1;
    }
    for (int32_t v = 0; v < g->nvalues; v++)
        at[v] = node_step[g->values[v].node];
    struct late l = {g, node_step, at};
    for (int32_t ni = 0; ni < g->nnodes; ni++)
        lower_node_reads(g, ni, note_step, &l);
    p->step_out = PyMem_Calloc((size_t)(p->nsteps ? p->nsteps : 1), 1);
    if (!p->step_out) {
        PyMem_Free(at);
        PyErr_NoMemory();
        return -1;
    }
    for (int32_t i = 0; i < g->noutputs; i++) {
        int32_t v = g->outputs[i], s = g->values[v].node >= 0 ? node_step[g->values[v].node] : -1;
        if (s >= 0)
            p->step_out[s] = 1;
        at[v] = -1;   /* returned: kept to the end */
    }
    /* counting sort by step */
    for (int32_t v = 0; v < g->nvalues; v++)
        if (at[v] >= 0)
            p->release_at[at[v] + 1]++;
    for (int32_t i = 0; i < p->nsteps; i++)
        p->release_at[i + 1] += p->release_at[i];
    int32_t *fill = PyMem_Malloc(sizeof(int32_t) * (size_t)(p->nsteps ? p->nsteps : 1));
    if (!fill) {
        PyMem_Free(at);
        PyErr_NoMemory();
        return -1;
    }
    memcpy(fill, p->release_at, sizeof(int32_t) * (size_t)p->nsteps);
    for (int32_t v = 0; v < g->nvalues; v++)
        if (at[v] >= 0)
            p->release[fill[at[v]]++] = v;
    PyMem_Free(fill);
    PyMem_Free(at);
    return 0;
}

/* Cat node ni, a rotate_half plan_rot_mark chose: joins the open kernel (or opens one) with
 * its slices and negation before it, all computed as a rotated read of x. 0 planned; 1 when
 * it cannot be (a slice already taken by another step): the parts not yet planned become
 * eager steps and the cat is planned as any node; -1 with an exception. */
static int plan_rot_node(Graph *g, int32_t ni, LowerPlan *out, Kernel **open, int32_t *node_step, int32_t max_nodes)
{
    RotRead rr;
    int free_parts = !plan_rot_match(g, ni, &rr);
    for (int i = 0; free_parts && i < rr.nparts; i++)
        free_parts = node_step[rr.parts[i]] < 0;
    if (!free_parts) {
        for (int i = 0; i < rr.nparts; i++)
            if (node_step[rr.parts[i]] < 0) {
                Step s = {STEP_EAGER, rr.parts[i]};
                node_step[rr.parts[i]] = out->nsteps;
                if (plan_push((void **)&out->steps, &out->nsteps, sizeof s, &s) < 0)
                    return -1;
            }
        *open = NULL;
        return 1;
    }
    const TensorMeta *om = &g->values[g->nodes[ni].first_value].meta;
    Kernel *k = *open;
    if (k && (k->lib != (Lib)om->lib || !lower_same_dims(om, &g->values[k->space].meta) ||
              plan_kernel_makes(g, k, rr.x) || (max_nodes > 0 && k->nnodes >= max_nodes) || plan_add_input(k, rr.x)))
        k = NULL;
    if (!k) {
        Kernel nk;
        memset(&nk, 0, sizeof nk);
        nk.rank = om->ndim;
        nk.space = g->nodes[ni].first_value;
        nk.lib = (Lib)om->lib;
        snprintf(nk.name, sizeof nk.name, "sj_k%d", (int)out->nkernels);
        Step s = {STEP_KERNEL, out->nkernels};
        if (plan_push((void **)&out->kernels, &out->nkernels, sizeof nk, &nk) < 0 ||
            plan_push((void **)&out->steps, &out->nsteps, sizeof s, &s) < 0)
            return -1;
        k = &out->kernels[out->nkernels - 1];
        plan_add_input(k, rr.x);
    }
    for (int i = 0; i < rr.nparts; i++)
        if (plan_push((void **)&k->nodes, &k->nnodes, sizeof(int32_t), &rr.parts[i]) < 0)
            return -1;
    if (plan_push((void **)&k->nodes, &k->nnodes, sizeof(int32_t), &ni) < 0)
        return -1;
    k->rot++;
    *open = k;
    return 0;
}

/* How many values kernel k would store if node ni joined it: its nodes' values read after
 * ni (an upper bound of its outputs, find_outputs), ni's own included. */
static int32_t kernel_outputs_bound(const Graph *g, const Kernel *k, int32_t ni, const int32_t *last_use)
{
    int32_t n = 1;
    for (int32_t j = 0; j < k->nnodes; j++)
        n += last_use[g->nodes[k->nodes[j]].first_value] > ni;
    return n;
}

int lower_plan(Graph *g, LowerPlan *out)
{
    memset(out, 0, sizeof *out);
    /* a fused chain fits one translation unit (build.c's budget) */
    long unit_ops, graph_ops;
    if (lower_budget(&unit_ops, &graph_ops) < 0)
        return -1;
    int32_t max_nodes = unit_ops <= 0                     ? 0
                        : unit_ops > 2 * LOWER_KERNEL_OPS ? (int32_t)(unit_ops - LOWER_KERNEL_OPS)
                                                          : LOWER_KERNEL_OPS;
    /* last reader of each value (graph outputs read at the end: nnodes) */
    int32_t *last_use = PyMem_Calloc((size_t)(g->nvalues ? g->nvalues : 1), sizeof(int32_t));
    if (!last_use) {
        PyErr_NoMemory();
        return -1;
    }
    for (int32_t v = 0; v < g->nvalues; v++)
        last_use[v] = -1;
    for (int32_t ni = 0; ni < g->nnodes; ni++)
        lower_node_reads(g, ni, note_use, last_use);
    for (int32_t i = 0; i < g->noutputs; i++)
        last_use[g->outputs[i]] = g->nnodes;
    /* the step that runs each node (-1: inputs); kernels' nodes are filled in at the end */
    int32_t *node_step = PyMem_Malloc(sizeof(int32_t) * (size_t)(g->nnodes ? g->nnodes : 1));
    if (!node_step) {
        PyMem_Free(last_use);
        PyErr_NoMemory();
        return -1;
    }
    for (int32_t ni = 0; ni < g->nnodes; ni++)
        node_step[ni] = -1;
    /* rotate_half patterns: their slices and negation wait for their cat (plan_rot.c);
     * nodes that read no graph input: computed once, by the first step (step_const.c) */
    int32_t *rot_of = PyMem_Malloc(sizeof(int32_t) * (size_t)(g->nnodes ? g->nnodes : 1));
    uint8_t *fold = PyMem_Malloc((size_t)(g->nnodes ? g->nnodes : 1)), *recomputed = NULL;
    if (!rot_of || !fold) {
        PyErr_NoMemory();
        goto fail;
    }
    if (plan_rot_mark(g, rot_of, last_use) < 0 || step_const_plan(g, out, fold, node_step) < 0)
        goto fail;
    Kernel *open = NULL;
    for (int32_t ni = 0; ni < g->nnodes; ni++) {
        const Node *nd = &g->nodes[ni];
        if (nd->op == OP_INPUT)
            continue;
        if (fold[ni] || (rot_of[ni] >= 0 && rot_of[ni] != ni))
            continue;   /* computed once, or planned with its cat */
        if (rot_of[ni] == ni) {
            int r = plan_rot_node(g, ni, out, &open, node_step, max_nodes);
            if (r < 0)
                goto fail;
            if (r == 0)
                continue;
        }
        int32_t before = out->nsteps;
        int32_t upto = -1;   /* the kinds planned node by node, in steps.def's order */
        for (int kind = 0; kind < STEP_COUNT && upto == -1; kind++)
            if (step_kinds[kind].node_plan)
                upto = step_kinds[kind].node_plan(g, ni, out);
        if (upto < -1)
            goto fail;
        if (upto >= ni) {   /* a oneDNN step: it closes the open kernel */
            /* it runs the nodes [ni, upto] but the eager steps pushed before it (size
             * arithmetic it moved ahead) */
            for (int32_t i = before; i < out->nsteps - 1; i++)
                if (out->steps[i].kind == STEP_EAGER)
                    node_step[out->steps[i].index] = i;
            for (int32_t nj = ni; nj <= upto; nj++)
                if (node_step[nj] < 0 && g->nodes[nj].op != OP_INPUT)
                    node_step[nj] = out->nsteps - 1;
            open = NULL;
            ni = upto;
            continue;
        }
        NodeLower nl;
        int ok = !lower_node_typed(g, ni, &nl);
        if (!ok) {
            /* a reduction or row op: a kernel of its own, or the open kernel's last node with the
             * open kernel's nodes as its prologue (plan_reduce.c) */
            int32_t last = ni;
            int red = plan_reduce_node(g, ni, out, open, last_use, &last);
            if (red < 0)
                goto fail;
            if (red == 0) {
                open = NULL;
                ni = last;   /* past an epilogue the row kernel took */
                continue;
            }
        }
        const TensorMeta *om = &g->values[nd->first_value].meta;
        if (open && !(ok && (Lib)om->lib == open->lib && lower_same_dims(om, &g->values[open->space].meta)))
            open = NULL;
        if (ok && open && max_nodes > 0 && open->nnodes >= max_nodes)
            open = NULL;   /* a unit's worth of ops: the chain goes on in a new kernel */
        if (ok && open && kernel_outputs_bound(g, open, ni, last_use) + open->nin + 3 >= SJ_KMAX_OPERANDS - 2)
            open = NULL;   /* what it makes and is read later could outgrow the operands */
        if (ok && open) {
            /* the operands it reads from outside become the kernel's inputs */
            int full = 0;
            for (int k = 0; k < 3; k++)
                if (nl.x[k] && nl.x[k]->kind == ARG_VALUE && !plan_kernel_makes(g, open, nl.x[k]->a))
                    full |= plan_add_input(open, nl.x[k]->a);
            if (full)
                open = NULL;
        }
        if (ok && !open) {
            Kernel k;
            memset(&k, 0, sizeof k);
            k.rank = om->ndim;
            k.space = nd->first_value;
            k.lib = (Lib)om->lib;
            snprintf(k.name, sizeof k.name, "sj_k%d", (int)out->nkernels);
            Step s = {STEP_KERNEL, out->nkernels};
            if (plan_push((void **)&out->kernels, &out->nkernels, sizeof k, &k) < 0 ||
                plan_push((void **)&out->steps, &out->nsteps, sizeof s, &s) < 0)
                goto fail;
            open = &out->kernels[out->nkernels - 1];
            for (int k2 = 0; k2 < 3; k2++)
                if (nl.x[k2] && nl.x[k2]->kind == ARG_VALUE)
                    plan_add_input(open, nl.x[k2]->a);
        }
        if (ok) {
            if (plan_push((void **)&open->nodes, &open->nnodes, sizeof(int32_t), &ni) < 0)
                goto fail;
            continue;
        }
        Step s = {STEP_EAGER, ni};
        node_step[ni] = out->nsteps;
        if (plan_push((void **)&out->steps, &out->nsteps, sizeof s, &s) < 0)
            goto fail;
    }
    recomputed = PyMem_Calloc((size_t)(g->nvalues ? g->nvalues : 1), 1);
    if (!recomputed) {
        PyErr_NoMemory();
        goto fail;
    }
    if (plan_remat(g, out, last_use, recomputed) < 0 || plan_siblings(g, out, node_step) < 0)
        goto fail;
    /* the first kernel computing each node (in rot_of's storage, no longer needed) */
    int32_t *first = (int32_t *)rot_of;
    for (int32_t ni = 0; ni < g->nnodes; ni++)
        first[ni] = -1;
    for (int32_t i = out->nkernels - 1; i >= 0; i--)
        for (int32_t j = 0; j < out->kernels[i].nnodes; j++)
            first[out->kernels[i].nodes[j]] = i;
    for (int32_t i = 0; i < out->nkernels; i++)
        find_outputs(g, out, &out->kernels[i], i, last_use, first, recomputed);
    if (drop_dead_kernels(out, node_step, g->nnodes) < 0)
        goto fail;
    /* a node a later kernel recomputes is the last such kernel's (what it reads is held
     * until then: plan_releases) */
    for (int32_t i = 0; i < out->nsteps; i++)
        if (out->steps[i].kind == STEP_KERNEL) {
            const Kernel *k = &out->kernels[out->steps[i].index];
            for (int32_t j = 0; j < k->nnodes; j++)
                node_step[k->nodes[j]] = i;
        }
    for (int kind = 0; kind < STEP_COUNT; kind++)   /* rewrites of eager steps (steps.def) */
        if (step_kinds[kind].pass && step_kinds[kind].pass(g, out, node_step) < 0)
            goto fail;
    step_matmul_layouts(g, out, node_step);   /* (reads the chains the passes made) */
    if (plan_releases(g, out, node_step) < 0)
        goto fail;
    out->node_step = node_step;
    PyMem_Free(recomputed);
    PyMem_Free(fold);
    PyMem_Free(rot_of);
    PyMem_Free(last_use);
    return 0;
fail:
    PyMem_Free(recomputed);
    PyMem_Free(fold);
    PyMem_Free(rot_of);
    PyMem_Free(node_step);
    PyMem_Free(last_use);
    lower_plan_free(out);
    return -1;
}

void lower_plan_free(LowerPlan *p)
{
    for (int kind = 0; kind < STEP_COUNT; kind++)
        if (step_kinds[kind].free)
            step_kinds[kind].free(p);
    PyMem_Free(p->steps);
    PyMem_Free(p->release);
    PyMem_Free(p->release_at);
    PyMem_Free(p->step_out);
    PyMem_Free(p->node_step);
    memset(p, 0, sizeof *p);
}
