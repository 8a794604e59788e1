/* Python builtins and library functions with Python-level meaning (not graph ops):
 * len, isinstance, range, enumerate, zip, ..., torch.no_grad, Tensor.size(), ... */
#include "capture.h"
#include "../vocab/libs.h"
#include "../core/config.h"
#include "../core/errors.h"

/* The builtins capture models: one row each. X(ENUM, "name") */
/* clang-format off */
#define SJ_BUILTINS(X) \
    X(B_LEN, "len") \
    X(B_ISINSTANCE, "isinstance") \
    X(B_ISSUBCLASS, "issubclass") \
    X(B_RANGE, "range") \
    X(B_MIN, "min") \
    X(B_MAX, "max") \
    X(B_ABS, "abs") \
    X(B_INT, "int") \
    X(B_FLOAT, "float") \
    X(B_BOOL, "bool") \
    X(B_STR, "str") \
    X(B_TUPLE, "tuple") \
    X(B_LIST, "list") \
    X(B_DICT, "dict") \
    X(B_ENUMERATE, "enumerate") \
    X(B_ZIP, "zip") \
    X(B_GETATTR, "getattr") \
    X(B_VARS, "vars") \
    X(B_HASATTR, "hasattr") \
    X(B_SUM, "sum") \
    X(B_ANY, "any") \
    X(B_ALL, "all") \
    X(B_ITER, "iter") \
    X(B_NEXT, "next") \
    X(B_REVERSED, "reversed") \
    X(B_SORTED, "sorted") \
    X(B_TYPE, "type") \
    X(B_CALLABLE, "callable") \
    X(B_PRINT, "print") \
    X(B_SUPER, "super") \
    X(B_DIVMOD, "divmod") \
    X(B_ROUND, "round") \
    X(B_POW, "pow") \
    X(B_REPR, "repr") \
    X(B_SLICE, "slice") \
    X(B_MAP, "map") \
    X(B_SETATTR, "setattr") \
    X(B_DELATTR, "delattr") \
    X(B_ID, "id") \
    X(B_HASH, "hash") \
    X(B_SET, "set") \
    X(B_FROZENSET, "frozenset")
/* clang-format on */

typedef enum {
#define X(e, name) e,
    SJ_BUILTINS(X)
#undef X
        B_COUNT
} BuiltinId;

static const char *const builtin_names[B_COUNT] = {
#define X(e, name) [e] = name,
    SJ_BUILTINS(X)
#undef X
};

static PyObject *builtin_objs[B_COUNT];   /* strong */

static int builtins_init(void)
{
    if (builtin_objs[0])
        return 0;
    PyObject *b = PyImport_ImportModule("builtins");
    if (!b)
        return -1;
    for (int i = 0; i < B_COUNT; i++)
        if (!(builtin_objs[i] = PyObject_GetAttrString(b, builtin_names[i]))) {
            Py_DECREF(b);
            return -1;
        }
    Py_DECREF(b);
    return 0;
}

/* New reference: the Python type a var's value has. NULL with failure set. */
static PyObject *var_type(Capture *c, Var *v)
{
    switch (v->kind) {
    case VK_TENSOR:
        if (v->obj)
            return Py_NewRef((PyObject *)Py_TYPE(v->obj));
        if (v->u.t.meta.lib == LIB_TORCH)
            return Py_NewRef(libs.tensor_type);
        if (v->u.t.meta.np_scalar) {
            PyObject *dt = dtype_to_py((DType)v->u.t.meta.dtype, LIB_NUMPY);
            PyObject *t = dt ? PyObject_GetAttrString(dt, "type") : NULL;
            Py_XDECREF(dt);
            return t;
        }
        return Py_NewRef(libs.ndarray_type);
    case VK_TUPLE:
        return Py_NewRef(v->u.seq.subtype ? (PyObject *)v->u.seq.subtype : (PyObject *)&PyTuple_Type);
    case VK_LIST:
    case VK_DICT:   /* a collections type (deque, OrderedDict, ...) or the plain one */
        return Py_NewRef(collections_type_of(v) ? (PyObject *)collections_type_of(v)
                         : v->kind == VK_LIST   ? (PyObject *)&PyList_Type
                                                : (PyObject *)&PyDict_Type);
    case VK_DICTVIEW: {
        PyObject *d = PyDict_New();
        PyObject *view = d ? PyObject_CallMethod(d, var_view_method(v), NULL) : NULL;
        PyObject *t = view ? Py_NewRef((PyObject *)Py_TYPE(view)) : NULL;
        Py_XDECREF(view);
        Py_XDECREF(d);
        return t;
    }
    case VK_SLICE:
        return Py_NewRef((PyObject *)&PySlice_Type);
    case VK_FUNC:
        return Py_NewRef((PyObject *)&PyFunction_Type);
    case VK_METHOD:
        return Py_NewRef((PyObject *)&PyMethod_Type);
    case VK_PARTIAL:
        return Py_NewRef(libs.partial_type);
    case VK_USEROBJ:
        return Py_NewRef((PyObject *)v->u.uobj.type);
    case VK_SYMINT:
        return Py_NewRef((PyObject *)&PyLong_Type);   /* a size is a plain int in eager */
    case VK_GSCALAR:
        if (v->u.gs.hint)
            return Py_NewRef((PyObject *)Py_TYPE(v->u.gs.hint));
        return Py_NewRef(v->u.gs.type == GS_BOOL ? (PyObject *)&PyBool_Type : (PyObject *)&PyFloat_Type);
    default:
        if (v->obj)
            return Py_NewRef((PyObject *)Py_TYPE(v->obj));
    }
    cap_fail(c, BR_UNSUPPORTED_VALUE, "type of %s", var_a(c, v));
    return NULL;
}

