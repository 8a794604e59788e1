"""An interrupt always reaches the caller of a compiled function: KeyboardInterrupt, SystemExit
(any exception that is not an Exception) raised wherever shapejit would otherwise clear an
error and fall back (guard evaluation, capture, the result rebuild, a log handler, the
backend) propagates, nothing of the interrupted compile is cached, and the next call works.
The C code clears errors only through sj_err_clear (core/errors.h), which keeps such
exceptions aside for the frame hook to raise."""
import collections
import glob
import logging
import os
import random
import re
import signal
import threading
import time

import numpy as np
import pytest
import torch

import shapejit
from repo import repo_root

ROOT = repo_root()


@pytest.fixture(autouse=True)
def _fresh(fresh_shapejit):
    yield


# ------------------------------------------------------------ at known points ----

class Flaky:
    """Raises `armed` from reading .scale once armed (what a signal handler does at the
    next bytecode boundary). __getattribute__ is opaque to capture, so both capture and
    the guard on L['o'].scale read it for real."""

    armed = None
    scale = 3

    def __getattribute__(self, name):
        exc = type(self).armed
        if exc is not None and name == "scale":
            type(self).armed = None
            raise exc()
        return object.__getattribute__(self, name)


def scaled(x, o):
    return x * o.scale + 1


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
@pytest.mark.parametrize("make", [lambda: torch.arange(4.0), lambda: np.arange(4.0)],
                         ids=["torch", "numpy"])
def test_interrupt_during_guard_evaluation(exc, make):
    o, x = Flaky(), make()
    f = shapejit.compile(scaled)
    np.testing.assert_allclose(np.asarray(f(x, o)), np.asarray(scaled(x, o)))
    entries = shapejit.stats()["cache_entries"]
    Flaky.armed = exc
    with pytest.raises(exc):
        f(x, o)   # the guard on L['o'].scale reads it
    st = shapejit.stats()
    assert st["cache_entries"] == entries and st["recompiles"] == 0   # not taken for a miss
    np.testing.assert_allclose(np.asarray(f(x, o)), np.asarray(scaled(x, o)))


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
def test_interrupt_during_capture_caches_nothing(exc):
    o, x = Flaky(), torch.ones(3)
    Flaky.armed = exc
    f = shapejit.compile(scaled)
    with pytest.raises(exc):
        f(x, o)
    assert shapejit.stats()["cache_entries"] == 0
    assert shapejit.stats()["graph_breaks"] == 0
    torch.testing.assert_close(f(x, o), scaled(x, o))
    assert shapejit.stats()["graphs"] == 1   # compiled normally, not left eager


class Probe:
    def __init__(self):
        self.armed = False

    def __getattr__(self, name):
        if self.armed:
            self.armed = False
            raise KeyboardInterrupt
        raise AttributeError(name)


def uses_hasattr(x, p):
    if hasattr(p, "bias"):
        return x + 1
    return x * 2


def test_interrupt_in_hasattr_during_capture():
    p = Probe()
    p.armed = True
    f = shapejit.compile(uses_hasattr)
    with pytest.raises(KeyboardInterrupt):
        f(torch.ones(2), p)
    torch.testing.assert_close(f(torch.ones(2), p), uses_hasattr(torch.ones(2), p))


class Pair(collections.namedtuple("Pair", "a b")):
    armed = False

    @classmethod
    def _make(cls, iterable):
        if cls.armed:
            cls.armed = False
            raise KeyboardInterrupt
        return super()._make(iterable)


def makes_pair(x):
    return Pair(x + 1, x * 2)


def test_interrupt_while_the_result_is_rebuilt():
    f = shapejit.compile(makes_pair)
    x = torch.ones(3)
    got = f(x)
    assert type(got) is Pair and all(torch.equal(a, b) for a, b in zip(got, makes_pair(x)))
    Pair.armed = True
    with pytest.raises(KeyboardInterrupt):
        f(x)
    got = f(x)
    assert type(got) is Pair and all(torch.equal(a, b) for a, b in zip(got, makes_pair(x)))


class RaisingHandler(logging.Handler):
    def __init__(self):
        super().__init__()
        self.armed = True

    def emit(self, record):
        if self.armed:
            self.armed = False
            raise KeyboardInterrupt


def with_break(x):
    y = x.cos()
    print(end="")
    return y + 1


def test_interrupt_in_a_log_handler():
    handler = RaisingHandler()
    logger = logging.getLogger("shapejit.graph_breaks")
    logger.addHandler(handler)
    try:
        shapejit.set_logs(graph_breaks=True)
        f = shapejit.compile(with_break)
        with pytest.raises(KeyboardInterrupt):
            f(torch.ones(3))
        torch.testing.assert_close(f(torch.ones(3)), with_break(torch.ones(3)))
    finally:
        logger.removeHandler(handler)
        shapejit.set_logs()


