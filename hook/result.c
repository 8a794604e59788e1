/* The result plan: what a compiled frame returns, planned once from the capture's values
 * (which graph outputs, frame inputs, constants and objects made during capture it is
 * made of) and built from the graph's outputs at every call. See result.h. */
#include "result.h"
#include "compile.h"
#include "../core/errors.h"

/* ------------------------------------------------------------------- plan ---- */
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
                     v->kind == VK_ITER || (v->kind == VK_CONST && is_mutable_builtin(v->obj)));
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

/* An iterator: a list iterator as the list at a position, any other as the real one at
 * its state from its recipe (iters.c); NULL with *skip set for one that is not rebuilt (a
 * dict's iterator, a generator). */
static PyObject *plan_iter(PlanCtx *p, Var *v, int *skip)
{
    Capture *c = p->c;
    if (v->u.iter.live && v->u.iter.live->kind == VK_LIST) {
        PyObject *l = plan_for(p, v->u.iter.live);
        return l ? Py_BuildValue("(sNi)", "i", l, (int)v->u.iter.pos) : NULL;
    }
    if (v->u.iter.live || v->u.iter.gen) {
        *skip = 1;   /* a dict's iterator, a generator: not rebuilt */
        return NULL;
    }
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

/* A dict made during capture, or an OrderedDict / Counter / defaultdict. */
static PyObject *plan_dict(PlanCtx *p, Var *v)
{
    if (var_dict_force(p->c, v) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "shapejit: a dict read through its source could not be read");
        return NULL;
    }
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

/* An object made during capture: its type, attribute names and attribute plans. */
static PyObject *plan_userobj(PlanCtx *p, Var *v)
{
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

/* A bound method: its function (or its name) and receiver. */
static PyObject *plan_method(PlanCtx *p, Var *v)
{
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
        if (v->untracked)   /* an outside set reached without a source: itself (never written) */
            return Py_BuildValue("(sO)", "c", v->orig);
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
        if (v->untracked)   /* one reached without a source: itself (writes into it break) */
            return Py_BuildValue("(sO)", "c", v->orig);
        break;
    case VK_DICTVIEW: {
        PyObject *d = plan_for(p, v->u.dview.dict);
        return d ? Py_BuildValue("(ssN)", "v", var_view_method(v), d) : NULL;
    }
    case VK_ITER: {
        int skip = 0;
        PyObject *r = plan_iter(p, v, &skip);
        if (r || !skip)
            return r;
        break;
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
    case VK_DICT:
        return plan_dict(p, v);
    case VK_USEROBJ:
        return plan_userobj(p, v);
    case VK_METHOD:
        return plan_method(p, v);
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
        PyObject *item =
            val ? Py_BuildValue("(iONi)", (int)w->target->src, w->name, val, w->item ? 2 : w->generic) : NULL;
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

PyObject *result_plan(Capture *c, Var *r)
{
    PlanCtx pc = {c, PyDict_New(), PyDict_New(), NULL};
    PyObject *plan = pc.outvals && pc.made ? plan_result(&pc, r) : NULL;
    Py_XDECREF(pc.outvals);
    Py_XDECREF(pc.made);
    return plan;
}

/* ------------------------------------------------------------------ build ---- */

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

static PyObject *build(PyObject *plan, PyObject *outputs, BuildCtx *bc);

/* ("f", fn, (args...), kwnames[, state]): fn called, then given state. */
static PyObject *build_call(PyObject *plan, PyObject *outputs, BuildCtx *bc)
{
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

/* ("w", write-backs, result, attribute writes): the result, with the frame's writes into
 * outside objects done. */
static PyObject *build_writes(PyObject *plan, PyObject *outputs, BuildCtx *bc)
{
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
            goto done;
        PyTuple_SET_ITEM(objs, i, Py_NewRef(obj));
        PyTuple_SET_ITEM(vals, i, val);
    }
    if (!objs || !vals)
        goto done;
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
            rc = how == 2   ? PyObject_SetItem(obj, name, val)
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
done:
    Py_XDECREF(objs);
    Py_XDECREF(vals);
    return result;
}

/* ("t"|"l", items), ("T", type, items), ("d"|"D", keys, items): a tuple, list, tuple
 * subclass or dict. */
static PyObject *build_seq(PyObject *plan, PyObject *outputs, BuildCtx *bc, char tag)
{
    PyObject *items = PyTuple_GET_ITEM(plan, tag == 'T' || tag == 'd' || tag == 'D' ? 2 : 1);
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
    if (tag == 't')
        return vals;
    if (tag == 'l') {
        PyObject *l = PySequence_List(vals);
        Py_DECREF(vals);
        return l;
    }
    if (tag == 'T') {
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
        PyObject *k = tag == 'D' ? build(PyTuple_GET_ITEM(keys, i), outputs, bc) : Py_NewRef(PyTuple_GET_ITEM(keys, i));
        if (!k || PyDict_SetItem(d, k, PyTuple_GET_ITEM(vals, i)) < 0)
            Py_CLEAR(d);
        Py_XDECREF(k);
    }
    Py_DECREF(vals);
    return d;
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
    case 'f':
        return build_call(plan, outputs, bc);
    case 'v': {
        PyObject *d = build(PyTuple_GET_ITEM(plan, 2), outputs, bc);
        PyObject *view = d ? PyObject_CallMethodNoArgs(d, PyTuple_GET_ITEM(plan, 1)) : NULL;
        Py_XDECREF(d);
        return view;
    }
    case 'w':
        return build_writes(plan, outputs, bc);
    case 'g':
    case 'm': {
        /* a bound method: the function bound to its receiver, or looked up by name */
        PyObject *fn =
            tag[0] == 'g' ? Py_NewRef(PyTuple_GET_ITEM(plan, 1)) : build(PyTuple_GET_ITEM(plan, 1), outputs, bc);
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
    case 'D':
        return build_seq(plan, outputs, bc, tag[0]);
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
