/* Calls: inlining Python functions and module forwards, table rows, builtins, methods of
 * containers made during capture. */
#include "capture.h"
#include "../vocab/libs.h"
#include "../core/errors.h"

/* ------------------------------------------------------------- inlining ---- */

/* Bind call arguments to the parameters of code (3.11 localsplus layout). */
static int bind_params(Capture *c, PyCodeObject *co, Var *fn, Var **args, int32_t nargs, PyObject *kwnames,
                       Var **locals)
{
    int32_t nkw = kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0;
    int32_t npos = nargs - nkw;
    int argcount = co->co_argcount, kwonly = co->co_kwonlyargcount;
    int has_varargs = (co->co_flags & CO_VARARGS) != 0, has_varkw = (co->co_flags & CO_VARKEYWORDS) != 0;
    int total = argcount + kwonly;
    Var *varargs = NULL, *varkw = NULL;
    if (has_varargs && !(varargs = var_seq(c, VK_TUPLE, NULL, 0)))
        return -1;
    if (has_varkw && !(varkw = var_dict(c)))
        return -1;
    for (int32_t i = 0; i < npos; i++) {
        if (i < argcount)
            locals[i] = args[i];
        else if (has_varargs) {
            if (var_seq_append(c, varargs, args[i]) < 0)
                return -1;
        } else {
            PyErr_Format(PyExc_TypeError, "%U() takes %d positional arguments but %d were given", co->co_name, argcount,
                         (int)npos);
            return cap_fail_exc(c, BR_USER_EXCEPTION);
        }
    }
    for (int32_t k = 0; k < nkw; k++) {
        PyObject *kn = PyTuple_GET_ITEM(kwnames, k);
        int found = -1;
        for (int i = co->co_posonlyargcount; i < total; i++) {
            PyObject *pn = PyTuple_GET_ITEM(co->co_localsplusnames, i);
            if (pn == kn || PyUnicode_Compare(pn, kn) == 0) {
                found = i;
                break;
            }
        }
        if (found >= 0) {
            if (locals[found]) {
                PyErr_Format(PyExc_TypeError, "%U() got multiple values for argument '%U'", co->co_name, kn);
                return cap_fail_exc(c, BR_USER_EXCEPTION);
            }
            locals[found] = args[npos + k];
        } else if (has_varkw) {
            Var *key = var_const(c, kn);
            if (!key || var_dict_set(c, varkw, key, args[npos + k]) < 0)
                return -1;
        } else {
            PyErr_Format(PyExc_TypeError, "%U() got an unexpected keyword argument '%U'", co->co_name, kn);
            return cap_fail_exc(c, BR_USER_EXCEPTION);
        }
    }
    /* defaults */
    PyObject *defaults = NULL, *kwdefaults = NULL;
    Var *vdefaults = NULL, *vkwdefaults = NULL;
    if (fn->obj) {
        defaults = PyFunction_GET_DEFAULTS(fn->obj);
        kwdefaults = PyFunction_GET_KW_DEFAULTS(fn->obj);
    } else {
        vdefaults = fn->u.func.defaults;
        vkwdefaults = fn->u.func.kwdefaults;
    }
    /* the defaults of a function from outside are outside objects: read through a source */
    int32_t fsrc = defaults || kwdefaults ? wrap_fn_source(c, fn) : -1;
    if (fsrc == -2)
        return -1;
    int ndef = defaults                                     ? (int)PyTuple_GET_SIZE(defaults)
               : (vdefaults && vdefaults->kind == VK_TUPLE) ? vdefaults->u.seq.n
               : (vdefaults && vdefaults->kind == VK_CONST) ? (int)PyTuple_GET_SIZE(vdefaults->obj)
                                                            : 0;
    for (int i = 0; i < argcount; i++) {
        if (locals[i])
            continue;
        int d = i - (argcount - ndef);
        if (d < 0) {
            PyErr_Format(PyExc_TypeError, "%U() missing required argument '%U'", co->co_name,
                         PyTuple_GET_ITEM(co->co_localsplusnames, i));
            return cap_fail_exc(c, BR_USER_EXCEPTION);
        }
        if (defaults) {
            int32_t s = fsrc >= 0 ? sources_add(&c->src, SRC_DEFAULT, fsrc, d, NULL, NULL) : -1;
            if ((fsrc >= 0 && s < 0 && cap_fail_exc(c, BR_INTERNAL)) ||
                !(locals[i] = wrap_value(c, PyTuple_GET_ITEM(defaults, d), s)))
                return -1;
        } else if (vdefaults->kind == VK_TUPLE) {
            locals[i] = vdefaults->u.seq.items[d];
        } else if (!(locals[i] = var_const(c, PyTuple_GET_ITEM(vdefaults->obj, d)))) {
            return -1;
        }
    }
    for (int i = argcount; i < total; i++) {
        if (locals[i])
            continue;
        PyObject *pn = PyTuple_GET_ITEM(co->co_localsplusnames, i);
        if (kwdefaults) {
            PyObject *v = PyDict_GetItemWithError(kwdefaults, pn);
            if (v) {
                int32_t s = fsrc >= 0 ? sources_add(&c->src, SRC_KWDEFAULT, fsrc, 0, pn, NULL) : -1;
                if ((fsrc >= 0 && s < 0 && cap_fail_exc(c, BR_INTERNAL)) || !(locals[i] = wrap_value(c, v, s)))
                    return -1;
                continue;
            }
        } else if (vkwdefaults) {
            Var *key = var_const(c, pn);
            int found = 0;
            Var *v = NULL;
            if (vkwdefaults->kind == VK_DICT)
                v = var_dict_get(c, vkwdefaults, key, &found);
            else if (vkwdefaults->kind == VK_CONST && PyDict_Check(vkwdefaults->obj)) {
                PyObject *o = PyDict_GetItemWithError(vkwdefaults->obj, pn);
                if (o && (v = var_const(c, o)))
                    found = 1;
            }
            if (found) {
                locals[i] = v;
                continue;
            }
        }
        PyErr_Format(PyExc_TypeError, "%U() missing required keyword-only argument '%U'", co->co_name, pn);
        return cap_fail_exc(c, BR_USER_EXCEPTION);
    }
    int slot = total;
    if (has_varargs)
        locals[slot++] = varargs;
    if (has_varkw)
        locals[slot++] = varkw;
    return 0;
}

static Var *inline_function(Capture *c, Var *fn, Var **args, int32_t nargs, PyObject *kwnames)
{
    PyCodeObject *co;
    PyObject *globals;
    if (fn->obj) {
        co = (PyCodeObject *)PyFunction_GET_CODE(fn->obj);
        globals = PyFunction_GET_GLOBALS(fn->obj);
    } else {
        co = fn->u.func.code;
        globals = fn->u.func.globals;
    }
    if (co->co_flags & (CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE)) {
        cap_fail(c, BR_GENERATOR, "coroutine %U", co->co_qualname);
        return NULL;
    }
    PyObject *builtins = PyDict_GetItemString(globals, "__builtins__");
    if (builtins && PyModule_Check(builtins))
        builtins = PyModule_GetDict(builtins);
    if (!builtins)
        builtins = PyEval_GetBuiltins();
    Var **locals = cap_alloc(c, sizeof(Var *) * (size_t)(co->co_nlocalsplus + 1));
    if (!locals || bind_params(c, co, fn, args, nargs, kwnames, locals) < 0)
        return NULL;
    return eval_frame(c, co, globals, builtins, locals, fn, (co->co_flags & CO_GENERATOR) != 0);
}

/* ------------------------------------------------------------- modules ---- */

/* The module's hook dicts: plain forward pre-hooks and forward hooks are followed (their
 * keys guarded, each hook guarded by its source); any other kind of hook, or a global
 * one, stops the capture. Empty dicts are guarded empty. */
