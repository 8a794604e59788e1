/* Buffer reuse for a compiled graph's intermediates.
 *
 * The plan (plan.c, plan_releases) says after which step each value is last read; the
 * runtime drops its reference there (so a run holds only live values, as eager does) and
 * offers the object to the graph's pool. The pool keeps it only when nothing else can see
 * its memory: a plain tensor (or array) of the value's dtype, contiguous, at least
 * SJ_POOL_MIN_BYTES, with one Python reference (ours), no other owner of its TensorImpl
 * (views, DLPack: `_use_count() == 1`) and no other owner of its storage (`t.numpy()`,
 * `set_`: the storage's use count is ours plus the probe's); a numpy array with one
 * reference and no base; and only objects the run allocated itself (bufpool_note), so
 * eager results do not pile up in a pool nothing takes them from. Outputs that kernels
 * and oneDNN steps allocate
 * (lower_new_output_dt) are taken from the pool of the run on this thread when one has
 * the same library, dtype and sizes: no allocation, no page faults, and the memory stays
 * with the graph between calls (at most SJ_POOL_SIZE entries; an entry no run offered in
 * the last two is dropped; all freed with the graph).
 *
 * Other sizes (a dynamic graph called at several sequence lengths): when no entry has
 * the sizes, a torch output takes the kept tensor of its dtype with the least memory that
 * is at least what it needs and at most twice that (the bound: a run never sits on more
 * than twice the memory its live intermediates need), resized in place (`resize_`: the
 * same object on the same storage, which resize_ never shrinks, so the entry's memory is
 * its storage's bytes, and a later call at the larger size takes it back without an
 * allocation). The tensor stays its storage's only owner, so it is offered back under
 * the same rules; no view of a pooled torch buffer is ever made (a view would keep the
 * buffer's memory reachable, and the pool could never take it again). A numpy output of
 * other sizes takes a kept array the same way (ndarray.resize would reallocate) as a new
 * array over its memory, `numpy.ndarray(sizes, dtype, buffer=owner)`, whose base is the
 * owner: when that array is offered back, holds the only reference to the owner (numpy
 * makes every view of it a view of the owner, so a view anywhere else would show in the
 * owner's reference count) and has no reference but ours, the owner goes back into the
 * pool. Not for a step that makes a graph output (bufpool_lend, set per step by the run):
 * a returned array owns its memory, as eager's does (`resize`, `base is None`), and holds
 * no more than it needs. shapejit.config.pool_larger_buffers = False keeps exact sizes
 * only (A/B).
 *
 * Graph outputs are never offered (the caller owns them). But for a large torch output
 * (1 MB or more) the pool keeps its storage after the run (bufpool_keep_outputs): once the
 * caller has dropped the tensor and everything sharing its memory (the storage object
 * has no other reference, the storage's use count is the pool's alone, and it is not
 * shared with another process), a later output of at most that size gets a new tensor over
 * it (`torch.empty(0).set_(storage, 0, sizes)`), so a loop calling the graph does not
 * page-fault fresh memory on every call (glibc maps buffers above 32 MB anew each time).
 * The caller never sees an object it held change. Pool operations run with the GIL held,
 * so two threads running one graph never take the same entry.
 *
 * Memory: each entry holds a strong reference to its object; bufpool_take hands it to the
 * caller (new reference), bufpool_offer steals the reference it is given. */
#include <string.h>

#include "lower.h"
#include "../core/config.h"
#include "../vocab/tensor_reader.h"

#define SJ_POOL_MIN_BYTES (64 * 1024)
#define SJ_CARRY_MIN_BYTES (1 << 20)

static _Thread_local BufPool *current;   /* the pool of the run on this thread, or NULL */
static _Thread_local int lend_ok;        /* bufpool_lend */

static PyObject *str_use_count, *str_untyped_storage, *str_cdata, *str_base;   /* strong, interned */
static PyObject *storage_use_count; /* strong: torch._C._storage_Use_Count */
static PyObject *str_set; /* strong: interned "set_" */
static PyObject *str_is_shared, *str_nbytes, *str_resize; /* strong, interned */
static PyObject *np_ndarray, *kw_dtype_buffer;              /* strong: numpy.ndarray, ("dtype", "buffer") */

BufPool *bufpool_enter(BufPool *p)
{
    BufPool *prev = current;
    current = p;
    p->run++;
    return prev;
}

