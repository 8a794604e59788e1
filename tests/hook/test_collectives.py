"""The compiler collective (config.enable_compiler_collectives): ranks of a gloo job
started with torch.multiprocessing.spawn exchange argument sizes at each compile, so a
batch size that differs across ranks is dynamic on every rank at the first compile."""
import json
import os
import socket
import time
import warnings

import pytest
import torch
import torch._dynamo
import torch.distributed as dist
import torch.multiprocessing as mp

import collectives_worker
import shapejit
from shapejit import collectives


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(world, tmp_path):
    mp.spawn(collectives_worker.run, args=(world, _free_port(), str(tmp_path), world - 1),
             nprocs=world, join=True)
    return [json.loads((tmp_path / ("rank%d.json" % r)).read_text()) for r in range(world)]


@pytest.mark.parametrize("world", [2, 3])
def test_ranks_agree_on_dynamic_dims(world, tmp_path):
    results = _spawn(world, tmp_path)
    for rank, res in enumerate(results):
        # without the collective each rank compiles its own batch statically, then
        # recompiles for the size another rank saw first
        assert res["off"]["equal"], rank
        assert res["off"]["recompiles"] >= 1, (rank, res["off"])
        # with it, one dynamic graph at the first call on every rank, nothing later
        assert res["on"]["equal"], rank
        assert res["on"]["recompiles"] == 0, (rank, res["on"])
        assert res["on"]["graphs"] == 1, (rank, res["on"])
        # a graph break: the frame and its resume function exchange in the same order on
        # every rank, and both are dynamic at once
        assert res["break_off"]["equal"] and res["break_on"]["equal"], rank
        assert res["break_off"]["recompiles"] >= 2, (rank, res["break_off"])
        assert (res["break_on"]["graphs"], res["break_on"]["recompiles"]) == (2, 0), \
            (rank, res["break_on"])
        # a global tensor whose rows differ across ranks: the arguments do not reach it, so
        # the ranks join what the first capture read and it is captured once more, dynamic
        assert res["global_off"]["equal"] and res["global_on"]["equal"], rank
        assert res["global_off"]["recompiles"] >= 1, (rank, res["global_off"])
        assert (res["global_on"]["graphs"], res["global_on"]["recompiles"]) == (1, 0), \
            (rank, res["global_on"])
        t = res["timeout"]
        assert t["equal"], rank
        if rank == world - 1:   # the rank that did not compile
            assert t["graphs"] == 0 and not t["warnings"]
            continue
        assert t["graphs"] == 1
        assert t["waited"] < 10, t
        msg = [w for w in t["warnings"] if "compiler collective" in w]
        assert len(msg) == 1, t["warnings"]
        assert "rank(s) %d did not compile it within 1 s" % (world - 1) in msg[0]
        assert "compiler_collectives_timeout" in msg[0]
        assert "its own sizes only" in msg[0]


def test_no_process_group_means_no_collective(fresh_shapejit):
    assert not dist.is_initialized()
    fn = shapejit.compile(lambda x: x * 2 + 1)
    with shapejit.config.patch(enable_compiler_collectives=True):
        assert not collectives.active()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for b in (4, 6, 9):
                x = torch.randn(b, 3)
                assert torch.equal(fn(x), x * 2 + 1)
    # automatic dynamic as without the knob: static first, one recompile, then dynamic
    assert shapejit.stats()["recompiles"] == 1


def test_world_size_one_exchanges_nothing(fresh_shapejit):
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        with shapejit.config.patch(enable_compiler_collectives=True):
            assert not collectives.active()
            before = collectives._seq
            fn = shapejit.compile(lambda x: x - 1)
            x = torch.randn(5, 2)
            assert torch.equal(fn(x), x - 1)
            assert collectives._seq == before
    finally:
        dist.destroy_process_group()


