/* The generated-C backend's view of a graph: which nodes become
 * fused loops (plan.c), the C source of each loop (emit.c), and the compiled graph that
 * runs the steps (runtime.c). Data flows graph -> backend, never back.
 *
 * Memory: plans, steps and kernels are PyMem arrays owned by the CompiledGraph; the graph
 * they describe is owned (a strong reference to its _C.Graph object) by the same. */
#ifndef SJ_LOWER_H
#define SJ_LOWER_H

#include <Python.h>
#include <stdint.h>

#include "../graph/ir.h"
#include "../native/native.h"
#include "../core/pyutil.h"

#define SJ_KMAX_OPERANDS 32   /* tensor operands (inputs + outputs) of one kernel */

/* What a kernel computes (plan_reduce.c, emit_reduce.c): a pointwise loop, or a reduction
 * or row operation over the dims `mask` of its iteration space with the kernel's other
 * nodes as a fused prologue. */
typedef enum {
    KF_POINTWISE = 0,
    KF_SUM,
    KF_MEAN,
    KF_MAX,
    KF_MIN,
    KF_SOFTMAX,
    KF_LOG_SOFTMAX,
    KF_LAYER_NORM,
    KF_RMS_NORM   /* x * rsqrt(mean(x * x) + eps) (* w): the rms_norm op over its trailing
                     normalized_shape (plan_reduce.c), or that pattern spelled out over the
                     last dim (plan_rms.c) */
} KernelFlavour;

typedef struct {
    uint32_t mask;      /* the reduced (or row) dims of the iteration space */
    int keepdim;        /* reductions (and a row op's fused sum): reduced dims stay as 1 in
                           the output */
    double eps;         /* layer_norm, RMS norm */
    int32_t src;        /* the value reduced: made by the prologue or a kernel input */
    int32_t weight, bias;   /* layer_norm (RMS norm: weight): input values, or -1 */
    int nepi;           /* row ops: the last nepi nodes of the kernel are an epilogue, float
                           pointwise ops of the row's result and constants, applied as each
                           result is stored (layer_norm then GELU: one pass) */
    int nsum;           /* softmax/log_softmax: 1 when the kernel's first node is a sum (or,
                           sum_mean, a mean) of the row op's input over the same dims, with
                           no prologue: computed in the max pass into output 1 */
    int sum_mean;
    int nsib;           /* sums and means: 1 when the kernel's last node is a second reduction
                           of the same flavour, dims and dtype over the same space (a sibling,
                           plan_sibling.c), its result output 1; the node before it is the
                           first reduction */
    int32_t sib_src;    /* with nsib: the value the sibling reduces */
    int nextra;         /* row ops: graph nodes of the row op after its first (an RMS norm
                           spelled out spans x * x, the mean, + eps, rsqrt, * x and * w; the
                           rms_norm op is one node) */
} ReduceInfo;

/* One fused pointwise loop: nodes [nodes, nodes + nnodes) of the graph (in order), over
 * an iteration space of `rank` dims (the broadcast of its tensor inputs at run time). */
typedef struct {
    int32_t *nodes;
    int32_t nnodes;    /* PyMem: graph node indices */
    int32_t ins[SJ_KMAX_OPERANDS];
    int32_t nin;    /* value ids read from outside */
    int32_t outs[SJ_KMAX_OPERANDS];
    int32_t nout;   /* value ids written (used later) */
    int rank;
    int32_t space;     /* pointwise: a value whose dims are the iteration space's */
    int rot;           /* pointwise: rotate_half reads in it (plan_rot.c; not a reduction's
                          prologue, whose loops have no last-dim index) */
    Lib lib;
    KernelFlavour flavour;              /* KF_POINTWISE, or a reduction with `red` */
    ReduceInfo red;
    char name[48];                      /* the C function's name: sj_k + a hash of its text
                                           (lower_name_kernels), shared by identical kernels */
    int over_budget;                    /* past the graph's compile budget (build.c): its
                                           nodes run as eager steps, fn stays NULL */
    int lean;                           /* reductions: built with only the loops the plan
                                           most likely runs (emit_reduce.c): it returns
                                           SJ_KERNEL_WANTS_FULL, before any write, for the
                                           rest (rows whose reduced dims are not contiguous,
                                           ...), about half the compile time */
    int full_building;                  /* the full variant's build is under way */
    int full_failed;                    /* it could not be built (logged): eager instead */
    struct KernelLayout *layout;        /* PyMem, or NULL until the first call: how eager
                                           lays out each node's result (step_kernel.c) */
    struct KernelFull *full;            /* PyMem, or NULL: the full variant, built on the
                                           first call that needed it (build.c) */
    void *fn;                           /* the compiled function, after the build */
    CgFn call;                          /* its libffi call description */
} Kernel;

