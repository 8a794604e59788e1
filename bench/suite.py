#!/usr/bin/env python3
"""The benchmark suite: shapejit against its peers, in one run, one thread count.

Workloads (bench/workloads.py), in sets (--set):
- core (the default): transformers BertModel, GPT2Model, ViTModel, ResNetModel (small
  configs, eval, no_grad), a TransformerEncoderLayer at three sequence lengths, an MLP,
  layer norm + GELU, softmax attention, a chain of ten pointwise ops, reductions, and two
  numpy kernels (Lennard-Jones energies, column moments);
- zoo: transformers architectures built from configs (encoders, decoder-only models,
  encoder-decoders, vision and audio models), each at a small and a medium size, no sweep;
- all: both.

Systems, each in its own child process (a crash is a row, not the end of the run): eager
torch or numpy; torch.compile (Inductor, default mode) with dynamic=False and
dynamic=True; shapejit backend="cpu" with dynamic=False and dynamic=True, and
backend="eager" for reference; numba @njit and jax.jit on the numpy kernels.

Per workload and system: median call time at the workload's main size, speedup over eager
(sampled alternately with eager in the same process), max |difference| from eager, compile
time cold (fresh disk caches) and warm (a second process reusing the first one's disk
caches: shapejit's kernel cache, Inductor's, numba's, JAX's), and for dynamic systems the
graph and recompile counts over a sweep of sizes (batch 1..64, sequence 16..512).

Writes suite.md, suite.json and PNG plots to bench/results/suite/ (bench/results/suite_zoo/
for --set zoo, suite_all/ for --set all) and prints summary lines of geomeans, one block
per set, that docs/benchmarks.md quotes.

Usage: python3 bench/suite.py [--set core|zoo|all] [--quick] [--threads N] [--out DIR]
                              [--only a,b] [--systems a,b]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402  (stdlib only until early_setup)

DEFAULT_OUT = os.path.join(common.DEFAULT_OUT, "suite")


class Spec:
    """A system compared: its label, whether it is timed over the sweep, whether a second
    (warm) process measures its compile with the first one's disk caches, and which
    workloads it applies to (None: all; else workloads naming it among their peers)."""

    def __init__(self, label, *, sweep, warm, peer=None):
        self.label, self.sweep, self.warm, self.peer = label, sweep, warm, peer


SYSTEMS = {
    "eager": Spec("eager", sweep=False, warm=False),
    "tc": Spec("torch.compile", sweep=False, warm=True),
    "tc_dyn": Spec("torch.compile dynamic", sweep=True, warm=True),
    "sj_eager": Spec("shapejit eager", sweep=False, warm=False),
    "sj_cpu": Spec("shapejit cpu", sweep=False, warm=True),
    "sj_cpu_dyn": Spec("shapejit cpu dynamic", sweep=True, warm=True),
    "numba": Spec("numba", sweep=True, warm=True, peer="numba"),
    "jax": Spec("jax.jit", sweep=True, warm=True, peer="jax"),
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer and shorter timing samples")
    p.add_argument("--threads", type=common.positive_int, default=1,
                   help="thread count of every library (default 1: see docs/benchmarks.md)")
    p.add_argument("--set", default="core", choices=("core", "zoo", "all"), dest="wset",
                   help="workload set: core (default), zoo (transformers architectures) or all")
    p.add_argument("--out", default=None,
                   help="output directory (default bench/results/suite/, suite_zoo/ or suite_all/)")
    p.add_argument("--only", default="",
                   help="comma-separated workloads (any set; overrides --set)")
    p.add_argument("--systems", default=",".join(SYSTEMS),
                   help="comma-separated subset of systems: " + ",".join(SYSTEMS))
    p.add_argument("--no-plots", action="store_true")
    # internal: a worker child process
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--phase", default="cold", choices=("cold", "warm"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.systems = [s for s in a.systems.split(",") if s]
    if a.out is None:
        a.out = DEFAULT_OUT if a.wset == "core" else f"{DEFAULT_OUT}_{a.wset}"
    if not set(a.systems) <= set(SYSTEMS):
        p.error(f"unknown system(s) in {a.systems}; valid: {list(SYSTEMS)}")
    return a


# --------------------------------------------------------------------------- systems (worker side)

def probe(a):
    """The trivial function whose first compile measures a system's set-up."""
    return a * 2.0 + 1.0


