/* Reading a serialised graph back (the format: serial.c). Never imports torch or numpy:
 * library objects come back as GraphRef objects. Every index the text gives is checked, so
 * a malformed text is a ValueError naming the line, never a graph that crashes later. */
#include "serial_int.h"
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "../shapes/sym.h"
#include "../vocab/callables.h"
#include "../core/errors.h"

/* ---------------------------------------------------------------- reader ---- */

typedef struct {
    const char *p, *eol, *end;   /* cursor, end of the current line, end of the text */
    int line;                    /* 1-based number of the current line */
    int32_t nconsts, nvalues, npool, nnodes;
} Rd;

/* ValueError "shapejit graph text, line N: <message>"; returns -1. */
static int rd_fail(Rd *r, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    PyErr_Format(PyExc_ValueError, "shapejit graph text, line %d: %s", r->line, msg);
    return -1;
}

/* An error of a function the reader called, made a ValueError naming the line. */
static int rd_wrap(Rd *r)
{
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyObject *s = v ? PyObject_Str(v) : NULL;
    const char *m = s ? PyUnicode_AsUTF8(s) : NULL;
    sj_err_clear();
    rd_fail(r, "%s", m ? m : "invalid value");
    Py_XDECREF(s);
    Py_XDECREF(t);
    Py_XDECREF(v);
    Py_XDECREF(tb);
    return -1;
}

/* What follows the cursor, for messages (at most 24 characters of the line). */
static const char *rd_here(Rd *r, char *buf, size_t n)
{
    size_t k = (size_t)(r->eol - r->p);
    if (k == 0)
        return "the end of the line";
    if (k > n - 3)
        k = n - 3;
    buf[0] = '\'';
    memcpy(buf + 1, r->p, k);
    buf[k + 1] = '\'';
    buf[k + 2] = 0;
    return buf;
}

static int rd_expected(Rd *r, const char *what)
{
    char here[32];
    return rd_fail(r, "expected %s, found %s", what, rd_here(r, here, sizeof here));
}

static int rd_next(Rd *r, const char *what)
{
    if (r->eol >= r->end)
        return r->line++, rd_fail(r, "the text ends before %s (truncated)", what);
    r->p = r->line ? r->eol + 1 : r->p;
    if (r->p > r->end)
        r->p = r->end;
    r->line++;
    const char *nl = memchr(r->p, '\n', (size_t)(r->end - r->p));
    r->eol = nl ? nl : r->end;
    if (r->p == r->end)
        return rd_fail(r, "the text ends before %s (truncated)", what);
    return 0;
}

static void rd_skip(Rd *r)
{
    while (r->p < r->eol && *r->p == ' ')
        r->p++;
}

static int rd_eol(Rd *r)
{
    rd_skip(r);
    return r->p == r->eol ? 0 : rd_expected(r, "the end of the line");
}

static int is_word_char(char c)
{
    return c > ' ' && c < 0x7f && c != '(' && c != ')' && c != '=' && c != ',' && c != '[' && c != ']' && c != '"' &&
           c != ':';
}

/* A bare word into buf (NUL-terminated); 0 or -1. */
static int rd_word(Rd *r, char *buf, size_t n, const char *what)
{
    rd_skip(r);
    size_t k = 0;
    while (r->p + k < r->eol && is_word_char(r->p[k]))
        k++;
    if (k == 0 || k >= n)
        return rd_expected(r, what);
    memcpy(buf, r->p, k);
    buf[k] = 0;
    r->p += k;
    return 0;
}

static int rd_lit(Rd *r, const char *lit)
{
    rd_skip(r);
    size_t k = strlen(lit);
    if ((size_t)(r->eol - r->p) < k || memcmp(r->p, lit, k) != 0) {
        char what[64];
        snprintf(what, sizeof what, "'%s'", lit);
        return rd_expected(r, what);
    }
    r->p += k;
    return 0;
}

static int rd_i64(Rd *r, int64_t *out, const char *what)
{
    rd_skip(r);
    const char *q = r->p;
    int neg = q < r->eol && *q == '-';
    q += neg;
    uint64_t v = 0;
    if (q >= r->eol || *q < '0' || *q > '9')
        return rd_expected(r, what);
    for (; q < r->eol && *q >= '0' && *q <= '9'; q++) {
        if (v > (UINT64_MAX - 9) / 10)
            return rd_fail(r, "%s out of range", what);
        v = v * 10 + (uint64_t)(*q - '0');
    }
    if (v > (uint64_t)INT64_MAX)
        return rd_fail(r, "%s out of range", what);
    *out = neg ? -(int64_t)v : (int64_t)v;
    r->p = q;
    return 0;
}

static int rd_i32(Rd *r, int32_t *out, int64_t lo, int64_t hi, const char *what)
{
    int64_t v;
    if (rd_i64(r, &v, what) < 0)
        return -1;
    if (v < lo || v > hi)
        return rd_fail(r, "%s %lld is out of range [%lld, %lld]", what, (long long)v, (long long)lo, (long long)hi);
    *out = (int32_t)v;
    return 0;
}

