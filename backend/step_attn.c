/* scaled_dot_product_attention as a step of the cpu backend: the scores q . k^T by a oneDNN
 * batched matmul into a scratch block, their softmax (with the scale, the mask and the
 * causal diagonal) by a generated row kernel (emit_attn.c), and the block times v by a
 * second oneDNN matmul written straight into the output.
 *
 * Why: torch's CPU attention (a blocked online softmax over small gemms) ran well behind
 * two oneDNN gemms and a row softmax at the sizes transformers use on an AMD EPYC (Zen 4):
 * (8, 4, 128, 32) float32, median per call, 907 against 273 us at 2 threads and 969
 * against 513 at 1 (AVX-512); 636 against 437 and 967 against 860 (AVX2). On an Intel
 * Xeon (AVX-512) the two are level there (2 threads 458 against 441 us, 1 thread 916
 * against 908) and the step is ahead with more heads ((1, 12, 128, 64), 2 threads: 322
 * against 262).
 * The scores are computed a block at a time (of batches, heads, then query rows) so a
 * block stays within SJ_ATTN_BLOCK_BYTES: long sequences do not stream an (S, S) matrix
 * per head through memory.
 *
 * Plan: float32 torch query, key and value of rank 3 or 4 (the value of the same rank),
 * dropout_p 0, enable_gqa False, is_causal constant, scale a constant or a number the graph
 * computes, and attn_mask None or a float32 or bool tensor of rank 2 to 4. Run: the batch
 * and head dims of q, k and v equal or 1 (broadcast), the mask broadcasting to the scores
 * with its keys contiguous, every
 * dim nonzero, at least SJ_ATTN_MIN_SCORES scores (and SJ_ATTN_MIN_HEAD_SCORES a head with more
 * than one thread), and oneDNN taking the layouts; anything
 * else runs the node eagerly, as does a call whose scores hold inf or NaN (emit_attn.c).
 * The output has the layout torch's gives it (new_result).
 *
 * Memory: the steps are a PyMem array of the plan; each holds a scratch block (aligned_alloc,
 * freed with the plan; a run on a second thread while the first holds it gets its own); a
 * run holds its operands' buffers only during the call, and the GIL is released while the
 * products and the row kernel run. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lower_int.h"
#include "dnnl_api.h"

/* Scores one block may hold: about a core's L2 and the next level's share. */
#define SJ_ATTN_BLOCK_BYTES ((int64_t)2 << 20)

/* Calls with fewer scores (batch x heads x queries x keys) run torch's kernel: below this
 * the step's fixed costs (two oneDNN executions, the row kernel's per-row tails) exceed
 * what it saves. Measured per call, 1 thread: (2, 4, 16, 16) causal 11.3 against 9.0 us
 * (AVX2) and 11.3 against 9.5 (AVX-512); (2, 2, 32, 32) 13.4 against 13.0 (AVX2) and 12.5
 * against 13.1 (AVX-512); (2, 4, 32, 16) 16.8 against 18.4 (AVX-512). */
#define SJ_ATTN_MIN_SCORES 4096
/* With more than one thread, nor do heads of fewer scores (queries x keys), however many
 * there are: split across the threads, each product's share is a few microseconds of
 * oneDNN's batched matmul, while torch's flash kernel does each head in cache on its
 * thread. On an Intel Xeon (AVX-512), 2 threads, per call, eager / step: (8, 4, 32, 32)
 * 54.0 / 67.4 us; (8, 12, 16, 64) 84.4 / 116.1; nn.MultiheadAttention's q, k and v read
 * through its packed projection (encoder_s32) 152 / 197; (8, 4, 48, 32), 2304 scores a
 * head, 97.8 / 100.7. At 1 thread the step keeps them: encoder_s32's 165 us against
 * torch's 203 (contiguous (8, 4, 32, 32): 108.8 against 89.6). */
#define SJ_ATTN_MIN_HEAD_SCORES 2048

typedef int64_t (*AttnFn)(const int64_t *n, char *const *p, const int64_t *st, int64_t i0);

