/* C source of reduction and row kernels (plan_reduce.c plans them). Same signature as the
 * pointwise kernels (emit.c):
 *   int64_t sj_kN(const int64_t *n, char *const *p, const int64_t *st, int64_t dense)
 * over the iteration space of the reduced tensor (rank sizes n). The dims of k->red.mask
 * (fixed when the graph is planned, since the rank is) are the reduced or row dims R; the
 * others, K, index the outputs. A reduction's output has stride 0 over R (runtime.c asks
 * lower_out_layout); a row kernel's output has the input's shape. `dense` is unused: the
 * kernel looks at the strides itself.
 *
 * Loop nest: one parallel loop over the K positions (o), each computing its base offset per
 * operand; inside, a flat index i over the R positions. When every operand walks its R
 * dims contiguously (the common case: the last dims of dense tensors) element i of a row is
 * at base + i and the inner loops vectorise; otherwise the offset of i is decomposed over
 * the R dims (a multiply for a single R dim). A lean kernel (build.c builds reductions
 * lean) has only the loops its plan most likely runs: the contiguous rows (and the split
 * of one long row when it reduces every dim), or, when it keeps its last dim, the columns
 * whose operands have unit stride along it only; asked for the rest it returns
 * SJ_KERNEL_WANTS_FULL before any write, and the caller builds and runs the full variant
 * (lower_build_full). A reduction that keeps the last dim and cannot walk R contiguously (x.sum(0) of a matrix) runs in column order instead
 * (put_columns): rows into a tile of outputs, vectorised across the outputs; with fewer
 * tiles than threads the rows are split across the threads too. A whole-tensor reduction
 * of one long row splits the row (put_split). A softmax/log_softmax reading its input with
 * no epilogue takes two rows per iteration (put_pair_row).
 *
 * A reduction's output 0 is the reduced value; outputs 1.. are prologue values read after
 * the kernel, stored as each element is computed (every element is visited once).
 *
 * Types: a reduction computes in its output's dtype (the metas say: torch sums int32 to
 * int64, numpy's mean of ints is float64), converting each element; row kernels are float32.
 *
 * Accuracy: float sums run in their type, in blocks of 1024 elements (a vectorised loop: 8 or 16 lane
 * partial sums of 32..128 elements each, put_lane_sum; column sums add rows in fours
 * pairwise) whose block sums are combined pairwise through a
 * binary-counter cascade, so the error grows with log2 of the block count instead of the
 * element count (torch and numpy also sum float32 pairwise/cascaded in float). max/min
 * propagate NaN as eager does. softmax/log_softmax subtract the row's max; layer_norm
 * takes the mean, then the variance of the centred values (two passes, biased).
 *
 * Memory: writes into the caller's Buf (emit.c); no Python objects. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "lower_int.h"

#define put emit_put

#define BLOCK 1024

/* Cascade helpers for float (no suffix) and double (d), defined once per translation unit
 * (guarded). */
static const char helpers[] =
    "#ifndef SJ_CASCADE\n"
    "#define SJ_CASCADE\n"
    "#include <omp.h>\n"   /* thread counts: whole-tensor reductions split across threads */
    "#ifdef __AVX512F__\n#define SJ_SUM_PAIRS 2\n#else\n#define SJ_SUM_PAIRS 1\n#endif\n"   /* put_lane_sum */
    /* lv[l] holds the sum of 2^l blocks when bit l of *cnt is set */
    "#define SJ_CASCADE_OPS(S, T)\\\n"
    "static inline void sj_cascade_push##S(T *lv, int64_t *cnt, T s)\\\n"
    "{ int64_t c = (*cnt)++; int l = 0; while (c & 1) { s += lv[l++]; c >>= 1; } lv[l] = s; }\\\n"
    "static inline T sj_cascade_sum##S(const T *lv, int64_t cnt)\\\n"
    "{ T s = 0; for (int l = 0; cnt; l++, cnt >>= 1) if (cnt & 1) s += lv[l]; return s; }\n"
    "SJ_CASCADE_OPS(, float)\n"
    "SJ_CASCADE_OPS(d, double)\n"
    "#endif\n";

/* The type a kernel reduces in: its output's dtype (float32 for row kernels). */
static DType acc_type(Graph *g, const Kernel *k)
{
    return k->flavour >= KF_SOFTMAX || k->nout == 0 ? DT_F32 : (DType)g->values[k->outs[0]].meta.dtype;
}

/* The operand index of value v among k's inputs (outputs come first), or -1. */
static int operand_of(const Kernel *k, int32_t v)
{
    for (int32_t i = 0; i < k->nin; i++)
        if (k->ins[i] == v)
            return (int)(k->nout + i);
    return -1;
}

static int is_row(const Kernel *k)
{
    return k->flavour >= KF_SOFTMAX;
}

/* The nodes before the reduction or row op: the prologue computed at each element. */
static int32_t prologue_len(const Kernel *k)
{
    return k->nnodes - 1 - k->red.nextra - k->red.nepi - k->red.nsum - k->red.nsib;
}

/* The offset of operand j at row element i, by format fmt (see emit_compute). */
static void put_off(Buf *b, const char *fmt, int j)
{
    put(b, fmt, j, j);
}

/* A blocked, cascaded sum of type t (float or double) into a new `t <into>`: `body` writes
 * the statements of element i, then `term` (an expression over what they define) is added.
 * Integers add in uint64_t (wrapping as eager does), in one loop: their sum is exact. */
typedef void (*BodyFn)(Buf *b, Graph *g, const Kernel *k, const char *fmt);

/* The suffix of sum s's variables (acc, av, lv, cnt, v_0, ...): a sibling's end in 1. */
#define SFX(s) ((s) ? "1" : "")

/* acc, or acc and its sibling's acc1: an omp reduction list. */
static const char *acc_list(int nt)
{
    return nt == 2 ? "acc,acc1" : "acc";
}

/* A float block [i0, i1) of a reduction into `acc`: 64 bytes of running partial sums (16
 * floats, 8 doubles: one AVX-512 vector, two AVX2 vectors) that GCC keeps in registers,
 * added pairwise down to one at the end with vector adds; then the rest of the block.
 * `omp simd reduction(+:acc)` ended every row in a scalar chain of 16 adds through memory,
 * most of a sum over a last dim of 256 (x.sum(-1) of (8, 128, 256): 11.4 us on AVX-512 and
 * 13.1-14.5 us on AVX2 against eager's 10.4; this form 10.6 and 10.1-11.6 us with
 * SJ_SUM_PAIRS below). On AVX-512 one vector is one chain of dependent adds, so each add
 * takes the pair (x[i], x[i + lanes]) added first (SJ_SUM_PAIRS 2); two AVX2 vectors are
 * two chains already. */