/* " key=<int>" */
static int rd_key(Rd *r, const char *key, int32_t *out, int64_t lo, int64_t hi)
{
    char lit[48];
    snprintf(lit, sizeof lit, "%s=", key);
    return rd_lit(r, lit) < 0 ? -1 : rd_i32(r, out, lo, hi, key);
}

/* " key=<a>,<n>": a pool or value range inside [0, limit] (a is free when n is 0). */
static int rd_range(Rd *r, const char *key, int32_t *a, int32_t *n, int32_t limit, int allow_none)
{
    char lit[48];
    snprintf(lit, sizeof lit, "%s=", key);
    if (rd_lit(r, lit) < 0 || rd_i32(r, a, -1, INT32_MAX, key) < 0 || rd_lit(r, ",") < 0 ||
        rd_i32(r, n, 0, INT32_MAX, key) < 0)
        return -1;
    if (*a == -1 && *n == 0 && allow_none)
        return 0;
    if (*n > 0 && (*a < 0 || (int64_t)*a + *n > limit))
        return rd_fail(r, "%s range %d,%d runs outside [0, %d)", key, (int)*a, (int)*n, (int)limit);
    return 0;
}

static int rd_bound(Rd *r, int64_t *out)
{
    rd_skip(r);
    if ((size_t)(r->eol - r->p) >= 2 && memcmp(r->p, "oo", 2) == 0) {
        r->p += 2;
        *out = SYM_INT_OO;
        return 0;
    }
    if ((size_t)(r->eol - r->p) >= 3 && memcmp(r->p, "-oo", 3) == 0) {
        r->p += 3;
        *out = SYM_NEG_INT_OO;
        return 0;
    }
    return rd_i64(r, out, "a range bound");
}

static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* A quoted string: new str. */
static PyObject *rd_string(Rd *r)
{
    rd_skip(r);
    if (r->p >= r->eol || *r->p != '"')
        return rd_expected(r, "a quoted string"), NULL;
    const char *q = r->p + 1;
    Py_UCS4 *buf = PyMem_Malloc(((size_t)(r->eol - q) + 1) * sizeof(Py_UCS4));
    size_t n = 0;
    if (!buf)
        return PyErr_NoMemory();
    for (;;) {
        if (q >= r->eol) {
            PyMem_Free(buf);
            r->p = q;
            return rd_fail(r, "a string is not closed"), NULL;
        }
        char c = *q++;
        if (c == '"')
            break;
        if ((unsigned char)c < 0x20 || (unsigned char)c >= 0x7f) {
            PyMem_Free(buf);
            return rd_fail(r, "a string holds the raw byte 0x%02x (write it escaped)", (unsigned char)c), NULL;
        }
        if (c != '\\') {
            buf[n++] = (Py_UCS4)c;
            continue;
        }
        char e = q < r->eol ? *q++ : 0;
        int digits = e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (e == 'n' || e == 't' || e == '"' || e == '\\') {
            buf[n++] = e == 'n' ? '\n' : e == 't' ? '\t' : (Py_UCS4)e;
            continue;
        }
        uint32_t v = 0;
        int ok = digits > 0 && r->eol - q >= digits;
        for (int i = 0; ok && i < digits; i++) {
            int h = hexval(q[i]);
            ok = h >= 0;
            v = v * 16 + (uint32_t)(h < 0 ? 0 : h);
        }
        if (!ok || v > 0x10ffff) {
            PyMem_Free(buf);
            return rd_fail(r, "a string holds a bad escape"), NULL;
        }
        q += digits;
        buf[n++] = v;
    }
    r->p = q;
    PyObject *s = PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, buf, (Py_ssize_t)n);
    PyMem_Free(buf);
    return s;
}

static PyObject *rd_const(Rd *r, int depth);

/* Items up to ')' (consumed), or up to a "key=" when stop_at_key: a new list. */
static PyObject *rd_items(Rd *r, int depth, int stop_at_key)
{
    PyObject *items = PyList_New(0);
    while (items) {
        rd_skip(r);
        if (r->p < r->eol && *r->p == ')') {
            r->p++;
            break;
        }
        if (stop_at_key) {
            const char *q = r->p;
            while (q < r->eol && is_word_char(*q))
                q++;
            if (q > r->p && q < r->eol && *q == '=')
                break;
        }
        if (r->p >= r->eol) {
            rd_expected(r, "a constant or ')'");
            Py_CLEAR(items);
            break;
        }
        PyObject *it = rd_const(r, depth + 1);
        if (!it || PyList_Append(items, it) < 0)
            Py_CLEAR(items);
        Py_XDECREF(it);
    }
    return items;
}

