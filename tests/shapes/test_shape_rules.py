"""Differential test of the shape and dtype rules (shapes/*.c) against the real libraries.

For every row of vocab/callables.def (listed by _C._callable_rows()) we build example
arguments for the row's op family, run the real callable, and check that _C._infer
predicts the dtype, shape and numpy-scalar-ness of every output. When eager raises,
_infer must raise ValueError too. A case marked `refuse` is one eager accepts but the
rules refuse on purpose (data-dependent shapes, dtypes shapejit does not have).
"""
import operator
import random
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from shapejit import _C

warnings.filterwarnings("ignore")

ROWS = _C._callable_rows()
RNG = random.Random(1234)

TORCH_DTYPES = {
    "bool": torch.bool, "uint8": torch.uint8, "int8": torch.int8, "int16": torch.int16,
    "int32": torch.int32, "int64": torch.int64, "float16": torch.float16,
    "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64,
    "complex64": torch.complex64, "complex128": torch.complex128,
}
SUPPORTED = set(TORCH_DTYPES) | {"uint16", "uint32", "uint64"}   # the wide unsigned ones: numpy only
MAIN_DTYPES = ["float32", "float64", "int64", "int32", "bool", "float16"]


class Case:
    def __init__(self, args, kwargs=None, refuse=False):
        self.args = tuple(args)
        self.kwargs = dict(kwargs or {})
        self.refuse = refuse


def resolve(path):
    head, rest = path.split(".", 1)
    obj = {"torch": torch, "numpy": np, "operator": operator, "Tensor": torch.Tensor,
           "ndarray": np.ndarray}[head]
    for part in rest.split("."):
        obj = getattr(obj, part)
    return obj


def mk(lib, dtype, shape, lo=1, hi=4):
    """A tensor/array with values in [lo, hi] (positive: keeps integer ops defined)."""
    n = int(np.prod(shape)) if shape else 1
    if dtype == "bool":
        # all True: integer division by a bool tensor must not hit a data-dependent zero
        vals = np.ones(n, dtype=bool)
    elif dtype.startswith(("int", "uint")):
        vals = np.array([RNG.randint(lo, hi) for _ in range(n)], dtype=np.int64)
    else:
        vals = np.array([RNG.uniform(lo, hi) for _ in range(n)], dtype=np.float64)
    vals = vals.reshape(shape)
    if lib == "torch":
        return torch.tensor(vals).to(TORCH_DTYPES[dtype])
    return vals.astype(dtype)


def npscalar(dtype, v=2):
    return np.dtype(dtype).type(v)


def describe(v):
    if isinstance(v, torch.Tensor):
        return (str(v.dtype).replace("torch.", ""), tuple(v.shape), False)
    if isinstance(v, np.ndarray):
        return (str(v.dtype), tuple(v.shape), False)
    if isinstance(v, np.generic):
        return (str(v.dtype), (), True)
    raise TypeError(type(v))


def outputs_of(res):
    if isinstance(res, (tuple, list)):
        return [describe(r) for r in res]
    # torch.return_types (max with dim) are tuples; handled above
    return [describe(res)]


def lib_of(kind):
    return "numpy" if kind in ("CK_NUMPY", "CK_NDARRAY_METHOD") else "torch"


# ---------------------------------------------------------------------------------------
# example builders per op family: builder(lib, row) -> list of Case

SHAPES = [(2, 3), (), (0,), (1, 4)]


def unary_cases(lib, row, extra=(), kw=None, dtypes=None, shapes=None):
    cases = []
    for dt in dtypes or (MAIN_DTYPES + ["uint8", "int8", "complex64"]):
        for sh in shapes or SHAPES:
            cases.append(Case([mk(lib, dt, sh), *extra], kw))
    if lib == "numpy" and row[1] == "CK_NUMPY":
        cases.append(Case([npscalar("float32"), *extra], kw))
        cases.append(Case([npscalar("int16"), *extra], kw))
    return cases


def binary_pairs(lib):
    out = []
    for dt in MAIN_DTYPES + ["uint8", "int8", "complex64"]:
        out.append((mk(lib, dt, (2, 3)), mk(lib, dt, (2, 3))))
    mixed = [("int64", "float32"), ("int32", "float16"), ("uint8", "int8"), ("bool", "int64"),
             ("float16", "float32"), ("int32", "float64"), ("bool", "float32"),
             ("int8", "int16"), ("float32", "complex64")]
    for a, b in mixed:
        out.append((mk(lib, a, (2, 1, 3)), mk(lib, b, (4, 3))))
        out.append((mk(lib, b, (4, 3)), mk(lib, a, (2, 1, 3))))
    for dt in ["int64", "int32", "float32", "bool", "float16", "uint8"]:
        for s in [2, 2.5, True, 1j]:
            out.append((mk(lib, dt, (3,)), s))
        out.append((3, mk(lib, dt, (3,))))
    # 0-d operands: weak in torch when their category is not higher, strong in numpy
    out.append((mk(lib, "float32", (3,)), mk(lib, "float64", ())))
    out.append((mk(lib, "int32", (3,)), mk(lib, "int64", ())))
    out.append((mk(lib, "int32", (3,)), mk(lib, "float64", ())))
    out.append((mk(lib, "int64", ()), mk(lib, "float16", ())))
    out.append((mk(lib, "int8", (2,)), mk(lib, "int64", (0, 1))))
    if lib == "numpy":
        out.append((mk(lib, "int32", (3,)), npscalar("float64", 1)))
        out.append((npscalar("float32"), 2.0))
        out.append((npscalar("int8"), npscalar("int16")))
        out.append((mk(lib, "float32", (3,)), 2.0))
        out.append((mk(lib, "int8", (3,)), 300))
    out.append((mk(lib, "int64", (3,)), -1))
    return out


def binary_cases(lib, row):
    kind = row[1]
    libs = ["torch", "numpy"] if kind == "CK_OPERATOR" else [lib]
    cases = []
    for l in libs:
        for a, b in binary_pairs(l):
            if kind in ("CK_TENSOR_METHOD", "CK_NDARRAY_METHOD") and not isinstance(
                    a, (torch.Tensor, np.ndarray)):
                continue
            if kind == "CK_TORCH" and not isinstance(a, torch.Tensor) and not isinstance(
                    b, torch.Tensor):
                continue
            cases.append(Case([a, b]))
    return cases


def compare_cases(lib, row):
    return binary_cases(lib, row)


def where_cases(lib, row):
    cases = []
    path = row[2]
    for a, b in [("float32", "float32"), ("int64", "float32"), ("int32", "int64"),
                 ("bool", "bool"), ("float16", "float64")]:
        cond = mk(lib, "bool", (2, 1, 3))
        x, y = mk(lib, a, (4, 3)), mk(lib, b, (3,))
        if path == "Tensor.where":
            cases.append(Case([x, cond, y]))
        else:
            cases.append(Case([cond, x, y]))
            cases.append(Case([cond, x, 2.5]))
    if path != "Tensor.where":
        cases.append(Case([mk(lib, "int64", (3,)), mk(lib, "float32", (3,)), 1.0]))
    return cases


def masked_fill_cases(lib, row):
    return [Case([mk(lib, dt, (2, 3)), mk(lib, "bool", m), v])
            for dt in MAIN_DTYPES for m in [(2, 3), (3,), (1, 3)] for v in [0.5, 1]] + [
        Case([mk(lib, "float32", (3,)), mk(lib, "bool", (2, 3)), 0.0]),
        Case([mk(lib, "float32", (2, 3)), mk(lib, "int64", (2, 3)), 0.0]),
    ]


def lerp_cases(lib, row):
    return [Case([mk(lib, dt, (2, 3)), mk(lib, dt, (3,)), w])
            for dt in ["float32", "float64", "float16", "int64"] for w in [0.5, mk(lib, dt, (1,))]]


def clamp_cases(lib, row):
    cases = []
    for dt in MAIN_DTYPES + ["uint8"]:
        x = mk(lib, dt, (2, 3))
        cases.append(Case([x, 0, 3]))
        cases.append(Case([x, 0.5, 2.5]))
        cases.append(Case([x], {"max": 2}))
        cases.append(Case([x, mk(lib, "float32", (3,)), None]))
        if lib == "torch":   # one bound: clamp's min, or clamp_min's / clamp_max's own
            cases.append(Case([x, 0.5]))
            cases.append(Case([x, mk(lib, "float32", (3,))]))
    if lib == "torch":
        cases.append(Case([mk(lib, "float32", (2,))]))
    if row[1] == "CK_NUMPY":
        cases.append(Case([npscalar("float64"), 0, 1]))
    return cases


def cast_cases(lib, row):
    path = row[2]
    x_list = [mk(lib, dt, (2, 3)) for dt in MAIN_DTYPES]
    if path == "Tensor.to":
        c = []
        for x in x_list:
            c += [Case([x, torch.float16]), Case([x], {"dtype": torch.int32}),
                  Case([x, mk(lib, "float64", (1,))]), Case([x, "cpu"]),
                  Case([x, "cpu", torch.bool]), Case([x, torch.device("cpu")]),
                  Case([x], {"device": "cpu", "dtype": torch.float64})]
        return c
    if path == "Tensor.type":
        return [Case([x, d]) for x in x_list for d in [torch.float64, torch.int32]] + [Case([x_list[0]], refuse=True)]
    if path == "Tensor.type_as":
        return [Case([x, mk(lib, d, (1,))]) for x in x_list for d in MAIN_DTYPES]
    if path == "ndarray.astype":
        return [Case([x, d]) for x in x_list for d in
                [np.float32, "float16", np.dtype("int64"), bool, float, int, "i4"]]
    return [Case([x]) for x in x_list]


def reduce_cases(lib, row):
    path, op = row[2], row[3]
    cases = []
    dim_name = "dim" if lib == "torch" else ("axis" if "norm" not in path else "axis")
    keep_name = "keepdim" if lib == "torch" else "keepdims"
    dims = [None, 0, -1, (0, 2), 1]
    if op in ("argmax", "argmin", "logsumexp", "cumsum", "cumprod", "softmax", "log_softmax"):
        dims = [None, 0, -1, 1]
    if path.startswith("torch.") and op in ("prod",):
        dims = [None, 0, -1]
    for dt in MAIN_DTYPES + ["uint8", "int8", "complex64"]:
        for sh in [(2, 3, 4), (3,), ()]:
            x = mk(lib, dt, sh)
            for d in dims:
                if d is not None and sh == () and lib == "numpy":
                    continue
                if isinstance(d, tuple) and len(sh) < 3:
                    continue
                if d is not None and not isinstance(d, tuple) and abs(d) + (d >= 0) > max(len(sh), 1):
                    continue
                kw = {}
                if d is None:
                    args = [x]
                    if op in ("logsumexp", "cumsum", "cumprod", "softmax", "log_softmax") and \
                            lib == "torch" and "functional" not in path:
                        continue
                else:
                    args = [x]
                    kw[dim_name] = d
                cases.append(Case(args, kw))
                if d is not None and op not in ("cumsum", "cumprod", "softmax", "log_softmax"):
                    cases.append(Case(args, {**kw, keep_name: True}))
    # empty dims
    x0 = mk(lib, "float32", (2, 0))
    cases.append(Case([x0], {dim_name: 1} if op not in ("all",) else {}))
    cases.append(Case([x0], {dim_name: 0}))
    if op in ("sum", "prod", "mean", "cumsum", "cumprod", "softmax", "log_softmax") and \
            "functional" not in path and "special" not in path:
        dtype = torch.float64 if lib == "torch" else np.float64
        cases.append(Case([mk(lib, "int32", (2, 3))], {dim_name: 0, "dtype": dtype}))
    if op in ("std", "var"):
        x = mk(lib, "float32", (2, 3))
        if lib == "torch":
            cases += [Case([x], {"correction": 0}), Case([x, 1, False]), Case([x, False])]
            if path.startswith("torch."):
                cases.append(Case([x], {"dim": 1, "unbiased": False, "keepdim": True}))
        else:
            cases.append(Case([x], {"ddof": 1, "axis": 0}))
    if op == "norm":
        x = mk(lib, "float32", (2, 3))
        if lib == "torch":
            cases += [Case([x, 2]), Case([x, 1, 0]), Case([x], {"p": "fro", "dim": (0, 1)})]
        else:
            cases += [Case([x, "fro"]), Case([x, 2, 1]), Case([mk(lib, "int64", (3,))])]
    if lib == "numpy" and row[1] == "CK_NUMPY" and op not in ("softmax",):
        cases.append(Case([npscalar("float32")]))
    if op in ("sum", "prod") and lib == "numpy":
        cases += [Case([mk(lib, "uint8", (3,))]), Case([mk(lib, "uint32", (3,))])]   # in uint64
    return cases


