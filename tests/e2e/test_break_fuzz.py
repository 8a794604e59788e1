"""Differential fuzz test of graph breaks that split frames.

Hypothesis generates small random Python programs (N_PROGRAMS of them, derandomized;
SHAPEJIT_BREAK_FUZZ_COUNT sets how many: 150 by default, `make fuzz-breaks` runs 2,000)
over the arguments ``x``, ``y`` and a local ``z`` -- torch tensors, or numpy arrays for
about one program in five, float32 or float64: straight-line array ops with graph breaks
mixed in at random places --

  * ``print(..., file=buf)`` to an ``io.StringIO`` passed as an argument, or to the
    module global ``OUT`` (replaced by a fresh buffer before every call);
  * ints from an unknown C function (``zlib.crc32``) mixed into arrays, either kept in a
    local or used in the middle of an expression (the break happens with values on the
    stack);
  * ``.item()`` read into a Python float, then used in arithmetic or in a Python ``if``;
  * a Python float ``s`` that accumulates such values, lives across every break and is
    part of the result;
  * branches on an array's value (``if x.sum() > 0:``), with ops on both sides and
    sometimes an early ``return``, and conditional expressions on an array's value in
    the middle of an expression;
  * ``for i in range(k)`` loops (k <= 3) holding ops and breaks, and sometimes
    ``if i == j: break`` or ``continue``;
  * calls of helper functions of the same module whose bodies hold breaks too, as a
    statement or in the middle of an expression;
  * augmented assignments (``x += y * 0.5``) that mutate arrays in place, and plain
    assignments that alias one variable to another (so in-place ops show through both).

Each program is rendered to source, written to a real file (so tracebacks show its
lines) and executed into a fresh namespace. Its ``f`` runs eagerly, then through
``shapejit.compile`` (after ``shapejit.reset()``), twice: the second time with fresh
random inputs of the same shape and dtype, eager running on those inputs too. Every
compiled call must give eager's results (rtol=1e-5, atol=1e-6; same types and dtypes),
leave its inputs as eager leaves them, return the same objects where eager returns an
input or one result twice, and print exactly what eager printed: each print runs once
per call, in order. A program that reaches a graph break whatever the inputs' values
must be counted in ``shapejit.stats()["graph_breaks"]``; one with no break anywhere
must be captured without a break.

A construct that finds a bug is switched off with its ENABLE_* flag below (with a
pointer to the report) rather than worked around in the generator.
"""
import hashlib
import io
import itertools
import os
import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import shapejit

N_PROGRAMS = int(os.environ.get("SHAPEJIT_BREAK_FUZZ_COUNT", "150"))
MAX_DEPTH = 2          # nesting of if / for blocks
SHAPES = [(4,), (3,), (2, 3)]
DTYPES = ["float32", "float64"]

# ---- the generated constructs -------------------------------------------------------
# Array ops; {t} is the variable assigned, {o} the other one. Values stay bounded enough
# (sin/cos/tanh/clamp keep pulling them back) for float32 to compare at rtol 1e-5.
TORCH_OPS = [
    "{t}.sin()",
    "{t}.cos()",
    "torch.tanh({t})",
    "torch.relu({t} - 0.3)",
    "{t} * 2 + {o}",
    "{t} * 0.5 - {o}",
    "{o}.sigmoid() * {t}",
    "{t}.abs() + 0.1",
    "torch.clamp({t}, -2.0, 2.0)",
    "{t} + {o}.mean()",
    "torch.where({t} > 0, {t}, {o})",
]
NUMPY_OPS = [
    "np.sin({t})",
    "np.cos({t})",
    "np.tanh({t})",
    "np.maximum({t} - 0.3, 0.0)",
    "{t} * 2 + {o}",
    "{t} * 0.5 - {o}",
    "np.abs({t}) + 0.1",
    "np.clip({t}, -2.0, 2.0)",
    "{t} + {o}.mean()",
    "np.where({t} > 0, {t}, {o})",
]
REDUCTIONS = ["sum", "mean", "max"]
VARS = ["x", "y", "z"]     # x, y: the arguments; z: a local (z = y * 0.5 on entry)

