"""The Python surface of shapejit: config, logs, backends, compile()'s argument handling,
decorator forms, marks, stances and the torch compat switch. Nothing here depends on how
much capture supports: the compiled functions are trivial and only checked against eager.
"""
import logging
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

import shapejit
from repo import package_parent
from shapejit import _C


@pytest.fixture(autouse=True)
def _restore_state():
    """Every test leaves knobs, log levels and torch as it found them."""
    knobs = shapejit.config.to_dict()
    levels = shapejit.logs.levels()
    yield
    shapejit.uninstall_torch_compat()
    for name, value in knobs.items():
        _C.config_set(name, value)
    for name, level in levels.items():
        _C.set_log_level(name, level)


def _child_env(**extra):
    """Environment for a child python that imports this very shapejit."""
    env = dict(os.environ)
    root = package_parent()
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in [env.get("PYTHONPATH")] if p])
    env.update(extra)
    return env, root


# ---------------------------------------------------------------------------------------
# Public names
# ---------------------------------------------------------------------------------------

def test_public_names():
    for name in ["compile", "reset", "stats", "explain", "disable", "config", "set_logs",
                 "set_stance", "install_torch_compat", "uninstall_torch_compat",
                 "mark_dynamic", "maybe_mark_dynamic", "mark_static", "mark_unbacked"]:
        assert hasattr(shapejit, name), name
        assert name in shapejit.__all__


def test_stats_and_reset():
    shapejit.reset()
    s = shapejit.stats()
    for key in ["frames", "graphs", "graph_breaks", "recompiles", "cache_entries",
                "compile_time_s"]:
        assert key in s, key
    assert isinstance(s["compile_time_s"], float)
    assert s["cache_entries"] == 0


# ---------------------------------------------------------------------------------------
# Config
# ---------------------------------------------------------------------------------------

EXPECTED_DEFAULTS = {
    "cache_size_limit": 8, "accumulated_cache_size_limit": 256,
    "automatic_dynamic_shapes": True, "assume_static_by_default": True,
    "specialize_int": False, "force_parameter_static_shapes": True,
    "force_nn_module_property_static_shapes": True, "allow_unspec_int_on_nn_module": False,
    "backed_size_oblivious": False, "capture_scalar_outputs": False,
    "capture_dynamic_output_shape_ops": False, "dynamic_sources": "", "static_sources": "",
    "unbacked_sources": "", "stance": "default", "inline_depth_limit": 32,
    "verify_graphs": True, "raise_internal_errors": False, "threads": 0,
}


def test_config_table_defaults():
    rows = {name: (kind, default, doc) for name, kind, default, doc in _C.config_knobs()}
    for name, default in EXPECTED_DEFAULTS.items():
        kind, table_default, doc = rows[name]
        assert table_default == default and type(table_default) is type(default), name
        assert kind == {bool: "bool", int: "int", str: "str"}[type(default)]
        assert doc
    assert shapejit.config.defaults() == {n: rows[n][1] for n in rows}


def test_config_read_write():
    c = shapejit.config
    c.cache_size_limit = 3
    assert c.cache_size_limit == 3 and _C.config_get("cache_size_limit") == 3
    c.specialize_int = True
    assert c.specialize_int is True
    c.dynamic_sources = "L['x']"
    assert c.dynamic_sources == "L['x']"
    assert "cache_size_limit" in dir(c) and "recompile_limit" in dir(c)


def test_config_alias():
    assert shapejit.config.aliases()["recompile_limit"] == "cache_size_limit"
    shapejit.config.recompile_limit = 5
    assert shapejit.config.cache_size_limit == 5
    shapejit.config.cache_size_limit = 6
    assert shapejit.config.recompile_limit == 6


