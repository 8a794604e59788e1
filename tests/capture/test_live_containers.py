"""A live list or dict that compiled code reaches more than once (a global loaded twice,
a closure cell of two functions, an argument passed twice) is one container: every
append / item write through any path is kept, in order, as eager keeps it. When the
paths stop naming one object, the entry is not reused. Torch tensors and numpy arrays,
with and without a graph break, compared with eager and with torch.compile's graph count
where the code is torch."""
import copy

import numpy as np
import pytest
import torch

import shapejit
from graph_counter import GraphCounter

LOG = []
TABLE = {}


@pytest.fixture(autouse=True)
def _fresh(fresh_compilers):
    LOG.clear()
    TABLE.clear()


def global_list_twice(x):
    LOG.append(x.sum())
    LOG.append(x * 2)
    LOG.append(3)
    return x + len(LOG)


def global_dict_twice(x):
    TABLE["a"] = x + 1
    TABLE["b"] = x * 2
    return x + len(TABLE)


def _recorder(log):
    def record(v):
        log.append(v.sum())
    return record


REC_A, REC_B = _recorder(LOG), _recorder(LOG)


def closure_cells(x):
    REC_A(x)
    REC_B(x * 3)
    return x - 1


def global_list_with_break(x):
    LOG.append(x.sum())
    print("", end="")
    LOG.append(x * 2)
    return x + len(LOG)


def global_list_in_loop(x):
    for i in range(3):
        LOG.append(x * i)
    return x


CASES = [global_list_twice, global_dict_twice, closure_cells, global_list_with_break,
         global_list_in_loop]


def _state():
    return list(LOG), dict(TABLE)


def _same(a, b):
    if isinstance(b, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), (a, b)
        for p, q in zip(a, b):
            _same(p, q)
    elif isinstance(b, dict):
        assert list(a) == list(b)
        for k in b:
            _same(a[k], b[k])
    elif isinstance(b, (torch.Tensor, np.ndarray)):
        assert type(a) is type(b)
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)
    else:
        assert a == b and type(a) is type(b), (a, b)


def _calls(fn, compiled, lib):
    """Three calls, LOG holding 0, 1, 2 old items: compiled's results and container
    contents equal eager's."""
    for seed in range(3):
        data = np.random.default_rng(seed).standard_normal(4).astype(np.float32)
        x = torch.from_numpy(data) if lib == "torch" else data
        LOG[:] = ["old"] * seed
        TABLE.clear()
        before = _state()
        expected = fn(copy.deepcopy(x))
        eager_state = _state()
        LOG[:] = before[0]
        TABLE.clear()
        TABLE.update(before[1])
        got = compiled(x)
        _same(got, expected)
        _same(_state(), eager_state)


@pytest.mark.parametrize("lib", ["torch", "numpy"])
@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_live_container_reached_twice(fn, lib):
    _calls(fn, shapejit.compile(fn), lib)
    if lib == "torch":
        counter = GraphCounter()
        _calls(fn, torch.compile(fn, backend=counter), lib)
        assert shapejit.stats()["graphs"] <= counter.graphs, (shapejit.stats(), counter.graphs)


def test_one_list_passed_twice_then_two_lists():
    def f(x, a, b):
        a.append(x)
        b.append(x + 1)
        return len(a), len(b)

    compiled = shapejit.compile(f)
    x = torch.ones(2)
    for a, b in [("same", 1), ("same", 0), ("two", 1), ("same", 2), ("two", 0)]:
        first = ["p"] * b
        second = first if a == "same" else [0] * (b + 1)
        e_first = list(first)
        e_second = e_first if a == "same" else list(second)
        assert compiled(x, first, second) == f(x, e_first, e_second)
        assert len(first) == len(e_first) and len(second) == len(e_second)
        _same(first, e_first)
        _same(second, e_second)
