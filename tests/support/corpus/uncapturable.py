"""Entries with an instruction shapejit cannot capture: the frame is split there (one graph
before the break, one in the resume function after it), as torch.compile does."""
import zlib

import numpy as np
import torch

from ._base import A, AP, T, TP, numpy_case, torch_case, with_breaks


@with_breaks("torch", lambda: (T(4),), graphs=2, breaks=1)
def t_uncap_print(x):
    y = x + 1
    print("shapejit corpus: print inside a compiled frame")
    return y * 2


@with_breaks("torch", lambda: (TP(4),), graphs=2, breaks=1, reads_data=True)
def t_uncap_item_branch(x):
    y = x * 2
    if y.max().item() > 0.5:
        return y + 1
    return y - 1


@with_breaks("torch", lambda: (TP(4),), graphs=2, breaks=1)
def t_uncap_tensor_bool_branch(x):
    y = torch.sin(x)
    if y.sum() > 0:
        return y + 1
    return y - 1


@with_breaks("torch", lambda: (T(4),), graphs=2, breaks=1)
def t_uncap_unknown_c_function(x):
    y = x * 3
    n = zlib.crc32(b"shapejit")
    return y + n % 7


@torch_case(lambda: (T(4), T(4)))
def t_generator_expression(x, y):
    z = x * y
    return sum(v * 2 for v in (x, y, z))


@with_breaks("torch", lambda: (T(6),), graphs=2, breaks=1, reads_data=True)
def t_uncap_nonzero_dynamic_shape(x):
    y = x + 1
    return y[y > 1].sum()


@with_breaks("numpy", lambda: (A(4),), graphs=2, breaks=1)
def np_uncap_print(a):
    b = a + 1
    print("shapejit corpus: print inside a compiled frame")
    return b * 2


@with_breaks("numpy", lambda: (AP(4),), graphs=2, breaks=1)
def np_uncap_sum_branch(a):
    b = np.sin(a)
    if b.sum() > 0:
        return b + 1
    return b - 1


@with_breaks("numpy", lambda: (AP(4),), graphs=2, breaks=1, reads_data=True)
def np_uncap_item_branch(a):
    b = a * 2
    if b.max().item() > 0.5:
        return b + 1
    return b - 1


@with_breaks("numpy", lambda: (A(4),), graphs=2, breaks=1)
def np_uncap_unknown_c_function(a):
    b = a * 3
    n = zlib.crc32(b"shapejit")
    return b + n % 7


@numpy_case(lambda: (A(4), A(4)))
def np_generator_expression(a, b):
    c = a * b
    return sum(v * 2 for v in (a, b, c))


@with_breaks("torch", lambda: (torch.tensor([1, 5]), T(8)), graphs=0, breaks=1)
def t_uncap_tensor_slice_bound(r, c):
    y = c * 2
    return y[r[0]:r[1]] + 1


@with_breaks("numpy", lambda: (np.array([1, 5], dtype=np.int32), A(8)), graphs=0, breaks=1)
def np_uncap_array_slice_bound(r, c):
    y = c * 2
    return y[r[0]:r[1]] + 1


@with_breaks("numpy", lambda: (A(3),), graphs=2, breaks=1)
def np_uncap_global_random(a):
    b = a * 2
    noise = np.random.rand(3)   # numpy's global generator: runs in the interpreter
    return b + noise * 0.0


@with_breaks("numpy", lambda: (A(4),), graphs=2, breaks=1)
def np_uncap_random_choice_then_ops(a):
    b = np.sqrt(np.abs(a))
    k = np.random.randint(0, 1)   # always 0
    return b[k:] + 1
