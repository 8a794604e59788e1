"""numpy: in-place operations on intermediates and on inputs (the caller's arrays must
be mutated exactly as eager mutates them)."""
import numpy as np

from ._base import A, AP, numpy_case


@numpy_case(lambda: (A(3, 4), A(3, 4)))
def np_inplace_intermediate(a, b):
    c = a * 2
    c += b
    c *= 0.5
    np.maximum(c, 0, out=c)
    c[0] -= 1
    return c


@numpy_case(lambda: (A(3, 4), A(3, 4)), mutates=True)
def np_iadd_input(a, b):
    a += b
    return a


@numpy_case(lambda: (A(3, 4), A(4)), mutates=True)
def np_inplace_ops_input_returns_none(a, b):
    a -= b
    a /= 2.0
    a **= 2


@numpy_case(lambda: (A(5, 4),), mutates=True)
def np_slice_assign_zero_input(a):
    a[1:3] = 0
    return a.sum(axis=0)


@numpy_case(lambda: (A(4, 4),), mutates=True)
def np_inplace_through_view(a):
    row = a[1]
    row *= 0
    a[:, 0] = 3.0
    a[::-1, -1] += 1.0
    return a.mean()


@numpy_case(lambda: (A(3, 4), A(3, 4)), mutates=True)
def np_ufunc_out_input(a, b):
    np.add(a, b, out=b)
    np.sqrt(np.abs(a), out=a)
    return a + b


@numpy_case(lambda: (A(5), A(5)), mutates=True)
def np_rebinding_vs_inplace(a, b):
    a = a + 1
    b += 1
    a += 1
    return a, b


@numpy_case(lambda: (A(3, 4),), mutates=True)
def np_read_after_write(a):
    before = a.sum()
    a *= 2
    after = a.sum()
    return before, after


@numpy_case(lambda: (A(3, 4),))
def np_copy_then_modify(a):
    b = a.copy()
    b[b < 0] = 0.0
    np.exp(b, out=b)
    return b


@numpy_case(lambda: (AP(3, 4),), mutates=True)
def np_method_inplace_fill_clip(a):
    a.clip(0.6, 1.2, out=a)
    a[0].fill(9.0)
    return a.sum()