struct AttnStep {
    int32_t node, q, k, v, mask, out;
    int mask_kind;      /* 0 none, 1 float32 (added), 2 bool (false: -inf) */
    int causal;
    int has_scale;
    float scale;
    int32_t scale_value; /* a scale computed in the graph (a size's 1 / sqrt): its value id, or -1 */
    int mask_rank;
    int mask_grad;      /* the mask requires grad: torch takes its math path (result layout) */
    int rank;           /* 3 or 4 */
    char name[48];      /* the softmax kernel's function */
    AttnFn fn;          /* after the build; NULL: the node runs eagerly */
    float *scratch;     /* malloc'd, SJ_ATTN_BLOCK_BYTES or a block's need */
    int64_t scratch_n;  /* floats */
    int busy;           /* a run on another thread uses scratch */
    long long calls, fallbacks, nonfinite, small;
    long long staged;   /* calls that wrote the result through a scratch block */
};

typedef struct {
    int64_t d[4], s[4];   /* (batch, heads, rows, cols) */
    char *data;
} View4;

typedef struct {
    View4 q, kt, v, o, m;   /* kt: k with its last two dims swapped; m: the mask, cols = keys */
    int64_t B, H, Sq, Sk, cb, ch, cq;
    int64_t Hm;             /* heads before (batch, heads) merged: the mask's index */
    float scale;
    int has_mask;
    int pack_v;             /* v's blocks are copied contiguous first (see step_attn_run) */
    int same_batch;         /* q, k and v have the same batch and head dims (no broadcast) */
    View4 out;              /* the result, when o is a scratch block it is copied into after */
    int staged;
} Problem;

/* ----------------------------------------------------------------- plan ---- */

static int const_number(Graph *g, const Arg *x, double *d)
{
    return x->kind == ARG_CONST && !lower_const_number(PyList_GET_ITEM(g->consts, x->a), d) ? 0 : 1;
}

static int const_is(Graph *g, const Arg *x, PyObject *want)
{
    return x->kind == ARG_ABSENT || (x->kind == ARG_CONST && PyList_GET_ITEM(g->consts, x->a) == want);
}

/* The kernel's name: sj_a and a hash of its text. 0, or -1 with an exception. */
static int name_kernel(struct AttnStep *s)
{
    Buf b = {NULL, 0, 0, 0};
    emit_attn_softmax(&b, "SJ_ANAME", s->mask_kind, s->causal);
    return emit_name_text(&b, "sj_a", s->name, sizeof s->name);
}

int32_t step_attn_plan(Graph *g, int32_t ni, LowerPlan *p)
{
    const Node *nd = &g->nodes[ni];
    if (nd->op != OP_SDPA || nd->nout != 1 || (nd->flags & (NODE_INPLACE | NODE_OUT)))
        return -1;
    const TensorMeta *om = &g->values[nd->first_value].meta;
    if (om->lib != LIB_TORCH || om->dtype != DT_F32 || om->requires_grad || om->symint || om->np_scalar ||
        (om->ndim != 3 && om->ndim != 4))
        return -1;
    struct AttnStep s;
    memset(&s, 0, sizeof s);
    s.node = ni;
    s.out = nd->first_value;
    s.q = s.k = s.v = s.mask = s.scale_value = -1;
    s.rank = om->ndim;
    const SchemaParam *ps;
    int n = graph_node_params(g, ni, &ps);
    for (int i = 0; i < n; i++) {
        const Arg *x = &g->pool[nd->bound + i];
        const char *pn = ps[i].name;
        double d;
        if (!strcmp(pn, "query") || !strcmp(pn, "key") || !strcmp(pn, "value")) {
            if (x->kind != ARG_VALUE)
                return -1;
            const TensorMeta *m = &g->values[x->a].meta;
            if (m->lib != LIB_TORCH || m->dtype != DT_F32 || m->ndim != om->ndim || m->np_scalar)
                return -1;
            *(pn[0] == 'q' ? &s.q : pn[0] == 'k' ? &s.k : &s.v) = x->a;
        } else if (!strcmp(pn, "attn_mask")) {
            if (x->kind == ARG_VALUE) {
                const TensorMeta *m = &g->values[x->a].meta;
                /* (a mask of rank below 2 is an error in eager: its node raises it) */
                if (m->lib != LIB_TORCH || (m->dtype != DT_F32 && m->dtype != DT_BOOL) || m->ndim > 4 || m->ndim < 2 ||
                    m->np_scalar)
                    return -1;
                s.mask = x->a;
                s.mask_rank = m->ndim;
                s.mask_grad = m->requires_grad;
                s.mask_kind = m->dtype == DT_BOOL ? 2 : 1;
            } else if (!const_is(g, x, Py_None)) {
                return -1;
            }
        } else if (!strcmp(pn, "dropout_p")) {
            if (x->kind != ARG_ABSENT && (const_number(g, x, &d) || d != 0.0))
                return -1;
        } else if (!strcmp(pn, "is_causal")) {
            if (x->kind == ARG_CONST && PyList_GET_ITEM(g->consts, x->a) == Py_True)
                s.causal = 1;
            else if (!const_is(g, x, Py_False))
                return -1;
        } else if (!strcmp(pn, "scale")) {
            if (x->kind == ARG_CONST && PyList_GET_ITEM(g->consts, x->a) != Py_None) {
                if (const_number(g, x, &d))
                    return -1;
                s.has_scale = 1;
                s.scale = (float)d;
            } else if (x->kind == ARG_VALUE && g->values[x->a].meta.symint && g->values[x->a].meta.dtype != DT_BOOL) {
                s.scale_value = x->a;   /* a number the graph computes (dynamic sizes) */
            } else if (x->kind != ARG_ABSENT && !const_is(g, x, Py_None)) {
                return -1;
            }
        } else if (!strcmp(pn, "enable_gqa")) {
            if (!const_is(g, x, Py_False))
                return -1;
        } else if (x->kind != ARG_ABSENT) {
            return -1;
        }
    }
    if (s.q < 0 || s.k < 0 || s.v < 0 || (s.causal && s.mask >= 0))
        return -1;
    if (name_kernel(&s) < 0 || lower_push_step(p, STEP_ATTENTION, (void **)&p->attns, &p->nattns, sizeof s, &s) < 0)
        return -2;
    return ni;
}

