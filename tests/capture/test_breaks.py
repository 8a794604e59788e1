"""Graph breaks that split frames: what users get.

Each test compares with eager and pins the graph and break counts. The corpus
(tests/support/corpus/t_breaks.py, np_breaks.py) holds the wider set of break cases; the random
programs are in test_break_fuzz.py."""
import contextlib
import dis
import inspect
import io
import os
import sys
import traceback
import zlib

import numpy as np
import pytest
import torch
from torch import nn

import shapejit
from shapejit import _C

HERE = os.path.abspath(__file__)


@pytest.fixture(autouse=True)
def _fresh():
    shapejit.reset()
    yield
    shapejit.set_logs()
    shapejit.reset()


def counts():
    s = shapejit.stats()
    return s["graphs"], s["graph_breaks"]


# ---- one break: two graphs, the print runs once per call --------------------------------

def test_print_between_two_graphs(capsys):
    def f(x):
        y = x.sin()
        print("hi")
        return y.cos()

    cf = shapejit.compile(f)
    x = torch.randn(5)
    torch.testing.assert_close(cf(x), f(x))
    assert capsys.readouterr().out == "hi\nhi\n"
    assert counts() == (2, 1)
    for _ in range(3):
        x = torch.randn(5)
        torch.testing.assert_close(cf(x), f(x))
    assert capsys.readouterr().out == "hi\n" * 6
    assert counts() == (2, 1)   # later calls hit both cache entries
    assert shapejit.stats()["recompiles"] == 0


def test_explain_reports_the_break():
    def f(x):
        y = x.sin()
        print("explained")
        return y.cos()

    with contextlib.redirect_stdout(io.StringIO()):
        ex = shapejit.explain(f)(torch.randn(3))
    assert (ex.graph_count, ex.graph_break_count) == (2, 1)
    (reason,) = ex.break_reasons
    assert "print()" in reason.reason
    assert any("test_breaks.py" in s and s.endswith(".f") for s in reason.user_stack)


# ---- breaks in inlined calls --------------------------------------------------------------

def _leaf(y):
    z = y * 3
    print("leaf")
    return z + 1


def _middle(y):
    return _leaf(y - 1) * 2


def test_break_two_calls_deep_names_every_user_frame(capsys):
    def f(x):
        a = x.exp()
        b = _middle(a)
        return b / 2 + a

    x = torch.randn(4)
    with contextlib.redirect_stdout(io.StringIO()):
        ex = shapejit.explain(f)(x)
    first = ex.break_reasons[0]
    frames = " | ".join(first.user_stack)
    for name in ("<locals>.f", " in _middle", " in _leaf"):
        assert name in frames, frames
    shapejit.reset()
    cf = shapejit.compile(f)
    torch.testing.assert_close(cf(x), f(x))
    torch.testing.assert_close(cf(x), f(x))
    assert capsys.readouterr().out == "leaf\n" * 4
    # f: exp, break at _middle; _middle: y - 1, break at _leaf; _leaf: y*3, print, z+1;
    # then the resumes of _middle (*2) and f (/2 + a)
    assert counts() == (6, 3)


