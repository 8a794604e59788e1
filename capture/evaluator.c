/* The symbolic evaluator: CPython 3.11 bytecode over vars.
 *
 * Shape of the loop (after LuaJIT's recorder): decode the instruction (EXTENDED_ARG folded,
 * CACHE entries skipped), one switch with cases grouped by family, helpers for anything
 * long. Anything unsupported records a reason with cap_fail() and stops the capture; it
 * never aborts the process. Only the normal (non-exceptional) path is evaluated. */
#include "capture.h"
#include "../vocab/libs.h"
#include "../core/config.h"
#include "sj_opcodes.h"
#include "../bytecode/bcwriter.h"
#include "../core/errors.h"
#include "../core/pyutil.h"

#define STEP_LIMIT 2000000

/* ------------------------------------------------------------- helpers ---- */

static int push(Capture *c, EvalFrame *f, Var *v)
{
    if (f->sp >= f->stack_cap)
        return cap_fail(c, BR_INTERNAL, "evaluation stack overflow in %U", f->code->co_qualname);
    if (c->ngen_runs && v && cap_gen_touch(c, v) < 0)
        return -1;
    f->stack[f->sp++] = v;
    return 0;
}

#define POP() (f->stack[--f->sp])
#define TOP() (f->stack[f->sp - 1])
#define PEEK(n) (f->stack[f->sp - (n)])
#define PUSH(v) \
    do { \
        Var *pv_ = (v); \
        if (!pv_ || push(c, f, pv_) < 0) \
            goto fail; \
    } while (0)
#define NEED(n) \
    do { \
        if (f->sp < (n)) { \
            cap_fail(c, BR_INTERNAL, "evaluation stack underflow"); \
            goto fail; \
        } \
    } while (0)

static PyObject *co_name_at(PyCodeObject *co, int i)
{
    return PyTuple_GET_ITEM(co->co_names, i);
}

static PyObject *local_name(PyCodeObject *co, int i)
{
    return PyTuple_GET_ITEM(co->co_localsplusnames, i);
}

/* The *args / **kwargs slots of a code object: fresh containers on every call. */
static int is_star_slot(PyCodeObject *co, int i)
{
    int first = co->co_argcount + co->co_kwonlyargcount;
    int n = ((co->co_flags & CO_VARARGS) != 0) + ((co->co_flags & CO_VARKEYWORDS) != 0);
    return i >= first && i < first + n;
}

/* Wrap a not-yet-read argument of the compiled frame. */
static Var *wrap_pending(Capture *c, EvalFrame *f, int i)
{
    int32_t s = sources_add(&c->src, SRC_LOCAL, -1, i, PyTuple_GET_ITEM(f->code->co_localsplusnames, i), NULL);
    Var *v = s < 0 ? NULL : wrap_value(c, f->pending[i], s);
    if (v && is_star_slot(f->code, i))
        v->fresh = 1;
    f->pending[i] = NULL;
    return v;
}

/* Source for a global name read by frame f. -1 when it is not tracked (library code). */
static int32_t global_source(Capture *c, EvalFrame *f, PyObject *name, PyObject *dict)
{
    if (f->trusted)
        return -2;   /* no guard */
    EvalFrame *top = f;
    while (top->parent)
        top = top->parent;
    if (dict == top->globals)
        return sources_add(&c->src, SRC_GLOBAL, -1, 0, name, NULL);
    return sources_add(&c->src, SRC_MODGLOBAL, -1, 0, name, dict);
}

static Var *load_global(Capture *c, EvalFrame *f, PyObject *name)
{
    PyObject *dict = f->globals;
    PyObject *v = PyDict_GetItemWithError(f->globals, name);
    if (!v && !PyErr_Occurred() && PyDict_Check(f->builtins)) {
        v = PyDict_GetItemWithError(f->builtins, name);
        dict = f->builtins;
    }
    if (!v) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_NameError, "name '%U' is not defined", name);
        cap_fail_exc(c, BR_USER_EXCEPTION);
        return NULL;
    }
    int32_t src;
    if (dict == f->builtins)   /* a builtin: G['len'] falls back to builtins at run time */
        src = f->trusted ? -2 : global_source(c, f, name, f->globals);
    else
        src = global_source(c, f, name, dict);
    if (src == -1)
        return NULL;
    return wrap_value(c, v, src < 0 ? -1 : src);
}

/* A closure cell's contents. */
static Var *cell_get(Capture *c, EvalFrame *f, Var *cell, int idx)
{
    if (!cell || cell->kind != VK_CELL) {
        cap_fail(c, BR_INTERNAL, "LOAD_DEREF on %s", var_a(c, cell));
        return NULL;
    }
    if (cell->u.cell.contents)
        return cell->u.cell.contents;
    if (cell->u.cell.real) {
        PyObject *v = PyCell_GET(cell->u.cell.real);
        if (v) {
            Var *w = wrap_value(c, v, cell->src);
            cell->u.cell.contents = w;
            return w;
        }
    }
    PyErr_Format(PyExc_NameError, "free variable '%U' referenced before assignment", local_name(f->code, idx));
    cap_fail_exc(c, BR_USER_EXCEPTION);
    return NULL;
}

static Var *build_string(Capture *c, Var **items, int n)
{
    PyObject *parts = PyTuple_New(n);
    if (!parts)
        return NULL;
    for (int i = 0; i < n; i++) {
        if (!var_is_const(items[i]) || !PyUnicode_Check(items[i]->obj)) {
            Py_DECREF(parts);
            cap_fail(c, BR_UNSUPPORTED_VALUE, "f-string of %s", var_a(c, items[i]));
            return NULL;
        }
        PyTuple_SET_ITEM(parts, i, Py_NewRef(items[i]->obj));
    }
    PyObject *s = sj_join("", parts);
    return s ? var_const_steal(c, s) : NULL;
}

