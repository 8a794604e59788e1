"""Compile time of the cpu backend stays bounded (backend/build.c, plan.c).

Python loops over range unroll into long straight-line graphs. Iterations that compute
the same thing are one kernel function (kernels are named by their text); what is left is
bounded by the knobs cpu_unit_ops (ops per translation unit and per fused kernel) and
cpu_graph_ops (ops per graph, past which kernels run as eager steps, logged), or their
environment variables. Every case compares with eager."""
import os
import time

import numpy as np
import pytest
import torch

import shapejit
from shapejit import _C
from lowering import lowering as _lowering

pytestmark = pytest.mark.usefixtures("fresh_shapejit")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SHAPEJIT_CACHE_DIR", str(tmp_path / "cache"))
    for var in ("SHAPEJIT_CPU_UNIT_OPS", "SHAPEJIT_CPU_GRAPH_OPS"):
        monkeypatch.delenv(var, raising=False)
    _C._cg_forget()
    yield tmp_path / "cache" / "kernels"
    _C._cg_forget()
    shapejit.set_logs()


def scan_torch(x):
    y = x.clone()
    for i in range(1, 3000):
        y[i] = y[i - 1] * 0.5 + x[i]
    return y


def scan_numpy(a):
    b = a.copy()
    for i in range(1, 3000):
        b[i] = b[i - 1] * 0.5 + a[i]
    return b


def scan_while(x):
    y = x.clone()
    i = 1
    while i < 3000:
        y[i:i + 1] = torch.tanh(y[i - 1:i]) + x[i:i + 1] * 0.25
        i += 1
    return y


def _libraries(kernels):
    return [n for n in os.listdir(kernels) if n.endswith(".so") and not n.startswith(".")]


@pytest.mark.parametrize("fn,make", [
    (scan_torch, lambda: torch.randn(3000, 4)),
    (scan_numpy, lambda: np.random.default_rng(0).standard_normal((3000, 4))),
    (scan_while, lambda: torch.randn(3000, 4)),
], ids=["torch_for", "numpy_for", "torch_while"])
def test_unrolled_slice_assignment_loop_compiles_quickly(cache, fn, make):
    """3000 iterations: one kernel function, not 3000 (the compiler's 120 s limit was hit)."""
    backend, made = _lowering()
    x = make()
    want = fn(x.copy() if isinstance(x, np.ndarray) else x.clone())
    t0 = time.time()
    got = shapejit.compile(fn, backend=backend)(x)
    assert time.time() - t0 < 60
    if isinstance(want, np.ndarray):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    else:
        torch.testing.assert_close(got, want)
    st = made[0].stats
    assert st["kernels"] >= 2999 and st["kernel_functions"] <= 4 and st["kernels_over_budget"] == 0, st
    assert st["eager_fallbacks"] == 0 and st["kernel_calls"] >= 2999, st


def distinct_constants(x):
    y = x.clone()
    for i in range(1, 40):
        y[i] = y[i - 1] * (0.5 + i) + x[i]   # each iteration its own constant: its own kernel
    return y


def test_graph_budget_leaves_the_excess_to_eager_steps(cache, monkeypatch, capfd):
    monkeypatch.setenv("SHAPEJIT_CPU_GRAPH_OPS", "300")
    shapejit.set_logs(output_code=30)
    backend, made = _lowering()
    x = torch.randn(40, 4)
    torch.testing.assert_close(shapejit.compile(distinct_constants, backend=backend)(x), distinct_constants(x))
    st = made[0].stats
    assert st["kernels"] >= 39 and 0 < st["kernels_over_budget"] < st["kernels"], st
    assert 1 <= st["kernel_functions"] <= 300 // (1 + 32), st
    assert "past the budget of 300 ops per graph (cpu_graph_ops)" in capfd.readouterr().err
    # the knob does the same when the variable is not set
    monkeypatch.delenv("SHAPEJIT_CPU_GRAPH_OPS")
    shapejit.reset()
    old = shapejit.config.cpu_graph_ops
    shapejit.config.cpu_graph_ops = 100
    try:
        backend, made = _lowering()
        torch.testing.assert_close(shapejit.compile(distinct_constants, backend=backend)(x), distinct_constants(x))
        assert 1 <= made[0].stats["kernel_functions"] <= 100 // (1 + 32)
    finally:
        shapejit.config.cpu_graph_ops = old


def test_unit_budget_splits_translation_units_and_chains(cache, monkeypatch):
    """A graph bigger than a unit compiles as several libraries; a fused chain longer than
    a unit is several kernels. Results unchanged."""
    monkeypatch.setenv("SHAPEJIT_CPU_UNIT_OPS", "120")

    def chain(x):
        for i in range(200):
            x = x * 0.999 + 0.001 * i   # 400 pointwise nodes, one chain
        return x

    backend, made = _lowering()
    x = torch.randn(16)
    torch.testing.assert_close(shapejit.compile(chain, backend=backend)(x), chain(x))
    st = made[0].stats
    assert st["kernels"] >= 400 // (120 - 32) and st["kernels_over_budget"] == 0, st
    assert len(_libraries(cache)) >= 2

    shapejit.reset()
    backend, made = _lowering()
    y = torch.randn(40, 4)
    torch.testing.assert_close(shapejit.compile(distinct_constants, backend=backend)(y), distinct_constants(y))
    assert made[0].stats["kernels_over_budget"] == 0
    assert len(_libraries(cache)) >= 2 + 39 * 34 // 120


@pytest.mark.parametrize("var", ["SHAPEJIT_CPU_UNIT_OPS", "SHAPEJIT_CPU_GRAPH_OPS"])
@pytest.mark.parametrize("value", ["lots", "-5", "1e3"])
def test_malformed_budget_variable_is_an_error_naming_it(cache, monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    seen = []

    def backend(graph, example_inputs):
        try:
            return _C._cg_compile_graph(graph)
        except ValueError as e:
            seen.append(str(e))
            raise

    x = torch.randn(8)
    fn = shapejit.compile(lambda t: torch.tanh(t) * 2.0, backend=backend)
    try:
        fn(x)
    except Exception:
        pass
    assert seen and var in seen[0] and repr(value)[1:-1] in seen[0]
