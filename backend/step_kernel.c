/* Kernel steps and eager steps of the cpu backend. A kernel step calls a generated kernel
 * (build.c) through its libffi description; an eager step runs its node's original call.
 *
 * Per kernel call: read each input's sizes, strides and data pointer (the tensor reader
 * for torch, the buffer protocol for numpy), broadcast them into the iteration space,
 * allocate the outputs (of each value's meta dtype, laid out as eager lays them out:
 * row-major from the graph's buffer pool or the library's empty(), or a pointwise
 * result in its inputs' memory order, result_layout) and call the kernel; a kernel that
 * returns 1 (an integer division by zero) has its nodes rerun eagerly; a lean reduction
 * that returns SJ_KERNEL_WANTS_FULL (rows it was built without, nothing written) gets
 * its full variant built (lower_build_full) and called instead, from then on. Anything
 * unexpected about an input (a dtype or a shape the plan did not foresee) runs that
 * kernel's nodes eagerly instead: never wrong, only slower.
 *
 * Memory: the plan's kernels and their node lists are PyMem of the plan; outputs go into
 * the run's vals[] as strong references; numpy inputs' buffers are held only during the
 * call. */
#include <string.h>

#include "lower_int.h"

/* ------------------------------------------------------- result layout ---- */

/* Eager lays out each pointwise op's result by the rule lower.def's LAYOUT column names for
 * it: mostly TensorIterator's (the inputs' memory order: a transposed input gives a
 * transposed result, channels-last gives channels-last, the first input decides where
 * inputs differ; inputs of another dtype count as their converted copies), else
 * row-major or empty_like's. A fused kernel gives each result the layout eager's chain of
 * ops would: the first call that has an input not row-major reads its nodes into a small
 * program (KernelLayout), and such calls run it over the inputs' sizes and strides (a few
 * loops over at most SJ_MAX_RANK dims per node; row-major inputs give row-major results
 * under every rule, so the common call runs nothing). The loops then walk the first
 * result's memory order: a pointwise element does not depend on where it sits. A
 * reduction or row kernel runs the same program over its prologue, its row op and its
 * epilogue, and lays out the full-size values it stores (a residual sum a later op reads
 * again, an RMS norm's result) as eager would, its loops in their own order; its reduced
 * results and softmax/layer_norm rows are row-major, as torch allocates them. A pointwise
 * kernel reading rotate_half follows it while its loops keep the last dim innermost (the
 * rotated read indexes that dim): rotate_half's cat is row-major (torch.cat's layout for
 * halves that do not suggest channels-last), and a transposed q or k times cos keeps its
 * order. A pointwise numpy kernel follows numpy's order 'K' the same way (its results are
 * arrays owning memory in that layout, not pooled): a transposed or Fortran-ordered input
 * gives a result in its order, walked in memory order instead of across it. numpy's
 * reduction kernels keep row-major results. */

/* A node's rule in the program: LR_PRESERVE and LR_CL come from LL_LIKE and the
 * memory_format the node asks for. In a reduction or row kernel: LR_RED for the kernel's
 * reduction with keepdim (row-major, as torch's reductions allocate their result, sized 1
 * over the reduced dims), LR_ROW for softmax, log_softmax, layer_norm and rms_norm
 * (row-major: they run on their input made contiguous) and LR_UNKNOWN for a reduction dropping its dims,
 * whose result (the kernel's reduced output) keeps the plan's layout. LR_ROTCAT is
 * rotate_half's cat, its operand x (the tensor both halves slice): x's size, row-major; the
 * slices and the negation it reads are LR_UNKNOWN with no operand (nothing else reads
 * them: plan_rot_mark). numpy's kernels: LR_NPK for a ufunc (numpy's order 'K': its
 * trivial loop's C or F order when every array operand has the result's shape, one
 * contiguous order and the loop's dtype, else its iterator's axis order), LR_NPITER for
 * np.where (the iterator's order always), LR_NPLIKE for a copy or astype with order 'K',
 * LR_ROW with order 'C'. Their cast bits only rule out the trivial loop: numpy converts
 * inside its loops, with no copy laid out on its own. */
enum { LR_TI, LR_ROW, LR_PRESERVE, LR_CL, LR_RED, LR_UNKNOWN, LR_ROTCAT, LR_NPK, LR_NPITER, LR_NPLIKE };

