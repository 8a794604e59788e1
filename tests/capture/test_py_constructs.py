"""Python objects the evaluator models, compared with eager under both backends.

* views of arrays written in place after a read of the view: the graph's replay
  (backend="eager") and the cpu backend read what eager reads, and a graph that writes
  into an input through a view never runs a second time;
* dict views (keys/values/items) are live: they show later writes to their dict, in the
  frame, after a graph break, and when returned;
* every argument form of dict/list methods and of dict() is either modelled or a graph
  break, never a dropped write; the same container reached from two places (a local and
  a bound method's receiver, a dict and its view) is one object after a break.
"""
import functools
import itertools

import numpy as np
import pytest
import torch

import shapejit

BACKENDS = ["eager", "cpu"]


def _as_np(v):
    return v.numpy() if isinstance(v, torch.Tensor) else np.asarray(v)


def _same(a, b, what):
    """a is eager's, b the compiled one: same type, same value (arrays: dtype and values)."""
    assert type(a) is type(b), f"{what}: {type(b).__name__}, eager {type(a).__name__}"
    if isinstance(a, (tuple, list)):
        assert len(a) == len(b), what
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{what}[{i}]")
    elif isinstance(a, dict):
        assert list(a) == list(b), f"{what}: keys {list(b)}, eager {list(a)}"
        for k in a:
            _same(a[k], b[k], f"{what}[{k!r}]")
    elif isinstance(a, (type({}.keys()), type({}.values()), type({}.items()))):
        _same(list(a), list(b), what)
    elif isinstance(a, (torch.Tensor, np.ndarray, np.generic)):
        assert _as_np(a).dtype == _as_np(b).dtype, what
        np.testing.assert_array_equal(_as_np(b), _as_np(a), err_msg=what)
    else:
        assert a == b, f"{what}: {b!r}, eager {a!r}"


def _run(fn, make_args):
    args = make_args()
    try:
        return ("ok", fn(*args), args)
    except Exception as e:   # noqa: BLE001 - the exception type is the result compared
        return ("raise", type(e), args)


def check(fn, make_args, backend, calls=2):
    """fn compiled with backend gives eager's results (or exception type) and leaves its
    arguments as eager does, on every call."""
    shapejit.reset()
    compiled = shapejit.compile(fn, backend=backend)
    for call in range(calls):
        e_kind, e_res, e_args = _run(fn, make_args)
        c_kind, c_res, c_args = _run(compiled, make_args)
        assert (c_kind, c_res if c_kind == "raise" else None) == (e_kind, e_res if e_kind == "raise" else None), \
            f"call {call}: compiled {c_kind} {c_res!r}, eager {e_kind} {e_res!r}"
        if e_kind == "ok":
            _same(e_res, c_res, f"call {call}: result")
        _same(e_args, c_args, f"call {call}: arguments after the call")


# ---- views written in place ---------------------------------------------------------
TORCH_VIEWS = ["y[1:]", "y[1]", "y.view(3, 2)", "y.t()", "y.transpose(0, 1)[1:]",
               "y.reshape(6)", "y.unsqueeze(0)[0]", "y.select(0, 1)", "y.narrow(1, 0, 2)",
               "y[1:].t()[0]", "y.detach()", "y.float()", "y.flatten()", "y"]
NUMPY_VIEWS = ["y[1:]", "y[1]", "y.view()", "y.T", "y.reshape(6)", "y[1:].T[0]", "y.ravel()",
               "y.astype(y.dtype, copy=False)", "np.transpose(y)", "y[:, ::2]"]
TORCH_WRITES = ["v1[...] = 0", "v1.add_(1)", "v1.mul_(3)", "v1 += 5", "torch.add(v1, 1, out=v1)",
                "v1.copy_(v1 * 0 + 7)", "v1.zero_()", "v1[0] = 9", "v1.fill_(2)", "v1.clamp_(0, 1)"]
NUMPY_WRITES = ["v1[...] = 0", "v1 += 5", "np.add(v1, 1, out=v1)", "np.copyto(v1, 7)", "v1.fill(2)",
                "v1[0] = 9", "v1 *= 3", "np.multiply(v1, 2, out=v1)"]
