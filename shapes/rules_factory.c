/* Factories: zeros/ones/empty/full, the *_like forms, arange, linspace, eye, and
 * tensor/array construction from Python data. */
#include <math.h>
#include <string.h>

#include "promote.h"
#include "rules.h"
#include "rules_util.h"
#include "sym.h"
#include "../core/errors.h"

/* The dtype a library gives a Python scalar when it makes a tensor of it. */
static int dtype_of_scalar(Lib lib, PyObject *v, DType *out, ShapeErr *err)
{
    if (PyBool_Check(v))
        *out = DT_BOOL;
    else if (PyLong_Check(v))
        *out = DT_I64;
    else if (PyFloat_Check(v))
        *out = lib == LIB_TORCH ? meta_torch_default_float : DT_F64;
    else if (PyComplex_Check(v))
        *out = (lib == LIB_TORCH && meta_torch_default_float != DT_F64) ? DT_C64 : DT_C128;
    else
        return sj_err(err, "unsupported value of type %.60s", Py_TYPE(v)->tp_name);
    return 0;
}

static int out_dtype(Lib lib, const BoundArgs *b, DType dflt, DType *out, ShapeErr *err)
{
    *out = dflt;
    if (sj_dtype_or(b, "dtype", lib, out, err))
        return -1;
    if (lib == LIB_NUMPY && *out == DT_BF16)
        return sj_err(err, "numpy has no bfloat16");
    return 0;
}

static int check_device(const BoundArgs *b, ShapeErr *err)
{
    const BoundArg *d = ba_get(b, "device");
    if (!d)
        return 0;
    if (d->kind != BA_CONST)
        return sj_err(err, "device must be constant");
    return sj_cpu_device(d->value, err);
}

/* A new tensor of lib: the dtype argument (absent: dflt) and the device (cpu only). Only
 * out's lib and dtype are set (sj_meta). 0, or -1 with err set. */
static int factory_meta(Lib lib, const BoundArgs *b, DType dflt, TensorMeta *out, ShapeErr *err)
{
    DType dt;
    if (out_dtype(lib, b, dflt, &dt, err) || check_device(b, err))
        return -1;
    sj_meta(out, lib, dt);
    return 0;
}

/* The end of a factory rule: requires_grad= (torch, floating dtypes only) and one output. */
static int factory_done(Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    int rg;
    if (sj_get_bool(b, "requires_grad", 0, &rg, err))
        return -1;
    if (rg && lib == LIB_TORCH && dtype_info[out->dtype].category < CAT_FLOAT)
        return sj_err(err, "Only Tensors of floating point and complex dtype can require "
                           "gradients");
    out->requires_grad = (unsigned char)(rg && lib == LIB_TORCH);
    *nout = 1;
    return 0;
}

/* Sizes of a new tensor must be >= 0; a symbolic one is guarded so (torch checks it
 * on the symbol: check_size_nonnegative). */
static int check_sizes(const int64_t *size, SymNode *const *syms, int n, ShapeErr *err)
{
    for (int i = 0; i < n; i++) {
        if (size[i] < 0)
            return sj_err(err, "negative dimensions are not allowed");
        if (!syms[i])
            continue;
        SymNode *zero = sym_const(sj_symctx->env, 0);
        if (!zero || sj_require(sym_ge(sj_symctx->env, syms[i], zero), err) < 0)
            return zero ? -1 : sj_sym_error(err);
    }
    return 0;
}

