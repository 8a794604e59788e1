"""A compiled frame whose result rebuild fails after it has written into an input list or
dict: the error propagates with the writes applied once, as in eager code. The frame is
not run a second time (that would apply its writes twice)."""
import dataclasses
from collections import OrderedDict

import numpy as np
import pytest
import torch

import shapejit


@pytest.fixture(autouse=True)
def _fresh():
    shapejit.reset()
    yield
    shapejit.reset()


def _total(a):
    return float(a.sum())


@dataclasses.dataclass
class Out(OrderedDict):
    """A record (transformers' ModelOutput shape) whose constructor checks the data."""
    a: object = None

    def __post_init__(self):
        if _total(self.a) < 0:
            raise ValueError("negative total")
        self["a"] = self.a


def append_then_record(lst, x):
    lst.append(x.shape[0])
    return Out(a=x + 1)


def dict_then_record(d, x):
    d["n"] = d.get("n", 0) + 1
    return Out(a=x * 2)


def append_record_then_break(lst, x):
    lst.append(len(lst))
    o = Out(a=x - 1)
    print(end="")   # a graph break: the record crosses it
    return o


def extend_in_loop_then_record(lst, x):
    for i in range(3):
        lst.append(i)
        x = x + i
    return Out(a=x)


def _run(fn, container, x):
    try:
        return fn(container, x), None
    except ValueError as e:
        return None, str(e)


@pytest.mark.parametrize("fn,empty", [
    (append_then_record, list),
    (dict_then_record, dict),
    (append_record_then_break, list),
    (extend_in_loop_then_record, list),
])
@pytest.mark.parametrize("lib", ["torch", "numpy"])
def test_rebuild_error_after_writes_runs_once(fn, empty, lib):
    make = (lambda v: torch.full((3,), v)) if lib == "torch" else (lambda v: np.full(3, v))
    cf = shapejit.compile(fn)
    # positive values first (the entry is compiled and reused), then data that makes the
    # record's constructor raise under the same guards
    for v in (1.0, 2.0, -5.0, 3.0, -7.0):
        ce, cc = empty(), empty()
        re_, ee = _run(fn, ce, make(v))
        rc, ec = _run(cf, cc, make(v))
        assert ec == ee, (v, ec, ee)
        assert cc == ce, (v, cc, ce)   # the writes happened exactly as often as in eager
        if re_ is not None:
            assert type(rc) is type(re_)
            np.testing.assert_allclose(np.asarray(rc["a"]), np.asarray(re_["a"]))
