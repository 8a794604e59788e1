"""Backends: what turns a captured graph into the callable that runs it.

A backend is a callable ``backend(graph, example_inputs) -> callable``. ``graph`` is a
``shapejit._C.Graph`` (inspectable: ``graph.nodes``, ``graph.inputs``, ``graph.code``) and
is itself callable, so the simplest backend returns it unchanged.

Named backends:
- ``"eager"``: runs the captured ops through the original library calls.
- ``"cpu"``: generated C kernels (fused pointwise runs, reductions, softmax, layer norm;
  float32/float64/int/bool) and oneDNN (matmul, conv, pooling, batch norm); every other
  node runs as an eager step (backend/, docs/internals/backend.md).
- ``"default"``: ``"cpu"``.
"""


def eager(graph, example_inputs):
    """Runs the graph's ops with the original torch/numpy calls."""
    return graph


def cpu(graph, example_inputs):
    """Fuses runs of float32 pointwise ops into generated C loops (compiled once, cached on
    disk, shape-generic); every other op runs with its original library call."""
    from . import _C
    try:
        return _C._cg_compile_graph(graph)
    except _C.CompileError as e:   # a bug of ours: the graph still runs, eagerly
        import warnings
        warnings.warn("shapejit: the cpu backend could not compile %s; it runs eagerly: %s"
                      % (graph.name, e), RuntimeWarning, stacklevel=2)
        return graph


_BACKENDS = {
    "eager": eager,
    "cpu": cpu,
    "default": cpu,    # every op lowers or runs as an eager step of its own
}


_BUILTIN = (eager, cpu)


def is_builtin(fn):
    """True for the backend callables shapejit itself provides."""
    return any(fn is b for b in _BUILTIN)


def list_backends():
    """The backend names compile(backend=...) accepts."""
    return list(_BACKENDS)


def register_backend(name, fn):
    """Makes ``compile(backend=name)`` use ``fn(graph, example_inputs) -> callable``."""
    if not isinstance(name, str) or not name:
        raise TypeError("shapejit: a backend name must be a non-empty str, got %r" % (name,))
    if not callable(fn):
        raise TypeError("shapejit: backend %r must be callable, got %s"
                        % (name, type(fn).__name__))
    _BACKENDS[name] = fn


def lookup(backend):
    """The backend callable for a compile(backend=...) value."""
    if isinstance(backend, str):
        try:
            return _BACKENDS[backend]
        except KeyError:
            raise ValueError("shapejit.compile: unknown backend %r; valid backends: %s, "
                             "or a callable backend(graph, example_inputs) -> callable"
                             % (backend, ", ".join(_BACKENDS))) from None
    if callable(backend):
        return backend
    raise ValueError("shapejit.compile: backend must be one of %s, or a callable "
                     "backend(graph, example_inputs) -> callable; got %s"
                     % (", ".join(repr(n) for n in _BACKENDS), type(backend).__name__))


def name_of(backend):
    """A short name for messages and reprs."""
    if isinstance(backend, str):
        return backend
    return getattr(backend, "__qualname__", None) or getattr(backend, "__name__", None) \
        or type(backend).__name__
