"""numpy mechanisms inside compiled code: boolean masks and index arrays of data-dependent
length, array constructors with every dtype spelling, ufunc methods (outer, reduce,
accumulate, at), the wide unsigned and the small integer/float dtypes in mixed arithmetic,
and a branch on one element's value (the data picks the side, so new data may compile the
other side's resume function: reads_data).

A selection through a mask (x[m], np.nonzero, one-argument np.where, np.flatnonzero) has a
length only the data knows: as torch.compile does for masked_select/nonzero, the graph
breaks there unless capture_dynamic_output_shape_ops is set (tests/capture/test_np_mech.py runs
them with it set: one graph, an unbacked length). The intermediate of data-dependent
length then reaches the resume function, so a new input recompiles it (reads_data).
Assignments through a mask keep the array's shape and always capture."""
import numpy as np

from ._base import A, AB, AI, AP, numpy_case, with_breaks


def _u(*shape, dtype):
    """Small non-negative integers of an unsigned dtype (no wrap-around in the tests)."""
    return AI(*shape, low=1, high=50, dtype=dtype)


# ---- boolean masks ----------------------------------------------------------------------
@with_breaks("numpy", lambda: (A(4, 5),), graphs=2, breaks=1, reads_data=True)
def np_mech_mask_select_threshold(a):
    sel = a[a > 0.5]
    return sel * 2 + 1


@with_breaks("numpy", lambda: (A(6, 3), AB(6, 3)), graphs=1, breaks=1, reads_data=True)
def np_mech_mask_argument(a, m):
    return np.sqrt(np.abs(a[m])) + 1


@with_breaks("numpy", lambda: (A(6, 3), AB(6)), graphs=1, breaks=1, reads_data=True)
def np_mech_mask_rows(a, keep):
    rows = a[keep]
    return rows.mean(axis=0) if rows.shape[0] else np.zeros(3)


@numpy_case(lambda: (A(4, 5),), mutates=True)
def np_mech_mask_assign_scalar(a):
    a[a < 0] = 0
    return a * 2


@numpy_case(lambda: (A(6, 3), AB(6)), mutates=True)
def np_mech_mask_assign_rows(a, drop):
    a[drop] = -1.0
    return a.sum(axis=1)


@numpy_case(lambda: (A(4, 5), AB(4, 5)), mutates=True)
def np_mech_mask_assign_0d_value(a, m):
    a[m] = a.max()
    return a


@with_breaks("numpy", lambda: (A(4, 5), A(4, 5), AB(4, 5)), graphs=1, breaks=1, mutates=True,
             reads_data=True)
def np_mech_mask_assign_from_other(a, b, m):
    a[m] = b[m]
    return a + 1


@with_breaks("numpy", lambda: (A(4, 5),), graphs=2, breaks=1, mutates=True, reads_data=True)
def np_mech_mask_inplace_scale(a):
    a[a < 0] *= 2
    return a + 1


@with_breaks("numpy", lambda: (A(4, 5),), graphs=2, breaks=1, reads_data=True)
def np_mech_where_one_argument(a):
    rows, cols = np.where(a > 0)
    return rows * 10 + cols


@with_breaks("numpy", lambda: (A(3, 4),), graphs=2, breaks=1, reads_data=True)
def np_mech_nonzero_tuple(a):
    idx = np.nonzero(a > 0.2)
    return idx[0] + idx[1], len(idx)


@with_breaks("numpy", lambda: (A(3, 4),), graphs=2, breaks=1, reads_data=True)
def np_mech_ndarray_nonzero(a):
    (i,) = (np.abs(a[0]) > 0.5).nonzero()
    return i * 2


@with_breaks("numpy", lambda: (A(3, 4),), graphs=2, breaks=1, reads_data=True)
def np_mech_flatnonzero(a):
    return np.flatnonzero(a > 0) + 1


@with_breaks("numpy", lambda: (AI(4, 5, high=6),), graphs=1, breaks=1, reads_data=True)
def np_mech_unique_counts(a):
    vals, counts = np.unique(a, return_counts=True)
    return vals, counts / counts.sum()


# ---- constructors and dtype spellings ---------------------------------------------------
@numpy_case(lambda: (A(3, 4),))
def np_mech_ndarray_constructor(a):
    out = np.ndarray(a.shape, np.float32)     # uninitialised: filled before use
    out[...] = a * 2
    return out, out.dtype


@numpy_case(lambda: (A(5),))
def np_mech_ndarray_fill(a):
    buf = np.ndarray((5,), dtype='f4')
    buf.fill(1.5)
    return buf + a


