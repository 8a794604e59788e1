#define PY_SSIZE_T_CLEAN
/* The bytecode assembler and decoder (see bcwriter.h). Formats, from CPython 3.11's
 * Objects/locations.md and Objects/exception_handling_notes.txt:
 *  - location table: entries of 1..8 code units; first byte 0x80 | code << 3 | (units-1);
 *    code 15 = no location, 13 = line only (svarint line delta), 14 = long form (svarint
 *    line delta, varint end-line delta, varint col+1, varint end-col+1). Varints are 6-bit
 *    groups, least significant first, 0x40 = more follows.
 *  - exception table: per range, 6-bit groups most significant first, 0x40 = more, 0x80
 *    on an entry's first byte: start, length, target (code units), depth << 1 | lasti. */
#include "bcwriter.h"
#include "sj_opcodes.h"
#include "../core/errors.h"
#include "../core/pyutil.h"

/* ------------------------------------------------------------ building ---- */

int bc_init(BcAsm *a)
{
    memset(a, 0, sizeof *a);
    a->consts = PyList_New(0);
    a->names = PyList_New(0);
    if (!a->consts || !a->names) {
        bc_free(a);
        return -1;
    }
    return 0;
}

void bc_free(BcAsm *a)
{
    PyMem_Free(a->ins);
    PyMem_Free(a->exc);
    PyMem_Free(a->off);
    a->off = NULL;
    Py_CLEAR(a->consts);
    Py_CLEAR(a->names);
    a->ins = NULL;
    a->exc = NULL;
    a->n = a->cap = a->nexc = a->capexc = 0;
}

int32_t bc_emit(BcAsm *a, int op, int32_t arg, BcPos pos)
{
    if (sj_grow((void **)&a->ins, &a->cap, a->n + 1, sizeof(BcIns), 64) < 0)
        return -1;
    BcIns *i = &a->ins[a->n];
    i->op = (uint8_t)op;
    i->arg = op >= SJ_HAVE_ARGUMENT ? arg : 0;
    i->target = -1;
    i->pos = pos;
    return a->n++;
}

int32_t bc_emit_jump(BcAsm *a, int op, int32_t target, BcPos pos)
{
    int32_t k = bc_emit(a, op, 0, pos);
    if (k >= 0)
        a->ins[k].target = target;
    return k;
}

static int32_t list_index(PyObject *list, PyObject *obj, int by_value)
{
    Py_ssize_t n = PyList_GET_SIZE(list);
    for (Py_ssize_t i = 0; i < n; i++)
        if (PyList_GET_ITEM(list, i) == obj)
            return (int32_t)i;
    if (by_value) {
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *x = PyList_GET_ITEM(list, i);
            if (Py_TYPE(x) != Py_TYPE(obj))
                continue;
            int eq = PyObject_RichCompareBool(x, obj, Py_EQ);
            if (eq < 0)
                sj_err_clear();
            else if (eq)
                return (int32_t)i;
        }
    }
    if (PyList_Append(list, obj) < 0)
        return -1;
    return (int32_t)n;
}

int32_t bc_const(BcAsm *a, PyObject *obj)
{
    int by_value = PyUnicode_CheckExact(obj) || PyLong_CheckExact(obj) || obj == Py_None;
    return list_index(a->consts, obj, by_value);
}

int32_t bc_name(BcAsm *a, PyObject *name)
{
    return list_index(a->names, name, 1);
}

int bc_add_exc(BcAsm *a, int32_t start, int32_t end, int32_t handler, int32_t depth, int lasti)
{
    if (sj_grow((void **)&a->exc, &a->capexc, a->nexc + 1, sizeof(BcExc), 8) < 0)
        return -1;
    a->exc[a->nexc++] = (BcExc){start, end, handler, depth, lasti};
    return 0;
}

/* ------------------------------------------------------------ decoding ---- */

static int read_exc_varint(const unsigned char **p, const unsigned char *end, int *out)
{
    if (*p >= end)
        return -1;
    unsigned b = *(*p)++;
    int v = (int)(b & 63);
    while (b & 64) {
        if (*p >= end)
            return -1;
        b = *(*p)++;
        v = (v << 6) | (int)(b & 63);
    }
    *out = v;
    return 0;
}

