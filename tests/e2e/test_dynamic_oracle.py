"""The oracle sweep of the symbolic-shapes issue: shapejit's graph counts under automatic
dynamic, mark_dynamic, dynamic=True/False and dynamic_sources equal torch.compile's,
measured in the same test run, and every compiled result equals eager.

Three parts:

1. The seed documents (/work/shared/seeds/000_*, 001_*, 002_*, 004_*): every code cell
   runs unchanged, once with plain torch (torch.compile's backend swapped for a
   graph-counting one, which runs no inductor) and once with
   shapejit.install_torch_compat() active. Both counts must equal the documents' stated
   result. The cells are copied below as literal strings (they are the specification);
   test_seed_cells_cover_the_documents checks, when the seed files are present, that
   every code cell of the documents is one of them.

2. The 0/1 grid: a (batch, seq, 4) function under automatic dynamic over batch in
   {1, 2, 3, 7, 64} x seq in {1, 2, 5, 128, 512}, in the orders of GRID_ORDERS (the
   order decides the count: see there). "At most 3 graphs (the 0/1 cases)" holds for the
   sweep whose calls have batch 1 or seq 1; the full grids need 4 (torch.compile too).

3. The sweep corpus (dynamic_corpus.py, >= 30 functions and modules), every case under
   each of its modes (auto, dyn_true, dyn_false, mark, sources).

Counting. torch: ``torch.compile(fn, backend=counter, dynamic=...)`` where counter counts
the graphs it is handed and returns gm.forward; torch._dynamo.reset() before each run.
shapejit: shapejit.reset(), ``shapejit.compile(fn, dynamic=..., backend="eager")``, then
``shapejit.stats()["graphs"]``. Each torch count is measured once per session and kept
for the shapejit test of the same case.

SJ_ORACLE_ONLY=1 skips every shapejit half (only torch runs, each count measured twice:
it must be deterministic): a check of the oracle itself. SJ_ORACLE_REPEAT=n measures
each torch count n times.

No knob is patched: test_knobs_agree checks that the knobs that decide graph counts
(cache limits, automatic dynamic, int specialisation, ...) have the same values on both
sides.
"""
import contextlib
import functools
import glob
import io
import os
import re
import warnings

import pytest
import torch
import torch._dynamo
import torch._dynamo.decorators  # noqa: F401  (the 004 cell uses torch._dynamo.decorators)
import torch._logging
import torch.compiler
import torch.fx.experimental._config as fx_config
from torch._dynamo.utils import counters as dynamo_counters

import shapejit
from dynamic_corpus import CASES, Case, batch_seq_fn, params
from graph_counter import GraphCounter

ORACLE_ONLY = os.environ.get("SJ_ORACLE_ONLY", "") not in ("", "0")
# How many times each torch count is measured (all must agree): twice when checking the
# oracle alone, once otherwise (torch.compile costs ~25 ms a graph: the sweep would pass
# the one-minute budget). SJ_ORACLE_REPEAT=n overrides.
ORACLE_REPEAT = max(1, int(os.environ.get("SJ_ORACLE_REPEAT", "2" if ORACLE_ONLY else "1")))
SEED_DIR = os.environ.get("SJ_SEED_DIR", "/work/shared/seeds")

# torch's own objects, bound now: shapejit.install_torch_compat() reroutes the public
# names while a seed cell runs, and the oracle must stay torch's.
assert not shapejit.compat.is_installed(), "torch compat installed at import"
_TORCH_COMPILE = torch.compile
_TORCH_RESET = torch._dynamo.reset
_TORCH_SET_LOGS = torch._logging.set_logs
_TORCH_DYNAMO_CONFIG = torch._dynamo.config
_TORCH_COMPILER_CONFIG = torch.compiler.config
_TORCH_MARKS = {"mark_dynamic": torch._dynamo.mark_dynamic,
                "maybe_mark_dynamic": torch._dynamo.maybe_mark_dynamic}
