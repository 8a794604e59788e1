"""Channels-last operands of the cpu backend's convolution, pooling and batch-norm steps
(backend/step_conv.c, dnnl_api.c's NHWC descs, layout.c's channels-last rule): sources laid
out channels-last (`.to(memory_format=torch.channels_last)`, an NHWC tensor permuted, as
ConvNeXt's layer norms leave them), the layouts torch calls ambiguous (one channel, 1x1
pixels), channels-last weights, folded batch norm / relu / residual, pooling and batch norm.
Every result is compared with eager in value and in strides (eager gives a channels-last
result for these), and the step must run (no eager fallback) wherever oneDNN can."""
import os
import random
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import shapejit
from shapejit import _C
from lowering import close as _close_values
from lowering import lowering as _lowering
from test_backend_conv_layout import _bn as _bn_stats   # an eval batch norm with random statistics

pytestmark = pytest.mark.usefixtures("fresh_shapejit")

CL = torch.channels_last


def _stats(made, key):
    return sum(m.stats.get(key, 0) for m in made if isinstance(m, _C.CompiledGraph))


def _same(got, want):
    """Equal values, and the strides eager gives (size-1 dims included)."""
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want):
        _close_values(g, w)
        assert g.stride() == w.stride(), (g.shape, g.stride(), w.stride())


def _run(fn, *args):
    backend, made = _lowering()
    compiled = shapejit.compile(fn, backend=backend)
    for _ in range(2):   # the second call runs the primitive the first one made
        _same(compiled(*args), fn(*args))
    return made


def _nhwc(n, c, h, w):
    """An NCHW view of a contiguous NHWC tensor (what permute(0, 3, 1, 2) leaves)."""
    return torch.randn(n, h, w, c).permute(0, 3, 1, 2)


def _layouts(n, c, h, w):
    return {"rowmajor": torch.randn(n, c, h, w),
            "to_cl": torch.randn(n, c, h, w).to(memory_format=CL),
            "permuted": _nhwc(n, c, h, w)}


