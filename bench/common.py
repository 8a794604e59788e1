"""Shared helpers for the shapejit benchmarks (bench/*.py).

Import order matters: thread counts of OpenMP/MKL/OpenBLAS/XLA are read from the
environment when those libraries load, so every script parses its arguments with the
standard library only, calls ``early_setup(threads)`` and only then imports torch,
numpy, numba or jax.  ``late_setup(threads)`` then applies the counts that are set
through library calls (torch, numba).

Nothing here imports torch/numpy/numba/jax at module level.
"""

from __future__ import annotations

import datetime as _dt
import importlib
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
import timeit
import traceback

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO_ROOT, "bench", "results")

# Environment variables that decide the thread count of each library's runtime.
THREAD_ENV_VARS = (
    "OMP_NUM_THREADS",          # torch (ATen/OpenMP), oneDNN, numpy's OpenBLAS built with OpenMP
    "MKL_NUM_THREADS",          # MKL, if any library is linked to it
    "OPENBLAS_NUM_THREADS",     # numpy's OpenBLAS
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMBA_NUM_THREADS",        # numba's parallel threading layer
    "TORCHINDUCTOR_COMPILE_THREADS",  # inductor's parallel compile workers
)

# Environment variables recorded (not set) in the machine facts.
RECORDED_ENV_VARS = THREAD_ENV_VARS + (
    "OPENBLAS_CORETYPE", "XLA_FLAGS", "TORCHINDUCTOR_CACHE_DIR", "TORCH_LOGS",
    "KMP_AFFINITY", "OMP_PROC_BIND", "GOMP_CPU_AFFINITY", "PYTHONHASHSEED", "SHAPEJIT_CPU_TARGET",
    "GLIBC_TUNABLES", "SJ_BENCH_MALLOC",
    *"ONEDNN_MAX_CPU_ISA MKL_ENABLE_INSTRUCTIONS ATEN_CPU_CAPABILITY".split(),   # ISA caps
)

# The ISA caps that make an AVX-512 machine measure like an AVX2 one: each library that
# dispatches on the CPU is held to AVX2 (MKL, eager's matmuls on Intel CPUs, would
# otherwise keep its AVX-512 kernels while the rest drops to AVX2).
ISA_CAP_VARS = ("SHAPEJIT_CPU_TARGET", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY",
                "OPENBLAS_CORETYPE")


# --------------------------------------------------------------------------- set-up

# glibc malloc thresholds every process of a run starts with. glibc's defaults adapt the
# mmap threshold to the blocks a process has freed so far, and give memory back to the
# system above a trim threshold that follows it, so whether a call's large temporaries
# (a TransformerEncoderLayer's scores, MKL's and oneDNN's packing buffers) come back
# already mapped or page-fault afresh depends on the process's history: eager
# encoder_s128 (AVX2, 2 threads) took 3.8 ms in one process and 5.0 ms in another, with
# about 800 page faults a call. Fixed thresholds (the largest mmap threshold glibc
# accepts, a trim threshold far above any workload's temporaries) give every system its
# fault-free time in every process. SJ_BENCH_MALLOC=default keeps glibc's defaults; a
# GLIBC_TUNABLES that already sets a glibc.malloc tunable is left as it is.
MALLOC_TUNABLES = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=268435456"


def steady_malloc() -> None:
    """Run this script again, in place, with MALLOC_TUNABLES in GLIBC_TUNABLES (read by the
    dynamic loader at process start, so only a new process takes them; the children it
    starts inherit them).  Only for a bench script run as a program, before it imports
    anything heavy."""
    if os.environ.get("SJ_BENCH_MALLOC", "") == "default":
        return
    tun = os.environ.get("GLIBC_TUNABLES", "")
    if "glibc.malloc." in tun:
        return
    script = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if os.path.dirname(script) != os.path.dirname(os.path.abspath(__file__)):
        return   # imported from elsewhere (a test, an interactive session): never exec
    os.environ["GLIBC_TUNABLES"] = (tun + ":" if tun else "") + MALLOC_TUNABLES
    sys.stdout.flush()
    sys.stderr.flush()
    argv = list(getattr(sys, "orig_argv", None) or [sys.executable] + sys.argv)
    os.execv(sys.executable, argv)


