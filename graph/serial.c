/* A graph as text, read back, compared and linked (serial.h).
 *
 * The text is line oriented, ASCII, one record a line, in this order (version 1):
 *
 *   shapejit-graph 1
 *   name "<graph name>"
 *   graph nodes=N values=N pool=N consts=N inputs=N outputs=N exprs=N has_mutation=0|1
 *         grad_query=<const or -1> env=0|1                                (one line)
 *   expr <id> Symbol <N> <hint> <lo> <hi>      a backed symbol s<N>, in slot order
 *   expr <id> Unbacked <N> <lo> <hi>           an unbacked symbol u<N>
 *   expr <id> Integer <v> | Boolean 0|1        leaves
 *   expr <id> <Kind> <operand ids>             Add, Mul, FloorDiv, ... (shapes/sym_ops.def)
 *   const <i> <constant>
 *   value <id> <node> <index> torch|numpy <dtype> [<dims>] np_scalar=0 requires_grad=0 symint=0
 *         a dim is a size (8) or an expression and its hint (e3:8)
 *   pool <i> value|const|list|tuple|absent <a> <n>
 *   node <i> <op name or "input"> flags=F target=C args=A,N kw=A,N kwnames=C out=V,N where=C
 *         source=C row=<callables.def path, #k when the path repeats, or -> bound=A,N
 *   inputs <value ids>
 *   outputs <value ids>
 *   end
 *
 * Ranges are "-oo" / "oo" at the infinities. Constants are written as
 *   None True False Ellipsis 12 "text"
 *   (float "0x1.8p+1") (complex "<re hex>" "<im hex>") (bytes "<base64>")
 *   (tuple ...) (list ...) (slice a b c) (range a b c)
 *   (ref <kind> <data ...> [repr="..."] [name="..."])
 * a ref being a library object (REF_KINDS below) named by plain data: a dtype by name, a
 * tensor by dtype, shape and bytes, a callable by its callables.def path, by its module and
 * qualified name, or as a method of an object so named (an autograd Function's apply).
 * name= is how graph_format names a callable (graph_target_name), repr= the object's repr
 * where graph_format prints that instead (graph_const_by_name: every ref but a callable
 * that is not a class), so a graph read back prints as the one written did. A function's
 * repr holds its address: writing only its name keeps the text of a graph the same in
 * every process.
 *
 * The reader (serial_read.c) never imports torch or numpy: refs come back as GraphRef
 * objects until graph_link resolves them. */
#include "serial_int.h"
#include <stdarg.h>
#include <string.h>
#include "../shapes/sym.h"
#include "../vocab/callables.h"
#include "../vocab/libs.h"
#include "../core/errors.h"

/* ---------------------------------------------------------------- buffer ---- */

typedef struct {
    char *p;
    size_t n, cap;
} Buf;

static int buf_put(Buf *b, const char *s, size_t len)
{
    if (b->n + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + len + 1)
            cap *= 2;
        char *p = PyMem_Realloc(b->p, cap);
        if (!p) {
            PyErr_NoMemory();
            return -1;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, len);
    b->n += len;
    b->p[b->n] = 0;
    return 0;
}

static int buf_puts(Buf *b, const char *s)
{
    return buf_put(b, s, strlen(s));
}

static int buf_printf(Buf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        PyErr_SetString(PyExc_SystemError, "shapejit: serialised field too long");
        return -1;
    }
    return buf_put(b, tmp, (size_t)n);
}

/* A str as a double-quoted ASCII string: printable ASCII as is, the rest escaped. */
static int buf_quoted(Buf *b, PyObject *u)
{
    if (buf_put(b, "\"", 1) < 0)
        return -1;
    Py_ssize_t n = PyUnicode_GET_LENGTH(u);
    int kind = PyUnicode_KIND(u);
    const void *data = PyUnicode_DATA(u);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 ch = PyUnicode_READ(kind, data, i);
        char esc[16];
        int r;
        if (ch == '"' || ch == '\\')
            r = buf_printf(b, "\\%c", (char)ch);
        else if (ch == '\n')
            r = buf_puts(b, "\\n");
        else if (ch == '\t')
            r = buf_puts(b, "\\t");
        else if (ch >= 0x20 && ch < 0x7f) {
            esc[0] = (char)ch;
            r = buf_put(b, esc, 1);
        } else if (ch <= 0xffff)
            r = buf_printf(b, "\\u%04x", (unsigned)ch);
        else
            r = buf_printf(b, "\\U%08x", (unsigned)ch);
        if (r < 0)
            return -1;
    }
    return buf_put(b, "\"", 1);
}

static int buf_bound(Buf *b, int64_t v)
{
    if (v == SYM_INT_OO)
        return buf_puts(b, "oo");
    if (v == SYM_NEG_INT_OO)
        return buf_puts(b, "-oo");
    return buf_printf(b, "%lld", (long long)v);
}

/* ------------------------------------------------------------- GraphRef ---- */

/* An unresolved library object: what a serialised graph holds in place of a dtype, a
 * device, a tensor or a callable until it is linked. */
typedef struct {
    PyObject_HEAD PyObject *kind;   /* strong str: a REF_KINDS name ("torch.dtype") */
    PyObject *data;   /* strong tuple of plain constants that identify the object */
    PyObject *repr;   /* strong str or NULL: the object's repr when it was written (NULL for
                         a callable graph_format prints by name) */
    PyObject *name;   /* strong str or NULL: graph_target_name of a callable; one of repr and
                         name is set */
} SjRefObject;

const char *const serial_ref_kind_names[RK_COUNT] = {
#define X(e, name, lib, ndata) name,
    REF_KINDS(X)
#undef X
};

const int serial_ref_ndata[RK_COUNT] = {
#define X(e, name, lib, ndata) ndata,
    REF_KINDS(X)
#undef X
};

int serial_ref_kind(const char *name)
{
    for (int k = 0; k < RK_COUNT; k++)
        if (strcmp(serial_ref_kind_names[k], name) == 0)
            return k;
    return -1;
}

PyObject *serial_ref_new(const char *kind, PyObject *data, PyObject *repr, PyObject *name)
{
    SjRefObject *r = PyObject_New(SjRefObject, &SjGraphRef_Type);
    if (!r)
        return NULL;
    r->kind = PyUnicode_FromString(kind);
    r->data = Py_NewRef(data);
    r->repr = Py_XNewRef(repr);
    r->name = Py_XNewRef(name);
    if (!r->kind) {
        Py_DECREF(r);
        return NULL;
    }
    return (PyObject *)r;
}

