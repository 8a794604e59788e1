/* Capture a frame into a cache entry. */
#include "compile.h"
#include "../capture/capture.h"
#include "../vocab/libs.h"
#include "../core/config.h"
#include "../core/log.h"
#include "../core/trace.h"
#include "events.h"
#include "../resume/resume.h"
#include "collective.h"
#include <time.h>
#include "../core/errors.h"

PyObject *SjUnsupported;
static long graph_counter;

/* ------------------------------------------------------------- result plan ---- */
/* A plan is an int (graph output k) or a tuple:
 *   ("c", obj)                 a constant
 *   ("s", source_id)           a value read from the frame's inputs
 *   ("t"|"l", (items...))      a tuple or list
 *   ("T", type, (items...))    a tuple subclass (namedtuple, torch.Size)
 *   ("d", (keys...), (items...)) a dict
 *   ("D", (keyplans...), (items...)) a dict with tensor keys: each key is a plan
 *   ("m", fn, self)            a bound method; ("g", name, self): getattr(self, name)
 *   ("o"|"r", type, keys, items) an object made during capture (see build)
 *   ("=", slot, plan)          build plan, and keep the object as slot
 *   ("@", slot)                the object kept as slot: a container or object made during
 *                              capture is built once however many places hold it (two
 *                              locals naming one list, a list inside a dict), so the code
 *                              after a break sees one object, as eager code does
 *   ("v", name, dict)          a view of a dict: dict.keys(), .values(), .items()
 *   ("k", obj)                 a mutable constant: a deep copy of obj, one per run
 *   ("i", list, pos)           an iterator over list, at pos
 *   ("C", type, (args...))     type(*args): a collections container (OrderedDict(dict),
 *                              defaultdict(factory, dict), Counter(dict), deque(list, maxlen))
 *   ("f", fn, (args...), kwnames[, state]) fn(*args) with the last len(kwnames) args
 *                              passed by name (kwnames a tuple or None), then given state
 *                              by __setstate__ when present: an iterator rebuilt at its
 *                              state (map(f, it), itertools.count(5, 1), ...) */

typedef struct {
    Capture *c;
    PyObject *outvals;   /* dict value id -> output index */
    PyObject *made;      /* dict Var address -> slot of the objects planned so far */
    Var *contents_of;    /* the outside container whose contents are being planned */
} PlanCtx;

static PyObject *plan_object(PlanCtx *p, Var *v);

static int is_mutable_builtin(PyObject *o)
{
    return PyList_CheckExact(o) || PyDict_CheckExact(o) || PySet_CheckExact(o) || PyByteArray_CheckExact(o);
}

/* Containers and objects the frame made: planned once, then referred to by slot. A
 * mutable constant (a set built in the frame, a list a folded call returned) is one of
 * them: eager makes a new one per call, so each run gets its own copy, and what the
 * caller does to one result never shows in the next. */
static PyObject *plan_for(PlanCtx *p, Var *v)
{
    int made_here = (v->src < 0 || v->fresh) && v != p->contents_of &&
                    (v->kind == VK_TUPLE || v->kind == VK_LIST || v->kind == VK_DICT || v->kind == VK_USEROBJ ||
                     v->kind == VK_ITER ||
                     (v->kind == VK_CONST && is_mutable_builtin(v->obj)));
    if (v->src < 0 && (v->kind == VK_CONST || v->kind == VK_CALLABLE) && PyCFunction_Check(v->obj) &&
        PyCFunction_GET_SELF(v->obj) && is_mutable_builtin(PyCFunction_GET_SELF(v->obj))) {
        /* s.add of a mutable constant: looked up on the copy this run makes */
        Var *self = var_const(p->c, PyCFunction_GET_SELF(v->obj));
        PyObject *sp = self ? plan_for(p, self) : NULL;
        return sp ? Py_BuildValue("(ssN)", "g", ((PyCFunctionObject *)v->obj)->m_ml->ml_name, sp) : NULL;
    }
    if (!made_here)
        return plan_object(p, v);
    /* a mutable constant is one object however many vars name it (its bound methods
     * name it through vars of their own) */
    PyObject *key = PyLong_FromVoidPtr(v->kind == VK_CONST ? (void *)v->obj : (void *)v);
    if (!key)
        return NULL;
    PyObject *slot = PyDict_GetItemWithError(p->made, key);
    if (slot || PyErr_Occurred()) {
        Py_DECREF(key);
        return slot ? Py_BuildValue("(sO)", "@", slot) : NULL;
    }
    slot = PyLong_FromSsize_t(PyDict_GET_SIZE(p->made));
    if (!slot || PyDict_SetItem(p->made, key, slot) < 0) {
        Py_XDECREF(slot);
        Py_DECREF(key);
        return NULL;
    }
    Py_DECREF(key);
    PyObject *sub = plan_object(p, v);
    PyObject *r = sub ? Py_BuildValue("(sON)", "=", slot, sub) : NULL;
    Py_DECREF(slot);
    return r;
}

