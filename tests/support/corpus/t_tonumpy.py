"""Tensor.numpy() and torch.from_numpy() inside compiled code, with numpy code on the
array in between: both are views between the libraries (the array shares the tensor's
memory and the reverse), captured in the graph with the numpy code around them, as
torch.compile captures them (through torch._numpy)."""
import numpy as np
import torch

from ._base import A, T, TI, torch_case


@torch_case(lambda: (T(10, 10),))
def t_tonp_copy(x):
    a = x.numpy()
    return a.copy()


@torch_case(lambda: (T(10, 10),))
def t_tonp_transpose_and_T(x):
    a = x.numpy()
    return a.transpose(0, 1), a.T


@torch_case(lambda: (T(10, 10),))
def t_tonp_reshape_by_size(x):
    a = x.numpy()
    return a.reshape([1, a.size])


@torch_case(lambda: (T(10, 10),))
def t_tonp_reductions_to_numpy_scalars(x):
    a = x.numpy()
    return a.sum(), a.mean(), a.max(), a.max(axis=0), a.all(axis=0)


@torch_case(lambda: (T(10, 10), T(10, 10)))
def t_tonp_meshgrid_roundtrip(x, y):
    r1, r2 = np.meshgrid(x.numpy(), y.numpy())
    return torch.from_numpy(r1), torch.from_numpy(r2)


@torch_case(lambda: (T(10, 10),))
def t_tonp_from_numpy_then_torch_ops(x):
    a = x.numpy()
    b = torch.from_numpy(a)
    return b + 1


@torch_case(lambda: (T(10, 10),))
def t_tonp_from_numpy_transposed(x):
    return torch.from_numpy(x.numpy().T)


@torch_case(lambda: (T(10, 10),))
def t_tonp_linalg_norm_and_size(x):
    return np.linalg.norm(x.numpy(), axis=0), np.linalg.norm(x.numpy()), x.numpy().size


@torch_case(lambda: (T(10, 10),))
def t_tonp_mean_sum_asarray(x):
    m = np.mean(x.numpy(), 1)
    s = np.sum(m)
    return torch.from_numpy(np.asarray(s))


@torch_case(lambda: (T(10, 10),))
def t_tonp_array_arithmetic(x):
    a = x.numpy()
    return a + a, a - a, np.cos(a) + 1


@torch_case(lambda: (T(6, 4),))
def t_tonp_attributes(x):
    a = x.numpy()
    return a.itemsize, a.shape, a.ndim, a.size, torch.from_numpy(a.real)


@torch_case(lambda: (T(6, 4),))
def t_tonp_return_input_array(x):
    return x.numpy()


@torch_case(lambda: (T(6, 4),), mutates=True)
def t_tonp_write_through_array(x):
    a = x.numpy()
    a[0] = 0.0
    return x * 2


@torch_case(lambda: (T(6, 4),), mutates=True)
def t_tonp_write_through_from_numpy(x):
    a = np.exp(x.numpy())
    t = torch.from_numpy(a)
    t.add_(1.0)
    torch.from_numpy(x.numpy()).mul_(3.0)
    return a, t.sum()


@torch_case(lambda: (TI(5, 3),))
def t_tonp_int_cumsum(x):
    a = np.cumsum(x.numpy(), axis=0)
    return torch.from_numpy(a) * 2, a.itemsize


@torch_case(lambda: (T(4, 5, requires_grad=True),))
def t_tonp_detached_grad_input(x):
    y = (x * 2).detach()
    return torch.from_numpy(np.tanh(y.numpy())) + x.detach()


@torch_case(lambda: (T(4, 5, requires_grad=True),))
def t_tonp_no_grad_result(x):
    with torch.no_grad():
        y = x * 2
        a = y.numpy()
    return np.square(a).sum(axis=1)


@torch_case(lambda: (T(4, 5), T(5, 3)))
def t_tonp_numpy_matmul_back_to_torch(x, w):
    a = x.numpy() @ w.numpy()
    return torch.relu(torch.from_numpy(a))


@torch_case(lambda: (T(4, 5, requires_grad=True),))
def t_tonp_detach_of_grad_result(x):
    y = torch.sin(x)
    return y.detach().numpy() * 2


@torch_case(lambda: (A(3, 4, dtype=np.float32), T(3, 4)))
def t_tonp_numpy_and_torch_inputs(a, x):
    t = torch.from_numpy(a)
    return t + x, (x.numpy() + a).sum(axis=1)


@torch_case(lambda: (T(4, 5, requires_grad=True),))
def t_tonp_no_grad_of_grad_input(x):
    with torch.no_grad():
        a = x.numpy()
        return np.abs(a).max(axis=0)


@torch_case(lambda: (T(10, 10),))
def t_tonp_fftshift(x):
    return np.fft.fftshift(x.numpy())


@torch_case(lambda: (T(6, 8),))
def t_tonp_ifftshift_axis_back_to_torch(x):
    return torch.from_numpy(np.fft.ifftshift(x.numpy(), axes=1)) * 2


@torch_case(lambda: (T(4, 3),), mutates=True)
def t_tonp_asarray_of_tensor_writes_through(x):
    a = np.asarray(x)       # the tensor's __array__: its memory
    a[0] = 1.0
    return a.sum(axis=0), x * 2


@torch_case(lambda: (T(4, 3),))
def t_tonp_asarray_of_reduction(x):
    return np.asarray(x.sum(dim=1)) * np.asarray(x.max())
