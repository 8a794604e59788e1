"""Generated pointwise kernels: the helpers with NaN and signed-zero rules (relu, clamp,
maximum, minimum, leaky_relu, elu, pow, erf, ...) give eager's values bit for bit, and
their loops vectorise on AVX2 (x86-64-v3) as well as AVX-512 (x86-64-v4).

GCC keeps FP arithmetic and ordered compares that sit under a condition from running
speculatively (-ftrapping-math, the default): without AVX-512's masks such a loop stays
scalar ("not vectorized: control flow in loop"). The helpers compute both sides and pick
with selects (backend/emit.c sj_sel). The vectorisation test compiles the kernels' C
sources as written to the disk cache for both targets (compile only: the machine may lack
AVX-512) and reads GCC's -fopt-info report for the `#pragma omp simd` loops."""
import re
import shutil
import subprocess
import zlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import shapejit
from shapejit import _C

SPECIAL = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 3.0, -3.0, 6.0, -6.0,
           7.25, -7.25, 1e-30, -1e-30, 2.5, -2.5, 1e30, -1e30]


def _data(n, dtype, seed):
    """Specials and ordinary values, shuffled, so they land in the vector loop and its
    tail. Two arrays (x, y); where both are zeros in the last 128 elements y moves off
    zero: torch's own scalar tail breaks ties of +-0 in maximum/minimum the other way
    round from its vector loop (numpy and shapejit take the second operand throughout)."""
    rng = np.random.default_rng(seed)
    pool = np.array(SPECIAL + list(rng.standard_normal(64) * 4), dtype=np.float64)
    x = rng.choice(pool, n).astype(dtype)
    y = rng.choice(pool, n).astype(dtype)
    x[:len(SPECIAL)] = SPECIAL
    y[:len(SPECIAL)] = SPECIAL[::-1]
    x[len(SPECIAL):2 * len(SPECIAL)] = SPECIAL   # every pairing of a special with itself
    y[len(SPECIAL):2 * len(SPECIAL)] = SPECIAL
    tail = slice(n - 128, n)
    both0 = (x[tail] == 0) & (y[tail] == 0)
    y[tail][both0] = 0.25
    return x, y


def _same(got, want):
    """Bit-for-bit up to NaN payloads: dtype, NaN positions, values, signs of zeros."""
    g = got.numpy() if isinstance(got, torch.Tensor) else np.asarray(got)
    w = want.numpy() if isinstance(want, torch.Tensor) else np.asarray(want)
    assert type(got) is type(want) and g.dtype == w.dtype and g.shape == w.shape
    gn, wn = np.isnan(g), np.isnan(w)
    bad = np.flatnonzero((gn != wn) | (~gn & ~wn & ((g != w) | (np.signbit(g) != np.signbit(w)))))
    assert bad.size == 0, f"{bad.size} elements differ, first at {bad[0]}: got {g[bad[0]]!r}, eager {w[bad[0]]!r}"


TORCH_FNS = {
    "relu": lambda x, y: torch.relu(x),
    "relu_method": lambda x, y: x.relu() * 2,
    "relu6": lambda x, y: F.relu6(x),
    "hardtanh": lambda x, y: F.hardtanh(x),
    "hardtanh_0_1": lambda x, y: F.hardtanh(x, 0.0, 1.0),
    "clamp": lambda x, y: torch.clamp(x, -1.0, 1.0),
    "clamp_zero_bounds": lambda x, y: x.clamp(-0.0, 0.0),
    "clamp_min": lambda x, y: x.clamp(min=0.0),
    "clamp_max": lambda x, y: x.clamp(max=-0.0),
    "clamp_crossed": lambda x, y: x.clamp(2.0, 1.0),
    "clamp_nan_min": lambda x, y: x.clamp(min=float("nan")),
    "clamp_nan_max": lambda x, y: x.clamp(-1.0, float("nan")) + 1,
    "maximum": lambda x, y: torch.maximum(x, y),
    "minimum": lambda x, y: torch.minimum(x, y),
    "max_min_chain": lambda x, y: torch.minimum(torch.maximum(x, y) * 2, y + 1),
    "hardswish": lambda x, y: F.hardswish(x),
    "where": lambda x, y: torch.where(x > y, x, y),
    "leaky_relu": lambda x, y: F.leaky_relu(x, 0.1),
    "relu_clamp_chain": lambda x, y: torch.relu(x * 2 + 1).clamp(-1, 1),
}

