#!/usr/bin/env python3
"""Trace what a bytecode-level capturer has to handle for a few reference models.

For every (model, attention implementation, input variant) scenario this script runs the
forward once (after one untraced warm-up call, unless --no-warmup) in eval mode under
torch.no_grad() and reports:

  1. torch callables reached at the Python API level, recorded with a
     torch.overrides.TorchFunctionMode (ordered sequence + distinct counts).
     NOTE: an active TorchFunctionMode makes torch.overrides.has_torch_function()
     return True, which disables the nn.TransformerEncoderLayer / nn.MultiheadAttention
     fast paths. Pass 2 below (no mode active) shows the real eager path.
  2. every Python function executed during the forward (sys.settrace 'call' events),
     as module:qualname with counts, grouped by origin (transformers / torch /
     stdlib / generated "<string>" code such as dataclass __init__), plus
       - the set (and counts) of opcodes actually executed (f_trace_opcodes),
       - exceptions raised inside the forward (even if caught),
       - C builtins called from Python frames (sys.setprofile 'c_call' events),
         i.e. isinstance/getattr/len/... and torch C entry points.
  3. optionally (--dynamo) the torch._dynamo.explain() oracle: graph count,
     graph-break count + reasons, and the FX node targets of each graph.

Models are built from small configs; no weights are downloaded.

Usage:
    python3 tools/trace_torch_calls.py                       # all scenarios, summary
    python3 tools/trace_torch_calls.py --only bert --sequence  # full ordered op list
    python3 tools/trace_torch_calls.py --dynamo --json /tmp/trace.json
"""

from __future__ import annotations

import argparse
import collections
import dis
import json
import os
import sys
import sysconfig
import types
import warnings

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

warnings.filterwarnings("ignore")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import transformers  # noqa: E402
from transformers import (  # noqa: E402
    BertConfig,
    BertModel,
    GPT2Config,
    GPT2Model,
    ResNetConfig,
    ResNetModel,
    ViTConfig,
    ViTModel,
)

TRANSFORMERS_DIR = os.path.dirname(transformers.__file__) + os.sep
TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
STDLIB_DIR = sysconfig.get_paths()["stdlib"] + os.sep
THIS_FILE = os.path.abspath(__file__)

# ----------------------------------------------------------------------------------------
# scenarios
# ----------------------------------------------------------------------------------------

BATCH, SEQ = 2, 8


def _text_inputs(variant: str) -> dict:
    g = torch.Generator().manual_seed(0)
    input_ids = torch.randint(1, 100, (BATCH, SEQ), generator=g)
    kw = {"input_ids": input_ids}
    if variant == "mask_ones":
        kw["attention_mask"] = torch.ones(BATCH, SEQ, dtype=torch.long)
    elif variant == "mask_pad":
        m = torch.ones(BATCH, SEQ, dtype=torch.long)
        m[1, -3:] = 0
        kw["attention_mask"] = m
    return kw


def build_bert(attn):
    cfg = BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64, attn_implementation=attn,
    )
    return BertModel(cfg)


def build_gpt2(attn):
    cfg = GPT2Config(
        vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=64, attn_implementation=attn,
    )
    return GPT2Model(cfg)


def build_vit(attn):
    cfg = ViTConfig(
        image_size=32, patch_size=8, num_channels=3, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=2, intermediate_size=64, attn_implementation=attn,
    )
    return ViTModel(cfg)


def build_resnet(layer_type):
    cfg = ResNetConfig(
        num_channels=3, embedding_size=16, hidden_sizes=[32, 64], depths=[1, 1],
        layer_type=layer_type, hidden_act="relu",
    )
    return ResNetModel(cfg)


def build_tel(batch_first):
    torch.manual_seed(0)
    return torch.nn.TransformerEncoderLayer(
        d_model=32, nhead=2, dim_feedforward=64, dropout=0.1, batch_first=batch_first
    )


def _pixels(n=BATCH, size=32):
    return {"pixel_values": torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(0))}


