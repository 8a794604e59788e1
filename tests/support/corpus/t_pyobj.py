"""torch: Python objects in the frame: collections (OrderedDict, defaultdict, deque, Counter,
namedtuple, dict.fromkeys) made in the frame and passed in, identity and equality of user
objects, hash() and id(), and nn.Modules with parameters made in the frame."""
import collections
import dataclasses
import enum
import typing
from collections import Counter, OrderedDict, defaultdict, deque, namedtuple

import torch
import torch.nn as nn

from ._base import T, torch_case, with_breaks


# ---- OrderedDict ----------------------------------------------------------------------
@torch_case(lambda: (T(3),))
def t_obj_ordereddict_move_and_pop(x):
    d = OrderedDict()
    d["a"] = x + 1
    d["b"] = x * 2
    d["c"] = x - 1
    d.move_to_end("a")
    first_key, first = d.popitem(last=False)
    return d, first_key, first * 3


@torch_case(lambda: (OrderedDict(q=T(2, 3), k=T(2, 3), v=T(2, 3)),))
def t_obj_ordereddict_passed_order(d):
    # the stacking order is the dict's own order
    return torch.stack(list(d.values())), list(d)


@torch_case(lambda: (OrderedDict(a=T(3), b=T(3), c=T(3)),), mutates=True)
def t_obj_ordereddict_passed_move_to_end(d):
    d.move_to_end("a")
    d.move_to_end("c", last=False)
    return d["b"] + 1, next(iter(d))


@torch_case(lambda: (OrderedDict(a=T(3), b=T(3), c=T(3)),), mutates=True)
def t_obj_ordereddict_passed_popitem(d):
    key, last = d.popitem()
    return last * 2, key, len(d)


@torch_case(lambda: (T(4),))
def t_obj_ordereddict_lru_eviction(x):
    cache = OrderedDict()
    for i, name in enumerate(["w1", "w2", "w3", "w1"]):
        if name in cache:
            cache.move_to_end(name)
        else:
            cache[name] = x * (i + 1)
        if len(cache) > 2:
            cache.popitem(last=False)
    return cache


@torch_case(lambda: (T(3),))
def t_obj_ordereddict_reversed_items(x):
    d = OrderedDict([("first", x), ("second", x + 1), ("third", x + 2)])
    out = []
    for k in reversed(d):
        out.append(d[k] * len(k))
    return torch.cat(out), d.copy()


@torch_case(lambda: (T(3),))
def t_obj_ordereddict_equality_is_ordered(x):
    a = OrderedDict(one=1, two=2)
    b = OrderedDict(two=2, one=1)
    same_items = dict(a) == dict(b)
    return x * (a == b) + x * same_items * 2


# ---- defaultdict ----------------------------------------------------------------------
@torch_case(lambda: (T(6, 3),))
def t_obj_defaultdict_group_rows(x):
    groups = defaultdict(list)
    for i, label in enumerate(["even", "odd", "even", "odd", "even", "odd"]):
        groups[label].append(x[i])
    return {k: torch.stack(v).mean(0) for k, v in groups.items()}, len(groups["odd"])


@torch_case(lambda: (T(3),))
def t_obj_defaultdict_word_counts(x):
    counts = defaultdict(int)
    for w in "the cat sat on the mat the end".split():
        counts[w] += 1
    return x * counts["the"] + counts["cat"], counts


@torch_case(lambda: (defaultdict(list), T(3)), mutates=True)
def t_obj_defaultdict_passed_missing_key(d, x):
    d["activations"].append(x.relu())
    return x + 1


@torch_case(lambda: (defaultdict(int, seen=1), T(3)), mutates=True)
def t_obj_defaultdict_passed_counter(d, x):
    d["steps"] += 2
    d["seen"] += 1
    d["last"] = x * d["seen"]
    return x * d["seen"] + d["steps"]


@torch_case(lambda: (T(3),))
def t_obj_defaultdict_lambda_factory(x):
    acc = defaultdict(lambda: torch.zeros(3))
    acc["a"] = acc["a"] + x
    acc["b"] += x * 2
    acc["a"] += 1
    return acc["a"] + acc["b"], acc.default_factory is not None


@torch_case(lambda: (T(2, 3),))
def t_obj_defaultdict_nested_dict(x):
    tree = defaultdict(dict)
    tree["enc"]["w"] = x
    tree["dec"]["w"] = x.t()
    tree["enc"]["b"] = x.sum(0)
    return tree["enc"]["w"] @ tree["dec"]["w"] + tree["enc"]["b"].sum(), sorted(tree)


# ---- deque ------------------------------------------------------------------------------
@torch_case(lambda: (T(3),))
def t_obj_deque_both_ends(x):
    q = deque()
    q.append(x)
    q.append(x + 1)
    q.appendleft(x - 1)
    right = q.pop()
    left = q.popleft()
    q.extend([x * 2, x * 3])
    q.extendleft([x * 4])
    return right + left, len(q), list(q)


@torch_case(lambda: (T(5, 4),))
def t_obj_deque_sliding_window(x):
    window = deque(maxlen=3)
    outs = []
    for row in x:
        window.append(row)
        outs.append(torch.stack(list(window)).mean(0))
    return torch.stack(outs), window.maxlen, len(window)