void step_attn_free(LowerPlan *p)
{
    for (int32_t i = 0; i < p->nattns; i++)
        free(p->attns[i].scratch);
    PyMem_Free(p->attns);
    p->attns = NULL;
    p->nattns = 0;
}

int step_attn_stats(const Graph *g, const LowerPlan *p, PyObject *d)
{
    (void)g;
    long long calls = 0, fallbacks = 0, nonfinite = 0, small = 0, staged = 0;
    for (int32_t i = 0; i < p->nattns; i++) {
        staged += p->attns[i].staged;
        calls += p->attns[i].calls;
        fallbacks += p->attns[i].fallbacks;
        nonfinite += p->attns[i].nonfinite;
        small += p->attns[i].small;
    }
    static const char *const names[6] = {"attention_steps",     "attention_calls", "attention_fallbacks",
                                         "attention_nonfinite", "attention_small", "attention_staged"};
    long long vals[6] = {p->nattns, calls, fallbacks, nonfinite, small, staged};
    return lower_put_counts(d, 6, names, vals);
}

/* ---------------------------------------------------------------- build ---- */

PyObject *step_attn_source(const LowerPlan *p)
{
    Buf b = {NULL, 0, 0, 0};
    for (int32_t i = 0; i < p->nattns; i++) {
        int seen = 0;   /* one function per distinct kernel */
        for (int32_t j = 0; j < i && !seen; j++)
            seen = !strcmp(p->attns[j].name, p->attns[i].name);
        if (!seen)
            emit_attn_softmax(&b, p->attns[i].name, p->attns[i].mask_kind, p->attns[i].causal);
    }
    PyObject *r = b.failed ? PyErr_NoMemory() : PyUnicode_FromStringAndSize(b.s ? b.s : "", (Py_ssize_t)b.n);
    PyMem_Free(b.s);
    return r;
}

int step_attn_bind(LowerPlan *p, CgLib *lib)
{
    for (int32_t i = 0; i < p->nattns; i++) {
        void *fn = cg_sym(lib, p->attns[i].name);
        if (!fn)
            return -1;
        p->attns[i].fn = (AttnFn)fn;
    }
    return 0;
}

/* ------------------------------------------------------------------ run ---- */

/* An operand as (batch, heads, rows, cols): a rank-3 one has one head. */
static void as4(const Operand *o, int rank, int64_t *dims, int64_t *st)
{
    if (rank == 4) {
        memcpy(dims, o->size, 4 * sizeof *dims);
        memcpy(st, o->stride, 4 * sizeof *st);
        return;
    }
    dims[0] = o->size[0];
    st[0] = o->stride[0];
    dims[1] = 1;
    st[1] = 0;
    for (int i = 1; i < 3; i++) {
        dims[i + 1] = o->size[i];
        st[i + 1] = o->stride[i];
    }
}