static void put_lane_sum(Buf *b, Graph *g, const Kernel *k, const char *fmt, BodyFn body, const char *const *term,
                         int nt, DType t)
{
    const char *ct = lower_ctype(t);
    int lanes = t == DT_F64 ? 8 : 16;
    for (int s = 0; s < nt; s++)
        put(b, "            %s acc%s, av%s[%d];\n", ct, SFX(s), SFX(s), lanes);
    put(b, "            int64_t ib = i0;\n");
    for (int s = 0; s < nt; s++)
        put(b, "            for (int j = 0; j < %d; j++)\n                av%s[j] = 0;\n", lanes, SFX(s));
    put(b, "            for (; ib + %d * SJ_SUM_PAIRS <= i1; ib += %d * SJ_SUM_PAIRS) {\n", lanes, lanes);
    put(b, "#pragma omp simd\n            for (int j = 0; j < %d; j++) {\n", lanes);
    for (int s = 0; s < nt; s++)
        put(b, "            %s v_0%s, v_1%s = 0;\n", ct, SFX(s), SFX(s));
    put(b, "            {\n            const int64_t i = ib + j;\n");
    body(b, g, k, fmt);
    for (int s = 0; s < nt; s++)
        put(b, "            v_0%s = %s;\n", SFX(s), term[s]);
    put(b, "            }\n");
    put(b, "            if (SJ_SUM_PAIRS == 2) {\n            const int64_t i = ib + %d + j;\n", lanes);
    body(b, g, k, fmt);
    for (int s = 0; s < nt; s++)
        put(b, "            v_1%s = %s;\n", SFX(s), term[s]);
    put(b, "            }\n");
    for (int s = 0; s < nt; s++)
        put(b, "            av%s[j] += SJ_SUM_PAIRS == 2 ? v_0%s + v_1%s : v_0%s;\n", SFX(s), SFX(s), SFX(s), SFX(s));
    put(b, "            }\n            }\n");
    for (int w = lanes / 2; w >= 4; w /= 2)
        for (int s = 0; s < nt; s++)
            put(b, "            for (int j = 0; j < %d; j++)\n                av%s[j] += av%s[j + %d];\n", w, SFX(s),
                SFX(s), w);
    for (int s = 0; s < nt; s++)
        put(b, "            acc%s = (av%s[0] + av%s[2]) + (av%s[1] + av%s[3]);\n", SFX(s), SFX(s), SFX(s), SFX(s),
            SFX(s));
    /* the rest (under one vector, or under two with pairs) */
    put(b, "            if (ib < i1) {\n");   /* else no lane combine (a scalar chain) */
    put(b, "#pragma omp simd reduction(+:%s)\n            for (int64_t i = ib; i < i1; i++) {\n", acc_list(nt));
    body(b, g, k, fmt);
    for (int s = 0; s < nt; s++)
        put(b, "            acc%s += %s;\n", SFX(s), term[s]);
    put(b, "            }\n            }\n");
}

/* nt sums (1, or 2 with a sibling's) of the same elements, one loop: sum s into into[s] of
 * term[s], each as put_sum's. */
static void put_sums(Buf *b, Graph *g, const Kernel *k, const char *fmt, const char *const *into, BodyFn body,
                     const char *const *term, int nt, DType t)
{
    const char *ct = lower_ctype(t), *sfx = t == DT_F64 ? "d" : "";
    for (int s = 0; s < nt; s++)
        put(b, "        %s %s;\n", ct, into[s]);
    put(b, "        {\n");
    if (lower_class(t) == LC_INT) {
        for (int s = 0; s < nt; s++)
            put(b, "        uint64_t acc%s = 0;\n", SFX(s));
        put(b, "#pragma omp simd reduction(+:%s)\n", acc_list(nt));
        put(b, "        for (int64_t i = 0; i < N; i++) {\n");
        body(b, g, k, fmt);
        for (int s = 0; s < nt; s++)
            put(b, "            acc%s += (uint64_t)(%s);\n", SFX(s), term[s]);
        put(b, "        }\n");
        for (int s = 0; s < nt; s++)
            put(b, "        %s = (%s)acc%s;\n", into[s], ct, SFX(s));
        put(b, "        }\n");
        return;
    }
    if (!is_row(k)) {
        /* a short row (a sum over a last dim of 3): one plain loop, no blocks */
        put(b, "        if (N <= 16) {\n");
        for (int s = 0; s < nt; s++)
            put(b, "        %s acc%s = 0;\n", ct, SFX(s));
        put(b, "        for (int64_t i = 0; i < N; i++) {\n");
        body(b, g, k, fmt);
        for (int s = 0; s < nt; s++)
            put(b, "            acc%s += %s;\n", SFX(s), term[s]);
        put(b, "        }\n");
        for (int s = 0; s < nt; s++)
            put(b, "        %s = acc%s;\n", into[s], SFX(s));
        put(b, "        } else {\n");
    }
    for (int s = 0; s < nt; s++)
        put(b, "        %s lv%s[64]; int64_t cnt%s = 0;\n", ct, SFX(s), SFX(s));
    put(b, "        for (int64_t i0 = 0; i0 < N; i0 += %d) {\n", BLOCK);
    put(b, "            const int64_t i1 = i0 + %d < N ? i0 + %d : N;\n", BLOCK, BLOCK);
    if (is_row(k) || t != DT_F32) {
        /* float64 sums keep the one reduction loop: with a fused prologue (numpy's
         * e.sum(axis=1) of an expression) the lane form's two copies of the body made
         * bench's numpy_lj 20% slower (605 -> 730 us), where float32 rows gained */
        for (int s = 0; s < nt; s++)
            put(b, "            %s acc%s = 0;\n", ct, SFX(s));
        put(b, "#pragma omp simd reduction(+:%s)\n", acc_list(nt));
        put(b, "            for (int64_t i = i0; i < i1; i++) {\n");
        body(b, g, k, fmt);
        for (int s = 0; s < nt; s++)
            put(b, "            acc%s += %s;\n", SFX(s), term[s]);
        put(b, "            }\n");
    } else {
        put_lane_sum(b, g, k, fmt, body, term, nt, t);
    }
    for (int s = 0; s < nt; s++)
        put(b, "            sj_cascade_push%s(lv%s, &cnt%s, acc%s);\n", sfx, SFX(s), SFX(s), SFX(s));
    put(b, "        }\n");
    for (int s = 0; s < nt; s++)
        put(b, "        %s = sj_cascade_sum%s(lv%s, cnt%s);\n", into[s], sfx, SFX(s), SFX(s));
    if (!is_row(k))
        put(b, "        }\n");
    put(b, "        }\n");
}

static void put_sum(Buf *b, Graph *g, const Kernel *k, const char *fmt, const char *into, BodyFn body, const char *term,
                    DType t)
{
    put_sums(b, g, k, fmt, &into, body, &term, 1, t);
}

/* The prologue at element i, leaving the reduced value in `const A v` (A: acc_type) and a
 * sibling's in `v1`. A reduction also stores the prologue values read after it (its
 * outputs after the results). */
static void body_prologue(Buf *b, Graph *g, const Kernel *k, const char *fmt)
{
    emit_compute(b, g, k, fmt, prologue_len(k));
    int stores = !is_row(k) || k->flavour == KF_RMS_NORM || k->flavour == KF_LAYER_NORM;   /* prologue values */
    for (int j = 1 + k->red.nsib; stores && j < (int)k->nout; j++) {
        put(b, "            out%d[", j);
        put_off(b, fmt, j);
        put(b, "] = ");
        emit_value(b, g, k, k->outs[j]);
        put(b, ";\n");
    }
    const char *at = lower_ctype(acc_type(g, k));
    put(b, "            const %s v = (%s)", at, at);
    emit_value(b, g, k, k->red.src);
    put(b, ";\n");
    if (k->red.nsib) {
        put(b, "            const %s v1 = (%s)", at, at);
        emit_value(b, g, k, k->red.sib_src);
        put(b, ";\n");
    }
}

/* The prologue, stored into the (row kernel's) output as the later passes read it. */
static void body_prologue_store(Buf *b, Graph *g, const Kernel *k, const char *fmt)
{
    body_prologue(b, g, k, fmt);
    put(b, "            out0[");
    put_off(b, fmt, 0);
    put(b, "] = v;\n");
}

/* 1 when a row kernel has no prologue and reads its row straight from an input operand
 * (a softmax of x): its later passes read that input, so the first pass stores nothing. */
static int row_reads_input(const Kernel *k)
{
    return prologue_len(k) == 0 && operand_of(k, k->red.src) >= 0;
}

/* The row's element i as a later pass reads it: the input, or the stored prologue. */
static void put_row_elem(Buf *b, const Kernel *k, const char *fmt)
{
    int j = row_reads_input(k) ? operand_of(k, k->red.src) : 0;
    if (j)
        put(b, "in%d[", j - (int)k->nout);
    else
        put(b, "out0[");
    put_off(b, fmt, j);
    put(b, "]");
}

static void body_softmax_exp(Buf *b, Graph *g, const Kernel *k, const char *fmt)
{
    (void)g;
    put(b, "            const float e = sj_expf_neg(");   /* x - max <= 0 (emit_math.c) */
    put_row_elem(b, k, fmt);
    put(b, " - m);\n");
    if (k->flavour == KF_SOFTMAX) {
        put(b, "            out0[");
        put_off(b, fmt, 0);
        put(b, "] = e;\n");
    }
}

