"""shapejit.pgo: the profile-guided automatic-dynamic store (Python layer only)."""
import io
import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest

from repo import package_parent
from shapejit import pgo

PACKAGE_PARENT = package_parent()
CODE = ("/src/model.py", 12, "forward")


def tensor(size, stride):
    return {"kind": "tensor", "size": list(size), "stride": list(stride)}


def scalar(value):
    return {"kind": "scalar", "value": value}


DYNAMIC = {"kind": "dynamic"}


@pytest.fixture
def env(tmp_path, monkeypatch):
    """PGO on for job "job1", the cache under tmp_path; a fresh module cache."""
    monkeypatch.setenv("SHAPEJIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TORCH_COMPILE_JOB_ID", "job1")
    monkeypatch.setenv("TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO", "1")
    pgo._reset()
    yield tmp_path
    pgo._reset()


def store_file(tmp_path, job="job1"):
    return tmp_path / "cache" / "pgo" / ("code_state_%s.json" % job)


def run_py(code, tmp_path, **extra_env):
    """Run ``code`` in a fresh interpreter with PGO on for job1 under tmp_path."""
    env = dict(os.environ, SHAPEJIT_CACHE_DIR=str(tmp_path / "cache"),
               TORCH_COMPILE_JOB_ID="job1", TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO="1",
               PYTHONPATH=PACKAGE_PARENT)
    env.update(extra_env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=PACKAGE_PARENT,
                          capture_output=True, text=True, timeout=120)