static void ref_dealloc(SjRefObject *r)
{
    Py_XDECREF(r->kind);
    Py_XDECREF(r->data);
    Py_XDECREF(r->repr);
    Py_XDECREF(r->name);
    PyObject_Free(r);
}

/* As graph_format prints the live object: its repr, or for a callable its name. */
static PyObject *ref_repr(SjRefObject *r)
{
    return Py_NewRef(r->repr ? r->repr : r->name);
}

static PyObject *ref_richcompare(PyObject *a, PyObject *b, int op)
{
    if (!Py_IS_TYPE(b, &SjGraphRef_Type) || (op != Py_EQ && op != Py_NE))
        Py_RETURN_NOTIMPLEMENTED;
    SjRefObject *x = (SjRefObject *)a, *y = (SjRefObject *)b;
    int eq = PyObject_RichCompareBool(x->kind, y->kind, Py_EQ);
    if (eq > 0)
        eq = PyObject_RichCompareBool(x->data, y->data, Py_EQ);
    if (eq < 0)
        return NULL;
    return PyBool_FromLong(op == Py_EQ ? eq : !eq);
}

static Py_hash_t ref_hash(SjRefObject *r)
{
    Py_hash_t h = PyObject_Hash(r->data);
    return h == -1 ? -1 : h ^ PyObject_Hash(r->kind);
}

/* graph_format names a target by __module__ and __qualname__: a ref answers with the name
 * the live object was given, and has no __module__ of its own. */
static PyObject *ref_get_qualname(SjRefObject *r, void *c)
{
    (void)c;
    if (!r->name) {
        PyErr_SetString(PyExc_AttributeError, "__qualname__");
        return NULL;
    }
    return Py_NewRef(r->name);
}

static PyObject *ref_get_module(SjRefObject *r, void *c)
{
    (void)r;
    (void)c;
    PyErr_SetString(PyExc_AttributeError, "__module__");
    return NULL;
}

static PyObject *ref_get_kind(SjRefObject *r, void *c)
{
    (void)c;
    return Py_NewRef(r->kind);
}
static PyObject *ref_get_data(SjRefObject *r, void *c)
{
    (void)c;
    return Py_NewRef(r->data);
}

static PyGetSetDef ref_getset[] = {
    {"kind", (getter)ref_get_kind, NULL, "what the object is: torch.dtype, callable.row, ...", NULL},
    {"data", (getter)ref_get_data, NULL, "plain data naming the object", NULL},
    {"__qualname__", (getter)ref_get_qualname, NULL, "the printed name of a callable", NULL},
    {"__module__", (getter)ref_get_module, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject SjGraphRef_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shapejit._C.GraphRef",
    .tp_basicsize = sizeof(SjRefObject),
    .tp_dealloc = (destructor)ref_dealloc,
    .tp_repr = (reprfunc)ref_repr,
    .tp_hash = (hashfunc)ref_hash,
    .tp_richcompare = ref_richcompare,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_getset = ref_getset,
    .tp_doc = "A library object of a serialised graph, unresolved until the graph is linked.",
};

int serial_init_types(PyObject *module)
{
    if (PyType_Ready(&SjGraphRef_Type) < 0)
        return -1;
    return PyModule_AddObjectRef(module, "GraphRef", (PyObject *)&SjGraphRef_Type);
}

/* ---------------------------------------------- library objects as data ---- */

/* New reference: getattr chain of a dotted path, refusing <locals>. */
static PyObject *walk_path(PyObject *root, PyObject *qualname)
{
    const char *q = PyUnicode_AsUTF8(qualname);
    if (!q)
        return NULL;
    if (strstr(q, "<"))
        return PyErr_Format(PyExc_LookupError, "%s is not reachable by name", q), NULL;
    return libs_get_path(root, q);
}

/* str(obj) with a "torch." prefix removed: torch.float32 -> "float32". New str. */
static PyObject *torch_attr_name(PyObject *obj)
{
    PyObject *s = PyObject_Str(obj);
    if (!s)
        return NULL;
    const char *t = PyUnicode_AsUTF8(s);
    PyObject *r = t && strncmp(t, "torch.", 6) == 0 ? PyUnicode_FromString(t + 6) : NULL;
    if (t && !r && !PyErr_Occurred())
        PyErr_Format(PyExc_TypeError, "%s has no torch attribute name", t);
    Py_DECREF(s);
    return r;
}

/* torch.<name> is obj: data (name,). */
static PyObject *torch_named(PyObject *obj)
{
    PyObject *name = torch_attr_name(obj);
    if (!name)
        return NULL;
    PyObject *back = PyObject_GetAttr(libs.torch, name);
    if (back != obj) {
        Py_XDECREF(back);
        Py_DECREF(name);
        sj_err_clear();
        return PyErr_Format(PyExc_TypeError, "%R is not torch.%S", obj, name), NULL;
    }
    Py_DECREF(back);
    return Py_BuildValue("(N)", name);
}

/* numpy dtype -> its .str when np.dtype(str) gives it back (no object or structured
 * dtypes): a new str. */
static PyObject *np_dtype_str(PyObject *dt)
{
    PyObject *hasobj = PyObject_GetAttrString(dt, "hasobject");
    int bad = !hasobj || PyObject_IsTrue(hasobj) != 0;
    Py_XDECREF(hasobj);
    if (bad) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_TypeError, "numpy dtype %R holds Python objects", dt);
        return NULL;
    }
    PyObject *s = PyObject_GetAttrString(dt, "str");
    PyObject *back = s ? PyObject_CallOneArg(libs.np_dtype_type, s) : NULL;
    int same = back ? PyObject_RichCompareBool(back, dt, Py_EQ) : -1;
    Py_XDECREF(back);
    if (same != 1) {
        if (same == 0)
            PyErr_Format(PyExc_TypeError, "numpy dtype %R is not named by its str", dt);
        Py_XDECREF(s);
        return NULL;
    }
    return s;
}

