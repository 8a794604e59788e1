"""The cpu backend drops each intermediate value after the last step that reads it
(backend/plan.c's release lists, backend/runtime.c), as eager would: a chain of large
intermediates peaks at a few of them, not at all of them, and results are unchanged."""
import tracemalloc

import numpy as np
import pytest
import torch

import shapejit
from lowering import lowering as _lowering

pytestmark = pytest.mark.usefixtures("fresh_shapejit")

N = 200_000          # float64: 1.6 MB per array
STAGES = 8


def chain(x):
    y = x * 2.0                   # a kernel: the graph is compiled, not replayed
    for _ in range(STAGES):
        y = np.sort(y + 1.0)      # eager steps, each making a new 1.6 MB array
    return y


def _peak_mb(fn, x):
    fn(x)   # compile and warm up outside the measurement
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        out = fn(x)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return out, (peak - base) / 1e6


def test_intermediates_released():
    x = np.random.default_rng(0).standard_normal(N)
    backend, made = _lowering()
    got, peak = _peak_mb(shapejit.compile(chain, backend=backend), x)
    np.testing.assert_array_equal(got, chain(x))
    assert made and made[0].stats["kernel_calls"] >= 1
    # eager itself holds about three arrays at a time (y, y + 1, its sort); all STAGES
    # intermediates kept to the end would be over 2 * STAGES arrays
    assert peak < 6 * 1.6, peak


def test_outputs_and_reused_values_kept():
    """A value returned, or read again much later, is not dropped early."""
    def f(x):
        a = x * 3.0
        b = torch.cumsum(a, 0)         # eager
        c = torch.sort(b + 1.0).values  # eager
        return a, c - a, b
    x = torch.randn(1000)
    backend, made = _lowering()
    got = shapejit.compile(f, backend=backend)(x)
    for g, e in zip(got, f(x)):
        torch.testing.assert_close(g, e)