@numpy_case(lambda: (A(2, 3),))
def np_mech_empty_dtype_object(a):
    e = np.empty((2, 3), np.dtype('int16'))
    e[:] = 3
    return e * a, e.dtype


@numpy_case(lambda: (A(3),))
def np_mech_zeros_dtype_spellings(a):
    return (np.zeros(3, 'f4') + a, np.zeros(3, np.float32), np.zeros(3, float), np.zeros(3, int),
            np.zeros(3, bool), np.zeros(3, '<i2'), np.ones(3, np.dtype('uint8')), np.ones(3, 'float16'))


@numpy_case(lambda: (A(2, 3),))
def np_mech_like_dtype_spellings(a):
    return (np.ones_like(a, dtype='float32'), np.zeros_like(a, dtype=np.int8),
            np.full_like(a, 7, dtype='int32'), np.empty_like(a, dtype=bool).shape)


@numpy_case(lambda: (A(4),))
def np_mech_full_dtypes(a):
    return np.full((4,), 3, bool), np.full((2, 2), 2.5, 'f4'), np.full(4, -1, np.int16) + a


@numpy_case(lambda: (A(4),))
def np_mech_arange_dtype_positional(a):
    return np.arange(0, 1, 0.25, np.float32) + a, np.arange(5, dtype=np.dtype('int16'))


@numpy_case(lambda: (A(5),))
def np_mech_linspace_dtypes(a):
    return np.linspace(0, 10, 5, dtype=int), np.linspace(0, 1, 5, dtype='float32') * a


@numpy_case(lambda: (A(3, 2),))
def np_mech_astype_dtype_forms(a):
    return a.astype(np.dtype('float32')), a.astype('i2'), (a > 0).astype(np.uint16)


# ---- coordinate grids --------------------------------------------------------------------
@numpy_case(lambda: (A(4, 5),))
def np_mech_mgrid_slices(a):
    rows, cols = np.mgrid[0:4, 0:5]
    return a * rows - cols


@numpy_case(lambda: (A(5),))
def np_mech_mgrid_step_and_count(a):
    return np.mgrid[0:1:5j] * a, np.mgrid[0:2:0.5, 1:4:2]


@numpy_case(lambda: (A(4, 5),))
def np_mech_ogrid_broadcast(a):
    y, x = np.ogrid[0:4, 0:5]
    return a + (y - 1.5) ** 2 + x, np.ogrid[-1:1:3j]


@numpy_case(lambda: (A(5), A(3)))
def np_mech_meshgrid_xy(x, y):
    X, Y = np.meshgrid(x, y)
    return np.sqrt(X ** 2 + Y ** 2), X.shape


@numpy_case(lambda: (A(4), A(3), A(2)))
def np_mech_meshgrid_ij_sparse(x, y, z):
    gx, gy, gz = np.meshgrid(x, y, z, indexing='ij', sparse=True)
    full = np.meshgrid(x, y, z, indexing='ij')
    return gx * gy + gz, full[2]


@numpy_case(lambda: (A(4, 5),))
def np_mech_indices(a):
    i, j = np.indices(a.shape)
    return np.where(i == j, a, 0.0), np.indices((2, 3), dtype=np.float32), np.indices((2, 2), sparse=True)


# ---- ufunc methods ----------------------------------------------------------------------
@numpy_case(lambda: (A(4), A(3)))
def np_mech_add_outer(a, b):
    return np.add.outer(a, b)


@numpy_case(lambda: (A(2, 3), A(4)))
def np_mech_multiply_outer_2d(a, b):
    return np.multiply.outer(a, b).sum(axis=-1)


@numpy_case(lambda: (A(4),))
def np_mech_subtract_outer_scalar(a):
    return np.subtract.outer(a, 2.0), np.maximum.outer(a, a)


@numpy_case(lambda: (AP(3, 4),))
def np_mech_multiply_reduce_axis(a):
    return np.multiply.reduce(a, axis=1), np.multiply.reduce(a, -1, keepdims=True)


@numpy_case(lambda: (A(3, 4), AI(3, 4)))
def np_mech_add_reduce_default_axis(a, i):
    return np.add.reduce(a), np.add.reduce(i), np.add.reduce(a, axis=None)


@numpy_case(lambda: (A(3, 4),))
def np_mech_add_reduce_initial_dtype(a):
    return np.add.reduce(a, 1, initial=5.0), np.add.reduce(a, axis=0, dtype=np.float32)


@numpy_case(lambda: (A(3, 4),))
def np_mech_maximum_reduce_initial(a):
    return np.maximum.reduce(a, axis=None, initial=10.0), np.minimum.reduce(a, axis=-1)


