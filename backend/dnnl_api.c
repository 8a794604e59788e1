/* Every oneDNN call of shapejit (oneDNN 2.6.3, C API; dnnl_api.h says why in one file).
 *
 * Matmul primitives are made with DNNL_RUNTIME_DIM_VAL for every dim and a layout tag per
 * operand (the stride order): measured here, runtime dims cost nothing in speed and make
 * creation 45x cheaper, while runtime *strides* push oneDNN to its reference kernel
 * (docs/internals/backend_measurements.md, section 2). At execution the memory objects carry the real
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
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>
#include <xxhash.h>

#include "dnnl_api.h"

static dnnl_engine_t engine;                 /* process lifetime */
static _Thread_local dnnl_stream_t stream;   /* one per thread that runs primitives (a
                                                stream is not for concurrent use); kept
                                                for the thread's life */

/* Drops what making a primitive needed (each may be NULL). */
static void drop_makings(dnnl_primitive_desc_t pd, dnnl_post_ops_t po, dnnl_primitive_attr_t attr)
{
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (po)
        dnnl_post_ops_destroy(po);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
}

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

/* The implementation a primitive desc chose ("jit:avx2"); a static string of the library. */
static const char *pd_impl(const_dnnl_primitive_desc_t pd)
{
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl)
        return "?";
    return impl;
}

/* oneDNN 2.6 names its reference implementations "ref:any" (every primitive kind) and
 * its plain C loops "simple:any" (reorders), "simple_nchw:any" / "simple_nhwc:any"
 * (pooling): correct for every case and 5-20x slower than a jit kernel, so shapejit never
 * runs them (the caller drops post-ops, changes layouts, or lets the op run eagerly). */
static int dnnl_api_is_ref(const char *impl)
{
    return !strncmp(impl, "ref", 3) || !strncmp(impl, "simple", 6);
}

int dnnl_api_threads(void)
{
    return omp_get_max_threads();
}

