"""F.conv1d of a depthwise convolution with a short kernel (groups = channels, one input
channel per group, at most 8 taps, stride 1) is captured as a sum of shifted products
(capture/conv_depthwise.c), which the cpu backend fuses with what follows: the causal
convolutions of Mamba-style mixers. Results equal the library convolution's within
rounding, gradients too; other forms stay conv1d nodes."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import shapejit

pytestmark = pytest.mark.usefixtures("fresh_shapejit")


def _run(fn, *args, backend="cpu", dynamic=None):
    ops = []

    def be(graph, ex):
        ops.extend(str(getattr(n, "op", n)) for n in graph.nodes)
        return shapejit.backends.cpu(graph, ex) if backend == "cpu" else graph

    return shapejit.compile(fn, backend=be, dynamic=dynamic)(*args), ops


@pytest.mark.parametrize("backend", ["cpu", "eager"])
@pytest.mark.parametrize("k,pad,dil", [(1, 0, 1), (2, 1, 1), (4, 3, 1), (4, 0, 1), (3, 2, 2), (8, 7, 1), (5, "valid", 1),
                                       (3, (1,), (2,))])
@pytest.mark.parametrize("bias", [True, False])
def test_depthwise_forms_are_sums(backend, k, pad, dil, bias):
    ch, n = 6, 11
    x, w = torch.randn(2, ch, n), torch.randn(ch, 1, k)
    b = torch.randn(ch) if bias else None

    def f(x, w, b):
        return F.conv1d(x, w, b, 1, pad, dil, ch).tanh()

    got, ops = _run(f, x, w, b, backend=backend)
    torch.testing.assert_close(got, f(x, w, b), rtol=1e-5, atol=1e-6)
    assert "conv1d" not in ops and ops.count("mul") == k, ops


@pytest.mark.parametrize("case", ["k9", "same", "stride2", "groups1", "two_per_group", "int64", "rank2"])
def test_other_forms_stay_library_calls(case):
    x, w, kw = torch.randn(2, 4, 12), torch.randn(4, 1, 3), dict(groups=4)
    if case == "k9":
        w = torch.randn(4, 1, 9)
    elif case == "same":
        kw["padding"] = "same"
    elif case == "stride2":
        kw["stride"] = 2
    elif case == "groups1":
        w, kw = torch.randn(4, 4, 3), {}
    elif case == "two_per_group":
        w = torch.randn(8, 1, 3)
    elif case == "int64":
        x, w = x.long(), w.long()
    elif case == "rank2":
        x = x[0]

    def f(x, w):
        return F.conv1d(x, w, **kw) + 1

    got, ops = _run(f, x, w)
    torch.testing.assert_close(got, f(x, w), rtol=1e-5, atol=1e-6)
    assert "mul" not in ops and ("conv1d" in ops or case == "int64"), ops   # int64: a break before it


def test_mamba_style_causal_conv_module_with_gradients():
    conv = nn.Conv1d(16, 16, 4, groups=16, padding=3)

    def f(x):
        return F.silu(conv(x)[..., :x.shape[-1]]).sum(1)

    x = torch.randn(2, 16, 10, requires_grad=True)
    want = f(x)
    want.sum().backward()
    gx, gw, gb = x.grad.clone(), conv.weight.grad.clone(), conv.bias.grad.clone()
    x.grad = conv.weight.grad = conv.bias.grad = None
    got, ops = _run(f, x)
    got.sum().backward()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for a, b in ((x.grad, gx), (conv.weight.grad, gw), (conv.bias.grad, gb)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert "conv1d" not in ops


def test_symbolic_length():
    conv = nn.Conv1d(8, 8, 4, groups=8, padding=3)
    tight = nn.Conv1d(8, 8, 4, groups=8, padding=0)

    def f(x):
        return conv(x)[..., :x.shape[-1]] * 2

    def g(x):
        return tight(x) * 2

    with torch.no_grad():
        cf = shapejit.compile(f, dynamic=True)
        for n in (5, 9, 17, 2):
            x = torch.randn(2, 8, n)
            torch.testing.assert_close(cf(x), f(x), rtol=1e-5, atol=1e-6)
        assert shapejit.stats()["graphs"] == 1
        shapejit.reset()
        # no padding: the output length n - 3 is positive only for n > 3, so a symbolic
        # length keeps the library call (which raises for short inputs, as eager)
        cg = shapejit.compile(g, dynamic=True)
        for n in (6, 9):
            x = torch.randn(2, 8, n)
            torch.testing.assert_close(cg(x), g(x), rtol=1e-5, atol=1e-6)
        with pytest.raises(RuntimeError):
            cg(torch.randn(2, 8, 2))


def test_too_short_static_input_raises_as_eager():
    def f(x, w):
        return F.conv1d(x, w, groups=4)

    x, w = torch.randn(1, 4, 2), torch.randn(4, 1, 3)
    with pytest.raises(RuntimeError) as eager:
        f(x, w)
    with pytest.raises(RuntimeError) as compiled:
        shapejit.compile(f)(x, w)
    assert str(compiled.value) == str(eager.value)
