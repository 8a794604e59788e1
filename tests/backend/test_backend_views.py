"""The cpu backend runs a chain of view ops whose intermediates nothing else reads as one
step (backend/step_views.c): the first run runs the nodes and records the result's layout
from the input's, later runs with an input of the same layout make it with one
torch.as_strided call. Results equal eager's in values, sizes, strides, storage and _base."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import shapejit
from lowering import lowering as _lowering

pytestmark = pytest.mark.usefixtures("fresh_shapejit")


def _same_view(got, want, x):
    assert type(got) is type(want)
    assert got.shape == want.shape and got.stride() == want.stride()
    assert got.storage_offset() == want.storage_offset()
    shares = got.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert shares == (want.untyped_storage().data_ptr() == x.untyped_storage().data_ptr())
    assert (got._base is x) == (want._base is x)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def _stats(made, key):
    return sum(m.stats[key] for m in made)


def qkv_split(p):   # nn.MultiheadAttention's split of the packed projection
    q = p.unflatten(-1, (3, 8)).unsqueeze(0).transpose(0, -2).squeeze(-2)[1]
    return q.view(5, 4, 2).transpose(0, 1).reshape(2, 2, 5, 2)


CHAINS = [
    (lambda x: x.reshape(6, 20).t().unsqueeze(1), (4, 30)),
    (lambda x: x.transpose(0, 1)[2].transpose(0, 1).view(-1, 5), (5, 3, 4)),
    (lambda x: x[-1].narrow(0, 1, 3).unsqueeze(-1).expand(3, 7, 4), (3, 5, 7)),
    (lambda x: x.permute(2, 0, 1).flatten(1).select(1, 4).unsqueeze(0), (3, 5, 7)),
    (lambda x: x.unsqueeze(0).squeeze(0).movedim(0, -1).diagonal(0, 0, 1), (4, 4, 3)),
    (qkv_split, (5, 24)),
]


@pytest.mark.parametrize("case", range(len(CHAINS)))
def test_chain_matches_eager(case):
    fn, shape = CHAINS[case]
    for make in (lambda: torch.randn(*shape), lambda: torch.randn(*reversed(shape)).t() if len(shape) == 2
                 else torch.randn(*shape)):
        shapejit.reset()
        backend, made = _lowering()

        def g(x):
            return fn(x), x * 2.0   # a kernel too, so the graph is lowered

        c = shapejit.compile(g, backend=backend)
        for _ in range(3):
            x = make()
            got, want = c(x)[0], g(x)[0]
            _same_view(got, want, x)
        copies = want.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
        assert _stats(made, "view_chains") == 1
        # recorded on the first run, as_strided after; a chain that copies runs its nodes
        assert _stats(made, "view_chain_eager_runs") == (3 if copies else 1), made[0].stats
        assert _stats(made, "view_chain_calls") == 3


def test_reshape_that_copies_stays_eager():
    """A reshape of a layout no view can give copies: the chain's result shares no memory
    with its input, so nothing is recorded and every run runs the nodes (equal to eager)."""
    def g(x):
        return x.t().reshape(-1).view(4, -1).unsqueeze(0), x + 1.0

    backend, made = _lowering()
    c = shapejit.compile(g, backend=backend)
    for _ in range(3):
        x = torch.randn(6, 8)
        got, want = c(x)[0], g(x)[0]
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        assert got.stride() == want.stride()
        assert got.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    assert _stats(made, "view_chains") == 1 and _stats(made, "view_chain_eager_runs") == 3


def test_shared_intermediate_and_outputs_not_chained():
    """An intermediate read by two ops, or returned, ends the chain there."""
    def shared(x):
        a = x.view(4, 6)
        return a.t().unsqueeze(0) + 1.0, a.sum()

    def returned(x):
        a = x.view(4, 6)
        return a, a.t().unsqueeze(0), x * 2.0

    for fn, chains in ((shared, 1), (returned, 1)):
        shapejit.reset()
        backend, made = _lowering()
        c = shapejit.compile(fn, backend=backend)
        for _ in range(2):
            x = torch.randn(24)
            for got, want in zip(c(x), fn(x)):
                torch.testing.assert_close(got, want)
        assert _stats(made, "view_chains") == chains, fn.__name__


def test_writes_through_the_chain_reach_the_input():
    """The chain's result is a view of the input: an in-place op on it after the graph
    writes into the input, as in eager."""
    def g(x):
        return x.view(3, 8).transpose(0, 1)[2:5], x * 1.0

    c = shapejit.compile(g, backend="cpu")
    for _ in range(3):
        x, xe = torch.randn(24), None
        xe = x.clone()
        c(x)[0].mul_(0)
        g(xe)[0].mul_(0)
        torch.testing.assert_close(x, xe, rtol=0, atol=0)


def test_dynamic_sizes_and_odd_shapes():
    """Chains over symbolic sizes are not taken (their layout is per size); the graph's
    values still equal eager at every size."""
    def g(x):
        return x.transpose(0, 1).unsqueeze(-1)[1:].squeeze(-1) * 3.0

    backend, made = _lowering()
    c = shapejit.compile(g, backend=backend, dynamic=True)
    for n in (3, 7, 1, 64):
        x = torch.randn(n, 5)
        torch.testing.assert_close(c(x), g(x))


@pytest.mark.parametrize("embed,seq", [(64, 32), (40, 9)])
def test_multihead_attention_views(embed, seq):
    """nn.MultiheadAttention in eval under no_grad: the q/k/v view chains and the packed
    projection's reshapes run as view-chain steps; values equal eager."""
    torch.manual_seed(0)
    m = nn.MultiheadAttention(embed, 4, batch_first=True).eval()

    def f(x):
        return m(x, x, x, need_weights=False)[0]

    backend, made = _lowering()
    c = shapejit.compile(f, backend=backend)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(2, seq, embed)
            torch.testing.assert_close(c(x), f(x), rtol=1e-4, atol=1e-5)
    assert _stats(made, "view_chains") >= 4
    assert _stats(made, "view_chain_eager_runs") == _stats(made, "view_chains")


