/* Convolution, pooling and batch norm (inference) as oneDNN steps: conv1d / conv2d,
 * max_pool2d / avg_pool2d / adaptive_avg_pool2d and batch_norm on float32 torch tensors
 * in plain (contiguous NCHW / NCL) or channels-last (NHWC in memory) layout, with the
 * result in the layout eager gives it (channels-last when torch counts the source's
 * strides, or a convolution's weights', as channels-last: layout.c), through
 * concrete-dims primitives (dnnl_api.c)
 * made on the first call with each shape and kept by primcache.c: a new size creates
 * primitives, never a new graph.
 *
 * Plan: a node joins when its output needs no grad and every parameter (stride, padding,
 * dilation, groups, kernel, ceil_mode, ...) is a Python constant. After a convolution, the
 * nodes right after it fold in as post-ops while each reads the running result and nothing
 * outside the step reads it: batch_norm in inference (scale = weight / sqrt(var + eps)
 * and shift = bias - mean * scale computed per call from the live running stats, folded
 * into the weights and the bias: W * scale[oc], b * scale + shift; a kept weight reorder
 * remembers the scale it was made with), relu, relu6 (oneDNN's clip to [0, 6]), and one add
 * of a same-shape tensor (a residual: oneDNN's sum post-op), in place (`h += r`, `relu_`)
 * or not. A result only the next convolution reads stays in oneDNN's blocked layout
 * (ConvHand). A standalone
 * batch_norm is oneDNN's batch normalization with global stats (its relu folds too).
 *
 * Why batch norm after a convolution folds into the convolution rather than running as its
 * own primitive: it costs nothing there instead of one more pass over memory and one more
 * primitive per shape. Why into the weights rather than as per-channel binary post-ops
 * (which it stays when the scale or shift is inf or NaN): oneDNN 2.6's binary post-ops
 * cost up to 6x the convolution on AVX2, and with a residual sum they get ref:any there.
 *
 * A zero F.pad read only by the convolution folds into its padding (pad_then_conv).
 *
 * Run: an input that is not a dense float32 tensor in one of those layouts (a slice, a
 * channels-last weight that is not also row-major), a residual not laid out as the
 * result, a size
 * the formulas refuse, an avg pooling whose ceil_mode windows run past the padding with
 * count_include_pad (oneDNN divides those by the full window, torch by the part inside the
 * padded input), or a primitive oneDNN refuses, runs the step's nodes eagerly.
 *
 * Memory: the steps are a PyMem array of the plan; operands are borrowed from vals[]; the
 * result is a new tensor the run owns until it is stored in vals[]. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lower_int.h"
#include "dnnl_api.h"
#include "../core/config.h"

#define CV_MAX_FOLD 4
#define CV_WSLOTS \
    64 /* reordered weights kept per step: one per weight and layout (the
                        layers of a model share one step when their modules are guarded
                        by type; a shape sweep may need another layout) */

/* A convolution's weights, reordered into a primitive's layout, kept while they are the
 * weight's (KeptId, lower.h). Measured on ResNet-50 at batch 1: reordering the weights on
 * every call took 99 of 257 ms. */
typedef struct {
    KeptId id;                       /* id.wref NULL: a free slot */
    uint64_t layout;                 /* dnnl_api_conv_weights_layout */
    void *buf;                       /* owned (free()): the reordered weights, 64-byte aligned */
    uint64_t last_use;
    int pins;                        /* runs using buf with the GIL released: not evicted */
    float *scale;                    /* owned (free()): the folded batch norm's per-channel
                                        scale the weights were multiplied by; NULL: none */
    int64_t nscale;
} WeightSlot;

typedef enum { FOLD_RELU = 1, FOLD_BN, FOLD_SUM, FOLD_RELU6 } FoldKind;

typedef struct {
    uint8_t kind;        /* FoldKind */
    int32_t node;
    int32_t v[4];        /* FOLD_BN: running mean, running var, weight, bias (-1: absent);
                            FOLD_SUM: v[0] the residual */
    float eps;           /* FOLD_BN */
} Fold;

struct ConvStep {
    int32_t node;                    /* the conv / pool / batch_norm node */
    int op;                          /* its OpId */
    int sp;                          /* spatial dims */
    int rank;                        /* rank of the input in the graph */
    int32_t x, w, bias;              /* value ids; -1 when absent */
    int32_t mean, var, scale, shift; /* batch_norm */
    float eps;
    int64_t k[2], stride[2], pad[2], dil[2], groups;
    int same;                        /* conv padding='same' */
    int ceil_mode, include_pad;      /* pooling */
    int64_t aout[2];                 /* adaptive pooling: output sizes, -1 for None */
    int32_t pad_node;                /* a zero F.pad whose only reader is the convolution,
                                        folded into its padding; -1: none */
    int64_t pre_l[2], pre_r[2];      /* that pad's widths before and after, by spatial dim */
    Fold fold[CV_MAX_FOLD];
    int nfold;
    int32_t out;                     /* the value the step writes */
    int32_t alias[CV_MAX_FOLD + 1];  /* values that are the same object as out (in-place folds) */
    int nalias;
    WeightSlot wslot[CV_WSLOTS];     /* convolution: reordered weights */
    uint64_t ticks;
    int64_t calls, fallbacks, weight_reorders;
    int64_t posts_after;             /* calls whose primitive left post-ops to run after it
                                        (oneDNN had only a reference kernel with them) */
    KeptFinite wfin;                 /* whether the weights are finite (a relu post-op) */
    int64_t nonfinite;               /* calls run eagerly: an operand of a relu post-op's
                                        primitive was inf or NaN */
    int hand;                        /* the result is read by a later convolution's source
                                        and nothing else: it may stay blocked (ConvHand) */
    int64_t handed, handed_plain;    /* as the consumer: calls that read the producer's
                                        blocked result as it was / reordered it to plain */
};

/* A convolution's result kept in its primitive's blocked layout for the convolution that
 * reads it next (the only reader, step_conv_plan), instead of reordering it to plain and
 * the consumer reordering it back. The producer stores a plain tensor of the right shape
 * in vals[] but leaves it unfilled, and records it here; the consumer finds the record by
 * that object's identity and either reads the blocked buffer directly (its source layout
 * is the producer's result layout: dnnl_api_conv_takes, decided per call since layouts
 * depend on the sizes) or first fills the plain tensor (dnnl_api_conv_to_plain), before
 * any other use of it: a different layout, a fallback to eager, a failure. A record is
 * busy from the producer's success to the consumer's resolution; a run that stopped in
 * between leaves the owner's only reference here, and such a record is reclaimed.
 * Memory: the buffers are malloc'd (64-byte aligned), grown on demand, kept with the plan
 * (at most CV_HANDS activations). */
#define CV_HANDS 4
struct ConvHand {
    int busy;
    void *buf;          /* owned (free()) */
    size_t cap, bytes;  /* buf's size; the result's bytes */
    PyObject *owner;    /* strong: the unfilled plain tensor the producer stored */
    void *plain;        /* owner's data */
    PcEntry *entry;     /* pinned: the producer's primitives (its result layout, the reorder
                           to plain) */
};
typedef struct ConvHand ConvHand;

/* ----------------------------------------------------------------- plan ---- */

