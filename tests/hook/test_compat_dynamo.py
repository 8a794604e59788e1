"""torch._dynamo as code written for torch.compile uses it, through install_torch_compat():
the config module (mock.patch.object, patch on a TestCase class, unknown names,
error_on_recompile), optimize/optimize_assert/run, graph_break, counters, torch's
exception classes, list_backends, compiled modules, and torch.fx.GraphModules for
backends. Each behaviour is compared with plain torch where torch can run it here."""
import contextlib
import unittest
import warnings
from unittest import mock

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing
from torch._dynamo.utils import counters

import shapejit
from shapejit import compat


@pytest.fixture(autouse=True)
def _installed():
    shapejit.install_torch_compat()
    shapejit.reset()
    counters.clear()
    yield
    shapejit.uninstall_torch_compat()
    shapejit.reset()
    torch._dynamo.reset()
    counters.clear()


@contextlib.contextmanager
def plain_torch():
    """torch's own objects for the block (the oracle)."""
    shapejit.uninstall_torch_compat()
    torch._dynamo.reset()
    counters.clear()
    try:
        yield
    finally:
        torch._dynamo.reset()
        counters.clear()
        shapejit.install_torch_compat()


@contextlib.contextmanager
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


# ------------------------------------------------------------------ config module ----

@pytest.mark.parametrize("name, value", [
    ("automatic_dynamic_shapes", False),      # a shapejit knob
    ("specialize_int", True),                 # a shapejit knob
    ("recompile_limit", 3),                   # torch's name of a shapejit knob
    ("verbose", True),                        # a torch knob shapejit does not implement
])
def test_mock_patch_object_restores_the_value(name, value):
    def run(config):
        before = getattr(config, name)
        with _quiet():
            with mock.patch.object(config, name, value):
                inside = getattr(config, name)
        return before, inside, getattr(config, name)

    with plain_torch():
        expected = run(torch._dynamo.config)
    got = run(torch._dynamo.config)
    assert got[1] == value and got[0] == got[2]
    assert (got[1], got[0] == got[2]) == (expected[1], expected[0] == expected[2])


def test_mock_patch_object_restores_a_non_default_value():
    shapejit.config.cache_size_limit = 5
    try:
        with mock.patch.object(torch._dynamo.config, "cache_size_limit", 2):
            assert shapejit.config.cache_size_limit == 2
        assert shapejit.config.cache_size_limit == 5
        assert torch._dynamo.config.cache_size_limit == 5
    finally:
        shapejit.config.cache_size_limit = shapejit.config.defaults()["cache_size_limit"]


def test_mock_patch_object_as_decorator_restores():
    @mock.patch.object(torch._dynamo.config, "assume_static_by_default", False)
    def inner():
        return shapejit.config.assume_static_by_default

    assert inner() is False
    assert shapejit.config.assume_static_by_default is True


def test_unknown_names_raise_as_in_torch():
    for config in (torch._dynamo.config,):
        with pytest.raises(AttributeError):
            with mock.patch.object(config, "no_such_knob", 1):
                pass
        with pytest.raises(AttributeError):
            del config.no_such_knob
    with plain_torch():
        with pytest.raises(AttributeError):
            with mock.patch.object(torch._dynamo.config, "no_such_knob", 1):
                pass


def _run_case(cls):
    result = unittest.TestResult()
    unittest.defaultTestLoader.loadTestsFromTestCase(cls).run(result)
    return result


def test_patch_on_a_testcase_class_patches_each_test():
    seen = []

    @torch._dynamo.config.patch(assume_static_by_default=False, cache_size_limit=3)
    class Case(unittest.TestCase):
        def test_a(self):
            seen.append((shapejit.config.assume_static_by_default,
                         torch._dynamo.config.cache_size_limit))

        def test_b(self):
            seen.append((shapejit.config.assume_static_by_default,
                         torch._dynamo.config.cache_size_limit))

        @unittest.expectedFailure
        def test_c(self):
            raise AssertionError("expected")

        def helper(self):
            return shapejit.config.assume_static_by_default

    assert isinstance(Case, type) and issubclass(Case, unittest.TestCase)
    result = _run_case(Case)
    assert result.wasSuccessful() and result.testsRun == 3
    assert len(result.expectedFailures) == 1
    assert seen == [(False, 3), (False, 3)]
    assert Case("test_a").helper() is True      # only test methods are patched
    assert shapejit.config.assume_static_by_default is True