def test_requires_grad_not_chained():
    """Views of tensors that need grad stay eager steps (autograd records each view)."""
    w = torch.randn(4, 6, requires_grad=True)

    def g(x):
        return (w.view(6, 4).t().unsqueeze(0) * x).sum()

    c = shapejit.compile(g, backend="cpu")
    x = torch.randn(4, 6)
    out = c(x)
    out.backward()
    g1 = w.grad.clone()
    w.grad = None
    g(x).backward()
    torch.testing.assert_close(g1, w.grad)


class _Drop(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.drop = nn.Linear(8, 8), nn.Dropout(0.3)

    def forward(self, x):
        return self.drop(self.lin(x)) * 2.0, F.dropout(x + 1.0, 0.5, training=False), torch.dropout(x, 0.2, False)


def test_dropout_outside_training_is_its_input():
    """Dropout in eval mode returns its input object (torch's identity): no eager step, the
    same values and the same aliasing as eager, for any size."""
    m = _Drop().eval()
    backend, made = _lowering()
    c = shapejit.compile(m, backend=backend)
    with torch.no_grad():
        for n in (3, 5, 3):
            x = torch.randn(n, 8)
            got, want = c(x), m(x)
            for a, b in zip(got, want):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
            assert got[2] is x   # torch.dropout(x, p, False) is x
    assert made and all("dropout" not in mm.stats["eager_ops"] for mm in made)


def test_dropout_in_training_still_drops():
    m = _Drop().train()
    backend, made = _lowering()
    c = shapejit.compile(m, backend=backend)
    with torch.no_grad():
        x = torch.ones(64, 8)
        got = c(x)
    assert got[0].shape == (64, 8)
    assert made and any(mm.stats["eager_ops"].get("dropout") for mm in made)


def repeat_kv(x, n=3):
    # transformers' repeat_kv: expand a new dim, then a reshape that copies
    b, h, s, d = x.shape
    return x[:, :, None, :, :].expand(b, h, n, s, d).reshape(b, h * n, s, d)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool])
