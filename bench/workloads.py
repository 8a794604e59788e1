"""The workloads of the benchmark suite (bench/suite.py), and the numpy kernels that
bench/main.py shares.

Import this module only after ``common.early_setup`` (it imports torch and numpy).
Every builder is seeded, so each child process of the suite rebuilds identical weights
and inputs.  A workload's inputs are made by ``args(size)`` for a size tuple over its
``dims`` (("batch", "seq"), ("batch",), ...), so the same function can be called at its
main size and over a sweep of sizes.
"""

from __future__ import annotations

import math
import types
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from pointwise_bw import arith10

# Sweeps over (batch, seq): each dim from its smallest to its largest value, a handful of
# points so that Inductor's recompiles stay within the suite's time budget.
BATCH_SEQ_SWEEP = [(1, 16), (4, 64), (64, 32), (2, 512)]
BATCH_SWEEP = [(1,), (4,), (33,), (64,)]


@dataclass
class Workload:
    name: str
    title: str
    lib: str                                   # "torch" or "numpy"
    dims: tuple                                # names of the size tuple's entries
    main: tuple                                # the size timed
    sweep: list | None                         # sizes of the dynamic sweep (None: no sweep)
    fn: Callable                               # the function or nn.Module compiled
    make_args: Callable                        # size tuple -> argument tuple
    peers: tuple = field(default=())           # extra systems: "numba", "jax"

    def args(self, size):
        torch.manual_seed(1)
        return self.make_args(*size)


# --------------------------------------------------------------------------- numpy kernels

def lj_stats(pos):
    """Lennard-Jones energy per particle of a particle cloud, with z-scores (numpy)."""
    n = pos.shape[0]
    d = pos[:, None, :] - pos[None, :, :]
    r2 = (d * d).sum(axis=-1) + np.eye(n)
    inv6 = (1.0 / r2) ** 3
    e = 4.0 * (inv6 * inv6 - inv6) * (1.0 - np.eye(n))
    per = 0.5 * e.sum(axis=1)
    z = (per - per.mean()) / per.std()
    return per.sum(), z


def column_moments(x):
    """Mean, standard deviation, skewness and excess kurtosis of each column (numpy)."""
    n = x.shape[0]
    mu = x.sum(axis=0) / n
    d = x - mu
    sd = np.sqrt((d * d).sum(axis=0) / n)
    z = d / sd
    z2 = z * z
    return mu, sd, (z2 * z).sum(axis=0) / n, (z2 * z2).sum(axis=0) / n - 3.0


def with_module(fn, name: str, module):
    """The same code as fn with the global `name` bound to `module` (e.g. np -> jax.numpy):
    one source serves numpy, numba and JAX."""
    return types.FunctionType(fn.__code__, dict(fn.__globals__, **{name: module}),
                              fn.__name__, fn.__defaults__, fn.__closure__)


def lattice(n_side: int):
    """n_side**3 particles on a jittered cubic lattice (spacing 1.2), float64."""
    rng = np.random.default_rng(0)
    g = np.stack(np.meshgrid(*[np.arange(n_side) * 1.2] * 3, indexing="ij"), -1).reshape(-1, 3)
    return g + rng.uniform(-0.1, 0.1, g.shape)


# --------------------------------------------------------------------------- torch functions

def layernorm_gelu(x, w, b):
    return F.gelu(F.layer_norm(x, (x.shape[-1],), w, b))


def attention(q, k, v):
    scale = 1.0 / math.sqrt(q.shape[-1])
    s = torch.matmul(q, k.transpose(-2, -1)) * scale
    return torch.matmul(torch.softmax(s, dim=-1), v)


def reductions(x):
    return x.sum(dim=-1), x.mean(dim=1), torch.softmax(x, dim=-1)


# --------------------------------------------------------------------------- builders

def _ids(vocab):
    return lambda b, s: (torch.randint(0, vocab, (b, s)),)


def _bert():
    from transformers import BertConfig, BertModel
    cfg = BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=512, max_position_embeddings=512)
    return BertModel(cfg).eval(), _ids(cfg.vocab_size)


def _gpt2():
    from transformers import GPT2Config, GPT2Model
    cfg = GPT2Config(vocab_size=1000, n_embd=128, n_layer=2, n_head=4, n_positions=512,
                     use_cache=False)
    return GPT2Model(cfg).eval(), _ids(cfg.vocab_size)


