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


# ---- grad mode and inference mode: decorators, blocks, module methods --------------------
@torch.inference_mode()
def _infer_scale(x):
    return x * 2 + 1


@torch.inference_mode(mode=False)
def _not_inference(x):
    return x.sigmoid()


@torch.no_grad()
def _frozen_proj(x, w):
    return x @ w


@torch.enable_grad()
def _tracked(x):
    return x.tanh()


class _InferHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 3)

    @torch.inference_mode()
    def forward(self, x):
        return self.fc(x).softmax(-1)


class _Scorer(nn.Module):
    """A module whose helper method (not its forward) is decorated."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Linear(6, 6)

    @torch.no_grad()
    def normalise(self, x):
        return x / x.norm(dim=-1, keepdim=True)

    def forward(self, x):
        return self.emb(self.normalise(x)) + x


with torch.random.fork_rng():
    torch.manual_seed(0)
    _INFER_HEAD = _InferHead().eval()
    _SCORER = _Scorer().eval()


@torch_case(lambda: (T(3, 4, requires_grad=True),))
def t_mech_inference_mode_decorator(x):
    return _infer_scale(x)


@torch_case(lambda: (T(3, 4, requires_grad=True),))
def t_mech_inference_mode_block(x):
    with torch.inference_mode():
        y = x.exp() * 3
    return y, x * 2


@torch_case(lambda: (T(3, 4, requires_grad=True),))
def t_mech_inference_mode_false_inside(x):
    with torch.inference_mode():
        a = x.relu()
        with torch.inference_mode(False):
            b = x * 2
    return a, b, torch.is_grad_enabled()


@torch_case(lambda: (T(2, 5, requires_grad=True),))
def t_mech_inference_mode_false_decorator(x):
    return _not_inference(x) + x


@torch_case(lambda: (T(2, 6),), atol=1e-5)
def t_mech_inference_mode_module_forward(x):
    return _INFER_HEAD(x) * 2


@torch_case(lambda: (T(2, 6, requires_grad=True),), atol=1e-5)
def t_mech_no_grad_module_method(x):
    return _SCORER(x)


@torch_case(lambda: (T(3, 4, requires_grad=True), T(4, 4, requires_grad=True)))
def t_mech_grad_decorators_mixed(x, w):
    with torch.no_grad():
        a = _tracked(x)              # grad on again inside the decorated call
    b = _frozen_proj(x, w)           # grad off inside
    with torch.inference_mode():
        c = _tracked(x)              # enable_grad inside inference mode
    return a, b, c, torch.is_grad_enabled()


@torch_case(lambda: (T(3, 4, requires_grad=True),))
def t_mech_set_grad_enabled_block(x):
    with torch.set_grad_enabled(False):
        y = x * 2
        inside = torch.is_grad_enabled()
    return y, x.exp(), inside


@torch_case(lambda: (T(3, 4, requires_grad=True), False))
def t_mech_set_grad_enabled_flag(x, train):
    with torch.set_grad_enabled(train):
        return (x @ x.T).relu()


@torch_case(lambda: (T(3, 4, requires_grad=True),))
def t_mech_set_grad_enabled_statement(x):
    torch.set_grad_enabled(False)
    frozen = x.sin()
    torch.set_grad_enabled(True)
    return frozen, x.cos()


@with_breaks("torch", lambda: (T(3, 4),), graphs=1, breaks=1)
def t_mech_inference_mode_is_inference(x):
    with torch.inference_mode():
        y = x * 2
    return y + 1, y.is_inference()


# ---- parametrizations -------------------------------------------------------------------
class _Symmetric(nn.Module):
    """A user parametrization: the weight is read as a symmetric matrix."""

    def forward(self, X):
        return X.triu() + X.triu(1).transpose(-1, -2)


class _PositiveScale(nn.Module):
    def forward(self, s):
        return nn.functional.softplus(s) + 1e-3


def _build_parametrized():
    P = nn.utils.parametrizations
    with torch.random.fork_rng():
        torch.manual_seed(0)
        wn = P.weight_norm(nn.Linear(6, 5)).eval()
        sn = P.spectral_norm(nn.Linear(6, 5)).eval()
        orth = P.orthogonal(nn.Linear(5, 5)).eval()
        sym = nn.Linear(5, 5)
        nn.utils.parametrize.register_parametrization(sym, "weight", _Symmetric())
        sym.eval()
        chained = nn.Linear(5, 5)
        nn.utils.parametrize.register_parametrization(chained, "weight", _Symmetric())
        nn.utils.parametrize.register_parametrization(chained, "bias", _PositiveScale())
        chained.eval()
        conv = P.weight_norm(nn.Conv2d(3, 4, 3, padding=1), dim=0).eval()
    return wn, sn, orth, sym, chained, conv


_WN, _SN, _ORTH, _SYM, _CHAINED, _WN_CONV = _build_parametrized()


@torch_case(lambda: (T(3, 6),), atol=1e-5)
def t_mech_weight_norm_parametrization(x):
    return _WN(x).relu()


@torch_case(lambda: (T(3, 6),), atol=1e-5)
def t_mech_spectral_norm_eval(x):
    return _SN(x)


@torch_case(lambda: (T(3, 5),), atol=1e-5)
def t_mech_orthogonal_parametrization(x):
    return _ORTH(x)


@torch_case(lambda: (T(3, 5),), atol=1e-5)
def t_mech_register_parametrization_user(x):
    return _SYM(x), _SYM.weight.sum()


@torch_case(lambda: (T(3, 5),), atol=1e-5)
def t_mech_parametrized_weight_and_bias(x):
    return _CHAINED(x)


@torch_case(lambda: (T(2, 3, 6, 6),), atol=1e-5)
def t_mech_weight_norm_conv(x):
    return _WN_CONV(x)


# ---- torch.jit helpers and compile-time queries ------------------------------------------
@torch.jit.script_if_tracing
def _scripted_when_tracing(x, k: int):
    return x.roll(k, dims=-1) + x


@torch_case(lambda: (T(3, 4),))
def t_mech_jit_annotate(x):
    parts = torch.jit.annotate(list, [])
    for i in range(3):
        parts.append(x * i)
    return torch.stack(parts).sum(0)


@torch_case(lambda: (T(3, 4),))
def t_mech_script_if_tracing(x):
    return _scripted_when_tracing(x, 1) * 2


@torch_case(lambda: (T(3, 4),))
def t_mech_jit_is_scripting_tracing(x):
    if torch.jit.is_scripting() or torch.jit.is_tracing():
        return x.clone()
    if torch._C._get_tracing_state() is not None:
        return x.clone()
    return x.softmax(-1)


@torch_case(lambda: (T(3, 4),))
def t_mech_is_compiling_skips_check(x):
    # a data-dependent sanity check that only runs eagerly
    if not torch.compiler.is_compiling():
        assert not torch.isnan(x).any()
    if not torch._dynamo.is_compiling():
        assert x.dim() == 2
    return x.exp() / 2


# ---- torch.autograd.Function -----------------------------------------------------------
class _ScaledSquare(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        ctx.save_for_backward(x)
        ctx.k = k
        return x * x * k

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return 2 * ctx.k * x * g, None


class _TopIndex(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        idx = x.argmax(-1)
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(idx)
        return x * 2, idx

    @staticmethod
    def backward(ctx, g, g_idx):
        return g * 2


class _RoundSTE(torch.autograd.Function):
    """Straight-through rounding, written in the setup_context style."""

    @staticmethod
    def forward(x, scale):
        return torch.round(x * scale) / scale

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.set_materialize_grads(False)
        ctx.scale = inputs[1]

    @staticmethod
    def backward(ctx, g):
        return g, None


class _FakeQuantLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)

    def forward(self, x):
        return self.fc(_RoundSTE.apply(x, 8.0))


with torch.random.fork_rng():
    torch.manual_seed(0)
    _FQ = _FakeQuantLinear().eval()


@torch_case(lambda: (T(3, 4),))
def t_mech_autograd_fn_no_grad(x):
    with torch.no_grad():
        y = _ScaledSquare.apply(x + 1, 2.0)
    return y.sum(-1)


@torch_case(lambda: (T(3, 5),))
def t_mech_autograd_fn_non_differentiable(x):
    with torch.no_grad():
        y, idx = _TopIndex.apply(x.tanh())
    return y, idx


@torch_case(lambda: (T(3, 6),), atol=1e-5)
def t_mech_autograd_fn_setup_context_inference(x):
    with torch.inference_mode():
        return _FQ(x)


@torch_case(lambda: (T(3, 4, requires_grad=True),))
def t_mech_autograd_fn_under_grad(x):
    y = _ScaledSquare.apply(x + 1, 2.0)
    return y.sum(-1) * 3


@torch_case(lambda: (T(3, 6, requires_grad=True),), atol=1e-5)
def t_mech_autograd_fn_ste_module_grad(x):
    return _FQ(x).relu()


@torch_case(lambda: (T(3, 5, requires_grad=True),))
def t_mech_autograd_fn_two_outputs_grad(x):
    y, idx = _TopIndex.apply(x.sin())
    return y + 1, idx


# ---- recurrent layers -------------------------------------------------------------------
class _TextEncoder(nn.Module):
    """Embedding, a 2-layer LSTM over the tokens and a head on the last hidden state."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 8)
        self.rnn = nn.LSTM(8, 12, num_layers=2, batch_first=True)
        self.head = nn.Linear(12, 3)

    def forward(self, tokens):
        out, (h, c) = self.rnn(self.emb(tokens))
        return self.head(h[-1]), out.mean(1)