/* A (batch, heads) pair of dims that one stride walks (heads stride h, batch stride h * nh,
 * or a single batch): the two can be one dim of nb * nh. */
static int merges(const int64_t *dims, const int64_t *st)
{
    return dims[0] == 1 || dims[1] == 1 || st[0] == st[1] * dims[1];
}

/* 1 when torch's flash attention is enabled (torch.backends.cuda.enable_flash_sdp, and the
 * sdpa_kernel context, switch it for the CPU too), 0 when not, -1 with an exception. */
static int flash_enabled(void)
{
    static PyObject *get;   /* strong, once: torch._C._get_flash_sdp_enabled */
    if (!get) {
        PyObject *c = PyImport_ImportModule("torch._C");   /* new */
        get = c ? PyObject_GetAttrString(c, "_get_flash_sdp_enabled") : NULL;
        Py_XDECREF(c);
        if (!get)
            return -1;
    }
    PyObject *r = PyObject_CallNoArgs(get);   /* new */
    if (!r)
        return -1;
    int on = PyObject_IsTrue(r);
    Py_DECREF(r);
    return on;
}

/* 1 when eager could run torch's CPU flash attention kernel on this call (which decides
 * the result's layout) rather than its math path: rank 4, one embedding size and unit last
 * strides for q, k and v, the same batch and head dims (no broadcast), no mask or one of
 * rank 2 or 4 that does not require grad; flash_enabled() says whether it does. */
static int flash_shaped(const struct AttnStep *s, const Operand *op, const Problem *pb)
{
    if (s->rank != 4 || op[0].size[3] != op[2].size[3] || lower_layout_strides(&op[0])[3] != 1 ||
        lower_layout_strides(&op[1])[3] != 1 || lower_layout_strides(&op[2])[3] != 1 || !pb->same_batch)
        return 0;
    return s->mask < 0 || ((s->mask_rank == 2 || s->mask_rank == 4) && !s->mask_grad);
}

/* The result as eager lays it out. torch's CPU flash attention makes it like
 * empty_like(q): q's strides when q is dense, else dense ones in q's order; its math path
 * makes it contiguous. Whether flash is switched on is asked only when the two differ.
 * New reference, NULL with an exception. */
static PyObject *new_result(const struct AttnStep *s, const Operand *op, const Problem *pb, const int64_t *odims)
{
    const Operand *qo = &op[0];
    int r = s->rank, flash = flash_shaped(s, op, pb);
    int64_t st[4], want = 1;
    if (flash)   /* empty_like(q) */
        lower_preserved_strides(qo->size, lower_layout_strides(qo), r, st);
    int contiguous = 1;
    for (int i = r - 1; i >= 0; i--) {
        if (!flash)
            st[i] = want;
        contiguous &= st[i] == want;   /* (size-1 dims too: torch keeps q's strides there) */
        want *= odims[i];
    }
    if (!contiguous && (flash = flash_enabled()) < 0)
        return NULL;
    if (contiguous || !flash)
        return lower_new_output(LIB_TORCH, odims, r);
    return lower_new_output_strided(LIB_TORCH, DT_F32, odims, st, r);
}

/* The block [b0, b0 + nb) x [h0, h0 + nh) x [i0, i0 + nq) of x (rows; all columns). */
static void block(const View4 *x, int64_t b0, int64_t nb, int64_t h0, int64_t nh, int64_t i0, int64_t nq, MmTensor *t)
{
    t->dims[0] = nb;
    t->dims[1] = nh;
    t->dims[2] = nq;
    t->dims[3] = x->d[3];
    memcpy(t->strides, x->s, sizeof x->s);
    t->data = x->data + 4 * (b0 * x->s[0] + h0 * x->s[1] + i0 * x->s[2]);
    for (int i = 0; i < 2; i++)   /* a batch dim broadcast by stride 0 is a size-1 dim to oneDNN */
        if (!t->strides[i])
            t->dims[i] = 1;
}

/* The primitive for a product of a and b into d (their layouts found, size-1 dims'
 * strides normalised). NULL when a layout has no tag (*no_tag set: blocks of one batch
 * have one) or oneDNN refuses it (the caller runs the node eagerly); *e is the pinned
 * entry to release. */
