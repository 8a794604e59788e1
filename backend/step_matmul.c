/* The matmul family as oneDNN steps: matmul / @ / mm / bmm / linear / addmm on float32
 * torch tensors and numpy arrays, planned from the graph and run through one oneDNN
 * primitive per layout (dnnl_api.c, cached by primcache.c).
 *
 * Plan: a node joins when its output needs no grad, its operands are float32 values of
 * its library and the ranks fit: a 2-D right operand (matmul by a matrix, mm, linear,
 * addmm) folds the left operand's leading dims into the rows, one 2-D product that can
 * take a bias; a batched right operand (bmm, batched matmul) keeps up to 4 dims, batch
 * dims broadcast, no bias. The pointwise nodes right after it (inputs between them do not
 * count) fold in as post-ops while each reads only the previous result, which nothing
 * else reads: relu, gelu (erf or tanh), tanh, sigmoid, silu, + or - or * a Python number,
 * + a [N] row (the bias when it comes first on a 2-D product), and the written-out
 * activations pattern.c recognises (gelu_new's eight nodes: one gelu_tanh). A view or
 * reshape of the product that keeps its last dim may come first (GPT-2's Conv1D is
 * addmm(bias, x.view(-1, K), w).view(..., N)): the post-ops apply to the product's buffer
 * and the view node runs on it afterwards. Size arithmetic between the folded nodes (a
 * dynamic view's sizes) that reads only earlier values runs as eager steps before the step.
 *
 * Run: sizes and strides come from the live operands. A linear's weight [N, K] is passed
 * as its transpose (a layout, not a copy). An operand whose innermost two dims are neither
 * row- nor column-major, or whose dims overlap, is copied to a contiguous one first
 * (Tensor.contiguous / ndarray.copy). A call oneDNN refuses, a zero inner size, or an
 * operand unlike the plan's runs the step's nodes eagerly: never wrong, only slower.
 *
 * Memory: the steps are a PyMem array of the plan; operands read at run time are borrowed
 * from vals[] except the copies, which the run owns and drops before returning. */
#include <stdlib.h>
#include <string.h>

#include "lower_int.h"
#include "dnnl_api.h"
#include "../shapes/rules.h"

#define MM_MAX_FUSED 24   /* nodes folded into one step (a written-out gelu is 8) */
#define MM_KEPT_SLOTS \
    64  /* weights one step keeps row-major copies of (the layers of
                             a deep model: Llama-2-70B has 80) */

/* A row-major copy of a weight, valid while it is the weight's (KeptId, lower.h). Slots
 * are separate blocks so that a run holding one with the GIL released keeps its pointer
 * while another thread fills other slots. */
typedef struct {
    KeptId id;          /* id.wref NULL: free */
    char *raw;          /* aligned_alloc'd block holding buf, or NULL */
    float *buf;         /* K x N inside raw */
    int64_t k, n;
    uint64_t last_use;
    int pins;           /* runs reading buf with the GIL released: not replaced */
    int finite;         /* the weight's elements are all finite: 1, 0, or -1 not known */
} MmKept;

struct MatmulStep {
    int32_t node;                    /* the matmul node */
    int32_t a, b, bias;              /* value ids; bias -1 when none */
    int32_t out;                     /* the value the step writes (the last fused node's) */
    int32_t fused[MM_MAX_FUSED];     /* the nodes folded in (view, post-ops, bias), in order */
    int nfused;
    int32_t view;                    /* a view/reshape of the product the post-ops follow
                                        (Conv1D's addmm(...).view(...)), or -1 */
    int32_t post_arg[MM_MAX_POST];   /* MMPO_ADD_ROW: the row's value id; else -1 */
    MmPost post[MM_MAX_POST];
    int npost;
    int ra, rb;                      /* ranks of a and b in the graph */
    int trans_b;                     /* linear: b is [N, K] */
    int batched;                     /* b has batch dims: no folding, no bias */
    Lib lib;
    int64_t calls, fallbacks;
    /* Column-major 2-D weights that live across calls (graph inputs: linear's weight)
     * kept as row-major copies: oneDNN 2.6.3's runtime-dims GEMM is up to 1.5x slower on
     * the transposed layout (64x1024 @ 1024x256: 454 vs 294 us, measured). One slot per
     * weight the step has seen, up to MM_KEPT_SLOTS: the layers of a model share one step
     * when their modules are guarded by type (after a graph break inside a layer's
     * forward), each with its own weight. */
    MmKept *kept[MM_KEPT_SLOTS];     /* owned (malloc), NULL: not made yet */
    uint64_t kept_ticks;
    int64_t kept_copies;
    int lossy;                       /* an eltwise post-op that may lose NaN (lower_finite) */
    KeptFinite bfin;                 /* whether b (a weight) is finite, when lossy */
    int64_t nonfinite;               /* calls run eagerly: an operand was inf or NaN, lossy */
    /* The product may keep the row order of a left operand whose leading dims are a
     * permuted dense block (step_matmul_layouts): written in a's memory order, laid out as
     * a is; no copy of a first. */
    int rows_in_order;
    int64_t in_order;                /* calls that did */
};

/* ----------------------------------------------------------------- plan ---- */

static int f32_value(const Graph *g, int32_t v, Lib lib)
{
    const TensorMeta *m = &g->values[v].meta;
    return v >= 0 && m->dtype == DT_F32 && m->lib == lib && !m->symint && !m->np_scalar;
}

/* 1 when the bound argument is absent, None, or the Python number one (addmm's alpha). */
static int absent_or(const BoundArg *ba, int one)
{
    if (!ba || ba->kind == BA_ABSENT || (ba->kind == BA_CONST && ba->value == Py_None))
        return 1;
    if (!one || ba->kind != BA_CONST || !(PyLong_Check(ba->value) || PyFloat_Check(ba->value)))
        return 0;
    double d;
    return !lower_const_number(ba->value, &d) && d == 1.0;
}

