"""Guards and inputs reuse a source's last read while the dicts and types it came from keep
their version tags: every change that could alter a read must be seen. Each case reads a
tensor input (a stale read would be a wrong value, not a recompile) and a Python scalar (a
guarded constant), changes what they were read from, and compares with eager."""
import gc
import sys
import types

import pytest
import torch
from torch import nn

import shapejit


@pytest.fixture(autouse=True)
def _fresh():
    shapejit.reset()
    yield
    shapejit.reset()


def _f(x, o):
    return x * o.k + o.w


class Plain:
    def __init__(self, k, w):
        self.k = k
        self.w = w


class WithGetattr:
    """A class whose __getattr__ answers what the instance dict lacks."""

    def __init__(self, k, w):
        self.k = k
        self.w = w

    def __getattr__(self, name):
        if name == "fallback":
            return 10.0
        raise AttributeError(name)


def _same(cf, f, *args):
    torch.testing.assert_close(cf(*args), f(*args))


@pytest.mark.parametrize("cls", [Plain, WithGetattr])
def test_instance_writes_are_seen(cls):
    x = torch.randn(5)
    o = cls(2.0, torch.randn(5))
    cf = shapejit.compile(_f)
    for _ in range(3):
        _same(cf, _f, x, o)
    o.w = torch.randn(5)                 # a new tensor, same shape: read again, not stale
    _same(cf, _f, x, o)
    o.w.add_(1.0)                        # the same tensor written in place
    _same(cf, _f, x, o)
    o.k = 3.0                            # a guarded constant
    _same(cf, _f, x, o)
    o.__dict__["w"] = torch.randn(5)     # through the dict itself
    _same(cf, _f, x, o)
    o.__dict__ = {"k": 4.0, "w": torch.randn(5)}   # a new dict
    _same(cf, _f, x, o)
    del o.k                              # gone: raises as eager does
    with pytest.raises(AttributeError):
        cf(x, o)
    o.k = 5.0
    _same(cf, _f, x, o)


def test_class_changes_are_seen():
    class C:
        pass

    x = torch.randn(4)
    o = C()
    o.k, o.w = 2.0, torch.randn(4)
    cf = shapejit.compile(_f)
    _same(cf, _f, x, o)
    _same(cf, _f, x, o)
    C.w = property(lambda self: torch.full((4,), 7.0))   # a data descriptor now wins
    _same(cf, _f, x, o)
    del C.w
    _same(cf, _f, x, o)

    class D:
        pass

    o.__class__ = D                      # another type, same dict
    _same(cf, _f, x, o)
    D.k = property(lambda self: -1.0)
    _same(cf, _f, x, o)


def test_objects_at_a_reused_address():
    """An object freed and another made in its place (often at the same address) is read
    afresh."""
    x = torch.randn(6)
    cf = shapejit.compile(_f)
    seen = set()
    for i in range(40):
        o = Plain(2.0, torch.full((6,), float(i)))
        seen.add(id(o))
        _same(cf, _f, x, o)
        del o
        gc.collect()
    assert len(seen) < 40   # the allocator did hand out an address twice


def test_module_parameters_and_submodules():
    m = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    cm = shapejit.compile(m)
    x = torch.randn(3, 4)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(cm(x), m(x))
        m[0].weight = nn.Parameter(torch.randn(4, 4))          # a parameter swapped
        torch.testing.assert_close(cm(x), m(x))
        m[0].weight.mul_(2.0)                                   # written in place
        torch.testing.assert_close(cm(x), m(x))
        m[2] = nn.Linear(4, 2)                                  # a submodule swapped
        torch.testing.assert_close(cm(x), m(x))
        m[0]._parameters["bias"] = nn.Parameter(torch.randn(4))  # through the dict
        torch.testing.assert_close(cm(x), m(x))
        m[1].register_forward_hook(lambda mod, inp, out: out * 3.0)   # a hook added
        torch.testing.assert_close(cm(x), m(x))


SCALE = 2.0
TABLE = {"k": 2.0}


def _g(x):
    return x * SCALE + TABLE["k"]


def test_globals_and_dict_items():
    global SCALE
    cg = shapejit.compile(_g)
    x = torch.randn(3)
    for _ in range(3):
        _same(cg, _g, x)
    SCALE = 5.0
    _same(cg, _g, x)
    TABLE["k"] = -1.0
    _same(cg, _g, x)
    TABLE["other"] = 0.0     # another key: same value read, the dict's tag moved
    _same(cg, _g, x)
    SCALE = 2.0