static Var *format_value(Capture *c, Var *v, Var *spec, int conv)
{
    if (spec && !var_is_const(spec)) {
        cap_fail(c, BR_UNSUPPORTED_VALUE, "formatting with a format spec that is %s", var_a(c, spec));
        return NULL;
    }
    PyObject *o = NULL, *conv_o = NULL;
    if (var_is_const(v)) {
        o = v->obj;
    } else {
        /* containers of constants (a tuple of sizes) format as their Python value */
        int saved = cap_failed(c);
        PyObject *py = (v->kind == VK_TUPLE || v->kind == VK_LIST || v->kind == VK_DICT) ? var_to_py(c, v) : NULL;
        if (!py) {
            sj_err_clear();
            if (!saved)
                cap_clear_failure(c);
            cap_fail(c, BR_UNSUPPORTED_VALUE, "formatting %s", var_a(c, v));
            return NULL;
        }
        o = cap_keep_steal(c, py);
        if (!o)
            return NULL;
    }
    if (conv == 1)
        conv_o = PyObject_Str(o);
    else if (conv == 2)
        conv_o = PyObject_Repr(o);
    else if (conv == 3)
        conv_o = PyObject_ASCII(o);
    else
        conv_o = Py_NewRef(o);
    if (!conv_o) {
        cap_fail_exc(c, BR_USER_EXCEPTION);
        return NULL;
    }
    PyObject *r = PyObject_Format(conv_o, spec ? spec->obj : NULL);
    Py_DECREF(conv_o);
    if (!r) {
        cap_fail_exc(c, BR_USER_EXCEPTION);
        return NULL;
    }
    return var_const_steal(c, r);
}

static Var *make_function(Capture *c, EvalFrame *f, int flags)
{
    Var *code = POP();
    Var *closure = NULL, *kwdefaults = NULL, *defaults = NULL;
    if (flags & 0x08)
        closure = POP();
    if (flags & 0x04)
        (void)POP();   /* annotations: not needed to run the function */
    if (flags & 0x02)
        kwdefaults = POP();
    if (flags & 0x01)
        defaults = POP();
    if (!var_is_const(code) || !PyCode_Check(code->obj)) {
        cap_fail(c, BR_INTERNAL, "MAKE_FUNCTION without a code object");
        return NULL;
    }
    Var *fn = var_new(c, VK_FUNC);
    if (!fn)
        return NULL;
    fn->u.func.code = (PyCodeObject *)code->obj;
    fn->u.func.globals = f->globals;
    fn->u.func.defaults = defaults;
    fn->u.func.kwdefaults = kwdefaults;
    fn->u.func.closure = closure;
    fn->u.func.name = ((PyCodeObject *)code->obj)->co_qualname;
    return fn;
}

/* BEFORE_WITH on a grad-mode object: record the switch and push __exit__ and the result. */
static int before_with(Capture *c, EvalFrame *f, Var *mgr)
{
    if (mgr->kind != VK_GRADMODE)
        return cap_fail(c, BR_UNSUPPORTED_OPCODE, "'with' on %s", var_a(c, mgr));
    /* The grad mode at capture start is guarded (GLOBAL_STATE); inside, capture tracks it. */
    Var *ex = var_new(c, VK_EXIT);
    if (!ex)
        return -1;
    ex->u.grad.enabled = mgr->u.grad.enabled;
    ex->u.grad.prev = mgr->u.grad.applied ? mgr->u.grad.prev : c->grad_mode;
    if (mgr->u.grad.inference) {
        ex->obj = mgr->obj;
        if (infmode_enter(c, mgr, ex) < 0 || push(c, f, ex) < 0)
            return -1;
        Var *none = var_const(c, Py_None);
        return none ? push(c, f, none) : -1;
    }
    Var *flag = var_const(c, mgr->u.grad.enabled ? Py_True : Py_False);
    if (!flag)
        return -1;
    Var *args[1] = {flag};
    Var *setter = wrap_untracked(c, libs.set_grad_fn);
    if (!setter || !call_var(c, setter, args, 1, NULL))
        return -1;
    c->grad_mode = mgr->u.grad.enabled;
    ex->obj = mgr->obj;
    if (push(c, f, ex) < 0)
        return -1;
    Var *none = var_const(c, Py_None);
    return none ? push(c, f, none) : -1;
}

int eval_pc_in_try(PyCodeObject *co, int32_t pc)
{
    int t, d, l;
    return bc_find_handler(co, pc, &t, &d, &l) == 0;
}

/* ------------------------------------------------------------------ loop ---- */