static int guard_hooks(Capture *c, Var *m)
{
    static const char *const names[] = {
        "_forward_hooks",      "_forward_pre_hooks",         "_backward_hooks",
        "_backward_pre_hooks", "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        PyObject *d = PyObject_GetAttrString(m->obj, names[i]);
        if (!d) {
            sj_err_clear();
            continue;
        }
        Py_ssize_t n = PyDict_Check(d) ? PyDict_GET_SIZE(d) : 0;
        int followed = i < 2 && PyDict_Check(d);
        if (n && !followed) {
            Py_DECREF(d);
            return cap_fail(c, BR_UNSUPPORTED_CALL, "module %s has %s", Py_TYPE(m->obj)->tp_name, names[i]);
        }
        if (m->src >= 0) {
            PyObject *nm = PyUnicode_FromString(names[i]);
            int32_t s = nm ? sources_add(&c->src, SRC_ATTR, m->src, 0, nm, NULL) : -1;
            Py_XDECREF(nm);
            int r = -1;
            if (s >= 0 && n) {
                r = guard_dict_keys(c, s, d);
            } else if (s >= 0 && guard_add_simple(c, GK_DICT_LENGTH, s, NULL) == 0) {
                c->guards.g[c->guards.n - 1].len = 0;
                r = 0;
            }
            if (r < 0) {
                Py_DECREF(d);
                return -1;
            }
        }
        Py_DECREF(d);
    }
    /* torch's global module hooks: none now, and a DICT_VERSION guard sees one added */
    for (Py_ssize_t i = 0; libs.global_hook_dicts && i < PyTuple_GET_SIZE(libs.global_hook_dicts); i++) {
        PyObject *name = PyTuple_GET_ITEM(libs.global_hook_dicts, i);
        PyObject *d = PyDict_GetItemWithError(libs.nn_module_globals, name);   /* borrowed */
        if (!d) {
            if (PyErr_Occurred())
                return -1;
            continue;
        }
        if (!PyDict_Check(d))
            continue;
        if (PyDict_GET_SIZE(d))
            return cap_fail(c, BR_UNSUPPORTED_CALL, "global nn.Module hooks are registered");
        int32_t s = sources_add(&c->src, SRC_MODGLOBAL, -1, 0, name, libs.nn_module_globals);
        if (s < 0 || guard_add_dict_version(c, s, d) < 0)
            return -1;
    }
    return 0;
}

static int is_none(const Var *v)
{
    return v->kind == VK_CONST && v->obj == Py_None;
}

/* Calls each hook of the module's dict `name` (forward pre-hooks or forward hooks, in
 * registration order) as Module.__call__ does: hook(module, args) may replace the
 * positional args (a non-tuple becomes a 1-tuple), hook(module, args, result) the result
 * (*result is NULL for pre-hooks). *args_tuple is a tuple var. 0, or -1 with the capture
 * failed. */
static int run_hooks(Capture *c, Var *m, const char *name, Var **args_tuple, Var **result)
{
    PyObject *d = PyObject_GetAttrString(m->obj, name);   /* new reference */
    if (!d) {
        sj_err_clear();
        return 0;
    }
    if (!PyDict_Check(d) || !PyDict_GET_SIZE(d)) {
        Py_DECREF(d);
        return 0;
    }
    /* the hooks run in the dict's order as guard_hooks saw it; a snapshot keeps a hook
     * that changes the dict from disturbing the walk */
    PyObject *items = PyODict_Check(d) ? PyMapping_Items(d) : PyDict_Items(d);   /* an OrderedDict's own order:
                                                                                   prepended hooks first */
    Py_DECREF(d);
    if (!items)
        return cap_fail_exc(c, BR_INTERNAL);
    int32_t dsrc = -1;
    if (m->src >= 0) {
        PyObject *nm = PyUnicode_FromString(name);
        dsrc = nm ? sources_add(&c->src, SRC_ATTR, m->src, 0, nm, NULL) : -1;
        Py_XDECREF(nm);
        if (dsrc < 0) {
            Py_DECREF(items);
            return -1;
        }
    }
    int rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(items); i++) {
        PyObject *key = PyTuple_GET_ITEM(PyList_GET_ITEM(items, i), 0);    /* borrowed */
        PyObject *hook = PyTuple_GET_ITEM(PyList_GET_ITEM(items, i), 1);   /* borrowed */
        int32_t hs = dsrc >= 0 ? sources_add(&c->src, SRC_ITEM, dsrc, 0, key, NULL) : -1;
        Var *hv = dsrc < 0 ? wrap_untracked(c, hook) : hs >= 0 ? wrap_value(c, hook, hs) : NULL;
        Var *call_args[3] = {m, *args_tuple, result ? *result : NULL};
        Var *r = hv ? call_var(c, hv, call_args, result ? 3 : 2, NULL) : NULL;
        if (!r) {
            rc = -1;
            break;
        }
        if (is_none(r))
            continue;
        if (result) {
            *result = r;
        } else if (r->kind == VK_TUPLE) {
            *args_tuple = r;
        } else if (r->kind == VK_CONST && PyTuple_Check(r->obj)) {
            Var *t = var_seq(c, VK_TUPLE, NULL, 0);
            for (Py_ssize_t j = 0; t && j < PyTuple_GET_SIZE(r->obj); j++) {
                Py_INCREF(PyTuple_GET_ITEM(r->obj, j));
                Var *item = var_const_steal(c, PyTuple_GET_ITEM(r->obj, j));
                if (!item || var_seq_append(c, t, item) < 0)
                    t = NULL;
            }
            if (!t)
                rc = -1;
            else
                *args_tuple = t;
        } else {
            *args_tuple = var_seq(c, VK_TUPLE, &r, 1);
            if (!*args_tuple)
                rc = -1;
        }
    }
    Py_DECREF(items);
    return rc;
}

