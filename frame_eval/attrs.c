/* Attribute loads: tensors (metadata folds to constants), nn.Modules (parameters, buffers,
 * submodules, with their sources), user objects, library modules, containers. */
#include "capture.h"
#include "libs.h"
#include "../core/errors.h"

static Var *method_var(Capture *c, Var *self, Var *fn)
{
    Var *m = var_new(c, VK_METHOD);
    if (m) {
        m->u.method.self = self;
        m->u.method.fn = fn;
    }
    return m;
}

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
    PyObject *t = PyTuple_New(m->ndim);
    if (!t)
        return NULL;
    for (int i = 0; i < m->ndim; i++) {
        PyObject *d = PyLong_FromLongLong(m->size[i]);
        if (!d) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, d);
    }
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
    if (!strcmp(n, "shape"))
        return shape_var(c, m);
    if (!strcmp(n, "dtype"))
        return var_const_steal(c, dtype_to_py((DType)m->dtype, (Lib)m->lib));
    if (!strcmp(n, "ndim"))
        return var_const_steal(c, PyLong_FromLong(m->ndim));
    if (m->lib == LIB_TORCH) {
        if (!strcmp(n, "requires_grad"))
            return var_const(c, m->requires_grad ? Py_True : Py_False);
        if (!strcmp(n, "is_cpu"))   /* capture models CPU tensors only (shapes/meta.c) */
            return var_const(c, Py_True);
        if (!strcmp(n, "is_cuda") || !strcmp(n, "is_sparse") || !strcmp(n, "is_quantized") ||
            !strcmp(n, "is_meta") || !strcmp(n, "is_nested") || !strcmp(n, "is_mps"))
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
        return fn ? method_var(c, t, fn) : NULL;
    }
    Py_DECREF(d);
    cap_fail(c, BR_UNSUPPORTED_VALUE, "tensor attribute '%U'", name);
    return NULL;
}

/* ---- objects and modules ---- */

/* wrap_value for an attribute of an nn.Module: the shape policy (symbolic.c) reads the
 * module through c->wrap_owner (mark_static on it, builtin torch.nn modules, int
 * attributes). */
static Var *wrap_attr(Capture *c, Var *o, PyObject *v, int32_t s)
{
    PyObject *saved = c->wrap_owner;
    if (o->kind == VK_MODULE)
        c->wrap_owner = o->obj;
    Var *r = wrap_value(c, v, s);
    c->wrap_owner = saved;
    return r;
}

static PyObject *modules_dict(PyObject *module)   /* borrowed, or NULL (no error) */
{
    PyObject **dictptr = _PyObject_GetDictPtr(module);
    PyObject *d = (dictptr && *dictptr && PyDict_Check(*dictptr))
                      ? PyDict_GetItemString(*dictptr, "_modules") : NULL;
    return (d && PyDict_Check(d)) ? d : NULL;
}

