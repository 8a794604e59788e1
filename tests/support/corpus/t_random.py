"""torch: random factories (torch.rand, randn, rand_like, randn_like) in compiled code: each
draws from the default generator at its place in the program, so values and the
generator's state after the call equal eager's."""
import torch

from ._base import T, torch_case


@torch_case(lambda: (T(5, 8),), rng=True)
def t_rand_noise_added(x):
    return x + 0.1 * torch.randn(5, 8)


@torch_case(lambda: (T(3, 4),), rng=True)
def t_rand_size_from_input(x):
    mask = torch.rand(x.shape) > 0.5
    return torch.where(mask, x, torch.zeros_like(x))


@torch_case(lambda: (T(2, 6),), rng=True)
def t_rand_like_forms(x):
    u = torch.rand_like(x)
    g = torch.randn_like(x, dtype=torch.float64)
    return u * x, g.sum(dim=1)


@torch_case(lambda: (T(4),), rng=True)
def t_rand_tuple_size_and_dtype(x):
    w = torch.rand((4, 2), dtype=torch.float64)
    return x.double() @ w


@torch_case(lambda: (T(3, 3),), rng=True)
def t_rand_draw_order_between_ops(x):
    a = torch.randn(3, 3)
    y = torch.relu(x @ a)
    b = torch.rand(3)
    return y * b, a


@torch_case(lambda: (T(2, 5),), rng=True)
def t_rand_gumbel_noise_sampling(logits):
    u = torch.rand_like(logits).clamp_(1e-6, 1.0 - 1e-6)
    gumbel = -torch.log(-torch.log(u))
    return torch.argmax(logits + gumbel, dim=-1)


@torch_case(lambda: (T(3),), rng=True)
def t_rand_new_with_size_of_random(x):
    y = torch.rand(5, 8)
    z = x.new(y.size()).fill_(2.0)   # a torch.Size is a size to Tensor.new, a tuple is data
    return z * y
