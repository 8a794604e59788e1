"""The cpu backend's oneDNN convolution, pooling and batch-norm steps (backend/step_conv.c,
dnnl_api.c, primcache.c): conv1d / conv2d, max / avg / adaptive avg pooling and batch norm
(inference) on float32 torch tensors against eager over random shapes (odd sizes, batch
1, stride / padding / dilation / groups, with and without bias), the folds after a
convolution (batch norm, relu, residual add, in place or not), a small CNN under
dynamic=True (one graph; primitives created per new shape only), and transformers'
ResNetModel from a tiny config."""
import random

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import shapejit
from shapejit import _C
from lowering import close as _close_values
from lowering import lowering as _lowering   # a backend that lowers and keeps what it made

pytestmark = pytest.mark.usefixtures("fresh_shapejit")

RTOL, ATOL = 1e-4, 1e-5   # the models
# The convolutions: a result is a float32 sum of up to a few hundred products of
# N(0, 1) values, partial sums of a few units, and oneDNN and eager add them in different
# orders (by ISA: oneDNN's AVX2 kernels on an AMD Zen 3 gave 1.3e-6 off at an output of
# 0.024 for a 36-term sum), so the absolute tolerance is 1e-5 rather than
# support/lowering.py's 1e-6; a wrong tap, bias or fold is off by far more.
CONV_RTOL, CONV_ATOL = 1e-5, 1e-5


def _close(got, want):
    """As eager, and laid out as eager (contiguous NCHW, or what an eager fallback gives)."""
    _close_values(got, want, CONV_RTOL, CONV_ATOL)
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        assert g.is_contiguous() == w.is_contiguous()


def _stats(made, key):
    return sum(m.stats.get(key, 0) for m in made if isinstance(m, _C.CompiledGraph))


def _run(fn, *args, dynamic=None):
    backend, made = _lowering()
    got = shapejit.compile(fn, backend=backend, dynamic=dynamic)(*args)
    _close(got, fn(*args))
    return made


# ----------------------------------------------------------------- convolution ----

def _conv_case(rng):
    groups = rng.choice([1, 1, 2, 3])
    cin, cout = groups * rng.randint(1, 4), groups * rng.randint(1, 4)
    k = (rng.randint(1, 4), rng.randint(1, 4))
    stride = rng.choice([1, 2, (1, 2), (3, 1)])
    dilation = rng.choice([1, 2, (2, 1)])
    padding = rng.choice([0, 1, (2, 0), "valid"])
    n = rng.choice([1, 1, 2, 3])
    h, w = rng.randint(7, 17) | 1, rng.randint(6, 15)
    bias = rng.random() < 0.6
    return dict(n=n, cin=cin, cout=cout, k=k, stride=stride, dilation=dilation, padding=padding, groups=groups,
                h=h, w=w, bias=bias)