int rule_factory(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    int64_t size[SJ_MAX_RANK];
    SymNode *syms[SJ_MAX_RANK];
    int n;
    const BoundArg *sa = ba_get(b, "size");
    if (op == OP_FULL && lib == LIB_TORCH && sa && sa->kind == BA_CONST && PyLong_Check(sa->value))
        return sj_err(err, "full(): argument 'size' must be tuple of ints, not int");
    if (!sa)
        return sj_err(err, "size is required");
    if (sj_int_list_sym(sa, "size", size, syms, &n, SJ_MAX_RANK, err) || check_sizes(size, syms, n, err))
        return -1;
    DType dflt = lib == LIB_TORCH ? meta_torch_default_float : DT_F64;
    if (op == OP_FULL) {
        const BoundArg *fv = ba_get(b, "fill_value");
        if (!fv)
            return sj_err(err, "full needs a fill_value");
        if (fv->kind == BA_TENSOR) {
            if (fv->meta->ndim != 0)
                return sj_err(err, "fill_value must be a scalar");
            dflt = (DType)fv->meta->dtype;
        } else if (fv->kind != BA_CONST || dtype_of_scalar(lib, fv->value, &dflt, err)) {
            return sj_err(err, "fill_value must be a number");
        }
    }
    if (factory_meta(lib, b, dflt, out, err))
        return -1;
    sj_set_shape(out, size, syms, n);
    return factory_done(lib, b, out, nout, err);
}

int rule_factory_like(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    DType dt;
    if (out_dtype(lib, b, (DType)x->dtype, &dt, err) || check_device(b, err))
        return -1;
    *out = *x;
    out->dtype = (unsigned char)dt;
    out->np_scalar = 0;
    out->requires_grad = 0;
    const BoundArg *shape = ba_get(b, "shape");
    if (shape) {
        /* numpy's *_like(a, shape=...) */
        int64_t size[SJ_MAX_RANK];
        SymNode *syms[SJ_MAX_RANK];
        int n;
        if (sj_int_list_sym(shape, "shape", size, syms, &n, SJ_MAX_RANK, err) || check_sizes(size, syms, n, err))
            return -1;
        sj_set_shape(out, size, syms, n);
    }
    return factory_done(lib, b, out, nout, err);
}

/* torch.rand / randn and their _like forms: a factory whose values come from the default
 * generator (the node runs the call itself); torch has them for floating dtypes only. */
int rule_random_factory(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    if (lib != LIB_TORCH)
        return sj_err(err, "random factories are torch functions");
    int r =
        op == OP_RAND_LIKE ? rule_factory_like(op, lib, b, out, nout, err) : rule_factory(op, lib, b, out, nout, err);
    if (r)
        return r;
    /* torch raises for other dtypes: rand always, randn only when there is something to
     * draw */
    const BoundArg *dist = ba_get(b, "dist");
    int normal = dist && dist->kind == BA_CONST && PyUnicode_Check(dist->value) &&
                 PyUnicode_CompareWithASCIIString(dist->value, "normal") == 0;
    int empty = 0;
    for (int i = 0; i < out->ndim; i++)
        empty |= out->size[i] == 0 && !out->sym[i];
    if (dtype_info[out->dtype].category != CAT_FLOAT && !(normal && empty))
        return sj_err(err, "random values of dtype %s: torch draws floating values only", dtype_info[out->dtype].name);
    return 0;
}

/* A constant real number; *is_float tells float from int (bools count as ints). */
static int number(const BoundArg *a, const char *what, double *v, int *is_float, ShapeErr *err)
{
    if (!a || a->kind != BA_CONST)
        return sj_err(err, "%s must be a constant number", what);
    if (a->data)
        return sj_err(err, "%s is data (computed in the graph): the size it decides is not known", what);
    PyObject *o = a->value;
    if (PyFloat_Check(o)) {
        *is_float = 1;
        *v = PyFloat_AS_DOUBLE(o);
        return 0;
    }
    if (PyLong_Check(o)) {
        *v = PyLong_AsDouble(o);
        if (*v == -1.0 && PyErr_Occurred()) {
            sj_err_clear();
            return sj_err(err, "%s is out of range", what);
        }
        return 0;
    }
    return sj_err(err, "%s must be a number, not %.60s", what, Py_TYPE(o)->tp_name);
}

/* arange's length with symbolic ints (torch's ref: integer arguments give
 * (end - start + step - sign(step)) // step, after checking end and start agree with the
 * step's sign, guarded). A symbolic step is specialised; so are the symbols of float
 * arguments and numpy's (which clamps at 0): *len_sym then stays NULL. */