/* A lean kernel's full variant: the same kernel with every loop. */
typedef struct KernelFull {
    void *fn;
    CgFn call;
} KernelFull;

/* What a lean kernel returns for work it was built without (1 is an element eager must
 * handle, 0 done). */
#define SJ_KERNEL_WANTS_FULL 2

/* The step kinds (steps.def): STEP_KERNEL, STEP_MATMUL, ..., STEP_EAGER. */
typedef enum {
#define X(KIND, name, lowers, node_plan, pass, run, free, stats) STEP_##KIND,
#include "steps.def"
#undef X
    STEP_COUNT
} StepKind;

typedef struct {
    StepKind kind;
    int32_t index;     /* EAGER: node index; KERNEL: kernel index; MATMUL: matmul index;
                          CONV: conv index; CAT: cat index; EMBED: embedding index;
                          VIEWS: view chain index;
                          ALIAS: node index (step_views.c) */
} Step;

typedef struct MatmulStep MatmulStep;   /* step_matmul.c */
typedef struct ConvStep ConvStep;       /* step_conv.c */
typedef struct CatStep CatStep;         /* step_cat.c */
typedef struct EmbedStep EmbedStep;     /* step_embed.c */
typedef struct AttnStep AttnStep;       /* step_attn.c */
typedef struct ViewChain ViewChain;     /* step_views.c */
typedef struct ConstStep ConstStep;     /* step_const.c */

typedef struct {
    Step *steps;
    int32_t nsteps;
    Kernel *kernels;
    int32_t nkernels;
    MatmulStep *matmuls;
    int32_t nmatmuls;
    ConvStep *convs;
    int32_t nconvs;
    struct ConvHand *conv_hands;   /* step_conv.c: convolution results handed to the next
                                      convolution in oneDNN's blocked layout (PyMem) */
    CatStep *cats;
    int32_t ncats;
    EmbedStep *embeds;
    int32_t nembeds;
    AttnStep *attns;
    int32_t nattns;
    ViewChain *views;
    int32_t nviews;
    ConstStep *consts;
    int32_t nconsts;
    int64_t kernel_calls;        /* kernels called (CompiledGraph.stats) */
    int64_t kernel_copies;       /* nodes a later kernel recomputes (plan_remat.c) */
    int64_t kernel_eager_runs;   /* kernel calls whose nodes ran eagerly instead */
    /* Values nothing reads after step i (not graph outputs): release[release_at[i] ..
     * release_at[i + 1]), dropped from the run's vals[] once step i is done, so a run holds
     * what eager would (intermediates freed at their last use, their memory reused by the
     * next allocation instead of fresh pages each call). PyMem; release_at has nsteps + 1
     * entries. */
    int32_t *release;
    int32_t *release_at;
    uint8_t *step_out;    /* PyMem, per step: 1 when it makes a graph output (whose numpy
                             array must own its memory: bufpool_lend) */
    int32_t *node_step;   /* PyMem, per graph node: the step that runs it, -1 for inputs and
                             nodes no step runs (CompiledGraph.step_nodes) */
} LowerPlan;

/* One row of steps.def: what the planner, the run loop, lower_plan_free and
 * CompiledGraph.stats call for a kind (steps.def says when; NULL where a kind has none). */
typedef struct {
    const char *name;
    int lowers;
    int32_t (*node_plan)(Graph *g, int32_t ni, LowerPlan *p);
    int (*pass)(Graph *g, LowerPlan *p, int32_t *node_step);
    int (*run)(Graph *g, LowerPlan *p, int32_t index, PyObject **vals);
    void (*free)(LowerPlan *p);
    int (*stats)(const Graph *g, const LowerPlan *p, PyObject *d);
} StepKindInfo;
/* Indexed by StepKind (steps.c, generated from steps.def). */
extern const StepKindInfo step_kinds[STEP_COUNT];
/* _C._step_kinds() -> [(enum name, name, lowers)] in StepKind order, as steps.def spells
 * them ("KERNEL", "kernel", True). New reference, or NULL with an exception. */