def test_patch_on_a_plain_class_is_a_type_error():
    with pytest.raises(TypeError, match="TestCase"):
        @torch._dynamo.config.patch(cache_size_limit=3)
        class NotATest:
            pass


def _recompile(config_patch):
    """Calls a static-shape function with a second size under error_on_recompile=True:
    the class of the error raised (None if none)."""
    def f(x):
        return x + 1

    g = torch.compile(f, backend="eager", dynamic=False)
    with config_patch(error_on_recompile=True):
        g(torch.ones(2))
        try:
            g(torch.ones(3))
        except Exception as e:   # noqa: BLE001 - the class is what is compared
            return e
    return None


def test_error_on_recompile_raises_torch_recompile_error():
    with plain_torch():
        expected = _recompile(torch._dynamo.config.patch)
    got = _recompile(torch._dynamo.config.patch)
    assert isinstance(expected, torch._dynamo.exc.RecompileError)
    assert isinstance(got, torch._dynamo.exc.RecompileError)
    assert isinstance(got, shapejit._C.RecompileError)
    assert torch._dynamo.config.error_on_recompile is False
    assert shapejit.config.stance == "default"


def test_error_on_recompile_by_attribute():
    torch._dynamo.config.error_on_recompile = True
    try:
        assert shapejit.config.stance == "fail_on_recompile"
        assert torch._dynamo.config.error_on_recompile is True
    finally:
        torch._dynamo.config.error_on_recompile = False
    assert shapejit.config.stance == "default"


# ------------------------------------------------- optimize, run, graph_break ----

def _frames(optimize_fn, sizes, **kw):
    def foo(x, y):
        return x * y

    cnt = torch._dynamo.testing.CompileCounter()
    opt = optimize_fn(cnt, **kw)(foo)
    for n in sizes:
        x, y = torch.randn(n), torch.randn(n)
        torch.testing.assert_close(opt(x, y), x * y)
    return cnt.frame_count, cnt.op_count


@pytest.mark.parametrize("dynamic", [None, False, True])
def test_optimize_counts_frames_as_torch(dynamic):
    sizes = (2, 3, 4, 4, 5)
    with plain_torch():
        expected = _frames(torch._dynamo.optimize, sizes, dynamic=dynamic)
    assert _frames(torch._dynamo.optimize, sizes, dynamic=dynamic) == expected


def _breaking(x):
    x = x + 1
    torch._dynamo.graph_break()
    return x * 2


def _break_run(make):
    cnt = torch._dynamo.testing.CompileCounter()
    x = torch.ones(3)
    out = make(cnt)(_breaking)(x)
    torch.testing.assert_close(out, _breaking(x))
    return (cnt.frame_count, cnt.op_count, dict(counters["frames"]),
            sum(counters["graph_break"].values()), counters["stats"]["unique_graphs"])


def test_graph_break_and_counters_as_torch():
    with plain_torch():
        expected = _break_run(torch._dynamo.optimize)
    got = _break_run(torch._dynamo.optimize)
    assert got == expected
    assert got[:2] == (2, 2) and got[3] == 1


def test_optimize_assert_and_fullgraph_raise_torch_unsupported():
    for make in (lambda cnt: torch._dynamo.optimize_assert(cnt),
                 lambda cnt: torch._dynamo.optimize(cnt, nopython=True),
                 lambda cnt: torch.compile(backend=cnt, fullgraph=True)):
        with plain_torch():
            with pytest.raises(torch._dynamo.exc.Unsupported):
                make(torch._dynamo.testing.CompileCounter())(_breaking)(torch.ones(3))
        with pytest.raises(torch._dynamo.exc.Unsupported) as info:
            make(torch._dynamo.testing.CompileCounter())(_breaking)(torch.ones(3))
        assert isinstance(info.value, shapejit._C.Unsupported)
        assert isinstance(info.value, RuntimeError)


def test_backend_error_is_torch_backend_compiler_failed():
    def bad(gm, example_inputs):
        raise ValueError("no thanks")

    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed) as info:
        torch.compile(lambda x: x + 1, backend=bad)(torch.ones(2))
    assert isinstance(info.value, shapejit.BackendCompilerFailed)
    assert isinstance(info.value.__cause__, ValueError)
    with plain_torch():
        with pytest.raises(torch._dynamo.exc.BackendCompilerFailed):
            torch.compile(lambda x: x + 1, backend=bad)(torch.ones(2))