NUMPY_FNS = {
    "maximum": lambda x, y: np.maximum(x, y),
    "minimum": lambda x, y: np.minimum(x, y),
    "maximum_scalar": lambda x, y: np.maximum(x, 0.0),
    "minimum_scalar": lambda x, y: np.minimum(x, -0.0),
    "clip": lambda x, y: np.clip(x, -1.0, 1.0),
    "clip_zero_bounds": lambda x, y: np.clip(x, -0.0, 0.0),
    "clip_relu6": lambda x, y: np.clip(x * 2, 0.0, 6.0),
    "clip_min_only_zero": lambda x, y: np.clip(x, 0.0, None),     # maximum: ties give the bound
    "clip_max_only_zero": lambda x, y: np.clip(x, None, -0.0),
    "clip_method_max_only": lambda x, y: x.clip(max=0.0),
    "clip_min_only": lambda x, y: np.clip(x, -1.0, None),
    "clip_neg_inf_given": lambda x, y: np.clip(x, -np.inf, 0.0),  # both given: ties keep x
    "clip_nan_bound": lambda x, y: np.clip(x, np.nan, 1.0),
    "where": lambda x, y: np.where(x > y, x, y),
    "max_min_chain": lambda x, y: np.minimum(np.maximum(x, y) * 2, y + 1),
}


@pytest.mark.parametrize("n", [1000, 1027])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(TORCH_FNS))
def test_torch_values_bitwise(fresh_shapejit, name, dtype, n):
    fn = TORCH_FNS[name]
    x, y = (torch.from_numpy(a) for a in _data(n, dtype, zlib.crc32(name.encode()) % 1000))
    want = fn(x, y)
    cf = shapejit.compile(fn)
    _same(cf(x, y), want)
    _same(cf(x, y), want)


@pytest.mark.parametrize("n", [1000, 1027])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(NUMPY_FNS))
def test_numpy_values_bitwise(fresh_shapejit, name, dtype, n):
    fn = NUMPY_FNS[name]
    x, y = _data(n, dtype, zlib.crc32(name.encode()) % 1000)
    with np.errstate(all="ignore"):
        want = fn(x, y)
        cf = shapejit.compile(fn)
        _same(cf(x, y), want)
        _same(cf(x, y), want)


# ----------------------------------------------------------------- vectorisation ---


def _gcc():
    cc = shutil.which("gcc")
    if not cc:
        return None
    out = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout
    return cc if "gcc" in out.lower() or "free software" in out.lower() else None


def _unary(op):
    """op in a chain: arithmetic before and after it, which GCC would otherwise sink into
    a branch of op's select (the shape of real chains: x * a + b, op, y * y + x)."""
    def fn(x, y):
        a = x * 1.5 + 0.25
        b = op(a)
        return b * b - a * 0.5 + y
    return fn


def _binary(op):
    def fn(x, y):
        a = x * 1.5 + 0.25
        b = op(a, y + 0.5)
        return b * b - a * 0.5 + y
    return fn


def _pred(op):
    def fn(x, y):
        a = x * 1.5 + 0.25
        return torch.where(op(a, y), a * 2, y - 1)
    return fn


def _ints(op):
    def fn(x, y):
        a, b = (x * 8).int(), (y * 8).int() | 1
        return op(a * 3 + 1, b) * 2 - a
    return fn


