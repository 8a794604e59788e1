"""Concatenation in the cpu backend: torch.cat / concat / concatenate and
numpy.concatenate of same-dtype tensors along one dim run as a copy step into a new
contiguous output, compared with eager over sizes 0, 1 and odd, negative dims,
non-contiguous and broadcast-produced inputs, every kernel dtype and dynamic sizes; forms
it does not take (mixed dtypes, axis=None, out=) run eagerly."""
import numpy as np
import pytest
import torch

import shapejit
from lowering import lowering as _lowering

pytestmark = pytest.mark.usefixtures("fresh_shapejit")


def _stats(made):
    return {k: sum(getattr(m, "stats", {}).get(k, 0) for m in made) for k in ("cat_steps", "cat_calls", "cat_fallbacks")}


def _check(fn, *args, steps=1):
    backend, made = _lowering()
    got = shapejit.compile(fn, backend=backend)(*args)
    want = fn(*args)
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor) and got.dtype == want.dtype and got.is_contiguous()
        assert torch.equal(got, want)
    else:
        assert isinstance(got, np.ndarray) and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    st = _stats(made)
    assert st["cat_steps"] == steps and st["cat_fallbacks"] == 0, st
    return made


CASES = [
    ([(2, 3), (4, 3)], 0), ([(2, 3), (2, 5), (2, 1)], 1), ([(2, 3), (2, 0)], -1),
    ([(0, 4), (0, 4)], 0), ([(1,), (7,), (0,), (3,)], 0), ([(2, 3, 5), (2, 1, 5)], -2),
    ([(3, 1, 2, 2)] * 5, 0), ([(1, 1)], 1),
]


@pytest.mark.parametrize("shapes,dim", CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32, torch.bool])
def test_torch_cat(shapes, dim, dtype):
    ts = [(torch.randn(*s) * 10).to(dtype) for s in shapes]
    _check(lambda *ts: torch.cat(ts, dim), *ts)


def test_forms_and_non_contiguous_inputs():
    a = torch.randn(6, 8)
    b = torch.randn(8, 6).t()             # transposed
    c = torch.randn(6, 16)[:, ::2]        # strided
    d = torch.randn(6, 1).expand(6, 8)    # stride 0
    _check(lambda a, b, c, d: torch.cat([a, b, c, d], dim=1), a, b, c, d)
    _check(lambda a, b: torch.concat((a, b), dim=0), a, b)
    _check(lambda a, b: torch.concatenate([a, b], axis=-1), a, b)
    # a kernel's output and a pointwise consumer around the step
    _check(lambda a, b: torch.relu(torch.cat([a * 2, b], 0)) + 1, a, b)


def test_numpy_concatenate():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32)
    _check(lambda x, y: np.concatenate([x, y]), x, y)
    _check(lambda x, y: np.concatenate((x.T, y.T), axis=1), x, y)
    i, j = np.arange(6).reshape(2, 3), np.arange(9).reshape(3, 3)
    _check(lambda i, j: np.concatenate([i, j], axis=0), i, j)


def test_forms_left_to_eager():
    a, b = torch.randn(2, 3), torch.randn(2, 3, dtype=torch.float64)
    _check(lambda a, b: torch.cat([a, b]), a, b, steps=0)      # promotion
    x = np.ones((2, 2), np.float32)
    _check(lambda x: np.concatenate([x, x], axis=None), x, steps=0)   # flattens


def test_mismatched_sizes_raise_as_eager():
    backend, made = _lowering()
    fn = shapejit.compile(lambda a, b: torch.cat([a, b], 0), backend=backend, dynamic=True)
    assert fn(torch.randn(2, 3), torch.randn(4, 3)).shape == (6, 3)
    with pytest.raises(RuntimeError):
        fn(torch.randn(2, 3), torch.randn(4, 5))


