/* Concatenation steps of the cpu backend: torch.cat / concat / concatenate and
 * numpy.concatenate of tensors of one kernel dtype (float32, float64, int64, int32, bool)
 * along one dim, and torch.stack (a cat of the inputs each unsqueezed at dim, with the
 * stride torch's unsqueeze gives the new dim, as torch's stack is), written by a strided
 * copy per input into its slice of a new output:
 * contiguous (from the graph's buffer pool), or channels-last when every input is (as
 * eager's: a network's channels-last branches joined). Sizes are read at run time, so one plan serves
 * every size. Anything the plan or the run cannot take (mixed dtypes or ranks, numpy's
 * axis=None, out=, dtype=, sizes that do not match) runs the node eagerly, which gives
 * the library's own result or error.
 *
 * Memory: the step array and each step's input list are PyMem of the plan; a run holds
 * the inputs' buffers (numpy) only while it copies. */
#include <string.h>

#include "lower_int.h"

struct CatStep {
    int32_t node, out;
    int32_t *ins;       /* PyMem: the input values, in order */
    int32_t nin;
    int dim, rank;
    int stack;          /* torch.stack: each input gets a size-1 dim at dim first */
    Lib lib;
    DType dt;
    long long calls, fallbacks;
};

int32_t step_cat_plan(Graph *g, int32_t ni, LowerPlan *p)
{
    const Node *nd = &g->nodes[ni];
    if ((nd->op != OP_CAT && nd->op != OP_STACK) || nd->nout != 1 || (nd->flags & NODE_INPLACE))
        return -1;
    int stack = nd->op == OP_STACK;
    const TensorMeta *om = &g->values[nd->first_value].meta;
    if (!lower_dtype_ok((DType)om->dtype) || om->requires_grad || om->symint || om->np_scalar || om->ndim < 1 ||
        om->ndim > SJ_MAX_RANK)
        return -1;
    /* the bound arguments: the list, the dim; out=, dtype= (not None) and anything else:
     * eager */
    const Arg *list = NULL;
    PyObject *dimv = NULL;   /* borrowed */
    const SchemaParam *ps;
    int n = graph_node_params(g, ni, &ps);
    if (n == 0 || (nd->flags & NODE_OUT))
        return -1;
    for (int i = 0; i < n; i++) {
        const Arg *x = &g->pool[nd->bound + i];
        if (x->kind == ARG_ABSENT)
            continue;
        PyObject *v = x->kind == ARG_CONST ? PyList_GET_ITEM(g->consts, x->a) : NULL;   /* borrowed */
        if (!strcmp(ps[i].name, "tensors"))
            list = x;
        else if (!strcmp(ps[i].name, "dim") && v && !dimv)
            dimv = v;
        else if (!v || (v != Py_None && strcmp(ps[i].name, "casting")))
            return -1;
    }
    int64_t dim = 0;
    if (dimv && lower_const_int(dimv, &dim))
        return -1;   /* numpy's axis=None flattens: eager */
    if (!list || (list->kind != ARG_LIST && list->kind != ARG_TUPLE) || list->n < 1)
        return -1;
    int r = om->ndim;
    if (dim < -r || dim >= r)
        return -1;
    CatStep s;
    memset(&s, 0, sizeof s);
    s.node = ni;
    s.out = nd->first_value;
    s.dim = (int)(dim < 0 ? dim + r : dim);
    s.rank = r;
    s.stack = stack;
    s.lib = (Lib)om->lib;
    s.dt = (DType)om->dtype;
    s.ins = PyMem_Malloc(sizeof(int32_t) * (size_t)list->n);
    if (!s.ins) {
        PyErr_NoMemory();
        return -2;
    }
    for (int32_t i = 0; i < list->n; i++) {
        const Arg *it = &g->pool[list->a + i];
        const TensorMeta *m = it->kind == ARG_VALUE ? &g->values[it->a].meta : NULL;
        /* the same dtype, library and rank as the output (no promotion, no legacy empty 1-D) */
        if (!m || m->dtype != om->dtype || m->lib != om->lib || m->ndim != r - stack || m->symint || m->np_scalar) {
            PyMem_Free(s.ins);
            return -1;
        }
        s.ins[s.nin++] = it->a;
    }
    if (lower_push_step(p, STEP_CAT, (void **)&p->cats, &p->ncats, sizeof s, &s) < 0) {
        PyMem_Free(s.ins);
        return -2;
    }
    return ni;
}

