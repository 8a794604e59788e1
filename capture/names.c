/* Names in break reasons: the path a user would write for a type or a callable
 * (torch.rand, torch.Tensor.addcdiv_, numpy.add.outer, collections.OrderedDict), and a
 * noun phrase with its article for a capture value ("a numpy array", "an
 * io.StringIO object"). Only failure paths call these: they may be slow, but they run no
 * user code (modules are read through their __dict__, objects only through the generic
 * attribute lookup) and never fail. */
#include "capture.h"
#include "../vocab/libs.h"
#include "../core/errors.h"
#include <string.h>

/* Borrowed: sys.modules[name].__dict__[attr], or NULL. No code runs (a module's
 * __getattr__ could import). */
static PyObject *module_item(const char *module, const char *attr)
{
    PyObject *mods = PySys_GetObject("modules");   /* borrowed */
    PyObject *m = mods && PyDict_Check(mods) ? PyDict_GetItemString(mods, module) : NULL;
    if (!m || !PyModule_Check(m))
        return NULL;
    PyObject *d = PyModule_GetDict(m);   /* borrowed */
    return d ? PyDict_GetItemString(d, attr) : NULL;
}

/* item is obj, or both are bound methods of the same function and object (a bound
 * method made afresh, equal to the one a module holds) */
static int same_object(PyObject *item, PyObject *obj)
{
    if (item == obj)
        return 1;
    return item && PyMethod_Check(item) && PyMethod_Check(obj) && PyMethod_GET_SELF(item) == PyMethod_GET_SELF(obj) &&
           PyMethod_GET_FUNCTION(item) == PyMethod_GET_FUNCTION(obj);
}

/* New reference: "P.name" for the shortest module path P, among the prefixes of
 * `module` and the module without a leading underscore (_io -> io), that holds obj
 * itself under `name`; NULL when none does. */
static PyObject *public_path(PyObject *obj, const char *module, const char *name)
{
    char buf[256];
    size_t n = strlen(module);
    if (n >= sizeof buf || !*name || strchr(name, '.'))
        return NULL;
    if (same_object(module_item("builtins", name), obj))   /* open, not io.open */
        return PyUnicode_FromString(name);
    if (module[0] == '_' && !strchr(module, '.') && same_object(module_item(module + 1, name), obj))
        return PyUnicode_FromFormat("%s.%s", module + 1, name);
    for (size_t i = 1; i <= n; i++) {
        if (i < n && module[i] != '.')
            continue;
        memcpy(buf, module, i);
        buf[i] = '\0';
        if (same_object(module_item(buf, name), obj))
            return strcmp(buf, "builtins") && strcmp(buf, "__main__") ? PyUnicode_FromFormat("%s.%s", buf, name)
                                                                      : PyUnicode_FromString(name);
    }
    return NULL;
}

/* New reference: attribute attr of o, or NULL (no exception). Only objects with the
 * generic lookup of objects or types, and bound methods (which read their function's),
 * are read, and not through a property or a descriptor class written in Python: a
 * class's own __getattr__, __getattribute__ or property is user code. */
static PyObject *plain_attr(PyObject *o, const char *attr)
{
    getattrofunc g = Py_TYPE(o)->tp_getattro;
    if (g != PyObject_GenericGetAttr && g != PyType_Type.tp_getattro && !PyMethod_Check(o))
        return NULL;
    PyObject *key = PyUnicode_InternFromString(attr);
    PyObject *d = key ? _PyType_Lookup(Py_TYPE(o), key) : NULL;   /* borrowed */
    Py_XDECREF(key);
    if (d && (PyType_HasFeature(Py_TYPE(d), Py_TPFLAGS_HEAPTYPE) || PyObject_TypeCheck(d, &PyProperty_Type)))
        return NULL;
    PyObject *v = PyObject_GetAttrString(o, attr);
    if (!v)
        sj_err_clear();
    return v;
}

/* New reference to a str attribute of o, or NULL (no exception). */
static PyObject *str_attr(PyObject *o, const char *attr)
{
    PyObject *v = plain_attr(o, attr);
    if (!v || !PyUnicode_Check(v)) {
        sj_err_clear();
        Py_XDECREF(v);
        return NULL;
    }
    return v;
}

/* "module.qualname" with the module left out where it says nothing (builtins, the
 * script); NULL (no exception) when either is missing. New reference. */
