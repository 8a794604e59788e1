"""torch: library queries answered by constants (dtype facts, autocast and engine state,
build facts) and torch's small pure helpers (nn.init fans, jit._unwrap_optional),
functools.lru_cache helpers (functions and methods), list repetition and slice writes,
the class of a tensor, and tensors as dict keys."""
import functools
import math

import torch
import torch.nn as nn

from ._base import T, TI, torch_case

# a module-level parameter used as a dict key (keyed by identity, as Python does)
SHARED_PARAM = nn.Parameter(torch.ones(4, 4))


# ---- library queries folded to constants ----------------------------------------------
@torch_case(lambda: (T(3, 4), T(3, 4)))
def t_misc_onnx_export_branch(x, y):
    if torch.onnx.is_in_onnx_export():
        return x - 1
    return y + 1


@torch_case(lambda: (T(3, 4),))
def t_misc_autocast_dtype_query(x):
    # the pattern of mixed-precision helpers: cast only when autocast is on
    if torch.is_autocast_enabled("cpu"):
        x = x.to(torch.get_autocast_dtype("cpu"))
    return x * 2, torch.get_autocast_dtype("cpu")


@torch_case(lambda: (T(3, 4),))
def t_misc_any_autocast_enabled(x):
    upcast = not torch._C._is_any_autocast_enabled()
    return x.float().softmax(-1) if upcast else x.softmax(-1)


@torch_case(lambda: (T(5),))
def t_misc_promote_types_branch(x):
    if x.dtype == torch.promote_types(torch.int32, torch.float32):
        return x + 1
    return x - 1


@torch_case(lambda: (TI(6), T(6)))
def t_misc_result_type_cast(idx, w):
    # the dtype an op would give, computed from the tensors' dtypes only
    dt = torch.result_type(idx, 0.5)
    return idx.to(dt) * 0.5 + w.to(torch.result_type(w, idx)), dt


@torch_case(lambda: (T(4),))
def t_misc_checkpoint_valid(x):
    if torch.autograd._is_checkpoint_valid():
        return x + 1
    return x - 1


@torch_case(lambda: (T(4),))
def t_misc_privateuse1_name(x):
    if torch._C._get_privateuse1_backend_name() == "privateuseone":
        return x + 1
    return x - 1


@torch_case(lambda: (T(2, 3),))
def t_misc_distributed_world(x):
    # the usual "world size, or 1 when not distributed" guard
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        world = torch.distributed.get_world_size()
    else:
        world = 1
    return x / world


@torch_case(lambda: (T(4),))
def t_misc_functorch_transforms_active(x):
    if torch._C._are_functorch_transforms_active():
        return x + 1
    return x - 1


@torch_case(lambda: (T(3, 4).abs(),))
def t_misc_finfo_clamp(x):
    info = torch.finfo(x.dtype)
    return x.clamp(min=info.eps).log(), x.clamp(max=info.max / 2) * info.tiny, info.bits


@torch_case(lambda: (T(4),))
def t_misc_iinfo_limits(x):
    if torch.iinfo(torch.int32).bits == 32:
        return x.clamp(torch.iinfo(torch.int8).min, torch.iinfo(torch.int8).max) * torch.finfo(x.dtype).min
    return x


@torch_case(lambda: (T(8, 3), T(5, 3)))
def t_misc_calculate_fan(x, w):
    # kaiming-style scaling from the weight's fan, computed by torch's own helper
    fan_in = torch.nn.init._calculate_correct_fan(w, "fan_in")
    gain = torch.nn.init.calculate_gain("relu")
    return x @ w.t() * (gain / math.sqrt(fan_in))


@torch_case(lambda: (T(2, 2),))
def t_misc_jit_unwrap_optional(x):
    # TorchScript-compatible code asserting an Optional is set
    if torch.jit._unwrap_optional(x) is None:
        return torch.ones(2, 2)
    return x.sin()


# ---- functools.lru_cache / functools.cache ----------------------------------------------
@functools.lru_cache
def _sin_scaled(x, y, _=None):
    return torch.sin(x * y)


@functools.cache
def _attention_scale(head_dim):
    return 1.0 / math.sqrt(head_dim)


