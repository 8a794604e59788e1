"""numpy: if/else on constants and shapes, for loops, while with a constant-foldable
condition, asserts and f-strings on constants."""
import numpy as np

from ._base import A, numpy_case

NORMALISE = True


@numpy_case(lambda: (A(3, 4),))
def np_if_constant_global(a):
    if NORMALISE:
        a = a / 2.0
    else:
        a = a * 2.0
    return a + 1


@numpy_case(lambda: (A(3, 4),))
def np_if_on_shape(a):
    if a.ndim == 2 and a.shape[0] < a.shape[1]:
        a = a.T
    return a * a.shape[1]


@numpy_case(lambda: (A(3, 4), None))
def np_if_is_none(a, w):
    if w is None:
        w = np.ones(a.shape[-1])
    return a * w


@numpy_case(lambda: (A(3, 4, dtype=np.float32),))
def np_if_dtype(a):
    if a.dtype == np.float32:
        return a.astype(np.float64) * 2
    return a


@numpy_case(lambda: (A(4),))
def np_for_range(a):
    acc = np.zeros_like(a)
    for i in range(1, 4):
        acc = acc + a ** i
    return acc


@numpy_case(lambda: (A(4), A(4), A(4)))
def np_for_list_tuple(a, b, c):
    out = []
    for v in [a, b]:
        out.append(v * 2)
    for v in (c,):
        out.append(v - 1)
    return out


@numpy_case(lambda: (A(3),))
def np_for_dict_items(a):
    coeffs = {"lin": 1.0, "quad": 0.5}
    out = {}
    for name, c in coeffs.items():
        out[name] = a * c
    return out


@numpy_case(lambda: (A(4), A(4), A(4)))
def np_for_enumerate_zip(a, b, c):
    acc = np.zeros(4)
    for i, (x, y) in enumerate(zip([a, b], [b, c])):
        acc = acc + (x - y) * (i + 1)
    return acc


@numpy_case(lambda: (A(4),))
def np_while_constant(a):
    k = 3
    while k > 0:
        a = np.sqrt(a * a + k)
        k -= 1
    return a


@numpy_case(lambda: (A(8, 3),))
def np_while_shape(a):
    while a.shape[0] > 1:
        a = a[0::2] + a[1::2]
    return a


@numpy_case(lambda: (A(3, 4),))
def np_assert_and_fstring(a):
    assert a.ndim == 2, f"expected 2-d, got {a.ndim}"
    key = f"k{a.shape[1]}"
    scales = {"k4": 0.25, "k8": 0.125}
    return a * scales[key]