@pytest.mark.parametrize("seed", range(24))
def test_conv2d_random(seed):
    c = _conv_case(random.Random(seed))
    torch.manual_seed(seed)
    x = torch.randn(c["n"], c["cin"], c["h"], c["w"])
    wt = torch.randn(c["cout"], c["cin"] // c["groups"], *c["k"])
    b = torch.randn(c["cout"]) if c["bias"] else None

    def f(x, wt, b):
        return F.conv2d(x, wt, b, c["stride"], c["padding"], c["dilation"], c["groups"])

    made = _run(f, x, wt, b)
    assert _stats(made, "conv_calls") == 1 and _stats(made, "conv_fallbacks") == 0


@pytest.mark.parametrize("k,dil", [(3, 1), (4, 1), (3, 2), (2, 3)])
def test_conv2d_same_padding(k, dil):
    x, wt, b = torch.randn(2, 3, 9, 8), torch.randn(5, 3, k, k), torch.randn(5)
    made = _run(lambda x, wt, b: F.conv2d(x, wt, b, padding="same", dilation=dil), x, wt, b)
    assert _stats(made, "conv_calls") == 1


@pytest.mark.parametrize("stride,padding,dilation,groups,bias", [
    (1, 0, 1, 1, True), (2, 1, 1, 1, False), (1, 2, 2, 2, True), (1, "same", 2, 4, True)])
def test_conv1d(stride, padding, dilation, groups, bias):
    x = torch.randn(3, 8, 19)
    wt = torch.randn(12, 8 // groups, 3)
    b = torch.randn(12) if bias else None
    made = _run(lambda x, wt, b: F.conv1d(x, wt, b, stride, padding, dilation, groups), x, wt, b)
    assert _stats(made, "conv_calls") == 1 and _stats(made, "conv_fallbacks") == 0


def test_conv_unbatched_and_depthwise():
    x, wt, b = torch.randn(6, 13, 11), torch.randn(6, 1, 3, 3), torch.randn(6)
    made = _run(lambda x, wt, b: F.conv2d(x, wt, b, padding=1, groups=6), x, wt, b)
    assert _stats(made, "conv_calls") == 1


def test_conv_relu_folds():
    x, wt, b = torch.randn(1, 4, 15, 9), torch.randn(6, 4, 3, 3), torch.randn(6)
    made = _run(lambda x, wt, b: torch.relu(F.conv2d(x, wt, b, padding=1)), x, wt, b)
    assert _stats(made, "conv_fused") == 1 and _stats(made, "steps") == 1


def test_conv_bn_relu_residual_folds():
    """conv -> batch_norm -> += residual -> relu_: one primitive (post-ops)."""
    torch.manual_seed(1)
    x, wt, r = torch.randn(2, 5, 9, 11), torch.randn(5, 5, 3, 3), torch.randn(2, 5, 9, 11)
    m, v, g, bb = torch.randn(5), torch.rand(5) + 0.5, torch.randn(5), torch.randn(5)

    def f(x, wt, r, m, v, g, bb):
        y = F.conv2d(x, wt, None, 1, 1)
        y = F.batch_norm(y, m, v, g, bb, False, 0.1, 1e-5)
        y += r
        return y.relu_()

    made = _run(f, x, wt, r, m, v, g, bb)
    assert _stats(made, "conv_fused") == 3 and _stats(made, "steps") == 1
    assert _stats(made, "conv_fallbacks") == 0

    def g2(x, wt, r):   # residual first, not in place
        return F.relu(r + F.conv2d(x, wt, padding=1))
    made = _run(g2, x, wt, r)
    assert _stats(made, "conv_fused") == 2


def test_folded_bn_follows_its_stats():
    """A batch norm after a convolution is folded into its weights and bias: a change of
    the running stats (or the affine weight) between calls refolds them; a zero variance
    with eps=0 (an infinite scale) stays a post-op, as eager."""
    torch.manual_seed(5)
    x, wt, b = torch.randn(2, 4, 10, 10), torch.randn(8, 4, 3, 3), torch.randn(8)
    m, v, g, bb = torch.randn(8), torch.rand(8) + 0.5, torch.randn(8), torch.randn(8)

    def f(x, wt, b, m, v, g, bb, eps):
        return F.relu(F.batch_norm(F.conv2d(x, wt, b, padding=1), m, v, g, bb, False, 0.1, eps))

    backend, made = _lowering()
    cf = shapejit.compile(f, backend=backend)
    _close(cf(x, wt, b, m, v, g, bb, 1e-5), f(x, wt, b, m, v, g, bb, 1e-5))
    _close(cf(x, wt, b, m, v, g, bb, 1e-5), f(x, wt, b, m, v, g, bb, 1e-5))
    assert made[0].stats["conv_weight_reorders"] == 1 and made[0].stats["conv_fused"] == 2
    v.mul_(2.0)
    g[3] = -g[3]
    _close(cf(x, wt, b, m, v, g, bb, 1e-5), f(x, wt, b, m, v, g, bb, 1e-5))
    assert made[0].stats["conv_weight_reorders"] == 2
    v0 = v.clone()
    v0[2] = 0.0
    x0 = x.clone()
    x0[:, :, 4:, :] = 0.0
    got, want = cf(x0, wt, None, m, v0, g, bb, 0.0), f(x0, wt, None, m, v0, g, bb, 0.0)
    torch.testing.assert_close(got, want, equal_nan=True)
    assert made[-1].stats["conv_fallbacks"] == 0


def test_kept_weights_follow_writes():
    """Reordered weights are kept across calls, and redone after an in-place write or for
    another weight tensor."""
    torch.manual_seed(3)
    x, wt = torch.randn(2, 16, 12, 12), torch.randn(32, 16, 3, 3)
    f = lambda x, wt: F.conv2d(x, wt, padding=1)   # noqa: E731
    backend, made = _lowering()
    g = shapejit.compile(f, backend=backend)
    _close(g(x, wt), f(x, wt))
    _close(g(x, wt), f(x, wt))
    first = made[0].stats["conv_weight_reorders"]
    assert first == 1   # brgconv reads blocked weights
    with torch.no_grad():
        wt.mul_(-2.0)
    _close(g(x, wt), f(x, wt))
    w2 = torch.randn(32, 16, 3, 3)
    _close(g(x, w2), f(x, w2))
    assert made[0].stats["conv_weight_reorders"] == 3


def test_shared_result_is_not_folded():
    x, wt = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)

    def f(x, wt):
        y = F.conv2d(x, wt)
        return torch.relu(y), y

    made = _run(f, x, wt)
    assert _stats(made, "conv_fused") == 0


@pytest.mark.parametrize("pads, stride, padding, groups", [
    ((0, 1, 0, 1), 2, 0, 6), ((1, 1, 1, 1), 1, 0, 6), ((0, 0, 0, 0), 1, 0, 1), ((2, 0, 1, 3), 2, 1, 3),
    ((1, 2), 1, 0, 1), ((0, 1, 0, 1), 2, 0, 1),
])
def test_zero_pad_folds_into_conv(pads, stride, padding, groups):
    """A constant-zero F.pad read only by a convolution becomes its padding: one step."""
    torch.manual_seed(4)
    x, wt = torch.randn(2, 6, 9, 11), torch.randn(6, 6 // groups, 3, 3)
    f = lambda x, wt: F.relu(F.conv2d(F.pad(x, pads, "constant", 0.0), wt, None, stride, padding, 1, groups))  # noqa: E731
    made = _run(f, x, wt)
    assert _stats(made, "steps") == 1 and _stats(made, "conv_fallbacks") == 0
    x1, w1 = torch.randn(2, 4, 13), torch.randn(5, 4, 3)   # conv1d, value=None
    made = _run(lambda x, w: F.conv1d(F.pad(x, (0, 2)), w, stride=2), x1, w1)
    assert _stats(made, "steps") == 1


def test_pad_kept_when_read_elsewhere_or_not_zero():
    x, wt = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)

    def shared(x, wt):
        p = F.pad(x, (1, 1, 1, 1))
        return F.conv2d(p, wt), p

    made = _run(shared, x, wt)
    assert _stats(made, "steps") == 2
    made = _run(lambda x, wt: F.conv2d(F.pad(x, (1, 1, 1, 1), value=0.5), wt), x, wt)
    assert _stats(made, "steps") == 2
    made = _run(lambda x, wt: F.conv2d(F.pad(x, (1, 1, 1, 1), mode="reflect"), wt), x, wt)
    assert _stats(made, "steps") == 2
    made = _run(lambda x, wt: F.conv2d(F.pad(x, (-1, 1, 0, 1)), wt), x, wt)   # a crop
    assert _stats(made, "steps") == 2


def test_broadcast_residual_is_not_folded():
    x, wt = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)
    made = _run(lambda x, wt, r: F.conv2d(x, wt) + r, x, wt, torch.randn(4, 1, 1))
    assert _stats(made, "conv_fused") == 0   # not the same shape: a kernel after the conv


