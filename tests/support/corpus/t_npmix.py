"""torch tensors meeting numpy mechanisms: boolean masks, numpy ufuncs applied to tensors,
Tensor.numpy(), and a branch on one element's value. Graph counts are compared with
torch.compile's (torch._dynamo.explain) in the same run; where shapejit differs on purpose
the entry is in ORACLE_DIFFERENCES."""
import numpy as np
import torch

from ._base import T, TB, torch_case, with_breaks


# ---- boolean masks (torch.compile breaks on x[mask] unless
# capture_dynamic_output_shape_ops is set; tests/capture/test_np_mech.py sets it) -----------------
@with_breaks("torch", lambda: (T(4, 5),), graphs=2, breaks=1, reads_data=True)
def t_npmix_mask_select(x):
    return x[x > 0.5] * 2


@torch_case(lambda: (T(4, 5),), mutates=True)
def t_npmix_mask_assign_scalar(x):
    x[x < 0] = 0
    return x * 2


@torch_case(lambda: (T(6, 3), TB(6)), mutates=True)
def t_npmix_mask_assign_rows(x, m):
    x[m] = x.mean()
    return x.sum(dim=1)


@with_breaks("torch", lambda: (T(4, 5),), graphs=2, breaks=1, mutates=True, reads_data=True)
def t_npmix_mask_inplace_scale(x):
    x[x < 0] *= 2
    return x + 1


# ---- numpy ufuncs on torch tensors (eager returns a torch tensor via __array_wrap__) ----
@torch_case(lambda: (T(4, 5),))
def t_npmix_np_sin_tensor(x):
    return np.sin(x) + 1


@torch_case(lambda: (T(3, 4), T(3, 4)))
def t_npmix_np_binary_tensor(x, y):
    return np.add(x, 1.5) * np.maximum(y, 0.0)


@torch_case(lambda: (T(3, 4, dtype=torch.float64),))
def t_npmix_np_unary_chain_double(x):
    return np.sqrt(np.abs(x)) - np.square(np.tanh(x))


# ---- Tensor.numpy() ---------------------------------------------------------------------
@torch_case(lambda: (T(4, 5),))
def t_npmix_tensor_numpy(x):
    return np.cos(x.numpy()) + 1


# ---- a branch on one element's value ----------------------------------------------------
@with_breaks("torch", lambda: (T(4, 3),), graphs=2, breaks=1, reads_data=True)
def t_npmix_branch_on_element(x):
    v = x[1, 0]
    y = x * 3
    if v > 0.5:
        return y + v
    return y - 1


@with_breaks("torch", lambda: (T(4, 5), T(4, 5), TB(4, 5)), graphs=1, breaks=1, mutates=True,
             reads_data=True)
def t_npmix_mask_assign_from_other(x, y, m):
    x[m] = y[m]
    return x + 1


@torch_case(lambda: (T(3, 4),))
def t_npmix_np_ufunc_on_element(x):
    return np.tanh(x[0, 1]) * x


@with_breaks("torch", lambda: (T(3, 4),), graphs=2, breaks=1, reads_data=True)
def t_npmix_mask_then_numpy_ufunc(x):
    pos = x[x > 0]
    return np.log1p(pos) if pos.numel() else pos
