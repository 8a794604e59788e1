"""numpy: calls (positional, keyword, *args, **kwargs), inlined user functions, nested
functions, lambdas, functools.partial and builtins."""
import functools

import numpy as np

from ._base import A, numpy_case


def _affine(a, scale, shift=0.0, *, power=1):
    return (a * scale + shift) ** power


def _varargs(*xs):
    out = xs[0]
    for v in xs[1:]:
        out = out + v
    return out


def _kw(v, **kw):
    return v * kw["a"] + kw.get("b", 0.0)


@numpy_case(lambda: (A(3, 4),))
def np_call_positional_keyword(a):
    return _affine(a, 2.0, 1.0) + _affine(a, shift=-1.0, scale=0.5, power=2)


@numpy_case(lambda: (A(3, 4), A(3, 4), A(3, 4)))
def np_call_star_args(a, b, c):
    parts = (a, b)
    return _varargs(*parts, c) * 2


@numpy_case(lambda: (A(3, 4),))
def np_call_star_kwargs(a):
    kw = {"a": 2.0}
    return _kw(a, **kw, b=1.0) + _affine(a, **{"scale": 3.0})


@numpy_case(lambda: (A(2, 3),), kwargs=lambda: {"b": A(2, 3), "alpha": 0.5})
def np_entry_kwargs(a, b, alpha=1.0):
    return a * alpha + b


@numpy_case(lambda: (A(4, 4),))
def np_numpy_keyword_calls(a):
    return (np.sum(a, axis=1, keepdims=True), np.clip(a, a_min=-0.5, a_max=0.5),
            np.mean(a, axis=0, dtype=np.float32))


def _l3(a):
    return np.tanh(a) * 2


def _l2(a, b):
    return _l3(a + b) - b


def _l1(a, b):
    return _l2(a, b) * _l3(b)


@numpy_case(lambda: (A(3, 4), A(3, 4)))
def np_inline_two_levels(a, b):
    return _l2(a, b)


@numpy_case(lambda: (A(3, 4), A(3, 4)))
def np_inline_three_levels(a, b):
    return _l1(a, b) + 1


@numpy_case(lambda: (A(3, 4),))
def np_nested_function_default(a):
    def soft(v, t=1.0):
        e = np.exp(v / t)
        return e / e.sum(axis=-1, keepdims=True)
    return soft(a), soft(a, t=2.0)


@numpy_case(lambda: (A(3, 4),))
def np_lambda(a):
    sq = lambda v: v * v  # noqa: E731
    return sq(a) + (lambda v, k=2: v * k)(a)


@numpy_case(lambda: (A(3, 4),))
def np_functools_partial(a):
    f = functools.partial(np.sum, axis=0)
    g = functools.partial(_affine, scale=2.0)
    return f(a) + g(a, shift=1.0).sum(axis=0)


@numpy_case(lambda: (A(3, 4), A(3, 4)))
def np_list_comprehension(a, b):
    return [np.sin(v) for v in (a, b, a + b)]


@numpy_case(lambda: (A(3, 5),))
def np_builtins_min_max_abs_len(a):
    n = min(a.shape)
    m = max(a.shape[0], 4)
    return np.abs(a[:n, :n]) * m + abs(-2) + len(a)


@numpy_case(lambda: (A(6),))
def np_builtins_int_float_isinstance(a):
    k = int(a.shape[0] / 4)
    s = float(a.shape[0])
    if isinstance(a, np.ndarray) and not isinstance(s, int):
        return a[:k] / s
    return a


@numpy_case(lambda: (A(2, 3),))
def np_builtins_getattr_hasattr(a):
    f = getattr(np, "cos")
    out = f(a)
    if hasattr(a, "T"):
        out = out + a.T.T
    if hasattr(np, "no_such_function_xyz"):
        out = out * 100
    return getattr(out, "sum")(axis=0)


@numpy_case(lambda: (A(4), A(4), A(4)))
def np_builtin_sum(a, b, c):
    return sum([a, b, c]) + sum(range(5))