class System:
    """One system inside a worker: compile a workload, convert its inputs, report counts."""

    def __init__(self, key):
        self.key, self.spec = key, SYSTEMS[key]

    def compile(self, w):
        return w.fn

    def setup_time(self):
        """Seconds of a first compile of a trivial function: the one-time set-up of the
        system in a fresh process, kept out of the first workload's compile time."""
        import types
        import numpy as np
        x = np.ones(8) if self.spec.peer else torch.ones(8)
        compiled = self.compile(types.SimpleNamespace(fn=probe))
        t, _ = common.time_once(lambda: compiled(*self.inputs((x,))))
        self.reset()
        return t

    def inputs(self, args):
        return args

    def reset(self):
        pass

    def counts(self, compiled) -> dict:
        return {}


class TorchCompile(System):
    def __init__(self, key):
        super().__init__(key)
        self.dc = common.DynamoCounters()

    def compile(self, w):
        return torch.compile(w.fn, dynamic=self.key == "tc_dyn")

    def reset(self):
        self.dc.reset()

    def counts(self, compiled):
        snap = self.dc.snapshot()
        return dict(graphs=snap["graphs"], recompiles=snap["recompiles"],
                    graph_breaks=snap["graph_breaks"], self_compile_s=snap["compile_time_s"])


class Shapejit(System):
    def __init__(self, key):
        super().__init__(key)
        self.sj, why = common.import_shapejit()
        if self.sj is None:
            raise RuntimeError(common.shapejit_missing_line(why))

    def compile(self, w):
        backend = "eager" if self.key == "sj_eager" else "cpu"
        return self.sj.compile(w.fn, backend=backend, dynamic=self.key == "sj_cpu_dyn")

    def reset(self):
        self.sj.reset()

    def counts(self, compiled):
        st = common.sj_stats(self.sj)
        return dict(graphs=st.get("graphs"), recompiles=st.get("recompiles"),
                    graph_breaks=st.get("graph_breaks"), self_compile_s=st.get("compile_time_s"))


class Numba(System):
    def compile(self, w):
        import numba
        return numba.njit(cache=True)(w.fn)    # cache: NUMBA_CACHE_DIR (warm phase)

    def counts(self, compiled):
        n = len(compiled.signatures)
        return dict(graphs=n, recompiles=max(n - 1, 0))


class Jax(System):
    def __init__(self, key):
        super().__init__(key)
        import jax
        jax.config.update("jax_enable_x64", True)   # the numpy kernels' float64
        jax.config.update("jax_compilation_cache_dir", os.environ[common.COMPILE_CACHE_ENV["jax"]])
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        self.jax = jax

    def compile(self, w):
        import jax.numpy as jnp
        from workloads import with_module
        jf = self.jax.jit(with_module(w.fn, "np", jnp))
        wrapped = lambda *a: self.jax.block_until_ready(jf(*a))  # noqa: E731
        wrapped.jitted = jf
        return wrapped

    def inputs(self, args):
        return tuple(self.jax.device_put(a) for a in args)

    def counts(self, compiled):
        n = compiled.jitted._cache_size()
        return dict(graphs=n, recompiles=max(n - 1, 0))


def make_system(key) -> System:
    cls = {"tc": TorchCompile, "tc_dyn": TorchCompile, "sj_eager": Shapejit, "sj_cpu": Shapejit,
           "sj_cpu_dyn": Shapejit, "numba": Numba, "jax": Jax}.get(key, System)
    return cls(key)


def applies(key, spec_peers) -> bool:
    peer = SYSTEMS[key].peer
    return peer is None or peer in spec_peers


# --------------------------------------------------------------------------- measuring (worker side)

def no_grad(lib):
    import contextlib
    return torch.no_grad() if lib == "torch" else contextlib.nullcontext()


def new_row(workload, key, phase):
    return dict(workload=workload, key=key, system=SYSTEMS[key].label, phase=phase,
                status="ok", note="", median_s=None, eager_paired_s=None, speedup=None,
                max_abs_diff=None, first_call_s=None, compile_s=None, self_compile_s=None,
                graphs=None, recompiles=None, graph_breaks=None, sweep=None,
                sweep_s=None, sweep_max_abs_diff=None, sweep_graphs=None, sweep_recompiles=None)


def first_call(row, system, w, compiled, args):
    """Compile and run once: first-call time, counts and max |diff| at the main size."""
    eager_out = w.fn(*args)
    sargs = system.inputs(args)
    first, out = common.time_once(lambda: compiled(*sargs))
    row.update(first_call_s=first, max_abs_diff=common.max_abs_diff(eager_out, out))
    if not row["max_abs_diff"] <= common.tolerance(eager_out):
        row.update(status="mismatch", note="MISMATCH vs eager")
    return sargs


