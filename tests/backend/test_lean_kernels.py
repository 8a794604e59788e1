"""Lean reduction kernels: a plan's reductions and row kernels are built first with only
their contiguous rows (without the split of one long row when they keep dims), or only
their columns when they keep the last dim; a call that needs the rest builds the
kernel's full variant, which serves every later call.
Compiled results equal eager whichever variant runs: strided rows (transposed and
permuted inputs, NaN and inf in them), a kept-dims reduction that has one long row, at 1
and 2 threads, and with the knob cpu_lean_reductions off."""
import pytest
import torch
import torch.nn.functional as F

import shapejit
from lowering import lowering as _lowering   # a backend that lowers and keeps what it made

pytestmark = pytest.mark.usefixtures("fresh_shapejit")


def _stat(made, key):
    return sum(m.stats[key] for m in made)


def _rows(x):
    return (x.sum(-1), x.mean(-1), x.amax(-1), torch.softmax(x, -1), torch.log_softmax(x, -1),
            F.layer_norm(x, (x.shape[-1],)))


def _check(c, fn, x):
    for g, w in zip(c(x), fn(x)):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5, equal_nan=True)


def test_contiguous_rows_need_no_full_variant(threads):
    backend, made = _lowering()
    c = shapejit.compile(_rows, backend=backend, dynamic=True)
    for rows, n in ((5, 33), (64, 1000), (1, 7)):
        _check(c, _rows, torch.randn(rows, n))
    assert made and _stat(made, "eager_fallbacks") == 0
    assert _stat(made, "full_variants_built") == 0
    assert "return 2;" in made[0].source   # the lean kernels' hand-back


@pytest.mark.parametrize("special", [None, float("nan"), float("inf")])
def test_strided_rows_build_the_full_variant_once(threads, special):
    backend, made = _lowering()
    c = shapejit.compile(_rows, backend=backend, dynamic=True)
    x = torch.randn(6, 37)
    _check(c, _rows, x)
    assert _stat(made, "full_variants_built") == 0
    for rows, n in ((37, 6), (70, 33), (3, 1000)):
        xt = torch.randn(n, rows).t()   # rows of stride n
        if special is not None:
            xt[rows // 2, n - 2] = special
        _check(c, _rows, xt)
        _check(c, _rows, torch.randn(rows, n))   # the contiguous rows still right after it
    assert made and _stat(made, "eager_fallbacks") == 0
    kernels = _stat(made, "kernels")
    assert 1 <= _stat(made, "full_variants_built") <= kernels


def test_permuted_trailing_dims(threads):
    """Two reduced dims that are not contiguous together: the full variant's offsets."""
    def f(x):
        return x.sum((-2, -1)), x.amax((-2, -1)), F.layer_norm(x, x.shape[-2:])

    backend, made = _lowering()
    c = shapejit.compile(f, backend=backend)
    x = torch.randn(4, 9, 11)
    _check(c, f, x)
    _check(c, f, x.permute(0, 2, 1).contiguous().permute(0, 2, 1))
    assert _stat(made, "eager_fallbacks") == 0 and _stat(made, "full_variants_built") >= 1


def test_kept_dims_one_long_row(threads):
    """sum over dim 1 of (1, N, 1): a kernel that keeps its last dim is lean with its
    columns only; a long contiguous row (split across the threads at 2) is the full
    variant's."""
    def f(x):
        return x.sum(1), x.amax(1), x.mean(1)

    backend, made = _lowering()
    c = shapejit.compile(f, backend=backend)
    x = torch.randn(1, 70_001, 1)
    x[0, 69_000, 0] = float("nan")
    _check(c, f, x)
    _check(c, f, x)
    assert _stat(made, "eager_fallbacks") == 0
    assert _stat(made, "full_variants_built") >= 1


def test_knob_off_builds_full_kernels():
    old = shapejit.config.cpu_lean_reductions
    shapejit.config.cpu_lean_reductions = False
    try:
        backend, made = _lowering()
        c = shapejit.compile(_rows, backend=backend)
        x = torch.randn(20, 30)
        _check(c, _rows, x)
        _check(c, _rows, torch.randn(30, 20).t())
        assert _stat(made, "eager_fallbacks") == 0 and _stat(made, "full_variants_built") == 0
        assert "return 2;" not in made[0].source
    finally:
        shapejit.config.cpu_lean_reductions = old


@pytest.mark.parametrize("order", ["C", "F", "every_other_column"])
def test_columns_then_rows(threads, order):
    """A column reduction (numpy axis 0): C order runs the lean kernel's columns, F order
    (its reduced dim contiguous) the full variant's rows, every other column of a C array
    the full variant's strided columns; all equal numpy."""
    import numpy as np

    def f(x):
        return x.mean(axis=0), x.max(axis=0), ((x - 1.0) ** 2).sum(axis=0)

    backend, made = _lowering()
    c = shapejit.compile(f, backend=backend, dynamic=True)
    rng = np.random.default_rng(3)
    for rows in (100, 1001):
        if order == "every_other_column":
            x = rng.standard_normal((rows, 66)).astype(np.float32)[:, ::2]
        else:
            x = np.asarray(rng.standard_normal((rows, 33)), dtype=np.float32, order=order)
        x[rows // 3, 5] = np.nan
        for g, w in zip(c(x), f(x)):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, equal_nan=True)
    assert _stat(made, "eager_fallbacks") == 0
    assert (_stat(made, "full_variants_built") >= 1) == (order != "C")


def _in_graph_t(x):
    y = x.t()   # the kernels read rows of stride x.shape[1]
    return torch.softmax(y, -1), y.sum(-1)


def test_in_graph_transpose_builds_the_full_variant():
    backend, made = _lowering()
    c = shapejit.compile(_in_graph_t, backend=backend)
    x = torch.randn(30, 9)
    _check(c, _in_graph_t, x)
    _check(c, _in_graph_t, x)
    assert _stat(made, "eager_fallbacks") == 0 and _stat(made, "full_variants_built") >= 1


def test_full_variant_build_failure_runs_eagerly(tmp_path, monkeypatch):
    """A compiler that fails on the full variants (and only on them): the calls that need
    one run the kernel's nodes eagerly, its build is not tried again, and the results
    still equal eager."""
    log = tmp_path / "failed"
    cc = tmp_path / "cc.sh"
    cc.write_text("#!/bin/sh\n"
                  "for a; do case $a in *.c) if grep -q 'if (fast) {' \"$a\"; then echo x >> %s; exit 1; fi;; esac; done\n"
                  "exec \"$@\"\n" % log)
    cc.chmod(0o755)
    monkeypatch.setenv("CC", "%s gcc" % cc)
    backend, made = _lowering()
    c = shapejit.compile(_in_graph_t, backend=backend)
    x = torch.randn(30, 9)
    for _ in range(3):
        _check(c, _in_graph_t, x)
    assert _stat(made, "full_variants_built") == 0 and _stat(made, "eager_fallbacks") >= 3
    tries = len(log.read_text().split())
    assert 1 <= tries <= _stat(made, "kernels")   # once per kernel at most