int bc_find_handler(PyCodeObject *co, int pc, int *target, int *depth, int *lasti)
{
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(co->co_exceptiontable);
    const unsigned char *end = p + PyBytes_GET_SIZE(co->co_exceptiontable);
    while (p < end) {
        int start, len, tgt, dl;
        if (read_exc_varint(&p, end, &start) || read_exc_varint(&p, end, &len) || read_exc_varint(&p, end, &tgt) ||
            read_exc_varint(&p, end, &dl))
            return 1;
        if (pc >= start && pc < start + len) {
            *target = tgt;
            *depth = dl >> 1;
            *lasti = dl & 1;
            return 0;
        }
    }
    return 1;
}

static int pos_int(PyObject *x)
{
    if (x == Py_None)
        return -1;
    long v = PyLong_AsLong(x);
    return (v < 0 || v > INT32_MAX) ? -1 : (int)v;
}

int bc_decode(BcAsm *a, PyCodeObject *co, int32_t **unit_to_ins, int32_t *nunits_out)
{
    PyObject *code = PyCode_GetCode(co);
    PyObject *positions = NULL;
    int32_t *map = NULL;
    int rc = -1;
    if (!code)
        return -1;
    const uint16_t *u = (const uint16_t *)PyBytes_AS_STRING(code);
    int32_t nunits = (int32_t)(PyBytes_GET_SIZE(code) / 2);
    PyObject *it = PyObject_CallMethod((PyObject *)co, "co_positions", NULL);
    positions = it ? PySequence_List(it) : NULL;
    Py_XDECREF(it);
    if (!positions)
        goto done;
    if (PyList_GET_SIZE(positions) < nunits) {
        PyErr_SetString(PyExc_SystemError, "shapejit: co_positions shorter than the code");
        goto done;
    }
    map = PyMem_Malloc(sizeof(int32_t) * ((size_t)nunits + 1));
    int32_t *target_unit = PyMem_Malloc(sizeof(int32_t) * ((size_t)nunits + 1));
    if (!map || !target_unit) {
        PyMem_Free(target_unit);
        PyErr_NoMemory();
        goto done;
    }
    int32_t first = a->n;
    for (int32_t pc = 0; pc < nunits;) {
        int32_t start = pc;
        int op = u[pc] & 0xff, arg = u[pc] >> 8;
        while (op == SJ_EXTENDED_ARG && pc + 1 < nunits) {
            pc++;
            op = u[pc] & 0xff;
            arg = (arg << 8) | (u[pc] >> 8);
        }
        int32_t next = pc + 1 + sj_op_caches[op];
        if (next > nunits)
            next = nunits;
        PyObject *p = PyList_GET_ITEM(positions, pc);
        BcPos pos = BC_NOPOS;
        if (PyTuple_Check(p) && PyTuple_GET_SIZE(p) == 4) {
            pos.line = pos_int(PyTuple_GET_ITEM(p, 0));
            pos.end_line = pos_int(PyTuple_GET_ITEM(p, 1));
            pos.col = pos_int(PyTuple_GET_ITEM(p, 2));
            pos.end_col = pos_int(PyTuple_GET_ITEM(p, 3));
            sj_err_clear();
        }
        int32_t k = bc_emit(a, op, arg, pos);
        if (k < 0) {
            PyMem_Free(target_unit);
            goto done;
        }
        target_unit[k - first] = -1;
        if (sj_op_hasjrel[op])
            target_unit[k - first] = sj_op_jback[op] ? next - arg : next + arg;
        for (int32_t x = start; x < next; x++)
            map[x] = k;
        pc = next;
    }
    map[nunits] = a->n;
    for (int32_t k = first; k < a->n; k++) {
        int32_t t = target_unit[k - first];
        if (t >= 0) {
            if (t > nunits) {
                PyMem_Free(target_unit);
                PyErr_SetString(PyExc_SystemError, "shapejit: jump outside the code");
                goto done;
            }
            a->ins[k].target = map[t];
        }
    }
    PyMem_Free(target_unit);
    /* exception table */
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(co->co_exceptiontable);
    const unsigned char *end = p + PyBytes_GET_SIZE(co->co_exceptiontable);
    while (p < end) {
        int s, len, tgt, dl;
        if (read_exc_varint(&p, end, &s) || read_exc_varint(&p, end, &len) || read_exc_varint(&p, end, &tgt) ||
            read_exc_varint(&p, end, &dl) || s + len > nunits || tgt >= nunits) {
            PyErr_SetString(PyExc_SystemError, "shapejit: malformed exception table");
            goto done;
        }
        if (bc_add_exc(a, map[s], map[s + len], map[tgt], dl >> 1, dl & 1) < 0)
            goto done;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(co->co_consts); i++)
        if (PyList_Append(a->consts, PyTuple_GET_ITEM(co->co_consts, i)) < 0)
            goto done;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(co->co_names); i++)
        if (PyList_Append(a->names, PyTuple_GET_ITEM(co->co_names, i)) < 0)
            goto done;
    rc = 0;
