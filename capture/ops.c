/* The bytecode operators on vars (binary, compare, unary, truth, contains, subscripts,
 * iteration, len): folded on constants, recorded through the operator rows on tensors. */
#include "capture.h"
#include "../vocab/libs.h"
#include "../shapes/rules.h"
#include "sj_opcodes.h"
#include "../core/errors.h"

/* Record through the operator row of a given name ("operator.add"). */
static Var *record_operator(Capture *c, const char *path, Var **args, int32_t nargs)
{
    int row = callables_operator_row(path);
    if (row < 0) {
        cap_fail(c, BR_UNSUPPORTED_CALL, "%s on tensors is not supported", path);
        return NULL;
    }
    return op_record(c, row, args, nargs, NULL);
}

Var *op_record_path(Capture *c, const char *path, Var **args, int32_t nargs)
{
    int row = callables_path_row(path);
    if (row < 0) {
        cap_fail(c, BR_INTERNAL, "no callables row %s", path);
        return NULL;
    }
    return op_record(c, row, args, nargs, NULL);
}

static Var *call_dunder(Capture *c, Var *obj, const char *name, Var **args, int n);

/* ------------------------------------------------------------ folding ---- */

static PyObject *operator_mod;   /* strong */

static Var *fold_operator(Capture *c, const char *name, Var **args, int n)
{
    if (!operator_mod && !(operator_mod = PyImport_ImportModule("operator")))
        return NULL;
    PyObject *fn = PyObject_GetAttrString(operator_mod, name);
    if (!fn)
        return NULL;
    PyObject *a[3];
    int k;
    for (k = 0; k < n; k++)
        if (!(a[k] = var_to_py(c, args[k])))
            break;
    PyObject *r = k == n ? PyObject_Vectorcall(fn, a, (size_t)n, NULL) : NULL;
    for (int i = 0; i < k; i++)
        Py_DECREF(a[i]);
    Py_DECREF(fn);
    if (!r) {
        cap_fail_exc(c, BR_USER_EXCEPTION);
        return NULL;
    }
    return var_const_steal(c, r);
}

static int is_tensor(Var *v)
{
    return v && v->kind == VK_TENSOR;
}

static int is_foldable(Var *v)
{
    return v && (v->kind == VK_CONST || v->kind == VK_SYMINT ||
                 ((v->kind == VK_TUPLE || v->kind == VK_LIST) && var_all_const(v->u.seq.items, v->u.seq.n)));
}

/* ------------------------------------------------------------ operators ---- */

static const char *const nb_names[] = {
    /* index = BINARY_OP oparg (order from the interpreter's _nb_ops) */
    [SJ_NB_ADD] = "add",
    [SJ_NB_AND] = "and_",
    [SJ_NB_FLOOR_DIVIDE] = "floordiv",
    [SJ_NB_LSHIFT] = "lshift",
    [SJ_NB_MATRIX_MULTIPLY] = "matmul",
    [SJ_NB_MULTIPLY] = "mul",
    [SJ_NB_REMAINDER] = "mod",
    [SJ_NB_OR] = "or_",
    [SJ_NB_POWER] = "pow",
    [SJ_NB_RSHIFT] = "rshift",
    [SJ_NB_SUBTRACT] = "sub",
    [SJ_NB_TRUE_DIVIDE] = "truediv",
    [SJ_NB_XOR] = "xor",
    [SJ_NB_INPLACE_ADD] = "iadd",
    [SJ_NB_INPLACE_AND] = "iand",
    [SJ_NB_INPLACE_FLOOR_DIVIDE] = "ifloordiv",
    [SJ_NB_INPLACE_LSHIFT] = "ilshift",
    [SJ_NB_INPLACE_MATRIX_MULTIPLY] = "imatmul",
    [SJ_NB_INPLACE_MULTIPLY] = "imul",
    [SJ_NB_INPLACE_REMAINDER] = "imod",
    [SJ_NB_INPLACE_OR] = "ior",
    [SJ_NB_INPLACE_POWER] = "ipow",
    [SJ_NB_INPLACE_RSHIFT] = "irshift",
    [SJ_NB_INPLACE_SUBTRACT] = "isub",
    [SJ_NB_INPLACE_TRUE_DIVIDE] = "itruediv",
    [SJ_NB_INPLACE_XOR] = "ixor",
};

/* seq * n and n * seq for a list or tuple var and an int (a symbolic one is specialised:
 * the length of the result is a Python fact); `lst *= n` repeats the list in place.
 * NULL without a failure when the operands are not such a pair. */
static Var *seq_repeat(Capture *c, int inplace, Var *a, Var *b)
{
    int seq_first = a->kind == VK_TUPLE || a->kind == VK_LIST;
    Var *seq = seq_first ? a : b, *count = seq_first ? b : a;
    if ((seq->kind != VK_TUPLE && seq->kind != VK_LIST) ||
        !((var_is_const(count) && PyLong_Check(count->obj)) || count->kind == VK_SYMINT))
        return NULL;
    PyObject *py = var_to_py(c, count);   /* new reference */
    if (!py)
        return NULL;
    long k = PyLong_AsLong(py);
    Py_DECREF(py);
    if (k == -1 && PyErr_Occurred()) {
        cap_fail_exc(c, BR_USER_EXCEPTION);   /* OverflowError, as eager's MemoryError path */
        return NULL;
    }
    int32_t n = seq->u.seq.n;
    if (k > 0 && n > 0 && k > (INT32_MAX / 4) / n) {
        cap_fail(c, BR_UNSUPPORTED_VALUE, "a %s repeated %ld times", var_kind_name(seq), k);
        return NULL;
    }
    /* the items first: seq may be the list being extended */
    Var **items = n ? cap_alloc(c, sizeof(Var *) * (size_t)n) : NULL;
    if (n && !items)
        return NULL;
    if (n)
        memcpy(items, seq->u.seq.items, sizeof(Var *) * (size_t)n);
    Var *r;
    if (inplace && seq_first && seq->kind == VK_LIST && !seq->u.seq.subtype) {
        if ((var_is_outside(seq) && cap_note_mutation(c, seq, "*=") < 0) || cap_note_change(c, seq, 0) < 0)
            return NULL;
        seq->u.seq.n = 0;
        r = seq;
    } else if (seq->kind == VK_LIST && seq->u.seq.subtype) {
        cap_fail(c, BR_UNSUPPORTED_VALUE, "operator * on a %s", seq->u.seq.subtype->tp_name);
        return NULL;
    } else if ((r = var_seq(c, seq->kind, NULL, 0)) && libs.size_type &&
               (PyObject *)seq->u.seq.subtype == libs.size_type) {
        r->u.seq.subtype = seq->u.seq.subtype;   /* torch.Size repeats into a Size; a
                                                    namedtuple into a plain tuple */
    }
    for (long j = 0; r && j < k; j++)
        for (int32_t i = 0; i < n; i++)
            if (var_seq_append(c, r, items[i]) < 0)
                return NULL;
    return r;
}

