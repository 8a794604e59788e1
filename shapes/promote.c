/* Type promotion for torch and numpy 2.
 *
 * Both libraries treat Python scalars as "weak": they only decide the result when they are
 * of a higher category (bool < int < float < complex) than the tensors. They differ in
 * three places that matter here:
 *  - torch also weakens 0-d tensors: a 0-d tensor only counts when its category is higher
 *    than that of every dimensioned tensor; numpy 2 (NEP 50) treats 0-d arrays and numpy
 *    scalars like any other array;
 *  - the float a weak Python float becomes: torch's default dtype vs numpy's float64;
 *  - mixed int/float pairs: torch keeps the float (int64 + float16 -> float16), numpy picks
 *    a float wide enough for the integer (int64 + float16 -> float64).
 */
#include "promote.h"
#include "../vocab/np.h"

#include <stdio.h>

#include "rules_util.h"
#include "../core/errors.h"

#define CAT(d) (dtype_info[(d)].category)
#define SIZE(d) (dtype_info[(d)].itemsize)

static int is_unsigned(DType d)
{
    return dtype_is_unsigned(d);
}

static DType complex_for_float(DType f)
{
    return f == DT_F64 ? DT_C128 : DT_C64;
}

DType promote_real_of(DType d)
{
    if (d == DT_C64)
        return DT_F32;
    if (d == DT_C128)
        return DT_F64;
    return d;
}

static DType np_float_for_int(DType d)
{
    switch (d) {
    case DT_BOOL:
    case DT_U8:
    case DT_I8:
        return DT_F16;
    case DT_I16:
    case DT_U16:
        return DT_F32;
    default:
        return DT_F64;
    }
}

DType promote_to_float(Lib lib, DType d)
{
    if (CAT(d) >= CAT_FLOAT)
        return d;
    return lib == LIB_TORCH ? meta_torch_default_float : np_float_for_int(d);
}

/* The signed integer type of n bytes. */
static DType signed_of_size(int n)
{
    return n <= 1 ? DT_I8 : n == 2 ? DT_I16 : n == 4 ? DT_I32 : DT_I64;
}

/* Two integer types: the smaller type that holds both ranges. A signed and an unsigned
 * type meet in the signed type when it is wider, else in the signed type twice as wide as
 * the unsigned one; uint64 with any signed type has none, and numpy gives float64. */
static DType int_pair(DType a, DType b)
{
    if (is_unsigned(a) == is_unsigned(b))
        return SIZE(a) >= SIZE(b) ? a : b;
    DType s = is_unsigned(a) ? b : a, u = is_unsigned(a) ? a : b;
    if (SIZE(s) > SIZE(u))
        return s;
    if (u == DT_U64)
        return DT_F64;
    return signed_of_size(2 * SIZE(u));
}

int promote_pair(Lib lib, DType a, DType b, DType *out, ShapeErr *err)
{
    if (lib == LIB_NUMPY && (a == DT_BF16 || b == DT_BF16)) {
        sj_err(err, "numpy has no bfloat16");
        return -1;
    }
    if (a == b) {
        *out = a;
        return 0;
    }
    if (CAT(a) < CAT(b)) {
        DType t = a;
        a = b;
        b = t;
    }    /* a: the higher category */
    if (CAT(b) == CAT_BOOL) {
        *out = a;
        return 0;
    }
    switch (CAT(a)) {
    case CAT_INT:
        *out = int_pair(a, b);
        return 0;
    case CAT_FLOAT:
        if (CAT(b) == CAT_INT) {
            if (lib == LIB_TORCH) {
                *out = a;
            } else {
                DType need = np_float_for_int(b);
                *out = SIZE(need) > SIZE(a) ? need : a;
            }
            return 0;
        }
        /* two floats: float16 and bfloat16 meet in float32 */
        if ((a == DT_F16 && b == DT_BF16) || (a == DT_BF16 && b == DT_F16))
            *out = DT_F32;
        else
            *out = SIZE(a) >= SIZE(b) ? a : b;
        return 0;
    default: {    /* complex with something lower */
        DType f = b;
        if (CAT(b) == CAT_INT)
            f = lib == LIB_TORCH ? DT_F32 : np_float_for_int(b);
        if (CAT(b) == CAT_COMPLEX) {
            *out = SIZE(a) >= SIZE(b) ? a : b;
            return 0;
        }
        DType c = complex_for_float(f);
        *out = SIZE(c) > SIZE(a) ? c : a;
        return 0;
    }
    }
}

/* What a Python scalar is: category, or -1 when it is not a bool/int/float/complex. */
static int scalar_category(PyObject *v)
{
    if (PyBool_Check(v))
        return CAT_BOOL;
    if (PyLong_Check(v))
        return CAT_INT;
    if (PyFloat_Check(v))
        return CAT_FLOAT;
    if (PyComplex_Check(v))
        return CAT_COMPLEX;
    return -1;
}

/* Does the Python int fit the integer dtype d? */
static int int_fits(PyObject *v, DType d)
{
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred()) {
        sj_err_clear();
        return 0;
    }
    if (overflow)
        return 0;
    switch (d) {
    case DT_U8:
        return x >= 0 && x <= 255;
    case DT_U16:
        return x >= 0 && x <= 65535;
    case DT_U32:
        return x >= 0 && x <= 4294967295LL;
    case DT_U64:
        return x >= 0;
    case DT_I8:
        return x >= -128 && x <= 127;
    case DT_I16:
        return x >= -32768 && x <= 32767;
    case DT_I32:
        return x >= -2147483648LL && x <= 2147483647LL;
    default:
        return 1;
    }
}