def _vit():
    from transformers import ViTConfig, ViTModel
    cfg = ViTConfig(image_size=32, patch_size=8, hidden_size=128, num_hidden_layers=2,
                    num_attention_heads=4, intermediate_size=512)
    return ViTModel(cfg, add_pooling_layer=False).eval(), lambda b: (torch.randn(b, 3, 32, 32),)


def _resnet():
    from transformers import ResNetConfig, ResNetModel
    cfg = ResNetConfig(embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1],
                       layer_type="basic")
    return ResNetModel(cfg).eval(), lambda b: (torch.randn(b, 3, 64, 64),)


def _encoder():
    layer = torch.nn.TransformerEncoderLayer(128, 4, 512, dropout=0.0, batch_first=True).eval()
    return layer, lambda b, s: (torch.randn(b, s, 128),)


def _mlp():
    m = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(),
                            torch.nn.Linear(1024, 256)).eval()
    return m, lambda b: (torch.randn(b, 256),)


def _fn(fn, make_args):
    return lambda: (fn, make_args)


# name: (title, lib, dims, main size, sweep, builder, peers)
SPECS = {
    "bert": ("transformers BertModel (2 layers, hidden 128)", "torch", ("batch", "seq"),
             (8, 128), BATCH_SEQ_SWEEP, _bert, ()),
    "gpt2": ("transformers GPT2Model (2 layers, hidden 128, use_cache=False)", "torch",
             ("batch", "seq"), (8, 128), BATCH_SEQ_SWEEP, _gpt2, ()),
    "vit": ("transformers ViTModel (2 layers, hidden 128, 32x32 images, patch 8)", "torch",
            ("batch",), (8,), BATCH_SWEEP, _vit, ()),
    "resnet": ("transformers ResNetModel (basic blocks 1-1-1-1, 16-128 wide, 64x64 images)",
               "torch", ("batch",), (8,), BATCH_SWEEP, _resnet, ()),
    "encoder_s32": ("TransformerEncoderLayer d=128, 4 heads, ff 512, seq 32", "torch",
                    ("batch", "seq"), (8, 32), None, _encoder, ()),
    "encoder_s128": ("TransformerEncoderLayer d=128, 4 heads, ff 512, seq 128", "torch",
                     ("batch", "seq"), (8, 128), BATCH_SEQ_SWEEP, _encoder, ()),
    "encoder_s512": ("TransformerEncoderLayer d=128, 4 heads, ff 512, seq 512", "torch",
                     ("batch", "seq"), (8, 512), None, _encoder, ()),
    "mlp": ("MLP 256-1024-256 (nn.Sequential with GELU)", "torch", ("batch",), (64,),
            BATCH_SWEEP, _mlp, ()),
    "layernorm_gelu": ("layer norm + GELU, (batch, seq, 256)", "torch", ("batch", "seq"),
                       (8, 128), BATCH_SEQ_SWEEP,
                       _fn(layernorm_gelu, lambda b, s: (torch.randn(b, s, 256),
                                                         torch.rand(256) + 0.5,
                                                         torch.randn(256) * 0.1)), ()),
    "attention": ("softmax attention written out, (batch, 4 heads, seq, 64)", "torch",
                  ("batch", "seq"), (8, 128), BATCH_SEQ_SWEEP,
                  _fn(attention, lambda b, s: tuple(torch.randn(b, 4, s, 64) for _ in range(3))), ()),
    "pointwise10": ("a chain of ten pointwise ops, (batch, seq, 256)", "torch", ("batch", "seq"),
                    (8, 512), BATCH_SEQ_SWEEP,
                    _fn(arith10, lambda b, s: (torch.randn(b, s, 256),)), ()),
    "reductions": ("sum, mean and softmax of (batch, seq, 256)", "torch", ("batch", "seq"),
                   (8, 128), BATCH_SEQ_SWEEP,
                   _fn(reductions, lambda b, s: (torch.randn(b, s, 256),)), ()),
    "numpy_lj": ("numpy: Lennard-Jones energies + z-scores, particles on a lattice, float64",
                 "numpy", ("particles",), (512,), [(64,), (216,), (343,)],
                 _fn(lj_stats, lambda n: (lattice(round(n ** (1 / 3))),)), ("numba", "jax")),
    "numpy_moments": ("numpy: column mean/std/skew/kurtosis of (rows, 64), float32", "numpy",
                      ("rows",), (8192,), [(100,), (1000,), (33000,)],
                      _fn(column_moments, lambda n: (np.random.default_rng(n).standard_normal(
                          (n, 64)).astype(np.float32),)), ("numba", "jax")),
}


