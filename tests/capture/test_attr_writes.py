"""Attribute writes on objects from outside the frame: what the result plan cannot replay
faithfully stays a graph break (and the frame's values are eager's), eager's errors are
raised, aliasing of the written objects is guarded, and the recompiles of a written
counter follow torch.compile's."""
import warnings

import pytest
import torch
import torch._dynamo
import torch.nn as nn
from torch._dynamo.testing import CompileCounter

import shapejit


@pytest.fixture(autouse=True)
def _fresh():
    shapejit.reset()
    torch._dynamo.reset()
    yield
    shapejit.reset()
    torch._dynamo.reset()


class Holder:
    def __init__(self, **attrs):
        self.__dict__.update(attrs)


def _explain(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return shapejit.explain(fn)(*args)


def _reasons(fn, *args):
    ex = _explain(fn, *args)
    return [r.reason for r in ex.break_reasons]


# ---- writes that stay breaks -----------------------------------------------------------
class OwnSetattr:
    def __setattr__(self, name, value):
        object.__setattr__(self, name, value * 2 if isinstance(value, int) else value)


def test_own_setattr_breaks_with_eager_values():
    def f(o, x):
        o.k = 2
        return x + o.k
    assert any("own __setattr__" in r for r in _reasons(f, OwnSetattr(), torch.zeros(1)))
    shapejit.reset()
    o = OwnSetattr()
    assert shapejit.compile(f)(o, torch.zeros(1)).item() == 4 and o.k == 4


def test_object_setattr_bypasses_own_setattr():
    def f(o, x):
        object.__setattr__(o, "k", 3)
        return x + o.k
    o = OwnSetattr()
    assert shapejit.compile(f, fullgraph=True)(o, torch.zeros(1)).item() == 3 and o.k == 3


class Slotted:
    __slots__ = ("a",)


def test_slots_break():
    def f(s, x):
        s.a = x + 1
        return x
    assert any("__slots__" in r for r in _reasons(f, Slotted(), torch.zeros(2)))
    shapejit.reset()
    s = Slotted()
    x = torch.zeros(2)
    shapejit.compile(f)(s, x)
    assert torch.equal(s.a, x + 1)


class ReadOnly:
    @property
    def value(self):
        return 1


def test_property_without_setter_raises_as_eager():
    def f(o, x):
        o.value = 2
        return x
    with pytest.raises(AttributeError):
        f(ReadOnly(), torch.zeros(1))
    with pytest.raises(AttributeError):
        shapejit.compile(f)(ReadOnly(), torch.zeros(1))


def test_object_without_dict_raises_as_eager():
    def f(o, x):
        o.anything = 1
        return x + 1
    with pytest.raises(AttributeError):
        shapejit.compile(f)(object(), torch.zeros(1))


def test_parameter_assignment_breaks():
    lin = nn.Linear(2, 2)

    def f(m, x):
        m.extra = m.weight   # nn.Module.__setattr__ registers a Parameter
        return x + 1
    assert any("registers it" in r for r in _reasons(f, lin, torch.zeros(2)))
    shapejit.reset()
    m = nn.Linear(2, 2)
    shapejit.compile(f)(m, torch.zeros(2))
    assert "extra" in m._parameters


def test_buffer_assignment_breaks():
    bn = nn.BatchNorm1d(3)

    def f(m, x):
        m.running_mean = x.mean(0)
        return x * 2
    assert any("_buffers" in r for r in _reasons(f, bn, torch.randn(4, 3)))
    shapejit.reset()
    m = nn.BatchNorm1d(3)
    x = torch.randn(4, 3)
    shapejit.compile(f)(m, x)
    assert torch.allclose(m._buffers["running_mean"], x.mean(0))


def test_lazy_init_through_getattr_default():
    # getattr(o, name, default) guards whether o has the attribute (HASATTR): the call
    # after the first write finds it and recompiles, as torch.compile does
    def f(o, x):
        o.count = getattr(o, "count", 0) + 1
        return x * o.count
    theirs, targs = _torch_graphs(f, lambda: (Holder(),), 4)
    o = Holder()
    cf = shapejit.compile(f)
    for i in range(4):
        assert cf(o, torch.ones(2))[0].item() == i + 1
    assert o.count == targs[0].count == 4
    assert shapejit.stats()["graphs"] == theirs


def test_hasattr_guard_both_ways():
    def f(o, x):
        if hasattr(o, "bias"):
            return x + o.bias
        return x * 1
    cf = shapejit.compile(f)
    assert cf(Holder(), torch.zeros(1)).item() == 0
    assert cf(Holder(bias=2), torch.zeros(1)).item() == 2
    assert cf(Holder(), torch.zeros(1)).item() == 0
    assert shapejit.stats()["cache_entries"] == 2


def test_hasattr_sees_write():
    def f(o, x):
        o.fresh_name = 1
        return x + (1 if hasattr(o, "fresh_name") else 0)
    assert shapejit.compile(f, fullgraph=True)(Holder(), torch.zeros(1)).item() == 1


def test_dict_read_after_write_breaks():
    def f(o, x):
        o.a = 1
        return x + o.__dict__["a"]
    assert any("__dict__" in r for r in _reasons(f, Holder(), torch.zeros(1)))
    shapejit.reset()
    o = Holder()
    assert shapejit.compile(f)(o, torch.zeros(1)).item() == 1 and o.a == 1


def test_fullgraph_raises_on_unreplayable_write():
    def f(s, x):
        s.a = 1
        return x
    with pytest.raises(Exception, match="__slots__"):
        shapejit.compile(f, fullgraph=True)(Slotted(), torch.zeros(1))


# ---- program order, errors ---------------------------------------------------------------
def test_frame_raising_after_writes_keeps_them():
    def f(o, x):
        o.n = 1
        o.t = x * 2
        raise ValueError("after the writes")
    o = Holder()
    x = torch.ones(2)
    with pytest.raises(ValueError, match="after the writes"):
        shapejit.compile(f)(o, x)
    assert o.n == 1 and torch.equal(o.t, x * 2)


def test_continuation_raising_after_writes_keeps_them():
    def f(o, x):
        o.t = x * 2
        torch._dynamo.graph_break()
        raise KeyError("late")
    o = Holder()
    x = torch.ones(2)
    with pytest.raises(KeyError):
        shapejit.compile(f)(o, x)
    assert torch.equal(o.t, x * 2)


def test_replay_order_of_new_attributes():
    def f(o, x):
        o.second = 1
        o.first = x.sum()
        o.second = 2
        return x
    o = Holder()
    shapejit.compile(f, fullgraph=True)(o, torch.ones(2))
    assert list(vars(o)) == ["second", "first"] and o.second == 2


# ---- aliasing ------------------------------------------------------------------------------
def test_aliasing_of_written_objects_is_guarded():
    def f(a, b, x):
        a.v = 5
        return x + b.v
    cf = shapejit.compile(f)
    a, b = Holder(v=1), Holder(v=1)
    assert cf(a, b, torch.zeros(1)).item() == 1
    a.v = 1
    assert cf(a, a, torch.zeros(1)).item() == 5   # one object now: the write is seen
    assert shapejit.stats()["recompiles"] == 1
    c, d = Holder(v=1), Holder(v=1)
    assert cf(c, d, torch.zeros(1)).item() == 1
    assert shapejit.stats()["recompiles"] == 1


# ---- recompiles as torch.compile's -----------------------------------------------------------
def _torch_graphs(fn, make_args, calls):
    cnt = CompileCounter()
    cf = torch.compile(fn, backend=cnt)
    args = make_args()
    for _ in range(calls):
        cf(*args, torch.ones(2))
    return cnt.frame_count, args


def test_counter_on_user_object_recompiles_as_torch():
    # the int is guarded; once it changed it is dynamic (automatic dynamic), as in torch
    def f(o, x):
        o.counter += 1
        return x * o.counter
    theirs, targs = _torch_graphs(f, lambda: (Holder(counter=0),), 5)
    cf = shapejit.compile(f)
    o = Holder(counter=0)
    for i in range(5):
        assert cf(o, torch.ones(2))[0].item() == i + 1
    assert o.counter == targs[0].counter == 5
    assert shapejit.stats()["graphs"] == theirs == 2


class Counting(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x * self.calls


def test_counter_on_module_recompiles_as_torch():
    # nn.Module ints stay static: each call recompiles until the cache limit
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs, _ = _torch_graphs(lambda m, x: m(x), lambda: (Counting(),), 10)
        m = Counting()
        cf = shapejit.compile(lambda m, x: m(x))
        for i in range(10):
            assert cf(m, torch.ones(2))[0].item() == i + 1
    assert m.calls == 10
    assert shapejit.stats()["graphs"] == theirs


# ---- transformers configs --------------------------------------------------------------------
def _config():
    transformers = pytest.importorskip("transformers")
    return transformers.LlamaConfig(vocab_size=32, hidden_size=8, intermediate_size=16,
                                    num_hidden_layers=1, num_attention_heads=2)


def test_config_flag_write():
    cfg = _config()

    def f(c, x):
        c.some_flag = True
        c.use_cache = False   # a field with validators: a valid constant
        return x + 1 if c.some_flag and not c.use_cache else x
    ex = _explain(f, cfg, torch.zeros(1))
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), ex.break_reasons
    shapejit.reset()
    c = _config()
    assert shapejit.compile(f, fullgraph=True)(c, torch.zeros(1)).item() == 1
    assert c.some_flag is True and c.use_cache is False


def test_config_invalid_value_raises_as_eager():
    def f(c, x):
        c.use_cache = "yes"   # the field's validator rejects a str
        return x
    with pytest.raises(Exception) as eager:
        f(_config(), torch.zeros(1))
    with pytest.raises(type(eager.value)):
        shapejit.compile(f)(_config(), torch.zeros(1))


def test_config_attribute_map_name_breaks():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(n_embd=16, n_layer=1, n_head=2)
    assert "hidden_size" in cfg.attribute_map

    def f(c, x):
        c.hidden_size = 64   # stored as n_embd
        return x * 2
    assert any("attribute_map" in r for r in _reasons(f, cfg, torch.zeros(1)))
    shapejit.reset()
    c = transformers.GPT2Config(n_embd=16, n_layer=1, n_head=2)
    shapejit.compile(f)(c, torch.zeros(1))
    assert c.n_embd == 64 and c.hidden_size == 64


# ---- identity and values after the call ---------------------------------------------------
def test_identity_of_stored_tensors():
    def f(o, x):
        o.same = x                # the input itself
        o.made = x + 1            # the graph's output ...
        o.again = o.made          # ... stored twice: one object
        return o.made
    o = Holder()
    x = torch.randn(3)
    r = shapejit.compile(f, fullgraph=True)(o, x)
    assert o.same is x and o.made is o.again and r is o.made
    assert torch.equal(o.made, x + 1)


def test_writes_replayed_on_every_call():
    def f(o, x):
        o.last = x * 2
        return x + 1
    cf = shapejit.compile(f, fullgraph=True)
    o = Holder()
    for i in range(3):
        x = torch.full((2,), float(i))
        cf(o, x)
        assert torch.equal(o.last, x * 2)
    assert shapejit.stats()["graphs"] == 1