static void body_centred_square(Buf *b, Graph *g, const Kernel *k, const char *fmt)
{
    (void)g;
    (void)k;
    put(b, "            const float c = out0[");
    put_off(b, fmt, 0);
    put(b, "] - mean;\n");
}

/* The max (or min) over the row into `m`, NaN when some element is NaN. A float row runs
 * in blocks of SJ_XLANES elements (then of 8) into as many running extremes (mv[j],
 * blended; independent chains for the vector units) and NaN flags, then the tail and the
 * lanes: GCC does not vectorise a blended (or `?:`) float
 * max under `omp simd reduction(max:m)` (it keeps the lane in memory: amax of 4M floats
 * took 10.3 ms; blocked by 32, 186 us with -march=x86-64-v3 and 258 us on AVX-512, eager
 * 177 and 174 us; 64 lanes gave 196 us on AVX-512 but made each softmax row of 256 pay
 * for twice the lanes, 173 vs 155 us at (8, 128, 256)). Ints keep the plain reduction,
 * which GCC turns into vector max. */
#define SJ_XLANES 32

/* A fused sum's block (put_extreme): the lane sums sv[] of up to BLOCK elements, added
 * pairwise and pushed on the cascade slv/scnt. Each block declares its own sv: pushing from
 * inside the max loop kept the lanes in memory (the fused kernel 25% slower than two). */
static void put_lanes_push(Buf *b)
{
    put(b, "        for (int w = %d; w >= 1; w /= 2) {\n#pragma omp simd\n", SJ_XLANES / 2);
    put(b, "        for (int j = 0; j < w; j++)\n            sv[j] += sv[j + w];\n        }\n");
    put(b, "        sj_cascade_push(slv, &scnt, sv[0]);\n        }\n");
}

static void put_extreme(Buf *b, Graph *g, const Kernel *k, const char *fmt, int is_max, int store)
{
    int sum = is_row(k) && k->red.nsum;
    DType t = acc_type(g, k);
    int fl = lower_class(t) != LC_INT, w = t == DT_I32 ? 32 : 64;
    void (*body)(Buf *, Graph *, const Kernel *, const char *) = store ? body_prologue_store : body_prologue;
    if (!fl) {
        put(b, "        %s m = INT%d_%s; int nan = 0;\n", lower_ctype(t), w, is_max ? "MIN" : "MAX");
        put(b, "#pragma omp simd reduction(%s:m)\n", is_max ? "max" : "min");
        put(b, "        for (int64_t i = 0; i < N; i++) {\n");
        body(b, g, k, fmt);
        put(b, "            m = v %s m ? v : m;\n        }\n        (void)nan;\n", is_max ? ">" : "<");
        return;
    }
    const char *ct = lower_ctype(t), *sel = t == DT_F64 ? "sj_seld" : "sj_sel", *cmp = is_max ? ">" : "<";
    put(b, "        %s m = %sSJ_INF; int nan = 0;\n", ct, is_max ? "-" : "");
    if (sum)
        put(b, "        float rs, slv[64]; int64_t scnt = 0;\n");
    put(b, "        {\n        %s mv[%d]; int nv[%d];\n", ct, SJ_XLANES, SJ_XLANES);
    put(b, "        for (int j = 0; j < %d; j++) { mv[j] = m; nv[j] = 0; }\n", SJ_XLANES);
    put(b, "        int64_t i0 = 0;\n");
    if (sum) {
        put(b, "        float sacc = 0;\n        while (i0 + %d <= N) {\n", SJ_XLANES);
        put(b, "        const int64_t ie = i0 + %d < N ? i0 + %d : N;\n", BLOCK, BLOCK);
        put(b, "        float sv[%d];\n        for (int j = 0; j < %d; j++)\n            sv[j] = 0;\n", SJ_XLANES,
            SJ_XLANES);
    }
    for (int lanes = SJ_XLANES; lanes >= 8; lanes /= 8) {   /* 64, then 8 (short rows) */
        put(b, "        for (; i0 + %d <= %s; i0 += %d) {\n", lanes, sum ? "ie" : "N", lanes);
        put(b, "#pragma omp simd\n        for (int j = 0; j < %d; j++) {\n", lanes);
        put(b, "            const int64_t i = i0 + j;\n");
        body(b, g, k, fmt);
        if (sum)
            put(b, "            sv[j] += v;\n");
        put(b, "            nv[j] |= v != v;\n            mv[j] = %s(v %s mv[j], v, mv[j]);\n        }\n        }\n",
            sel, cmp);
    }
    if (sum)
        put_lanes_push(b);
    put(b, "        for (int64_t i = i0; i < N; i++) {\n");
    body(b, g, k, fmt);
    if (sum)
        put(b, "            sacc += v;\n");
    put(b, "            nan |= v != v;\n            m = %s(v %s m, v, m);\n        }\n", sel, cmp);
    if (sum)
        put(b, "        rs = sj_cascade_sum(slv, scnt) + sacc;\n");
    /* the lanes pairwise (each level a vector op, not a chain of SJ_XLANES blends) */
    put(b, "        for (int w = %d; w >= 1; w /= 2) {\n#pragma omp simd\n", SJ_XLANES / 2);
    put(b,
        "        for (int j = 0; j < w; j++) {\n            mv[j] = %s(mv[j + w] %s mv[j], mv[j + w], mv[j]);\n"
        "        }\n        }\n",
        sel, cmp);
    put(b,
        "#pragma omp simd reduction(|:nan)\n        for (int j = 0; j < %d; j++) {\n            nan |= nv[j];\n"
        "        }\n",
        SJ_XLANES);
    put(b, "        m = %s(mv[0] %s m, mv[0], m);\n        }\n", sel, cmp);
    put(b, "        if (nan)\n            m = __builtin_nan(\"\");\n");
}

/* 1 when an epilogue node of k calls a float function that is not a few instructions
 * (erf, exp, tanh, ...): the float32 expressions' calls other than the cheap ones below. */
static int epilogue_calls_math(Graph *g, const Kernel *k)
{
    static const char *const cheap[] = {"fabsf", "floorf", "ceilf", "truncf", "copysignf", "sqrtf"};
    for (int i = 0; i < k->red.nepi; i++) {
        NodeLower nl;
        if (lower_node_typed(g, k->nodes[k->nnodes - k->red.nepi + i], &nl) || !nl.expr)
            continue;
        for (const char *c = strstr(nl.expr, "f("); c; c = strstr(c + 2, "f(")) {
            const char *s = c;   /* the called name: back to its first character */
            while (s > nl.expr && (isalnum((unsigned char)s[-1]) || s[-1] == '_'))
                s--;
            int known = 0;
            for (size_t j = 0; j < sizeof cheap / sizeof *cheap && !known; j++)
                known = (size_t)(c + 1 - s) == strlen(cheap[j]) && !strncmp(s, cheap[j], (size_t)(c + 1 - s));
            if (!known)
                return 1;
        }
    }
    return 0;
}

/* 1 when k's rows run their epilogue apart from the normalising passes: an epilogue that
 * calls math functions (epilogue_calls_math). */
static int defers_epilogue(Graph *g, const Kernel *k)
{
    return k->red.nepi > 0 && epilogue_calls_math(g, k);
}

/* The row offset format of the contiguous rows (put_rows_part's fast path). */
#define FAST_FMT "base[%d] + i"

/* Contiguous rows whose epilogue waits: the last pass stores the row's values and queues
 * its offset, and the epilogue runs over EPI_ROWS rows at a time (put_epilogue_flush).
 * Why: the epilogue of one row (GELU's erf: ~40 vector instructions an element) fills the
 * out-of-order window, so the next row's dependent sums (mean, variance, 1 / sqrt) could
 * not overlap it and their latency showed; layer_norm + GELU at (8, 128, 256) float32,
 * AVX-512, 1 thread: 228 us with the epilogue per row, 197 with 8 rows at a time (harness
 * over the generated kernel; AVX2 level at 297 either way, where it is throughput-bound).
 * 8 rows of 256 floats stay in L1. */
#define EPI_ROWS 8