def test_copying_reshape_at_the_end(dtype):
    # the chain's last node copies: later runs copy the recorded view into a new tensor
    def f(x):   # with a kernel, so the graph is lowered
        return repeat_kv(x.view(2, 5, 2, 3).transpose(1, 2)), x == x
    backend, made = _lowering()
    cf = shapejit.compile(f, backend=backend)
    x = (torch.randn(2, 5, 6) * 10).to(dtype)
    for _ in range(3):
        (got, _), (want, _) = cf(x), f(x)
        assert got.shape == want.shape and got.stride() == want.stride() and got.dtype == want.dtype
        assert torch.equal(got, want)
        assert got.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    assert _stats(made, "view_chain_copies") == 2
    # another layout of the input: the nodes again, and a new record
    xt = (torch.randn(6, 5, 2) * 10).to(dtype).permute(2, 1, 0)
    for _ in range(2):
        assert torch.equal(cf(xt)[0], f(xt)[0])


def test_copying_reshape_odd_sizes_and_empty():
    backend, made = _lowering()
    cf = shapejit.compile(lambda x: repeat_kv(x, 2) * 1.0, backend=backend)
    for shape in [(1, 3, 7, 5), (2, 1, 1, 1)]:
        x = torch.randn(*shape)
        for _ in range(2):
            torch.testing.assert_close(cf(x), repeat_kv(x, 2), rtol=0, atol=0)
    x = torch.randn(2, 3, 0, 4)
    assert cf(x).shape == (2, 6, 0, 4)


def test_copy_is_not_shared_with_later_writes():
    # the copy is a new tensor each call: writing into one result leaves the next alone
    backend, made = _lowering()
    cf = shapejit.compile(lambda x: (repeat_kv(x.transpose(1, 2)), x + 1), backend=backend)
    x = torch.randn(2, 4, 3, 5)
    a = cf(x)[0]
    b = cf(x)[0]
    b.zero_()
    c = cf(x)[0]
    assert _stats(made, "view_chain_copies") == 2
    assert torch.equal(a, repeat_kv(x.transpose(1, 2))) and torch.equal(c, a)


def test_contiguous_of_a_contiguous_view_is_in_the_chain():
    # attention's output after torch's SDPA is laid out (B, L, H, D): transpose(1, 2) is
    # contiguous, contiguous() returns it, and the chain is views only
    def f(x):
        return x.transpose(1, 2).contiguous().reshape(2, 5, -1).contiguous(), x.sum()
    backend, made = _lowering()
    cf = shapejit.compile(f, backend=backend)
    x = torch.randn(2, 5, 3, 4).transpose(1, 2)
    for _ in range(3):
        got, want = cf(x)[0], f(x)[0]
        _same_view(got, want, x)
    assert "contiguous" not in made[0].stats["eager_ops"]
    assert _stats(made, "view_chain_calls") == 6 and _stats(made, "view_chain_eager_runs") == 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 7, 1), (4, 1, 3)])