static void *product(MmTensor *a, MmTensor *b, MmTensor *d, MmKey *key, PcEntry **e, int *no_tag)
{
    memset(key, 0, sizeof *key);
    key->op_class = MM_CLASS_MATMUL;
    key->dtype = DT_F32;
    key->rank = 4;
    key->has_dperm = 1;
    *e = NULL;
    if (lower_mm_layout(a, 4, key->perm[0]) || lower_mm_layout(b, 4, key->perm[1]) ||
        lower_mm_layout(d, 4, key->dperm) || key->dperm[3] != 3 || !dnnl_api_has_tag(key->perm[0], 4) ||
        !dnnl_api_has_tag(key->perm[1], 4) || !dnnl_api_has_tag(key->dperm, 4)) {
        *no_tag = 1;
        return NULL;
    }
    key->threads = dnnl_api_threads();
    if (!(*e = primcache_get(key)))
        return NULL;
    return primcache_prim(*e);
}

/* 1 when x over all its batches and heads has a oneDNN layout tag. */
static int tagged(const View4 *x)
{
    MmTensor t;
    uint8_t perm[4];
    memset(&t, 0, sizeof t);
    block(x, 0, x->d[0], 0, x->d[1], 0, x->d[2], &t);
    return !lower_mm_layout(&t, 4, perm) && dnnl_api_has_tag(perm, 4);
}

/* Copies src into dst (the same dims), walking dst's memory in order: dims sorted by dst's
 * strides, neighbours both walk as one merged. */
static void copy_view4(const View4 *dst, const View4 *src)
{
    int ord[4] = {0, 1, 2, 3};
    for (int i = 1; i < 4; i++)   /* larger destination strides first */
        for (int j = i; j > 0 && dst->s[ord[j - 1]] < dst->s[ord[j]]; j--) {
            int t = ord[j];
            ord[j] = ord[j - 1];
            ord[j - 1] = t;
        }
    int64_t n[4], ds[4], ss[4];
    int r = 0;
    for (int i = 0; i < 4; i++) {
        int d = ord[i];
        if (dst->d[d] == 1)
            continue;
        if (r > 0 && ds[r - 1] == dst->s[d] * dst->d[d] && ss[r - 1] == src->s[d] * dst->d[d]) {
            n[r - 1] *= dst->d[d];
            ds[r - 1] = dst->s[d];
            ss[r - 1] = src->s[d];
            continue;
        }
        n[r] = dst->d[d];
        ds[r] = dst->s[d];
        ss[r] = src->s[d];
        r++;
    }
    if (r == 0) {
        n[0] = 1;
        ds[0] = ss[0] = 1;
        r = 1;
    }
    lower_copy_strided(dst->data, ds, src->data, ss, n, r, sizeof(float));
}

/* Runs p's blocks. 0, 1 (a block was refused or held inf / NaN: run eagerly), 2 (a
 * layout of several batches has no oneDNN tag: run blocks of one), -1. */