class _ScaledLSTM(nn.LSTM):
    """An LSTM subclass whose forward post-processes the base forward's output."""

    def forward(self, x):
        out, (h, c) = super().forward(x)
        return out * 0.5, h


def _build_rnns():
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return (nn.LSTM(4, 6, batch_first=True).eval(),
                nn.LSTM(4, 6, num_layers=2).eval(),
                nn.GRU(4, 5).eval(),
                nn.GRU(4, 5, num_layers=2, batch_first=True, bidirectional=True).eval(),
                nn.RNN(4, 6, nonlinearity="relu", bidirectional=True).eval(),
                nn.LSTM(4, 6, proj_size=3).eval(),
                _TextEncoder().eval(),
                nn.LSTMCell(4, 6).eval(),
                nn.GRUCell(4, 6).eval(),
                _ScaledLSTM(4, 6).eval())


(_LSTM_BF, _LSTM2, _GRU, _GRU_BI, _RNN_BI, _LSTM_PROJ, _ENCODER, _LSTM_CELL, _GRU_CELL,
 _SCALED_LSTM) = _build_rnns()


@torch_case(lambda: (T(2, 7, 4),), atol=1e-5)
def t_mech_lstm_batch_first(x):
    out, (h, c) = _LSTM_BF(x)
    return out.relu(), h, c