static PyObject *plan_object(PlanCtx *p, Var *v)
{
    Capture *c = p->c;
    switch (v->kind) {
    case VK_SYMINT:
    case VK_GSCALAR:   /* the Python float/bool the graph computed */
    case VK_TENSOR: {
        if (v->src >= 0)   /* an input, handed back as itself */
            return Py_BuildValue("(si)", "s", (int)v->src);
        int32_t value = v->kind == VK_TENSOR    ? v->u.t.value
                        : v->kind == VK_GSCALAR ? v->u.gs.value
                                                : symb_materialize(c, v->u.s.e);
        if (value < 0)
            return NULL;
        PyObject *key = PyLong_FromLong(value);
        if (!key)
            return NULL;
        PyObject *k = PyDict_GetItemWithError(p->outvals, key);
        if (k) {
            Py_DECREF(key);
            return Py_NewRef(k);
        }
        if (PyErr_Occurred() || graph_add_output(c->g, value) < 0) {
            Py_DECREF(key);
            return NULL;
        }
        k = PyLong_FromLong(c->g->noutputs - 1);
        if (!k || PyDict_SetItem(p->outvals, key, k) < 0) {
            Py_XDECREF(k);
            Py_DECREF(key);
            return NULL;
        }
        Py_DECREF(key);
        return k;
    }
    case VK_CONST:
        if (v->src >= 0 && is_mutable_builtin(v->obj))
            return Py_BuildValue("(si)", "s", (int)v->src);   /* an outside object: itself */
        if (is_mutable_builtin(v->obj))
            return Py_BuildValue("(sO)", "k", v->obj);
        return Py_BuildValue("(sO)", "c", v->obj);
    case VK_TUPLE:
    case VK_LIST:
    case VK_DICT:
        if (v->src >= 0 && !v->fresh)   /* an outside container: itself (writes are written back) */
            return Py_BuildValue("(si)", "s", (int)v->src);
        break;
    case VK_DICTVIEW: {
        PyObject *d = plan_for(p, v->u.dview.dict);
        return d ? Py_BuildValue("(ssN)", "v", var_view_method(v), d) : NULL;
    }
    case VK_ITER: {
        if (v->u.iter.live && v->u.iter.live->kind == VK_LIST) {
            PyObject *l = plan_for(p, v->u.iter.live);
            return l ? Py_BuildValue("(sNi)", "i", l, (int)v->u.iter.pos) : NULL;
        }
        if (v->u.iter.live || v->u.iter.gen)
            break;   /* a dict's iterator, a generator: not rebuilt */
        /* any other iterator: the real one at its state, from its recipe (iters.c) */
        PyObject *fn, *kwnames;
        Var **args, *state;
        int32_t nargs;
        if (iter_recipe(c, v, &fn, &args, &nargs, &kwnames, &state) < 0)
            return NULL;
        PyObject *ap = PyTuple_New(nargs);
        for (int32_t i = 0; ap && i < nargs; i++) {
            PyObject *a = plan_for(p, args[i]);
            if (!a) {
                Py_CLEAR(ap);
                break;
            }
            PyTuple_SET_ITEM(ap, i, a);
        }
        PyObject *sp = ap && state ? plan_for(p, state) : NULL;
        if (!ap || (state && !sp)) {
            Py_XDECREF(ap);
            return NULL;
        }
        return sp ? Py_BuildValue("(sONON)", "f", fn, ap, kwnames ? kwnames : Py_None, sp)
                  : Py_BuildValue("(sONO)", "f", fn, ap, kwnames ? kwnames : Py_None);
    }
    default:
        break;
    }
    switch (v->kind) {
    case VK_TUPLE:
    case VK_LIST: {
        PyObject *items = PyTuple_New(v->u.seq.n);
        if (!items)
            return NULL;
        for (int32_t i = 0; i < v->u.seq.n; i++) {
            PyObject *it = plan_for(p, v->u.seq.items[i]);
            if (!it) {
                Py_DECREF(items);
                return NULL;
            }
            PyTuple_SET_ITEM(items, i, it);
        }
        if (v->kind == VK_TUPLE && v->u.seq.subtype)
            return Py_BuildValue("(sON)", "T", (PyObject *)v->u.seq.subtype, items);
        if (v->kind == VK_LIST && v->u.seq.subtype)   /* a deque */
            return Py_BuildValue("(sO((sN)(sO)))", "C", (PyObject *)v->u.seq.subtype, "l", items, "c",
                                 v->u.seq.maxlen ? v->u.seq.maxlen->obj : Py_None);
        return Py_BuildValue("(sN)", v->kind == VK_TUPLE ? "t" : "l", items);
    }
    case VK_DICT: {
        int any_planned = 0;
        PyObject *keys = PyTuple_New(v->u.dict.n), *items = PyTuple_New(v->u.dict.n);
        if (!keys || !items) {
            Py_XDECREF(keys);
            Py_XDECREF(items);
            return NULL;
        }
        for (int32_t i = 0; i < v->u.dict.n; i++) {
            /* a tensor key (keyed by identity) is the value the graph or the frame gives */
            int planned = v->u.dict.keys[i]->kind != VK_CONST;
            PyObject *k = planned ? plan_for(p, v->u.dict.keys[i]) : Py_NewRef(v->u.dict.keys[i]->obj);
            if (!k) {
                Py_DECREF(keys);
                Py_DECREF(items);
                return NULL;
            }
            any_planned |= planned;
            PyTuple_SET_ITEM(keys, i, k);
            PyObject *it = plan_for(p, v->u.dict.vals[i]);
            if (!it) {
                Py_DECREF(keys);
                Py_DECREF(items);
                return NULL;
            }
            PyTuple_SET_ITEM(items, i, it);
        }
        if (v->u.dict.subtype) {
            /* OrderedDict / Counter / defaultdict: the type called with the plain dict (and
             * a defaultdict's factory first) */
            PyObject *f = v->u.dict.factory ? plan_for(p, v->u.dict.factory) : NULL;
            if (v->u.dict.factory && !f) {
                Py_DECREF(keys);
                Py_DECREF(items);
                return NULL;
            }
            PyObject *d = Py_BuildValue("(sNN)", "d", keys, items);
            PyObject *args = !d ? NULL : f ? Py_BuildValue("(NN)", f, d) : Py_BuildValue("(N)", d);
            return args ? Py_BuildValue("(sON)", "C", (PyObject *)v->u.dict.subtype, args) : NULL;
        }
        if (any_planned) {
            /* constant keys as constant plans */
            for (int32_t i = 0; i < v->u.dict.n; i++) {
                if (v->u.dict.keys[i]->kind != VK_CONST)
                    continue;
                PyObject *cp = Py_BuildValue("(sO)", "c", PyTuple_GET_ITEM(keys, i));
                if (!cp) {
                    Py_DECREF(keys);
                    Py_DECREF(items);
                    return NULL;
                }
                Py_SETREF(((PyTupleObject *)keys)->ob_item[i], cp);
            }
            return Py_BuildValue("(sNN)", "D", keys, items);
        }
        return Py_BuildValue("(sNN)", "d", keys, items);
    }
    case VK_USEROBJ: {
        Var *a = v->u.uobj.attrs;
        PyObject *keys = PyTuple_New(a->u.dict.n), *items = PyTuple_New(a->u.dict.n);
        if (!keys || !items) {
            Py_XDECREF(keys);
            Py_XDECREF(items);
            return NULL;
        }
        for (int32_t i = 0; i < a->u.dict.n; i++) {
            PyTuple_SET_ITEM(keys, i, Py_NewRef(a->u.dict.keys[i]->obj));
            PyObject *it = plan_for(p, a->u.dict.vals[i]);
            if (!it) {
                Py_DECREF(keys);
                Py_DECREF(items);
                return NULL;
            }
            PyTuple_SET_ITEM(items, i, it);
        }
        return Py_BuildValue("(sONN)", v->u.uobj.record ? "r" : "o", (PyObject *)v->u.uobj.type, keys, items);
    }
    case VK_METHOD: {
        if (v->src >= 0)
            return Py_BuildValue("(si)", "s", (int)v->src);
        if (v->stable && v->obj)   /* np.random.rand: a library module's bound method */
            return Py_BuildValue("(sO)", "c", v->obj);
        Var *f = v->u.method.fn;
        int by_name = f->kind == VK_CONST && PyUnicode_Check(f->obj);   /* record methods */
        PyObject *fn = by_name ? Py_NewRef(f->obj) : NULL;
        if (!by_name && v->u.method.self->kind == VK_TENSOR && f->obj) {
            /* numpy reductions give scalars where capture sees 0-d arrays: look up by name */
            fn = PyObject_GetAttrString(f->obj, "__name__");
            by_name = fn && PyUnicode_Check(fn);
            if (!by_name) {
                Py_CLEAR(fn);
                sj_err_clear();
            }
        }
        if (!by_name)
            fn = plan_for(p, f);
        PyObject *self = fn ? plan_for(p, v->u.method.self) : NULL;
        if (!self) {
            Py_XDECREF(fn);
            return NULL;
        }
        return Py_BuildValue("(sNN)", by_name ? "g" : "m", fn, self);
    }
    default:
        if (v->src >= 0)
            return Py_BuildValue("(si)", "s", (int)v->src);
        if (v->obj && (v->kind == VK_CALLABLE || v->kind == VK_PYMODULE || v->kind == VK_FUNC || v->stable))
            return Py_BuildValue("(sO)", "c", v->obj);
        cap_fail(c, BR_UNSUPPORTED_RETURN, "returning %s made during capture", var_a(c, v));
        return NULL;
    }
}

/* The plan of the frame's result r: ("w", ((source_id, contents), ...), result, ((source_id,
 * name, value, how), ...)) writes the final contents of outside lists and dicts the
 * capture changed in place, builds result, then sets the attributes of outside objects the
 * capture wrote (in the order of their first writes; how: 0 setattr(), 1 through
 * object.__setattr__, 2 obj[name] = value); without such writes, result's plan alone. The write-backs are
 * planned first, as they are built first (an object made in the frame is built where it
 * first appears). */
