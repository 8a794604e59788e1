"""numpy: ufuncs, reductions with axis/keepdims, reshape/transpose/.T, concatenate/stack,
where, dot/matmul/@, astype, broadcasting, linalg.norm, einsum, factories."""
import numpy as np

from ._base import A, AP, AI, AB, numpy_case


@numpy_case(lambda: (A(3, 4), AP(3, 4)))
def np_ufuncs_unary(a, p):
    return (np.exp(a), np.log(p), np.sqrt(p), np.sin(a), np.cos(a), np.tanh(a),
            np.abs(a), np.square(a), np.log1p(p), np.expm1(a), np.floor(a), np.ceil(a),
            np.sign(a), np.reciprocal(p), np.arctan(a), np.log2(p), np.exp2(a))


@numpy_case(lambda: (A(3, 4), AP(3, 4)))
def np_ufuncs_binary(a, p):
    return (np.add(a, p), np.subtract(a, 1), np.multiply(a, p), np.divide(a, p),
            np.power(p, 1.5), np.maximum(a, p), np.minimum(a, 0), np.arctan2(a, p),
            np.hypot(a, p), np.fmod(a, p), np.greater(a, p), np.logical_and(a > 0, p > 1))


@numpy_case(lambda: (A(3, 4, 5),))
def np_reductions_axis(a):
    return (a.sum(), a.sum(axis=1), np.sum(a, axis=(0, 2)), a.mean(axis=-1),
            np.mean(a, axis=0, keepdims=True), a.max(axis=1), np.min(a, axis=-1, keepdims=True),
            a.prod(axis=2), a.var(axis=1), np.std(a, axis=-1, ddof=1), a.argmax(axis=1),
            np.argmin(a, axis=2), a.any(axis=0), (a > 0).all(axis=-1))


@numpy_case(lambda: (A(3, 4),))
def np_full_reductions_scalars(a):
    return a.sum(), a.mean(), np.max(a), a.min(), a.std(), np.prod(a[0]), a.argmax()


@numpy_case(lambda: (AI(3, 4),))
def np_integer_reductions(a):
    return a.sum(axis=0), a.mean(axis=1), a.max(), np.cumsum(a, axis=1), a.sum(dtype=np.float32)


@numpy_case(lambda: (A(2, 3, 4),))
def np_reshape_transpose(a):
    return (a.reshape(6, 4), a.reshape(-1), np.reshape(a, (2, 12)), a.transpose(2, 0, 1),
            np.transpose(a), a.T, a.swapaxes(0, 1), np.moveaxis(a, 0, -1), a.ravel(),
            a.flatten(), np.expand_dims(a, 1), a[:, :1].squeeze(1), np.squeeze(a[None]))


@numpy_case(lambda: (A(2, 3), A(2, 3), A(4, 3)))
def np_concatenate_stack(a, b, c):
    return (np.concatenate([a, b]), np.concatenate((a, b), axis=1), np.concatenate([a, c]),
            np.stack([a, b]), np.stack((a, b), axis=-1), np.vstack([a, c]), np.hstack([a, b]),
            np.split(c, 2)[1])


@numpy_case(lambda: (A(3, 4), A(3, 4), AB(3, 4)))
def np_where_clip(a, b, m):
    return np.where(m, a, b), np.where(a > 0, a, 0.0), np.clip(a, -0.5, 0.5), a.clip(min=0)


@numpy_case(lambda: (A(3, 4), A(4, 5), A(4)))
def np_dot_matmul(a, b, v):
    return a @ b, np.dot(a, b), np.matmul(a, b), a.dot(v), v @ v, np.dot(v, v), np.outer(v, v), np.inner(a, a)


@numpy_case(lambda: (A(2, 3, 4), A(2, 4, 5)))
def np_batched_matmul(a, b):
    return a @ b, np.matmul(a, b[0])


@numpy_case(lambda: (A(3, 4), AI(3, 4)))
def np_astype(a, i):
    return (a.astype(np.float32), a.astype(np.int64), i.astype(np.float64) / 3,
            (a > 0).astype(np.int32), a.astype("float32"), i.astype(a.dtype) + a,
            np.asarray(a, dtype=np.float32))


@numpy_case(lambda: (A(3, 1), A(1, 4), A(4)))
def np_broadcasting(a, b, c):
    return a + b, a * c, b - c, np.broadcast_to(a, (3, 4)), (a + b) / c


@numpy_case(lambda: (A(3, 4, dtype=np.float32), A(3, 4)))
def np_mixed_dtype_promotion(f32, f64):
    return f32 + f64, f32 * 2, f32 * 2.5, f32 + np.float64(1.0), f32.sum(axis=0) + 1, np.ones(3, np.int32) + f32[0, :3]


@numpy_case(lambda: (A(4, 3),))
def np_linalg_norm(a):
    return (np.linalg.norm(a), np.linalg.norm(a, axis=1), np.linalg.norm(a, axis=0, keepdims=True),
            np.linalg.norm(a[0]), np.linalg.norm(a, ord=1, axis=1))


@numpy_case(lambda: (A(3, 4), A(4, 2), A(2, 3, 4)))
def np_einsum(a, b, c):
    return (np.einsum("ij,jk->ik", a, b), np.einsum("ij->j", a), np.einsum("ij,ij->i", a, a),
            np.einsum("bij,jk->bik", c, b), np.einsum("ii->", a[:, :3]))


@numpy_case(lambda: (A(3, 4),))
def np_factories(a):
    return (np.zeros((3, 4)), np.ones(3, dtype=np.float32), np.arange(5), np.arange(1.0, 4.0, 0.5),
            np.full((2, 2), 7.0), np.zeros_like(a), np.ones_like(a, dtype=np.int64), np.full_like(a, 3),
            np.eye(3), np.linspace(0, 1, 5), np.array([1.0, 2.0]) * a[0, :2], np.empty_like(a).shape)


@numpy_case(lambda: (A(4, 5),))
def np_cumulative_sort(a):
    return np.cumsum(a, axis=1), a.cumprod(axis=0), np.sort(a, axis=1), np.argsort(a, axis=-1), np.tril(a), np.triu(a, 1), np.diff(a, axis=1)


@numpy_case(lambda: (A(3, 4),))
def np_softmax_layernorm(a):
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    sm = e / e.sum(axis=-1, keepdims=True)
    mu = a.mean(axis=-1, keepdims=True)
    var = a.var(axis=-1, keepdims=True)
    return sm, (a - mu) / np.sqrt(var + 1e-5)


@numpy_case(lambda: (A(3, 4),))
def np_scalar_types(a):
    return a * np.float32(2.0) + np.int64(3), np.float64(a.shape[0]) * a
