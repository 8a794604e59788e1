#!/usr/bin/env python3
"""shapejit demo benchmark: the main job of the README.

Compiles a few array functions and a small transformers BertModel with shapejit and with
its peers, all in the same run, and prints one table:

  workloads: pointwise chain, MLP (nn.Sequential), layer norm + GELU, softmax attention,
             a numpy statistics/physics kernel (Lennard-Jones energies + z-scores),
             BertModel from a small BertConfig (eval, no_grad)
  systems:   eager (the baseline), torch.compile(backend="eager") (capture only),
             torch.compile (Inductor), shapejit backend="eager", "default" and "cpu" (generated C);
             on the numpy kernel also numba (same numpy source, and hand-written loops)
             and jax.jit (the same kernel in jax.numpy, float64)
  columns:   graphs, graph breaks, recompiles, capture/compile time, median call time,
             speedup vs eager, max |difference| vs eager, notes

shapejit rows run in a child process by default (--no-isolate to run them here), so a
crash of the C extension is reported in the table instead of ending the run.  When
shapejit cannot capture a function the row says "eager fallback (<reason from explain>)".

Usage: python3 bench/main.py [--quick] [--threads N] [--out DIR] [--only a,b] [--no-isolate]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402  (stdlib only; sets nothing until early_setup)

WORKLOADS = ["pointwise", "mlp", "layernorm_gelu", "attention", "branchy", "numpy_lj", "bert"]
TITLES = {
    "pointwise": "pointwise chain (512x1024 f32)",
    "mlp": "MLP 256-1024-256, batch 64",
    "layernorm_gelu": "layer norm + GELU (128x768)",
    "attention": "softmax attention (2x4x128x64)",
    "branchy": "graph breaks: branch on a tensor value + .item() (256x512 @ 512x512)",
    "numpy_lj": "numpy LJ energies+stats (512 particles, f64)",
    "bert": "BertModel (2 layers, hidden 128, seq 64, batch 2)",
}
SJ_BACKENDS = ["eager", "default", "cpu"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="fewer repeats and shorter samples (CI smoke test; target < 3 min)")
    p.add_argument("--threads", type=int, default=1,
                   help="thread count for every library (default 1: see docs/benchmarks.md)")
    p.add_argument("--out", default=common.DEFAULT_OUT,
                   help="directory for results.md, results.json and PNG plots (default bench/results/)")
    p.add_argument("--only", default="",
                   help="comma-separated subset of workloads: " + ",".join(WORKLOADS))
    p.add_argument("--no-isolate", action="store_true",
                   help="run shapejit rows in this process instead of a child process")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--warm-inductor-cache", action="store_true",
                   help="let Inductor reuse its on-disk cache (default: a fresh empty cache, "
                        "so its compile time is a cold compile)")
    # internal: the shapejit child process
    p.add_argument("--worker-shapejit", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.workloads = [w for w in (a.only.split(",") if a.only else WORKLOADS) if w]
    bad = [w for w in a.workloads if w not in WORKLOADS]
    if bad:
        p.error(f"unknown workload(s) {bad}; valid: {WORKLOADS}")
    if a.threads < 1:
        p.error("--threads must be >= 1")
    return a


# --------------------------------------------------------------------------- workloads

def make_lj_numba_loops():
    import numba

    @numba.njit(cache=False)
    def lj_stats_loops(pos):
        n = pos.shape[0]
        per = np.empty(n)
        for i in range(n):
            acc = 0.0
            for j in range(n):
                if i != j:
                    dx = pos[i, 0] - pos[j, 0]
                    dy = pos[i, 1] - pos[j, 1]
                    dz = pos[i, 2] - pos[j, 2]
                    inv2 = 1.0 / (dx * dx + dy * dy + dz * dz)
                    inv6 = inv2 * inv2 * inv2
                    acc += 4.0 * (inv6 * inv6 - inv6)
            per[i] = 0.5 * acc
        m = per.mean()
        s = per.std()
        return per.sum(), (per - m) / s

    return lj_stats_loops


def pointwise(x):
    y = torch.relu(x * 2.0 + 1.0)
    y = y.sin() * torch.exp(-x.abs())
    return torch.tanh(y + 0.5 * x) * torch.sigmoid(x)


def layernorm_gelu(x, w, b):
    return F.gelu(F.layer_norm(x, (x.shape[-1],), w, b))


def attention(q, k, v):
    scale = 1.0 / math.sqrt(q.shape[-1])
    s = torch.matmul(q, k.transpose(-2, -1)) * scale
    p = torch.softmax(s, dim=-1)
    return torch.matmul(p, v)


def branchy(x, w):
    h = torch.relu(x @ w)
    if h.mean() > 0.5:               # a branch on a tensor's value: a graph break
        h = h * 0.5
    scale = h.abs().max().item()     # a tensor value read into Python: another break
    return torch.tanh(h / scale) + x.sum(dim=-1, keepdim=True) * 0.01


def build_workload(name: str) -> dict:
    """fn, args and library of a workload; deterministic (seeded) so the shapejit child
    process rebuilds identical inputs and weights."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    if name == "pointwise":
        return dict(fn=pointwise, args=(torch.randn(512, 1024),), lib="torch")
    if name == "mlp":
        m = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(),
                                torch.nn.Linear(1024, 256)).eval()
        return dict(fn=m, args=(torch.randn(64, 256),), lib="torch")
    if name == "layernorm_gelu":
        return dict(fn=layernorm_gelu,
                    args=(torch.randn(128, 768), torch.rand(768) + 0.5, torch.randn(768) * 0.1),
                    lib="torch")
    if name == "attention":
        q, k, v = (torch.randn(2, 4, 128, 64) for _ in range(3))
        return dict(fn=attention, args=(q, k, v), lib="torch")
    if name == "branchy":
        return dict(fn=branchy, args=(torch.randn(256, 512), torch.randn(512, 512) * 0.05), lib="torch")
    if name == "numpy_lj":
        g = np.stack(np.meshgrid(*[np.arange(8) * 1.2] * 3, indexing="ij"), -1).reshape(-1, 3)
        pos = g + rng.uniform(-0.1, 0.1, g.shape)
        return dict(fn=workloads.lj_stats, args=(pos,), lib="numpy")
    if name == "bert":
        from transformers import BertConfig, BertModel
        cfg = BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2,
                         num_attention_heads=4, intermediate_size=512,
                         max_position_embeddings=128)
        model = BertModel(cfg).eval()
        ids = torch.randint(0, cfg.vocab_size, (2, 64))
        attn_impl = getattr(model.config, "_attn_implementation", "?")
        return dict(fn=model, args=(ids,), lib="torch", extra=f"attn_implementation={attn_impl}")
    raise KeyError(name)