def test_contiguous_that_copies_ends_the_chain(dtype, shape):
    # Swin's window partition: a permute then contiguous() copies (copy mode), and views of
    # the copy are a chain of their own
    def f(x):
        return x.view(*shape).permute(2, 0, 1).contiguous().view(-1, shape[1]).unsqueeze(0), x == x
    backend, made = _lowering()
    cf = shapejit.compile(f, backend=backend)
    x = (torch.randn(shape[0] * shape[1] * shape[2]) * 10).to(dtype)
    for _ in range(3):
        got, want = cf(x)[0], f(x)[0]
        assert got.shape == want.shape and got.stride() == want.stride() and torch.equal(got, want)
        ptr = x.untyped_storage().data_ptr()
        assert (got.untyped_storage().data_ptr() == ptr) == (want.untyped_storage().data_ptr() == ptr)
    copies = not x.view(*shape).permute(2, 0, 1).is_contiguous()
    assert _stats(made, "view_chain_copies") == (2 if copies else 0), made[0].stats
    assert _stats(made, "view_chains") == 2
    got, want = cf(x)[0], f(x)[0]
    x.logical_not_() if dtype == torch.bool else x.add_(1)   # a copy shares nothing with x
    assert torch.equal(got, want)
    assert "contiguous" not in made[0].stats["eager_ops"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool])
def test_copy_of_a_transpose_goes_through_torch(dtype):
    # patch embeddings' flatten(2).transpose(1, 2) then a copying reshape: the view's last
    # dim is strided, so later runs copy with torch's own reshape of the recorded view
    def f(x):
        return x.flatten(2).transpose(1, 2).reshape(x.shape[0], -1), x == x
    backend, made = _lowering()
    cf = shapejit.compile(f, backend=backend, dynamic=False)
    x = (torch.randn(2, 6, 4, 5) * 10).to(dtype)
    for _ in range(3):
        got, want = cf(x)[0], f(x)[0]
        assert got.shape == want.shape and got.stride() == want.stride() and torch.equal(got, want)
        assert got.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    assert _stats(made, "view_chain_copies") == 2, made[0].stats
    x.logical_not_() if dtype == torch.bool else x.add_(1)
    assert torch.equal(cf(x)[0], f(x)[0])


def _lazy_run(f, make, calls=3):
    """f compiled vs eager on fresh inputs from make(), calls times; the compiled graphs."""
    backend, made = _lowering()
    c = shapejit.compile(f, backend=backend)
    for _ in range(calls):
        args = make()
        want = f(*[a.clone() for a in args])
        got = c(*args)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)
    return made


def test_chain_read_by_kernels_and_products_is_never_a_tensor():
    """A chain whose readers are kernels, a matmul and the attention step is handed to them
    as the input and its recorded layout (a LazyView): the recorded runs make no tensor."""
    def f(x, w):
        q = x.view(4, 48, 4, 16).transpose(1, 2)        # read by the attention step
        h = torch.nn.functional.scaled_dot_product_attention(q, q, q)
        m = x.view(192, 64).t().reshape(64, 192)         # read by a matmul
        return h.sum() + (m.t() @ w).tanh().sum() + (x.view(4, 48, 64).transpose(1, 2) * 2.0).sum()

    made = _lazy_run(f, lambda: (torch.randn(4, 48, 64), torch.randn(64, 8)))
    assert _stats(made, "view_chain_lazy") >= 2 * 2, [m.stats for m in made]
    # every call ran the compiled steps (an error in one would run the frame eagerly)
    assert _stats(made, "attention_calls") == 3 and _stats(made, "matmul_calls") == 3


