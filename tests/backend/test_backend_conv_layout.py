"""Convolution results handed to the next convolution in oneDNN's blocked layout
(backend/step_conv.c: ConvHand; dnnl_api.c: src_ready / dst_keep), and relu6 folded into a
convolution as oneDNN's clip post-op: chains of convolutions (batch norm, relu, relu6,
residual, depthwise, stride, 1x1, a folded F.pad) against eager, several sizes under
dynamic=True, an intermediate also read by a non-convolution op or returned (stays plain),
a consumer that falls back to eager (it needs the plain value), and transformers'
MobileNetV2 with random batch-norm statistics."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import shapejit
from shapejit import _C
from lowering import lowering as _lowering

pytestmark = pytest.mark.usefixtures("fresh_shapejit")

RTOL, ATOL = 1e-4, 1e-5


def _close(got, want):
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        torch.testing.assert_close(g, w, rtol=RTOL, atol=ATOL, equal_nan=True)
        assert g.is_contiguous()


def _stats(made, key):
    return sum(m.stats.get(key, 0) for m in made if isinstance(m, _C.CompiledGraph))


def _bn(c, gen):
    bn = nn.BatchNorm2d(c).eval()
    with torch.no_grad():
        bn.running_mean.normal_(0, 0.5, generator=gen)
        bn.running_var.uniform_(0.5, 2.0, generator=gen)
        bn.weight.uniform_(0.5, 1.5, generator=gen)
        bn.bias.normal_(0, 0.2, generator=gen)
    return bn


class Chain(nn.Module):
    """conv 3x3 + bn + relu -> pad + depthwise 3x3 stride 2 + bn + relu6 -> 1x1 + bn ->
    1x1 + bn + residual + relu -> 3x3 strided conv with bias + relu6 (hardtanh)."""

    def __init__(self, gen, cin=5, c=12):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(cin, c, 3, padding=1, bias=False), _bn(c, gen)
        self.dw, self.b2 = nn.Conv2d(c, c, 3, stride=2, groups=c, bias=False), _bn(c, gen)
        self.pw, self.b3 = nn.Conv2d(c, 2 * c, 1, bias=False), _bn(2 * c, gen)
        self.pw2, self.b4 = nn.Conv2d(2 * c, 2 * c, 1, bias=False), _bn(2 * c, gen)
        self.c5 = nn.Conv2d(2 * c, c, 3, stride=2, padding=1)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                with torch.no_grad():
                    m.weight.normal_(0, 1 / math.sqrt(m.weight[0].numel()), generator=gen)
        self.eval()

    def forward(self, x):
        h = F.relu(self.b1(self.c1(x)))
        h = F.relu6(self.b2(self.dw(F.pad(h, (0, 1, 0, 1)))))
        r = self.b3(self.pw(h))
        h = F.relu(self.b4(self.pw2(r)) + r)
        return F.hardtanh(self.c5(h), 0.0, 6.0)


def _run(fn, xs, dynamic=None, **kw):
    backend, made = _lowering()
    cf = shapejit.compile(fn, backend=backend, dynamic=dynamic)
    with torch.no_grad():
        for x in xs:
            for _ in range(2):   # the second call finds every primitive made
                _close(cf(x), fn(x))
    return made


def test_chain_hands_blocked_results_over():
    gen = torch.Generator().manual_seed(0)
    m = Chain(gen)
    made = _run(m, [torch.randn(3, 5, 17, 19, generator=gen)])
    assert _stats(made, "conv_fallbacks") == 0
    assert _stats(made, "conv_blocked_handoffs") > 0
    assert _stats(made, "conv_fused") >= 9   # every bn, relu, relu6 and the residual


def test_chain_same_with_handoff_off():
    gen = torch.Generator().manual_seed(1)
    m = Chain(gen)
    x = torch.randn(2, 5, 16, 16, generator=gen)
    shapejit.config.conv_blocked_handoff = False
    try:
        made = _run(m, [x])
    finally:
        shapejit.config.conv_blocked_handoff = True
    assert _stats(made, "conv_blocked_handoffs") == 0
    assert _stats(made, "conv_calls") > 0


def test_dynamic_sizes():
    gen = torch.Generator().manual_seed(2)
    m = Chain(gen)
    xs = [torch.randn(n, 5, h, w, generator=gen) for n, h, w in [(2, 16, 16), (3, 9, 13), (1, 31, 8), (2, 16, 16)]]
    made = _run(m, xs, dynamic=True)
    assert _stats(made, "conv_blocked_handoffs") > 0


def test_intermediate_read_elsewhere_stays_plain():
    gen = torch.Generator().manual_seed(3)
    w1 = torch.randn(16, 8, 3, 3, generator=gen) / 5
    w2 = torch.randn(16, 16, 1, 1, generator=gen) / 4
    w3 = torch.randn(16, 16, 3, 3, generator=gen) / 12

    def read_by_sum(x):
        a = F.conv2d(x, w1, padding=1)
        b = F.conv2d(a, w2)
        return F.conv2d(b, w3, padding=1) * 2.0 + a.sum()

    def returned(x):
        a = F.relu(F.conv2d(x, w1, padding=1))
        b = F.conv2d(a, w2)
        return F.conv2d(b, w3, padding=1), a

    def residual_too(x):   # a is the second convolution's source and the third's residual
        a = F.conv2d(x, w1, padding=1)
        b = F.conv2d(a, w2)
        return F.relu(F.conv2d(b, w3, padding=1) + a)

    x = torch.randn(2, 8, 12, 12, generator=gen)
    for fn in (read_by_sum, returned, residual_too):
        made = _run(fn, [x])
        # only b -> third convolution can go blocked
        assert _stats(made, "conv_blocked_handoffs") <= 2, fn.__name__


def test_consumer_falls_back_to_eager():
    """The consumer's relu post-op sees an inf weight, so it runs eagerly: it reads the
    producer's result in plain form, filled from the blocked buffer."""
    gen = torch.Generator().manual_seed(4)
    w1 = torch.randn(16, 8, 3, 3, generator=gen) / 5
    w2 = torch.randn(16, 16, 3, 3, generator=gen) / 12
    w2[3, 2, 1, 1] = math.inf

    def f(x):
        a = F.conv2d(x, w1, padding=1)
        return F.relu(F.conv2d(a, w2, padding=1))

    made = _run(f, [torch.randn(2, 8, 12, 12, generator=gen)])
    assert _stats(made, "conv_nonfinite") > 0
    assert _stats(made, "conv_blocked_to_plain") > 0
    assert _stats(made, "conv_blocked_handoffs") == 0