def test_no_raw_pyerr_clear_left():
    """Every clear in the compiler goes through sj_err_clear (the cpu backend
    and the native layer keep their own rules for interrupts during a kernel compile)."""
    offenders = []
    for d in ("core", "vocab", "bytecode", "shapes", "graph", "guards", "capture", "resume", "hook"):
        for path in glob.glob(os.path.join(ROOT, d, "**", "*.c"), recursive=True):
            if path.endswith(os.path.join("core", "errors.c")):
                continue
            with open(path, encoding="utf-8") as f:
                for n, line in enumerate(f, 1):
                    if re.search(r"\bPyErr_Clear\s*\(|\bPyObject_HasAttr(String)?\s*\(\s*(o|probe)\b",
                                 line):
                        offenders.append("%s:%d" % (os.path.relpath(path, ROOT), n))
    assert not offenders, offenders


# ---------------------------------------------------------- at random moments ----

Point = collections.namedtuple("Point", "a b")


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.k = 3

    def forward(self, x):
        return torch.relu(self.lin(x)) * self.k


def t_break(x):
    y = x.sin() + 1
    print(end="")
    return (y * 2).sum()


def t_namedtuple(x, n):
    return Point(x * n, x.cos())


def np_branch(x):
    y = np.sin(x) * 2
    if y.sum() > 0:
        y = y + 1
    return y


def t_loop_item(x):
    for i in range(3):
        x = x + i
        if x.sum().item() > 1e9:
            break
    return x


def _cases():
    net = Net()
    return [
        (shapejit.compile(t_break), t_break, lambda: (torch.randn(16),)),
        (shapejit.compile(t_namedtuple, backend="eager"), t_namedtuple, lambda: (torch.randn(4), 3)),
        (shapejit.compile(np_branch), np_branch, lambda: (np.random.rand(8),)),
        (shapejit.compile(t_loop_item), t_loop_item, lambda: (torch.randn(5),)),
        (shapejit.compile(net), net, lambda: (torch.randn(2, 8),)),
    ]


def _same(a, b):
    if isinstance(a, tuple):
        return type(a) is type(b) and all(_same(x, y) for x, y in zip(a, b))
    return np.allclose(np.asarray(a.detach() if isinstance(a, torch.Tensor) else a),
                       np.asarray(b.detach() if isinstance(b, torch.Tensor) else b))


@pytest.mark.parametrize("how", ["setitimer", "thread_kill"])
def test_random_interrupts_always_reach_the_caller(how):
    cases = _cases()
    delivered = [0]

    def handler(signum, frame):
        delivered[0] += 1
        raise KeyboardInterrupt

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGALRM)}
    rng = random.Random(1234 if how == "setitimer" else 4321)
    trials, lost = 80, []
    try:
        for t in range(trials):
            compiled, plain, make = cases[t % len(cases)]
            if t % 23 == 0:
                shapejit.reset()   # interrupts land in compiles too
            args = make()
            delay = rng.uniform(1e-6, 4e-4)
            timer, got, before = None, False, delivered[0]
            try:
                if how == "setitimer":
                    signal.setitimer(signal.ITIMER_REAL, delay)
                else:
                    timer = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT))
                    timer.start()
                deadline = time.perf_counter() + 0.25
                while time.perf_counter() < deadline:
                    compiled(*args)
                if timer is not None:
                    timer.join()   # a late signal still lands inside this try
                    time.sleep(0.001)
            except KeyboardInterrupt:
                got = True
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                if timer is not None:
                    timer.join()
            if delivered[0] > before and not got:
                lost.append((t, plain.__name__ if hasattr(plain, "__name__") else "module"))
            assert _same(compiled(*args), plain(*args))   # the next call still works
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for s, h in old.items():
            signal.signal(s, h)
    assert delivered[0] > trials // 2
    assert not lost, "interrupts delivered but never seen by the caller: %s" % lost


def _counting_backend(calls):
    def backend(graph, example_inputs):
        calls.append(1)
        return shapejit.backends.eager(graph, example_inputs)
    return backend


def t_scale(x):
    return x.sin() * 2


def np_scale(x):
    return np.sin(x) * 2


@pytest.mark.parametrize("fn,make", [(t_scale, lambda n: torch.ones(n)), (np_scale, lambda n: np.ones(n))],
                         ids=["torch", "numpy"])
def test_interrupt_while_a_recompile_is_logged_compiles_nothing(fn, make):
    # the recompile message goes to a handler that raises KeyboardInterrupt: the call
    # raises it before anything more runs (the backend is not called, nothing is cached),
    # and the next call compiles as if the interrupted one had not happened
    handler = RaisingHandler()
    handler.armed = False
    logger = logging.getLogger("shapejit.recompiles")
    logger.addHandler(handler)
    calls = []
    try:
        shapejit.set_logs(recompiles=True)
        f = shapejit.compile(fn, backend=_counting_backend(calls), dynamic=False)
        np.testing.assert_allclose(np.asarray(f(make(3))), np.asarray(fn(make(3))))
        assert len(calls) == 1
        handler.armed = True
        with pytest.raises(KeyboardInterrupt):
            f(make(5))   # a new shape: a recompile, logged
        assert len(calls) == 1, "the backend ran after the interrupt"
        entries = shapejit._C.stats()["cache_entries"]
        np.testing.assert_allclose(np.asarray(f(make(5))), np.asarray(fn(make(5))))
        assert len(calls) == 2
        assert shapejit._C.stats()["cache_entries"] == entries + 1
    finally:
        logger.removeHandler(handler)
        shapejit.set_logs()
