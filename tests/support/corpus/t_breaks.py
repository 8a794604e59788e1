"""Graph breaks that split frames (torch): breaks at different stack depths, in loops, in
inlined helpers and module forwards, with closures, *args/**kwargs and keyword-only
arguments. Counts are for one call, over every frame it compiles; the oracle test checks
them against torch.compile."""
import zlib

import torch
from torch import nn

from ._base import T, TP, with_breaks

W = torch.linspace(-1.0, 1.0, 4)


def _say(*parts):
    print("shapejit corpus:", *parts)


def _crc(s):
    return zlib.crc32(s.encode()) % 5 + 1


@with_breaks("torch", lambda: (T(4),), graphs=1, breaks=1)
def t_brk_print_first(x):
    print("shapejit corpus: first")
    return x.sin() * 2


@with_breaks("torch", lambda: (T(4),), graphs=1, breaks=1)
def t_brk_print_last(x):
    y = x.sin() * 2
    print("shapejit corpus: last")
    return y


@with_breaks("torch", lambda: (T(4),), graphs=3, breaks=2)
def t_brk_two_prints(x):
    y = x.sin()
    print("shapejit corpus: one")
    z = y.cos()
    print("shapejit corpus: two")
    return z + y


@with_breaks("torch", lambda: (T(4),), graphs=2, breaks=1)
def t_brk_value_on_stack(x):
    return (x.sin() + 1) * _crc("stack")


@with_breaks("torch", lambda: (T(4), T(4)), graphs=2, breaks=1)
def t_brk_deep_stack(x, y):
    return torch.cat([x.sin(), y * 2, x * _crc("deep")])


@with_breaks("torch", lambda: (T(4),), graphs=2, breaks=1)
def t_brk_print_kwargs(x):
    y = x.exp()
    print("shapejit corpus:", "kw", sep="-", end="\n")
    return y - 1


@with_breaks("torch", lambda: (T(4),), graphs=2, breaks=1)
def t_brk_unknown_c_mid(x):
    a, b = x * 3, x.neg()
    n = zlib.adler32(b"shapejit") % 11
    return torch.where(a > b, a + n, b - n)


@with_breaks("torch", lambda: (T(4),), graphs=2, breaks=1)
def t_brk_result_unpacked(x):
    a = x.cos()
    q, r = divmod(zlib.crc32(b"shapejit"), 7)
    return a * q + r


def _helper_print(y):
    print("shapejit corpus: in helper")
    return y * 2


@with_breaks("torch", lambda: (T(4),), graphs=3, breaks=2)
def t_brk_in_helper(x):
    a = x.cos()
    b = _helper_print(a)
    return b + 1


def _outer_helper(y):
    z = y + 1
    return _helper_print(z) * 3


@with_breaks("torch", lambda: (T(4),), graphs=5, breaks=3)
def t_brk_in_helper_two_deep(x):
    a = x.sin()
    b = _outer_helper(a)
    return b - a


def _helper_kw(y, *, scale, shift=0.0):
    _say("kw helper")
    return y * scale + shift


@with_breaks("torch", lambda: (T(4),), graphs=3, breaks=2)
def t_brk_helper_kwonly(x):
    a = x.tanh()
    return _helper_kw(a, scale=2.0, shift=1.0) + a


@with_breaks("torch", lambda: (T(4), T(4), T(4)), graphs=2, breaks=1)
def t_brk_star_args(*xs):
    s = xs[0].sin() + xs[1]
    _say("star args", len(xs))
    return s * xs[2]


@with_breaks("torch", lambda: (T(4),), kwargs=lambda: {"b": T(4), "c": T(4)}, graphs=2, breaks=1)
def t_brk_star_kwargs(a, **kw):
    s = a + kw["b"]
    _say("kwargs", sorted(kw))
    return s * kw["c"]


@with_breaks("torch", lambda: (T(4),), kwargs=lambda: {"scale": 3.0}, graphs=2, breaks=1)
def t_brk_kwonly(x, *, scale):
    y = x * scale
    _say("kwonly")
    return y + scale


def _make_closure():
    k = 1.5
    bias = torch.linspace(0.0, 1.0, 4)

    def t_brk_closure(x):
        y = x * k + bias
        _say("closure")
        return y * k - bias
    return t_brk_closure


with_breaks("torch", lambda: (T(4),), graphs=2, breaks=1)(_make_closure())