static PyObject *join_path(PyObject *mod, PyObject *qn)
{
    if (!qn)
        return NULL;
    if (!mod || PyUnicode_CompareWithASCIIString(mod, "builtins") == 0 ||
        PyUnicode_CompareWithASCIIString(mod, "__main__") == 0)
        return Py_NewRef(qn);
    PyObject *r = PyUnicode_FromFormat("%U.%U", mod, qn);
    if (!r)
        sj_err_clear();
    return r;
}

/* New reference (NULL only on memory errors, cleared): the path of a type. */
static PyObject *sj_type_path(PyTypeObject *t)
{
    /* the methods of torch.Tensor live on its C base torch._C.TensorBase, which users
     * never name */
    if (libs.tensor_type && t == ((PyTypeObject *)libs.tensor_type)->tp_base)
        return PyUnicode_FromString("torch.Tensor");
    PyObject *mod = str_attr((PyObject *)t, "__module__");
    PyObject *qn = str_attr((PyObject *)t, "__qualname__");
    PyObject *r = NULL;
    const char *m = mod ? PyUnicode_AsUTF8(mod) : NULL, *q = qn ? PyUnicode_AsUTF8(qn) : NULL;
    if (m && q)
        r = public_path((PyObject *)t, m, q);
    sj_err_clear();
    if (!r)
        r = qn ? join_path(mod, qn) : PyUnicode_FromString(t->tp_name);
    Py_XDECREF(mod);
    Py_XDECREF(qn);
    if (!r)
        sj_err_clear();
    return r;
}

/* New reference: "owner.name" where owner is named by sj_type_path; NULL when that fails. */
static PyObject *member_path(PyTypeObject *owner, PyObject *name)
{
    PyObject *tp = sj_type_path(owner);
    PyObject *r = tp ? PyUnicode_FromFormat("%U.%U", tp, name) : NULL;
    Py_XDECREF(tp);
    if (!r)
        sj_err_clear();
    return r;
}

static PyObject *callable_path(PyObject *fn, int depth);

/* A Python function: by the module that holds it, or as a method of its class named by
 * the class's public path (torch.Tensor.share_memory_, not torch._tensor.Tensor....). */
static PyObject *function_path(PyObject *fn)
{
    PyObject *mod = ((PyFunctionObject *)fn)->func_module;   /* borrowed */
    PyObject *qn = ((PyFunctionObject *)fn)->func_qualname;  /* borrowed */
    const char *m = mod && PyUnicode_Check(mod) ? PyUnicode_AsUTF8(mod) : NULL;
    const char *q = qn && PyUnicode_Check(qn) ? PyUnicode_AsUTF8(qn) : NULL;
    PyObject *r = m && q ? public_path(fn, m, q) : NULL;
    const char *dot = m && q && !r ? strchr(q, '.') : NULL;
    if (dot && dot - q < 128 && !strstr(q, "<locals>")) {
        char owner[128];
        memcpy(owner, q, (size_t)(dot - q));
        owner[dot - q] = '\0';
        PyObject *cls = module_item(m, owner);   /* borrowed */
        PyObject *cp = cls && PyType_Check(cls) ? sj_type_path((PyTypeObject *)cls) : NULL;
        r = cp ? PyUnicode_FromFormat("%U%s", cp, dot) : NULL;
        Py_XDECREF(cp);
    }
    sj_err_clear();
    return r ? r : join_path(mod && PyUnicode_Check(mod) ? mod : NULL, qn);
}

/* New reference: "P.name" when a module on the path of t's module holds fn under its
 * name (the module-level functions that are methods of a hidden instance); else NULL. */
static PyObject *held_by_type_module(PyObject *fn, PyTypeObject *t, PyObject *name)
{
    PyObject *mod = str_attr((PyObject *)t, "__module__");
    const char *m = mod ? PyUnicode_AsUTF8(mod) : NULL, *n = PyUnicode_AsUTF8(name);
    PyObject *r = m && n ? public_path(fn, m, n) : NULL;
    Py_XDECREF(mod);
    sj_err_clear();
    return r;
}

/* A builtin function: a module's (self NULL or the module), a type's (dict.fromkeys),
 * a pybind11 function (self is pybind's record of it; m_module names the module) or a
 * bound method of an instance (x.addcdiv_, numpy.add.outer, sys.stdout.write). */