static PyObject *torch_tensor_data(PyObject *t)
{
    PyObject *dt = PyObject_GetAttrString(t, "dtype");
    PyObject *dname = dt ? torch_attr_name(dt) : NULL;
    PyObject *layout = dname ? PyObject_GetAttrString(t, "layout") : NULL;
    PyObject *strided = layout ? PyObject_GetAttrString(libs.torch, "strided") : NULL;
    PyObject *dev = strided ? PyObject_GetAttrString(t, "device") : NULL;
    PyObject *devs = dev ? PyObject_Str(dev) : NULL;
    PyObject *res = NULL, *shape = NULL, *bytes = NULL;
    if (!devs)
        goto done;
    if (layout != strided || !PyUnicode_Check(devs) || PyUnicode_CompareWithASCIIString(devs, "cpu") != 0) {
        PyErr_Format(PyExc_TypeError, "a %S tensor on %S", layout, devs);
        goto done;
    }
    PyObject *sz = PyObject_GetAttrString(t, "shape");
    shape = sz ? PySequence_Tuple(sz) : NULL;
    Py_XDECREF(sz);
    if (!shape)
        goto done;
    {
        PyObject *u8 = PyObject_GetAttrString(libs.torch, "uint8");
        PyObject *x = u8 ? PyObject_CallMethod(t, "detach", NULL) : NULL;
        if (x)
            Py_SETREF(x, PyObject_CallMethod(x, "contiguous", NULL));
        if (x)
            Py_SETREF(x, PyObject_CallMethod(x, "reshape", "(i)", -1));
        if (x)
            Py_SETREF(x, PyObject_CallMethod(x, "view", "O", u8));
        if (x)
            Py_SETREF(x, PyObject_CallMethod(x, "numpy", NULL));
        if (x)
            bytes = PyObject_CallMethod(x, "tobytes", NULL);
        Py_XDECREF(x);
        Py_XDECREF(u8);
    }
    if (!bytes)
        goto done;
    PyObject *rg = PyObject_GetAttrString(t, "requires_grad");
    if (rg)
        res = Py_BuildValue("(OONO)", dname, shape, rg, bytes);
done:
    Py_XDECREF(dt);
    Py_XDECREF(dname);
    Py_XDECREF(layout);
    Py_XDECREF(strided);
    Py_XDECREF(dev);
    Py_XDECREF(devs);
    Py_XDECREF(shape);
    Py_XDECREF(bytes);
    return res;
}

/* (module, qualname) of a callable or class that is reachable by those names. */
static PyObject *global_data(PyObject *obj)
{
    PyObject *qn = PyObject_GetAttrString(obj, "__qualname__");
    PyObject *mod = qn ? PyObject_GetAttrString(obj, "__module__") : NULL;
    if (qn && !mod) {   /* a method descriptor: the module of its class */
        sj_err_clear();
        PyObject *cls = PyObject_GetAttrString(obj, "__objclass__");
        mod = cls ? PyObject_GetAttrString(cls, "__module__") : NULL;
        Py_XDECREF(cls);
    }
    PyObject *res = NULL;
    if (!mod || !PyUnicode_Check(mod) || !PyUnicode_Check(qn))
        goto done;
    PyObject *m = PyImport_GetModule(mod);   /* never imports: a live object's module is loaded */
    PyObject *back = m ? walk_path(m, qn) : NULL;
    Py_XDECREF(m);
    if (back == obj)
        res = PyTuple_Pack(2, mod, qn);
    Py_XDECREF(back);
done:
    sj_err_clear();
    Py_XDECREF(qn);
    Py_XDECREF(mod);
    return res;
}

/* (module, qualname, name) of a method bound to an object reachable by module and
 * qualname (a class: an autograd Function's apply), when getattr gives it back. */
static PyObject *method_data(PyObject *obj)
{
    if (!PyMethod_Check(obj))
        return NULL;
    PyObject *owner = global_data(PyMethod_GET_SELF(obj));
    PyObject *name = owner ? PyObject_GetAttrString(PyMethod_GET_FUNCTION(obj), "__name__") : NULL;
    PyObject *back = name && PyUnicode_Check(name) ? PyObject_GetAttr(PyMethod_GET_SELF(obj), name) : NULL;
    int same = back ? PyObject_RichCompareBool(back, obj, Py_EQ) : 0;
    PyObject *res =
        same == 1 ? Py_BuildValue("(OOO)", PyTuple_GET_ITEM(owner, 0), PyTuple_GET_ITEM(owner, 1), name) : NULL;
    sj_err_clear();
    Py_XDECREF(owner);
    Py_XDECREF(name);
    Py_XDECREF(back);
    return res;
}

/* The ref kind and data of a live library object: 0 and *data a new tuple; 1 when obj is
 * none of them; -1 on error (a library object with no serialised form: TypeError). */
