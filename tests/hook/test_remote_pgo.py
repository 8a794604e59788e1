"""Remote PGO (a job's profile in Redis) and code identity by file content.

A module-scoped fixture starts Debian's redis-server on a free localhost port (no
persistence, a temp dir); each test empties it. The end-to-end runs use numpy in a fresh
interpreter (no torch import: about a second each).
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import numpy as np
import pytest

import shapejit
from repo import package_parent
from shapejit import pgo, pgo_remote

# children import the same shapejit (and _C: in-place, or the sanitized build) as this process
PACKAGE_PARENT = package_parent()
REDIS_SERVER = shutil.which("redis-server") or (
    "/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else None)

SCRIPT = """\
import sys, numpy as np, shapejit
def f(a):
    return a * a.shape[0]
cf = shapejit.compile(f)
for n in map(int, sys.argv[1:]):
    a = np.arange(n, dtype=np.float64)
    np.testing.assert_allclose(cf(a), f(a))
print(shapejit.stats()["graphs"], "redis" in sys.modules)
"""


def tensor(size, stride=None):
    return {"kind": "tensor", "size": list(size),
            "stride": list(stride) if stride is not None else [None] * len(size)}


def scalar(value):
    return {"kind": "scalar", "value": value}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ping(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@pytest.fixture(scope="module")
def redis_port(tmp_path_factory):
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (Debian package redis-server; "
                    "scripts/setup-env installs it)")
    try:
        import redis  # noqa: F401
    except ImportError:
        pytest.skip("the redis client is not installed (pip install redis==8.1.0)")
    for _ in range(3):   # a free port can be taken between choosing and binding it
        port = free_port()
        d = tmp_path_factory.mktemp("redis")
        # the sanitizer run preloads libasan for Python; the server is not ours to check
        env = {k: v for k, v in os.environ.items()
               if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS")}
        proc = subprocess.Popen(
            [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(d)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and proc.poll() is None and not _ping(port):
            time.sleep(0.05)
        if proc.poll() is None and _ping(port):
            break
        proc.kill()
        proc.wait()
    else:
        pytest.fail("redis-server did not start")
    yield port
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture
def client(redis_port):
    import redis
    c = redis.Redis(host="127.0.0.1", port=redis_port, socket_timeout=5)
    c.flushall()
    yield c
    c.close()


@pytest.fixture
def env(tmp_path, monkeypatch):
    """Job "job1", the local cache under tmp_path, local PGO off, remote knob off."""
    monkeypatch.setenv("SHAPEJIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TORCH_COMPILE_JOB_ID", "job1")
    monkeypatch.delenv("TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO", raising=False)
    monkeypatch.delenv("TORCH_LOGS", raising=False)
    pgo._reset()
    with shapejit.config.patch(automatic_dynamic_remote_pgo=False):
        yield tmp_path
    pgo._reset()


@pytest.fixture
def remote(env, client, redis_port, monkeypatch):
    """env + remote PGO on against the test server."""
    monkeypatch.setenv("TORCHINDUCTOR_REDIS_HOST", "127.0.0.1")
    monkeypatch.setenv("TORCHINDUCTOR_REDIS_PORT", str(redis_port))
    with shapejit.config.patch(automatic_dynamic_remote_pgo=True):
        yield client


def no_warnings(fn, *args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn(*args)
    assert [str(w.message) for w in caught] == []
    return result


def run_child(script, sizes, cache, **extra):
    env = dict(os.environ, PYTHONPATH=PACKAGE_PARENT, SHAPEJIT_CACHE_DIR=str(cache),
               TORCH_COMPILE_JOB_ID="job1", TORCH_LOGS="dynamic")
    for name in ("TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO",
                 "TORCH_DYNAMO_AUTOMATIC_DYNAMIC_REMOTE_PGO"):
        env.pop(name, None)
    env.update(extra)
    r = subprocess.run([sys.executable, str(script)] + [str(n) for n in sizes], env=env,
                       cwd=str(script.parent), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    graphs, has_redis = r.stdout.split()
    return int(graphs), has_redis == "True", r.stderr


def write_script(directory):
    directory.mkdir(parents=True, exist_ok=True)
    p = directory / "model.py"
    p.write_text(SCRIPT)
    return p


def remote_env(port):
    return {"TORCH_DYNAMO_AUTOMATIC_DYNAMIC_REMOTE_PGO": "1",
            "TORCHINDUCTOR_REDIS_HOST": "127.0.0.1", "TORCHINDUCTOR_REDIS_PORT": str(port)}


# --- end to end: two processes -------------------------------------------------------

def test_profile_written_by_one_process_makes_the_next_compile_dynamic_at_once(
        tmp_path, client, redis_port):
    script = write_script(tmp_path / "src")
    graphs, has_redis, err = run_child(script, (3, 4, 5), tmp_path / "cache1",
                                       **remote_env(redis_port))
    assert graphs == 2 and has_redis        # static, then automatic dynamic
    assert "get_remote_code_state" in err and "miss" in err
    assert "put_remote_code_state_: wrote" in err
    # a fresh machine (no local cache) starts dynamic
    graphs, _, err = run_child(script, (6, 7, 8), tmp_path / "cache2", **remote_env(redis_port))
    assert graphs == 1
    assert "get_remote_code_state" in err and "hit, 1 entries" in err
    assert not (tmp_path / "cache2" / "pgo").exists()     # local PGO stayed off
    # the entry: plain JSON keyed by the content hash, not the path
    (field, value), = client.hgetall("shapejit-pgo:job1").items()
    key = json.loads(field)
    assert key[0].startswith("sha256:") and key[1:] == [2, "f", None]
    entry = json.loads(value)
    assert entry["job_id"] == "job1" and entry["version"] == 2
    assert entry["code"]["state"] == {"L['a']": tensor([None])}
    # another job id does not see it
    graphs, _, _ = run_child(script, (6, 7, 8), tmp_path / "cache3", TORCH_COMPILE_JOB_ID="job2",
                             **remote_env(redis_port))
    assert graphs == 2


def test_redis_is_not_imported_when_remote_pgo_is_off(tmp_path):
    script = write_script(tmp_path / "src")
    graphs, has_redis, err = run_child(script, (3, 4, 5), tmp_path / "cache",
                                       TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO="1")
    assert graphs == 2 and not has_redis
    assert "put_local_code_state_: wrote" in err


@pytest.mark.parametrize("mode", ["local", "remote"])
def test_moved_file_finds_its_profile(tmp_path, mode, request):
    extra = {"TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO": "1"}
    caches = [tmp_path / "cache"] * 2
    if mode == "remote":
        request.getfixturevalue("client")
        extra = remote_env(request.getfixturevalue("redis_port"))
        caches = [tmp_path / "cache1", tmp_path / "cache2"]
    first = write_script(tmp_path / "checkout1")
    moved = write_script(tmp_path / "elsewhere" / "checkout2")   # same content, another path
    assert run_child(first, (3, 4, 5), caches[0], **extra)[0] == 2
    graphs, _, err = run_child(moved, (6, 7, 8), caches[1], **extra)
    assert graphs == 1, err
    # edited content is another code: it starts over
    edited = tmp_path / "checkout3" / "model.py"
    edited.parent.mkdir()
    edited.write_text(SCRIPT.replace("a * a.shape[0]", "a * a.shape[0] + 1"))
    assert run_child(edited, (6, 7, 8), caches[1], **extra)[0] == 2


# --- merging with the local profile --------------------------------------------------

def test_local_and_remote_profiles_merge(remote, monkeypatch, tmp_path):
    src = tmp_path / "m.py"
    src.write_text("def f(x, n):\n    return x\n")
    monkeypatch.setenv("TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO", "1")
    # the local file knows x varied; the server knows n varied
    with shapejit.config.patch(automatic_dynamic_remote_pgo=False):
        pgo.record(str(src), 1, "f", {"L['x']": tensor([None, 4]), "L['n']": scalar(3)})
    monkeypatch.delenv("TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO")
    pgo._reset()
    pgo.record(str(src), 1, "f", {"L['x']": tensor([2, 4]), "L['n']": scalar(None)})
    pgo._reset()
    monkeypatch.setenv("TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO", "1")
    both = {"L['x']": tensor([None, 4]), "L['n']": scalar(None)}
    assert no_warnings(pgo.lookup, str(src), 1, "f") == both
    # a record writes the join to both sides
    pgo.record(str(src), 1, "f", {"L['y']": scalar(1)})
    both["L['y']"] = scalar(1)
    (value,) = remote.hgetall("shapejit-pgo:job1").values()
    assert json.loads(value)["code"]["state"] == both
    doc = json.loads(open(pgo.path()).read())
    assert doc["codes"][0]["state"] == both


def test_concurrent_records_merge_on_the_server(remote):
    pgo.record("/m.py", 1, "f", {"L['x']": tensor([2])})
    # another process wrote the same code meanwhile (this one's view is stale)
    other = pgo_remote.Remote("job1")
    other.put(("/m.py", 1, "f", None), "/m.py", {"L['x']": tensor([2]), "L['n']": scalar(5)})
    pgo.record("/m.py", 1, "f", {"L['x']": tensor([3])})
    (value,) = remote.hgetall("shapejit-pgo:job1").values()
    assert json.loads(value)["code"]["state"] == {"L['x']": tensor([None]),
                                                  "L['n']": scalar(5)}


# --- faults: never an exception, never a hang ----------------------------------------

def compile_and_check(sizes=(3, 4, 5)):
    shapejit.reset()   # compile afresh (the code object is the same at every call)

    def f(a):
        return a * a.shape[0] + 1
    cf = shapejit.compile(f)
    for n in sizes:
        a = np.arange(n, dtype=np.float64)
        np.testing.assert_allclose(cf(a), f(a))


def test_server_down_warns_once_and_compiles_locally(env, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_REDIS_HOST", "127.0.0.1")
    monkeypatch.setenv("TORCHINDUCTOR_REDIS_PORT", str(free_port()))   # nothing listens
    with shapejit.config.patch(automatic_dynamic_remote_pgo=True):
        t0 = time.monotonic()
        with pytest.warns(UserWarning) as caught:
            compile_and_check()
        assert time.monotonic() - t0 < 10
        messages = [str(w.message) for w in caught if "remote PGO" in str(w.message)]
        assert len(messages) == 1, messages
        assert "cannot reach the server" in messages[0] and "local profile only" in messages[0]
        no_warnings(compile_and_check)    # off for the rest of the process: no new warning


def test_bad_port_warns_and_compiles_locally(env, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_REDIS_PORT", "six")
    with shapejit.config.patch(automatic_dynamic_remote_pgo=True):
        with pytest.warns(UserWarning, match="TORCHINDUCTOR_REDIS_PORT='six' is not a port"):
            assert pgo.lookup("/m.py", 1, "f") is None
        no_warnings(pgo.record, "/m.py", 1, "f", {"L['x']": tensor([2])})


class SilentServer:
    """Accepts connections and never answers (or answers ``reply`` once to anything)."""

    def __init__(self, reply=None):
        self.reply = reply
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            if self.reply is not None:
                try:
                    conn.recv(4096)
                    conn.sendall(self.reply)
                except OSError:
                    pass

    def close(self):
        self.sock.close()
        for c in self.conns:
            c.close()


@pytest.mark.parametrize("reply,problem", [
    (None, "no answer within 0.3s"),
    (b"HTTP/1.1 400 Bad Request\r\n\r\n", "unexpected reply"),
], ids=["silent", "not redis"])
def test_slow_or_foreign_server_times_out_with_a_warning(env, monkeypatch, reply, problem):
    server = SilentServer(reply)
    try:
        monkeypatch.setenv("TORCHINDUCTOR_REDIS_HOST", "127.0.0.1")
        monkeypatch.setenv("TORCHINDUCTOR_REDIS_PORT", str(server.port))
        monkeypatch.setenv("SHAPEJIT_REDIS_TIMEOUT", "0.3")
        with shapejit.config.patch(automatic_dynamic_remote_pgo=True):
            t0 = time.monotonic()
            with pytest.warns(UserWarning) as caught:
                compile_and_check()
            assert time.monotonic() - t0 < 8
            messages = [str(w.message) for w in caught if "remote PGO" in str(w.message)]
            assert len(messages) == 1 and problem in messages[0], messages
            t0 = time.monotonic()
            no_warnings(pgo.record, "/m.py", 1, "f", {"L['x']": tensor([2])})
            assert time.monotonic() - t0 < 0.2     # off: no second timeout
    finally:
        server.close()


FIELD = json.dumps(["/old.py", 1, "f", None])


def entry(**changes):
    e = {"format": "shapejit-pgo", "version": 2, "job_id": "job1",
         "code": {"file": "/old.py", "hash": "/old.py", "line": 1, "name": "f",
                  "closure": None, "state": {"L['x']": tensor([None])}}}
    e.update(changes)
    return json.dumps(e)


BAD_ENTRIES = [
    ("not json", FIELD, "garbage", "not valid JSON"),
    ("truncated", FIELD, entry()[:40], "not valid JSON"),
    ("binary", FIELD, b"\x80\x04\x95pickle", "not valid JSON"),
    ("torch's format", FIELD, json.dumps({"data": "gASVAAAA"}), "format is None"),
    ("another format", FIELD, entry(format="other"), "format is 'other'"),
    ("another version", FIELD, entry(version=1), "version is 1"),
    ("another job", FIELD, entry(job_id="job2"), "belongs to job 'job2'"),
    ("bad state", FIELD, entry(code={"file": "/old.py", "hash": "/old.py", "line": 1,
                                     "name": "f", "closure": None,
                                     "state": {"L['x']": {"kind": "list"}}}), "kind 'list'"),
    ("field mismatch", json.dumps(["/old.py", 2, "f", None]), entry(), "does not match"),
    ("field not json", "/old.py:1:f", entry(), "field is not JSON"),
]


@pytest.mark.parametrize("field,value,problem", [b[1:] for b in BAD_ENTRIES],
                         ids=[b[0] for b in BAD_ENTRIES])
def test_corrupt_or_foreign_entry_is_ignored_then_replaced(remote, field, value, problem):
    remote.hset("shapejit-pgo:job1", field, value)
    with pytest.warns(UserWarning) as caught:
        assert pgo.lookup("/old.py", 1, "f") is None
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1 and problem in messages[0] and "ignoring" in messages[0], messages
    # compiling goes on, and a record of that code replaces a bad entry of its field
    compile_and_check()
    pgo.record("/old.py", 1, "f", {"L['x']": tensor([7])})
    got = remote.hget("shapejit-pgo:job1", json.dumps(["/old.py", 1, "f", None]))
    assert json.loads(got)["code"]["state"] == {"L['x']": tensor([7])}


def test_key_of_another_type_turns_remote_off(remote):
    remote.set("shapejit-pgo:job1", "someone else's")
    with pytest.warns(UserWarning, match="WRONGTYPE"):
        assert pgo.lookup("/m.py", 1, "f") is None
    no_warnings(pgo.record, "/m.py", 1, "f", {"L['x']": tensor([2])})
    assert remote.get("shapejit-pgo:job1") == b"someone else's"


def test_bad_timeout_value_warns_and_uses_the_default(env, monkeypatch):
    monkeypatch.setenv("SHAPEJIT_REDIS_TIMEOUT", "soon")
    with pytest.warns(UserWarning, match="SHAPEJIT_REDIS_TIMEOUT='soon'"):
        r = pgo_remote.Remote("job1")
    assert r.timeout == pgo_remote.DEFAULT_TIMEOUT_S


def test_missing_client_warns(remote, monkeypatch):
    monkeypatch.setitem(sys.modules, "redis", None)    # import redis raises ImportError
    with pytest.warns(UserWarning, match="redis client is not installed"):
        assert pgo.lookup("/m.py", 1, "f") is None


# --- code identity -------------------------------------------------------------------

def test_code_key_is_the_content_not_the_path(env, monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO", "1")
    a, b, c = tmp_path / "a.py", tmp_path / "b" / "a.py", tmp_path / "c.py"
    b.parent.mkdir()
    a.write_text("x = 1\n")
    b.write_text("x = 1\n")
    c.write_text("x = 2\n")
    pgo.record(str(a), 1, "f", {"L['x']": tensor([None])})
    assert pgo.lookup(str(b), 1, "f") == {"L['x']": tensor([None])}
    assert pgo.lookup(str(c), 1, "f") is None
    assert pgo.lookup(str(a), 2, "f") is None and pgo.lookup(str(a), 1, "g") is None
    assert pgo.format_state().startswith("%s:1:f:\n" % a)   # the path first seen is shown


def test_old_path_keyed_file_is_still_read(env, monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO", "1")
    src = tmp_path / "m.py"
    src.write_text("def f(x):\n    return x\n")
    f = tmp_path / "cache" / "pgo" / "code_state_job1.json"
    f.parent.mkdir(parents=True)
    f.write_text(json.dumps({"format": "shapejit-pgo", "version": 1, "job_id": "job1",
                             "codes": [{"file": str(src), "line": 1, "name": "f",
                                        "state": {"L['x']": tensor([None])}}]}))
    moved = tmp_path / "moved.py"
    shutil.copy(src, moved)
    assert no_warnings(pgo.lookup, str(moved), 1, "f") == {"L['x']": tensor([None])}
    pgo.record(str(src), 1, "f", {"L['n']": scalar(1)})   # rewritten as version 2
    assert json.loads(f.read_text())["version"] == 2


def _make(g):
    def inner(x):
        return g(x)
    return inner


def _g1(x):
    return x


def _g2(x):
    return x


def test_closure_key():
    assert pgo.closure_key(None) is None and pgo.closure_key(()) is None
    k1 = pgo.closure_key(_make(_g1).__closure__)
    assert k1 == pgo.closure_key(_make(_g1).__closure__)    # same functions: same key
    assert k1 != pgo.closure_key(_make(_g2).__closure__)    # another function: another key
    assert pgo.closure_key(_make(3).__closure__) == pgo.closure_key(_make("s").__closure__)
    # stable across processes (no hash randomisation in it)
    # the child imports this file, which imports from tests/support
    import repo
    path = [os.path.dirname(os.path.abspath(f)) for f in (__file__, repo.__file__)]
    code = ("import sys; sys.path[:0] = %r\n"
            "import test_remote_pgo as t\n"
            "from shapejit import pgo\n"
            "print(pgo.closure_key(t._make(t._g1).__closure__))"
            % ([PACKAGE_PARENT] + path))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONHASHSEED="123"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == k1


def test_closures_of_one_code_with_other_functions_are_other_codes(env, monkeypatch):
    monkeypatch.setenv("TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO", "1")
    code = _make(_g1).__code__
    pgo.record(code.co_filename, code.co_firstlineno, code.co_name, {"L['x']": tensor([None])},
               _make(_g1).__closure__)
    assert pgo.lookup(code.co_filename, code.co_firstlineno, code.co_name,
                      _make(_g1).__closure__) == {"L['x']": tensor([None])}
    assert pgo.lookup(code.co_filename, code.co_firstlineno, code.co_name,
                      _make(_g2).__closure__) is None
    assert pgo.lookup(code.co_filename, code.co_firstlineno, code.co_name) is None


def test_cli_shows_the_remote_profile(remote, capsys, monkeypatch):
    assert pgo.main(["--remote"]) == 1
    assert "no remote PGO profile for job 'job1'" in capsys.readouterr().err
    pgo.record("/src/m.py", 3, "f", {"L['x']": tensor([None, 4]), "L['n']": scalar(2)})
    assert pgo.main(["--remote"]) == 0
    assert capsys.readouterr().out == (
        "/src/m.py:3:f:\n  L['n']: scalar 2\n  L['x']: tensor size=[?, 4] stride=[?, ?]\n")
    monkeypatch.setenv("TORCHINDUCTOR_REDIS_PORT", str(free_port()))
    with pytest.warns(UserWarning, match="cannot reach"):
        assert pgo.main(["--remote"]) == 1
    assert "cannot read the remote PGO profile" in capsys.readouterr().err


def test_unresolvable_host_warns(env, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_REDIS_HOST", "no-such-host.invalid")
    with shapejit.config.patch(automatic_dynamic_remote_pgo=True):
        t0 = time.monotonic()
        with pytest.warns(UserWarning, match="no-such-host.invalid"):
            assert pgo.lookup("/m.py", 1, "f") is None
        assert time.monotonic() - t0 < 10


def test_resolver_that_hangs_is_bounded(env, monkeypatch):
    real = socket.getaddrinfo

    def slow(host, *args, **kwargs):
        if host == "slow-dns.test":
            time.sleep(3)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", slow)
    monkeypatch.setenv("TORCHINDUCTOR_REDIS_HOST", "slow-dns.test")
    monkeypatch.setenv("SHAPEJIT_REDIS_TIMEOUT", "0.3")
    with shapejit.config.patch(automatic_dynamic_remote_pgo=True):
        t0 = time.monotonic()
        with pytest.warns(UserWarning, match="took more than 0.3s"):
            assert pgo.lookup("/m.py", 1, "f") is None
        assert time.monotonic() - t0 < 2


CLOSURE_SCRIPT = """\
import sys, numpy as np, shapejit
def scale(a):
    return a * 2
