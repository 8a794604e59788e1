"""The cpu_target knob: which CPU generated kernels are compiled for (gcc -march).

Validation of the knob and of $SHAPEJIT_CPU_TARGET, the kernel cache key per target,
values of a graph compiled for x86-64-v3 against eager, and targets this CPU cannot run
(or the compiler does not know) refused once, cleanly: the graph runs eagerly with a
warning naming the target and the CPU, never a SIGILL."""
import subprocess
import sys
import textwrap
import uuid
import warnings

import pytest
import torch

import shapejit
from shapejit import _C

pytestmark = pytest.mark.usefixtures("fresh_shapejit")

KERNEL = "CG_EXPORT long k(void) { return 7; }\n"


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SHAPEJIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SHAPEJIT_CPU_TARGET", raising=False)
    _C._cg_forget()
    yield tmp_path / "cache"
    _C._cg_forget()
    shapejit.config.cpu_target = "native"


def counters():
    info = _C._cg_cache_info()
    return {k: v for k, v in info.items() if isinstance(v, int) and not isinstance(v, bool)}


# ------------------------------------------------------------------ validation ----

def test_knob_default_and_valid_values(cache):
    assert shapejit.config.defaults()["cpu_target"] == "native"
    assert shapejit.config.cpu_target == "native"
    for t in ("x86-64-v2", "x86-64-v3", "x86-64-v4", "skylake-avx512", "znver4", "native"):
        shapejit.config.cpu_target = t
        assert shapejit.config.cpu_target == t
    with shapejit.config.patch(cpu_target="x86-64-v3"):
        assert shapejit.config.cpu_target == "x86-64-v3"
    assert shapejit.config.cpu_target == "native"


@pytest.mark.parametrize("bad", ["", "X86-64", "x86 64", "-O0", "native;rm", "a" * 65, "v3\n", "é", "\udc80"])
def test_knob_rejects_bad_text(cache, bad):
    with pytest.raises(ValueError, match="cpu_target"):
        shapejit.config.cpu_target = bad
    assert shapejit.config.cpu_target == "native"   # unchanged


def test_knob_rejects_non_str(cache):
    with pytest.raises(TypeError, match="cpu_target"):
        shapejit.config.cpu_target = 3


@pytest.mark.parametrize("bad", ["x86 64", "-march=native", "A", "v3;ls"])
def test_malformed_environment_variable_names_it(cache, monkeypatch, bad):
    monkeypatch.setenv("SHAPEJIT_CPU_TARGET", bad)
    with pytest.raises(ValueError, match="SHAPEJIT_CPU_TARGET"):
        _C._cg_build("/* %s */\n%s" % (uuid.uuid4().hex, KERNEL), "k", "l")


def test_environment_variable_overrides_the_knob(cache, monkeypatch):
    native = _C._cg_identity()
    monkeypatch.setenv("SHAPEJIT_CPU_TARGET", "x86-64-v3")
    assert "-march=x86-64-v3" in _C._cg_identity()
    monkeypatch.setenv("SHAPEJIT_CPU_TARGET", "")      # empty: the knob
    assert _C._cg_identity() == native


# ------------------------------------------------------------------- cache key ----

def test_native_identity_keeps_its_text(cache):
    ident = _C._cg_identity()
    assert "-O3 -march=native -fno-math-errno" in ident
    assert "x86-64-v3" not in ident


def test_cache_key_differs_per_target(cache):
    src = "/* %s */\n%s" % (uuid.uuid4().hex, KERNEL)
    idents = {}
    for t in ("native", "x86-64-v3", "x86-64-v2"):
        shapejit.config.cpu_target = t
        idents[t] = _C._cg_identity()
        before = counters()
        assert _C._cg_call(_C._cg_build(src, "k", "l")) == 7
        after = counters()
        assert after["compiles"] - before["compiles"] == 1, t   # never another target's entry
    assert len(set(idents.values())) == 3
    kernels = sorted(p.name for p in (cache / "kernels").iterdir() if p.name.endswith(".so"))
    assert len(kernels) == 3
    shapejit.config.cpu_target = "x86-64-v3"        # back to a known target: its entry
    _C._cg_forget()
    before = counters()
    _C._cg_build(src, "k", "l")
    assert counters()["hits"] - before["hits"] == 1