int op_nb_index(const char *name)
{
    for (int nb = 0; nb < SJ_NB_COUNT; nb++)
        if (nb_names[nb] && !strcmp(nb_names[nb], name))
            return nb;
    return -1;
}

static Var *seq_concat(Capture *c, Var *a, Var *b)
{
    Var *r = var_seq(c, a->kind, a->u.seq.items, a->u.seq.n);
    if (!r)
        return NULL;
    for (int32_t i = 0; i < b->u.seq.n; i++)
        if (var_seq_append(c, r, b->u.seq.items[i]) < 0)
            return NULL;
    return r;
}

Var *op_binary(Capture *c, int nb, Var *a, Var *b)
{
    if (nb < 0 || nb >= SJ_NB_COUNT) {
        cap_fail(c, BR_UNSUPPORTED_OPCODE, "BINARY_OP %d", nb);
        return NULL;
    }
    const char *name = nb_names[nb];
    if (!is_tensor(a) && !is_tensor(b)) {
        int handled;
        Var *r = collections_operator(c, nb, a, b, &handled);
        if (handled)
            return r;
    }
    if (is_tensor(a) || is_tensor(b)) {
        char path[48];
        snprintf(path, sizeof path, "operator.%s", name);
        Var *args[2] = {a, b};
        /* x += y on a tensor whose name is rebound: in-place only when the left side is a
         * tensor; on a constant left side Python falls back to the reflected binary op */
        if (name[0] == 'i' && !is_tensor(a) && strcmp(name, "imatmul") != 0) {
            snprintf(path, sizeof path, "operator.%s", name + 1);
        }
        return record_operator(c, path, args, 2);
    }
    if (a->kind == VK_GSCALAR || b->kind == VK_GSCALAR)
        return gscalar_binary(c, nb, a, b);
    if (a->kind == VK_SYMINT || b->kind == VK_SYMINT) {
        int handled;
        Var *r = symb_binary(c, nb, a, b, &handled);
        if (handled)
            return r;   /* otherwise (a float, true division, ...) the int is specialised */
    }
    if (is_foldable(a) && is_foldable(b)) {
        if (name[0] == 'i' && var_is_outside(a) && a->obj && PySet_CheckExact(a->obj)) {
            /* `s |= t` on a set from outside: folding would write it now, at capture */
            cap_fail(c, BR_SIDE_EFFECT, "in-place %s on a set from outside the frame", name);
            return NULL;
        }
        Var *args[2] = {a, b};
        return fold_operator(c, name, args, 2);
    }
    /* list/tuple arithmetic on vars holding graph values */
    int is_add = nb == SJ_NB_ADD || nb == SJ_NB_INPLACE_ADD;
    if (is_add && (a->kind == VK_TUPLE || a->kind == VK_LIST) && b->kind == a->kind) {
        if (nb == SJ_NB_INPLACE_ADD && a->kind == VK_LIST) {
            if ((var_is_outside(a) && cap_note_mutation(c, a, "+=") < 0) || cap_note_change(c, a, 0) < 0)
                return NULL;
            for (int32_t i = 0; i < b->u.seq.n; i++)
                if (var_seq_append(c, a, b->u.seq.items[i]) < 0)
                    return NULL;
            return a;
        }
        return seq_concat(c, a, b);
    }
    if (is_add && (a->kind == VK_TUPLE || a->kind == VK_LIST) && var_is_const(b) &&
        ((a->kind == VK_TUPLE && PyTuple_Check(b->obj)) || (a->kind == VK_LIST && PyList_Check(b->obj)))) {
        Var **items;
        int32_t n;
        Var *bs;
        if (op_iterate(c, b, &items, &n) < 0 || !(bs = var_seq(c, a->kind, items, n)))
            return NULL;
        return seq_concat(c, a, bs);
    }
    if (is_add && var_is_const(a) && (b->kind == VK_TUPLE || b->kind == VK_LIST) &&
        ((b->kind == VK_TUPLE && PyTuple_Check(a->obj)) || (b->kind == VK_LIST && PyList_Check(a->obj)))) {
        Var **items;
        int32_t n;
        Var *as;
        if (op_iterate(c, a, &items, &n) < 0 || !(as = var_seq(c, b->kind, items, n)))
            return NULL;
        return seq_concat(c, as, b);
    }
    if (nb == SJ_NB_MULTIPLY || nb == SJ_NB_INPLACE_MULTIPLY) {
        Var *r = seq_repeat(c, nb == SJ_NB_INPLACE_MULTIPLY, a, b);
        if (r || cap_failed(c))
            return r;
    }
    /* d | e: a new dict, d's entries then e's (e's values win); d |= e updates d */
    if ((nb == SJ_NB_OR || nb == SJ_NB_INPLACE_OR) && a->kind == VK_DICT && b->kind == VK_DICT && !a->u.dict.subtype &&
        !b->u.dict.subtype) {
        if (var_dict_force(c, a) < 0 || var_dict_force(c, b) < 0)
            return NULL;
        Var *r = a;
        if (nb == SJ_NB_INPLACE_OR) {
            if ((var_is_outside(a) && cap_note_mutation(c, a, "|=") < 0) || cap_note_change(c, a, 0) < 0)
                return NULL;
        } else if (!(r = var_dict(c)) || var_dict_merge(c, r, a) < 0) {
            return NULL;
        }
        return var_dict_merge(c, r, b) < 0 ? NULL : r;
    }
    cap_fail(c, BR_UNSUPPORTED_VALUE, "operator %s on %s and %s", sj_nb_symbols[nb], var_a(c, a), var_a(c, b));
    return NULL;
}

/* A dict's keys view, or a set constant, as a frozenset of its keys (new reference); NULL
 * without an error when v is neither or holds a key that is not a constant. */
static PyObject *keys_as_set(Capture *c, Var *v)
{
    if (var_is_const(v) && PyAnySet_Check(v->obj))
        return PyFrozenSet_New(v->obj);
    if (v->kind != VK_DICTVIEW || v->u.dview.which != 'k')
        return NULL;
    Var *l = var_view_list(c, v);
    if (!l)
        return NULL;
    PyObject *set = PyFrozenSet_New(NULL);
    for (int32_t i = 0; set && i < l->u.seq.n; i++) {
        Var *k = l->u.seq.items[i];
        if (!var_is_const(k) || PySet_Add(set, k->obj) < 0)
            Py_CLEAR(set);
    }
    return set;
}