/* The queued rows' epilogue: runs of rows adjacent in memory go as one loop. */
static void put_epilogue_flush(Buf *b, Graph *g, const Kernel *k)
{
    put(b, "        for (int r = 0; r < npend;) {\n");
    put(b, "        const int64_t e0 = pend[r]; int64_t len = N;\n");
    put(b, "        for (r++; r < npend && pend[r] == e0 + len; r++)\n            len += N;\n");
    put(b, "#pragma omp simd\n        for (int64_t i = e0; i < e0 + len; i++) {\n");
    put(b, "            float y = out0[i];\n");
    emit_epilogue(b, g, k, "y");
    put(b, "            out0[i] = y;\n        }\n        }\n        npend = 0;\n");
}

/* Ends the last pass of a row (its loop body has the row's value in `y`): stores y. An
 * epilogue that calls math functions runs in a loop of its own over the stored rows (in
 * L1 by then): one loop doing both was measured slower, layer_norm + GELU at
 * (8, 128, 256) 231 vs 204 us with -march=x86-64-v3 and 145 vs 122 us on AVX-512 (the
 * erf's constants and the normalisation's streams compete for registers); a cheap epilogue
 * (relu) stays in the loop, where the second pass would cost it 5%. Contiguous rows queue
 * for it (EPI_ROWS); strided rows run it at once. */
static void put_last_pass_end(Buf *b, Graph *g, const Kernel *k, const char *fmt)
{
    if (k->red.nepi > 0 && !defers_epilogue(g, k))
        emit_epilogue(b, g, k, "y");
    put(b, "            out0[");
    put_off(b, fmt, 0);
    put(b, "] = y;\n        }\n");
    if (!defers_epilogue(g, k))
        return;
    if (!strcmp(fmt, FAST_FMT)) {
        put(b, "        pend[npend++] = base[0];\n        if (npend == %d) {\n", EPI_ROWS);
        put_epilogue_flush(b, g, k);
        put(b, "        }\n");
        return;
    }
    put(b, "#pragma omp simd\n        for (int64_t i = 0; i < N; i++) {\n");
    put(b, "            float y = out0[");
    put_off(b, fmt, 0);
    put(b, "];\n");
    emit_epilogue(b, g, k, "y");
    put(b, "            out0[");
    put_off(b, fmt, 0);
    put(b, "] = y;\n        }\n");
}

/* One row (or one output element): the flavour's passes with offsets by fmt. */
static void put_row(Buf *b, Graph *g, const Kernel *k, const char *fmt)
{
    switch (k->flavour) {
    case KF_SUM:
    case KF_MEAN: {
        static const char *const into[2] = {"s", "s1"}, *const term[2] = {"v", "v1"};
        int nt = 1 + k->red.nsib;
        put_sums(b, g, k, fmt, into, body_prologue, term, nt, acc_type(g, k));
        for (int j = 0; j < nt; j++) {
            if (k->flavour == KF_MEAN)
                put(b, "        out%d[base[%d]] = %s / (%s)N;\n", j, j, into[j], lower_ctype(acc_type(g, k)));
            else
                put(b, "        out%d[base[%d]] = %s;\n", j, j, into[j]);
        }
        break;
    }
    case KF_MAX:
    case KF_MIN:
        put_extreme(b, g, k, fmt, k->flavour == KF_MAX, 0);
        put(b, "        out0[base[0]] = m;\n");
        break;
    case KF_SOFTMAX:
    case KF_LOG_SOFTMAX:
        put_extreme(b, g, k, fmt, 1, !row_reads_input(k));
        if (k->red.nsum)
            put(b, "        out1[base[1]] = %s;\n", k->red.sum_mean ? "rs / (float)N" : "rs");
        put_sum(b, g, k, fmt, "s", body_softmax_exp, "e", DT_F32);
        if (k->flavour == KF_SOFTMAX)
            put(b, "        const float inv = 1.f / s;\n");
        else
            put(b, "        const float ls = logf(s);\n");
        put(b, "#pragma omp simd\n        for (int64_t i = 0; i < N; i++) {\n");
        put(b, "            float y = ");
        if (k->flavour == KF_SOFTMAX) {
            put(b, "out0[");   /* the stored exp */
            put_off(b, fmt, 0);
            put(b, "]");
        } else {
            put_row_elem(b, k, fmt);
        }
        put(b, ";\n            y = %s;\n", k->flavour == KF_SOFTMAX ? "y * inv" : "(y - m) - ls");
        put_last_pass_end(b, g, k, fmt);
        break;
    case KF_LAYER_NORM: {
        put_sum(b, g, k, fmt, "s", body_prologue_store, "v", DT_F32);
        put(b, "        const float mean = s / (float)N;\n");
        put_sum(b, g, k, fmt, "q", body_centred_square, "c * c", DT_F32);
        put(b, "        const float rstd = 1.f / sqrtf(q / (float)N + (float)%.17g);\n", k->red.eps);
        put(b, "#pragma omp simd\n        for (int64_t i = 0; i < N; i++) {\n");
        put(b, "            float y = out0[");
        put_off(b, fmt, 0);
        put(b, "];\n            y = (y - mean) * rstd;\n");
        int w = operand_of(k, k->red.weight), bb = operand_of(k, k->red.bias);
        if (k->red.weight >= 0) {
            put(b, "            y = y * in%d[", w - (int)k->nout);
            put_off(b, fmt, w);
            put(b, "];\n");
        }
        if (k->red.bias >= 0) {
            put(b, "            y = y + in%d[", bb - (int)k->nout);
            put_off(b, fmt, bb);
            put(b, "];\n");
        }
        put_last_pass_end(b, g, k, fmt);
        break;
    }
    case KF_RMS_NORM: {
        /* eager's order: the mean of the squares, + eps, 1 / sqrt, then x * rstd * w */
        put_sum(b, g, k, fmt, "q", row_reads_input(k) ? body_prologue : body_prologue_store, "v * v", DT_F32);
        put(b, "        const float rstd = 1.f / sqrtf(q / (float)N + (float)%.17g);\n", k->red.eps);
        put(b, "#pragma omp simd\n        for (int64_t i = 0; i < N; i++) {\n");
        put(b, "            float y = ");
        put_row_elem(b, k, fmt);
        put(b, " * rstd;\n");
        if (k->red.weight >= 0) {
            int w = operand_of(k, k->red.weight);
            put(b, "            y = y * in%d[", w - (int)k->nout);
            put_off(b, fmt, w);
            put(b, "];\n");
        }
        put_last_pass_end(b, g, k, fmt);
        break;
    }
    default:
        b->failed = 1;
    }
}

/* Adds to base[j] the offset of operand j at the kept position `rem` decomposes into over
 * the kept dims top..0 (the reduced dims are skipped); with `record`, each dim's index
 * also goes to kD (put_odometer's counters). */
static void put_bases(Buf *b, const Kernel *k, int top, int record)
{
    int r = k->rank, nops = (int)(k->nin + k->nout);
    for (int d = top; d >= 0; d--) {
        if ((k->red.mask >> d) & 1)
            continue;
        put(b, "        { const int64_t idx = rem %% n[%d]; rem /= n[%d];", d, d);
        if (record)
            put(b, " k%d = idx;", d);
        for (int j = 0; j < nops; j++)
            put(b, " base[%d] += idx * st[%d];", j, j * r + d);
        put(b, " }\n");
    }
}

/* Moves base[] to the next kept position: the last kept dim steps (counter kD), carrying
 * into the kept dims before it as they wrap. */
static void put_odometer(Buf *b, const Kernel *k)
{
    int r = k->rank, nops = (int)(k->nin + k->nout), open = 0;
    for (int d = r - 1; d >= 0; d--) {
        if ((k->red.mask >> d) & 1)
            continue;
        put(b, "%s        k%d++;", open ? "\n" : "", d);
        for (int j = 0; j < nops; j++)
            put(b, " base[%d] += st[%d];", j, j * r + d);
        put(b, "\n        if (k%d == n[%d]) { k%d = 0;", d, d, d);
        for (int j = 0; j < nops; j++)
            put(b, " base[%d] -= n[%d] * st[%d];", j, d, j * r + d);
        open++;
    }
    for (int i = 0; i < open; i++)
        put(b, " }");
    put(b, "\n");
}

