"""The benchmark suite's workload sets (bench/workloads.py): the sets are what
bench/suite.py --set promises, every zoo architecture builds at its small size and runs
eagerly with its inputs, its build is seeded (the suite's child processes rebuild the
same weights and inputs), and on a few of them shapejit's cpu backend equals eager in
one graph; bench/suite.py --set picks the right output directory and prints a summary
per set without the figures of systems that did not run. No timing: performance lives in
bench/.
"""
import os
import subprocess
import sys
import warnings

import pytest
import torch

from repo import bench, source_path

common = bench("common")
workloads = bench("workloads")

KINDS = {"encoder", "decoder", "encoder-decoder", "vision", "audio"}


def test_sets():
    sets = workloads.SETS
    assert workloads.NAMES == sets["core"]
    assert len(sets["core"]) == 14 and not any(n.startswith("zoo_") for n in sets["core"])
    assert sets["all"] == sets["core"] + sets["zoo"]
    assert len(set(sets["all"])) == len(sets["all"]) and set(sets["all"]) == set(workloads.SPECS)
    # every architecture at both sizes, every kind present, at least 12 architectures
    assert sets["zoo"] == ["zoo_%s_%s" % (a, k) for a in workloads.ZOO for k in workloads.ZOO_SIZES]
    assert len(workloads.ZOO) >= 12
    assert {kind for kind, *_ in workloads.ZOO.values()} == KINDS
    for name in sets["zoo"]:
        spec = workloads.SPECS[name]
        assert spec[1] == "torch" and spec[4] is None, name   # no dynamic sweep
        assert len(spec[3]) == len(spec[2]), name


def _outputs(name):
    w = workloads.build(name)
    args = w.args(w.main)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return w, args, w.fn(*args)


@pytest.mark.parametrize("arch", list(workloads.ZOO))
def test_zoo_small_runs_eagerly(arch):
    name = "zoo_%s_s" % arch
    w, args, out = _outputs(name)
    assert not w.fn.training
    arrays = common.flat_arrays(out)
    assert arrays and all(a.size for a in arrays)
    assert all(bool((abs(a) < float("inf")).all()) for a in arrays), "non-finite output"
    # an output too small to show a difference from eager would make the suite's check moot
    assert max(float(abs(a).max()) for a in arrays) > 1e-3
    _, args2, out2 = _outputs(name)
    assert all(torch.equal(a, b) for a, b in zip(args, args2))
    assert common.max_abs_diff(out, out2) == 0.0


@pytest.mark.parametrize("arch", ["llama", "bart", "whisper"])
def test_zoo_shapejit_cpu_equals_eager(arch, fresh_shapejit):
    w, args, ref = _outputs("zoo_%s_s" % arch)
    compiled = fresh_shapejit.compile(w.fn, backend="cpu")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = compiled(*args)
    assert common.max_abs_diff(ref, got) <= common.tolerance(ref)
    st = fresh_shapejit.stats()
    assert (st["graphs"], st["graph_breaks"]) == (1, 0)


def test_suite_sets_and_summary():
    suite = bench("suite")
    a = suite.parse_args([])
    assert (a.wset, a.out) == ("core", suite.DEFAULT_OUT)
    assert suite.parse_args(["--set", "zoo"]).out == suite.DEFAULT_OUT + "_zoo"
    names = ["bert", "zoo_llama_s", "zoo_llama_m"]
    groups = suite.set_groups(names, workloads.SETS)
    assert groups == [("core", ["bert"]), ("zoo", ["zoo_llama_s", "zoo_llama_m"])]
    rows = []
    for n in names:
        for key, speedup in (("eager", 1.0), ("sj_cpu", 2.0), ("tc", 1.0)):
            r = suite.new_row(n, key, "cold")
            r.update(speedup=speedup, median_s=1.0 / speedup, compile_s=1.0, warm_compile_s=0.5)
            rows.append(r)
    lines = suite.summary(rows, groups[1][1], 1, "today", "zoo")
    assert lines[0].startswith("suite summary, set zoo (today, 1 thread(s)")
    assert lines[1] == "  speedup vs eager: shapejit cpu 2.00x (n=2), torch.compile 1.00x (n=2)"
    assert lines[3] == "  compile time torch.compile / shapejit cpu: cold 1.00x (n=2), warm 1.00x (n=2)"
    assert len(lines) == 4 and not any("n=0" in line for line in lines)   # no dynamic systems ran
    geo = suite.per_system_geomeans(rows, groups)
    assert ["shapejit cpu", "core", "2.00x", 1] in geo and ["shapejit cpu", "zoo", "2.00x", 2] in geo


_MALLOC_PROBE = """
import os, sys
sys.argv = [{script!r}]
sys.path.insert(0, {bench!r})
print("start", os.environ.get("GLIBC_TUNABLES", "-"), flush=True)
import common
common.steady_malloc()
print("after", os.environ.get("GLIBC_TUNABLES", "-"), flush=True)
"""


def _malloc_probe(script_dir, env_extra):
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "SJ_BENCH_MALLOC")}
    env.update(env_extra)
    code = _MALLOC_PROBE.format(script=os.path.join(script_dir, "probe.py"), bench=source_path("bench"))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_bench_scripts_restart_with_fixed_malloc_thresholds(tmp_path):
    """A bench script starts itself again once with glibc's malloc thresholds fixed (so an
    eager call's temporaries do not page-fault in one process and not in another); never
    from a script outside bench/ (a test importing the helpers), never when
    SJ_BENCH_MALLOC=default or a glibc.malloc tunable is already set."""
    want = common.MALLOC_TUNABLES
    lines = _malloc_probe(source_path("bench"), {})
    assert lines == ["start -", "start " + want, "after " + want], lines
    lines = _malloc_probe(source_path("bench"), {"GLIBC_TUNABLES": "glibc.cpu.x86_ibt=on"})
    assert lines[-1] == "after glibc.cpu.x86_ibt=on:" + want and len(lines) == 3, lines
    for extra in ({"SJ_BENCH_MALLOC": "default"}, {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}):
        lines = _malloc_probe(source_path("bench"), extra)
        assert len(lines) == 2 and lines[0][6:] == lines[1][6:], (extra, lines)
    lines = _malloc_probe(str(tmp_path), {})
    assert lines == ["start -", "after -"], lines


def test_paired_samples_warm_up_alternately_first(monkeypatch):
    """Before its samples, paired_samples calls eager and the system in turn (the heap of
    two programs allocating in turn settles over the first rounds): at least
    PAIRED_WARMUP_ROUNDS rounds and PAIRED_WARMUP_MIN_S, stopping at PAIRED_WARMUP_MAX_S."""
    calls = []
    monkeypatch.setattr(common, "PAIRED_WARMUP_MIN_S", 0.0)
    sc, se, n = common.paired_samples(lambda: calls.append("c"), lambda: calls.append("e"),
                                      repeat=3, min_sample_s=0.0, max_total_s=1.0)
    warm = calls[:2 * common.PAIRED_WARMUP_ROUNDS]
    assert warm == ["e", "c"] * common.PAIRED_WARMUP_ROUNDS
    assert len(sc) == len(se) == 3 and n == 1
    import time
    monkeypatch.setattr(common, "PAIRED_WARMUP_MAX_S", 0.05)
    monkeypatch.setattr(common, "PAIRED_WARMUP_ROUNDS", 10**9)
    t0 = time.perf_counter()
    rounds = common.paired_warmup(lambda: time.sleep(0.001), lambda: None)
    assert 1 <= rounds < 10**9 and time.perf_counter() - t0 < 1.0