# --------------------------------------------------------------------- values ----

def pointwise(x, y):
    z = torch.relu(x * 1.5 + y) - 0.25
    return torch.sigmoid(z) * torch.tanh(y) + torch.exp(-z * z)


def test_graph_for_x86_64_v3_matches_eager(cache):
    shapejit.config.cpu_target = "x86-64-v3"
    f = shapejit.compile(pointwise, backend="cpu")
    for n in (0, 1, 17, 1000):
        x, y = torch.randn(n), torch.randn(n)
        with warnings.catch_warnings():
            warnings.simplefilter("error")      # a refused target would warn
            got = f(x, y)
        torch.testing.assert_close(got, pointwise(x, y), rtol=1e-5, atol=1e-6)
    assert counters()["compiles"] >= 1


# ------------------------------------------------------------- refused targets ----

def _refused(target, monkeypatch=None):
    shapejit.config.cpu_target = target
    with pytest.raises(_C.CompileError) as e:
        _C._cg_build("/* %s */\n%s" % (uuid.uuid4().hex, KERNEL), "k", "l")
    msg = str(e.value)
    assert "cpu_target '%s'" % target in msg and "cannot run on this CPU" in msg
    return msg


def test_target_the_compiler_rejects_is_refused(cache):
    msg = _refused("notacpu")
    assert "notacpu" in msg
    before = counters()
    msg2 = _refused("notacpu")               # the refusal is kept: no second probe
    assert msg2 == msg and counters()["compiles"] == before["compiles"]


def test_target_this_cpu_lacks_is_refused(cache):
    if "avx512_fp16" in cpu_flags() or "amx_tile" in cpu_flags():
        pytest.skip("this CPU has sapphirerapids' AVX512-FP16/AMX")
    msg = _refused("sapphirerapids")
    assert "avx512fp16" in msg or "amx" in msg or "SIGILL" in msg


def test_refused_target_runs_the_graph_eagerly_with_a_warning(cache):
    shapejit.config.cpu_target = "notacpu"
    f = shapejit.compile(pointwise, backend="cpu")
    x, y = torch.randn(33), torch.randn(33)
    with pytest.warns(RuntimeWarning, match="cpu_target 'notacpu' cannot run on this CPU"):
        got = f(x, y)
    torch.testing.assert_close(got, pointwise(x, y))


def test_refused_target_never_kills_the_interpreter(cache, tmp_path):
    """In a child, so a SIGILL would show as its death rather than ours."""
    code = textwrap.dedent("""
        import os, torch, warnings, shapejit
        os.environ["SHAPEJIT_CPU_TARGET"] = "sapphirerapids"
        f = shapejit.compile(lambda x: torch.sin(x) * 2 + 1, backend="cpu")
        x = torch.randn(100)
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            y = f(x)
        assert torch.allclose(y, torch.sin(x) * 2 + 1)
        print("ok")
    """)
    env = dict(__import__("os").environ, SHAPEJIT_CACHE_DIR=str(tmp_path / "child"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_malformed_variable_reaches_the_backend_as_an_error_naming_it(cache, monkeypatch):
    """Through a compile, as the budget variables: the cpu backend's ValueError names the
    variable and the value; the function still gives eager's values."""
    monkeypatch.setenv("SHAPEJIT_CPU_TARGET", "bad one")
    seen = []

    def backend(graph, example_inputs):
        try:
            return _C._cg_compile_graph(graph)
        except ValueError as e:
            seen.append(str(e))
            raise

    x = torch.randn(8)
    fn = shapejit.compile(lambda t: torch.tanh(t) * 2.0, backend=backend)
    try:
        torch.testing.assert_close(fn(x), torch.tanh(x) * 2.0)
    except Exception:
        pass
    assert seen and "SHAPEJIT_CPU_TARGET" in seen[0] and "'bad one'" in seen[0]