/* Splitting one reduction across the threads (put_split, and put_columns when it has fewer
 * tiles than threads). */
#define SJ_SPLIT_MIN 65536   /* elements: below this a second thread costs more than it saves */
#define SJ_SPLIT_MAX 64      /* threads whose partials the kernel keeps */

/* Column mode: a reduction whose last dim is kept (x.sum(0) of a row-major matrix). The
 * loop order is kept positions -> reduced positions -> a tile of COLS outputs along the
 * last dim, so the innermost loop runs over consecutive elements of a row into COLS
 * accumulators (vectorised across outputs) instead of striding down each column. Float
 * sums add BLOCK_ROWS rows per block into the tile, then cascade the blocks per column as
 * put_sum does; integers add exactly in uint64_t; max/min keep NaN per column. The work
 * items are the tiles, or runs of a tile's rows when there are fewer tiles than threads
 * (put_columns_plan). `roff` formats the offset of reduced position i for operand %d (a
 * format of two %d). */
#define COLS 64
#define BLOCK_ROWS 128

/* Float column sums with unit strides, four rows at a time: the tile's accumulators are
 * loaded and stored once per four rows (they live in memory across the row loop), and the
 * rows are added pairwise first, ((r0 + r1) + (r2 + r3)), which rounds no worse than
 * adding them one by one. Moves iq past the rows it added. */
static void put_columns_rows4(Buf *b, Graph *g, const Kernel *k, const char *roff, int nops)
{
    int nt = 1 + k->red.nsib;
    put(b, "        if (unit)\n        for (; iq + 4 <= i1; iq += 4) {\n");
    for (int q = 0; q < 4; q++) {
        put(b, "        int64_t cq%d[%d];\n        { const int64_t i = iq + %d;", q, nops, q);
        for (int j = 1; j < nops; j++) {
            put(b, " cq%d[%d] = ", q, j);
            put(b, roff, j, j);
            put(b, ";");
        }
        put(b, " }\n");
    }
    put(b, "#pragma omp simd\n        for (int64_t jj = 0; jj < jn; jj++) {\n");
    for (int s = 0; s < nt; s++)
        put(b, "            %s v_0%s, v_1%s, v_2%s, v_3%s;\n", lower_ctype(acc_type(g, k)), SFX(s), SFX(s), SFX(s),
            SFX(s));
    for (int q = 0; q < 4; q++) {
        char fmt[32];
        snprintf(fmt, sizeof fmt, "cq%d[%%d] + jj", q);
        put(b, "            {\n");
        body_prologue(b, g, k, fmt);
        for (int s = 0; s < nt; s++)
            put(b, "            v_%d%s = v%s;\n", q, SFX(s), SFX(s));
        put(b, "            }\n");
    }
    for (int s = 0; s < nt; s++)
        put(b, "            acc%s[jj] += (v_0%s + v_1%s) + (v_2%s + v_3%s);\n", SFX(s), SFX(s), SFX(s), SFX(s), SFX(s));
    put(b, "        }\n        }\n");
}

/* How a column reduction's rows are split: with fewer tiles (`items`) than threads, a
 * 64-column matrix would leave all but one thread idle, so each tile's rows are cut into
 * `nsplit` runs of whole blocks (`chunk` rows each), one work item per run; each item
 * reduces its rows as the unsplit kernel does (the same blocks) into part[item], and the
 * runs are combined in row order after the loop. The split depends on the thread count
 * only, so the result is deterministic for a given thread count. */
static void put_columns_plan(Buf *b)
{
    put(b, "        int64_t nsplit = 1, chunk = N;\n");
    put(b, "        {\n        const int64_t items = outer2 * ntile;\n");
    put(b, "        const int64_t nt = omp_get_max_threads() < %d ? omp_get_max_threads() : %d;\n", SJ_SPLIT_MAX,
        SJ_SPLIT_MAX);
    put(b, "        if (nt > items && outer * N >= %d) {\n", SJ_SPLIT_MIN);
    put(b, "            nsplit = nt / items;\n");
    put(b, "            chunk = ((N + nsplit - 1) / nsplit + %d) / %d * %d;\n", BLOCK_ROWS - 1, BLOCK_ROWS, BLOCK_ROWS);
    put(b, "            nsplit = (N + chunk - 1) / chunk;\n        }\n        }\n");
}

/* After a split column reduction: each tile's runs combined in row order into out0 (float
 * sums add the runs' cascaded sums, integers add in uint64_t, max/min keep a NaN). */
static void put_columns_combine_one(Buf *b, Graph *g, const Kernel *k, const char *pt, int nops, int o)
{
    int r = k->rank;
    DType t = acc_type(g, k);
    const char *ct = lower_ctype(t);
    int sum = k->flavour == KF_SUM || k->flavour == KF_MEAN, fl = lower_class(t) != LC_INT;
    const char *cmp = k->flavour == KF_MAX ? ">" : "<";
    put(b, "        if (nsplit > 1)\n        for (int64_t it = 0; it < outer2 * ntile; it++) {\n");
    put(b, "        const int64_t j0 = (it %% ntile) * %d, jn = M - j0 < %d ? M - j0 : %d;\n", COLS, COLS, COLS);
    put(b, "        int64_t base[%d] = {0}, rem = it / ntile;\n        (void)rem;\n", nops);
    put_bases(b, k, r - 2, 0);
    put(b, "        base[%d] += j0 * st[%d];\n", o, o * r + r - 1);
    put(b, "        for (int64_t jj = 0; jj < jn; jj++) {\n");
    put(b, "            %s s = part%s[it * nsplit][jj];\n", pt, SFX(o));
    put(b, "            for (int64_t q = 1; q < nsplit; q++) {\n");
    put(b, "                const %s u = part%s[it * nsplit + q][jj];\n", pt, SFX(o));
    if (sum)
        put(b, "                s += u;\n");
    else if (fl)
        put(b, "                s = s != s ? s : u != u || u %s s ? u : s;\n", cmp);
    else
        put(b, "                s = u %s s ? u : s;\n", cmp);
    put(b, "            }\n            out%d[base[%d] + jj * st[%d]] = (%s)s", o, o, o * r + r - 1, ct);
    if (k->flavour == KF_MEAN)
        put(b, " / (%s)N", ct);
    put(b, ";\n        }\n        }\n");
}

static void put_columns_combine(Buf *b, Graph *g, const Kernel *k, const char *pt, int nops)
{
    for (int j = 0; j <= k->red.nsib; j++)
        put_columns_combine_one(b, g, k, pt, nops, j);
}

/* The result of column item ot for column jj, `val` (of the partials' type): into out0
 * unsplit, else into part[ot]. */
static void put_columns_result(Buf *b, Graph *g, const Kernel *k, const char *val, int o)
{
    const char *ct = lower_ctype(acc_type(g, k));
    put(b, "            if (nsplit == 1)\n                out%d[base[%d] + jj * st[%d]] = (%s)%s", o, o,
        o * k->rank + k->rank - 1, ct, val);
    if (k->flavour == KF_MEAN)
        put(b, " / (%s)N", ct);
    put(b, ";\n            else\n                part%s[ot][jj] = %s;\n", SFX(o), val);
}

