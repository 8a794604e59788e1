/* Wrapping live objects into vars: what each kind of input becomes, and the guards that
 * keep that decision valid on later calls. */
#include "capture.h"
#include "../vocab/libs.h"
#include "../core/log.h"
#include "../core/errors.h"
#include "../core/pyutil.h"
#include "../core/config.h"

static PyObject *where_str(Capture *c)
{
    PyObject *w = cap_where(c);
    if (!w) {
        sj_err_clear();
        return NULL;
    }
    PyObject *s =
        PyUnicode_FromFormat("%U:%S in %U", PyTuple_GET_ITEM(w, 0), PyTuple_GET_ITEM(w, 1), PyTuple_GET_ITEM(w, 2));
    Py_DECREF(w);
    if (!s)
        sj_err_clear();
    return s;
}

int guard_add_simple(Capture *c, GuardKind kind, int32_t src, PyObject *expected)
{
    if (src < 0)
        return 0;   /* untracked values (library constants) are not guarded */
    Guard g;
    memset(&g, 0, sizeof g);
    g.kind = (uint8_t)kind;
    g.src = src;
    g.src2 = -1;
    g.expected = expected;
    g.where = where_str(c);
    int r = guards_add(&c->guards, &g);
    Py_XDECREF(g.where);
    return r;
}

/* DICT_VERSION: the dict d (at source src) must be exactly as it is now. */
int guard_add_dict_version(Capture *c, int32_t src, PyObject *d)
{
    Guard g;
    memset(&g, 0, sizeof g);
    g.kind = GK_DICT_VERSION;
    g.src = src;
    g.src2 = -1;
    g.version = readcache_dict_tag(d);
    g.where = where_str(c);
    int r = guards_add(&c->guards, &g);
    Py_XDECREF(g.where);
    return r;
}

static int is_constant_type(PyObject *o)
{
    PyTypeObject *t = Py_TYPE(o);
    return o == Py_None || o == Py_Ellipsis || o == Py_NotImplemented || t == &PyLong_Type || t == &PyFloat_Type ||
           t == &PyBool_Type || t == &PyUnicode_Type || t == &PyBytes_Type || t == &PyComplex_Type ||
           t == &PySlice_Type || t == &PyRange_Type || t == &PyCode_Type;
}

int wrap_is_constant(PyObject *o)
{
    if (PyTuple_CheckExact(o)) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); i++)
            if (!wrap_is_constant(PyTuple_GET_ITEM(o, i)))
                return 0;
        return 1;
    }
    return is_constant_type(o);
}

/* 1 when every item of set o is a constant (its equality guard is then exact). */
static int all_constant(PyObject *o)
{
    Py_ssize_t pos = 0;
    PyObject *item;
    Py_hash_t h;
    while (_PySet_NextEntry(o, &pos, &item, &h))
        if (!is_constant_type(item))
            return 0;
    return 1;
}

static int is_callable_kind(PyObject *o)
{
    return PyCFunction_Check(o) || PyType_Check(o) || Py_TYPE(o) == &PyMethodDescr_Type ||
           Py_TYPE(o) == &PyWrapperDescr_Type || Py_TYPE(o) == &PyClassMethodDescr_Type ||
           (libs.numpy && strcmp(Py_TYPE(o)->tp_name, "numpy.ufunc") == 0) ||
           strcmp(Py_TYPE(o)->tp_name, "builtin_function_or_method") == 0 ||
           strcmp(Py_TYPE(o)->tp_name, "method-wrapper") == 0 ||
           strcmp(Py_TYPE(o)->tp_name, "numpy._ArrayFunctionDispatcher") == 0 ||
           strcmp(Py_TYPE(o)->tp_name, "_ArrayFunctionDispatcher") == 0;
}

/* With dynamic dims, a tensor laid out densely in some dim order (contiguous, transposed,
 * permuted) is guarded to keep that order: its strides then follow its sizes. */
static void dense_layout(const TensorMeta *m, const int64_t *strides, Guard *g)
{
    int8_t perm[SJ_MAX_RANK];
    for (int i = 0; i < m->ndim; i++)
        perm[i] = (int8_t)(m->ndim - 1 - i);
    /* innermost first: by stride, ties keep the later dim inner (as contiguity does) */
    for (int i = 1; i < m->ndim; i++)
        for (int j = i; j > 0 && strides[perm[j]] < strides[perm[j - 1]]; j--) {
            int8_t t = perm[j];
            perm[j] = perm[j - 1];
            perm[j - 1] = t;
        }
    int64_t want = 1;
    for (int k = 0; k < m->ndim; k++) {
        int i = perm[k];
        if (strides[i] != want && m->size[i] != 1)
            return;   /* not dense: strides stay exact */
        want *= m->size[i] > 1 ? m->size[i] : 1;
    }
    g->dense = 1;
    memcpy(g->perm, perm, sizeof perm);
}

