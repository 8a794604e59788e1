"""torch: calls seen in transformers models that had no row in vocab/callables.def (the
last section there; tools/torch_call_coverage.py traces the models), each written the
way the model writes it."""
import torch
import torch.nn.functional as F

from ._base import T, TI, torch_case


@torch_case(lambda: (T(6, 8), TI(4, high=6), TI(3, high=8)))
def t_mc_index_select(x, rows, cols):
    # speech_to_text's sinusoidal positions, xlnet's relative shift
    picked = x.index_select(0, rows.view(-1))
    return picked, torch.index_select(x, 1, cols) * 2.0, torch.index_select(x, -1, cols[0])


@torch_case(lambda: (T(6, 8), TI(5, high=6), T(5, 8)))
def t_mc_index_add_inplace(hidden, token_idx, expert_out):
    # the experts' loop of the mixture-of-experts layers: outputs added back per token
    final = torch.zeros_like(hidden)
    final.index_add_(0, token_idx, expert_out.to(hidden.dtype))
    return final + hidden


@torch_case(lambda: (T(4, 6), TI(3, high=6), T(4, 3)))
def t_mc_index_add_functional(x, idx, src):
    return torch.index_add(x, 1, idx, src, alpha=0.5), x.index_add(1, idx, src)


@torch_case(lambda: (T(2, 5, 4), T(3, 4)))
def t_mc_repeat_interleave(sin, x):
    # GPT-J's rotary embedding duplicates each frequency for the pair it rotates
    s = torch.repeat_interleave(sin[:, :, None, :], 2, 3)
    return s, x.repeat_interleave(2, dim=0), torch.repeat_interleave(x, 3), x.repeat_interleave(2, -1)


@torch_case(lambda: (T(2, 5, 4),))
def t_mc_one_hot_router(logits):
    # switch transformers' top-1 router: the chosen expert as a one-hot mask
    expert_index = torch.argmax(logits, dim=-1)
    mask = F.one_hot(expert_index, num_classes=4)
    tokens_per_expert = mask.sum(dim=1)
    return mask, tokens_per_expert, F.one_hot(expert_index[0], 6).float() * 0.5


@torch_case(lambda: (T(2, 4, 10), T(8, 4, 3)))
def t_mc_glu_conv(x, w):
    # speech_to_text's subsampler: a conv doubling the channels, then a GLU over them
    h = F.conv1d(x, w, padding=1)
    return F.glu(h, dim=1), F.glu(h.transpose(1, 2))


@torch_case(lambda: (T(2, 3, 4, 4), T(2, 16, 3)))
def t_mc_reshape_as(x, y):
    # LeViT's residual MLP: flattened features brought back to the layout of another tensor
    flat = x.flatten(2).transpose(1, 2)
    return flat.reshape_as(y) + y, y.reshape_as(flat)


@torch_case(lambda: (T(6, 4),))
def t_mc_histc_tokens_per_expert(router_logits):
    # the grouped experts path counts the tokens each expert received
    _, selected = torch.topk(router_logits, 2, dim=-1)
    counts = torch.histc(selected.flatten().float(), bins=4, min=0, max=3)
    return counts, router_logits.histc(bins=5)


@torch_case(lambda: (T(2, 1, 8), T(2, 5, 8)))
def t_mc_numpy_keywords(cls, x):
    # funnel's torch.cat(..., axis=1): torch's C functions take numpy's axis and keepdims
    h = torch.cat([cls, x], axis=1)
    return h, h.sum(axis=-1, keepdims=True), torch.mean(x, axis=0), x.amax(axis=1, keepdims=True)


@torch_case(lambda: (T(2, 7, 8), T(8, 8)))
def t_mc_unfold_span_conv(hidden, w):
    # ConvBERT's span-based dynamic convolution gathers each position's window with unfold
    b, n, c = hidden.shape
    layer = (hidden @ w).transpose(1, 2).contiguous().unsqueeze(-1)
    windows = F.unfold(layer, kernel_size=[3, 1], dilation=1, padding=[1, 0], stride=1)
    return windows.transpose(1, 2).reshape(b, -1, c, 3), F.unfold(hidden.unsqueeze(1), (2, 2), stride=2)


@torch_case(lambda: (T(2, 10, 4),))
def t_mc_meshgrid_relative_positions(attn):
    # BEiT's relative position index: pairwise offsets of a window's coordinates
    coords = torch.stack(torch.meshgrid(torch.arange(3), torch.arange(3), indexing="ij"))
    flat = torch.flatten(coords, start_dim=1)
    rel = (flat[:, :, None] - flat[:, None, :]).permute(1, 2, 0).contiguous()
    xs, ys = torch.meshgrid([torch.arange(4.0), torch.arange(2.0)], indexing="xy")
    return rel.sum(-1), xs * ys, attn * attn.is_cpu