PyObject *steps_py_kinds(PyObject *self, PyObject *unused);

/* step_kernel.c: runs kernel step i (its nodes eagerly when an input is not what the plan
 * foresaw or the kernel hands them back). 0 or -1 with an exception. */
int step_kernel_run(Graph *g, LowerPlan *p, int32_t i, PyObject **vals);
void step_kernel_free(LowerPlan *p);
/* {"kernels", "kernel_functions", "kernels_over_budget", "kernel_calls",
 * "eager_fallbacks", "full_variants_built", "recomputed_nodes"} added to d. */
int step_kernel_stats(const Graph *g, const LowerPlan *p, PyObject *d);
/* step_kernel.c: runs eager step `ni` (the node's original call). 0 or -1. */
int step_eager_run(Graph *g, LowerPlan *p, int32_t ni, PyObject **vals);
/* {"eager_steps": how many steps run a node's original call, "eager_ops": {op name:
 * count} of them (what the backend could not lower, for profiling)} added to d. */
int step_eager_stats(const Graph *g, const LowerPlan *p, PyObject *d);

/* Calls fn(ctx, ni, v) for every value v node ni reads (arguments and list items). */
void lower_node_reads(const Graph *g, int32_t ni, void (*fn)(void *ctx, int32_t ni, int32_t v), void *ctx);
/* 1 when x and y have the same dims, symbol for symbol. */
int lower_same_dims(const TensorMeta *x, const TensorMeta *y);

/* Partition g into steps (plan.c), with each value's release step. 0, or -1 with an
 * exception. */
int lower_plan(Graph *g, LowerPlan *out);
void lower_plan_free(LowerPlan *p);

/* plan_reduce.c: when node ni is a reduction or row op a kernel computes, adds it to the
 * plan (fused after `open`, the kernel of the nodes just before it, when that kernel only
 * feeds it) and returns 0; 1 when it is not; -1 with an exception. */
int plan_reduce_node(Graph *g, int32_t ni, LowerPlan *out, Kernel *open, const int32_t *last_use, int32_t *last);
/* The layout of output j of kernel k for iteration sizes n: its sizes (returns the rank)
 * and its strides over the k->rank dims of the iteration space; -1 when these sizes must
 * run eagerly (max of an empty dim). A reduction's output 0 is the reduced value; its
 * other outputs (prologue values read later) and every other kernel's outputs are dense
 * over the whole space. */
int lower_out_layout(const Kernel *k, int j, const int64_t *n, int64_t *osize, int64_t *ost);

/* What a kernel function costs the compiler beyond its nodes, in ops (build.c's budget). */
#define LOWER_KERNEL_OPS 32
/* The compile budget (build.c): ops per translation unit and per graph, from the knobs
 * cpu_unit_ops and cpu_graph_ops or their environment variables; 0 is no limit. 0, or -1
 * with ValueError naming a malformed variable. */
int lower_budget(long *unit_ops, long *graph_ops);

/* Names each kernel of p after its C text (emit.c): kernels that compute the same thing on
 * the same kind of operands (an unrolled loop's iterations) get the same name, and one
 * function serves them all. 0, or -1 with an exception. */
int lower_name_kernels(Graph *g, LowerPlan *p);
/* Names one kernel the same way. 0, or -1 with an exception. */
int lower_name_kernel(Graph *g, Kernel *k);
/* C source (new str) of kernels which[0..n) of p (distinct names), one translation unit
 * (emit.c). NULL with an exception. */
PyObject *lower_emit(Graph *g, LowerPlan *p, const int32_t *which, int32_t n);
/* The same for kernel k alone. */
PyObject *lower_emit_kernel(Graph *g, const Kernel *k);
/* lower_emit's unit with `extra` (C text, may be NULL) after its kernels. */
PyObject *lower_emit_with(Graph *g, LowerPlan *p, const int32_t *which, int32_t n, PyObject *extra);
/* Builds p's kernels (build.c): compiled or found in the disk cache, loaded, each kernel's
 * fn and call set; *source gets the C source (new str). 0, or -1 with an exception. */