/* The operands of the product: 0 and s filled, or 1 when node ni is not one we take. */
static int plan_product(Graph *g, int32_t ni, MatmulStep *s)
{
    const Node *nd = &g->nodes[ni];
    NodeArgs na;
    const BoundArgs *b = &na.bound;
    const TensorMeta *om = &g->values[nd->first_value].meta;
    if (nd->nout != 1 || (nd->flags & NODE_INPLACE) || om->dtype != DT_F32 || om->requires_grad || om->symint ||
        om->np_scalar || lower_bind_node(g, ni, &na))
        return 1;
    s->lib = (Lib)om->lib;
    s->bias = -1;
    const char *known[5] = {"input", "other", NULL, NULL, NULL};
    switch (nd->op) {
    case OP_MATMUL:
    case OP_MM:
    case OP_BMM:
        s->a = lower_value_of(g, ba_get(b, "input"));
        s->b = lower_value_of(g, ba_get(b, "other"));
        break;
    case OP_LINEAR:
        s->a = lower_value_of(g, ba_get(b, "input"));
        s->b = lower_value_of(g, ba_get(b, "weight"));
        s->trans_b = 1;
        known[1] = "weight";
        known[2] = "bias";
        if (!absent_or(ba_get(b, "bias"), 0) && (s->bias = lower_value_of(g, ba_get(b, "bias"))) < 0)
            return 1;
        break;
    case OP_ADDMM:
        s->a = lower_value_of(g, ba_get(b, "mat1"));
        s->b = lower_value_of(g, ba_get(b, "mat2"));
        s->bias = lower_value_of(g, ba_get(b, "input"));
        known[1] = "mat1";
        known[2] = "mat2";
        known[3] = "beta";
        known[4] = "alpha";
        if (s->bias < 0 || !absent_or(ba_get(b, "beta"), 1) || !absent_or(ba_get(b, "alpha"), 1))
            return 1;
        break;
    default:
        return 1;
    }
    /* anything else passed (out=, numpy's keywords) keeps the node eager */
    for (int i = 0; i < b->n; i++) {
        int ok = b->args[i].kind == BA_ABSENT;
        for (int k = 0; k < 5 && !ok; k++)
            ok = known[k] && !strcmp(b->names[i], known[k]);
        if (!ok)
            return 1;
    }
    if (s->a < 0 || s->b < 0 || !f32_value(g, s->a, s->lib) || !f32_value(g, s->b, s->lib))
        return 1;
    s->ra = g->values[s->a].meta.ndim;
    s->rb = g->values[s->b].meta.ndim;
    s->batched = s->rb > 2;
    if (s->rb < 2 || s->ra < 1 || (s->batched && (s->ra < 2 || s->ra > MM_MAX_RANK || s->rb > MM_MAX_RANK)))
        return 1;
    if (s->bias >= 0) {   /* a [N] row only (addmm's [M, N] input stays eager) */
        const TensorMeta *bm = &g->values[s->bias].meta;
        if (!f32_value(g, s->bias, s->lib) || bm->ndim != 1 || s->batched)
            return 1;
    }
    return 0;
}

/* The Python number operand x of a fused node: 0 and its value in *c, else 1. */
static int number_arg(Graph *g, const Arg *x, double *c)
{
    if (!x || x->kind != ARG_CONST)
        return 1;
    return lower_const_number(PyList_GET_ITEM(g->consts, x->a), c);   /* borrowed */
}

/* 1 when x is a [N] float32 row matching the last dim of v's meta. */
static int row_arg(Graph *g, const Arg *x, int32_t v, Lib lib)
{
    if (!x || x->kind != ARG_VALUE || !f32_value(g, x->a, lib))
        return 0;
    const TensorMeta *r = &g->values[x->a].meta, *m = &g->values[v].meta;
    int last = m->ndim - 1;
    return r->ndim == 1 && !r->requires_grad && r->sym[0] == m->sym[last] && (r->sym[0] || r->size[0] == m->size[last]);
}

/* 1 when node nj is F.gelu(v, approximate='tanh') (kernels leave it to eager). */
static int gelu_tanh_of(Graph *g, int32_t nj, int32_t v)
{
    NodeArgs na;
    int input = 0, tanh = 0;
    if (g->nodes[nj].op != OP_GELU || lower_bind_node(g, nj, &na))
        return 0;
    for (int i = 0; i < na.bound.n; i++) {
        const BoundArg *ba = &na.bound.args[i];
        const char *name = na.bound.names[i];
        if (ba->kind == BA_ABSENT)
            continue;
        if (!strcmp(name, "input") && na.src[i] && na.src[i]->kind == ARG_VALUE && na.src[i]->a == v)
            input = 1;
        else if (!strcmp(name, "approximate") && ba->kind == BA_CONST && PyUnicode_Check(ba->value) &&
                 PyUnicode_CompareWithASCIIString(ba->value, "tanh") == 0)
            tanh = 1;
        else
            return 0;
    }
    return input && tanh;
}

/* 1 when oneDNN may use AVX-512 here (its effective ISA: the CPU and the env caps, as it
 * decides itself). Read once: oneDNN fixes it at its first use too. */
static int dnnl_may_use_avx512(void)
{
    static int avx512 = -1;
    if (avx512 < 0)
        avx512 = dnnl_api_avx512();
    return avx512;
}