# Constructs that found a bug are switched off here, each with a pointer to its report.
ENABLE_INPLACE = True          # `x += y * 0.5` (mutates an input in place)
ENABLE_GLOBAL_PRINT = True     # print(..., file=OUT) with OUT a module global
ENABLE_ITEM_PY_BRANCH = True   # `if t > 0.0:` on a float read with .item()
ENABLE_EARLY_RETURN = True     # `return` inside a branch on an array's value
ENABLE_LOOP_BREAK = True       # `if i == j: break` in a for loop
ENABLE_LOOP_CONTINUE = True    # `if i == j: continue` in a for loop


# ---- strategies: a program is a list of statements (tuples) -------------------------
# ("op", target, op_index)                      target = OPS[op_index]
# ("inplace", target)                           target += other * 0.5
# ("alias", target)                             target = other (same object: in-place
#                                               ops on one then show through the other)
# ("print", where, shape_of)                    where: "arg" (buf) or "global" (OUT);
#                                               shape_of: None or a var whose shape is printed
# ("crc", target, key, inline)                  zlib.crc32(key) % 5 into target
# ("item", target, source, reduction, use)      use: "arith" or "branch"
# ("acc", source, reduction)                    s += source.reduction().item()
# ("acc_crc", key)                              s += zlib.crc32(key) % 5
# ("scale_s",)                                  s = s * 0.5 (no break)
# ("ternary", target, cond_var)                 target = t * 0.5 + (t.cos() if c.sum() > 0 else o)
# ("if", var, then_block, else_block, ret)      if var.sum() > 0: ... else: ...
# ("for", k, pre_block, exit, post_block)       exit: None, or ("break" or "continue", j)
#                                               with 0 <= j < k: `if i == j: break` between
#                                               pre_block and post_block
# ("call", helper_index, target, inline)        target = h<i>(target, other, buf), or
#                                               inside target * 0.5 + h<i>(...) when inline
def _op(lib):
    ops = TORCH_OPS if lib == "torch" else NUMPY_OPS
    return st.tuples(st.just("op"), st.sampled_from(VARS), st.integers(0, len(ops) - 1))


def _break_stmt():
    prints = ["arg", "global"] if ENABLE_GLOBAL_PRINT else ["arg"]
    uses = ["arith", "branch"] if ENABLE_ITEM_PY_BRANCH else ["arith"]
    return st.one_of(
        st.tuples(st.just("print"), st.sampled_from(prints), st.sampled_from([None] + VARS)),
        st.tuples(st.just("crc"), st.sampled_from(VARS), st.sampled_from([b"a", b"shapejit", b"fuzz"]),
                  st.booleans()),
        st.tuples(st.just("item"), st.sampled_from(VARS), st.sampled_from(VARS),
                  st.sampled_from(REDUCTIONS), st.sampled_from(uses)),
        st.tuples(st.just("acc"), st.sampled_from(VARS), st.sampled_from(REDUCTIONS)),
        st.tuples(st.just("acc_crc"), st.sampled_from([b"s", b"acc"])),
        st.tuples(st.just("ternary"), st.sampled_from(VARS), st.sampled_from(VARS)),
    )


@st.composite
def _block(draw, lib, depth, n_helpers, lo=1, hi=3):
    return [draw(_statement(lib, depth, n_helpers)) for _ in range(draw(st.integers(lo, hi)))]


@st.composite
def _if_stmt(draw, lib, depth, n_helpers):
    ret = draw(st.booleans()) if ENABLE_EARLY_RETURN else False
    return ("if", draw(st.sampled_from(VARS)), draw(_block(lib, depth + 1, n_helpers)),
            draw(_block(lib, depth + 1, n_helpers)), ret)