int lower_build(Graph *g, LowerPlan *p, PyObject **source);
/* Builds the full variant of lean kernel i of p (every loop) into its `full`, once. 0
 * (built, or already there), 1 (run the kernel's nodes eagerly: another thread is building
 * it, or its build failed, logged on output_code), or -1 with an exception (an interrupt).
 * Needs the GIL, which the compiler's run releases. */
int lower_build_full(Graph *g, LowerPlan *p, int32_t i);

/* How a pointwise op types its operands (lower.def says which is which). */
typedef enum { LK_SAME, LK_SELECT, LK_CMP, LK_LOGIC } LowerKind;

/* What recomputing an op costs (lower.def's COST column). */
typedef enum { LR_CHEAP, LR_COSTLY } LowerCost;

/* How eager lays out an op's torch result (lower.def's LAYOUT column). */
typedef enum { LL_TI, LL_ROW, LL_LIKE, LL_TI_NUMBASE } LowerLayout;

/* The expression columns of lower.def: the class of the type a node computes in. */
typedef enum { LC_F32 = 0, LC_F64, LC_INT, LC_BOOL, LC_COUNT } LowerClass;

/* The kernels' expressions (lower.def), by op: NULL when the op has no row. */
typedef struct {
    int nin;
    LowerKind kind;
    LowerCost cost;
    LowerLayout layout;
    const char *expr[LC_COUNT];   /* "" where the class stays eager */
    const char *pname[2];
    double pdefault[2];
} LowerRow;
/* _C._lower_rows() -> [(op name, nin, kind, (f32, f64, int, bool), (param0, param1),
 * (default0, default1))], one per row of lower.def in OpId order, the kind spelled as there
 * ("LK_SAME"). New reference, or NULL with an exception. */
PyObject *lower_py_rows(PyObject *self, PyObject *unused);

/* ------------------------------------------------------- step_matmul.c ---- */

/* Node ni as a oneDNN matmul step (with the pointwise nodes right after it folded in as
 * post-ops), appended to p: the index of the last node the step computes (the caller
 * resumes after it), -1 when ni is not such a step, -2 with an exception. */
int32_t step_matmul_plan(Graph *g, int32_t ni, LowerPlan *p);
/* Runs matmul step i of p: 0 or -1 with an exception; an operand the step cannot take
 * runs the step's nodes eagerly. */
int step_matmul_run(Graph *g, LowerPlan *p, int32_t i, PyObject **vals);
void step_matmul_free(LowerPlan *p);
/* {"matmul_steps", "matmul_calls", "matmul_fallbacks", "matmul_fused", "matmul_weight_copies",
 * "matmul_nonfinite", "matmul_rows_in_order"} added to d. */
int step_matmul_stats(const Graph *g, const LowerPlan *p, PyObject *d);
/* After the passes (node_step final): marks the matmul steps whose product may keep the row
 * order of a permuted left operand (step_matmul.c). */
void step_matmul_layouts(const Graph *g, LowerPlan *p, const int32_t *node_step);

/* ----------------------------------------------------------- pattern.c ---- */

/* When the nodes from `from` on (OP_INPUT nodes skipped) compute a written-out activation
 * of value x that oneDNN has as one eltwise op (gelu_new's tanh formula) and nothing else
 * reads x or the values between: its MmPostKind (dnnl_api.h), the nodes in nodes[0..*n)
 * in graph order (at most max) and the last in *last. 0 when there is none. */
int lower_match_activation(Graph *g, int32_t x, int32_t from, int32_t *nodes, int max, int *n, int32_t *last);
/* References to value v in the graph (arguments, list items, outputs). */
int lower_value_uses(const Graph *g, int32_t v);

/* ------------------------------------------------------- step_common.c ---- */

struct BoundArg;
/* The value id behind a bound tensor argument (its meta points into g->values), or -1. */
int32_t lower_value_of(const Graph *g, const struct BoundArg *ba);
/* A constant argument as a step takes it: a Python int (not a bool) in int64 range into
 * *out, 0; else 1 (no exception). */
int lower_const_int(PyObject *v, int64_t *out);
/* A Python float or int (a bool included) as a double into *out, 0; else 1 (no exception). */
int lower_const_number(PyObject *v, double *out);
/* Appends item x to the step array *arr of *n and a step of kind for it. 0, or -1
 * (MemoryError). */
