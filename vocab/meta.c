/* Tensor metadata from live values, and dtype <-> Python object conversion.
 *
 * torch is reached only through Python attributes and only when the user already imported
 * it (it is in sys.modules): shapejit must stay cheap for numpy-only programs. numpy is
 * reached through its C API (vocab/np.h). */
#include "np.h"

#include <stdio.h>
#include <string.h>

#include "meta.h"
#include "../core/errors.h"

const DTypeInfo dtype_info[DT_COUNT] = {
#define X(e, name, size, cat) [e] = {name, size, cat},
#include "dtypes.def"
#undef X
};

DType meta_torch_default_float = DT_F32;

/* ---- torch objects, cached forever once torch is imported (strong references) ---- */
static PyObject *torch_mod;                 /* the torch module */
static PyObject *torch_tensor_type;         /* torch.Tensor */
static PyObject *torch_strided;             /* torch.strided */
static PyObject *torch_dtypes[DT_COUNT];    /* torch.float32 ...; NULL until first use */
static PyObject *np_dtypes[DT_COUNT];       /* numpy.dtype('float32') ... */

/* Borrowed reference to torch, or NULL (no exception) when the user has not imported it.
 * Returns NULL with an exception set only on internal errors (*failed = 1). */
static PyObject *torch_if_loaded(int *failed)
{
    *failed = 0;
    if (torch_mod)
        return torch_mod;
    PyObject *mods = PySys_GetObject("modules");    /* borrowed */
    if (!mods)
        return NULL;
    PyObject *t = PyDict_GetItemString(mods, "torch"); /* borrowed */
    if (!t)
        return NULL;
    /* A half-imported torch (we are inside its own import) has no Tensor yet: wait. */
    PyObject *tensor = PyObject_GetAttrString(t, "Tensor");
    if (!tensor) {
        sj_err_clear();
        return NULL;
    }
    PyObject *strided = PyObject_GetAttrString(t, "strided");
    if (!strided) {
        Py_DECREF(tensor);
        sj_err_clear();
        return NULL;
    }
    for (int d = 0; d < DT_COUNT; d++) {
        PyObject *o = PyObject_GetAttrString(t, dtype_info[d].name);  /* new */
        if (!o) {
            Py_DECREF(tensor);
            Py_DECREF(strided);
            for (int k = 0; k < d; k++)
                Py_CLEAR(torch_dtypes[k]);
            *failed = 1;
            return NULL;
        }
        torch_dtypes[d] = o;
    }
    Py_INCREF(t);
    torch_mod = t;
    torch_tensor_type = tensor;
    torch_strided = strided;
    return torch_mod;
}

static int np_typenum(DType d)
{
    switch (d) {
    case DT_BOOL:
        return NPY_BOOL;
    case DT_U8:
        return NPY_UINT8;
    case DT_U16:
        return NPY_UINT16;
    case DT_U32:
        return NPY_UINT32;
    case DT_U64:
        return NPY_UINT64;
    case DT_I8:
        return NPY_INT8;
    case DT_I16:
        return NPY_INT16;
    case DT_I32:
        return NPY_INT32;
    case DT_I64:
        return NPY_INT64;
    case DT_F16:
        return NPY_FLOAT16;
    case DT_F32:
        return NPY_FLOAT32;
    case DT_F64:
        return NPY_FLOAT64;
    case DT_C64:
        return NPY_COMPLEX64;
    case DT_C128:
        return NPY_COMPLEX128;
    default:
        return -1;    /* bfloat16: numpy has none */
    }
}

/* numpy's kind character of a dtype (numpy.dtype.kind): b, u, i, f or c. */
static char np_kind(DType d)
{
    switch (dtype_info[d].category) {
    case CAT_BOOL:
        return 'b';
    case CAT_INT:
        return dtype_is_unsigned(d) ? 'u' : 'i';
    case CAT_FLOAT:
        return 'f';
    default:
        return 'c';
    }
}

