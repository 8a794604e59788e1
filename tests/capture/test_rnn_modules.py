"""nn.LSTM / nn.GRU / nn.RNN calls (capture/rnn.c): recorded as the library call their forward
makes, with the module's weights as graph inputs and its settings as guarded constants, so the
graph holds no module, serialises and runs after a round trip; forward's checks are decided at
capture (a call it refuses raises eager's error)."""
import pytest
import torch
import torch.nn as nn

import shapejit
from shapejit import _C


pytestmark = pytest.mark.usefixtures("fresh_shapejit")


def _graphs(fn, *args, **kw):
    """[(graph, its example inputs)] of one call of fn."""
    recs = []
    shapejit.compile(fn, backend=lambda g, ex: recs.append((g, list(ex))) or g, **kw)(*args)
    shapejit.reset()
    return recs


def _close(a, b):
    if isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            _close(x, y)
    else:
        assert a.shape == b.shape and a.requires_grad == b.requires_grad
        torch.testing.assert_close(a.detach(), b.detach(), rtol=1e-5, atol=1e-6)


def _cases():
    torch.manual_seed(0)
    return [
        ("lstm_batch_first", nn.LSTM(4, 6, batch_first=True), (torch.randn(2, 5, 4),)),
        ("lstm_states", nn.LSTM(4, 6, num_layers=2), (torch.randn(5, 3, 4), (torch.randn(2, 3, 6), torch.randn(2, 3, 6)))),
        ("lstm_proj_bidir", nn.LSTM(4, 6, proj_size=2, bidirectional=True), (torch.randn(5, 3, 4),)),
        ("lstm_unbatched_states", nn.LSTM(4, 6, batch_first=True), (torch.randn(5, 4), (torch.randn(1, 6), torch.randn(1, 6)))),
        ("gru_bidir_states", nn.GRU(4, 5, num_layers=2, bidirectional=True), (torch.randn(6, 3, 4), torch.randn(4, 3, 5))),
        ("gru_unbatched", nn.GRU(4, 5, bias=False), (torch.randn(6, 4),)),
        ("rnn_relu", nn.RNN(4, 3, nonlinearity="relu", batch_first=True), (torch.randn(2, 6, 4),)),
        ("rnn_tanh_unbatched_state", nn.RNN(4, 3), (torch.randn(6, 4), torch.randn(1, 3))),
        ("gru_f64", nn.GRU(4, 5).double(), (torch.randn(6, 3, 4, dtype=torch.float64),)),
    ]


@pytest.mark.parametrize("name,module,args", _cases(), ids=[c[0] for c in _cases()])
def test_graph_names_no_module_and_round_trips(name, module, args):
    def f(*a):
        out, hidden = module(*a)
        return (out,) + (hidden if isinstance(hidden, tuple) else (hidden,))

    recs = _graphs(f, *args, fullgraph=True)
    assert len(recs) == 1
    g, inputs = recs[0]
    assert not any(isinstance(c, nn.Module) for c in g._constants())
    assert g.code.count("._parameters[") == len(module._flat_weights_names)   # weights are inputs
    text = g.serialize()
    loaded = _C.graph_deserialize(text)
    assert loaded.equals(g) and loaded.serialize() == text
    expected = f(*args)
    _close(tuple(g(*inputs)), expected)
    _close(tuple(loaded(*inputs)), expected)


_CHECKS = []


class _Checked(nn.GRU):
    def check_forward_args(self, input, hidden, batch_sizes):
        _CHECKS.append(1)
        super().check_forward_args(input, hidden, batch_sizes)


def test_subclass_overriding_a_check_breaks_and_runs_its_own_code():
    calls = _CHECKS
    calls.clear()
    gru = _Checked(4, 5)

    def f(x):
        return gru(x)[0] * 2

    x = torch.randn(6, 3, 4)
    expected = f(x)
    assert calls == [1]
    got = shapejit.compile(f)(x)
    torch.testing.assert_close(got, expected)
    assert calls == [1, 1]
    assert shapejit.stats()["graph_breaks"] >= 1


def test_replaced_parameter_is_read_at_run_time():
    gru = nn.GRU(4, 5)

    def f(x):
        return gru(x)[0]

    cf = shapejit.compile(f, fullgraph=True)
    x = torch.randn(3, 2, 4)
    torch.testing.assert_close(cf(x), f(x))
    with torch.no_grad():
        gru.weight_ih_l0 = nn.Parameter(torch.randn(15, 4))
    torch.testing.assert_close(cf(x), f(x))
    assert shapejit.stats()["recompiles"] == 0


def test_training_mode_and_dropout_as_eager():
    gru = nn.GRU(4, 5, num_layers=2, dropout=0.3)

    def f(x):
        return gru(x)[0]

    cf = shapejit.compile(f, fullgraph=True)
    x = torch.randn(4, 2, 4)
    for mode in (True, False, True, False):
        gru.train(mode)
        torch.manual_seed(3)
        expected = f(x)
        torch.manual_seed(3)
        torch.testing.assert_close(cf(x), expected)
    assert shapejit.stats()["graphs"] == 2   # training is a guarded setting: one graph per mode


def test_symbolic_batch_state_checked_as_eager():
    gru = nn.GRU(4, 5, num_layers=2, bidirectional=True, batch_first=True)

    def f(x, h):
        out, h = gru(x, h)
        return out * 2, h

    cf = shapejit.compile(f)
    for b, t in [(3, 6), (5, 6), (4, 7), (2, 2)]:
        x, h = torch.randn(b, t, 4), torch.randn(4, b, 5)
        _close(cf(x, h), f(x, h))
    assert shapejit.stats()["recompiles"] == 2   # the third call made batch and length dynamic
    x, h = torch.randn(3, 6, 4), torch.randn(4, 2, 5)
    with pytest.raises(RuntimeError) as eager:
        f(x, h)
    with pytest.raises(RuntimeError) as compiled:
        cf(x, h)
    assert str(compiled.value) == str(eager.value)


@pytest.mark.parametrize("make,args", [
    (lambda: nn.LSTM(4, 6), (torch.randn(5, 2, 4), (torch.randn(1, 2, 6), torch.randn(1, 3, 6)))),
    (lambda: nn.LSTM(4, 6), (torch.randn(5, 4), (torch.randn(1, 1, 6), torch.randn(1, 1, 6)))),
    (lambda: nn.GRU(4, 5), (torch.randn(5, 2, 4, dtype=torch.float64),)),
    (lambda: nn.RNN(4, 5), (torch.randn(5, 2, 4), torch.randn(2, 2, 5))),
    (lambda: nn.RNN(4, 5), (torch.randn(5, 2, 3),)),
], ids=["cell_state_batch", "unbatched_3d_states", "dtype", "layers", "input_size"])
def test_refused_calls_raise_as_eager(make, args):
    m = make()

    def f(*a):
        return m(*a)[0]

    with pytest.raises(Exception) as eager:
        f(*args)
    with pytest.raises(Exception) as compiled:
        shapejit.compile(f)(*args)
    assert type(compiled.value) is type(eager.value)
    assert str(compiled.value) == str(eager.value)