done:
    Py_DECREF(code);
    Py_XDECREF(positions);
    if (rc == 0 && nunits_out)
        *nunits_out = nunits;
    if (rc == 0 && unit_to_ins)
        *unit_to_ins = map;
    else
        PyMem_Free(map);
    return rc;
}

/* ------------------------------------------------------------ assembly ---- */

typedef struct {
    unsigned char *b;
    Py_ssize_t n, cap;
} Buf;

static int buf_put(Buf *b, unsigned char c)
{
    if (b->n == b->cap) {
        Py_ssize_t cap = b->cap ? b->cap * 2 : 256;
        unsigned char *nb = PyMem_Realloc(b->b, (size_t)cap);
        if (!nb) {
            PyErr_NoMemory();
            return -1;
        }
        b->b = nb;
        b->cap = cap;
    }
    b->b[b->n++] = c;
    return 0;
}

static int put_varint(Buf *b, unsigned v)
{
    while (v >= 64) {
        if (buf_put(b, (unsigned char)(64 | (v & 63))) < 0)
            return -1;
        v >>= 6;
    }
    return buf_put(b, (unsigned char)v);
}

static int put_svarint(Buf *b, int v)
{
    return put_varint(b, v < 0 ? ((unsigned)(-v) << 1) | 1 : (unsigned)v << 1);
}

static int put_exc_item(Buf *b, unsigned v, unsigned char msb)
{
    int shifts[] = {24, 18, 12, 6};
    for (int i = 0; i < 4; i++)
        if (v >= (1u << shifts[i])) {
            if (buf_put(b, (unsigned char)(((v >> shifts[i]) & 63) | 64 | msb)) < 0)
                return -1;
            msb = 0;
        }
    return buf_put(b, (unsigned char)((v & 63) | msb));
}

static int ext_count(int32_t arg)
{
    return arg < 0x100 ? 0 : arg < 0x10000 ? 1 : arg < 0x1000000 ? 2 : 3;
}

static int is_terminal(int op)
{
    return op == SJOP_RETURN_VALUE || op == SJOP_RAISE_VARARGS || op == SJOP_RERAISE || op == SJOP_JUMP_FORWARD ||
           op == SJOP_JUMP_BACKWARD || op == SJOP_JUMP_BACKWARD_NO_INTERRUPT;
}