Var *op_compare(Capture *c, int cmp, Var *a, Var *b)
{
    static const char *const names[] = {"lt", "le", "eq", "ne", "gt", "ge"};
    if (cmp < 0 || cmp > 5) {
        cap_fail(c, BR_UNSUPPORTED_OPCODE, "COMPARE_OP %d", cmp);
        return NULL;
    }
    if (is_tensor(a) || is_tensor(b)) {
        char path[32];
        snprintf(path, sizeof path, "operator.%s", names[cmp]);
        Var *args[2] = {a, b};
        return record_operator(c, path, args, 2);
    }
    if (a->kind == VK_GSCALAR || b->kind == VK_GSCALAR)
        return gscalar_compare(c, cmp, a, b);
    {
        int handled;
        Var *r = collections_operator(c, -1 - cmp, a, b, &handled);
        if (handled)
            return r;
    }
    if (a->kind == VK_SYMINT || b->kind == VK_SYMINT) {
        int handled;
        Var *r = symb_compare(c, cmp, a, b, &handled);
        if (handled)
            return r;
    }
    if (is_foldable(a) && is_foldable(b)) {
        Var *args[2] = {a, b};
        return fold_operator(c, names[cmp], args, 2);
    }
    if (cmp == SJ_CMP_EQ || cmp == SJ_CMP_NE) {
        int handled;
        Var *r = objects_compare(c, cmp, a, b, &handled);
        if (handled)
            return r;
    }
    if ((cmp == SJ_CMP_EQ || cmp == SJ_CMP_NE) && a->obj && b->obj && a->kind != VK_TUPLE && b->kind != VK_TUPLE &&
        a->kind != VK_LIST && b->kind != VK_LIST) {
        Var *args[2] = {a, b};
        return fold_operator(c, names[cmp], args, 2);
    }
    if ((cmp == SJ_CMP_EQ || cmp == SJ_CMP_NE) && c->env &&
        (a->kind == VK_TUPLE || a->kind == VK_LIST || (var_is_const(a) && PyTuple_Check(a->obj))) &&
        (b->kind == VK_TUPLE || b->kind == VK_LIST || (var_is_const(b) && PyTuple_Check(b->obj)))) {
        /* shapes with symbolic sizes: equal when every item is (decided item by item) */
        Var **ia, **ib;
        int32_t na, nb;
        if (op_iterate(c, a, &ia, &na) < 0 || op_iterate(c, b, &ib, &nb) < 0)
            return NULL;
        int eq = na == nb;
        for (int32_t i = 0; eq && i < na; i++) {
            Var *r = op_compare(c, SJ_CMP_EQ, ia[i], ib[i]);
            if (!r || op_truth(c, r, &eq) < 0)
                return NULL;
        }
        return var_const(c, (cmp == SJ_CMP_EQ) == (eq != 0) ? Py_True : Py_False);
    }
    if ((cmp == SJ_CMP_EQ || cmp == SJ_CMP_NE) && a->kind != b->kind &&
        ((var_is_const(a) && a->obj == Py_None) || (var_is_const(b) && b->obj == Py_None)))
        return var_const(c, cmp == SJ_CMP_NE ? Py_True : Py_False);
    if ((cmp == SJ_CMP_EQ || cmp == SJ_CMP_NE) && (a->kind == VK_DICTVIEW || b->kind == VK_DICTVIEW)) {
        /* keys views compare as sets of their keys (with each other and with sets) */
        PyObject *sa = keys_as_set(c, a), *sb = sa ? keys_as_set(c, b) : NULL;
        int eq = sb ? PyObject_RichCompareBool(sa, sb, Py_EQ) : -1;
        Py_XDECREF(sa);
        Py_XDECREF(sb);
        if (eq >= 0)
            return var_const(c, (eq == (cmp == SJ_CMP_EQ)) ? Py_True : Py_False);
        if (PyErr_Occurred()) {
            cap_fail_exc(c, BR_USER_EXCEPTION);
            return NULL;
        }
    }
    cap_fail(c, BR_UNSUPPORTED_VALUE, "comparison of %s and %s", var_a(c, a), var_a(c, b));
    return NULL;
}

Var *op_unary(Capture *c, int opcode, Var *a)
{
    if (a->kind == VK_GSCALAR)
        return gscalar_unary(c, opcode, a);   /* `not b` too: a graph bool, decided at run time */
    if (opcode == SJOP_UNARY_NOT) {
        int t;
        if (op_truth(c, a, &t) < 0)
            return NULL;
        return var_const(c, t ? Py_False : Py_True);
    }
    const char *name = opcode == SJOP_UNARY_NEGATIVE ? "neg" : opcode == SJOP_UNARY_POSITIVE ? "pos" : "invert";
    if (is_tensor(a)) {
        char path[32];
        snprintf(path, sizeof path, "operator.%s", name);
        return record_operator(c, path, &a, 1);
    }
    if (a->kind == VK_SYMINT && opcode == SJOP_UNARY_NEGATIVE)
        return symb_var(c, sym_neg(c->env, a->u.s.e));
    if (a->kind == VK_SYMINT && opcode == SJOP_UNARY_POSITIVE)
        return a;
    if (is_foldable(a))
        return fold_operator(c, name, &a, 1);
    cap_fail(c, BR_UNSUPPORTED_VALUE, "unary %s on %s", name, var_a(c, a));
    return NULL;
}