# One chain per row of backend/lower.def (test_every_lowering_has_a_chain keeps them in
# step). Float chains run in float32 and float64.
LOWERING_CHAINS = {
    "NEG": _unary(torch.neg), "ABS": _unary(torch.abs), "RELU": _unary(torch.relu), "RELU6": _unary(F.relu6),
    "LEAKY_RELU": _unary(lambda a: F.leaky_relu(a, 0.1)), "ELU": _unary(F.elu), "HARDTANH": _unary(F.hardtanh),
    "SOFTPLUS": _unary(lambda a: F.softplus(a * 8, beta=0.5, threshold=6.0)),
    "CLAMP": _unary(lambda a: a.clamp(-1.0, 2.0)), "FLOOR": _unary(torch.floor), "CEIL": _unary(torch.ceil),
    "TRUNC": _unary(torch.trunc), "SQUARE": _unary(torch.square), "CLONE": _unary(torch.clone),
    "CAST": lambda x, y: (x * 1.5 + 0.25).to(torch.float64 if x.dtype == torch.float32 else torch.float32) * 2 + 1,
    "SIN": _unary(torch.sin), "COS": _unary(torch.cos), "TAN": _unary(torch.tan),
    "ASIN": _unary(lambda a: torch.asin(a * 0.1)), "ACOS": _unary(lambda a: torch.acos(a * 0.1)),
    "ATAN": _unary(torch.atan), "SINH": _unary(torch.sinh), "COSH": _unary(torch.cosh), "TANH": _unary(torch.tanh),
    "EXP": _unary(torch.exp), "EXP2": _unary(torch.exp2), "EXPM1": _unary(torch.expm1), "LOG": _unary(torch.log),
    "LOG2": _unary(torch.log2), "LOG10": _unary(torch.log10), "LOG1P": _unary(torch.log1p),
    "SQRT": _unary(torch.sqrt), "RSQRT": _unary(torch.rsqrt), "RECIPROCAL": _unary(torch.reciprocal),
    "SIGMOID": _unary(torch.sigmoid), "ERF": _unary(torch.erf), "GELU": _unary(F.gelu), "SILU": _unary(F.silu),
    "MISH": _unary(F.mish), "HARDSWISH": _unary(F.hardswish), "HARDSIGMOID": _unary(F.hardsigmoid),
    "BITWISE_NOT": _ints(lambda a, b: ~a), "ISNAN": _pred(lambda a, b: torch.isnan(a - b)),
    "ISINF": _pred(lambda a, b: torch.isinf(a / (b - 1))), "ISFINITE": _pred(lambda a, b: torch.isfinite(a / b)),
    "LOGICAL_NOT": _pred(lambda a, b: torch.logical_not(a > b)),
    "ADD": _binary(torch.add), "SUB": _binary(torch.sub), "MUL": _binary(torch.mul), "TRUEDIV": _binary(torch.div),
    "FLOORDIV": _binary(torch.floor_divide), "MOD": _binary(torch.remainder), "FMOD": _binary(torch.fmod),
    "POW": _binary(torch.pow), "MAXIMUM": _binary(torch.maximum), "MINIMUM": _binary(torch.minimum),
    "ATAN2": _binary(torch.atan2), "HYPOT": _binary(torch.hypot),
    "BITWISE_AND": _ints(torch.bitwise_and), "BITWISE_OR": _ints(torch.bitwise_or),
    "BITWISE_XOR": _ints(torch.bitwise_xor),
    "EQ": _pred(torch.eq), "NE": _pred(torch.ne), "LT": _pred(torch.lt), "LE": _pred(torch.le), "GT": _pred(torch.gt),
    "GE": _pred(torch.ge), "LOGICAL_AND": _pred(lambda a, b: torch.logical_and(a > 1, b > 0.5)),
    "LOGICAL_OR": _pred(lambda a, b: torch.logical_or(a > 1, b > 0.5)),
    "LOGICAL_XOR": _pred(lambda a, b: torch.logical_xor(a > 1, b > 0.5)),
    "WHERE": _binary(lambda a, b: torch.where(a > b, a * 3, b - 2)),
    "MASKED_FILL": _unary(lambda a: a.masked_fill(a > 1, 0.5)),
}

# Loops that stay scalar, and why: glibc has no vector fmod, and an exact remainder (which
# floor division and mod build on) has no short branch-free vector form.
SCALAR_OK = {"FLOORDIV", "MOD", "FMOD"}


def _arith10(x, y):   # bench/pointwise_bw.py's chain
    y2 = x * 1.5 + 0.25
    y2 = y2.relu() - 0.5
    y2 = y2 * y2 + x
    y2 = y2.clamp(-2.0, 2.0) * 0.75
    return y2 - x * 0.5 + 1.0


def _chain10(x, y):
    y2 = x * 1.5 + 0.25
    y2 = y2.relu() - 0.5
    y2 = y2.sigmoid() * 2.0
    y2 = y2.tanh() + y2
    return (-y2).exp() / (1.0 + y2 * y2)


