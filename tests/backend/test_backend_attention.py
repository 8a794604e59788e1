"""scaled_dot_product_attention as the cpu backend's attention step (step_attn.c): two
oneDNN products around a generated softmax row kernel. Compiled vs eager over the masks
(none, float, bool; broadcast in every dim), is_causal (queries fewer and more than the
keys), a given scale, rank 3 and 4, the layouts q comes in (contiguous, (B, S, H, D) as
transformers transpose it, (S, B, H, D) as nn.MultiheadAttention makes it, a slice of a
packed projection), sequences long enough to be computed in blocks of heads and of query
rows, one and two threads; the result's strides are eager's. Rows whose scores are inf or
NaN, and a NaN or +inf mask, hand the call back to eager's own kernel; a row with every key
masked is zeros as eager gives. What the step does not take (dropout, grouped heads,
gradients, a float64 call) stays an eager step."""
import pytest
import torch
import torch.nn.functional as F

import shapejit
from lowering import lowering

pytestmark = pytest.mark.usefixtures("fresh_shapejit")

RTOL, ATOL = 1e-5, 2e-6   # the softmax sum and the products in another order than eager's


def _stats(made):
    out = {}
    for cg in made:
        for k, v in getattr(cg, "stats", {}).items():
            if k.startswith("attention"):
                out[k] = out.get(k, 0) + v
    return out


MIN_SCORES = 4096   # backend/step_attn.c: fewer scores per call run torch's kernel
MIN_HEAD_SCORES = 2048   # and, with more than one thread, fewer scores a head


def _small(q, k):
    n = 1
    for d in q.shape[:-1]:
        n *= d
    threads = shapejit.config.threads or torch.get_num_threads()
    head = q.shape[-2] * k.shape[-2]
    return n * k.shape[-2] < MIN_SCORES or (head < MIN_HEAD_SCORES and threads > 1)


def _run(f, *args, calls=True, strides=True):
    """f compiled vs eager on args (twice: the second call reuses the step's scratch);
    the attention step's stats. Calls under MIN_SCORES must take torch's kernel."""
    backend, made = lowering()
    cf = shapejit.compile(f, backend=backend)
    want = f(*args)
    for _ in range(2):
        got = cf(*args)
        assert got.shape == want.shape and got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL, equal_nan=True)
        assert got.stride() == want.stride() or not strides
    st = _stats(made)
    if calls and len(args) >= 2 and _small(args[0], args[1]):
        assert st.get("attention_small") == 2 and st.get("attention_calls") == 0, st
    elif calls:
        assert st.get("attention_steps") == 1 and st.get("attention_calls") == 2, st
        assert st.get("attention_fallbacks") == 0, st
    return st


def _qkv(shape, seed, n=3):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=gen) for _ in range(n)]


def sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


def sdpa_mask(q, k, v, m):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m)


def sdpa_causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


@pytest.mark.parametrize("shape", [(2, 4, 32, 8), (1, 1, 64, 1), (3, 2, 33, 16), (2, 3, 40, 64), (4, 1, 37, 5),
                                   (2, 4, 16, 8), (1, 1, 1, 1), (4, 1, 7, 5)])
def test_plain_every_size(shape, threads):
    _run(sdpa, *_qkv(shape, sum(shape)))


@pytest.mark.parametrize("sq, sk", [(16, 16), (5, 16), (40, 16), (1, 80), (70, 70), (17, 33)])
def test_causal_fewer_and_more_queries(sq, sk, threads):
    q, = _qkv((8, 8, sq, 16), sq, 1)
    k, v = _qkv((8, 8, sk, 16), sk + 1, 2)
    _run(sdpa_causal, q, k, v)


def test_scale_and_rank_three():
    q, k, v = _qkv((3, 40, 8), 3)
    _run(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.3), q, k, v)
    _run(sdpa, q, k, v)
    _run(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=2.0), q, k, v)


S = 40
MASK_SHAPES = [(S, S), (2, 1, S, S), (2, 3, S, S), (1, 3, 1, S), (2, 1, 1, S), (3, S, S), (1, S)]


