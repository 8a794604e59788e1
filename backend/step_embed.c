/* Embedding lookups of the cpu backend: F.embedding(input, weight) of an int64 or int32
 * torch index tensor into a 2-D float32 or float64 torch weight, as a row copy per index
 * into a new contiguous output (from the graph's buffer pool). Transformers' token,
 * position and relative-position embeddings are small (a few KB), where torch's call
 * (argument parsing, the dispatcher, index_select's checks) is most of the time. The
 * forward value does not depend on padding_idx, scale_grad_by_freq or sparse (they change
 * the gradient only); max_norm (which renormalises the weight's rows in place) runs
 * eagerly. An index out of range, a weight of another dtype or rank, or an operand of
 * another layout than the plan foresaw runs the node eagerly, which gives torch's own
 * result or error.
 *
 * Memory: the step array is PyMem of the plan; a run holds no reference beyond the call. */
#include <string.h>

#include "lower_int.h"

struct EmbedStep {
    int32_t node, idx, weight, out;
    DType idt, wdt;
    long long calls, fallbacks;
};

int32_t step_embed_plan(Graph *g, int32_t ni, LowerPlan *p)
{
    const Node *nd = &g->nodes[ni];
    if (nd->op != OP_EMBEDDING || nd->nout != 1 || (nd->flags & (NODE_INPLACE | NODE_OUT)))
        return -1;
    const TensorMeta *om = &g->values[nd->first_value].meta;
    if (om->lib != LIB_TORCH || (om->dtype != DT_F32 && om->dtype != DT_F64) || om->requires_grad || om->symint ||
        om->np_scalar || om->ndim < 1 || om->ndim > SJ_MAX_RANK)
        return -1;
    const SchemaParam *ps;
    int n = graph_node_params(g, ni, &ps);
    int32_t idx = -1, weight = -1;
    for (int i = 0; i < n; i++) {
        const Arg *x = &g->pool[nd->bound + i];
        if (x->kind == ARG_ABSENT)
            continue;
        if (!strcmp(ps[i].name, "input") && x->kind == ARG_VALUE)
            idx = x->a;
        else if (!strcmp(ps[i].name, "weight") && x->kind == ARG_VALUE)
            weight = x->a;
        else if (!strcmp(ps[i].name, "max_norm")) {
            if (x->kind != ARG_CONST || PyList_GET_ITEM(g->consts, x->a) != Py_None)
                return -1;
        } else if (x->kind != ARG_CONST)   /* padding_idx, norm_type, ...: constants only */
            return -1;
    }
    if (idx < 0 || weight < 0)
        return -1;
    const TensorMeta *im = &g->values[idx].meta, *wm = &g->values[weight].meta;
    if (im->lib != LIB_TORCH || (im->dtype != DT_I64 && im->dtype != DT_I32) || im->np_scalar ||
        im->ndim + 1 != om->ndim || wm->lib != LIB_TORCH || wm->dtype != om->dtype || wm->ndim != 2)
        return -1;
    struct EmbedStep s = {ni, idx, weight, nd->first_value, (DType)im->dtype, (DType)wm->dtype, 0, 0};
    if (lower_push_step(p, STEP_EMBED, (void **)&p->embeds, &p->nembeds, sizeof s, &s) < 0)
        return -2;
    return ni;
}

/* Copies the rows of w (vocabulary nv, row stride ws0, element stride ws1, width d, item
 * bytes each) that the nidx indices at ix (of type T, walked in row-major order over sizes
 * isz with strides ist, rank r) name, into the contiguous out. 1 when an index is out of
 * range (nothing to keep: the node runs eagerly). */
