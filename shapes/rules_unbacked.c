/* Rules of OPK_DATA_SHAPE ops (nonzero, masked_select): the length of the output's dim 0 depends on the
 * data. The rule leaves SJ_UNBACKED_HINT there; capture attaches an unbacked symbol after
 * recording the node (frame_eval/ops.c, record). */
#include "rules_util.h"

int rule_nonzero(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    int as_tuple;
    if (sj_get_bool(b, "as_tuple", 0, &as_tuple, err) < 0)
        return -1;
    if (as_tuple)
        return sj_err(err, "nonzero(as_tuple=True) is not supported yet");
    if (lib != LIB_TORCH)
        return sj_err(err, "nonzero: torch tensors only");
    sj_meta(out, lib, DT_I64);
    /* a 0-d input counts as one element: (n, 0) */
    out->ndim = 2;
    out->size[0] = SJ_UNBACKED_HINT;
    out->size[1] = x->ndim;
    *nout = 1;
    return 0;
}

int rule_masked_select(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *x = sj_tensor(b, "input", err), *m = x ? sj_tensor(b, "mask", err) : NULL;
    if (!m)
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
