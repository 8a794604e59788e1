/* The dtypes of generated kernels: which element types a kernel reads and writes, their C
 * types, and how each pointwise node types its operands (lower.def's kinds and columns).
 *
 * A node's computation type (CT) follows the graph's metas, which shapes/promote.c made
 * with torch's and numpy's promotion rules: the output dtype for LK_SAME / LK_SELECT (torch
 * casts every operand to the common dtype, numpy's loops run in the result type), the
 * common dtype of the two operands for comparisons, bool for logical ops. Python numbers
 * are converted to CT when the kernel is written; a number CT cannot hold exactly (2.5 for
 * an int CT, an int outside int32 for an int32 CT) keeps the node eager.
 *
 * Memory: no Python references are kept; the table is static. */
#include <math.h>
#include <string.h>

#include "lower_int.h"
#include "../shapes/promote.h"

static const LowerRow rows[OP_COUNT] = {
#define SJ_INF __builtin_inf()
#define X(op, nin, kind, cost, layout, f32, f64, i, b, p0, d0, p1, d1) \
    [op] = {nin, kind, cost, layout, {f32, f64, i, b}, {p0, p1}, {d0, d1}},
#include "lower.def"
#undef X
#undef SJ_INF
};

static const LowerRow *lower_row(OpId op)
{
    return (int)op >= 0 && op < OP_COUNT && rows[op].nin ? &rows[op] : NULL;
}

/* The kind column as lower.def spells it ("LK_SAME"), for _C._lower_rows only. */
static const char *const kind_spelling[OP_COUNT] = {
#define X(op, nin, kind, cost, layout, f32, f64, i, b, p0, d0, p1, d1) [op] = #kind,
#include "lower.def"
#undef X
};

