/* Guard checks and their explanations, dispatched through guard_kinds.def. */
#include "guards.h"
#include <string.h>

/* ------------------------------------------------------------ global state ---- */

static PyObject *is_grad_enabled_fn;   /* strong, cached: torch.is_grad_enabled */

int guards_read_global_state(int *grad_enabled, int *default_dtype)
{
    *grad_enabled = 1;
    *default_dtype = -1;
    PyObject *mods = PyImport_GetModuleDict();   /* borrowed */
    PyObject *torch = PyDict_GetItemString(mods, "torch");   /* borrowed */
    if (!torch)
        return 0;
    if (!is_grad_enabled_fn) {
        is_grad_enabled_fn = PyObject_GetAttrString(torch, "is_grad_enabled");
        if (!is_grad_enabled_fn)
            return -1;
    }
    PyObject *r = PyObject_CallNoArgs(is_grad_enabled_fn);
    if (!r)
        return -1;
    *grad_enabled = PyObject_IsTrue(r);
    Py_DECREF(r);
    if (meta_refresh_torch_default() < 0)
        return -1;
    *default_dtype = (int)meta_torch_default_float;
    return 0;
}

/* ----------------------------------------------------------------- checks ---- */
/* Each check: 1 pass, 0 fail, -1 error (counted as a failure by the caller). */

static int check_type(const Guard *g, PyObject *v, PyObject **memo)
{
    (void)memo;
    return (PyObject *)Py_TYPE(v) == g->expected;
}

static int check_id(const Guard *g, PyObject *v, PyObject **memo)
{
    (void)memo;
    return v == g->expected;
}

static int check_equals(const Guard *g, PyObject *v, PyObject **memo)
{
    (void)memo;
    if (v == g->expected)
        return 1;
    if (Py_TYPE(v) != Py_TYPE(g->expected))
        return 0;
    return PyObject_RichCompareBool(v, g->expected, Py_EQ);
}

static int check_tensor(const Guard *g, PyObject *v, PyObject **memo)
{
    (void)memo;
    if ((PyObject *)Py_TYPE(v) != g->expected)
        return 0;
    TensorMeta m;
    int64_t st[SJ_MAX_RANK];
    const char *why = NULL;
    int r = meta_from_value(v, &m, st, &why);
    if (r != 0)
        return r < 0 ? -1 : 0;
    if (m.dtype != g->meta.dtype || m.ndim != g->meta.ndim || m.requires_grad != g->meta.requires_grad ||
        m.np_scalar != g->meta.np_scalar)
        return 0;
    for (int i = 0; i < m.ndim; i++)
        if (m.size[i] != g->meta.size[i] || st[i] != g->stride[i])
            return 0;
    return 1;
}

static int check_seq_len(const Guard *g, PyObject *v, PyObject **memo)
{
    (void)memo;
    if ((PyObject *)Py_TYPE(v) != g->expected)
        return 0;
    return PyObject_Length(v) == g->len;
}

static int check_dict_keys(const Guard *g, PyObject *v, PyObject **memo)
{
    (void)memo;
    if (!PyDict_Check(v) || PyDict_GET_SIZE(v) != PyTuple_GET_SIZE(g->expected))
        return 0;
    Py_ssize_t pos = 0, i = 0;
    PyObject *k, *val;
    while (PyDict_Next(v, &pos, &k, &val)) {
        PyObject *want = PyTuple_GET_ITEM(g->expected, i++);
        if (k != want) {
            int eq = PyObject_RichCompareBool(k, want, Py_EQ);
            if (eq <= 0)
                return eq;
        }
    }
    return 1;
}

static int check_dict_len(const Guard *g, PyObject *v, PyObject **memo)
{
    (void)memo;
    if (!PyDict_Check(v))
        return 0;
    return PyDict_GET_SIZE(v) == g->len;
}

static int check_global(const Guard *g, PyObject *v, PyObject **memo)
{
    (void)v;
    (void)memo;
    int grad, dt;
    if (guards_read_global_state(&grad, &dt) < 0)
        return -1;
    return grad == g->grad_enabled && (g->default_dtype < 0 || dt == g->default_dtype);
}

static int check_same(const Guard *g, PyObject *v, PyObject **memo)
{
    return memo[g->src2] == v;
}

static int check_distinct(const Guard *g, PyObject *v, PyObject **memo)
{
    (void)v;
    for (int32_t i = 0; i < g->nsrcs; i++)
        for (int32_t j = i + 1; j < g->nsrcs; j++)
            if (memo[g->srcs[i]] == memo[g->srcs[j]])
                return 0;
    return 1;
}