int op_truth(Capture *c, Var *v, int *truth)
{
    switch (v->kind) {
    case VK_CONST: {
        int t = PyObject_IsTrue(v->obj);
        if (t < 0)
            return cap_fail_exc(c, BR_USER_EXCEPTION);
        *truth = t;
        return 0;
    }
    case VK_TUPLE:
    case VK_LIST:
        *truth = v->u.seq.n > 0;
        return 0;
    case VK_DICT:
        if (var_dict_force(c, v) < 0)
            return -1;
        *truth = v->u.dict.n > 0;
        return 0;
    case VK_DICTVIEW:
        if (var_dict_force(c, v->u.dview.dict) < 0)
            return -1;
        *truth = v->u.dview.dict->u.dict.n > 0;
        return 0;
    case VK_SYMINT: {
        SymNode *e = v->u.s.e, *z = sym_is_bool(e) ? NULL : sym_const(c->env, 0);
        if (sym_is_bool(e) ? symb_decide(c, e, truth) < 0 : !z || symb_decide(c, sym_ne(c->env, e, z), truth) < 0)
            return cap_fail_exc(c, BR_INTERNAL);
        return 0;
    }
    case VK_GSCALAR:
        return gscalar_truth(c, v, truth);
    case VK_TENSOR:
        return cap_fail(c, BR_DATA_DEPENDENT, "branching on the value of %s (%s)", var_a(c, v),
                        v->u.t.meta.lib == LIB_TORCH ? "Tensor.__bool__" : "ndarray.__bool__");
    case VK_FUNC:
    case VK_CALLABLE:
    case VK_PYMODULE:
    case VK_METHOD:
    case VK_PARTIAL:
        *truth = 1;
        return 0;
    case VK_USEROBJ: {
        PyTypeObject *t = v->u.uobj.type;
        int has_bool = t->tp_as_number && t->tp_as_number->nb_bool;
        int has_len =
            (t->tp_as_mapping && t->tp_as_mapping->mp_length) || (t->tp_as_sequence && t->tp_as_sequence->sq_length);
        if (!has_bool && !has_len) {
            *truth = 1;
            return 0;
        }
        /* the class's own Python __bool__, else its Python __len__ (transformers' Cache),
         * inlined on the object's modelled attributes */
        static PyObject *s_ubool, *s_ulen;   /* strong, interned */
        if ((!s_ubool && !(s_ubool = PyUnicode_InternFromString("__bool__"))) ||
            (!s_ulen && !(s_ulen = PyUnicode_InternFromString("__len__"))))
            return cap_fail_exc(c, BR_INTERNAL);
        PyObject *f = _PyType_Lookup(t, has_bool ? s_ubool : s_ulen);   /* borrowed */
        if (v->u.uobj.record || !f || !PyFunction_Check(f))
            return cap_fail(c, BR_UNSUPPORTED_VALUE, "truth value of %s made during capture", sj_type_a(c, t, NULL));
        Var *r = call_dunder(c, v, has_bool ? "__bool__" : "__len__", NULL, 0);
        return r ? op_truth(c, r, truth) : -1;
    }
    case VK_MODULE:
    case VK_OBJECT: {
        PyTypeObject *t = Py_TYPE(v->obj);
        int has_bool = t->tp_as_number && t->tp_as_number->nb_bool;
        int has_len =
            (t->tp_as_mapping && t->tp_as_mapping->mp_length) || (t->tp_as_sequence && t->tp_as_sequence->sq_length);
        if (!has_bool && !has_len) {
            *truth = 1;
            return 0;
        }
        /* the answer can change with the object: its Python __bool__ or __len__ is inlined
         * (what it reads is guarded), a length read through op_len (guarded) */
        static PyObject *s_bool;   /* strong, interned */
        if (!s_bool && !(s_bool = PyUnicode_InternFromString("__bool__")))
            return cap_fail_exc(c, BR_INTERNAL);
        PyObject *f = has_bool ? _PyType_Lookup(t, s_bool) : NULL;   /* borrowed */
        Var *r;
        if (f && PyFunction_Check(f))
            r = call_dunder(c, v, "__bool__", NULL, 0);
        else if (!has_bool)
            r = op_len(c, v);
        else
            return cap_fail(c, BR_UNSUPPORTED_VALUE, "truth value of %s (a __bool__ in C)", sj_type_a(c, t, NULL));
        return r ? op_truth(c, r, truth) : -1;
    }
    default:
        return cap_fail(c, BR_UNSUPPORTED_VALUE, "truth value of %s", var_a(c, v));
    }
}

Var *op_contains(Capture *c, Var *item, Var *container)
{
    if (is_foldable(item) && is_foldable(container)) {
        Var *args[2] = {container, item};
        return fold_operator(c, "contains", args, 2);
    }
    if (container->kind == VK_USEROBJ && container->u.uobj.record && var_is_const(item)) {
        int handled;
        return objects_record_call(c, container, "__contains__", &item, 1, &handled);
    }
    if (container->kind == VK_DICTVIEW) {
        /* keys: a dict lookup; values and items: a search of what the view holds now */
        Var *in = container->u.dview.which == 'k' ? container->u.dview.dict : var_view_list(c, container);
        return in ? op_contains(c, item, in) : NULL;
    }
    if (container->kind == VK_DICT && var_is_dict_key(item)) {
        int found;
        var_dict_get(c, container, item, &found);
        if (PyErr_Occurred()) {
            cap_fail_exc(c, BR_USER_EXCEPTION);
            return NULL;
        }
        return var_const(c, found ? Py_True : Py_False);
    }
    if ((container->kind == VK_TUPLE || container->kind == VK_LIST) && var_is_const(item)) {
        for (int32_t i = 0; i < container->u.seq.n; i++) {
            Var *e = container->u.seq.items[i];
            int number = PyLong_Check(item->obj) || PyFloat_Check(item->obj);
            if (e->kind == VK_TENSOR || e->kind == VK_GSCALAR) {
                /* `3 in [t]` asks bool(t == 3): the tensor's data (and numpy compares
                 * with anything elementwise) */
                cap_fail(c, BR_DATA_DEPENDENT, "'in' comparing a constant with a value computed in the graph");
                return NULL;
            }
            if (e->kind == VK_SYMINT && number) {
                PyObject *size = var_to_py(c, e);   /* specialised, with its guard */
                int eq = size ? PyObject_RichCompareBool(size, item->obj, Py_EQ) : -1;
                Py_XDECREF(size);
                if (eq < 0) {
                    cap_fail_exc(c, BR_INTERNAL);
                    return NULL;
                }
                if (eq)
                    return var_const(c, Py_True);
                continue;
            }
            if (!var_is_const(e))
                continue;   /* other kinds: a constant is never equal to them here */
            int eq = PyObject_RichCompareBool(e->obj, item->obj, Py_EQ);
            if (eq < 0) {
                cap_fail_exc(c, BR_USER_EXCEPTION);
                return NULL;
            }
            if (eq)
                return var_const(c, Py_True);
        }
        return var_const(c, Py_False);
    }
    if (container->kind == VK_OBJECT || (container->kind == VK_USEROBJ && !container->u.uobj.record)) {
        PyTypeObject *t = container->kind == VK_USEROBJ ? container->u.uobj.type : Py_TYPE(container->obj);
        if (!PyObject_HasAttrString((PyObject *)t, "__contains__")) {
            /* Python falls back to iterating it (or raises TypeError): not the user's error */
            cap_fail(c, BR_UNSUPPORTED_VALUE, "'in' on %s, which has no __contains__", var_a(c, container));
            return NULL;
        }
        Var *args[1] = {item};
        return call_dunder(c, container, "__contains__", args, 1);
    }
    if ((container->kind == VK_TUPLE || container->kind == VK_LIST) && item->obj) {
        for (int32_t i = 0; i < container->u.seq.n; i++)
            if (container->u.seq.items[i] == item || container->u.seq.items[i]->obj == item->obj)
                return var_const(c, Py_True);
        return var_const(c, Py_False);
    }
    cap_fail(c, BR_UNSUPPORTED_VALUE, "'in' on %s", var_a(c, container));
    return NULL;
}