@numpy_case(lambda: (AB(3, 4),))
def np_mech_logical_reduce(m):
    return np.logical_and.reduce(m, axis=1), np.logical_or.reduce(m)


@numpy_case(lambda: (A(3, 5), AI(4, 3)))
def np_mech_maximum_accumulate(a, i):
    return np.maximum.accumulate(a, axis=1), np.minimum.accumulate(i)


@numpy_case(lambda: (A(3, 4), AI(3, 4)))
def np_mech_add_multiply_accumulate(a, i):
    return np.add.accumulate(a), np.multiply.accumulate(i, axis=1)


@numpy_case(lambda: (A(5), AI(6, high=5)), mutates=True)
def np_mech_add_at_repeated(a, idx):
    np.add.at(a, idx, 1.0)
    return a * 2


@numpy_case(lambda: (np.zeros(4), AI(8, high=4), A(8)), mutates=True)
def np_mech_add_at_scatter_values(acc, idx, vals):
    np.add.at(acc, idx, vals)
    return acc


@numpy_case(lambda: (A(5), AI(6, high=5)), mutates=True)
def np_mech_maximum_at(a, idx):
    np.maximum.at(a, idx, 0.5)
    return a


@numpy_case(lambda: (A(3, 4), AI(5, high=3), AI(5, high=4)), mutates=True)
def np_mech_subtract_at_2d(a, r, c):
    np.subtract.at(a, (r, c), 1)
    return a.sum()


@numpy_case(lambda: (A(3, 4), AI(5, high=4)), mutates=True)
def np_mech_add_at_into_view_histogram(a, idx):
    np.add.at(a[1], idx, 1.0)                # writes through the row view into the input
    hist = np.zeros(4)
    np.add.at(hist, (idx * 3) % 4, a[2, 0])
    return hist, a.sum()


@numpy_case(lambda: (AI(5), AI(6, high=5)), mutates=True)
def np_mech_add_at_int_casts(a, idx):
    np.add.at(a, idx, 2.7)                   # cast back into int64 unsafely, as eager does
    return a


# ---- dtypes -----------------------------------------------------------------------------
@numpy_case(lambda: (_u(4, dtype=np.uint16), AI(4, low=-5, high=5, dtype=np.int8)))
def np_mech_uint16_int8_mix(a, b):
    return a + b, a * 2, a // 3, a - 1, np.maximum(a, b)


@numpy_case(lambda: (_u(3, 4, dtype=np.uint32),))
def np_mech_uint32_reductions(a):
    return a.sum(), a.sum(axis=0), a.mean(), a.max(axis=1), a.prod(axis=1), a.cumsum()


@numpy_case(lambda: (_u(4, dtype=np.uint64), AI(4, dtype=np.int64)))
def np_mech_uint64_int64_to_float(a, b):
    return a + b, a * 2, a > b


@numpy_case(lambda: (_u(4, dtype=np.uint8), AI(4, low=-5, high=5, dtype=np.int8), _u(4, dtype=np.uint32)))
def np_mech_small_int_promotions(a, b, c):
    return a + b, b * c, a + c, (a + 1.5).dtype


@numpy_case(lambda: (A(4, dtype=np.float16), AI(4, dtype=np.int16), _u(4, dtype=np.uint16)), rtol=1e-3,
            atol=1e-3)
def np_mech_float16_mixed(h, i, u):
    return h + i, h * u, h + 1.5, np.sin(u), i / 2


@numpy_case(lambda: (_u(3, 4, dtype=np.uint16),))
def np_mech_uint16_float_math(a):
    return np.sqrt(a), a / 7, np.exp(a * 0.01), a.astype(np.float32) + 0.5


@numpy_case(lambda: (_u(4, dtype=np.uint16), _u(4, dtype=np.uint32)), mutates=True)
def np_mech_uint_inplace(a, b):
    a += 3
    b *= a                               # uint16 into uint32: same kind
    return b


# ---- a branch on one element ------------------------------------------------------------
@with_breaks("numpy", lambda: (A(4, 3),), graphs=2, breaks=1, reads_data=True)
def np_mech_branch_on_element(a):
    v = a[1, 0]
    b = a * 3
    if v > 0.5:
        return b + v
    return b - 1


@with_breaks("numpy", lambda: (AP(5), 3), graphs=2, breaks=1, reads_data=True)
def np_mech_branch_on_indexed_element(a, i):
    last = a[i]
    if last < 1.0:
        return a / last
    return a
