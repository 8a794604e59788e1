#!/usr/bin/env python3
"""Which torch callables real `transformers` models call, and which of them shapejit covers.

Three steps, each a flag:

  --trace   runs every model of _models() (small configs, nothing downloaded; after one
            warm-up call) in eval mode under torch.no_grad() and records each torch
            callable it calls at the Python API level, under a normalised dotted name
            (torch.xxx, torch.nn.functional.xxx, Tensor.xxx), attribute reads such as
            Tensor.shape included. Two recorders run, one after the other (the second
            twice: as eager runs, then with torch.compiler.is_compiling() answering True,
            as shapejit answers it, so that the paths transformers takes under a
            compiler are traced too):
              - a torch.overrides.TorchFunctionMode: every call that goes through the
                __torch_function__ protocol (torch functions, Tensor methods, operators,
                property reads), the outermost one only;
              - sys.settrace/sys.setprofile over the frames shapejit evaluates (the
                model's code and the torch code shapejit inlines: torch.nn.modules,
                torch.nn.functional, torch.functional): the C functions, the Python
                functions of torch and the classes of the torch namespace (torch.finfo,
                torch.Size, ...) those frames call, so that what an inlined
                F.layer_norm calls is listed too.
            With --explain, each model also runs once through shapejit.explain and
            torch._dynamo.explain (graph and break counts, break reasons).
            The result goes to tools/torch_calls.json (checked in).
  --write   regenerates docs/torch_call_coverage.md from tools/torch_calls.json and the
            callables table of the shapejit built in place (no model runs: fast).
  (none)    prints the uncovered callables.

`make coverage` runs --trace --explain --write. tests/vocab/test_call_coverage.py checks that the
checked-in file is in step with vocab/callables.def, and that what it calls covered is.

Status of a callable (status_of):
  covered            a row of vocab/callables.def resolves to that object (an operator
                     dunder such as Tensor.__add__ through its operator.* row)
  answered           the evaluator answers it without an op (metadata, constant folds):
                     ANSWERED, each with a probe the test compiles
  inlined            a Python function of torch.nn.functional / torch.functional /
                     torch.nn.modules: shapejit inlines its body, whose calls are listed
  left               not covered on purpose, or owned elsewhere: LEFT, with the reason
  not covered        none of these
"""
from __future__ import annotations

import argparse
import collections
import dis
import json
import operator
import os
import sys
import types
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.path.join(HERE, "torch_calls.json")
DOC = os.path.join(ROOT, "docs", "torch_call_coverage.md")
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

# ---------------------------------------------------------------------------------------
# names
# ---------------------------------------------------------------------------------------

# Namespaces a callable's public name is looked up in, in order of preference.
_NAMESPACES = [
    ("torch.nn.functional", F),
    ("torch", torch),
    ("torch.special", torch.special),
    ("torch.linalg", torch.linalg),
    ("torch.fft", torch.fft),
    ("torch.jit", torch.jit),
    ("torch.compiler", torch.compiler),
    ("torch._C._nn", torch._C._nn),
    ("torch._C", torch._C),
    ("torch._C._VariableFunctions", torch._C._VariableFunctions),   # what torch._VF reaches
]


def resolve(name):
    """The object a normalised name stands for (raises AttributeError when gone)."""
    head, _, rest = name.partition(".")
    if head == "Tensor":
        obj = torch.Tensor
    elif head == "operator":
        obj = operator
    elif head == "torch":
        obj = torch
    else:
        raise AttributeError(name)
    for part in rest.split("."):
        obj = getattr(obj, part)
    return obj


def _public_name(func):
    name = getattr(func, "__name__", None)
    if not isinstance(name, str) or name.startswith("__"):
        return None
    for ns_name, ns in _NAMESPACES:
        try:
            if getattr(ns, name, None) is func:
                return "%s.%s" % (ns_name, name)
        except Exception:  # noqa: BLE001 - lazy modules may fail to import an attribute
            continue
    try:
        if getattr(torch.Tensor, name, None) is func:
            return "Tensor." + name
    except Exception:  # noqa: BLE001
        pass
    return None


def normalise(func):
    """A dotted name for something a model called (None: not a torch callable)."""
    # property getters as seen by __torch_function__: Tensor.shape.__get__
    if isinstance(func, types.MethodWrapperType) and func.__name__ in ("__get__", "__set__"):
        owner = func.__self__
        if isinstance(owner, (types.GetSetDescriptorType, types.MemberDescriptorType, property)):
            n = getattr(owner, "__name__", None) or getattr(getattr(owner, "fget", None), "__name__", "?")
            return "Tensor." + n + (" (write)" if func.__name__ == "__set__" else "")
    # a method bound to a tensor (the profiler hands these over)
    self_ = getattr(func, "__self__", None)
    if isinstance(self_, torch.Tensor):
        n = func.__name__
        if getattr(torch.Tensor, n, None) is not None:
            return "Tensor." + n
        return None
    objclass = getattr(func, "__objclass__", None)
    if objclass is not None and objclass.__name__ in ("TensorBase", "Tensor"):
        return "Tensor." + func.__name__
    pub = _public_name(func)
    if pub:
        return pub
    mod = getattr(func, "__module__", None) or ""
    qual = getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
    if not isinstance(qual, str):
        return None
    if mod == "torch._tensor" or qual.startswith("Tensor."):
        return "Tensor." + qual.split(".", 1)[-1]
    if isinstance(self_, types.ModuleType) and self_.__name__.startswith("torch"):
        mod = self_.__name__
    if not mod.startswith("torch"):
        return None
    # a submodule's public path (torch.jit.is_tracing lives in torch.jit._trace)
    short = mod
    while "." in short:
        parent = sys.modules.get(short.rsplit(".", 1)[0])
        if parent is None or getattr(parent, qual.split(".")[0], None) is not getattr(
                sys.modules.get(short), qual.split(".")[0], object()):
            break
        short = short.rsplit(".", 1)[0]
    return "%s.%s" % (short, qual)