def no_warnings(fn, *args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn(*args)
    assert [str(w.message) for w in caught] == []
    return result


# --- enabling ------------------------------------------------------------------------

@pytest.mark.parametrize("job,flag,on", [
    ("job1", "1", True), ("job1", "true", True), ("job1", "TRUE", True),
    ("job1", "0", False), ("job1", "false", False), ("job1", "", False),
    ("", "1", False), (None, "1", False), ("job1", None, False),
])
def test_enabled(env, monkeypatch, job, flag, on):
    for name, value in (("TORCH_COMPILE_JOB_ID", job),
                        ("TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO", flag)):
        if value is None:
            monkeypatch.delenv(name)
        else:
            monkeypatch.setenv(name, value)
    assert no_warnings(pgo.enabled) is on


def test_disabled_records_nothing_and_looks_up_none(env, monkeypatch):
    pgo.record(*CODE, {"L['x']": tensor([4], [1])})    # on: a file appears
    assert store_file(env).exists()
    monkeypatch.setenv("TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO", "0")
    before = store_file(env).read_bytes()
    assert pgo.lookup(*CODE) is None
    pgo.record(*CODE, {"L['x']": tensor([5], [1])})
    pgo.record("/other.py", 1, "g", {"L['n']": scalar(3)})
    assert store_file(env).read_bytes() == before


def test_disabled_creates_no_directory(env, monkeypatch):
    monkeypatch.delenv("TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO")
    pgo.record(*CODE, {"L['x']": tensor([4], [1])})
    assert pgo.lookup(*CODE) is None
    assert not (env / "cache").exists()


def test_bad_env_value_warns_once_and_is_off(env, monkeypatch):
    monkeypatch.setenv("TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO", "yes")
    with pytest.warns(UserWarning) as caught:
        assert pgo.enabled() is False
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO" in message and "'yes'" in message
    pgo.record(*CODE, {"L['x']": tensor([4], [1])})
    assert no_warnings(pgo.lookup, *CODE) is None   # no second warning, still off
    assert not (env / "cache").exists()


def test_bad_env_value_warns_in_a_fresh_process(tmp_path):
    out = run_py("""
        import warnings
        warnings.simplefilter("always")
        from shapejit import pgo
        pgo.record("f.py", 1, "f", {"L['n']": {"kind": "scalar", "value": 1}})
        print(pgo.lookup("f.py", 1, "f"))
    """, tmp_path, TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO="2")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "None\n"
    assert out.stderr.count("TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO='2'") == 1
    assert not (tmp_path / "cache").exists()


# --- path ----------------------------------------------------------------------------

def test_path_sanitizes_job_id(env, monkeypatch):
    monkeypatch.setenv("TORCH_COMPILE_JOB_ID", "run 7/a:b.c-d_e")
    assert pgo.path() == str(env / "cache" / "pgo" / "code_state_run_7_a_b.c-d_e.json")


def test_path_cache_dir_fallbacks(env, monkeypatch):
    monkeypatch.delenv("SHAPEJIT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(env / "xdg"))
    assert pgo.path() == str(env / "xdg" / "shapejit" / "pgo" / "code_state_job1.json")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(env / "home"))
    assert pgo.path() == str(env / "home" / ".cache" / "shapejit" / "pgo"
                             / "code_state_job1.json")


def test_path_without_job_id_raises(env, monkeypatch):
    monkeypatch.delenv("TORCH_COMPILE_JOB_ID")
    with pytest.raises(RuntimeError, match="TORCH_COMPILE_JOB_ID"):
        pgo.path()


# --- record and lookup ---------------------------------------------------------------

def test_record_then_lookup_in_a_fresh_process(tmp_path):
    out = run_py("""
        from shapejit import pgo
        pgo.record("m.py", 3, "f", {"L['x']": {"kind": "tensor", "size": [4, 8], "stride": [8, 1]},
                                    "L['n']": {"kind": "scalar", "value": 5}})
        pgo.record("m.py", 3, "f", {"L['x']": {"kind": "tensor", "size": [6, 8], "stride": [8, 1]},
                                    "L['n']": {"kind": "scalar", "value": 5}})
    """, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    out = run_py("""
        import json
        from shapejit import pgo
        print(json.dumps(pgo.lookup("m.py", 3, "f"), sort_keys=True))
        print(pgo.lookup("m.py", 4, "f"))
    """, tmp_path)
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.splitlines()
    assert json.loads(first) == {"L['x']": tensor([None, 8], [8, 1]), "L['n']": scalar(5)}
    assert second == "None"


def test_file_format(env):
    pgo.record(*CODE, {"L['y']": scalar(2), "L['x']": tensor([3], [1])})
    pgo.record("/a.py", 1, "g", {"L['m']": DYNAMIC})
    doc = json.loads(store_file(env).read_text())
    # files that cannot be read are keyed by their path (their "hash" is the path)
    assert doc == {
        "format": "shapejit-pgo", "version": 2, "job_id": "job1",
        "codes": [
            {"file": "/a.py", "hash": "/a.py", "line": 1, "name": "g", "closure": None,
             "state": {"L['m']": DYNAMIC}},
            {"file": "/src/model.py", "hash": "/src/model.py", "line": 12, "name": "forward",
             "closure": None,
             "state": {"L['x']": tensor([3], [1]), "L['y']": scalar(2)}},
        ]}


def test_lookup_returns_a_copy(env):
    pgo.record(*CODE, {"L['x']": tensor([3], [1])})
    got = pgo.lookup(*CODE)
    got["L['x']"]["size"][0] = 99
    got["L['z']"] = scalar(1)
    assert pgo.lookup(*CODE) == {"L['x']": tensor([3], [1])}


def test_record_accepts_tuples(env):
    pgo.record(*CODE, {"L['x']": {"kind": "tensor", "size": (2, None), "stride": (1, 2)}})
    assert pgo.lookup(*CODE) == {"L['x']": tensor([2, None], [1, 2])}


@pytest.mark.parametrize("state", [
    [], {"L['x']": 3}, {1: scalar(1)}, {"L['x']": {"kind": "tensor", "size": [2]}},
    {"L['x']": tensor([2], [1, 1])}, {"L['x']": tensor([-1], [1])},
    {"L['x']": scalar(True)}, {"L['x']": scalar(float("nan"))}, {"L['x']": scalar("1.5")}, {"L['x']": {"kind": "list"}},
    {"L['x']": dict(DYNAMIC, value=1)},
])
def test_record_rejects_malformed_state(env, state):
    with pytest.raises(ValueError, match="pgo.record"):
        pgo.record(*CODE, state)
    assert not store_file(env).exists()


def test_record_rejects_bad_key(env):
    with pytest.raises(TypeError):
        pgo.record("f.py", "1", "f", {})
    with pytest.raises(TypeError):
        pgo.lookup(b"f.py", 1, "f")


# --- merge rules ---------------------------------------------------------------------

@pytest.mark.parametrize("first,second,merged", [
    (tensor([4, 8], [8, 1]), tensor([4, 8], [8, 1]), tensor([4, 8], [8, 1])),
    (tensor([4, 8], [8, 1]), tensor([5, 8], [8, 1]), tensor([None, 8], [8, 1])),
    (tensor([None, 8], [8, 1]), tensor([4, 8], [8, 1]), tensor([None, 8], [8, 1])),
    (tensor([4, 8], [8, 1]), tensor([None, 8], [8, 1]), tensor([None, 8], [8, 1])),
    (tensor([4, 8], [8, 1]), tensor([4, 8], [1, 4]), tensor([4, 8], [None, None])),
    (tensor([4, 8], [None, 1]), tensor([4, 8], [8, 1]), tensor([4, 8], [None, 1])),
    (tensor([4], [1]), tensor([4, 1], [1, 1]), DYNAMIC),
    (tensor([], []), tensor([1], [1]), DYNAMIC),
    (tensor([4], [1]), scalar(4), DYNAMIC),
    (scalar(4), tensor([4], [1]), DYNAMIC),
    (DYNAMIC, tensor([4], [1]), DYNAMIC),
    (scalar(3), DYNAMIC, DYNAMIC),
    (DYNAMIC, DYNAMIC, DYNAMIC),
    (scalar(5), scalar(5), scalar(5)),
    (scalar(5), scalar(6), scalar(None)),
    (scalar(None), scalar(5), scalar(None)),
    (scalar(5), scalar(None), scalar(None)),
])
def test_merge_rule(env, first, second, merged):
    pgo.record(*CODE, {"L['a']": first})
    pgo.record(*CODE, {"L['a']": second})
    assert pgo.lookup(*CODE) == {"L['a']": merged}
    pgo._reset()                                    # and as read back from the file
    assert pgo.lookup(*CODE) == {"L['a']": merged}


def test_merge_keeps_sources_of_both_sides_and_codes_apart(env):
    pgo.record(*CODE, {"L['x']": tensor([2], [1])})
    pgo.record(*CODE, {"L['n']": scalar(7)})
    pgo.record(CODE[0], CODE[1] + 1, CODE[2], {"L['x']": tensor([9], [1])})
    assert pgo.lookup(*CODE) == {"L['x']": tensor([2], [1]), "L['n']": scalar(7)}
    assert pgo.lookup(CODE[0], CODE[1] + 1, CODE[2]) == {"L['x']": tensor([9], [1])}


def test_merge_is_order_independent(env):
    states = [scalar(1), scalar(2), scalar(1)]
    for s in states:
        pgo.record("a.py", 1, "f", {"L['n']": s})
    for s in reversed(states):
        pgo.record("b.py", 1, "f", {"L['n']": s})
    assert pgo.lookup("a.py", 1, "f") == pgo.lookup("b.py", 1, "f") == {"L['n']": scalar(None)}


def test_record_merges_with_what_another_process_wrote(env):
    pgo.record(*CODE, {"L['x']": tensor([4], [1])})
    assert pgo.lookup(*CODE) == {"L['x']": tensor([4], [1])}     # cached in this process
    out = run_py("""
        from shapejit import pgo
        pgo.record(%r, %d, %r, {"L['x']": {"kind": "tensor", "size": [5], "stride": [1]}})
        pgo.record("other.py", 1, "g", {"L['n']": {"kind": "scalar", "value": 1}})
    """ % CODE, env)
    assert out.returncode == 0, out.stderr
    pgo.record(*CODE, {"L['y']": scalar(2)})
    doc = json.loads(store_file(env).read_text())
    codes = {(c["file"], c["line"], c["name"]): c["state"] for c in doc["codes"]}
    assert codes == {CODE: {"L['x']": tensor([None], [1]), "L['y']": scalar(2)},
                     ("other.py", 1, "g"): {"L['n']": scalar(1)}}
    assert pgo.lookup("other.py", 1, "g") == {"L['n']": scalar(1)}


def test_concurrent_writers_lose_nothing(env):
    script = """
        import sys
        from shapejit import pgo
        i = int(sys.argv[1])
        for j in range(60):
            pgo.record("f.py", 1, "f", {"L['p%d']" % i: {"kind": "scalar", "value": j % 2}})
    """
    env_vars = dict(os.environ, SHAPEJIT_CACHE_DIR=str(env / "cache"),
                    TORCH_COMPILE_JOB_ID="job1", TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO="1",
                    PYTHONPATH=PACKAGE_PARENT)
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), str(i)],
                              env=env_vars, cwd=PACKAGE_PARENT) for i in range(8)]
    assert [p.wait(timeout=120) for p in procs] == [0] * 8
    assert pgo.lookup("f.py", 1, "f") == {"L['p%d']" % i: scalar(None) for i in range(8)}
    assert os.listdir(store_file(env).parent) == [store_file(env).name]


