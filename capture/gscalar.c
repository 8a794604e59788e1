/* Graph scalars: Python floats and bools whose values exist only at run time.
 *
 * Under capture_scalar_outputs, t.item() of a one-element float or bool torch tensor is
 * captured as an item node, as torch.compile does (its unbacked SymFloat zuf<N> and SymBool
 * u<N>). Design: a var kind of its own, VK_GSCALAR, holding the graph value that computes
 * the scalar and its Python type, rather than a VK_TENSOR (the scalar is not a tensor: no
 * attributes, methods or shape) or a VK_SYMINT (no symbolic expression, no hint, nothing to
 * guard: a float's value is data).
 *   - Arithmetic and comparisons on it, with Python numbers, other graph scalars and
 *     symbolic ints, record OP_PY_SCALAR nodes whose target is the Python function
 *     (operator.mul, math.sqrt, float) and give a new graph scalar. An int result (int(f),
 *     math.floor(f), b + 1) is an unbacked symbol u<N> over its node (symb_unbacked_value),
 *     so that everything written for unbacked ints applies to it.
 *   - Passed to a tensor op (x * f, torch.full((n,), f), x.clamp(max=f)), the op's argument
 *     is the graph value (ops.c to_arg); its shape rule sees a stand-in of the same Python
 *     type, flagged BoundArg.data so that a rule never reads the number.
 *   - A branch on it (if f > 0:, and/or) is a data-dependent graph break (the comparison
 *     itself is recorded, as torch does); any other use that needs its Python value raises
 *     DataDependentError, which capture turns into a data-dependent break.
 *   - Returned, or live at a graph break, it is a graph output: the Python float or bool.
 *
 * Memory: graph scalar vars live in the capture's arena; their text (for messages) is kept
 * alive by the capture's keepalive list. Targets are owned by the graph's constants. */
#include "capture.h"
#include "../vocab/libs.h"
#include "../core/log.h"
#include "../core/trace.h"
#include "sj_opcodes.h"
#include "../core/errors.h"

/* Number kinds of an operand: what Python type it has at run time. */
enum { NK_NONE = 0, NK_BOOL, NK_INT, NK_FLOAT };

/* How a result's Python type follows from its operands' (Python's numeric tower). */
typedef enum {
    R_ARITH,     /* float if any operand is a float, else int (True + True == 2) */
    R_FLOAT,     /* always float: true division, float(), math.sqrt() */
    R_INT,       /* always int: int(), round(x), math.floor() */
    R_BOOL,      /* comparisons, not, bool() */
    R_POW,       /* float if any float; int ** int only with a constant exponent >= 0 */
    R_BITS,      /* & | ^: bool with bools, int with ints, never floats */
    R_INTS,      /* << >>: ints only */
    R_SAME,      /* neg, abs: a float stays float, a bool becomes int */
    R_PICK,      /* min/max return an operand: one type among them, or unknown */
} ResultRule;

/* BINARY_OP on graph scalars, by the binary op (in-place forms share the row: floats and
 * bools are immutable). */
/* clang-format off */
#define GS_BINARY_OPS(X) \
    X(SJ_NB_ADD, "add", R_ARITH) \
    X(SJ_NB_SUBTRACT, "sub", R_ARITH) \
    X(SJ_NB_MULTIPLY, "mul", R_ARITH) \
    X(SJ_NB_FLOOR_DIVIDE, "floordiv", R_ARITH) \
    X(SJ_NB_REMAINDER, "mod", R_ARITH) \
    X(SJ_NB_TRUE_DIVIDE, "truediv", R_FLOAT) \
    X(SJ_NB_POWER, "pow", R_POW) \
    X(SJ_NB_AND, "and_", R_BITS) \
    X(SJ_NB_OR, "or_", R_BITS) \
    X(SJ_NB_XOR, "xor", R_BITS) \
    X(SJ_NB_LSHIFT, "lshift", R_INTS) \
    X(SJ_NB_RSHIFT, "rshift", R_INTS)
/* clang-format on */