def test_errors_are_shapejit_classes_again_after_uninstall():
    shapejit.uninstall_torch_compat()
    try:
        with pytest.raises(shapejit._C.Unsupported) as info:
            shapejit.compile(_breaking, fullgraph=True)(torch.ones(3))
        assert not isinstance(info.value, torch._dynamo.exc.Unsupported)
    finally:
        shapejit.install_torch_compat()


def test_run_reuses_compiled_code_and_never_compiles():
    def f(x):
        return x * 3

    compiled = torch.compile(f, dynamic=False)
    compiled(torch.ones(2))
    entries = shapejit.stats()["cache_entries"]
    runner = torch._dynamo.run(f)
    torch.testing.assert_close(runner(torch.ones(2)), torch.ones(2) * 3)
    torch.testing.assert_close(runner(torch.ones(5)), torch.ones(5) * 3)  # runs eagerly
    assert shapejit.stats()["cache_entries"] == entries


def test_list_backends_has_torch_names():
    with plain_torch():
        torch_names = set(torch._dynamo.list_backends())
    ours = set(torch._dynamo.list_backends())
    assert torch_names <= ours and "inductor" in ours


# ------------------------------------------------------------- compiled modules ----

def test_compiled_module_is_torch_optimized_module():
    from torch._dynamo.eval_frame import OptimizedModule

    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())
    with plain_torch():
        ref = torch.compile(net, backend="eager")
        expected_keys = list(ref.state_dict())
        expected_params = [n for n, _ in ref.named_parameters()]
    cnet = torch.compile(net)
    assert type(cnet) is OptimizedModule and cnet._orig_mod is net
    assert list(cnet.state_dict()) == expected_keys
    assert [n for n, _ in cnet.named_parameters()] == expected_params
    x = torch.randn(2, 4)
    torch.testing.assert_close(cnet(x), net(x))
    assert shapejit.stats()["graphs"] >= 1   # shapejit compiled it
    cnet.load_state_dict(net.state_dict(prefix="_orig_mod."))


# ----------------------------------------------------------- FX graphs to backends ----

def _pointwise(x, y):
    z = torch.sin(x) + y
    return z.relu() * 2, z.sum()


def test_compile_counter_counts_ops_as_torch():
    x, y = torch.randn(3), torch.randn(3)
    with plain_torch():
        ref = torch._dynamo.testing.CompileCounter()
        torch.compile(_pointwise, backend=ref)(x, y)
    cnt = torch._dynamo.testing.CompileCounter()
    out = torch.compile(_pointwise, backend=cnt)(x, y)
    torch.testing.assert_close(out, _pointwise(x, y))
    assert (cnt.frame_count, cnt.op_count) == (ref.frame_count, ref.op_count)


def test_backend_gets_graph_module_and_real_example_inputs():
    seen = []

    def backend(gm, example_inputs):
        seen.append((gm, example_inputs))
        return gm.forward

    x, y = torch.randn(3), torch.randn(3)
    out = torch.compile(_pointwise, backend=backend)(x, y)
    torch.testing.assert_close(out, _pointwise(x, y))
    (gm, inputs), = seen
    assert isinstance(gm, torch.fx.GraphModule)
    assert all(type(t) is torch.Tensor for t in inputs)
    assert [t is a for t, a in zip(inputs, (x, y))] == [True, True]
    ops = [n.op for n in gm.graph.nodes]
    assert ops.count("placeholder") == 2 and ops[-1] == "output"
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert torch.sin in targets and torch.Tensor.relu in targets   # the original callables
    # the module computes the graph: its outputs as a tuple
    torch.testing.assert_close(gm(x, y), tuple(_pointwise(x, y)))


def test_eager_and_record_graphs_records_one_module_per_graph():
    rec = torch._dynamo.testing.EagerAndRecordGraphs()
    x = torch.ones(3)
    out = torch.compile(_breaking, backend=rec)(x)
    torch.testing.assert_close(out, _breaking(x))
    with plain_torch():
        ref = torch._dynamo.testing.EagerAndRecordGraphs()
        torch.compile(_breaking, backend=ref)(x)
    assert len(rec.graphs) == len(ref.graphs) == 2
    for ours, theirs in zip(rec.graphs, ref.graphs):
        assert [n.op for n in ours.graph.nodes] == [n.op for n in theirs.graph.nodes]