# --------------------------------------------------------------------------- helpers

def grad_ctx(lib):
    return torch.no_grad() if lib == "torch" else _Null()


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def new_row(workload, system):
    return dict(workload=workload, system=system, graphs=None, graph_breaks=None,
                recompiles=None, capture_s=None, self_compile_s=None, first_call_s=None,
                median_s=None, samples=None, number=None, speedup=None,
                eager_paired_s=None, max_abs_diff=None, note="", status="ok")


def paired_timing(row, call, eager_call, tp, lib):
    """Time `call` and eager alternately (one sample of each per round), so that machine
    noise hits both alike; fills median, speedup and capture time of row."""
    with grad_ctx(lib):
        sc, se, n_c = common.paired_samples(call, eager_call, **tp)
    row.update(samples=sc, number=n_c, median_s=common.median(sc),
               eager_paired_s=common.median(se))
    row["speedup"] = row["eager_paired_s"] / row["median_s"]
    if row["first_call_s"] is not None:
        row["capture_s"] = max(row["first_call_s"] - row["median_s"], 0.0)


def first_calls(row, call, ref, lib):
    """First call (capture/compile + one run) and a second call (must be a cache hit)."""
    with grad_ctx(lib):
        first, out = common.time_once(call)
        call()
    row["first_call_s"] = first
    row["max_abs_diff"] = common.max_abs_diff(ref, out)
    return out


def eager_call_of(w):
    fn, args = w["fn"], w["args"]
    return lambda: fn(*args)


# --------------------------------------------------------------------------- peers

