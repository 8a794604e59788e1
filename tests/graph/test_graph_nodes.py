"""Every node of a captured graph carries its op, the callables.def row it was recorded
through (or -1) and its arguments bound to that row's schema (graph/ir.h states the rule),
and the backend reads only those: it never includes capture/ nor looks a callable up again.

Over the capture corpus (tests/support/corpus/), each graph's nodes are read through
Graph._bound() and checked against their raw arguments (what the eager replay calls)."""
import collections
import contextlib
import io
import os
import re
import warnings

import numpy as np
import pytest
import torch

import shapejit
from corpus import ENTRIES

import repo

REPO = repo.repo_root()

ARG_VALUE, ARG_CONST, ARG_LIST, ARG_TUPLE, ARG_ABSENT = range(5)
NODE_OUT = 2
# ops a row records when its arguments pick another mechanism (capture/record.c mech_op)
MECH = {("mask_index", "getitem"), ("nonzero", "where"), ("to_numpy", "tensor")}


@pytest.fixture(autouse=True)
def _fresh_shapejit():
    shapejit.reset()
    yield
    shapejit.reset()


def _graphs(fn, *args, **kwargs):
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return shapejit.explain(fn)(*args, **kwargs).graphs


def check_graph(g):
    """Asserts the bound form of every node of _C.Graph g; returns the rows it saw."""
    pool, nodes = g._bound()
    rows = []
    for ni, (op, flags, row, row_op, params, bound, nbound, args, nargs, kwargs, nkw, kwnames) in enumerate(nodes):
        where = f"node {ni} ({op}, row {row})"
        if op == "input":
            assert row == -1 and bound == -1 and nbound == 0, where
            continue
        raw = [pool[args + k] for k in range(nargs)] + [pool[kwargs + j] for j in range(nkw)]
        names = list(kwnames or ())
        assert len(names) == nkw, where
        if row < 0:
            # row -1: the positional arguments are the bound form
            assert params is None and nkw == 0 and (bound, nbound) == (args, nargs), where
            continue
        rows.append(row)
        assert op == row_op or (op, row_op) in MECH, where
        assert params is not None and len(params) == nbound, where
        slots = [pool[bound + i] for i in range(nbound)]
        gathered = set()
        seen = collections.Counter()
        for (pname, call_name, varargs, fixed), (kind, a, n) in zip(params, slots):
            assert kind in (ARG_VALUE, ARG_CONST, ARG_LIST, ARG_TUPLE, ARG_ABSENT), where
            if kind == ARG_ABSENT:
                continue
            if fixed:
                assert kind == ARG_CONST, where
            elif varargs and kind == ARG_TUPLE and args <= a and a + n <= args + nargs:
                gathered.update(range(a - args, a - args + n))   # *varargs: a positional range
            else:
                seen[(kind, a, n)] += 1
        # every raw argument is bound exactly once (numpy's out=array may be left out)
        expected = collections.Counter(raw[k] for k in range(len(raw)) if k not in gathered)
        missing = expected - seen
        extra = seen - expected
        if flags & NODE_OUT:
            out = raw[nargs + names.index("out")]
            assert not extra and all(x == out for x in missing.elements()), where
        else:
            assert not missing and not extra, f"{where}: missing {missing}, extra {extra}"
        # keywords land on the parameter of their name
        for j, name in enumerate(names):
            if name == "out" and flags & NODE_OUT:
                continue
            hits = [i for i, p in enumerate(params) if p[1] == name and not p[3]]
            assert any(slots[i] == raw[nargs + j] for i in hits), f"{where}: keyword {name}"
        # positional arguments fill the parameters in order, up to a *varargs one
        k = 0
        for (pname, call_name, varargs, fixed), slot in zip(params, slots):
            if k >= nargs or fixed:
                continue
            if varargs:
                assert slot == (ARG_TUPLE, args + k, nargs - k), f"{where}: *{pname}"
                break
            if slot == raw[k]:
                k += 1
        assert k == nargs or gathered, f"{where}: positional arguments not in order"
    return rows


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.name for e in ENTRIES])
def test_corpus_nodes_bound(entry):
    args, kwargs = entry.make(0)
    for g in _graphs(entry.fn, *args, **kwargs):
        check_graph(g)


def test_bound_forms():
    """Varargs, keywords, a fixed parameter and numpy's out=."""
    def f(x, y):
        z = x.view(2, 3).permute(1, 0) + torch.add(y, 1, alpha=2).t()
        return z.float().sum(dim=0, keepdim=True)

    def h(a, o):
        np.add(a, 1.0, out=o)
        return np.concatenate([a, o], axis=0)
    (g,) = _graphs(f, torch.randn(6), torch.randn(2, 3))
    assert len(check_graph(g)) >= 5
    pool, nodes = g._bound()
    view = next(n for n in nodes if n[0] == "view")
    assert [p[0] for p in view[4]] == ["input", "shape"]
    assert pool[view[5] + 1][0] == ARG_TUPLE and pool[view[5] + 1][2] == 2
    (g,) = _graphs(h, np.ones(4), np.zeros(4))
    check_graph(g)
    pool, nodes = g._bound()
    out_node = next(n for n in nodes if n[1] & NODE_OUT)
    assert out_node[0] == "add" and "out" in out_node[11]


def test_backend_reads_bound_form_only():
    """backend/ includes nothing from capture/ and never binds or resolves a callable."""
    bad = []
    for name in sorted(os.listdir(os.path.join(REPO, "backend"))):
        if not name.endswith((".c", ".h")):
            continue
        with open(os.path.join(REPO, "backend", name)) as fh:
            text = fh.read()
        for m in re.finditer(r'#\s*include\s+"([^"]+)"', text):
            if "capture/" in m.group(1):
                bad.append(f"{name}: includes {m.group(1)}")
        code = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
        for fn in ("callables_[a-z_]+", "callable_rows", "bind_args"):
            for m in re.finditer(r"\b(%s)\b" % fn, code):
                bad.append(f"{name}: uses {m.group(1)}")
    assert not bad, bad