/* A constant int parameter (not symbolic, not computed in the graph): 0 and *v, else 1. */
static int const_int(const BoundArg *ba, int64_t *v)
{
    if (!ba || ba->kind != BA_CONST || ba->sym || ba->data)
        return 1;
    return lower_const_int(ba->value, v);
}

/* An int or a tuple/list of 1 or n ints into out[0..n). Absent: dflt. 0 when read, 1 when
 * not a constant the step takes. (The shape rules' reader, sj_int_tuple in shapes/rules.c, also takes symbolic
 * ints and pins them with a guard; a plan must not add guards, so it refuses them.) */
static int int_tuple(const BoundArgs *b, const char *name, int n, int64_t dflt, int64_t *out)
{
    const BoundArg *ba = ba_get(b, name);
    if (!ba) {
        for (int i = 0; i < n; i++)
            out[i] = dflt;
        return 0;
    }
    if (ba->kind != BA_CONST || ba->sym || ba->data || ba->slice_sym)
        return 1;
    PyObject *v = ba->value;   /* borrowed from the graph's constants */
    if (PyLong_Check(v) && !PyBool_Check(v)) {
        if (const_int(ba, &out[0]))
            return 1;
        out[1] = out[0];
        return 0;
    }
    if (!PyTuple_Check(v) && !PyList_Check(v))
        return 1;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(v);
    if (len != 1 && len != n)
        return 1;
    for (int i = 0; i < n; i++)
        if (lower_const_int(PySequence_Fast_GET_ITEM(v, len == 1 ? 0 : i), &out[i]))   /* borrowed */
            return 1;
    return 0;
}

/* A constant number parameter (or absent: dflt) as a double. 0 and *v, else 1. */
static int const_float(const BoundArgs *b, const char *name, double dflt, double *v)
{
    const BoundArg *ba = ba_get(b, name);
    *v = dflt;
    if (!ba)
        return 0;
    if (ba->kind != BA_CONST || ba->sym || ba->data)
        return 1;
    return lower_const_number(ba->value, v);
}

/* A constant bool (or absent: dflt). 0 and *v, else 1. */
static int const_bool(const BoundArgs *b, const char *name, int dflt, int *v)
{
    double d;
    if (const_float(b, name, dflt, &d))
        return 1;
    *v = d != 0.0;
    return 0;
}

/* A float32 torch tensor value. Operands may require grad (parameters under no_grad): the
 * step's results must not (checked on them). */
static int f32_torch(const Graph *g, int32_t v)
{
    const TensorMeta *m = &g->values[v].meta;
    return v >= 0 && m->dtype == DT_F32 && m->lib == LIB_TORCH && !m->symint && !m->np_scalar;
}

static int f32_result(const Graph *g, int32_t v)
{
    return f32_torch(g, v) && !g->values[v].meta.requires_grad;
}

/* 1 when every bound argument of b is absent or one of the names. */
static int only(const BoundArgs *b, const char *const *names)
{
    for (int i = 0; i < b->n; i++) {
        if (b->args[i].kind == BA_ABSENT)
            continue;
        int ok = 0;
        for (int k = 0; names[k] && !ok; k++)
            ok = !strcmp(b->names[i], names[k]);
        if (!ok)
            return 0;
    }
    return 1;
}

/* batch_norm's arguments (inference with running stats): 0 and the ids, else 1. */
static int bn_args(Graph *g, const BoundArgs *b, int32_t *x, int32_t v[4], float *eps)
{
    static const char *const known[] = {"input",    "running_mean", "running_var", "weight", "bias",
                                        "training", "momentum",     "eps",         NULL};
    int training;
    double e;
    if (!only(b, known) || const_bool(b, "training", 0, &training) || training || const_float(b, "eps", 1e-5, &e))
        return 1;
    const BoundArg *mom = ba_get(b, "momentum");
    if (mom && mom->kind != BA_CONST)
        return 1;
    *x = lower_value_of(g, ba_get(b, "input"));
    const char *names[4] = {"running_mean", "running_var", "weight", "bias"};
    for (int i = 0; i < 4; i++) {
        const BoundArg *ba = ba_get(b, names[i]);
        v[i] = lower_value_of(g, ba);
        if ((ba || i < 2) && (v[i] < 0 || !f32_torch(g, v[i]) || g->values[v[i]].meta.ndim != 1))
            return 1;
    }
    *eps = (float)e;
    return !(*x >= 0 && f32_torch(g, *x));
}

