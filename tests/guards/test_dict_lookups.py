"""Dicts from outside the frame that the frame only looks keys up in (os.environ read by
os.environ.get, a config dict read by d["key"] or d.get) are guarded by the keys looked up,
present or absent, and the values found: an unrelated key added or changed does not make
the frame compile again, a looked-up one does, and every result equals eager's. Any other
use of the dict (its length, iteration, a write) guards all of its keys, as before."""
import os
import re

import pytest
import torch
from torch._dynamo.testing import CompileCounter

import shapejit


@pytest.fixture(autouse=True)
def _fresh():
    shapejit.reset()
    torch._dynamo.reset()
    yield
    shapejit.set_logs()
    shapejit.reset()
    torch._dynamo.reset()


@pytest.fixture
def env(monkeypatch):
    """Sets and deletes environment variables for one test (restored after it)."""
    for k in ("SJ_TEST_FLAG", "SJ_TEST_OTHER", "SJ_TEST_OTHER2", "SJ_TEST_ABSENT"):
        monkeypatch.delenv(k, raising=False)
    return monkeypatch


def _graphs():
    return shapejit.stats()["graphs"]


def _same(cf, f, *args):
    want, got = f(*args), cf(*args)
    torch.testing.assert_close(got, want)
    return got


def _torch_graphs(fn, calls):
    cnt = CompileCounter()
    cf = torch.compile(fn, backend=cnt)
    for setup, args in calls:
        setup()
        cf(*args)
    torch._dynamo.reset()
    return cnt.frame_count


def _reasons(capfd):
    err = capfd.readouterr().err
    return [re.sub(r"^- \d+/\d+: ", "", ln.strip()) for ln in err.splitlines() if re.match(r"\s*- \d+/\d+: ", ln)]


def flag_get(x):
    if os.environ.get("SJ_TEST_FLAG", "0") == "1":
        return x + 1
    return x - 1


def flag_in(x):
    return x + (1 if "SJ_TEST_FLAG" in os.environ else 0)


def flag_getitem(x):
    try:
        v = os.environ["SJ_TEST_FLAG"]
    except KeyError:
        v = "5"
    return x * float(v)


def flag_getenv(x):
    v = os.getenv("SJ_TEST_FLAG")
    return x + (0.0 if v is None else float(v))


@pytest.mark.parametrize("fn", [flag_get, flag_in, flag_getitem, flag_getenv])
def test_environ_lookup_is_guarded_by_its_key_alone(env, fn):
    cf = shapejit.compile(fn)
    x = torch.ones(3)
    _same(cf, fn, x)
    env.setenv("SJ_TEST_OTHER", "1")   # an unrelated variable added
    _same(cf, fn, x)
    env.setenv("SJ_TEST_OTHER", "2")   # and changed
    env.delenv("SJ_TEST_OTHER")        # and removed
    _same(cf, fn, x)
    assert _graphs() == 1
    env.setenv("SJ_TEST_FLAG", "1")    # the variable the frame reads: a new entry
    _same(cf, fn, x)
    assert _graphs() == 2
    env.setenv("SJ_TEST_OTHER2", "3")
    _same(cf, fn, x)
    assert _graphs() == 2
    env.setenv("SJ_TEST_FLAG", "2")
    _same(cf, fn, x)
    env.delenv("SJ_TEST_FLAG")
    _same(cf, fn, x)                   # the first entry again
    assert _graphs() <= 3


def test_environ_unrelated_change_compiles_no_more_than_torch(env):
    x = torch.ones(3)
    calls = [(lambda: None, (x,)), (lambda: env.setenv("SJ_TEST_OTHER", "1"), (x,)),
             (lambda: env.setenv("SJ_TEST_OTHER2", "1"), (x,))]
    want = _torch_graphs(flag_get, calls)
    env.delenv("SJ_TEST_OTHER")
    env.delenv("SJ_TEST_OTHER2")
    cf = shapejit.compile(flag_get)
    for setup, args in calls:
        setup()
        _same(cf, flag_get, *args)
    assert _graphs() <= want == 1


