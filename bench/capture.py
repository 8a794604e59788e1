#!/usr/bin/env python3
"""Capture time of transformers models: shapejit against torch.compile(backend="eager").

For each model (BertModel and ResNetModel built from small configs, eval, no_grad):
  - eager: median call time;
  - torch.compile(backend="eager"), after torch._dynamo.reset(): first call minus the eager
    median (= dynamo's capture + guard building), and dynamo's own
    entire_frame_compile_time_s;
  - shapejit backend="eager" (and "default"), after shapejit.reset(): first call minus the
    eager median, and shapejit.stats()["compile_time_s"].
Each system gets 1 + N cold runs (caches reset before each).  The first run of the process
is reported apart (it pays lazy imports and one-time set-up); the medians are over the
other N.  Aim: shapejit under 50 ms and at least 20x faster than torch.compile.

Usage: python3 bench/capture.py [--quick] [--runs N] [--threads N] [--models bert,resnet]
                                [--out DIR]
"""

from __future__ import annotations

import argparse
import gc
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

MODELS = ["bert", "resnet"]
AIM_S, AIM_RATIO = 0.050, 20.0


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="2 cold runs per system instead of 5")
    p.add_argument("--runs", type=int, default=None, help="cold runs per system (after the first)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--out", default=common.DEFAULT_OUT)
    p.add_argument("--no-isolate", action="store_true",
                   help="run shapejit in this process (default: a child process per model and "
                        "backend, so a crash of the C extension is reported, not fatal)")
    p.add_argument("--worker-shapejit", default="", help=argparse.SUPPRESS)  # backend name
    a = p.parse_args(argv)
    a.runs = a.runs or (2 if a.quick else 5)
    a.models = [m for m in a.models.split(",") if m]
    bad = [m for m in a.models if m not in MODELS]
    if bad:
        p.error(f"unknown model(s) {bad}; valid: {MODELS}")
    return a


def build_model(name):
    import torch
    torch.manual_seed(0)
    if name == "bert":
        from transformers import BertConfig, BertModel
        cfg = BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2,
                         num_attention_heads=4, intermediate_size=512, max_position_embeddings=128)
        model = BertModel(cfg).eval()
        inp = torch.randint(0, cfg.vocab_size, (2, 64))
        desc = "BertModel: 2 layers, hidden 128, 4 heads, seq 64, batch 2"
    elif name == "resnet":
        from transformers import ResNetConfig, ResNetModel
        cfg = ResNetConfig(num_channels=3, embedding_size=16, hidden_sizes=[16, 32, 64, 128],
                           depths=[1, 1, 1, 1], layer_type="basic")
        model = ResNetModel(cfg).eval()
        inp = torch.randn(1, 3, 64, 64)
        desc = "ResNetModel: basic blocks, depths 1-1-1-1, widths 16-128, 1x3x64x64"
    else:
        raise KeyError(name)
    return model, inp, desc


def cold_runs(make_and_call, reset, runs):
    """1 + runs cold first-calls: [(first_call_s, info_dict), ...]."""
    out = []
    for _ in range(1 + runs):
        reset()
        gc.collect()
        out.append(make_and_call())
    return out


def shapejit_capture(sj, model, inp, backend, runs, quick):
    """Cold-run capture times of shapejit on model(inp); a JSON-able dict."""
    import torch
    with torch.no_grad():
        samples, _ = common.time_per_call(lambda: model(inp), repeat=7 if quick else 15,
                                          min_sample_s=0.01)
    eager = common.median(samples)

    def once():
        cm = sj.compile(model, backend=backend)
        with torch.no_grad():
            t, _ = common.time_once(lambda: cm(inp))
        return t, common.sj_stats(sj)

    try:
        res = cold_runs(once, sj.reset, runs)
        st = res[-1][1]
        note = ""
        if not st.get("graphs"):
            with torch.no_grad():
                note = "eager fallback (" + common.shapejit_explain_reason(sj, model, (inp,)) + ")"
        elif st.get("graph_breaks"):
            with torch.no_grad():
                note = "breaks: " + common.shapejit_explain_reason(sj, model, (inp,))
        return dict(eager_s=eager, first_calls_s=[t for t, _ in res],
                    selfrep_s=[s.get("compile_time_s") for _, s in res], stats=st, note=note)
    finally:
        try:
            sj.reset()
        except Exception:
            pass


def worker_main(args):
    common.early_setup(args.threads)
    common.late_setup(args.threads)
    sj, why = common.import_shapejit()
    if sj is None:
        common.emit("UNAVAILABLE", why)
        return 0
    model, inp, _ = build_model(args.models[0])
    common.emit("RESULT", shapejit_capture(sj, model, inp, args.worker_shapejit, args.runs, args.quick))
    return 0


