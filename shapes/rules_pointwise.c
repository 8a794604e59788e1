/* Elementwise ops: unary, binary with broadcasting and promotion, comparisons, where,
 * masked_fill, lerp, clamp, and dtype casts.
 *
 * Which dtypes each op accepts differs between ops and libraries in ways promotion alone
 * does not explain (torch has no bool negation or floor, numpy computes bool // bool in
 * int8, ...). Those facts live in one table, dtype_rules, checked against the libraries by
 * tests/shapes/test_shape_rules.py. */
#include <string.h>

#include "promote.h"
#include "rules.h"
#include "rules_util.h"
#include "sym.h"
#include "../core/errors.h"

enum {
    T_NOBOOL = 1 << 0,     /* torch refuses bool */
    T_NOINT = 1 << 1,      /* torch refuses integer (u8..i64) */
    T_NOFLOAT = 1 << 2,    /* torch refuses float (bitwise ops) */
    T_NOCPLX = 1 << 3,     /* torch refuses complex */
    N_NOBOOL = 1 << 4,
    N_NOFLOAT = 1 << 5,
    N_NOCPLX = 1 << 6,
    N_BOOL_I8 = 1 << 7,    /* numpy has no bool loop: bool computes in int8 */
    ABS_REAL = 1 << 8,     /* complex input gives its real type (abs) */
    T_BOOL_I64 = 1 << 9,   /* torch bool gives int64 (square) */
    N_KEEP_INT = 1 << 10,  /* numpy keeps integers where torch goes to float (reciprocal) */
    T_NOU8 = 1 << 11,      /* torch refuses uint8 (hardtanh) */
    N_ARRAY = 1 << 12,     /* numpy function, not a ufunc: 0-d results stay arrays */
    N_BOOL_F16 = 1 << 13,  /* numpy bool gives float16 (np.round) */
    N_NOINT = 1 << 14,
};

#define T_FLOATONLY (T_NOBOOL | T_NOINT)

