/* What the steps share (step_matmul.c, step_conv.c, step_cat.c, step_embed.c,
 * step_views.c): finding the value behind a bound argument, reading a constant int or
 * number argument, appending a step to the plan, running a step's nodes eagerly, storing a
 * step's value or handing its node back to eager, adding their counters to
 * CompiledGraph.stats, telling whether a weight copy kept across calls is still the
 * weight's, whether an operand holds inf or NaN, and a strided copy.
 *
 * Memory: nothing here holds a Python reference beyond a call, except KeptId's weak
 * reference (owned by the KeptId, released by lower_kept_clear). */
#include <string.h>

#include "lower_int.h"

int32_t lower_value_of(const Graph *g, const BoundArg *ba)
{
    if (!ba || ba->kind != BA_TENSOR)
        return -1;
    return (int32_t)((const Value *)(const void *)ba->meta - g->values);
}

int lower_push_step(LowerPlan *p, StepKind kind, void **arr, int32_t *n, size_t item, const void *x)
{
    Step st = {kind, *n};
    if (plan_push(arr, n, item, x) < 0)
        return -1;
    if (plan_push((void **)&p->steps, &p->nsteps, sizeof st, &st) < 0) {
        (*n)--;   /* the item stays allocated in *arr, unused: freed with the plan */
        return -1;
    }
    return 0;
}

int lower_exec_nodes(Graph *g, int32_t first, const int32_t *more, int n, PyObject **vals)
{
    if (lower_exec_node(g, first, vals) < 0)
        return -1;
    for (int i = 0; i < n; i++)
        if (lower_exec_node(g, more[i], vals) < 0)
            return -1;
    return 0;
}

int lower_step_done(Graph *g, int32_t node, int32_t out, int rc, PyObject *res, long long *fallbacks, PyObject **vals)
{
    if (rc == 0) {
        Py_XSETREF(vals[out], res);   /* steals res */
        return 0;
    }
    Py_XDECREF(res);
    if (rc < 0)
        return -1;
    (*fallbacks)++;
    return lower_exec_nodes(g, node, NULL, 0, vals);
}

int lower_put_counts(PyObject *d, int n, const char *const *names, const long long *vals)
{
    for (int i = 0; i < n; i++) {
        PyObject *v = PyLong_FromLongLong(vals[i]);   /* new */
        if (!v || PyDict_SetItemString(d, names[i], v) < 0) {
            Py_XDECREF(v);
            return -1;
        }
        Py_DECREF(v);
    }
    return 0;
}

int lower_const_int(PyObject *v, int64_t *out)
{
    if (!v || !PyLong_Check(v) || PyBool_Check(v))
        return 1;
    long long x = PyLong_AsLongLong(v);
    if (x == -1 && PyErr_Occurred()) {
        PyErr_Clear();   /* OverflowError: too large for a step, which runs eagerly */
        return 1;
    }
    *out = x;
    return 0;
}

int lower_const_number(PyObject *v, double *out)
{
    if (!v || !(PyFloat_Check(v) || PyLong_Check(v)))
        return 1;
    double d = PyFloat_AsDouble(v);
    if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();   /* OverflowError: an int too large for a double */
        return 1;
    }
    *out = d;
    return 0;
}

static PyObject *str_version;   /* strong, interned "_version" */

int lower_kept_version(PyObject *w, long long *version)
{
    if (!str_version && !(str_version = PyUnicode_InternFromString("_version"))) {
        PyErr_Clear();
        return 1;
    }
    PyObject *v = PyObject_GetAttr(w, str_version);   /* new */
    *version = v ? PyLong_AsLongLong(v) : -1;
    Py_XDECREF(v);
    if (*version == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 1;
    }
    return 0;
}

int lower_kept_matches(const KeptId *id, PyObject *w, const void *ptr, long long version)
{
    return id->wref && PyWeakref_GetObject(id->wref) == w && id->ptr == ptr && id->version == version;
}

int lower_kept_set(KeptId *id, PyObject *w, const void *ptr, long long version)
{
    PyObject *ref = PyWeakref_NewRef(w, NULL);   /* new: owned by id */
    if (!ref) {
        PyErr_Clear();
        return 1;
    }
    Py_XSETREF(id->wref, ref);
    id->ptr = ptr;
    id->version = version;
    return 0;
}

void lower_kept_clear(KeptId *id)
{
    Py_CLEAR(id->wref);
}

/* The exponent of a float32 is all ones exactly for inf and NaN: (bits & exp) + one lsb of
 * the exponent reaches bit 31 then and only then. ORed in four 8-lane vectors (gcc's
 * vector extension: a plain loop stays scalar at -O2), built twice (target_clones, chosen
 * at load time): AVX2 and baseline x86-64 (SSE2, as the rest of the extension). Measured
 * in cache: 88 GB/s with SSE2, 137 GB/s with AVX2. */
#define FIN_EXP 0x7f800000u
#define FIN_ONE 0x00800000u
typedef uint32_t FinVec __attribute__((vector_size(32)));