@functools.lru_cache(maxsize=8)
def _causal_mask(n):
    return torch.ones(n, n).tril().bool()


@torch_case(lambda: (T(4), T(4)))
def t_misc_lru_cache_default_args(a, b):
    return _sin_scaled(a, 2, b)


@torch_case(lambda: (T(2, 4, 8), T(2, 4, 8)))
def t_misc_cache_attention_scale(q, k):
    scores = q @ k.transpose(-1, -2) * _attention_scale(q.shape[-1])
    return scores.masked_fill(~_causal_mask(q.shape[1]), float("-inf")).softmax(-1)


class _ScaledHead(nn.Module):
    @functools.lru_cache
    def scale(self, n):
        return n ** -0.5

    def forward(self, x):
        return x * self.scale(x.shape[-1])


_HEAD = _ScaledHead()


@torch_case(lambda: (T(2, 8),))
def t_misc_lru_cache_method(x):
    # an lru_cache'd method: the wrapper bound to the module through its __get__
    return _HEAD(x)


# ---- lists: repetition, slice writes ----------------------------------------------------
@torch_case(lambda: (T(3, 3),))
def t_misc_list_repeat_sum(x):
    return sum(4 * [x])


@torch_case(lambda: (T(2, 3),))
def t_misc_list_repeat_cat(x):
    pad = [None] * 2
    parts = [x] * 3 + [x * 2]
    return torch.cat(parts, dim=0), len(pad), (x.shape[0],) * 2


@torch_case(lambda: (T(4),))
def t_misc_list_inplace_repeat(x):
    hist = [x, x + 1]
    hist *= 2
    return torch.stack(hist)


@torch_case(lambda: (T(4),))
def t_misc_list_slice_assign_const(x):
    m = [1, 2, 3, 4]
    m[1:] = [6] * (len(m) - 1)
    return x + sum(m), m


@torch_case(lambda: (T(4),))
def t_misc_list_slice_del(x):
    layers = [x, x + 1, x + 2, x + 3, x + 4]
    del layers[1:3]
    del layers[-1:]
    return torch.stack(layers), len(layers)


@torch_case(lambda: (T(4), [1, 2, 3, 4]), mutates=True)
def t_misc_list_slice_assign_passed(x, lst):
    # the caller's list is written as eager writes it
    lst[1:3] = [x * 2, x * 3, x * 4]
    return x + 1


@torch_case(lambda: (T(3), [T(3), T(3), T(3), T(3), T(3)]), mutates=True)
def t_misc_list_slice_del_passed(x, cache):
    del cache[::2]
    cache[:0] = [x]
    return torch.stack(cache).sum(0)


@torch_case(lambda: (T(4),))
def t_misc_list_extended_slice(x):
    m = [x, x + 1, x + 2, x + 3]
    m[::2] = [x * 0, x * 10]
    m[3:1] = [x - 1]   # an empty slice: inserts
    return m


# ---- the class of a tensor --------------------------------------------------------------
@torch_case(lambda: (T(4),))
def t_misc_class_name_fstring(x):
    tmp = f"{x.__class__.__name__} foo"
    if tmp.startswith("Tensor"):
        return x + 1
    return x - 1


@torch_case(lambda: (T(4), nn.Parameter(T(4))))
def t_misc_class_is_tensor(x, p):
    if x.__class__ is torch.Tensor and type(p).__name__ == "Parameter":
        return x + p.__class__.__name__.count("a")
    return x


# ---- tensors as dict keys -----------------------------------------------------------------
@torch_case(lambda: (T(4, 4),))
def t_misc_param_dict_key(a):
    tmp = {"a": a, SHARED_PARAM: 3}
    return tmp["a"] + tmp[SHARED_PARAM]


@torch_case(lambda: (T(4), T(4)))
def t_misc_tensor_dict_keys(a, b):
    # per-tensor bookkeeping keyed by the tensor itself (optimizer state style)
    state = {a: {"step": 1}, b: {"step": 5}}
    state[a]["step"] += 1
    c = a * 2
    state[c] = {"step": 0}
    seen = (b in state) + (SHARED_PARAM in state)
    del state[b]
    return a * state[a]["step"] + c * state.get(c)["step"] + seen, len(state)
