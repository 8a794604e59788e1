"""torch functions captured through a Python version (shapejit/_polyfills.py):
torch._higher_order_ops.associative_scan, which transformers' Mamba mixers call under a
compiler. A short static scan dim is a left fold (combine_fn on one element at a time, as
under torch's vmap: any associative combine_fn), a long or symbolic one a log-depth scan
that needs a pointwise combine_fn and breaks on another. Results equal eager's (torch's
own associative_scan) at float tolerance; what the polyfill refuses breaks and runs
torch's function."""
import pytest
import torch
from torch._higher_order_ops.associative_scan import associative_scan

import shapejit
from graph_counter import GraphCounter

pytestmark = pytest.mark.usefixtures("fresh_shapejit")


def _ssm(left, right):
    a_left, b_left = left
    a_right, b_right = right
    return a_left * a_right, a_right * b_left + b_right


def _recurrence(a, b, dim):
    """The sequential recurrence the SSM scan computes (transformers' eager path)."""
    a, b = a.movedim(dim, 0), b.movedim(dim, 0)
    state, out = torch.zeros_like(b[0]), []
    for i in range(a.shape[0]):
        state = a[i] * state + b[i]
        out.append(state)
    return torch.stack(out, 0).movedim(0, dim)


def _explain(fn, *args, **kw):
    ex = shapejit.explain(fn)(*args, **kw)
    return ex.graph_count, ex.graph_break_count, [r.reason for r in ex.break_reasons]


@pytest.mark.parametrize("backend", ["cpu", "eager"])
@pytest.mark.parametrize("n", [1, 2, 7, 32, 200])
def test_ssm_scan_is_one_graph(backend, n):
    def f(a, b):
        _, states = associative_scan(_ssm, (a, b), dim=2, combine_mode="generic")
        return states * 2 + 1

    a, b = torch.rand(2, 6, n, 3), torch.randn(2, 6, n, 3)
    got = shapejit.compile(f, backend=backend)(a, b)
    torch.testing.assert_close(got, f(a, b), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got, _recurrence(a, b, 2) * 2 + 1, rtol=1e-4, atol=1e-5)
    shapejit.reset()
    assert _explain(f, a, b)[:2] == (1, 0)
    counter = GraphCounter()
    torch._dynamo.reset()
    torch.compile(f, backend=counter)(a, b)
    torch._dynamo.reset()
    assert counter.graphs == 1


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("n", [5, 150])
def test_cumulative_forms_and_reverse(reverse, n):
    def f(x):
        s = associative_scan(lambda p, q: p + q, x, dim=-1, reverse=reverse, combine_mode="generic")
        m = associative_scan(torch.maximum, x, dim=0, reverse=reverse, combine_mode="generic")
        return s, m

    x = torch.randn(4, n)
    got = shapejit.compile(f)(x)
    want = f(x)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
    flip = (lambda t, d: t.flip(d)) if reverse else (lambda t, d: t)
    torch.testing.assert_close(got[0], flip(flip(x, [-1]).cumsum(-1), [-1]), rtol=1e-4, atol=1e-4)


def test_non_pointwise_combine_is_exact_when_short_and_breaks_when_long():
    """A 2x2 matrix product is associative but not pointwise: per element (the fold) it is
    what torch's vmap computes; on whole slices it would not be, so the long form breaks."""
    def f(x):
        return associative_scan(lambda a, b: a @ b, x, dim=1, combine_mode="generic")

    short, long = torch.randn(3, 9, 2, 2) * 0.5, torch.randn(2, 300, 2, 2) * 0.3
    torch.testing.assert_close(shapejit.compile(f)(short), f(short), rtol=1e-4, atol=1e-5)
    shapejit.reset()
    assert _explain(f, short)[:2] == (1, 0)
    shapejit.reset()
    torch.testing.assert_close(shapejit.compile(f)(long), f(long), rtol=1e-4, atol=1e-5)
    shapejit.reset()
    graphs, breaks, reasons = _explain(f, long)
    assert breaks == 1 and "is not pointwise (it calls matmul)" in reasons[0], reasons


def test_symbolic_length_takes_the_log_depth_form():
    def f(a, b):
        return associative_scan(_ssm, (a, b), dim=1, combine_mode="generic")[1]

    g = shapejit.compile(f, dynamic=True)
    for n in (20, 23, 29, 31):
        a, b = torch.rand(2, n, 3), torch.randn(2, n, 3)
        torch.testing.assert_close(g(a, b), _recurrence(a, b, 1), rtol=1e-4, atol=1e-5)
    st = shapejit.stats()
    assert st["graph_breaks"] == 0 and st["graphs"] == 1, st   # 16 < n <= 32: one graph


def test_errors_eager_raises_still_raise():
    def pointwise_on_cpu(x):
        return associative_scan(lambda p, q: p + q, x, dim=0)   # combine_mode='pointwise' needs CUDA

    def bad_dim(x):
        return associative_scan(lambda p, q: p + q, x, dim=5, combine_mode="generic")

    x = torch.randn(4, 3)
    for fn in (pointwise_on_cpu, bad_dim):
        with pytest.raises(Exception) as eager:
            fn(x)
        with pytest.raises(type(eager.value)):
            shapejit.compile(fn)(x)


def test_pointwise_call_outside_capture_is_the_call():
    from shapejit import _C
    assert _C._pointwise_call(lambda a, b: a * b, 3, 4) == 12
    assert _C._static_int(7) == 7
