"""100,000 compiled calls (cache hits) keep memory flat and the cache at one entry."""
import gc
import os
import resource

import numpy as np
import pytest
import torch

import shapejit

CALLS = 100_000
WARMUP = 2_000
BOUND_MB = 20.0
# Under AddressSanitizer freed memory sits in ASan's quarantine (up to 256 MB), so RSS
# grows without a leak; there the test still checks the cache but not the RSS bound.
SANITIZED = "libasan" in os.environ.get("LD_PRELOAD", "")


@pytest.fixture(autouse=True)
def _fresh_shapejit():
    shapejit.reset()
    yield
    shapejit.reset()


def _rss_mb():
    """Current resident set size (not the peak), from /proc/self/statm."""
    with open("/proc/self/statm") as f:
        resident_pages = int(f.read().split()[1])
    return resident_pages * resource.getpagesize() / 2**20


def _add_one(x):
    return x + 1


def _run(compiled, inputs):
    out = None
    for i in range(WARMUP):
        out = compiled(inputs[i % len(inputs)])
    gc.collect()
    before = _rss_mb()
    for i in range(CALLS):
        out = compiled(inputs[i % len(inputs)])
    del out
    gc.collect()
    growth = _rss_mb() - before
    if not SANITIZED:
        assert growth < BOUND_MB, f"RSS grew by {growth:.1f} MB over {CALLS} compiled calls"
    st = shapejit.stats()
    assert st["cache_entries"] == 1 and st["frames"] == 1 and st["recompiles"] == 0, st
    return compiled(inputs[0])


def test_memory_flat_torch():
    inputs = [torch.rand(1) for _ in range(4)]
    compiled = shapejit.compile(_add_one, fullgraph=True)
    res = _run(compiled, inputs)
    torch.testing.assert_close(res, inputs[0] + 1)


def test_memory_flat_numpy():
    rng = np.random.default_rng(0)
    inputs = [rng.random(1) for _ in range(4)]
    compiled = shapejit.compile(_add_one, fullgraph=True)
    res = _run(compiled, inputs)
    np.testing.assert_allclose(res, inputs[0] + 1)