static int ref_describe(PyObject *obj, int *kind, PyObject **data)
{
    *data = NULL;
    if (libs_refresh() < 0 || callables_init() < 0)
        return -1;
    PyTypeObject *t = Py_TYPE(obj);
    if (libs.torch) {
        PyObject *layout_type = PyObject_GetAttrString(libs.torch, "layout");
        if (!layout_type)
            return -1;
        int is_layout = (PyObject *)t == layout_type;
        Py_DECREF(layout_type);
        if ((PyObject *)t == libs.dtype_type) {
            *kind = RK_TORCH_DTYPE;
            *data = torch_named(obj);
        } else if ((PyObject *)t == libs.memory_format_type) {
            *kind = RK_TORCH_MEMORY_FORMAT;
            *data = torch_named(obj);
        } else if (is_layout) {
            *kind = RK_TORCH_LAYOUT;
            *data = torch_named(obj);
        } else if ((PyObject *)t == libs.device_type) {
            *kind = RK_TORCH_DEVICE;
            *data = Py_BuildValue("(N)", PyObject_Str(obj));
        } else if ((PyObject *)t == libs.size_type) {
            *kind = RK_TORCH_SIZE;
            *data = PySequence_Tuple(obj);
        } else if ((PyObject *)t == libs.tensor_type) {
            *kind = RK_TORCH_TENSOR;
            *data = torch_tensor_data(obj);
        } else if ((*data = graph_torch_op_data(obj)) != NULL) {
            *kind = RK_TORCH_OP;
        }
        if (*data || PyErr_Occurred())
            return *data ? 0 : -1;
    }
    if (libs.numpy) {
        if (PyObject_TypeCheck(obj, (PyTypeObject *)libs.np_dtype_type)) {
            *kind = RK_NUMPY_DTYPE;
            *data = Py_BuildValue("(N)", np_dtype_str(obj));
        } else if ((PyObject *)t == libs.ndarray_type || PyObject_TypeCheck(obj, (PyTypeObject *)libs.np_generic)) {
            PyObject *dt = PyObject_GetAttrString(obj, "dtype");
            PyObject *ds = dt ? np_dtype_str(dt) : NULL;
            PyObject *bytes = ds ? PyObject_CallMethod(obj, "tobytes", NULL) : NULL;
            Py_XDECREF(dt);
            if (bytes && (PyObject *)t == libs.ndarray_type) {
                PyObject *sz = PyObject_GetAttrString(obj, "shape");
                *kind = RK_NUMPY_NDARRAY;
                *data = sz ? Py_BuildValue("(OOO)", ds, sz, bytes) : NULL;
                Py_XDECREF(sz);
            } else if (bytes) {
                *kind = RK_NUMPY_SCALAR;
                *data = Py_BuildValue("(OO)", ds, bytes);
            }
            Py_XDECREF(ds);
            Py_XDECREF(bytes);
            if (!*data)
                return -1;
        }
        if (*data)
            return 0;
    }
    int row = callables_lookup(obj);
    if (row >= 0) {
        *kind = RK_ROW;
        *data = Py_BuildValue("(s)", callable_rows[row].path);
        return *data ? 0 : -1;
    }
    if (PyCallable_Check(obj) && (*data = global_data(obj)) != NULL) {
        *kind = RK_GLOBAL;
        return 0;
    }
    if ((*data = method_data(obj)) != NULL) {
        *kind = RK_METHOD;
        return 0;
    }
    return PyErr_Occurred() ? -1 : 1;
}

/* ------------------------------------------------------------- constants ---- */

typedef struct {
    Buf *b;
    int with_text;          /* write repr= and name= of refs (not when comparing) */
    PyObject *bad;          /* borrowed: the object that has no serialised form, once found */
} CW;

static int write_const(CW *w, PyObject *o, int depth);

static int write_items(CW *w, const char *tag, PyObject *seq, int depth)
{
    if (buf_printf(w->b, "(%s", tag) < 0)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (buf_put(w->b, " ", 1) < 0)
            return -1;
        int r = write_const(w, PySequence_Fast_GET_ITEM(seq, i), depth + 1);
        if (r)
            return r;
    }
    return buf_put(w->b, ")", 1);
}

static int write_hex_float(Buf *b, double v)
{
    PyObject *f = PyFloat_FromDouble(v);
    PyObject *h = f ? PyObject_CallMethod(f, "hex", NULL) : NULL;
    int r = h ? buf_quoted(b, h) : -1;
    Py_XDECREF(f);
    Py_XDECREF(h);
    return r;
}

static int write_b64(Buf *b, PyObject *bytes)
{
    PyObject *ba = PyImport_ImportModule("binascii");
    PyObject *e = ba ? PyObject_CallMethod(ba, "b2a_base64", "(O)", bytes) : NULL;
    PyObject *s = e ? PyUnicode_FromEncodedObject(e, "ascii", NULL) : NULL;
    PyObject *st = s ? PyObject_CallMethod(s, "strip", NULL) : NULL;
    int r = st ? buf_quoted(b, st) : -1;
    Py_XDECREF(ba);
    Py_XDECREF(e);
    Py_XDECREF(s);
    Py_XDECREF(st);
    return r;
}

static int write_ref(CW *w, const char *kind, PyObject *data, PyObject *repr, PyObject *name, int depth)
{
    if (buf_printf(w->b, "(ref %s", kind) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(data); i++) {
        if (buf_put(w->b, " ", 1) < 0)
            return -1;
        int r = write_const(w, PyTuple_GET_ITEM(data, i), depth + 1);
        if (r)
            return r;
    }
    if (w->with_text) {
        if (repr && (buf_puts(w->b, " repr=") < 0 || buf_quoted(w->b, repr) < 0))
            return -1;
        if (name && (buf_puts(w->b, " name=") < 0 || buf_quoted(w->b, name) < 0))
            return -1;
    }
    return buf_put(w->b, ")", 1);
}

/* 0 written, 1 o (or something inside it) has no serialised form (w->bad), -1 error. */
static int write_const(CW *w, PyObject *o, int depth)
{
    Buf *b = w->b;
    if (depth > MAX_DEPTH) {
        w->bad = o;
        return 1;
    }
    if (o == Py_None)
        return buf_puts(b, "None");
    if (o == Py_True || o == Py_False)
        return buf_puts(b, o == Py_True ? "True" : "False");
    if (o == Py_Ellipsis)
        return buf_puts(b, "Ellipsis");
    if (PyLong_CheckExact(o)) {
        PyObject *s = PyObject_Str(o);
        const char *t = s ? PyUnicode_AsUTF8(s) : NULL;
        int r = t ? buf_puts(b, t) : -1;
        Py_XDECREF(s);
        return r;
    }
    if (PyUnicode_CheckExact(o))
        return buf_quoted(b, o);
    if (PyFloat_CheckExact(o))
        return buf_puts(b, "(float ") < 0 || write_hex_float(b, PyFloat_AS_DOUBLE(o)) < 0 ? -1 : buf_puts(b, ")");
    if (PyComplex_CheckExact(o)) {
        Py_complex c = PyComplex_AsCComplex(o);
        if (buf_puts(b, "(complex ") < 0 || write_hex_float(b, c.real) < 0 || buf_puts(b, " ") < 0 ||
            write_hex_float(b, c.imag) < 0)
            return -1;
        return buf_puts(b, ")");
    }
    if (PyBytes_CheckExact(o))
        return buf_puts(b, "(bytes ") < 0 || write_b64(b, o) < 0 ? -1 : buf_puts(b, ")");
    if (PyTuple_CheckExact(o))
        return write_items(w, "tuple", o, depth);
    if (PyList_CheckExact(o))
        return write_items(w, "list", o, depth);
    if (PySlice_Check(o) || Py_IS_TYPE(o, &PyRange_Type)) {
        int is_slice = PySlice_Check(o);
        PyObject *t = is_slice ? Py_BuildValue("(OOO)", ((PySliceObject *)o)->start, ((PySliceObject *)o)->stop,
                                               ((PySliceObject *)o)->step)
                               : PyObject_CallMethod(o, "__reduce__", NULL);
        if (!t)
            return -1;
        PyObject *items = is_slice ? Py_NewRef(t) : Py_NewRef(PyTuple_GET_ITEM(t, 1));
        Py_DECREF(t);
        int r = write_items(w, is_slice ? "slice" : "range", items, depth);
        Py_DECREF(items);
        return r;
    }
    if (Py_IS_TYPE(o, &SjGraphRef_Type)) {
        SjRefObject *r = (SjRefObject *)o;
        const char *k = PyUnicode_AsUTF8(r->kind);
        return k ? write_ref(w, k, r->data, r->repr, r->name, depth) : -1;
    }
    int kind = 0;
    PyObject *data = NULL;
    int r = ref_describe(o, &kind, &data);
    if (r < 0 && PyErr_ExceptionMatches(PyExc_TypeError)) {
        sj_err_clear();
        r = 1;
    }
    if (r) {
        if (r > 0)
            w->bad = o;
        return r;
    }
    int callable = kind == RK_ROW || kind == RK_GLOBAL || kind == RK_METHOD || kind == RK_TORCH_OP;
    PyObject *name = callable ? graph_target_name(o) : NULL;
    int by_name = callable && graph_const_by_name(o);
    PyObject *repr = by_name ? NULL : PyObject_Repr(o);
    r = (name || !callable) && (repr || by_name) ? write_ref(w, serial_ref_kind_names[kind], data, repr, name, depth)
                                                 : -1;
    Py_DECREF(data);
    Py_XDECREF(repr);
    Py_XDECREF(name);
    return r;
}