@pytest.mark.parametrize("mshape", MASK_SHAPES)
@pytest.mark.parametrize("kind", ["float", "bool"])
def test_masks_broadcast_in_every_dim(kind, mshape, threads):
    q, k, v = _qkv((2, 3, S, 8), 5)
    gen = torch.Generator().manual_seed(len(mshape))
    if kind == "float":
        m = torch.randn(*mshape, generator=gen)
    else:
        m = torch.rand(*mshape, generator=gen) > 0.3
    _run(sdpa_mask, q, k, v, m)


def test_padding_mask_as_transformers_build_it():
    """A [B, 1, S, S] float mask of 0 and the dtype's minimum (a padded batch row)."""
    q, k, v = _qkv((2, 4, 40, 16), 6)
    m = torch.zeros(2, 1, 40, 40)
    m[1, :, :, 27:] = torch.finfo(torch.float32).min
    _run(sdpa_mask, q, k, v, m)


def test_fully_masked_rows_are_zeros():
    q, k, v = _qkv((2, 2, 48, 8), 7)
    fm = torch.zeros(48, 48)
    fm[2] = float("-inf")
    bm = torch.ones(2, 1, 48, 48, dtype=torch.bool)
    bm[1, 0, 4] = False
    for m in (fm, bm):
        out = sdpa_mask(q, k, v, m)
        _run(sdpa_mask, q, k, v, m)
        assert (out[:, :, 2] == 0).all() if m is fm else (out[1, :, 4] == 0).all()


def _layouts(b, h, s, d, seed):
    gen = torch.Generator().manual_seed(seed)
    packed = torch.randn(b, s, 3 * h * d, generator=gen)
    return {
        "bhsd": torch.randn(b, h, s, d, generator=gen),
        "bshd": torch.randn(b, s, h, d, generator=gen).transpose(1, 2),
        "sbhd": torch.randn(s, b, h, d, generator=gen).permute(1, 2, 0, 3),
        "packed": packed[..., h * d:2 * h * d].view(b, s, h, d).transpose(1, 2),
        "expanded": torch.randn(1, h, s, d, generator=gen).expand(b, h, s, d),
    }


@pytest.mark.parametrize("ql", ["bhsd", "bshd", "sbhd", "packed", "expanded"])
@pytest.mark.parametrize("kl", ["bhsd", "bshd", "sbhd", "packed"])
def test_layouts_and_result_strides(ql, kl):
    lay = _layouts(2, 3, 40, 8, 8)
    q, k = lay[ql], lay[kl]
    v = _layouts(2, 3, 40, 8, 9)[kl]
    _run(sdpa, q, k, v)
    _run(sdpa_causal, q, k, v)


def test_multihead_attention_module():
    """nn.MultiheadAttention and TransformerEncoderLayer: q in (S, B, H, D) order. (Their
    result's strides are not compared: eager runs the modules' fused fast path, which
    returns (B, S, E) contiguous, where capture follows the Python path, which transposes.)"""
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(32, 4, batch_first=True).eval()
    x = torch.randn(3, 48, 32)   # (48 x 48 scores a head: the step at any thread count)
    f = lambda x: mha(x, x, x, need_weights=False)[0]
    with torch.no_grad():
        _run(f, x, strides=False)
        layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True).eval()
        _run(layer, x, strides=False)


@pytest.mark.parametrize("batch_first", [True, False])
def test_multihead_attention_heads_batch_first(batch_first, threads):
    """With batch_first=True the in-projection reads x.transpose(0, 1) and keeps x's row
    order (test_backend_matmul.py): q, k and v lie batch first in its product, and the step
    takes every batch in one product, through a scratch block for the result, which eager
    lays out (S, B, H, D) like q. With batch_first=False x is (S, B, E): the heads lie
    (S, B, H, D) and the step runs a batch at a time, as before."""
    torch.manual_seed(1)
    mha = torch.nn.MultiheadAttention(32, 4, batch_first=batch_first).eval()
    x = torch.randn(3, 48, 32) if batch_first else torch.randn(48, 3, 32)
    f = lambda x: mha(x, x, x, need_weights=False)[0]
    with torch.no_grad():
        st = _run(f, x, strides=False)
    # (the first call runs the view chains to record them: q is the copy made then)
    assert st.get("attention_staged") == (1 if batch_first else 0), st


