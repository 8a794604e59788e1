/* C source for the kernels of a plan: one translation unit, one function per kernel.
 *
 * Every kernel has the same C signature, so one libffi call description serves all:
 *   int64_t sj_kN(const int64_t *n, char *const *p, const int64_t *st, int64_t dense)
 * n: the rank sizes of the iteration space; p: the data pointers, outputs first then
 * inputs; st: per operand, rank strides in elements (0 where an input broadcasts); dense:
 * 1 when every operand is contiguous over the whole space (one flat loop). Sizes are run-
 * time arguments: one compiled kernel serves every size. It returns 0, or 1 when an
 * element needs eager's own handling (an integer division by zero): the caller then runs
 * the kernel's nodes eagerly. Elements are typed by their values' metas (lower_types.c).
 *
 * Memory: builds a PyUnicode (new reference) through a growing char buffer (PyMem). */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "lower_int.h"

void emit_put(Buf *b, const char *fmt, ...)
{
    if (b->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (w < 0) {
            b->failed = 1;
            return;
        }
        if (b->s && (size_t)w < b->cap - b->n) {
            b->n += (size_t)w;
            return;
        }
        size_t cap = (b->cap ? b->cap * 2 : 4096) + (size_t)w;
        char *q = PyMem_Realloc(b->s, cap);
        if (!q) {
            b->failed = 1;
            return;
        }
        b->s = q;
        b->cap = cap;
    }
}

#define put emit_put

/* Helpers the expressions of lower.def use; NaN behaves as in torch and numpy. The float
 * ones are written once for float (no suffix) and double (suffix d). Floor division and
 * the remainder of floats follow Python's float divmod, as torch and numpy do (a zero
 * divisor gives a / b; a zero remainder takes the sign of a in torch, of b in numpy).
 * Integer division flags a zero divisor and MIN / -1 in the kernel's sj_bad (eager then
 * reruns the nodes: torch raises, numpy warns) instead of trapping. Powers 2 and 3 are
 * products, as torch computes them (and libmvec's powf goes scalar on negative bases:
 * GPT-2's x ** 3 cost 20x more).
 *
 * Branch-free, so the loops vectorise without AVX-512's masks: under -ftrapping-math (the
 * default) GCC will not run FP arithmetic or an ordered compare that C puts under a
 * condition on lanes that did not ask for it, and on AVX2 such a loop stays scalar
 * ("control flow in loop"; 20x slower for leaky_relu). So every compare runs
 * unconditionally and the arms are plain values, or both sides are computed and sj_sel
 * picks one: a bitwise blend, which GCC cannot turn back into a branch and sink the
 * arithmetic into (it does so with `c ? x : y` when x or y is computed only for it).
 * Ties and zeros as eager: relu keeps -0.0 (torch clamps at 0 keeping the input on a
 * tie), maximum/minimum give the second operand on a tie of -0.0 and 0.0 (numpy, and
 * torch's vector loop; its scalar tail gives the first), NaN in either operand gives NaN
 * (the first NaN's payload), clamp keeps the input on a tie with a bound. */