static void put_columns(Buf *b, Graph *g, const Kernel *k, const char *roff)
{
    int r = k->rank, nops = (int)(k->nin + k->nout);
    DType t = acc_type(g, k);
    const char *ct = lower_ctype(t);
    int sum = k->flavour == KF_SUM || k->flavour == KF_MEAN, fl = lower_class(t) != LC_INT;
    int is_max = k->flavour == KF_MAX;
    const char *pt = sum && !fl ? "uint64_t" : ct;   /* the partials' type */
    int nt = 1 + k->red.nsib;                          /* results: a sibling's is float */
    put(b, "        const int64_t M = n[%d], ntile = (M + %d) / %d, outer2 = outer / M;\n", r - 1, COLS - 1, COLS);
    put(b, "        int unit = 1;\n");
    for (int j = nt; j < nops; j++)   /* every operand but the reduced outputs */
        put(b, "        unit &= st[%d] == 1;\n", j * r + r - 1);
    if (k->lean)   /* nothing written yet: columns of other strides are the full variant's */
        put(b, "        if (!unit)\n            return %d;\n", SJ_KERNEL_WANTS_FULL);
    put_columns_plan(b);
    /* sized by the split (a VLA): the unsplit kernel's stack stays as small as before */
    for (int s = 0; s < nt; s++)
        put(b, "        %s part%s[nsplit > 1 ? outer2 * ntile * nsplit : 1][%d];\n", pt, SFX(s), COLS);
    put(b, "#pragma omp parallel for if (outer * N >= 32768) schedule(static)\n");
    put(b, "        for (int64_t ot = 0; ot < outer2 * ntile * nsplit; ot++) {\n");
    put(b,
        "        const int64_t it = ot / nsplit, lo = ot %% nsplit * chunk, hi = lo + chunk < N ? lo + chunk : N;\n");
    put(b, "        const int64_t j0 = (it %% ntile) * %d, jn = M - j0 < %d ? M - j0 : %d;\n", COLS, COLS, COLS);
    put(b, "        int64_t base[%d] = {0}, rem = it / ntile;\n        (void)rem;\n", nops);
    put_bases(b, k, r - 2, 0);
    for (int j = 0; j < nops; j++)
        put(b, "        base[%d] += j0 * st[%d];\n", j, j * r + r - 1);
    if (sum && fl) {
        for (int s = 0; s < nt; s++)
            put(b, "        %s acc%s[%d], lv%s[48][%d];\n", ct, SFX(s), COLS, SFX(s), COLS);
        put(b, "        int64_t cnt = 0;\n");
        put(b, "        for (int64_t i0 = lo; i0 < hi; i0 += %d) {\n", BLOCK_ROWS);
        put(b, "        const int64_t i1 = i0 + %d < hi ? i0 + %d : hi;\n", BLOCK_ROWS, BLOCK_ROWS);
        for (int s = 0; s < nt; s++)
            put(b, "        for (int64_t jj = 0; jj < %d; jj++)\n            acc%s[jj] = 0;\n", COLS, SFX(s));
    } else {
        put(b, "        %s acc[%d];\n", pt, COLS);
        put(b, "        for (int64_t jj = 0; jj < %d; jj++)\n            acc[jj] = ", COLS);
        if (sum)
            put(b, "0;\n");
        else if (fl)
            put(b, "%sSJ_INF;\n", is_max ? "-" : "");
        else
            put(b, "INT%d_%s;\n", t == DT_I32 ? 32 : 64, is_max ? "MIN" : "MAX");
        put(b, "        { const int64_t i0 = lo, i1 = hi;\n");
    }
    put(b, "        int64_t iq = i0;\n");
    if (sum && t == DT_F32)   /* float64 (numpy's moments) was slower with four copies of the body */
        put_columns_rows4(b, g, k, roff, nops);
    put(b, "        for (int64_t i = iq; i < i1; i++) {\n");
    put(b, "        int64_t cur[%d];\n", nops);
    for (int j = 1; j < nops; j++) {
        put(b, "        cur[%d] = ", j);
        put(b, roff, j, j);
        put(b, ";\n");
    }
    /* the same row body twice: unit strides along the last dim (vectorised), or any (not
     * in a lean kernel) */
    char fmt[96];
    for (int u = 1; u >= (k->lean ? 1 : 0); u--) {
        if (u) {
            snprintf(fmt, sizeof fmt, "cur[%%d] + jj");
            put(b, k->lean ? "        {\n#pragma omp simd\n" : "        if (unit) {\n#pragma omp simd\n");
        } else {
            snprintf(fmt, sizeof fmt, "cur[%%d] + jj * sl%%d");
            put(b, "        } else {\n");
        }
        put(b, "        for (int64_t jj = 0; jj < jn; jj++) {\n");
        body_prologue(b, g, k, fmt);
        if (sum)
            for (int s = 0; s < nt; s++)
                put(b, "            acc%s[jj] += %sv%s;\n", SFX(s), fl ? "" : "(uint64_t)", SFX(s));
        else if (fl)
            put(b, "            acc[jj] = sj_sel%s(v %s acc[jj] || v != v, v, acc[jj]);\n", t == DT_F64 ? "d" : "",
                is_max ? ">" : "<");
        else
            put(b, "            acc[jj] = v %s acc[jj] ? v : acc[jj];\n", is_max ? ">" : "<");
        put(b, "        }\n");
    }
    put(b, "        }\n        }\n");   /* the else (the block), the loop over i */
    if (sum && fl) {
        /* the block's column sums join the cascade (sj_cascade_push, per column) */
        put(b, "        { int64_t c = cnt++; int l = 0;\n");
        put(b, "          while (c & 1) {\n");
        for (int s = 0; s < nt; s++)
            put(b, "            for (int64_t jj = 0; jj < %d; jj++) acc%s[jj] += lv%s[l][jj];\n", COLS, SFX(s), SFX(s));
        put(b, "            l++; c >>= 1;\n          }\n");
        for (int s = 0; s < nt; s++)
            put(b, "          for (int64_t jj = 0; jj < %d; jj++) lv%s[l][jj] = acc%s[jj];\n", COLS, SFX(s), SFX(s));
        put(b, "        }\n        }\n");
        put(b, "        for (int64_t jj = 0; jj < jn; jj++) {\n");
        for (int s = 0; s < nt; s++) {
            char val[8];
            snprintf(val, sizeof val, "s%s", SFX(s));
            put(b, "            %s %s = 0;\n", ct, val);
            put(b, "            for (int64_t l = 0, c = cnt; c; l++, c >>= 1)\n");
            put(b, "                if (c & 1)\n                    %s += lv%s[l][jj];\n", val, SFX(s));
            put_columns_result(b, g, k, val, s);
        }
    } else {
        put(b, "        }\n        for (int64_t jj = 0; jj < jn; jj++) {\n");
        put_columns_result(b, g, k, "acc[jj]", 0);
    }
    put(b, "        }\n        }\n");
    put_columns_combine(b, g, k, pt, nops);
}

/* A whole-tensor reduction (one output) over a long contiguous row, split across the
 * threads: each thread reduces a run of whole blocks of the row into part[t], combined in
 * thread order (a sum of partial cascades, as eager's parallel sum adds per-thread
 * partials). The omp-for over outputs below would give the one row to one thread. */
static void put_split(Buf *b, Graph *g, const Kernel *k, int nops)
{
    if (is_row(k) || k->nout != 1 ||
        !(k->flavour == KF_SUM || k->flavour == KF_MEAN || k->flavour == KF_MAX || k->flavour == KF_MIN))
        return;
    DType t = acc_type(g, k);
    const char *ct = lower_ctype(t);
    int fl = lower_class(t) != LC_INT, sum = k->flavour == KF_SUM || k->flavour == KF_MEAN;
    put(b, "    if (outer == 1 && fast && N >= %d && omp_get_max_threads() > 1) {\n", SJ_SPLIT_MIN);
    if (k->lean && k->red.mask != (1u << k->rank) - 1) {
        /* some dims are kept: one output only when they are all 1, too rare to compile for */
        put(b, "        return %d;\n    }\n", SJ_KERNEL_WANTS_FULL);
        return;
    }
    put(b, "    %s part[%d]; int used = 1;\n", ct, SJ_SPLIT_MAX);
    put(b, "#pragma omp parallel num_threads(omp_get_max_threads() < %d ? omp_get_max_threads() : %d)\n    {\n",
        SJ_SPLIT_MAX, SJ_SPLIT_MAX);
    put(b, "    const int t = omp_get_thread_num(), nt = omp_get_num_threads();\n");
    put(b, "    if (t == 0)\n        used = nt;\n");
    put(b, "    const int64_t chunk = ((N + nt - 1) / nt + %d) / %d * %d;\n", BLOCK - 1, BLOCK, BLOCK);
    put(b, "    const int64_t lo = t * chunk < N ? t * chunk : N, hi = lo + chunk < N ? lo + chunk : N;\n");
    put(b, "    int64_t base[%d];\n", nops);
    put(b, "    base[0] = 0;\n");
    for (int j = 1; j < nops; j++)
        put(b, "    base[%d] = lo;\n", j);
    for (int d = 0; d < k->rank; d++)
        if (!((k->red.mask >> d) & 1))
            put(b, "    const int64_t k%d = 0; (void)k%d;\n", d, d);
    put(b, "    {\n    const int64_t N = hi - lo;\n");
    if (sum) {
        put_sum(b, g, k, "base[%d] + i", "s", body_prologue, "v", t);
        put(b, "        part[t] = s;\n");
    } else {
        put_extreme(b, g, k, "base[%d] + i", k->flavour == KF_MAX, 0);
        put(b, "        part[t] = m;\n");
    }
    put(b, "    }\n    }\n");
    put(b, "    %s r = part[0];\n    for (int q = 1; q < used; q++)\n", ct);
    if (sum && !fl)
        put(b, "        r = (%s)((uint64_t)r + (uint64_t)part[q]);\n", ct);   /* wraps as eager */
    else if (sum)
        put(b, "        r += part[q];\n");
    else if (fl)
        put(b, "        r = r != r ? r : part[q] != part[q] || part[q] %s r ? part[q] : r;\n",
            k->flavour == KF_MAX ? ">" : "<");
    else
        put(b, "        r = part[q] %s r ? part[q] : r;\n", k->flavour == KF_MAX ? ">" : "<");
    if (k->flavour == KF_MEAN)
        put(b, "    out0[0] = r / (%s)N;\n", ct);
    else
        put(b, "    out0[0] = r;\n");
    put(b, "    return sj_bad;\n    }\n");
}

