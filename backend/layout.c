/* The layouts torch gives results, for the steps that make results themselves: which
 * strides an operand's layout counts as channels-last (convolutions, pooling and batch
 * norm give a channels-last result then), the order TensorIterator lays a pointwise
 * result out in (the inputs' memory order, not always row-major), numpy's order 'K'
 * (its iterator's axis order, and the order of a copy or astype), and a new tensor or array
 * with given strides.
 *
 * Why: a step that returns row-major where eager returns channels-last or a transposed
 * layout gives the same values but not the same tensor (strides are observable, and the
 * next op's speed depends on them: a channels-last model whose residual adds came back
 * row-major ran every later convolution on a layout it then reordered).
 *
 * Memory: empty_strided and its keyword dict are strong references taken on first use and
 * kept for the process. */
#include <stdlib.h>
#include <string.h>

#include "lower_int.h"
#include "../vocab/np.h"

/* c10's rule: the dims in `order` (C, then the spatial dims from the last, then N) must
 * have strides that do not decrease, each at least the extent the dims before it span; N
 * after C with the same stride is the ambiguous N,C,1,1-like case torch calls row-major. */
static int like_cl_in(const int64_t *size, const int64_t *stride, const int *order, int r)
{
    int64_t min = 0;
    for (int i = 0; i < r; i++) {
        int d = order[i];
        if (size[d] == 0 || stride[d] < min)
            return 0;
        if (d == 0 && min == stride[1])
            return 0;
        min = stride[d];
        if (size[d] > 1)
            min *= size[d];
    }
    return 1;
}

static const int cl_order4[4] = {1, 3, 2, 0}, cl_order5[5] = {1, 4, 3, 2, 0};

int lower_strides_like_cl(const int64_t *size, const int64_t *stride)
{
    return like_cl_in(size, stride, cl_order4, 4);
}

int lower_suggests_cl(const int64_t *size, const int64_t *stride, int r)
{
    /* c10 also calls a broadcast C dim (stride 0) row-major */
    return (r == 4 || r == 5) && stride[1] != 0 && like_cl_in(size, stride, r == 4 ? cl_order4 : cl_order5, r);
}

int lower_dense_in(const int64_t *size, const int64_t *stride, const int *perm, int r)
{
    int64_t expect = 1;
    for (int i = r - 1; i >= 0; i--) {
        int d = perm ? perm[i] : i;
        if (size[d] != 1 && stride[d] != expect)
            return 0;
        expect *= size[d];
    }
    return 1;
}

int lower_dense_any(const int64_t *size, const int64_t *stride, int r)
{
    int perm[SJ_MAX_RANK + 1], n = 0;
    for (int i = 0; i < r; i++)   /* size-1 (and empty) dims place nothing */
        if (size[i] >= 2)
            perm[n++] = i;
    for (int i = 1; i < n; i++)   /* by stride, innermost first */
        for (int k = i; k > 0 && stride[perm[k - 1]] > stride[perm[k]]; k--) {
            int t = perm[k];
            perm[k] = perm[k - 1];
            perm[k - 1] = t;
        }
    int64_t want = 1;
    for (int i = 0; i < n; i++) {
        if (stride[perm[i]] != want)
            return 0;
        want *= size[perm[i]];
    }
    return 1;
}

void lower_strides_in(const int64_t *size, const int *perm, int r, int64_t *stride)
{
    int64_t at = 1;
    for (int i = r - 1; i >= 0; i--) {
        int d = perm ? perm[i] : i;
        stride[d] = at;
        at *= size[d] > 1 ? size[d] : 1;
    }
}

int lower_nhwc_perm(int *perm)
{
    perm[0] = 0;
    perm[1] = 2;
    perm[2] = 3;
    perm[3] = 1;
    return 4;
}

/* TensorIterator's comparison of dims a and b (outermost-first positions swapped when it
 * is > 0): the first operand whose strides on the two differ (neither broadcast) decides,
 * larger stride outermost; on equal strides the larger dim goes outer. */
static int should_swap(const int64_t *n, const int64_t *const *st, int nops, int a, int b)
{
    for (int i = 0; i < nops; i++) {
        int64_t s0 = st[i][a], s1 = st[i][b];
        if (s0 == 0 || s1 == 0)
            continue;
        if (s0 < s1)
            return -1;
        if (s0 > s1)
            return 1;
        if (n[a] > n[b])
            return 1;
    }
    return 0;
}

int lower_ti_perm(const int64_t *n, int r, const int64_t *const *st, int nops, int *perm)
{
    /* TensorIterator sorts dims fastest-first; fast[] is that order, perm[] its reverse */
    int fast[SJ_MAX_RANK + 1];
    for (int i = 0; i < r; i++)
        fast[i] = r - 1 - i;
    for (int i = 1; i < r; i++) {
        int d1 = i;
        for (int d0 = i - 1; d0 >= 0; d0--) {
            int c = should_swap(n, st, nops, fast[d0], fast[d1]);
            if (c > 0) {
                int t = fast[d0];
                fast[d0] = fast[d1];
                fast[d1] = t;
                d1 = d0;
            } else if (c < 0) {
                break;
            }
        }
    }
    int ident = 1;
    for (int i = 0; i < r; i++) {
        perm[i] = fast[r - 1 - i];
        ident &= perm[i] == i;
    }
    return !ident;
}