/* 1 when post-op kind k costs less folded than as the generated kernel it replaces.
 * oneDNN 2.6's gemm:jit matmul without AVX-512 applies the tanh-based eltwise post-ops
 * slowly: a Linear(128, 512) on (8, 128, 128), 1 thread, ONEDNN_MAX_CPU_ISA=AVX2, took
 * 5.2-6.1 ms with tanh and 5.7-6.4 ms with gelu_tanh folded, against 1.1 ms bare and
 * 1.3-1.5 ms with relu, gelu (erf), silu or sigmoid folded; as matmul then kernel the
 * gelu_tanh pair takes 1.5 ms. With AVX-512 every kind costs 0.56-0.77 ms folded, so
 * there all fold (one pass fewer over the product when memory is the bound). */
static int post_folds(int k)
{
    return (k != MMPO_TANH && k != MMPO_GELU_TANH) || dnnl_may_use_avx512();
}

/* Node nj as a post-op on value v: 0 and *po (and *arg for a row) filled, else 1. */
static int as_post(Graph *g, MatmulStep *s, int32_t nj, int32_t v, MmPost *po, int32_t *arg)
{
    const Node *nd = &g->nodes[nj];
    const Arg *x, *y;
    double p[2], c;
    const TensorMeta *om = &g->values[nd->first_value].meta;
    if (nd->nout != 1 || om->dtype != DT_F32 || om->requires_grad || om->lib != s->lib ||
        !lower_same_dims(om, &g->values[v].meta))
        return 1;
    memset(po, 0, sizeof *po);
    *arg = -1;
    if (gelu_tanh_of(g, nj, v)) {
        po->kind = MMPO_GELU_TANH;
        return !post_folds(MMPO_GELU_TANH);
    }
    if (lower_node_args(g, nj, &x, &y, p))
        return 1;
    int xv = x && x->kind == ARG_VALUE && x->a == v, yv = y && y->kind == ARG_VALUE && y->a == v;
    switch (nd->op) {
    case OP_RELU:
        po->kind = MMPO_RELU;
        return !xv;
    case OP_GELU:
        po->kind = MMPO_GELU_ERF;
        return !xv;   /* lower_node_args refuses 'tanh' */
    case OP_TANH:
        po->kind = MMPO_TANH;
        return !xv || !post_folds(MMPO_TANH);
    case OP_SIGMOID:
        po->kind = MMPO_SIGMOID;
        return !xv;
    case OP_SILU:
        po->kind = MMPO_SILU;
        po->alpha = 1.f;
        return !xv;
    case OP_ADD:   /* x + p0 * y */
        po->kind = MMPO_LINEAR;
        if (xv && !number_arg(g, y, &c)) {
            po->alpha = 1.f;
            po->beta = (float)(p[0] * c);
            return 0;
        }
        if (yv && !number_arg(g, x, &c)) {
            po->alpha = (float)p[0];
            po->beta = (float)c;
            return 0;
        }
        if (p[0] == 1.0 && !s->batched && (xv || yv) && row_arg(g, xv ? y : x, v, s->lib)) {
            po->kind = MMPO_ADD_ROW;
            *arg = (xv ? y : x)->a;
            return 0;
        }
        return 1;
    case OP_SUB:   /* x - p0 * y */
        po->kind = MMPO_LINEAR;
        po->alpha = 1.f;
        if (!xv || number_arg(g, y, &c))
            return 1;
        po->beta = (float)(-p[0] * c);
        return 0;
    case OP_MUL:
        po->kind = MMPO_LINEAR;
        if ((xv && !number_arg(g, y, &c)) || (yv && !number_arg(g, x, &c))) {
            po->alpha = (float)c;
            return 0;
        }
        return 1;
    default:
        return 1;
    }
}

/* 1 when node nj is a view or reshape of the product v (its only reader) that keeps
 * the last dim: post-ops may follow it, applied to the product's buffer. */
static int passes_view(Graph *g, const MatmulStep *s, int32_t nj, int32_t v)
{
    const Node *nd = &g->nodes[nj];
    const Arg *in = graph_node_arg(g, nj, "input");
    if ((nd->op != OP_VIEW && nd->op != OP_RESHAPE) || nd->nout != 1 || (nd->flags & (NODE_INPLACE | NODE_OUT)) ||
        !in || in->kind != ARG_VALUE || in->a != v)
        return 0;
    const TensorMeta *om = &g->values[nd->first_value].meta, *pm = &g->values[v].meta;
    int lo = om->ndim - 1, lp = pm->ndim - 1;
    return om->ndim >= 1 && om->dtype == DT_F32 && om->lib == s->lib && !om->requires_grad &&
           om->sym[lo] == pm->sym[lp] && (om->sym[lo] || om->size[lo] == pm->size[lp]);
}

struct before {
    const Graph *g;
    int32_t ni;
    int ok;
};

static void read_before(void *ctx, int32_t nj, int32_t v)
{
    struct before *b = ctx;
    (void)nj;
    b->ok &= b->g->values[v].node < b->ni;
}

/* 1 when node nj is Python int arithmetic on sizes (a dynamic view's sizes) reading only
 * values made before node ni: it may run before the step that starts at ni. */
static int hoistable(Graph *g, int32_t nj, int32_t ni)
{
    struct before b = {g, ni, 1};
    if (op_info[g->nodes[nj].op].kind != OPK_SIZE || (g->nodes[nj].flags & NODE_INPLACE))
        return 0;
    lower_node_reads(g, nj, read_before, &b);
    return b.ok;
}