def test_knob_and_environment(tmp_path):
    import subprocess
    import sys
    code = ("import shapejit, torch; "
            "print(shapejit.config.enable_compiler_collectives, "
            "shapejit.config.compiler_collectives_timeout)")
    env = dict(os.environ, TORCH_COMPILER_COLLECTIVES="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["True", "60"]
    assert shapejit.config.enable_compiler_collectives is False


@pytest.mark.parametrize("a, b, joined", [
    ([4, 8], [6, 8], [None, 8]),
    ([4, 8], [4, 8], [4, 8]),
    ([4, 8], [4, 8, 1], [None, None]),
    ([None, 8], [4, 8], [None, 8]),
    (3, 3, 3),
    (3, 5, None),
    ([4], 5, [None]),
    (5, [4], None),
])
def test_join_rule(a, b, joined):
    assert collectives._join_entry(a, b) == joined


@pytest.fixture
def peer(monkeypatch):
    """This process as rank 0 of a 2-rank job whose store is a local HashStore; the test
    plays rank 1 by writing its key."""
    store = dist.HashStore()
    group = object()
    monkeypatch.setattr(collectives, "_distributed", lambda: (store, 0, 2, group))
    monkeypatch.setattr(collectives, "_group", None)
    return store


def _exchange(fstate, names, values, timeout=5):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = collectives.exchange("f.py", 3, "f", fstate, names, values, timeout)
    return got, [str(w.message) for w in caught]


def _peer_says(store, seq, payload):
    store.set("%s/%d/1" % (collectives.PREFIX, seq), payload)


def _peer_compiles(store, seq, co, state, traced=None):
    """The peer's two rounds for one compile of co: the arguments' state before its
    capture, then what its capture read beyond them (traced)."""
    code = [co.co_filename, co.co_firstlineno, co.co_name]
    _peer_says(store, seq, json.dumps({"code": code, "state": state}))
    store.set("%s/%d/traced/1" % (collectives.PREFIX, seq),
              json.dumps({"code": code, "state": traced or {}}))


def test_exchange_joins_the_peer_state(peer):
    _peer_says(peer, 0, json.dumps({"code": ["f.py", 3, "f"],
                                    "state": {"L['x']": [6, 8], "L['n']": 3, "L['z']": [1]}}))
    got, warned = _exchange(None, ("x", "n", "flag"), (torch.zeros(4, 8), 3, True))
    assert warned == []
    # the peer's extra source is not this frame's; bools are not exchanged
    assert got == {"L['x']": [None, 8], "L['n']": 3}
    sent = json.loads(peer.get("%s/0/0" % collectives.PREFIX))
    assert sent == {"code": ["f.py", 3, "f"], "state": {"L['x']": [4, 8], "L['n']": 3}}


def test_exchange_keeps_what_earlier_compiles_learned(peer):
    # L['self'].w: a source the arguments do not reach, known from an earlier compile
    _peer_says(peer, 0, json.dumps({"code": ["f.py", 3, "f"],
                                    "state": {"L['x']": [4, 8], "L['self'].w": [3, 5]}}))
    got, _ = _exchange({"L['x']": [4, None], "L['self'].w": [2, 5], "L['f']": 1.5},
                       ("x",), (torch.zeros(4, 8),))
    assert got == {"L['x']": [4, None], "L['self'].w": [None, 5], "L['f']": 1.5}
    sent = json.loads(peer.get("%s/0/0" % collectives.PREFIX))["state"]
    assert sent == {"L['x']": [4, None], "L['self'].w": [2, 5]}   # floats are not sent


@pytest.mark.parametrize("payload, says", [
    ("{not json", "1 sent an unreadable entry"),
    (json.dumps({"code": ["f.py", 3, "f"], "state": {"L['x']": ["a"]}}), "unreadable"),
    (json.dumps({"code": ["g.py", 9, "g"], "state": {}}), "1 compiled g (g.py:9)"),
])
def test_a_bad_or_foreign_peer_entry_warns_and_stays_local(peer, payload, says):
    _peer_says(peer, 0, payload)
    got, warned = _exchange(None, ("x",), (torch.zeros(4, 8),))
    assert got == {"L['x']": [4, 8]}
    assert len(warned) == 1 and says in warned[0] and "f (f.py:3)" in warned[0]
    assert "its own sizes only" in warned[0]


def test_a_missing_peer_times_out_with_a_warning(peer):
    t0 = time.monotonic()
    got, warned = _exchange(None, ("x",), (torch.zeros(4, 8),), timeout=0)
    assert got is None and time.monotonic() - t0 < 5
    assert len(warned) == 1 and "rank(s) 1 did not compile it within 0 s" in warned[0]
    # the next compile is the next exchange: a late peer's first entry does not count for it
    _peer_says(peer, 1, json.dumps({"code": ["f.py", 3, "f"], "state": {"L['x']": [5, 8]}}))
    got, warned = _exchange(None, ("x",), (torch.zeros(4, 8),))
    assert got == {"L['x']": [None, 8]} and warned == []


def test_a_failing_exchange_warns_and_the_compile_goes_on(fresh_shapejit, monkeypatch):
    class BrokenStore:
        def set(self, key, value):
            raise ConnectionError("store unreachable")

    monkeypatch.setattr(collectives, "_distributed", lambda: (BrokenStore(), 0, 2, object()))
    fn = shapejit.compile(lambda x: x + 1)
    x = torch.randn(3, 2)
    with shapejit.config.patch(enable_compiler_collectives=True):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert torch.equal(fn(x), x + 1)
    msgs = [str(w.message) for w in caught]
    assert any("compiler collective for <lambda>" in m and "store unreachable" in m
               and "its own sizes only" in m for m in msgs), msgs
    assert shapejit.stats()["graphs"] == 1


def test_an_interrupt_in_the_exchange_reaches_the_user(fresh_shapejit, monkeypatch):
    class InterruptedStore:
        def set(self, key, value):
            raise KeyboardInterrupt

    monkeypatch.setattr(collectives, "_distributed", lambda: (InterruptedStore(), 0, 2, object()))
    fn = shapejit.compile(lambda x: x + 1)
    with shapejit.config.patch(enable_compiler_collectives=True):
        with pytest.raises(KeyboardInterrupt):
            fn(torch.randn(3, 2))


def _plain(x, n):
    return x * n


def _listed(xs, scale):
    return xs[0] + xs[1].sum() * scale


def _keyed(batch):
    return batch["ids"] * 2 + batch["mask"].sum()


def _starred(*ts, **kw):
    return ts[0] + kw["bias"].sum()


@pytest.mark.parametrize("fn, make, theirs", [
    (_plain, lambda b: ((torch.ones(b, 3), 2), {}), {"L['x']": [6, 3], "L['n']": 2}),
    (_listed, lambda b: (([torch.ones(b, 3), torch.ones(b)], 2.0), {}),
     {"L['xs'][0]": [6, 3], "L['xs'][1]": [6]}),
    (_keyed, lambda b: (({"ids": torch.ones(b, 3), "mask": torch.ones(b)},), {}),
     {"L['batch']['ids']": [6, 3], "L['batch']['mask']": [6]}),
    (_starred, lambda b: ((torch.ones(b, 3),), {"bias": torch.ones(b)}),
     {"L['ts'][0]": [6, 3], "L['kw']['bias']": [6]}),
], ids=["args", "list", "dict", "star"])
def test_a_size_only_the_peer_saw_is_dynamic_at_once(fresh_shapejit, peer, fn, make, theirs):
    """The peer (rank 1) compiled the same frame with batch 6: this rank's first compile, at
    batch 4, is dynamic in the batch dim of every input the peer named, so batch 6 reuses it
    (the names are the compiler's: a mismatch would recompile and wait for the peer)."""
    _peer_compiles(peer, 0, fn.__code__, theirs)
    compiled = shapejit.compile(fn)
    with shapejit.config.patch(enable_compiler_collectives=True, compiler_collectives_timeout=1):
        for b in (4, 6):
            args, kw = make(b)
            assert torch.equal(compiled(*args, **kw), fn(*args, **kw))
    s = shapejit.stats()
    assert (s["graphs"], s["recompiles"]) == (1, 0), s
    sent = json.loads(peer.get("%s/0/0" % collectives.PREFIX))["state"]
    assert sent == {k: [4] + v[1:] if isinstance(v, list) else v for k, v in theirs.items()}


def test_torch_spelling_through_the_compat_layer(fresh_shapejit, peer):
    """torch.compile and torch._dynamo.config.patch(enable_compiler_collectives=True), routed
    to shapejit: the size the peer saw makes the first compile dynamic."""
    def f(x):
        return torch.sin(x) + 1

    _peer_compiles(peer, 0, f.__code__, {"L['x']": [7, 2]})
    shapejit.install_torch_compat()
    try:
        compiled = torch.compile(f, backend="eager")
        with torch._dynamo.config.patch(enable_compiler_collectives=True):
            assert torch._dynamo.config.enable_compiler_collectives is True
            assert shapejit.config.enable_compiler_collectives is True
            for b in (3, 7):
                x = torch.randn(b, 2)
                assert torch.allclose(compiled(x), f(x))
        assert shapejit.config.enable_compiler_collectives is False
    finally:
        shapejit.uninstall_torch_compat()
    s = shapejit.stats()
    assert (s["graphs"], s["recompiles"]) == (1, 0), s


def test_the_dynamic_log_says_what_the_ranks_made_dynamic(peer, capsys):
    _peer_says(peer, 0, json.dumps({"code": ["f.py", 3, "f"], "state": {"L['x']": [6, 8]}}))
    _peer_says(peer, 1, json.dumps({"code": ["f.py", 3, "f"], "state": {"L['x']": [4, 8]}}))
    shapejit.set_logs(dynamic=True)
    try:
        _exchange(None, ("x",), (torch.zeros(4, 8),))
        _exchange(None, ("x",), (torch.zeros(4, 8),))
    finally:
        shapejit.set_logs()
    err = capsys.readouterr().err
    assert "compiler collective for f (f.py:3) over 2 ranks: L['x'] [4, 8] -> [?, 8]" in err
    assert "compiler collective for f (f.py:3) over 2 ranks: the ranks agree" in err


def test_a_peer_running_the_script_from_another_directory_counts(peer):
    _peer_says(peer, 0, json.dumps({"code": ["/elsewhere/f.py", 3, "f"],
                                    "state": {"L['x']": [6, 8]}}))
    got, warned = _exchange(None, ("x",), (torch.zeros(4, 8),))
    assert got == {"L['x']": [None, 8]} and warned == []


@pytest.mark.parametrize("oblivious, compiles", [(False, (2, 1)), (True, (1, 0))])
def test_size_one_specialises_unless_backed_size_oblivious(fresh_shapejit, peer, oblivious,
                                                            compiles):
    """This rank's batch is 1 and the peer's 6: the agreed dim is dynamic, but a size of 1
    is specialised (a later 6 recompiles on this rank alone) unless backed_size_oblivious."""
    def f(x):
        return torch.relu(x).sum(0)

    _peer_compiles(peer, 0, f.__code__, {"L['x']": [6, 8]})
    compiled = shapejit.compile(f, backend="eager")
    with shapejit.config.patch(enable_compiler_collectives=True, compiler_collectives_timeout=0,
                               backed_size_oblivious=oblivious):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for b in (1, 6):
                x = torch.randn(b, 8)
                assert torch.allclose(compiled(x), f(x))
    s = shapejit.stats()
    assert (s["graphs"], s["recompiles"]) == compiles
    # the lone recompile finds no peer and says so
    assert len([w for w in caught if "did not compile it" in str(w.message)]) == compiles[1]


_scale = torch.ones(3)


class _Holder:
    pass


_holder = _Holder()


def _reads_a_global(x):
    return x * 2 + _scale.sum()


def _reads_an_attribute(x):
    return x * 2 + _holder.buf.sum()


def _set_global(n):
    global _scale
    _scale = torch.randn(n)


def _set_attribute(n):
    _holder.buf = torch.randn(n)


@pytest.mark.parametrize("fn, source, set_size", [
    (_reads_a_global, "G['_scale']", _set_global),
    (_reads_an_attribute, "G['_holder'].buf", _set_attribute),
], ids=["global", "attribute"])
@pytest.mark.parametrize("theirs, compiles", [([5], (1, 0)), ([3], (2, 1))])
def test_a_tensor_only_the_peer_sized_otherwise_is_captured_again(fresh_shapejit, peer, fn,
                                                                  source, set_size, theirs,
                                                                  compiles):
    """The arguments do not reach the tensor: after the first capture the ranks join what
    it read. The peer's 5 makes its dim dynamic here at once (the frame is captured once
    more: one graph, no recompile at 5); a peer that agrees changes nothing."""
    _peer_compiles(peer, 0, fn.__code__, {"L['x']": [4]}, {source: theirs})
    compiled = shapejit.compile(fn, backend="eager")
    with shapejit.config.patch(enable_compiler_collectives=True, compiler_collectives_timeout=0):
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            for n in (3, 5):
                set_size(n)
                x = torch.randn(4)
                assert torch.allclose(compiled(x), fn(x))
    s = shapejit.stats()
    assert (s["graphs"], s["recompiles"]) == compiles, s
    sent = json.loads(peer.get("%s/0/traced/0" % collectives.PREFIX))
    assert sent["state"] == {source: [3]}
