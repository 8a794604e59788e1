"""The torch._dynamo side of install_torch_compat(): what code and tests written for
torch.compile reach besides torch.compile itself.

- backends: a callable backend written for torch.compile gets a torch.fx.GraphModule
  built from shapejit's graph (Graph.to_fx()) and the graph's example inputs (the live
  tensors of the first call); what it returns is what runs. A torch backend name that
  shapejit has no backend of its own for ("aot_eager", "cudagraphs", ...) runs torch's
  backend of that name the same way.
- torch._dynamo.optimize / optimize_assert / run, as decorators over torch_compile.
- torch._dynamo.utils.counters: filled from shapejit's capture events with the keys torch
  fills (frames total/ok, stats calls_captured/unique_graphs, graph_break by reason).
- errors: shapejit's Unsupported, BackendCompilerFailed, RecompileError and
  ConstraintViolationError are raised as subclasses that also derive from torch's classes
  of those names, so ``except torch._dynamo.exc.Unsupported`` catches them.
- compiled modules: torch._dynamo.eval_frame.OptimizedModule itself, its forward compiled
  by shapejit (state_dict keys carry ``_orig_mod.``, as torch's).
"""
import functools

import torch
import torch._dynamo
import torch._dynamo.exc
import torch._dynamo.utils

from . import _C, api, backends
from .explain import _active_sinks as _explain_sinks

# ------------------------------------------------------------------------------------
# Backends written for torch.compile
# ------------------------------------------------------------------------------------


class FxBackend:
    """shapejit's backend(graph, example_inputs) over a torch.compile backend
    fn(gm, example_inputs): gm is graph.to_fx(). Compares equal to another FxBackend of
    the same fn, so two torch.compile calls with one backend share cache entries."""

    def __init__(self, fn, name=None, eager_fallback=False):
        self.fn = fn
        self.__name__ = self.__qualname__ = name or backends.name_of(fn)
        self.eager_fallback = eager_fallback

    def __call__(self, graph, example_inputs):
        if not self.eager_fallback:
            return self._compile(graph, example_inputs)
        try:
            return self._compile(graph, example_inputs)
        except Exception as e:   # noqa: BLE001 - interrupts propagate
            # torch's aot_eager family means "eager semantics, traced by AOTAutograd";
            # a graph AOTAutograd cannot trace (numpy ops on fake tensors) runs as
            # shapejit's eager backend instead, which has those semantics
            from .compat import _warn_once
            _warn_once(("fallback", self.__name__, type(e).__name__),
                       "shapejit (torch compat): backend=%r could not compile %s (%s: %s); "
                       "it runs on shapejit's 'eager' backend"
                       % (self.__name__, graph.name, type(e).__name__, e))
            return graph

    def _compile(self, graph, example_inputs):
        """The backend on the GraphModule; the sizes of inputs the graph reads are inputs
        of the module (s0, s1, ... first, as torch's symbolic sizes), so the callable
        shapejit runs passes them before the graph's inputs."""
        from . import fx

        try:
            gm = fx.to_fx(graph, size_inputs=True)
        except Exception as e:   # noqa: BLE001 - interrupts propagate
            # shapejit's failure, not the backend's: the graph runs, on shapejit's eager
            import warnings
            warnings.warn("shapejit (torch compat): no torch.fx graph could be built for %s "
                          "(%s: %s); it runs on shapejit's 'eager' backend, not on %s"
                          % (graph.name, type(e).__name__, e, self.__name__),
                          RuntimeWarning, stacklevel=2)
            return graph
        spec = gm.meta["shapejit_size_inputs"]
        floats = gm.meta["shapejit_float_outputs"]
        example = list(example_inputs)
        sizes = [_C._size_of(example[i], d) for i, d in spec]
        compiled = self.fn(gm, sizes + example)
        if not (spec or floats) or not callable(compiled):
            return compiled
        size_of = _C._size_of

        def torch_convention(*args):
            out = compiled(*[size_of(args[i], d) for i, d in spec], *args)
            if floats:
                out = list(out)
                for k in floats:   # shapejit's result holds the Python float
                    out[k] = out[k].item()
            return out

        torch_convention.__wrapped__ = compiled
        return torch_convention

    def __eq__(self, other):
        return isinstance(other, FxBackend) and (other.fn is self.fn or other.fn == self.fn)

    def __hash__(self):
        try:
            return hash(self.fn)
        except TypeError:
            return id(self.fn)

    def __repr__(self):
        return "FxBackend(%s)" % self.__name__


def torch_named_backend(name):
    """FxBackend over torch's backend called name, or None if torch has none."""
    from torch._dynamo.backends.registry import list_backends, lookup_backend

    if name not in list_backends(exclude_tags=()):
        return None
    from .compat import _APPROXIMATED
    return FxBackend(lookup_backend(name), name, eager_fallback=name in _APPROXIMATED)


def list_backends(exclude_tags=("debug", "experimental")):
    """torch._dynamo.list_backends under compat: torch's names (each accepted by
    torch.compile here) and shapejit's own ("cpu")."""
    from torch._dynamo.backends.registry import list_backends as torch_list

    return sorted(set(torch_list(exclude_tags)) | {"cpu"})


