/* The generated kernels' own float32 erf, sj_erff, and exp of t <= 0, sj_expf_neg (emit.c
 * puts this text after its prelude in every translation unit; lower.def's float32 erf and
 * gelu call sj_erff, the softmax row kernels (emit_reduce.c) sj_expf_neg).
 *
 * Why: glibc's vector erff (_ZGVeN16v_erff) took ~185 of the 213 us that GELU added to
 * layer_norm on a (8, 128, 256) float32 tensor (perf; the GELU is that row kernel's
 * epilogue). sj_erff is plain branch-free C (selects, fmaf, no tables), always inlined,
 * so GCC vectorises it inside the kernels' `#pragma omp simd` loops at -O3
 * -march=native (16 lanes with AVX-512) with no call: the epilogue costs ~125 us there.
 * Both sides of each select are computed for every lane: ~23 multiply-adds per element,
 * which is what it costs on this Zen 4 (double-pumped AVX-512, ~20 cycles per vector).
 *
 * Not done for exp and tanh in general (tried; docs/internals/backend_measurements.md,
 * section 8, has the numbers): an inline exp of the same kind was 20% faster than
 * libmvec's alone and in sigmoid/silu, but 10-20% slower in chains of dependent
 * transcendentals (chain10, mish); an inline tanh was no faster anywhere. libmvec's
 * exp/tanh use vscalefps and in-register tables,
 * which portable C cannot express.
 *
 * Accuracy: max error 1.40 ulp over every float32 input, against glibc's double erf
 * (bench/kmath_ulp.py; eager torch.erf is within 0.72 ulp, its vectorised GELU 4.6 ulp).
 * erf(+-inf) = +-1, NaN propagates, -0 stays -0, tiny and denormal inputs keep their
 * sign and are within the same bound.
 *
 * How: |x| < 1: x + x Q(x^2) (degree 6; the leading 1 is exact, which keeps the error
 * under one ulp), else 1 - P(|x| - 2.46) with P of degree 12 approximating erfc on
 * [1, 3.9193] (erf rounds to 1 from 3.91921), evaluated at min(|x|, 3.9193), where
 * 1 - P is exactly 1 (checked over every input by the bench script below): a clamp of the
 * argument costs one op less than selecting 1 after the polynomial. It works on |x| and
 * takes the sign by copysign. The coefficients are minimax fits (relative error for Q, absolute for P),
 * rounded to float. -ffp-contract=off does not touch explicit fmaf calls: with
 * -march=native they are vfmadd instructions. The selects are sj_sel (emit.c): with
 * `ax < 3.9193f ? 1.f - c : 1.f` the loop stayed scalar on AVX2.
 *
 * sj_expf_neg: exp of t <= 0 (or NaN), the softmax row kernels' exp(x - max). In the row
 * kernel (exp, store, sum, then a scale pass over L1) it took 74 us over (1024, 256) rows
 * where libmvec's expf took 84 (AVX-512; AVX2 122 vs 132): the argument's sign drops the
 * overflow path, so it is a dozen vector ops with no table and no call. exp(t) = 2^k e^r,
 * k = rint(t / ln 2), r = t - k ln 2 in two fmaf steps (Cody-Waite), e^r = 1 + r + r^2 q(r)
 * with q of degree 4 (a weighted least-squares fit toward minimax on |r| <= ln2 / 2,
 * relative error 3.8e-9 in double), 2^k as two normal factors so that denormal results
 * (t in [-103.3, -87.3], eager keeps them) round once. Max error 1.02 ulp over every
 * float32 t <= 0 against glibc's double exp; exp(0) = 1, exp(-inf) = 0, NaN stays NaN. */
#include "lower_int.h"

const char emit_math_prelude[] =
    "static inline __attribute__((always_inline)) float sj_erff(float x)\n"
    "{\n"
    "    const float ax = fabsf(x), x2 = x * x;\n"
    "    float q = 0x1.496be0p-14f;\n"
    "    q = fmaf(q, x2, -0x1.a3f7b2p-11f);\n"
    "    q = fmaf(q, x2, 0x1.5405cep-8f);\n"
    "    q = fmaf(q, x2, -0x1.b7f912p-6f);\n"
    "    q = fmaf(q, x2, 0x1.ce2cf8p-4f);\n"
    "    q = fmaf(q, x2, -0x1.81273ep-2f);\n"
    "    q = fmaf(q, x2, 0x1.06eba8p-3f);\n"
    "    const float small = fmaf(q, ax, ax);\n"
    "    const float t = sj_sel(ax < 3.9193f, ax, 3.9193f) - 0x1.3ae148p+1f;\n"
    "    float c = 0x1.322c78p-17f;\n"
    "    c = fmaf(c, t, -0x1.aa7c3ap-16f);\n"
    "    c = fmaf(c, t, -0x1.b168f4p-15f);\n"
    "    c = fmaf(c, t, 0x1.3c5460p-12f);\n"
    "    c = fmaf(c, t, -0x1.9a219cp-12f);\n"
    "    c = fmaf(c, t, -0x1.e49df0p-12f);\n"
    "    c = fmaf(c, t, 0x1.846ee2p-9f);\n"
    "    c = fmaf(c, t, -0x1.bd7db6p-8f);\n"
    "    c = fmaf(c, t, 0x1.448fb4p-7f);\n"
    "    c = fmaf(c, t, -0x1.423522p-7f);\n"
    "    c = fmaf(c, t, 0x1.ac53e4p-8f);\n"
    "    c = fmaf(c, t, -0x1.5c270cp-9f);\n"
    "    c = fmaf(c, t, 0x1.07e35cp-11f);\n"
    "    const float large = 1.f - c;\n"
    "    return copysignf(sj_sel(ax >= 1.f, large, small), x);\n" /* NaN: small */
    "}\n"
    "static inline __attribute__((always_inline)) float sj_expf_neg(float t)\n"
    "{\n"
    "    const float kf = rintf(t * 0x1.715476p+0f);\n"
    "    float r = fmaf(kf, -0x1.62e400p-1f, t);\n"
    "    r = fmaf(kf, -0x1.7f7d1cp-20f, r);\n"
    "    float q = 0x1.687e3cp-10f;\n"
    "    q = fmaf(q, r, 0x1.123b9ep-7f);\n"
    "    q = fmaf(q, r, 0x1.555b56p-5f);\n"
    "    q = fmaf(q, r, 0x1.55548ep-3f);\n"
    "    q = fmaf(q, r, 0x1.fffff8p-2f);\n"
    "    const float e = fmaf(q * r, r, r) + 1.f;\n"
    "    int32_t k = (int32_t)kf;\n"
    "    k = k < -150 ? -150 : k;\n" /* t < -104: the select below */
    "    const int32_t k1 = k >> 1;\n"
    "    union { int32_t i; float f; } s1 = {(k1 + 127) << 23}, s2 = {(k - k1 + 127) << 23};\n"
    "    return sj_sel(t < -104.f, 0.f, e * s1.f * s2.f);\n" /* NaN: e */
    "}\n";
