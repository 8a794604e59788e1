/* Internal interfaces between the planner and emitter files of the generated-C backend:
 * plan.c / plan_reduce.c (which nodes a kernel computes) and emit.c / emit_reduce.c (its
 * C source). */
#ifndef SJ_LOWER_INT_H
#define SJ_LOWER_INT_H

#include "lower.h"
#include "dnnl_api.h"
#include "../shapes/rules.h"

/* ---------------------------------------------------------------- plan.c ---- */

/* A node's bound slots (graph/ir.h) as the shape rules' BoundArgs, for the helpers of
 * shapes/rules.h: bound, and in src[i] the slot of parameter i when it holds a value or a
 * constant (NULL when absent, a fixed parameter, or the list a *varargs parameter
 * gathered). items is the storage those lists point into. */
typedef struct {
    BoundArgs bound;
    BoundArg items[SJ_MAX_PARAMS];
    const Arg *src[SJ_MAX_PARAMS];
} NodeArgs;

/* Node ni's bound slots into *na. 0, or 1 (no exception) when the node has none (row -1),
 * writes into numpy's out= array, or passes a list or tuple (a *varargs parameter's
 * gathered arguments excepted). */
int lower_bind_node(Graph *g, int32_t ni, NodeArgs *na);

/* lower_bind_node, but a list or tuple slot (of values and constants) is bound as a BA_LIST
 * of its items (in na->items), for the readers that take one apart. 0 bound, 1 not. */
int lower_bind_node_lists(Graph *g, int32_t ni, NodeArgs *na);

/* 0 when node ni is a float32 pointwise op of at most two operands a kernel computes
 * (lower.def): its operand args in *a, *b (NULL when absent) and parameter values in p[2];
 * 1 when not. (oneDNN post-ops ask this; kernels use lower_node_typed.) */
int lower_node_args(Graph *g, int32_t ni, const Arg **a, const Arg **b, double p[2]);

/* ---------------------------------------------------------- lower_types.c ---- */

/* 1 when generated kernels read and write dtype d: float32, float64, int64, int32, bool. */
int lower_dtype_ok(DType d);
/* The C type of an element of dtype d ("float", ..., "uint8_t" for bool); NULL if none. */
const char *lower_ctype(DType d);
/* The lower.def column of dtype d, or -1. */
int lower_class(DType d);

/* A pointwise node as a kernel computes it. */
typedef struct {
    const LowerRow *row;
    const Arg *x[3];     /* operands a, b, c (NULL when absent); c is converted to bool */
    double p[2];         /* parameter values (integers in range when ct is an int) */
    PyObject *pv[2];     /* borrowed (the graph's constants): the parameter as the call gave it,
                            written into the kernel exactly; NULL for the row's default */
    DType ct;            /* the type a and b are converted to and the expression computes in */
    DType out;           /* the node's result (ct, or bool for LK_CMP / LK_LOGIC) */
    const char *expr;    /* row->expr of ct's class */
} NodeLower;

/* 0 and *nl filled when node ni is a pointwise op a kernel computes for its dtypes (every
 * tensor operand of library lib, a kernel dtype; its result needs no grad, its operands may: a
 * parameter read under no_grad); 1 when it runs eagerly. */
int lower_node_typed(Graph *g, int32_t ni, NodeLower *nl);

/* Appends item x (of `item` bytes) to the PyMem array *arr of *n. 0, or -1 (MemoryError). */
int plan_push(void **arr, int32_t *n, size_t item, const void *x);
/* Adds value v as an input of k (once). 0, or 1 when k has no room left. */
int plan_add_input(Kernel *k, int32_t v);
/* 1 when node nd writes into memory it did not allocate: in place, setitem-like, out=
 * (a graph input's node writes nothing). */
int lower_node_writes(const Node *nd);
/* 1 when a node of k makes value v. */
int plan_kernel_makes(const Graph *g, const Kernel *k, int32_t v);
/* 1 when node ni is one of k's nodes. */
int plan_kernel_has(const Kernel *k, int32_t ni);
/* How many times node ni reads value v (graph_node_reads). */
int plan_node_reads_value(const Graph *g, int32_t ni, int32_t v);

/* ------------------------------------------------------------ plan_rot.c ---- */

/* A rotation of a float tensor x whose last dim 2h is static, read by a kernel at rotated
 * offsets of x (plan_rot.c): rotate_half, cat((-x[..., h:], x[..., :h]), dim=-1), or the
 * pairs' swap of GPT-J's rotate_every_two, stack((-x[..., 1::2], x[..., ::2]),
 * dim=-1).flatten(-2). */