static Var *const_bool(Capture *c, int b)
{
    return var_const(c, b ? Py_True : Py_False);
}

static Var *make_iter(Capture *c, Var **items, int32_t n)
{
    Var *it = var_new(c, VK_ITER);
    if (!it)
        return NULL;
    it->u.iter.items = items;
    it->u.iter.n = n;
    return it;
}

PyObject *cap_call_live(Capture *c, PyObject *fn, Var **args, int32_t nargs, PyObject *kwnames)
{
    int32_t nkw = kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0;
    PyObject **a = cap_alloc(c, sizeof(PyObject *) * (size_t)(nargs + 1));
    if (!a)
        return NULL;
    int32_t k;
    for (k = 0; k < nargs; k++)
        if (!(a[k] = var_to_py(c, args[k])))
            break;
    PyObject *r = k == nargs ? PyObject_Vectorcall(fn, a, (size_t)(nargs - nkw), kwnames) : NULL;
    for (int32_t i = 0; i < k; i++)
        Py_DECREF(a[i]);
    if (!r)
        cap_fail_exc(c, BR_USER_EXCEPTION);
    return r;
}

Var *cap_fold_call(Capture *c, PyObject *fn, Var **args, int32_t nargs, PyObject *kwnames)
{
    PyObject *r = cap_call_live(c, fn, args, nargs, kwnames);
    return r ? var_const_steal(c, r) : NULL;
}

static int all_foldable(Var **args, int32_t n)
{
    for (int32_t i = 0; i < n; i++) {
        Var *v = args[i];
        if (v->kind == VK_CONST || v->kind == VK_SYMINT)   /* a symbolic int is specialised */
            continue;
        if ((v->kind == VK_TUPLE || v->kind == VK_LIST) && all_foldable(v->u.seq.items, v->u.seq.n))
            continue;
        return 0;
    }
    return 1;
}

/* ----------------------------------------------------------- tensor methods ---- */

/* The dtype of a Tensor.type() target: a cpu tensor type (torch.DoubleTensor) or its name
 * ('torch.DoubleTensor') as a torch.dtype constant; any other constant (a dtype) as is.
 * NULL after cap_fail for a cuda type or a name that is not a torch tensor type. */
static Var *type_target_dtype(Capture *c, Var *t)
{
    PyObject *cls = NULL;   /* new reference */
    PyObject *v = t->obj;
    if (PyUnicode_Check(v)) {
        const char *s = PyUnicode_AsUTF8(v);
        if (!s || strncmp(s, "torch.", 6) != 0 || strchr(s + 6, '.') || !libs.torch) {
            sj_err_clear();
            cap_fail(c, BR_UNSUPPORTED_CALL, "Tensor.type with a name that is not a cpu tensor type");
            return NULL;
        }
        cls = PyObject_GetAttrString(libs.torch, s + 6);
        if (!cls)
            sj_err_clear();
    } else if (PyType_Check(v) && !strcmp(Py_TYPE(v)->tp_name, "torch.tensortype")) {
        cls = Py_NewRef(v);
    } else {
        return t;
    }
    if (!cls || strcmp(Py_TYPE(cls)->tp_name, "torch.tensortype") != 0) {
        Py_XDECREF(cls);
        cap_fail(c, BR_UNSUPPORTED_CALL, "Tensor.type with a name that is not a tensor type");
        return NULL;
    }
    PyObject *cuda = PyObject_GetAttrString(cls, "is_cuda");   /* new */
    PyObject *dt = cuda ? PyObject_GetAttrString(cls, "dtype") : NULL;   /* new */
    Py_DECREF(cls);
    if (!dt || cuda != Py_False) {
        sj_err_clear();
        Py_XDECREF(cuda);
        Py_XDECREF(dt);
        cap_fail(c, BR_UNSUPPORTED_CALL, "Tensor.type to a type that is not a cpu tensor type");
        return NULL;
    }
    Py_DECREF(cuda);
    return var_const_steal(c, dt);
}

/* x.is_contiguous(memory_format=...) of a graph input: the input's own answer, which its
 * TENSOR_MATCH guard keeps (exact strides, or under dynamic sizes the dense dim order, a
 * symbolic size never being 1). A value computed in the graph has no modelled strides. */