static int run_blocks(struct AttnStep *s, Problem *pb, float *scores)
{
    /* v's packed block after the scores, 64-byte aligned */
    float *vbuf = scores + (pb->cb * pb->ch * pb->cq * pb->Sk + 15) / 16 * 16;
    for (int64_t b0 = 0; b0 < pb->B; b0 += pb->cb)
        for (int64_t h0 = 0; h0 < pb->H; h0 += pb->ch)
            for (int64_t i0 = 0; i0 < pb->Sq; i0 += pb->cq) {
                int64_t nb = pb->B - b0 < pb->cb ? pb->B - b0 : pb->cb;
                int64_t nh = pb->H - h0 < pb->ch ? pb->H - h0 : pb->ch;
                int64_t nq = pb->Sq - i0 < pb->cq ? pb->Sq - i0 : pb->cq;
                MmTensor ta, tk, ts, tv, to;
                block(&pb->q, b0, nb, h0, nh, i0, nq, &ta);
                block(&pb->kt, b0, nb, h0, nh, 0, pb->kt.d[2], &tk);
                block(&pb->v, b0, nb, h0, nh, 0, pb->v.d[2], &tv);
                MmTensor vsrc = tv;   /* v's block as it lies, when packed */
                if (pb->pack_v) {   /* the same dims (a broadcast batch stays one), contiguous */
                    int64_t st = 1;
                    for (int d = 3; d >= 0; d--) {
                        tv.strides[d] = st;
                        st *= tv.dims[d];
                    }
                    tv.data = vbuf;
                }
                block(&pb->o, b0, nb, h0, nh, i0, nq, &to);
                View4 sv = {{nb, nh, nq, pb->Sk}, {nh * nq * pb->Sk, nq * pb->Sk, pb->Sk, 1}, (char *)scores};
                block(&sv, 0, nb, 0, nh, 0, nq, &ts);
                MmTensor ts2 = ts;
                PcEntry *e1 = NULL, *e2 = NULL;
                MmKey k1, k2;
                int no_tag = 0;
                void *p1 = product(&ta, &tk, &ts, &k1, &e1, &no_tag);
                void *p2 = p1 ? product(&ts2, &tv, &to, &k2, &e2, &no_tag) : NULL;
                if (!p1 || !p2) {
                    if (e1)
                        primcache_release(e1);
                    if (e2)
                        primcache_release(e2);
                    return PyErr_Occurred() ? -1 : no_tag && nb > 1 ? 2 : 1;
                }
                /* a block is a run of (batch, head) pairs: whole batches, or heads of one */
                int64_t n[4] = {nb * nh, nq, pb->Sk, pb->Hm};
                int64_t mst[4] = {pb->m.s[0], pb->m.s[1], pb->m.s[2], b0 * pb->H + h0};
                char *ptrs[3] = {(char *)scores, pb->has_mask ? pb->m.data : NULL, (char *)&pb->scale};
                int st1, st2 = 0;
                int64_t bad = 0;
                Py_BEGIN_ALLOW_THREADS if (pb->pack_v && i0 == 0)
                    lower_copy_strided((char *)vbuf, tv.strides, vsrc.data, vsrc.strides, vsrc.dims, 4, sizeof(float));
                st1 = dnnl_api_matmul_exec(p1, &k1, &ta, &tk, NULL, &ts, NULL);
                if (!st1 && !(bad = s->fn(n, ptrs, mst, i0)))
                    st2 = dnnl_api_matmul_exec(p2, &k2, &ts2, &tv, NULL, &to, NULL);
                Py_END_ALLOW_THREADS primcache_release(e1);
                primcache_release(e2);
                if (bad)
                    s->nonfinite++;
                if (st1 || st2 || bad)
                    return 1;
            }
    return 0;
}

/* The block sizes: whole batches while they fit SJ_ATTN_BLOCK_BYTES of scores, else whole
 * heads, else query rows (at least 16). */
static void block_sizes(Problem *pb)
{
    int64_t row = pb->Sk * 4, head = pb->Sq * row, cap = SJ_ATTN_BLOCK_BYTES;
    pb->cb = pb->B;
    pb->ch = pb->H;
    pb->cq = pb->Sq;
    if (head * pb->H * pb->B <= cap)
        return;
    if (head * pb->H <= cap) {
        pb->cb = cap / (head * pb->H);
        return;
    }
    pb->cb = 1;
    if (head <= cap) {
        pb->ch = cap / head;
        return;
    }
    pb->ch = 1;
    pb->cq = cap / row < 16 ? 16 : cap / row;
}