static Var *run(Capture *c, EvalFrame *f)
{
    PyCodeObject *co = f->code;
    const uint16_t *ins = f->ins;
    int32_t n = f->ninstr, pc = 0;
    long steps = 0;
resume:
    while (pc < n) {
        if (++steps > STEP_LIMIT) {
            cap_fail(c, BR_UNSUPPORTED_OPCODE, "capture ran %d instructions without finishing", STEP_LIMIT);
            goto fail;
        }
        f->pc = pc;
        int op = ins[pc] & 0xff;
        int arg = ins[pc] >> 8;
        while (op == SJOP_EXTENDED_ARG) {
            pc++;
            op = ins[pc] & 0xff;
            arg = (arg << 8) | (ins[pc] >> 8);
        }
        int32_t next = pc + 1 + sj_op_caches[op];
        if (f->is_top && ++c->top_step == c->stop_step) {
            /* the graph break found by an earlier pass: stop before this instruction */
            c->stopped = 1;
            c->stop_pc = f->pc;
            c->stop_kwnames = f->kwnames;
            return NULL;
        }
        pc = next;
        switch (op) {
        /* ---- no-ops ---- */
        case SJOP_NOP:
        case SJOP_RESUME:
        case SJOP_PRECALL:
        case SJOP_CACHE:
            break;
        case SJOP_KW_NAMES:
            f->kwnames = PyTuple_GET_ITEM(co->co_consts, arg);
            break;

        /* ---- stack ---- */
        case SJOP_POP_TOP:
            NEED(1);
            (void)POP();
            break;
        case SJOP_PUSH_NULL:
            if (push(c, f, NULL) < 0)
                goto fail;
            break;
        case SJOP_COPY:
            NEED(arg);
            if (push(c, f, PEEK(arg)) < 0)
                goto fail;
            break;
        case SJOP_SWAP: {
            NEED(arg);
            Var *t = TOP();
            TOP() = PEEK(arg);
            PEEK(arg) = t;
            break;
        }

        /* ---- locals, constants, globals, cells ---- */
        case SJOP_LOAD_CONST:
            PUSH(var_const(c, PyTuple_GET_ITEM(co->co_consts, arg)));
            break;
        case SJOP_LOAD_FAST: {
            Var *v = f->locals[arg];
            if (!v && f->pending && f->pending[arg]) {
                if (!(v = wrap_pending(c, f, arg)))
                    goto fail;
                f->locals[arg] = v;
            }
            if (!v) {
                PyErr_Format(PyExc_UnboundLocalError, "local variable '%U' referenced before assignment",
                             local_name(co, arg));
                cap_fail_exc(c, BR_USER_EXCEPTION);
                goto fail;
            }
            PUSH(v);
            break;
        }
        case SJOP_STORE_FAST:
            NEED(1);
            f->locals[arg] = POP();
            if (f->pending)
                f->pending[arg] = NULL;
            break;
        case SJOP_DELETE_FAST:
            f->locals[arg] = NULL;
            if (f->pending)
                f->pending[arg] = NULL;
            break;
        case SJOP_LOAD_GLOBAL:
            if ((arg & 1) && push(c, f, NULL) < 0)
                goto fail;
            PUSH(load_global(c, f, co_name_at(co, arg >> 1)));
            break;
        case SJOP_STORE_GLOBAL:
        case SJOP_DELETE_GLOBAL:
            cap_fail(c, BR_SIDE_EFFECT, "assignment to global '%U'", co_name_at(co, arg));
            goto fail;
        case SJOP_MAKE_CELL: {
            Var *cell = var_new(c, VK_CELL);
            if (!cell)
                goto fail;
            if (!f->locals[arg] && f->pending && f->pending[arg] && !(f->locals[arg] = wrap_pending(c, f, arg)))
                goto fail;
            cell->u.cell.contents = f->locals[arg];
            f->locals[arg] = cell;
            break;
        }
        case SJOP_COPY_FREE_VARS: {
            int first = co->co_nlocalsplus - arg;
            for (int i = 0; i < arg; i++) {
                if (f->fn) {
                    /* inlined: cells come from the function var */
                    Var *fn = f->fn;
                    if (fn->obj) {
                        PyObject *clo = PyFunction_GET_CLOSURE(fn->obj);
                        Var *cell = var_new(c, VK_CELL);
                        if (!cell || !clo)
                            goto fail;
                        cell->u.cell.real = PyTuple_GET_ITEM(clo, i);
                        int32_t fsrc = wrap_fn_source(c, fn);
                        if (fsrc == -2)
                            goto fail;
                        if (fsrc >= 0 && (cell->src = sources_add(&c->src, SRC_CELL, fsrc, i, NULL, NULL)) < 0) {
                            cap_fail_exc(c, BR_INTERNAL);
                            goto fail;
                        }
                        f->locals[first + i] = cell;
                    } else {
                        Var *clo = fn->u.func.closure;
                        if (!clo || clo->kind != VK_TUPLE || i >= clo->u.seq.n) {
                            cap_fail(c, BR_INTERNAL, "closure mismatch");
                            goto fail;
                        }
                        f->locals[first + i] = clo->u.seq.items[i];
                    }
                } else {
                    Var *cell = var_new(c, VK_CELL);
                    if (!cell || !f->closure)
                        goto fail;
                    cell->u.cell.real = PyTuple_GET_ITEM(f->closure, i);
                    if ((cell->src = sources_add(&c->src, SRC_FREEVAR, -1, i, local_name(co, first + i), NULL)) < 0)
                        goto fail;
                    f->locals[first + i] = cell;
                }
            }
            break;
        }
        case SJOP_LOAD_CLOSURE:
            PUSH(f->locals[arg]);
            break;
        case SJOP_LOAD_DEREF:
            if (c->ngen_runs && f->locals[arg] && cap_gen_touch(c, f->locals[arg]) < 0)
                goto fail;   /* (its rebinding is a change a generator's items depend on) */
            PUSH(cell_get(c, f, f->locals[arg], arg));
            break;
        case SJOP_STORE_DEREF: {
            NEED(1);
            Var *cell = f->locals[arg];
            Var *v = POP();
            if (!cell || cell->kind != VK_CELL) {
                cap_fail(c, BR_INTERNAL, "STORE_DEREF on %s", var_a(c, cell));
                goto fail;
            }
            if (cell->u.cell.real) {
                cap_fail(c, BR_SIDE_EFFECT, "assignment to nonlocal '%U' of an outer function", local_name(co, arg));
                goto fail;
            }
            if (cap_note_change(c, cell, 0) < 0)   /* a rebinding a generator's code may read */
                goto fail;
            cell->u.cell.contents = v;
            break;
        }

        /* ---- attributes ---- */
        case SJOP_LOAD_ATTR: {
            NEED(1);
            Var *o = POP();
            PUSH(attr_load(c, o, co_name_at(co, arg)));
            break;
        }
        case SJOP_STORE_ATTR: {
            NEED(2);
            Var *o = POP();
            Var *v = POP();
            if (attr_store(c, o, co_name_at(co, arg), v) < 0)
                goto fail;
            break;
        }
        case SJOP_DELETE_ATTR: {
            /* del o.name: as delattr(o, "name"), captured for an object made in the frame */
            NEED(1);
            Var *o = POP();
            if (o->kind != VK_USEROBJ) {
                cap_fail(c, BR_SIDE_EFFECT, "del of an attribute of %s", var_a(c, o));
                goto fail;
            }
            if (objects_attr_delete(c, o, co_name_at(co, arg)) < 0)
                goto fail;
            break;
        }
        case SJOP_LOAD_METHOD: {
            NEED(1);
            Var *o = POP(), *meth = NULL, *second = NULL;
            if (attr_load_method(c, o, co_name_at(co, arg), &meth, &second) < 0)
                goto fail;
            if (push(c, f, meth) < 0 || push(c, f, second) < 0)
                goto fail;
            break;
        }

        /* ---- calls ---- */
        case SJOP_CALL: {
            NEED(arg + 2);
            Var **base = &f->stack[f->sp - arg - 2];
            Var *fn;
            Var **args;
            int32_t nargs;
            if (base[0]) {
                fn = base[0];
                args = base + 1;
                nargs = arg + 1;
            } else {
                fn = base[1];
                args = base + 2;
                nargs = arg;
            }
            PyObject *kw = f->kwnames;
            f->kwnames = NULL;
            Var *r = call_var(c, fn, args, nargs, kw);
            f->sp -= arg + 2;
            PUSH(r);
            break;
        }
        case SJOP_CALL_FUNCTION_EX: {
            Var *kwargs = (arg & 1) ? POP() : NULL;
            NEED(3);
            Var *args = POP();
            Var *fn = POP();
            (void)POP();   /* the NULL pushed before fn */
            PUSH(call_function_ex(c, fn, args, kwargs));
            break;
        }
        case SJOP_MAKE_FUNCTION:
            PUSH(make_function(c, f, arg));
            break;

        /* ---- operators ---- */
        case SJOP_BINARY_OP: {
            NEED(2);
            Var *b = POP(), *a = POP();
            PUSH(op_binary(c, arg, a, b));
            break;
        }
        case SJOP_COMPARE_OP: {
            NEED(2);
            Var *b = POP(), *a = POP();
            PUSH(op_compare(c, arg, a, b));
            break;
        }
        case SJOP_IS_OP: {
            NEED(2);
            Var *b = POP(), *a = POP();
            int same;
            int uh = objects_is(c, a, b, &same);
            if (uh < 0)
                goto fail;
            if (uh == 0)
                ;
            else if (var_is_const(a) && var_is_const(b))
                same = a->obj == b->obj;
            else if (a->obj && b->obj && a->kind != VK_TENSOR && b->kind != VK_TENSOR)
                same = a->obj == b->obj;
            else if (a == b)
                same = 1;
            else if ((var_is_const(a) && a->obj == Py_None) || (var_is_const(b) && b->obj == Py_None))
                same = 0;   /* a made value is never None */
            else if (a->kind == VK_TENSOR && b->kind == VK_TENSOR)
                same = a->u.t.value == b->u.t.value;
            else if (a->kind != b->kind)
                same = 0;
            else if ((a->kind == VK_LIST || a->kind == VK_DICT || a->kind == VK_USEROBJ) && (!a->obj || !b->obj))
                same = 0;   /* a container made in the frame is its var: another var is another object */
            else {
                cap_fail(c, BR_UNSUPPORTED_VALUE, "'is' between %s and %s", var_a(c, a), var_a(c, b));
                goto fail;
            }
            PUSH(var_const(c, (same ^ arg) ? Py_True : Py_False));
            break;
        }
        case SJOP_CONTAINS_OP: {
            NEED(2);
            Var *container = POP(), *item = POP();
            Var *r = op_contains(c, item, container);
            if (!r)
                goto fail;
            if (arg) {
                int t;
                if (op_truth(c, r, &t) < 0)
                    goto fail;
                r = var_const(c, t ? Py_False : Py_True);
            }
            PUSH(r);
            break;
        }
        case SJOP_UNARY_NEGATIVE:
        case SJOP_UNARY_POSITIVE:
        case SJOP_UNARY_INVERT:
        case SJOP_UNARY_NOT: {
            NEED(1);
            Var *a = POP();
            PUSH(op_unary(c, op, a));
            break;
        }
        case SJOP_BINARY_SUBSCR: {
            NEED(2);
            Var *k = POP(), *o = POP();
            PUSH(op_subscr(c, o, k));
            break;
        }
        case SJOP_STORE_SUBSCR: {
            NEED(3);
            Var *k = POP(), *o = POP(), *v = POP();
            if (op_store_subscr(c, o, k, v) < 0)
                goto fail;
            break;
        }
        case SJOP_DELETE_SUBSCR: {
            NEED(2);
            Var *k = POP(), *o = POP();
            if (cap_note_change(c, o, 0) < 0)
                goto fail;
            int writable = !var_is_outside(o);   /* an outside list or dict is written back */
            if (!writable && ((o->kind == VK_DICT && var_is_dict_key(k)) || (o->kind == VK_LIST && var_is_const(k)))) {
                if (cap_note_mutation(c, o, "del") < 0)
                    goto fail;
                writable = 1;
            }
            if (o->kind == VK_DICT && writable && var_is_dict_key(k)) {
                int r = var_dict_del(c, o, k);
                if (r <= 0) {
                    if (!r)
                        PyErr_SetObject(PyExc_KeyError, k->obj);
                    cap_fail_exc(c, BR_USER_EXCEPTION);
                    goto fail;
                }
                break;
            }
            if (o->kind == VK_LIST && writable && var_is_const(k) && PyIndex_Check(k->obj)) {
                Py_ssize_t i = PyNumber_AsSsize_t(k->obj, NULL);
                if (i < 0)
                    i += o->u.seq.n;
                if (i < 0 || i >= o->u.seq.n) {
                    sj_err_clear();
                    PyErr_SetString(PyExc_IndexError, "list assignment index out of range");
                    cap_fail_exc(c, BR_USER_EXCEPTION);
                    goto fail;
                }
                memmove(o->u.seq.items + i, o->u.seq.items + i + 1, sizeof(Var *) * (size_t)(o->u.seq.n - i - 1));
                o->u.seq.n--;
                break;
            }
            if (o->kind == VK_LIST && !o->u.seq.subtype && writable && var_is_const(k) && PySlice_Check(k->obj)) {
                if (op_list_slice_write(c, o, k->obj, NULL) < 0)
                    goto fail;
                break;
            }
            cap_fail(c, BR_SIDE_EFFECT, "del on %s", var_a(c, o));
            goto fail;
        }

        /* ---- building ---- */
        case SJOP_BUILD_TUPLE:
        case SJOP_BUILD_LIST: {
            NEED(arg);
            Var *s = var_seq(c, op == SJOP_BUILD_TUPLE ? VK_TUPLE : VK_LIST, &f->stack[f->sp - arg], arg);
            f->sp -= arg;
            PUSH(s);
            break;
        }
        case SJOP_BUILD_SET: {
            NEED(arg);
            if (!var_all_const(&f->stack[f->sp - arg], arg)) {
                cap_fail(c, BR_UNSUPPORTED_VALUE, "a set of non-constant values");
                goto fail;
            }
            PyObject *set = PySet_New(NULL);
            for (int i = 0; set && i < arg; i++)
                if (PySet_Add(set, f->stack[f->sp - arg + i]->obj) < 0)
                    Py_CLEAR(set);
            f->sp -= arg;
            if (!set) {
                cap_fail_exc(c, BR_USER_EXCEPTION);
                goto fail;
            }
            PUSH(var_const_steal(c, set));
            break;
        }
        case SJOP_BUILD_MAP: {
            NEED(2 * arg);
            Var *d = var_dict(c);
            if (!d)
                goto fail;
            for (int i = 0; i < arg; i++)
                if (var_dict_set(c, d, f->stack[f->sp - 2 * arg + 2 * i], f->stack[f->sp - 2 * arg + 2 * i + 1]) < 0) {
                    cap_fail_exc(c, BR_UNSUPPORTED_VALUE);
                    goto fail;
                }
            f->sp -= 2 * arg;
            PUSH(d);
            break;
        }
        case SJOP_BUILD_CONST_KEY_MAP: {
            NEED(arg + 1);
            Var *keys = POP();
            Var *d = var_dict(c);
            if (!d || !var_is_const(keys))
                goto fail;
            for (int i = 0; i < arg; i++) {
                Var *k = var_const(c, PyTuple_GET_ITEM(keys->obj, i));
                if (!k || var_dict_set(c, d, k, f->stack[f->sp - arg + i]) < 0)
                    goto fail;
            }
            f->sp -= arg;
            PUSH(d);
            break;
        }
        case SJOP_BUILD_SLICE: {
            NEED(arg);
            Var *step = arg == 3 ? POP() : NULL;
            Var *stop = POP(), *start = POP();
            if (!step && !(step = var_const(c, Py_None)))
                goto fail;
            if (var_is_const(start) && var_is_const(stop) && var_is_const(step)) {
                PyObject *sl = PySlice_New(start->obj, stop->obj, step->obj);
                PUSH(sl ? var_const_steal(c, sl) : NULL);
            } else {
                Var *s = var_new(c, VK_SLICE);
                if (!s)
                    goto fail;
                s->u.slice.start = start;
                s->u.slice.stop = stop;
                s->u.slice.step = step;
                PUSH(s);
            }
            break;
        }
        case SJOP_BUILD_STRING: {
            NEED(arg);
            Var *s = build_string(c, &f->stack[f->sp - arg], arg);
            f->sp -= arg;
            PUSH(s);
            break;
        }
        case SJOP_FORMAT_VALUE: {
            Var *spec = (arg & 4) ? POP() : NULL;
            NEED(1);
            Var *v = POP();
            PUSH(format_value(c, v, spec, arg & 3));
            break;
        }
        case SJOP_LIST_APPEND: {
            NEED(arg + 1);
            Var *v = POP();
            Var *list = PEEK(arg);
            if (list->kind != VK_LIST || var_seq_append(c, list, v) < 0)
                goto fail;
            break;
        }
        case SJOP_LIST_EXTEND: {
            NEED(arg + 1);
            Var *it = POP();
            Var *list = PEEK(arg);
            Var **items;
            int32_t cnt;
            if (list->kind != VK_LIST || op_iterate(c, it, &items, &cnt) < 0)
                goto fail;
            for (int32_t i = 0; i < cnt; i++)
                if (var_seq_append(c, list, items[i]) < 0)
                    goto fail;
            break;
        }
        case SJOP_LIST_TO_TUPLE: {
            NEED(1);
            Var *l = POP();
            PUSH(var_seq(c, VK_TUPLE, l->u.seq.items, l->u.seq.n));
            break;
        }
        case SJOP_SET_ADD:
        case SJOP_SET_UPDATE: {
            NEED(arg + 1);
            Var *v = POP();
            Var *set = PEEK(arg);
            if (!var_is_const(set) || !PySet_Check(set->obj)) {
                cap_fail(c, BR_UNSUPPORTED_VALUE, "set update");
                goto fail;
            }
            PyObject *add = var_to_py(c, v);
            int r = -1;
            if (add) {
                if (op == SJOP_SET_ADD)
                    r = PySet_Add(set->obj, add);
                else {
                    PyObject *res = PyObject_CallMethod(set->obj, "update", "O", add);
                    r = res ? 0 : -1;
                    Py_XDECREF(res);
                }
                Py_DECREF(add);
            }
            if (r < 0) {
                cap_fail_exc(c, BR_UNSUPPORTED_VALUE);
                goto fail;
            }
            break;
        }
        case SJOP_MAP_ADD: {
            NEED(arg + 2);
            Var *v = POP(), *k = POP();
            Var *d = PEEK(arg);
            if (d->kind != VK_DICT || var_dict_set(c, d, k, v) < 0) {
                if (!cap_failed(c))
                    cap_fail_exc(c, BR_UNSUPPORTED_VALUE);
                goto fail;
            }
            break;
        }
        case SJOP_DICT_UPDATE:
        case SJOP_DICT_MERGE: {
            NEED(arg + 1);
            Var *u = POP();
            Var *d = PEEK(arg);
            if (d->kind != VK_DICT || u->kind != VK_DICT) {
                cap_fail(c, BR_UNSUPPORTED_VALUE, "dict update with %s", var_a(c, u));
                goto fail;
            }
            if (var_dict_force(c, u) < 0)
                goto fail;
            for (int32_t i = 0; i < u->u.dict.n; i++)
                if (var_dict_set(c, d, u->u.dict.keys[i], u->u.dict.vals[i]) < 0)
                    goto fail;
            break;
        }
        case SJOP_UNPACK_SEQUENCE: {
            NEED(1);
            Var *s = POP();
            Var **items;
            int32_t cnt;
            if (op_iterate(c, s, &items, &cnt) < 0)
                goto fail;
            if (cnt != arg) {
                PyErr_Format(PyExc_ValueError, "cannot unpack %d values into %d", (int)cnt, arg);
                cap_fail_exc(c, BR_USER_EXCEPTION);
                goto fail;
            }
            for (int32_t i = cnt - 1; i >= 0; i--)
                PUSH(items[i]);
            break;
        }
        case SJOP_UNPACK_EX: {
            NEED(1);
            int before = arg & 0xff, after = arg >> 8;
            Var *s = POP();
            Var **items;
            int32_t cnt;
            if (op_iterate(c, s, &items, &cnt) < 0)
                goto fail;
            if (cnt < before + after) {
                PyErr_SetString(PyExc_ValueError, "not enough values to unpack");
                cap_fail_exc(c, BR_USER_EXCEPTION);
                goto fail;
            }
            for (int32_t i = cnt - 1; i >= cnt - after; i--)
                PUSH(items[i]);
            PUSH(var_seq(c, VK_LIST, items + before, cnt - before - after));
            for (int32_t i = before - 1; i >= 0; i--)
                PUSH(items[i]);
            break;
        }

        /* ---- iteration ---- */
        case SJOP_GET_ITER: {
            NEED(1);
            Var *it = iter_get(c, POP());
            if (!it)
                goto fail;
            PUSH(it);
            break;
        }
        case SJOP_FOR_ITER: {
            NEED(1);
            Var *it = TOP(), *item;
            int r = iter_next(c, it, &item);
            if (r < 0)
                goto fail;
            if (r) {
                PUSH(item);
            } else {
                (void)POP();
                pc = next + arg;
            }
            break;
        }

        /* ---- jumps ---- */
        case SJOP_JUMP_FORWARD:
            pc = next + arg;
            break;
        case SJOP_JUMP_BACKWARD:
        case SJOP_JUMP_BACKWARD_NO_INTERRUPT:
            pc = next - arg;
            break;
        case SJOP_POP_JUMP_FORWARD_IF_TRUE:
        case SJOP_POP_JUMP_FORWARD_IF_FALSE:
        case SJOP_POP_JUMP_BACKWARD_IF_TRUE:
        case SJOP_POP_JUMP_BACKWARD_IF_FALSE: {
            NEED(1);
            Var *v = POP();
            int t;
            if (op_truth(c, v, &t) < 0)
                goto fail;
            int want = op == SJOP_POP_JUMP_FORWARD_IF_TRUE || op == SJOP_POP_JUMP_BACKWARD_IF_TRUE;
            if (t == want)
                pc = (op == SJOP_POP_JUMP_FORWARD_IF_TRUE || op == SJOP_POP_JUMP_FORWARD_IF_FALSE) ? next + arg
                                                                                                   : next - arg;
            break;
        }
        case SJOP_POP_JUMP_FORWARD_IF_NONE:
        case SJOP_POP_JUMP_FORWARD_IF_NOT_NONE:
        case SJOP_POP_JUMP_BACKWARD_IF_NONE:
        case SJOP_POP_JUMP_BACKWARD_IF_NOT_NONE: {
            NEED(1);
            Var *v = POP();
            int is_none = var_is_const(v) && v->obj == Py_None;
            int want = op == SJOP_POP_JUMP_FORWARD_IF_NONE || op == SJOP_POP_JUMP_BACKWARD_IF_NONE;
            if (is_none == want)
                pc = (op == SJOP_POP_JUMP_FORWARD_IF_NONE || op == SJOP_POP_JUMP_FORWARD_IF_NOT_NONE) ? next + arg
                                                                                                      : next - arg;
            break;
        }
        case SJOP_JUMP_IF_TRUE_OR_POP:
        case SJOP_JUMP_IF_FALSE_OR_POP: {
            NEED(1);
            int t;
            if (op_truth(c, TOP(), &t) < 0)
                goto fail;
            if (t == (op == SJOP_JUMP_IF_TRUE_OR_POP))
                pc = next + arg;
            else
                (void)POP();
            break;
        }

        /* ---- with blocks (grad mode only) ---- */
        case SJOP_BEFORE_WITH: {
            NEED(1);
            Var *mgr = POP();
            if (before_with(c, f, mgr) < 0)
                goto fail;
            break;
        }

        /* ---- imports inside functions ---- */
        case SJOP_IMPORT_NAME: {
            NEED(2);
            Var *fromlist = POP(), *level = POP();
            if (!var_is_const(fromlist) || !var_is_const(level))
                goto fail;
            PyObject *m = PyImport_ImportModuleLevelObject(co_name_at(co, arg), f->globals, NULL, fromlist->obj,
                                                           (int)PyLong_AsLong(level->obj));
            if (!m) {
                cap_fail_exc(c, BR_USER_EXCEPTION);
                goto fail;
            }
            Var *mv = wrap_untracked(c, m);
            Py_DECREF(m);
            PUSH(mv);
            break;
        }
        case SJOP_IMPORT_FROM: {
            NEED(1);
            PUSH(attr_load(c, TOP(), co_name_at(co, arg)));
            break;
        }

        /* ---- generators (inlined and materialised) ---- */
        case SJOP_RETURN_GENERATOR:
            if (!f->generator) {
                cap_fail(c, BR_GENERATOR, "generator function %U", co->co_qualname);
                goto fail;
            }
            PUSH(var_const(c, Py_None));
            break;
        case SJOP_YIELD_VALUE: {
            NEED(1);
            Var *v = POP();
            if (!f->generator || var_seq_append(c, f->gen_items, v) < 0) {
                if (!cap_failed(c))
                    cap_fail(c, BR_GENERATOR, "yield outside an inlined generator");
                goto fail;
            }
            PUSH(var_const(c, Py_None));
            break;
        }

        /* ---- leaving ---- */
        case SJOP_RETURN_VALUE:
            NEED(1);
            if (f->generator) {
                Var *it = var_new(c, VK_ITER);
                if (!it)
                    goto fail;
                it->u.iter.items = f->gen_items->u.seq.items;
                it->u.iter.n = f->gen_items->u.seq.n;
                it->u.iter.gen = 1;
                return it;
            }
            return POP();
        case SJOP_LOAD_ASSERTION_ERROR:
            PUSH(wrap_untracked(c, PyExc_AssertionError));
            break;
        case SJOP_RAISE_VARARGS: {
            if (arg == 0) {
                cap_fail(c, BR_USER_EXCEPTION, "bare raise during capture");
                goto fail;
            }
            NEED(arg);
            if (arg == 2)
                (void)POP();   /* the cause: does not change what is raised */
            Var *e = POP();
            if (!e->obj || !(PyExceptionClass_Check(e->obj) || PyExceptionInstance_Check(e->obj))) {
                cap_fail(c, BR_USER_EXCEPTION, "user code raises %s", var_a(c, e));
                goto fail;
            }
            cap_raise(c, e->obj);
            goto fail;
        }
        case SJOP_PUSH_EXC_INFO: {
            NEED(1);
            Var *e = POP();
            PUSH(var_const(c, Py_None));   /* the previous exception state */
            PUSH(e);
            break;
        }
        case SJOP_CHECK_EXC_MATCH: {
            NEED(2);
            Var *t = POP();
            Var *e = TOP();
            /* `except (A, B):` builds its tuple of classes on the stack */
            PyObject *classes = t->obj ? Py_NewRef(t->obj) : t->kind == VK_TUPLE ? var_to_py(c, t) : NULL;
            if (!e->obj || !classes) {
                sj_err_clear();
                Py_XDECREF(classes);
                cap_fail(c, BR_UNSUPPORTED_VALUE, "except clause with %s", var_a(c, t));
                goto fail;
            }
            int m = PyErr_GivenExceptionMatches(e->obj, classes);
            Py_DECREF(classes);
            PUSH(var_const(c, m ? Py_True : Py_False));
            break;
        }
        case SJOP_POP_EXCEPT:
            NEED(1);
            (void)POP();
            break;
        case SJOP_RERAISE: {
            NEED(1 + (arg ? 1 : 0));
            Var *e = POP();
            if (!e->obj || !PyExceptionInstance_Check(e->obj)) {
                cap_fail(c, BR_USER_EXCEPTION, "re-raise during capture");
                goto fail;
            }
            cap_raise(c, e->obj);
            goto fail;
        }
        case SJOP_WITH_EXCEPT_START: {
            /* an exception leaves a grad-mode block: its __exit__ restores the mode */
            NEED(4);
            Var *ex = PEEK(4);
            Var *a3[3];
            Var *none = var_const(c, Py_None);
            a3[0] = a3[1] = a3[2] = none;
            if (!none || !ex)
                goto fail;
            Var *r = call_var(c, ex, a3, 3, NULL);
            if (!r)
                goto fail;
            PUSH(var_const(c, Py_False));
            break;
        }

        default:
            cap_fail(c, BR_UNSUPPORTED_OPCODE, "%s", sj_op_names[op]);
            goto fail;
        }
    }
    cap_fail(c, BR_INTERNAL, "fell off the end of %U", co->co_qualname);
fail:
    if (!cap_failed(c)) {
        if (PyErr_Occurred())
            cap_fail_exc(c, BR_INTERNAL);
        else
            cap_fail(c, BR_INTERNAL, "capture stopped without a reason");
    }
    /* An exception user code raised while capture evaluated it (a dict lookup, an explicit
     * raise) is deterministic given the guards: if this frame handles it, go on there. */
    if (c->reason == BR_USER_EXCEPTION && c->exc) {
        int target, depth, lasti;
        if (bc_find_handler(co, f->pc, &target, &depth, &lasti) == 0 && depth <= f->sp) {
            PyObject *exc = Py_NewRef(c->exc);
            cap_clear_failure(c);
            f->sp = depth;
            Var *ev = var_const_steal(c, exc);
            Var *li = lasti ? var_const_steal(c, PyLong_FromLong(f->pc)) : NULL;
            if (!ev || (lasti && (!li || push(c, f, li) < 0)) || push(c, f, ev) < 0)
                goto fail;
            pc = target;
            goto resume;
        }
    }
    return NULL;
}