/* The node's own parameters: 0 and s filled, 1 when it is not a node we take. */
static int plan_node(Graph *g, int32_t ni, ConvStep *s)
{
    const Node *nd = &g->nodes[ni];
    NodeArgs na;
    const TensorMeta *om = &g->values[nd->first_value].meta;
    if (nd->nout != 1 || (nd->flags & NODE_INPLACE) || !f32_result(g, nd->first_value) || om->ndim > 4 ||
        lower_bind_node(g, ni, &na))
        return 1;
    const BoundArgs *b = &na.bound;
    s->op = nd->op;
    s->w = s->bias = s->mean = s->var = s->scale = s->shift = -1;
    s->dil[0] = s->dil[1] = 1;
    switch (nd->op) {
    case OP_CONV1D:
    case OP_CONV2D: {
        static const char *const known[] = {"input", "weight", "bias", "stride", "padding", "dilation", "groups", NULL};
        s->sp = nd->op == OP_CONV1D ? 1 : 2;
        if (!only(b, known) || int_tuple(b, "stride", s->sp, 1, s->stride) ||
            int_tuple(b, "dilation", s->sp, 1, s->dil))
            return 1;
        const BoundArg *ga = ba_get(b, "groups"), *pa = ba_get(b, "padding");
        s->groups = 1;
        if (ga && const_int(ga, &s->groups))
            return 1;
        if (pa && pa->kind == BA_CONST && PyUnicode_Check(pa->value)) {
            s->same = PyUnicode_CompareWithASCIIString(pa->value, "same") == 0;
            if (!s->same && PyUnicode_CompareWithASCIIString(pa->value, "valid") != 0)
                return 1;
            s->pad[0] = s->pad[1] = 0;
        } else if (int_tuple(b, "padding", s->sp, 0, s->pad)) {
            return 1;
        }
        s->x = lower_value_of(g, ba_get(b, "input"));
        s->w = lower_value_of(g, ba_get(b, "weight"));
        const BoundArg *bb = ba_get(b, "bias");
        if (bb && ((s->bias = lower_value_of(g, bb)) < 0 || !f32_torch(g, s->bias)))
            return 1;
        if (s->w < 0 || !f32_torch(g, s->w) || g->values[s->w].meta.ndim != s->sp + 2 || s->groups < 1)
            return 1;
        break;
    }
    case OP_MAX_POOL2D:
    case OP_AVG_POOL2D: {
        static const char *const known_max[] = {"input",    "kernel_size", "stride",         "padding",
                                                "dilation", "ceil_mode",   "return_indices", NULL};
        static const char *const known_avg[] = {"input",     "kernel_size",       "stride",           "padding",
                                                "ceil_mode", "count_include_pad", "divisor_override", NULL};
        int ret_idx = 0;
        s->sp = 2;
        if (!only(b, nd->op == OP_MAX_POOL2D ? known_max : known_avg) || int_tuple(b, "kernel_size", 2, 0, s->k) ||
            int_tuple(b, "padding", 2, 0, s->pad) || int_tuple(b, "dilation", 2, 1, s->dil) ||
            const_bool(b, "ceil_mode", 0, &s->ceil_mode) || const_bool(b, "return_indices", 0, &ret_idx) || ret_idx ||
            const_bool(b, "count_include_pad", 1, &s->include_pad))
            return 1;
        /* a divisor_override is not oneDNN's: those poolings run eagerly */
        const BoundArg *dv = ba_get(b, "divisor_override");
        if (dv && dv->kind != BA_ABSENT && !(dv->kind == BA_CONST && dv->value == Py_None))
            return 1;
        const BoundArg *sa = ba_get(b, "stride");
        if (!sa || (sa->kind == BA_CONST && (PyTuple_Check(sa->value) || PyList_Check(sa->value)) &&
                    PySequence_Fast_GET_SIZE(sa->value) == 0)) {
            s->stride[0] = s->k[0];
            s->stride[1] = s->k[1];
        } else if (int_tuple(b, "stride", 2, 1, s->stride)) {
            return 1;
        }
        s->x = lower_value_of(g, ba_get(b, "input"));
        break;
    }
    case OP_ADAPTIVE_AVG_POOL2D: {
        static const char *const known[] = {"input", "output_size", NULL};
        const BoundArg *os = ba_get(b, "output_size");
        s->sp = 2;
        if (!only(b, known) || !os || os->kind != BA_CONST || os->sym || os->data)
            return 1;
        PyObject *v = os->value;   /* borrowed from the graph's constants */
        if (PyLong_Check(v)) {
            if (const_int(os, &s->aout[0]))
                return 1;
            s->aout[1] = s->aout[0];
        } else if ((PyTuple_Check(v) || PyList_Check(v)) && PySequence_Fast_GET_SIZE(v) == 2) {
            for (int i = 0; i < 2; i++) {
                PyObject *x = PySequence_Fast_GET_ITEM(v, i);   /* borrowed */
                if (x == Py_None) {
                    s->aout[i] = -1;
                } else if (lower_const_int(x, &s->aout[i])) {
                    return 1;
                }
            }
        } else {
            return 1;
        }
        s->x = lower_value_of(g, ba_get(b, "input"));
        break;
    }
    case OP_BATCH_NORM: {
        int32_t v[4];
        if (bn_args(g, b, &s->x, v, &s->eps))
            return 1;
        s->mean = v[0];
        s->var = v[1];
        s->scale = v[2];
        s->shift = v[3];
        s->sp = om->ndim == 4 ? 2 : 1;
        /* BatchNorm1d on (N, C) runs as eager's native_batch_norm: a oneDNN primitive
         * with its reorders costs more there (LeViT's (32, 160): 110 us against 16.5 us
         * eager, 1 thread; its 22 such calls: 1185 -> 768 us a call, eager 1750) */
        if (om->ndim < 3)
            return 1;
        break;
    }
    default:
        return 1;
    }
    if (s->x < 0 || !f32_torch(g, s->x))
        return 1;
    s->rank = g->values[s->x].meta.ndim;
    if (s->op == OP_BATCH_NORM)
        return 0;
    return s->rank != s->sp + 2 && s->rank != s->sp + 1;   /* batched or not */
}

struct readers {
    const ConvStep *s;
    int32_t cand;
    int bad;
};

/* A reader of an alias that is neither the step's node, a folded one, nor the candidate. */
static void check_reader(void *ctx, int32_t ni, int32_t v)
{
    struct readers *r = ctx;
    const ConvStep *s = r->s;
    int alias = 0, inside = ni == s->node || ni == r->cand;
    for (int i = 0; i < s->nalias; i++)
        alias |= s->alias[i] == v;
    for (int i = 0; i < s->nfold && !inside; i++)
        inside = s->fold[i].node == ni;
    if (alias && !inside)
        r->bad = 1;
}

/* 1 when nothing outside the step and candidate nj reads the running result. */
static int result_private(const Graph *g, const ConvStep *s, int32_t nj)
{
    struct readers r = {s, nj, 0};
    for (int32_t ni = 0; ni < g->nnodes && !r.bad; ni++)
        lower_node_reads(g, ni, check_reader, &r);
    for (int32_t i = 0; i < g->noutputs; i++)
        for (int k = 0; k < s->nalias; k++)
            r.bad |= g->outputs[i] == s->alias[k];
    return !r.bad;
}

static int is_alias(const ConvStep *s, int32_t v)
{
    for (int i = 0; i < s->nalias; i++)
        if (s->alias[i] == v)
            return 1;
    return 0;
}

/* Node nj as a fold on the running result: 0 and *f filled, else 1. */
static int as_fold(Graph *g, ConvStep *s, int32_t nj, Fold *f)
{
    const Node *nd = &g->nodes[nj];
    NodeArgs na;
    if (nd->nout != 1 || !f32_result(g, nd->first_value) || lower_bind_node(g, nj, &na) ||
        !lower_same_dims(&g->values[nd->first_value].meta, &g->values[s->out].meta))
        return 1;
    const BoundArgs *b = &na.bound;
    int32_t in = lower_value_of(g, ba_get(b, "input"));
    memset(f, 0, sizeof *f);
    f->node = nj;
    f->v[0] = f->v[1] = f->v[2] = f->v[3] = -1;
    int nsum = 0, nbn = 0;
    for (int i = 0; i < s->nfold; i++) {
        nsum += s->fold[i].kind == FOLD_SUM;
        nbn += s->fold[i].kind == FOLD_BN;
    }
    switch (nd->op) {
    case OP_RELU: {
        static const char *const known[] = {"input", "inplace", NULL};
        f->kind = FOLD_RELU;
        return !(only(b, known) && is_alias(s, in));
    }
    case OP_RELU6:
    case OP_HARDTANH: {   /* MobileNet's activation: oneDNN's clip to [0, 6] */
        static const char *const known[] = {"input", "inplace", "min_val", "max_val", NULL};
        double lo, hi;
        f->kind = FOLD_RELU6;
        return !(s->op != OP_BATCH_NORM && only(b, known) && is_alias(s, in) &&
                 (nd->op == OP_RELU6 || (!const_float(b, "min_val", -1.0, &lo) &&
                                         !const_float(b, "max_val", 1.0, &hi) && lo == 0.0 && hi == 6.0)));
    }
    case OP_BATCH_NORM: {
        int32_t x;
        /* a conv's result only, before any sum or relu (the per-channel fold is exact there) */
        if (s->op == OP_BATCH_NORM || nbn || s->nfold || bn_args(g, b, &x, f->v, &f->eps) || !is_alias(s, x))
            return 1;
        f->kind = FOLD_BN;
        return 0;
    }
    case OP_ADD: {
        static const char *const known[] = {"input", "other", "alpha", NULL};
        const BoundArg *alpha = ba_get(b, "alpha");
        int64_t one;
        int32_t other = lower_value_of(g, ba_get(b, "other"));
        if (s->op == OP_BATCH_NORM || nsum || !only(b, known) || (alpha && (const_int(alpha, &one) || one != 1)) ||
            in < 0 || other < 0)
            return 1;
        if (!is_alias(s, in)) {   /* r + result: the same, unless in place on r */
            if (nd->flags & NODE_INPLACE)
                return 1;
            int32_t t = in;
            in = other;
            other = t;
        }
        if (!is_alias(s, in) || is_alias(s, other) || !f32_torch(g, other) ||
            !lower_same_dims(&g->values[other].meta, &g->values[s->out].meta))
            return 1;
        f->kind = FOLD_SUM;
        f->v[0] = other;
        return 0;
    }
    default:
        return 1;
    }
}