def early_setup(threads: int, fresh_inductor_cache: bool = True) -> None:
    """Set the thread environment before any numeric library is imported, and the malloc
    thresholds (steady_malloc: the script starts again once with them).

    threads: the one thread count every library runs with.
    fresh_inductor_cache: point Inductor at an empty cache directory so its compile
      time is a cold compile (otherwise a second run of the script reuses kernels from
      /tmp/torchinductor_<user> and its compile time looks much smaller).
    """
    steady_malloc()
    for mod in ("torch", "numpy", "numba", "jax", "jaxlib"):
        if mod in sys.modules:
            print(f"warning: {mod} was imported before the thread set-up; "
                  f"its thread count may not be {threads}", file=sys.stderr)
    n = str(int(threads))
    for var in THREAD_ENV_VARS:
        os.environ[var] = n
    flags = os.environ.get("XLA_FLAGS", "")
    extra = (f"--xla_cpu_multi_thread_eigen={'false' if threads == 1 else 'true'} "
             f"intra_op_parallelism_threads={n}")
    if "xla_cpu_multi_thread_eigen" not in flags:
        os.environ["XLA_FLAGS"] = (flags + " " + extra).strip()
    if fresh_inductor_cache and "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        path = tempfile.mkdtemp(prefix="sj_bench_inductor_")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = path  # child processes inherit it
        import atexit
        import shutil
        atexit.register(shutil.rmtree, path, True)
    # Matplotlib must never try to open a window.
    os.environ.setdefault("MPLBACKEND", "Agg")


# Compile caches on disk, per system: the environment variable naming each directory.
COMPILE_CACHE_ENV = {
    "inductor": "TORCHINDUCTOR_CACHE_DIR",
    "shapejit": "SHAPEJIT_CACHE_DIR",
    "numba": "NUMBA_CACHE_DIR",
    "jax": "JAX_COMPILATION_CACHE_DIR",
}


def compile_cache_env(root: str, tag: str) -> dict:
    """Environment that points every system's disk cache at `root/tag/<system>` (created
    empty, mode 0700): a first process started with it compiles cold, a second one
    started with the same environment compiles warm.  One tag per system compared, so
    that no system finds another's cache entries."""
    env = {}
    for system, var in COMPILE_CACHE_ENV.items():
        path = os.path.join(root, tag, system)
        os.makedirs(path, mode=0o700, exist_ok=True)
        env[var] = path
    return env


def temporary_root(prefix: str) -> str:
    """A new private temporary directory, removed when this process exits."""
    import atexit
    import shutil
    root = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, root, True)
    return root


def late_setup(threads: int) -> dict:
    """Apply thread counts through library calls; returns what each library reports."""
    out = {}
    try:
        import torch
        torch.set_num_threads(threads)
        try:
            torch.set_num_interop_threads(threads)
        except RuntimeError:
            pass  # only settable once, before any inter-op work
        out["torch"] = torch.get_num_threads()
        out["torch_interop"] = torch.get_num_interop_threads()
        try:
            import torch._inductor.config as ic
            ic.compile_threads = threads
            out["inductor_compile_threads"] = ic.compile_threads
        except Exception:
            pass
    except ImportError:
        pass
    try:
        import numba
        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
        out["numba"] = numba.get_num_threads()
    except ImportError:
        pass
    return out


