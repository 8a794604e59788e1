"""compile(), reset(), stats(), disable(): the entry points over shapejit._C."""
import functools
import sys
import types

from . import _C, backends


class CompileOptions:
    """What _C.CompiledFunction reads: backend (a callable), fullgraph, dynamic, and key.

    key says what a cache entry was compiled with: an entry serves only calls whose key
    is equal (the BACKEND_MATCH guard), so the same function compiled with two backends
    or two sets of options keeps one entry per set and never runs the other's code.
    extra holds options that change what a compile produces without being read by
    shapejit itself (torch.compile's mode= and options=): they take part in the key."""

    __slots__ = ("backend", "backend_name", "fullgraph", "dynamic", "extra", "key", "internal")

    def __init__(self, backend, backend_name, fullgraph, dynamic, extra=()):
        self.backend = backend            # backend(graph, example_inputs) -> callable
        self.backend_name = backend_name  # for messages
        self.fullgraph = fullgraph        # bool: the first graph break is an error
        self.dynamic = dynamic            # None (automatic), True or False
        self.extra = tuple(extra)         # ((name, value), ...), compared with ==
        # compared with == by BACKEND_MATCH (a tuple compares its items by identity
        # first): two compile() calls with the same backend and options share entries
        self.key = (backend, fullgraph, dynamic, self.extra)
        # shapejit's own backends: their failure is an internal error (the frame runs
        # eagerly, the reason logged); a user backend's failure is the user's to see
        self.internal = backends.is_builtin(backend)

    def replace(self, **changes):
        values = {name: getattr(self, name) for name in self.__slots__
                  if name not in ("key", "internal")}
        values.update(changes)
        return CompileOptions(**values)

    def __repr__(self):
        return "CompileOptions(backend=%r, fullgraph=%r, dynamic=%r)" % (
            self.backend_name, self.fullgraph, self.dynamic)


def make_options(dynamic=None, fullgraph=False, backend="default", extra=()):
    if dynamic is not None and not isinstance(dynamic, bool):
        raise TypeError("shapejit.compile: dynamic must be None, True or False, got %r (%s)"
                        % (dynamic, type(dynamic).__name__))
    if not isinstance(fullgraph, bool):
        raise TypeError("shapejit.compile: fullgraph must be True or False, got %r (%s)"
                        % (fullgraph, type(fullgraph).__name__))
    return CompileOptions(backends.lookup(backend), backends.name_of(backend), fullgraph,
                          dynamic, extra)


def _is_module(obj):
    torch = sys.modules.get("torch")  # never import torch for numpy-only users
    return torch is not None and isinstance(obj, torch.nn.Module)


def wrap(fn, options):
    """Compiles one callable with ready options."""
    if _is_module(fn):
        from .module import OptimizedModule

        if isinstance(fn, OptimizedModule):
            fn = fn._orig_mod
        return OptimizedModule(fn, options)
    if isinstance(fn, _C.CompiledFunction):  # recompiling: start from the original
        fn = fn.__wrapped__
    if not callable(fn):
        raise TypeError(
            "shapejit.compile expects a function, method or nn.Module instance to compile, "
            "got a %s object" % type(fn).__name__)
    return _C.CompiledFunction(fn, options)


def compile(fn=None, *, dynamic=None, fullgraph=False, backend="default"):
    """Compiles a function or an ``nn.Module`` instance.

    Usable as ``@shapejit.compile``, ``@shapejit.compile(fullgraph=True)`` and
    ``shapejit.compile(fn)``. On an ``nn.Module`` instance returns a module whose forward
    is compiled (the original is ``._orig_mod``).

    dynamic: None (sizes start static and become dynamic once seen to change), True
             (dynamic from the start) or False (always static; a new size recompiles).
    fullgraph: True makes the first graph break an error naming the reason and line.
    backend: "default", "eager", or a callable ``backend(graph, example_inputs) -> callable``.
             A cache entry serves only calls made with the backend and options it was
             compiled with. A backend that raises, or returns something that is not
             callable, makes the call raise ``shapejit.BackendCompilerFailed`` naming it
             (its error as ``__cause__``); with ``config.suppress_errors = True`` that is
             a warning and the frame runs eagerly.
    """
    return compile_with(fn, make_options(dynamic=dynamic, fullgraph=fullgraph, backend=backend))


def compile_with(fn, options):
    """compile() with ready options: fn compiled, or a decorator when fn is None."""
    if fn is None:
        def decorate(f):
            return wrap(f, options)

        return decorate
    return wrap(fn, options)


def reset():
    """Forgets every compiled entry of every function and zeroes the counters."""
    _C.reset()


def stats():
    """Counters since the last reset(): frames, graphs, graph_breaks, recompiles,
    cache_entries, compile_time_s, and more."""
    return dict(_C.stats())


def _codes_of(fn):
    """The code objects whose frames run when fn is called (its wrappers included)."""
    codes = []
    seen = set()
    while fn is not None and id(fn) not in seen:
        seen.add(id(fn))
        if isinstance(fn, _C.CompiledFunction):
            fn = fn.__wrapped__
            continue
        if _is_module(fn):
            fn = type(fn).forward
            continue
        if isinstance(fn, types.MethodType):
            fn = fn.__func__
            continue
        if isinstance(fn, functools.partial):
            fn = fn.func
            continue
        code = getattr(fn, "__code__", None)
        if isinstance(code, types.CodeType):
            codes.append(code)
            fn = getattr(fn, "__wrapped__", None)  # functools.wraps chains
            continue
        if not isinstance(fn, (type, types.BuiltinFunctionType)):
            call = getattr(type(fn), "__call__", None)
            if isinstance(call, types.FunctionType):
                fn = call
                continue
        break
    return codes


def disable(fn=None):
    """Never compiles fn: its frames run as plain Python even inside compiled code.

    Usable as ``@shapejit.disable`` and ``shapejit.disable(fn)``; returns fn (for a
    compiled function, the original it wraps). On an ``nn.Module`` instance it disables
    the forward of its class (every instance of that class). Callables without Python
    code (builtins) are returned as they are: shapejit never compiles them anyway.
    """
    if fn is None:
        return disable
    if not callable(fn):
        raise TypeError("shapejit.disable expects a function, method or nn.Module, got a %s "
                        "object" % type(fn).__name__)
    for code in _codes_of(fn):
        _C.disable_code(code)
    if isinstance(fn, _C.CompiledFunction):
        return fn.__wrapped__
    return fn
