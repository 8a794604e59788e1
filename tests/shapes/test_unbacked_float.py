"""Graph floats and bools: under capture_scalar_outputs, t.item() of a float or
bool tensor is captured (torch's unbacked SymFloat zuf<N> / SymBool u<N>): arithmetic on it
records scalar nodes, tensor ops take it as an argument, returning it gives the Python value,
a branch on it is a data-dependent break. With the knob off it breaks, naming the knob.
Graph counts equal torch.compile's in the same run; results equal eager."""
import math

import pytest
import torch

import shapejit
from unbacked_oracle import same, torch_graphs


pytestmark = pytest.mark.usefixtures("fresh_shapejit")


def arith_then_op(x, y):
    f = x.sum().item()
    g = f * 2.0 + 1
    return y * g, y / (f - 0.25)


def two_items(x, y):
    f = x.sum().item()
    g = x.max().item()
    return y * (f - g) / g, y.add(-f) ** 2


def with_size(x, y):
    f = x.mean().item()
    return y * (f * y.shape[0]), torch.add(y, f), f + y


def fill_value(x, y):
    f = x.max().item()
    return torch.full((3,), f) + y, torch.full_like(y, -f)


def clamp_where(x, y):
    f = abs(x.mean().item())
    return y.clamp(min=-f, max=f), torch.where(y > 0, y, f)


def factories_of_data(x, y):
    f = x.sum().item()
    return torch.linspace(0, f, 5), torch.tensor(f) * y


def branch(x, y):
    f = x.sum().item()
    if f > 0:   # f is live across the break: the first graph returns it
        return y * f
    return torch.full_like(y, f)


def bool_item(x, y):
    b = (x > 0).any().item()
    return y * b, torch.full((2,), b), y * (not b)


def bool_branch(x, y):
    b = (x > 0).all().item()
    if b:
        return y + 1
    return y - 1


def returns_float(x, y):
    f = x.sum().item()
    return y + 1, f, f * 2 + 1, -f


def returns_bool(x, y):
    b = (x > 0).any().item()
    f = x.sum().item()
    return y + 1, b, f > 1.0


def conversions(x, y):
    f = x.sum().item()
    return y * float(f), y * math.sqrt(abs(f)), y * int(f), y * math.floor(f), y * round(f), y * bool(f)


def int_and_float(x, y):
    n = x.long().sum().item()
    f = x.float().mean().item()
    return y * (n * f), max(f, 1.0) * y


def math_exp_breaks(x, y):
    f = x.sum().item()
    return y * math.exp(f)


def half_item(x, y):
    f = x.half().sum().item()
    return y * f, f


CASES = [arith_then_op, two_items, with_size, fill_value, clamp_where, factories_of_data, branch, bool_item, bool_branch,
         returns_float, returns_bool, conversions, int_and_float, math_exp_breaks, half_item]
INPUTS = [torch.tensor([0.5, 1.5]), torch.tensor([-2.0, 0.75])]


@pytest.mark.parametrize("knob", [False, True], ids=["off", "on"])
@pytest.mark.parametrize("xi", [0, 1], ids=["x0", "x1"])
@pytest.mark.parametrize("fn", CASES, ids=[f.__name__ for f in CASES])
def test_graph_counts_match_torch(fn, xi, knob):
    args = (INPUTS[xi], torch.randn(3, generator=torch.Generator().manual_seed(xi)))
    want = fn(*args)
    expected, tout = torch_graphs(fn, args, capture_scalar_outputs=knob)
    same(tout, want)
    with shapejit.config.patch(capture_scalar_outputs=knob):
        got = shapejit.compile(fn)(*args)
    same(got, want)
    assert shapejit.stats()["graphs"] == expected


@pytest.mark.parametrize("fn", [arith_then_op, fill_value, clamp_where, factories_of_data, bool_item, returns_float, returns_bool,
                                conversions, int_and_float, half_item])
def test_captured_whole_and_reused_across_values(fn):
    """The value changes, the sizes do not: one graph, no break, no recompile."""
    with shapejit.config.patch(capture_scalar_outputs=True):
        cf = shapejit.compile(fn)
        for a in ([0.5, 1.5], [-2.0, 0.75], [3.0, 4.0], [-1.0, -0.5]):
            x, y = torch.tensor(a), torch.randn(3)
            same(cf(x, y), fn(x, y))
    s = shapejit.stats()
    assert s["graphs"] == 1 and s["graph_breaks"] == 0 and s["recompiles"] == 0


def bool_power(x, y):
    b = (x > 0).any().item()
    return y * 2 ** b, y * b ** 2