static Var *input_is_contiguous(Capture *c, Var **args, int32_t nargs, PyObject *kwnames)
{
    Var *self = args[0];
    int32_t vid = self->u.t.value;
    int input = self->src >= 0 && self->obj && libs.tensor_type &&
                PyObject_TypeCheck(self->obj, (PyTypeObject *)libs.tensor_type) && vid >= 0 && vid < c->g->nvalues &&
                c->g->nodes[c->g->values[vid].node].op == OP_INPUT;
    if (!input) {
        cap_fail(c, BR_UNSUPPORTED_CALL,
                 "Tensor.is_contiguous of a value computed in the graph "
                 "(strides are not modelled)");
        return NULL;
    }
    if (nargs > 2) {
        cap_fail(c, BR_UNSUPPORTED_CALL, "Tensor.is_contiguous with these arguments");
        return NULL;
    }
    PyObject *pos[2] = {self->obj, NULL};   /* borrowed */
    for (int32_t i = 1; i < nargs; i++) {
        if (!args[i]->obj || args[i]->kind == VK_TENSOR) {
            cap_fail(c, BR_UNSUPPORTED_CALL, "Tensor.is_contiguous with a non-constant argument");
            return NULL;
        }
        pos[i] = args[i]->obj;
    }
    PyObject *meth = PyObject_GetAttrString(libs.tensor_type, "is_contiguous");   /* new */
    int32_t nkw = kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0;
    PyObject *r = meth ? PyObject_Vectorcall(meth, pos, (size_t)(nargs - nkw), nkw ? kwnames : NULL) : NULL;
    Py_XDECREF(meth);
    if (!r) {
        cap_fail_exc(c, BR_USER_EXCEPTION);
        return NULL;
    }
    return var_const_steal(c, r);
}

static Var *tensor_meta_method(Capture *c, const char *name, Var **args, int32_t nargs, PyObject *kwnames, int *handled)
{
    Var *self = args[0];
    const TensorMeta *m = &self->u.t.meta;
    *handled = 1;
    if (!strcmp(name, "size") || !strcmp(name, "stride")) {
        if (!strcmp(name, "stride")) {
            *handled = 1;
            cap_fail(c, BR_UNSUPPORTED_CALL, "Tensor.stride() (strides are not modelled yet)");
            return NULL;
        }
        PyObject *shape_name = PyUnicode_FromString("shape");
        Var *shape = shape_name ? attr_load(c, self, shape_name) : NULL;
        Py_XDECREF(shape_name);
        if (!shape || nargs == 1)
            return shape;
        if (nargs == 2 && var_is_const(args[1])) {
            Var *k = args[1];
            if (shape->kind != VK_CONST)
                return op_subscr(c, shape, k);
            return var_const_steal(c, PyObject_GetItem(shape->obj, k->obj));
        }
        cap_fail(c, BR_UNSUPPORTED_CALL, "Tensor.size with these arguments");
        return NULL;
    }
    if (!strcmp(name, "dim") || !strcmp(name, "ndimension"))
        return var_const_steal(c, PyLong_FromLong(m->ndim));
    if (!strcmp(name, "numel") || !strcmp(name, "nelement"))
        return tensor_numel_var(c, m);
    if (!strcmp(name, "element_size"))
        return var_const_steal(c, PyLong_FromLong(dtype_info[m->dtype].itemsize));
    if (!strcmp(name, "is_floating_point"))
        return const_bool(c, dtype_info[m->dtype].category == CAT_FLOAT);
    if (!strcmp(name, "is_complex"))
        return const_bool(c, dtype_info[m->dtype].category == CAT_COMPLEX);
    if (!strcmp(name, "type") && m->lib == LIB_TORCH) {
        static const char *const names[DT_COUNT] = {
            [DT_BOOL] = "torch.BoolTensor",        [DT_U8] = "torch.ByteTensor",
            [DT_I8] = "torch.CharTensor",          [DT_I16] = "torch.ShortTensor",
            [DT_I32] = "torch.IntTensor",          [DT_I64] = "torch.LongTensor",
            [DT_F16] = "torch.HalfTensor",         [DT_BF16] = "torch.BFloat16Tensor",
            [DT_F32] = "torch.FloatTensor",        [DT_F64] = "torch.DoubleTensor",
            [DT_C64] = "torch.ComplexFloatTensor", [DT_C128] = "torch.ComplexDoubleTensor"};
        if (nargs == 1)
            return var_const_steal(c, PyUnicode_FromString(names[m->dtype]));
        /* x.type('torch.DoubleTensor') and x.type(torch.DoubleTensor) are x.to(float64) */
        Var *targs[3];
        /* keywords other than a lone dtype= (non_blocking=) do not line up with to()'s */
        int kw_ok = !kwnames || (PyTuple_GET_SIZE(kwnames) == 1 &&
                                 PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "dtype") == 0);
        if (nargs > 3 || !kw_ok) {
            cap_fail(c, BR_UNSUPPORTED_CALL, "Tensor.type with these arguments");
            return NULL;
        }
        memcpy(targs, args, sizeof(Var *) * (size_t)nargs);
        if (args[1]->obj && args[1]->kind != VK_TENSOR && !(targs[1] = type_target_dtype(c, args[1])))
            return NULL;
        PyObject *to = PyUnicode_FromString("to");
        int row = to ? callables_lookup_method(LIB_TORCH, to) : -1;
        Py_XDECREF(to);
        if (row >= 0)
            return op_record(c, row, targs, nargs, NULL);
    }
    if (!strcmp(name, "get_device"))
        return var_const_steal(c, PyLong_FromLong(-1));
    if (!strcmp(name, "is_contiguous") && m->lib == LIB_TORCH)
        return input_is_contiguous(c, args, nargs, kwnames);
    if (!strcmp(name, "__len__"))
        return op_len(c, self);
    if (!strcmp(name, "item") && nargs == 1 && m->lib == LIB_TORCH && sj_config.capture_scalar_outputs)
        return symb_item(c, self);
    if (!strcmp(name, "item") && m->lib == LIB_TORCH) {
        cap_fail(c, BR_SCALAR_OUTPUT,
                 "Tensor.item() reads tensor data into Python; to capture it, set "
                 "shapejit.config.capture_scalar_outputs = True");
        return NULL;
    }
    if (!strcmp(name, "item") || !strcmp(name, "tolist") || !strcmp(name, "__bool__") || !strcmp(name, "__float__") ||
        !strcmp(name, "__int__")) {
        cap_fail(c, BR_SCALAR_OUTPUT, "%s.%s() reads %s data into Python", m->lib == LIB_TORCH ? "Tensor" : "ndarray",
                 name, m->lib == LIB_TORCH ? "tensor" : "array");
        return NULL;
    }
    *handled = 0;
    return NULL;
}