for _obj in (_TORCH_COMPILE, _TORCH_RESET, *_TORCH_MARKS.values()):
    assert _obj.__module__.startswith("torch"), _obj

needs_shapejit = pytest.mark.skipif(ORACLE_ONLY, reason="SJ_ORACLE_ONLY=1: oracle half only")


@pytest.fixture(autouse=True)
def _clean_state():
    _TORCH_RESET()
    shapejit.reset()
    yield
    if shapejit.compat.is_installed():
        shapejit.uninstall_torch_compat()
    _TORCH_RESET()
    shapejit.reset()


@contextlib.contextmanager
def _quiet():
    """Cache-limit warnings and the like are expected; keep them out of the way."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def test_knobs_agree():
    """The knobs that decide graph counts start equal on both sides (no test patches
    them)."""
    dyn, comp = _TORCH_DYNAMO_CONFIG, _TORCH_COMPILER_CONFIG
    pairs = {
        "cache_size_limit": dyn.recompile_limit,
        "accumulated_cache_size_limit": dyn.accumulated_recompile_limit,
        "automatic_dynamic_shapes": dyn.automatic_dynamic_shapes,
        "assume_static_by_default": dyn.assume_static_by_default,
        "specialize_int": dyn.specialize_int,
        "force_parameter_static_shapes": dyn.force_parameter_static_shapes,
        "force_nn_module_property_static_shapes": dyn.force_nn_module_property_static_shapes,
        "allow_unspec_int_on_nn_module": dyn.allow_unspec_int_on_nn_module,
        "capture_scalar_outputs": dyn.capture_scalar_outputs,
        "capture_dynamic_output_shape_ops": dyn.capture_dynamic_output_shape_ops,
        "backed_size_oblivious": fx_config.backed_size_oblivious,
        "dynamic_sources": comp.dynamic_sources,
        "unbacked_sources": comp.unbacked_sources,
    }
    ours = {name: getattr(shapejit.config, name) for name in pairs}
    assert ours == pairs
    # torch-only knobs that would change the counts if they were not at their defaults
    assert dyn.automatic_dynamic_shapes_mark_as == "dynamic"
    assert dyn.specialize_float is False


# =======================================================================================
# Running one call sequence on either side
# =======================================================================================
def _mode_dynamic(mode):
    return {"dyn_true": True, "dyn_false": False}.get(mode)  # None: automatic


def _run_calls(target, compiled, module, calls, mark=None, marks=(), mark_each=False):
    """Calls compiled on each call's args, after eager on the same args; compares."""
    for i, call in enumerate(calls):
        for attr, value in call.attrs.items():
            setattr(module, attr, value)
        if mark is not None and (i == 0 or mark_each):
            for arg_index, dim in marks:
                mark(call.args[arg_index], dim)
        expected = target(*call.args)
        got = compiled(*call.args)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5,
                                   msg=lambda m, i=i: "call %d: %s" % (i, m))


def run_torch(case: Case, mode: str) -> int:
    """torch.compile's graph count for a case under a mode (checks results too)."""
    module, calls = case.build()
    target = module if case.module else case.fn
    _TORCH_RESET()
    counter = GraphCounter()
    compiled = _TORCH_COMPILE(target, backend=counter, dynamic=_mode_dynamic(mode))
    ctx = (_TORCH_COMPILER_CONFIG.patch(dynamic_sources=case.sources) if mode == "sources"
           else contextlib.nullcontext())
    with ctx, _quiet():
        _run_calls(target, compiled, module, calls,
                   mark=_TORCH_MARKS[case.mark_fn] if mode == "mark" else None,
                   marks=case.mark, mark_each=case.mark_each)
    _TORCH_RESET()
    return counter.graphs


