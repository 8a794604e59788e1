/* The library types capture recognises, looked up once the libraries are imported by the
 * user (shapejit never imports torch itself). All pointers are strong and live forever. */
#ifndef SJ_LIBS_H
#define SJ_LIBS_H

#include <Python.h>

typedef struct {
    PyObject *torch;            /* module or NULL */
    PyObject *tensor_type;      /* torch.Tensor */
    PyObject *param_type;       /* torch.nn.Parameter */
    PyObject *module_type;      /* torch.nn.Module */
    PyObject *size_type;        /* torch.Size */
    PyObject *no_grad, *enable_grad, *set_grad_enabled;  /* the classes */
    PyObject *set_grad_fn;      /* torch._C._set_grad_enabled */
    PyObject *inference_mode;   /* the class torch.inference_mode */
    PyObject *memory_format_type;   /* torch.memory_format (torch.contiguous_format's type) */
    PyObject *enter_inference_mode, *exit_inference_mode;   /* torch.autograd.grad_mode's */
    PyObject *dtype_type, *device_type;
    PyObject *numpy;            /* module or NULL */
    PyObject *ndarray_type;
    PyObject *np_generic;       /* numpy.generic (numpy scalars) */
    PyObject *np_dtype_type;    /* numpy.dtype */
    PyObject *partial_type;     /* functools.partial */
    PyObject *global_hook_dicts;/* tuple of the names of torch.nn.modules.module's global hook dicts */
    PyObject *nn_module_globals;/* that module's __dict__ (where those dicts live) */
} Libs;

extern Libs libs;

/* New reference: root.a.b.c for path "a.b.c", or NULL with an exception set. */
PyObject *libs_get_path(PyObject *root, const char *path);

/* Refresh from sys.modules (cheap when nothing changed). Returns 0 or -1. */
int libs_refresh(void);
int libs_is_tensor(PyObject *o);       /* torch.Tensor or Parameter, exactly */
int libs_is_ndarray(PyObject *o);
int libs_is_module(PyObject *o);       /* nn.Module instance */
/* 1 when the file belongs to a library whose code capture inlines without guarding its
 * globals (torch, numpy, transformers' helpers stay guarded). */
int libs_is_trusted_file(PyObject *filename);

#endif
