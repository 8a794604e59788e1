"""torch mechanisms around the ops: grad-mode and inference-mode decorators and blocks,
torch.compiler.disable, autograd.Function, parametrizations, torch.jit helpers and the
recurrent modules (nn.LSTM / nn.GRU / nn.RNN)."""
import torch
import torch.nn as nn

from ._base import T, torch_case, with_breaks


# ---- torch.compiler.disable / torch._dynamo.disable ---------------------------------------
def _log_stats(x):
    # runs eagerly: reads data, which capture would break on
    return x * (x.abs().max().item() + 1.0)


_logged = torch.compiler.disable(_log_stats)


@torch._dynamo.disable
def _eager_clip(x):
    return x.clamp(-0.5, 0.5)


def _scale(x):
    return x * 2


@torch.compiler.disable(recursive=False)
def _shallow(x):
    return _scale(x) + 1


@with_breaks("torch", lambda: (T(3, 4),), graphs=2, breaks=1)
def t_mech_disable_call_wrapped(x):
    y = x.sin()
    z = _logged(y)
    return z.cos()


@with_breaks("torch", lambda: (T(3, 4),), graphs=2, breaks=1)
def t_mech_dynamo_disable_decorator(x):
    return _eager_clip(x * 3).exp()


@with_breaks("torch", lambda: (T(3, 4),), graphs=2, breaks=1)
def t_mech_disable_made_in_frame(x):
    return torch.compiler.disable(_log_stats, recursive=False)(x + 1) - 1


@with_breaks("torch", lambda: (T(2, 5),), graphs=3, breaks=1)
def t_mech_disable_nonrecursive_inner_compiles(x):
    return _shallow(x.tanh()) * x


@torch.compiler.disable
def _deep(x):
    return _scale(x) + 1


@with_breaks("torch", lambda: (T(2, 5),), graphs=2, breaks=1)
def t_mech_disable_recursive_inner_eager(x):
    return _deep(x.tanh()) * x