/* o (a stack input of rank r - 1) as torch's unsqueeze(dim) sees it: a size-1 dim at dim,
 * its stride size * stride of the dim it lands before (1 at the end). 0, or 1 when the
 * rank does not fit (the node runs eagerly). */
static int unsqueezed(Operand *o, int dim, int r)
{
    if (o->ndim != r - 1 || r > SJ_MAX_RANK)
        return 1;
    for (int d = r - 1; d > dim; d--) {
        o->size[d] = o->size[d - 1];
        o->stride[d] = o->stride[d - 1];
    }
    o->stride[dim] = dim < r - 1 ? o->size[dim + 1] * o->stride[dim + 1] : 1;
    o->size[dim] = 1;
    o->ndim = r;
    o->lay = NULL;   /* the input's own layout no longer lines up with these dims */
    return 0;
}

/* A cat along an inner dim of inputs whose dims from the cat dim on are contiguous, into a
 * contiguous output: each input's part of an output row (the dims before the cat dim
 * fixed) is one contiguous block, and the output is written in order, row by row, a block
 * from each input in turn (torch's own order; input by input would revisit every row once
 * per input, and a stack of many small pieces along an inner dim is all rows). 1 when
 * done, 0 when the inputs or output are not of that form (the caller copies input by
 * input). */