/* -------------------------------------------------------------- explanations ---- */

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

static PyObject *explain_type(const Guard *g, PyObject *v, PyObject *name)
{
    return PyUnicode_FromFormat("type(%U) changed: expected %s, actual %s", name,
                                ((PyTypeObject *)g->expected)->tp_name, Py_TYPE(v)->tp_name);
}

static PyObject *explain_id(const Guard *g, PyObject *v, PyObject *name)
{
    (void)g;
    return PyUnicode_FromFormat("%U is a different object now (%.80R)", name, v);
}

static PyObject *explain_equals(const Guard *g, PyObject *v, PyObject *name)
{
    return PyUnicode_FromFormat("%U == %.80R, expected %.80R", name, v, g->expected);
}

static PyObject *explain_tensor(const Guard *g, PyObject *v, PyObject *name)
{
    if ((PyObject *)Py_TYPE(v) != g->expected)
        return PyUnicode_FromFormat("tensor '%U' type mismatch. expected %s, actual %s", name,
                                    ((PyTypeObject *)g->expected)->tp_name, Py_TYPE(v)->tp_name);
    TensorMeta m;
    int64_t st[SJ_MAX_RANK];
    const char *why = NULL;
    int r = meta_from_value(v, &m, st, &why);
    if (r < 0)
        return NULL;
    if (r > 0)
        return PyUnicode_FromFormat("tensor '%U' is no longer supported: %s", name, why);
    if (m.dtype != g->meta.dtype)
        return PyUnicode_FromFormat("tensor '%U' dtype mismatch. expected %s, actual %s", name,
                                    dtype_info[g->meta.dtype].name, dtype_info[m.dtype].name);
    if (m.ndim != g->meta.ndim)
        return PyUnicode_FromFormat("tensor '%U' rank mismatch. expected %d, actual %d", name,
                                    (int)g->meta.ndim, (int)m.ndim);
    if (m.requires_grad != g->meta.requires_grad)
        return PyUnicode_FromFormat("tensor '%U' requires_grad mismatch. expected requires_grad=%d",
                                    name, (int)g->meta.requires_grad);
    if (m.np_scalar != g->meta.np_scalar)
        return PyUnicode_FromFormat("tensor '%U' changed between numpy scalar and array", name);
    for (int i = 0; i < m.ndim; i++)
        if (m.size[i] != g->meta.size[i])
            return PyUnicode_FromFormat("tensor '%U' size mismatch at index %d. expected %lld, actual %lld",
                                        name, i, (long long)g->meta.size[i], (long long)m.size[i]);
    for (int i = 0; i < m.ndim; i++)
        if (st[i] != g->stride[i])
            return PyUnicode_FromFormat("tensor '%U' stride mismatch at index %d. expected %lld, actual %lld",
                                        name, i, (long long)g->stride[i], (long long)st[i]);
    return PyUnicode_FromFormat("tensor '%U' changed", name);
}

static PyObject *explain_seq_len(const Guard *g, PyObject *v, PyObject *name)
{
    if ((PyObject *)Py_TYPE(v) != g->expected)
        return PyUnicode_FromFormat("type(%U) changed: expected %s, actual %s", name,
                                    ((PyTypeObject *)g->expected)->tp_name, Py_TYPE(v)->tp_name);
    return PyUnicode_FromFormat("len(%U) == %zd, expected %zd", name, PyObject_Length(v), g->len);
}

static PyObject *explain_dict_keys(const Guard *g, PyObject *v, PyObject *name)
{
    (void)v;
    return PyUnicode_FromFormat("keys of %U changed, expected %.200R", name, g->expected);
}

static PyObject *explain_dict_len(const Guard *g, PyObject *v, PyObject *name)
{
    return PyUnicode_FromFormat("len(%U) == %zd, expected %zd", name,
                                PyDict_Check(v) ? PyDict_GET_SIZE(v) : (Py_ssize_t)-1, g->len);
}

static PyObject *explain_global(const Guard *g, PyObject *v, PyObject *name)
{
    (void)v;
    (void)name;
    int grad, dt;
    if (guards_read_global_state(&grad, &dt) < 0)
        return NULL;
    if (grad != g->grad_enabled)
        return PyUnicode_FromFormat("GLOBAL_STATE changed: grad_mode (expected %s)",
                                    g->grad_enabled ? "enabled" : "disabled");
    return PyUnicode_FromFormat("GLOBAL_STATE changed: default_dtype (expected %s)",
                                g->default_dtype >= 0 ? dtype_info[g->default_dtype].name : "?");
}

