/* Planning reductions and row operations: sum, mean, amax/amin (and numpy's max/min,
 * torch's max/min without a dim) over any set of dims, softmax and log_softmax over one
 * dim, layer_norm and rms_norm over the trailing normalized_shape. Reductions take
 * float32, float64, int64 and int32 (and bool for sum) and compute in their output's
 * dtype; row kernels are float32 only; either library. Any other argument form (a dtype=
 * the meta does not have, numpy's initial=/where=, a reduction to a numpy scalar, torch's
 * max(x, dim) with its indices) stays an eager step.
 *
 * A kernel's iteration space is the reduced tensor's shape; `mask` marks the dims reduced
 * (or the row dims). When the pointwise kernel planned just before the node makes the
 * reduced value and has the same iteration space, the node joins it: the pointwise nodes
 * become a prologue computed inside the reduction loop. A reduction or a norm also
 * stores the prologue values read after it (in its one pass over each element); a softmax
 * joins only a prologue nothing else reads.
 *
 * Memory: kernels and steps are PyMem arrays of the plan; nothing here holds a Python
 * reference. */
#include <float.h>
#include <string.h>

#include "lower_int.h"
#include "../shapes/rules_util.h"

static KernelFlavour flavour_of(OpId op)
{
    switch (op) {
    case OP_SUM:
        return KF_SUM;
    case OP_MEAN:
        return KF_MEAN;
    case OP_AMAX:
    case OP_MAX:
        return KF_MAX;
    case OP_AMIN:
    case OP_MIN:
        return KF_MIN;
    case OP_SOFTMAX:
        return KF_SOFTMAX;
    case OP_LOG_SOFTMAX:
        return KF_LOG_SOFTMAX;
    case OP_LAYER_NORM:
        return KF_LAYER_NORM;
    case OP_RMS_NORM:
        return KF_RMS_NORM;
    default:
        return KF_POINTWISE;
    }
}

/* A tensor value of library lib whose dtype kernels read (float32 only for row kernels;
 * requires_grad is the output's business: a node whose output needs no grad may read
 * parameters that do). */
static int kernel_value(const BoundArg *ba, const Arg *src, Lib lib, int any_dtype)
{
    return ba->kind == BA_TENSOR && src && src->kind == ARG_VALUE &&
           (any_dtype ? lower_dtype_ok((DType)ba->meta->dtype) : ba->meta->dtype == DT_F32) && !ba->meta->symint &&
           !ba->meta->np_scalar && ba->meta->lib == lib && ba->meta->ndim <= SJ_MAX_RANK;
}

static int is_int(PyObject *v)
{
    return PyLong_Check(v) && !PyBool_Check(v);
}

/* The dims a reduction's dim/axis constant names, as a mask over rank r: None means all;
 * an empty sequence all in torch, none in numpy. 0, or -1 when the form is not a constant
 * int or sequence of distinct ints in range. */
static int dims_mask(PyObject *dim, Lib lib, int r, uint32_t *mask)
{
    uint32_t all = r ? (uint32_t)((1ull << r) - 1) : 0;
    if (!dim || dim == Py_None) {
        *mask = all;
        return 0;
    }
    PyObject *items[SJ_MAX_RANK + 1];
    Py_ssize_t n;
    if (is_int(dim)) {
        items[0] = dim;
        n = 1;
    } else if (PyTuple_Check(dim) || PyList_Check(dim)) {
        n = PySequence_Fast_GET_SIZE(dim);
        if (n > SJ_MAX_RANK)
            return -1;
        for (Py_ssize_t i = 0; i < n; i++)
            items[i] = PySequence_Fast_GET_ITEM(dim, i);
        if (n == 0) {
            *mask = lib == LIB_TORCH ? all : 0;
            return 0;
        }
    } else {
        return -1;
    }
    *mask = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!is_int(items[i]))
            return -1;
        long long d = PyLong_AsLongLong(items[i]);
        if (d == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return -1;
        }
        int lim = r ? r : 1;   /* torch: a 0-d tensor takes dims 0 and -1 (reducing nothing) */
        if (d < -lim || d >= lim)
            return -1;
        if (r == 0)
            continue;
        d = d < 0 ? d + r : d;
        if (*mask & (1u << d))
            return -1;
        *mask |= 1u << d;
    }
    return 0;
}

