/* Guard leaves: the check, the explanation and the printed form of each kind, dispatched
 * through guard_kinds.def. A check and its explanation share one comparison function per
 * kind that names the first difference, so a recompile reason is always the reason the
 * check failed. */
#include "tree.h"
#include "../vocab/tensor_reader.h"
#include <math.h>
#include <string.h>
#include "../core/errors.h"
#include "../core/pyutil.h"

/* ------------------------------------------------------- shared comparisons ---- */

/* What differs between a TENSOR_MATCH leaf and a tensor's facts, first difference first. */
typedef enum {
    TM_SAME,
    TM_TYPE,
    TM_UNSUPPORTED,
    TM_LIB,
    TM_DTYPE,
    TM_RANK,
    TM_REQUIRES_GRAD,
    TM_NP_SCALAR,
    TM_SIZE,
    TM_STRIDE,
} TensorDiff;

static TensorDiff tensor_diff(const Guard *g, PyObject *v, const TensorFacts *f, int *index)
{
    *index = -1;
    if ((PyObject *)Py_TYPE(v) != g->expected)
        return TM_TYPE;
    if (!f)
        return TM_UNSUPPORTED;
    if (f->m.lib != g->meta.lib)
        return TM_LIB;
    if (f->m.dtype != g->meta.dtype)
        return TM_DTYPE;
    if (f->m.ndim != g->meta.ndim)
        return TM_RANK;
    if (f->m.requires_grad != g->meta.requires_grad)
        return TM_REQUIRES_GRAD;
    if (f->m.np_scalar != g->meta.np_scalar)
        return TM_NP_SCALAR;
    for (int i = 0; i < f->m.ndim; i++)
        if (f->m.size[i] != g->meta.size[i] && !(g->dyn >> i & 1)) {
            *index = i;
            return TM_SIZE;
        }
    if (g->dyn && g->dense) {
        int64_t want = 1;
        for (int k = 0; k < f->m.ndim; k++) {
            int i = g->perm[k];
            if (f->stride[i] != want && f->m.size[i] != 1) {
                *index = i;
                return TM_STRIDE;
            }
            want *= f->m.size[i] > 1 ? f->m.size[i] : 1;
        }
        return TM_SAME;
    }
    for (int i = 0; i < f->m.ndim; i++)
        if (f->stride[i] != g->stride[i]) {
            *index = i;
            return TM_STRIDE;
        }
    return TM_SAME;
}

typedef enum { GS_SAME, GS_GRAD, GS_DTYPE, GS_THREADS, GS_AUTOCAST } GlobalDiff;

static GlobalDiff global_diff(const Guard *g, const GlobalState *now)
{
    if (now->grad_enabled != g->gs.grad_enabled)
        return GS_GRAD;
    if (g->gs.default_dtype >= 0 && now->default_dtype != g->gs.default_dtype)
        return GS_DTYPE;
    if (g->gs.num_threads >= 0 && now->num_threads != g->gs.num_threads)
        return GS_THREADS;
    if (g->gs.autocast >= 0 && now->autocast != g->gs.autocast)
        return GS_AUTOCAST;
    return GS_SAME;
}

/* The facts of a tensor value: through the call's cache when the guard has a source. */
static const TensorFacts *facts_of(const Guard *g, PyObject *v, GuardCall *call, TensorFacts *tmp, const char **why)
{
    if (call && g->src >= 0)
        return guard_call_facts(call, g->src, v, why);
    int r = treader_read(v, &tmp->m, tmp->stride, why);
    return r == 0 ? tmp : NULL;
}

/* 1 when the pointers in vals are pairwise distinct (hash set on the stack for up to 512). */
static int all_distinct(PyObject *const *vals, int32_t n)
{
    if (n <= 8) {
        for (int32_t i = 0; i < n; i++)
            for (int32_t j = i + 1; j < n; j++)
                if (vals[i] == vals[j])
                    return 0;
        return 1;
    }
    if (n > 512) {
        for (int32_t i = 0; i < n; i++)
            for (int32_t j = i + 1; j < n; j++)
                if (vals[i] == vals[j])
                    return 0;
        return 1;
    }
    uintptr_t slots[1024];
    uint32_t mask = 15;
    while (mask + 1 < (uint32_t)n * 2)
        mask = mask * 2 + 1;
    memset(slots, 0, sizeof(uintptr_t) * (mask + 1));
    for (int32_t i = 0; i < n; i++) {
        uintptr_t p = (uintptr_t)vals[i];
        uint32_t h = (uint32_t)((p >> 4) * 0x9E3779B1u) & mask;
        while (slots[h]) {
            if (slots[h] == p)
                return 0;
            h = (h + 1) & mask;
        }
        slots[h] = p;
    }
    return 1;
}

/* ----------------------------------------------------------------- checks ---- */
/* Each check: 1 pass, 0 fail, -1 error (counted as a failure by the caller). v is the
 * value at the guard's source (borrowed), Py_None for guards without one. */

static int check_type(const Guard *g, PyObject *v, GuardCall *call)
{
    (void)call;
    return (PyObject *)Py_TYPE(v) == g->expected;
}

static int check_id(const Guard *g, PyObject *v, GuardCall *call)
{
    (void)call;
    return v == g->expected;
}

/* Two floats as values the code was specialised on: -0.0 is not 0.0 (copysign, 1 / x and
 * str tell them apart) and a NaN is any NaN (else a NaN argument recompiles every call). */