def max_min_cases(lib, row):
    cases = reduce_cases(lib, row)
    if lib == "torch":
        for dt in ["float32", "int64", "bool"]:
            x = mk(lib, dt, (2, 3))
            cases += [Case([x]), Case([x, 1]), Case([x, 0, True]), Case([x, -1], {"keepdim": False}),
                      Case([x, mk(lib, "float64", (3,))])]
    return cases


def view_cases(lib, row):
    path = row[2]
    x = mk(lib, "float32", (2, 3, 4))
    shapes = [(6, 4), (-1,), (4, -1, 3), (24,), (2, 12), (5, -1), (1, 24, 1), (0, -1)]
    cases = []
    method = row[1] in ("CK_TENSOR_METHOD", "CK_NDARRAY_METHOD")
    for s in shapes:
        cases.append(Case([x, s]))
        if method:
            cases.append(Case([x, *s]))
    cases.append(Case([mk(lib, "int64", ()), (1, 1)]))
    cases.append(Case([mk(lib, "bool", (0, 3)), (-1, 0)], ))
    if path == "Tensor.view":
        cases.append(Case([x, torch.Size([4, 6])]))
    return cases


def permute_cases(lib, row):
    x = mk(lib, "float32", (2, 3, 4))
    method = row[1] in ("CK_TENSOR_METHOD", "CK_NDARRAY_METHOD")
    cases = []
    for p in [(2, 0, 1), (0, 1, 2), (-1, 0, 1), (0, 0, 1), (0, 1)]:
        cases.append(Case([x, p]))
        if method:
            cases.append(Case([x, *p]))
    if lib == "numpy":
        cases.append(Case([x]))
        if row[1] == "CK_NUMPY":
            cases.append(Case([npscalar("float32")]))
    return cases


def transpose_cases(lib, row):
    x = mk(lib, "float32", (2, 3, 4))
    return [Case([x, a, b]) for a, b in [(0, 1), (-1, 0), (1, 1), (0, 3)]]


def t_cases(lib, row):
    return [Case([mk(lib, "float32", s)]) for s in [(2, 3), (3,), (), (2, 3, 4)]]


def unsqueeze_cases(lib, row):
    x = mk(lib, "float32", (2, 3))
    cases = [Case([x, d]) for d in [0, 1, 2, -1, -3, 3, -4]]
    if lib == "numpy":
        cases += [Case([x, (0, 2)]), Case([x, (0, -1)]), Case([npscalar("float64"), 0])]
    return cases


def squeeze_cases(lib, row):
    x = mk(lib, "float32", (1, 3, 1))
    cases = [Case([x]), Case([x, 0]), Case([x, -1]), Case([x, 1]), Case([x, (0, 2)]),
             Case([mk(lib, "float32", ())])]
    return cases


def flatten_cases(lib, row):
    x = mk(lib, "float32", (2, 3, 4))
    path = row[2]
    cases = [Case([x]), Case([mk(lib, "int64", ())]), Case([mk(lib, "float32", (0, 3))])]
    if path.endswith("flatten") and lib == "torch":
        cases += [Case([x, 1]), Case([x, 0, 1]), Case([x, -2, -1]), Case([x, 2, 1])]
    return cases


def gather_cases(lib, row):
    x = mk(lib, "float32", (3, 4))

    def ix(dt, shape):   # in-range index values (0 or 1)
        return mk(lib, dt, shape, lo=0, hi=1)
    return [Case([x, 1, ix("int64", (3, 2))]), Case([x, 0, ix("int64", (2, 4))]), Case([x, -1, ix("int64", (3, 2))]),
            Case([x, 1, ix("int64", (4, 2))]), Case([x, 1, ix("int32", (3, 2))]), Case([x, 1, ix("int64", (3,))])]


def new_factory_cases(lib, row):
    x = mk(lib, "float32", (2, 3))
    i = mk(lib, "int64", (2,))
    if row[2] == "Tensor.new_full":
        return [Case([x, (2, 4), 1.5]), Case([i, (3,), 2]), Case([x, (2, 2), 1], {"dtype": torch.int32}),
                Case([x, (), 0.0])]
    return [Case([x, (2, 4)]), Case([x, 2, 4]), Case([i, (3,)]), Case([x, (0, 2)]), Case([x, []]),
            Case([x, (2,)], {"dtype": torch.float64}), Case([x, (-1, 2)])]


def diff_cases(lib, row):
    x = mk(lib, "float32", (3, 5))
    cases = [Case([x]), Case([x, 2]), Case([x, 1, 0]), Case([x, 7]), Case([mk(lib, "int64", (4,))]),
             Case([mk(lib, "float32", ())]), Case([mk(lib, "bool", (4,))]), Case([x, 0])]
    if lib == "torch":
        p = mk(lib, "float32", (3, 2))
        cases += [Case([x], {"prepend": p}), Case([x], {"append": p, "prepend": p}),
                  Case([x, 1, 0], {"prepend": mk(lib, "float32", (1, 5))}),
                  Case([x], {"prepend": mk(lib, "float32", (2, 2))}),
                  Case([x], {"prepend": mk(lib, "float64", (3, 2))})]
    return cases


def sort_cases(lib, row):
    x = mk(lib, "float32", (3, 5))
    cases = [Case([x]), Case([x, 0]), Case([x, -1]), Case([mk(lib, "int64", (4,))]), Case([x, 2]),
             Case([mk(lib, "float32", ())])]
    if lib == "numpy":
        cases.append(Case([x, None]))
    else:
        cases += [Case([x, 1, True]), Case([x], {"stable": True})]
    return cases


def topk_cases(lib, row):
    x = mk(lib, "float32", (3, 5))
    return [Case([x, 2]), Case([x, 3, 0]), Case([x, 5]), Case([x, 6]), Case([x, 0]), Case([x, 2, 1, False]),
            Case([mk(lib, "float32", ()), 1])]


def inner_cases(lib, row):
    a, b = mk(lib, "float32", (2, 3)), mk(lib, "float64", (4, 3))
    v = mk(lib, "int32", (3,))
    return [Case([a, b]), Case([v, v]), Case([a, v]), Case([mk(lib, "float32", ()), a]),
            Case([a, mk(lib, "float32", (3, 2))]), Case([mk(lib, "float32", (2, 2, 3)), b])]


def diag_cases(lib, row):
    return [Case([mk(lib, "float32", (3,))]), Case([mk(lib, "int64", (3,)), 2]), Case([mk(lib, "float32", (3,)), -1]),
            Case([mk(lib, "float32", (3, 4))]), Case([mk(lib, "float32", (3, 4)), 2]),
            Case([mk(lib, "float32", (3, 4)), -5]), Case([mk(lib, "float32", (2, 2, 2))])]


def vstack_cases(lib, row):
    a, c = mk(lib, "float32", (3,)), mk(lib, "float32", (2, 3))
    return [Case([[a, a]]), Case([(c, a)]), Case([[mk(lib, "int32", (3,)), mk(lib, "float64", (3,))]]),
            Case([[a, mk(lib, "float32", (4,))]]), Case([[mk(lib, "float32", ()), mk(lib, "float32", ())]]),
            Case([[mk(lib, "float32", (2, 3, 4)), mk(lib, "float32", (1, 3, 4))]])]


def diagonal_cases(lib, row):
    x = mk(lib, "float32", (3, 5))
    y = mk(lib, "float32", (2, 3, 4))
    return [Case([x]), Case([x, 1]), Case([x, -2]), Case([x, 7]), Case([y, 0, 1, 2]), Case([y, 1, 0, 2]),
            Case([y, 0, 2, 0]), Case([x, 0, 0, 0]), Case([mk(lib, "float32", (4,))])]


def unflatten_cases(lib, row):
    x = mk(lib, "float32", (2, 12, 3))
    return [Case([x, 1, (3, 4)]), Case([x, 1, (3, -1)]), Case([x, -1, (3, 1)]), Case([x, 0, (2,)]),
            Case([x, 1, (5, -1)]), Case([x, 1, (-1, -1)]), Case([x, 1, (2, 2)]),
            Case([mk(lib, "int64", (0, 4)), 1, (2, 2)])]


def expand_cases(lib, row):
    x = mk(lib, "float32", (3, 1))
    cases = [Case([x, (2, 3, 4)]), Case([x, (3, 5)]), Case([x, (4, 5)]), Case([x, (3,)])]
    if lib == "torch":
        cases += [Case([x, 2, -1, 4]), Case([x, -1, 3, 4]), Case([x, 3, 1])]
    return cases


def expand_as_cases(lib, row):
    x = mk(lib, "float32", (3, 1))
    return [Case([x, mk(lib, "int64", s)]) for s in [(2, 3, 4), (3, 5), (4, 5)]]


def narrow_cases(lib, row):
    x = mk(lib, "float32", (4, 5))
    return [Case([x, d, s, l]) for d, s, l in [(0, 1, 2), (1, -2, 2), (0, 3, 2), (-1, 0, 0)]]


def select_cases(lib, row):
    x = mk(lib, "float32", (4, 5))
    return [Case([x, d, i]) for d, i in [(0, 1), (1, -1), (0, 4), (-1, 0)]]


def movedim_cases(lib, row):
    x = mk(lib, "float32", (2, 3, 4, 5))
    return [Case([x, s, d]) for s, d in [(0, 2), (-1, 0), ((0, 1), (2, 3)), ((0, 1), (3, 0)),
                                        ((0, 0), (1, 2))]]


def split_cases(lib, row):
    x = mk(lib, "float32", (6, 4))
    if lib == "torch":
        return [Case([x, 2]), Case([x, 4]), Case([x, [1, 5]]), Case([x, 3, 1]), Case([x, [2, 2]]),
                Case([x, 1], {"dim": -1})]
    return [Case([x, 2]), Case([x, 4]), Case([x, [1, 3]]), Case([x, [2, 10]]), Case([x, 2, 1]),
            Case([x, [-2]])]