/* The row ops that take a normalized_shape, a weight and an eps: layer_norm (and a bias),
 * and rms_norm as the op itself (plan_rms.c plans its hand-written form). */
static int is_norm(KernelFlavour fl)
{
    return fl == KF_LAYER_NORM || fl == KF_RMS_NORM;
}

/* The length of a normalized_shape (a sequence, or a list holding symbolic sizes), or -1
 * (torch raises on an int: eager keeps it). */
static int shape_len(const BoundArg *ba)
{
    if (ba->kind == BA_LIST)
        return ba->n;
    if (ba->kind != BA_CONST)
        return -1;
    if (PyTuple_Check(ba->value) || PyList_Check(ba->value))
        return (int)PySequence_Fast_GET_SIZE(ba->value);
    return -1;
}

/* 1 when the items of a normalized_shape given as a list (of run-time sizes:
 * (x.shape[-1],) under dynamic shapes) are the trailing dims of the input x of rank r:
 * each item is x.size(d) of that very dim (a sym_size node of x), or a constant int equal to
 * the dim's static size. The kernel reads only how many dims are normalised, so anything
 * else (a size of another tensor, arithmetic) stays eager, where the library checks it. */
static int shape_items_ok(Graph *g, const BoundArg *ba, int32_t x, int r)
{
    const TensorMeta *xm = &g->values[x].meta;
    for (int k = 0; k < ba->n; k++) {
        const BoundArg *it = &ba->items[k];
        int d = r - ba->n + k;
        if (it->kind == BA_CONST) {
            if (!is_int(it->value) || it->sym || it->data || xm->sym[d] ||
                PyLong_AsLongLong(it->value) != xm->size[d]) {
                PyErr_Clear();
                return 0;
            }
            continue;
        }
        int32_t v = it->kind == BA_TENSOR ? lower_value_of(g, it) : -1;
        if (v < 0 || !g->values[v].meta.symint || g->values[v].node < 0)
            return 0;
        const Node *sn = &g->nodes[g->values[v].node];
        if (sn->op != OP_SYM_SIZE || sn->nargs != 2)
            return 0;
        const Arg *a0 = &g->pool[sn->args], *a1 = &g->pool[sn->args + 1];
        if (a0->kind != ARG_VALUE || a0->a != x || a1->kind != ARG_CONST)
            return 0;
        PyObject *dv = PyList_GET_ITEM(g->consts, a1->a);   /* borrowed */
        if (!is_int(dv))
            return 0;
        long long dd = PyLong_AsLongLong(dv);
        if (dd == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
        if ((dd < 0 ? dd + r : dd) != d)
            return 0;
    }
    return 1;
}

/* Parameters that change nothing when passed as these values. */
static int ignorable(const char *name, PyObject *v)
{
    return v == Py_None || !strcmp(name, "_stacklevel") || !strcmp(name, "implicit_dim_ok");
}

/* Reads node ni into *red and its reduced tensor's value: 0 when a kernel computes it, 1
 * when not. */
static int read_node(Graph *g, int32_t ni, KernelFlavour fl, ReduceInfo *red, int *rank)
{
    const Node *nd = &g->nodes[ni];
    const TensorMeta *om = &g->values[nd->first_value].meta;
    Lib lib = (Lib)om->lib;
    /* reductions compute in their output's dtype: a float for mean, no bool (amax of a mask);
     * row kernels are float32 */
    int is_red = fl <= KF_MIN, ocls = lower_class((DType)om->dtype);
    if (nd->nout != 1 || (nd->flags & NODE_INPLACE) || om->symint || om->np_scalar || om->requires_grad ||
        om->ndim > SJ_MAX_RANK ||
        (is_red ? ocls < 0 || ocls == LC_BOOL || (fl == KF_MEAN && ocls == LC_INT) : om->dtype != DT_F32))
        return 1;
    NodeArgs na;
    /* a norm's normalized_shape may be a tuple of run-time sizes: bound item by item */
    if (is_norm(fl) ? lower_bind_node_lists(g, ni, &na) : lower_bind_node(g, ni, &na))
        return 1;
    memset(red, 0, sizeof *red);
    red->src = red->weight = red->bias = -1;
    /* the library defaults: rms_norm's eps=None is finfo(input.dtype).eps, float32's here
     * (row kernels are float32 only) */
    red->eps = fl == KF_RMS_NORM ? FLT_EPSILON : 1e-5;
    PyObject *dim = NULL;   /* borrowed */
    int dim_given = 0, nshape = -1;
    const BoundArg *shape_list = NULL;   /* a normalized_shape bound as a list */
    for (int i = 0; i < na.bound.n; i++) {
        const BoundArg *ba = &na.bound.args[i];
        const char *name = na.bound.names[i];
        if (ba->kind == BA_ABSENT)
            continue;
        if (!strcmp(name, "input")) {
            /* max/min read their own dtype; a bool input is summed (counted) only */
            if (!kernel_value(ba, na.src[i], lib, is_red) || (ba->meta->dtype == DT_BOOL && fl != KF_SUM) ||
                ((fl == KF_MAX || fl == KF_MIN) && ba->meta->dtype != om->dtype))
                return 1;
            red->src = na.src[i]->a;
            *rank = ba->meta->ndim;
        } else if (!strcmp(name, "weight") || !strcmp(name, "bias")) {
            if (!is_norm(fl) || (ba->kind == BA_CONST && ba->value == Py_None))
                continue;
            if (!kernel_value(ba, na.src[i], lib, 0))
                return 1;
            *(name[0] == 'w' ? &red->weight : &red->bias) = na.src[i]->a;
        } else if (ba->kind != BA_CONST || ba->sym || ba->data) {
            if (!strcmp(name, "normalized_shape") && is_norm(fl)) {
                nshape = shape_len(ba);
                shape_list = ba->kind == BA_LIST ? ba : NULL;
            } else
                return 1;
        } else if (!strcmp(name, "dim") && !is_norm(fl)) {
            dim = ba->value;
            dim_given = ba->value != Py_None;
        } else if (!strcmp(name, "keepdim")) {
            if (!PyBool_Check(ba->value) && !is_int(ba->value))
                return 1;
            red->keepdim = PyObject_IsTrue(ba->value);
        } else if (!strcmp(name, "dtype")) {
            if (ba->value == Py_None)
                continue;
            DType dt;
            int given;
            ShapeErr err;
            BoundArgs one = {.n = 1, .names = {"dtype"}, .args = {*ba}};
            /* the output meta holds it: elements are converted to it, as eager does */
            if (sj_get_dtype(&one, "dtype", lib, &dt, &given, &err) < 0 || (given && dt != om->dtype))
                return 1;
        } else if (!strcmp(name, "eps") && is_norm(fl)) {
            if (fl == KF_RMS_NORM && ba->value == Py_None)
                continue;   /* the default above */
            if (!PyFloat_Check(ba->value) && !is_int(ba->value))
                return 1;
            red->eps = PyFloat_AsDouble(ba->value);
            if (red->eps == -1.0 && PyErr_Occurred()) {
                PyErr_Clear();
                return 1;
            }
        } else if (!strcmp(name, "normalized_shape") && is_norm(fl)) {
            nshape = shape_len(ba);
        } else if (!ignorable(name, ba->value)) {
            return 1;   /* numpy's initial=, torch.max's other=, ... */
        }
    }
    int r = *rank;
    if (red->src < 0 || r > 31)
        return 1;
    switch (fl) {
    case KF_SOFTMAX:
    case KF_LOG_SOFTMAX:
        /* the dim is required (F.softmax's implicit dim is deprecated: eager) */
        if (!dim_given || !is_int(dim) || dims_mask(dim, lib, r, &red->mask) < 0)
            return 1;
        return 0;
    case KF_LAYER_NORM:
    case KF_RMS_NORM:
        if (nshape < 1 || nshape > r || (shape_list && !shape_items_ok(g, shape_list, red->src, r)))
            return 1;
        red->mask = (uint32_t)(((1ull << r) - 1) & ~((1ull << (r - nshape)) - 1));
        return 0;
    default:
        return dims_mask(dim, lib, r, &red->mask) != 0;
    }
}

/* 1 when node nj can be applied to a row op's float result `cur` as it is stored: a float
 * pointwise op of cur and constants only. */
static int epilogue_ok(Graph *g, int32_t nj, int32_t cur)
{
    NodeLower nl;
    if (lower_node_typed(g, nj, &nl) || nl.ct != DT_F32 || nl.out != DT_F32 || nl.x[2])
        return 0;
    int reads = 0;
    for (int i = 0; i < 2; i++) {
        const Arg *x = nl.x[i];
        if (x && x->kind == ARG_VALUE && x->a == cur)
            reads++;
        else if (x && x->kind != ARG_CONST)
            return 0;
    }
    return reads == 1;
}

/* Takes the float pointwise nodes right after row node ni that only transform its result
 * into kernel k (its epilogue); *last is the last node taken. */
static int take_epilogue(Graph *g, int32_t ni, Kernel *k, const int32_t *last_use, int32_t *last)
{
    int32_t cur = g->nodes[ni].first_value;
    *last = ni;
    while (k->red.nepi < 4 && g->values[cur].meta.dtype == DT_F32) {
        int32_t nj = *last + 1;
        while (nj < g->nnodes && g->nodes[nj].op == OP_INPUT)
            nj++;
        /* nj must be the value's only reader (then last_use is nj: no one reads it later) */
        if (nj >= g->nnodes || last_use[cur] != nj || !epilogue_ok(g, nj, cur))
            break;
        if (plan_push((void **)&k->nodes, &k->nnodes, sizeof(int32_t), &nj) < 0)
            return -1;
        k->red.nepi++;
        cur = g->nodes[nj].first_value;
        *last = nj;
    }
    return 0;
}

/* For a softmax/log_softmax node ni that reads its input x from outside (red, rank, lib):
 * an earlier kernel that is nothing but a float32 sum or mean of x over the same dims, when
 * no node between them writes into any tensor (so x is the same), else NULL. The row op
 * then joins it: one read pass computes the max and the sum (the reductions workload's
 * x.sum(-1) and softmax(x, -1)), and the softmax runs at that kernel's step. */
static Kernel *sum_partner(Graph *g, int32_t ni, LowerPlan *out, const ReduceInfo *red, int rank, Lib lib)
{
    for (int32_t i = out->nkernels - 1; i >= 0; i--) {
        Kernel *k = &out->kernels[i];
        if ((k->flavour != KF_SUM && k->flavour != KF_MEAN) || k->nnodes != 1 || k->nin != 1 || k->ins[0] != red->src ||
            k->red.mask != red->mask || k->rank != rank || k->lib != lib ||
            g->values[g->nodes[k->nodes[0]].first_value].meta.dtype != DT_F32)
            continue;
        for (int32_t nj = k->nodes[0] + 1; nj < ni; nj++) {
            const Node *nd = &g->nodes[nj];
            if (lower_node_writes(nd))
                return NULL;
        }
        return k;
    }
    return NULL;
}

int plan_reduce_node(Graph *g, int32_t ni, LowerPlan *out, Kernel *open, const int32_t *last_use, int32_t *last)
{
    const Node *nd = &g->nodes[ni];
    KernelFlavour fl = flavour_of((OpId)nd->op);
    ReduceInfo red;
    int rank = 0;
    if (fl == KF_POINTWISE || read_node(g, ni, fl, &red, &rank))
        return 1;
    if (fl == KF_MEAN) {
        int r = plan_rms_node(g, ni, out, open, last_use, &red, rank, last);
        if (r <= 0)   /* the row kernel is the last step's */
            return r < 0 ? -1
                         : take_epilogue(g, *last, &out->kernels[out->steps[out->nsteps - 1].index], last_use, last);
    }
    Lib lib = (Lib)g->values[nd->first_value].meta.lib;
    const TensorMeta *xm = &g->values[red.src].meta;
    int32_t extra[2] = {red.weight, red.bias};
    /* fuse: the open kernel makes the reduced value over the same space, and (for a softmax)
     * only feeds this node: every value it makes is last read here at the latest, and not as
     * weight/bias. A reduction reads each element once, and a layer norm's first pass does,
     * so they also store the prologue values read later (extra outputs, find_outputs in
     * plan.c: a pre-LN block's residual sum). */
    int fuse = open && open->flavour == KF_POINTWISE && !open->rot && open->lib == lib &&
               plan_kernel_makes(g, open, red.src) && lower_same_dims(xm, &g->values[open->space].meta);
    int stores = 0;
    for (int32_t i = 0; fuse && i < open->nnodes; i++)
        if (last_use[g->nodes[open->nodes[i]].first_value] > ni) {
            fuse = fl <= KF_MIN || is_norm(fl);
            stores++;
        }
    fuse = fuse && open->nin + stores + 3 < SJ_KMAX_OPERANDS - 2;
    for (int e = 0; fuse && e < 2; e++)
        fuse = extra[e] < 0 || !plan_kernel_makes(g, open, extra[e]);
    Kernel *k = open;
    Kernel *partner =
        !fuse && (fl == KF_SOFTMAX || fl == KF_LOG_SOFTMAX) ? sum_partner(g, ni, out, &red, rank, lib) : NULL;
    if (partner) {
        k = partner;
        red.nsum = 1;
        red.sum_mean = k->flavour == KF_MEAN;
        red.keepdim = k->red.keepdim;
    } else if (!fuse) {
        Kernel nk;
        memset(&nk, 0, sizeof nk);
        nk.rank = rank;
        nk.lib = lib;
        snprintf(nk.name, sizeof nk.name, "sj_k%d", (int)out->nkernels);
        plan_add_input(&nk, red.src);
        Step s = {STEP_KERNEL, out->nkernels};
        if (plan_push((void **)&out->kernels, &out->nkernels, sizeof nk, &nk) < 0 ||
            plan_push((void **)&out->steps, &out->nsteps, sizeof s, &s) < 0)
            return -1;
        k = &out->kernels[out->nkernels - 1];
    }
    for (int e = 0; e < 2; e++)
        if (extra[e] >= 0)
            plan_add_input(k, extra[e]);
    k->flavour = fl;
    k->red = red;
    k->red.nepi = 0;
    if (plan_push((void **)&k->nodes, &k->nnodes, sizeof(int32_t), &ni) < 0)
        return -1;
    if ((fl == KF_SOFTMAX || fl == KF_LOG_SOFTMAX || is_norm(fl)) && take_epilogue(g, ni, k, last_use, last) < 0)
        return -1;
    return 0;
}

int lower_out_layout(const Kernel *k, int j, const int64_t *n, int64_t *osize, int64_t *ost)
{
    int r = k->rank, o = 0;
    int reduces = (k->flavour >= KF_SUM && k->flavour <= KF_MIN && j == 0) || ((k->red.nsum || k->red.nsib) && j == 1);
    uint32_t mask = reduces ? k->red.mask : 0;
    int64_t expect = 1;
    for (int d = r - 1; d >= 0; d--) {
        int cut = (mask >> d) & 1;
        if (cut && n[d] == 0 && (k->flavour == KF_MAX || k->flavour == KF_MIN))
            return -1;   /* no identity: eager raises as it should */
        ost[d] = cut ? 0 : expect;
        expect *= cut ? 1 : n[d];
    }
    for (int d = 0; d < r; d++)
        if (!((mask >> d) & 1))
            osize[o++] = n[d];
        else if (k->red.keepdim)
            osize[o++] = 1;
    return o;
}