static int same_float(PyObject *a, PyObject *b)
{
    double x = PyFloat_AS_DOUBLE(a), y = PyFloat_AS_DOUBLE(b);
    return x == y ? signbit(x) == signbit(y) : (x != x && y != y);
}

static int check_equals(const Guard *g, PyObject *v, GuardCall *call)
{
    (void)call;
    if (v == g->expected)
        return 1;
    if (Py_TYPE(v) != Py_TYPE(g->expected))
        return 0;
    if (PyFloat_CheckExact(v))
        return same_float(v, g->expected);
    return PyObject_RichCompareBool(v, g->expected, Py_EQ);
}

static int check_tensor(const Guard *g, PyObject *v, GuardCall *call)
{
    if ((PyObject *)Py_TYPE(v) != g->expected)
        return 0;
    TensorFacts tmp;
    const char *why = NULL;
    const TensorFacts *f = facts_of(g, v, call, &tmp, &why);
    if (!f && !why)
        return -1;
    int index;
    return tensor_diff(g, v, f, &index) == TM_SAME;
}

static int check_seq_len(const Guard *g, PyObject *v, GuardCall *call)
{
    (void)call;
    if ((PyObject *)Py_TYPE(v) != g->expected)
        return 0;
    if (PyList_Check(v) || PyTuple_Check(v))
        return Py_SIZE(v) == g->len;
    Py_ssize_t n = PyObject_Length(v);
    return n < 0 ? -1 : n == g->len;
}

static int check_dict_keys(const Guard *g, PyObject *v, GuardCall *call)
{
    (void)call;
    if (!PyDict_Check(v) || PyDict_GET_SIZE(v) != PyTuple_GET_SIZE(g->expected))
        return 0;
    if (PyODict_Check(v)) {
        /* an OrderedDict's order is its own (move_to_end does not reorder its dict) */
        PyObject *keys = PySequence_List(v);
        if (!keys)
            return -1;
        int r = PyList_GET_SIZE(keys) == PyTuple_GET_SIZE(g->expected);
        for (Py_ssize_t j = 0; r == 1 && j < PyList_GET_SIZE(keys); j++) {
            PyObject *k = PyList_GET_ITEM(keys, j), *want = PyTuple_GET_ITEM(g->expected, j);
            r = k == want ? 1 : PyObject_RichCompareBool(k, want, Py_EQ);
        }
        Py_DECREF(keys);
        return r;
    }
    Py_ssize_t pos = 0, i = 0;
    PyObject *k, *val;
    while (PyDict_Next(v, &pos, &k, &val)) {
        if (i >= PyTuple_GET_SIZE(g->expected))
            return 0;   /* a key's __eq__ grew the dict while we looked */
        PyObject *want = PyTuple_GET_ITEM(g->expected, i++);
        if (k != want) {
            int eq = PyObject_RichCompareBool(k, want, Py_EQ);
            if (eq <= 0)
                return eq;
        }
    }
    return 1;
}

static int check_dict_len(const Guard *g, PyObject *v, GuardCall *call)
{
    (void)call;
    return PyDict_Check(v) && PyDict_GET_SIZE(v) == g->len;
}

static int check_dict_ver(const Guard *g, PyObject *v, GuardCall *call)
{
    (void)call;
    return PyDict_Check(v) && readcache_dict_tag(v) == g->version;
}

static int check_global(const Guard *g, PyObject *v, GuardCall *call)
{
    (void)v;
    (void)call;
    GlobalState now;   /* read once per call: the leaf is interned and its result cached */
    if (guards_read_global_state(&now) < 0)
        return -1;
    return global_diff(g, &now) == GS_SAME;
}

/* BACKEND_MATCH: the call's compile options key (backend, fullgraph, dynamic, extras;
 * see shapejit/api.py) equals the one the entry was compiled with. A tuple compares its
 * items by identity first, so the usual case (the same compiled function) costs one
 * pointer comparison; an error while comparing is a failure. */
static int check_backend(const Guard *g, PyObject *v, GuardCall *call)
{
    (void)v;
    if (!call->options)
        return 0;
    if (call->options == g->expected)
        return 1;
    return PyObject_RichCompareBool(g->expected, call->options, Py_EQ);
}

/* HASATTR: the guard's source is base.name; v is base (leaf_value). len: 1 when base had
 * the attribute at capture, 0 when it did not. The attribute is read as its source (the
 * value hasattr computes and drops): a present one is then memoized for the leaves under
 * it, and reads through the source's read cache. */
static int check_hasattr(const Guard *g, PyObject *v, GuardCall *call)
{
    SourceEntry *e = &call->t->src.e[g->src];
    if (g->len == 0 && readcache_attr_absent(&e->rc, v))
        return 1;
    if (sources_resolve(&call->t->src, g->src, call->fv, call->memo))
        return g->len == 1;
    if (!PyErr_ExceptionMatches(PyExc_AttributeError))
        return -1;
    sj_err_clear();
    readcache_absent_fill(&e->rc, v, e->key);
    return g->len == 0;
}

/* DICT_CONTAINS: the guard's source is base[key]; v is base, a dict. len: 1 when the key
 * was there at capture, 0 when it was not. A dict read by lookups alone is guarded by the
 * keys it looked up, not by all of its keys (os.environ's, read by os.environ.get). */
static int check_dict_contains(const Guard *g, PyObject *v, GuardCall *call)
{
    if (!PyDict_Check(v))
        return 0;
    int r = PyDict_Contains(v, call->t->src.e[g->src].key);
    return r < 0 ? -1 : r == g->len;
}