int lower_push_step(LowerPlan *p, StepKind kind, void **arr, int32_t *n, size_t item, const void *x);
/* Runs node first and nodes more[0..n) the original way. 0 or -1 with an exception. */
int lower_exec_nodes(Graph *g, int32_t first, const int32_t *more, int n, PyObject **vals);
/* The end of a step that makes one value, vals[out]: rc 0 stores res there (stolen); rc 1
 * (an operand the step does not take) drops res and runs node the original way, counted
 * in *fallbacks; rc -1 drops res (an exception is set). 0 or -1 with an exception. */
int lower_step_done(Graph *g, int32_t node, int32_t out, int rc, PyObject *res, long long *fallbacks, PyObject **vals);
/* d[names[i]] = vals[i] for i < n. 0 or -1 with an exception. */
int lower_put_counts(PyObject *d, int n, const char *const *names, const long long *vals);
/* Copies nbytes from src to dst (not overlapping): memcpy for long runs, 8-byte moves for
 * short ones, where a memcpy call per run would cost more than the copy (many short rows:
 * a stack along an inner dim). */
static inline void lower_copy_bytes(char *dst, const char *src, size_t nbytes)
{
    if (nbytes >= 256) {
        memcpy(dst, src, nbytes);
        return;
    }
    size_t k = 0;
    for (; k + 8 <= nbytes; k += 8) {   /* fixed-size memcpy: one move each */
        uint64_t v;
        memcpy(&v, src + k, 8);
        memcpy(dst + k, &v, 8);
    }
    for (; k < nbytes; k++)
        dst[k] = src[k];
}

/* Copies the elements of src (sizes n, strides ss, in elements of `item` bytes, r >= 1) to
 * dst (strides ds): size-1 dims dropped and dims both sides walk contiguously folded
 * together, then row by row, the last dim innermost (a memcpy for a long contiguous row,
 * typed moves otherwise). */
void lower_copy_strided(char *dst, const int64_t *ds, const char *src, const int64_t *ss, const int64_t *n, int r,
                        size_t item);

/* Which weight tensor a copy kept across calls was made from (step_conv.c's reordered
 * weights, step_matmul.c's row-major weights): valid while the tensor is the same object
 * (a weak reference), at the same address, with the same _version (torch bumps it on
 * every in-place write; a write through `.data` goes unseen, as in torch's own frozen-
 * weight caches). */
typedef struct {
    PyObject *wref;      /* strong: a weak reference to the weight; NULL: nothing kept */
    const void *ptr;     /* its data pointer then */
    long long version;   /* its _version then */
} KeptId;
/* 0 and *version: w's _version; 1 when it has none (a copy of it cannot be kept).
 * Never raises (a failed read is cleared). */
int lower_kept_version(PyObject *w, long long *version);
/* 1 when id was made from w at ptr with this version. */
int lower_kept_matches(const KeptId *id, PyObject *w, const void *ptr, long long version);
/* Records w at ptr with version in id: 0, or 1 when w cannot be weakly referenced (the
 * error cleared; id left unchanged). */
int lower_kept_set(KeptId *id, PyObject *w, const void *ptr, long long version);
void lower_kept_clear(KeptId *id);

/* --------------------------------------------------------- step_conv.c ---- */

/* Node ni as a oneDNN convolution, pooling or batch-norm step (a convolution with the
 * batch norm, relu and residual add right after it folded in), appended to p: the index
 * of the last node the step computes, -1 when ni is not such a step, -2 with an
 * exception. */
int32_t step_conv_plan(Graph *g, int32_t ni, LowerPlan *p);
/* Runs conv step i of p: 0 or -1 with an exception; what it cannot take runs eagerly. */
int step_conv_run(Graph *g, LowerPlan *p, int32_t i, PyObject **vals);
void step_conv_free(LowerPlan *p);
/* {"conv_steps", "conv_calls", "conv_fallbacks", "conv_fused"} added to d. */
int step_conv_stats(const Graph *g, const LowerPlan *p, PyObject *d);

/* A concatenation step for node ni (step_cat.c): returns ni when planned, -1 when the node
 * is not one, -2 with an exception. */
int32_t step_cat_plan(Graph *g, int32_t ni, LowerPlan *p);
/* Runs cat step i of p: 0 or -1 with an exception; what it cannot take runs eagerly. */
int step_cat_run(Graph *g, LowerPlan *p, int32_t i, PyObject **vals);
void step_cat_free(LowerPlan *p);
/* {"cat_steps", "cat_calls", "cat_fallbacks"} added to d. */
int step_cat_stats(const Graph *g, const LowerPlan *p, PyObject *d);