def test_nan_through_relu6_runs_eagerly():
    gen = torch.Generator().manual_seed(5)
    w1 = torch.randn(16, 8, 3, 3, generator=gen) / 5
    w2 = torch.randn(16, 16, 1, 1, generator=gen) / 4

    def f(x):
        a = F.relu6(F.conv2d(x, w1, padding=1))
        return F.hardtanh(F.conv2d(a, w2), 0.0, 6.0)

    x = torch.randn(2, 8, 10, 10, generator=gen)
    x[1, 2, 3, 4] = math.nan
    made = _run(f, [x, torch.randn(2, 8, 10, 10, generator=gen)])
    assert _stats(made, "conv_nonfinite") > 0


def test_other_hardtanh_bounds_not_folded():
    gen = torch.Generator().manual_seed(6)
    w1 = torch.randn(16, 8, 3, 3, generator=gen) / 5

    def f(x):
        return F.hardtanh(F.conv2d(x, w1, padding=1), -1.0, 1.0)

    made = _run(f, [torch.randn(2, 8, 10, 10, generator=gen)])
    assert _stats(made, "conv_fused") == 0


def test_mobilenet_v2():
    transformers = pytest.importorskip("transformers")
    gen = torch.Generator().manual_seed(7)
    cfg = transformers.MobileNetV2Config(image_size=64, depth_multiplier=0.35)
    m = transformers.MobileNetV2Model(cfg).eval()
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            with torch.no_grad():
                mod.running_mean.normal_(0, 0.2, generator=gen)
                mod.running_var.uniform_(0.5, 2.0, generator=gen)
                mod.weight.uniform_(0.8, 1.2, generator=gen)
                mod.bias.normal_(0, 0.2, generator=gen)
    want_scale = None

    def fn(x):
        return m(x).last_hidden_state

    xs = [torch.randn(2, 3, 64, 64, generator=gen)]
    with torch.no_grad():
        want_scale = fn(xs[0]).abs().max().item()
    assert want_scale > 1e-3   # values worth comparing
    made = _run(fn, xs)
    assert _stats(made, "conv_blocked_handoffs") > 0