/* CLASS_ATTR: the source base.name names an attribute read from base's class (a method, a
 * property, a static or class method); v is base. The class (and its bases) must still give
 * the same object, and with len 1 (not a data descriptor) the instance must not have an
 * attribute of that name of its own, which would win. */
static int check_class_attr(const Guard *g, PyObject *v, GuardCall *call)
{
    PyObject *name = call->t->src.e[g->src].key;
    if (_PyType_Lookup(Py_TYPE(v), name) != g->expected)
        return 0;
    if (g->len) {
        PyObject **dp = _PyObject_GetDictPtr(v);
        PyObject *own = dp && *dp && PyDict_Check(*dp) ? PyDict_GetItemWithError(*dp, name) : NULL;
        if (own)
            return 0;
        if (PyErr_Occurred())
            return -1;
    }
    return 1;
}

static int check_same(const Guard *g, PyObject *v, GuardCall *call)
{
    return call->memo[g->src2] == v;
}

static int check_distinct(const Guard *g, PyObject *v, GuardCall *call)
{
    (void)v;
    PyObject *small[64];
    PyObject **vals = g->nsrcs <= 64 ? small : PyMem_Malloc(sizeof(PyObject *) * (size_t)g->nsrcs);
    if (!vals) {
        PyErr_NoMemory();
        return -1;
    }
    for (int32_t i = 0; i < g->nsrcs; i++)
        vals[i] = call->memo[g->srcs[i]];
    int r = all_distinct(vals, g->nsrcs);
    if (vals != small)
        PyMem_Free(vals);
    return r;
}

/* ------------------------------------------------------------ explanations ---- */
/* New str: why the leaf fails; name is the short name of its source ("x" for L['x']). */

static PyObject *explain_type(const Guard *g, PyObject *v, PyObject *name, GuardCall *call)
{
    (void)call;
    return PyUnicode_FromFormat("type(%U) changed: expected %s, actual %s", name,
                                ((PyTypeObject *)g->expected)->tp_name, Py_TYPE(v)->tp_name);
}

static PyObject *explain_id(const Guard *g, PyObject *v, PyObject *name, GuardCall *call)
{
    (void)call;
    (void)g;
    return PyUnicode_FromFormat("%U is a different object now (%.80R)", name, v);
}

static PyObject *explain_equals(const Guard *g, PyObject *v, PyObject *name, GuardCall *call)
{
    (void)call;
    if (Py_TYPE(v) != Py_TYPE(g->expected))
        return PyUnicode_FromFormat("%U == %.80R (type %s), expected %.80R (type %s)", name, v, Py_TYPE(v)->tp_name,
                                    g->expected, Py_TYPE(g->expected)->tp_name);
    return PyUnicode_FromFormat("%U == %.80R, expected %.80R", name, v, g->expected);
}

static const char *dtype_prefix(const Guard *g)
{
    return g->meta.lib == LIB_TORCH ? "torch." : "";
}

/* Size and stride reasons of nn.Module parameters end with what to do about them. */
static PyObject *with_param_hint(PyObject *reason, PyObject *name)
{
    if (!reason)
        return NULL;
    PyObject *needle = PyUnicode_FromString("._parameters[");
    Py_ssize_t at = needle ? PyUnicode_Find(name, needle, 0, PyUnicode_GET_LENGTH(name), 1) : -2;
    Py_XDECREF(needle);
    if (at == -2) {
        Py_DECREF(reason);
        return NULL;
    }
    if (at < 0)
        return reason;
    PyObject *r = PyUnicode_FromFormat("%U. Parameters are compiled with static shapes "
                                       "(config.force_parameter_static_shapes = True); set it to False to let "
                                       "their sizes be dynamic instead of recompiling for each",
                                       reason);
    Py_DECREF(reason);
    return r;
}

static PyObject *explain_tensor(const Guard *g, PyObject *v, PyObject *name, GuardCall *call)
{
    TensorFacts tmp;
    const char *why = NULL;
    const TensorFacts *f = (PyObject *)Py_TYPE(v) == g->expected ? facts_of(g, v, call, &tmp, &why) : NULL;
    if ((PyObject *)Py_TYPE(v) == g->expected && !f && !why)
        return NULL;
    int i;
    switch (tensor_diff(g, v, f, &i)) {
    case TM_TYPE:
        return PyUnicode_FromFormat("tensor '%U' type mismatch. expected %s, actual %s", name,
                                    ((PyTypeObject *)g->expected)->tp_name, Py_TYPE(v)->tp_name);
    case TM_UNSUPPORTED:
        return PyUnicode_FromFormat("tensor '%U' is no longer supported: %s", name, why);
    case TM_LIB:
        return PyUnicode_FromFormat("tensor '%U' changed library", name);
    case TM_DTYPE:
        return PyUnicode_FromFormat("tensor '%U' dtype mismatch. expected %s%s, actual %s%s", name, dtype_prefix(g),
                                    dtype_info[g->meta.dtype].name, dtype_prefix(g), dtype_info[f->m.dtype].name);
    case TM_RANK:
        return PyUnicode_FromFormat("tensor '%U' rank mismatch. expected %d, actual %d", name, (int)g->meta.ndim,
                                    (int)f->m.ndim);
    case TM_REQUIRES_GRAD:
        return PyUnicode_FromFormat("tensor '%U' requires_grad mismatch. expected requires_grad=%d", name,
                                    (int)g->meta.requires_grad);
    case TM_NP_SCALAR:
        return PyUnicode_FromFormat("tensor '%U' changed between numpy scalar and array", name);
    case TM_SIZE:
        return with_param_hint(PyUnicode_FromFormat("tensor '%U' size mismatch at index %d. expected %lld, actual %lld",
                                                    name, i, (long long)g->meta.size[i], (long long)f->m.size[i]),
                               name);
    case TM_STRIDE:
        if (g->dyn && g->dense)
            return PyUnicode_FromFormat("tensor '%U' stride mismatch at index %d: the strides no longer give the "
                                        "dense layout the entry was compiled for (actual %lld)",
                                        name, i, (long long)f->stride[i]);
        return with_param_hint(
            PyUnicode_FromFormat("tensor '%U' stride mismatch at index %d. expected %lld, actual %lld", name, i,
                                 (long long)g->stride[i], (long long)f->stride[i]),
            name);
    case TM_SAME:
        break;
    }
    return PyUnicode_FromFormat("tensor '%U' matches now", name);
}