# ---------------------------------------------------------------------------------------
# status
# ---------------------------------------------------------------------------------------

# Tensor dunders that the bytecode operators reach: covered through their operator.* row.
OPERATOR_OF = {
    "__add__": "add", "__radd__": "add", "__iadd__": "iadd", "__sub__": "sub",
    "__rsub__": "sub", "__isub__": "isub", "__mul__": "mul", "__rmul__": "mul",
    "__imul__": "imul", "__truediv__": "truediv", "__rtruediv__": "truediv",
    "__div__": "truediv", "__rdiv__": "truediv", "__itruediv__": "itruediv",
    "__floordiv__": "floordiv", "__rfloordiv__": "floordiv", "__mod__": "mod",
    "__rmod__": "mod", "__pow__": "pow", "__rpow__": "pow", "__ipow__": "ipow",
    "__matmul__": "matmul", "__rmatmul__": "matmul", "__neg__": "neg", "__pos__": "pos",
    "__abs__": "abs", "__invert__": "invert", "__and__": "and_", "__rand__": "and_",
    "__iand__": "iand", "__or__": "or_", "__ror__": "or_", "__ior__": "ior",
    "__xor__": "xor", "__rxor__": "xor", "__lshift__": "lshift", "__rshift__": "rshift",
    "__eq__": "eq", "__ne__": "ne", "__lt__": "lt", "__le__": "le", "__gt__": "gt",
    "__ge__": "ge", "__getitem__": "getitem", "__setitem__": "setitem",
}

# Answered by the evaluator without an op: name -> (where, probe). The probe is an
# expression of a float tensor `x` of shape (2, 3) (or a with statement, the body of the
# probe); tests/vocab/test_call_coverage.py compiles `def probe(x): return <probe>` and requires
# no break and eager's value.
ANSWERED = {
    "Tensor.shape": ("capture/attrs.c tensor_attr", "x.shape"),
    "Tensor.dtype": ("capture/attrs.c tensor_attr", "x.dtype"),
    "Tensor.ndim": ("capture/attrs.c tensor_attr", "x.ndim"),
    "Tensor.device": ("capture/attrs.c tensor_attr", "x.device"),
    "Tensor.requires_grad": ("capture/attrs.c tensor_attr", "x.requires_grad"),
    "Tensor.is_cuda": ("capture/attrs.c tensor_attr", "x.is_cuda"),
    "Tensor.is_nested": ("capture/attrs.c tensor_attr", "x.is_nested"),
    "Tensor.is_meta": ("capture/attrs.c tensor_attr", "x.is_meta"),
    "Tensor.is_cpu": ("capture/attrs.c tensor_attr", "x.is_cpu"),
    "Tensor.T": ("capture/attrs.c tensor_attr (a permute)", "x.T"),
    "Tensor.mT": ("capture/attrs.c tensor_attr (a transpose)", "x.mT"),
    "Tensor.size": ("capture/builtins.c tensor_meta_method", "x.size(1)"),
    "Tensor.dim": ("capture/builtins.c tensor_meta_method", "x.dim()"),
    "Tensor.ndimension": ("capture/builtins.c tensor_meta_method", "x.ndimension()"),
    "Tensor.numel": ("capture/builtins.c tensor_meta_method", "x.numel()"),
    "Tensor.nelement": ("capture/builtins.c tensor_meta_method", "x.nelement()"),
    "Tensor.element_size": ("capture/builtins.c tensor_meta_method", "x.element_size()"),
    "Tensor.is_floating_point": ("capture/builtins.c tensor_meta_method", "x.is_floating_point()"),
    "Tensor.is_complex": ("capture/builtins.c tensor_meta_method", "x.is_complex()"),
    "Tensor.get_device": ("capture/builtins.c tensor_meta_method", "x.get_device()"),
    "Tensor.__len__": ("capture/builtins.c tensor_meta_method", "len(x)"),
    "torch.is_grad_enabled": ("capture/builtins.c torch_special", "torch.is_grad_enabled()"),
    "torch.get_default_dtype": ("capture/builtins.c torch_special", "torch.get_default_dtype()"),
    "torch.is_autocast_enabled": ("capture/folds.def (folded, guarded)", "torch.is_autocast_enabled()"),
    "torch.is_tensor": ("capture/builtins.c torch_special", "torch.is_tensor(x)"),
    "torch.jit.is_tracing": ("capture/builtins.c torch_special", "torch.jit.is_tracing()"),
    "torch.jit.is_scripting": ("capture/builtins.c torch_special", "torch.jit.is_scripting()"),
    "torch.compiler.is_compiling": ("capture/builtins.c torch_special", "torch.compiler.is_compiling()"),
    "torch._C._get_tracing_state": ("capture/builtins.c torch_special", "torch._C._get_tracing_state()"),
    "torch._C._has_torch_function": ("capture/builtins.c torch_special", "torch._C._has_torch_function((x,))"),
    "torch._C._has_torch_function_unary": ("capture/builtins.c torch_special",
                                           "torch._C._has_torch_function_unary(x)"),
    "torch._C._has_torch_function_variadic": ("capture/builtins.c torch_special",
                                              "torch._C._has_torch_function_variadic(x, x)"),
    "torch.finfo": ("capture/folds.def (folded)", "torch.finfo(x.dtype).min"),
    "torch.iinfo": ("capture/folds.def (folded)", "torch.iinfo(torch.int64).max"),
    "torch.Size": ("capture/builtins.c torch_special (folded)", "torch.Size([2, 3])"),
    "torch.device": ("capture/builtins.c torch_special (folded)", "torch.device('cpu')"),
    "torch.compiler.is_exporting": ("capture/builtins.c torch_special", "torch.compiler.is_exporting()"),
    "torch.nn.parameter._ParameterMeta.__instancecheck__": (
        "capture/builtins.c isinstance", "isinstance(x, torch.nn.Parameter)"),
    "torch.nn.parameter._BufferMeta.__instancecheck__": (
        "capture/builtins.c isinstance", "isinstance(x, torch.nn.Buffer)"),
    "torch.no_grad": ("capture/builtins.c torch_special (grad-mode block)", "with torch.no_grad():\n        return x * 2"),
    "torch.enable_grad": ("capture/builtins.c torch_special (grad-mode block)", "with torch.enable_grad():\n        return x * 2"),
}