# --- writing -------------------------------------------------------------------------

def test_writes_only_when_changed(env):
    pgo.record(*CODE, {"L['x']": tensor([4, 8], [8, 1])})
    pgo.record(*CODE, {"L['x']": tensor([5, 8], [8, 1])})
    f = store_file(env)
    before = os.stat(f)
    pgo.record(*CODE, {"L['x']": tensor([None, 8], [8, 1])})   # identical after merge
    pgo.record(*CODE, {"L['x']": tensor([6, 8], [8, 1])})      # already dynamic: no change
    pgo._reset()
    pgo.record(*CODE, {"L['x']": tensor([7, 8], [8, 1])})      # from the file: no change
    after = os.stat(f)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    pgo.record(*CODE, {"L['x']": tensor([7, 9], [9, 1])})      # a change: rewritten
    assert os.stat(f).st_ino != before.st_ino
    assert pgo.lookup(*CODE) == {"L['x']": tensor([None, None], [None, 1])}


def test_atomic_write_leaves_no_temp_files(env):
    for i in range(5):
        pgo.record(*CODE, {"L['x']": tensor([i], [1]), "L['n%d']" % i: scalar(i)})
    assert os.listdir(store_file(env).parent) == [store_file(env).name]
    json.loads(store_file(env).read_text())