# Chains from the benchmarks and the value tests above, torch and numpy.
def _rms_norm(h, w):
    """An RMS norm with its residual sum before it (one row kernel in float32)."""
    return w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6))


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def _rotate_pairs(x):
    return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)


MIXED_CHAINS = {
    "arith10": _arith10,
    "rope_half": lambda x, y: x * y + _rotate_half(x) * (y - 1),     # rotated reads (plan_rot.c)
    "rope_pairs": lambda x, y: x * y + _rotate_pairs(x) * (y - 1),
    "chain10": _chain10,
    "max_min": lambda x, y: torch.maximum(x, y) + torch.minimum(x, y),
    "relu6_hardswish": lambda x, y: F.relu6(x) + F.hardswish(y),
    "leaky_elu": lambda x, y: F.leaky_relu(x, 0.2) + F.elu(y),
    "pow_tensor": lambda x, y: torch.pow(x, y),
    "where_hardtanh": lambda x, y: torch.where(x > 0, F.hardtanh(x), y),
    "sum_rows": lambda x, y: (x * y + 1).sum(-1) * 2,
    "mean_cols": lambda x, y: (x - y).mean(0) + 1,
    "amax_rows": lambda x, y: (x * 2 - y).amax(-1) - 1,
    "amin_cols": lambda x, y: (x * 2 - y).amin(0) + 1,
    "gelu_tanh": lambda x, y: F.gelu(x - y, approximate="tanh") * 2,
    "softmax": lambda x, y: torch.softmax(x * 2 + y, dim=-1),
    "log_softmax": lambda x, y: torch.log_softmax(x - y, dim=-1),
    "layer_norm": lambda x, y: F.layer_norm(x * 2, (x.shape[-1],)) * y,
    "var_rows": lambda x, y: (x + y).var(-1),
    "rms_norm": lambda x, y: _rms_norm(x + y, y[0]),
    "sibling_cols": lambda x, y: (x * y).sum(0) + (x - y).sum(0),
    "np_sum_max": lambda x, y: (x * y).sum(axis=1) + (x - y).max(axis=0).sum(),
    "sdpa": lambda x, y: F.scaled_dot_product_attention(x, y, x - y),
    "sdpa_causal": lambda x, y: F.scaled_dot_product_attention(x, y, x - y, is_causal=True),
    "sdpa_float_mask": lambda x, y: F.scaled_dot_product_attention(x, y, x - y, attn_mask=x[0] @ y[0].T),
    "sdpa_bool_mask": lambda x, y: F.scaled_dot_product_attention(x, y, x - y, attn_mask=x[0] @ y[0].T > 5),
    "np_max_clip": lambda x, y: np.clip(np.maximum(x, y) * 2 - 1, -1.0, 1.0) * x,
    "np_where_chain": lambda x, y: np.where(x > y, np.sqrt(x) + 1, y * y) - x,
}


REDUCING = {"sum_rows", "mean_cols", "amax_rows", "amin_cols", "softmax", "log_softmax", "layer_norm", "var_rows",
            "rms_norm", "sibling_cols",
            "np_sum_max"}


def test_every_lowering_has_a_chain():
    rows = {name.upper() for name, *_ in _C._lower_rows()}   # the chains are keyed as lower.def's OP_ enums
    assert rows == set(LOWERING_CHAINS), sorted(rows ^ set(LOWERING_CHAINS))


def _chain_cases():
    for name, fn in sorted(LOWERING_CHAINS.items()):
        yield f"lower_{name}", fn, name not in SCALAR_OK, False
    for name, fn in sorted(MIXED_CHAINS.items()):
        yield name, fn, True, name.startswith("np_")


def _compile_flags():
    """The kernel compiler's flags as the running build uses them (its identity's last
    line), for a compile-only object: no -march (the test sets it), no -shared, no libs."""
    words = _C._cg_identity().strip().split("\n")[-1].split()
    drop = ("-march=", "-shared", "-l", "-DCG_EXPORT")
    return [w for w in words if not w.startswith(drop)] + ["-DCG_EXPORT="]


