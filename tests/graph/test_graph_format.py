"""Graph listings (graph/ir.c): Graph.code and Graph.format() are the listing of the
graph_code log; Graph.format(bound=True) shows each call as the backends read it: the
callables.def path of the node's row, its arguments bound to that row's parameter names
(those the call did not pass left out) and the op in the comment."""
import contextlib
import io
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import shapejit
from corpus import ENTRIES
from shapejit import _C

ARG_ABSENT = 4
PATHS = [row[2] for row in _C._callable_rows()]


@pytest.fixture(autouse=True)
def _fresh_shapejit():
    shapejit.reset()
    yield
    shapejit.reset()


def _graphs(fn, *args, **kwargs):
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return shapejit.explain(fn)(*args, **kwargs).graphs


def _calls(text):
    """The op lines of a bound listing (each has a comment naming its op)."""
    return [ln for ln in text.splitlines()[1:-1] if "  # " in ln]


def test_bound_form():
    def f(x, w, b):
        h = F.linear(torch.sin(x), w) + F.linear(x, w, b)
        return h.sum(dim=1, keepdim=True) * 2, torch.cat([x, x], 1)

    (g,) = _graphs(f, torch.randn(3, 4), torch.randn(5, 4), torch.randn(5))
    assert g.format() == g.code
    assert g.format(bound=False) == g.code
    text = g.format(bound=True)
    assert text.splitlines()[0] == g.code.splitlines()[0]
    assert text.splitlines()[-1] == g.code.splitlines()[-1]
    body = [ln.split("  # ")[0].split(" = ", 1)[1] for ln in _calls(text)]
    assert body == [
        "torch.sin(input=v0)",
        "torch.nn.functional.linear(input=v1, weight=v2)",   # bias not passed: left out
        "torch.nn.functional.linear(input=v0, weight=v2, bias=v4)",
        "operator.add(input=v3, other=v5)",
        "Tensor.sum(input=v6, dim=1, keepdim=True)",
        "operator.mul(input=v7, other=2)",
        "torch.cat(tensors=[v0, v0], dim=1)",
    ]
    ops = [ln.split("  # ")[1].split(",")[0] for ln in _calls(text)]
    assert ops == ["sin", "linear", "linear", "add", "sum", "mul", "cat"]
    with pytest.raises(TypeError):
        g.format(True)   # keyword only


def test_bound_form_of_a_node_without_row():
    """An autograd Function's node (row -1) keeps its target and positional arguments."""
    class Twice(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    def f(x):
        return Twice.apply(x) + 1

    (g,) = _graphs(f, torch.randn(3))
    plain, bound = g.code.splitlines(), g.format(bound=True).splitlines()
    node = next(i for i, ln in enumerate(bound) if "  # autograd_function" in ln)
    assert bound[node].split("  # ")[0] == plain[node].split("  # ")[0]
    assert ".apply(v0)" in plain[node]


def test_numpy_out_and_graph_read_from_text():
    def h(a, o):
        np.add(a, 1.0, out=o)
        return np.concatenate([a, o], axis=0)

    (g,) = _graphs(h, np.ones(4), np.zeros(4))
    text = g.format(bound=True)
    body = [ln.split("  # ")[0].split(" = ", 1)[1] for ln in _calls(text)]
    # canonical parameter names: concatenate's arrays and axis read as cat's tensors and dim
    assert body == ["numpy.add(input=v0, other=1.0, out=v1)", "numpy.concatenate(tensors=[v0, v1], dim=0)"]
    # unresolved library objects print as the live ones did
    assert _C.graph_deserialize(g.serialize()).format(bound=True) == text


@pytest.mark.parametrize("entry", ENTRIES[::9], ids=[e.name for e in ENTRIES[::9]])
def test_corpus_bound_form(entry):
    """Each call of the bound form names its row's path, then its passed parameters in the
    schema's order; everything else is the listing of .code."""
    args, kwargs = entry.make(0)
    for g in _graphs(entry.fn, *args, **kwargs):
        plain, text = g.code.splitlines(), g.format(bound=True).splitlines()
        assert len(plain) == len(text)
        pool, nodes = g._bound()
        for ni, (op, flags, row, row_op, params, bound, nbound, *_rest) in enumerate(nodes):
            line = text[ni + 1]
            if op == "input":
                assert line == plain[ni + 1]
                continue
            call, note = line.split(" = ", 1)[1].split("  # ", 1)
            assert note.split(",")[0] == op
            if row < 0:
                assert call == plain[ni + 1].split(" = ", 1)[1].split("  # ")[0]
                continue
            assert call.startswith(PATHS[row] + "("), (call, PATHS[row])
            at = len(PATHS[row])
            for i, p in enumerate(params):
                if pool[bound + i][0] == ARG_ABSENT:
                    continue
                k = call.find(p[0] + "=", at)
                assert k > at, (call, p[0])
                at = k
        assert text[-1] == plain[-1]