def run_shapejit(case: Case, mode: str) -> int:
    """shapejit's graph count for a case under a mode (checks results too)."""
    module, calls = case.build()
    target = module if case.module else case.fn
    shapejit.reset()
    compiled = shapejit.compile(target, dynamic=_mode_dynamic(mode), backend="eager")
    ctx = (shapejit.config.patch(dynamic_sources=case.sources) if mode == "sources"
           else contextlib.nullcontext())
    with ctx, _quiet():
        _run_calls(target, compiled, module, calls,
                   mark=getattr(shapejit, case.mark_fn) if mode == "mark" else None,
                   marks=case.mark, mark_each=case.mark_each)
    graphs = shapejit.stats()["graphs"]
    shapejit.reset()
    return graphs


_ORACLE = {}  # (case name, mode) -> torch's graph count, measured in this session


def _measure(run, *args):
    counts = [run(*args) for _ in range(ORACLE_REPEAT)]
    assert len(set(counts)) == 1, "torch.compile's count is not deterministic: %s" % counts
    return counts[0]


def oracle(case, mode):
    key = (case.name, mode)
    if key not in _ORACLE:
        _ORACLE[key] = _measure(run_torch, case, mode)
    return _ORACLE[key]


# =======================================================================================
# 1. The seed documents
# =======================================================================================
class SeedCell:
    def __init__(self, name, seeds, text, stated, derived_from=None, note=""):
        self.name = name
        self.seeds = seeds            # seed file prefixes holding this cell
        self.text = text
        self.stated = stated          # the graph count the documents state
        self.derived_from = derived_from  # None: verbatim; else the cell it edits
        self.note = note


# 000_*.txt and 001_*.txt (001 is a web mirror of the same document that lost the
# indentation; the code is otherwise identical): "four graphs were generated".
_CELL_DYNAMIC_FALSE = """\
import torch
@torch.compile(dynamic=False)
def f(x):
     return x* x.size()[0]

f(torch.rand(10))
f(torch.rand(20))
f(torch.rand(30))
f(torch.rand(40))
"""

# 000_*.txt and 001_*.txt: "only one graph is created".
_CELL_DYNAMIC_TRUE = """\
import torch
@torch.compile(dynamic=True)
def f(x):
     return x* x.size()[0]

f(torch.rand(10))
f(torch.rand(20))
f(torch.rand(30))
f(torch.rand(40))
"""

# 000_*.txt and 001_*.txt: "this creates three graphs".
_CELL_SPECIALIZATION = """\
import torch
@torch.compile(dynamic=True)
def f(x):
    if x.size()[0] == 10:
        return x * 10

    if x.size()[0] <= 30:
        return x*200

    return x*x.size()[0]

f(torch.rand(10))
f(torch.rand(20))
f(torch.rand(30))
f(torch.rand(40))
f(torch.rand(50))
"""

# 001_*.txt, "mark_dynamic(tensor, dim, min=min, max=max)" (indentation restored: the
# mirror dropped it): one graph.
_CELL_MARK_DYNAMIC = """\
import torch
@torch.compile
def f(x):
    return x * x.size()[0]

x = torch.randn(10)
torch._dynamo.mark_dynamic(x, 0)

# first invocation we give it is a tensor marked as dynamic
f(x)
# rest of these invocations will use dynamically compiled code
f(torch.randn(20))
f(torch.randn(30))
f(torch.randn(40))
"""

# 001_*.txt, "Dynamic Allow List (DYNAMIC_SOURCES)" (indentation restored; the four calls
# are the body of the with block): one graph.
_CELL_DYNAMIC_SOURCES = """\
import torch

@torch.compile()
def f(x):
    return x * x.size()[0]

with torch.compiler.config.patch(dynamic_sources="L['x']"):
    f(torch.rand(10))
    f(torch.rand(20))
    f(torch.rand(30))
    f(torch.rand(40))
"""