@st.composite
def _for_stmt(draw, lib, depth, n_helpers):
    k = draw(st.integers(1, 3))
    exits = [None] + ["break"] * ENABLE_LOOP_BREAK + ["continue"] * ENABLE_LOOP_CONTINUE
    exit_kind = draw(st.sampled_from(exits))
    exit = (exit_kind, draw(st.integers(0, k - 1))) if exit_kind else None
    pre = draw(_block(lib, depth + 1, n_helpers))
    post = draw(_block(lib, depth + 1, n_helpers, lo=0, hi=2)) if exit else []
    return ("for", k, pre, exit, post)


def _statement(lib, depth, n_helpers):
    choices = [_op(lib), _op(lib), _break_stmt(), st.just(("scale_s",)),
               st.tuples(st.just("alias"), st.sampled_from(VARS))]
    if ENABLE_INPLACE:
        choices.append(st.tuples(st.just("inplace"), st.sampled_from(VARS)))
    if depth < MAX_DEPTH:
        choices += [_if_stmt(lib, depth, n_helpers), _for_stmt(lib, depth, n_helpers)]
    if n_helpers:
        choices.append(st.tuples(st.just("call"), st.integers(0, n_helpers - 1), st.sampled_from(VARS),
                                 st.booleans()))
    return st.one_of(choices)


@st.composite
def programs(draw):
    lib = draw(st.integers(0, 4).map(lambda n: "numpy" if n == 4 else "torch"))  # ~20% numpy
    n_helpers = draw(st.integers(0, 2))
    # helper i may call helpers < i only, so there is no recursion
    helpers = [draw(_block(lib, 1, i, lo=1, hi=3)) for i in range(n_helpers)]
    body = draw(_block(lib, 0, n_helpers, lo=1, hi=6))
    shape = draw(st.sampled_from(SHAPES))
    dtype = draw(st.sampled_from(DTYPES))
    return lib, helpers, body, shape, dtype


# ---- which programs must break ------------------------------------------------------
BREAKS = ("print", "crc", "item", "acc", "acc_crc", "ternary", "if")   # each one always breaks


def breaks_surely(block, helpers):
    """True when running the block reaches a graph break whatever the inputs' values."""
    for s in block:
        kind = s[0]
        if kind in BREAKS:
            return True   # a branch on an array's value breaks whichever way it goes
        if kind == "for":
            _, k, pre, exit, post = s
            if breaks_surely(pre, helpers):
                return True   # k >= 1: the first iteration runs pre
            # post runs in some iteration: before the break at j, or in one i != j
            post_runs = exit is None or (exit[1] >= 1 if exit[0] == "break" else k >= 2)
            if post_runs and breaks_surely(post, helpers):
                return True
        if kind == "call" and breaks_surely(helpers[s[1]], helpers):
            return True
    return False


def breaks_never(block, helpers):
    """True when nothing in the block (helpers included) can break."""
    for s in block:
        kind = s[0]
        if kind in BREAKS:
            return False
        if kind == "for" and not (breaks_never(s[2], helpers) and breaks_never(s[4], helpers)):
            return False
        if kind == "call" and not breaks_never(helpers[s[1]], helpers):
            return False
    return True


# ---- rendering to source ------------------------------------------------------------
def _other(v):
    return {"x": "y", "y": "z", "z": "x"}[v]