int32_t step_matmul_plan(Graph *g, int32_t ni, LowerPlan *p)
{
    MatmulStep s;
    memset(&s, 0, sizeof s);
    if (op_info[g->nodes[ni].op].kind != OPK_MATMUL || plan_product(g, ni, &s))
        return -1;
    s.node = ni;
    s.view = -1;
    s.out = g->nodes[ni].first_value;
    int32_t last = ni, hoist[MM_MAX_FUSED];   /* size nodes between the fused ones: run first */
    int nhoist = 0;
    while (s.npost < MM_MAX_POST && s.nfused < MM_MAX_FUSED) {
        int32_t nj = last + 1;
        while (nj < g->nnodes && (g->nodes[nj].op == OP_INPUT || (nhoist < MM_MAX_FUSED && hoistable(g, nj, ni)))) {
            if (g->nodes[nj].op != OP_INPUT)
                hoist[nhoist++] = nj;
            nj++;
        }
        if (nj >= g->nnodes)
            break;
        int32_t nodes[MM_MAX_FUSED], end;
        int n, kind = lower_match_activation(g, s.out, nj, nodes, MM_MAX_FUSED - s.nfused, &n, &end);
        if (kind && !post_folds(kind))
            break;
        if (kind) {   /* a written-out activation: one post-op */
            memset(&s.post[s.npost], 0, sizeof s.post[s.npost]);
            s.post[s.npost].kind = (uint8_t)kind;
            s.post_arg[s.npost++] = -1;
            memcpy(&s.fused[s.nfused], nodes, sizeof(int32_t) * (size_t)n);
            s.nfused += n;
            last = end;
            s.out = g->nodes[end].first_value;
            continue;
        }
        if (lower_value_uses(g, s.out) != 1)
            break;
        if (s.nfused == 0 && passes_view(g, &s, nj, s.out)) {   /* kept only if a post-op follows */
            s.view = nj;
            s.fused[s.nfused++] = nj;
            last = nj;
            s.out = g->nodes[nj].first_value;
            continue;
        }
        if (as_post(g, &s, nj, s.out, &s.post[s.npost], &s.post_arg[s.npost]))
            break;
        /* oneDNN 2.6.3 (gemm:jit) computes two eltwise-linear post-ops in one chain wrongly,
         * next to each other ((x@w) * 0.5 - 1.25 was off by units) or not (relu((x@w) * 2)
         * + 1 lost the + 1; both checked): the second stays a kernel */
        int linear_before = 0;
        for (int q = 0; q < s.npost; q++)
            linear_before |= s.post[q].kind == MMPO_LINEAR;
        if (s.post[s.npost].kind == MMPO_LINEAR && linear_before)
            break;
        /* a leading row add on a 2-D product is the product's bias */
        if (s.post[s.npost].kind == MMPO_ADD_ROW && s.npost == 0 && s.bias < 0)
            s.bias = s.post_arg[s.npost];
        else
            s.npost++;
        s.fused[s.nfused++] = nj;
        last = nj;
        s.out = g->nodes[nj].first_value;
    }
    for (int q = 0; q < s.npost; q++)   /* an affine x * a + b or a row add keeps NaN */
        s.lossy |= s.post[q].kind != MMPO_LINEAR && s.post[q].kind != MMPO_ADD_ROW;
    if (s.view >= 0 && s.nfused == 1) {   /* nothing after the view: it stays a node of its own */
        s.view = -1;
        s.nfused = 0;
        last = ni;
        s.out = g->nodes[ni].first_value;
    }
    for (int i = 0; i < nhoist && hoist[i] < last; i++) {
        Step st = {STEP_EAGER, hoist[i]};
        if (plan_push((void **)&p->steps, &p->nsteps, sizeof st, &st) < 0)
            return -2;
    }
    if (lower_push_step(p, STEP_MATMUL, (void **)&p->matmuls, &p->nmatmuls, sizeof s, &s) < 0)
        return -2;
    return last;
}

/* A product of a left operand laid out (S, B, K) in memory order (B, S, K), such as
 * nn.MultiheadAttention's in-projection of x.transpose(0, 1) with batch_first=True, would
 * otherwise copy x row-major first and write (S, B, N) row-major: the projection's heads
 * are then (S, B, H, D) in memory, which oneDNN 2.6 has no 4-D layout for, and the
 * attention step reads them a batch at a time. Keeping a's row order writes (B, S, N) in
 * memory: no copy, and the heads batch first. Eager's result is row-major, so the product
 * keeps a's order only when every reader gives what it gives from a row-major product:
 * it is not returned, and each reader is a view chain that ends in contiguous() with no
 * view() in it (step_views_reads_any_layout) and is the product's only reader (a chain
 * whose contiguous() finds its input row-major returns it uncopied, sharing the memory),
 * or a matmul step reading it as an operand (its result is laid out by its own rules). */
void step_matmul_layouts(const Graph *g, LowerPlan *p, const int32_t *node_step)
{
    for (int32_t i = 0; i < p->nmatmuls; i++) {
        MatmulStep *s = &p->matmuls[i];
        s->rows_in_order = 0;
        if (s->batched || s->view >= 0 || s->lib != LIB_TORCH || s->ra < 3)
            continue;
        int ok = 1;
        for (int32_t k = 0; k < g->noutputs && ok; k++)
            ok = g->outputs[k] != s->out;
        int32_t reads = 0, chains = 0;
        for (int32_t ni = 0; ni < g->nnodes && ok; ni++) {
            int n = plan_node_reads_value(g, ni, s->out);
            if (!n)
                continue;
            reads += n;
            int32_t si = node_step[ni];
            const Step *st = si >= 0 ? &p->steps[si] : NULL;
            if (st && st->kind == STEP_VIEWS && step_views_reads_any_layout(g, p, st->index, s->out))
                chains++;
            else if (st && st->kind == STEP_MATMUL && !(g->nodes[ni].flags & (NODE_INPLACE | NODE_OUT)) &&
                     p->matmuls[st->index].node == ni &&
                     (p->matmuls[st->index].a == s->out || p->matmuls[st->index].b == s->out))
                continue;
            else
                ok = 0;
        }
        s->rows_in_order = ok && reads > 0 && (chains == 0 || reads == 1);
    }
}

