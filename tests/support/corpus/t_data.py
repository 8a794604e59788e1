"""torch: arithmetic/comparison/unary/is/in/not, subscripts and slices, tensor setitem,
building and unpacking tuples/lists/dicts/sets, list and dict methods on locals."""
import torch

from ._base import T, TP, TI, TB, torch_case


@torch_case(lambda: (T(3, 4), TP(3, 4)))
def t_binary_operators(x, y):
    return (x + y, x - y, x * y, x / y, x // y, x % y, x ** 2, y ** 0.5, 2 - x, 1 / y,
            3 * x, x @ y.T)


@torch_case(lambda: (TI(3, 4, low=1, high=100), TI(3, 4, low=1, high=8)))
def t_integer_and_bitwise_operators(a, b):
    return a // b, a % b, a & b, a | b, a ^ b, a << 1, a >> 1, ~a, -a


@torch_case(lambda: (T(3, 4), T(3, 4)))
def t_comparisons(x, y):
    return x < y, x <= y, x > 0, x >= y, x == y, x != 0.5, (x > 0) & (y < 0), ~(x > y)


@torch_case(lambda: (T(3, 4),))
def t_unary(x):
    return -x, +x, abs(x), ~(x > 0)


@torch_case(lambda: (T(3),))
def t_constant_arithmetic(x):
    a = 3 * 4 + 2 ** 3 - 7 // 2 + 7 % 3
    b = 1.5 * a / 2
    c = -a if a > 10 else a
    d = not (a == 3)
    return x * a + b + c + d


@torch_case(lambda: (T(3), T(3)))
def t_is_in_not(x, y):
    names = ("a", "b")
    out = x
    if "a" in names:
        out = out + 1
    if "z" not in names:
        out = out * 2
    if x is not y:
        out = out + y
    if not isinstance(x, int):
        out = out - 1
    return out


@torch_case(lambda: (T(3), T(3)))
def t_identity_in_list(x, y):
    lst = [x, y]
    if lst[0] is x and lst[1] is not x:
        x = x + 1
    return x, y is lst[1]


@torch_case(lambda: (T(4, 5, 6),))
def t_basic_indexing(x):
    return x[0], x[-1, 2], x[1:3], x[:, 1:-1], x[..., 0], x[1, ..., 2:4], x[:, :, ::2]


@torch_case(lambda: (T(4, 5),))
def t_none_and_ellipsis(x):
    return x[None], x[:, None, :], x[..., None], x[None, ..., None], x[..., 1:3]


@torch_case(lambda: (T(8),))
def t_negative_step_flip(x):
    # torch has no negative slice steps; flip is the torch spelling
    return x.flip(0), torch.flip(x, dims=[0])[::2]


@torch_case(lambda: (T(4, 5), TI(3, high=4), TB(4, 5)))
def t_advanced_indexing(x, idx, mask):
    return x[idx], x[:, [0, 2]], x[idx, 1], x[mask.any(1).long()]


@torch_case(lambda: (T(4, 5), T(5)))
def t_setitem_intermediate(x, v):
    y = x.clone()
    y[0] = 0.0
    y[1:3, 2:] = 1.0
    y[-1] = v
    y[..., 0] = y[..., 1] * 2
    return y


@torch_case(lambda: (T(4, 5),), mutates=True)
def t_setitem_input(x):
    x[1:3] = 0.0
    x[:, -1] = 5.0
    return x.sum()


@torch_case(lambda: (T(4, 5), TB(4, 5)))
def t_setitem_mask(x, m):
    y = x * 1
    y[m] = -1.0
    return y


@torch_case(lambda: (T(3), T(3)))
def t_build_tuple_list(x, y):
    t = (x, y, x + y)
    lst = [x * 2, y * 2]
    lst2 = [*t, *lst]
    tt = (*lst, x)
    return t, lst, lst2, tt, len(lst2) + len(tt)


@torch_case(lambda: (T(3), T(3)))
def t_build_dict(x, y):
    d = {"x": x, "y": y}
    d2 = {**d, "z": x + y}
    d3 = dict(a=x * 2, b=y * 2)
    d4 = {k: v + 1 for k, v in d2.items()}
    return d, d2, d3, d4


@torch_case(lambda: (T(3),))
def t_build_set_constants(x):
    s = {1, 2, 3}
    s.add(4)
    s2 = set([2, 3]) | {5}
    return x * len(s) + (3 in s) + len(s2 & s)


@torch_case(lambda: ((T(2), (T(2), T(2))),))
def t_unpack_nested(p):
    a, (b, c) = p
    first, *rest = [a, b, c]
    *init, last = (a, b, c)
    return first + len(rest) + last + init[0] * c


@torch_case(lambda: (T(3, 4),))
def t_unpack_tensor_and_shape(x):
    r0, r1, r2 = x
    h, w = x.shape
    return r0 + r1 * r2 * h - w


@torch_case(lambda: (T(3), T(3)))
def t_list_methods(x, y):
    lst = [x]
    lst.append(y)
    lst.extend([x * 2, y * 2])
    lst.insert(0, x + y)
    last = lst.pop()
    lst.reverse()
    del lst[1]
    lst[0] = lst[0] + 1
    cp = lst.copy()
    cp.clear()
    return lst, last, len(cp)


@torch_case(lambda: (T(3), T(3)))
def t_dict_methods(x, y):
    d = {"a": x}
    d["b"] = y
    d.update({"c": x + y}, d=x * y)
    v = d.get("missing", x * 0)
    p = d.pop("a")
    d.setdefault("e", y - x)
    keys = list(d.keys())
    return d, v, p, keys, "b" in d, len(d)


@torch_case(lambda: (T(2, 3), T(2, 3)))
def t_list_slicing_and_index(x, y):
    lst = [x, y, x + y, x - y]
    return lst[1:3], lst[::-1], lst[-1], tuple(lst[::2])


@torch_case(lambda: ([T(3)], {"a": T(3)}, T(3)), mutates=True)
def t_input_containers_written_back(out, d, x):
    out.append(x.sin())
    out += [x * 2]
    d["b"] = d["a"] + x
    return len(out)


@torch_case(lambda: (T(3),))
def t_keys_views_compare_as_sets(x):
    d = {"a": x, "b": x + 1}
    keys = d.keys()
    d["c"] = x * 2                         # the view is live
    same = keys == {"c": 0, "b": 1, "a": 2}.keys()
    return x + 1 if same and keys != {"a"} and keys == {"a", "b", "c"} else x - 1
