"""Python protocols of objects from outside the frame, answered as eager answers them and
guarded so that a later change is seen: methods and properties read from the class (the
class's replaced, patched, or shadowed by the instance), iteration and len() of modules by
their class's own __iter__ / __len__ (ParameterList, ParameterDict, a user's), a module
class's own __call__, truth values through __bool__ / __len__, and isinstance with torch's
legacy tensor classes (torch.FloatTensor answers by dtype). Compiled vs eager each call."""
from unittest import mock

import pytest
import torch
from torch import nn

import shapejit

pytestmark = pytest.mark.usefixtures("fresh_shapejit")


def _same(cf, f, *args):
    got, want = cf(*args), f(*args)
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            _eq(g, w)
    else:
        _eq(got, want)


def _eq(g, w):
    if isinstance(w, torch.Tensor):
        torch.testing.assert_close(g, w)
    else:
        assert g == w and type(g) is type(w)


def test_parameter_list_iterates_its_parameters():
    pl = nn.ParameterList([nn.Parameter(torch.full((2,), 3.0))])

    def f(x):
        x = x + 0
        for p in pl:
            x = x * p
        return x, len(pl)

    cf = shapejit.compile(f)
    x = torch.ones(2)
    with torch.no_grad():
        _same(cf, f, x)
        pl.append(nn.Parameter(torch.full((2,), -2.0)))   # a second parameter appears
        _same(cf, f, x)
        pl[0] = nn.Parameter(torch.full((2,), 5.0))        # one replaced
        _same(cf, f, x)


def test_parameter_dict_iterates_its_keys():
    pd = nn.ParameterDict({"a": nn.Parameter(torch.ones(2))})

    def f(x):
        for k in pd:
            x = x + pd[k]
        return x, len(pd)

    cf = shapejit.compile(f)
    x = torch.zeros(2)
    with torch.no_grad():
        _same(cf, f, x)
        pd["b"] = nn.Parameter(torch.full((2,), 4.0))
        _same(cf, f, x)


def test_a_module_with_its_own_iter_and_len():
    class Bag(nn.Module):
        def __init__(self):
            super().__init__()
            self.ws = [torch.full((2,), 2.0)]

        def __iter__(self):
            return iter(self.ws)

        def __len__(self):
            return len(self.ws)

    bag = Bag()

    def f(x):
        return [x * w for w in bag], len(bag), x + 1 if bag else x - 1

    cf = shapejit.compile(f)
    x = torch.ones(2)
    for _ in range(2):
        got, want = cf(x), f(x)
        torch.testing.assert_close(list(got[0]), list(want[0]))
        assert got[1] == want[1]
        torch.testing.assert_close(got[2], want[2])
    bag.ws.append(torch.full((2,), 7.0))
    got, want = cf(x), f(x)
    torch.testing.assert_close(list(got[0]), list(want[0]))
    assert got[1] == want[1] == 2
    bag.ws.clear()
    got, want = cf(x), f(x)
    assert got[0] == want[0] == [] and got[1] == want[1] == 0
    torch.testing.assert_close(got[2], want[2])


def test_module_list_length_follows_appends():
    ml = nn.ModuleList([nn.Identity()])
    seq = nn.Sequential(nn.Identity())

    def f(x):
        return x * len(ml) + len(seq), x if ml else -x

    cf = shapejit.compile(f)
    x = torch.ones(2)
    _same(cf, f, x)
    ml.append(nn.Identity())
    seq.append(nn.Identity())
    _same(cf, f, x)
    del ml[0]
    del ml[0]
    _same(cf, f, x)


def test_a_module_class_with_its_own_call():
    class Scaled(nn.Module):
        def __call__(self, x):
            return self.forward(x) * 10

        def forward(self, x):
            return x + 1

    class Doubled(nn.Linear):
        def __call__(self, *args, **kwargs):
            return super().__call__(*args, **kwargs) * 2

    m, lin = Scaled(), Doubled(3, 3)

    def f(x):
        return m(x), lin(x)

    cf = shapejit.compile(f)
    with torch.no_grad():
        for _ in range(2):
            _same(cf, f, torch.randn(2, 3))


def test_truth_through_bool_and_len_is_guarded():
    class Flag:
        def __init__(self):
            self.v = True

        def __bool__(self):
            return self.v

    class Box:
        def __init__(self):
            self.items = [1]

        def __len__(self):
            return len(self.items)

    def f(x, o):
        return x + 1 if o else x - 1

    cf = shapejit.compile(f)
    x = torch.zeros(1)
    flag, box = Flag(), Box()
    for o, change in ((flag, lambda: setattr(flag, "v", False)), (box, box.items.clear)):
        _same(cf, f, x, o)
        change()
        _same(cf, f, x, o)
        assert bool(f(x, o) < 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool])
def test_isinstance_with_legacy_tensor_classes(dtype):
    def f(x):
        y = x * 2
        return (isinstance(y, torch.FloatTensor), isinstance(x, torch.DoubleTensor),
                isinstance(x, (torch.LongTensor, torch.BoolTensor)), isinstance(x, torch.Tensor))

    cf = shapejit.compile(f)
    x = torch.ones(3, dtype=dtype)
    assert cf(x) == f(x)


def test_methods_and_properties_read_from_the_class():
    class K:
        scale = 2.0

        def f(self, x):
            return x + 1

        @property
        def v(self):
            return 1.0

        @staticmethod
        def s(x):
            return x * 3

        @classmethod
        def cm(cls, x):
            return x * cls.scale

    def fn(k, x):
        return k.f(x) * k.v + k.s(x) + k.cm(x)

    cf = shapejit.compile(fn)
    k, x = K(), torch.ones(2)
    _same(cf, fn, k, x)
    K.f = lambda self, x: x + 2                       # the class's method replaced
    _same(cf, fn, k, x)
    k.f = lambda x: x + 3                             # shadowed by the instance
    _same(cf, fn, k, x)
    del k.f
    _same(cf, fn, k, x)
    K.v = property(lambda self: -1.0)                 # the property replaced
    _same(cf, fn, k, x)
    with mock.patch.object(K, "s", staticmethod(lambda x: x * 5)):
        _same(cf, fn, k, x)
    _same(cf, fn, k, x)
    K.cm = classmethod(lambda cls, x: x - cls.scale)
    _same(cf, fn, k, x)


def test_a_module_helper_method_patched():
    class M(nn.Module):
        def helper(self, x):
            return x * 2

        def forward(self, x):
            return self.helper(x) + 1

    m = M()

    def f(x):
        return m(x)

    cf = shapejit.compile(f)
    x = torch.ones(3)
    _same(cf, f, x)
    with mock.patch.object(M, "helper", lambda self, x: x * 10):
        _same(cf, f, x)
    _same(cf, f, x)