def scenarios():
    """Yield (name, model_factory, kwargs_factory)."""
    for attn in ("eager", "sdpa"):
        for variant in ("nomask", "mask_ones", "mask_pad"):
            yield f"bert/{attn}/{variant}", (lambda a=attn: build_bert(a)), (lambda v=variant: _text_inputs(v))
        for variant in ("nomask", "mask_ones", "mask_pad"):
            yield f"gpt2/{attn}/{variant}", (lambda a=attn: build_gpt2(a)), (lambda v=variant: _text_inputs(v))
        # use_cache=False removes the DynamicCache path (GPT2Config.use_cache defaults to True)
        yield (f"gpt2/{attn}/nomask_nocache", (lambda a=attn: build_gpt2(a)),
               (lambda: dict(_text_inputs("nomask"), use_cache=False)))
        yield f"vit/{attn}/nomask", (lambda a=attn: build_vit(a)), _pixels
    for lt in ("basic", "bottleneck"):
        yield f"resnet/{lt}", (lambda t=lt: build_resnet(t)), _pixels
    for bf in (True, False):
        if bf:
            src = lambda: {"src": torch.randn(BATCH, SEQ, 32, generator=torch.Generator().manual_seed(0))}
        else:
            src = lambda: {"src": torch.randn(SEQ, BATCH, 32, generator=torch.Generator().manual_seed(0))}
        yield f"tel/batch_first={bf}", (lambda b=bf: build_tel(b)), src
        if bf:
            def src_pad():
                kpm = torch.zeros(BATCH, SEQ, dtype=torch.bool)
                kpm[1, -3:] = True
                return {"src": torch.randn(BATCH, SEQ, 32, generator=torch.Generator().manual_seed(0)),
                        "src_key_padding_mask": kpm}
            yield "tel/batch_first=True/key_padding_mask", (lambda: build_tel(True)), src_pad


# ----------------------------------------------------------------------------------------
# naming helpers
# ----------------------------------------------------------------------------------------

_PUBLIC_NAMESPACES = [
    ("torch", torch),
    ("torch.nn.functional", F),
    ("torch.Tensor", torch.Tensor),
    ("torch.special", torch.special),
    ("torch.linalg", torch.linalg),
    ("torch._C._nn", torch._C._nn),
    ("torch._C._VariableFunctions", torch._C._VariableFunctions),
]


def torch_callable_name(func) -> str:
    """A stable, readable name for something passed to __torch_function__."""
    # Tensor property getters: Tensor.shape.__get__ etc.
    if isinstance(func, types.MethodWrapperType) and func.__name__ in ("__get__", "__set__"):
        owner = func.__self__
        return f"Tensor.{getattr(owner, '__name__', owner)}.{func.__name__}"
    # method descriptors of TensorBase (Tensor.view, Tensor.transpose, ...)
    objclass = getattr(func, "__objclass__", None)
    if objclass is not None and objclass.__name__ in ("TensorBase", "Tensor"):
        return f"Tensor.{func.__name__}"
    qual = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
    mod = getattr(func, "__module__", None)
    if mod == "torch._tensor" or qual.startswith("Tensor."):
        return f"Tensor.{qual.split('.', 1)[-1]}"
    name = getattr(func, "__name__", None)
    aliases = []
    if name:
        for ns_name, ns in _PUBLIC_NAMESPACES:
            if getattr(ns, name, None) is func:
                aliases.append(f"{ns_name}.{name}")
    if aliases:
        return " == ".join(aliases[:2])
    return f"{mod}.{qual}" if mod else qual


def builtin_name(f) -> str:
    self_ = getattr(f, "__self__", None)
    name = getattr(f, "__name__", repr(f))
    if isinstance(self_, types.ModuleType):
        return f"{self_.__name__}.{name}"
    if self_ is builtins_module:
        return name
    if self_ is None or type(self_).__name__.startswith("pybind11"):
        mod = getattr(f, "__module__", None)
        if not mod:  # torch._C._VariableFunctions builtins have __module__ None
            if getattr(torch._C._VariableFunctions, name, None) is f or getattr(torch, name, None) is f:
                mod = "torch"
        return f"{mod}.{name}" if mod else name
    if isinstance(self_, type):
        return f"{self_.__qualname__}.{name}"
    return f"{type(self_).__qualname__}.{name}"


import builtins as builtins_module  # noqa: E402


def origin_of(filename: str) -> str:
    if filename.startswith(TRANSFORMERS_DIR):
        return "transformers"
    if filename.startswith(TORCH_DIR):
        return "torch"
    if filename.startswith(STDLIB_DIR):
        return "stdlib"
    if filename.startswith("<frozen"):
        return "stdlib"
    if filename.startswith("<"):
        return "generated"
    if "site-packages" in filename:
        return "site-packages"
    return "other"


def short_file(filename: str) -> str:
    for prefix, label in ((TRANSFORMERS_DIR, "transformers/"), (TORCH_DIR, "torch/"), (STDLIB_DIR, "stdlib/")):
        if filename.startswith(prefix):
            return label + filename[len(prefix):]
    return filename


# ----------------------------------------------------------------------------------------
# pass 1: TorchFunctionMode
# ----------------------------------------------------------------------------------------