def thread_line(threads: int, reported: dict) -> str:
    parts = [f"requested={threads}"]
    parts += [f"{k}={v}" for k, v in reported.items()]
    parts += [f"{v}={os.environ.get(v, '')}" for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")]
    parts.append(f"XLA_FLAGS='{os.environ.get('XLA_FLAGS', '')}'")
    return "threads: " + " ".join(parts)


# --------------------------------------------------------------------------- machine facts

def _cpuinfo() -> dict:
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if ":" not in line:
                    continue
                k, v = (s.strip() for s in line.split(":", 1))
                if k in ("model name", "flags", "cpu family", "model", "stepping",
                         "vendor_id", "cache size") and k not in info:
                    info[k] = v
    except OSError:
        pass
    return info


def lib_versions() -> dict:
    """Versions of every library the benchmarks may touch (None: not installed)."""
    names = ["shapejit", "torch", "numpy", "numba", "llvmlite", "jax", "jaxlib",
             "transformers", "matplotlib", "scipy"]
    out = {"python": platform.python_version()}
    for name in names:
        try:
            from importlib import metadata
            out[name] = metadata.version(name)
        except Exception:
            mod = sys.modules.get(name)
            out[name] = getattr(mod, "__version__", None) if mod else None
    return out


def kernel_target() -> str:
    """The -march shapejit's generated kernels are built for in the workers: they inherit
    $SHAPEJIT_CPU_TARGET, else the knob cpu_target keeps its default."""
    return os.environ.get("SHAPEJIT_CPU_TARGET") or "native"


def isa_line(facts: dict) -> str:
    """The CPU's widest vector ISA and the kernels' target, the first fact printed."""
    return f"cpu isa: {facts['isa']}  shapejit kernel target: -march={facts['kernel_target']}"


def machine_facts() -> dict:
    cpu = _cpuinfo()
    flags = cpu.get("flags", "").split()
    facts = {
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "hostname": platform.node(),
        "platform": platform.platform(),
        "cpu_model": cpu.get("model name", platform.processor() or "unknown"),
        "cpu_vendor": cpu.get("vendor_id"),
        "cpu_family_model_stepping": "/".join(
            str(cpu.get(k, "?")) for k in ("cpu family", "model", "stepping")),
        "logical_cpus": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "avx2": "avx2" in flags,
        "avx512": "avx512f" in flags,
        "avx512_flags": sorted(f for f in flags if f.startswith("avx512")),
        "amx": any(f.startswith("amx") for f in flags),
        "isa": "avx512f" if "avx512f" in flags else "avx2" if "avx2" in flags else "below avx2",
        "kernel_target": kernel_target(),
        "env": {v: os.environ.get(v) for v in RECORDED_ENV_VARS if os.environ.get(v) is not None},
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE", "(unset)"),
        "versions": lib_versions(),
    }
    try:
        facts["loadavg"] = " ".join(f"{x:.2f}" for x in os.getloadavg())  # other load on the machine
    except OSError:
        pass
    try:
        facts["memory_gb"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        pass
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            facts["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
            facts["torch_mkldnn"] = torch.backends.mkldnn.is_available()
            facts["torch_mkl"] = torch.backends.mkl.is_available()
            facts["torch_openmp"] = torch.backends.openmp.is_available()
        except Exception:
            pass
    np = sys.modules.get("numpy")
    if np is not None:
        try:
            cfg = np.show_config(mode="dicts")
            blas = cfg.get("Build Dependencies", {}).get("blas", {})
            facts["numpy_blas"] = f"{blas.get('name')} {blas.get('version')}".strip()
        except Exception:
            pass
    return facts


def facts_lines(facts: dict) -> list[str]:
    v = facts["versions"]
    lines = [
        f"date: {facts['date']}  host: {facts['hostname']}",
        f"cpu: {facts['cpu_model']} (vendor {facts['cpu_vendor']}, family/model/stepping "
        f"{facts['cpu_family_model_stepping']}), {facts['logical_cpus']} logical cpus, "
        f"{facts.get('usable_cpus')} usable, {facts.get('memory_gb', '?')} GB",
        f"isa: avx2={facts['avx2']} avx512={facts['avx512']} ({' '.join(facts['avx512_flags']) or '-'}) "
        f"amx={facts['amx']} torch_cpu_capability={facts.get('torch_cpu_capability', '?')}",
        f"OPENBLAS_CORETYPE={facts['OPENBLAS_CORETYPE']}  numpy_blas={facts.get('numpy_blas', '?')}",
        "isa caps: " + (" ".join(f"{k}={facts['env'][k]}" for k in ISA_CAP_VARS if k in facts["env"]) or "(none)"),
        "malloc: GLIBC_TUNABLES=" + (facts["env"].get("GLIBC_TUNABLES") or "(unset: glibc's adaptive thresholds)"),
        "versions: " + " ".join(f"{k}={val}" for k, val in v.items()),
        f"platform: {facts['platform']}  load average (1/5/15 min) at start: {facts.get('loadavg', '?')}",
    ]
    return lines


# --------------------------------------------------------------------------- timing

def median(xs):
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return statistics.median(xs) if xs else float("nan")


def calibrate_number(fn, min_sample_s: float) -> int:
    """Smallest loop count (1, 2, 5, 10, 20, ...) whose total time is >= min_sample_s."""
    number = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        dt = time.perf_counter() - t0
        if dt >= min_sample_s or number >= 10**7:
            return number
        # jump close to the target, then round up to 1-2-5
        want = number * max(2.0, min_sample_s / max(dt, 1e-9) * 1.2)
        exp = 10 ** int(math.floor(math.log10(want)))
        for m in (1, 2, 5, 10):
            if m * exp >= want:
                number = int(m * exp)
                break


def time_per_call(fn, *, repeat: int = 7, min_sample_s: float = 0.01,
                  number: int | None = None, warmup: int = 1, max_total_s: float | None = None):
    """Per-call times (seconds) of fn(): `repeat` samples, each a loop of `number` calls.

    Returns (samples, number).  The median of `samples` is the figure to report.
    """
    for _ in range(warmup):
        fn()
    if number is None:
        number = calibrate_number(fn, min_sample_s)
    timer = timeit.Timer(fn)
    samples = []
    t_start = time.perf_counter()
    for i in range(repeat):
        samples.append(timer.timeit(number) / number)
        if max_total_s is not None and i >= 2 and time.perf_counter() - t_start > max_total_s:
            break
    return samples, number


def time_once(fn):
    """(seconds, result) of a single call."""
    t0 = time.perf_counter()
    r = fn()
    return time.perf_counter() - t0, r


def timing_params(quick: bool) -> dict:
    """Keyword arguments of time_per_call / paired_samples for a quick or a full run."""
    if quick:
        return dict(repeat=5, min_sample_s=0.01, max_total_s=2.0)
    return dict(repeat=15, min_sample_s=0.02, max_total_s=10.0)


def positive_int(text: str) -> int:
    """argparse type of --threads and other counts."""
    n = int(text)
    if n < 1:
        raise ValueError(text)
    return n


# Alternating warm-up before paired samples: calls of the two, in turn, until both limits
# are reached or PAIRED_WARMUP_MAX_S has passed.
PAIRED_WARMUP_ROUNDS = 20
PAIRED_WARMUP_MIN_S = 0.3
PAIRED_WARMUP_MAX_S = 2.0


def paired_warmup(call, eager_call):
    """Calls eager_call and call in turn until the process's memory has settled: two
    programs allocating in turn grow glibc's heap for a while (new pages touched, about a
    thousand page faults a call) before each finds its blocks free on every call. A BERT
    layer pair at 2 threads ran ~20% slower over its first 13 alternations (10.2 against
    8.5 ms, eager 10 against 9.3), which a quick run's five rounds sampled whole. Returns
    the rounds run."""
    t0 = time.perf_counter()
    rounds = 0
    while True:
        eager_call()
        call()
        rounds += 1
        dt = time.perf_counter() - t0
        if (rounds >= PAIRED_WARMUP_ROUNDS and dt >= PAIRED_WARMUP_MIN_S) or dt >= PAIRED_WARMUP_MAX_S:
            return rounds


def paired_samples(call, eager_call, *, repeat: int, min_sample_s: float, max_total_s: float):
    """Per-call samples of `call` and `eager_call` taken alternately (one of each per
    round), so that load from other processes hits both alike, after paired_warmup.

    Returns (samples of call, samples of eager_call, loop count of call).
    """
    paired_warmup(call, eager_call)
    n_c = calibrate_number(call, min_sample_s)
    n_e = calibrate_number(eager_call, min_sample_s)
    t_c, t_e = timeit.Timer(call), timeit.Timer(eager_call)
    sc, se = [], []
    t0 = time.perf_counter()
    for i in range(repeat):
        se.append(t_e.timeit(n_e) / n_e)
        sc.append(t_c.timeit(n_c) / n_c)
        if i >= 2 and time.perf_counter() - t0 > 2 * max_total_s:
            break
    return sc, se, n_c


def geomean(xs):
    """Geometric mean of the positive finite values of xs (nan if there are none)."""
    xs = [x for x in xs if isinstance(x, (int, float)) and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def flat_arrays(x):
    """Flatten an output (tensor, ndarray, jax array, scalar, tuple, dict, ModelOutput)
    to a list of numpy arrays."""
    import numpy as np
    if hasattr(x, "to_tuple") and not isinstance(x, (tuple, list)):
        x = x.to_tuple()
    if isinstance(x, dict):
        x = list(x.values())
    if isinstance(x, (tuple, list)):
        return [a for e in x for a in flat_arrays(e)]
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return [x.detach().cpu().numpy()]
    return [np.asarray(x)]


def max_abs_diff(ref, got) -> float:
    """Largest absolute difference of any output element (inf: different structure)."""
    import numpy as np
    a, b = flat_arrays(ref), flat_arrays(got)
    if len(a) != len(b):
        return float("inf")
    worst = 0.0
    for x, y in zip(a, b):
        if x.shape != y.shape:
            return float("inf")
        if x.size:
            worst = max(worst, float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))))
    return worst


def tolerance(ref) -> float:
    """The max |difference| allowed against eager: 1e-4 of the output's scale (>= 1)."""
    import numpy as np
    scale = max((float(np.max(np.abs(a))) for a in flat_arrays(ref) if a.size), default=1.0)
    return 1e-4 * max(scale, 1.0)


def fmt_time(s) -> str:
    """Human form of a duration in seconds: ns, µs, ms or s with 3 significant digits."""
    if s is None or (isinstance(s, float) and math.isnan(s)):
        return "-"
    a = abs(s)
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if a >= scale or unit == "ns":
            return f"{s / scale:.3g} {unit}"
    return f"{s} s"


def fmt_ratio(r) -> str:
    if r is None or (isinstance(r, float) and (math.isnan(r) or math.isinf(r))):
        return "-"
    return f"{r:.2f}x"


# --------------------------------------------------------------------------- shapejit

def import_shapejit():
    """(module, None) or (None, reason).  Never raises."""
    # Prefer an in-place build in this checkout (python3 setup.py build_ext --inplace);
    # otherwise whatever `import shapejit` finds (pip install .).
    pkg = os.path.join(REPO_ROOT, "shapejit")
    try:
        inplace = any(n.startswith("_C") and n.endswith((".so", ".pyd")) for n in os.listdir(pkg))
    except OSError:
        inplace = False
    if inplace and REPO_ROOT not in sys.path:
        sys.path.insert(0, REPO_ROOT)
    try:
        sj = importlib.import_module("shapejit")
        for attr in ("compile", "reset", "stats", "explain"):
            if not hasattr(sj, attr):
                return None, f"shapejit imported but has no `{attr}` yet"
        return sj, None
    except Exception as e:  # ImportError, or an error inside the package
        return None, f"{type(e).__name__}: {e}"


def shapejit_missing_line(reason: str) -> str:
    return (f"shapejit: NOT AVAILABLE ({reason}) -- shapejit rows are skipped; "
            f"build it with `python3 setup.py build_ext --inplace` from the repo root")


def sj_stats(sj) -> dict:
    try:
        return dict(sj.stats())
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}