typedef struct {
    uint8_t rule;      /* LR_* */
    uint8_t scalar;    /* a Python number among its operands: TensorIterator's general path */
    uint8_t nops;
    uint8_t cast;      /* bit i: operand i is converted to the op's dtype first (a dense copy,
                          laid out as a clone: TensorIterator casts CPU inputs) */
    int16_t ops[3];    /* slots of its tensor operands, in TensorIterator's order */
} NodeLayout;

typedef struct KernelLayout {
    int ok;                              /* 0: no program (a node it cannot read): row-major */
    int16_t out_slot[SJ_KMAX_OPERANDS];  /* each output's slot */
    NodeLayout node[];                   /* node j's result is slot nin + j */
} KernelLayout;

typedef struct {
    int nd;                              /* its rank (dims right-aligned in the space); -1
                                            when not known (LR_UNKNOWN and what reads it) */
    int64_t size[SJ_MAX_RANK + 1], st[SJ_MAX_RANK + 1];
} SlotLayout;

static int slot_of(const Graph *g, const Kernel *k, int32_t upto, int32_t v)
{
    for (int32_t i = 0; i < k->nin; i++)
        if (k->ins[i] == v)
            return i;
    for (int32_t j = 0; j < upto; j++)
        if (g->nodes[k->nodes[j]].first_value == v)
            return k->nin + j;
    return -1;
}

/* The memory_format a clone or a cast asks for: LR_PRESERVE (none, or preserve_format),
 * LR_ROW (contiguous_format) or LR_CL (channels_last); -1 another one. */
static int asked_format(const Graph *g, int32_t ni)
{
    const Arg *mf = graph_node_arg(g, ni, "memory_format");
    if (!mf || mf->kind == ARG_ABSENT || (mf->kind == ARG_CONST && PyList_GET_ITEM(g->consts, mf->a) == Py_None))
        return LR_PRESERVE;
    if (mf->kind != ARG_CONST)
        return -1;
    PyObject *o = PyObject_Str(PyList_GET_ITEM(g->consts, mf->a));   /* new: "torch.contiguous_format" */
    const char *t = o ? PyUnicode_AsUTF8(o) : NULL;
    int rule = !t                                      ? -1
               : !strcmp(t, "torch.preserve_format")   ? LR_PRESERVE
               : !strcmp(t, "torch.contiguous_format") ? LR_ROW
               : !strcmp(t, "torch.channels_last")     ? LR_CL
                                                       : -1;
    Py_XDECREF(o);
    PyErr_Clear();
    return rule;
}

/* The rule of numpy node ni (a ufunc, np.where, a copy or astype): LR_NPK, LR_NPITER,
 * LR_NPLIKE, LR_ROW, or -1 for an order it does not follow ('F', 'A'). */
static int np_rule(const Graph *g, int32_t ni)
{
    const Node *nd = &g->nodes[ni];
    const Arg *o = graph_node_arg(g, ni, "order");
    int like = nd->op == OP_CLONE || nd->op == OP_CAST;
    if (nd->op == OP_WHERE)
        return LR_NPITER;
    if (!o || o->kind == ARG_ABSENT)   /* the row's default: 'K', or the one it fixes (ndarray.copy's 'C') */
        o = graph_node_arg(g, ni, "default_order");
    if (!o || o->kind == ARG_ABSENT)
        return like ? LR_NPLIKE : LR_NPK;
    PyObject *v = o->kind == ARG_CONST ? PyList_GET_ITEM(g->consts, o->a) : NULL;   /* borrowed */
    if (!v || !PyUnicode_Check(v))
        return -1;
    if (PyUnicode_CompareWithASCIIString(v, "C") == 0)
        return LR_ROW;
    if (PyUnicode_CompareWithASCIIString(v, "K") == 0)
        return like ? LR_NPLIKE : LR_NPK;
    return -1;
}

/* The rule of node ni when it is the reduction or row op of reduction or row kernel k,
 * else -1. */
static int reduce_rule(const Graph *g, const Kernel *k, int32_t ni)
{
    if (k->flavour == KF_POINTWISE)
        return -1;
    switch (g->nodes[ni].op) {
    case OP_SOFTMAX:
    case OP_LOG_SOFTMAX:
    case OP_LAYER_NORM:
    case OP_RMS_NORM:   /* (of a channels-last input it runs eagerly: step_kernel_run) */
        return LR_ROW;
    case OP_SUM:
    case OP_MEAN:
    case OP_AMAX:
    case OP_AMIN:
    case OP_MAX:
    case OP_MIN: {
        const Arg *kd = graph_node_arg(g, ni, "keepdim");   /* absent: False */
        return kd && kd->kind == ARG_CONST && PyList_GET_ITEM(g->consts, kd->a) == Py_True ? LR_RED : LR_UNKNOWN;
    }
    default:
        return -1;
    }
}