static const unsigned dtype_rules[OP_COUNT] = {
    [OP_NEG] = T_NOBOOL | N_NOBOOL,
    [OP_POS] = T_NOBOOL | N_NOBOOL,
    [OP_ABS] = T_NOBOOL | ABS_REAL,
    [OP_RELU] = T_NOBOOL | T_NOCPLX,
    [OP_RELU6] = T_NOBOOL | T_NOCPLX,
    [OP_LEAKY_RELU] = T_FLOATONLY | T_NOCPLX,
    [OP_ELU] = T_FLOATONLY | T_NOCPLX,
    [OP_HARDTANH] = T_NOBOOL | T_NOU8 | T_NOCPLX,
    [OP_FLOOR] = T_NOBOOL | T_NOCPLX | N_NOCPLX,
    [OP_CEIL] = T_NOBOOL | T_NOCPLX | N_NOCPLX,
    [OP_ROUND] = T_NOBOOL | T_NOCPLX | N_BOOL_F16,
    [OP_TRUNC] = T_NOBOOL | T_NOCPLX | N_NOCPLX,
    [OP_SIGN] = T_NOCPLX | N_NOBOOL,
    [OP_SQUARE] = T_BOOL_I64 | N_BOOL_I8,
    [OP_BITWISE_NOT] = T_NOFLOAT | T_NOCPLX | N_NOFLOAT | N_NOCPLX,
    [OP_CLAMP] = T_NOCPLX,
    [OP_CLONE] = N_ARRAY,
    [OP_CONTIGUOUS] = N_ARRAY,
    [OP_DROPOUT] = T_FLOATONLY | T_NOCPLX,
    [OP_TRIL] = N_ARRAY,
    [OP_TRIU] = N_ARRAY,
    [OP_DETACH] = N_ARRAY,
    [OP_ROLL] = N_ARRAY,
    [OP_ERF] = T_NOCPLX,
    [OP_GELU] = T_FLOATONLY | T_NOCPLX,
    [OP_SILU] = T_FLOATONLY,
    [OP_MISH] = T_FLOATONLY | T_NOCPLX,
    [OP_SOFTPLUS] = T_FLOATONLY | T_NOCPLX,
    [OP_HARDSWISH] = T_FLOATONLY | T_NOCPLX,
    [OP_HARDSIGMOID] = T_FLOATONLY | T_NOCPLX,
    [OP_RECIPROCAL] = N_KEEP_INT | N_BOOL_I8,
    [OP_SUB] = T_NOBOOL | N_NOBOOL,
    [OP_FLOORDIV] = T_NOBOOL | T_NOCPLX | N_BOOL_I8 | N_NOCPLX,
    [OP_MOD] = T_NOBOOL | T_NOCPLX | N_BOOL_I8 | N_NOCPLX,
    [OP_FMOD] = T_NOBOOL | T_NOCPLX | N_BOOL_I8 | N_NOCPLX,
    [OP_POW] = T_NOBOOL | N_BOOL_I8,
    [OP_MAXIMUM] = T_NOCPLX,
    [OP_MINIMUM] = T_NOCPLX,
    [OP_BITWISE_AND] = T_NOFLOAT | T_NOCPLX | N_NOFLOAT | N_NOCPLX,
    [OP_BITWISE_OR] = T_NOFLOAT | T_NOCPLX | N_NOFLOAT | N_NOCPLX,
    [OP_BITWISE_XOR] = T_NOFLOAT | T_NOCPLX | N_NOFLOAT | N_NOCPLX,
    [OP_LSHIFT] = T_NOBOOL | T_NOFLOAT | T_NOCPLX | N_NOFLOAT | N_NOCPLX | N_BOOL_I8,
    [OP_RSHIFT] = T_NOBOOL | T_NOFLOAT | T_NOCPLX | N_NOFLOAT | N_NOCPLX | N_BOOL_I8,
    [OP_ATAN2] = T_NOCPLX | N_NOCPLX,
    [OP_HYPOT] = T_FLOATONLY | T_NOCPLX | N_NOCPLX,
    [OP_LOGADDEXP] = T_FLOATONLY | N_NOCPLX,
    [OP_LT] = T_NOCPLX,
    [OP_LE] = T_NOCPLX,
    [OP_GT] = T_NOCPLX,
    [OP_GE] = T_NOCPLX,
    [OP_WHERE] = T_NOCPLX | N_ARRAY,
    [OP_LERP] = T_FLOATONLY,
    [OP_MASKED_FILL] = N_ARRAY,
};

/* Applies the op's dtype table to the computation dtype d; *out is the result dtype. */
static int check_dtype(OpId op, Lib lib, DType d, DType *out, ShapeErr *err)
{
    unsigned f = dtype_rules[op];
    DTypeCategory c = dtype_info[d].category;
    const char *name = op_info[op].name;
    *out = d;
    if (lib == LIB_TORCH) {
        if ((c == CAT_BOOL && (f & T_NOBOOL)) || (c == CAT_INT && (f & T_NOINT)) ||
            (c == CAT_FLOAT && (f & T_NOFLOAT)) || (c == CAT_COMPLEX && (f & T_NOCPLX)) || (d == DT_U8 && (f & T_NOU8)))
            return sj_err(err, "%s is not implemented for %s tensors", name, dtype_info[d].name);
        if (c == CAT_BOOL && (f & T_BOOL_I64))
            *out = DT_I64;
    } else {
        if (d == DT_BF16)
            return sj_err(err, "numpy has no bfloat16");
        if ((c == CAT_BOOL && (f & N_NOBOOL)) || (c == CAT_FLOAT && (f & N_NOFLOAT)) ||
            (c == CAT_INT && (f & N_NOINT)) || (c == CAT_COMPLEX && (f & N_NOCPLX)))
            return sj_err(err, "numpy %s does not support %s", name, dtype_info[d].name);
        if (c == CAT_BOOL && (f & N_BOOL_I8))
            *out = DT_I8;
        if (c == CAT_BOOL && (f & N_BOOL_F16))
            *out = DT_F16;
    }
    if (c == CAT_COMPLEX && (f & ABS_REAL))
        *out = promote_real_of(d);
    return 0;
}

static void finish(OpId op, Lib lib, TensorMeta *out)
{
    if (!(dtype_rules[op] & N_ARRAY))
        sj_np_scalarize(lib, out);
}