static PyObject *explain_seq_len(const Guard *g, PyObject *v, PyObject *name, GuardCall *call)
{
    (void)call;
    if ((PyObject *)Py_TYPE(v) != g->expected)
        return PyUnicode_FromFormat("type(%U) changed: expected %s, actual %s", name,
                                    ((PyTypeObject *)g->expected)->tp_name, Py_TYPE(v)->tp_name);
    Py_ssize_t n = PyObject_Length(v);
    if (n < 0)
        return NULL;
    return PyUnicode_FromFormat("len(%U) == %zd, expected %zd", name, n, g->len);
}

static PyObject *explain_dict_keys(const Guard *g, PyObject *v, PyObject *name, GuardCall *call)
{
    (void)call;
    if (!PyDict_Check(v))
        return PyUnicode_FromFormat("%U is no longer a dict (%s)", name, Py_TYPE(v)->tp_name);
    PyObject *keys = PyODict_Check(v) ? PySequence_List(v) : PyDict_Keys(v);   /* in the order checked */
    if (!keys)
        return NULL;
    PyObject *r = PyUnicode_FromFormat("keys of %U changed: expected %.200R, actual %.200R", name, g->expected, keys);
    Py_DECREF(keys);
    return r;
}

static PyObject *explain_dict_len(const Guard *g, PyObject *v, PyObject *name, GuardCall *call)
{
    (void)call;
    if (!PyDict_Check(v))
        return PyUnicode_FromFormat("%U is no longer a dict (%s)", name, Py_TYPE(v)->tp_name);
    return PyUnicode_FromFormat("len(%U) == %zd, expected %zd", name, PyDict_GET_SIZE(v), g->len);
}

static PyObject *explain_dict_ver(const Guard *g, PyObject *v, PyObject *name, GuardCall *call)
{
    (void)call;
    (void)g;
    if (!PyDict_Check(v))
        return PyUnicode_FromFormat("%U is no longer a dict (%s)", name, Py_TYPE(v)->tp_name);
    return PyUnicode_FromFormat("%U was modified (dict version changed)", name);
}

static PyObject *explain_global(const Guard *g, PyObject *v, PyObject *name, GuardCall *call)
{
    (void)v;
    (void)name;
    (void)call;
    GlobalState now;
    if (guards_read_global_state(&now) < 0)
        return NULL;
    switch (global_diff(g, &now)) {
    case GS_GRAD:
        return PyUnicode_FromFormat("GLOBAL_STATE changed: grad_mode (expected %s, actual %s)",
                                    g->gs.grad_enabled ? "enabled" : "disabled",
                                    now.grad_enabled ? "enabled" : "disabled");
    case GS_DTYPE:
        return PyUnicode_FromFormat("GLOBAL_STATE changed: default_dtype (expected torch.%s, actual torch.%s)",
                                    dtype_info[g->gs.default_dtype].name,
                                    now.default_dtype >= 0 ? dtype_info[now.default_dtype].name : "?");
    case GS_THREADS:
        return PyUnicode_FromFormat("GLOBAL_STATE changed: num_threads (expected %d, actual %d)", g->gs.num_threads,
                                    now.num_threads);
    case GS_AUTOCAST:
        return PyUnicode_FromFormat("GLOBAL_STATE changed: autocast (expected %s, actual %s)",
                                    g->gs.autocast ? "enabled" : "disabled", now.autocast ? "enabled" : "disabled");
    case GS_SAME:
        break;
    }
    return PyUnicode_FromString("GLOBAL_STATE matches now");
}

/* "backend='name', fullgraph=False, dynamic=None" of an options key (new str). */
static PyObject *describe_options(PyObject *key)
{
    if (!key || !PyTuple_Check(key) || PyTuple_GET_SIZE(key) < 4)
        return PyUnicode_FromFormat("%R", key ? key : Py_None);
    PyObject *backend = PyTuple_GET_ITEM(key, 0);
    PyObject *name = PyObject_GetAttrString(backend, "__qualname__");
    if (!name || !PyUnicode_Check(name)) {
        Py_XDECREF(name);
        sj_err_clear();
        name = PyUnicode_FromString(Py_TYPE(backend)->tp_name);
        if (!name)
            return NULL;
    }
    PyObject *extra = PyTuple_GET_ITEM(key, 3);   /* ((name, value), ...) */
    PyObject *r = PyTuple_Check(extra) && PyTuple_GET_SIZE(extra)
                      ? PyUnicode_FromFormat("backend=%R, fullgraph=%R, dynamic=%R, %R", name, PyTuple_GET_ITEM(key, 1),
                                             PyTuple_GET_ITEM(key, 2), extra)
                      : PyUnicode_FromFormat("backend=%R, fullgraph=%R, dynamic=%R", name, PyTuple_GET_ITEM(key, 1),
                                             PyTuple_GET_ITEM(key, 2));
    Py_DECREF(name);
    return r;
}