# Not covered on purpose, or owned by another piece of work: name -> reason.
_NOT_COMPILING = ("transformers calls it only when not compiling: its is_tracing() returns at "
                  "is_torchdynamo_compiling(), which shapejit answers True")
LEFT = {
    "Tensor.__bool__": "reads tensor data into Python (`if padding_mask.all():`): a break by design "
                       "(scalar output), as in torch.compile; " + _NOT_COMPILING,
    "torch.cuda.is_current_stream_capturing": "raises RuntimeError in a CPU-only torch build (eager "
                                              "too; shapejit lets it raise); " + _NOT_COMPILING,
    "torch.xpu.is_current_stream_capturing": "raises RuntimeError in a torch build without XPU "
                                             "(eager too; shapejit lets it raise); " + _NOT_COMPILING,
    "torch._C._log_api_usage_once": "reached in an nn.Module's __init__ (slicing a ModuleList "
                                    "builds one): module construction runs in the interpreter, "
                                    "as under torch.compile (hook/hook.c)",
    "torch.nn.utils.parametrize._inject_property.<locals>.get_parametrized":
        "reading a parametrized weight: the property's getter is followed by the evaluator "
        "(capture/attrs.c), not a callables row",
    "torch.autograd.Function.apply": "captured by capture/autograd_fn.c (forward inlined "
                                     "without grad, one graph node with grad), not a callables row",
    "torch.ops.transformers.grouped_mm_fallback":
        "a torch.library custom op (transformers' grouped experts under a compiler): captured "
        "by capture/library_ops.c as one graph node run as is, not a callables row",
    "torch._grouped_mm": "reached in eager only: under a compiler transformers' grouped experts "
                         "call its custom op torch.ops.transformers.grouped_mm_fallback instead "
                         "(one graph node, capture/library_ops.c)",
    "torch._C._fft.fft_fftn": "FFT and complex results are not modelled (fnet's Fourier mixing; "
                              "a break)",
    "Tensor.real": "a complex tensor's real part: complex results are not modelled (fnet)",
    "Tensor.__format__": "data-dependent: switch transformers picks each expert by name, "
                         "f'expert_{idx}' formats a tensor's value (torch.compile breaks too)",
    "Tensor.__iter__": "data-dependent: switch transformers iterates over the experts hit "
                       "(a tensor made from the router's data; torch.compile breaks too)",
    "Tensor.__hash__": "reached inside nn.Module.parameters() (PreTrainedModel.dtype): shapejit "
                       "answers parameters() itself (capture/calls.c module_iter_method), so "
                       "no capture hashes a parameter",
}
# nn.Module.to() called inside forward (switch transformers' router casts its classifier
# on every call): Module._apply rewrites the parameters.
_MODULE_TO = ("owned elsewhere (nn.Module state): Module.to() inside forward (switch "
              "transformers' router) rewrites the module's parameters (param.data = ...), a "
              "side effect on the model")
for _n in ("Tensor.data (write)", "Tensor.grad", "torch._C._nn._parse_to",
           "torch.__future__.get_overwrite_module_params_on_conversion",
           "torch.__future__.get_swap_module_params_on_conversion",
           "torch._has_compatible_shallow_copy_type",
           "torch.utils._python_dispatch.is_traceable_wrapper_subclass"):
    LEFT[_n] = _MODULE_TO