@torch_case(lambda: (T(3),))
def t_obj_deque_rotate(x):
    q = deque([x, x + 1, x + 2])
    q.rotate(1)
    head = q[0]
    q.rotate(-2)
    return head, q[0], q[-1]


@torch_case(lambda: (deque([T(3), T(3), T(3)]),))
def t_obj_deque_passed_iterate(q):
    total = 0
    for v in q:
        total = total + v
    return total / len(q), q[-1]


@torch_case(lambda: (deque([T(3), T(3)], maxlen=3), T(3)), mutates=True)
def t_obj_deque_passed_bounded_append(q, x):
    q.append(x)
    q.append(x * 2)   # drops the oldest: maxlen is 3
    return q[0] + q[-1]


@torch_case(lambda: (T(3),))
def t_obj_deque_returned(x):
    q = deque([x, x + 1], maxlen=4)
    q.appendleft(x * 2)
    return q


@torch_case(lambda: (T(3),))
def t_obj_deque_bfs_queue(x):
    graph = {"a": ["b", "c"], "b": ["d"], "c": ["d"], "d": []}
    order, seen, todo = [], {"a"}, deque(["a"])
    while todo:
        node = todo.popleft()
        order.append(node)
        for nxt in graph[node]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return x * len(order), tuple(order)


# ---- Counter ----------------------------------------------------------------------------
@torch_case(lambda: (T(3),))
def t_obj_counter_most_common(x):
    votes = Counter(["cat", "dog", "cat", "bird", "cat", "dog"])
    label, n = votes.most_common(1)[0]
    return x * n + votes["dog"], label


@torch_case(lambda: (T(3),))
def t_obj_counter_update_and_add(x):
    c = Counter([1, 2, 2])
    c.update([2, 3])
    c.subtract({1: 1})
    merged = c + Counter({3: 2})
    return x + c[2] + merged[3], merged


@torch_case(lambda: (T(3),))
def t_obj_counter_missing_is_zero(x):
    c = Counter("hello world")
    return x * c["l"] + c["z"], c, "z" in c


# ---- namedtuple -------------------------------------------------------------------------
Point = namedtuple("Point", ["x", "y"])


class Span(typing.NamedTuple):
    start: torch.Tensor
    scale: float = 2.0

    def scaled(self):
        return self.start * self.scale

    @property
    def width(self):
        return self.scale * 10


@torch_case(lambda: (T(3),))
def t_obj_namedtuple_replace_asdict(x):
    p = Point(x, x + 1)
    q = p._replace(y=x * 2)
    a, b = q
    return p.x + q.y + a + b, q._asdict(), q


@torch_case(lambda: (T(3),))
def t_obj_typing_namedtuple_methods(x):
    s = Span(x)
    t = s._replace(scale=0.5)
    return s.scaled() + t.scaled(), s.width, t, t._fields


@torch_case(lambda: (T(3),))
def t_obj_namedtuple_make_and_fields(x):
    p = Point._make([x, x * 3])
    return p, len(Point._fields), p[1:]


@torch_case(lambda: (T(3),))
def t_obj_namedtuple_class_in_frame(x):
    Pair = namedtuple("Pair", "first second")
    p = Pair(x, 2)
    return p.first * p.second + p[0]


@torch_case(lambda: (Point(T(3), T(3)),))
def t_obj_namedtuple_passed_replace(p):
    q = p._replace(x=p.x + p.y)
    return q, p._asdict()["y"] * 2


# ---- dict.fromkeys ------------------------------------------------------------------------
@torch_case(lambda: (T(3),))
def t_obj_dict_fromkeys(x):
    stats = dict.fromkeys(["mean", "max", "min"], 0)
    stats["mean"] = x.mean()
    stats["max"] = x.max()
    return stats


@torch_case(lambda: (T(3),))
def t_obj_ordereddict_fromkeys(x):
    d = OrderedDict.fromkeys("abc")
    d["b"] = x * 2
    d.move_to_end("a")
    return d, type(d) is OrderedDict


# ---- identity, equality, hash, id --------------------------------------------------------
@dataclasses.dataclass(eq=False)
class Token:
    name: str


class Key:
    def __init__(self, a, b):
        self.a, self.b = a, b

    def __eq__(self, other):
        return isinstance(other, Key) and (self.a, self.b) == (other.a, other.b)

    def __hash__(self):
        return hash((self.a, self.b))


class LooseKey(Key):
    def __eq__(self, other):
        return isinstance(other, Key) and self.a == other.a


@dataclasses.dataclass
class Cfg:
    depth: int
    act: str = "relu"


@torch_case(lambda: (T(3),))
def t_obj_identity_made_objects(x):
    a, b = Token("a"), Token("a")
    c = a
    return x + (a is c) + (a is not b) * 2 + (a == c) * 4 + (a != b) * 8


@torch_case(lambda: (T(3),))
def t_obj_user_eq_and_ne(x):
    k1, k2, k3 = Key(1, "w"), Key(1, "w"), Key(2, "w")
    return x + (k1 == k2) + (k1 != k3) * 2 + (k1 is k2) * 4 + (k1 == 3) * 8