static PyObject *explain_backend(const Guard *g, PyObject *v, PyObject *name, GuardCall *call)
{
    (void)v;
    (void)name;
    PyObject *was = describe_options(g->expected);
    PyObject *now = was ? describe_options(call->options) : NULL;
    PyObject *r =
        now ? PyUnicode_FromFormat("BACKEND_MATCH failure: compiled with %U; called with %U", was, now) : NULL;
    Py_XDECREF(was);
    Py_XDECREF(now);
    return r;
}

static PyObject *explain_hasattr(const Guard *g, PyObject *v, PyObject *name, GuardCall *call)
{
    (void)v;
    (void)name;
    const SourceEntry *e = &call->t->src.e[g->src];
    return PyUnicode_FromFormat("hasattr(%U, %R) is %s now", call->t->src.e[e->base].repr, e->key,
                                g->len == 1 ? "False" : "True");
}

static PyObject *explain_dict_contains(const Guard *g, PyObject *v, PyObject *name, GuardCall *call)
{
    (void)name;
    const SourceEntry *e = &call->t->src.e[g->src];
    if (!PyDict_Check(v))
        return PyUnicode_FromFormat("%U is a %s now, not a dict", call->t->src.e[e->base].repr, Py_TYPE(v)->tp_name);
    return PyUnicode_FromFormat("%R in %U is %s now", e->key, call->t->src.e[e->base].repr,
                                g->len == 1 ? "False" : "True");
}

static PyObject *explain_class_attr(const Guard *g, PyObject *v, PyObject *name, GuardCall *call)
{
    (void)name;
    const SourceEntry *e = &call->t->src.e[g->src];
    PyObject *base = call->t->src.e[e->base].repr;
    if (_PyType_Lookup(Py_TYPE(v), e->key) != g->expected)
        return PyUnicode_FromFormat("type(%U).%U is a different object now", base, e->key);
    return PyUnicode_FromFormat("%U.%U is now an attribute of the instance", base, e->key);
}

static PyObject *explain_same(const Guard *g, PyObject *v, PyObject *name, GuardCall *call)
{
    (void)g;
    (void)v;
    (void)call;
    return PyUnicode_FromFormat("%U is no longer the same object as %U", name, call->t->src.e[g->src2].repr);
}

static PyObject *explain_distinct(const Guard *g, PyObject *v, PyObject *name, GuardCall *call)
{
    (void)v;
    (void)name;
    for (int32_t i = 0; i < g->nsrcs; i++)
        for (int32_t j = i + 1; j < g->nsrcs; j++)
            if (call->memo[g->srcs[i]] == call->memo[g->srcs[j]])
                return PyUnicode_FromFormat("tensor inputs that were distinct now alias each other: %U is %U",
                                            call->t->src.e[g->srcs[i]].repr, call->t->src.e[g->srcs[j]].repr);
    return PyUnicode_FromString("NO_TENSOR_ALIASING matches now");
}

/* ---------------------------------------------------------- printed forms ---- */

static PyObject *format_type(const Guard *g, PyObject *src, const SourceTable *t)
{
    (void)t;
    return PyUnicode_FromFormat("TYPE_MATCH: ___check_type_id(%U, %s)", src, ((PyTypeObject *)g->expected)->tp_name);
}

static PyObject *format_id(const Guard *g, PyObject *src, const SourceTable *t)
{
    (void)t;
    return PyUnicode_FromFormat("ID_MATCH: ___check_obj_id(%U, %p)", src, (void *)g->expected);
}

static PyObject *format_equals(const Guard *g, PyObject *src, const SourceTable *t)
{
    (void)t;
    return PyUnicode_FromFormat("EQUALS_MATCH: %U == %.80R", src, g->expected);
}

static PyObject *format_tensor(const Guard *g, PyObject *src, const SourceTable *t)
{
    (void)t;
    char sz[256], st[256];
    size_t a = 0, b = 0;
    sz[0] = st[0] = 0;
    uint8_t stride_dyn = 0;   /* strides that depend on a dynamic size print as None */
    if (g->dyn && g->dense) {
        int inner_dyn = 0;
        for (int k = 0; k < g->meta.ndim; k++) {
            int i = g->perm[k];
            if (inner_dyn)
                stride_dyn |= (uint8_t)(1u << i);
            inner_dyn |= g->dyn >> i & 1;
        }
    }
    for (int i = 0; i < g->meta.ndim && a < sizeof sz && b < sizeof st; i++) {
        if (g->dyn >> i & 1)
            a += (size_t)snprintf(sz + a, sizeof sz - a, "%sNone", i ? ", " : "");
        else
            a += (size_t)snprintf(sz + a, sizeof sz - a, "%s%lld", i ? ", " : "", (long long)g->meta.size[i]);
        if (b < sizeof st && (stride_dyn >> i & 1))
            b += (size_t)snprintf(st + b, sizeof st - b, "%sNone", i ? ", " : "");
        else if (b < sizeof st)
            b += (size_t)snprintf(st + b, sizeof st - b, "%s%lld", i ? ", " : "", (long long)g->stride[i]);
    }
    return PyUnicode_FromFormat(
        "TENSOR_MATCH: check_tensor(%U, %s, %s%s, device=cpu, requires_grad=%s, size=[%s], stride=[%s])", src,
        ((PyTypeObject *)g->expected)->tp_name, dtype_prefix(g), dtype_info[g->meta.dtype].name,
        g->meta.requires_grad ? "True" : "False", sz, st);
}

