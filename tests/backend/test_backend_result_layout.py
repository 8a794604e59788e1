"""The layout of a pointwise kernel's results (backend/step_kernel.c result_layout,
layout.c): eager's TensorIterator lays a result out in its inputs' memory order (a
transposed input gives a transposed result, channels-last gives channels-last, the first
input decides where they differ, broadcast dims do not count), and the kernel's results
must have the same strides, computed by a kernel that walks memory in that order.

Single ops over random layouts (permuted, channels-last, sliced, broadcast, with
size-1 dims, empty ones) and chains (mixed layouts meeting midway, masked_fill's row-major
clone, clone and casts keeping a dense layout) compare every stride with eager's, size-1
dims' included (those depend on whether a Python number is among an op's operands)."""
import random

import pytest
import torch

import shapejit
from shapejit import _C
from lowering import close as _close_values
from lowering import lowering as _lowering

pytestmark = pytest.mark.usefixtures("fresh_shapejit")


def _stats(made, key):
    return sum(m.stats.get(key, 0) for m in made if isinstance(m, _C.CompiledGraph))


def _check(fn, *args):
    backend, made = _lowering()
    compiled = shapejit.compile(fn, backend=backend)
    for _ in range(2):
        got, want = compiled(*args), fn(*args)
        got = got if isinstance(got, tuple) else (got,)
        want = want if isinstance(want, tuple) else (want,)
        for g, w in zip(got, want):
            _close_values(g, w)
            if w.numel():   # (an empty tensor places no element: eager's strides vary)
                assert g.stride() == w.stride(), (g.shape, g.stride(), w.stride())
    assert _stats(made, "kernel_calls") >= 2 and _stats(made, "eager_fallbacks") == 0
    return made


def _random_order(rng, shape):
    """A random memory order for `shape`, maybe with a gap (a slice) in the innermost dim:
    the physical shape to allocate, whether to cut the gap, and the permutation back."""
    r = len(shape)
    order = list(range(r))
    rng.shuffle(order)
    gap = rng.random() < 0.3
    phys = [shape[d] + (1 if gap and i == r - 1 else 0) for i, d in enumerate(order)]
    return phys, (shape[order[-1]] if gap else None), [order.index(d) for d in range(r)]


def _random_layout(rng, shape):
    """A tensor of `shape` laid out in a random dim order, maybe with a gap (a slice)."""
    phys, cut, inv = _random_order(rng, shape)
    t = torch.randn(*phys)
    if cut is not None:
        t = t[..., :cut]
    return t.permute(*inv)


def _random_shape(rng, r):
    return [rng.choice([0, 1, 2, 3, 5, 8] if rng.random() < 0.1 else [1, 2, 3, 5, 8]) for _ in range(r)]


@pytest.mark.parametrize("seed", range(60))
def test_binary_random_layouts(seed):
    rng = random.Random(seed)
    r = rng.randint(2, 4)
    shape = _random_shape(rng, r)
    a = _random_layout(rng, shape)
    # the other operand: same shape, broadcast (dims of 1, fewer dims) or a scalar
    kind = rng.choice(["same", "same", "bcast", "lower", "scalar"])
    if kind == "same":
        b = _random_layout(rng, shape)
    elif kind == "bcast":
        bs = [s if rng.random() < 0.5 else 1 for s in shape]
        b = _random_layout(rng, bs)
    elif kind == "lower":
        b = _random_layout(rng, shape[rng.randint(1, r - 1):])
    else:
        b = torch.randn(())
    op = rng.choice([torch.add, torch.mul, torch.maximum, torch.sub])
    if rng.random() < 0.5:
        _check(lambda a, b: op(a, b), a, b)
    else:
        _check(lambda a, b: op(b, a), a, b)