int lower_np_iter_perm(const int64_t *n, int r, const int64_t *const *st, int nops, int *perm)
{
    /* numpy's iterator (order 'K') sorts its axes innermost first, its axis 0 being the
     * array's last dim: a stable insertion sort where each operand with both strides
     * nonzero (broadcast and size-1 axes count as 0) votes by |stride|; a vote for the
     * current order beats one for a swap (C order wins conflicts), and only the first
     * vote can ask for a swap */
    int it[SJ_MAX_RANK + 1];
    for (int i = 0; i < r; i++)
        it[i] = r - 1 - i;
    for (int i0 = 1; i0 < r; i0++) {
        int j0 = it[i0], ipos = i0;
        for (int i1 = i0 - 1; i1 >= 0; i1--) {
            int j1 = it[i1], ambiguous = 1, swap = 0;
            for (int o = 0; o < nops; o++) {
                int64_t s0 = n[j0] == 1 ? 0 : llabs(st[o][j0]), s1 = n[j1] == 1 ? 0 : llabs(st[o][j1]);
                if (s0 == 0 || s1 == 0)
                    continue;
                if (s1 <= s0)
                    swap = 0;
                else if (ambiguous)
                    swap = 1;
                ambiguous = 0;
            }
            if (ambiguous)
                continue;
            if (!swap)
                break;
            ipos = i1;
        }
        if (ipos != i0) {
            memmove(&it[ipos + 1], &it[ipos], sizeof(int) * (size_t)(i0 - ipos));
            it[ipos] = j0;
        }
    }
    int ident = 1;
    for (int i = 0; i < r; i++) {
        perm[i] = it[r - 1 - i];
        ident &= perm[i] == i;
    }
    return !ident;
}

void lower_np_like_strides(const int64_t *size, const int64_t *stride, int r, int64_t *out)
{
    int perm[SJ_MAX_RANK + 1], rev[SJ_MAX_RANK + 1];
    for (int i = 0; i < r; i++) {
        perm[i] = i;
        rev[i] = r - 1 - i;
    }
    if (r <= 1 || lower_dense_in(size, stride, NULL, r)) {   /* C-contiguous (size-1 dims ignored) */
        lower_strides_in(size, NULL, r, out);
        return;
    }
    if (lower_dense_in(size, stride, rev, r)) {   /* F-contiguous */
        lower_strides_in(size, rev, r, out);
        return;
    }
    /* numpy's sorted stride permutation: |stride| descending, ties in dim order (size-1
     * dims keep their own strides here) */
    for (int i = 1; i < r; i++)
        for (int j = i; j > 0 && llabs(stride[perm[j - 1]]) < llabs(stride[perm[j]]); j--) {
            int t = perm[j];
            perm[j] = perm[j - 1];
            perm[j - 1] = t;
        }
    lower_strides_in(size, perm, r, out);
}

void lower_preserved_strides(const int64_t *size, const int64_t *stride, int r, int64_t *out)
{
    if (lower_dense_any(size, stride, r)) {
        memcpy(out, stride, sizeof(int64_t) * (size_t)r);
        return;
    }
    /* infer_dense_strides: TensorIterator's order over this tensor alone */
    int perm[SJ_MAX_RANK + 1];
    const int64_t *one[1] = {stride};
    lower_ti_perm(size, r, one, 1, perm);
    lower_strides_in(size, perm, r, out);
}

static PyObject *empty_strided, *kw_dtype_only;   /* strong, on first use */

PyObject *lower_new_output_strided(Lib lib, DType dt, const int64_t *n, const int64_t *st, int r)
{
    int64_t want[SJ_MAX_RANK];
    lower_strides_in(n, NULL, r, want);
    int rowmajor = 1;   /* (size-1 dims too: eager's strides there are observable) */
    for (int d = 0; d < r; d++)
        rowmajor &= st[d] == want[d];
    if (rowmajor)
        return lower_new_output_dt(lib, dt, n, r);
    if (lib != LIB_TORCH) {
        /* a numpy array owning its memory, laid out as numpy's order 'K' lays it out */
        PyArray_Descr *d = (PyArray_Descr *)lower_dtype_object(lib, dt);   /* borrowed */
        if (!d || !sj_np_ready()) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_RuntimeError, "shapejit: numpy is not loaded");
            return NULL;
        }
        npy_intp dims[SJ_MAX_RANK + 1], bst[SJ_MAX_RANK + 1];
        for (int i = 0; i < r; i++) {
            dims[i] = (npy_intp)n[i];
            bst[i] = (npy_intp)(st[i] * (int64_t)PyDataType_ELSIZE(d));
        }
        Py_INCREF(d);   /* PyArray_NewFromDescr steals it */
        return PyArray_NewFromDescr(&PyArray_Type, d, r, dims, bst, NULL, 0, NULL);
    }
    if (!empty_strided) {
        PyObject *torch = PyImport_ImportModule("torch");   /* new */
        PyObject *es = torch ? PyObject_GetAttrString(torch, "empty_strided") : NULL;   /* new */
        Py_XDECREF(torch);
        if (!es)
            return NULL;
        if (!(kw_dtype_only = Py_BuildValue("(s)", "dtype"))) {
            Py_DECREF(es);
            return NULL;
        }
        empty_strided = es;
    }
    PyObject *dto = dtype_to_py(dt, LIB_TORCH);   /* new */
    PyObject *sz = dto ? sj_int64_tuple(n, r) : NULL, *sd = sz ? sj_int64_tuple(st, r) : NULL;   /* new */
    PyObject *res = NULL;
    if (sd) {
        PyObject *args[3] = {sz, sd, dto};
        res = PyObject_Vectorcall(empty_strided, args, 2, kw_dtype_only);
    }
    Py_XDECREF(dto);
    Py_XDECREF(sz);
    Py_XDECREF(sd);
    return res;
}
