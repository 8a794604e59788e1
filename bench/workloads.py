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
NAMES = list(SPECS)


def build(name: str) -> Workload:
    title, lib, dims, main, sweep, builder, peers = SPECS[name]
    torch.manual_seed(0)
    fn, make_args = builder()
    return Workload(name, title, lib, dims, main, sweep, fn, make_args, peers)