/* Maps by kind and size rather than type number: numpy has two int64 numbers (long and
 * longlong) that are the same type for us. Non-native byte order is refused because a
 * graph computes in native order. Returns 0 and sets *out, or 1. */
static int dtype_from_descr(PyArray_Descr *descr, DType *out)
{
    if (descr->byteorder == '>' && PY_LITTLE_ENDIAN)
        return 1;
    if (descr->byteorder == '<' && !PY_LITTLE_ENDIAN)
        return 1;
    int size = (int)PyDataType_ELSIZE(descr);
    for (int d = 0; d < DT_COUNT; d++)
        if (np_typenum((DType)d) >= 0 && np_kind((DType)d) == descr->kind && dtype_info[d].itemsize == size) {
            *out = (DType)d;
            return 0;
        }
    return 1;
}

/* ---- torch tensors ---- */

/* The first n items of the sequence seq (borrowed; a torch.Size or a tuple of Python ints)
 * into out. 0, or -1 with an exception set. */
static int read_ints(PyObject *seq, Py_ssize_t n, int64_t *out)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = PySequence_GetItem(seq, i);    /* new */
        if (!s)
            return -1;
        long long v = PyLong_AsLongLong(s);
        Py_DECREF(s);
        if (v == -1 && PyErr_Occurred())
            return -1;
        out[i] = v;
    }
    return 0;
}

static int torch_meta(PyObject *value, TensorMeta *out, int64_t *strides, const char **why)
{
    int rc = -1;
    PyObject *dt = NULL, *shape = NULL, *dev = NULL, *devtype = NULL, *layout = NULL, *rg = NULL, *st = NULL;
    if (!(dt = PyObject_GetAttrString(value, "dtype")))
        goto done;
    DType d;
    int r = dtype_from_py(dt, LIB_TORCH, &d);
    if (r < 0)
        goto done;
    if (r == 1) {
        *why = "tensor dtype not supported";
        rc = 1;
        goto done;
    }
    if (!(layout = PyObject_GetAttrString(value, "layout")))
        goto done;
    if (layout != torch_strided) {
        *why = "sparse or non-strided tensor";
        rc = 1;
        goto done;
    }
    if (!(dev = PyObject_GetAttrString(value, "device")))
        goto done;
    if (!(devtype = PyObject_GetAttrString(dev, "type")))
        goto done;
    if (!PyUnicode_Check(devtype) || PyUnicode_CompareWithASCIIString(devtype, "cpu") != 0) {
        *why = "tensor is not on the cpu device";
        rc = 1;
        goto done;
    }
    if (!(shape = PyObject_GetAttrString(value, "shape")))
        goto done;
    Py_ssize_t nd = PySequence_Size(shape);
    if (nd < 0)
        goto done;
    if (nd > SJ_MAX_RANK) {
        *why = "tensor rank above 8";
        rc = 1;
        goto done;
    }
    memset(out, 0, sizeof *out);
    out->lib = LIB_TORCH;
    out->dtype = (unsigned char)d;
    out->ndim = (unsigned char)nd;
    if (read_ints(shape, nd, out->size) < 0)
        goto done;
    if (!(rg = PyObject_GetAttrString(value, "requires_grad")))
        goto done;
    int t = PyObject_IsTrue(rg);
    if (t < 0)
        goto done;
    out->requires_grad = (unsigned char)t;
    if (strides) {
        if (!(st = PyObject_CallMethod(value, "stride", NULL)) || read_ints(st, nd, strides) < 0)
            goto done;
    }
    rc = 0;
done:
    Py_XDECREF(dt);
    Py_XDECREF(shape);
    Py_XDECREF(dev);
    Py_XDECREF(devtype);
    Py_XDECREF(layout);
    Py_XDECREF(rg);
    Py_XDECREF(st);
    return rc;
}

