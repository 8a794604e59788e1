"""Python objects in compiled frames (capture/collections.c, objects.c): error paths
raise what eager raises, and objects shared between containers and the caller stay one
object. The constructs themselves are corpus entries (tests/support/corpus/t_pyobj.py,
np_pyobj.py)."""
import copy
import typing
from collections import Counter, OrderedDict, defaultdict, deque, namedtuple

import pytest
import torch
import torch.nn as nn

import shapejit

Point = namedtuple("Point", "x y")


class _NoHash:
    def __init__(self, v):
        self.v = v

    def __eq__(self, other):
        return isinstance(other, _NoHash) and self.v == other.v


class _BadEq:
    def __eq__(self, other):
        raise ValueError("no comparing")


@pytest.fixture(autouse=True)
def _fresh():
    shapejit.reset()
    yield
    shapejit.reset()


def _popitem_empty(x):
    d = OrderedDict()
    d.popitem()
    return x


def _move_missing(x):
    d = OrderedDict(a=x)
    d.move_to_end("b")
    return x


def _pop_empty_deque(x):
    q = deque([x])
    q.pop()
    return q.popleft()


def _slice_deque(x):
    q = deque([x, x + 1, x + 2])
    return q[0:2]


def _replace_unknown(x):
    return Point(x, x)._replace(z=x)


def _make_wrong_length(x):
    return Point._make([x])


def _defaultdict_bad_factory(x):
    return defaultdict(3), x


def _counter_plus_int(x):
    return Counter("ab") + 1, x


def _hash_unhashable(x):
    return x * hash(_NoHash(1))


def _user_eq_raises(x):
    return x * (_BadEq() == _BadEq())


def _deque_pop_index(x):
    q = deque([x, x])
    return q.pop(0)


def _counter_fromkeys(x):
    return Counter.fromkeys("ab", 1), x


def _deque_bad_maxlen(x):
    return deque([x], maxlen=-1)


ERRORS = [_counter_fromkeys, _deque_bad_maxlen, _popitem_empty, _move_missing, _pop_empty_deque, _slice_deque, _replace_unknown,
          _make_wrong_length, _defaultdict_bad_factory, _counter_plus_int, _hash_unhashable,
          _user_eq_raises, _deque_pop_index]


@pytest.mark.parametrize("fn", ERRORS, ids=[f.__name__ for f in ERRORS])
def test_errors_match_eager(fn):
    x = torch.randn(3)
    with pytest.raises(Exception) as eager:
        fn(x)
    with pytest.raises(Exception) as compiled:
        shapejit.compile(fn)(x)
    assert type(compiled.value) is type(eager.value)
    assert str(compiled.value) == str(eager.value)


def _caught(x):
    q = deque()
    try:
        q.popleft()
    except IndexError:
        q.append(x)
    d = OrderedDict()
    try:
        d.popitem()
    except KeyError:
        d["k"] = x * 2
    return q[0] + d["k"]


def _defaultdict_fromkeys(x):
    d = defaultdict.fromkeys(["a", "b"], 0)
    d["a"] = x
    return d, d.default_factory


def test_defaultdict_fromkeys_has_no_factory():
    x = torch.randn(3)
    d, f = shapejit.compile(_defaultdict_fromkeys, fullgraph=True)(x)
    assert type(d) is defaultdict and f is None and d["a"] is not None and d["b"] == 0


def test_errors_caught_in_frame():
    x = torch.randn(3)
    torch.testing.assert_close(shapejit.compile(_caught, fullgraph=True)(x), _caught(x))


def _list_in_deque(x):
    inner = [x]
    q = deque()
    q.append(inner)
    inner.append(x + 1)
    return q, inner


def test_list_held_by_a_deque_stays_one_object():
    x = torch.randn(3)
    q, inner = shapejit.compile(_list_in_deque, fullgraph=True)(x)
    assert type(q) is deque and q[0] is inner and len(inner) == 2
    torch.testing.assert_close(inner[1], x + 1)


def _reorder_and_return(d):
    d.move_to_end("a")
    d["z"] = d["a"] * 2
    return d


def test_passed_ordereddict_written_back_in_order_and_returned_as_itself():
    d = OrderedDict(a=torch.randn(2), b=torch.randn(2))
    expected = _reorder_and_return(copy.deepcopy(d))
    out = shapejit.compile(_reorder_and_return, fullgraph=True)(d)
    assert out is d and list(d) == list(expected) == ["b", "a", "z"]
    torch.testing.assert_close(d["z"], expected["z"])
    # the guard reads the new order: a second call with the reordered dict recompiles
    # rather than using the entry made for ["a", "b"]
    d2 = OrderedDict(b=torch.randn(2), a=torch.randn(2))
    expected2 = _reorder_and_return(copy.deepcopy(d2))
    assert list(shapejit.compile(_reorder_and_return)(d2)) == list(expected2)


def _lambda_factory(d, x):
    d["new"] = d["new"] + x
    return d["new"]


