/* Indexing: x[index] and x[index] = value.
 *
 * Basic indexing (ints, slices, None, Ellipsis and tuples of them) is fully supported.
 * Advanced (integer) indices broadcast together, with numpy's and torch's placement rules.
 * Boolean masks give data-dependent sizes and are refused. */
#include <string.h>

#include "rules.h"
#include "rules_util.h"
#include "sym.h"
#include "../core/errors.h"

typedef enum { IX_INT, IX_SLICE, IX_NONE, IX_ELLIPSIS, IX_ADV } IxKind;

typedef struct {
    IxKind kind;
    PyObject *obj;              /* IX_INT/IX_SLICE: the constant (borrowed); NULL for an
                                   int we only know the type of (a numpy integer scalar) */
    SymNode *sym;               /* IX_INT: a symbolic index (obj is its hint), else NULL */
    SymNode *const *slice_sym;  /* IX_SLICE: symbolic start/stop/step (BoundArg.slice_sym) */
    int adv_ndim;               /* IX_ADV: the index's shape */
    int64_t adv_size[SJ_MAX_RANK];
    SymNode *adv_sym[SJ_MAX_RANK];
} IxItem;

#define MAX_ITEMS (SJ_MAX_RANK * 2 + 2)

static int is_int_const(PyObject *v)
{
    return !PyBool_Check(v) && !PyFloat_Check(v) && PyIndex_Check(v) && !PySlice_Check(v);
}

static int classify_const(PyObject *v, IxItem *it, ShapeErr *err)
{
    memset(it, 0, sizeof *it);
    it->obj = v;
    if (v == Py_None) {
        it->kind = IX_NONE;
    } else if (v == Py_Ellipsis) {
        it->kind = IX_ELLIPSIS;
    } else if (PySlice_Check(v)) {
        it->kind = IX_SLICE;
    } else if (PyBool_Check(v)) {
        return sj_err(err, "indexing with a bool is not supported");
    } else if (is_int_const(v)) {
        it->kind = IX_INT;
    } else if (PyList_Check(v)) {
        Py_ssize_t n = PyList_GET_SIZE(v);
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *e = PyList_GET_ITEM(v, i);
            if (PyBool_Check(e))
                return sj_err(err, "a boolean mask index gives a data-dependent shape");
            if (!is_int_const(e))
                return sj_err(err, "only lists of ints are supported as indices");
        }
        it->kind = IX_ADV;
        it->adv_ndim = 1;
        it->adv_size[0] = n;
    } else {
        return sj_err(err, "index of type %.60s is not supported", Py_TYPE(v)->tp_name);
    }
    return 0;
}

/* A bound constant item: classify_const plus its symbols. */
static int classify_bound(const BoundArg *a, IxItem *it, ShapeErr *err)
{
    if (classify_const(a->value, it, err))
        return -1;
    it->sym = a->sym;
    it->slice_sym = a->slice_sym;
    return 0;
}

static int classify_tensor(Lib lib, const TensorMeta *m, IxItem *it, ShapeErr *err)
{
    memset(it, 0, sizeof *it);
    DTypeCategory c = dtype_info[m->dtype].category;
    if (c == CAT_BOOL || (lib == LIB_TORCH && m->dtype == DT_U8))
        return sj_err(err, "boolean mask indexing gives a data-dependent shape");
    if (c != CAT_INT)
        return sj_err(err, "tensors used as indices must be long, int, byte or bool tensors");
    if (m->lib == LIB_NUMPY && m->ndim == 0) {
        /* numpy integer scalars and 0-d integer arrays index like ints */
        it->kind = IX_INT;
        return 0;
    }
    it->kind = IX_ADV;
    it->adv_ndim = m->ndim;
    memcpy(it->adv_size, m->size, sizeof(int64_t) * m->ndim);
    if (sj_symctx)
        memcpy(it->adv_sym, m->sym, sizeof(SymNode *) * m->ndim);
    return 0;
}