def run_eager(name, w, tp):
    row = new_row(name, "eager")
    call = eager_call_of(w)
    with grad_ctx(w["lib"]):
        ref = call()
        samples, number = common.time_per_call(
            call, repeat=tp["repeat"], min_sample_s=tp["min_sample_s"], max_total_s=tp["max_total_s"])
    row.update(samples=samples, number=number, median_s=common.median(samples),
               graphs="-", graph_breaks="-", recompiles="-", max_abs_diff=0.0, speedup=1.0,
               note=w.get("extra", ""))
    return row, ref


def run_torch_compile(name, w, ref, tp, backend):
    label = "torch.compile eager" if backend == "eager" else "torch.compile inductor"
    row = new_row(name, label)
    dc = common.DynamoCounters()
    try:
        dc.reset()
        cf = torch.compile(w["fn"], backend=backend)
        args = w["args"]
        call = lambda: cf(*args)  # noqa: E731
        first_calls(row, call, ref, w["lib"])
        snap = dc.snapshot()
        row.update(graphs=snap["graphs"], graph_breaks=snap["graph_breaks"],
                   recompiles=snap["recompiles"], self_compile_s=snap["compile_time_s"])
        if snap["graphs"] == 0:
            row["note"] = "no graph: " + common.shorten("; ".join(snap["break_reasons"]) or "?", 120)
        elif snap["graph_breaks"]:
            row["note"] = common.shorten("breaks: " + "; ".join(snap["break_reasons"]), 120)
        paired_timing(row, call, eager_call_of(w), tp, w["lib"])
    except Exception as e:
        row["status"] = "error"
        row["note"] = "error: " + common.error_text(e)
    finally:
        try:
            dc.reset()
        except Exception:
            pass
    return row


def run_numba(name, w, ref, tp, variant):
    row = new_row(name, f"numba ({variant})")
    try:
        import numba
        fn = numba.njit(cache=False)(w["fn"]) if variant == "numpy source" else make_lj_numba_loops()
        args = w["args"]
        call = lambda: fn(*args)  # noqa: E731
        first_calls(row, call, ref, "numpy")
        row.update(graphs="-", graph_breaks="-", recompiles=len(fn.signatures) - 1)
        row["note"] = "first call = numba compile" + (
            "; hand-written loops (idiomatic numba)" if variant == "loops" else "")
        paired_timing(row, call, eager_call_of(w), tp, "numpy")
    except Exception as e:
        row["status"] = "error"
        row["note"] = "error: " + common.error_text(e)
    return row


def run_jax(name, w, ref, tp):
    row = new_row(name, "jax.jit")
    try:
        import jax
        jax.config.update("jax_enable_x64", True)
        jf = jax.jit(workloads.with_module(workloads.lj_stats, "np", jax.numpy))
        arg = jax.device_put(w["args"][0])
        call = lambda: jax.block_until_ready(jf(arg))  # noqa: E731
        first_calls(row, call, ref, "numpy")
        row.update(graphs="-", graph_breaks="-", recompiles="-")
        row["note"] = f"jax.numpy copy of the kernel, x64, device {jax.devices()[0].platform}"
        paired_timing(row, call, eager_call_of(w), tp, "numpy")
    except Exception as e:
        row["status"] = "error"
        row["note"] = "error: " + common.error_text(e)
    return row


# --------------------------------------------------------------------------- shapejit

def run_shapejit(sj, name, w, ref, tp, backend):
    row = new_row(name, f"shapejit {backend}")
    try:
        sj.reset()
        cf = sj.compile(w["fn"], backend=backend)
        args = w["args"]
        call = lambda: cf(*args)  # noqa: E731
        first_calls(row, call, ref, w["lib"])
        st = common.sj_stats(sj)
        row.update(graphs=st.get("graphs"), graph_breaks=st.get("graph_breaks"),
                   recompiles=st.get("recompiles"), self_compile_s=st.get("compile_time_s"))
        eager_frames = st.get("eager_frames", 0) or 0
        if "error" in st:
            row["note"] = "stats() failed: " + st["error"]
        elif not st.get("graphs"):
            with grad_ctx(w["lib"]):
                reason = common.shapejit_explain_reason(sj, w["fn"], args)
            row["note"] = f"eager fallback ({reason})"
            row["status"] = "fallback"
        elif st.get("graph_breaks") or eager_frames:
            with grad_ctx(w["lib"]):
                reason = common.shapejit_explain_reason(sj, w["fn"], args)
            row["note"] = f"{st.get('graph_breaks')} break(s), {eager_frames} eager frame(s): {reason}"
        if not (row["max_abs_diff"] <= common.tolerance(ref)):
            row["note"] = (row["note"] + "; " if row["note"] else "") + "MISMATCH vs eager"
            row["status"] = "mismatch"
        paired_timing(row, call, eager_call_of(w), tp, w["lib"])
    except Exception as e:
        row["status"] = "error"
        row["note"] = (row["note"] + "; " if row["note"] else "") + "error: " + common.error_text(e)
    finally:
        try:
            sj.reset()
        except Exception:
            pass
    return row