@pytest.mark.parametrize("name, value, exc, words", [
    ("cache_size_limit", "8", TypeError, ["cache_size_limit", "int", "str"]),
    ("cache_size_limit", True, TypeError, ["cache_size_limit", "int", "bool"]),
    ("cache_size_limit", 2.0, TypeError, ["cache_size_limit", "int", "float"]),
    ("cache_size_limit", -1, ValueError, ["cache_size_limit", "-1"]),
    ("cache_size_limit", 2 ** 80, ValueError, ["cache_size_limit"]),
    ("specialize_int", 1, TypeError, ["specialize_int", "bool", "int"]),
    ("specialize_int", None, TypeError, ["specialize_int", "bool", "NoneType"]),
    ("dynamic_sources", 3, TypeError, ["dynamic_sources", "str", "int"]),
    ("stance", "sometimes", ValueError,
     ["stance", "sometimes", "default", "force_eager", "eager_on_recompile",
      "fail_on_recompile", "eager_then_compile"]),
])
def test_config_bad_values(name, value, exc, words):
    before = _C.config_get(name)
    with pytest.raises(exc) as info:
        setattr(shapejit.config, name, value)
    for w in words:
        assert w in str(info.value), (w, str(info.value))
    assert _C.config_get(name) == before


def test_config_unknown_knob():
    with pytest.raises(AttributeError) as info:
        shapejit.config.cache_size_limt
    msg = str(info.value)
    assert "cache_size_limt" in msg and "cache_size_limit" in msg and "stance" in msg
    with pytest.raises(AttributeError, match="valid knobs"):
        shapejit.config.no_such_knob = 1
    with pytest.raises(AttributeError, match="valid knobs"):
        _C.config_set("no_such_knob", 1)
    with pytest.raises(TypeError):
        _C.config_get(3)


def test_config_str_subclass_stored_as_str():
    class S(str):
        pass

    shapejit.config.static_sources = S("L['y']")
    assert type(shapejit.config.static_sources) is str


def test_patch_context_manager():
    c = shapejit.config
    with c.patch(cache_size_limit=1, specialize_int=True) as p:
        assert c.cache_size_limit == 1 and c.specialize_int is True
        assert "cache_size_limit" in repr(p)
    assert c.cache_size_limit == 8 and c.specialize_int is False
    with c.patch("inline_depth_limit", 4):
        assert c.inline_depth_limit == 4
    with c.patch({"recompile_limit": 2}):
        assert c.cache_size_limit == 2
    assert c.inline_depth_limit == 32 and c.cache_size_limit == 8


def test_patch_decorator_and_nesting():
    c = shapejit.config
    seen = []

    @c.patch(cache_size_limit=2)
    def f(depth):
        seen.append(c.cache_size_limit)
        if depth:
            with c.patch(cache_size_limit=5):
                f(depth - 1)
            seen.append(c.cache_size_limit)
        return "r"

    assert f(1) == "r"
    assert seen == [2, 2, 2] and c.cache_size_limit == 8
    assert f.__name__ == "f"


def test_patch_restores_on_error():
    c = shapejit.config
    with pytest.raises(RuntimeError):
        with c.patch(cache_size_limit=1):
            raise RuntimeError("boom")
    assert c.cache_size_limit == 8
    # a bad value part-way: the knobs already set are put back
    with pytest.raises(TypeError, match="specialize_int"):
        with c.patch(cache_size_limit=1, specialize_int="yes"):
            pass
    assert c.cache_size_limit == 8


def test_patch_unknown_knob():
    with pytest.raises(AttributeError, match="valid knobs"):
        shapejit.config.patch(cache_size=1)


