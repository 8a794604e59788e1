"""Writes into outside objects reached through the cells and defaults of an inlined
function (a method, a nested function, a lambda, a functools.partial, a staticmethod or
classmethod, a property getter): after N compiled calls the objects hold what eager's N
calls left in them. The capture either tracks such an object (guards it and replays its
writes after the graph) or breaks the graph; a write is never dropped.

The programs are generated: every kind of callable crossed with every kind of write,
each run two and three times against a fresh eager twin."""
import functools  # noqa: F401  (the generated programs use it)
import itertools
import random
import re
import textwrap
import warnings

import pytest
import torch
import torch.nn as nn

import shapejit


@pytest.fixture(autouse=True)
def _fresh():
    shapejit.reset()
    yield
    shapejit.reset()


class Obj:
    def __init__(self, **kw):
        self.__dict__.update(kw)

    def __eq__(self, other):
        return type(other) is Obj and vars(self) == vars(other)

    def __repr__(self):
        return "Obj(%r)" % vars(self)


# write kind: (initial state, statement form, expression form or None)
WRITES = {
    "list_append": ("[]", "state.append(1)", "state.append(1)"),
    "list_extend": ("[]", "state.extend([1, 2])", "state.extend([1, 2])"),
    "list_setitem": ("[0]", "state[0] = state[0] + 1", "state.__setitem__(0, state[0] + 1)"),
    "dict_setitem": ("{}", "state['k'] = state.get('k', 0) + 1", "state.__setitem__('k', state.get('k', 0) + 1)"),
    "dict_update": ("{}", "state.update(u=len(state))", "state.update(u=len(state))"),
    "dict_pop": ("{'k': 1, 'j': 2}", "state.pop('k', None)", "state.pop('k', None)"),
    "set_add": ("set()", "state.add(len(state))", "state.add(len(state))"),
    "attr": ("Obj(n=0)", "state.n = state.n + 1", "setattr(state, 'n', state.n + 1)"),
    "nonlocal": ("0", "nonlocal state; state = state + 1", None),
}

# callable kind: (definitions, the compiled lambda's body); {W} is the write statement,
# {E} its expression form
CALLABLES = {
    "closure": ("def g(x):\n    {W}\n    return x + 1\n", "g(x) * 2"),
    "method": ("class A:\n    def g(self, x):\n        {W}\n        return x + 1\na = A()\n", "a.g(x) * 2"),
    "method_on_class_arg": ("class A:\n    def g(self, x):\n        {W}\n        return x + 1\n", "A().g(x) * 2"),
    "staticmethod": ("class A:\n    @staticmethod\n    def g(x):\n        {W}\n        return x + 1\na = A()\n",
                     "a.g(x) + A.g(x)"),
    "classmethod": ("class A:\n    @classmethod\n    def g(cls, x):\n        {W}\n        return x + 1\n",
                    "A.g(x) * 2"),
    "property": ("class A:\n    @property\n    def g(self):\n        {W}\n        return 1\na = A()\n", "x + a.g"),
    "partial": ("def g0(k, x):\n    {W}\n    return x + k\ng = functools.partial(g0, 1)\n", "g(x) * 2"),
    "nested": ("def outer(x):\n    def g(y):\n        {W}\n        return y + 1\n    return g(x)\n", "outer(x) * 2"),
    "lambda": ("g = lambda x: ({E}, x + 1)[1]\n", "g(x) * 2"),
    "lambda_on_class": ("class A:\n    g = staticmethod(lambda x: ({E}, x + 1)[1])\na = A()\n", "a.g(x) * 2"),
}


def _part(callable_kind, write_kind, tag="", state="state"):
    """The definitions and the call of one callable writing into state, its names
    suffixed by tag; None when the callable cannot hold the write (a lambda, a
    statement)."""
    init, stmt, expr = WRITES[write_kind]
    defs, body = CALLABLES[callable_kind]
    if "{E}" in defs and expr is None:
        return None
    stmt = stmt.replace("; ", "\n")   # one statement a line, indented below
    lines = []
    for line in defs.replace("{E}", expr or "").splitlines():
        if "{W}" in line:
            indent = line[: len(line) - len(line.lstrip())]
            for part in stmt.split("\n"):
                lines.append(indent + part.strip())
        else:
            lines.append(line)
    defs = "\n".join(lines)

    def rename(text):
        text = re.sub(r"\b(g0|g|A|a|outer)\b", lambda m: m.group(1) + tag, text)
        return re.sub(r"\bstate\b", state, text)
    return init, rename(defs), rename(body)