def test_requires_grad_stays_eager():
    x, wt = torch.randn(1, 3, 8, 8), torch.randn(4, 3, 3, 3, requires_grad=True)
    backend, made = _lowering()
    out = shapejit.compile(lambda x, wt: F.conv2d(x, wt), backend=backend)(x, wt)
    assert out.requires_grad and out.grad_fn is not None
    assert _stats(made, "conv_steps") == 0


def test_float64_stays_eager():
    x, wt = torch.randn(1, 3, 8, 8, dtype=torch.float64), torch.randn(4, 3, 3, 3, dtype=torch.float64)
    backend, made = _lowering()
    got = shapejit.compile(lambda x, wt: F.conv2d(x, wt), backend=backend)(x, wt)
    torch.testing.assert_close(got, F.conv2d(x, wt))
    assert _stats(made, "conv_steps") == 0


# ------------------------------------------------------------------- pooling ----

POOLS = [
    lambda x: F.max_pool2d(x, 2),
    lambda x: F.max_pool2d(x, 3, 2, 1),
    lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True),
    lambda x: F.max_pool2d(x, (2, 3), (1, 2), (1, 0), dilation=(2, 1)),   # eager: oneDNN's is ref:any
    lambda x: F.max_pool2d(x, 2, ceil_mode=True),
    lambda x: F.avg_pool2d(x, 2),
    lambda x: F.avg_pool2d(x, 3, 2, 1),
    lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
    lambda x: F.avg_pool2d(x, 2, ceil_mode=True),
    lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
    lambda x: F.avg_pool2d(x, (3, 2), (2, 1), (1, 1), ceil_mode=True),   # may run eagerly
    lambda x: F.adaptive_avg_pool2d(x, 1),
    lambda x: F.adaptive_avg_pool2d(x, (1, 1)),
    lambda x: F.adaptive_avg_pool2d(x, (3, None)),
]


