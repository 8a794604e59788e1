/* Iterators during capture, and the builtins that consume them.
 *
 * A VK_ITER var is either materialised (u.iter.items from position u.iter.pos, or a live
 * list read at each step) or lazy (u.iter.lazy): map, filter, zip, enumerate and the
 * lazy itertools (count, repeat, islice, chain, accumulate) hold their source iterators
 * and produce one item per next(), calling user functions at that moment, as the
 * interpreter does. So an iterator is consumed exactly as far as eager code consumes it,
 * the calls made through it run in eager's order, and an unbounded one (count(),
 * repeat(x)) works as long as something bounds it (a zip, an islice, a break).
 *
 * Consumers that read everything (functools.reduce, sorted, min/max with key=, the
 * combinatoric itertools, which take their inputs whole in CPython too) are written here
 * over the same next(): they are the pure-Python behaviour of the builtin run over vars.
 *
 * An iterator that outlives the capture (returned, or on the stack at a graph break) is
 * rebuilt as the real iterator at its current state from its recipe (iter_recipe), or the
 * capture breaks when a part of it (a lambda made in the frame) cannot be rebuilt. */
#include "capture.h"
#include "../vocab/libs.h"
#include "sj_opcodes.h"
#include "../core/errors.h"

/* Iterators more than this long are not unrolled (an unbounded one never ends). */
#define ITER_MAX_ITEMS 100000

typedef enum {
    LZ_MAP,          /* fn(*next of each source); stops at the first exhausted source */
    LZ_FILTER,       /* items of its[0] whose fn(item) (or item, fn NULL) is true */
    LZ_ZIP,          /* tuples of the next of each source; strict checks equal lengths */
    LZ_ENUMERATE,    /* (value, item): value counts up from start */
    LZ_COUNT,        /* value, value + step, ... */
    LZ_REPEAT,       /* value, left times (left < 0: forever) */
    LZ_ISLICE,       /* items of its[0] at cnt == next, next += step, until stop */
    LZ_CHAIN,        /* items of value (the active iterator), then of the next iterable its[0] yields */
    LZ_ACCUMULATE,   /* running totals of its[0] under fn (NULL: +), from step (initial) if set */
    LZ_PAIRWISE,     /* (value, next): value is the item read last (NULL before the first) */
    LZ_STARMAP,      /* fn(*next of its[0]) */
    LZ_ZIP_LONGEST,  /* tuples of the next of each source, value filling the exhausted ones
                        (left: sources not exhausted yet) */
} LazyKind;

struct LazyIter {
    LazyKind kind;
    Var *fn;             /* map/filter/accumulate function, or NULL */
    Var **its;           /* source iterators (VK_ITER vars; arena), nits of them */
    int32_t nits;
    int strict;          /* zip(strict=True) */
    int dropped;         /* islice/chain/accumulate: the source is exhausted and let go, as
                            CPython clears it: every later next() is exhausted */
    Var *value;          /* count: the next value; repeat: the object; enumerate: the next
                            index; accumulate: the total (NULL before the first item);
                            chain: the active iterator (NULL between iterables) */
    Var *step;           /* count: the step; accumulate: the initial value still to yield */
    Py_ssize_t left;     /* repeat: times left, -1 forever */
    Py_ssize_t cnt, next, stop, istep;   /* islice: items read so far, index of the next
                                            item to yield, stop (-1: none), step */
};

/* ------------------------------------------------------------ Python objects ---- */

static struct {
    PyObject *map, *filter, *zip, *enumerate, *iter, *reversed, *sorted, *min, *max;   /* builtins */
    PyObject *reduce, *prod;                                             /* functools, math */
    PyObject *count, *repeat, *islice, *chain, *accumulate, *product, *combinations, *permutations,
        *combinations_with_replacement, *pairwise, *starmap, *zip_longest;  /* itertools */
} py;   /* all strong, loaded once, never released */

static int py_init(void)
{
    if (py.map)
        return 0;
    PyObject *b = PyImport_ImportModule("builtins");
    PyObject *ft = b ? PyImport_ImportModule("functools") : NULL;
    PyObject *it = ft ? PyImport_ImportModule("itertools") : NULL;
    PyObject *m = it ? PyImport_ImportModule("math") : NULL;
    int ok = m != NULL;
#define LOAD(field, mod, name) \
    if (ok && !(py.field = PyObject_GetAttrString(mod, name))) \
    ok = 0
    LOAD(filter, b, "filter");
    LOAD(zip, b, "zip");
    LOAD(enumerate, b, "enumerate");
    LOAD(iter, b, "iter");
    LOAD(reversed, b, "reversed");
    LOAD(sorted, b, "sorted");
    LOAD(min, b, "min");
    LOAD(max, b, "max");
    LOAD(reduce, ft, "reduce");
    LOAD(prod, m, "prod");
    LOAD(count, it, "count");
    LOAD(repeat, it, "repeat");
    LOAD(islice, it, "islice");
    LOAD(chain, it, "chain");
    LOAD(accumulate, it, "accumulate");
    LOAD(product, it, "product");
    LOAD(combinations, it, "combinations");
    LOAD(permutations, it, "permutations");
    LOAD(combinations_with_replacement, it, "combinations_with_replacement");
    LOAD(pairwise, it, "pairwise");
    LOAD(starmap, it, "starmap");
    LOAD(zip_longest, it, "zip_longest");
    LOAD(map, b, "map");   /* last: py.map set means everything is loaded */
#undef LOAD
    Py_XDECREF(b);
    Py_XDECREF(ft);
    Py_XDECREF(it);
    Py_XDECREF(m);
    return ok ? 0 : -1;
}

/* ------------------------------------------------------------------ helpers ---- */

static Var *new_iter(Capture *c, Var **items, int32_t n)
{
    Var *it = var_new(c, VK_ITER);
    if (it) {
        it->u.iter.items = items;
        it->u.iter.n = n;
    }
    return it;
}

static LazyIter *new_lazy(Capture *c, Var **out, LazyKind k, int32_t nits)
{
    LazyIter *z = cap_alloc(c, sizeof(LazyIter));
    Var *it = z ? var_new(c, VK_ITER) : NULL;
    if (!it || !(z->its = cap_alloc(c, sizeof(Var *) * (size_t)(nits + 1))))
        return NULL;
    z->kind = k;
    z->nits = nits;
    z->left = -1;
    z->stop = -1;
    it->u.iter.lazy = z;
    *out = it;
    return z;
}

/* Raise exc_type(msg) in the captured program (a handler in it may catch it). -1. */
static int raise_msg(Capture *c, PyObject *exc_type, const char *fmt, ...)
{
    va_list va;
    va_start(va, fmt);
    PyObject *msg = PyUnicode_FromFormatV(fmt, va);
    va_end(va);
    PyObject *e = msg ? PyObject_CallOneArg(exc_type, msg) : NULL;
    Py_XDECREF(msg);
    if (!e)
        return cap_fail_exc(c, BR_INTERNAL);
    cap_raise(c, e);
    Py_DECREF(e);
    return -1;
}