@torch_case(lambda: (T(3),))
def t_obj_eq_reflected_subclass(x):
    strict, loose = Key(1, "a"), LooseKey(1, "b")
    # the subclass's __eq__ is asked first, from either side
    return x * ((strict == loose) + (loose == strict) * 2 + (strict != loose) * 4)


@torch_case(lambda: (T(3),))
def t_obj_dataclass_eq(x):
    a, b = Cfg(2), Cfg(2, "relu")
    return x * (a == b) + x * (a != Cfg(3)), a == Cfg(2, "gelu")


def _shared_token():
    tok = Token("shared")
    return tok, tok, Token("other"), T(3)


@torch_case(_shared_token)
def t_obj_identity_passed_objects(a, b, c, x):
    out = x
    if a is b:
        out = out + 1
    if a is not c:
        out = out * 2
    if a == c:   # object's __eq__: identity
        out = out - 100
    return out


@torch_case(lambda: (Key(1, "x"), Key(1, "x"), Key(2, "x"), T(3)))
def t_obj_user_eq_passed(a, b, c, x):
    return x * (a == b) + x * (a == c) * 10 + (b != c)


class Mode(enum.Enum):
    TRAIN = "train"
    EVAL = "eval"


_UNSET = object()


@torch_case(lambda: (T(3), Mode.EVAL))
def t_obj_enum_and_sentinel_identity(x, mode, scale=_UNSET):
    if mode is Mode.TRAIN:
        x = x * 0.5
    if mode == Mode.EVAL:
        x = x + 1
    if scale is _UNSET:
        scale = 2.0
    return x * scale


@torch_case(lambda: (T(3),))
def t_obj_hash_user_key(x):
    k = Key(3, "bias")
    table = {hash(k): 1.5, hash(Key(4, "bias")): 0.5}
    return x * table[hash(k)], hash((1, "a")) == hash((1, "a"))


_DEFAULT = Token("default")
_OTHER = Token("other")


@torch_case(lambda: (T(3),))
def t_obj_id_of_global_object(x):
    scales = {id(_DEFAULT): 2.0, id(_OTHER): 3.0}
    return x * scales[id(_DEFAULT)], id(_DEFAULT) == id(_OTHER)


# ---- nn.Modules made in the frame ---------------------------------------------------------
class MyLinear(nn.Module):
    def __init__(self, i, o):
        super().__init__()
        self.w = nn.Parameter(torch.randn(o, i) / i ** 0.5)
        self.b = nn.Parameter(torch.zeros(o))

    def forward(self, x):
        return x @ self.w.t() + self.b


@with_breaks("torch", lambda: (T(2, 4),), graphs=1, breaks=1, rng=True, new_module=True)
def t_obj_user_module_made_in_frame(x):
    lin = MyLinear(4, 5)
    return lin(x)


@with_breaks("torch", lambda: (T(2, 4),), graphs=1, breaks=1, rng=True, new_module=True)
def t_obj_nn_linear_made_in_frame(x):
    return nn.Linear(4, 4)(x).relu()


@with_breaks("torch", lambda: (T(2, 4),), graphs=2, breaks=1, rng=True, new_module=True)
def t_obj_module_made_after_ops(x):
    y = x * 2
    head = nn.Linear(4, 3)
    return head(y).relu() + 1


@torch_case(lambda: (T(2, 4),), rng=True)
def t_obj_stateless_layers_made_in_frame(x):
    act = nn.GELU()
    drop = nn.Dropout(0.5).eval()
    return drop(act(x)) + nn.Identity()(x)


# ---- iterators and views handed to collections ----------------------------------------
@torch_case(lambda: (T(3),))
def t_obj_ordereddict_from_pair_iterator(x):
    pairs = iter([("w", x * 2), ("b", x - 1), ("s", x + 3)])
    first = dict([next(pairs)])
    rest = OrderedDict(pairs)          # reads what the iterator has left
    rest["b"] = rest["b"] * 10
    return first["w"] + rest["b"] + rest["s"], list(rest)


@torch_case(lambda: (T(4), T(4)))
def t_obj_fromkeys_of_iterator_and_view(x, y):
    base = {"k1": x, "k2": y}
    zeros = defaultdict.fromkeys(iter(base), x * 0)
    ordered = OrderedDict.fromkeys(base.keys(), y + 1)
    return zeros["k1"] + ordered["k2"], sorted(zeros), list(ordered)


@torch_case(lambda: (T(3), T(3)))
def t_obj_deque_of_mapped_tensors(x, y):
    q = deque(map(lambda t: t * 2, (x, y, x + y)), maxlen=2)
    q.appendleft(x - y)
    return q[0] + q[1], len(q)


@torch_case(lambda: (T(3), T(3)))
def t_obj_namedtuple_list_of_fields(a, b):
    Pair = namedtuple("Pair", ["left", "right", "both"], defaults=(None,))
    p = Pair(a, b)
    q = p._replace(both=p.left * p.right)
    return q.both + q.left, Pair._fields