int dnnl_api_avx512(void)
{
    /* every AVX-512 level's value holds avx512_core's bits (or the Xeon Phi's, mic's);
     * avx2_vnni's holds avx2's only */
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    return (isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core ||
           (isa & dnnl_cpu_isa_avx512_mic) == dnnl_cpu_isa_avx512_mic;
}

/* The plain format tags oneDNN 2.6 defines for ranks 2 to 4, by dim order (outermost
 * first). A permutation without a tag is refused (the caller copies the operand). */
static const struct {
    const char *order;
    dnnl_format_tag_t tag;
} tags[] = {
    {"ab", dnnl_ab},     {"ba", dnnl_ba},     {"abc", dnnl_abc},   {"acb", dnnl_acb},   {"bac", dnnl_bac},
    {"bca", dnnl_bca},   {"cba", dnnl_cba},   {"abcd", dnnl_abcd}, {"abdc", dnnl_abdc}, {"acbd", dnnl_acbd},
    {"acdb", dnnl_acdb}, {"adbc", dnnl_adbc}, {"adcb", dnnl_adcb}, {"bacd", dnnl_bacd}, {"bcda", dnnl_bcda},
    {"cdba", dnnl_cdba}, {"dcab", dnnl_dcab},
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

int dnnl_api_has_tag(const uint8_t *perm, int r)
{
    return tag_of(perm, r) != dnnl_format_tag_undef;
}

static dnnl_format_tag_t plain(int rank)
{
    return rank == 2 ? dnnl_ab : rank == 3 ? dnnl_abc : dnnl_abcd;
}

static dnnl_alg_kind_t eltwise_alg(int kind)
{
    switch (kind) {
    case MMPO_RELU:
        return dnnl_eltwise_relu;
    case MMPO_GELU_ERF:
        return dnnl_eltwise_gelu_erf;
    case MMPO_GELU_TANH:
        return dnnl_eltwise_gelu_tanh;
    case MMPO_TANH:
        return dnnl_eltwise_tanh;
    case MMPO_SIGMOID:
        return dnnl_eltwise_logistic;
    case MMPO_SILU:
        return dnnl_eltwise_swish;
    case MMPO_LINEAR:
        return dnnl_eltwise_linear;
    default:
        return dnnl_alg_kind_undef;
    }
}

/* A [1, N] (rank 2) row: the bias and the MMPO_ADD_ROW operand. */
static void row_dims(int rank, dnnl_dims_t d, int64_t n)
{
    for (int i = 0; i < rank; i++)
        d[i] = 1;
    d[rank - 1] = n;
}

void *dnnl_api_matmul_create(const MmKey *key, int *ref_avoided, char *err, size_t errlen)
{
    int r = key->rank;
    dnnl_memory_desc_t src, wei, dst, bias;
    dnnl_dims_t rt, rowd;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t prim = NULL;
    dnnl_status_t s = dnnl_success;
    const char *what = "", *ref = NULL;
    *ref_avoided = 0;
    err[0] = 0;
    if (ready(err, errlen) < 0)
        return NULL;
    if (key->op_class != MM_CLASS_MATMUL || r < 2 || r > MM_MAX_RANK || key->npost > MM_MAX_POST ||
        (key->has_bias && r != 2)) {
        snprintf(err, errlen, "oneDNN matmul: unsupported key");
        return NULL;
    }
    dnnl_format_tag_t ts = tag_of(key->perm[0], r), tw = tag_of(key->perm[1], r);
    dnnl_format_tag_t td = key->has_dperm ? tag_of(key->dperm, r) : plain(r);
    if (ts == dnnl_format_tag_undef || tw == dnnl_format_tag_undef || td == dnnl_format_tag_undef) {
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
#define TRY(call, name) \
    do { \
        what = name; \
        if ((s = (call)) != dnnl_success) \
            goto done; \
    } while (0)
    TRY(dnnl_memory_desc_init_by_tag(&src, r, rt, dnnl_f32, ts), "src");
    TRY(dnnl_memory_desc_init_by_tag(&wei, r, rtn, dnnl_f32, tw), "weights");
    TRY(dnnl_memory_desc_init_by_tag(&dst, r, rtn, dnnl_f32, td), "dst");
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
                TRY(dnnl_post_ops_append_eltwise(po, 1.f, eltwise_alg(p->kind), alpha, p->beta), "eltwise post-op");
            }
        }
        TRY(dnnl_primitive_attr_set_post_ops(attr, po), "set post-ops");
    }
    TRY(dnnl_primitive_desc_create(&pd, &md, attr, engine, NULL), "primitive desc");
    /* a reference matmul is refused: the step's nodes run eagerly (torch's own kernels) */
    if (dnnl_api_is_ref(ref = pd_impl(pd))) {
        s = dnnl_unimplemented;
        goto done;
    }
    ref = NULL;
    TRY(dnnl_primitive_create(&prim, pd), "primitive");
#undef TRY
done:
    *ref_avoided = ref != NULL;
    if (ref) {
        snprintf(err, errlen, "oneDNN matmul (rank %d, %d post-ops): refused, only a reference implementation (%s)", r,
                 key->npost, ref);
        prim = NULL;
    } else if (s != dnnl_success) {
        snprintf(err, errlen, "oneDNN matmul: %s refused (status %d)", what, (int)s);
        prim = NULL;
    }
    drop_makings(pd, po, attr);
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

int dnnl_api_matmul_exec(void *prim, const MmKey *key, const MmTensor *src, const MmTensor *wei, const MmTensor *bias,
                         const MmTensor *dst, const MmTensor *post)
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
    if (!prim || dnnl_primitive_get_primitive_desc((const_dnnl_primitive_t)prim, &pd) != dnnl_success)
        return "?";
    return pd_impl(pd);
}

void dnnl_api_destroy(void *prim)
{
    if (prim)
        dnnl_primitive_destroy((dnnl_primitive_t)prim);
}

/* ---------------------------------------- convolution, pooling, batch norm ---- */

/* The primitives of one CvKey: the main one, and the reorders between the caller's plain
 * layout and the layouts the main one chose (NULL when it chose plain). */
typedef struct {
    dnnl_primitive_t main;
    dnnl_primitive_t src_in;     /* plain source -> main's source layout */
    dnnl_primitive_t wei_in;     /* plain weights -> main's weights layout */
    dnnl_primitive_t sum_in;     /* plain residual -> main's result layout (CVPO_SUM) */
    dnnl_primitive_t dst_out;    /* main's result layout -> plain */
    dnnl_memory_desc_t src, wei, dst;      /* main's layouts */
    dnnl_memory_desc_t psrc, pwei, pdst;   /* the plain ones */
    dnnl_memory_desc_t chan, vec;          /* a [1, C, 1(, 1)] post-op operand; a [C] vector */
    int nfused;                            /* the key's first nfused post-ops are the main
                                              primitive's; the rest run after it */
    int npost;                             /* the key's post-op count */
} CvOp;