/* ----------------------------------------------------------------- builtins ---- */

static Var *builtin_hasattr(Capture *c, Var **args, int32_t nargs);

static Var *builtin_getattr(Capture *c, Var **args, int32_t nargs)
{
    if (nargs < 2 || nargs > 3 || !var_is_const(args[1]) || !PyUnicode_Check(args[1]->obj)) {
        cap_fail(c, BR_UNSUPPORTED_CALL, "getattr with a non-constant name");
        return NULL;
    }
    Var *o = args[0];
    if (nargs == 3 && (o->obj || o->kind == VK_USEROBJ) && o->kind != VK_TENSOR) {
        Var *has = builtin_hasattr(c, args, 2);
        if (!has)
            return NULL;
        if (has->obj == Py_False)
            return args[2];
    }
    return attr_load(c, o, args[1]->obj);
}

static Var *builtin_hasattr(Capture *c, Var **args, int32_t nargs)
{
    if (nargs != 2 || !var_is_const(args[1]) || !PyUnicode_Check(args[1]->obj)) {
        cap_fail(c, BR_UNSUPPORTED_CALL, "hasattr with a non-constant name");
        return NULL;
    }
    Var *o = args[0];
    PyObject *probe = o->obj;
    if (o->kind == VK_USEROBJ) {
        /* the instance's attributes first, then its class; a __getattr__ decides the rest */
        int found;
        var_dict_get(c, o->u.uobj.attrs, args[1], &found);
        int on_type = found ? 1 : sj_hasattr((PyObject *)o->u.uobj.type, args[1]->obj);
        static PyObject *s_getattr;   /* strong, interned, never released */
        if (on_type < 0 || (!s_getattr && !(s_getattr = PyUnicode_InternFromString("__getattr__")))) {
            cap_fail_exc(c, BR_USER_EXCEPTION);
            return NULL;
        }
        if (on_type)
            return const_bool(c, 1);
        int custom = sj_hasattr((PyObject *)o->u.uobj.type, s_getattr);
        if (custom < 0) {
            cap_fail_exc(c, BR_USER_EXCEPTION);
            return NULL;
        }
        if (custom) {
            cap_fail(c, BR_UNSUPPORTED_CALL, "hasattr on %s with __getattr__", sj_type_a(c, o->u.uobj.type, "object"));
            return NULL;
        }
        return const_bool(c, 0);
    }
    /* A tensor read from the frame may carry attributes of its own (x.tag = 1): probe it, and
     * attr_guard_hasattr guards the answer. A tensor made here has only its type's. */
    if (o->kind == VK_TENSOR && !(o->src >= 0 && o->obj && Py_TYPE(o->obj)->tp_dictoffset != 0))
        probe = o->u.t.meta.lib == LIB_TORCH ? libs.tensor_type : libs.ndarray_type;
    if (!probe || o->kind == VK_TUPLE || o->kind == VK_LIST || o->kind == VK_DICT) {
        /* An instance has what its class's MRO defines, not what getattr on the class
         * finds: that also reads the metaclass, whose __name__ and __qualname__ every
         * class has (hasattr(partial(f), "__name__") is False, hasattr(partial, ...)
         * True). A class with __getattr__ answers at run time: not modelled. */
        PyObject *t = var_type(c, o);   /* new */
        if (!t)
            return NULL;
        if (!PyType_Check(t)) {
            Py_DECREF(t);
            cap_fail(c, BR_UNSUPPORTED_CALL, "hasattr on %s", var_a(c, o));
            return NULL;
        }
        static PyObject *s_getattr_t;   /* strong, interned, never released */
        if (!s_getattr_t && !(s_getattr_t = PyUnicode_InternFromString("__getattr__"))) {
            Py_DECREF(t);
            return NULL;
        }
        int r = _PyType_Lookup((PyTypeObject *)t, args[1]->obj) != NULL;   /* borrowed */
        int custom = !r && _PyType_Lookup((PyTypeObject *)t, s_getattr_t) != NULL;
        if (custom)
            cap_fail(c, BR_UNSUPPORTED_CALL, "hasattr on %s with __getattr__",
                     sj_type_a(c, (PyTypeObject *)t, "object"));
        Py_DECREF(t);
        return custom ? NULL : const_bool(c, r);
    }
    if (o->kind == VK_TENSOR) {
        const char *n = PyUnicode_AsUTF8(args[1]->obj);
        if (n && (!strcmp(n, "shape") || !strcmp(n, "dtype") || !strcmp(n, "ndim") || !strcmp(n, "T")))
            return const_bool(c, 1);
    }
    if ((o->kind == VK_OBJECT || o->kind == VK_MODULE) && attr_written(c, o->obj, args[1]->obj))
        return const_bool(c, 1);   /* written earlier in the frame: the object has it once replayed */
    int has = sj_hasattr(probe, args[1]->obj);
    if (has < 0) {
        cap_fail_exc(c, BR_USER_EXCEPTION);
        return NULL;
    }
    if (attr_guard_hasattr(c, o, args[1]->obj, has) < 0)
        return NULL;
    return const_bool(c, has);
}