def time_main(row, system, w, compiled, sargs, args, tp):
    """Median call time, paired with eager, and the compile time it implies."""
    if system.key == "eager":
        samples, _ = common.time_per_call(lambda: w.fn(*args), **tp)
        row.update(median_s=common.median(samples), speedup=1.0, max_abs_diff=0.0)
        return
    sc, se, _ = common.paired_samples(lambda: compiled(*sargs), lambda: w.fn(*args), **tp)
    # speedup: the median of the per-round ratios, which load that drifts over the
    # rounds affects less than a ratio of the two medians
    row.update(median_s=common.median(sc), eager_paired_s=common.median(se),
               speedup=common.median([e / c for e, c in zip(se, sc)]))
    row["first_call_extra_s"] = max(row["first_call_s"] - row["median_s"], 0.0)


def run_sweep(row, system, w, compiled):
    """Call the compiled function at every sweep size: total time, worst |diff|, and the
    graph and recompile counts after it (totals, the main size's compile included)."""
    worst, t0 = 0.0, time.perf_counter()
    for size in w.sweep:
        args = w.args(size)
        worst = max(worst, common.max_abs_diff(w.fn(*args), compiled(*system.inputs(args))))
    counts = system.counts(compiled)
    row.update(sweep=[list(s) for s in w.sweep], sweep_s=time.perf_counter() - t0,
               sweep_max_abs_diff=worst, sweep_graphs=counts.get("graphs"),
               sweep_recompiles=counts.get("recompiles"))


def compile_time(row):
    """The system's own compile time where it reports one (shapejit, torch.compile: the
    first call's capture and code generation), else first call minus median call."""
    own = row.get("self_compile_s")
    return own if own is not None else max(row["first_call_s"] - row["median_s"], 0.0)


def measure(system, w, phase, tp) -> dict:
    """One row: cold = compile, time and sweep; warm = compile time only."""
    row = new_row(w.name, system.key, phase)
    args = w.args(w.main)
    system.reset()
    try:
        with no_grad(w.lib):
            compiled = system.compile(w)
            sargs = first_call(row, system, w, compiled, args)
            row.update({k: v for k, v in system.counts(compiled).items() if v is not None})
            if phase == "warm":
                samples, _ = common.time_per_call(lambda: compiled(*sargs), repeat=3, min_sample_s=0.005)
                row.update(median_s=common.median(samples))
            else:
                time_main(row, system, w, compiled, sargs, args, tp)
                if system.spec.sweep and w.sweep:
                    run_sweep(row, system, w, compiled)
            if system.key != "eager":
                row["compile_s"] = compile_time(row)
    except Exception as e:  # noqa: BLE001 - a failing system is a row, not the end
        row.update(status="error", note="error: " + common.error_text(e))
    finally:
        system.reset()
    return row


def worker_main(args, names):
    import workloads
    tp = common.timing_params(args.quick)
    try:
        system = make_system(args.worker)
    except Exception as e:  # noqa: BLE001
        common.emit("UNAVAILABLE", common.error_text(e, 300))
        return 0
    if args.worker != "eager":
        try:
            common.emit("SETUP", system.setup_time())
        except Exception as e:  # noqa: BLE001
            common.emit("SETUP", "error: " + common.error_text(e))
    for name in names:
        common.emit("START", name)
        try:
            w = workloads.build(name)
            row = measure(system, w, args.phase, tp)
        except Exception as e:  # noqa: BLE001 - the workload could not even be built
            row = new_row(name, args.worker, args.phase)
            row.update(status="error", note="could not build workload: " + common.error_text(e))
        common.emit("ROW", row)
        common.emit("DONE", name)
    return 0


# --------------------------------------------------------------------------- running (parent side)

def child_timeout(key, n_workloads, quick) -> float:
    per = 240 if key.startswith("tc") else 90
    return per * n_workloads * (1 if quick else 1.5) + 60


