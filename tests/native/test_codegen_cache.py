"""The generated-C infrastructure: compiler driver, disk cache, loader and libffi calls
(native/cc.c, diskcache.c, loader.c), through the _C._cg_* test hooks.

Every test gets its own cache root (SHAPEJIT_CACHE_DIR, read at each build) and a memo
that forgot earlier builds, so a build goes to that root's disk cache."""
import os
import stat
import subprocess
import sys
import textwrap
import time
import uuid

import numpy as np
import pytest

import shapejit
from repo import package_parent
from shapejit import _C

# children import the same shapejit (and _C: in-place, or the sanitized build) as this process
PACKAGE_PARENT = package_parent()

SAXPY = r"""
#include <stdint.h>
CG_EXPORT void saxpy(float *y, const float *x, float a, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}
"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("SHAPEJIT_CACHE_DIR", str(root))
    monkeypatch.delenv("SHAPEJIT_CC_TIMEOUT", raising=False)
    _C._cg_forget()
    yield root
    _C._cg_forget()
    shapejit.set_logs()


def unique(src):
    """`src` with a comment that makes its cache key new."""
    return "/* %s */\n%s" % (uuid.uuid4().hex, src)


def counters():
    info = _C._cg_cache_info()
    return {k: v for k, v in info.items() if isinstance(v, int) and not isinstance(v, bool)}


def delta(before):
    after = counters()
    return {k: after[k] - before[k] for k in after if after[k] != before[k]}


def run_saxpy(fn, n=1000):
    x = np.arange(n, dtype=np.float32)
    y = np.full(n, 0.5, dtype=np.float32)
    assert _C._cg_call(fn, y.ctypes.data, x.ctypes.data, 2.0, n) is None
    np.testing.assert_array_equal(y, np.float32(0.5) + np.float32(2.0) * x)


TRAILER = 48   # magic "SJK2", format, payload length, payload hash, key/compiler binding


def entries(kernels):
    names = sorted(os.listdir(kernels))
    return ([n for n in names if n.endswith(".so") and not n.startswith(".")],
            [n for n in names if n.startswith(".tmp.")])


def replace_file(path, data):
    """Writes `data` as a new file at `path` (a new inode: this process may have the old
    one mapped, and changing a mapped library in place would crash it)."""
    os.unlink(path)
    with open(path, "wb") as f:
        f.write(data)


# ---------------------------------------------------------------- build and call ----

def test_saxpy_builds_and_runs(cache):
    before = counters()
    fn = _C._cg_build(unique(SAXPY), "saxpy", "vppfl")
    run_saxpy(fn)
    run_saxpy(fn, n=0)
    assert delta(before) == {"misses": 1, "compiles": 1}
    info = _C._cg_cache_info()
    assert info["dir"] == str(cache / "kernels") and info["requested"] == str(cache)
    assert info["private"] is False


def test_second_build_is_a_cache_hit_without_compiling(cache):
    src = unique(SAXPY)
    _C._cg_build(src, "saxpy", "vppfl")
    before = counters()
    run_saxpy(_C._cg_build(src, "saxpy", "vppfl"))      # the memo of this process
    assert delta(before) == {"mem_hits": 1}
    _C._cg_forget()
    before = counters()
    run_saxpy(_C._cg_build(src, "saxpy", "vppfl"))      # the disk
    assert delta(before) == {"hits": 1}


def test_each_library_runs_its_own_code(cache):
    """A library loaded again (same file) and then a new one: the new one's code runs,
    not a previous library's (glibc answers dlopen of a name it has seen with the old
    object, so names must never repeat)."""
    k = "CG_EXPORT long k(void) { return %d; }\n"
    one, two = unique(k % 1), unique(k % 2)
    assert _C._cg_call(_C._cg_build(one, "k", "l")) == 1
    _C._cg_forget()
    assert _C._cg_call(_C._cg_build(one, "k", "l")) == 1     # the same file again
    assert _C._cg_call(_C._cg_build(two, "k", "l")) == 2
    for i in range(3, 6):
        assert _C._cg_call(_C._cg_build(unique(k % i), "k", "l")) == i


def test_entry_layout_and_modes(tmp_path, monkeypatch):
    root = tmp_path / "a" / "b" / "cache"                # parents made too, each 0700
    monkeypatch.setenv("SHAPEJIT_CACHE_DIR", str(root))
    _C._cg_forget()
    src = unique(SAXPY)
    _C._cg_build(src, "saxpy", "vppfl")
    for d in (tmp_path / "a", tmp_path / "a" / "b", root, root / "kernels"):
        assert stat.S_IMODE(os.lstat(d).st_mode) == 0o700, d
    sos, temps = entries(root / "kernels")
    assert len(sos) == 1 and temps == []
    so = root / "kernels" / sos[0]
    assert len(sos[0]) == 32 + 3
    assert stat.S_IMODE(os.lstat(so).st_mode) == 0o400
    data = so.read_bytes()
    assert data[:4] == b"\x7fELF" and data[-TRAILER:-TRAILER + 4] == b"SJK2"
    assert int.from_bytes(data[-TRAILER + 8:-TRAILER + 16], "little") == len(data) - TRAILER
    assert (root / "kernels" / (sos[0][:-3] + ".c")).read_text() == src


@pytest.mark.parametrize("damage", ["truncated", "trailer_cut", "empty", "byte_flipped",
                                    "hash_flipped", "binding_flipped", "no_trailer", "symlink"])
def test_bad_entry_is_rebuilt_never_loaded(cache, damage, tmp_path):
    src = unique(SAXPY)
    _C._cg_build(src, "saxpy", "vppfl")
    kernels = cache / "kernels"
    (name,), _ = entries(kernels)
    path = kernels / name
    good = path.read_bytes()
    payload = good[:-TRAILER]
    if damage == "symlink":          # a symlink to a good entry is still refused
        copy = tmp_path / "elsewhere.so"
        copy.write_bytes(good)
        os.unlink(path)
        os.symlink(copy, path)
    else:
        bad = {
            "truncated": good[: len(good) // 2],      # dlopen of this would die of SIGBUS
            "trailer_cut": good[:-1],
            "empty": b"",
            "byte_flipped": payload[:1000] + bytes([payload[1000] ^ 0x40]) + payload[1001:] + good[-TRAILER:],
            "hash_flipped": good[:-17] + bytes([good[-17] ^ 1]) + good[-16:],
            "binding_flipped": good[:-1] + bytes([good[-1] ^ 1]),
            "no_trailer": payload,
        }[damage]
        replace_file(path, bad)
    bad_ino = os.lstat(path).st_ino
    shapejit.set_logs(output_code=True)
    _C._cg_forget()
    before = counters()
    fn = _C._cg_build(src, "saxpy", "vppfl")
    assert delta(before) == {"rebuilds": 1, "compiles": 1}
    run_saxpy(fn)
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode) and st.st_ino != bad_ino
    assert path.read_bytes()[-TRAILER:-TRAILER + 4] == b"SJK2"
    assert entries(kernels)[1] == []
    # the rebuilt entry is good: the next process-level miss is a hit
    _C._cg_forget()
    before = counters()
    run_saxpy(_C._cg_build(src, "saxpy", "vppfl"))
    assert delta(before) == {"hits": 1}


def test_entry_of_another_key_is_rejected_and_rebuilt(cache, capfd):
    """A whole, valid entry (another source's library with its own good trailer) placed
    under this source's name is refused: the trailer binds an entry to its key and
    compiler. It is logged, removed and rebuilt; this source's code runs, never the other's."""
    k = "CG_EXPORT long k(void) { return %d; }\n"
    one, two = unique(k % 1), unique(k % 2)
    _C._cg_build(one, "k", "l")
    (name_one,), _ = entries(cache / "kernels")
    _C._cg_build(two, "k", "l")
    (name_two,) = set(entries(cache / "kernels")[0]) - {name_one}
    replace_file(cache / "kernels" / name_one, (cache / "kernels" / name_two).read_bytes())
    shapejit.set_logs(output_code=True)
    _C._cg_forget()
    capfd.readouterr()
    before = counters()
    assert _C._cg_call(_C._cg_build(one, "k", "l")) == 1
    assert delta(before) == {"rebuilds": 1, "compiles": 1}
    err = capfd.readouterr().err
    assert name_one in err and "built for another entry or another compiler" in err and "rebuilding" in err
    _C._cg_forget()
    before = counters()
    assert _C._cg_call(_C._cg_build(one, "k", "l")) == 1
    assert delta(before) == {"hits": 1}


def test_entry_of_another_compiler_is_rejected(cache, tmp_path, monkeypatch):
    """An entry sealed under another compiler identity does not load for this one, even
    under the same name (the binding includes the identity, not only the key)."""
    src = unique(SAXPY)
    _C._cg_build(src, "saxpy", "vppfl")
    (name,), _ = entries(cache / "kernels")
    path = cache / "kernels" / name
    good = path.read_bytes()
    # the same payload and payload hash, a binding made for some other identity
    replace_file(path, good[:-16] + bytes(16))
    _C._cg_forget()
    before = counters()
    run_saxpy(_C._cg_build(src, "saxpy", "vppfl"))
    assert delta(before) == {"rebuilds": 1, "compiles": 1}
    assert path.read_bytes() == good   # the rebuild seals it for this key and compiler again


def test_bad_entry_is_logged(cache, capfd):
    src = unique(SAXPY)
    _C._cg_build(src, "saxpy", "vppfl", "my_graph")
    (name,), _ = entries(cache / "kernels")
    path = cache / "kernels" / name
    replace_file(path, path.read_bytes()[:100])
    shapejit.set_logs(output_code=True)
    _C._cg_forget()
    capfd.readouterr()
    _C._cg_build(src, "saxpy", "vppfl", "my_graph")
    err = capfd.readouterr().err
    assert "my_graph" in err and "truncated" in err and "rebuilding" in err
    assert "compiled my_graph in" in err


# ------------------------------------------------------------------- concurrency ----

CHILD = textwrap.dedent("""
    import os, sys, time
    import numpy as np
    from shapejit import _C
    src, go, ready = sys.argv[1], sys.argv[2], sys.argv[3]
    open(ready, "w").close()
    while not os.path.exists(go):
        time.sleep(0.0005)
    fn = _C._cg_build(src, "saxpy", "vppfl")
    x = np.arange(100, dtype=np.float32); y = np.zeros(100, dtype=np.float32)
    _C._cg_call(fn, y.ctypes.data, x.ctypes.data, 3.0, 100)
    assert (y == 3 * x).all()
    print(_C._cg_cache_info()["compiles"])
""")


def test_two_processes_build_the_same_source_at_once(cache, tmp_path):
    src = unique(SAXPY)
    go = tmp_path / "go"
    env = dict(os.environ, PYTHONPATH=PACKAGE_PARENT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("TORCH_LOGS", None)
    procs = []
    for i in range(2):
        ready = tmp_path / ("ready%d" % i)
        procs.append((subprocess.Popen([sys.executable, "-c", CHILD, src, str(go), str(ready)], env=env,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), ready))
    deadline = time.time() + 60
    while not all(r.exists() for _, r in procs) and time.time() < deadline:
        time.sleep(0.005)
    go.touch()
    outs = [p.communicate(timeout=120) for p, _ in procs]
    for (p, _), (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    assert sum(int(out) for out, _ in outs) >= 1
    sos, temps = entries(cache / "kernels")
    assert len(sos) == 1 and temps == []
    before = counters()
    run_saxpy(_C._cg_build(src, "saxpy", "vppfl"))
    assert delta(before) == {"hits": 1}


# ------------------------------------------------------------------- directories ----

def refused(root, match):
    src = unique(SAXPY)
    _C._cg_forget()
    with pytest.warns(UserWarning, match=match):
        fn = _C._cg_build(src, "saxpy", "vppfl")
    run_saxpy(fn)
    info = _C._cg_cache_info()
    assert info["private"] is True and info["requested"] == str(root)
    assert not info["dir"].startswith(str(root))
    assert stat.S_IMODE(os.lstat(info["dir"]).st_mode) == 0o700
    return info


def test_world_writable_cache_dir_is_refused(cache):
    cache.mkdir()
    os.chmod(cache, 0o777)
    refused(cache, r"%s has mode 0777.*private directory" % cache)
    assert not (cache / "kernels").exists()


def test_open_kernels_dir_is_refused(cache):
    (cache / "kernels").mkdir(parents=True)
    os.chmod(cache, 0o755)                  # a readable root is fine (pgo makes it so) ...
    os.chmod(cache / "kernels", 0o750)      # ... kernels/ is not
    refused(cache, r"kernels has mode 0750: group/other permission bits 050")


def test_symlinked_cache_dir_is_refused(tmp_path, monkeypatch):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    os.symlink(real, link)
    monkeypatch.setenv("SHAPEJIT_CACHE_DIR", str(link))
    refused(link, "symbolic link")
    assert not (real / "kernels").exists()
    _C._cg_forget()


def test_cache_root_follows_pgo_rule(tmp_path, monkeypatch):
    monkeypatch.delenv("SHAPEJIT_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    _C._cg_forget()
    _C._cg_build(unique(SAXPY), "saxpy", "vppfl")
    assert _C._cg_cache_info()["dir"] == str(tmp_path / "xdg" / "shapejit" / "kernels")
    import shapejit.pgo
    assert shapejit.pgo._cache_dir() == _C._cg_cache_info()["requested"]
    _C._cg_forget()


def test_stale_temps_are_removed_at_first_use(cache):
    kernels = cache / "kernels"
    kernels.mkdir(parents=True, mode=0o700)
    os.chmod(cache, 0o700)
    old, fresh = kernels / ".tmp.dead.abc123.so", kernels / ".tmp.live.abc123.so"
    old.write_bytes(b"x")
    fresh.write_bytes(b"x")
    two_hours_ago = time.time() - 7200
    os.utime(old, (two_hours_ago, two_hours_ago))
    _C._cg_build(unique(SAXPY), "saxpy", "vppfl")
    assert not old.exists() and fresh.exists()


# ------------------------------------------------------------------------ errors ----

def test_compile_error_names_message_and_kept_source(cache):
    src = unique("CG_EXPORT int broken(int x) { return x +; }\n")
    with pytest.raises(_C.CompileError, match="error") as e:
        _C._cg_build(src, "broken", "ii", "my_graph")
    assert isinstance(e.value, RuntimeError)
    assert "error:" in e.value.output and "my_graph" in str(e.value)
    assert e.value.source_path in str(e.value)
    with open(e.value.source_path) as f:
        assert f.read() == src
    assert entries(cache / "kernels") == ([], [])


def test_missing_symbol(cache):
    with pytest.raises(AttributeError, match="no symbol 'nope'.*CG_EXPORT"):
        _C._cg_build(unique(SAXPY), "nope", "v")


def test_hidden_symbol_is_not_exported(cache):
    src = unique("int helper(int x) { return x; }\n")
    with pytest.raises(AttributeError, match="helper"):
        _C._cg_build(src, "helper", "ii")


@pytest.mark.parametrize("sig", ["", "x", "vv", "pvp", "vq", "V", "v" + "l" * 256])
def test_bad_signature_is_a_value_error(cache, sig):
    with pytest.raises(ValueError, match="signature"):
        _C._cg_build(SAXPY, "saxpy", sig)


def test_call_argument_checks(cache):
    fn = _C._cg_build(SAXPY, "saxpy", "vppfl")
    with pytest.raises(TypeError, match="takes 4 arguments, got 3"):
        _C._cg_call(fn, 0, 0, 1.0)
    with pytest.raises(TypeError, match="argument 0.*must be an int"):
        _C._cg_call(fn, 1.5, 0, 1.0, 0)
    with pytest.raises(TypeError, match="argument 2.*float or int"):
        _C._cg_call(fn, 0, 0, "2", 0)
    with pytest.raises(TypeError, match="handle"):
        _C._cg_call(object())


def test_every_signature_letter_round_trips(cache):
    src = unique(r"""
    #include <stdint.h>
    CG_EXPORT int64_t l(int64_t a) { return a - 1; }
    CG_EXPORT int32_t i(int32_t a) { return a + 1; }
    CG_EXPORT double d(double a, int64_t b) { return a * b; }
    CG_EXPORT float f(float a) { return a / 3.0f; }
    CG_EXPORT void *p(void *a) { return (char *)a + 8; }
    CG_EXPORT int32_t many(int32_t a, int64_t b, double c, float d, void *e, int32_t f, int64_t g,
                           double h, float i, int32_t j) {
        return a + (int32_t)b + (int32_t)c + (int32_t)d + (e != 0) + f + (int32_t)g + (int32_t)h + (int32_t)i + j;
    }
    """)
    call = lambda sym, sig, *a: _C._cg_call(_C._cg_build(src, sym, sig), *a)
    assert call("l", "ll", -2**63 + 1) == -2**63
    assert call("i", "ii", -2**31) == -2**31 + 1
    assert call("i", "ii", -5) == -4
    assert call("d", "ddl", 1.5, 3) == 4.5
    assert call("f", "ff", 1.0) == float(np.float32(1.0) / np.float32(3.0))
    assert call("p", "pp", 4096) == 4096 + 8
    assert call("many", "iildfpildfi", 1, 2, 3.0, 4.0, 1, 6, 7, 8.0, 9.0, 10) == 51
    with pytest.raises(OverflowError):
        call("i", "ii", 2**31)
    with pytest.raises(OverflowError):
        call("l", "ll", 2**63)


def test_missing_compiler(cache, monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent/shapejit-cc")
    with pytest.raises(_C.CompileError, match="not found"):
        _C._cg_build(unique(SAXPY), "saxpy", "vppfl")


def test_compiler_timeout_kills_it(cache, tmp_path, monkeypatch):
    # the kernel build's own timeout: a cpu_target other than native (the AVX2 set-up's
    # SHAPEJIT_CPU_TARGET, which wins over the knob) would first run a probe through the
    # same slow compiler
    monkeypatch.delenv("SHAPEJIT_CPU_TARGET", raising=False)
    monkeypatch.setattr(shapejit.config, "cpu_target", "native")
    slow = tmp_path / "slowcc"
    slow.write_text('#!/bin/sh\ncase " $* " in *" -E "*) exec cc "$@";; esac\nsleep 30\n')
    slow.chmod(0o755)
    monkeypatch.setenv("CC", str(slow))
    monkeypatch.setenv("SHAPEJIT_CC_TIMEOUT", "0.5")
    t0 = time.time()
    with pytest.raises(_C.CompileError, match="timed out after 0.5 s"):
        _C._cg_build(unique(SAXPY), "saxpy", "vppfl")
    assert time.time() - t0 < 10
    assert entries(cache / "kernels") == ([], [])
    monkeypatch.setenv("SHAPEJIT_CC_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="SHAPEJIT_CC_TIMEOUT"):
        _C._cg_build(unique(SAXPY), "saxpy", "vppfl")


def test_key_depends_on_compiler(cache, tmp_path, monkeypatch):
    """Another $CC is another key: its entries never answer for the default compiler."""
    src = unique(SAXPY)
    _C._cg_build(src, "saxpy", "vppfl")
    wrapper = tmp_path / "mycc"
    wrapper.write_text('#!/bin/sh\nexec cc "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CC", str(wrapper))
    _C._cg_forget()
    before = counters()
    run_saxpy(_C._cg_build(src, "saxpy", "vppfl"))
    assert delta(before) == {"misses": 1, "compiles": 1}
    assert len(entries(cache / "kernels")[0]) == 2


# -------------------------------------------------------------------- size cap ----

def _entry_bytes(kernels, name):
    key = name[:-3]
    return sum(os.lstat(kernels / (key + ext)).st_size for ext in (".so", ".c") if (kernels / (key + ext)).exists())


def test_size_cap_evicts_the_least_recently_used(cache, monkeypatch):
    """Over the cap, the entries used longest ago go first (a use refreshes an entry),
    .so and .c together, never the one just built; what is left runs, what went is
    rebuilt on demand."""
    k = "CG_EXPORT long k(void) { return %d; }\n"
    srcs = {c: unique(k % i) for i, c in enumerate("ABCD", 1)}
    kernels = cache / "kernels"
    names = {}
    for c in "ABC":
        _C._cg_build(srcs[c], "k", "l")
        (names[c],) = set(entries(kernels)[0]) - set(names.values())
    for t, c in enumerate("ABC"):             # used in this order, long ago
        os.utime(kernels / names[c], (1000 + t, 1000 + t))
    _C._cg_forget()
    assert _C._cg_call(_C._cg_build(srcs["A"], "k", "l")) == 1    # A is used again: now the newest
    sizes = {c: _entry_bytes(kernels, names[c]) for c in "ABC"}
    # D makes four entries: over the cap by about one; removing B (the oldest) is enough
    total4 = sum(sizes.values()) + sizes["C"]
    monkeypatch.setenv("SHAPEJIT_KERNEL_CACHE_MAX_BYTES", str(int((total4 - sizes["B"]) / 0.9) + 64))
    before = counters()
    assert _C._cg_call(_C._cg_build(srcs["D"], "k", "l")) == 4
    assert delta(before) == {"misses": 1, "compiles": 1, "evictions": 1}
    left = os.listdir(kernels)
    assert names["B"] not in left and names["B"][:-3] + ".c" not in left
    for c in "AC":
        assert names[c] in left and names[c][:-3] + ".c" in left
    _C._cg_forget()
    before = counters()
    assert [_C._cg_call(_C._cg_build(srcs[c], "k", "l")) for c in "ACD"] == [1, 3, 4]
    assert delta(before) == {"hits": 3}
    assert _C._cg_call(_C._cg_build(srcs["B"], "k", "l")) == 2   # rebuilt


def test_size_cap_knob(cache):
    """The knob sets the cap when the variable is unset; the newest entry always stays."""
    old = shapejit.config.kernel_cache_max_bytes
    shapejit.config.kernel_cache_max_bytes = 1
    try:
        k = "CG_EXPORT long k(void) { return %d; }\n"
        for i in range(3):
            assert _C._cg_call(_C._cg_build(unique(k % i), "k", "l")) == i
            assert len(entries(cache / "kernels")[0]) == 1
    finally:
        shapejit.config.kernel_cache_max_bytes = old


@pytest.mark.parametrize("value", ["lots", "-1", "1X", "2GB5", ""])
def test_size_cap_variable_malformed(cache, monkeypatch, value):
    monkeypatch.setenv("SHAPEJIT_KERNEL_CACHE_MAX_BYTES", value)
    src = unique(SAXPY)
    if value == "":   # unset in effect: the knob's cap
        run_saxpy(_C._cg_build(src, "saxpy", "vppfl"))
        return
    with pytest.raises(ValueError, match="SHAPEJIT_KERNEL_CACHE_MAX_BYTES='%s'" % value):
        _C._cg_build(src, "saxpy", "vppfl")
    for good, size in (("2K", 2048), ("3MiB", 3 << 20), ("1G", 1 << 30), ("0", 0)):
        monkeypatch.setenv("SHAPEJIT_KERNEL_CACHE_MAX_BYTES", good)
        run_saxpy(_C._cg_build(unique(SAXPY), "saxpy", "vppfl"))


CAP_CHILD = textwrap.dedent("""
    import sys, uuid
    from shapejit import _C
    k = "CG_EXPORT long k(void) { return %d; }\\n"
    for i in range(int(sys.argv[1]), int(sys.argv[1]) + 8):
        src = "/* %s */\\n" % uuid.uuid4().hex + k % i
        for _ in range(2):   # built (evicting others), then found again or rebuilt
            fn = _C._cg_build(src, "k", "l")
            assert _C._cg_call(fn) == i
            _C._cg_forget()
    print("ok")
""")


def test_size_cap_with_two_processes_evicting_at_once(cache, tmp_path):
    """Two processes build and load under a cap of about two entries: each evicts the
    other's entries while it may be loading them; every load still runs the right code."""
    env = dict(os.environ, SHAPEJIT_CACHE_DIR=str(cache), SHAPEJIT_KERNEL_CACHE_MAX_BYTES="40K",
               PYTHONPATH=PACKAGE_PARENT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [subprocess.Popen([sys.executable, "-c", CAP_CHILD, str(base)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for base in (0, 100)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0 and out.strip() == "ok", err[-2000:]
    assert sum(os.lstat(cache / "kernels" / n).st_size for n in os.listdir(cache / "kernels")
               if not n.startswith(".")) <= 40 * 1024 * 3
