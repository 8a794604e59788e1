"""The cpu backend as the backend tests drive it: every graph lowered through
_C._cg_compile_graph, and what it made kept for the test to inspect; and the comparison
of a compiled result with eager's those tests share."""
import numpy as np
import torch

from shapejit import _C

RTOL, ATOL = 1e-5, 1e-6


def lowering():
    """A backend that lowers and remembers what it made: (backend, list of compiled graphs)."""
    made = []

    def backend(graph, example_inputs):
        cg = _C._cg_compile_graph(graph)
        made.append(cg)
        return cg
    return backend, made


def close(got, want, rtol=RTOL, atol=ATOL):
    """got equals want (a tensor, an array or a tuple of them) in type, dtype and shape,
    and in value within rtol / atol (RTOL / ATOL unless given), NaN where want has NaN."""
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            close(g, w, rtol, atol)
        return
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray) and got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
        return
    assert isinstance(got, torch.Tensor) and got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)


def kernel_ops(made):
    """Per compiled graph in made, the ops of each kernel step as a list of op names (in
    node order): what the tests count fused kernels by."""
    out = []
    for cg in made:
        if isinstance(cg, _C.CompiledGraph):
            out.append([[cg.graph.nodes[i].op for i in nodes]
                        for kind, nodes in zip(cg.step_kinds, cg.step_nodes) if kind == "kernel"])
    return out
