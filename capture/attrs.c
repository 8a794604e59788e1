/* Attribute loads: tensors (metadata folds to constants), nn.Modules (parameters, buffers,
 * submodules, with their sources), user objects, library modules, containers. */
#include "capture.h"
#include "../vocab/libs.h"
#include "../core/errors.h"
#include "../core/pyutil.h"

static int32_t attr_source(Capture *c, Var *obj, PyObject *name)
{
    if (obj->src < 0)
        return -1;
    return sources_add(&c->src, SRC_ATTR, obj->src, 0, name, NULL);
}

/* ---- tensors ---- */

static PyObject *shape_object(Capture *c, const TensorMeta *m)
{
    (void)c;
    PyObject *t = sj_int64_tuple(m->size, m->ndim);
    if (!t)
        return NULL;
    if (m->lib == LIB_TORCH) {
        PyObject *s = PyObject_CallOneArg(libs.size_type, t);
        Py_DECREF(t);
        return s;
    }
    return t;
}

/* x.shape with symbolic dims: a torch.Size (numpy: tuple) var of ints and symbolic ints. */
static Var *shape_var(Capture *c, const TensorMeta *m)
{
    int sym = 0;
    for (int i = 0; i < m->ndim; i++)
        sym |= m->sym[i] != NULL;
    if (!sym)
        return var_const_steal(c, shape_object(c, m));
    Var *items[SJ_MAX_RANK];
    for (int i = 0; i < m->ndim; i++)
        if (!(items[i] = m->sym[i] ? symb_var(c, m->sym[i]) : var_const_steal(c, PyLong_FromLongLong(m->size[i]))))
            return NULL;
    Var *v = var_seq(c, VK_TUPLE, items, m->ndim);
    if (v && m->lib == LIB_TORCH)
        v->u.seq.subtype = (PyTypeObject *)libs.size_type;
    return v;
}

/* x.numel() / ndarray.size: the product of the sizes. */
Var *tensor_numel_var(Capture *c, const TensorMeta *m)
{
    int64_t k = 1;
    SymNode *e = NULL;
    for (int i = 0; i < m->ndim; i++) {
        k *= m->size[i];
        if (m->sym[i] && !e && !(e = sym_const(c->env, 1)))
            return NULL;
    }
    if (!e)
        return var_const_steal(c, PyLong_FromLongLong(k));
    for (int i = 0; e && i < m->ndim; i++)
        e = sym_mul(c->env, e, m->sym[i] ? m->sym[i] : sym_const(c->env, m->size[i]));
    return symb_var(c, e);
}

static Var *tensor_attr(Capture *c, Var *t, PyObject *name)
{
    const TensorMeta *m = &t->u.t.meta;
    const char *n = PyUnicode_AsUTF8(name);
    if (!n)
        return NULL;
    /* an attribute of the tensor's own (x.scale = 2.0) read from the frame's tensor: through
     * its source, so its value is guarded like any other input's */
    PyObject **dictp = t->src >= 0 && t->obj ? _PyObject_GetDictPtr(t->obj) : NULL;
    if (dictp && *dictp) {
        PyObject *v = PyDict_GetItemWithError(*dictp, name);   /* borrowed */
        if (v) {
            int32_t s = attr_source(c, t, name);
            return s < 0 ? NULL : wrap_value(c, v, s);
        }
        if (PyErr_Occurred()) {
            cap_fail_exc(c, BR_USER_EXCEPTION);
            return NULL;
        }
    }
    if (!strcmp(n, "shape"))
        return shape_var(c, m);
    if (!strcmp(n, "dtype"))
        return var_const_steal(c, dtype_to_py((DType)m->dtype, (Lib)m->lib));
    if (!strcmp(n, "ndim"))
        return var_const_steal(c, PyLong_FromLong(m->ndim));
    if (m->lib == LIB_TORCH) {
        if (!strcmp(n, "requires_grad"))
            return var_const(c, m->requires_grad ? Py_True : Py_False);
        if (!strcmp(n, "is_cpu"))   /* capture models CPU tensors only (vocab/meta.c) */
            return var_const(c, Py_True);
        if (!strcmp(n, "is_cuda") || !strcmp(n, "is_sparse") || !strcmp(n, "is_quantized") || !strcmp(n, "is_meta") ||
            !strcmp(n, "is_nested") || !strcmp(n, "is_mps"))
            return var_const(c, Py_False);
        if (!strcmp(n, "device")) {
            PyObject *d = PyObject_CallFunction(libs.device_type, "s", "cpu");
            return var_const_steal(c, d);
        }
        if (!strcmp(n, "T") || !strcmp(n, "mT") || !strcmp(n, "mH") || !strcmp(n, "H")) {
            /* as methods: .T == permute(reversed), .mT == transpose(-2, -1) */
            PyObject *mname = PyUnicode_FromString(!strcmp(n, "mT") || !strcmp(n, "mH") ? "transpose" : "permute");
            Var *meth = mname ? attr_load(c, t, mname) : NULL;
            Py_XDECREF(mname);
            if (!meth)
                return NULL;
            Var *args[SJ_MAX_RANK];
            int na = 0;
            if (!strcmp(n, "mT") || !strcmp(n, "mH")) {
                args[na++] = var_const_steal(c, PyLong_FromLong(-2));
                args[na++] = var_const_steal(c, PyLong_FromLong(-1));
            } else {
                for (int i = m->ndim - 1; i >= 0; i--)
                    args[na++] = var_const_steal(c, PyLong_FromLong(i));
            }
            for (int i = 0; i < na; i++)
                if (!args[i])
                    return NULL;
            return call_var(c, meth, args, na, NULL);
        }
    } else {
        if (!strcmp(n, "size"))
            return tensor_numel_var(c, m);
        if (!strcmp(n, "itemsize"))
            return var_const_steal(c, PyLong_FromLong(dtype_info[m->dtype].itemsize));
        /* the real part of a real array or numpy scalar is the object itself (its imag is
         * a new read-only array, not modelled) */
        if (!strcmp(n, "real") && dtype_info[m->dtype].category != CAT_COMPLEX)
            return t;
        if (!strcmp(n, "T")) {
            PyObject *mname = PyUnicode_FromString("transpose");
            Var *meth = mname ? attr_load(c, t, mname) : NULL;
            Py_XDECREF(mname);
            return meth ? call_var(c, meth, NULL, 0, NULL) : NULL;
        }
    }
    /* methods: look the name up on the type */
    PyObject *type = m->lib == LIB_TORCH ? libs.tensor_type : libs.ndarray_type;
    PyObject *d = PyObject_GetAttr(type, name);
    if (!d) {
        cap_fail_exc(c, BR_UNSUPPORTED_VALUE);
        return NULL;
    }
    if (PyCallable_Check(d) && !PyType_Check(d)) {
        Var *fn = wrap_untracked(c, d);
        Py_DECREF(d);
        return var_method(c, t, fn);
    }
    Py_DECREF(d);
    cap_fail(c, BR_UNSUPPORTED_VALUE, "%s attribute '%U'", m->lib == LIB_TORCH ? "tensor" : "numpy array", name);
    return NULL;
}