def run_system(args, key, phase, names, cache_env) -> list:
    """Rows of one system and phase, from worker children (one more after each death)."""
    def argv(todo):
        return [os.path.abspath(__file__), "--worker", key, "--phase", phase,
                "--threads", str(args.threads), "--only", ",".join(todo)] + \
            (["--quick"] if args.quick else [])
    records, deaths = common.run_children_resumable(
        argv, names, child_timeout(key, len(names), args.quick), env=cache_env)
    rows = [p for tag, p in records if tag == "ROW"]
    setups = [p for tag, p in records if tag == "SETUP"]
    for row in rows:
        row["setup_s"] = setups[0] if setups else None
    for tag, p in records:
        if tag == "UNAVAILABLE":
            for name in names:
                row = new_row(name, key, phase)
                row.update(status="unavailable", note=common.shorten(p, 140))
                rows.append(row)
    for name, died, tail in deaths:
        row = new_row(name, key, phase)
        row.update(status="crash", note=f"child process {died}" + (f": {tail}" if tail else ""))
        rows.append(row)
    return rows


def progress_line(r) -> str:
    return (f"   {r['workload']:<22} {r['system']:<22} {r['phase']:<5} "
            f"median {common.fmt_time(r['median_s']):>9}  speedup {common.fmt_ratio(r['speedup']):>6}  "
            f"compile {common.fmt_time(r['compile_s']):>9}  {r['note']}")


def run_all(args, names, spec_peers) -> list:
    """Cold rows of every system, each followed by its warm run; warm compile times are
    merged into the cold rows."""
    root = common.temporary_root("sj_suite_caches_")
    rows = []
    for key in args.systems:
        todo = [n for n in names if applies(key, spec_peers[n])]
        if not todo:
            continue
        env = common.compile_cache_env(root, key)
        phases = ("cold", "warm") if SYSTEMS[key].warm else ("cold",)
        for phase in phases:
            t0 = time.perf_counter()
            got = run_system(args, key, phase, todo, env)
            print(f"== {SYSTEMS[key].label} ({phase}): {time.perf_counter() - t0:.0f} s", flush=True)
            for r in got:
                print(progress_line(r), flush=True)
            rows += got
    return merge_warm(rows)


def merge_warm(rows) -> list:
    warm = {(r["workload"], r["key"]): r for r in rows if r["phase"] == "warm"}
    out = []
    for r in rows:
        if r["phase"] != "cold":
            continue
        w = warm.get((r["workload"], r["key"]))
        r["warm_compile_s"] = w["compile_s"] if w else None
        r["warm_setup_s"] = w.get("setup_s") if w else None
        r["warm_note"] = w["note"] if w and w["status"] != "ok" else ""
        out.append(r)
    return out


# --------------------------------------------------------------------------- results

HEADERS = ["workload", "system", "median call", "speedup vs eager", "eager, same loop",
           "max |Δ| vs eager", "compile cold", "compile warm", "graphs / breaks",
           "sweep: graphs / recompiles", "sweep time", "notes"]


def fmt_diff(x) -> str:
    return "-" if x is None else f"{x:.1e}"


def sweep_cell(r) -> str:
    if r.get("sweep") is None:
        return "-"
    return f"{r['sweep_graphs']} / {r['sweep_recompiles']} over {len(r['sweep']) + 1} sizes"


def graphs_cell(r) -> str:
    if r.get("graphs") is None:
        return "-"
    return f"{r['graphs']} / {r['graph_breaks'] if r.get('graph_breaks') is not None else '-'}"


def row_cells(r):
    note = "; ".join(x for x in (r["note"], r.get("warm_note") and "warm: " + r["warm_note"]) if x)
    return [r["workload"], r["system"], common.fmt_time(r["median_s"]),
            "1.00x (baseline)" if r["key"] == "eager" else common.fmt_ratio(r["speedup"]),
            common.fmt_time(r["eager_paired_s"]), fmt_diff(r["max_abs_diff"]),
            common.fmt_time(r["compile_s"]), common.fmt_time(r.get("warm_compile_s")),
            graphs_cell(r), sweep_cell(r), common.fmt_time(r["sweep_s"]), note]


def lookup(rows):
    return {(r["workload"], r["key"]): r for r in rows if r["status"] in ("ok", "mismatch")}


def ratio_geomean(rows, num_key, den_key, field, names):
    """Geomean over workloads of row(num_key)[field] / row(den_key)[field], and how many
    workloads had both."""
    by = lookup(rows)
    ratios = [by[(n, num_key)][field] / by[(n, den_key)][field] for n in names
              if (n, num_key) in by and (n, den_key) in by
              and by[(n, num_key)][field] and by[(n, den_key)][field]]
    return common.geomean(ratios), len(ratios)


