"""Functions and forwards decorated with @torch.no_grad() / @torch.enable_grad() (the
rotary embeddings of Llama-family models are) are captured in the caller's graph: the
decorator's wrapper, its clone() of the context manager and the grad mode it sets are
followed, not broken on. Results equal eager's (values, requires_grad, the grad mode
after the call), with torch.compile's graph count (a counting backend) and no break."""
import pytest
import torch
import torch.nn as nn

import shapejit
from graph_counter import GraphCounter


pytestmark = pytest.mark.usefixtures("fresh_compilers")


@torch.no_grad()
def doubled(x):
    return x * 2


@torch.enable_grad()
def tripled(x):
    return x * 3


def no_grad_call(x):
    return doubled(x) + 1, torch.is_grad_enabled()


def enable_grad_inside_no_grad(x):
    with torch.no_grad():
        y = tripled(x) + x
        inside = torch.is_grad_enabled()
    return y, x.sin(), inside


def nested(x):
    return doubled(tripled(x)) * tripled(x)


class Rotary(nn.Module):
    """The shape of transformers' rotary embedding: a decorated forward with a buffer."""

    def __init__(self):
        super().__init__()
        self.register_buffer("inv_freq", torch.linspace(0.1, 1.0, 4))

    @torch.no_grad()
    def forward(self, x, positions):
        freqs = positions[..., None].float() * self.inv_freq
        return freqs.cos().to(x.dtype), freqs.sin().to(x.dtype)


class UsesRotary(nn.Module):
    def __init__(self):
        super().__init__()
        self.rotary = Rotary()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        cos, sin = self.rotary(x, torch.arange(x.shape[1]))
        return self.proj(x) * cos + sin


def _same(got, expected):
    if isinstance(expected, tuple):
        assert isinstance(got, tuple) and len(got) == len(expected)
        for a, b in zip(got, expected):
            _same(a, b)
    elif isinstance(expected, torch.Tensor):
        torch.testing.assert_close(got, expected)
        assert got.requires_grad == expected.requires_grad
    else:
        assert got == expected


CASES = [no_grad_call, enable_grad_inside_no_grad, nested, "module"]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c if isinstance(c, str) else c.__name__)
@pytest.mark.parametrize("requires_grad", [False, True], ids=["plain", "requires_grad"])
def test_decorated_calls_are_captured(case, requires_grad):
    if case == "module":
        torch.manual_seed(0)
        fn = UsesRotary()
        shape = (2, 5, 4)
    else:
        fn = case
        shape = (3, 4)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1)).requires_grad_(requires_grad)
    counter = GraphCounter()
    expected = fn(x)
    _same(torch.compile(fn, backend=counter)(x), expected)
    before = torch.is_grad_enabled()
    _same(shapejit.compile(fn)(x), expected)
    assert torch.is_grad_enabled() == before
    st = shapejit.stats()
    assert st["graph_breaks"] == 0 and st["graphs"] == counter.graphs == 1, (st, counter.graphs)


def test_compiling_the_decorated_function_itself():
    x = torch.randn(5, requires_grad=True)
    got = shapejit.compile(doubled)(x)
    _same(got, doubled(x))
    assert torch.is_grad_enabled()
    assert shapejit.stats()["graph_breaks"] == 0


def test_decorated_function_keeps_grad_mode_on_exception():
    @torch.no_grad()
    def bad(x):
        return x.view(7)

    def f(x):
        return bad(x) + 1

    with pytest.raises(RuntimeError):
        f(torch.ones(3))
    with pytest.raises(RuntimeError):
        shapejit.compile(f)(torch.ones(3))
    assert torch.is_grad_enabled()