/* Reads the operands into pb. 0, 1 (not ours: run eagerly), -1. */
static int setup(struct AttnStep *s, Operand *op, PyObject **vals, Problem *pb)
{
    int r = s->rank;
    if (op[0].ndim != r || op[1].ndim != r || op[2].ndim != r)
        return 1;
    View4 k;
    as4(&op[0], r, pb->q.d, pb->q.s);
    as4(&op[1], r, k.d, k.s);
    as4(&op[2], r, pb->v.d, pb->v.s);
    pb->q.data = op[0].data;
    pb->v.data = op[2].data;
    /* batch and head dims broadcast (a size-1 one by stride 0: one key/value head for all
     * query heads, as Falcon's multi-query attention passes them) */
    pb->same_batch = 1;
    for (int i = 0; i < 2; i++) {
        View4 *ops[3] = {&pb->q, &k, &pb->v};
        int64_t full = 1;
        for (int j = 0; j < 3; j++)
            full = ops[j]->d[i] > full ? ops[j]->d[i] : full;
        for (int j = 0; j < 3; j++) {
            if (ops[j]->d[i] == full)
                continue;
            if (ops[j]->d[i] != 1)
                return 1;
            ops[j]->d[i] = full;
            ops[j]->s[i] = 0;
            pb->same_batch = 0;
        }
    }
    if (k.d[3] != pb->q.d[3] || k.d[2] != pb->v.d[2])
        return 1;
    for (int i = 0; i < 4; i++)
        if (pb->q.d[i] <= 0 || k.d[i] <= 0 || pb->v.d[i] <= 0)
            return 1;
    pb->B = pb->q.d[0];
    pb->H = pb->q.d[1];
    pb->Sq = pb->q.d[2];
    pb->Sk = k.d[2];
    /* k^T: (batch, heads, embedding, keys) */
    pb->kt = k;
    pb->kt.d[2] = k.d[3];
    pb->kt.d[3] = k.d[2];
    pb->kt.s[2] = k.s[3];
    pb->kt.s[3] = k.s[2];
    pb->kt.data = op[1].data;
    if (s->scale_value >= 0) {   /* torch computes the scale in double, applies it in float */
        double d = vals[s->scale_value] ? PyFloat_AsDouble(vals[s->scale_value]) : -1.0;
        if (d == -1.0 && PyErr_Occurred())
            return -1;
        if (!vals[s->scale_value])
            return 1;
        pb->scale = (float)d;
    } else {
        pb->scale = s->has_scale ? s->scale : (float)(1.0 / sqrt((double)pb->q.d[3]));
    }
    pb->Hm = pb->H;
    pb->has_mask = s->mask >= 0;
    memset(&pb->m, 0, sizeof pb->m);
    if (pb->has_mask) {
        /* right-aligned against the scores, (batch, heads, queries, keys) or, rank 3,
         * (batch, queries, keys); broadcast by stride 0 */
        const Operand *m = &op[3];
        int mr = m->ndim;
        const int64_t full4[4] = {pb->B, pb->H, pb->Sq, pb->Sk}, full3[3] = {pb->B, pb->Sq, pb->Sk};
        const int64_t *full = r == 4 ? full4 : full3;
        int64_t md[4], ms[4];
        for (int i = 0; i < r; i++) {
            int j = i - (r - mr);
            int64_t d = j >= 0 ? m->size[j] : 1;
            if (d != full[i] && d != 1)
                return 1;
            md[i] = full[i];
            ms[i] = j >= 0 && d != 1 ? m->stride[j] : 0;
        }
        if (r == 3) {   /* one head */
            md[3] = md[2], ms[3] = ms[2];
            md[2] = md[1], ms[2] = ms[1];
            md[1] = 1, ms[1] = 0;
        }
        memcpy(pb->m.d, md, sizeof md);
        memcpy(pb->m.s, ms, sizeof ms);
        if (pb->Sk > 1 && pb->m.s[3] != 1)
            return 1;
        pb->m.data = m->data;
    }
    return 0;
}