def test_config_env_sources():
    env, root = _child_env(TORCH_COMPILE_DYNAMIC_SOURCES="L['x'],L['y']")
    out = subprocess.run([sys.executable, "-c",
                          "import shapejit; print(shapejit.config.dynamic_sources)"],
                         env=env, cwd=root, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "L['x'],L['y']"


# ---------------------------------------------------------------------------------------
# Stances
# ---------------------------------------------------------------------------------------

def test_set_stance_call_context_decorator():
    shapejit.set_stance("force_eager")
    assert shapejit.config.stance == "force_eager"
    shapejit.set_stance("default")
    with shapejit.set_stance("eager_on_recompile"):
        assert shapejit.config.stance == "eager_on_recompile"
    assert shapejit.config.stance == "default"

    @shapejit.set_stance("fail_on_recompile")
    def g():
        return shapejit.config.stance

    assert shapejit.config.stance == "default"  # decorating changes nothing yet
    assert g() == "fail_on_recompile"
    assert shapejit.config.stance == "default"


def test_set_stance_errors():
    with pytest.raises(ValueError, match="eager_then_compile"):
        shapejit.set_stance("fast")
    with pytest.raises(TypeError):
        shapejit.set_stance(3)
    assert shapejit.config.stance == "default"


# ---------------------------------------------------------------------------------------
# Logs
# ---------------------------------------------------------------------------------------

def test_log_channels_table():
    names = [n for n, _ in _C.log_channels()]
    for n in ["graph_breaks", "graph_code", "recompiles", "guards", "bytecode", "dynamic",
              "graph"]:
        assert n in names
    assert set(shapejit.logs.CHANNELS) == set(names)


def test_set_logs_levels():
    shapejit.set_logs(graph_breaks=True, dynamic=logging.DEBUG)
    lv = shapejit.logs.levels()
    assert lv["graph_breaks"] == logging.INFO and lv["dynamic"] == logging.DEBUG
    assert lv["recompiles"] == 0
    # each call starts from everything off
    shapejit.set_logs(recompiles=True)
    lv = shapejit.logs.levels()
    assert lv["recompiles"] == logging.INFO and lv["graph_breaks"] == 0
    shapejit.set_logs()
    assert not any(shapejit.logs.levels().values())


def test_set_logs_errors():
    with pytest.raises(ValueError) as info:
        shapejit.set_logs(graph_brakes=True)
    msg = str(info.value)
    assert "graph_brakes" in msg
    for n in shapejit.logs.CHANNELS:
        assert n in msg
    with pytest.raises(TypeError, match="graph_code"):
        shapejit.set_logs(graph_code="yes")
    with pytest.raises(ValueError):
        _C.set_log_level("nope", 20)


def test_log_output_reaches_stderr(capsys):
    shapejit.set_logs(graph_breaks=True)
    _C._log("graph_breaks", logging.INFO, "Graph break in user code at x.py:3")
    _C._log("graph_breaks", logging.DEBUG, "too detailed")
    _C._log("recompiles", logging.INFO, "channel is off")
    err = capsys.readouterr().err
    assert "[shapejit] Graph break in user code at x.py:3" in err
    assert "too detailed" not in err and "channel is off" not in err


def test_log_output_through_logging(caplog):
    shapejit.set_logs(guards=logging.DEBUG)
    logger = logging.getLogger("shapejit.guards")
    logger.addHandler(caplog.handler)
    try:
        _C._log("guards", logging.DEBUG, "TENSOR_MATCH L['x']")
    finally:
        logger.removeHandler(caplog.handler)
    assert any(r.name == "shapejit.guards" and r.getMessage() == "TENSOR_MATCH L['x']"
               for r in caplog.records)


def test_log_sink_errors_do_not_raise(monkeypatch):
    shapejit.set_logs(graph=True)
    calls, reported = [], []

    def bad_sink(channel, level, msg):
        calls.append((channel, level, msg))
        raise RuntimeError("sink failed")

    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    _C.set_log_sink(bad_sink)
    try:
        _C._log("graph", logging.INFO, "m")  # must not raise
    finally:
        _C.set_log_sink(shapejit.logs._sink)
    assert calls == [("graph", logging.INFO, "m")]
    assert len(reported) == 1 and isinstance(reported[0].exc_value, RuntimeError)
    with pytest.raises(TypeError):
        _C.set_log_sink(42)


def test_torch_logs_parsing():
    p = shapejit.logs.parse_spec
    assert p("graph_breaks,+dynamic,-recompiles") == {
        "graph_breaks": logging.INFO, "dynamic": logging.DEBUG, "recompiles": 0}
    assert p(" graph_code , ,guards") == {"graph_code": logging.INFO, "guards": logging.INFO}
    assert p("") == {}
    with pytest.raises(ValueError) as info:
        p("graph_breaks,dynamoo")
    assert "TORCH_LOGS" in str(info.value) and "'dynamoo'" in str(info.value)


def test_torch_logs_env_var():
    env, root = _child_env(TORCH_LOGS="graph_breaks,+dynamic")
    code = "import shapejit; l = shapejit.logs.levels(); print(l['graph_breaks'], l['dynamic'], l['guards'])"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=root,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["20", "10", "0"]


def test_torch_logs_env_var_bad_channel():
    env, root = _child_env(TORCH_LOGS="graph_breaks,bogus_channel")
    out = subprocess.run([sys.executable, "-c", "import shapejit"], env=env, cwd=root,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "ValueError" in out.stderr and "TORCH_LOGS" in out.stderr
    assert "bogus_channel" in out.stderr
    for n in ["graph_breaks", "graph_code", "recompiles", "guards", "bytecode", "dynamic"]:
        assert n in out.stderr


# ---------------------------------------------------------------------------------------
# compile(): arguments, backends, decorator forms
# ---------------------------------------------------------------------------------------

def test_backend_names():
    assert {"eager", "default"} <= set(shapejit.list_backends())
    with pytest.raises(ValueError) as info:
        shapejit.compile(lambda x: x, backend="inductor")
    assert "'inductor'" in str(info.value)
    assert "eager" in str(info.value) and "default" in str(info.value)
    with pytest.raises(ValueError, match="eager"):
        shapejit.compile(lambda x: x, backend=3)
    from shapejit import backends
    assert backends.lookup("eager") is backends.eager
    sentinel = object()
    assert backends.eager(sentinel, []) is sentinel  # identity: a Graph is callable


@pytest.mark.parametrize("obj", [3, "text", object(), [1, 2], torch.ones(2)])
def test_compile_non_callable(obj):
    with pytest.raises(TypeError) as info:
        shapejit.compile(obj)
    assert type(obj).__name__ in str(info.value)


def test_compile_bad_option_types():
    with pytest.raises(TypeError, match="dynamic"):
        shapejit.compile(lambda x: x, dynamic="yes")
    with pytest.raises(TypeError, match="fullgraph"):
        shapejit.compile(lambda x: x, fullgraph=1)
    with pytest.raises(TypeError, match="dynamic"):
        shapejit.compile(dynamic=0)


def _f(x, y):
    return x * 2 + y


def test_decorator_forms_match_eager():
    @shapejit.compile
    def a(x, y):
        return x * 2 + y

    @shapejit.compile()
    def b(x, y):
        return x * 2 + y

    @shapejit.compile(backend="eager", dynamic=False)
    def c(x, y):
        return x * 2 + y

    d = shapejit.compile(_f)
    e = shapejit.compile(_f, backend=lambda graph, example_inputs: graph)
    assert d.__wrapped__ is _f and d.__name__ == "_f"
    assert d._options.backend is shapejit.backends.cpu   # the default backend
    assert d._options.fullgraph is False and d._options.dynamic is None

    tx, ty = torch.arange(6.0).reshape(2, 3), torch.ones(2, 3)
    nx, ny = np.arange(6.0).reshape(2, 3), np.ones((2, 3))
    for fn in (a, b, c, d, e):
        for _ in range(2):  # second call: the cache
            torch.testing.assert_close(fn(tx, ty), _f(tx, ty))
            np.testing.assert_allclose(fn(nx, ny), _f(nx, ny))
            assert fn(3, 4) == 10


def test_compiled_method_binds():
    class K:
        def __init__(self):
            self.k = 3

        @shapejit.compile
        def scale(self, x):
            return x * self.k

    x = torch.ones(3)
    torch.testing.assert_close(K().scale(x), x * 3)


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)
        self.register_buffer("offset", torch.full((3,), 0.5))
        self.depth = 2

    def forward(self, x):
        return torch.relu(self.fc(x)) + self.offset


def test_compile_module():
    torch.manual_seed(0)
    net = _Net().eval()
    cnet = shapejit.compile(net)
    assert isinstance(cnet, torch.nn.Module)
    assert cnet._orig_mod is net
    assert cnet.depth == 2 and cnet.fc is net.fc  # attribute reads reach the original
    assert list(cnet.state_dict()) == list(net.state_dict())
    assert [n for n, _ in cnet.named_parameters()] == [n for n, _ in net.named_parameters()]
    x = torch.randn(5, 4)
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(cnet(x), net(x))
    # train()/eval() reach the original
    cnet.train()
    assert net.training
    cnet.eval()
    assert not net.training
    # state_dict round trip, also through a parent module
    sd = {k: v.clone() + 1 for k, v in net.state_dict().items()}
    cnet.load_state_dict(sd)
    torch.testing.assert_close(net.offset, sd["offset"])
    parent = torch.nn.Sequential(cnet)
    psd = parent.state_dict()
    assert "0.fc.weight" in psd
    parent.load_state_dict(psd)
    # compiling the compiled module starts again from the original
    assert shapejit.compile(cnet, backend="eager")._orig_mod is net


def test_disable():
    def plain(x):
        return x + 1

    assert shapejit.disable(plain) is plain

    @shapejit.disable
    def deco(x):
        return x - 1

    assert deco(3) == 2
    compiled = shapejit.compile(plain)
    assert shapejit.disable(compiled) is plain
    net = _Net()
    assert shapejit.disable(net) is net
    assert shapejit.disable(len) is len
    with pytest.raises(TypeError, match="int"):
        shapejit.disable(5)


def test_explain_output_shape():
    def f(x):
        return x + 1

    out = shapejit.explain(f)(torch.ones(3))
    assert isinstance(out, shapejit.ExplainOutput)
    assert out.graph_count == len(out.graphs) == len(out.ops_per_graph)
    assert out.graph_break_count == len(out.break_reasons)
    assert out.op_count == sum(len(o) for o in out.ops_per_graph)
    for br in out.break_reasons:
        assert isinstance(br.reason, str)
        assert all(":" in entry and " in " in entry for entry in br.user_stack)
    text = str(out)
    for head in ["Graph Count:", "Graph Break Count:", "Op Count:", "Break Reasons:",
                 "Ops per Graph:", "Out Guards:", "Compile Time:"]:
        assert head in text
    with pytest.raises(TypeError):
        shapejit.explain(3)


def test_explain_rendering():
    from shapejit.explain import BreakReason, ExplainOutput

    class N:
        def __init__(self, op):
            self.op = op

    class G:
        nodes = [N("input"), N("sin"), N("add")]

    out = ExplainOutput([G()], [BreakReason("generic_jump", [("a.py", 3, "f", "if x:")])],
                        ["TENSOR_MATCH L['x']"], [0.5])
    assert out.op_count == 2 and out.ops_per_graph == [["sin", "add"]]
    assert str(out) == (
        "Graph Count: 1\nGraph Break Count: 1\nOp Count: 2\nBreak Reasons:\n"
        "  Break Reason 1:\n    Reason: generic_jump\n    User Stack:\n      <a.py:3 in f>\n"
        "Ops per Graph:\n  Ops 1:\n    sin\n    add\nOut Guards:\n  Guard 1:\n"
        "    TENSOR_MATCH L['x']\nCompile Time: 0.5000 s (0.5000)\n")


# ---------------------------------------------------------------------------------------
# Marks
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("fn", [shapejit.mark_dynamic, shapejit.maybe_mark_dynamic,
                                shapejit.mark_unbacked])
def test_marks_validation(fn):
    t = torch.ones(2, 3)
    with pytest.raises(TypeError, match="Tensor"):
        fn(np.ones(3), 0)
    with pytest.raises(IndexError) as info:
        fn(t, 2)
    assert "dim 2" in str(info.value) and "rank 2" in str(info.value)
    with pytest.raises(IndexError):
        fn(t, [0, -3])
    with pytest.raises(TypeError, match="int"):
        fn(t, "0")
    fn(t, [0, -1])   # valid: the marks land on the tensor as dim sets
    marks = [getattr(t, a, set()) for a in ("_dynamo_dynamic_indices", "_dynamo_weak_dynamic_indices",
                                            "_dynamo_unbacked_indices")]
    assert {0, 1} in marks


def test_mark_dynamic_bounds_and_static():
    t = torch.ones(4)
    with pytest.raises(ValueError, match="min"):
        shapejit.mark_dynamic(t, 0, min=5, max=2)
    with pytest.raises(TypeError, match="max"):
        shapejit.mark_dynamic(t, 0, max=2.5)
    shapejit.mark_dynamic(t, 0, min=2, max=8)
    assert t._dynamo_dynamic_indices == {0} and t._dynamo_dynamic_range == {0: (2, 8)}
    u = torch.ones(4, 2)
    shapejit.mark_static(u)
    assert u._dynamo_static_indices == {0, 1}
    with pytest.raises(IndexError):
        shapejit.mark_static(t, 1)
    with pytest.raises(TypeError):
        shapejit.mark_static([1, 2])


# ---------------------------------------------------------------------------------------
# torch compat
# ---------------------------------------------------------------------------------------

_MISSING = object()


def _torch_objects():
    import torch._dynamo.decorators
    import torch._logging
    import torch.compiler

    owners = {"torch": torch, "dynamo": torch._dynamo, "decorators": torch._dynamo.decorators,
              "logging": torch._logging, "compiler": torch.compiler}
    names = {"torch": ["compile"],
             "dynamo": ["reset", "explain", "config", "disable", "mark_dynamic",
                        "maybe_mark_dynamic", "mark_static", "mark_unbacked"],
             "decorators": ["mark_dynamic", "maybe_mark_dynamic", "mark_static",
                            "mark_unbacked", "disable"],
             "logging": ["set_logs"],
             "compiler": ["config", "set_stance", "reset", "disable"]}
    return {(o, n): owners[o].__dict__.get(n, _MISSING) for o in names for n in names[o]}


def test_compat_round_trip():
    before = _torch_objects()
    shapejit.install_torch_compat()
    shapejit.install_torch_compat()  # idempotent
    assert torch.compile is shapejit.compat.torch_compile
    assert torch._dynamo.reset is shapejit.reset
    assert torch._dynamo.explain is shapejit.explain
    assert torch._dynamo.mark_dynamic is shapejit.mark_dynamic
    assert torch._dynamo.decorators.mark_dynamic is shapejit.mark_dynamic
    assert torch._dynamo.mark_unbacked is shapejit.mark_unbacked
    assert torch.compiler.set_stance is shapejit.set_stance
    assert torch.compiler.reset is shapejit.reset
    during = _torch_objects()
    assert all(during[k] is not before[k] for k in before)
    shapejit.uninstall_torch_compat()
    shapejit.uninstall_torch_compat()  # idempotent
    after = _torch_objects()
    assert all(after[k] is before[k] for k in before), [k for k in before if after[k] is not before[k]]


def test_compat_compile():
    shapejit.install_torch_compat()

    @torch.compile
    def f(x):
        return x * 2

    @torch.compile(dynamic=False, backend="eager", fullgraph=False)
    def g(x):
        return x + 1

    assert isinstance(f, _C.CompiledFunction) and isinstance(g, _C.CompiledFunction)
    assert g._options.backend is shapejit.backends.eager
    x = torch.ones(3)
    torch.testing.assert_close(f(x), x * 2)
    torch.testing.assert_close(g(x), x + 1)
    shapejit.compat._warned.clear()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        torch.compile(lambda x: x, mode="max-autotune")
        torch.compile(lambda x: x, mode="reduce-overhead")
    assert len([m for m in w if "mode" in str(m.message)]) == 1  # one warning only
    h = lambda x: x  # noqa: E731
    assert torch.compile(h, disable=True) is h
    assert isinstance(torch.compile(_Net()), torch.nn.Module)
    # a torch backend name (cudagraphs) runs torch's backend on the FX graph; a name
    # neither torch nor shapejit has is an error naming it
    assert torch.compile(h, backend="cudagraphs")._options.backend_name == "cudagraphs"
    with pytest.raises(ValueError, match="no_such_backend"):
        torch.compile(h, backend="no_such_backend")


def test_compat_config():
    real_dynamo_config = torch._dynamo.config
    real_value = real_dynamo_config.verbose
    shapejit.install_torch_compat()
    shapejit.compat._warned.clear()
    torch._dynamo.config.cache_size_limit = 3
    assert shapejit.config.cache_size_limit == 3
    torch._dynamo.config.recompile_limit = 4
    assert shapejit.config.cache_size_limit == 4
    assert torch._dynamo.config.automatic_dynamic_shapes is True
    # torch knobs shapejit does not have: plain attributes (with a warning naming them),
    # torch's config untouched
    with pytest.warns(UserWarning, match="verbose is a torch knob that shapejit does not"):
        torch._dynamo.config.verbose = not real_value
    assert torch._dynamo.config.verbose is (not real_value)
    assert real_dynamo_config.verbose is real_value
    with pytest.warns(UserWarning, match="optimize_ddp"), \
            torch._dynamo.config.patch(specialize_int=True, optimize_ddp=False):
        assert shapejit.config.specialize_int is True
        assert torch._dynamo.config.optimize_ddp is False
    assert shapejit.config.specialize_int is False
    with torch.compiler.config.patch(dynamic_sources="L['x']"):
        assert shapejit.config.dynamic_sources == "L['x']"
    assert shapejit.config.dynamic_sources == ""
    with pytest.raises(TypeError, match="cache_size_limit"):
        torch._dynamo.config.cache_size_limit = "many"
    shapejit.uninstall_torch_compat()
    assert torch._dynamo.config is real_dynamo_config
    assert real_dynamo_config.verbose is real_value


def test_compat_logs_and_stance():
    shapejit.install_torch_compat()
    torch._logging.set_logs(graph_breaks=True, graph_code=True)
    lv = shapejit.logs.levels()
    assert lv["graph_breaks"] == logging.INFO and lv["graph_code"] == logging.INFO
    shapejit.compat._warned.clear()
    with pytest.warns(UserWarning, match="aot_graphs"):   # a torch channel shapejit lacks
        torch._logging.set_logs(aot_graphs=True)
    torch._logging.set_logs(output_code=True)              # torch's name for generated code: ours too
    assert shapejit.logs.levels()["output_code"] == logging.INFO
    with pytest.raises(ValueError, match="valid channels"):
        torch._logging.set_logs(not_a_channel=True)
    with torch.compiler.set_stance("force_eager"):
        assert shapejit.config.stance == "force_eager"
    assert shapejit.config.stance == "default"
    marked = torch.ones(3)
    torch._dynamo.mark_dynamic(marked, 0)   # routed to shapejit.mark_dynamic
    assert marked._dynamo_dynamic_indices == {0}