def test_lazy_chain_fallbacks_make_the_tensor():
    """Readers that hand their nodes back to eager get the tensor made: an integer floor
    division by zero in the kernel, and a product whose operand has no row- or
    column-major layout (copied contiguous first)."""
    def kern(x, d):
        v = x.view(6, 10).t().unsqueeze(0)
        return v // d + 1

    backend, made = _lowering()
    c = shapejit.compile(kern, backend=backend)
    x = torch.arange(60).reshape(10, 6)
    for _ in range(3):
        torch.testing.assert_close(c(x, torch.tensor(3)), kern(x, torch.tensor(3)))
    assert _stats(made, "view_chain_lazy") >= 1
    # the graph itself (the frame would rerun eagerly after any error): eager's error
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        made[0](x, torch.tensor(0))
    torch.testing.assert_close(c(x, torch.tensor(2)), kern(x, torch.tensor(2)))
    assert _stats(made, "kernel_calls") == 5 and _stats(made, "eager_fallbacks") == 1

    def attn(x):   # q, k, v views; a NaN hands the call to torch's kernel
        q = x.view(4, 48, 4, 16).transpose(1, 2)
        return torch.nn.functional.scaled_dot_product_attention(q, q, q) * 2.0

    backend, made = _lowering()
    c = shapejit.compile(attn, backend=backend)
    x = torch.randn(4, 48, 64)
    for _ in range(2):
        torch.testing.assert_close(c(x), attn(x))
    x[1, 3, 5] = float("nan")
    torch.testing.assert_close(made[0](x)[0], attn(x), equal_nan=True)
    assert _stats(made, "attention_nonfinite") == 1 and _stats(made, "view_chain_lazy") == 2

    def prod(x, w):
        a = x.view(3, 4, 5).permute(1, 0, 2).unsqueeze(0)   # (1, 4, 3, 5): rows strided
        return a.squeeze(0).reshape(4, 3, 5)[:, :, :5] @ w

    made = _lazy_run(prod, lambda: (torch.randn(60), torch.randn(5, 7)))
    assert _stats(made, "view_chain_lazy") == 2 and _stats(made, "matmul_calls") == 3


def test_chain_read_eagerly_returned_or_written_is_a_tensor():
    """A reader that is an eager step, a returned result, or an in-place write after the
    chain keeps the tensor (the recorded as_strided)."""
    def eager_reader(x):
        v = x.view(8, 8).t().unsqueeze(0)
        return torch.cumprod(v, 2) + x.sum()

    def returned(x):
        v = x.view(8, 8).t().unsqueeze(0)
        return v, v * 2.0

    def written(x):
        v = x.view(8, 8).t().unsqueeze(0)
        x.add_(1.0)
        return v * 2.0

    for f in (eager_reader, returned, written):
        shapejit.reset()
        made = _lazy_run(f, lambda: (torch.randn(64),))
        assert _stats(made, "view_chain_lazy") == 0, f.__name__


def test_single_view_between_lowered_steps_is_lazy():
    """One view op whose readers are all lowered steps (ConvNeXt's permutes around its layer
    norm and residual, a transpose before a product) is a lazy view too; one an eager step
    or the caller reads stays an eager step (an as_strided would cost what the op does)."""
    def f(x, y, w):
        a = (x * 2.0).permute(0, 2, 3, 1)            # read by a layer norm kernel
        h = torch.nn.functional.layer_norm(a, (8,))
        b = (h @ w).permute(0, 3, 1, 2)              # read by the residual add
        return x + b, (y * 3.0).t() @ w.t()          # transposes read by a matmul

    made = _lazy_run(f, lambda: (torch.randn(2, 8, 5, 6), torch.randn(8, 4), torch.randn(8, 8)))
    assert _stats(made, "view_chains") == 4 and _stats(made, "view_chain_nodes") == 4
    assert _stats(made, "view_chain_lazy") == 4 * 2   # the first call records
    assert _stats(made, "eager_steps") == 0

    def g(x):
        v = (x * 2.0).t()
        return torch.cumprod(v, 1), v.unsqueeze(0)    # an eager reader; a returned view

    made = _lazy_run(g, lambda: (torch.randn(6, 5),))
    assert _stats(made, "view_chains") == 0 and _stats(made, "view_chain_lazy") == 0


def test_contiguous_of_a_transpose_is_contiguous_every_call():
    """A chain ending in contiguous() whose view has its last dim strided is copied by torch
    on the recorded calls: the copy is contiguous as eager's (Speech2Text's subsampler, whose
    convolution then reads it as a plain source)."""
    w = torch.randn(16, 8, 3) * 0.3

    def f(x):
        h = x.transpose(1, 2).contiguous()
        return torch.nn.functional.conv1d(h, w, padding=1), x.transpose(1, 2).contiguous()

    backend, made = _lowering()
    c = shapejit.compile(f, backend=backend)
    x = torch.randn(2, 20, 8)
    for _ in range(3):
        got, want = c(x), f(x)
        for g, e in zip(got, want):
            torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)
            assert g.is_contiguous() and g.stride() == e.stride()
    assert _stats(made, "view_chain_copies") == 4 and _stats(made, "conv_fallbacks") == 0


