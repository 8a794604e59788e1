"""Shared by the unbacked tests: torch.compile as the oracle in the same run, and result
comparison against eager."""
import torch
import torch._dynamo
from torch._dynamo.testing import CompileCounter


def torch_graphs(fn, args, **knobs):
    """torch.compile's graph count for fn(*args) under the torch._dynamo.config knobs, and
    its result."""
    torch._dynamo.reset()
    cnt = CompileCounter()
    with torch._dynamo.config.patch(**knobs):
        out = torch.compile(fn, backend=cnt)(*args)
    torch._dynamo.reset()
    return cnt.frame_count, out


def same(a, b):
    """Equal results: tuples item by item, tensors by dtype and value, the rest by type and
    value (a float stays a float, a bool a bool)."""
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for p, q in zip(a, b):
            same(p, q)
    elif isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype
        torch.testing.assert_close(a, b)
    else:
        assert type(a) is type(b) and a == b
