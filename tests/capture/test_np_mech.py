"""numpy mechanisms (the corpus modules np_mech and t_npmix hold the default-knob cases):
boolean masks and nonzero under capture_dynamic_output_shape_ops (one graph, an unbacked
length, as torch.compile captures masked_select), the errors eager raises for bad masks,
ufunc methods and ufunc.at, and the dtypes only numpy has."""
import copy
import warnings

import numpy as np
import pytest
import torch

import shapejit
from unbacked_oracle import same, torch_graphs


pytestmark = pytest.mark.usefixtures("fresh_shapejit")

RNG = np.random.default_rng(7)


def _same_np(a, b):
    if isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b)
        for p, q in zip(a, b):
            _same_np(p, q)
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(a, b)
    else:
        assert type(a) is type(b) and a == b


def _run_both(fn, *args):
    want = fn(*copy.deepcopy(args))
    got = shapejit.compile(fn)(*copy.deepcopy(args))
    _same_np(got, want)
    return got


# ---- masks under capture_dynamic_output_shape_ops ----------------------------------------
def mask_chain(a):
    sel = a[a > 0.5]
    return sel * 2 + sel.shape[0], sel.sum()


def mask_rows(a, keep):
    return a[keep].mean(axis=0) * 2


def mask_assign_selected(a, b, m):
    a[m] = b[m] * 2
    return a


def mask_scale(a):
    a[a < 0] *= 2
    return a + 1


def where_one(a):
    r, c = np.where(a > 0)
    return r * 10 + c


def nonzero_flat(a):
    return np.flatnonzero(a > 0) + np.nonzero(a.ravel() > 0)[0]


def unique_counts(a):
    vals, counts = np.unique(a, return_counts=True)
    return vals * 2, counts.sum(), np.unique(a.ravel() % 3)


NP_CASES = [
    (unique_counts, lambda: (RNG.integers(0, 6, (4, 5)),)),
    (mask_chain, lambda: (RNG.standard_normal((4, 5)),)),
    (mask_rows, lambda: (RNG.standard_normal((6, 3)), np.array([1, 0, 1, 1, 0, 1], dtype=bool))),
    (mask_assign_selected, lambda: (RNG.standard_normal((4, 5)), RNG.standard_normal((4, 5)),
                                    RNG.random((4, 5)) > 0.5)),
    (mask_scale, lambda: (RNG.standard_normal((4, 5)),)),
    (where_one, lambda: (RNG.standard_normal((3, 4)),)),
    (nonzero_flat, lambda: (RNG.standard_normal((3, 4)),)),
]


@pytest.mark.parametrize("fn,make", NP_CASES, ids=[f.__name__ for f, _ in NP_CASES])
def test_numpy_masks_capture_with_the_knob(fn, make):
    args = make()
    with shapejit.config.patch(capture_dynamic_output_shape_ops=True):
        ex = shapejit.explain(fn)(*copy.deepcopy(args))
        assert (ex.graph_count, ex.graph_break_count) == (1, 0), ex.break_reasons
        shapejit.reset()
        cf = shapejit.compile(fn)
        for _ in range(2):   # new data, a new count: the same graph (the length is unbacked)
            args = make()
            _same_np(cf(*copy.deepcopy(args)), fn(*copy.deepcopy(args)))
        assert shapejit.stats()["graphs"] == 1


@pytest.mark.parametrize("fn,make", NP_CASES, ids=[f.__name__ for f, _ in NP_CASES])
def test_numpy_masks_break_without_the_knob(fn, make):
    args = make()
    ex = shapejit.explain(fn)(*copy.deepcopy(args))
    assert ex.graph_break_count >= 1
    assert any("capture_dynamic_output_shape_ops" in str(r.reason) for r in ex.break_reasons)
    _run_both(fn, *args)


def t_mask_chain(x):
    sel = x[x > 0.5]
    return sel * 2, sel.shape[0] + 1


def t_mask_scale(x):
    x[x < 0] *= 2
    return x + 1


@pytest.mark.parametrize("knob", [False, True], ids=["off", "on"])
@pytest.mark.parametrize("fn", [t_mask_chain, t_mask_scale])
def test_torch_masks_graph_counts_match_torch(fn, knob):
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(3))
    want = fn(x.clone())
    expected, tout = torch_graphs(fn, (x.clone(),), capture_dynamic_output_shape_ops=knob)
    same(tout, want)
    with shapejit.config.patch(capture_dynamic_output_shape_ops=knob):
        got = shapejit.compile(fn)(x.clone())
    same(got, want)
    assert shapejit.stats()["graphs"] == expected


@pytest.mark.parametrize("knob", [False, True], ids=["off", "on"])
def test_mask_assignment_count_mismatch_raises_as_eager(knob):
    def f(a, m, n, b):
        a[m] = b[n]
        return a + 1
    a = np.arange(6.0)
    with shapejit.config.patch(capture_dynamic_output_shape_ops=knob):
        with pytest.raises(ValueError, match="boolean array indexing assignment"):
            f(a.copy(), a > 2, a > 3, a)
        with pytest.raises(ValueError, match="boolean array indexing assignment"):
            shapejit.compile(f)(a.copy(), a > 2, a > 3, a)
        t = torch.arange(6.0)
        with pytest.raises(RuntimeError, match="shape mismatch"):
            shapejit.compile(f)(t.clone(), t > 2, t > 3, t)


