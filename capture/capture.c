/* Capture bookkeeping: the arena, keep-alive, failures and user locations. */
#include "capture.h"
#include <stdarg.h>
#include <stddef.h>
#include "../core/errors.h"

/* ----------------------------------------------------------------- arena ---- */

#define ARENA_BLOCK 65536

struct ArenaBlock {
    ArenaBlock *next;
    size_t used, size;
    max_align_t data[];
};

void *cap_alloc(Capture *c, size_t n)
{
    n = (n + sizeof(max_align_t) - 1) & ~(sizeof(max_align_t) - 1);
    ArenaBlock *b = c->arena;
    if (!b || b->used + n > b->size) {
        size_t size = n > ARENA_BLOCK ? n : ARENA_BLOCK;
        ArenaBlock *nb = PyMem_Malloc(sizeof(ArenaBlock) + size);
        if (!nb) {
            PyErr_NoMemory();
            return NULL;
        }
        nb->next = b;
        nb->used = 0;
        nb->size = size;
        c->arena = b = nb;
    }
    void *p = (char *)b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

void cap_arena_free(Capture *c)
{
    ArenaBlock *b = c->arena;
    while (b) {
        ArenaBlock *n = b->next;
        PyMem_Free(b);
        b = n;
    }
    c->arena = NULL;
}

PyObject *cap_keep(Capture *c, PyObject *obj)
{
    if (!obj)
        return NULL;
    if (PyList_Append(c->keepalive, obj) < 0)
        return NULL;
    return obj;
}

Var *cap_arg(Var **args, int32_t nargs, PyObject *kwnames, int32_t pos, const char *name)
{
    int32_t nkw = kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0;
    for (int32_t i = 0; i < nkw; i++)
        if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, i), name) == 0)
            return args[nargs - nkw + i];
    return pos >= 0 && pos < nargs - nkw ? args[pos] : NULL;
}

PyObject *cap_keep_steal(Capture *c, PyObject *obj)
{
    if (!obj)
        return NULL;
    int r = PyList_Append(c->keepalive, obj);
    Py_DECREF(obj);
    return r < 0 ? NULL : obj;
}

/* ---------------------------------------------------------------- where ---- */

static PyObject *getline_fn;   /* strong: linecache.getline */

PyObject *cap_where(Capture *c)
{
    EvalFrame *f = c->frame;
    if (!f)
        return Py_BuildValue("(sisz)", "<unknown>", 0, "<unknown>", "");
    int line = PyCode_Addr2Line(f->code, f->pc * 2);
    PyObject *key = Py_BuildValue("(Oi)", (PyObject *)f->code, line);
    if (!key)
        return NULL;
    PyObject *hit = PyDict_GetItemWithError(c->linecache, key);
    if (hit) {
        Py_DECREF(key);
        return Py_NewRef(hit);
    }
    if (PyErr_Occurred()) {
        Py_DECREF(key);
        return NULL;
    }
    if (!getline_fn) {
        PyObject *lc = PyImport_ImportModule("linecache");
        getline_fn = lc ? PyObject_GetAttrString(lc, "getline") : NULL;
        Py_XDECREF(lc);
    }
    PyObject *text = getline_fn ? PyObject_CallFunction(getline_fn, "Oi", f->code->co_filename, line) : NULL;
    PyObject *stripped = text ? PyObject_CallMethod(text, "strip", NULL) : NULL;
    Py_XDECREF(text);
    if (!stripped) {
        sj_err_clear();
        stripped = PyUnicode_FromString("");
    }
    PyObject *w = stripped ? Py_BuildValue("(OiON)", f->code->co_filename, line, f->code->co_qualname, stripped) : NULL;
    if (w && PyDict_SetItem(c->linecache, key, w) < 0)
        Py_CLEAR(w);
    Py_DECREF(key);
    return w;
}

/* -------------------------------------------------------------- failures ---- */

