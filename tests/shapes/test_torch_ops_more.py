"""Resampling and neighbouring torch ops under dynamic shapes, the in-place random fills,
and their error paths.

Dynamic cases compile with shapejit.compile(dynamic=True), compare every call with eager
over several sizes, and count graphs: the rules of transposed convolution, F.interpolate,
F.pad, the 1-d pools, addcmul/addcdiv and Tensor.new keep the sizes symbolic, so one
graph serves every size. Random fills must draw exactly what eager draws from the same
generator state, and leave the generator where eager leaves it."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import shapejit


@pytest.fixture(autouse=True)
def _fresh():
    shapejit.reset()
    yield
    shapejit.reset()


def _check(fn, calls, graphs, dynamic=True):
    cf = shapejit.compile(fn, dynamic=dynamic)
    for args in calls:
        got, want = cf(*args), fn(*args)
        torch.testing.assert_close(got, want)
    assert shapejit.stats()["graph_breaks"] == 0
    assert shapejit.stats()["graphs"] == graphs


# ----------------------------------------------------------- symbolic sizes ----

def test_conv_transpose1d_length_is_symbolic():
    w = torch.randn(4, 3, 3)

    def f(x):
        return F.conv_transpose1d(x, w, stride=2, padding=1, output_padding=1).relu()
    _check(f, [(torch.randn(2, 4, n),) for n in (5, 7, 9, 12)], 1)


def test_conv_transpose2d_module_batch_and_sides_symbolic():
    torch.manual_seed(0)
    m = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2, dilation=1)

    def f(x):
        return m(x)
    _check(f, [(torch.randn(b, 4, h, h + 1),) for b, h in ((2, 5), (3, 6), (4, 9))], 1)


def test_interpolate_scale_factor_keeps_symbols():
    def f(x):
        return (F.interpolate(x, scale_factor=2), F.interpolate(x, scale_factor=1.5, mode="bilinear"),
                F.interpolate(x, scale_factor=0.5, mode="nearest-exact"))
    _check(f, [(torch.randn(1, 2, n, n + 2),) for n in (4, 6, 10, 11)], 1)


def test_interpolate_size_from_another_tensor():
    def f(x, y):
        return F.interpolate(x, size=y.shape[-2:], mode="bicubic", align_corners=False) + y
    _check(f, [(torch.randn(1, 3, n, n), torch.randn(1, 3, 2 * n, n + 3)) for n in (4, 5, 7)], 1)


def test_interpolate_odd_scale_specialises():
    # 1.1 is no m / 2**e with a small m: the size is specialised, one graph per size
    def f(x):
        return F.interpolate(x, scale_factor=1.1, mode="linear")
    _check(f, [(torch.randn(1, 2, n),) for n in (10, 20)], 2)


def test_pad_modes_symbolic():
    def f(x):
        n = x.shape[-1]
        return (F.pad(x[0], (1, 2), mode="reflect"), F.pad(x, (3, 0, 1, 1), mode="replicate"),
                F.pad(x[0], (2, 2), mode="circular"), F.pad(x, (0, 16 - n)))
    _check(f, [(torch.randn(2, 3, n, n),) for n in (5, 6, 9)], 1)


def test_pools_1d_symbolic():
    def f(x):
        return (F.max_pool1d(x, 2), F.avg_pool1d(x, 3, 2, 1), F.adaptive_avg_pool1d(x, 4),
                F.adaptive_max_pool1d(x, 3, return_indices=True)[1], F.adaptive_max_pool2d(x.unsqueeze(1), (2, 3)))
    _check(f, [(torch.randn(2, 3, n),) for n in (8, 11, 16)], 1)


def test_addc_and_new_symbolic():
    def f(x, y):
        t = torch.addcdiv(x, y, y.abs() + 1, value=0.5)
        return torch.addcmul(t, x, y), x.new(x.shape[0], 2).fill_(3.0), x.new_tensor([1, 2])
    _check(f, [(torch.randn(n, 4), torch.randn(4)) for n in (3, 5, 8)], 1)


def test_tensor_of_symbolic_sizes_keeps_one_graph():
    # the sizes are values of the new tensor: its shape is static, its data read at run time
    def f(x):
        return (torch.tensor([x.shape[0], x.shape[1] * 2, 3]) + 1, torch.tensor(x.shape[0]),
                x.new_tensor([[x.shape[0], 1]]), torch.tensor(x.shape))
    _check(f, [(torch.randn(n, 4),) for n in (3, 5, 7)], 1)


# ---------------------------------------------------------------- random ----

def _fills(x):
    a = torch.empty(3, 4).uniform_(-1, 1)
    b = torch.empty_like(x).normal_(0, 2)
    c = x.new_empty(5).exponential_()
    d = torch.zeros(6).bernoulli_(0.3)
    e = torch.empty(4, dtype=torch.int64).random_(0, 10)
    g = torch.empty(4).geometric_(0.4)
    h = torch.empty(4).log_normal_()
    i = torch.empty(4).cauchy_()
    j = torch.empty(3).random_(7)
    k = torch.empty_like(x).bernoulli_(torch.full_like(x, 0.5))
    return a * 2, b + x, c, d, e, g, h, i, j, k


@pytest.mark.parametrize("dynamic", [False, True])
def test_random_fills_draw_what_eager_draws(dynamic):
    cf = shapejit.compile(_fills, dynamic=dynamic)
    for seed, n in ((0, 3), (1, 3), (2, 5)):
        x = torch.randn(n, 4)
        torch.manual_seed(seed)
        want, after_eager = _fills(x), torch.randn(3)
        torch.manual_seed(seed)
        got, after = cf(x), torch.randn(3)
        for p, q in zip(got, want):
            assert torch.equal(p, q)
        assert torch.equal(after, after_eager), "the generator advanced differently"
    assert shapejit.stats()["graph_breaks"] == 0


def test_random_fill_with_generator_breaks():
    def f(x, g):
        return x.clone().uniform_(generator=g) + 1
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    x = torch.randn(4)
    torch.testing.assert_close(shapejit.compile(f)(x, g1), f(x, g2))


# ----------------------------------------------------------- error paths ----

@pytest.mark.parametrize("call", [
    lambda: torch.empty(3, dtype=torch.long).uniform_(),
    lambda: torch.empty(3).exponential_(0),
    lambda: torch.empty(3).geometric_(1),
    lambda: torch.empty(3).normal_(0, -1),
    lambda: torch.empty(3).uniform_(2, 1),
    lambda: torch.empty(3, dtype=torch.uint8).random_(300),
    lambda: F.conv_transpose1d(torch.randn(1, 4, 3), torch.randn(4, 2, 3), output_padding=1),
    lambda: F.interpolate(torch.randn(1, 2, 5), scale_factor=0.1),
    lambda: F.interpolate(torch.randn(1, 2, 5, 5), size=(3, 4), scale_factor=2),
    lambda: F.interpolate(torch.randn(1, 2, 5, 5), scale_factor=2, align_corners=True),
    lambda: F.interpolate(torch.randn(2, 5, 5), scale_factor=2, mode="bilinear"),
    lambda: F.pad(torch.randn(2, 5), (5, 5), mode="reflect"),
    lambda: F.pad(torch.randn(2, 5), (6, 0), mode="circular"),
    lambda: F.pad(torch.randn(2, 3, 5), (1, 0), mode="reflect", value=1.0),
    lambda: torch.addcdiv(torch.ones(3), torch.ones(3, dtype=torch.long), torch.ones(3, dtype=torch.long)),
    lambda: torch.addcmul(torch.ones(3), torch.ones(3), torch.ones(3), value=1j),
])
def test_bad_arguments_raise_what_eager_raises(call):
    with pytest.raises(Exception) as want:
        call()

    def f():
        return call()
    with pytest.raises(type(want.value)) as got:
        shapejit.compile(f)()
    assert str(got.value).split("\n")[0] == str(want.value).split("\n")[0]


def test_nn_init_fills_on_a_parameter():
    # nn.init fills under its own no_grad, so a leaf parameter may be filled in the frame
    def f(w):
        nn.init.normal_(w, 0, 0.02)
        nn.init.uniform_(w[:2], -1, 1)
        return (w * 2).sum()
    torch.manual_seed(0)
    w1 = nn.Parameter(torch.zeros(3))
    want = f(w1)
    torch.manual_seed(0)
    w2 = nn.Parameter(torch.zeros(3))
    got = shapejit.compile(f)(w2)
    assert torch.equal(got, want) and torch.equal(w1, w2)
    assert shapejit.stats()["graph_breaks"] == 0
    got.backward()
    assert torch.equal(w2.grad, torch.full((3,), 2.0))


def test_a_graph_that_drew_and_then_raised_is_not_run_again():
    # running the frame again in the interpreter after the error would draw twice
    def f(x, idx):
        u = torch.empty(3).uniform_()
        return u + x[idx]
    cf = shapejit.compile(f)
    x = torch.randn(3)
    cf(x, torch.tensor([0, 1, 2]))
    bad = (x, torch.tensor([0, 1, 7]))
    torch.manual_seed(1)
    with pytest.raises(IndexError):
        f(*bad)
    want = torch.rand(2)
    torch.manual_seed(1)
    with pytest.raises(IndexError):
        cf(*bad)
    assert torch.equal(torch.rand(2), want)
    assert shapejit.stats()["graph_breaks"] == 0
