/* C source for the kernels of a plan: one translation unit, one function per kernel.
 *
 * Every kernel has the same C signature, so one libffi call description serves all:
 *   void sj_kN(const int64_t *n, char *const *p, const int64_t *st, int64_t dense)
 * n: the rank sizes of the iteration space; p: the data pointers, outputs first then
 * inputs; st: per operand, rank strides in elements (0 where an input broadcasts); dense:
 * 1 when every operand is contiguous over the whole space (one flat loop). Sizes are run-
 * time arguments: one compiled kernel serves every size.
 *
 * Memory: builds a PyUnicode (new reference) through a growing char buffer (PyMem). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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

/* Helpers the expressions of lower.def use; NaN behaves as in torch and numpy. */
static const char prelude[] =
    "#include <math.h>\n"
    "#include <stdint.h>\n"
    "#define SJ_INF __builtin_inff()\n"
    "static inline float sj_relu(float a) { return (a > 0.f || a != a) ? a : 0.f; }\n"
    "static inline float sj_clamp(float a, float lo, float hi)\n"
    "{ float t = a < lo ? lo : a; return t > hi ? hi : t; }\n"
    "static inline float sj_max(float a, float b) { return (a != a || b != b) ? a + b : (a > b ? a : b); }\n"
    "static inline float sj_min(float a, float b) { return (a != a || b != b) ? a + b : (a < b ? a : b); }\n"
    "static inline float sj_pow(float a, float b) { return b == 2.f ? a * a : powf(a, b); }\n"
    /* glibc's vector math (libmvec, linked by cc.c): declared SIMD-callable, so loops that
     * call them vectorise without -ffast-math */
    "#define SJ_VEC __attribute__((simd(\"notinbranch\"), const, nothrow))\n"
    "SJ_VEC float expf(float); SJ_VEC float exp2f(float); SJ_VEC float expm1f(float);\n"
    "SJ_VEC float logf(float); SJ_VEC float log2f(float); SJ_VEC float log10f(float);\n"
    "SJ_VEC float log1pf(float); SJ_VEC float powf(float, float); SJ_VEC float erff(float);\n"
    "SJ_VEC float sinf(float); SJ_VEC float cosf(float); SJ_VEC float tanf(float);\n"
    "SJ_VEC float asinf(float); SJ_VEC float acosf(float); SJ_VEC float atanf(float);\n"
    "SJ_VEC float atan2f(float, float); SJ_VEC float sinhf(float); SJ_VEC float coshf(float);\n"
    "SJ_VEC float tanhf(float); SJ_VEC float hypotf(float, float);\n";

/* A float literal for a C source (inf and nan spelled out). */
static void put_float(Buf *b, double x)
{
    if (isnan(x))
        put(b, "__builtin_nanf(\"\")");
    else if (isinf(x))
        put(b, x > 0 ? "SJ_INF" : "(-SJ_INF)");
    else
        put(b, "((float)%.17g)", x);   /* rounded to float as eager rounds a Python scalar */
}

/* The C operand for argument x of a node in kernel k: a temporary, an input's element,
 * or a constant. */
static void put_operand(Buf *b, Graph *g, const Kernel *k, const Arg *x)
{
    if (x->kind == ARG_CONST) {
        PyObject *v = PyList_GET_ITEM(g->consts, x->a);   /* borrowed */
        double d = PyFloat_AsDouble(v);
        if (d == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            b->failed = 1;
            return;
        }
        put_float(b, d);
        return;
    }
    emit_value(b, k, x->a);
}

void emit_value(Buf *b, const Kernel *k, int32_t v)
{
    for (int32_t i = 0; i < k->nin; i++)
        if (k->ins[i] == v) {
            put(b, "x%d", (int)i);
            return;
        }
    put(b, "t%d", (int)v);
}

void emit_compute(Buf *b, Graph *g, const Kernel *k, const char *off_fmt, int32_t upto)
{
    for (int32_t i = 0; i < k->nin; i++) {
        put(b, "            const float x%d = in%d[", (int)i, (int)i);
        put(b, off_fmt, (int)(k->nout + i), (int)(k->nout + i));
        put(b, "];\n");
    }
    for (int32_t i = 0; i < upto; i++) {
        int32_t ni = k->nodes[i];
        const Node *nd = &g->nodes[ni];
        const LowerRow *row = lower_row((OpId)nd->op);
        const Arg *x, *y;
        double p[2];
        if (!row || !lower_node_args(g, ni, &x, &y, p)) {
            b->failed = 1;
            return;
        }
        put(b, "            float t%d;\n            { const float a = ", (int)nd->first_value);
        put_operand(b, g, k, x);
        if (y) {
            put(b, ", b = ");
            put_operand(b, g, k, y);
        }
        put(b, ", P0 = ");
        put_float(b, p[0]);
        put(b, ", P1 = ");
        put_float(b, p[1]);
        put(b, "; (void)P0; (void)P1; t%d = %s; }\n", (int)nd->first_value, row->expr);
    }
}