/* k's program, or one with ok = 0. NULL only out of memory (an exception set). */
static KernelLayout *layout_build(Graph *g, const Kernel *k)
{
    KernelLayout *L = PyMem_Calloc(1, sizeof *L + sizeof(NodeLayout) * (size_t)(k->nnodes ? k->nnodes : 1));
    if (!L) {
        PyErr_NoMemory();
        return NULL;
    }
    for (int32_t j = 0; j < k->nnodes; j++) {
        int32_t ni = k->nodes[j];
        NodeLayout *x = &L->node[j];
        if (k->rot) {
            int part = plan_rot_role(g, k, ni);
            if (part == 1) {
                x->rule = LR_UNKNOWN;
                continue;
            }
            if (part == 2) {
                RotRead rot;
                plan_rot_match(g, ni, &rot);
                int sl = slot_of(g, k, j, rot.x);
                if (sl < 0)
                    return L;
                x->rule = LR_ROTCAT;
                x->ops[x->nops++] = (int16_t)sl;
                continue;
            }
        }
        int rr = reduce_rule(g, k, ni);
        if (rr >= 0) {   /* its input is its only operand */
            const Arg *in = graph_node_arg(g, ni, "input");
            int sl = in && in->kind == ARG_VALUE ? slot_of(g, k, j, in->a) : -1;
            if (sl < 0)
                return L;
            x->rule = (uint8_t)rr;
            x->ops[x->nops++] = (int16_t)sl;
            continue;
        }
        NodeLower nl;
        if (lower_node_typed(g, ni, &nl)) {
            PyErr_Clear();
            return L;
        }
        int op = g->nodes[ni].op, ll = (int)nl.row->layout;   /* lower.def's LAYOUT */
        int rule = k->lib != LIB_TORCH                                                              ? np_rule(g, ni)
                   : ll == LL_ROW || (ll == LL_TI_NUMBASE && nl.x[0] && nl.x[0]->kind != ARG_VALUE) ? LR_ROW
                   : ll == LL_LIKE ? asked_format(g, ni)
                                   : LR_TI;
        if (rule < 0)
            return L;
        x->rule = (uint8_t)rule;
        static const int plain[3] = {0, 1, 2}, where[3] = {2, 0, 1};   /* where(cond, a, b) */
        const int *order = op == OP_WHERE ? where : plain;
        for (int s = 0; s < 3; s++) {
            const Arg *a = nl.x[order[s]];
            if (!a)
                continue;
            if (a->kind == ARG_VALUE) {
                int sl = slot_of(g, k, j, a->a);
                if (sl < 0)
                    return L;
                DType want = op == OP_WHERE && order[s] == 2 ? DT_BOOL : nl.ct;
                if ((rule == LR_TI || rule == LR_NPK) && (DType)g->values[a->a].meta.dtype != want)
                    x->cast |= (uint8_t)(1u << x->nops);
                x->ops[x->nops++] = (int16_t)sl;
            } else if (ll != LL_TI_NUMBASE) {   /* pow's number exponent is no operand of its loop */
                x->scalar = 1;
            }
        }
    }
    for (int32_t o = 0; o < k->nout; o++) {
        int sl = slot_of(g, k, k->nnodes, k->outs[o]);
        if (sl < k->nin)
            return L;
        L->out_slot[o] = (int16_t)sl;
    }
    L->ok = 1;
    return L;
}

/* The order of dims [0, nd) by stride, largest first (size-1 dims outermost: their
 * strides place nothing). */
static void stride_order(const int64_t *size, const int64_t *st, int nd, int *perm)
{
    for (int i = 0; i < nd; i++)
        perm[i] = i;
    for (int i = 1; i < nd; i++)
        for (int j = i; j > 0; j--) {
            int a = perm[j - 1], b = perm[j];
            int64_t ka = size[a] == 1 ? INT64_MAX : st[a], kb = size[b] == 1 ? INT64_MAX : st[b];
            if (ka >= kb)
                break;
            perm[j - 1] = b;
            perm[j] = a;
        }
}

/* Each operand's strides over a result of size[0..nd) (right-aligned in the kernel's dims
 * from off): 0 on the dims it broadcasts along or lacks. */