@pytest.mark.parametrize("i", range(len(POOLS)))
@pytest.mark.parametrize("shape", [(2, 3, 11, 13), (1, 5, 9, 9), (3, 2, 12, 7)])
def test_pooling(i, shape):
    torch.manual_seed(i)
    x = torch.randn(*shape)
    made = _run(POOLS[i], x)
    assert _stats(made, "conv_steps") == 1
    if i not in (3, 10, 13):
        assert _stats(made, "conv_fallbacks") == 0


def test_adaptive_uneven_bins_run_eagerly():
    made = _run(lambda x: F.adaptive_avg_pool2d(x, (4, 3)), torch.randn(1, 2, 9, 7))
    assert _stats(made, "conv_fallbacks") == 1


# ---------------------------------------------------------------- batch norm ----

@pytest.mark.parametrize("shape", [(2, 5, 7, 9), (1, 3, 11), (4, 6), (3, 1, 5, 5)])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm(shape, affine):
    torch.manual_seed(len(shape))
    c = shape[1]
    x, m, v = torch.randn(*shape), torch.randn(c), torch.rand(c) + 0.1
    g, b = (torch.randn(c), torch.randn(c)) if affine else (None, None)
    made = _run(lambda x, m, v, g, b: F.batch_norm(x, m, v, g, b, False, 0.1, 1e-3), x, m, v, g, b)
    # (N, C): eager's native_batch_norm, cheaper there than a oneDNN primitive
    assert _stats(made, "conv_calls") == (0 if len(shape) == 2 else 1)
    made = _run(lambda x, m, v, g, b: F.relu(F.batch_norm(x, m, v, g, b)), x, m, v, g, b)
    assert _stats(made, "conv_fused") == (0 if len(shape) == 2 else 1) and _stats(made, "conv_fallbacks") == 0


# ------------------------------------------------------------------- modules ----

class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 24, 3, padding=1), nn.BatchNorm2d(24), nn.ReLU(inplace=True),
            nn.AvgPool2d(2, ceil_mode=True),
            nn.Conv2d(24, 32, 3, stride=2, padding=1, groups=4), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        return self.fc(torch.flatten(self.features(x), 1))


def _randomize_bn(mod):
    with torch.no_grad():
        for m in mod.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.normal_()
                m.running_var.uniform_(0.5, 2.0)
                m.weight.normal_()
                m.bias.normal_()


def test_small_cnn_dynamic():
    """One graph over batch and image sizes; each new shape creates primitives, a repeated
    shape creates none."""
    torch.manual_seed(0)
    mod = SmallCNN().eval()
    _randomize_bn(mod)
    backend, made = _lowering()
    cmod = shapejit.compile(mod, backend=backend, dynamic=True)
    # batch >= 2 and H != W from the first call on: like torch.compile, a size of 1 and two
    # equal sizes are specialised (a recompile, not this step's business)
    shapes = [(2, 3, 16, 20), (3, 3, 17, 23), (5, 3, 32, 29), (2, 3, 16, 20), (3, 3, 17, 23)]
    created = []
    with torch.no_grad():
        for s in shapes:
            before = _C._cg_primcache_info()["created"]
            x = torch.randn(*s)
            _close(cmod(x), mod(x))
            after = _C._cg_primcache_info()["created"]
            created.append(sum(after[k] - before[k] for k in ("conv", "pool", "batch_norm")))
    assert len(made) == 1 and shapejit.stats()["graphs"] == 1
    assert created[0] > 0 and created[1] > 0 and created[2] > 0
    assert created[3] == 0 and created[4] == 0   # shapes seen before: cache hits only
    st = made[0].stats
    assert st["conv_fallbacks"] == 0 and st["conv_fused"] == 5   # bn+relu twice, relu once
    assert st["conv_steps"] == 6 and st["matmul_steps"] == 1


@pytest.mark.slow
def test_transformers_resnet():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32, 48], depths=[1, 2, 1],
                                    layer_type="basic")
    torch.manual_seed(0)
    model = transformers.ResNetModel(cfg).eval()
    _randomize_bn(model)
    backend, made = _lowering()
    cmod = shapejit.compile(model, backend=backend, dynamic=True)
    with torch.no_grad():
        for s in [(2, 3, 32, 40), (3, 3, 45, 37)]:
            x = torch.randn(*s)
            got, want = cmod(x), model(x)
            torch.testing.assert_close(got.last_hidden_state, want.last_hidden_state, rtol=RTOL, atol=ATOL)
            torch.testing.assert_close(got.pooler_output, want.pooler_output, rtol=RTOL, atol=ATOL)
    assert shapejit.stats()["graphs"] == 1
    assert _stats(made, "conv_fallbacks") == 0 and _stats(made, "conv_steps") >= 8
    assert _stats(made, "eager_fallbacks") == 0
