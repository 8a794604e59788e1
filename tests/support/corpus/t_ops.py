"""torch: common operators (pointwise, reductions, matmul/linear, softmax, layer_norm,
rms_norm, views, cat/stack, where/masked_fill, type conversions, factories, activations)."""
import torch
import torch.nn.functional as F

from ._base import T, TP, TI, TB, torch_case


@torch_case(lambda: (T(3, 4), TP(3, 4)))
def t_pointwise_math(x, p):
    return (torch.exp(x), torch.log(p), torch.sqrt(p), torch.rsqrt(p), torch.sin(x),
            torch.cos(x), torch.tanh(x), torch.sigmoid(x), torch.abs(x), x.pow(3),
            torch.erf(x), torch.log1p(p), torch.reciprocal(p), x.sign(), x.floor(),
            x.ceil(), x.round(), torch.maximum(x, p), torch.minimum(x, p))


@torch_case(lambda: (T(3, 4, 5),))
def t_reductions_dim_keepdim(x):
    return (x.sum(), x.sum(dim=1), x.sum(dim=(0, 2), keepdim=True), x.mean(-1),
            x.mean(dim=0, keepdim=True), x.amax(dim=1), x.amin(-1, keepdim=True),
            torch.prod(x, 2), x.var(dim=1, unbiased=False), x.std(-1), x.norm(dim=-1),
            torch.logsumexp(x, dim=1))


@torch_case(lambda: (T(3, 4, 5),))
def t_argmax_max_with_indices(x):
    values, idx = x.max(dim=1)
    mn = torch.min(x, dim=-1, keepdim=True)
    return values, idx, mn.values, mn.indices, x.argmax(), x.argmin(dim=2)


@torch_case(lambda: (T(2, 3, 4), T(2, 4, 5), T(4, 6)))
def t_matmul_family(a, b, w):
    return a @ b, torch.matmul(a, w), torch.bmm(a, b), torch.mm(a[0], w), a[0, 0] @ w


@torch_case(lambda: (T(5, 8), T(4, 8), T(4)))
def t_linear(x, w, b):
    return F.linear(x, w, b), F.linear(x, w), torch.addmm(b, x, w.t())


@torch_case(lambda: (T(2, 3, 8),))
def t_softmax_variants(x):
    return F.softmax(x, dim=-1), x.softmax(1), torch.softmax(x, dim=0), F.log_softmax(x, -1)


@torch_case(lambda: (T(2, 3, 8), T(8), T(8)), atol=1e-5)
def t_layer_norm(x, w, b):
    return F.layer_norm(x, (8,), w, b, eps=1e-5), F.layer_norm(x, x.shape[-1:])


@torch_case(lambda: (T(2, 3, 8), T(8), T(3, 8)), atol=1e-5)
def t_rms_norm(x, w, w2):
    """F.rms_norm and torch.rms_norm: eps given or None (finfo's), a weight or none, one or
    two trailing dims, the sizes read from the input."""
    return (F.rms_norm(x, (8,), w, eps=1e-6), torch.rms_norm(x, x.shape[-1:]),
            F.rms_norm(x, [3, 8], weight=w2), torch.rms_norm(x.transpose(0, 1), (8,), w, 1e-5))


@torch_case(lambda: (T(4, 3, 5), T(3, 5)))
def t_broadcast_to_clamp_min_max(x, y):
    """torch.broadcast_to and Tensor.broadcast_to (a tuple, varargs, size=), clamp_min and
    clamp_max as functions and methods, and their in-place forms."""
    a = torch.broadcast_to(y, (4, 3, 5)) + x.broadcast_to(2, 4, 3, 5).sum(0)
    b = torch.clamp_min(a, 0.1) + x.clamp_max(0.2) + torch.clamp_max(x, -0.1) + x.clamp_min(-0.3)
    d = x.clone()
    d.clamp_min_(0.0)
    d.clamp_max_(0.5)
    return b * y.broadcast_to((4, 3, 5)) + d + torch.broadcast_to(y, size=(4, 3, 5))


@torch_case(lambda: (T(2, 3, 4),))
def t_views(x):
    return (x.view(6, 4), x.view(-1), x.reshape(2, 12), x.permute(2, 0, 1),
            x.transpose(0, 1), x.unsqueeze(1), x.unsqueeze(-1).squeeze(-1), x.flatten(),
            x.flatten(1), torch.flatten(x, 0, 1), x[:, :1].squeeze(1), x.contiguous())


@torch_case(lambda: (T(3, 1), T(1, 4)))
def t_expand_broadcast(a, b):
    return a.expand(3, 4), b.expand(3, -1), a + b, a.expand_as(a + b) * b, a.repeat(2, 3)


