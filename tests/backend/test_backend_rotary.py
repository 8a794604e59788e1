"""Rotary embeddings in the cpu backend: rotate_half, cat((-x[..., h:], x[..., :h]), -1), and
the pairs' swap of GPT-J, CodeGen and Cohere, stack((-x[..., 1::2], x[..., ::2]),
-1).flatten(-2), are read inside the pointwise kernel around them (x at rotated offsets of
its last dim) instead of slicing steps, a negation kernel and a concatenation or stack step. Compared with eager over odd
half widths, float32 and float64, non-contiguous and broadcast inputs, partial rotary (the
rotated part a slice of the head), dynamic sizes, 1 and 2 threads; forms it does not take
(the slices read elsewhere, an odd last dim, the wrong sign) keep their steps. The results
have eager's strides when the head dim is innermost in memory (q and k transposed out of
[batch, seq, heads, head_dim], as attention code makes them)."""
import random

import pytest
import torch

import shapejit
from lowering import lowering as _lowering

pytestmark = pytest.mark.usefixtures("fresh_shapejit")


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotate_every_two(x):          # GPT-J, CodeGen: the head's dims indexed one by one
    x1 = x[:, :, :, ::2]
    x2 = x[:, :, :, 1::2]
    x = torch.stack((-x2, x1), dim=-1)
    return x.flatten(-2)


def rotate_pairs(x):              # Cohere: any rank
    x1 = x[..., ::2]
    x2 = x[..., 1::2]
    return torch.stack([-x2, x1], dim=-1).flatten(-2)


ROTATIONS = {"half": rotate_half, "pairs": rotate_pairs}


def rope(q, cos, sin):
    return q * cos + rotate_half(q) * sin


def rope_pairs(q, cos, sin):
    return q * cos + rotate_every_two(q) * sin


def _run(fn, *args, dynamic=False, threads=None):
    backend, made = _lowering()
    if threads:
        shapejit.config.threads = threads
    try:
        got = shapejit.compile(fn, backend=backend, dynamic=dynamic)(*args)
    finally:
        shapejit.config.threads = 0
    want = fn(*args)
    tol = dict(rtol=1e-5, atol=1e-6) if want.dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got, want, equal_nan=True, **tol)
    return made


def _kinds(made):
    return [k for m in made for k in getattr(m, "step_kinds", ())]


def _eager_ops(made):
    ops = {}
    for m in made:
        for k, v in getattr(m, "stats", {}).get("eager_ops", {}).items():
            ops[k] = ops.get(k, 0) + v
    return ops