@pytest.mark.parametrize("seed", range(16))
@pytest.mark.parametrize("layout", ["rowmajor", "to_cl", "permuted"])
def test_conv2d_layouts(seed, layout):
    rng = random.Random(seed)
    groups = rng.choice([1, 1, 2])
    cin, cout = groups * rng.randint(1, 5), groups * rng.randint(1, 5)
    k = rng.choice([(1, 1), (3, 3), (2, 3), (7, 7)])
    stride = rng.choice([1, 2])
    padding = rng.choice([0, 1, 3])
    n, h, w = rng.choice([1, 2, 3]), rng.randint(7, 13), rng.randint(7, 13)
    x = _layouts(n, cin, h, w)[layout]
    wt = torch.randn(cout, cin // groups, *k) * 0.3
    b = torch.randn(cout) if rng.random() < 0.6 else None
    made = _run(lambda x, wt, b: F.conv2d(x, wt, b, stride=stride, padding=padding, groups=groups), x, wt, b)
    assert _stats(made, "conv_fallbacks") == 0 and _stats(made, "conv_calls") == 2


def test_depthwise_7x7_channels_last():
    """ConvNeXt's depthwise convolution on its layer norm's channels-last result."""
    x = _nhwc(4, 64, 16, 16)
    wt, b = torch.randn(64, 1, 7, 7) * 0.1, torch.randn(64)
    made = _run(lambda x, wt, b: F.conv2d(x, wt, b, padding=3, groups=64), x, wt, b)
    assert _stats(made, "conv_fallbacks") == 0


@pytest.mark.parametrize("shape", [(2, 1, 6, 6), (2, 4, 1, 1), (1, 4, 1, 5), (3, 1, 1, 1), (1, 3, 5, 1)])
def test_ambiguous_layouts_follow_torch(shape):
    """One channel or 1x1 pixels: the same memory is row-major and channels-last; torch
    decides by the strides' order, and so must the step."""
    n, c, h, w = shape
    wt = torch.randn(3, c, 1, 1)
    xs = [torch.randn(shape), torch.randn(shape).to(memory_format=CL), _nhwc(n, c, h, w),
          torch.randn(n, w, h, c).permute(0, 3, 2, 1)]
    for x in xs:
        _run(lambda x, wt: F.conv2d(x, wt), x, wt)


@pytest.mark.parametrize("groups", [1, 2, 4])
@pytest.mark.parametrize("k", [1, 3])
def test_channels_last_weights(groups, k):
    """`model.to(memory_format=torch.channels_last)` lays the weights out OHWI: read as
    they are (GOHWI grouped), and the result is channels-last whatever the source."""
    w = (torch.randn(8, 8 // groups, k, k) * 0.3).to(memory_format=CL)
    for x in (torch.randn(2, 8, 9, 9), torch.randn(2, 8, 9, 9).to(memory_format=CL)):
        made = _run(lambda x, wt: F.conv2d(x, wt, padding=k // 2, groups=groups), x, w)
        assert _stats(made, "conv_fallbacks") == 0


def test_channels_last_module_with_folds():
    """A whole block converted with .to(memory_format=torch.channels_last): weights and
    batch-norm folds in OHWI."""
    conv = nn.Conv2d(6, 12, 3, padding=1, bias=False).to(memory_format=CL)
    bn = _bn(12, 5)
    x = torch.randn(2, 6, 10, 10).to(memory_format=CL)
    with torch.no_grad():
        made = _run(lambda x: torch.relu(bn(conv(x))), x)
    assert _stats(made, "conv_fallbacks") == 0 and _stats(made, "conv_fused") >= 2


def test_sources_dense_in_another_order_than_torch_names():
    """A batch-1 source whose memory is NHWC but whose batch stride makes torch call it
    row-major (Segformer's (1, HW, C).transpose(1, 2).reshape(1, C, H, W)): read as NHWC,
    the result row-major as eager's; conv1d over (B, L, C).transpose(1, 2): read as NWC."""
    torch.manual_seed(0)
    xb = torch.randn(1, 80, 8).transpose(1, 2).reshape(1, 8, 8, 10)
    made = _run(lambda x, wt: F.conv2d(x, wt, padding=1), xb, torch.randn(4, 8, 3, 3) * 0.3)
    assert _stats(made, "conv_fallbacks") == 0
    xt = torch.randn(2, 20, 8).transpose(1, 2)
    made = _run(lambda x, wt, b: F.conv1d(x, wt, b, padding=1, stride=2), xt, torch.randn(6, 8, 3) * 0.3,
                torch.randn(6))
    assert _stats(made, "conv_fallbacks") == 0


@pytest.mark.parametrize("shape", [(2, 1, 4, 4), (2, 8, 1, 1), (3, 8, 1, 1), (2, 8, 4, 4)])
def test_batch_norm_layout_is_batch_norms(shape):
    """Eager's batch norm is row-major whenever its source is (even when channels-last
    describes the same memory), else channels-last."""
    bn = _bn(shape[1], 6)
    with torch.no_grad():
        for x in (torch.randn(shape), torch.randn(shape).to(memory_format=CL),
                  torch.randn(shape[0], shape[2], shape[3], shape[1]).permute(0, 3, 1, 2)):
            made = _run(bn, x)
            assert _stats(made, "conv_fallbacks") == 0


def test_avg_pool_divisor_override_runs_eagerly():
    x = torch.randn(2, 3, 6, 6)
    for fn in (lambda x: F.avg_pool2d(x, 2, divisor_override=3), lambda x: F.avg_pool2d(x, 3, 1, 1, divisor_override=2)):
        backend, made = _lowering()
        compiled = shapejit.compile(fn, backend=backend)
        for _ in range(2):
            _same(compiled(x), fn(x))
        assert _stats(made, "conv_steps") == 0


def test_not_dense_runs_eagerly():
    x = torch.randn(2, 9, 9, 8)[:, :, :, :5].permute(0, 3, 1, 2)   # channels-last order, a gap
    made = _run(lambda x, wt: F.conv2d(x, wt), x, torch.randn(3, 5, 3, 3))
    assert _stats(made, "conv_fallbacks") == 2


def _bn(c, seed):
    return _bn_stats(c, torch.Generator().manual_seed(seed))


def test_folds_channels_last():
    """A basic block in channels-last: conv, batch norm, relu, conv, batch norm, residual
    add, relu; the residual is laid out as the result, so the sum folds."""
    conv1, conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.Conv2d(8, 8, 3, padding=1, bias=False)
    bn1, bn2 = _bn(8, 1), _bn(8, 2)

    def block(x):
        h = torch.relu(bn1(conv1(x)))
        return torch.relu(bn2(conv2(h)) + x)
    x = torch.randn(2, 8, 12, 12).to(memory_format=CL)
    with torch.no_grad():
        made = _run(block, x)
    assert _stats(made, "conv_fallbacks") == 0
    assert _stats(made, "conv_fused") >= 4


def test_rowmajor_residual_of_channels_last_result_runs_eagerly():
    x = torch.randn(2, 4, 8, 8).to(memory_format=CL)
    made = _run(lambda x, wt, r: F.conv2d(x, wt, padding=1) + r, x, torch.randn(4, 4, 3, 3), torch.randn(2, 4, 8, 8))
    assert _stats(made, "conv_fallbacks") == 2


@pytest.mark.parametrize("layout", ["to_cl", "permuted"])
def test_pooling_and_batch_norm_channels_last(layout):
    x = _layouts(2, 6, 12, 10)[layout]
    bn = _bn(6, 3)
    with torch.no_grad():
        for fn in (lambda x: F.max_pool2d(x, 3, 2, 1), lambda x: F.avg_pool2d(x, 2),
                   lambda x: F.adaptive_avg_pool2d(x, (1, 1)), lambda x: F.adaptive_avg_pool2d(x, (3, 5)),
                   bn, lambda x: torch.relu(bn(x))):
            made = _run(fn, x)
            assert _stats(made, "conv_fallbacks") == 0


def test_channels_last_handoff_chain():
    """Consecutive convolutions on a channels-last source: the blocked hand-off between them
    and the channels-last result at the end."""
    convs = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, stride=2, padding=1),
                          nn.ReLU(), nn.Conv2d(16, 8, 1))
    x = torch.randn(2, 3, 20, 20).to(memory_format=CL)
    with torch.no_grad():
        made = _run(convs, x)
    assert _stats(made, "conv_fallbacks") == 0


def test_convnext_model():
    """transformers' ConvNextModel: its layer norms leave channels-last tensors, which every
    convolution after the stem reads."""
    from transformers import ConvNextConfig, ConvNextModel
    torch.manual_seed(0)
    model = ConvNextModel(ConvNextConfig(hidden_sizes=[16, 32, 64], depths=[1, 1, 1], num_stages=3)).eval()
    x = torch.randn(2, 3, 32, 32)
    backend, made = _lowering()
    compiled = shapejit.compile(model, backend=backend)
    with torch.no_grad():
        for _ in range(2):
            got, want = compiled(x), model(x)
            _close_values(got.last_hidden_state, want.last_hidden_state)
            _close_values(got.pooler_output, want.pooler_output)
    assert _stats(made, "conv_steps") == 6 and _stats(made, "conv_fallbacks") == 0


def test_post_ops_after_the_primitive_channels_last():
    """Post-ops oneDNN leaves to the plain result (a list it has only a reference kernel
    for: per-channel scale and shift, a batch norm with a non-finite scale, then the
    residual) applied to a channels-last result. Run with AVX2 as oneDNN's ISA, where that
    list has no jit kernel."""
    code = textwrap.dedent("""
        import torch, torch.nn.functional as F, shapejit
        from shapejit import _C
        made = []
        def backend(g, ex):
            cg = _C._cg_compile_graph(g); made.append(cg); return cg
        torch.manual_seed(0)
        x = torch.randn(2, 8, 10, 10).to(memory_format=torch.channels_last)
        w = torch.randn(8, 8, 3, 3) * 0.2
        mean, var = torch.randn(8), torch.rand(8) + 0.5
        var[3] = -1.0   # sqrt of a negative: a NaN scale stays a per-channel post-op
        gamma, beta = torch.rand(8) + 0.5, torch.randn(8)
        def f(x, w, r):
            return F.batch_norm(F.conv2d(x, w, padding=1), mean, var, gamma, beta) + r
        r = torch.randn(2, 8, 10, 10).to(memory_format=torch.channels_last)
        c = shapejit.compile(f, backend=backend)
        for _ in range(2):
            got, want = c(x, w, r), f(x, w, r)
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, equal_nan=True)
            assert got.stride() == want.stride()
        s = made[0].stats
        print("RESULT", s.get("conv_calls", 0), s.get("conv_fallbacks", 0), s.get("conv_posts_after", 0))
    """)
    env = dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX2")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT")][0]
    calls, fallbacks, after = (int(v) for v in line.split()[1:])
    assert calls == 2 and fallbacks == 0
    assert after == 2, "the list was fused: this test no longer reaches the after-primitive path"


def test_cat_of_channels_last_results():
    """Branches joined by torch.cat: channels-last when every input is (eager's rule), else
    row-major; values as eager's either way."""
    c1, c2 = nn.Conv2d(8, 4, 3, padding=1), nn.Conv2d(8, 4, 1)
    x = torch.randn(2, 8, 6, 6).to(memory_format=CL)
    with torch.no_grad():
        made = _run(lambda x: torch.cat([c1(x), c2(x)], 1), x)
        assert _stats(made, "cat_calls") == 2 and _stats(made, "conv_fallbacks") == 0
        _run(lambda x: torch.cat([c1(x), c2(x)], 2), x)
        _run(lambda x, y: torch.cat([c1(x), y], 1), x, torch.randn(2, 3, 6, 6))   # mixed: row-major