static PyObject *rd_fromhex(Rd *r)
{
    PyObject *s = rd_string(r);
    PyObject *f = s ? PyObject_CallMethod((PyObject *)&PyFloat_Type, "fromhex", "O", s) : NULL;
    if (s && !f)
        rd_wrap(r);
    Py_XDECREF(s);
    return f;
}

/* (ref <kind> <data...> [repr="..."] [name="..."]) after "(ref", at least one of repr= and
 * name=: a new GraphRef. */
static PyObject *rd_ref(Rd *r, int depth)
{
    char kw[64];
    if (rd_word(r, kw, sizeof kw, "a reference kind") < 0)
        return NULL;
    int kind = serial_ref_kind(kw);
    if (kind < 0)
        return rd_fail(r, "unknown reference kind '%s'", kw), NULL;
    PyObject *items = rd_items(r, depth, 1), *data = NULL, *repr = NULL, *name = NULL, *res = NULL;
    if (!items)
        return NULL;
    data = PyList_AsTuple(items);
    Py_DECREF(items);
    if (!data)
        return NULL;
    if (serial_ref_ndata[kind] >= 0 && PyTuple_GET_SIZE(data) != serial_ref_ndata[kind]) {
        rd_fail(r, "a %s reference takes %d data items, not %zd", kw, serial_ref_ndata[kind], PyTuple_GET_SIZE(data));
        goto done;
    }
    if (kind == RK_ROW) {
        PyObject *path = PyTuple_GET_ITEM(data, 0);
        const char *ps = PyUnicode_Check(path) ? PyUnicode_AsUTF8(path) : NULL;
        if (!ps || callables_path_row(ps) < 0) {
            sj_err_clear();
            rd_fail(r, "unknown callables row path %s", ps ? ps : "(not a string)");
            goto done;
        }
    }
    rd_skip(r);
    if (r->p < r->eol && *r->p == 'r' && (rd_lit(r, "repr=") < 0 || !(repr = rd_string(r))))
        goto done;
    rd_skip(r);
    if (r->p < r->eol && *r->p == 'n' && (rd_lit(r, "name=") < 0 || !(name = rd_string(r))))
        goto done;
    if (!repr && !name) {
        rd_expected(r, "repr= or name=");
        goto done;
    }
    if (rd_lit(r, ")") < 0)
        goto done;
    res = serial_ref_new(kw, data, repr, name);
done:
    Py_XDECREF(data);
    Py_XDECREF(repr);
    Py_XDECREF(name);
    return res;
}

static PyObject *rd_tagged(Rd *r, int depth)
{
    char tag[16];
    if (rd_word(r, tag, sizeof tag, "a constant tag") < 0)
        return NULL;
    if (!strcmp(tag, "ref"))
        return rd_ref(r, depth);
    if (!strcmp(tag, "float") || !strcmp(tag, "complex") || !strcmp(tag, "bytes")) {
        PyObject *res = NULL;
        if (tag[0] == 'f')
            res = rd_fromhex(r);
        else if (tag[0] == 'c') {
            PyObject *re = rd_fromhex(r), *im = re ? rd_fromhex(r) : NULL;
            res = im ? PyComplex_FromDoubles(PyFloat_AS_DOUBLE(re), PyFloat_AS_DOUBLE(im)) : NULL;
            Py_XDECREF(re);
            Py_XDECREF(im);
        } else {
            PyObject *s = rd_string(r), *ba = s ? PyImport_ImportModule("binascii") : NULL;
            res = ba ? PyObject_CallMethod(ba, "a2b_base64", "O", s) : NULL;
            if (ba && !res)
                rd_wrap(r);
            Py_XDECREF(s);
            Py_XDECREF(ba);
        }
        if (res && rd_lit(r, ")") < 0)
            Py_CLEAR(res);
        return res;
    }
    int k = !strcmp(tag, "tuple")   ? 0
            : !strcmp(tag, "list")  ? 1
            : !strcmp(tag, "slice") ? 2
            : !strcmp(tag, "range") ? 3
                                    : -1;
    if (k < 0)
        return rd_fail(r, "unknown constant tag '%s'", tag), NULL;
    PyObject *items = rd_items(r, depth, 0), *res = NULL;
    if (!items)
        return NULL;
    if (k == 1)
        return items;
    if (k >= 2 && PyList_GET_SIZE(items) != 3)
        rd_fail(r, "a %s takes 3 items, not %zd", tag, PyList_GET_SIZE(items));
    else if (k == 0)
        res = PyList_AsTuple(items);
    else if (k == 2)
        res = PySlice_New(PyList_GET_ITEM(items, 0), PyList_GET_ITEM(items, 1), PyList_GET_ITEM(items, 2));
    else {
        for (int i = 0; i < 3; i++)
            if (!PyLong_CheckExact(PyList_GET_ITEM(items, i))) {
                Py_DECREF(items);
                return rd_fail(r, "a range takes 3 integers"), NULL;
            }
        res = PyObject_CallFunctionObjArgs((PyObject *)&PyRange_Type, PyList_GET_ITEM(items, 0),
                                           PyList_GET_ITEM(items, 1), PyList_GET_ITEM(items, 2), NULL);
        if (!res)
            rd_wrap(r);
    }
    Py_DECREF(items);
    return res;
}