def _get(obj, name, default=None):
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def break_reasons_text(explanation, limit: int = 2, width: int = 160) -> str:
    """The first break reasons of a shapejit (or torch._dynamo) explain result, one line."""
    reasons = _get(explanation, "break_reasons", None) or []
    parts = []
    for r in list(reasons)[:limit]:
        reason = _get(r, "reason", None) or str(r)
        stack = _get(r, "user_stack", None) or _get(r, "stack", None) or []
        where = ""
        if stack:
            last = list(stack)[-1]
            fn_ = _get(last, "filename", None)
            ln = _get(last, "lineno", None)
            if fn_ is None and isinstance(last, (tuple, list)) and len(last) >= 2:
                fn_, ln = last[0], last[1]
            if fn_ is None:
                where = f" at {last}"
            else:
                where = f" at {os.path.basename(str(fn_))}:{ln}"
        parts.append(f"{str(reason).strip().splitlines()[0] if str(reason).strip() else reason}{where}")
    more = len(reasons) - limit
    text = "; ".join(parts) + (f"; +{more} more" if more > 0 else "")
    return shorten(text, width)


def shapejit_explain_reason(sj, fn, args, kwargs=None) -> str:
    """Break reasons of fn(*args) per shapejit.explain; never raises."""
    try:
        exp = sj.explain(fn)(*args, **(kwargs or {}))
        text = break_reasons_text(exp)
        return text or "no break reason recorded"
    except Exception as e:
        return f"explain failed: {type(e).__name__}: {shorten(str(e), 100)}"