/* ---------------------------------------------------------------- frames ---- */

static int frame_setup(Capture *c, EvalFrame *f, PyCodeObject *code, PyObject *globals, PyObject *builtins)
{
    f->code = code;
    f->globals = globals;
    f->builtins = builtins;
    f->instrs = PyCode_GetCode(code);
    if (!f->instrs)
        return -1;
    f->ins = (const uint16_t *)PyBytes_AS_STRING(f->instrs);
    f->ninstr = (int32_t)(PyBytes_GET_SIZE(f->instrs) / 2);
    f->stack_cap = code->co_stacksize + 4;
    f->stack = cap_alloc(c, sizeof(Var *) * (size_t)f->stack_cap);
    f->trusted = libs_is_trusted_file(code->co_filename);
    f->parent = c->frame;
    return f->stack ? 0 : -1;
}

Var *eval_frame(Capture *c, PyCodeObject *code, PyObject *globals, PyObject *builtins, Var **locals, Var *fn,
                int generator)
{
    if (c->depth >= sj_config.inline_depth_limit) {
        cap_fail(c, BR_INLINE_LIMIT, "inlining %U: depth limit %ld (config.inline_depth_limit)", code->co_qualname,
                 (long)sj_config.inline_depth_limit);
        return NULL;
    }
    /* an inlined call is a level of Python's recursion, as the call would be in eager
     * code; past the limit the call is left to the interpreter, which raises there if
     * eager code would */
    if (Py_EnterRecursiveCall(" while shapejit inlines a call")) {
        sj_err_clear();
        cap_fail(c, BR_INLINE_LIMIT, "inlining %U: Python's recursion limit", code->co_qualname);
        return NULL;
    }
    EvalFrame f;
    memset(&f, 0, sizeof f);
    if (frame_setup(c, &f, code, globals, builtins) < 0) {
        Py_LeaveRecursiveCall();
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    f.locals = locals;
    f.fn = fn;
    f.generator = generator;
    /* (the run's item list is made after its watch begins: it is the run's own) */
    int begun = generator && cap_gen_begin(c) == 0;
    if (generator && (!begun || !(f.gen_items = var_seq(c, VK_LIST, NULL, 0)))) {
        if (begun)
            (void)cap_gen_end(c, NULL);
        Py_DECREF(f.instrs);
        Py_LeaveRecursiveCall();
        return NULL;
    }
    c->frame = &f;
    c->depth++;
    Var *r = run(c, &f);
    if (generator && cap_gen_end(c, r) < 0)
        r = NULL;
    c->depth--;
    c->frame = f.parent;
    Py_DECREF(f.instrs);
    Py_LeaveRecursiveCall();
    return r;
}

Var *eval_top(Capture *c, PyCodeObject *code, PyObject *globals, PyObject *builtins, PyObject *const *live_locals,
              PyObject *closure)
{
    EvalFrame f;
    memset(&f, 0, sizeof f);
    if (frame_setup(c, &f, code, globals, builtins) < 0) {
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    int n = code->co_nlocalsplus;
    f.locals = cap_alloc(c, sizeof(Var *) * (size_t)(n + 1));
    f.pending = cap_alloc(c, sizeof(PyObject *) * (size_t)(n + 1));
    if (!f.locals || !f.pending) {
        Py_DECREF(f.instrs);
        return NULL;
    }
    for (int i = 0; i < n; i++)
        f.pending[i] = live_locals[i];
    f.closure = closure;
    f.is_top = 1;
    f.trusted = 0;
    c->frame = &f;
    c->depth++;
    Var *r = run(c, &f);
    c->depth--;
    c->frame = NULL;
    if (c->stopped) {
        /* the arrays live in the arena: keep them for resume.c */
        c->stop_stack = f.stack;
        c->stop_sp = f.sp;
        c->stop_locals = f.locals;
        c->stop_pending = f.pending;
    }
    Py_DECREF(f.instrs);
    return r;
}
