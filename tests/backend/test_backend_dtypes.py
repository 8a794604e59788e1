"""Generated kernels beyond float32: float64, int64, int32 and bool operands and
results, mixed graphs (int tensor with a Python float, int with float tensors, bool masks),
comparisons feeding where/masked_fill, Python's floor rules for // and % with negative
operands, reductions in their output dtype, casts. Compared with eager exactly (ints and
bools equal, float64 rtol 1e-12, float32 rtol 1e-5) over sizes 0, 1 and odd, non-contiguous
and broadcast inputs, torch and numpy; every graph here must run as kernels only (no eager
step, no fallback)."""
import warnings

import numpy as np
import pytest
import torch

import shapejit
from shapejit import _C
from lowering import lowering as _lowering   # a backend that lowers and keeps what it made

pytestmark = pytest.mark.usefixtures("fresh_shapejit")


def _same(got, want):
    """Same types, dtypes and shapes; equal values for ints and bools, float64 to rtol
    1e-12, float32 to rtol 1e-5."""
    if isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
        return
    assert type(got) is type(want)
    if isinstance(want, torch.Tensor):   # laid out as eager's where strides place elements
        assert got.dtype == want.dtype
        assert [st for n, st in zip(got.shape, got.stride()) if n != 1] == \
            [st for n, st in zip(want.shape, want.stride()) if n != 1]
        got, want = got.numpy(), want.numpy()
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
    else:
        rtol, atol = (1e-12, 1e-14) if want.dtype == np.float64 else (1e-5, 1e-6)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)


def _stats(made):
    cgs = [m for m in made if isinstance(m, _C.CompiledGraph)]
    assert cgs, "nothing lowered"
    return {k: sum(m.stats[k] for m in cgs) for k in ("kernels", "steps", "kernel_calls", "eager_fallbacks")}


def _run(fn, *args):
    """fn compiled against eager: equal results, and every step a kernel that ran."""
    backend, made = _lowering()
    _same(shapejit.compile(fn, backend=backend)(*args), fn(*args))
    st = _stats(made)
    assert st["kernels"] >= 1 and st["steps"] == st["kernels"], st
    assert st["kernel_calls"] >= 1 and st["eager_fallbacks"] == 0, st
    return st


# ------------------------------------------------------------------ inputs ----

_GEN = torch.Generator().manual_seed(6)


def _ints(shape, dtype=torch.int64, lo=-40, hi=40):
    return torch.randint(lo, hi, shape, generator=_GEN, dtype=dtype)


def _divisors(shape, dtype=torch.int64):
    """Nonzero, both signs."""
    mag = torch.randint(1, 7, shape, generator=_GEN, dtype=dtype)
    return torch.where(torch.rand(shape, generator=_GEN) < 0.5, -mag, mag)


def _floats(shape, dtype=torch.float32):
    return torch.randn(shape, generator=_GEN, dtype=dtype)


def _layout(t, how):
    """t as given, transposed (same values, non-contiguous) or every other element."""
    if how == "t" and t.dim() >= 2:
        return t.mT.contiguous().mT
    if how == "step" and t.dim() >= 1:
        wide = torch.repeat_interleave(t, 2, dim=-1)
        return wide[..., ::2]
    return t


SHAPES = [(0,), (1,), (7,), (5, 3), (3, 1, 4)]
LAYOUTS = ["dense", "t", "step"]
CASES = [(s, l) for s in SHAPES for l in LAYOUTS if l == "dense" or len(s) >= 2]


# ------------------------------------------------------------------- torch ----

def int_arith(x, y):
    return (x + y * 3 - 2, torch.sub(x, y, alpha=2), x * y, -x, torch.abs(x), torch.square(x),
            torch.maximum(x, y), torch.minimum(x, y), torch.clamp(x, -5, 7), torch.clamp(x, min=0),
            torch.relu(x), x & y, x | y, x ^ y, ~x)


def int_div(x, y):
    return x // y, x % y, torch.fmod(x, y), torch.floor_divide(x, -3), torch.remainder(x, 4), x % -5


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("shape,layout", CASES)
def test_torch_ints(dtype, shape, layout):
    x, y = _layout(_ints(shape, dtype), layout), _layout(_ints(shape, dtype), layout)
    _run(int_arith, x, y)
    _run(int_div, x, _layout(_divisors(shape, dtype), layout))


