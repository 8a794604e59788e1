/* Resampling and its neighbours: transposed convolution, F.interpolate, addcmul/addcdiv,
 * Tensor.new, tensor data holding symbolic sizes (torch.tensor([n, 2]), x.new_tensor;
 * rules_factory.c reads the data), and the in-place fills from a distribution
 * (x.uniform_(), x.bernoulli_(p), ...). The cpu backend runs all of them as eager steps;
 * the rules say what the library call returns, and refuse what it would raise on. */
#include <math.h>
#include <string.h>

#include "rules.h"
#include "rules_util.h"
#include "promote.h"
#include "sym.h"
#include "../core/errors.h"

/* ---------------------------------------------------------------- helpers ---- */

/* Dim i of out = mul * (dim i of x) + add, an expression when x's dim is symbolic; the
 * result must be at least `least` (decided, so guarded, when symbolic): 0 when it is, 1
 * when it is not (out untouched), -1 on error. */
static int affine_dim(const TensorMeta *x, int i, int64_t mul, int64_t add, int64_t least, TensorMeta *out,
                      ShapeErr *err)
{
    if (!sj_symctx || !x->sym[i]) {
        int64_t o = mul * x->size[i] + add;
        if (o < least)
            return 1;
        out->size[i] = o;
        out->sym[i] = NULL;
        return 0;
    }
    SymEnv *env = sj_symctx->env;
    SymNode *m = sym_const(env, mul), *a = sym_const(env, add), *l = sym_const(env, least);
    SymNode *p = m && a && l ? sym_mul(env, x->sym[i], m) : NULL;
    SymNode *o = p ? sym_add(env, p, a) : NULL;
    int t;
    if (sj_decide(o ? sym_ge(env, o, l) : NULL, &t, err) < 0)
        return -1;
    if (!t)
        return 1;
    return sj_set_dim(out, i, o, err) < 0 ? -1 : 0;
}

static int is_float(const TensorMeta *m)
{
    return dtype_info[m->dtype].category == CAT_FLOAT;
}

/* The string constant `name`, or dflt when absent; NULL (err set) when not a string. */
static const char *str_arg(const BoundArgs *b, const char *name, const char *dflt, ShapeErr *err)
{
    const BoundArg *a = ba_get(b, name);
    if (!a)
        return dflt;
    const char *s = a->kind == BA_CONST && PyUnicode_Check(a->value) ? PyUnicode_AsUTF8(a->value) : NULL;
    if (!s) {
        sj_err_clear();
        sj_err(err, "%s must be a string", name);
    }
    return s;
}

/* ------------------------------------------------------ transposed convolution ---- */

/* conv_transpose{1,2}d: weight (C_in, C_out / groups, k...); each spatial extent is
 * (in - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1. */
