"""Symbolic shapes: dynamic dims and ints, their guards, marks, sources, logs.

Graph counts here are shapejit's own statement of behaviour; tests/e2e/test_dynamic_oracle.py
checks the same kinds of programs against torch.compile in the same run."""
import re

import pytest
import torch

import shapejit
from repo import package_parent


@pytest.fixture(autouse=True)
def _fresh():
    shapejit.reset()
    yield
    shapejit.reset()
    shapejit.set_logs(dynamic=False, guards=False, recompiles=False)


def _graphs():
    return shapejit.stats()["graphs"]


def _run(cf, fn, *args):
    torch.testing.assert_close(cf(*args), fn(*args))


def times_size(x):
    return x * x.size()[0]


def branchy(x):
    if x.size()[0] == 10:
        return x * 10
    if x.size()[0] <= 30:
        return x * 200
    return x * x.size()[0]


@pytest.mark.parametrize("dynamic,sizes,graphs", [
    (False, [10, 20, 30, 40], 4),
    (True, [10, 20, 30, 40], 1),
    (None, [10, 20, 30, 40], 2),     # static first, then the size is dynamic
])
def test_dynamic_flag(dynamic, sizes, graphs):
    cf = shapejit.compile(times_size, dynamic=dynamic)
    for n in sizes:
        _run(cf, times_size, torch.rand(n))
    assert _graphs() == graphs


def test_branches_on_sizes_are_guarded():
    cf = shapejit.compile(branchy, dynamic=True)
    for n in [10, 20, 30, 40, 50, 25, 10]:
        _run(cf, branchy, torch.rand(n))
    assert _graphs() == 3


def test_mark_dynamic_and_sources():
    cf = shapejit.compile(times_size)
    x = torch.randn(10)
    shapejit.mark_dynamic(x, 0)
    _run(cf, times_size, x)
    for n in (20, 30, 40):
        _run(cf, times_size, torch.randn(n))
    assert _graphs() == 1
    shapejit.reset()
    with shapejit.config.patch(dynamic_sources="L['x']"):
        cf = shapejit.compile(times_size)
        for n in (10, 20, 30, 40):
            _run(cf, times_size, torch.rand(n))
    assert _graphs() == 1


def test_mark_dynamic_violation_names_the_source_and_value():
    def f(x):
        if x.shape[0] == 5:
            return x + 1
        return x - 1

    x = torch.randn(5)
    shapejit.mark_dynamic(x, 0)
    with pytest.raises(shapejit._C.ConstraintViolationError) as info:
        shapejit.compile(f)(x)
    msg = str(info.value)
    assert "Constraints violated" in msg
    assert ("You marked L['x'].size()[0] as dynamic but your code specialized it to be a constant (5)"
            in msg)
    assert "maybe_mark_dynamic" in msg and "x.shape[0] == 5" in msg
    # maybe_mark_dynamic never errors: the same code specialises quietly
    y = torch.randn(5)
    shapejit.reset()
    shapejit.maybe_mark_dynamic(y, 0)
    torch.testing.assert_close(shapejit.compile(f)(y), f(y))


def test_mark_dynamic_range_is_guarded():
    def f(x):
        return x.sum(0) * x.shape[0]

    cf = shapejit.compile(f)
    x = torch.randn(8, 3)
    shapejit.mark_dynamic(x, 0, min=4, max=16)
    _run(cf, f, x)
    _run(cf, f, torch.randn(16, 3))
    assert _graphs() == 1
    _run(cf, f, torch.randn(17, 3))        # outside [4, 16]: a new graph
    assert _graphs() == 2


def test_mark_static_wins_over_dynamic_true():
    cf = shapejit.compile(times_size, dynamic=True)
    x = torch.randn(10)
    shapejit.mark_static(x, 0)
    _run(cf, times_size, x)
    _run(cf, times_size, torch.randn(12))  # unmarked: dynamic
    assert _graphs() == 2


def test_ints_become_dynamic_once_they_change():
    def f(x, n):
        return x * n + n // 2

    cf = shapejit.compile(f)
    x = torch.randn(4)
    for n in (3, 5, 7, 9, 100):
        _run(cf, f, x, n)
    assert _graphs() == 2
    with shapejit.config.patch(specialize_int=True):
        shapejit.reset()
        cf = shapejit.compile(f)
        for n in (3, 5, 7):
            _run(cf, f, x, n)
        assert _graphs() == 3


def test_zero_one_specialisation():
    cf = shapejit.compile(times_size, dynamic=True)
    for n in (1, 5, 9, 1, 0):
        _run(cf, times_size, torch.rand(n))
    assert _graphs() == 3      # size 1, the symbolic graph (2 <= s0), size 0


def test_duck_sizing_shares_a_symbol_and_guards_equality():
    def f(x, y):
        return x + y

    cf = shapejit.compile(f, dynamic=True)
    _run(cf, f, torch.rand(6), torch.rand(6))
    _run(cf, f, torch.rand(9), torch.rand(9))
    assert _graphs() == 1
    _run(cf, f, torch.rand(9), torch.rand(1))   # broadcasting: a different program
    assert _graphs() == 2


def test_duck_sizing_only_when_everything_is_dynamic():
    """Listed, marked and automatic-dynamic sizes each get their own symbol (as in
    torch): equal sizes on the first call do not tie later calls together."""
    def f(x, y):
        if x.shape[0] + y.shape[0] <= 30:
            return x.sum() + y.sum()
        return x.mean() - y.mean()

    cf = shapejit.compile(f)
    with shapejit.config.patch(dynamic_sources="L['x'],L['y']"):
        for n, m in [(5, 5), (10, 12), (20, 15), (3, 4), (30, 40)]:
            _run(cf, f, torch.rand(n), torch.rand(m))
    assert _graphs() == 2      # one per branch; no equality guard from (5, 5)
    shapejit.reset()
    cf = shapejit.compile(f, dynamic=True)
    _run(cf, f, torch.rand(5), torch.rand(5))
    _run(cf, f, torch.rand(10), torch.rand(12))
    assert _graphs() == 2      # dynamic=True: duck sized on the first call