def test_torch_int_broadcast_and_promotion():
    x, y = _ints((5, 4), torch.int32), _ints((4,), torch.int64)
    # int32 with int64 -> int64; int32 with a Python int stays int32
    _run(lambda x, y: (x + y, x * 3 - 1, x // 2, torch.maximum(x, y)), x, y)
    _run(lambda x, y: (x - y, y % 3, x & 5), x, y)


def mixed(x, f):
    return (x * 0.5 + 1, x + f, x / (x.abs() + 1), torch.exp(x * 0.1), x.float() * f, x - 0.25 * f,
            torch.sqrt(x.abs()), x.double() / 3)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("shape,layout", CASES)
def test_torch_int_with_floats(dtype, shape, layout):
    """int tensor + Python float -> float32 (the default dtype); int + float32 tensor ->
    float32; int / int -> float32."""
    _run(mixed, _layout(_ints(shape, dtype), layout), _layout(_floats(shape), layout))


def f64_chain(x, y):
    z = torch.tanh(x) * torch.exp(-x) + torch.sigmoid(y)
    return (z, x // y, x % y, torch.fmod(x, y), torch.sqrt(x.abs() + 1) * torch.log1p(y.abs()),
            torch.atan2(x, y), torch.clamp(x, -0.5), torch.maximum(x, y), torch.nn.functional.gelu(x),
            x ** 2, torch.pow(x.abs(), 1.5), torch.floor(x * 3) - torch.trunc(y * 2))


@pytest.mark.parametrize("shape,layout", CASES)
def test_torch_float64(shape, layout):
    x, y = _layout(_floats(shape, torch.float64), layout), _layout(_floats(shape, torch.float64), layout)
    _run(f64_chain, x, y)


def test_torch_float64_mixed_with_float32():
    """float32 with float64 tensors computes in float64; a 0-d float64 tensor does not
    promote a dimensioned float32 one (torch)."""
    x, d = _floats((6, 5)), _floats((6, 5), torch.float64)
    _run(lambda x, d: (x + d, x * d - 1.5, torch.exp(d) / x), x, d)
    _run(lambda x, s: x * s + 1, x, torch.tensor(2.5, dtype=torch.float64))


def test_float_floor_rules():
    x = torch.tensor([7.0, -7.0, 7.0, -7.0, 5.5, -5.5, 0.0, -0.0, 1.0, -1.0, float("inf"), float("nan")])
    y = torch.tensor([2.0, 2.0, -2.0, -2.0, -2.0, 2.0, 3.0, -3.0, 0.0, 0.0, 2.0, 1.0])
    for dt in (torch.float32, torch.float64):
        _run(lambda x, y: (x // y, x % y, torch.fmod(x, y)), x.to(dt), y.to(dt))
    with np.errstate(all="ignore"):
        _run(lambda x, y: (x // y, x % y, np.fmod(x, y)), x.numpy(), y.numpy())
        _run(lambda x, y: (x // y, x % y), x.double().numpy(), y.double().numpy())


def masks(x, y):
    m = (x > 0.5) & (y <= x)
    return (torch.where(m, x, y * 2), torch.where(x > 0, x, 0.0), x.masked_fill(m, -1.0), ~m,
            torch.logical_not(m), m ^ (x == y), torch.logical_and(x, y), torch.logical_or(m, y < 0),
            x != y, x >= 0, torch.isnan(x / y), torch.isfinite(x / y), m | (x < -1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32])
@pytest.mark.parametrize("shape,layout", CASES)
def test_torch_masks(dtype, shape, layout):
    make = _floats if dtype.is_floating_point else _ints
    x, y = _layout(make(shape, dtype), layout), _layout(make(shape, dtype), layout)
    if not dtype.is_floating_point:
        y = torch.where(y == 0, torch.ones_like(y), y)   # x / y: no 0 / 0
    _run(masks, x, y)


def test_torch_where_mixed_and_casts():
    x, i, m = _floats((4, 6)), _ints((4, 6)), _floats((4, 6)) > 0
    _run(lambda x, i, m: (torch.where(m, x, i), torch.where(m, i, 2), torch.where(m, i, 2.5),
                          i.masked_fill(m, 3), m.float(), m.int() * 3, x.long(), i.double(), x.to(torch.float64),
                          m.sum(1), (i > 0).sum()), x, i, m)


def test_torch_bools():
    a, b = _floats((9, 2)) > 0, _floats((9, 2)) > 0.3
    _run(lambda a, b: (a & b, a | b, a ^ b, ~a, torch.maximum(a, b), torch.minimum(a, b), a == b, a > b,
                       torch.where(a, b, False)), a, b)


def reductions(x, y, m):
    return (x.sum(), x.sum(1), x.sum((0, 1), keepdim=True), y.sum(0), x.amax(1), y.amin(0), m.sum(1),
            torch.sum(m), y.double().mean(1), x.amax(), y.sum(-1, dtype=torch.float64), (x * y + 1).sum(0))


@pytest.mark.parametrize("shape", [(5, 7), (1, 9), (6, 1), (3, 4, 5)])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_torch_int_reductions(shape, dtype):
    """torch sums int32 and bool to int64; amax/amin keep the dtype."""
    x, y, m = _ints(shape, dtype), _ints(shape, torch.int64), _floats(shape) > 0
    _run(reductions, x, y, m)


@pytest.mark.parametrize("shape", [(5, 7), (0, 3), (1, 9), (3, 4, 5)])
def test_torch_float64_reductions(shape):
    x = _floats(shape, torch.float64)
    fn = (lambda x: (x.sum(1), x.mean(0), (x * x).sum(-1, keepdim=True), torch.exp(x).mean())) if 0 in shape else \
        (lambda x: (x.sum(1), x.mean(0), x.amax(-1), x.amin(0), (x * x).sum(-1, keepdim=True), torch.exp(x).mean()))
    _run(fn, x)
    big = _floats((3, 100003), torch.float64)
    _run(lambda x: (x.sum(1), x.mean(1)), big)


def test_torch_int_division_by_zero_as_eager():
    """A zero divisor: eager's ZeroDivisionError, through the eager fallback."""
    x, y = _ints((4, 5)), _divisors((4, 5))
    y[2, 3] = 0
    backend, made = _lowering()
    g = shapejit.compile(lambda x, y: (x // y) + 1, backend=backend)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        g(x, y)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        torch.remainder(x, y)
    assert _stats(made)["eager_fallbacks"] == 1
    y[2, 3] = 1
    _same(g(x, y), (x // y) + 1)
    # INT64_MIN // -1 wraps as eager does (eager computes it)
    lo = torch.tensor([-2 ** 63, 5], dtype=torch.int64)
    _same(g(lo, torch.tensor([-1, -1])), lo // torch.tensor([-1, -1]) + 1)


def test_numbers_beyond_the_type_stay_eager():
    """An int32 tensor compared with 2**40 (numpy and torch do not wrap it) and a float
    fill of an int tensor: those nodes run eagerly."""
    x = _ints((3, 4), torch.int32)
    backend, made = _lowering()
    fn = shapejit.compile(lambda x: (x < 2 ** 40, x.masked_fill(x > 0, 2.5)), backend=backend)
    _same(fn(x), (x < 2 ** 40, x.masked_fill(x > 0, 2.5)))
    xn = x.numpy()
    fn = shapejit.compile(lambda x: x < 2 ** 40, backend=backend)
    _same(fn(xn), xn < 2 ** 40)
    assert sum(m.stats["eager_fallbacks"] for m in made if isinstance(m, _C.CompiledGraph)) == 0


def test_int_sources_are_readable():
    x = _ints((7, 5), torch.int32)
    backend, made = _lowering()
    shapejit.compile(lambda x: (x // 3) * 2, backend=backend)(x)
    s = made[0].source
    assert "int32_t" in s and "sj_ifloordiv" in s and "float" not in s.split("_part(", 1)[1]


# ------------------------------------------------------------------- numpy ----

_RNG = np.random.default_rng(6)


def _np_layout(a, layout):
    """a as given, transposed in memory (same values) or every other element."""
    if layout == "t" and a.ndim >= 2:
        return np.ascontiguousarray(np.swapaxes(a, -1, -2)).swapaxes(-1, -2)
    if layout == "step" and a.ndim >= 1:
        return np.repeat(a, 2, axis=-1)[..., ::2]
    return a


def _np(shape, dtype, layout="dense"):
    if np.dtype(dtype).kind == "f":
        a = _RNG.standard_normal(shape).astype(dtype)
    elif np.dtype(dtype).kind == "b":
        a = _RNG.standard_normal(shape) > 0
    else:
        a = _RNG.integers(-40, 40, shape).astype(dtype)
    return _np_layout(a, layout)


def _np_div(shape, dtype, layout):
    """Nonzero divisors of both signs."""
    d = _RNG.integers(1, 7, shape).astype(dtype) * np.where(_RNG.standard_normal(shape) < 0, -1, 1).astype(dtype)
    return _np_layout(d, layout)


def np_ints(x, y, d):
    return (x + y * 3 - 2, x * y, -x, np.abs(x), x // d, x % d, np.fmod(x, d), np.maximum(x, y),
            np.minimum(x, 7), np.clip(x, -5, 7), x & y, x | y, ~x, np.floor_divide(x, -3), x % -5)


def np_mixed(x, f):
    return (x * 2.5 + 1, x + f, x / 3, np.exp(x * 0.1), x.astype(np.float64) * 0.5, np.sqrt(np.abs(x)),
            np.where(x > 0, x, f), np.where(x > 0, x, 0), x > 1.5, np.logical_and(x > 0, f > 0),
            np.logical_not(x), np.logical_xor(x > 0, f < 0), np.isnan(f), x == f)


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
@pytest.mark.parametrize("shape,layout", CASES)
def test_numpy_ints(dtype, shape, layout):
    """NEP 50: int32 with a Python int stays int32, int with a Python float is float64,
    int32 / int32 is float64; int32 with a float32 array is float64."""
    x, y = _np(shape, dtype, layout), _np(shape, dtype, layout)
    _run(np_ints, x, y, _np_div(shape, dtype, layout))
    _run(np_mixed, x, _np(shape, np.float32, layout))
    _run(np_mixed, x, _np(shape, np.float64, layout))


def test_numpy_float64_and_broadcast():
    x, y = _np((6, 5), np.float64), _np((5,), np.float64)
    _run(lambda x, y: (np.tanh(x) * np.exp(-y) + y, x // y, x % y, np.maximum(x, y), np.where(x > y, x, y ** 2)),
         x, y)
    f, i = _np((6, 1), np.float32), _np((5,), np.int32)
    _run(lambda f, i: (f + i, f * 2.0, i // 2, f > i), f, i)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.float64, np.bool_])
def test_numpy_reductions(dtype):
    """numpy sums int32 and bool to int64 (this platform), means ints in float64."""
    x = _np((5, 7), dtype)
    if dtype == np.bool_:
        _run(lambda x: (x.sum(axis=0), np.sum(x, axis=1, keepdims=True)), x)
        return
    _run(lambda x: (x.sum(axis=0), np.sum(x, axis=1, keepdims=True), x.mean(axis=1), np.max(x, axis=0),
                    x.min(axis=1), (x * 2).sum(axis=(0, 1), keepdims=True)), x)


def test_numpy_int_division_by_zero_as_eager():
    """numpy gives 0 and warns: the kernel hands such a call to eager, which does both."""
    x, y = _np((3, 4), np.int64), _np_div((3, 4), np.int64, "dense")
    y[1, 2] = 0
    backend, made = _lowering()
    g = shapejit.compile(lambda x, y: (x // y, x % y), backend=backend)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got = g(x, y)
    assert any("divide by zero" in str(m.message) for m in w)
    with np.errstate(divide="ignore"):
        _same(got, (x // y, x % y))
    assert _stats(made)["eager_fallbacks"] == 1


def test_torch_zero_dim():
    """0-d tensors of each dtype, alone and broadcast against a vector."""
    i, f, d, m = torch.tensor(-7), torch.tensor(2.5), torch.tensor(-1.25, dtype=torch.float64), torch.tensor(True)
    v = _ints((5,), torch.int32)
    _run(lambda i, f, d, m, v: (i // 2, i % 3, i * f, d * 2 + i, torch.where(m, i, v), m & (v > 0), v + i, v * d),
         i, f, d, m, v)