/* Maximum stack depth over every path, exception handlers included. */
static int stack_depth(BcAsm *a, int *out)
{
    int32_t n = a->n;
    int32_t *depth = PyMem_Malloc(sizeof(int32_t) * ((size_t)n + 1));
    int32_t *work = PyMem_Malloc(sizeof(int32_t) * ((size_t)n + 1) * 2);
    if (!depth || !work) {
        PyMem_Free(depth);
        PyMem_Free(work);
        PyErr_NoMemory();
        return -1;
    }
    for (int32_t i = 0; i < n; i++)
        depth[i] = -1;
    int32_t nw = 0, maxd = 0;
#define SEED(idx, d) \
    do { \
        int32_t i_ = (idx), d_ = (d); \
        if (i_ >= 0 && i_ < n && depth[i_] < d_) { \
            depth[i_] = d_; \
            if (nw < 2 * n + 2) \
                work[nw++] = i_; \
        } \
    } while (0)
    if (n > 0)
        SEED(0, 0);
    for (int32_t e = 0; e < a->nexc; e++)
        SEED(a->exc[e].handler, a->exc[e].depth + 1 + a->exc[e].lasti);
    int rc = 0;
    while (nw > 0) {
        int32_t i = work[--nw];
        int32_t d = depth[i];
        if (d > maxd)
            maxd = d;
        BcIns *in = &a->ins[i];
        if (in->target >= 0) {
            int ej = PyCompile_OpcodeStackEffectWithJump(in->op, in->arg, 1);
            SEED(in->target, d + ej);
            if (d + ej > maxd)
                maxd = d + ej;
        }
        if (!is_terminal(in->op)) {
            int e0 = PyCompile_OpcodeStackEffectWithJump(in->op, in->arg, in->target >= 0 ? 0 : -1);
            if (e0 == PY_INVALID_STACK_EFFECT) {
                PyErr_Format(PyExc_SystemError, "shapejit: no stack effect for %s", sj_op_names[in->op]);
                rc = -1;
                break;
            }
            if (d + e0 > maxd)
                maxd = d + e0;
            SEED(i + 1, d + e0);
        }
    }
#undef SEED
    PyMem_Free(depth);
    PyMem_Free(work);
    *out = maxd;
    return rc;
}

static int cmp_exc(const void *x, const void *y)
{
    const BcExc *a = x, *b = y;
    return (a->start > b->start) - (a->start < b->start);
}

