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

/* ----------------------------------------------------------- generators ---- */

/* Room for one more pointer in the arena array *arr of *n used out of *cap (doubled when
 * full, from `first`). 0, or -1 out of memory. */
static int grow_ptrs(Capture *c, void ***arr, int32_t n, int32_t *cap, int32_t first)
{
    if (n < *cap)
        return 0;
    int32_t ncap = *cap ? *cap * 2 : first;
    void **a = cap_alloc(c, sizeof(void *) * (size_t)ncap);
    if (!a)
        return -1;
    if (n)
        memcpy(a, *arr, sizeof(void *) * (size_t)n);
    *arr = a;
    *cap = ncap;
    return 0;
}

static int gen_touch_one(Capture *c, GenWatch *w, Var *v)
{
    if (grow_ptrs(c, (void ***)&w->touched, w->ntouched, &w->cap, 64) < 0)
        return -1;
    w->touched[w->ntouched++] = v;
    return 0;
}

int cap_gen_touch(Capture *c, Var *v)
{
    /* everything, the run's own values too: one it yields may be changed by the code
     * that takes it and read again by the generator's later items */
    for (int i = 0; i < c->ngen_runs; i++) {
        GenWatch *w = c->gen_runs[i];
        if (gen_touch_one(c, w, v) < 0)
            return -1;
        if (v->kind == VK_ITER) {
            if (v->u.iter.live && gen_touch_one(c, w, v->u.iter.live) < 0)
                return -1;
            /* a map or zip reads sources not listed here; a generator made before this
             * run read what its own watch lists (one made during it was merged in) */
            if (v->u.iter.lazy || (v->u.iter.watch && v->u.iter.watch->floor < w->floor))
                w->unknown = 1;
        }
    }
    return 0;
}

int cap_gen_begin(Capture *c)
{
    if (c->ngen_runs == (int)(sizeof c->gen_runs / sizeof c->gen_runs[0]))
        return cap_fail(c, BR_GENERATOR, "generators nested %d deep", c->ngen_runs);
    GenWatch *w = cap_alloc(c, sizeof(GenWatch));
    if (!w)
        return -1;
    memset(w, 0, sizeof *w);
    w->floor = c->serial;
    w->nops = c->nops;
    c->gen_runs[c->ngen_runs++] = w;
    return 0;
}

int cap_gen_end(Capture *c, Var *it)
{
    GenWatch *w = c->gen_runs[--c->ngen_runs];
    if (!it)
        return 0;
    w->computed = c->nops != w->nops;
    w->it = it;
    it->u.iter.watch = w;
    /* the pushes of this run were recorded in the enclosing runs too (cap_gen_touch) */
    if (grow_ptrs(c, (void ***)&c->watches, c->nwatches, &c->capwatches, 8) < 0)
        return -1;
    c->watches[c->nwatches++] = w;
    return 0;
}

int cap_note_change(Capture *c, const Var *t, int tensor)
{
    if (c->ngen_runs) {
        /* the run's own containers and objects may change; anything older, or from
         * outside (wrapped during the run, it is still not the run's), may not */
        GenWatch *run = c->gen_runs[c->ngen_runs - 1];
        if (tensor || !t || t->born < run->floor || var_is_outside(t))
            return cap_fail(c, BR_GENERATOR,
                            "a generator that changes %s outside itself (shapejit computes its items when it is "
                            "called, so the change would come before the code that reads them)",
                            tensor ? "a tensor in place"
                            : t    ? var_a(c, t)
                                   : "a variable");
    }
    for (int32_t i = 0; i < c->nwatches; i++) {
        GenWatch *w = c->watches[i];
        if (w->stale || w->it->u.iter.pos >= w->it->u.iter.n)
            continue;
        if (tensor ? w->computed : (w->unknown || !t))
            w->stale = 1;
        for (int32_t k = 0; !w->stale && t && k < w->ntouched; k++)
            w->stale = w->touched[k] == t;
    }
    return 0;
}

int cap_gen_check(Capture *c, const Var *it)
{
    if (it->u.iter.watch && it->u.iter.watch->stale)
        return cap_fail(c, BR_GENERATOR,
                        "a generator whose items are read after a value it read changed (shapejit computes a "
                        "generator's items when it is called)");
    return 0;
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