/* ---- objects and modules ---- */

/* wrap_value for an attribute of an nn.Module: the shape policy (symbolic.c) reads the
 * module through c->wrap_owner (mark_static on it, builtin torch.nn modules, int
 * attributes). */
static Var *wrap_attr(Capture *c, Var *o, PyObject *v, int32_t s)
{
    PyObject *saved = c->wrap_owner;
    int saved_in = c->wrap_in_module, saved_plain = c->wrap_plain_attr;
    if (o->kind == VK_MODULE)
        c->wrap_owner = o->obj;
    c->wrap_in_module = o->kind == VK_MODULE || (o->kind == VK_OBJECT && o->from_module);
    c->wrap_plain_attr = o->kind == VK_OBJECT && !o->from_module;
    Var *r = wrap_value(c, v, s);
    c->wrap_owner = saved;
    c->wrap_in_module = saved_in;
    c->wrap_plain_attr = saved_plain;
    return r;
}

static PyObject *modules_dict(PyObject *module)   /* borrowed, or NULL (no error) */
{
    PyObject **dictptr = _PyObject_GetDictPtr(module);
    PyObject *d = (dictptr && *dictptr && PyDict_Check(*dictptr)) ? PyDict_GetItemString(*dictptr, "_modules") : NULL;
    return (d && PyDict_Check(d)) ? d : NULL;
}

int32_t module_kid_source(const Var *m, PyObject *key, PyObject *child)
{
    PyObject *mods = m->kind == VK_MODULE && m->u.mod.kids ? modules_dict(m->obj) : NULL;
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    for (int32_t i = 0; mods && i < m->u.mod.n && PyDict_Next(mods, &pos, &k, &v); i++)
        if (key ? (PyUnicode_Check(k) && PyUnicode_Check(key) && PyUnicode_Compare(k, key) == 0) : v == child)
            return m->u.mod.kids[i];
    return -1;
}

/* `_modules` of a module made from a sourced container: a dict made during capture whose
 * values carry the sources of the original entries, so that code walking it (children(),
 * named_modules(), ModuleDict.values()) guards the entries, not the temporary holding them. */
static Var *kid_modules(Capture *c, Var *o)
{
    PyObject *mods = modules_dict(o->obj);
    Var *d = mods ? var_dict(c) : NULL;
    if (!d) {
        if (!mods)
            cap_fail(c, BR_INTERNAL, "module without a _modules dict");
        return NULL;
    }
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    for (int32_t i = 0; PyDict_Next(mods, &pos, &k, &v); i++) {
        Var *kv = var_const(c, k);
        Var *vv = kv ? wrap_attr(c, o, v, i < o->u.mod.n ? o->u.mod.kids[i] : -1) : NULL;
        if (!vv || var_dict_set(c, d, kv, vv) < 0)
            return NULL;
    }
    return d;
}

/* A leaf of kind `kind` about o.name (its source o's source .name), expected and len as the
 * kind reads them (borrowed; the guard takes its own reference). 0, or -1 with the capture
 * failed. o has a source. */
static int guard_attr_leaf(Capture *c, Var *o, PyObject *name, GuardKind kind, PyObject *expected, int len)
{
    Guard g;
    memset(&g, 0, sizeof g);
    g.kind = (uint8_t)kind;
    g.src = sources_add(&c->src, SRC_ATTR, o->src, 0, name, NULL);
    g.src2 = -1;
    g.expected = expected;
    g.len = len;
    return g.src < 0 || guards_add(&c->guards, &g) < 0 ? cap_fail_exc(c, BR_INTERNAL) : 0;
}

/* o.name was found on o's class (descr: a function, property, static or class method, or
 * a dict's C method an operator reaches): guarded to stay the class's, and with `shadow`
 * (not a data descriptor) not to gain an instance attribute of that name. */
int attr_guard_class(Capture *c, Var *o, PyObject *name, PyObject *descr, int shadow)
{
    return o->src < 0 ? 0 : guard_attr_leaf(c, o, name, GK_CLASS_ATTR, descr, shadow);
}