/* Per-thread scratch for the reordered operands: grown on demand, kept for the thread's
 * life (like the stream). */
static _Thread_local struct {
    char *p;
    size_t cap;
} scratch;

static char *scratch_get(size_t need)
{
    if (need <= scratch.cap)
        return scratch.p;
    free(scratch.p);
    size_t cap = (need + 4095) & ~(size_t)4095;
    scratch.p = aligned_alloc(64, cap);
    scratch.cap = scratch.p ? cap : 0;
    return scratch.p;
}

static size_t up64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

/* Plain row-major desc of rank r. */
static dnnl_status_t plain_desc(dnnl_memory_desc_t *d, int r, const int64_t *dims)
{
    static const dnnl_format_tag_t by_rank[] = {
        dnnl_format_tag_undef, dnnl_a, dnnl_ab, dnnl_abc, dnnl_abcd, dnnl_abcde};
    dnnl_dims_t dd;
    for (int i = 0; i < r; i++)
        dd[i] = dims[i];
    return dnnl_memory_desc_init_by_tag(d, r, dd, dnnl_f32, by_rank[r]);
}

/* The caller's desc of rank r (an activation, or weights with grouped = 0 / 1): plain,
 * or channels-last when cl: NWC, NHWC; OHWI weights, GOHWI grouped. */
static dnnl_status_t cl_desc(dnnl_memory_desc_t *d, int r, const int64_t *dims, int cl, int weights)
{
    if (!cl)
        return plain_desc(d, r, dims);
    dnnl_format_tag_t tag = r == 3 && !weights  ? dnnl_acb
                            : r == 4            ? dnnl_acdb
                            : r == 5 && weights ? dnnl_abdec
                                                : dnnl_format_tag_undef;
    if (tag == dnnl_format_tag_undef)
        return dnnl_invalid_arguments;
    dnnl_dims_t dd;
    for (int i = 0; i < r; i++)
        dd[i] = dims[i];
    return dnnl_memory_desc_init_by_tag(d, r, dd, dnnl_f32, tag);
}

/* A reorder from *from to *to, or NULL when they are the same layout. dnnl_unimplemented
 * (and its name in *ref) when oneDNN has only a reference reorder for the pair. */
static dnnl_status_t reorder(dnnl_primitive_t *out, const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to,
                             const char **ref)
{
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t s;
    *out = NULL;
    if (dnnl_memory_desc_equal(from, to))
        return dnnl_success;
    if ((s = dnnl_reorder_primitive_desc_create(&pd, from, engine, to, engine, NULL)) != dnnl_success)
        return s;
    if (dnnl_api_is_ref(pd_impl(pd))) {
        *ref = pd_impl(pd);
        s = dnnl_unimplemented;
    } else {
        s = dnnl_primitive_create(out, pd);
    }
    dnnl_primitive_desc_destroy(pd);
    return s;
}

/* "mb8_ic16oc16_ih16oh16kh3_iw16ow16kw3" (oneDNN's verbose style) of key, into buf. */
static const char *shape_of(const CvKey *key, char *buf, size_t len)
{
    int at = snprintf(buf, len, "mb%lld_ic%lldoc%lld", (long long)key->n, (long long)key->c,
                      (long long)(key->op_class == CV_CLASS_CONV ? key->oc : key->c));
    if (key->groups > 1 && at > 0 && (size_t)at < len)
        at += snprintf(buf + at, len - at, "g%lld", (long long)key->groups);
    for (int i = 0; i < key->sp && at > 0 && (size_t)at < len; i++)
        at += snprintf(buf + at, len - at, "_i%c%lldo%c%lldk%c%lld", "hw"[i], (long long)key->in[i], "hw"[i],
                       (long long)key->out[i], "hw"[i], (long long)key->k[i]);
    return buf;
}

void dnnl_api_conv_destroy(void *op)
{
    CvOp *o = op;
    if (!o)
        return;
    dnnl_primitive_t ps[5] = {o->main, o->src_in, o->wei_in, o->sum_in, o->dst_out};
    for (int i = 0; i < 5; i++)
        if (ps[i])
            dnnl_primitive_destroy(ps[i]);
    free(o);
}