static const char prelude[] =
    "#include <math.h>\n"
    "#include <stdint.h>\n"
    "#include <omp.h>\n"
    "#define SJ_INF __builtin_inff()\n"
    "#define SJ_FLOAT_OPS(S, T, U, FMOD, FLOOR, COPYSIGN, POW)\\\n"
    "static inline T sj_sel##S(int c, T x, T y)\\\n"
    "{ union { T f; U u; } X = {x}, Y = {y}, R; const U m = (U)0 - (U)c; R.u = (X.u & m) | (Y.u & ~m); return R.f; "
    "}\\\n"
    "static inline T sj_relu##S(T a) { return sj_sel##S(a < 0, 0, a); }\\\n"
    "static inline T sj_clamp##S(T a, T lo, T hi) { const T t = sj_sel##S(a < lo, lo, a); return sj_sel##S(t > hi, hi, "
    "t); }\\\n"
    "static inline T sj_max##S(T a, T b) { const T m = sj_sel##S(a > b, a, b); return sj_sel##S(a != a, a, m); }\\\n"
    "static inline T sj_min##S(T a, T b) { const T m = sj_sel##S(a < b, a, b); return sj_sel##S(a != a, a, m); }\\\n"
    "static inline T sj_pow##S(T a, T b)\\\n"
    "{ const T s = a * a, c = s * a, p = POW(a, b); return sj_sel##S(b == 2, s, sj_sel##S(b == 3, c, p)); }\\\n"
    "static inline T sj_floordiv##S(T a, T b)\\\n"
    "{ if (b == 0) return a / b; T m = FMOD(a, b), d = (a - m) / b;\\\n"
    "  if (m != 0 && ((b < 0) != (m < 0))) d -= 1;\\\n"
    "  if (d == 0) return COPYSIGN(0, a / b);\\\n"
    "  T f = FLOOR(d); return d - f > (T)0.5 ? f + 1 : f; }\\\n"
    "static inline T sj_mod##S(T a, T b, int np)\\\n"
    "{ T m = FMOD(a, b); if (m != 0) { if ((b < 0) != (m < 0)) m += b; } else if (np) m = COPYSIGN(0, b);\\\n"
    "  return m; }\n"
    "SJ_FLOAT_OPS(, float, uint32_t, fmodf, floorf, copysignf, powf)\n"
    "SJ_FLOAT_OPS(d, double, uint64_t, fmod, floor, copysign, pow)\n"
    "#define SJ_INT_OPS(W, T, MIN)\\\n"
    "static inline int sj_idiv_bad##W(T a, T b, int *bad)\\\n"
    "{ if (b == 0 || (b == -1 && a == MIN)) { __atomic_store_n(bad, 1, __ATOMIC_RELAXED); return 1; } return 0; }\\\n"
    "static inline T sj_ifloordiv##W(T a, T b, int *bad)\\\n"
    "{ if (sj_idiv_bad##W(a, b, bad)) return 0; T q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; "
    "}\\\n"
    "static inline T sj_imod##W(T a, T b, int *bad)\\\n"
    "{ if (sj_idiv_bad##W(a, b, bad)) return 0; T r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }\\\n"
    "static inline T sj_ifmod##W(T a, T b, int *bad) { return sj_idiv_bad##W(a, b, bad) ? 0 : a % b; }\n"
    "SJ_INT_OPS(32, int32_t, INT32_MIN)\n"
    "SJ_INT_OPS(64, int64_t, INT64_MIN)\n"
    "#define SJ_IPICK(f, a) _Generic((a), int32_t: f##32, default: f##64)\n"
    "#define sj_ifloordiv(a, b) SJ_IPICK(sj_ifloordiv, a)((a), (b), &sj_bad)\n"
    "#define sj_imod(a, b) SJ_IPICK(sj_imod, a)((a), (b), &sj_bad)\n"
    "#define sj_ifmod(a, b) SJ_IPICK(sj_ifmod, a)((a), (b), &sj_bad)\n"
    /* glibc's vector math (libmvec, linked by cc.c): declared SIMD-callable, so loops that
     * call them vectorise without -ffast-math */
    "#define SJ_VEC __attribute__((simd(\"notinbranch\"), const, nothrow))\n"
    "#define SJ_VEC_DECL(T, S)\\\n"
    "SJ_VEC T exp##S(T); SJ_VEC T exp2##S(T); SJ_VEC T expm1##S(T); SJ_VEC T log##S(T); SJ_VEC T log2##S(T);\\\n"
    "SJ_VEC T log10##S(T); SJ_VEC T log1p##S(T); SJ_VEC T pow##S(T, T); SJ_VEC T erf##S(T); SJ_VEC T sin##S(T);\\\n"
    "SJ_VEC T cos##S(T); SJ_VEC T tan##S(T); SJ_VEC T asin##S(T); SJ_VEC T acos##S(T); SJ_VEC T atan##S(T);\\\n"
    "SJ_VEC T atan2##S(T, T); SJ_VEC T sinh##S(T); SJ_VEC T cosh##S(T); SJ_VEC T tanh##S(T); SJ_VEC T hypot##S(T, T);\n"
    "SJ_VEC_DECL(float, f)\n"
    "SJ_VEC_DECL(double, )\n";

/* A floating literal of type T (float or double; inf and nan spelled out). */
static void put_float(Buf *b, double x, DType t)
{
    if (isnan(x))
        put(b, t == DT_F32 ? "__builtin_nanf(\"\")" : "__builtin_nan(\"\")");
    else if (isinf(x))
        put(b, x > 0 ? "SJ_INF" : "(-SJ_INF)");
    else if (x == 0 && signbit(x))
        put(b, "(-(%s)0)", lower_ctype(t));   /* %g writes "-0", which C reads as the integer 0 */
    else
        put(b, "((%s)%.17g)", lower_ctype(t), x);   /* rounded to float as eager rounds a Python scalar */
}

