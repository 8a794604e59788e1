"""OptimizedModule: what shapejit.compile returns for an nn.Module instance.

Imported only when a module is compiled (it imports torch)."""
import torch

from . import _C

# Methods answered by the original module, so the wrapper looks like it from outside:
# parameter names and state_dict keys carry no "_orig_mod." prefix.
_DELEGATED = ("state_dict", "load_state_dict", "named_parameters", "named_buffers")


class OptimizedModule(torch.nn.Module):
    """Wraps a module; calling it runs the original's ``__call__`` (hooks included)
    under shapejit. ``_orig_mod`` is the original; attribute reads the wrapper does not
    have go to it."""

    def __init__(self, mod, options):
        super().__init__()
        self._orig_mod = mod  # a registered submodule: .train()/.to() reach it
        object.__setattr__(self, "_sj_compiled", _C.CompiledFunction(mod.__call__, options))
        # A parent's load_state_dict walks _modules and so expects "<name>._orig_mod.w"
        # keys, while state_dict (delegated) writes "<name>.w": add the step back.
        self._register_load_state_dict_pre_hook(_add_orig_prefix)

    def forward(self, *args, **kwargs):
        return self._sj_compiled(*args, **kwargs)

    @property
    def options(self):
        return self._sj_compiled._options

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)  # the wrapper's own parameters/modules
        except AttributeError:
            if name == "_orig_mod":
                raise
        return getattr(self._orig_mod, name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(dir(self._orig_mod)))


def _add_orig_prefix(state_dict, prefix, *unused):
    inner = prefix + "_orig_mod."
    for key in [k for k in state_dict if k.startswith(prefix) and not k.startswith(inner)]:
        state_dict[inner + key[len(prefix):]] = state_dict.pop(key)


def _delegate(name):
    def method(self, *args, **kwargs):
        return getattr(self._orig_mod, name)(*args, **kwargs)

    method.__name__ = name
    method.__doc__ = "The original module's %s." % name
    return method


for _name in _DELEGATED:
    setattr(OptimizedModule, _name, _delegate(_name))
del _name
