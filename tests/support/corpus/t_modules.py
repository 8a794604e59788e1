"""torch: nn.Module calls inside compiled functions: Sequential, ModuleList, ModuleDict
iteration, parameters and buffers."""
import torch
import torch.nn as nn

from ._base import T, torch_case


def _build():
    with torch.random.fork_rng():
        torch.manual_seed(0)
        seq = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()
        lst = nn.ModuleList([nn.Linear(6, 6) for _ in range(3)]).eval()
        dct = nn.ModuleDict({"a": nn.Linear(5, 5), "b": nn.Tanh(), "c": nn.Linear(5, 3)}).eval()
        norms = nn.Sequential(nn.LayerNorm(8), nn.GELU(), nn.Dropout(0.5)).eval()
        block = _Block(6).eval()
        bn = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU()).eval()
        with torch.no_grad():
            bn[1].running_mean.uniform_(-0.5, 0.5)
            bn[1].running_var.uniform_(0.5, 1.5)
            block.fc.bias.uniform_(-1, 1)
        rms = nn.Sequential(nn.RMSNorm(8), nn.SiLU(), nn.RMSNorm([2, 8], eps=1e-6, elementwise_affine=False))
        with torch.no_grad():
            rms[0].weight.uniform_(0.5, 1.5)
    return seq, lst, dct, norms, block, bn, rms


class _Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)
        self.register_buffer("scale", torch.full((d,), 0.5))
        self.gain = nn.Parameter(torch.ones(d) * 1.5)

    def forward(self, x):
        return self.norm(self.fc(x) * self.scale + x) * self.gain


_SEQ, _LIST, _DICT, _NORMS, _BLOCK, _BN, _RMS = _build()


@torch_case(lambda: (T(3, 8),), atol=1e-5)
def t_sequential_call(x):
    return _SEQ(x)


@torch_case(lambda: (T(3, 8),), atol=1e-5)
def t_sequential_iterate(x):
    for layer in _SEQ:
        x = layer(x)
    return x, len(_SEQ), _SEQ[0].out_features


@torch_case(lambda: (T(2, 6),), atol=1e-5)
def t_modulelist_iterate(x):
    for i, layer in enumerate(_LIST):
        x = layer(x) + i
    return x + _LIST[-1](x)


@torch_case(lambda: (T(2, 5),), atol=1e-5)
def t_moduledict_iterate(x):
    outs = {}
    for name, m in _DICT.items():
        if name == "c":
            outs[name] = m(x)
        else:
            x = m(x)
    return x, outs, list(_DICT.keys())


@torch_case(lambda: (T(2, 8),), atol=1e-5)
def t_layernorm_gelu_dropout_modules(x):
    return _NORMS(x)


@torch_case(lambda: (T(3, 2, 8),), atol=1e-5)
def t_rmsnorm_silu_modules(x):
    """nn.RMSNorm's forward calls F.rms_norm with its normalized_shape tuple, its weight (a
    parameter, or None without elementwise_affine) and its eps (None: finfo's)."""
    return _RMS(x)


@torch_case(lambda: (T(2, 6),), atol=1e-5)
def t_custom_block_params_buffers(x):
    return _BLOCK(x) + _BLOCK.scale.sum() + _BLOCK.gain.detach().mean()


@torch_case(lambda: (T(2, 3, 6, 6),), atol=1e-5)
def t_conv_batchnorm_eval(x):
    return _BN(x)


@torch_case(lambda: (T(2, 6),), atol=1e-5)
def t_module_named_parameters_loop(x):
    total = x
    for name, p in _BLOCK.named_parameters():
        if name.endswith("bias"):
            total = total + p.detach()
    return total


@torch_case(lambda: (_SEQ, T(3, 8)), atol=1e-5)
def t_module_as_argument(model, x):
    return model(x) + model[0](x).sum()