@pytest.mark.parametrize("seed", range(30))
def test_unary_random_layouts(seed):
    rng = random.Random(1000 + seed)
    r = rng.randint(2, 5)
    a = _random_layout(rng, _random_shape(rng, r))
    fn = rng.choice([lambda a: torch.relu(a), lambda a: a * 2.0 + 1.0, lambda a: torch.exp(a) > 1.5,
                     lambda a: torch.nn.functional.gelu(a)])
    _check(fn, a)


def test_channels_last_chain():
    """ConvNeXt's residual: x (channels-last) + y.permute(0, 3, 1, 2) (an NHWC result seen
    as NCHW), after a scale: channels-last throughout, as eager."""
    x = torch.randn(2, 16, 8, 8).to(memory_format=torch.channels_last)
    y = torch.randn(2, 8, 8, 16)
    g = torch.randn(16)
    _check(lambda x, y, g: x + (g * y).permute(0, 3, 1, 2), x, y, g)


def test_transposed_inputs_keep_their_order():
    """q = x.transpose(1, 2) * scale: eager keeps the (B, S, H, D) memory order."""
    x = torch.randn(2, 7, 4, 16)
    _check(lambda x: x.transpose(1, 2) * 0.25, x)
    _check(lambda x: (x.transpose(1, 2) * 0.25, torch.relu(x).transpose(1, 2) + 1), x)


def test_mixed_layouts_first_input_decides():
    a = torch.randn(3, 5, 4).permute(2, 0, 1)   # (4, 3, 5) laid out (3, 5, 4)
    b = torch.randn(4, 3, 5)
    _check(lambda a, b: a + b, a, b)
    _check(lambda a, b: b + a, a, b)


@pytest.mark.parametrize("seed", range(30))
def test_chains_random_layouts(seed):
    """Three inputs of random layouts through a chain: each op's result laid out as eager's
    op by op (where inputs of different layouts meet midway, a masked_fill's clone)."""
    rng = random.Random(2000 + seed)
    shape = _random_shape(rng, rng.randint(2, 4))
    a, b, c = (_random_layout(rng, shape) for _ in range(3))
    fns = [lambda a, b, c: (a * 2 + b) * c,
           lambda a, b, c: c + torch.relu(a - b),
           lambda a, b, c: torch.where(a > 0, b, c) * 3,
           lambda a, b, c: (a.masked_fill(b > 0, 1.0) + c, c + a.masked_fill(b > 0, 1.0)),
           lambda a, b, c: (a.clone() * b, (a + b).to(torch.float64) + c),
           lambda a, b, c: ((a + b) * c, a + b)]
    _check(rng.choice(fns), a, b, c)


def test_ambiguous_size_one_dims():
    x = torch.randn(2, 1, 1, 4).permute(0, 3, 1, 2)   # (2, 4, 1, 1) channels-last strides
    _check(lambda x: x * 3.0, x)
    _check(lambda x, y: x + y, x, torch.randn(2, 4, 1, 1))


def _np_random_layout(rng, shape):
    """An array of `shape` in a random axis order, maybe with a gap or a reversed axis."""
    import numpy as np
    phys, cut, inv = _random_order(rng, shape)
    t = np.random.default_rng(rng.randrange(1 << 30)).standard_normal(phys)
    if cut is not None:
        t = t[..., :cut]
    t = t.transpose(inv)
    if rng.random() < 0.15:
        flip = [slice(None)] * len(shape)
        flip[rng.randrange(len(shape))] = slice(None, None, -1)
        t = t[tuple(flip)]
    return t