/* isinstance(x, cls) for a torch tensor x and torch's legacy classes (torch.FloatTensor,
 * torch.LongTensor, ...): their metaclass answers by the instance's dtype and device, not
 * its type. Asked of an empty CPU tensor of x's dtype (capture models CPU tensors only);
 * 0 for any other cls. 1, 0 or -1 with an exception. */
static int legacy_tensor_class(const TensorMeta *m, PyObject *cls)
{
    static PyObject *meta;   /* strong: the legacy classes' metaclass */
    if (!meta && libs.torch) {
        PyObject *ft = libs_get_path(libs.torch, "FloatTensor");   /* new */
        if (ft && Py_TYPE(ft) != &PyType_Type)
            meta = Py_NewRef((PyObject *)Py_TYPE(ft));
        Py_XDECREF(ft);
        sj_err_clear();
    }
    int legacy = meta && Py_IS_TYPE(cls, (PyTypeObject *)meta);
    for (Py_ssize_t i = 0; meta && !legacy && PyTuple_Check(cls) && i < PyTuple_GET_SIZE(cls); i++)
        legacy = Py_IS_TYPE(PyTuple_GET_ITEM(cls, i), (PyTypeObject *)meta);
    if (!legacy)
        return 0;
    PyObject *dt = dtype_to_py((DType)m->dtype, LIB_TORCH);   /* new */
    PyObject *empty = dt ? libs_get_path(libs.torch, "empty") : NULL;
    PyObject *probe = NULL;
    if (empty) {
        PyObject *kw = Py_BuildValue("{sO}", "dtype", dt);
        PyObject *a = Py_BuildValue("(i)", 0);
        probe = kw && a ? PyObject_Call(empty, a, kw) : NULL;
        Py_XDECREF(kw);
        Py_XDECREF(a);
    }
    int r = probe ? PyObject_IsInstance(probe, cls) : -1;
    Py_XDECREF(probe);
    Py_XDECREF(empty);
    Py_XDECREF(dt);
    return r;
}

static Var *builtin_sum(Capture *c, Var **args, int32_t nargs)
{
    Var **items;
    int32_t n;
    if (nargs < 1 || nargs > 2 || op_iterate(c, args[0], &items, &n) < 0)
        return nargs < 1 || nargs > 2 ? (cap_fail(c, BR_UNSUPPORTED_CALL, "sum arguments"), NULL) : NULL;
    Var *acc = nargs == 2 ? args[1] : var_const_steal(c, PyLong_FromLong(0));
    for (int32_t i = 0; acc && i < n; i++)
        acc = op_binary(c, 0 /* NB_ADD */, acc, items[i]);
    return acc;
}

static Var *builtin_anyall(Capture *c, int is_all, Var **args, int32_t nargs)
{
    if (nargs != 1) {
        cap_fail(c, BR_UNSUPPORTED_CALL, "any/all arguments");
        return NULL;
    }
    /* item by item, stopping at the first that decides, as the builtin does: a lazy
     * iterator is consumed no further than eager consumes it */
    Var *it = iter_get(c, args[0]);
    if (!it)
        return NULL;
    for (;;) {
        Var *item;
        int t, r = iter_next(c, it, &item);
        if (r < 0)
            return NULL;
        if (!r)
            break;
        if (op_truth(c, item, &t) < 0)
            return NULL;
        if (is_all && !t)
            return const_bool(c, 0);
        if (!is_all && t)
            return const_bool(c, 1);
    }
    return const_bool(c, is_all);
}