/* ---------------------------------------------------------------- subscripts ---- */

/* The source of m._modules (m has a source), its keys guarded: what is read from it by
 * position (iteration, slices) depends on them. -1 when m has no source, -2 on error. */
static int32_t modules_source(Capture *c, Var *m, PyObject *mods)
{
    if (m->src < 0)
        return -1;
    int32_t msrc = guard_dict_attr_keys(c, m->src, "_modules", mods);
    return msrc < 0 ? -2 : msrc;
}

/* m[sl] of a ModuleList / Sequential is a new container every call, holding entries of m:
 * its var has no source (so no guard on the temporary's identity) and records, for each of
 * its entries, the source of the entry of m it holds (m._modules[key], or the recorded source
 * when m is itself such a temporary). NULL without a failure when fresh is not the plain
 * positional slice of m's entries (a custom __getitem__): the caller guards it as a value. */
static Var *module_slice(Capture *c, Var *m, PyObject *sl, PyObject *fresh)
{
    PyObject *mods = PyObject_GetAttrString(m->obj, "_modules");
    PyObject *fmods = mods && libs_is_module(fresh) ? PyObject_GetAttrString(fresh, "_modules") : NULL;
    sj_err_clear();
    Py_ssize_t start, stop, step, len = -1, n = mods && PyDict_Check(mods) ? PyDict_GET_SIZE(mods) : 0;
    if (fmods && PyDict_Check(fmods) && n > 0 && (m->src >= 0 || m->u.mod.kids) &&
        PySlice_Unpack(sl, &start, &stop, &step) == 0)
        len = PySlice_AdjustIndices(n, &start, &stop, step);
    sj_err_clear();
    Var *r = NULL;
    int32_t *kids =
        len >= 0 && len == PyDict_GET_SIZE(fmods) ? cap_alloc(c, sizeof(int32_t) * (size_t)(len + 1)) : NULL;
    PyObject *keys = kids ? PyDict_Keys(mods) : NULL, *vals = keys ? PyDict_Values(mods) : NULL;
    int32_t msrc = vals ? modules_source(c, m, mods) : -2;
    Py_ssize_t pos = 0, k = 0;
    PyObject *fk, *fv;
    while (msrc > -2 && PyDict_Next(fmods, &pos, &fk, &fv)) {
        Py_ssize_t i = start + k * step;
        if (PyList_GET_ITEM(vals, i) != fv)
            break;
        kids[k] = msrc >= 0 ? sources_add(&c->src, SRC_ITEM, msrc, 0, PyList_GET_ITEM(keys, i), NULL)
                            : (i < m->u.mod.n ? m->u.mod.kids[i] : -1);
        if (msrc >= 0 && kids[k] < 0) {
            msrc = -2;
            break;
        }
        k++;
    }
    if (msrc == -2 && PyErr_Occurred())
        cap_fail_exc(c, BR_INTERNAL);
    else if (kids && k == len && (r = wrap_untracked(c, fresh)) != NULL && r->kind == VK_MODULE) {
        r->u.mod.kids = kids;
        r->u.mod.n = (int32_t)len;
    }
    Py_XDECREF(mods);
    Py_XDECREF(fmods);
    Py_XDECREF(keys);
    Py_XDECREF(vals);
    return r;
}

static Var *seq_index(Capture *c, Var *s, PyObject *key)
{
    if (PyIndex_Check(key)) {
        Py_ssize_t i = PyNumber_AsSsize_t(key, PyExc_IndexError);
        if (i == -1 && PyErr_Occurred()) {
            cap_fail_exc(c, BR_USER_EXCEPTION);
            return NULL;
        }
        if (i < 0)
            i += s->u.seq.n;
        if (i < 0 || i >= s->u.seq.n) {
            PyErr_SetString(PyExc_IndexError, "index out of range");
            cap_fail_exc(c, BR_USER_EXCEPTION);
            return NULL;
        }
        return s->u.seq.items[i];
    }
    if (PySlice_Check(key) && s->kind == VK_LIST && s->u.seq.subtype) {
        PyErr_Format(PyExc_TypeError, "sequence index must be integer, not 'slice'");
        cap_fail_exc(c, BR_USER_EXCEPTION);
        return NULL;
    }
    if (PySlice_Check(key)) {
        Py_ssize_t start, stop, step, len;
        if (PySlice_Unpack(key, &start, &stop, &step) < 0) {
            cap_fail_exc(c, BR_USER_EXCEPTION);
            return NULL;
        }
        len = PySlice_AdjustIndices(s->u.seq.n, &start, &stop, step);
        Var *r = var_seq(c, s->kind, NULL, 0);
        for (Py_ssize_t k = 0; r && k < len; k++)
            if (var_seq_append(c, r, s->u.seq.items[start + k * step]) < 0)
                return NULL;
        if (r && libs.size_type && (PyObject *)s->u.seq.subtype == libs.size_type)
            r->u.seq.subtype = s->u.seq.subtype;   /* a slice of a namedtuple is a tuple */
        return r;
    }
    cap_fail(c, BR_UNSUPPORTED_VALUE, "index of type %s", Py_TYPE(key)->tp_name);
    return NULL;
}

static Var *call_dunder(Capture *c, Var *obj, const char *name, Var **args, int n)
{
    PyObject *nm = PyUnicode_FromString(name);   /* new */
    if (!nm)
        return NULL;
    /* d[k] and k in d on a dict subclass that keeps dict's C method: the operator's slot is
     * dict's own, so the call is that method descriptor's with the object first, which
     * calls.c reads from the live dict; the class is guarded to keep it (an operator looks
     * at the class only, so an instance attribute does not shadow it) */
    PyObject *descr = obj->kind == VK_OBJECT && obj->obj && PyDict_Check(obj->obj) && n < 3
                          ? _PyType_Lookup(Py_TYPE(obj->obj), nm)
                          : NULL;   /* borrowed */
    if (descr && Py_TYPE(descr) == &PyMethodDescr_Type && PyDescr_TYPE(descr) == &PyDict_Type) {
        Var *all[3] = {obj, n > 0 ? args[0] : NULL, n > 1 ? args[1] : NULL};
        Var *fn = attr_guard_class(c, obj, nm, descr, 0) < 0 ? NULL : wrap_untracked(c, descr);
        Py_DECREF(nm);
        return fn ? call_var(c, fn, all, n + 1, NULL) : NULL;
    }
    Var *m = attr_load(c, obj, nm);
    Py_DECREF(nm);
    if (!m)
        return NULL;
    return call_var(c, m, args, n, NULL);
}

