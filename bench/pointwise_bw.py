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


def chain10(x):
    y = x * 1.5 + 0.25
    y = y.relu() - 0.5
    y = y.sigmoid() * 2.0
    y = y.tanh() + y
    return (-y).exp() / (1.0 + y * y)


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
    ref = chain10(x)
    rows = []

    def measure(name, fn, check=None):
        samples, _ = common.time_per_call(fn, repeat=args.repeat, min_sample_s=0.2)
        t = common.median(samples)
        err = ""
        if check is not None:
            got = check()
            got = torch.as_tensor(got)
            err = "%.1e" % float((got - ref).abs().max())
        rows.append([name, t, 8 * args.n / t / 1e9, err])

    measure("copy (torch copy_)", lambda: out.copy_(x))
    measure("eager torch", lambda: chain10(x), lambda: chain10(x))
    tc = torch.compile(chain10)
    tc(x)
    measure("torch.compile inductor", lambda: tc(x), lambda: tc(x))
    sj_static = sj.compile(chain10, backend="cpu")
    sj_static(x)
    measure("shapejit cpu", lambda: sj_static(x), lambda: sj_static(x))
    sj_dyn = sj.compile(chain10, backend="cpu", dynamic=True)
    sj_dyn(x[:1000])
    sj_dyn(x)
    measure("shapejit cpu dynamic=True", lambda: sj_dyn(x), lambda: sj_dyn(x))
    measure("numpy", lambda: chain10_np(np, xn), lambda: chain10_np(np, xn))

    copy_bw = rows[0][2]
    eager_t = rows[1][1]
    print(f"# ten-op pointwise chain, {args.n} float32 elements; "
          f"{common.thread_line(args.threads, reported)}")
    headers = ["system", "median", "GB/s (8 B/elem)", "of copy bw", "vs eager", "max |diff|"]
    table = [[name, common.fmt_time(t), "%.1f" % bw, "%.0f%%" % (100 * bw / copy_bw),
              common.fmt_ratio(eager_t / t), err] for name, t, bw, err in rows]
    print(common.md_table(headers, table))


if __name__ == "__main__":
    main()