static Var *call_builtin(Capture *c, BuiltinId id, Var **args, int32_t nargs, PyObject *kwnames)
{
    int32_t nkw = kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0;
    switch (id) {
    case B_LEN:
        if (nargs != 1)
            break;
        if (args[0]->kind == VK_USEROBJ && args[0]->u.uobj.record) {
            Var *t = objects_record_tuple(c, args[0]);
            return t ? op_len(c, t) : NULL;
        }
        return op_len(c, args[0]);
    case B_ISINSTANCE:
    case B_ISSUBCLASS: {
        if (nargs != 2)
            break;
        PyObject *cls = args[1]->obj;
        if (!cls && args[1]->kind == VK_TUPLE) {
            PyObject *py = var_to_py(c, args[1]);
            if (!py || !cap_keep_steal(c, py))
                return NULL;
            cls = py;
        }
        if (!cls)
            break;
        PyObject *t = id == B_ISINSTANCE ? var_type(c, args[0]) : Py_XNewRef(args[0]->obj);
        if (!t)
            return NULL;
        int r = PyObject_IsSubclass(t, cls);
        Py_DECREF(t);
        if (r == 0 && id == B_ISINSTANCE && args[0]->kind == VK_TENSOR && args[0]->u.t.meta.lib == LIB_TORCH)
            r = legacy_tensor_class(&args[0]->u.t.meta, cls);
        if (r < 0) {
            cap_fail_exc(c, BR_USER_EXCEPTION);
            return NULL;
        }
        return const_bool(c, r);
    }
    case B_ABS:
        if (nargs == 1 && args[0]->kind == VK_TENSOR) {
            int row = callables_operator_row("operator.abs");
            if (row >= 0)
                return op_record(c, row, args, 1, NULL);
        }
        break;
    case B_INT:
    case B_FLOAT:
    case B_BOOL:
        if (nargs == 1 && args[0]->kind == VK_TENSOR) {
            cap_fail(c, BR_SCALAR_OUTPUT, "%s() of %s reads its data", builtin_names[id], var_a(c, args[0]));
            return NULL;
        }
        if (id == B_BOOL && nargs == 1) {
            int t;
            return op_truth(c, args[0], &t) < 0 ? NULL : const_bool(c, t);
        }
        break;
    case B_TUPLE:
    case B_LIST: {
        if (nargs == 0)
            return var_seq(c, id == B_TUPLE ? VK_TUPLE : VK_LIST, NULL, 0);
        if (nargs != 1 || nkw)
            break;
        Var **items;
        int32_t n;
        if (op_iterate(c, args[0], &items, &n) < 0)
            return NULL;
        return var_seq(c, id == B_TUPLE ? VK_TUPLE : VK_LIST, items, n);
    }
    case B_DICT: {
        Var *d = var_dict(c);
        if (!d)
            return NULL;
        int32_t npos = nargs - nkw;
        if (npos == 1) {
            if (var_dict_merge(c, d, args[0]) < 0)
                return NULL;
        } else if (npos > 1) {
            break;
        }
        for (int32_t i = 0; i < nkw; i++) {
            Var *k = var_const(c, PyTuple_GET_ITEM(kwnames, i));
            if (!k || var_dict_set(c, d, k, args[npos + i]) < 0)
                return NULL;
        }
        return d;
    }
    case B_GETATTR:
        return builtin_getattr(c, args, nargs);
    case B_HASATTR:
        return builtin_hasattr(c, args, nargs);
    case B_SUM:
        return builtin_sum(c, args, nargs);
    case B_ANY:
    case B_ALL:
        return builtin_anyall(c, id == B_ALL, args, nargs);
    case B_REVERSED: {
        if (nargs != 1)
            break;
        if (args[0]->kind == VK_ITER) {
            /* an iterator is not reversible: the interpreter raises eager's TypeError */
            cap_fail(c, BR_UNSUPPORTED_CALL, "reversed() of an iterator");
            return NULL;
        }
        Var **items;
        int32_t n;
        if (op_iterate(c, args[0], &items, &n) < 0)
            return NULL;
        Var **copy = cap_alloc(c, sizeof(Var *) * (size_t)(n + 1));
        if (!copy)
            return NULL;
        for (int32_t i = 0; i < n; i++)
            copy[i] = items[n - 1 - i];
        return make_iter(c, copy, n);
    }
    case B_NEXT:
        if (nargs >= 1 && nargs <= 2 && !nkw && args[0]->kind == VK_ITER) {
            Var *item;
            int r = iter_next(c, args[0], &item);
            if (r)
                return r > 0 ? item : NULL;
            if (nargs == 2)
                return args[1];
            cap_raise(c, PyExc_StopIteration);
            return NULL;
        }
        break;
    case B_TYPE:
        if (nargs == 1) {
            PyObject *t = var_type(c, args[0]);
            if (!t)
                return NULL;
            Var *r = wrap_untracked(c, t);
            Py_DECREF(t);
            return r;
        }
        break;
    case B_CALLABLE:
        if (nargs == 1) {
            Var *v = args[0];
            int k = v->kind == VK_FUNC || v->kind == VK_METHOD || v->kind == VK_CALLABLE || v->kind == VK_MODULE ||
                    v->kind == VK_PARTIAL || (v->obj && v->kind != VK_TENSOR && PyCallable_Check(v->obj));
            return const_bool(c, k);
        }
        break;
    case B_PRINT:
        cap_fail(c, BR_UNSUPPORTED_CALL, "print() writes to a stream; it runs in the interpreter");
        return NULL;
    case B_SUPER:
        return objects_super(c, args, nargs);
    case B_SETATTR:
        if (nargs == 3 && !kwnames && var_is_const(args[1]) && PyUnicode_CheckExact(args[1]->obj))
            return attr_store(c, args[0], args[1]->obj, args[2]) < 0 ? NULL : var_const(c, Py_None);
        cap_fail(c, BR_SIDE_EFFECT, "setattr() with a name that is not a constant str");
        return NULL;
    case B_DELATTR:
        if (nargs == 2 && !kwnames && var_is_const(args[1]) && PyUnicode_CheckExact(args[1]->obj) &&
            args[0]->kind == VK_USEROBJ)
            return objects_attr_delete(c, args[0], args[1]->obj) < 0 ? NULL : var_const(c, Py_None);
        cap_fail(c, BR_SIDE_EFFECT, "delattr() of %s", var_a(c, args[0]));
        return NULL;
    case B_ID:
        if (nargs == 1 && !kwnames)
            return objects_id(c, args[0]);
        cap_fail(c, BR_UNSUPPORTED_CALL, "id() with these arguments");
        return NULL;
    case B_HASH:
        if (nargs == 1 && !kwnames)
            return objects_hash(c, args[0]);
        break;
    case B_VARS:
        /* vars(o) is o.__dict__, read as the attribute is (its __getattribute__ included):
         * the object's own dict, tracked through its source, so writes into it are the
         * object's attribute writes */
        if (nargs == 1 && !kwnames &&
            ((args[0]->obj && args[0]->src >= 0 && (args[0]->kind == VK_OBJECT || args[0]->kind == VK_MODULE)) ||
             (args[0]->kind == VK_USEROBJ && !args[0]->u.uobj.record))) { /* one made in the frame: its attributes */
            static PyObject *s_dict;   /* strong, interned, never released */
            if (!s_dict && !(s_dict = PyUnicode_InternFromString("__dict__"))) {
                cap_fail_exc(c, BR_INTERNAL);
                return NULL;
            }
            return attr_load(c, args[0], s_dict);
        }
        break;
    default:
        break;
    }
    if ((id == B_STR || id == B_REPR) && nargs == 1 && args[0]->obj && args[0]->kind != VK_TENSOR) {
        PyObject *r = id == B_STR ? PyObject_Str(args[0]->obj) : PyObject_Repr(args[0]->obj);
        if (!r) {
            cap_fail_exc(c, BR_USER_EXCEPTION);
            return NULL;
        }
        return var_const_steal(c, r);
    }
    /* everything else folds when its arguments are constants */
    if (all_foldable(args, nargs))
        return cap_fold_call(c, builtin_objs[id], args, nargs, kwnames);
    cap_fail(c, BR_UNSUPPORTED_CALL, "%s() with these arguments", builtin_names[id]);
    return NULL;
}

