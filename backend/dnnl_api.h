/* The oneDNN layer of the cpu backend: every call into oneDNN (libdnnl 2.6, C API) lives
 * in dnnl_api.c, so a port to oneDNN 3.x is that one file; primcache.c keeps the
 * primitives it creates. Nothing here knows graphs or Python objects: callers describe a
 * matmul by an MmKey (what the primitive is made from) and its operands by MmTensor.
 *
 * Threads: libdnnl here is a GNU OpenMP build, and the process maps one libgomp (torch's
 * or the system's, same SONAME), so oneDNN's pool is torch's pool and
 * torch.set_num_threads(n) governs it (omp_get_max_threads() of the calling thread). The
 * count is part of the key (docs/internals/backend_measurements.md, section 2). */
#ifndef SJ_DNNL_API_H
#define SJ_DNNL_API_H

#include <stddef.h>
#include <stdint.h>

#define MM_MAX_RANK 4    /* oneDNN's permuted tags exist for 2-D to 4-D */
#define MM_MAX_POST 4    /* post-ops folded into one matmul */

/* Post-ops a matmul applies to its result, in order; dnnl_api.c maps each to oneDNN.
 * Order matters only for the numbering of MmKey contents (part of the key). */
typedef enum {
    MMPO_RELU = 1,      /* eltwise relu, slope 0 */
    MMPO_GELU_ERF,      /* eltwise gelu (erf form, F.gelu's default) */
    MMPO_TANH,
    MMPO_SIGMOID,       /* eltwise logistic */
    MMPO_SILU,          /* eltwise swish, alpha 1 */
    MMPO_LINEAR,        /* alpha * x + beta (a scalar add or mul) */
    MMPO_ADD_ROW,       /* binary add of a [N] row, broadcast over the rows */
    MMPO_GELU_TANH,     /* eltwise gelu_tanh (F.gelu(approximate='tanh'), gelu_new) */
} MmPostKind;

typedef struct {
    uint8_t kind;       /* MmPostKind */
    uint8_t pad[3];
    float alpha, beta;  /* MMPO_LINEAR; 0 otherwise */
} MmPost;

enum { MM_CLASS_MATMUL = 1 };

/* What a matmul primitive is made from: the packed key of the primitive cache (compared
 * and hashed as bytes, so always memset to 0 before filling). Every dim is a runtime dim:
 * sizes are not in the key (but row_n), so one primitive serves every size. */
typedef struct {
    uint8_t op_class;                 /* MM_CLASS_MATMUL */
    uint8_t dtype;                    /* DType of every operand (DT_F32 only, for now) */
    uint8_t rank;                     /* 2..MM_MAX_RANK: the rank of all operands */
    uint8_t has_bias;                 /* a [1, N] bias (rank 2 only) */
    uint8_t perm[2][MM_MAX_RANK];     /* src and weights: dims from outermost to innermost
                                         stride (the layout tag); dst: dperm below */
    uint8_t npost;
    uint8_t has_dperm;                /* dst is laid out by dperm (else row-major) */
    uint8_t pad[2];
    uint8_t dperm[MM_MAX_RANK];       /* dst's dims from outermost to innermost stride
                                         (attention writes torch's query layout) */
    MmPost post[MM_MAX_POST];
    int32_t threads;                  /* omp_get_max_threads() when created */
    int32_t pad2;
    int64_t row_n;                    /* with MMPO_ADD_ROW rows: N, concrete (oneDNN 2.6
                                         refuses a runtime dim in a binary post-op's
                                         operand, and picks ref:any unless the product's N
                                         is concrete too); else 0 */
} MmKey;

/* An operand at execution: sizes and strides in elements, rank of the key. */
typedef struct {
    int64_t dims[MM_MAX_RANK], strides[MM_MAX_RANK];
    void *data;
} MmTensor;

/* The primitive for key, or NULL when oneDNN refuses it (the message in err). The engine
 * is created on first use. Needs no GIL. A reference implementation counts as a refusal
 * (dnnl_api_is_ref): then *ref_avoided is 1. */
void *dnnl_api_matmul_create(const MmKey *key, int *ref_avoided, char *err, size_t errlen);

/* Runs prim (made from key) on src x wei (+ bias) into dst; post[i] is the [N] row of
 * MMPO_ADD_ROW post-op i (unused entries ignored). 0, or a oneDNN status (nonzero) when
 * it refused the operands (the caller runs the op another way). Needs no GIL. */