/* An integer literal of int type t: written from the integer itself, never through a
 * double (2**53 + 1 must stay odd). */
static void put_int_exact(Buf *b, long long x, DType t)
{
    if (x == LLONG_MIN)
        put(b, "((%s)INT64_MIN)", lower_ctype(t));
    else
        put(b, "((%s)%lldLL)", lower_ctype(t), x);
}

/* An integer literal of int type t from an integral double; x beyond t's range (an
 * absent clamp bound) is its limit. */
static void put_int(Buf *b, double x, DType t)
{
    int w = t == DT_I32 ? 32 : 64;
    if (x >= ldexp(1.0, w - 1))
        put(b, "INT%d_MAX", w);
    else if (x <= -ldexp(1.0, w - 1))
        put(b, "INT%d_MIN", w);
    else
        put_int_exact(b, (long long)x, t);
}

/* A number as a literal of type t. */
static void put_number(Buf *b, double x, DType t)
{
    int c = lower_class(t);
    if (c == LC_F32 || c == LC_F64)
        put_float(b, x, t);
    else if (c == LC_INT)
        put_int(b, x, t);
    else
        put(b, "%d", x != 0);
}

/* The Python number v (int, bool or float; lower_types.c checked that t holds it) as a
 * literal of type t. An int goes to an int type as an integer, to bool as its truth, to a
 * float type through a double (exact: lower_types.c keeps larger ints eager). */
static void put_const(Buf *b, PyObject *v, DType t)
{
    if (PyLong_Check(v) && lower_class(t) != LC_F32 && lower_class(t) != LC_F64) {
        int overflow = 0;
        long long i = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (i == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            b->failed = 1;
            return;
        }
        if (t == DT_BOOL)
            put(b, "%d", overflow || i != 0);
        else if (overflow)
            b->failed = 1;   /* lower_types.c keeps such a node eager */
        else
            put_int_exact(b, i, t);
        return;
    }
    double d = PyFloat_AsDouble(v);
    if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        b->failed = 1;
        return;
    }
    put_number(b, d, t);
}

/* Parameter i of a node: its Python value when the call gave one, else the row's default. */
static void put_param(Buf *b, const NodeLower *nl, int i, DType t)
{
    if (nl->pv[i])
        put_const(b, nl->pv[i], t);
    else
        put_number(b, nl->p[i], t);
}

/* The C operand for argument x of a node in kernel k, as type t: a temporary or an input's
 * element (converted), or a constant. */
static void put_operand(Buf *b, Graph *g, const Kernel *k, const Arg *x, DType t)
{
    if (x->kind == ARG_CONST) {
        put_const(b, PyList_GET_ITEM(g->consts, x->a), t);   /* borrowed */
        return;
    }
    DType from = (DType)g->values[x->a].meta.dtype;
    if (from == t) {
        emit_value(b, g, k, x->a);
        return;
    }
    put(b, t == DT_BOOL ? "(" : "((%s)", lower_ctype(t));
    emit_value(b, g, k, x->a);
    put(b, t == DT_BOOL ? " != 0)" : ")");
}

void emit_value(Buf *b, const Graph *g, const Kernel *k, int32_t v)
{
    for (int32_t i = 0; i < k->nin; i++)
        if (k->ins[i] == v) {
            put(b, "x%d", (int)i);
            return;
        }
    /* named by the node's position in the kernel, not the graph's value id: the same
     * computation elsewhere in the graph is the same text (lower_name_kernels) */
    for (int32_t i = 0; i < k->nnodes; i++)
        if (g->nodes[k->nodes[i]].first_value == v) {
            put(b, "t%d", (int)i);
            return;
        }
    b->failed = 1;
}

/* Where a pointwise loop is on the last dim, for rotated reads (plan_rot.c): the C of the
 * last-dim index, and per operand (a format given j for each %d, at most one) its stride
 * along the last dim in elements. */
typedef struct {
    const char *j;
    const char *ls_fmt;
} LastDim;