/* numpy ufuncs take dtype= to choose the loop; the output then has that dtype. */
static int np_dtype_override(Lib lib, const BoundArgs *b, TensorMeta *out, ShapeErr *err)
{
    if (lib != LIB_NUMPY)
        return 0;
    DType d = (DType)out->dtype;
    if (sj_dtype_or(b, "dtype", lib, &d, err))
        return -1;
    out->dtype = (unsigned char)d;
    return 0;
}

static int unary(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err, int to_float)
{
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    DType d = (DType)x->dtype, r;
    int training = 1;
    if (op == OP_DROPOUT && sj_get_bool(b, "training", 1, &training, err))
        return -1;
    /* dropout outside training is the identity, for every dtype */
    if (training) {
        /* the input dtype must be accepted before any conversion to float */
        if (check_dtype(op, lib, d, &r, err))
            return -1;
        if (to_float && !(lib == LIB_NUMPY && (dtype_rules[op] & N_KEEP_INT)))
            d = promote_to_float(lib, d);
        if (check_dtype(op, lib, d, &r, err))
            return -1;
    } else {
        r = d;
    }
    if (op == OP_FLIP || op == OP_ROLL) {
        /* flip needs dims in torch; roll always needs shifts; the dims must exist */
        const BoundArg *dims = ba_get(b, "dims");
        const BoundArg *shifts = ba_get(b, "shifts");
        if (op == OP_ROLL && !shifts)
            return sj_err(err, "roll() missing required argument 'shifts'");
        /* numpy's fftshift (shifts computed by numpy: a string marker) fails on 0-d input */
        if (op == OP_ROLL && shifts->kind == BA_CONST && shifts->value && PyUnicode_Check(shifts->value) &&
            x->ndim == 0)
            return sj_err(err, "fftshift of a 0-d array raises");
        if (op == OP_FLIP && lib == LIB_TORCH && (!dims || (dims->kind == BA_LIST && dims->n == 0)))
            return sj_err(err, "flip() missing required argument 'dims'");
        if (dims) {
            int64_t dv[SJ_MAX_RANK];
            int nd, k;
            if (sj_int_list(dims, "dims", dv, &nd, SJ_MAX_RANK, err))
                return -1;
            for (int i = 0; i < nd; i++)
                if (sj_dim(lib, dv[i], x->ndim, &k, err))
                    return -1;
        }
    }
    *out = *x;
    if ((op == OP_TRIL || op == OP_TRIU) && x->ndim < 2) {
        /* numpy reads a vector as the rows of a square matrix */
        if (lib == LIB_TORCH || x->ndim == 0)
            return sj_err(err, "%s needs at least 2 dimensions", op_info[op].name);
        out->ndim = 2;
        out->size[1] = x->size[0];
        out->sym[1] = x->sym[0];
    }
    out->dtype = (unsigned char)r;
    out->np_scalar = 0;
    if (np_dtype_override(lib, b, out, err))
        return -1;
    finish(op, lib, out);
    *nout = 1;
    return 0;
}

int rule_same(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    return unary(op, lib, b, out, nout, err, 0);
}

int rule_unary_float(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    return unary(op, lib, b, out, nout, err, 1);
}

int rule_unary_bool(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    (void)op;
    if (lib == LIB_NUMPY && x->dtype == DT_BF16)
        return sj_err(err, "numpy has no bfloat16");
    *out = *x;
    out->dtype = DT_BOOL;
    out->np_scalar = 0;
    out->requires_grad = 0;
    sj_np_scalarize(lib, out);
    *nout = 1;
    return 0;
}

/* The shape of an elementwise op over n operands (tensors broadcast, constants are 0-d). */
static int elementwise_shape(const BoundArg *const *ops, int n, TensorMeta *out, ShapeErr *err)
{
    const TensorMeta *ms[4] = {NULL, NULL, NULL, NULL};
    int any = 0;
    for (int i = 0; i < n && i < 4; i++)
        if (ops[i] && ops[i]->kind == BA_TENSOR) {
            ms[i] = ops[i]->meta;
            any = 1;
        }
    if (!any)
        return sj_err(err, "no tensor operand");
    return sj_broadcast(ms, n, out, err);
}

