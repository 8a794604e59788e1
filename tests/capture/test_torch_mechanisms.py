"""torch mechanisms around the ops (the corpus module tests/support/corpus/t_mech.py holds the
captures compared with eager and torch.compile): gradients through autograd.Function and
recurrent-layer nodes, inference tensors, the modes a failed graph run leaves, code under
torch.compiler.disable never compiled, and the errors eager raises."""
import pytest
import torch
import torch.nn as nn

import shapejit


pytestmark = pytest.mark.usefixtures("fresh_shapejit")


class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        ctx.save_for_backward(x)
        ctx.k = k
        return x ** 3 * k

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return 3 * ctx.k * x * x * g, None


class Pick(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        idx = x.argmax(-1)
        ctx.mark_non_differentiable(idx)
        return x * 2, idx

    @staticmethod
    def backward(ctx, g, g_idx):
        return g * 2


def _grads(fn, *inputs, params=()):
    inputs = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    for p in params:
        p.grad = None
    out = fn(*inputs)
    out.sum().backward()
    return out.detach(), [t.grad for t in inputs if t.requires_grad], [p.grad.clone() for p in params]


def test_autograd_function_gradients_flow_without_a_break():
    lin = nn.Linear(4, 3)

    def f(x, w):
        y = Cube.apply(x @ w, 0.5)
        a, idx = Pick.apply(y.tanh())
        return lin(a) + idx.unsqueeze(-1)

    x, w = torch.randn(5, 4, requires_grad=True), torch.randn(4, 4, requires_grad=True)
    expected = _grads(f, x, w, params=lin.parameters())
    ex = shapejit.explain(f)(x, w)
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), ex.break_reasons
    assert ex.ops_per_graph[0].count("autograd_function") == 2
    shapejit.reset()
    got = _grads(shapejit.compile(f, fullgraph=True), x, w, params=list(lin.parameters()))
    torch.testing.assert_close(got[0], expected[0])
    for a, b in zip(got[1] + got[2], expected[1] + expected[2]):
        torch.testing.assert_close(a, b)


def test_autograd_function_non_differentiable_output():
    def f(x):
        return Pick.apply(x + 1)

    x = torch.randn(3, 5, requires_grad=True)
    y, idx = shapejit.compile(f, fullgraph=True)(x)
    ey, eidx = f(x)
    assert y.requires_grad and not idx.requires_grad
    assert torch.equal(idx, eidx) and torch.allclose(y, ey)


def test_autograd_function_bad_arguments_raise_as_eager():
    def f(x):
        return Cube.apply(x)   # k missing

    x = torch.randn(3)
    with pytest.raises(TypeError) as eager:
        f(x)
    with pytest.raises(TypeError) as compiled:
        shapejit.compile(f)(x)
    assert str(compiled.value) == str(eager.value)


def test_lstm_gradients_flow():
    lstm = nn.LSTM(4, 6, batch_first=True)

    def f(x):
        out, (h, c) = lstm(x)
        return out.sum(1) + h[-1] * c[-1]

    x = torch.randn(2, 5, 4, requires_grad=True)
    params = list(lstm.parameters())
    expected = _grads(f, x, params=params)
    got = _grads(shapejit.compile(f, fullgraph=True), x, params=params)
    torch.testing.assert_close(got[0], expected[0])
    for a, b in zip(got[1] + got[2], expected[1] + expected[2]):
        torch.testing.assert_close(a, b)


def test_lstm_wrong_input_size_raises_as_eager():
    lstm = nn.LSTM(4, 6)

    def f(x):
        return lstm(x)[0]

    x = torch.randn(5, 2, 3)
    with pytest.raises(RuntimeError) as eager:
        f(x)
    with pytest.raises(RuntimeError) as compiled:
        shapejit.compile(f)(x)
    assert str(compiled.value) == str(eager.value)


def test_mv_rank_error_raises_as_eager():
    def f(a, v):
        return torch.mv(a, v)

    a, v = torch.randn(2, 3, 4), torch.randn(4)
    with pytest.raises(RuntimeError):
        f(a, v)
    with pytest.raises(RuntimeError):
        shapejit.compile(f)(a, v)


def test_inference_tensors_as_eager():
    @torch.inference_mode()
    def scaled(x):
        return x * 2

    def f(x):
        with torch.inference_mode():
            a = x + 1
            with torch.inference_mode(False):
                b = x * 3
        return a, b, scaled(x), scaled(x) + 1

    x = torch.randn(3, requires_grad=True)
    expected = f(x)
    for _ in range(2):   # the capture, then the cached graph
        got = shapejit.compile(f, fullgraph=True)(x)
        for g, e in zip(got, expected):
            assert (g.is_inference(), g.requires_grad) == (e.is_inference(), e.requires_grad)
            torch.testing.assert_close(g.detach(), e.detach())
    assert not torch.is_inference_mode_enabled() and torch.is_grad_enabled()


def test_failed_run_restores_inference_and_grad_modes():
    lstm = nn.LSTM(4, 6)

    def f(x, h0, c0):
        with torch.no_grad():
            with torch.inference_mode():
                y = x * 2
                out, _ = lstm(y, (h0, c0))   # the states' shapes are wrong: fails at run time
        return out

    x = torch.randn(5, 2, 4)
    h0, c0 = torch.randn(1, 3, 6), torch.randn(1, 3, 6)
    with pytest.raises(RuntimeError):
        f(x, h0, c0)
    with pytest.raises(RuntimeError):
        shapejit.compile(f)(x, h0, c0)
    assert not torch.is_inference_mode_enabled()
    assert torch.is_grad_enabled()


def _helper(x):
    return x * 2


def test_disabled_function_and_its_callees_never_compile():
    calls = []

    @torch.compiler.disable
    def deep(x):
        calls.append(1)
        return _helper(x) + 1

    @torch.compiler.disable(recursive=False)
    def shallow(x):
        return _helper(x) - 1

    def f(x):
        return deep(x.sin()).cos()

    def g(x):
        return shallow(x.sin()).cos()

    x = torch.randn(4)
    torch.testing.assert_close(shapejit.compile(f)(x), f(x))
    st = shapejit.stats()
    assert (st["graphs"], st["graph_breaks"]) == (2, 1), st   # _helper is not compiled
    shapejit.reset()
    torch.testing.assert_close(shapejit.compile(g)(x), g(x))
    st = shapejit.stats()
    assert (st["graphs"], st["graph_breaks"]) == (3, 1), st   # _helper is
    ex = shapejit.explain(f)(x)
    assert any("torch.compiler.disable" in r.reason for r in ex.break_reasons), ex.break_reasons


def test_disabled_call_with_fullgraph_raises():
    f = torch.compiler.disable(_helper)

    def h(x):
        return f(x) + 1

    with pytest.raises(Exception, match="disable"):
        shapejit.compile(h, fullgraph=True)(torch.randn(3))