class _Noisy(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        h = self.lin(x)
        if h.mean() > 100:      # data-dependent: never true here
            h = h * 0
        return torch.tanh(h)


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = nn.Linear(4, 4)
        self.noisy = _Noisy()

    def forward(self, x):
        return self.noisy(self.pre(x).relu()) + 1


def test_break_in_submodule_forward():
    torch.manual_seed(0)
    net = _Net().eval()
    cnet = shapejit.compile(net)
    x = torch.randn(2, 4)
    with torch.no_grad():
        torch.testing.assert_close(cnet(x), net(x))
        torch.testing.assert_close(cnet(x), net(x))
    graphs, breaks = counts()
    assert breaks == 2 and graphs == 4


# ---- branches on tensor values ------------------------------------------------------------

def test_tensor_branch_each_side_its_own_graph():
    def f(x):
        y = x * 2
        if y.sum() > 0:
            z = y + 1
        else:
            z = y - 1
        return z * 3

    cf = shapejit.compile(f)
    pos, neg = torch.ones(4), -torch.ones(4)
    torch.testing.assert_close(cf(pos), f(pos))
    assert counts() == (2, 1)
    torch.testing.assert_close(cf(neg), f(neg))
    assert counts() == (3, 1)   # the other side is a new resume entry, not a new break
    for x in (pos, neg, pos * 3, neg * 5):
        torch.testing.assert_close(cf(x), f(x))
    assert counts() == (3, 1)


def test_item_drives_python_control_flow():
    def f(x):
        m = x.abs().max().item()
        if m > 1.0:
            return x / m
        return x * 2

    cf = shapejit.compile(f)
    for x in (torch.tensor([0.5, -0.25]), torch.tensor([3.0, -4.0])):
        torch.testing.assert_close(cf(x), f(x))
    # one break (.item()); the resume function is specialised on the value it got
    assert counts() == (3, 1) and shapejit.stats()["recompiles"] == 1


def test_numpy_branch():
    def f(a):
        b = np.sin(a)
        if b.sum() > 0:
            return b * 2
        return -b

    cf = shapejit.compile(f)
    for a in (np.full(3, 0.5), np.full(3, -0.5)):
        np.testing.assert_allclose(cf(a), f(a))
    assert counts() == (3, 1)


# ---- loops -------------------------------------------------------------------------------

def test_break_in_for_range_runs_the_rest_of_the_loop_in_the_interpreter(capsys):
    def f(x, n):
        for i in range(n):
            x = x * 2 + i
            print("step", i)
        return x.sum()

    cf = shapejit.compile(f)
    x = torch.randn(3)
    torch.testing.assert_close(cf(x, 4), f(x, 4))
    assert capsys.readouterr().out == "".join(f"step {i}\n" for i in range(4)) * 2
    # f's graph (the first iteration up to the print) and its break; the resume function
    # continues the loop, which would come back to the break, so the interpreter runs it
    assert counts() == (1, 1) and shapejit.stats()["recompiles"] == 0
    torch.testing.assert_close(cf(x, 4), f(x, 4))
    assert capsys.readouterr().out == "".join(f"step {i}\n" for i in range(4)) * 2
    assert counts() == (1, 1)


def test_break_in_for_over_list_and_while():
    def g(xs):
        acc = xs[0] * 0
        for t in xs:
            acc = acc + t.cos()
            zlib.crc32(b"loop")
        return acc

    def w(x):
        i = 0
        while i < 3:
            x = x - 1
            if x.sum() > 100:
                break
            i += 1
        return x, i

    xs = [torch.randn(2) for _ in range(3)]
    torch.testing.assert_close(shapejit.compile(g)(xs), g(xs))
    x = torch.randn(2)
    out, n = shapejit.compile(w)(x)
    eo, en = w(x)
    torch.testing.assert_close(out, eo)
    assert n == en == 3
    # g and w: one graph and one break each; the loops go on in the interpreter
    assert counts() == (2, 2)
    # w's other way out of the branch (the `break`) leaves the loop: its resume function
    # is compiled (it holds no op, so no graph)
    x = torch.randn(2) + 1000
    out, n = shapejit.compile(w)(x)
    eo, en = w(x)
    torch.testing.assert_close(out, eo)
    assert n == en == 0


# ---- live values reach the code after the break -------------------------------------------

def test_live_values_cross_the_break_unchanged():
    scale = 1.5

    def f(x, items):
        k = 3
        tag = "t"
        made = [x.neg(), k]
        y = x * scale
        # the value of x.sin() sits on the evaluation stack while crc32 runs
        z = x.sin() + zlib.crc32(b"stack") % 5
        return y, z, k, tag, made, items, scale

    x, items = torch.randn(3), [1, 2]
    out = shapejit.compile(f)(x, items)
    exp = f(x, items)
    torch.testing.assert_close(out[0], exp[0])
    torch.testing.assert_close(out[1], exp[1])
    assert out[2:4] == exp[2:4] and out[6] == exp[6]
    torch.testing.assert_close(out[4][0], exp[4][0])
    assert out[4][1] == 3
    assert out[5] is items   # the caller's list itself, not a copy
    assert counts() == (2, 1)


def test_cells_and_closures_after_break():
    def outer(bias):
        def f(x):
            k = 2.0
            y = x * k + bias
            zlib.crc32(b"cell")
            g = lambda v: v * k - bias  # noqa: E731
            return g(y)
        return f

    f = outer(torch.ones(3))
    x = torch.randn(3)
    torch.testing.assert_close(shapejit.compile(f)(x), f(x))
    assert counts() == (2, 1)


def test_star_args_kwargs_and_keyword_only():
    def f(a, *rest, scale, **opts):
        s = a * scale
        print(len(rest), sorted(opts))
        return s + rest[0] * opts["w"]

    x, y = torch.randn(2), torch.randn(2)
    with contextlib.redirect_stdout(io.StringIO()):
        torch.testing.assert_close(shapejit.compile(f)(x, y, scale=2.0, w=3.0), f(x, y, scale=2.0, w=3.0))
    assert counts() == (2, 1)


# ---- logs, stats, fullgraph -----------------------------------------------------------------

def test_repeated_break_logged_once_then_suppressed(capfd):
    shapejit.set_logs(graph_breaks=True)

    def f(x):
        x = x + 1
        zlib.crc32(b"again")
        return x

    cf = shapejit.compile(f, dynamic=False)
    for n in (2, 3, 4):   # three compiles of f, each breaking at the same place
        cf(torch.randn(n))
    err = capfd.readouterr().err
    assert err.count("Graph break in user code at") == 1
    assert err.count("user stack suppressed due to duplicate graph break") == 2
    assert "zlib.crc32" in err and "test_breaks.py" in err
    assert shapejit.stats()["graph_breaks"] == 3


def test_fullgraph_raises_at_the_first_break():
    def f(x):
        y = x.sin()
        print("never printed")
        return y

    with pytest.raises(_C.Unsupported) as info:
        shapejit.compile(f, fullgraph=True)(torch.randn(2))
    msg = str(info.value)
    assert "print()" in msg and "test_breaks.py" in msg and 'print("never printed")' in msg


# ---- exceptions after a break -----------------------------------------------------------------

def _fail_in_helper(v):
    raise ValueError("helper says no: %d" % v)


def test_exception_in_eager_code_after_break_keeps_user_traceback():
    def f(x):
        y = x.sin()
        n = zlib.crc32(b"e") % 3
        _fail_in_helper(n)
        return y

    with pytest.raises(ValueError, match="helper says no") as info:
        shapejit.compile(f)(torch.randn(2))
    tb = traceback.extract_tb(info.value.__traceback__)
    names = [(fr.name, os.path.abspath(fr.filename)) for fr in tb]
    assert ("_fail_in_helper", HERE) in names
    # the frames of f: the continuation (named f, at the break) and the resume function
    # (named after the break's line), at the failing call
    mine = [fr for fr in tb if os.path.abspath(fr.filename) == HERE and fr.name != "_fail_in_helper"]
    assert mine[-1].line == "_fail_in_helper(n)"
    assert mine[-1].name.startswith("resume_in_f_at_")
    assert counts() == (1, 2)   # the resume function raised during capture: it ran eagerly
    assert any(fr.name == "f" and fr.line == 'n = zlib.crc32(b"e") % 3' for fr in mine)


def test_exception_in_resumed_graph_keeps_user_traceback():
    def f(x):
        y = x.sin()
        print("before")
        return y @ torch.ones(7)   # shapes do not match: raises after the break

    with contextlib.redirect_stdout(io.StringIO()), pytest.raises(RuntimeError) as info:
        shapejit.compile(f)(torch.randn(3))
    last_user = [fr for fr in traceback.extract_tb(info.value.__traceback__)
                 if os.path.abspath(fr.filename) == HERE][-1]
    assert last_user.line == "return y @ torch.ones(7)   # shapes do not match: raises after the break"
    assert counts() == (2, 2)   # the matmul itself is a second break, run by the interpreter


def test_raise_after_break():
    def f(x):
        y = x + 1
        zlib.crc32(b"r")
        if y.shape[0] == 2:
            raise KeyError("two")
        return y

    with pytest.raises(KeyError, match="two"):
        shapejit.compile(f)(torch.randn(2))
    torch.testing.assert_close(shapejit.compile(f)(torch.ones(3)), f(torch.ones(3)))


# ---- try / except / finally and with blocks ---------------------------------------------------

def test_try_except_finally_behave_as_eager():
    def f(x, log):
        try:
            y = x.sin()
            log.append("try")
            print("in try")
            if y.shape[0] > 1:
                raise ValueError("boom")
        except ValueError as e:
            log.append("except " + str(e))
            y = x.cos()
        finally:
            log.append("finally")
        return y * 2

    x = torch.randn(3)
    log_c, log_e = [], []
    with contextlib.redirect_stdout(io.StringIO()):
        torch.testing.assert_close(shapejit.compile(f)(x, log_c), f(x, log_e))
    assert log_c == log_e == ["try", "except boom", "finally"]
    assert counts() == (0, 1) and shapejit.stats()["eager_frames"] == 1


class _Counting:
    def __init__(self):
        self.enter = self.exit = 0

    def __enter__(self):
        self.enter += 1
        return self

    def __exit__(self, *exc):
        self.exit += 1
        return False


def test_with_blocks_run_cleanup_once():
    def f(x, cm):
        with cm:
            y = x.exp()
            print("inside with")
        with torch.no_grad():
            z = y * 2
            zlib.crc32(b"no_grad")
            w = z.requires_grad
        return z, w

    x = torch.randn(2, requires_grad=True)
    cm_c, cm_e = _Counting(), _Counting()
    with contextlib.redirect_stdout(io.StringIO()):
        out, w = shapejit.compile(f)(x, cm_c)
        eo, ew = f(x, cm_e)
    torch.testing.assert_close(out, eo)
    assert w == ew is False
    assert (cm_c.enter, cm_c.exit) == (cm_e.enter, cm_e.exit) == (1, 1)
    # a break inside a with block: the whole frame runs eagerly, one break recorded
    assert counts() == (0, 1) and shapejit.stats()["eager_frames"] == 1


def test_exception_raised_by_a_graph_reaches_user_handler():
    def f(x):
        y = x.sin()
        print("split")
        try:
            z = y @ torch.ones(5)
        except RuntimeError:
            z = y * 0
        return z

    x = torch.randn(3)
    with contextlib.redirect_stdout(io.StringIO()):
        torch.testing.assert_close(shapejit.compile(f)(x), f(x))
    # f splits at the print; the resume function's matmul fails inside its try: it runs
    # eagerly (a second recorded break) and the handler runs
    assert counts() == (1, 2) and shapejit.stats()["eager_frames"] == 1


# ---- generated code objects -----------------------------------------------------------------

def _user_functions():
    def a(x):
        y = x.sin()
        print("a")
        return y.cos()

    def b(x, n):
        for i in range(n):
            x = x + i
            if x.sum() > 1000:
                x = x * 0
        return x

    def c(x, *args, k=1, **kw):
        y = x * k
        zlib.crc32(b"c")
        return y + args[0] + kw["z"]

    return [(a, (torch.randn(3),), {}), (b, (torch.randn(3), 3), {}),
            (c, (torch.randn(3), torch.randn(3)), {"k": 2, "z": 1.0})]


def test_generated_code_disassembles_and_points_at_user_lines():
    seen = 0
    for fn, args, kw in _user_functions():
        shapejit.reset()
        with contextlib.redirect_stdout(io.StringIO()):
            torch.testing.assert_close(shapejit.compile(fn)(*args, **kw), fn(*args, **kw))
        lines, first = inspect.getsourcelines(fn)
        last = first + len(lines) - 1
        codes = _C._generated_codes()
        assert codes, fn.__name__
        for co in codes:
            seen += 1
            text = io.StringIO()
            dis.dis(co, file=text)
            assert text.getvalue()
            assert os.path.abspath(co.co_filename) == HERE
            assert co.co_name == fn.__name__ or co.co_name.startswith(f"resume_in_{fn.__name__}_at_")
            for start, end, line in co.co_lines():
                if line is not None:
                    assert first <= line <= last, (co.co_name, line, first, last)
            for pos in co.co_positions():
                assert pos[0] is None or first <= pos[0] <= last
    assert seen >= 6


def test_resume_functions_are_named_after_the_line():
    def f(x):
        y = x.sin()
        print("name")
        return y

    with contextlib.redirect_stdout(io.StringIO()):
        shapejit.compile(f)(torch.randn(2))
    names = {co.co_name for co in _C._generated_codes()}
    line = inspect.getsourcelines(f)[1] + 2
    assert names == {"f", f"resume_in_f_at_{line}"}


def test_runtime_error_of_a_graph_reaches_user_handler_and_traceback():
    def f(x, idx):
        try:
            z = torch.gather(x, 0, idx) * 2
        except RuntimeError:
            z = x * 0
        return z

    def g(x, idx):
        return torch.gather(x, 0, idx) * 2

    cf, cg = shapejit.compile(f), shapejit.compile(g)
    x = torch.randn(4)
    ok, bad = torch.tensor([0, 1]), torch.tensor([0, 9])
    torch.testing.assert_close(cf(x, ok), f(x, ok))
    torch.testing.assert_close(cf(x, bad), f(x, bad))   # the graph raised; f's handler ran
    assert shapejit.stats()["graphs"] == 1   # the entry stays; that call ran eagerly
    with pytest.raises(RuntimeError, match="out of bounds") as info:
        cg(x, bad)
    last = traceback.extract_tb(info.value.__traceback__)[-1]
    assert os.path.abspath(last.filename) == HERE and last.line == "return torch.gather(x, 0, idx) * 2"


def test_generated_code_dies_with_the_user_function(tmp_path):
    """The continuation and the resume function of a break in a loop die with the user's code."""
    import gc
    import weakref
    src = ("def f(x, buf):\n"
           "    for i in range(2):\n"
           "        print(i, file=buf)\n"
           "        x = x + 1\n"
           "    return x\n")
    path = tmp_path / "loop_break.py"
    path.write_text(src)
    ns = {}
    exec(compile(src, str(path), "exec"), ns)
    buf = io.StringIO()
    torch.testing.assert_close(shapejit.compile(ns["f"])(torch.ones(2), buf), torch.ones(2) + 2)
    assert buf.getvalue() == "0\n1\n"
    refs = [weakref.ref(co) for co in _C._generated_codes()]
    assert len(refs) >= 2
    del ns
    gc.collect()
    assert [r() for r in refs if r() is not None] == []