static void operand_rows(const SlotLayout *const *opl, int nops, const int64_t *size, int nd, int off,
                         int64_t rows[][SJ_MAX_RANK + 1], const int64_t **rp)
{
    for (int i = 0; i < nops; i++) {
        const SlotLayout *o = opl[i];
        for (int d = 0; d < nd; d++) {
            int sd = off + d;
            rows[i][d] = nd - d > o->nd || (o->size[sd] == 1 && size[d] != 1) ? 0 : o->st[sd];
        }
        rp[i] = rows[i];
    }
}

/* numpy's order 'K' for a ufunc or np.where over operands opl[0..nops) (right-aligned in
 * the kernel's dims from off; rank-0 operands are numbers): the strides of its result of
 * size[0..nd) into st. `cast`: the operands (bit i) a ufunc's loop converts, -1 for
 * np.where (which has no trivial loop). */
static void np_result(const SlotLayout *const *opl, int nops, int cast, const int64_t *size, int nd, int off,
                      int64_t *st)
{
    /* the trivial loop: every array operand of the result's shape and of the loop's dtype
     * (numpy copies only 0-d operands to convert them), all C- or all F-contiguous alike
     * (numpy's contiguity flags; an array both counts as both) */
    int trivial = cast >= 0, order = 0, rev[SJ_MAX_RANK + 1];
    for (int d = 0; d < nd; d++)
        rev[d] = nd - 1 - d;
    for (int i = 0; i < nops && trivial; i++) {
        const SlotLayout *o = opl[i];
        if (o->nd == 0)
            continue;
        if (o->nd != nd || memcmp(o->size + off, size, sizeof(int64_t) * (size_t)nd) || (cast >> i & 1)) {
            trivial = 0;
            break;
        }
        int empty = 0;
        for (int d = 0; d < nd; d++)
            empty |= size[d] == 0;
        int f = (empty || lower_dense_in(size, o->st + off, NULL, nd) ? 1 : 0) |
                (empty || lower_dense_in(size, o->st + off, rev, nd) ? 2 : 0);
        if (f == 0 || (order && order != f))
            trivial = 0;
        order = f;
    }
    if (trivial) {
        lower_strides_in(size, order == 2 ? rev : NULL, nd, st);
        return;
    }
    int64_t rows[3][SJ_MAX_RANK + 1];
    const int64_t *rp[3];
    operand_rows(opl, nops, size, nd, off, rows, rp);
    int perm[SJ_MAX_RANK + 1];
    lower_np_iter_perm(size, nd, rp, nops, perm);
    lower_strides_in(size, perm, nd, st);
}

/* The result of one node from its operands' layouts (the rules above); `mask` the
 * kernel's reduced dims (LR_RED). */