static PyObject *cfunction_path(PyObject *fn, PyObject *name)
{
    PyObject *self = PyCFunction_GET_SELF(fn);   /* borrowed */
    PyObject *mod = ((PyCFunctionObject *)fn)->m_module;   /* borrowed */
    if (self && PyModule_Check(self))
        mod = PyModule_GetNameObject(self);
    else
        Py_XINCREF(mod);
    if (!mod)
        sj_err_clear();
    PyObject *r = NULL;
    if (mod && PyUnicode_Check(mod)) {
        const char *m = PyUnicode_AsUTF8(mod), *n = PyUnicode_AsUTF8(name);
        r = m && n ? public_path(fn, m, n) : NULL;
        if (!r)
            r = join_path(mod, name);
    } else if (self && PyType_Check(self)) {
        r = member_path((PyTypeObject *)self, name);
    } else if (self && (r = held_by_type_module(fn, Py_TYPE(self), name)) != NULL) {
        /* random.random: a method of the module's hidden Random instance */
    } else if (self) {
        PyObject *own = str_attr(self, "__name__");   /* a named object: a ufunc */
        PyObject *tp = own ? sj_type_path(Py_TYPE(self)) : NULL;
        Py_ssize_t dot = tp ? PyUnicode_FindChar(tp, '.', 0, PyUnicode_GET_LENGTH(tp), -1) : -1;
        if (dot >= 0) {
            PyObject *pkg = PyUnicode_Substring(tp, 0, dot);
            r = pkg ? PyUnicode_FromFormat("%U.%U.%U", pkg, own, name) : NULL;
            Py_XDECREF(pkg);
        } else if (own) {
            r = PyUnicode_FromFormat("%U.%U", own, name);
        }
        Py_XDECREF(tp);
        Py_XDECREF(own);
        if (!r) {
            sj_err_clear();
            r = member_path(Py_TYPE(self), name);
        }
    }
    Py_XDECREF(mod);
    return r;
}

static PyObject *callable_path(PyObject *fn, int depth)
{
    if (PyType_Check(fn))
        return sj_type_path((PyTypeObject *)fn);
    if (PyFunction_Check(fn))
        return function_path(fn);
    PyObject *r = NULL;
    if (depth < 4 && !PyCFunction_Check(fn)) {
        /* a wrapper object (functools.lru_cache, a decorator class) copies the name of
         * what it wraps: named as "wrapper of wrapped" */
        PyObject *inner = plain_attr(fn, "__wrapped__");
        PyObject *ip = inner && inner != fn ? callable_path(inner, depth + 1) : NULL;
        PyObject *tp = ip ? sj_type_path(Py_TYPE(fn)) : NULL;
        r = tp ? PyUnicode_FromFormat("%U of %U", tp, ip) : NULL;
        Py_XDECREF(tp);
        Py_XDECREF(ip);
        Py_XDECREF(inner);
        sj_err_clear();
        if (r)
            return r;
    }
    PyObject *name = str_attr(fn, "__name__");
    if (name) {
        /* a module holds it under its own name: torch.rand, numpy.random.randn (a method of
         * numpy's global RandomState), torch._C's pybind11 functions */
        PyObject *mod = str_attr(fn, "__module__");
        const char *m = mod ? PyUnicode_AsUTF8(mod) : NULL, *n = PyUnicode_AsUTF8(name);
        r = m && n ? public_path(fn, m, n) : NULL;
        Py_XDECREF(mod);
        sj_err_clear();
    }
    if (r || !name) {
        /* named by its module, or not named at all (see below) */
    } else if (PyCFunction_Check(fn)) {
        r = cfunction_path(fn, name);
    } else if (PyMethod_Check(fn)) {
        PyObject *self = PyMethod_GET_SELF(fn);   /* borrowed */
        r = member_path(PyType_Check(self) ? (PyTypeObject *)self : Py_TYPE(self), name);
    } else {
        /* descriptors of C types (method, slot wrapper, classmethod): __objclass__ is
         * the type; a bound slot wrapper (method-wrapper) has __self__ */
        PyObject *owner = plain_attr(fn, "__objclass__");
        if (owner && PyType_Check(owner)) {
            r = member_path((PyTypeObject *)owner, name);
        } else {
            sj_err_clear();
            PyObject *self = plain_attr(fn, "__self__");
            if (self && !PyModule_Check(self) && self != Py_None)
                r = member_path(PyType_Check(self) ? (PyTypeObject *)self : Py_TYPE(self), name);
            sj_err_clear();
            Py_XDECREF(self);
        }
        Py_XDECREF(owner);
    }
    if (!r && name) {
        PyObject *mod = str_attr(fn, "__module__");
        PyObject *qn = str_attr(fn, "__qualname__");
        r = join_path(mod, qn ? qn : name);
        Py_XDECREF(mod);
        Py_XDECREF(qn);
    }
    Py_XDECREF(name);
    sj_err_clear();
    return r;
}