static PyObject *explain_same(const Guard *g, PyObject *v, PyObject *name)
{
    (void)g;
    (void)v;
    return PyUnicode_FromFormat("%U is no longer the same object as at compile time", name);
}

static PyObject *explain_distinct(const Guard *g, PyObject *v, PyObject *name)
{
    (void)g;
    (void)v;
    (void)name;
    return PyUnicode_FromString("tensor inputs that were distinct now alias each other");
}

/* ------------------------------------------------------------------ tables ---- */

typedef int (*CheckFn)(const Guard *, PyObject *, PyObject **);
typedef PyObject *(*ExplainFn)(const Guard *, PyObject *, PyObject *);

static const struct {
    const char *name;
    CheckFn check;
    ExplainFn explain;
} kinds[GK_COUNT] = {
#define X(e, name, check, explain) [e] = {name, check, explain},
#include "guard_kinds.def"
#undef X
};

/* ------------------------------------------------------------------ the set ---- */

void guards_clear(GuardSet *s)
{
    for (int32_t i = 0; i < s->n; i++) {
        Py_XDECREF(s->g[i].expected);
        Py_XDECREF(s->g[i].where);
        PyMem_Free(s->g[i].srcs);
    }
    PyMem_Free(s->g);
    s->g = NULL;
    s->n = s->cap = 0;
}

int guards_add(GuardSet *s, const Guard *g)
{
    for (int32_t i = 0; i < s->n; i++) {
        const Guard *o = &s->g[i];
        if (o->kind == g->kind && o->src == g->src && o->src2 == g->src2 && g->kind != GK_DISTINCT)
            return 0;
    }
    if (s->n == s->cap) {
        int32_t ncap = s->cap ? s->cap * 2 : 16;
        Guard *p = PyMem_Realloc(s->g, sizeof(Guard) * (size_t)ncap);
        if (!p) {
            PyErr_NoMemory();
            return -1;
        }
        s->g = p;
        s->cap = ncap;
    }
    Guard *d = &s->g[s->n];
    *d = *g;
    Py_XINCREF(d->expected);
    Py_XINCREF(d->where);
    if (g->nsrcs) {
        d->srcs = PyMem_Malloc(sizeof(int32_t) * (size_t)g->nsrcs);
        if (!d->srcs) {
            Py_XDECREF(d->expected);
            Py_XDECREF(d->where);
            PyErr_NoMemory();
            return -1;
        }
        memcpy(d->srcs, g->srcs, sizeof(int32_t) * (size_t)g->nsrcs);
    }
    s->n++;
    return 0;
}

/* Resolve what guard g looks at; borrowed or NULL (exception set). Py_None for no source. */
static PyObject *guard_value(const Guard *g, const SourceTable *t, const FrameView *fv, PyObject **memo)
{
    if (g->kind == GK_DISTINCT) {
        for (int32_t i = 0; i < g->nsrcs; i++)
            if (!sources_resolve(t, g->srcs[i], fv, memo))
                return NULL;
        return Py_None;
    }
    if (g->kind == GK_SAME_OBJECT && !sources_resolve(t, g->src2, fv, memo))
        return NULL;
    if (g->src < 0)
        return Py_None;
    return sources_resolve(t, g->src, fv, memo);
}

int guards_check(const GuardSet *s, const SourceTable *t, const FrameView *fv, PyObject **memo,
                 int32_t *failed)
{
    for (int32_t i = 0; i < s->n; i++) {
        const Guard *g = &s->g[i];
        PyObject *v = guard_value(g, t, fv, memo);
        int ok = v ? kinds[g->kind].check(g, v, memo) : -1;
        if (ok != 1) {
            if (ok < 0)
                PyErr_Clear();
            *failed = i;
            return 0;
        }
    }
    return 1;
}

PyObject *guards_explain(const GuardSet *s, int32_t i, const SourceTable *t, const FrameView *fv,
                         PyObject **memo)
{
    const Guard *g = &s->g[i];
    PyObject *name = short_name(t, g->src);
    if (!name)
        return NULL;
    PyObject *v = guard_value(g, t, fv, memo);
    PyObject *r;
    if (!v) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        PyErr_NormalizeException(&et, &ev, &tb);
        r = PyUnicode_FromFormat("%U could not be read: %S", name, ev ? ev : Py_None);
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
    } else {
        r = kinds[g->kind].explain(g, v, name);
        if (!r) {
            PyErr_Clear();
            r = PyUnicode_FromFormat("%s failed on %U", kinds[g->kind].name, name);
        }
    }
    Py_DECREF(name);
    return r;
}