#define COPY_ROWS(T) \
    static int copy_rows_##T(char *out, const char *w, int64_t nv, int64_t ws0, int64_t ws1, int64_t d, size_t item, \
                             const T *ix, const int64_t *isz, const int64_t *ist, int r) \
    { \
        int64_t at[SJ_MAX_RANK] = {0}, off = 0; \
        for (int k = 0; k < r; k++) \
            if (isz[k] <= 0) \
                return 0; \
        for (;;) { \
            int64_t v = (int64_t)ix[off]; \
            if (v < 0 || v >= nv) \
                return 1; \
            const char *row = w + v * ws0 * (int64_t)item; \
            if (ws1 == 1) \
                memcpy(out, row, (size_t)d * item); \
            else \
                for (int64_t j = 0; j < d; j++) \
                    memcpy(out + j * (int64_t)item, row + j * ws1 * (int64_t)item, item); \
            out += d * (int64_t)item; \
            int k = r - 1; \
            for (; k >= 0; k--) { \
                off += ist[k]; \
                if (++at[k] < isz[k]) \
                    break; \
                off -= ist[k] * isz[k]; \
                at[k] = 0; \
            } \
            if (k < 0) \
                return 0; \
        } \
    }
COPY_ROWS(int64_t)
COPY_ROWS(int32_t)
#undef COPY_ROWS

int step_embed_run(Graph *g, LowerPlan *p, int32_t i, PyObject **vals)
{
    struct EmbedStep *s = &p->embeds[i];
    Operand io, wo, o;
    memset(&io, 0, sizeof io);
    memset(&wo, 0, sizeof wo);
    memset(&o, 0, sizeof o);
    PyObject *res = NULL;   /* strong */
    int rc = 1, nread = 0;
    if (vals[s->idx] && vals[s->weight]) {
        rc = lower_read_input_dt(vals[s->idx], LIB_TORCH, s->idt, &io);
        nread = rc == 0;
        if (rc == 0 && (rc = lower_read_input_dt(vals[s->weight], LIB_TORCH, s->wdt, &wo)) == 0)
            nread = 2;
    }
    if (rc == 0 && (wo.ndim != 2 || io.ndim + 1 > SJ_MAX_RANK))
        rc = 1;
    int64_t osize[SJ_MAX_RANK];
    if (rc == 0) {
        for (int d = 0; d < io.ndim; d++)
            osize[d] = io.size[d];
        osize[io.ndim] = wo.size[1];
        if (!(res = lower_new_output_dt(LIB_TORCH, s->wdt, osize, io.ndim + 1)))
            rc = -1;
    }
    if (rc == 0)
        rc = lower_read_input_dt(res, LIB_TORCH, s->wdt, &o);
    if (rc == 0) {
        size_t item = (size_t)dtype_info[s->wdt].itemsize;
        rc = s->idt == DT_I64 ? copy_rows_int64_t(o.data, wo.data, wo.size[0], wo.stride[0], wo.stride[1], wo.size[1],
                                                  item, (const int64_t *)(void *)io.data, io.size, io.stride, io.ndim)
                              : copy_rows_int32_t(o.data, wo.data, wo.size[0], wo.stride[0], wo.stride[1], wo.size[1],
                                                  item, (const int32_t *)(void *)io.data, io.size, io.stride, io.ndim);
    }
    if (o.has_view)
        PyBuffer_Release(&o.view);
    if (nread > 0 && io.has_view)
        PyBuffer_Release(&io.view);
    if (nread > 1 && wo.has_view)
        PyBuffer_Release(&wo.view);
    s->calls += rc == 0;
    return lower_step_done(g, s->node, s->out, rc, res, &s->fallbacks, vals);   /* steals res */
}

void step_embed_free(LowerPlan *p)
{
    PyMem_Free(p->embeds);
    p->embeds = NULL;
    p->nembeds = 0;
}

int step_embed_stats(const Graph *g, const LowerPlan *p, PyObject *d)
{
    (void)g;
    long long v[3] = {p->nembeds, 0, 0};
    for (int32_t i = 0; i < p->nembeds; i++) {
        v[1] += p->embeds[i].calls;
        v[2] += p->embeds[i].fallbacks;
    }
    static const char *const names[] = {"embed_steps", "embed_calls", "embed_fallbacks"};
    return lower_put_counts(d, 3, names, v);
}