/* The object at src is the one first wrapped as var first: guard that it stays so. */
static int same_object(Capture *c, Var *first, int32_t src)
{
    if (first->src == src)
        return 0;
    Guard g;
    memset(&g, 0, sizeof g);
    g.kind = GK_SAME_OBJECT;
    g.src = src;
    g.src2 = first->src;
    return guards_add(&c->guards, &g);
}

/* A tensor or array input: one graph input per distinct object. */
static Var *wrap_tensor(Capture *c, PyObject *obj, int32_t src)
{
    if (src < 0) {
        cap_fail(c, BR_UNSUPPORTED_VALUE, "a tensor reached without a source (%s)", Py_TYPE(obj)->tp_name);
        return NULL;
    }
    PyObject *key = PyLong_FromVoidPtr(obj);
    if (!key)
        return NULL;
    PyObject *hit = PyDict_GetItemWithError(c->wrapped, key);
    if (hit) {
        Py_DECREF(key);
        Var *first = c->by_obj[PyLong_AsLong(hit)];
        return same_object(c, first, src) < 0 ? NULL : first;
    }
    if (PyErr_Occurred()) {
        Py_DECREF(key);
        return NULL;
    }
    TensorMeta m;
    int64_t strides[SJ_MAX_RANK];
    const char *why = NULL;
    int r = meta_from_value(obj, &m, strides, &why);
    if (r != 0) {
        Py_DECREF(key);
        if (r > 0)
            cap_fail(c, BR_UNSUPPORTED_VALUE, "input %U: %s", sources_repr(&c->src, src), why);
        return NULL;
    }
    Var *v = var_new(c, VK_TENSOR);
    if (!v || !cap_keep(c, obj)) {
        Py_DECREF(key);
        return NULL;
    }
    v->obj = obj;
    v->src = src;
    int32_t value = c->g->nvalues;   /* the input's value id (graph_add_input below) */
    uint8_t dyn = 0;
    if (symb_wrap_tensor(c, obj, src, &m, value, &dyn) < 0) {
        Py_DECREF(key);
        return NULL;
    }
    v->u.t.meta = m;
    v->u.t.value = graph_add_input(c->g, &m, sources_repr(&c->src, src));
    if (v->u.t.value < 0 || v->u.t.value != value) {
        Py_DECREF(key);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_SystemError, "shapejit: input value ids out of step");
        return NULL;
    }
    if (m.lib == LIB_TORCH)
        c->used_torch = 1;
    Guard g;
    memset(&g, 0, sizeof g);
    g.kind = GK_TENSOR_MATCH;
    g.src = src;
    g.src2 = -1;
    g.expected = (PyObject *)Py_TYPE(obj);
    g.meta = m;
    memset(g.meta.sym, 0, sizeof g.meta.sym);
    memcpy(g.stride, strides, sizeof strides);
    g.dyn = dyn;
    if (dyn)
        dense_layout(&m, strides, &g);
    g.where = where_str(c);
    r = guards_add(&c->guards, &g);
    Py_XDECREF(g.where);
    if (r < 0) {
        Py_DECREF(key);
        return NULL;
    }
    if (c->ndistinct < (int32_t)(sizeof c->distinct_srcs / sizeof c->distinct_srcs[0]))
        c->distinct_srcs[c->ndistinct++] = src;
    /* remember by identity */
    if (sj_grow((void **)&c->by_obj, &c->cap_by_obj, c->nby_obj + 1, sizeof(Var *), 16) < 0) {
        Py_DECREF(key);
        return NULL;
    }
    PyObject *idx = PyLong_FromLong(c->nby_obj);
    r = idx ? PyDict_SetItem(c->wrapped, key, idx) : -1;
    Py_XDECREF(idx);
    Py_DECREF(key);
    if (r < 0)
        return NULL;
    c->by_obj[c->nby_obj++] = v;
    return v;
}