/* ----------------------------------------------------------- torch specials ---- */

static Var *torch_special(Capture *c, PyObject *fn, Var **args, int32_t nargs, PyObject *kwnames, int *handled)
{
    *handled = 1;
    if (fn == libs.no_grad || fn == libs.enable_grad) {
        if (nargs) {
            cap_fail(c, BR_UNSUPPORTED_CALL, "torch.no_grad with arguments");
            return NULL;
        }
        Var *v = var_new(c, VK_GRADMODE);
        if (v)
            v->u.grad.enabled = fn == libs.enable_grad;
        return v;
    }
    if (fn == libs.inference_mode)
        return infmode_new(c, args, nargs, kwnames);
    if (fn == libs.set_grad_enabled) {
        /* torch.set_grad_enabled(mode) switches when it is made (a statement or a with) */
        int32_t nkw = kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0;
        Var *mode = nargs == 1 ? args[0] : NULL;
        if (!mode || (nkw && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "mode") != 0) ||
            mode->kind != VK_CONST || !PyBool_Check(mode->obj)) {
            cap_fail(c, BR_UNSUPPORTED_CALL, "torch.set_grad_enabled with a mode that is not a constant bool");
            return NULL;
        }
        Var *setter = wrap_untracked(c, libs.set_grad_fn);
        Var *a[1] = {mode};
        int prev = c->grad_mode;
        if (!setter || !call_var(c, setter, a, 1, NULL))
            return NULL;
        c->grad_mode = mode->obj == Py_True;
        Var *v = var_new(c, VK_GRADMODE);
        if (v) {
            v->u.grad.enabled = c->grad_mode;
            v->u.grad.prev = prev;
            v->u.grad.applied = 1;
        }
        return v;
    }
    PyObject *name = PyObject_GetAttrString(fn, "__name__");
    PyObject *mod = name ? PyObject_GetAttrString(fn, "__module__") : NULL;
    if (!name || !mod || !PyUnicode_Check(name) || !PyUnicode_Check(mod)) {
        sj_err_clear();
        Py_XDECREF(name);
        Py_XDECREF(mod);
        *handled = 0;
        return NULL;
    }
    const char *n = PyUnicode_AsUTF8(name), *m = PyUnicode_AsUTF8(mod);
    Var *r = NULL;
    if (!n || !m) {
        sj_err_clear();
        *handled = 0;
    } else if (!strcmp(n, "is_grad_enabled")) {
        r = const_bool(c, c->grad_mode);
    } else if (!strcmp(n, "get_default_dtype")) {
        r = var_const_steal(c, dtype_to_py(meta_torch_default_float, LIB_TORCH));
    } else if (!strcmp(n, "is_scripting") || !strcmp(n, "is_tracing") || !strcmp(n, "_get_tracing_state") ||
               !strcmp(n, "is_fx_tracing") || !strcmp(n, "is_fx_symbolic_tracing")) {
        r = strcmp(n, "_get_tracing_state") == 0 ? var_const(c, Py_None) : const_bool(c, 0);
    } else if (!strcmp(n, "is_compiling") || !strcmp(n, "is_dynamo_compiling") || !strcmp(n, "is_exporting")) {
        r = const_bool(c, strcmp(n, "is_exporting") != 0);
    } else if (!strcmp(n, "get_fastpath_enabled")) {
        /* fused fast paths (torch._transformer_encoder_layer_fwd) are not modelled: take
         * the path made of ordinary ops */
        r = const_bool(c, 0);
    } else if (strstr(n, "has_torch_function")) {
        /* capture only models plain tensors: no __torch_function__ overrides */
        r = const_bool(c, 0);
    } else if (!strcmp(n, "is_tensor")) {
        r = nargs == 1 ? const_bool(c, args[0]->kind == VK_TENSOR && args[0]->u.t.meta.lib == LIB_TORCH) : NULL;
        if (!r && !cap_failed(c))
            *handled = 0;
    } else if ((fn == libs.size_type || fn == libs.device_type) && all_foldable(args, nargs)) {
        r = cap_fold_call(c, fn, args, nargs, kwnames);
    } else {
        *handled = 0;
    }
    Py_DECREF(name);
    Py_DECREF(mod);
    return r;
}

