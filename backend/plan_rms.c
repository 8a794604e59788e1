/* RMS norm as one row kernel: the graph nodes
 *
 *     p = x ** 2 (or x * x, x.square())    m = p.mean(-1, keepdim=True)
 *     a = m + eps                          r = torch.rsqrt(a)
 *     y = x * r (or r * x)                 [z = y * w (or w * y), w of x's last dim]
 *
 * (T5's LayerNorm, Llama's, Qwen2's and Mistral's RMSNorm), each value read by the next
 * alone, become a KF_RMS_NORM kernel over x's rows: one pass sums x * x, then
 * rstd = 1 / sqrt(sum / N + eps) and one pass stores x * rstd (* w), with the float
 * epilogue that follows (take_epilogue). Without it they were three kernels: the mean of
 * squares, the (rows, 1) rsqrt, and the product, reading x twice. (The rms_norm op itself,
 * F.rms_norm / torch.rms_norm / nn.RMSNorm, is one node that plan_reduce.c plans into the
 * same flavour.)
 *
 * The kernel's nodes are the pattern's, in graph order (the row op spans all of them:
 * red.nextra counts those after the first), after the nodes of the pointwise kernel planned
 * before it when that kernel makes x (a residual sum: its prologue, stored as well when read
 * later); else p leaves that kernel, which then stores what else it made. Memory: node
 * lists are PyMem of the plan. */
#include <string.h>

#include "lower_int.h"

/* Node nj is v's only reader: last_use says nj and no node between v's and nj reads it. */
static int only_reader(const Graph *g, int32_t v, int32_t nj, const int32_t *last_use)
{
    if (last_use[v] != nj)
        return 0;
    for (int32_t i = 0; i < g->noutputs; i++)
        if (g->outputs[i] == v)
            return 0;
    int n = 0;
    for (int32_t ni = g->values[v].node + 1; ni <= nj; ni++)
        n += plan_node_reads_value(g, ni, v);
    return n == 1;
}

/* The next node after ni that is not a graph input, or -1. */
static int32_t next_node(const Graph *g, int32_t ni)
{
    for (int32_t nj = ni + 1; nj < g->nnodes; nj++)
        if (g->nodes[nj].op != OP_INPUT)
            return nj;
    return -1;
}

static int is_value(const Arg *a, int32_t v)
{
    return a && a->kind == ARG_VALUE && a->a == v;
}

/* A float32 pointwise node of the kernels' own (lowered), or 1. */
static int lowered_f32(Graph *g, int32_t ni, NodeLower *nl)
{
    return ni < 0 || lower_node_typed(g, ni, nl) || nl->ct != DT_F32 || nl->out != DT_F32 || nl->x[2];
}