static PyObject *format_seq_len(const Guard *g, PyObject *src, const SourceTable *t)
{
    (void)t;
    return PyUnicode_FromFormat("SEQUENCE_LENGTH: check_type_and_len(%U, %s, %zd)", src,
                                ((PyTypeObject *)g->expected)->tp_name, g->len);
}

static PyObject *format_dict_keys(const Guard *g, PyObject *src, const SourceTable *t)
{
    (void)t;
    return PyUnicode_FromFormat("DICT_KEYS: list(%U.keys()) == %.200R", src, g->expected);
}

static PyObject *format_dict_len(const Guard *g, PyObject *src, const SourceTable *t)
{
    (void)t;
    return PyUnicode_FromFormat("DICT_LENGTH: len(%U) == %zd", src, g->len);
}

static PyObject *format_dict_ver(const Guard *g, PyObject *src, const SourceTable *t)
{
    (void)t;
    return PyUnicode_FromFormat("DICT_VERSION: ___dict_version(%U) == %llu", src, (unsigned long long)g->version);
}

static PyObject *format_global(const Guard *g, PyObject *src, const SourceTable *t)
{
    (void)t;
    (void)src;
    char threads[32];
    if (g->gs.num_threads >= 0)
        snprintf(threads, sizeof threads, "%d", g->gs.num_threads);
    else
        strcpy(threads, "n/a");
    return PyUnicode_FromFormat("GLOBAL_STATE: ___check_global_state(grad_mode=%s, default_dtype=%s%s, num_threads=%s, "
                                "autocast=%s)",
                                g->gs.grad_enabled ? "True" : "False", g->gs.default_dtype >= 0 ? "torch." : "",
                                g->gs.default_dtype >= 0 ? dtype_info[g->gs.default_dtype].name : "n/a", threads,
                                g->gs.autocast < 0 ? "n/a"
                                : g->gs.autocast   ? "True"
                                                   : "False");
}

static PyObject *format_backend(const Guard *g, PyObject *src, const SourceTable *t)
{
    (void)src;
    (void)t;
    PyObject *d = describe_options(g->expected);
    PyObject *r = d ? PyUnicode_FromFormat("BACKEND_MATCH: ___check_current_backend(%U)", d) : NULL;
    Py_XDECREF(d);
    return r;
}

static PyObject *format_hasattr(const Guard *g, PyObject *src, const SourceTable *t)
{
    (void)src;
    const SourceEntry *e = &t->e[g->src];
    return PyUnicode_FromFormat("HASATTR: hasattr(%U, %R) == %s", t->e[e->base].repr, e->key,
                                g->len == 1 ? "True" : "False");
}

static PyObject *format_dict_contains(const Guard *g, PyObject *src, const SourceTable *t)
{
    (void)src;
    const SourceEntry *e = &t->e[g->src];
    return PyUnicode_FromFormat("DICT_CONTAINS: %s%R in %U", g->len == 1 ? "" : "not ", e->key, t->e[e->base].repr);
}

static PyObject *format_class_attr(const Guard *g, PyObject *src, const SourceTable *t)
{
    (void)src;
    const SourceEntry *e = &t->e[g->src];
    return PyUnicode_FromFormat("CLASS_ATTR: type(%U).%U is %.80R%s", t->e[e->base].repr, e->key, g->expected,
                                g->len ? ", not shadowed by the instance" : "");
}

static PyObject *format_same(const Guard *g, PyObject *src, const SourceTable *t)
{
    return PyUnicode_FromFormat("OBJECT_ALIASING: %U is %U", src, t->e[g->src2].repr);
}

static PyObject *format_distinct(const Guard *g, PyObject *src, const SourceTable *t)
{
    (void)src;
    PyObject *parts = PyList_New(g->nsrcs);
    if (!parts)
        return NULL;
    for (int32_t i = 0; i < g->nsrcs; i++)
        PyList_SET_ITEM(parts, i, Py_NewRef(t->e[g->srcs[i]].repr));
    PyObject *j = sj_join(", ", parts);
    if (!j)
        return NULL;
    PyObject *r = PyUnicode_FromFormat("NO_TENSOR_ALIASING: check_no_aliasing(%U)", j);
    Py_DECREF(j);
    return r;
}

/* ------------------------------------------------------------ shape env ---- */

static int check_shape(const Guard *g, PyObject *v, GuardCall *call)
{
    (void)v;
    int64_t r;
    int bad = 0;
    if (shape_guard_eval(g, call, &r, &bad) < 0)
        return bad ? 0 : -1;
    return r != 0;
}

static PyObject *explain_shape(const Guard *g, PyObject *v, PyObject *name, GuardCall *call)
{
    (void)v;
    (void)name;
    PyObject *vals = PyList_New(0);
    if (!vals)
        return NULL;
    for (int32_t i = 0; i < g->nsrcs; i++) {
        PyObject *x = sources_resolve(&call->t->src, g->srcs[i], call->fv, call->memo);
        PyObject *s = x ? PyUnicode_FromFormat("%U = %S", call->t->src.e[g->srcs[i]].repr, x) : NULL;
        if (!s || PyList_Append(vals, s) < 0) {
            Py_XDECREF(s);
            Py_DECREF(vals);
            return NULL;
        }
        Py_DECREF(s);
    }
    PyObject *joined = sj_join(", ", vals);
    if (!joined)
        return NULL;
    PyObject *r = PyUnicode_FromFormat("%U  (%U)", PyTuple_GET_ITEM(g->expected, 1), joined);
    Py_DECREF(joined);
    return r;
}

