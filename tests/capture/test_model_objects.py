"""Objects model code builds and passes around inside a compiled forward: a record (a
dataclass that is a dict, transformers' ModelOutput) written by item, a deep copy of a
plain object of constants (a config), `vars(obj)`. Each is compared with eager, and the
graphs and breaks with torch.compile's where the code is torch; a case capture cannot
prove stays a graph break, never a wrong value."""
from dataclasses import dataclass

import pytest
import torch

import shapejit
from graph_counter import GraphCounter

transformers_utils = pytest.importorskip("transformers.utils")


@pytest.fixture(autouse=True)
def _fresh(fresh_compilers):
    pass


@dataclass
class Out(transformers_utils.ModelOutput):
    last: torch.Tensor = None
    cache: tuple = None
    hidden: tuple = None
    attn: tuple = None


def _same(a, b):
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(b, dict):
        assert list(a.keys()) == list(b.keys()), (list(a.keys()), list(b.keys()))
        for k in b:
            _same(a[k], b[k])
            _same(getattr(a, k), getattr(b, k))
    elif isinstance(b, (list, tuple)):
        assert len(a) == len(b)
        for p, q in zip(a, b):
            _same(p, q)
    elif isinstance(b, torch.Tensor):
        torch.testing.assert_close(a, b)
    else:
        assert a == b, (a, b)


def _check(fn, *args, breaks=0, oracle=True):
    """Compiled equals eager over three calls; shapejit breaks (breaks=None: at least once)
    or does not, and compiles no more graphs than torch.compile."""
    expected = fn(*args)
    explained = shapejit.explain(fn)(*args)
    if breaks is None:
        assert explained.graph_break_count >= 1, explained
    else:
        assert explained.graph_break_count == breaks, explained
    shapejit.reset()
    compiled = shapejit.compile(fn)
    for _ in range(3):
        _same(compiled(*args), expected)
    if oracle:
        counter = GraphCounter()
        torch._dynamo.reset()
        _same(torch.compile(fn, backend=counter)(*args), expected)
        assert explained.graph_count <= counter.graphs, (explained.graph_count, counter.graphs)


# ---- item assignment on a record made in the frame ----------------------------------------

def record_fill_in_order(x):
    out = Out(last=x * 2)
    out["hidden"] = (x, x + 1)          # a new key after the last one in the dict
    out["last"] = out.last + 1          # a replaced key keeps its place
    return out


def record_fill_then_tuple(x):
    out = Out(last=x.tanh(), cache=(x,))
    for key in ("hidden", "attn"):
        out[key] = (x * len(key),)
    return out.to_tuple()


@pytest.mark.parametrize("fn", [record_fill_in_order, record_fill_then_tuple], ids=lambda f: f.__name__)
def test_record_item_assignment(fn):
    _check(fn, torch.randn(2, 3))


def record_fill_out_of_order(x):
    out = Out(last=x, hidden=(x,))
    out["cache"] = (x + 1,)             # goes after "hidden" in the dict, before it in the fields
    return out


def record_set_none(x):
    out = Out(last=x, hidden=(x,))
    out["hidden"] = None                # the dict keeps the key with None
    return list(out.keys()), out.last + 1


@pytest.mark.parametrize("fn", [record_fill_out_of_order, record_set_none], ids=lambda f: f.__name__)
def test_record_item_assignment_that_leaves_the_field_order_breaks(fn):
    _check(fn, torch.randn(2, 3), breaks=None, oracle=False)


# ---- vars(obj) --------------------------------------------------------------------------

class Holder:
    def __init__(self, t):
        self.key = t
        self.scale = 3
        self.name = "h"


def vars_read(x, h):
    total = x * vars(h)["scale"]
    for name, value in vars(h).items():
        if isinstance(value, torch.Tensor):
            total = total + value
    return total, sorted(vars(h))


def test_vars_of_an_object_is_its_dict():
    _check(vars_read, torch.randn(2, 3), Holder(torch.randn(2, 3)))


def vars_write_then_read(x, h):
    vars(h)["scale"] = 9            # an attribute write through the dict
    return x * h.scale


def dunder_dict_write_then_read(x, h):
    h.__dict__["scale"] = 7
    return x * h.scale


@pytest.mark.parametrize("fn", [vars_write_then_read, dunder_dict_write_then_read], ids=lambda f: f.__name__)
def test_a_write_into_the_attribute_dict_is_seen_by_attribute_reads(fn):
    x = torch.randn(2, 3)
    a, b = Holder(x), Holder(x)
    expected = fn(x, a)
    torch.testing.assert_close(shapejit.compile(fn)(x, b), expected)
    assert b.scale == a.scale