Var *op_subscr(Capture *c, Var *obj, Var *key)
{
    if (is_tensor(obj)) {
        Var *args[2] = {obj, key};
        return record_operator(c, "operator.getitem", args, 2);
    }
    if ((obj->kind == VK_TUPLE || obj->kind == VK_LIST) && var_is_const(key))
        return seq_index(c, obj, key->obj);
    if (obj->kind == VK_DICT && var_is_dict_key(key)) {
        int found;
        Var *v = var_dict_get(c, obj, key, &found);
        if (!found && !PyErr_Occurred() && collections_type_of(obj)) {
            int handled;
            Var *r = collections_missing(c, obj, key, &handled);
            if (handled || cap_failed(c))
                return r;
        }
        if (!found) {
            if (!PyErr_Occurred())
                PyErr_SetObject(PyExc_KeyError, key->obj);
            cap_fail_exc(c, BR_USER_EXCEPTION);
            return NULL;
        }
        return v;
    }
    if (is_foldable(obj) && is_foldable(key)) {
        Var *args[2] = {obj, key};
        return fold_operator(c, "getitem", args, 2);
    }
    if (obj->kind == VK_MODULE && var_is_const(key)) {
        /* ModuleList / Sequential / ModuleDict indexing: read the live container */
        PyObject *v = PyObject_GetItem(obj->obj, key->obj);
        if (!v) {
            cap_fail_exc(c, BR_USER_EXCEPTION);
            return NULL;
        }
        Var *r = NULL;
        if (PySlice_Check(key->obj) && (r = module_slice(c, obj, key->obj, v)) == NULL && cap_failed(c)) {
            Py_DECREF(v);
            return NULL;
        }
        if (!r) {
            int32_t s = obj->src >= 0 ? sources_add(&c->src, SRC_ITEM, obj->src, 0, key->obj, NULL)
                                      : module_kid_source(obj, NULL, v);
            r = (obj->src < 0 || s >= 0) ? wrap_value(c, v, s) : NULL;
        }
        Py_DECREF(v);
        return r;
    }
    if (obj->kind == VK_OBJECT || (obj->kind == VK_USEROBJ)) {
        Var *args[1] = {key};
        return call_dunder(c, obj, "__getitem__", args, 1);
    }
    cap_fail(c, BR_UNSUPPORTED_VALUE, "subscript of %s with %s", var_a(c, obj), var_a(c, key));
    return NULL;
}

int op_store_subscr(Capture *c, Var *obj, Var *key, Var *val)
{
    if (is_tensor(obj)) {
        Var *args[3] = {obj, key, val};
        return record_operator(c, "operator.setitem", args, 3) ? 0 : -1;
    }
    if (cap_note_change(c, obj, 0) < 0)
        return -1;
    int handled;
    int rc = attr_store_item(c, obj, key, val, &handled);   /* a ModelOutput from outside */
    if (handled)
        return rc;
    if (var_is_outside(obj) && cap_note_mutation(c, obj, "item assignment") < 0)
        return -1;
    if (obj->kind == VK_LIST && var_is_const(key) && PyIndex_Check(key->obj)) {
        Py_ssize_t i = PyNumber_AsSsize_t(key->obj, PyExc_IndexError);
        if (i < 0)
            i += obj->u.seq.n;
        if (i < 0 || i >= obj->u.seq.n) {
            sj_err_clear();
            PyErr_SetString(PyExc_IndexError, "list assignment index out of range");
            return cap_fail_exc(c, BR_USER_EXCEPTION);
        }
        obj->u.seq.items[i] = val;
        return 0;
    }
    if (obj->kind == VK_DICT && key->kind != VK_CONST && var_is_dict_key(key) &&
        (var_is_outside(obj) || obj->u.dict.subtype))
        return cap_fail(c, BR_UNSUPPORTED_VALUE, "a tensor as the key of %s (%s from constant keys only)",
                        obj->u.dict.subtype ? "a collections dict" : "a dict from outside the frame",
                        obj->u.dict.subtype ? "rebuilt" : "written back");
    if (obj->kind == VK_DICT && var_is_dict_key(key))
        return var_dict_set(c, obj, key, val) < 0 ? cap_fail_exc(c, BR_UNSUPPORTED_VALUE) : 0;
    if (obj->kind == VK_LIST && !obj->u.seq.subtype && var_is_const(key) && PySlice_Check(key->obj))
        return op_list_slice_write(c, obj, key->obj, val);
    if (obj->kind == VK_DICT || obj->kind == VK_LIST)   /* the key is what is not modelled */
        return cap_fail(c, BR_UNSUPPORTED_VALUE, "item assignment on %s with %s as the %s", var_a(c, obj),
                        var_a(c, key), obj->kind == VK_DICT ? "key (keys must be constants)" : "index");
    return cap_fail(c, BR_SIDE_EFFECT, "item assignment on %s", var_a(c, obj));
}

int op_list_slice_write(Capture *c, Var *list, PyObject *slice, Var *val)
{
    Py_ssize_t start, stop, step;
    if (PySlice_Unpack(slice, &start, &stop, &step) < 0)
        return cap_fail_exc(c, BR_USER_EXCEPTION);
    int32_t n = list->u.seq.n;
    Py_ssize_t len = PySlice_AdjustIndices(n, &start, &stop, step);
    Var **items = NULL;
    int32_t m = 0;
    if (val) {
        Var **vi;
        if (op_iterate(c, val, &vi, &m) < 0)
            return -1;
        /* a copy: the value may be the list itself (m[1:] = m) */
        if (!(items = cap_alloc(c, sizeof(Var *) * (size_t)(m + 1))))
            return -1;
        if (m)
            memcpy(items, vi, sizeof(Var *) * (size_t)m);
    }
    if (step != 1) {
        if (val && m != len) {
            PyErr_Format(PyExc_ValueError, "attempt to assign sequence of size %d to extended slice of size %zd",
                         (int)m, len);
            return cap_fail_exc(c, BR_USER_EXCEPTION);
        }
        if (val) {
            for (Py_ssize_t k = 0; k < len; k++)
                list->u.seq.items[start + k * step] = items[k];
            return 0;
        }
        /* del m[::2]: keep what the slice does not name */
        int32_t w = 0;
        for (int32_t i = 0; i < n; i++) {
            Py_ssize_t off = (Py_ssize_t)i - start;
            int named = off % step == 0 && off / step >= 0 && off / step < len;
            if (!named)
                list->u.seq.items[w++] = list->u.seq.items[i];
        }
        list->u.seq.n = w;
        return 0;
    }
    if (stop < start)
        stop = start;   /* m[3:1] = [...] inserts at 3 */
    Var **rest = cap_alloc(c, sizeof(Var *) * (size_t)(n - stop + 1));
    if (!rest)
        return -1;
    if (n - stop)
        memcpy(rest, list->u.seq.items + stop, sizeof(Var *) * (size_t)(n - stop));
    list->u.seq.n = (int32_t)start;
    for (int32_t i = 0; i < m; i++)
        if (var_seq_append(c, list, items[i]) < 0)
            return -1;
    for (Py_ssize_t i = 0; i < n - stop; i++)
        if (var_seq_append(c, list, rest[i]) < 0)
            return -1;
    return 0;
}

