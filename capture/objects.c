/* Objects made during capture: namedtuples (tuple vars with a subtype) and instances of
 * plain user classes such as dataclasses (VK_USEROBJ: a type and a dict of attributes).
 * Their __init__ is inlined; attribute writes stay inside the capture, so nothing needs
 * replaying unless the object escapes (then the result plan rebuilds it). */
#include "capture.h"
#include "../vocab/libs.h"
#include "../core/errors.h"

PyObject *objects_fields(PyTypeObject *t)
{
    PyObject *f = PyObject_GetAttrString((PyObject *)t, "_fields");
    if (!f) {
        sj_err_clear();
        f = PyObject_GetAttrString((PyObject *)t, "__match_args__");
    }
    if (!f) {
        sj_err_clear();
        return NULL;
    }
    if (!PyTuple_Check(f)) {
        Py_DECREF(f);
        return NULL;
    }
    return f;
}

static Var *construct_namedtuple(Capture *c, PyTypeObject *t, PyObject *fields, Var **args, int32_t nargs,
                                 PyObject *kwnames)
{
    Py_ssize_t nf = PyTuple_GET_SIZE(fields);
    int32_t nkw = kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0;
    int32_t npos = nargs - nkw;
    Var **items = cap_alloc(c, sizeof(Var *) * (size_t)(nf + 1));
    if (!items)
        return NULL;
    if (npos > nf) {
        cap_fail(c, BR_USER_EXCEPTION, "%s() takes %zd arguments", t->tp_name, nf);
        return NULL;
    }
    for (int32_t i = 0; i < npos; i++)
        items[i] = args[i];
    for (int32_t k = 0; k < nkw; k++) {
        PyObject *kn = PyTuple_GET_ITEM(kwnames, k);
        Py_ssize_t i;
        for (i = 0; i < nf; i++)
            if (PyUnicode_Compare(PyTuple_GET_ITEM(fields, i), kn) == 0)
                break;
        if (i == nf) {
            cap_fail(c, BR_USER_EXCEPTION, "%s() got an unexpected keyword '%U'", t->tp_name, kn);
            return NULL;
        }
        items[i] = args[npos + k];
    }
    PyObject *defaults = PyObject_GetAttrString((PyObject *)t, "_field_defaults");
    if (!defaults)
        sj_err_clear();
    for (Py_ssize_t i = 0; i < nf; i++) {
        if (items[i])
            continue;
        PyObject *d = defaults && PyDict_Check(defaults) ? PyDict_GetItem(defaults, PyTuple_GET_ITEM(fields, i)) : NULL;
        if (!d || !(items[i] = wrap_untracked(c, d))) {
            Py_XDECREF(defaults);
            if (!cap_failed(c))
                cap_fail(c, BR_USER_EXCEPTION, "%s() missing field %U", t->tp_name, PyTuple_GET_ITEM(fields, i));
            return NULL;
        }
    }
    Py_XDECREF(defaults);
    Var *v = var_seq(c, VK_TUPLE, items, (int32_t)nf);
    if (v && cap_keep(c, (PyObject *)t))
        v->u.seq.subtype = t;
    return v;
}

static Var *construct_record(Capture *c, PyTypeObject *t, PyObject *dfields, Var **args, int32_t nargs,
                             PyObject *kwnames);

/* A class capture can instantiate: a Python-level __init__, object's __new__, no metaclass
 * magic, no __slots__-only storage surprises. */
static int plain_class(PyTypeObject *t)
{
    if (t->tp_new != PyBaseObject_Type.tp_new)
        return 0;
    /* type, or abc.ABCMeta (abstract base classes such as typing's Sequence[...]): neither
     * changes how an instance is made */
    if (Py_TYPE(t) != &PyType_Type && strcmp(Py_TYPE(t)->tp_name, "ABCMeta") != 0)
        return 0;
    if (t->tp_flags & Py_TPFLAGS_IS_ABSTRACT)
        return 0;
    return (t->tp_flags & Py_TPFLAGS_HEAPTYPE) != 0;
}

/* 1 when name, looked up on t, is a function of torch's own code: nn.Module's or a torch
 * layer's (or the wrapper torch._dynamo installs over nn.Module.__init__ once it has
 * run). */
static int torch_slot(PyTypeObject *t, const char *name)
{
    PyObject *n = PyUnicode_InternFromString(name);   /* new */
    PyObject *f = n ? _PyType_Lookup(t, n) : NULL;   /* borrowed */
    Py_XDECREF(n);
    PyObject *m = f && PyFunction_Check(f) ? PyFunction_GET_MODULE(f) : NULL;   /* borrowed */
    const char *mn = m && PyUnicode_Check(m) ? PyUnicode_AsUTF8(m) : NULL;
    sj_err_clear();
    return mn && !strncmp(mn, "torch.", 6);
}