def inlined(obj):
    """1 when shapejit inlines obj's Python body (capture/calls.c call_var)."""
    if not isinstance(obj, types.FunctionType):
        return False
    m = obj.__module__ or ""
    return m.startswith("torch.nn.modules") or m in ("torch.nn.functional", "torch.functional")


def table_objects():
    """{id(object): path} of every row of vocab/callables.def, as shapejit resolves them."""
    from shapejit import _C
    import numpy as np
    heads = {"torch": torch, "numpy": np, "operator": operator, "Tensor": torch.Tensor,
             "ndarray": np.ndarray}
    out = {}
    for row in _C._callable_rows():
        path = row[2]
        head, _, rest = path.partition(".")
        obj = heads[head]
        try:
            for part in rest.split("."):
                obj = getattr(obj, part)
        except AttributeError:
            continue
        out[id(obj)] = path
    return out


def status_of(name, rows=None):
    """(status, detail) of one normalised name against the current callables table."""
    rows = table_objects() if rows is None else rows
    attr = name.split(".")[-1]
    if name.startswith("Tensor.") and attr in OPERATOR_OF:
        path = "operator." + OPERATOR_OF[attr]
        if id(getattr(operator, OPERATOR_OF[attr])) in rows:
            return "covered", path
    if name in ANSWERED:
        return "answered", ANSWERED[name][0]
    try:
        obj = resolve(name)
    except AttributeError:
        obj = None
    if obj is not None and id(obj) in rows:
        return "covered", rows[id(obj)]       # before LEFT: a row added since wins
    if name in LEFT:
        return "left", LEFT[name]
    if obj is None:
        return "not covered", "the name no longer resolves"
    if inlined(obj):
        return "inlined", "Python body inlined (%s)" % obj.__module__
    return "not covered", ""


# ---------------------------------------------------------------------------------------
# models
# ---------------------------------------------------------------------------------------

BATCH, SEQ, VOCAB = 2, 8, 96