# --------------------------------------------------------------------------- the model zoo
# transformers architectures built from small configs (nothing downloaded), each at two
# sizes: "s" (hidden 64, 2 layers, batch 2, seq 32 / 32x32 images / 64 audio frames) and
# "m" (hidden 256, 2 layers, batch 4, seq 128 / 64x64 images / 256 frames).  Every model
# is called as forward (no generate, no cache), in eval mode, weights from seed 0.

ZOO_SIZES = {
    "s": dict(hidden=64, ffn=256, layers=2, heads=4, batch=2, seq=32, image=32, frames=64,
              mels=32),
    "m": dict(hidden=256, ffn=1024, layers=2, heads=4, batch=4, seq=128, image=64,
              frames=256, mels=80),
}
ZOO_VOCAB = 1000


class KeywordCall(torch.nn.Module):
    """A model called with keyword arguments (decoder_input_ids, input_features, ...) from
    the suite's positional argument tuple."""

    def __init__(self, model, names):
        super().__init__()
        self.model, self.names = model, tuple(names)

    def forward(self, a, b):
        return self.model(**{self.names[0]: a, self.names[1]: b})


def _text(model):
    return model, lambda b, s: (torch.randint(3, ZOO_VOCAB, (b, s)),)


def _seq2seq(model):
    """Encoder tokens of length seq, decoder tokens of length seq // 2."""
    return (KeywordCall(model, ("input_ids", "decoder_input_ids")),
            lambda b, s: (torch.randint(3, ZOO_VOCAB, (b, s)),
                          torch.randint(3, ZOO_VOCAB, (b, s // 2))))


def _pixels(model, side):
    return model, lambda b: (torch.randn(b, 3, side, side),)


def _enc_kw(z, **extra):
    """BERT-like config keywords."""
    return dict(vocab_size=ZOO_VOCAB, hidden_size=z["hidden"], intermediate_size=z["ffn"],
                num_hidden_layers=z["layers"], num_attention_heads=z["heads"],
                max_position_embeddings=512, **extra)


def _dec_kw(z, **extra):
    return dict(_enc_kw(z), use_cache=False, **extra)


def _bart_kw(z, **extra):
    return dict(vocab_size=ZOO_VOCAB, d_model=z["hidden"], encoder_layers=z["layers"],
                decoder_layers=z["layers"], encoder_attention_heads=z["heads"],
                decoder_attention_heads=z["heads"], encoder_ffn_dim=z["ffn"],
                decoder_ffn_dim=z["ffn"], max_position_embeddings=512, use_cache=False,
                pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
                **extra)


def _zoo_roberta(z):
    from transformers import RobertaConfig, RobertaModel
    return _text(RobertaModel(RobertaConfig(**_enc_kw(z, pad_token_id=1))))


def _zoo_distilbert(z):
    from transformers import DistilBertConfig, DistilBertModel
    return _text(DistilBertModel(DistilBertConfig(
        vocab_size=ZOO_VOCAB, dim=z["hidden"], hidden_dim=z["ffn"], n_layers=z["layers"],
        n_heads=z["heads"], max_position_embeddings=512)))


def _zoo_albert(z):
    from transformers import AlbertConfig, AlbertModel
    return _text(AlbertModel(AlbertConfig(**_enc_kw(z, embedding_size=z["hidden"] // 2))))


def _zoo_electra(z):
    from transformers import ElectraConfig, ElectraModel
    return _text(ElectraModel(ElectraConfig(**_enc_kw(z, embedding_size=z["hidden"] // 2))))


def _zoo_llama(z):
    from transformers import LlamaConfig, LlamaModel
    return _text(LlamaModel(LlamaConfig(**_dec_kw(z, num_key_value_heads=2))))


def _zoo_qwen2(z):
    from transformers import Qwen2Config, Qwen2Model
    return _text(Qwen2Model(Qwen2Config(**_dec_kw(z, num_key_value_heads=2))))


def _zoo_opt(z):
    from transformers import OPTConfig, OPTModel
    return _text(OPTModel(OPTConfig(
        vocab_size=ZOO_VOCAB, hidden_size=z["hidden"], num_hidden_layers=z["layers"],
        ffn_dim=z["ffn"], num_attention_heads=z["heads"], max_position_embeddings=512,
        word_embed_proj_dim=z["hidden"], use_cache=False, pad_token_id=1)))


def _zoo_phi(z):
    from transformers import PhiConfig, PhiModel
    return _text(PhiModel(PhiConfig(**_dec_kw(z, partial_rotary_factor=0.5))))


def _zoo_gpt_neox(z):
    from transformers import GPTNeoXConfig, GPTNeoXModel
    return _text(GPTNeoXModel(GPTNeoXConfig(**_dec_kw(z, rotary_pct=0.5))))


def _zoo_t5(z):
    from transformers import T5Config, T5Model
    return _seq2seq(T5Model(T5Config(
        vocab_size=ZOO_VOCAB, d_model=z["hidden"], d_kv=z["hidden"] // z["heads"], d_ff=z["ffn"],
        num_layers=z["layers"], num_decoder_layers=z["layers"], num_heads=z["heads"],
        use_cache=False, decoder_start_token_id=0, pad_token_id=0)))


def _zoo_bart(z):
    from transformers import BartConfig, BartModel
    return _seq2seq(BartModel(BartConfig(**_bart_kw(z))))


def _zoo_pegasus(z):
    from transformers import PegasusConfig, PegasusModel
    return _seq2seq(PegasusModel(PegasusConfig(**_bart_kw(z))))


def _zoo_deit(z):
    from transformers import DeiTConfig, DeiTModel
    return _pixels(DeiTModel(DeiTConfig(
        image_size=z["image"], patch_size=8, hidden_size=z["hidden"],
        num_hidden_layers=z["layers"], num_attention_heads=z["heads"],
        intermediate_size=z["ffn"]), add_pooling_layer=False), z["image"])


def _zoo_convnext(z):
    from transformers import ConvNextConfig, ConvNextModel
    h = z["hidden"] // 4
    return _pixels(ConvNextModel(ConvNextConfig(
        hidden_sizes=[h, 2 * h, 4 * h], depths=[1, 1, 1], num_stages=3)), z["image"])


def _zoo_swin(z):
    from transformers import SwinConfig, SwinModel
    return _pixels(SwinModel(SwinConfig(
        image_size=z["image"], patch_size=4, embed_dim=z["hidden"] // 2, depths=[1, 1],
        num_heads=[2, 4], window_size=4)), z["image"])


def _zoo_mobilenet_v2(z):
    """Convolutions re-initialised He-normal: with the config's std 0.02 and batch norms at
    their initial statistics the activations shrink to ~1e-25 over 17 blocks, and a
    difference from eager would not show."""
    from transformers import MobileNetV2Config, MobileNetV2Model
    model = MobileNetV2Model(MobileNetV2Config(image_size=z["image"],
                                               depth_multiplier=z["hidden"] / 256))
    for m in model.modules():
        if isinstance(m, torch.nn.Conv2d):
            torch.nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
    return _pixels(model, z["image"])


def _zoo_whisper(z):
    """Whisper's encoder: it takes exactly 2 * max_source_positions frames."""
    from transformers import WhisperConfig, WhisperModel
    cfg = WhisperConfig(**_bart_kw(z, num_mel_bins=z["mels"],
                                   max_source_positions=z["frames"] // 2,
                                   max_target_positions=64), )
    enc = WhisperModel(cfg).get_encoder()
    return enc, lambda b: (torch.randn(b, z["mels"], z["frames"]),)


def _zoo_speech_to_text(z):
    from transformers import Speech2TextConfig, Speech2TextModel
    cfg = Speech2TextConfig(**_bart_kw(z, input_feat_per_channel=z["mels"],
                                       conv_channels=z["hidden"], max_source_positions=512,
                                       max_target_positions=512))
    model = KeywordCall(Speech2TextModel(cfg), ("input_features", "decoder_input_ids"))
    return model, lambda b: (torch.randn(b, z["frames"], z["mels"]),
                             torch.randint(3, ZOO_VOCAB, (b, z["frames"] // 8)))


def _zoo_ast(z):
    """Audio spectrogram transformer: 16x16 patches of (frames, mels) at stride 10."""
    from transformers import ASTConfig, ASTModel
    cfg = ASTConfig(hidden_size=z["hidden"], num_hidden_layers=z["layers"],
                    num_attention_heads=z["heads"], intermediate_size=z["ffn"],
                    num_mel_bins=z["mels"], max_length=z["frames"])
    return ASTModel(cfg), lambda b: (torch.randn(b, z["frames"], z["mels"]),)


# arch: (kind, title, builder(size dict) -> (module, make_args), dims)
ZOO = {
    "roberta": ("encoder", "RobertaModel", _zoo_roberta, ("batch", "seq")),
    "distilbert": ("encoder", "DistilBertModel", _zoo_distilbert, ("batch", "seq")),
    "albert": ("encoder", "AlbertModel (embedding hidden/2)", _zoo_albert, ("batch", "seq")),
    "electra": ("encoder", "ElectraModel (embedding hidden/2)", _zoo_electra, ("batch", "seq")),
    "llama": ("decoder", "LlamaModel (2 kv heads)", _zoo_llama, ("batch", "seq")),
    "qwen2": ("decoder", "Qwen2Model (2 kv heads)", _zoo_qwen2, ("batch", "seq")),
    "opt": ("decoder", "OPTModel", _zoo_opt, ("batch", "seq")),
    "phi": ("decoder", "PhiModel (rotary on half the head)", _zoo_phi, ("batch", "seq")),
    "gpt_neox": ("decoder", "GPTNeoXModel (rotary on half the head)", _zoo_gpt_neox,
                 ("batch", "seq")),
    "t5": ("encoder-decoder", "T5Model, decoder seq/2", _zoo_t5, ("batch", "seq")),
    "bart": ("encoder-decoder", "BartModel, decoder seq/2", _zoo_bart, ("batch", "seq")),
    "pegasus": ("encoder-decoder", "PegasusModel, decoder seq/2", _zoo_pegasus,
                ("batch", "seq")),
    "deit": ("vision", "DeiTModel (patch 8)", _zoo_deit, ("batch",)),
    "convnext": ("vision", "ConvNextModel (3 stages, hidden/4 .. hidden wide)", _zoo_convnext,
                 ("batch",)),
    "swin": ("vision", "SwinModel (patch 4, window 4, 2 stages)", _zoo_swin, ("batch",)),
    "mobilenet_v2": ("vision", "MobileNetV2Model (depth multiplier hidden/256)",
                     _zoo_mobilenet_v2, ("batch",)),
    "whisper": ("audio", "WhisperModel's encoder (log-mel frames)", _zoo_whisper, ("batch",)),
    "speech_to_text": ("audio", "Speech2TextModel, decoder frames/8 tokens",
                       _zoo_speech_to_text, ("batch",)),
    "ast": ("audio", "ASTModel (audio spectrogram transformer)", _zoo_ast, ("batch",)),
}


def _zoo_builder(arch, z):
    def build():
        import logging
        logging.getLogger("transformers").setLevel(logging.ERROR)
        model, make_args = ZOO[arch][2](z)
        return model.eval(), make_args
    return build


def _zoo_title(arch, key, z):
    kind, title, _, dims = ZOO[arch]
    what = (f"seq {z['seq']}" if dims == ("batch", "seq") else
            f"{z['image']}x{z['image']} images" if kind == "vision" else
            f"{z['mels']} mels x {z['frames']} frames")
    return (f"{kind}: transformers {title}, hidden {z['hidden']}, {z['layers']} layers, "
            f"batch {z['batch']}, {what}")


def _zoo_specs():
    out = {}
    for arch, (kind, _, _, dims) in ZOO.items():
        for key, z in ZOO_SIZES.items():
            main = (z["batch"], z["seq"]) if dims == ("batch", "seq") else (z["batch"],)
            out[f"zoo_{arch}_{key}"] = (_zoo_title(arch, key, z), "torch", dims, main, None,
                                        _zoo_builder(arch, z), ())
    return out


# The sets of workloads bench/suite.py runs (--set): core is the suite's original 14
# workloads and the default; zoo the transformers architectures above.
CORE = list(SPECS)
SPECS.update(_zoo_specs())
SETS = {"core": CORE, "zoo": [n for n in SPECS if n.startswith("zoo_")]}
SETS["all"] = SETS["core"] + SETS["zoo"]
NAMES = CORE


def build(name: str) -> Workload:
    title, lib, dims, main, sweep, builder, peers = SPECS[name]
    torch.manual_seed(0)
    fn, make_args = builder()
    return Workload(name, title, lib, dims, main, sweep, fn, make_args, peers)
