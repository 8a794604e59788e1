/* Binding a call's arguments to a schema of vocab/callables.def: the canonical parameter
 * names the shape rules and the backend read (the schema syntax is described at the top of
 * callables.def). Knows nothing of graphs, symbols or capture: what a bound argument holds
 * is described by the caller (a tensor's metadata, a constant, a list of those). */
#ifndef SJ_BIND_H
#define SJ_BIND_H

#include <Python.h>
#include <stdint.h>
#include "meta.h"

#if defined(__GNUC__)
#define SJ_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define SJ_PRINTF(a, b)
#endif

#define SJ_MAX_PARAMS 16

typedef enum {
    BA_ABSENT = 0,   /* not passed (the rule applies the library default) */
    BA_TENSOR,       /* a graph value: meta is set */
    BA_CONST,        /* a Python constant: value is set (borrowed). None arrives as BA_CONST
                        Py_None; ba_get() hides it so rules treat None as absent */
    BA_LIST          /* a list or tuple holding at least one graph value, or the items
                        gathered by a *varargs parameter: n items */
} BoundArgKind;

typedef struct BoundArg {
    BoundArgKind kind;
    const TensorMeta *meta;            /* BA_TENSOR (borrowed) */
    PyObject *value;                   /* BA_CONST (borrowed) */
    int n;                             /* BA_LIST */
    const struct BoundArg *items;      /* BA_LIST (borrowed) */
    struct SymNode *sym;               /* BA_CONST: a symbolic int (value is its hint), else NULL */
    struct SymNode *const *slice_sym;  /* BA_CONST slice with symbolic parts (x[:n]): the
                                          symbols of start, stop, step (NULL for a constant
                                          part; value is the slice of the hints), else NULL */
    int data;                          /* BA_CONST: a scalar computed in the graph at run time
                                          (a float from t.item()); value is a stand-in of its
                                          Python type, for dtype logic only: never read it */
} BoundArg;

typedef struct {
    int n;
    const char *names[SJ_MAX_PARAMS];  /* canonical names, static strings */
    BoundArg args[SJ_MAX_PARAMS];
    int16_t from[SJ_MAX_PARAMS];       /* the argument each parameter was bound from: k < npos
                                          the positional argument k, npos + j the keyword j;
                                          -1 when not passed (absent, or a fixed parameter) */
    int16_t nfrom[SJ_MAX_PARAMS];      /* a *varargs parameter that gathered positional
                                          arguments: how many, from from[i] on; else 0 */
} BoundArgs;

/* One parameter of a parsed schema (the syntax is at the top of callables.def). */
typedef struct {
    char call_name[32];                /* how the caller spells it (keyword matching) */
    char name[32];                     /* how the rules and backends read it */
    unsigned char kwonly, posonly, varargs, optional, refused, fixed, tensor_only;
    PyObject *fixed_value;             /* fixed params: a str, owned by the schema cache
                                          forever (borrowed by every reader) */
} SchemaParam;

typedef struct {
    char msg[256];                     /* why the rule refused: becomes the capture's reason */
} ShapeErr;

/* Writes the refusal message; always returns -1 so rules can `return sj_err(...)`. */
int sj_err(ShapeErr *err, const char *fmt, ...) SJ_PRINTF(2, 3);

/* The argument named name, or NULL when absent or None. */
const BoundArg *ba_get(const BoundArgs *b, const char *name);

/* The parameters of a schema, in order: *params points at n of them in the schema cache
 * (static storage, valid forever). Returns n, or -1 with err->msg set (a broken row). */
int bind_schema(const char *schema, const SchemaParam **params, ShapeErr *err);

/* Bind positional and keyword arguments to a schema from callables.def. pos/npos are the
 * positional arguments (for methods the receiver first), kwnames/kw/nkw the keywords.
 * varargs are gathered into a BA_LIST whose items point into pos (so pos must outlive out).
 * out->from / out->nfrom say which argument each parameter was bound from.
 * Returns 0, or -1 with err->msg set (unknown keyword, too many positional, missing
 * required). */
int bind_args(const char *schema, const BoundArg *pos, int npos, const char *const *kwnames, const BoundArg *kw,
              int nkw, BoundArgs *out, ShapeErr *err);

#endif
