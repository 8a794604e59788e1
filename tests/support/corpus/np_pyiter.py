"""numpy: Python iteration idioms inside compiled frames: functools.reduce, map, filter,
sorted with key, zip(strict=True), reversed, the itertools, min/max with key, math
functions of sizes."""
import functools
import itertools
import math
import operator

import numpy as np

from ._base import A, AP, numpy_case


@numpy_case(lambda: ([A(3, 3), A(3, 3), A(3, 3)],))
def np_it_reduce_matmul_chain(mats):
    return functools.reduce(np.matmul, mats)


@numpy_case(lambda: (A(4), A(4)))
def np_it_reduce_lambda_initial(a, b):
    return functools.reduce(lambda acc, t: acc * 0.5 + t, [a, b, a - b], np.zeros(4))


@numpy_case(lambda: (A(2, 3, 4),))
def np_it_reduce_operator_mul_size(a):
    n = functools.reduce(operator.mul, a.shape)
    return a.reshape(n) / n


@numpy_case(lambda: ([A(3), A(3), A(3)],))
def np_it_map_lambda(xs):
    return list(map(lambda v: v ** 2 - 1, xs))


@numpy_case(lambda: (A(3), A(3)))
def np_it_map_numpy_function(a, b):
    return np.stack(list(map(np.tanh, (a, b, a * b))))


@numpy_case(lambda: (A(3, 4), None, A(4)))
def np_it_filter_optional_arrays(a, skip, bias):
    terms = [t for t in filter(lambda t: t is not None, (a, skip, bias))]
    return functools.reduce(operator.add, terms)


@numpy_case(lambda: (A(4, 2), A(1, 2), A(3, 2)))
def np_it_sorted_by_rows(a, b, c):
    return np.concatenate(sorted((a, b, c), key=lambda t: t.shape[0], reverse=True))


@numpy_case(lambda: ([A(3), A(3)], [AP(3), AP(3)]))
def np_it_zip_strict_weights(xs, ws):
    return sum(x * w for x, w in zip(xs, ws, strict=True))


@numpy_case(lambda: (A(3),))
def np_it_zip_strict_mismatch_caught(a):
    try:
        for x, y in zip([a, a], [a], strict=True):
            a = a + x * y
    except ValueError as e:
        return a, str(e)
    return a, ""


@numpy_case(lambda: (A(2, 2, 3),))
def np_it_product_indices(a):
    return np.stack([a[i, j] * (i - j) for i, j in itertools.product(range(2), repeat=2)])


@numpy_case(lambda: ([A(2), A(2)], A(2)))
def np_it_chain(xs, y):
    return np.concatenate(list(itertools.chain(xs, [y])))


@numpy_case(lambda: ([A(3), A(3), A(3)],))
def np_it_combinations_distances(pts):
    return [np.sqrt(((p - q) ** 2).sum()) for p, q in itertools.combinations(pts, 2)]


@numpy_case(lambda: ([A(3), A(3), A(3)],))
def np_it_accumulate_product(xs):
    return list(itertools.accumulate(xs, operator.mul))


@numpy_case(lambda: ([A(2), A(2), A(2), A(2)],))
def np_it_islice_head(xs):
    return np.stack(list(itertools.islice(xs, 2)))


@numpy_case(lambda: ([A(3), A(3)],))
def np_it_count_enumerate_zip(xs):
    return [v * k + i for (i, v), k in zip(enumerate(xs), itertools.count(10, -3))]


@numpy_case(lambda: (A(3, 7),))
def np_it_math_on_sizes(a):
    rows, cols = a.shape
    return a * math.sqrt(cols) / math.prod(a.shape) + math.ceil(cols / rows) - math.floor(math.log(cols))


@numpy_case(lambda: (A(2, 5), A(4, 5)))
def np_it_max_key_and_reversed(a, b):
    wide = max([a, b], key=len)
    return [t.sum(0) for t in reversed((a, wide))]