/* An embedding lookup step for node ni (step_embed.c): returns ni when planned, -1 when
 * the node is not one, -2 with an exception. */
int32_t step_embed_plan(Graph *g, int32_t ni, LowerPlan *p);
/* Runs embedding step i of p: 0 or -1 with an exception; an index out of range or an
 * operand it cannot take runs the node eagerly. */
int step_embed_run(Graph *g, LowerPlan *p, int32_t i, PyObject **vals);
void step_embed_free(LowerPlan *p);
/* {"embed_steps", "embed_calls", "embed_fallbacks"} added to d. */
int step_embed_stats(const Graph *g, const LowerPlan *p, PyObject *d);

/* An attention step for scaled_dot_product_attention node ni (step_attn.c): returns ni
 * when planned, -1 when the node is not one, -2 with an exception. */
int32_t step_attn_plan(Graph *g, int32_t ni, LowerPlan *p);
/* Runs attention step i of p: 0 or -1 with an exception; what it cannot take runs the
 * node eagerly. */
int step_attn_run(Graph *g, LowerPlan *p, int32_t i, PyObject **vals);
void step_attn_free(LowerPlan *p);
/* {"attention_steps", "attention_calls", "attention_fallbacks", "attention_nonfinite",
 * "attention_small", "attention_staged"} added to d. */
int step_attn_stats(const Graph *g, const LowerPlan *p, PyObject *d);
/* The C source of p's attention row kernels, each distinct one once (new str, "" when p
 * has none), and after the build, each step's function looked up in lib (0, or -1 with
 * an exception). */
PyObject *step_attn_source(const LowerPlan *p);
int step_attn_bind(LowerPlan *p, CgLib *lib);

/* View chains (step_views.c): rewrites p's eager steps so that each chain of view ops whose
 * intermediates nothing else reads is one STEP_VIEWS step where its first node ran;
 * node_step follows. 0, or -1 with MemoryError. */
int step_views_plan(Graph *g, LowerPlan *p, int32_t *node_step);
/* Runs view chain i of p: 0 or -1 with an exception. */
int step_views_run(Graph *g, LowerPlan *p, int32_t i, PyObject **vals);
void step_views_free(LowerPlan *p);
/* {"view_chains", "view_chain_nodes", "view_chain_calls", "view_chain_eager_runs"} added to d. */
int step_views_stats(const Graph *g, const LowerPlan *p, PyObject *d);
/* 1 when view chain i reads value v and gives the same result (up to aliasing) however v
 * is laid out (step_matmul_layouts). */
int step_views_reads_any_layout(const Graph *g, const LowerPlan *p, int32_t i, int32_t v);
/* Turns eager steps of identity nodes (dropout outside training) into STEP_ALIAS (step
 * numbers unchanged: node_step is not touched). 0. */
int step_alias_plan(Graph *g, LowerPlan *p, int32_t *node_step);
/* Runs STEP_ALIAS node ni: its result is its input object. 0 or -1 with an exception. */
int step_alias_run(Graph *g, LowerPlan *p, int32_t ni, PyObject **vals);

/* Values computed once (step_const.c): fold[ni] (nnodes entries, set here) = 1 for each
 * node that reads no graph input and folds; when there are any, one STEP_CONST step that
 * runs them is appended to p (the caller makes it the first) and node_step set for them.
 * 0, or -1 with MemoryError. */
int step_const_plan(Graph *g, LowerPlan *p, uint8_t *fold, int32_t *node_step);
/* Runs const step i: the nodes on the first run, the kept values after. 0 or -1. */
int step_const_run(Graph *g, LowerPlan *p, int32_t i, PyObject **vals);
void step_const_free(LowerPlan *p);
/* {"const_nodes", "const_values", "const_calls"} added to d. */
int step_const_stats(const Graph *g, const LowerPlan *p, PyObject *d);