void bufpool_leave(BufPool *p, BufPool *prev)
{
    p->nours = 0;
    current = prev;
    /* entries no run offered in the last two (sizes a dynamic graph no longer sees) go */
    PyObject *stale[SJ_POOL_SIZE];
    int ns = 0, keep = 0;
    for (int i = 0; i < p->n; i++)
        if (p->e[i].run + 1 < p->run)
            stale[ns++] = p->e[i].obj;
        else
            p->e[keep++] = p->e[i];
    p->n = keep;
    for (int i = 0; i < ns; i++)
        Py_DECREF(stale[i]);
}

void bufpool_note(BufPool *p, PyObject *obj)
{
    if (p->nours < SJ_POOL_OURS)
        p->ours[p->nours++] = obj;
}

/* 1 (and forgotten) when obj is one of the run's own outputs. */
static int take_ours(BufPool *p, PyObject *obj)
{
    for (int i = 0; i < p->nours; i++)
        if (p->ours[i] == obj) {
            p->ours[i] = p->ours[--p->nours];
            return 1;
        }
    return 0;
}

BufPool *bufpool_current(void)
{
    return current;
}

void bufpool_lend(int ok)
{
    lend_ok = ok;
}

static int interned(PyObject **slot, const char *s)
{
    return *slot || (*slot = PyUnicode_InternFromString(s)) ? 0 : -1;
}

/* The integer result of obj.name() or of fn(arg); -1 on any failure (cleared). */
static long long call_int(PyObject *r)
{
    long long x = r ? PyLong_AsLongLong(r) : -1;
    Py_XDECREF(r);
    if (x == -1 && PyErr_Occurred())
        PyErr_Clear();
    return x;
}

/* How many owners torch storage object s's memory has (s itself included), or -1. */
static long long storage_uses(PyObject *s)
{
    if (interned(&str_cdata, "_cdata") < 0) {
        PyErr_Clear();
        return -1;
    }
    if (!storage_use_count) {
        PyObject *c = PyImport_ImportModule("torch._C"); /* new */
        storage_use_count = c ? PyObject_GetAttrString(c, "_storage_Use_Count") : NULL;
        Py_XDECREF(c);
        if (!storage_use_count) {
            PyErr_Clear();
            return -1;
        }
    }
    PyObject *cd = PyObject_GetAttr(s, str_cdata); /* new */
    long long uses = cd ? call_int(PyObject_CallOneArg(storage_use_count, cd)) : -1;
    Py_XDECREF(cd);
    if (uses < 0)
        PyErr_Clear();
    return uses;
}

/* 1 when storage object s's memory is shared with other processes (or the question
 * fails: then it is not reused). */
static int storage_shared(PyObject *s)
{
    if (interned(&str_is_shared, "is_shared") < 0) {
        PyErr_Clear();
        return 1;
    }
    PyObject *r = PyObject_CallMethodNoArgs(s, str_is_shared); /* new */
    int shared = r ? PyObject_IsTrue(r) : -1;
    Py_XDECREF(r);
    if (shared < 0)
        PyErr_Clear();
    return shared != 0;
}

/* 1 and *bytes (its storage's) when nothing but our reference reaches torch tensor t's
 * memory. */
static int torch_exclusive(PyObject *t, int64_t *bytes)
{
    if (interned(&str_use_count, "_use_count") < 0 || interned(&str_untyped_storage, "untyped_storage") < 0 ||
        interned(&str_nbytes, "nbytes") < 0) {
        PyErr_Clear();
        return 0;
    }
    if (call_int(PyObject_CallMethodNoArgs(t, str_use_count)) != 1)
        return 0;
    PyObject *s = PyObject_CallMethodNoArgs(t, str_untyped_storage); /* new */
    /* torch hands out one storage object per storage, referenced by the storage itself
     * while a tensor uses it: besides that, nobody else may hold it (ours: 2 references);
     * its memory has two owners (the tensor and that object); and it is not shared with
     * another process (share_memory_) */
    long long uses = s && Py_REFCNT(s) <= 2 && !storage_shared(s) ? storage_uses(s) : -1;
    *bytes = uses == 2 ? call_int(PyObject_CallMethodNoArgs(s, str_nbytes)) : -1;
    Py_XDECREF(s);
    if (uses < 0)
        PyErr_Clear();
    return uses == 2 && *bytes >= 0;
}

