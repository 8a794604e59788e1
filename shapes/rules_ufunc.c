/* Rules of the ufunc-method ops that have no op of their own elsewhere (capture/ufuncs.c
 * maps the others to sum, cumsum, ...): np.maximum.accumulate and np.add.at. */
#include "rules_util.h"

/* np.maximum.accumulate(a, axis): the running extremum along one axis, a's shape and dtype */
int rule_ufunc_scan(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    if (lib != LIB_NUMPY)
        return sj_err(err, "ufunc methods apply to numpy arrays");
    const BoundArg *dim = ba_get(b, "dim");
    int64_t dv = 0;
    int dn;
    if (dim && sj_int(dim, "axis", &dv, err))
        return -1;
    if (sj_dim(lib, dv, x->ndim, &dn, err))
        return -1;
    *out = *x;
    out->np_scalar = 0;
    *nout = 1;
    return 0;
}

/* np.add.at(a, indices, b): a, written in place (numpy's own unbuffered call runs it, and
 * casts its results into a's dtype whatever their kind). Index bounds and the value's
 * shape are checked by that call when it runs, with eager's errors. */
int rule_ufunc_at(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    if (lib != LIB_NUMPY || x->np_scalar)
        return sj_err(err, "ufunc.at writes into a numpy array");
    const BoundArg *v = ba_get(b, "value");
    if (!v)
        return sj_err(err, "ufunc.at of a binary ufunc needs a value");
    if (v->kind != BA_TENSOR && !(v->kind == BA_CONST && (PyLong_Check(v->value) || PyFloat_Check(v->value))))
        return sj_err(err, "unsupported value for ufunc.at");
    const BoundArg *ix = ba_get(b, "index");
    if (ix && ix->kind == BA_TENSOR && dtype_info[ix->meta->dtype].category > CAT_INT)
        return sj_err(err, "arrays used as indices must be of integer (or boolean) type");
    *out = *x;
    *nout = 1;
    return 0;
}
