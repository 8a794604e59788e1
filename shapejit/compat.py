"""install_torch_compat(): code written for torch.compile runs under shapejit unchanged.

Routes to shapejit (the originals are saved and put back exactly by
uninstall_torch_compat()):
    torch.compile
    torch._dynamo: reset, explain, config, disable, optimize, optimize_assert, run,
                   list_backends, mark_dynamic, maybe_mark_dynamic, mark_static,
                   mark_unbacked
    torch._dynamo.decorators: the same four marks, disable
    torch._logging.set_logs
    torch.compiler: config, set_stance, reset, disable
(disable is routed too: torch's own disable switches torch's frame hook, not shapejit's.)
Besides (compat_dynamo.py): backends written for torch.compile get a torch.fx.GraphModule,
torch._dynamo.utils.counters is filled, shapejit's errors are instances of torch's
exception classes, and a compiled module is torch's OptimizedModule.

Only the module attributes are replaced: a name imported before installing
(``from torch import compile``) keeps torch's object.
"""
import functools
import inspect
import types
import warnings

from . import _C, api, backends, explain as _explain, logs, marks, stance
from . import config as _config

_MISSING = object()
_saved = []     # [(owner, attribute, original or _MISSING)] while installed
_warned = set()

# torch.compile backend names and what shapejit runs for them
_TORCH_BACKENDS = {None: "default", "inductor": "default", "eager": "eager"}
_APPROXIMATED = ("aot_eager", "aot_eager_decomp_partition", "aot_eager_default_partitioner")


def _warn_once(key, message):
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, UserWarning, stacklevel=3)


def is_installed():
    return bool(_saved)


# ------------------------------------------------------------------------------------
# torch.compile and friends as shapejit sees them
# ------------------------------------------------------------------------------------

def _backend_for(backend):
    """torch.compile's backend= as shapejit's: None and "inductor" are shapejit's default
    (its C kernels; Inductor is never called), "eager" shapejit's eager; a name shapejit
    has a backend for is that one; another torch backend name, and a callable written for
    torch.compile, get a torch.fx.GraphModule of the graph (compat_dynamo.FxBackend)."""
    from . import compat_dynamo

    if isinstance(backend, str) or backend is None:
        if backend in _TORCH_BACKENDS:
            return _TORCH_BACKENDS[backend]
        if backend in backends.list_backends():
            return backend
        named = compat_dynamo.torch_named_backend(backend)
        if named is not None:
            return named
        if backend in _APPROXIMATED:
            _warn_once(("backend", backend),
                       "shapejit (torch compat): backend=%r runs as shapejit's 'eager' "
                       "backend" % backend)
            return "eager"
        return backend  # shapejit's ValueError lists the valid names
    if isinstance(backend, compat_dynamo.FxBackend) or backends.is_builtin(backend):
        return backend
    if callable(backend):
        return compat_dynamo.FxBackend(backend)
    return backend


def torch_compile(model=None, *, fullgraph=False, dynamic=None, backend="inductor",
                  mode=None, options=None, disable=False, **others):
    """torch.compile's signature, compiled by shapejit. mode=, options= and the other
    inductor/dynamo-specific arguments are accepted and ignored (one warning each); they
    are still recorded with the entries (as torch's backend equality does), so the same
    function compiled with two modes keeps an entry per mode."""
    ignored = dict(others, mode=mode, options=options)
    for name in sorted(ignored):
        if ignored[name] not in (None, False, {}):
            _warn_once(("compile", name),
                       "shapejit (torch compat): torch.compile(%s=...) is ignored" % name)
    if disable:
        return model if model is not None else (lambda fn: fn)
    extra = tuple((name, ignored[name]) for name in sorted(ignored)
                  if ignored[name] not in (None, False, {}))
    options = api.make_options(dynamic=dynamic, fullgraph=fullgraph,
                               backend=_backend_for(backend), extra=extra)
    if api._is_module(model):
        from . import compat_dynamo
        return compat_dynamo.compile_module(model, options)
    return api.compile_with(model, options)


def torch_disable(fn=None, recursive=True, *, reason=None, **unused):
    """torch's disable(fn=None, recursive=True, *, reason=None) as shapejit.disable."""
    if fn is None:
        return api.disable
    return api.disable(fn)


def _make_set_logs(torch_set_logs):
    try:
        torch_names = set(inspect.signature(torch_set_logs).parameters)
    except (TypeError, ValueError):
        torch_names = set()

    def set_logs(**kwargs):
        """torch._logging.set_logs for shapejit's channels; torch's other channels are
        accepted and ignored (one warning each)."""
        ours = {}
        for name, value in kwargs.items():
            if name in logs.CHANNELS or name in logs.GROUPS:
                ours[name] = value
            elif name in torch_names:
                if value:
                    _warn_once(("logs", name),
                               "shapejit (torch compat): set_logs(%s=...) is ignored: "
                               "shapejit has no such channel (channels: %s)"
                               % (name, ", ".join(logs.CHANNELS)))
            else:
                ours[name] = value  # shapejit's ValueError lists the valid channels
        logs.set_logs(**ours)

    set_logs.__wrapped__ = logs.set_logs
    return set_logs