def _program(callable_kind, write_kind):
    part = _part(callable_kind, write_kind)
    if part is None:
        return None
    init, defs, body = part
    return "def make():\n    state = %s\n%s\n    f = lambda x: %s\n    return f, lambda: state\n" % (
        init, textwrap.indent(defs, "    "), body)


def _build(src):
    ns = {"functools": functools, "Obj": Obj, "torch": torch}
    exec(compile(src, "<closure-writes>", "exec"), ns)
    return ns["make"]


def _snap(v):
    if isinstance(v, tuple):
        return tuple(_snap(i) for i in v)
    if isinstance(v, Obj):
        return Obj(**vars(v))
    if isinstance(v, (list, dict, set)):
        return type(v)(v)
    return v


def _run(make, calls, compiled):
    f, state = make()
    if compiled:
        f = shapejit.compile(f)
    outs, snaps = [], []
    torch.manual_seed(0)
    xs = [torch.randn(3) for _ in range(calls)]
    for x in xs:
        try:
            outs.append(("ok", f(x)))
        except Exception as e:   # eager's own error, raised the same way
            outs.append(("err", type(e).__name__))
        snaps.append(_snap(state()))
    return outs, snaps


CASES = [(ck, wk, n) for ck, wk in itertools.product(CALLABLES, WRITES) for n in (2, 3)
         if _program(ck, wk) is not None]


@pytest.mark.parametrize("callable_kind,write_kind,calls", CASES)
def test_write_through_inlined_callable(callable_kind, write_kind, calls):
    src = _program(callable_kind, write_kind)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eo, es = _run(_build(src), calls, False)
        co, cs = _run(_build(src), calls, True)
    assert cs == es, src
    assert [o[0] for o in co] == [o[0] for o in eo], src
    for (k1, a), (k2, b) in zip(co, eo):
        if k1 == "ok" and isinstance(a, torch.Tensor):
            torch.testing.assert_close(a, b)
        else:
            assert a == b


def _random_program(rng):
    """Two to four callables of random kinds, each writing into a state of its own or
    into one shared with an earlier callable of the same write kind, summed in one
    compiled lambda."""
    states, defs, calls = {}, [], []
    for i in range(rng.randint(2, 4)):
        while True:
            ck, wk = rng.choice(list(CALLABLES)), rng.choice(list(WRITES))
            shared = [n for n, k in states.items() if k == wk]
            name = rng.choice(shared) if shared and rng.random() < 0.5 else "state%d" % i
            part = _part(ck, wk, "_%d" % i, name)
            if part is not None:
                break
        states.setdefault(name, wk)
        defs.append(part[1])
        calls.append(part[2])
    inits = "".join("    %s = %s\n" % (n, WRITES[k][0]) for n, k in states.items())
    return "def make():\n%s%s\n    f = lambda x: %s\n    return f, lambda: (%s,)\n" % (
        inits, textwrap.indent("\n".join(defs), "    "), " + ".join(calls), ", ".join(states))