static const char *sj_article(const char *noun);

/* New reference (NULL only on memory errors, cleared): the path a user writes for a
 * callable. */
static PyObject *sj_callable_path(PyObject *fn)
{
    PyObject *r = callable_path(fn, 0);
    if (!r) {
        /* an object that is callable through its type: "a X object" */
        PyObject *tp = sj_type_path(Py_TYPE(fn));
        r = tp ? PyUnicode_FromFormat("%s %U object", sj_article(PyUnicode_AsUTF8(tp)), tp) : NULL;
        Py_XDECREF(tp);
        sj_err_clear();
    }
    return r;
}

/* "a"/"an" for noun (leading underscores and quotes skipped). Static. */
static const char *sj_article(const char *noun)
{
    if (!noun)
        return "a";
    while (*noun == '_' || *noun == '\'' || *noun == '`')
        noun++;
    switch (*noun) {
    case 'a':
    case 'e':
    case 'i':
    case 'o':
    case 'A':
    case 'E':
    case 'I':
    case 'O':
        return "an";
    case 'u':
    case 'U':
        /* "an unbacked", "a uint8", "a unicode" */
        return (noun[1] == 'n' || noun[1] == 'N') && strncmp(noun + 1, "ni", 2) != 0 ? "an" : "a";
    case 'n':
        return noun[1] == 'n' && noun[2] == '.' ? "an" : "a";   /* "an nn.Module" */
    default:
        return "a";
    }
}

/* A copy of s in the capture's arena ("" when that fails). */
static const char *arena_str(Capture *c, PyObject *s)
{
    Py_ssize_t n;
    const char *u = s ? PyUnicode_AsUTF8AndSize(s, &n) : NULL;
    char *r = u ? cap_alloc(c, (size_t)n + 1) : NULL;
    if (!r) {
        sj_err_clear();
        return "";
    }
    memcpy(r, u, (size_t)n + 1);
    return r;
}

const char *sj_type_a(Capture *c, PyTypeObject *t, const char *what)
{
    PyObject *tp = sj_type_path(t);
    PyObject *s =
        tp ? PyUnicode_FromFormat("%s %U%s%s", sj_article(PyUnicode_AsUTF8(tp)), tp, what ? " " : "", what ? what : "")
           : NULL;
    const char *r = s ? arena_str(c, s) : t->tp_name;
    Py_XDECREF(tp);
    Py_XDECREF(s);
    sj_err_clear();
    return r;
}

const char *sj_type_name(Capture *c, PyTypeObject *t)
{
    PyObject *p = sj_type_path(t);
    const char *r = p ? arena_str(c, p) : t->tp_name;
    Py_XDECREF(p);
    return r;
}

const char *sj_callable_name(Capture *c, PyObject *fn)
{
    PyObject *p = sj_callable_path(fn);
    const char *r = p ? arena_str(c, p) : Py_TYPE(fn)->tp_name;
    Py_XDECREF(p);
    return r;
}

const char *sj_grad_mode_text(const Var *v)
{
    if (v->u.grad.inference)
        return v->u.grad.inference == 1 ? "torch.inference_mode()" : "torch.inference_mode(False)";
    if (v->u.grad.applied)
        return v->u.grad.enabled ? "torch.set_grad_enabled(True)" : "torch.set_grad_enabled(False)";
    return v->u.grad.enabled ? "torch.enable_grad()" : "torch.no_grad()";
}