void step_matmul_free(LowerPlan *p)
{
    for (int32_t i = 0; i < p->nmatmuls; i++) {
        for (int k = 0; k < MM_KEPT_SLOTS && p->matmuls[i].kept[k]; k++) {
            free(p->matmuls[i].kept[k]->raw);
            lower_kept_clear(&p->matmuls[i].kept[k]->id);
            free(p->matmuls[i].kept[k]);
        }
        lower_kept_clear(&p->matmuls[i].bfin.id);
    }
    PyMem_Free(p->matmuls);
    p->matmuls = NULL;
    p->nmatmuls = 0;
}

int step_matmul_stats(const Graph *g, const LowerPlan *p, PyObject *d)
{
    (void)g;
    long long calls = 0, fallbacks = 0, post = 0, kept = 0, nonfinite = 0, in_order = 0;
    for (int32_t i = 0; i < p->nmatmuls; i++) {
        in_order += p->matmuls[i].in_order;
        nonfinite += p->matmuls[i].nonfinite;
        calls += p->matmuls[i].calls;
        fallbacks += p->matmuls[i].fallbacks;
        post += p->matmuls[i].nfused;
        kept += p->matmuls[i].kept_copies;
    }
    static const char *const names[7] = {"matmul_steps",        "matmul_calls",         "matmul_fallbacks",
                                         "matmul_fused",        "matmul_weight_copies", "matmul_nonfinite",
                                         "matmul_rows_in_order"};
    long long vals[7] = {p->nmatmuls, calls, fallbacks, post, kept, nonfinite, in_order};
    return lower_put_counts(d, 7, names, vals);
}

/* ------------------------------------------------------------------ run ---- */

/* lower_mm_layout with size-1 dims' strides chosen by `outer`: 0, each takes the stride
 * it would have in place (index order); 1, a size-1 batch dim (not one of the last two)
 * takes the largest extent, so it sorts outermost (a column-major matrix under size-1
 * batch dims, or a batch laid out inside the rows, which index order misplaces). */
static int layout_with(MmTensor *t, int r, uint8_t *perm, int outer)
{
    int64_t st[MM_MAX_RANK], next = 1, extent = 1;
    for (int i = r - 1; i >= 0; i--) {
        st[i] = t->dims[i] == 1 ? next : t->strides[i];
        next = st[i] * (t->dims[i] ? t->dims[i] : 1);
        if (t->dims[i] != 1 && next > extent)
            extent = next;
    }
    for (int i = 0; outer && i < r - 2; i++)
        if (t->dims[i] == 1)
            st[i] = extent;
    for (int i = 0; i < r; i++)
        perm[i] = (uint8_t)i;
    for (int i = 1; i < r; i++)   /* stable insertion sort, larger strides first */
        for (int k = i; k > 0 && st[perm[k - 1]] < st[perm[k]]; k--) {
            uint8_t tmp = perm[k];
            perm[k] = perm[k - 1];
            perm[k - 1] = tmp;
        }
    if (st[perm[r - 1]] != 1 || perm[r - 1] < r - 2)
        return 1;
    for (int i = 0; i + 1 < r; i++)
        if (st[perm[i]] < st[perm[i + 1]] * t->dims[perm[i + 1]])
            return 1;
    for (int i = 0; i < r; i++)
        t->strides[i] = st[i];
    return 0;
}

int lower_mm_layout(MmTensor *t, int r, uint8_t *perm)
{
    MmTensor keep = *t;
    if (!layout_with(t, r, perm, 0) && dnnl_api_has_tag(perm, r))
        return 0;
    *t = keep;
    return layout_with(t, r, perm, 1);
}

typedef struct {
    Operand op[3 + MM_MAX_POST];   /* a, b, bias, rows */
    int nop;
    PyObject *copies[2];           /* strong: contiguous copies of a and b, or NULL */
} Held;

static void drop(Held *h)
{
    for (int i = 0; i < h->nop; i++)
        if (h->op[i].has_view)
            PyBuffer_Release(&h->op[i].view);
    h->nop = 0;
    Py_CLEAR(h->copies[0]);
    Py_CLEAR(h->copies[1]);
}

/* Reads value obj into the next operand slot. 0, 1 (not float32 of lib), -1 error. */
static int hold(Held *h, PyObject *obj, Lib lib, Operand **out)
{
    Operand *o = &h->op[h->nop++];
    int rc = lower_read_input(obj, lib, o);
    *out = o;
    return rc;
}

/* Replaces operand slot i (value obj) by a contiguous copy. 0, 1, -1 as hold. */
static int recopy(Held *h, int i, PyObject *obj, Lib lib)
{
    Operand *o = &h->op[i];
    if (o->has_view)
        PyBuffer_Release(&o->view);
    o->has_view = 0;
    PyObject *src = lazyview_check(obj) ? lazyview_tensor(obj) : Py_NewRef(obj);   /* new */
    PyObject *c = src ? PyObject_CallMethod(src, lib == LIB_TORCH ? "contiguous" : "copy", NULL) : NULL;   /* new */
    Py_XDECREF(src);
    if (!c)
        return -1;
    Py_XSETREF(h->copies[i], c);
    return lower_read_input(c, lib, o);
}

/* a as [rows, K] when its rows are evenly spaced (or a is 1-D). 0, or 1. */
static int fold_rows(const Operand *a, MmTensor *t)
{
    int k = a->ndim - 1;
    int64_t rows = 1, row_stride = 0;
    for (int i = k - 1; i >= 0; i--) {
        if (a->size[i] == 1)
            continue;
        if (rows > 1 && a->stride[i] != row_stride * rows)
            return 1;
        if (rows == 1)
            row_stride = a->stride[i];
        rows *= a->size[i];
    }
    for (int i = 0; i < k; i++)
        if (a->size[i] == 0)
            rows = 0;
    t->dims[0] = rows;
    t->dims[1] = a->size[k];
    t->strides[0] = rows > 1 ? row_stride : a->size[k];
    t->strides[1] = a->stride[k];
    t->data = a->data;
    return 0;
}