/* An input of a step, read for a kernel or a primitive (runtime.c). */
typedef struct {
    int64_t size[SJ_MAX_RANK], stride[SJ_MAX_RANK];   /* elements */
    int ndim;
    char *data;
    Py_buffer view;     /* numpy: held while the step runs */
    int has_view;
    /* the strides eager's tensor has, where they differ from those read through (a view
     * composed with a lazy copy's source reads that source, where eager reads the copy):
     * what a result's layout follows (lower_layout_strides). NULL: `stride`. Borrowed
     * from the value read, live while it is. */
    const int64_t *lay;
} Operand;

/* The strides eager sees for o (its layout, which results follow). */
static inline const int64_t *lower_layout_strides(const Operand *o)
{
    return o->lay ? o->lay : o->stride;
}

/* Non-finite operands of a oneDNN step whose primitive carries an eltwise post-op
 * (step_common.c). oneDNN 2.6's jit eltwise kernels reduce their input's range with
 * min/max, which drop NaN (a fused relu turns NaN into 0; gelu_erf gives numbers where
 * eager gives NaN for an inf product on AVX-512), and a NaN in the result can only come
 * from a NaN or inf operand: such a call runs its nodes eagerly instead. 1 when every element of o is finite (neither inf
 * nor NaN); a scan of the exponent bits, unit-stride runs vectorised. */
int lower_finite(const Operand *o);
/* The same for n contiguous floats. */
int lower_finite_n(const float *p, int64_t n);
/* lower_finite of a weight, remembered for the weight's KeptId (a scan per weight
 * version, not per call; a weight without _version is scanned each call). */
typedef struct {
    KeptId id;
    int finite;
} KeptFinite;
int lower_weight_finite(KeptFinite *f, PyObject *w, const Operand *o);

/* 0 and op filled; 1 when obj is not a float32 array of lib (the step runs eagerly); -1
 * with an exception. Release op->view when op->has_view. */
int lower_read_input(PyObject *obj, Lib lib, Operand *op);
/* The same for an array of dtype dt (float32, float64, int64, int32 or bool). */
int lower_read_input_dt(PyObject *obj, Lib lib, DType dt, Operand *op);
/* A new contiguous float32 tensor or array of lib with sizes n[0..r). New reference. */
PyObject *lower_new_output(Lib lib, const int64_t *n, int r);
/* The same of dtype dt (from the run's buffer pool when it has one). New reference. */
PyObject *lower_new_output_dt(Lib lib, DType dt, const int64_t *n, int r);
/* lib's dtype object for dt, made once per process (borrowed: kept for the process), or
 * NULL with an exception. */
PyObject *lower_dtype_object(Lib lib, DType dt);
/* lib's empty(n, dtype=dt), never from the pool. New reference. */
PyObject *lower_empty(Lib lib, DType dt, const int64_t *n, int r);

/* ----------------------------------------------------------- lazyview.c ---- */

/* A view chain's result held as its input tensor and the recorded layout (lazyview.c):
 * made by step_views.c when only kernel, matmul and attention steps read it. */
int lazyview_init_type(void);
int lazyview_check(PyObject *o);
/* New reference, or NULL with an exception: base and the record (sizes and strides
 * tuples, the element offset from base's data). */
PyObject *lazyview_new(PyObject *base, PyObject *sizes, PyObject *strides, long long delta);
/* A lazy view of base that eager sees as view (sizes, lay_strides, lay_delta) of lazy copy
 * `via` (its record composed with the copy's source, step_views.c): read through base,
 * laid out by lay_strides, made a tensor as that view of the copy. New reference, or NULL
 * with an exception. */
PyObject *lazyview_new_through(PyObject *base, PyObject *sizes, PyObject *strides, long long delta, PyObject *via,
                               PyObject *lay_strides, long long lay_delta);
/* A lazy copy: a contiguous tensor of sizes res_size holding the elements of that view
 * in order, not made. New reference, or NULL with an exception. */
PyObject *lazyview_new_copy(PyObject *base, PyObject *sizes, PyObject *strides, long long delta,
                            const int64_t *res_size, int res_ndim);
/* 1 and the parts of lazy copy o (borrowed: live as long as o), or 0 when o is a plain
 * lazy view. */
int lazyview_copy_source(PyObject *o, PyObject **base, int *ndim, const int64_t **size, const int64_t **stride,
                         long long *delta, int *res_ndim, const int64_t **res_size);
/* The view as an Operand of dtype dt (lower_read_input_dt's contract); a lazy copy
 * refuses (1). */
