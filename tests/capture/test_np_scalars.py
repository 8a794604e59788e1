"""numpy functions on numpy scalar arguments: the scalar's value is data (a new value
reuses the graph) and every result equals eager's, type and dtype included."""
import numpy as np
import pytest

import shapejit


def _same(a, b):
    assert type(a) is type(b)
    if isinstance(a, tuple):
        for x, y in zip(a, b):
            _same(x, y)
        return
    assert np.asarray(a).dtype == np.asarray(b).dtype
    np.testing.assert_allclose(a, b, rtol=1e-6, equal_nan=True)


def coeffs(img, alpha):
    k = (1.0 - np.exp(-alpha)) ** 2 / (1.0 + 2.0 * alpha * np.exp(-alpha) - np.exp(-2.0 * alpha))
    return k * img + np.exp(-2.0 * alpha), np.tanh(alpha)


@pytest.mark.parametrize("stype", [np.float64, np.float32])
def test_new_scalar_values_reuse_the_graph(stype):
    shapejit.reset()
    f = shapejit.compile(coeffs)
    img = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    for alpha in (0.25, 0.5, 1.75, -0.5):
        _same(f(img, stype(alpha)), coeffs(img, stype(alpha)))
    assert shapejit.stats()["graphs"] == 1


def test_a_branch_on_a_scalar_result_breaks_and_resumes():
    def f(x, s):
        g = np.exp(s)
        if g > 2.0:
            return x * g
        return x - g

    shapejit.reset()
    cf = shapejit.compile(f)
    x = np.arange(3.0)
    for s in (0.1, 1.5, 0.2):
        _same(cf(x, np.float64(s)), f(x, np.float64(s)))
    out = shapejit.explain(f)(x, np.float64(0.1))
    assert out.graph_break_count == 1
    assert "data-dependent" in out.break_reasons[0].reason