/* a as [rows, K] over its rows in memory order, when its leading dims (size-1 ones aside,
 * two or more) are a permuted dense block: each dim's stride is the next inner one's times
 * that one's size. ost: the strides of the [..., n] product written in that row order
 * (row-major over the same permutation). 0, or 1. */
static int fold_rows_permuted(const Operand *a, int64_t n, MmTensor *t, int64_t *ost)
{
    int k = a->ndim - 1, ord[SJ_MAX_RANK], m = 0;
    for (int i = 0; i < k; i++) {
        if (a->size[i] == 0)
            return 1;
        if (a->size[i] != 1)
            ord[m++] = i;
    }
    if (m < 2)
        return 1;
    for (int i = 1; i < m; i++)   /* stable insertion sort, larger strides first */
        for (int j = i; j > 0 && a->stride[ord[j - 1]] < a->stride[ord[j]]; j--) {
            int tmp = ord[j];
            ord[j] = ord[j - 1];
            ord[j - 1] = tmp;
        }
    if (a->stride[ord[m - 1]] <= 0)
        return 1;
    int64_t rows = a->size[ord[m - 1]];
    for (int j = m - 2; j >= 0; j--) {
        if (a->stride[ord[j]] != a->stride[ord[j + 1]] * a->size[ord[j + 1]])
            return 1;
        rows *= a->size[ord[j]];
    }
    t->dims[0] = rows;
    t->dims[1] = a->size[k];
    t->strides[0] = a->stride[ord[m - 1]];
    t->strides[1] = a->stride[k];
    t->data = a->data;
    int64_t e = n;
    for (int j = m - 1; j >= 0; j--) {
        ost[ord[j]] = e;
        e *= a->size[ord[j]];
    }
    ost[k] = 1;
    for (int i = k - 1; i >= 0; i--)   /* a size-1 dim: the stride row-major order gives it */
        if (a->size[i] == 1)
            ost[i] = ost[i + 1] * (i + 1 == k ? n : a->size[i + 1]);
    return 0;
}

/* The step's nodes, run the original way. */
static int run_eagerly(Graph *g, MatmulStep *s, PyObject **vals)
{
    s->fallbacks++;
    return lower_exec_nodes(g, s->node, s->fused, s->nfused, vals);
}

/* A row operand ([N]) as [1, N] of rank r; 1 when it is not one. */
static int as_row(const Operand *o, int64_t n, int r, MmTensor *t)
{
    if (o->ndim != 1 || o->size[0] != n)
        return 1;
    for (int i = 0; i < r; i++) {
        t->dims[i] = 1;
        t->strides[i] = n;
    }
    t->dims[r - 1] = n;
    t->strides[r - 1] = o->stride[0];
    t->data = o->data;
    return n > 1 && o->stride[0] != 1;
}

/* The shapes of a, b and dst for the primitive; out_dims/out_r: the result's shape, out_st
 * its strides when it keeps a's row order (s->rows_in_order), else out_st[0] is -1.
 * 0, 1 (run eagerly, or copy when *copy says which operand), -1. */
static int shapes(const MatmulStep *s, const Operand *a, const Operand *b, MmTensor *ta, MmTensor *tb, MmTensor *td,
                  int *rank, int64_t *out_dims, int64_t *out_st, int *out_r, int *copy)
{
    *copy = -1;
    out_st[0] = -1;
    if (a->ndim != s->ra || b->ndim != s->rb)
        return 1;
    memset(ta, 0, sizeof *ta);
    memset(tb, 0, sizeof *tb);
    memset(td, 0, sizeof *td);
    if (!s->batched) {
        int tr = s->trans_b;
        tb->dims[0] = b->size[tr];
        tb->dims[1] = b->size[!tr];
        tb->strides[0] = b->stride[tr];
        tb->strides[1] = b->stride[!tr];
        tb->data = b->data;
        if (fold_rows(a, ta) && (!s->rows_in_order || fold_rows_permuted(a, tb->dims[1], ta, out_st))) {
            *copy = 0;
            return 1;
        }
        if (ta->dims[1] != tb->dims[0])
            return 1;
        *rank = 2;
        *out_r = a->ndim;
        for (int i = 0; i + 1 < a->ndim; i++)
            out_dims[i] = a->size[i];
        out_dims[a->ndim - 1] = tb->dims[1];
        td->dims[0] = ta->dims[0];
        td->dims[1] = tb->dims[1];
    } else {
        int r = a->ndim > b->ndim ? a->ndim : b->ndim;
        for (int i = 0; i < r; i++) {   /* right-aligned, leading dims of 1 */
            int ia = i - (r - a->ndim), ib = i - (r - b->ndim);
            ta->dims[i] = ia >= 0 ? a->size[ia] : 1;
            ta->strides[i] = ia >= 0 ? a->stride[ia] : 0;
            tb->dims[i] = ib >= 0 ? b->size[ib] : 1;
            tb->strides[i] = ib >= 0 ? b->stride[ib] : 0;
        }
        ta->data = a->data;
        tb->data = b->data;
        for (int i = 0; i < r - 2; i++) {
            int64_t da = ta->dims[i], db = tb->dims[i];
            if (da != db && da != 1 && db != 1)
                return 1;
            out_dims[i] = da == 1 ? db : da;
            /* a broadcast by stride 0 is a size-1 dim to oneDNN */
            if (ta->strides[i] == 0)
                ta->dims[i] = 1;
            if (tb->strides[i] == 0)
                tb->dims[i] = 1;
        }
        if (ta->dims[r - 1] != tb->dims[r - 2])
            return 1;
        out_dims[r - 2] = ta->dims[r - 2];
        out_dims[r - 1] = tb->dims[r - 1];
        *rank = *out_r = r;
        for (int i = 0; i < r; i++)
            td->dims[i] = out_dims[i];
    }
    int64_t step = 1;
    for (int i = *rank - 1; i >= 0; i--) {
        td->strides[i] = step;
        step *= td->dims[i];
    }
    return 0;
}

