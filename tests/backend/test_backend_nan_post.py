"""NaN and inf through the oneDNN steps' eltwise post-ops (backend/step_conv.c,
step_matmul.c: lower_finite). oneDNN 2.6's jit eltwise kernels (relu, gelu, ...) drop NaN,
so a step whose primitive carries one runs eagerly when an operand (source, weights, bias,
residual) holds inf or NaN: each post-op kind with NaN / inf in each operand, convolution
and linear / matmul, static and dynamic=True, against eager with equal_nan; the weights'
finiteness is remembered per weight version (an in-place write is seen); finite operands
still run the fused primitive. The whole file runs again under ONEDNN_MAX_CPU_ISA=AVX2 in
a subprocess."""
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import shapejit
from shapejit import _C
from lowering import close as _close
from lowering import lowering as _lowering
from repo import repo_root

pytestmark = pytest.mark.usefixtures("fresh_shapejit")

NAN, INF = float("nan"), float("inf")


def _stats(made, key):
    return sum(m.stats.get(key, 0) for m in made if isinstance(m, _C.CompiledGraph))


class ConvRelu(nn.Module):
    def __init__(self, mode):
        super().__init__()
        self.mode = mode
        self.conv = nn.Conv2d(8, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x, r):
        h = self.conv(x)
        if self.mode == "bn":
            h = self.bn(h)
        if self.mode == "residual":
            h = h + r
        return F.relu(h)


ACTS = {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
        "tanh": torch.tanh, "sigmoid": torch.sigmoid, "silu": F.silu}


class LinearAct(nn.Module):
    def __init__(self, act):
        super().__init__()
        self.lin = nn.Linear(32, 64)
        self.act = ACTS[act]

    def forward(self, x, r):
        return self.act(self.lin(x))


def _poison(t, val, idx):
    with torch.no_grad():
        t[idx] = val   # in place: bumps t._version


def _check(model, x, r, place, val, widx, dynamic, conv):
    """A finite call (fused, no fallback), then val in operand `place`, then finite again."""
    prefix = "conv" if conv else "matmul"
    backend, made = _lowering()
    fn = shapejit.compile(model, backend=backend, dynamic=dynamic)
    with torch.no_grad():
        _close(fn(x, r), model(x, r))
        assert _stats(made, prefix + "_calls") == 1 and _stats(made, prefix + "_fallbacks") == 0
        assert _stats(made, prefix + "_nonfinite") == 0
        fused = int(_stats(made, prefix + "_fused") > 0)   # dynamic: a residual add stays a kernel
        x2, r2 = x.clone(), r.clone()
        w = model.conv.weight if conv else model.lin.weight
        b = model.conv.bias if conv else model.lin.bias
        saved_w, saved_b = w.detach().clone(), b.detach().clone()
        if place == "source":
            x2[(0,) * x2.dim()] = val
            x2[(-1,) + (1,) * (x2.dim() - 1)] = val
        elif place == "residual":
            r2[0, 3, 4, 4] = val
        elif place == "weight":
            _poison(w, val, widx)
        else:
            _poison(b, val, 2)
        want = model(x2, r2)
        _close(fn(x2, r2), want)
        assert _stats(made, prefix + "_nonfinite") == fused
        with torch.no_grad():
            w.copy_(saved_w)   # in place again: the kept finiteness is refreshed
            b.copy_(saved_b)
        calls = _stats(made, prefix + "_calls")
        _close(fn(x, r), model(x, r))
        assert _stats(made, prefix + "_calls") == calls + 1
        assert _stats(made, prefix + "_nonfinite") == fused