static Var *obj_attr(Capture *c, Var *o, PyObject *name)
{
    PyObject *obj = o->obj;
    PyTypeObject *tp = Py_TYPE(obj);
    PyObject *descr = _PyType_Lookup(tp, name);   /* borrowed */
    int is_module = o->kind == VK_MODULE;
    /* a class's own __getattribute__ decides every read (a transformers config's is
     * modelled: it maps attribute_map's names, then reads as object's): read it live */
    if (!readcache_generic_getattr(tp) && !attr_is_config_type(tp))
        goto live;
    /* data descriptors first: properties run their getter inline */
    if (descr && Py_TYPE(descr) == &PyProperty_Type) {
        if (attr_guard_class(c, o, name, descr, 0) < 0)
            return NULL;
        PyObject *fget = PyObject_GetAttrString(descr, "fget");
        if (!fget) {
            cap_fail_exc(c, BR_INTERNAL);
            return NULL;
        }
        if (PyFunction_Check(fget)) {
            Var *fn = wrap_untracked(c, fget);
            Py_DECREF(fget);
            Var *args[1] = {o};
            return fn ? call_var(c, fn, args, 1, NULL) : NULL;
        }
        Py_DECREF(fget);
    }
    /* the instance dict */
    PyObject **dictptr = _PyObject_GetDictPtr(obj);
    PyObject *idict = dictptr ? *dictptr : NULL;
    if (idict && PyDict_Check(idict) && !(descr && Py_TYPE(descr)->tp_descr_set)) {
        PyObject *v = PyDict_GetItemWithError(idict, name);
        if (v && is_module && o->src < 0 && o->u.mod.kids && PyUnicode_CompareWithASCIIString(name, "_modules") == 0)
            return kid_modules(c, o);
        if (v) {
            int32_t s = attr_source(c, o, name);
            if (o->src >= 0 && s < 0)
                return NULL;
            return wrap_attr(c, o, v, s);
        }
        if (PyErr_Occurred())
            return NULL;
    }
    /* functions on the type become methods bound to this var */
    if (descr && PyFunction_Check(descr)) {
        if (attr_guard_class(c, o, name, descr, 1) < 0)
            return NULL;
        Var *fn = wrap_untracked(c, descr);
        return var_method(c, o, fn);
    }
    if (descr && (Py_TYPE(descr) == &PyStaticMethod_Type || Py_TYPE(descr) == &PyClassMethod_Type)) {
        if (attr_guard_class(c, o, name, descr, 1) < 0)
            return NULL;
        return wrap_untracked_attr(c, obj, name);
    }
    /* nn.Module: parameters, buffers, submodules */
    if (is_module && !descr) {
        static const char *const dicts[] = {"_parameters", "_buffers", "_modules"};
        for (int i = 0; i < 3; i++) {
            PyObject *d = idict ? PyDict_GetItemString(idict, dicts[i]) : NULL;
            PyObject *v = (d && PyDict_Check(d)) ? PyDict_GetItemWithError(d, name) : NULL;
            if (v) {
                PyObject *dn = PyUnicode_FromString(dicts[i]);
                int32_t ds = dn ? attr_source(c, o, dn) : -1;
                int32_t s = (o->src >= 0 && ds >= 0) ? sources_add(&c->src, SRC_ITEM, ds, 0, name, NULL) : -1;
                Py_XDECREF(dn);
                if (o->src >= 0 && s < 0)
                    return NULL;
                if (o->src < 0 && i == 2)
                    s = module_kid_source(o, name, NULL);
                return wrap_attr(c, o, v, s);
            }
            if (PyErr_Occurred())
                return NULL;
        }
    }
live:;
    /* anything else: read it live (class constants, slots, __getattr__) */
    PyObject *v = PyObject_GetAttr(obj, name);
    if (!v) {
        cap_fail_exc(c, BR_USER_EXCEPTION);
        return NULL;
    }
    int32_t s = attr_source(c, o, name);
    Var *r;
    if (o->src >= 0 && s < 0)
        r = NULL;
    else if (s >= 0 && descr && (Py_TYPE(descr) == &PyMethodDescr_Type || Py_TYPE(descr) == &PyWrapperDescr_Type) &&
             ((PyCFunction_Check(v) && PyCFunction_GET_SELF(v) == obj) || (Py_TYPE(v) == &_PyMethodWrapper_Type)))
        r = wrap_bound_builtin(c, v, s);   /* the type's C method, bound anew on each read */
    else
        r = wrap_attr(c, o, v, s);
    Py_DECREF(v);
    return r;
}

/* ---- containers made during capture ---- */

static Var *container_method(Capture *c, Var *o, PyObject *name)
{
    Var *fn = var_const(c, name);   /* the method name; calls.c dispatches on it */
    return var_method(c, o, fn);
}

static AttrWrite *find_write(Capture *c, PyObject *obj, PyObject *name)
{
    for (AttrWrite *w = c->writes; w; w = w->next)
        if (w->obj == obj && PyUnicode_Compare(w->name, name) == 0)
            return w;
    return NULL;
}

int attr_written(Capture *c, PyObject *obj, PyObject *name)
{
    return c->writes && find_write(c, obj, name) != NULL;
}

/* Whether an object read through a source can gain or lose attributes after compiling: user
 * objects and modules always; anything else (a function, a class, a Python module) when it has
 * an instance dict or is a type that is not immutable. Builtins and their types cannot. */
static int attrs_can_change(const Var *o)
{
    if (o->kind == VK_OBJECT || o->kind == VK_MODULE)
        return 1;
    if (!o->obj)
        return 0;
    if (PyType_Check(o->obj))
        return !(((PyTypeObject *)o->obj)->tp_flags & Py_TPFLAGS_IMMUTABLETYPE);
    return Py_TYPE(o->obj)->tp_dictoffset != 0;
}

int attr_guard_hasattr(Capture *c, Var *o, PyObject *name, int has)
{
    if (o->src < 0 || !attrs_can_change(o))
        return 0;
    return guard_attr_leaf(c, o, name, GK_HASATTR, NULL, has);
}

