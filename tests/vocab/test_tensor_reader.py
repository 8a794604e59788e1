"""The tensor reader (vocab/tensor_reader.c): torch tensor metadata read from memory.

_C._tensor_read(obj) returns (dtype_name, sizes, strides, requires_grad, path), path
"fast" (read from the TensorImpl) or "slow" (meta_from_value, through Python attributes),
or None when the value is unsupported. Every answer is compared with torch's own Python
API; values the fast path must not touch are checked to take the slow path.
"""
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from shapejit import _C

DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
          torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64,
          torch.complex128]
GRAD_DTYPES = {torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64,
               torch.complex128}


def expected(t):
    return (str(t.dtype).replace("torch.", ""), tuple(t.shape), tuple(t.stride()),
            t.requires_grad)


def read(t):
    r = _C._tensor_read(t)
    assert r is not None, "unsupported: %r" % (t,)
    return r[:4], r[4]


def test_fast_path_is_on():
    info = _C._tensor_reader_info()
    assert info["fast"] is True, info["why_not"]
    assert info["why_not"] is None
    assert info["validated_tensors"] > 100
    assert set(info["offsets"]) >= {"cdata", "key_set", "sizes_strides", "dtype"}
    assert {"Tensor", "Parameter"} <= set(info["types"])
    assert len(set(info["dtype_index"].values())) == len(DTYPES)


# ---- random tensors and views against the Python API ----

@st.composite
def tensors(draw):
    shape = draw(st.lists(st.integers(0, 5), min_size=0, max_size=8))
    dtype = draw(st.sampled_from(DTYPES))
    t = torch.zeros(shape, dtype=dtype)
    if dtype in GRAD_DTYPES and draw(st.booleans()):
        t.requires_grad_(True)
        if draw(st.booleans()):
            t = t * 2          # non-leaf
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["permute", "transpose", "slice", "expand", "unsqueeze"]))
        n = t.dim()
        if kind == "permute" and n:
            t = t.permute(*draw(st.permutations(range(n))))
        elif kind == "transpose" and n >= 2:
            a, b = draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1))
            t = t.transpose(a, b)
        elif kind == "slice" and n:
            d = draw(st.integers(0, n - 1))
            start, step = draw(st.integers(0, 2)), draw(st.integers(1, 3))
            idx = [slice(None)] * n
            idx[d] = slice(start, None, step)
            t = t[tuple(idx)]
        elif kind == "expand" and n:
            sizes = [draw(st.integers(0, 4)) if s == 1 else -1 for s in t.shape]
            t = t.expand(*sizes)
        elif kind == "unsqueeze" and n < 8:
            t = t.unsqueeze(draw(st.integers(0, n)))
    return t


@settings(max_examples=400, deadline=None)
@given(tensors())
def test_random_tensors_match_python(t):
    got, path = read(t)
    assert got == expected(t)
    assert path == "fast"


@settings(max_examples=100, deadline=None)
@given(tensors())
def test_random_parameters_fast(t):
    if t.dtype not in GRAD_DTYPES:
        t = t.float()
    p = torch.nn.Parameter(t.detach(), requires_grad=bool(t.numel() % 2))
    got, path = read(p)
    assert got == expected(p)
    assert path == "fast"


def test_parameter_uses_fast_path():
    p = torch.nn.Parameter(torch.ones(3, 4))
    assert read(p) == (("float32", (3, 4), (4, 1), True), "fast")


def test_resize_changes_rank_both_ways():
    t = torch.zeros(2, 3)
    assert read(t)[1] == "fast"
    t.resize_(1, 2, 3, 1, 2, 1, 2)
    assert read(t) == (expected(t), "fast")
    t.resize_(4, 5)
    assert read(t) == (expected(t), "fast")


def test_requires_grad_flip_is_seen():
    t = torch.ones(2)
    assert read(t)[0][3] is False
    t.requires_grad_()
    assert read(t) == (("float32", (2,), (1,), True), "fast")


def test_grad_modes_do_not_matter():
    t = torch.ones(2, 2, requires_grad=True)
    with torch.no_grad():
        assert read(t) == (expected(t), "fast")
    with torch.inference_mode():
        assert read(t) == (expected(t), "fast")


# ---- values the fast path must leave to meta_from_value ----

def test_sparse_unsupported():
    assert _C._tensor_read(torch.zeros(2, 2).to_sparse()) is None


def test_meta_device_unsupported():
    assert _C._tensor_read(torch.ones(2, 3, device="meta")) is None


def test_conj_bit_slow():
    t = torch.zeros(2, dtype=torch.complex64).conj()
    assert _C._tensor_read(t) == expected(t) + ("slow",)


def test_neg_bit_slow():
    t = torch._neg_view(torch.ones(2))
    assert _C._tensor_read(t) == expected(t) + ("slow",)


def test_inference_tensor_slow():
    with torch.inference_mode():
        t = torch.ones(2)
    assert _C._tensor_read(t) == expected(t) + ("slow",)


