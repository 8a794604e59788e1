#!/usr/bin/env python3
"""A chain of ten pointwise ops on a large float32 tensor, against memory bandwidth.

In one run, at one thread count: a plain copy (torch `out.copy_(x)`: the bandwidth a
kernel that reads one array and writes one can reach), eager torch, torch.compile
(Inductor, static), shapejit backend="cpu" (generated C, static and dynamic=True), and
numpy on the same data. Reports median times, effective bandwidth (8 bytes per element:
one read, one write) and the fraction of the copy's bandwidth each reaches.

Usage: python3 bench/pointwise_bw.py [--threads N] [--n ELEMENTS] [--repeat R]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def arith10(x):
    """Ten cheap ops (no transcendental): bound by memory once fused."""
    y = x * 1.5 + 0.25
    y = y.relu() - 0.5
    y = y * y + x
    y = y.clamp(-2.0, 2.0) * 0.75
    return y - x * 0.5 + 1.0


def chain10(x):
    """Ten ops, three of them transcendental (sigmoid, tanh, exp): bound by compute."""
    y = x * 1.5 + 0.25
    y = y.relu() - 0.5
    y = y.sigmoid() * 2.0
    y = y.tanh() + y
    return (-y).exp() / (1.0 + y * y)


def arith10_np(np, x):
    f = np.float32
    y = x * f(1.5) + f(0.25)
    y = np.maximum(y, f(0)) - f(0.5)
    y = y * y + x
    y = np.clip(y, f(-2.0), f(2.0)) * f(0.75)
    return y - x * f(0.5) + f(1.0)


def chain10_np(np, x):
    y = x * np.float32(1.5) + np.float32(0.25)
    y = np.maximum(y, np.float32(0)) - np.float32(0.5)
    y = np.float32(1) / (np.float32(1) + np.exp(-y)) * np.float32(2.0)
    y = np.tanh(y) + y
    return np.exp(-y) / (np.float32(1.0) + y * y)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--n", type=int, default=1 << 24, help="elements (default 16M = 64 MB)")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args(argv)
    common.early_setup(args.threads)
    import numpy as np
    import torch
    reported = common.late_setup(args.threads)
    sj, why = common.import_shapejit()
    if sj is None:
        sys.exit("shapejit is not importable: " + why)

    x = torch.randn(args.n)
    xn = x.numpy()
    out = torch.empty_like(x)
    print(f"# pointwise chains, {args.n} float32 elements; "
          f"{common.thread_line(args.threads, reported)}")
    copy_t = common.median(common.time_per_call(lambda: out.copy_(x), repeat=args.repeat, min_sample_s=0.2)[0])
    copy_bw = 8 * args.n / copy_t / 1e9
    print(f"copy (torch copy_): {common.fmt_time(copy_t)}, {copy_bw:.1f} GB/s (8 bytes per element)")
    for fn, npfn in ((arith10, arith10_np), (chain10, chain10_np)):
        ref = fn(x)
        rows = []

        def measure(name, call):
            samples, _ = common.time_per_call(call, repeat=args.repeat, min_sample_s=0.2)
            got = torch.as_tensor(call())
            rows.append([name, common.median(samples), "%.1e" % float((got - ref).abs().max())])

        measure("eager torch", lambda: fn(x))
        tc = torch.compile(fn)
        tc(x)
        measure("torch.compile inductor", lambda: tc(x))
        sj_static = sj.compile(fn, backend="cpu")
        sj_static(x)
        measure("shapejit cpu", lambda: sj_static(x))
        sj_dyn = sj.compile(fn, backend="cpu", dynamic=True)
        sj_dyn(x[:1000])
        sj_dyn(x)
        measure("shapejit cpu dynamic=True", lambda: sj_dyn(x))
        measure("numpy", lambda: npfn(np, xn))
        eager_t = rows[0][1]
        print(f"\n## {fn.__name__}: {fn.__doc__}")
        headers = ["system", "median", "GB/s (8 B/elem)", "of copy bw", "vs eager", "max |diff|"]
        table = [[name, common.fmt_time(t), "%.1f" % (8 * args.n / t / 1e9),
                  "%.0f%%" % (100 * copy_t / t), common.fmt_ratio(eager_t / t), err] for name, t, err in rows]
        print(common.md_table(headers, table))


if __name__ == "__main__":
    main()
