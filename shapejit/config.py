"""shapejit's config knobs, as a module: ``shapejit.config.cache_size_limit = 16``.

Every knob lives in C (core/config.def is the table); reading or writing an attribute of
this module reads or writes the C value, which the compiler uses from then on. Types are
checked: a bool knob takes only True/False, an int knob an int >= 0, a str knob a str.

``patch(**knobs)`` sets knobs for a ``with`` block or for each call of a decorated
function, and puts the previous values back afterwards::

    with shapejit.config.patch(cache_size_limit=1):
        ...

    @shapejit.config.patch(specialize_int=True)
    def run(): ...

The source-list knobs (dynamic_sources, static_sources, unbacked_sources) are parsed by
shapejit.dynsources before a value is stored: a bad entry is a ValueError naming the
knob and the entry, and the knob keeps its previous value.
"""
import functools
import os
import sys
import types
import warnings

from . import _C, dynsources

# (name, kind, default, doc) rows and {alias: knob}, straight from the C table
_KNOBS = {row[0]: row for row in _C.config_knobs()}
_ALIASES = dict(_C.config_aliases())

# Environment variables read once at import, as torch does for the same knobs.
_ENV = {
    "TORCH_COMPILE_DYNAMIC_SOURCES": "dynamic_sources",
    "TORCH_COMPILE_STATIC_SOURCES": "static_sources",
    "TORCH_COMPILE_UNBACKED_SOURCES": "unbacked_sources",
    "TORCHDYNAMO_SUPPRESS_ERRORS": "suppress_errors",
    "TORCH_DYNAMO_AUTOMATIC_DYNAMIC_REMOTE_PGO": "automatic_dynamic_remote_pgo",
    "SHAPEJIT_KERNEL_REMOTE_CACHE": "kernel_remote_cache",
    "TORCH_TRACE": "trace_dir",
    "TORCH_COMPILER_COLLECTIVES": "enable_compiler_collectives",
}
_FALSE = ("", "0", "false", "no", "off")   # a bool knob's environment variable: anything else is on


def knobs():
    """The knob names, in table order (aliases not included)."""
    return list(_KNOBS)


def aliases():
    """{alias: knob name}."""
    return dict(_ALIASES)


def is_knob(name):
    return name in _KNOBS or name in _ALIASES


def canonical(name):
    """The knob a name or alias designates; AttributeError listing valid knobs if none."""
    if name in _KNOBS:
        return name
    if name in _ALIASES:
        return _ALIASES[name]
    _C.config_get(name)  # raises the C error, which lists the valid knobs
    raise AttributeError(name)  # not reached


def check_value(name, value):
    """Raises what setting knob name to value would raise beyond the C type checks (a
    source-list knob: ValueError for a bad entry), without storing anything."""
    dynsources.check(canonical(name), value)


def set_value(name, value):
    """Sets a knob after check_value(): on an error the knob keeps its value."""
    check_value(name, value)
    _C.config_set(name, value)
    if canonical(name) == "trace_dir" and "shapejit.trace" in sys.modules:
        sys.modules["shapejit.trace"].configure()   # opens or closes the trace now


def doc(name):
    """The doc line of a knob."""
    return _KNOBS[canonical(name)][3]


def to_dict():
    """{knob: current value} for every knob."""
    return {name: _C.config_get(name) for name in _KNOBS}


def defaults():
    """{knob: default value} for every knob."""
    return {name: row[2] for name, row in _KNOBS.items()}


def reset_to_defaults():
    """Puts every knob back to its default."""
    for name, row in _KNOBS.items():
        _C.config_set(name, row[2])


class patch:
    """Sets knobs for a ``with`` block, or around every call of a decorated function.

    ``patch(cache_size_limit=1)``, ``patch("cache_size_limit", 1)`` or
    ``patch({"cache_size_limit": 1})``. Names are checked when the patch is made, and so
    are the entries of source-list knobs; other values when it is entered. On exit every knob gets back the value it had on entry.
    Re-entrant: the same patch object may be entered recursively.
    """

    def __init__(self, arg1=None, arg2=None, **kwargs):
        if isinstance(arg1, str):
            changes = {arg1: arg2}
        elif isinstance(arg1, dict):
            if arg2 is not None:
                raise TypeError("shapejit.config.patch(dict) takes no second argument")
            changes = dict(arg1)
        elif arg1 is None:
            if arg2 is not None:
                raise TypeError("shapejit.config.patch: a value was given without a knob name")
            changes = {}
        else:
            raise TypeError(
                "shapejit.config.patch expects knob=value keywords, a (name, value) pair or "
                "a dict, got %s" % type(arg1).__name__)
        for name in kwargs:
            if name in changes:
                raise TypeError("shapejit.config.patch: knob %r given twice" % name)
        changes.update(kwargs)
        self._changes = [(canonical(name), value) for name, value in changes.items()]
        for name, value in self._changes:
            check_value(name, value)  # a bad source list fails here, not at entry
        self._saved = []  # a stack: one list of (name, previous value) per active entry

    def __enter__(self):
        prior = []
        try:
            for name, value in self._changes:
                old = _C.config_get(name)
                set_value(name, value)
                prior.append((name, old))
        except BaseException:
            for name, old in reversed(prior):
                _C.config_set(name, old)
            raise
        self._saved.append(prior)
        return self

    def __exit__(self, *exc):
        for name, old in reversed(self._saved.pop()):
            _C.config_set(name, old)
        return False

    def __call__(self, fn):
        if not callable(fn):
            raise TypeError("shapejit.config.patch decorates a callable, not %s"
                            % type(fn).__name__)

        @functools.wraps(fn)
        def patched(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)

        return patched

    def __repr__(self):
        return "shapejit.config.patch(%s)" % ", ".join(
            "%s=%r" % kv for kv in self._changes)


class _ConfigModule(types.ModuleType):
    """Attribute reads and writes of knob names go to the C values."""

    def __getattr__(self, name):  # only for names not found the normal way
        if name.startswith("__"):
            raise AttributeError(name)
        return _C.config_get(name)  # AttributeError listing the valid knobs if unknown

    def __setattr__(self, name, value):
        if is_knob(name):
            set_value(name, value)
        elif name.startswith("_") or name in self.__dict__:
            super().__setattr__(name, value)
        else:
            _C.config_get(name)  # raises AttributeError listing the valid knobs

    def __delattr__(self, name):
        if is_knob(name):
            raise AttributeError("shapejit.config.%s is a knob and cannot be deleted" % name)
        super().__delattr__(name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(_KNOBS) | set(_ALIASES))


def _read_env():
    """Sets the knobs of _ENV from the environment. A bad value must not make the import
    fail: it is reported by a warning and the knob keeps its default."""
    for var, knob in _ENV.items():
        val = os.environ.get(var)
        if val is None:
            continue
        if _KNOBS[knob][1] == "bool":
            val = val.strip().lower() not in _FALSE
        try:
            set_value(knob, val)
        except ValueError as e:
            reason = ('bad entry "%s": %s' % (e.entry, e.reason)
                      if isinstance(e, dynsources.SourceListError) else str(e))
            warnings.warn("shapejit: environment variable %s ignored (%s left at %r): %s"
                          % (var, knob, _C.config_get(knob), reason),
                          UserWarning, stacklevel=2)


_read_env()
sys.modules[__name__].__class__ = _ConfigModule