/* The post-op list of a convolution: the first n of key's, the binary ones reading chan. */
static dnnl_status_t conv_attr(const CvKey *key, int n, const dnnl_memory_desc_t *chan, dnnl_primitive_attr_t *attr,
                               dnnl_post_ops_t *po)
{
    dnnl_status_t s;
    *po = NULL;
    if ((s = dnnl_primitive_attr_create(attr)) != dnnl_success || !n)
        return s;
    if ((s = dnnl_post_ops_create(po)) != dnnl_success)
        return s;
    for (int i = 0; i < n && s == dnnl_success; i++) {
        switch (key->post[i]) {
        case CVPO_RELU:
            s = dnnl_post_ops_append_eltwise(*po, 1.f, dnnl_eltwise_relu, 0.f, 0.f);
            break;
        case CVPO_RELU6:
            s = dnnl_post_ops_append_eltwise(*po, 1.f, dnnl_eltwise_clip, 0.f, 6.f);
            break;
        case CVPO_SUM:
            s = dnnl_post_ops_append_sum(*po, 1.f);
            break;
        case CVPO_MUL_C:
        case CVPO_ADD_C:
            s = dnnl_post_ops_append_binary(*po, key->post[i] == CVPO_MUL_C ? dnnl_binary_mul : dnnl_binary_add, chan);
            break;
        default:
            s = dnnl_invalid_arguments;
        }
    }
    return s == dnnl_success ? dnnl_primitive_attr_set_post_ops(*attr, *po) : s;
}

/* A primitive desc for op desc under attr (NULL: none) that is not a reference
 * implementation: dnnl_success and *pd, or dnnl_unimplemented with *pd NULL and the
 * reference implementation's name in *ref (when oneDNN had one). */
static dnnl_status_t fast_pd(dnnl_primitive_desc_t *pd, const void *desc, const_dnnl_primitive_attr_t attr,
                             const char **ref)
{
    dnnl_status_t s = dnnl_primitive_desc_create(pd, desc, attr, engine, NULL);
    if (s != dnnl_success) {
        *pd = NULL;
        return s;
    }
    const char *impl = pd_impl(*pd);
    if (!dnnl_api_is_ref(impl))
        return dnnl_success;
    *ref = impl;   /* a static string of the library */
    dnnl_primitive_desc_destroy(*pd);
    *pd = NULL;
    return dnnl_unimplemented;
}

static const char *const post_names[] = {"?", "relu", "sum", "mul", "add", "relu6"};

/* "sum+relu": the names of key's post-ops from..npost into buf. */
static const char *post_list(const CvKey *key, int from, char *buf, size_t len)
{
    buf[0] = 0;
    for (int i = from; i < key->npost; i++) {
        size_t at = strlen(buf);
        int k = key->post[i] <= CVPO_RELU6 ? key->post[i] : 0;
        snprintf(buf + at, len - at, "%s%s", i > from ? "+" : "", post_names[k]);
    }
    return buf;
}

/* The pooling's primitive desc when its plain-layout one is a reference implementation:
 * the source in a blocked layout oneDNN has a jit kernel for (16 channels for AVX-512, 8
 * for AVX2), and in channels-last, through reorders. */
static dnnl_status_t pool_pd(dnnl_primitive_desc_t *pd, dnnl_pooling_v2_desc_t *desc, CvOp *o, dnnl_alg_kind_t alg,
                             const CvKey *key, dnnl_dims_t strides, dnnl_dims_t kern, dnnl_dims_t dil, dnnl_dims_t pl,
                             dnnl_dims_t pr, const char **ref)
{
    static const dnnl_format_tag_t by_sp[2][3] = {{dnnl_nCw16c, dnnl_nCw8c, dnnl_nwc},
                                                  {dnnl_nChw16c, dnnl_nChw8c, dnnl_nhwc}};
    dnnl_status_t s = dnnl_pooling_v2_forward_desc_init(desc, dnnl_forward_inference, alg, &o->psrc, &o->pdst, strides,
                                                        kern, dil, pl, pr);
    if (s != dnnl_success || (s = fast_pd(pd, desc, NULL, ref)) != dnnl_unimplemented)
        return s;
    int r = key->sp + 2;
    for (int i = 0; i < 3; i++) {
        dnnl_memory_desc_t src, dst;
        if (dnnl_memory_desc_init_by_tag(&src, r, o->psrc.dims, dnnl_f32, by_sp[key->sp - 1][i]) != dnnl_success ||
            dnnl_memory_desc_init_by_tag(&dst, r, o->pdst.dims, dnnl_f32, dnnl_format_tag_any) != dnnl_success ||
            dnnl_pooling_v2_forward_desc_init(desc, dnnl_forward_inference, alg, &src, &dst, strides, kern, dil, pl,
                                              pr) != dnnl_success)
            continue;
        if ((s = fast_pd(pd, desc, NULL, ref)) != dnnl_unimplemented)
            return s;
    }
    return dnnl_unimplemented;
}