static int is_none(const Var *v)
{
    return !v || (v->kind == VK_CONST && v->obj == Py_None);
}

static Var *const_ssize(Capture *c, Py_ssize_t n)
{
    return var_const_steal(c, PyLong_FromSsize_t(n));
}

/* args[i] as a Py_ssize_t constant (None gives dflt). 0, or -1 with the failure set. */
static int ssize_arg(Capture *c, Var *v, Py_ssize_t dflt, Py_ssize_t *out, const char *what)
{
    if (v->kind == VK_CONST && v->obj == Py_None) {
        *out = dflt;
        return 0;
    }
    /* anything but an int: the interpreter raises eager's error */
    PyObject *o = v->kind == VK_SYMINT || (v->kind == VK_CONST && PyLong_Check(v->obj)) ? var_to_py(c, v) : NULL;
    if (!o)
        return cap_failed(c) ? -1 : cap_fail(c, BR_UNSUPPORTED_CALL, "%s that is not a constant int", what);
    Py_ssize_t n = PyNumber_AsSsize_t(o, PyExc_OverflowError);
    Py_DECREF(o);
    if (n == -1 && PyErr_Occurred())
        return cap_fail_exc(c, BR_USER_EXCEPTION);
    *out = n;
    return 0;
}

/* An argument of islice(): None gives dflt; else an int in [0, sys.maxsize] (is_stop: 0
 * start, 1 stop, 2 step, which must be positive), eager's ValueError otherwise. 0, or -1
 * with the failure set. */
static int islice_arg(Capture *c, Var *v, Py_ssize_t dflt, Py_ssize_t *out, int is_stop)
{
    if (is_none(v)) {
        *out = dflt;
        return 0;
    }
    PyObject *o = v->kind == VK_SYMINT || v->kind == VK_CONST ? var_to_py(c, v) : NULL;
    if (!o)
        return cap_failed(c) ? -1
                             : cap_fail(c, BR_UNSUPPORTED_CALL, "islice() with an argument that is not a constant");
    Py_ssize_t n = PyLong_Check(o) ? PyLong_AsSsize_t(o) : -1;
    Py_DECREF(o);
    if (n == -1 && PyErr_Occurred())
        sj_err_clear();   /* too big: refused below, as eager refuses it */
    if (n < 0 || (is_stop == 2 && n == 0))
        return raise_msg(c, PyExc_ValueError, "%s",
                         is_stop == 1 ? "Stop argument for islice() must be None or an integer: 0 <= x <= sys.maxsize."
                         : is_stop == 2 ? "Step for islice() must be a positive integer or None."
                                        : "Indices for islice() must be None or an integer: 0 <= x <= sys.maxsize.");
    *out = n;
    return 0;
}

/* 1 when every keyword in kwnames is among names (NULL-terminated), else 0. */
static int kw_only(PyObject *kwnames, const char *const *names)
{
    int32_t nkw = kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0;
    for (int32_t i = 0; i < nkw; i++) {
        int ok = 0;
        for (const char *const *n = names; *n && !ok; n++)
            ok = PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, i), *n) == 0;
        if (!ok)
            return 0;
    }
    return 1;
}

/* ------------------------------------------------------------ get and next ---- */

Var *iter_get(Capture *c, Var *v)
{
    if (v->kind == VK_ITER)
        return v;   /* iter(it) is it */
    Var **items;
    int32_t cnt;
    if (op_iterate(c, v, &items, &cnt) < 0)
        return NULL;
    Var *it = new_iter(c, items, cnt);
    if (!it)
        return NULL;
    if (v->kind == VK_LIST || v->kind == VK_DICT || v->kind == VK_DICTVIEW) {
        /* what the loop body does to the container shows in the iteration */
        it->u.iter.live = v->kind == VK_DICTVIEW ? v->u.dview.dict : v;
        it->u.iter.used = v->kind == VK_LIST ? 0 : it->u.iter.live->u.dict.n;
        if (v->kind == VK_DICT) {
            /* the keys as they are now: dict writes may move the dict's arrays */
            Var **keys = cap_alloc(c, sizeof(Var *) * (size_t)(cnt + 1));
            if (!keys)
                return NULL;
            memcpy(keys, items, sizeof(Var *) * (size_t)cnt);
            it->u.iter.items = keys;
        }
    }
    return it;
}

static int lazy_next(Capture *c, LazyIter *z, Var **out);

int iter_next(Capture *c, Var *it, Var **out)
{
    if (it->kind != VK_ITER)
        return cap_fail(c, BR_INTERNAL, "next() on %s", var_a(c, it));
    if (it->u.iter.pos < it->u.iter.n && cap_gen_check(c, it) < 0)
        return -1;
    if (it->u.iter.lazy)
        return lazy_next(c, it->u.iter.lazy, out);
    Var *live = it->u.iter.live;
    if (live && live->kind == VK_LIST) {
        /* a list iterator is an index into the list as it is */
        it->u.iter.items = live->u.seq.items;
        it->u.iter.n = live->u.seq.n;
    } else if (live && live->u.dict.n != it->u.iter.used) {
        PyErr_SetString(PyExc_RuntimeError, "dictionary changed size during iteration");
        return cap_fail_exc(c, BR_USER_EXCEPTION);
    }
    if (it->u.iter.pos < it->u.iter.n) {
        *out = it->u.iter.items[it->u.iter.pos++];
        return 1;
    }
    return 0;
}

int iter_drain(Capture *c, Var *it, Var ***items, int32_t *n)
{
    if (!it->u.iter.lazy && !it->u.iter.live) {
        if (it->u.iter.pos < it->u.iter.n && cap_gen_check(c, it) < 0)
            return -1;
        *items = it->u.iter.items + it->u.iter.pos;
        *n = it->u.iter.n - it->u.iter.pos;
        it->u.iter.pos = it->u.iter.n;
        return 0;
    }
    Var *acc = var_seq(c, VK_LIST, NULL, 0);
    if (!acc)
        return -1;
    for (;;) {
        Var *x;
        int r = iter_next(c, it, &x);
        if (r < 0)
            return -1;
        if (!r)
            break;
        if (acc->u.seq.n >= ITER_MAX_ITEMS)
            return cap_fail(c, BR_UNSUPPORTED_VALUE, "an iterator of more than %d items (unbounded?)", ITER_MAX_ITEMS);
        if (var_seq_append(c, acc, x) < 0)
            return -1;
    }
    *items = acc->u.seq.items;
    *n = acc->u.seq.n;
    return 0;
}

int iter_is_lazy(const Var *it)
{
    return it->kind == VK_ITER && (it->u.iter.lazy || it->u.iter.live || it->u.iter.watch);
}