/* ------------------------------------------------------------- the writer ---- */

/* "node 5 (op 'add', f.py:12)": a new str naming the first node that refers to constant c. */
static int arg_uses_const(Graph *g, const Arg *a, int32_t c, int depth)
{
    if (a->kind == ARG_CONST)
        return a->a == c;
    if ((a->kind == ARG_LIST || a->kind == ARG_TUPLE) && depth < MAX_DEPTH)
        for (int32_t i = 0; i < a->n; i++)
            if (arg_uses_const(g, &g->pool[a->a + i], c, depth + 1))
                return 1;
    return 0;
}

static PyObject *const_user(Graph *g, int32_t c)
{
    for (int32_t ni = 0; ni < g->nnodes; ni++) {
        const Node *nd = &g->nodes[ni];
        int uses = nd->target == c || nd->kwnames == c || nd->where == c || nd->source == c;
        for (int32_t i = 0; i < nd->nargs && !uses; i++)
            uses = arg_uses_const(g, &g->pool[nd->args + i], c, 0);
        for (int32_t i = 0; i < nd->nkw && !uses; i++)
            uses = arg_uses_const(g, &g->pool[nd->kwargs + i], c, 0);
        for (int32_t i = 0; i < nd->nbound && !uses; i++)
            uses = arg_uses_const(g, &g->pool[nd->bound + i], c, 0);
        if (!uses)
            continue;
        const char *op = nd->op == OP_INPUT ? "input" : op_info[nd->op].name;
        if (nd->where >= 0) {
            PyObject *w = PyList_GET_ITEM(g->consts, nd->where);
            return PyUnicode_FromFormat("node %d (op '%s', %S:%S)", (int)ni, op, PyTuple_GET_ITEM(w, 0),
                                        PyTuple_GET_ITEM(w, 1));
        }
        return PyUnicode_FromFormat("node %d (op '%s')", (int)ni, op);
    }
    return PyUnicode_FromString(c == g->grad_query ? "the graph's grad-mode query" : "no node");
}

/* Expressions of the env in the order they are written: every symbol by slot, then the
 * others operands first. local[id] is a node's place, -1 when not written. */
typedef struct {
    SymNode **v;
    int32_t n, cap;
    int32_t *local;
} Exprs;

static int exprs_add(Exprs *x, SymNode *e)
{
    if (x->local[e->id] >= 0)
        return 0;
    for (uint32_t i = 0; i < e->nargs; i++)
        if (exprs_add(x, e->args[i]) < 0)
            return -1;
    if (x->n == x->cap) {
        int32_t cap = x->cap ? x->cap * 2 : 64;
        SymNode **v = PyMem_Realloc(x->v, (size_t)cap * sizeof *v);
        if (!v) {
            PyErr_NoMemory();
            return -1;
        }
        x->v = v;
        x->cap = cap;
    }
    x->local[e->id] = x->n;
    x->v[x->n++] = e;
    return 0;
}

static int collect_exprs(Graph *g, Exprs *x)
{
    if (!g->env)
        return 0;
    x->local = PyMem_Malloc(((size_t)sym_env_nnodes(g->env) + 1) * sizeof(int32_t));
    if (!x->local) {
        PyErr_NoMemory();
        return -1;
    }
    memset(x->local, 0xff, ((size_t)sym_env_nnodes(g->env) + 1) * sizeof(int32_t));
    for (int32_t s = 0; s < sym_env_nsymbols(g->env); s++)
        if (exprs_add(x, sym_env_symbol_at(g->env, s)) < 0)
            return -1;
    for (int32_t v = 0; v < g->nvalues; v++)
        for (int i = 0; i < g->values[v].meta.ndim; i++)
            if (g->values[v].meta.sym[i] && exprs_add(x, g->values[v].meta.sym[i]) < 0)
                return -1;
    return 0;
}

static int write_expr(Buf *b, const Exprs *x, int32_t id)
{
    SymNode *e = x->v[id];
    if (buf_printf(b, "expr %d %s", (int)id, sym_kind_name((SymKind)e->kind)) < 0)
        return -1;
    switch (e->kind) {
    case SK_SYMBOL:
    case SK_UNBACKED:
        if (buf_printf(b, " %lld", (long long)e->value) < 0 ||
            (e->kind == SK_SYMBOL && buf_printf(b, " %lld", (long long)e->hint) < 0) || buf_puts(b, " ") < 0 ||
            buf_bound(b, e->range.lo) < 0 || buf_puts(b, " ") < 0 || buf_bound(b, e->range.hi) < 0)
            return -1;
        break;
    case SK_CONST:
    case SK_BOOL:
        if (buf_printf(b, " %lld", (long long)e->value) < 0)
            return -1;
        break;
    default:
        for (uint32_t i = 0; i < e->nargs; i++)
            if (buf_printf(b, " %d", (int)x->local[e->args[i]->id]) < 0)
                return -1;
    }
    return buf_puts(b, "\n");
}