class _Renderer:
    def __init__(self, lib):
        self.lib = lib
        self.ops = TORCH_OPS if lib == "torch" else NUMPY_OPS
        self.counter = itertools.count()
        self.lines = []

    def emit(self, indent, text):
        self.lines.append("    " * indent + text)

    def block(self, block, indent, ret, loop_var):
        if not block:
            self.emit(indent, "pass")
        for s in block:
            self.statement(s, indent, ret, loop_var)

    def statement(self, s, indent, ret, loop_var):
        kind, n = s[0], next(self.counter)
        if kind == "op":
            _, t, i = s
            self.emit(indent, f"{t} = " + self.ops[i].format(t=t, o=_other(t)))
        elif kind == "alias":
            self.emit(indent, f"{s[1]} = {_other(s[1])}")
        elif kind == "inplace":
            t = s[1]
            self.emit(indent, f"{t} += {_other(t)} * 0.5")
        elif kind == "print":
            _, where, shape_of = s
            dest = "buf" if where == "arg" else "OUT"
            extra = f", {loop_var}" if loop_var else ""
            extra += f", tuple({shape_of}.shape)" if shape_of else ""
            self.emit(indent, f'print("p{n}"{extra}, file={dest})')
        elif kind == "crc":
            _, t, key, inline = s
            if inline:
                self.emit(indent, f"{t} = ({t} + 1) * (zlib.crc32({key!r}) % 5 + 1) * 0.25")
            else:
                self.emit(indent, f"c{n} = zlib.crc32({key!r}) % 5")
                self.emit(indent, f"{t} = {t} * 0.5 + c{n}")
        elif kind == "item":
            _, t, src, red, use = s
            self.emit(indent, f"v{n} = {src}.{red}().item()")
            if use == "arith":
                self.emit(indent, f"{t} = {t} + v{n} * 0.1")
            else:
                self.emit(indent, f"if v{n} > 0.0:")
                self.emit(indent + 1, f"{t} = {t} - v{n} * 0.1")
                self.emit(indent, "else:")
                self.emit(indent + 1, f"{t} = {t} * 0.5")
        elif kind == "acc":
            _, src, red = s
            self.emit(indent, f"s = s + {src}.{red}().item()")
        elif kind == "acc_crc":
            self.emit(indent, f"s = s + zlib.crc32({s[1]!r}) % 5")
        elif kind == "scale_s":
            self.emit(indent, "s = s * 0.5")
        elif kind == "ternary":
            _, t, c = s
            cos = f"{t}.cos()" if self.lib == "torch" else f"np.cos({t})"
            self.emit(indent, f"{t} = {t} * 0.5 + ({cos} if {c}.sum() > 0 else {_other(t)})")
        elif kind == "if":
            _, v, then, other, early = s
            self.emit(indent, f"if {v}.sum() > 0:")
            self.block(then, indent + 1, ret, loop_var)
            if early:
                self.emit(indent + 1, ret)
            self.emit(indent, "else:")
            self.block(other, indent + 1, ret, loop_var)
        elif kind == "for":
            _, k, pre, exit, post = s
            i = f"i{n}"
            self.emit(indent, f"for {i} in range({k}):")
            self.block(pre, indent + 1, ret, i)
            self.emit(indent + 1, f"x = x + {i} * 0.25")
            if exit is not None:
                self.emit(indent + 1, f"if {i} == {exit[1]}:")
                self.emit(indent + 2, exit[0])
                for p in post:
                    self.statement(p, indent + 1, ret, i)
        elif kind == "call":
            _, h, t, inline = s
            call = f"h{h}({t}, {_other(t)}, buf)"
            self.emit(indent, f"{t} = {t} * 0.5 + {call}" if inline else f"{t} = {call}")
        else:
            raise AssertionError(kind)


PROLOGUE = ["s = 0.0", "z = y * 0.5"]
HELPER_RETURN = "return x + s * 0.01"
MAIN_RETURN = "return x, y + s * 0.01, z"


def render(lib, helpers, body):
    r = _Renderer(lib)
    r.emit(0, "import zlib")
    r.emit(0, "import numpy as np" if lib == "numpy" else "import torch")
    r.emit(0, "")
    r.emit(0, "OUT = None  # replaced by a fresh io.StringIO before every call")
    for i, hb in enumerate(helpers):
        r.emit(0, "")
        r.emit(0, "")
        r.emit(0, f"def h{i}(x, y, buf):")
        for line in PROLOGUE:
            r.emit(1, line)
        r.block(hb, 1, HELPER_RETURN, None)
        r.emit(1, HELPER_RETURN)
    r.emit(0, "")
    r.emit(0, "")
    r.emit(0, "def f(x, y, buf):")
    for line in PROLOGUE:
        r.emit(1, line)
    r.block(body, 1, MAIN_RETURN, None)
    r.emit(1, MAIN_RETURN)
    return "\n".join(r.lines) + "\n"


