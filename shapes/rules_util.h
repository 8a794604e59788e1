/* Helpers shared by the shape rules (implemented in shapes/rules.c). None of them sets a
 * Python exception: failures are reported through ShapeErr, and any Python error raised
 * while reading a constant is cleared. */
#ifndef SJ_RULES_UTIL_H
#define SJ_RULES_UTIL_H

#include <string.h>

#include "rules.h"

/* An empty output of the given library and dtype. */
void sj_meta(TensorMeta *out, Lib lib, DType dt);

/* The tensor argument `name`; refuses when absent or not a tensor. Borrowed. */
const TensorMeta *sj_tensor(const BoundArgs *b, const char *name, ShapeErr *err);

/* Python int constant (bool refused; numpy integer scalars accepted). 0 = ok, -1 = not an
 * int (err set, naming what). A symbolic int is specialised to its hint (sj_pin): rules
 * that handle symbolic ints read them with sj_int_list_sym or BoundArg.sym instead. */
int sj_int(const BoundArg *a, const char *what, int64_t *out, ShapeErr *err);
/* sj_int for rules that handle a symbolic int: *out is its hint and *sym its symbol (NULL
 * for a constant, or without a shape environment); nothing is specialised. */
int sj_int_sym(const BoundArg *a, const char *what, int64_t *out, struct SymNode **sym, ShapeErr *err);
/* Optional int/bool/float parameters: absent (or None) gives dflt. */
int sj_get_int(const BoundArgs *b, const char *name, int64_t dflt, int64_t *out, ShapeErr *err);
int sj_get_bool(const BoundArgs *b, const char *name, int dflt, int *out, ShapeErr *err);
int sj_get_float(const BoundArgs *b, const char *name, double dflt, double *out, ShapeErr *err);

/* A list of ints from an int, a tuple/list/torch.Size of ints, or a *varargs BA_LIST (a
 * varargs list holding one sequence is unwrapped: x.view((2, 3)) == x.view(2, 3)).
 * *n receives the count (at most max). An absent argument (a NULL) is refused. */
int sj_int_list(const BoundArg *a, const char *what, int64_t *out, int *n, int max, ShapeErr *err);

/* An int or a tuple of n ints (one int repeats) from the argument `name` (absent: dflt in
 * every entry): kernel sizes, strides, paddings. Constants only: a symbolic int is
 * specialised (sj_int_list pins it). */
int sj_int_tuple(const BoundArgs *b, const char *name, int64_t dflt, int n, int64_t *v, ShapeErr *err);

/* Wraps a possibly negative dim into [0, ndim). torch lets a 0-d tensor use dims -1 and 0. */
int sj_dim(Lib lib, int64_t d, int ndim, int *out, ShapeErr *err);
/* The int argument `name` (absent: dflt) as a dim of a rank-ndim tensor, wrapped (sj_dim). */
int sj_get_dim(const BoundArgs *b, const char *name, int64_t dflt, Lib lib, int ndim, int *out, ShapeErr *err);
/* The tensor `input` of an op along one of its dims: *d is the argument `name` (absent:
 * dflt) wrapped into the input's dims. When msg is given a 0-d input is refused with it
 * (before the dim is read). Borrowed, or NULL with err set. */
const TensorMeta *sj_input_dim(const BoundArgs *b, Lib lib, const char *name, int64_t dflt, const char *msg, int *d,
                               ShapeErr *err);
/* Two tensor arguments, both required (sj_tensor): 0, or -1 with err set. Borrowed. */
int sj_tensor2(const BoundArgs *b, const char *n1, const TensorMeta **t1, const char *n2, const TensorMeta **t2,
               ShapeErr *err);

/* Broadcasts the shapes of n metas into out->ndim/out->size (other fields untouched).
 * NULL entries are skipped. */
int sj_broadcast(const TensorMeta *const *ins, int n, TensorMeta *out, ShapeErr *err);

/* The dtype argument `name` (torch.dtype, numpy dtype-like, or Python type).
 * *given = 0 when absent. */
int sj_get_dtype(const BoundArgs *b, const char *name, Lib lib, DType *out, int *given, ShapeErr *err);
/* sj_get_dtype for a default: *dt becomes the dtype argument `name` when given and stays
 * when it is absent. */
int sj_dtype_or(const BoundArgs *b, const char *name, Lib lib, DType *dt, ShapeErr *err);

/* A device argument's value (borrowed: a torch.device or a string): 0 when it is the cpu
 * ("cpu", "cpu:0"), else -1 with err set. */
int sj_cpu_device(PyObject *v, ShapeErr *err);

/* numpy ufuncs and reductions return numpy scalars instead of 0-d arrays. */
void sj_np_scalarize(Lib lib, TensorMeta *out);

/* The metadata of a numpy array-like argument: a graph array, a numpy scalar or array
 * constant, or a Python number or flat list/tuple of Python numbers (int64, float64,
 * complex128 or bool, as numpy.asarray makes them). 0, or -1 with err set.
 * shapes/rules_np_more.c. */
int sj_np_array_like(const BoundArg *a, const char *what, TensorMeta *out, ShapeErr *err);