const char *const serial_arg_kind_names[ARG_ABSENT + 1] = {"value", "const", "list", "tuple", "absent"};

static int write_value(Buf *b, Graph *g, const Exprs *x, int32_t v)
{
    const Value *val = &g->values[v];
    const TensorMeta *m = &val->meta;
    if (buf_printf(b, "value %d %d %d %s %s [", (int)v, (int)val->node, (int)val->index,
                   m->lib == LIB_TORCH ? "torch" : "numpy", m->dtype < DT_COUNT ? dtype_info[m->dtype].name : "?") < 0)
        return -1;
    for (int i = 0; i < m->ndim; i++) {
        if (i && buf_puts(b, ",") < 0)
            return -1;
        if (m->sym[i] && buf_printf(b, "e%d:", (int)x->local[m->sym[i]->id]) < 0)
            return -1;
        if (buf_printf(b, "%lld", (long long)m->size[i]) < 0)
            return -1;
    }
    return buf_printf(b, "] np_scalar=%d requires_grad=%d symint=%d\n", m->np_scalar, m->requires_grad, m->symint);
}

static int write_row(Buf *b, int row)
{
    if (row < 0)
        return buf_puts(b, "-");
    int k = 0;   /* the rows before this one with the same path */
    for (int i = 0; i < row; i++)
        k += strcmp(callable_rows[i].path, callable_rows[row].path) == 0;
    return k ? buf_printf(b, "%s#%d", callable_rows[row].path, k) : buf_puts(b, callable_rows[row].path);
}

static int write_node(Buf *b, Graph *g, int32_t ni)
{
    const Node *nd = &g->nodes[ni];
    if (buf_printf(b, "node %d %s flags=%d target=%d args=%d,%d kw=%d,%d kwnames=%d out=%d,%d where=%d source=%d row=",
                   (int)ni, nd->op == OP_INPUT ? "input" : op_info[nd->op].name, nd->flags, (int)nd->target,
                   (int)nd->args, (int)nd->nargs, (int)nd->kwargs, (int)nd->nkw, (int)nd->kwnames, (int)nd->first_value,
                   (int)nd->nout, (int)nd->where, (int)nd->source) < 0)
        return -1;
    if (write_row(b, nd->row) < 0)
        return -1;
    return buf_printf(b, " bound=%d,%d\n", (int)nd->bound, (int)nd->nbound);
}

static int write_ids(Buf *b, const char *tag, const int32_t *ids, int32_t n)
{
    if (buf_puts(b, tag) < 0)
        return -1;
    for (int32_t i = 0; i < n; i++)
        if (buf_printf(b, " %d", (int)ids[i]) < 0)
            return -1;
    return buf_puts(b, "\n");
}

static int write_consts(Buf *b, Graph *g)
{
    CW w = {b, 1, NULL};
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(g->consts); i++) {
        if (buf_printf(b, "const %d ", (int)i) < 0)
            return -1;
        int r = write_const(&w, PyList_GET_ITEM(g->consts, i), 0);
        if (r < 0)
            return -1;
        if (r > 0) {
            PyObject *user = const_user(g, (int32_t)i);
            PyObject *mod = user ? PyObject_GetAttrString((PyObject *)Py_TYPE(w.bad), "__module__") : NULL;
            PyObject *qn = mod ? PyType_GetQualName(Py_TYPE(w.bad)) : NULL;
            if (qn)
                PyErr_Format(PyExc_TypeError,
                             "shapejit: cannot serialise the graph: constant %d of %U is a %S.%S object (%.200R), "
                             "which is neither a plain value, a library object nor a callable reachable by "
                             "its module and name",
                             (int)i, user, mod, qn, w.bad);
            Py_XDECREF(user);
            Py_XDECREF(mod);
            Py_XDECREF(qn);
            return -1;
        }
        if (buf_puts(b, "\n") < 0)
            return -1;
    }
    return 0;
}

PyObject *graph_serialize(Graph *g, PyObject *name)
{
    Buf b = {NULL, 0, 0};
    Exprs x = {NULL, 0, 0, NULL};
    PyObject *res = NULL;
    if (collect_exprs(g, &x) < 0)
        goto done;
    if (buf_printf(&b, "shapejit-graph %d\nname ", SERIAL_VERSION) < 0 || buf_quoted(&b, name) < 0 ||
        buf_printf(&b,
                   "\ngraph nodes=%d values=%d pool=%d consts=%d inputs=%d outputs=%d exprs=%d "
                   "has_mutation=%d grad_query=%d env=%d\n",
                   (int)g->nnodes, (int)g->nvalues, (int)g->npool, (int)PyList_GET_SIZE(g->consts), (int)g->ninputs,
                   (int)g->noutputs, (int)x.n, g->has_mutation ? 1 : 0, (int)g->grad_query, g->env != NULL) < 0)
        goto done;
    for (int32_t i = 0; i < x.n; i++)
        if (write_expr(&b, &x, i) < 0)
            goto done;
    if (write_consts(&b, g) < 0)
        goto done;
    for (int32_t v = 0; v < g->nvalues; v++)
        if (write_value(&b, g, &x, v) < 0)
            goto done;
    for (int32_t i = 0; i < g->npool; i++) {
        const Arg *a = &g->pool[i];
        if (buf_printf(&b, "pool %d %s %d %d\n", (int)i, a->kind <= ARG_ABSENT ? serial_arg_kind_names[a->kind] : "?",
                       (int)a->a, (int)a->n) < 0)
            goto done;
    }
    for (int32_t ni = 0; ni < g->nnodes; ni++)
        if (write_node(&b, g, ni) < 0)
            goto done;
    if (write_ids(&b, "inputs", g->inputs, g->ninputs) < 0 || write_ids(&b, "outputs", g->outputs, g->noutputs) < 0 ||
        buf_puts(&b, "end\n") < 0)
        goto done;
    res = PyUnicode_DecodeASCII(b.p, (Py_ssize_t)b.n, NULL);
done:
    PyMem_Free(b.p);
    PyMem_Free(x.v);
    PyMem_Free(x.local);
    return res;
}