int dnnl_api_matmul_exec(void *prim, const MmKey *key, const MmTensor *src, const MmTensor *wei, const MmTensor *bias,
                         const MmTensor *dst, const MmTensor *post);

/* 1 when a matmul operand of rank r can be laid out by perm (dims outermost first): oneDNN
 * has a format tag for that order. */
int dnnl_api_has_tag(const uint8_t *perm, int r);

/* The implementation oneDNN chose ("gemm:jit"), for tests and logs; static string. */
const char *dnnl_api_impl(void *prim);

void dnnl_api_destroy(void *prim);

/* omp_get_max_threads() of the calling thread: the count oneDNN will use. */
int dnnl_api_threads(void);

/* 1 when oneDNN may dispatch to AVX-512 kernels in this process: its own effective ISA
 * (what cpuid and the OS's saved register state offer, capped by $ONEDNN_MAX_CPU_ISA or
 * $DNNL_MAX_CPU_ISA), so a choice made on it agrees with the kernels oneDNN runs. */
int dnnl_api_avx512(void);

/* ---------------------------------------- convolution, pooling, batch norm ---- */

/* Concrete-dims primitives (oneDNN has no fast runtime-dims path for these): one per
 * shape, made on first use of that shape and kept by primcache.c. Callers pass plain
 * (row-major) NCHW / NCW operands, or channels-last NHWC ones (CvKey.src_cl, dst_cl), and
 * get the result in the key's layout (the caller's layouts are called "plain" below:
 * they are what torch tensors hold); a convolution reorders its
 * source, weights and result through the blocked layouts oneDNN picks, which is
 * 1.2-15x faster than its plain-layout (im2col + gemm) path even with the three reorders
 * (measured, docs/internals/backend_measurements.md, section 7). */

#define CV_MAX_POST 6    /* post-ops of one convolution */

typedef enum {
    CVPO_RELU = 1,       /* eltwise relu, slope 0 */
    CVPO_SUM,            /* dst += a same-shape tensor (a residual), before the rest */
    CVPO_MUL_C,          /* binary mul by a per-channel [C] vector (a folded batch norm) */
    CVPO_ADD_C,          /* binary add of a per-channel [C] vector */
    CVPO_RELU6,          /* eltwise clip to [0, 6] (F.relu6, hardtanh(0, 6)) */
} CvPostKind;

enum { CV_CLASS_CONV = 2, CV_CLASS_POOL, CV_CLASS_BNORM };   /* MmKey's op_class numbering */
enum { CV_POOL_MAX = 1, CV_POOL_AVG_INCLUDE, CV_POOL_AVG_EXCLUDE };
enum { CV_BN_SCALE = 1, CV_BN_SHIFT = 2, CV_BN_RELU = 4 };   /* CvKey.alg of a batch norm */

/* What a convolution, pooling or batch-norm primitive is made from: concrete sizes. The
 * packed key of the primitive cache: memset to 0 before filling. */
typedef struct {
    uint8_t op_class;                 /* CV_CLASS_* */
    uint8_t sp;                       /* spatial dims: 1 or 2 */
    uint8_t has_bias;                 /* convolution: a [OC] bias */
    uint8_t alg;                      /* pooling: CV_POOL_*; batch norm: CV_BN_* bits */
    uint8_t npost;
    uint8_t post[CV_MAX_POST];        /* CvPostKind, in order */
    uint8_t src_cl, dst_cl;           /* the caller's source / result is channels-last
                                         (NHWC, or NWC for a 1-D source) instead of plain */
    uint8_t wei_cl;                   /* 2-D convolution: the weights are OHWI in memory */
    uint8_t pad[2];
    int32_t threads;                  /* omp_get_max_threads() when created */
    float eps;                        /* batch norm */
    int64_t n, c, oc, groups;         /* batch, input and output channels, groups */
    int64_t in[2], out[2];            /* spatial sizes of the source and the result */
    int64_t k[2], stride[2], dil[2];  /* kernel, stride, dilation (torch's: 1 = none) */
    int64_t pad_l[2], pad_r[2];       /* padding before and after (pad_r may exceed pad_l
                                         for 'same' and ceil_mode) */
} CvKey;