int meta_from_value(PyObject *value, TensorMeta *out, int64_t *strides, const char **why)
{
    *why = NULL;
    if (!sj_np_ready())
        goto not_numpy;
    if (PyArray_Check(value)) {
        PyArrayObject *arr = (PyArrayObject *)value;
        DType d;
        if (dtype_from_descr(PyArray_DESCR(arr), &d)) {
            *why = "array dtype not supported";
            return 1;
        }
        int nd = PyArray_NDIM(arr);
        if (nd > SJ_MAX_RANK) {
            *why = "array rank above 8";
            return 1;
        }
        memset(out, 0, sizeof *out);
        out->lib = LIB_NUMPY;
        out->dtype = (unsigned char)d;
        out->ndim = (unsigned char)nd;
        npy_intp *dims = PyArray_DIMS(arr);
        npy_intp *bst = PyArray_STRIDES(arr);
        npy_intp item = PyArray_ITEMSIZE(arr);
        for (int i = 0; i < nd; i++) {
            out->size[i] = dims[i];
            if (strides) {
                if (bst[i] % item != 0) {
                    *why = "array strides are not a multiple of its itemsize";
                    return 1;
                }
                strides[i] = bst[i] / item;
            }
        }
        return 0;
    }
    if (PyArray_IsScalar(value, Generic)) {
        PyArray_Descr *descr = PyArray_DescrFromScalar(value);    /* new */
        if (!descr)
            return -1;
        DType d;
        int bad = dtype_from_descr(descr, &d);
        Py_DECREF(descr);
        if (bad) {
            *why = "numpy scalar type not supported";
            return 1;
        }
        memset(out, 0, sizeof *out);
        out->lib = LIB_NUMPY;
        out->dtype = (unsigned char)d;
        out->np_scalar = 1;
        return 0;
    }
not_numpy:;
    int failed;
    PyObject *torch = torch_if_loaded(&failed);    /* borrowed */
    if (failed)
        return -1;
    if (torch) {
        int is = PyObject_IsInstance(value, torch_tensor_type);
        if (is < 0)
            return -1;
        if (is)
            return torch_meta(value, out, strides, why);
    }
    *why = "not a tensor or array";
    return 1;
}

int meta_matches_value(const TensorMeta *meta, PyObject *value)
{
    TensorMeta m;
    const char *why;
    int r = meta_from_value(value, &m, NULL, &why);
    if (r < 0)
        return -1;
    if (r == 1)
        return 0;
    if (m.lib != meta->lib || m.dtype != meta->dtype || m.ndim != meta->ndim || m.np_scalar != meta->np_scalar)
        return 0;
    for (int i = 0; i < m.ndim; i++)
        if (m.size[i] != meta->size[i])
            return 0;
    return 1;
}

/* Python's own types mean the same thing in both libraries: float is float64, int is
 * int64 (numpy's default int on 64-bit Linux), complex is complex128. */
static int dtype_from_python_type(PyObject *obj, DType *out)
{
    if (obj == (PyObject *)&PyBool_Type) {
        *out = DT_BOOL;
        return 0;
    }
    if (obj == (PyObject *)&PyLong_Type) {
        *out = DT_I64;
        return 0;
    }
    if (obj == (PyObject *)&PyFloat_Type) {
        *out = DT_F64;
        return 0;
    }
    if (obj == (PyObject *)&PyComplex_Type) {
        *out = DT_C128;
        return 0;
    }
    return 1;
}

int dtype_from_py(PyObject *obj, Lib lib, DType *out)
{
    if (!dtype_from_python_type(obj, out))
        return 0;
    if (lib == LIB_TORCH) {
        int failed;
        if (!torch_if_loaded(&failed))
            return failed ? -1 : 1;
        for (int d = 0; d < DT_COUNT; d++)
            if (torch_dtypes[d] == obj && dtype_in_torch((DType)d)) {
                *out = (DType)d;
                return 0;
            }
        return 1;
    }
    if (obj == Py_None || !sj_np_ready())   /* numpy would read None as float64; we mean "not given" */
        return 1;
    if (PyArray_DescrCheck(obj))
        return dtype_from_descr((PyArray_Descr *)obj, out);
    /* Strings ("float32", "f4") and scalar types (np.float32) go through numpy's own
     * converter; anything it rejects is simply not a dtype. */
    if (!PyUnicode_Check(obj) && !PyType_Check(obj))
        return 1;
    PyArray_Descr *descr = NULL;
    if (!PyArray_DescrConverter(obj, &descr)) {    /* descr: new reference */
        sj_err_clear();
        return 1;
    }
    int r = dtype_from_descr(descr, out);
    Py_DECREF(descr);
    return r;
}