@with_breaks("torch", lambda: (T(4),), graphs=2, breaks=1)
def t_brk_cell_after(x):
    k = 2.0
    y = x * k
    _say("cell")
    f = lambda v: v * k  # noqa: E731
    return f(y)


@with_breaks("torch", lambda: (T(4),), graphs=2, breaks=1)
def t_brk_global_after(x):
    y = x.sin()
    _say("global")
    return y * W


@with_breaks("torch", lambda: (T(4),), graphs=2, breaks=1)
def t_brk_tensor_branch_true(x):
    y = x.abs() + 0.1
    if y.sum() > 0:
        return y * 2
    return y * 3


@with_breaks("torch", lambda: (-TP(4),), graphs=2, breaks=1)
def t_brk_tensor_branch_false(x):
    if x.sum() > 0:
        return x * 2
    return x * 3


@with_breaks("torch", lambda: (T(4),), graphs=2, breaks=1, reads_data=True)
def t_brk_item_compare(x):
    y = x.exp()
    t = y.max().item()
    return y / t


@with_breaks("torch", lambda: (T(4),), graphs=2, breaks=1, reads_data=True)
def t_brk_tolist(x):
    y = x + 1
    vals = y.tolist()
    return y * len(vals)


@with_breaks("torch", lambda: (T(4),), graphs=1, breaks=1)
def t_brk_for_range(x):
    for i in range(3):
        x = x * 2 + i
        _say("iteration", i)
    return x


@with_breaks("torch", lambda: (T(4), T(4), T(4)), graphs=1, breaks=1)
def t_brk_for_list(a, b, c):
    acc = a * 0
    for t in [a, b, c]:
        acc = acc + t.sin()
        _say("item")
    return acc


@with_breaks("torch", lambda: (T(4),), graphs=1, breaks=1)
def t_brk_while(x):
    i = 0
    while i < 3:
        x = x + 1
        _say("while", i)
        i += 1
    return x * 2


@with_breaks("torch", lambda: (T(4),), graphs=1, breaks=1)
def t_brk_loop_enumerate(x):
    out = []
    for i, s in enumerate([1.0, 2.0]):
        out.append(x * s + i)
        _say("enumerate", i)
    return torch.stack(out)


class _Printer(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)
        print("shapejit corpus: module forward")
        return h.relu()


_PRINTER = _Printer().eval()


@with_breaks("torch", lambda: (T(2, 4),), graphs=2, breaks=2)
def t_brk_module_forward(x):
    return _PRINTER.forward(x)


class _Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = nn.Linear(4, 4)
        self.inner = _Printer()

    def forward(self, x):
        return self.inner(self.pre(x)) * 2


_OUTER = _Outer().eval()


@with_breaks("torch", lambda: (T(2, 4),), graphs=4, breaks=3)
def t_brk_submodule_forward(x):
    return _OUTER(x)


class _Scaler:
    def __init__(self):
        self.scale = 2.0

    def run(self, x):
        y = x * self.scale
        _say("method")
        return y + self.scale


_SCALER = _Scaler()


@with_breaks("torch", lambda: (T(4),), graphs=2, breaks=2)
def t_brk_method(x):
    return _SCALER.run(x)


@with_breaks("torch", lambda: (T(4),), graphs=2, breaks=1)
def t_brk_into_dict(x):
    d = {"a": x.sin()}
    d["n"] = _crc("dict")
    return d["a"] * d["n"]


@with_breaks("torch", lambda: (T(4),), graphs=2, breaks=1, reads_data=True)
def t_brk_nonzero_mid(x):
    y = x * 2
    idx = y.nonzero()
    return y.sum() + idx.shape[0]


@with_breaks("torch", lambda: (T(4),), graphs=1, breaks=1)
def t_brk_fstring_arg(x):
    y = x.sigmoid()
    print(f"shapejit corpus: shape {tuple(y.shape)}")
    return y


@with_breaks("torch", lambda: (T(4),), graphs=2, breaks=1)
def t_brk_then_caught(x):
    y = x.sin()
    _say("before raise")
    try:
        raise ValueError("caught after the break")
    except ValueError:
        y = y + 1
    return y


def _checked(y):
    if y.shape[0] != 4:
        raise IndexError("wrong length")
    return y * 2


@with_breaks("torch", lambda: (T(4),), graphs=2, breaks=1)
def t_brk_then_helper_raises_caught(x):
    y = x.cos()
    _say("then helper")
    try:
        z = _checked(y[:3])
    except IndexError:
        z = _checked(y)
    return z