def shapejit_rows_inprocess(workloads, tp, built=None, emit=None):
    """All shapejit rows, run in this process.  Returns (rows, info)."""
    sj, why = common.import_shapejit()
    if sj is None:
        return None, {"unavailable": why}
    info = {"shapejit_file": getattr(sj, "__file__", None),
            "shapejit_version": getattr(sj, "__version__", None)}
    try:
        cfg = getattr(sj, "config", None)
        if cfg is not None:
            info["thread_knobs"] = {k: getattr(cfg, k) for k in dir(cfg)
                                    if "thread" in k.lower() and not k.startswith("_")}
    except Exception:
        pass
    if emit:
        emit("INFO", info)
    rows = []
    for name in workloads:
        if emit:
            emit("START", name)
        w = built[name] if built else build_workload(name)
        with grad_ctx(w["lib"]):
            ref = w["fn"](*w["args"])
        for backend in SJ_BACKENDS:
            row = run_shapejit(sj, name, w, ref, tp, backend)
            rows.append(row)
            if emit:
                emit("ROW", row)
    return rows, info


def shapejit_rows_isolated(args, workloads):
    """Run the shapejit rows in child processes; a crash costs one workload, not the run."""
    rows, info = [], {}
    todo = list(workloads)
    while todo:
        argv = [os.path.abspath(__file__), "--worker-shapejit", "--threads", str(args.threads),
                "--only", ",".join(todo)]
        argv += ["--quick"] if args.quick else []
        argv += ["--warm-inductor-cache"] if args.warm_inductor_cache else []
        child = common.run_child(argv, timeout=300 if args.quick else 1800)
        started, done = None, set()
        for tag, payload in child["records"]:
            if tag == "START":
                started = payload
            elif tag == "ROW":
                rows.append(payload)
                done.add(payload["workload"])
                print(f"   {payload['workload']:<15} {payload['system']:<18} "
                      f"median {common.fmt_time(payload['median_s']):>9}  "
                      f"first-call extra {common.fmt_time(payload['capture_s']):>9}  {payload['note']}",
                      flush=True)
            elif tag == "INFO":
                info.update(payload)
            elif tag == "UNAVAILABLE":
                return None, {"unavailable": payload}
        if child["died"] is None:
            break
        # the child died (or hung) while running `started`
        culprit = started if started in todo else todo[0]
        for backend in SJ_BACKENDS:
            if not any(r["workload"] == culprit and r["system"] == f"shapejit {backend}"
                       for r in rows):
                r = new_row(culprit, f"shapejit {backend}")
                r["status"] = "crash"
                r["note"] = (f"child process {child['died']} in {culprit}"
                             + (f": {child['err_tail']}" if child["err_tail"] else ""))
                rows.append(r)
                print(f"   {culprit:<15} shapejit {backend:<9} {r['note']}", flush=True)
        todo = [w for w in todo if w not in done and w != culprit]
        if child["stderr"].strip():
            sys.stderr.write("[shapejit child stderr, last lines]\n"
                             + "\n".join(child["stderr"].strip().splitlines()[-15:]) + "\n")
    return rows, info


def worker_main(args):
    """Child process: prints @@INFO / @@START / @@ROW lines (JSON) on stdout."""
    emit = common.emit
    sj, why = common.import_shapejit()
    if sj is None:
        emit("UNAVAILABLE", why)
        return 0
    shapejit_rows_inprocess(args.workloads, common.timing_params(args.quick), emit=emit)
    return 0