def test_another_modules_global():
    mod = types.ModuleType("sj_read_cache_mod")
    mod.W = torch.randn(3)
    sys.modules[mod.__name__] = mod
    try:
        def h(x):
            return x + sys.modules["sj_read_cache_mod"].W

        ch = shapejit.compile(h)
        x = torch.randn(3)
        for _ in range(3):
            _same(ch, h, x)
        mod.W = torch.randn(3)
        _same(ch, h, x)
    finally:
        del sys.modules[mod.__name__]


def test_hasattr_added_and_removed():
    def f(x, o):
        if hasattr(o, "extra"):
            return x + o.extra
        return x - 1.0

    x = torch.randn(3)
    o = Plain(1.0, None)
    cf = shapejit.compile(f)
    for _ in range(2):
        _same(cf, f, x, o)
    o.extra = 4.0
    _same(cf, f, x, o)
    _same(cf, f, x, o)
    del o.extra
    _same(cf, f, x, o)
    q = WithGetattr(1.0, None)           # __getattr__ answers for a name the dict lacks
    _same(cf, f, x, q)


def test_hasattr_through_a_getattr_that_raises_something_else():
    class Odd:
        def __getattr__(self, name):
            if self.__dict__.get("broken"):
                raise RuntimeError("broken " + name)
            raise AttributeError(name)

    def f(x, o):
        return x + 1.0 if hasattr(o, "extra") else x - 1.0

    x = torch.randn(3)
    o = Odd()
    cf = shapejit.compile(f)
    _same(cf, f, x, o)
    o.broken = True
    with pytest.raises(RuntimeError, match="broken extra"):
        f(x, o)
    with pytest.raises(RuntimeError, match="broken extra"):
        cf(x, o)


def _has_extra(x, o):
    if hasattr(o, "extra"):
        return x + 1.0
    return x - 1.0


@pytest.mark.parametrize("how", ["instance", "class", "property", "parameter", "buffer", "module",
                                 "parameters_dict"])
def test_a_missing_attribute_that_appears(how):
    """hasattr(o, name) was False: every way of making name appear on a module is seen."""
    m = nn.Linear(2, 2)
    x = torch.randn(3)
    cf = shapejit.compile(_has_extra)
    for _ in range(3):
        _same(cf, _has_extra, x, m)
    if how == "instance":
        m.extra = 1.0
    elif how == "class":
        type(m).extra = 1.0
    elif how == "property":
        type(m).extra = property(lambda self: 1.0)
    elif how == "parameter":
        m.register_parameter("extra", nn.Parameter(torch.zeros(1)))
    elif how == "buffer":
        m.register_buffer("extra", torch.zeros(1))
    elif how == "module":
        m.add_module("extra", nn.Identity())
    else:
        m._parameters["extra"] = None    # present with None: __getattr__ returns None
    try:
        assert hasattr(m, "extra")
        _same(cf, _has_extra, x, m)
        _same(cf, _has_extra, x, nn.Linear(2, 2) if how not in ("class", "property") else m)
    finally:
        if how in ("class", "property"):
            del type(m).extra


@pytest.mark.parametrize("kind", ["module", "module_getattr", "function", "class"])
def test_hasattr_on_modules_functions_and_classes(kind):
    """hasattr on a Python module, a function or a class reads attributes that can appear
    and vanish after compiling (a module-level __getattr__ answers every name)."""
    if kind.startswith("module"):
        o = types.ModuleType("sj_hasattr_target")
    elif kind == "function":
        o = lambda: None                 # noqa: E731
    else:
        o = type("Target", (), {})
    x = torch.randn(3)
    cf = shapejit.compile(_has_extra)
    for _ in range(3):
        _same(cf, _has_extra, x, o)
    if kind == "module_getattr":
        o.__getattr__ = lambda name: 1.0
    else:
        o.extra = 1.0
    assert hasattr(o, "extra")
    _same(cf, _has_extra, x, o)
    _same(cf, _has_extra, x, o)
    delattr(o, "__getattr__" if kind == "module_getattr" else "extra")
    _same(cf, _has_extra, x, o)


def test_hasattr_on_a_tensor_with_attributes_of_its_own():
    def f(x):
        return x + 1.0 if hasattr(x, "tag") else x - 1.0

    cf = shapejit.compile(f)
    x = torch.randn(3)
    x.tag = 1                            # set before the first call
    for _ in range(2):
        _same(cf, f, x)
    y = torch.randn(3)
    _same(cf, f, y)
    y.tag = 2                            # set after compiling
    _same(cf, f, y)
    del x.tag
    _same(cf, f, x)