/* The methods of set that only read it. */
static int set_method_reads(PyObject *name)
{
    static const char *const reads[] = {
        "copy",   "difference",   "intersection", "isdisjoint", "issubset", "issuperset", "symmetric_difference",
        "union",  "__contains__", "__len__",      "__iter__",   "__or__",   "__and__",    "__sub__",
        "__xor__"};
    const char *n = PyUnicode_AsUTF8(name);
    for (size_t i = 0; n && i < sizeof reads / sizeof *reads; i++)
        if (!strcmp(n, reads[i]))
            return 1;
    sj_err_clear();
    return 0;
}

Var *attr_property(Capture *c, Var *o, PyObject *prop, PyObject *name, const char *tp_name)
{
    PyObject *fget = PyObject_GetAttrString(prop, "fget");   /* new */
    Var *fn = fget && PyFunction_Check(fget) ? wrap_untracked(c, fget) : NULL;
    Py_XDECREF(fget);
    if (!fn) {
        sj_err_clear();
        cap_fail(c, BR_UNSUPPORTED_VALUE, "property '%U' of %s", name, tp_name);
        return NULL;
    }
    Var *a[1] = {o};
    return call_var(c, fn, a, 1, NULL);
}

Var *attr_load(Capture *c, Var *o, PyObject *name)
{
    switch (o->kind) {
    case VK_TENSOR:
    case VK_LIST:
    case VK_TUPLE:
    case VK_DICT:
    case VK_SLICE:
    case VK_DICTVIEW:
    case VK_SYMINT:
    case VK_GSCALAR:
    case VK_PARTIAL:
    case VK_METHOD:
        /* values capture models by kind: v.__class__ is type(v) (the type of an input is
         * guarded with it) */
        if (PyUnicode_CompareWithASCIIString(name, "__class__") == 0) {
            Var *type_fn = wrap_untracked(c, (PyObject *)&PyType_Type);
            return type_fn ? call_var(c, type_fn, &o, 1, NULL) : NULL;
        }
        break;
    default:
        break;
    }
    if ((o->kind == VK_OBJECT || o->kind == VK_MODULE) && c->writes) {
        AttrWrite *w = find_write(c, o->obj, name);
        if (w)
            return w->value;
        for (w = c->writes; w; w = w->next)
            if (w->obj == o->obj && !w->owned && PyUnicode_CompareWithASCIIString(name, "__dict__") == 0) {
                cap_fail(c, BR_SIDE_EFFECT, "__dict__ of a %s whose attributes the frame wrote",
                         Py_TYPE(o->obj)->tp_name);
                return NULL;
            }
    }
    switch (o->kind) {
    case VK_TENSOR:
        return tensor_attr(c, o, name);
    case VK_MODULE:
    case VK_OBJECT: {
        Var *r = obj_attr(c, o, name);
        PyObject **dp = r && r->kind == VK_DICT ? _PyObject_GetDictPtr(o->obj) : NULL;
        if (dp && *dp && PyUnicode_CompareWithASCIIString(name, "__dict__") == 0) {
            /* the object's own attribute dict: a write into it is an attribute write that
             * later reads of the attribute (and the replay of attribute writes) would not
             * see, so it breaks, as writes into untracked containers do */
            r->untracked = 1;
            r->orig = cap_keep(c, *dp);   /* borrowed (keepalive) */
            if (!r->orig)
                return NULL;
        }
        return r;
    }
    case VK_LIST:
    case VK_DICT:
        if (collections_type_of(o)) {
            int handled;
            Var *r = collections_attr(c, o, name, &handled);
            if (handled || cap_failed(c))
                return r;
        }
        return container_method(c, o, name);
    case VK_USEROBJ:
        return objects_attr_load(c, o, name);
    case VK_SUPER:
        return objects_super_attr(c, o, name);
    case VK_TUPLE: {
        if (o->u.seq.subtype) {
            PyObject *fields = objects_fields(o->u.seq.subtype);
            if (fields) {
                for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fields); i++) {
                    int eq = PyUnicode_Compare(PyTuple_GET_ITEM(fields, i), name) == 0;
                    if (eq && i < o->u.seq.n) {
                        Py_DECREF(fields);
                        return o->u.seq.items[i];
                    }
                }
            }
            Py_XDECREF(fields);
            sj_err_clear();
            int handled;
            Var *r = collections_attr(c, o, name, &handled);
            if (handled || cap_failed(c))
                return r;
        }
        return container_method(c, o, name);
    }
    case VK_PYMODULE: {
        PyObject *v = PyObject_GetAttr(o->obj, name);
        if (!v) {
            cap_fail_exc(c, BR_USER_EXCEPTION);
            return NULL;
        }
        /* library modules are trusted not to be patched; user modules are guarded */
        PyObject *mname = PyModule_GetNameObject(o->obj);
        int trusted = 0;
        if (mname) {
            const char *mn = PyUnicode_AsUTF8(mname);
            trusted = mn && (!strncmp(mn, "torch", 5) || !strncmp(mn, "numpy", 5) || !strcmp(mn, "math") ||
                             !strcmp(mn, "operator") || !strcmp(mn, "functools") || !strcmp(mn, "builtins") ||
                             !strcmp(mn, "itertools") || !strncmp(mn, "collections", 11));
            Py_DECREF(mname);
        } else {
            sj_err_clear();
        }
        int32_t s = trusted ? -1 : attr_source(c, o, name);
        Var *r = (!trusted && o->src >= 0 && s < 0) ? NULL : wrap_value(c, v, s);
        if (r && trusted && r->src < 0) {
            r->stable = 1;
            if (r->kind == VK_METHOD && !r->obj && cap_keep(c, v))
                r->obj = v;   /* the bound method itself, for a resume function */
        }
        Py_DECREF(v);
        return r;
    }
    case VK_CONST:
    case VK_CALLABLE:
    case VK_FUNC: {
        if (o->kind == VK_FUNC && !o->obj) {
            cap_fail(c, BR_UNSUPPORTED_VALUE, "attribute '%U' of a function made during capture", name);
            return NULL;
        }
        if (o->kind == VK_CONST && var_is_outside(o) && PySet_CheckExact(o->obj) && !set_method_reads(name)) {
            /* a set from outside is a constant guarded by value: a write would happen now,
             * at capture, and never again */
            cap_fail(c, BR_SIDE_EFFECT, "set.%U on a set from outside the frame", name);
            return NULL;
        }
        PyObject *v = PyObject_GetAttr(o->obj, name);
        if (!v) {
            cap_fail_exc(c, BR_USER_EXCEPTION);
            return NULL;
        }
        int32_t s = o->kind == VK_CONST ? -1 : attr_source(c, o, name);
        /* a class's C classmethod (dict.fromkeys) is bound anew on each read */
        Var *r = s >= 0 && PyType_Check(o->obj) && PyCFunction_Check(v) && PyCFunction_GET_SELF(v) == o->obj
                     ? wrap_bound_builtin(c, v, s)
                     : wrap_value(c, v, s);
        Py_DECREF(v);
        return r;
    }
    case VK_GRADMODE:
        if (o->u.grad.inference)
            return infmode_attr(c, o, name);
        /* the class, for clone() of the grad-mode decorators (self.__class__()); a live
         * one is guarded by its type */
        if (PyUnicode_CompareWithASCIIString(name, "__class__") == 0)
            return wrap_untracked(c, o->u.grad.enabled ? libs.enable_grad : libs.no_grad);
        /* fall through */
    default:
        cap_fail(c, BR_UNSUPPORTED_VALUE, "attribute '%U' of %s", name, var_a(c, o));
        return NULL;
    }
}

