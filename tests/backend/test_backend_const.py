"""Values computed once in the cpu backend: nodes that read no graph input (causal masks and
position ids built from arange, comparisons, cumsum, indexing) run on the first call only,
and later calls hand the kept tensors on. Compared with eager over several calls; what must
not fold (outputs, values written in place or shared with an output, random draws, empty(),
tensor constants the caller can change, symbolic sizes) runs every call."""
import pytest
import torch
import torch.nn.functional as F

import shapejit
from lowering import lowering as _lowering

pytestmark = pytest.mark.usefixtures("fresh_shapejit")


def _stats(made, key):
    return sum(getattr(m, "stats", {}).get(key, 0) for m in made)


def _check(fn, *args, calls=3, dynamic=False):
    backend, made = _lowering()
    cf = shapejit.compile(fn, backend=backend, dynamic=dynamic)
    for _ in range(calls):
        got, want = cf(*args), fn(*args)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    return made


def causal_scores(x):
    # a transformers-style causal mask: positions, packed-sequence ids, comparisons
    b, s = 2, 9
    pos = torch.arange(s).unsqueeze(0).expand(b, -1)
    first = pos[:, :1] - 1
    seq_id = (torch.diff(pos, prepend=first, dim=-1) != 1).cumsum(-1)
    bi = torch.arange(b)[:, None, None, None]
    qi = torch.arange(s)[None, None, :, None]
    ki = torch.arange(s)[None, None, None, :]
    mask = torch.ones((), dtype=torch.bool) & (seq_id[bi, qi] == seq_id[bi, ki]) & (ki <= qi)
    return x.masked_fill(~mask, float("-inf")).softmax(-1)


def test_mask_computed_once():
    x = torch.randn(2, 3, 9, 9)
    made = _check(causal_scores, x)
    assert _stats(made, "const_nodes") >= 15
    assert _stats(made, "const_calls") == 3
    assert "diff" not in (made[0].stats.get("eager_ops") or {})


def test_kept_values_do_not_change():
    def f(x):
        return x + torch.arange(6.0) * 2
    backend, made = _lowering()
    cf = shapejit.compile(f, backend=backend)
    x = torch.randn(6)
    a = cf(x)
    a.add_(100)            # the caller writes into an output
    b = cf(x)
    assert torch.equal(b, f(x))
    assert _stats(made, "const_nodes") == 2


def test_outputs_are_not_folded():
    def f(x):
        m = torch.arange(5) * 3
        return x + 1, m
    backend, made = _lowering()
    cf = shapejit.compile(f, backend=backend)
    x = torch.randn(5)
    y, m = cf(x)
    m.add_(7)
    y2, m2 = cf(x)
    assert torch.equal(m2, torch.arange(5) * 3)
    # the output's own node runs every call; what only it reads may fold
    assert _stats(made, "const_values") <= 1


def test_output_view_of_a_folded_value_folds_nothing():
    def f(x):
        m = torch.arange(6.0) * 2
        return x + m, m.view(2, 3)
    backend, made = _lowering()
    cf = shapejit.compile(f, backend=backend)
    x = torch.randn(6)
    _, v = cf(x)
    v.mul_(0)
    got, v2 = cf(x)
    assert torch.equal(got, f(x)[0]) and torch.equal(v2, f(x)[1])
    assert _stats(made, "const_nodes") == 0


def test_in_place_write_of_a_folded_value_folds():
    def f(x):
        m = torch.zeros(4)
        m.add_(1)
        return x * m
    x = torch.randn(4)
    made = _check(f, x)
    assert _stats(made, "const_nodes") == 2


def t5_buckets(x, table):
    # T5's relative position buckets: an in-place `+=` into a value computed once, then an
    # embedding of a parameter-like input, read by nodes that run every call
    q = torch.arange(7)[:, None]
    k = torch.arange(7)[None, :]
    rel = k - q
    buckets = 0
    buckets += (rel > 0).to(torch.long) * 4
    rel = torch.abs(rel)
    large = 2 + (torch.log(rel.float() / 2) / 1.2 * 2).to(torch.long)
    large = torch.min(large, torch.full_like(large, 3))
    buckets += torch.where(rel < 2, rel, large)
    return x + F.embedding(buckets, table).permute(2, 0, 1)


def test_in_place_t5_buckets_fold():
    x, table = torch.randn(3, 7, 7), torch.randn(8, 3)
    made = _check(t5_buckets, x, table)
    assert _stats(made, "const_nodes") >= 10
    ops = made[0].stats.get("eager_ops") or {}
    assert "arange" not in ops and "where" not in ops and "full_like" not in ops