static int interleaved(const CatStep *s, const Operand *ops, const int64_t *osize, const int64_t *ost, char *out,
                       size_t item)
{
    int r = s->rank, dim = s->dim;
    if (dim == 0 || s->nin < 2)
        return 0;
    int64_t want = 1;
    for (int d = r - 1; d >= 0; d--) {   /* the output contiguous */
        if (osize[d] != 1 && ost[d] != want)
            return 0;
        want *= osize[d];
    }
    for (int32_t i = 0; i < s->nin; i++) {   /* each input contiguous from dim on */
        want = 1;
        for (int d = r - 1; d >= dim; d--) {
            if (ops[i].size[d] != 1 && ops[i].stride[d] != want)
                return 0;
            want *= ops[i].size[d];
        }
    }
    /* per input: its block's bytes and its offset for the current row */
    size_t *bytes = PyMem_RawMalloc(sizeof(size_t) * (size_t)s->nin);
    int64_t *off = PyMem_RawCalloc((size_t)s->nin, sizeof(int64_t));
    if (!bytes || !off) {
        PyMem_RawFree(bytes);
        PyMem_RawFree(off);
        return 0;
    }
    for (int32_t i = 0; i < s->nin; i++) {
        int64_t n = 1;
        for (int d = dim; d < r; d++)
            n *= ops[i].size[d];
        bytes[i] = (size_t)n * item;
    }
    /* the dims before the cat dim, merged where every input steps through them as one (a
     * row-major input, or a strided view such as x[..., ::2] of one): the innermost merged
     * dim is a tight loop, the others an odometer. A stack of k small pieces along the last
     * dim (rotary embeddings' interleave) is then one loop over all rows, and a stack of
     * many pieces along an inner dim (a scan's steps) one loop of fixed-size block moves. */
    int64_t msize[SJ_MAX_RANK];
    int64_t *mst = PyMem_RawMalloc(sizeof(int64_t) * SJ_MAX_RANK * (size_t)s->nin);   /* [d * nin + i] */
    if (!mst) {
        PyMem_RawFree(bytes);
        PyMem_RawFree(off);
        return 0;
    }
    int nm = 0;
    for (int d = 0; d < dim; d++) {
        if (osize[d] == 1)
            continue;
        int merge = nm > 0;
        for (int32_t i = 0; merge && i < s->nin; i++)
            merge = mst[(nm - 1) * s->nin + i] == ops[i].stride[d] * osize[d];
        if (merge)
            msize[nm - 1] *= osize[d];
        else
            msize[nm++] = osize[d];
        for (int32_t i = 0; i < s->nin; i++)
            mst[(nm - 1) * s->nin + i] = ops[i].stride[d];
    }
    if (nm == 0) {   /* one row */
        msize[0] = 1;
        for (int32_t i = 0; i < s->nin; i++)
            mst[i] = 0;
        nm = 1;
    }
    const int64_t *inner = mst + (nm - 1) * s->nin;
    char *to = out;
    int64_t outer = 1, idx[SJ_MAX_RANK] = {0}, n = msize[nm - 1];
    for (int d = 0; d < nm - 1; d++)
        outer *= msize[d];
    size_t same = bytes[0];   /* every block this size, or 0 */
    for (int32_t i = 1; i < s->nin && same; i++)
        same = bytes[i] == same ? same : 0;
    int one = same == item && (item == 4 || item == 8);   /* one-element blocks: typed moves */
    for (int64_t o = 0; o < outer; o++) {
        if (one) {
            for (int32_t i = 0; i < s->nin; i++) {
                const char *from = ops[i].data + off[i] * (int64_t)item;
                int64_t step = inner[i] * (int64_t)item;
                char *w = to + (size_t)i * item;
                if (item == 4) {
                    for (int64_t t = 0; t < n; t++)
                        memcpy(w + (size_t)t * s->nin * 4, from + t * step, 4);
                } else {
                    for (int64_t t = 0; t < n; t++)
                        memcpy(w + (size_t)t * s->nin * 8, from + t * step, 8);
                }
            }
            to += (size_t)n * s->nin * item;
        } else {
            for (int64_t t = 0; t < n; t++)
                for (int32_t i = 0; i < s->nin; i++) {
                    const char *from = ops[i].data + (off[i] + t * inner[i]) * (int64_t)item;
                    switch (same) {   /* fixed sizes: one or two vector moves each */
                    case 16:
                        memcpy(to, from, 16);
                        break;
                    case 32:
                        memcpy(to, from, 32);
                        break;
                    case 64:
                        memcpy(to, from, 64);
                        break;
                    default:
                        lower_copy_bytes(to, from, bytes[i]);
                    }
                    to += bytes[i];
                }
        }
        for (int d = nm - 2; d >= 0; d--) {
            for (int32_t i = 0; i < s->nin; i++)
                off[i] += mst[d * s->nin + i];
            if (++idx[d] < msize[d])
                break;
            for (int32_t i = 0; i < s->nin; i++)
                off[i] -= mst[d * s->nin + i] * msize[d];
            idx[d] = 0;
        }
    }
    PyMem_RawFree(mst);
    PyMem_RawFree(bytes);
    PyMem_RawFree(off);
    return 1;
}

