"""Modules made anew on each call, and the dict subclasses that make them (transformers'
ACT2FN: an OrderedDict subclass whose __getitem__ reads super().__getitem__(key) and returns
a new instance of the class it finds). The entries of a live dict subclass are read by
dict's own lookup and guarded through dict.__getitem__(d, key); a module without
parameters or buffers is guarded by its type and what its forward reads, not by identity,
so a new one on each call (made by the interpreter at a graph break, or passed in) does not
recompile. Values are eager's; graph counts are no more than torch.compile's (backend
"eager", counted) over ten calls, and nothing recompiles."""
import collections
import warnings

import pytest
import torch
import torch._dynamo
import torch.nn as nn
import torch.nn.functional as F
from torch._dynamo.testing import CompileCounter

import shapejit

CALLS = 10


@pytest.fixture(autouse=True)
def _fresh(fresh_compilers):
    yield


def _torch_graphs(fn, make_args, calls=CALLS):
    """Graphs torch.compile (eager, counted) makes over calls, each with new arguments."""
    torch._dynamo.reset()
    cnt = CompileCounter()
    cf = torch.compile(fn, backend=cnt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(calls):
            cf(*make_args())
    torch._dynamo.reset()
    return cnt.frame_count


def _run(fn, make_args, calls=CALLS):
    """shapejit against eager over calls, each with new arguments: its stats."""
    shapejit.reset()
    cf = shapejit.compile(fn, backend="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(calls):
            args = make_args()
            torch.testing.assert_close(cf(*args), fn(*args), msg=f"call {i}")
    return shapejit.stats()


def _as_torch(fn, make_args, breaks=None):
    theirs = _torch_graphs(fn, make_args)
    s = _run(fn, make_args)
    assert s["graphs"] <= theirs, (s, theirs)
    assert s["recompiles"] == 0, s
    if breaks is not None:
        assert s["graph_breaks"] == breaks, s
    return s


class SiLUActivation(nn.Module):
    """transformers' kind of activation: nn.Module's __init__, a forward of its own."""

    def forward(self, x):
        return F.silu(x)


class Scaled(nn.Module):
    """A stateless module with an __init__ of its own (made by the interpreter)."""

    def __init__(self, k=2.0):
        super().__init__()
        self.k = k

    def forward(self, x):
        return x * self.k


class ClassInstantier(collections.OrderedDict):
    """transformers.activations.ClassInstantier."""

    def __getitem__(self, key):
        content = super().__getitem__(key)
        cls, kwargs = content if isinstance(content, tuple) else (content, {})
        return cls(**kwargs)


ACT = ClassInstantier({"silu": nn.SiLU, "gelu_tanh": (nn.GELU, {"approximate": "tanh"}),
                       "mine": SiLUActivation, "scaled": (Scaled, {"k": 3.0})})


def _x():
    return (torch.randn(4, 8),)


# ---- reads of live dict subclasses -------------------------------------------------------

def test_ordered_dict_subclass_makes_modules_in_one_graph():
    def f(x):
        y = x * 2
        return ACT["silu"](y) + ACT["gelu_tanh"](y) + ACT["mine"](y)
    _as_torch(f, _x, breaks=0)
    assert shapejit.stats()["graphs"] == 1


def test_key_from_an_argument():
    names = iter(["silu", "mine"] * CALLS)

    def make():
        return torch.randn(3), next(names)

    def f(x, name):
        return ACT[name](x) + 1
    theirs = _torch_graphs(f, make)
    names = iter(["silu", "mine"] * CALLS)
    s = _run(f, make)
    assert s["graphs"] <= theirs and s["graph_breaks"] == 0, (s, theirs)


class Doubling(dict):
    def __getitem__(self, key):
        return super().__getitem__(key) * 2


class ExplicitDict(dict):
    def __getitem__(self, key):
        return dict.__getitem__(self, key) + 1


class SuperGet(dict):
    def get(self, key, default=None):
        return super().get(key, default)


class Plain(dict):
    pass


DOUBLING = Doubling(a=1.5)
EXPLICIT = ExplicitDict(a=0.5)
SUPER_GET = SuperGet(a=2.5)
PLAIN = Plain(a=3.5)


@pytest.mark.parametrize("fn", [
    lambda x: x * DOUBLING["a"],
    lambda x: x * EXPLICIT["a"],
    lambda x: x * SUPER_GET.get("a") + SUPER_GET.get("zz", 1.0),
    lambda x: x * PLAIN["a"] + ("a" in PLAIN) + ("zz" in PLAIN),
], ids=["super_getitem", "dict_getitem", "super_get", "operators"])
def test_dict_subclass_reads_are_captured(fn):
    _as_torch(fn, _x, breaks=0)


def test_entry_replaced_recompiles_with_its_value():
    d = Doubling(a=1.5)

    def f(x):
        return x * d["a"]
    cf = shapejit.compile(f, backend="eager")
    x = torch.ones(2)
    for v in (1.5, 1.5, 4.0, 4.0):
        d["a"] = v
        torch.testing.assert_close(cf(x), f(x))
    d["b"] = 1.0   # a key added: the keys are guarded
    torch.testing.assert_close(cf(x), f(x))
    del d["a"]
    with pytest.raises(KeyError):
        f(x)
    with pytest.raises(KeyError):
        cf(x)


def test_class_instantier_entry_replaced():
    acts = ClassInstantier({"act": nn.SiLU})

    def f(x):
        return acts["act"](x)
    cf = shapejit.compile(f, backend="eager")
    x = torch.randn(5)
    for cls in (nn.SiLU, nn.SiLU, nn.ReLU, (nn.LeakyReLU, {"negative_slope": 0.3}),
                (nn.LeakyReLU, {"negative_slope": 0.5}), SiLUActivation):
        acts["act"] = cls
        torch.testing.assert_close(cf(x), f(x), msg=str(cls))


def test_transformers_act2fn():
    activations = pytest.importorskip("transformers.activations")

    def f(x):
        return activations.ACT2FN["silu"](x) + activations.ACT2FN["gelu_new"](x)
    _as_torch(f, _x, breaks=0)


# ---- modules made anew on each call, across a graph break -------------------------------

def test_module_made_by_the_interpreter_crosses_a_break():
    # a class with its own __init__ is made at run time: the break is at the subscript,
    # and the resume function gets a new module on each call
    def f(x):
        y = x * 2
        return ACT["scaled"](y) + 1
    s = _run(f, _x)
    assert (s["graphs"], s["graph_breaks"], s["recompiles"]) == (2, 1, 0), s


@torch.compiler.disable
def _make_scaled():
    return Scaled(1.5)


def test_module_from_a_disabled_factory():
    def f(x):
        y = x + 1
        m = _make_scaled()   # a break in both compilers
        return m(y) * 2
    _as_torch(f, _x, breaks=1)


def test_module_argument_new_each_call_across_a_break():
    def f(x, act):
        y = x * 2
        torch._dynamo.graph_break()
        return act(y) + 1
    _as_torch(f, lambda: (torch.randn(4, 8), nn.GELU()), breaks=1)


def test_module_argument_new_each_call():
    _as_torch(lambda x, act: act(x) - 1, lambda: (torch.randn(4, 8), nn.SiLU()), breaks=0)


# ---- what a module guarded by its type still guards ---------------------------------------

def test_type_and_attributes_are_guarded():
    def f(x, act):
        return act(x) * 2
    cf = shapejit.compile(f, backend="eager")
    x = torch.randn(6)
    for act in (nn.LeakyReLU(0.1), nn.LeakyReLU(0.1), nn.LeakyReLU(0.2), nn.ReLU(), Scaled(2.0),
                Scaled(3.0), nn.Sequential(nn.ReLU(), Scaled(4.0)),
                nn.Sequential(nn.ReLU(), Scaled(5.0)), nn.Sequential(nn.ReLU(), nn.Tanh())):
        torch.testing.assert_close(cf(x, act), f(x, act), msg=repr(act))


def test_module_gaining_parameters_is_not_taken_for_a_stateless_one():
    class Maybe(nn.Module):
        def forward(self, x):
            w = getattr(self, "w", None)
            return x if w is None else x * w
    cf = shapejit.compile(lambda x, m: m(x), backend="eager")
    x = torch.randn(3)
    a, b = Maybe(), Maybe()
    b.w = nn.Parameter(torch.full((3,), 4.0))
    with torch.no_grad():
        for m in (a, b, a, b):
            torch.testing.assert_close(cf(x, m), m(x))


def test_hook_on_a_new_module_is_seen():
    def f(x, act):
        return act(x) + 1
    cf = shapejit.compile(f, backend="eager")
    x = torch.randn(4)
    cf(x, nn.ReLU())
    hooked = nn.ReLU()
    hooked.register_forward_hook(lambda m, args, out: out * 10)
    torch.testing.assert_close(cf(x, hooked), f(x, hooked))


class Counting(nn.Module):
    def __init__(self):
        super().__init__()
        self.n = 0

    def forward(self, x):
        self.n += 1
        return x * self.n


def test_attribute_writes_follow_aliasing():
    # two arguments that are one module on some calls and two on others: a write through
    # one is seen through the other exactly when eager sees it
    def f(a, b, x):
        return a(x) + b(x)
    cf = shapejit.compile(f, backend="eager")
    x = torch.ones(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for same in (False, True, False, True):
            e1 = Counting()
            e2 = e1 if same else Counting()
            c1 = Counting()
            c2 = c1 if same else Counting()
            torch.testing.assert_close(cf(c1, c2, x), f(e1, e2, x), msg=f"same={same}")
            assert (c1.n, c2.n) == (e1.n, e2.n)
