"""Generated pointwise kernels: the helpers with NaN and signed-zero rules (relu, clamp,
maximum, minimum, leaky_relu, elu, pow, erf, ...) give eager's values bit for bit, and
their loops vectorise on AVX2 (x86-64-v3) as well as AVX-512 (x86-64-v4).

GCC keeps FP arithmetic and ordered compares that sit under a condition from running
speculatively (-ftrapping-math, the default): without AVX-512's masks such a loop stays
scalar ("not vectorized: control flow in loop"). The helpers compute both sides and pick
with selects (codegen/emit.c sj_sel). The vectorisation test compiles the kernels' C
sources as written to the disk cache for both targets (compile only: the machine may lack
AVX-512) and reads GCC's -fopt-info report for the `#pragma omp simd` loops."""
import os
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


VEC_FNS = [
    ("relu_clamp", lambda x, y: torch.relu(x * 2 + 1).clamp(-1, 1)),
    ("max_min", lambda x, y: torch.maximum(x, y) + torch.minimum(x, y)),
    ("relu6_hardswish", lambda x, y: F.relu6(x) + F.hardswish(y)),
    ("leaky_elu", lambda x, y: F.leaky_relu(x, 0.2) + F.elu(y)),
    ("pow_tensor", lambda x, y: torch.pow(x, y)),
    ("gelu", lambda x, y: F.gelu(x)),
    ("where_hardtanh", lambda x, y: torch.where(x > 0, F.hardtanh(x), y)),
    ("np_max_clip", lambda x, y: np.clip(np.maximum(x, y), -1.0, 1.0)),
]


@pytest.fixture
def kernel_sources(tmp_path, monkeypatch):
    """Compiles VEC_FNS in float32 and float64 with a fresh cache root; yields the C
    sources the disk cache kept ({path: text})."""
    monkeypatch.setenv("SHAPEJIT_CACHE_DIR", str(tmp_path))
    shapejit.reset()
    _C._cg_forget()
    try:
        for _, fn in VEC_FNS:
            for dt in (np.float32, np.float64):
                x, y = _data(1027, dt, 1)
                x, y = np.abs(x) + 0.5, np.abs(y) + 0.5
                if "np_" not in _:
                    x, y = torch.from_numpy(x), torch.from_numpy(y)
                with np.errstate(all="ignore"):
                    shapejit.compile(fn)(x, y)
        kdir = tmp_path / "kernels"
        yield {p: p.read_text() for p in sorted(kdir.glob("*.c"))}
    finally:
        shapejit.reset()
        _C._cg_forget()


def _simd_loops(text):
    """(first, last) line numbers (1-based) of the loops under `#pragma omp simd` in the
    kernels: GCC reports a loop at the place of a statement in it, not always its `for`."""
    lines = text.split("\n")
    loops = []
    for i, l in enumerate(lines):
        if l.strip() == "#pragma omp simd":
            indent = lines[i + 1][:len(lines[i + 1]) - len(lines[i + 1].lstrip())]
            end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith(indent + "}"))
            loops.append((i + 2, end + 1))
    return loops


def test_helpers_in_kernels(kernel_sources):
    """The ops run in generated kernels, not as eager steps (else the value tests above
    would compare eager with itself)."""
    body = "\n".join(t[t.index("CG_EXPORT"):] for t in kernel_sources.values() if "CG_EXPORT" in t)
    for helper in ("sj_relu(", "sj_clamp(", "sj_max(", "sj_min(", "sj_maxd(", "sj_clampd(", "sj_sel(", "sj_seld(",
                   "sj_pow(", "sj_powd(", "sj_erff(", "sj_relud("):
        assert helper in body, helper


@pytest.mark.parametrize("march", ["x86-64-v3", "x86-64-v4"])
def test_kernel_loops_vectorize(kernel_sources, march, tmp_path):
    cc = _gcc()
    if cc is None:
        pytest.skip("needs gcc for -fopt-info")
    assert len(kernel_sources) >= len(VEC_FNS), sorted(kernel_sources)
    failures, checked = [], 0
    for path, text in kernel_sources.items():
        loops = _simd_loops(text)
        if not loops:
            continue
        r = subprocess.run([cc, "-O3", f"-march={march}", "-fno-math-errno", "-ffp-contract=off", "-fopenmp", "-fPIC",
                            "-DCG_EXPORT=", "-fopt-info-vec-missed", "-fopt-info-vec-optimized", "-c", str(path),
                            "-o", str(tmp_path / "k.o")], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-2000:]
        report = {}
        for m in re.finditer(r"^[^\n:]*\.c:(\d+):\d+: (optimized|missed): ([^\n]*)", r.stderr, re.M):
            report.setdefault(int(m.group(1)), []).append(m.group(3))
        for first, last in loops:
            msgs = [s for ln in range(first, last + 1) for s in report.get(ln, [])]
            checked += 1
            if not any("loop vectorized" in s for s in msgs) or any("control flow in loop" in s for s in msgs):
                kname = re.findall(r"int64_t (sj_k\w+)\(", "\n".join(text.split("\n")[:first]))[-1:]
                failures.append(f"{path.name}:{first} {kname}: {msgs}")
    assert checked >= len(VEC_FNS)
    assert not failures, "\n".join(failures)