/* Functions called on graph scalars that become nodes: module, name, argument count,
 * result rule, and whether a call on symbolic ints alone is a graph scalar too (SI: math.sqrt
 * of a size is torch's SymFloat, attention's 1 / sqrt(head_dim); the others' symbolic-int
 * calls keep their own handling). Other functions of a graph scalar break the graph (torch
 * breaks on math.exp and math.isnan too). */
/* clang-format off */
#define GS_CALLS(X) \
    X("builtins", "float", 1, R_FLOAT, 0) \
    X("builtins", "int", 1, R_INT, 0) \
    X("builtins", "bool", 1, R_BOOL, 0) \
    X("builtins", "abs", 1, R_SAME, 0) \
    X("builtins", "round", 1, R_INT, 0) \
    X("builtins", "min", 2, R_PICK, 0) \
    X("builtins", "max", 2, R_PICK, 0) \
    X("math", "sqrt", 1, R_FLOAT, 1) \
    X("math", "floor", 1, R_INT, 0) \
    X("math", "ceil", 1, R_INT, 0) \
    X("math", "trunc", 1, R_INT, 0)
/* clang-format on */

/* The in-place binary ops follow the plain ones in the same order (BINARY_OP's oparg). */
_Static_assert(SJ_NB_ADD == 0 && SJ_NB_INPLACE_XOR - SJ_NB_INPLACE_ADD == SJ_NB_XOR - SJ_NB_ADD,
               "BINARY_OP in-place opargs are the plain ones shifted");

static const struct {
    int nb;
    const char *fn;
    ResultRule rule;
} binary_ops[] = {
#define X(nb, fn, rule) {nb, fn, rule},
    GS_BINARY_OPS(X)
#undef X
};

static const struct {
    const char *mod, *name;
    int nargs;
    ResultRule rule;
    int symint;
} calls[] = {
#define X(mod, name, nargs, rule, symint) {mod, name, nargs, rule, symint},
    GS_CALLS(X)
#undef X
};
enum { NCALLS = sizeof calls / sizeof calls[0] };
static PyObject *call_objs[NCALLS];   /* strong: the resolved functions of calls[] */
static PyObject *standin_float;       /* strong: what the shape rules see for a graph float */

/* ------------------------------------------------------------ operands ---- */

/* The number kind of a numpy scalar by its dtype's kind. */
static int numpy_kind(PyObject *o)
{
    PyObject *dt = o ? PyObject_GetAttrString(o, "dtype") : NULL;
    PyObject *k = dt ? PyObject_GetAttrString(dt, "kind") : NULL;
    const char *ks = k && PyUnicode_Check(k) ? PyUnicode_AsUTF8(k) : NULL;
    int r = !ks                              ? NK_NONE
            : (ks[0] == 'i' || ks[0] == 'u') ? NK_INT
            : ks[0] == 'f'                   ? NK_FLOAT
            : ks[0] == 'b'                   ? NK_BOOL
                                             : NK_NONE;
    Py_XDECREF(dt);
    Py_XDECREF(k);
    sj_err_clear();
    return r;
}

static int num_kind(const Var *v)
{
    if (!v)
        return NK_NONE;
    switch (v->kind) {
    case VK_GSCALAR:
        if (v->u.gs.type == GS_NUMPY)
            return numpy_kind(v->u.gs.hint);
        return v->u.gs.type == GS_BOOL ? NK_BOOL : NK_FLOAT;
    case VK_SYMINT:
        return NK_INT;
    case VK_CONST:
        if (PyBool_Check(v->obj))
            return NK_BOOL;
        if (PyLong_CheckExact(v->obj))
            return NK_INT;
        if (PyFloat_CheckExact(v->obj))
            return NK_FLOAT;
        return NK_NONE;
    default:
        return NK_NONE;
    }
}

/* New reference: how an operand reads in messages (zuf0, u1, 2.0). */
static PyObject *text_of(Capture *c, const Var *v)
{
    if (v->kind == VK_GSCALAR)
        return Py_NewRef(v->u.gs.text);
    if (v->kind == VK_SYMINT)
        return sym_print(c->env, v->u.s.e, NULL, NULL);
    return PyObject_Repr(v->obj);
}

