#!/usr/bin/env python3
"""Max error in ulp of the generated kernels' float32 erf (sj_erff) over every float32,
and of their exp of t <= 0 (sj_expf_neg, softmax's) over every non-positive float32.

Compiles backend/emit_math.c's prelude text (the function exactly as kernels get it)
with the kernels' flags into a small C program that runs it vectorised over all 2^32
inputs (or every --step-th) and compares with glibc's double erf and exp.
Prints the max error in ulp of the correctly rounded result, where it occurs, and the
count of inputs whose class differs (NaN, inf, zero and its sign). Takes ~30 s.

Usage: python3 bench/kmath_ulp.py [--step N] [--cc gcc]
"""
from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "backend", "emit_math.c")

HARNESS = r"""
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* emit.c's select, which the prelude uses */
static inline float sj_sel(int c, float x, float y)
{ union { float f; uint32_t u; } X = {x}, Y = {y}, R; const uint32_t m = 0u - (uint32_t)c; R.u = (X.u & m) | (Y.u & ~m); return R.f; }
#include "kmath.h"
#define NB 65536
static double ulpf(double t)   /* ulp of float32 at |t| */
{ t = fabs(t); if (t < 0x1p-126) return 0x1p-149; int e; frexp(t, &e); return ldexp(1.0, e - 24); }
static int same_class(float y, double t)
{
    float r = (float)t;   /* the correctly rounded class */
    if (isnan(r) || isnan(y)) return isnan(r) && isnan(y);
    if (isinf(r) || isinf(y)) return r == y;
    if (r == 0 && y == 0) return signbit(r) == signbit(y);
    return 1;
}
/* FN against double REF over the float32 bit patterns [LO, LO + COUNT), every step-th */
#define CHECK(NAME, FN, REF, LO, COUNT) do { \
    double maxu = 0, maxx = 0; \
    uint64_t n = 0, bad = 0; \
    _Pragma("omp parallel reduction(+:n, bad)") \
    { \
        float *in = malloc(NB * 4), *out = malloc(NB * 4); \
        double lmaxu = 0, lmaxx = 0; \
        _Pragma("omp for schedule(dynamic)") \
        for (uint64_t base = 0; base < (COUNT) / step; base += NB) { \
            int m = 0; \
            for (; m < NB && base + m < (COUNT) / step; m++) { \
                uint32_t b = (uint32_t)((LO) + (base + m) * step); \
                memcpy(&in[m], &b, 4); \
            } \
            _Pragma("omp simd") \
            for (int j = 0; j < m; j++) out[j] = FN(in[j]); \
            for (int j = 0; j < m; j++) { \
                double x = in[j], t = REF(x); \
                n++; \
                if (!same_class(out[j], t)) { \
                    if (bad++ < 5) printf("  class differs: %a -> %a (want %a)\n", x, out[j], (float)t); \
                    continue; \
                } \
                if (isnan(t) || isinf((float)t)) continue; \
                double u = fabs(out[j] - t) / ulpf(t); \
                if (u > lmaxu) lmaxu = u, lmaxx = x; \
            } \
        } \
        _Pragma("omp critical") \
        if (lmaxu > maxu) maxu = lmaxu, maxx = lmaxx; \
        free(in); free(out); \
    } \
    printf("%s: %llu inputs: max error %.3f ulp at x = %a (%.9g); class differs: %llu\n", NAME, \
           (unsigned long long)n, maxu, maxx, maxx, (unsigned long long)bad); \
    fails += bad != 0; \
} while (0)
int main(int argc, char **argv)
{
    (void)argc;
    const uint64_t step = strtoull(argv[1], NULL, 10);
    int fails = 0;
    CHECK("erf", sj_erff, erf, 0, 1ull << 32);
    /* exp of t <= 0 (softmax's x - max): the sign bit set, -0.0 up to -inf and the NaNs */
    CHECK("exp of t <= 0", sj_expf_neg, exp, 0x80000000ull, 1ull << 31);
    return fails != 0;
}
"""


def prelude_text():
    """The string literal emit_math_prelude as C text (its pieces are plain literals)."""
    src = open(SRC).read()
    src = src[src.index("emit_math_prelude[] ="):]
    src = re.sub(r"/\*.*?\*/", "", src, flags=re.S)
    return "".join(ast.literal_eval(s) for s in re.findall(r'"(?:[^"\\]|\\.)*"', src))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--step", type=int, default=1, help="test every step-th float32")
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        open(os.path.join(d, "kmath.h"), "w").write(prelude_text())
        open(os.path.join(d, "h.c"), "w").write(HARNESS)
        exe = os.path.join(d, "h")
        subprocess.run([a.cc, "-O3", "-march=native", "-fno-math-errno", "-ffp-contract=off",
                        "-fopenmp", "-o", exe, os.path.join(d, "h.c"), "-lm"], check=True)
        return subprocess.run([exe, str(a.step)]).returncode


if __name__ == "__main__":
    raise SystemExit(main())