/* One constant: a new reference. */
static PyObject *rd_const(Rd *r, int depth)
{
    rd_skip(r);
    if (depth > MAX_DEPTH)
        return rd_fail(r, "constants nest deeper than %d", MAX_DEPTH), NULL;
    if (r->p >= r->eol)
        return rd_expected(r, "a constant"), NULL;
    char c = *r->p;
    if (c == '"')
        return rd_string(r);
    if (c == '(') {
        r->p++;
        return rd_tagged(r, depth);
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        const char *q = r->p + (c == '-');
        while (q < r->eol && *q >= '0' && *q <= '9')
            q++;
        size_t k = (size_t)(q - r->p);
        if (k == (size_t)(c == '-') || (q < r->eol && is_word_char(*q)))
            return rd_expected(r, "an integer"), NULL;
        char *tmp = PyMem_Malloc(k + 1);
        if (!tmp)
            return PyErr_NoMemory();
        memcpy(tmp, r->p, k);
        tmp[k] = 0;
        PyObject *v = PyLong_FromString(tmp, NULL, 10);
        PyMem_Free(tmp);
        if (!v)
            return rd_wrap(r), NULL;
        r->p = q;
        return v;
    }
    char w[16];
    if (rd_word(r, w, sizeof w, "a constant") < 0)
        return NULL;
    if (!strcmp(w, "None"))
        return Py_NewRef(Py_None);
    if (!strcmp(w, "True") || !strcmp(w, "False"))
        return Py_NewRef(w[0] == 'T' ? Py_True : Py_False);
    if (!strcmp(w, "Ellipsis"))
        return Py_NewRef(Py_Ellipsis);
    return rd_fail(r, "unknown constant '%s'", w), NULL;
}

/* ------------------------------------------------------- reading records ---- */

static int rd_expr(Rd *r, SymEnv *env, SymNode **ex, int32_t id, int64_t *nsym)
{
    char kw[32];
    int32_t got;
    if (rd_lit(r, "expr") < 0 || rd_i32(r, &got, id, id, "expression id") < 0 ||
        rd_word(r, kw, sizeof kw, "an expression kind") < 0)
        return -1;
    int kind = -1;
    for (int k = 0; k < SK_COUNT; k++)
        if (!strcmp(sym_kind_name((SymKind)k), kw))
            kind = k;
    if (kind < 0)
        return rd_fail(r, "unknown expression kind '%s'", kw);
    int64_t v = 0, hint = 0;
    SymRange rg = {0, 0};
    SymNode *e = NULL;
    if (kind == SK_SYMBOL || kind == SK_UNBACKED) {
        if (rd_i64(r, &v, "symbol number") < 0 || (kind == SK_SYMBOL && rd_i64(r, &hint, "hint") < 0) ||
            rd_bound(r, &rg.lo) < 0 || rd_bound(r, &rg.hi) < 0)
            return -1;
        if (v != nsym[kind == SK_UNBACKED])
            return rd_fail(r, "symbol %c%lld out of order (expected %c%lld)", kind == SK_SYMBOL ? 's' : 'u',
                           (long long)v, kind == SK_SYMBOL ? 's' : 'u', (long long)nsym[kind == SK_UNBACKED]);
        nsym[kind == SK_UNBACKED]++;
        e = kind == SK_SYMBOL ? sym_symbol(env, hint, rg) : sym_unbacked(env, rg);
    } else if (kind == SK_CONST || kind == SK_BOOL) {
        if (rd_i64(r, &v, "a value") < 0)
            return -1;
        if (kind == SK_BOOL && v != 0 && v != 1)
            return rd_fail(r, "a Boolean is 0 or 1");
        e = kind == SK_CONST ? sym_const(env, v) : sym_bool(env, (int)v);
    } else {
        SymNode *args[64];
        uint32_t n = 0;
        for (rd_skip(r); r->p < r->eol; rd_skip(r)) {
            int32_t a;
            if (n == 64)
                return rd_fail(r, "more than 64 operands");
            if (rd_i32(r, &a, 0, id - 1, "operand id") < 0)
                return -1;
            args[n++] = ex[a];
        }
        e = sym_node_raw(env, (SymKind)kind, args, n);
    }
    if (!e)
        return rd_wrap(r);
    ex[id] = e;
    return rd_eol(r);
}