/* New reference: an operand's text, in parentheses when it is not atomic. */
static PyObject *operand_text(Capture *c, const Var *v)
{
    PyObject *t = text_of(c, v);
    if (!t || PyUnicode_FindChar(t, ' ', 0, PyUnicode_GET_LENGTH(t), 1) < 0)
        return t;
    Py_SETREF(t, PyUnicode_FromFormat("(%U)", t));
    return t;
}

/* The result type of rule over operands of kinds k[0..n); NK_NONE when Python would raise
 * or the type depends on the values (*why says which). */
static int result_kind(ResultRule rule, const int *k, Var *const *args, int n, const char **why)
{
    int any_float = 0, all_bool = 1, same = 1;
    for (int i = 0; i < n; i++) {
        any_float |= k[i] == NK_FLOAT;
        all_bool &= k[i] == NK_BOOL;
        same &= k[i] == k[0];
    }
    switch (rule) {
    case R_ARITH:
        return any_float ? NK_FLOAT : NK_INT;
    case R_FLOAT:
        return NK_FLOAT;
    case R_INT:
        return NK_INT;
    case R_BOOL:
        return NK_BOOL;
    case R_POW:
        if (any_float)
            return NK_FLOAT;
        if (k[1] == NK_BOOL)
            return NK_INT;   /* a bool exponent is never negative */
        if (n == 2 && args[1]->kind == VK_CONST && PyLong_Check(args[1]->obj)) {
            int overflow;
            long long e = PyLong_AsLongLongAndOverflow(args[1]->obj, &overflow);
            sj_err_clear();
            if (overflow > 0 || (!overflow && e >= 0))
                return NK_INT;
        }
        *why = "an int to a power known only at run time (int or float, by its sign)";
        return NK_NONE;
    case R_BITS:
        if (any_float)
            break;
        return all_bool ? NK_BOOL : NK_INT;
    case R_INTS:
        if (any_float)
            break;
        return NK_INT;
    case R_SAME:
        return k[0] == NK_FLOAT ? NK_FLOAT : NK_INT;
    case R_PICK:
        if (same)
            return k[0];
        *why = "min/max of mixed types (the type of the result depends on the values)";
        return NK_NONE;
    }
    *why = "a float operand (Python raises TypeError)";
    return NK_NONE;
}

/* ---------------------------------------------------------------- nodes ---- */

/* An OP_PY_SCALAR (or OP_ITEM) node calling target on args (graph scalars, symbolic ints,
 * constants, or one tensor for item), whose value has Python kind nk. -1 on error. */
static int32_t scalar_node(Capture *c, OpId op, PyObject *target, Var *const *args, int n, int nk)
{
    Graph *g = c->g;
    int32_t first = graph_pool(g, n);
    if (first < 0)
        return -1;
    for (int i = 0; i < n; i++) {
        Arg a = {ARG_VALUE, 0, 0};
        Var *v = args[i];
        if (v->kind == VK_GSCALAR)
            a.a = v->u.gs.value;
        else if (v->kind == VK_TENSOR)
            a.a = v->u.t.value;
        else if (v->kind == VK_SYMINT)
            a.a = symb_materialize(c, v->u.s.e);
        else {
            a.kind = ARG_CONST;
            a.a = graph_const(g, v->obj);
        }
        if (a.a < 0)
            return -1;
        g->pool[first + i] = a;
    }
    TensorMeta m;
    memset(&m, 0, sizeof m);
    m.symint = 1;   /* not a tensor: the meta check skips it */
    m.dtype = nk == NK_FLOAT ? DT_F64 : nk == NK_BOOL ? DT_BOOL : DT_I64;
    PyObject *where = cap_where(c);   /* new or NULL */
    if (!where)
        sj_err_clear();
    int32_t v = graph_add_node(g, op, 0, target, first, n, first + n, 0, NULL, &m, 1, where);
    Py_XDECREF(where);
    if (v >= 0)
        c->nops++;   /* scalar work at run time is work: the frame gets a graph */
    return v;
}

/* The var of node v's result: a graph scalar named text (stolen), or for an int an
 * unbacked symbol. NULL with the failure recorded. */