/* orig: the tuple or list (or tuple subclass); fast: its PySequence_Fast form. */
static Var *wrap_seq(Capture *c, PyObject *orig, PyObject *fast, int32_t src)
{
    int is_tuple = PyTuple_Check(orig);
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (guard_add_simple(c, GK_SEQ_LENGTH, src, (PyObject *)Py_TYPE(orig)) < 0)
        return NULL;
    if (src >= 0)
        c->guards.g[c->guards.n - 1].len = n;
    Var *v = var_seq(c, is_tuple ? VK_TUPLE : VK_LIST, NULL, 0);
    if (!v)
        return NULL;
    v->src = src;
    if (Py_TYPE(orig) != &PyTuple_Type && Py_TYPE(orig) != &PyList_Type) {
        if (!cap_keep(c, (PyObject *)Py_TYPE(orig)))
            return NULL;
        v->u.seq.subtype = Py_TYPE(orig);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(fast, i);
        int32_t isrc = -1;
        if (src >= 0) {
            PyObject *k = PyLong_FromSsize_t(i);
            isrc = k ? sources_add(&c->src, SRC_ITEM, src, 0, k, NULL) : -1;
            Py_XDECREF(k);
            if (isrc < 0)
                return NULL;
        }
        Var *iv = wrap_value(c, item, isrc);
        if (!iv || var_seq_append(c, v, iv) < 0)
            return NULL;
    }
    return v;
}

/* The var of the value of obj[k] (k a key of the dict obj, borrowed), read through src's
 * item k (no source when src < 0). */
static Var *wrap_dict_value(Capture *c, PyObject *obj, int32_t src, PyObject *k)
{
    PyObject *val = PyDict_GetItemWithError(obj, k);   /* borrowed */
    if (!val) {
        if (!PyErr_Occurred())
            PyErr_SetObject(PyExc_KeyError, k);
        return NULL;
    }
    int32_t isrc = src >= 0 ? sources_add(&c->src, SRC_ITEM, src, 0, k, NULL) : -1;
    if (src >= 0 && isrc < 0)
        return NULL;
    return wrap_value(c, val, isrc);
}

/* Fills dict var d with the entries of obj in its order, its keys guarded; entries d
 * already holds (read by a lookup) keep their vars. */
static int dict_fill(Capture *c, Var *d, PyObject *obj, int32_t src)
{
    /* the keys in iteration order: an OrderedDict's own, which its dict's need not be */
    PyObject *keys = PyODict_Check(obj) ? PySequence_List(obj) : PyDict_Keys(obj);
    if (!keys)
        return -1;
    PyObject *kt = PyList_AsTuple(keys);
    Py_DECREF(keys);
    if (!kt || !cap_keep_steal(c, kt))
        return -1;
    if (guard_add_simple(c, GK_DICT_KEYS, src, kt) < 0)
        return -1;
    int32_t nread = d->u.dict.n;
    Var **rk = NULL, **rv = NULL;
    if (nread) {
        rk = cap_alloc(c, sizeof(Var *) * (size_t)nread);
        rv = cap_alloc(c, sizeof(Var *) * (size_t)nread);
        if (!rk || !rv)
            return -1;
        memcpy(rk, d->u.dict.keys, sizeof(Var *) * (size_t)nread);
        memcpy(rv, d->u.dict.vals, sizeof(Var *) * (size_t)nread);
        d->u.dict.n = 0;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kt); i++) {
        PyObject *k = PyTuple_GET_ITEM(kt, i);
        if (!is_constant_type(k)) {
            cap_fail(c, BR_UNSUPPORTED_VALUE, "dict %S has a non-constant key",
                     src >= 0 ? sources_repr(&c->src, src) : Py_None);
            return -1;
        }
        Var *kv = NULL, *vv = NULL;
        for (int32_t j = 0; j < nread && !kv; j++)
            if (rk[j] && (rk[j]->obj == k || PyObject_RichCompareBool(rk[j]->obj, k, Py_EQ) == 1)) {
                kv = rk[j];
                vv = rv[j];
                rk[j] = NULL;
            }
        if (!kv) {
            kv = var_const(c, k);
            vv = kv ? wrap_dict_value(c, obj, src, k) : NULL;
        }
        if (!vv || var_dict_set(c, d, kv, vv) < 0)
            return -1;
    }
    for (int32_t j = 0; j < nread; j++)
        if (rk[j]) {   /* a key read at capture is gone: the dict changed under the capture */
            cap_fail(c, BR_UNSUPPORTED_VALUE, "dict %S changed while the frame was captured",
                     src >= 0 ? sources_repr(&c->src, src) : Py_None);
            return -1;
        }
    return 0;
}