static void node_result(const NodeLayout *x, const SlotLayout *in, int r, uint32_t mask, SlotLayout *res)
{
    int unknown = x->rule == LR_UNKNOWN;
    for (int i = 0; i < x->nops; i++)
        unknown |= in[x->ops[i]].nd < 0;
    if (unknown || (x->rule == LR_RED && in[x->ops[0]].nd != r)) {
        res->nd = -1;
        return;
    }
    if (x->rule == LR_ROTCAT) {
        /* torch.cat's result is row-major as soon as one input suggests row-major; only
         * when x's halves suggest channels-last does the negated half's layout matter,
         * and then it is left unknown (the plan's row-major layout) */
        const SlotLayout *xs = &in[x->ops[0]];
        int nd = xs->nd, off = r - nd;
        *res = *xs;
        if (nd == 4 || nd == 5) {
            int64_t half[SJ_MAX_RANK + 1];
            memcpy(half, xs->size + off, sizeof(int64_t) * (size_t)nd);
            half[nd - 1] /= 2;
            if (lower_suggests_cl(half, xs->st + off, nd)) {
                res->nd = -1;
                return;
            }
        }
        for (int d = 0; d < off; d++)
            res->st[d] = 0;
        lower_strides_in(res->size + off, NULL, nd, res->st + off);
        return;
    }
    if (x->rule == LR_RED) {
        res->nd = r;
        for (int d = 0; d < r; d++)
            res->size[d] = (mask >> d) & 1 ? 1 : in[x->ops[0]].size[d];
        lower_strides_in(res->size, NULL, r, res->st);
        return;
    }
    /* operands a cast converts first: laid out as their clones */
    SlotLayout conv[3];
    const SlotLayout *opl[3];
    for (int i = 0; i < x->nops; i++) {
        opl[i] = &in[x->ops[i]];
        if (x->cast >> i & 1 && x->rule == LR_TI) {
            conv[i] = *opl[i];
            int off = r - conv[i].nd;
            lower_preserved_strides(conv[i].size + off, opl[i]->st + off, conv[i].nd, conv[i].st + off);
            opl[i] = &conv[i];
        }
    }
    int nd = 0;
    for (int d = 0; d < r; d++)
        res->size[d] = 1;
    for (int i = 0; i < x->nops; i++) {
        const SlotLayout *o = opl[i];
        nd = o->nd > nd ? o->nd : nd;
        for (int d = 0; d < r; d++)
            if (o->size[d] != 1)
                res->size[d] = o->size[d];
    }
    res->nd = nd;
    int off = r - nd, nhwc[4], rule = x->rule, scalar = x->scalar;
    const int64_t *size = res->size + off;
    int64_t *st = res->st + off;
    for (int d = 0; d < off; d++)
        res->st[d] = 0;
    lower_nhwc_perm(nhwc);
    if (x->nops == 0 || nd < 2) {
        lower_strides_in(size, NULL, nd, st);
        return;
    }
    const SlotLayout *a = opl[0];
    if (rule == LR_NPLIKE) {
        if (a->nd != nd)
            lower_strides_in(size, NULL, nd, st);   /* (not reached: a copy has its input's shape) */
        else
            lower_np_like_strides(size, a->st + off, nd, st);
        return;
    }
    if (rule == LR_NPK || rule == LR_NPITER) {
        np_result(opl, x->nops, rule == LR_NPK ? x->cast : -1, size, nd, off, st);
        return;
    }
    if (rule == LR_CL || rule == LR_ROW) {
        lower_strides_in(size, rule == LR_CL && nd == 4 ? nhwc : NULL, nd, st);
        return;
    }
    if (rule == LR_PRESERVE) {   /* empty_like(preserve_format) */
        lower_preserved_strides(size, a->st + off, nd, st);
        return;
    }
    /* TensorIterator: its fast cases when every operand has the result's shape and no
     * number is among them */
    int same = !scalar, row = 1, cl = nd == 4, one = 1, dense = 1;
    for (int i = 0; i < x->nops && same; i++) {
        const SlotLayout *o = opl[i];
        if (o->nd != nd || memcmp(o->size + off, size, sizeof(int64_t) * (size_t)nd)) {
            same = 0;
            break;
        }
        row &= lower_dense_in(size, o->st + off, NULL, nd);
        cl = cl && lower_dense_in(size, o->st + off, nhwc, nd);
        one &= !memcmp(o->st + off, a->st + off, sizeof(int64_t) * (size_t)nd);
        dense &= lower_dense_any(size, o->st + off, nd);
    }
    if (same && (row || cl)) {
        lower_strides_in(size, row ? NULL : nhwc, nd, st);
        return;
    }
    if (same && one && dense) {
        memcpy(st, a->st + off, sizeof(int64_t) * (size_t)nd);
        return;
    }
    /* its general case: operands' strides over the result's dims (0 where broadcast) */
    int64_t rows[3][SJ_MAX_RANK + 1];
    const int64_t *rp[3];
    operand_rows(opl, x->nops, size, nd, off, rows, rp);
    int perm[SJ_MAX_RANK + 1];
    if (!lower_ti_perm(size, nd, rp, x->nops, perm)) {
        lower_strides_in(size, NULL, nd, st);
        return;
    }
    int64_t at = 1;   /* TensorIterator's strides in its order: a size-0 dim multiplies too */
    for (int i = nd - 1; i >= 0; i--) {
        st[perm[i]] = at;
        at *= size[perm[i]];
    }
}

/* The layout eager gives the kernel's results when one is not row-major: the outputs
 * whose strides are in ost[j * r ...] as a bit mask (0: every result row-major, the
 * plan's default). A pointwise kernel has them all or none, and perm is the order its
 * loops walk (the first result's memory order). A reduction or row kernel keeps its loop
 * order (its reduced dims are its own) and lays out only its full-size results this way:
 * the values its prologue stores, an RMS norm's result. */