int lazyview_read(PyObject *o, DType dt, Operand *op);
/* The view as a tensor (lower_view_of its input and record; a lazy copy's copy made):
 * new reference, or NULL. */
PyObject *lazyview_tensor(PyObject *o);
/* step_views.c: view t's elements in order as a new contiguous tensor of sizes res_size
 * (t.contiguous() when they are t's sizes, else t.reshape(res_size) of a layout no view
 * has). New reference, or NULL with an exception. */
PyObject *lower_copy_view(PyObject *t, const int64_t *res_size, int res_ndim);
/* step_views.c: torch.as_strided(base, sizes, strides, base's storage offset + delta), a
 * view chain's recorded result. New reference, or NULL with an exception. */
PyObject *lower_view_of(PyObject *base, PyObject *sizes, PyObject *strides, long long delta);
/* graph_exec_node for the backend: first makes tensors of the lazy values node ni reads
 * (in vals[], replacing them). 0, or -1 with an exception. */
int lower_exec_node(Graph *g, int32_t ni, PyObject **vals);

/* ------------------------------------------------------------ bufpool.c ---- */

#define SJ_POOL_SIZE 32
#define SJ_POOL_OURS 64
#define SJ_POOL_CARRY 4

typedef struct {
    PyObject *obj;      /* strong */
    Lib lib;
    DType dt;
    int ndim;
    int64_t size[SJ_MAX_RANK];
    int64_t bytes;      /* its memory: torch, its storage's bytes (a tensor resized smaller
                           keeps the larger storage); numpy, its own bytes */
    int64_t run;        /* the run that offered it */
} PoolEntry;

/* Dropped intermediates kept for reuse by a compiled graph (bufpool.c says when). */
typedef struct {
    PoolEntry e[SJ_POOL_SIZE];   /* oldest first */
    int n;
    /* the objects lower_new_output_dt handed out during the current run (identity only,
     * borrowed): only those are offered back, so the pool holds what the graph allocates,
     * not every eager result; emptied when a run ends */
    PyObject *ours[SJ_POOL_OURS];
    int nours;
    /* the storages of large torch outputs returned by earlier calls (strong), reused once
     * the caller has let go of them (bufpool_keep_outputs) */
    PyObject *carry[SJ_POOL_CARRY];
    int64_t carry_bytes[SJ_POOL_CARRY];
    int ncarry;
    int64_t run;                      /* runs started (bufpool_enter) */
    int64_t kept, reused, recycled;   /* counts over the graph's life (stats) */
    int64_t resized;                  /* of reused: taken for smaller sizes (resize_) */
} BufPool;

/* Makes p the pool of the run on this thread; returns the previous one for bufpool_leave,
 * which also ends p's run (forgets its objects). */
BufPool *bufpool_enter(BufPool *p);
void bufpool_leave(BufPool *p, BufPool *prev);
/* Notes that obj (an output just allocated for the current run) is the run's own. */
void bufpool_note(BufPool *p, PyObject *obj);
/* The pool of the run on this thread, or NULL. */
BufPool *bufpool_current(void);
/* Whether numpy outputs allocated next on this thread may be arrays over a larger kept
 * array (bufpool_take): not for a step that makes a graph output. */
void bufpool_lend(int ok);
/* Steals obj (value of lib and dtype dt, just dropped by the run): kept in p when the run
 * allocated it and nothing else reaches its memory, else released. Never raises. */
void bufpool_offer(BufPool *p, PyObject *obj, Lib lib, DType dt);
/* A kept object of lib, dt and sizes n[0..r) taken out of p (new reference), or NULL:
 * one of exactly these sizes, else (torch) the smallest kept tensor of dt with at most
 * twice the bytes, resized in place; for a large torch output, a new tensor over a
 * returned output's storage nothing else holds any more. Never raises. */
PyObject *bufpool_take(BufPool *p, Lib lib, DType dt, const int64_t *n, int r);
/* Keeps the storages of the large torch tensors in outs (the run's result tuple, borrowed)
 * that the run allocated, for reuse once the caller drops them. Never raises. */
void bufpool_keep_outputs(BufPool *p, PyObject *outs);
void bufpool_clear(BufPool *p);

/* The compiled-graph type (runtime.c) and the backend entry: _C._cg_compile_graph(graph). */
extern PyTypeObject SjCompiledGraph_Type;
int lower_init_module(PyObject *m);

#endif