int32_t module_kid_source(const Var *m, PyObject *key, PyObject *child)
{
    PyObject *mods = m->kind == VK_MODULE && m->u.mod.kids ? modules_dict(m->obj) : NULL;
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    for (int32_t i = 0; mods && i < m->u.mod.n && PyDict_Next(mods, &pos, &k, &v); i++)
        if (key ? (PyUnicode_Check(k) && PyUnicode_Check(key) && PyUnicode_Compare(k, key) == 0)
                : v == child)
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

static Var *obj_attr(Capture *c, Var *o, PyObject *name)
{
    PyObject *obj = o->obj;
    PyTypeObject *tp = Py_TYPE(obj);
    PyObject *descr = _PyType_Lookup(tp, name);   /* borrowed */
    int is_module = o->kind == VK_MODULE;
    /* data descriptors first: properties run their getter inline */
    if (descr && Py_TYPE(descr) == &PyProperty_Type) {
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
        if (v && is_module && o->src < 0 && o->u.mod.kids &&
            PyUnicode_CompareWithASCIIString(name, "_modules") == 0)
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
        Var *fn = wrap_untracked(c, descr);
        return fn ? method_var(c, o, fn) : NULL;
    }
    if (descr && (Py_TYPE(descr) == &PyStaticMethod_Type || Py_TYPE(descr) == &PyClassMethod_Type)) {
        PyObject *v = PyObject_GetAttr(obj, name);
        if (!v) {
            cap_fail_exc(c, BR_USER_EXCEPTION);
            return NULL;
        }
        Var *r = wrap_untracked(c, v);
        Py_DECREF(v);
        return r;
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
             ((PyCFunction_Check(v) && PyCFunction_GET_SELF(v) == obj) ||
              (Py_TYPE(v) == &_PyMethodWrapper_Type)))
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
    return fn ? method_var(c, o, fn) : NULL;
}

static AttrWrite *find_write(Capture *c, PyObject *obj, PyObject *name)
{
    for (AttrWrite *w = c->writes; w; w = w->next)
        if (w->obj == obj && PyUnicode_Compare(w->name, name) == 0)
            return w;
    return NULL;
}

/* The methods of set that only read it. */
static int set_method_reads(PyObject *name)
{
    static const char *const reads[] = {"copy", "difference", "intersection", "isdisjoint", "issubset",
                                        "issuperset", "symmetric_difference", "union", "__contains__",
                                        "__len__", "__iter__", "__or__", "__and__", "__sub__", "__xor__"};
    const char *n = PyUnicode_AsUTF8(name);
    for (size_t i = 0; n && i < sizeof reads / sizeof *reads; i++)
        if (!strcmp(n, reads[i]))
            return 1;
    sj_err_clear();
    return 0;
}

Var *attr_load(Capture *c, Var *o, PyObject *name)
{
    if ((o->kind == VK_OBJECT || o->kind == VK_MODULE) && c->writes) {
        AttrWrite *w = find_write(c, o->obj, name);
        if (w)
            return w->value;
    }
    switch (o->kind) {
    case VK_TENSOR:
        return tensor_attr(c, o, name);
    case VK_MODULE:
    case VK_OBJECT:
        return obj_attr(c, o, name);
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
        if (o->kind == VK_CONST && o->src >= 0 && PySet_CheckExact(o->obj) && !set_method_reads(name)) {
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
        cap_fail(c, BR_UNSUPPORTED_VALUE, "attribute '%U' of a %s", name, var_kind_name(o));
        return NULL;
    }
}

int attr_store(Capture *c, Var *o, PyObject *name, Var *val)
{
    if (o->kind == VK_USEROBJ)
        return objects_attr_store(c, o, name, val) < 0 ? cap_fail_exc(c, BR_INTERNAL) : 0;
    if ((o->kind == VK_OBJECT || o->kind == VK_MODULE) && o->obj) {
        PyTypeObject *t = Py_TYPE(o->obj);
        if (t->tp_setattro != PyObject_GenericSetAttr && !(o->kind == VK_MODULE))
            return cap_fail(c, BR_SIDE_EFFECT, "assignment to attribute '%U' of a %s with its own __setattr__",
                            name, t->tp_name);
        AttrWrite *w = find_write(c, o->obj, name);
        if (!w) {
            /* the value before the first write; read through the source so it is guarded */
            Var *before = attr_load(c, o, name);
            if (!before) {
                if (!cap_failed(c))
                    return -1;
                /* absent before: remember that; the end check then refuses the write */
                c->reason = BR_NONE;
                Py_CLEAR(c->reason_msg);
                Py_CLEAR(c->user_stack);
                sj_err_clear();
            }
            if (!(w = cap_alloc(c, sizeof(AttrWrite))) || !cap_keep(c, name))
                return -1;
            w->obj = o->obj;
            w->name = name;
            w->original = before ? before->obj : NULL;
            w->owned = o->fresh && o->src < 0;
            w->next = c->writes;
            c->writes = w;
        }
        w->value = val;
        return 0;
    }
    return cap_fail(c, BR_SIDE_EFFECT, "assignment to attribute '%U' of a %s", name, var_kind_name(o));
}

int attr_load_method(Capture *c, Var *obj, PyObject *name, Var **meth, Var **self_or_attr)
{
    *meth = NULL;
    *self_or_attr = attr_load(c, obj, name);
    return *self_or_attr ? 0 : -1;
}

int attr_check_writes(Capture *c)
{
    for (AttrWrite *w = c->writes; w; w = w->next) {
        Var *v = w->value;
        int same = 0;
        if (w->owned)
            continue;   /* made during capture: nothing outside sees it */
        if (w->original && v->obj == w->original && v->kind != VK_TENSOR)
            same = 1;
        else if (w->original && v->kind == VK_CONST && Py_TYPE(v->obj) == Py_TYPE(w->original)) {
            int eq = PyObject_RichCompareBool(v->obj, w->original, Py_EQ);
            if (eq < 0)
                sj_err_clear();
            same = eq > 0;
        }
        if (!same)
            return cap_fail(c, BR_SIDE_EFFECT, "assignment to attribute '%U' of a %s (replaying writes to "
                            "Python objects is not implemented yet)", w->name, Py_TYPE(w->obj)->tp_name);
    }
    return 0;
}