struct one_reader {
    int32_t v, reader;
    int other;
};

static void note_reader(void *ctx, int32_t ni, int32_t v)
{
    struct one_reader *r = ctx;
    if (v == r->v && ni != r->reader)
        r->other = 1;
}

/* 1 when node `reader` is the only reader of value v (and v is no graph output). */
static int read_only_by(const Graph *g, int32_t v, int32_t reader)
{
    struct one_reader r = {v, reader, 0};
    for (int32_t ni = 0; ni < g->nnodes && !r.other; ni++)
        lower_node_reads(g, ni, note_reader, &r);
    for (int32_t i = 0; i < g->noutputs; i++)
        r.other |= g->outputs[i] == v;
    return !r.other;
}

/* Pad node ni in front of a convolution: a constant-zero F.pad of the spatial dims only,
 * widths >= 0, read by the convolution alone, becomes part of the convolution's padding
 * (MobileNet's TF-style padding writes one before every convolution: a copy of the
 * activation each time). The convolution's node and parameters into *s: 0, or 1 when not
 * taken. */
static int pad_then_conv(Graph *g, int32_t ni, ConvStep *s)
{
    static const char *const known[] = {"input", "pad", "mode", "value", NULL};
    const Node *nd = &g->nodes[ni];
    NodeArgs na;
    if (nd->nout != 1 || (nd->flags & NODE_INPLACE) || !f32_result(g, nd->first_value) || lower_bind_node(g, ni, &na))
        return 1;
    const BoundArgs *b = &na.bound;
    const BoundArg *mode = ba_get(b, "mode"), *pad = ba_get(b, "pad");
    double value;
    if (!only(b, known) || !pad || pad->kind != BA_CONST || pad->sym || pad->data ||
        (mode && (mode->kind != BA_CONST || !PyUnicode_Check(mode->value) ||
                  PyUnicode_CompareWithASCIIString(mode->value, "constant") != 0)))
        return 1;
    const BoundArg *va = ba_get(b, "value");
    if (va && va->kind == BA_CONST && va->value == Py_None)
        value = 0.0;
    else if (const_float(b, "value", 0.0, &value))
        return 1;
    if (value != 0.0 || signbit(value))   /* -0.0 pads differ from a convolution's zeros */
        return 1;
    PyObject *w = pad->value;   /* borrowed from the graph's constants */
    if (!PyTuple_Check(w) && !PyList_Check(w))
        return 1;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(w);
    int32_t nj = ni + 1;
    while (nj < g->nnodes && g->nodes[nj].op == OP_INPUT)
        nj++;
    if (nj >= g->nnodes || (g->nodes[nj].op != OP_CONV1D && g->nodes[nj].op != OP_CONV2D) || plan_node(g, nj, s) ||
        s->same || s->x != nd->first_value || len < 2 || len > 2 * s->sp || len % 2 ||
        !read_only_by(g, nd->first_value, nj))
        return 1;
    int32_t x = lower_value_of(g, ba_get(b, "input"));
    if (x < 0 || !f32_torch(g, x) || g->values[x].meta.ndim != s->rank)
        return 1;
    /* torch's order: the last dim's (before, after) first */
    for (Py_ssize_t i = 0; i < len; i++) {
        int64_t v;
        if (lower_const_int(PySequence_Fast_GET_ITEM(w, i), &v) || v < 0)   /* borrowed */
            return 1;
        int d = s->sp - 1 - (int)(i / 2);
        if (i % 2)
            s->pre_r[d] = v;
        else
            s->pre_l[d] = v;
    }
    s->x = x;
    s->pad_node = ni;
    s->node = nj;
    return 0;
}

struct producer_readers {
    const ConvStep *a;
    int32_t reader;    /* the consumer's node that reads its source */
    int bad;
};

static void check_producer_reader(void *ctx, int32_t ni, int32_t v)
{
    struct producer_readers *r = ctx;
    const ConvStep *a = r->a;
    if (!is_alias(a, v) || ni == r->reader || ni == a->node)
        return;
    for (int i = 0; i < a->nfold; i++)
        if (a->fold[i].node == ni)
            return;
    r->bad = 1;
}

/* Convolution b (being planned) reads the result of an earlier convolution step a: when
 * that result (every alias of it) is read by nothing but b's source (not b's residual, no
 * other node, no graph output), a may hand it over in its blocked layout (ConvHand). */
static void mark_producer(const Graph *g, LowerPlan *p, const ConvStep *b)
{
    for (int32_t j = p->nconvs - 1; j >= 0; j--) {
        ConvStep *a = &p->convs[j];
        if (!is_alias(a, b->x))
            continue;
        if (a->op != OP_CONV1D && a->op != OP_CONV2D)
            return;
        struct producer_readers r = {a, b->pad_node >= 0 ? b->pad_node : b->node, 0};
        for (int32_t ni = 0; ni < g->nnodes && !r.bad; ni++)
            lower_node_reads(g, ni, check_producer_reader, &r);
        for (int32_t i = 0; i < g->noutputs; i++)
            r.bad |= is_alias(a, g->outputs[i]);
        a->hand = !r.bad;
        return;
    }
}

int32_t step_conv_plan(Graph *g, int32_t ni, LowerPlan *p)
{
    ConvStep s;
    memset(&s, 0, sizeof s);
    s.pad_node = -1;
    int op = g->nodes[ni].op;
    if (op == OP_PAD) {
        if (pad_then_conv(g, ni, &s))
            return -1;
        ni = s.node;
        op = g->nodes[ni].op;
    } else if ((op != OP_CONV1D && op != OP_CONV2D && op != OP_MAX_POOL2D && op != OP_AVG_POOL2D &&
                op != OP_ADAPTIVE_AVG_POOL2D && op != OP_BATCH_NORM) ||
               plan_node(g, ni, &s)) {
        return -1;
    }
    s.node = ni;
    s.out = g->nodes[ni].first_value;
    s.alias[s.nalias++] = s.out;
    int32_t last = ni;
    int can_fold = op == OP_CONV1D || op == OP_CONV2D || op == OP_BATCH_NORM;
    while (can_fold && s.nfold < CV_MAX_FOLD) {
        int32_t nj = last + 1;
        while (nj < g->nnodes && g->nodes[nj].op == OP_INPUT)
            nj++;
        Fold f;
        if (nj >= g->nnodes || as_fold(g, &s, nj, &f))
            break;
        if (op == OP_BATCH_NORM && (f.kind != FOLD_RELU || s.nfold))
            break;
        int inplace = (g->nodes[nj].flags & NODE_INPLACE) != 0;
        /* a new value replaces the running result: nothing else may read the old one. In
         * place, later readers see the step's result, which is the mutated object. */
        if (!inplace && !result_private(g, &s, nj))
            break;
        s.fold[s.nfold++] = f;
        last = nj;
        if (inplace) {
            s.alias[s.nalias++] = g->nodes[nj].first_value;
        } else {
            s.out = g->nodes[nj].first_value;
            s.nalias = 0;
            s.alias[s.nalias++] = s.out;
        }
    }
    if (op == OP_CONV1D || op == OP_CONV2D)
        mark_producer(g, p, &s);
    if (lower_push_step(p, STEP_CONV, (void **)&p->convs, &p->nconvs, sizeof s, &s) < 0)
        return -2;
    return last;
}

