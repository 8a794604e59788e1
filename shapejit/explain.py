"""shapejit.explain(fn)(*args, **kwargs): what compiling fn on these inputs produces."""
import functools

from . import _C, api, backends

# The sink explain() set last, so a nested explain can put the outer one back.
_active_sinks = []


class BreakReason:
    """One graph break (or failed capture): `reason`, and `user_stack` as
    "file:line in func" strings, outermost frame first (`frames` has the raw tuples
    (filename, lineno, funcname, source_line))."""

    def __init__(self, reason, frames):
        self.reason = reason
        self.frames = [tuple(f) for f in frames or ()]   # a break outside any frame has none
        self.user_stack = ["%s:%s in %s" % (f[0], f[1], f[2]) for f in self.frames]

    def __repr__(self):
        return "BreakReason(reason=%r, user_stack=%r)" % (self.reason, self.user_stack)


def _ops(graph):
    return [node.op for node in graph.nodes if node.op != "input"]


class ExplainOutput:
    """What one compiled call produced. Printing it gives torch._dynamo.explain's layout."""

    def __init__(self, graphs, break_reasons, guards, compile_times):
        self.graphs = graphs                      # [_C.Graph], in the order compiled
        self.graph_count = len(graphs)
        self.break_reasons = break_reasons        # [BreakReason]
        self.graph_break_count = len(break_reasons)
        self.ops_per_graph = [_ops(g) for g in graphs]
        self.op_count = sum(len(ops) for ops in self.ops_per_graph)
        self.guards = guards                      # [str], every new cache entry's guards
        self.out_guards = guards                  # torch._dynamo.explain's name for them
        self.compile_times = compile_times        # [seconds] per frame compiled

    @property
    def compile_time(self):
        return sum(self.compile_times)

    def __str__(self):
        lines = ["Graph Count: %d" % self.graph_count,
                 "Graph Break Count: %d" % self.graph_break_count,
                 "Op Count: %d" % self.op_count,
                 "Break Reasons:"]
        for i, br in enumerate(self.break_reasons, 1):
            lines.append("  Break Reason %d:" % i)
            lines.append("    Reason: %s" % br.reason)
            lines.append("    User Stack:")
            lines += ["      <%s>" % entry for entry in br.user_stack]
        lines.append("Ops per Graph:")
        for i, ops in enumerate(self.ops_per_graph, 1):
            lines.append("  Ops %d:" % i)
            lines += ["    %s" % op for op in ops]
        lines.append("Out Guards:")
        for i, guard in enumerate(self.guards, 1):
            lines.append("  Guard %d:" % i)
            lines += ["    %s" % part for part in str(guard).splitlines()]
        lines.append("Compile Time: %.4f s (%s)" % (
            self.compile_time,
            ", ".join("%.4f" % t for t in self.compile_times) or "no frame compiled"))
        return "\n".join(lines) + "\n"

    def __repr__(self):
        return "<ExplainOutput graphs=%d breaks=%d ops=%d>" % (
            self.graph_count, self.graph_break_count, self.op_count)


def _compiled_for_explain(fn):
    """fn compiled so that every break is recorded rather than raised."""
    if isinstance(fn, _C.CompiledFunction):
        options = fn._options
        return api.wrap(fn.__wrapped__, api.make_options(
            dynamic=getattr(options, "dynamic", None), backend=backends.eager))
    if api._is_module(fn):
        from .module import OptimizedModule

        if isinstance(fn, OptimizedModule):
            fn = fn._orig_mod
    return api.wrap(fn, api.make_options(backend=backends.eager))


def explain(fn, *extra_args, **extra_kwargs):
    """``explain(fn)(*args, **kwargs)`` compiles fn afresh (the caches are reset first,
    so it really compiles), calls it once, and returns an ExplainOutput: graph_count,
    graph_break_count, break_reasons, op_count, ops_per_graph, graphs, guards,
    compile_times. ``explain(fn, *args, **kwargs)`` is the same in one call."""
    if not callable(fn):
        raise TypeError("shapejit.explain expects a function or nn.Module, got a %s object"
                        % type(fn).__name__)

    @functools.wraps(fn)
    def inner(*args, **kwargs):
        compiled = _compiled_for_explain(fn)
        graphs, breaks, guards, times = [], [], [], []

        def sink(kind, payload):
            if kind == "graph":
                graphs.append(payload)
            elif kind == "break":
                reason, frames = payload
                breaks.append(BreakReason(reason, frames))
            elif kind == "guards":
                guards.extend(payload)
            elif kind == "compile_time":
                times.append(payload)

        api.reset()
        previous = _active_sinks[-1] if _active_sinks else None
        _active_sinks.append(sink)
        _C.set_event_sink(sink)
        try:
            compiled(*args, **kwargs)
        finally:
            _active_sinks.pop()
            _C.set_event_sink(previous)
        return ExplainOutput(graphs, breaks, guards, times)

    if extra_args or extra_kwargs:
        return inner(*extra_args, **extra_kwargs)
    return inner