/* The items of an index argument. *tuple_form tells x[a, b] from x[a]. */
static int index_items(Lib lib, const BoundArg *ix, IxItem *items, int *n, ShapeErr *err)
{
    *n = 0;
    if (!ix) {
        /* x[None] arrives as None, which ba_get hides */
        memset(&items[0], 0, sizeof items[0]);
        items[0].kind = IX_NONE;
        items[0].obj = Py_None;
        *n = 1;
        return 0;
    }
    if (ix->kind == BA_TENSOR) {
        *n = 1;
        return classify_tensor(lib, ix->meta, &items[0], err);
    }
    if (ix->kind == BA_LIST) {
        /* a tuple (or list) holding at least one tensor or symbolic item */
        if (ix->n > MAX_ITEMS)
            return sj_err(err, "too many indices");
        for (int i = 0; i < ix->n; i++) {
            const BoundArg *a = &ix->items[i];
            int r;
            if (a->kind == BA_TENSOR)
                r = classify_tensor(lib, a->meta, &items[i], err);
            else if (a->kind == BA_CONST)
                r = classify_bound(a, &items[i], err);
            else
                r = sj_err(err, "nested sequences of tensors as indices are not supported");
            if (r)
                return -1;
        }
        *n = ix->n;
        return 0;
    }
    if (ix->kind != BA_CONST)
        return sj_err(err, "unsupported index");
    PyObject *v = ix->value;
    if (PyTuple_Check(v)) {
        Py_ssize_t len = PyTuple_GET_SIZE(v);
        if (len > MAX_ITEMS)
            return sj_err(err, "too many indices");
        for (Py_ssize_t i = 0; i < len; i++)
            if (classify_const(PyTuple_GET_ITEM(v, i), &items[i], err))
                return -1;
        *n = (int)len;
        return 0;
    }
    *n = 1;
    return classify_bound(ix, &items[0], err);
}

/* x[i] on dim src must be in range (sj_index_in_range: symbolic sizes and indices are
 * decided as torch does, guarded). */
static int check_int_index(const TensorMeta *x, int src, const IxItem *it, ShapeErr *err)
{
    if (!it->obj)
        return 0;   /* a numpy integer scalar of unknown value: numpy checks at run time */
    BoundArg tmp = {BA_CONST, NULL, it->obj, 0, NULL, NULL, NULL, 0};
    int64_t v;
    if (sj_int(&tmp, "index", &v, err))
        return -1;
    int out = sj_index_in_range(x, src, v, it->sym, err);
    if (out > 0)
        return sj_err(err, "index %lld is out of bounds for dimension %d with size %lld", (long long)v, src,
                      (long long)x->size[src]);
    return out;
}

/* Python's slice index i on a dim of size s, as torch computes it for symbolic sizes
 * (fake_impls' _compute_slice_index): i when 0 <= i <= s, i + s when -s <= i < 0, else
 * clamped to 0 or s. Each comparison the ranges cannot decide is guarded. NULL with err
 * set on failure. */
static SymNode *slice_index(SymNode *s, SymNode *i, ShapeErr *err)
{
    SymEnv *env = sj_symctx->env;
    SymNode *zero = sym_const(env, 0), *neg_s = sym_neg(env, s);
    int t;
    if (!i || !zero || !neg_s) {
        sj_sym_error(err);
        return NULL;
    }
    if (sj_decide(sym_ge(env, i, zero), &t, err) < 0)
        return NULL;
    if (t) {
        if (sj_decide(sym_le(env, i, s), &t, err) < 0)
            return NULL;
        return t ? i : s;
    }
    if (sj_decide(sym_ge(env, i, neg_s), &t, err) < 0)
        return NULL;
    SymNode *r = t ? sym_add(env, i, s) : zero;
    if (!r)
        sj_sym_error(err);
    return r;
}

/* A constant slice bound as a node; bounds past any size are clamped (same result). */
static SymNode *bound_const(Py_ssize_t v)
{
    const int64_t far = (int64_t)1 << 62;
    return sym_const(sj_symctx->env, v > far ? far : v < -far ? -far : (int64_t)v);
}

/* The length x[start:stop:step] selects on dim src: *len, and *lsym when it is symbolic.
 * Symbolic (a symbolic dim or bound) with a positive step, it follows torch's slice meta:
 * both bounds through slice_index, then (stop - start + step - 1) // step when
 * stop >= start, else 0. A symbolic step, or numpy's negative steps, are specialised. */
