"""torch: in-place ops on graph intermediates and on inputs (the caller's tensors must
be mutated exactly as eager mutates them)."""
import torch
import torch.nn.functional as F

from ._base import T, TP, torch_case, with_breaks


@torch_case(lambda: (T(3, 4), T(3, 4)))
def t_inplace_intermediate(x, y):
    z = x * 2
    z += y
    z.mul_(0.5)
    z.add_(1.0, alpha=2.0)
    F.relu(z, inplace=True)
    z.clamp_(max=2.0)
    return z


@torch_case(lambda: (T(3, 4), T(3, 4)), mutates=True)
def t_iadd_input(x, y):
    x += y
    return x


@torch_case(lambda: (T(3, 4), T(3, 4)), mutates=True)
def t_add_underscore_input(x, y):
    x.add_(y)
    x.mul_(2)
    return x * 3


@torch_case(lambda: (T(3, 4),), mutates=True)
def t_relu_inplace_input(x):
    y = F.relu(x, inplace=True)
    return y, y is x


@torch_case(lambda: (T(3, 4),), mutates=True)
def t_module_relu_inplace_input(x):
    act = torch.nn.ReLU(inplace=True)
    return act(x) + 1


@torch_case(lambda: (T(3, 4), T(4)), mutates=True)
def t_inplace_input_returns_none(x, b):
    x.sub_(b)
    x.div_(2.0)


@torch_case(lambda: (T(4, 4),), mutates=True)
def t_inplace_through_view(x):
    row = x[1]
    row.zero_()
    x[:, 0].fill_(3.0)
    x.diagonal().add_(1.0)
    return x.sum(0)


@torch_case(lambda: (T(3, 4), T(3, 4)), mutates=True)
def t_inplace_second_input_only(x, y):
    y.copy_(x * 2)
    y.tanh_()
    return x + y


@torch_case(lambda: (T(3, 4),), mutates=True)
def t_inplace_read_after_write(x):
    before = x.sum()
    x.mul_(2)
    after = x.sum()
    return before, after, after - 2 * before


@torch_case(lambda: (T(3, 4),))
def t_inplace_on_clone_keeps_input(x):
    y = x.clone()
    y.exp_()
    y[0] *= 2
    return y


@torch_case(lambda: (T(2, 3), T(2, 3)), mutates=True)
def t_augmented_all(x, y):
    x -= y
    x *= 2
    x /= 3
    y **= 2
    return x, y


@torch_case(lambda: (T(5), T(5)), mutates=True)
def t_rebinding_vs_inplace(x, y):
    x = x + 1       # rebinding: the caller's x is not touched
    y += 1          # in place on the caller's y
    x += 1          # in place on the intermediate
    return x, y


@torch_case(lambda: (T(3, 4), TP(3, 4)), mutates=True)
def t_inplace_out_of_place_mix(x, p):
    p.sqrt_()
    return torch.masked_fill(x, x > 0, 0.0) * p


@torch_case(lambda: (T(3, 4),), mutates=True)
def t_to_own_dtype_is_the_input(x):
    # a cast to the dtype the tensor has returns the tensor itself: writes reach x
    y = x.to(torch.float32)
    y.add_(1.0)
    z = x.float()
    z.mul_(2.0)
    return x * 3, y is x, z is x, x.type(torch.float32) is x, x.type_as(y) is x


@torch_case(lambda: (T(3, 4), T(3, 4).double()))
def t_to_own_dtype_copy_is_new(x, d):
    # copy=True, another dtype, or a memory format give a new tensor
    a = x.to(torch.float32, copy=True)
    a.add_(1.0)
    b = x.to(d)
    c = d.to(x)
    e = x.to(torch.float32, False, True)
    e.mul_(0.0)
    return x, a, b, c, a is x, b is x, e is x, x.to(torch.float32, memory_format=torch.preserve_format) is x


@with_breaks("torch", lambda: (T(3, 4),), graphs=2, breaks=1)
def t_to_own_dtype_memory_format(x):
    # eager returns x itself when it already has the layout asked for, a copy otherwise;
    # the capture does not know the layout, so the call runs in the interpreter
    y = (x * 2).to(torch.float32, memory_format=torch.contiguous_format)
    return y + 1, y is x