/* Stores the step's result res (stolen) as its output value. After a view the post-ops
 * were applied to the product's buffer: the view node runs on it (as the product's value
 * for that moment) and its result is the output; neither value is read by anything else
 * (planned so), so both slots are left empty. 0, or -1 with an exception. */
static int finish(Graph *g, const MatmulStep *s, PyObject **vals, PyObject *res)
{
    if (s->view < 0) {
        Py_XSETREF(vals[s->out], res);
        return 0;
    }
    int32_t pv = g->nodes[s->node].first_value, vv = g->nodes[s->view].first_value;
    Py_XSETREF(vals[pv], res);
    Py_CLEAR(vals[vv]);
    int rc = lower_exec_node(g, s->view, vals);
    Py_CLEAR(vals[pv]);
    if (rc < 0)
        return -1;
    Py_XSETREF(vals[s->out], vals[vv]);   /* the view's reference moves */
    vals[vv] = NULL;
    return 0;
}

/* Where the kept copy starts past a page boundary. oneDNN 2.6's AVX2 GEMM is ~25% slower
 * with a B operand on a 32-byte boundary: the MLP bench's 64x256 @ 256x1024 then 1024x256
 * (ONEDNN_MAX_CPU_ISA=AVX2, 1 thread) took 755-785 us with B at offsets 0, 32, 64 ... 2048
 * and 572-586 us at 4, 16 or 48, while AVX-512 prefers it aligned (307 vs 322 us at 16).
 * malloc gave either, by where the block landed (a page plus 16 when mmap'd, any 16-byte
 * boundary from the heap): run-to-run swings of that size. So: 64-byte aligned when oneDNN
 * may use AVX-512, 16 past the boundary otherwise. */
static size_t kept_offset(void)
{
    return dnnl_may_use_avx512() ? 0 : 16;
}

/* The slot to hold a new copy of weight w: the one holding an older copy of w (another
 * version), a free one or one whose weight died, a new one while fewer than
 * MM_KEPT_SLOTS exist, else the least recently used one no run holds. NULL when every
 * slot is held or no memory. */
static MmKept *kept_victim(MatmulStep *s, PyObject *w)
{
    MmKept *victim = NULL;
    int k = 0;
    for (; k < MM_KEPT_SLOTS && s->kept[k]; k++) {
        MmKept *e = s->kept[k];
        if (!e->pins && e->id.wref && PyWeakref_GetObject(e->id.wref) == w)
            return e;
    }
    for (k = 0; k < MM_KEPT_SLOTS && s->kept[k]; k++) {
        MmKept *e = s->kept[k];
        if (e->pins)
            continue;
        if (!e->id.wref || PyWeakref_GetObject(e->id.wref) == Py_None)
            return e;
        if (!victim || e->last_use < victim->last_use)
            victim = e;
    }
    if (k < MM_KEPT_SLOTS && (s->kept[k] = calloc(1, sizeof(MmKept))) != NULL)
        return s->kept[k];
    return victim;
}

/* tb (K x N, column-major) from weight object w: pointed at a row-major copy kept in one
 * of s's slots (*slot, pinned for the caller, who unpins it after the run), made when w
 * has none yet. *slot NULL: w read as it is. 0, or -1 with an exception. */
static int use_kept(MatmulStep *s, PyObject *w, MmTensor *tb, MmKept **slot)
{
    int64_t k = tb->dims[0], n = tb->dims[1];
    long long version;
    *slot = NULL;
    if (lower_kept_version(w, &version))
        return 0;   /* no version counter (numpy): no copy kept, w read as it is */
    MmKept *e = NULL;
    for (int i = 0; i < MM_KEPT_SLOTS && s->kept[i] && !e; i++)
        if (lower_kept_matches(&s->kept[i]->id, w, tb->data, version) && s->kept[i]->k == k && s->kept[i]->n == n)
            e = s->kept[i];
    if (!e) {
        if (!(e = kept_victim(s, w)))
            return 0;   /* every slot in use by runs on other threads: w read as it is */
        size_t off = kept_offset();
        size_t bytes = (sizeof(float) * (size_t)(k * n > 0 ? k * n : 1) + off + 4095) / 4096 * 4096;
        char *raw = aligned_alloc(4096, bytes);
        if (!raw) {
            PyErr_NoMemory();
            return -1;
        }
        free(e->raw);
        e->raw = raw;
        e->buf = (float *)(raw + off);
        e->finite = -1;
        if (lower_kept_set(&e->id, w, tb->data, version)) {
            lower_kept_clear(&e->id);   /* not weak-referenceable: w read as it is */
            return 0;
        }
        const float *src = tb->data;
        float *buf = e->buf;
        /* src[kk * sk + nn * sn] -> buf[kk * n + nn], in tiles for the caches */
        for (int64_t k0 = 0; k0 < k; k0 += 32)
            for (int64_t n0 = 0; n0 < n; n0 += 32)
                for (int64_t kk = k0; kk < k0 + 32 && kk < k; kk++)
                    for (int64_t nn = n0; nn < n0 + 32 && nn < n; nn++)
                        buf[kk * n + nn] = src[kk * tb->strides[0] + nn * tb->strides[1]];
        e->k = k;
        e->n = n;
        s->kept_copies++;
    }
    e->last_use = ++s->kept_ticks;
    e->pins++;
    *slot = e;
    tb->data = e->buf;
    tb->strides[0] = n;
    tb->strides[1] = 1;
    return 0;
}