static PyObject *format_shape(const Guard *g, PyObject *src, const SourceTable *t)
{
    (void)src;
    (void)t;
    return PyUnicode_FromFormat("SHAPE_ENV: %U", PyTuple_GET_ITEM(g->expected, 1));
}

/* SCALAR_RELATION: the truth of a condition computed from one dynamic Python number (a
 * float read from the frame) is what the capture decided. The recipe is a tuple (fn, args...)
 * whose args are recipes, Ellipsis for the number, or constants; it reruns the operators
 * the capture recorded (operator.gt, operator.mul, ...) on the live value. */
static PyObject *run_recipe(PyObject *r, PyObject *v)
{
    if (r == Py_Ellipsis)
        return Py_NewRef(v);
    if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) < 1)
        return Py_NewRef(r);
    Py_ssize_t n = PyTuple_GET_SIZE(r) - 1;
    PyObject *args[4];
    if (n > 4) {
        PyErr_SetString(PyExc_SystemError, "scalar guard recipe with too many operands");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (!(args[i] = run_recipe(PyTuple_GET_ITEM(r, i + 1), v))) {
            while (i-- > 0)
                Py_DECREF(args[i]);
            return NULL;
        }
    PyObject *res = PyObject_Vectorcall(PyTuple_GET_ITEM(r, 0), args, (size_t)n, NULL);
    for (Py_ssize_t i = 0; i < n; i++)
        Py_DECREF(args[i]);
    return res;
}

/* 1 when the condition has the truth recorded, 0 when not or when computing it raises an
 * Exception (that value is then not one this entry was made for), -1 on other errors. */
static int check_scalar(const Guard *g, PyObject *v, GuardCall *call)
{
    (void)call;
    PyObject *r = run_recipe(PyTuple_GET_ITEM(g->expected, 0), v);
    int t = r ? PyObject_IsTrue(r) : -1;
    Py_XDECREF(r);
    if (t < 0) {
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            return -1;
        sj_err_clear();
        return 0;
    }
    return t == PyObject_IsTrue(PyTuple_GET_ITEM(g->expected, 2));
}

static PyObject *explain_scalar(const Guard *g, PyObject *v, PyObject *name, GuardCall *call)
{
    (void)call;
    return PyUnicode_FromFormat("%U is %S, expected %S  (%U = %.80R)", PyTuple_GET_ITEM(g->expected, 1),
                                PyObject_IsTrue(PyTuple_GET_ITEM(g->expected, 2)) ? Py_False : Py_True,
                                PyTuple_GET_ITEM(g->expected, 2), name, v);
}

static PyObject *format_scalar(const Guard *g, PyObject *src, const SourceTable *t)
{
    (void)src;
    (void)t;
    return PyUnicode_FromFormat("SCALAR_RELATION: (%U) is %S", PyTuple_GET_ITEM(g->expected, 1),
                                PyTuple_GET_ITEM(g->expected, 2));
}

/* ------------------------------------------------------------------ tables ---- */

typedef int (*CheckFn)(const Guard *, PyObject *, GuardCall *);
typedef PyObject *(*ExplainFn)(const Guard *, PyObject *, PyObject *, GuardCall *);
typedef PyObject *(*FormatFn)(const Guard *, PyObject *, const SourceTable *);

static const struct {
    const char *name;
    CheckFn check;
    ExplainFn explain;
    FormatFn format;
} kinds[GK_COUNT] = {
#define X(e, name, check, explain, format) [e] = {name, check, explain, format},
#include "guard_kinds.def"
#undef X
};

/* ------------------------------------------------------------------ the set ---- */

static void guard_release(Guard *g)
{
    Py_CLEAR(g->expected);
    Py_CLEAR(g->where);
    PyMem_Free(g->srcs);
    g->srcs = NULL;
}

void guards_clear(GuardSet *s)
{
    for (int32_t i = 0; i < s->n; i++)
        guard_release(&s->g[i]);
    PyMem_Free(s->g);
    s->g = NULL;
    s->n = s->cap = 0;
}

int32_t guards_append(GuardSet *s, const Guard *g)
{
    if (sj_grow((void **)&s->g, &s->cap, s->n + 1, sizeof(Guard), 16) < 0)
        return -1;
    Guard *d = &s->g[s->n];
    *d = *g;
    d->srcs = NULL;
    if (g->nsrcs) {
        d->srcs = PyMem_Malloc(sizeof(int32_t) * (size_t)g->nsrcs);
        if (!d->srcs) {
            PyErr_NoMemory();
            return -1;
        }
        memcpy(d->srcs, g->srcs, sizeof(int32_t) * (size_t)g->nsrcs);
    }
    Py_XINCREF(d->expected);
    Py_XINCREF(d->where);
    return s->n++;
}

int guards_add(GuardSet *s, const Guard *g)
{
    for (int32_t i = 0; i < s->n; i++) {
        const Guard *o = &s->g[i];
        if (o->kind == g->kind && o->src == g->src && o->src2 == g->src2 && g->kind != GK_DISTINCT &&
            ((g->kind != GK_SHAPE_ENV && g->kind != GK_SCALAR_REL) || guards_same(o, g)))
            return 0;
    }
    return guards_append(s, g) < 0 ? -1 : 0;
}

