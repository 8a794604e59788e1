"""torch: attribute writes on objects that exist outside the frame (user objects passed in
or global, nn.Modules, their configs): the result plan sets the final value of each
attribute after the graph runs, in the order of the first writes, so the caller sees what
eager leaves (a tensor input stored is that input itself; a computed one is the graph's
output; constants are the constants). Reads later in the frame see the new value; the
writes before a graph break are made before the interpreter runs the break."""
import warnings

import torch
import torch._dynamo
import torch.nn as nn

from ._base import T, torch_case, with_breaks


class Holder:
    """A plain user object."""

    def __init__(self, **attrs):
        self.__dict__.update(attrs)


class Stats:
    def __init__(self):
        self.calls = 0
        self.total = torch.zeros(())

    def record(self, x):
        self.calls += 1
        self.total = self.total + x.sum()
        return x - self.total


class Scaled:
    """A property whose setter derives the stored value."""

    def __init__(self):
        self._scale = 1.0

    @property
    def scale(self):
        return self._scale

    @scale.setter
    def scale(self, value):
        self._scale = float(value) * 2


class CountingBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        self.last_out = self.lin(x)
        return self.last_out.relu()


class Config:
    def __init__(self):
        self.output_attentions = False
        self.use_cache = True


class ConfiguredModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.config = Config()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        self.config.use_cache = False
        self.config.saw_batch = x.shape[0]
        return self.proj(x) if self.config.use_cache is False else x


# ---- plain user objects ---------------------------------------------------------------
@torch_case(lambda: (Holder(counter=0), T(3)), mutates=True)
def t_attrw_counter(o, x):
    o.counter += 1
    return x * o.counter


@torch_case(lambda: (Holder(), T(3, 4)), mutates=True)
def t_attrw_cache_computed(o, x):
    o.cache = x * 2
    return o.cache + 1


@torch_case(lambda: (Holder(), T(3)), mutates=True)
def t_attrw_store_input_itself(o, x):
    o.last_input = x   # the caller's tensor itself, not a copy
    return x.sin()


@torch_case(lambda: (Holder(state="idle"), T(3)), mutates=True)
def t_attrw_constants(o, x):
    o.state = "done"
    o.ready = True
    o.missing = None
    o.sizes = (3, 4)
    return x + 1


@torch_case(lambda: (Holder(b=0), T(3)), mutates=True)
def t_attrw_program_order(o, x):
    o.z = 1
    o.b = x.sum()
    o.a = x.mean()
    o.z = 2   # written twice: the last value, at the place of the first write
    return x


@torch_case(lambda: (Holder(scale=2.0), T(3)), mutates=True)
def t_attrw_read_back(o, x):
    o.scale = o.scale * 1.5
    o.shifted = x + o.scale
    return o.shifted * o.scale


@torch_case(lambda: (Holder(), T(3)), mutates=True)
def t_attrw_list_value(o, x):
    o.items = [x, x + 1]
    o.items.append(x * 3)
    o.stats = {"mean": x.mean(), "max": x.max()}
    return o.items[0] + o.stats["max"]


@torch_case(lambda: (Holder(child=Holder(value=0)), T(3)), mutates=True)
def t_attrw_nested_object(o, x):
    o.child.value = x + 1
    o.child.version = 2
    return o.child.value * 2


@torch_case(lambda: (Holder(), T(3)), mutates=True)
def t_attrw_setattr_builtin(o, x):
    for name in ("lo", "hi"):
        setattr(o, name, x.min() if name == "lo" else x.max())
    return o.hi - o.lo


@torch_case(lambda: (Holder(), T(3)), mutates=True)
def t_attrw_object_setattr(o, x):
    object.__setattr__(o, "frozen_sum", x.sum())
    return x / o.frozen_sum


@torch_case(lambda: (Stats(), T(4)), mutates=True)
def t_attrw_method_accumulates(s, x):
    y = s.record(x)
    return s.record(y), s.calls


@torch_case(lambda: (Scaled(), T(3)), mutates=True)
def t_attrw_property_setter(s, x):
    s.scale = 3
    return x * s.scale


@torch_case(lambda: (Holder(n=1), Holder(n=1), T(3)), mutates=True)
def t_attrw_two_objects(a, b, x):
    a.n = 5
    return x + b.n   # another object: its own value


_REGISTRY = Holder(last=None, count=0)


@torch_case(lambda: (T(3),))
def t_attrw_global_object(x):
    _REGISTRY.last = x.relu()
    _REGISTRY.count = 1
    return _REGISTRY.last + _REGISTRY.count


# ---- nn.Modules ------------------------------------------------------------------------
@torch_case(lambda: (CountingBlock(), T(2, 4)), mutates=True, new_module=True)
def t_attrw_module_counter_and_output(m, x):
    return m(x) + m.calls


@torch_case(lambda: (ConfiguredModel(), T(2, 4)), mutates=True, new_module=True)
def t_attrw_module_config_flag(m, x):
    return m(x)


with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)   # deprecated for the parametrization
    _WEIGHT_NORMED = nn.utils.weight_norm(nn.Linear(4, 5))


@torch_case(lambda: (T(3, 4),))
def t_attrw_weight_norm(x):
    # the older weight_norm: a forward pre-hook sets module.weight = g * v / |v| on each call
    return _WEIGHT_NORMED(x)


# ---- with graph breaks -----------------------------------------------------------------
@with_breaks("torch", lambda: (Holder(), T(3)), graphs=2, breaks=1, mutates=True)
def t_attrw_before_break(o, x):
    o.before = x + 1
    torch._dynamo.graph_break()
    o.after = o.before * 2
    return o.after


@torch.compiler.disable
def _peek(o):
    return o.before.clone()


@with_breaks("torch", lambda: (Holder(), T(3)), graphs=2, breaks=1, mutates=True)
def t_attrw_break_reads_written(o, x):
    o.before = x.cos()
    seen = _peek(o)   # runs in the interpreter: it must see the write
    return seen + 1


# ---- transformers' ModelOutput from outside (its __setattr__/__setitem__ set both views) ----
def _model_output():
    from transformers.modeling_outputs import BaseModelOutput   # imported when the case runs
    return BaseModelOutput(last_hidden_state=T(2, 3))


@torch_case(lambda: (_model_output(), T(2, 3)), mutates=True)
def t_attrw_model_output_item_write(out, x):
    out["hidden_states"] = (x, x + out.last_hidden_state)
    return out.hidden_states[1] * 2


@torch_case(lambda: (_model_output(), T(2, 3)), mutates=True)
def t_attrw_model_output_attribute_write(out, x):
    out.attentions = (x.softmax(-1),)
    out.last_hidden_state = out.last_hidden_state + x
    return out.last_hidden_state.sum()