static Var *call_module(Capture *c, Var *m, Var **args, int32_t nargs, PyObject *kwnames)
{
    /* a class that overrides nn.Module.__call__ runs its own (which may call forward) */
    static PyObject *s_call;   /* strong, interned */
    if (!s_call && !(s_call = PyUnicode_InternFromString("__call__"))) {
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    PyObject *own = _PyType_Lookup(Py_TYPE(m->obj), s_call);   /* borrowed */
    if (libs.module_type && PyType_Check(libs.module_type) &&
        own != _PyType_Lookup((PyTypeObject *)libs.module_type, s_call)) {
        if (!own || !PyFunction_Check(own)) {
            cap_fail(c, BR_UNSUPPORTED_CALL, "%s.__call__ is not a Python function", Py_TYPE(m->obj)->tp_name);
            return NULL;
        }
        Var *fn = wrap_untracked(c, own);
        Var **all = fn ? cap_alloc(c, sizeof(Var *) * (size_t)(nargs + 1)) : NULL;
        if (!all)
            return NULL;
        all[0] = m;
        if (nargs)
            memcpy(all + 1, args, sizeof(Var *) * (size_t)nargs);
        return inline_function(c, fn, all, nargs + 1, kwnames);
    }
    if (guard_hooks(c, m) < 0)
        return NULL;
    /* nn.Module.__call__ runs self.forward: an attribute of the instance named forward (a
     * function or partial assigned to it) wins over the class's, which is guarded to stay
     * the class's and unshadowed */
    static PyObject *s_forward;   /* strong, interned */
    if (!s_forward && !(s_forward = PyUnicode_InternFromString("forward"))) {
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    PyObject **dp = _PyObject_GetDictPtr(m->obj);
    PyObject *idict = dp && *dp && PyDict_Check(*dp) ? *dp : NULL;               /* borrowed */
    PyObject *own_fwd = idict ? PyDict_GetItemWithError(idict, s_forward) : NULL;   /* borrowed */
    if (!own_fwd && PyErr_Occurred()) {
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    Var *fn;
    if (own_fwd) {
        fn = attr_load(c, m, s_forward);
    } else {
        PyObject *fwd = _PyType_Lookup(Py_TYPE(m->obj), s_forward);   /* borrowed */
        if (!fwd || !PyFunction_Check(fwd)) {
            cap_fail(c, BR_UNSUPPORTED_CALL, "%s.forward is not a Python function", Py_TYPE(m->obj)->tp_name);
            return NULL;
        }
        fn = attr_guard_class(c, m, s_forward, fwd, 1) < 0 ? NULL : wrap_untracked(c, fwd);
    }
    if (!fn)
        return NULL;
    /* the positional args as the hooks see them (keyword values follow them in args) */
    int32_t nkw = kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0;
    Var *pos = var_seq(c, VK_TUPLE, args, nargs - nkw);
    if (!pos || run_hooks(c, m, "_forward_pre_hooks", &pos, NULL) < 0)
        return NULL;
    int32_t npos = pos->u.seq.n;
    Var **all = cap_alloc(c, sizeof(Var *) * (size_t)(npos + nkw + 1));
    if (!all)
        return NULL;
    all[0] = m;
    if (npos)
        memcpy(all + 1, pos->u.seq.items, sizeof(Var *) * (size_t)npos);
    if (nkw)
        memcpy(all + 1 + npos, args + nargs - nkw, sizeof(Var *) * (size_t)nkw);
    Var *result = NULL;
    int handled = 0;
    if (own_fwd) { /* already bound, or a plain callable: called without self */
        handled = 1;
        result = call_var(c, fn, all + 1, npos + nkw, kwnames);
    }
    if (!handled && rnn_is_forward(fn->obj)) /* nn.LSTM / GRU / RNN: their library call (rnn.c) */
        result = rnn_module_call(c, m, fn, all + 1, npos + nkw, kwnames, &handled);
    if (!handled)
        result = inline_function(c, fn, all, npos + nkw + 1, kwnames);
    if (!result || run_hooks(c, m, "_forward_hooks", &pos, &result) < 0)
        return NULL;
    return result;
}

/* ------------------------------------------- nn.Module iteration methods ---- */
/* named_parameters(), parameters(), buffers(), children(), modules() and their named forms
 * run live (they only read the module tree) and each item gets the source that reaches it,
 * so parameters stay graph inputs. The tree's shape is guarded by the key sets. */

static int guard_tree(Capture *c, PyObject *mod, int32_t src)
{
    static const char *const dicts[] = {"_parameters", "_buffers", "_modules"};
    for (int i = 0; i < 3; i++) {
        PyObject *d = PyObject_GetAttrString(mod, dicts[i]);
        if (!d || !PyDict_Check(d)) {
            Py_XDECREF(d);
            sj_err_clear();
            continue;
        }
        int32_t ds = guard_dict_attr_keys(c, src, dicts[i], d);
        int r = ds < 0 ? -1 : 0;
        if (r == 0 && i == 2) {
            Py_ssize_t pos = 0;
            PyObject *key, *sub;
            while (r == 0 && PyDict_Next(d, &pos, &key, &sub)) {
                if (sub == Py_None)
                    continue;
                int32_t ss = sources_add(&c->src, SRC_ITEM, ds, 0, key, NULL);
                r = ss < 0 ? -1 : guard_tree(c, sub, ss);
            }
        }
        Py_DECREF(d);
        if (r < 0)
            return -1;
    }
    return 0;
}

/* The source of a dotted path below module source src: "a.b.weight" in dict kind. */
static int32_t path_source(Capture *c, int32_t src, PyObject *path, const char *last_dict)
{
    PyObject *parts, *dot = PyUnicode_FromString(".");
    parts = dot ? PyUnicode_Split(path, dot, -1) : NULL;
    Py_XDECREF(dot);
    if (!parts)
        return -1;
    Py_ssize_t n = PyList_GET_SIZE(parts);
    if (n == 1 && PyUnicode_GET_LENGTH(PyList_GET_ITEM(parts, 0)) == 0) {
        Py_DECREF(parts);
        return src;   /* the module itself (modules() yields it first) */
    }
    int32_t cur = src;
    for (Py_ssize_t i = 0; i < n && cur >= 0; i++) {
        const char *dn = i == n - 1 ? last_dict : "_modules";
        PyObject *dname = PyUnicode_FromString(dn);
        int32_t ds = dname ? sources_add(&c->src, SRC_ATTR, cur, 0, dname, NULL) : -1;
        Py_XDECREF(dname);
        cur = ds >= 0 ? sources_add(&c->src, SRC_ITEM, ds, 0, PyList_GET_ITEM(parts, i), NULL) : -1;
    }
    Py_DECREF(parts);
    return cur;
}

/* path_source for a module var: a module made from a sourced container (a ModuleList
 * slice) reaches its entries through the sources it recorded. */
static int32_t module_path_source(Capture *c, Var *m, PyObject *path, const char *last_dict)
{
    if (m->src >= 0)
        return path_source(c, m->src, path, last_dict);
    Py_ssize_t len = PyUnicode_GET_LENGTH(path);
    Py_ssize_t dot = PyUnicode_FindChar(path, '.', 0, len, 1);
    PyObject *head = dot < -1 ? NULL : PyUnicode_Substring(path, 0, dot < 0 ? len : dot);
    int32_t ks = head ? module_kid_source(m, head, NULL) : -1;
    Py_XDECREF(head);
    if (ks < 0 || dot < 0)
        return ks >= 0 && !strcmp(last_dict, "_modules") ? ks : -1;
    PyObject *rest = PyUnicode_Substring(path, dot + 1, len);
    int32_t r = rest ? path_source(c, ks, rest, last_dict) : -1;
    Py_XDECREF(rest);
    return r;
}

/* guard_tree for a module var (see module_path_source). */
static int guard_module_tree(Capture *c, Var *m)
{
    if (m->src >= 0)
        return guard_tree(c, m->obj, m->src);
    PyObject *mods = PyObject_GetAttrString(m->obj, "_modules");
    Py_ssize_t pos = 0;
    PyObject *key, *sub;
    int r = mods && PyDict_Check(mods) ? 0 : -1;
    while (r == 0 && PyDict_Next(mods, &pos, &key, &sub)) {
        int32_t ks = module_kid_source(m, key, NULL);
        r = ks < 0 ? -1 : guard_tree(c, sub, ks);
    }
    if (r < 0 && !PyErr_Occurred())
        PyErr_SetString(PyExc_RuntimeError, "a module entry without a source");
    Py_XDECREF(mods);
    return r;
}

static Var *module_iter_method(Capture *c, Var *m, const char *name, Var **args, int32_t nargs, PyObject *kwnames,
                               int *handled)
{
    static const char *const names[] = {"named_parameters", "parameters", "named_buffers", "buffers",
                                        "named_children",   "children",   "named_modules", "modules"};
    int which = -1;
    for (int i = 0; i < 8; i++)
        if (!strcmp(name, names[i]))
            which = i;
    *handled = 0;
    if (which < 0 || (m->src < 0 && !m->u.mod.kids) || !var_all_const(args, nargs))
        return NULL;
    *handled = 1;
    int named = which % 2 == 0;
    const char *last = which < 2 ? "_parameters" : which < 4 ? "_buffers" : "_modules";
    /* call the named_ form live so every item comes with its path */
    const char *live = which < 2   ? "named_parameters"
                       : which < 4 ? "named_buffers"
                       : which < 6 ? "named_children"
                                   : "named_modules";
    PyObject *meth = PyObject_GetAttrString(m->obj, live);
    PyObject *gen = meth ? cap_call_live(c, meth, args, nargs, kwnames) : NULL;
    Py_XDECREF(meth);
    PyObject *list = gen ? PySequence_List(gen) : NULL;
    Py_XDECREF(gen);
    if (!list || guard_module_tree(c, m) < 0) {
        Py_XDECREF(list);
        cap_fail_exc(c, BR_UNSUPPORTED_CALL);
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(list);
    Var **items = cap_alloc(c, sizeof(Var *) * (size_t)(n + 1));
    for (Py_ssize_t i = 0; items && i < n; i++) {
        PyObject *pair = PyList_GET_ITEM(list, i);
        PyObject *path = PyTuple_GET_ITEM(pair, 0), *val = PyTuple_GET_ITEM(pair, 1);
        Var *v;
        if (m->src < 0 && val == m->obj) {   /* modules() yields the module itself first */
            v = m;
        } else {
            int32_t s = module_path_source(c, m, path, which >= 4 && which < 6 ? "_modules" : last);
            v = s >= 0 ? wrap_value(c, val, s) : NULL;
            if (s < 0 && !PyErr_Occurred())
                cap_fail(c, BR_INTERNAL, "no source for entry %U of a module slice", path);
        }
        Var *k = v ? var_const(c, path) : NULL;
        if (!k) {
            Py_DECREF(list);
            return NULL;
        }
        items[i] = named ? var_seq(c, VK_TUPLE, (Var *[]){k, v}, 2) : v;
        if (!items[i]) {
            Py_DECREF(list);
            return NULL;
        }
    }
    Py_DECREF(list);
    Var *it = items ? var_new(c, VK_ITER) : NULL;
    if (it) {
        it->u.iter.items = items;
        it->u.iter.n = (int32_t)n;
    }
    return it;
}

/* --------------------------------------------------- container methods ---- */

static int list_append_item(Capture *c, void *list, Var *item)
{
    return var_seq_append(c, list, item);
}

static Var *container_call(Capture *c, Var *self, PyObject *name, Var **args, int32_t nargs, PyObject *kwnames)
{
    const char *n = PyUnicode_AsUTF8(name);
    if (!n)
        return NULL;
    int32_t nkw = kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0;
    int list_sort = self->kind == VK_LIST && !strcmp(n, "sort");   /* key=, reverse= (iters.c) */
    if (nkw && !(self->kind == VK_DICT && !strcmp(n, "update")) && !list_sort) {
        cap_fail(c, BR_UNSUPPORTED_CALL, "keyword arguments to %s.%s", sj_var_type_name(c, self), n);
        return NULL;
    }
    int mutating = !strcmp(n, "append") || !strcmp(n, "extend") || !strcmp(n, "insert") || !strcmp(n, "pop") ||
                   !strcmp(n, "update") || !strcmp(n, "setdefault") || !strcmp(n, "clear") || !strcmp(n, "remove") ||
                   !strcmp(n, "reverse") || !strcmp(n, "sort");
    if (mutating && ((var_is_outside(self) && cap_note_mutation(c, self, n) < 0) || cap_note_change(c, self, 0) < 0))
        return NULL;
    if (list_sort)
        return iters_list_sort(c, self, args, nargs, kwnames);
    if (self->kind == VK_LIST || self->kind == VK_TUPLE) {
        if (!strcmp(n, "append") && nargs == 1 && self->kind == VK_LIST)
            return var_seq_append(c, self, args[0]) < 0 ? NULL : var_const(c, Py_None);
        if (!strcmp(n, "extend") && nargs == 1 && self->kind == VK_LIST && iter_is_lazy(args[0]))
            /* one item per append, as list.extend reads an iterator: the function a map
             * calls may read the list it grows */
            return iter_each(c, args[0], list_append_item, self) < 0 ? NULL : var_const(c, Py_None);
        if (!strcmp(n, "extend") && nargs == 1 && self->kind == VK_LIST) {
            Var **items;
            int32_t cnt;
            if (op_iterate(c, args[0], &items, &cnt) < 0)
                return NULL;
            for (int32_t i = 0; i < cnt; i++)
                if (var_seq_append(c, self, items[i]) < 0)
                    return NULL;
            return var_const(c, Py_None);
        }
        if (!strcmp(n, "insert") && nargs == 2 && var_is_const(args[0]) && self->kind == VK_LIST) {
            Py_ssize_t i = PyNumber_AsSsize_t(args[0]->obj, NULL);
            if (i < 0)
                i += self->u.seq.n;
            if (i < 0)
                i = 0;
            if (i > self->u.seq.n)
                i = self->u.seq.n;
            if (var_seq_append(c, self, args[1]) < 0)
                return NULL;
            memmove(self->u.seq.items + i + 1, self->u.seq.items + i, sizeof(Var *) * (size_t)(self->u.seq.n - 1 - i));
            self->u.seq.items[i] = args[1];
            return var_const(c, Py_None);
        }
        if (!strcmp(n, "pop") && nargs <= 1 && self->kind == VK_LIST && self->u.seq.n > 0) {
            Py_ssize_t i = self->u.seq.n - 1;
            if (nargs == 1) {
                if (!var_is_const(args[0]))
                    goto unsupported;
                i = PyNumber_AsSsize_t(args[0]->obj, NULL);
                if (i < 0)
                    i += self->u.seq.n;
                if (i < 0 || i >= self->u.seq.n)
                    goto unsupported;
            }
            Var *r = self->u.seq.items[i];
            memmove(self->u.seq.items + i, self->u.seq.items + i + 1, sizeof(Var *) * (size_t)(self->u.seq.n - 1 - i));
            self->u.seq.n--;
            return r;
        }
        if (!strcmp(n, "reverse") && nargs == 0 && self->kind == VK_LIST) {
            for (int32_t i = 0, j = self->u.seq.n - 1; i < j; i++, j--) {
                Var *t = self->u.seq.items[i];
                self->u.seq.items[i] = self->u.seq.items[j];
                self->u.seq.items[j] = t;
            }
            return var_const(c, Py_None);
        }
        if (!strcmp(n, "copy") && nargs == 0)
            return var_seq(c, self->kind, self->u.seq.items, self->u.seq.n);
        if (!strcmp(n, "clear") && nargs == 0 && self->kind == VK_LIST) {
            self->u.seq.n = 0;
            return var_const(c, Py_None);
        }
        if ((!strcmp(n, "index") || !strcmp(n, "count")) && nargs == 1 &&
            var_all_const(self->u.seq.items, self->u.seq.n)) {
            PyObject *py = var_to_py(c, self);
            PyObject *a = py ? var_to_py(c, args[0]) : NULL;
            PyObject *r = a ? PyObject_CallMethod(py, n, "O", a) : NULL;
            Py_XDECREF(py);
            Py_XDECREF(a);
            if (!r) {
                cap_fail_exc(c, BR_USER_EXCEPTION);
                return NULL;
            }
            return var_const_steal(c, r);
        }
    }
    if (self->kind == VK_DICT) {
        /* get reads one entry of a dict read lazily; the other methods read all */
        if (strcmp(n, "get") && var_dict_force(c, self) < 0)
            return NULL;
        if ((!strcmp(n, "keys") || !strcmp(n, "values") || !strcmp(n, "items")) && nargs == 0) {
            return var_dict_live_view(c, self, n[0]);
        }
        if (!strcmp(n, "get") && (nargs == 1 || nargs == 2)) {
            int found;
            Var *v = var_dict_get(c, self, args[0], &found);
            if (PyErr_Occurred()) {
                cap_fail_exc(c, BR_UNSUPPORTED_VALUE);
                return NULL;
            }
            return found ? v : nargs == 2 ? args[1] : var_const(c, Py_None);
        }
        if (!strcmp(n, "setdefault") && (nargs == 1 || nargs == 2)) {
            int found;
            Var *v = var_dict_get(c, self, args[0], &found);
            if (PyErr_Occurred()) {
                cap_fail_exc(c, BR_UNSUPPORTED_VALUE);
                return NULL;
            }
            if (found)
                return v;
            Var *d = nargs == 2 ? args[1] : var_const(c, Py_None);
            return d && var_dict_set(c, self, args[0], d) == 0 ? d : NULL;
        }
        if (!strcmp(n, "update") && nargs - nkw <= 1) {
            if (nargs - nkw == 1 && var_dict_merge(c, self, args[0]) < 0)
                return NULL;
            for (int32_t i = 0; i < nkw; i++) {
                Var *k = var_const(c, PyTuple_GET_ITEM(kwnames, i));
                if (!k || var_dict_set(c, self, k, args[nargs - nkw + i]) < 0)
                    return NULL;
            }
            return var_const(c, Py_None);
        }
        if (!strcmp(n, "clear") && nargs == 0) {
            self->u.dict.n = 0;
            return var_const(c, Py_None);
        }
        if (!strcmp(n, "pop") && (nargs == 1 || nargs == 2)) {
            int found;
            Var *v = var_dict_get(c, self, args[0], &found);
            if (PyErr_Occurred()) {
                cap_fail_exc(c, BR_UNSUPPORTED_VALUE);
                return NULL;
            }
            if (!found) {
                if (nargs == 2)
                    return args[1];
                PyErr_SetObject(PyExc_KeyError, args[0]->obj);
                cap_fail_exc(c, BR_USER_EXCEPTION);
                return NULL;
            }
            if (var_dict_del(c, self, args[0]) < 0) {
                cap_fail_exc(c, BR_UNSUPPORTED_VALUE);
                return NULL;
            }
            return v;
        }
        if (!strcmp(n, "copy") && nargs == 0) {
            Var *d = var_dict(c);
            for (int32_t i = 0; d && i < self->u.dict.n; i++)
                if (var_dict_set(c, d, self->u.dict.keys[i], self->u.dict.vals[i]) < 0)
                    return NULL;
            return d;
        }
    }
unsupported:
    cap_fail(c, BR_UNSUPPORTED_CALL, "%s.%s(...) with these arguments", sj_var_type_name(c, self), n);
    return NULL;
}

/* ------------------------------------------------------------ dispatch ---- */

/* inspect.signature(f) of a function or bound method reached during capture: signatures
 * only depend on code objects, so read it now (inlining inspect costs ~20 frames). */
static Var *fold_signature(Capture *c, PyObject *fn, Var *target)
{
    static PyObject *sig_fn;   /* strong: inspect.signature */
    PyObject *mod = PyFunction_Check(fn) ? ((PyFunctionObject *)fn)->func_module : NULL;
    if (!mod || !PyUnicode_Check(mod) || PyUnicode_CompareWithASCIIString(mod, "inspect") != 0)
        return NULL;
    if (!sig_fn) {
        PyObject *insp = PyImport_ImportModule("inspect");
        sig_fn = insp ? PyObject_GetAttrString(insp, "signature") : NULL;
        Py_XDECREF(insp);
        if (!sig_fn) {
            sj_err_clear();
            return NULL;
        }
    }
    if (fn != sig_fn)
        return NULL;
    PyObject *live = NULL;
    if (target->kind == VK_METHOD && target->u.method.fn->obj && target->u.method.self->obj &&
        PyFunction_Check(target->u.method.fn->obj))
        live = PyMethod_New(target->u.method.fn->obj, target->u.method.self->obj);
    else if ((target->kind == VK_FUNC || target->kind == VK_CALLABLE) && target->obj)
        live = Py_NewRef(target->obj);
    if (!live)
        return NULL;
    PyObject *sig = PyObject_CallOneArg(sig_fn, live);
    Py_DECREF(live);
    if (!sig) {
        cap_fail_exc(c, BR_USER_EXCEPTION);
        return NULL;
    }
    return var_const_steal(c, sig);
}

/* dict.get / __getitem__ / __contains__ / __len__ called on a live dict subclass that
 * has a source, with constant arguments (transformers' registries read through
 * super().get; ACT2FN, an OrderedDict subclass whose own __getitem__ reads
 * super().__getitem__(key) and builds the class it finds). The call is dict's own lookup,
 * so it reads the dict's storage now, whatever __getitem__ the subclass defines: its keys
 * are guarded, and a value read is wrapped through dict.__getitem__(d, key)
 * (SRC_DICT_ITEM), which reads the storage the same way on each call, so the next call's
 * contents are what the graph sees. NULL with *handled 0: not such a call (it breaks). */
static Var *read_live_dict(Capture *c, PyObject *fn, Var **args, int32_t nargs, PyObject *kwnames, int *handled)
{
    *handled = 0;
    Var *o = args[0];
    PyObject *d = o->obj;
    if (o->kind != VK_OBJECT || o->src < 0 || !d || !PyDict_Check(d) || kwnames || PyDescr_TYPE(fn) != &PyDict_Type ||
        !var_all_const(args + 1, nargs - 1))
        return NULL;
    const char *n = PyUnicode_AsUTF8(PyDescr_NAME(fn));
    if (!n)
        return NULL;
    int get = !strcmp(n, "get"), item = !strcmp(n, "__getitem__");
    int contains = !strcmp(n, "__contains__"), len = !strcmp(n, "__len__");
    if (!((get && (nargs == 2 || nargs == 3)) || ((item || contains) && nargs == 2) || (len && nargs == 1)))
        return NULL;
    PyObject *key = nargs > 1 ? args[1]->obj : NULL;
    PyObject *val = NULL;
    if (key) {
        Py_hash_t h = PyObject_Hash(key);
        if (h == -1) {
            sj_err_clear();
            return NULL;   /* an unhashable key: eager raises, the break lets it */
        }
        val = PyDict_GetItemWithError(d, key);   /* borrowed */
        if (!val && PyErr_Occurred()) {
            sj_err_clear();
            return NULL;
        }
        if (item && !val)
            return NULL;   /* __missing__ or KeyError: the break runs dict's lookup */
    }
    *handled = 1;
    if (guard_dict_keys(c, o->src, d) < 0) {
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    if (len)
        return var_const_steal(c, PyLong_FromSsize_t(PyDict_GET_SIZE(d)));
    if (contains)
        return var_const(c, val ? Py_True : Py_False);
    if (!val)
        return nargs == 3 ? args[2] : var_const(c, Py_None);
    int32_t s = sources_add(&c->src, SRC_DICT_ITEM, o->src, 0, key, NULL);
    if (s < 0) {
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    Py_INCREF(val);   /* the wrap may run code that drops the dict's reference */
    Var *v = wrap_value(c, val, s);
    Py_DECREF(val);
    return v;
}

/* Read-only methods of the builtin containers (str.index, tuple.count, ...) called on a
 * constant with constant arguments: read it now. */
static Var *fold_readonly_method(Capture *c, PyObject *fn, Var **args, int32_t nargs, PyObject *kwnames, int *handled)
{
    static const char *const names[] = {"get",          "keys",    "values", "items", "__getitem__",
                                        "__contains__", "__len__", "index",  "count"};
    *handled = 0;
    /* only a constant receiver folds: a live object (a dict subclass passed in, read
     * through dict.get) can hold other items on the next call, and its type guard
     * would not see it; such calls break */
    if (Py_TYPE(fn) != &PyMethodDescr_Type || nargs < 1 || !args[0]->obj)
        return NULL;
    if (args[0]->kind != VK_CONST)
        return read_live_dict(c, fn, args, nargs, kwnames, handled);
    PyTypeObject *owner = PyDescr_TYPE(fn);
    if (owner != &PyDict_Type && owner != &PyList_Type && owner != &PyTuple_Type && owner != &PyUnicode_Type)
        return NULL;
    const char *n = PyUnicode_AsUTF8(PyDescr_NAME(fn));
    int ok = 0;
    for (size_t i = 0; n && i < sizeof names / sizeof *names; i++)
        ok |= !strcmp(n, names[i]);
    if (!ok || !var_all_const(args + 1, nargs - 1))
        return NULL;
    *handled = 1;
    PyObject *res = cap_call_live(c, fn, args, nargs, kwnames);
    if (!res)
        return NULL;
    Var *v = wrap_untracked(c, res);
    Py_DECREF(res);
    return v;
}

static int all_const_or_symint(Var **args, int32_t n)
{
    for (int32_t i = 0; i < n; i++)
        if (args[i]->kind != VK_CONST && args[i]->kind != VK_SYMINT)
            return 0;
    return 1;
}

static int is_pure_folder(PyObject *fn)
{
    /* builtins bound to immutable constants (str.format, Size.numel, dtype methods) and
     * functions of math */
    if (libs.np_generic && PyType_Check(fn) && PyType_IsSubtype((PyTypeObject *)fn, (PyTypeObject *)libs.np_generic))
        return 1;   /* numpy scalar types: np.float32(2.0) */
    if (libs.np_dtype_type && fn == libs.np_dtype_type)
        return 1;   /* np.dtype('int16'): a dtype from constants */
    if (PyCFunction_Check(fn)) {
        PyObject *self = PyCFunction_GET_SELF(fn);
        if (self && PyModule_Check(self)) {
            const char *mn = PyModule_GetName(self);
            if (!mn) {
                sj_err_clear();
                return 0;
            }
            return !strcmp(mn, "math");
        }
        /* sets reached as constants were built during capture (inputs wrap as objects) */
        if (self && (PyUnicode_Check(self) || PyTuple_Check(self) || PyLong_Check(self) || PyAnySet_Check(self) ||
                     PyFloat_Check(self) || PyBytes_Check(self) ||
                     (libs.dtype_type && (PyObject *)Py_TYPE(self) == libs.dtype_type) ||
                     (libs.np_dtype_type && PyObject_TypeCheck(self, (PyTypeObject *)libs.np_dtype_type))))
            return 1;
    }
    return 0;
}

/* 1 when fn is a function of torch.utils._contextlib (the decorator wrappers of the
 * grad-mode context managers and their clone()), inference_mode's own clone() or the
 * wrapper of @torch.jit.script_if_tracing */
static int is_grad_mode_decorator(PyObject *fn)
{
    PyObject *name = PyDict_GetItemString(((PyFunctionObject *)fn)->func_globals, "__name__"); /* borrowed */
    const char *n = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
    if (!n) {
        sj_err_clear();
        return 0;
    }
    if (!strcmp(n, "torch.autograd.grad_mode"))
        return PyUnicode_CompareWithASCIIString(((PyFunctionObject *)fn)->func_qualname, "inference_mode.clone") == 0;
    if (!strcmp(n, "torch.jit._trace"))   /* @torch.jit.script_if_tracing: runs fn when not tracing */
        return PyUnicode_CompareWithASCIIString(((PyCodeObject *)PyFunction_GET_CODE(fn))->co_qualname,
                                                "_script_if_tracing.<locals>.wrapper") == 0;
    return !strcmp(n, "torch.utils._contextlib");
}

/* 1 for the torch Python helpers capture inlines as user code (m: the function's
 * __module__): the parametrization machinery (the property a parametrized tensor reads
 * through, its ParametrizationList, the parametrizations of
 * torch.nn.utils.parametrizations, the old weight_norm hook), torch.jit.annotate and
 * _unwrap_optional, and the
 * fan and gain helpers of torch.nn.init */
static int inline_torch_helper(const char *m, PyObject *fn)
{
    if (!strcmp(m, "torch.autograd.function"))   /* ctx.save_for_backward etc. only store attributes */
    {
        const char *q = PyUnicode_AsUTF8(((PyFunctionObject *)fn)->func_qualname);
        if (!q)
            sj_err_clear();
        return q && !strncmp(q, "FunctionCtx.", 12);
    }
    if (!strcmp(m, "torch.jit"))   /* torch.jit.annotate(type, value) returns value */
        return PyUnicode_CompareWithASCIIString(((PyFunctionObject *)fn)->func_qualname, "annotate") == 0;
    if (!strcmp(m, "torch.jit._script"))   /* torch.jit._unwrap_optional(x): x, asserted not None */
        return PyUnicode_CompareWithASCIIString(((PyFunctionObject *)fn)->func_qualname, "_unwrap_optional") == 0;
    if (!strcmp(m, "torch.nn.init")) {
        /* the fan and gain helpers only read a tensor's rank and sizes or their arguments;
         * the initialisers themselves (kaiming_uniform_, ...) write random draws into
         * parameters and stay out */
        const char *q = PyUnicode_AsUTF8(((PyFunctionObject *)fn)->func_qualname);
        if (!q)
            sj_err_clear();
        return q && (!strncmp(q, "_calculate_", 11) || !strcmp(q, "calculate_gain"));
    }
    return !strcmp(m, "torch.nn.utils.parametrize") || !strcmp(m, "torch.nn.utils.parametrizations") ||
           !strcmp(m, "torch.nn.utils.weight_norm");
}

/* 1 when obj (borrowed) is a functools.lru_cache wrapper of a Python function. */
static int is_lru_cache_wrapper(PyObject *obj)
{
    static PyObject *lru_type;   /* strong: functools._lru_cache_wrapper, never released */
    if (!lru_type) {
        PyObject *ft = PyImport_ImportModule("functools");
        lru_type = ft ? PyObject_GetAttrString(ft, "_lru_cache_wrapper") : NULL;
        Py_XDECREF(ft);
        if (!lru_type) {
            sj_err_clear();
            return 0;
        }
    }
    if ((PyObject *)Py_TYPE(obj) != lru_type)
        return 0;
    PyObject *w = PyObject_GetAttrString(obj, "__wrapped__");
    int r = w && PyFunction_Check(w);
    Py_XDECREF(w);
    sj_err_clear();
    return r;
}

/* The call of something capture does not model: the failure, worded by what fn is. NULL. */
static Var *call_unsupported(Capture *c, Var *fn, Var **args, int32_t nargs)
{
    if (fn->kind == VK_GRADMODE && nargs == 1 && args[0]->kind == VK_FUNC)
        cap_fail(c, BR_UNSUPPORTED_CALL, "%s used as a decorator on %s, a function defined in the frame",
                 sj_grad_mode_text(fn), var_a(c, args[0]));
    else if (fn->obj && (fn->kind == VK_OBJECT || fn->kind == VK_CALLABLE))
        cap_fail(c, BR_UNSUPPORTED_CALL, "%s", sj_callable_name(c, fn->obj));
    else
        cap_fail(c, BR_UNSUPPORTED_CALL, "calling %s", var_a(c, fn));
    return NULL;
}

/* A Python function: a table row, a fold, a hint, a library call, else inlined. */
static Var *call_function(Capture *c, Var *fn, Var **args, int32_t nargs, PyObject *kwnames)
{
    int row = fn->obj ? callables_lookup(fn->obj) : -1;
    static int einsum_row = -2;
    if (einsum_row == -2)
        einsum_row = callables_path_row("torch.einsum");
    if (row >= 0 && row == einsum_row) { /* two operands: a matmul (einsum.c) */
        int handled;
        Var *r = einsum_as_matmul(c, args, nargs, kwnames, &handled);
        if (handled)
            return r;
    }
    if (row >= 0)
        return op_record(c, row, args, nargs, kwnames);
    if (fn->obj) {   /* library queries answered by a constant (folds.def) */
        int handled = 0;
        Var *r = folds_call(c, fn->obj, args, nargs, kwnames, &handled);
        if (handled)
            return r;
        r = copies_call(c, fn->obj, args, nargs, kwnames, &handled);
        if (handled)
            return r;
    }
    if (fn->obj && disabled_is_wrapper(fn->obj))
        return disabled_call(c, fn->obj);   /* torch.compiler.disable: break (disabled.c) */
    if (fn->obj && nargs >= 1 && args[0]->kind == VK_MODULE && rnn_is_forward(fn->obj)) {
        /* nn.LSTM.forward(self, ...) called directly (super().forward in a subclass) */
        int handled = 0;
        Var *r = rnn_module_call(c, args[0], fn, args + 1, nargs - 1, kwnames, &handled);
        if (handled)
            return r;
    }
    if (fn->obj && autograd_fn_is_apply(fn->obj))
        return autograd_fn_apply(c, args, nargs, kwnames);
    if (fn->obj && disabled_is_factory(fn->obj))
        return disabled_make(c, fn->obj, args, nargs, kwnames);
    if (fn->obj) {   /* shapejit.check / constrain_range: hints, not code to inline */
        int handled = 0;
        Var *r = check_call(c, fn->obj, args, nargs, kwnames, &handled);
        if (handled)
            return r;
        r = collections_call_function(c, fn->obj, args, nargs, kwnames, &handled);
        if (handled || cap_failed(c))
            return r;
    }
    if (fn->obj && nargs == 1 && !kwnames) {
        Var *r = fold_signature(c, fn->obj, args[0]);
        if (r || cap_failed(c))
            return r;
    }
    PyObject *repl = fn->obj ? polyfill_for(fn->obj) : NULL;   /* borrowed */
    if (repl) {
        Var *f = wrap_untracked(c, repl);
        return f ? inline_function(c, f, args, nargs, kwnames) : NULL;
    }
    if (fn->obj && libs_is_trusted_file(((PyCodeObject *)PyFunction_GET_CODE(fn->obj))->co_filename)) {
        PyObject *mod = ((PyFunctionObject *)fn->obj)->func_module;
        /* module forwards, container helpers and the Python helpers of
         * torch.nn.functional are inlined on purpose; other torch internals are not.
         * The wrapper that @torch.no_grad() and friends put around a function is
         * inlined too (its __module__ is the wrapped function's, so it is known by
         * its globals): its body is a with block over the grad mode, which capture
         * handles. */
        const char *m = mod && PyUnicode_Check(mod) ? PyUnicode_AsUTF8(mod) : "";
        if (!m || (strncmp(m, "torch.nn.modules", 16) != 0 && strcmp(m, "torch.nn.functional") != 0 &&
                   strcmp(m, "torch.functional") != 0 && !is_grad_mode_decorator(fn->obj) &&
                   !inline_torch_helper(m, fn->obj))) {
            int handled = 0;
            Var *r = builtin_call(c, fn->obj, args, nargs, kwnames, &handled);
            if (handled)
                return r;
            r = npgrid_call(c, fn->obj, args, nargs, kwnames, &handled);
            if (handled)
                return r;
            if (!strcmp(m, "torch._dynamo.decorators") &&
                PyUnicode_CompareWithASCIIString(((PyFunctionObject *)fn->obj)->func_qualname, "graph_break") == 0)
                cap_fail(c, BR_UNSUPPORTED_CALL, "torch._dynamo.graph_break() asks for a break here");
            else
                cap_fail(c, BR_UNSUPPORTED_CALL, "%s is not supported (not in shapejit's callables table)",
                         sj_callable_name(c, fn->obj));
            return NULL;
        }
    }
    return inline_function(c, fn, args, nargs, kwnames);
}

/* A bound method: self and the function, or a method of a modelled container. */
static Var *call_method(Capture *c, Var *fn, Var **args, int32_t nargs, PyObject *kwnames)
{
    Var **all = cap_alloc(c, sizeof(Var *) * (size_t)(nargs + 1));
    if (!all)
        return NULL;
    all[0] = fn->u.method.self;
    if (nargs)
        memcpy(all + 1, args, sizeof(Var *) * (size_t)nargs);
    Var *inner = fn->u.method.fn;
    if (inner->kind == VK_CONST && PyUnicode_Check(inner->obj)) {
        if (fn->u.method.self->kind == VK_USEROBJ) {
            int handled = 0;
            const char *mn = PyUnicode_AsUTF8(inner->obj);
            Var *r = mn ? objects_record_call(c, fn->u.method.self, mn, args, nargs, &handled) : NULL;
            if (handled)
                return r;
        }
        if (collections_type_of(fn->u.method.self)) {
            int handled = 0;
            const char *mn = PyUnicode_AsUTF8(inner->obj);
            Var *r = mn ? collections_method(c, fn->u.method.self, mn, args, nargs, kwnames, &handled) : NULL;
            if (handled || cap_failed(c))
                return r;
        }
        return container_call(c, fn->u.method.self, inner->obj, args, nargs, kwnames);
    }
    if (fn->u.method.self->kind == VK_MODULE && inner->kind == VK_FUNC && inner->obj) {
        int handled = 0;
        const char *mn = PyUnicode_AsUTF8(((PyFunctionObject *)inner->obj)->func_name);
        Var *r = mn ? module_iter_method(c, fn->u.method.self, mn, args, nargs, kwnames, &handled) : NULL;
        if (handled)
            return r;
    }
    if (fn->u.method.self->kind == VK_TENSOR && inner->kind == VK_CALLABLE) {
        int handled = 0;
        Var *r = builtin_call(c, inner->obj, all, nargs + 1, kwnames, &handled);
        if (handled)
            return r;
    }
    Var *r = call_var(c, inner, all, nargs + 1, kwnames);
    if (!r && inner->obj && fn->u.method.self->obj)
        sj_name_bound_call(c, inner->obj, fn->u.method.self->obj);
    return r;
}

/* functools.partial: its arguments and keywords before the call's. */
static Var *call_partial(Capture *c, Var *fn, Var **args, int32_t nargs, PyObject *kwnames)
{
    Var *pargs = fn->u.partial.args, *pkw = fn->u.partial.kwargs;
    if (pkw && var_dict_force(c, pkw) < 0)
        return NULL;
    int32_t np = pargs && pargs->kind == VK_TUPLE ? pargs->u.seq.n : 0;
    int32_t nk = pkw && pkw->kind == VK_DICT ? pkw->u.dict.n : 0;
    int32_t nkw = kwnames ? (int32_t)PyTuple_GET_SIZE(kwnames) : 0;
    int32_t npos = nargs - nkw;
    Var **all = cap_alloc(c, sizeof(Var *) * (size_t)(np + nargs + nk + 1));
    PyObject *names = PyTuple_New(nk + nkw);
    if (!all || !names || !cap_keep_steal(c, names))
        return NULL;
    int32_t k = 0;
    for (int32_t i = 0; i < np; i++)
        all[k++] = pargs->u.seq.items[i];
    for (int32_t i = 0; i < npos; i++)
        all[k++] = args[i];
    int32_t kn = 0;
    for (int32_t i = 0; i < nk; i++) {
        PyTuple_SET_ITEM(names, kn++, Py_NewRef(pkw->u.dict.keys[i]->obj));
        all[k++] = pkw->u.dict.vals[i];
    }
    for (int32_t i = 0; i < nkw; i++) {
        PyTuple_SET_ITEM(names, kn++, Py_NewRef(PyTuple_GET_ITEM(kwnames, i)));
        all[k++] = args[npos + i];
    }
    return call_var(c, fn->u.partial.fn, all, k, kn ? names : NULL);
}

static Var *call_exit(Capture *c, Var *fn)
{
    /* the normal exit of a grad-mode block: restore the mode from before it */
    if (fn->u.grad.inference)
        return infmode_exit(c, fn) < 0 ? NULL : var_const(c, Py_None);
    Var *flag = var_const(c, fn->u.grad.prev ? Py_True : Py_False);
    Var *setter = flag ? wrap_untracked(c, libs.set_grad_fn) : NULL;
    Var *a[1] = {flag};
    if (!setter || !call_var(c, setter, a, 1, NULL))
        return NULL;
    c->grad_mode = fn->u.grad.prev;
    return var_const(c, Py_None);
}

/* A builtin or library callable: a table row, an operator on Python values, the folds
 * and models of callables, else a fold of a pure function. */
static Var *call_callable(Capture *c, Var *fn, Var **args, int32_t nargs, PyObject *kwnames)
{
    int row = callables_lookup(fn->obj);
    if (row >= 0 && callable_rows[row].kind == CK_OPERATOR && nargs == 2 && !kwnames && args[0]->kind != VK_TENSOR &&
        args[1]->kind != VK_TENSOR) {
        /* operator.mul(a, b) on Python values (functools.reduce(operator.mul, x.shape)):
         * the operator itself, as a * b would be evaluated */
        int nb = op_nb_index(callable_rows[row].path + strlen("operator."));
        if (nb >= 0)
            return op_binary(c, nb, args[0], args[1]);
    }
    static int conv1d_row = -2;
    if (conv1d_row == -2)
        conv1d_row = callables_path_row("torch.nn.functional.conv1d");
    if (row >= 0 && row == conv1d_row) { /* depthwise, short kernel: a sum (conv_depthwise.c) */
        int handled;
        Var *r = conv_depthwise_as_sum(c, args, nargs, kwnames, &handled);
        if (handled)
            return r;
    }
    if (row >= 0)
        return op_record(c, row, args, nargs, kwnames);
    int handled = 0;
    Var *r = folds_call(c, fn->obj, args, nargs, kwnames, &handled);
    if (handled)
        return r;
    r = ufunc_method_call(c, fn->obj, args, nargs, kwnames, &handled);
    if (handled)
        return r;
    r = npgrid_call(c, fn->obj, args, nargs, kwnames, &handled);
    if (handled)
        return r;
    r = collections_call_builtin(c, fn->obj, args, nargs, kwnames, &handled);
    if (handled)
        return r;
    r = builtin_call(c, fn->obj, args, nargs, kwnames, &handled);
    if (handled)
        return r;
    r = objects_construct(c, fn->obj, args, nargs, kwnames, &handled);
    if (handled)
        return r;
    r = fold_readonly_method(c, fn->obj, args, nargs, kwnames, &handled);
    if (handled)
        return r;
    if (PyExceptionClass_Check(fn->obj) && var_all_const(args, nargs)) {
        /* building an exception to raise: KeyError(key) */
        return cap_fold_call(c, fn->obj, args, nargs, kwnames);
    }
    if (is_pure_folder(fn->obj)) {
        /* math.exp(f) of a dynamic float: specialised, as torch does */
        Var **pinned = cap_alloc(c, sizeof(Var *) * (size_t)(nargs + 1));
        int all = pinned ? gscalar_pin_args(c, args, nargs, pinned, "a Python function needs its value") : -1;
        if (all < 0)
            return NULL;
        if (all)
            return cap_fold_call(c, fn->obj, pinned, nargs, kwnames);
        if (all_const_or_symint(args, nargs))   /* math.log(n) of a size: n specialised */
            return cap_fold_call(c, fn->obj, args, nargs, kwnames);   /* (var_to_py guards it) */
    }
    cap_fail(c, BR_UNSUPPORTED_CALL, "%s", sj_callable_name(c, fn->obj));
    return NULL;
}

/* An object with __call__ (an lru_cache wrapper: the function it wraps). */
static Var *call_object(Capture *c, Var *fn, Var **args, int32_t nargs, PyObject *kwnames)
{
    if (fn->kind == VK_OBJECT && is_lru_cache_wrapper(fn->obj)) {
        /* @functools.lru_cache / @functools.cache: the function it wraps is inlined, as
         * torch.compile does; the cache is neither read nor filled (capture's values
         * are graph values, not the objects the cache would key on) */
        PyObject *wn = PyUnicode_FromString("__wrapped__");
        Var *w = wn ? attr_load(c, fn, wn) : NULL;
        Py_XDECREF(wn);
        return w ? call_var(c, w, args, nargs, kwnames) : NULL;
    }
    static PyObject *s_call;   /* interned "__call__", immortal for our purposes */
    if (!s_call && !(s_call = PyUnicode_InternFromString("__call__")))
        return NULL;
    PyObject *call = _PyType_Lookup(fn->kind == VK_USEROBJ ? fn->u.uobj.type : Py_TYPE(fn->obj), s_call);
    if (call && PyFunction_Check(call)) {
        Var *f = wrap_untracked(c, call);
        Var **all = cap_alloc(c, sizeof(Var *) * (size_t)(nargs + 1));
        if (!f || !all)
            return NULL;
        all[0] = fn;
        if (nargs)
            memcpy(all + 1, args, sizeof(Var *) * (size_t)nargs);
        return inline_function(c, f, all, nargs + 1, kwnames);
    }
    return call_unsupported(c, fn, args, nargs);
}

/* 1 when fn (or a function it wraps: functools.lru_cache, functools.wraps) carries the
 * mark torch._dynamo.assume_constant_result sets. */
static int marked_constant(PyObject *fn)
{
    static PyObject *s_mark, *s_wrapped; /* strong, interned */
    if ((!s_mark && !(s_mark = PyUnicode_InternFromString("_dynamo_marked_constant"))) ||
        (!s_wrapped && !(s_wrapped = PyUnicode_InternFromString("__wrapped__")))) {
        sj_err_clear();
        return 0;
    }
    Py_INCREF(fn);
    for (int depth = 0; fn && depth < 4; depth++) {
        PyObject *m = PyFunction_Check(fn) || Py_TYPE(fn)->tp_dictoffset ? PyObject_GetAttr(fn, s_mark) : NULL;
        int marked = m && PyObject_IsTrue(m) == 1;
        Py_XDECREF(m);
        sj_err_clear();
        if (marked) {
            Py_DECREF(fn);
            return 1;
        }
        PyObject *inner = PyFunction_Check(fn) || Py_TYPE(fn)->tp_dictoffset ? PyObject_GetAttr(fn, s_wrapped) : NULL;
        sj_err_clear();
        Py_DECREF(fn);
        fn = inner;
    }
    Py_XDECREF(fn);
    return 0;
}

/* A call of a function marked by torch._dynamo.assume_constant_result with constant
 * arguments: run now, its result (a constant: None, bool, int, float, str, or a tuple of
 * them) used as it is on every call, unguarded, as torch.compile does. NULL with *handled
 * 0 otherwise. */
static Var *call_assumed_constant(Capture *c, Var *fn, Var **args, int32_t nargs, PyObject *kwnames, int *handled)
{
    *handled = 0;
    if (!fn->obj || (fn->kind != VK_FUNC && fn->kind != VK_CALLABLE) || !marked_constant(fn->obj))
        return NULL;
    for (int32_t i = 0; i < nargs; i++)
        if (!var_is_const(args[i]))
            return NULL;
    *handled = 1;
    PyObject *r = cap_call_live(c, fn->obj, args, nargs, kwnames); /* new */
    if (!r)
        return NULL;
    if (!wrap_is_constant(r)) {
        cap_fail(c, BR_UNSUPPORTED_VALUE, "%R, marked assume_constant_result, returned a %s (not a constant)", fn->obj,
                 Py_TYPE(r)->tp_name);
        Py_DECREF(r);
        return NULL;
    }
    return var_const_steal(c, r);
}

Var *call_var(Capture *c, Var *fn, Var **args, int32_t nargs, PyObject *kwnames)
{
    if (!fn) {
        cap_fail(c, BR_INTERNAL, "call of NULL");
        return NULL;
    }
    int assumed = 0;
    Var *constant = call_assumed_constant(c, fn, args, nargs, kwnames, &assumed);
    if (assumed)
        return constant;
    if (fn->obj && (fn->kind == VK_CALLABLE || fn->kind == VK_OBJECT) && library_op_is(fn->obj))
        return library_op_call(c, fn->obj, args, nargs, kwnames);
    if (fn->obj && fn->kind == VK_CALLABLE && polyfill_is_pointwise_call(fn->obj))
        return polyfill_pointwise_call(c, args, nargs, kwnames);
    if (fn->obj && fn->kind == VK_CALLABLE && polyfill_is_static_int(fn->obj))
        return polyfill_static_int(c, args, nargs, kwnames);
    switch (fn->kind) {
    case VK_FUNC:
        return call_function(c, fn, args, nargs, kwnames);
    case VK_METHOD:
        return call_method(c, fn, args, nargs, kwnames);
    case VK_MODULE:
        return call_module(c, fn, args, nargs, kwnames);
    case VK_PARTIAL:
        return call_partial(c, fn, args, nargs, kwnames);
    case VK_EXIT:
        return call_exit(c, fn);
    case VK_CALLABLE:
        return call_callable(c, fn, args, nargs, kwnames);
    case VK_OBJECT:
    case VK_USEROBJ:
        return call_object(c, fn, args, nargs, kwnames);
    default:
        return call_unsupported(c, fn, args, nargs);
    }
}

Var *call_function_ex(Capture *c, Var *fn, Var *args, Var *kwargs)
{
    Var **items;
    int32_t n;
    if (op_iterate(c, args, &items, &n) < 0)
        return NULL;
    int32_t nk = 0;
    if (kwargs) {
        if (kwargs->kind != VK_DICT) {
            cap_fail(c, BR_UNSUPPORTED_VALUE, "**kwargs from %s", var_a(c, kwargs));
            return NULL;
        }
        if (var_dict_force(c, kwargs) < 0)
            return NULL;
        nk = kwargs->u.dict.n;
    }
    Var **all = cap_alloc(c, sizeof(Var *) * (size_t)(n + nk + 1));
    if (!all)
        return NULL;
    if (n)
        memcpy(all, items, sizeof(Var *) * (size_t)n);
    PyObject *names = NULL;
    if (nk) {
        names = PyTuple_New(nk);
        if (!names || !cap_keep_steal(c, names))
            return NULL;
        for (int32_t i = 0; i < nk; i++) {
            PyObject *k = kwargs->u.dict.keys[i]->obj;
            if (kwargs->u.dict.keys[i]->kind != VK_CONST || !PyUnicode_Check(k)) {
                cap_fail(c, BR_USER_EXCEPTION, "keywords must be strings");
                return NULL;
            }
            PyTuple_SET_ITEM(names, i, Py_NewRef(k));
            all[n + i] = kwargs->u.dict.vals[i];
        }
    }
    return call_var(c, fn, all, n + nk, names);
}