int guards_same(const Guard *a, const Guard *b)
{
    if (a->kind != b->kind || a->src != b->src || a->src2 != b->src2 || a->len != b->len || a->version != b->version ||
        a->nsrcs != b->nsrcs)
        return 0;
    switch ((GuardKind)a->kind) {
    case GK_TYPE_MATCH:
    case GK_ID_MATCH:
    case GK_SEQ_LENGTH:
        return a->expected == b->expected;
    case GK_EQUALS_MATCH:
        if (a->expected && b->expected && PyFloat_CheckExact(a->expected) && PyFloat_CheckExact(b->expected))
            return same_float(a->expected, b->expected);   /* as check_equals compares */
        return sources_same_key(a->expected, b->expected);
    case GK_DICT_KEYS:
        return sources_same_key(a->expected, b->expected);
    case GK_TENSOR_MATCH:
        if (a->expected != b->expected || a->meta.lib != b->meta.lib || a->meta.dtype != b->meta.dtype ||
            a->meta.ndim != b->meta.ndim || a->meta.requires_grad != b->meta.requires_grad ||
            a->meta.np_scalar != b->meta.np_scalar)
            return 0;
        if (a->dyn != b->dyn || a->dense != b->dense)
            return 0;
        for (int i = 0; i < a->meta.ndim; i++)
            if ((!(a->dyn >> i & 1) && a->meta.size[i] != b->meta.size[i]) ||
                (a->dense ? a->perm[i] != b->perm[i] : a->stride[i] != b->stride[i]))
                return 0;
        return 1;
    case GK_SHAPE_ENV:
    case GK_SCALAR_REL: {
        int eq = PyObject_RichCompareBool(a->expected, b->expected, Py_EQ);
        if (eq < 0)
            sj_err_clear();
        return eq == 1;
    }
    case GK_GLOBAL_STATE:
        return memcmp(&a->gs, &b->gs, sizeof a->gs) == 0;
    case GK_BACKEND_MATCH:
        return a->expected == b->expected;   /* interned per options object; equal keys share entries anyway */
    case GK_DISTINCT:
        return memcmp(a->srcs, b->srcs, sizeof(int32_t) * (size_t)a->nsrcs) == 0;
    case GK_DICT_LENGTH:
    case GK_DICT_VERSION:
    case GK_SAME_OBJECT:
    case GK_HASATTR:   /* the source names the attribute; len says whether it was there */
    case GK_DICT_CONTAINS:   /* the source names the item; len says whether it was there */
        return 1;
    case GK_CLASS_ATTR:
        return a->expected == b->expected && a->len == b->len;
    case GK_COUNT:
        break;
    }
    return 0;
}

/* Resolve what leaf g looks at; borrowed or NULL (exception set). Py_None for no source. */
static PyObject *leaf_value(const Guard *g, const SourceTable *t, GuardCall *call)
{
    if (g->kind == GK_DISTINCT || g->kind == GK_SHAPE_ENV) {
        for (int32_t i = 0; i < g->nsrcs; i++)
            if (!sources_resolve(t, g->srcs[i], call->fv, call->memo))
                return NULL;
        return Py_None;
    }
    if (g->kind == GK_SAME_OBJECT && !sources_resolve(t, g->src2, call->fv, call->memo))
        return NULL;
    if (g->kind == GK_HASATTR || g->kind == GK_CLASS_ATTR ||
        g->kind == GK_DICT_CONTAINS)   /* they look at base, not base.name */
        return sources_resolve(t, t->e[g->src].base, call->fv, call->memo);
    if (g->src < 0)
        return Py_None;
    return sources_resolve(t, g->src, call->fv, call->memo);
}

int guards_check_one(const Guard *g, const SourceTable *t, GuardCall *call)
{
    PyObject *v = leaf_value(g, t, call);
    return v ? kinds[g->kind].check(g, v, call) : -1;
}

/* "x" for L['x'], else the whole source. New reference. */
static PyObject *short_name(const SourceTable *t, int32_t src)
{
    if (src < 0)
        return PyUnicode_FromString("<global state>");
    const SourceEntry *e = &t->e[src];
    if (e->kind == SRC_LOCAL || e->kind == SRC_FREEVAR)
        return Py_NewRef(e->key);
    return Py_NewRef(e->repr);
}

PyObject *guards_explain_one(const Guard *g, const SourceTable *t, GuardCall *call)
{
    int in_range = g->src < call->nsrc && g->src2 < call->nsrc;
    for (int32_t i = 0; i < g->nsrcs; i++)
        in_range &= g->srcs[i] < call->nsrc;
    if (!in_range)
        return PyUnicode_FromString("(a guard added while this call was checked)");
    PyObject *name = short_name(t, g->src);
    if (!name)
        return NULL;
    PyObject *v = leaf_value(g, t, call);
    PyObject *r;
    if (!v && sj_err_is_interrupt()) {
        sj_err_clear();   /* kept aside: the hook raises it */
        r = PyUnicode_FromFormat("%U could not be read: interrupted", name);
    } else if (!v) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        PyErr_NormalizeException(&et, &ev, &tb);
        r = PyUnicode_FromFormat("%U could not be read: %s: %S", name, et ? ((PyTypeObject *)et)->tp_name : "?",
                                 ev ? ev : Py_None);
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
    } else {
        r = kinds[g->kind].explain(g, v, name, call);
        if (!r) {
            sj_err_clear();
            r = PyUnicode_FromFormat("%s failed on %U", kinds[g->kind].name, name);
        }
    }
    Py_DECREF(name);
    return r;
}

PyObject *guards_format_one(const Guard *g, const SourceTable *t)
{
    PyObject *src = g->src >= 0 ? t->e[g->src].repr : Py_None;
    return kinds[g->kind].format(g, src, t);
}