static void slot_clear(WeightSlot *w)
{
    lower_kept_clear(&w->id);
    free(w->buf);
    w->buf = NULL;
    free(w->scale);
    w->scale = NULL;
    w->nscale = 0;
}

static void hand_drop(ConvHand *h)
{
    Py_CLEAR(h->owner);
    if (h->entry)
        primcache_release(h->entry);
    h->entry = NULL;
    h->busy = 0;
}

void step_conv_free(LowerPlan *p)
{
    for (int i = 0; p->conv_hands && i < CV_HANDS; i++) {
        hand_drop(&p->conv_hands[i]);
        free(p->conv_hands[i].buf);
    }
    PyMem_Free(p->conv_hands);
    p->conv_hands = NULL;
    for (int32_t i = 0; i < p->nconvs; i++) {
        for (int k = 0; k < CV_WSLOTS; k++)
            slot_clear(&p->convs[i].wslot[k]);
        lower_kept_clear(&p->convs[i].wfin.id);
    }
    PyMem_Free(p->convs);
    p->convs = NULL;
    p->nconvs = 0;
}

int step_conv_stats(const Graph *g, const LowerPlan *p, PyObject *d)
{
    (void)g;
    long long calls = 0, fallbacks = 0, fused = 0, reorders = 0, after = 0, nonfinite = 0, handed = 0, plain = 0;
    for (int32_t i = 0; i < p->nconvs; i++) {
        handed += p->convs[i].handed;
        plain += p->convs[i].handed_plain;
        nonfinite += p->convs[i].nonfinite;
        calls += p->convs[i].calls;
        fallbacks += p->convs[i].fallbacks;
        fused += p->convs[i].nfold;
        reorders += p->convs[i].weight_reorders;
        after += p->convs[i].posts_after;
    }
    static const char *const names[9] = {
        "conv_steps",       "conv_calls",     "conv_fallbacks",        "conv_fused",           "conv_weight_reorders",
        "conv_posts_after", "conv_nonfinite", "conv_blocked_handoffs", "conv_blocked_to_plain"};
    long long vals[9] = {p->nconvs, calls, fallbacks, fused, reorders, after, nonfinite, handed, plain};
    return lower_put_counts(d, 9, names, vals);
}

/* ------------------------------------------------------------------ run ---- */

/* The step's nodes, run the original way. */
static int run_eagerly(Graph *g, ConvStep *s, PyObject **vals)
{
    s->fallbacks++;
    int32_t nodes[CV_MAX_FOLD + 1];
    int n = 0;
    if (s->pad_node >= 0)
        nodes[n++] = s->node;
    for (int i = 0; i < s->nfold; i++)
        nodes[n++] = s->fold[i].node;
    return lower_exec_nodes(g, s->pad_node >= 0 ? s->pad_node : s->node, nodes, n, vals);
}

/* Reads value v as a float32 torch tensor of rank r (r < 0: any), any layout. 0, 1 (run
 * eagerly), -1 error. */
static int read_raw(PyObject **vals, int32_t v, int r, Operand *o)
{
    if (!vals[v])
        return 1;
    int rc = lower_read_input(vals[v], LIB_TORCH, o);
    if (o->has_view) {   /* numpy: not ours (torch only) */
        PyBuffer_Release(&o->view);
        o->has_view = 0;
        rc = rc < 0 ? rc : 1;
    }
    return rc ? rc : r >= 0 && o->ndim != r;
}

/* 1 when o is dense row-major, or dense channels-last when cl: NHWC (rank 4) or NWC
 * (rank 3). */
static int dense_as(const Operand *o, int cl)
{
    static const int nwc[3] = {0, 2, 1};
    int perm[4];
    if (!cl)
        return lower_dense_in(o->size, o->stride, NULL, o->ndim);
    if (o->ndim == 4)
        return lower_nhwc_perm(perm), lower_dense_in(o->size, o->stride, perm, 4);
    return o->ndim == 3 && lower_dense_in(o->size, o->stride, nwc, 3);
}

/* Reads value v as a float32 tensor of rank r, dense in the layout cl says (dense_as). */
static int read_in(PyObject **vals, int32_t v, int r, int cl, Operand *o)
{
    int rc = read_raw(vals, v, r, o);
    return rc ? rc : !dense_as(o, cl);
}

static int read_dense(PyObject **vals, int32_t v, int r, Operand *o)
{
    return read_in(vals, v, r, 0, o);
}

/* Reads a source or weights of rank r in the dense layout its memory has: *cl 0 row-major
 * (also when channels-last describes the same memory), 1 channels-last (NHWC or OHWI at
 * rank 4, NWC at rank 3 when nwc). Which layout the result takes is torch's rule, apart
 * from this (step_conv_run). */
static int read_any(PyObject **vals, int32_t v, int r, int nwc, Operand *o, int *cl)
{
    int rc = read_raw(vals, v, r, o);
    if (rc)
        return rc;
    *cl = !dense_as(o, 0);
    return *cl && !((o->ndim == 4 || (o->ndim == 3 && nwc)) && dense_as(o, 1));
}

/* A [n] vector operand (contiguous). */
static int read_vec(PyObject **vals, int32_t v, int64_t n, const void **data)
{
    Operand o;
    int rc = read_dense(vals, v, 1, &o);
    if (rc)
        return rc;
    *data = o.data;
    return o.size[0] == n ? 0 : 1;
}

/* torch's output size of a window of extent ext over n with padding p (both sides),
 * stride st; ceil_mode as pooling has it. */
static int64_t out_size(int64_t n, int64_t p, int64_t ext, int64_t st, int ceil_mode)
{
    int64_t num = n + 2 * p - ext + (ceil_mode ? st - 1 : 0);
    if (num < 0)
        return 0;
    int64_t o = num / st + 1;
    if (ceil_mode && (o - 1) * st >= n + p)
        o--;
    return o;
}