static PyObject *plan_result(PlanCtx *p, Var *r)
{
    Capture *c = p->c;
    if (!c->mutated && !attr_has_writes(c))
        return plan_for(p, r);
    PyObject *wbs = PyList_New(0);
    for (Mutated *m = c->mutated; wbs && m; m = m->next) {
        Var *v = m->v;
        v->fresh = 1;   /* plan the contents, not the object */
        p->contents_of = v;
        PyObject *contents = plan_for(p, v);
        p->contents_of = NULL;
        v->fresh = 0;
        PyObject *item = contents ? Py_BuildValue("(iN)", (int)v->src, contents) : NULL;
        if (!item || PyList_Append(wbs, item) < 0)
            Py_CLEAR(wbs);
        Py_XDECREF(item);
    }
    PyObject *aws = wbs ? PyList_New(0) : NULL;
    for (AttrWrite *w = c->writes; aws && w; w = w->next) {
        if (w->owned)
            continue;
        PyObject *val = plan_for(p, w->value);
        PyObject *item = val ? Py_BuildValue("(iONi)", (int)w->target->src, w->name, val,
                                             w->item ? 2 : w->generic) : NULL;
        if (!item || PyList_Append(aws, item) < 0)
            Py_CLEAR(aws);
        Py_XDECREF(item);
    }
    PyObject *t = aws ? PyList_AsTuple(wbs) : NULL;
    PyObject *at = t ? PyList_AsTuple(aws) : NULL;
    Py_XDECREF(wbs);
    Py_XDECREF(aws);
    PyObject *result = at ? plan_for(p, r) : NULL;
    PyObject *plan = result ? Py_BuildValue("(sNNN)", "w", t, result, at) : NULL;
    if (!result) {
        Py_XDECREF(t);
        Py_XDECREF(at);
    }
    return plan;
}

typedef struct {
    PyObject **memo;
    const SourceTable *t;
    const FrameView *fv;
    PyObject *made;   /* strong dict slot -> object ("=" and "@"), made on first use */
    int wrote;        /* an outside list or dict was written back into */
} BuildCtx;

/* The contents of val written into obj, a collections container from outside, through
 * its own methods (an OrderedDict's order lives beside its dict: PyDict_Clear would leave
 * it stale). 0 or -1. */
static int write_back_collection(PyObject *obj, PyObject *val)
{
    PyObject *r = PyObject_CallMethod(obj, "clear", NULL);
    if (!r)
        return -1;
    Py_DECREF(r);
    if (!PyDict_Check(obj)) {
        r = PyObject_CallMethod(obj, "extend", "O", val);
        Py_XDECREF(r);
        return r ? 0 : -1;
    }
    PyObject *keys = PySequence_List(val);
    for (Py_ssize_t i = 0; keys && i < PyList_GET_SIZE(keys); i++) {
        PyObject *k = PyList_GET_ITEM(keys, i);
        PyObject *v = PyObject_GetItem(val, k);
        int rc = v ? PyObject_SetItem(obj, k, v) : -1;
        Py_XDECREF(v);
        if (rc < 0)
            Py_CLEAR(keys);
    }
    Py_XDECREF(keys);
    return keys ? 0 : -1;
}

