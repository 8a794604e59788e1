"""torch: if/else on constants and shapes, for loops, while with a constant-foldable
condition, asserts and f-strings on constants, grad-mode context managers."""
import torch

from ._base import T, torch_case

USE_BIAS = True
MODE = "gelu"


@torch_case(lambda: (T(3, 4),))
def t_if_constant_global(x):
    y = x * 2
    if USE_BIAS:
        y = y + 1
    else:
        y = y - 1
    if MODE == "relu":
        return torch.relu(y)
    elif MODE == "gelu":
        return torch.nn.functional.gelu(y)
    return y


@torch_case(lambda: (T(3, 4),))
def t_if_on_shape(x):
    if x.shape[0] > 2:
        x = x[:2]
    if x.dim() == 2 and x.size(-1) % 2 == 0:
        x = x.reshape(-1, 2)
    return x * 3


@torch_case(lambda: (T(3, 4), None))
def t_if_is_none(x, bias):
    if bias is None:
        return x + 1
    return x + bias


@torch_case(lambda: (T(3, 4), T(4)))
def t_if_is_not_none(x, bias):
    if bias is not None:
        return x + bias
    return x


@torch_case(lambda: (T(3, 4),))
def t_if_dtype(x):
    if x.dtype == torch.float32:
        x = x.double()
    if x.is_floating_point():
        x = x * 0.5
    return x


@torch_case(lambda: (T(2, 3),))
def t_ternary_and_boolops(x):
    k = 2 if x.shape[0] == 2 else 3
    flag = x.shape[0] > 1 and x.shape[1] > 1 or x.shape[0] == 0
    return x * k if flag else x


@torch_case(lambda: (T(4),))
def t_for_range(x):
    acc = torch.zeros_like(x)
    for i in range(1, 4):
        acc = acc + x * i
    return acc


@torch_case(lambda: (T(4), T(4), T(4)))
def t_for_list(x, y, z):
    out = []
    for t in [x, y, z]:
        out.append(t.sin())
    return out


@torch_case(lambda: (T(4), T(4)))
def t_for_tuple_nested(x, y):
    acc = x
    for a, b in ((x, y), (y, x)):
        acc = acc + a * b
    return acc


@torch_case(lambda: (T(3),))
def t_for_dict_items(x):
    weights = {"a": 1.0, "b": 2.0, "c": -1.0}
    out = {}
    for k, w in weights.items():
        out[k] = x * w
    for k in weights:
        out[k] = out[k] + 1
    for v in weights.values():
        x = x + v
    return out, x


@torch_case(lambda: (T(4), T(4), T(4)))
def t_for_enumerate_zip(x, y, z):
    acc = torch.zeros(4)
    for i, (a, b) in enumerate(zip([x, y], [y, z])):
        acc = acc + (a - b) * (i + 1)
    for i, t in enumerate([x, y, z], start=2):
        acc = acc + t * i
    return acc


@torch_case(lambda: (T(4),))
def t_for_break_continue(x):
    out = x
    for i in range(10):
        if i % 2 == 0:
            continue
        if i > 6:
            break
        out = out + i
    return out


@torch_case(lambda: (T(4),))
def t_while_constant(x):
    i = 0
    while i < 3:
        x = x * 2 + i
        i += 1
    return x


@torch_case(lambda: (T(8, 2),))
def t_while_shape(x):
    while x.shape[0] > 1:
        x = x[::2] + x[1::2]
    return x


@torch_case(lambda: (T(3, 4),))
def t_assert_constants(x):
    assert x.dim() == 2, "need a matrix"
    assert x.shape[1] == 4
    assert isinstance(x, torch.Tensor)
    return x + 1


@torch_case(lambda: (T(3, 4),))
def t_fstring_constant(x):
    key = f"layer_{x.shape[0]}_{'x'}"
    table = {"layer_3_x": 2.0, "layer_4_x": 3.0}
    name = f"{3.14159:.2f}|{key!r}"
    return x * table[key] + len(name)


@torch_case(lambda: (T(3, 4, requires_grad=True), T(4, 4)))
def t_no_grad(x, w):
    with torch.no_grad():
        y = x @ w
    return y * 2


@torch_case(lambda: (T(3, 4, requires_grad=True), T(4, 4)))
def t_no_grad_then_grad(x, w):
    with torch.no_grad():
        a = x * 2
        with torch.enable_grad():
            b = x * 3
    return a, b, a.requires_grad, b.requires_grad


@torch_case(lambda: (T(3, 4),))
def t_no_grad_inside_is_grad_enabled(x):
    with torch.no_grad():
        if torch.is_grad_enabled():
            return x - 1
        y = x + 1
    return y