int iter_each(Capture *c, Var *it, int (*add)(Capture *c, void *ctx, Var *item), void *ctx)
{
    for (int32_t k = 0;; k++) {
        Var *x;
        int r = iter_next(c, it, &x);
        if (r <= 0)
            return r;
        if (k >= ITER_MAX_ITEMS)
            return cap_fail(c, BR_UNSUPPORTED_VALUE, "an iterator of more than %d items (unbounded?)", ITER_MAX_ITEMS);
        if (add(c, ctx, x) < 0)
            return -1;
    }
}

static int zip_strict_error(Capture *c, int32_t i, int longer)
{
    if (i == 1)
        return raise_msg(c, PyExc_ValueError, "zip() argument 2 is %s than argument 1", longer ? "longer" : "shorter");
    return raise_msg(c, PyExc_ValueError, "zip() argument %d is %s than arguments 1-%d", (int)(i + 1),
                     longer ? "longer" : "shorter", (int)i);
}

static int lazy_next(Capture *c, LazyIter *z, Var **out)
{
    int r;
    Var *x;
    switch (z->kind) {
    case LZ_MAP: {
        Var **a = cap_alloc(c, sizeof(Var *) * (size_t)(z->nits + 1));
        if (!a)
            return -1;
        for (int32_t i = 0; i < z->nits; i++)
            if ((r = iter_next(c, z->its[i], &a[i])) <= 0)
                return r;
        *out = call_var(c, z->fn, a, z->nits, NULL);
        return *out ? 1 : -1;
    }
    case LZ_FILTER:
        for (;;) {
            if ((r = iter_next(c, z->its[0], &x)) <= 0)
                return r;
            Var *t = x;
            if (!is_none(z->fn) && !(t = call_var(c, z->fn, &x, 1, NULL)))
                return -1;
            int truth;
            if (op_truth(c, t, &truth) < 0)
                return -1;
            if (truth) {
                *out = x;
                return 1;
            }
        }
    case LZ_ZIP: {
        if (z->nits == 0)
            return 0;
        Var **row = cap_alloc(c, sizeof(Var *) * (size_t)(z->nits + 1));
        if (!row)
            return -1;
        for (int32_t i = 0; i < z->nits; i++) {
            if ((r = iter_next(c, z->its[i], &row[i])) < 0)
                return -1;
            if (r)
                continue;
            if (!z->strict)
                return 0;
            if (i > 0)
                return zip_strict_error(c, i, 0);
            for (int32_t j = 1; j < z->nits; j++) {
                if ((r = iter_next(c, z->its[j], &x)) < 0)
                    return -1;
                if (r)
                    return zip_strict_error(c, j, 1);
            }
            return 0;
        }
        *out = var_seq(c, VK_TUPLE, row, z->nits);
        return *out ? 1 : -1;
    }
    case LZ_ENUMERATE: {
        if ((r = iter_next(c, z->its[0], &x)) <= 0)
            return r;
        Var *k = z->value;
        Var *one = const_ssize(c, 1);
        if (!one || !(z->value = op_binary(c, SJ_NB_ADD, k, one)))
            return -1;
        *out = var_seq(c, VK_TUPLE, (Var *[]){k, x}, 2);
        return *out ? 1 : -1;
    }
    case LZ_COUNT:
        *out = z->value;
        return (z->value = op_binary(c, SJ_NB_ADD, z->value, z->step)) ? 1 : -1;
    case LZ_REPEAT:
        if (z->left == 0)
            return 0;
        if (z->left > 0)
            z->left--;
        *out = z->value;
        return 1;
    case LZ_ISLICE:
        if (z->dropped || (z->stop >= 0 && z->cnt >= z->stop))
            return 0;
        while (z->cnt < z->next) {
            if ((r = iter_next(c, z->its[0], &x)) < 0)
                return -1;
            if (!r) {
                z->dropped = 1;
                return 0;
            }
            z->cnt++;
        }
        if (z->stop >= 0 && z->cnt >= z->stop)
            return 0;
        if ((r = iter_next(c, z->its[0], out)) < 0)
            return -1;
        if (!r) {
            z->dropped = 1;
            return 0;
        }
        z->cnt++;
        z->next += z->istep;
        if (z->stop >= 0 && z->next > z->stop)
            z->next = z->stop;
        return 1;
    case LZ_CHAIN:
        while (!z->dropped) {
            if (!z->value) {
                Var *iterable;
                if ((r = iter_next(c, z->its[0], &iterable)) < 0)
                    return -1;
                if (!r) {
                    z->dropped = 1;
                    return 0;
                }
                if (!(z->value = iter_get(c, iterable)))
                    return -1;
            }
            if ((r = iter_next(c, z->value, out)) != 0)
                return r;
            z->value = NULL;
        }
        return 0;
    case LZ_ACCUMULATE:
        if (z->step) {
            *out = z->value = z->step;
            z->step = NULL;
            return 1;
        }
        if (z->dropped)
            return 0;
        if ((r = iter_next(c, z->its[0], &x)) < 0)
            return -1;
        if (!r) {
            z->dropped = 1;
            return 0;
        }
        if (!z->value)
            z->value = x;
        else if (is_none(z->fn))
            z->value = op_binary(c, SJ_NB_ADD, z->value, x);
        else
            z->value = call_var(c, z->fn, (Var *[]){z->value, x}, 2, NULL);
        *out = z->value;
        return z->value ? 1 : -1;
    case LZ_PAIRWISE: {
        if (z->dropped)
            return 0;
        if (!z->value) {
            if ((r = iter_next(c, z->its[0], &z->value)) <= 0) {
                z->dropped = r == 0;
                return r;
            }
        }
        if ((r = iter_next(c, z->its[0], &x)) <= 0) {
            z->dropped = r == 0;
            return r;
        }
        *out = var_seq(c, VK_TUPLE, (Var *[]){z->value, x}, 2);
        z->value = x;
        return *out ? 1 : -1;
    }
    case LZ_STARMAP: {
        if ((r = iter_next(c, z->its[0], &x)) <= 0)
            return r;
        Var **a;
        int32_t na;
        if (op_iterate(c, x, &a, &na) < 0)
            return -1;
        *out = call_var(c, z->fn, a, na, NULL);
        return *out ? 1 : -1;
    }
    case LZ_ZIP_LONGEST: {
        if (z->nits == 0 || z->left == 0)
            return 0;
        Var **row = cap_alloc(c, sizeof(Var *) * (size_t)(z->nits + 1));
        if (!row)
            return -1;
        for (int32_t i = 0; i < z->nits; i++) {
            if (!z->its[i]) {   /* exhausted before: the fill value */
                row[i] = z->value;
                continue;
            }
            if ((r = iter_next(c, z->its[i], &row[i])) < 0)
                return -1;
            if (r)
                continue;
            if (--z->left == 0)
                return 0;
            z->its[i] = NULL;
            row[i] = z->value;
        }
        *out = var_seq(c, VK_TUPLE, row, z->nits);
        return *out ? 1 : -1;
    }
    }
    return cap_fail(c, BR_INTERNAL, "unknown lazy iterator");
}