@pytest.fixture(scope="module")
def kernel_sources(tmp_path_factory):
    """Compiles every chain in float32 and float64 with a fresh cache root, checking each
    result against eager; yields {kernel source path: (text, chain name, checked)}."""
    root = tmp_path_factory.mktemp("vec_cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("SHAPEJIT_CACHE_DIR", str(root))
    shapejit.reset()
    _C._cg_forget()
    kdir = root / "kernels"
    found = {}
    try:
        for name, fn, must, numpy_chain in _chain_cases():
            before = set(kdir.glob("*.c")) if kdir.is_dir() else set()
            for dt in (np.float32, np.float64):
                rng = np.random.default_rng(zlib.crc32(name.encode()))
                # attention: (batch, queries, embedding), enough scores for the attention step
                shape = ((4, 40, 16) if name.startswith("sdpa") else (13, 79) if name in REDUCING
                         else (13, 80) if name.startswith("rope") else (1027,))
                x, y = (rng.random(shape) * 4 + 0.5).astype(dt), (rng.random(shape) * 4 + 0.5).astype(dt)
                if not numpy_chain:
                    x, y = torch.from_numpy(x), torch.from_numpy(y)
                with np.errstate(all="ignore"):
                    want = fn(x, y)
                    got = shapejit.compile(fn)(x, y)
                if numpy_chain:
                    np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=name)
                else:
                    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, msg=name)
            for p in set(kdir.glob("*.c")) - before:
                found[p] = (p.read_text(), name, must)
            shapejit.reset()
        yield found
    finally:
        mp.undo()
        shapejit.reset()
        _C._cg_forget()


def _simd_loops(text):
    """(first, last) line numbers (1-based) of the loops under `#pragma omp simd` in the
    kernels: GCC reports a loop at the place of a statement in it, not always its `for`."""
    lines = text.split("\n")
    loops = []
    for i, l in enumerate(lines):
        if l.strip().startswith("#pragma omp simd"):
            indent = lines[i + 1][:len(lines[i + 1]) - len(lines[i + 1].lstrip())]
            end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith(indent + "}"))
            loops.append((i + 2, end + 1))
    return loops


def test_helpers_in_kernels(kernel_sources):
    """The ops run in generated kernels, not as eager steps (else the chains would test
    eager's code)."""
    body = "\n".join(t[t.index("_part("):] for t, _, _ in kernel_sources.values() if "_part(" in t)
    for helper in ("sj_relu(", "sj_clamp(", "sj_max(", "sj_min(", "sj_maxd(", "sj_clampd(", "sj_sel(", "sj_seld(",
                   "sj_pow(", "sj_powd(", "sj_erff(", "sj_relud("):
        assert helper in body, helper
    chains = {name for _, name, _ in kernel_sources.values()}
    missing = {f"lower_{n}" for n in LOWERING_CHAINS} - chains
    assert not missing, f"chains that made no kernel (ran eagerly): {sorted(missing)}"


@pytest.mark.parametrize("march", ["x86-64-v3", "x86-64-v4"])
def test_kernel_loops_vectorize(kernel_sources, march, tmp_path):
    cc = _gcc()
    if cc is None:
        pytest.skip("needs gcc for -fopt-info")
    flags = _compile_flags()
    failures, checked = [], 0
    for path, (text, name, must) in kernel_sources.items():
        loops = _simd_loops(text)
        if not loops or not must:
            continue
        r = subprocess.run([cc, *flags, f"-march={march}", "-fopt-info-vec-missed", "-fopt-info-vec-optimized",
                            "-c", str(path), "-o", str(tmp_path / "k.o")], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-2000:]
        report = {}
        for m in re.finditer(r"^[^\n:]*\.c:(\d+):\d+: (optimized|missed): ([^\n]*)", r.stderr, re.M):
            report.setdefault(int(m.group(1)), []).append(m.group(3))
        for first, last in loops:
            msgs = [s for ln in range(first, last + 1) for s in report.get(ln, [])]
            checked += 1
            if not any("loop vectorized" in s for s in msgs) or any("control flow in loop" in s for s in msgs):
                why = [s for s in msgs if "not vectorized" in s][:2]
                failures.append(f"{name} ({path.name}:{first}): {why}")
    assert checked >= len(LOWERING_CHAINS) - len(SCALAR_OK)
    assert not failures, "\n".join(failures)