def make(g):
    def f(a):
        return g(a) * a.shape[0]
    return f
f = make(scale)
cf = shapejit.compile(f)
for n in map(int, sys.argv[1:]):
    a = np.arange(n, dtype=np.float64)
    np.testing.assert_allclose(cf(a), f(a))
print(shapejit.stats()["graphs"], "redis" in sys.modules)
"""


def test_closure_function_keeps_its_profile_across_processes(tmp_path):
    script = tmp_path / "m.py"
    script.write_text(CLOSURE_SCRIPT)
    extra = {"TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO": "1"}
    assert run_child(script, (3, 4, 5), tmp_path / "cache", **extra)[0] == 2
    assert run_child(script, (6, 7, 8), tmp_path / "cache", **extra)[0] == 1
    doc = json.loads((tmp_path / "cache" / "pgo" / "code_state_job1.json").read_text())
    (code,) = doc["codes"]
    assert code["name"] == "f" and code["closure"].startswith("sha256:")


# --- remote kernel cache -------------------------------------------------------------

SECRET = "test-secret-0123456789"
KERNEL = "CG_EXPORT long k(void) { return %d; }\n"


def unique_kernel(n):
    import uuid
    return "/* %s */\n%s" % (uuid.uuid4().hex, KERNEL % n)


def use_cache_dir(monkeypatch, path):
    """A fresh machine: another cache root, and a memo that forgot earlier builds."""
    from shapejit import _C
    monkeypatch.setenv("SHAPEJIT_CACHE_DIR", str(path))
    _C._cg_forget()


def compiles():
    from shapejit import _C
    return _C._cg_cache_info()["compiles"]


@pytest.fixture
def kremote(client, redis_port, monkeypatch, tmp_path):
    from shapejit import kernel_remote
    monkeypatch.setenv("TORCHINDUCTOR_REDIS_HOST", "127.0.0.1")
    monkeypatch.setenv("TORCHINDUCTOR_REDIS_PORT", str(redis_port))
    monkeypatch.setenv("SHAPEJIT_KERNEL_REMOTE_SECRET", SECRET)
    monkeypatch.delenv("SHAPEJIT_CC_TIMEOUT", raising=False)
    use_cache_dir(monkeypatch, tmp_path / "machine1")
    kernel_remote._reset()
    with shapejit.config.patch(kernel_remote_cache=True):
        yield client
    kernel_remote._reset()
    from shapejit import _C
    _C._cg_forget()


def build(src, n):
    from shapejit import _C
    assert _C._cg_call(_C._cg_build(src, "k", "l")) == n


def test_kernel_from_the_server_is_not_compiled_again(kremote, monkeypatch, tmp_path):
    from shapejit import kernel_remote
    src = unique_kernel(7)
    before = compiles()
    build(src, 7)
    assert compiles() == before + 1 and kernel_remote.stats["stored"] == 1
    (key,) = kremote.keys("shapejit-kernel:*")
    assert kremote.get(key).startswith(kernel_remote.MAGIC)
    use_cache_dir(monkeypatch, tmp_path / "machine2")
    no_warnings(build, src, 7)
    assert compiles() == before + 1 and kernel_remote.stats["fetched"] == 1


def _tamper(kind, value, client, key):
    from shapejit import kernel_remote
    if kind == "truncated":
        return value[:-5]
    if kind == "flipped byte":
        return value[:-1] + bytes([value[-1] ^ 1])
    if kind == "garbage":
        return b"not a kernel"
    if kind == "another secret":
        payload = value[len(kernel_remote.MAGIC) + 40:]
        return kernel_remote.pack(b"another-secret-value", key.decode()[len("shapejit-kernel:"):],
                                  "ignored", payload)
    raise AssertionError(kind)


@pytest.mark.parametrize("kind,problem", [
    ("truncated", "length is wrong"), ("flipped byte", "MAC does not verify"),
    ("garbage", "not a shapejit kernel entry"), ("another secret", "MAC does not verify"),
])
def test_tampered_kernel_is_refused_and_compiled_here(kremote, monkeypatch, tmp_path, kind,
                                                      problem):
    from shapejit import kernel_remote
    src = unique_kernel(11)
    build(src, 11)
    (key,) = kremote.keys("shapejit-kernel:*")
    kremote.set(key, _tamper(kind, kremote.get(key), kremote, key))
    use_cache_dir(monkeypatch, tmp_path / "machine2")
    before = compiles()
    with pytest.warns(UserWarning, match=problem):
        build(src, 11)
    assert compiles() == before + 1 and kernel_remote.stats["refused"] == 1
    # the local compile stored a good entry again
    assert kremote.get(key).startswith(kernel_remote.MAGIC) and kernel_remote.stats["stored"] == 2


def test_kernel_of_another_key_is_refused(kremote, monkeypatch, tmp_path):
    one, two = unique_kernel(1), unique_kernel(2)
    build(one, 1)
    (key_one,) = kremote.keys("shapejit-kernel:*")
    build(two, 2)
    (key_two,) = set(kremote.keys("shapejit-kernel:*")) - {key_one}
    kremote.set(key_one, kremote.get(key_two))   # a valid kernel under the wrong name
    use_cache_dir(monkeypatch, tmp_path / "machine2")
    with pytest.warns(UserWarning, match="MAC does not verify"):
        build(one, 1)


def test_kernel_cache_without_a_secret_stays_off(kremote, monkeypatch, tmp_path):
    monkeypatch.setenv("SHAPEJIT_KERNEL_REMOTE_SECRET", "")
    with pytest.warns(UserWarning, match="SHAPEJIT_KERNEL_REMOTE_SECRET is not set"):
        build(unique_kernel(3), 3)
    assert kremote.keys("shapejit-kernel:*") == []


def test_kernel_cache_is_off_by_default(kremote, monkeypatch, tmp_path):
    with shapejit.config.patch(kernel_remote_cache=False):
        no_warnings(build, unique_kernel(4), 4)
    assert kremote.keys("shapejit-kernel:*") == []


def test_kernel_cache_server_down_warns_once(kremote, monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHINDUCTOR_REDIS_PORT", str(free_port()))
    before = compiles()
    with pytest.warns(UserWarning) as caught:
        build(unique_kernel(5), 5)
        build(unique_kernel(6), 6)
    messages = [str(w.message) for w in caught if "remote kernel cache" in str(w.message)]
    assert len(messages) == 1 and "cannot reach the server" in messages[0], messages
    assert "compiling kernels locally" in messages[0]
    assert compiles() == before + 2


def test_compiled_graph_kernels_cross_machines(tmp_path, client, redis_port):
    """End to end: a graph compiled by the cpu backend on one machine runs on a second
    without invoking the C compiler."""
    script = tmp_path / "k.py"
    script.write_text(textwrap.dedent("""\
        import numpy as np, shapejit
        from shapejit import _C, kernel_remote
        def f(a):
            return np.sin(a) * 2 + 1
        cf = shapejit.compile(f, backend="cpu")
        a = np.arange(5, dtype=np.float64)
        np.testing.assert_allclose(cf(a), f(a))
        print(_C._cg_cache_info()["compiles"], kernel_remote.stats["fetched"])
        """))
    env = dict(os.environ, PYTHONPATH=PACKAGE_PARENT, SHAPEJIT_KERNEL_REMOTE_CACHE="1",
               SHAPEJIT_KERNEL_REMOTE_SECRET=SECRET, TORCHINDUCTOR_REDIS_HOST="127.0.0.1",
               TORCHINDUCTOR_REDIS_PORT=str(redis_port))
    outs = []
    for machine in ("m1", "m2"):
        r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           timeout=120, env=dict(env, SHAPEJIT_CACHE_DIR=str(tmp_path / machine)))
        assert r.returncode == 0, r.stderr
        outs.append(r.stdout.split())
    assert outs[0][0] != "0" and outs[0][1] == "0"
    assert outs[1] == ["0", outs[0][0]]