def test_environ_recompile_reason_names_the_key(env, capfd):
    shapejit.set_logs(recompiles=True)
    cf = shapejit.compile(flag_get)
    x = torch.ones(2)
    _same(cf, flag_get, x)
    capfd.readouterr()
    env.setenv("SJ_TEST_FLAG", "1")
    _same(cf, flag_get, x)
    reasons = _reasons(capfd)
    assert any("b'SJ_TEST_FLAG' in" in r and "is True now" in r for r in reasons), reasons


def lookups(x, d):
    return x * d["scale"] + d.get("shift", 0.5)


def test_dict_argument_read_by_lookups():
    x = torch.ones(3)
    cf = shapejit.compile(lookups)
    _same(cf, lookups, x, {"scale": 2.0, "other": 1})
    _same(cf, lookups, x, {"scale": 2.0, "other": 1, "more": [1, 2]})   # keys added
    _same(cf, lookups, x, {"other": 7, "scale": 2.0})                   # reordered
    assert _graphs() == 1
    _same(cf, lookups, x, {"scale": 2.0, "shift": 1.5})                 # the absent key now there
    _same(cf, lookups, x, {"shift": 1.5, "scale": 3.0})                 # a value read changed
    for d in ({"scale": 2.0}, {"scale": 2.0, "shift": 1.5}, {"scale": 3.0, "shift": 1.5}):
        _same(cf, lookups, x, d)
    with pytest.raises(KeyError):
        cf(x, {"shift": 1.0})
    with pytest.raises(KeyError):
        lookups(x, {"shift": 1.0})


def lookups_then_len(x, d):
    return x * d["scale"] + len(d)


def lookups_then_iterate(x, d):
    s = d["b"]
    out = x * s
    for k in d:
        out = out + d[k]
    return out, list(d)


def lookup_then_write(x, d):
    y = x * d["a"]
    d["new"] = 3
    d["a"] = d["a"] + 1
    return y


@pytest.mark.parametrize("fn", [lookups_then_len, lookups_then_iterate])
def test_dict_read_whole_guards_every_key(fn):
    x = torch.ones(3)
    cf = shapejit.compile(fn)
    for d in ({"scale": 2.0, "b": 1.0}, {"b": 1.0, "scale": 2.0}, {"scale": 2.0, "b": 1.0, "c": 4.0}):
        want, got = fn(x, dict(d)), cf(x, dict(d))
        if isinstance(want, tuple):
            torch.testing.assert_close(got[0], want[0])
            assert got[1] == want[1]   # iteration order is the dict's own
        else:
            torch.testing.assert_close(got, want)


def test_dict_lookup_then_write_back():
    x = torch.ones(3)
    cf = shapejit.compile(lookup_then_write)
    for base in ({"a": 2, "z": 0}, {"z": 0, "a": 5, "q": 1}):
        d1, d2 = dict(base), dict(base)
        torch.testing.assert_close(cf(x, d1), lookup_then_write(x, d2))
        assert d1 == d2 and list(d1) == list(d2)


def equal_keys(x, d):
    return x * d[1] + d.get(2.0, 0) + (1 if True in d else 0)


def test_dict_lookup_by_equal_keys_of_other_types():
    x = torch.ones(2)
    cf = shapejit.compile(equal_keys)
    for d in ({1: 2.0}, {True: 3.0, 2: 1.0}, {1.0: 4.0, 2.0: 0.5}):
        _same(cf, equal_keys, x, d)


def test_dict_lookup_of_tensor_values_guards_the_tensor():
    def f(x, d):
        return x + d["w"]

    cf = shapejit.compile(f, dynamic=False)
    x = torch.ones(3)
    _same(cf, f, x, {"w": torch.ones(3), "unused": torch.ones(7)})
    _same(cf, f, x, {"w": torch.ones(3), "unused": torch.ones(9)})   # an unread tensor: no guard
    assert _graphs() == 1
    _same(cf, f, x, {"w": torch.ones(1), "unused": torch.ones(9)})   # the read one's size changed
    assert _graphs() == 2
