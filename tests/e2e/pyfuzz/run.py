"""Runs generated programs (gen.py) eagerly and through shapejit, and compares.

``check(seed, backends)`` returns None when every backend agrees with eager on every call,
else a one-line description of the first difference. ``main`` runs a range of seeds (the
`make fuzz-py` target), each chunk in a child process so that a crash of the interpreter is
counted (and its seeds named) instead of ending the run.
"""
import argparse
import io
import os
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np

if __package__ in (None, ""):
    # run as a script (make fuzz-py): the folder holding pyfuzz (tests/e2e), and the
    # checkout for the shapejit it builds in place
    _HOME = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path[:0] = [_HOME, os.path.dirname(os.path.dirname(_HOME))]
    from pyfuzz.gen import generate   # noqa: E402
else:
    from .gen import generate

# Construct kinds whose mismatches belong to known gaps outside the evaluator's object
# model: programs using them are generated and run, but a difference is reported as a
# known gap, not a failure. Remove a kind when its gap is closed. None is open.
KNOWN_GAPS = frozenset()

_SRC_DIR = None


def _inputs(lib, rng):
    x, y = rng.standard_normal(3).astype("float32"), rng.standard_normal(3).astype("float32")
    if lib == "torch":
        import torch
        x, y = torch.from_numpy(x), torch.from_numpy(y)
    d = {"a": x * 2, "b": y + 1}
    return [x, y, d, [x + y]]


def _copy(v):
    if isinstance(v, dict):
        return {k: _copy(u) for k, u in v.items()}
    if isinstance(v, list):
        return [_copy(u) for u in v]
    return v.clone() if hasattr(v, "clone") else v.copy()


def _norm(v, seen=None):
    """A comparable form: type names, lists for views and containers, numpy for arrays."""
    if isinstance(v, (tuple, list)):
        return (type(v).__name__, [_norm(u) for u in v])
    if isinstance(v, dict):
        return ("dict", [(k, _norm(u)) for k, u in v.items()])
    if type(v).__name__ in ("dict_keys", "dict_values", "dict_items"):
        return (type(v).__name__, [_norm(u) for u in v])
    if hasattr(v, "numpy") and hasattr(v, "dtype"):
        return ("Tensor", v.detach().numpy())
    if isinstance(v, (np.ndarray, np.generic)):
        return (type(v).__name__, np.asarray(v))
    if isinstance(v, (set, frozenset)):
        return (type(v).__name__, sorted(v))
    return (type(v).__name__, v)


def _diff(a, b, what):
    """None when a and b (normalised) agree, else a description."""
    if a[0] != b[0]:
        return f"{what}: {b[0]}, eager {a[0]}"
    if isinstance(a[1], np.ndarray):
        if a[1].dtype != b[1].dtype or a[1].shape != b[1].shape:
            return f"{what}: {b[1].dtype}{b[1].shape}, eager {a[1].dtype}{a[1].shape}"
        if not np.allclose(a[1], b[1], rtol=1e-5, atol=1e-6, equal_nan=True):
            return f"{what}: {b[1]!r}, eager {a[1]!r}"
        return None
    if isinstance(a[1], list):
        if len(a[1]) != len(b[1]):
            return f"{what}: length {len(b[1])}, eager {len(a[1])}"
        for i, (p, q) in enumerate(zip(a[1], b[1])):
            if isinstance(p, tuple) and len(p) == 2 and not isinstance(p[0], str) or (
                    isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], tuple)):
                if a[0] == "dict":
                    if p[0] != q[0]:
                        return f"{what}: key {q[0]!r}, eager {p[0]!r}"
                    r = _diff(p[1], q[1], f"{what}[{p[0]!r}]")
                else:
                    r = _diff(p, q, f"{what}[{i}]")
            else:
                r = _diff(p, q, f"{what}[{i}]") if isinstance(p, tuple) else (
                    None if p == q else f"{what}[{i}]: {q!r}, eager {p!r}")
            if r:
                return r
        return None
    return None if a[1] == b[1] else f"{what}: {b[1]!r}, eager {a[1]!r}"


def _scribble(v, depth=0):
    """Writes into the containers of a result, as a caller may: a result that shares an
    object with the next call's shows it there."""
    if depth > 3:
        return
    if isinstance(v, list):
        for u in list(v):
            _scribble(u, depth + 1)
        v.append("scribble")
    elif isinstance(v, dict):
        for u in list(v.values()):
            _scribble(u, depth + 1)
        v["scribble"] = 0
    elif isinstance(v, set):
        v.add("scribble")
    elif isinstance(v, tuple):
        for u in v:
            _scribble(u, depth + 1)