def test_a_tensors_own_attributes_are_read_and_guarded():
    def f(x):
        return x * x.scale + getattr(x, "bias", 3.0)

    cf = shapejit.compile(f)
    x = torch.randn(4)
    x.scale = 2.0
    for _ in range(2):
        _same(cf, f, x)
    x.scale = 5.0
    _same(cf, f, x)
    x.bias = torch.randn(4)              # a tensor attribute appears
    _same(cf, f, x)
    x.bias = torch.randn(4)              # a new tensor in its place
    _same(cf, f, x)
    del x.bias
    _same(cf, f, x)
    del x.scale
    with pytest.raises(AttributeError):
        cf(x)


def test_a_missing_attribute_on_a_plain_object_and_a_custom_getattr():
    x = torch.randn(3)
    cf = shapejit.compile(_has_extra)
    o = Plain(1.0, None)
    for _ in range(3):
        _same(cf, _has_extra, x, o)
    o.extra = 0
    _same(cf, _has_extra, x, o)
    del o.extra
    _same(cf, _has_extra, x, o)
    Plain.extra = 0
    try:
        _same(cf, _has_extra, x, o)
    finally:
        del Plain.extra
    _same(cf, _has_extra, x, o)

    on = [False]

    class Switch(nn.Module):
        """A module whose own __getattr__ answers from state no version tag covers."""

        def __getattr__(self, name):
            if name == "extra" and on[0]:
                return 1
            return super().__getattr__(name)

    s = Switch()
    for _ in range(3):
        _same(cf, _has_extra, x, s)
    on[0] = True
    _same(cf, _has_extra, x, s)


def test_a_class_attribute_that_becomes_a_data_descriptor():
    """The instance dict shadows a non-data descriptor; the descriptor's class then gains
    __set__ (or the descriptor another class), and wins: neither the instance's class nor
    its dict changed."""
    class Getter:
        def __get__(self, obj, owner):
            return torch.full((3,), 100.0)

    class Other:
        def __get__(self, obj, owner):
            return -7.0

        def __set__(self, obj, value):
            pass

    class C:
        w = Getter()
        k = Getter()

    o = C()
    o.__dict__["w"] = torch.ones(3)
    o.__dict__["k"] = 2.0
    x = torch.zeros(3)
    cf = shapejit.compile(_f)
    for _ in range(3):
        _same(cf, _f, x, o)
    C.__dict__["k"].__class__ = Other            # k: a data descriptor now
    _same(cf, _f, x, o)
    Getter.__set__ = lambda self, obj, value: None   # w too
    _same(cf, _f, x, o)


def test_module_getattr_code_replaced():
    """A cached miss through nn.Module's __getattr__ is not reused once that function runs
    other code."""
    m = nn.Linear(2, 2)
    x = torch.randn(3)
    cf = shapejit.compile(_has_extra)
    for _ in range(3):
        _same(cf, _has_extra, x, m)
    original = nn.Module.__getattr__.__code__

    def answers(self, name):
        if name == "extra":
            return 1
        raise AttributeError(name)

    nn.Module.__getattr__.__code__ = answers.__code__
    try:
        _same(cf, _has_extra, x, m)
    finally:
        nn.Module.__getattr__.__code__ = original
    _same(cf, _has_extra, x, m)


class Scaled:
    """A class whose own __getattribute__ changes what the instance dict holds."""

    def __init__(self, k, w):
        self.k = k
        self.w = w

    def __getattribute__(self, name):
        v = object.__getattribute__(self, name)
        return v * 10 if name in ("k", "w") else v


def test_a_class_with_its_own_getattribute_is_read_through_it():
    x = torch.ones(3)
    o = Scaled(2.0, torch.ones(3))
    cf = shapejit.compile(_f)
    for _ in range(3):
        _same(cf, _f, x, o)
    o.w = torch.full((3,), 2.0)
    _same(cf, _f, x, o)

    class Late:
        def __init__(self):
            self.k, self.w = 2.0, torch.ones(3)

    q = Late()
    for _ in range(3):
        _same(cf, _f, x, q)
    Late.__getattribute__ = lambda s, n: 6.0 if n == "k" else object.__getattribute__(s, n)
    _same(cf, _f, x, q)
    shapejit.reset()
    _same(shapejit.compile(_f), _f, x, q)