/* The rotation node i of k (node ni, plan_rot.c): x read at the last-dim index j + h,
 * negated, for j < h, else at j - h (rotate_half); x read at j + 1, negated, for even j,
 * else at j - 1 (the pairs' swap: h is 1). */
static void put_rot(Buf *b, Graph *g, const Kernel *k, int32_t i, int32_t ni, const char *off_fmt, const LastDim *ld)
{
    RotRead rr;
    int32_t in = -1;
    if (!plan_rot_match(g, ni, &rr))
        for (int32_t q = 0; q < k->nin && in < 0; q++)
            if (k->ins[q] == rr.x)
                in = q;
    if (in < 0 || !ld) {
        b->failed = 1;
        return;
    }
    int j = (int)(k->nout + in);
    DType dt = (DType)g->values[rr.x].meta.dtype;
    const char *t = lower_ctype(dt);
    if (rr.pairs)
        put(b, "            %s t%d;\n            { const int sj_lo = (%s & 1) == 0; const %s v = in%d[(", t, (int)i,
            ld->j, t, (int)in);
    else
        put(b, "            %s t%d;\n            { const int sj_lo = %s < %lldLL; const %s v = in%d[(", t, (int)i,
            ld->j, (long long)rr.half, t, (int)in);
    put(b, off_fmt, j, j);
    put(b, ") + (sj_lo ? %lldLL : -%lldLL) * (", (long long)rr.half, (long long)rr.half);
    put(b, ld->ls_fmt, j);
    /* a plain ternary: gcc vectorizes the load at the selected offset (a gather) only when
     * the select after it is one it if-converts itself; sj_sel's bit blend leaves the loop
     * scalar */
    put(b, ")]; t%d = sj_lo ? -v : v; }\n", (int)i);
}

static void compute_at(Buf *b, Graph *g, const Kernel *k, const char *off_fmt, const LastDim *ld, int32_t upto)
{
    for (int32_t i = 0; i < k->nin; i++) {
        put(b, "            const %s x%d = in%d[", lower_ctype((DType)g->values[k->ins[i]].meta.dtype), (int)i, (int)i);
        put(b, off_fmt, (int)(k->nout + i), (int)(k->nout + i));
        put(b, "];\n");
    }
    for (int32_t i = 0; i < upto; i++) {
        int32_t ni = k->nodes[i];
        NodeLower nl;
        if (k->rot && plan_rot_role(g, k, ni) == 2) {
            put_rot(b, g, k, i, ni, off_fmt, ld);
            continue;
        }
        if (k->rot && plan_rot_role(g, k, ni) == 1)
            continue;   /* read through the rotated load */
        if (lower_node_typed(g, ni, &nl)) {
            b->failed = 1;
            return;
        }
        const char *ct = lower_ctype(nl.ct);
        put(b, "            %s t%d;\n            { ", lower_ctype(nl.out), (int)i);
        if (lower_class(nl.ct) == LC_INT)
            put(b, "typedef %s T; typedef u%s U; ", ct, ct);
        put(b, "const %s a = ", ct);
        put_operand(b, g, k, nl.x[0], nl.row->kind == LK_LOGIC ? DT_BOOL : nl.ct);
        if (nl.x[1]) {
            put(b, ", b = ");
            put_operand(b, g, k, nl.x[1], nl.row->kind == LK_LOGIC ? DT_BOOL : nl.ct);
        }
        put(b, ", P0 = ");
        put_param(b, &nl, 0, nl.ct);
        put(b, ", P1 = ");
        put_param(b, &nl, 1, nl.ct);
        put(b, "; (void)P0; (void)P1;");
        if (nl.x[2]) {
            put(b, " const uint8_t c = ");
            put_operand(b, g, k, nl.x[2], DT_BOOL);
            put(b, ";");
        }
        put(b, " t%d = %s; }\n", (int)i, nl.expr);
    }
}

void emit_compute(Buf *b, Graph *g, const Kernel *k, const char *off_fmt, int32_t upto)
{
    compute_at(b, g, k, off_fmt, NULL, upto);
}