def test_failed_replace_keeps_the_old_file_and_warns(env, monkeypatch):
    pgo.record(*CODE, {"L['x']": tensor([4], [1])})
    before = store_file(env).read_bytes()

    def failing_replace(src, dst):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(pgo.os, "replace", failing_replace)
    with pytest.warns(UserWarning, match="cannot write the PGO file .*No space left"):
        pgo.record(*CODE, {"L['x']": tensor([5], [1])})
    assert store_file(env).read_bytes() == before
    assert os.listdir(store_file(env).parent) == [store_file(env).name]
    assert pgo.lookup(*CODE) == {"L['x']": tensor([None], [1])}   # kept in memory
    monkeypatch.undo()
    monkeypatch.setenv("SHAPEJIT_CACHE_DIR", str(env / "cache"))
    monkeypatch.setenv("TORCH_COMPILE_JOB_ID", "job1")
    monkeypatch.setenv("TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO", "1")
    pgo.record(*CODE, {"L['x']": tensor([6], [1])})    # memory differs from disk: written
    pgo._reset()
    assert pgo.lookup(*CODE) == {"L['x']": tensor([None], [1])}


def test_unwritable_directory_warns_once_and_continues(env, monkeypatch):
    blocker = env / "not_a_dir"
    blocker.write_text("")                 # a file where the cache directory should be
    monkeypatch.setenv("SHAPEJIT_CACHE_DIR", str(blocker))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pgo.record(*CODE, {"L['x']": tensor([4], [1])})
        pgo.record(*CODE, {"L['x']": tensor([5], [1])})
        got = pgo.lookup(*CODE)
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1 and "cannot write the PGO file" in messages[0], messages
    assert str(blocker) in messages[0]
    assert got == {"L['x']": tensor([None], [1])}
    assert blocker.read_text() == ""


# --- corrupt and foreign files -------------------------------------------------------

def valid_doc(**changes):
    doc = {"format": "shapejit-pgo", "version": 1, "job_id": "job1",
           "codes": [{"file": "/old.py", "line": 1, "name": "f",
                      "state": {"L['x']": tensor([3], [1])}}]}
    doc.update(changes)
    return doc


def with_state(entry):
    return valid_doc(codes=[{"file": "/old.py", "line": 1, "name": "f",
                             "state": {"L['x']": entry}}])