/* torch and numpy refuse integers to negative integer powers (it fails while computing). */
static int check_int_pow(Lib lib, DType d, const BoundArg *exp, ShapeErr *err)
{
    if (dtype_info[d].category != CAT_INT || !exp || exp->kind != BA_CONST || !PyLong_Check(exp->value) ||
        PyBool_Check(exp->value))
        return 0;
    int overflow = 0, neg;
    long long v = PyLong_AsLongLongAndOverflow(exp->value, &overflow);
    if (v == -1 && PyErr_Occurred())
        sj_err_clear();
    if (exp->sym && sj_symctx) {
        /* a symbolic exponent: its sign is decided by the hint and guarded */
        SymNode *zero = sym_const(sj_symctx->env, 0);
        if (!zero || sj_decide(sym_lt(sj_symctx->env, exp->sym, zero), &neg, err) < 0)
            return zero ? -1 : sj_sym_error(err);
        v = neg ? -1 : 0;
        overflow = 0;
    }
    if (v < 0 || overflow < 0)
        return sj_err(err, "%s: integers to negative integer powers are not allowed",
                      lib == LIB_TORCH ? "torch" : "numpy");
    return 0;
}

/* The result of a pointwise op over n operands computed in dtype r: the operands' broadcast
 * shape (none when all are weak scalars), numpy's dtype= override when b is given (the
 * ufuncs that take one), the library's finish. */
static int pointwise_result(OpId op, Lib lib, const BoundArgs *b, const BoundArg *const *ops, int n, DType r,
                            int all_weak, TensorMeta *out, int *nout, ShapeErr *err)
{
    sj_meta(out, lib, r);
    if (!all_weak && elementwise_shape(ops, n, out, err))
        return -1;
    if (b && np_dtype_override(lib, b, out, err))
        return -1;
    finish(op, lib, out);
    *nout = 1;
    return 0;
}

/* The operands input and other of a binary op, both required, and their promoted dtype
 * (promote_args). 0, or -1 with err set. */
static int binary_operands(OpId op, Lib lib, const BoundArgs *b, int int_range, const BoundArg *ops[2], DType *d,
                           int *all_weak, ShapeErr *err)
{
    ops[0] = ba_get(b, "input");
    ops[1] = ba_get(b, "other");
    if (!ops[0] || !ops[1])
        return sj_err(err, "%s needs two operands", op_info[op].name);
    return promote_args(lib, ops, 2, int_range, d, all_weak, err);
}

int rule_binary(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    const BoundArg *ops[2];
    DType d, r;
    int all_weak;
    /* float-only ufuncs convert a Python int to float, so its range never matters there */
    if (binary_operands(op, lib, b, op != OP_LOGADDEXP, ops, &d, &all_weak, err))
        return -1;
    if (op == OP_POW && lib == LIB_TORCH && d == DT_BOOL && ops[1]->kind == BA_CONST)
        r = DT_BOOL;    /* bool ** True has a scalar kernel */
    else if (op == OP_POW && lib == LIB_NUMPY && ba_get(b, "square_fast_path") && ops[0]->kind == BA_TENSOR &&
             ops[0]->meta->dtype == DT_BOOL && ops[1]->kind == BA_CONST && PyLong_Check(ops[1]->value) &&
             !PyBool_Check(ops[1]->value) && PyLong_AsLong(ops[1]->value) == 2)
        r = DT_I8;      /* the `**` operator computes a ** 2 as np.square: bool -> int8 */
    else if (check_dtype(op, lib, d, &r, err))
        return -1;
    if (op == OP_POW && check_int_pow(lib, d, ops[1], err))
        return -1;
    if (op == OP_SUB && lib == LIB_TORCH)
        for (int i = 0; i < 2; i++)
            if ((ops[i]->kind == BA_TENSOR && ops[i]->meta->dtype == DT_BOOL) ||
                (ops[i]->kind == BA_CONST && PyBool_Check(ops[i]->value)))
                return sj_err(err, "Subtraction, the `-` operator, with a bool tensor is not "
                                   "supported");
    return pointwise_result(op, lib, b, ops, 2, r, all_weak, out, nout, err);
}