def chunk_cases(lib, row):
    return [Case([mk(lib, "float32", s), c, d]) for s, c, d in
            [((6, 4), 3, 0), ((5,), 2, 0), ((6, 4), 4, 1), ((5,), 7, 0), ((0, 2), 3, 0)]]


def unbind_cases(lib, row):
    return [Case([mk(lib, "float32", (3, 2)), d]) for d in [0, 1, -1]]


def repeat_cases(lib, row):
    x = mk(lib, "float32", (2, 3))
    if lib == "torch":
        return [Case([x, 2, 1]), Case([x, (1, 2, 2)]), Case([x, 2])]
    return [Case([x, 2]), Case([x, (2, 1)]), Case([x, (1, 2, 2)])]


def flip_cases(lib, row):
    x = mk(lib, "int64", (2, 3))
    if row[2].startswith("numpy.fft."):   # fftshift: roll by half of each axis given
        return [Case([x]), Case([x, 1]), Case([x, (0, 1)]), Case([x, 2]), Case([mk(lib, "float32", ())]),
                Case([npscalar("float64")]), Case([mk(lib, "float32", (4,))], {"axes": -1})]
    if row[3] == "roll":
        return [Case([x, 1]), Case([x, 1, 0]), Case([x, (1, 2), (0, 1)])]
    if lib == "torch":
        return [Case([x, (0,)]), Case([x, [0, 1]])] if row[1] == "CK_TORCH" else \
            [Case([x, 0]), Case([x, 0, 1])]
    return [Case([x]), Case([x, 0])]


def cat_cases(lib, row):
    a, b = mk(lib, "float32", (2, 3)), mk(lib, "int64", (4, 3))
    c = mk(lib, "float16", (2, 5))
    cases = [Case([[a, b]]), Case([(a, a)], {"dim" if lib == "torch" else "axis": 1}),
             Case([[a, c], 1]), Case([[a, b], 1]), Case([[a]]), Case([[a, b], -2])]
    if row[3] == "cat" and lib == "torch":
        cases.append(Case([[a, mk(lib, "float32", (0,))]]))
    if row[3] == "cat" and lib == "numpy":
        cases.append(Case([[a, b]], {"axis": None}))
    if row[3] == "stack":
        cases = [Case([[a, a]]), Case([[a, a], 2]), Case([[a, a], -1]), Case([[a, b]]),
                 Case([[a, mk(lib, "float64", (2, 3))], 1]),
                 Case([[mk(lib, "int32", ()), mk(lib, "int64", ())]])]
    return cases


def matmul_cases(lib, row):
    op = row[3]
    libs = ["torch", "numpy"] if row[1] == "CK_OPERATOR" else [lib]
    cases = []
    for l in libs:
        pairs = [((3,), (3,)), ((2, 3), (3, 4)), ((3,), (3, 4)), ((2, 3), (3,)),
                 ((5, 2, 3), (3, 4)), ((5, 1, 2, 3), (4, 3, 2)), ((2, 3), (4, 5)),
                 ((5, 2, 3), (5, 3, 4)), ((0, 3), (3, 2))]
        for sa, sb in pairs:
            for da, db in [("float32", "float32"), ("float64", "float32"), ("int64", "int64")]:
                cases.append(Case([mk(l, da, sa), mk(l, db, sb)]))
        if l == "numpy" and op == "dot":
            cases.append(Case([mk(l, "float32", ()), mk(l, "float32", (2, 3))]))
    return cases


def linear_cases(lib, row):
    x = mk(lib, "float32", (5, 2, 3))
    w = mk(lib, "float32", (4, 3))
    return [Case([x, w]), Case([x, w, mk(lib, "float32", (4,))]), Case([x, mk(lib, "float32", (3,))]),
            Case([x, mk(lib, "float32", (4, 2))]), Case([x, mk(lib, "float64", (4, 3))])]


def addmm_cases(lib, row):
    if row[3] == "baddbmm":
        return [Case([mk(lib, "float32", s), mk(lib, "float32", (5, 2, 3)), mk(lib, "float32", (5, 3, 4))])
                for s in [(5, 2, 4), (4,), (2, 1), (3, 4)]]
    return [Case([mk(lib, "float32", s), mk(lib, "float32", (2, 3)), mk(lib, "float32", (3, 4))])
            for s in [(2, 4), (4,), (2, 1), (3, 4)]]


def outer_cases(lib, row):
    return [Case([mk(lib, a, (3,)), mk(lib, b, (4,))]) for a, b in
            [("float32", "float32"), ("int64", "float32"), ("bool", "bool")]] + \
        [Case([mk(lib, "float32", (2, 2)), mk(lib, "float32", (3,))])]


def einsum_cases(lib, row):
    a, b = mk(lib, "float32", (2, 3)), mk(lib, "float32", (3, 4))
    cases = [Case(["ij,jk->ik", a, b]), Case(["ij,jk", a, b]), Case(["ij->ji", a]), Case(["ii->i", mk(lib, "float32", (3, 3))]),
             Case(["ij->", a]), Case(["ij,kj->ik", a, a]), Case(["ij,jk->ik", a, a]),
             Case(["bij,bjk->bik", mk(lib, "float32", (5, 2, 3)), mk(lib, "float32", (5, 3, 4))]),
             Case(["i,i", mk(lib, "float32", (3,)), mk(lib, "float32", (3,))]),
             Case(["...ij->...ji", a]), Case(["...ij,...jk", mk(lib, "float32", (5, 2, 3)), b]),
             Case(["i...->...", mk(lib, "float32", (2, 3, 4))]), Case(["...ii->...i", mk(lib, "float32", (2, 3, 3))]),
             Case(["ij...,jk...->ik...", mk(lib, "float32", (2, 3, 4)), mk(lib, "float32", (3, 5, 1))]),
             Case(["...ij,...jk", mk(lib, "float32", (2, 2, 3)), mk(lib, "float32", (3, 3, 4))]),   # eager raises
             Case(["...ij,...jk->ik", mk(lib, "float32", (5, 2, 3)), b])]   # eager raises
    if lib == "torch":
        cases.append(Case(["ij,jk->ik", [a, b]]))
    return cases


def norm_cases(lib, row):
    op = row[3]
    x = mk(lib, "float32", (2, 4, 3, 3))
    if op == "layer_norm":
        return [Case([x, (3,)]), Case([x, (3, 3), mk(lib, "float32", (3, 3)), mk(lib, "float32", (3, 3))]),
                Case([x, (4,)]), Case([mk(lib, "float64", (2, 3)), [3]]),
                Case([mk(lib, "int64", (2, 3)), [3]]), Case([x, 3]), Case([x, []])]
    if op == "rms_norm":
        # eager raises on an int normalized_shape, an empty one, one the input does not end
        # with, a weight of another shape, an int input; a weight of another dtype is
        # multiplied in and the result cast back to the input's dtype
        return [Case([x, (3,)]), Case([x, (3, 3), mk(lib, "float32", (3, 3))]), Case([x, [3]], {"eps": 1e-6}),
                Case([x, (4, 3, 3)], {"weight": None, "eps": None}), Case([x, (3,), mk(lib, "float64", (3,))]),
                Case([mk(lib, "float64", (2, 3)), [3]]), Case([mk(lib, "float16", (2, 3)), (3,)]),
                Case([x, (4,)]), Case([x, 3]), Case([x, []]), Case([x, (3, 3), mk(lib, "float32", (3,))]),
                Case([x, (2, 4, 3, 3, 3)]), Case([mk(lib, "int64", (2, 3)), [3]])]
    if op == "batch_norm":
        rm, rv = mk(lib, "float32", (4,)), mk(lib, "float32", (4,))
        return [Case([x, rm, rv]), Case([x, rm, rv, rm, rv]), Case([x, None, None], {"training": True}),
                Case([x, mk(lib, "float32", (3,)), rv]), Case([mk(lib, "float32", (2, 4)), rm, rv])]
    return [Case([x, 2]), Case([x, 4, mk(lib, "float32", (4,)), mk(lib, "float32", (4,))]), Case([x, 3])]


def conv_cases(lib, row):
    if row[3] == "conv1d":
        x = mk(lib, "float32", (2, 4, 10))
        w = mk(lib, "float32", (6, 4, 3))
        return [Case([x, w]), Case([x, w, mk(lib, "float32", (6,)), 2, 1]), Case([x, w], {"padding": "same"}),
                Case([x, mk(lib, "float32", (6, 2, 3))], {"groups": 2, "dilation": 2}),
                Case([mk(lib, "float32", (4, 10)), w]), Case([x, mk(lib, "float32", (6, 3, 3))]),
                Case([x, w], {"padding": "valid", "stride": 3})]
    x = mk(lib, "float32", (2, 4, 9, 8))
    w = mk(lib, "float32", (6, 4, 3, 3))
    return [Case([x, w]), Case([x, w, None, (2, 1), (1, 2)]), Case([x, w], {"padding": "same"}),
            Case([x, mk(lib, "float32", (6, 1, 3, 2))], {"groups": 4, "stride": 2}),
            Case([mk(lib, "float32", (4, 9, 8)), w]), Case([x, mk(lib, "float32", (6, 4, 10, 3))]),
            Case([x, w], {"dilation": (2, 3)}), Case([x, mk(lib, "float64", (6, 4, 3, 3))])]


def pool_cases(lib, row):
    x = mk(lib, "float32", (2, 3, 9, 8))
    cases = [Case([x, 2]), Case([x, 3, 2]), Case([x, (3, 2), (2, 1), 1]), Case([x, 3], {"ceil_mode": True}),
             Case([x, 3, 2, 1], {"ceil_mode": True}), Case([mk(lib, "float32", (3, 9, 8)), 2]),
             Case([x, 4, 3, 3]), Case([mk(lib, "float32", (1, 1, 5, 5)), 2, 2, 1, ], {"ceil_mode": True}),
             Case([mk(lib, "int64", (2, 3, 4, 4)), 2])]
    if row[3] == "max_pool2d":
        cases += [Case([x, 2], {"return_indices": True}), Case([x, 3], {"dilation": 2})]
    if row[3] in ("max_pool1d", "avg_pool1d"):
        x1 = mk(lib, "float32", (2, 3, 11))
        cases += [Case([x1, 2]), Case([x1, 3, 2, 1]), Case([x1, 4, 3], {"ceil_mode": True}), Case([x1, 3, 2, 2]),
                  Case([mk(lib, "float32", (3, 7)), 2]), Case([x1, (3,), (2,)]), Case([x1, 12]),
                  Case([mk(lib, "int64", (2, 3, 8)), 2]), Case([mk(lib, "int32", (2, 3, 8)), 2])]
        if row[3] == "max_pool1d":
            cases += [Case([mk(lib, "int64", (2, 3, 8)), 2], {"return_indices": True})]
        if row[3] == "max_pool1d":
            cases += [Case([x1, 2], {"return_indices": True}), Case([x1, 3], {"dilation": 2, "ceil_mode": True})]
    return cases