static uint32_t result_layout(Graph *g, Kernel *k, const Operand *ins, const int64_t *n, int *perm, int64_t *ost)
{
    int r = k->rank, pw = k->flavour == KF_POINTWISE;
    if ((k->rot && !pw) || (k->lib != LIB_TORCH && !pw) || r < 2 || k->nin < 1 || k->nout > 32)
        return 0;
    for (int d = 0; d < r; d++)
        if (n[d] == 0)
            return 0;   /* no element to place (eager's strides there follow no one rule) */
    /* inputs with torch's row-major strides (the common case) give row-major results
     * under every rule: no program run */
    int rowmajor = 1;
    for (int32_t i = 0; i < k->nin && rowmajor; i++) {
        int64_t want[SJ_MAX_RANK + 1];
        lower_strides_in(ins[i].size, NULL, ins[i].ndim, want);
        rowmajor = !memcmp(want, lower_layout_strides(&ins[i]), sizeof(int64_t) * (size_t)ins[i].ndim);
    }
    if (rowmajor)
        return 0;
    if (!k->layout && !(k->layout = layout_build(g, k))) {
        PyErr_Clear();   /* out of memory: row-major, as before the program */
        return 0;
    }
    const KernelLayout *L = k->layout;
    if (!L->ok)
        return 0;
    SlotLayout stack[32], *sl = stack;   /* inputs, then each node's result */
    if (k->nin + k->nnodes > 32 && !(sl = PyMem_Malloc(sizeof *sl * (size_t)(k->nin + k->nnodes)))) {
        PyErr_Clear();
        return 0;
    }
    for (int32_t i = 0; i < k->nin; i++) {
        const Operand *o = &ins[i];
        SlotLayout *s = &sl[i];
        s->nd = o->ndim;
        for (int d = 0; d < r; d++) {
            int od = d - (r - o->ndim);
            s->size[d] = od >= 0 ? o->size[od] : 1;
            s->st[d] = od >= 0 ? lower_layout_strides(o)[od] : 0;
        }
    }
    for (int32_t j = 0; j < k->nnodes; j++)
        node_result(&L->node[j], sl, r, k->red.mask, &sl[k->nin + j]);
    uint32_t own = 0;
    int full = 1;
    for (int32_t o = 0; o < k->nout; o++) {
        const SlotLayout *sr = &sl[L->out_slot[o]];
        if (sr->nd != r || memcmp(sr->size, n, sizeof(int64_t) * (size_t)r)) {
            full = 0;   /* a result smaller than the space: the plan's row-major layout */
            continue;
        }
        int64_t rm[SJ_MAX_RANK + 1];
        lower_strides_in(n, NULL, r, rm);
        if (memcmp(rm, sr->st, sizeof(int64_t) * (size_t)r))
            own |= 1u << o;
        memcpy(&ost[o * r], sr->st, sizeof(int64_t) * (size_t)r);
    }
    if (sl != stack)
        PyMem_Free(sl);
    if (!pw)
        return own;
    if (!full || !own)
        return 0;
    stride_order(n, ost, r, perm);   /* the first result's memory order */
    if (k->rot && perm[r - 1] != r - 1)
        return 0;   /* the rotated read needs the last dim innermost: row-major, as before */
    return k->nout == 32 ? UINT32_MAX : (1u << k->nout) - 1;
}

/* 1 when k holds torch's rms_norm op (not the spelled-out pattern). */
static int has_rms_norm_op(const Graph *g, const Kernel *k)
{
    for (int32_t j = 0; j < k->nnodes; j++)
        if (g->nodes[k->nodes[j]].op == OP_RMS_NORM)
            return 1;
    return 0;
}

/* The kernel's nodes, run the original way (an input the plan did not foresee). */
static int run_eagerly(LowerPlan *p, Graph *g, const Kernel *k, PyObject **vals)
{
    p->kernel_eager_runs++;
    for (int32_t i = 0; i < k->nnodes; i++)
        if (lower_exec_node(g, k->nodes[i], vals) < 0)
            return -1;
    return 0;
}