static PyObject *build(PyObject *plan, PyObject *outputs, BuildCtx *bc)
{
    if (PyLong_CheckExact(plan))
        return Py_NewRef(PySequence_Fast_GET_ITEM(outputs, PyLong_AsSsize_t(plan)));
    const char *tag = PyUnicode_AsUTF8(PyTuple_GET_ITEM(plan, 0));
    switch (tag[0]) {
    case 'c':
        return Py_NewRef(PyTuple_GET_ITEM(plan, 1));
    case '=': {
        PyObject *obj = build(PyTuple_GET_ITEM(plan, 2), outputs, bc);
        if (obj && !bc->made && !(bc->made = PyDict_New()))
            Py_CLEAR(obj);
        if (obj && PyDict_SetItem(bc->made, PyTuple_GET_ITEM(plan, 1), obj) < 0)
            Py_CLEAR(obj);
        return obj;
    }
    case '@': {
        PyObject *obj = bc->made ? PyDict_GetItemWithError(bc->made, PyTuple_GET_ITEM(plan, 1)) : NULL;
        if (!obj && !PyErr_Occurred())
            PyErr_SetString(PyExc_SystemError, "shapejit: a result plan refers to an object before building it");
        return Py_XNewRef(obj);
    }
    case 'k': {
        static PyObject *deepcopy;   /* strong: copy.deepcopy, never released */
        if (!deepcopy) {
            PyObject *m = PyImport_ImportModule("copy");
            deepcopy = m ? PyObject_GetAttrString(m, "deepcopy") : NULL;
            Py_XDECREF(m);
            if (!deepcopy)
                return NULL;
        }
        return PyObject_CallOneArg(deepcopy, PyTuple_GET_ITEM(plan, 1));
    }
    case 'i': {
        /* a list iterator at a position: iter(list) moved on by __setstate__, which
         * list iterators take for pickling */
        PyObject *l = build(PyTuple_GET_ITEM(plan, 1), outputs, bc);
        PyObject *it = l ? PyObject_GetIter(l) : NULL;
        Py_XDECREF(l);
        PyObject *r = it ? PyObject_CallMethod(it, "__setstate__", "(O)", PyTuple_GET_ITEM(plan, 2)) : NULL;
        Py_XDECREF(r);
        if (!r)
            Py_CLEAR(it);
        return it;
    }
    case 'C': {
        PyObject *pargs = PyTuple_GET_ITEM(plan, 2);
        Py_ssize_t n = PyTuple_GET_SIZE(pargs);
        PyObject *a = PyTuple_New(n);
        for (Py_ssize_t i = 0; a && i < n; i++) {
            PyObject *x = build(PyTuple_GET_ITEM(pargs, i), outputs, bc);
            if (!x)
                Py_CLEAR(a);
            else
                PyTuple_SET_ITEM(a, i, x);
        }
        PyObject *r = a ? PyObject_Call(PyTuple_GET_ITEM(plan, 1), a, NULL) : NULL;
        Py_XDECREF(a);
        return r;
    }
    case 'f': {
        PyObject *ap = PyTuple_GET_ITEM(plan, 2), *kwnames = PyTuple_GET_ITEM(plan, 3);
        Py_ssize_t n = PyTuple_GET_SIZE(ap);
        PyObject **a = PyMem_Calloc((size_t)n + 1, sizeof(PyObject *));
        Py_ssize_t k = 0;
        for (; a && k < n; k++)
            if (!(a[k] = build(PyTuple_GET_ITEM(ap, k), outputs, bc)))
                break;
        PyObject *r = NULL;
        if (!a)
            PyErr_NoMemory();
        else if (k == n) {
            PyObject *kw = kwnames == Py_None ? NULL : kwnames;
            size_t npos = (size_t)(n - (kw ? PyTuple_GET_SIZE(kw) : 0));
            r = PyObject_Vectorcall(PyTuple_GET_ITEM(plan, 1), a, npos, kw);
            PyObject *st = r && PyTuple_GET_SIZE(plan) > 4 ? build(PyTuple_GET_ITEM(plan, 4), outputs, bc) : NULL;
            PyObject *ok = st ? PyObject_CallMethod(r, "__setstate__", "(O)", st) : NULL;
            Py_XDECREF(st);
            if (r && PyTuple_GET_SIZE(plan) > 4 && !ok)
                Py_CLEAR(r);
            Py_XDECREF(ok);
        }
        for (Py_ssize_t i = 0; a && i < k; i++)
            Py_DECREF(a[i]);
        PyMem_Free(a);
        return r;
    }
    case 'v': {
        PyObject *d = build(PyTuple_GET_ITEM(plan, 2), outputs, bc);
        PyObject *view = d ? PyObject_CallMethodNoArgs(d, PyTuple_GET_ITEM(plan, 1)) : NULL;
        Py_XDECREF(d);
        return view;
    }
    case 'w': {
        /* everything is read (the result, the new contents and attribute values: items of
         * the containers written may be among them) before the first write */
        PyObject *wbs = PyTuple_GET_ITEM(plan, 1), *aws = PyTuple_GET_ITEM(plan, 3);
        Py_ssize_t n = PyTuple_GET_SIZE(wbs), na = PyTuple_GET_SIZE(aws);
        PyObject *objs = PyTuple_New(n + na), *vals = PyTuple_New(n + na), *result = NULL;
        for (Py_ssize_t i = 0; objs && vals && i < n + na; i++) {
            PyObject *wb = i < n ? PyTuple_GET_ITEM(wbs, i) : PyTuple_GET_ITEM(aws, i - n);
            PyObject *obj = sources_resolve(bc->t, (int32_t)PyLong_AsLong(PyTuple_GET_ITEM(wb, 0)), bc->fv, bc->memo);
            PyObject *val = obj ? build(PyTuple_GET_ITEM(wb, i < n ? 1 : 2), outputs, bc) : NULL;
            if (!val)
                goto wb_done;
            PyTuple_SET_ITEM(objs, i, Py_NewRef(obj));
            PyTuple_SET_ITEM(vals, i, val);
        }
        if (!objs || !vals)
            goto wb_done;
        /* a result that fails to build (a record's constructor raising) still leaves the
         * frame's writes done, as the eager frame had done them before it returned: the
         * error is raised after the writes, and the frame is not run again */
        result = build(PyTuple_GET_ITEM(plan, 2), outputs, bc);
        PyObject *ft = NULL, *fv = NULL, *ftb = NULL;   /* strong: the build's error, if any */
        if (!result)
            PyErr_Fetch(&ft, &fv, &ftb);
        int failed = !result;
        for (Py_ssize_t i = 0; i < n + na; i++) {
            PyObject *obj = PyTuple_GET_ITEM(objs, i), *val = PyTuple_GET_ITEM(vals, i);
            int rc = -1;
            bc->wrote = 1;
            if (i >= n) {
                PyObject *aw = PyTuple_GET_ITEM(aws, i - n), *name = PyTuple_GET_ITEM(aw, 1);
                long how = PyLong_AsLong(PyTuple_GET_ITEM(aw, 3));
                rc = how == 2 ? PyObject_SetItem(obj, name, val)
                     : how == 1 ? PyObject_GenericSetAttr(obj, name, val)
                                : PyObject_SetAttr(obj, name, val);
            } else if (PyList_CheckExact(obj))
                rc = PyList_SetSlice(obj, 0, PY_SSIZE_T_MAX, val);
            else if (PyDict_CheckExact(obj))
                rc = (PyDict_Clear(obj), PyDict_Update(obj, val));
            else if (PyDict_Check(obj) || PyObject_HasAttrString(obj, "extendleft"))
                rc = write_back_collection(obj, val);   /* OrderedDict, defaultdict, Counter, deque */
            else
                PyErr_Format(PyExc_TypeError, "shapejit: cannot write back into a %s", Py_TYPE(obj)->tp_name);
            if (rc < 0) {
                Py_CLEAR(result);
                failed = 0;   /* the write's own error is the one to see */
                Py_CLEAR(ft);
                Py_CLEAR(fv);
                Py_CLEAR(ftb);
                break;
            }
        }
        if (failed)
            PyErr_Restore(ft, fv, ftb);
    wb_done:
        Py_XDECREF(objs);
        Py_XDECREF(vals);
        return result;
    }
    case 'g':
    case 'm': {
        /* a bound method: the function bound to its receiver, or looked up by name */
        PyObject *fn = tag[0] == 'g' ? Py_NewRef(PyTuple_GET_ITEM(plan, 1)) : build(PyTuple_GET_ITEM(plan, 1), outputs, bc);
        PyObject *self = fn ? build(PyTuple_GET_ITEM(plan, 2), outputs, bc) : NULL;
        PyObject *m = !self ? NULL : tag[0] == 'g' ? PyObject_GetAttr(self, fn) : PyMethod_New(fn, self);
        Py_XDECREF(fn);
        Py_XDECREF(self);
        return m;
    }
    case 's':
        return Py_XNewRef(sources_resolve(bc->t, (int32_t)PyLong_AsLong(PyTuple_GET_ITEM(plan, 1)), bc->fv, bc->memo));
    case 'o': {
        /* an object made during capture: allocate without __init__, set its attributes */
        PyObject *t = PyTuple_GET_ITEM(plan, 1), *keys = PyTuple_GET_ITEM(plan, 2), *items = PyTuple_GET_ITEM(plan, 3);
        PyObject *obj = PyObject_CallMethod((PyObject *)&PyBaseObject_Type, "__new__", "O", t);
        for (Py_ssize_t i = 0; obj && i < PyTuple_GET_SIZE(keys); i++) {
            PyObject *x = build(PyTuple_GET_ITEM(items, i), outputs, bc);
            if (!x || PyObject_GenericSetAttr(obj, PyTuple_GET_ITEM(keys, i), x) < 0)
                Py_CLEAR(obj);
            Py_XDECREF(x);
        }
        return obj;
    }
    case 'r': {
        /* a record (ModelOutput): call the class with its fields */
        PyObject *t = PyTuple_GET_ITEM(plan, 1), *keys = PyTuple_GET_ITEM(plan, 2), *items = PyTuple_GET_ITEM(plan, 3);
        PyObject *kw = PyDict_New();
        for (Py_ssize_t i = 0; kw && i < PyTuple_GET_SIZE(keys); i++) {
            PyObject *x = build(PyTuple_GET_ITEM(items, i), outputs, bc);
            if (!x || PyDict_SetItem(kw, PyTuple_GET_ITEM(keys, i), x) < 0)
                Py_CLEAR(kw);
            Py_XDECREF(x);
        }
        if (!kw)
            return NULL;
        PyObject *empty = PyTuple_New(0);
        PyObject *obj = empty ? PyObject_Call(t, empty, kw) : NULL;
        Py_XDECREF(empty);
        Py_DECREF(kw);
        return obj;
    }
    case 't':
    case 'l':
    case 'T':
    case 'd':
    case 'D': {
        PyObject *items = PyTuple_GET_ITEM(plan, tag[0] == 'T' || tag[0] == 'd' || tag[0] == 'D' ? 2 : 1);
        Py_ssize_t n = PyTuple_GET_SIZE(items);
        PyObject *vals = PyTuple_New(n);
        if (!vals)
            return NULL;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *x = build(PyTuple_GET_ITEM(items, i), outputs, bc);
            if (!x) {
                Py_DECREF(vals);
                return NULL;
            }
            PyTuple_SET_ITEM(vals, i, x);
        }
        if (tag[0] == 't')
            return vals;
        if (tag[0] == 'l') {
            PyObject *l = PySequence_List(vals);
            Py_DECREF(vals);
            return l;
        }
        if (tag[0] == 'T') {
            /* a namedtuple is made with its _make; looked up so that an error other than
             * AttributeError (an interrupt in a metaclass __getattr__) propagates */
            static PyObject *str_make;   /* strong, interned */
            PyObject *t = PyTuple_GET_ITEM(plan, 1), *make = NULL, *r = NULL;
            if ((str_make || (str_make = PyUnicode_InternFromString("_make"))) &&
                _PyObject_LookupAttr(t, str_make, &make) >= 0)
                r = PyObject_CallOneArg(make ? make : t, vals);
            Py_XDECREF(make);
            Py_DECREF(vals);
            return r;
        }
        PyObject *d = PyDict_New();
        PyObject *keys = PyTuple_GET_ITEM(plan, 1);
        for (Py_ssize_t i = 0; d && i < n; i++) {
            PyObject *k = tag[0] == 'D' ? build(PyTuple_GET_ITEM(keys, i), outputs, bc)
                                        : Py_NewRef(PyTuple_GET_ITEM(keys, i));
            if (!k || PyDict_SetItem(d, k, PyTuple_GET_ITEM(vals, i)) < 0)
                Py_CLEAR(d);
            Py_XDECREF(k);
        }
        Py_DECREF(vals);
        return d;
    }
    }
    PyErr_SetString(PyExc_SystemError, "shapejit: bad result plan");
    return NULL;
}