# --------------------------------------------------------------------------- torch.compile

class DynamoCounters:
    """Graph, break and recompile counts of torch.compile since the last reset()."""

    def reset(self):
        import torch._dynamo
        from torch._dynamo.utils import counters
        torch._dynamo.reset()
        counters.clear()
        try:
            from torch._dynamo.utils import clear_compilation_metrics
            clear_compilation_metrics()
        except Exception:
            pass

    def snapshot(self) -> dict:
        from torch._dynamo.utils import counters
        out = {
            "graphs": int(counters["stats"].get("unique_graphs", 0)),
            "graph_breaks": int(sum(counters["graph_break"].values())),
            "break_reasons": list(counters["graph_break"].keys()),
            "frames": int(counters["frames"].get("total", 0)),
        }
        recompiles, compile_s = 0, 0.0
        try:
            from torch._dynamo.utils import get_compilation_metrics
            for m in get_compilation_metrics():
                cid = str(getattr(m, "compile_id", "") or "")
                if getattr(m, "recompile_reason", None) or (
                        "/" in cid and cid.split("/")[-1].split("_")[0] not in ("0", "")):
                    recompiles += 1
                compile_s += float(getattr(m, "entire_frame_compile_time_s", 0.0) or 0.0)
        except Exception:
            pass
        out["recompiles"] = recompiles
        out["compile_time_s"] = compile_s
        return out