static int slice_len(Lib lib, const TensorMeta *x, int src, const IxItem *it, int64_t *len, SymNode **lsym,
                     ShapeErr *err)
{
    Py_ssize_t start, stop, step;
    *lsym = NULL;
    if (PySlice_Unpack(it->obj, &start, &stop, &step) < 0) {
        sj_err_clear();
        return sj_err(err, "slice indices must be integers or None");
    }
    int symbolic = sj_symctx && (x->sym[src] || it->slice_sym);
    SymNode *const *ss = it->slice_sym;
    int64_t pinned;
    if (symbolic && ss && ss[2] && sj_pin(ss[2], &pinned, err) < 0)
        return -1;
    if (step == 0)
        return sj_err(err, "slice step cannot be zero");
    if (step < 0 && lib == LIB_TORCH)
        return sj_err(err, "step must be greater than zero");
    if (symbolic && step < 0) {
        /* numpy's reversed slices: specialise the size and the bounds */
        if ((x->sym[src] && sj_pin(x->sym[src], &pinned, err) < 0) ||
            (ss && ss[0] && sj_pin(ss[0], &pinned, err) < 0) || (ss && ss[1] && sj_pin(ss[1], &pinned, err) < 0))
            return -1;
        symbolic = 0;
    }
    if (!symbolic) {
        *len = PySlice_AdjustIndices((Py_ssize_t)x->size[src], &start, &stop, step);
        return 0;
    }
    SymEnv *env = sj_symctx->env;
    SymNode *s = sj_dimsym(x, src, err);
    if (!s)
        return -1;
    const PySliceObject *sl = (const PySliceObject *)it->obj;
    SymNode *a = slice_index(s,
                             (ss && ss[0])          ? ss[0]
                             : sl->start == Py_None ? sym_const(env, 0)
                                                    : bound_const(start),
                             err);
    if (!a)
        return -1;
    SymNode *b = s;   /* no stop, or torch's end == sys.maxsize: the size */
    if ((ss && ss[1]) || (sl->stop != Py_None && (int64_t)stop != INT64_MAX))
        b = slice_index(s, (ss && ss[1]) ? ss[1] : bound_const(stop), err);
    if (!b)
        return -1;
    int ordered;
    if (sj_decide(sym_ge(env, b, a), &ordered, err) < 0)
        return -1;
    SymNode *n = ordered ? sym_sub(env, b, a) : sym_const(env, 0);
    if (n && ordered && step != 1) {
        SymNode *up = sym_add(env, n, sym_const(env, step - 1));
        n = up ? sym_floordiv(env, up, sym_const(env, step)) : NULL;
    }
    TensorMeta one;
    if (sj_set_dim(&one, 0, n, err) < 0)
        return -1;
    *len = one.size[0];
    *lsym = one.sym[0];
    return 0;
}

/* The shape x[index] selects; *scalar tells numpy's "every dim taken by an int" case. With
 * sj_symctx set, dims keep their symbols and slices of symbolic dims or with symbolic
 * bounds get symbolic lengths (slice_len). */