int rule_truediv(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    const BoundArg *ops[2];
    DType d, r;
    int all_weak;
    if (binary_operands(op, lib, b, 0, ops, &d, &all_weak, err))
        return -1;
    /* torch.div takes rounding_mode: "trunc"/"floor" keep integer types */
    const BoundArg *rm = ba_get(b, "rounding_mode");
    if (rm && op == OP_TRUEDIV) {
        if (dtype_info[d].category == CAT_BOOL)
            return sj_err(err, "div with rounding_mode is not implemented for bool");
        if (dtype_info[d].category == CAT_COMPLEX)
            return sj_err(err, "div with rounding_mode is not implemented for complex");
    } else if (dtype_info[d].category <= CAT_INT) {
        if (check_dtype(op, lib, d, &r, err))
            return -1;
        if (lib == LIB_NUMPY && op == OP_TRUEDIV) {
            d = DT_F64;    /* true_divide has float64 loops only for integers */
        } else if (lib == LIB_NUMPY) {
            /* arctan2/hypot pick the first float loop every input casts to safely:
             * the widest of each integer operand's own smallest float */
            DType promoted = d;
            d = DT_F16;
            for (int i = 0; i < 2; i++) {
                /* a weak int stands for the promoted integer type */
                DType f = promote_to_float(lib, ops[i]->kind == BA_TENSOR ? (DType)ops[i]->meta->dtype : promoted);
                if (promote_pair(lib, d, f, &d, err))
                    return -1;
            }
        } else {
            d = promote_to_float(lib, d);
        }
    }
    if (check_dtype(op, lib, d, &r, err))
        return -1;
    return pointwise_result(op, lib, b, ops, 2, r, all_weak, out, nout, err);
}

int rule_compare(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    const BoundArg *ops[2];
    DType d = DT_C64, r;
    int all_weak = 0;
    if (binary_operands(op, lib, b, 0, ops, &d, &all_weak, err)) {
        /* comparing float16 with a complex scalar computes in complex32, which shapejit
         * has no dtype for; the bool result does not need it */
        if (lib != LIB_TORCH || strncmp(err->msg, "complex32", 9) != 0)
            return -1;
        d = DT_C64;
    }
    if (check_dtype(op, lib, d, &r, err))
        return -1;
    return pointwise_result(op, lib, NULL, ops, 2, DT_BOOL, all_weak, out, nout, err);
}

int rule_where(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    const BoundArg *cond = ba_get(b, "condition");
    const BoundArg *ops[3] = {cond, ba_get(b, "input"), ba_get(b, "other")};
    if (!cond)
        return sj_err(err, "where needs a condition");
    if (!ops[1] && !ops[2])
        return sj_err(err, "where(condition) alone returns data-dependent indices");
    if (!ops[1] || !ops[2])
        return sj_err(err, "where needs both x and y");
    if (lib == LIB_TORCH && (cond->kind != BA_TENSOR || cond->meta->dtype != DT_BOOL))
        return sj_err(err, "where expected condition to be a boolean tensor");
    DType d, r;
    if (promote_args(lib, ops + 1, 2, 1, &d, NULL, err))
        return -1;
    if (check_dtype(op, lib, d, &r, err))
        return -1;
    return pointwise_result(op, lib, NULL, ops, 3, r, 0, out, nout, err);
}

int rule_masked_fill(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    const TensorMeta *x, *mask;
    if (sj_tensor2(b, "input", &x, "mask", &mask, err))
        return -1;
    (void)op;
    if (mask->dtype != DT_BOOL)
        return sj_err(err, "masked_fill only supports boolean masks");
    const BoundArg *v = ba_get(b, "value");
    if (!v)
        return sj_err(err, "masked_fill needs a value");
    if (v->kind == BA_TENSOR && v->meta->ndim != 0)
        return sj_err(err, "masked_fill only supports a 0-dimensional value tensor");
    const TensorMeta *ms[2] = {x, mask};
    TensorMeta shape;
    if (sj_broadcast(ms, 2, &shape, err))
        return -1;
    /* out of place, the result takes the broadcast shape (in place, shapes_inplace then
     * refuses a mask that would grow self) */
    *out = *x;
    sj_copy_shape(out, &shape);
    (void)lib;
    *nout = 1;
    return 0;
}