def set_groups(names, sets) -> list:
    """[(set name, its workloads that ran)] for the core and zoo sets, in that order."""
    return [(k, [n for n in names if n in sets[k]]) for k in ("core", "zoo")
            if any(n in sets[k] for n in names)]


def summary(rows, names, threads, date, set_name) -> list:
    """The quotable lines of one set: geomeans over its workloads where both systems ran.
    A figure whose systems did not run (e.g. --systems eager,tc,sj_cpu) is left out, and a
    line left with none."""
    def g(num, den, field):
        v, n = ratio_geomean(rows, num, den, field, names)
        return f"{common.fmt_ratio(v)} (n={n})" if n else None

    def line(head, parts, sep=", "):
        parts = [f"{label}{v}" for label, v in parts if v is not None]
        return [head + sep.join(parts)] if parts else []
    return (
        [f"suite summary, set {set_name} ({date}, {threads} thread(s), speedup = eager time / "
         f"system time, geomean over workloads):"]
        + line("  speedup vs eager: ", [
            ("shapejit cpu ", g('sj_cpu', 'eager', 'speedup')),
            ("torch.compile ", g('tc', 'eager', 'speedup')),
            ("shapejit cpu dynamic ", g('sj_cpu_dyn', 'eager', 'speedup')),
            ("torch.compile dynamic ", g('tc_dyn', 'eager', 'speedup'))])
        + line("  shapejit cpu / torch.compile (speedup ratio): ",
               [("", g('sj_cpu', 'tc', 'speedup'))])
        # median times, not speedups: a speedup is against eager's samples in its own loop,
        # so an eager spike in one loop would read as a dynamic/static difference
        + line("  dynamic vs static time (dynamic median / static median; >1 = dynamic slower): ", [
            ("shapejit cpu ", g('sj_cpu_dyn', 'sj_cpu', 'median_s')),
            ("torch.compile ", g('tc_dyn', 'tc', 'median_s'))])
        + line("  compile time torch.compile / shapejit cpu: ", [("", "; ".join(
            line("", [("cold ", g('tc', 'sj_cpu', 'compile_s')),
                      ("warm ", g('tc', 'sj_cpu', 'warm_compile_s'))])
            + line("dynamic cold ", [("", g('tc_dyn', 'sj_cpu_dyn', 'compile_s'))])) or None)]))


def per_system_geomeans(rows, groups) -> list:
    """[system, set, geomean speedup vs eager, workloads] for every system that ran."""
    out = []
    for set_name, names in groups:
        for key, spec in SYSTEMS.items():
            if key == "eager":
                continue
            v, n = ratio_geomean(rows, key, "eager", "speedup", names)
            if n:
                out.append([spec.label, set_name, common.fmt_ratio(v), n])
    return out


GEO_HEADERS = ["system", "set", "geomean speedup vs eager", "workloads"]


def setup_table(rows) -> list:
    """[system, set-up cold, set-up warm]: each process's first compile of `probe`."""
    out = []
    for key, spec in SYSTEMS.items():
        r = next((r for r in rows if r["key"] == key and r.get("setup_s") is not None), None)
        if r is not None:
            out.append([spec.label] + [common.fmt_time(v) if isinstance(v, float) else (v or "-")
                                       for v in (r["setup_s"], r.get("warm_setup_s"))])
    return out


SETUP_HEADERS = ["system", "process set-up, cold", "process set-up, warm"]


def make_plots(rows, names, out_dir) -> list:
    by = lookup(rows)
    keys = [k for k in SYSTEMS if k != "eager" and any(r["key"] == k for r in rows)]

    def series(field, ks):
        return {SYSTEMS[k].label: [by.get((n, k), {}).get(field) for n in names] for k in ks}
    compiled = [k for k in keys if k != "sj_eager"]
    return [
        common.bar_chart(os.path.join(out_dir, "speedup.png"), names, series("speedup", keys),
                         ylabel="speedup vs eager (log scale)", hline=1.0,
                         title="Median call time: speedup over eager (higher is better)"),
        common.bar_chart(os.path.join(out_dir, "compile_cold.png"), names,
                         series("compile_s", compiled), ylabel="seconds (log scale)",
                         title="Compile time, cold disk caches (first call minus median call)"),
        common.bar_chart(os.path.join(out_dir, "compile_warm.png"), names,
                         series("warm_compile_s", [k for k in compiled if SYSTEMS[k].warm]),
                         ylabel="seconds (log scale)",
                         title="Compile time, warm disk caches (a second process)"),
    ]