def _call(fn, args):
    buf = io.StringIO()
    try:
        res = fn(*args, buf)
        r = ("ok", _norm(res))
    except Exception as e:   # noqa: BLE001 - compared by type
        res, r = None, ("raise", type(e).__name__)
    after = _norm(args)   # before the scribble: the result may hold the caller's containers
    _scribble(res)
    return r, after, buf.getvalue()


def load(seed):
    """(program, namespace) of one seed, its source written to a file for tracebacks."""
    global _SRC_DIR
    prog = generate(seed)
    if _SRC_DIR is None:
        _SRC_DIR = tempfile.mkdtemp(prefix="pyfuzz_")
    path = os.path.join(_SRC_DIR, f"pyfuzz_{seed}.py")
    with open(path, "w") as fh:
        fh.write(prog.source)
    ns = {"__name__": f"pyfuzz_{seed}", "__file__": path}
    exec(compile(prog.source, path, "exec"), ns)
    return prog, ns


def check(seed, backends=("default", "eager"), calls=2):
    """None when shapejit agrees with eager on the program of seed, else what differs."""
    import shapejit
    prog, ns = load(seed)
    fn = ns["f"]
    for backend in backends:
        shapejit.reset()
        compiled = shapejit.compile(fn, backend=backend)
        rng = np.random.default_rng(seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for call in range(calls):
                args = _inputs(prog.lib, rng)
                e, e_args, e_out = _call(fn, _copy(args))
                c, c_args, c_out = _call(compiled, _copy(args))
                where = f"seed {seed} backend {backend} call {call}"
                if e[0] != c[0] or (e[0] == "raise" and e[1] != c[1]):
                    return f"{where}: compiled {c}, eager {e if e[0] == 'raise' else 'returned'}"
                r = (_diff(e[1], c[1], f"{where}: result") if e[0] == "ok" else None) or \
                    _diff(e_args, c_args, f"{where}: arguments after the call")
                if r:
                    return r
                if e_out != c_out:
                    return f"{where}: printed {c_out!r}, eager {e_out!r}"
    shapejit.reset()
    return None


def backends_for(seed, default_every):
    """The backends a seed runs under: "eager" (the graph replayed op by op) always, the
    default backend (generated kernels, slower to compile) for one seed in default_every."""
    return ("eager", "default") if default_every and seed % default_every == 0 else ("eager",)


def _run_chunk(first, count, default_every):
    """Child process: one line per seed, 'seed<TAB>status<TAB>detail'."""
    for seed in range(first, first + count):
        prog = generate(seed)
        try:
            d = check(seed, backends_for(seed, default_every))
        except Exception as e:   # noqa: BLE001 - an error of the harness or of shapejit
            d = f"seed {seed}: the run raised {type(e).__name__}: {e}"
        if d is None:
            status = "ok"
        else:
            status = "gap" if prog.kinds & KNOWN_GAPS else "mismatch"
        print(f"{seed}\t{status}\t{(d or '').replace(chr(10), ' ')[:400]}", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seed", type=int, default=0, help="first seed")
    ap.add_argument("--count", type=int, default=50000)
    ap.add_argument("--chunk", type=int, default=250, help="seeds per child process")
    ap.add_argument("--default-every", type=int, default=10,
                    help="also run the default backend on one seed in N (0: never)")
    ap.add_argument("--chunk-run", nargs=2, type=int, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.chunk_run:
        _run_chunk(a.chunk_run[0], a.chunk_run[1], a.default_every)
        return 0
    counts = {"ok": 0, "mismatch": 0, "gap": 0, "crash": 0}
    t0 = time.time()
    seed, end = a.seed, a.seed + a.count
    while seed < end:
        n = min(a.chunk, end - seed)
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--chunk-run", str(seed), str(n),
                            "--default-every", str(a.default_every)], capture_output=True, text=True)
        done = set()
        for line in p.stdout.splitlines():
            parts = line.split("\t")
            if len(parts) != 3 or not parts[0].isdigit():
                continue
            s, status, detail = int(parts[0]), parts[1], parts[2]
            done.add(s)
            counts[status] += 1
            if status != "ok":
                print(f"{status.upper()} {detail}", flush=True)
        if len(done) < n:
            # the child died: the first seed it did not finish crashed; go on after it
            crashed = seed + len(done)
            counts["crash"] += 1
            print(f"CRASH seed {crashed} (exit {p.returncode}): {p.stderr.strip()[-300:]}", flush=True)
            seed = crashed + 1
        else:
            seed += n
        print(f"progress: {seed - a.seed}/{a.count} {counts} {time.time() - t0:.0f}s", flush=True)
    print(f"done: {counts}")
    return 1 if counts["mismatch"] or counts["crash"] else 0


if __name__ == "__main__":
    sys.exit(main())