/* An outside dict read through a source (an exact dict) starts lazy: guarded by its type,
 * its entries read, and guarded, one lookup at a time (var_dict_lazy_lookup); any other use
 * fills it (var_dict_force). A dict the frame only looks keys up in (os.environ's, read
 * by os.environ.get; a config dict) is then not guarded by all of its keys and values, and
 * setting an unrelated key does not make the frame compile again. */
static Var *wrap_dict(Capture *c, PyObject *obj, int32_t src)
{
    if (guard_add_simple(c, GK_TYPE_MATCH, src, (PyObject *)Py_TYPE(obj)) < 0)
        return NULL;
    Var *d = var_dict(c);
    if (!d)
        return NULL;
    d->src = src;
    if (src >= 0 && PyDict_CheckExact(obj)) {
        d->u.dict.lazy = obj;   /* kept: wrap_mutable keeps the objects it wraps */
        return d;
    }
    return dict_fill(c, d, obj, src) < 0 ? NULL : d;
}

int var_dict_force(Capture *c, Var *d)
{
    if (d->kind != VK_DICT || !d->u.dict.lazy)
        return 0;
    PyObject *obj = d->u.dict.lazy;
    d->u.dict.lazy = NULL;
    return dict_fill(c, d, obj, d->src);
}

int var_dict_lazy_lookup(Capture *c, Var *d, Var *key, Var **val)
{
    PyObject *obj = d->u.dict.lazy, *k = key->obj;
    int has = PyDict_Contains(obj, k);
    if (has < 0)
        return -1;
    Guard g;
    memset(&g, 0, sizeof g);
    g.kind = GK_DICT_CONTAINS;
    g.src = sources_add(&c->src, SRC_ITEM, d->src, 0, k, NULL);
    g.src2 = -1;
    g.len = has;
    if (g.src < 0 || guards_add(&c->guards, &g) < 0)
        return -1;
    if (!has)
        return 0;
    Var *v = wrap_dict_value(c, obj, d->src, k);
    if (!v)
        return -1;
    d->u.dict.lazy = NULL;   /* an entry added as any other; the rest stays unread */
    int r = var_dict_set(c, d, key, v);
    d->u.dict.lazy = obj;
    if (r < 0)
        return -1;
    *val = v;
    return 1;
}

/* Lists and dicts read from two sources that are one object (two arguments naming one
 * list, or the locals a resume function gets for one list) are one var, so a write through
 * either is seen through both. The entry guards the aliasing both ways: the same object
 * where capture saw one, distinct objects where it saw several (GK_DISTINCT). */
static PyObject *alias_key(PyObject *obj)
{
    PyObject *id = PyLong_FromVoidPtr(obj);
    PyObject *key = id ? PyTuple_Pack(1, id) : NULL;   /* a tuple: tensors use the bare id */
    Py_XDECREF(id);
    return key;
}

/* The var an outside container already has in this capture (c->wrapped, by identity): 1
 * with *found set, 0 when it has none yet (*key: a new reference, for alias_record; the
 * caller marks it as being wrapped first), -1 with the capture failed or an exception. A
 * container reached again while its own items are wrapped holds itself: refused. */
static int alias_lookup(Capture *c, PyObject *obj, PyObject **key, Var **found)
{
    *key = alias_key(obj);
    if (!*key)
        return -1;
    PyObject *hit = PyDict_GetItemWithError(c->wrapped, *key);   /* borrowed */
    if (!hit && !PyErr_Occurred())
        return 0;
    Py_CLEAR(*key);
    if (hit == Py_None) {
        cap_fail(c, BR_UNSUPPORTED_VALUE, "%s that holds itself", sj_type_a(c, Py_TYPE(obj), NULL));
        return -1;
    }
    if (!hit)
        return -1;
    *found = PyLong_AsVoidPtr(hit);
    return 1;
}

/* Records v (NULL: wrapping failed) as the var of key's container. Steals key. 0, or -1. */
static int alias_record(Capture *c, PyObject *key, Var *v)
{
    PyObject *ptr = v ? PyLong_FromVoidPtr(v) : NULL;
    int r = ptr ? PyDict_SetItem(c->wrapped, key, ptr) : -1;
    Py_XDECREF(ptr);
    Py_DECREF(key);
    return r;
}