class RecordingMode(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.sequence: list[str] = []

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        self.sequence.append(torch_callable_name(func))
        return func(*args, **(kwargs or {}))


def pass_torch_function(model, kwargs):
    mode = RecordingMode()
    with torch.no_grad(), mode:
        model(**kwargs)
    return mode.sequence


# ----------------------------------------------------------------------------------------
# pass 2: settrace / setprofile
# ----------------------------------------------------------------------------------------

_opname_cache: dict[types.CodeType, dict[int, str]] = {}


def _opname_at(code, lasti):
    table = _opname_cache.get(code)
    if table is None:
        table = {ins.offset: ins.opname for ins in dis.get_instructions(code)}
        _opname_cache[code] = table
    return table.get(lasti, f"?{lasti}")


class PyTracer:
    def __init__(self):
        self.calls = collections.Counter()  # (origin, module:qualname, file:line)
        self.opcodes = collections.Counter()  # opname
        self.opcodes_by_origin = collections.defaultdict(collections.Counter)
        self.exceptions = collections.Counter()  # (module:qualname, exc type)
        self.c_calls = collections.Counter()  # (caller origin, builtin)
        self.c_call_sites = collections.defaultdict(set)
        self.code_objects: set[types.CodeType] = set()

    # sys.settrace global tracer
    def global_trace(self, frame, event, arg):
        if event != "call":
            return None
        code = frame.f_code
        if code.co_filename == THIS_FILE:
            return None
        mod = frame.f_globals.get("__name__", "?")
        origin = origin_of(code.co_filename)
        self.calls[(origin, f"{mod}:{code.co_qualname}", f"{short_file(code.co_filename)}:{code.co_firstlineno}")] += 1
        self.code_objects.add(code)
        # The prologue (COPY_FREE_VARS / MAKE_CELL / RETURN_GENERATOR / RESUME) runs before the
        # 'call' event and therefore never produces 'opcode' events: account for it here.
        for ins in dis.get_instructions(code):
            self.opcodes[ins.opname] += 1
            self.opcodes_by_origin[origin][ins.opname] += 1
            if ins.opname == "RESUME":
                break
        frame.f_trace_opcodes = True
        return self.local_trace

    def local_trace(self, frame, event, arg):
        if event == "opcode":
            code = frame.f_code
            op = _opname_at(code, frame.f_lasti)
            self.opcodes[op] += 1
            self.opcodes_by_origin[origin_of(code.co_filename)][op] += 1
        elif event == "exception":
            code = frame.f_code
            mod = frame.f_globals.get("__name__", "?")
            self.exceptions[(f"{mod}:{code.co_qualname}", arg[0].__name__)] += 1
        return self.local_trace

    # sys.setprofile
    def profile(self, frame, event, arg):
        if event == "c_call":
            code = frame.f_code
            if code.co_filename == THIS_FILE:
                return
            name = builtin_name(arg)
            origin = origin_of(code.co_filename)
            self.c_calls[(origin, name)] += 1
            mod = frame.f_globals.get("__name__", "?")
            self.c_call_sites[name].add(f"{mod}:{code.co_qualname}")


def pass_python_trace(model, kwargs):
    tr = PyTracer()
    with torch.no_grad():
        sys.setprofile(tr.profile)
        sys.settrace(tr.global_trace)
        try:
            model(**kwargs)
        finally:
            sys.settrace(None)
            sys.setprofile(None)
    return tr


# ----------------------------------------------------------------------------------------
# pass 3: dynamo oracle
# ----------------------------------------------------------------------------------------


def _node_target_name(node):
    t = node.target
    if node.op == "call_method":
        return f"Tensor.{t}"
    if node.op == "call_module":
        return f"module:{t}"
    if callable(t):
        return torch_callable_name(t)
    return str(t)


def pass_dynamo(model, kwargs):
    import torch._dynamo

    torch._dynamo.reset()
    with torch.no_grad():
        out = torch._dynamo.explain(model)(**kwargs)
    graphs = []
    for gm in out.graphs:
        targets = [
            _node_target_name(n) for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")
        ]
        graphs.append(targets)
    reasons = []
    for br in out.break_reasons:
        loc = ""
        if br.user_stack:
            fs = br.user_stack[-1]
            loc = f"{short_file(fs.filename)}:{fs.lineno}"
        reasons.append({"reason": str(br.reason).splitlines()[0][:300], "where": loc})
    return {
        "graph_count": out.graph_count,
        "graph_break_count": out.graph_break_count,
        "op_count": out.op_count,
        "break_reasons": reasons,
        "graph_targets": graphs,
    }


# ----------------------------------------------------------------------------------------
# driver
# ----------------------------------------------------------------------------------------


def first_occurrence_order(seq):
    seen = {}
    for s in seq:
        if s not in seen:
            seen[s] = len(seen)
    return list(seen)


def run(args):
    results = {}
    for name, make_model, make_inputs in scenarios():
        if args.only and not any(name.startswith(o) for o in args.only.split(",")):
            continue
        torch.manual_seed(0)
        model = make_model().eval()
        kwargs = make_inputs()
        if not args.no_warmup:
            with torch.no_grad():
                model(**kwargs)
        seq = pass_torch_function(model, kwargs)
        tr = pass_python_trace(model, kwargs)
        res = {
            "torch_sequence": seq,
            "torch_counts": collections.Counter(seq).most_common(),
            "torch_first_order": first_occurrence_order(seq),
            "py_calls": sorted(
                ([o, q, loc, c] for (o, q, loc), c in tr.calls.items()), key=lambda r: (r[0], r[1])
            ),
            "opcodes": dict(sorted(tr.opcodes.items())),
            # static view: every opcode present in the body of any function that was entered
            "static_opcodes": sorted({ins.opname for c in tr.code_objects for ins in dis.get_instructions(c)}),
            "opcodes_by_origin": {k: dict(sorted(v.items())) for k, v in tr.opcodes_by_origin.items()},
            "exceptions": [[q, e, c] for (q, e), c in tr.exceptions.items()],
            "c_calls": sorted(([o, n, c] for (o, n), c in tr.c_calls.items()), key=lambda r: (r[0], r[1])),
            "c_call_sites": {k: sorted(v) for k, v in tr.c_call_sites.items()},
        }
        if args.dynamo:
            try:
                res["dynamo"] = pass_dynamo(model, kwargs)
            except Exception as e:  # pragma: no cover - report, do not die
                res["dynamo"] = {"error": f"{type(e).__name__}: {e}"}
        results[name] = res
        report(name, res, args)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1, default=str)
        print(f"\nwrote {args.json}")
    return results


