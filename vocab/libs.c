/* Library types, fetched lazily from sys.modules. */
#include "libs.h"
#include "callables.h"
#include "../core/errors.h"
#define SJ_NUMPY_IMPORT_ARRAY   /* this file owns numpy's C-API table */
#include "np.h"

Libs libs;

PyObject *libs_get_path(PyObject *root, const char *path)
{
    PyObject *cur = Py_NewRef(root);
    const char *p = path;
    while (*p && cur) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        PyObject *name = PyUnicode_FromStringAndSize(p, (Py_ssize_t)n);
        PyObject *next = name ? PyObject_GetAttr(cur, name) : NULL;
        Py_XDECREF(name);
        Py_DECREF(cur);
        cur = next;
        p = dot ? dot + 1 : p + n;
    }
    return cur;
}

/* An object of a library that capture recognises: the field of libs that keeps it (a
 * strong reference) and its path below the module. */
typedef struct {
    PyObject **slot;
    const char *path;
} LibPath;

static const LibPath torch_paths[] = {
    {&libs.tensor_type, "Tensor"},
    {&libs.param_type, "nn.Parameter"},
    {&libs.module_type, "nn.Module"},
    {&libs.size_type, "Size"},
    {&libs.no_grad, "no_grad"},
    {&libs.enable_grad, "enable_grad"},
    {&libs.set_grad_enabled, "set_grad_enabled"},
    {&libs.set_grad_fn, "_C._set_grad_enabled"},
    {&libs.inference_mode, "inference_mode"},
    {&libs.memory_format_type, "memory_format"},
    {&libs.enter_inference_mode, "autograd.grad_mode._enter_inference_mode"},
    {&libs.exit_inference_mode, "autograd.grad_mode._exit_inference_mode"},
    {&libs.dtype_type, "dtype"},
    {&libs.device_type, "device"},
};

static const LibPath numpy_paths[] = {
    {&libs.ndarray_type, "ndarray"},
    {&libs.np_generic, "generic"},
    {&libs.np_dtype_type, "dtype"},
};

/* Fills the slots of paths[0..n) from the module root, in order: 0, or -1 with an exception
 * set at the first path that does not resolve (the slots before it stay filled). */
static int load_paths(PyObject *root, const LibPath *paths, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!(*paths[i].slot = libs_get_path(root, paths[i].path)))
            return -1;
    return 0;
}

static int load_torch(PyObject *torch)
{
    libs.torch = Py_NewRef(torch);
    if (load_paths(torch, torch_paths, sizeof torch_paths / sizeof *torch_paths) < 0)
        return -1;
    PyObject *m = libs_get_path(torch, "nn.modules.module");
    if (!m)
        return -1;
    libs.global_hook_dicts =
        Py_BuildValue("(sssss)", "_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                      "_global_backward_pre_hooks", "_global_forward_hooks_always_called");
    libs.nn_module_globals = PyObject_GetAttrString(m, "__dict__");
    if (!libs.global_hook_dicts || !libs.nn_module_globals) {
        Py_DECREF(m);
        return -1;
    }
    Py_DECREF(m);
    return callables_init();
}

int sj_np_load(void)
{
    PyObject *np = PyDict_GetItemString(PyImport_GetModuleDict(), "numpy");   /* borrowed */
    if (!np || !PyObject_HasAttrString(np, "ndarray"))   /* absent, or still importing */
        return 0;
    if (_import_array() < 0) {   /* a numpy whose C API does not load: as if absent */
        sj_err_clear();
        return 0;
    }
    return 1;
}

static int load_numpy(PyObject *np)
{
    if (!sj_np_ready()) {
        PyErr_SetString(PyExc_ImportError, "shapejit: numpy's C API could not be loaded");
        return -1;
    }
    libs.numpy = Py_NewRef(np);
    if (load_paths(np, numpy_paths, sizeof numpy_paths / sizeof *numpy_paths) < 0)
        return -1;
    return callables_init();
}

int libs_refresh(void)
{
    PyObject *mods = PyImport_GetModuleDict();
    if (!libs.partial_type) {
        PyObject *ft = PyImport_ImportModule("functools");
        libs.partial_type = ft ? PyObject_GetAttrString(ft, "partial") : NULL;
        Py_XDECREF(ft);
        if (!libs.partial_type)
            return -1;
    }
    if (!libs.torch) {
        PyObject *t = PyDict_GetItemString(mods, "torch");
        /* a half-imported torch (during its own import) has no Tensor yet */
        if (t && PyObject_HasAttrString(t, "Tensor") && PyObject_HasAttrString(t, "nn") && load_torch(t) < 0)
            return -1;
    }
    if (!libs.numpy) {
        PyObject *n = PyDict_GetItemString(mods, "numpy");
        if (n && PyObject_HasAttrString(n, "ndarray") && load_numpy(n) < 0)
            return -1;
    }
    return 0;
}

int libs_is_tensor(PyObject *o)
{
    PyObject *t = (PyObject *)Py_TYPE(o);
    return libs.torch && (t == libs.tensor_type || t == libs.param_type);
}

int libs_is_ndarray(PyObject *o)
{
    return libs.numpy && (PyObject *)Py_TYPE(o) == libs.ndarray_type;
}

int libs_is_module(PyObject *o)
{
    return libs.module_type && PyObject_TypeCheck(o, (PyTypeObject *)libs.module_type);
}

int libs_is_trusted_file(PyObject *filename)
{
    const char *f = PyUnicode_AsUTF8(filename);
    if (!f) {
        sj_err_clear();
        return 0;
    }
    return strstr(f, "/site-packages/torch/") != NULL || strstr(f, "/site-packages/numpy/") != NULL;
}