CORRUPT = [
    ("bad json", "{\"format\": ", "not valid JSON"),
    ("not utf-8", b"\xff\xfe", "not valid JSON"),
    ("top-level list", [], "top level is not an object"),
    ("wrong format", valid_doc(format="torch-pgo"), "format is 'torch-pgo'"),
    ("wrong version", valid_doc(version=3), "version is 3"),
    ("string version", valid_doc(version="1"), "version is '1'"),
    ("bool version", valid_doc(version=True), "version is True"),
    ("extra key", dict(valid_doc(), extra=1), "top-level keys"),
    ("job id type", valid_doc(job_id=5), "job_id is 5"),
    ("codes not list", valid_doc(codes={}), "codes is not a list"),
    ("code missing key", valid_doc(codes=[{"file": "/a.py", "line": 1, "state": {}}]),
     "codes[0] is not an object"),
    ("line string", valid_doc(codes=[{"file": "/a.py", "line": "1", "name": "f",
                                      "state": {}}]), "codes[0] has file/line/name"),
    ("duplicate code", valid_doc(codes=valid_doc()["codes"] * 2), "codes[1] repeats code"),
    ("state not object", valid_doc(codes=[{"file": "/a.py", "line": 1, "name": "f",
                                           "state": []}]), "state is not an object"),
    ("unknown kind", with_state({"kind": "list"}), "kind 'list'"),
    ("missing stride", with_state({"kind": "tensor", "size": [1]}), "has keys"),
    ("size string", with_state(tensor(["4"], [1])), "has '4'"),
    ("size float", with_state(tensor([4.0], [1])), "has 4.0"),
    ("negative size", with_state(tensor([-2], [1])), "has -2"),
    ("rank mismatch", with_state(tensor([2, 3], [1])), "2 sizes but 1 strides"),
    ("size not list", with_state({"kind": "tensor", "size": 4, "stride": [1]}),
     "size is not a list"),
    ("bool scalar", with_state(scalar(True)), "value True"),
    ("dynamic extra", with_state({"kind": "dynamic", "value": 1}), "has keys"),
    ("foreign job", valid_doc(job_id="job2"), "belongs to job 'job2'"),
]


@pytest.mark.parametrize("content,problem", [c[1:] for c in CORRUPT],
                         ids=[c[0] for c in CORRUPT])
def test_corrupt_or_foreign_file_is_ignored_then_rewritten(env, content, problem):
    f = store_file(env)
    f.parent.mkdir(parents=True)
    if isinstance(content, bytes):
        f.write_bytes(content)
    elif isinstance(content, str):
        f.write_text(content)
    else:
        f.write_text(json.dumps(content))
    with pytest.warns(UserWarning) as caught:
        assert pgo.lookup("/old.py", 1, "f") is None
    assert len(caught) == 1
    message = str(caught[0].message)
    assert str(f) in message and problem in message, message
    assert no_warnings(pgo.lookup, "/old.py", 1, "f") is None     # one warning only
    no_warnings(pgo.record, *CODE, {"L['x']": tensor([4], [1])})
    assert json.loads(f.read_text()) == {
        "format": "shapejit-pgo", "version": 2, "job_id": "job1",
        "codes": [{"file": CODE[0], "hash": CODE[0], "line": CODE[1], "name": CODE[2],
                   "closure": None, "state": {"L['x']": tensor([4], [1])}}]}
    pgo._reset()
    assert no_warnings(pgo.lookup, *CODE) == {"L['x']": tensor([4], [1])}


def test_corrupting_a_loaded_file_loses_nothing_in_memory(env):
    pgo.record(*CODE, {"L['x']": tensor([4], [1])})
    f = store_file(env)
    f.write_text("garbage")
    with pytest.warns(UserWarning, match="not valid JSON"):
        pgo.record(*CODE, {"L['n']": scalar(1)})
    pgo._reset()
    assert pgo.lookup(*CODE) == {"L['x']": tensor([4], [1]), "L['n']": scalar(1)}


