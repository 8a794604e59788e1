"""Differential fuzz test over Python constructs (tests/e2e/pyfuzz/gen.py): containers and
their views, dict/list/set methods, closures and cells, user classes with __setattr__,
__getattr__, properties and super(), decorators, generators consumed by builtins, loops
whose bodies break the graph, exceptions. Every program runs eagerly and through
shapejit.compile under backend="eager" (and, for one program in ten, the default
backend), twice with fresh inputs; results, exception types, printed text and the
caller's containers after the call must all agree (tests/e2e/pyfuzz/run.py).

The CI share is SHAPEJIT_PY_FUZZ_COUNT programs (default 1000) from SHAPEJIT_PY_FUZZ_SEED
(default 0); `make fuzz-py` runs 50,000 in child processes, counting crashes.
"""
import os

import pytest

import shapejit
from pyfuzz import run

COUNT = int(os.environ.get("SHAPEJIT_PY_FUZZ_COUNT", "1000"))
FIRST = int(os.environ.get("SHAPEJIT_PY_FUZZ_SEED", "0"))
PER_TEST = 50   # programs per test item: a failure names its block of seeds


@pytest.fixture(scope="module", autouse=True)
def _reset_after():
    yield
    shapejit.reset()


@pytest.mark.parametrize("block", range(FIRST, FIRST + COUNT, PER_TEST))
def test_py_fuzz(block):
    failures = []
    for seed in range(block, min(block + PER_TEST, FIRST + COUNT)):
        diff = run.check(seed, run.backends_for(seed, 10))
        if diff is not None and not run.generate(seed).kinds & run.KNOWN_GAPS:
            failures.append(diff)   # a known gap's program runs, but does not fail the test
    assert not failures, "\n".join(failures)