static Var *wrap_mutable(Capture *c, PyObject *obj, int32_t src)
{
    PyObject *key;
    Var *first;
    int found = alias_lookup(c, obj, &key, &first);
    if (found < 0)
        return NULL;
    if (found) {
        if (first->untracked &&
            first->src < 0) {   /* its reads at capture were not guarded: a write here would not be seen there */
            cap_fail(c, BR_UNSUPPORTED_VALUE, "%s reached both with and without a source",
                     sj_type_a(c, Py_TYPE(obj), NULL));
            return NULL;
        }
        return same_object(c, first, src) < 0 ? NULL : first;
    }
    Var *v = NULL;
    if (!PyErr_Occurred() && cap_keep(c, obj) && PyDict_SetItem(c->wrapped, key, Py_None) == 0) {
        if (PyDict_Check(obj)) {
            v = wrap_dict(c, obj, src);
        } else {
            PyObject *fast = PySequence_Fast(obj, "");
            v = fast ? wrap_seq(c, obj, fast, src) : NULL;
            Py_XDECREF(fast);
        }
        if (v && !PyList_CheckExact(obj) && !PyDict_CheckExact(obj) && collections_wrap_extra(c, v, obj, src) < 0)
            v = NULL;
    }
    if (alias_record(c, key, v) < 0)
        return NULL;
    if (c->ndistinct < (int32_t)(sizeof c->distinct_srcs / sizeof c->distinct_srcs[0]))
        c->distinct_srcs[c->ndistinct++] = src;
    return v;
}

/* A set from outside: a constant guarded by value (writes into it break, attrs.c, ops.c).
 * The guard compares with a copy: the set itself changes with the writes of the code the
 * guard protects, and compared with itself the guard would always pass. */
static Var *wrap_set(Capture *c, PyObject *obj, int32_t src)
{
    PyObject *copy = PySet_New(obj);   /* new; the guard takes its own reference */
    int r = copy ? guard_add_simple(c, GK_EQUALS_MATCH, src, copy) : -1;
    Py_XDECREF(copy);
    if (r < 0 || !cap_keep(c, obj))
        return NULL;
    Var *v = var_new(c, VK_CONST);
    if (v) {
        v->obj = obj;
        v->src = src;
    }
    return v;
}

static Var *simple(Capture *c, VarKind k, PyObject *obj, int32_t src, GuardKind gk)
{
    if (guard_add_simple(c, gk, src, gk == GK_TYPE_MATCH ? (PyObject *)Py_TYPE(obj) : obj) < 0)
        return NULL;
    if (!cap_keep(c, obj))
        return NULL;
    Var *v = var_new(c, k);
    if (v) {
        v->obj = obj;
        v->src = src;
    }
    return v;
}

int guard_dict_keys(Capture *c, int32_t src, PyObject *d)
{
    /* an OrderedDict's keys in its own order, as DICT_KEYS checks them */
    PyObject *k = PyODict_Check(d) ? PySequence_List(d) : PyDict_Keys(d);
    PyObject *kt = k ? PyList_AsTuple(k) : NULL;
    Py_XDECREF(k);
    int r = kt ? guard_add_simple(c, GK_DICT_KEYS, src, kt) : -1;
    Py_XDECREF(kt);
    return r < 0 ? -1 : 0;
}

int32_t guard_dict_attr_keys(Capture *c, int32_t base, const char *attr, PyObject *d)
{
    PyObject *dn = PyUnicode_FromString(attr);
    int32_t ds = dn ? sources_add(&c->src, SRC_ATTR, base, 0, dn, NULL) : -1;
    Py_XDECREF(dn);
    return ds < 0 || guard_dict_keys(c, ds, d) < 0 ? -1 : ds;
}

/* An object guarded by its type, read through a source: attrs.c guards how such objects
 * alias one another when the frame writes attributes of one of their type. 0, or -1. */
static int note_read(Capture *c, Var *v)
{
    ObjRead *r = cap_alloc(c, sizeof(ObjRead));
    if (!r)
        return -1;
    r->v = v;
    r->next = c->objreads;
    c->objreads = r;
    return 0;
}

/* How module m holds its state: -1 when its _parameters or _buffers is not a plain dict
 * (read live, guarded by identity), 0 when both are empty (an activation, dropout, a
 * container of other modules: its children are guarded as they are read), 1 when it
 * holds some (each reached through a dict-item source and guarded there). */
