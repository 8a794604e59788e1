"""numpy: dtype queries answered by constants (np.finfo, np.iinfo, result_type,
promote_types, can_cast), functools.lru_cache helpers, list repetition and slice writes on
lists of arrays, and the class of an array."""
import functools
import math

import numpy as np

from ._base import A, AI, AP, numpy_case


@numpy_case(lambda: (A(3, 4),))
def np_misc_iinfo_max(a):
    max_dim = np.iinfo(np.int16).max
    return a + max_dim, np.iinfo(np.int8).bits


@numpy_case(lambda: (AP(3, 4, dtype=np.float32),))
def np_misc_finfo_eps_log(a):
    info = np.finfo(a.dtype)
    return np.log(np.clip(a - 1.0, info.eps, None)), a + np.finfo(np.float32).min


@numpy_case(lambda: (AI(5), A(5)))
def np_misc_result_type_cast(idx, w):
    dt = np.result_type(idx, w)
    return idx.astype(dt) * w, np.result_type(idx, 1.5) == np.float64


@numpy_case(lambda: (A(4),))
def np_misc_promote_types_branch(a):
    if np.promote_types(np.int32, np.float32) == a.dtype:
        return a * 2
    return a - 1


@numpy_case(lambda: (A(4, dtype=np.float32),))
def np_misc_can_cast_branch(a):
    if np.can_cast(a.dtype, np.float64):
        return a.astype(np.float64) + 1
    return a


@functools.lru_cache(maxsize=None)
def _window(n):
    return 0.5 - 0.5 * math.cos(2 * math.pi / n)


@numpy_case(lambda: (A(8),))
def np_misc_lru_cache_helper(a):
    return a * _window(a.shape[0])


@numpy_case(lambda: (A(2, 3),))
def np_misc_list_repeat_stack(a):
    return np.stack(3 * [a]), np.concatenate([a] * 2, axis=1)


@numpy_case(lambda: (A(3),))
def np_misc_list_slice_write(a):
    rows = [a, a + 1, a + 2, a + 3]
    rows[1:3] = [a * 10]
    del rows[::2]
    return np.stack(rows)


@numpy_case(lambda: (A(3),))
def np_misc_class_name(a):
    if a.__class__.__name__ == "ndarray" and a.__class__ is np.ndarray:
        return a + 1
    return a