/* The loop body: load each input once, compute every node, store the outputs. */
static void put_body(Buf *b, Graph *g, const Kernel *k, const char *off_fmt)
{
    emit_compute(b, g, k, off_fmt, k->nnodes);
    for (int32_t j = 0; j < k->nout; j++) {
        put(b, "            out%d[", (int)j);
        put(b, off_fmt, (int)j, (int)j);
        put(b, "] = t%d;\n", (int)k->outs[j]);
    }
}

static void put_kernel(Buf *b, Graph *g, const Kernel *k)
{
    int r = k->rank, nops = (int)(k->nin + k->nout);
    put(b, "\nCG_EXPORT void %s(const int64_t *n, char *const *p, const int64_t *st, int64_t dense)\n{\n", k->name);
    for (int32_t j = 0; j < k->nout; j++)
        put(b, "    float *restrict out%d = (float *)p[%d];\n", (int)j, (int)j);
    for (int32_t i = 0; i < k->nin; i++)
        put(b, "    const float *restrict in%d = (const float *)p[%d];\n", (int)i, (int)(k->nout + i));
    put(b, "    (void)st;\n    int64_t total = 1;\n    for (int d = 0; d < %d; d++)\n        total *= n[d];\n", r);
    put(b, "    if (total == 0)\n        return;\n");
    /* dense: one flat loop */
    put(b, "    if (dense || %d <= 1) {\n", r);
    if (r == 1) {
        /* rank 1 with strides: the flat loop over i * stride */
        put(b, "        if (!dense) {\n");
        put(b, "#pragma omp parallel for if (total >= 32768) schedule(static)\n");
        put(b, "        for (int64_t i = 0; i < total; i++) {\n");
        put_body(b, g, k, "i * st[%d]");
        put(b, "        }\n        return;\n        }\n");
    }
    /* blocks of 4096 elements across threads, each a vector loop */
    put(b, "        const int64_t nblk = (total + 4095) / 4096;\n");
    put(b, "#pragma omp parallel for if (total >= 32768) schedule(static)\n");
    put(b, "        for (int64_t blk = 0; blk < nblk; blk++) {\n");
    put(b, "        const int64_t lo = blk * 4096, hi = lo + 4096 < total ? lo + 4096 : total;\n");
    put(b, "#pragma omp simd\n");
    put(b, "        for (int64_t i = lo; i < hi; i++) {\n");
    put_body(b, g, k, "i");
    put(b, "        }\n        }\n        return;\n    }\n");
    if (r >= 2) {
        /* strided: the outer dims by index decomposition, the last dim innermost */
        put(b, "    const int64_t inner = n[%d], outer = total / inner;\n", r - 1);
        put(b, "#pragma omp parallel for if (total >= 32768) schedule(static)\n");
        put(b, "    for (int64_t o = 0; o < outer; o++) {\n");
        put(b, "        int64_t base[%d] = {0}, rem = o;\n", nops);
        put(b, "        for (int d = %d; d >= 0; d--) {\n", r - 2);
        put(b, "            const int64_t idx = rem %% n[d];\n            rem /= n[d];\n");
        put(b, "            for (int j = 0; j < %d; j++)\n                base[j] += idx * st[j * %d + d];\n", nops, r);
        put(b, "        }\n");
        put(b, "        int unit = 1;\n        for (int j = 0; j < %d; j++)\n            unit &= st[j * %d + %d] == 1;\n",
            nops, r, r - 1);
        put(b, "        if (unit) {\n");
        put(b, "#pragma omp simd\n");
        put(b, "        for (int64_t i = 0; i < inner; i++) {\n");
        put_body(b, g, k, "base[%d] + i");
        put(b, "        }\n        } else {\n");
        put(b, "        for (int64_t i = 0; i < inner; i++) {\n");
        char fmt[64];
        snprintf(fmt, sizeof fmt, "base[%%d] + i * st[%%d * %d + %d]", r, r - 1);
        put_body(b, g, k, fmt);
        put(b, "        }\n        }\n    }\n");
    }
    put(b, "}\n");
}

PyObject *lower_emit(Graph *g, LowerPlan *p)
{
    Buf b = {NULL, 0, 0, 0};
    put(&b, "%s", prelude);
    for (int32_t i = 0; i < p->nkernels; i++)
        if (p->kernels[i].flavour != KF_POINTWISE)
            emit_reduce_kernel(&b, g, &p->kernels[i]);
        else
            put_kernel(&b, g, &p->kernels[i]);
    PyObject *r = NULL;
    if (b.failed)
        PyErr_SetString(PyExc_RuntimeError, "shapejit: could not write a kernel's C source");
    else
        r = PyUnicode_FromStringAndSize(b.s, (Py_ssize_t)b.n);
    PyMem_Free(b.s);
    return r;
}