/* ---------------------------------------------------------------- iteration ---- */

/* How module m's class iterates or measures itself, by the __iter__ or __len__ that iter()
 * and len() call: 'v' the values of _modules (ModuleList's and Sequential's methods, in
 * those classes or subclasses that keep them), 'k' its keys (ModuleDict's), 'f' a Python
 * method of another class (ParameterList, ParameterDict, a user's: inlined), 0 none. */
static int module_protocol(PyObject *m, int len)
{
    static PyObject *names[2];       /* strong, interned "__iter__" and "__len__" */
    static PyObject *known[3][2];    /* strong: the containers' methods, or NULL */
    static const char *const cls[3] = {"nn.ModuleList", "nn.Sequential", "nn.ModuleDict"};
    if (!names[len] && !(names[len] = PyUnicode_InternFromString(len ? "__len__" : "__iter__"))) {
        sj_err_clear();
        return 0;
    }
    PyObject *f = _PyType_Lookup(Py_TYPE(m), names[len]);   /* borrowed */
    if (!f)
        return 0;
    for (int i = 0; i < 3; i++) {
        if (!known[i][len] && libs.torch) {
            PyObject *t = libs_get_path(libs.torch, cls[i]);   /* new */
            if (t && PyType_Check(t))
                known[i][len] = Py_XNewRef(_PyType_Lookup((PyTypeObject *)t, names[len]));
            Py_XDECREF(t);
            sj_err_clear();
        }
        if (f == known[i][len])
            return i == 2 ? 'k' : 'v';
    }
    return PyFunction_Check(f) ? 'f' : 0;
}

static int module_items(Capture *c, Var *m, Var ***items, int32_t *n, int keys_only)
{
    PyObject *mods = PyObject_GetAttrString(m->obj, "_modules");
    if (!mods || !PyDict_Check(mods)) {
        Py_XDECREF(mods);
        sj_err_clear();
        return cap_fail(c, BR_UNSUPPORTED_VALUE, "iterating over %s", sj_type_a(c, Py_TYPE(m->obj), "module"));
    }
    int32_t msrc = modules_source(c, m, mods);
    if (msrc == -2) {
        Py_DECREF(mods);
        return -1;
    }
    Py_ssize_t cnt = PyDict_GET_SIZE(mods);
    *items = cap_alloc(c, sizeof(Var *) * (size_t)(cnt + 1));
    *n = 0;
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (*items && PyDict_Next(mods, &pos, &k, &v)) {
        Var *item;
        if (keys_only) {
            item = var_const(c, k);
        } else {
            if (v == Py_None)
                continue;
            int32_t s = msrc >= 0 ? sources_add(&c->src, SRC_ITEM, msrc, 0, k, NULL) : module_kid_source(m, k, NULL);
            item = (msrc < 0 || s >= 0) ? wrap_value(c, v, s) : NULL;
        }
        if (!item) {
            Py_DECREF(mods);
            return -1;
        }
        (*items)[(*n)++] = item;
    }
    Py_DECREF(mods);
    return *items ? 0 : -1;
}

/* The items of what an __iter__ returned. Python drives that result with its __next__;
 * op_iterate on an object would call its __iter__ instead, which for the usual
 * `return self` calls the same __iter__ again without end, and for any other iterator
 * class runs the wrong method. Objects, modules and instances of user classes as
 * results are refused (the loop runs in the interpreter); builtin iterators,
 * generators and containers yield the items their __next__ would. */
static int iterate_dunder_result(Capture *c, Var *r, Var ***items, int32_t *n)
{
    if (r->kind == VK_USEROBJ || r->kind == VK_OBJECT || r->kind == VK_MODULE) {
        PyTypeObject *t = r->kind == VK_USEROBJ ? r->u.uobj.type : Py_TYPE(r->obj);
        return cap_fail(c, BR_UNSUPPORTED_VALUE, "iteration through the __next__ of %s", sj_type_a(c, t, "object"));
    }
    return op_iterate(c, r, items, n);
}