Var *builtin_call(Capture *c, PyObject *fn, Var **args, int32_t nargs, PyObject *kwnames, int *handled)
{
    *handled = 0;
    if (builtins_init() < 0) {
        *handled = 1;
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    Var *gs = gscalar_call(c, fn, args, nargs, kwnames, handled);   /* float(f), math.sqrt(f) */
    if (*handled)
        return gs;
    Var *r = iters_call(c, fn, args, nargs, kwnames, handled);   /* map, zip, reduce, itertools */
    if (*handled)
        return r;
    for (int i = 0; i < B_COUNT; i++)
        if (fn == builtin_objs[i]) {
            *handled = 1;
            return call_builtin(c, (BuiltinId)i, args, nargs, kwnames);
        }
    r = check_call(c, fn, args, nargs, kwnames, handled);
    if (*handled)
        return r;
    if (fn == libs.partial_type) {
        *handled = 1;
        int32_t nkw = kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0;
        int32_t npos = nargs - nkw;
        if (npos < 1) {
            cap_fail(c, BR_USER_EXCEPTION, "partial() needs a callable");
            return NULL;
        }
        Var *p = var_new(c, VK_PARTIAL);
        Var *pa = p ? var_seq(c, VK_TUPLE, args + 1, npos - 1) : NULL;
        Var *pk = pa ? var_dict(c) : NULL;
        if (!pk)
            return NULL;
        for (int32_t i = 0; i < nkw; i++) {
            Var *k = var_const(c, PyTuple_GET_ITEM(kwnames, i));
            if (!k || var_dict_set(c, pk, k, args[npos + i]) < 0)
                return NULL;
        }
        p->u.partial.fn = args[0];
        p->u.partial.args = pa;
        p->u.partial.kwargs = pk;
        return p;
    }
    static PyObject *obj_setattr;   /* strong: object.__setattr__ */
    if (!obj_setattr && !(obj_setattr = PyObject_GetAttrString((PyObject *)&PyBaseObject_Type, "__setattr__"))) {
        *handled = 1;
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    if (fn == obj_setattr && nargs == 3 && !kwnames &&
        (args[0]->kind == VK_USEROBJ || args[0]->kind == VK_OBJECT || args[0]->kind == VK_MODULE) &&
        var_is_const(args[1]) && PyUnicode_CheckExact(args[1]->obj)) {
        *handled = 1;
        return attr_store_generic(c, args[0], args[1]->obj, args[2]) < 0 ? NULL : var_const(c, Py_None);
    }
    /* methods called on a tensor (args[0] is the tensor) */
    if (nargs >= 1 && args[0] && args[0]->kind == VK_TENSOR) {
        PyObject *name = PyObject_GetAttrString(fn, "__name__");
        if (name && PyUnicode_Check(name)) {
            const char *n = PyUnicode_AsUTF8(name);
            Var *r = n ? tensor_meta_method(c, n, args, nargs, kwnames, handled) : NULL;
            Py_DECREF(name);
            if (*handled)
                return r;
        } else {
            Py_XDECREF(name);
            sj_err_clear();
        }
    }
    if (libs.torch)
        return torch_special(c, fn, args, nargs, kwnames, handled);
    return NULL;
}