PyObject *lower_py_rows(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    PyObject *list = PyList_New(0);    /* new */
    if (!list)
        return NULL;
    for (int op = 0; op < OP_COUNT; op++) {
        const LowerRow *r = lower_row((OpId)op);
        if (!r)
            continue;
        PyObject *t = Py_BuildValue("(sis(ssss)(ss)(dd))", op_info[op].name, r->nin, kind_spelling[op], r->expr[LC_F32],
                                    r->expr[LC_F64], r->expr[LC_INT], r->expr[LC_BOOL], r->pname[0], r->pname[1],
                                    r->pdefault[0], r->pdefault[1]);    /* new */
        if (!t || PyList_Append(list, t) < 0) {
            Py_XDECREF(t);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(t);
    }
    return list;
}

/* ---------------------------------------------------------------- dtypes ---- */

int lower_class(DType d)
{
    switch (d) {
    case DT_F32:
        return LC_F32;
    case DT_F64:
        return LC_F64;
    case DT_I64:
    case DT_I32:
        return LC_INT;
    case DT_BOOL:
        return LC_BOOL;
    default:
        return -1;
    }
}

int lower_dtype_ok(DType d)
{
    return lower_class(d) >= 0;
}

const char *lower_ctype(DType d)
{
    switch (d) {
    case DT_F32:
        return "float";
    case DT_F64:
        return "double";
    case DT_I64:
        return "int64_t";
    case DT_I32:
        return "int32_t";
    case DT_BOOL:
        return "uint8_t";
    default:
        return NULL;
    }
}

/* A tensor a kernel reads. requires_grad is the output's business (checked on the node's
 * result): under no_grad a node reads parameters that require grad and makes a plain
 * tensor, which a kernel makes as well. */
static int kernel_operand(const TensorMeta *m, Lib lib)
{
    return lower_dtype_ok((DType)m->dtype) && !m->symint && !m->np_scalar && m->lib == lib;
}

/* A tensor a kernel makes: no autograd history to record. */
static int kernel_tensor(const TensorMeta *m, Lib lib)
{
    return kernel_operand(m, lib) && !m->requires_grad;
}

/* A Python number usable as an operand (bool and int included, as eager promotes). */
static int is_number(PyObject *v)
{
    return PyFloat_Check(v) || PyLong_Check(v);
}

/* 1 when integer dtype d holds x exactly (an integral value in range). */
static int int_holds(DType d, double x)
{
    double lo = d == DT_I32 ? -2147483648.0 : -9223372036854775808.0;
    return x == floor(x) && x >= lo && x < -lo;
}

/* 1 when the Python number v converts to ct as eager converts it (the kernel spells it as
 * ct). An int reaches an int type as an integer (never through a double); one outside
 * int32 for an int32 CT stays eager (torch wraps it, numpy raises: eager does either). A
 * float type takes an int through a double, so an int a double cannot hold exactly (past
 * 2**53) stays eager: converting it twice could round differently from eager's once. */
static int const_fits(PyObject *v, DType ct, LowerKind kind)
{
    int overflow = 0;
    long long x = 0;
    if (PyLong_Check(v)) {
        x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (x == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
    }
    if (kind == LK_LOGIC)
        return 1;
    if (lower_class(ct) == LC_F32 || lower_class(ct) == LC_F64) {
        if (PyLong_Check(v))
            return !overflow && x >= -(1LL << 53) && x <= (1LL << 53);
        double d = PyFloat_AsDouble(v);
        if (d == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
        return 1;
    }
    if (ct == DT_BOOL)
        return PyBool_Check(v);
    if (PyFloat_Check(v))   /* masked_fill's value, a clamp bound: cast to the tensor's int type */
        return int_holds(ct, PyFloat_AS_DOUBLE(v));
    if (!PyLong_Check(v))
        return 0;
    return !overflow && (ct == DT_I64 || (x >= INT32_MIN && x <= INT32_MAX));
}

/* Parameters a schema may bind that change nothing here when passed as their default. */
static int harmless(const char *name, PyObject *v)
{
    return v == Py_None || !strcmp(name, "square_fast_path") || !strcmp(name, "default_order") ||
           (!strcmp(name, "inplace") && v == Py_False) ||
           (!strcmp(name, "approximate") && PyUnicode_Check(v) && PyUnicode_CompareWithASCIIString(v, "none") == 0);
}

/* Parameters of a cast its output meta already accounts for (the target dtype, a device
 * the rule accepted, copy flags); a layout request other than the default stays eager. */
static int cast_param(const char *name, const BoundArg *ba)
{
    if (!strcmp(name, "args")) {
        if (ba->kind != BA_LIST)
            return 0;
        for (int i = 0; i < ba->n; i++)
            if (ba->items[i].kind != BA_CONST || ba->items[i].sym || ba->items[i].data)
                return 0;
        return 1;
    }
    if (ba->kind != BA_CONST || ba->sym || ba->data)
        return 0;
    static const char *const any[] = {"fixed_dtype",  "dtype", "require_dtype", "device",
                                      "non_blocking", "copy",  "casting"};
    for (size_t i = 0; i < sizeof any / sizeof any[0]; i++)
        if (!strcmp(name, any[i]))
            return 1;
    if (!strcmp(name, "subok"))
        return ba->value == Py_True;
    if (!strcmp(name, "order"))
        return PyUnicode_Check(ba->value) && (PyUnicode_CompareWithASCIIString(ba->value, "K") == 0 ||
                                              PyUnicode_CompareWithASCIIString(ba->value, "C") == 0);
    return 0;
}

/* F.gelu(x, approximate='tanh') as its formula, per float class: the kernel's form of
 * the row's erf form, so such a gelu after a matmul whose oneDNN post-op would be slow
 * (step_matmul.c) is a kernel instead of an eager step. Spelled as torch's CPU kernel
 * computes it, with kBeta = sqrt(2) * 2 / sqrt(pi) / 2. */
static const char *const gelu_tanh_expr[LC_COUNT] = {
    "0.5f * a * (1.f + tanhf(0.7978845608028654f * (a + 0.044715f * (a * a * a))))",
    "0.5 * a * (1. + tanh(0.7978845608028654 * (a + 0.044715 * (a * a * a))))",
    "",
    "",
};

/* 1 when name/value is gelu's approximate='tanh'. */
static int gelu_tanh_param(const Node *nd, const char *name, const BoundArg *ba)
{
    return nd->op == OP_GELU && !strcmp(name, "approximate") && ba->kind == BA_CONST && PyUnicode_Check(ba->value) &&
           PyUnicode_CompareWithASCIIString(ba->value, "tanh") == 0;
}

/* The operand slot a schema name binds: 0 a, 1 b, 2 c, -1 none. */
static int operand_slot(const char *name, int nin)
{
    if (!strcmp(name, "input"))
        return 0;
    if (nin >= 2 && (!strcmp(name, "other") || !strcmp(name, "value")))
        return 1;
    if (nin == 3 && (!strcmp(name, "condition") || !strcmp(name, "mask")))
        return 2;
    return -1;
}

/* ----------------------------------------------------------------- nodes ---- */

int lower_node_typed(Graph *g, int32_t ni, NodeLower *nl)
{
    const Node *nd = &g->nodes[ni];
    if (nd->op == OP_INPUT || nd->nout != 1 || (nd->flags & NODE_INPLACE))
        return 1;
    const LowerRow *row = lower_row((OpId)nd->op);
    const TensorMeta *om = &g->values[nd->first_value].meta;
    Lib lib = (Lib)om->lib;
    if (!row || !kernel_tensor(om, lib) || om->ndim > SJ_MAX_RANK)
        return 1;
    NodeArgs na;
    if (lower_bind_node(g, ni, &na))
        return 1;
    memset(nl, 0, sizeof *nl);
    nl->row = row;
    nl->out = (DType)om->dtype;
    nl->p[0] = row->pdefault[0];
    nl->p[1] = row->pdefault[1];
    const BoundArg *bx[3] = {NULL, NULL, NULL};
    int pgiven[2] = {0, 0}, tanh_form = 0;
    for (int i = 0; i < na.bound.n; i++) {
        const BoundArg *ba = &na.bound.args[i];
        if (ba->kind == BA_ABSENT)
            continue;
        const char *name = na.bound.names[i];
        const Arg *x = na.src[i];
        int slot = operand_slot(name, row->nin);
        if (slot >= 0) {
            if (!x || bx[slot])
                return 1;
            if (ba->kind == BA_TENSOR
                    ? !kernel_operand(ba->meta, lib) || ba->meta->ndim > om->ndim
                    : ba->kind != BA_CONST || ba->sym || ba->data || !is_number(ba->value) || slot == 2)
                return 1;
            bx[slot] = ba;
            nl->x[slot] = x;
            continue;
        }
        int pi = row->pname[0][0] && !strcmp(name, row->pname[0])   ? 0
                 : row->pname[1][0] && !strcmp(name, row->pname[1]) ? 1
                                                                    : -1;
        if (pi >= 0) {
            if (ba->kind != BA_CONST || ba->sym || ba->data || (!is_number(ba->value) && ba->value != Py_None))
                return 1;
            if (ba->value != Py_None) {
                nl->pv[pi] = ba->value;
                nl->p[pi] = PyFloat_AsDouble(ba->value);
                if (nl->p[pi] == -1.0 && PyErr_Occurred()) {
                    PyErr_Clear();
                    return 1;
                }
                pgiven[pi] = 1;
            }
            continue;
        }
        if (gelu_tanh_param(nd, name, ba)) {
            tanh_form = 1;
            continue;
        }
        if (nd->op == OP_CAST ? !cast_param(name, ba) : ba->kind != BA_CONST || !harmless(name, ba->value))
            return 1;
    }
    if (!bx[0] || (row->nin >= 2 && !bx[1]) || (row->nin == 3 && !bx[2]))
        return 1;
    /* the computation type */
    switch (row->kind) {
    case LK_SAME:
    case LK_SELECT:
        nl->ct = nl->out;
        break;
    case LK_LOGIC:
        nl->ct = DT_BOOL;
        break;
    case LK_CMP: {
        ShapeErr err;
        DType ct;
        if (promote_args(lib, bx, row->nin, 0, &ct, NULL, &err) < 0 || !lower_dtype_ok(ct))
            return 1;
        nl->ct = ct;
        break;
    }
    }
    if ((row->kind == LK_CMP || row->kind == LK_LOGIC) && nl->out != DT_BOOL)
        return 1;
    /* a cast to the same dtype may return its input itself: eager keeps that identity */
    if (nd->op == OP_CAST && (bx[0]->kind != BA_TENSOR || bx[0]->meta->dtype == nl->out))
        return 1;
    nl->expr = tanh_form ? gelu_tanh_expr[lower_class(nl->ct)] : row->expr[lower_class(nl->ct)];
    if (!nl->expr[0])
        return 1;
    for (int s = 0; s < 2; s++)
        if (bx[s] && bx[s]->kind == BA_CONST && !const_fits(bx[s]->value, nl->ct, row->kind))
            return 1;
    if (nd->op == OP_CLAMP && lower_class(nl->ct) != LC_INT && lower_class(nl->ct) != LC_BOOL) {
        /* sj_clamp keeps `a` where it equals a bound (torch, and numpy's clip with both
         * bounds). A NaN bound makes every element NaN in eager; numpy's clip with one
         * bound is maximum/minimum, which gives the bound on a tie of -0.0 and 0.0: such
         * nodes stay eager. */
        for (int pi = 0; pi < 2; pi++)
            if (pgiven[pi] && (isnan(nl->p[pi]) || (lib == LIB_NUMPY && !pgiven[1 - pi] && nl->p[pi] == 0)))
                return 1;
    }
    for (int pi = 0; pi < 2; pi++) {
        if (pgiven[pi] && !const_fits(nl->pv[pi], nl->ct, LK_SAME))
            return 1;
        if (!pgiven[pi] && lower_class(nl->ct) == LC_INT && isinf(nl->p[pi]))   /* an absent bound: T's limit */
            nl->p[pi] = nl->p[pi] > 0 ? (nl->ct == DT_I32 ? 2147483647.0 : 9223372036854775807.0)
                                      : (nl->ct == DT_I32 ? -2147483648.0 : -9223372036854775808.0);
    }
    return 0;
}