def test_backend_result_is_what_runs():
    calls = []

    def backend(gm, example_inputs):
        def run(*args):
            calls.append(len(args))
            return gm(*args)
        return run

    f = torch.compile(lambda x: x.cos() * 2, backend=backend)
    x = torch.randn(4)
    for _ in range(3):
        torch.testing.assert_close(f(x), x.cos() * 2)
    assert calls == [1, 1, 1]


@pytest.mark.parametrize("name", ["eager", "aot_eager", "inductor"])
def test_torch_named_backends(name):
    def f(x):
        return (x.sin() * 2 + 1).sum()

    x = torch.randn(5, requires_grad=True)
    out = torch.compile(f, backend=name)(x)
    out.backward()
    ref_x = x.detach().clone().requires_grad_(True)
    f(ref_x).backward()
    torch.testing.assert_close(out, f(x))
    torch.testing.assert_close(x.grad, ref_x.grad)


def test_inductor_is_shapejit_default_backend():
    g = torch.compile(lambda x: x + 1, backend="inductor")
    assert g._options.backend is shapejit.backends.cpu


def test_same_backend_object_shares_entries():
    cnt = torch._dynamo.testing.CompileCounter()

    def f(x):
        return x - 1

    torch.compile(f, backend=cnt)(torch.ones(2))
    torch.compile(f, backend=cnt)(torch.ones(2))
    assert cnt.frame_count == 1


def test_to_fx_without_compat():
    shapejit.uninstall_torch_compat()
    try:
        mods = []

        def backend(graph, example_inputs):
            mods.append(graph.to_fx())
            return graph

        @shapejit.compile(backend=backend)
        def f(x, y):
            a = x * y
            a[0] = 3.0
            b, c = torch.split(a, 2)
            return b.sum() + c.relu().mean(), torch.cat([b, c]) + torch.tensor([1., 2., 3., 4.])

        x, y = torch.randn(4), torch.randn(4)
        expected = f.__wrapped__(x.clone(), y.clone())
        got = f(x.clone(), y.clone())
        torch.testing.assert_close(got, expected)
        gm, = mods
        torch.testing.assert_close(gm(x.clone(), y.clone()), tuple(expected))
        names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
        assert names == ["l_x_", "l_y_"]
        assert "[1.0, 2.0, 3.0, 4.0]" in gm.code   # a literal constant stays in the code
    finally:
        shapejit.install_torch_compat()


def test_numpy_method_targets_are_named():
    import numpy as np
    seen = []

    def backend(gm, example_inputs):
        seen.append(gm)
        return gm.forward

    def f(x):
        return x.numpy().sum() + x

    x = torch.ones(3, dtype=torch.float64)
    with _quiet():
        out = torch.compile(f, backend=backend)(x)
    torch.testing.assert_close(out, f(x))
    assert seen and any(getattr(n.target, "__wrapped__", None) is np.ndarray.sum
                        for gm in seen for n in gm.graph.nodes)


def test_compat_names_routed_and_restored():
    routed = {n: getattr(torch._dynamo, n) for n in ("optimize", "optimize_assert", "run",
                                                     "list_backends")}
    assert all(getattr(v, "__module__", "").startswith("shapejit") for v in routed.values())
    shapejit.uninstall_torch_compat()
    try:
        assert all(getattr(torch._dynamo, n).__module__.startswith("torch")
                   for n in routed)
    finally:
        shapejit.install_torch_compat()
    assert compat.is_installed()


@pytest.mark.parametrize("mark_as", ["dynamic", "unbacked"])
def test_automatic_dynamic_shapes_mark_as_counts_as_torch(mark_as):
    def run():
        cnt = torch._dynamo.testing.CompileCounter()

        @torch.compile(backend=cnt)
        def f(x):
            return x * x

        with torch._dynamo.config.patch(automatic_dynamic_shapes_mark_as=mark_as):
            for n in (3, 2, 1, 0):
                x = torch.randn(n)
                torch.testing.assert_close(f(x), x * x)
        return cnt.frame_count

    with plain_torch():
        expected = run()
    assert run() == expected


def test_automatic_dynamic_shapes_mark_as_checks_its_value():
    with pytest.raises(ValueError, match="dynamic, unbacked, oblivious"):
        torch._dynamo.config.automatic_dynamic_shapes_mark_as = "sometimes"
    assert shapejit.config.automatic_dynamic_shapes_mark_as == "dynamic"