# ------------------------------------------------------------------------------------
# torch._dynamo.optimize and friends
# ------------------------------------------------------------------------------------

def _compile():
    from .compat import torch_compile
    return torch_compile


def optimize(backend="inductor", *, nopython=False, guard_export_fn=None, guard_fail_fn=None,
             guard_filter_fn=None, disable=False, dynamic=None, **unused):
    """torch._dynamo.optimize(backend, nopython=, dynamic=): a decorator compiling with
    shapejit; nopython is fullgraph. The guard hooks are not supported (shapejit's guards
    are not Python objects): passing one is a TypeError rather than a hook never called."""
    for name, hook in (("guard_export_fn", guard_export_fn), ("guard_fail_fn", guard_fail_fn),
                       ("guard_filter_fn", guard_filter_fn)):
        if hook is not None:
            raise TypeError("shapejit (torch compat): torch._dynamo.optimize(%s=...) is not "
                            "supported" % name)
    compile_ = _compile()

    def decorate(fn):
        if disable:
            return fn
        return compile_(fn, backend=backend, fullgraph=bool(nopython), dynamic=dynamic)

    return decorate


def optimize_assert(backend, *, hooks=None, export=False, export_constraints=None,
                    dynamic=None, **unused):
    """torch._dynamo.optimize_assert: optimize with nopython=True."""
    return optimize(backend, nopython=True, dynamic=dynamic)


def run(fn=None):
    """torch._dynamo.run: calls run code compiled before and never compile (a call no
    entry serves runs eagerly), as shapejit's eager_on_recompile stance around each call.
    The entries reused are those of the default backend."""
    from .stance import set_stance

    def decorate(f):
        compiled = _compile()(f)

        @functools.wraps(f)
        def run_only(*args, **kwargs):
            with set_stance("eager_on_recompile"):
                return compiled(*args, **kwargs)

        return run_only

    return decorate if fn is None else decorate(fn)


class _ShapejitContext:
    """What torch's OptimizedModule calls dynamo_ctx: called with the module's __call__
    (or torch's inline wrapper of it), it returns that callable compiled by shapejit."""

    def __init__(self, options):
        self.options = options
        self.fullgraph = options.fullgraph
        self.callback = options.backend

    def __call__(self, fn):
        return _C.CompiledFunction(fn, self.options)


def compile_module(mod, options):
    """torch.compile(module) under compat: torch's OptimizedModule with a shapejit forward."""
    from torch._dynamo.eval_frame import OptimizedModule

    if isinstance(mod, OptimizedModule):
        mod = mod._orig_mod
    return OptimizedModule(mod, _ShapejitContext(options))


# ------------------------------------------------------------------------------------
# counters
# ------------------------------------------------------------------------------------

def _count(kind, payload):
    counters = torch._dynamo.utils.counters
    if kind == "graph":
        counters["stats"]["unique_graphs"] += 1
        counters["stats"]["calls_captured"] += payload.op_count
    elif kind == "break":
        counters["graph_break"][str(payload[0])] += 1
    elif kind == "compile_time":
        counters["frames"]["total"] += 1
        counters["frames"]["ok"] += 1


def reset():
    """torch._dynamo.reset under compat: shapejit's reset."""
    api.reset()


# ------------------------------------------------------------------------------------
# errors as torch's classes
# ------------------------------------------------------------------------------------

def _message_init(self, *args):
    RuntimeError.__init__(self, *args)
    self.msg = str(args[0]) if args else ""


def _exception_classes():
    from torch.fx.experimental.symbolic_shapes import ConstraintViolationError

    exc = torch._dynamo.exc

    def both(ours, theirs, init=None):
        body = {"__module__": "shapejit.compat", "__doc__": ours.__doc__}
        if init is not None:
            body["__init__"] = init
        return type(ours.__name__, (ours, theirs), body)

    def unsupported_init(self, msg=""):
        # torch's Unsupported records the message in counters["unimplemented"] when made,
        # as here; its other arguments (real_stack, gb_type) are torch capture's own
        exc.Unsupported.__init__(self, msg)

    return {
        _C.Unsupported: both(_C.Unsupported, exc.Unsupported, unsupported_init),
        # torch's constructor takes (backend_fn, inner_exception); shapejit's message
        # names the backend and the error is the __cause__
        _C.BackendCompilerFailed: both(_C.BackendCompilerFailed, exc.BackendCompilerFailed,
                                       _message_init),
        _C.RecompileError: both(_C.RecompileError, exc.RecompileError, _message_init),
        _C.ConstraintViolationError: both(_C.ConstraintViolationError, ConstraintViolationError,
                                          _message_init),
    }


# ------------------------------------------------------------------------------------
# install / uninstall of what is not a plain attribute route
# ------------------------------------------------------------------------------------

def install():
    _C._set_exception_classes(_exception_classes())
    # explain() puts back the sink below it when it finishes
    _explain_sinks.insert(0, _count)
    if len(_explain_sinks) == 1:
        _C.set_event_sink(_count)


def uninstall():
    _C._set_exception_classes(None)
    if _count in _explain_sinks:
        _explain_sinks.remove(_count)
    if not _explain_sinks:
        _C.set_event_sink(None)