void *dnnl_api_conv_create(const CvKey *key, int *ref_avoided, char *err, size_t errlen)
{
    int sp = key->sp, r = sp + 2, any = key->op_class == CV_CLASS_CONV;
    dnnl_memory_desc_t src, wei, dst, bias;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t s = dnnl_success;
    const char *what = "", *ref = NULL;
    char posts[64];
    CvOp *o;
    *ref_avoided = 0;
    err[0] = 0;
    if (ready(err, errlen) < 0)
        return NULL;
    if (sp < 1 || sp > 2 || key->npost > CV_MAX_POST || key->op_class < CV_CLASS_CONV ||
        key->op_class > CV_CLASS_BNORM || !(o = calloc(1, sizeof *o))) {
        snprintf(err, errlen, "oneDNN conv: unsupported key (or out of memory)");
        return NULL;
    }
    int64_t sd[5] = {key->n, key->c}, dd[5] = {key->n, key->op_class == CV_CLASS_CONV ? key->oc : key->c};
    int64_t wd[6], cd[5] = {1, dd[1]};
    dnnl_dims_t strides, dil, pl, pr, kern;
    for (int i = 0; i < sp; i++) {
        sd[2 + i] = key->in[i];
        dd[2 + i] = key->out[i];
        cd[2 + i] = 1;
        strides[i] = key->stride[i];
        dil[i] = key->dil[i] - 1;   /* oneDNN: 0 is no dilation */
        pl[i] = key->pad_l[i];
        pr[i] = key->pad_r[i];
        kern[i] = key->k[i];
    }
    /* weights: [OC, C/G, k...], or [G, OC/G, C/G, k...] grouped (the same bytes) */
    int wr = r, g = key->groups > 1;
    if (g) {
        wd[0] = key->groups;
        wd[1] = key->oc / key->groups;
        wd[2] = key->c / key->groups;
        wr++;
    } else {
        wd[0] = key->oc;
        wd[1] = key->c;
    }
    for (int i = 0; i < sp; i++)
        wd[wr - sp + i] = key->k[i];
#define TRY(call, name) \
    do { \
        what = name; \
        if ((s = (call)) != dnnl_success) \
            goto done; \
    } while (0)
    TRY(cl_desc(&o->psrc, r, sd, key->src_cl, 0), "src");
    TRY(cl_desc(&o->pdst, r, dd, key->dst_cl, 0), "dst");
    TRY(plain_desc(&o->chan, r, cd), "channel operand");
    TRY(plain_desc(&o->vec, 1, &dd[1]), "vector");
    src = o->psrc;
    dst = o->pdst;
    if (key->op_class == CV_CLASS_CONV) {
        dnnl_dims_t wdd;
        for (int i = 0; i < wr; i++)
            wdd[i] = wd[i];
        TRY(cl_desc(&o->pwei, wr, wd, key->wei_cl, 1), "plain weights");
        /* oneDNN picks the layouts: its blocked kernels beat the plain-layout path */
        TRY(dnnl_memory_desc_init_by_tag(&src, r, o->psrc.dims, dnnl_f32, dnnl_format_tag_any), "src any");
        TRY(dnnl_memory_desc_init_by_tag(&dst, r, o->pdst.dims, dnnl_f32, dnnl_format_tag_any), "dst any");
        TRY(dnnl_memory_desc_init_by_tag(&wei, wr, wdd, dnnl_f32, dnnl_format_tag_any), "weights any");
        if (key->has_bias)
            TRY(plain_desc(&bias, 1, &key->oc), "bias");
        dnnl_convolution_desc_t desc;
        TRY(dnnl_dilated_convolution_forward_desc_init(&desc, dnnl_forward_inference, dnnl_convolution_direct, &src,
                                                       &wei, key->has_bias ? &bias : NULL, &dst, strides, dil, pl, pr),
            "convolution desc");
        /* The longest prefix of the post-ops that oneDNN has a jit kernel for: oneDNN 2.6
         * on AVX2 has only ref:any for some lists (per-channel mul + add + sum + relu of
         * ResNet's basic block), 10x slower than the jit kernel plus one pass applying
         * the rest (dnnl_api_conv_exec). A post-op list oneDNN refuses is cut the same way. */
        s = dnnl_unimplemented;
        for (int n = key->npost; n >= 0 && s != dnnl_success; n--) {
            drop_makings(NULL, po, attr);
            po = NULL;
            attr = NULL;
            TRY(conv_attr(key, n, &o->chan, &attr, &po), "post-ops");
            s = fast_pd(&pd, &desc, attr, &ref);
            o->nfused = n;
        }
        o->npost = key->npost;
        what = "convolution";
        if (s != dnnl_success)
            goto done;
        if (o->nfused < key->npost) {
            *ref_avoided = ref != NULL;
            snprintf(err, errlen, "oneDNN convolution %s: post-ops %s run after the primitive (%s with them)",
                     shape_of(key, posts, sizeof posts), post_list(key, o->nfused, (char[40]){0}, 40),
                     ref ? ref : "refused");
        }
    } else if (key->op_class == CV_CLASS_POOL) {
        dnnl_alg_kind_t alg = key->alg == CV_POOL_MAX           ? dnnl_pooling_max
                              : key->alg == CV_POOL_AVG_INCLUDE ? dnnl_pooling_avg_include_padding
                                                                : dnnl_pooling_avg_exclude_padding;
        dnnl_pooling_v2_desc_t desc;
        what = "pooling";
        if ((s = pool_pd(&pd, &desc, o, alg, key, strides, kern, dil, pl, pr, &ref)) != dnnl_success)
            goto done;
    } else {
        unsigned flags = dnnl_use_global_stats | (key->alg & CV_BN_SCALE ? dnnl_use_scale : 0) |
                         (key->alg & CV_BN_SHIFT ? dnnl_use_shift : 0) |
                         (key->alg & CV_BN_RELU ? dnnl_fuse_norm_relu : 0);
        dnnl_batch_normalization_desc_t desc;
        TRY(dnnl_batch_normalization_forward_desc_init(&desc, dnnl_forward_inference, &src, key->eps, flags),
            "batch norm desc");
        what = "batch norm";
        if ((s = fast_pd(&pd, &desc, NULL, &ref)) != dnnl_success)
            goto done;
    }
    o->src = *dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
    o->dst = *dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
    TRY(dnnl_primitive_create(&o->main, pd), "primitive");
    TRY(reorder(&o->src_in, &o->psrc, &o->src, &ref), "source reorder");
    TRY(reorder(&o->dst_out, &o->dst, &o->pdst, &ref), "result reorder");
    if (any) {
        o->wei = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        TRY(reorder(&o->wei_in, &o->pwei, &o->wei, &ref), "weights reorder");
        for (int i = 0; i < o->nfused; i++)
            if (key->post[i] == CVPO_SUM)
                TRY(reorder(&o->sum_in, &o->pdst, &o->dst, &ref), "residual reorder");
    }
#undef TRY
done:
    drop_makings(pd, po, attr);
    if (s != dnnl_success) {
        if (s == dnnl_unimplemented && ref) {
            *ref_avoided = 1;
            snprintf(err, errlen, "oneDNN %s %s: refused, only a reference implementation (%s)", what,
                     shape_of(key, posts, sizeof posts), ref);
        } else {
            snprintf(err, errlen, "oneDNN conv/pool/bnorm: %s refused (status %d)", what, (int)s);
        }
        dnnl_api_conv_destroy(o);
        return NULL;
    }
    return o;
}