def test_aot_eager_falls_back_to_eager_on_graphs_aot_cannot_trace():
    def f(x):
        return torch.from_numpy(x.numpy() * 2) + 1

    x = torch.randn(4, dtype=torch.float64)
    compat._warned.clear()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = torch.compile(f, backend="aot_eager")(x)
    torch.testing.assert_close(out, f(x))
    assert any("aot_eager" in str(m.message) and "'eager' backend" in str(m.message)
               for m in w)
    with plain_torch(), _quiet():
        torch.testing.assert_close(torch.compile(f, backend="aot_eager")(x), f(x))


def _sized(x):
    return x.new_zeros(x.shape[0], 3) + x.size(1)


def test_dynamic_sizes_are_graph_inputs_as_in_torch():
    def run():
        rec = torch._dynamo.testing.CompileCounterWithBackend("eager")
        f = torch.compile(_sized, backend=rec, dynamic=True)
        for shape in ((4, 5), (6, 7)):
            x = torch.randn(*shape)
            torch.testing.assert_close(f(x), _sized(x))
        gm = rec.graphs[0]
        return (rec.frame_count, rec.op_count,
                [n.op for n in gm.graph.nodes].count("placeholder"))

    with plain_torch():
        expected = run()
    got = run()
    assert got == expected == (1, 2, 3)   # s0, s1 and x; new_zeros and add


def test_literal_tuples_stay_in_the_code():
    seen = []

    def backend(gm, example_inputs):
        seen.append(gm)
        return gm.forward

    conv = torch.nn.Conv2d(3, 4, 3)
    x = torch.randn(1, 3, 8, 8)
    torch.testing.assert_close(torch.compile(conv, backend=backend)(x), conv(x))
    gm, = seen
    assert not [n for n in gm.graph.nodes if n.op == "get_attr"]
    assert "(1, 1)" in gm.code


def test_constants_source_cannot_spell_are_attributes():
    import math
    seen = []

    def backend(gm, example_inputs):
        seen.append(gm)
        return gm.forward

    def f(x):
        return torch.clamp(x, max=math.inf) + 1

    x = torch.randn(3)
    torch.testing.assert_close(torch.compile(f, backend=backend)(x), f(x))
    gm, = seen
    attrs = [n for n in gm.graph.nodes if n.op == "get_attr"]
    assert attrs and getattr(gm, attrs[0].target) == math.inf
    torch.testing.assert_close(gm(x)[0], f(x))


def test_float_scalar_outputs_as_torch():
    def f(x, i):
        a = (x + 1).sum().item()
        b = i.sum().item()
        return a, b, x * a

    def run():
        rec = torch._dynamo.testing.CompileCounterWithBackend("eager")
        x, i = torch.randn(3), torch.arange(3)
        with torch._dynamo.config.patch(capture_scalar_outputs=True):
            got = torch.compile(f, backend=rec)(x, i)
        want = f(x, i)
        assert type(got[0]) is float and type(got[1]) is int
        assert got[:2] == pytest.approx(want[:2])
        torch.testing.assert_close(got[2], want[2])
        return rec.frame_count, rec.op_count

    with plain_torch():
        expected = run()
    assert run() == expected


def _corpus_entries():
    from corpus import ENTRIES, KNOWN_GAPS
    return [pytest.param(e, id=e.name) for e in ENTRIES if e.name not in KNOWN_GAPS]


@pytest.mark.parametrize("entry", _corpus_entries())
def test_corpus_runs_through_fx_graph_modules(entry):
    """Every graph of the capture corpus, run as its torch.fx.GraphModule (the module's
    forward is what runs), matches eager: values, mutation of inputs, identity."""
    from corpus_check import check_call
    from shapejit.compat_dynamo import FxBackend

    compiled = shapejit.compile(entry.fn, fullgraph=entry.fullgraph,
                                backend=FxBackend(lambda gm, example_inputs: gm.forward))
    check_call(entry, compiled, 0)


def test_graph_module_build_failure_runs_eagerly_with_a_warning(monkeypatch):
    from shapejit import fx

    def broken(graph, size_inputs=False):
        raise RuntimeError("cannot build")

    monkeypatch.setattr(fx, "to_fx", broken)
    called = []
    f = torch.compile(lambda x: x * 2, backend=lambda gm, ex: called.append(gm) or gm.forward)
    x = torch.randn(3)
    with pytest.warns(RuntimeWarning, match="cannot build"):
        torch.testing.assert_close(f(x), x * 2)
    assert called == []