/* ---- attribute writes on outside objects ---- */

/* 1 when fn is a Python function of module mod (a str) named qualname. */
static int func_is(PyObject *fn, const char *mod, const char *qualname)
{
    if (!fn || !PyFunction_Check(fn))
        return 0;
    PyObject *m = ((PyFunctionObject *)fn)->func_module, *q = ((PyFunctionObject *)fn)->func_qualname;
    return m && q && PyUnicode_Check(m) && PyUnicode_Check(q) && PyUnicode_CompareWithASCIIString(m, mod) == 0 &&
           PyUnicode_CompareWithASCIIString(q, qualname) == 0;
}

/* The value of fn's closure cell for free variable name (borrowed), or NULL. */
static PyObject *closure_cell(PyObject *fn, const char *name)
{
    PyObject *cl = PyFunction_GET_CLOSURE(fn);
    PyObject *free = PyCode_GetFreevars((PyCodeObject *)PyFunction_GET_CODE(fn));   /* strong */
    PyObject *r = NULL;
    for (Py_ssize_t i = 0; free && cl && PyTuple_GET_SIZE(free) == PyTuple_GET_SIZE(cl) && i < PyTuple_GET_SIZE(free);
         i++)
        if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(free, i), name) == 0)
            r = PyCell_GET(PyTuple_GET_ITEM(cl, i));
    Py_XDECREF(free);
    sj_err_clear();
    return r;
}

/* 1 when no class after owner in t's MRO, object excepted, defines slot (an interned
 * str): owner's super().<slot> is then object's. The __getattribute__ of transformers'
 * HeterogeneousConfigMixin is object's too for a config without a heterogeneity spec
 * (config_write_ok checks the instance). */
static int super_is_object(PyTypeObject *t, PyObject *owner, PyObject *slot)
{
    PyObject *mro = t->tp_mro;
    Py_ssize_t i = 0, n = mro ? PyTuple_GET_SIZE(mro) : 0;
    while (i < n && PyTuple_GET_ITEM(mro, i) != owner)
        i++;
    if (i == n)
        return 0;
    for (i++; i < n; i++) {
        PyTypeObject *b = (PyTypeObject *)PyTuple_GET_ITEM(mro, i);
        PyObject *f = b != &PyBaseObject_Type && b->tp_dict ? PyDict_GetItemWithError(b->tp_dict, slot) : NULL;
        if (f && !func_is(f, "transformers.integrations.heterogeneity.configuration_utils",
                          "HeterogeneousConfigMixin.__getattribute__"))
            return 0;
    }
    sj_err_clear();
    return 1;
}

/* A transformers config (PreTrainedConfig): its __getattribute__ and __setattr__ map the
 * names of attribute_map, then act as object's; huggingface_hub's @strict wraps the
 * __setattr__ of each config class in one that runs the field's validators first. 1 when
 * t's two methods are exactly those. */
int attr_is_config_type(PyTypeObject *t)
{
    static PyObject *s_setattr, *s_getattribute;   /* strong, interned, never released */
    if ((!s_setattr && !(s_setattr = PyUnicode_InternFromString("__setattr__"))) ||
        (!s_getattribute && !(s_getattribute = PyUnicode_InternFromString("__getattribute__")))) {
        sj_err_clear();
        return 0;
    }
    PyObject *fn = _PyType_Lookup(t, s_setattr);
    for (int depth = 0;
         depth < 16 && func_is(fn, "huggingface_hub.dataclasses", "strict.<locals>.wrap.<locals>.__strict_setattr__");
         depth++)
        fn = closure_cell(fn, "original_setattr");
    if (!func_is(fn, "transformers.configuration_utils", "PreTrainedConfig.__setattr__"))
        return 0;
    PyObject *owner = closure_cell(fn, "__class__");
    PyObject *get = _PyType_Lookup(t, s_getattribute);
    return owner && super_is_object(t, owner, s_setattr) &&
           func_is(get, "transformers.configuration_utils", "PreTrainedConfig.__getattribute__") &&
           closure_cell(get, "__class__") == owner && super_is_object(t, owner, s_getattribute);
}