def _models():
    """{name: (build, inputs)}; the model zoo's models first (tests/support/model_zoo.py)."""
    import transformers as T
    sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
    import model_zoo

    def text(**extra):
        def inputs():
            g = torch.Generator().manual_seed(0)
            kw = dict(input_ids=torch.randint(3, VOCAB, (BATCH, SEQ), generator=g),
                      attention_mask=model_zoo._padding_mask(BATCH, SEQ))
            kw.update(extra)
            return kw
        return inputs

    def pixels(size=32):
        return lambda: dict(pixel_values=torch.randn(BATCH, 3, size, size,
                                                     generator=torch.Generator().manual_seed(0)))

    def decoder(cfg_cls, model_cls, **kw):
        base = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                    num_attention_heads=4, max_position_embeddings=64, use_cache=False)
        base.update(kw)
        return lambda: model_cls(cfg_cls(**base))

    def encoder(cfg_cls, model_cls, **kw):
        base = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                    num_attention_heads=4, max_position_embeddings=64)
        base.update(kw)
        return lambda: model_cls(cfg_cls(**base))

    zoo_inputs = {}
    for name in ("llama", "mistral", "t5_encoder", "t5_seq2seq", "bart", "whisper_encoder",
                 "clip_text", "clip_vision"):
        zoo_inputs[name] = (model_zoo.ZOO[name].build,
                            (lambda n=name: model_zoo.inputs(n, 0, BATCH, SEQ)))
    pegasus_cfg = dict(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2,
                       encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                       decoder_ffn_dim=64, max_position_embeddings=64, use_cache=False,
                       pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    models = dict(zoo_inputs)
    models.update({
        "bert": (encoder(T.BertConfig, T.BertModel), text()),
        "roberta": (encoder(T.RobertaConfig, T.RobertaModel, pad_token_id=1), text()),
        "electra": (encoder(T.ElectraConfig, T.ElectraModel, embedding_size=16), text()),
        "distilbert": (lambda: T.DistilBertModel(T.DistilBertConfig(
            vocab_size=VOCAB, dim=32, hidden_dim=64, n_layers=2, n_heads=4,
            max_position_embeddings=64)), text()),
        "albert": (encoder(T.AlbertConfig, T.AlbertModel, embedding_size=16), text()),
        "mpnet": (encoder(T.MPNetConfig, T.MPNetModel), text()),
        "deberta_v2": (encoder(T.DebertaV2Config, T.DebertaV2Model, position_buckets=8,
                               max_relative_positions=16), text()),
        "gpt2": (lambda: T.GPT2Model(T.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4,
                                                   n_positions=64, use_cache=False)), text()),
        "gpt_neo": (lambda: T.GPTNeoModel(T.GPTNeoConfig(
            vocab_size=VOCAB, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
            max_position_embeddings=64, attention_types=[[["global", "local"], 1]],
            window_size=4, use_cache=False)), text()),
        "opt": (lambda: T.OPTModel(T.OPTConfig(
            vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, ffn_dim=64,
            num_attention_heads=4, max_position_embeddings=64, word_embed_proj_dim=32,
            use_cache=False, pad_token_id=1)), text()),
        "bloom": (lambda: T.BloomModel(T.BloomConfig(
            vocab_size=VOCAB, hidden_size=32, n_layer=2, n_head=4, use_cache=False)), text()),
        "falcon": (lambda: T.FalconModel(T.FalconConfig(
            vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            use_cache=False, max_position_embeddings=64)), text()),
        "phi": (decoder(T.PhiConfig, T.PhiModel, partial_rotary_factor=0.5), text()),
        "qwen2": (decoder(T.Qwen2Config, T.Qwen2Model, num_key_value_heads=2), text()),
        "gemma": (decoder(T.GemmaConfig, T.GemmaModel, num_key_value_heads=2, head_dim=8), text()),
        "pegasus": (lambda: T.PegasusModel(T.PegasusConfig(**pegasus_cfg)),
                    text(decoder_input_ids=torch.randint(3, VOCAB, (BATCH, 5),
                                                         generator=torch.Generator().manual_seed(1)))),
        "vit": (lambda: T.ViTModel(T.ViTConfig(
            image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=64)), pixels()),
        "resnet": (lambda: T.ResNetModel(T.ResNetConfig(
            embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="bottleneck")),
            pixels()),
        "convnext": (lambda: T.ConvNextModel(T.ConvNextConfig(
            hidden_sizes=[16, 32], depths=[1, 1], num_stages=2)), pixels()),
        "swin": (lambda: T.SwinModel(T.SwinConfig(
            image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
            window_size=4)), pixels()),
        "mobilevit": (lambda: T.MobileViTModel(T.MobileViTConfig(
            image_size=32, hidden_sizes=[16, 24, 32], neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64],
            num_attention_heads=2)), pixels()),
        "wav2vec2": (lambda: T.Wav2Vec2Model(T.Wav2Vec2Config(
            vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
            num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=4)),
            lambda: dict(input_values=torch.randn(BATCH, 400, generator=torch.Generator().manual_seed(0)))),
        # a second set: mechanisms the first does not have (experts, einsum, fft, conv
        # attention, depthwise convs, relative positions)
        "mixtral": (decoder(T.MixtralConfig, T.MixtralModel, num_key_value_heads=2,
                            num_local_experts=4, num_experts_per_tok=2), text()),
        "qwen2_moe": (decoder(T.Qwen2MoeConfig, T.Qwen2MoeModel, num_key_value_heads=2,
                              num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                              shared_expert_intermediate_size=32), text()),
        "gpt_neox": (decoder(T.GPTNeoXConfig, T.GPTNeoXModel, rotary_pct=0.5), text()),
        "gptj": (lambda: T.GPTJModel(T.GPTJConfig(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4,
                                                   rotary_dim=4, n_positions=64, use_cache=False)),
                 text()),
        "gemma2": (decoder(T.Gemma2Config, T.Gemma2Model, num_key_value_heads=2, head_dim=8,
                           sliding_window=4), text()),
        "phi3": (decoder(T.Phi3Config, T.Phi3Model, num_key_value_heads=2, pad_token_id=0), text()),
        "gpt_bigcode": (lambda: T.GPTBigCodeModel(T.GPTBigCodeConfig(
            vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64, use_cache=False)),
            text()),
        "mpt": (lambda: T.MptModel(T.MptConfig(vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=4,
                                              max_seq_len=64, use_cache=False)), text()),
        "xlnet": (lambda: T.XLNetModel(T.XLNetConfig(vocab_size=VOCAB, d_model=32, n_layer=2,
                                                     n_head=4, d_inner=64, use_mems_eval=False)),
                  text()),
        "funnel": (lambda: T.FunnelBaseModel(T.FunnelConfig(
            vocab_size=VOCAB, block_sizes=[1, 1], d_model=32, n_head=4, d_head=8, d_inner=64)),
            text()),
        "mobilebert": (encoder(T.MobileBertConfig, T.MobileBertModel, embedding_size=16,
                               intra_bottleneck_size=16, true_hidden_size=16,
                               num_feedforward_networks=2), text()),
        "convbert": (encoder(T.ConvBertConfig, T.ConvBertModel, embedding_size=32), text()),
        "squeezebert": (encoder(T.SqueezeBertConfig, T.SqueezeBertModel, embedding_size=32), text()),
        "fnet": (lambda: T.FNetModel(T.FNetConfig(vocab_size=VOCAB, hidden_size=32,
                                                  num_hidden_layers=2, intermediate_size=64,
                                                  max_position_embeddings=64)),
                 lambda: dict(input_ids=torch.randint(3, VOCAB, (BATCH, SEQ),
                                                      generator=torch.Generator().manual_seed(0)))),
        "switch_transformers": (lambda: T.SwitchTransformersEncoderModel(T.SwitchTransformersConfig(
            vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
            num_experts=4, encoder_sparse_step=1, relative_attention_num_buckets=8)),
            text()),
        "segformer": (lambda: T.SegformerModel(T.SegformerConfig(
            num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
            patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2])),
            pixels()),
        "mobilenet_v2": (lambda: T.MobileNetV2Model(T.MobileNetV2Config(
            image_size=32, depth_multiplier=0.25)), pixels()),
        "efficientnet": (lambda: T.EfficientNetModel(T.EfficientNetConfig(
            image_size=32, width_coefficient=0.25, depth_coefficient=0.25, hidden_dim=320)),
            pixels()),
        "regnet": (lambda: T.RegNetModel(T.RegNetConfig(
            embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], groups_width=8)), pixels()),
        "poolformer": (lambda: T.PoolFormerModel(T.PoolFormerConfig(
            hidden_sizes=[16, 32, 32, 32], depths=[1, 1, 1, 1])), pixels()),
        "beit": (lambda: T.BeitModel(T.BeitConfig(
            image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=64, use_relative_position_bias=True)),
            pixels()),
        "dinov2": (lambda: T.Dinov2Model(T.Dinov2Config(
            image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
            num_attention_heads=4, mlp_ratio=2)), pixels()),
        "levit": (lambda: T.LevitModel(T.LevitConfig(
            image_size=32, hidden_sizes=[16, 32, 48], num_attention_heads=[1, 2, 3],
            depths=[1, 1, 1], key_dim=[8, 8, 8])), pixels()),
        "hubert": (lambda: T.HubertModel(T.HubertConfig(
            vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
            num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=4)),
            lambda: dict(input_values=torch.randn(BATCH, 400, generator=torch.Generator().manual_seed(0)))),
        "speech_to_text": (lambda: T.Speech2TextModel(T.Speech2TextConfig(
            vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2,
            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
            decoder_ffn_dim=64, input_feat_per_channel=16, conv_channels=32,
            max_source_positions=64, max_target_positions=64, use_cache=False)),
            lambda: dict(input_features=torch.randn(BATCH, 16, 16, generator=torch.Generator().manual_seed(0)),
                         decoder_input_ids=torch.randint(3, VOCAB, (BATCH, 4),
                                                         generator=torch.Generator().manual_seed(1)))),
    })

    def eager(build):
        def make():
            m = build()
            m.set_attn_implementation("eager")
            return m
        return make
    # the attention written out (softmax, masked_fill, matmul) rather than sdpa
    for name in ("llama", "bert", "gpt2", "bart", "vit", "clip_text", "gemma", "opt"):
        build, inputs = models[name]
        models[name + "_eager_attn"] = (eager(build), inputs)
    return models