int dnnl_api_conv_nfused(void *op)
{
    return ((CvOp *)op)->nfused;
}

const char *dnnl_api_conv_impl(void *op)
{
    return op ? dnnl_api_impl(((CvOp *)op)->main) : "?";
}

/* Runs reorder p from (from, pf) to (to, pt). */
static dnnl_status_t run_reorder(dnnl_primitive_t p, const dnnl_memory_desc_t *from, const void *pf,
                                 const dnnl_memory_desc_t *to, void *pt)
{
    dnnl_memory_t a = NULL, b = NULL;
    dnnl_status_t s = dnnl_memory_create(&a, from, engine, (void *)pf);
    if (s == dnnl_success)
        s = dnnl_memory_create(&b, to, engine, pt);
    if (s == dnnl_success) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, a}, {DNNL_ARG_TO, b}};
        s = dnnl_primitive_execute(p, stream, 2, args);
    }
    if (a)
        dnnl_memory_destroy(a);
    if (b)
        dnnl_memory_destroy(b);
    return s;
}

/* One post-op over len floats at p: the per-channel operand chan read at chan[j * cstep]
 * (cstep 0: one channel's value, 1: a pixel's channels in a row), the residual at res.
 * Inlined with a constant cstep, so each loop vectorises. */
static inline __attribute__((always_inline)) void post_one(int kind, float *p, int64_t len, const float *chan,
                                                           int64_t cstep, const float *res)
{
    switch (kind) {
    case CVPO_MUL_C:
        for (int64_t j = 0; j < len; j++)
            p[j] *= chan[j * cstep];
        break;
    case CVPO_ADD_C:
        for (int64_t j = 0; j < len; j++)
            p[j] += chan[j * cstep];
        break;
    case CVPO_SUM:
        for (int64_t j = 0; j < len; j++)
            p[j] += res[j];
        break;
    case CVPO_RELU:   /* as oneDNN's: x < 0 ? 0 : x keeps NaN and -0 */
        for (int64_t j = 0; j < len; j++)
            p[j] = p[j] < 0.f ? 0.f : p[j];
        break;
    case CVPO_RELU6:
        for (int64_t j = 0; j < len; j++)
            p[j] = p[j] < 0.f ? 0.f : p[j] > 6.f ? 6.f : p[j];
        break;
    }
}