/* The key's sizes for input x: 0, or 1 (these sizes run eagerly). */
static int fill_key(const ConvStep *s, const Operand *x, const Operand *w, CvKey *key)
{
    int batched = s->op == OP_BATCH_NORM || x->ndim == s->sp + 2, off = batched ? 1 : 0;
    int windowed = s->op != OP_BATCH_NORM && s->op != OP_ADAPTIVE_AVG_POOL2D;
    for (int i = 0; windowed && i < s->sp; i++)
        if (s->stride[i] <= 0 || s->dil[i] <= 0 || s->pad[i] < 0)
            return 1;
    key->sp = (uint8_t)s->sp;
    key->n = batched ? x->size[0] : 1;
    key->c = x->size[off];
    for (int i = 0; i < s->sp; i++)
        key->in[i] = off + 1 + i < x->ndim ? x->size[off + 1 + i] : 1;   /* batch norm of [N, C]: L = 1 */
    if (key->n == 0 || key->c == 0)
        return 1;
    for (int i = 0; i < s->sp; i++)
        if (key->in[i] == 0)
            return 1;
    switch (s->op) {
    case OP_CONV1D:
    case OP_CONV2D:
        key->op_class = CV_CLASS_CONV;
        key->oc = w->size[0];
        key->groups = s->groups;
        if (key->oc == 0 || key->oc % s->groups || key->c % s->groups || w->size[1] * s->groups != key->c)
            return 1;
        for (int i = 0; i < s->sp; i++) {
            int64_t k = w->size[2 + i], ext = s->dil[i] * (k - 1) + 1;
            key->k[i] = k;
            key->stride[i] = s->stride[i];
            key->dil[i] = s->dil[i];
            if (s->same) {
                key->pad_l[i] = (ext - 1) / 2;
                key->pad_r[i] = ext - 1 - key->pad_l[i];
                key->out[i] = key->in[i];
            } else {   /* a folded F.pad adds its widths (pre_l, pre_r) */
                key->pad_l[i] = s->pad[i] + s->pre_l[i];
                key->pad_r[i] = s->pad[i] + s->pre_r[i];
                key->out[i] = out_size(key->in[i] + s->pre_l[i] + s->pre_r[i], s->pad[i], ext, s->stride[i], 0);
            }
            if (key->out[i] <= 0 || k == 0)
                return 1;
        }
        return 0;
    case OP_MAX_POOL2D:
    case OP_AVG_POOL2D:
        key->op_class = CV_CLASS_POOL;
        key->alg = s->op == OP_MAX_POOL2D ? CV_POOL_MAX : s->include_pad ? CV_POOL_AVG_INCLUDE : CV_POOL_AVG_EXCLUDE;
        for (int i = 0; i < 2; i++) {
            int64_t ext = s->dil[i] * (s->k[i] - 1) + 1;
            key->k[i] = s->k[i];
            key->stride[i] = s->stride[i];
            key->dil[i] = s->dil[i];
            key->pad_l[i] = s->pad[i];
            key->out[i] = out_size(key->in[i], s->pad[i], ext, s->stride[i], s->ceil_mode);
            if (key->out[i] <= 0)
                return 1;
            int64_t need = (key->out[i] - 1) * s->stride[i] + ext - key->in[i] - s->pad[i];
            key->pad_r[i] = need > s->pad[i] ? need : s->pad[i];
            if (need > s->pad[i] && key->alg == CV_POOL_AVG_INCLUDE) {
                /* windows past the padded input: torch divides by the part inside it,
                 * oneDNN by the whole window. Without padding that is "exclude". */
                if (s->pad[i])
                    return 1;
            }
        }
        if (key->alg == CV_POOL_AVG_INCLUDE && !s->pad[0] && !s->pad[1])
            key->alg = CV_POOL_AVG_EXCLUDE;   /* the same divisor; one primitive for both */
        return 0;
    case OP_ADAPTIVE_AVG_POOL2D:
        key->op_class = CV_CLASS_POOL;
        key->alg = CV_POOL_AVG_EXCLUDE;
        for (int i = 0; i < 2; i++) {
            int64_t o = s->aout[i] < 0 ? key->in[i] : s->aout[i];
            if (o <= 0 || key->in[i] % o)
                return 1;   /* uneven bins: not a plain pooling */
            key->out[i] = o;
            key->k[i] = key->stride[i] = key->in[i] / o;
            key->dil[i] = 1;
        }
        return 0;
    default:   /* batch norm */
        key->op_class = CV_CLASS_BNORM;
        key->eps = s->eps;
        key->alg = (uint8_t)((s->scale >= 0 ? CV_BN_SCALE : 0) | (s->shift >= 0 ? CV_BN_SHIFT : 0) |
                             (s->nfold ? CV_BN_RELU : 0));
        for (int i = 0; i < s->sp; i++)
            key->out[i] = key->in[i];
        return 0;
    }
}

/* The folded batch norm's per-channel scale and shift into sc[0..c) and sh[0..c). */
static int bn_affine(PyObject **vals, const Fold *f, int64_t c, float *sc, float *sh)
{
    const void *d[4] = {NULL, NULL, NULL, NULL};
    int rc;
    for (int i = 0; i < 4; i++)
        if (f->v[i] >= 0 && (rc = read_vec(vals, f->v[i], c, &d[i])))
            return rc;
    const float *mean = d[0], *var = d[1], *w = d[2], *b = d[3];
    for (int64_t i = 0; i < c; i++) {
        double inv = 1.0 / sqrt((double)var[i] + (double)f->eps);
        double a = (w ? w[i] : 1.0) * inv;
        sc[i] = (float)a;
        sh[i] = (float)((b ? b[i] : 0.0) - mean[i] * a);
    }
    return 0;
}

/* The plain weights (nw floats, output channel outermost) times scale[oc] into a new
 * malloc'd buffer, or NULL when out of memory. */
static float *scaled_weights(const float *w, size_t nw, const float *scale, int64_t oc)
{
    float *out = aligned_alloc(64, (nw * sizeof(float) + 63) & ~(size_t)63);
    size_t per = nw / (size_t)oc;
    for (int64_t o = 0; out && o < oc; o++)
        for (size_t i = 0; i < per; i++)
            out[(size_t)o * per + i] = w[(size_t)o * per + i] * scale[o];
    return out;
}

static int slot_scale_is(const WeightSlot *w, const float *scale, int64_t n)
{
    if (!scale)
        return !w->scale;
    return w->scale && w->nscale == n && !memcmp(w->scale, scale, sizeof(float) * (size_t)n);
}

/* The reordered weights of wobj (data at ptr, nw floats) for primitive prim, multiplied by
 * scale[oc] per output channel when scale is not NULL (a batch norm folded into them): a
 * kept copy, or a new one, in a slot *out pinned for the caller (unpin after the run);
 * NULL when they cannot be kept (the primitive reorders them itself). -1 on error. */
static int kept_weights(ConvStep *s, void *prim, PyObject *wobj, const void *ptr, size_t nw, const float *scale,
                        int64_t oc, WeightSlot **out)
{
    uint64_t layout = 0;
    size_t bytes = dnnl_api_conv_weights_layout(prim, &layout);
    *out = NULL;
    if (!bytes)
        return 0;   /* plain weights: nothing to keep */
    long long version;
    if (lower_kept_version(wobj, &version))
        return 0;
    /* the victim: a free slot, else the least recently used one no run holds */
    WeightSlot *victim = NULL;
    int victim_free = 0;
    for (int k = 0; k < CV_WSLOTS; k++) {
        WeightSlot *w = &s->wslot[k];
        if (lower_kept_matches(&w->id, wobj, ptr, version) && w->layout == layout && slot_scale_is(w, scale, oc)) {
            w->last_use = ++s->ticks;
            w->pins++;
            *out = w;
            return 0;
        }
        if (w->pins || victim_free)
            continue;
        /* free: never used, its weight died, or an older version of these weights */
        int free_slot = !w->id.wref || PyWeakref_GetObject(w->id.wref) == Py_None ||
                        (PyWeakref_GetObject(w->id.wref) == wobj && w->layout == layout);
        if (free_slot || !victim || w->last_use < victim->last_use) {
            victim = w;
            victim_free = free_slot;
        }
    }
    if (!victim)
        return 0;   /* every slot in use by another thread's run */
    slot_clear(victim);
    void *buf = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    float *plain = scale ? scaled_weights((const float *)ptr, nw, scale, oc) : NULL;
    float *kept_scale = scale ? malloc(sizeof(float) * (size_t)oc) : NULL;
    if (!buf || (scale && (!plain || !kept_scale))) {
        free(buf);
        free(plain);
        free(kept_scale);
        return 0;
    }
    int status;
    Py_BEGIN_ALLOW_THREADS status = dnnl_api_conv_weights(prim, plain ? plain : ptr, buf);
    Py_END_ALLOW_THREADS free(plain);
    if (status || lower_kept_set(&victim->id, wobj, ptr, version)) {
        free(buf);
        free(kept_scale);
        return 0;
    }
    if (scale) {
        memcpy(kept_scale, scale, sizeof(float) * (size_t)oc);
        victim->scale = kept_scale;
        victim->nscale = oc;
    }
    victim->buf = buf;
    victim->layout = layout;
    victim->last_use = ++s->ticks;
    victim->pins = 1;
    s->weight_reorders++;
    *out = victim;
    return 0;
}