/* ------------------------------------------------------------------ recipes ---- */

int iter_recipe(Capture *c, Var *it, PyObject **fn, Var ***args, int32_t *nargs, PyObject **kwnames, Var **state)
{
    if (py_init() < 0)
        return cap_fail_exc(c, BR_INTERNAL);
    *kwnames = NULL;
    *state = NULL;
    LazyIter *z = it->u.iter.lazy;
    Var **a = cap_alloc(c, sizeof(Var *) * (size_t)((z ? z->nits : 0) + 4));
    if (!a)
        return -1;
    *args = a;
    if (!z) {
        /* a materialised iterator: what is left of it, as a tuple iterator */
        Var *rest = var_seq(c, VK_TUPLE, it->u.iter.items + it->u.iter.pos, it->u.iter.n - it->u.iter.pos);
        if (!rest)
            return -1;
        *fn = py.iter;
        a[0] = rest;
        *nargs = 1;
        return 0;
    }
    int32_t n = 0;
    switch (z->kind) {
    case LZ_MAP:
        *fn = py.map;
        a[n++] = z->fn;
        for (int32_t i = 0; i < z->nits; i++)
            a[n++] = z->its[i];
        break;
    case LZ_FILTER:
        *fn = py.filter;
        if (!(a[n++] = z->fn ? z->fn : var_const(c, Py_None)))
            return -1;
        a[n++] = z->its[0];
        break;
    case LZ_ZIP:
        *fn = py.zip;
        for (int32_t i = 0; i < z->nits; i++)
            a[n++] = z->its[i];
        if (z->strict) {
            if (!(a[n++] = var_const(c, Py_True)) || !(*kwnames = cap_keep_steal(c, Py_BuildValue("(s)", "strict"))))
                return -1;
        }
        break;
    case LZ_ENUMERATE:
        *fn = py.enumerate;
        a[n++] = z->its[0];
        a[n++] = z->value;
        break;
    case LZ_COUNT:
        *fn = py.count;
        a[n++] = z->value;
        a[n++] = z->step;
        break;
    case LZ_REPEAT:
        *fn = py.repeat;
        a[n++] = z->value;
        if (z->left >= 0 && !(a[n++] = const_ssize(c, z->left)))
            return -1;
        break;
    case LZ_ISLICE:
        *fn = py.islice;
        if (z->dropped) {   /* exhausted: an empty islice */
            Var *e = var_seq(c, VK_TUPLE, NULL, 0);
            if (!e || !(a[n++] = e) || !(a[n++] = const_ssize(c, 0)))
                return -1;
            break;
        }
        /* the same slice, counted from where the source is now */
        a[n++] = z->its[0];
        if (!(a[n++] = const_ssize(c, z->next - z->cnt)))
            return -1;
        if (!(a[n++] = z->stop >= 0 ? const_ssize(c, z->stop - z->cnt) : var_const(c, Py_None)))
            return -1;
        if (!(a[n++] = const_ssize(c, z->istep)))
            return -1;
        break;
    case LZ_CHAIN: {
        PyObject *fi = PyObject_GetAttrString(py.chain, "from_iterable");
        if (!fi || !cap_keep_steal(c, fi))
            return cap_fail_exc(c, BR_INTERNAL);
        *fn = fi;
        Var *outer = z->dropped ? var_seq(c, VK_TUPLE, NULL, 0) : z->its[0];
        if (!outer)
            return -1;
        if (!z->value) {   /* between iterables: chain.from_iterable(the rest) */
            a[n++] = outer;
            break;
        }
        /* chain.from_iterable(chain([active], the rest)): the inner chain is a lazy
         * iterator var too, planned by its own recipe */
        Var *head = var_seq(c, VK_LIST, &z->value, 1), *inner;
        Var *pair = head ? var_seq(c, VK_TUPLE, (Var *[]){head, outer}, 2) : NULL;
        LazyIter *zi = pair ? new_lazy(c, &inner, LZ_CHAIN, 1) : NULL;
        if (!zi || !(zi->its[0] = iter_get(c, pair)))
            return -1;
        a[n++] = inner;
        break;
    }
    case LZ_PAIRWISE:
        /* the item read last goes in front again: pairwise(chain([last], src)) */
        *fn = py.pairwise;
        if (z->dropped) {
            if (!(a[n++] = var_seq(c, VK_TUPLE, NULL, 0)))
                return -1;
        } else if (z->value) {
            Var *head = var_seq(c, VK_LIST, &z->value, 1), *ch;
            LazyIter *zc = head ? new_lazy(c, &ch, LZ_CHAIN, 1) : NULL;
            Var *pair = zc ? var_seq(c, VK_TUPLE, (Var *[]){head, z->its[0]}, 2) : NULL;
            if (!pair || !(zc->its[0] = iter_get(c, pair)))
                return -1;
            a[n++] = ch;
        } else {
            a[n++] = z->its[0];
        }
        break;
    case LZ_STARMAP:
        *fn = py.starmap;
        a[n++] = z->fn;
        a[n++] = z->its[0];
        break;
    case LZ_ZIP_LONGEST:
        /* the exhausted sources stay exhausted (an empty tuple's iterator): fill values */
        *fn = py.zip_longest;
        for (int32_t i = 0; i < z->nits; i++)
            if (!(a[n++] = z->its[i] && z->left ? z->its[i] : var_seq(c, VK_TUPLE, NULL, 0)))
                return -1;
        a[n++] = z->value;
        if (!(*kwnames = cap_keep_steal(c, Py_BuildValue("(s)", "fillvalue"))))
            return -1;
        break;
    case LZ_ACCUMULATE: {
        /* accumulate(src, fn[, initial=...]); once started, its total is restored with
         * __setstate__ (how itertools objects are unpickled) */
        *fn = py.accumulate;
        a[n++] = z->dropped ? var_seq(c, VK_TUPLE, NULL, 0) : z->its[0];
        if (!a[0])
            return -1;
        if (!is_none(z->fn))
            a[n++] = z->fn;
        if (z->step) {
            a[n++] = z->step;
            if (!(*kwnames = cap_keep_steal(c, Py_BuildValue("(s)", "initial"))))
                return -1;
        } else if (z->value) {
            *state = z->value;
        }
        break;
    }
    }
    *nargs = n;
    return 0;
}

/* --------------------------------------------------------------- consumers ---- */

/* Python values of keys (constants, sizes, tuples of them), for an ordering computed by
 * the real builtin: a new list, or NULL with the failure set (data-dependent order). */