@pytest.mark.parametrize("batch_first", [True, False])
def test_packed_projection_copy_is_never_made(batch_first):
    """nn.MultiheadAttention's packed q/k/v projection ends in a contiguous() copy that only
    the q, k and v view chains read: from the second call the copy stays lazy and those
    chains read the projection itself with composed strides (no copy step at all), for
    nn.MultiheadAttention either way round and nn.TransformerEncoderLayer; values equal
    eager's on every call."""
    torch.manual_seed(1)
    mha = nn.MultiheadAttention(64, 4, batch_first=batch_first).eval()
    enc = nn.TransformerEncoderLayer(64, 4, 128, batch_first=batch_first).eval()
    for f in (lambda x: mha(x, x, x, need_weights=False)[0], lambda x: enc(x)):
        shapejit.reset()
        backend, made = _lowering()
        c = shapejit.compile(f, backend=backend)
        with torch.no_grad():
            for _ in range(3):
                x = torch.randn(2, 24, 64) if batch_first else torch.randn(24, 2, 64)
                torch.testing.assert_close(c(x), f(x), rtol=1e-4, atol=1e-5)
        assert _stats(made, "view_chain_copies_deferred") == 2, [m.stats for m in made]
        assert _stats(made, "view_chain_copies") == 0


def _copy_then_views(perm, views):
    def f(x):
        c = x.permute(*perm).contiguous()
        outs = []
        for v in views:
            outs.append(v(c) * 2.0)   # a kernel reads each chain
        return tuple(outs)
    return f


COPY_READERS = {   # permute of the input, the readers' chains, copies per deferred call
    "split_heads": ((1, 0, 2), [lambda c: c[0].view(6, 2, 4).transpose(0, 1),
                                lambda c: c[2].view(6, 2, 4).transpose(0, 1)], 0),
    "flatten_copy": ((1, 0, 2), [lambda c: c.view(-1)], 1),       # merges across the permute
    "slice_rows": ((2, 0, 1), [lambda c: c[1:3, ::2], lambda c: c[:, 1].t()], 0),
    "reshape_then_view": ((0, 2, 1), [lambda c: c.reshape(5, 8, 3)[:, :, 1],   # splits a dim
                                      lambda c: c.view(5, 4, 2, 3).permute(3, 0, 2, 1)], 0),
    "narrow_merge": ((1, 0, 2), [lambda c: c.narrow(0, 1, 2).reshape(2, 48)], 1),
    # a reader that copies in turn (a merge of a transposed view of the copy): the copy
    # made, then the reader's own
    "copy_of_copy": ((2, 1, 0), [lambda c: c.transpose(0, 2).flatten(1, 2),
                                 lambda c: c[:, :, 0:2:3]], 2),
}


@pytest.mark.parametrize("form", sorted(COPY_READERS))
def test_lazy_copy_composes_or_is_made(form):
    """A copy read only by view chains: each reader either composes with the copy's source
    (no tensor) or, when its record crosses a dim of the copy's source (a flatten or a
    merge of two dims the permute separated), gets the copy made; either way values and
    the kernels' results equal eager's on every call."""
    perm, views, copies = COPY_READERS[form]
    shape = {"split_heads": (6, 3, 8), "flatten_copy": (6, 3, 8), "slice_rows": (4, 3, 6),
             "reshape_then_view": (5, 3, 8), "narrow_merge": (6, 4, 8), "copy_of_copy": (2, 3, 2)}[form]
    f = _copy_then_views(perm, views)
    made = _lazy_run(f, lambda: (torch.randn(*shape),), calls=4)
    assert _stats(made, "view_chain_copies_deferred") == 3
    # the first call records; each of the three after it makes the copy once when a reader
    # does not compose (a reader after the first finds it made)
    assert _stats(made, "view_chain_copies") == 3 * copies, [m.stats for m in made]


