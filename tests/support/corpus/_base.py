"""Registry and input helpers for the capture corpus.

Every corpus module decorates its functions with ``torch_case`` or ``numpy_case``.
An entry holds the function, a factory for its (seeded, random) arguments and what
shapejit is expected to do with it (static shapes):

- ``fullgraph``: compile with ``fullgraph=True`` (the whole frame must be captured);
- ``graphs`` / ``breaks``: expected ``shapejit.explain`` counts for one call;
- ``mutates``: the function mutates (some of) its inputs in place.

Non-tensor arguments made by a factory must not depend on the seed: the second call of
the corpus test uses a different seed and expects a cache hit.
"""
import dataclasses
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np
import torch

_TORCH_GEN = torch.Generator().manual_seed(0)
_NP_RNG = np.random.default_rng(0)


def reseed(seed: int) -> None:
    global _NP_RNG
    _TORCH_GEN.manual_seed(seed)
    _NP_RNG = np.random.default_rng(seed)


# ---- torch inputs -------------------------------------------------------------------
def T(*shape, dtype=torch.float32, requires_grad=False):
    """Standard normal tensor."""
    t = torch.randn(*shape, generator=_TORCH_GEN).to(dtype)
    if requires_grad:
        t.requires_grad_(True)
    return t


def TP(*shape, dtype=torch.float32):
    """Positive tensor in [0.5, 1.5) (for log/sqrt/division)."""
    return (torch.rand(*shape, generator=_TORCH_GEN) + 0.5).to(dtype)


def TI(*shape, low=0, high=10, dtype=torch.int64):
    return torch.randint(low, high, shape, generator=_TORCH_GEN, dtype=dtype)


def TB(*shape):
    return torch.rand(*shape, generator=_TORCH_GEN) > 0.5


# ---- numpy inputs -------------------------------------------------------------------
def A(*shape, dtype=np.float64):
    return _NP_RNG.standard_normal(shape).astype(dtype)


def AP(*shape, dtype=np.float64):
    return (_NP_RNG.random(shape) + 0.5).astype(dtype)


def AI(*shape, low=0, high=10, dtype=np.int64):
    return _NP_RNG.integers(low, high, size=shape).astype(dtype)


def AB(*shape):
    return _NP_RNG.random(shape) > 0.5


# ---- registry -----------------------------------------------------------------------
@dataclasses.dataclass
class Entry:
    name: str
    fn: Callable
    args: Callable[[], Tuple]
    lib: str                      # "torch" or "numpy"
    module: str                   # corpus module (category)
    kwargs: Optional[Callable[[], Dict[str, Any]]] = None
    fullgraph: bool = True
    graphs: int = 1
    breaks: int = 0
    mutates: bool = False
    reads_data: bool = False      # a value read from tensor data reaches a resume function as
                                  # a constant: new data recompiles it (when the value is specialised)
    rtol: float = 1e-5
    atol: float = 1e-6
    rng: bool = False             # draws from torch's global generator: eager and compiled
                                  # calls start from the same state and must leave it equal
    new_module: bool = False      # makes an nn.Module with parameters per call: the resume
                                  # function after the construction guards the module by
                                  # identity, so every call recompiles it

    def make(self, seed: int):
        """(args, kwargs) for one call, reproducible from ``seed``."""
        reseed(seed)
        args = tuple(self.args())
        kwargs = dict(self.kwargs()) if self.kwargs is not None else {}
        return args, kwargs

    def __repr__(self):
        return f"<corpus {self.name}>"


REGISTRY: Dict[str, Entry] = {}


def _case(lib, args, *, kwargs=None, fullgraph=True, graphs=1, breaks=0, mutates=False,
          reads_data=False, rtol=1e-5, atol=1e-6, rng=False, new_module=False):
    if not callable(args):
        raise TypeError("args must be a factory (a callable returning a tuple)")

    def deco(fn):
        name = fn.__name__
        if name in REGISTRY:
            raise ValueError(f"duplicate corpus entry {name}")
        if breaks and fullgraph:
            raise ValueError(f"{name}: an entry with breaks cannot be fullgraph")
        REGISTRY[name] = Entry(name=name, fn=fn, args=args, lib=lib,
                               module=fn.__module__.rsplit(".", 1)[-1], kwargs=kwargs,
                               fullgraph=fullgraph, graphs=graphs, breaks=breaks,
                               mutates=mutates, reads_data=reads_data, rtol=rtol, atol=atol, rng=rng,
                               new_module=new_module)
        return fn
    return deco


def torch_case(args, **kw):
    return _case("torch", args, **kw)


def numpy_case(args, **kw):
    return _case("numpy", args, **kw)


def with_breaks(lib, args, *, graphs, breaks, **kw):
    """An entry with graph breaks: the frame is split around each one (``graphs`` graphs
    and ``breaks`` breaks for one call, over every frame the call compiles)."""
    return _case(lib, args, fullgraph=False, graphs=graphs, breaks=breaks, **kw)