/* A free record with a buffer of `bytes` for a producer, or NULL (none free, no memory:
 * the result goes plain). A busy record whose owner only it still holds belongs to a run
 * that stopped before its consumer: reclaimed. GIL held. */
static ConvHand *hand_take(LowerPlan *p, size_t bytes)
{
    if (!p->conv_hands && !(p->conv_hands = PyMem_Calloc(CV_HANDS, sizeof(ConvHand))))
        return NULL;
    ConvHand *h = NULL;
    for (int i = 0; i < CV_HANDS; i++) {
        ConvHand *c = &p->conv_hands[i];
        if (c->busy && c->owner && Py_REFCNT(c->owner) == 1)
            hand_drop(c);
        if (!c->busy && (!h || (c->cap >= bytes && h->cap < bytes)))
            h = c;
    }
    if (!h)
        return NULL;
    if (h->cap < bytes) {
        size_t cap = (bytes + 63) & ~(size_t)63;
        free(h->buf);
        h->cap = 0;
        if (!(h->buf = aligned_alloc(64, cap)))
            return NULL;
        h->cap = cap;
    }
    h->busy = 1;
    h->bytes = bytes;
    return h;
}

/* The busy record whose unfilled plain tensor is obj, or NULL. GIL held. */
static ConvHand *hand_find(LowerPlan *p, PyObject *obj)
{
    for (int i = 0; p->conv_hands && obj && i < CV_HANDS; i++)
        if (p->conv_hands[i].busy && p->conv_hands[i].owner == obj)
            return &p->conv_hands[i];
    return NULL;
}

/* Fills h's plain tensor from its blocked buffer and frees the record. 0, or -1 with an
 * exception (the value cannot be produced). */
static int hand_plain(ConvHand *h)
{
    int status;
    void *prim = primcache_prim(h->entry);
    Py_BEGIN_ALLOW_THREADS status = dnnl_api_conv_to_plain(prim, h->buf, h->plain);
    Py_END_ALLOW_THREADS hand_drop(h);
    if (status) {
        PyErr_Format(PyExc_RuntimeError, "oneDNN: reordering a convolution result to plain failed (status %d)", status);
        return -1;
    }
    return 0;
}

/* What the folded nodes made of a convolution's run. */
typedef struct {
    float *affine;          /* PyMem, freed by the caller: a batch norm's scale, shift and the
                               bias they make */
    const float *wscale;    /* the scale folded into the weights, or NULL */
    Operand res_op;         /* the residual, when a sum is folded */
    int relu, chan_posts;   /* a relu post-op; per-channel post-ops */
} ConvPosts;

/* s's folded nodes as oneDNN post-ops of key and args (a relu, a residual sum of the
 * result's shape out_dims) or, for a batch norm's finite scale and shift, folded into the
 * weights and the bias (per-channel post-ops when not finite). ch: the result's channels.
 * 0, 1 (run the nodes eagerly) or -1 with an exception. */
static int fold_posts(ConvStep *s, PyObject **vals, const int64_t *out_dims, int out_r, int64_t ch, CvKey *key,
                      CvArgs *args, ConvPosts *cp)
{
    int rc;
    for (int i = 0; i < s->nfold; i++) {
        const Fold *f = &s->fold[i];
        if (f->kind == FOLD_RELU || f->kind == FOLD_RELU6) {   /* both drop NaN in oneDNN */
            key->post[key->npost++] = f->kind == FOLD_RELU ? CVPO_RELU : CVPO_RELU6;
            cp->relu = 1;
        } else if (f->kind == FOLD_SUM) {
            Operand r;
            if ((rc = read_in(vals, f->v[0], out_r, key->dst_cl, &r)))   /* in the result's layout */
                return rc;
            for (int d = 0; d < out_r; d++)
                if (r.size[d] != out_dims[d])
                    return 1;
            args->residual = r.data;
            cp->res_op = r;
            key->post[key->npost++] = CVPO_SUM;
        } else {
            /* a batch norm folds only as the first fold (step_conv_plan): one buffer */
            if (!cp->affine && !(cp->affine = PyMem_Malloc(sizeof(float) * 3 * (size_t)ch))) {
                PyErr_NoMemory();
                return -1;
            }
            float *affine = cp->affine;
            if ((rc = bn_affine(vals, f, ch, affine, affine + ch)))
                return rc;
            int finite = 1;
            for (int64_t c = 0; c < 2 * ch; c++)
                finite &= isfinite(affine[c]) != 0;
            if (finite) {
                /* into the weights and the bias: conv(x, W) * s + t == conv(x, W * s) + t
                 * (each weight rounded once more, like the summation order's effect).
                 * oneDNN 2.6's per-channel binary post-ops cost 1-6x the convolution
                 * itself on AVX2 (a 1x1 8->48 at 32x32: 48 us bare, 324 us with them).
                 * A scale or shift that is inf or NaN stays a post-op: W * inf would
                 * turn a zero product into NaN where eager has inf. */
                const float *b0 = args->bias;
                float *fb = affine + 2 * ch;
                for (int64_t c = 0; c < ch; c++)
                    fb[c] = affine[ch + c] + (b0 ? b0[c] * affine[c] : 0.f);
                args->bias = fb;
                key->has_bias = 1;
                cp->wscale = affine;
            } else {
                args->chan[key->npost] = affine;
                key->post[key->npost++] = CVPO_MUL_C;
                args->chan[key->npost] = affine + ch;
                key->post[key->npost++] = CVPO_ADD_C;
                cp->chan_posts = 1;
            }
        }
    }
    return 0;
}