int rule_conv_transpose(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)lib;
    int sp = op == OP_CONV_TRANSPOSE1D ? 1 : 2;
    const TensorMeta *x, *wa;
    if (sj_tensor2(b, "input", &x, "weight", &wa, err))
        return -1;
    if (!is_float(x))
        return sj_err(err, "%s is not implemented for %s", op_info[op].name, dtype_info[x->dtype].name);
    if (wa->dtype != x->dtype)
        return sj_err(err, "input and weight should have the same dtype");
    int batched = x->ndim == sp + 2;
    if (!batched && x->ndim != sp + 1)
        return sj_err(err, "%s expects %d-D (unbatched) or %d-D (batched) input", op_info[op].name, sp + 1, sp + 2);
    if (wa->ndim != sp + 2)
        return sj_err(err, "%s: weight must be %d-D", op_info[op].name, sp + 2);
    TensorMeta w = *wa;
    if (sj_pin_dims(&w, err) < 0)   /* the weights' sizes are read as numbers */
        return -1;
    const BoundArg *pa = ba_get(b, "padding");
    if (pa && pa->kind == BA_CONST && PyUnicode_Check(pa->value))
        return sj_err(err, "conv_transpose: padding must be ints");
    int64_t stride[2], pad[2], opad[2], dil[2], groups;
    if (sj_int_tuple(b, "stride", 1, sp, stride, err) || sj_int_tuple(b, "padding", 0, sp, pad, err) ||
        sj_int_tuple(b, "output_padding", 0, sp, opad, err) || sj_int_tuple(b, "dilation", 1, sp, dil, err) ||
        sj_get_int(b, "groups", 1, &groups, err))
        return -1;
    if (groups <= 0)
        return sj_err(err, "non-positive groups is not supported");
    for (int i = 0; i < sp; i++) {
        if (stride[i] <= 0 || dil[i] <= 0 || pad[i] < 0 || opad[i] < 0)
            return sj_err(err, "non-positive stride/dilation or negative padding");
        if (opad[i] >= stride[i] && opad[i] >= dil[i])
            return sj_err(err, "output padding must be smaller than either stride or dilation");
    }
    if (w.size[0] % groups != 0)
        return sj_err(err, "the weight's input channels must be divisible by groups");
    int off = batched ? 1 : 0;
    int ch = sj_dim_equals(x, off, w.size[0], err);
    if (ch < 0)
        return -1;
    if (!ch)
        return sj_err(err, "expected input to have %lld channels", (long long)w.size[0]);
    const BoundArg *ba = ba_get(b, "bias");
    if (ba) {
        if (ba->kind != BA_TENSOR || ba->meta->dtype != x->dtype || ba->meta->ndim != 1)
            return sj_err(err, "bias must be a 1-D tensor of the input's dtype");
        int eq = sj_dim_equals(ba->meta, 0, w.size[1] * groups, err);
        if (eq <= 0)
            return eq < 0 ? -1 : sj_err(err, "bias should have %lld elements", (long long)(w.size[1] * groups));
    }
    *out = *x;
    out->size[off] = w.size[1] * groups;
    out->sym[off] = NULL;
    for (int i = 0; i < sp; i++) {
        int64_t add = -stride[i] - 2 * pad[i] + dil[i] * (w.size[2 + i] - 1) + opad[i] + 1;
        int r = affine_dim(x, off + 1 + i, stride[i], add, 1, out, err);
        if (r)
            return r < 0 ? -1 : sj_err(err, "Output size is too small");
    }
    *nout = 1;
    return 0;
}

/* ------------------------------------------------------------- interpolate ---- */

/* floor(in * scale) for dim i of x into dim i of out. A symbolic size stays symbolic when
 * the scale is m / 2**e with small m and e (1.5, 0.5, 2.0: in * scale is then exact in
 * double, so its floor is (in * m) // 2**e), the symbol kept below 2**31 by a guard;
 * other scales specialise the size. 1 when the result is not positive. */
static int scaled_dim(const TensorMeta *x, int i, double scale, TensorMeta *out, ShapeErr *err)
{
    int64_t in = x->size[i];
    SymNode *s = sj_symctx ? x->sym[i] : NULL;
    int e = 0;
    double mant = frexp(scale, &e);   /* scale = mant * 2**e, mant in [0.5, 1) */
    int64_t m = 0, shift = 0;
    if (s && scale > 0 && isfinite(scale)) {
        /* the smallest odd integer numerator: scale = m / 2**shift */
        double v = mant;
        int k = 0;
        while (v != floor(v) && k < 30) {
            v *= 2;
            k++;
        }
        if (v == floor(v) && v < (double)(1 << 20)) {
            m = (int64_t)v;
            shift = k - e;   /* scale = m * 2**(e - k) */
            if (shift < 0) {
                if (-shift > 20)
                    m = 0;
                else {
                    m <<= -shift;
                    shift = 0;
                }
            } else if (shift > 30) {
                m = 0;
            }
        }
    }
    if (s && m > 0) {
        SymEnv *env = sj_symctx->env;
        SymNode *mk = sym_const(env, m), *dk = sym_const(env, (int64_t)1 << shift);
        SymNode *lim = sym_const(env, (int64_t)1 << 31), *one = sym_const(env, 1);
        SymNode *p = mk && dk && lim && one ? sym_mul(env, s, mk) : NULL;
        SymNode *o = p ? sym_floordiv(env, p, dk) : NULL;
        if (!o)
            return sj_sym_error(err);
        if (sj_require(sym_lt(env, s, lim), err) < 0)
            return -1;
        int t;
        if (sj_decide(sym_ge(env, o, one), &t, err) < 0)
            return -1;
        if (!t)
            return 1;
        return sj_set_dim(out, i, o, err) < 0 ? -1 : 0;
    }
    if (s && sj_pin(s, &in, err) < 0)
        return -1;
    double f = floor((double)in * scale);
    if (!(f >= 1) || f > 9.0e15)
        return 1;
    out->size[i] = (int64_t)f;
    out->sym[i] = NULL;
    return 0;
}

