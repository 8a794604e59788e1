/* See collective.h. The exchange itself is Python (shapejit.collectives.exchange, the
 * collective_exchange policy): it talks
 * to torch.distributed's store, and it runs while the hook is off (hook_frame), so none of
 * torch.distributed's frames is compiled. */
#include "collective.h"
#include "../core/config.h"
#include "../core/errors.h"
#include "../core/policy.h"

static int may_be_active(void)
{
    if (!sj_config.enable_compiler_collectives || !sj_config.automatic_dynamic_shapes)
        return 0;
    /* no torch.distributed imported: no process group, nothing to ask */
    PyObject *mods = PyImport_GetModuleDict();   /* borrowed */
    return mods && PyDict_GetItemString(mods, "torch.distributed") != NULL;
}

/* A failure of the exchange must not stop the compile: a warning, then local sizes. */
static void warn_failure(PyCodeObject *co)
{
    if (PyErr_Occurred() && !sj_err_is_interrupt()) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        PyErr_NormalizeException(&et, &ev, &tb);
        PyObject *msg =
            PyUnicode_FromFormat("shapejit: compiler collective for %U (%U:%d) failed: %R; "
                                 "this rank compiles with its own sizes only",
                                 co->co_name, co->co_filename, co->co_firstlineno, ev ? ev : (et ? et : Py_None));
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
        if (msg && PyErr_WarnEx(PyExc_UserWarning, PyUnicode_AsUTF8(msg), 1) < 0)
            sj_err_clear();
        Py_XDECREF(msg);
    }
    sj_err_clear();   /* an interrupt is kept aside for the hook to raise */
}

void collective_exchange(CodeState *st, PyCodeObject *co, PyObject *const *locals)
{
    if (!may_be_active())
        return;
    /* the arguments, *args and **kwargs included (they come last in localsplus) */
    int nargs =
        co->co_argcount + co->co_kwonlyargcount + !!(co->co_flags & CO_VARARGS) + !!(co->co_flags & CO_VARKEYWORDS);
    PyObject *names = PyTuple_New(nargs), *values = PyTuple_New(nargs);
    PyObject *fn = NULL, *r = NULL;
    if (!names || !values)
        goto done;
    for (int i = 0; i < nargs; i++) {
        PyTuple_SET_ITEM(names, i, Py_NewRef(PyTuple_GET_ITEM(co->co_localsplusnames, i)));
        PyTuple_SET_ITEM(values, i, Py_NewRef(locals[i] ? locals[i] : Py_None));
    }
    fn = Py_XNewRef(policy_get(POLICY_COLLECTIVE_EXCHANGE));
    if (fn)
        r = PyObject_CallFunction(fn, "OiOOOOl", co->co_filename, co->co_firstlineno, co->co_name,
                                  st->fstate ? st->fstate : Py_None, names, values,
                                  sj_config.compiler_collectives_timeout);
    if (r && PyDict_Check(r))
        Py_XSETREF(st->fstate, Py_NewRef(r));
done:
    warn_failure(co);
    Py_XDECREF(r);
    Py_XDECREF(fn);
    Py_XDECREF(names);
    Py_XDECREF(values);
}

PyObject *collective_snapshot(CodeState *st)
{
    if (!may_be_active())
        return NULL;
    PyObject *copy = st->fstate ? PyDict_Copy(st->fstate) : PyDict_New();
    if (!copy)
        sj_err_clear();   /* out of memory: no second round on this rank (its peers time out) */
    return copy;
}

int collective_retrace(CodeState *st, PyCodeObject *co, PyObject *before)
{
    if (!before || !st->fstate || sj_err_deferred())
        return 0;   /* interrupted: the compile is dropped anyway */
    /* the capture's own failure (if any) is set aside while Python runs */
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    int again = 0;
    PyObject *fn = Py_XNewRef(policy_get(POLICY_COLLECTIVE_EXCHANGE_TRACED));
    PyObject *r = fn ? PyObject_CallFunction(fn, "OiOOOl", co->co_filename, co->co_firstlineno, co->co_name, before,
                                             st->fstate, sj_config.compiler_collectives_timeout)
                     : NULL;
    if (r && PyDict_Check(r)) {
        Py_XSETREF(st->fstate, Py_NewRef(r));
        again = 1;
    }
    warn_failure(co);
    Py_XDECREF(r);
    Py_XDECREF(fn);
    if (again) {
        /* the first capture is discarded, its failure with it */
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
    } else {
        PyErr_Restore(et, ev, tb);
    }
    return again;
}
