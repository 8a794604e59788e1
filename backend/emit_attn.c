/* C source of the attention step's row kernel (step_attn.c): the softmax of one block of
 * attention scores, in place, after oneDNN wrote the products q . k into it.
 *
 *   int64_t sj_a...(const int64_t *n, char *const *p, const int64_t *st, int64_t i0)
 *
 * n = {(batch, head) pairs in the block, query rows, keys, heads}: rows of `keys` floats,
 * contiguous; p = {the scores, the mask (or NULL), the scale (one float)}; st = {the mask's
 * strides for batch, head and query row in elements (0 where it broadcasts; its keys are
 * contiguous), the block's first (batch, head) pair as batch * heads + head}; i0 = the
 * block's first query row (a causal mask's diagonal, the mask's row). Each row becomes, as
 * torch's CPU attention computes it, softmax(s * scale + mask) with a boolean mask's false
 * entries (and, causal, the keys past the row) at -inf. A row with every key masked is
 * zeros, as eager gives. A score that is inf or NaN before the mask (an inf or NaN in q or
 * k, or an overflowing product; past a causal row's diagonal too), or a NaN or +inf after
 * it, makes the kernel return 1:
 * eager's own kernel then decides what such a row is (its online softmax has its own
 * answers there).
 *
 * The max pass keeps SJ_ALANES running maxima and flags (blends: GCC vectorises neither a
 * `?:` nor an fmaxf reduction without finite-math), one vector on AVX-512, two on AVX2:
 * rows are short (a few dozen keys in the models' attention), the exp is the kernels' sj_expf_neg
 * (emit_math.c). Rows are split between threads when the block is big enough (the parallel
 * region is ~0.45 us even for one thread: emit.c). */
#include "lower_int.h"

#define put emit_put

#define SJ_ALANES 16

/* The element text elem with J the key index `key`, MV / NV the running max and flag of
 * lane `lane`. */
static void put_elem(Buf *b, const char *elem, const char *key, const char *lane)
{
    for (const char *c = elem; *c; c++) {
        if (*c == 'J')
            put(b, "%s", key);
        else if ((c[0] == 'M' || c[0] == 'N') && c[1] == 'V')
            put(b, "%cv[%s]", c[0] == 'M' ? 'm' : 'n', lane), c++;
        else
            put(b, "%c", *c);
    }
}