@pytest.mark.parametrize("head", [2, 6, 16, 22, 64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("fn", [rope, rope_pairs])
def test_rope_one_kernel(head, dtype, threads, fn):
    q = torch.randn(2, 3, 5, head, dtype=dtype)
    cos, sin = torch.randn(5, head, dtype=dtype), torch.randn(5, head, dtype=dtype)
    made = _run(fn, q, cos, sin, threads=threads)
    assert _kinds(made) == ["kernel"], _kinds(made)


def test_gptj_rotary_with_repeat_interleave_and_partial_head():
    # GPT-J's apply_rotary_pos_emb on the rotary part of the head, cat with the rest
    def f(k, sin, cos):
        k_rot, k_pass = k[:, :, :, :8], k[:, :, :, 8:]
        sin = torch.repeat_interleave(sin[:, :, None, :], 2, 3)
        cos = torch.repeat_interleave(cos[:, :, None, :], 2, 3)
        k_rot = (k_rot * cos) + (rotate_every_two(k_rot) * sin)
        return torch.cat([k_rot, k_pass], dim=-1)
    k = torch.randn(2, 7, 4, 16)
    made = _run(f, k, torch.randn(2, 7, 4), torch.randn(2, 7, 4))
    # the rotation in the kernel: no negation, no stack; the one cat step is the final cat
    assert "neg" not in _eager_ops(made) and _kinds(made).count("cat") == 1, (_kinds(made), _eager_ops(made))


def test_large_parallel_and_nonfinite():
    # past the kernels' thread threshold (32768 elements), NaN and inf carried through
    q = torch.randn(4, 8, 128, 64)
    q[0, 0, 0, 40] = float("nan")
    q[1, 2, 3, 3] = float("inf")
    q[2, 1, 0, 0] = -0.0
    cos, sin = torch.randn(128, 64), torch.randn(128, 64)
    made = _run(rope, q, cos, sin, threads=2)
    assert _kinds(made) == ["kernel"]
    made = _run(rope_pairs, q, cos, sin, threads=2)
    assert _kinds(made) == ["kernel"]


@pytest.mark.parametrize("rot", sorted(ROTATIONS))
def test_rotation_alone_and_signed_zero(rot):
    fn = ROTATIONS[rot]
    x = torch.tensor([[0.0, -0.0, 1.5, float("nan")], [float("inf"), 2.0, -0.0, 0.0]])
    backend, made = _lowering()
    got = shapejit.compile(fn, backend=backend)(x)
    want = fn(x)
    assert torch.equal(torch.signbit(got), torch.signbit(want))
    torch.testing.assert_close(got, want, equal_nan=True)
    assert _kinds(made) == ["kernel"]


def test_non_contiguous_and_broadcast():
    # q transposed (as attention heads are), cos/sin broadcast over batch and heads
    q = torch.randn(2, 7, 3, 10).transpose(1, 2)
    cos, sin = torch.randn(1, 1, 7, 10), torch.randn(7, 10)
    made = _run(rope, q, cos, sin)
    assert _kinds(made) == ["kernel"]
    made = _run(rope_pairs, q, cos, sin)
    assert _kinds(made) == ["kernel"]
    # a strided last dim
    q = torch.randn(2, 3, 5, 20)[..., ::2]
    _run(rope, q, torch.randn(5, 10), torch.randn(5, 10))
    _run(rope_pairs, q, torch.randn(5, 10), torch.randn(5, 10))


def test_partial_rotary():
    # GPT-NeoX / Phi: the first rot dims of the head rotate, the rest pass through
    def f(q, cos, sin):
        rot, pas = q[..., :6], q[..., 6:]
        return torch.cat((rope(rot, cos, sin), pas), dim=-1)
    q = torch.randn(2, 4, 9, 14)
    made = _run(f, q, torch.randn(9, 6), torch.randn(9, 6))
    assert "neg" not in _eager_ops(made)
    assert _eager_ops(made).get("cat", 0) == 0


def test_index_forms():
    def f(x):
        h = x.shape[-1] // 2
        return torch.cat([-x[:, :, h:], x[:, :, :h]], 2) * 2
    made = _run(f, torch.randn(3, 4, 8))
    assert _kinds(made) == ["kernel"]


@pytest.mark.parametrize("fn", [rope, rope_pairs])
def test_dynamic_sizes(fn):
    backend, made = _lowering()
    cf = shapejit.compile(fn, backend=backend, dynamic=True)
    for b, s in [(1, 3), (2, 17), (3, 1)]:
        q = torch.randn(b, 4, s, 12)
        cos, sin = torch.randn(s, 12), torch.randn(s, 12)
        torch.testing.assert_close(cf(q, cos, sin), fn(q, cos, sin), rtol=1e-5, atol=1e-6)


def test_forms_left_alone():
    # a slice read elsewhere too: the pattern keeps its steps, the values stay right
    def shared(x):
        h = x.shape[-1] // 2
        lo = x[..., :h]
        return torch.cat((-x[..., h:], lo), -1) * 2, lo + 1
    backend, made = _lowering()
    x = torch.randn(3, 8)
    got = shapejit.compile(shared, backend=backend)(x)
    for g, w in zip(got, shared(x)):
        torch.testing.assert_close(g, w)
    # the other sign, the other order, an odd last dim: not rotate_half
    for f, x in [(lambda x: torch.cat((x[..., 4:], -x[..., :4]), -1) + 1, torch.randn(3, 8)),
                 (lambda x: torch.cat((x[..., :4], -x[..., 4:]), -1) + 1, torch.randn(3, 8)),
                 (lambda x: torch.cat((-x[..., 3:], x[..., :3]), -1) + 1, torch.randn(3, 7))]:
        backend, made = _lowering()
        got = shapejit.compile(f, backend=backend)(x)
        torch.testing.assert_close(got, f(x))
        assert "cat" in _kinds(made)


def test_pairs_forms_left_alone():
    # the slices read elsewhere, the other sign or order, an odd last dim, the stack on
    # another dim or flattened elsewhere: not the pairs' swap, every value right
    def shared(x):
        ev = x[..., ::2]
        return torch.stack((-x[..., 1::2], ev), -1).flatten(-2) * 2, ev + 1
    forms = [(shared, torch.randn(3, 8)),
             (lambda x: torch.stack((x[..., 1::2], -x[..., ::2]), -1).flatten(-2) + 1, torch.randn(3, 8)),
             (lambda x: torch.stack((-x[..., ::2], x[..., 1::2]), -1).flatten(-2) + 1, torch.randn(3, 8)),
             (lambda x: torch.stack((-x[..., 1::2], x[..., :-1:2]), -1).flatten(-2) + 1, torch.randn(3, 7)),
             (lambda x: torch.stack((-x[..., 1::2], x[..., ::2]), -2).flatten(-2) + 1, torch.randn(3, 8)),
             (lambda x: torch.stack((-x[..., 1::2], x[..., ::2]), -1).flatten(-3) + 1, torch.randn(2, 3, 8)),
             (lambda x: torch.stack((-x[..., 2::2], x[..., :-2:2]), -1).flatten(-2) + 1, torch.randn(3, 10))]
    for f, x in forms:
        backend, made = _lowering()
        got = shapejit.compile(f, backend=backend)(x)
        want = f(x)
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            torch.testing.assert_close(g, w)
        assert "stack" in _eager_ops(made) or "cat" in _kinds(made) or "neg" in _eager_ops(made), _kinds(made)


def test_int_and_grad_left_alone():
    x = torch.arange(24).reshape(3, 8)
    backend, made = _lowering()
    got = shapejit.compile(lambda x: rotate_half(x) + 1, backend=backend)(x)
    assert torch.equal(got, rotate_half(x) + 1)
    assert "cat" in _kinds(made)


def _rope_forms():
    return {
        "q_cos_first": lambda q, cos, sin: q * cos + rotate_half(q) * sin,
        "rot_first": lambda q, cos, sin: rotate_half(q) * sin + q * cos,
        "cos_first": lambda q, cos, sin: cos * q + sin * rotate_half(q),
        "two_outputs": lambda q, cos, sin: (q * cos + rotate_half(q) * sin, rotate_half(q) * 2),
    }


@pytest.mark.parametrize("rot", sorted(ROTATIONS))
@pytest.mark.parametrize("form", sorted(_rope_forms()))
@pytest.mark.parametrize("seed", range(10))
def test_eager_strides_with_head_dim_innermost(form, seed, rot, monkeypatch):
    """q's leading dims in a random memory order (maybe with a gap), its last dim innermost;
    cos/sin broadcast over some leading dims: every result stride equals eager's."""
    monkeypatch.setitem(globals(), "rotate_half", ROTATIONS[rot])
    fn = _rope_forms()[form]
    rng = random.Random(seed * 31 + len(form))
    r = rng.choice([3, 4, 4, 5])
    shape = [rng.choice([1, 2, 3, 5]) for _ in range(r - 1)] + [rng.choice([2, 4, 6, 8])]
    order = list(range(r - 1))
    rng.shuffle(order)
    gap = rng.random() < 0.3
    phys = [shape[d] for d in order] + [shape[-1] + (2 if gap else 0)]
    base = torch.randn(*phys)
    if gap:
        base = base[..., :shape[-1]]
    inv = [order.index(d) for d in range(r - 1)] + [r - 1]
    q = base.permute(*inv)
    cshape = [s if rng.random() < 0.5 else 1 for s in shape[:-1]] + [shape[-1]]
    cshape = cshape[rng.randrange(0, r - 1):]
    cos, sin = torch.randn(*cshape), torch.randn(*cshape)
    backend, made = _lowering()
    compiled = shapejit.compile(fn, backend=backend, dynamic=False)
    for _ in range(2):
        got, want = compiled(q, cos, sin), fn(q, cos, sin)
        got = got if isinstance(got, tuple) else (got,)
        want = want if isinstance(want, tuple) else (want,)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
            assert g.stride() == w.stride(), (form, q.shape, q.stride(), cshape, g.stride(), w.stride())
    assert "cat" not in _kinds(made) and _kinds(made).count("kernel") >= 1, _kinds(made)


def test_channels_last_rotation_values():
    # the rotated dim not innermost in memory: the kernel keeps row-major loops, values equal
    q = torch.randn(2, 6, 3, 4).to(memory_format=torch.channels_last)
    made = _run(rope, q, torch.randn(3, 4), torch.randn(3, 4))
    assert "cat" not in _kinds(made)