def _np_forms():
    import numpy as np
    return {
        "add": lambda a, b: a + b,
        "sin_scale_add": lambda a, b: np.sin(a) * 2.0 + b,
        "where": lambda a, b: np.where(a > 0, a, b),
        "astype": lambda a, b: (a * 2).astype(np.float32) + 1,
        "copy_K": lambda a, b: np.copy(a * 2) - b,
        "copy_method_C": lambda a, b: (a * 2).copy() - b,
        "other_first": lambda a, b: (b - a) * a,
        "unary": lambda a, b: np.exp(a) + 1.0,
        "two_outputs": lambda a, b: (a + b, np.abs(a)),
        "compare": lambda a, b: a > b,
        "int_cast_mixed": lambda a, b: (a * 3).astype(np.int32) + b,
        "where_number": lambda a, b: np.where(b > 0.5, a, 0.0),
        "float32_float64": lambda a, b: a.astype(np.float32) * b,
        "maximum_np_scalar": lambda a, b: np.maximum(a, b) * np.float32(2),
        "clip": lambda a, b: np.clip(a, -0.5, 0.5) + b,
        "logical": lambda a, b: np.logical_and(a > 0, b < 0),
    }


@pytest.mark.parametrize("form", sorted(_np_forms()))
@pytest.mark.parametrize("seed", range(12))
def test_numpy_order_k_random_layouts(form, seed):
    """numpy's order 'K': a ufunc's or np.where's result follows its inputs' memory order
    (the trivial loop's C or F order, else the iterator's axis order, size-1 axes
    included), astype and np.copy keep the input's order, ndarray.copy is C; every stride
    equals numpy's and each result owns its memory. An operand the loop converts (int32 +
    float64) rules out numpy's trivial loop, and np.where always runs numpy's iterator: both
    differ from the trivial loop in the strides of size-1 axes."""
    import numpy as np
    fn = _np_forms()[form]
    rng = random.Random(seed * 7 + len(form))
    r = rng.choice([2, 3, 4, 5])
    shape = [rng.choice([1, 2, 3, 5]) for _ in range(r)]
    a = _np_random_layout(rng, shape)
    bshape = [1 if rng.random() < 0.25 else s for s in shape][rng.randrange(0, 2):]
    b = _np_random_layout(rng, bshape)
    backend, made = _lowering()
    compiled = shapejit.compile(fn, backend=backend, dynamic=False)
    for _ in range(2):
        got, want = compiled(a, b), fn(a, b)
        got = got if isinstance(got, tuple) else (got,)
        want = want if isinstance(want, tuple) else (want,)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=1e-6)
            assert g.strides == w.strides, (form, a.shape, a.strides, b.shape, b.strides, g.strides, w.strides)
            assert g.flags.owndata
    assert _stats(made, "kernel_calls") >= 2 and _stats(made, "eager_fallbacks") == 0


def test_numpy_fortran_inputs_keep_their_order():
    import numpy as np
    a = np.asfortranarray(np.random.rand(64, 48))
    b = np.random.rand(48, 64).T
    got = _check_np(lambda a, b: np.tanh(a) * b + 1.0, a, b)
    assert got.flags.f_contiguous and not got.flags.c_contiguous


def test_numpy_converted_operand_takes_the_iterator():
    # (2, 5, 1) Fortran-ordered: numpy's trivial loop would give the size-1 axis stride 80,
    # but an int32 operand converted to float64 sends the ufunc through its iterator (8)
    import numpy as np
    a = np.zeros((1, 5, 2)).transpose(2, 1, 0) + np.arange(10.0).reshape(2, 5, 1)
    a = np.asfortranarray(a)
    got = _check_np(lambda a: (a * 3).astype(np.int32) + a, a)
    assert got.strides == (8, 16, 8)
    got = _check_np(lambda a: a * 3 + a, a)   # no conversion: the trivial loop's F order
    assert got.strides == (8, 16, 80)


def _check_np(fn, *args):
    import numpy as np
    backend, made = _lowering()
    got = shapejit.compile(fn, backend=backend)(*args)
    want = fn(*args)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert got.strides == want.strides
    assert _stats(made, "kernel_calls") >= 1
    return got