def _random_reader(rng, c):
    """A random chain of view ops on tensor c (each kept only when torch takes it as a view)."""
    ops = []
    t = c
    for _ in range(rng.randint(1, 4)):
        kind = rng.choice(["slice", "select", "transpose", "split", "merge"])
        d = rng.randrange(t.dim())
        if kind == "slice" and t.shape[d] > 1:
            a, st = rng.randrange(t.shape[d] - 1), rng.choice([1, 2])
            op = (lambda d, a, st: lambda u: u.narrow(d, a, u.shape[d] - a)[(slice(None),) * d + (slice(None, None, st),)])(
                d, a, st)
        elif kind == "select" and t.dim() > 1:
            i = rng.randrange(t.shape[d])
            op = (lambda d, i: lambda u: u.select(d, i))(d, i)
        elif kind == "transpose" and t.dim() > 1:
            e = rng.randrange(t.dim())
            op = (lambda d, e: lambda u: u.transpose(d, e))(d, e)
        elif kind == "split" and t.shape[d] % 2 == 0 and t.shape[d] > 2:
            op = (lambda d: lambda u: u.unflatten(d, (2, u.shape[d] // 2)))(d)
        elif kind == "merge" and d + 1 < t.dim():
            op = (lambda d: lambda u: u.view(*u.shape[:d], u.shape[d] * u.shape[d + 1], *u.shape[d + 2:]))(d)
        else:
            continue
        try:
            u = op(t)
        except RuntimeError:
            continue   # not a view of this layout
        ops.append(op)
        t = u

    def reader(u):
        for op in ops:
            u = op(u)
        return u
    return reader


@pytest.mark.parametrize("seed", range(40))
def test_lazy_copy_random_readers(seed):
    """Random readers (slices with steps, selects, transposes, splits and merges) of a
    permuted copy: composed or made, every call equals eager."""
    import random
    rng = random.Random(seed)
    shape = [rng.randint(2, 6) for _ in range(3)]
    perm = list(range(3))
    rng.shuffle(perm)
    probe = torch.randn(*shape).permute(*perm).contiguous()
    readers = [_random_reader(rng, probe) for _ in range(rng.randint(1, 3))]
    f = _copy_then_views(perm, readers)
    made = _lazy_run(f, lambda: (torch.randn(*shape),), calls=3)
    assert _stats(made, "view_chain_eager_runs") >= 1


def test_kernel_and_attention_results_follow_the_copy_not_its_source():
    """A reader of a lazy copy reads the copy's source, but eager's tensor is a view of the
    copy: a kernel's result and the attention step's result are laid out from the copy's
    strides (contiguous), not the source's, on every call (`view` of them works as in
    eager)."""
    def kern(x):
        c = x.permute(1, 0, 2).contiguous()
        return c[1:] * 3.0

    B, L, H, D = 2, 9, 2, 8

    def attn(x):   # x: (B, L, 3, H, D), laid out in another order
        c = x.permute(2, 0, 1, 3, 4).contiguous()
        q, k, v = (c[i].transpose(1, 2) for i in range(3))
        return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, L, H * D)

    cases = ((kern, lambda: torch.randn(5, 4, 3)),
             (attn, lambda: torch.randn(L, 3, H, B, D).permute(3, 0, 1, 2, 4)))
    for f, make in cases:
        shapejit.reset()
        backend, made = _lowering()
        c = shapejit.compile(f, backend=backend)
        for _ in range(3):
            x = make()
            got, want = c(x), f(x)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
            assert got.stride() == want.stride(), (f.__name__, got.stride(), want.stride())
            got.view(-1)
        assert _stats(made, "view_chain_copies_deferred") == 2, f.__name__
