/* Python test hooks of the compile-and-load layer (native/) and its module registration.
 *
 *     fn = _C._cg_build(source, symbol, signature[, tag])   # a handle (capsule)
 *     _C._cg_call(fn, *args)          # ints for p/l/i, floats (or ints) for d/f
 *     _C._cg_cache_info()             # {"dir", "requested", "private", counters...}
 *     _C._cg_forget()                 # next build goes to the disk cache again
 *
 * The cache directory is read from the environment at every build (diskcache.c), so
 * tests switch it with SHAPEJIT_CACHE_DIR. */
#include "native_int.h"

#define FN_CAPSULE "shapejit._C.cg_fn"

static void fn_capsule_free(PyObject *cap)
{
    PyMem_Free(PyCapsule_GetPointer(cap, FN_CAPSULE));
}

static PyObject *py_cg_build(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *source;   /* borrowed */
    const char *symbol, *sig, *tag = "_cg_build";
    Py_ssize_t len;
    if (!PyArg_ParseTuple(args, "Uss|s:_cg_build", &source, &symbol, &sig, &tag))
        return NULL;
    const char *src = PyUnicode_AsUTF8AndSize(source, &len);   /* borrowed from source */
    if (!src)
        return NULL;
    CgLib *lib = cg_build(src, (size_t)len, tag);   /* borrowed, immortal */
    void *p = lib ? cg_sym(lib, symbol) : NULL;
    if (!p)
        return NULL;
    CgFn *f = PyMem_Malloc(sizeof *f);
    if (!f)
        return PyErr_NoMemory();
    if (cg_fn_prepare(f, p, sig) < 0) {
        PyMem_Free(f);
        return NULL;
    }
    PyObject *cap = PyCapsule_New(f, FN_CAPSULE, fn_capsule_free);   /* new; owns f */
    if (!cap)
        PyMem_Free(f);
    return cap;
}

typedef union {
    void *p;
    int64_t l;
    int32_t i;
    double d;
    float f;
    ffi_arg a;   /* libffi widens narrow integer results to this */
} CgValue;

/* Converts `o` (borrowed) for letter `c` into *v; 0 or -1 with TypeError/OverflowError. */
static int to_value(char c, PyObject *o, CgValue *v, Py_ssize_t pos)
{
    int is_int = PyLong_Check(o), is_num = is_int || PyFloat_Check(o);
    if ((c == 'p' || c == 'l' || c == 'i') ? !is_int : !is_num) {
        PyErr_Format(PyExc_TypeError, "_cg_call: argument %zd (signature letter '%c') must be %s, not %s", pos, c,
                     c == 'p' || c == 'l' || c == 'i' ? "an int" : "a float or int", Py_TYPE(o)->tp_name);
        return -1;
    }
    switch (c) {
    case 'p':
        v->p = PyLong_AsVoidPtr(o);
        break;
    case 'l':
        v->l = PyLong_AsLongLong(o);
        break;
    case 'i': {
        long x = PyLong_AsLong(o);
        if (!PyErr_Occurred() && (x < INT32_MIN || x > INT32_MAX))
            PyErr_Format(PyExc_OverflowError, "_cg_call: argument %zd does not fit an int32", pos);
        v->i = (int32_t)x;
        break;
    }
    case 'd':
        v->d = PyFloat_AsDouble(o);
        break;
    case 'f':
        v->f = (float)PyFloat_AsDouble(o);
        break;
    default:
        PyErr_Format(PyExc_SystemError, "_cg_call: signature letter '%c' has no conversion", c);
    }
    return PyErr_Occurred() ? -1 : 0;
}

static PyObject *from_value(char c, const CgValue *v)
{
    switch (c) {
    case 'v':
        Py_RETURN_NONE;
    case 'p':
        return PyLong_FromVoidPtr(v->p);
    case 'l':
        return PyLong_FromLongLong(v->l);
    case 'i':
        return PyLong_FromLong((int32_t)v->a);
    case 'd':
        return PyFloat_FromDouble(v->d);
    case 'f':
        return PyFloat_FromDouble(v->f);
    default:
        PyErr_Format(PyExc_SystemError, "_cg_call: signature letter '%c' has no conversion", c);
        return NULL;
    }
}

static PyObject *py_cg_call(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs < 1 || !PyCapsule_IsValid(args[0], FN_CAPSULE)) {
        PyErr_SetString(PyExc_TypeError, "_cg_call(handle, *args): handle must come from _cg_build");
        return NULL;
    }
    CgFn *f = PyCapsule_GetPointer(args[0], FN_CAPSULE);   /* owned by the capsule */
    if (nargs - 1 != f->nargs) {
        PyErr_Format(PyExc_TypeError, "_cg_call: signature '%s' takes %d arguments, got %zd", f->sig, f->nargs,
                     nargs - 1);
        return NULL;
    }
    CgValue vals[CG_MAX_ARGS], ret;
    void *ptrs[CG_MAX_ARGS];
    for (int i = 0; i < f->nargs; i++) {
        if (to_value(f->sig[i + 1], args[i + 1], &vals[i], i) < 0)
            return NULL;
        ptrs[i] = &vals[i];
    }
    memset(&ret, 0, sizeof ret);
    cg_fn_call(f, f->ret == 'v' ? NULL : &ret, ptrs);
    return from_value(f->ret, &ret);
}

static PyObject *py_cg_cache_info(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return dc_info();
}

static PyObject *py_cg_forget(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    cg_forget();
    Py_RETURN_NONE;
}

/* _C._cg_identity(): the compiler identity (the cache key's compiler part) for the current
 * $CC and cpu_target, probing them if new. */
static PyObject *py_cg_identity(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    const char *t = cc_identity();
    return t ? PyUnicode_DecodeUTF8(t, (Py_ssize_t)strlen(t), "replace") : NULL;
}

static PyMethodDef codegen_methods[] = {
    {"_cg_build", py_cg_build, METH_VARARGS,
     "_cg_build(source, symbol, signature[, tag]): compile (or load from the cache) and prepare a call (tests)"},
    {"_cg_call", (PyCFunction)(void (*)(void))py_cg_call, METH_FASTCALL,
     "_cg_call(handle, *args): call a function prepared by _cg_build (tests)"},
    {"_cg_cache_info", py_cg_cache_info, METH_NOARGS, "The kernel disk cache: directory and counters (tests)."},
    {"_cg_identity", py_cg_identity, METH_NOARGS,
     "The compiler identity for the current $CC and cpu_target, as it enters the kernel cache key (tests)."},
    {"_cg_forget", py_cg_forget, METH_NOARGS, "Forget loaded kernel libraries' memo (tests)."},
    {NULL, NULL, 0, NULL},
};

int codegen_init_module(PyObject *m)
{
    if (cc_init_module(m) < 0)
        return -1;
    return PyModule_AddFunctions(m, codegen_methods);
}