typedef struct {
    int32_t x;          /* the value rotated */
    int64_t half;       /* h */
    int pairs;          /* 1: the pairs' swap (element j reads j + 1 negated for even j, else j - 1) */
    int32_t cat;        /* the node making the rotation: the cat, or the flatten */
    int nparts;         /* 3 (the two slices and the negation) or 4 (and the stack) */
    int32_t parts[4];   /* in graph order */
} RotRead;

/* 1 when node ni's op can head a rotation (a cat or a flatten). */
int plan_rot_head_op(const Graph *g, int32_t ni);
/* 0 and *rr when node ni heads such a rotation (of torch float tensors); 1 when not. */
int plan_rot_match(const Graph *g, int32_t ni, RotRead *rr);
/* rot_of[ni] (nnodes entries) = the cat node of the rotate_half node ni is part of (the cat
 * itself included) when the pattern's slices and negation are read by it alone, else -1;
 * last_use[x] is moved to the cat. 0, or -1 with MemoryError. */
int plan_rot_mark(Graph *g, int32_t *rot_of, int32_t *last_use);
/* In kernel k (its rot flag set): 2 when node ni is a rotate_half cat the kernel reads
 * through, 1 when ni is one of such a cat's slices or its negation (the kernel computes
 * nothing for them), else 0. */
int plan_rot_role(const Graph *g, const Kernel *k, int32_t ni);

/* ---------------------------------------------------------- plan_remat.c ---- */

/* Pointwise values recomputed by the later kernels reading them instead of stored
 * (plan_remat.c): chains join those kernels' node lists and recomputed[v] (nvalues
 * entries, zeroed by the caller) marks the values no kernel stores any longer; last_use as
 * lower_plan's. 0, or -1 with MemoryError. */
int plan_remat(Graph *g, LowerPlan *p, const int32_t *last_use, uint8_t *recomputed);

/* ------------------------------------------------------------ plan_rms.c ---- */

/* Mean node ni (red, rank as read_node gave them) as the heart of an RMS norm: 0 and the
 * KF_RMS_NORM kernel planned (*last its last node; the square leaves `open`), 1 when the
 * nodes around it are not one, -1 with MemoryError. */
int plan_rms_node(Graph *g, int32_t ni, LowerPlan *out, Kernel *open, const int32_t *last_use, const ReduceInfo *red,
                  int rank, int32_t *last);

/* -------------------------------------------------------- plan_sibling.c ---- */

/* Sibling float sums and means over the same space merged into one kernel of two results
 * (plan_sibling.c); node_step as lower_plan's (kernels' nodes not yet filled in). Runs
 * after plan_remat, before the outputs are chosen. 0, or -1 with MemoryError. */
int plan_siblings(Graph *g, LowerPlan *p, const int32_t *node_step);

/* ---------------------------------------------------------------- emit.c ---- */

typedef struct {
    char *s;            /* PyMem */
    size_t n, cap;
    int failed;         /* out of memory or a node that no longer lowers */
} Buf;

void emit_put(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* name = prefix + a hash of b's text (a generated function named after its text, so
 * identical ones share one); b's memory is released. 0, or -1 with RuntimeError when b
 * failed. */
int emit_name_text(Buf *b, const char *prefix, char *name, size_t len);

/* emit_math.c: the kernels' own vectorisable float32 exp/tanh/erf (C source text). */
extern const char emit_math_prelude[];

/* The statements computing nodes [0, upto) of k at one element: each input loaded once
 * (`const float xI = inI[off]`, typed by its meta), each node into `tV` (V its value id).
 * off_fmt is the element offset of operand j (outputs first): a format given j for each
 * %d (at most two). */
void emit_compute(Buf *b, Graph *g, const Kernel *k, const char *off_fmt, int32_t upto);

/* The C name of value v inside k's loop body: "xI" for input I, "tJ" for the value of the
 * kernel's node J. */
void emit_value(Buf *b, const Graph *g, const Kernel *k, int32_t v);

/* The epilogue of row kernel k (its last red.nepi nodes) applied to the float variable
 * var holding the row's result at one element. */
void emit_epilogue(Buf *b, Graph *g, const Kernel *k, const char *var);

/* The opening of k's function: its signature, `int sj_bad` (returned: 1 hands the nodes
 * back to eager), `sj_np`, and typed pointers outJ / inI to the operands' data. */