/* A float or a sequence of n floats (one float repeats) from a constant. */
static int floats_n(const BoundArg *a, int n, double *v, ShapeErr *err)
{
    if (a->kind != BA_CONST || a->data)
        return sj_err(err, "scale_factor must be constant");
    PyObject *o = a->value;
    if (PyTuple_Check(o) || PyList_Check(o)) {
        Py_ssize_t m = PySequence_Fast_GET_SIZE(o);
        if (m != n)
            return sj_err(err, "scale_factor must have one value per spatial dimension");
        for (Py_ssize_t k = 0; k < m; k++) {
            PyObject *it = PySequence_Fast_GET_ITEM(o, k);
            if (!PyFloat_Check(it) && !(PyLong_Check(it) && !PyBool_Check(it)))
                return sj_err(err, "scale_factor must be numbers");
            v[k] = PyFloat_AsDouble(it);
        }
    } else if (PyFloat_Check(o) || (PyLong_Check(o) && !PyBool_Check(o))) {
        double d = PyFloat_AsDouble(o);
        for (int k = 0; k < n; k++)
            v[k] = d;
    } else {
        return sj_err(err, "scale_factor must be a number or a sequence of numbers");
    }
    if (PyErr_Occurred()) {
        sj_err_clear();
        return sj_err(err, "unreadable scale_factor");
    }
    return 0;
}