static PyObject *format_one(const Guard *g, const SourceTable *t)
{
    PyObject *src = g->src >= 0 ? t->e[g->src].repr : NULL;
    switch ((GuardKind)g->kind) {
    case GK_TENSOR_MATCH: {
        char sz[256], st[256];
        size_t a = 0, b = 0;
        sz[0] = st[0] = 0;
        for (int i = 0; i < g->meta.ndim; i++) {
            a += (size_t)snprintf(sz + a, sizeof sz - a, "%s%lld", i ? ", " : "", (long long)g->meta.size[i]);
            b += (size_t)snprintf(st + b, sizeof st - b, "%s%lld", i ? ", " : "", (long long)g->stride[i]);
            if (a >= sizeof sz || b >= sizeof st)
                break;
        }
        return PyUnicode_FromFormat("TENSOR_MATCH: check_tensor(%U, %s, %s, requires_grad=%s, size=[%s], stride=[%s])",
                                    src, ((PyTypeObject *)g->expected)->tp_name, dtype_info[g->meta.dtype].name,
                                    g->meta.requires_grad ? "True" : "False", sz, st);
    }
    case GK_TYPE_MATCH:
        return PyUnicode_FromFormat("TYPE_MATCH: ___check_type_id(%U, %s)", src,
                                    ((PyTypeObject *)g->expected)->tp_name);
    case GK_ID_MATCH:
        return PyUnicode_FromFormat("ID_MATCH: ___check_obj_id(%U, %p)", src, (void *)g->expected);
    case GK_EQUALS_MATCH:
        return PyUnicode_FromFormat("EQUALS_MATCH: %U == %.80R", src, g->expected);
    case GK_SEQ_LENGTH:
        return PyUnicode_FromFormat("SEQUENCE_LENGTH: check_type_and_len(%U, %s, %zd)", src,
                                    ((PyTypeObject *)g->expected)->tp_name, g->len);
    case GK_DICT_KEYS:
        return PyUnicode_FromFormat("DICT_KEYS: list(%U.keys()) == %.200R", src, g->expected);
    case GK_DICT_LENGTH:
        return PyUnicode_FromFormat("DICT_LENGTH: len(%U) == %zd", src, g->len);
    case GK_GLOBAL_STATE:
        return PyUnicode_FromFormat("GLOBAL_STATE: ___check_global_state(grad_mode=%s, default_dtype=%s)",
                                    g->grad_enabled ? "True" : "False",
                                    g->default_dtype >= 0 ? dtype_info[g->default_dtype].name : "n/a");
    case GK_SAME_OBJECT:
        return PyUnicode_FromFormat("OBJECT_ALIASING: %U is %U", src, t->e[g->src2].repr);
    case GK_DISTINCT: {
        PyObject *parts = PyList_New(0);
        if (!parts)
            return NULL;
        for (int32_t i = 0; i < g->nsrcs; i++)
            if (PyList_Append(parts, t->e[g->srcs[i]].repr) < 0) {
                Py_DECREF(parts);
                return NULL;
            }
        PyObject *sep = PyUnicode_FromString(", ");
        PyObject *j = sep ? PyUnicode_Join(sep, parts) : NULL;
        Py_XDECREF(sep);
        Py_DECREF(parts);
        if (!j)
            return NULL;
        PyObject *r = PyUnicode_FromFormat("NO_TENSOR_ALIASING: check_no_aliasing(%U)", j);
        Py_DECREF(j);
        return r;
    }
    case GK_COUNT:
        break;
    }
    return PyUnicode_FromString("?");
}

PyObject *guards_format(const GuardSet *s, const SourceTable *t)
{
    PyObject *list = PyList_New(0);
    if (!list)
        return NULL;
    for (int32_t i = 0; i < s->n; i++) {
        PyObject *line = format_one(&s->g[i], t);
        if (line && s->g[i].where) {
            PyObject *l2 = PyUnicode_FromFormat("%U  # %U", line, s->g[i].where);
            Py_DECREF(line);
            line = l2;
        }
        if (!line || PyList_Append(list, line) < 0) {
            Py_XDECREF(line);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(line);
    }
    return list;
}