# ---------------------------------------------------------------------------------------
# recorders
# ---------------------------------------------------------------------------------------

class _Mode(torch.overrides.TorchFunctionMode):
    def __init__(self, found):
        super().__init__()
        self.found = found

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        n = normalise(func)
        if n:
            self.found[n] += 1
        return func(*args, **(kwargs or {}))


TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


# What follows a torch class read that is not the callee of a call: an argument
# (isinstance(x, torch.SymInt)), a comparison, an attribute read (nn.LayerNorm.forward).
_ARGUMENT_USES = ("PRECALL", "CALL", "BUILD_TUPLE", "COMPARE_OP", "IS_OP", "CONTAINS_OP",
                  "LOAD_ATTR", "LOAD_METHOD")


class _Tracer:
    """settrace/setprofile over the frames shapejit evaluates."""

    def __init__(self, found, rows):
        self.found = found
        self.rows = rows               # id(object) of the callables table's rows
        self.evaluated = {}            # frame -> bool
        self.attr_sites = {}           # code -> {offset: (module name, attr)}

    def _is_eval(self, frame):
        return self.evaluated.get(frame, False) if frame is not None else False

    def _sites(self, code):
        s = self.attr_sites.get(code)
        if s is None:
            s = {}
            prev = pending = None
            for ins in dis.get_instructions(code):
                if pending is not None and ins.opname not in _ARGUMENT_USES:
                    s[pending[0]] = pending[1]
                pending = None
                if ins.opname in ("LOAD_ATTR", "LOAD_METHOD") and prev is not None and \
                        prev.opname == "LOAD_GLOBAL":
                    pending = (ins.offset, (prev.argval, ins.argval))
                prev = ins
            self.attr_sites[code] = s
        return s

    def trace(self, frame, event, arg):
        if event != "call":
            return None
        parent = frame.f_back
        top = parent is not None and parent.f_code.co_filename == __file__
        ev = False
        if top or self._is_eval(parent):
            if not frame.f_code.co_filename.startswith(TORCH_DIR):
                ev = True
            else:
                fn = _function_of(frame)
                in_table = fn is not None and id(fn) in self.rows
                m = frame.f_globals.get("__name__", "")
                inner = frame.f_code.co_name.startswith("<")   # a genexpr of an inlined body
                if (m.startswith(("torch.nn.modules", "torch.utils._contextlib")) or inner) and not in_table:
                    ev = True      # module forwards, grad-mode wrappers: inlined, not API calls
                else:
                    n = _python_name(fn, frame)
                    if n:
                        self.found[n] += 1
                    ev = not in_table and m in ("torch.nn.functional", "torch.functional")
        self.evaluated[frame] = ev
        if ev and self._sites(frame.f_code):
            frame.f_trace_opcodes = True
            return self.local
        return None

    def local(self, frame, event, arg):
        if event == "opcode":
            site = self.attr_sites[frame.f_code].get(frame.f_lasti)
            if site:
                mod = frame.f_globals.get(site[0], frame.f_builtins.get(site[0]) if isinstance(
                    frame.f_builtins, dict) else None)
                if isinstance(mod, types.ModuleType) and mod.__name__.startswith("torch"):
                    val = getattr(mod, site[1], None)
                    if isinstance(val, type) and val is not torch.Tensor:
                        n = "%s.%s" % (mod.__name__, site[1])
                        self.found[n] += 1
        return self.local

    def profile(self, frame, event, arg):
        if event == "c_call" and self._is_eval(frame):
            n = normalise(arg)
            if n:
                self.found[n] += 1