def test_bool_power_is_an_int():
    """2 ** b is an int (a bool exponent is never negative); torch.compile 2.13 raises a
    TypeError on it (int ** SymBool), so eager is the only oracle."""
    with shapejit.config.patch(capture_scalar_outputs=True):
        cf = shapejit.compile(bool_power)
        for a in ([0.5, 1.5], [-1.0, -2.0]):
            x, y = torch.tensor(a), torch.randn(3)
            same(cf(x, y), bool_power(x, y))
    assert shapejit.stats()["graph_breaks"] == 0


def test_returned_scalars_are_python_values():
    with shapejit.config.patch(capture_scalar_outputs=True):
        out = shapejit.compile(returns_bool)(torch.tensor([0.5, 1.5]), torch.randn(3))
        assert type(out[1]) is bool and out[1] is True and out[2] is True
        out = shapejit.compile(returns_float)(torch.tensor([0.5, 1.5]), torch.randn(3))
        assert [type(v) for v in out[1:]] == [float, float, float] and out[1:] == (2.0, 5.0, -2.0)


def test_branch_is_data_dependent_and_runs_both_ways():
    with shapejit.config.patch(capture_scalar_outputs=True):
        ex = shapejit.explain(branch)(torch.tensor([0.5, 1.5]), torch.randn(3))
        (r,) = ex.break_reasons
        assert "data-dependent" in r.reason and "zuf0 > 0" in r.reason
        ex = shapejit.explain(bool_branch)(torch.tensor([0.5, 1.5]), torch.randn(3))
        (r,) = ex.break_reasons
        assert "data-dependent" in r.reason and "u0" in r.reason
        shapejit.reset()
        cf = shapejit.compile(branch)
        for a in ([0.5, 1.5], [-2.0, 0.75], [1.0, 1.0]):
            x, y = torch.tensor(a), torch.randn(3)
            same(cf(x, y), branch(x, y))


def test_knob_off_breaks_naming_the_knob():
    with shapejit.config.patch(capture_scalar_outputs=False):
        for fn in (arith_then_op, bool_item):
            shapejit.reset()
            ex = shapejit.explain(fn)(torch.tensor([0.5, 1.5]), torch.randn(3))
            (r,) = ex.break_reasons
            assert "Tensor.item()" in r.reason and "capture_scalar_outputs" in r.reason


def formats(x, y):
    f = x.sum().item()
    return y * f, "%.2f" % f, str(f)


def test_unmodelled_uses_break_and_run_in_the_interpreter():
    """Functions of the value shapejit does not model (math.exp; torch breaks there too),
    formatting, str(): a graph break, never a user exception or a wrong value."""
    with shapejit.config.patch(capture_scalar_outputs=True):
        ex = shapejit.explain(math_exp_breaks)(torch.tensor([0.5, 1.5]), torch.randn(3))
        (r,) = ex.break_reasons
        assert "math.exp" in r.reason
        shapejit.reset()
        ex = shapejit.explain(formats)(torch.tensor([0.5, 1.5]), torch.randn(3))
        assert len(ex.break_reasons) >= 1 and "user" not in ex.break_reasons[0].reason.lower()
        shapejit.reset()
        x, y = torch.tensor([0.5, 1.5]), torch.randn(3)
        same(shapejit.compile(formats)(x, y), formats(x, y))


def test_log_names_match_torch(capfd):
    shapejit.set_logs(dynamic=True)
    with shapejit.config.patch(capture_scalar_outputs=True):
        shapejit.compile(two_items)(torch.tensor([0.5, 1.5]), torch.randn(3))
        shapejit.compile(bool_item)(torch.tensor([0.5, 1.5]), torch.randn(3))
    err = capfd.readouterr().err
    assert "create_unbacked_symfloat zuf0 [-oo, oo] (f = x.sum().item()" in err
    assert "create_unbacked_symfloat zuf1 [-oo, oo] (g = x.max().item()" in err
    assert "create_unbacked_symbool u0 [0, 1] (b = (x > 0).any().item()" in err


def test_graph_code_types_and_nodes():
    graphs = []

    def backend(graph, example_inputs):
        graphs.append(graph)
        return graph

    with shapejit.config.patch(capture_scalar_outputs=True):
        shapejit.compile(returns_bool, backend=backend)(torch.tensor([0.5, 1.5]), torch.randn(3))
    (g,) = graphs
    assert "float = TensorBase.item(" in g.code and "bool = TensorBase.item(" in g.code
    assert "bool = _operator.gt(" in g.code
    assert [n.op for n in g.nodes].count("item") == 2 and "py_scalar" in [n.op for n in g.nodes]
