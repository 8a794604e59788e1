"""Tensor.numpy() and torch.from_numpy() in compiled code (the corpus module t_tonumpy
holds the capture cases): the memory sharing eager gives (the array is the tensor's
memory, from_numpy's tensor is the array's), and the errors eager raises."""
import numpy as np
import pytest
import torch

import shapejit


pytestmark = pytest.mark.usefixtures("fresh_shapejit")


def _counts(fn, *args):
    ex = shapejit.explain(fn, *args)
    return ex.graph_count, ex.graph_break_count


def test_returned_array_shares_input_memory():
    def f(x):
        return x.numpy(), x.numpy().T

    x = torch.randn(4, 3)
    a, at = shapejit.compile(f, fullgraph=True)(x)
    assert isinstance(a, np.ndarray) and a.dtype == np.float32 and at.shape == (3, 4)
    a[1, 2] = 42.0
    assert x[1, 2].item() == 42.0 and at[2, 1] == 42.0
    assert np.shares_memory(a, at)


def test_from_numpy_shares_array_memory():
    def f(x):
        a = np.exp(x.numpy())
        t = torch.from_numpy(a)
        return a, t, torch.from_numpy(x.numpy())

    x = torch.randn(5)
    a, t, tx = shapejit.compile(f, fullgraph=True)(x)
    t[0] = -1.0
    assert a[0] == -1.0
    tx[2] = 7.0
    assert x[2].item() == 7.0
    assert _counts(f, x) == (1, 0)


def test_write_through_array_is_seen_by_later_torch_ops():
    def f(x):
        y = x + 1
        a = y.numpy()
        a[:, 0] = 0.0
        return y.sum(dim=1), torch.from_numpy(a).max()

    x = torch.randn(6, 4)
    exp = f(x.clone())
    got = shapejit.compile(f, fullgraph=True)(x.clone())
    torch.testing.assert_close(got[0], exp[0])
    torch.testing.assert_close(got[1], exp[1])


@pytest.mark.parametrize("make,exc", [
    (lambda: torch.randn(3, requires_grad=True), RuntimeError),   # requires grad
    (lambda: torch.randn(3).bfloat16(), TypeError),               # numpy has no bfloat16
])
def test_numpy_errors_as_eager(make, exc):
    def f(x):
        return x.numpy() + 1

    with pytest.raises(exc):
        f(make())
    with pytest.raises(exc):
        shapejit.compile(f)(make())


def test_conj_bit_raises_as_eager():
    def f(x):
        return x.conj().numpy()

    x = torch.randn(3, dtype=torch.complex64)
    with pytest.raises(RuntimeError, match="conjugate"):
        shapejit.compile(f)(x)


def test_complex_numpy_breaks_and_matches_eager():
    def f(x):
        return x.numpy() * 2

    x = torch.randn(3, dtype=torch.complex64)
    np.testing.assert_array_equal(shapejit.compile(f)(x), f(x))


def test_from_numpy_errors_as_eager():
    def scalar(x):
        return torch.from_numpy(np.sum(x.numpy()))   # a numpy scalar, not an array

    def negative_strides(x):
        return torch.from_numpy(x.numpy()[::-1]) + 1

    x = torch.randn(4, 3)
    with pytest.raises(TypeError, match="expected np.ndarray"):
        shapejit.compile(scalar)(x)
    with pytest.raises(ValueError, match="negative"):
        shapejit.compile(negative_strides)(x)


def test_negative_strides_after_a_write_raise_once():
    def f(x):
        x.add_(1)
        return torch.from_numpy(x.numpy()[::-1])

    x = torch.zeros(4)
    with pytest.raises(ValueError, match="negative"):
        shapejit.compile(f)(x)
    assert torch.equal(x, torch.ones(4))   # written once, as eager writes it before raising


def test_force_breaks_and_detaches():
    def f(x):
        return x.numpy(force=True) + 1

    x = torch.randn(3, requires_grad=True)
    np.testing.assert_array_equal(shapejit.compile(f)(x), f(x))


def test_asarray_of_tensor_shares_memory_and_raises_as_eager():
    def f(x):
        return np.asarray(x)

    x = torch.randn(3)
    a = shapejit.compile(f)(x)
    a[1] = 5.0
    assert x[1].item() == 5.0
    with pytest.raises(RuntimeError, match="requires grad"):
        shapejit.compile(f)(torch.randn(3, requires_grad=True))
