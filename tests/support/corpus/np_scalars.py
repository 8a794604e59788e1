"""numpy: numpy functions on numpy scalars known only at run time (np.float64 and
np.float32 arguments, numpy scalar results): numpy treats each as a 0-d value of its own
dtype, so results keep numpy's scalar types and promotion."""
import numpy as np

from ._base import A, AP, numpy_case


@numpy_case(lambda: (A(6, 5), np.float64(0.25)))
def np_sc_recursive_filter_coefficients(img, alpha):
    # the coefficients of a recursive (Deriche-style) filter, from a scalar argument
    k = (1.0 - np.exp(-alpha)) ** 2 / (1.0 + 2.0 * alpha * np.exp(-alpha) - np.exp(-2.0 * alpha))
    a2 = k * np.exp(-alpha) * (alpha - 1.0)
    b2 = -np.exp(-2.0 * alpha)
    return k * img[:, 1:] + a2 * img[:, :-1] + b2


@numpy_case(lambda: (A(8, 4), np.float64(8.0)))
def np_sc_sqrt_of_scalar_count(data, float_n):
    mean = data.mean(axis=0)
    std = data.std(axis=0)
    return (data - mean) / (np.sqrt(float_n) * std)


@numpy_case(lambda: (A(5, dtype=np.float32), np.float32(0.5)))
def np_sc_float32_scalar_keeps_float32(x, s):
    return np.exp(s) * x + np.tanh(s)


@numpy_case(lambda: (A(5, dtype=np.float32), np.float64(0.5)))
def np_sc_float64_scalar_promotes_float32_array(x, s):
    return np.exp(s) * x


@numpy_case(lambda: (np.float64(0.3),))
def np_sc_scalar_result_returned(s):
    return np.tanh(s), np.log1p(s), np.arcsin(s)


@numpy_case(lambda: (A(4), np.float64(3.0), np.float64(4.0)))
def np_sc_two_scalar_ufunc(x, s, t):
    return np.hypot(s, t) * x, np.arctan2(s, t), np.maximum(s, t)


@numpy_case(lambda: (AP(3), np.float64(0.7)))
def np_sc_clip_scalar(x, s):
    return np.clip(s, 0.0, 0.5) * x


@numpy_case(lambda: (A(3), np.float64(0.77)))
def np_sc_floor_sign_isnan(x, s):
    return np.floor(s * 10) % 3, np.isnan(s), np.sign(-s) * x


@numpy_case(lambda: (A(3, dtype=np.float32), np.float64(1.5)))
def np_sc_power_square(x, s):
    return np.power(s, 2) + np.square(x)


@numpy_case(lambda: (A(4), np.float64(2.0)))
def np_sc_scalar_chain_then_array(x, s):
    g = np.sqrt(np.abs(np.cos(s))) + np.exp2(s)
    return x * g - np.log(g)


@numpy_case(lambda: (A(4, 3), np.float16(0.5)))
def np_sc_float16_scalar(x, s):
    return np.exp(s), x * 2.0
