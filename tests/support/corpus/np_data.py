"""numpy: operators, subscripts and slices (negative steps, None, Ellipsis), setitem,
building and unpacking containers, list and dict methods."""
import numpy as np

from ._base import A, AP, AI, AB, numpy_case


@numpy_case(lambda: (A(3, 4), AP(3, 4)))
def np_binary_operators(a, b):
    return a + b, a - b, a * b, a / b, a // b, a % b, a ** 2, b ** 0.5, 2 - a, 1 / b, a @ b.T


@numpy_case(lambda: (AI(3, 4, low=1, high=100), AI(3, 4, low=1, high=8)))
def np_integer_bitwise(a, b):
    return a // b, a % b, a & b, a | b, a ^ b, a << 1, a >> 1, ~a, -a, a / b


@numpy_case(lambda: (A(3, 4), A(3, 4)))
def np_comparisons(a, b):
    return a < b, a <= 0, a > b, a >= 0.5, a == b, a != b, (a > 0) & (b < 0), ~(a > b)


@numpy_case(lambda: (A(3, 4),))
def np_unary(a):
    return -a, +a, abs(a), np.negative(a), np.logical_not(a > 0)


@numpy_case(lambda: (A(3),))
def np_constant_folding(a):
    k = (2 ** 4 - 1) // 3 + 7 % 4
    flag = not (k == 8)
    return a * k + flag


@numpy_case(lambda: (A(4, 5, 6),))
def np_basic_indexing(a):
    return a[0], a[-1, 2], a[1:3], a[:, 1:-1], a[..., 0], a[1, ..., 2:4], a[:, :, ::2]


@numpy_case(lambda: (A(8), A(4, 6)))
def np_negative_steps(a, m):
    return a[::-1], a[::-2], a[6:1:-2], m[::-1, ::-1], m[:, -2::-3]


@numpy_case(lambda: (A(4, 5),))
def np_none_ellipsis(a):
    return a[None], a[:, None], a[..., None], a[None, ..., 2], a[np.newaxis, :, 1:3]


@numpy_case(lambda: (A(4, 5), AI(3, high=4)))
def np_advanced_indexing(a, idx):
    return a[idx], a[:, [0, 2]], a[idx, 1], a[[0, 1], [2, 3]]


@numpy_case(lambda: (A(4, 5), A(5)))
def np_setitem_intermediate(a, v):
    b = a.copy()
    b[0] = 0.0
    b[1:3, 2:] = 1.0
    b[-1] = v
    b[..., 0] = b[..., 1] * 2
    b[::-1][0] = 7.0
    return b


@numpy_case(lambda: (A(4, 5),), mutates=True)
def np_setitem_input(a):
    a[1:3] = 0
    a[:, -1] = 5.0
    return a.sum()


@numpy_case(lambda: (A(4, 5), AB(4, 5)))
def np_setitem_mask(a, m):
    b = a * 1
    b[m] = -1.0
    return b


@numpy_case(lambda: (A(3), A(3)))
def np_build_unpack(a, b):
    t = (a, b, a + b)
    lst = [*t, a * 2]
    first, *rest = lst
    x, (y, z) = a, (b, a - b)
    d = {"a": a, **{"b": b}}
    return first + len(rest), x + y * z, d, tuple(lst[1:])


@numpy_case(lambda: (A(3, 4),))
def np_unpack_array_rows(a):
    r0, r1, r2 = a
    n, m = a.shape
    return r0 * r1 + r2 * n - m


@numpy_case(lambda: (A(3),))
def np_set_constants(a):
    s = {1, 2}
    s.add(3)
    s.update({3, 4})
    return a * len(s) + (2 in s)


@numpy_case(lambda: (A(3), A(3)))
def np_list_methods(a, b):
    lst = [a]
    lst.append(b)
    lst.extend([a + b])
    lst.insert(0, a - b)
    top = lst.pop()
    lst.reverse()
    return lst, top, len(lst)


@numpy_case(lambda: (A(3), A(3)))
def np_dict_methods(a, b):
    d = {"a": a}
    d["b"] = b
    d.update(c=a * b)
    extra = d.get("zz", a * 0)
    popped = d.pop("a")
    return sorted(d.keys()), list(d.values()), extra, popped, "c" in d


@numpy_case(lambda: ([A(3)], A(3)), mutates=True)
def np_input_list_written_back(out, a):
    out.append(np.exp(a))
    out[0] = out[0] * 2
    return len(out)
