/* Calls of functions wrapped by torch.compiler.disable / torch._dynamo.disable.
 *
 * torch marks the wrapper it returns with _torchdynamo_disable and keeps the function it
 * wraps in _torchdynamo_orig_callable; _torchdynamo_disable_recursive says whether the
 * functions it calls are left alone too. torch's wrapper switches torch's frame hook off,
 * not ours, so capture does what torch.compile does at such a call: the graph breaks
 * there, and the wrapped function's code is marked never to be compiled (with
 * recursive=True, nothing it calls is compiled either: code_cache.h's SKIP_DISABLED_WITH_CALLEES). */
#include "capture.h"
#include "../core/errors.h"

/* Borrowed: the value of attribute name in function fn's __dict__, or NULL. Reads the
 * dict directly: no descriptor or __getattr__ runs. */
static PyObject *func_dict_item(PyObject *fn, const char *name)
{
    PyObject *d = ((PyFunctionObject *)fn)->func_dict;   /* borrowed */
    if (!d || !PyDict_Check(d))
        return NULL;
    PyObject *v = PyDict_GetItemString(d, name);          /* borrowed */
    return v;
}

/* The code object behind a callable torch wrapped (a function or a bound method), or NULL. */
static PyCodeObject *callable_code(PyObject *fn)
{
    if (PyMethod_Check(fn))
        fn = PyMethod_GET_FUNCTION(fn);
    if (PyFunction_Check(fn))
        return (PyCodeObject *)PyFunction_GET_CODE(fn);
    return NULL;
}

int disabled_is_wrapper(PyObject *fn)
{
    if (!fn || !PyFunction_Check(fn))
        return 0;
    PyObject *flag = func_dict_item(fn, "_torchdynamo_disable");
    return flag == Py_True && func_dict_item(fn, "_torchdynamo_orig_callable") != NULL;
}

Var *disabled_call(Capture *c, PyObject *fn)
{
    PyObject *orig = func_dict_item(fn, "_torchdynamo_orig_callable");   /* borrowed */
    PyObject *rec = func_dict_item(fn, "_torchdynamo_disable_recursive");
    int recursive = rec != Py_False;   /* torch's default, and its wrappers older than the flag */
    /* the wrapped code, and (nested disables) every wrapper's own code on the way */
    for (int depth = 0; orig && depth < 8; depth++) {
        PyCodeObject *co = callable_code(orig);
        if (co && code_cache_disable_calls(co, recursive) < 0) {
            sj_err_clear();   /* not marked: at worst it is compiled as torch would not */
            break;
        }
        if (!PyFunction_Check(orig) || !disabled_is_wrapper(orig))
            break;
        orig = func_dict_item(orig, "_torchdynamo_orig_callable");
    }
    PyObject *qn = ((PyFunctionObject *)fn)->func_qualname;   /* borrowed */
    cap_fail(c, BR_DISABLED, "%U%s", qn, recursive ? "" : " (recursive=False)");
    return NULL;
}

int disabled_is_factory(PyObject *fn)
{
    if (!fn || !PyFunction_Check(fn))
        return 0;
    PyObject *mod = ((PyFunctionObject *)fn)->func_module;   /* borrowed */
    PyObject *qn = ((PyFunctionObject *)fn)->func_qualname;  /* borrowed */
    if (!mod || !PyUnicode_Check(mod) || !qn || !PyUnicode_Check(qn))
        return 0;
    return PyUnicode_CompareWithASCIIString(qn, "disable") == 0 &&
           (PyUnicode_CompareWithASCIIString(mod, "torch.compiler") == 0 ||
            PyUnicode_CompareWithASCIIString(mod, "torch._dynamo.decorators") == 0);
}

Var *disabled_make(Capture *c, PyObject *factory, Var **args, int32_t nargs, PyObject *kwnames)
{
    /* torch.compiler.disable(fn, recursive=...) only builds a wrapper around fn (nothing
     * is written on fn): made now, from the live function, and kept for the capture. Its
     * call then breaks the graph as the decorator form does. */
    for (int32_t i = 0; i < nargs; i++) {
        Var *a = args[i];
        if (!(a->kind == VK_CONST || (a->kind == VK_FUNC && a->obj) || a->kind == VK_METHOD)) {
            cap_fail(c, BR_UNSUPPORTED_CALL, "torch.compiler.disable of %s", var_a(c, a));
            return NULL;
        }
    }
    PyObject *w = cap_call_live(c, factory, args, nargs, kwnames);
    if (!w || !cap_keep_steal(c, w))
        return NULL;
    return wrap_untracked(c, w);
}