def test_mask_of_the_wrong_shape_raises_as_eager():
    def f(a, m):
        return a[m] * 2
    a, m = np.ones((3, 4)), np.ones(5, dtype=bool)
    with shapejit.config.patch(capture_dynamic_output_shape_ops=True):
        with pytest.raises(IndexError):
            f(a, m)
        with pytest.raises(IndexError):
            shapejit.compile(f)(a, m)


# ---- ufunc methods ----------------------------------------------------------------------
@pytest.mark.parametrize("call", [
    lambda a: np.add.reduce(a, axis=5),
    lambda a: np.maximum.accumulate(a, axis=-3),
    lambda a: np.add.at(a, np.array([0, 9]), 1.0),
    lambda a: np.multiply.reduce(a, out=np.empty(4)),
    lambda a: np.add.outer(a, "x"),
    lambda a: np.add.reduce(a, axis=0, where=a > 0),
], ids=["reduce_bad_axis", "accumulate_bad_axis", "at_out_of_bounds", "reduce_out", "outer_str", "reduce_where"])
def test_ufunc_method_errors_and_options_match_eager(call):
    a = RNG.standard_normal((3, 4))
    try:
        want = call(a.copy())
        err = None
    except Exception as e:  # noqa: BLE001 - the compiled call must raise the same
        err = type(e)
    if err is not None:
        with pytest.raises(err):
            shapejit.compile(call)(a.copy())
    else:
        _same_np(shapejit.compile(call)(a.copy()), want)


def test_add_at_accumulates_repeated_indices_exactly():
    def f(a, i, v):
        np.add.at(a, i, v)
        np.multiply.at(a, i[:3], 2)
        return a
    a, i, v = np.zeros(5), np.array([0, 0, 0, 3, 3, 1]), np.arange(6.0)
    ex = shapejit.explain(f)(a.copy(), i, v)
    assert (ex.graph_count, ex.graph_break_count) == (1, 0)
    got = _run_both(f, a, i, v)
    assert got.tolist() == [24.0, 5.0, 0.0, 7.0, 0.0]


def test_ufunc_reduce_of_unsupported_ufunc_breaks_cleanly():
    def f(a):
        return np.subtract.reduce(a, axis=1) + 1     # no numpy function computes it
    a = RNG.standard_normal((3, 4))
    ex = shapejit.explain(f)(a)
    assert ex.graph_break_count == 1
    _run_both(f, a)


# ---- dtypes -----------------------------------------------------------------------------
INT_DTYPES = ["bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
              "float16", "float32", "float64"]


@pytest.mark.parametrize("da", INT_DTYPES)
def test_mixed_dtype_arithmetic_matches_eager(da):
    def f(a, b):
        return a + b, a * b, np.maximum(a, b), a > b, a / b
    for db in INT_DTYPES:
        a = (RNG.random(4) * 5 + 1).astype(da)
        b = (RNG.random(4) * 5 + 1).astype(db)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = f(a, b)
            got = shapejit.compile(f)(a, b)
        for w, g in zip(want, got):
            assert w.dtype == g.dtype, (da, db, w.dtype, g.dtype)
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=1e-3)
        shapejit.reset()


def test_wide_unsigned_arrays_capture():
    def f(a, b, c):
        return a + 1, (a + b).sum(), c.sum(), c.mean(), b.cumsum()
    args = (np.arange(4, dtype=np.uint16), np.arange(4, dtype=np.uint32), np.arange(4, dtype=np.uint64))
    ex = shapejit.explain(f)(*args)
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), ex.break_reasons
    _run_both(f, *args)


def test_unsigned_inplace_of_signed_result_raises_as_eager():
    def f(a, b):
        a += b
        return a
    a, b = np.arange(4, dtype=np.uint16), np.arange(4, dtype=np.int8)
    with pytest.raises(TypeError):   # numpy's UFuncTypeError: int32 does not cast to uint16
        f(a.copy(), b)
    with pytest.raises(TypeError):
        shapejit.compile(f)(a.copy(), b)


def test_torch_tensors_of_wide_unsigned_dtypes_stay_unsupported():
    def f(x):
        return x.shape[0] + 1, x
    x = torch.zeros(3, dtype=torch.uint16)
    ex = shapejit.explain(f)(x)
    assert ex.graph_count == 0
    assert shapejit.compile(f)(x)[0] == 4


def test_numpy_ufunc_on_int_tensor_breaks():
    def f(x):
        return np.sin(x) + 1                      # numpy computes float64: torch would give float32
    x = torch.arange(4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ex = shapejit.explain(f)(x)
        assert ex.graph_break_count == 1
        got = shapejit.compile(f)(x)
        assert got.dtype == torch.float64 and torch.allclose(got, f(x))


# ---- coordinate grids -------------------------------------------------------------------
def test_large_constant_grid_breaks_cleanly():
    def f(a):
        return np.mgrid[0:300, 0:300].sum() + a
    a = np.ones(3)
    ex = shapejit.explain(f)(a)
    assert ex.graph_break_count == 1 and "coordinate grid" in str(ex.break_reasons[0].reason)
    _run_both(f, a)


@pytest.mark.parametrize("call", [
    lambda a: np.meshgrid(a, a, indexing="zz"),
    lambda a: np.indices((2, -3)),
    lambda a: np.mgrid[0:3:"x"],
], ids=["meshgrid_indexing", "indices_negative", "mgrid_bad_step"])
def test_grid_errors_match_eager(call):
    a = np.arange(3.0)
    with pytest.raises(Exception) as want:
        call(a)
    with pytest.raises(want.type):
        shapejit.compile(call)(a)