int rule_lerp(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    const BoundArg *x = ba_get(b, "input"), *e = ba_get(b, "end"), *w = ba_get(b, "weight");
    if (!x || !e || !w || x->kind != BA_TENSOR || e->kind != BA_TENSOR)
        return sj_err(err, "lerp needs input and end tensors and a weight");
    /* lerp does not promote: input and end (and a tensor weight) share one dtype */
    if (x->meta->dtype != e->meta->dtype || (w->kind == BA_TENSOR && w->meta->dtype != x->meta->dtype))
        return sj_err(err, "lerp expected tensors of the same dtype");
    DType r;
    if (check_dtype(op, lib, (DType)x->meta->dtype, &r, err))
        return -1;
    const BoundArg *ops[3] = {x, e, w};
    return pointwise_result(op, lib, NULL, ops, 3, r, 0, out, nout, err);
}

int rule_clamp(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    const BoundArg *ops[3] = {ba_get(b, "input"), ba_get(b, "min"), ba_get(b, "max")};
    if (!ops[0] || ops[0]->kind != BA_TENSOR)
        return sj_err(err, "clamp needs a tensor input");
    if (!ops[1] && !ops[2] && lib == LIB_TORCH)
        return sj_err(err, "At least one of 'min' or 'max' must not be None");
    DType d, r;
    if (promote_args(lib, ops, 3, 1, &d, NULL, err))
        return -1;
    if (check_dtype(op, lib, d, &r, err))
        return -1;
    return pointwise_result(op, lib, NULL, ops, 3, r, 0, out, nout, err);
}

/* ---- casts ----
 * The target comes from, in order: `fixed_dtype` (a dtype name the row fixes with
 * "@fixed_dtype=float32", for Tensor.float and friends), `dtype` (torch .to(dtype=),
 * numpy astype), the dtype of the tensor `other`
 * (type_as), or the positional `args` of Tensor.to, which may hold a dtype, a device, a
 * tensor and the bools non_blocking/copy. Devices other than cpu are refused. */

static int is_device(PyObject *v)
{
    if (PyUnicode_Check(v))
        return 1;
    return strcmp(Py_TYPE(v)->tp_name, "torch.device") == 0 || strcmp(Py_TYPE(v)->tp_name, "device") == 0;
}

static int cast_target(const BoundArg *a, Lib lib, DType *d, int *found, ShapeErr *err)
{
    if (a->kind == BA_TENSOR) {
        *d = (DType)a->meta->dtype;
        *found = 1;
        return 0;
    }
    if (a->kind != BA_CONST)
        return sj_err(err, "to(): unsupported argument");
    PyObject *v = a->value;
    if (v == Py_None || PyBool_Check(v))
        return 0;
    if (PyUnicode_Check(v) && lib == LIB_NUMPY) {
        int r = dtype_from_py(v, lib, d);
        if (r < 0) {
            sj_err_clear();
            return sj_err(err, "could not read dtype");
        }
        if (r == 1)
            return sj_err(err, "unsupported dtype");
        *found = 1;
        return 0;
    }
    if (is_device(v))
        return sj_cpu_device(v, err);
    int r = dtype_from_py(v, lib, d);
    if (r < 0) {
        sj_err_clear();
        return sj_err(err, "could not read dtype");
    }
    if (r == 1)
        return sj_err(err, "unsupported dtype or argument %.60s", Py_TYPE(v)->tp_name);
    *found = 1;
    return 0;
}