# --------------------------------------------------------------------------- plots

def bar_chart(path: str, groups, series: dict, *, ylabel: str, title: str,
              log: bool = True, hline: float | None = None) -> str:
    """Grouped bar chart: one group of bars per entry of `groups`, one bar per series
    (series: {label: [value or None per group]}).  Writes a PNG, returns its path."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(max(8, 1.1 * len(groups) + 2), 5.6))
    width = 0.8 / max(len(series), 1)
    for i, (label, values) in enumerate(series.items()):
        pts = [(j + (i - (len(series) - 1) / 2) * width, v) for j, v in enumerate(values)
               if isinstance(v, (int, float)) and v > 0 and math.isfinite(v)]
        if pts:
            ax.bar([x for x, _ in pts], [v for _, v in pts], width=width, label=label)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([str(g).replace("_", "\n") for g in groups], fontsize=8)
    if log:
        ax.set_yscale("log")
    if hline is not None:
        ax.axhline(hline, color="black", linewidth=0.8)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.16))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------- output

def shorten(s: str, width: int) -> str:
    s = " ".join(str(s).split())
    return s if len(s) <= width else s[: width - 1] + "…"


class ChildDied(RuntimeError):
    """A worker child process crashed, hung or gave no result (message says which)."""


def error_text(e: BaseException, width: int = 140) -> str:
    if isinstance(e, ChildDied):
        return shorten(str(e), width)
    return shorten(f"{type(e).__name__}: {e}", width)


def md_table(headers, rows) -> str:
    def cell(x):
        return str(x).replace("|", "\\|").replace("\n", " ")
    out = ["| " + " | ".join(cell(h) for h in headers) + " |",
           "|" + "|".join("---" for _ in headers) + "|"]
    for r in rows:
        out.append("| " + " | ".join(cell(x) for x in r) + " |")
    return "\n".join(out)


def text_table(headers, rows, max_col: int = 60) -> str:
    rows = [[shorten(str(x), max_col) for x in r] for r in rows]
    widths = [len(str(h)) for h in headers]
    for r in rows:
        for i, x in enumerate(r):
            widths[i] = max(widths[i], len(x))
    line = "  ".join(str(h).ljust(w) for h, w in zip(headers, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    for r in rows:
        out.append("  ".join(x.ljust(w) for x, w in zip(r, widths)))
    return "\n".join(out)


def write_json(path: str, obj) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=1, default=str)


def print_exc_short(prefix: str) -> None:
    print(prefix, file=sys.stderr)
    traceback.print_exc(limit=3, file=sys.stderr)


# --------------------------------------------------------------------------- child processes

def emit(tag: str, payload) -> None:
    """One result line of a worker child process: `@@TAG <json>`."""
    print(f"@@{tag} " + json.dumps(payload, default=str), flush=True)


def run_child(argv, timeout: float, env: dict | None = None) -> dict:
    """Run `python3 <argv>` (a worker that emits @@TAG lines) and collect its results.

    Returns dict(records=[(tag, payload)], rc, timed_out, died (None or a description such
    as "crashed (signal 11)"), err_tail).  The child is ours; on timeout subprocess kills it.
    env: variables set for the child on top of this process's environment.
    """
    import subprocess
    cmd = [sys.executable] + list(argv)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                           env=dict(os.environ, **(env or {})))
        out, err, rc, timed_out = p.stdout, p.stderr, p.returncode, False
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        rc, timed_out = None, True
    records = []
    for line in out.splitlines():
        if line.startswith("@@") and " " in line:
            tag, payload = line[2:].split(" ", 1)
            try:
                records.append((tag, json.loads(payload)))
            except ValueError:
                records.append((tag, payload))
    died = None
    if timed_out:
        died = f"timed out after {timeout:.0f} s"
    elif rc and rc < 0:
        import signal
        try:
            sig = signal.Signals(-rc).name
        except ValueError:
            sig = str(-rc)
        died = f"crashed ({sig})"
    elif rc:
        died = f"exited with code {rc}"
    lines = [ln for ln in (err or "").strip().splitlines() if ln.strip()]
    return dict(records=records, rc=rc, timed_out=timed_out, died=died,
                err_tail=shorten(" / ".join(lines[-2:]), 200) if lines else "",
                stderr=err or "")


def run_children_resumable(make_argv, items, timeout: float, env: dict | None = None):
    """Run worker children over `items` until each is done or blamed for a death.

    make_argv(todo) gives the argv of a worker for the items still to do; the worker
    emits `@@START <item>` before each item and `@@DONE <item>` after it.  When a child
    crashes or hangs, the item it had started is blamed and a new child goes on with the
    rest.  Returns (records of every child, [(item, death description, stderr tail)]).
    """
    records, deaths = [], []
    todo = list(items)
    while todo:
        child = run_child(make_argv(todo), timeout, env)
        started, done = None, set()
        for tag, payload in child["records"]:
            records.append((tag, payload))
            if tag == "START":
                started = payload
            elif tag == "DONE":
                done.add(payload)
        if child["died"] is None:
            break
        culprit = started if started in todo and started not in done else \
            next((i for i in todo if i not in done), None)
        if culprit is not None:
            deaths.append((culprit, child["died"], child["err_tail"]))
        todo = [i for i in todo if i not in done and i != culprit]
    return records, deaths
