"""Graph breaks that split frames (numpy): the same constructs as t_breaks."""
import zlib

import numpy as np

from ._base import A, AP, with_breaks


def _say(*parts):
    print("shapejit corpus:", *parts)


@with_breaks("numpy", lambda: (A(4),), graphs=1, breaks=1)
def np_brk_print_first(a):
    _say("first")
    return np.sin(a) * 2


@with_breaks("numpy", lambda: (A(4),), graphs=3, breaks=2)
def np_brk_two_prints(a):
    b = np.sin(a)
    _say("one")
    c = np.cos(b)
    _say("two")
    return b + c


@with_breaks("numpy", lambda: (A(4),), graphs=2, breaks=1)
def np_brk_value_on_stack(a):
    return (np.exp(a) + 1) * (zlib.crc32(b"np") % 5 + 1)


def _np_helper(b):
    _say("helper")
    return b * 2


@with_breaks("numpy", lambda: (A(4),), graphs=3, breaks=2)
def np_brk_in_helper(a):
    b = np.tanh(a)
    return _np_helper(b) + 1


@with_breaks("numpy", lambda: (A(4),), graphs=2, breaks=1)
def np_brk_branch(a):
    b = np.abs(a) + 0.1
    if b.sum() > 0:
        return b * 2
    return b * 3


@with_breaks("numpy", lambda: (-AP(4),), graphs=2, breaks=1)
def np_brk_branch_false(a):
    if a.sum() > 0:
        return a * 2
    return a * 3


@with_breaks("numpy", lambda: (A(4),), graphs=1, breaks=1)
def np_brk_for_range(a):
    for i in range(3):
        a = a * 2 + i
        _say("iteration", i)
    return a


@with_breaks("numpy", lambda: (A(4),), graphs=1, breaks=1)
def np_brk_while(a):
    i = 0
    while i < 3:
        a = a - 1
        _say("while", i)
        i += 1
    return a


@with_breaks("numpy", lambda: (A(4), A(4)), graphs=2, breaks=1)
def np_brk_star_args(*arrs):
    s = arrs[0] + arrs[1]
    _say("star", len(arrs))
    return s * 2


@with_breaks("numpy", lambda: (A(4),), kwargs=lambda: {"scale": 2.0}, graphs=2, breaks=1)
def np_brk_kwonly(a, *, scale):
    b = a * scale
    _say("kwonly")
    return b + scale


@with_breaks("numpy", lambda: (A(4),), graphs=2, breaks=1, reads_data=True)
def np_brk_item(a):
    b = np.exp(a)
    m = b.max().item()
    return b / m


@with_breaks("numpy", lambda: (A(3, 4),), graphs=2, breaks=1, reads_data=True)
def np_brk_tolist(a):
    b = a.sum(axis=0)
    n = len(b.tolist())
    return b * n