# 004_*.txt, "Basic example" (a ```python block; the document is plain markdown, whose
# context has torch imported). As written (dynamic=False, mark_dynamic commented out) the
# text says 98 graphs, one per size; both torch and shapejit stop at the cache limit (8)
# and run the remaining sizes eagerly.
_CELL_LOOP = """\
# test.py
torch._logging.set_logs(graph_breaks=True, graph_code=True)

@torch.compile(dynamic=False)
def foo(x):
    for _ in range(10):
        x = x.sin()
    return x

for i in range(2, 100):
    x = torch.randn(i)
    # torch._dynamo.decorators.mark_dynamic(x, 0) # uncomment out for dynamic shapes
    foo(x)
"""


def _edit(text, old, new):
    assert old in text, old
    return text.replace(old, new)


# "if we uncomment torch._dynamo.decorators.mark_dynamic(x, 0) ... only one graph"
_CELL_LOOP_MARK = _edit(_CELL_LOOP, "    # torch._dynamo.decorators.mark_dynamic(x, 0)",
                        "    torch._dynamo.decorators.mark_dynamic(x, 0)")
# the same loop under automatic dynamic (the default torch.compile): size 2 static, then
# one dynamic graph for 3..99
_CELL_LOOP_AUTO = _edit(_CELL_LOOP, "@torch.compile(dynamic=False)", "@torch.compile")

SEED_CELLS = [
    SeedCell("dynamic_false", ("000", "001"), _CELL_DYNAMIC_FALSE, 4),
    SeedCell("dynamic_true", ("000", "001"), _CELL_DYNAMIC_TRUE, 1),
    SeedCell("specialization", ("000", "001"), _CELL_SPECIALIZATION, 3),
    SeedCell("mark_dynamic", ("001",), _CELL_MARK_DYNAMIC, 1),
    SeedCell("dynamic_sources", ("001",), _CELL_DYNAMIC_SOURCES, 1),
    SeedCell("loop_as_written", ("004",), _CELL_LOOP, 8,
             note="the text says 98; the cache limit (8) caps it on both sides"),
    SeedCell("loop_mark_dynamic", ("004",), _CELL_LOOP_MARK, 1, derived_from="loop_as_written"),
    SeedCell("loop_automatic", ("004",), _CELL_LOOP_AUTO, 2, derived_from="loop_as_written"),
]
SEED_FILES = ("000", "001", "002", "004")  # 002 has no runnable cell (see the test below)


def _exec_cell(cell):
    namespace = {"__name__": "seed_cell_" + cell.name, "torch": torch}
    code = compile(cell.text, "<seed cell %s>" % cell.name, "exec")
    with _quiet(), contextlib.redirect_stdout(io.StringIO()):
        exec(code, namespace)


def run_cell_torch(cell):
    """The cell with plain torch; torch.compile gets the counting backend (a caller's own
    backend= would win, but no cell passes one)."""
    counter = GraphCounter()

    @functools.wraps(_TORCH_COMPILE)
    def counting_compile(model=None, **kwargs):
        kwargs.setdefault("backend", counter)
        return _TORCH_COMPILE(model, **kwargs)

    _TORCH_RESET()
    dynamo_counters.clear()
    torch.compile = counting_compile
    try:
        _exec_cell(cell)
    finally:
        torch.compile = _TORCH_COMPILE
        _TORCH_SET_LOGS()
    # dynamo's own count agrees with the backend's
    assert dynamo_counters["stats"]["unique_graphs"] == counter.graphs
    _TORCH_RESET()
    return counter.graphs


def run_cell_shapejit(cell):
    shapejit.reset()
    shapejit.install_torch_compat()
    try:
        _exec_cell(cell)
        graphs = shapejit.stats()["graphs"]
    finally:
        shapejit.uninstall_torch_compat()
        shapejit.set_logs()
        shapejit.reset()
    assert torch.compile is _TORCH_COMPILE
    return graphs


_CELL_ORACLE = {}