static int module_state(PyObject *m)
{
    PyObject **dp = _PyObject_GetDictPtr(m);
    PyObject *d = dp ? *dp : NULL;   /* borrowed */
    if (!d || !PyDict_Check(d))
        return -1;
    static const char *const names[] = {"_parameters", "_buffers"};
    int held = 0;
    for (int i = 0; i < 2; i++) {
        PyObject *sub = PyDict_GetItemString(d, names[i]);   /* borrowed */
        if (!sub || !PyDict_CheckExact(sub))
            return -1;
        held |= PyDict_GET_SIZE(sub) > 0;
    }
    return held;
}

/* A module reached through src, guarded by its type as torch.compile guards the modules
 * it inlines (one without parameters or buffers also has their dicts guarded empty:
 * wrap_stateless_module). Each parameter or buffer its forward reads
 * is a graph input under its own source (L['self']._modules['fc']._parameters['weight'])
 * with its tensor guard, each attribute is guarded by value, each submodule by this rule:
 * another instance of the class (the next layer of a model, after a graph break inside
 * the layer's forward) passes these guards and runs the same compiled code on its own
 * tensors. Aliasing between such modules matters only to attribute writes and is guarded
 * then (attrs.c: attr_check_writes). */
static Var *wrap_typed_module(Capture *c, PyObject *obj, int32_t src)
{
    Var *v = simple(c, VK_MODULE, obj, src, GK_TYPE_MATCH);
    if (v)
        v->by_type = 1;
    return v && note_read(c, v) < 0 ? NULL : v;
}

/* A module without parameters or buffers, reached through src: guarded by its type and by
 * its _parameters and _buffers staying empty, never by identity, as torch.compile guards
 * the modules it inlines (inline_inbuilt_nn_modules). Such a module is often made anew on
 * each call (ACT2FN[name], nn.GELU() passed in, one made before a graph break and handed
 * to the resume function), and an identity guard would recompile each time. What its
 * forward reads of it is guarded through its own sources (an attribute by value, a
 * submodule by the same rule, the hook dicts by length); the one thing its identity would
 * also pin, which objects alias which, matters only to attribute writes, and is guarded
 * then as for user objects (attrs.c: attr_check_writes). */
static Var *wrap_stateless_module(Capture *c, PyObject *obj, int32_t src)
{
    static const char *const names[] = {"_parameters", "_buffers"};
    for (int i = 0; i < 2; i++) {
        PyObject *n = PyUnicode_FromString(names[i]);   /* new */
        int32_t s = n ? sources_add(&c->src, SRC_ATTR, src, 0, n, NULL) : -1;
        Py_XDECREF(n);
        if (s < 0 || guard_add_simple(c, GK_DICT_LENGTH, s, NULL) < 0)
            return NULL;
        c->guards.g[c->guards.n - 1].len = 0;
    }
    return wrap_typed_module(c, obj, src);
}