int step_matmul_run(Graph *g, LowerPlan *p, int32_t idx, PyObject **vals)
{
    MatmulStep *s = &p->matmuls[idx];
    Held h;
    memset(&h, 0, sizeof h);
    MmTensor ta, tb, td, tbias, rows[MM_MAX_POST];
    MmKey key;
    memset(&tbias, 0, sizeof tbias);
    memset(rows, 0, sizeof rows);
    int64_t out_dims[SJ_MAX_RANK], out_st[SJ_MAX_RANK];
    int rank = 0, out_r = 0, copy, rc;
    Operand *a, *b, *o;
    PyObject *va = vals[s->a], *vb = vals[s->b];   /* borrowed from vals */
    PyObject *res = NULL;                          /* strong: the result */
    PcEntry *e = NULL;
    MmKept *kept = NULL;   /* pinned until done */
    if (!va || !vb) {
        rc = 1;
        goto done;
    }
    if ((rc = hold(&h, va, s->lib, &a)) || (rc = hold(&h, vb, s->lib, &b)))
        goto done;
    rc = shapes(s, a, b, &ta, &tb, &td, &rank, out_dims, out_st, &out_r, &copy);
    if (rc == 1 && copy == 0) {
        if ((rc = recopy(&h, 0, va, s->lib)) == 0)
            rc = shapes(s, a, b, &ta, &tb, &td, &rank, out_dims, out_st, &out_r, &copy);
    }
    if (rc)
        goto done;
    if (rank == 2 && tb.strides[0] == 1 && tb.strides[1] == tb.dims[0] && tb.dims[1] > 1 &&
        g->nodes[g->values[s->b].node].op == OP_INPUT && use_kept(s, vb, &tb, &kept) < 0) {
        rc = -1;
        goto done;
    }
    memset(&key, 0, sizeof key);
    key.op_class = MM_CLASS_MATMUL;
    key.dtype = DT_F32;
    key.rank = (uint8_t)rank;
    for (;;) {
        int bad = lower_mm_layout(&ta, rank, key.perm[0]) ? 0 : lower_mm_layout(&tb, rank, key.perm[1]) ? 1 : -1;
        if (bad < 0)
            break;
        /* neither row- nor column-major: a contiguous copy (of the weight as stored), once */
        if (h.copies[bad]) {
            rc = 1;
            goto done;
        }
        if ((rc = recopy(&h, bad, bad ? vb : va, s->lib)) ||
            (rc = shapes(s, a, b, &ta, &tb, &td, &rank, out_dims, out_st, &out_r, &copy)))
            goto done;
    }
    int64_t k = ta.dims[rank - 1], n = td.dims[rank - 1];
    if (s->bias >= 0) {
        if (!vals[s->bias] || (rc = hold(&h, vals[s->bias], s->lib, &o)) || (rc = as_row(o, n, rank, &tbias)))
            goto done;
        key.has_bias = 1;
    }
    key.npost = (uint8_t)s->npost;
    for (int i = 0; i < s->npost; i++) {
        key.post[i] = s->post[i];
        if (s->post[i].kind == MMPO_ADD_ROW)
            key.row_n = n;
        if (s->post_arg[i] >= 0 && (!vals[s->post_arg[i]] || (rc = hold(&h, vals[s->post_arg[i]], s->lib, &o)) ||
                                    (rc = as_row(o, n, rank, &rows[i]))))
            goto done;
    }
    /* oneDNN's eltwise post-ops lose NaN (lower.h: lower_finite): a NaN or inf operand runs
     * the nodes eagerly. A weight's scan is kept per version: the per-call cost is a scan
     * of a, 1 / N of the product. */
    if (s->lossy) {
        int finite = lower_finite(a);
        if (finite && kept) {   /* the copy's flag, scanned once per weight version */
            if (kept->finite < 0)
                kept->finite = lower_finite(b);
            finite = kept->finite;
        } else if (finite) {
            finite = h.copies[1] ? lower_finite(b) : lower_weight_finite(&s->bfin, vb, b);
        }
        for (int i = 2; finite && i < h.nop; i++)   /* the bias and the rows */
            finite = lower_finite(&h.op[i]);
        if (!finite) {
            s->nonfinite++;
            rc = 1;
            goto done;
        }
    }
    if (k == 0) {   /* an empty sum: eager fills zeros (and applies the rest) */
        rc = 1;
        goto done;
    }
    res = out_st[0] < 0 ? lower_new_output(s->lib, out_dims, out_r)
                        : lower_new_output_strided(s->lib, DT_F32, out_dims, out_st, out_r);
    if (!res) {
        rc = -1;
        goto done;
    }
    int64_t total = 1;
    for (int i = 0; i < rank; i++)
        total *= td.dims[i];
    if (total == 0) {   /* nothing to compute */
        s->calls++;
        goto done;
    }
    if ((rc = hold(&h, res, s->lib, &o)))
        goto done;
    td.data = o->data;
    key.threads = dnnl_api_threads();
    if (!(e = primcache_get(&key))) {
        rc = -1;
        goto done;
    }
    void *prim = primcache_prim(e);
    if (!prim) {
        rc = 1;
        goto done;
    }
    int status;   /* kept stays pinned: another thread may not replace the copy while this one reads it */
    Py_BEGIN_ALLOW_THREADS status = dnnl_api_matmul_exec(prim, &key, &ta, &tb, &tbias, &td, rows);
    Py_END_ALLOW_THREADS;
    rc = status != 0;
    if (!rc) {
        s->calls++;
        s->in_order += out_st[0] >= 0;
    }
done:
    if (kept)
        kept->pins--;
    if (e)
        primcache_release(e);
    drop(&h);
    if (rc == 0)
        return finish(g, s, vals, res);
    Py_XDECREF(res);
    if (rc < 0)
        return -1;
    return run_eagerly(g, s, vals);
}
