"""The log channels print what capture did: graph code with user lines, guards, recompile
reasons in torch.compile's words, bytecode, graph breaks."""
import pytest
import torch

import shapejit


@pytest.fixture(autouse=True)
def _fresh():
    shapejit.reset()
    yield
    shapejit.set_logs()
    shapejit.reset()


def _messages(capfd, channel):
    """What shapejit printed (its log handler writes to stderr)."""
    del channel   # every channel prints to the same stream; the assertions name the content
    return capfd.readouterr().err


def test_graph_code_guards_bytecode(capfd):
    shapejit.set_logs(graph_code=True, guards=True, bytecode=True)

    def f(x, w):
        y = x @ w
        return torch.relu(y) + 1

    out = shapejit.compile(f)(torch.randn(3, 4), torch.randn(4, 2))
    assert out.shape == (3, 2)
    code = guards = bc = _messages(capfd, "graph_code")
    assert "L['x']" in code and "float32[3, 4]" in code and "y = x @ w" in code
    assert "test_logs_capture.py:" in code
    assert "TENSOR_MATCH: check_tensor(L['x'], Tensor, torch.float32, device=cpu, requires_grad=False, size=[3, 4], stride=[4, 1])" in guards
    assert "+- GuardManager: source=L['x'], accessed_by=FrameLocalsGuardAccessor(key='x', framelocals_idx=0)" in guards
    assert "GLOBAL_STATE" in guards
    assert "ORIGINAL BYTECODE" in bc and "BINARY_OP" in bc


def test_recompile_reason(capfd):
    shapejit.set_logs(recompiles=True)

    def g(x):
        return x * 2

    cg = shapejit.compile(g, dynamic=False)
    cg(torch.randn(10))
    cg(torch.randn(20))
    msg = _messages(capfd, "recompiles")
    assert "Recompiling function g in" in msg
    assert "triggered by the following guard failure(s):" in msg
    assert "tensor 'x' size mismatch at index 0. expected 10, actual 20" in msg


def test_graph_break_log_names_reason_and_line(capfd):
    shapejit.set_logs(graph_breaks=True)

    def h(x):
        if x.sum() > 0:
            return x + 1
        return x - 1

    x = torch.randn(5)
    torch.testing.assert_close(shapejit.compile(h)(x), h(x))
    msg = _messages(capfd, "graph_breaks")
    assert "Graph break in user code at" in msg and "test_logs_capture.py" in msg
    assert "data-dependent control flow" in msg and "if x.sum() > 0:" in msg