static PyObject *keys_to_py(Capture *c, Var **keys, int32_t n, const char *what)
{
    PyObject *l = PyList_New(n);
    for (int32_t i = 0; l && i < n; i++) {
        Var *k = keys[i];
        if (k->kind == VK_TENSOR) {
            Py_DECREF(l);
            cap_fail(c, BR_DATA_DEPENDENT, "%s compares %s values (their data)", what,
                     k->u.t.meta.lib == LIB_NUMPY ? "numpy array" : "tensor");
            return NULL;
        }
        PyObject *o = var_to_py(c, k);
        if (!o) {
            Py_DECREF(l);
            if (!cap_failed(c))
                cap_fail_exc(c, BR_UNSUPPORTED_VALUE);
            return NULL;
        }
        PyList_SET_ITEM(l, i, o);
    }
    if (!l)
        cap_fail_exc(c, BR_INTERNAL);
    return l;
}

/* The key of each item (items themselves when key is None), in order. */
static Var **keys_of(Capture *c, Var *key, Var **items, int32_t n)
{
    if (is_none(key))
        return items;
    Var **keys = cap_alloc(c, sizeof(Var *) * (size_t)(n + 1));
    for (int32_t i = 0; keys && i < n; i++)
        if (!(keys[i] = call_var(c, key, &items[i], 1, NULL)))
            return NULL;
    return keys;
}

/* The order sorted() gives items (stable, reverse kept stable): *perm (arena) holds the
 * item indices. 0, or -1 with the failure set. */
static int sort_order(Capture *c, Var **items, int32_t n, Var *key, Var *reverse, int32_t **perm)
{
    Var **keys = keys_of(c, key, items, n);
    if (!keys)
        return -1;
    PyObject *kl = keys_to_py(c, keys, n, "sorted()");
    if (!kl)
        return -1;
    PyObject *getter = PyObject_GetAttrString(kl, "__getitem__");
    PyObject *rng = getter ? PyObject_CallFunction((PyObject *)&PyRange_Type, "i", (int)n) : NULL;
    PyObject *rev = rng ? var_to_py(c, reverse) : NULL;
    PyObject *kw = rev ? Py_BuildValue("{sOsO}", "key", getter, "reverse", rev) : NULL;
    PyObject *targs = kw ? PyTuple_Pack(1, rng) : NULL;
    PyObject *order = targs ? PyObject_Call(py.sorted, targs, kw) : NULL;
    Py_XDECREF(targs);
    Py_XDECREF(kw);
    Py_XDECREF(rev);
    Py_XDECREF(rng);
    Py_XDECREF(getter);
    Py_DECREF(kl);
    if (!order)
        return cap_failed(c) ? -1 : cap_fail_exc(c, BR_USER_EXCEPTION);
    *perm = cap_alloc(c, sizeof(int32_t) * (size_t)(n + 1));
    for (int32_t i = 0; *perm && i < n; i++)
        (*perm)[i] = (int32_t)PyLong_AsLong(PyList_GET_ITEM(order, i));
    Py_DECREF(order);
    return *perm ? 0 : -1;
}

static Var *iters_sorted(Capture *c, Var **args, int32_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"key", "reverse", NULL};
    int32_t nkw = kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0;
    if (nargs - nkw != 1 || !kw_only(kwnames, names)) {
        PyErr_SetString(PyExc_TypeError, "sorted expected 1 argument and keywords key, reverse");
        cap_fail_exc(c, BR_USER_EXCEPTION);
        return NULL;
    }
    Var *rev = cap_arg(args, nargs, kwnames, -1, "reverse");
    if (!rev && !(rev = var_const(c, Py_False)))
        return NULL;
    Var *it = iter_get(c, args[0]);
    Var **items;
    int32_t n, *perm;
    if (!it || iter_drain(c, it, &items, &n) < 0 ||
        sort_order(c, items, n, cap_arg(args, nargs, kwnames, -1, "key"), rev, &perm) < 0)
        return NULL;
    Var **out = cap_alloc(c, sizeof(Var *) * (size_t)(n + 1));
    for (int32_t i = 0; out && i < n; i++)
        out[i] = items[perm[i]];
    return out ? var_seq(c, VK_LIST, out, n) : NULL;
}

Var *iters_list_sort(Capture *c, Var *list, Var **args, int32_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"key", "reverse", NULL};
    int32_t nkw = kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0;
    if (py_init() < 0) {
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    if (nargs != nkw || !kw_only(kwnames, names)) {
        PyErr_SetString(PyExc_TypeError, "sort() takes no positional arguments");
        cap_fail_exc(c, BR_USER_EXCEPTION);
        return NULL;
    }
    Var *rev = cap_arg(args, nargs, kwnames, -1, "reverse");
    if (!rev && !(rev = var_const(c, Py_False)))
        return NULL;
    int32_t n = list->u.seq.n, *perm;
    Var **items = cap_alloc(c, sizeof(Var *) * (size_t)(n + 1));
    if (!items)
        return NULL;
    memcpy(items, list->u.seq.items, sizeof(Var *) * (size_t)n);
    if (sort_order(c, items, n, cap_arg(args, nargs, kwnames, -1, "key"), rev, &perm) < 0)
        return NULL;
    if (list->u.seq.n != n) {
        PyErr_SetString(PyExc_ValueError, "list modified during sort");
        cap_fail_exc(c, BR_USER_EXCEPTION);
        return NULL;
    }
    for (int32_t i = 0; i < n; i++)
        list->u.seq.items[i] = items[perm[i]];
    return var_const(c, Py_None);
}

static int torch_row(const char *path)
{
    for (int i = 0; i < callable_nrows; i++)
        if (callable_rows[i].kind == CK_TORCH && strcmp(callable_rows[i].path, path) == 0)
            return i;
    return -1;
}

/* min()/max(): over constants and sizes by the real builtin (sizes alone: a symbolic
 * min/max); over 0-d torch tensors of one dtype as torch.minimum/maximum, as torch.compile
 * does (eager gives the same value, as a new tensor rather than one of the arguments, and
 * a NaN wins where eager's comparison would skip it); otherwise the order depends on data:
 * a graph break. */
