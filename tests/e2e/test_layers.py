"""The C folders are layers with one direction: every `#include "..."` under them is checked
against the table below (the same table heads setup.py's C_DIRS). Pure source checks: no
build, no torch."""
import os
import re

import pytest

import repo

ROOT = repo.repo_root()

# folder -> (folders it may include, what it is). Bottom layer first.
LAYERS = {
    "core": ((), "config knobs, log channels, errors, trace, break reasons, policies"),
    "vocab": (("core",), "op vocabulary, callables, dtypes, tensor metadata, binder, libraries"),
    "bytecode": (("core",), "3.11 bytecode decoder and assembler"),
    "native": (("core",), "compile and load C: compiler driver, disk cache, loader"),
    "shapes": (("core", "vocab"), "shape and dtype rules, symbolic ints, the shape environment"),
    "graph": (("core", "vocab", "shapes"), "the graph IR"),
    "guards": (("core", "vocab", "shapes"),
               "guard trees, dispatch, sources, shape guards, per-code cache"),
    "capture": (("core", "vocab", "bytecode", "shapes", "graph", "guards"), "the symbolic evaluator"),
    "backend": (("core", "vocab", "shapes", "graph", "native"),
                "the cpu backend: plan, lower, emit, steps, oneDNN"),
    "resume": (("core", "vocab", "bytecode", "shapes", "graph", "guards", "capture"),
               "continuations after graph breaks"),
    "hook": (("core", "vocab", "bytecode", "shapes", "graph", "guards", "capture", "resume", "native"),
             "frame hook, compile driver, module init"),
}

# Edges against the table that are allowed anyway: none.
EXPECTED_EXCEPTIONS = set()

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def c_files():
    out = []
    for d in LAYERS:
        for base, _, names in os.walk(os.path.join(ROOT, d)):
            for n in names:
                if n.endswith((".c", ".h", ".def")):
                    out.append(os.path.relpath(os.path.join(base, n), ROOT))
    return sorted(out)


def includes():
    """(file, included path relative to the root, its folder) for every quoted include of a
    file in the tree (generated headers such as sj_opcodes.h are not in a folder)."""
    for f in c_files():
        with open(os.path.join(ROOT, f), encoding="utf-8") as fh:
            text = fh.read()
        for m in INCLUDE.finditer(text):
            target = os.path.normpath(os.path.join(os.path.dirname(f), m.group(1)))
            if not os.path.exists(os.path.join(ROOT, target)):
                continue
            yield f, target, target.split(os.sep)[0]


def test_table_matches_setup_py():
    with open(os.path.join(ROOT, "setup.py"), encoding="utf-8") as fh:
        text = fh.read()
    rows = {}
    for m in re.finditer(r"^#   (\w+)\s*\|([^|]*)\|\s*(.*)$", text, re.M):
        if m.group(1) == "folder":
            continue
        deps = tuple(x for x in m.group(2).split() if x != "-")
        rows[m.group(1)] = (deps, m.group(3).strip())
    assert rows == LAYERS
    c_dirs = re.search(r"C_DIRS = \[([^\]]*)\]", text).group(1)
    assert re.findall(r'"(\w+)"', c_dirs) == list(LAYERS)


def test_every_include_goes_down():
    bad = []
    seen = set()
    for f, target, folder in includes():
        here = f.split(os.sep)[0]
        if folder == here or folder not in LAYERS:
            continue
        if folder in LAYERS[here][0]:
            continue
        if (f, target) in EXPECTED_EXCEPTIONS:
            seen.add((f, target))
            continue
        bad.append("%s -> %s" % (f, target))
    assert bad == [], "includes against the layer table (setup.py, tests/test_layers.py):\n" + "\n".join(bad)
    # an exception that no longer happens is taken out of the list
    assert seen == EXPECTED_EXCEPTIONS, "edges gone, drop them from EXPECTED_EXCEPTIONS: %s" % sorted(
        EXPECTED_EXCEPTIONS - seen)


def test_backend_headers_stay_in_backend():
    bad = ["%s -> %s" % (f, t) for f, t, folder in includes()
           if folder == "backend" and f.split(os.sep)[0] != "backend"]
    assert bad == []


def test_c_never_imports_the_package():
    """Python's decisions reach C as registered policies (core/policies.def), never by C
    importing a shapejit module."""
    pat = re.compile(r'PyImport_Import(?:Module(?:Level)?)?\s*\(\s*"shapejit')
    bad = []
    for f in c_files():
        with open(os.path.join(ROOT, f), encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if pat.search(line):
                    bad.append("%s:%d: %s" % (f, n, line.strip()))
    assert bad == []


def test_policies_registered():
    shapejit = pytest.importorskip("shapejit")
    table = shapejit._C._policies()
    with open(os.path.join(ROOT, "core", "policies.def"), encoding="utf-8") as fh:
        rows = re.findall(r'^X\(\w+,\s*"(\w+)"', fh.read(), re.M)
    assert sorted(table) == sorted(rows)
    # the package registers every one when it is imported
    assert [name for name, (doc, fn) in table.items() if fn is None] == []
    with pytest.raises(ValueError):
        shapejit._C._set_policy("no_such_policy", print)
    with pytest.raises(TypeError):
        shapejit._C._set_policy("to_fx", 3)