static PyObject *user_stack(Capture *c)
{
    PyObject *list = PyList_New(0);
    if (!list)
        return NULL;
    EvalFrame *saved = c->frame;
    for (EvalFrame *f = saved; f; f = f->parent) {
        if (f->trusted)
            continue;
        c->frame = f;
        PyObject *w = cap_where(c);
        if (!w || PyList_Insert(list, 0, w) < 0) {
            Py_XDECREF(w);
            c->frame = saved;
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(w);
    }
    c->frame = saved;
    return list;
}

PyObject *cap_user_stack(Capture *c)
{
    return user_stack(c);
}

static void set_failure(Capture *c, BreakReason r, PyObject *msg)
{
    if (c->reason != BR_NONE) {   /* keep the first, innermost reason */
        Py_XDECREF(msg);
        return;
    }
    c->reason = r;
    c->reason_msg = msg;
    c->fail_step = c->top_step;
    EvalFrame *top = c->frame;
    while (top && top->parent)
        top = top->parent;
    c->fail_pc = top ? top->pc : -1;
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    c->user_stack = user_stack(c);
    if (!c->user_stack)
        sj_err_clear();
    PyErr_Restore(et, ev, tb);
}

int cap_fail(Capture *c, BreakReason r, const char *fmt, ...)
{
    va_list va;
    va_start(va, fmt);
    PyObject *msg = PyUnicode_FromFormatV(fmt, va);
    va_end(va);
    if (!msg)
        sj_err_clear();
    set_failure(c, r, msg);
    return -1;
}

int cap_fail_exc(Capture *c, BreakReason r)
{
    if (sj_err_is_interrupt()) {
        /* an interrupt is no reason of the frame's: kept aside for the hook to raise;
         * the capture stops and its entry is dropped (compile_frame) */
        sj_err_clear();
        set_failure(c, BR_INTERNAL, PyUnicode_FromString("interrupted"));
        return -1;
    }
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyErr_NormalizeException(&et, &ev, &tb);
    if (et && sym_data_dependent_error && PyErr_GivenExceptionMatches(et, sym_data_dependent_error))
        r = BR_DATA_DEPENDENT;   /* a relation or size that needs an unbacked value */
    if (r == BR_USER_EXCEPTION && ev && c->reason == BR_NONE)
        Py_XSETREF(c->exc, Py_NewRef(ev));
    PyObject *msg =
        ev ? PyUnicode_FromFormat("%s: %S", Py_TYPE(ev)->tp_name, ev) : PyUnicode_FromString("unknown error");
    Py_XDECREF(et);
    Py_XDECREF(ev);
    Py_XDECREF(tb);
    if (!msg)
        sj_err_clear();
    set_failure(c, r, msg);
    return -1;
}

int cap_failed(const Capture *c)
{
    return c->reason != BR_NONE;
}

void cap_clear_failure(Capture *c)
{
    c->reason = BR_NONE;
    Py_CLEAR(c->reason_msg);
    Py_CLEAR(c->user_stack);
    Py_CLEAR(c->exc);
}

int cap_raise(Capture *c, PyObject *exc)
{
    PyObject *inst = PyExceptionClass_Check(exc) ? PyObject_CallNoArgs(exc) : Py_NewRef(exc);
    if (!inst)
        return cap_fail_exc(c, BR_USER_EXCEPTION);
    if (!PyExceptionInstance_Check(inst)) {
        Py_DECREF(inst);
        return cap_fail(c, BR_USER_EXCEPTION, "raise of a non-exception");
    }
    PyErr_SetObject((PyObject *)Py_TYPE(inst), inst);
    Py_DECREF(inst);
    return cap_fail_exc(c, BR_USER_EXCEPTION);
}

int cap_note_mutation(Capture *c, Var *v, const char *what)
{
    if (v->untracked)
        return cap_fail(c, BR_SIDE_EFFECT, "%s on %s from outside the frame reached without a source", what,
                        var_a(c, v));
    if (v->kind != VK_LIST && v->kind != VK_DICT)
        return cap_fail(c, BR_SIDE_EFFECT, "%s on %s from outside the frame", what, var_a(c, v));
    for (Mutated *m = c->mutated; m; m = m->next)
        if (m->v == v)
            return 0;
    Mutated *m = cap_alloc(c, sizeof(Mutated));
    if (!m)
        return -1;
    m->v = v;
    m->next = c->mutated;
    c->mutated = m;
    return 0;
}
