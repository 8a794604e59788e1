/* Tensor metadata: what capture knows about a tensor or array value without its data.
 * Shared by the evaluator (capture/), the shape rules (shapes/) and the graph IR. */
#ifndef SJ_META_H
#define SJ_META_H

#include <Python.h>
#include <stdint.h>

#define SJ_MAX_RANK 8

/* ---- element types (vocab/dtypes.def is the source) ---- */
typedef enum { CAT_BOOL = 0, CAT_INT = 1, CAT_FLOAT = 2, CAT_COMPLEX = 3 } DTypeCategory;

typedef enum {
#define X(e, name, size, cat) e,
#include "dtypes.def"
#undef X
    DT_COUNT
} DType;

typedef struct {
    const char *name;        /* "float32": the torch and numpy spelling */
    int itemsize;
    DTypeCategory category;
} DTypeInfo;

extern const DTypeInfo dtype_info[DT_COUNT];

static inline int dtype_is_unsigned(DType d)
{
    return d == DT_U8 || d == DT_U16 || d == DT_U32 || d == DT_U64;
}

/* 1 when torch tensors of dtype d are supported (torch's uint16/32/64 have too few ops) */
static inline int dtype_in_torch(DType d)
{
    return d != DT_U16 && d != DT_U32 && d != DT_U64;
}

/* ---- which array library a value belongs to ---- */
typedef enum { LIB_TORCH = 0, LIB_NUMPY = 1 } Lib;

struct SymNode;   /* shapes/sym.h */

typedef struct TensorMeta {
    unsigned char lib;            /* Lib */
    unsigned char dtype;          /* DType */
    unsigned char ndim;           /* rank, 0..SJ_MAX_RANK */
    unsigned char np_scalar;      /* numpy only: the value is a numpy scalar (np.float64(1.0)),
                                     which numpy returns for full reductions; ndim is 0 */
    unsigned char requires_grad;  /* torch only */
    unsigned char symint;         /* graph values only: not a tensor but a Python scalar (a size
                                     computed at run time: x.size(0), s0 * 2; or a float/bool
                                     from t.item(): dtype F64 or BOOL) */
    int64_t size[SJ_MAX_RANK];    /* sizes; a symbolic dim holds its hint here */
    struct SymNode *sym[SJ_MAX_RANK];  /* NULL: size[i] is static; else dim i's symbolic size
                                     (a node of the capture's shape environment, owned by the
                                     graph's SymEnv) whose hint is size[i] */
} TensorMeta;

/* size[i] of a dim whose size depends on the data (an unbacked symbol: nonzero()'s rows):
 * there is no hint, so rules see this stand-in (torch's fallback for unbacked sizes) and
 * must decide relations through the symbol, which fails as data-dependent. */
#define SJ_UNBACKED_HINT 8192

/* Fill *out from a live torch.Tensor or numpy.ndarray / numpy scalar. If strides is not NULL
 * it receives the strides in elements (ndim entries). Returns 0 on success, 1 when the value
 * is not a supported tensor (wrong device, unsupported dtype, sparse, rank > SJ_MAX_RANK, or
 * not a tensor at all; *why receives a static string naming the reason), -1 with a Python
 * exception set on an internal error. Implemented in vocab/meta.c. */
int meta_from_value(PyObject *value, TensorMeta *out, int64_t *strides, const char **why);

/* 1 when the live value matches meta (lib, dtype, rank, sizes, np_scalar), 0 when not,
 * -1 on error. Used to verify shape rules against the first real run of a graph. */
int meta_matches_value(const TensorMeta *meta, PyObject *value);

/* dtype <-> Python objects. dtype_from_py accepts torch.dtype objects (lib TORCH), numpy
 * dtype objects, numpy scalar types (np.float32) and Python's float/int/bool/complex types
 * (with the meaning each library gives them). Returns 0 and sets *out, 1 when obj is not a
 * dtype this library knows, -1 on error. dtype_to_py returns a NEW reference to the
 * torch.dtype or numpy.dtype object for d. */
int dtype_from_py(PyObject *obj, Lib lib, DType *out);
PyObject *dtype_to_py(DType d, Lib lib);

/* torch.get_default_dtype(), read at the start of each capture (it is guarded as global
 * state). DT_F32 unless the user changed it. */
extern DType meta_torch_default_float;

/* Re-reads torch.get_default_dtype() into meta_torch_default_float (DT_F32 when torch is
 * not imported). Returns 0, or -1 with an exception set. Implemented in vocab/meta.c. */
int meta_refresh_torch_default(void);

/* "float32[2, 3]" (numpy scalars print "float64 scalar"); writes at most n bytes. A
 * symbolic dim prints through meta_sym_printer, or as its hint while none is set. */
void meta_format(const TensorMeta *m, char *buf, size_t n);

/* The text of a symbolic dim: a new str, or NULL with an exception set. The symbolic ints
 * live above this layer, so shapes sets it when the module initialises (sym_init). */
typedef PyObject *(*MetaSymPrinter)(struct SymNode *e);
extern MetaSymPrinter meta_sym_printer;

#endif