int rule_interpolate(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    (void)lib;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    const char *mode = str_arg(b, "mode", "nearest", err);
    if (!mode)
        return -1;
    int sp = x->ndim - 2;
    int need;       /* the rank a mode needs, 0 for any of 3-D to 5-D */
    int interp;     /* takes align_corners */
    if (!strcmp(mode, "nearest") || !strcmp(mode, "nearest-exact") || !strcmp(mode, "area"))
        need = 0, interp = 0;
    else if (!strcmp(mode, "linear"))
        need = 3, interp = 1;
    else if (!strcmp(mode, "bilinear") || !strcmp(mode, "bicubic"))
        need = 4, interp = 1;
    else if (!strcmp(mode, "trilinear"))
        need = 5, interp = 1;
    else
        return sj_err(err, "interpolate: unsupported mode '%.40s'", mode);
    if (x->ndim < 3 || x->ndim > 5 || (need && x->ndim != need))
        return sj_err(err, "interpolate: mode '%s' does not take %d-D input", mode, x->ndim);
    int ac;
    if (ba_get(b, "align_corners") && !interp)
        return sj_err(err, "align_corners option can only be set with the interpolating modes");
    if (sj_get_bool(b, "align_corners", 0, &ac, err))
        return -1;
    int aa;
    if (sj_get_bool(b, "antialias", 0, &aa, err))
        return -1;
    if (aa && strcmp(mode, "bilinear") != 0 && strcmp(mode, "bicubic") != 0)
        return sj_err(err, "Anti-alias option is restricted to bilinear and bicubic modes");
    /* nearest, bilinear and bicubic have uint8 kernels; the others need floats */
    int u8_ok = !strncmp(mode, "nearest", 7) || !strcmp(mode, "bilinear") || !strcmp(mode, "bicubic");
    if (!is_float(x) && !(u8_ok && x->dtype == DT_U8))
        return sj_err(err, "interpolate(mode='%s') is not implemented for %s", mode, dtype_info[x->dtype].name);
    const BoundArg *sa = ba_get(b, "size"), *fa = ba_get(b, "scale_factor");
    if (!sa == !fa)
        return sj_err(err, "only one of size or scale_factor should be defined");
    for (int i = 2; i < x->ndim; i++) {
        int empty = sj_dim_equals(x, i, 0, err);
        if (empty)
            return empty < 0 ? -1 : sj_err(err, "Input and output sizes should be greater than 0");
    }
    *out = *x;
    if (sa) {
        int64_t v[SJ_MAX_RANK];
        SymNode *syms[SJ_MAX_RANK];
        int n;
        if (sj_int_list_sym(sa, "size", v, syms, &n, SJ_MAX_RANK, err))
            return -1;
        if (n != 1 && n != sp)
            return sj_err(err, "Input and output must have the same number of spatial dimensions");
        for (int i = 0; i < sp; i++) {
            int k = n == 1 ? 0 : i;
            SymNode *s = sj_symctx ? syms[k] : NULL;
            if (s) {
                SymNode *one = sym_const(sj_symctx->env, 1);
                if (sj_require(one ? sym_ge(sj_symctx->env, s, one) : NULL, err) < 0)
                    return -1;
                if (sj_set_dim(out, 2 + i, s, err) < 0)
                    return -1;
            } else {
                if (v[k] <= 0)
                    return sj_err(err, "Input and output sizes should be greater than 0");
                out->size[2 + i] = v[k];
                out->sym[2 + i] = NULL;
            }
        }
    } else {
        double sc[SJ_MAX_RANK];
        if (floats_n(fa, sp, sc, err))
            return -1;
        for (int i = 0; i < sp; i++) {
            int r = scaled_dim(x, 2 + i, sc[i], out, err);
            if (r)
                return r < 0 ? -1 : sj_err(err, "Input and output sizes should be greater than 0");
        }
    }
    out->requires_grad = x->requires_grad;
    *nout = 1;
    return 0;
}

/* --------------------------------------------------------- addcmul, addcdiv ---- */

/* input + value * tensor1 * tensor2 (or / tensor2): the three broadcast and promote; value
 * is a weak scalar (eager casts a float value to an integer result). */