def adaptive_cases(lib, row):
    x = mk(lib, "float32", (2, 3, 9, 8))
    cases = [Case([x, 1]), Case([x, (4, 3)]), Case([x, (None, 2)]), Case([mk(lib, "float32", (3, 9, 8)), 5])]
    if row[3].endswith("1d"):
        x1 = mk(lib, "float32", (2, 3, 9))
        cases += [Case([x1, 4]), Case([x1, (2,)]), Case([mk(lib, "float32", (3, 9)), 12]), Case([x1, (2, 2)]),
                  Case([mk(lib, "int64", (2, 3, 9)), 3]), Case([mk(lib, "float32", (2, 3, 0)), 3])]
    if "max" in row[3]:
        cases += [Case([x, 2], {"return_indices": True}), Case([mk(lib, "float32", (2, 3, 9)), 2], {"return_indices": True})]
    return cases


def embedding_cases(lib, row):
    w = mk(lib, "float32", (10, 4))
    return [Case([mk(lib, "int64", s, 0, 9), w]) for s in [(2, 3), (), (5,)]] + \
        [Case([mk(lib, "int32", (3,), 0, 9), w]), Case([mk(lib, "float32", (3,)), w])]


def sdpa_cases(lib, row):
    q = mk(lib, "float32", (2, 4, 5, 8))
    k = mk(lib, "float32", (2, 4, 6, 8))
    v = mk(lib, "float32", (2, 4, 6, 7))
    return [Case([q, k, v]), Case([q, k, v], {"is_causal": True}),
            Case([q, k, v, mk(lib, "bool", (5, 6))]), Case([q, k, mk(lib, "float32", (2, 4, 5, 7))]),
            Case([q, mk(lib, "float32", (2, 2, 6, 8)), mk(lib, "float32", (2, 2, 6, 7))], {"enable_gqa": True}),
            Case([mk(lib, "float32", (5, 8)), mk(lib, "float32", (6, 8)), mk(lib, "float32", (6, 3))])]


def pad_cases(lib, row):
    x = mk(lib, "float32", (2, 3, 4))
    if lib == "torch":
        cases = [Case([x, (1, 2)]), Case([x, (1, 1, 2, 0)]), Case([x, (-1, 0)]), Case([x, (1,)]),
                 Case([x, (1, 1)], {"value": 2.0})]
        x4 = mk(lib, "float32", (2, 3, 4, 5))
        for mode in ("reflect", "replicate", "circular"):
            cases += [Case([x, (1, 2), mode]), Case([x4, (1, 2, 3, 0), mode]), Case([x, (4, 0), mode]),
                      Case([x, (5, 0), mode]), Case([x, (-1, 1), mode]), Case([x4, (1, 1), mode]),
                      Case([mk(lib, "float32", (4,)), (1, 1), mode]), Case([x, (1, 1), mode, 1.0]),
                      Case([mk(lib, "float32", (1, 2, 3, 4, 5)), (1, 1, 1, 1, 1, 1), mode]),
                      Case([mk(lib, "int64", (2, 3, 4)), (1, 1), mode]), Case([mk(lib, "float32", (2, 0, 4)), (1, 1), mode]),
                      Case([mk(lib, "bool", (2, 3, 4)), (1, 1), mode]), Case([mk(lib, "int8", (2, 3, 4)), (2, 1), mode])]
        cases.append(Case([x, (1, 1), "wrap"]))
        return cases
    return [Case([x, 1]), Case([x, (1, 2)]), Case([x, ((1, 0), (0, 2), (3, 3))]), Case([x, ((1, 2),)])]


def conv_transpose_cases(lib, row):
    f = lambda *sh, dt="float32": mk(lib, dt, sh)   # noqa: E731
    if row[3] == "conv_transpose1d":
        x, w = f(2, 4, 9), f(4, 3, 3)
        return [Case([x, w]), Case([x, w, f(3), 2, 1, 1]), Case([x, f(4, 2, 3)], {"groups": 2, "dilation": 2}),
                Case([f(4, 9), w]), Case([x, w], {"output_padding": 1}), Case([x, f(3, 3, 3)]),
                Case([f(1, 4, 1), w], {"padding": 2}), Case([x, w, f(4)]), Case([x, w], {"padding": "same"}),
                Case([x, f(4, 3, 3, dt="float64")]), Case([x, w], {"stride": 3, "output_padding": 2})]
    x, w = f(2, 4, 5, 6), f(4, 3, 3, 2)
    return [Case([x, w]), Case([x, w, None, (2, 1), (1, 0), (1, 0), 2, (1, 2)]), Case([f(4, 5, 6), w], {"stride": 2}),
            Case([x, w], {"output_padding": (0, 1), "stride": 2}), Case([x, f(4, 1, 3, 3)], {"groups": 4}),
            Case([x, f(3, 3, 3, 3)], {"groups": 3}),
            Case([f(2, 4, 5, 6, dt="int64"), f(4, 3, 3, 2, dt="int64")], refuse=True),
            Case([f(2, 4, 5, 6, dt="float64"), f(4, 3, 3, 2, dt="float64")]),
            Case([f(2, 4, 5, 6, dt="bfloat16"), f(4, 3, 3, 2, dt="bfloat16")])]


def interpolate_cases(lib, row):
    f = lambda *sh, dt="float32": mk(lib, dt, sh)   # noqa: E731
    x3, x4, x5 = f(2, 3, 5), f(2, 3, 4, 6), f(1, 2, 3, 4, 5)
    cases = [Case([x4], {"scale_factor": 2}), Case([x4, (3, 7)]), Case([x4, 5]), Case([x3, 9], {"mode": "linear"}),
            Case([x3], {"scale_factor": 1.5, "mode": "linear", "align_corners": True}),
            Case([x4], {"scale_factor": (0.5, 1.7), "mode": "bilinear"}), Case([x4, (8, 8)], {"mode": "bicubic"}),
            Case([x4], {"scale_factor": 1.3, "mode": "bilinear", "recompute_scale_factor": True}),
            Case([x4, (2, 3)], {"mode": "area"}), Case([x5], {"scale_factor": 2, "mode": "trilinear"}),
            Case([x4, (5, 5)], {"mode": "nearest-exact"}), Case([x4, (2, 2)], {"mode": "bilinear", "antialias": True}),
            Case([x4], {"scale_factor": 0.1}), Case([x4, (3, 3)], {"scale_factor": 2}), Case([x4]),
            Case([x4, 3], {"align_corners": True}), Case([x3, 4], {"mode": "bilinear"}),
            Case([x4, (3, 3)], {"mode": "area", "antialias": True}), Case([f(2, 3, 4, 4, dt="int64"), 8]),
            Case([f(1, 3, 4, 4, dt="uint8"), 8]), Case([f(1, 3, 4, 4, dt="uint8"), 8], {"mode": "bicubic"}),
            Case([x4, (3, 0)]), Case([x4, (3, 3, 3)]), Case([f(2, 3, 4, 4, dt="float64"), 6], {"mode": "bicubic"})]
    for dt in ("float16", "bfloat16", "int32", "bool"):
        for mode in ("nearest", "nearest-exact", "bilinear", "bicubic", "area"):
            cases.append(Case([f(1, 2, 4, 4, dt=dt), 6], {"mode": mode}))
        cases.append(Case([f(1, 2, 4, dt=dt), 6], {"mode": "linear"}))
        cases.append(Case([f(1, 2, 2, 3, 4, dt=dt), 6], {"mode": "trilinear"}))
    cases.append(Case([f(1, 3, 8, 8, dt="uint8"), 4], {"mode": "bilinear", "antialias": True}))
    cases.append(Case([f(1, 3, 8, 8, dt="uint8"), 4], {"mode": "area"}))
    cases.append(Case([f(1, 3, 4, dt="uint8"), 8], {"mode": "linear"}))
    return cases


def addc_cases(lib, row):
    f = lambda *sh, dt="float32": mk(lib, dt, sh)   # noqa: E731
    x = f(3, 4)
    cases = [Case([x, f(3, 4), f(3, 4)]), Case([x, f(4), f(3, 1)], {"value": 0.5}), Case([f(4), f(2, 1, 4), f(3, 4)]),
             Case([x, f(3, 4, dt="float64"), f(3, 4)]), Case([x, f(3, 4, dt="int64"), f(3, 4, dt="int64")]),
             Case([f(3, 4, dt="int64"), f(3, 4, dt="int64"), f(3, 4, dt="int64")], {"value": 2}),
             Case([f(3, 4, dt="bool"), f(3, 4, dt="bool"), f(3, 4, dt="bool")]), Case([x, f(2, 4), f(3, 4)]),
             Case([x, f(3, 4), f(3, 4)], {"value": 1j}), Case([f(3, dt="float16"), f(3, dt="float16"), f(3)]),
             Case([f(3, dt="int32"), f(3, dt="int64"), f(3, dt="int8")]), Case([f(3, dt="int32"), f(3, dt="float16"), f(3, dt="int8")]),
             Case([f(3, dt="uint8"), f(3, dt="uint8"), f(3, dt="uint8")], {"value": 300}),
             Case([f(3, dt="int8"), f(3, dt="int8"), f(3, dt="int8")], {"value": -100}),
             Case([f(3, dt="float16"), f(3, dt="float16"), f(3, dt="float16")], {"value": 1e6}),
             Case([f(3, dt="complex64"), f(3), f(3)], {"value": 1j}), Case([f(), f(3), f()])]
    if row[5] == "CF_INPLACE":
        cases.append(Case([f(4), f(3, 4), f(3, 4)]))
    return cases


def tensor_new_cases(lib, row):
    x, i = mk(lib, "float32", (2, 3)), mk(lib, "int64", (2,))
    return [Case([x, 2, 3]), Case([x]), Case([i, 4]), Case([x, torch.Size([2, 2])]), Case([i, torch.Size([0, 3])]), Case([x, 0, 2]),
            Case([x, [1, 2]], refuse=True), Case([x, -1])]


def new_tensor_cases(lib, row):
    x, i = mk(lib, "float32", (2, 3)), mk(lib, "int64", (2,))
    return [Case([x, [1, 2, 3]]), Case([i, [1.5, 2.5]]), Case([x, [[1, 2], [3, 4]]], {"dtype": torch.int32}),
            Case([x, 3]), Case([x, []]), Case([x, mk(lib, "int64", (2, 2))]), Case([x, [True]], {"requires_grad": False})]


def tensor_data_cases(lib, row):
    return new_tensor_cases(lib, row) if row[3] == "new_tensor" else tensor_cases(lib, row)


def random_fill_cases(lib, row):
    f = lambda dt: mk(lib, dt, (2, 3))   # noqa: E731
    path = row[2]
    dts = ["float32", "float64", "float16", "int64", "int32", "uint8", "bool"]
    cases = [Case([f(dt)]) for dt in dts] if not path.endswith("geometric_") else \
        [Case([f(dt), 0.5]) for dt in dts]
    extra = {
        "Tensor.uniform_": [(-1, 1), (2, 1), (1, 1)], "Tensor.normal_": [(0, 2), (0, -1), (1, 0)],
        "Tensor.log_normal_": [(0, 0.5), (0, 0)], "Tensor.cauchy_": [(0, 1), (0, -1)],
        "Tensor.exponential_": [(2.0,), (0,), (-1,)], "Tensor.geometric_": [(0.2,), (1,), (0,)],
        "Tensor.bernoulli_": [(0.3,), (1.5,), (0,)], "Tensor.random_": [(0, 10), (10,), (5, 3), (300,), (-3, 3)],
        "torch.nn.init.uniform_": [(-1, 1), (2, 1)], "torch.nn.init.normal_": [(0, 0.02), (0, -1)],
    }[path]
    for dt in ("float32", "int64", "uint8"):
        cases += [Case([f(dt), *a]) for a in extra]
    if path == "Tensor.bernoulli_":
        cases += [Case([f("float32"), mk(lib, "float32", (2, 3), lo=0, hi=1)]),
                  Case([f("float32"), mk(lib, "float32", (3,), lo=0, hi=1)], refuse=True)]
    return cases