/* A config's write of name = val: 0 when the replay (the config's own __setattr__) only
 * stores it where reads find it, else -1 with the failure recorded. A name of
 * attribute_map (either side) is stored under another name; a field with validators takes
 * only a constant, validated now (the replay validates it again, and passes). */
static int config_write_ok(Capture *c, PyObject *obj, PyObject *name, Var *val)
{
    PyObject **dp = _PyObject_GetDictPtr(obj);
    PyObject *spec = dp && *dp ? PyDict_GetItemString(*dp, "_heterogeneity_spec") : NULL;
    if (spec && spec != Py_None)
        return cap_fail(c, BR_SIDE_EFFECT, "assignment to attribute '%U' of a heterogeneous %s", name,
                        Py_TYPE(obj)->tp_name);
    PyObject *map = PyObject_GetAttrString(obj, "attribute_map");
    int aliased = 0;
    if (map && PyDict_Check(map)) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        aliased = PyDict_Contains(map, name);
        while (aliased == 0 && PyDict_Next(map, &pos, &k, &v))
            aliased = PyUnicode_Check(v) && PyUnicode_Compare(v, name) == 0;
    }
    Py_XDECREF(map);
    if (!map || aliased < 0)
        return cap_fail_exc(c, BR_INTERNAL);
    if (aliased)
        return cap_fail(c, BR_SIDE_EFFECT, "assignment to attribute '%U' of a %s: a name of its attribute_map", name,
                        Py_TYPE(obj)->tp_name);
    return attr_config_validate(c, Py_TYPE(obj), name, val);
}

int attr_config_validate(Capture *c, PyTypeObject *t, PyObject *name, Var *val)
{
    PyObject *vals = PyObject_GetAttrString((PyObject *)t, "__validators__");   /* new */
    PyObject *checks = vals && PyDict_Check(vals) ? PyDict_GetItemWithError(vals, name) : NULL;   /* borrowed */
    int rc = 0;
    if (!vals || PyErr_Occurred()) {
        sj_err_clear();   /* a config without validators */
    } else if (checks && PyList_Check(checks) && PyList_GET_SIZE(checks) > 0) {
        if (val->kind != VK_CONST)
            rc = cap_fail(c, BR_SIDE_EFFECT,
                          "assignment of a %s to attribute '%U' of a %s: its validators run "
                          "on the value",
                          var_kind_name(val), name, t->tp_name);
        for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(checks); i++) {
            PyObject *r = PyObject_CallOneArg(PyList_GET_ITEM(checks, i), val->obj);
            if (!r) {
                sj_err_clear();
                rc = cap_fail(c, BR_SIDE_EFFECT, "assignment to attribute '%U' of a %s: its validator rejects %R", name,
                              t->tp_name, val->obj);
            }
            Py_XDECREF(r);
        }
    }
    Py_XDECREF(vals);
    return rc;
}

/* transformers' ModelOutput (an OrderedDict subclass and a dataclass): its __setattr__
 * also sets the item of a field to a value that is not None, its __setitem__ also sets the
 * attribute; both then act as object's and OrderedDict's. 1 when t's two methods are
 * exactly those. */
static int is_model_output_type(PyTypeObject *t)
{
    static PyObject *s_setattr, *s_setitem;   /* strong, interned, never released */
    if ((!s_setattr && !(s_setattr = PyUnicode_InternFromString("__setattr__"))) ||
        (!s_setitem && !(s_setitem = PyUnicode_InternFromString("__setitem__")))) {
        sj_err_clear();
        return 0;
    }
    PyObject *set = _PyType_Lookup(t, s_setattr), *item = _PyType_Lookup(t, s_setitem);
    return func_is(set, "transformers.utils.generic", "ModelOutput.__setattr__") &&
           func_is(item, "transformers.utils.generic", "ModelOutput.__setitem__") && PyType_IsSubtype(t, &PyODict_Type);
}

/* nn.Module.__setattr__ acts as object's for a value that is no Parameter, Buffer or
 * Module, under a name none of the module's _parameters, _buffers, _modules holds. */
static int module_write_ok(Capture *c, PyObject *obj, PyObject *name, Var *val)
{
    static const char *const dicts[] = {"_parameters", "_buffers", "_modules"};
    PyObject **dp = _PyObject_GetDictPtr(obj);
    for (int i = 0; i < 3; i++) {
        PyObject *d = dp && *dp ? PyDict_GetItemString(*dp, dicts[i]) : NULL;
        if (d && PyDict_Check(d) && PyDict_Contains(d, name) != 0)
            return cap_fail(c, BR_SIDE_EFFECT, "assignment to '%U' of a %s, an entry of its %s", name,
                            Py_TYPE(obj)->tp_name, dicts[i]);
    }
    int special = val->kind == VK_MODULE;
    if (!special && val->obj && val->src >= 0 && (val->kind == VK_TENSOR || val->kind == VK_OBJECT)) {
        static PyObject *buffer_type;   /* strong, never released: torch.nn.Buffer */
        if (!buffer_type && !(buffer_type = libs_get_path(libs.torch, "nn.Buffer")))
            return cap_fail_exc(c, BR_INTERNAL);
        int p = PyObject_IsInstance(val->obj, libs.param_type);
        int b = p == 0 ? PyObject_IsInstance(val->obj, buffer_type) : p;
        int m = b == 0 ? PyObject_IsInstance(val->obj, libs.module_type) : b;
        if (m < 0)
            return cap_fail_exc(c, BR_INTERNAL);
        special = m;
    }
    if (special)
        return cap_fail(c, BR_SIDE_EFFECT,
                        "assignment of a %s to attribute '%U' of a %s (nn.Module.__setattr__ "
                        "registers it)",
                        val->obj ? Py_TYPE(val->obj)->tp_name : var_kind_name(val), name, Py_TYPE(obj)->tp_name);
    return 0;
}