def cell_oracle(cell):
    if cell.name not in _CELL_ORACLE:
        _CELL_ORACLE[cell.name] = _measure(run_cell_torch, cell)
    return _CELL_ORACLE[cell.name]


@pytest.mark.parametrize("cell", SEED_CELLS, ids=[c.name for c in SEED_CELLS])
def test_seed_cell_oracle(cell):
    """torch.compile gives the documents' stated count."""
    assert cell_oracle(cell) == cell.stated


@needs_shapejit
@pytest.mark.parametrize("cell", SEED_CELLS, ids=[c.name for c in SEED_CELLS])
def test_seed_cell_shapejit(cell):
    """The cell runs unchanged through install_torch_compat() and gives torch's count,
    which is the stated one."""
    expected = cell_oracle(cell)
    got = run_cell_shapejit(cell)
    assert (got, expected) == (cell.stated, cell.stated), (
        "shapejit %d graphs, torch.compile %d, stated %d" % (got, expected, cell.stated))


# ---- the literals above are the documents' cells ---------------------------------------
_FENCE = re.compile(r"^```(\{code-cell\}|python)\s*$")


def _normalise(text):
    """Lines stripped of indentation, empty lines and the mirror's '|' lines dropped."""
    return tuple(s for s in (line.strip() for line in text.splitlines())
                 if s and not re.fullmatch(r"\|+", s))


def _code_blocks(path):
    """The code cells of a seed document: {code-cell} blocks that are not remove-cells,
    and ```python blocks that call torch.compile (the plain-markdown document's example;
    its other ```python snippets are fragments: a bare decorator line, a def never
    called)."""
    with open(path, encoding="utf-8") as fh:
        lines = list(_normalise(fh.read()))
    blocks, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while lines[j] != "```":
            j += 1
        body = lines[i + 1:j]
        i = j + 1
        if m.group(1) == "python":
            if any("torch.compile" in s for s in body):
                blocks.append(tuple(body))
        elif not (body and body[0].startswith(":tags:") and "remove-cell" in body[0]):
            blocks.append(tuple(s for s in body if not s.startswith(":")))
    return blocks


def _seed_path(prefix):
    found = sorted(glob.glob(os.path.join(SEED_DIR, prefix + "_*.txt")))
    return found[0] if found else None


def test_seed_cells_cover_the_documents():
    """Every code cell of the seed documents is one of SEED_CELLS (verbatim, up to the
    indentation the 001 mirror lost), and every verbatim SEED_CELL is in its documents."""
    paths = {p: _seed_path(p) for p in SEED_FILES}
    if not any(paths.values()):
        pytest.skip("seed documents not found in %s" % SEED_DIR)
    verbatim = [c for c in SEED_CELLS if c.derived_from is None]
    for prefix, path in paths.items():
        if path is None:
            continue
        blocks = _code_blocks(path)
        mine = {_normalise(c.text): c.name for c in verbatim if prefix in c.seeds}
        for block in blocks:
            assert block in mine, "%s: a code cell not in SEED_CELLS:\n%s" % (
                os.path.basename(path), "\n".join(block))
        assert set(mine) <= set(blocks), "%s lacks %s" % (
            os.path.basename(path), [mine[b] for b in set(mine) - set(blocks)])
        if prefix == "002":
            assert blocks == []  # advanced options: prose and fragments only


# =======================================================================================
# 2. Batch 1..64 x sequence 1..512 under automatic dynamic
# =======================================================================================
_BATCHES = (1, 2, 3, 7, 64)
_SEQS = (1, 2, 5, 128, 512)