def factory_cases(lib, row):
    op, kind = row[3], row[1]
    fill = op == "full"
    dtype = (torch.int32 if lib == "torch" else np.int32)
    cases = []
    for s in [(2, 3), (), (0,), 4]:
        extra = [2.5] if fill else []
        cases.append(Case([s, *extra]))
        cases.append(Case([s, *extra], {"dtype": dtype}))
    if fill:
        cases += [Case([(2,), 3]), Case([(2,), True])]
    if lib == "torch" and not fill:
        cases += [Case([2, 3]), Case([2, 3], {"requires_grad": True})]
    return cases


def factory_like_cases(lib, row):
    op = row[3]
    cases = []
    for dt in MAIN_DTYPES:
        x = mk(lib, dt, (2, 3))
        extra = [1] if op == "full_like" else []
        cases.append(Case([x, *extra]))
        cases.append(Case([x, *extra], {"dtype": torch.float64 if lib == "torch" else np.float64}))
    if lib == "numpy":
        cases.append(Case([mk(lib, "int32", (2, 3)), *([1] if op == "full_like" else [])], {"shape": (4, 1)}))
    return cases


def random_factory_cases(lib, row):
    """torch.rand/randn (sizes as in factory_cases) and their _like forms, with the integer
    dtypes torch refuses."""
    if row[3] == "rand_like":
        cases = [Case([mk(lib, dt, (2, 3))]) for dt in MAIN_DTYPES]
        return cases + [Case([mk(lib, "float32", (2, 3))], {"dtype": torch.float64}),
                        Case([mk(lib, "float32", (2, 3))], {"dtype": torch.int64})]
    cases = []
    for s in [(2, 3), (), (0,), 4]:
        cases += [Case([s]), Case([s], {"dtype": torch.float64}), Case([s], {"dtype": torch.int32})]
    return cases + [Case([2, 3]), Case([2, 3], {"requires_grad": True})]


def arange_cases(lib, row):
    cases = [Case([5]), Case([1, 7]), Case([0, 1, 0.1]), Case([2.5]), Case([5, 1, -1]), Case([0, 10, 3]),
             Case([3, 1])]
    cases.append(Case([4], {"dtype": torch.float64 if lib == "torch" else np.float32}))
    return cases


def linspace_cases(lib, row):
    c = [Case([0, 1, 5]), Case([0.0, 2.0, 0]), Case([0, 1], {"dtype": torch.float64 if lib == "torch" else np.float32,
                                                             "steps" if lib == "torch" else "num": 7})]
    if lib == "numpy":
        c.append(Case([0, 1]))
    return c


def eye_cases(lib, row):
    return [Case([3]), Case([2, 4]), Case([3], {"dtype": torch.int64 if lib == "torch" else np.int64})]


def nonzero_cases(lib, row):
    cases = [Case([mk(lib, dt, sh)]) for dt in ("float32", "int64", "bool") for sh in SHAPES]
    cases.append(Case([mk(lib, "float32", (2, 3))], {"as_tuple": True}, refuse=True))
    return cases


def flatnonzero_cases(lib, row):
    return [Case([mk(lib, dt, sh)]) for dt in ("float32", "int64", "bool") for sh in SHAPES]


def unique_cases(lib, row):
    cases = [Case([mk(lib, dt, sh)]) for dt in ("float32", "int64", "bool", "uint16") for sh in SHAPES]
    x = mk(lib, "int64", (3, 4))
    cases += [Case([x], {"return_counts": True}), Case([x, True]), Case([x, True, False, True]),
              Case([x], {"return_inverse": True}, refuse=True), Case([x], {"axis": 0}, refuse=True)]
    return cases


def ufunc_scan_cases(lib, row):
    """np.maximum.accumulate(a, axis): a's shape and dtype along any valid axis."""
    cases = [Case([mk(lib, dt, (3, 4)), ax]) for dt in MAIN_DTYPES + ["uint16", "int8"] for ax in (0, 1, -1)]
    cases += [Case([mk(lib, "float32", (5,))]), Case([mk(lib, "float32", (3, 4)), 2]),
              Case([mk(lib, "float32", (3, 4))], {"axis": 1})]
    return cases


def ufunc_at_cases(lib, row):
    """np.add.at(a, indices, b): in place, whatever the kind of the value."""
    ix = np.array([0, 1, 1, 3])
    cases = [Case([mk(lib, dt, (5,)), ix, 1]) for dt in ("float32", "float64", "int64", "int32", "uint16")]
    cases += [Case([mk(lib, "float64", (5,)), ix, mk(lib, "float64", (4,))]),
              Case([mk(lib, "float32", (3, 4)), (np.array([0, 2]), np.array([1, 1])), 2.5]),
              Case([mk(lib, "float32", (3, 4)), 1, mk(lib, "float32", (4,))]),
              Case([mk(lib, "int64", (5,)), ix, 1.5]),                      # cast back unsafely
              Case([mk(lib, "int64", (5,)), ix, mk(lib, "float32", (4,))]),
              Case([mk(lib, "int64", (5,)), ix, "x"])]   # eager raises
    return cases


def masked_select_cases(lib, row):
    cases = [Case([mk(lib, dt, sh), mk(lib, "bool", sh)]) for dt in ("float32", "int64") for sh in SHAPES]
    cases.append(Case([mk(lib, "float32", (2, 3)), mk(lib, "bool", (3,))]))       # mask broadcasts
    cases.append(Case([mk(lib, "float32", (3,)), mk(lib, "bool", (2, 3))]))       # input broadcasts
    cases.append(Case([mk(lib, "float32", (2, 3)), mk(lib, "bool", (4,))]))       # eager raises
    cases.append(Case([mk(lib, "float32", (2, 3)), mk(lib, "float32", (2, 3))]))  # eager raises
    return cases


UNBACKED_HINT = 8192   # vocab/meta.h SJ_UNBACKED_HINT: nonzero's row count has no hint


def tensor_cases(lib, row):
    cases = [Case([[1, 2, 3]]), Case([[[1.0, 2.0], [3.0, 4.0]]]), Case([True]), Case([[1, 2.5]]),
             Case([3]), Case([[]]), Case([[[1], [2, 3]]]), Case([[1, 2]], {"dtype": torch.float16 if lib == "torch" else np.float16}),
             Case([[1j, 2]])]
    if lib == "numpy":
        cases.append(Case([mk(lib, "int32", (2, 3))]))
        cases.append(Case([mk(lib, "int32", (2, 3)), np.float32]))
    return cases


def getitem_cases(lib, row):
    cases = []
    for l in ["torch", "numpy"]:
        x = mk(l, "float32", (5, 6, 7))
        idx = [0, -1, 5, slice(1, 4), slice(None, None, 2), slice(-3, None), (0, 1), (0, 1, 2),
               (Ellipsis, 1), (None, 0), (slice(None), None, 1), (1, Ellipsis, None, slice(2, 10)),
               Ellipsis, (), (0, 0, 0, 0), slice(10, 20), [0, 2], (slice(None), [1, 1, 1]),
               slice(None, None, -1)]
        for i in idx:
            cases.append(Case([x, i]))
        # torch accepts several ellipses; the rules do not
        cases.append(Case([x, (Ellipsis, Ellipsis)], refuse=(l == "torch")))
        cases.append(Case([x, None]))
        cases.append(Case([x, mk(l, "int64", (2, 3), 0, 4)]))
        cases.append(Case([x, (slice(None), mk(l, "int64", (4,), 0, 5))]))
        i4 = mk(l, "int64", (4,), 0, 4)
        cases.append(Case([x, (i4, i4)]))
        cases.append(Case([x, (0, slice(None), i4)]))          # torch and numpy place B differently
        cases.append(Case([x, (i4, slice(None), i4)]))
        cases.append(Case([x, (slice(None), i4, i4)]))
        cases.append(Case([x, (i4, slice(None), 0)]))
        cases.append(Case([x, (i4, None, i4)]))
        cases.append(Case([x, (mk(l, "int64", (4, 1), 0, 4), mk(l, "int64", (1, 3), 0, 4))]))
        cases.append(Case([x, (i4, mk(l, "int64", (3,), 0, 4))]))   # shapes do not broadcast
        cases.append(Case([x, mk(l, "bool", (5, 6, 7))], refuse=True))
        cases.append(Case([mk(l, "int64", ()), ()]))
        cases.append(Case([mk(l, "int64", ()), Ellipsis]))
        cases.append(Case([mk(l, "float32", (3,)), 1]))
    cases.append(Case([mk("numpy", "float32", (5, 6)), (npscalar("int64", 1), 2)]))
    return cases


def setitem_cases(lib, row):
    cases = []
    for l in ["torch", "numpy"]:
        for dt in ["float32", "int64"]:
            x = mk(l, dt, (5, 6))
            for i, v in [(0, 1.0), (slice(1, 3), mk(l, "float32", (6,))), ((Ellipsis, 0), mk(l, "float32", (5,))),
                         (0, mk(l, "float32", (2, 6))), (slice(None), mk(l, "float32", (1, 1, 6))),
                         ((0, 0), 3), (slice(0, 2), mk(l, "int64", (2, 1)))]:
                cases.append(Case([x.clone() if l == "torch" else x.copy(), i, v]))
        # boolean masks: the count is data-dependent, the result is x itself
        x = mk(l, "float32", (5, 6))
        m = mk(l, "bool", (5, 6))
        cases += [Case([x, m, -1.0]), Case([x, mk(l, "bool", (5,)), 2.0]),
                  Case([x, m, mk(l, "float32", ())]), Case([x, mk(l, "bool", (6,)), 0.0]),
                  # one value per selected element (mk's masks are all True): whether the
                  # lengths agree is data, checked by the library's setitem when it runs
                  Case([x, m, mk(l, "float32", (30,))]), Case([x, mk(l, "bool", (5,)), mk(l, "float32", (5, 6))])]
    return cases


def grad_cases(lib, row):
    return [Case([torch.is_grad_enabled()])]


def softmax_cases(lib, row):
    cases = []
    for dt in MAIN_DTYPES:
        x = mk(lib, dt, (2, 3))
        for d in [0, -1, 1]:
            cases.append(Case([x, d]))
        cases.append(Case([x, 1], {"dtype": torch.float64}))
    if "functional" in row[2]:
        cases.append(Case([mk(lib, "float32", (2, 3))]))
    cases.append(Case([mk(lib, "float32", ()), 0]))
    cases.append(Case([mk(lib, "float32", (2, 3)), 2]))
    return cases