PyObject *dtype_to_py(DType d, Lib lib)
{
    if ((int)d < 0 || d >= DT_COUNT) {
        PyErr_SetString(PyExc_SystemError, "dtype_to_py: bad dtype");
        return NULL;
    }
    if (lib == LIB_TORCH) {
        int failed;
        if (!torch_if_loaded(&failed)) {
            if (!failed)
                PyErr_SetString(PyExc_RuntimeError, "torch is not imported");
            return NULL;
        }
        Py_INCREF(torch_dtypes[d]);
        return torch_dtypes[d];
    }
    if (!np_dtypes[d]) {
        if (!sj_np_ready()) {
            PyErr_SetString(PyExc_RuntimeError, "numpy is not imported");
            return NULL;
        }
        int tn = np_typenum(d);
        if (tn < 0) {
            PyErr_Format(PyExc_ValueError, "numpy has no dtype %s", dtype_info[d].name);
            return NULL;
        }
        np_dtypes[d] = (PyObject *)PyArray_DescrFromType(tn);    /* new, kept forever */
        if (!np_dtypes[d])
            return NULL;
    }
    Py_INCREF(np_dtypes[d]);
    return np_dtypes[d];
}

int meta_refresh_torch_default(void)
{
    int failed;
    PyObject *torch = torch_if_loaded(&failed);    /* borrowed */
    if (failed)
        return -1;
    if (!torch) {
        meta_torch_default_float = DT_F32;
        return 0;
    }
    PyObject *dt = PyObject_CallMethod(torch, "get_default_dtype", NULL);    /* new */
    if (!dt)
        return -1;
    DType d;
    int r = dtype_from_py(dt, LIB_TORCH, &d);
    Py_DECREF(dt);
    if (r < 0)
        return -1;
    meta_torch_default_float = (r == 0 && dtype_info[d].category == CAT_FLOAT) ? d : DT_F32;
    return 0;
}

MetaSymPrinter meta_sym_printer;

void meta_format(const TensorMeta *m, char *buf, size_t n)
{
    if (n == 0)
        return;
    const char *name = m->dtype < DT_COUNT ? dtype_info[m->dtype].name : "?";
    if (m->symint) {   /* a Python scalar: the graph floats and bools of t.item(), else an int */
        snprintf(buf, n, "%s", m->dtype == DT_F64 ? "float" : m->dtype == DT_BOOL ? "bool" : "int");
        return;
    }
    if (m->np_scalar) {
        snprintf(buf, n, "%s scalar", name);
        return;
    }
    size_t used = (size_t)snprintf(buf, n, "%s[", name);
    for (int i = 0; i < m->ndim && used < n; i++) {
        const char *text = NULL;
        PyObject *p = NULL;
        if (m->sym[i] && meta_sym_printer) {   /* symbolic: its expression */
            PyObject *et, *ev, *tb;
            PyErr_Fetch(&et, &ev, &tb);
            p = meta_sym_printer(m->sym[i]);
            text = p ? PyUnicode_AsUTF8(p) : NULL;
            sj_err_clear();
            PyErr_Restore(et, ev, tb);
        }
        if (text)
            used += (size_t)snprintf(buf + used, n - used, i ? ", %s" : "%s", text);
        else
            used += (size_t)snprintf(buf + used, n - used, i ? ", %lld" : "%lld", (long long)m->size[i]);
        Py_XDECREF(p);
    }
    if (used < n)
        snprintf(buf + used, n - used, "]");
}