_CODES = {}


def _functions_with_code():
    """{code: [function]} of the Python functions of the public torch namespaces."""
    if not _CODES:
        for k in dir(torch.Tensor):   # Tensor.__rsub__ & co. share one wrapper's code
            f = getattr(torch.Tensor, k, None)
            if isinstance(f, types.FunctionType):
                _CODES.setdefault(f.__code__, []).append(f)
        for _, ns in _NAMESPACES:
            for k in dir(ns):
                f = getattr(ns, k, None)
                if isinstance(f, types.FunctionType):
                    _CODES.setdefault(f.__code__, []).append(f)
    return _CODES


def _python_name(fn, frame):
    """The name of a torch Python function entered from an evaluated frame: the class for
    the construction and with-protocol methods of a torch class (torch.no_grad)."""
    code = frame.f_code
    m = frame.f_globals.get("__name__", "?")
    parts = code.co_qualname.split(".")
    if len(parts) == 2 and parts[1] in ("__init__", "__new__", "__enter__", "__exit__"):
        cls = getattr(torch, parts[0], None)
        if isinstance(cls, type):
            return "torch." + parts[0]
    if code.co_qualname == "OpOverloadPacket.__call__":   # torch.ops.<namespace>.<op>(...)
        op = frame.f_locals.get("self")
        qn = getattr(op, "_qualified_op_name", None)
        if isinstance(qn, str):
            return "torch.ops." + qn.replace("::", ".")
    if code.co_qualname == "VFModule.__getattr__":   # torch._VF.<name>: an attribute read
        return None
    n = normalise(fn) if fn is not None else None
    return n or "%s.%s" % (m, code.co_qualname)


def _function_of(frame):
    """The function object running in frame, when it can be found cheaply."""
    code = frame.f_code
    g = frame.f_globals
    name = code.co_qualname
    obj = None
    parts = name.split(".")
    for f in _functions_with_code().get(code, ()):
        cells = dict(zip(code.co_freevars, (c.cell_contents for c in f.__closure__ or ())))
        if all(frame.f_locals.get(k) is v for k, v in cells.items()):
            return f
    if "<locals>" in parts:
        return None
    obj = g.get(parts[0])
    for p in parts[1:]:
        obj = getattr(obj, p, None) if obj is not None else None
        obj = getattr(obj, "__func__", obj)
    if isinstance(obj, types.FunctionType) and obj.__code__ is code:
        return obj
    if code.co_filename.startswith(TORCH_DIR) and parts[0] == "Tensor":
        f = getattr(torch.Tensor, parts[-1], None)
        if getattr(f, "__code__", None) is code:
            return f
    return None


def trace_model(model, kwargs):
    """Counter of the normalised names the forward calls."""
    found = collections.Counter()
    with torch.no_grad():
        model(**kwargs)                          # warm-up: lazy init not counted
        with _Mode(found):
            model(**kwargs)
        rows = table_objects()
        for compiling in (False, True):
            tr = _Tracer(found, rows)
            saved = torch.compiler.is_compiling
            if compiling:
                torch.compiler.is_compiling = _answer_true
            sys.setprofile(tr.profile)
            sys.settrace(tr.trace)
            try:
                model(**kwargs)
            finally:
                sys.settrace(None)
                sys.setprofile(None)
                torch.compiler.is_compiling = saved
    return found


def _answer_true():
    """torch.compiler.is_compiling as shapejit answers it in the frames it evaluates: the
    second settrace pass takes the paths a model takes under a compiler (transformers
    skips its caches and data-dependent checks there: beit's lru_cache of the relative
    position index, the masks' `padding_mask.all()`)."""
    return True


def _reason_text(r):
    return " ".join(str(r).split())[:300]


def explain_shapejit(model, kwargs):
    import shapejit
    try:
        with torch.no_grad():
            out = shapejit.explain(model)(**kwargs)
    except Exception as e:  # noqa: BLE001 - recorded, not fatal
        return {"error": "%s: %s" % (type(e).__name__, _reason_text(e))}
    return {"graphs": out.graph_count, "breaks": out.graph_break_count,
            "reasons": sorted({_reason_text(b.reason) for b in out.break_reasons})}


def explain_dynamo(model, kwargs):
    import torch._dynamo
    torch._dynamo.reset()
    try:
        with torch.no_grad():
            out = torch._dynamo.explain(model)(**kwargs)
    except Exception as e:  # noqa: BLE001
        return {"error": "%s: %s" % (type(e).__name__, _reason_text(e))}
    finally:
        torch._dynamo.reset()
    return {"graphs": out.graph_count, "breaks": out.graph_break_count,
            "reasons": sorted({_reason_text(str(b.reason).splitlines()[0]) for b in out.break_reasons})}