def relative_position_index(x, table):
    # BEiT's table of relative positions: meshgrid (a Python function of torch's), a stack,
    # `t[i] += v` through views and `t[i] = v` into zeros, then a lookup of a parameter-like
    # input by the table, every call
    w = (3, 4)
    coords = torch.flatten(torch.stack(torch.meshgrid(torch.arange(w[0]), torch.arange(w[1]), indexing="ij")), 1)
    rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0).contiguous()
    rel[:, :, 0] += w[0] - 1
    rel[:, :, 1] += w[1] - 1
    rel[:, :, 0] *= 2 * w[1] - 1
    n = w[0] * w[1]
    idx = torch.zeros(size=(n + 1,) * 2, dtype=rel.dtype)
    idx[1:, 1:] = rel.sum(-1)
    idx[0, 0:] = 36
    idx[0:, 0] = 37
    idx[0, 0] = 38
    return x + table[idx.view(-1)].view(n + 1, n + 1, -1).permute(2, 0, 1)


def test_table_filled_by_item_writes_folds():
    x, table = torch.randn(2, 13, 13), torch.randn(39, 2)
    made = _check(relative_position_index, x, table)
    assert _stats(made, "const_nodes") >= 20
    ops = made[0].stats.get("eager_ops") or {}
    assert "setitem" not in ops and "meshgrid" not in ops and "zeros" not in ops, ops


def test_item_write_of_an_input_into_a_table_folds_nothing_it_writes():
    def f(x):
        t = torch.zeros(4)
        t[1:3] = x[:2]        # the value written is an input: runs every call
        return t * 2 + x

    made = _check(f, torch.randn(4))
    ops = made[0].stats.get("eager_ops") or {}
    assert ops.get("setitem", 0) == 1 and ops.get("zeros", 0) == 1, ops


def test_item_write_after_a_read_every_call_folds_nothing():
    # x * t reads t before the (foldable) write: a kept t would hold the write already
    def f(x):
        t = torch.arange(4.0)
        y = x * t
        t[0] = 5.0
        return y + x * t

    made = _check(f, torch.randn(4))
    assert _stats(made, "const_nodes") == 0


def test_in_place_write_reading_an_input_folds_nothing():
    def f(x):
        m = torch.zeros(4)
        m.add_(x)
        return x * m
    made = _check(f, torch.randn(4))
    assert _stats(made, "const_nodes") == 0


def test_read_before_a_folded_in_place_write_folds_nothing():
    # y reads m before the write: a kept m (after the write) would give y a wrong value
    def f(x):
        m = torch.arange(4.0)
        y = x * m
        m.add_(1)
        return y + x * m
    made = _check(f, torch.randn(4))
    assert _stats(made, "const_nodes") == 0

    def g(x):   # the same through a view of m
        m = torch.arange(4.0)
        y = x * m.view(2, 2).reshape(4)
        m.mul_(3)
        return y + x * m
    made = _check(g, torch.randn(4))
    assert _stats(made, "const_nodes") == 0


def test_read_before_an_unrelated_in_place_write_folds():
    # y reads a (computed once) before b is written in place: a is not b, both fold
    def f(x):
        a = torch.arange(4.0) * 2
        y = x * a
        b = torch.ones(4)
        b += a
        return y + x * b
    made = _check(f, torch.randn(4))
    assert _stats(made, "const_nodes") >= 4


def test_random_and_empty_not_folded():
    def f(x):
        return x + torch.rand(4) * 0 + torch.ones(4)
    made = _check(f, torch.randn(4))
    assert _stats(made, "const_nodes") == 1    # ones only

    torch.manual_seed(0)
    backend, made = _lowering()
    cf = shapejit.compile(lambda x: x + torch.rand(4), backend=backend)
    x = torch.zeros(4)
    assert not torch.equal(cf(x), cf(x))


TABLE = torch.arange(4.0)


def test_tensor_constant_not_folded():
    def f(x):
        return x + TABLE * 2
    backend, made = _lowering()
    cf = shapejit.compile(f, backend=backend)
    x = torch.zeros(4)
    assert torch.equal(cf(x), f(x))
    TABLE.add_(1)
    try:
        assert torch.equal(cf(x), f(x))
    finally:
        TABLE.sub_(1)


def test_dynamic_sizes_not_folded():
    def f(x):
        return x * torch.arange(x.shape[0]).float()
    backend, made = _lowering()
    cf = shapejit.compile(f, backend=backend, dynamic=True)
    for n in (3, 7, 12):
        x = torch.randn(n)
        assert torch.equal(cf(x), f(x))


def test_grad_inputs_untouched():
    w = torch.randn(4, requires_grad=True)

    def f(x):
        return (x * w + torch.arange(4.0)).sum()
    backend, made = _lowering()
    cf = shapejit.compile(f, backend=backend)
    x = torch.randn(4)
    y = cf(x)
    y.backward()
    assert torch.equal(w.grad, x)