int rule_addc(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    if (lib != LIB_TORCH)
        return sj_err(err, "%s is a torch op", op_info[op].name);
    const TensorMeta *x = sj_tensor(b, "input", err);
    const TensorMeta *t1 = x ? sj_tensor(b, "tensor1", err) : NULL;
    const TensorMeta *t2 = t1 ? sj_tensor(b, "tensor2", err) : NULL;
    if (!t2)
        return -1;
    const BoundArg *ops[3] = {ba_get(b, "input"), ba_get(b, "tensor1"), ba_get(b, "tensor2")};
    DType d;
    if (promote_args(lib, ops, 3, 0, &d, NULL, err))
        return -1;
    DTypeCategory c = dtype_info[d].category;
    if (c == CAT_BOOL)
        return sj_err(err, "%s is not implemented for bool", op_info[op].name);
    if (op == OP_ADDCDIV && dtype_info[t1->dtype].category <= CAT_INT && dtype_info[t2->dtype].category <= CAT_INT)
        return sj_err(err, "Integer division with addcdiv is no longer supported");
    const BoundArg *v = ba_get(b, "value");
    if (v) {
        if (v->kind != BA_CONST || v->data)
            return sj_err(err, "%s: value must be a constant number", op_info[op].name);
        PyObject *o = v->value;
        int vc = PyBool_Check(o)      ? CAT_BOOL
                 : PyLong_Check(o)    ? CAT_INT
                 : PyFloat_Check(o)   ? CAT_FLOAT
                 : PyComplex_Check(o) ? CAT_COMPLEX
                                      : -1;
        if (vc < 0)
            return sj_err(err, "%s: value must be a number", op_info[op].name);
        if (vc == CAT_COMPLEX && c != CAT_COMPLEX)
            return sj_err(err, "%s: a complex value needs a complex result", op_info[op].name);
        /* eager converts value to an integer result type and refuses an overflow
         * (floating results compute in at least float32: no check) */
        double lim;
        switch (d) {
        case DT_U8:
            lim = 255;
            break;
        case DT_I8:
            lim = 127;
            break;
        case DT_I16:
            lim = 32767;
            break;
        case DT_I32:
            lim = 2147483647.0;
            break;
        case DT_I64:
            lim = 9.2e18;
            break;
        default:
            lim = HUGE_VAL;
        }
        double dv = vc == CAT_COMPLEX ? 0 : PyFloat_AsDouble(o);
        if (dv == -1.0 && PyErr_Occurred()) {
            sj_err_clear();
            return sj_err(err, "%s: value out of range", op_info[op].name);
        }
        if (dv > lim || dv < (d == DT_U8 ? -128 : -lim - 1))
            return sj_err(err, "value cannot be converted to type %s without overflow", dtype_info[d].name);
    }
    const TensorMeta *ms[3] = {x, t1, t2};
    sj_meta(out, lib, d);
    if (sj_broadcast(ms, 3, out, err))
        return -1;
    out->requires_grad = (unsigned char)sj_requires_grad(b);
    *nout = 1;
    return 0;
}

/* ---------------------------------------------------------------- Tensor.new ---- */

/* x.new(*sizes): an uninitialised tensor of x's dtype; x.new() is empty (0 elements).
 * The data forms (x.new([1, 2]), x.new(tensor), and x.new(torch.Size([2, 2])), which is
 * data too) are refused: only separate ints are sizes. */
int rule_tensor_new(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    if (lib != LIB_TORCH)
        return sj_err(err, "Tensor.new is a torch method");
    const BoundArg *s = ba_get(b, "size");
    sj_meta(out, lib, (DType)x->dtype);
    if (!s || (s->kind == BA_LIST && s->n == 0)) {
        out->ndim = 1;
        out->size[0] = 0;
        *nout = 1;
        return 0;
    }
    if (s->kind != BA_LIST)
        return sj_err(err, "Tensor.new: unsupported arguments");
    if (s->n == 1 && s->items[0].kind == BA_CONST && !s->items[0].data &&
        strcmp(Py_TYPE(s->items[0].value)->tp_name, "torch.Size") == 0)
        s = &s->items[0];   /* x.new(torch.Size([5, 8])) is a size (a tuple or list is data) */
    for (int i = 0; s->kind == BA_LIST && i < s->n; i++) {
        const BoundArg *it = &s->items[i];
        if (it->kind != BA_CONST || it->data || !PyLong_Check(it->value) || PyBool_Check(it->value))
            return sj_err(err, "Tensor.new with data is not supported");
    }
    int64_t v[SJ_MAX_RANK + 1];
    SymNode *syms[SJ_MAX_RANK + 1];
    int n;
    if (sj_int_list_sym(s, "size", v, syms, &n, SJ_MAX_RANK + 1, err))
        return -1;
    if (n > SJ_MAX_RANK)
        return sj_err(err, "rank above %d is not supported", SJ_MAX_RANK);
    out->ndim = (unsigned char)n;
    for (int i = 0; i < n; i++) {
        if (v[i] < 0)
            return sj_err(err, "Trying to create tensor with negative dimension %lld", (long long)v[i]);
        out->size[i] = v[i];
        out->sym[i] = sj_symctx ? syms[i] : NULL;
    }
    *nout = 1;
    return 0;
}