@pytest.mark.parametrize("seed", range(200))
def test_random_programs(seed):
    rng = random.Random(seed)
    src = _random_program(rng)
    calls = rng.choice((2, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eo, es = _run(_build(src), calls, False)
        co, cs = _run(_build(src), calls, True)
    assert cs == es, src
    assert [o[0] for o in co] == [o[0] for o in eo], src
    for (k1, a), (k2, b) in zip(co, eo):
        if k1 == "ok":
            torch.testing.assert_close(a, b)


def test_method_of_local_class_appends_each_call():
    calls = []

    class A:
        def chk(self, x):
            calls.append(1)
            return x + 1

    a = A()
    f = shapejit.compile(lambda x: a.chk(x) * 2)
    f(torch.randn(3))
    f(torch.randn(3))
    assert calls == [1, 1]


def test_method_write_is_tracked_in_one_graph():
    calls = []

    class A:
        def chk(self, x):
            calls.append(len(calls))
            return x + 1

    a = A()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ex = shapejit.explain(lambda x: a.chk(x) * 2)(torch.randn(3))
    assert ex.graph_count == 1 and ex.graph_break_count == 0
    assert calls == [0]


def test_method_matches_torch_compile():
    import torch._dynamo
    from torch._dynamo.testing import CompileCounter

    def run(compile_fn):
        calls = []

        class A:
            def chk(self, x):
                calls.append(1)
                return x + 1

        a = A()
        f = compile_fn(lambda x: a.chk(x) * 2)
        for _ in range(3):
            f(torch.randn(3))
        return calls

    torch._dynamo.reset()
    cnt = CompileCounter()
    ref = run(lambda fn: torch.compile(fn, backend=cnt))
    torch._dynamo.reset()
    assert run(shapejit.compile) == ref == [1, 1, 1]
    # the list's length is guarded: each call recompiles, in both
    assert shapejit.stats()["graphs"] == cnt.frame_count


# ---- the same write reached other ways ----

MODULE_LIST = []


class GlobalHolder:
    def chk(self, x):
        MODULE_LIST.append(1)
        return x + 1


def test_global_class_method_appends_to_module_list():
    MODULE_LIST.clear()
    h = GlobalHolder()
    f = shapejit.compile(lambda x: h.chk(x) * 2)
    for _ in range(3):
        f(torch.randn(3))
    assert MODULE_LIST == [1, 1, 1]


def test_module_method_appends_to_own_list():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.seen = []
            self.lin = nn.Linear(3, 3)

        def note(self, x):
            self.seen.append(x.shape[0])
            return x

        def forward(self, x):
            return self.lin(self.note(x))

    m = M()
    f = shapejit.compile(m)
    for _ in range(3):
        f(torch.randn(2, 3))
    assert m.seen == [2, 2, 2]


def _default_acc(x, acc=[]):
    acc.append(1)
    return x + len(acc)


def test_default_argument_list_of_global_function():
    _default_acc.__defaults__[0].clear()
    ref_acc = []

    def ref(x, acc=ref_acc):
        acc.append(1)
        return x + len(acc)

    f = shapejit.compile(lambda x: _default_acc(x) * 2)
    xs = [torch.randn(3) for _ in range(3)]
    for x in xs:
        torch.testing.assert_close(f(x), ref(x) * 2)
    assert _default_acc.__defaults__[0] == ref_acc == [1, 1, 1]


def test_default_argument_list_of_method():
    class A:
        def chk(self, x, acc=[]):
            acc.append(1)
            return x + len(acc)

    a = A()
    f = shapejit.compile(lambda x: a.chk(x) * 2)
    outs = [f(torch.zeros(3)) for _ in range(3)]
    assert A.chk.__defaults__[0] == [1, 1, 1]
    assert [float(o[0]) for o in outs] == [2.0, 4.0, 6.0]


def test_keyword_default_dict_of_method():
    class A:
        def chk(self, x, *, seen={}):
            seen[len(seen)] = 1
            return x + len(seen)

    a = A()
    f = shapejit.compile(lambda x: a.chk(x) * 2)
    outs = [f(torch.zeros(3)) for _ in range(3)]
    assert A.chk.__kwdefaults__["seen"] == {0: 1, 1: 1, 2: 1}
    assert [float(o[0]) for o in outs] == [2.0, 4.0, 6.0]


def test_cell_int_read_by_method_follows_rebinding():
    """A method's cell read as a value: rebinding it outside between calls is seen."""
    k = 1

    class A:
        def g(self, x):
            return x + k

    a = A()
    f = shapejit.compile(lambda x: a.g(x))
    x = torch.zeros(2)
    assert float(f(x)[0]) == 1.0
    k = 5
    assert float(f(x)[0]) == 5.0


# ---- outside containers reached without a source: the write breaks the graph, and the
# code after the break writes into the object itself (never a copy) ----

def _eager_vs_compiled(make, calls=3):
    out = []
    for compiled in (False, True):
        shapejit.reset()
        f, state = make()
        if compiled:
            f = shapejit.compile(f)
        for _ in range(calls):
            f(torch.randn(3))
        out.append(_snap(state()))
    return out


def test_class_list_through_type_of_object():
    def make():
        class A:
            reg = []
        a = A()
        return (lambda x: (type(a).reg.append(1), x + 1)[1]), lambda: A.reg
    eager, compiled = _eager_vs_compiled(make)
    assert compiled == eager == [1, 1, 1]


def test_class_dict_through_type_of_self():
    def make():
        class A:
            reg = {}

            def g(self, x):
                type(self).reg[len(self.reg)] = 1
                return x + 1
        a = A()
        return (lambda x: a.g(x)), lambda: A.reg
    eager, compiled = _eager_vs_compiled(make)
    assert compiled == eager == {0: 1, 1: 1, 2: 1}


def test_class_set_through_self():
    def make():
        class A:
            s = set()

            def g(self, x):
                self.s.add(len(self.s))
                return x + 1
        a = A()
        return (lambda x: a.g(x)), lambda: A.s
    eager, compiled = _eager_vs_compiled(make)
    assert compiled == eager == {0, 1, 2}


def test_partial_argument_list_on_class():
    def make():
        acc = []

        def g(k, x):
            k.append(1)
            return x + 1

        class A:
            p = staticmethod(functools.partial(g, acc))
        a = A()
        return (lambda x: a.p(x)), lambda: acc
    eager, compiled = _eager_vs_compiled(make)
    assert compiled == eager == [1, 1, 1]


def test_untracked_list_returned_is_the_object_itself():
    class A:
        reg = [1]
    a = A()
    f = shapejit.compile(lambda x: (type(a).reg, x + 1))
    r, _ = f(torch.randn(3))
    assert r is A.reg


@pytest.mark.parametrize("which", ["decorated", "property_via_self", "closure_via_class_attr",
                                   "module_forward", "lambda_in_class_dict", "object_made_in_capture"])
def test_other_paths_to_a_closure_list(which):
    def make():
        acc = []
        if which == "decorated":
            def deco(fn):
                @functools.wraps(fn)
                def w(*a):
                    acc.append(1)
                    return fn(*a)
                return w

            class A:
                @deco
                def g(self, x):
                    return x + 1
            a = A()
            return (lambda x: a.g(x)), lambda: acc
        if which == "property_via_self":
            class A:
                @property
                def p(self):
                    acc.append(1)
                    return 1

                def g(self, x):
                    return x + self.p
            a = A()
            return (lambda x: a.g(x)), lambda: acc
        if which == "closure_via_class_attr":
            def outer():
                def inner(x):
                    acc.append(1)
                    return x + 1
                return inner

            class A:
                f = staticmethod(outer())
            a = A()
            return (lambda x: a.f(x) + A.f(x)), lambda: acc
        if which == "module_forward":
            class M(nn.Module):
                def forward(self, x):
                    acc.append(1)
                    return x + 1
            m = M()
            return (lambda x: m(x)), lambda: acc
        if which == "lambda_in_class_dict":
            g = lambda x: (acc.append(1), x + 1)[1]   # noqa: E731
            d = {"g": g}

            class A:
                h = d
            return (lambda x: A.h["g"](x)), lambda: acc

        class A:
            def __init__(self):
                self.l = acc

            def g(self, x):
                self.l.append(1)
                return x + 1
        return (lambda x: A().g(x)), lambda: acc
    eager, compiled = _eager_vs_compiled(make)
    assert compiled == eager


def test_list_written_through_a_source_then_read_without_one():
    """One list reached both ways is one var: the read without a source sees the write."""
    def make():
        class A:
            reg = []
        a = A()

        def f(x):
            a.reg.append(1)
            return x + len(type(a).reg)
        return f, lambda: A.reg
    outs = []
    for compiled in (False, True):
        shapejit.reset()
        f, state = make()
        if compiled:
            f = shapejit.compile(f)
        outs.append(([float(f(torch.zeros(1))[0]) for _ in range(3)], list(state())))
    assert outs[1] == outs[0] == ([1.0, 2.0, 3.0], [1, 1, 1])


@pytest.mark.parametrize("which", ["attr_via_type", "list_in_tuple_via_type", "setdefault_on_default",
                                   "insert_sort_reverse", "around_a_break", "default_object_of_staticmethod"])
def test_more_writes(which):
    def make():
        acc = []

        class H:
            n = 0
        h = H()
        if which == "attr_via_type":
            class A:
                hh = h
            a = A()
            return (lambda x: (setattr(type(a).hh, "n", type(a).hh.n + 1), x + 1)[1]), lambda: h.n
        if which == "list_in_tuple_via_type":
            class A:
                reg = (acc,)
            a = A()
            return (lambda x: (type(a).reg[0].append(1), x + 1)[1]), lambda: acc
        if which == "setdefault_on_default":
            d0 = {}

            class A:
                def g(self, x, d=d0):
                    d.setdefault("k", []).append(1)
                    return x + 1
            a = A()
            return (lambda x: a.g(x)), lambda: d0
        if which == "insert_sort_reverse":
            class A:
                def g(self, x):
                    acc.insert(0, len(acc))
                    acc.sort()
                    acc.reverse()
                    return x + 1
            a = A()
            return (lambda x: a.g(x)), lambda: acc
        if which == "around_a_break":
            class A:
                def g(self, x):
                    acc.append(1)
                    print("", end="")
                    acc.append(2)
                    return x + 1
            a = A()
            return (lambda x: a.g(x)), lambda: acc

        class A:
            @staticmethod
            def g(x, hh=h):
                hh.n += 1
                return x + 1
        a = A()
        return (lambda x: a.g(x)), lambda: h.n
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eager, compiled = _eager_vs_compiled(make)
    assert compiled == eager


# ---- every way of writing a container, through the compiled frame's own closure and
# through a method's ----

IN_PLACE = {
    "list.append(l, 1)": ("[0, 1, 2]", "list.append(state, 1)"),
    "l.__setitem__": ("[0, 1, 2]", "state.__setitem__(0, state[0] + 1)"),
    "slice write": ("[0, 1, 2]", "state[0:1] = [state[0] + 5]"),
    "del slice": ("[0, 1, 2, 3, 4, 5, 6]", "del state[0:1]"),
    "del item": ("[0, 1, 2, 3, 4, 5, 6]", "del state[0]"),
    "dict |=": ("{}", "state |= {len(state): 1}"),
    "dict del": ("{0: 1, 1: 2, 2: 3}", "del state[len(state) - 1]"),
    "operator.setitem": ("[0, 1, 2]", "operator.setitem(state, 0, state[0] + 1)"),
    "__iadd__": ("[0]", "state.__iadd__([1])"),
    "+=": ("[0]", "state += [1]"),
    "*=": ("[0]", "state *= 2"),
    "clear": ("[0]", "state.clear()"),
    "remove": ("[0, 0, 0, 0]", "state.remove(0)"),
    "pop": ("[0, 1, 2, 3]", "state.pop()"),
    "dict.popitem": ("{0: 1, 1: 2, 2: 3, 4: 4}", "state.popitem()"),
    "dict.clear": ("{0: 1}", "state.clear()"),
    "set.discard": ("{0, 1, 2, 3}", "state.discard(len(state) - 1)"),
    "deque append": ("collections.deque()", "state.append(1)"),
    "OrderedDict setitem": ("collections.OrderedDict()", "state[len(state)] = 1"),
    "defaultdict": ("collections.defaultdict(list)", "state['k'].append(1)"),
    "Counter": ("collections.Counter()", "state['k'] += 1"),
}


def _in_place_program(how, stmt, init):
    if how == "frame":
        return ("def make():\n    state = %s\n    def f(x):\n        nonlocal state\n        %s\n"
                "        return x + 1\n    return f, lambda: state\n" % (init, stmt))
    return ("def make():\n    state = %s\n    class A:\n        def g(self, x):\n            nonlocal state\n"
            "            %s\n            return x + 1\n    a = A()\n    return (lambda x: a.g(x)), lambda: state\n"
            % (init, stmt))


def _eager_vs_compiled_src(src, calls=3):
    import collections
    import copy
    import operator
    out = []
    for compiled in (False, True):
        shapejit.reset()
        ns = {"operator": operator, "collections": collections}
        exec(compile(src, "<in-place>", "exec"), ns)
        f, state = ns["make"]()
        if compiled:
            f = shapejit.compile(f)
        for _ in range(calls):
            try:
                f(torch.randn(3))
            except Exception as e:
                out.append(type(e).__name__)
        out.append(copy.deepcopy(state()))
    return out[: len(out) // 2], out[len(out) // 2:]


@pytest.mark.parametrize("how", ["frame", "method"])
@pytest.mark.parametrize("name", list(IN_PLACE))
def test_in_place_writes(name, how):
    init, stmt = IN_PLACE[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eager, compiled = _eager_vs_compiled_src(_in_place_program(how, stmt, init))
    assert compiled == eager


@pytest.mark.parametrize("how", ["frame", "method"])
def test_set_ior_on_closure_cell(how):
    """The set's guard compares with a copy of the set as captured: compared with the set
    itself it always passed, and the continuation replayed the first call's write."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eager, compiled = _eager_vs_compiled_src(_in_place_program(how, "state |= {len(state)}", "set()"))
    assert compiled == eager


def test_set_changed_outside_between_calls_is_seen():
    s = {1}
    f = shapejit.compile(lambda x: x + len(s))
    assert float(f(torch.zeros(1))[0]) == 1.0
    s.add(2)
    assert float(f(torch.zeros(1))[0]) == 2.0
