"""The capture corpus (tests/corpus/) run through shapejit and checked against eager
Python and against torch.compile (the oracle).

For every entry:
  (a) test_matches_eager: compile (fullgraph=True where marked), call, compare with eager
      on deep copies of the same inputs (values, dtypes, shapes, container structure and
      types, identity of returned inputs, mutation of inputs), then call again with fresh
      inputs of the same shapes and check the call hit the cache;
  (b) test_explain_counts: shapejit.explain graph and break counts equal the entry's;
  (c) test_oracle_counts (torch entries): shapejit's counts equal torch._dynamo.explain's,
      except for ORACLE_DIFFERENCES, which docs/oracle_differences.md lists.
"""
import collections
import contextlib
import copy
import dataclasses
import io
import math
import os
import re
import warnings

import numpy as np
import pytest
import torch
import torch._dynamo
import torch._dynamo.eval_frame

import shapejit
from corpus import ENTRIES, KNOWN_GAPS, NUMPY_ENTRIES, ORACLE_DIFFERENCES, TORCH_ENTRIES

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ORACLE_DOC = os.path.join(REPO, "docs", "oracle_differences.md")

# torch's own explain/reset, bound now: shapejit.install_torch_compat() reroutes the
# public torch._dynamo names, and the oracle must stay torch's.
_ORACLE_EXPLAIN = torch._dynamo.eval_frame.explain
_ORACLE_RESET = torch._dynamo.reset
assert _ORACLE_EXPLAIN.__module__.startswith("torch."), _ORACLE_EXPLAIN.__module__


def _ids(entries):
    return [e.name for e in entries]


@pytest.fixture(autouse=True)
def _fresh_shapejit():
    shapejit.reset()
    yield
    shapejit.reset()


@contextlib.contextmanager
def _quiet():
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


def _check_call(entry, compiled, seed):
    args, kwargs = entry.make(seed)
    pristine = copy.deepcopy((args, kwargs))
    eager_args, eager_kwargs = copy.deepcopy((args, kwargs))
    state = torch.get_rng_state() if entry.rng else None
    with _quiet():
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


# ---- (a) values, mutation, cache ----------------------------------------------------
def _gapped(entries):
    """Entries as pytest params; known gaps are strict xfails (see corpus.KNOWN_GAPS)."""
    return [pytest.param(e, id=e.name,
                         marks=[pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[e.name])]
                         if e.name in KNOWN_GAPS else [])
            for e in entries]


@pytest.mark.parametrize("entry", _gapped(ENTRIES))
def test_matches_eager(entry):
    compiled = shapejit.compile(entry.fn, fullgraph=entry.fullgraph)
    _check_call(entry, compiled, seed=0)
    first = shapejit.stats()
    assert first["graphs"] == entry.graphs, f"{entry.name}: {first}"
    assert first["graph_breaks"] == entry.breaks, f"{entry.name}: {first}"

    _check_call(entry, compiled, seed=1)  # fresh inputs, same shapes: a cache hit
    if entry.reads_data:
        return   # new data, new constants in the resume function: a recompile is expected
    if entry.new_module:
        return   # a new module object per call: its resume function recompiles (known gap)
    second = shapejit.stats()
    for key in ("frames", "graphs", "graph_breaks", "recompiles", "cache_entries"):
        assert second[key] == first[key], f"{entry.name}: 2nd call not a cache hit: {key} {first[key]} -> {second[key]}"


# ---- (b) explain counts -------------------------------------------------------------
def _shapejit_explain(entry):
    args, kwargs = entry.make(0)
    with _quiet():
        return shapejit.explain(entry.fn)(*args, **kwargs)


@pytest.mark.parametrize("entry", _gapped(ENTRIES))
def test_explain_counts(entry):
    ex = _shapejit_explain(entry)
    assert (ex.graph_count, ex.graph_break_count) == (entry.graphs, entry.breaks), (
        f"{entry.name}: shapejit explain gives {ex.graph_count} graphs / {ex.graph_break_count} breaks, "
        f"expected {entry.graphs} / {entry.breaks}; reasons: {ex.break_reasons}")
    assert len(ex.break_reasons) == entry.breaks
    assert len(ex.ops_per_graph) == entry.graphs
    if entry.graphs:
        assert ex.op_count >= entry.graphs and all(len(ops) > 0 for ops in ex.ops_per_graph)
    if entry.breaks:
        # the printed report names the user file of the break
        assert os.path.basename(entry.fn.__code__.co_filename) in str(ex), str(ex)


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e.breaks], ids=_ids([e for e in ENTRIES if e.breaks]))
def test_uncapturable_fullgraph_raises(entry):
    """fullgraph=True turns the recorded reason into an error naming the user file."""
    args, kwargs = entry.make(0)
    compiled = shapejit.compile(entry.fn, fullgraph=True)
    with _quiet(), pytest.raises(Exception) as info:
        compiled(*args, **kwargs)
    assert os.path.basename(entry.fn.__code__.co_filename) in str(info.value), str(info.value)


