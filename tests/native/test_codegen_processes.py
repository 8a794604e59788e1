"""The C compiler's processes (native/cc.c): they never outlive the process that started
them, and an interrupt during a compile reaches the user.

A fake compiler stands in for a slow one: a shell script that, when asked to build a
library, starts a long `sleep` (a grandchild of the compile, as cc1 is of cc) and waits
for it. Every process of a compile inherits the environment, so a marker variable in it
finds them all in /proc, whoever their parent is after ours died."""
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest
import torch

import shapejit
from repo import package_parent
from shapejit import _C

PACKAGE_PARENT = package_parent()

SRC = "#include <stdint.h>\nCG_EXPORT int64_t f(int64_t x) { return x + 1; }\n"

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")


def marked(marker):
    """pids of the live processes (zombies excluded) whose environment holds `marker`."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                env = f.read()
            with open("/proc/%s/stat" % pid) as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in env and state != "Z":
            found.append(int(pid))
    return found


def wait_for(cond, timeout):
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


@pytest.fixture
def slow_cc(tmp_path, monkeypatch):
    """$CC = a compiler that sleeps 60 s in a grandchild before building; its processes
    carry a fresh marker variable. Yields the marker."""
    cc = tmp_path / "slowcc"
    cc.write_text('#!/bin/sh\ncase " $* " in *" -shared "*) sleep 60 & wait;; esac\nexec cc "$@"\n')
    cc.chmod(0o755)
    marker = "SJ_TEST_CC_MARKER_" + uuid.uuid4().hex
    monkeypatch.setenv("CC", str(cc))
    monkeypatch.setenv(marker, "1")
    monkeypatch.setenv("SHAPEJIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SHAPEJIT_CC_TIMEOUT", raising=False)
    _C._cg_forget()
    yield marker
    for pid in marked(marker):   # never leave a sleeper behind, whatever the test found
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    _C._cg_forget()


def _killed_while_compiling(marker, script):
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], cwd=PACKAGE_PARENT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # the compile is under way once the fake compiler's sleep exists
        assert wait_for(lambda: len(marked(marker)) >= 3, 60), "the compile never started"
        child.kill()
        child.wait(10)
        assert wait_for(lambda: not marked(marker), 5), \
            "compiler processes outlived the killed process: %s" % marked(marker)
    finally:
        if child.poll() is None:
            child.kill()


def test_sigkill_during_compile_kills_the_compiler_tree(slow_cc):
    _killed_while_compiling(slow_cc, """
        from shapejit import _C
        _C._cg_build(%r, "f", "ll")
    """ % SRC)


def test_sigkill_during_a_two_unit_graph_compile(slow_cc):
    """A graph of several kernels compiles as two units at once (build.c's helper thread
    runs the second compiler): both trees die with the process."""
    _killed_while_compiling(slow_cc, """
        import torch, shapejit
        def f(x):
            a = torch.tanh(x * 1.5).sum(0)
            b = torch.exp(a - 1.0).sum(0)
            c = torch.sigmoid(x + b).amax(1)
            return torch.relu(c * 2.0).mean()
        shapejit.compile(f)(torch.randn(8, 8))
    """)


def test_timeout_kills_the_whole_tree(slow_cc, monkeypatch):
    monkeypatch.setenv("SHAPEJIT_CC_TIMEOUT", "0.5")
    t0 = time.time()
    with pytest.raises(_C.CompileError, match="timed out"):
        _C._cg_build("/* %s */\n%s" % (uuid.uuid4().hex, SRC), "f", "ll")
    assert time.time() - t0 < 10
    assert wait_for(lambda: not marked(slow_cc), 5), marked(slow_cc)


def _interrupt_after(delay):
    timer = threading.Timer(delay, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    return timer


def test_ctrl_c_during_a_build_raises_keyboard_interrupt(slow_cc):
    timer = _interrupt_after(0.5)
    t0 = time.time()
    try:
        with pytest.raises(KeyboardInterrupt):
            _C._cg_build("/* %s */\n%s" % (uuid.uuid4().hex, SRC), "f", "ll")
    finally:
        timer.cancel()
    assert time.time() - t0 < 10
    assert wait_for(lambda: not marked(slow_cc), 5), marked(slow_cc)


def _graph_of_several_kernels(x):
    a = torch.tanh(x * 1.5).sum(0)
    b = torch.exp(a - 1.0).sum(0)
    c = torch.sigmoid(x + b).amax(1)
    return torch.relu(c * 2.0).mean()


def _pointwise(x):
    return torch.tanh(x * 1.2345) + 0.5


@pytest.mark.usefixtures("fresh_shapejit")
@pytest.mark.parametrize("fn", [_pointwise, _graph_of_several_kernels], ids=["one_unit", "two_units"])
def test_ctrl_c_during_a_compiled_call_reaches_the_user(slow_cc, fn):
    """The compiled call raises KeyboardInterrupt (it does not fall back to eager and
    finish), promptly, with no compiler left; the next call compiles normally."""
    compiled = shapejit.compile(fn)
    x = torch.randn(8, 8)
    timer = _interrupt_after(0.5)
    t0 = time.time()
    try:
        with pytest.raises(KeyboardInterrupt):
            compiled(x)
    finally:
        timer.cancel()
    assert time.time() - t0 < 10
    assert wait_for(lambda: not marked(slow_cc), 5), marked(slow_cc)
    os.environ.pop("CC")
    torch.testing.assert_close(compiled(x), fn(x))
