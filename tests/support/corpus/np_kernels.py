"""numpy: small numerical kernels (physics, statistics, ML)."""
import numpy as np

from ._base import A, AP, numpy_case


@numpy_case(lambda: (A(8, 3), A(8, 3), AP(8)), mutates=True, rtol=1e-7, atol=1e-9)
def np_nbody_step(pos, vel, mass):
    dt, eps = 0.01, 1e-2
    d = pos[None, :, :] - pos[:, None, :]
    r2 = (d ** 2).sum(axis=-1) + eps ** 2
    inv = r2 ** -1.5
    acc = (d * (mass[None, :, None] * inv[:, :, None])).sum(axis=1)
    vel += acc * dt
    pos += vel * dt
    ke = 0.5 * (mass * (vel ** 2).sum(axis=1)).sum()
    return pos, vel, ke


@numpy_case(lambda: (A(20, 4),))
def np_standardise_covariance(x):
    mu = x.mean(axis=0, keepdims=True)
    sd = x.std(axis=0, ddof=1, keepdims=True)
    z = (x - mu) / sd
    cov = z.T @ z / (x.shape[0] - 1)
    return z, cov, np.diag(cov)


@numpy_case(lambda: (A(16, 3), A(3)))
def np_linear_regression_step(x, w):
    y = x @ np.array([1.0, -2.0, 0.5]) + 0.1
    pred = x @ w
    err = pred - y
    grad = x.T @ err / x.shape[0]
    return w - 0.1 * grad, (err ** 2).mean()


@numpy_case(lambda: (A(10, 2), A(3, 2)))
def np_kmeans_assign(points, centers):
    d = ((points[:, None, :] - centers[None, :, :]) ** 2).sum(axis=-1)
    labels = d.argmin(axis=1)
    return labels, d.min(axis=1)


@numpy_case(lambda: (A(6, 6),))
def np_heat_diffusion_step(u):
    lap = np.zeros_like(u)
    lap[1:-1, 1:-1] = u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4 * u[1:-1, 1:-1]
    return u + 0.1 * lap


@numpy_case(lambda: (A(4, 5), A(5, 3), A(3)))
def np_mlp_forward(x, w, b):
    h = np.maximum(x @ w + b, 0)
    e = np.exp(h - h.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@numpy_case(lambda: (A(50),))
def np_histogram_free_stats(x):
    m = x.mean()
    c = x - m
    skew = (c ** 3).mean() / (c ** 2).mean() ** 1.5
    kurt = (c ** 4).mean() / (c ** 2).mean() ** 2 - 3
    return m, skew, kurt, np.median(x)


@numpy_case(lambda: (A(2, 6),))
def np_moving_average(x):
    k = np.ones(3) / 3
    c = np.cumsum(np.concatenate([np.zeros((x.shape[0], 1)), x], axis=1), axis=1)
    return (c[:, 3:] - c[:, :-3]) / 3, k.sum()