# ---- (c) the oracle -----------------------------------------------------------------
def _oracle_counts(entry):
    args, kwargs = entry.make(0)
    _ORACLE_RESET()
    try:
        with _quiet():
            ex = _ORACLE_EXPLAIN(entry.fn)(*args, **kwargs)
    finally:
        _ORACLE_RESET()
    # torch 2.13's explain computes graph_break_count as graph_count - 1; the breaks it really
    # recorded are its break_reasons (one per non-empty graph that a break ended)
    return ex.graph_count, len(ex.break_reasons)


@pytest.mark.parametrize("entry", _gapped(TORCH_ENTRIES))
def test_oracle_counts(entry):
    oracle = _oracle_counts(entry)
    ex = _shapejit_explain(entry)
    ours = (ex.graph_count, ex.graph_break_count)
    if entry.name in ORACLE_DIFFERENCES:
        assert oracle != (entry.graphs, entry.breaks), (
            f"{entry.name}: listed in ORACLE_DIFFERENCES but torch.compile agrees ({oracle}); remove it "
            f"from the dict and from docs/oracle_differences.md")
        assert ours == (entry.graphs, entry.breaks)
    else:
        assert ours == oracle, (
            f"{entry.name}: shapejit {ours} graphs/breaks, torch.compile {oracle}; fix shapejit or list the "
            f"entry in ORACLE_DIFFERENCES with the reason")


def test_oracle_differences_documented():
    names = {e.name for e in TORCH_ENTRIES}
    unknown = set(ORACLE_DIFFERENCES) - names
    assert not unknown, f"ORACLE_DIFFERENCES names no torch corpus entry: {sorted(unknown)}"
    with open(ORACLE_DOC, encoding="utf-8") as f:
        text = f.read()
    rows = dict(re.findall(r"^\|\s*`([^`]+)`\s*\|\s*(.*?)\s*\|\s*$", text, flags=re.M))
    assert set(rows) == set(ORACLE_DIFFERENCES), (
        f"docs/oracle_differences.md rows {sorted(rows)} != ORACLE_DIFFERENCES {sorted(ORACLE_DIFFERENCES)}")
    for name, reason in ORACLE_DIFFERENCES.items():
        assert reason.strip(), f"{name}: empty reason"
        assert rows[name] == reason, f"{name}: reason in docs differs from ORACLE_DIFFERENCES"


def test_corpus_shape():
    assert len(ENTRIES) >= 170
    assert len(TORCH_ENTRIES) >= 70 and len(NUMPY_ENTRIES) >= 70
    assert sum(1 for e in ENTRIES if e.breaks) >= 5
    for e in ENTRIES:
        assert e.fullgraph == (e.breaks == 0), e.name


# ---- recompiles under static shapes -------------------------------------------------
def _add_scale(x):
    return x * 2 + 1


def test_static_shapes_recompile_per_size_torch():
    compiled = shapejit.compile(_add_scale, dynamic=False)
    for n in (10, 20, 30, 40):
        x = torch.rand(n)
        torch.testing.assert_close(compiled(x), _add_scale(x), rtol=1e-6, atol=0)
    st = shapejit.stats()
    assert st["graphs"] == 4 and st["cache_entries"] == 4 and st["recompiles"] == 3, st
    for n in (10, 20, 30, 40):  # every size now hits its own entry
        x = torch.rand(n)
        torch.testing.assert_close(compiled(x), _add_scale(x), rtol=1e-6, atol=0)
    assert shapejit.stats()["graphs"] == 4 and shapejit.stats()["cache_entries"] == 4


def test_static_shapes_recompile_per_size_numpy():
    compiled = shapejit.compile(_add_scale, dynamic=False)
    for n in (10, 20, 30, 40):
        a = np.random.default_rng(n).random(n)
        np.testing.assert_allclose(compiled(a), _add_scale(a), rtol=1e-12)
    st = shapejit.stats()
    assert st["graphs"] == 4 and st["cache_entries"] == 4, st