/* ------------------------------------------------------------ comparison ---- */

/* 1 when two constants have the same serialised form (repr and name aside), or are the
 * same object; 0 when not; -1 on error. */
static int const_equal(PyObject *x, PyObject *y)
{
    if (x == y)
        return 1;
    Buf bx = {NULL, 0, 0}, by = {NULL, 0, 0};
    CW wx = {&bx, 0, NULL}, wy = {&by, 0, NULL};
    int rx = write_const(&wx, x, 0);
    int ry = rx < 0 ? -1 : write_const(&wy, y, 0);
    int eq =
        rx < 0 || ry < 0 ? -1 : (rx == 0 && ry == 0 && bx.n == by.n && (bx.n == 0 || memcmp(bx.p, by.p, bx.n) == 0));
    PyMem_Free(bx.p);
    PyMem_Free(by.p);
    return eq;
}

static int const_index_equal(Graph *a, int32_t i, Graph *b, int32_t j)
{
    if (i < 0 || j < 0)
        return i == j;
    return const_equal(PyList_GET_ITEM(a->consts, i), PyList_GET_ITEM(b->consts, j));
}

static int sym_equal(const SymNode *x, const SymNode *y)
{
    if (!x || !y)
        return x == y;
    if (x->kind != y->kind || x->value != y->value || x->nargs != y->nargs)
        return 0;
    if (sym_is_symbol(x) && (x->hint != y->hint || x->range.lo != y->range.lo || x->range.hi != y->range.hi))
        return 0;
    for (uint32_t i = 0; i < x->nargs; i++)
        if (!sym_equal(x->args[i], y->args[i]))
            return 0;
    return 1;
}

static int meta_equal(const TensorMeta *x, const TensorMeta *y)
{
    if (x->lib != y->lib || x->dtype != y->dtype || x->ndim != y->ndim || x->np_scalar != y->np_scalar ||
        x->requires_grad != y->requires_grad || x->symint != y->symint)
        return 0;
    for (int i = 0; i < x->ndim; i++)
        if (x->size[i] != y->size[i] || !sym_equal(x->sym[i], y->sym[i]))
            return 0;
    return 1;
}

static int node_equal(Graph *a, const Node *x, Graph *b, const Node *y)
{
    if (x->op != y->op || x->flags != y->flags || x->args != y->args || x->nargs != y->nargs ||
        x->kwargs != y->kwargs || x->nkw != y->nkw || x->first_value != y->first_value || x->nout != y->nout ||
        x->row != y->row || x->bound != y->bound || x->nbound != y->nbound)
        return 0;
    int r;
    if ((r = const_index_equal(a, x->target, b, y->target)) != 1 ||
        (r = const_index_equal(a, x->kwnames, b, y->kwnames)) != 1 ||
        (r = const_index_equal(a, x->where, b, y->where)) != 1)
        return r;
    return const_index_equal(a, x->source, b, y->source);
}

int graph_equal(Graph *a, Graph *b)
{
    if (a->nnodes != b->nnodes || a->nvalues != b->nvalues || a->npool != b->npool || a->ninputs != b->ninputs ||
        a->noutputs != b->noutputs || !a->has_mutation != !b->has_mutation)
        return 0;
    /* the arrays are NULL while empty: memcmp must not see a NULL even for 0 bytes */
    if ((a->ninputs && memcmp(a->inputs, b->inputs, (size_t)a->ninputs * sizeof(int32_t)) != 0) ||
        (a->noutputs && memcmp(a->outputs, b->outputs, (size_t)a->noutputs * sizeof(int32_t)) != 0))
        return 0;
    int r = const_index_equal(a, a->grad_query, b, b->grad_query);
    for (int32_t i = 0; i < a->nnodes && r == 1; i++)
        r = node_equal(a, &a->nodes[i], b, &b->nodes[i]);
    for (int32_t i = 0; i < a->nvalues && r == 1; i++) {
        const Value *x = &a->values[i], *y = &b->values[i];
        r = x->node == y->node && x->index == y->index && meta_equal(&x->meta, &y->meta);
    }
    for (int32_t i = 0; i < a->npool && r == 1; i++) {
        const Arg *x = &a->pool[i], *y = &b->pool[i];
        if (x->kind != y->kind || x->n != y->n)
            r = 0;
        else
            r = x->kind == ARG_CONST ? const_index_equal(a, x->a, b, y->a) : x->a == y->a;
    }
    return r;
}

/* ---------------------------------------------------------------- linking ---- */

static int holds_ref(PyObject *o, int depth)
{
    if (Py_IS_TYPE(o, &SjGraphRef_Type))
        return 1;
    if ((PyTuple_CheckExact(o) || PyList_CheckExact(o)) && depth < MAX_DEPTH)
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(o); i++)
            if (holds_ref(PySequence_Fast_GET_ITEM(o, i), depth + 1))
                return 1;
    return 0;
}

int graph_is_linked(Graph *g)
{
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(g->consts); i++)
        if (holds_ref(PyList_GET_ITEM(g->consts, i), 0))
            return 0;
    return 1;
}