# --------------------------------------------------------------------------- output

HEADERS = ["workload", "system", "graphs", "breaks", "recompiles", "capture/compile",
           "self-reported compile", "median call", "eager, same loop", "speedup vs eager", "max |Δ| vs eager", "notes"]


def capture_cell(r):
    if r["capture_s"] == 0.0 and r.get("first_call_s") is not None:
        # the first call was no slower than the median: capture is below timing noise
        return f"≈0 (1st call {common.fmt_time(r['first_call_s'])})"
    return common.fmt_time(r["capture_s"])


def row_cells(r):
    def n(x):
        return "-" if x is None else str(x)
    diff = r.get("max_abs_diff")
    diff_s = "-" if diff is None else ("inf" if math.isinf(diff) else f"{diff:.1e}")
    return [r["workload"], r["system"], n(r["graphs"]), n(r["graph_breaks"]), n(r["recompiles"]),
            capture_cell(r), common.fmt_time(r["self_compile_s"]),
            common.fmt_time(r["median_s"]), common.fmt_time(r.get("eager_paired_s")),
            "1.00x (baseline)" if r["system"] == "eager" else common.fmt_ratio(r["speedup"]),
            diff_s, r["note"] or ""]


def make_plots(rows, out_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = [w for w in WORKLOADS if any(r["workload"] == w for r in rows)]
    for r in rows:
        sr = r.get("self_compile_s")
        r["compile_plot_s"] = sr if isinstance(sr, (int, float)) and sr > 0 else r.get("capture_s")
    systems = []
    for r in rows:
        if r["system"] not in systems and r["system"] != "eager":
            systems.append(r["system"])
    paths = []
    for key, fname, ylabel, title in (
            ("speedup", "speedup.png", "speedup vs eager (x, log scale)",
             "Median call time: speedup over eager (higher is better)"),
            ("compile_plot_s", "compile_time.png", "seconds (log scale)",
             "Capture/compile time (lower is better): self-reported where the system reports it,\n"
             "else first call minus median call (numba, jax)")):
        fig, ax = plt.subplots(figsize=(max(8, 1.8 * len(workloads)), 5.6))
        width = 0.8 / max(len(systems), 1)
        for i, s in enumerate(systems):
            xs, ys = [], []
            for j, w in enumerate(workloads):
                for r in rows:
                    if r["workload"] == w and r["system"] == s and r.get(key):
                        xs.append(j + (i - (len(systems) - 1) / 2) * width)
                        ys.append(r[key])
            if xs:
                ax.bar(xs, ys, width=width, label=s)
        ax.set_xticks(range(len(workloads)))
        ax.set_xticklabels([w.replace("_", "\n") for w in workloads])
        ax.set_yscale("log")
        if key == "speedup":
            ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.legend(fontsize=8, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.16))
        fig.tight_layout()
        path = os.path.join(out_dir, fname)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def write_markdown(path, facts, thread_line, rows, sj_line, args, elapsed):
    lines = ["# shapejit benchmark: bench/main.py", ""]
    lines.append(f"Command: `python3 bench/main.py {' '.join(sys.argv[1:])}`  "
                 f"(quick={args.quick}, total run time {elapsed:.0f} s)")
    lines.append("")
    lines += ["```"] + common.facts_lines(facts) + [thread_line, sj_line, "```", ""]
    for w in args.workloads:
        lines.append(f"- **{w}**: {TITLES[w]}")
    lines.append("")
    lines.append(common.md_table(HEADERS, [row_cells(r) for r in rows]))
    lines += ["",
              "- *capture/compile*: first call minus this system's median call "
              "(the one-time cost of capturing/compiling).",
              "- *self-reported compile*: shapejit `stats()['compile_time_s']`; torch.compile: sum "
              "of dynamo's `entire_frame_compile_time_s` metrics.",
              "- *speedup vs eager*: eager median / this median (>1 is faster), the two sampled "
              "alternately in one loop (one sample of each per round) so machine noise hits both "
              "alike. Medians are per call; each sample is a loop of calls; all from this one run.",
              "- *max |Δ| vs eager*: largest absolute difference of any output element.",
              "- torch workloads run under `torch.no_grad()`; Inductor's cache directory is "
              + ("the default (warm)." if args.warm_inductor_cache else "fresh (cold compile)."),
              ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


# --------------------------------------------------------------------------- main

def main(argv=None):
    global torch, F, np, workloads
    args = parse_args(argv)
    common.early_setup(args.threads, fresh_inductor_cache=not args.warm_inductor_cache)
    import numpy as np  # noqa: F811
    import torch  # noqa: F811
    import torch.nn.functional as F  # noqa: F811
    import workloads  # noqa: F811  (imports torch and numpy: after early_setup)
    reported = common.late_setup(args.threads)

    if args.worker_shapejit:
        return worker_main(args)

    t_start = time.perf_counter()
    tp = common.timing_params(args.quick)
    facts = common.machine_facts()
    tline = common.thread_line(args.threads, reported)
    print("shapejit demo benchmark" + (" (--quick)" if args.quick else ""))
    for line in common.facts_lines(facts):
        print(line)
    print(tline)
    print("", flush=True)

    rows_by_wl: dict[str, list] = {}
    built = {}
    for name in args.workloads:
        print(f"== {name}: {TITLES[name]}", flush=True)
        try:
            w = build_workload(name)
        except Exception as e:
            r = new_row(name, "eager")
            r.update(status="error", note="could not build workload: " + common.error_text(e))
            rows_by_wl[name] = [r]
            print("   " + r["note"], flush=True)
            continue
        built[name] = w
        row, ref = run_eager(name, w, tp)
        rows = [row]
        peers = [lambda: run_torch_compile(name, w, ref, tp, "eager"),
                 lambda: run_torch_compile(name, w, ref, tp, "inductor")]
        if name == "numpy_lj":
            peers += [lambda: run_numba(name, w, ref, tp, "numpy source"),
                      lambda: run_numba(name, w, ref, tp, "loops"),
                      lambda: run_jax(name, w, ref, tp)]
        for peer in peers:
            rows.append(peer())
        for r in rows:
            print(f"   {r['system']:<26} median {common.fmt_time(r['median_s']):>9}  "
                  f"first-call extra {common.fmt_time(r['capture_s']):>9}  {r['note']}", flush=True)
        rows_by_wl[name] = rows

    # shapejit
    print("== shapejit", flush=True)
    sj_workloads = [w for w in args.workloads if w in built]
    if args.no_isolate:
        sj_rows, sj_info = shapejit_rows_inprocess(sj_workloads, tp, built=built)
    else:
        sj_rows, sj_info = shapejit_rows_isolated(args, sj_workloads)
    if sj_rows is None:
        sj_line = common.shapejit_missing_line(sj_info.get("unavailable", "?"))
    else:
        sj_line = (f"shapejit: {sj_info.get('shapejit_file')} version={sj_info.get('shapejit_version')} "
                   f"thread knobs={sj_info.get('thread_knobs', {})} "
                   f"({'child process' if not args.no_isolate else 'in-process'})")
        for r in sj_rows:
            rows_by_wl.setdefault(r["workload"], []).append(r)
    print(sj_line, flush=True)

    rows = [r for w in args.workloads for r in rows_by_wl.get(w, [])]
    elapsed = time.perf_counter() - t_start
    print("")
    print(common.text_table(HEADERS, [row_cells(r) for r in rows], max_col=110))
    print("")
    print("capture/compile = first call minus median call; speedup = eager median / median, "
          "sampled alternately; all figures from this run.")

    os.makedirs(args.out, exist_ok=True)
    md_path = os.path.join(args.out, "results.md")
    write_markdown(md_path, facts, tline, rows, sj_line, args, elapsed)
    common.write_json(os.path.join(args.out, "results.json"),
                      dict(facts=facts, threads=reported, requested_threads=args.threads,
                           quick=args.quick, shapejit=sj_info, rows=rows))
    written = [md_path, os.path.join(args.out, "results.json")]
    if not args.no_plots:
        try:
            written += make_plots(rows, args.out)
        except Exception as e:
            print("plots failed: " + common.error_text(e), file=sys.stderr)
    print("wrote: " + ", ".join(os.path.relpath(p) for p in written))
    print(f"total time {time.perf_counter() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