/* 0 when writing name = val on the outside object o can be replayed after the graph
 * (see AttrWrite); 1 when the write runs a property's setter, a Python function the
 * capture runs in its place (*fset: borrowed); else -1 with a BR_SIDE_EFFECT failure
 * naming why not. */
static int write_replayable(Capture *c, Var *o, PyObject *name, Var *val, int generic, PyObject **fset)
{
    static PyObject *s_setattr;   /* strong, interned, never released */
    if (!s_setattr && !(s_setattr = PyUnicode_InternFromString("__setattr__")))
        return cap_fail_exc(c, BR_INTERNAL);
    PyObject *obj = o->obj;
    PyTypeObject *t = Py_TYPE(obj);
    const char *tn = t->tp_name;
    if (o->src < 0)
        return cap_fail(c, BR_SIDE_EFFECT, "assignment to attribute '%U' of a %s reached without a source", name, tn);
    int config = 0;
    /* object's __getattribute__, or a builtin base's (dict) that is the same function; a
     * module's getattro is generic too, but module writes are not replayed here */
    int plain_get = readcache_generic_getattr(t) && !PyModule_Check(obj);
    if (!plain_get && !(config = attr_is_config_type(t)))
        return cap_fail(c, BR_SIDE_EFFECT, "assignment to attribute '%U' of a %s with its own __getattribute__", name,
                        tn);
    if (config) {
        if (config_write_ok(c, obj, name, val) < 0)
            return -1;
    } else if (o->kind == VK_MODULE) {
        if (!generic && _PyType_Lookup(t, s_setattr) != _PyType_Lookup((PyTypeObject *)libs.module_type, s_setattr))
            return cap_fail(c, BR_SIDE_EFFECT, "assignment to attribute '%U' of a %s with its own __setattr__", name,
                            tn);
        if (module_write_ok(c, obj, name, val) < 0)
            return -1;
    } else if (!generic && t->tp_setattro != PyObject_GenericSetAttr && !is_model_output_type(t)) {
        return cap_fail(c, BR_SIDE_EFFECT, "assignment to attribute '%U' of a %s with its own __setattr__", name, tn);
    }
    /* each __setattr__ admitted above ends in object's: a data descriptor of the class
     * takes the write */
    PyObject *descr = _PyType_Lookup(t, name);
    if (descr && Py_TYPE(descr)->tp_descr_set) {
        if (Py_TYPE(descr) == &PyProperty_Type) {
            PyObject *fn = cap_keep_steal(c, PyObject_GetAttrString(descr, "fset"));   /* borrowed */
            if (!fn)
                return cap_fail_exc(c, BR_INTERNAL);
            if (PyFunction_Check(fn)) {
                *fset = fn;
                return 1;
            }
            return cap_fail(c, BR_SIDE_EFFECT, "assignment to attribute '%U' of a %s, a property %s", name, tn,
                            fn != Py_None ? "whose setter is not a Python function" : "without a setter");
        }
        return cap_fail(c, BR_SIDE_EFFECT, "assignment to attribute '%U' of a %s, %s", name, tn,
                        Py_TYPE(descr) == &PyMemberDescr_Type ? "a __slots__ slot" : "a data descriptor");
    }
    if (!t->tp_dictoffset)
        return cap_fail(c, BR_SIDE_EFFECT, "assignment to attribute '%U' of a %s, which has no __dict__", name, tn);
    return 0;
}

/* A write on a user object whose __dict__ the frame holds as a dict var would leave that
 * var stale (and the reverse): refused. */
static int dict_held(Capture *c, PyObject *obj)
{
    PyObject **dp = _PyObject_GetDictPtr(obj);
    if (!dp || !*dp)
        return 0;
    PyObject *id = PyLong_FromVoidPtr(*dp);
    PyObject *key = id ? PyTuple_Pack(1, id) : NULL;   /* wrap.c's key of a list or dict */
    Py_XDECREF(id);
    int r = key ? PyDict_Contains(c->wrapped, key) : -1;
    Py_XDECREF(key);
    if (r < 0)
        sj_err_clear();
    return r != 0;
}

static int store(Capture *c, Var *o, PyObject *name, Var *val, int generic, int item)
{
    if (cap_note_change(c, o, 0) < 0)
        return -1;
    if (o->kind == VK_USEROBJ)
        return objects_attr_store(c, o, name, val) < 0 ? (cap_failed(c) ? -1 : cap_fail_exc(c, BR_INTERNAL)) : 0;
    if ((o->kind == VK_OBJECT || o->kind == VK_MODULE) && o->obj) {
        int owned = o->fresh && o->src < 0;
        if (!owned) {
            PyObject *fset = NULL;
            int how = write_replayable(c, o, name, val, generic, &fset);
            if (how < 0)
                return -1;
            if (how == 1) {
                /* the setter runs inline: its own writes are recorded and replayed */
                Var *fn = wrap_untracked(c, fset);
                Var *args[2] = {o, val};
                return fn && call_var(c, fn, args, 2, NULL) ? 0 : -1;
            }
            if (dict_held(c, o->obj))
                return cap_fail(c, BR_SIDE_EFFECT,
                                "assignment to attribute '%U' of a %s whose __dict__ the frame "
                                "reads",
                                name, Py_TYPE(o->obj)->tp_name);
        }
        AttrWrite *w = find_write(c, o->obj, name);
        if (w && !owned && w->item != item && is_model_output_type(Py_TYPE(o->obj)))
            /* o.k = None after o["k"] = v leaves the item: one replay cannot do both */
            return cap_fail(c, BR_SIDE_EFFECT, "item and attribute assignments to '%U' of a %s", name,
                            Py_TYPE(o->obj)->tp_name);
        if (!w) {
            if (!(w = cap_alloc(c, sizeof(AttrWrite))) || !cap_keep(c, name))
                return -1;
            w->target = o;
            w->obj = o->obj;
            w->name = name;
            w->owned = owned;
            AttrWrite **tail = &c->writes;   /* replayed in the order of the first writes */
            while (*tail)
                tail = &(*tail)->next;
            *tail = w;
        }
        w->value = val;
        w->generic = generic;
        w->item = item;
        return 0;
    }
    return cap_fail(c, BR_SIDE_EFFECT, "assignment to attribute '%U' of %s", name, var_a(c, o));
}