def test_dynamic_sizes_one_plan():
    backend, made = _lowering()
    f = lambda a, b: torch.cat([a, b * 2], 1)   # noqa: E731
    fn = shapejit.compile(f, backend=backend, dynamic=True)
    for n, m in ((3, 4), (5, 7), (2, 9), (8, 3)):   # sizes 0 and 1 specialise (new graphs)
        a, b = torch.randn(n, m), torch.randn(n, m + 2)
        assert torch.equal(fn(a, b), f(a, b))
    assert len(made) == 1 and _stats(made)["cat_calls"] == 4


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32, torch.bool])
def test_transposed_inputs_every_item_size(dtype):
    # inputs whose last dim is strided are copied element by element (typed moves of 1, 4
    # or 8 bytes); a permuted 3-d input as well
    a = (torch.randn(9, 7) * 10).to(dtype).t()
    b = (torch.randn(3, 7) * 10).to(dtype).t()
    c = (torch.randn(5, 3, 4) * 10).to(dtype).permute(2, 1, 0)
    d = (torch.randn(2, 3, 4) * 10).to(dtype).permute(2, 1, 0)
    _check(lambda a, b: torch.cat([a, b], 1), a, b)
    _check(lambda c, d: torch.cat([c, d], -1), c, d)


STACKS = [([(2, 3)] * 3, 0), ([(2, 3)] * 2, 1), ([(2, 3)] * 4, 2), ([(2, 3)] * 2, -1), ([(4,)] * 5, 0),
          ([(2, 0)] * 3, 1), ([(1, 1)], 0), ([(2, 128, 8)] * 32, 2), ([(3, 4, 5)] * 2, -3)]


@pytest.mark.parametrize("shapes,dim", STACKS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_torch_stack(shapes, dim, dtype):
    """torch.stack runs as a cat step of the inputs unsqueezed at dim (the recurrences
    a scan unrolls end in one)."""
    ts = [(torch.randn(*s) * 10).to(dtype) for s in shapes]
    _check(lambda *ts: torch.stack(ts, dim), *ts)


def test_stack_of_strided_and_channels_last_inputs_keeps_eagers_layout():
    base = torch.randn(2, 5, 3, 4)
    xs = [base[:, i].permute(0, 2, 1) for i in range(3)]            # (2, 3, 5) strided
    cl = [torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)[:, :, 0] for _ in range(2)]
    for ts, dim in ((xs, 0), (xs, 3), (cl, 1), (cl, 3)):
        backend, made = _lowering()
        fn = lambda *ts: torch.stack(ts, dim)   # noqa: E731
        got, want = shapejit.compile(fn, backend=backend)(*ts), fn(*ts)
        assert torch.equal(got, want) and got.stride() == want.stride(), (dim, got.stride(), want.stride())
        st = _stats(made)
        assert st["cat_steps"] == 1 and st["cat_fallbacks"] == 0, st
        shapejit.reset()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool])
@pytest.mark.parametrize("case", ["every_two", "pieces", "mixed", "outer_gap", "many"])
def test_stack_along_an_inner_dim_of_strided_views(case, dtype):
    """Stacks along the last dim (or an inner one) of strided views and row-major results,
    where the rows before the cat dim merge into one loop or do not (a gap between
    rows, a transposed input): every element where eager puts it."""
    x = (torch.randn(4, 5, 4, 12) * 10).to(dtype)
    if case == "every_two":      # rotary embeddings' interleave: (-x[..., 1::2], x[..., ::2])
        fn = lambda x: torch.stack((x[..., 1::2] + x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)  # noqa: E731
    elif case == "pieces":       # blocks of 3 elements from strided views
        fn = lambda x: torch.stack((x[..., 0:3], x[..., 6:9], x[..., 3:6]), dim=-2)  # noqa: E731
    elif case == "mixed":        # a transposed view beside a row-major one
        fn = lambda x: torch.stack((x[:, :, :, :5].transpose(1, 2), x[:, :, :, 5:10].transpose(1, 2)), -1)  # noqa: E731
    elif case == "outer_gap":    # every other row of the outer dims
        fn = lambda x: torch.stack((x[::2, :, 1], x[1:, :, 2][::2]), dim=-1)  # noqa: E731
    else:                        # more inputs than dims
        fn = lambda x: torch.stack([x[..., i] for i in range(12)], dim=-1)  # noqa: E731
    _check(fn, x)


def test_stack_mismatched_sizes_raise_as_eager():
    backend, made = _lowering()
    fn = shapejit.compile(lambda a, b: torch.stack([a, b], 1), backend=backend, dynamic=True)
    assert fn(torch.randn(2, 3), torch.randn(2, 3)).shape == (2, 2, 3)
    with pytest.raises(RuntimeError):
        fn(torch.randn(2, 3), torch.randn(2, 4))
