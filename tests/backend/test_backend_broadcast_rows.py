"""Strided kernels (operands that broadcast or are not contiguous) walk their outer dims
with an odometer from each thread's first row: short rows (a broadcast outer product's
last dim of a few elements, as in a state-space model's discretisation) over many outer
rows, odd sizes, several outer dims, and two threads splitting the rows, compared with
eager."""
import pytest
import torch

import shapejit
from lowering import lowering, close

pytestmark = pytest.mark.usefixtures("fresh_shapejit")


def _kernel_calls(made):
    stats = [getattr(m, "stats", {}) for m in made]
    assert sum(st.get("eager_fallbacks", 0) for st in stats) == 0
    return sum(st.get("kernel_calls", 0) for st in stats)


CASES = [
    # (A's shape, dt's shape): exp(A[None, :, None, :] * dt[..., None]) and friends
    ((128, 8), (2, 128, 32)),
    ((5, 3), (3, 5, 7)),
    ((64, 16), (4, 64, 33)),
    ((1, 1), (1, 1, 1)),
    ((130, 2), (2, 130, 129)),   # over 32768 elements: the threaded path when allowed
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("a_shape,dt_shape", CASES)
def test_outer_products_with_short_rows(threads, a_shape, dt_shape):
    def f(a, dt, b):
        da = torch.exp(a[None, :, None, :] * dt[:, :, :, None])
        db = dt[:, :, :, None] * b[:, None, :, :]
        return da * 2 + db, (da.transpose(1, 2) + 1).sin()

    a, dt = -torch.rand(*a_shape), torch.rand(*dt_shape)
    b = torch.randn(dt_shape[0], dt_shape[2], a_shape[1])
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        backend, made = lowering()
        got = shapejit.compile(f, backend=backend)(a, dt, b)
    finally:
        torch.set_num_threads(before)
    close(got, f(a, dt, b))
    assert _kernel_calls(made) >= 1


def test_permuted_inputs_rank_five():
    def f(x, y):
        return (x.permute(4, 2, 0, 3, 1) * y[:, None, :, None, :]).relu()

    x, y = torch.randn(3, 2, 5, 4, 6), torch.randn(6, 3, 2)
    backend, made = lowering()
    close(shapejit.compile(f, backend=backend)(x, y), f(x, y))