static Var *wrap_any(Capture *c, PyObject *obj, int32_t src)
{
    if (libs_refresh() < 0)
        return NULL;
    PyTypeObject *t = Py_TYPE(obj);
    if ((t == &PyLong_Type || t == &PyFloat_Type) && src >= 0) {
        int handled;
        Var *v = t == &PyLong_Type ? symb_wrap_int(c, obj, src, &handled) : symb_wrap_float(c, obj, src, &handled);
        if (handled || v)
            return v;
        if (PyErr_Occurred())
            return NULL;
    }
    if (PySet_CheckExact(obj) && all_constant(obj))
        return wrap_set(c, obj, src);
    if (is_constant_type(obj) || (PyFrozenSet_CheckExact(obj) && all_constant(obj)))
        return simple(c, VK_CONST, obj, src, GK_EQUALS_MATCH);
    if (libs_is_tensor(obj) || libs_is_ndarray(obj))
        return wrap_tensor(c, obj, src);
    if (libs.np_generic && PyObject_TypeCheck(obj, (PyTypeObject *)libs.np_generic)) {
        int handled;
        Var *v = src >= 0 ? symb_wrap_float(c, obj, src, &handled) : NULL;
        if (v || (src >= 0 && handled))
            return v;
        if (PyErr_Occurred())
            return NULL;
        return simple(c, VK_CONST, obj, src, GK_EQUALS_MATCH);
    }
    if (libs.torch && ((PyObject *)t == libs.dtype_type || (PyObject *)t == libs.size_type))
        return simple(c, VK_CONST, obj, src, (PyObject *)t == libs.dtype_type ? GK_ID_MATCH : GK_EQUALS_MATCH);
    if (libs.torch && (PyObject *)t == libs.memory_format_type)
        return simple(c, VK_CONST, obj, src, GK_ID_MATCH);   /* torch.contiguous_format, ... */
    if (libs.torch && (PyObject *)t == libs.device_type)
        return simple(c, VK_CONST, obj, src, GK_EQUALS_MATCH);
    if (libs.numpy && (PyObject *)t == libs.np_dtype_type)
        return simple(c, VK_CONST, obj, src, GK_EQUALS_MATCH);
    if (src >= 0 && (PyList_CheckExact(obj) || PyDict_CheckExact(obj) || collections_is_container(obj)))
        return wrap_mutable(c, obj, src);
    if (PyTuple_Check(obj) || PyList_CheckExact(obj)) {
        if (PyTuple_CheckExact(obj) || PyList_CheckExact(obj) || PyObject_HasAttrString((PyObject *)t, "_fields")) {
            PyObject *fast = PySequence_Fast(obj, "");
            if (!fast)
                return NULL;
            Var *v = wrap_seq(c, obj, fast, src);
            Py_DECREF(fast);
            return v;
        }
    }
    if (PyDict_CheckExact(obj))
        return wrap_dict(c, obj, src);
    if (PyFunction_Check(obj) && PyFunction_GET_CLOSURE(obj) && src >= 0) {
        /* a nested function is a new object each time its def runs (a loop, a factory):
         * what the capture depends on is its code, plus the cells and defaults it reads
         * (guarded through their own sources) */
        PyObject *cn = PyUnicode_FromString("__code__");
        int32_t cs = cn ? sources_add(&c->src, SRC_ATTR, src, 0, cn, NULL) : -1;
        Py_XDECREF(cn);
        if (cs < 0 || guard_add_simple(c, GK_ID_MATCH, cs, PyFunction_GET_CODE(obj)) < 0)
            return NULL;
        return simple(c, VK_FUNC, obj, src, GK_TYPE_MATCH);
    }
    if (PyFunction_Check(obj))
        return simple(c, VK_FUNC, obj, src, GK_ID_MATCH);
    if (PyModule_Check(obj))
        return simple(c, VK_PYMODULE, obj, src, GK_ID_MATCH);
    if (libs_is_module(obj)) {
        int state = src >= 0 ? module_state(obj) : -1;
        if (state == 0)
            return wrap_stateless_module(c, obj, src);
        if (state == 1 && sj_config.inline_inbuilt_nn_modules)
            return wrap_typed_module(c, obj, src);
        return simple(c, VK_MODULE, obj, src, GK_ID_MATCH);
    }
    if (libs.torch && ((PyObject *)t == libs.no_grad || (PyObject *)t == libs.enable_grad)) {
        Var *v = simple(c, VK_GRADMODE, obj, src, GK_TYPE_MATCH);
        if (v)
            v->u.grad.enabled = (PyObject *)t == libs.enable_grad;
        return v;
    }
    if (libs.torch && (PyObject *)t == libs.inference_mode) {
        Var *v = simple(c, VK_GRADMODE, obj, src, GK_TYPE_MATCH);
        return v && infmode_wrap(c, v, obj, src) == 0 ? v : NULL;
    }
    if (PyMethod_Check(obj)) {
        int32_t s1 = -1, s2 = -1;
        if (src >= 0) {
            PyObject *n1 = PyUnicode_FromString("__self__"), *n2 = PyUnicode_FromString("__func__");
            s1 = n1 ? sources_add(&c->src, SRC_ATTR, src, 0, n1, NULL) : -1;
            s2 = n2 ? sources_add(&c->src, SRC_ATTR, src, 0, n2, NULL) : -1;
            Py_XDECREF(n1);
            Py_XDECREF(n2);
            if (s1 < 0 || s2 < 0)
                return NULL;
        }
        Var *self = wrap_value(c, PyMethod_GET_SELF(obj), s1);
        Var *fn = self ? wrap_value(c, PyMethod_GET_FUNCTION(obj), s2) : NULL;
        Var *v = var_method(c, self, fn);
        if (!v)
            return NULL;
        v->src = src;
        return v;
    }
    if (libs.partial_type && (PyObject *)t == libs.partial_type) {
        if (guard_add_simple(c, GK_TYPE_MATCH, src, (PyObject *)t) < 0)
            return NULL;
        Var *parts[3];
        const char *names[3] = {"func", "args", "keywords"};
        for (int i = 0; i < 3; i++) {
            PyObject *n = PyUnicode_FromString(names[i]);
            PyObject *val = n ? PyObject_GetAttr(obj, n) : NULL;
            int32_t s = (val && src >= 0) ? sources_add(&c->src, SRC_ATTR, src, 0, n, NULL) : -1;
            Py_XDECREF(n);
            if (!val || (src >= 0 && s < 0)) {
                Py_XDECREF(val);
                return NULL;
            }
            parts[i] = wrap_value(c, val, s);
            Py_DECREF(val);
            if (!parts[i])
                return NULL;
        }
        Var *v = var_new(c, VK_PARTIAL);
        if (!v)
            return NULL;
        v->u.partial.fn = parts[0];
        v->u.partial.args = parts[1];
        v->u.partial.kwargs = parts[2];
        v->src = src;
        return v;
    }
    if (is_callable_kind(obj))
        return simple(c, VK_CALLABLE, obj, src, GK_ID_MATCH);
    if (PyDictKeys_Check(obj) || PyDictValues_Check(obj) || PyDictItems_Check(obj)) {
        /* live views of a dict the frame may write: read at capture time they would miss
         * the writes, which reach the dict only after the graph */
        cap_fail(c, BR_UNSUPPORTED_VALUE, "%s made outside the frame", sj_type_a(c, t, NULL));
        return NULL;
    }
    Var *v = simple(c, VK_OBJECT, obj, src, GK_TYPE_MATCH);
    if (v)
        v->from_module = (uint8_t)(c->wrap_in_module || c->wrap_owner);
    return v && src >= 0 && note_read(c, v) < 0 ? NULL : v;
}