def test_frame_with_only_size_work():
    """A dynamic size's arithmetic is computed at run time: a graph. A frame with nothing
    to capture is not looked at again until reset (torch: "no content")."""
    def f(x):
        return x.shape[0] * 2 + 1

    cf = shapejit.compile(f, dynamic=True)
    assert [cf(torch.rand(n)) for n in (3, 4, 9)] == [7, 9, 19]
    assert _graphs() == 1
    shapejit.reset()
    cf = shapejit.compile(f)
    assert [cf(torch.rand(n)) for n in (3, 4, 9)] == [7, 9, 19]
    assert _graphs() == 0 and shapejit.stats()["frames"] == 1


def test_symbolic_ops_and_returned_sizes():
    def f(x, w):
        b, n = x.shape
        y = (x @ w).reshape(-1).view(b, -1)
        z = torch.nn.functional.softmax(y.t(), dim=0).sum(dim=1, keepdim=True)
        return z.flatten(), b * n, x.numel(), len(x)

    cf = shapejit.compile(f, dynamic=True)
    w = torch.randn(3, 5)
    for b in (2, 4, 7):
        x = torch.randn(b, 3)
        got, want = cf(x, w), f(x, w)
        torch.testing.assert_close(got[0], want[0])
        assert got[1:] == want[1:]
    assert _graphs() == 1


def test_guards_and_dynamic_logs(capfd):
    shapejit.set_logs(dynamic=True, guards=True, recompiles=True)
    cf = shapejit.compile(branchy, dynamic=True)
    cf(torch.rand(20))
    cf(torch.rand(40))
    err = capfd.readouterr().err
    assert re.search(r"create_symbol s0 = 20 for L\['x'\]\.size\(\)\[0\] \[2, int_oo\]", err)
    assert "eval Ne(s0, 10) [guard added] if x.size()[0] == 10:" in err
    assert "eval s0 <= 30 [guard added]" in err
    assert "size=[None], stride=[1]" in err
    assert "SHAPE_ENV: 2 <= L['x'].size()[0]" in err
    assert "SHAPE_ENV: L['x'].size()[0] <= 30" in err
    assert "- 0/0: L['x'].size()[0] <= 30  (L['x'].size()[0] = 40)" in err


def test_dense_layout_guard_for_dynamic_transposed_input():
    def f(x):
        return x.sum(1) * x.shape[0]

    cf = shapejit.compile(f, dynamic=True)
    for n in (3, 6):
        _run(cf, f, torch.randn(4, n).t())     # transposed: dense in another order
    assert _graphs() == 1
    _run(cf, f, torch.randn(6, 4))             # contiguous: another layout, another entry
    assert _graphs() == 2


def test_numpy_sizes_are_dynamic_too():
    import numpy as np

    def f(a):
        return a * a.shape[0] + a.size

    cf = shapejit.compile(f, dynamic=True)
    for n in (3, 8, 11):
        a = np.arange(n, dtype=np.float64)
        np.testing.assert_allclose(cf(a), f(a))
    assert _graphs() == 1


_SCRIPT = """
import sys, torch, shapejit
def f(x):
    return x * 2
cf = shapejit.compile(f)
for n in map(int, sys.argv[1:]):
    x = torch.randn(n)
    torch.testing.assert_close(cf(x), x * 2)
print(shapejit.stats()["graphs"])
"""


def _child(tmp_path, env, *sizes):
    import os
    import subprocess
    import sys
    script = tmp_path / "pgo_user.py"
    script.write_text(_SCRIPT)
    full = dict(os.environ, **env)
    full.pop("TORCH_LOGS", None)
    full["PYTHONPATH"] = package_parent()
    r = subprocess.run([sys.executable, str(script), *map(str, sizes)], env=full, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return int(r.stdout.strip().splitlines()[-1])


def test_pgo_second_process_compiles_once(tmp_path):
    env = {"SHAPEJIT_CACHE_DIR": str(tmp_path / "cache"), "TORCH_COMPILE_JOB_ID": "job-a",
           "TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO": "1"}
    assert _child(tmp_path, env, 3, 4, 5) == 2          # static, then automatic dynamic
    assert _child(tmp_path, env, 6, 7, 8) == 1          # dynamic from the first compile
    import shapejit.pgo as pgo
    text = pgo.format_state(__import__("json").loads(
        next((tmp_path / "cache" / "pgo").glob("*.json")).read_text()))
    assert "L['x']: tensor size=[?]" in text
    # another job id starts from nothing
    env["TORCH_COMPILE_JOB_ID"] = "job-b"
    assert _child(tmp_path, env, 6, 7, 8) == 2
    # PGO off: nothing is read
    env["TORCH_COMPILE_JOB_ID"] = "job-a"
    env["TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO"] = "0"
    assert _child(tmp_path, env, 6, 7, 8) == 2


def test_dynamic_sources_env_variable(tmp_path):
    assert _child(tmp_path, {"TORCH_COMPILE_DYNAMIC_SOURCES": "L['x']"}, 3, 4, 5) == 1
    assert _child(tmp_path, {"TORCH_COMPILE_DYNAMIC_SOURCES": "L\\['y'\\]"}, 3, 4, 5) == 2
    assert _child(tmp_path, {"TORCH_COMPILE_STATIC_SOURCES": "L['x']"}, 3, 4, 5) == 3