def write_markdown(path, head_lines, names, titles, rows, summ, geo, elapsed, args):  # noqa: PLR0913
    lines = ["# shapejit benchmark suite: bench/suite.py", "",
             f"Command: `python3 bench/suite.py {' '.join(sys.argv[1:])}` "
             f"(quick={args.quick}, total run time {elapsed:.0f} s)", "",
             "```"] + head_lines + ["```", "", "```"] + summ + ["```", ""]
    lines += [f"- **{n}**: {titles[n]}" for n in names] + [""]
    lines += [common.md_table(HEADERS, [row_cells(r) for r in rows]), ""]
    lines += [common.md_table(GEO_HEADERS, geo), ""]
    lines += [common.md_table(SETUP_HEADERS, setup_table(rows)), ""]
    lines += [
        "- *median call*: at the workload's main size; *speedup*: eager and the system are "
        "sampled alternately in one process (one sample of each per round; *eager, same loop* "
        "is eager's median there); the speedup is the median of the per-round ratios.",
        "- *compile cold*: the first call's compile time as the system reports it (shapejit "
        "`stats()['compile_time_s']`, torch.compile: dynamo's `entire_frame_compile_time_s`, "
        "Inductor included), else first call minus median call (numba, jax), with empty disk "
        "caches; *warm*: the same in a second process reusing the first one's disk caches. "
        "Each process first compiles a trivial function, so one-time set-up (the last table) "
        "is not charged to the first workload.",
        "- *graphs / breaks*: after the first call at the main size.",
        "- *sweep*: dynamic systems only, after the timing: the function compiled at the main "
        "size is called at each sweep size; graphs and recompiles are totals over all sizes; "
        "the sweep's max |Δ| is in suite.json.",
        ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


# --------------------------------------------------------------------------- main

def main(argv=None):
    global torch
    args = parse_args(argv)
    common.early_setup(args.threads)
    import torch  # noqa: F811
    reported = common.late_setup(args.threads)
    import workloads
    names = [n for n in (args.only.split(",") if args.only else workloads.SETS[args.wset]) if n]
    bad = [n for n in names if n not in workloads.SPECS]
    if bad:
        sys.exit(f"unknown workload(s) {bad}; valid: {list(workloads.SPECS)}")
    if args.worker:
        return worker_main(args, names)

    t_start = time.perf_counter()
    facts = common.machine_facts()
    head = [common.isa_line(facts)] + common.facts_lines(facts) + [common.thread_line(args.threads, reported)]
    print("shapejit benchmark suite" + (" (--quick)" if args.quick else "") +
          (f", workloads {args.only}" if args.only else f", set {args.wset}"))
    print("\n".join(head), flush=True)
    spec_peers = {n: workloads.SPECS[n][6] for n in names}
    rows = run_all(args, names, spec_peers)
    rows.sort(key=lambda r: (names.index(r["workload"]), list(SYSTEMS).index(r["key"])))
    elapsed = time.perf_counter() - t_start
    head.append("load average (1/5/15 min) at end: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))

    groups = set_groups(names, workloads.SETS)
    summ = [line for set_name, group in groups
            for line in summary(rows, group, args.threads, facts["date"], set_name)]
    geo = per_system_geomeans(rows, groups)
    print("\n" + common.text_table(HEADERS, [row_cells(r) for r in rows], max_col=90) + "\n")
    print(common.text_table(GEO_HEADERS, geo) + "\n")
    print(common.text_table(SETUP_HEADERS, setup_table(rows)) + "\n")
    print("\n".join(summ))
    os.makedirs(args.out, exist_ok=True)
    titles = {n: workloads.SPECS[n][0] for n in names}
    md = os.path.join(args.out, "suite.md")
    write_markdown(md, head, names, titles, rows, summ, geo, elapsed, args)
    common.write_json(os.path.join(args.out, "suite.json"),
                      dict(facts=facts, threads=reported, requested_threads=args.threads,
                           quick=args.quick, set=args.only and "only" or args.wset,
                           elapsed_s=elapsed, summary=summ, rows=rows))
    written = [md, os.path.join(args.out, "suite.json")]
    if not args.no_plots:
        try:
            written += make_plots(rows, names, args.out)
        except Exception as e:  # noqa: BLE001 - no plots is not a failed run
            print("plots failed: " + common.error_text(e), file=sys.stderr)
    print("wrote: " + ", ".join(os.path.relpath(p) for p in written))
    print(f"total time {time.perf_counter() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