/* The locals every part of a reduction kernel reads: each operand's stride along the last
 * reduced dim (sr) and along the last dim (sl), the reduced and kept counts N and outer
 * (returning `ret` when there is no output element) and `fast`. */
static void put_locals(Buf *b, const Kernel *k, int nops, int last, const char *ret)
{
    int r = k->rank;
    uint32_t mask = k->red.mask;
    put(b, "    (void)n; (void)p; (void)st; (void)dense;\n");
    /* as locals: read through st inside a loop, GCC reloads them per element (st may alias
     * the outputs) and the strided loops cannot vectorise */
    for (int j = 0; r > 0 && j < nops; j++)
        put(b, "    const int64_t sr%d = st[%d], sl%d = st[%d];\n    (void)sr%d; (void)sl%d;\n", j, j * r + last, j,
            j * r + r - 1, j, j);
    put(b, "    int64_t N = 1, outer = 1;\n");
    for (int d = 0; d < r; d++)
        put(b, "    %s *= n[%d];\n", (mask >> d) & 1 ? "N" : "outer", d);
    put(b, "    if (outer == 0)\n        return%s;\n", ret);
    /* fast: every operand read or written per element walks the R dims contiguously */
    put(b, "    int fast = 1;\n");
    for (int j = is_row(k) ? 0 : 1; j < nops; j++) {
        if (is_row(k) && k->red.nsum && j == 1)
            continue;   /* the fused sum: one element per row */
        put(b, "    { int64_t e = 1;");
        for (int d = r - 1; d >= 0; d--)
            if ((mask >> d) & 1)
                put(b, " if (n[%d] != 1 && st[%d] != e) fast = 0; e *= n[%d];", d, j * r + d, d);
        put(b, " (void)e; }\n");
    }
    put(b, "    (void)fast;\n");
}

/* ------------------------------------------------------------ two rows ---- */

/* 1 when k's rows go two at a time (put_pair_row): a softmax/log_softmax reading its input
 * directly, with no epilogue. */
static int pairs_rows(const Kernel *k)
{
    return (k->flavour == KF_SOFTMAX || k->flavour == KF_LOG_SOFTMAX) && row_reads_input(k) && k->red.nepi == 0;
}

/* Two contiguous rows at once, row a at offsets ba[], row b at base[]: each pass runs over
 * both, so one row's dependent tails (the lanes' max, the sum, 1 / s) overlap the other's
 * work; a row softmax of (1024, 256) float32 took 62 instead of 73 us (harness, AVX-512).
 * The same passes as put_row, but for NaN: the max skips NaN (every compare with it is
 * false) and the exp of a NaN element makes the row's sum NaN, so every result is NaN as
 * eager's. The names of row a end in a, row b's in b. */
static void put_pair_row(Buf *b, const Kernel *k)
{
    int x = operand_of(k, k->red.src), sum = k->red.nsum;
    const char *r2[2] = {"a", "b"}, *bs[2] = {"ba", "base"};
    put(b, "        {\n");
    for (int q = 0; q < 2; q++) {
        const char *c = r2[q];
        put(b, "        const int64_t x%s = %s[%d], y%s = %s[0];\n", c, bs[q], x, c, bs[q]);
        put(b, "        float m%s = -SJ_INF, mv%s[%d];\n", c, c, SJ_XLANES);
        put(b, "        for (int j = 0; j < %d; j++)\n            mv%s[j] = -SJ_INF;\n", SJ_XLANES, c);
        if (sum)
            put(b, "        float slv%s[64], sacc%s = 0; int64_t scnt%s = 0;\n", c, c, c);
    }
    put(b, "        int64_t i0 = 0;\n");
    if (sum) {
        put(b, "        while (i0 + %d <= N) {\n", SJ_XLANES);
        put(b, "        const int64_t ie = i0 + %d < N ? i0 + %d : N;\n", BLOCK, BLOCK);
        put(b, "        float sva[%d], svb[%d];\n", SJ_XLANES, SJ_XLANES);
        put(b, "        for (int j = 0; j < %d; j++) {\n            sva[j] = 0;\n            svb[j] = 0;\n        }\n",
            SJ_XLANES);
    }
    put(b, "        for (; i0 + %d <= %s; i0 += %d) {\n#pragma omp simd\n", SJ_XLANES, sum ? "ie" : "N", SJ_XLANES);
    put(b, "        for (int j = 0; j < %d; j++) {\n", SJ_XLANES);
    for (int q = 0; q < 2; q++) {
        const char *c = r2[q];
        put(b, "            const float v%s = in%d[x%s + i0 + j];\n", c, x - (int)k->nout, c);
        if (sum)
            put(b, "            sv%s[j] += v%s;\n", c, c);
        put(b, "            mv%s[j] = sj_sel(v%s > mv%s[j], v%s, mv%s[j]);\n", c, c, c, c, c);
    }
    put(b, "        }\n        }\n");
    if (sum) {
        put(b, "        for (int w = %d; w >= 1; w /= 2) {\n#pragma omp simd\n", SJ_XLANES / 2);
        put(b, "        for (int j = 0; j < w; j++) {\n            sva[j] += sva[j + w];\n");
        put(b, "            svb[j] += svb[j + w];\n        }\n        }\n");
        put(b, "        sj_cascade_push(slva, &scnta, sva[0]);\n        sj_cascade_push(slvb, &scntb, svb[0]);\n");
        put(b, "        }\n");
    }
    put(b, "        for (int64_t i = i0; i < N; i++) {\n");
    for (int q = 0; q < 2; q++) {
        const char *c = r2[q];
        put(b, "            const float v%s = in%d[x%s + i];\n", c, x - (int)k->nout, c);
        if (sum)
            put(b, "            sacc%s += v%s;\n", c, c);
        put(b, "            m%s = sj_sel(v%s > m%s, v%s, m%s);\n", c, c, c, c, c);
    }
    put(b, "        }\n");
    put(b, "        for (int w = %d; w >= 1; w /= 2) {\n#pragma omp simd\n", SJ_XLANES / 2);
    put(b, "        for (int j = 0; j < w; j++) {\n            mva[j] = sj_sel(mva[j + w] > mva[j], mva[j + w], "
           "mva[j]);\n");
    put(b, "            mvb[j] = sj_sel(mvb[j + w] > mvb[j], mvb[j + w], mvb[j]);\n        }\n        }\n");
    for (int q = 0; q < 2; q++) {
        const char *c = r2[q];
        put(b, "        m%s = sj_sel(mv%s[0] > m%s, mv%s[0], m%s);\n", c, c, c, c, c);
        if (sum)
            put(b, "        out1[%s[1]] = (sj_cascade_sum(slv%s, scnt%s) + sacc%s)%s;\n", bs[q], c, c, c,
                k->red.sum_mean ? " / (float)N" : "");
    }
    /* the exp pass: blocks of 1024 cascaded, as put_sum */
    put(b, "        float lva[64], lvb[64]; int64_t cnta = 0, cntb = 0;\n");
    put(b, "        for (int64_t ib = 0; ib < N; ib += %d) {\n", BLOCK);
    put(b, "            const int64_t i1 = ib + %d < N ? ib + %d : N;\n", BLOCK, BLOCK);
    put(b, "            float acca = 0, accb = 0;\n#pragma omp simd reduction(+:acca, accb)\n");
    put(b, "            for (int64_t i = ib; i < i1; i++) {\n");
    for (int q = 0; q < 2; q++) {
        const char *c = r2[q];
        put(b, "            const float e%s = sj_expf_neg(in%d[x%s + i] - m%s);\n", c, x - (int)k->nout, c, c);
        if (k->flavour == KF_SOFTMAX)
            put(b, "            out0[y%s + i] = e%s;\n", c, c);
        put(b, "            acc%s += e%s;\n", c, c);
    }
    put(b, "            }\n            sj_cascade_push(lva, &cnta, acca);\n            sj_cascade_push(lvb, &cntb, "
           "accb);\n");
    put(b, "        }\n");
    if (k->flavour == KF_SOFTMAX)
        put(b, "        const float fa = 1.f / sj_cascade_sum(lva, cnta), fb = 1.f / sj_cascade_sum(lvb, cntb);\n");
    else
        put(b, "        const float fa = logf(sj_cascade_sum(lva, cnta)), fb = logf(sj_cascade_sum(lvb, cntb));\n");
    put(b, "#pragma omp simd\n        for (int64_t i = 0; i < N; i++) {\n");
    for (int q = 0; q < 2; q++) {
        const char *c = r2[q];
        if (k->flavour == KF_SOFTMAX)
            put(b, "            out0[y%s + i] = out0[y%s + i] * f%s;\n", c, c, c);
        else
            put(b, "            out0[y%s + i] = (in%d[x%s + i] - m%s) - f%s;\n", c, x - (int)k->nout, c, c, c);
    }
    put(b, "        }\n        }\n");
}

