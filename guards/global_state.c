/* The interpreter-wide state a graph depends on (GLOBAL_STATE): torch's grad mode, its
 * default dtype, its intra-op thread count and whether autocast is on for some device.
 *
 * They are thread-local or global C++ state inside torch, reachable only through torch's
 * own builtins (torch._C.is_grad_enabled, get_default_dtype, get_num_threads). Those are
 * METH_NOARGS C functions: we look them up once and call their C entry point directly,
 * which is their official API without the cost of a Python-level call. Anything
 * unexpected (a builtin replaced by a Python function, another calling convention) falls
 * back to an ordinary call. */
#include "guards.h"

typedef struct {
    const char *name;      /* dotted path from torch */
    PyObject *fn;          /* strong, cached */
} TorchFn;

static TorchFn fns[] = {{"is_grad_enabled", NULL},
                        {"get_default_dtype", NULL},
                        {"get_num_threads", NULL},
                        {"_C._is_any_autocast_enabled", NULL}};
enum { FN_GRAD, FN_DTYPE, FN_THREADS, FN_AUTOCAST, FN_COUNT };

static PyObject *last_dtype_obj;   /* strong: the torch.dtype seen last */
static int last_dtype = -1;         /* its DType */

/* New reference: fn(). */
static PyObject *call0(PyObject *fn)
{
    if (PyCFunction_Check(fn) && PyCFunction_GET_FLAGS(fn) == METH_NOARGS)
        return PyCFunction_GET_FUNCTION(fn)(PyCFunction_GET_SELF(fn), NULL);
    return PyObject_CallNoArgs(fn);
}

int guards_read_global_state(GlobalState *gs)
{
    gs->grad_enabled = 1;
    gs->default_dtype = -1;
    gs->num_threads = -1;
    gs->autocast = -1;
    if (!fns[0].fn) {
        PyObject *mods = PyImport_GetModuleDict();                 /* borrowed */
        PyObject *torch = PyDict_GetItemString(mods, "torch");     /* borrowed */
        if (!torch)
            return 0;
        for (int i = 0; i < FN_COUNT; i++) {
            PyObject *f = Py_NewRef(torch);
            for (const char *p = fns[i].name; f && *p;) {
                const char *dot = strchr(p, '.');
                size_t n = dot ? (size_t)(dot - p) : strlen(p);
                PyObject *part = PyUnicode_FromStringAndSize(p, (Py_ssize_t)n);
                PyObject *next = part ? PyObject_GetAttr(f, part) : NULL;
                Py_XDECREF(part);
                Py_SETREF(f, next);
                p += n + (dot != NULL);
            }
            if (!f) {
                for (int j = 0; j < i; j++)
                    Py_CLEAR(fns[j].fn);
                return -1;
            }
            fns[i].fn = f;
        }
    }
    PyObject *r = call0(fns[FN_GRAD].fn);
    if (!r)
        return -1;
    gs->grad_enabled = r == Py_True ? 1 : r == Py_False ? 0 : PyObject_IsTrue(r);
    Py_DECREF(r);
    if (gs->grad_enabled < 0)
        return -1;
    r = call0(fns[FN_DTYPE].fn);
    if (!r)
        return -1;
    if (r != last_dtype_obj) {
        DType d;
        int bad = dtype_from_py(r, LIB_TORCH, &d);
        if (bad < 0) {
            Py_DECREF(r);
            return -1;
        }
        Py_XSETREF(last_dtype_obj, Py_NewRef(r));
        last_dtype = bad ? -1 : (int)d;
    }
    Py_DECREF(r);
    gs->default_dtype = last_dtype;
    r = call0(fns[FN_THREADS].fn);
    if (!r)
        return -1;
    long n = PyLong_AsLong(r);
    Py_DECREF(r);
    if (n == -1 && PyErr_Occurred())
        return -1;
    gs->num_threads = (int)n;
    r = call0(fns[FN_AUTOCAST].fn);
    if (!r)
        return -1;
    gs->autocast = PyObject_IsTrue(r);
    Py_DECREF(r);
    return gs->autocast < 0 ? -1 : 0;
}
