"""numpy: more constructs and kernels (callable objects, iteration over arrays, loops
with break, comprehensions, dtype-preserving float32 pipelines, ML and physics kernels)."""
import math

import numpy as np

from ._base import A, AP, numpy_case


class Scaler:
    def __init__(self, factor):
        self.factor = factor

    def __call__(self, a):
        return a * self.factor


SCALER = Scaler(3.0)


@numpy_case(lambda: (A(3, 4),))
def np_callable_object(a):
    return SCALER(a) + Scaler(0.5)(a)


@numpy_case(lambda: (A(3, 4),))
def np_for_over_array_rows(a):
    out = []
    for row in a:
        out.append(row.sum())
    return out


@numpy_case(lambda: (A(5),))
def np_while_with_break(a):
    i = 0
    while True:
        a = a * 0.5 + i
        i += 1
        if i >= 4:
            break
    return a


@numpy_case(lambda: (A(3, 4),))
def np_ternary(a):
    k = 2.0 if a.shape[0] == 3 else 0.5
    return a * k if a.ndim == 2 else a


@numpy_case(lambda: (A(3), A(3)))
def np_dict_comprehension(a, b):
    arrs = {"a": a, "b": b}
    return {k: np.cos(v) for k, v in arrs.items()}


@numpy_case(lambda: (A(2, 5),))
def np_shape_outputs(a):
    return a.shape, a.T.shape, a.reshape(-1).shape[0] * a


@numpy_case(lambda: (A(6),))
def np_horner_loop(x):
    coeffs = (1.0, -2.0, 0.5, 3.0)
    acc = np.zeros_like(x)
    for c in coeffs:
        acc = acc * x + c
    return acc


@numpy_case(lambda: (A(5, 2),))
def np_rotation(points):
    theta = math.pi / 6
    rot = np.array([[math.cos(theta), -math.sin(theta)], [math.sin(theta), math.cos(theta)]])
    return points @ rot.T


@numpy_case(lambda: (A(5, 3), A(4, 3)))
def np_pairwise_distances(x, y):
    d2 = (x ** 2).sum(axis=1)[:, None] + (y ** 2).sum(axis=1)[None, :] - 2 * x @ y.T
    return np.sqrt(np.maximum(d2, 0.0))


@numpy_case(lambda: (A(4, 6), A(4, 6)))
def np_cosine_similarity(x, y):
    num = (x * y).sum(axis=-1)
    den = np.linalg.norm(x, axis=-1) * np.linalg.norm(y, axis=-1)
    return num / np.maximum(den, 1e-8)


@numpy_case(lambda: (A(3, 8),))
def np_gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


@numpy_case(lambda: (A(2, 4, 8), A(8, 8), A(8, 8), A(8, 8)))
def np_attention(x, wq, wk, wv):
    q, k, v = x @ wq, x @ wk, x @ wv
    s = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(axis=-1, keepdims=True)
    return p @ v


@numpy_case(lambda: (A(6, 4), AP(4), A(4)))
def np_batchnorm(x, gamma, beta):
    mu = x.mean(axis=0)
    var = x.var(axis=0)
    return gamma * (x - mu) / np.sqrt(var + 1e-5) + beta


@numpy_case(lambda: (A(4), A(4)), rtol=1e-7, atol=1e-9)
def np_rk4_oscillator(pos, vel):
    def deriv(p, v):
        return v, -4.0 * p - 0.1 * v

    dt = 0.05
    k1p, k1v = deriv(pos, vel)
    k2p, k2v = deriv(pos + 0.5 * dt * k1p, vel + 0.5 * dt * k1v)
    k3p, k3v = deriv(pos + 0.5 * dt * k2p, vel + 0.5 * dt * k2v)
    k4p, k4v = deriv(pos + dt * k3p, vel + dt * k3v)
    return (pos + dt / 6 * (k1p + 2 * k2p + 2 * k3p + k4p),
            vel + dt / 6 * (k1v + 2 * k2v + 2 * k3v + k4v))


@numpy_case(lambda: (A(3, 4),))
def np_bool_predicates(a):
    b = np.where(a > -0.2, a, np.inf)
    c = np.where(a > 1.0, np.nan, a)
    return (np.isfinite(b), np.isinf(b), np.isnan(c), np.any(a > 1, axis=0),
            np.all(a < 2, axis=1), np.logical_or(a > 1, a < -1), np.count_nonzero(a > 0, axis=1))


@numpy_case(lambda: (A(4, 4, dtype=np.float32), A(4, dtype=np.float32)), rtol=1e-5, atol=1e-6)
def np_float32_pipeline(w, v):
    h = np.tanh(w @ v + 1.0)
    return h, (h * np.float32(0.5)).sum(), h.astype(np.float16).astype(np.float32)


@numpy_case(lambda: (np.arange(12).reshape(3, 4),))
def np_int_division_dtypes(i):
    return i / 4, i // 4, i * 0.5, i.mean(axis=0), np.true_divide(i, 3), i ** 2


@numpy_case(lambda: (A(3, 4), A(3, 4)))
def np_stable_logsumexp_softplus(a, b):
    m = np.max(a, axis=1, keepdims=True)
    lse = m + np.log(np.exp(a - m).sum(axis=1, keepdims=True))
    return lse, np.logaddexp(0.0, b), np.log1p(np.exp(-np.abs(b))) + np.maximum(b, 0)


@numpy_case(lambda: (A(4, 4),))
def np_inplace_on_intermediate_views(a):
    b = a + 0.0
    b[:2] *= -1
    b.T[0] += 10.0
    b[:, ::2] /= 2
    return b


@numpy_case(lambda: (A(3, 2), A(3, 2)))
def np_mse_and_grad(pred, target):
    diff = pred - target
    loss = (diff ** 2).mean()
    grad = 2 * diff / diff.size
    return loss, grad