/* An nn.Module class whose instances are made by torch's code alone: a torch layer, or a
 * subclass adding methods (a forward) but no __init__, __new__, __setattr__ or metaclass
 * of its own. Making one runs nothing of the user's, so capture can make it now, as it
 * makes torch's layers. */
static int torch_made_module(PyTypeObject *t)
{
    return t->tp_new == PyBaseObject_Type.tp_new && Py_TYPE(t) == &PyType_Type &&
           !(t->tp_flags & Py_TPFLAGS_IS_ABSTRACT) && torch_slot(t, "__init__") && torch_slot(t, "__setattr__");
}

/* cls(*args) for a torch layer, made now to see whether it holds parameters: the global
 * generator's state is put back afterwards, so capture draws nothing from it (the layer's
 * initialisation would, and eager draws only at run time). New reference, or NULL with the
 * failure recorded. */
static PyObject *probe_module(Capture *c, PyObject *cls, Var **args, int32_t nargs, PyObject *kwnames)
{
    PyObject *torch = PyImport_ImportModule("torch");
    PyObject *gen = torch ? PyObject_GetAttrString(torch, "default_generator") : NULL;
    PyObject *state = gen ? PyObject_CallMethod(gen, "get_state", NULL) : NULL;
    Py_XDECREF(torch);
    if (!state) {
        Py_XDECREF(gen);
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    PyObject *m = cap_call_live(c, cls, args, nargs, kwnames);
    PyObject *ft, *fv, *ftb;   /* strong: the construction's error, kept across set_state */
    PyErr_Fetch(&ft, &fv, &ftb);
    /* a layer that drew from the generator while being made must be made at run time,
     * where eager draws: compare the states */
    int drew = 0;
    if (m) {
        PyObject *after = PyObject_CallMethod(gen, "get_state", NULL);
        PyObject *tm = after ? PyImport_ImportModule("torch") : NULL;
        PyObject *eq = tm ? PyObject_CallMethod(tm, "equal", "OO", after, state) : NULL;
        drew = eq != Py_True;   /* unknown counts as drawn: the module is then made at run time */
        Py_XDECREF(eq);
        Py_XDECREF(tm);
        Py_XDECREF(after);
        sj_err_clear();
    }
    PyObject *r = PyObject_CallMethod(gen, "set_state", "O", state);
    Py_DECREF(state);
    Py_DECREF(gen);
    if (!r) {
        Py_XDECREF(m);
        Py_XDECREF(ft);
        Py_XDECREF(fv);
        Py_XDECREF(ftb);
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    Py_DECREF(r);
    PyErr_Restore(ft, fv, ftb);
    if (m && drew) {
        Py_DECREF(m);
        cap_fail(c, BR_UNSUPPORTED_CALL,
                 "constructing %s inside the function draws from the global generator: "
                 "it is made at run time, in the interpreter",
                 sj_type_name(c, (PyTypeObject *)cls));
        return NULL;
    }
    return m;
}

Var *objects_construct(Capture *c, PyObject *cls, Var **args, int32_t nargs, PyObject *kwnames, int *handled)
{
    *handled = 0;
    if (!PyType_Check(cls))
        return NULL;
    Var *made = collections_construct(c, cls, args, nargs, kwnames, handled);
    if (*handled)
        return made;
    PyTypeObject *t = (PyTypeObject *)cls;
    if (PyType_IsSubtype(t, &PyTuple_Type) && t != &PyTuple_Type) {
        PyObject *fields = objects_fields(t);
        if (!fields || (libs.size_type && cls == libs.size_type)) {
            Py_XDECREF(fields);
            return NULL;
        }
        *handled = 1;
        Var *r = construct_namedtuple(c, t, fields, args, nargs, kwnames);
        Py_DECREF(fields);
        return r;
    }
    if (PyType_IsSubtype(t, &PyDict_Type)) {
        PyObject *dfields = PyObject_GetAttrString(cls, "__dataclass_fields__");
        if (!dfields) {
            sj_err_clear();
            return NULL;
        }
        *handled = 1;
        Var *r = PyDict_Check(dfields) ? construct_record(c, t, dfields, args, nargs, kwnames) : NULL;
        if (!r && !cap_failed(c))
            cap_fail(c, BR_UNSUPPORTED_CALL, "constructing %s", sj_type_name(c, t));
        Py_DECREF(dfields);
        return r;
    }
    if (libs.module_type && PyType_IsSubtype(t, (PyTypeObject *)libs.module_type)) {
        /* torch's own stateless layers (nn.Dropout(0.3), nn.ReLU()), and subclasses whose
         * making runs only torch's code (transformers' SiLUActivation, a forward of its
         * own on nn.Module), built in the body: make the object now; it never escapes, and
         * writes to it (drop.eval()) stay in the capture. A module with parameters is made
         * at run time, by the interpreter (as torch.compile does): its initialisation draws
         * from the global generator, which the eager program consumes at that point of
         * every call. */
        *handled = 1;
        if (!torch_made_module(t) || !var_all_const(args, nargs)) {
            cap_fail(c, BR_UNSUPPORTED_CALL,
                     "constructing %s (an nn.Module) inside the function: it is made "
                     "at run time, in the interpreter",
                     sj_type_name(c, t));
            return NULL;
        }
        PyObject *m = probe_module(c, cls, args, nargs, kwnames);
        if (!m)
            return NULL;
        PyObject *params = PyObject_CallMethod(m, "parameters", NULL);
        PyObject *first = params ? PyIter_Next(params) : NULL;
        Py_XDECREF(params);
        if (first || PyErr_Occurred()) {
            Py_XDECREF(first);
            Py_DECREF(m);
            sj_err_clear();
            cap_fail(c, BR_UNSUPPORTED_CALL,
                     "constructing %s (a module with parameters) inside the function: "
                     "it is made at run time, in the interpreter",
                     sj_type_name(c, t));
            return NULL;
        }
        Var *v = wrap_untracked(c, m);
        Py_DECREF(m);
        if (v)
            v->fresh = 1;
        return v;
    }
    if (!plain_class(t))
        return NULL;
    static PyObject *s_init;
    if (!s_init && !(s_init = PyUnicode_InternFromString("__init__")))
        return NULL;
    PyObject *init = _PyType_Lookup(t, s_init);   /* borrowed */
    *handled = 1;
    if (!cap_keep(c, cls))
        return NULL;
    Var *o = var_new(c, VK_USEROBJ);
    Var *attrs = o ? var_dict(c) : NULL;
    if (!attrs)
        return NULL;
    o->u.uobj.type = t;
    o->u.uobj.attrs = attrs;
    if (init && PyFunction_Check(init)) {
        Var *fn = wrap_untracked(c, init);
        Var **all = fn ? cap_alloc(c, sizeof(Var *) * (size_t)(nargs + 1)) : NULL;
        if (!all)
            return NULL;
        all[0] = o;
        if (nargs)
            memcpy(all + 1, args, sizeof(Var *) * (size_t)nargs);
        if (!call_var(c, fn, all, nargs + 1, kwnames))
            return NULL;
        return o;
    }
    if (nargs == 0)
        return o;   /* object.__init__ */
    cap_fail(c, BR_UNSUPPORTED_CALL, "constructing %s (its __init__ is not Python code)", sj_type_name(c, t));
    return NULL;
}

/* The name a transformers config's __getattribute__ / __setattr__ reads or writes for
 * name: attribute_map's target for one of its keys (a class attribute), else name itself
 * (borrowed either way; kept alive by the class). NULL with the failure set. */
static PyObject *config_name(Capture *c, PyTypeObject *t, PyObject *name)
{
    if (!attr_is_config_type(t) || PyUnicode_CompareWithASCIIString(name, "attribute_map") == 0)
        return name;
    PyObject *map = PyObject_GetAttrString((PyObject *)t, "attribute_map");   /* new */
    PyObject *to = map && PyDict_Check(map) ? PyDict_GetItemWithError(map, name) : NULL;   /* borrowed */
    if (!map || PyErr_Occurred()) {
        Py_XDECREF(map);
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    PyObject *r = to && PyUnicode_Check(to) ? cap_keep(c, to) : name;
    Py_DECREF(map);
    return r;
}

Var *objects_attr_load(Capture *c, Var *o, PyObject *name)
{
    if (!o->u.uobj.record && PyUnicode_CompareWithASCIIString(name, "__dict__") == 0)
        return o->u.uobj.attrs;   /* the instance dict itself: writes into it are attribute writes */
    if (!(name = config_name(c, o->u.uobj.type, name)))
        return NULL;
    Var *key = var_const(c, name);
    if (!key)
        return NULL;
    int found;
    Var *v = var_dict_get(c, o->u.uobj.attrs, key, &found);
    if (found)
        return v;
    if (o->u.uobj.record) {
        const char *n = PyUnicode_AsUTF8(name);
        static const char *const methods[] = {"to_tuple", "keys",        "values",  "items",
                                              "get",      "__getitem__", "__len__", "__contains__"};
        for (size_t i = 0; n && i < sizeof methods / sizeof *methods; i++)
            if (!strcmp(n, methods[i])) {
                return var_method(c, o, key);   /* key, a name: calls.c dispatches records by name */
            }
    }
    if (PyErr_Occurred())
        return NULL;
    if (PyUnicode_CompareWithASCIIString(name, "__class__") == 0)
        return wrap_untracked(c, (PyObject *)o->u.uobj.type);   /* dataclass __eq__ reads it */
    PyObject *descr = _PyType_Lookup(o->u.uobj.type, name);   /* borrowed */
    static PyObject *getattr_name;   /* strong, interned */
    if (!getattr_name && !(getattr_name = PyUnicode_InternFromString("__getattr__")))
        return NULL;
    PyObject *fallback = descr ? NULL : _PyType_Lookup(o->u.uobj.type, getattr_name);   /* borrowed */
    if (fallback && PyFunction_Check(fallback)) {
        /* the class's __getattr__ answers what lookup did not find */
        Var *fn = wrap_untracked(c, fallback);
        Var *a[2] = {o, key};
        return fn ? call_var(c, fn, a, 2, NULL) : NULL;
    }
    if (!descr) {
        PyErr_Format(PyExc_AttributeError, "'%s' object has no attribute '%U'", o->u.uobj.type->tp_name, name);
        cap_fail_exc(c, BR_USER_EXCEPTION);
        return NULL;
    }
    if (PyFunction_Check(descr)) {
        return var_method(c, o, wrap_untracked(c, descr));
    }
    if (Py_TYPE(descr) == &PyProperty_Type) {
        return attr_property(c, o, descr, name, o->u.uobj.type->tp_name);
    }
    if (Py_TYPE(descr) == &PyStaticMethod_Type || Py_TYPE(descr) == &PyClassMethod_Type ||
        Py_TYPE(descr)->tp_descr_get == NULL) {
        PyObject *v2 = PyObject_GetAttr((PyObject *)o->u.uobj.type, name);
        if (!v2) {
            cap_fail_exc(c, BR_USER_EXCEPTION);
            return NULL;
        }
        Var *r = wrap_untracked(c, v2);
        Py_DECREF(v2);
        return r;
    }
    cap_fail(c, BR_UNSUPPORTED_VALUE, "attribute '%U' of %s (%s)", name, o->u.uobj.type->tp_name,
             sj_type_a(c, Py_TYPE(descr), NULL));
    return NULL;
}

int objects_attr_store(Capture *c, Var *o, PyObject *name, Var *val)
{
    if (attr_is_config_type(o->u.uobj.type) &&
        (!(name = config_name(c, o->u.uobj.type, name)) || attr_config_validate(c, o->u.uobj.type, name, val) < 0))
        return -1;
    Var *key = var_const(c, name);
    if (!key)
        return -1;
    return var_dict_set(c, o->u.uobj.attrs, key, val);
}

int objects_attr_delete(Capture *c, Var *o, PyObject *name)
{
    static PyObject *s_delattr;   /* strong, interned */
    if (!s_delattr && !(s_delattr = PyUnicode_InternFromString("__delattr__")))
        return cap_fail_exc(c, BR_INTERNAL);
    if (o->u.uobj.record || _PyType_Lookup(o->u.uobj.type, s_delattr) != _PyType_Lookup(&PyBaseObject_Type, s_delattr))
        return cap_fail(c, BR_SIDE_EFFECT, "delattr() of a %s made in the frame", o->u.uobj.type->tp_name);
    if (cap_note_change(c, o, 0) < 0)
        return -1;
    Var *key = var_const(c, name);
    int r = key ? var_dict_del(c, o->u.uobj.attrs, key) : -1;
    if (r == 0) {   /* object.__delattr__ of an attribute the instance does not hold */
        PyErr_Format(PyExc_AttributeError, "'%s' object has no attribute '%U'", o->u.uobj.type->tp_name, name);
        return cap_fail_exc(c, BR_USER_EXCEPTION);
    }
    return r < 0 ? cap_fail_exc(c, BR_INTERNAL) : 0;
}

/* ---------------------------------------------------------------- records ---- */
/* A dataclass that is also a dict (transformers' ModelOutput): captured as its fields; at
 * run time the result plan calls the class with them, so its own __post_init__ runs. */

static Var *construct_record(Capture *c, PyTypeObject *t, PyObject *dfields, Var **args, int32_t nargs,
                             PyObject *kwnames)
{
    int32_t nkw = kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0;
    int32_t npos = nargs - nkw;
    Var *o = var_new(c, VK_USEROBJ);
    Var *attrs = o ? var_dict(c) : NULL;
    if (!attrs || !cap_keep(c, (PyObject *)t))
        return NULL;
    o->u.uobj.type = t;
    o->u.uobj.attrs = attrs;
    o->u.uobj.record = 1;
    Py_ssize_t pos = 0, i = 0;
    PyObject *name, *field;
    PyObject *missing = NULL;
    PyObject *dc = PyImport_ImportModule("dataclasses");
    missing = dc ? PyObject_GetAttrString(dc, "MISSING") : NULL;
    Py_XDECREF(dc);
    if (!missing) {
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    while (PyDict_Next(dfields, &pos, &name, &field)) {
        Var *val = NULL;
        if (i < npos)
            val = args[i];
        for (int32_t k = 0; !val && k < nkw; k++)
            if (PyUnicode_Compare(PyTuple_GET_ITEM(kwnames, k), name) == 0)
                val = args[npos + k];
        if (!val) {
            PyObject *d = PyObject_GetAttrString(field, "default");
            if (!d || d == missing) {
                Py_XDECREF(d);
                Py_DECREF(missing);
                sj_err_clear();
                cap_fail(c, BR_USER_EXCEPTION, "%s() missing field %U", t->tp_name, name);
                return NULL;
            }
            val = wrap_untracked(c, d);
            Py_DECREF(d);
            if (!val) {
                Py_DECREF(missing);
                return NULL;
            }
        }
        Var *key = var_const(c, name);
        if (!key || var_dict_set(c, attrs, key, val) < 0) {
            Py_DECREF(missing);
            return NULL;
        }
        i++;
    }
    Py_DECREF(missing);
    return o;
}

static int is_none(Var *v)
{
    return v && v->kind == VK_CONST && v->obj == Py_None;
}

Var *objects_record_tuple(Capture *c, Var *o)
{
    Var *t = var_seq(c, VK_TUPLE, NULL, 0);
    Var *a = o->u.uobj.attrs;
    for (int32_t i = 0; t && i < a->u.dict.n; i++)
        if (!is_none(a->u.dict.vals[i]) && var_seq_append(c, t, a->u.dict.vals[i]) < 0)
            return NULL;
    return t;
}

Var *objects_record_call(Capture *c, Var *o, const char *name, Var **args, int32_t nargs, int *handled)
{
    Var *a = o->u.uobj.attrs;
    *handled = 1;
    if (!strcmp(name, "to_tuple") && nargs == 0)
        return objects_record_tuple(c, o);
    if ((!strcmp(name, "keys") || !strcmp(name, "values") || !strcmp(name, "items")) && nargs == 0) {
        return var_dict_view(c, a, name[0], 1);
    }
    if (!strcmp(name, "get") && (nargs == 1 || nargs == 2)) {
        int found;
        Var *v = var_dict_get(c, a, args[0], &found);
        if (found && !is_none(v))
            return v;
        return nargs == 2 ? args[1] : var_const(c, Py_None);
    }
    if (!strcmp(name, "__getitem__") && nargs == 1 && var_is_const(args[0])) {
        if (PyUnicode_Check(args[0]->obj)) {
            int found;
            Var *v = var_dict_get(c, a, args[0], &found);
            if (found && !is_none(v))
                return v;
            PyErr_SetObject(PyExc_KeyError, args[0]->obj);
            cap_fail_exc(c, BR_USER_EXCEPTION);
            return NULL;
        }
        Var *t = objects_record_tuple(c, o);
        return t ? op_subscr(c, t, args[0]) : NULL;
    }
    if (!strcmp(name, "__len__") && nargs == 0) {
        Var *t = objects_record_tuple(c, o);
        return t ? op_len(c, t) : NULL;
    }
    if (!strcmp(name, "__contains__") && nargs == 1 && var_is_const(args[0])) {
        int found;
        Var *v = var_dict_get(c, a, args[0], &found);
        return var_const(c, found && !is_none(v) ? Py_True : Py_False);
    }
    *handled = 0;
    return NULL;
}

/* ------------------------------------------------------------------ super ---- */

Var *objects_cell_contents(Capture *c, Var *v)
{
    if (!v || v->kind != VK_CELL)
        return v;
    if (v->u.cell.contents)
        return v->u.cell.contents;
    if (v->u.cell.real && PyCell_GET(v->u.cell.real))
        return v->u.cell.contents = wrap_value(c, PyCell_GET(v->u.cell.real), v->src);
    return NULL;
}

Var *objects_super(Capture *c, Var **args, int32_t nargs)
{
    Var *cls = NULL, *self = NULL;
    if (nargs == 2) {
        cls = args[0];
        self = args[1];
    } else if (nargs == 0 && c->frame) {
        EvalFrame *f = c->frame;
        PyCodeObject *co = f->code;
        for (int i = 0; i < co->co_nlocalsplus; i++)
            if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(co->co_localsplusnames, i), "__class__") == 0)
                cls = objects_cell_contents(c, f->locals[i]);
        if (co->co_argcount > 0) {
            if (!f->locals[0] && f->pending && f->pending[0]) {
                /* the compiled frame's own self, not read yet */
                int32_t s = sources_add(&c->src, SRC_LOCAL, -1, 0, PyTuple_GET_ITEM(co->co_localsplusnames, 0), NULL);
                if (s < 0 || !(f->locals[0] = wrap_value(c, f->pending[0], s)))
                    return NULL;
                f->pending[0] = NULL;
            }
            self = objects_cell_contents(c, f->locals[0]);
        }
    }
    if (!cls || !self || !cls->obj || !PyType_Check(cls->obj)) {
        cap_fail(c, BR_UNSUPPORTED_CALL, "super() in this form");
        return NULL;
    }
    Var *s = var_new(c, VK_SUPER);
    if (s) {
        s->u.sup.cls = (PyTypeObject *)cls->obj;
        s->u.sup.self = self;
    }
    return s;
}

Var *objects_super_attr(Capture *c, Var *s, PyObject *name)
{
    Var *self = s->u.sup.self;
    PyTypeObject *t = self->kind == VK_USEROBJ ? self->u.uobj.type : self->obj ? Py_TYPE(self->obj) : NULL;
    if (!t || !t->tp_mro) {
        cap_fail(c, BR_UNSUPPORTED_VALUE, "super() of %s", var_a(c, self));
        return NULL;
    }
    PyObject *mro = t->tp_mro;
    Py_ssize_t n = PyTuple_GET_SIZE(mro), i = 0;
    while (i < n && PyTuple_GET_ITEM(mro, i) != (PyObject *)s->u.sup.cls)
        i++;
    for (i++; i < n; i++) {
        PyObject *d = ((PyTypeObject *)PyTuple_GET_ITEM(mro, i))->tp_dict;
        PyObject *attr = d ? PyDict_GetItemWithError(d, name) : NULL;
        if (!attr) {
            if (PyErr_Occurred())
                return NULL;
            continue;
        }
        return var_method(c, self, wrap_untracked(c, attr));
    }
    cap_fail(c, BR_UNSUPPORTED_VALUE, "super().%U not found", name);
    return NULL;
}

/* ------------------------------------------------- identity and equality ---- */
/* `is`, `==`, `!=`, id() and hash() of user objects. An object from outside is held by a
 * var guarded by its type only, so anything that depends on which object it is (identity,
 * the default __eq__ and __hash__, id()) adds a guard on that: OBJECT_ALIASING or
 * NO_TENSOR_ALIASING between two sources, ID_MATCH against an object capture holds. An
 * object made in the frame is one var, so identity is the var's. A class's own __eq__,
 * __ne__ and __hash__ (Python functions) are inlined, as the interpreter would call them. */

/* An outside object: identity matters and is not pinned by its guards yet. */
static int sourced_object(const Var *v)
{
    return v->src >= 0 && v->obj && v->kind != VK_CONST && v->kind != VK_TENSOR && v->kind != VK_SYMINT &&
           v->kind != VK_GSCALAR && v->kind != VK_TUPLE;
}

static PyTypeObject *var_pytype(const Var *v)
{
    if (v->kind == VK_USEROBJ)
        return v->u.uobj.type;
    if (v->kind == VK_TENSOR || v->kind == VK_SYMINT || v->kind == VK_GSCALAR)
        return NULL;
    return v->obj ? Py_TYPE(v->obj) : NULL;
}

/* Guard that the objects at sources a and b are (same) or are not the same object. */
static int guard_pair(Capture *c, int32_t a, int32_t b, int same)
{
    if (a == b)
        return 0;
    Guard g;
    memset(&g, 0, sizeof g);
    g.src = g.src2 = -1;
    if (same) {
        g.kind = GK_SAME_OBJECT;
        g.src = b;
        g.src2 = a;
        return guards_add(&c->guards, &g);
    }
    int32_t pair[2] = {a < b ? a : b, a < b ? b : a};
    for (int32_t i = 0; i < c->guards.n; i++) {
        const Guard *o = &c->guards.g[i];
        if (o->kind == GK_DISTINCT && o->nsrcs == 2 && o->srcs[0] == pair[0] && o->srcs[1] == pair[1])
            return 0;
    }
    g.kind = GK_DISTINCT;
    g.srcs = pair;   /* copied by guards_add */
    g.nsrcs = 2;
    return guards_add(&c->guards, &g);
}

int objects_is(Capture *c, Var *a, Var *b, int *same)
{
    if (a == b) {
        *same = 1;
        return 0;
    }
    if (a->kind == VK_USEROBJ || b->kind == VK_USEROBJ) {
        /* an object made in the frame is one var wherever it is held: any other var is
         * another object */
        *same = 0;
        return 0;
    }
    int sa = sourced_object(a), sb = sourced_object(b);
    if (!sa && !sb)
        return 1;
    if (!a->obj || !b->obj || a->kind == VK_TENSOR || b->kind == VK_TENSOR)
        return 1;
    *same = a->obj == b->obj;
    if (Py_TYPE(a->obj) != Py_TYPE(b->obj) && (!sa || !sb || !*same))
        return 0;   /* the type guards already tell them apart */
    if (sa && sb)
        return guard_pair(c, a->src, b->src, *same) < 0 ? -1 : 0;
    Var *s = sa ? a : b;
    if (!cap_keep(c, s->obj))
        return -1;
    return guard_add_simple(c, GK_ID_MATCH, s->src, s->obj) < 0 ? -1 : 0;
}

static PyObject *type_slot(PyTypeObject *t, const char *name)   /* borrowed or NULL */
{
    PyObject *n = PyUnicode_InternFromString(name);
    PyObject *r = n ? _PyType_Lookup(t, n) : NULL;
    Py_XDECREF(n);
    return r;
}

/* A type compared by a user-level protocol this file models: its __eq__ / __ne__ are
 * Python functions or object's own. */
static int user_compared(PyTypeObject *t)
{
    if (!t || !(t->tp_flags & Py_TPFLAGS_HEAPTYPE) || t->tp_richcompare == NULL)
        return 0;
    PyObject *base_eq = type_slot(&PyBaseObject_Type, "__eq__"), *base_ne = type_slot(&PyBaseObject_Type, "__ne__");
    PyObject *eq = type_slot(t, "__eq__"), *ne = type_slot(t, "__ne__");
    return (eq == base_eq || (eq && PyFunction_Check(eq))) && (ne == base_ne || (ne && PyFunction_Check(ne)));
}

static int is_notimpl(const Var *v)
{
    return v && v->kind == VK_CONST && v->obj == Py_NotImplemented;
}

/* x.<name>(y) when type(x) defines name as a Python function: the result var; *tried = 0
 * when it is object's own (which answers NotImplemented unless x is y). */
static Var *call_dunder(Capture *c, Var *x, Var *y, const char *name, int *tried)
{
    PyTypeObject *t = var_pytype(x);
    PyObject *fn = t ? type_slot(t, name) : NULL;
    *tried = 0;
    if (!fn || !PyFunction_Check(fn))
        return NULL;
    *tried = 1;
    Var *f = wrap_untracked(c, fn);
    Var *a[2] = {x, y};
    return f ? call_var(c, f, a, 2, NULL) : NULL;
}

/* The other operand of a user object in == / !=: a constant of a builtin type, whose own
 * comparison answers NotImplemented for a foreign type, so the user's method decides. */
static int plain_constant(const Var *v)
{
    if (!var_is_const(v))
        return 0;
    PyObject *o = v->obj;
    return o == Py_None || PyLong_CheckExact(o) || PyFloat_CheckExact(o) || PyUnicode_CheckExact(o) ||
           PyBool_Check(o) || PyTuple_CheckExact(o) || PyBytes_CheckExact(o);
}

Var *objects_compare(Capture *c, int cmp, Var *a, Var *b, int *handled)
{
    *handled = 0;
    if (cmp != Py_EQ && cmp != Py_NE)   /* orderings have no identity fallback */
        return NULL;
    PyTypeObject *ta = var_pytype(a), *tb = var_pytype(b);
    int ua = a->kind == VK_USEROBJ || (a->kind == VK_OBJECT && a->src >= 0 && user_compared(ta)),
        ub = b->kind == VK_USEROBJ || (b->kind == VK_OBJECT && b->src >= 0 && user_compared(tb));
    if (!(ua || ub) || (ua && !user_compared(ta)) || (ub && !user_compared(tb)))
        return NULL;
    if ((!ua && !plain_constant(a)) || (!ub && !plain_constant(b)))
        return NULL;
    *handled = 1;
    const char *name = cmp == Py_EQ ? "__eq__" : "__ne__";
    /* the reflected operand goes first when its type is a proper subclass of the other's */
    int swap = ta != tb && PyType_IsSubtype(tb, ta);
    Var *order[2][2] = {{swap ? b : a, swap ? a : b}, {swap ? a : b, swap ? b : a}};
    for (int k = 0; k < 2; k++) {
        Var *x = order[k][0], *y = order[k][1];
        int tried;
        Var *r = call_dunder(c, x, y, name, &tried);
        if (tried && !r)
            return NULL;
        if (tried && !is_notimpl(r))
            return r;
        if (!tried && cmp == Py_NE) {
            /* object.__ne__: the inverse of __eq__ unless that is NotImplemented */
            r = call_dunder(c, x, y, "__eq__", &tried);
            if (tried && !r)
                return NULL;
            if (tried && !is_notimpl(r)) {
                int t;
                if (op_truth(c, r, &t) < 0)
                    return NULL;
                return var_const(c, t ? Py_False : Py_True);
            }
        }
    }
    /* nobody answered: identity */
    int same;
    int h = objects_is(c, a, b, &same);
    if (h < 0)
        return NULL;
    if (h == 1) {
        cap_fail(c, BR_UNSUPPORTED_VALUE, "identity of %s and %s", var_a(c, a), var_a(c, b));
        return NULL;
    }
    return var_const(c, (same == (cmp == Py_EQ)) ? Py_True : Py_False);
}

Var *objects_id(Capture *c, Var *v)
{
    /* an untracked library object (a function, a class, a module) is the same object in
     * every run; a module var without a source may be one capture made (a Sequential slice) */
    if (sourced_object(v) ||
        (v->src < 0 && v->obj && (v->kind == VK_CALLABLE || v->kind == VK_FUNC || v->kind == VK_PYMODULE))) {
        if (!cap_keep(c, v->obj) || guard_add_simple(c, GK_ID_MATCH, v->src, v->obj) < 0)
            return NULL;
        return var_const_steal(c, PyLong_FromVoidPtr(v->obj));
    }
    cap_fail(c, BR_UNSUPPORTED_CALL, "id() of %s made or computed in the frame (its run-time id is another)",
             var_a(c, v));
    return NULL;
}

Var *objects_hash(Capture *c, Var *v)
{
    PyTypeObject *t = var_pytype(v);
    if (var_is_const(v) || ((v->kind == VK_TUPLE) && var_all_const(v->u.seq.items, v->u.seq.n))) {
        PyObject *o = var_to_py(c, v);
        if (!o)
            return NULL;
        Py_hash_t h = PyObject_Hash(o);
        Py_DECREF(o);
        if (h == -1 && PyErr_Occurred()) {
            cap_fail_exc(c, BR_USER_EXCEPTION);
            return NULL;
        }
        return var_const_steal(c, PyLong_FromSsize_t(h));
    }
    PyObject *fn = t && (v->kind == VK_USEROBJ || v->kind == VK_OBJECT) ? type_slot(t, "__hash__") : NULL;
    if (fn && PyFunction_Check(fn)) {
        Var *f = wrap_untracked(c, fn);
        Var *a[1] = {v};
        Var *r = f ? call_var(c, f, a, 1, NULL) : NULL;
        if (r && !(var_is_const(r) && PyLong_Check(r->obj))) {
            cap_fail(c, BR_UNSUPPORTED_VALUE, "__hash__ of %s returned %s", t->tp_name, var_a(c, r));
            return NULL;
        }
        if (r) {
            /* hash() reduces what __hash__ returns to a Py_hash_t as the interpreter does */
            Py_hash_t h = PyObject_Hash(r->obj);
            if (h == -1 && PyErr_Occurred()) {
                cap_fail_exc(c, BR_USER_EXCEPTION);
                return NULL;
            }
            return var_const_steal(c, PyLong_FromSsize_t(h));
        }
        return NULL;
    }
    if (fn == Py_None) {
        PyErr_Format(PyExc_TypeError, "unhashable type: '%s'", t->tp_name);
        cap_fail_exc(c, BR_USER_EXCEPTION);
        return NULL;
    }
    if (sourced_object(v) && t && t->tp_hash == PyBaseObject_Type.tp_hash) {
        /* object's hash is derived from the object's address */
        if (!cap_keep(c, v->obj) || guard_add_simple(c, GK_ID_MATCH, v->src, v->obj) < 0)
            return NULL;
        Py_hash_t h = PyObject_Hash(v->obj);
        return var_const_steal(c, PyLong_FromSsize_t(h));
    }
    cap_fail(c, BR_UNSUPPORTED_CALL, "hash() of %s", var_a(c, v));
    return NULL;
}