static int rd_value(Rd *r, Graph *g, SymNode **ex, int32_t nex, int32_t v)
{
    Value *val = &g->values[v];
    TensorMeta *m = &val->meta;
    char w[32];
    int32_t got, flag;
    if (rd_lit(r, "value") < 0 || rd_i32(r, &got, v, v, "value id") < 0 ||
        rd_i32(r, &val->node, 0, r->nnodes - 1, "defining node") < 0 ||
        rd_i32(r, &val->index, 0, INT32_MAX, "output index") < 0 || rd_word(r, w, sizeof w, "torch or numpy") < 0)
        return -1;
    if (strcmp(w, "torch") && strcmp(w, "numpy"))
        return rd_fail(r, "unknown library '%s'", w);
    m->lib = w[0] == 't' ? LIB_TORCH : LIB_NUMPY;
    if (rd_word(r, w, sizeof w, "a dtype") < 0)
        return -1;
    int dt = -1;
    for (int d = 0; d < DT_COUNT; d++)
        if (!strcmp(dtype_info[d].name, w))
            dt = d;
    if (dt < 0)
        return rd_fail(r, "unknown dtype '%s'", w);
    m->dtype = (unsigned char)dt;
    if (rd_lit(r, "[") < 0)
        return -1;
    rd_skip(r);
    if (r->p < r->eol && *r->p == ']')
        r->p++;
    else
        for (;;) {
            if (m->ndim == SJ_MAX_RANK)
                return rd_fail(r, "more than %d dims", SJ_MAX_RANK);
            rd_skip(r);
            if (r->p < r->eol && *r->p == 'e') {
                int32_t id;
                r->p++;
                if (rd_i32(r, &id, 0, nex - 1, "expression id") < 0 || rd_lit(r, ":") < 0)
                    return -1;
                m->sym[m->ndim] = ex[id];
                if (sym_is_bool(ex[id]))
                    return rd_fail(r, "a dim's size is the boolean expression e%d", (int)id);
            }
            int64_t size;
            if (rd_i64(r, &size, "a size") < 0)
                return -1;
            m->size[m->ndim++] = size;
            rd_skip(r);
            if (r->p < r->eol && *r->p == ']') {
                r->p++;
                break;
            }
            if (rd_lit(r, ",") < 0)
                return -1;
        }
    if (rd_key(r, "np_scalar", &flag, 0, 1) < 0)
        return -1;
    m->np_scalar = (unsigned char)flag;
    if (rd_key(r, "requires_grad", &flag, 0, 1) < 0)
        return -1;
    m->requires_grad = (unsigned char)flag;
    if (rd_key(r, "symint", &flag, 0, 1) < 0)
        return -1;
    m->symint = (unsigned char)flag;
    return rd_eol(r);
}

static int rd_pool(Rd *r, Graph *g, int32_t i)
{
    Arg *a = &g->pool[i];
    char w[16];
    int32_t got;
    if (rd_lit(r, "pool") < 0 || rd_i32(r, &got, i, i, "pool index") < 0 ||
        rd_word(r, w, sizeof w, "an argument kind") < 0)
        return -1;
    int kind = -1;
    for (int k = 0; k <= ARG_ABSENT; k++)
        if (!strcmp(serial_arg_kind_names[k], w))
            kind = k;
    if (kind < 0)
        return rd_fail(r, "unknown argument kind '%s'", w);
    a->kind = (uint8_t)kind;
    if (rd_i32(r, &a->a, INT32_MIN, INT32_MAX, "argument") < 0 || rd_i32(r, &a->n, 0, INT32_MAX, "item count") < 0)
        return -1;
    if ((kind == ARG_VALUE && (a->a < 0 || a->a >= r->nvalues)) ||
        (kind == ARG_CONST && (a->a < 0 || a->a >= r->nconsts)))
        return rd_fail(r, "%s %d out of range", w, (int)a->a);
    if ((kind == ARG_LIST || kind == ARG_TUPLE) && a->n > 0 && (a->a < 0 || (int64_t)a->a + a->n > r->npool))
        return rd_fail(r, "%s items %d,%d run outside the pool", w, (int)a->a, (int)a->n);
    return rd_eol(r);
}

/* A constant index that must be a tuple of strs (kwnames) of length n, a where tuple, or a
 * str; -1 allowed when may_be_none. */
enum { C_ANY, C_STR, C_KWNAMES, C_WHERE };

static int rd_const_ref(Rd *r, Graph *g, const char *key, int32_t *out, int may_be_none, int want, int32_t n)
{
    if (rd_key(r, key, out, -1, r->nconsts - 1) < 0)
        return -1;
    if (*out < 0)
        return may_be_none ? 0 : rd_fail(r, "%s=-1 where a constant is needed", key);
    PyObject *c = PyList_GET_ITEM(g->consts, *out);
    int ok = 1;
    if (want == C_STR)
        ok = PyUnicode_Check(c);
    else if (want == C_KWNAMES) {
        ok = PyTuple_CheckExact(c) && PyTuple_GET_SIZE(c) == n;
        for (Py_ssize_t i = 0; ok && i < n; i++)
            ok = PyUnicode_Check(PyTuple_GET_ITEM(c, i));
    } else if (want == C_WHERE)
        ok = PyTuple_CheckExact(c) && PyTuple_GET_SIZE(c) == 4 && PyUnicode_Check(PyTuple_GET_ITEM(c, 0)) &&
             PyUnicode_Check(PyTuple_GET_ITEM(c, 3));
    if (!ok)
        return rd_fail(r, "%s=%d is not %s", key, (int)*out,
                       want == C_STR       ? "a str"
                       : want == C_KWNAMES ? "a tuple of as many strs as keyword arguments"
                                           : "a (file, line, function, text) tuple");
    return 0;
}