PLACES_CONV = [("source", NAN), ("source", INF), ("source", -INF), ("weight", NAN), ("weight", INF),
               ("bias", NAN), ("bias", -INF)]


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("place,val", PLACES_CONV + [("residual", NAN), ("residual", INF)])
@pytest.mark.parametrize("mode", ["relu", "bn", "residual"])
def test_conv_relu_nonfinite(mode, place, val, dynamic):
    if place == "residual" and mode != "residual":
        pytest.skip("no residual")
    torch.manual_seed(0)
    model = ConvRelu(mode).eval()
    x = torch.randn(2, 8, 12, 12)
    r = torch.randn(2, 16, 12, 12)
    _check(model, x, r, place, val, (3, 2, 1, 1), dynamic, conv=True)


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("place,val", PLACES_CONV)
@pytest.mark.parametrize("act", list(ACTS))
def test_linear_act_nonfinite(act, place, val, dynamic):
    torch.manual_seed(0)
    model = LinearAct(act).eval()
    x = torch.randn(3, 5, 32)
    _check(model, x, torch.zeros(1), place, val, (7, 3), dynamic, conv=False)


@pytest.mark.parametrize("val", [NAN, INF])
def test_matmul_weight_input_and_row(val):
    """relu(x @ w + row) with w and the row as plain tensors (not parameters); a bmm."""
    def f(x, w, row):
        return torch.relu(x @ w + row)

    def g(a, b):
        return torch.sigmoid(torch.bmm(a, b))
    torch.manual_seed(0)
    x, w, row = torch.randn(6, 16), torch.randn(16, 24), torch.randn(24)
    a, b = torch.randn(2, 5, 8), torch.randn(2, 8, 7)
    backend, made = _lowering()
    cf, cg = shapejit.compile(f, backend=backend), shapejit.compile(g, backend=backend)
    _close(cf(x, w, row), f(x, w, row))
    _close(cg(a, b), g(a, b))
    assert _stats(made, "matmul_nonfinite") == 0 and _stats(made, "matmul_fallbacks") == 0
    w2 = w.clone()
    w2[2, 5] = val
    _close(cf(x, w2, row), f(x, w2, row))
    row2 = row.clone()
    row2[4] = val
    _close(cf(x, w, row2), f(x, w, row2))
    b2 = b.clone()
    b2[1, 2, 3] = val
    _close(cg(a, b2), g(a, b2))
    assert _stats(made, "matmul_nonfinite") >= 3


def test_matmul_strided_operands():
    """A row-sliced source and a transposed weight: NaN inside is found, NaN outside the
    slice (not an operand's element) is not."""
    def f(x, w):
        return torch.relu(x[:, :16] @ w.t())

    torch.manual_seed(0)
    x, w = torch.randn(6, 32), torch.randn(24, 16)
    backend, made = _lowering()
    cf = shapejit.compile(f, backend=backend)
    _close(cf(x, w), f(x, w))
    x[2, 20] = NAN   # outside the slice
    _close(cf(x, w), f(x, w))
    assert _stats(made, "matmul_nonfinite") == 0 and _stats(made, "matmul_fallbacks") == 0
    x[3, 15] = NAN
    _close(cf(x, w), f(x, w))
    x[3, 15] = 0.0
    w2 = w.clone()
    w2[20, 7] = -INF
    _close(cf(x, w2), f(x, w2))
    assert _stats(made, "matmul_nonfinite") == 2


def test_linear_affine_posts_stay_fused():
    """x * 2 + 1 after a linear keeps NaN in oneDNN: no scan, no fallback."""
    lin = nn.Linear(16, 8).eval()

    def f(x):
        return lin(x) * 2.0

    x = torch.randn(4, 16)
    x[1, 1] = NAN
    backend, made = _lowering()
    with torch.no_grad():
        _close(shapejit.compile(f, backend=backend)(x), f(x))
    assert _stats(made, "matmul_fallbacks") == 0 and _stats(made, "matmul_nonfinite") == 0


@pytest.mark.skipif(os.environ.get("ONEDNN_MAX_CPU_ISA") == "AVX2", reason="already the AVX2 run")
def test_avx2_subprocess():
    env = dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX2", SHAPEJIT_CPU_TARGET="x86-64-v3", ATEN_CPU_CAPABILITY="avx2")
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", __file__],
                         env=env, capture_output=True, text=True, cwd=repo_root())
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