/* 1 when numpy array a owns its memory and nothing but our reference reaches it. */
static int numpy_exclusive(PyObject *a)
{
    if (interned(&str_base, "base") < 0) {
        PyErr_Clear();
        return 0;
    }
    PyObject *b = PyObject_GetAttr(a, str_base); /* new */
    int none = b == Py_None;
    Py_XDECREF(b);
    if (!b)
        PyErr_Clear();
    return none;
}

/* The owner of numpy array a when a is an array bufpool_take made over a pooled owner
 * and nothing else reaches the owner (its references: a's and, while we ask, ours): a new
 * reference, or NULL (no error set). */
static PyObject *numpy_lent_owner(PyObject *a)
{
    if (!np_ndarray || interned(&str_base, "base") < 0) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *b = PyObject_GetAttr(a, str_base); /* new */
    if (!b) {
        PyErr_Clear();
        return NULL;
    }
    if (Py_TYPE(b) != (PyTypeObject *)np_ndarray || Py_REFCNT(b) != 2 || !numpy_exclusive(b)) {
        Py_DECREF(b);
        return NULL;
    }
    return b;
}

/* 0 and op's sizes and strides filled when obj is an array of lib and dt (torch: through
 * the tensor reader, no data pointer needed; numpy: its buffer, released at once); 1 when
 * it is not, or could not be read. Never raises. */
static int read_layout(PyObject *obj, Lib lib, DType dt, Operand *op)
{
    int ok;
    if (lib == LIB_TORCH) {
        TensorMeta m;
        const char *why = NULL;
        ok = treader_read(obj, &m, op->stride, &why) == 0 && m.dtype == dt && m.lib == LIB_TORCH &&
             m.ndim <= SJ_MAX_RANK;
        if (ok) {
            op->ndim = m.ndim;
            memcpy(op->size, m.size, sizeof(int64_t) * (size_t)m.ndim);
        }
    } else {
        ok = lower_read_input_dt(obj, lib, dt, op) == 0;
        if (op->has_view)
            PyBuffer_Release(&op->view); /* also when the read refused the buffer */
    }
    if (PyErr_Occurred())
        PyErr_Clear();
    return !ok;
}

void bufpool_offer(BufPool *p, PyObject *obj, Lib lib, DType dt)
{
    if (!obj)
        return;
    Operand op;
    memset(&op, 0, sizeof op);
    int ok = take_ours(p, obj) && Py_REFCNT(obj) == 1;
    PyObject *owner = ok && lib == LIB_NUMPY ? numpy_lent_owner(obj) : NULL; /* new */
    if (owner) {   /* the array goes (and its reference to the owner): the owner is offered */
        Py_DECREF(obj);
        obj = owner;
    }
    ok = ok && !read_layout(obj, lib, dt, &op);
    int64_t elems = 1;
    for (int d = op.ndim - 1; ok && d >= 0; d--) {
        if (op.size[d] != 1 && op.stride[d] != elems)
            ok = 0;
        elems *= op.size[d];
    }
    int64_t bytes = elems * dtype_info[dt].itemsize;
    ok = ok && bytes >= SJ_POOL_MIN_BYTES && (lib == LIB_TORCH ? torch_exclusive(obj, &bytes) : numpy_exclusive(obj)) &&
         Py_REFCNT(obj) == 1;
    if (!ok) {
        Py_DECREF(obj);
        return;
    }
    /* a full pool gives up its oldest entry (out of the array before its release, which
     * may run Python code) */
    PyObject *old = NULL;
    if (p->n == SJ_POOL_SIZE) {
        old = p->e[0].obj;
        memmove(&p->e[0], &p->e[1], sizeof p->e[0] * (SJ_POOL_SIZE - 1));
        p->n--;
    }
    PoolEntry *e = &p->e[p->n++];
    e->obj = obj;
    e->lib = lib;
    e->dt = dt;
    e->ndim = op.ndim;
    e->run = p->run;
    e->bytes = bytes;
    memcpy(e->size, op.size, sizeof(int64_t) * (size_t)op.ndim);
    p->kept++;
    Py_XDECREF(old);
}

/* A new tensor of dt and sizes n over a carried storage of need..2*need bytes that only the
 * pool holds (the output it came from is gone), or NULL. */
