"""torch: calls (positional, keyword, *args, **kwargs), inlined user functions, nested
functions, lambdas, functools.partial and builtins."""
import functools
import operator

import torch
import torch.nn.functional as F

from ._base import T, torch_case


def _affine(x, scale, shift=0.0, *, power=1):
    return (x * scale + shift) ** power


def _varargs(*xs):
    out = xs[0]
    for v in xs[1:]:
        out = out + v
    return out


def _kwonly(v, **kw):
    return v * kw["a"] + kw.get("b", 0.0) + kw.get("c", 0.0)


@torch_case(lambda: (T(3, 4),))
def t_call_positional(x):
    return _affine(x, 2.0, 1.0)


@torch_case(lambda: (T(3, 4),))
def t_call_keyword(x):
    return _affine(x, shift=-1.0, scale=0.5, power=2)


@torch_case(lambda: (T(3, 4), T(3, 4), T(3, 4)))
def t_call_star_args(x, y, z):
    parts = [x, y]
    return _varargs(*parts, z) + _varargs(*(x, y))


@torch_case(lambda: (T(3, 4),))
def t_call_star_kwargs(x):
    kw = {"a": 2.0, "b": 1.0}
    return _kwonly(x, **kw, c=3.0) + _affine(x, **{"scale": 3.0, "shift": 1.0})


@torch_case(lambda: (T(2, 3),), kwargs=lambda: {"scale": 2.0, "y": T(2, 3)})
def t_entry_kwargs(x, y, scale=1.0):
    return x * scale + y


@torch_case(lambda: (T(2, 3), T(2, 3), T(2, 3)))
def t_entry_varargs(*xs):
    return torch.stack(xs).sum(0)


@torch_case(lambda: (T(4, 4),))
def t_torch_kwargs_calls(x):
    a = torch.sum(x, dim=1, keepdim=True)
    b = torch.clamp(x, min=-0.5, max=0.5)
    c = F.softmax(x, dim=-1)
    return a + b + c


def _lvl3(x):
    return torch.tanh(x) * 2


def _lvl2(x, y):
    return _lvl3(x + y) - y


def _lvl1(x, y):
    return _lvl2(x, y) * _lvl3(y)


@torch_case(lambda: (T(3, 4), T(3, 4)))
def t_inline_two_levels(x, y):
    return _lvl2(x, y)


@torch_case(lambda: (T(3, 4), T(3, 4)))
def t_inline_three_levels(x, y):
    return _lvl1(x, y) + 1


def _recursive_sum(x, n):
    if n == 0:
        return x
    return _recursive_sum(x * 0.5, n - 1) + x


@torch_case(lambda: (T(5),))
def t_inline_constant_recursion(x):
    return _recursive_sum(x, 3)


@torch_case(lambda: (T(3, 4),))
def t_nested_function_def(x):
    def gate(v, k=2.0):
        return torch.sigmoid(v * k) * v
    return gate(x) + gate(x, k=0.5)


@torch_case(lambda: (T(3, 4),))
def t_lambda_local(x):
    sq = lambda v: v * v  # noqa: E731
    add = lambda a, b=1.0: a + b  # noqa: E731
    return add(sq(x)) + add(x, b=x)


@torch_case(lambda: (T(3, 4), T(3, 4)))
def t_lambda_in_map_list(x, y):
    fns = [lambda v: v + 1, lambda v: v * 2, torch.relu]
    return [f(x + y) for f in fns]


@torch_case(lambda: (T(3, 4),))
def t_functools_partial(x):
    f = functools.partial(_affine, scale=2.0, shift=0.5)
    g = functools.partial(torch.clamp, min=-1.0)
    return f(x) + g(x, max=1.0)


SOFTMAX_LAST = functools.partial(F.softmax, dim=-1)


@torch_case(lambda: (T(3, 4),))
def t_functools_partial_global(x):
    return SOFTMAX_LAST(x) * 2


@torch_case(lambda: (T(3, 4), T(3, 4)))
def t_builtins_isinstance_len(x, y):
    out = x
    if isinstance(y, torch.Tensor):
        out = out + y
    if isinstance(3, (int, float)):
        out = out * len(x)
    return out + len([x, y])


@torch_case(lambda: (T(3, 5),))
def t_builtins_min_max_abs(x):
    n = min(x.shape[0], x.shape[1])
    m = max(2, x.shape[1], 4)
    return x[:n, :n].abs() * m + abs(-3) + min(1.0, 2.0)


@torch_case(lambda: (T(6),))
def t_builtins_int_float(x):
    k = int(x.shape[0] / 4)
    s = float(x.shape[0])
    return x[:k] / s + int("3") + float("0.5")


@torch_case(lambda: (T(2, 3),))
def t_builtins_getattr_hasattr(x):
    op = getattr(torch, "sigmoid")
    out = op(x)
    if hasattr(x, "shape"):
        out = out + 1
    if hasattr(torch, "no_such_function_xyz"):
        out = out - 100
    return out + getattr(x, "mean")()


@torch_case(lambda: (T(4), T(4), T(4)))
def t_builtins_sum_range(x, y, z):
    total = sum([x, y, z])
    total = total + sum(range(4))
    return total * 2


@torch_case(lambda: (T(3, 4), T(3, 4)))
def t_operator_module(x, y):
    return operator.add(x, y) * operator.mul(x, 2.0) - operator.neg(y)
