/* The generated kernels' own float32 exp, tanh and erf (emit.c puts this text after its
 * prelude in every translation unit; lower.def's float32 expressions for exp, tanh, erf,
 * sigmoid, silu, gelu and mish call them).
 *
 * Why not libm/libmvec: glibc's vector erff (_ZGVeN16v_erff) took ~185 of the 213 us
 * that GELU added to layer_norm on a (8, 128, 256) float32 tensor. These functions are
 * plain branch-free C (selects, fmaf, integer bit tricks, no tables), always inlined, so
 * GCC vectorises them inside the kernels' `#pragma omp simd` loops at -O3 -march=native
 * (16 lanes with AVX-512) with no call at all. Both sides of each select are computed
 * for every lane, so the cost is the sum of the pieces: erf is ~23 multiply-adds.
 *
 * Accuracy (every float32 input, against glibc's double functions, max error):
 * sj_expf 0.97 ulp, sj_erff 1.40 ulp, sj_tanhf 1.46 ulp (bench/kmath_ulp.py measures
 * them; eager torch's are within 0.72 ulp, numpy's exp 2.4 ulp). Special values as
 * libm has them: NaN propagates, exp(+-inf) = inf / 0, exp overflows to inf above 88.72
 * and underflows through the denormals (one rounding) to 0, erf(+-inf) = tanh(+-inf) =
 * +-1, erf and tanh keep the sign of -0 and are exact for tiny inputs.
 *
 * How: exp: x = k ln2 + r with |r| <= ln2/2 (Cody-Waite, ln2 in two parts, fmaf),
 * exp(r) = 1 + r + r^2 R(r) with R of degree 4, times 2^k as two factors 2^(k/2) so
 * that both the overflow (k = 128) and the denormal (k down to -150) ranges are reached
 * with normal scale factors. tanh: |x| < 0.55: x + x^3 Q(x^2) (degree 5), else
 * 1 - 2 / (exp(2|x|) + 1), and 1 from |x| = 9.5 (tanh rounds to 1 from 9.01). erf:
 * |x| < 1: x + x Q(x^2) (degree 6; the leading 1 is exact, which keeps the error under
 * one ulp), else 1 - P(|x| - 2.46) with P of degree 12 approximating erfc on
 * [1, 3.9193] (erf rounds to 1 from 3.91921). erf and tanh work on |x| and take the sign
 * by copysign, so -0 stays -0. The coefficients are minimax fits (relative error for the
 * small-argument parts, absolute for erfc), rounded to float.
 *
 * -ffp-contract=off does not touch explicit fmaf calls: with -march=native they are
 * vfmadd instructions. */
#include "lower_int.h"

const char emit_math_prelude[] =
    "#define SJ_MATH static inline __attribute__((always_inline))\n"
    "SJ_MATH float sj_f32_bits(int32_t i) { union { int32_t i; float f; } u = {i}; return u.f; }\n"
    "SJ_MATH int32_t sj_bits_f32(float f) { union { float f; int32_t i; } u = {f}; return u.i; }\n"
    /* exp(r) - 1 - r for |r| <= ln2/2 */
    "SJ_MATH float sj_expm1_r(float r)\n"
    "{\n"
    "    float p = 0x1.6a1a6ep-10f;\n"
    "    p = fmaf(p, r, 0x1.123fc8p-7f);\n"
    "    p = fmaf(p, r, 0x1.555916p-5f);\n"
    "    p = fmaf(p, r, 0x1.55548ap-3f);\n"
    "    p = fmaf(p, r, 0x1.fffffcp-2f);\n"
    "    return p * (r * r);\n"
    "}\n"
    /* x = k ln2 + r. k comes from the bits of x log2e + 1.5 * 2^23 rather than a float ->
     * int conversion, which would be undefined for NaN and huge x (those lanes are
     * replaced afterwards); clamping x first instead makes GCC thread the clamped
     * constants through the whole computation as extra masked blends. */
    "#define SJ_EXP_SPLIT(x, k, r)\\\n"
    "    const float t_##k = (x) * 0x1.715476p+0f + 0x1.8p23f, kf_##k = t_##k - 0x1.8p23f;\\\n"
    "    int32_t k = (int32_t)((uint32_t)sj_bits_f32(t_##k) - 0x4b400000u);\\\n"
    "    float r = fmaf(kf_##k, -0x1.62e430p-1f, (x));\\\n"
    "    r = fmaf(kf_##k, 0x1.05c610p-29f, r)\n"
    "SJ_MATH float sj_expf(float x)\n"
    "{\n"
    "    SJ_EXP_SPLIT(x, k, r);\n"
    "    k = k < -152 ? -152 : k;\n"
    "    k = k > 128 ? 128 : k;\n"
    "    const int32_t k1 = k >> 1;\n"
    "    const float y = ((sj_expm1_r(r) + r) + 1.f) * sj_f32_bits((k1 + 127) << 23) * sj_f32_bits((k - k1 + 127) << 23);\n"
    "    return x > 88.8f ? SJ_INF : x < -104.f ? 0.f : x != x ? x : y;\n"
    "}\n"
    "SJ_MATH float sj_tanhf(float x)\n"
    "{\n"
    "    const float ax = fabsf(x), x2 = x * x;\n"
    "    float q = 0x1.3a066ep-9f;\n"
    "    q = fmaf(q, x2, -0x1.13b564p-7f);\n"
    "    q = fmaf(q, x2, 0x1.64e3ccp-6f);\n"
    "    q = fmaf(q, x2, -0x1.ba0996p-5f);\n"
    "    q = fmaf(q, x2, 0x1.1110dcp-3f);\n"
    "    q = fmaf(q, x2, -0x1.555554p-2f);\n"
    "    const float small = fmaf(q, ax * x2, ax), a2 = 2.f * ax;\n"
    "    SJ_EXP_SPLIT(a2, k, r);\n"   /* used for 2|x| in [1.1, 19]: one scale factor */
    "    const float e = ((sj_expm1_r(r) + r) + 1.f) * sj_f32_bits((k + 127) << 23);\n"
    "    const float large = ax < 9.5f ? 1.f - 2.f / (e + 1.f) : 1.f;\n"
    "    return copysignf(ax >= 0.55f ? large : small, x);\n"   /* NaN: small */
    "}\n"
    "SJ_MATH float sj_erff(float x)\n"
    "{\n"
    "    const float ax = fabsf(x), x2 = x * x;\n"
    "    float q = 0x1.496be0p-14f;\n"
    "    q = fmaf(q, x2, -0x1.a3f7b2p-11f);\n"
    "    q = fmaf(q, x2, 0x1.5405cep-8f);\n"
    "    q = fmaf(q, x2, -0x1.b7f912p-6f);\n"
    "    q = fmaf(q, x2, 0x1.ce2cf8p-4f);\n"
    "    q = fmaf(q, x2, -0x1.81273ep-2f);\n"
    "    q = fmaf(q, x2, 0x1.06eba8p-3f);\n"
    "    const float small = fmaf(q, ax, ax), t = ax - 0x1.3ae148p+1f;\n"
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
    "    const float large = ax < 3.9193f ? 1.f - c : 1.f;\n"
    "    return copysignf(ax >= 1.f ? large : small, x);\n"   /* NaN: small */
    "}\n";