def test_corrupt_file_warns_in_a_fresh_process(tmp_path):
    f = store_file(tmp_path)
    f.parent.mkdir(parents=True)
    f.write_text(json.dumps(valid_doc(version=9)))
    out = run_py("""
        from shapejit import pgo
        print(pgo.lookup("/old.py", 1, "f"), pgo.lookup("/old.py", 1, "f"))
    """, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "None None\n"
    assert out.stderr.count("UserWarning") == 1 and "version is 9" in out.stderr


# --- human-readable form -------------------------------------------------------------

SAMPLE = {
    ("/proj/file.py", 2, "func"): {
        "L['x']": tensor([None], [1]),
        "L['n']": scalar(5),
        "L['m']": DYNAMIC,
        "L['self']._modules['fc']._parameters['weight']": tensor([4, 8], [8, 1]),
    },
    ("/proj/a.py", 10, "g"): {"L['y']": tensor([None, 8], [8, 1]), "L['k']": scalar(None)},
}

SAMPLE_TEXT = """\
/proj/a.py:10:g:
  L['k']: scalar ?
  L['y']: tensor size=[?, 8] stride=[8, 1]
/proj/file.py:2:func:
  L['m']: fully dynamic scalar or tensor
  L['n']: scalar 5
  L['self']._modules['fc']._parameters['weight']: tensor size=[4, 8] stride=[8, 1]
  L['x']: tensor size=[?] stride=[1]
"""


def record_sample():
    for key, state in SAMPLE.items():
        pgo.record(*key, state)


def test_format_state_exact(env):
    assert pgo.format_state(SAMPLE) == SAMPLE_TEXT
    assert pgo.format_state({}) == ""
    assert pgo.format_state({("f.py", 1, "f"): {"L['t']": tensor([], [])}}) == \
        "f.py:1:f:\n  L['t']: tensor size=[] stride=[]\n"


def test_format_state_of_document_and_current_job(env):
    record_sample()
    assert pgo.format_state() == SAMPLE_TEXT
    assert pgo.format_state(json.loads(store_file(env).read_text())) == SAMPLE_TEXT
    with pytest.raises(ValueError, match="version is 3"):
        pgo.format_state(valid_doc(version=3))


def test_show(env):
    record_sample()
    out = io.StringIO()
    assert pgo.show(file=out) is True
    assert out.getvalue() == SAMPLE_TEXT
    out = io.StringIO()
    assert pgo.show(str(store_file(env)), file=out) is True
    assert out.getvalue() == SAMPLE_TEXT


def test_show_says_why_there_is_nothing(env, monkeypatch):
    out = io.StringIO()
    assert pgo.show(file=out) is False
    assert out.getvalue() == "no PGO file at %s\n" % store_file(env)
    f = store_file(env)
    f.parent.mkdir(parents=True)
    f.write_text("[1,")
    out = io.StringIO()
    assert pgo.show(file=out) is False
    assert out.getvalue().startswith("the PGO file %s is corrupt: not valid JSON" % f)
    f.write_text(json.dumps(valid_doc(codes=[])))
    out = io.StringIO()
    assert pgo.show(file=out) is True
    assert out.getvalue() == "the PGO file %s records no code objects\n" % f
    monkeypatch.delenv("TORCH_COMPILE_JOB_ID")
    out = io.StringIO()
    assert pgo.show(file=out) is False
    assert "TORCH_COMPILE_JOB_ID is not set" in out.getvalue()


def test_show_defaults_to_stdout(env, capsys):
    record_sample()
    pgo.show()
    assert capsys.readouterr().out == SAMPLE_TEXT


def test_show_any_job_file_by_path(env, monkeypatch):
    record_sample()
    monkeypatch.setenv("TORCH_COMPILE_JOB_ID", "another")
    out = io.StringIO()
    assert pgo.show(str(store_file(env)), file=out) is True   # no foreign check for a path
    assert out.getvalue() == SAMPLE_TEXT


# --- CLI -----------------------------------------------------------------------------

def cli(args, tmp_path, **extra_env):
    env = dict(os.environ, SHAPEJIT_CACHE_DIR=str(tmp_path / "cache"),
               TORCH_COMPILE_JOB_ID="job1", PYTHONPATH=PACKAGE_PARENT)
    env.pop("TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO", None)
    env.update(extra_env)
    return subprocess.run([sys.executable, "-m", "shapejit.pgo", *args], env=env, cwd=PACKAGE_PARENT,
                          capture_output=True, text=True, timeout=120)


def test_cli(env):
    record_sample()
    f = str(store_file(env))
    out = cli([f], env)
    assert (out.returncode, out.stdout) == (0, SAMPLE_TEXT), out.stderr
    out = cli([], env)                                   # the current job's file
    assert (out.returncode, out.stdout) == (0, SAMPLE_TEXT), out.stderr


def test_cli_missing_and_corrupt(env):
    missing = env / "nope.json"
    out = cli([str(missing)], env)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.strip().endswith("no PGO file at %s" % missing)
    bad = env / "bad.json"
    bad.write_text(json.dumps(valid_doc(format="x")))
    out = cli([str(bad)], env)
    assert out.returncode == 1 and out.stdout == ""
    assert "the PGO file %s is corrupt: format is 'x'" % bad in out.stderr
    out = cli([], env, TORCH_COMPILE_JOB_ID="")
    assert out.returncode == 1 and "TORCH_COMPILE_JOB_ID is not set" in out.stderr
    out = cli(["a", "b"], env)
    assert out.returncode == 2 and "usage" in out.stderr
