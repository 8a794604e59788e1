"""How a corpus entry's compiled call is checked against eager (tests/capture/test_corpus.py,
and hook/test_compat_dynamo.py through torch.fx): on deep copies of the same inputs, the
result's type, structure, dtypes, shapes and values, the inputs after the call (mutation),
the global generator's state, and which returned object is which input."""
import collections
import contextlib
import copy
import dataclasses
import io
import math
import warnings

import numpy as np
import torch


@contextlib.contextmanager
def quiet():
    """Entries that print write to a buffer; warnings (item() hints etc.) are muted."""
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


# ---- structural comparison ----------------------------------------------------------
def _is_array(v):
    return isinstance(v, (torch.Tensor, np.ndarray))


def _attrs(obj):
    """The attributes an entry may write: those of an object of a class the corpus defines,
    the public ones of an nn.Module (its parameters, buffers and submodules live in its
    underscored dicts, compared through state_dict()); None for anything else."""
    if isinstance(obj, torch.nn.Module):
        return {k: v for k, v in vars(obj).items() if not k.startswith("_")}
    if (not isinstance(obj, type) and not dataclasses.is_dataclass(obj) and hasattr(obj, "__dict__")
            and type(obj).__module__.startswith("corpus.")):
        return vars(obj)
    return None


def assert_same(actual, expected, entry, path="result"):
    """``actual`` (shapejit) must equal ``expected`` (eager) in type, structure, dtype,
    shape and value (within the entry's tolerance)."""
    rtol, atol = entry.rtol, entry.atol
    assert type(actual) is type(expected), (
        f"{entry.name}: {path}: type {type(actual).__name__}, eager gives {type(expected).__name__}")
    if isinstance(expected, torch.Tensor):
        assert actual.dtype == expected.dtype, f"{entry.name}: {path}: dtype {actual.dtype} != {expected.dtype}"
        assert actual.shape == expected.shape, f"{entry.name}: {path}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
        assert actual.requires_grad == expected.requires_grad, f"{entry.name}: {path}: requires_grad differs"
        torch.testing.assert_close(actual.detach(), expected.detach(), rtol=rtol, atol=atol,
                                   equal_nan=True, msg=lambda m: f"{entry.name}: {path}: {m}")
    elif isinstance(expected, (np.ndarray, np.generic)):
        assert actual.dtype == expected.dtype, f"{entry.name}: {path}: dtype {actual.dtype} != {expected.dtype}"
        assert np.shape(actual) == np.shape(expected), f"{entry.name}: {path}: shape {np.shape(actual)} != {np.shape(expected)}"
        if np.issubdtype(expected.dtype, np.inexact):
            np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True,
                                       err_msg=f"{entry.name}: {path}")
        else:
            np.testing.assert_array_equal(actual, expected, err_msg=f"{entry.name}: {path}")
    elif isinstance(expected, (tuple, list, collections.deque)):  # includes namedtuples (type checked above)
        assert len(actual) == len(expected), f"{entry.name}: {path}: length {len(actual)} != {len(expected)}"
        if isinstance(expected, collections.deque):
            assert actual.maxlen == expected.maxlen, f"{entry.name}: {path}: maxlen {actual.maxlen} != {expected.maxlen}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, entry, f"{path}[{i}]")
    elif isinstance(expected, dict):
        assert list(actual.keys()) == list(expected.keys()), f"{entry.name}: {path}: keys {list(actual)} != {list(expected)}"
        for k in expected:
            assert_same(actual[k], expected[k], entry, f"{path}[{k!r}]")
    elif dataclasses.is_dataclass(expected):
        for f in dataclasses.fields(expected):
            assert_same(getattr(actual, f.name), getattr(expected, f.name), entry, f"{path}.{f.name}")
    elif isinstance(expected, torch.nn.Module):
        assert_same(actual.state_dict(), expected.state_dict(), entry, f"{path}.state_dict()")
        assert_same(_attrs(actual), _attrs(expected), entry, f"{path}.__dict__")
    elif _attrs(expected) is not None:
        assert_same(_attrs(actual), _attrs(expected), entry, f"{path}.__dict__")
    elif isinstance(expected, float):
        assert math.isclose(actual, expected, rel_tol=rtol, abs_tol=atol) or (
            math.isnan(actual) and math.isnan(expected)), f"{entry.name}: {path}: {actual} != {expected}"
    else:  # int, bool, str, None, ...
        assert actual == expected, f"{entry.name}: {path}: {actual!r} != {expected!r}"


def _leaves(obj, path="", out=None, scalars=False):
    """(path, leaf) for every tensor/array inside nested containers and the attributes of
    objects (_attrs); with scalars, the other values held in those attributes too."""
    out = [] if out is None else out
    if _is_array(obj):
        out.append((path, obj))
    elif isinstance(obj, (tuple, list, collections.deque)):
        for i, v in enumerate(obj):
            _leaves(v, f"{path}[{i}]", out, scalars)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _leaves(v, f"{path}[{k!r}]", out, scalars)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            _leaves(getattr(obj, f.name), f"{path}.{f.name}", out, scalars)
    elif _attrs(obj) is not None:
        for k, v in _attrs(obj).items():
            _leaves(v, f"{path}.{k}", out, scalars)
    elif scalars and "." in path:
        out.append((path, obj))
    return out


def _alias_map(result, inputs):
    """For each array in the result: the path of the input it *is* (or None)."""
    ins = _leaves(inputs)
    return [(p, next((ip for ip, iv in ins if iv is v), None)) for p, v in _leaves(result)]


def _equal_exactly(a, b):
    la, lb = _leaves(a, scalars=True), _leaves(b, scalars=True)
    if [p for p, _ in la] != [p for p, _ in lb]:
        return False
    for (_, x), (_, y) in zip(la, lb):
        if not _is_array(x) or not _is_array(y):
            if type(x) is not type(y) or x != y:
                return False
        elif isinstance(x, torch.Tensor):
            if not torch.equal(x.detach(), y.detach()):
                return False
        elif not np.array_equal(x, y, equal_nan=True):
            return False
    return True


def check_call(entry, compiled, seed):
    args, kwargs = entry.make(seed)
    pristine = copy.deepcopy((args, kwargs))
    eager_args, eager_kwargs = copy.deepcopy((args, kwargs))
    state = torch.get_rng_state() if entry.rng else None
    with quiet():
        expected = entry.fn(*eager_args, **eager_kwargs)
        if entry.rng:
            eager_state = torch.get_rng_state()
            torch.set_rng_state(state)
        actual = compiled(*args, **kwargs)
    if entry.rng:
        assert torch.equal(torch.get_rng_state(), eager_state), (
            f"{entry.name}: the global generator is left in another state than eager leaves it")
    assert_same(actual, expected, entry)
    # the caller's inputs end up exactly as eager leaves them
    assert_same((args, kwargs), (eager_args, eager_kwargs), entry, path="inputs after the call")
    if entry.mutates:
        assert not _equal_exactly((args, kwargs), pristine), f"{entry.name}: expected to mutate its inputs"
    else:
        assert _equal_exactly((args, kwargs), pristine), f"{entry.name}: inputs were mutated"
    # a returned input is the caller's own object, as in eager
    assert _alias_map(actual, (args, kwargs)) == _alias_map(expected, (eager_args, eager_kwargs)), (
        f"{entry.name}: identity of returned inputs differs from eager")