def unary_dispatch(lib, row):
    path, op = row[2], row[3]
    if op == "tril" or op == "triu":
        return unary_cases(lib, row, shapes=[(2, 3), (3, 3, 4), (3,)], dtypes=MAIN_DTYPES)
    if op == "clamp":
        return clamp_cases(lib, row)
    if op in ("flip", "roll"):
        return flip_cases(lib, row)
    if path == "torch.dropout":
        return unary_cases(lib, row, extra=(0.5, False))
    if op == "fill":
        return unary_cases(lib, row, extra=(1.5,))
    if op == "copy":
        return [Case([mk(lib, "float32", (2, 3)), mk(lib, "float32", (2, 3))]),
                Case([mk(lib, "float32", (2, 3)), mk(lib, "int64", (3,))]),
                Case([mk(lib, "int64", (2, 3)), mk(lib, "float64", (1, 3))]),
                Case([mk(lib, "float32", (2, 3)), mk(lib, "float32", (4,))])]
    if op == "dropout":
        return unary_cases(lib, row, kw={"training": False})
    return unary_cases(lib, row)



# ---- numpy routines run as eager steps (shapes/rules_np_more.c) ----
LA_DTYPES = ["float32", "float64", "int64", "int32", "bool", "float16", "complex64", "complex128"]


def la_arr(dtype, shape, spd=True):
    """A well-conditioned (symmetric positive-definite when square) array of dtype:
    eager's data errors (a singular matrix) must not decide the rule's cases."""
    n = shape[-1] if shape else 1
    base = np.arange(int(np.prod(shape)) if shape else 1, dtype=np.float64).reshape(shape) % 3
    if spd and len(shape) >= 2 and shape[-1] == shape[-2]:
        base = base @ np.swapaxes(base, -1, -2) + n * np.eye(n) * 4
    if dtype == "bool":
        return np.ones(shape, dtype=bool) if not (spd and len(shape) >= 2 and shape[-1] == shape[-2]) else \
            np.broadcast_to(np.eye(n, dtype=bool), shape).copy()
    return base.astype(dtype)


def np_la_square_cases(lib, row):
    op = row[3]
    extra = {"np_matrix_power": [[3], [0], [-1], [1]]}.get(op, [[]])
    cases = [Case([la_arr(dt, sh)] + e) for dt in LA_DTYPES for sh in [(3, 3), (2, 3, 3)] for e in extra]
    cases += [Case([la_arr("float64", (3, 4))] + extra[0]), Case([la_arr("float64", (3,))] + extra[0])]
    if op == "np_cholesky":
        cases.append(Case([la_arr("float64", (3, 3))], {"upper": True}))
    return cases


def np_det_cases(lib, row):
    return [Case([la_arr(dt, sh)]) for dt in LA_DTYPES for sh in [(3, 3), (2, 3, 3), (1, 2, 2, 2)]] + \
        [Case([la_arr("float64", (2, 3))]), Case([la_arr("float64", (3,))])]


def np_eigh_cases(lib, row):
    return [Case([la_arr(dt, sh)]) for dt in LA_DTYPES for sh in [(3, 3), (2, 3, 3)]] + \
        [Case([la_arr("float64", (3, 3))], {"UPLO": "U"}), Case([la_arr("float64", (3, 3)), "X"]),
         Case([la_arr("float64", (2, 3))])]


def np_svd_cases(lib, row):
    cases = [Case([la_arr(dt, sh, spd=False)], kw) for dt in LA_DTYPES for sh in [(4, 3), (2, 3, 5)]
             for kw in [{}, {"full_matrices": False}, {"compute_uv": False}]]
    cases += [Case([la_arr("float64", (3, 3))], {"hermitian": True}), Case([la_arr("float64", (3,))])]
    return cases


def np_qr_cases(lib, row):
    cases = [Case([la_arr(dt, sh, spd=False)], kw) for dt in LA_DTYPES for sh in [(4, 3), (3, 5), (2, 4, 3)]
             for kw in [{}, {"mode": "complete"}, {"mode": "r"}, {"mode": "raw"}]]
    return cases + [Case([la_arr("float64", (3, 3)), "bogus"]), Case([la_arr("float64", (3,))])]


def np_pinv_cases(lib, row):
    cases = [Case([la_arr(dt, sh, spd=False)], kw) for dt in LA_DTYPES for sh in [(4, 3), (2, 3, 5), (3, 3)]
             for kw in [{}, {"rcond": 1e-10}]]
    return cases + [Case([la_arr("float64", (3, 3))], {"hermitian": True}), Case([la_arr("float64", (3,))], refuse=True),
                    Case([la_arr("float64", (3, 4))], {"hermitian": True}), Case([la_arr("float64", (3, 4))], {"rtol": 1e-5})]


def np_solve_cases(lib, row):
    cases = [Case([la_arr(dt, (3, 3)), la_arr(dt2, sh, spd=False)]) for dt in LA_DTYPES[:3] + ["complex64"]
             for dt2 in ["float32", "int64", "float64"] for sh in [(3,), (3, 2)]]
    cases += [Case([la_arr("float64", (2, 3, 3)), la_arr("float64", (3,), spd=False)]),
              Case([la_arr("float64", (2, 3, 3)), la_arr("float64", (2, 3, 4), spd=False)]),
              Case([la_arr("float64", (2, 3, 3)), la_arr("float64", (5, 1, 3, 4), spd=False)]),
              Case([la_arr("float64", (3, 3)), [1.0, 2.0, 3.0]]), Case([la_arr("float64", (3, 3)), la_arr("float64", (4,))]),
              Case([la_arr("float16", (3, 3)), la_arr("float64", (3,))])]
    return cases


def np_lstsq_cases(lib, row):
    cases = [Case([la_arr(dt, sh, spd=False) + np.eye(*sh).astype(dt), la_arr(dt2, bs, spd=False)], {"rcond": None})
             for dt in ["float32", "float64", "int64"] for dt2 in ["float32", "float64"]
             for sh, bs in [((5, 3), (5,)), ((5, 3), (5, 2)), ((3, 5), (3,)), ((3, 3), (3, 2))]]
    return cases + [Case([la_arr("float64", (5, 3)), la_arr("float64", (4,))])]


def np_cov_cases(lib, row):
    cases = [Case([mk(lib, dt, sh)], kw) for dt in ["float32", "float64", "int64", "bool", "complex64"]
             for sh in [(3, 5), (5,), (1, 5), (5, 1)] for kw in [{}, {"rowvar": False}]]
    cases += [Case([mk(lib, "float32", (2, 5)), mk(lib, "float32", (5,))]),
              Case([mk(lib, "float64", (5,)), mk(lib, "int32", (5,))]),
              Case([mk(lib, "float64", (2, 5))], {"dtype": np.float32}),
              Case([mk(lib, "float64", (2, 5)), mk(lib, "float64", (4,))]),
              Case([mk(lib, "float64", (2, 3, 5))])]
    if row[3] == "np_cov":
        cases += [Case([mk(lib, "float64", (2, 5))], {"ddof": 0}), Case([mk(lib, "float64", (2, 5))], {"bias": True}),
                  Case([mk(lib, "float32", (2, 5))], {"fweights": mk(lib, "int64", (5,))}),
                  Case([mk(lib, "float32", (2, 5))], {"aweights": mk(lib, "float64", (5,))})]
    return cases


def np_trapezoid_cases(lib, row):
    cases = [Case([mk(lib, dt, (3, 4))], kw) for dt in ["float32", "float64", "int64", "int32", "bool", "float16", "complex64"]
             for kw in [{}, {"dx": 0.5}, {"dx": 2}, {"axis": 0}, {"x": mk(lib, "float32", (4,))},
                        {"x": mk(lib, "int64", (3,)), "axis": 0}, {"dx": np.float32(2.0)}]]
    return cases + [Case([mk(lib, "float64", (5,))]), Case([mk(lib, "float64", (3, 4)), mk(lib, "float64", (3, 4))]),
                    Case([mk(lib, "float64", (3, 4))], {"x": mk(lib, "float64", (5,))})]


def np_interp_cases(lib, row):
    xp = np.array([1.0, 2.0, 3.0])
    cases = [Case([mk(lib, dt, sh), xp, fp]) for dt in ["float32", "float64", "int64"] for sh in [(4,), (2, 3), ()]
             for fp in [mk(lib, "float32", (3,)), mk(lib, "int64", (3,)), mk(lib, "complex64", (3,))]]
    return cases + [Case([2.5, xp, xp]), Case([mk(lib, "float64", (4,)), [1, 2], [0.0, 1.0]]),
                    Case([mk(lib, "float64", (4,)), xp, xp[:2]]), Case([mk(lib, "float64", (4,)), xp, xp], {"left": 0.0}),
                    Case([mk(lib, "float32", (4,)), xp, mk(lib, "float32", (3,))], {"period": 2.0}),
                    Case([mk(lib, "float64", (2, 2)), xp, mk(lib, "complex64", (3,))], {"period": 2})]


def np_tensordot_cases(lib, row):
    a, b = mk(lib, "float32", (2, 3, 4)), mk(lib, "float64", (3, 4, 5))
    return [Case([a, b]), Case([a, b], {"axes": 0}), Case([a, mk(lib, "int64", (4, 5))], {"axes": 1}),
            Case([a, b], {"axes": ([1, 2], [0, 1])}), Case([a, b], {"axes": [[-1], [1]]}),
            Case([mk(lib, "bool", (3,)), mk(lib, "bool", (3,))], {"axes": 1}), Case([a, b], {"axes": 3}),
            Case([a, b], {"axes": ([0], [0])}), Case([mk(lib, "int32", (2, 2)), mk(lib, "float16", (2, 2))])]


def np_kron_cases(lib, row):
    return [Case([mk(lib, d1, s1), mk(lib, d2, s2)]) for d1, d2 in [("float32", "float64"), ("int64", "bool"), ("bool", "bool"), ("int32", "float16")]
            for s1, s2 in [((2, 2), (2, 3)), ((3,), (2, 2)), ((), (2,)), ((1, 2, 2), (2,))]] + \
        [Case([mk(lib, "float32", (2, 2)), 2]), Case([[1.0, 2.0], mk(lib, "int32", (3,))])]


def np_searchsorted_cases(lib, row):
    if row[3] == "np_digitize":
        bins = np.array([1.0, 2.0, 3.0])
        return [Case([mk(lib, dt, sh), bins]) for dt in ["float32", "float64", "int64", "bool"] for sh in [(4,), (2, 3), ()]] + \
            [Case([mk(lib, "float64", (4,)), bins], {"right": True}), Case([mk(lib, "float64", (4,)), [3, 2, 1]]),
             Case([2.5, bins]), Case([mk(lib, "float64", (4,)), mk(lib, "float64", (2, 2))])]
    a = np.array([1.0, 2.0, 3.0])
    return [Case([a, v]) for v in [mk(lib, "float32", (4,)), mk(lib, "int64", (2, 3)), mk(lib, "float64", ()), 2.5, [1, 2]]] + \
        [Case([a, 2.0], {"side": "right"}), Case([a, 2.0], {"side": "middle"}), Case([mk(lib, "int32", (2, 3)), 2]),
         Case([a, mk(lib, "float64", (2, 2))], {"sorter": np.array([0, 1, 2])}),
         Case([a, 2.0], {"sorter": np.array([0, 1])}), Case([a, 2.0], {"sorter": np.array([0.0, 1.0, 2.0])}),
         Case([a, 2.0], {"sorter": np.array([0, 1, 2], dtype=np.int32), "side": "right"})]


