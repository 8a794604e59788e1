"""torch.einsum of two float32 tensors is captured as permutes, a matmul and a reshape
(capture/einsum.c), one operand that only permutes its labels as a permute; the other
forms stay einsum nodes. Every result equals eager's, under the eager and cpu backends,
static and dynamic, laid out as eager's (the order read from einsum on meta tensors)."""
import pytest
import torch

import shapejit

TWO = [
    ("ibnd,jbnd->bnij", (5, 2, 4, 8), (7, 2, 4, 8)),     # XLNet's attention scores
    ("ibnd,jbnd->ijbn", (5, 2, 4, 8), (7, 2, 4, 8)),
    ("ibh,hnd->ibnd", (5, 2, 6), (6, 4, 8)),             # XLNet's projections
    ("ibnd,hnd->ibh", (5, 2, 4, 8), (6, 4, 8)),
    ("ijbs,ibns->bnij", (5, 6, 2, 3), (5, 2, 4, 3)),     # two batch labels
    ("bhqd,bhkd->bhqk", (2, 4, 6, 8), (2, 4, 9, 8)),
    ("bnij,jbnd->ibnd", (2, 4, 5, 7), (7, 2, 4, 8)),
    ("abcd,cdef->abef", (2, 3, 4, 5), (4, 5, 6, 7)),     # two contracted, two free each
    ("ij,jk->ik", (3, 4), (4, 5)),
    ("i,j->ij", (3,), (4,)),                            # nothing contracted
    ("ijk,ijk->ij", (3, 4, 5), (3, 4, 5)),
    ("ij,ij->ij", (3, 4), (3, 4)),                       # nothing free
    ("bxd,byd->bxy", (2, 3, 4), (1, 5, 4)),              # a broadcast batch label
    ("ijk,jl->ikl", (3, 4, 5), (4, 6)),
    ("bn,nd->bd", (1, 6), (6, 5)),                       # size-1 free label
]
LEFT = [
    ("ijk,ijk->", (3, 4, 5), (3, 4, 5)),                 # batch labels summed away
    ("ii,ij->ij", (3, 3), (3, 4)),                       # a repeated label
    ("ij,jk", (3, 4), (4, 5)),                           # implicit output
    ("...ij,...jk->...ik", (2, 3, 4), (2, 4, 5)),        # ellipsis
]


def _ops(eq, a, b, backend):
    seen = []

    def be(graph, ex):
        seen.extend(str(getattr(n, "op", n)) for n in graph.nodes)
        return shapejit.backends.cpu(graph, ex) if backend == "cpu" else graph

    return seen, be


@pytest.mark.parametrize("backend", ["eager", "cpu"])
@pytest.mark.parametrize("eq,sa,sb", TWO + LEFT, ids=[c[0] for c in TWO + LEFT])
def test_two_operands(eq, sa, sb, backend):
    torch.manual_seed(0)
    a, b = torch.randn(*sa), torch.randn(*sb)

    def f(a, b):
        return torch.einsum(eq, a, b) * 2.0

    shapejit.reset()
    seen, be = _ops(eq, a, b, backend)
    got = shapejit.compile(f, backend=be)(a, b)
    torch.testing.assert_close(got, f(a, b), rtol=1e-5, atol=1e-5)
    if (eq, sa, sb) in TWO:
        assert "einsum" not in seen and "matmul" in seen, seen
        want = f(a, b)   # eager's layout (a .view() of the result works where eager's does)
        assert [st for st, n in zip(got.stride(), got.shape) if n > 1] == \
            [st for st, n in zip(want.stride(), want.shape) if n > 1]
    shapejit.reset()
    g = shapejit.compile(lambda a, b: torch.einsum(eq, [a, b]), dynamic=True, backend=backend)
    torch.testing.assert_close(g(a, b), torch.einsum(eq, [a, b]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("eq,shape", [("ijbn->bnij", (3, 4, 2, 5)), ("ij->ji", (3, 4)), ("ij->ij", (3, 4)),
                                      ("ii->i", (3, 3)), ("ij->i", (3, 4))])
def test_one_operand(eq, shape):
    torch.manual_seed(0)
    a = torch.randn(*shape)
    shapejit.reset()
    r = shapejit.compile(lambda a: torch.einsum(eq, a), backend="eager")(a)
    e = torch.einsum(eq, a)
    torch.testing.assert_close(r, e)
    assert (r.data_ptr() == a.data_ptr()) == (e.data_ptr() == a.data_ptr())   # a view when eager's is


def test_writes_through_the_permuted_view_reach_the_input():
    def f(a):
        v = torch.einsum("ij->ji", a)
        v.mul_(2.0)
        return v + 1.0

    a1 = torch.randn(3, 4)
    a2 = a1.clone()
    torch.testing.assert_close(shapejit.compile(f)(a1), f(a2))
    torch.testing.assert_close(a1, a2)
