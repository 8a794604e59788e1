"""Library queries folded to constants (capture/folds.def), lru_cache wrappers, list
slice writes and tensor dict keys: the guards that keep a fold right when the state it
read changes, the exceptions eager raises, and the names break messages give builtins.
The captures themselves are corpus entries (tests/support/corpus/t_pymisc.py, np_pymisc.py)."""
import functools

import numpy as np
import pytest
import torch

import shapejit


@pytest.fixture(autouse=True)
def _fresh():
    shapejit.reset()
    yield
    torch.set_autocast_dtype("cpu", torch.bfloat16)


def _raises_same(fn, *args):
    """Compiled fn raises the exception type eager raises, with the same message."""
    with pytest.raises(Exception) as eager:
        fn(*args)
    with pytest.raises(type(eager.value)) as compiled:
        shapejit.compile(fn)(*args)
    assert str(compiled.value) == str(eager.value)


# ---- guarded folds: a state change recompiles ---------------------------------------
def test_autocast_query_guarded():
    def f(x):
        return x + torch.is_autocast_enabled("cpu") + (torch.get_autocast_dtype("cpu") == torch.float16)

    x = torch.zeros(3)
    cf = shapejit.compile(f)
    assert torch.equal(cf(x), f(x))
    with torch.autocast("cpu"):
        assert torch.equal(cf(x), torch.ones(3))   # autocast on: the fold is taken again
    torch.set_autocast_dtype("cpu", torch.float16)
    assert torch.equal(cf(x), torch.ones(3))       # the dtype changed
    torch.set_autocast_dtype("cpu", torch.bfloat16)
    assert torch.equal(cf(x), torch.zeros(3))      # back: the first entry serves it
    st = shapejit.stats()
    assert st["recompiles"] == 2, st


def test_ops_under_outer_autocast_match_eager():
    # GLOBAL_STATE holds the autocast switch: an entry made without autocast does not
    # serve a call under it, and a capture under it leaves the frame to the interpreter
    def f(x, y):
        return x @ y

    x, y = torch.randn(4, 4), torch.randn(4, 4)
    cf = shapejit.compile(f)
    assert cf(x, y).dtype == torch.float32
    with torch.autocast("cpu"):
        assert cf(x, y).dtype == f(x, y).dtype == torch.bfloat16
    assert cf(x, y).dtype == torch.float32


def test_guarded_fold_printed_as_a_call():
    def f(x):
        return x * torch.is_autocast_enabled("cpu")

    cf = shapejit.compile(f)
    cf(torch.ones(2))
    text = "\n".join(str(g) for g in shapejit.explain(f, torch.ones(2)).out_guards)
    assert "torch.is_autocast_enabled('cpu')" in text


def test_pure_fold_installs_no_guard_call():
    def f(x):
        return x + torch.finfo(torch.float32).eps + np.iinfo(np.int8).max

    text = "\n".join(str(g) for g in shapejit.explain(f, torch.ones(2)).out_guards)
    assert "finfo" not in text and "iinfo" not in text


# ---- the exceptions eager raises ----------------------------------------------------------
def test_fold_bad_arguments_raise_as_eager():
    _raises_same(lambda x: x + np.finfo(np.int32).eps, torch.ones(2))
    _raises_same(lambda x: x + torch.finfo(torch.int32).eps, torch.ones(2))
    _raises_same(lambda x: x.to(torch.promote_types(torch.float32, "int")), torch.ones(2))


def test_lru_cache_wrapper_bad_call_raises_as_eager():
    @functools.lru_cache
    def helper(x, k):
        return x * k

    _raises_same(lambda x: helper(x, 1, 2), torch.ones(2))


def test_list_slice_errors_raise_as_eager():
    def extended(x):
        m = [x, x, x, x]
        m[::2] = [x]
        return m

    def not_an_int(x):
        return [x] * 1.5

    _raises_same(extended, torch.ones(2))
    _raises_same(not_an_int, torch.ones(2))


def test_array_dict_key_unhashable_as_eager():
    _raises_same(lambda a: {a: 1}, np.ones(2))


def test_tensor_key_missing_raises_key_error():
    def f(a, b):
        return {a: 1}[b]

    with pytest.raises(KeyError):
        shapejit.compile(f)(torch.ones(2), torch.ones(2))


# ---- tensor keys and written-back lists ---------------------------------------------------
def test_tensor_keyed_dict_returned_keeps_identity():
    def f(a, b):
        return {a: a + 1, "k": 2, b: b * 2}

    a, b = torch.ones(2), torch.zeros(2)
    r = shapejit.compile(f)(a, b)
    keys = list(r)
    assert keys[0] is a and keys[1] == "k" and keys[2] is b
    assert torch.equal(r[a], a + 1) and torch.equal(r[b], b * 2)


def test_aliased_tensor_keys_follow_eager():
    def f(a, b):
        d = {a: 1, b: 2}
        return a + len(d)

    x, y = torch.ones(2), torch.ones(2)
    cf = shapejit.compile(f)
    assert torch.equal(cf(x, y), f(x, y))
    assert torch.equal(cf(x, x), f(x, x))   # one key: the aliasing guard recompiles


# ---- break messages name builtins as their module exposes them ------------------------------
def test_break_message_names_pybind_function_by_module():
    def f(x):
        return x + len(torch._C._autocast_supported_devices())

    reasons = [str(b.reason) for b in shapejit.explain(f, torch.ones(2)).break_reasons]
    assert reasons and "torch._C._autocast_supported_devices" in reasons[0]
    assert "pybind11" not in reasons[0]