def test_passed_defaultdict_with_lambda_factory():
    d = defaultdict(lambda: torch.ones(3))
    x = torch.randn(3)
    out = shapejit.compile(_lambda_factory, fullgraph=True)(d, x)
    torch.testing.assert_close(out, x + 1)
    assert list(d) == ["new"] and d["new"] is out


def _counter_passed(c, x):
    c.update("aab")
    return x * c["a"]


def test_passed_counter_updated():
    c, c2 = Counter("a"), Counter("a")
    x = torch.randn(3)
    torch.testing.assert_close(shapejit.compile(_counter_passed, fullgraph=True)(c, x), _counter_passed(c2, x))
    assert c == c2 and type(c) is Counter


def _deque_count_tensors(q, x):
    return q.count(x)


def test_comparing_graph_values_in_a_deque_breaks():
    # one-element tensors: eager compares their values, which capture does not know
    x = torch.tensor([2.0])
    q = deque([torch.tensor([2.0]), x, torch.tensor([3.0])])
    assert shapejit.compile(_deque_count_tensors)(q, x) == _deque_count_tensors(q, x) == 2
    ex = shapejit.explain(_deque_count_tensors)(q, x)
    assert ex.graph_break_count >= 1


class _Lin(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))

    def forward(self, x):
        return x @ self.w


def _made_module(x):
    return _Lin()(x) + nn.Linear(4, 2)(x).sum()


def test_module_made_in_frame_draws_like_eager():
    x = torch.randn(2, 4)
    compiled = shapejit.compile(_made_module)
    for _ in range(3):
        state = torch.get_rng_state()
        expected = _made_module(x)
        after = torch.get_rng_state()
        torch.set_rng_state(state)
        torch.testing.assert_close(compiled(x), expected)
        assert torch.equal(torch.get_rng_state(), after)


def _identity_then_alias(a, b, x):
    return x + 1 if a is b else x - 1


def test_identity_of_passed_objects_is_guarded():
    o1, o2 = _NoHash(1), _NoHash(1)
    x = torch.zeros(2)
    compiled = shapejit.compile(_identity_then_alias)
    torch.testing.assert_close(compiled(o1, o1, x), x + 1)
    torch.testing.assert_close(compiled(o1, o2, x), x - 1)
    torch.testing.assert_close(compiled(o2, o2, x), x + 1)


def _eq_passed(a, b, x):
    return x + 1 if a == b else x - 1


def test_user_eq_of_passed_objects_reads_their_attributes():
    x = torch.zeros(2)
    compiled = shapejit.compile(_eq_passed)
    a, b = _NoHash(1), _NoHash(1)
    torch.testing.assert_close(compiled(a, b, x), x + 1)
    b.v = 2
    torch.testing.assert_close(compiled(a, b, x), x - 1)


class _Tok:
    pass


def _id_of_made(x):
    tok = _Tok()
    seen = {id(tok): tok}
    return x * len(seen), seen[id(tok)] is tok


def test_id_of_an_object_made_in_the_frame_breaks():
    # its id at capture would be another object's at run time: the call runs eagerly
    x = torch.randn(3)
    out, same = shapejit.compile(_id_of_made)(x)
    torch.testing.assert_close(out, x)
    assert same is True
    ex = shapejit.explain(_id_of_made)(x)
    assert any("id()" in r.reason for r in ex.break_reasons)


def test_prepended_forward_hooks_run_in_their_order():
    # a module's hook dicts are OrderedDicts: prepend=True moves a hook to the front of
    # its own order, which its underlying dict does not follow
    m = nn.Linear(3, 3)
    m.register_forward_hook(lambda mod, i, o: o * 2)
    m.register_forward_hook(lambda mod, i, o: o + 1, prepend=True)
    x = torch.randn(2, 3)
    compiled = shapejit.compile(lambda t: m(t))
    for _ in range(2):
        torch.testing.assert_close(compiled(x), m(x))
    assert shapejit.stats()["recompiles"] == 0


def _classes(x):
    p = Point(x, x)
    q = deque([x])
    d = OrderedDict(a=x)
    return p.__class__ is Point, q.__class__ is deque, type(d) is OrderedDict, d.__class__.__name__, x + 1


def test_class_of_collections():
    x = torch.randn(2)
    out = shapejit.compile(_classes, fullgraph=True)(x)
    assert out[:4] == (True, True, True, "OrderedDict")


class _Mode:
    pass


_A, _B = _Mode(), _Mode()


def _by_mode(x, mode):
    return x + 1 if mode is _A else x * 3


def test_identity_against_a_global_object_is_guarded():
    # a passed object compared with a global one by identity: the answer is guarded, so
    # the other object recompiles instead of reusing the first answer
    x = torch.ones(2)
    compiled = shapejit.compile(_by_mode)
    for mode in (_A, _B, _A, _B):
        torch.testing.assert_close(compiled(x, mode), _by_mode(x, mode))