void emit_attn_softmax(Buf *b, const char *name, int mask_kind, int causal)
{
    const char *mt = mask_kind == 2 ? "uint8_t" : "float";
    put(b, "\nstatic void %s_rows(const int64_t *n, char *const *p, const int64_t *st, int64_t i0, int *bad_out)\n{\n",
        name);
    put(b, "    const int64_t nq = n[1], N = n[2], rows = n[0] * n[1];\n");
    put(b, "    float *const s = (float *)p[0];\n    const float scale = *(const float *)p[2];\n");
    if (mask_kind)
        put(b, "    const %s *const mk = (const %s *)p[1];\n", mt, mt);
    else
        put(b, "    (void)st;\n");
    if (!causal && !mask_kind)
        put(b, "    (void)i0;\n");
    put(b, "    int bad = 0;\n#pragma omp for schedule(static)\n    for (int64_t r = 0; r < rows; r++) {\n");
    put(b, "        const int64_t q = r %% nq, bh = r / nq;\n        float *const x = s + r * N;\n");
    if (causal)
        put(b, "        const int64_t L = i0 + q + 1 < N ? i0 + q + 1 : N;\n");
    else
        put(b, "        const int64_t L = N;\n");
    if (mask_kind)
        put(b,
            "        const int64_t gbh = st[3] + bh;\n        const %s *const m = mk + (gbh / n[3]) * st[0] + (gbh %% "
            "n[3]) * st[1] + "
            "(i0 + q) * st[2];\n",
            mt);
    else
        put(b, "        (void)bh;\n");
    /* one element: t (scaled), the mask applied, the max and the flag */
    char elem[512];
    snprintf(elem, sizeof elem,
             "                const float t0 = x[J] * scale;\n"
             "                const float t = %s%s%s;\n"
             "                x[J] = t;\n"
             "                MV = sj_sel(t > MV, t, MV);\n"
             "                NV |= !(fabsf(t0) <= 3.40282347e38f) | (t != t);\n",
             causal ? "sj_sel(J < L, " : "",
             mask_kind == 1   ? "t0 + m[J]"
             : mask_kind == 2 ? "sj_sel(m[J] != 0, t0, -INFINITY)"
                              : "t0",
             causal ? ", -INFINITY)" : "");
    put(b, "        float mv[%d];\n        int nv[%d];\n", SJ_ALANES, SJ_ALANES);
    put(b,
        "        for (int l = 0; l < %d; l++) {\n            mv[l] = -INFINITY;\n            nv[l] = 0;\n        }\n",
        SJ_ALANES);
    /* whole blocks while the row's keys last (a causal row's last block masks the keys past
     * it, which then hold -inf and come out of the exp as 0: short causal rows stay in
     * vector code), then the keys left one at a time; E ends what was written */
    put(b, "        int64_t j = 0;\n        for (; j < L && j + %d <= N; j += %d) {\n#pragma omp simd\n", SJ_ALANES,
        SJ_ALANES);
    put(b, "            for (int l = 0; l < %d; l++) {\n", SJ_ALANES);
    put_elem(b, elem, "j + l", "l");
    put(b, "            }\n        }\n        for (; j < L; j++) {\n            {\n");
    put_elem(b, elem, "j", "0");
    put(b, "            }\n        }\n        const int64_t E = j;\n");
    if (causal) {
        /* the keys past the diagonal were never read: an inf or NaN among them still hands
         * the call back (eager's math path adds -inf to it and makes NaN) */
        put(b, "        int past = 0;\n#pragma omp simd reduction(| : past)\n        for (int64_t jj = E; jj < N; "
               "jj++) {\n");
        put(b, "            past |= !(fabsf(x[jj] * scale) <= 3.40282347e38f);\n        }\n        nv[0] |= past;\n");
    }
    /* the lanes halved in vector steps of fixed width (a scalar pass over the lanes, or a
     * loop over the widths, cost more than a short row's work); the last two are scalar */
    for (int w = SJ_ALANES / 2; w >= 1; w /= 2)
        put(b,
            "%s        for (int l = 0; l < %d; l++) {\n"
            "            mv[l] = sj_sel(mv[l + %d] > mv[l], mv[l + %d], mv[l]);\n            nv[l] |= nv[l + %d];\n"
            "        }\n",
            w >= 4 ? "#pragma omp simd\n" : "", w, w, w, w);
    put(b, "        const float mx = mv[0];\n        const int nan = nv[0];\n");
    put(b, "        if (nan || mx == INFINITY) {\n            bad = 1;\n            continue;\n        }\n");
    put(b, "        if (mx == -INFINITY) {   /* every key masked: zeros */\n");
    put(b, "            for (j = 0; j < N; j++)\n                x[j] = 0.f;\n            continue;\n        }\n");
    /* the exp pass sums into lanes too (omp simd's reduction ends in a chain of scalar
     * adds), halved the same way */
    put(b, "        float sv[%d];\n        for (int l = 0; l < %d; l++)\n            sv[l] = 0.f;\n", SJ_ALANES,
        SJ_ALANES);
    put(b,
        "        for (j = 0; j + %d <= E; j += %d) {\n#pragma omp simd\n            for (int l = 0; l < %d; l++) {\n",
        SJ_ALANES, SJ_ALANES, SJ_ALANES);
    put(b, "                const float e = sj_expf_neg(x[j + l] - mx);\n                x[j + l] = e;\n"
           "                sv[l] += e;\n            }\n        }\n");
    put(b, "        for (; j < E; j++) {\n            const float e = sj_expf_neg(x[j] - mx);\n            x[j] = e;\n"
           "            sv[0] += e;\n        }\n");
    for (int w = SJ_ALANES / 2; w >= 1; w /= 2)
        put(b, "%s        for (int l = 0; l < %d; l++) {\n            sv[l] += sv[l + %d];\n        }\n",
            w >= 4 ? "#pragma omp simd\n" : "", w, w);
    put(b, "        const float sum = sv[0];\n");
    put(b, "        const float inv = 1.f / sum;\n#pragma omp simd\n        for (j = 0; j < E; j++) {\n");
    put(b, "            x[j] *= inv;\n        }\n        for (j = E; j < N; j++)\n            x[j] = 0.f;\n    }\n");
    put(b, "    if (bad)\n        __atomic_store_n(bad_out, 1, __ATOMIC_RELAXED);\n}\n");
    put(b, "\nCG_EXPORT int64_t %s(const int64_t *n, char *const *p, const int64_t *st, int64_t i0)\n{\n", name);
    put(b, "    int bad = 0;\n    if (n[0] * n[1] * n[2] >= 16384 && n[0] * n[1] > 1 && "
           "omp_get_max_threads() > 1) {\n#pragma omp parallel\n");
    put(b, "        %s_rows(n, p, st, i0, &bad);\n    } else {\n        %s_rows(n, p, st, i0, &bad);\n    }\n", name,
        name);
    put(b, "    return bad;\n}\n");
}