int attr_store(Capture *c, Var *o, PyObject *name, Var *val)
{
    return store(c, o, name, val, 0, 0);
}

int attr_store_generic(Capture *c, Var *o, PyObject *name, Var *val)
{
    return store(c, o, name, val, 1, 0);
}

/* o[key] = val on a record made in the frame (a ModelOutput: fields in order, the fields
 * that are not None its dict items). Its __setitem__ sets the item and the attribute, so
 * the record's field takes the value; the dict view stays "the fields that are not None,
 * in field order" only when the key is a field, the value is no None, and the key keeps
 * its place in the dict: it was there already (a dict keeps a replaced key where it was),
 * or no later field is in the dict (a new key goes last). 0, or -1 with the failure. */
static int record_store_item(Capture *c, Var *o, PyObject *key, Var *val)
{
    Var *a = o->u.uobj.attrs;
    int32_t at = -1;
    for (int32_t i = 0; i < a->u.dict.n && at < 0; i++) {
        int eq = PyObject_RichCompareBool(a->u.dict.keys[i]->obj, key, Py_EQ);
        if (eq < 0)
            return cap_fail_exc(c, BR_INTERNAL);
        if (eq)
            at = i;
    }
    const char *tn = o->u.uobj.type->tp_name;
    if (at < 0)
        return cap_fail(c, BR_SIDE_EFFECT, "item assignment of '%U', not a field, on a %s made in the frame", key, tn);
    if (val->kind == VK_CONST && val->obj == Py_None)
        return cap_fail(c, BR_SIDE_EFFECT, "item assignment of None to '%U' of a %s made in the frame", key, tn);
    Var *cur = a->u.dict.vals[at];
    if (cur->kind == VK_CONST && cur->obj == Py_None)
        for (int32_t i = at + 1; i < a->u.dict.n; i++) {
            Var *later = a->u.dict.vals[i];
            if (!(later->kind == VK_CONST && later->obj == Py_None))
                return cap_fail(c, BR_SIDE_EFFECT,
                                "item assignment of '%U' on a %s made in the frame, after its later field '%U' "
                                "(the dict order would leave the field order)",
                                key, tn, a->u.dict.keys[i]->obj);
        }
    a->u.dict.vals[at] = val;
    return 0;
}

int attr_store_item(Capture *c, Var *o, Var *key, Var *val, int *handled)
{
    int keyed = var_is_const(key) && PyUnicode_CheckExact(key->obj);
    if (keyed && o->kind == VK_USEROBJ && o->u.uobj.record && is_model_output_type(o->u.uobj.type)) {
        *handled = 1;
        return record_store_item(c, o, key->obj, val);
    }
    *handled = keyed && o->kind == VK_OBJECT && o->obj && o->src >= 0 && is_model_output_type(Py_TYPE(o->obj));
    return *handled ? store(c, o, key->obj, val, 0, 1) : 0;
}

int attr_load_method(Capture *c, Var *obj, PyObject *name, Var **meth, Var **self_or_attr)
{
    *meth = NULL;
    *self_or_attr = attr_load(c, obj, name);
    return *self_or_attr ? 0 : -1;
}

int attr_has_writes(const Capture *c)
{
    for (AttrWrite *w = c->writes; w; w = w->next)
        if (!w->owned)
            return 1;
    return 0;
}

/* Every user object (and module guarded by its type) read through a source whose type is
 * that of a written one: the first source of each distinct object joins the GK_DISTINCT
 * set, any other source of it is guarded the same object as that one. Objects of other
 * types never alias them (their types are guarded). */
int attr_check_writes(Capture *c)
{
    const int32_t cap = (int32_t)(sizeof c->distinct_srcs / sizeof c->distinct_srcs[0]);
    for (ObjRead *r = c->objreads; r; r = r->next) {
        Var *v = r->v;
        int written = 0;
        for (AttrWrite *w = c->writes; w && !written; w = w->next)
            written =
                !w->owned && Py_TYPE(w->obj) == Py_TYPE(v->obj) && (w->target->kind == VK_OBJECT || w->target->by_type);
        if (!written)
            continue;
        Var *first = NULL;   /* the first read of the same object through another source */
        for (ObjRead *q = r->next; q; q = q->next)
            if (q->v->obj == v->obj)
                first = q->v;   /* the list is newest first: the last hit is the first read */
        if (first) {
            if (first->src == v->src)
                continue;
            Guard g;
            memset(&g, 0, sizeof g);
            g.kind = GK_SAME_OBJECT;
            g.src = v->src;
            g.src2 = first->src;
            if (guards_add(&c->guards, &g) < 0)
                return cap_fail_exc(c, BR_INTERNAL);
            continue;
        }
        if (c->ndistinct == cap)
            return cap_fail(c, BR_SIDE_EFFECT, "attribute writes on one of more than %d objects read from the inputs",
                            (int)cap);
        c->distinct_srcs[c->ndistinct++] = v->src;
    }
    return 0;
}