@pytest.mark.parametrize("shape", [(2, 4, 300, 16), (1, 2, 760, 8), (3, 1, 1100, 4)])
def test_long_sequences_in_blocks(shape, threads):
    """Scores past the block size: blocks of batches, of heads, then of query rows (the
    causal diagonal and the mask's rows follow the block's first row)."""
    q, k, v = _qkv(shape, shape[2])
    _run(sdpa, q, k, v)
    _run(sdpa_causal, q, k, v)
    gen = torch.Generator().manual_seed(1)
    m = torch.randn(shape[0], 1, shape[2], shape[2], generator=gen)
    _run(sdpa_mask, q, k, v, m)
    _run(sdpa_mask, q, k, v, m[0, 0] > 0)


@pytest.mark.parametrize("where", ["q", "k", "mask_nan", "mask_inf", "overflow"])
def test_nonfinite_scores_run_eagerly(where):
    q, k, v = _qkv((2, 2, 48, 4), 11)
    m = torch.zeros(48, 48)
    if where == "q":
        q[0, 1, 3, 2] = float("nan")
    elif where == "k":
        k[1, 0, 5, 1] = float("inf")
    elif where == "mask_nan":
        m[4, 4] = float("nan")
    elif where == "mask_inf":
        m[2, 6] = float("inf")
    else:
        q[0, 0, 0] = 3e38
        k[0, 0, 0] = 3e38
    st = _run(sdpa_mask, q, k, v, m, calls=False)
    assert st["attention_calls"] == 0 and st["attention_nonfinite"] == 2, st
    # finite inputs again: the same graph takes the step
    q2, k2, v2 = _qkv((2, 2, 48, 4), 12)
    _run(sdpa_mask, q2, k2, v2, torch.zeros(48, 48))


def test_nan_in_value_propagates():
    q, k, v = _qkv((1, 2, 48, 4), 13)
    v[0, 1, 2, 3] = float("nan")
    _run(sdpa, q, k, v)


@pytest.mark.parametrize("call, exact", [
    (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, dropout_p=0.5), False),
    (lambda q, k, v: F.scaled_dot_product_attention(q, k[:, :1], v[:, :1], enable_gqa=True), True),
    (lambda q, k, v: F.scaled_dot_product_attention(q.double(), k.double(), v.double()), True),
])
def test_not_taken_stays_eager(call, exact):
    q, k, v = _qkv((2, 2, 6, 4), 14)
    backend, made = lowering()
    cf = shapejit.compile(call, backend=backend)
    got, want = cf(q, k, v), call(q, k, v)
    assert got.shape == want.shape and got.dtype == want.dtype
    if exact:   # (dropout draws its own mask each call)
        torch.testing.assert_close(got, want)
    assert _stats(made).get("attention_steps", 0) == 0


def test_requires_grad_stays_eager():
    q, k, v = _qkv((2, 2, 6, 4), 15)
    q.requires_grad_(True)
    backend, made = lowering()
    cf = shapejit.compile(sdpa, backend=backend)
    got = cf(q, k, v)
    got.sum().backward()
    assert q.grad is not None
    assert _stats(made).get("attention_steps", 0) == 0


def test_dynamic_sizes_one_graph():
    backend, made = lowering()
    cf = shapejit.compile(sdpa_causal, backend=backend, dynamic=True)
    for s in (48, 57, 65):
        q, k, v = _qkv((4, 8, s, 8), s)
        torch.testing.assert_close(cf(q, k, v), sdpa_causal(q, k, v), rtol=RTOL, atol=ATOL)
    assert len(made) == 1 and _stats(made)["attention_calls"] == 3


@pytest.mark.parametrize("causal", [False, True])
def test_value_rows_4096_bytes_apart(causal, threads):
    """v's keys 4096 bytes apart (nn.MultiheadAttention's (S, B, H, D) at 8 x 4 x 32 floats)
    are copied contiguous a block at a time before the second product; a v broadcast over
    the batch stays broadcast; long enough for several blocks of query rows."""
    gen = torch.Generator().manual_seed(21)
    for s in (40, 700):
        q, k, v = [torch.randn(s, 8, 4, 32, generator=gen).permute(1, 2, 0, 3) for _ in range(3)]
        assert v.stride(2) * 4 == 4096
        f = sdpa_causal if causal else sdpa
        _run(f, q, k, v)
        _run(f, q, k, v[:1].expand(8, 4, s, 32))


