"""Embedding lookups as steps of the cpu backend (backend/step_embed.c): F.embedding of an
int64 or int32 index tensor into a 2-D float weight copies rows into a new tensor; compared
with eager for index ranks, layouts, dtypes, threads and dynamic sizes, and an index out of
range or max_norm runs torch's own call (its error, its in-place renormalisation)."""
import pytest
import torch
import torch.nn.functional as F

import shapejit
from lowering import lowering as _lowering, close

pytestmark = pytest.mark.usefixtures("fresh_shapejit")


def _stats(made, key):
    return sum(getattr(m, "stats", {}).get(key, 0) for m in made)


def _run(fn, *args, dynamic=False, calls=2):
    backend, made = _lowering()
    cf = shapejit.compile(fn, backend=backend, dynamic=dynamic)
    for _ in range(calls):
        close(cf(*args), fn(*args))
    return cf, made


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4), ()])
@pytest.mark.parametrize("idt", [torch.int64, torch.int32])
def test_embedding_matches_eager(shape, idt, threads):
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        w = torch.randn(11, 13)
        idx = torch.randint(0, 11, shape, dtype=idt)

        def f(i, w):
            return F.embedding(i, w, padding_idx=0) * 2.0
        _, made = _run(f, idx, w)
        assert _stats(made, "embed_steps") == 1 and _stats(made, "embed_calls") == 2
        assert _stats(made, "embed_fallbacks") == 0
    finally:
        torch.set_num_threads(old)


def test_layouts_and_float64():
    w = torch.randn(6, 9, dtype=torch.float64).t()          # (9, 6), element stride 9
    idx = torch.randint(0, 9, (5, 4)).t()                   # strided indices
    _, made = _run(lambda i, w: F.embedding(i, w) + 1, idx, w)
    assert _stats(made, "embed_calls") == 2
    emb = torch.nn.Embedding(17, 8)
    with torch.no_grad():
        _, made = _run(lambda i: emb(i) * 3, torch.randint(0, 17, (2, 33)))
    assert _stats(made, "embed_calls") == 2


def test_module_parameter_under_no_grad_and_grad():
    emb = torch.nn.Embedding(10, 4)
    idx = torch.randint(0, 10, (3, 3))
    with torch.no_grad():
        _, made = _run(lambda i: emb(i), idx)
    assert _stats(made, "embed_calls") == 2
    # with grad the result requires grad: the node runs eagerly, the gradient flows
    backend, made = _lowering()
    cf = shapejit.compile(lambda i: emb(i).sum(), backend=backend)
    cf(idx).backward()
    assert emb.weight.grad is not None and _stats(made, "embed_calls") == 0


@pytest.mark.parametrize("bad", [10, -1])
def test_index_out_of_range_raises_as_eager(bad):
    w = torch.randn(10, 4)
    backend, made = _lowering()
    cf = shapejit.compile(lambda i, w: F.embedding(i, w) + 1, backend=backend)
    ok = torch.tensor([1, 2, 3])
    close(cf(ok, w), F.embedding(ok, w) + 1)
    with pytest.raises(IndexError):
        F.embedding(torch.tensor([1, bad, 3]), w)
    with pytest.raises(IndexError):
        cf(torch.tensor([1, bad, 3]), w)
    assert _stats(made, "embed_fallbacks") == 1
    close(cf(ok, w), F.embedding(ok, w) + 1)


def test_max_norm_runs_eagerly():
    w1 = torch.randn(8, 5) * 4
    w2 = w1.clone()
    idx = torch.tensor([[1, 2], [2, 7]])

    def f(i, w):
        return F.embedding(i, w, max_norm=1.0) * 1.0
    backend, made = _lowering()
    cf = shapejit.compile(f, backend=backend)
    close(cf(idx, w1), f(idx, w2))
    close(w1, w2)     # both renormalised the same rows in place
    assert _stats(made, "embed_steps") == 0


def test_dynamic_sizes():
    w = torch.randn(50, 7)

    def f(i, w):
        return F.embedding(i, w).sum(-1)
    backend, made = _lowering()
    cf = shapejit.compile(f, backend=backend, dynamic=True)
    for n in (3, 17, 40):
        idx = torch.randint(0, 50, (2, n))
        close(cf(idx, w), f(idx, w))
    cf(torch.randint(0, 50, (2, 0)), w)
    assert _stats(made, "embed_calls") >= 3