# ---- running ------------------------------------------------------------------------
def _inputs(lib, shape, dtype, rng):
    x, y = (rng.standard_normal(shape).astype(dtype) for _ in range(2))
    if lib == "torch":
        return torch.from_numpy(x), torch.from_numpy(y)
    return x, y


def _copy(v):
    return v.clone() if isinstance(v, torch.Tensor) else v.copy()


def _identities(result, args):
    """Which arrays of the result are the same object as an input or an earlier one."""
    seen = list(args)
    out = []
    for v in result:
        out.append(next((i for i, w in enumerate(seen) if w is v), None))
        seen.append(v)
    return out


def _call(ns, fn, x, y):
    """Calls fn on copies of x, y; returns (result, inputs after the call, printed,
    identities of the results)."""
    buf, ns["OUT"] = io.StringIO(), io.StringIO()
    args = (_copy(x), _copy(y))
    result = fn(*args, buf)
    return result, args, (buf.getvalue(), ns["OUT"].getvalue()), _identities(result, args)


def _assert_close(actual, expected, what):
    assert type(actual) is type(expected), f"{what}: {type(actual).__name__} != {type(expected).__name__}"
    if isinstance(expected, tuple):
        assert len(actual) == len(expected), what
        for i, (a, e) in enumerate(zip(actual, expected)):
            _assert_close(a, e, f"{what}[{i}]")
    elif isinstance(expected, torch.Tensor):
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6, msg=lambda m: f"{what}: {m}")
    else:
        assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6, err_msg=what)


@pytest.fixture(scope="module")
def src_dir(tmp_path_factory):
    yield tmp_path_factory.mktemp("break_fuzz")
    shapejit.reset()   # leave no compiled state to the next test module


@settings(max_examples=N_PROGRAMS, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(prog=programs())
def test_break_fuzz(src_dir, prog):
    lib, helpers, body, shape, dtype = prog
    src = render(lib, helpers, body)
    # named by content: a replay while shrinking gives the same file (and error origin)
    path = src_dir / f"fuzz_{hashlib.sha1(src.encode()).hexdigest()[:12]}.py"
    path.write_text(src)
    note(f"{path}:\n{src}")
    ns = {"__name__": path.stem, "__file__": str(path)}
    exec(compile(src, str(path), "exec"), ns)
    fn = ns["f"]

    rng = np.random.default_rng(len(src))
    shapejit.reset()
    compiled = shapejit.compile(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # hints about .item() and the like
        for call in range(2):
            x, y = _inputs(lib, shape, dtype, rng)  # fresh values, same shape, every call
            e_res, e_args, e_out, e_ids = _call(ns, fn, x, y)
            c_res, c_args, c_out, c_ids = _call(ns, compiled, x, y)
            _assert_close(c_res, e_res, f"call {call}: result")
            _assert_close(c_args, e_args, f"call {call}: inputs after the call")
            assert c_out == e_out, f"call {call}: printed {c_out!r}, eager printed {e_out!r}"
            assert c_ids == e_ids, f"call {call}: results are inputs or each other: {c_ids}, eager {e_ids}"

    stats = shapejit.stats()
    note(f"stats: {stats}")
    assert stats["frames"] >= 1, f"shapejit never compiled {path}: {stats}"
    if breaks_surely(body, helpers):
        assert stats["graph_breaks"] >= 1, stats
    if breaks_never(body, helpers):
        assert stats["graph_breaks"] == 0, stats