void emit_epilogue(Buf *b, Graph *g, const Kernel *k, const char *var)
{
    int32_t cur = g->nodes[k->nodes[k->nnodes - 1 - k->red.nepi]].first_value;
    for (int i = 0; i < k->red.nepi; i++) {
        int32_t nj = k->nodes[k->nnodes - k->red.nepi + i];
        NodeLower nl;
        if (lower_node_typed(g, nj, &nl)) {
            b->failed = 1;
            return;
        }
        put(b, "            { ");
        for (int j = 0; j < 2 && nl.x[j]; j++) {
            put(b, "const float %s = ", j ? "b" : "a");
            if (nl.x[j]->kind == ARG_VALUE && nl.x[j]->a == cur)
                put(b, "%s", var);
            else
                put_operand(b, g, k, nl.x[j], DT_F32);   /* a constant (plan_reduce.c) */
            put(b, "; ");
        }
        put(b, "const float P0 = ");
        put_param(b, &nl, 0, DT_F32);
        put(b, ", P1 = ");
        put_param(b, &nl, 1, DT_F32);
        put(b, "; (void)P0; (void)P1; %s = %s; }\n", var, nl.expr);
        cur = g->nodes[nj].first_value;
    }
}

void emit_kernel_head(Buf *b, Graph *g, const Kernel *k)
{
    put(b, "\nCG_EXPORT int64_t %s(const int64_t *n, char *const *p, const int64_t *st, int64_t dense)\n{\n", k->name);
    emit_kernel_locals(b, g, k);
}

void emit_kernel_part_head(Buf *b, Graph *g, const Kernel *k)
{
    put(b,
        "\nstatic void %s_part(const int64_t *n, char *const *p, const int64_t *st, int64_t dense, int *sj_bad_out)\n"
        "{\n",
        k->name);
    emit_kernel_locals(b, g, k);
}

void emit_kernel_part_call(Buf *b, const Kernel *k, const char *work)
{
    put(b, "    if (%s >= 32768 && omp_get_max_threads() > 1) {\n#pragma omp parallel\n", work);
    put(b, "        %s_part(n, p, st, dense, &sj_bad);\n    } else {\n", k->name);
    put(b, "        %s_part(n, p, st, dense, &sj_bad);\n    }\n    return sj_bad;\n}\n", k->name);
}

void emit_kernel_locals(Buf *b, Graph *g, const Kernel *k)
{
    put(b, "    int sj_bad = 0;\n    const int sj_np = %d;\n    (void)sj_np;\n", k->lib == LIB_NUMPY);
    for (int32_t j = 0; j < k->nout; j++) {
        const char *t = lower_ctype((DType)g->values[k->outs[j]].meta.dtype);
        put(b, "    %s *restrict out%d = (%s *)p[%d];\n", t, (int)j, t, (int)j);
    }
    for (int32_t i = 0; i < k->nin; i++) {
        const char *t = lower_ctype((DType)g->values[k->ins[i]].meta.dtype);
        put(b, "    const %s *restrict in%d = (const %s *)p[%d];\n", t, (int)i, t, (int)(k->nout + i));
    }
}

/* The loop body: load each input once, compute every node, store the outputs. */
static void put_body(Buf *b, Graph *g, const Kernel *k, const char *off_fmt, const LastDim *ld)
{
    compute_at(b, g, k, off_fmt, ld, k->nnodes);
    for (int32_t j = 0; j < k->nout; j++) {
        put(b, "            out%d[", (int)j);
        put(b, off_fmt, (int)j, (int)j);
        put(b, "] = ");
        emit_value(b, g, k, k->outs[j]);
        put(b, ";\n");
    }
}

/* 1 when input value v broadcasts along the kernel's last dim whatever the sizes: its meta
 * has no last dim or a static 1 there, and the kernel's last dim is not a static 1. */
static int bcast_last(Graph *g, const Kernel *k, int32_t v)
{
    const TensorMeta *m = &g->values[v].meta, *o = &g->values[k->nout ? k->outs[0] : v].meta;
    int r = k->rank;
    if (r == 0 || (o->ndim == r && !o->sym[r - 1] && o->size[r - 1] == 1))
        return 0;
    return m->ndim == 0 || (!m->sym[m->ndim - 1] && m->size[m->ndim - 1] == 1);
}

