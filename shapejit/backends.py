"""Backends: what turns a captured graph into the callable that runs it.

A backend is a callable ``backend(graph, example_inputs) -> callable``. ``graph`` is a
``shapejit._C.Graph`` (inspectable: ``graph.nodes``, ``graph.inputs``, ``graph.code``) and
is itself callable, so the simplest backend returns it unchanged.

Named backends:
- ``"eager"``: runs the captured ops through the original library calls.
- ``"default"``: the oneDNN backend of a later issue; until it exists, the same as eager.
"""


def eager(graph, example_inputs):
    """Runs the graph's ops with the original torch/numpy calls."""
    return graph


_BACKENDS = {
    "eager": eager,
    "default": eager,  # becomes the oneDNN backend when it lands
}


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