int step_kernel_run(Graph *g, LowerPlan *p, int32_t idx, PyObject **vals)
{
    const Kernel *k = &p->kernels[idx];   /* lower_build_full may set its `full` */
    if (k->nout == 0)
        return 0;   /* nothing it computes is read */
    if (k->over_budget) {   /* never compiled (build.c's budget): its nodes one by one */
        for (int32_t i = 0; i < k->nnodes; i++)
            if (lower_exec_node(g, k->nodes[i], vals) < 0)
                return -1;
        return 0;
    }
    int r = k->rank, nops = (int)(k->nin + k->nout);
    Operand ops[SJ_KMAX_OPERANDS];
    int nread = 0, rc = 0;
    int64_t n[SJ_MAX_RANK + 1];
    for (int d = 0; d < r; d++)
        n[d] = 1;
    for (int32_t i = 0; i < k->nin && rc == 0; i++) {
        Operand *op = &ops[k->nout + i];
        rc = lower_read_input_dt(vals[k->ins[i]], k->lib, (DType)g->values[k->ins[i]].meta.dtype, op);
        nread = i + 1;
        if (rc == 0 && op->ndim > r)
            rc = 1;
        /* broadcast into the iteration space, right-aligned */
        for (int d = 0; rc == 0 && d < op->ndim; d++) {
            int64_t s = op->size[d], *t = &n[r - op->ndim + d];
            if (s != 1 && *t != 1 && s != *t)
                rc = 1;
            else if (s != 1)
                *t = s;
        }
    }
    /* torch's rms_norm op of a channels-last input: eager's result is channels-last (the
     * op lays its result out by suggest_memory_format, row-major otherwise), the kernel's
     * row-major. (The spelled-out x * rsqrt(...) gets TensorIterator's layout from
     * result_layout.) */
    for (int32_t i = 0; rc == 0 && k->flavour == KF_RMS_NORM && i < k->nin; i++)
        if (lower_suggests_cl(ops[k->nout + i].size, ops[k->nout + i].stride, ops[k->nout + i].ndim) &&
            has_rms_norm_op(g, k))
            rc = 1;
    int64_t st[SJ_KMAX_OPERANDS * SJ_MAX_RANK];
    char *ptrs[SJ_KMAX_OPERANDS];
    int64_t dense = 1;
    int permuted = 0, perm[SJ_MAX_RANK + 1];
    int64_t ost[SJ_KMAX_OPERANDS * SJ_MAX_RANK];
    if (rc == 0) {
        for (int32_t i = 0; i < k->nin; i++) {
            Operand *op = &ops[k->nout + i];
            int64_t expect = 1;
            for (int d = r - 1; d >= 0; d--) {
                int od = d - (r - op->ndim);
                int64_t s = od >= 0 ? op->size[od] : 1;
                st[(k->nout + i) * r + d] = od < 0 || (s == 1 && n[d] != 1) ? 0 : op->stride[od];
                if (s != n[d] || (n[d] != 1 && op->stride[od] != expect))
                    dense = 0;
                expect *= n[d];
            }
            ptrs[k->nout + i] = op->data;
        }
        uint32_t laid = result_layout(g, (Kernel *)k, &ops[k->nout], n, perm, ost);
        permuted = laid && k->flavour == KF_POINTWISE;
        for (int32_t j = 0; j < k->nout && rc == 0; j++) {
            int64_t osize[SJ_MAX_RANK + 1];
            int orank = lower_out_layout(k, (int)j, n, osize, &st[j * r]);
            if (orank < 0) {
                rc = 1;
                break;
            }
            DType odt = (DType)g->values[k->outs[j]].meta.dtype;
            int own = (laid >> j) & 1;
            if (own)
                memcpy(&st[j * r], &ost[j * r], sizeof(int64_t) * (size_t)r);
            PyObject *o = own ? lower_new_output_strided(k->lib, odt, n, &ost[j * r], r)
                              : lower_new_output_dt(k->lib, odt, osize, orank);
            if (!o) {
                rc = -1;
                break;
            }
            Py_XSETREF(vals[k->outs[j]], o);
            Operand *op = &ops[j];
            if ((rc = lower_read_input_dt(o, k->lib, odt, op)) != 0) {
                if (op->has_view)
                    PyBuffer_Release(&op->view);
                break;
            }
            ptrs[j] = op->data;
            /* an output array's buffer is only needed for its pointer: numpy keeps the
             * array (vals holds it) */
            if (op->has_view)
                PyBuffer_Release(&op->view);
        }
    }
    int64_t qn[SJ_MAX_RANK + 1], qst[SJ_KMAX_OPERANDS * SJ_MAX_RANK];
    if (rc == 0 && permuted) {
        /* the kernel walks the space in the results' memory order: its dims permuted (a
         * pointwise kernel's element does not depend on where it sits), dense when every
         * input is laid out as the results */
        dense = 1;
        for (int i = 0; i < r; i++) {
            qn[i] = n[perm[i]];
            for (int j = 0; j < nops; j++)
                qst[j * r + i] = st[j * r + perm[i]];
        }
        for (int j = 0; j < nops; j++)   /* (the outputs' rows hold their strides now) */
            for (int d = 0; d < r; d++)
                if (n[d] != 1 && st[j * r + d] != st[d])
                    dense = 0;
    }
    if (rc == 0) {
        void *args[4];
        int64_t bad = 0;
        const int64_t *pn = permuted ? qn : n;
        char *const *pp = ptrs;
        const int64_t *pst = permuted ? qst : st;
        args[0] = &pn;
        args[1] = &pp;
        args[2] = &pst;
        args[3] = &dense;
        CgFn *call = k->full ? &k->full->call : (CgFn *)&k->call;
        Py_BEGIN_ALLOW_THREADS cg_fn_call(call, &bad, args);
        Py_END_ALLOW_THREADS p->kernel_calls++;
        if (bad == SJ_KERNEL_WANTS_FULL && k->lean) {   /* it wrote nothing */
            int b = lower_build_full(g, p, idx);
            bad = b != 0;   /* another thread's build under way: eagerly this time */
            if (b < 0)
                rc = -1;
            else if (b == 0) {
                call = &k->full->call;
                Py_BEGIN_ALLOW_THREADS cg_fn_call(call, &bad, args);
                Py_END_ALLOW_THREADS
            }
        }
        if (rc == 0)
            rc = bad != 0;   /* an element eager must handle (integer division by zero) */
    }
    for (int i = 0; i < nread; i++)
        if (ops[k->nout + i].has_view)
            PyBuffer_Release(&ops[k->nout + i].view);
    (void)nops;
    if (rc > 0) {
        /* the outputs allocated for the kernel are replaced by eager's */
        for (int32_t j = 0; j < k->nout; j++)
            Py_CLEAR(vals[k->outs[j]]);
        return run_eagerly(p, g, k, vals);
    }
    return rc;
}