static int arange_sym(Lib lib, const BoundArg *const args[3], SymNode **len_sym, ShapeErr *err)
{
    *len_sym = NULL;
    int64_t v;
    if (args[2] && args[2]->kind == BA_CONST && args[2]->sym && sj_pin(args[2]->sym, &v, err) < 0)
        return -1;
    int ints = lib == LIB_TORCH;
    for (int k = 0; k < 3; k++)
        ints &=
            !args[k] || (args[k]->kind == BA_CONST && PyLong_Check(args[k]->value) && !PyBool_Check(args[k]->value));
    if (!ints) {
        for (int k = 0; k < 3; k++)
            if (args[k] && args[k]->kind == BA_CONST && args[k]->sym && sj_pin(args[k]->sym, &v, err) < 0)
                return -1;
        return 0;
    }
    SymEnv *env = sj_symctx->env;
    SymNode *node[3];   /* start, end, step (pinned: a constant) */
    for (int k = 0; k < 3; k++) {
        if (k < 2 && args[k] && args[k]->sym) {
            node[k] = args[k]->sym;
        } else {
            int64_t dflt = k == 2 ? 1 : 0;
            if (args[k] && sj_int(args[k], k == 2 ? "step" : "start", &dflt, err))
                return -1;
            if (!(node[k] = sym_const(env, dflt)))
                return sj_sym_error(err);
        }
    }
    int64_t step = node[2]->value;   /* a constant: a symbolic step was pinned above */
    if (step == 0)
        return sj_err(err, "step must be nonzero");
    int ok;
    if (sj_decide(step > 0 ? sym_ge(env, node[1], node[0]) : sym_le(env, node[1], node[0]), &ok, err) < 0)
        return -1;
    if (!ok)
        return sj_err(err, "upper bound and larger bound inconsistent with step sign");
    SymNode *diff = sym_sub(env, node[1], node[0]), *adj = sym_const(env, step - (step > 0 ? 1 : -1));
    SymNode *span = diff && adj ? sym_add(env, diff, adj) : NULL;
    *len_sym = span ? sym_floordiv(env, span, node[2]) : NULL;
    return *len_sym ? 0 : sj_sym_error(err);
}

int rule_arange(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    double start = 0, end, step = 1;
    int fl = 0;
    const BoundArg *a0 = ba_get(b, "start"), *a1 = ba_get(b, "end"), *a2 = ba_get(b, "step");
    if (!a0 && !a1)
        return sj_err(err, "arange needs an end");
    SymNode *len_sym = NULL;
    if (sj_symctx && shapes_args_symbolic(b)) {
        const BoundArg *args[3] = {a1 ? a0 : NULL, a1 ? a1 : a0, a2};   /* arange(n): end n */
        if (arange_sym(lib, args, &len_sym, err) < 0)
            return -1;
    }
    if (a1) {
        if ((a0 && number(a0, "start", &start, &fl, err)) || number(a1, "end", &end, &fl, err))
            return -1;
    } else if (number(a0, "end", &end, &fl, err)) {
        return -1;
    }
    if (a2 && number(a2, "step", &step, &fl, err))
        return -1;
    if (step == 0)
        return sj_err(err, "step must be nonzero");
    double len = ceil((end - start) / step);
    if (len < 0) {
        if (lib == LIB_TORCH)
            return sj_err(err, "upper bound and larger bound inconsistent with step sign");
        len = 0;
    }
    if (!isfinite(len) || len > 9.0e15)
        return sj_err(err, "arange: too many elements");
    DType dflt = fl ? (lib == LIB_TORCH ? meta_torch_default_float : DT_F64) : DT_I64;
    if (factory_meta(lib, b, dflt, out, err))
        return -1;
    out->ndim = 1;
    out->size[0] = (int64_t)len;
    if (len_sym && sj_set_dim(out, 0, len_sym, err) < 0)
        return -1;
    return factory_done(lib, b, out, nout, err);
}