def main(argv=None):
    args = parse_args(argv)
    if args.worker_shapejit:
        return worker_main(args)
    common.early_setup(args.threads)
    import torch
    reported = common.late_setup(args.threads)
    facts = common.machine_facts()
    tline = common.thread_line(args.threads, reported)
    print("capture time: shapejit vs torch.compile(backend='eager')")
    for line in common.facts_lines(facts):
        print(line)
    print(tline)
    print(f"cold runs per system: 1 (first in process, reported apart) + {args.runs}", flush=True)

    if args.no_isolate:
        sj, why = common.import_shapejit()
    else:  # do not load shapejit here; a child process per model and backend does
        import importlib.util
        sj = True if importlib.util.find_spec("shapejit") or os.path.isdir(
            os.path.join(common.REPO_ROOT, "shapejit")) else None
        why = "no module named shapejit"
    if sj is None:
        print(common.shapejit_missing_line(why), flush=True)

    headers = ["model", "system", "graphs", "breaks", "first in process", "median capture",
               "median self-reported", "torch.compile / this", "note"]
    rows, raw = [], {}
    for name in args.models:
        model, inp, desc = build_model(name)
        print(f"== {name}: {desc}", flush=True)
        with torch.no_grad():
            ref = model(inp)
            samples, _ = common.time_per_call(lambda: model(inp), repeat=7 if args.quick else 15,
                                              min_sample_s=0.01)
        eager = common.median(samples)
        print(f"   eager call median {common.fmt_time(eager)}", flush=True)
        raw[name] = {"eager_call_s": eager, "desc": desc}

        # ---------------------------------------------------------- torch.compile(eager)
        dc = common.DynamoCounters()

        def tc_once():
            cm = torch.compile(model, backend="eager")
            with torch.no_grad():
                t, _ = common.time_once(lambda: cm(inp))
            return t, dc.snapshot()

        anchor = None
        try:
            res = cold_runs(tc_once, dc.reset, args.runs)
            caps = [t - eager for t, _ in res[1:]]
            selfrep = [s["compile_time_s"] for _, s in res[1:]]
            snap = res[-1][1]
            anchor = common.median(caps)
            rows.append([name, "torch.compile eager", snap["graphs"], snap["graph_breaks"],
                         common.fmt_time(res[0][0] - eager), common.fmt_time(anchor),
                         common.fmt_time(common.median(selfrep)), "1.00x (torch.compile)",
                         common.shorten("; ".join(snap["break_reasons"]), 80)])
            raw[name]["torch_compile_eager"] = dict(first_calls_s=[t for t, _ in res], last=snap)
        except Exception as e:
            rows.append([name, "torch.compile eager", "-", "-", "-", "-", "-", "-",
                         "error: " + common.error_text(e)])
        finally:
            dc.reset()
        print("   " + " | ".join(str(c) for c in rows[-1]), flush=True)

        # ---------------------------------------------------------- shapejit
        if sj is None:
            continue
        for backend in ("eager", "default"):
            label = f"shapejit {backend}"
            try:
                if args.no_isolate:
                    r = shapejit_capture(sj, model, inp, backend, args.runs, args.quick)
                else:
                    child = common.run_child(
                        [os.path.abspath(__file__), "--worker-shapejit", backend, "--models", name,
                         "--runs", str(args.runs), "--threads", str(args.threads)]
                        + (["--quick"] if args.quick else []), timeout=600)
                    recs = dict(child["records"])
                    if "RESULT" not in recs:
                        raise common.ChildDied(
                            recs.get("UNAVAILABLE") or f"child process {child['died'] or 'gave no result'}"
                            + (f": {child['err_tail']}" if child["err_tail"] else ""))
                    r = recs["RESULT"]
                st, caps = r["stats"], [t - r["eager_s"] for t in r["first_calls_s"]]
                med = common.median(caps[1:])
                note = r["note"]
                ratio = (anchor / med) if anchor and med > 0 else float("nan")
                if backend == "eager" and st.get("graphs") and st.get("graph_breaks"):
                    note = (note + "; " if note else "") + "aims not judged: the model does not capture whole"
                elif backend == "eager" and st.get("graphs"):
                    aims = (f"aim <50 ms: {'met' if med < AIM_S else 'NOT met'}; "
                            f"aim >=20x: {'met' if ratio >= AIM_RATIO else 'NOT met'}")
                    note = (note + "; " if note else "") + aims
                rows.append([name, label, st.get("graphs"), st.get("graph_breaks"),
                             common.fmt_time(caps[0]), common.fmt_time(med),
                             common.fmt_time(common.median(r["selfrep_s"][1:])),
                             common.fmt_ratio(ratio), note])
                raw[name][label] = r
            except Exception as e:
                rows.append([name, label, "-", "-", "-", "-", "-", "-", ("" if isinstance(e, common.ChildDied) else "error: ") + common.error_text(e, 200)])
            print("   " + " | ".join(str(c) for c in rows[-1]), flush=True)

    print("")
    print(common.text_table(headers, rows, max_col=100))
    print("capture = first call after a reset minus the eager call median; "
          "torch.compile / this = torch.compile(eager) median capture / this median capture")

    os.makedirs(args.out, exist_ok=True)
    md = ["# shapejit benchmark: bench/capture.py", "",
          f"Command: `python3 bench/capture.py {' '.join(sys.argv[1:])}`", "", "```"]
    md += common.facts_lines(facts) + [tline, f"cold runs: 1 + {args.runs}",
                                       common.shapejit_missing_line(why) if sj is None else
                                       f"shapejit: {'in-process' if args.no_isolate else 'child process per model and backend'}", "```", ""]
    md += [common.md_table(headers, rows), "",
           "- capture = first call after a reset minus the eager call median; medians over the "
           "cold runs after the first one of the process.", ""]
    with open(os.path.join(args.out, "capture.md"), "w") as f:
        f.write("\n".join(md))
    common.write_json(os.path.join(args.out, "capture.json"),
                      dict(facts=facts, threads=reported, runs=args.runs, results=raw))
    print(f"wrote: {os.path.relpath(os.path.join(args.out, 'capture.md'))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