PyObject *compile_build_result(PyObject *plan, PyObject *outputs, PyObject **memo, const SourceTable *t,
                               const FrameView *fv, int *wrote)
{
    BuildCtx bc = {memo, t, fv, NULL, 0};
    PyObject *r = build(plan, outputs, &bc);
    Py_XDECREF(bc.made);
    *wrote = bc.wrote;
    return r;
}

/* ------------------------------------------------------------------ logs ---- */

static PyObject *format_stack(PyObject *stack)
{
    PyObject *lines = PyList_New(0);
    if (!lines || !stack)
        return lines;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(stack); i++) {
        PyObject *w = PyList_GET_ITEM(stack, i);
        PyObject *l = PyUnicode_FromFormat("  File \"%U\", line %S, in %U\n    %U", PyTuple_GET_ITEM(w, 0),
                                           PyTuple_GET_ITEM(w, 1), PyTuple_GET_ITEM(w, 2), PyTuple_GET_ITEM(w, 3));
        if (!l || PyList_Append(lines, l) < 0) {
            Py_XDECREF(l);
            Py_DECREF(lines);
            return NULL;
        }
        Py_DECREF(l);
    }
    PyObject *nl = PyUnicode_FromString("\n");
    PyObject *r = nl ? PyUnicode_Join(nl, lines) : NULL;
    Py_XDECREF(nl);
    Py_DECREF(lines);
    return r;
}

static PyObject *reason_text(Capture *c)
{
    return PyUnicode_FromFormat("%s: %S", break_messages[c->reason], c->reason_msg ? c->reason_msg : Py_None);
}

static PyObject *seen_breaks;   /* strong set of (file, line, reason): logged in full once */

void compile_forget_breaks(void)
{
    Py_CLEAR(seen_breaks);
}

static void report_break(Capture *c, PyCodeObject *co, PyObject *reason)
{
    PyObject *stack = c->user_stack;
    PyObject *top = (stack && PyList_GET_SIZE(stack)) ? PyList_GET_ITEM(stack, PyList_GET_SIZE(stack) - 1) : NULL;
    int seen = 0;
    if (top && (seen_breaks || (seen_breaks = PySet_New(NULL)))) {
        PyObject *key = PyTuple_Pack(3, PyTuple_GET_ITEM(top, 0), PyTuple_GET_ITEM(top, 1), reason);
        seen = key ? PySet_Contains(seen_breaks, key) : -1;
        if (seen == 0 && PySet_Add(seen_breaks, key) < 0)
            seen = -1;
        Py_XDECREF(key);
        if (seen < 0) {
            sj_err_clear();
            seen = 0;
        }
    }
    if (seen && sj_log_on(LOG_GRAPH_BREAKS, SJ_INFO)) {
        sj_log(LOG_GRAPH_BREAKS, SJ_INFO,
               "Graph break (user stack suppressed due to duplicate graph break) in user code at %U:%S\n"
               "Graph Break Reason: %U",
               PyTuple_GET_ITEM(top, 0), PyTuple_GET_ITEM(top, 1), reason);
        sj_err_clear();
    } else if (sj_log_on(LOG_GRAPH_BREAKS, SJ_INFO)) {
        PyObject *tb = format_stack(stack);
        if (top)
            sj_log(LOG_GRAPH_BREAKS, SJ_INFO,
                   "Graph break in user code at %U:%S\nGraph Break Reason: %U\nUser code traceback:\n%S",
                   PyTuple_GET_ITEM(top, 0), PyTuple_GET_ITEM(top, 1), reason, tb ? tb : Py_None);
        else
            sj_log(LOG_GRAPH_BREAKS, SJ_INFO, "Graph break in %U (%U:%d)\nGraph Break Reason: %U", co->co_qualname,
                   co->co_filename, co->co_firstlineno, reason);
        Py_XDECREF(tb);
        sj_err_clear();
    }
    events_emit_break(reason, stack);
    if (sj_trace_on)
        SJ_TRACE("graph_break", "(OOO)", reason, stack ? stack : Py_None, (PyObject *)co);
}

/* ------------------------------------------------------------------ entry ---- */

static CacheEntry *entry_new(void)
{
    CacheEntry *e = PyMem_Calloc(1, sizeof(CacheEntry));
    if (!e)
        PyErr_NoMemory();
    else
        e->ge.sig = -1;
    return e;
}

static int add_final_guards(Capture *c)
{
    if (c->used_torch) {
        Guard g;
        memset(&g, 0, sizeof g);
        g.kind = GK_GLOBAL_STATE;
        g.src = g.src2 = -1;
        if (guards_read_global_state(&g.gs) < 0)
            return -1;
        if (guards_add(&c->guards, &g) < 0)
            return -1;
    }
    if (c->ndistinct > 1) {
        Guard g;
        memset(&g, 0, sizeof g);
        g.kind = GK_DISTINCT;
        g.src = g.src2 = -1;
        g.srcs = c->distinct_srcs;
        g.nsrcs = c->ndistinct;
        if (guards_add(&c->guards, &g) < 0)
            return -1;
    }
    return 0;
}

PyObject *SjBackendCompilerFailed;

/* The backend raised, or returned a non-callable (an exception is set either way). An
 * interrupt, SystemExit or any other non-Exception propagates as it is. A failure of
 * shapejit's own backends is internal: it becomes c's reason and the frame runs eagerly.
 * A user backend's error raises BackendCompilerFailed naming the backend, with the error
 * as __cause__; with config.suppress_errors it is a warning and the frame runs eagerly.
 * 0 (c holds the reason, no exception), or -1 with the exception to raise. */
