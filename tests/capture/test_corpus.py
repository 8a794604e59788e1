"""The capture corpus (tests/support/corpus/) run through shapejit and checked against eager
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
import os
import re

import numpy as np
import pytest
import torch
import torch._dynamo
import torch._dynamo.eval_frame

import shapejit
from corpus import ENTRIES, KNOWN_GAPS, NUMPY_ENTRIES, ORACLE_DIFFERENCES, TORCH_ENTRIES
from corpus_check import check_call, quiet
from repo import source_path

ORACLE_DOC = source_path("docs", "oracle_differences.md")

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
    check_call(entry, compiled, seed=0)
    first = shapejit.stats()
    assert first["graphs"] == entry.graphs, f"{entry.name}: {first}"
    assert first["graph_breaks"] == entry.breaks, f"{entry.name}: {first}"

    check_call(entry, compiled, seed=1)  # fresh inputs, same shapes: a cache hit
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
    with quiet():
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
    with quiet(), pytest.raises(Exception) as info:
        compiled(*args, **kwargs)
    assert os.path.basename(entry.fn.__code__.co_filename) in str(info.value), str(info.value)


# ---- (c) the oracle -----------------------------------------------------------------
def _oracle_counts(entry):
    args, kwargs = entry.make(0)
    _ORACLE_RESET()
    try:
        with quiet():
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