@torch_case(lambda: (T(7, 2, 4), T(2, 2, 6), T(2, 2, 6)), atol=1e-5)
def t_mech_lstm_initial_state(x, h0, c0):
    out, (h, c) = _LSTM2(x, (h0, c0))
    return out[-1] + h[-1], c


@torch_case(lambda: (T(6, 3, 4, requires_grad=True),), atol=1e-5)
def t_mech_gru_no_grad(x):
    with torch.no_grad():
        out, h = _GRU(x)
    return out * 2, h


@torch_case(lambda: (T(3, 6, 4), T(4, 3, 5)), atol=1e-5)
def t_mech_gru_bidirectional_state(x, h0):
    out, h = _GRU_BI(x, h0)
    return out.sum(1), h


@torch_case(lambda: (T(5, 2, 4),), atol=1e-5)
def t_mech_rnn_relu_bidirectional(x):
    out, h = _RNN_BI(x)
    return out.tanh(), h.sum(0)


@torch_case(lambda: (T(7, 4),), atol=1e-5)
def t_mech_lstm_unbatched_proj(x):
    out, (h, c) = _LSTM_PROJ(x)
    return out, h, c


@torch_case(lambda: (T(7, 2, 4), T(1, 2, 3), T(1, 2, 6)), atol=1e-5)
def t_mech_torch_lstm_call(x, h0, c0):
    w = _LSTM_PROJ._flat_weights
    out, h, c = torch.lstm(x, (h0, c0), w, True, 1, 0.0, False, False, False)
    return out, h + 1, c


@torch_case(lambda: (torch.randint(0, 20, (2, 9)),), atol=1e-5)
def t_mech_lstm_text_encoder(tokens):
    with torch.inference_mode():
        return _ENCODER(tokens)


class _GatedScale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        if ctx.needs_input_grad[1]:
            ctx.save_for_backward(x)
        return x * w

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return None, (g * x).sum(0)


@torch_case(lambda: (T(3, 4), T(4, requires_grad=True)))
def t_mech_autograd_fn_needs_input_grad(x, w):
    with torch.no_grad():
        return _GatedScale.apply(x, w).sum(-1)


class _PassThrough(torch.autograd.Function):
    """Returns its input as is (apply hands back a view of it) and a scaled copy."""

    @staticmethod
    def forward(ctx, x):
        return x, x * 0.5

    @staticmethod
    def backward(ctx, g, g_half):
        return g + 0.5 * g_half


class _DoubleInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.mark_dirty(x)
        return x.mul_(2)

    @staticmethod
    def backward(ctx, g):
        return g * 2


@torch_case(lambda: (T(3, 4),))
def t_mech_autograd_fn_returns_input(x):
    with torch.no_grad():
        same, half = _PassThrough.apply(x)
    return same, half


@torch_case(lambda: (T(3, 4),), mutates=True)
def t_mech_autograd_fn_mark_dirty(x):
    with torch.no_grad():
        y = _DoubleInPlace.apply(x)
    return y


@torch_case(lambda: (T(4, 2, 4), T(2, 6), T(2, 6)), atol=1e-5)
def t_mech_lstm_cell_loop(x, h, c):
    outs = []
    for t in range(x.shape[0]):
        h, c = _LSTM_CELL(x[t], (h, c))
        outs.append(h)
    return torch.stack(outs), c


@torch_case(lambda: (T(3, 2, 4),), atol=1e-5)
def t_mech_gru_cell_zero_state(x):
    h = torch.zeros(x.shape[1], 6)
    for t in range(x.shape[0]):
        h = _GRU_CELL(x[t], h)
    return h


@torch_case(lambda: (T(5, 2, 4),), atol=1e-5)
def t_mech_lstm_subclass_super_forward(x):
    out, h = _SCALED_LSTM(x)
    return out.sum(0), h