# The order of the calls decides the count. Under automatic dynamic the first call
# compiles static sizes; a later call whose size differs makes that dim dynamic, but a
# dynamic dim whose value is 1 (or 0) is still specialised to it. A grid that has all four
# of (1, 1), (1, >=2), (>=2, 1), (>=2, >=2) needs four graphs at least, which starting
# with (1, 1) attains; starting with larger sizes wastes the first, static, graph.
GRID_ORDERS = {
    # batch outer, seq inner, ascending: (1,1), (1,2), ..., (64,512)
    "batch_outer": [(b, s) for b in _BATCHES for s in _SEQS],
    # seq outer, batch inner, ascending
    "seq_outer": [(b, s) for s in _SEQS for b in _BATCHES],
    # every batch size at seq 1, then every seq length at batch 1: only the 0/1 graphs
    "cross": [(b, 1) for b in _BATCHES] + [(1, s) for s in _SEQS[1:]],
    # large sizes first
    "descending": [(b, s) for b in reversed(_BATCHES) for s in reversed(_SEQS)],
}
# The most graphs allowed for each order, checked on both sides: 3 ("the 0/1 cases") for
# the sweep that has only those; 4 for the full grids starting at (1, 1), which need the
# four graphs above; none for "descending" (torch.compile makes 7: equality only).
GRID_BOUNDS = {"batch_outer": 4, "seq_outer": 4, "cross": 3, "descending": None}


def _within_bound(order, graphs):
    bound = GRID_BOUNDS[order]
    return bound is None or graphs <= bound


_GRID_CASES = {
    name: Case(name="grid_" + name, fn=batch_seq_fn, modes=("auto",),
               calls=(lambda order=order: [(torch.randn(b, s, 4),) for b, s in order]))
    for name, order in GRID_ORDERS.items()
}


# Cases where shapejit does not give torch.compile's count yet, each a strict xfail (a fix
# turns it into an XPASS failure, so the lists only shrink). Empty: every
# corpus pair and every grid order matches; a regression fails outright.
NOT_YET_CORPUS = frozenset()
NOT_YET_GRID = frozenset()


def _mark(ids, not_yet):
    return [pytest.param(*p, marks=pytest.mark.xfail(strict=True, reason="not symbolic yet"))
            if i in not_yet else pytest.param(*p) for p, i in ids]

@pytest.mark.parametrize("order", list(GRID_ORDERS))
def test_grid_oracle(order):
    graphs = oracle(_GRID_CASES[order], "auto")
    assert _within_bound(order, graphs), graphs


@needs_shapejit
@pytest.mark.parametrize("order", _mark([((o,), o) for o in GRID_ORDERS], NOT_YET_GRID))
def test_grid_shapejit(order):
    case = _GRID_CASES[order]
    expected = oracle(case, "auto")
    got = run_shapejit(case, "auto")
    assert got == expected, "shapejit %d graphs, torch.compile %d" % (got, expected)
    assert _within_bound(order, got), got


# =======================================================================================
# 3. The sweep corpus
# =======================================================================================
_PARAMS = params()
_IDS = ["%s-%s" % (c.name, m) for c, m in _PARAMS]


def test_corpus_size():
    names = [c.name for c in CASES]
    assert len(set(names)) == len(names)
    functions = {c.fn for c in CASES}
    assert len(functions) >= 30, len(functions)
    for mode in ("auto", "dyn_true", "dyn_false", "mark", "sources"):
        assert sum(mode in c.modes for c in CASES) >= 20, mode


@pytest.mark.parametrize("case,mode", _PARAMS, ids=_IDS)
def test_corpus_oracle(case, mode):
    """torch.compile runs the case (results equal eager) with a deterministic count."""
    assert oracle(case, mode) >= 0


@needs_shapejit
@pytest.mark.parametrize("case,mode", _mark(list(zip(_PARAMS, _IDS)), NOT_YET_CORPUS), ids=_IDS)
def test_corpus_shapejit(case, mode):
    """shapejit compiles as many graphs as torch.compile, and its results equal eager."""
    expected = oracle(case, mode)
    got = run_shapejit(case, mode)
    assert got == expected, "shapejit %d graphs, torch.compile %d" % (got, expected)