static PyObject *take_carried(BufPool *p, DType dt, const int64_t *n, int r, int64_t need)
{
    int i = 0;
    /* the pool's storage object must be held by nobody else (torch hands out one object
     * per storage; with no tensor left on it, ours is its only reference) and its memory
     * by nothing else, not shared with another process */
    for (; i < p->ncarry; i++)
        if (p->carry_bytes[i] >= need && p->carry_bytes[i] <= 2 * need && Py_REFCNT(p->carry[i]) == 1 &&
            storage_uses(p->carry[i]) == 1 && !storage_shared(p->carry[i]))
            break;
    if (i == p->ncarry)
        return NULL;
    /* out of the array before any Python code runs (it could run this graph again) */
    PyObject *st = p->carry[i]; /* strong: now ours */
    memmove(&p->carry[i], &p->carry[i + 1], sizeof p->carry[0] * (size_t)(p->ncarry - i - 1));
    memmove(&p->carry_bytes[i], &p->carry_bytes[i + 1], sizeof p->carry_bytes[0] * (size_t)(p->ncarry - i - 1));
    p->ncarry--;
    if (interned(&str_set, "set_") < 0) {
        PyErr_Clear();
        Py_DECREF(st);
        return NULL;
    }
    const int64_t none[1] = {0};
    PyObject *t = lower_empty(LIB_TORCH, dt, none, 1); /* new: torch.empty(0, dtype=dt) */
    PyObject *zero = PyLong_FromLong(0), *shape = sj_int64_tuple(n, r); /* new */
    PyObject *res = NULL;
    if (t && zero && shape) {
        PyObject *sargs[4] = {t, st, zero, shape};
        res = PyObject_VectorcallMethod(str_set, sargs, 4 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    }
    Py_XDECREF(t);
    Py_XDECREF(shape);
    Py_XDECREF(zero);
    Py_DECREF(st); /* the tensor holds the storage now */
    if (!res) {
        PyErr_Clear();
        return NULL;
    }
    p->recycled++;
    return res;
}

void bufpool_keep_outputs(BufPool *p, PyObject *outs)
{
    if (!outs || !PyTuple_Check(outs))
        return; /* a failed run: its exception stays set */
    if (interned(&str_untyped_storage, "untyped_storage") < 0) {
        PyErr_Clear();
        return;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(outs); i++) {
        PyObject *o = PyTuple_GET_ITEM(outs, i);
        TensorMeta m;
        const char *why = NULL;
        if (!take_ours(p, o) || treader_read(o, &m, NULL, &why) != 0 || m.lib != LIB_TORCH) {
            PyErr_Clear();
            continue;
        }
        int64_t bytes = dtype_info[m.dtype].itemsize;
        for (int d = 0; d < m.ndim; d++)
            bytes *= m.size[d];
        if (bytes < SJ_CARRY_MIN_BYTES)
            continue;
        PyObject *s = PyObject_CallMethodNoArgs(o, str_untyped_storage); /* new */
        if (!s) {
            PyErr_Clear();
            continue;
        }
        if (storage_shared(s)) {
            Py_DECREF(s);
            continue;
        }
        PyObject *old = NULL;
        if (p->ncarry == SJ_POOL_CARRY) {
            old = p->carry[0];
            memmove(&p->carry[0], &p->carry[1], sizeof p->carry[0] * (SJ_POOL_CARRY - 1));
            memmove(&p->carry_bytes[0], &p->carry_bytes[1], sizeof p->carry_bytes[0] * (SJ_POOL_CARRY - 1));
            p->ncarry--;
        }
        p->carry[p->ncarry] = s;
        p->carry_bytes[p->ncarry++] = bytes;
        Py_XDECREF(old);
    }
}

/* Entry i taken out of p (its reference now the caller's). */
static PyObject *take_entry(BufPool *p, int i)
{
    PyObject *o = p->e[i].obj;
    memmove(&p->e[i], &p->e[i + 1], sizeof p->e[0] * (size_t)(p->n - i - 1));
    p->n--;
    return o;
}

/* torch tensor t (steals the reference) as sizes n[0..r): t.resize_(*n), which keeps
 * its storage when it is large enough (so no allocation and t stays the storage's only
 * tensor), or NULL when that fails (t released). */
static PyObject *resized(PyObject *t, const int64_t *n, int r)
{
    PyObject *args[SJ_MAX_RANK + 1] = {t}; /* args[1..made]: new references */
    int made = 0;
    if (interned(&str_resize, "resize_") == 0)
        for (; made < r; made++)
            if (!(args[made + 1] = PyLong_FromLongLong(n[made])))
                break;
    /* resize_() with no sizes would not mean a 0-d tensor: torch wants resize_(()) */
    PyObject *res = NULL;
    if (made == r && r > 0)
        res = PyObject_VectorcallMethod(str_resize, args, (size_t)(r + 1) | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    for (int d = 1; d <= made; d++)
        Py_DECREF(args[d]);
    if (!res)
        PyErr_Clear();
    Py_DECREF(t); /* res, when made, is t itself (a new reference) */
    return res;
}

/* A new numpy array of dt and sizes n over the memory of owner (a pooled array: the
 * reference is stolen, the new array holds it as its base), or NULL (owner released). */
static PyObject *numpy_over(PyObject *owner, DType dt, const int64_t *n, int r)
{
    if (!np_ndarray) {
        PyObject *np = PyImport_ImportModule("numpy"); /* new */
        np_ndarray = np ? PyObject_GetAttrString(np, "ndarray") : NULL;
        Py_XDECREF(np);
    }
    if (!kw_dtype_buffer)
        kw_dtype_buffer = Py_BuildValue("(ss)", "dtype", "buffer");
    PyObject *dto = np_ndarray ? lower_dtype_object(LIB_NUMPY, dt) : NULL; /* borrowed */
    PyObject *shape = dto && kw_dtype_buffer ? sj_int64_tuple(n, r) : NULL; /* new */
    PyObject *res = NULL;
    if (shape) {
        PyObject *args[3] = {shape, dto, owner};
        res = PyObject_Vectorcall(np_ndarray, args, 1, kw_dtype_buffer);
        Py_DECREF(shape);
    }
    if (!res)
        PyErr_Clear();
    Py_DECREF(owner); /* res, when made, holds it */
    return res;
}

PyObject *bufpool_take(BufPool *p, Lib lib, DType dt, const int64_t *n, int r)
{
    int64_t need = dtype_info[dt].itemsize;
    for (int d = 0; d < r; d++)
        need *= n[d];
    /* exactly these sizes, the newest first; else the smallest that fits within twice the
     * bytes, so a pool of a dynamic graph's larger sizes serves its smaller ones without
     * holding more than twice what the run needs at once */
    int fit = -1;
    for (int i = p->n - 1; i >= 0; i--) {
        PoolEntry *e = &p->e[i];
        if (e->lib != lib || e->dt != dt)
            continue;
        if (e->ndim == r && !memcmp(e->size, n, sizeof(int64_t) * (size_t)r)) {
            p->reused++;
            return take_entry(p, i);
        }
        if (r > 0 && (lib == LIB_TORCH || lend_ok) && e->bytes >= need && e->bytes <= 2 * need &&
            (fit < 0 || e->bytes < p->e[fit].bytes))
            fit = i;
    }
    if (fit >= 0 && sj_config.pool_larger_buffers) {
        PyObject *t = lib == LIB_TORCH ? resized(take_entry(p, fit), n, r) : numpy_over(take_entry(p, fit), dt, n, r);
        if (t) {
            p->reused++;
            p->resized++;
            return t;
        }
    }
    if (lib == LIB_TORCH && need >= SJ_CARRY_MIN_BYTES && p->ncarry)
        return take_carried(p, dt, n, r, need);
    return NULL;
}

void bufpool_clear(BufPool *p)
{
    /* at interpreter exit torch may already be torn down: its tensors are left to the
     * process's end (freeing one then crashes in torch's deallocator) */
    PoolEntry e[SJ_POOL_SIZE];
    PyObject *carry[SJ_POOL_CARRY];
    int n = p->n, nc = p->ncarry;
    memcpy(e, p->e, sizeof e[0] * (size_t)n);
    memcpy(carry, p->carry, sizeof carry[0] * (size_t)nc);
    p->n = p->ncarry = 0; /* empty before any release runs Python code */
    if (_Py_IsFinalizing())
        return;
    for (int i = 0; i < n; i++)
        Py_DECREF(e[i].obj);
    for (int i = 0; i < nc; i++)
        Py_DECREF(carry[i]);
}
