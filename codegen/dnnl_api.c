/* Every oneDNN call of shapejit (oneDNN 2.6.3, C API; dnnl_api.h says why in one file).
 *
 * Matmul primitives are made with DNNL_RUNTIME_DIM_VAL for every dim and a layout tag per
 * operand (the stride order): measured here, runtime dims cost nothing in speed and make
 * creation 45x cheaper, while runtime *strides* push oneDNN to its reference kernel
 * (docs/notes/issue6_plan.md section 2). At execution the memory objects carry the real
 * sizes and strides, so a padded leading dimension (a column slice) needs no copy.
 *
 * Threads: libdnnl 2.6.3 from Debian is built with DNNL_CPU_RUNTIME=OMP against the
 * system libgomp.so.1; torch bundles a libgomp.so.1 too, and the loader maps only one
 * (same SONAME, whichever came first), so oneDNN, torch and our -fopenmp kernels share one
 * OpenMP pool: torch.set_num_threads(n) sets the calling thread's nthreads-var, which is
 * what oneDNN reads (omp_get_max_threads()). Primitives are keyed by that count.
 *
 * The engine is created once, on first use, and lives for the process; each thread that
 * runs primitives gets its own stream. */
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "dnnl_api.h"

static dnnl_engine_t engine;                 /* process lifetime */
static _Thread_local dnnl_stream_t stream;   /* one per thread that runs primitives (a
                                                stream is not for concurrent use); kept
                                                for the thread's life */

static int ready(char *err, size_t errlen)
{
    dnnl_status_t s;
    if (stream)
        return 0;
    /* the first caller holds the GIL (primcache_get), so the engine is made once */
    if (!engine && (s = dnnl_engine_create(&engine, dnnl_cpu, 0)) != dnnl_success) {
        snprintf(err, errlen, "oneDNN: no CPU engine (status %d)", (int)s);
        engine = NULL;
        return -1;
    }
    if ((s = dnnl_stream_create(&stream, engine, dnnl_stream_default_flags)) != dnnl_success) {
        snprintf(err, errlen, "oneDNN: no stream (status %d)", (int)s);
        stream = NULL;
        return -1;
    }
    return 0;
}

int dnnl_api_threads(void)
{
    return omp_get_max_threads();
}

/* The plain format tags oneDNN 2.6 defines for ranks 2 to 4, by dim order (outermost
 * first). A permutation without a tag is refused (the caller copies the operand). */
static const struct {
    const char *order;
    dnnl_format_tag_t tag;
} tags[] = {
    {"ab", dnnl_ab},     {"ba", dnnl_ba},     {"abc", dnnl_abc},   {"acb", dnnl_acb},
    {"bac", dnnl_bac},   {"bca", dnnl_bca},   {"cba", dnnl_cba},   {"abcd", dnnl_abcd},
    {"abdc", dnnl_abdc}, {"acbd", dnnl_acbd}, {"acdb", dnnl_acdb}, {"adbc", dnnl_adbc},
    {"adcb", dnnl_adcb}, {"bacd", dnnl_bacd}, {"bcda", dnnl_bcda}, {"cdba", dnnl_cdba},
    {"dcab", dnnl_dcab},
};

static dnnl_format_tag_t tag_of(const uint8_t *perm, int rank)
{
    char order[MM_MAX_RANK + 1];
    for (int i = 0; i < rank; i++)
        order[i] = (char)('a' + perm[i]);
    order[rank] = 0;
    for (size_t i = 0; i < sizeof tags / sizeof tags[0]; i++)
        if (!strcmp(tags[i].order, order))
            return tags[i].tag;
    return dnnl_format_tag_undef;
}

static dnnl_format_tag_t plain(int rank)
{
    return rank == 2 ? dnnl_ab : rank == 3 ? dnnl_abc : dnnl_abcd;
}

static dnnl_alg_kind_t eltwise_alg(int kind)
{
    switch (kind) {
    case MMPO_RELU: return dnnl_eltwise_relu;
    case MMPO_GELU_ERF: return dnnl_eltwise_gelu_erf;
    case MMPO_TANH: return dnnl_eltwise_tanh;
    case MMPO_SIGMOID: return dnnl_eltwise_logistic;
    case MMPO_SILU: return dnnl_eltwise_swish;
    case MMPO_LINEAR: return dnnl_eltwise_linear;
    default: return dnnl_alg_kind_undef;
    }
}

/* A [1, N] (rank 2) row: the bias and the MMPO_ADD_ROW operand. */
static void row_dims(int rank, dnnl_dims_t d, int64_t n)
{
    for (int i = 0; i < rank; i++)
        d[i] = 1;
    d[rank - 1] = n;
}