static Var *iters_minmax(Capture *c, int is_max, Var **args, int32_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"key", "default", NULL};
    const char *nm = is_max ? "max" : "min";
    int32_t nkw = kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0, npos = nargs - nkw;
    if (npos < 1 || !kw_only(kwnames, names)) {
        if (npos < 1)
            raise_msg(c, PyExc_TypeError, "%s expected at least 1 argument, got 0", nm);
        else
            raise_msg(c, PyExc_TypeError, "%s() got an unexpected keyword argument", nm);
        return NULL;
    }
    Var *key = cap_arg(args, nargs, kwnames, -1, "key"), *dflt = cap_arg(args, nargs, kwnames, -1, "default");
    Var **items = args;
    int32_t n = npos;
    if (npos == 1) {
        Var *it = iter_get(c, args[0]);
        if (!it || iter_drain(c, it, &items, &n) < 0)
            return NULL;
    } else if (dflt) {
        raise_msg(c, PyExc_TypeError, "Cannot specify a default for %s() with multiple positional arguments", nm);
        return NULL;
    }
    if (n == 0) {
        if (dflt)
            return dflt;
        raise_msg(c, PyExc_ValueError, "%s() arg is an empty sequence", nm);
        return NULL;
    }
    if (is_none(key) && items[0]->kind == VK_TENSOR && items[0]->u.t.meta.lib == LIB_TORCH) {
        const TensorMeta *m0 = &items[0]->u.t.meta;
        int ok = 1;
        for (int32_t i = 0; ok && i < n; i++) {
            const TensorMeta *m = &items[i]->u.t.meta;
            ok = items[i]->kind == VK_TENSOR && m->lib == LIB_TORCH && m->dtype == m0->dtype && m->ndim == m0->ndim &&
                 m->ndim == 0;
        }
        int row = ok ? torch_row(is_max ? "torch.maximum" : "torch.minimum") : -1;
        if (row >= 0) {
            Var *acc = items[0];
            for (int32_t i = 1; acc && i < n; i++)
                acc = op_record(c, row, (Var *[]){acc, items[i]}, 2, NULL);
            return acc;
        }
    }
    if (is_none(key)) {
        /* sizes (symbolic ints among ints): a symbolic min/max, as torch's sym_max, so the
         * sizes are not specialised */
        int nsym = 0, ints = 1;
        for (int32_t i = 0; ints && i < n; i++) {
            nsym += items[i]->kind == VK_SYMINT;
            ints = items[i]->kind == VK_SYMINT || (items[i]->kind == VK_CONST && PyLong_CheckExact(items[i]->obj));
        }
        if (ints && nsym) {
            SymNode **nodes = cap_alloc(c, sizeof(SymNode *) * (size_t)(n + 1));
            if (!nodes || symb_ensure(c) < 0)
                return NULL;
            for (int32_t i = 0; i < n; i++)
                if (!(nodes[i] = symb_node_of(c, items[i])))
                    return cap_failed(c) ? NULL : (cap_fail_exc(c, BR_INTERNAL), NULL);
            SymNode *e = is_max ? sym_max_n(c->env, nodes, (uint32_t)n) : sym_min_n(c->env, nodes, (uint32_t)n);
            if (!e) {
                cap_fail_exc(c, BR_INTERNAL);
                return NULL;
            }
            return symb_var(c, e);
        }
    }
    Var **keys = keys_of(c, key, items, n);
    if (!keys)
        return NULL;
    PyObject *kl = keys_to_py(c, keys, n, is_max ? "max()" : "min()");
    if (!kl)
        return NULL;
    PyObject *getter = PyObject_GetAttrString(kl, "__getitem__");
    PyObject *rng = getter ? PyObject_CallFunction((PyObject *)&PyRange_Type, "i", (int)n) : NULL;
    PyObject *kw = rng ? Py_BuildValue("{sO}", "key", getter) : NULL;
    PyObject *targs = kw ? PyTuple_Pack(1, rng) : NULL;
    PyObject *best = targs ? PyObject_Call(is_max ? py.max : py.min, targs, kw) : NULL;
    Py_XDECREF(targs);
    Py_XDECREF(kw);
    Py_XDECREF(rng);
    Py_XDECREF(getter);
    Py_DECREF(kl);
    if (!best) {
        cap_fail_exc(c, BR_USER_EXCEPTION);
        return NULL;
    }
    long i = PyLong_AsLong(best);
    Py_DECREF(best);
    if (!is_none(key))
        return items[i];
    return items[i];
}

/* functools.reduce(fn, iterable[, initial]), as its pure-Python definition. */
static Var *iters_reduce(Capture *c, Var **args, int32_t nargs, PyObject *kwnames)
{
    if (kwnames && PyTuple_GET_SIZE(kwnames)) {
        raise_msg(c, PyExc_TypeError, "reduce() takes no keyword arguments");
        return NULL;
    }
    if (nargs < 2 || nargs > 3) {
        raise_msg(c, PyExc_TypeError, "reduce expected at least 2 arguments, got %d", (int)nargs);
        return NULL;
    }
    Var *it = iter_get(c, args[1]);
    if (!it)
        return NULL;
    Var *acc = nargs == 3 ? args[2] : NULL;
    for (int32_t k = 0;; k++) {
        Var *x;
        int r = iter_next(c, it, &x);
        if (r < 0)
            return NULL;
        if (!r)
            break;
        if (k >= ITER_MAX_ITEMS) {
            cap_fail(c, BR_UNSUPPORTED_VALUE, "reduce() over more than %d items", ITER_MAX_ITEMS);
            return NULL;
        }
        acc = acc ? call_var(c, args[0], (Var *[]){acc, x}, 2, NULL) : x;
        if (!acc)
            return NULL;
    }
    if (!acc)
        raise_msg(c, PyExc_TypeError, "reduce() of empty iterable with no initial value");
    return acc;
}

/* math.prod(iterable, *, start=1): start * item * ... as Python's operators give it, so a
 * product of symbolic sizes stays symbolic. */
static Var *iters_prod(Capture *c, Var **args, int32_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"start", NULL};
    int32_t nkw = kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0;
    if (nargs - nkw != 1 || !kw_only(kwnames, names)) {
        raise_msg(c, PyExc_TypeError, "prod() takes exactly 1 positional argument and the keyword start");
        return NULL;
    }
    Var *acc = cap_arg(args, nargs, kwnames, -1, "start");
    Var *it = (acc || (acc = const_ssize(c, 1))) ? iter_get(c, args[0]) : NULL;
    if (!it)
        return NULL;
    for (int32_t k = 0;; k++) {
        Var *x;
        int r = iter_next(c, it, &x);
        if (r <= 0)
            return r < 0 ? NULL : acc;
        if (k >= ITER_MAX_ITEMS) {
            cap_fail(c, BR_UNSUPPORTED_VALUE, "math.prod() over more than %d items", ITER_MAX_ITEMS);
            return NULL;
        }
        if (!(acc = op_binary(c, SJ_NB_MULTIPLY, acc, x)))
            return NULL;
    }
}

/* product / combinations / permutations take their inputs whole (as CPython does) and
 * are finite: the index tuples come from the real function over ranges. */