/* The operands of one execution, plain and contiguous (NULL when absent). */
typedef struct {
    const void *src, *wei, *bias;
    const void *residual;              /* CVPO_SUM: a tensor of dst's shape */
    const void *chan[CV_MAX_POST];     /* CVPO_MUL_C / CVPO_ADD_C: [C] vectors, by post index */
    const void *mean, *var, *scale, *shift;   /* batch norm */
    const void *wei_ready;             /* convolution: weights already in the primitive's
                                          layout (dnnl_api_conv_weights), or NULL */
    const void *src_ready;             /* convolution: the source already in the primitive's
                                          layout (a previous convolution's dst_keep, checked
                                          with dnnl_api_conv_takes), or NULL: src is plain */
    void *dst;
    void *dst_keep;                    /* convolution: write the result here in the
                                          primitive's own layout (dnnl_api_conv_dst_bytes
                                          bytes, 64-byte aligned) instead of plain into dst;
                                          only when every post-op is fused. NULL: plain */
} CvArgs;

/* The primitives for key (the main one and its reorders), or NULL when oneDNN refuses it
 * (the message in err). Needs no GIL. No reference implementation is taken
 * (dnnl_api_is_ref): a convolution keeps the longest prefix of its post-ops that has a
 * jit kernel and applies the rest to the plain result after it (in order, the same
 * arithmetic); a pooling tries blocked source layouts; else the key is refused. *ref_avoided
 * is 1 when a reference implementation was avoided, and err then says how (a note on
 * success: "" when there is nothing to say). */
void *dnnl_api_conv_create(const CvKey *key, int *ref_avoided, char *err, size_t errlen);
/* How many of the key's post-ops the primitive applies itself (the rest run after it). */
int dnnl_api_conv_nfused(void *op);
/* Runs them: 0, or a oneDNN status when it failed (the caller runs the op another way).
 * Needs no GIL. */
int dnnl_api_conv_exec(void *op, const CvKey *key, const CvArgs *args);
void dnnl_api_conv_destroy(void *op);
/* A convolution's weights layout: the bytes the reordered weights take (0 when the
 * primitive reads the plain weights as they are) and in *layout a hash of the layout. */
size_t dnnl_api_conv_weights_layout(void *op, uint64_t *layout);
/* Reorders plain weights into out (dnnl_api_conv_weights_layout bytes, 64-byte aligned).
 * 0, or a oneDNN status. Needs no GIL. */
int dnnl_api_conv_weights(void *op, const void *plain, void *out);
const char *dnnl_api_conv_impl(void *op);
/* A convolution's result layout when it is not plain: its bytes (dst_keep's size), else 0
 * (also when some post-ops run after the primitive: those need the plain result). */
size_t dnnl_api_conv_dst_bytes(void *op);
/* 1 when convolution `consumer` reads its source in the layout convolution `producer`
 * writes its result in (same dims, same blocked layout): the producer's dst_keep can be
 * the consumer's src_ready. */
int dnnl_api_conv_takes(void *consumer, void *producer);
/* The result a dst_keep run of op left in `kept`, reordered into plain `dst`. 0, or a
 * oneDNN status. Needs no GIL. */
int dnnl_api_conv_to_plain(void *op, const void *kept, void *dst);

/* --------------------------------------------------------------- primcache.c ---- */

/* A pinned cache entry: its primitive cannot be evicted until released. */
typedef struct PcEntry PcEntry;

/* The entry for key, creating the primitive with dnnl_api_matmul_create on a miss. A
 * refused key is cached too (prim NULL), so it is not retried on every call. NULL only
 * when out of memory. The GIL (or one caller at a time) is required. */
PcEntry *primcache_get(const MmKey *key);
/* The same for a convolution, pooling or batch-norm key (dnnl_api_conv_create). */
PcEntry *primcache_get_conv(const CvKey *key);
void *primcache_prim(const PcEntry *e);   /* NULL when oneDNN refused the key */
void primcache_release(PcEntry *e);

typedef struct {
    long hits, misses, creations, failures, evictions, entries, capacity;
    long created[8];     /* creations by op class (MM_CLASS_MATMUL, CV_CLASS_*) */
    long ref_avoided;    /* keys whose reference implementation was refused (a convolution
                            with post-ops moved after it, or an op run eagerly) */
} PcStats;
/* Registers _C._cg_primcache_info() (the counters above, the implementations oneDNN chose
 * by op class) on module m: 0, or -1 with an exception. (A plain PyObject struct, so this
 * header needs no Python.h.) */
struct _object;
int primcache_init_module(struct _object *m);

#endif