/* torch: a lower-priority group's dtype only matters when its category is higher. */
static int torch_combine(int higher, int lower, DType *out, ShapeErr *err)
{
    if (higher < 0) {
        *out = (DType)lower;
        return 0;
    }
    if (lower < 0) {
        *out = (DType)higher;
        return 0;
    }
    DType h = (DType)higher, l = (DType)lower;
    if (CAT(h) == CAT_COMPLEX) {
        *out = h;
        return 0;
    }
    if (CAT(l) == CAT_COMPLEX) {
        if (CAT(h) == CAT_FLOAT) {
            if (h == DT_F16 || h == DT_BF16) {
                sj_err(err, "complex32 results are not supported");
                return -1;
            }
            *out = complex_for_float(h);
            return 0;
        }
        *out = l;
        return 0;
    }
    if (CAT(h) == CAT_FLOAT) {
        *out = h;
        return 0;
    }
    if (CAT(h) == CAT_BOOL || CAT(l) == CAT_FLOAT)
        return promote_pair(LIB_TORCH, h, l, out, err);
    *out = h;
    return 0;
}

int promote_args(Lib lib, const BoundArg *const *args, int n, int check_range, DType *out, int *all_weak, ShapeErr *err)
{
    /* torch groups: dimensioned tensors, 0-d tensors, Python scalars; -1 = none yet.
     * numpy groups: every array (strong), Python scalars (weak). */
    int dim = -1, zero = -1, weak_cat = -1;
    for (int i = 0; i < n; i++) {
        const BoundArg *a = args[i];
        if (!a || a->kind == BA_ABSENT)
            continue;
        if (a->kind == BA_TENSOR) {
            int *slot = (lib == LIB_TORCH && a->meta->ndim == 0) ? &zero : &dim;
            if (*slot < 0) {
                *slot = a->meta->dtype;
            } else {
                DType r;
                if (promote_pair(lib, (DType)*slot, (DType)a->meta->dtype, &r, err))
                    return -1;
                *slot = r;
            }
            continue;
        }
        if (a->kind != BA_CONST) {
            sj_err(err, "a list is not a valid operand here");
            return -1;
        }
        if (sj_np_ready() && PyArray_IsScalar(a->value, Generic)) {
            /* numpy scalars (np.float32(2)): strong operands in numpy (a 0-d array of
             * their dtype), Python-like scalars of their category for torch */
            TensorMeta sm;
            const char *why = NULL;
            if (meta_from_value(a->value, &sm, NULL, &why) != 0) {
                sj_err_clear();
                sj_err(err, "operand of type %.60s is not supported", Py_TYPE(a->value)->tp_name);
                return -1;
            }
            if (lib == LIB_NUMPY) {
                if (dim < 0) {
                    dim = sm.dtype;
                } else {
                    DType r;
                    if (promote_pair(lib, (DType)dim, (DType)sm.dtype, &r, err))
                        return -1;
                    dim = r;
                }
            } else if ((int)dtype_info[sm.dtype].category > weak_cat) {
                weak_cat = (int)dtype_info[sm.dtype].category;
            }
            continue;
        }
        int c = scalar_category(a->value);
        if (c < 0) {
            sj_err(err, "operand of type %.60s is not supported", Py_TYPE(a->value)->tp_name);
            return -1;
        }
        if (c > weak_cat)
            weak_cat = c;
    }
    if (all_weak)
        *all_weak = dim < 0 && zero < 0;

    int wrapped = -1;    /* the dtype the weak scalars stand for */
    switch (weak_cat) {
    case CAT_BOOL:
        wrapped = DT_BOOL;
        break;
    case CAT_INT:
        wrapped = DT_I64;
        break;
    case CAT_FLOAT:
        wrapped = lib == LIB_TORCH ? meta_torch_default_float : DT_F64;
        break;
    case CAT_COMPLEX:
        wrapped = (lib == LIB_TORCH && meta_torch_default_float != DT_F64) ? DT_C64 : DT_C128;
        break;
    default:
        break;
    }

    if (lib == LIB_TORCH) {
        if (dim < 0 && zero < 0 && wrapped < 0) {
            sj_err(err, "no operands");
            return -1;
        }
        DType zw = DT_BOOL;
        if (torch_combine(zero, wrapped, &zw, err))
            return -1;
        return torch_combine(dim, (zero < 0 && wrapped < 0) ? -1 : (int)zw, out, err);
    }

    if (dim < 0) {
        if (wrapped < 0) {
            sj_err(err, "no operands");
            return -1;
        }
        *out = (DType)wrapped;
        return 0;
    }
    DType r = (DType)dim;
    if (weak_cat > (int)CAT(r)) {
        /* A weak complex keeps the precision of a float array (float32 -> complex64). */
        if (weak_cat == CAT_COMPLEX && CAT(r) == CAT_FLOAT)
            r = complex_for_float(r == DT_F16 ? DT_F32 : r);
        else if (promote_pair(lib, r, (DType)wrapped, &r, err))
            return -1;
    } else if (check_range && CAT(r) == CAT_INT) {
        for (int i = 0; i < n; i++) {
            const BoundArg *a = args[i];
            if (a && a->kind == BA_CONST && scalar_category(a->value) == CAT_INT && !int_fits(a->value, r)) {
                sj_err(err, "Python integer out of bounds for %s", dtype_info[r].name);
                return -1;
            }
        }
    }
    *out = r;
    return 0;
}
