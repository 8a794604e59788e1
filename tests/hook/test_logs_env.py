"""TORCH_LOGS as torch reads it: every name torch accepts keeps `import shapejit` working
(shapejit's channels, torch's groups of them, and torch's other names with a warning); a
name nobody knows is a ValueError, as `import torch` raises with the same value."""
import logging
import os
import subprocess
import sys
import warnings

import pytest
import torch._logging._internal as torch_logs

import shapejit
from repo import package_parent
from shapejit import logs

ALL = set(logs.CHANNELS)
FRONTEND = ALL - {"output_code"}


def torch_accepts(spec):
    try:
        torch_logs._parse_log_settings(spec)
    except ValueError:
        return False
    return True


def parse(spec):
    """shapejit's reading of spec: ({channel: level}, [warning texts])."""
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        levels = logs.parse_spec(spec)
    return levels, [str(m.message) for m in w]


@pytest.mark.parametrize("spec, on, level", [
    ("all", ALL, logging.INFO),
    ("+all", ALL, logging.DEBUG),
    ("torch", ALL, logging.INFO),
    ("dynamo", FRONTEND, logging.INFO),
    ("+dynamo", FRONTEND, logging.DEBUG),
    ("inductor", {"output_code"}, logging.INFO),
    ("recompiles_verbose", {"recompiles"}, logging.INFO),
    ("+verbose_guards", {"guards"}, logging.DEBUG),
    ("+dynamo,-guards", FRONTEND - {"guards"}, logging.DEBUG),
    ("-dynamo", set(), None),
])
def test_torch_group_names_map_onto_channels(spec, on, level):
    assert torch_accepts(spec)
    levels, warned = parse(spec)
    assert not warned
    assert {c for c, lv in levels.items() if lv} == on
    assert all(levels[c] == level for c in on)


@pytest.mark.parametrize("spec", ["perf_hints", "not_implemented", "aot", "+fusion",
                                  "graph_breaks,side_effects", "torch._dynamo.guards"])
def test_torch_names_shapejit_lacks_warn(spec):
    assert torch_accepts(spec)
    levels, warned = parse(spec)
    assert len(warned) == 1 and "does not have" in warned[0]
    assert {c for c, lv in levels.items() if lv} == ({"graph_breaks"} if "graph_breaks" in spec
                                                    else set())


@pytest.mark.parametrize("spec", ["bogus", "graph_breaks,dynamoo", "+not a name", "help"])
def test_names_nobody_knows_raise_as_torch_does(spec):
    assert not torch_accepts(spec)
    with pytest.raises(ValueError, match="TORCH_LOGS"):
        logs.parse_spec(spec)


def test_set_logs_takes_group_names():
    try:
        shapejit.set_logs(all=True)
        assert set(c for c, lv in logs.levels().items() if lv == logging.INFO) == ALL
        shapejit.set_logs(dynamo=logging.DEBUG, guards=False)
        assert {c for c, lv in logs.levels().items() if lv} == FRONTEND - {"guards"}
    finally:
        shapejit.set_logs()


def _import_with(spec):
    env = dict(os.environ, TORCH_LOGS=spec)
    root = package_parent()
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in [env.get("PYTHONPATH")] if p])
    code = ("import shapejit; print(sorted(c for c, v in shapejit.logs.levels().items() "
            "if v))")
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=root,
                          capture_output=True, text=True, timeout=120)


def test_import_with_torch_names():
    out = _import_with("+all,perf_hints")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(sorted(ALL))
    assert "perf_hints" in out.stderr and "does not have" in out.stderr