/* The rows, each thread a run of consecutive outputs: their offsets by an odometer over
 * the kept dims (divisions only at the start of the run); `slow` the element offset when
 * the R walks are not contiguous, which a lean kernel leaves out. Softmax rows go two at a
 * time where contiguous (pairs_rows). */
static void put_rows_part(Buf *b, Graph *g, const Kernel *k, int last, const char *slow)
{
    int r = k->rank, nops = (int)(k->nin + k->nout);
    uint32_t mask = k->red.mask;
    emit_kernel_part_head(b, g, k);
    put_locals(b, k, nops, last, "");
    put(b, "    int64_t base[%d] = {0}, prev = -2;\n", nops);
    for (int d = 0; d < r; d++)
        if (!((mask >> d) & 1))
            put(b, "    int64_t k%d = 0;\n", d);
    int pair = pairs_rows(k);
    if (pair)
        put(b, "    int64_t ba[%d];\n", nops);
    int defer = defers_epilogue(g, k);
    if (defer)
        put(b, "    int64_t pend[%d]; int npend = 0;\n", EPI_ROWS);
    put(b, "#pragma omp for schedule(static)\n");
    if (pair)   /* rows o and o + 1 */
        put(b, "    for (int64_t op = 0; op < (outer + 1) / 2; op++) {\n        const int64_t o = 2 * op;\n");
    else
        put(b, "    for (int64_t o = 0; o < outer; o++) {\n");
    put(b, "        if (o != prev + 1) {\n");
    put(b, "        int64_t rem = o;\n        (void)rem;\n");
    for (int j = 0; j < nops; j++)
        put(b, "        base[%d] = 0;\n", j);
    put_bases(b, k, r - 1, 1);
    put(b, "        } else {\n");
    put_odometer(b, k);
    put(b, "        }\n        prev = o;\n");
    if (pair) {   /* a lean kernel is called only when fast */
        put(b, k->lean ? "        if (o + 1 < outer) {\n" : "        if (fast && o + 1 < outer) {\n");
        put(b, "        for (int j = 0; j < %d; j++)\n            ba[j] = base[j];\n", nops);
        put_odometer(b, k);
        put(b, "        prev = o + 1;\n");
        put_pair_row(b, k);
        put(b, "        continue;\n        }\n");
    }
    if (k->lean) {
        put_row(b, g, k, FAST_FMT);
    } else {
        put(b, "        if (fast) {\n");
        put_row(b, g, k, FAST_FMT);
        put(b, "        } else {\n");
        put_row(b, g, k, slow);
        put(b, "        }\n");
        if (pair) {   /* strided rows: the second one by put_row */
            put(b, "        if (o + 1 < outer) {\n");
            put_odometer(b, k);
            put(b, "        prev = o + 1;\n");
            put_row(b, g, k, slow);
            put(b, "        }\n");
        }
    }
    put(b, "    }\n");
    if (defer)   /* this thread's last rows */
        put_epilogue_flush(b, g, k);
    put(b, "    if (sj_bad)\n        __atomic_store_n(sj_bad_out, 1, __ATOMIC_RELAXED);\n}\n");
}

void emit_reduce_kernel(Buf *b, Graph *g, const Kernel *k)
{
    int r = k->rank, nops = (int)(k->nin + k->nout);
    uint32_t mask = k->red.mask;
    int nr = 0, last = 0;
    for (int d = 0; d < r; d++)
        if ((mask >> d) & 1) {
            nr++;
            last = d;
        }
    put(b, "%s", helpers);
    /* the element offset when R walks are not contiguous (%d is the operand) */
    char slow[160];
    if (nr == 0) {
        snprintf(slow, sizeof slow, "base[%%d] + i");   /* N == 1, i == 0 */
    } else if (nr == 1) {
        snprintf(slow, sizeof slow, "base[%%d] + i * sr%%d");
    } else {
        /* i decomposed over the R dims, the last one innermost */
        snprintf(slow, sizeof slow, "base[%%d] + sj_roff_%s(n, st, %%d, i)", k->name);
        put(b, "\nstatic inline int64_t sj_roff_%s(const int64_t *n, const int64_t *st, int j, int64_t i)\n{\n",
            k->name);
        put(b, "    int64_t o = 0, q;\n");
        for (int d = r - 1; d >= 0; d--)
            if ((mask >> d) & 1)
                put(b, "    q = i %% n[%d]; i /= n[%d]; o += q * st[j * %d + %d];\n", d, d, r, d);
        put(b, "    return o;\n}\n");
    }
    if (k->nout == 0 || nops > SJ_KMAX_OPERANDS) {
        emit_kernel_head(b, g, k);
        put(b, "    (void)n; (void)p; (void)st; (void)dense;\n    return 0;\n}\n");   /* never called */
        return;
    }
    /* a lean kernel that keeps its last dim has only its columns (the order of C-contiguous
     * inputs); rows are the full variant's */
    int cols = !is_row(k) && r >= 2 && nr >= 1 && !((mask >> (r - 1)) & 1);
    if (!(k->lean && cols))
        put_rows_part(b, g, k, last, slow);
    /* the kernel: column order and the split of one long row have loops of their own */
    emit_kernel_head(b, g, k);
    put_locals(b, k, nops, last, " 0");
    if (cols) {
        put(b, "    if (!fast && n[%d] > 1) {\n", r - 1);
        put_columns(b, g, k, slow);
        put(b, "        return sj_bad;\n    }\n");
    }
    if (k->lean && cols) {
        put(b, "    return %d;\n}\n", SJ_KERNEL_WANTS_FULL);
        return;
    }
    put_split(b, g, k, nops);
    if (k->lean)   /* before any write: the caller runs the full variant instead */
        put(b, "    if (!fast)\n        return %d;\n", SJ_KERNEL_WANTS_FULL);
    emit_kernel_part_call(b, k, "outer * N");
}
