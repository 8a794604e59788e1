/* Rules of OPK_DATA_SHAPE ops (nonzero, masked_select, x[mask], flatnonzero): the length of
 * the output's dim 0 depends on the data. The rule leaves SJ_UNBACKED_HINT there; capture attaches an unbacked symbol after
 * recording the node (capture/ops.c, record). */
#include "rules_util.h"

int rule_nonzero(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    /* numpy's where(condition) alone is nonzero(condition) (capture/ops.c) */
    const TensorMeta *x = sj_tensor(b, ba_get(b, "condition") ? "condition" : "input", err);
    if (!x)
        return -1;
    if (lib == LIB_NUMPY) {
        /* numpy.nonzero / np.where(cond): a tuple of one int64 index array per dim, all as
         * long as the count of non-zero elements (one unbacked symbol for all of them) */
        if (x->ndim == 0 || x->np_scalar)
            return sj_err(err, "nonzero of a 0-d array is not supported");
        if (x->ndim > SJ_MAX_OUTS)
            return sj_err(err, "nonzero of a rank-%d array is not supported", x->ndim);
        for (int i = 0; i < x->ndim; i++) {
            sj_meta(&out[i], lib, DT_I64);
            out[i].ndim = 1;
            out[i].size[0] = SJ_UNBACKED_HINT;
        }
        *nout = x->ndim;
        return 0;
    }
    int as_tuple;
    if (sj_get_bool(b, "as_tuple", 0, &as_tuple, err) < 0)
        return -1;
    if (as_tuple)
        return sj_err(err, "nonzero(as_tuple=True) is not supported yet");
    sj_meta(out, lib, DT_I64);
    /* a 0-d input counts as one element: (n, 0) */
    out->ndim = 2;
    out->size[0] = SJ_UNBACKED_HINT;
    out->size[1] = x->ndim;
    *nout = 1;
    return 0;
}

/* numpy.flatnonzero(a): the int64 positions of the non-zero elements of a.ravel() */
int rule_flatnonzero(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    if (lib != LIB_NUMPY)
        return sj_err(err, "flatnonzero: numpy arrays only");
    sj_meta(out, lib, DT_I64);
    out->ndim = 1;
    out->size[0] = SJ_UNBACKED_HINT;
    *nout = 1;
    return 0;
}

/* numpy.unique(a): the distinct values of a.ravel(), then, as asked, the index of the
 * first occurrence of each and the count of each (int64, as long as the values). The
 * inverse indices and unique along an axis are not modelled. */
int rule_unique(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    if (lib != LIB_NUMPY)
        return sj_err(err, "unique: numpy arrays only");
    int index, inverse, counts;
    if (sj_get_bool(b, "return_index", 0, &index, err) < 0 || sj_get_bool(b, "return_inverse", 0, &inverse, err) < 0 ||
        sj_get_bool(b, "return_counts", 0, &counts, err) < 0)
        return -1;
    if (inverse)
        return sj_err(err, "unique(return_inverse=True) is not supported");
    const BoundArg *axis = ba_get(b, "axis");
    if (axis && !(axis->kind == BA_CONST && axis->value == Py_None))
        return sj_err(err, "unique along an axis is not supported");
    int n = 0;
    sj_meta(&out[n], lib, (DType)x->dtype);
    out[n].ndim = 1;
    out[n++].size[0] = SJ_UNBACKED_HINT;
    for (int k = 0; k < index + counts; k++) {
        sj_meta(&out[n], lib, DT_I64);
        out[n].ndim = 1;
        out[n++].size[0] = SJ_UNBACKED_HINT;
    }
    *nout = n;
    return 0;
}

/* x[mask] with a bool mask over x's leading dims (both libraries): the selected elements,
 * (count,) + x.shape[mask.ndim:]. The mask's dims must equal x's (eager raises an
 * IndexError otherwise; the refusal lets it). */
int rule_mask_index(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *x, *m;
    if (sj_tensor2(b, "input", &x, "index", &m, err))
        return -1;
    if (x->np_scalar)
        return sj_err(err, "indexing a numpy scalar is not supported");
    if (m->dtype != DT_BOOL || m->ndim == 0)
        return sj_err(err, "mask indexing needs a bool mask of rank 1 or more");
    if (m->ndim > x->ndim)
        return sj_err(err, "too many indices: the mask has rank %d, the indexed tensor %d", m->ndim, x->ndim);
    for (int i = 0; i < m->ndim; i++) {
        int same = sj_dims_equal(m, i, x, i, err);
        if (same <= 0)
            return same < 0 ? -1
                            : sj_err(err,
                                     "the shape of the mask does not match the shape of the indexed "
                                     "tensor at dim %d",
                                     i);
    }
    sj_meta(out, lib, (DType)x->dtype);
    out->ndim = (unsigned char)(1 + x->ndim - m->ndim);
    out->size[0] = SJ_UNBACKED_HINT;
    for (int i = m->ndim; i < x->ndim; i++)
        out->size[1 + i - m->ndim] = x->size[i];
    *nout = 1;
    return 0;
}

int rule_masked_select(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *x, *m;
    if (sj_tensor2(b, "input", &x, "mask", &m, err))
        return -1;
    if (lib != LIB_TORCH)
        return sj_err(err, "masked_select: torch tensors only");
    if (m->dtype != DT_BOOL)
        return sj_err(err, "masked_select: expected a bool mask, got %s", dtype_info[m->dtype].name);
    /* input and mask broadcast together (checked, guarded when symbolic); the result is
     * the selected elements, one dim as long as the data says */
    TensorMeta both;
    const TensorMeta *ins[2] = {x, m};
    if (sj_broadcast(ins, 2, &both, err) < 0)
        return -1;
    sj_meta(out, lib, (DType)x->dtype);
    out->ndim = 1;
    out->size[0] = SJ_UNBACKED_HINT;
    *nout = 1;
    return 0;
}