static int backend_failed(Capture *c, const CompileOptions *opts)
{
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        return -1;
    if (opts->internal) {
        cap_fail_exc(c, BR_INTERNAL);
        return 0;
    }
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyErr_NormalizeException(&et, &ev, &tb);
    if (tb && ev)
        PyException_SetTraceback(ev, tb);
    PyObject *msg = PyUnicode_FromFormat("backend=%R raised:\n%s: %S", opts->name, Py_TYPE(ev)->tp_name, ev);
    if (!msg)
        goto fail;
    if (sj_config.suppress_errors) {
        PyObject *w = PyUnicode_FromFormat("shapejit: %U\nThe frame runs eagerly (config.suppress_errors=True).", msg);
        int r = w ? PyErr_WarnEx(PyExc_UserWarning, PyUnicode_AsUTF8(w), 1) : -1;
        Py_XDECREF(w);
        if (r < 0)   /* warnings turned into errors: the user asked to see it */
            goto fail;
        cap_fail(c, BR_BACKEND_FAILED, "%U", msg);
        Py_DECREF(msg);
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
        return 0;
    }
    PyObject *exc = PyObject_CallOneArg(sj_raise_class(SjBackendCompilerFailed), msg);
    Py_DECREF(msg);
    if (!exc)
        goto fail;
    PyException_SetCause(exc, Py_NewRef(ev));     /* steals the new reference */
    PyException_SetContext(exc, Py_NewRef(ev));   /* steals the new reference */
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
    Py_XDECREF(et);
    Py_XDECREF(ev);
    Py_XDECREF(tb);
    return -1;
fail:
    /* the message or the exception could not be made, or the warning was turned into an
     * error: that error is raised */
    Py_XDECREF(et);
    Py_XDECREF(ev);
    Py_XDECREF(tb);
    return -1;
}

/* Every entry, eager ones included, serves only calls made with the options it was
 * compiled with: the same function compiled with another backend, fullgraph or dynamic
 * gets an entry of its own. */
static int add_options_guard(Capture *c, const CompileOptions *opts)
{
    Guard g;
    memset(&g, 0, sizeof g);
    g.kind = GK_BACKEND_MATCH;
    g.src = g.src2 = -1;
    g.expected = opts->key;   /* guards_add takes its own reference */
    return guards_add(&c->guards, &g);
}