RETURNS = ["v2", "v2 + 1, v1", "v2.sum(), y"]


def _view_cases():
    for lib, views, writes in (("torch", TORCH_VIEWS, TORCH_WRITES), ("numpy", NUMPY_VIEWS, NUMPY_WRITES)):
        for i, (view, write) in enumerate(itertools.product(views, writes)):
            yield lib, view, write, RETURNS[i % len(RETURNS)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("lib,view,write,ret", list(_view_cases()))
def test_view_read_before_inplace_write(lib, view, write, ret, backend):
    src = f"def f(y):\n    v1 = {view}\n    v2 = v1 * 2\n    {write}\n    return {ret}\n"
    ns = {"torch": torch, "np": np}
    exec(src, ns)

    def make():
        a = np.arange(6, dtype=np.float32).reshape(2, 3) + 1
        return (torch.from_numpy(a),) if lib == "torch" else (a,)
    try:
        ns["f"](*make())
    except (RuntimeError, ValueError, TypeError):
        pytest.skip("eager refuses this combination")
    check(ns["f"], make, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_view_write_in_loop_keeps_order(backend):
    def f(x):
        outs = []
        for i in range(3):
            v = x[i]
            outs.append(v * 2)
            v += 1
            outs.append(x.sum())
        return outs

    check(f, lambda: (torch.arange(6.0).reshape(3, 2),), backend)
    check(f, lambda: (np.arange(6.0).reshape(3, 2),), backend)


# ---- dict views ---------------------------------------------------------------------
def _t():
    return (torch.tensor([1.0, 2.0]), torch.tensor([3.0, -1.0]))


def dv_keys_after_write(x, y):
    d = {3: x}
    k = d.keys()
    d[4] = x + 1
    return 4 in k, len(k), list(k)


def dv_values_after_write(x, y):
    d = {"a": x}
    v = d.values()
    d["b"] = y * 2
    return len(v), [t.sum() for t in v]


def dv_items_after_write(x, y):
    d = {"a": x}
    it = d.items()
    d["b"] = y
    d["a"] = y - 1
    return len(it), [(k, t + 1) for k, t in it]


def dv_iter_after_pop(x, y):
    d = {"a": x, "b": y, "c": x * y}
    k = d.keys()
    d.pop("b")
    return [d[n] for n in k], bool(k)


def dv_returned(x, y):
    d = {"a": x}
    k, v, i = d.keys(), d.values(), d.items()
    d["z"] = y
    return k, v, i


def dv_across_break(x, y):
    d = {"a": x}
    k = d.keys()
    items = d.items()
    print("", end="")       # a graph break with the view live
    d["b"] = y
    return len(k), "b" in k, sorted(k), [t * 2 for _, t in items]


def dv_after_clear(x, y):
    d = {"a": x, "b": y}
    v = d.values()
    d.clear()
    d["c"] = x + y
    return len(v), list(v)


def dv_outside_dict(d, y):
    k = d.keys()
    d["new"] = y
    return len(k), "new" in k, y + 1


def dv_changed_during_iteration(x, y):
    d = {"a": x}
    for k in d.keys():
        d[k + "x"] = y
    return d


def dv_truth(x, y):
    d = {}
    v = d.values()
    before = bool(v)
    d[1] = x
    return before, bool(v), x * 2 if v else y


DICT_VIEW_CASES = [dv_keys_after_write, dv_values_after_write, dv_items_after_write, dv_iter_after_pop,
                   dv_returned, dv_across_break, dv_after_clear, dv_changed_during_iteration, dv_truth]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", DICT_VIEW_CASES, ids=lambda f: f.__name__)
def test_dict_views_are_live(fn, backend):
    check(fn, _t, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_dict_view_of_an_input(backend):
    check(dv_outside_dict, lambda: ({"a": torch.ones(2)}, torch.zeros(2)), backend)
    check(dv_outside_dict, lambda: ({"a": np.ones(2)}, np.zeros(2)), backend)


# ---- dict and list method argument forms --------------------------------------------
def upd_pairs(x, z):
    d = {"a": x}
    d.update([("c", z)])
    return len(d), d["c"] + 1


def upd_pairs_then_break(x, z):
    d = {"a": x}
    d.update([("c", z)])
    print("", end="")
    return d["c"] * 2, len(d)


def upd_generator(x, z):
    d = {}
    d.update((k, x * i) for i, k in enumerate("abc"))
    return d


def upd_kwargs(x, z):
    d = {"a": x}
    d.update({"b": z}, c=x + z)
    d.update(a=z)
    return d


def upd_from_items_view(x, z):
    src = {"p": x, "q": z}
    d = {"a": x}
    d.update(src.items())
    return d


def upd_zip(x, z):
    d = dict(zip(["a", "b"], [x, z]))
    d.update(zip("cd", [z, x]))
    return d


def upd_bad_pair(x, z):
    d = {}
    d.update([("a", x, z)])
    return d


def dict_ctor_forms(x, z):
    return (dict([("a", x)], b=z), dict({"a": z}), dict(a=x), dict(zip("ab", (x, z))),
            dict({"a": x}.items()), dict((("k", z),)))


def setdefault_pop(x, z):
    d = {"a": x}
    s1 = d.setdefault("a", z)
    s2 = d.setdefault("b", z)
    p1 = d.pop("a")
    p2 = d.pop("missing", None)
    p3 = d.pop("missing", z * 3)
    return s1, s2, p1, p2, p3, d


def pop_missing(x, z):
    d = {"a": x}
    return d.pop("b")


def pop_equal_key(x, z):
    d = {10 ** 20: x}
    k = int("1" + "0" * 20)     # equal to the key, not the same object
    v = d.pop(k)
    return v, len(d)


def list_methods(x, z):
    a = [x]
    a.extend(t * 2 for t in (x, z))
    a.extend(iter([z]))
    a.insert(1, z)
    b = a.copy()
    b.reverse()
    last = a.pop()
    first = a.pop(0)
    a.append(last + first)
    return a, b


def shared_receiver_across_break(x, z):
    d = {"a": x}
    upd = d.update
    print("", end="")
    upd(b=z)
    return d


def shared_list_across_break(x, z):
    a = [x]
    b = a
    box = {"l": a}
    print("", end="")
    b.append(z)
    return len(a), len(box["l"]), a is box["l"]


def in_list_of_tensors(x, z):
    return 1.0 in [x[:1]], 3 in [1, 2]


def list_iter_sees_appends(x, z):
    out = []
    todo = [x]
    for t in todo:
        if len(todo) < 4:
            todo.append(t + 1)
        out.append(t * 2)
    return out


def len_of_iterator(x, z):
    return len(iter([x, z]))


def dict_union(x, z):
    d = {"a": x, "b": 1}
    e = d | {"b": z, "c": 3}      # a new dict: d's entries, then the right side's
    d |= {"z": 5}                 # d itself, updated
    return e, d, e is d


METHOD_CASES = [dict_union, upd_pairs, upd_pairs_then_break, upd_generator, upd_kwargs, upd_from_items_view, upd_zip,
                upd_bad_pair, dict_ctor_forms, setdefault_pop, pop_missing, pop_equal_key, list_methods,
                shared_receiver_across_break, shared_list_across_break, in_list_of_tensors,
                list_iter_sees_appends, len_of_iterator]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", METHOD_CASES, ids=lambda f: f.__name__)
def test_container_method_forms(fn, backend):
    check(fn, _t, backend)
    check(fn, lambda: (np.array([1.0, 2.0]), np.array([3.0, -1.0])), backend)


def test_dict_union_is_modelled_without_break():
    shapejit.reset()
    x, z = _t()
    e, d, same = shapejit.compile(dict_union)(x, z)
    assert list(e) == ["a", "b", "c"] and e["b"] is z and list(d) == ["a", "b", "z"] and not same
    assert shapejit.stats()["graph_breaks"] == 0, shapejit.stats()


def test_update_of_pairs_is_modelled_without_break():
    shapejit.reset()
    x, z = _t()
    assert shapejit.compile(upd_pairs)(x, z)[0] == 2
    assert shapejit.stats()["graph_breaks"] == 0, shapejit.stats()



# ---- objects and exceptions -----------------------------------------------------------
class _Lazy:
    def __init__(self, v):
        self.v = v

    def __getattr__(self, name):
        if name.startswith("z"):
            return len(name)
        raise AttributeError(name)


def getattr_fallback(x, z):
    o = _Lazy(x)
    return o.v * o.zz + o.zebra, hasattr(o, "v")


class _Plain:
    kind = "plain"

    def __init__(self, v):
        self.v = v


def hasattr_of_new_object(x, z):
    o = _Plain(x)
    return hasattr(o, "v"), hasattr(o, "kind"), hasattr(o, "w"), o.v + 1, getattr(o, "w", z) * 2, getattr(o, "v", z)


def _add(a, b):
    return a + b


def hasattr_of_values_made_here(x, z):
    # an instance has what its class's MRO defines: every class has a __name__ and a
    # __qualname__, a partial, a list and a tuple do not
    p = functools.partial(_add, b=z)
    l = [x, z]
    flags = (hasattr(p, "__name__"), hasattr(p, "__qualname__"), hasattr(p, "func"), hasattr(l, "__name__"),
             hasattr((x, z), "__qualname__"), hasattr(l, "append"))
    return flags, p(x) if hasattr(p, "__name__") else x - z


def getattr_fallback_raises(x, z):
    o = _Lazy(x)
    return o.missing


def except_tuple(x, z):
    d = {"a": x}
    try:
        y = d["b"] * 2
    except (IndexError, KeyError):
        y = z + 1
    try:
        if len(d) > 0:
            raise ValueError("big")
    except (TypeError, ValueError) as e:
        y = y + len(str(e))
    return y


def del_in_outside_containers(d, l):
    del d["a"]
    del l[0]
    l.append(d["b"] * 2)
    print("", end="")
    del l[-1]
    return len(d), len(l)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [getattr_fallback, getattr_fallback_raises, hasattr_of_new_object,
                                hasattr_of_values_made_here, except_tuple],
                         ids=lambda f: f.__name__)
def test_objects_and_exceptions(fn, backend):
    check(fn, _t, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("lib", ["torch", "numpy"])
def test_del_in_outside_containers(lib, backend):
    def make():
        x, y = _t() if lib == "torch" else (np.ones(2), np.zeros(2))
        return {"a": x, "b": y}, [x, y, x * 3]
    check(del_in_outside_containers, make, backend)


def test_except_tuple_and_getattr_are_captured():
    shapejit.reset()
    x, z = _t()
    shapejit.compile(except_tuple)(x, z)
    shapejit.compile(getattr_fallback)(x, z)
    assert shapejit.stats()["graph_breaks"] == 0, shapejit.stats()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("write", ["y[0] = 0", "y[:] = 3", "y[1:][...] = 2", "y.view(-1)[0] = 1"])
@pytest.mark.parametrize("brk", ["print('', end='')", "n = int(y.sum().item())"])
def test_item_write_into_input_then_break(write, brk, backend):
    """The replay's setitem defines the array it wrote, as its shape rule says: the first
    run's check finds nothing to disagree with, and the entry goes on to its break."""
    if "view" in write:
        libs = ["torch"]
    else:
        libs = ["torch", "numpy"]
    src = f"def f(y):\n    {write}\n    {brk}\n    return y * 2, y\n"
    ns = {}
    exec(src, ns)
    for lib in libs:
        check(ns["f"], (lambda: (torch.tensor([5.0, 6.0, 7.0]),)) if lib == "torch"
              else (lambda: (np.array([5.0, 6.0, 7.0]),)), backend)


def mutable_constants(x, z):
    s = {1}
    s.add(2)
    for i in range(3):
        s.add(i * 10)
    both = (s, s)
    keys = sorted({"b": 1, "a": 2})
    return x + 1, s, both, keys, s | {7}, bytearray(b"ab")


@pytest.mark.parametrize("backend", BACKENDS)
def test_mutable_constants_are_new_each_call(backend):
    """A set, list or bytearray the capture folded to a constant is a new object per call
    (what the caller does to one result never shows in the next), one object per call
    however many places hold it."""
    shapejit.reset()
    compiled = shapejit.compile(mutable_constants, backend=backend)
    x, z = _t()
    first = compiled(x, z)
    expected = mutable_constants(x, z)
    first[1].add(99)
    first[3].append("c")
    first[5].append(0)
    again = compiled(x, z)
    _same(expected, again, "second call")
    assert again[2][0] is again[2][1] is again[1]
    assert again[1] is not first[1] and again[3] is not first[3]


def _twice(values):
    return iter([v for v in values for _ in range(2)])


def set_argument(x, s):
    n = len(s) + int(2 in s) + len(s | {9})
    return x * n, sorted(s & {1, 2, 3})


def set_argument_written(x, s):
    s.add(5)
    s |= {6}
    return x + len(s)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sets_from_outside(backend):
    """A set argument is read by value (guarded: a call with other contents recompiles),
    and a write into it happens at run time, every call."""
    sets = _twice([{1, 2}, {1, 2}, {3}, {2, 3, 4}, frozenset({2})])   # eager's and the compiled call's
    check(set_argument, lambda: (torch.ones(2), set(next(sets))), backend, calls=5)
    check(set_argument_written, lambda: (torch.ones(2), {1, 2}), backend, calls=3)


def set_crossing_break(x, n):
    s = {1, 3}
    print("", end="")
    s.add(n)
    add = s.add
    print("", end="")
    add(n + 1)
    return x + len(s), s


@pytest.mark.parametrize("backend", BACKENDS)
def test_set_made_in_frame_crosses_breaks(backend):
    ns = _twice(range(2, 40))
    check(set_crossing_break, lambda: (torch.ones(2), next(ns)), backend, calls=4)


def append_to_first(a, b, x):
    a.append(x * 2)
    return len(b), x + len(a)


@pytest.mark.parametrize("backend", BACKENDS)
def test_same_list_passed_twice(backend):
    """One outside list reached through two arguments is one object in the capture (a
    write through one shows through the other), guarded both ways."""
    shared = []
    pairs = _twice([(True,), (True,), (False,), (True,)])

    def make():
        same = next(pairs)[0]
        a = [torch.ones(1)]
        shared[:] = [a]
        return (a, a if same else [torch.ones(1)], torch.ones(2))
    check(append_to_first, make, backend, calls=4)


# ---- reads of a live dict subclass through the builtin dict's methods -------------------

class _SuperGet(dict):
    def get(self, k, default=None):
        return super().get(k, default)


def ds_super_get(x, d):
    return x * d.get("a")


def ds_dict_get(x, d):
    return x * dict.get(d, "a", 1.0)


def ds_getitem(x, d):
    return x + dict.__getitem__(d, "a")


def ds_contains_len(x, d):
    return x * (dict.__contains__(d, "b") + dict.__len__(d))


def ds_keys(x, d):
    return x * len(list(dict.keys(d)))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [ds_super_get, ds_dict_get, ds_getitem, ds_contains_len, ds_keys],
                         ids=lambda f: f.__name__)
def test_live_dict_subclass_reads_follow_each_call(fn, backend):
    """The object is another one each call, with other contents: what the builtin dict's
    methods read from it is read each call, never kept from the first."""
    shapejit.reset()
    cf = shapejit.compile(fn, backend=backend)
    for lib in (torch, np):
        vals = [2.0, 3.0, lib.ones(2) * 4, lib.ones(2) * 5]
        for i, v in enumerate(vals):
            d = _SuperGet(a=v) if i % 2 else _SuperGet(a=v, b=1)
            x = lib.ones(2) if lib is torch else np.ones(2)
            _same(fn(x, d), cf(x, d), f"{fn.__name__} call {i}")


class _Registry(dict):
    """transformers' registries: a dict subclass read through super().get."""
    def __setitem__(self, k, v):
        super().__setitem__(str(k), v)

    def get(self, k):
        return super().get(str(k)) or {}


_REGISTRY = _Registry()


def test_registry_read_through_super_get_is_captured_and_guarded():
    def f(x):
        flags = _REGISTRY.get("model")
        return x * (2 if flags.get("a") else 3)

    shapejit.reset()
    cf = shapejit.compile(f, fullgraph=True)   # captured whole: no break
    x = torch.ones(2)
    for content in ({"a": 1}, {}, {"a": 1}, {"b": 1}):
        _REGISTRY["model"] = content
        _same(f(x), cf(x), str(content))
    _REGISTRY.clear()
