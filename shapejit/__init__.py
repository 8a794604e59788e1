"""shapejit: a JIT compiler for Python array code (torch and numpy) on CPython 3.11.

    import shapejit

    @shapejit.compile
    def f(x):
        return (x * 2).sin()

See README.md. The compiler itself is the C extension shapejit._C; this package is the
public API over it.
"""
import sys as _sys

if _sys.version_info[:2] != (3, 11):
    raise ImportError("shapejit needs CPython 3.11 (it evaluates 3.11 bytecode); this is "
                      "Python %d.%d" % _sys.version_info[:2])

from . import _C  # noqa: E402


def _policy(module, name):
    """shapejit.<module>.<name>, imported at its first call and looked up at every call (so
    a module that is expensive to import, shapejit.fx importing torch, costs nothing until
    used, and a patched function is the one called)."""
    def call(*args):
        import importlib
        return getattr(importlib.import_module("shapejit." + module), name)(*args)
    call.__name__ = call.__qualname__ = "%s.%s" % (module, name)
    return call


# The C core's Python policies (core/policies.def): registered once, here.
for _name, _module, _fn in (
        ("dynsources_lookup", "dynsources", "lookup"),
        ("pgo_load", "pgo", "load_frame_state"),
        ("pgo_save", "pgo", "save_frame_state"),
        ("to_fx", "fx", "to_fx"),
        ("collective_exchange", "collectives", "exchange"),
        ("collective_exchange_traced", "collectives", "exchange_traced"),
        ("kernel_remote_fetch", "kernel_remote", "fetch"),
        ("kernel_remote_push", "kernel_remote", "push"),
        ("polyfills", "_polyfills", "table")):
    _C._set_policy(_name, _policy(_module, _fn))
del _name, _module, _fn

from . import config  # noqa: E402  (a module of knobs: shapejit.config.cache_size_limit)
from . import trace as _trace  # noqa: E402,F401  (TORCH_TRACE: opens the structured trace)
from ._C import BackendCompilerFailed  # noqa: E402  (a user backend raised)
from .api import compile, disable, reset, stats  # noqa: E402
from .backends import list_backends, register_backend  # noqa: E402
from .compat import install_torch_compat, uninstall_torch_compat  # noqa: E402
from .explain import ExplainOutput, explain  # noqa: E402
from .logs import set_logs  # noqa: E402
from .checks import check, constrain_range  # noqa: E402
from .marks import mark_dynamic, mark_static, mark_unbacked, maybe_mark_dynamic  # noqa: E402
from .stance import set_stance  # noqa: E402

__version__ = "0.0.1"

__all__ = [
    "compile", "reset", "stats", "explain", "disable", "config", "set_logs", "set_stance",
    "install_torch_compat", "uninstall_torch_compat",
    "mark_dynamic", "maybe_mark_dynamic", "mark_static", "mark_unbacked", "check", "constrain_range",
    "ExplainOutput", "list_backends", "register_backend", "BackendCompilerFailed",
]