int rule_linspace(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    double v;
    int fl = 0;
    /* the bounds decide the values, not the size: a graph scalar (data) is fine */
    const BoundArg *start = ba_get(b, "start"), *end = ba_get(b, "end");
    if ((!(start && start->data) && number(start, "start", &v, &fl, err)) ||
        (!(end && end->data) && number(end, "end", &v, &fl, err)))
        return -1;
    int64_t steps;
    if (sj_get_int(b, "steps", lib == LIB_NUMPY ? 50 : -1, &steps, err))
        return -1;
    if (steps < 0)
        return sj_err(err, lib == LIB_TORCH ? "linspace needs steps >= 0" : "Number of samples must be non-negative.");
    int retstep;
    if (sj_get_bool(b, "retstep", 0, &retstep, err))
        return -1;
    if (retstep)
        return sj_err(err, "linspace(retstep=True) is not supported");
    if (factory_meta(lib, b, lib == LIB_TORCH ? meta_torch_default_float : DT_F64, out, err))
        return -1;
    out->ndim = 1;
    out->size[0] = steps;
    return factory_done(lib, b, out, nout, err);
}

int rule_eye(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    int64_t n, m;
    SymNode *ns = NULL, *ms = NULL;   /* symbolic sizes (np.eye(x.shape[0])) stay symbolic */
    const BoundArg *ma = ba_get(b, "m");
    if (sj_int_sym(ba_get(b, "n"), "n", &n, &ns, err))
        return -1;
    if (ma ? sj_int_sym(ma, "m", &m, &ms, err) : (m = n, ms = ns, 0))
        return -1;
    if (n < 0 || m < 0)
        return sj_err(err, "negative dimensions are not allowed");
    if (factory_meta(lib, b, lib == LIB_TORCH ? meta_torch_default_float : DT_F64, out, err))
        return -1;
    out->ndim = 2;
    out->size[0] = n;
    out->size[1] = m;
    out->sym[0] = ns;
    out->sym[1] = ms;
    return factory_done(lib, b, out, nout, err);
}

/* Shape and widest scalar category of nested Python lists/tuples of numbers. */
static int data_shape(Lib lib, PyObject *v, int depth, TensorMeta *m, int *have_shape, int *cat, ShapeErr *err)
{
    if (PyRange_Check(v)) {
        /* range(n): a run of ints, a list's shape */
        Py_ssize_t n = PyObject_Size(v);
        if (n < 0) {
            sj_err_clear();
            return sj_err(err, "range too long");
        }
        if (depth >= SJ_MAX_RANK)
            return sj_err(err, "rank above %d is not supported", SJ_MAX_RANK);
        if (*have_shape) {
            if (depth >= m->ndim || m->size[depth] != n || (n && depth + 1 != m->ndim))
                return sj_err(err, "the nested sequences have inhomogeneous lengths");
        } else {
            m->size[depth] = n;
            m->ndim = (unsigned char)(depth + 1);
            *have_shape = n > 0;
        }
        if (n > 0) {
            *have_shape = 1;
            if (*cat < CAT_INT)
                *cat = CAT_INT;
        }
        return 0;
    }
    if (PyList_Check(v) || PyTuple_Check(v)) {
        if (depth >= SJ_MAX_RANK)
            return sj_err(err, "rank above %d is not supported", SJ_MAX_RANK);
        Py_ssize_t n = PySequence_Fast_GET_SIZE(v);
        if (*have_shape) {
            if (depth >= m->ndim || m->size[depth] != n)
                return sj_err(err, "the nested sequences have inhomogeneous lengths");
        } else {
            m->size[depth] = n;
            m->ndim = (unsigned char)(depth + 1);
        }
        if (n == 0) {
            *have_shape = 1;
            return 0;
        }
        for (Py_ssize_t i = 0; i < n; i++)
            if (data_shape(lib, PySequence_Fast_GET_ITEM(v, i), depth + 1, m, have_shape, cat, err))
                return -1;
        return 0;
    }
    if (*have_shape && depth != m->ndim)
        return sj_err(err, "the nested sequences have inhomogeneous lengths");
    if (!*have_shape) {
        m->ndim = (unsigned char)depth;
        *have_shape = 1;
    }
    int c = PyBool_Check(v)      ? CAT_BOOL
            : PyLong_Check(v)    ? CAT_INT
            : PyFloat_Check(v)   ? CAT_FLOAT
            : PyComplex_Check(v) ? CAT_COMPLEX
                                 : -1;
    if (c < 0)
        return sj_err(err, "data of type %.60s is not supported", Py_TYPE(v)->tp_name);
    if (c > *cat)
        *cat = c;
    return 0;
}