/* The post-ops from..npost of key on the plain result dst, in order, as the primitive
 * would have applied them: the list over each [N, C] plane (row-major) or each pixel's
 * channels (channels-last), which stay in cache while the list runs. The loops need the
 * vectoriser's "cheap" cost model (-O2's "very cheap" one leaves a loop with a remainder
 * scalar). */
__attribute__((noinline, optimize("tree-vectorize", "vect-cost-model=cheap"))) static void post_after(const CvKey *key,
                                                                                                      int from,
                                                                                                      const CvArgs *a,
                                                                                                      float *dst)
{
    int64_t plane = 1, oc = key->oc;
    for (int i = 0; i < key->sp; i++)
        plane *= key->out[i];
    const float *res = a->residual;
    if (key->dst_cl) {
        for (int64_t px = 0; px < key->n * plane; px++)
            for (int i = from; i < key->npost; i++)
                post_one(key->post[i], dst + px * oc, oc, a->chan[i], 1, res ? res + px * oc : NULL);
        return;
    }
    for (int64_t n = 0; n < key->n; n++)
        for (int64_t c = 0; c < oc; c++) {
            int64_t at = (n * oc + c) * plane;
            for (int i = from; i < key->npost; i++) {
                const float *ch = a->chan[i];
                post_one(key->post[i], dst + at, plane, ch ? ch + c : NULL, 0, res ? res + at : NULL);
            }
        }
}