static Var *iters_combinatoric(Capture *c, PyObject *fn, Var **args, int32_t nargs, PyObject *kwnames)
{
    int32_t nkw = kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0, npos = nargs - nkw;
    int is_product = fn == py.product;
    static const char *const pnames[] = {"repeat", NULL}, *const cnames[] = {"r", NULL};
    if (!kw_only(kwnames, is_product ? pnames : cnames) || (!is_product && (npos < 1 || npos > 2))) {
        cap_fail(c, BR_UNSUPPORTED_CALL, "itertools call with these arguments");
        return NULL;
    }
    int32_t npools = is_product ? npos : 1;
    Var ***pools = cap_alloc(c, sizeof(Var **) * (size_t)(npools + 1));
    int32_t *lens = cap_alloc(c, sizeof(int32_t) * (size_t)(npools + 1));
    if (!pools || !lens)
        return NULL;
    PyObject *pyargs = PyList_New(0);
    if (!pyargs || !cap_keep_steal(c, pyargs)) {
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    for (int32_t i = 0; i < npools; i++) {
        Var *it = iter_get(c, args[i]);
        if (!it || iter_drain(c, it, &pools[i], &lens[i]) < 0)
            return NULL;
        PyObject *rng = PyObject_CallFunction((PyObject *)&PyRange_Type, "i", (int)lens[i]);
        if (!rng || PyList_Append(pyargs, rng) < 0) {
            Py_XDECREF(rng);
            cap_fail_exc(c, BR_INTERNAL);
            return NULL;
        }
        Py_DECREF(rng);
    }
    /* r / repeat: positional (combinations' second) or keyword, a constant int */
    Var *rv = !is_product && npos == 2 ? args[1] : cap_arg(args, nargs, kwnames, -1, is_product ? "repeat" : "r");
    PyObject *kw = NULL;
    if (rv && !is_none(rv)) {
        Py_ssize_t r;
        if (ssize_arg(c, rv, 0, &r, "r") < 0)
            return NULL;
        kw = Py_BuildValue("{sn}", is_product ? "repeat" : "r", r);
    } else if (fn == py.combinations || fn == py.combinations_with_replacement) {
        raise_msg(c, PyExc_TypeError, "combinations() missing required argument 'r' (pos 2)");
        return NULL;
    }
    PyObject *targs = PyList_AsTuple(pyargs);
    PyObject *itobj = targs ? PyObject_Call(fn, targs, kw) : NULL;
    PyObject *idx = itobj ? PySequence_List(itobj) : NULL;
    Py_XDECREF(itobj);
    Py_XDECREF(targs);
    Py_XDECREF(kw);
    if (!idx) {
        cap_fail_exc(c, BR_USER_EXCEPTION);
        return NULL;
    }
    Py_ssize_t total = PyList_GET_SIZE(idx);
    if (total > ITER_MAX_ITEMS) {
        Py_DECREF(idx);
        cap_fail(c, BR_UNSUPPORTED_VALUE, "an itertools result of %zd tuples", total);
        return NULL;
    }
    Var **rows = cap_alloc(c, sizeof(Var *) * (size_t)(total + 1));
    for (Py_ssize_t k = 0; rows && k < total; k++) {
        PyObject *t = PyList_GET_ITEM(idx, k);
        Py_ssize_t w = PyTuple_GET_SIZE(t);
        Var **row = cap_alloc(c, sizeof(Var *) * (size_t)(w + 1));
        if (!row) {
            rows = NULL;
            break;
        }
        for (Py_ssize_t j = 0; j < w; j++)
            row[j] = pools[is_product ? j % npools : 0][PyLong_AsSsize_t(PyTuple_GET_ITEM(t, j))];
        if (!(rows[k] = var_seq(c, VK_TUPLE, row, (int32_t)w)))
            rows = NULL;
    }
    Py_DECREF(idx);
    return rows ? new_iter(c, rows, (int32_t)total) : NULL;
}

/* ---------------------------------------------------------------- dispatch ---- */

static Var *make_zip(Capture *c, Var **args, int32_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"strict", NULL};
    int32_t nkw = kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0, npos = nargs - nkw;
    if (!kw_only(kwnames, names)) {
        raise_msg(c, PyExc_TypeError, "zip() got an unexpected keyword argument");
        return NULL;
    }
    Var *strict = cap_arg(args, nargs, kwnames, -1, "strict");
    int st = 0;
    if (strict && op_truth(c, strict, &st) < 0)
        return NULL;
    Var *it;
    LazyIter *z = new_lazy(c, &it, LZ_ZIP, npos);
    if (!z)
        return NULL;
    z->strict = st;
    for (int32_t i = 0; i < npos; i++)
        if (!(z->its[i] = iter_get(c, args[i])))
            return NULL;
    return it;
}

/* 1 when fn reads an iterable argument to its end before anything else happens (so an
 * iterator passed to it can be read now, into a tuple): str.join, math.fsum, set(),
 * frozenset(), tuple(). */
static int consumes_whole(PyObject *fn)
{
    if (fn == (PyObject *)&PySet_Type || fn == (PyObject *)&PyFrozenSet_Type || fn == (PyObject *)&PyTuple_Type)
        return 1;
    if (Py_TYPE(fn) == &PyMethodDescr_Type)   /* str.join reached through a method call */
        return PyDescr_TYPE(fn) == &PyUnicode_Type && PyUnicode_CompareWithASCIIString(PyDescr_NAME(fn), "join") == 0;
    if (!PyCFunction_Check(fn))
        return 0;
    PyObject *self = PyCFunction_GET_SELF(fn);
    const char *n = ((PyCFunctionObject *)fn)->m_ml->ml_name;
    if (self && PyUnicode_Check(self))
        return !strcmp(n, "join");
    if (self && PyModule_Check(self)) {
        const char *mn = PyModule_GetName(self);
        if (!mn) {
            sj_err_clear();
            return 0;
        }
        return !strcmp(mn, "math") && !strcmp(n, "fsum");
    }
    return 0;
}

/* The call again with every iterator argument read into a tuple (consumes_whole). */
static Var *call_with_drained(Capture *c, PyObject *fn, Var **args, int32_t nargs, PyObject *kwnames)
{
    Var **a = cap_alloc(c, sizeof(Var *) * (size_t)(nargs + 1));
    Var *f = a ? wrap_untracked(c, fn) : NULL;
    if (!f)
        return NULL;
    for (int32_t i = 0; i < nargs; i++) {
        a[i] = args[i];
        if (args[i]->kind != VK_ITER)
            continue;
        Var **items;
        int32_t n;
        if (iter_drain(c, args[i], &items, &n) < 0 || !(a[i] = var_seq(c, VK_TUPLE, items, n)))
            return NULL;
        if (var_all_const(items, n) && !(a[i] = var_const_steal(c, var_to_py(c, a[i]))))   /* folds */
            return cap_failed(c) ? NULL : (cap_fail_exc(c, BR_INTERNAL), NULL);
    }
    return call_var(c, f, a, nargs, kwnames);
}

