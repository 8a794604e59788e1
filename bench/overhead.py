#!/usr/bin/env python3
"""Per-call overhead of a compiled cache hit: f(x) = x + 1 on a one-element tensor and array.

Cases (medians of timeit samples of `number` calls each; cases of a group are sampled in turn):
  eager                 `x + 1` written inline, and f(x) as a plain Python function
  plain g               `def g(x): return OUT`, an ordinary Python call returning a
                        precomputed object: "guard + dispatch" of a compiled case is its
                        precomputed-result call minus this call (same arguments)
  shapejit              backend="default", backend="eager", and a backend returning a
                        precomputed result (isolates frame hook + guards + dispatch)
  torch.compile         backend="eager", Inductor (default), and a precomputed-result backend
  unrelated code        an uncompiled Python function (ints) and an uncompiled tensor
                        function, timed before anything was compiled, after torch.compile ran,
                        after `import shapejit` and after a shapejit-compiled function ran:
                        the frame hook must not slow code that is not compiled.
The guard groups add, each for shapejit and torch.compile in the same run:
  numpy                 f(x) = x + 1 on np.ones(1, np.float32): shapejit default and
                        precomputed-result backends, torch.compile's precomputed-result
                        backend, numba @njit dispatch of the same function, eager numpy
  100 arguments         f(a0, ..., a99) = a0 + ... + a99 on 100 tensors, dynamic=False,
                        10 cache entries (shape sets (1,) ... (10,)); precomputed-result
                        backend; hits on the newest and on the oldest entry
  cache entries         f(x) = x + 1 with 1, 8 and 64 entries (shapes (1,) ... (n,)),
                        dynamic=False, precomputed-result backend; hits on the newest and
                        oldest entry; 64-entry / 1-entry ratio

Every compiled function has its own code object (compiled from the same source text), so
no case shares a cache with another.  Results are checked against eager once before timing.

Usage: python3 bench/overhead.py [--quick] [--threads N] [--number N] [--repeat N]
                                 [--rounds N] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import timeit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

ADD_ONE_SRC = "def f(x):\n    return x + 1\n"
AIM_ADDED_S = 1e-6  # aim: under 1 µs added over eager for a shapejit cache hit


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="number=10000, repeat=7, rounds=1")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--number", type=int, default=None, help="calls per timeit sample (>= 10000)")
    p.add_argument("--repeat", type=int, default=None, help="samples per round (>= 7)")
    p.add_argument("--rounds", type=int, default=None,
                   help="rounds over all cases of a group (samples of all rounds are pooled)")
    p.add_argument("--sample-s", type=float, default=None,
                   help="seconds per sample of the slower cases (100 arguments, cache entries), "
                        "whose loop count is calibrated (at most --number); "
                        "default 0.005 with --quick, else 0.02")
    p.add_argument("--out", default=common.DEFAULT_OUT)
    p.add_argument("--no-isolate", action="store_true",
                   help="run the shapejit cases in this process (default: a child process)")
    p.add_argument("--worker-shapejit", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.number = a.number or (10000 if a.quick else 20000)
    a.repeat = a.repeat or (7 if a.quick else 9)
    a.rounds = a.rounds or (1 if a.quick else 3)
    a.auto_target = a.sample_s or (0.005 if a.quick else 0.02)
    if a.number < 10000 or a.repeat < 7:
        p.error("use --number >= 10000 and --repeat >= 7 (sub-µs differences need them)")
    return a


def fresh_add_one():
    """A new function `f(x): return x + 1` with its own code object (same file name as
    this script, so no compiler treats it as library code)."""
    ns = {}
    exec(compile(ADD_ONE_SRC, __file__, "exec"), ns)
    return ns["f"]


def plain_py(a, b):
    return a + b


def plain_tensor(x):
    return x * 1 + 1


def const_backend(graph, example_inputs):
    """Backend that runs the real graph once and then returns that result on every call:
    what remains of a call is the frame hook, the guards and the dispatch.  Works for
    torch.compile (graph = fx.GraphModule) and shapejit (graph = _C.Graph, which returns
    the graph's flat outputs tuple): it returns exactly what the graph returned."""
    out = graph(*example_inputs)
    return lambda *args: out


PLAIN_LABEL = "plain g: returns precomputed OUT"
GD_HEADER = "vs plain g (= guard + dispatch on precomputed-result rows)"
STRESS_ARGS = 100     # the stress shape: 100 tensor arguments ...
STRESS_ENTRIES = 10   # ... and 10 cache entries
ENTRY_COUNTS = (1, 8, 64)
CACHE_LIMIT, ACCUMULATED_LIMIT = 128, 1024   # both systems, for the numpy, stress and entries groups
AIM_GD_S = 0.5e-6     # aim: under 0.5 µs of guard + dispatch, x + 1 ...
AIM_GD_RATIO = 10.0   # ... at least 10x below torch.compile's
AIM_STRESS_S = 10e-6  # aim: 100 arguments x 10 entries under 10 µs per call ...
AIM_STRESS_RATIO = 5.0  # ... at least 5x below torch.compile's
AIM_FLAT = 1.2        # aim: 64-entry hit within 20% of the 1-entry hit
STRESS_PARAMS = ", ".join(f"a{i}" for i in range(STRESS_ARGS))
STRESS_SRC = (f"def f({STRESS_PARAMS}):\n    return "
              + " + ".join(f"a{i}" for i in range(STRESS_ARGS)) + "\n")


def fresh_fn(src, name="f", **env):
    """The function `name` defined by `src`, with its own code object (file name: this
    script), its globals a fresh namespace holding `env`."""
    ns = dict(env)
    exec(compile(src, __file__, "exec"), ns)
    return ns[name]


def fresh_plain(params, out):
    """`def g(<params>): return OUT`: an ordinary Python call returning a precomputed
    object, the baseline that "guard + dispatch" is measured against."""
    return fresh_fn(f"def g({params}):\n    return OUT\n", "g", OUT=out)


def counting_const_backend():
    """const_backend that also counts its compiles (`.calls`): one per cache entry."""
    calls = []

    def backend(graph, example_inputs):
        calls.append(1)
        out = graph(*example_inputs)
        return lambda *args: out
    backend.calls = calls
    return backend


def check_same(got, want, what):
    """Raise AssertionError unless a compiled result equals eager's (type, dtype, values)."""
    import numpy as np
    import torch
    if isinstance(want, torch.Tensor):
        ok = (isinstance(got, torch.Tensor) and got.dtype == want.dtype
              and got.shape == want.shape and torch.equal(got, want))
    else:
        ok = (isinstance(got, np.ndarray) and got.dtype == want.dtype
              and got.shape == want.shape and np.array_equal(got, want))
    if not ok:
        raise AssertionError(f"{what}: result differs from eager: {type(got).__name__} "
                             f"{common.shorten(repr(got), 80)} vs {common.shorten(repr(want), 80)}")


def sj_compiler(sj):
    def comp(fn, backend, dynamic=None):
        kw = {} if dynamic is None else {"dynamic": dynamic}
        return sj.compile(fn, backend=backend, **kw)
    return comp


def tc_compiler():
    import torch

    def comp(fn, backend, dynamic=None):
        return torch.compile(fn, backend=backend, dynamic=dynamic)
    return comp


def limits_context(system, sj=None):
    """Cache limits of at least 64 entries per code object for the numpy, stress and entries
    groups."""
    if system == "shapejit":
        return sj.config.patch(cache_size_limit=CACHE_LIMIT,
                               accumulated_cache_size_limit=ACCUMULATED_LIMIT)
    import torch._dynamo
    cfg = torch._dynamo.config
    kw = {}
    for names, value in ((("recompile_limit", "cache_size_limit"), CACHE_LIMIT),
                         (("accumulated_recompile_limit", "accumulated_cache_size_limit"),
                          ACCUMULATED_LIMIT)):
        for n in names:
            if hasattr(cfg, n):
                kw[n] = value
                break
    return cfg.patch(**kw)


class Cases:
    """Named timeit cases; samples of several rounds are pooled.

    A case may have its own loop count (`number=N`, or "auto": calibrated so a sample lasts
    about `auto_target` seconds, at most the group's `number`) and metadata (`role`, the
    role of its eager reference `vs_eager`, and `gd=True` for a compiled case whose
    guard + dispatch is reported against the group's plain-g case)."""

    def __init__(self, number, repeat, auto_target=None):
        self.number, self.repeat, self.auto_target = number, repeat, auto_target
        self.timers, self.samples, self.errors = {}, {}, {}
        self.numbers, self.meta = {}, {}

    def add(self, name, stmt, env, number=None, **meta):
        t = timeit.Timer(stmt, globals=env)
        if number == "auto":
            number = auto_number(t, self.auto_target or 0.005, self.number)
        self.timers[name] = t
        self.numbers[name] = int(number or self.number)
        self.meta[name] = meta
        self.samples.setdefault(name, [])

    def fail(self, name, e):
        self.errors[name] = common.error_text(e)

    def round(self):
        """`repeat` samples of every case, interleaved (one sample of each case in turn),
        so that noise from other processes spreads over all cases alike."""
        live = dict(self.timers)
        for name, t in live.items():  # warm-up
            try:
                t.timeit(max(self.numbers.get(name, self.number) // 10, 1))
            except Exception as e:
                self.fail(name, e)
        for _ in range(self.repeat):
            for name, t in live.items():
                if name in self.errors:
                    continue
                n = self.numbers.get(name, self.number)
                try:
                    self.samples[name].append(t.timeit(n) / n)
                except Exception as e:
                    self.fail(name, e)

    def dump(self):
        return dict(order=list(self.timers), samples=self.samples, errors=self.errors,
                    numbers=self.numbers, meta=self.meta)

    def load(self, d):
        """Results of a child's Cases; names become pseudo-timers (for ordering only)."""
        for name in d["order"]:
            self.timers[name] = None
        self.samples.update(d["samples"])
        self.errors.update(d["errors"])
        self.numbers.update(d.get("numbers", {}))
        self.meta.update(d.get("meta", {}))

    def median(self, name):
        return common.median(self.samples.get(name, []))

    def by_role(self, role):
        """Name of the case with this role (None if none)."""
        for name, meta in self.meta.items():
            if meta.get("role") == role:
                return name
        return None

    def role_median(self, role):
        name = self.by_role(role)
        return self.median(name) if name is not None else float("nan")


def auto_number(timer, target_s, cap, floor=10):
    """Loop count whose sample lasts about target_s (at least `floor`, at most `cap`)."""
    n = 1
    while True:
        dt = timer.timeit(n)
        if dt >= target_s or n >= cap:
            break
        n = min(cap, max(n * 2, int(n * target_s / max(dt, 1e-9) * 1.2)))
    return max(floor, min(n, cap))


def measure_group(cases, rounds, label, log=None):
    t0 = time.perf_counter()
    for _ in range(rounds):
        cases.round()
    ns = sorted(set(cases.numbers.values())) or [cases.number]
    calls = (f"{ns[0]} calls" if len(ns) == 1
             else f"{ns[0]}-{ns[-1]} calls (calibrated per case)")
    (log or (lambda m: print("   " + m, flush=True)))(f"({label}: {len(cases.timers)} cases x {rounds} round(s) x {cases.repeat} samples "
          f"x {calls}, {time.perf_counter() - t0:.1f} s)")


UNRELATED = ("plain_py(1, 2)", "plain_tensor(x)")


def unrelated_phase(phases, name, x, number, repeat, rounds, log=None):
    """Time the uncompiled functions now, record median and min under phase `name`."""
    env = {"plain_py": plain_py, "plain_tensor": plain_tensor, "x": x}
    cases = Cases(number, repeat)
    for stmt in UNRELATED:
        cases.add(stmt, stmt, env)
    for _ in range(rounds):
        cases.round()
    res = {k: (cases.median(k), min(cases.samples[k] or [float("nan")])) for k in UNRELATED}
    phases.append((name, res))
    (log or (lambda m: print("   " + m, flush=True)))(f"unrelated code, {name}: " + ", ".join(
        f"{k} median {common.fmt_time(v[0])} min {common.fmt_time(v[1])}" for k, v in res.items()))


def add_eager_cases(cases, x, eager_f):
    """The baselines of the tensor group: inline x + 1, eager f(x), plain g(x)."""
    cases.add("eager: x + 1 (inline)", "x + 1", {"x": x}, role="eager_inline")
    cases.add("eager: f(x)", "f(x)", {"f": eager_f, "x": x}, role="eager")
    cases.add(f"{PLAIN_LABEL} (g(x))", "g(x)", {"g": fresh_plain("x", eager_f(x)), "x": x},
              role="plain")


def shapejit_group(sjc, phases, x, eager_f, args, log=None, prefix=""):
    """The shapejit cases (and phases of uncompiled code around them); returns a note."""
    N, R = args.number, args.repeat
    log = log or (lambda m: print("   " + m, flush=True))
    sj, why = common.import_shapejit()
    if sj is None:
        note = common.shapejit_missing_line(why)
        log(note)
        return note
    unrelated_phase(phases, prefix + "after import shapejit", x, N, R, args.rounds, log=log)
    sj.reset()
    add_eager_cases(sjc, x, eager_f)
    for label, backend, role in (("shapejit backend=default", "default", "default"),
                                 ("shapejit backend=eager", "eager", "backend_eager"),
                                 ("shapejit precomputed-result backend", const_backend, "const")):
        try:
            cf = sj.compile(fresh_add_one(), backend=backend)
            for _ in range(3):
                out = cf(x)
            check_same(out, eager_f(x), label)
            sjc.add(label, "f(x)", {"f": cf, "x": x}, role=role, gd=True)
        except Exception as e:
            sjc.fail(label, e)
            log(f"{label}: {sjc.errors[label]}")
    st0 = common.sj_stats(sj)
    measure_group(sjc, args.rounds, "shapejit group", log=log)
    st1 = common.sj_stats(sj)
    note = (f"shapejit stats after warm-up: {st0}; recompiles during timing: "
            f"{(st1.get('recompiles') or 0) - (st0.get('recompiles') or 0)}")
    if not st0.get("graphs"):
        note += ("; NO GRAPH was captured, calls ran eagerly: "
                 + common.shapejit_explain_reason(sj, fresh_add_one(), (x,)))
    log(note)
    unrelated_phase(phases, prefix + "after shapejit functions ran", x, N, R, args.rounds, log=log)
    return note


# ------------------------------------------------------------------ guard groups

def compiles_note(label, backend, expected):
    n = len(backend.calls)
    return (f"{label}: {n} backend compile(s) for {expected} cache entr{'y' if expected == 1 else 'ies'}"
            + ("" if n == expected else " -- WARNING: not one entry per shape set"))


def numpy_group(system, comp, args, log):
    """f(x) = x + 1 on np.ones(1, np.float32)."""
    import numpy as np
    a = np.ones(1, np.float32)
    eager_f = fresh_add_one()
    ref = eager_f(a)
    c = Cases(args.number, args.repeat)
    notes, backends = [], []
    c.add("eager numpy: x + 1 (inline)", "x + 1", {"x": a}, role="eager_inline")
    c.add("eager numpy: f(x)", "f(x)", {"f": eager_f, "x": a}, role="eager")
    c.add(PLAIN_LABEL, "g(x)", {"g": fresh_plain("x", ref), "x": a}, role="plain")
    if system == "shapejit":
        variants = [("shapejit backend=default", "default", "default"),
                    ("shapejit precomputed-result backend", "const", None)]
    else:
        variants = [("torch.compile precomputed-result backend", "const", None)]
    for label, role, backend in variants:
        try:
            b = backend or counting_const_backend()
            cf = comp(fresh_add_one(), b)
            for _ in range(3):
                out = cf(a)
            check_same(out, ref, label)
            c.add(label, "f(x)", {"f": cf, "x": a}, role=role, gd=True)
            if backend is None:
                backends.append((label, b, len(b.calls)))
        except Exception as e:
            c.fail(label, e)
            log(f"{label}: {c.errors[label]}")
    if system == "torch.compile":
        label = "numba @njit f(x) (dispatch + its compiled x + 1)"
        try:
            import numba
        except ImportError as e:
            line = f"numba: NOT AVAILABLE ({type(e).__name__}: {e}) -- numba row skipped"
            log(line)
            notes.append(line)
        else:
            try:
                nf = numba.njit(cache=False)(fresh_add_one())
                for _ in range(3):
                    out = nf(a)
                check_same(out, ref, label)
                c.add(label, "f(x)", {"f": nf, "x": a}, role="numba", gd=True)
            except Exception as e:
                c.fail(label, e)
                log(f"{label}: {c.errors[label]}")
    measure_group(c, args.rounds, f"{system} numpy group", log=log)
    for label, b, n0 in backends:
        notes.append(f"{label}: compiles during timing: {len(b.calls) - n0}")
    return c, notes


def stress_group(system, comp, args, log):
    """f(a0, ..., a99) = a0 + ... + a99, 10 cache entries, hits on newest and oldest."""
    import torch
    eager_f = fresh_fn(STRESS_SRC)
    sets = [tuple(torch.ones(i + 1) for _ in range(STRESS_ARGS)) for i in range(STRESS_ENTRIES)]
    newest, oldest = sets[-1], sets[0]
    refs = [eager_f(*s) for s in sets]
    c = Cases(args.number, args.repeat, auto_target=args.auto_target)
    notes = []
    c.add(f"eager f(*xs), shapes ({STRESS_ENTRIES},)", "f(*xs)", {"f": eager_f, "xs": newest},
          number="auto", role="eager")
    c.add("eager f(*xs), shapes (1,)", "f(*xs)", {"f": eager_f, "xs": oldest},
          number="auto", role="eager_oldest")
    c.add(PLAIN_LABEL, "g(*xs)", {"g": fresh_plain(STRESS_PARAMS, refs[-1]), "xs": newest},
          number="auto", role="plain")
    label = f"{system} precomputed-result backend"
    try:
        b = counting_const_backend()
        cf = comp(fresh_fn(STRESS_SRC), b, dynamic=False)
        for s, r in zip(sets, refs):       # compiles: one entry per shape set
            check_same(cf(*s), r, f"{label}, compile of shapes {tuple(s[0].shape)}")
        n0 = len(b.calls)
        for s, r in zip(sets, refs):       # hits
            check_same(cf(*s), r, f"{label}, hit on shapes {tuple(s[0].shape)}")
        notes.append(compiles_note(label, b, STRESS_ENTRIES))
        c.add(f"{label}: hit newest entry (shapes ({STRESS_ENTRIES},))", "f(*xs)",
              {"f": cf, "xs": newest}, number="auto", role="const_newest", gd=True)
        c.add(f"{label}: hit oldest entry (shapes (1,))", "f(*xs)",
              {"f": cf, "xs": oldest}, number="auto", role="const_oldest", gd=True,
              vs_eager="eager_oldest")
    except Exception as e:
        c.fail(label, e)
        log(f"{label}: {c.errors[label]}")
        b, n0 = None, 0
    measure_group(c, args.rounds, f"{system} 100-argument group", log=log)
    if b is not None:
        notes.append(f"{label}: compiles during timing: {len(b.calls) - n0}")
    return c, notes


def entries_group(system, comp, args, log):
    """f(x) = x + 1 with 1, 8 and 64 cache entries (shapes (1,) ... (n,))."""
    import torch
    eager_f = fresh_add_one()
    xs = [torch.ones(i + 1) for i in range(max(ENTRY_COUNTS))]
    refs = [eager_f(x) for x in xs]
    c = Cases(args.number, args.repeat, auto_target=args.auto_target)
    notes = []
    c.add("eager f(x), x = torch.ones(1)", "f(x)", {"f": eager_f, "x": xs[0]},
          number="auto", role="eager")
    c.add(PLAIN_LABEL, "g(x)", {"g": fresh_plain("x", refs[0]), "x": xs[0]},
          number="auto", role="plain")
    watch = []
    for n in ENTRY_COUNTS:
        label = f"{system} precomputed-result backend, {n} entr{'y' if n == 1 else 'ies'}"
        try:
            b = counting_const_backend()
            cf = comp(fresh_add_one(), b, dynamic=False)
            for x, r in zip(xs[:n], refs[:n]):
                check_same(cf(x), r, f"{label}, compile of shape {tuple(x.shape)}")
            n0 = len(b.calls)
            for x, r in zip(xs[:n], refs[:n]):
                check_same(cf(x), r, f"{label}, hit on shape {tuple(x.shape)}")
            notes.append(compiles_note(label, b, n))
            watch.append((label, b, n0))
            if n == 1:
                c.add(f"{label}: hit", "f(x)", {"f": cf, "x": xs[0]}, number="auto",
                      role="hit_1", gd=True)
            else:
                c.add(f"{label}: hit newest (shape ({n},))", "f(x)", {"f": cf, "x": xs[n - 1]},
                      number="auto", role=f"hit_{n}_newest", gd=True)
                c.add(f"{label}: hit oldest (shape (1,))", "f(x)", {"f": cf, "x": xs[0]},
                      number="auto", role=f"hit_{n}_oldest", gd=True)
        except Exception as e:
            c.fail(label, e)
            log(f"{label}: {c.errors[label]}")
    measure_group(c, args.rounds, f"{system} cache-entries group", log=log)
    for label, b, n0 in watch:
        if len(b.calls) != n0:
            notes.append(f"{label}: compiles during timing: {len(b.calls) - n0}")
    if watch:
        notes.append(f"{system}: compiles during timing in this group: "
                     f"{sum(len(b.calls) - n0 for _, b, n0 in watch)}")
    return c, notes


STRESS_GROUPS = (("numpy", numpy_group), ("stress", stress_group), ("entries", entries_group))


def stress_groups(system, comp, args, log, limits, on_group=None):
    """Runs the numpy, stress and entries groups of one system; {name: (Cases, notes)}.  `limits` is the
    cache-limit context; `on_group(name, cases, notes)` is called after each group."""
    out = {}
    with limits:
        for name, fn in STRESS_GROUPS:
            try:
                c, notes = fn(system, comp, args, log)
            except Exception as e:  # a failure of the set-up itself (not of a case)
                c, notes = Cases(args.number, args.repeat), []
                c.fail(f"{system} {name} group", e)
                log(f"{system} {name} group: {c.errors[f'{system} {name} group']}")
            out[name] = (c, notes)
            if on_group is not None:
                on_group(name, c, notes)
    return out


def worker_main(args):
    """Child process: the shapejit group, emitted as one @@RESULT line."""
    common.early_setup(args.threads)
    import torch
    common.late_setup(args.threads)
    x = torch.ones(1)
    logs, phases = [], []
    unrelated_phase(phases, "child: before import shapejit", x, args.number, args.repeat,
                    args.rounds, log=logs.append)
    sj, why = common.import_shapejit()
    if sj is None:
        common.emit("UNAVAILABLE", why)
        return 0
    sjc = Cases(args.number, args.repeat)
    note = shapejit_group(sjc, phases, x, fresh_add_one(), args, log=logs.append,
                          prefix="child: ")
    common.emit("RESULT", dict(cases=sjc.dump(), note=note, phases=phases, log=logs))
    # The numpy, stress and entries groups, one @@GROUP line each as it finishes (a crash in one keeps the
    # results of those before it).
    glog = []

    def on_group(name, cases, notes):
        common.emit("GROUP", dict(name=name, cases=cases.dump(), notes=notes, log=list(glog)))
        glog.clear()
    stress_groups("shapejit", sj_compiler(sj), args, glog.append, limits_context("shapejit", sj),
                  on_group=on_group)
    return 0


def fmt_delta(d):
    if d is None or d != d:
        return "-"
    return ("+" if d >= 0 else "-") + common.fmt_time(abs(d))


GROUP_TITLES = (
    ("numpy", "Cache-hit call of f(x) = x + 1, x = np.ones(1, np.float32)"),
    ("stress", f"{STRESS_ARGS} tensor arguments, {STRESS_ENTRIES} cache entries (dynamic=False)"),
    ("entries", "Hit cost with " + ", ".join(map(str, ENTRY_COUNTS))
     + " cache entries: f(x) = x + 1 (dynamic=False)"),
)


def case_rows(system, group, inline):
    """Table rows of one group's cases (errors of cases that never got a timer last)."""
    rows = []
    if not group.timers and not group.errors:
        return rows
    e_in = group.role_median("eager_inline")
    plain = group.role_median("plain")
    for name in list(group.timers) + [n for n in group.errors if n not in group.timers]:
        meta = group.meta.get(name, {})
        role = meta.get("role", "")
        m = group.median(name)
        e_f = group.role_median(meta.get("vs_eager", "eager"))
        samples = group.samples.get(name) or []
        row = [system, name, common.fmt_time(m),
               "-" if role.startswith("eager") or not role else fmt_delta(m - e_f)]
        if inline:
            row.append("-" if role in ("eager_inline", "") else fmt_delta(m - e_in))
        row.append(fmt_delta(m - plain) if meta.get("gd") else "-")
        row.append(common.fmt_time(min(samples or [float("nan")])))
        row.append(len(samples) if inline else
                   f"{group.numbers.get(name, group.number)} x {len(samples)}")
        row.append(group.errors.get(name, ""))
        rows.append(row)
    return rows


def _nan():
    return float("nan")


def _ok(v):
    return v is not None and v == v


def summary_rows(tc, sjc, tc4, sj4):
    """The numpy, stress and entries figures side by side: (headers, rows)."""
    def grp(res, name):
        return res[name][0] if name in res else Cases(1, 1)

    def gd(c, role):
        return c.role_median(role) - c.role_median("plain")

    def ratio(a, b):  # a / b, "-" when either is missing
        if not (_ok(a) and _ok(b)):
            return _nan()
        return a / b if b > 0 else float("inf")

    def ratio_text(r, sj):
        if r == float("inf"):
            return f"∞ (shapejit {fmt_delta(sj)}, below noise)"
        return common.fmt_ratio(r)

    def verdict(checks):
        if not checks or any(c is None for c in checks):
            return "-"
        return "met" if all(checks) else "NOT met"

    headers = ["scenario", "shapejit", "torch.compile", "torch.compile / shapejit", "numba",
               "aim", "aim met (shapejit)"]
    rows = []
    tnp, snp = grp(tc4, "numpy"), grp(sj4, "numpy")
    for label, s_c, t_c in (("f(x) = x + 1, torch.ones(1): guard + dispatch", sjc, tc),
                            ("f(x) = x + 1, np.ones(1, float32): guard + dispatch", snp, tnp)):
        s, t = gd(s_c, "const"), gd(t_c, "const")
        r = ratio(t, s)
        numba = "-"
        if t_c is tnp and tnp.by_role("numba"):
            numba = (f"{fmt_delta(gd(tnp, 'numba'))} (per call {common.fmt_time(tnp.role_median('numba'))}"
                     f" minus plain g; includes its x + 1)")
        rows.append([label, fmt_delta(s), fmt_delta(t), ratio_text(r, s), numba,
                     f"< {common.fmt_time(AIM_GD_S)} and >= {AIM_GD_RATIO:g}x below torch.compile",
                     verdict([s < AIM_GD_S if _ok(s) else None,
                              r >= AIM_GD_RATIO if _ok(r) else None])])
    rows.append(["np x + 1 per call: sj default / tc precomputed / numba",
                 common.fmt_time(snp.role_median("default")),
                 common.fmt_time(tnp.role_median("const")), "-",
                 common.fmt_time(tnp.role_median("numba")) if tnp.by_role("numba") else "-",
                 "-", "-"])
    tst, sst = grp(tc4, "stress"), grp(sj4, "stress")
    for which in ("newest", "oldest"):
        s, t = sst.role_median(f"const_{which}"), tst.role_median(f"const_{which}")
        r = ratio(t, s)
        rows.append([f"{STRESS_ARGS} args, {STRESS_ENTRIES} entries, hit {which} entry: per call",
                     common.fmt_time(s), common.fmt_time(t), ratio_text(r, s), "-",
                     f"< {common.fmt_time(AIM_STRESS_S)} and >= {AIM_STRESS_RATIO:g}x below "
                     f"torch.compile",
                     verdict([s < AIM_STRESS_S if _ok(s) else None,
                              r >= AIM_STRESS_RATIO if _ok(r) else None])])
        s, t = gd(sst, f"const_{which}"), gd(tst, f"const_{which}")
        rows.append([f"{STRESS_ARGS} args, {STRESS_ENTRIES} entries, hit {which} entry: "
                     f"guard + dispatch", fmt_delta(s), fmt_delta(t),
                     ratio_text(ratio(t, s), s), "-", "-", "-"])
    ten, sen = grp(tc4, "entries"), grp(sj4, "entries")
    big = max(ENTRY_COUNTS)
    for n in ENTRY_COUNTS[1:]:
        for which in ("newest", "oldest"):
            s = ratio(sen.role_median(f"hit_{n}_{which}"), sen.role_median("hit_1"))
            t = ratio(ten.role_median(f"hit_{n}_{which}"), ten.role_median("hit_1"))
            aim = n == big
            rows.append([f"f(x) = x + 1, hit {which} of {n} entries / hit of 1 entry (per call)",
                         common.fmt_ratio(s), common.fmt_ratio(t), "-", "-",
                         f"<= {AIM_FLAT:.2f}x (flat within 20%)" if aim else "-",
                         verdict([s <= AIM_FLAT if _ok(s) else None]) if aim else "-"])
    return headers, rows


def main(argv=None):
    args = parse_args(argv)
    if args.worker_shapejit:
        return worker_main(args)
    common.early_setup(args.threads)
    import torch
    reported = common.late_setup(args.threads)
    facts = common.machine_facts()
    tline = common.thread_line(args.threads, reported)
    print("per-call overhead of a cache hit: f(x) = x + 1, x = torch.ones(1)")
    for line in common.facts_lines(facts):
        print(line)
    print(tline)
    print(f"timeit: number={args.number} repeat={args.repeat} rounds={args.rounds}", flush=True)

    x = torch.ones(1)
    N, R = args.number, args.repeat
    phases = []
    unrelated_phase(phases, "before anything was compiled", x, N, R, args.rounds)

    # ---------------------------------------------------------------- torch.compile group
    import torch._dynamo
    torch._dynamo.reset()
    eager_f = fresh_add_one()
    tc = Cases(N, R)
    add_eager_cases(tc, x, eager_f)
    for label, backend, role in (("torch.compile backend=eager", "eager", "backend_eager"),
                                 ("torch.compile inductor", "inductor", "inductor"),
                                 ("torch.compile precomputed-result backend", const_backend,
                                  "const")):
        try:
            cf = torch.compile(fresh_add_one(), backend=backend)
            for _ in range(3):
                out = cf(x)
            check_same(out, eager_f(x), label)
            tc.add(label, "f(x)", {"f": cf, "x": x}, role=role, gd=True)
        except Exception as e:
            tc.fail(label, e)
            print(f"   {label}: {tc.errors[label]}", flush=True)
    dyn = common.DynamoCounters().snapshot()
    measure_group(tc, args.rounds, "torch.compile group")
    dyn_after = common.DynamoCounters().snapshot()
    unrelated_phase(phases, "after torch.compile functions ran", x, N, R, args.rounds)

    # ---------------------------------------------------------------- torch.compile, guard groups
    print("   torch.compile issue-4 groups (numpy, 100 arguments, cache entries):", flush=True)
    plog = (lambda m: print("   " + m, flush=True))
    tc4 = stress_groups("torch.compile", tc_compiler(), args, plog, limits_context("torch.compile"))

    # ---------------------------------------------------------------- shapejit group
    sjc = Cases(N, R)
    sj4 = {}
    if args.no_isolate:
        sj_note = shapejit_group(sjc, phases, x, eager_f, args)
        sj, _why = common.import_shapejit()
        if sj is not None:
            sj4 = stress_groups("shapejit", sj_compiler(sj), args, plog,
                                limits_context("shapejit", sj))
    else:
        # A child process (same thread set-up) runs the shapejit cases and its own
        # before/after phases of uncompiled code, so a crash of the C extension is
        # reported instead of ending this run.
        print("   shapejit group: running in a child process", flush=True)
        child = common.run_child(
            [os.path.abspath(__file__), "--worker-shapejit", "--threads", str(args.threads),
             "--number", str(N), "--repeat", str(R), "--rounds", str(args.rounds),
             "--sample-s", repr(args.auto_target)],
            timeout=900)
        recs = dict(child["records"])
        if "RESULT" in recs:
            r = recs["RESULT"]
            sjc.load(r["cases"])
            sj_note = r["note"]
            for name, res in r["phases"]:
                phases.append((name, {k: tuple(v) for k, v in res.items()}))
            for line in r["log"]:
                print("   [child] " + line, flush=True)
        else:
            sj_note = recs.get("UNAVAILABLE") or (
                f"shapejit: child process {child['died'] or 'gave no result'}"
                + (f": {child['err_tail']}" if child["err_tail"] else ""))
            if "UNAVAILABLE" in recs:
                sj_note = common.shapejit_missing_line(sj_note)
            print("   " + sj_note, flush=True)
        for tag, g in child["records"]:
            if tag != "GROUP":
                continue
            c = Cases(N, R)
            c.load(g["cases"])
            sj4[g["name"]] = (c, g["notes"])
            for line in g["log"]:
                print("   [child] " + line, flush=True)
        if "RESULT" in recs:
            missing = [n for n, _ in STRESS_GROUPS if n not in sj4]
            if missing:
                why = (f"child process {child['died'] or 'gave no result'}"
                       + (f": {child['err_tail']}" if child["err_tail"] else ""))
                for n in missing:
                    c = Cases(N, R)
                    c.fail(f"shapejit {n} group", common.ChildDied(why))
                    sj4[n] = (c, [])
                print(f"   shapejit issue-4 groups {', '.join(missing)}: {why}", flush=True)

    # ---------------------------------------------------------------- report
    headers = ["group", "case", "median per call", "vs eager f(x)", "vs eager x + 1",
               GD_HEADER, "min per call", "samples", "note"]
    rows = []
    for gname, group in (("torch.compile", tc), ("shapejit", sjc)):
        for row in case_rows(gname, group, inline=True):
            if row[1].startswith("shapejit backend=default") and row[-1] is not None:
                m = group.median(row[1])
                if m == m:
                    added = m - group.role_median("eager")
                    row[-1] = (row[-1] + " " if row[-1] else "") + (
                        f"aim < 1 µs added: {'met' if added < AIM_ADDED_S else 'NOT met'}")
            rows.append(row)
    print("")
    print(common.text_table(headers, rows, max_col=90))
    recompiles_tc = dyn_after["recompiles"] - dyn["recompiles"]
    print(f"torch.compile: graphs={dyn['graphs']} breaks={dyn['graph_breaks']} "
          f"recompiles during timing={recompiles_tc}")

    h4 = ["system", "case", "median per call", "vs eager", GD_HEADER,
          "min per call", "calls x samples", "note"]
    sections4 = []
    for gname, title in GROUP_TITLES:
        rows4, notes4 = [], []
        for system, res in (("torch.compile", tc4), ("shapejit", sj4)):
            if gname not in res:
                continue
            c, notes = res[gname]
            rows4 += case_rows(system, c, inline=False)
            notes4 += notes
        sections4.append((title, rows4, notes4))
        print("")
        print(title + ":")
        print(common.text_table(h4, rows4, max_col=90))
        for line in notes4:
            print("- " + line)

    sh, srows = summary_rows(tc, sjc, tc4, sj4)
    print("")
    print("guard aims summary (guard + dispatch = precomputed-result call minus plain g call, "
          "same process, same arguments):")
    print(common.text_table(sh, srows, max_col=70))

    print("")
    uheaders = ["phase"]
    for k in UNRELATED:
        uheaders += [f"{k} median", "Δ median", "min", "Δ min"]
    urows = []
    for i, (name, res) in enumerate(phases):
        # Δ against the first phase of the same process (the child has its own)
        same = [r for n, r in phases[: i + 1] if n.startswith("child:") == name.startswith("child:")]
        base = same[0]
        row = [name]
        for k in UNRELATED:
            row += [common.fmt_time(res[k][0]), fmt_delta(res[k][0] - base[k][0]),
                    common.fmt_time(res[k][1]), fmt_delta(res[k][1] - base[k][1])]
        urows.append(row)
    print("uncompiled code (the frame hook must cost it nothing); Δ = vs the first phase of "
          "the same process; "
          "on a busy machine trust min more than median:")
    print(common.text_table(uheaders, urows))

    os.makedirs(args.out, exist_ok=True)
    md = ["# shapejit benchmark: bench/overhead.py", "",
          f"Command: `python3 bench/overhead.py {' '.join(sys.argv[1:])}`", "",
          "```"] + common.facts_lines(facts) + [
              tline, f"timeit: number={N} repeat={R} rounds={args.rounds} "
                     f"(calibrated cases: about {args.auto_target * 1e3:g} ms per sample, "
                     f"at most {N} calls)",
              "```", "", "## Cache-hit call of f(x) = x + 1, x = torch.ones(1)", "",
              common.md_table(headers, rows), "",
              f"- torch.compile: graphs={dyn['graphs']} breaks={dyn['graph_breaks']} "
              f"recompiles during timing={recompiles_tc}",
              f"- {sj_note or 'shapejit: -'}", ""]
    md += ["## Guard aims summary", "",
           "Guard + dispatch = the precomputed-result backend's call minus a plain Python "
           "function returning a precomputed object (`def g(x): return OUT`), same "
           "arguments, same process and group.", "", common.md_table(sh, srows), ""]
    for title, rows4, notes4 in sections4:
        md += [f"## {title}", "", common.md_table(h4, rows4), ""] + [f"- {n}" for n in notes4] + [""]
    md += ["## Uncompiled code", "", common.md_table(uheaders, urows), ""]
    with open(os.path.join(args.out, "overhead.md"), "w") as f:
        f.write("\n".join(md))
    common.write_json(os.path.join(args.out, "overhead.json"), dict(
        facts=facts, threads=reported, number=N, repeat=R, rounds=args.rounds,
        sample_s=args.auto_target,
        torch_compile={k: tc.samples.get(k) for k in tc.timers}, torch_compile_errors=tc.errors,
        shapejit={k: sjc.samples.get(k) for k in sjc.timers}, shapejit_errors=sjc.errors,
        shapejit_note=sj_note, unrelated=phases,
        stress={system: {g: dict(c.dump(), notes=notes) for g, (c, notes) in res.items()}
                for system, res in (("torch.compile", tc4), ("shapejit", sj4))},
        stress_summary=[dict(zip(sh, r)) for r in srows]))
    print(f"wrote: {os.path.relpath(os.path.join(args.out, 'overhead.md'))}, "
          f"{os.path.relpath(os.path.join(args.out, 'overhead.json'))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