void emit_kernel_head(Buf *b, Graph *g, const Kernel *k);
/* A kernel's loops live in `static void <name>_part(n, p, st, dense, int *sj_bad_out)`
 * (emit_kernel_part_head opens it, with the kernel's locals; its worksharing loops are
 * orphaned `omp for`s) and the exported kernel calls it (emit_kernel_part_call): inside an
 * `omp parallel` region when `work` (a C expression) reaches 32768 and there is more than
 * one thread, else directly. A parallel region costs ~0.45 us even with one thread or a
 * false `if` clause (libgomp starts a team of one and wakes its barrier by a futex
 * syscall), which is most of a small kernel's call. */
void emit_kernel_part_head(Buf *b, Graph *g, const Kernel *k);
void emit_kernel_part_call(Buf *b, const Kernel *k, const char *work);
void emit_kernel_locals(Buf *b, Graph *g, const Kernel *k);

/* ------------------------------------------------------------ emit_attn.c ---- */

/* The attention step's softmax row kernel `name` (emit_attn.c says its contract):
 * mask_kind 0 none, 1 float32 added, 2 bool; causal: keys past the query row masked. */
void emit_attn_softmax(Buf *b, const char *name, int mask_kind, int causal);

/* ---------------------------------------------------------- step_matmul.c ---- */

/* The stride order of t (rank r) for its layout tag: dims from outermost to innermost.
 * Size-1 dims take the stride they would have in place (their own is meaningless), or
 * when that order has no oneDNN tag, size-1 batch dims go outermost. 0 and perm filled
 * when the innermost dim is one of the last two with unit stride and no dims overlap; 1
 * otherwise (the operand is copied). */
int lower_mm_layout(MmTensor *t, int r, uint8_t *perm);

/* ---------------------------------------------------------- emit_reduce.c ---- */

/* The function of a reduction or row kernel (k->flavour != KF_POINTWISE). */
void emit_reduce_kernel(Buf *b, Graph *g, const Kernel *k);

/* ------------------------------------------------------------- layout.c ---- */

/* 1 when torch counts a 4-D layout (sizes, strides) as channels-last (its
 * suggest_memory_format): a convolution, pooling or batch norm then gives a channels-last
 * result. */
int lower_strides_like_cl(const int64_t *size, const int64_t *stride);
/* 1 when torch's suggest_memory_format of a rank-r layout is channels-last: the 4-D rule
 * above, or channels_last_3d for 5-D. */
int lower_suggests_cl(const int64_t *size, const int64_t *stride, int r);
/* 1 when (size, stride) of rank r is dense in the dim order perm (outermost first; NULL:
 * row-major), size-1 dims ignored. */
int lower_dense_in(const int64_t *size, const int64_t *stride, const int *perm, int r);
/* 1 when (size, stride) of rank r is dense in some dim order, without overlap (torch's
 * is_non_overlapping_and_dense; size-1 dims do not count). */
int lower_dense_any(const int64_t *size, const int64_t *stride, int r);
/* The strides empty_like(preserve_format) gives a tensor of (size, stride), rank r: its
 * own when it is dense in some order, else dense ones in its dims' order (torch's
 * infer_dense_strides). */
void lower_preserved_strides(const int64_t *size, const int64_t *stride, int r, int64_t *out);
/* The dense strides of sizes in dim order perm (NULL: row-major), as torch makes them
 * (a size-1 dim takes the stride of the dims inside it). */
void lower_strides_in(const int64_t *size, const int *perm, int r, int64_t *stride);
/* NHWC as a dim order of an NCHW tensor: {0, 2, 3, 1}. Returns 4. */
int lower_nhwc_perm(int *perm);
/* TensorIterator's order of a pointwise result over the space n[0..r) read by nops
 * operands with element strides st[i] (0 on broadcast dims): perm outermost first. 1 when
 * it is not row-major. */
int lower_ti_perm(const int64_t *n, int r, const int64_t *const *st, int nops, int *perm);
/* numpy's order 'K' for a ufunc or np.where result over the space n[0..r) read by nops
 * operands with element strides st[i] (0 on broadcast dims): its iterator's axis order,
 * perm outermost first. 1 when it is not row-major. */
int lower_np_iter_perm(const int64_t *n, int r, const int64_t *const *st, int nops, int *perm);
/* The strides numpy gives a copy or astype of (size, stride) with order 'K' (its
 * empty_like): C or F order when the array is C- or F-contiguous, else dense in the order
 * of |stride|, largest first. */
void lower_np_like_strides(const int64_t *size, const int64_t *stride, int r, int64_t *out);
/* A new tensor of sizes n and strides st (a torch empty_strided, a numpy array owning its
 * memory; row-major ones come from the buffer pool as lower_new_output_dt's). New
 * reference. */
PyObject *lower_new_output_strided(Lib lib, DType dt, const int64_t *n, const int64_t *st, int r);

#endif