def report(name, res, args):
    print("=" * 100)
    print(f"SCENARIO {name}")
    print("-- torch callables (TorchFunctionMode): first-occurrence order, count")
    counts = dict(res["torch_counts"])
    for fn in res["torch_first_order"]:
        print(f"   {counts[fn]:5d}  {fn}")
    if args.sequence:
        print("-- full ordered sequence")
        for i, fn in enumerate(res["torch_sequence"]):
            print(f"   {i:4d} {fn}")
    print("-- Python functions executed (origin, module:qualname, def site, count)")
    for o, q, loc, c in res["py_calls"]:
        print(f"   {c:5d}  [{o}] {q}   ({loc})")
    print("-- exceptions raised inside forward (function, type, count)")
    for q, e, c in res["exceptions"]:
        print(f"   {c:5d}  {q}: {e}")
    print("-- C builtins called from Python frames (caller origin, builtin, count)")
    for o, n, c in res["c_calls"]:
        print(f"   {c:5d}  [{o}] {n}")
    print("-- opcodes executed (all Python frames)")
    print("   " + " ".join(f"{k}:{v}" for k, v in res["opcodes"].items()))
    for origin, ops in sorted(res["opcodes_by_origin"].items()):
        print(f"   [{origin}] " + " ".join(sorted(ops)))
    print("-- opcodes present (statically, dis) in the bodies of all entered functions")
    print("   " + " ".join(res["static_opcodes"]))
    if "dynamo" in res:
        d = res["dynamo"]
        print("-- torch._dynamo.explain")
        if "error" in d:
            print("   ERROR", d["error"])
        else:
            print(f"   graphs={d['graph_count']} breaks={d['graph_break_count']} ops={d['op_count']}")
            for r in d["break_reasons"]:
                print(f"   break: {r['reason']}  @ {r['where']}")
            for gi, g in enumerate(d["graph_targets"]):
                print(f"   graph {gi}: " + ", ".join(g))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated scenario prefixes, e.g. bert/sdpa,tel")
    ap.add_argument("--sequence", action="store_true", help="print the full ordered torch call sequence")
    ap.add_argument("--dynamo", action="store_true", help="also run torch._dynamo.explain (slow)")
    ap.add_argument("--no-warmup", action="store_true", help="trace the very first call (lazy init visible)")
    ap.add_argument("--json", help="write all results to this JSON file")
    run(ap.parse_args())


if __name__ == "__main__":
    main()