Var *iters_call(Capture *c, PyObject *fn, Var **args, int32_t nargs, PyObject *kwnames, int *handled)
{
    *handled = 0;
    if (py_init() < 0) {
        *handled = 1;
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    int32_t nkw = kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0, npos = nargs - nkw;
    Var *it = NULL;
    LazyIter *z;
    *handled = 1;
    for (int32_t i = 0; i < nargs; i++)
        if (args[i]->kind == VK_ITER && consumes_whole(fn))
            return call_with_drained(c, fn, args, nargs, kwnames);
    if (fn == py.reduce)
        return iters_reduce(c, args, nargs, kwnames);
    if (fn == py.prod)
        return iters_prod(c, args, nargs, kwnames);
    if (fn == py.sorted)
        return iters_sorted(c, args, nargs, kwnames);
    if (fn == py.min || fn == py.max)
        return iters_minmax(c, fn == py.max, args, nargs, kwnames);
    if (fn == py.zip)
        return make_zip(c, args, nargs, kwnames);
    if (fn == py.product || fn == py.combinations || fn == py.permutations || fn == py.combinations_with_replacement)
        return iters_combinatoric(c, fn, args, nargs, kwnames);
    if (fn == py.iter && nargs == 1)
        return iter_get(c, args[0]);
    if (nkw && fn != py.enumerate && fn != py.count && fn != py.repeat && fn != py.accumulate && fn != py.zip_longest) {
        *handled = 0;
        return NULL;
    }
    if (fn == py.map && npos >= 2) {
        if (!(z = new_lazy(c, &it, LZ_MAP, npos - 1)))
            return NULL;
        z->fn = args[0];
        for (int32_t i = 1; i < npos; i++)
            if (!(z->its[i - 1] = iter_get(c, args[i])))
                return NULL;
        return it;
    }
    if (fn == py.filter && npos == 2) {
        if (!(z = new_lazy(c, &it, LZ_FILTER, 1)))
            return NULL;
        z->fn = is_none(args[0]) ? NULL : args[0];
        return (z->its[0] = iter_get(c, args[1])) ? it : NULL;
    }
    if (fn == py.enumerate && npos >= 1 && npos <= 2) {
        static const char *const names[] = {"start", NULL};
        Var *start = npos == 2 ? args[1] : cap_arg(args, nargs, kwnames, -1, "start");
        if (!kw_only(kwnames, names) || (npos == 2 && nkw)) {
            *handled = 0;
            return NULL;
        }
        if (!(z = new_lazy(c, &it, LZ_ENUMERATE, 1)))
            return NULL;
        if (!(z->value = start ? start : const_ssize(c, 0)) || !(z->its[0] = iter_get(c, args[0])))
            return NULL;
        return it;
    }
    if (fn == py.count && npos <= 2) {
        Var *start = npos >= 1 ? args[0] : cap_arg(args, nargs, kwnames, -1, "start");
        Var *step = npos >= 2 ? args[1] : cap_arg(args, nargs, kwnames, -1, "step");
        if (!(z = new_lazy(c, &it, LZ_COUNT, 0)))
            return NULL;
        if (!(z->value = start ? start : const_ssize(c, 0)) || !(z->step = step ? step : const_ssize(c, 1)))
            return NULL;
        return it;
    }
    if (fn == py.repeat && npos >= 1 && npos <= 2) {
        Var *times = npos == 2 ? args[1] : cap_arg(args, nargs, kwnames, -1, "times");
        if (!(z = new_lazy(c, &it, LZ_REPEAT, 0)))
            return NULL;
        z->value = args[0];
        if (times) {
            if (ssize_arg(c, times, -1, &z->left, "repeat() times") < 0)
                return NULL;
            if (z->left < 0)
                z->left = 0;
        }
        return it;
    }
    if (fn == py.islice && npos >= 2 && npos <= 4) {
        Py_ssize_t start = 0, stop = -1, step = 1;
        if (npos == 2) {
            if (islice_arg(c, args[1], -1, &stop, 1) < 0)
                return NULL;
        } else if (islice_arg(c, args[2], -1, &stop, 1) < 0 || islice_arg(c, args[1], 0, &start, 0) < 0 ||
                   (npos == 4 && islice_arg(c, args[3], 1, &step, 2) < 0)) {
            return NULL;
        }
        if (!(z = new_lazy(c, &it, LZ_ISLICE, 1)))
            return NULL;
        z->next = start;
        z->stop = stop;
        z->istep = step;
        return (z->its[0] = iter_get(c, args[0])) ? it : NULL;
    }
    if (fn == py.chain) {
        Var *tuple = var_seq(c, VK_TUPLE, args, npos);
        if (!tuple || !(z = new_lazy(c, &it, LZ_CHAIN, 1)))
            return NULL;
        return (z->its[0] = iter_get(c, tuple)) ? it : NULL;
    }
    if (PyCFunction_Check(fn) && PyCFunction_GET_SELF(fn) == py.chain && npos == 1 &&
        !strcmp(((PyCFunctionObject *)fn)->m_ml->ml_name, "from_iterable")) {
        if (!(z = new_lazy(c, &it, LZ_CHAIN, 1)))
            return NULL;
        return (z->its[0] = iter_get(c, args[0])) ? it : NULL;
    }
    if (fn == py.pairwise && npos == 1) {
        if (!(z = new_lazy(c, &it, LZ_PAIRWISE, 1)))
            return NULL;
        return (z->its[0] = iter_get(c, args[0])) ? it : NULL;
    }
    if (fn == py.starmap && npos == 2) {
        if (!(z = new_lazy(c, &it, LZ_STARMAP, 1)))
            return NULL;
        z->fn = args[0];
        return (z->its[0] = iter_get(c, args[1])) ? it : NULL;
    }
    if (fn == py.zip_longest) {
        static const char *const names[] = {"fillvalue", NULL};
        if (!kw_only(kwnames, names)) {
            *handled = 0;
            return NULL;
        }
        Var *fill = cap_arg(args, nargs, kwnames, -1, "fillvalue");
        if (!(z = new_lazy(c, &it, LZ_ZIP_LONGEST, npos)) || !(z->value = fill ? fill : var_const(c, Py_None)))
            return NULL;
        z->left = npos;
        for (int32_t i = 0; i < npos; i++)
            if (!(z->its[i] = iter_get(c, args[i])))
                return NULL;
        return it;
    }
    if (fn == py.accumulate && npos >= 1 && npos <= 2) {
        static const char *const names[] = {"func", "initial", NULL};
        if (!kw_only(kwnames, names)) {
            *handled = 0;
            return NULL;
        }
        Var *f = npos == 2 ? args[1] : cap_arg(args, nargs, kwnames, -1, "func");
        Var *init = cap_arg(args, nargs, kwnames, -1, "initial");
        if (!(z = new_lazy(c, &it, LZ_ACCUMULATE, 1)))
            return NULL;
        z->fn = is_none(f) ? NULL : f;
        z->step = is_none(init) ? NULL : init;
        return (z->its[0] = iter_get(c, args[0])) ? it : NULL;
    }
    *handled = 0;
    return NULL;
}