static void capture_release(Capture *c)
{
    symb_release(c);
    graph_free(c->g);
    c->g = NULL;
    sources_clear(&c->src);
    guards_clear(&c->guards);
    Py_CLEAR(c->keepalive);
    Py_CLEAR(c->wrapped);
    Py_CLEAR(c->linecache);
    Py_CLEAR(c->reason_msg);
    Py_CLEAR(c->user_stack);
    Py_CLEAR(c->exc);
    PyMem_Free(c->by_obj);
    c->by_obj = NULL;
    cap_arena_free(c);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static CacheEntry *eager_entry(Capture *c, PyCodeObject *co, const CompileOptions *opts, int count_break)
{
    if (sj_err_deferred())
        return NULL;   /* interrupted: no reason of the frame's, nothing reported or kept */
    PyObject *reason = reason_text(c);
    if (!reason)
        return NULL;
    if (opts->fullgraph && c->reason != BR_USER_EXCEPTION) {
        PyObject *stack = format_stack(c->user_stack);
        PyErr_Format(sj_raise_class(SjUnsupported), "shapejit (fullgraph=True) cannot capture %U: %U\n%S", co->co_qualname, reason,
                     stack ? stack : Py_None);
        Py_XDECREF(stack);
        Py_DECREF(reason);
        return NULL;
    }
    if (sj_config.raise_internal_errors && c->reason == BR_INTERNAL) {
        PyErr_Format(PyExc_RuntimeError, "shapejit internal error in %U: %U", co->co_qualname, reason);
        Py_DECREF(reason);
        return NULL;
    }
    if (count_break) {
        sj_stats.graph_breaks++;
        report_break(c, co, reason);
    }
    sj_stats.eager_frames++;
    CacheEntry *e = entry_new();
    if (!e) {
        Py_DECREF(reason);
        return NULL;
    }
    e->action = ENTRY_EAGER;
    e->reason = reason;
    return e;
}

/* A capture starts from the sources of the code's guard tree, so ids stay shared. */
static int capture_init(Capture *c, CodeState *st, int dynamic)
{
    memset(c, 0, sizeof *c);
    c->dynamic = dynamic;
    if (!st->fstate && !(st->fstate = PyDict_New()))
        return -1;
    c->fstate = st->fstate;
    c->g = graph_new();
    c->keepalive = PyList_New(0);
    c->wrapped = PyDict_New();
    c->linecache = PyDict_New();
    GlobalState gs;
    if (!c->g || !c->keepalive || !c->wrapped || !c->linecache || libs_refresh() < 0 ||
        guards_read_global_state(&gs) < 0 || meta_refresh_torch_default() < 0 ||
        guard_tree_copy_sources(&st->tree, &c->src) < 0)
        return -1;
    c->grad_mode = gs.grad_enabled;
    return 0;
}

/* Under torch.autocast the library casts inside each op, which the graph's ops do not
 * model: a capture that recorded torch work then fails, and the frame runs in the
 * interpreter (GLOBAL_STATE keeps an entry made without autocast from serving a call under
 * it). 0, or -1 with the failure set. */
static int check_autocast(Capture *c)
{
    if (!c->used_torch)
        return 0;
    GlobalState gs;
    if (guards_read_global_state(&gs) < 0)
        return cap_fail_exc(c, BR_INTERNAL);
    if (gs.autocast > 0)
        return cap_fail(c, BR_UNSUPPORTED_VALUE, "torch.autocast is enabled: ops under autocast are not modelled");
    return 0;
}

static void log_code(const char *what, PyObject *code)
{
    PyObject *dis = PyImport_ImportModule("dis");
    PyObject *bc = dis ? PyObject_CallMethod(dis, "Bytecode", "O", code) : NULL;
    PyObject *text = bc ? PyObject_CallMethod(bc, "dis", NULL) : NULL;
    if (text)
        sj_log(LOG_BYTECODE, SJ_INFO, "%s %U %U line %d\n%U", what, ((PyCodeObject *)code)->co_qualname,
               ((PyCodeObject *)code)->co_filename, ((PyCodeObject *)code)->co_firstlineno, text);
    Py_XDECREF(dis);
    Py_XDECREF(bc);
    Py_XDECREF(text);
    sj_err_clear();
}

/* The first capture failed at an instruction of the frame itself that can be a graph
 * break: capture again, stop before that instruction and build the continuation. 0 with
 * *bk filled (the capture in c is the second one), or -1 with c holding the first
 * failure again (the frame then runs eagerly). */
static int split_frame(Capture *c, PyCodeObject *co, PyObject *const *locals, PyObject *closure, PyObject *globals,
                       PyObject *builtins, CodeState *st, BreakCode *bk)
{
    long step = c->fail_step;
    BreakReason reason = c->reason;
    PyObject *msg = Py_XNewRef(c->reason_msg), *stack = Py_XNewRef(c->user_stack);
    int dynamic = c->dynamic;
    capture_release(c);
    if (capture_init(c, st, dynamic) < 0)
        goto undo;
    int grad0 = c->grad_mode;
    c->stop_step = step;
    (void)eval_top(c, co, globals, builtins, locals, closure);
    if (!c->stopped || cap_failed(c) || attr_check_writes(c) < 0 || check_autocast(c) < 0)
        goto undo;
    if (c->grad_mode != grad0 || c->infer_depth)
        goto undo;   /* the continuation would run with the wrong grad or inference mode */
    if (resume_build(c, co, st, bk) < 0) {
        sj_err_clear();
        goto undo;
    }
    /* the break is reported with the first capture's reason and user stack */
    cap_clear_failure(c);
    c->reason = reason;
    c->reason_msg = msg;
    c->user_stack = stack;
    return 0;
undo:
    sj_err_clear();
    cap_clear_failure(c);
    c->reason = reason;
    c->reason_msg = msg;
    c->user_stack = stack;
    return -1;
}

static int can_split(Capture *c, PyCodeObject *co, const CompileOptions *opts)
{
    if (opts->fullgraph || c->fail_step <= 0 || c->fail_pc < 0)
        return 0;
    if (c->reason == BR_USER_EXCEPTION || c->reason == BR_INTERNAL || c->reason == BR_GENERATOR)
        return 0;
    return resume_breakable(co, c->fail_pc);
}

/* The guards log and explain()'s Out Guards for a new entry. */
static void log_guards(PyCodeObject *co, CodeState *st, CacheEntry *e)
{
    if (sj_log_on(LOG_GUARDS, SJ_INFO)) {
        PyObject *tree = guard_entry_format(&st->tree, &e->ge);
        if (tree)
            sj_log(LOG_GUARDS, SJ_INFO, "GUARDS for %U (%U:%d), entry %d/%d:\n%U", co->co_qualname, co->co_filename,
                   co->co_firstlineno, st->frame_id, e->compile_id, tree);
        Py_XDECREF(tree);
    }
    if (sj_trace_on) {
        PyObject *tree = guard_entry_format(&st->tree, &e->ge), *lines = guard_entry_lines(&st->tree, &e->ge);
        if (tree && lines)
            SJ_TRACE("guards", "(OO)", lines, tree);
        Py_XDECREF(tree);
        Py_XDECREF(lines);
        sj_err_clear();
    }
    if (events_active()) {
        PyObject *lines = guard_entry_lines(&st->tree, &e->ge);
        if (lines)
            events_emit_guards(lines);
        Py_XDECREF(lines);
    }
    sj_err_clear();
}

/* compilation_metrics of one compile: what became of it (graph, break, eager, error with
 * the pending exception), the counts only C knows, and the times. */
static void trace_compile_end(PyCodeObject *co, CodeState *st, CacheEntry *e, int32_t nshape_guards, double backend_s,
                              double total_s)
{
    const char *status = !e ? "error" : e->action == ENTRY_GRAPH ? "graph" : e->action == ENTRY_BREAK ? "break" : "eager";
    PyObject *et = NULL, *ev = NULL, *tb = NULL;   /* strong: a fullgraph error, put back below */
    if (!e && PyErr_Occurred()) {
        PyErr_Fetch(&et, &ev, &tb);
        PyErr_NormalizeException(&et, &ev, &tb);
    }
    SJ_TRACE("compile_end", "(OiisOOiiiddO)", (PyObject *)co, st->frame_id, e ? e->compile_id : st->ncompiles, status,
             e && e->reason ? e->reason : Py_None, e && e->graph ? e->graph : Py_None, (int)nshape_guards,
             (int)st->nentries, (int)sj_stats.cache_entries, backend_s, total_s, ev ? ev : Py_None);
    if (et)
        PyErr_Restore(et, ev, tb);   /* steals all three */
}

/* One capture of the frame, split at a graph break when it fails at one: the result var,
 * or NULL with the failure in c. */
static Var *capture_frame(Capture *c, PyCodeObject *co, PyObject *const *locals, PyObject *closure, PyObject *globals,
                          PyObject *builtins, const CompileOptions *opts, CodeState *st, BreakCode *bk, int *is_break)
{
    Var *r = eval_top(c, co, globals, builtins, locals, closure);
    if (r && (attr_check_writes(c) < 0 || check_autocast(c) < 0))
        r = NULL;
    if (!r && can_split(c, co, opts) && split_frame(c, co, locals, closure, globals, builtins, st, bk) == 0) {
        r = bk->args;
        *is_break = 1;
    }
    return r;
}

CacheEntry *compile_frame(PyCodeObject *co, PyObject *const *locals, PyObject *closure, PyObject *globals,
                          PyObject *builtins, const CompileOptions *opts, CodeState *st)
{
    double t0 = now_s();
    Capture c;
    CacheEntry *e = NULL;
    PyObject *plan = NULL, *example = NULL, *gobj = NULL, *compiled = NULL;
    BreakCode bk;
    memset(&bk, 0, sizeof bk);
    int is_break = 0;
    int32_t *inputs = NULL;
    int32_t ninputs = 0;
    int has_mutation = 0;
    double backend_s = 0;
    int32_t nshape_guards = 0;
    PyObject *before = NULL;   /* the frame state before the capture, when the collective may run */
    if (st->frame_id < 0)
        st->frame_id = (int)events_next_frame_id();
    if (sj_trace_on)
        SJ_TRACE("compile_start", "(Oii)", (PyObject *)co, st->frame_id, st->ncompiles);
    symb_pgo_load(st, co, closure);
    collective_exchange(st, co, locals);   /* after PGO: every rank joins what it loaded */
    before = collective_snapshot(st);
    if (capture_init(&c, st, opts->dynamic) < 0)
        goto internal;
    sj_stats.frames++;
    if (sj_log_on(LOG_BYTECODE, SJ_INFO))
        log_code("ORIGINAL BYTECODE", (PyObject *)co);
    Var *r = capture_frame(&c, co, locals, closure, globals, builtins, opts, st, &bk, &is_break);
    if (before && collective_retrace(st, co, before)) {
        /* the ranks disagree on a size the capture read beyond the arguments: capture once
         * more with the joined frame state. Nothing of the first capture is kept: its
         * graph, guards, sources and break are released here, and nothing was reported,
         * counted or cached yet (that all happens below). */
        capture_release(&c);
        resume_code_clear(&bk);
        is_break = 0;
        if (capture_init(&c, st, opts->dynamic) < 0)
            goto internal;
        r = capture_frame(&c, co, locals, closure, globals, builtins, opts, st, &bk, &is_break);
    }
    PlanCtx pc = {&c, NULL, NULL, NULL};
    if (r) {
        pc.outvals = PyDict_New();
        pc.made = PyDict_New();
        if (!pc.outvals || !pc.made) {
            Py_CLEAR(pc.outvals);
            Py_CLEAR(pc.made);
            goto internal;
        }
        plan = plan_result(&pc, r);
        Py_CLEAR(pc.outvals);
        Py_CLEAR(pc.made);
        if (!plan && !cap_failed(&c))
            goto internal;
        has_mutation = c.mutated != NULL;   /* the plan writes back into outside lists, dicts */
    }
    if (!r || !plan) {
        if (PyErr_Occurred() && !cap_failed(&c))
            cap_fail_exc(&c, BR_INTERNAL);
        sj_err_clear();
        e = eager_entry(&c, co, opts, 1);
        goto done;
    }
    if (c.nops == 0 && !is_break) {
        /* nothing to compile: the frame only does Python work. Like torch ("skipping
         * because no content in function call"), the code is not looked at again until
         * reset(), whatever later calls pass. */
        e = entry_new();
        if (e) {
            e->action = ENTRY_EAGER;
            e->reason = PyUnicode_FromString("no tensor ops in the frame");
        }
        if (st->skip != 2 && st->skip != SKIP_DISABLED_WITH_CALLEES)
            st->skip = 1;
        goto done;
    }
    if (add_final_guards(&c) < 0)
        goto internal;
    PyObject *violation = NULL;
    if (symb_finish(&c, &violation) < 0)
        goto internal;
    if (violation) {
        PyErr_SetObject(sj_raise_class(SjConstraintViolation), violation);
        Py_DECREF(violation);
        goto done_err;
    }
    if (c.nops > 0 || c.g->noutputs > 0) {
        /* hand the graph to the backend */
        PyObject *name = PyUnicode_FromFormat("__compiled_fn_%ld", ++graph_counter);
        if (!name)
            goto internal;
        Graph *g = c.g;
        c.g = NULL;
        ninputs = g->ninputs;
        has_mutation |= g->has_mutation;
        gobj = graph_py_wrap(g, name);
        Py_DECREF(name);
        if (!gobj)
            goto internal;
        example = PyList_New(0);
        if (!example)
            goto internal;
        /* example inputs: the live objects behind each graph input, in order */
        inputs = PyMem_Calloc((size_t)ninputs + 1, sizeof(int32_t));
        if (!inputs)
            goto internal;
        /* graph input i was made by wrap_tensor for the var at by_obj order */
        int32_t k = 0;
        for (int32_t i = 0; i < c.nby_obj && k < ninputs; i++) {
            Var *v = c.by_obj[i];
            inputs[k++] = v->src;
            if (PyList_Append(example, v->obj) < 0)
                goto internal;
        }
        ((SjGraphObject *)gobj)->verify_next = sj_config.verify_graphs;
        if (sj_log_on(LOG_GRAPH_CODE, SJ_INFO)) {
            PyObject *code = PyObject_GetAttrString(gobj, "code");
            if (code)
                sj_log(LOG_GRAPH_CODE, SJ_INFO, "TRACED GRAPH %U (%U %U:%d)\n%U", ((SjGraphObject *)gobj)->name,
                       co->co_qualname, co->co_filename, co->co_firstlineno, code);
            Py_XDECREF(code);
            sj_err_clear();
        }
        events_emit_graph(gobj);
        if (sj_trace_on)
            SJ_TRACE("graph", "(O)", gobj);
        double tb0 = now_s();
        compiled = PyObject_CallFunctionObjArgs(opts->backend, gobj, example, NULL);
        backend_s = now_s() - tb0;
        if (compiled && !PyCallable_Check(compiled)) {
            PyErr_Format(PyExc_TypeError, "the backend returned an object of type %s, which is not callable (a backend "
                         "returns a callable that runs the graph)", Py_TYPE(compiled)->tp_name);
            Py_CLEAR(compiled);
        }
        if (!compiled) {
            if (backend_failed(&c, opts) < 0)
                goto done_err;
            if (opts->fullgraph && opts->internal)
                goto internal_raise;
            e = eager_entry(&c, co, opts, 1);
            goto done;
        }
        sj_stats.graphs++;
        sj_stats.unique_graphs++;
    }
    e = entry_new();
    if (!e)
        goto done_err;
    e->action = is_break ? ENTRY_BREAK : ENTRY_GRAPH;
    e->inputs = inputs;
    inputs = NULL;
    e->ninputs = ninputs;
    e->compiled = compiled;
    compiled = NULL;
    e->graph = gobj;
    gobj = NULL;
    e->plan = plan;
    plan = NULL;
    e->has_mutation = has_mutation;
    if (is_break) {
        e->cont = bk.cont;
        bk.cont = NULL;
        e->nresume = bk.nresume;
        for (int i = 0; i < e->nresume; i++)
            if (!(e->resume[i] = PyWeakref_NewRef(bk.resume[i], NULL))) {
                cache_entry_free(e);   /* out of memory; it takes NULL slots */
                goto done_err;
            }
        PyObject *reason = reason_text(&c);
        if (reason) {
            sj_stats.graph_breaks++;
            report_break(&c, co, reason);
            Py_DECREF(reason);
        }
        for (int i = 0; i < e->nresume; i++)
            if (bk.loop[i] && sj_log_on(LOG_GRAPH_BREAKS, SJ_INFO))
                sj_log(LOG_GRAPH_BREAKS, SJ_INFO,
                       "%U runs in the interpreter: the graph break in %U (%U:%d) lies inside a loop, and "
                       "a compiled resume would break there again on every iteration",
                       ((PyCodeObject *)bk.resume[i])->co_name, co->co_qualname, co->co_filename,
                       PyCode_Addr2Line(co, c.stop_pc * 2));
        sj_err_clear();
        if (sj_log_on(LOG_BYTECODE, SJ_INFO)) {
            log_code("MODIFIED BYTECODE (continuation of)", e->cont);
            for (int i = 0; i < e->nresume; i++)
                log_code("RESUME FUNCTION BYTECODE", bk.resume[i]);
        }
    }
    goto done;

internal:
    if (PyErr_Occurred())
        cap_fail_exc(&c, BR_INTERNAL);
    else if (!cap_failed(&c))
        cap_fail(&c, BR_INTERNAL, "capture failed");
internal_raise:
    e = eager_entry(&c, co, opts, 1);
    goto done;
done_err:
    e = NULL;
done:
    resume_code_clear(&bk);
    Py_XDECREF(before);
    PyMem_Free(inputs);
    Py_XDECREF(plan);
    Py_XDECREF(example);
    Py_XDECREF(gobj);
    Py_XDECREF(compiled);
    if (e && sj_err_deferred()) {
        /* interrupted while compiling: nothing of this capture is kept (its reason would
         * be the interrupt, not the frame); the hook raises the interrupt */
        cache_entry_free(e);
        e = NULL;
    }
    if (e && add_options_guard(&c, opts) < 0) {
        cache_entry_free(e);
        e = NULL;
        sj_err_clear();   /* out of memory: the frame runs eagerly this time */
    }
    if (e && c.src.n > GUARD_MAX_SOURCES) {
        /* a list of 30,000 values crossing a break is guarded item by item: past the limit
         * the code is not compiled again (until a reset); this call runs in the interpreter */
        cache_entry_free(e);
        e = NULL;
        PyObject *reason = PyUnicode_FromFormat("%s: the frame's guards would read %d values (at most %d); "
                                                "it runs in the interpreter", break_messages[BR_UNSUPPORTED_VALUE],
                                                (int)c.src.n, GUARD_MAX_SOURCES);
        if (reason && opts->fullgraph) {
            PyErr_Format(sj_raise_class(SjUnsupported), "shapejit (fullgraph=True) cannot capture %U: %U", co->co_qualname, reason);
        } else if (reason) {
            st->skip = 1;
            sj_stats.graph_breaks++;
            sj_stats.eager_frames++;
            report_break(&c, co, reason);
        }
        Py_XDECREF(reason);
        if (!opts->fullgraph)
            sj_err_clear();
    }
    if (e) {
        int r = code_cache_insert(st, e, &c.src, &c.guards);
        if (r != 0) {
            cache_entry_free(e);   /* another thread's compile of this code won; or no memory */
            e = NULL;
        } else {
            e->compile_id = st->ncompiles++;
            sj_stats.cache_entries++;
            log_guards(co, st, e);
        }
    }
    nshape_guards = c.shape.nrels;
    capture_release(&c);
    symb_pgo_save(st, co, closure);
    double dt_s = now_s() - t0;
    sj_stats.compile_time_s += dt_s;
    events_emit_compile_time(dt_s);
    if (sj_trace_on)
        trace_compile_end(co, st, e, nshape_guards, backend_s, dt_s);
    return e;
}
