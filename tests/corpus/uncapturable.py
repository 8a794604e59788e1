"""Entries this issue deliberately cannot capture. Until graph breaks that split a frame
exist, each runs its whole frame eagerly with one recorded break (graphs=0, breaks=1),
and must still give eager's results. torch.compile splits these frames instead; see
ORACLE_DIFFERENCES."""
import zlib

import numpy as np
import torch

from ._base import A, T, numpy_case, torch_case, uncapturable


@uncapturable("torch", lambda: (T(4),))
def t_uncap_print(x):
    y = x + 1
    print("shapejit corpus: print inside a compiled frame")
    return y * 2


@uncapturable("torch", lambda: (T(4),))
def t_uncap_item_branch(x):
    y = x * 2
    if y.max().item() > 0.5:
        return y + 1
    return y - 1


@uncapturable("torch", lambda: (T(4),))
def t_uncap_tensor_bool_branch(x):
    y = torch.sin(x)
    if y.sum() > 0:
        return y + 1
    return y - 1


@uncapturable("torch", lambda: (T(4),))
def t_uncap_unknown_c_function(x):
    y = x * 3
    n = zlib.crc32(b"shapejit")
    return y + n % 7


@torch_case(lambda: (T(4), T(4)))
def t_generator_expression(x, y):
    z = x * y
    return sum(v * 2 for v in (x, y, z))


@uncapturable("torch", lambda: (T(6),))
def t_uncap_nonzero_dynamic_shape(x):
    y = x + 1
    return y[y > 1].sum()


@uncapturable("numpy", lambda: (A(4),))
def np_uncap_print(a):
    b = a + 1
    print("shapejit corpus: print inside a compiled frame")
    return b * 2


@uncapturable("numpy", lambda: (A(4),))
def np_uncap_sum_branch(a):
    b = np.sin(a)
    if b.sum() > 0:
        return b + 1
    return b - 1


@uncapturable("numpy", lambda: (A(4),))
def np_uncap_item_branch(a):
    b = a * 2
    if b.max().item() > 0.5:
        return b + 1
    return b - 1


@uncapturable("numpy", lambda: (A(4),))
def np_uncap_unknown_c_function(a):
    b = a * 3
    n = zlib.crc32(b"shapejit")
    return b + n % 7


@numpy_case(lambda: (A(4), A(4)))
def np_generator_expression(a, b):
    c = a * b
    return sum(v * 2 for v in (a, b, c))