/* o.keys of a dict subclass, o.__len__: each read binds the type's C method anew, so an
 * identity guard would fail on every call. What capture depends on is the owner (guarded
 * through its own source) and the method the type gives, which its type fixes; every
 * call through the bound object either is modelled by kind or breaks, and a break's
 * continuation reads it again through src. */
Var *wrap_bound_builtin(Capture *c, PyObject *obj, int32_t src)
{
    return simple(c, VK_CALLABLE, obj, src, GK_TYPE_MATCH);
}

Var *wrap_untracked(Capture *c, PyObject *obj)
{
    return wrap_value(c, obj, -1);
}

/* A mutable container from outside reached without a source: nothing replays its writes
 * after the graph, so it is untracked (writes into it break). It is one var however often
 * it is reached, and the var of its tracked twin when it was also reached with a source
 * (reads then see the frame's writes). */
static Var *wrap_untracked_container(Capture *c, PyObject *obj)
{
    PyObject *key;
    Var *first;
    int found = alias_lookup(c, obj, &key, &first);
    if (found)
        return found < 0 ? NULL : first;
    Var *v = NULL;
    if (!PyErr_Occurred() && cap_keep(c, obj) && PyDict_SetItem(c->wrapped, key, Py_None) == 0)
        v = wrap_any(c, obj, -1);
    if (v) {
        v->untracked = 1;
        v->orig = obj;
    }
    return alias_record(c, key, v) < 0 ? NULL : v;
}

Var *wrap_value(Capture *c, PyObject *obj, int32_t src)
{
    if (src < 0 && (PyList_Check(obj) || PyDict_Check(obj) || PyAnySet_Check(obj) || collections_is_container(obj)))
        return wrap_untracked_container(c, obj);
    return wrap_any(c, obj, src);
}

int32_t wrap_fn_source(Capture *c, Var *fn)
{
    if (fn->src >= 0)
        return fn->src;
    if (!fn->obj || !PyFunction_Check(fn->obj))
        return -1;
    int32_t s = sources_add(&c->src, SRC_HELD, -1, 0, NULL, fn->obj);
    if (s < 0) {
        cap_fail_exc(c, BR_INTERNAL);
        return -2;
    }
    return s;
}

Var *wrap_untracked_attr(Capture *c, PyObject *obj, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(obj, name);   /* new */
    if (!v) {
        cap_fail_exc(c, BR_USER_EXCEPTION);
        return NULL;
    }
    Var *r = wrap_untracked(c, v);
    Py_DECREF(v);
    return r;
}