int rule_cast(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    DType d = (DType)x->dtype;
    int found = 0;
    const BoundArg *a;
    if ((a = ba_get(b, "fixed_dtype"))) {
        const char *name = a->kind == BA_CONST ? PyUnicode_AsUTF8(a->value) : NULL;
        int k = 0;
        while (name && k < DT_COUNT && strcmp(dtype_info[k].name, name) != 0)
            k++;
        if (!name || k == DT_COUNT) {
            sj_err_clear();
            return sj_err(err, "bad fixed_dtype in the callables table");
        }
        d = (DType)k;
        found = 1;
    }
    if ((a = ba_get(b, "dtype")) && cast_target(a, lib, &d, &found, err))
        return -1;
    if ((a = ba_get(b, "other")) && cast_target(a, lib, &d, &found, err))
        return -1;
    if ((a = ba_get(b, "device")) && a->kind == BA_CONST && sj_cpu_device(a->value, err))
        return -1;
    if ((a = ba_get(b, "args"))) {
        if (a->kind != BA_LIST)
            return sj_err(err, "to(): unsupported arguments");
        for (int i = 0; i < a->n; i++) {
            int f = 0;
            if (cast_target(&a->items[i], lib, &d, &f, err))
                return -1;
            if (f && found)
                return sj_err(err, "to(): the target dtype is given twice");
            found |= f;
        }
    }
    if (lib == LIB_NUMPY && d == DT_BF16)
        return sj_err(err, "numpy has no bfloat16");
    /* Tensor.type() without a dtype returns the type's name, not a tensor */
    if (!found && ba_get(b, "require_dtype"))
        return sj_err(err, "a dtype is required");
    *out = *x;
    out->dtype = (unsigned char)d;
    out->np_scalar = 0;
    *nout = 1;
    return 0;
}

/* dst.copy_(src): dst keeps its meta; src must broadcast to dst's shape. */
int rule_copy(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    (void)lib;
    const TensorMeta *dst, *src;
    if (sj_tensor2(b, "input", &dst, "other", &src, err))
        return -1;
    const TensorMeta *both[2] = {dst, src};
    TensorMeta bc = *dst;
    if (sj_broadcast(both, 2, &bc, err) < 0)
        return -1;
    if (bc.ndim != dst->ndim)
        return sj_err(err, "copy_: source of rank %d does not broadcast to rank %d", src->ndim, dst->ndim);
    for (int i = 0; i < dst->ndim; i++)
        if (bc.size[i] != dst->size[i])
            return sj_err(err, "copy_: the size of the source does not match at dimension %d", i);
    *out = *dst;
    *nout = 1;
    return 0;
}

/* Binary ufuncs defined on floats only (logaddexp): promote as for add, then take the
 * float type that holds the result (numpy: int8 -> float16, int16 -> float32, ...). */
int rule_binary_float(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    if (rule_binary(op, lib, b, out, nout, err))
        return -1;
    if (lib == LIB_TORCH) {
        out[0].dtype = (unsigned char)promote_to_float(lib, (DType)out[0].dtype);
        return 0;
    }
    /* numpy picks the first float loop every input casts to safely: each array on its own
     * (uint8 with int8 -> float16), and a Python float with integer arrays -> float64 */
    const BoundArg *ops[2] = {ba_get(b, "input"), ba_get(b, "other")};
    int have = 0, any_float_array = 0, weak_float = 0, weak_int = 0;
    DType acc = DT_F16;
    for (int i = 0; i < 2; i++)
        if (ops[i]->kind == BA_CONST && PyLong_Check(ops[i]->value) && !PyBool_Check(ops[i]->value))
            weak_int = 1;
    for (int i = 0; i < 2; i++) {
        if (ops[i]->kind == BA_TENSOR) {
            DType in = (DType)ops[i]->meta->dtype;
            if (in == DT_BOOL && weak_int)
                in = DT_I64;   /* bool with a Python int promotes to the default int */
            DType f = promote_to_float(lib, in);
            if (dtype_info[ops[i]->meta->dtype].category >= CAT_FLOAT)
                any_float_array = 1;
            if (!have)
                acc = f;
            else if (promote_pair(lib, acc, f, &acc, err))
                return -1;
            have = 1;
        } else if (ops[i]->kind == BA_CONST && PyFloat_Check(ops[i]->value)) {
            weak_float = 1;
        }
    }
    if (!have)
        acc = DT_F64;
    else if (weak_float && !any_float_array)
        acc = DT_F64;
    out[0].dtype = (unsigned char)acc;
    return 0;
}