def run_trace(only, explain):
    import logging
    warnings.filterwarnings("ignore")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    data = load() if only and os.path.exists(DATA) else {"models": {}}
    built = {}
    # every trace before any explain: torch._dynamo patches nn.Module.__init__ once it ran
    for name, (build, inputs) in _models().items():
        if only and name not in only:
            continue
        with torch.random.fork_rng():
            torch.manual_seed(0)
            model = build().eval()
        kwargs = inputs()
        try:
            found = trace_model(model, kwargs)
        except Exception as e:  # noqa: BLE001 - a config that does not run: say so, go on
            print("%-16s FAILED in eager: %s: %s" % (name, type(e).__name__, e), flush=True)
            continue
        entry = {"class": type(model).__name__, "calls": dict(sorted(found.items()))}
        old = data["models"].get(name, {})
        for k in ("shapejit", "dynamo"):
            if k in old:
                entry[k] = old[k]
        data["models"][name] = entry
        built[name] = (model, kwargs)
        print("%-16s %3d callables" % (name, len(found)), flush=True)
    for name, (model, kwargs) in built.items() if explain else ():
        entry = data["models"][name]
        entry["shapejit"] = explain_shapejit(model, kwargs)
        entry["dynamo"] = explain_dynamo(model, kwargs)
        print("%-16s shapejit %s  torch %s" % (
            name, _counts(entry["shapejit"]), _counts(entry["dynamo"])), flush=True)
    data["models"] = dict(sorted(data["models"].items()))
    with open(DATA, "w") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
        fh.write("\n")
    return data


def _counts(e):
    if not e:
        return "not run"
    if "error" in e:
        return "error"
    return "%d / %d" % (e["graphs"], e["breaks"])


def load():
    with open(DATA) as fh:
        return json.load(fh)


# ---------------------------------------------------------------------------------------
# the document
# ---------------------------------------------------------------------------------------

def callers(data):
    """{name: [model, ...]} over the traced data."""
    out = collections.defaultdict(list)
    for model, entry in data["models"].items():
        for n in entry["calls"]:
            out[n].append(model)
    return dict(sorted(out.items()))


def statuses(data):
    rows = table_objects()
    return {n: status_of(n, rows) for n in callers(data)}


def render(data):
    who = callers(data)
    st = statuses(data)
    counts = collections.Counter(s for s, _ in st.values())
    lines = [
        "# torch callables of real models, and shapejit's coverage",
        "",
        "Generated by `python3 tools/torch_call_coverage.py --write` from the traced calls in",
        "`tools/torch_calls.json` (`make coverage` traces the models again) and the callables",
        "table of vocab/callables.def. Do not edit by hand; tests/vocab/test_call_coverage.py checks",
        "that it is in step.",
        "",
        "Every torch callable that %d `transformers` models (small configs, eval mode, under"
        % len(data["models"]),
        "`torch.no_grad()`) call at the Python API level. Status: **covered** (a row of",
        "vocab/callables.def), **answered** (the evaluator answers it without an op),",
        "**inlined** (a Python function of torch whose body shapejit evaluates; its calls are",
        "rows of their own), **left** (not covered, with the reason), **not covered**.",
        "",
        "Totals: " + ", ".join("%s %d" % (k, counts[k]) for k in
                               ("covered", "answered", "inlined", "left", "not covered")),
        "",
        "| callable | status | detail | models |",
        "|---|---|---|---|",
    ]
    for n, models in who.items():
        s, d = st[n]
        shown = ", ".join(models) if len(models) <= 8 else "%d models" % len(models)
        lines.append("| `%s` | %s | %s | %s |" % (n, s, d.replace("|", "\\|"), shown))
    lines += [
        "",
        "## The models through shapejit and torch.compile",
        "",
        "One call at (batch %d, seq %d), `shapejit.explain` and `torch._dynamo.explain`, as of"
        % (BATCH, SEQ),
        "the last `make coverage`.",
        "",
        "| model | class | shapejit graphs / breaks | torch graphs / breaks |",
        "|---|---|---|---|",
    ]

    gb = _counts
    for m, e in data["models"].items():
        lines.append("| %s | %s | %s | %s |" % (m, e["class"], gb(e.get("shapejit")), gb(e.get("dynamo"))))
    lines += ["", "### Break reasons", ""]
    for m, e in data["models"].items():
        for side, key in (("shapejit", "shapejit"), ("torch", "dynamo")):
            x = e.get(key) or {}
            texts = x.get("reasons", []) + ([x["error"]] if "error" in x else [])
            for r in texts:
                lines.append("- %s, %s: %s" % (m, side, r.replace("|", "\\|")))
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", action="store_true", help="run the models, write tools/torch_calls.json")
    ap.add_argument("--explain", action="store_true", help="with --trace: also shapejit/dynamo explain")
    ap.add_argument("--only", help="comma-separated model names (with --trace: update those)")
    ap.add_argument("--write", action="store_true", help="regenerate docs/torch_call_coverage.md")
    ap.add_argument("--data", help="the traced-calls file to use instead of tools/torch_calls.json")
    args = ap.parse_args()
    global DATA
    DATA = args.data or DATA
    only = set(args.only.split(",")) if args.only else None
    data = run_trace(only, args.explain) if args.trace else load()
    if args.write:
        with open(DOC, "w") as fh:
            fh.write(render(data))
        print("wrote", os.path.relpath(DOC))
    who = callers(data)
    for n, (s, d) in statuses(data).items():
        if s == "not covered":
            print("%-50s %s" % (n, ", ".join(who[n])))


if __name__ == "__main__":
    main()
