"""The torch-callable coverage list of real models (docs/torch_call_coverage.md).

tools/torch_call_coverage.py traces the models (`make coverage`, minutes: not run here)
into tools/torch_calls.json; these tests only recompute the statuses from the traced
names against the callables table of the shapejit under test:

  - the checked-in document is what the tool writes now (regenerate it with
    `python3 tools/torch_call_coverage.py --write` after a change to vocab/callables.def);
  - every name called covered resolves, by identity, to a row of the callables table
    (an operator dunder to its operator.* row);
  - every name called answered compiles, in a probe, without a break and to eager's value;
  - no traced name is left without a status: covered, answered, inlined or left with a
    reason; and every reason given still names a traced callable.
"""
import operator

import pytest
import torch

import shapejit
from repo import tool
from shapejit import _C

cov = tool("torch_call_coverage")

DATA = cov.load()
NAMES = sorted(cov.callers(DATA))
STATUS = cov.statuses(DATA)


def test_document_in_step():
    with open(cov.DOC) as fh:
        text = fh.read()
    assert text == cov.render(DATA), (
        "docs/torch_call_coverage.md is out of step with vocab/callables.def or "
        "tools/torch_calls.json: run `python3 tools/torch_call_coverage.py --write`")


def test_enough_models():
    assert len(DATA["models"]) >= 18


def _row_paths():
    return {row[2] for row in _C._callable_rows()}


@pytest.mark.parametrize("name", [n for n in NAMES if STATUS[n][0] == "covered"])
def test_covered_resolves_to_a_row(name):
    path = STATUS[name][1]
    assert path in _row_paths(), "%s: %s is not a row of the callables table" % (name, path)
    row_obj = cov.resolve(path)
    attr = name.split(".")[-1]
    if name.startswith("Tensor.") and attr in cov.OPERATOR_OF:
        assert row_obj is getattr(operator, cov.OPERATOR_OF[attr])
    else:
        assert row_obj is cov.resolve(name)
    assert path not in _C.callables_missing()


@pytest.mark.parametrize("name", [n for n in NAMES if STATUS[n][0] == "answered"])
def test_answered_compiles_without_a_break(name):
    probe = cov.ANSWERED[name][1]
    scope = {"torch": torch}
    body = probe if probe.startswith("with ") else "return " + probe
    exec("def probe(x):\n    %s\n" % body, scope)
    fn = scope["probe"]
    x = torch.randn(2, 3)
    out = shapejit.explain(fn)(x)
    assert out.graph_break_count == 0, "%s: %s" % (name, [b.reason for b in out.break_reasons])
    expected = fn(x)
    got = shapejit.compile(fn)(x)
    if isinstance(expected, torch.Tensor):
        torch.testing.assert_close(got, expected)
    else:
        assert got == expected, name


def test_every_name_has_a_status():
    missing = [n for n in NAMES if STATUS[n][0] == "not covered"]
    assert not missing, ("traced torch callables neither covered, answered, inlined nor left "
                         "with a reason: %s" % missing)


def test_reasons_name_traced_callables():
    stale = [n for n in cov.LEFT if n not in NAMES]
    assert not stale, "LEFT reasons for callables no model calls any more: %s" % stale
    # a callable given a row since its reason was written: the reason must go
    covered = [n for n in cov.LEFT if n in NAMES and STATUS[n][0] != "left"]
    assert not covered, "LEFT reasons for callables now covered (remove them): %s" % covered


def test_status_of_a_table_row():
    rows = cov.table_objects()
    assert cov.status_of("torch.nn.functional.linear", rows)[0] == "covered"
    assert cov.status_of("Tensor.__add__", rows) == ("covered", "operator.add")
    assert cov.status_of("Tensor.shape", rows)[0] == "answered"
    assert cov.status_of("torch.no_such_function", rows)[0] == "not covered"


# The error paths of the keywords and rows added for these calls: shapejit raises what
# eager raises.
def _raises_like_eager(fn, *args):
    with pytest.raises(Exception) as eager:
        fn(*args)
    with pytest.raises(type(eager.value)) as got:
        shapejit.compile(fn)(*args)
    assert str(got.value) == str(eager.value)


def test_numpy_keywords_error_paths():
    import torch.nn.functional as F
    x = torch.randn(2, 3)
    _raises_like_eager(lambda t: torch.cat([t, t], 1, axis=0), x)   # dim twice
    _raises_like_eager(lambda t: F.softmax(t, axis=1), x)           # a Python function
    _raises_like_eager(lambda t: t.sum(keepdims=True, keepdim=True), x)


def test_added_rows_error_paths():
    import torch.nn.functional as F
    x = torch.randn(4, 6)
    _raises_like_eager(lambda t: F.one_hot(t.long().int(), 3), x)   # int32 index
    _raises_like_eager(lambda t: F.glu(t[:, :5]), x)                 # odd halving dim
    _raises_like_eager(lambda t: t.index_select(0, t), x)            # float index
    _raises_like_eager(lambda t: t.repeat_interleave(-1), x)
    _raises_like_eager(lambda t: torch.histc(t.long(), bins=3), x)
    _raises_like_eager(lambda t: t.reshape_as(t[:3]), x)
    _raises_like_eager(lambda t: F.unfold(t[None, None], 7), x)      # no sliding block