int rule_tensor_const(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    const BoundArg *data = ba_get(b, "data");
    if (!data)
        return sj_err(err, "missing data");
    int64_t ndmin;
    if (sj_get_int(b, "ndmin", 0, &ndmin, err))
        return -1;
    if (ndmin > 0)
        return sj_err(err, "ndmin is not supported");
    if (check_device(b, err))
        return -1;
    /* x.new_tensor(data) takes x's dtype unless dtype= says otherwise */
    const TensorMeta *like = op == OP_NEW_TENSOR ? sj_tensor(b, "input", err) : NULL;
    if (op == OP_NEW_TENSOR && !like)
        return -1;
    if (data->kind == BA_TENSOR) {
        DType dt;
        if (out_dtype(lib, b, like ? (DType)like->dtype : (DType)data->meta->dtype, &dt, err))
            return -1;
        if ((Lib)data->meta->lib != lib)
            return sj_err(err, "converting between torch and numpy is not supported");
        *out = *data->meta;
        out->dtype = (unsigned char)dt;
        out->np_scalar = 0;
        out->requires_grad = 0;
    } else if (data->kind == BA_CONST) {
        TensorMeta m;
        sj_meta(&m, lib, DT_F32);
        int have = 0, cat = -1;
        if (data_shape(lib, data->value, 0, &m, &have, &cat, err))
            return -1;
        DType dflt;
        switch (cat) {
        case CAT_BOOL:
            dflt = DT_BOOL;
            break;
        case CAT_INT:
            dflt = DT_I64;
            break;
        case CAT_COMPLEX:
            dflt = (lib == LIB_TORCH && meta_torch_default_float != DT_F64) ? DT_C64 : DT_C128;
            break;
        default:    /* floats, and empty data */
            dflt = lib == LIB_TORCH ? meta_torch_default_float : DT_F64;
        }
        DType dt;
        if (out_dtype(lib, b, like ? (DType)like->dtype : dflt, &dt, err))
            return -1;
        *out = m;
        out->dtype = (unsigned char)dt;
    } else {
        return sj_err(err, "building a tensor from a sequence of tensors is not supported");
    }
    return factory_done(lib, b, out, nout, err);
}

/* x.new_ones(size) / new_zeros / new_empty / new_full(size, fill_value): the given size
 * (a tuple or varargs), x's dtype unless dtype= says otherwise. */
int rule_new_factory(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    const BoundArg *s = ba_get(b, "size");
    int64_t shape[SJ_MAX_RANK + 1];
    SymNode *syms[SJ_MAX_RANK + 1];
    int n = 0;
    if (!s)
        return sj_err(err, "new_*() needs a size");
    if (sj_int_list_sym(s, "size", shape, syms, &n, SJ_MAX_RANK + 1, err))
        return -1;
    if (n > SJ_MAX_RANK)
        return sj_err(err, "rank above %d is not supported", SJ_MAX_RANK);
    for (int i = 0; i < n; i++)
        if (shape[i] < 0)
            return sj_err(err, "Trying to create tensor with negative dimension %lld", (long long)shape[i]);
    if (check_sizes(shape, syms, n, err))
        return -1;
    DType dt = (DType)x->dtype;
    int given = 0;
    if (sj_get_dtype(b, "dtype", lib, &dt, &given, err))
        return -1;
    if (!given) {
        const BoundArg *fv = ba_get(b, "fill_value");
        (void)fv;   /* new_full keeps x's dtype whatever the fill value is */
    }
    sj_meta(out, lib, dt);
    out->ndim = (unsigned char)n;
    for (int i = 0; i < n; i++) {
        out->size[i] = shape[i];
        out->sym[i] = syms[i];
    }
    int rg = 0;
    if (sj_get_bool(b, "requires_grad", 0, &rg, err))
        return -1;
    out->requires_grad = (unsigned char)rg;
    *nout = 1;
    return 0;
}