int step_attn_run(Graph *g, LowerPlan *p, int32_t idx, PyObject **vals)
{
    struct AttnStep *s = &p->attns[idx];
    Operand op[5];
    int nread = 0, rc = 1;
    PyObject *res = NULL;   /* strong: the result */
    float *scores = NULL;   /* s->scratch, or a block of this run's own (another thread) */
    int own = 0;
    Problem pb;
    const int32_t ids[4] = {s->q, s->k, s->v, s->mask};
    if (!s->fn)
        goto done;
    for (int i = 0; i < 4 && ids[i] >= 0; i++) {
        if (!vals[ids[i]] ||
            (rc = lower_read_input_dt(vals[ids[i]], LIB_TORCH, i == 3 && s->mask_kind == 2 ? DT_BOOL : DT_F32,
                                      &op[nread])) != 0) {
            rc = rc < 0 ? -1 : 1;
            goto done;
        }
        nread++;
    }
    if ((rc = setup(s, op, vals, &pb)))
        goto done;
    if (pb.B * pb.H * pb.Sq * pb.Sk < SJ_ATTN_MIN_SCORES ||
        (pb.Sq * pb.Sk < SJ_ATTN_MIN_HEAD_SCORES && dnnl_api_threads() > 1)) {
        s->small++;
        rc = 2;
        goto done;
    }
    int64_t odims[4] = {pb.B, pb.H, pb.Sq, pb.v.d[3]};
    if (s->rank == 3) {
        odims[1] = pb.Sq;
        odims[2] = pb.v.d[3];
    }
    if (!(res = new_result(s, op, &pb, odims))) {
        rc = -1;
        goto done;
    }
    if ((rc = lower_read_input(res, LIB_TORCH, &op[nread])) != 0)
        goto done;
    as4(&op[nread], s->rank, pb.o.d, pb.o.s);
    pb.o.data = op[nread].data;
    nread++;
    /* (batch, heads) as one dim when every operand walks them with one stride: one block
     * of products where the layout (torch's MHA: seq, batch, heads, embedding) has no
     * 4-D oneDNN tag */
    if (merges(pb.q.d, pb.q.s) && merges(pb.kt.d, pb.kt.s) && merges(pb.v.d, pb.v.s) && merges(pb.o.d, pb.o.s) &&
        pb.B > 1) {
        View4 *vs[4] = {&pb.q, &pb.kt, &pb.v, &pb.o};
        for (int i = 0; i < 4; i++) {
            int64_t hs = vs[i]->d[1] == 1 ? vs[i]->s[0] : vs[i]->s[1];
            vs[i]->d[1] = pb.B * pb.H;
            vs[i]->s[1] = hs;
            vs[i]->d[0] = 1;
        }
        pb.H *= pb.B;
        pb.B = 1;
    }
    /* v read in place with its keys 4096 bytes apart (or a multiple: nn.MultiheadAttention's
     * (S, B, H, D) layout at 8 x 4 x 32) aliases in L1 while oneDNN packs it, which made the
     * second product 1.5x slower on AVX2 (encoder_s128's attention, 1 thread: 1081 us, 931
     * with v contiguous); such a v is copied contiguous a block at a time first */
    pb.pack_v = pb.Sk > 1 && pb.v.s[2] != pb.v.d[3] && (pb.v.s[2] * 4) % 4096 == 0;
    /* q, k and v batch first but a result eager lays out (queries, batch, heads, embedding)
     * (torch's flash kernel makes it like q, which nn.MultiheadAttention's packed projection
     * lays out so): no 4-D tag for that, so the products would run a batch at a time. They
     * write a scratch block laid out (batch, queries, heads, embedding) instead, copied
     * into the result after: encoder_s128's attention with AVX2 at 2 threads, 920 us a
     * batch at a time, 802 us so. */
    pb.staged = pb.B > 1 && tagged(&pb.q) && tagged(&pb.kt) && tagged(&pb.v) && !tagged(&pb.o);
    block_sizes(&pb);
    int64_t stage_at =
        (pb.cb * pb.ch * pb.cq * pb.Sk + 15) / 16 * 16 + (pb.pack_v ? pb.cb * pb.ch * pb.Sk * pb.v.d[3] : 0);
    stage_at = (stage_at + 15) / 16 * 16;
    int64_t need = stage_at + (pb.staged ? pb.B * pb.H * pb.Sq * pb.o.d[3] : 0);
    if (!s->busy && s->scratch_n < need) {
        free(s->scratch);
        s->scratch = aligned_alloc(64, (size_t)((need * 4 + 63) / 64 * 64));
        s->scratch_n = s->scratch ? need : 0;
    }
    if (!s->busy && s->scratch) {
        scores = s->scratch;
        s->busy = 1;
    } else {
        scores = aligned_alloc(64, (size_t)((need * 4 + 63) / 64 * 64));
        own = 1;
    }
    if (!scores) {
        PyErr_NoMemory();
        rc = -1;
        goto done;
    }
    if (pb.staged) {
        pb.out = pb.o;
        int64_t e = pb.o.d[3];
        pb.o.s[3] = 1;
        pb.o.s[1] = e;
        pb.o.s[2] = e * pb.o.d[1];
        pb.o.s[0] = e * pb.o.d[1] * pb.o.d[2];
        pb.o.data = (char *)(scores + stage_at);
    }
    rc = run_blocks(s, &pb, scores);
    if (rc == 2) {   /* blocks within one batch (fewer scores: the scratch suffices) */
        pb.cb = 1;
        rc = run_blocks(s, &pb, scores);
        rc = rc == 2 ? 1 : rc;
    }
    if (rc == 0 && pb.staged) {
        Py_BEGIN_ALLOW_THREADS copy_view4(&pb.out, &pb.o);
        Py_END_ALLOW_THREADS s->staged++;
    }
    if (own)
        free(scores);
    else
        s->busy = 0;
done:
    for (int i = 0; i < nread; i++)
        if (op[i].has_view)
            PyBuffer_Release(&op[i].view);
    s->calls += rc == 0;
    if (rc == 1)
        s->fallbacks++;
    rc = rc == 2 ? 1 : rc;   /* a small call: torch's kernel, not a fallback */
    if (rc == 0) {
        Py_XSETREF(vals[s->out], res);
        return 0;
    }
    Py_XDECREF(res);
    if (rc < 0)
        return -1;
    return lower_exec_nodes(g, s->node, NULL, 0, vals);
}
