"""Operators of torch.library called as torch.ops.<namespace>.<name>: a functional
operator (a custom op with a fake implementation, aten's own) is one graph node, its
results shaped by a run on meta tensors, as torch.compile keeps it in its graph; an
operator that writes to or aliases an argument, has no meta or fake implementation, or
gets a tensor of symbolic shape breaks. Every result equals eager's."""
import logging

import pytest
import torch

import shapejit
from graph_counter import GraphCounter

pytestmark = pytest.mark.usefixtures("fresh_shapejit")

BACKENDS = ["cpu", "eager"]


@torch.library.custom_op("sj_libops::scale_add", mutates_args=())
def scale_add(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    return x * alpha + y


@scale_add.register_fake
def _(x, y, alpha):
    return torch.empty_like(x)


@torch.library.custom_op("sj_libops::halves", mutates_args=())
def halves(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    k = x.shape[-1] // 2
    return x[..., :k].clone(), x[..., k:] * 2


@halves.register_fake
def _(x):
    k = x.shape[-1] // 2
    return x.new_empty(*x.shape[:-1], k), x.new_empty(*x.shape[:-1], x.shape[-1] - k)


@torch.library.custom_op("sj_libops::pieces", mutates_args=())
def pieces(xs: list[torch.Tensor], scale: float) -> list[torch.Tensor]:
    return [x * scale for x in xs] + [sum(x.sum() for x in xs).reshape(1)]


@pieces.register_fake
def _(xs, scale):
    return [torch.empty_like(x) for x in xs] + [xs[0].new_empty(1)]


@torch.library.custom_op("sj_libops::bump", mutates_args=("x",))
def bump(x: torch.Tensor) -> None:
    x.add_(1)


@bump.register_fake
def _(x):
    return None


@torch.library.custom_op("sj_libops::no_fake", mutates_args=())
def no_fake(x: torch.Tensor) -> torch.Tensor:
    return x.cos()


@torch.library.custom_op("sj_libops::cube", mutates_args=())
def cube(x: torch.Tensor) -> torch.Tensor:
    return x ** 3


@cube.register_fake
def _(x):
    return torch.empty_like(x)


def _cube_backward(ctx, g):
    x, = ctx.saved_tensors
    return 3 * x * x * g


cube.register_autograd(_cube_backward, setup_context=lambda ctx, inputs, output: ctx.save_for_backward(inputs[0]))


def _graph_ops(fn, *args, backend="eager"):
    seen = []

    def be(graph, ex):
        seen.append([str(getattr(n, "op", n)) for n in graph.nodes])
        return shapejit.backends.cpu(graph, ex) if backend == "cpu" else graph

    out = shapejit.compile(fn, backend=be)(*args)
    return out, seen


def _reasons(fn, *args):
    ex = shapejit.explain(fn)(*args)
    return ex, [r.reason for r in ex.break_reasons]


@pytest.mark.parametrize("backend", BACKENDS)
def test_custom_ops_are_graph_nodes(backend):
    def f(x, y):
        a = torch.ops.sj_libops.scale_add(x.sin(), y, alpha=2.0)
        lo, hi = torch.ops.sj_libops.halves(a)
        return (lo.relu() + hi[..., :3]).tanh(), torch.ops.sj_libops.scale_add.default(lo, lo, 0.5)

    x, y = torch.randn(4, 6), torch.randn(4, 6)
    out, graphs = _graph_ops(f, x, y, backend=backend)
    assert len(graphs) == 1 and graphs[0].count("library_op") == 3, graphs
    for a, b in zip(out, f(x, y)):
        torch.testing.assert_close(a, b)
    counter = GraphCounter()
    torch.compile(f, backend=counter)(x, y)
    assert counter.graphs == len(graphs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_list_in_and_list_out(backend):
    def f(x, y):
        out = torch.ops.sj_libops.pieces([x, y.exp()], 3.0)
        return out[0] + out[1], out[2] * 2

    x, y = torch.randn(3, 4), torch.randn(3, 4)
    out, graphs = _graph_ops(f, x, y, backend=backend)
    assert len(graphs) == 1 and "library_op" in graphs[0]
    for a, b in zip(out, f(x, y)):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("backend", BACKENDS)
def test_aten_packets_resolve_their_overload(backend):
    def f(x, y):
        a = torch.ops.aten.add(x, y)            # add.Tensor
        b = torch.ops.aten.add(a, 2)            # add.Scalar
        c = torch.ops.aten.mm.default(b, y.t())
        d = torch.ops.aten.cat([a, b], 1)
        return c.softmax(-1), d.sum(0)

    x, y = torch.randn(4, 5), torch.randn(4, 5)
    out, graphs = _graph_ops(f, x, y, backend=backend)
    assert len(graphs) == 1 and graphs[0].count("library_op") == 4, graphs
    for a, b in zip(out, f(x, y)):
        torch.testing.assert_close(a, b)


def test_writes_and_views_break_and_match_eager():
    def writes(x):
        y = x * 2
        torch.ops.sj_libops.bump(y)
        return y + 1

    def add_inplace(x):
        y = x * 2
        torch.ops.aten.add_.Tensor(y, x)
        return y.sum()

    def view(x):
        v = torch.ops.aten.transpose.int(x * 2, 0, 1)
        return v + 1

    for fn, word in [(writes, "writes to or aliases its argument 'x'"),
                     (add_inplace, "writes to or aliases its argument 'self'"),
                     (view, "writes to or aliases its argument 'self'")]:
        x = torch.randn(3, 4)
        ex, reasons = _reasons(fn, x)
        assert ex.graph_break_count >= 1 and any(word in r for r in reasons), reasons
        shapejit.reset()
        torch.testing.assert_close(shapejit.compile(fn)(x), fn(x))


def test_mutated_input_seen_by_caller():
    def f(x):
        torch.ops.sj_libops.bump(x)
        return x * 3

    a = torch.randn(5)
    b = a.clone()
    got = shapejit.compile(f)(a)
    want = f(b)
    assert torch.equal(got, want) and torch.equal(a, b)


def test_no_fake_implementation_breaks():
    def f(x):
        return torch.ops.sj_libops.no_fake(x + 1) * 2

    x = torch.randn(4)
    ex, reasons = _reasons(f, x)
    assert ex.graph_break_count == 1 and "no_fake" in reasons[0], reasons
    shapejit.reset()
    torch.testing.assert_close(shapejit.compile(f)(x), f(x))


@torch.library.custom_op("sj_libops::first_rows", mutates_args=())
def first_rows(x: torch.Tensor) -> torch.Tensor:
    return x[:min(x.shape[0], 4)] * 1


@first_rows.register_fake
def _(x):
    return x.new_empty(min(x.shape[0], 4), *x.shape[1:])


@torch.library.custom_op("sj_libops::flat", mutates_args=())
def flat(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1) * 1


@flat.register_fake
def _(x):
    return x.new_empty(x.numel())


def _odd_rows(n):
    return n - 1 if n == 5 else n   # a size no probe of a 6-row call can see


@torch.library.custom_op("sj_libops::odd", mutates_args=())
def odd(x: torch.Tensor) -> torch.Tensor:
    return x[:_odd_rows(x.shape[0])] * 1


@odd.register_fake
def _(x):
    return x.new_empty(_odd_rows(x.shape[0]), *x.shape[1:])


@pytest.mark.parametrize("backend", BACKENDS)
def test_symbolic_sizes_keep_one_graph(backend):
    """Under symbolic sizes the results' sizes are matched to the arguments' over runs of
    the fake implementation at several sizes (a size, an element count, a constant, or
    an unbacked size read from the result when nothing matches): one graph for every
    length, results as eager's."""
    def f(x, y):
        a = torch.ops.sj_libops.scale_add(x, y.exp(), 1.5)      # sizes of x
        b = torch.ops.sj_libops.first_rows(a)                    # min(n, 4): unbacked
        c = torch.ops.sj_libops.flat(a)                          # n * m
        lo, hi = torch.ops.sj_libops.halves(a)                   # m // 2: unbacked
        return a.sum(0) + b.sum(0) + lo.sum() + hi.sum(), c * 2

    seen = []

    def be(graph, ex):
        seen.append(graph.code)
        return shapejit.backends.cpu(graph, ex) if backend == "cpu" else graph

    g = shapejit.compile(f, dynamic=True, backend=be)
    for n in (6, 3, 9, 2, 17):
        x, y = torch.randn(n, 3), torch.randn(n, 3)
        for got, want in zip(g(x, y), f(x, y)):
            torch.testing.assert_close(got, want)
    stats = shapejit.stats()
    assert (stats["graphs"], stats["graph_breaks"], stats["recompiles"]) == (1, 0, 0), stats
    code = seen[0]
    assert "float32[s0, s1] = torch.ops.sj_libops.scale_add.default" in code, code
    assert "float32[u" in code and "float32[s0*s1] = torch.ops.sj_libops.flat.default" in code, code


def test_a_size_no_probe_saw_is_stopped_at_run_time():
    """A fake implementation whose sizes are not the function of the arguments' the probes
    saw: the run-time assertion stops the graph before later steps read the result with
    the size the probes suggested, and the frame runs again in the interpreter (the graph
    changed nothing), so the caller gets eager's result."""
    def f(x):
        return torch.ops.sj_libops.odd(x).sum(0) + 1

    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    handler = Keep()
    logger = logging.getLogger("shapejit.graph_breaks")
    logger.addHandler(handler)
    shapejit.set_logs(graph_breaks=logging.DEBUG)
    try:
        g = shapejit.compile(f, dynamic=True)
        for n in (6, 8, 5, 7):
            x = torch.randn(n, 2)
            torch.testing.assert_close(g(x), f(x))
    finally:
        shapejit.set_logs()
        logger.removeHandler(handler)
    raised = [m for m in seen if "Runtime assertion failed" in m]
    assert len(raised) == 1 and "Eq(s0, u0)" in raised[0] and "the values were 5 and 4" in raised[0], seen


def test_symbolic_int_arguments_and_refused_probes():
    def f(x):
        return torch.ops.aten.new_zeros.default(x, [x.shape[0] * 2, 3]) + 1

    g = shapejit.compile(f, dynamic=True)
    for n in (4, 7, 11):
        x = torch.randn(n, 5)
        torch.testing.assert_close(g(x), f(x))
    assert shapejit.stats()["graphs"] == 1 and shapejit.stats()["graph_breaks"] == 0


def test_gradients_flow_through_a_custom_op():
    w = torch.randn(4, 4, requires_grad=True)

    def f(x):
        return torch.ops.sj_libops.cube(x @ w).sum(-1)

    x = torch.randn(3, 4, requires_grad=True)
    want = f(x)
    want.sum().backward()
    gx, gw = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    ex = shapejit.explain(f)(x)
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), ex.break_reasons
    shapejit.reset()
    got = shapejit.compile(f)(x)
    assert got.requires_grad
    got.sum().backward()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(x.grad, gx)
    torch.testing.assert_close(w.grad, gw)


def test_bad_arguments_raise_as_eager():
    def f(x):
        return torch.ops.sj_libops.scale_add(x, x)   # alpha missing

    x = torch.randn(3)
    with pytest.raises(Exception) as eager:
        f(x)
    with pytest.raises(type(eager.value)) as compiled:
        shapejit.compile(f)(x)
    assert str(compiled.value) == str(eager.value)


def test_random_operator_keeps_the_generator_in_step():
    def f(x):
        a = torch.rand(3)
        b = torch.ops.aten.rand.default([3])
        return x + a * b + torch.rand(3)

    x = torch.randn(3)
    g = shapejit.compile(f)
    for _ in range(2):
        torch.manual_seed(7)
        want, want_next = f(x), torch.rand(2)
        torch.manual_seed(7)
        got, got_next = g(x), torch.rand(2)
        assert torch.equal(got, want) and torch.equal(got_next, want_next)


def test_graph_names_and_serialises_the_overload():
    from shapejit import _C

    def f(x):
        return torch.ops.sj_libops.scale_add(x, x, alpha=2.0) + torch.ops.aten.mm(x, x.t()).sum()

    recs = []
    x = torch.randn(3, 3)
    shapejit.compile(f, backend=lambda g, ex: recs.append(g) or g)(x)
    graph = recs[0]
    assert "torch.ops.sj_libops.scale_add.default(v0, v0, alpha=2.0)" in graph.code
    assert "torch.ops.aten.mm.default(" in graph.code
    text = graph.serialize()
    loaded = _C.graph_deserialize(text)
    assert loaded.serialize() == text and loaded.code == graph.code
    cg = _C._cg_compile_graph(_C.graph_deserialize(text))   # the backend links it
    out = cg(x)
    torch.testing.assert_close(out[0] if isinstance(out, (tuple, list)) else out, f(x))


@torch.library.custom_op("sj_libops::draw", mutates_args=())
def draw(n: int) -> torch.Tensor:
    CALLS.append(n)
    return torch.randn(n)


@draw.register_fake
def _(n):
    return torch.empty(n)


@torch.library.custom_op("sj_libops::fake_draws", mutates_args=())
def fake_draws(x: torch.Tensor) -> torch.Tensor:
    return x + 1


@fake_draws.register_fake
def _(x):
    torch.rand(1)   # what a Python composite kernel may do on the cpu during the meta run
    return torch.empty_like(x)


CALLS = []


@pytest.mark.parametrize("dynamic", [False, True])
def test_operators_without_tensor_arguments_never_run_at_capture(dynamic):
    """Nothing sends a call without tensor arguments to the meta kernels, so a run at
    capture would be the real kernel (its draws, its side effects): such calls break, and
    the kernel runs as many times as in eager, drawing what eager draws."""
    def f(x):
        return x + torch.ops.sj_libops.draw(x.shape[0]) + x[torch.ops.aten.randperm.default(x.shape[0])]

    x = torch.arange(5.0)
    torch.manual_seed(0)
    CALLS.clear()
    want, want_calls = f(x), list(CALLS)
    CALLS.clear()
    torch.manual_seed(0)
    got = shapejit.compile(f, dynamic=dynamic)(x)
    assert torch.equal(got, want) and CALLS == want_calls == [5]
    ex, reasons = _reasons(f, x)
    assert any("no tensor argument" in r for r in reasons), reasons


def test_meta_run_leaves_the_generator_as_it_was():
    def f(x):
        return torch.ops.sj_libops.fake_draws(x) * torch.rand(3)

    x = torch.randn(3)
    torch.manual_seed(3)
    want = f(x)
    torch.manual_seed(3)
    got = shapejit.compile(f)(x)
    assert torch.equal(got, want)


def test_int_list_arguments_are_constants():
    def f(x):
        return torch.ops.aten.sum.dim_IntList(x, [1]) + torch.ops.aten.view.default(x.exp(), [4, 3]).sum(0)

    x = torch.randn(3, 4)
    ex, reasons = _reasons(lambda x: torch.ops.aten.sum.dim_IntList(x, [1]) + 1, x)
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), reasons
    shapejit.reset()
    torch.testing.assert_close(shapejit.compile(f)(x), f(x))