def np_histogram_cases(lib, row):
    cases = [Case([mk(lib, dt, (20,))], kw) for dt in ["float32", "float64", "int64", "int32", "bool", "float16"]
             for kw in [{}, {"bins": 4}, {"bins": 3, "range": (0, 5)}, {"density": True},
                        {"bins": np.array([0.0, 1.0, 5.0])}, {"bins": [0, 2, 4]},
                        {"weights": mk(lib, "float32", (20,))}, {"weights": mk(lib, "int32", (20,))},
                        {"range": (np.float64(0), 5)}, {"range": [np.float32(0), np.float32(5)]},
                        {"range": (np.int64(0), 5)}, {"range": (0.5, 4.5)}]]
    return cases + [Case([mk(lib, "float64", (20,))], {"bins": 0}), Case([mk(lib, "float64", (20,))], {"bins": "auto"}, refuse=True),
                    Case([mk(lib, "float64", (4, 5))], {"bins": 3})]


def np_bincount_cases(lib, row):
    return [Case([mk(lib, dt, (6,))], kw) for dt in ["int64", "int32", "bool"]
            for kw in [{}, {"minlength": 10}, {"weights": mk(lib, "float32", (6,))}]] + \
        [Case([mk(lib, "float64", (6,))]), Case([mk(lib, "int64", (2, 3))]), Case([mk(lib, "int64", (6,))], {"minlength": -1})]


# ---- t_mech: the ops the torch mechanisms reach (shapes/rules_mech.c) ----
def matrix_exp_cases(lib, row):
    return [Case([mk(lib, dt, sh)]) for dt in ("float32", "float64", "int64") for sh in
            ((3, 3), (2, 4, 4), (0, 0), (2, 3), (3,), ())]


def weight_norm_cases(lib, row):
    v = mk(lib, "float32", (5, 4))
    return [Case([v, mk(lib, "float32", (5, 1)), 0]), Case([v, mk(lib, "float32", (1, 4)), 1]),
            Case([v, mk(lib, "float32", (5,)), 0]), Case([v, mk(lib, "float32", (5, 1)), -1]),
            Case([v, mk(lib, "float32", (1, 4))], {"dim": -1}), Case([v, mk(lib, "float32", (5, 1)), 2]),
            Case([v, mk(lib, "float64", (5, 1)), 0]), Case([v.double(), mk(lib, "float64", (5, 1)), 0]),
            Case([v.long(), mk(lib, "int64", (5, 1)), 0]), Case([v, mk(lib, "float32", (5,)), -1]),
            Case([mk(lib, "float32", (2, 3, 4)), mk(lib, "float32", (1, 3, 1)), 1])]


def rnn_cases(lib, row):
    op = row[3]
    nh, nin, L, N = 6, 4, 5, 2
    gates = {"lstm": 4, "gru": 3}.get(op, 1)
    cases = []
    for bidir in (False, True):
        for batch_first in (False, True):
            dirs = 2 if bidir else 1
            params = []
            for _ in range(dirs):
                params += [mk(lib, "float32", (gates * nh, nin)), mk(lib, "float32", (gates * nh, nh)),
                           mk(lib, "float32", (gates * nh,)), mk(lib, "float32", (gates * nh,))]
            x = mk(lib, "float32", (N, L, nin) if batch_first else (L, N, nin))
            h = mk(lib, "float32", (dirs, N, nh))
            hx = (h, mk(lib, "float32", (dirs, N, nh))) if op == "lstm" else h
            cases.append(Case([x, hx, params, True, 1, 0.0, False, bidir, batch_first]))
    x = mk(lib, "float32", (L, N, nin))
    params = [mk(lib, "float32", (gates * nh, nin)), mk(lib, "float32", (gates * nh, nh))]
    h = mk(lib, "float32", (1, N, nh))
    cases.append(Case([x, (h, h) if op == "lstm" else h, params, False, 1, 0.0, False, False, False]))
    cases.append(Case([x, (h, h) if op == "lstm" else h, params, False, 1, 0.0, False, False, False]))
    cases.append(Case([mk(lib, "int64", (L, N, nin)), (h, h) if op == "lstm" else h, params, False, 1, 0.0, False,
                       False, False]))
    return cases


def rnn_cell_cases(lib, row):
    op = row[3]
    gates = {"lstm_cell": 4, "gru_cell": 3}.get(op, 1)
    nh, nin, N = 6, 4, 3
    w_ih, w_hh = mk(lib, "float32", (gates * nh, nin)), mk(lib, "float32", (gates * nh, nh))
    b_ih, b_hh = mk(lib, "float32", (gates * nh,)), mk(lib, "float32", (gates * nh,))
    h = mk(lib, "float32", (N, nh))
    hx = (h, mk(lib, "float32", (N, nh))) if op == "lstm_cell" else h
    return [Case([mk(lib, "float32", (N, nin)), hx, w_ih, w_hh, b_ih, b_hh]),
            Case([mk(lib, "float32", (N, nin)), hx, w_ih, w_hh]),
            Case([mk(lib, "int64", (N, nin)), hx, w_ih, w_hh, b_ih, b_hh])]

def index_select_cases(lib, row):
    x = mk(lib, "float32", (3, 4))
    i = mk(lib, "int64", (5,), lo=0, hi=2)
    return [Case([x, 0, i]), Case([x, 1, i]), Case([x, -1, mk(lib, "int32", (2,), lo=0, hi=2)]),
            Case([x, 0, mk(lib, "int64", (), lo=0, hi=2)]), Case([mk(lib, "int64", (4, 2)), 0, i]),
            Case([mk(lib, "float32", ()), 0, mk(lib, "int64", (1,), lo=0, hi=0)]),
            Case([x, 0, mk(lib, "int64", (2, 2), lo=0, hi=1)]),      # eager raises: not a vector
            Case([x, 0, mk(lib, "float32", (2,), lo=0, hi=1)]),      # eager raises: float index
            Case([x, 2, i])]                                         # eager raises: dim


def index_add_cases(lib, row):
    x = mk(lib, "float32", (3, 4))
    i = mk(lib, "int64", (2,), lo=0, hi=2)
    cases = [Case([x, 0, i, mk(lib, "float32", (2, 4))]), Case([x, 1, i, mk(lib, "float32", (3, 2))]),
             Case([x, -1, i, mk(lib, "float32", (3, 2))], {"alpha": 2.0}),
             Case([mk(lib, "int64", (3, 4)), 0, i, mk(lib, "int64", (2, 4))]),
             Case([x, 0, i, mk(lib, "float32", (3, 4))]),             # eager raises: count
             Case([x, 0, i, mk(lib, "float64", (2, 4))]),             # eager raises: dtype
             Case([x, 0, i, mk(lib, "float32", (2, 5))])]             # eager raises: other dim
    return cases


def repeat_interleave_cases(lib, row):
    x = mk(lib, "float32", (2, 3))
    cases = [Case([x, 2]), Case([x, 2, 0]), Case([x, 3], {"dim": -1}), Case([x, 0, 1]),
             Case([mk(lib, "int64", ()), 2]), Case([mk(lib, "int64", ()), 2, 0]),
             Case([x, 2, 1], {"output_size": 6}),
             Case([x, mk(lib, "int64", (3,), lo=1, hi=2), 1], refuse=True),   # repeats from the data
             Case([x, -1]),                                                   # eager raises
             Case([x, 2, 2])]                                                 # eager raises: dim
    if row[2].startswith("torch."):
        cases.append(Case([mk(lib, "int64", (3,), lo=1, hi=2)], refuse=True))
    return cases


def one_hot_cases(lib, row):
    i = mk(lib, "int64", (2, 3), lo=0, hi=3)
    return [Case([i, 4]), Case([i], {"num_classes": 5}), Case([mk(lib, "int64", (), lo=0, hi=1), 2]),
            Case([i], refuse=True),                                    # the classes from the data
            Case([mk(lib, "int32", (2,), lo=0, hi=1), 3])]             # eager raises: not int64


def glu_cases(lib, row):
    return [Case([mk(lib, "float32", (2, 4))]), Case([mk(lib, "float64", (4, 3)), 0]),
            Case([mk(lib, "float32", (2, 6, 3))], {"dim": 1}),
            Case([mk(lib, "float32", (2, 3))]),                        # eager raises: odd
            Case([mk(lib, "float32", ())]),                            # eager raises: scalar
            Case([mk(lib, "int64", (2, 4))])]                          # eager raises: integer


def histc_cases(lib, row):
    x = mk(lib, "float32", (2, 3))
    return [Case([x]), Case([x, 4]), Case([x], {"bins": 3, "min": 0, "max": 5}),
            Case([mk(lib, "float64", (5,)), 2]), Case([mk(lib, "float32", ())]),
            Case([x, 0]),                                              # eager raises: bins
            Case([mk(lib, "int64", (3,)), 4])]                         # eager raises: integer


def unfold_cases(lib, row):
    x = mk(lib, "float32", (2, 3, 9, 1))
    y = mk(lib, "float32", (2, 3, 5, 5))
    return [Case([x, [3, 1]], {"padding": [1, 0]}), Case([x[0], (3, 1), 1, (1, 0)]),
            Case([y, 2], {"dilation": 2, "stride": 2, "padding": 1}), Case([y, (2, 3)]),
            Case([mk(lib, "float64", (3, 4, 4)), 2, 1, 0, 2]),
            Case([mk(lib, "float32", (2, 3, 1, 1)), 3]),                 # eager raises: no block
            Case([mk(lib, "int64", (2, 3, 5, 5)), 3]),                   # eager raises: integer
            Case([mk(lib, "float32", (3, 5)), 2]),                       # eager raises: rank
            Case([y, 2], {"stride": 0})]                                 # eager raises: stride


def meshgrid_cases(lib, row):
    a, b = mk(lib, "int64", (3,)), mk(lib, "int64", (4,))
    return [Case([a, b], {"indexing": "ij"}), Case([a, b], {"indexing": "xy"}),
            Case([[a, b]], {"indexing": "ij"}), Case([a], {"indexing": "xy"}),
            Case([mk(lib, "float32", ()), mk(lib, "float32", (2,)), mk(lib, "float32", (3,))],
                 {"indexing": "ij"}),
            Case([a, mk(lib, "float32", (2,))], {"indexing": "ij"}),      # eager raises: dtypes
            Case([mk(lib, "int64", (2, 2)), a], {"indexing": "ij"}),      # eager raises: 2-d
            Case([a, b], {"indexing": "yx"})]                             # eager raises


def reshape_as_cases(lib, row):
    x = mk(lib, "float32", (2, 6))
    return [Case([x, mk(lib, "int64", (3, 4))]), Case([x, mk(lib, "float32", (12,))]),
            Case([mk(lib, "float32", ()), mk(lib, "float32", (1, 1))]),
            Case([x, mk(lib, "float32", (5,))])]                       # eager raises: numel


def to_numpy_cases(lib, row):
    cases = [Case([mk("torch", dt, sh)]) for dt in MAIN_DTYPES + ["uint8", "int8"] for sh in [(2, 3), (), (0,)]]
    cases += [Case([mk("torch", "bfloat16", (2,))]),                          # eager raises: no numpy bfloat16
              Case([mk("torch", "float32", (3,)).requires_grad_()]),          # under no_grad: an array
              Case([mk("torch", "complex64", (2,))], refuse=True)]            # conj bit not modelled
    return cases