/* The hints of a list of constants (some of them symbolic sizes), nested lists included, as
 * a new Python list; NULL when some item is a tensor or a value computed in the graph (no
 * Python error is left set). */
static PyObject *hint_list(const BoundArg *a, int depth)
{
    if (a->kind == BA_CONST && !a->data && a->value)
        return Py_NewRef(a->value);
    if (a->kind != BA_LIST || depth >= SJ_MAX_RANK)
        return NULL;
    PyObject *l = PyList_New(a->n);
    for (int i = 0; l && i < a->n; i++) {
        PyObject *it = hint_list(&a->items[i], depth + 1);
        if (!it) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, i, it);   /* steals it */
    }
    if (!l)
        sj_err_clear();
    return l;
}

/* torch.tensor(data) / numpy.array(data), and x.new_tensor(data) (x's dtype): the data's
 * shape and kind (rules_factory.c). A symbolic size among the data (torch.tensor([n, 2]))
 * is a value, not a size: the rule reads the hints, and the output's shape is static. */
int rule_tensor_data(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    int k = -1;
    for (int i = 0; i < b->n; i++)
        if (!strcmp(b->names[i], "data"))
            k = i;
    const BoundArg *data = k >= 0 ? &b->args[k] : NULL;
    if (!data || !(data->kind == BA_LIST || (data->kind == BA_CONST && data->sym)))
        return rule_tensor_const(op, lib, b, out, nout, err);
    PyObject *hints = hint_list(data, 0);   /* new, or NULL */
    if (!hints)
        return rule_tensor_const(op, lib, b, out, nout, err);
    BoundArgs nb = *b;
    BoundArg h = {BA_CONST, NULL, hints, 0, NULL, NULL, NULL, 0};
    nb.args[k] = h;
    int r = rule_tensor_const(op, lib, &nb, out, nout, err);
    Py_DECREF(hints);
    for (int i = 0; r == 0 && i < *nout; i++)
        memset(out[i].sym, 0, sizeof out[i].sym);
    return r;
}

/* ------------------------------------------------------------- random fills ---- */

/* A constant Python number parameter (absent: dflt; *given says which). */
static int num_arg(const BoundArgs *b, const char *name, double dflt, double *v, int *given, ShapeErr *err)
{
    const BoundArg *a = ba_get(b, name);
    *given = a != NULL;
    if (!a) {
        *v = dflt;
        return 0;
    }
    if (a->kind != BA_CONST || a->data || PyBool_Check(a->value) ||
        !(PyLong_Check(a->value) || PyFloat_Check(a->value)))
        return sj_err(err, "%s must be a constant number", name);
    *v = PyFloat_AsDouble(a->value);
    if (*v == -1.0 && PyErr_Occurred()) {
        sj_err_clear();
        return sj_err(err, "%s is out of range", name);
    }
    return 0;
}

/* x.uniform_(a, b), normal_, log_normal_, cauchy_, exponential_, geometric_, bernoulli_,
 * random_: x keeps its shape and dtype. Only the arguments eager accepts pass: the
 * continuous distributions need a floating x, and each parameter its range. */