@pytest.mark.parametrize("shape, dv", [((8, 64, 16), 16), ((2, 4, 64, 16), 8)])
def test_causal_nonfinite_past_the_diagonal(shape, dv):
    """An inf key that no causal row reads still hands the call to torch's kernel (eager's
    math path adds -inf to it and gives NaN)."""
    gen = torch.Generator().manual_seed(31)
    q = torch.randn(*shape, generator=gen)
    k = torch.randn(*shape[:-2], 128, shape[-1], generator=gen)
    v = torch.randn(*shape[:-2], 128, dv, generator=gen)
    k[..., 100, :] = float("inf")
    st = _run(sdpa_causal, q, k, v, calls=False)
    assert st["attention_nonfinite"] == 2 and st["attention_calls"] == 0, st


def test_math_path_layouts():
    """Where eager runs its math path the result is contiguous: a rank-3 mask, a mask that
    requires grad, broadcast batch or head dims, and flash switched off by the user."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q, k, v = [t.view(2, 64, 4, 16).transpose(1, 2) for t in _qkv((2, 64, 64), 32)]
    _run(sdpa_mask, q, k, v, torch.randn(1, 64, 64))
    with torch.no_grad():
        _run(sdpa_mask, q, k, v, torch.nn.Parameter(torch.randn(1, 1, 64, 64)))
    _run(sdpa, q, k[:, :1], v[:, :1])
    with sdpa_kernel([SDPBackend.MATH]):
        _run(sdpa, q, k, v)
    _run(sdpa, q, k, v)   # flash again


def test_size_one_dims_keep_the_query_strides():
    """A decode step (one query row) and a single head: eager keeps q's strides on the
    size-1 dim."""
    gen = torch.Generator().manual_seed(33)
    q = torch.randn(4, 1, 8, 16, generator=gen).transpose(1, 2)
    k, v = [torch.randn(4, 600, 8, 16, generator=gen).transpose(1, 2) for _ in range(2)]
    _run(sdpa, q, k, v)
    q, k, v = [torch.randn(4, 64, 1, 16, generator=gen).transpose(1, 2) for _ in range(3)]
    _run(sdpa, q, k, v)


def test_rank_one_mask_raises_as_eager():
    q, k, v = _qkv((2, 4, 64, 16), 34)
    m = torch.randn(64)
    with pytest.raises(IndexError):
        sdpa_mask(q, k, v, m)
    with pytest.raises(IndexError):
        shapejit.compile(sdpa_mask)(q, k, v, m)


def test_rank_three_masks_and_shared_key_heads():
    """Rank-3 q, k, v with rank-3 masks (batch, queries, keys); one key/value head for
    every query head (Falcon's multi-query attention broadcasts it)."""
    q, k, v = _qkv((8, 64, 16), 35)
    gen = torch.Generator().manual_seed(35)
    _run(sdpa_mask, q, k, v, torch.randn(8, 64, 64, generator=gen))
    _run(sdpa_mask, q, k, v, torch.rand(8, 1, 64, generator=gen) > 0.2)
    q, = _qkv((2, 4, 64, 16), 36, 1)
    k, v = _qkv((2, 1, 64, 16), 37, 2)
    _run(sdpa_mask, q, k, v, torch.zeros(2, 1, 64, 64))
    _run(sdpa_causal, q, k, v)


def test_scale_from_dynamic_sizes():
    """scale = 1 / sqrt(q.size(-1)) under dynamic shapes is a number the graph computes."""
    import math

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, scale=1 / math.sqrt(q.size(-1)), is_causal=True)

    backend, made = lowering()
    cf = shapejit.compile(f, backend=backend, dynamic=True)
    for s, d in ((48, 16), (57, 16), (90, 32)):
        q, k, v = _qkv((2, 4, s, d), s)
        torch.testing.assert_close(cf(q, k, v), f(q, k, v), rtol=RTOL, atol=ATOL)
    assert _stats(made)["attention_calls"] == 3, _stats(made)