const char *var_a(Capture *c, const Var *v)
{
    if (!v)
        return "a missing value";
    switch ((VarKind)v->kind) {
    case VK_CONST:
        if (v->obj == Py_None)
            return "None";
        return sj_type_a(c, Py_TYPE(v->obj), "constant");
    case VK_TENSOR:
        return v->u.t.meta.lib == LIB_TORCH ? "a tensor" : "a numpy array";
    case VK_TUPLE:
    case VK_LIST:
        if (v->u.seq.subtype)
            return sj_type_a(c, v->u.seq.subtype, NULL);
        return v->kind == VK_TUPLE ? "a tuple" : "a list";
    case VK_DICT:
        return v->u.dict.subtype ? sj_type_a(c, v->u.dict.subtype, NULL) : "a dict";
    case VK_CALLABLE:
        return v->obj ? sj_callable_name(c, v->obj) : "a callable";
    case VK_FUNC:
        if (v->obj)
            return sj_callable_name(c, v->obj);
        return v->u.func.name ? arena_str(c, v->u.func.name) : "a function";
    case VK_OBJECT:
        if (v->obj && PyType_Check(v->obj))
            return sj_callable_name(c, v->obj);
        return v->obj ? sj_type_a(c, Py_TYPE(v->obj), "object") : "an object";
    case VK_USEROBJ:
        return sj_type_a(c, v->u.uobj.type, "object");
    case VK_MODULE:
        return v->obj ? sj_type_a(c, Py_TYPE(v->obj), "module") : "an nn.Module";
    case VK_PYMODULE: {
        PyObject *n = v->obj && PyModule_Check(v->obj) ? PyModule_GetNameObject(v->obj) : NULL;
        PyObject *s = n ? PyUnicode_FromFormat("the module %U", n) : NULL;
        const char *r = s ? arena_str(c, s) : "a module";
        Py_XDECREF(n);
        Py_XDECREF(s);
        sj_err_clear();
        return r;
    }
    case VK_GRADMODE: {
        const char *g = sj_grad_mode_text(v);
        size_t n = strlen(g) + sizeof "a  object";
        char *r = cap_alloc(c, n);
        if (!r)
            return "a grad-mode object";
        snprintf(r, n, "a %s object", g);
        return r;
    }
    case VK_SLICE:
        return "a slice";
    case VK_ITER:
        return "an iterator";
    case VK_CELL:
        return "a closure cell";
    case VK_METHOD:
        return "a bound method";
    case VK_PARTIAL:
        return "a functools.partial";
    case VK_EXIT:
        return "the __exit__ of a grad-mode block";
    case VK_SUPER:
        return "a super() object";
    case VK_SYMINT:
        return "a symbolic int";
    case VK_GSCALAR:
        return "a graph scalar";
    case VK_DICTVIEW:
        return "a dict view";
    }
    return "a value";
}

void sj_name_bound_call(Capture *c, PyObject *func, PyObject *self)
{
    if (c->reason != BR_UNSUPPORTED_CALL || !c->reason_msg || PyFunction_Check(func))
        return;
    PyObject *plain = sj_callable_path(func);
    PyObject *bound = plain && PyUnicode_Compare(plain, c->reason_msg) == 0 ? PyMethod_New(func, self) : NULL;
    PyObject *mod = bound ? str_attr(func, "__module__") : NULL;
    PyObject *name = mod ? str_attr(func, "__name__") : NULL;
    const char *m = mod ? PyUnicode_AsUTF8(mod) : NULL, *n = name ? PyUnicode_AsUTF8(name) : NULL;
    PyObject *p = m && n ? public_path(bound, m, n) : NULL;   /* only a module's name */
    if (p)
        Py_SETREF(c->reason_msg, p);
    Py_XDECREF(name);
    Py_XDECREF(mod);
    Py_XDECREF(bound);
    Py_XDECREF(plain);
    sj_err_clear();
}

const char *sj_var_type_name(Capture *c, const Var *v)
{
    PyTypeObject *t = NULL;
    if (v->kind == VK_TUPLE || v->kind == VK_LIST)
        t = v->u.seq.subtype;
    else if (v->kind == VK_DICT)
        t = v->u.dict.subtype;
    else if (v->kind == VK_USEROBJ)
        t = v->u.uobj.type;
    else if (v->obj && v->kind != VK_TENSOR)
        t = Py_TYPE(v->obj);
    if (!t)
        return v->kind == VK_TENSOR ? (v->u.t.meta.lib == LIB_TORCH ? "Tensor" : "ndarray") : var_kind_name(v);
    return sj_type_name(c, t);
}