def _check_torch_knob(proxy, name, value):
    """A write of a name that is not a shapejit knob, through a ConfigProxy: a name torch's
    config does not have either is an AttributeError (as torch raises); a torch knob that
    shapejit does not implement warns once, naming it, unless the value is the one torch
    has (setting a knob to the value it has changes nothing, here or in torch)."""
    torch_config = proxy.__dict__["_torch_config"]
    try:
        current = getattr(torch_config, name)
    except AttributeError:
        raise AttributeError(
            "%s.%s does not exist: it is neither a shapejit knob (shapejit.config.knobs()) "
            "nor a knob of torch's config" % (proxy.__name__, name)) from None
    try:
        same = bool(current == value)
    except Exception:
        same = False
    if not same:
        _warn_once(("knob", name),
                   "shapejit (torch compat): %s.%s is a torch knob that shapejit does not "
                   "implement; setting it to %r has no effect on shapejit (its knobs: "
                   "shapejit.config.knobs())" % (proxy.__name__, name, value))


def _get_error_on_recompile():
    return _C.config_get("stance") == "fail_on_recompile"


def _set_error_on_recompile(value):
    if not isinstance(value, bool):
        raise TypeError("error_on_recompile must be True or False, got %r" % (value,))
    if value:
        _C.config_set("stance", "fail_on_recompile")
    elif _get_error_on_recompile():
        _C.config_set("stance", "default")


# torch knobs shapejit implements through something other than a knob of the same name
# (name: (get, set)). error_on_recompile is the fail_on_recompile stance: a recompile
# raises torch._dynamo.exc.RecompileError (shapejit's RecompileError under compat).
_EMULATED = {"error_on_recompile": (_get_error_on_recompile, _set_error_on_recompile)}


class ConfigProxy(types.ModuleType):
    """Stands for torch._dynamo.config / torch.compiler.config: shapejit's knobs are read
    and written in shapejit; a knob of torch's that shapejit does not implement is kept
    as a plain attribute of the proxy, with a warning naming it when set to a value other
    than torch's (reads fall back to torch's config); a name neither has is an
    AttributeError. patch() works for both kinds."""

    def __init__(self, name, torch_config):
        super().__init__(name)
        object.__setattr__(self, "_torch_config", torch_config)
        object.__setattr__(self, "_extra", {})
        # names deleted and not set again: unittest.mock.patch.object deletes the name on
        # exit and, finding it gone, sets the value it saved back (as torch's config does)
        object.__setattr__(self, "_hidden", set())

    def __getattr__(self, name):
        if name in self.__dict__["_hidden"]:
            raise AttributeError("%s has no attribute %r" % (self.__name__, name))
        if _config.is_knob(name):
            return _C.config_get(name)
        if self._emulates(name):
            return _EMULATED[name][0]()
        extra = self.__dict__["_extra"]
        if name in extra:
            return extra[name]
        return getattr(self.__dict__["_torch_config"], name)

    def __setattr__(self, name, value):
        if _config.is_knob(name):
            _config.set_value(name, value)  # source lists checked before storing
        elif self._emulates(name):
            _EMULATED[name][1](value)
        else:
            _check_torch_knob(self, name, value)
            self._extra[name] = value
        self._hidden.discard(name)

    def __delattr__(self, name):
        """Puts the default back and hides the name until it is set again."""
        if _config.is_knob(name):
            canon = _config.canonical(name)
            _C.config_set(canon, _config.defaults()[canon])
        elif self._emulates(name):
            _EMULATED[name][1](False)
        elif not hasattr(self._torch_config, name) and name not in self._extra:
            raise AttributeError("%s has no attribute %r" % (self.__name__, name))
        self._extra.pop(name, None)
        self._hidden.add(name)

    def _emulates(self, name):
        """name is a knob of this torch config that shapejit emulates (_EMULATED)."""
        return name in _EMULATED and hasattr(self.__dict__["_torch_config"], name)

    def __dir__(self):
        return sorted(set(dir(self._torch_config)) | set(_config.knobs()) | set(self._extra))

    def patch(self, arg1=None, arg2=None, **kwargs):
        if isinstance(arg1, str):
            kwargs[arg1] = arg2
        elif isinstance(arg1, dict):
            kwargs.update(arg1)
        return _ProxyPatch(self, kwargs)


