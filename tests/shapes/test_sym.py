"""Symbolic integers of the shape environment (shapes/sym.c), through the test
harness _C._SymEnv: printing of every form, hash-consing, the simplifications, Python's
floor division and modulo, value ranges (sound, saturating), static truth, narrowing,
evaluation with hints and with assignments, and the errors. Property tests compare the
evaluation of random expression trees with Python's ints."""
import operator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shapejit import _C

SRC = "L['x'].size()[0]"


@pytest.fixture
def env():
    return _C._SymEnv()


# ------------------------------------------------------------------ printing ----

def test_print_every_form(env):
    s0, s1 = env.symbol(10), env.symbol(20)
    u0 = env.unbacked()
    cases = [
        (s0, "s0"), (u0, "u0"), (env.const(5), "5"), (env.const(-5), "-5"),
        (s0 + 1, "s0 + 1"), (s0 - 1, "s0 - 1"), (2 * s0, "2*s0"), (-s0, "-s0"),
        (-2 * s0, "-2*s0"), (s0 * s1, "s0*s1"), (s0 - s1, "s0 - s1"), (s1 - s0, "-s0 + s1"),
        (1 - s0, "1 - s0"), (2 * s0 - 3 * s1 + 4, "2*s0 - 3*s1 + 4"),
        (-s0 - s1 - 4, "-s0 - s1 - 4"), (s0 * s0, "s0**2"), (s0 * s0 * s1, "s0**2*s1"),
        (-(s0 * s1), "-s0*s1"), ((s0 + 1) * s1, "s1*(s0 + 1)"),
        (s0 // 2, "(s0//2)"), ((s0 + 1) // 2, "((s0 + 1)//2)"), ((2 * s0) // 3, "((2*s0)//3)"),
        (s0 // s1, "(s0//s1)"), (s0 // -2, "(s0//(-2))"), ((s0 // 2) + 1, "(s0//2) + 1"),
        (s0 % 2, "Mod(s0, 2)"), ((s0 + 1) % 3, "Mod(s0 + 1, 3)"), (s0 % s1, "Mod(s0, s1)"),
        (env.min(s0, s1), "Min(s0, s1)"), (env.max(s0, s1), "Max(s0, s1)"),
        (env.max(s0, s1, 7), "Max(7, s0, s1)"),
        (s0 == 10, "Eq(s0, 10)"), (10 == s0, "Eq(s0, 10)"), (s1 == s0, "Eq(s0, s1)"),
        (s0 != 10, "Ne(s0, 10)"), (s0 < 10, "s0 < 10"), (s0 <= 30, "s0 <= 30"),
        (s0 > 10, "10 < s0"), (s0 >= 3, "3 <= s0"), (u0 >= 2, "2 <= u0"),
        (s0 + s1 <= 40, "s0 + s1 <= 40"), (s0 < s1, "s0 < s1"),
        (s0 >= 2, "True"), (s0 < 2, "False"), (env.true(), "True"), (env.false(), "False"),
    ]
    for h, text in cases:
        assert str(h) == text
        assert repr(h) == text


def test_print_with_source_names(env):
    s0, s1 = env.symbol(10, lo=0), env.symbol(3)
    names = {s0: SRC, s1: "L['y'].size()[1]"}
    assert (s0 >= 2).print_with(names) == "2 <= " + SRC
    assert (s0 == 10).print_with(names) == "Eq(%s, 10)" % SRC
    assert (s0 <= 30).print_with(names) == SRC + " <= 30"
    assert (2 * s0 + s1).print_with(names) == "2*%s + L['y'].size()[1]" % SRC
    assert (s0 // 2).print_with({s0: SRC}) == "(%s//2)" % SRC
    assert (s0 + s1).print_with({s0: SRC}) == SRC + " + s1"   # unnamed: default name
    with pytest.raises(TypeError):
        s0.print_with({s0 + 1: "x"})
    with pytest.raises(TypeError):
        s0.print_with({s0: 3})


def test_range_str(env):
    s0 = env.symbol(10)
    assert s0.range_str() == "[2, int_oo]"
    assert env.unbacked().range_str() == "[-int_oo, int_oo]"
    env.narrow(s0, 33 - 23, 10)
    assert s0.range_str() == "[10, 10]"


# -------------------------------------------------------------- hash-consing ----

def test_hash_consing(env):
    s0, s1 = env.symbol(10), env.symbol(20)
    assert (s0 + 1) is (s0 + 1)
    assert ((s0 + 1) + s1) is (s1 + (1 + s0))
    assert (s0 * s1 * 3) is (3 * (s1 * s0))
    assert ((s0 - s1) + s1) is s0
    assert env.max(s0, s1) is env.max(s1, s0)
    assert env.max(env.max(s0, s1), s0) is env.max(s0, s1)
    assert (s0 == s1) is (s1 == s0)
    assert (s0 > 10) is (10 < s0)
    assert (s0 >= 3) is (3 <= s0)
    assert (s0 % 3) is ((s0 + 3) % 3)
    assert env.const(7) is env.const(3) + 4
    before = env.nodes
    r = ((s0 + 1) * s1 // 2 + env.min(s0, s1)) <= 7
    grown = env.nodes
    assert grown > before
    for _ in range(3):
        assert (((s0 + 1) * s1 // 2 + env.min(s0, s1)) <= 7) is r
    assert env.nodes == grown   # built once, then found


def test_symbols_are_fresh(env):
    a, b = env.symbol(5), env.symbol(5)
    assert a is not b and str(a) == "s0" and str(b) == "s1"
    assert str(env.unbacked()) == "u0" and str(env.unbacked()) == "u1"
    assert str(env.symbol(7)) == "s2"


# ----------------------------------------------------------- simplification ----

def test_linear_terms(env):
    s0, s1 = env.symbol(10), env.symbol(20)
    assert str(s0 + s0) == "2*s0"
    assert (2 * s0 - s0) is s0
    assert str(s0 - s0) == "0"
    assert (s0 * 1) is s0 and (s0 + 0) is s0 and (1 * s0) is s0
    assert str(s0 * 0) == "0"
    assert str(2 * (s0 + 1)) == "2*s0 + 2"
    assert str(3 * s0 + 2 * s1 - 3 * s0) == "2*s1"
    assert str(s0 + 1 - 1) == "s0"
    assert str((s0 + 1) * s1 - s1 * (1 + s0)) == "0"


def test_division_rules(env):
    s0, s1 = env.symbol(10), env.symbol(20)
    assert (s0 // 1) is s0
    assert str(s0 % 1) == "0"
    assert ((s0 * 3) // 3) is s0
    assert str((s0 * 6) // 3) == "2*s0"
    assert str(s0 * 3 % 3) == "0"
    assert str((s0 * s1 * 4) % 2) == "0"
    assert str((2 * s0 + s1) // 2) == "s0 + (s1//2)"
    assert str((s0 + 4) // 2) == "(s0//2) + 2"
    assert str((s0 + 5) // 2) == "((s0 + 5)//2)"       # the constant stays whole
    assert str((s0 + 5) % 2) == "Mod(s0 + 1, 2)"
    assert str((s0 // 2) // 3) == "(s0//6)"
    assert str(s0 // s0) == "1" and str(s0 % s0) == "0"
    assert str(env.const(0) // s0) == "0"
    assert (s0 // -1) is -s0
    small = env.unbacked(lo=0, hi=7)
    assert (small % 8) is small                         # one multiple of 8 under the range
    assert str(small // 8) == "0"
    mid = env.unbacked(lo=8, hi=15)
    assert str(mid % 8) == "u1 - 8"
    assert str(mid // 8) == "1"


def test_constant_folding_python_semantics(env):
    c = env.const
    for a in (-7, -6, -1, 0, 1, 6, 7):
        for b in (-3, -2, -1, 1, 2, 3):
            assert str(c(a) // c(b)) == str(a // b)
            assert str(c(a) % c(b)) == str(a % b)
            assert str(c(a) // b) == str(a // b)
            assert str(a % c(b)) == str(a % b)
    assert str(c(3) * c(-4) + 2) == "-10"
    assert str(env.min(3, 5)) == "3" and str(env.max(3, c(5), -1)) == "5"


def test_symbolic_python_semantics(env):
    u = env.unbacked()
    for v in (-7, -6, -1, 0, 1, 6, 7):
        for d in (-3, -2, 2, 3):
            assert (u // d).eval({u: v}) == v // d
            assert (u % d).eval({u: v}) == v % d
            assert (v // u).eval({u: d}) == v // d
            assert (v % u).eval({u: d}) == v % d


def test_min_max(env):
    s0, s1 = env.symbol(10), env.symbol(20)
    assert str(env.min(s0, 1)) == "1"          # s0 >= 2
    assert env.max(s0, 1) is s0
    assert env.max(s0, 2) is s0
    assert str(env.max(s0, 3)) == "Max(3, s0)"
    assert env.max(s0, s0 + 1) is s0 + 1
    assert env.min(s0, s0 + 1) is s0
    assert env.min(s0, s0) is s0
    assert env.max(s0) is s0
    assert str(env.min(s0, s1, 4, 9)) == "Min(4, s0, s1)"
    assert env.min(env.min(s0, 4), s1) is env.min(s1, s0, 4)
    assert str(env.max(2 * s0, s0 + s1)) == "Max(s0 + s1, 2*s0)"   # Add sorts before Mul


def test_relations_fold(env):
    s0, s1 = env.symbol(10), env.symbol(20)
    c = env.const
    assert str(c(3) < 5) == "True" and str(c(5) == c(3)) == "False"
    assert str(s0 >= 2) == "True" and str(s0 > 1) == "True" and str(s0 != 1) == "True"
    assert str(s0 < 2) == "False" and str(s0 == 0) == "False"
    assert str(s0 < s0 + 1) == "True" and str(s0 == s0) == "True" and str(s0 != s0) == "False"
    assert str(s0 + s1 >= 4) == "True"
    assert str(s0 + 1 <= 31) == "s0 <= 30"
    assert str(31 >= s0 + 1) == "s0 <= 30"
    assert str(s0 + 2 >= 5) == "3 <= s0"
    assert str(s0 + 1 == 11) == "Eq(s0, 10)"
    assert str(s0 + 1 <= s1 + 1) == "s0 + 1 <= s1 + 1"


def test_booleans_are_not_integers(env):
    s0 = env.symbol(10)
    r = s0 < 5
    for op in (operator.add, operator.mul, operator.floordiv, operator.mod, operator.lt):
        with pytest.raises(TypeError):
            op(r, s0)
    with pytest.raises(TypeError):
        env.max(r, s0)
    with pytest.raises(TypeError):
        bool(r)                                # undecided
    with pytest.raises(TypeError):
        bool(s0)
    assert bool(s0 >= 2) is True


def test_mixing_envs_refused(env):
    other = _C._SymEnv()
    with pytest.raises(TypeError):
        env.symbol(3) + other.symbol(3)


# ---------------------------------------------------------------- ranges ----

def test_ranges(env):
    s0, s1 = env.symbol(10), env.symbol(20, lo=2, hi=30)
    u = env.unbacked()
    assert s0.range() == (2, None) and u.range() == (None, None)
    assert (s0 + s1).range() == (4, None)
    assert (s1 - s0).range() == (None, 28)
    assert (s1 * -3).range() == (-90, -6)
    assert (s1 // 4).range() == (0, 7)
    assert (s1 % 4).range() == (0, 3)
    assert (s0 % s1).range() == (0, 29)
    assert (s0 // s1).range() == (0, None)
    assert env.min(s0, s1).range() == (2, 30)
    assert env.max(s0, s1).range() == (2, None)
    assert (u % 5).range() == (0, 4) and (u % -5).range() == (-4, 0)
    assert (s1 < 31).range() == (1, 1) and (s1 < 10).range() == (0, 1)


def test_overflow_saturates(env):
    big = env.symbol(2**40, lo=2, hi=2**40)
    assert (big * big).range() == (4, None)
    assert (-big * big).range() == (None, -4)
    assert (big * big * big + big).range() == (10, None)
    assert (big * big - big * big * 3).range() == (None, -8)    # like terms: -2*s0**2
    assert (big * big - big * big * big).range() == (None, None)
    huge = env.unbacked(lo=2**62, hi=2**62 + 5)
    lo, hi = (huge + huge).range()          # no int64 value is there: still a valid range
    assert hi is None and lo <= 2**63
    with pytest.raises(OverflowError):
        env.const(2**62) * 4
    with pytest.raises(OverflowError):
        env.const(2**63)
    with pytest.raises(OverflowError):
        env.const(-(2**63))                  # INT64_MIN is never a value
    with pytest.raises(OverflowError):
        (big * big * big).hint()
    with pytest.raises(OverflowError):
        (big * big).eval({big: 2**40})


def test_narrow_and_static_truth(env):
    s0 = env.symbol(33)
    r, e = s0 <= 40, s0 == 33
    assert r.truth() is None and e.truth() is None and (s0 >= 2).truth() is True
    assert env.narrow(s0, 10, 40) is True
    assert s0.range() == (10, 40) and r.truth() is True and e.truth() is None
    assert (s0 // 50).range() == (0, 0)
    assert env.narrow(s0, 0, 100) is False            # no narrower: unchanged
    assert env.narrow(s0, 33, 33) is True
    assert s0.range_str() == "[33, 33]" and e.truth() is True and (s0 != 33).truth() is False
    assert str(s0 + 1) == "s0 + 1"                     # nodes built earlier stay valid
    assert str(s0 * 2 == 66) == "True"                 # built now: decided
    with pytest.raises(ValueError):
        env.narrow(s0, 40, 50)                         # empty
    u = env.unbacked()
    with pytest.raises(ValueError):
        env.narrow(env.symbol(5), 6, 9)                # leaves out the hint
    with pytest.raises(TypeError):
        env.narrow(u + 1, 0, 3)
    assert env.narrow(u, lo=0) is True and u.range() == (0, None)
    assert (u >= 0).truth() is True and str(u >= 0) == "True"


def test_static_truth(env):
    s0, s1 = env.symbol(10), env.symbol(20)
    u = env.unbacked(lo=-3, hi=3)
    assert (s0 < s1).truth() is None
    assert (s0 + s1).truth() is None                   # not a relation
    assert (u < 4).eval({u: 0}) is True
    assert str(u < 4) == "True" and str(u * u <= 9) == "True"
    assert (u * u <= 8).truth() is None
    assert (env.max(s0, 3) >= 3).truth() is True
    assert (env.min(s0, 3) <= 3).truth() is True


# ------------------------------------------------------------- evaluation ----

def test_eval_hint_and_with(env):
    s0, s1 = env.symbol(10), env.symbol(4)
    e = (s0 * s1 + 3) // 2 - env.max(s0, s1) % 3
    assert e.hint() == (10 * 4 + 3) // 2 - max(10, 4) % 3
    assert e.eval({s0: 7, s1: 9}) == (7 * 9 + 3) // 2 - max(7, 9) % 3
    assert (s0 < s1).hint() is False and (s0 < s1).eval({s0: 2, s1: 3}) is True
    with pytest.raises(ValueError, match="s1"):
        e.eval({s0: 7})
    with pytest.raises(TypeError):
        e.eval({s0 + 1: 7})


def test_unbacked_hint_is_a_clear_error(env):
    s0, u0 = env.symbol(10), env.unbacked()
    with pytest.raises(_C.DataDependentError, match=r"s0 \+ u0.*unbacked symbol u0.*no hint"):
        (s0 + u0).hint()
    assert issubclass(_C.DataDependentError, RuntimeError)
    assert (s0 + u0).eval({s0: 1, u0: -5}) == -4


def test_division_by_zero(env):
    s0, s1 = env.symbol(10), env.symbol(20)
    for f in (lambda: s0 // 0, lambda: s0 % 0, lambda: s0 // (s1 - s1), lambda: env.const(5) % 0,
              lambda: env.const(0) // env.const(0)):
        with pytest.raises(ZeroDivisionError):
            f()
    u = env.unbacked()
    with pytest.raises(ZeroDivisionError):
        (s0 // u).eval({s0: 5, u: 0})
    with pytest.raises(ZeroDivisionError):
        (s0 % (u + 1)).eval({s0: 5, u: -1})


# ------------------------------------------------------------ properties ----
# Symbols of every flavour, with the values the tests draw for them (inside their ranges).
SYMS = [  # (kind, lo, hi, draw_lo, draw_hi)
    ("backed", 2, None, 2, 30),
    ("backed", 2, 20, 2, 20),
    ("backed", 0, None, 0, 12),
    ("unbacked", None, None, -30, 30),
    ("unbacked", -5, 5, -5, 5),
    ("unbacked", 0, 3, 0, 3),
]
BINOPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv,
          "%": operator.mod, "min": min, "max": max}
RELS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
        ">": operator.gt, ">=": operator.ge}
COMMUTATIVE = {"+", "*", "min", "max"}

leaves = st.one_of(st.tuples(st.just("sym"), st.integers(0, len(SYMS) - 1)),
                   st.tuples(st.just("const"), st.integers(-8, 8)))
trees = st.recursive(leaves, lambda kids: st.tuples(st.sampled_from(sorted(BINOPS)), kids, kids),
                     max_leaves=8)
values = st.tuples(*[st.integers(lo, hi) for _, _, _, lo, hi in SYMS])
hints = st.tuples(*[st.integers(lo, hi) for _, _, _, lo, hi in SYMS])
PROPS = settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck))


def make_env(hint_values):
    env = _C._SymEnv()
    syms = [env.symbol(h, lo=lo, hi=hi) if kind == "backed" else env.unbacked(lo=lo, hi=hi)
            for (kind, lo, hi, _, _), h in zip(SYMS, hint_values)]
    return env, syms


def build(env, syms, t):
    if t[0] == "sym":
        return syms[t[1]]
    if t[0] == "const":
        return env.const(t[1])
    op, a, b = t
    x, y = build(env, syms, a), build(env, syms, b)
    return env.min(x, y) if op == "min" else env.max(x, y) if op == "max" else BINOPS[op](x, y)


def py(t, vals):
    if t[0] == "sym":
        return vals[t[1]]
    if t[0] == "const":
        return t[1]
    return BINOPS[t[0]](py(t[1], vals), py(t[2], vals))


def mirror(t):
    """The same expression with the operands of commutative operations swapped."""
    if t[0] in ("sym", "const"):
        return t
    op, a, b = t
    return (op, mirror(b), mirror(a)) if op in COMMUTATIVE else (op, mirror(a), mirror(b))


def uses(t, kind):
    if t[0] == "sym":
        return SYMS[t[1]][0] == kind
    return t[0] != "const" and (uses(t[1], kind) or uses(t[2], kind))


def check_value(h, expected, vals, syms):
    """h evaluated at vals is expected (or division by zero when expected is None), and the
    value lies in h's range."""
    assignment = dict(zip(syms, vals))
    if expected is None:   # Python divides by zero; a simplification may have removed it
        try:
            h.eval(assignment)
        except ZeroDivisionError:
            pass
        return
    got = h.eval(assignment)
    assert got == expected, (str(h), vals)
    lo, hi = h.range()
    assert (lo is None or lo <= got) and (hi is None or got <= hi), (str(h), vals, (lo, hi))


def py_or_none(t, vals):
    try:
        return py(t, vals)
    except ZeroDivisionError:
        return None


@PROPS
@given(trees, values, hints)
def test_property_eval_matches_python(t, vals, hint_values):
    env, syms = make_env(hint_values)
    expected = py_or_none(t, vals)
    try:
        h = build(env, syms, t)
    except ZeroDivisionError:  # a divisor that is identically 0: Python divides by 0 too
        assert expected is None
        return
    check_value(h, expected, vals, syms)
    if not uses(t, "unbacked"):
        at_hints = py_or_none(t, hint_values)
        if at_hints is not None:
            assert h.hint() == at_hints


@PROPS
@given(trees, trees, st.sampled_from(sorted(RELS)), values, hints)
def test_property_relations(t1, t2, rel, vals, hint_values):
    env, syms = make_env(hint_values)
    e1, e2 = py_or_none(t1, vals), py_or_none(t2, vals)
    try:
        r = RELS[rel](build(env, syms, t1), build(env, syms, t2))
    except ZeroDivisionError:
        return
    if e1 is None or e2 is None:
        return
    expected = RELS[rel](e1, e2)
    assert r.eval(dict(zip(syms, vals))) is expected, (str(r), vals)
    truth = r.truth()
    assert truth is None or truth is expected, (str(r), vals)
    if r.kind != "Boolean":   # what the ranges decide folds at construction
        assert truth is None, str(r)


@PROPS
@given(trees, hints)
def test_property_canonical(t, hint_values):
    env, syms = make_env(hint_values)
    try:
        h = build(env, syms, t)
    except ZeroDivisionError:
        return
    assert build(env, syms, mirror(t)) is h
    assert (h + 0) is h and (h * 1) is h and (h - h) is env.const(0)
    assert ((h + syms[0]) - syms[0]) is h


bounds = st.one_of(st.none(), st.integers(-40, 40))


@st.composite
def ranged(draw):
    """(lo, hi, value): a symbol range, either end possibly infinite, and a value in it."""
    lo, hi = draw(bounds), draw(bounds)
    if lo is not None and hi is not None and lo > hi:
        lo, hi = hi, lo
    value = draw(st.integers(-60 if lo is None else lo, 60 if hi is None else hi))
    return lo, hi, value


@PROPS
@given(ranged(), ranged(), st.sampled_from(sorted(BINOPS)))
def test_property_interval_soundness(a, b, op):
    """Each operation's interval rule holds every value its operands' ranges allow."""
    env = _C._SymEnv()
    x, y = env.unbacked(lo=a[0], hi=a[1]), env.unbacked(lo=b[0], hi=b[1])
    tree = (op, ("sym", 0), ("sym", 1))
    expected = py_or_none(tree, (a[2], b[2]))
    try:
        h = build(env, [x, y], tree)
    except ZeroDivisionError:
        assert expected is None
        return
    check_value(h, expected, (a[2], b[2]), [x, y])


I64 = 2**63 - 1
big_ints = st.one_of(st.integers(-8, 8), st.integers(-2**32, 2**32), st.integers(-I64 + 1, I64 - 1),
                     st.sampled_from([2**62, -2**62, I64 - 1, -I64 + 1]))
big_leaves = st.one_of(st.tuples(st.just("sym"), st.integers(0, 2)), st.tuples(st.just("const"), big_ints))
big_trees = st.recursive(big_leaves, lambda kids: st.tuples(st.sampled_from(sorted(BINOPS)), kids, kids),
                         max_leaves=6)


@st.composite
def big_ranged(draw):
    lo, hi = sorted([draw(big_ints), draw(big_ints)])
    lo, hi = (None if draw(st.booleans()) else lo), (None if draw(st.booleans()) else hi)
    return lo, hi, draw(st.integers(-I64 + 1 if lo is None else lo, I64 - 1 if hi is None else hi))


@PROPS
@given(big_trees, st.tuples(big_ranged(), big_ranged(), big_ranged()))
def test_property_exact_near_int64(t, syms_spec):
    """Near the int64 edges an operation may raise OverflowError, but a value it returns is
    Python's exact one, inside the range (ranges bound exact integers)."""
    env = _C._SymEnv()
    syms = [env.unbacked(lo=lo, hi=hi) for lo, hi, _ in syms_spec]
    vals = [v for _, _, v in syms_spec]
    expected = py_or_none(t, vals)
    try:
        h = build(env, syms, t)
        got = h.eval(dict(zip(syms, vals)))
    except OverflowError:
        return
    except ZeroDivisionError:
        assert expected is None
        return
    if expected is not None:
        assert got == expected, (str(h), vals)
        lo, hi = h.range()
        assert (lo is None or lo <= got) and (hi is None or got <= hi), (str(h), vals, (lo, hi))