static int index_shape(Lib lib, const TensorMeta *x, const BoundArg *ix, TensorMeta *out, int *scalar, ShapeErr *err)
{
    IxItem items[MAX_ITEMS];
    int n;
    if (index_items(lib, ix, items, &n, err))
        return -1;
    int consumed = 0, ellipses = 0, advs = 0;
    for (int i = 0; i < n; i++) {
        if (items[i].kind == IX_INT || items[i].kind == IX_SLICE || items[i].kind == IX_ADV)
            consumed++;
        if (items[i].kind == IX_ELLIPSIS)
            ellipses++;
        if (items[i].kind == IX_ADV)
            advs++;
    }
    if (ellipses > 1)
        return sj_err(err, "an index can only have a single ellipsis ('...')");
    if (consumed > x->ndim)
        return sj_err(err, "too many indices for tensor of dimension %d", x->ndim);
    /* Advanced indices broadcast together to one shape B. numpy counts integer indices as
     * advanced when any array index is present; torch applies integers first (as selects).
     * Adjacent advanced indices put B where they stand, otherwise B goes first. */
    int is_adv[MAX_ITEMS];
    int nadv = 0, first = -1, last = -1;
    for (int i = 0; i < n; i++) {
        is_adv[i] = items[i].kind == IX_ADV || (lib == LIB_NUMPY && advs > 0 && items[i].kind == IX_INT);
        if (is_adv[i]) {
            nadv++;
            if (first < 0)
                first = i;
            last = i;
        }
    }
    TensorMeta acc;   /* B: size and sym */
    memset(&acc, 0, sizeof acc);
    int adjacent = 1;
    if (nadv > 0) {
        for (int i = first; i <= last; i++)
            if (!is_adv[i] && !(lib == LIB_TORCH && items[i].kind == IX_INT))
                adjacent = 0;
        for (int i = 0; i < n; i++) {
            if (!is_adv[i] || items[i].kind != IX_ADV)
                continue;
            TensorMeta one;
            memset(&one, 0, sizeof one);
            one.ndim = (unsigned char)items[i].adv_ndim;
            memcpy(one.size, items[i].adv_size, sizeof(int64_t) * (size_t)items[i].adv_ndim);
            memcpy(one.sym, items[i].adv_sym, sizeof(SymNode *) * (size_t)items[i].adv_ndim);
            const TensorMeta *pair[2] = {&acc, &one};
            TensorMeta res = acc;
            if (sj_broadcast(pair, 2, &res, err))
                return sj_err(err, "shape mismatch: indexing tensors could not be broadcast together");
            acc.ndim = res.ndim;
            memcpy(acc.size, res.size, sizeof(int64_t) * res.ndim);
            memcpy(acc.sym, res.sym, sizeof(SymNode *) * res.ndim);
        }
    }
    int bnd = acc.ndim;
    int64_t size[SJ_MAX_RANK * 2 + SJ_MAX_RANK];
    SymNode *syms[SJ_MAX_RANK * 2 + SJ_MAX_RANK];
    int nd = 0, src = 0, placed = 0;
    if (nadv > 0 && !adjacent) {
        for (int k = 0; k < bnd; k++, nd++) {
            size[nd] = acc.size[k];
            syms[nd] = acc.sym[k];
        }
        placed = 1;
    }
    for (int i = 0; i < n; i++) {
        IxItem *it = &items[i];
        if (is_adv[i]) {
            if (it->kind == IX_INT && check_int_index(x, src, it, err))
                return -1;
            if (!placed) {
                for (int k = 0; k < bnd; k++, nd++) {
                    size[nd] = acc.size[k];
                    syms[nd] = acc.sym[k];
                }
                placed = 1;
            }
            src++;
            continue;
        }
        switch (it->kind) {
        case IX_NONE:
            syms[nd] = NULL;
            size[nd++] = 1;
            break;
        case IX_ELLIPSIS:
            for (int k = 0; k < x->ndim - consumed; k++, nd++, src++) {
                size[nd] = x->size[src];
                syms[nd] = sj_symctx ? x->sym[src] : NULL;
            }
            break;
        case IX_INT:
            if (check_int_index(x, src, it, err))
                return -1;
            src++;
            break;
        case IX_SLICE:
            if (slice_len(lib, x, src, it, &size[nd], &syms[nd], err))
                return -1;
            nd++;
            src++;
            break;
        case IX_ADV:
            break;   /* handled above */
        }
        if (nd > SJ_MAX_RANK)
            return sj_err(err, "rank above %d is not supported", SJ_MAX_RANK);
    }
    while (src < x->ndim) {
        if (nd >= SJ_MAX_RANK)
            return sj_err(err, "rank above %d is not supported", SJ_MAX_RANK);
        syms[nd] = sj_symctx ? x->sym[src] : NULL;
        size[nd++] = x->size[src++];
    }
    *out = *x;
    out->np_scalar = 0;
    sj_set_shape(out, size, syms, nd);
    *scalar = nd == 0 && ellipses == 0 && advs == 0;
    return 0;
}