__attribute__((target_clones("avx2", "default"))) int lower_finite_n(const float *p, int64_t n)
{
    FinVec acc0 = {0}, acc1 = {0}, acc2 = {0}, acc3 = {0}, v0, v1, v2, v3;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        memcpy(&v0, p + i, sizeof v0);
        memcpy(&v1, p + i + 8, sizeof v1);
        memcpy(&v2, p + i + 16, sizeof v2);
        memcpy(&v3, p + i + 24, sizeof v3);
        acc0 |= (v0 & FIN_EXP) + FIN_ONE;
        acc1 |= (v1 & FIN_EXP) + FIN_ONE;
        acc2 |= (v2 & FIN_EXP) + FIN_ONE;
        acc3 |= (v3 & FIN_EXP) + FIN_ONE;
    }
    acc0 |= acc1 | acc2 | acc3;
    uint32_t all = 0;
    for (int l = 0; l < 8; l++)
        all |= acc0[l];
    for (; i < n; i++) {
        uint32_t b;
        memcpy(&b, p + i, sizeof b);
        all |= (b & FIN_EXP) + FIN_ONE;
    }
    return !(all & 0x80000000u);
}

int lower_finite(const Operand *o)
{
    int64_t total = 1;
    for (int d = 0; d < o->ndim; d++)
        total *= o->size[d];
    if (total == 0)
        return 1;
    /* the innermost dims [top, ndim) that make one contiguous run (a whole contiguous
     * tensor is one: a call per innermost row cost more than the scan itself) */
    int64_t run = 1;
    int top = o->ndim, inner = -1;
    while (top > 0 && (o->size[top - 1] == 1 || o->stride[top - 1] == run))
        run *= o->size[--top];
    if (run == 1)   /* else runs along a unit-stride dim (a transposed weight) */
        for (int d = 0; d < top; d++)
            if (o->stride[d] == 1 && o->size[d] > 1) {
                inner = d;
                run = o->size[d];
            }
    int64_t idx[SJ_MAX_RANK] = {0};
    const float *base = (const float *)(const void *)o->data;
    for (;;) {
        int64_t off = 0;
        for (int d = 0; d < top; d++)
            off += idx[d] * o->stride[d];
        if (!lower_finite_n(base + off, run))
            return 0;
        int d = top - 1;   /* the next run: dims [0, top) but `inner` */
        for (; d >= 0; d--) {
            if (d == inner)
                continue;
            if (++idx[d] < o->size[d])
                break;
            idx[d] = 0;
        }
        if (d < 0)
            return 1;
    }
}

int lower_weight_finite(KeptFinite *f, PyObject *w, const Operand *o)
{
    long long version;
    if (lower_kept_version(w, &version))
        return lower_finite(o);
    if (lower_kept_matches(&f->id, w, o->data, version))
        return f->finite;
    int finite = lower_finite(o);
    if (!lower_kept_set(&f->id, w, o->data, version))
        f->finite = finite;
    else
        lower_kept_clear(&f->id);
    return finite;
}

/* One row of inner elements of item bytes: contiguous, lower_copy_bytes; strided, typed
 * moves (a memcpy call per element costs ten times more). */
static void copy_row(char *d0, int64_t dstep, const char *s0, int64_t sstep, int64_t inner, size_t item)
{
    if (dstep == 1 && sstep == 1) {
        lower_copy_bytes(d0, s0, (size_t)inner * item);
        return;
    }
    switch (item) {
    case 4:
        for (int64_t i = 0; i < inner; i++)
            ((uint32_t *)d0)[i * dstep] = ((const uint32_t *)s0)[i * sstep];
        break;
    case 8:
        for (int64_t i = 0; i < inner; i++)
            ((uint64_t *)d0)[i * dstep] = ((const uint64_t *)s0)[i * sstep];
        break;
    case 2:
        for (int64_t i = 0; i < inner; i++)
            ((uint16_t *)d0)[i * dstep] = ((const uint16_t *)s0)[i * sstep];
        break;
    case 1:
        for (int64_t i = 0; i < inner; i++)
            d0[i * dstep] = s0[i * sstep];
        break;
    default:
        for (int64_t i = 0; i < inner; i++)
            memcpy(d0 + i * dstep * (int64_t)item, s0 + i * sstep * (int64_t)item, item);
    }
}

void lower_copy_strided(char *dst, const int64_t *ds, const char *src, const int64_t *ss, const int64_t *n, int r,
                        size_t item)
{
    /* size-1 dims dropped, and a dim folded into the one before it when both sides step
     * over it contiguously: fewer, longer rows */
    int64_t cn[SJ_MAX_RANK], cds[SJ_MAX_RANK], css[SJ_MAX_RANK];
    int cr = 0;
    for (int d = 0; d < r; d++) {
        if (n[d] == 0)
            return;
        if (n[d] == 1)
            continue;
        if (cr > 0 && cds[cr - 1] == ds[d] * n[d] && css[cr - 1] == ss[d] * n[d]) {
            cn[cr - 1] *= n[d];
            cds[cr - 1] = ds[d];
            css[cr - 1] = ss[d];
            continue;
        }
        cn[cr] = n[d];
        cds[cr] = ds[d];
        css[cr] = ss[d];
        cr++;
    }
    if (cr == 0) {
        memcpy(dst, src, item);
        return;
    }
    int64_t inner = cn[cr - 1], idx[SJ_MAX_RANK] = {0}, so = 0, dof = 0;
    for (;;) {
        copy_row(dst + dof * (int64_t)item, cds[cr - 1], src + so * (int64_t)item, css[cr - 1], inner, item);
        /* the next row: an odometer over the outer dims, offsets stepped by their strides */
        int d = cr - 2;
        for (; d >= 0; d--) {
            so += css[d];
            dof += cds[d];
            if (++idx[d] < cn[d])
                break;
            so -= css[d] * cn[d];
            dof -= cds[d] * cn[d];
            idx[d] = 0;
        }
        if (d < 0)
            return;
    }
}