/* New reference: the library object a ref names (importing its library). */
static PyObject *ref_resolve(SjRefObject *r)
{
    const char *ks = PyUnicode_AsUTF8(r->kind);
    int kind = ks ? serial_ref_kind(ks) : -1;
    PyObject *d = r->data, *torch = NULL, *np = NULL, *res = NULL;
    Py_ssize_t nd = PyTuple_GET_SIZE(d);
    if (kind < 0 || (serial_ref_ndata[kind] >= 0 && nd != serial_ref_ndata[kind]))
        return PyErr_Format(PyExc_ValueError, "shapejit: a graph reference %R with malformed data", r), NULL;
    const char *lib = NULL;
#define X(e, name, l, ndata) \
    if (kind == e) \
        lib = l;
    REF_KINDS(X)
#undef X
    if (lib && strcmp(lib, "torch") == 0 && !(torch = PyImport_ImportModule("torch")))
        return NULL;
    if ((kind == RK_TORCH_TENSOR || (lib && strcmp(lib, "numpy") == 0)) && !(np = PyImport_ImportModule("numpy"))) {
        Py_XDECREF(torch);
        return NULL;
    }
    switch (kind) {
    case RK_TORCH_DTYPE:
    case RK_TORCH_MEMORY_FORMAT:
    case RK_TORCH_LAYOUT:
        res = PyObject_GetAttr(torch, PyTuple_GET_ITEM(d, 0));
        break;
    case RK_TORCH_DEVICE:
        res = PyObject_CallMethod(torch, "device", "O", PyTuple_GET_ITEM(d, 0));
        break;
    case RK_TORCH_SIZE:
        res = PyObject_CallMethod(torch, "Size", "(O)", d);
        break;
    case RK_TORCH_TENSOR: {
        PyObject *u8 = PyObject_GetAttrString(np, "uint8");
        PyObject *a = u8 ? PyObject_CallMethod(np, "frombuffer", "OO", PyTuple_GET_ITEM(d, 3), u8) : NULL;
        PyObject *dt = a ? PyObject_GetAttr(torch, PyTuple_GET_ITEM(d, 0)) : NULL;
        if (dt)
            Py_SETREF(a, PyObject_CallMethod(a, "copy", NULL));
        PyObject *t = dt && a ? PyObject_CallMethod(torch, "from_numpy", "O", a) : NULL;
        if (t)
            Py_SETREF(t, PyObject_CallMethod(t, "view", "O", dt));
        if (t)
            Py_SETREF(t, PyObject_CallMethod(t, "reshape", "(O)", PyTuple_GET_ITEM(d, 1)));
        if (t && PyObject_IsTrue(PyTuple_GET_ITEM(d, 2)) == 1)
            Py_XSETREF(t, PyObject_CallMethod(t, "requires_grad_", "O", Py_True));
        res = t;
        Py_XDECREF(u8);
        Py_XDECREF(a);
        Py_XDECREF(dt);
        break;
    }
    case RK_NUMPY_DTYPE:
        res = PyObject_CallMethod(np, "dtype", "O", PyTuple_GET_ITEM(d, 0));
        break;
    case RK_NUMPY_SCALAR:
    case RK_NUMPY_NDARRAY: {
        PyObject *dt = PyObject_CallMethod(np, "dtype", "O", PyTuple_GET_ITEM(d, 0));
        PyObject *a = dt ? PyObject_CallMethod(np, "frombuffer", "OO", PyTuple_GET_ITEM(d, nd - 1), dt) : NULL;
        if (a && kind == RK_NUMPY_SCALAR)
            res = PySequence_GetItem(a, 0);
        else if (a) {
            PyObject *sh = PyObject_CallMethod(a, "reshape", "(O)", PyTuple_GET_ITEM(d, 1));
            res = sh ? PyObject_CallMethod(sh, "copy", NULL) : NULL;
            Py_XDECREF(sh);
        }
        Py_XDECREF(dt);
        Py_XDECREF(a);
        break;
    }
    case RK_ROW: {
        const char *path = PyUnicode_Check(PyTuple_GET_ITEM(d, 0)) ? PyUnicode_AsUTF8(PyTuple_GET_ITEM(d, 0)) : NULL;
        int row = path ? callables_path_row(path) : -1;
        if (row < 0) {
            PyErr_Format(PyExc_ValueError, "shapejit: no callables row %R", PyTuple_GET_ITEM(d, 0));
            break;
        }
        int k = callable_rows[row].kind;
        const char *mod = k == CK_TORCH || k == CK_TENSOR_METHOD    ? "torch"
                          : k == CK_NUMPY || k == CK_NDARRAY_METHOD ? "numpy"
                                                                    : "operator";
        PyObject *m = PyImport_ImportModule(mod);
        Py_XDECREF(m);
        if (!m || libs_refresh() < 0 || callables_init() < 0)
            break;
        res = Py_XNewRef(callables_object(row));
        if (!res)
            PyErr_Format(PyExc_ImportError, "shapejit: callables row %s did not resolve", path);
        break;
    }
    case RK_TORCH_OP: {
        /* torch.ops.<namespace>.<name>.<overload>: the library that registers the operator
         * must be loaded, as for a global */
        if (!PyUnicode_Check(PyTuple_GET_ITEM(d, 0)) || !PyUnicode_Check(PyTuple_GET_ITEM(d, 1)) ||
            !PyUnicode_Check(PyTuple_GET_ITEM(d, 2))) {
            PyErr_Format(PyExc_ValueError, "shapejit: a graph reference %R with malformed data", (PyObject *)r);
            break;
        }
        PyObject *path = PyUnicode_FromFormat("ops.%U.%U.%U", PyTuple_GET_ITEM(d, 0), PyTuple_GET_ITEM(d, 1),
                                              PyTuple_GET_ITEM(d, 2));
        res = path ? walk_path(torch, path) : NULL;
        Py_XDECREF(path);
        break;
    }
    case RK_GLOBAL:
    case RK_METHOD: {
        PyObject *m = PyImport_Import(PyTuple_GET_ITEM(d, 0));
        res = m ? walk_path(m, PyTuple_GET_ITEM(d, 1)) : NULL;
        Py_XDECREF(m);
        if (res && kind == RK_METHOD)
            Py_SETREF(res, PyObject_GetAttr(res, PyTuple_GET_ITEM(d, 2)));
        break;
    }
    }
    Py_XDECREF(torch);
    Py_XDECREF(np);
    return res;
}

/* New reference: o with every ref inside it resolved. */
static PyObject *resolve(PyObject *o, int depth)
{
    if (Py_IS_TYPE(o, &SjGraphRef_Type))
        return ref_resolve((SjRefObject *)o);
    if (!holds_ref(o, depth))
        return Py_NewRef(o);
    Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
    PyObject *out = PyTuple_CheckExact(o) ? PyTuple_New(n) : PyList_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *it = resolve(PySequence_Fast_GET_ITEM(o, i), depth + 1);
        if (!it) {
            Py_CLEAR(out);
            break;
        }
        if (PyTuple_CheckExact(o))
            PyTuple_SET_ITEM(out, i, it);
        else
            PyList_SET_ITEM(out, i, it);
    }
    return out;
}

int graph_link(Graph *g)
{
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(g->consts); i++) {
        PyObject *c = PyList_GET_ITEM(g->consts, i);
        if (!holds_ref(c, 0))
            continue;
        PyObject *r = resolve(c, 0);
        if (!r || PyList_SetItem(g->consts, i, r) < 0)
            return -1;
    }
    return 0;
}