static Var *result_var(Capture *c, int32_t v, int nk, PyObject *text)
{
    if (v < 0 || !text) {
        Py_XDECREF(text);
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    if (nk == NK_INT) {
        Py_DECREF(text);
        return symb_unbacked_value(c, v);
    }
    if (!cap_keep_steal(c, text)) {
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    Var *r = var_new(c, VK_GSCALAR);
    if (!r)
        return NULL;
    r->u.gs.value = v;
    r->u.gs.type = nk == NK_BOOL ? GS_BOOL : GS_FLOAT;
    r->u.gs.text = text;
    return r;
}

static PyObject *operator_fn(const char *name)   /* borrowed (the operator module keeps it) */
{
    static PyObject *mod;   /* strong */
    if (!mod && !(mod = PyImport_ImportModule("operator")))
        return NULL;
    PyObject *f = PyObject_GetAttrString(mod, name);
    Py_XDECREF(f);
    return f;
}

/* The hint of r = fn(args) when every graph scalar among args has one and no operand is a
 * symbolic int (pinning floats alone would not fix such a result), and the union of their
 * inputs. */
static int derive_hint(Capture *c, Var *r, PyObject *fn, Var *const *args, int n)
{
    PyObject *vals[2];
    int32_t nd = 0;
    if (n > 2)
        return 0;
    for (int i = 0; i < n; i++) {
        if (args[i]->kind == VK_GSCALAR && args[i]->u.gs.hint)
            nd += args[i]->u.gs.ndeps;
        else if (args[i]->kind != VK_CONST)
            return 0;
        vals[i] = args[i]->kind == VK_GSCALAR ? args[i]->u.gs.hint : args[i]->obj;
    }
    Var **deps = cap_alloc(c, sizeof(Var *) * (size_t)(nd + 1));
    if (!deps)
        return -1;
    PyObject *h = PyObject_Vectorcall(fn, vals, (size_t)n, NULL);
    if (!h) {
        sj_err_clear();   /* 1.0 / 0.0 on the hints: the graph computes it; no hint */
        return 0;
    }
    if (!cap_keep_steal(c, h))
        return -1;
    for (int i = 0; i < n; i++)
        for (int32_t j = 0; args[i]->kind == VK_GSCALAR && j < args[i]->u.gs.ndeps; j++) {
            Var *d = args[i]->u.gs.deps[j];
            int32_t k = 0;
            while (k < r->u.gs.ndeps && deps[k] != d)
                k++;
            if (k == r->u.gs.ndeps)
                deps[r->u.gs.ndeps++] = d;
        }
    r->u.gs.deps = deps;
    r->u.gs.hint = h;
    if (r->u.gs.ndeps != 1)
        return 0;
    /* one input: how the result follows from it, for a guard on a branch */
    PyObject *recipe = PyTuple_New(n + 1);
    if (!recipe)
        return -1;
    PyTuple_SET_ITEM(recipe, 0, Py_NewRef(fn));
    for (int i = 0; i < n; i++) {
        PyObject *a = args[i]->kind == VK_GSCALAR ? args[i]->u.gs.recipe : args[i]->obj;
        if (!a) {
            Py_DECREF(recipe);
            return 0;   /* an operand without one: branches on the result specialise */
        }
        PyTuple_SET_ITEM(recipe, i + 1, Py_NewRef(a));
    }
    r->u.gs.recipe = cap_keep_steal(c, recipe);
    return r->u.gs.recipe ? 0 : -1;
}

static Var *fail_types(Capture *c, const char *what, Var *const *args, int n, const char *why);

/* Record fn(args) with result kind nk; text: new reference (stolen). */
static Var *record_call(Capture *c, PyObject *fn, Var *const *args, int n, int nk, PyObject *text)
{
    if (!fn) {
        Py_XDECREF(text);
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    if (symb_ensure(c) < 0) {   /* symbolic-int operands and int results need the env */
        Py_XDECREF(text);
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    int numpy = 0;
    for (int i = 0; i < n; i++)
        numpy |= args[i]->kind == VK_GSCALAR && args[i]->u.gs.type == GS_NUMPY;
    int32_t v = text ? scalar_node(c, OP_PY_SCALAR, fn, args, n, nk) : -1;
    /* with a numpy scalar among the operands the result is a numpy scalar too (not an int
     * symbol): its type comes from the hint */
    Var *r = result_var(c, v, numpy ? NK_FLOAT : nk, text);
    if (r && r->kind == VK_GSCALAR && derive_hint(c, r, fn, args, n) < 0) {
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    if (r && numpy) {
        if (!r->u.gs.hint)
            return fail_types(c, "an operation", (Var **)args, n, "its value on this call could not be computed");
        r->u.gs.type = GS_NUMPY;
    }
    return r;
}

Var *gscalar_input(Capture *c, int32_t value, PyObject *obj, int32_t src, PyObject *name, int type)
{
    Var *r = cap_keep(c, name) ? result_var(c, value, NK_FLOAT, Py_NewRef(name)) : NULL;
    Var **deps = r ? cap_alloc(c, sizeof(Var *)) : NULL;
    if (!deps)
        return NULL;
    r->u.gs.type = (uint8_t)type;
    r->obj = obj;
    r->src = src;
    r->u.gs.hint = obj;
    r->u.gs.recipe = Py_Ellipsis;
    r->u.gs.deps = deps;
    deps[0] = r;
    r->u.gs.ndeps = 1;
    return r;
}

PyObject *gscalar_pin(Capture *c, Var *v, const char *why)
{
    if (!v->u.gs.hint)
        return NULL;
    for (int32_t i = 0; i < v->u.gs.ndeps; i++) {
        Var *d = v->u.gs.deps[i];
        if (guard_add_simple(c, GK_EQUALS_MATCH, d->src, d->obj) < 0) {
            cap_fail_exc(c, BR_INTERNAL);
            return NULL;
        }
        if (sj_log_on(LOG_DYNAMIC, SJ_INFO)) {
            PyObject *w = symb_where_text(c);
            sj_log(LOG_DYNAMIC, SJ_INFO, "specialize %U = %R because %s (%U)", d->u.gs.text, d->obj, why,
                   w ? w : Py_None);
            Py_XDECREF(w);
            sj_err_clear();
        }
        if (sj_trace_on) {
            PyObject *stack = cap_user_stack(c);
            if (stack)
                SJ_TRACE("specialize", "(OOOsO)", d->u.gs.text, d->u.gs.text, d->obj, why, stack);
            Py_XDECREF(stack);
            sj_err_clear();
        }
    }
    return v->u.gs.hint;
}

/* ----------------------------------------------------------------- item ---- */

Var *gscalar_item(Capture *c, Var *t)
{
    int is_bool = t->u.t.meta.dtype == DT_BOOL;
    if (symb_ensure(c) < 0) {
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    PyObject *fn = libs.tensor_type ? PyObject_GetAttrString(libs.tensor_type, "item") : NULL;   /* new */
    int32_t v = fn ? scalar_node(c, OP_ITEM, fn, &t, 1, is_bool ? NK_BOOL : NK_FLOAT) : -1;
    Py_XDECREF(fn);
    PyObject *text = NULL;
    if (v >= 0 && is_bool) {
        /* torch names it as an unbacked int in [0, 1] (create_unbacked_symbool u<N>) */
        SymNode *u = symb_unbacked_bool(c, v);
        text = u ? PyUnicode_FromFormat("u%lld", (long long)u->value) : NULL;
    } else if (v >= 0) {
        text = PyUnicode_FromFormat("zuf%d", (int)c->nufloats++);
        if (text && sj_log_on(LOG_DYNAMIC, SJ_INFO)) {
            PyObject *w = symb_where_text(c);
            sj_log(LOG_DYNAMIC, SJ_INFO, "create_unbacked_symfloat %U [-oo, oo] (%U)", text, w ? w : Py_None);
            Py_XDECREF(w);
            sj_err_clear();
        }
    }
    return result_var(c, v, is_bool ? NK_BOOL : NK_FLOAT, text);
}

/* ------------------------------------------------------------ operators ---- */

static Var *fail_types(Capture *c, const char *what, Var *const *args, int n, const char *why)
{
    PyObject *t[2] = {NULL, NULL};   /* new references */
    for (int i = 0; i < n && i < 2; i++)
        if (!(t[i] = text_of(c, args[i]))) {
            sj_err_clear();
            t[i] = PyUnicode_FromString("?");
        }
    if (n > 1)
        cap_fail(c, BR_UNSUPPORTED_VALUE, "%s on %S and %S (graph scalars): %s", what, t[0] ? t[0] : Py_None,
                 t[1] ? t[1] : Py_None, why);
    else
        cap_fail(c, BR_UNSUPPORTED_VALUE, "%s on %S (a graph scalar): %s", what, t[0] ? t[0] : Py_None, why);
    Py_XDECREF(t[0]);
    Py_XDECREF(t[1]);
    return NULL;
}

Var *gscalar_binary(Capture *c, int nb, Var *a, Var *b)
{
    int base = nb >= SJ_NB_INPLACE_ADD ? nb - SJ_NB_INPLACE_ADD : nb;
    const char *sym = nb >= 0 && nb < SJ_NB_COUNT ? sj_nb_symbols[base] : "?";
    Var *args[2] = {a, b};
    int k[2] = {num_kind(a), num_kind(b)};
    size_t row = 0;
    while (row < sizeof binary_ops / sizeof *binary_ops && binary_ops[row].nb != base)
        row++;
    if (row == sizeof binary_ops / sizeof *binary_ops)
        return fail_types(c, sym, args, 2, "not a number operator");
    if (!k[0] || !k[1])
        return fail_types(c, sym, args, 2, "an operand is not a number");
    const char *why = NULL;
    int nk = result_kind(binary_ops[row].rule, k, args, 2, &why);
    if (!nk)
        return fail_types(c, sym, args, 2, why);
    PyObject *ta = operand_text(c, a), *tb = ta ? operand_text(c, b) : NULL;
    PyObject *text = tb ? PyUnicode_FromFormat("%U %s %U", ta, sym, tb) : NULL;
    Py_XDECREF(ta);
    Py_XDECREF(tb);
    return record_call(c, operator_fn(binary_ops[row].fn), args, 2, nk, text);
}

Var *gscalar_compare(Capture *c, int cmp, Var *a, Var *b)
{
    static const char *const fns[] = {"lt", "le", "eq", "ne", "gt", "ge"};
    static const char *const syms[] = {"<", "<=", "==", "!=", ">", ">="};
    Var *args[2] = {a, b};
    Var *other = a->kind == VK_GSCALAR ? b : a;
    if ((cmp == SJ_CMP_EQ || cmp == SJ_CMP_NE) && other->kind == VK_CONST && !num_kind(other) &&
        !PyNumber_Check(other->obj))
        return var_const(c, cmp == SJ_CMP_NE ? Py_True : Py_False);   /* f == None, b != "x" */
    if (cmp < 0 || cmp > 5 || !num_kind(a) || !num_kind(b))
        return fail_types(c, cmp >= 0 && cmp <= 5 ? syms[cmp] : "?", args, 2, "an operand is not a number");
    PyObject *ta = operand_text(c, a), *tb = ta ? operand_text(c, b) : NULL;
    PyObject *text = tb ? PyUnicode_FromFormat("%U %s %U", ta, syms[cmp], tb) : NULL;
    Py_XDECREF(ta);
    Py_XDECREF(tb);
    return record_call(c, operator_fn(fns[cmp]), args, 2, NK_BOOL, text);
}

Var *gscalar_unary(Capture *c, int opcode, Var *a)
{
    int k = num_kind(a);
    if (opcode == SJOP_UNARY_POSITIVE && k == NK_FLOAT)
        return a;   /* +f is f */
    const char *fn = opcode == SJOP_UNARY_NOT        ? "not_"
                     : opcode == SJOP_UNARY_NEGATIVE ? "neg"
                     : opcode == SJOP_UNARY_POSITIVE ? "pos"
                                                     : "invert";
    const char *sym = opcode == SJOP_UNARY_NOT        ? "not "
                      : opcode == SJOP_UNARY_NEGATIVE ? "-"
                      : opcode == SJOP_UNARY_POSITIVE ? "+"
                                                      : "~";
    if (opcode == SJOP_UNARY_INVERT && k == NK_FLOAT)
        return fail_types(c, "~", &a, 1, "a float operand (Python raises TypeError)");
    int nk = opcode == SJOP_UNARY_NOT ? NK_BOOL : k == NK_FLOAT ? NK_FLOAT : NK_INT;
    PyObject *t = operand_text(c, a);
    PyObject *text = t ? PyUnicode_FromFormat("%s%U", sym, t) : NULL;
    Py_XDECREF(t);
    return record_call(c, operator_fn(fn), &a, 1, nk, text);
}

/* ---------------------------------------------------------------- calls ---- */

static int calls_init(void)
{
    if (call_objs[0])
        return 0;
    for (int i = 0; i < NCALLS; i++) {
        PyObject *mod = PyImport_ImportModule(calls[i].mod);   /* new */
        PyObject *f = mod ? PyObject_GetAttrString(mod, calls[i].name) : NULL;
        Py_XDECREF(mod);
        if (!f) {
            for (int j = 0; j < i; j++)
                Py_CLEAR(call_objs[j]);
            return -1;
        }
        call_objs[i] = f;   /* strong, for the life of the process */
    }
    return 0;
}

Var *gscalar_call(Capture *c, PyObject *fn, Var **args, int32_t nargs, PyObject *kwnames, int *handled)
{
    *handled = 0;
    int any = 0, symint = 0;
    for (int32_t i = 0; i < nargs; i++) {
        if (args[i] && args[i]->kind == VK_TENSOR)
            return NULL;   /* a tensor op: the graph scalar is one of its arguments */
        any |= args[i] && args[i]->kind == VK_GSCALAR;
        symint |= args[i] && args[i]->kind == VK_SYMINT && !sym_is_bool(args[i]->u.s.e);
    }
    if (!any && !symint)
        return NULL;
    for (int32_t i = 0; i < nargs; i++)
        if (args[i] && args[i]->kind == VK_GSCALAR && args[i]->u.gs.type == GS_NUMPY) {
            /* int(n), float(n), abs(n) of a numpy scalar: Python's result types differ from
             * numpy's; specialised on its value */
            Var **pinned = cap_alloc(c, sizeof(Var *) * (size_t)(nargs + 1));
            int all = pinned ? gscalar_pin_args(c, args, nargs, pinned, "a Python function needs its value") : -1;
            *handled = 1;
            if (all < 0)
                return NULL;
            if (!all)
                return fail_types(c, "a call", args, (int)nargs, "a numpy scalar with values known only at run time");
            return cap_fold_call(c, fn, pinned, nargs, kwnames);
        }
    if (calls_init() < 0) {
        *handled = 1;
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    int row = 0;
    while (row < NCALLS && call_objs[row] != fn)
        row++;
    if (row == NCALLS)
        return NULL;   /* not modelled: a use of its value breaks (DataDependentError) */
    if (!any && !calls[row].symint)
        return NULL;   /* symbolic ints only: the call's own (symbolic or specialising) handling */
    *handled = 1;
    if ((kwnames && PyTuple_GET_SIZE(kwnames)) || nargs != calls[row].nargs) {
        cap_fail(c, BR_UNSUPPORTED_CALL, "%s.%s() of a graph scalar with %d arguments", calls[row].mod, calls[row].name,
                 (int)nargs);
        return NULL;
    }
    int k[2] = {0, 0};
    for (int32_t i = 0; i < nargs; i++)
        if (!(k[i] = num_kind(args[i])))
            return fail_types(c, calls[row].name, args, (int)nargs, "an argument is not a number");
    const char *why = NULL;
    int nk = result_kind(calls[row].rule, k, args, (int)nargs, &why);
    if (!nk)
        return fail_types(c, calls[row].name, args, (int)nargs, why);
    /* float(f) and bool(b) are the value itself (torch records nothing either) */
    if (nargs == 1 && args[0]->kind == VK_GSCALAR &&
        ((calls[row].rule == R_FLOAT && nk == k[0] && !strcmp(calls[row].name, "float")) ||
         (calls[row].rule == R_BOOL && k[0] == NK_BOOL)))
        return args[0];
    PyObject *ta = text_of(c, args[0]), *tb = ta && nargs > 1 ? text_of(c, args[1]) : NULL;   /* new */
    PyObject *text = !ta         ? NULL
                     : nargs > 1 ? (tb ? PyUnicode_FromFormat("%s(%U, %U)", calls[row].name, ta, tb) : NULL)
                                 : PyUnicode_FromFormat("%s(%U)", calls[row].name, ta);
    Py_XDECREF(ta);
    Py_XDECREF(tb);
    return record_call(c, fn, args, (int)nargs, nk, text);
}

/* ------------------------------------------------------------- consumers ---- */

int gscalar_truth(Capture *c, Var *v, int *truth)
{
    if (v->u.gs.hint && v->u.gs.recipe && v->u.gs.ndeps == 1) {
        Var *d = v->u.gs.deps[0];
        int t = PyObject_IsTrue(v->u.gs.hint);
        PyObject *exp = t < 0 ? NULL : Py_BuildValue("(OOO)", v->u.gs.recipe, v->u.gs.text, t ? Py_True : Py_False);
        int r = exp ? guard_add_simple(c, GK_SCALAR_REL, d->src, exp) : -1;
        Py_XDECREF(exp);
        if (r < 0)
            return cap_fail_exc(c, BR_INTERNAL);
        *truth = t;
        return 0;
    }
    PyObject *h = gscalar_pin(c, v, "a branch needs its value");
    if (h) {
        *truth = PyObject_IsTrue(h);
        return *truth < 0 ? cap_fail_exc(c, BR_USER_EXCEPTION) : 0;
    }
    if (cap_failed(c))
        return -1;
    return cap_fail(c, BR_DATA_DEPENDENT,
                    "branching on %U, a %s computed in the graph (Tensor.item() under "
                    "capture_scalar_outputs); its value is data",
                    v->u.gs.text, v->u.gs.type == GS_BOOL ? "bool" : "float");
}

Var *gscalar_as_np_value(Capture *c, Var *v)
{
    if (!v || v->kind != VK_GSCALAR || v->u.gs.type != GS_NUMPY || !v->u.gs.hint)
        return v;
    TensorMeta m;
    const char *why = NULL;
    int r = meta_from_value(v->u.gs.hint, &m, NULL, &why);
    if (r < 0) {
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    if (r > 0 || !m.np_scalar)
        return v;   /* a dtype shapejit does not model: the caller's rules decide */
    Var *t = var_new(c, VK_TENSOR);
    if (!t)
        return NULL;
    t->u.t.value = v->u.gs.value;
    t->u.t.meta = m;
    return t;
}

PyObject *gscalar_standin(Capture *c, Var *v)
{
    if (v->u.gs.hint)
        return v->u.gs.hint;   /* its exact type (np.int64 promotes as an int64 in numpy) */
    if (v->u.gs.type == GS_BOOL)
        return Py_True;
    if (!standin_float && !(standin_float = PyFloat_FromDouble(1.0))) {
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    return standin_float;
}

int gscalar_pin_args(Capture *c, Var **args, int32_t n, Var **out, const char *why)
{
    for (int32_t i = 0; i < n; i++)
        if (!var_is_const(args[i]) && !(args[i]->kind == VK_GSCALAR && args[i]->u.gs.hint))
            return 0;
    for (int32_t i = 0; i < n; i++) {
        PyObject *h = args[i]->kind == VK_GSCALAR ? gscalar_pin(c, args[i], why) : NULL;
        out[i] = h ? var_const(c, h) : args[i];
        if (!out[i] || (args[i]->kind == VK_GSCALAR && !h))
            return -1;
    }
    return 1;
}

int gscalar_pin_hinted(Capture *c, Var **args, int32_t n, const char *why)
{
    int pinned = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!args[i] || args[i]->kind != VK_GSCALAR || !args[i]->u.gs.hint)
            continue;
        PyObject *h = gscalar_pin(c, args[i], why);
        Var *k = h ? var_const(c, h) : NULL;
        if (!k)
            return -1;
        args[i] = k;
        pinned++;
    }
    return pinned;
}
