"""numpy: locals, globals, closures and cells, attribute and method loads, user objects,
dataclasses and namedtuples."""
import collections
import dataclasses

import numpy as np

from ._base import A, AP, numpy_case

_rng = np.random.default_rng(4321)
W_GLOBAL = _rng.standard_normal((4, 4))
B_GLOBAL = _rng.standard_normal(4)
SCALE = 0.5
OFFSETS = (1.0, 2.0, 3.0)
CONFIG = {"eps": 1e-5, "scale": 2.0}


@numpy_case(lambda: (A(3, 4),))
def np_locals_reassign(a):
    b = a * 2
    c = b + 1
    b = c - a
    return b * c


@numpy_case(lambda: (A(3, 4),))
def np_global_array(a):
    return a @ W_GLOBAL + B_GLOBAL


@numpy_case(lambda: (A(5),))
def np_global_constants(a):
    return a * SCALE + OFFSETS[2] - CONFIG["scale"] + np.pi


def _make_closure(k):
    w = np.full(3, float(k))

    def inner(a):
        return a * k + w
    return inner


np_closure_capture = _make_closure(2)
np_closure_capture.__name__ = "np_closure_capture"
numpy_case(lambda: (A(2, 3),))(np_closure_capture)


@numpy_case(lambda: (A(4),))
def np_cell_inner_function(a):
    scale = 3.0
    bias = a + 1

    def inner(v):
        return v * scale + bias
    return inner(a) - inner(bias)


@numpy_case(lambda: (A(4),))
def np_cell_modified(a):
    total = a

    def add(v):
        nonlocal total
        total = total + v
    add(a)
    add(a * 3)
    return total


class Holder:
    def __init__(self):
        g = np.random.default_rng(9)
        self.weight = g.standard_normal((3, 3))
        self.alpha = 0.25
        self.inner = Inner()

    def apply(self, a):
        return a @ self.weight * self.alpha


class Inner:
    beta = 1.5

    def shift(self, a):
        return a + self.beta


HOLDER = Holder()


@numpy_case(lambda: (A(2, 3),))
def np_user_object_attrs(a):
    return a @ HOLDER.weight + HOLDER.alpha + HOLDER.inner.beta


@numpy_case(lambda: (A(2, 3),))
def np_user_object_method(a):
    return HOLDER.apply(a) + HOLDER.inner.shift(a)


@numpy_case(lambda: (A(3, 4),))
def np_array_attributes(a):
    n, m = a.shape
    return a.reshape(m, n) * a.ndim + a.size + len(a) + a.shape[-1] + a.itemsize


@numpy_case(lambda: (A(3, 4),))
def np_method_chain(a):
    return np.abs(a).clip(0.1, 2.0).sum(axis=1).round(3)


@numpy_case(lambda: (A(3, 4), A(4, 4, dtype=np.float32)))
def np_dtype_attribute(a, b):
    if a.dtype == np.float64 and b.dtype.itemsize == 4:
        return a @ b.astype(a.dtype)
    return a


@dataclasses.dataclass
class Params:
    scale: float
    shift: float
    weight: np.ndarray


PARAMS = Params(scale=2.0, shift=-1.0, weight=_rng.standard_normal(4))


@numpy_case(lambda: (A(3, 4),))
def np_dataclass_global(a):
    return a * PARAMS.scale + PARAMS.shift + PARAMS.weight


@numpy_case(lambda: (A(3, 4), A(4)))
def np_dataclass_build(a, w):
    p = Params(scale=3.0, shift=0.5, weight=w)
    return a * p.scale + p.weight - p.shift


@numpy_case(lambda: (Params(scale=1.5, shift=0.25, weight=A(4)), A(2, 4)))
def np_dataclass_input(p, a):
    return a * p.scale + p.shift + p.weight


Stats = collections.namedtuple("Stats", "mean std")


@numpy_case(lambda: (A(5, 3),))
def np_namedtuple_return(a):
    return Stats(a.mean(axis=0), a.std(axis=0))


@numpy_case(lambda: (Stats(A(3), AP(3)), A(4, 3)))
def np_namedtuple_input(s, a):
    mean, std = s
    return (a - s.mean) / std + mean
