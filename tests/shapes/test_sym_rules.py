"""Symbolic twins of the shape rules: slicing and integer indexing, expand /
expand_as / repeat, the factories and arange, layer/group/batch norm, scans, narrow /
select / split / chunk / unbind / setitem, conv and pooling.

Each test compiles with shapejit.compile(dynamic=...), checks every result against eager
on several sizes, and counts graphs: a rule that handles symbols keeps one graph across
the sizes; one that specialised its arguments would compile once per size. Where a case
is specialised on purpose (a symbolic slice step, numpy's reversed slices, an int used as a
dim), the count shows the specialisation and its guard."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import shapejit


@pytest.fixture(autouse=True)
def _fresh():
    shapejit.reset()
    yield
    shapejit.reset()


def _graphs():
    return shapejit.stats()["graphs"]


def _check(fn, calls, graphs, dynamic=True):
    """Runs fn compiled on each argument tuple of calls, comparing with eager, then checks
    the graph count (and that nothing broke the graph)."""
    cf = shapejit.compile(fn, dynamic=dynamic)
    for args in calls:
        got, want = cf(*args), fn(*args)
        if isinstance(want, np.ndarray):
            np.testing.assert_allclose(got, want, rtol=1e-6)
        else:
            torch.testing.assert_close(got, want)
    assert shapejit.stats()["graph_breaks"] == 0
    assert _graphs() == graphs


def _sizes(*ns, extra=()):
    return [(torch.randn(n, *extra),) for n in ns]


# ------------------------------------------------------------------ slicing ----

def test_half_slice_of_a_symbolic_dim_compiles_once():
    def f(x):
        return x[: x.shape[0] // 2] * 2 + x[x.shape[0] // 2: 2 * (x.shape[0] // 2)]
    _check(f, _sizes(6, 8, 10, 14, 13), 1)


def test_int_argument_bounds():
    def f(x, n):
        return x[:n] * 2, x[-n:] + 1, x[n:], x[1:n]
    _check(f, [(torch.randn(12), n) for n in (3, 4, 5, 7, 9)], 1)


def test_bounds_past_the_size_clamp_like_python():
    def f(x, n):
        return x[:n].sum(), x[-n:].sum(), x[n:].sum()
    # n past the size on the second call: clamped (guarded), a second graph
    _check(f, [(torch.randn(5), 3), (torch.randn(5), 9), (torch.randn(5), 8)], 2)


def test_constant_bound_on_a_symbolic_dim_guards_it():
    def f(x):
        return x[:3] * 2 + x[-3:]
    # 3 <= s0 holds for 5, 6, 7; size 2 breaks that guard (x[:3] is then 2 long)
    _check(f, _sizes(5, 6, 7), 1)
    _check(f, _sizes(5, 6, 2), 2)


def test_slices_of_several_dims_none_and_ellipsis():
    def f(x):
        return (x[1:-1, :1] * x[1:-1, 1:].sum(1, keepdim=True)).sum() + x[:, :1].sum() + x[None, ..., 2:].sum() + x[..., 0].sum()
    # x[1:-1] of 3 rows is 1 long: broadcasting it guards Eq(s0, 3), so start at 4 rows
    _check(f, [(torch.randn(a, b),) for a, b in [(4, 5), (5, 6), (7, 3), (4, 9)]], 1)


def test_stepped_slices():
    def f(x):
        return x[1::2].sum() + x[::3].sum() * x[: x.shape[0] - 1: 2].numel()
    _check(f, _sizes(5, 6, 9, 10, 17), 1)


def test_symbolic_slice_of_a_static_dim_and_in_a_tuple():
    def f(x, n):
        return x[:, :n].sum(0), x[n]
    _check(f, [(torch.randn(6, 8), n) for n in (2, 3, 5)], 1)


def test_integer_index_on_a_symbolic_dim():
    def f(x):
        return x[2] + x[-1] + x[0]
    _check(f, _sizes(4, 5, 7, extra=(3,)), 1)


def test_symbolic_step_is_specialised():
    def f(x, k):
        return x[::k] * 2
    # the step is pinned: one graph per step value, the sizes stay symbolic
    _check(f, [(torch.randn(n), k) for n, k in [(8, 2), (9, 2), (8, 3), (10, 3), (7, 2)]], 2)


def test_numpy_slices_and_reversed_slices():
    def fwd(a, n):
        return a[:n] * 2
    _check(fwd, [(np.arange(10.0), n) for n in (2, 3, 6)], 1)
    shapejit.reset()

    def rev(a):
        return a[::-1] * 2
    # numpy's negative steps are specialised: one graph per size
    _check(rev, [(np.arange(float(n)),) for n in (4, 5, 6)], 3)


def test_static_mode_keeps_one_graph_per_size():
    def f(x):
        return x[: x.shape[0] // 2] + 1
    _check(f, _sizes(6, 8, 10), 3, dynamic=False)


def test_mark_dynamic_slice_is_not_a_violation():
    def f(x):
        return x[: x.shape[0] // 2].sum() + x[1:].sum()
    cf = shapejit.compile(f)
    x = torch.randn(6)
    shapejit.mark_dynamic(x, 0)
    torch.testing.assert_close(cf(x), f(x))
    for n in (8, 10, 11):
        x = torch.randn(n)
        torch.testing.assert_close(cf(x), f(x))
    assert _graphs() == 1


# ------------------------------------------------------- expand and repeat ----

def test_expand_keeps_the_symbol_for_minus_one():
    def f(x):
        return x.unsqueeze(0).expand(3, -1, -1) + x.unsqueeze(1).expand(-1, 2, -1).sum(1)
    _check(f, _sizes(2, 4, 5, 7, extra=(3,)), 1)


def test_expand_to_symbolic_sizes_and_expand_as():
    def f(x, y):
        return x.expand(y.shape[0], x.shape[1]) + y, x.expand_as(y) * 2
    _check(f, [(torch.randn(1, m), torch.randn(n, m)) for n, m in [(3, 4), (5, 6), (7, 2)]], 1)


def test_repeat_interleave_by_an_int_keeps_symbolic_sizes():
    """repeat_interleave by an int repeats the dim (or the flattened input) n times: the
    grown size is n times the symbol (transformers' GPT-J / CodeGen rotary embedding), so
    one graph serves every size; output_size is checked against that expression."""
    def f(x):
        return (torch.repeat_interleave(x[:, :, None, :], 2, 3) * 2, x.repeat_interleave(3, dim=1) + 1,
                x.repeat_interleave(2), torch.repeat_interleave(x, 2, 0, output_size=2 * x.shape[0]))
    _check(f, _sizes(2, 4, 5, 7, extra=(3, 4)), 1)


def test_repeat_interleave_output_size_that_does_not_match_raises():
    def f(x, n):
        return torch.repeat_interleave(x, 2, 0, output_size=n)
    cf = shapejit.compile(f, dynamic=True)
    for m in (3, 5):
        x = torch.randn(m, 2)
        torch.testing.assert_close(cf(x, 2 * m), f(x, 2 * m))
    with pytest.raises(RuntimeError):
        cf(torch.randn(4, 2), 7)


def test_reshape_as_symbolic_sizes():
    """reshape_as takes the other tensor's sizes as expressions (LeViT's
    `(x.flatten(0, 1) * 2).reshape_as(x)`); element counts that differ raise as eager."""
    def f(x):
        return (x.flatten(0, 1) * 2).reshape_as(x), x.reshape_as(x.transpose(0, 1)) + 1
    _check(f, _sizes(2, 4, 5, 7, extra=(3,)), 1)

    def g(x, y):
        return x.reshape_as(y)
    cg = shapejit.compile(g, dynamic=True)
    for n in (2, 3, 5):
        x, y = torch.randn(n, 6), torch.randn(3 * n, 2)
        torch.testing.assert_close(cg(x, y), g(x, y))
    with pytest.raises(RuntimeError):
        cg(torch.randn(4, 6), torch.randn(5, 2))


def test_einsum_symbolic_sizes():
    """einsum's output dims are its labels' sizes with their symbols (Funnel's
    `einsum("bind,bjnd->bnij", q, k)`), a label of size 1 in one operand broadcasts, the
    "..." dims broadcast across operands; one graph over the sizes."""
    def f(q, k):
        return (torch.einsum("bind,bjnd->bnij", q, k) + 1, torch.einsum("bind->bn", q) * 2,
                torch.einsum("...nd,...nd->...n", q, k[:, :1]), torch.einsum("bind,bjnd", q, k))
    # (first sizes all distinct: equal ones would share a symbol)
    calls = [(torch.randn(b, s, 2, 8), torch.randn(b, s + 1, 2, 8)) for b, s in [(3, 12), (4, 9), (5, 6), (6, 11)]]
    _check(f, calls, 1)


def test_einsum_symbolic_label_mismatch_raises():
    def f(a, b):
        return torch.einsum("ij,jk->ik", a, b)
    cf = shapejit.compile(f, dynamic=True)
    for n in (3, 5):
        a, b = torch.randn(n, 4), torch.randn(4, n + 1)
        torch.testing.assert_close(cf(a, b), f(a, b))
    with pytest.raises(RuntimeError):
        cf(torch.randn(3, 4), torch.randn(5, 2))


def test_unfold_symbolic_sizes():
    """F.unfold's block count is the product of the window extents over the two spatial
    dims (ConvBERT's `unfold(x.transpose(1, 2).unsqueeze(-1), [3, 1], padding=[1, 0])`);
    channels times the kernel stay exact; one graph over the sizes."""
    def f(x):
        return (F.unfold(x.transpose(1, 2).unsqueeze(-1), kernel_size=[3, 1], padding=[1, 0]) + 1,
                F.unfold(x.unsqueeze(1), kernel_size=2, stride=2) * 2)
    _check(f, [(torch.randn(b, s, 4),) for b, s in [(2, 12), (3, 9), (4, 6), (2, 20)]], 1)


def test_expand_of_a_non_singleton_dim_must_match():
    def f(x, n):
        return x.expand(n, -1)
    cf = shapejit.compile(f, dynamic=True)
    x = torch.randn(4, 2)
    torch.testing.assert_close(cf(x, 4), f(x, 4))
    with pytest.raises(RuntimeError):
        cf(x, 5)


def test_repeat_with_symbolic_counts_and_dims():
    def f(x, k):
        return x.repeat(k, 1) * k, x.repeat(1, 2)
    _check(f, [(torch.randn(n, 2), k) for n, k in [(3, 2), (5, 3), (7, 4), (9, 2)]], 1)


def test_squeeze_keeps_symbols_and_drops_ones():
    def f(x):
        return x.squeeze(), x.squeeze(1).sum(0), x.unsqueeze(0).squeeze(0) * 2, x.squeeze(0)
    _check(f, [(torch.randn(n, 1, m),) for n, m in [(2, 3), (4, 5), (6, 7)]], 1)


def test_squeeze_of_an_int_sized_dim_guards_it():
    def f(n):
        return torch.zeros(n, 2).squeeze(0) + 1
    # n == 1 would drop the dim: n is guarded != 1 (one graph for 2, 3, 4), then == 1
    cf = shapejit.compile(f, dynamic=True)
    for n in (2, 3, 4, 1):
        torch.testing.assert_close(cf(n), f(n))
    assert _graphs() == 2


# ---------------------------------------------------------------- factories ----

def test_factories_from_sizes():
    def f(x):
        z = torch.zeros(x.shape[0]) + torch.ones(x.shape[0], 1).sum(1)
        w = torch.full((x.shape[0], x.shape[1]), 1.5) + torch.empty(x.shape).zero_()
        return z, w + torch.zeros_like(x) + torch.ones(x.shape, dtype=torch.float32)
    _check(f, [(torch.randn(a, b),) for a, b in [(3, 2), (4, 5), (6, 2), (8, 3)]], 1)


def test_new_factories():
    def f(x):
        return (x.new_ones(x.shape[0], 2) * x[:, :1] + x.new_zeros(x.shape).sum(1, keepdim=True),
                x.new_full((x.shape[1],), 3.0), x.new_empty(x.shape).fill_(1.0))
    _check(f, [(torch.randn(a, b),) for a, b in [(3, 4), (5, 4), (6, 5), (9, 5)]], 1)


def test_factories_from_int_arguments():
    def f(x, n):
        return torch.zeros(n, 2) + 1, torch.arange(n) * 1.5, x.new_ones(n).sum()
    _check(f, [(torch.randn(3), n) for n in (2, 3, 4, 6)], 1)


def test_arange_lengths():
    def f(x):
        n = x.shape[0]
        return (x * torch.arange(n).float(), torch.arange(1, n, 2).sum(), torch.arange(n, 0, -3).sum(),
                torch.arange(2, n + 5))
    _check(f, _sizes(3, 4, 7, 10, 11), 1)


def test_arange_with_a_float_argument_specialises():
    def f(n):
        return torch.arange(0, n, 0.5) + 1
    cf = shapejit.compile(f, dynamic=True)
    for n in (2, 3, 4):
        torch.testing.assert_close(cf(n), f(n))
    assert _graphs() == 3


# ------------------------------------------------------------ norms, scans ----

def test_layer_norm_and_log_softmax_over_a_symbolic_seq():
    def f(x):
        return F.layer_norm(x, (8,)) + F.log_softmax(x, dim=1)
    _check(f, [(torch.randn(b, s, 8),) for b, s in [(2, 3), (2, 5), (3, 9), (4, 12)]], 1)


def test_layer_norm_over_a_symbolic_last_dim():
    def f(x):
        return F.layer_norm(x, (x.shape[-1],))
    _check(f, [(torch.randn(2, n),) for n in (3, 5, 8)], 1)


def test_layer_norm_module_with_weights():
    ln = torch.nn.LayerNorm(6)

    def f(x):
        return ln(x).sum(-1)
    _check(f, [(torch.randn(b, s, 6),) for b, s in [(2, 3), (3, 4), (5, 7)]], 1)


def test_group_and_batch_norm():
    gn = torch.nn.GroupNorm(2, 4)
    bn = torch.nn.BatchNorm1d(4).eval()

    def f(x):
        return gn(x) + bn(x)
    with torch.no_grad():
        _check(f, [(torch.randn(b, 4, s),) for b, s in [(2, 3), (3, 5), (5, 8)]], 1)


def test_group_norm_with_symbolic_channels_guards_divisibility():
    def f(x):
        return F.group_norm(x, 2)
    _check(f, [(torch.randn(2, c, 3),) for c in (4, 6, 8)], 1)


def test_cumsum_and_cumprod_keep_symbols():
    def f(x):
        return x.reshape(x.shape[0] * x.shape[1], x.shape[2]).cumsum(0), x.cumprod(1)
    _check(f, [(torch.randn(a, b, 4),) for a, b in [(2, 3), (3, 3), (3, 5), (4, 5)]], 1)


# ----------------------------------------------- ints read by value are pinned ----

def test_int_used_as_a_dim_is_specialised():
    def f(x, d):
        return x.sum(d) + 1
    # the dim is guarded equal to its value: d = 0, 1, 0 gives two graphs
    _check(f, [(torch.randn(3, 4), 0), (torch.randn(3, 4), 1), (torch.randn(5, 4), 0)], 2)


# ------------------------------------------ gather, embedding, unflatten, sdpa ----

def test_gather_and_embedding_keep_the_index_shape_symbolic():
    table = torch.randn(10, 4)

    def f(x, idx):
        return torch.gather(x, 1, idx) + F.embedding(idx, table).sum(-1)
    calls = [(torch.randn(2, n), torch.randint(0, n, (2, n))) for n in (5, 7, 9)]
    _check(f, calls, 1)


def test_unflatten_of_a_static_dim_keeps_the_others_symbolic():
    def f(x):
        return x.unflatten(-1, (3, 4)).sum(-1)
    _check(f, _sizes(3, 5, 8, extra=(12,)), 1)


def test_sdpa_with_symbolic_lengths_and_mask():
    def f(q, k, v, m):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m)
    calls = []
    for L, S in [(3, 4), (5, 6), (7, 9)]:
        calls.append((torch.randn(2, L, 8), torch.randn(2, S, 8), torch.randn(2, S, 6),
                      torch.randn(L, S)))
    _check(f, calls, 1)


def test_type_of_a_size_is_int():
    def f(x):
        n = x.shape[0]
        return x * (2 if type(n) is int and isinstance(n, int) else 3)
    _check(f, _sizes(3, 5, 8), 1)


@pytest.mark.parametrize("seq", [(16, 32, 64)])
def test_encoder_layer_and_bert_one_graph_across_lengths(seq):
    enc = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True).eval()
    with torch.no_grad():
        _check(enc, [(torch.randn(2, s, 32),) for s in seq], 1)
    shapejit.reset()
    from transformers import BertConfig, BertModel
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=128)
    bert = BertModel(cfg).eval()
    cb = shapejit.compile(bert, dynamic=True)
    with torch.no_grad():
        for s in seq:
            ids = torch.randint(0, 100, (2, s))
            torch.testing.assert_close(cb(ids).last_hidden_state, bert(ids).last_hidden_state)
    s = shapejit.stats()
    assert s["graphs"] == 1 and s["recompiles"] == 0 and s["graph_breaks"] == 0


# ------------------------- narrow/select/split/chunk/unbind/setitem, conv/pool ----
# Each case also runs under torch.compile(dynamic=True) with a graph-counting backend in
# the same test: shapejit's graph count must be torch's (and the stated one).

def _torch_graphs(fn, calls):
    """torch.compile's graph count for fn over calls (dynamic=True), checked against eager."""
    from torch._dynamo.testing import CompileCounter
    torch._dynamo.reset()
    counter = CompileCounter()
    cf = torch.compile(fn, backend=counter, dynamic=True)
    try:
        for args in calls:
            torch.testing.assert_close(cf(*args), fn(*args))
    finally:
        torch._dynamo.reset()
    return counter.frame_count


def _oracle(fn, calls, graphs):
    """_check, and torch.compile gives the same count."""
    assert _torch_graphs(fn, calls) == graphs
    _check(fn, calls, graphs)


def test_narrow_with_symbolic_start_length_and_size():
    def f(x, s, n):
        return x.narrow(0, s, n) * 2, x.narrow(1, 0, x.shape[1] // 2), x.narrow(0, 1, 3).sum(0)
    _oracle(f, [(torch.randn(a, b), s, n) for a, b, s, n in [(7, 4, 1, 3), (8, 6, 2, 4), (9, 9, 3, 5), (11, 5, 0, 2)]], 1)


def test_narrow_negative_start_guards_its_sign():
    def f(x, s):
        return x.narrow(0, s, 2) * 2
    _oracle(f, [(torch.randn(n, 3), s) for n, s in [(7, -3), (8, -4), (9, -3)]], 1)
    shapejit.reset()
    # a start that turns non-negative fails the sign guard: a second graph, as torch
    _oracle(f, [(torch.randn(n, 3), s) for n, s in [(7, -3), (8, -4), (9, 3)]], 2)


def test_select_keeps_the_other_dims_and_guards_the_index_sign():
    def f(x, i):
        return x.select(0, i) * 2 + x.select(1, -1).sum(), x.select(1, 0)
    _oracle(f, [(torch.randn(n, m), i) for n, m, i in [(7, 3, 1), (8, 5, 2), (9, 4, 6)]], 1)
    shapejit.reset()
    _oracle(f, [(torch.randn(n, m), i) for n, m, i in [(7, 3, 1), (8, 5, -2), (9, 4, 6)]], 2)


def test_split_by_int_guards_the_piece_count():
    def f(x):
        return [t * 2 for t in x.split(3)]
    # 8 and 9 rows are 3 pieces ((s0 + 2)//3 == 3); 11 and 12 are 4: a second graph
    _oracle(f, [(torch.randn(n, 2),) for n in (8, 9)], 1)
    shapejit.reset()
    _oracle(f, [(torch.randn(n, 2),) for n in (8, 9, 11, 12)], 2)


def test_split_by_a_symbolic_int_and_by_sizes():
    def f(x, k):
        return x.split(k, dim=1)[0] * 2, [t.sum(0) for t in x.split([2, x.shape[0] - 2])]
    _oracle(f, [(torch.randn(n, m), k) for n, m, k in [(5, 7, 3), (7, 8, 3), (9, 9, 4)]], 1)


def test_split_sizes_summing_to_a_dim_specialise_it():
    def f(x):
        a, b = x.split([2, 3], dim=1)
        return a.sum(1) + b.sum(1)
    # Eq(s1, 5) is guarded (torch's guard too); the rows stay symbolic
    _oracle(f, [(torch.randn(n, 5),) for n in (4, 7, 9)], 1)


def test_chunk_guards_the_piece_count():
    def f(x):
        return [t * 2 for t in x.chunk(3)]
    _oracle(f, [(torch.randn(n, 2),) for n in (8, 9, 10, 13)], 1)
    shapejit.reset()
    # 4 rows make chunks of 2: two pieces, a second graph; 6 rows are three again
    _oracle(f, [(torch.randn(n, 2),) for n in (8, 9, 4, 6)], 2)


def test_unbind_specialises_the_count_only():
    def f(x):
        return [t * 2 for t in x.unbind(1)]
    _oracle(f, [(torch.randn(n, 3),) for n in (7, 8, 9)], 1)
    shapejit.reset()

    def g(x):
        return [t * 2 for t in x.unbind(0)]
    _oracle(g, [(torch.randn(n, 3),) for n in (4, 5, 4)], 2)


def test_setitem_with_symbolic_bounds():
    def f(x, i, j):
        x = x.clone()
        x[i:j] = torch.ones(j - i, x.shape[1])
        return x

    def g(x, y):
        x = x.clone()
        x[1:y.shape[0] + 1] = y
        x[:, 1:-1] = 0.5
        x[x.shape[0] // 2] = x[0]
        return x
    _oracle(f, [(torch.randn(n, 3), i, j) for n, i, j in [(7, 1, 3), (8, 2, 5), (9, 3, 7)]], 1)
    shapejit.reset()
    _oracle(g, [(torch.randn(n, 3), torch.randn(m, 3)) for n, m in [(7, 4), (8, 5), (9, 6)]], 1)


def test_conv_and_pool_over_batch_and_spatial_sizes():
    torch.manual_seed(0)
    w, w1 = torch.randn(4, 3, 3, 3), torch.randn(4, 3, 3)

    def f(x):
        y = F.conv2d(x, w, padding=1, stride=2)
        return (y, F.max_pool2d(x, 2), F.max_pool2d(x, 3, 2, 1, ceil_mode=True),
                F.avg_pool2d(x, 3, 2, 1, ceil_mode=True), F.avg_pool2d(y, 2),
                F.adaptive_avg_pool2d(x, (2, 3)), F.conv1d(x[:, :, 0], w1, stride=2))
    calls = [(torch.randn(b, 3, h, ww),) for b, h, ww in [(2, 8, 9), (3, 11, 13), (4, 16, 7), (5, 9, 10)]]
    _oracle(f, calls, 1)
    shapejit.reset()
    # batch 1 is 0/1-specialised: a second graph, as torch
    _oracle(f, calls + [(torch.randn(1, 3, 12, 12),)], 2)


def test_conv_with_a_symbolic_weight():
    def f(x, w):
        return F.conv2d(x, w, padding=1, stride=2)
    calls = [(torch.randn(b, 3, h, ww), torch.randn(4, 3, 3, 3)) for b, h, ww in [(2, 8, 9), (3, 11, 13), (4, 16, 7)]]
    _oracle(f, calls, 1)


def test_small_cnn_one_graph_across_batch_and_image_sizes():
    torch.manual_seed(0)
    cnn = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 8, 3), torch.nn.AvgPool2d(2, ceil_mode=True),
        torch.nn.AdaptiveAvgPool2d((2, 2)), torch.nn.Flatten(), torch.nn.Linear(32, 5))
    calls = [(torch.randn(b, 3, h, w),) for b, h, w in [(2, 16, 18), (3, 20, 17), (5, 33, 29), (4, 15, 15)]]
    with torch.no_grad():
        _oracle(cnn, calls, 1)


def test_symbolic_int_exponent_sign_is_guarded():
    """An int tensor to a symbolic int power: the rule relies on the exponent's sign, so
    the sign is guarded (not its value): 3 and 5 share a graph, -2 recompiles and raises
    the library's own error."""
    shapejit.reset()

    def f(x, n):
        return x ** n

    g = shapejit.compile(f, dynamic=True)
    x = torch.arange(1, 5)
    for n in (3, 5):
        assert torch.equal(g(x, n), f(x, n))
    assert shapejit.stats()["graphs"] == 1
    with pytest.raises(RuntimeError, match="negative integer powers"):
        g(x, -2)
    assert shapejit.stats()["recompiles"] == 1
    shapejit.reset()


def test_sqrt_of_a_symbolic_size_is_a_graph_float():
    """attention's 1 / math.sqrt(head_dim) under dynamic=True: a float computed in the graph
    (torch's SymFloat), so one graph serves every head size, as in torch.compile."""
    import math
    from torch._dynamo.testing import CompileCounter

    def attention(q, k, v):
        scale = 1.0 / math.sqrt(q.shape[-1])
        s = torch.matmul(q, k.transpose(-2, -1)) * scale
        return torch.matmul(torch.softmax(s, dim=-1), v)

    sizes = ((2, 16, 64), (4, 64, 64), (3, 32, 32), (2, 40, 16))
    shapejit.reset()
    g = shapejit.compile(attention, dynamic=True)
    torch._dynamo.reset()
    cnt = CompileCounter()
    tg = torch.compile(attention, backend=cnt, dynamic=True)
    for b, s, d in sizes:
        q, k, v = (torch.randn(b, 4, s, d) for _ in range(3))
        torch.testing.assert_close(g(q, k, v), attention(q, k, v), rtol=1e-4, atol=1e-5)
        tg(q, k, v)
    st = shapejit.stats()
    assert st["graph_breaks"] == 0 and st["graphs"] == cnt.frame_count == 1
    torch._dynamo.reset()
    shapejit.reset()


def _graphs_vs_torch(fn, calls, **compile_kw):
    """(shapejit graphs, torch.compile graphs) over the same calls; results equal eager."""
    from torch._dynamo.testing import CompileCounter
    shapejit.reset()
    torch._dynamo.reset()
    g = shapejit.compile(fn, **compile_kw)
    cnt = CompileCounter()
    tg = torch.compile(fn, backend=cnt, **compile_kw)
    with torch.no_grad():
        for args in calls:
            want = fn(*args)
            got = g(*args)
            for a, b in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
            tg(*args)
    out = shapejit.stats()["graphs"], cnt.frame_count
    torch._dynamo.reset()
    shapejit.reset()
    return out


def test_diff_and_addmm_keep_sizes_symbolic():
    """torch.diff with prepend (transformers' packed-sequence check) and addmm (GPT-2's
    Conv1D) used to pin their sizes: one graph per size where torch.compile needs one."""
    w, bias = torch.randn(8, 5), torch.randn(5)

    def f(x, first):
        d = torch.diff(x, prepend=first, dim=-1)
        h = torch.addmm(bias, x.view(-1, x.size(-1))[:, :8] if x.size(-1) >= 8 else x.new_zeros(1, 8), w)
        return d, h

    calls = [(torch.randn(3, 12), torch.randn(3, 1)), (torch.randn(4, 20), torch.randn(4, 1)),
             (torch.randn(6, 9), torch.randn(6, 1))]
    ours, theirs = _graphs_vs_torch(f, calls, dynamic=True)
    assert ours == theirs == 1


def test_gpt2_dynamic_sweep_matches_torch():
    import logging
    import transformers
    logging.getLogger("transformers").setLevel(logging.ERROR)
    cfg = transformers.GPT2Config(vocab_size=100, n_embd=32, n_layer=1, n_head=2, n_positions=64,
                                  use_cache=False)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = transformers.GPT2Model(cfg).eval()

    def run(ids):
        return model(input_ids=ids).last_hidden_state

    gen = torch.Generator().manual_seed(1)
    calls = [(torch.randint(0, 100, (b, s), generator=gen),) for b, s in ((3, 16), (2, 8), (4, 24), (5, 32))]
    ours, theirs = _graphs_vs_torch(run, calls, dynamic=True)
    assert ours == theirs


def test_eye_of_a_symbolic_size():
    """np.eye(n) / torch.eye(n) with n a dynamic size keep n symbolic (one graph over the
    sizes, as torch.compile), where they used to pin it."""
    import numpy as np
    from torch._dynamo.testing import CompileCounter

    def lj(pos):
        n = pos.shape[0]
        d = pos[:, None, :] - pos[None, :, :]
        r2 = (d * d).sum(axis=-1) + np.eye(n)
        inv6 = (1.0 / r2) ** 3
        return (4.0 * (inv6 * inv6 - inv6) * (1.0 - np.eye(n))).sum(axis=1)

    def teye(x):
        return x @ torch.eye(x.shape[1]) + torch.eye(x.shape[0], x.shape[1])

    shapejit.reset()
    torch._dynamo.reset()
    g, h = shapejit.compile(lj, dynamic=True), shapejit.compile(teye, dynamic=True)
    cnt = CompileCounter()
    th = torch.compile(teye, backend=cnt, dynamic=True)
    for n in (16, 27, 40):
        pos = np.random.default_rng(n).standard_normal((n, 3))
        np.testing.assert_allclose(g(pos), lj(pos), rtol=1e-10)
        x = torch.randn(n, n + 3)
        torch.testing.assert_close(h(x), teye(x))
        th(x)
    assert shapejit.stats()["graphs"] == 2 and shapejit.stats()["recompiles"] == 0
    assert cnt.frame_count == 1
    torch._dynamo.reset()
    shapejit.reset()


def test_topk_keeps_symbolic_sizes():
    """topk over or beside a symbolic dim, k static or a size: one graph over the sizes (a
    MoE router's topk over the token count used to pin it, a recompile per length)."""
    def router(x):
        v, i = torch.topk(x.softmax(-1), 2, dim=-1)
        return v / v.sum(-1, keepdim=True), i

    def half(x):
        v, i = x.topk(x.shape[0] // 2, dim=0, largest=False)
        return v * 2, i

    _check(router, _sizes(5, 9, 17, extra=(6,)), 1)
    shapejit.reset()
    _check(half, _sizes(6, 8, 11, extra=(3,)), 1)


def test_topk_past_a_symbolic_size_raises_as_eager():
    def f(x):
        return torch.topk(x, 4, dim=0).values

    cf = shapejit.compile(f, dynamic=True)
    for n in (6, 9):
        x = torch.randn(n, 2)
        torch.testing.assert_close(cf(x), f(x))
    x = torch.randn(3, 2)
    with pytest.raises(RuntimeError) as eager:
        f(x)
    with pytest.raises(RuntimeError) as compiled:
        cf(x)
    assert "out of range" in str(eager.value) and "out of range" in str(compiled.value)