int rule_random_fill(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    if (lib != LIB_TORCH)
        return sj_err(err, "random fills are torch methods");
    const char *dist = str_arg(b, "dist", "", err);
    if (!dist)
        return -1;
    DTypeCategory c = dtype_info[x->dtype].category;
    if (c == CAT_COMPLEX)
        return sj_err(err, "%s_ is not implemented for complex", dist);
    double a, bb;
    int ga, gb;
    if (!strcmp(dist, "bernoulli")) {
        const BoundArg *p = ba_get(b, "a");
        if (p && p->kind == BA_TENSOR) {
            /* a tensor of probabilities: one per element (the same shape) */
            const TensorMeta *pm = p->meta;
            if (!is_float(pm) || pm->ndim != x->ndim)
                return sj_err(err, "bernoulli_: p must be a floating tensor of the input's shape");
            for (int i = 0; i < x->ndim; i++) {
                int eq = sj_dims_equal(pm, i, x, i, err);
                if (eq <= 0)
                    return eq < 0 ? -1 : sj_err(err, "bernoulli_: p must have the input's shape");
            }
        } else {
            if (num_arg(b, "a", 0.5, &a, &ga, err))
                return -1;
            if (!(a >= 0 && a <= 1))
                return sj_err(err, "bernoulli_ expects p to be in [0, 1]");
        }
    } else if (!strcmp(dist, "random")) {
        if (num_arg(b, "a", 0, &a, &ga, err) || num_arg(b, "b", 0, &bb, &gb, err))
            return -1;
        /* random_(to) is random_(0, to) */
        if (ga && !gb) {
            bb = a;
            a = 0;
            gb = 1;
        }
        /* the bounds eager accepts without question: within the dtype's exact integers */
        double lo, hi;
        switch (x->dtype) {
        case DT_BOOL:
            lo = 0, hi = 2;
            break;
        case DT_U8:
            lo = 0, hi = 256;
            break;
        case DT_I8:
            lo = -128, hi = 128;
            break;
        case DT_I16:
            lo = -32768, hi = 32768;
            break;
        case DT_I32:
            lo = -2147483648.0, hi = 2147483648.0;
            break;
        case DT_F16:
            lo = -2048, hi = 2048;
            break;
        case DT_BF16:
            lo = -256, hi = 256;
            break;
        case DT_F32:
            lo = -16777216.0, hi = 16777216.0;
            break;
        default:
            lo = -9007199254740992.0, hi = 9007199254740992.0;
        }
        if (a != floor(a) || bb != floor(bb))
            return sj_err(err, "random_: from and to must be integers");
        if (gb && !(a < bb))
            return sj_err(err, "random_ expects 'from' to be less than 'to'");
        if (a < lo || (gb && bb > hi))
            return sj_err(err, "random_: from/to out of bounds for %s", dtype_info[x->dtype].name);
    } else if (!strcmp(dist, "geometric")) {
        if (num_arg(b, "a", 0, &a, &ga, err))
            return -1;
        if (!ga || !(a > 0 && a < 1))
            return sj_err(err, "geometric_ expects p to be in (0, 1)");
        if (c == CAT_BOOL)
            return sj_err(err, "geometric_ is not implemented for bool");
    } else {
        /* the continuous distributions */
        if (c != CAT_FLOAT)
            return sj_err(err, "%s_ needs a floating tensor, got %s", dist, dtype_info[x->dtype].name);
        double da = 0, db = 1;
        if (!strcmp(dist, "log_normal"))
            da = 1, db = 2;
        if (!strcmp(dist, "exponential"))
            da = 1;
        if (num_arg(b, "a", da, &a, &ga, err) || num_arg(b, "b", db, &bb, &gb, err))
            return -1;
        if (!isfinite(a) || !isfinite(bb))
            return sj_err(err, "%s_: parameters must be finite", dist);
        if (!strcmp(dist, "uniform") && !(a <= bb))
            return sj_err(err, "uniform_ expects to return a [from, to) range");
        if (!strcmp(dist, "normal") && !(bb >= 0))
            return sj_err(err, "normal expects std >= 0.0");
        if ((!strcmp(dist, "log_normal") || !strcmp(dist, "cauchy")) && !(bb > 0))
            return sj_err(err, "%s_ expects a positive scale", dist);
        if (!strcmp(dist, "exponential") && !(a > 0))
            return sj_err(err, "exponential_ expects lambda > 0.0");
    }
    *out = *x;
    *nout = 1;
    return 0;
}