int dnnl_api_conv_exec(void *op, const CvKey *key, const CvArgs *a)
{
    CvOp *o = op;
    char err[96];
    if (ready(err, sizeof err) < 0)
        return (int)dnnl_runtime_error;
    if ((a->src_ready && !o->src_in) || (a->dst_keep && (!o->dst_out || o->nfused < key->npost)))
        return (int)dnnl_invalid_arguments;
    /* the scratch: reordered source, weights and result, each 64-byte aligned */
    size_t ns = o->src_in && !a->src_ready ? up64(dnnl_memory_desc_get_size(&o->src)) : 0;
    size_t nw = o->wei_in && !a->wei_ready ? up64(dnnl_memory_desc_get_size(&o->wei)) : 0;
    size_t nd = o->dst_out && !a->dst_keep ? up64(dnnl_memory_desc_get_size(&o->dst)) : 0;
    char *base = ns + nw + nd ? scratch_get(ns + nw + nd) : NULL;
    if (ns + nw + nd && !base)
        return (int)dnnl_out_of_memory;
    const void *src = a->src, *wei = a->wei;
    void *dst = a->dst_keep ? a->dst_keep : o->dst_out ? base + ns + nw : a->dst;
    dnnl_status_t s = dnnl_success;
    if (a->src_ready)
        src = a->src_ready;
    else if (o->src_in)
        s = run_reorder(o->src_in, &o->psrc, a->src, &o->src, (void *)(src = base));
    if (a->wei_ready)
        wei = a->wei_ready;
    else if (s == dnnl_success && o->wei_in)
        s = run_reorder(o->wei_in, &o->pwei, a->wei, &o->wei, (void *)(wei = base + ns));
    int sum_fused = 0;
    for (int i = 0; i < o->nfused; i++)
        sum_fused |= key->post[i] == CVPO_SUM;
    if (s == dnnl_success && a->residual && sum_fused) {   /* the sum post-op accumulates onto dst */
        if (o->sum_in)
            s = run_reorder(o->sum_in, &o->pdst, a->residual, &o->dst, dst);
        else
            memcpy(dst, a->residual, dnnl_memory_desc_get_size(&o->pdst));
    }
    dnnl_exec_arg_t args[8 + CV_MAX_POST];
    dnnl_memory_t mems[8 + CV_MAX_POST];
    int n = 0;
#define ARG(id, desc, ptr) \
    do { \
        if (s == dnnl_success && (s = dnnl_memory_create(&mems[n], desc, engine, (void *)(ptr))) == dnnl_success) { \
            args[n].arg = (id); \
            args[n].memory = mems[n]; \
            n++; \
        } \
    } while (0)
    ARG(DNNL_ARG_SRC, &o->src, src);
    ARG(DNNL_ARG_DST, &o->dst, dst);
    if (key->op_class == CV_CLASS_CONV) {
        ARG(DNNL_ARG_WEIGHTS, &o->wei, wei);
        if (key->has_bias)
            ARG(DNNL_ARG_BIAS, &o->vec, a->bias);
        for (int i = 0; i < key->npost; i++)
            if (i < o->nfused && (key->post[i] == CVPO_MUL_C || key->post[i] == CVPO_ADD_C))
                ARG(DNNL_ARG_ATTR_MULTIPLE_POST_OP(i) | DNNL_ARG_SRC_1, &o->chan, a->chan[i]);
    } else if (key->op_class == CV_CLASS_BNORM) {
        ARG(DNNL_ARG_MEAN, &o->vec, a->mean);
        ARG(DNNL_ARG_VARIANCE, &o->vec, a->var);
        if (key->alg & CV_BN_SCALE)
            ARG(DNNL_ARG_SCALE, &o->vec, a->scale);
        if (key->alg & CV_BN_SHIFT)
            ARG(DNNL_ARG_SHIFT, &o->vec, a->shift);
    }
#undef ARG
    if (s == dnnl_success)
        s = dnnl_primitive_execute(o->main, stream, n, args);
    /* the CPU runtime executes synchronously (the memory objects may go now); the wait
     * is for form's sake, as in the matmul path */
    if (s == dnnl_success && o->dst_out && !a->dst_keep)
        s = run_reorder(o->dst_out, &o->dst, dst, &o->pdst, a->dst);
    if (s == dnnl_success)
        s = dnnl_stream_wait(stream);
    if (s == dnnl_success && o->nfused < key->npost)
        post_after(key, o->nfused, a, a->dst);
    for (int i = 0; i < n; i++)
        dnnl_memory_destroy(mems[i]);
    return (int)s;
}

size_t dnnl_api_conv_weights_layout(void *op, uint64_t *layout)
{
    CvOp *o = op;
    if (!o->wei_in)
        return 0;
    /* the desc is a plain struct that oneDNN fills whole (zeroed first) */
    *layout = XXH3_64bits(&o->wei, sizeof o->wei);
    return dnnl_memory_desc_get_size(&o->wei);
}

int dnnl_api_conv_weights(void *op, const void *plain, void *out)
{
    CvOp *o = op;
    char err[96];
    if (ready(err, sizeof err) < 0)
        return (int)dnnl_runtime_error;
    dnnl_status_t s = run_reorder(o->wei_in, &o->pwei, plain, &o->wei, out);
    if (s == dnnl_success)
        s = dnnl_stream_wait(stream);
    return (int)s;
}

size_t dnnl_api_conv_dst_bytes(void *op)
{
    CvOp *o = op;
    if (!o->dst_out || o->nfused < (int)o->npost)
        return 0;
    return dnnl_memory_desc_get_size(&o->dst);
}

int dnnl_api_conv_takes(void *consumer, void *producer)
{
    CvOp *c = consumer, *p = producer;
    return c->src_in && p->dst_out && dnnl_memory_desc_equal(&c->src, &p->dst);
}

int dnnl_api_conv_to_plain(void *op, const void *kept, void *dst)
{
    CvOp *o = op;
    char err[96];
    if (ready(err, sizeof err) < 0)
        return (int)dnnl_runtime_error;
    if (!o->dst_out)
        return (int)dnnl_invalid_arguments;
    dnnl_status_t s = run_reorder(o->dst_out, &o->dst, kept, &o->pdst, dst);
    if (s == dnnl_success)
        s = dnnl_stream_wait(stream);
    return (int)s;
}