static int rd_node(Rd *r, Graph *g, int32_t ni)
{
    Node *nd = &g->nodes[ni];
    char w[64];
    int32_t got, flags;
    if (rd_lit(r, "node") < 0 || rd_i32(r, &got, ni, ni, "node index") < 0 || rd_word(r, w, sizeof w, "an op name") < 0)
        return -1;
    int op = strcmp(w, "input") == 0 ? OP_INPUT : -1;
    for (int k = 0; k < OP_COUNT && op < 0; k++)
        if (!strcmp(op_info[k].name, w))
            op = k;
    if (op < 0)
        return rd_fail(r, "unknown op '%s'", w);
    nd->op = (uint16_t)op;
    if (rd_key(r, "flags", &flags, 0, 255) < 0)
        return -1;
    nd->flags = (uint8_t)flags;
    if (rd_const_ref(r, g, "target", &nd->target, op == OP_INPUT, C_ANY, 0) < 0 ||
        rd_range(r, "args", &nd->args, &nd->nargs, r->npool, 0) < 0 ||
        rd_range(r, "kw", &nd->kwargs, &nd->nkw, r->npool, 0) < 0 ||
        rd_const_ref(r, g, "kwnames", &nd->kwnames, nd->nkw == 0, C_KWNAMES, nd->nkw) < 0 ||
        rd_range(r, "out", &nd->first_value, &nd->nout, r->nvalues, 0) < 0 ||
        rd_const_ref(r, g, "where", &nd->where, 1, C_WHERE, 0) < 0 ||
        rd_const_ref(r, g, "source", &nd->source, op != OP_INPUT, C_STR, 0) < 0 || rd_lit(r, "row=") < 0 ||
        rd_word(r, w, sizeof w, "a callables path or -") < 0)
        return -1;
    nd->row = -1;
    if (strcmp(w, "-")) {
        int k = 0;
        char *hash = strchr(w, '#');
        if (hash) {
            k = atoi(hash + 1);
            *hash = 0;
        }
        for (int i = 0; i < callable_nrows && nd->row < 0; i++)
            if (!strcmp(callable_rows[i].path, w) && k-- == 0)
                nd->row = (int16_t)i;
        if (nd->row < 0)
            return rd_fail(r, "unknown callables row path '%s'", w);
    }
    if (rd_range(r, "bound", &nd->bound, &nd->nbound, r->npool, 1) < 0)
        return -1;
    if (nd->nout > 0 && nd->first_value < 0)
        return rd_fail(r, "out range without a first value");
    if (op == OP_INPUT && nd->nout != 1)
        return rd_fail(r, "an input defines one value");
    return rd_eol(r);
}

static int rd_ids(Rd *r, const char *tag, int32_t *ids, int32_t n)
{
    if (rd_lit(r, tag) < 0)
        return -1;
    for (int32_t i = 0; i < n; i++)
        if (rd_i32(r, &ids[i], 0, r->nvalues - 1, "value id") < 0)
            return -1;
    return rd_eol(r);
}

/* ------------------------------------------------------------ validation ---- */

/* What the runner, the printer and the backends take for granted of a graph: every value
 * is defined by the node its record names, a node reads only values of earlier nodes,
 * pool lists nest without cycles, at most MAX_DEPTH deep, and hold no absent slot; inputs
 * are input nodes. */
typedef struct {
    uint8_t *state;     /* per pool slot: 0 unvisited, 1 being visited, 2 done */
    uint8_t *height;    /* done slots: nesting height (1 for a leaf) */
    int32_t *maxdef;    /* done slots: the latest node defining a value inside, or -1 */
} PoolCheck;

static int pool_visit(Graph *g, PoolCheck *pc, int32_t i)
{
    if (pc->state[i] == 2)
        return 0;
    if (pc->state[i] == 1)
        return PyErr_Format(PyExc_ValueError, "shapejit graph text: pool list %d contains itself", (int)i), -1;
    const Arg *a = &g->pool[i];
    int h = 1;
    int32_t m = a->kind == ARG_VALUE ? g->values[a->a].node : -1;
    pc->state[i] = 1;
    if (a->kind == ARG_LIST || a->kind == ARG_TUPLE)
        for (int32_t k = 0; k < a->n; k++) {
            int32_t j = a->a + k;
            if (g->pool[j].kind == ARG_ABSENT)
                return PyErr_Format(PyExc_ValueError, "shapejit graph text: pool list %d holds an absent slot", (int)i),
                       -1;
            if (pool_visit(g, pc, j) < 0)
                return -1;
            h = pc->height[j] + 1 > h ? pc->height[j] + 1 : h;
            m = pc->maxdef[j] > m ? pc->maxdef[j] : m;
            if (h > MAX_DEPTH)
                return PyErr_Format(PyExc_ValueError, "shapejit graph text: pool lists nest deeper than %d", MAX_DEPTH),
                       -1;
        }
    pc->state[i] = 2;
    pc->height[i] = (uint8_t)h;
    pc->maxdef[i] = m;
    return 0;
}