int rule_getitem(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    if (x->np_scalar)
        return sj_err(err, "indexing a numpy scalar is not supported");
    int scalar;
    if (index_shape(lib, x, ba_get(b, "index"), out, &scalar, err))
        return -1;
    if (lib == LIB_NUMPY && scalar)
        out->np_scalar = 1;
    *nout = 1;
    return 0;
}

/* x[mask] = v with a boolean mask over x's leading dims: how many elements are selected
 * depends on the data, but the result is x itself, so only a value that broadcasts to any
 * count (a scalar, or one element) is accepted. 1 = handled, 0 = not a mask, -1 = refused. */
static int mask_setitem(const TensorMeta *x, const BoundArg *ix, const BoundArg *v, ShapeErr *err)
{
    if (!ix || ix->kind != BA_TENSOR || ix->meta->dtype != DT_BOOL)
        return 0;
    const TensorMeta *m = ix->meta;
    int same = m->ndim <= x->ndim;
    for (int i = 0; same > 0 && i < m->ndim; i++)
        same = sj_dims_equal(m, i, x, i, err);
    if (same <= 0)
        return same < 0 ? -1
                        : sj_err(err, "the shape of the mask does not match the shape of the indexed "
                                      "tensor");
    if (v && v->kind == BA_TENSOR) {
        /* a value of one row per selected element (x[m] = y[m], x[m] *= 2): whether its
         * length is the mask's count is data, so the assignment (which always runs as the
         * library's own setitem) checks it when it runs and raises as eager does */
        const TensorMeta *vm = v->meta;
        int counted = vm->ndim == 1 + x->ndim - m->ndim;
        for (int i = 1; counted > 0 && i < vm->ndim; i++)
            counted = sj_dims_equal(vm, i, x, m->ndim + i - 1, err);
        if (counted < 0)
            return -1;
        /* one element broadcasts to any selection of at least its rank */
        if (!counted && (vm->ndim > 1 + x->ndim - m->ndim || sj_numel(v->meta) != 1))
            return sj_err(err, "assigning a tensor through a boolean mask depends on the "
                               "number of selected elements");
    } else if (!v || v->kind != BA_CONST || !PyNumber_Check(v->value)) {
        return sj_err(err, "unsupported value for a masked assignment");
    }
    return 1;
}

int rule_setitem(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    if (x->np_scalar)
        return sj_err(err, "numpy scalars are immutable");
    int masked = mask_setitem(x, ba_get(b, "index"), ba_get(b, "value"), err);
    if (masked < 0)
        return -1;
    if (masked) {
        *out = *x;
        *nout = 1;
        return 0;
    }
    TensorMeta target;
    int scalar;
    if (index_shape(lib, x, ba_get(b, "index"), &target, &scalar, err))
        return -1;
    const BoundArg *v = ba_get(b, "value");
    if (v && v->kind == BA_TENSOR) {
        /* the value broadcasts to the selected region; leading 1-dims are allowed */
        const TensorMeta *m = v->meta;
        int extra = m->ndim - target.ndim;
        for (int i = 0; i < extra; i++) {
            int one = sj_dim_equals(m, i, 1, err);
            if (one <= 0)
                return one < 0 ? -1
                               : sj_err(err,
                                        "shape mismatch: value of rank %d cannot be broadcast to "
                                        "indexing result of rank %d",
                                        m->ndim, target.ndim);
        }
        for (int i = extra > 0 ? extra : 0; i < m->ndim; i++) {
            int ok = sj_dims_equal(m, i, &target, i - extra, err);
            if (ok == 0)
                ok = sj_dim_equals(m, i, 1, err);
            if (ok <= 0)
                return ok < 0 ? -1
                              : sj_err(err,
                                       "shape mismatch: value of size %lld cannot be broadcast "
                                       "to size %lld",
                                       (long long)m->size[i], (long long)target.size[i - extra]);
        }
        if (lib == LIB_TORCH && dtype_info[m->dtype].category == CAT_COMPLEX &&
            dtype_info[x->dtype].category != CAT_COMPLEX)
            return sj_err(err, "cannot assign complex values to a real tensor");
    } else if (v && v->kind == BA_LIST) {
        return sj_err(err, "assigning a sequence of tensors is not supported");
    }
    *out = *x;
    *nout = 1;
    return 0;
}