def from_numpy_cases(lib, row):
    cases = [Case([mk("numpy", dt, sh)]) for dt in MAIN_DTYPES + ["uint8", "int8"] for sh in [(2, 3), (), (0,)]]
    cases += [Case([mk("numpy", "float32", (4, 3)).T]), Case([np.ones((2, 2), np.complex64)]),
              Case([npscalar("float32")])]                                    # eager raises: not an array
    return cases


FAMILIES = {
    "rule_same": unary_dispatch, "rule_copy": unary_dispatch, "rule_unary_float": unary_dispatch, "rule_unary_bool": unary_dispatch,
    "rule_clamp": clamp_cases, "rule_binary": binary_cases, "rule_truediv": binary_cases, "rule_binary_float": binary_cases,
    "rule_compare": compare_cases, "rule_where": where_cases, "rule_masked_fill": masked_fill_cases,
    "rule_lerp": lerp_cases, "rule_cast": cast_cases, "rule_reduce": reduce_cases,
    "rule_max_min": max_min_cases, "rule_scan": reduce_cases, "rule_softmax": softmax_cases,
    "rule_view": view_cases, "rule_permute": permute_cases, "rule_transpose": transpose_cases,
    "rule_t": t_cases, "rule_unsqueeze": unsqueeze_cases, "rule_squeeze": squeeze_cases,
    "rule_flatten": flatten_cases, "rule_unflatten": unflatten_cases, "rule_gather": gather_cases, "rule_new_factory": new_factory_cases, "rule_diff": diff_cases, "rule_sort": sort_cases, "rule_topk": topk_cases, "rule_inner": inner_cases, "rule_diag": diag_cases, "rule_vstack": vstack_cases, "rule_hstack": vstack_cases, "rule_diagonal": diagonal_cases, "rule_expand": expand_cases, "rule_expand_as": expand_as_cases,
    "rule_getitem": getitem_cases, "rule_narrow": narrow_cases, "rule_select": select_cases,
    "rule_movedim": movedim_cases, "rule_split": split_cases, "rule_chunk": chunk_cases,
    "rule_unbind": unbind_cases, "rule_repeat": repeat_cases, "rule_cat": cat_cases,
    "rule_stack": cat_cases, "rule_matmul": matmul_cases, "rule_linear": linear_cases,
    "rule_addmm": addmm_cases, "rule_outer": outer_cases, "rule_einsum": einsum_cases,
    "rule_norm_like": norm_cases, "rule_conv": conv_cases, "rule_pool": pool_cases,
    "rule_adaptive_pool": adaptive_cases, "rule_embedding": embedding_cases, "rule_sdpa": sdpa_cases,
    "rule_pad": pad_cases, "rule_factory": factory_cases, "rule_factory_like": factory_like_cases,
    "rule_arange": arange_cases, "rule_linspace": linspace_cases, "rule_eye": eye_cases,
    "rule_np_la_square": np_la_square_cases, "rule_np_det": np_det_cases, "rule_np_eigh": np_eigh_cases,
    "rule_np_svd": np_svd_cases, "rule_np_pinv": np_pinv_cases, "rule_np_qr": np_qr_cases, "rule_np_solve": np_solve_cases,
    "rule_np_lstsq": np_lstsq_cases, "rule_np_cov": np_cov_cases, "rule_np_trapezoid": np_trapezoid_cases,
    "rule_np_interp": np_interp_cases, "rule_np_tensordot": np_tensordot_cases, "rule_np_kron": np_kron_cases,
    "rule_np_searchsorted": np_searchsorted_cases, "rule_np_histogram": np_histogram_cases,
    "rule_np_bincount": np_bincount_cases,
    "rule_tensor_const": tensor_cases, "rule_nonzero": nonzero_cases, "rule_masked_select": masked_select_cases,
    "rule_flatnonzero": flatnonzero_cases, "rule_unique": unique_cases, "rule_ufunc_scan": ufunc_scan_cases, "rule_ufunc_at": ufunc_at_cases, "rule_setitem": setitem_cases, "rule_none": grad_cases,
    "rule_rnn": rnn_cases, "rule_matrix_exp": matrix_exp_cases, "rule_weight_norm": weight_norm_cases,
    "rule_rnn_cell": rnn_cell_cases,
    "rule_conv_transpose": conv_transpose_cases,
    "rule_interpolate": interpolate_cases, "rule_addc": addc_cases, "rule_tensor_new": tensor_new_cases,
    "rule_tensor_data": tensor_data_cases, "rule_random_fill": random_fill_cases,
    "rule_random_factory": random_factory_cases,
    "rule_index_select": index_select_cases, "rule_index_add": index_add_cases,
    "rule_repeat_interleave": repeat_interleave_cases, "rule_one_hot": one_hot_cases,
    "rule_glu": glu_cases, "rule_reshape_as": reshape_as_cases, "rule_histc": histc_cases,
    "rule_unfold": unfold_cases, "rule_meshgrid": meshgrid_cases,
    "rule_to_numpy": to_numpy_cases, "rule_from_numpy": from_numpy_cases,
}


# op name -> rule name, as vocab/ops.def has them in the build.
RULE_OF = {name: rule for name, _, rule in _C._op_rows()}


def copy_arg(v):
    if isinstance(v, torch.Size):
        return v   # immutable, and its type matters (x.new(torch.Size) is a size, a tuple data)
    if isinstance(v, torch.Tensor):
        return v.clone()
    if isinstance(v, np.ndarray):
        return v.copy()
    if isinstance(v, list):
        return [copy_arg(x) for x in v]
    if isinstance(v, tuple):
        return tuple(copy_arg(x) for x in v)
    return v


def run_case(row, case):
    """Returns None when the rule agrees, else a message."""
    rid, kind, path, op, schema, flags = row
    fn = resolve(path)
    args = [copy_arg(a) for a in case.args]
    kwargs = {k: copy_arg(v) for k, v in case.kwargs.items()}
    try:
        with torch.no_grad() if op != "set_grad_enabled" else _Nothing():
            res = fn(*args, **kwargs)
        if op == "setitem" or "CF_RETURNS_NONE" in flags:
            res = args[0]   # the call writes into its first argument (and returns None)
        if op == "set_grad_enabled":
            torch._C._set_grad_enabled(True)
            want = []
        else:
            want = outputs_of(res)
        eager_err = None
    except Exception as e:  # noqa: BLE001 - any eager failure must be refused by the rule
        eager_err = e
    try:
        got = _C._infer(path, case.args, case.kwargs)
        rule_err = None
    except ValueError as e:
        rule_err = e
    if eager_err is not None:
        if rule_err is None:
            return f"eager raised {type(eager_err).__name__}: {str(eager_err)[:120]} but rule gave {got}"
        return None
    if rule_err is not None:
        if case.refuse or any(w[0] not in SUPPORTED for w in want):
            return None
        return f"rule refused ({rule_err}) but eager gave {want}"
    if case.refuse:
        return f"expected a refusal, rule gave {got}"
    got = [tuple(g) for g in got]
    if op in ("nonzero", "masked_select", "flatnonzero", "unique"):   # the data decides the rows: the rule gives the stand-in
        want = [(d, (UNBACKED_HINT,) + sh[1:], sc) for d, sh, sc in want]
    if op == "np_bincount":
        want = [(d, (UNBACKED_HINT,), sc) for d, sh, sc in want]
    if op == "np_lstsq" and case.args[0].shape[0] > case.args[0].shape[1]:   # residuals: data
        want[1] = (want[1][0], (UNBACKED_HINT,), want[1][2])
    if got != want:
        return f"rule gave {got}, eager gave {want}"
    return None


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def fmt_args(case):
    def f(v):
        if isinstance(v, (torch.Tensor, np.ndarray)):
            return f"{type(v).__name__}({str(v.dtype).replace('torch.', '')}{list(v.shape)})"
        if isinstance(v, np.generic):
            return f"np.{v.dtype}({v})"
        if isinstance(v, (list, tuple)):
            return type(v)(f(x) for x in v)
        return v
    return f"{[f(a) for a in case.args]} {({k: f(v) for k, v in case.kwargs.items()})}"


def test_rows_resolve_uniquely():
    seen = {}
    alive = []   # bound methods (numpy.add.at) are fresh objects: keep each alive so ids stay unique
    for row in ROWS:
        obj = resolve(row[2])
        alive.append(obj)
        assert id(obj) not in seen, f"{row[2]} is the same object as {seen[id(obj)]}"
        seen[id(obj)] = row[2]


@pytest.mark.parametrize("row", ROWS, ids=[r[2] for r in ROWS])
def test_row(row):
    rule = RULE_OF[row[3]]
    builder = FAMILIES[rule]
    lib = lib_of(row[1])
    cases = builder(lib, row)
    failures = []
    agreed = 0
    for case in cases:
        msg = run_case(row, case)
        if msg:
            failures.append(f"{fmt_args(case)}: {msg}")
        else:
            agreed += 1
    assert not failures, f"{row[2]}: {len(failures)} of {len(cases)} cases differ:\n" + \
        "\n".join(failures[:25])
    # every row must have at least one case that eager accepted and the rule matched
    exercised = False
    for case in cases:
        try:
            fn = resolve(row[2])
            fn(*[copy_arg(a) for a in case.args], **{k: copy_arg(v) for k, v in case.kwargs.items()})
            if not case.refuse:
                exercised = True
                break
        except Exception:  # noqa: BLE001
            continue
    if row[3] == "set_grad_enabled":
        torch._C._set_grad_enabled(True)
    assert exercised, f"{row[2]}: no case succeeded in eager"


def test_promotion_examples():
    """The promotion examples spelled out in the design notes."""
    t, n = torch, np
    cases = [
        ("operator.add", (t.ones(2, dtype=t.int64), 2.5), "float32"),
        ("operator.truediv", (t.ones(2, dtype=t.int32), t.ones(2, dtype=t.int32)), "float32"),
        ("operator.add", (t.ones(2, dtype=t.float16), t.ones(2, dtype=t.float32)), "float32"),
        ("operator.add", (t.ones(2, dtype=t.bool), t.ones(2, dtype=t.bool)), "bool"),
        ("operator.add", (n.ones(2, n.int64), 2.5), "float64"),
        ("operator.add", (n.ones(2, n.float32), 2.0), "float32"),
        ("operator.add", (n.ones(2, n.int32), n.float64(1)), "float64"),
        ("operator.add", (n.ones(2, n.int8), n.ones(2, n.int16)), "int16"),
        ("operator.add", (n.ones(2, n.uint8), n.ones(2, n.int8)), "int16"),
        ("operator.truediv", (n.ones(2, n.int64), n.ones(2, n.int64)), "float64"),
    ]
    for path, args, want in cases:
        assert _C._infer(path, args, {})[0][0] == want, (path, args)


def test_out_is_refused():
    with pytest.raises(ValueError, match="out="):
        _C._infer("torch.sin", (torch.ones(2),), {"out": torch.ones(2)})


def test_default_dtype_followed():
    old = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)
        assert _C._infer("operator.add", (torch.ones(2, dtype=torch.int64), 2.5), {})[0][0] == "float64"
        assert _C._infer("torch.zeros", ((2,),), {})[0][0] == "float64"
    finally:
        torch.set_default_dtype(old)