static int check_args(Graph *g, PoolCheck *pc, int32_t ni, int32_t first, int32_t n, int bound)
{
    for (int32_t i = first; i < first + n; i++) {
        if (g->pool[i].kind == ARG_ABSENT && !bound)
            return PyErr_Format(PyExc_ValueError, "shapejit graph text: node %d passes an absent argument", (int)ni),
                   -1;
        if (pool_visit(g, pc, i) < 0)
            return -1;
        if (pc->maxdef[i] >= ni)
            return PyErr_Format(PyExc_ValueError,
                                "shapejit graph text: node %d reads a value of node %d, which "
                                "does not come before it",
                                (int)ni, (int)pc->maxdef[i]),
                   -1;
    }
    return 0;
}

static int validate(Graph *g)
{
    for (int32_t v = 0; v < g->nvalues; v++) {
        const Value *val = &g->values[v];
        const Node *nd = &g->nodes[val->node];
        if (v < nd->first_value || v >= nd->first_value + nd->nout || val->index != v - nd->first_value)
            return PyErr_Format(PyExc_ValueError, "shapejit graph text: value %d is not output %d of node %d", (int)v,
                                (int)val->index, (int)val->node),
                   -1;
    }
    PoolCheck pc = {PyMem_Calloc((size_t)g->npool + 1, 1), PyMem_Calloc((size_t)g->npool + 1, 1),
                    PyMem_Calloc((size_t)g->npool + 1, sizeof(int32_t))};
    int r = pc.state && pc.height && pc.maxdef ? 0 : (PyErr_NoMemory(), -1);
    for (int32_t ni = 0; ni < g->nnodes && r == 0; ni++) {
        const Node *nd = &g->nodes[ni];
        for (int32_t k = 0; k < nd->nout && r == 0; k++)
            if (g->values[nd->first_value + k].node != ni)
                r = (PyErr_Format(PyExc_ValueError,
                                  "shapejit graph text: node %d defines value %d, whose "
                                  "record names node %d",
                                  (int)ni, (int)(nd->first_value + k), (int)g->values[nd->first_value + k].node),
                     -1);
        if (r == 0 &&
            (check_args(g, &pc, ni, nd->args, nd->nargs, 0) < 0 || check_args(g, &pc, ni, nd->kwargs, nd->nkw, 0) < 0 ||
             check_args(g, &pc, ni, nd->bound, nd->nbound, 1) < 0))
            r = -1;
    }
    PyMem_Free(pc.state);
    PyMem_Free(pc.height);
    PyMem_Free(pc.maxdef);
    if (r < 0)
        return -1;
    for (int32_t i = 0; i < g->ninputs; i++)
        if (g->nodes[g->values[g->inputs[i]].node].op != OP_INPUT)
            return PyErr_Format(PyExc_ValueError,
                                "shapejit graph text: input %d (value %d) is not defined by an "
                                "input node",
                                (int)i, (int)g->inputs[i]),
                   -1;
    return 0;
}

/* ------------------------------------------------------------ deserialise ---- */

static void *alloc_n(int32_t n, size_t elem)
{
    void *p = PyMem_Calloc(n > 0 ? (size_t)n : 1, elem);
    if (!p)
        PyErr_NoMemory();
    return p;
}