void step_kernel_free(LowerPlan *p)
{
    for (int32_t i = 0; i < p->nkernels; i++) {
        PyMem_Free(p->kernels[i].nodes);
        PyMem_Free(p->kernels[i].layout);
        PyMem_Free(p->kernels[i].full);
    }
    PyMem_Free(p->kernels);
    p->kernels = NULL;
    p->nkernels = 0;
}

int step_kernel_stats(const Graph *g, const LowerPlan *p, PyObject *d)
{
    (void)g;
    long long over = 0, nfn = 0, full = 0;
    for (int32_t i = 0; i < p->nkernels; i++) {
        const Kernel *k = &p->kernels[i];
        over += k->over_budget;
        int first = k->fn != NULL;   /* the first kernel with its function */
        for (int32_t j = 0; j < i && first; j++)
            first = p->kernels[j].fn != k->fn;
        nfn += first;
        full += k->full != NULL;
    }
    static const char *const names[7] = {"kernels",         "kernel_functions", "kernels_over_budget",
                                         "kernel_calls",    "eager_fallbacks",  "full_variants_built",
                                         "recomputed_nodes"};
    long long vals[7] = {p->nkernels, nfn, over, p->kernel_calls, p->kernel_eager_runs, full, p->kernel_copies};
    return lower_put_counts(d, 7, names, vals);
}

/* --------------------------------------------------------------- eager ---- */

int step_eager_run(Graph *g, LowerPlan *p, int32_t ni, PyObject **vals)
{
    (void)p;
    return lower_exec_node(g, ni, vals);
}

int step_eager_stats(const Graph *g, const LowerPlan *p, PyObject *d)
{
    PyObject *ops = PyDict_New();   /* new */
    if (!ops)
        return -1;
    long neager = 0;
    for (int32_t i = 0; i < p->nsteps; i++) {
        const Step *s = &p->steps[i];
        if (s->kind != STEP_EAGER)
            continue;
        neager++;
        int op = g->nodes[s->index].op;
        const char *name = op >= 0 && op < OP_COUNT ? op_info[op].name : "input";
        PyObject *had = PyDict_GetItemString(ops, name);   /* borrowed */
        PyObject *n = PyLong_FromLong(had ? PyLong_AsLong(had) + 1 : 1);   /* new */
        if (!n || PyDict_SetItemString(ops, name, n) < 0) {
            Py_XDECREF(n);
            Py_DECREF(ops);
            return -1;
        }
        Py_DECREF(n);
    }
    PyObject *cnt = PyLong_FromLong(neager);   /* new */
    int rc = cnt && PyDict_SetItemString(d, "eager_steps", cnt) == 0 && PyDict_SetItemString(d, "eager_ops", ops) == 0
                 ? 0
                 : -1;
    Py_XDECREF(cnt);
    Py_DECREF(ops);
    return rc;
}