/* Product of sizes. */
int64_t sj_numel(const TensorMeta *m);

/* 1 when any tensor argument (lists included) requires grad. */
int sj_requires_grad(const BoundArgs *b);

/* ---- symbolic sizes (valid while sj_symctx is set: see rules.h) ---- */
struct SymNode;
/* A sym_* call returned NULL: its Python exception becomes err (and is cleared). -1. */
int sj_sym_error(ShapeErr *err);
/* Dim i of m as a node: its symbol expression, or a constant. NULL with err set. */
struct SymNode *sj_dimsym(const TensorMeta *m, int i, ShapeErr *err);
/* Set out's dim i to e (NULL: an earlier sym_* call failed; its exception becomes err):
 * a constant is stored static, an expression with its hint. */
int sj_set_dim(TensorMeta *out, int i, struct SymNode *e, ShapeErr *err);
/* Truth of a size relation: decided by the ranges, or by the hints, and then the relation
 * (or its negation) is guarded. */
int sj_decide(struct SymNode *rel, int *truth, ShapeErr *err);
/* The relation must hold (guarded); an error when it does not at the hints. */
int sj_require(struct SymNode *rel, ShapeErr *err);

/* Every symbolic dim of m specialised to its hint (guarded) and made static: for rules that
 * read those sizes as numbers. */
int sj_pin_dims(TensorMeta *m, ShapeErr *err);

/* Specialise e to its hint *value, guarded (e == hint): what capture does to the arguments
 * of a rule without symbolic support, for the cases a symbolic rule does not handle. */
int sj_pin(struct SymNode *e, int64_t *value, ShapeErr *err);

/* 1 when dim i of a equals dim j of b (equal hints; two different expressions are then
 * guarded equal), 0 when not, -1 on error. */
int sj_dims_equal(const TensorMeta *a, int i, const TensorMeta *b, int j, ShapeErr *err);
/* 1 when dim i of m equals v, 0 when not, -1 on error. A symbolic dim is decided
 * (guarded unless its range decides: a size symbol is never 0 or 1). */
int sj_dim_equals(const TensorMeta *m, int i, int64_t v, ShapeErr *err);
/* Whether the index v (its symbol isym, or NULL) is out of range for dim d of x: 0 in
 * [-size, size), 1 outside, -1 on error. With a symbolic size or index it decides, as
 * torch, i >= -size, then i < size, then a symbolic index's sign (select and x[i] add the
 * size to a negative index), each relation guarded unless the ranges decide it. */
int sj_index_in_range(const TensorMeta *x, int d, int64_t v, struct SymNode *isym, ShapeErr *err);
/* Copy dim i of x (size and symbol) into dim k of out. */
static inline void sj_copy_dim(TensorMeta *out, int k, const TensorMeta *x, int i)
{
    out->size[k] = x->size[i];
    out->sym[k] = x->sym[i];
}
/* out takes x's shape: its rank, and each dim's size and symbol (other fields untouched). */
static inline void sj_copy_shape(TensorMeta *out, const TensorMeta *x)
{
    out->ndim = x->ndim;
    for (int i = 0; i < x->ndim; i++)
        sj_copy_dim(out, i, x, i);
}
/* out's shape becomes size[0..n), syms[i] the symbol of size i (NULL: static); the symbols
 * past n are cleared (other fields untouched). */
static inline void sj_set_shape(TensorMeta *out, const int64_t *size, struct SymNode *const *syms, int n)
{
    out->ndim = (unsigned char)n;
    memset(out->sym, 0, sizeof out->sym);
    memcpy(out->size, size, sizeof(int64_t) * (size_t)n);
    memcpy(out->sym, syms, sizeof(struct SymNode *) * (size_t)n);
}
/* The values-and-indices result of max(dim), topk, max_pool(return_indices=True): out[1]
 * becomes the int64 indices, shaped as the values out[0]; two outputs. */
static inline void sj_with_indices(TensorMeta *out, int *nout)
{
    out[1] = out[0];
    out[1].dtype = DT_I64;
    out[1].requires_grad = 0;
    *nout = 2;
}
/* 1 when the argument `name` was passed as None (ba_get answers NULL for None as for an
 * absent argument; numpy's axis=None means something else than an absent axis). */
int sj_passed_none(const BoundArgs *b, const char *name);
/* sj_int_list with the symbols of symbolic entries (NULL for constants; their hints in
 * out), which it does not specialise. */
int sj_int_list_sym(const BoundArg *a, const char *what, int64_t *out, struct SymNode **syms, int *n, int max,
                    ShapeErr *err);
/* a // b for sizes: exact when b's factors divide a's (s0*s1 // s1 -> s0). */
struct SymNode *sj_sym_div(struct SymNode *a, struct SymNode *b);

/* The shape of Python data (rules_factory.c): what rule_tensor_data runs once symbolic
 * sizes among the data are read as their hints. */
int rule_tensor_const(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err);

/* Every rule named in ops.def (repeats are harmless redeclarations). */
#define X(e, name, kind, rule) \
    int rule(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err);
#include "../vocab/ops.def"
#undef X

#endif