PyObject *bc_assemble(BcAsm *a, PyCodeObject *model, const BcCodeSpec *spec)
{
    int32_t n = a->n;
    int32_t *ext = PyMem_Calloc((size_t)n + 1, sizeof(int32_t));
    int32_t *off = PyMem_Calloc((size_t)n + 1, sizeof(int32_t));
    Buf code = {0}, lines = {0}, exc = {0};
    PyObject *result = NULL;
    if (!ext || !off) {
        PyErr_NoMemory();
        goto done;
    }
    for (int32_t i = 0; i < n; i++)
        if (a->ins[i].target < 0)
            ext[i] = ext_count(a->ins[i].arg);
    /* lay out until every jump argument fits its EXTENDED_ARG prefixes */
    for (int changed = 1; changed;) {
        changed = 0;
        int32_t o = 0;
        for (int32_t i = 0; i < n; i++) {
            off[i] = o;
            o += ext[i] + 1 + sj_op_caches[a->ins[i].op];
        }
        off[n] = o;
        for (int32_t i = 0; i < n; i++) {
            BcIns *in = &a->ins[i];
            if (in->target < 0)
                continue;
            if (in->target > n) {
                PyErr_SetString(PyExc_SystemError, "shapejit: jump target out of range");
                goto done;
            }
            int32_t after = off[i + 1];
            int32_t arg = sj_op_jback[in->op] ? after - off[in->target] : off[in->target] - after;
            if (arg < 0) {
                PyErr_Format(PyExc_SystemError, "shapejit: %s jumps the wrong way", sj_op_names[in->op]);
                goto done;
            }
            in->arg = arg;
            if (ext_count(arg) > ext[i]) {
                ext[i] = ext_count(arg);
                changed = 1;
            }
        }
    }
    /* code, with the location table alongside */
    int prev_line = spec->firstlineno;
    for (int32_t i = 0; i < n; i++) {
        BcIns *in = &a->ins[i];
        for (int k = ext[i]; k > 0; k--) {
            if (buf_put(&code, SJ_EXTENDED_ARG) < 0 || buf_put(&code, (unsigned char)(in->arg >> (8 * k))) < 0)
                goto done;
        }
        if (buf_put(&code, in->op) < 0 || buf_put(&code, (unsigned char)(in->arg & 0xff)) < 0)
            goto done;
        for (int k = 0; k < sj_op_caches[in->op]; k++)
            if (buf_put(&code, 0) < 0 || buf_put(&code, 0) < 0)
                goto done;
        int units = ext[i] + 1 + sj_op_caches[in->op];
        while (units > 0) {
            int len = units > 8 ? 8 : units;
            units -= len;
            const BcPos *p = &in->pos;
            if (p->line < 0) {
                if (buf_put(&lines, (unsigned char)(0x80 | (15 << 3) | (len - 1))) < 0)
                    goto done;
            } else if (p->col < 0 || p->end_col < 0 || p->end_line < p->line) {
                if (buf_put(&lines, (unsigned char)(0x80 | (13 << 3) | (len - 1))) < 0 ||
                    put_svarint(&lines, p->line - prev_line) < 0)
                    goto done;
                prev_line = p->line;
            } else {
                if (buf_put(&lines, (unsigned char)(0x80 | (14 << 3) | (len - 1))) < 0 ||
                    put_svarint(&lines, p->line - prev_line) < 0 ||
                    put_varint(&lines, (unsigned)(p->end_line - p->line)) < 0 ||
                    put_varint(&lines, (unsigned)p->col + 1) < 0 || put_varint(&lines, (unsigned)p->end_col + 1) < 0)
                    goto done;
                prev_line = p->line;
            }
        }
    }
    /* exception table, sorted by start */
    if (a->nexc > 1)
        qsort(a->exc, (size_t)a->nexc, sizeof(BcExc), cmp_exc);
    for (int32_t e = 0; e < a->nexc; e++) {
        BcExc *x = &a->exc[e];
        if (x->start < 0 || x->end > n || x->start >= x->end || x->handler < 0 || x->handler >= n) {
            PyErr_SetString(PyExc_SystemError, "shapejit: bad exception range");
            goto done;
        }
        int32_t s = off[x->start], len = off[x->end] - s;
        if (put_exc_item(&exc, (unsigned)s, 0x80) < 0 || put_exc_item(&exc, (unsigned)len, 0) < 0 ||
            put_exc_item(&exc, (unsigned)off[x->handler], 0) < 0 ||
            put_exc_item(&exc, (unsigned)(x->depth << 1 | x->lasti), 0) < 0)
            goto done;
    }
    int maxdepth;
    if (stack_depth(a, &maxdepth) < 0)
        goto done;
    PyObject *kw = Py_BuildValue(
        "{s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:y#,s:N,s:N,s:O,s:O,s:O,s:O,s:O,s:y#,s:y#}", "co_argcount", spec->argcount,
        "co_posonlyargcount", spec->posonlyargcount, "co_kwonlyargcount", spec->kwonlyargcount, "co_nlocals",
        (int)PyTuple_GET_SIZE(spec->varnames), "co_stacksize", maxdepth + 1, "co_flags", spec->flags, "co_firstlineno",
        spec->firstlineno, "co_code", (const char *)code.b, code.n, "co_consts", PyList_AsTuple(a->consts), "co_names",
        PyList_AsTuple(a->names), "co_varnames", spec->varnames, "co_freevars", spec->freevars, "co_cellvars",
        spec->cellvars, "co_name", spec->name, "co_qualname", spec->qualname, "co_linetable",
        lines.b ? (const char *)lines.b : "", lines.n, "co_exceptiontable", exc.b ? (const char *)exc.b : "", exc.n);
    if (!kw)
        goto done;
    PyObject *replace = PyObject_GetAttrString((PyObject *)model, "replace");
    PyObject *empty = PyTuple_New(0);
    if (replace && empty)
        result = PyObject_Call(replace, empty, kw);
    Py_XDECREF(replace);
    Py_XDECREF(empty);
    Py_DECREF(kw);
done:
    PyMem_Free(ext);
    PyMem_Free(a->off);
    a->off = off;
    PyMem_Free(code.b);
    PyMem_Free(lines.b);
    PyMem_Free(exc.b);
    return result;
}