static void put_kernel(Buf *b, Graph *g, const Kernel *k)
{
    int r = k->rank, nops = (int)(k->nin + k->nout);
    emit_kernel_part_head(b, g, k);
    put(b, "    (void)st;\n    int64_t total = 1;\n    for (int d = 0; d < %d; d++)\n        total *= n[d];\n", r);
    /* dense: one flat loop */
    put(b, "    if (dense || %d <= 1) {\n", r);
    if (r == 1) {
        /* rank 1 with strides: the flat loop over i * stride */
        put(b, "        if (!dense) {\n");
        put(b, "#pragma omp for schedule(static)\n");
        put(b, "        for (int64_t i = 0; i < total; i++) {\n");
        LastDim l1 = {"i", "st[%d]"};
        put_body(b, g, k, "i * st[%d]", &l1);
        put(b, "        }\n        goto done;\n        }\n");
    }
    /* blocks of 4096 elements across threads, each a vector loop */
    put(b, "        const int64_t nblk = (total + 4095) / 4096;\n");
    put(b, "#pragma omp for schedule(static)\n");
    put(b, "        for (int64_t blk = 0; blk < nblk; blk++) {\n");
    put(b, "        const int64_t lo = blk * 4096, hi = lo + 4096 < total ? lo + 4096 : total;\n");
    /* dense: the last-dim index of flat element i (a rotated read's last dim d is static),
     * from the block's start in 32 bits: gcc vectorizes an unsigned 32-bit remainder by a
     * constant, not a 64-bit one */
    long long d = k->rot ? (long long)g->values[k->space].meta.size[r - 1] : 1;
    char jd[96];
    if (k->rot && d > 0 && d < (1LL << 30)) {
        put(b, "        const uint32_t sj_jlo = (uint32_t)(lo %% %lldLL);\n", d);
        snprintf(jd, sizeof jd, "((int64_t)(((uint32_t)(i - lo) + sj_jlo) %% %lldu))", d);
    } else {
        snprintf(jd, sizeof jd, "(i %% %lldLL)", d);
    }
    put(b, "#pragma omp simd\n");
    put(b, "        for (int64_t i = lo; i < hi; i++) {\n");
    LastDim ldd = {jd, "1"};
    put_body(b, g, k, "i", &ldd);
    put(b, "        }\n        }\n        goto done;\n    }\n");
    if (r >= 2) {
        /* strided: the last dim innermost, the outer rows split into one contiguous range
         * per thread (as a static schedule would); each range decomposes its first row
         * index once and then steps an odometer over the outer dims, adding strides, so
         * a row of a few elements (a broadcast outer product's last dim) costs no
         * divisions */
        put(b, "    const int64_t inner = n[%d], outer = total / inner;\n", r - 1);
        put(b, "    int64_t o_lo = 0, o_hi = outer;\n");
        put(b, "    if (omp_in_parallel()) {\n");
        put(b, "        const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();\n");
        put(b, "        const int64_t chunk = (outer + nt - 1) / nt;\n");
        put(b, "        o_lo = t * chunk < outer ? t * chunk : outer;\n");
        put(b, "        o_hi = o_lo + chunk < outer ? o_lo + chunk : outer;\n    }\n");
        put(b, "    int64_t base[%d] = {0}, idx[%d] = {0}, rem = o_lo;\n", nops, r - 1);
        put(b, "    for (int d = %d; d >= 0; d--) {\n", r - 2);
        put(b, "        idx[d] = rem %% n[d];\n        rem /= n[d];\n");
        put(b, "        for (int j = 0; j < %d; j++)\n            base[j] += idx[d] * st[j * %d + d];\n", nops, r);
        put(b, "    }\n");
        put(b, "    for (int64_t o = o_lo; o < o_hi; o++) {\n");
        /* unit: every operand walks the last dim with the stride the plan expects, 1, or 0
         * for an input that broadcasts along it (loaded once per row: the loop vectorises) */
        put(b, "        int unit = 1;\n");
        for (int j = 0; j < nops; j++) {
            int u = j < k->nout || !bcast_last(g, k, k->ins[j - k->nout]);
            put(b, "        const int64_t u%d = %d;\n        unit &= st[%d] == u%d;\n", j, u, j * r + r - 1, j);
        }
        put(b, "        if (unit) {\n");
        put(b, "#pragma omp simd\n");
        put(b, "        for (int64_t i = 0; i < inner; i++) {\n");
        LastDim lu = {"i", "u%d"};
        put_body(b, g, k, "base[%d] + i * u%d", &lu);
        put(b, "        }\n        } else {\n");
        /* strides as locals: read through st in the loop, gcc reloads them per element (st
         * may alias an output) and the loop cannot vectorise (with gathers) */
        for (int j = 0; j < nops; j++)
            put(b, "        const int64_t v%d = st[%d];\n", j, j * r + r - 1);
        put(b, "        for (int64_t i = 0; i < inner; i++) {\n");
        char fmt[64];
        snprintf(fmt, sizeof fmt, "base[%%d] + i * v%%d");
        LastDim lv = {"i", "v%d"};
        put_body(b, g, k, fmt, &lv);
        put(b, "        }\n        }\n");
        /* the next row: the odometer's lowest outer dim steps, carrying into the next */
        put(b, "        for (int d = %d; d >= 0; d--) {\n", r - 2);
        put(b, "            for (int j = 0; j < %d; j++)\n                base[j] += st[j * %d + d];\n", nops, r);
        put(b, "            if (++idx[d] < n[d])\n                break;\n");
        put(b, "            for (int j = 0; j < %d; j++)\n", nops);
        put(b, "                base[j] -= st[j * %d + d] * n[d];\n", r);
        put(b, "            idx[d] = 0;\n        }\n    }\n");
    }
    put(b, "done:\n    if (sj_bad)\n        __atomic_store_n(sj_bad_out, 1, __ATOMIC_RELAXED);\n}\n");
    emit_kernel_head(b, g, k);
    put(b, "    int64_t total = 1;\n    for (int d = 0; d < %d; d++)\n        total *= n[d];\n", r);
    put(b, "    if (total == 0)\n        return 0;\n");
    emit_kernel_part_call(b, k, "total");
}