def test_ops_with_their_own_layout_rule():
    """Ops eager does not lay out by TensorIterator's rule alone: clone and casts of a
    non-dense input (dense in its order), operands of another dtype (converted first, so
    an expanded one counts as dense), a number to a tensor's power (row-major), relu6 and
    hardtanh (empty_like of the input), and a kernel of more than a few dozen nodes."""
    strided = torch.randn(6, 4)[::2].t()
    _check(lambda x: (x.to(torch.float64) * 2, x.clone() + 1), strided)
    _check(lambda b, x: b * x + 1, torch.randn(2).expand(5, 2), torch.randn(2, 5, dtype=torch.float64).t())
    _check(lambda i, x: i / x, torch.randint(0, 5, (3,)).expand(4, 3), torch.randn(3, 4).t())
    cl = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    _check(lambda x: 2 ** (x * 1), torch.randn(4, 3).t())
    _check(lambda x: 2 ** (x * 1), cl)
    _check(lambda x: torch.nn.functional.relu6(x * 1), torch.randn(3, 1, 4).as_strided((3, 1, 4), (4, 1, 1)))
    _check(lambda x: torch.nn.functional.hardtanh(x.t() + 0), torch.randn(4, 6))

    def long_chain(x):
        for _ in range(60):
            x = x * 1.001 + 0.001
        return x
    _check(long_chain, cl)


@pytest.mark.parametrize("seed", range(40))
def test_mixed_dtypes_and_expanded_random(seed):
    rng = random.Random(3000 + seed)
    shape = _random_shape(rng, rng.randint(2, 4))
    a = _random_layout(rng, shape)
    b = _random_layout(rng, [s if rng.random() < 0.5 else 1 for s in shape]).expand(*shape)
    if rng.random() < 0.5:
        b = b.to(torch.float64)
    c = _random_layout(rng, shape).to(rng.choice([torch.float64, torch.int64, torch.float32]))
    fn = rng.choice([lambda a, b, c: a * b + c, lambda a, b, c: (c - b) * a, lambda a, b, c: torch.where(a > 0, b, c),
                     lambda a, b, c: (a.to(torch.float64) + b.clone(), c.clone() * 2)])
    _check(fn, a, b, c)


def _rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


ROW_FORMS = {
    # an RMS norm's result is pointwise arithmetic on x: x's order, as TensorIterator's
    "rms": lambda x, w: _rms(x, w),
    "rms_epilogue": lambda x, w: torch.tanh(_rms(x, w)) * 2.0,
    # values a row or reduction kernel's prologue stores beside its row-major result
    "residual_layer_norm": lambda x, w: (lambda h: (torch.nn.functional.layer_norm(h, (h.shape[-1],), w), h * 2.0))(
        x + w),
    "residual_softmax": lambda x, w: (lambda h: (torch.softmax(h, -1), h - 1.0))(x * w),
    "sum_prologue": lambda x, w: (lambda h: (h.sum(-1), h + 1.0))(x * w),
    "sum_keepdim_prologue": lambda x, w: (lambda h: (h.sum(-1, keepdim=True), h + 1.0))(x * w),
    "mean_first_dim_prologue": lambda x, w: (lambda h: (h.mean(0), torch.exp(h)))(x - w),
    "amax_prologue": lambda x, w: (lambda h: (h.amax(1, keepdim=True), h * 0.5))(x + w),
}


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("form", sorted(ROW_FORMS))
def test_row_and_reduction_kernels_store_in_eager_layout(form, seed):
    """Reduction and row kernels: a full-size value they store (the pointwise prologue a
    later op reads again, an RMS norm's result and its epilogue) has eager's layout for
    inputs of random layout, while reduced results and softmax/layer_norm rows stay
    row-major as torch allocates them; every stride and value equals eager's."""
    rng = random.Random(seed * 31 + len(form))
    shape = [rng.choice([2, 3, 5]) for _ in range(rng.choice([2, 3, 4]))]
    x = _random_layout(rng, shape)
    w = torch.randn(shape[-1])
    made = _check(ROW_FORMS[form], x, w)
    assert any(m.stats["kernels"] for m in made if isinstance(m, _C.CompiledGraph))