int op_iterate(Capture *c, Var *v, Var ***items, int32_t *n)
{
    switch (v->kind) {
    case VK_TUPLE:
    case VK_LIST:
        *items = v->u.seq.items;
        *n = v->u.seq.n;
        return 0;
    case VK_ITER:
        return iter_drain(c, v, items, n);
    case VK_DICT:
        if (var_dict_force(c, v) < 0)
            return -1;
        *items = v->u.dict.keys;
        *n = v->u.dict.n;
        return 0;
    case VK_DICTVIEW: {
        Var *l = var_view_list(c, v);   /* what the view holds now */
        if (!l)
            return -1;
        *items = l->u.seq.items;
        *n = l->u.seq.n;
        return 0;
    }
    case VK_CONST: {
        PyObject *seq = PySequence_Fast(v->obj, "not iterable");
        if (!seq)
            return cap_fail_exc(c, BR_USER_EXCEPTION);
        Py_ssize_t cnt = PySequence_Fast_GET_SIZE(seq);
        if (cnt > 100000) {
            Py_DECREF(seq);
            return cap_fail(c, BR_UNSUPPORTED_VALUE, "iterating over %zd constants", cnt);
        }
        *items = cap_alloc(c, sizeof(Var *) * (size_t)(cnt + 1));
        for (Py_ssize_t i = 0; *items && i < cnt; i++)
            if (!((*items)[i] = var_const(c, PySequence_Fast_GET_ITEM(seq, i)))) {
                Py_DECREF(seq);
                return -1;
            }
        Py_DECREF(seq);
        *n = (int32_t)cnt;
        return *items ? 0 : -1;
    }
    case VK_TENSOR: {
        if (v->u.t.meta.ndim == 0)
            return cap_fail(c, BR_USER_EXCEPTION, "iteration over a 0-d tensor");
        int64_t cnt = v->u.t.meta.size[0];
        if (v->u.t.meta.sym[0] &&
            symb_specialize(c, v->u.t.meta.sym[0], &cnt, "iterating over a tensor unrolls its first dim") < 0)
            return cap_fail_exc(c, BR_INTERNAL);   /* unrolling fixes the count */
        *items = cap_alloc(c, sizeof(Var *) * (size_t)(cnt + 1));
        for (int64_t i = 0; *items && i < cnt; i++) {
            PyObject *k = PyLong_FromLongLong(i);
            Var *kv = k ? var_const_steal(c, k) : NULL;
            if (!kv || !((*items)[i] = op_subscr(c, v, kv)))
                return -1;
        }
        *n = (int32_t)cnt;
        return *items ? 0 : -1;
    }
    case VK_MODULE: {
        int how = module_protocol(v->obj, 0);
        if (how == 'v' || how == 'k')
            return module_items(c, v, items, n, how == 'k');
        if (how == 0)
            return cap_fail(c, BR_UNSUPPORTED_VALUE, "iteration over %s", sj_type_a(c, Py_TYPE(v->obj), "module"));
        Var *r = call_dunder(c, v, "__iter__", NULL, 0);   /* the class's own */
        return r ? iterate_dunder_result(c, r, items, n) : -1;
    }
    case VK_USEROBJ:
        if (v->u.uobj.record) {   /* iterating a ModelOutput yields its keys */
            Var *a = v->u.uobj.attrs;
            *items = cap_alloc(c, sizeof(Var *) * (size_t)(a->u.dict.n + 1));
            *n = 0;
            for (int32_t i = 0; *items && i < a->u.dict.n; i++)
                if (!(a->u.dict.vals[i]->kind == VK_CONST && a->u.dict.vals[i]->obj == Py_None))
                    (*items)[(*n)++] = a->u.dict.keys[i];
            return *items ? 0 : -1;
        }
        /* a user class iterates through its own __iter__ */
        /* fall through */
    case VK_OBJECT: {
        PyTypeObject *t = v->kind == VK_USEROBJ ? v->u.uobj.type : Py_TYPE(v->obj);
        static PyObject *s_iter;
        if (!s_iter && !(s_iter = PyUnicode_InternFromString("__iter__")))
            return -1;
        PyObject *it = _PyType_Lookup(t, s_iter);   /* borrowed */
        if (!it || !PyFunction_Check(it))
            return cap_fail(c, BR_UNSUPPORTED_VALUE, "iteration over %s", sj_type_a(c, t, "object"));
        Var *r = call_dunder(c, v, "__iter__", NULL, 0);
        if (!r)
            return -1;
        return iterate_dunder_result(c, r, items, n);
    }
    default:
        return cap_fail(c, BR_UNSUPPORTED_VALUE, "iteration over %s", var_a(c, v));
    }
}

Var *op_len(Capture *c, Var *v)
{
    Py_ssize_t n;
    switch (v->kind) {
    case VK_TUPLE:
    case VK_LIST:
        n = v->u.seq.n;
        break;
    case VK_DICT:
        if (var_dict_force(c, v) < 0)
            return NULL;
        n = v->u.dict.n;
        break;
    case VK_TENSOR:
        if (v->u.t.meta.ndim == 0) {
            PyErr_SetString(PyExc_TypeError, "len() of a 0-d tensor");
            cap_fail_exc(c, BR_USER_EXCEPTION);
            return NULL;
        }
        if (v->u.t.meta.sym[0])
            return symb_var(c, v->u.t.meta.sym[0]);
        n = (Py_ssize_t)v->u.t.meta.size[0];
        break;
    case VK_MODULE: {
        /* read live and guarded: the container's _modules keys, or the class's own
         * __len__ inlined (ParameterList's reads its _size) */
        int how = module_protocol(v->obj, 1);
        if (how == 'f')
            return call_dunder(c, v, "__len__", NULL, 0);
        PyObject *mods = how ? PyObject_GetAttrString(v->obj, "_modules") : NULL;   /* new */
        int32_t msrc = mods && PyDict_Check(mods) ? modules_source(c, v, mods) : -3;
        n = msrc > -2 ? PyDict_GET_SIZE(mods) : -1;
        Py_XDECREF(mods);
        if (msrc == -3) {
            sj_err_clear();
            cap_fail(c, BR_UNSUPPORTED_VALUE, "len() of %s", sj_type_a(c, Py_TYPE(v->obj), "module"));
        }
        if (n < 0)
            return NULL;
        break;
    }
    case VK_CONST:
        n = PyObject_Length(v->obj);
        if (n < 0) {
            cap_fail_exc(c, BR_USER_EXCEPTION);
            return NULL;
        }
        break;
    case VK_DICTVIEW: {
        Var *l = var_view_list(c, v);
        if (!l)
            return NULL;
        n = l->u.seq.n;
        break;
    }
    case VK_ITER:
        PyErr_SetString(PyExc_TypeError, "object of type 'iterator' has no len()");
        cap_fail_exc(c, BR_USER_EXCEPTION);
        return NULL;
    case VK_OBJECT:
        if (!(Py_TYPE(v->obj)->tp_flags & Py_TPFLAGS_HEAPTYPE)) {
            /* a builtin type (mappingproxy, range, ...): its length runs no user code;
             * read now, so guarded with the type when the object comes from outside */
            n = PyObject_Length(v->obj);
            if (n < 0) {
                cap_fail_exc(c, BR_USER_EXCEPTION);
                return NULL;
            }
            if (v->src >= 0) {
                if (guard_add_simple(c, GK_SEQ_LENGTH, v->src, (PyObject *)Py_TYPE(v->obj)) < 0)
                    return NULL;
                c->guards.g[c->guards.n - 1].len = n;
            }
            break;
        }
        return call_dunder(c, v, "__len__", NULL, 0);   /* a Python class's own __len__ */
    case VK_USEROBJ:
        if (v->u.uobj.record) {
            Var *t = objects_record_tuple(c, v);
            return t ? op_len(c, t) : NULL;
        }
        return call_dunder(c, v, "__len__", NULL, 0);
    default:
        cap_fail(c, BR_UNSUPPORTED_VALUE, "len() of %s", var_a(c, v));
        return NULL;
    }
    PyObject *r = PyLong_FromSsize_t(n);
    return r ? var_const_steal(c, r) : NULL;
}
