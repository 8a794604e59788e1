/* torch.nn.functional.conv1d of a depthwise convolution with a short kernel (groups equal
 * to the channels, one input channel per group, kernel of at most DW_MAX_K taps, stride 1):
 * the causal convolutions of state-space and recurrent models (Mamba's, RecurrentGemma's,
 * kernel 4). Captured as what it computes, a sum of shifted products,
 *
 *     y = sum_k pad(x)[..., k*d : k*d + L_out] * w[:, 0, k:k+1]  (+ bias[:, None])
 *
 * so the cpu backend fuses it into one pointwise kernel with what follows (the
 * activation, the slice back to the sequence length), where a library convolution of a
 * few thousand multiply-adds costs more in its setup than in its arithmetic. The sum's
 * order of additions is the taps' order; eager's kernel may add in another, so results
 * agree to rounding. Every other form of the call is recorded as the library call. */
#include "capture.h"
#include "../core/errors.h"

#define DW_MAX_K 8

/* An int parameter given as an int or a one-element tuple / list of one: 0 and *v, or 1
 * when it is not a constant of that form. */
static int const_int1(Capture *c, Var *a, int64_t dflt, int64_t *v)
{
    if (!a) {
        *v = dflt;
        return 0;
    }
    if (!var_deep_const(a))
        return 1;
    PyObject *o = var_to_py(c, a);   /* new */
    if (!o) {
        sj_err_clear();
        return 1;
    }
    PyObject *item = o;
    if ((PyTuple_Check(o) || PyList_Check(o)) && PySequence_Size(o) == 1)
        item = PySequence_Fast_GET_ITEM(o, 0);   /* borrowed from o */
    int bad = !PyLong_CheckExact(item);
    if (!bad) {
        *v = PyLong_AsLongLong(item);
        if (*v == -1 && PyErr_Occurred()) {
            sj_err_clear();
            bad = 1;
        }
    }
    Py_DECREF(o);
    return bad;
}

/* slice(start, stop), None where has_* is 0: a new reference or NULL. */
static PyObject *slice_of(int has_start, int64_t start, int has_stop, int64_t stop)
{
    PyObject *a = has_start ? PyLong_FromLongLong(start) : Py_NewRef(Py_None);
    PyObject *b = has_stop ? PyLong_FromLongLong(stop) : Py_NewRef(Py_None);
    PyObject *sl = a && b ? PySlice_New(a, b, NULL) : NULL;
    Py_XDECREF(a);
    Py_XDECREF(b);
    return sl;
}

/* A constant var for a subscript key (k: a new reference, or NULL with an exception):
 * NULL with the failure recorded. */
static Var *key(Capture *c, PyObject *k)
{
    if (!k) {
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    return var_const_steal(c, k);
}

Var *conv_depthwise_as_sum(Capture *c, Var **args, int32_t nargs, PyObject *kwnames, int *handled)
{
    static const char *const names[] = {"input", "weight", "bias", "stride", "padding", "dilation", "groups"};
    *handled = 0;
    Var *p[7] = {NULL};
    int32_t nkw = kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0, npos = nargs - nkw;
    if (npos > 7)
        return NULL;
    for (int32_t i = 0; i < npos; i++)
        p[i] = args[i];
    for (int32_t k = 0; k < nkw; k++) {
        const char *n = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, k));
        int j = 0;
        while (n && j < 7 && strcmp(n, names[j]))
            j++;
        if (!n || j == 7 || p[j]) {
            sj_err_clear();
            return NULL;   /* the library call binds it, or raises as eager */
        }
        p[j] = args[npos + k];
    }
    Var *x = p[0], *w = p[1], *b = p[2] && !(var_is_const(p[2]) && p[2]->obj == Py_None) ? p[2] : NULL;
    if (!x || !w || x->kind != VK_TENSOR || w->kind != VK_TENSOR)
        return NULL;
    const TensorMeta *xm = &x->u.t.meta, *wm = &w->u.t.meta;
    if (xm->lib != LIB_TORCH || wm->lib != LIB_TORCH || xm->ndim != 3 || wm->ndim != 3 || xm->dtype != wm->dtype ||
        (xm->dtype != DT_F32 && xm->dtype != DT_F64) || xm->sym[1] || wm->sym[0] || wm->sym[1] || wm->sym[2])
        return NULL;
    int64_t ch = xm->size[1], kk = wm->size[2], stride, pad, dil, groups;
    if (wm->size[0] != ch || wm->size[1] != 1 || kk < 1 || kk > DW_MAX_K || ch < 2)
        return NULL;
    if (const_int1(c, p[3], 1, &stride) || const_int1(c, p[5], 1, &dil) || const_int1(c, p[6], 1, &groups))
        return NULL;
    if (p[4] && var_is_const(p[4]) && PyUnicode_Check(p[4]->obj)) {
        if (PyUnicode_CompareWithASCIIString(p[4]->obj, "valid"))
            return NULL;   /* 'same': the library call */
        pad = 0;
    } else if (const_int1(c, p[4], 0, &pad)) {
        return NULL;
    }
    if (stride != 1 || groups != ch || dil < 1 || pad < 0)
        return NULL;
    if (b) {
        const TensorMeta *bm = &b->u.t.meta;
        if (b->kind != VK_TENSOR || bm->lib != LIB_TORCH || bm->ndim != 1 || bm->sym[0] || bm->size[0] != ch ||
            bm->dtype != xm->dtype)
            return NULL;
    }
    /* the output length L + 2p - d(K-1) must be positive: always when 2p covers the
     * kernel's reach, else only for the static length seen (the library call otherwise
     * raises its own error) */
    int64_t reach = dil * (kk - 1);
    if (2 * pad < reach && (xm->sym[2] || xm->size[2] + 2 * pad - reach < 1))
        return NULL;
    *handled = 1;
    Var *xp = x;
    if (pad > 0) {
        Var *pa[2] = {x, key(c, Py_BuildValue("[LL]", (long long)pad, (long long)pad))};
        if (!pa[1] || !(xp = op_record_path(c, "torch.nn.functional.pad", pa, 2)))
            return NULL;
    }
    int nb_mul = op_nb_index("mul"), nb_add = op_nb_index("add");
    Var *y = NULL;
    for (int64_t k = 0; k < kk; k++) {
        int64_t tail = dil * (kk - 1 - k);   /* elements past this tap's window */
        Var *xkey = key(c, Py_BuildValue("(ON)", Py_Ellipsis, slice_of(1, dil * k, tail != 0, -tail)));
        Var *xk = xkey ? op_subscr(c, xp, xkey) : NULL;
        Var *wkey = xk ? key(c, Py_BuildValue("(NiN)", slice_of(0, 0, 0, 0), 0, slice_of(1, k, 1, k + 1))) : NULL;
        Var *wk = wkey ? op_subscr(c, w, wkey) : NULL;   /* (C, 1): beside the length */
        Var *t = wk ? op_binary(c, nb_mul, xk, wk) : NULL;
        y = t && y ? op_binary(c, nb_add, y, t) : t;
        if (!y)
            return NULL;
    }
    if (b) {
        Var *bkey = key(c, Py_BuildValue("(NO)", slice_of(0, 0, 0, 0), Py_None));
        Var *bk = bkey ? op_subscr(c, b, bkey) : NULL;
        y = bk ? op_binary(c, nb_add, y, bk) : NULL;
    }
    return y;
}