def test_subclass_slow():
    class Sub(torch.Tensor):
        pass

    t = torch.ones(2, 3).as_subclass(Sub)
    assert _C._tensor_read(t) == expected(t) + ("slow",)


def test_fake_tensor_not_fast():
    fake = pytest.importorskip("torch._subclasses.fake_tensor")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with fake.FakeTensorMode() as mode:
            t = mode.from_tensor(torch.ones(2, 3))
        r = _C._tensor_read(t)
    assert r is None or r[4] == "slow"


def test_unsupported_dtype_and_rank():
    assert _C._tensor_read(torch.zeros(2, dtype=torch.uint16)) is None
    assert _C._tensor_read(torch.zeros([1] * 9)) is None
    assert _C._tensor_read(object()) is None


def test_numpy_still_read():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)[:, ::2].transpose(2, 0, 1)
    assert _C._tensor_read(a) == ("float32", a.shape, tuple(s // 4 for s in a.strides), False, "slow")
    assert _C._tensor_read(np.float64(1.0)) == ("float64", (), (), False, "slow")
    assert _C._tensor_read(np.zeros(2, dtype=np.uint16)) == ("uint16", (2,), (1,), False, "slow")
    assert _C._tensor_read(np.zeros(2, dtype="datetime64[s]")) is None
    assert _C._tensor_read(torch.zeros(2, dtype=torch.uint16)) is None   # numpy-only dtype


@pytest.mark.parametrize("mode", ["torch.inference_mode()", "torch.no_grad()"])
def test_probes_do_not_depend_on_the_callers_mode(mode):
    """The reader probes torch once per process, at the first read: a first read inside
    inference mode or no_grad must still validate the fast path."""
    import subprocess
    import sys
    code = ("import torch, shapejit\n"
            "from shapejit import _C\n"
            f"with {mode}:\n"
            "    r = _C._tensor_read(torch.ones(2, 3))\n"
            "info = _C._tensor_reader_info()\n"
            "assert info['fast'], info['why_not']\n"
            "print(_C._tensor_read(torch.ones(2, 3))[-1])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "fast"


# ---- the data pointer ----

def data(t):
    r = _C._tensor_data(t)
    assert r is not None, "unsupported: %r" % (t,)
    return r


def test_data_pointer_path_is_on():
    info = _C._tensor_reader_info()
    assert info["data_fast"] is True, info["data_why_not"]
    assert {"storage", "storage_offset", "storage_data", "storage_check"} <= set(info["offsets"])


@settings(max_examples=300, deadline=None)
@given(tensors(), st.integers(0, 7))
def test_random_data_pointers_match_data_ptr(t, offset):
    if offset and t.dim():
        t = t.flatten()[offset:] if t.is_contiguous() else t[..., offset % max(t.shape[-1], 1):]
    assert data(t) == (t.data_ptr(), "fast")          # 0 for a tensor of no element


def test_data_pointer_follows_the_storage():
    t = torch.arange(10.0)
    v = t[3:]
    assert data(v) == (v.data_ptr(), "fast")
    before = v.data_ptr()
    v.set_(torch.arange(100.0)[50:], 0, (4,))       # another storage, another offset
    assert data(v) == (v.data_ptr(), "fast") and v.data_ptr() != before
    t.resize_(10000)                                   # reallocated in place
    assert data(t) == (t.data_ptr(), "fast")
    t.data = torch.ones(3, 3)                          # the tensor's data swapped
    assert data(t) == (t.data_ptr(), "fast")
    u = torch.empty(0)
    assert data(u) == (0, "fast")


def test_memory_not_from_torch():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = torch.from_numpy(a)[1:, 1:]
    assert data(t) == (t.data_ptr(), "fast")
    b = torch.frombuffer(bytearray(64), dtype=torch.int32)[3:]
    assert data(b) == (b.data_ptr(), "fast")


def test_storages_whose_data_ptr_does_more_take_the_slow_path():
    src = torch.ones(4)
    clone = torch._lazy_clone(src)                     # copy-on-write: data_ptr() copies
    assert data(clone) == (None, "slow")
    assert data(src) == (None, "slow")
    thrower = torch.ones(4)
    torch._C._set_throw_on_mutable_data_ptr(thrower)
    assert data(thrower) == (None, "slow")


def test_in_place_ops_on_a_copy_on_write_input_leave_its_twin_alone():
    """Eager copies a copy-on-write tensor on its first write; a compiled in-place op must
    not write into the memory it still shares."""
    import shapejit

    def f(x, y):
        x.mul_(2.0)
        return x + y

    shapejit.reset()
    cf = shapejit.compile(f)
    try:
        for _ in range(3):
            src = torch.arange(8.0)
            x = torch._lazy_clone(src)
            out = cf(x, torch.ones(8))
            torch.testing.assert_close(src, torch.arange(8.0))
            torch.testing.assert_close(x, torch.arange(8.0) * 2)
            torch.testing.assert_close(out, torch.arange(8.0) * 2 + 1)
    finally:
        shapejit.reset()
