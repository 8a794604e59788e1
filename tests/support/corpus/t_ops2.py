"""torch: ops seen breaking in real models: transposed convolution, 1-d and adaptive max
pooling, F.interpolate in every mode and nn.Upsample, F.pad's non-constant modes,
addcmul/addcdiv, Tensor.new and new_tensor, Tensor.type, Tensor.is_contiguous,
Tensor.tolist, torch.tensor of a range, and the in-place random fills (checked here on
properties that hold whatever is drawn; tests/shapes/test_torch_ops_more.py checks the draws
against eager under the same seed)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from ._base import T, TP, TI, torch_case, with_breaks


def _build():
    with torch.random.fork_rng():
        torch.manual_seed(0)
        decoder = nn.Sequential(nn.ConvTranspose1d(8, 4, 4, stride=2, padding=1), nn.ReLU(),
                                nn.ConvTranspose1d(4, 2, 3, stride=1, padding=1)).eval()
        up2d = nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1).eval()
        amax = nn.AdaptiveMaxPool2d((3, None)).eval()
        apool = nn.AvgPool1d(3, stride=2, padding=1, count_include_pad=False).eval()
        ups = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True).eval()
        upn = nn.UpsamplingNearest2d(size=(6, 9)).eval()
        refl = nn.Sequential(nn.ReflectionPad2d((1, 1, 2, 0)), nn.Conv2d(3, 3, 3)).eval()
    return decoder, up2d, amax, apool, ups, upn, refl


_DECODER, _UP2D, _AMAX, _APOOL, _UPS, _UPN, _REFL = _build()


# ---- transposed convolution ----------------------------------------------------------

@torch_case(lambda: (T(2, 4, 9), T(4, 3, 3), T(3)), atol=1e-5)
def t_op2_conv_transpose1d_stride_pad(x, w, b):
    return F.conv_transpose1d(x, w, b, stride=2, padding=1, output_padding=1).relu()


@torch_case(lambda: (T(2, 4, 5, 6), T(4, 3, 3, 2)), atol=1e-5)
def t_op2_conv_transpose2d_groups_dilation(x, w):
    return F.conv_transpose2d(x, w, None, (2, 1), (1, 0), (1, 0), 2, (1, 2))


@torch_case(lambda: (T(3, 8, 10),), atol=1e-5)
def t_op2_conv_transpose1d_decoder_module(x):
    return torch.tanh(_DECODER(x))


@torch_case(lambda: (T(2, 6, 5, 5), T(2, 4, 9, 9)), atol=1e-5)
def t_op2_conv_transpose2d_module_skip(x, skip):
    # a U-Net decoder step: upsample, then add the encoder's feature map
    return F.relu(_UP2D(x) + skip)


@torch_case(lambda: (T(4, 7, 7), T(4, 2, 2, 2)), atol=1e-5)
def t_op2_conv_transpose2d_unbatched(x, w):
    return F.conv_transpose2d(x, w, stride=2) * 0.5


# ---- pooling ---------------------------------------------------------------------------

@torch_case(lambda: (T(2, 5, 17),))
def t_op2_adaptive_avg_pool1d(x):
    return F.adaptive_avg_pool1d(x, 4), F.adaptive_avg_pool1d(x, 1).squeeze(-1)


@torch_case(lambda: (T(2, 5, 13),))
def t_op2_adaptive_max_pool1d_indices(x):
    values, idx = F.adaptive_max_pool1d(x, 5, return_indices=True)
    return values * 2, idx


@torch_case(lambda: (T(2, 3, 9, 8),))
def t_op2_adaptive_max_pool2d_none_dim(x):
    return _AMAX(x), F.adaptive_max_pool2d(x, 2)


@torch_case(lambda: (T(2, 3, 9, 8),))
def t_op2_adaptive_max_pool2d_global_flatten(x):
    return F.adaptive_max_pool2d(x, (1, 1)).flatten(1) + F.adaptive_avg_pool2d(x, 1).flatten(1)


@torch_case(lambda: (T(2, 4, 15),))
def t_op2_max_pool1d_ceil_dilation(x):
    return F.max_pool1d(x, 3, stride=2, padding=1, dilation=2, ceil_mode=True)


@torch_case(lambda: (T(3, 12),))
def t_op2_max_pool1d_indices_unbatched(x):
    out, idx = F.max_pool1d(x, kernel_size=2, return_indices=True)
    return out, idx


@torch_case(lambda: (T(2, 3, 11),))
def t_op2_avg_pool1d_module_no_pad_count(x):
    return _APOOL(x), F.avg_pool1d(x, 2)


# ---- interpolate ----------------------------------------------------------------------

@torch_case(lambda: (T(2, 3, 4, 5),))
def t_op2_interp_nearest_scale(x):
    return F.interpolate(x, scale_factor=2), F.interpolate(x, scale_factor=(0.5, 1.5))


@torch_case(lambda: (T(2, 3, 6, 7),))
def t_op2_interp_nearest_exact_size(x):
    return F.interpolate(x, size=(9, 4), mode="nearest-exact")


@torch_case(lambda: (T(2, 3, 8),), atol=1e-5)
def t_op2_interp_linear_align_corners(x):
    return (F.interpolate(x, size=15, mode="linear", align_corners=True),
            F.interpolate(x, scale_factor=1.5, mode="linear", align_corners=False))


@torch_case(lambda: (T(1, 2, 5, 6),), atol=1e-5)
def t_op2_interp_bilinear_recompute_scale(x):
    return F.interpolate(x, scale_factor=(1.7, 0.8), mode="bilinear", recompute_scale_factor=True)


@torch_case(lambda: (T(1, 17, 8),), atol=1e-5)
def t_op2_interp_bicubic_position_embedding(pos):
    # a ViT/CLIP position table resized to a new grid: class token kept, the 4x4 grid
    # of patch embeddings resampled bicubically to 6x6
    cls, grid = pos[:, :1], pos[:, 1:]
    side = int(grid.shape[1] ** 0.5)
    grid = grid.reshape(1, side, side, -1).permute(0, 3, 1, 2)
    grid = F.interpolate(grid, size=(6, 6), mode="bicubic", align_corners=False)
    return torch.cat([cls, grid.permute(0, 2, 3, 1).reshape(1, 36, -1)], dim=1)


@torch_case(lambda: (T(2, 3, 9, 9),), atol=1e-5)
def t_op2_interp_area_downsample(x):
    return F.interpolate(x, size=(3, 4), mode="area")


@torch_case(lambda: (T(1, 2, 3, 4, 5),), atol=1e-5)
def t_op2_interp_trilinear(x):
    return F.interpolate(x, scale_factor=2, mode="trilinear", align_corners=False)


@torch_case(lambda: (T(2, 3, 4, 5),), atol=1e-5)
def t_op2_upsample_bilinear_module(x):
    return _UPS(x).sigmoid()


@torch_case(lambda: (T(2, 3, 4, 5),))
def t_op2_upsampling_nearest2d_module(x):
    return _UPN(x) + 1


@torch_case(lambda: (T(2, 4, 4, 4), T(2, 4, 8, 8)), atol=1e-5)
def t_op2_interp_fpn_top_down(top, lateral):
    # feature-pyramid merge: the coarser map resized to the finer one's size
    return lateral + F.interpolate(top, size=lateral.shape[-2:], mode="nearest")


@torch_case(lambda: (T(1, 3, 12, 12),), atol=1e-4)
def t_op2_interp_antialias_downscale(x):
    return F.interpolate(x, size=(5, 5), mode="bilinear", antialias=True)


@torch_case(lambda: (TI(1, 1, 4, 4, high=255, dtype=torch.uint8),))
def t_op2_interp_uint8_image(img):
    return F.interpolate(img, scale_factor=2, mode="nearest"), F.interpolate(img, size=(6, 6), mode="bilinear")


# ---- pad modes ------------------------------------------------------------------------

@torch_case(lambda: (T(2, 3, 5, 6),))
def t_op2_pad_reflect_2d(x):
    return F.pad(x, (1, 2, 3, 1), mode="reflect")


@torch_case(lambda: (T(2, 3, 7),))
def t_op2_pad_replicate_causal_1d(x):
    # causal padding of a sequence: the first frame repeated before it
    return F.pad(x, (4, 0), mode="replicate")


@torch_case(lambda: (T(2, 3, 4, 5),))
def t_op2_pad_circular_2d(x):
    return F.pad(x, (2, 2, 1, 1), mode="circular")


@torch_case(lambda: (T(2, 3, 6, 6),), atol=1e-5)
def t_op2_pad_reflection_module_conv(x):
    return _REFL(x)


@torch_case(lambda: (T(2, 8, 9),))
def t_op2_pad_negative_crop_and_value(x):
    return F.pad(x, (-1, -2)), F.pad(x, (1, 1, 0, 2), value=-1.0), F.pad(x, (1, 0), "reflect")


@torch_case(lambda: (T(1, 2, 3, 4, 5),))
def t_op2_pad_replicate_3d(x):
    return F.pad(x, (1, 1, 0, 1, 2, 0), mode="replicate")


# ---- addcmul / addcdiv -------------------------------------------------------------------

@torch_case(lambda: (T(4, 5), T(4, 5), TP(4, 5)), atol=1e-5)
def t_op2_addcdiv_adam_step(p, exp_avg, exp_avg_sq):
    denom = exp_avg_sq.sqrt().add(1e-8)
    return torch.addcdiv(p, exp_avg, denom, value=-0.001)


@torch_case(lambda: (T(4, 5), T(5), T(4, 1)))
def t_op2_addcmul_broadcast_method(x, a, b):
    return x.addcmul(a, b, value=0.5), torch.addcmul(x, a, b)


@torch_case(lambda: (T(4, 5), T(4, 5), T(4, 5)), mutates=True)
def t_op2_addcmul_inplace_ema(avg_sq, g, h):
    avg_sq.mul_(0.99).addcmul_(g, g, value=0.01)
    return avg_sq.addcdiv(h, avg_sq.abs() + 1)


@torch_case(lambda: (T(3, 4, dtype=torch.float64), T(3, 4), TI(3, 4, low=1)))
def t_op2_addcdiv_mixed_dtypes(x, a, n):
    return torch.addcdiv(x, a, n.float()), torch.addcmul(x, a, n, value=2)


# ---- Tensor.new, new_*, Tensor.type, Tensor.is_contiguous ------------------------------

@torch_case(lambda: (T(3, 4),))
def t_op2_tensor_new_sizes(x):
    buf = x.new(x.shape[0], 2).fill_(0.5)
    empty = x.new()
    return buf + x[:, :2], empty.shape, x.new(2, 2).zero_()


@torch_case(lambda: (T(3, 4, dtype=torch.float64),))
def t_op2_new_tensor_data(x):
    return x.new_tensor([1, 2, 3, 4]) * x, x.new_tensor([[1.5]], dtype=torch.float32)


@torch_case(lambda: (TI(3, 4),))
def t_op2_new_factories_dtype(ids):
    mask = ids.new_ones(ids.shape, dtype=torch.bool)
    pos = ids.new_zeros((3, 4)) + torch.arange(4)
    fill = ids.new_full((2,), 7, dtype=torch.float32)
    return mask & (ids > 2), pos, fill, ids.new_empty(0).numel()


@torch_case(lambda: (T(2, 3, 4, 5),))
def t_op2_is_contiguous_channels_last_input(x):
    if x.is_contiguous(memory_format=torch.channels_last):
        return x * 2
    return x.contiguous(memory_format=torch.channels_last) + 1


@with_breaks("torch", lambda: (T(3, 4),), graphs=2, breaks=1)
def t_op2_is_contiguous_of_view(x):
    y = x.t()
    if y.is_contiguous():
        return y * 2
    return y.contiguous() + 1


@torch_case(lambda: (T(3, 4),))
def t_op2_type_string_and_class(x):
    return x.type("torch.DoubleTensor") * 2, x.type(torch.IntTensor), x.type(torch.float16)


@torch_case(lambda: (T(3, 4), TI(3)))
def t_op2_type_noarg_branch(x, i):
    if x.type() == "torch.FloatTensor" and i.type().endswith("LongTensor"):
        return x + i.unsqueeze(1)
    return x


# ---- tolist, torch.tensor of Python data --------------------------------------------------

@with_breaks("torch", lambda: (T(4),), graphs=2, breaks=1, reads_data=True)
def t_op2_tolist_float_then_math(x):
    vals = (x * 2).tolist()
    return [v + 1 for v in vals], x.sin()


@with_breaks("torch", lambda: (T(5),), graphs=2, breaks=1, reads_data=True)
def t_op2_tolist_int_lengths(x):
    lens = (x.abs() * 3).long().tolist()
    return x + len(lens), lens


@torch_case(lambda: (T(2, 5),))
def t_op2_tensor_range_positions(x):
    pos = torch.tensor(range(x.shape[1]))
    return x + pos, torch.tensor(range(2, 8, 2), dtype=torch.float32)


@torch_case(lambda: (T(2, 5, 3),))
def t_op2_tensor_of_sizes(x):
    shape = torch.tensor([x.shape[0], x.shape[1]])
    return shape * 2, torch.tensor(x.shape[-1]) + 1, torch.tensor([list(x.shape)])


# ---- in-place random fills (properties that hold whatever is drawn) ------------------------

@torch_case(lambda: (T(4, 6),))
def t_op2_uniform_init_bounds(w):
    bound = 1 / w.shape[1] ** 0.5
    u = torch.empty_like(w).uniform_(-bound, bound)
    return ((u >= -bound) & (u < bound)).all(), u.shape


@torch_case(lambda: (T(3, 5),))
def t_op2_bernoulli_extremes(x):
    keep = torch.empty_like(x).bernoulli_(1.0)
    drop = torch.empty_like(x).bernoulli_(0.0)
    return x * keep, x * drop


@torch_case(lambda: (T(8),))
def t_op2_random_int_range(x):
    r = torch.empty(8, dtype=torch.int64).random_(2, 5)
    return ((r >= 2) & (r < 5)).all(), x.new_empty(3).random_(1).sum()


@torch_case(lambda: (T(2, 3),))
def t_op2_normal_zero_std_and_fills(x):
    c = torch.empty_like(x).normal_(3.0, 0.0)
    e = torch.empty(16).exponential_(2.0)
    ln = torch.empty(16).log_normal_(0.0, 0.5)
    g = torch.empty(16).geometric_(0.3)
    ca = torch.empty(16).cauchy_()
    return c + x, (e > 0).all(), (ln > 0).all(), (g >= 1).all(), ca.isnan().any()


@torch_case(lambda: (T(1, 2, 4, 4),), atol=1e-5)
def t_op2_upsample_deprecated_names(x):
    return F.upsample(x, scale_factor=2), F.upsample_bilinear(x, size=(6, 6)), F.upsample_nearest(x, scale_factor=3)
