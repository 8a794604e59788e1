#!/usr/bin/env python3
"""Capture time with symbolic shapes: the same function traced static and dynamic.

For each workload, cold compiles (caches reset before each) of:
  - shapejit backend="eager", dynamic=False and dynamic=True;
  - torch.compile backend="eager" (Dynamo's capture only, no Inductor), dynamic=False and
    dynamic=True.
Reported: the median self-reported compile time (shapejit.stats()["compile_time_s"],
Dynamo's entire_frame_compile_time_s), the ratio dynamic / static of each system (the
aim: shapejit dynamic within 1.5x of its static), shapejit dynamic against
torch.compile dynamic, and the graph counts over a sweep of three input sizes (a dynamic
capture must serve all three with one graph).

Usage: python3 bench/capture_dynamic.py [--quick] [--runs N] [--threads N] [--out DIR]
"""

from __future__ import annotations

import argparse
import gc
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

WORKLOADS = ["batch_seq", "mlp", "encoder_layer", "bert"]
AIM_RATIO = 1.5


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="3 cold runs per system instead of 7")
    p.add_argument("--runs", type=int, default=None)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--out", default=common.DEFAULT_OUT)
    a = p.parse_args(argv)
    a.runs = a.runs or (3 if a.quick else 7)
    a.workloads = [w for w in a.workloads.split(",") if w]
    bad = [w for w in a.workloads if w not in WORKLOADS]
    if bad:
        p.error(f"unknown workload(s) {bad}; valid: {WORKLOADS}")
    return a


def build(name):
    """(callable, [inputs for three sizes], description)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    torch.manual_seed(0)
    if name == "batch_seq":
        def fn(x):
            h = F.layer_norm(x, (16,))
            w = torch.softmax(h.sum(-1), dim=-1)
            return (h * w.unsqueeze(-1)).sum(1) / x.shape[1]
        sizes = [(4, 32), (8, 64), (16, 128)]
        return fn, [(torch.randn(b, s, 16),) for b, s in sizes], "layer_norm + softmax pooling, (b, s, 16)"
    if name == "mlp":
        model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 256), nn.GELU(),
                              nn.Linear(256, 10)).eval()
        return model, [(torch.randn(b, 64),) for b in (8, 32, 64)], "MLP 64-256-256-10, batch 8/32/64"
    if name == "encoder_layer":
        model = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True).eval()
        return model, [(torch.randn(2, s, 64),) for s in (16, 32, 64)], \
            "TransformerEncoderLayer d=64, 4 heads, seq 16/32/64"
    if name == "bert":
        from transformers import BertConfig, BertModel
        cfg = BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=512, max_position_embeddings=128)
        model = BertModel(cfg).eval()
        return model, [(torch.randint(0, 1000, (2, s)),) for s in (16, 32, 64)], \
            "BertModel 2 layers, hidden 128, seq 16/32/64"
    raise KeyError(name)


def system_hooks(system, sj):
    """(reset, compile(fn, dynamic), stats) of one system; stats() is a dict with graphs,
    graph_breaks, recompiles and compile_time_s since the last reset."""
    import torch
    if system == "shapejit":
        return sj.reset, lambda fn, dyn: sj.compile(fn, dynamic=dyn, backend="eager"), sj.stats
    dc = common.DynamoCounters()
    return dc.reset, lambda fn, dyn: torch.compile(fn, dynamic=dyn, backend="eager"), dc.snapshot


def cold(system, fn, inputs, dynamic, runs, sj):
    """Median self-reported compile time over cold runs, and the sweep's graph counts."""
    import torch
    reset, compile_fn, stats = system_hooks(system, sj)
    times = []
    sweep = None
    for i in range(1 + runs):   # the first run pays lazy imports: dropped
        gc.collect()
        reset()
        cf = compile_fn(fn, dynamic)
        with torch.no_grad():
            cf(*inputs[0])
        if i > 0:
            times.append(stats()["compile_time_s"])
        if i == runs:
            with torch.no_grad():
                for args in inputs[1:]:
                    cf(*args)
            st = stats()
            sweep = (st["graphs"], st["graph_breaks"], st["recompiles"])
        reset()
    return common.median(times), sweep


def main(argv=None):
    args = parse_args(argv)
    common.early_setup(args.threads)
    import torch
    reported = common.late_setup(args.threads)
    sj, why = common.import_shapejit()
    print("capture time, static vs dynamic: shapejit and torch.compile(backend='eager')")
    for line in common.facts_lines(common.machine_facts()):
        print(line)
    print(common.thread_line(args.threads, reported))
    print(f"cold runs per system and mode: {args.runs} (after one dropped warm-up run)", flush=True)
    if sj is None:
        print(common.shapejit_missing_line(why))
        return 1
    headers = ["workload", "system", "static", "dynamic", "dynamic / static",
               "graphs static (sweep)", "graphs dynamic (sweep)"]
    rows, raw, summary = [], {}, []
    for name in args.workloads:
        fn, inputs, desc = build(name)
        print(f"== {name}: {desc}", flush=True)
        res = {}
        for system in ("shapejit", "torch.compile"):
            for dyn in (False, True):
                try:
                    res[(system, dyn)] = cold(system, fn, inputs, dyn, args.runs, sj)
                except Exception as e:  # noqa: BLE001 - a failing peer is reported, not fatal
                    res[(system, dyn)] = (None, None)
                    print(f"   {system} dynamic={dyn}: error {common.error_text(e)}", flush=True)
            (s, ss), (d, ds) = res[(system, False)], res[(system, True)]
            ratio = d / s if s and d else None
            rows.append([name, system, common.fmt_time(s), common.fmt_time(d), common.fmt_ratio(ratio),
                         "%s (%s breaks, %s recompiles)" % ss if ss else "-",
                         "%s (%s breaks, %s recompiles)" % ds if ds else "-"])
            print("   " + " | ".join(str(c) for c in rows[-1]), flush=True)
        sjd, tcd = res[("shapejit", True)][0], res[("torch.compile", True)][0]
        sjs = res[("shapejit", False)][0]
        raw[name] = {f"{k[0]}_{'dynamic' if k[1] else 'static'}": {"compile_s": v[0], "sweep": v[1]}
                     for k, v in res.items()}
        if sjd and tcd and sjs:
            summary.append(f"{name}: shapejit dynamic / static {sjd / sjs:.2f}x "
                           f"({'within' if sjd / sjs <= AIM_RATIO else 'above'} the {AIM_RATIO}x aim); "
                           f"torch.compile dynamic / shapejit dynamic {tcd / sjd:.1f}x")
    print()
    print(common.md_table(headers, rows))
    print()
    for line in summary:
        print(line)
    os.makedirs(args.out, exist_ok=True)
    common.write_json(os.path.join(args.out, "capture_dynamic.json"),
                      {"rows": rows, "raw": raw, "summary": summary, "threads": args.threads})
    with open(os.path.join(args.out, "capture_dynamic.md"), "w") as f:
        f.write(common.md_table(headers, rows) + "\n\n" + "\n".join("- " + s for s in summary) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