class _ProxyPatch:
    """patch() of a ConfigProxy: shapejit knobs through shapejit.config.patch (whose
    constructor rejects a bad source list before anything is set), the rest as plain
    attributes of the proxy."""

    def __init__(self, proxy, changes):
        self._proxy = proxy
        knobs = {k: v for k, v in changes.items() if _config.is_knob(k)}
        self._knobs = _config.patch(**knobs)
        self._emulated = {k: v for k, v in changes.items() if proxy._emulates(k)}
        for name, value in self._emulated.items():
            if not isinstance(value, bool):
                raise TypeError("%s.%s must be True or False, got %r"
                                % (proxy.__name__, name, value))
        self._extra = {k: v for k, v in changes.items()
                       if not _config.is_knob(k) and not proxy._emulates(k)}
        self._saved = []

    def __enter__(self):
        # a name torch's config lacks fails here, when the patch applies, as torch's own
        # patch does: a decorator naming a knob of a newer torch does not fail at import
        for name, value in self._extra.items():   # before anything is set
            _check_torch_knob(self._proxy, name, value)
        self._knobs.__enter__()
        store = self._proxy._extra
        self._saved.append(({k: store.get(k, _MISSING) for k in self._extra},
                            {k: _EMULATED[k][0]() for k in self._emulated}))
        store.update(self._extra)
        for name, value in self._emulated.items():
            _EMULATED[name][1](value)
        return self

    def __exit__(self, *exc):
        store = self._proxy._extra
        extra, emulated = self._saved.pop()
        for k, old in extra.items():
            if old is _MISSING:
                store.pop(k, None)
            else:
                store[k] = old
        for k, old in emulated.items():
            _EMULATED[k][1](old)
        return self._knobs.__exit__(*exc)

    def __call__(self, fn):
        if isinstance(fn, type):
            return self._patch_class(fn)

        @functools.wraps(fn)
        def patched(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)

        return patched

    def _patch_class(self, cls):
        """On a unittest.TestCase class: each test method (test*, inherited ones too)
        runs with the patch applied; the class itself is returned."""
        import unittest

        if not issubclass(cls, unittest.TestCase):
            raise TypeError("%s.patch decorates a function or a unittest.TestCase class, "
                            "not the class %s" % (self._proxy.__name__, cls.__qualname__))
        for name in dir(cls):
            attr = getattr(cls, name, None)
            if name.startswith("test") and callable(attr) and not isinstance(attr, type):
                setattr(cls, name, self(attr))
        return cls


# ------------------------------------------------------------------------------------
# Install / uninstall
# ------------------------------------------------------------------------------------

def _routes():
    try:
        import torch
        import torch._dynamo
        import torch._dynamo.decorators
        import torch._logging
        import torch.compiler
    except ImportError as e:
        raise ImportError("shapejit.install_torch_compat needs torch: %s" % e) from e
    dynamo_config = ConfigProxy("torch._dynamo.config", torch._dynamo.config)
    compiler_config = ConfigProxy("torch.compiler.config", torch.compiler.config)
    mark_names = ("mark_dynamic", "maybe_mark_dynamic", "mark_static", "mark_unbacked")
    routes = [(torch, "compile", torch_compile)]
    routes += [(torch._dynamo, "reset", api.reset),
               (torch._dynamo, "explain", _explain.explain),
               (torch._dynamo, "config", dynamo_config),
               (torch._dynamo, "disable", torch_disable)]
    from . import compat_dynamo
    routes += [(torch._dynamo, "optimize", compat_dynamo.optimize),
               (torch._dynamo, "optimize_assert", compat_dynamo.optimize_assert),
               (torch._dynamo, "run", compat_dynamo.run),
               (torch._dynamo, "list_backends", compat_dynamo.list_backends)]
    routes += [(torch._dynamo, n, getattr(marks, n)) for n in mark_names]
    routes += [(torch._dynamo.decorators, n, getattr(marks, n)) for n in mark_names]
    routes += [(torch._dynamo.decorators, "disable", torch_disable)]
    routes += [(torch._logging, "set_logs", _make_set_logs(torch._logging.set_logs))]
    routes += [(torch.compiler, "config", compiler_config),
               (torch.compiler, "set_stance", stance.set_stance),
               (torch.compiler, "reset", api.reset),
               (torch.compiler, "disable", torch_disable)]
    return routes


def install_torch_compat():
    """Routes torch.compile and its companions to shapejit (idempotent)."""
    if _saved:
        return
    routes = _routes()
    for owner, name, replacement in routes:
        _saved.append((owner, name, owner.__dict__.get(name, _MISSING)))
    for owner, name, replacement in routes:
        setattr(owner, name, replacement)
    from . import compat_dynamo
    compat_dynamo.install()


def uninstall_torch_compat():
    """Puts torch's own objects back exactly (idempotent)."""
    if _saved:
        from . import compat_dynamo
        compat_dynamo.uninstall()
    while _saved:
        owner, name, original = _saved.pop()
        if original is _MISSING:
            if name in owner.__dict__:
                delattr(owner, name)
        else:
            setattr(owner, name, original)