/* The value a constant operand holds as a double, or 0 when it is not a real constant. */
static int const_double(const Graph *g, const Arg *a, double *d)
{
    if (!a || a->kind != ARG_CONST)
        return 0;
    PyObject *o = PyList_GET_ITEM(g->consts, a->a);
    if (!(PyFloat_Check(o) || (PyLong_Check(o) && !PyBool_Check(o))))
        return 0;
    *d = PyFloat_AsDouble(o);
    if (*d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

int plan_rms_node(Graph *g, int32_t ni, LowerPlan *out, Kernel *open, const int32_t *last_use, const ReduceInfo *red,
                  int rank, int32_t *last)
{
    const TensorMeta *mm = &g->values[g->nodes[ni].first_value].meta;
    if (!red->keepdim || rank < 1 || red->mask != 1u << (rank - 1) || mm->lib != LIB_TORCH || mm->dtype != DT_F32)
        return 1;
    /* p: the square of x, the last node of the open pointwise kernel */
    int32_t p = red->src, np = g->values[p].node;
    NodeLower nl;
    if (!open || open->flavour != KF_POINTWISE || open->rot || open->nnodes < 1 ||
        open->nodes[open->nnodes - 1] != np || lowered_f32(g, np, &nl) || !only_reader(g, p, ni, last_use))
        return 1;
    double d;
    int32_t x;
    if (g->nodes[np].op == OP_SQUARE && nl.x[0] && nl.x[0]->kind == ARG_VALUE)
        x = nl.x[0]->a;
    else if (g->nodes[np].op == OP_MUL && nl.x[0] && nl.x[0]->kind == ARG_VALUE && is_value(nl.x[1], nl.x[0]->a))
        x = nl.x[0]->a;
    else if (g->nodes[np].op == OP_POW && nl.x[0] && nl.x[0]->kind == ARG_VALUE && const_double(g, nl.x[1], &d) &&
             d == 2.0)
        x = nl.x[0]->a;
    else
        return 1;
    const TensorMeta *xm = &g->values[x].meta;
    if (xm->ndim != rank || xm->dtype != DT_F32 || xm->lib != LIB_TORCH || !lower_same_dims(xm, &g->values[p].meta))
        return 1;
    /* a = m + eps, r = rsqrt(a), y = x * r: consecutive, each read by the next alone */
    int32_t nodes[6] = {np, ni, -1, -1, -1, -1};
    int32_t cur = g->nodes[ni].first_value;
    double eps;
    int32_t na = next_node(g, ni);
    if (lowered_f32(g, na, &nl) || g->nodes[na].op != OP_ADD || nl.p[0] != 1.0 || !only_reader(g, cur, na, last_use))
        return 1;
    if (!((is_value(nl.x[0], cur) && const_double(g, nl.x[1], &eps)) ||
          (is_value(nl.x[1], cur) && const_double(g, nl.x[0], &eps))))
        return 1;
    nodes[2] = na;
    cur = g->nodes[na].first_value;
    int32_t nr = next_node(g, na);
    if (lowered_f32(g, nr, &nl) || g->nodes[nr].op != OP_RSQRT || !is_value(nl.x[0], cur) ||
        !only_reader(g, cur, nr, last_use))
        return 1;
    nodes[3] = nr;
    cur = g->nodes[nr].first_value;
    int32_t ny = next_node(g, nr);
    if (lowered_f32(g, ny, &nl) || g->nodes[ny].op != OP_MUL || !only_reader(g, cur, ny, last_use) ||
        !((is_value(nl.x[0], x) && is_value(nl.x[1], cur)) || (is_value(nl.x[1], x) && is_value(nl.x[0], cur))))
        return 1;
    nodes[4] = ny;
    int n = 5;
    /* z = y * w with w a float32 vector of x's last dim (the weight) */
    int32_t weight = -1;
    cur = g->nodes[ny].first_value;
    int32_t nw = next_node(g, ny);
    if (!lowered_f32(g, nw, &nl) && g->nodes[nw].op == OP_MUL && only_reader(g, cur, nw, last_use)) {
        const Arg *o = is_value(nl.x[0], cur) ? nl.x[1] : is_value(nl.x[1], cur) ? nl.x[0] : NULL;
        const TensorMeta *wm = o && o->kind == ARG_VALUE ? &g->values[o->a].meta : NULL;
        if (wm && o->a != cur && wm->ndim == 1 && wm->dtype == DT_F32 && wm->lib == LIB_TORCH &&
            wm->sym[0] == xm->sym[rank - 1] && (wm->sym[0] || wm->size[0] == xm->size[rank - 1])) {
            weight = o->a;
            nodes[n++] = nw;
        }
    }
    /* the open kernel becomes the row kernel when it makes x (not the weight, which the
     * kernel reads whole from memory) and is the last step (so nothing planned after it
     * reads what it makes): its other nodes are the prologue,
     * computed in the first pass, and the values read later are stored from there (a
     * residual sum) */
    int absorb =
        open->nnodes > 1 && plan_kernel_makes(g, open, x) && (weight < 0 || !plan_kernel_makes(g, open, weight)) &&
        out->nsteps > 0 && out->steps[out->nsteps - 1].kind == STEP_KERNEL &&
        &out->kernels[out->steps[out->nsteps - 1].index] == open && lower_same_dims(xm, &g->values[open->space].meta);
    int stores = 0;
    for (int32_t i = 0; absorb && i < open->nnodes - 1; i++)
        stores += last_use[g->nodes[open->nodes[i]].first_value] > nodes[n - 1];
    if (absorb && open->nin + stores + 4 < SJ_KMAX_OPERANDS - 2) {
        for (int i = 1; i < n; i++)
            if (plan_push((void **)&open->nodes, &open->nnodes, sizeof(int32_t), &nodes[i]) < 0)
                return -1;
        open->flavour = KF_RMS_NORM;
        memset(&open->red, 0, sizeof open->red);
        open->red.mask = red->mask;
        open->red.eps = eps;
        open->red.src = x;
        open->red.weight = weight;
        open->red.bias = -1;
        open->red.nextra = n - 1;
        if (weight >= 0)
            plan_add_input(open, weight);
        *last = nodes[n - 1];
        return 0;
    }
    /* else p leaves the open kernel: the rest of it (if anything) stores its own values */
    open->nnodes--;
    Kernel k;
    memset(&k, 0, sizeof k);
    k.rank = rank;
    k.lib = LIB_TORCH;
    k.flavour = KF_RMS_NORM;
    k.red.mask = red->mask;
    k.red.eps = eps;
    k.red.src = x;
    k.red.weight = weight;
    k.red.bias = -1;
    k.red.nextra = n - 1;
    snprintf(k.name, sizeof k.name, "sj_k%d", (int)out->nkernels);
    plan_add_input(&k, x);
    if (weight >= 0)
        plan_add_input(&k, weight);
    Step s = {STEP_KERNEL, out->nkernels};
    if (plan_push((void **)&out->kernels, &out->nkernels, sizeof k, &k) < 0 ||
        plan_push((void **)&out->steps, &out->nsteps, sizeof s, &s) < 0)
        return -1;
    Kernel *kk = &out->kernels[out->nkernels - 1];
    for (int i = 0; i < n; i++)
        if (plan_push((void **)&kk->nodes, &kk->nnodes, sizeof(int32_t), &nodes[i]) < 0)
            return -1;
    *last = nodes[n - 1];
    return 0;
}
