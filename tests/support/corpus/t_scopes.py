"""torch: locals, globals, closures and cells, attribute and method loads, user objects,
dataclasses and namedtuples."""
import collections
import dataclasses

import torch

from ._base import T, torch_case

_g = torch.Generator().manual_seed(1234)
W_GLOBAL = torch.randn(4, 4, generator=_g)
B_GLOBAL = torch.randn(4, generator=_g)
SCALE = 0.5
OFFSETS = (1.0, 2.0, 3.0)
CONFIG = {"eps": 1e-5, "scale": 2.0}


@torch_case(lambda: (T(3, 4),))
def t_locals_reassign(x):
    a = x * 2
    b = a + 1
    a = b - x
    c = a
    return c * b


@torch_case(lambda: (T(3, 4),))
def t_global_tensor(x):
    return x @ W_GLOBAL + B_GLOBAL


@torch_case(lambda: (T(5),))
def t_global_constants(x):
    return x * SCALE + OFFSETS[1] - CONFIG["scale"]


def _make_closure(k):
    w = torch.full((3,), float(k))

    def inner(x):
        return x * k + w
    return inner


t_closure_capture = _make_closure(3)
t_closure_capture.__name__ = "t_closure_capture"
torch_case(lambda: (T(2, 3),))(t_closure_capture)


@torch_case(lambda: (T(4),))
def t_cell_inner_function(x):
    scale = 3.0
    bias = x + 1

    def inner(y):
        return y * scale + bias
    return inner(x) + inner(bias)


@torch_case(lambda: (T(4),))
def t_cell_modified(x):
    total = x

    def add(v):
        nonlocal total
        total = total + v
    add(x)
    add(x * 2)
    return total


class Holder:
    def __init__(self):
        g = torch.Generator().manual_seed(7)
        self.weight = torch.randn(3, 3, generator=g)
        self.alpha = 0.25
        self.name = "holder"
        self.inner = Inner()

    def apply(self, x):
        return x @ self.weight * self.alpha

    @property
    def doubled(self):
        return self.alpha * 2


class Inner:
    beta = 1.5

    def shift(self, x):
        return x + self.beta


HOLDER = Holder()


@torch_case(lambda: (T(2, 3),))
def t_user_object_attrs(x):
    return x @ HOLDER.weight + HOLDER.alpha + HOLDER.inner.beta


@torch_case(lambda: (T(2, 3),))
def t_user_object_method(x):
    return HOLDER.apply(x) + HOLDER.inner.shift(x)


@torch_case(lambda: (T(2, 3),))
def t_user_object_property(x):
    return x * HOLDER.doubled


@torch_case(lambda: (T(3, 4),))
def t_tensor_attributes(x):
    n, m = x.shape
    return x.reshape(m, n) * x.ndim + x.size(0) + x.dim() + x.numel()


@torch_case(lambda: (T(3, 4),))
def t_tensor_method_chain(x):
    return x.abs().add(1).log().mul(2).sum(dim=1)


@torch_case(lambda: (T(3, 4),))
def t_tensor_T_mT(x):
    return x.T @ x + x.mT @ x


@dataclasses.dataclass
class Params:
    scale: float
    shift: float
    weight: torch.Tensor


_pg = torch.Generator().manual_seed(11)
PARAMS = Params(scale=2.0, shift=-1.0, weight=torch.randn(4, generator=_pg))


@torch_case(lambda: (T(3, 4),))
def t_dataclass_global(x):
    return x * PARAMS.scale + PARAMS.shift + PARAMS.weight


@torch_case(lambda: (T(3, 4), T(4)))
def t_dataclass_argument_like(x, w):
    p = Params(scale=3.0, shift=0.5, weight=w)
    return x * p.scale + p.weight - p.shift


@torch_case(lambda: (Params(scale=1.5, shift=0.25, weight=T(4)), T(2, 4)))
def t_dataclass_input(p, x):
    return x * p.scale + p.shift + p.weight


Point = collections.namedtuple("Point", ["x", "y"])


@torch_case(lambda: (T(3), T(3)))
def t_namedtuple_build_and_read(a, b):
    p = Point(a, b)
    q = Point(x=p.y, y=p.x)
    return p.x * q.x + p[1] - q[0]


@torch_case(lambda: (Point(T(3), T(3)),))
def t_namedtuple_input(p):
    x, y = p
    return Point(x + y, x * y)


@torch_case(lambda: (T(4),))
def t_namedtuple_return(x):
    return Point(x.sum(), x.mean())