void *dnnl_api_matmul_create(const MmKey *key, char *err, size_t errlen)
{
    int r = key->rank;
    dnnl_memory_desc_t src, wei, dst, bias;
    dnnl_dims_t rt, rowd;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t prim = NULL;
    dnnl_status_t s = dnnl_success;
    const char *what = "";
    if (ready(err, errlen) < 0)
        return NULL;
    if (key->op_class != MM_CLASS_MATMUL || r < 2 || r > MM_MAX_RANK || key->npost > MM_MAX_POST ||
        (key->has_bias && r != 2)) {
        snprintf(err, errlen, "oneDNN matmul: unsupported key");
        return NULL;
    }
    dnnl_format_tag_t ts = tag_of(key->perm[0], r), tw = tag_of(key->perm[1], r);
    if (ts == dnnl_format_tag_undef || tw == dnnl_format_tag_undef) {
        snprintf(err, errlen, "oneDNN matmul: no layout tag for the operands' stride order");
        return NULL;
    }
    /* N is concrete when a row post-op fixes it: with a runtime N as well, oneDNN 2.6.3
     * falls back to ref:any for bias + eltwise + binary row (measured) */
    dnnl_dims_t rtn;
    int64_t n = key->row_n ? key->row_n : DNNL_RUNTIME_DIM_VAL;
    for (int i = 0; i < r; i++)
        rt[i] = rtn[i] = DNNL_RUNTIME_DIM_VAL;
    rtn[r - 1] = n;
    row_dims(r, rowd, n);
#define TRY(call, name) do { what = name; if ((s = (call)) != dnnl_success) goto done; } while (0)
    TRY(dnnl_memory_desc_init_by_tag(&src, r, rt, dnnl_f32, ts), "src");
    TRY(dnnl_memory_desc_init_by_tag(&wei, r, rtn, dnnl_f32, tw), "weights");
    TRY(dnnl_memory_desc_init_by_tag(&dst, r, rtn, dnnl_f32, plain(r)), "dst");
    if (key->has_bias)
        TRY(dnnl_memory_desc_init_by_tag(&bias, r, rowd, dnnl_f32, plain(r)), "bias");
    dnnl_matmul_desc_t md;
    TRY(dnnl_matmul_desc_init(&md, &src, &wei, key->has_bias ? &bias : NULL, &dst), "matmul desc");
    TRY(dnnl_primitive_attr_create(&attr), "attr");
    if (key->npost) {
        TRY(dnnl_post_ops_create(&po), "post-ops");
        for (int i = 0; i < key->npost; i++) {
            const MmPost *p = &key->post[i];
            if (p->kind == MMPO_ADD_ROW) {
                dnnl_memory_desc_t row;
                TRY(dnnl_memory_desc_init_by_tag(&row, r, rowd, dnnl_f32, plain(r)), "row");
                TRY(dnnl_post_ops_append_binary(po, dnnl_binary_add, &row), "binary post-op");
            } else {
                float alpha = p->kind == MMPO_LINEAR || p->kind == MMPO_SILU ? p->alpha : 0.f;
                TRY(dnnl_post_ops_append_eltwise(po, 1.f, eltwise_alg(p->kind), alpha, p->beta),
                    "eltwise post-op");
            }
        }
        TRY(dnnl_primitive_attr_set_post_ops(attr, po), "set post-ops");
    }
    TRY(dnnl_primitive_desc_create(&pd, &md, attr, engine, NULL), "primitive desc");
    TRY(dnnl_primitive_create(&prim, pd), "primitive");
#undef TRY
done:
    if (s != dnnl_success) {
        snprintf(err, errlen, "oneDNN matmul: %s refused (status %d)", what, (int)s);
        prim = NULL;
    }
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (po)
        dnnl_post_ops_destroy(po);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    return prim;
}

/* A concrete memory object over t's data with its real sizes and strides. */
static dnnl_status_t wrap(int r, const MmTensor *t, dnnl_memory_t *m)
{
    dnnl_memory_desc_t d;
    dnnl_dims_t dims, strides;
    for (int i = 0; i < r; i++) {
        dims[i] = t->dims[i];
        strides[i] = t->strides[i];
    }
    dnnl_status_t s = dnnl_memory_desc_init_by_strides(&d, r, dims, dnnl_f32, strides);
    if (s != dnnl_success)
        return s;
    return dnnl_memory_create(m, &d, engine, t->data);
}

int dnnl_api_matmul_exec(void *prim, const MmKey *key, const MmTensor *src, const MmTensor *wei,
                         const MmTensor *bias, const MmTensor *dst, const MmTensor *post)
{
    int r = key->rank, n = 0;
    char err[96];
    if (ready(err, sizeof err) < 0)
        return (int)dnnl_runtime_error;
    dnnl_exec_arg_t args[4 + MM_MAX_POST];
    dnnl_memory_t mems[4 + MM_MAX_POST];
    dnnl_status_t s = dnnl_success;
    const MmTensor *ts[3] = {src, wei, dst};
    const int ids[3] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST};
    for (int i = 0; i < 3 && s == dnnl_success; i++)
        if ((s = wrap(r, ts[i], &mems[n])) == dnnl_success) {
            args[n].arg = ids[i];
            args[n].memory = mems[n];
            n++;
        }
    if (s == dnnl_success && key->has_bias && (s = wrap(r, bias, &mems[n])) == dnnl_success) {
        args[n].arg = DNNL_ARG_BIAS;
        args[n].memory = mems[n];
        n++;
    }
    for (int i = 0; i < key->npost && s == dnnl_success; i++)
        if (key->post[i].kind == MMPO_ADD_ROW && (s = wrap(r, &post[i], &mems[n])) == dnnl_success) {
            args[n].arg = DNNL_ARG_ATTR_MULTIPLE_POST_OP(i) | DNNL_ARG_SRC_1;
            args[n].memory = mems[n];
            n++;
        }
    if (s == dnnl_success)
        s = dnnl_primitive_execute((const_dnnl_primitive_t)prim, stream, n, args);
    if (s == dnnl_success)
        s = dnnl_stream_wait(stream);
    for (int i = 0; i < n; i++)
        dnnl_memory_destroy(mems[i]);
    return (int)s;
}

const char *dnnl_api_impl(void *prim)
{
    const_dnnl_primitive_desc_t pd = NULL;
    const char *impl = NULL;
    if (!prim || dnnl_primitive_get_primitive_desc((const_dnnl_primitive_t)prim, &pd) != dnnl_success ||
        dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl)
        return "?";
    return impl;
}

void dnnl_api_destroy(void *prim)
{
    if (prim)
        dnnl_primitive_destroy((dnnl_primitive_t)prim);
}