static void put_any_kernel(Buf *b, Graph *g, const Kernel *k)
{
    if (k->flavour != KF_POINTWISE)
        emit_reduce_kernel(b, g, k);
    else
        put_kernel(b, g, k);
}

int emit_name_text(Buf *b, const char *prefix, char *name, size_t len)
{
    if (b->failed) {
        PyMem_Free(b->s);
        PyErr_SetString(PyExc_RuntimeError, "shapejit: could not write a kernel's C source");
        return -1;
    }
    XXH128_hash_t h = XXH3_128bits(b->s, b->n);
    PyMem_Free(b->s);
    snprintf(name, len, "%s%016llx%016llx", prefix, (unsigned long long)h.high64, (unsigned long long)h.low64);
    return 0;
}

int lower_name_kernel(Graph *g, Kernel *k)
{
    Buf b = {NULL, 0, 0, 0};
    snprintf(k->name, sizeof k->name, "SJ_KNAME");
    put_any_kernel(&b, g, k);
    return emit_name_text(&b, "sj_k", k->name, sizeof k->name);
}

int lower_name_kernels(Graph *g, LowerPlan *p)
{
    for (int32_t i = 0; i < p->nkernels; i++)
        if (lower_name_kernel(g, &p->kernels[i]) < 0)
            return -1;
    return 0;
}

/* The unit of kernels which[0..n) of p, or of k alone when p is NULL, then extra (or
 * NULL). */
static PyObject *emit_unit(Graph *g, LowerPlan *p, const int32_t *which, int32_t n, const Kernel *k, PyObject *extra)
{
    Buf b = {NULL, 0, 0, 0};
    put(&b, "%s%s", prelude, emit_math_prelude);
    for (int32_t i = 0; i < n; i++)
        put_any_kernel(&b, g, p ? &p->kernels[which[i]] : k);
    const char *x = extra ? PyUnicode_AsUTF8(extra) : "";
    if (!x)
        b.failed = 1;
    else
        put(&b, "%s", x);
    PyObject *r = NULL;
    if (b.failed)
        PyErr_SetString(PyExc_RuntimeError, "shapejit: could not write a kernel's C source");
    else
        r = PyUnicode_FromStringAndSize(b.s, (Py_ssize_t)b.n);
    PyMem_Free(b.s);
    return r;
}

PyObject *lower_emit(Graph *g, LowerPlan *p, const int32_t *which, int32_t n)
{
    return emit_unit(g, p, which, n, NULL, NULL);
}

PyObject *lower_emit_with(Graph *g, LowerPlan *p, const int32_t *which, int32_t n, PyObject *extra)
{
    return emit_unit(g, p, which, n, NULL, extra);
}

PyObject *lower_emit_kernel(Graph *g, const Kernel *k)
{
    return emit_unit(g, NULL, NULL, 1, k, NULL);
}