int step_cat_run(Graph *g, LowerPlan *p, int32_t idx, PyObject **vals)
{
    CatStep *s = &p->cats[idx];
    int r = s->rank, rc = 0, nread = 0;
    Operand stack_ops[8];
    Operand *ops = s->nin <= 8 ? stack_ops : PyMem_Malloc(sizeof(Operand) * (size_t)s->nin);
    if (!ops) {
        PyErr_NoMemory();
        return -1;
    }
    int64_t osize[SJ_MAX_RANK];
    for (int32_t i = 0; i < s->nin && rc == 0; i++) {
        if (!vals[s->ins[i]]) {
            rc = 1;
            break;
        }
        rc = lower_read_input_dt(vals[s->ins[i]], s->lib, s->dt, &ops[i]);
        nread = i + 1;
        if (rc == 0 && s->stack)
            rc = unsqueezed(&ops[i], s->dim, r);
        if (rc == 0 && ops[i].ndim != r)
            rc = 1;
        for (int d = 0; rc == 0 && d < r; d++) {
            if (i == 0)
                osize[d] = ops[i].size[d];
            else if (d == s->dim)
                osize[d] += ops[i].size[d];
            else if (osize[d] != ops[i].size[d])
                rc = 1;   /* eager raises its own error */
        }
    }
    PyObject *res = NULL;   /* strong */
    Operand o;
    memset(&o, 0, sizeof o);
    /* eager's result is channels-last when every input's strides count as channels-last
     * (4-D torch tensors), else row-major; the copies then walk NHWC order */
    int cl = rc == 0 && s->lib == LIB_TORCH && r == 4, perm[4];
    for (int32_t i = 0; cl && i < s->nin; i++)
        cl = lower_strides_like_cl(ops[i].size, ops[i].stride);
    if (cl) {
        int64_t st[4];
        lower_nhwc_perm(perm);
        lower_strides_in(osize, perm, 4, st);
        if (!(res = lower_new_output_strided(LIB_TORCH, s->dt, osize, st, 4)))
            rc = -1;
    } else if (rc == 0 && !(res = lower_new_output_dt(s->lib, s->dt, osize, r))) {
        rc = -1;
    }
    if (rc == 0)
        rc = lower_read_input_dt(res, s->lib, s->dt, &o);
    if (rc == 0) {
        size_t item = (size_t)dtype_info[s->dt].itemsize;
        int64_t ost[SJ_MAX_RANK], at = 0;
        for (int d = 0; d < r; d++)
            ost[d] = o.stride[d];
        Py_BEGIN_ALLOW_THREADS if (!cl && interleaved(s, ops, osize, ost, o.data, item))
        {
            /* done row by row of the output (blocks_copy) */
        }
        else for (int32_t i = 0; i < s->nin; i++)
        {
            char *to = o.data + at * ost[s->dim] * (int64_t)item;
            if (cl) {   /* the dims in memory order: each pixel's channels one memcpy */
                int64_t pd[4], ps[4], pn[4];
                for (int d = 0; d < 4; d++) {
                    pd[d] = ost[perm[d]];
                    ps[d] = ops[i].stride[perm[d]];
                    pn[d] = ops[i].size[perm[d]];
                }
                lower_copy_strided(to, pd, ops[i].data, ps, pn, 4, item);
            } else {
                lower_copy_strided(to, ost, ops[i].data, ops[i].stride, ops[i].size, r, item);
            }
            at += ops[i].size[s->dim];
        }
        Py_END_ALLOW_THREADS s->calls++;
    }
    if (o.has_view)
        PyBuffer_Release(&o.view);
    for (int i = 0; i < nread; i++)
        if (ops[i].has_view)
            PyBuffer_Release(&ops[i].view);
    if (ops != stack_ops)
        PyMem_Free(ops);
    return lower_step_done(g, s->node, s->out, rc, res, &s->fallbacks, vals);   /* steals res */
}

void step_cat_free(LowerPlan *p)
{
    for (int32_t i = 0; i < p->ncats; i++)
        PyMem_Free(p->cats[i].ins);
    PyMem_Free(p->cats);
}

int step_cat_stats(const Graph *g, const LowerPlan *p, PyObject *d)
{
    (void)g;
    long long v[3] = {p->ncats, 0, 0};
    for (int32_t i = 0; i < p->ncats; i++) {
        v[1] += p->cats[i].calls;
        v[2] += p->cats[i].fallbacks;
    }
    static const char *const names[] = {"cat_steps", "cat_calls", "cat_fallbacks"};
    return lower_put_counts(d, 3, names, v);
}