Graph *graph_deserialize(PyObject *text, PyObject **name)
{
    *name = NULL;
    if (!PyUnicode_Check(text))
        return PyErr_Format(PyExc_TypeError, "graph_deserialize expects a str, not %s", Py_TYPE(text)->tp_name), NULL;
    Py_ssize_t len;
    const char *s = PyUnicode_AsUTF8AndSize(text, &len);
    if (!s)
        return NULL;
    Rd r = {s, s, s + len, 0, 0, 0, 0, 0};
    int32_t lines = 1;
    for (Py_ssize_t i = 0; i < len; i++)
        lines += s[i] == '\n';
    Graph *g = NULL;
    SymNode **ex = NULL;
    int32_t version, nexprs = 0, has_mut, gq, env;
    if (rd_next(&r, "the header") < 0 || rd_lit(&r, "shapejit-graph") < 0 ||
        rd_i32(&r, &version, 0, INT32_MAX, "version") < 0)
        goto fail;
    if (version != SERIAL_VERSION) {
        rd_fail(&r, "unsupported version %d (this build reads version %d)", (int)version, SERIAL_VERSION);
        goto fail;
    }
    if (rd_eol(&r) < 0 || rd_next(&r, "the name") < 0 || rd_lit(&r, "name") < 0 || !(*name = rd_string(&r)) ||
        rd_eol(&r) < 0 || !(g = graph_new()) || rd_next(&r, "the graph line") < 0 || rd_lit(&r, "graph") < 0 ||
        rd_key(&r, "nodes", &r.nnodes, 0, lines) < 0 || rd_key(&r, "values", &r.nvalues, 0, lines) < 0 ||
        rd_key(&r, "pool", &r.npool, 0, lines) < 0 || rd_key(&r, "consts", &r.nconsts, 0, lines) < 0 ||
        rd_key(&r, "inputs", &g->ninputs, 0, lines) < 0 || rd_key(&r, "outputs", &g->noutputs, 0, INT32_MAX) < 0 ||
        rd_key(&r, "exprs", &nexprs, 0, lines) < 0 || rd_key(&r, "has_mutation", &has_mut, 0, 1) < 0 ||
        rd_key(&r, "grad_query", &gq, -1, r.nconsts - 1) < 0 || rd_key(&r, "env", &env, 0, 1) < 0 || rd_eol(&r) < 0)
        goto fail;
    if (g->noutputs > len) {
        rd_fail(&r, "outputs=%d is more than the text can hold", (int)g->noutputs);
        goto fail;
    }
    if (nexprs && !env) {
        rd_fail(&r, "expressions without a shape environment");
        goto fail;
    }
    g->has_mutation = has_mut;
    g->grad_query = gq;
    g->nnodes = g->cap_nodes = r.nnodes;
    g->nvalues = g->cap_values = r.nvalues;
    g->npool = g->cap_pool = r.npool;
    g->cap_inputs = g->ninputs;
    g->cap_outputs = g->noutputs;
    if (!(g->nodes = alloc_n(r.nnodes, sizeof(Node))) || !(g->values = alloc_n(r.nvalues, sizeof(Value))) ||
        !(g->pool = alloc_n(r.npool, sizeof(Arg))) || !(g->inputs = alloc_n(g->ninputs, sizeof(int32_t))) ||
        !(g->outputs = alloc_n(g->noutputs, sizeof(int32_t))) || !(ex = alloc_n(nexprs, sizeof(SymNode *))) ||
        (env && !(g->env = sym_env_new())))
        goto fail;
    Py_SETREF(g->consts, PyList_New(r.nconsts));
    if (!g->consts)
        goto fail;
    for (int32_t i = 0; i < r.nconsts; i++)
        PyList_SET_ITEM(g->consts, i, Py_NewRef(Py_None));
    {
        int64_t nsym[2] = {0, 0};
        for (int32_t i = 0; i < nexprs; i++)
            if (rd_next(&r, "an expression") < 0 || rd_expr(&r, g->env, ex, i, nsym) < 0)
                goto fail;
    }
    for (int32_t i = 0; i < r.nconsts; i++) {
        int32_t got;
        if (rd_next(&r, "a constant") < 0 || rd_lit(&r, "const") < 0 || rd_i32(&r, &got, i, i, "constant index") < 0)
            goto fail;
        PyObject *c = rd_const(&r, 0);
        if (!c)
            goto fail;
        PyList_SetItem(g->consts, i, c);
        if (rd_eol(&r) < 0)
            goto fail;
    }
    for (int32_t v = 0; v < r.nvalues; v++)
        if (rd_next(&r, "a value") < 0 || rd_value(&r, g, ex, nexprs, v) < 0)
            goto fail;
    for (int32_t i = 0; i < r.npool; i++)
        if (rd_next(&r, "a pool argument") < 0 || rd_pool(&r, g, i) < 0)
            goto fail;
    for (int32_t ni = 0; ni < r.nnodes; ni++)
        if (rd_next(&r, "a node") < 0 || rd_node(&r, g, ni) < 0)
            goto fail;
    if (rd_next(&r, "the inputs") < 0 || rd_ids(&r, "inputs", g->inputs, g->ninputs) < 0 ||
        rd_next(&r, "the outputs") < 0 || rd_ids(&r, "outputs", g->outputs, g->noutputs) < 0 ||
        rd_next(&r, "'end'") < 0 || rd_lit(&r, "end") < 0 || rd_eol(&r) < 0)
        goto fail;
    for (const char *q = r.eol; q < r.end; q++)
        if (*q != '\n' && *q != ' ') {
            r.line++;
            rd_fail(&r, "text after 'end'");
            goto fail;
        }
    if (validate(g) < 0)
        goto fail;
    PyMem_Free(ex);
    return g;
fail:
    PyMem_Free(ex);
    graph_free(g);
    Py_CLEAR(*name);
    return NULL;
}