@torch_case(lambda: (T(2, 3), T(2, 3), T(4, 3)))
def t_cat_stack(a, b, c):
    return (torch.cat([a, b]), torch.cat((a, b), dim=1), torch.cat([a, c], 0),
            torch.stack([a, b]), torch.stack((a, b), dim=-1), torch.chunk(c, 2)[1],
            torch.split(c, [1, 3])[1], c.unbind(0)[2])


@torch_case(lambda: (T(3, 4), T(3, 4), TB(3, 4)))
def t_where_masked_fill(x, y, m):
    return (torch.where(m, x, y), torch.where(x > 0, x, 0.0), x.masked_fill(m, -1e9),
            x.masked_fill(~m, 0.0), torch.clamp(x, -0.5, 0.5), x.clamp(min=0))


@torch_case(lambda: (T(3, 4), TI(3, 4)))
def t_type_conversions(x, i):
    return (x.float(), x.double(), x.half().float(), x.to(torch.float64), x.to(dtype=torch.int32),
            i.float() / 3, i.to(x.dtype) + x, x.long(), x.int(), (x > 0).float(), x.bool(),
            x.type(torch.float64), i.type_as(x))


@torch_case(lambda: (T(3, 4),))
def t_factories(x):
    return (torch.zeros(3, 4), torch.ones(2, dtype=torch.float64), torch.arange(5),
            torch.arange(1, 7, 2, dtype=torch.float32), torch.full((2, 2), 7.0),
            torch.zeros_like(x), torch.ones_like(x, dtype=torch.int64), torch.full_like(x, 3),
            torch.empty(3, 4).fill_(1.0), x.new_zeros(2), x.new_ones((1, 3)), torch.eye(3),
            torch.linspace(0, 1, 5), torch.tensor([1.0, 2.0]) * 2)


@torch_case(lambda: (T(3, 4),))
def t_factories_mixed_with_input(x):
    pos = torch.arange(x.shape[1], dtype=x.dtype)
    mask = torch.ones(x.shape[0], x.shape[1], dtype=torch.bool).tril()
    return (x + pos).masked_fill(~mask, 0.0)


@torch_case(lambda: (T(3, 8),))
def t_activations(x):
    return (F.relu(x), F.gelu(x), F.gelu(x, approximate="tanh"), F.silu(x), F.elu(x),
            F.leaky_relu(x, 0.1), torch.nn.functional.softplus(x), F.hardtanh(x),
            F.dropout(x, p=0.5, training=False), F.mish(x), torch.relu(x), x.relu())


@torch_case(lambda: (T(4, 6),))
def t_dropout_eval_module(x):
    drop = torch.nn.Dropout(0.3)
    drop.eval()
    return drop(x) * 2


@torch_case(lambda: (T(2, 4, 6), T(6, 6), T(6, 6), T(6, 6)), atol=1e-5)
def t_attention_kernel(x, wq, wk, wv):
    q, k, v = x @ wq, x @ wk, x @ wv
    scores = q @ k.transpose(-2, -1) / (q.shape[-1] ** 0.5)
    causal = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).triu(1)
    scores = scores.masked_fill(causal, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


@torch_case(lambda: (T(2, 2, 4, 8), T(2, 2, 4, 8), T(2, 2, 4, 8)), atol=1e-5)
def t_sdpa(q, k, v):
    return (F.scaled_dot_product_attention(q, k, v),
            F.scaled_dot_product_attention(q, k, v, is_causal=True))


@torch_case(lambda: (TI(2, 5, high=20), T(20, 8)))
def t_embedding(ids, table):
    return F.embedding(ids, table), table[ids]


@torch_case(lambda: (T(2, 3, 8, 8), T(4, 3, 3, 3), T(4)), atol=1e-5)
def t_conv_pool(x, w, b):
    y = F.conv2d(x, w, b, stride=1, padding=1)
    return (y, F.max_pool2d(y, 2), F.avg_pool2d(y, kernel_size=2),
            F.adaptive_avg_pool2d(y, (1, 1)).flatten(1))


@torch_case(lambda: (T(4, 5),))
def t_cumulative_and_sort(x):
    return (torch.cumsum(x, dim=1), x.cumprod(0), torch.sort(x, dim=1).values,
            torch.topk(x, 2, dim=-1).indices, torch.tril(x), torch.triu(x, 1))


@torch_case(lambda: (T(3, 4), T(4, 2)))
def t_einsum_torch(a, b):
    return torch.einsum("ij,jk->ik", a, b), torch.einsum("ij->j", a), torch.einsum("ij,ij->i", a, a)