int step_conv_run(Graph *g, LowerPlan *p, int32_t idx, PyObject **vals)
{
    ConvStep *s = &p->convs[idx];
    Operand x, w, o;
    CvKey key;
    CvArgs args;
    int64_t out_dims[5];
    int rc, out_r = 0;
    PyObject *res = NULL;     /* strong: the result */
    float *wtmp = NULL;       /* malloc: weights times wscale, when no slot keeps them */
    PcEntry *e = NULL;
    WeightSlot *kept = NULL;  /* pinned during the run */
    ConvHand *in = hand_find(p, vals[s->x]);   /* our source, left blocked by its producer */
    ConvHand *keep = NULL;    /* ours, when we leave the result blocked for our consumer */
    ConvPosts cp;             /* what the folded nodes made */
    memset(&cp, 0, sizeof cp);
    memset(&key, 0, sizeof key);
    memset(&args, 0, sizeof args);
    memset(&w, 0, sizeof w);
    int xcl, wcl = 0;
    if ((rc = read_any(vals, s->x, s->rank, s->sp == 1, &x, &xcl)))
        goto done;
    if (s->w >= 0 && (rc = read_any(vals, s->w, s->sp + 2, 0, &w, &wcl)))
        goto done;
    if ((rc = fill_key(s, &x, &w, &key)))
        goto done;
    /* the result's layout is eager's: a convolution's or a pooling's is channels-last when
     * torch counts the source's strides, or the weights', as channels-last; a batch norm's
     * whenever its source is not row-major (batch_norm_cpu) */
    key.src_cl = (uint8_t)xcl;
    key.wei_cl = (uint8_t)wcl;
    if (s->op == OP_BATCH_NORM)
        key.dst_cl = (uint8_t)xcl;
    else
        key.dst_cl = (uint8_t)((x.ndim == 4 && lower_strides_like_cl(x.size, x.stride)) ||
                               (s->w >= 0 && w.ndim == 4 && lower_strides_like_cl(w.size, w.stride)));
    if (key.dst_cl && s->rank != 4) {   /* an unbatched source, a 1-D batch norm: eager's own strides */
        rc = 1;
        goto done;
    }
    args.src = x.data;
    args.wei = w.data;
    int64_t ch = key.op_class == CV_CLASS_CONV ? key.oc : key.c;
    if (s->bias >= 0) {
        if ((rc = read_vec(vals, s->bias, key.oc, &args.bias)))
            goto done;
        key.has_bias = 1;
    }
    if (key.op_class == CV_CLASS_BNORM) {
        if ((rc = read_vec(vals, s->mean, ch, &args.mean)) || (rc = read_vec(vals, s->var, ch, &args.var)) ||
            (s->scale >= 0 && (rc = read_vec(vals, s->scale, ch, &args.scale))) ||
            (s->shift >= 0 && (rc = read_vec(vals, s->shift, ch, &args.shift))))
            goto done;
    }
    /* the result's shape, as torch gives it */
    out_r = s->rank;
    {
        int off = s->op == OP_BATCH_NORM || s->rank == s->sp + 2;   /* the channel dim */
        if (off > 0)
            out_dims[0] = key.n;
        out_dims[off] = ch;
        for (int i = 0; i < s->sp && off + 1 + i < out_r; i++)
            out_dims[off + 1 + i] = key.out[i];
    }
    if (key.op_class == CV_CLASS_CONV && (rc = fold_posts(s, vals, out_dims, out_r, ch, &key, &args, &cp)))
        goto done;
    /* oneDNN's relu post-op turns NaN into 0 (lower.h: lower_finite): a NaN or inf in an
     * operand runs the nodes eagerly. The weights' scan is kept per weight version; the
     * source's costs 1 / (OC * KH * KW) of the convolution. */
    if (cp.relu &&
        (!(in ? lower_finite_n(in->buf, (int64_t)(in->bytes / sizeof(float))) : lower_finite(&x)) ||
         !lower_weight_finite(&s->wfin, vals[s->w], &w) || (args.bias && !lower_finite_n(args.bias, key.oc)) ||
         (args.residual && !lower_finite(&cp.res_op)) || cp.chan_posts)) {
        s->nonfinite++;
        rc = 1;
        goto done;
    }
    {
        int64_t ost[5];
        int perm[4];
        lower_strides_in(out_dims, key.dst_cl ? (lower_nhwc_perm(perm), perm) : NULL, out_r, ost);
        if (!(res = lower_new_output_strided(LIB_TORCH, DT_F32, out_dims, ost, out_r))) {
            rc = -1;
            goto done;
        }
    }
    if ((rc = read_in(&res, 0, out_r, key.dst_cl, &o)))
        goto done;
    args.dst = o.data;
    key.threads = dnnl_api_threads();
    if (!(e = primcache_get_conv(&key))) {
        rc = -1;
        goto done;
    }
    void *prim = primcache_prim(e);
    if (!prim) {
        rc = 1;
        goto done;
    }
    if (key.op_class == CV_CLASS_CONV) {
        size_t nw = 1;
        for (int d = 0; d < w.ndim; d++)
            nw *= (size_t)w.size[d];
        if (kept_weights(s, prim, vals[s->w], w.data, nw, cp.wscale, key.oc, &kept) < 0) {
            rc = -1;
            goto done;
        }
        if (!kept && cp.wscale) {
            if (!(wtmp = scaled_weights((const float *)w.data, nw, cp.wscale, key.oc))) {
                PyErr_NoMemory();
                rc = -1;
                goto done;
            }
            args.wei = wtmp;
        }
    }
    args.wei_ready = kept ? kept->buf : NULL;
    if (in) {
        void *from = primcache_prim(in->entry);
        if (key.op_class == CV_CLASS_CONV && dnnl_api_conv_takes(prim, from)) {
            args.src_ready = in->buf;
        } else {
            s->handed_plain++;
            ConvHand *h = in;
            in = NULL;
            if (hand_plain(h) < 0) {
                if (kept)
                    kept->pins--;
                rc = -1;
                goto done;
            }
        }
    }
    size_t kb;
    if (s->hand && sj_config.conv_blocked_handoff && key.op_class == CV_CLASS_CONV &&
        (kb = dnnl_api_conv_dst_bytes(prim)) && (keep = hand_take(p, kb)))
        args.dst_keep = keep->buf;
    int status;
    Py_BEGIN_ALLOW_THREADS status = dnnl_api_conv_exec(prim, &key, &args);
    Py_END_ALLOW_THREADS if (kept) kept->pins--;
    rc = status != 0;
    if (!rc) {
        s->calls++;
        s->posts_after += key.op_class == CV_CLASS_CONV && dnnl_api_conv_nfused(prim) < key.npost;
        if (in) {
            s->handed++;
            hand_drop(in);
            in = NULL;
        }
        if (keep) {   /* res stays unfilled: only the consumer reads it (hand_find) */
            keep->owner = Py_NewRef(res);
            keep->plain = o.data;
            keep->entry = e;   /* the pin moves to the record */
            e = NULL;
            keep = NULL;
        }
    }
done:
    if (keep)
        hand_drop(keep);
    if (in && rc >= 0) {   /* not read blocked: the plain value first, for eager or a retry */
        s->handed_plain++;
        ConvHand *h = in;
        in = NULL;
        if (hand_plain(h) < 0)
            rc = -1;
    }
    if (in)
        hand_drop(in);
    if (e)
        primcache_release(e);
    PyMem_Free(cp.affine);
    free(wtmp);
    if (rc == 0) {
        for (int i = 1; i < s->nalias; i++)
            Py_XSETREF(vals[s->alias[i]], Py_NewRef(res));
        Py_XSETREF(vals[s->out], res);   /* steals res */
        return 0;
    }
    Py_XDECREF(res);
    if (rc < 0)
        return -1;
    return run_eagerly(g, s, vals);
}
