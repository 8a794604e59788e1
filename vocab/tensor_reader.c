/* The tensor reader (tensor_reader.h): metadata of torch tensors straight from memory.
 *
 * What torch's headers say we should find (we read them to know what to look for; we never
 * include or build against them): a Python tensor is a THPVariable, {PyObject_HEAD;
 * at::Tensor cdata; ...}, where cdata holds the TensorImpl* that `t._cdata` returns. Inside
 * the TensorImpl are a SizesAndStrides block (a rank word, then either sizes and strides
 * inline, or for large ranks a pointer to malloc'd sizes followed by strides), a caffe2
 * TypeMeta (a uint16 index) and a DispatchKeySet (a uint64).
 *
 * None of those facts is trusted. treader_init_torch() builds probe tensors with torch's
 * Python API and finds each offset by scanning memory (bounded by the size of the objects
 * scanned), keeping only offsets at which every probe agrees with what Python says about it;
 * then it reads every probe through the fast path and compares with meta_from_value. A
 * single disagreement, a missing API or an ambiguous offset turns the fast path off for the
 * process, with the reason in _C._tensor_reader_info().
 *
 * The fast path accepts a value only when (a) its type is exactly one of the validated types
 * (torch.Tensor, torch.nn.Parameter, torch.nn.Buffer when instances have that type), and (b)
 * its dispatch key set equals one of the raw key sets seen on the dense CPU probes. (b) is
 * what keeps sparse, meta, conj/neg-bit, inference, functional, nested, mkldnn, Python-key
 * and fake tensors away: their key sets differ, so they go to meta_from_value. requires_grad
 * is not a memory fact we can validate cheaply (it lives behind autograd_meta_), so it is
 * read by calling the C getter of TensorBase's `requires_grad` getset descriptor: torch's
 * official API, without a Python-level call.
 *
 * The data pointer (treader_read_data) is found the same way: the TensorImpl holds its
 * StorageImpl* (what `t.untyped_storage()._cdata` returns) and its storage offset; the
 * StorageImpl holds the data pointer (`untyped_storage().data_ptr()`) and a flag byte that is
 * set when the data pointer must not be read plainly: a copy-on-write storage (data_ptr()
 * copies it first), or one set to throw or warn. Probes of each kind find that byte; the
 * fast path reads no storage whose byte is set, so data_ptr() runs for those as in eager.
 * Any step of this not found turns off the data pointer alone (the metadata path stays). */
#include "tensor_reader.h"
#include "np.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "../core/errors.h"
#include "../core/pyutil.h"
#if defined(__GLIBC__)
#include <malloc.h>    /* malloc_usable_size: bounds the scan of a TensorImpl */
#endif

#define TR_WINDOW 512       /* at most this many bytes of a TensorImpl are ever scanned */
#define TR_MAX_TYPES 3      /* Tensor, Parameter, Buffer */
#define TR_MAX_KEYSETS 8    /* distinct whitelisted raw key sets */
#define TR_MIN_POINTER 4096 /* an out-of-line sizes pointer below this is not one */
#define TR_STORAGE_WINDOW 256 /* at most this many bytes of a StorageImpl are ever scanned */

typedef enum { TR_UNTRIED = 0, TR_PROBING, TR_DONE } TrState;

/* Everything init learned. Offsets are bytes from the start of the object they index. */
static struct {
    TrState state;
    int fast;                              /* 1: fast path on */
    long validated;                        /* probes that agreed at init */
    char why_not[320];                     /* "" when fast, or before torch is imported */
    Py_ssize_t cdata_off;                  /* TensorImpl* inside the THPVariable */
    Py_ssize_t window;                     /* bytes of a TensorImpl that were scanned */
    Py_ssize_t keys_off;                   /* uint64 DispatchKeySet in the TensorImpl */
    Py_ssize_t sizes_off;                  /* rank word of SizesAndStrides */
    Py_ssize_t inline_rank;                /* ranks <= this are stored inline */
    Py_ssize_t dtype_off;                  /* uint16 TypeMeta index */
    uint16_t dt_index[DT_COUNT];           /* TypeMeta index of each DType */
    uint64_t keysets[TR_MAX_KEYSETS];      /* whitelist: raw key sets of dense CPU probes */
    int nkeysets;
    PyTypeObject *types[TR_MAX_TYPES];     /* strong: the exact types the fast path reads */
    int ntypes;
    PyObject *rg_descr;                    /* strong: TensorBase.requires_grad descriptor */
    getter rg_get;                         /* its C getter (kept alive by rg_descr) */
    Py_ssize_t agmeta_off;                 /* autograd_meta_ pointer, or -1: when it is NULL
                                              the tensor cannot require grad */
    void *rg_closure;
    /* the data pointer: data_fast 1 when every offset below was found and validated */
    int data_fast;
    char data_why_not[200];
    Py_ssize_t storage_off;                /* StorageImpl* in the TensorImpl */
    Py_ssize_t soffset_off;                /* int64 storage offset in the TensorImpl */
    Py_ssize_t swindow;                    /* bytes of a StorageImpl that were scanned */
    Py_ssize_t sdata_off;                  /* the data pointer in the StorageImpl */
    Py_ssize_t scheck_off;                 /* the byte set on storages data_ptr() must see */
} tr;

/* ------------------------------------------------------------- raw reads ---- */

static inline uint64_t rd64(const char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline uint16_t rd16(const char *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline const char *rdptr(const char *p)
{
    const char *v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* ------------------------------------------------------------- hot path ---- */

/* 0: *m (and strides) filled from memory; 1: not for the fast path (caller goes slow);
 * -1: the requires_grad getter raised. v is borrowed. */
__attribute__((optimize("no-tree-loop-distribute-patterns"))) static int fast_read(PyObject *v, TensorMeta *m,
                                                                                   int64_t *strides)
{
    PyTypeObject *tp = Py_TYPE(v);
    int k = 0;
    while (k < tr.ntypes && tr.types[k] != tp)
        k++;
    if (k == tr.ntypes)
        return 1;
    const char *impl = rdptr((const char *)v + tr.cdata_off);
    if (!impl)
        return 1;    /* an undefined tensor */
    uint64_t keys = rd64(impl + tr.keys_off);
    for (k = 0; k < tr.nkeysets && tr.keysets[k] != keys; k++)
        ;
    if (k == tr.nkeysets)
        return 1;
    uint16_t ix = rd16(impl + tr.dtype_off);
    int d = 0;
    while (d < DT_COUNT && (tr.dt_index[d] != ix || !dtype_in_torch((DType)d)))
        d++;
    if (d == DT_COUNT)
        return 1;    /* a dtype we do not support: meta_from_value says so */
    uint64_t rank = rd64(impl + tr.sizes_off);
    if (rank > SJ_MAX_RANK)
        return 1;    /* meta_from_value gives the "rank above 8" answer */
    const char *sz = impl + tr.sizes_off + 8;
    const char *st;
    if ((Py_ssize_t)rank <= tr.inline_rank) {
        st = sz + 8 * tr.inline_rank;
    } else {
        sz = rdptr(sz);
        if (!sz)
            return 1;
        st = sz + 8 * rank;
    }
    int g = 0;
    if (tr.agmeta_off < 0 || rdptr(impl + tr.agmeta_off)) {
        PyObject *rg = tr.rg_get(v, tr.rg_closure);    /* new */
        if (!rg)
            return -1;
        g = rg == Py_True ? 1 : rg == Py_False ? 0 : PyObject_IsTrue(rg);
        Py_DECREF(rg);
        if (g < 0)
            return -1;
    }
    /* word by word, not memset/memcpy: the guard path reads these right back, and
     * variable-length library copies defeat store-to-load forwarding (measured: about
     * 2x the cost of a whole 100-tensor dispatch) */
    m->lib = LIB_TORCH;
    m->dtype = (unsigned char)d;
    m->ndim = (unsigned char)rank;
    m->np_scalar = 0;
    m->requires_grad = (unsigned char)g;
    for (int i = 0; i < SJ_MAX_RANK; i++)
        m->size[i] = i < (int)rank ? (int64_t)rd64(sz + 8 * i) : 0;
    if (strides)
        for (int i = 0; i < (int)rank; i++)
            strides[i] = (int64_t)rd64(st + 8 * i);
    return 0;
}

/* 0 and *data: v's data pointer as v.data_ptr() gives it (NULL when it has no element);
 * 1 when it is not read here. Only for a v fast_read has just accepted (m: its answer). */
static int fast_data(PyObject *v, const TensorMeta *m, char **data)
{
    if (!tr.data_fast)
        return 1;
    const char *impl = rdptr((const char *)v + tr.cdata_off);
    const char *storage = rdptr(impl + tr.storage_off);
    if (!storage || storage[tr.scheck_off])
        return 1;
    int64_t numel = 1;
    for (int i = 0; i < m->ndim; i++)
        numel *= m->size[i];
    if (numel == 0) {
        *data = NULL;
        return 0;
    }
    const char *d = rdptr(storage + tr.sdata_off);
    if (!d)
        return 1;   /* no memory yet: data_ptr() says what eager says */
    *data = (char *)d + (int64_t)rd64(impl + tr.soffset_off) * dtype_info[m->dtype].itemsize;
    return 0;
}

/* Borrowed torch module once its import has finished, else NULL (no exception). */
static PyObject *torch_if_ready(void)
{
    static PyObject *name;    /* strong, interned "torch" */
    if (!name && !(name = PyUnicode_InternFromString("torch"))) {
        sj_err_clear();
        return NULL;
    }
    PyObject *t = PyDict_GetItemWithError(PyImport_GetModuleDict(), name);    /* borrowed */
    if (!t) {
        sj_err_clear();
        return NULL;
    }
    /* inside torch's own import the module is half-built: wait until it is done */
    PyObject *spec = PyObject_GetAttrString(t, "__spec__");    /* new */
    if (!spec) {
        sj_err_clear();
        return NULL;
    }
    PyObject *busy = PyObject_GetAttrString(spec, "_initializing");    /* new */
    Py_DECREF(spec);
    if (!busy) {
        sj_err_clear();
        return t;
    }
    int b = PyObject_IsTrue(busy);
    Py_DECREF(busy);
    if (b) {
        sj_err_clear();
        return NULL;
    }
    return t;
}

static int read_impl(PyObject *v, TensorMeta *m, int64_t *strides, const char **why, int *fast)
{
    *fast = 0;
    if (tr.state == TR_UNTRIED && !(sj_np_ready() && PyArray_Check(v)))
        treader_init_torch();
    if (tr.fast && tr.state == TR_DONE) {   /* not while another thread's probe validates */
        int r = fast_read(v, m, strides);
        if (r <= 0) {
            *why = NULL;
            *fast = r == 0;
            return r;
        }
    }
    return meta_from_value(v, m, strides, why);
}

int treader_read(PyObject *v, TensorMeta *m, int64_t *strides, const char **why)
{
    int fast;
    return read_impl(v, m, strides, why, &fast);
}

int treader_read_data(PyObject *v, TensorMeta *m, int64_t *strides, char **data, const char **why)
{
    int fast;
    int r = read_impl(v, m, strides, why, &fast);
    *data = NULL;
    if (r == 0 && fast && fast_data(v, m, data) == 0)
        return 0;
    return r == 0 ? 2 : r;
}

/* --------------------------------------------------------------- probes ---- */

/* Module-level code only (no def, lambda or comprehension): its frames are not functions,
 * so a frame hook never treats them as user code. `good` are dense CPU strided tensors the
 * fast path must read exactly as meta_from_value does; `bad` must all be refused by it. */
/* The probes run outside whatever mode the user's first compiled call is in (inference
 * mode or no_grad would change the key sets and requires_grad of the "good" probes). */
static const char PROBE_MODES_SRC[] = "with torch.inference_mode(False), torch.enable_grad():\n"
                                      "    exec(PROBES, globals())\n";

static const char PROBE_SRC[] =
    "import warnings\n"
    "good = []\n"
    "bad = []\n"
    "shapes = [(), (0,), (1,), (7,), (2, 3), (3, 0), (1, 1), (17, 33), (4, 1, 3),\n"
    "          (2, 3, 4, 5), (1, 2, 0, 3, 2), (3, 1, 2, 1, 4), (2, 1, 2, 1, 2, 3),\n"
    "          (1, 2, 0, 2, 1, 2, 2), (2, 1, 1, 3, 1, 1, 2, 1)]\n"
    "for name in NAMES:\n"
    "    dt = getattr(torch, name)\n"
    "    for shape in shapes:\n"
    "        good.append(('%s%s' % (name, list(shape)), torch.zeros(shape, dtype=dt)))\n"
    "base = torch.arange(720.0).reshape(2, 3, 4, 5, 6)\n"
    "good.append(('transpose', base.transpose(0, 4)))\n"
    "good.append(('permute', base.permute(4, 2, 0, 3, 1)))\n"
    "good.append(('step slices', base[:, ::2, 1:, ::3]))\n"
    "good.append(('storage offset', base[1, 2:]))\n"
    "good.append(('expand', torch.ones(3, 1).expand(3, 4)))\n"
    "good.append(('expand rank 7', torch.ones(1, 2, 1).expand(2, 3, 2, 2, 4, 2, 5)))\n"
    "good.append(('unsqueeze', base.unsqueeze(2)))\n"
    "big = torch.zeros(2, 1, 3, 1, 2, 4, 1, 3, dtype=torch.float64)\n"
    "good.append(('permute rank 8', big.permute(7, 6, 5, 4, 3, 2, 1, 0)))\n"
    "good.append(('step slice rank 8', big[..., ::2]))\n"
    "good.append(('offset rank 6', big[1, :, 1:, 0, ::3]))\n"
    "leaf = torch.ones(2, 3, requires_grad=True)\n"
    "good.append(('requires_grad leaf', leaf))\n"
    "good.append(('non-leaf', leaf * 2))\n"
    "good.append(('non-leaf view', (leaf * 2).t()))\n"
    "good.append(('requires_grad rank 6', torch.zeros(1, 2, 1, 2, 1, 2, requires_grad=True)))\n"
    "good.append(('detach', leaf.detach()))\n"
    "good.append(('parameter', torch.nn.Parameter(torch.ones(4, 5))))\n"
    "good.append(('parameter without grad', torch.nn.Parameter(torch.ones(3), requires_grad=False)))\n"
    "good.append(('parameter rank 7', torch.nn.Parameter(torch.zeros(1, 1, 2, 1, 3, 1, 2))))\n"
    "with torch.no_grad():\n"
    "    good.append(('made in no_grad', leaf * 3))\n"
    "    good.append(('view in no_grad', leaf[:, 1:]))\n"
    "r = torch.zeros(2, 3)\n"
    "r.resize_(2, 1, 3, 1, 2, 2)\n"
    "good.append(('resize_ 2 to 6', r))\n"
    "r = torch.zeros(2, 3)\n"
    "r.resize_(2, 1, 3, 1, 2, 2)\n"
    "r.resize_(4, 5)\n"
    "good.append(('resize_ 2 to 6 and back to 2', r))\n"
    "r = torch.zeros(2, 3)\n"
    "r.resize_(1, 2, 3, 1, 1, 2, 1)\n"
    "r.resize_(2, 2, 1, 3, 1, 1, 2, 2)\n"
    "good.append(('resize_ 7 to 8', r))\n"
    "if isinstance(getattr(torch.nn, 'Buffer', None), type):\n"
    "    good.append(('buffer', torch.nn.Buffer(torch.ones(2, 2))))\n"
    "with torch.inference_mode():\n"
    "    bad.append(('inference tensor', torch.ones(2)))\n"
    "bad.append(('meta device', torch.ones(2, 3, device='meta')))\n"
    "bad.append(('sparse', torch.zeros(2, 2).to_sparse()))\n"
    "bad.append(('conj bit', torch.ones(2, dtype=torch.complex64).conj()))\n"
    "class Sub(torch.Tensor):\n"
    "    pass\n"
    "bad.append(('subclass', torch.ones(2).as_subclass(Sub)))\n"
    "optional = (('neg bit', 'torch._neg_view(torch.ones(2))'),\n"
    "            ('zero tensor', 'torch._efficientzerotensor(2)'),\n"
    "            ('functional', 'torch._to_functional_tensor(torch.ones(2))'),\n"
    "            ('mkldnn', 'torch.ones(2).to_mkldnn()'),\n"
    "            ('nested', 'torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])'))\n"
    "with warnings.catch_warnings():\n"
    "    warnings.simplefilter('ignore')\n"
    "    for name, src in optional:\n"
    "        try:\n"
    "            bad.append((name, eval(src)))\n"
    "        except Exception:\n"
    "            pass\n"
    /* the data pointer: storage offsets, memory not from torch's allocator (its context
     * word is not the data pointer), and the storages whose data_ptr() does more than read */
    "flat = torch.arange(5000.0)\n"
    "good.append(('offset 3', flat[3:]))\n"
    "good.append(('offset 1001 2-d', flat[1001:1041].view(8, 5)))\n"
    "good.append(('offset 4093 step', flat[4093::7]))\n"
    "good.append(('empty at an offset', torch.zeros(2, 3)[:, 3:]))\n"
    "good.append(('int64 at an offset', torch.arange(40)[11:]))\n"
    "good.append(('frombuffer', torch.frombuffer(bytearray(96), dtype=torch.float32)))\n"
    "good.append(('frombuffer at an offset', torch.frombuffer(bytearray(96), dtype=torch.float32)[5:]))\n"
    "gdata = []\n"
    "for name, t in good:\n"
    "    s = t.untyped_storage()\n"
    "    gdata.append((s._cdata, s.data_ptr(), t.storage_offset(), t.data_ptr()))\n"
    "checked = []\n"
    "for name, src in (('copy-on-write', 'c = torch._lazy_clone(torch.ones(4))'),\n"
    "                  ('copy-on-write source', 'c = torch.ones(4); torch._lazy_clone(c)'),\n"
    "                  ('throws on data_ptr', 'c = torch.ones(4); torch._C._set_throw_on_mutable_data_ptr(c)'),\n"
    "                  ('warns on data_ptr',\n"
    "                   'c = torch.ones(4); torch._C._set_warn_deprecated_on_mutable_data_ptr(c)')):\n"
    "    try:\n"
    "        exec(src)\n"
    "        checked.append((name, c, c.untyped_storage()._cdata))\n"
    "    except Exception:\n"
    "        pass\n";

typedef struct {
    PyObject *t;                  /* borrowed from the probe list, alive during init */
    const char *name;             /* borrowed UTF-8 of the probe's name */
    const char *impl;             /* its TensorImpl (t._cdata) */
    uint64_t keys;                /* torch._C._dispatch_keys(t).raw_repr() */
    TensorMeta m;                 /* meta_from_value's answer (good probes only) */
    int64_t strides[SJ_MAX_RANK];
} Probe;

/* Records why the fast path is off; returns 0 so callers can `return off(...)`. */
static int off(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tr.why_not, sizeof tr.why_not, fmt, ap);
    va_end(ap);
    return 0;
}

/* Turns the pending exception into why_not and clears it. */
static void off_from_exception(void)
{
    PyObject *type, *val, *tb;
    PyErr_Fetch(&type, &val, &tb);    /* new references, any may be NULL */
    PyObject *s = val ? PyObject_Str(val) : NULL;    /* new */
    const char *msg = s ? PyUnicode_AsUTF8(s) : NULL;
    off("probing torch failed: %s: %s", type && PyType_Check(type) ? ((PyTypeObject *)type)->tp_name : "error",
        msg ? msg : "?");
    Py_XDECREF(s);
    Py_XDECREF(type);
    Py_XDECREF(val);
    Py_XDECREF(tb);
    sj_err_clear();
}

/* New reference to the namespace the probe source ran in, or NULL with an exception. */
static PyObject *run_probes(PyObject *torch)
{
    PyObject *g = NULL, *names = NULL, *code = NULL, *res = NULL;
    int ntorch = 0;   /* the dtypes of torch tensors shapejit supports */
    for (int d = 0; d < DT_COUNT; d++)
        ntorch += dtype_in_torch((DType)d);
    if (!(g = PyDict_New()) || !(names = PyTuple_New(ntorch)))
        goto fail;
    for (int d = 0, k = 0; d < DT_COUNT; d++) {
        if (!dtype_in_torch((DType)d))
            continue;
        PyObject *s = PyUnicode_FromString(dtype_info[d].name);    /* new, stolen below */
        if (!s)
            goto fail;
        PyTuple_SET_ITEM(names, k++, s);
    }
    if (PyDict_SetItemString(g, "__builtins__", PyEval_GetBuiltins()) < 0 ||
        PyDict_SetItemString(g, "torch", torch) < 0 || PyDict_SetItemString(g, "NAMES", names) < 0)
        goto fail;
    if (!(code = Py_CompileString(PROBE_SRC, "<shapejit tensor_reader probes>", Py_file_input)) ||
        PyDict_SetItemString(g, "PROBES", code) < 0)
        goto fail;
    Py_SETREF(code, Py_CompileString(PROBE_MODES_SRC, "<shapejit tensor_reader probes>", Py_file_input));
    if (!code || !(res = PyEval_EvalCode(code, g, g)))
        goto fail;
    Py_DECREF(res);
    Py_DECREF(code);
    Py_DECREF(names);
    return g;
fail:
    Py_XDECREF(code);
    Py_XDECREF(names);
    Py_XDECREF(g);
    return NULL;
}

/* Fills p from one (name, tensor) row. 1 ok, 0 off, -1 error. item and fn are borrowed. */
static int probe_fill(Probe *p, PyObject *item, PyObject *dispatch_keys, int good)
{
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(item, 0)))
        return off("malformed probe row");
    if (!(p->name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(item, 0))))
        return -1;
    p->t = PyTuple_GET_ITEM(item, 1);
    PyObject *cd = PyObject_GetAttrString(p->t, "_cdata");    /* new */
    if (!cd)
        return -1;
    p->impl = PyLong_AsVoidPtr(cd);
    Py_DECREF(cd);
    if (!p->impl)
        return PyErr_Occurred() ? -1 : off("probe '%s': _cdata is 0", p->name);
    PyObject *ks = PyObject_CallOneArg(dispatch_keys, p->t);    /* new */
    if (!ks)
        return -1;
    PyObject *raw = PyObject_CallMethod(ks, "raw_repr", NULL);    /* new */
    Py_DECREF(ks);
    if (!raw)
        return -1;
    p->keys = PyLong_AsUnsignedLongLong(raw);
    Py_DECREF(raw);
    if (PyErr_Occurred())
        return -1;
    if (!good)
        return 1;
    const char *why;
    int r = meta_from_value(p->t, &p->m, p->strides, &why);
    if (r < 0)
        return -1;
    if (r == 1)
        return off("probe '%s': meta_from_value refuses it (%s)", p->name, why);
    return 1;
}

/* The TensorImpl* inside the Python object: the one word all probes agree on. */
static int find_cdata(Probe *gp, Py_ssize_t ng, Probe *bp, Py_ssize_t nb)
{
    Py_ssize_t basic = PY_SSIZE_T_MAX;
    for (Py_ssize_t i = 0; i < ng + nb; i++) {
        Probe *p = i < ng ? &gp[i] : &bp[i - ng];
        if (Py_TYPE(p->t)->tp_basicsize < basic)
            basic = Py_TYPE(p->t)->tp_basicsize;
    }
    int found = 0;
    for (Py_ssize_t o = (Py_ssize_t)sizeof(PyObject); o + (Py_ssize_t)sizeof(void *) <= basic;
         o += (Py_ssize_t)sizeof(void *)) {
        Py_ssize_t i = 0;
        while (i < ng + nb) {
            Probe *p = i < ng ? &gp[i] : &bp[i - ng];
            if (rdptr((const char *)p->t + o) != p->impl)
                break;
            i++;
        }
        if (i == ng + nb) {
            tr.cdata_off = o;
            found++;
        }
    }
    if (found != 1)
        return off("%d words of the tensor object hold _cdata on every probe (want 1)", found);
    return 1;
}

/* How much of a TensorImpl may be read: the smallest allocation among the probes. */
static int find_window(Probe *gp, Py_ssize_t ng)
{
#if defined(__GLIBC__)
    size_t w = TR_WINDOW;
    for (Py_ssize_t i = 0; i < ng; i++) {
        size_t u = malloc_usable_size((void *)gp[i].impl);
        if (u < w)
            w = u;
    }
    tr.window = (Py_ssize_t)(w & ~(size_t)7);
    if (tr.window < 64)
        return off("TensorImpl allocation of %zd bytes is too small to hold the fields", tr.window);
    return 1;
#else
    (void)gp;
    (void)ng;
    return off("no way to bound the TensorImpl scan on this platform (needs glibc)");
#endif
}

/* The DispatchKeySet word; the whitelist; and every bad probe's key set off the whitelist. */
static int find_keys(Probe *gp, Py_ssize_t ng, Probe *bp, Py_ssize_t nb)
{
    int found = 0;
    for (Py_ssize_t o = 0; o + 8 <= tr.window; o += 8) {
        Py_ssize_t i = 0;
        while (i < ng && rd64(gp[i].impl + o) == gp[i].keys)
            i++;
        if (i == ng) {
            tr.keys_off = o;
            found++;
        }
    }
    if (found != 1)
        return off("%d TensorImpl words hold the raw dispatch key set on every probe (want 1)", found);
    tr.nkeysets = 0;
    for (Py_ssize_t i = 0; i < ng; i++) {
        int k = 0;
        while (k < tr.nkeysets && tr.keysets[k] != gp[i].keys)
            k++;
        if (k < tr.nkeysets)
            continue;
        if (tr.nkeysets == TR_MAX_KEYSETS)
            return off("more than %d distinct key sets on dense CPU probes", TR_MAX_KEYSETS);
        tr.keysets[tr.nkeysets++] = gp[i].keys;
    }
    for (Py_ssize_t i = 0; i < nb; i++) {
        if (rd64(bp[i].impl + tr.keys_off) != bp[i].keys)
            return off("probe '%s': key set word disagrees with _dispatch_keys", bp[i].name);
        /* a subclass may share the dense key set: its exact type keeps it away instead */
        for (int k = 0; k < tr.nkeysets && Py_TYPE(bp[i].t) == Py_TYPE(gp[0].t); k++)
            if (tr.keysets[k] == bp[i].keys)
                return off("probe '%s': its key set is one of the dense CPU ones", bp[i].name);
    }
    return 1;
}

/* Reads rank, sizes and strides at (o, inline capacity cap) as if stored inline. */
static int inline_matches(const Probe *p, Py_ssize_t o, Py_ssize_t cap)
{
    const char *b = p->impl + o;
    if (rd64(b) != p->m.ndim)
        return 0;
    for (int i = 0; i < p->m.ndim; i++)
        if ((int64_t)rd64(b + 8 + 8 * i) != p->m.size[i] || (int64_t)rd64(b + 8 + 8 * (cap + i)) != p->strides[i])
            return 0;
    return 1;
}

/* SizesAndStrides: the largest inline capacity at which exactly one offset reads every probe
 * of that rank or less; then larger ranks must read through the out-of-line pointer. */
static int find_sizes(Probe *gp, Py_ssize_t ng)
{
    tr.inline_rank = 0;
    for (Py_ssize_t cap = SJ_MAX_RANK; cap >= 1 && !tr.inline_rank; cap--) {
        int found = 0;
        for (Py_ssize_t o = 0; o + 8 * (1 + 2 * cap) <= tr.window; o += 8) {
            Py_ssize_t i = 0;
            while (i < ng && (gp[i].m.ndim > cap || inline_matches(&gp[i], o, cap)))
                i++;
            if (i == ng) {
                tr.sizes_off = o;
                found++;
            }
        }
        if (found > 1)
            return off("%d offsets read every probe's sizes and strides inline (want 1)", found);
        if (found == 1)
            tr.inline_rank = cap;
    }
    if (!tr.inline_rank)
        return off("no offset in the TensorImpl reads the probes' sizes and strides");
    int out_of_line = 0;
    for (Py_ssize_t i = 0; i < ng; i++) {
        const Probe *p = &gp[i];
        if (p->m.ndim <= tr.inline_rank)
            continue;
        const char *b = p->impl + tr.sizes_off;
        if (rd64(b) != p->m.ndim)
            return off("probe '%s': rank word is not %d", p->name, p->m.ndim);
        const char *q = rdptr(b + 8);
        if ((uintptr_t)q < TR_MIN_POINTER || (uintptr_t)q % 8)
            return off("probe '%s': no out-of-line sizes pointer", p->name);
        for (int k = 0; k < p->m.ndim; k++)
            if ((int64_t)rd64(q + 8 * k) != p->m.size[k] || (int64_t)rd64(q + 8 * (p->m.ndim + k)) != p->strides[k])
                return off("probe '%s': out-of-line sizes or strides disagree", p->name);
        out_of_line++;
    }
    if (tr.inline_rank < SJ_MAX_RANK && !out_of_line)
        return off("no probe above rank %zd checked the out-of-line sizes", tr.inline_rank);
    return 1;
}

/* The TypeMeta index: a uint16 that is a function of the dtype, one value per dtype. */
static int find_dtype(Probe *gp, Py_ssize_t ng)
{
    int found = 0;
    for (Py_ssize_t o = 0; o + 2 <= tr.window; o += 2) {
        int32_t idx[DT_COUNT];
        for (int d = 0; d < DT_COUNT; d++)
            idx[d] = -1;
        Py_ssize_t i = 0;
        for (; i < ng; i++) {
            uint16_t v = rd16(gp[i].impl + o);
            int d = gp[i].m.dtype;
            if (idx[d] < 0)
                idx[d] = v;
            else if (idx[d] != v)
                break;
        }
        if (i < ng)
            continue;
        int ok = 1;
        for (int d = 0; d < DT_COUNT && ok; d++) {
            if (!dtype_in_torch((DType)d))
                continue;   /* not probed: never matched (the lookup skips it) */
            if (idx[d] < 0)
                ok = 0;
            for (int e = 0; e < d && ok; e++)
                if (dtype_in_torch((DType)e) && idx[e] == idx[d])
                    ok = 0;
        }
        if (!ok)
            continue;
        tr.dtype_off = o;
        for (int d = 0; d < DT_COUNT; d++)
            tr.dt_index[d] = (uint16_t)(idx[d] < 0 ? 0 : idx[d]);
        found++;
    }
    if (found != 1)
        return off("%d TensorImpl offsets identify every probe's dtype (want 1)", found);
    return 1;
}

/* The exact types the fast path reads: each must have a probe of exactly that type. */
static int find_types(PyObject *torch, Probe *gp, Py_ssize_t ng)
{
    static const char *const paths[TR_MAX_TYPES][2] = {{"Tensor", NULL}, {"nn", "Parameter"}, {"nn", "Buffer"}};
    for (int k = 0; k < TR_MAX_TYPES; k++) {
        PyObject *o = PyObject_GetAttrString(torch, paths[k][0]);    /* new */
        if (o && paths[k][1])
            Py_SETREF(o, PyObject_GetAttrString(o, paths[k][1]));
        if (!o) {
            if (k == 0)
                return -1;
            sj_err_clear();    /* torch.nn.Buffer is recent */
            continue;
        }
        int seen = 0;
        for (Py_ssize_t i = 0; i < ng && !seen; i++)
            seen = (PyObject *)Py_TYPE(gp[i].t) == o;
        if (seen && PyType_Check(o) && ((PyTypeObject *)o)->tp_basicsize >= tr.cdata_off + 8)
            tr.types[tr.ntypes++] = (PyTypeObject *)o;    /* keeps the reference */
        else
            Py_DECREF(o);
    }
    if (!tr.ntypes || tr.types[0] != Py_TYPE(gp[0].t))
        return off("torch.Tensor is not the type of the plain probes");
    return 1;
}

/* requires_grad through the C getter of the getset descriptor every fast type inherits. */
static int find_requires_grad(void)
{
    PyObject *name = PyUnicode_InternFromString("requires_grad");    /* new */
    if (!name)
        return -1;
    PyObject *descr = _PyType_Lookup(tr.types[0], name);    /* borrowed */
    int ok = descr && Py_IS_TYPE(descr, &PyGetSetDescr_Type) && ((PyGetSetDescrObject *)descr)->d_getset->get;
    for (int k = 1; k < tr.ntypes && ok; k++)
        ok = _PyType_Lookup(tr.types[k], name) == descr;
    Py_DECREF(name);
    if (!ok)
        return off("requires_grad is not one C getset descriptor on every fast type");
    tr.rg_descr = Py_NewRef(descr);
    tr.rg_get = ((PyGetSetDescrObject *)descr)->d_getset->get;
    tr.rg_closure = ((PyGetSetDescrObject *)descr)->d_getset->closure;
    return 1;
}

/* A shortcut for requires_grad: TensorImpl::requires_grad() is false whenever its
 * autograd_meta_ pointer is NULL, which it is for most tensors (made without grad). The
 * offset is the one word that is non-zero on every probe that requires grad and zero on
 * most that do not; if that word is not unique, there is no shortcut (always the getter).
 * validate() then checks every probe through the shortcut. */
static int find_autograd_meta(Probe *gp, Py_ssize_t ng)
{
    tr.agmeta_off = -1;
    Py_ssize_t found = -1, nfound = 0, nplain = 0;
    for (Py_ssize_t i = 0; i < ng; i++)
        nplain += !gp[i].m.requires_grad;
    for (Py_ssize_t o = 0; o + 8 <= tr.window; o += 8) {
        if (o == tr.keys_off || (o >= tr.sizes_off && o < tr.sizes_off + 8 * (1 + 2 * tr.inline_rank)) ||
            (tr.dtype_off >= o && tr.dtype_off < o + 8))
            continue;
        Py_ssize_t zeros = 0;
        int ok = 1;
        for (Py_ssize_t i = 0; i < ng && ok; i++) {
            const char *w = rdptr((const char *)gp[i].impl + o);
            if (gp[i].m.requires_grad)
                ok = w != NULL;
            else
                zeros += w == NULL;
        }
        if (ok && zeros * 2 > nplain) {
            found = o;
            nfound++;
        }
    }
    if (nfound == 1)
        tr.agmeta_off = found;
    return 1;
}

/* The last word: every probe through the real fast path, against meta_from_value. */
static int validate(Probe *gp, Py_ssize_t ng, Probe *bp, Py_ssize_t nb)
{
    tr.fast = 1;
    for (Py_ssize_t i = 0; i < ng + nb; i++) {
        Probe *p = i < ng ? &gp[i] : &bp[i - ng];
        TensorMeta m;
        int64_t st[SJ_MAX_RANK];
        int r = fast_read(p->t, &m, st);
        if (r < 0)
            return -1;
        if (i >= ng) {
            if (r == 0)
                return off("probe '%s': the fast path accepts it", p->name);
            continue;
        }
        if (r != 0)
            return off("probe '%s': the fast path refuses it", p->name);
        const char *what = NULL;
        if (m.lib != p->m.lib || m.np_scalar != p->m.np_scalar)
            what = "kind";
        else if (m.dtype != p->m.dtype)
            what = "dtype";
        else if (m.ndim != p->m.ndim)
            what = "ndim";
        else if (m.requires_grad != p->m.requires_grad)
            what = "requires_grad";
        for (int k = 0; !what && k < m.ndim; k++) {
            if (m.size[k] != p->m.size[k])
                what = "sizes";
            else if (st[k] != p->strides[k])
                what = "strides";
        }
        if (what)
            return off("probe '%s': fast read disagrees with meta_from_value on %s", p->name, what);
    }
    tr.validated = (long)(ng + nb);
    return 1;
}

/* ----------------------------------------------------------- data pointer ---- */

typedef struct {
    const char *storage;   /* StorageImpl* (untyped_storage()._cdata) */
    const char *sdata;     /* untyped_storage().data_ptr() */
    int64_t soffset;       /* storage_offset() */
    const char *data;      /* data_ptr() */
} ProbeData;

/* Records why the data pointer is not read from memory; returns 0. */
static int data_off(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tr.data_why_not, sizeof tr.data_why_not, fmt, ap);
    va_end(ap);
    return 0;
}

static int pointer_item(PyObject *tuple, Py_ssize_t i, const char **out)
{
    *out = PyLong_AsVoidPtr(PyTuple_GET_ITEM(tuple, i));
    return *out || !PyErr_Occurred() ? 0 : -1;
}

/* The bytes of a StorageImpl that may be read: the smallest allocation among the probes'. */
static Py_ssize_t storage_window(const ProbeData *gd, Py_ssize_t ng, const char *const *cs, Py_ssize_t nc)
{
#if defined(__GLIBC__)
    size_t w = TR_STORAGE_WINDOW;
    for (Py_ssize_t i = 0; i < ng + nc; i++) {
        size_t u = malloc_usable_size((void *)(i < ng ? gd[i].storage : cs[i - ng]));
        if (u < w)
            w = u;
    }
    return (Py_ssize_t)(w & ~(size_t)7);
#else
    (void)gd;
    (void)ng;
    (void)cs;
    (void)nc;
    return 0;
#endif
}

/* The offsets of the data pointer (tr.storage_off ... tr.scheck_off), then every good
 * probe's data pointer read through fast_data against data_ptr(), and every checked probe
 * refused. 1 on (tr.data_fast), 0 off (data_why_not), -1 a Python error. gdata and checked
 * are the probe source's lists (borrowed); gdata's rows follow gp. */
static int find_data(Probe *gp, Py_ssize_t ng, PyObject *gdata, PyObject *checked)
{
    int rc = -1;
    ProbeData *gd = PyMem_Calloc((size_t)ng, sizeof *gd);
    Py_ssize_t nc = PyList_GET_SIZE(checked);
    const char **cs = PyMem_Calloc((size_t)nc + 1, sizeof *cs);
    PyObject **ct = PyMem_Calloc((size_t)nc + 1, sizeof *ct);
    if (!gd || !cs || !ct) {
        PyErr_NoMemory();
        goto done;
    }
    if (PyList_GET_SIZE(gdata) != ng) {
        rc = data_off("the probe source gave %zd data rows for %zd probes", PyList_GET_SIZE(gdata), ng);
        goto done;
    }
    for (Py_ssize_t i = 0; i < ng; i++) {
        PyObject *row = PyList_GET_ITEM(gdata, i);
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != 4) {
            rc = data_off("malformed data row");
            goto done;
        }
        if (pointer_item(row, 0, &gd[i].storage) < 0 || pointer_item(row, 1, &gd[i].sdata) < 0 ||
            pointer_item(row, 3, &gd[i].data) < 0)
            goto done;
        gd[i].soffset = PyLong_AsLongLong(PyTuple_GET_ITEM(row, 2));
        if (gd[i].soffset == -1 && PyErr_Occurred())
            goto done;
        if (!gd[i].storage) {
            rc = data_off("probe '%s' has no storage", gp[i].name);
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < nc; i++) {
        PyObject *row = PyList_GET_ITEM(checked, i);
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != 3) {
            rc = data_off("malformed checked row");
            goto done;
        }
        ct[i] = PyTuple_GET_ITEM(row, 1);
        if (pointer_item(row, 2, &cs[i]) < 0)
            goto done;
    }
    if (nc < 3) {
        rc = data_off("only %zd of the copy-on-write, throwing and warning probes could be made", nc);
        goto done;
    }
    /* in the TensorImpl: the StorageImpl* and the storage offset, one word each */
    int nstorage = 0, noffset = 0;
    for (Py_ssize_t o = 0; o + 8 <= tr.window; o += 8) {
        Py_ssize_t i = 0;
        while (i < ng && rdptr(gp[i].impl + o) == gd[i].storage)
            i++;
        if (i == ng) {
            tr.storage_off = o;
            nstorage++;
        }
        i = 0;
        while (i < ng && (int64_t)rd64(gp[i].impl + o) == gd[i].soffset)
            i++;
        if (i == ng) {
            tr.soffset_off = o;
            noffset++;
        }
    }
    if (nstorage != 1 || noffset != 1) {
        rc = data_off("%d TensorImpl words hold the storage and %d its offset on every probe (want 1 each)", nstorage,
                      noffset);
        goto done;
    }
    tr.swindow = storage_window(gd, ng, cs, nc);
    if (tr.swindow < 16) {
        rc = data_off("no bound on the StorageImpl scan (%zd bytes)", tr.swindow);
        goto done;
    }
    /* in the StorageImpl: the data pointer (the probes from a bytearray tell it from
     * the allocator's context word, which is the same pointer for torch's own memory) */
    int ndata = 0, ncheck = 0;
    for (Py_ssize_t o = 0; o + 8 <= tr.swindow; o += 8) {
        Py_ssize_t i = 0;
        while (i < ng && rdptr(gd[i].storage + o) == gd[i].sdata)
            i++;
        if (i == ng) {
            tr.sdata_off = o;
            ndata++;
        }
    }
    /* the flag: zero on every plain storage, set on every checked one */
    for (Py_ssize_t o = 0; o < tr.swindow; o++) {
        Py_ssize_t i = 0;
        while (i < ng && gd[i].storage[o] == 0)
            i++;
        Py_ssize_t j = 0;
        while (i == ng && j < nc && cs[j][o] != 0)
            j++;
        if (i == ng && j == nc) {
            tr.scheck_off = o;
            ncheck++;
        }
    }
    if (ndata != 1 || ncheck != 1) {
        rc = data_off("%d StorageImpl words hold the data pointer and %d bytes the check flag (want 1 each)", ndata,
                      ncheck);
        goto done;
    }
    tr.data_fast = 1;
    for (Py_ssize_t i = 0; i < ng; i++) {
        TensorMeta m;
        char *d;
        if (fast_read(gp[i].t, &m, NULL) != 0 || fast_data(gp[i].t, &m, &d) != 0 || d != gd[i].data) {
            tr.data_fast = 0;
            rc = PyErr_Occurred() ? -1
                                  : data_off("probe '%s': the data pointer read disagrees with data_ptr()", gp[i].name);
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < nc; i++) {
        TensorMeta m;
        char *d;
        int r = fast_read(ct[i], &m, NULL);
        if (r < 0 || (r == 0 && fast_data(ct[i], &m, &d) == 0)) {
            tr.data_fast = 0;
            rc = r < 0 ? -1 : data_off("a checked probe's data pointer is read plainly");
            goto done;
        }
    }
    rc = 1;
done:
    PyMem_Free(gd);
    PyMem_Free(cs);
    PyMem_Free(ct);
    return rc;
}

/* 1: fast path on; 0: off with why_not; -1: a Python error. */
static int probe_all(PyObject *torch)
{
    int rc = -1;
    PyObject *ns = NULL, *dispatch_keys = NULL;
    Probe *gp = NULL, *bp = NULL;
    Py_ssize_t ng = 0, nb = 0;
    if (!(dispatch_keys = PyObject_GetAttrString(torch, "_C")))
        goto done;
    Py_SETREF(dispatch_keys, PyObject_GetAttrString(dispatch_keys, "_dispatch_keys"));
    if (!dispatch_keys || !(ns = run_probes(torch)))
        goto done;
    PyObject *good = PyDict_GetItemString(ns, "good"), *bad = PyDict_GetItemString(ns, "bad");  /* borrowed */
    if (!good || !bad || !PyList_Check(good) || !PyList_Check(bad) || !PyList_GET_SIZE(good)) {
        rc = off("the probe source made no probe lists");
        goto done;
    }
    ng = PyList_GET_SIZE(good);
    nb = PyList_GET_SIZE(bad);
    gp = PyMem_Calloc((size_t)ng, sizeof *gp);
    bp = PyMem_Calloc((size_t)nb + 1, sizeof *bp);
    if (!gp || !bp) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < ng + nb; i++) {
        int r = i < ng ? probe_fill(&gp[i], PyList_GET_ITEM(good, i), dispatch_keys, 1)
                       : probe_fill(&bp[i - ng], PyList_GET_ITEM(bad, i - ng), dispatch_keys, 0);
        if (r <= 0) {
            rc = r;
            goto done;
        }
    }
    /* each step: 1 go on, 0 off (why_not set), -1 error */
    if ((rc = find_cdata(gp, ng, bp, nb)) != 1 || (rc = find_window(gp, ng)) != 1 ||
        (rc = find_keys(gp, ng, bp, nb)) != 1 || (rc = find_sizes(gp, ng)) != 1 || (rc = find_dtype(gp, ng)) != 1 ||
        (rc = find_types(torch, gp, ng)) != 1 || (rc = find_requires_grad()) != 1 ||
        (rc = find_autograd_meta(gp, ng)) != 1)
        goto done;
    rc = validate(gp, ng, bp, nb);
    if (rc == 1) {
        /* the data pointer is a part of its own: it turns off without the metadata */
        PyObject *gdata = PyDict_GetItemString(ns, "gdata"), *checked = PyDict_GetItemString(ns, "checked");
        int d = gdata && checked && PyList_Check(gdata) && PyList_Check(checked)
                    ? find_data(gp, ng, gdata, checked)
                    : data_off("the probe source made no data lists");
        if (d < 0) {
            if (sj_err_is_interrupt()) {
                rc = -1;
                goto done;
            }
            PyObject *et, *ev, *etb;
            PyErr_Fetch(&et, &ev, &etb);    /* new references, any may be NULL */
            PyObject *msg = ev ? PyObject_Str(ev) : NULL;    /* new */
            const char *u = msg ? PyUnicode_AsUTF8(msg) : NULL;
            data_off("probing the data pointer failed: %s", u ? u : "?");
            Py_XDECREF(msg);
            Py_XDECREF(et);
            Py_XDECREF(ev);
            Py_XDECREF(etb);
            sj_err_clear();
        }
        if (d != 1)
            tr.data_fast = 0;
    }
done:
    PyMem_Free(gp);
    PyMem_Free(bp);
    Py_XDECREF(ns);    /* last: the probes' tensors live in it */
    Py_XDECREF(dispatch_keys);
    return rc;
}

int treader_init_torch(void)
{
    if (tr.state != TR_UNTRIED)
        return tr.fast;    /* TR_PROBING: re-entered from the probes' own Python code */
    PyObject *torch = torch_if_ready();    /* borrowed */
    if (!torch) {
        if (!tr.why_not[0])    /* read_impl comes here on every call until torch is imported */
            off("torch is not imported (yet)");
        return 0;
    }
    PyObject *et, *ev, *etb;
    PyErr_Fetch(&et, &ev, &etb);    /* the caller's exception, if any: kept aside */
    tr.state = TR_PROBING;
    tr.why_not[0] = '\0';
    int r = probe_all(torch);
    int interrupted = r < 0 && sj_err_is_interrupt();
    if (interrupted) {
        /* interrupted, not refused: the interrupt is raised by the hook, and the next
         * frame probes again */
        sj_err_clear();
        r = 0;
        tr.why_not[0] = '\0';
    } else if (r < 0)
        off_from_exception();
    if (r != 1) {
        /* off: drop what was learned so nothing half-validated is ever used */
        tr.fast = 0;
        tr.data_fast = 0;
        for (int k = 0; k < tr.ntypes; k++)
            Py_CLEAR(tr.types[k]);
        tr.ntypes = 0;
        tr.nkeysets = 0;
        Py_CLEAR(tr.rg_descr);
        tr.rg_get = NULL;
    }
    tr.state = interrupted ? TR_UNTRIED : TR_DONE;
    PyErr_Restore(et, ev, etb);
    return tr.fast;
}

/* ------------------------------------------------------------ Python API ---- */

PyObject *treader_py_info(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    treader_init_torch();
    PyObject *d = NULL, *offs = NULL, *keys = NULL, *idx = NULL, *types = NULL;
    if (!(offs = PyDict_New()) || !(keys = PyList_New(0)) || !(idx = PyDict_New()) || !(types = PyList_New(0)))
        goto done;
    if (tr.fast) {
        PyObject *o = Py_BuildValue("{snsnsnsnsnsnsn}", "cdata", tr.cdata_off, "window", tr.window, "key_set",
                                    tr.keys_off, "sizes_strides", tr.sizes_off, "inline_rank", tr.inline_rank, "dtype",
                                    tr.dtype_off, "autograd_meta", tr.agmeta_off);  /* new */
        if (!o)
            goto done;
        Py_SETREF(offs, o);
        for (int k = 0; k < tr.nkeysets; k++) {
            PyObject *v = PyLong_FromUnsignedLongLong(tr.keysets[k]);    /* new */
            int bad = !v || PyList_Append(keys, v) < 0;
            Py_XDECREF(v);
            if (bad)
                goto done;
        }
        for (int t = 0; t < DT_COUNT; t++) {
            PyObject *v = PyLong_FromLong(tr.dt_index[t]);    /* new */
            int bad = !v || PyDict_SetItemString(idx, dtype_info[t].name, v) < 0;
            Py_XDECREF(v);
            if (bad)
                goto done;
        }
        for (int k = 0; k < tr.ntypes; k++) {
            PyObject *v = PyUnicode_FromString(tr.types[k]->tp_name);    /* new */
            int bad = !v || PyList_Append(types, v) < 0;
            Py_XDECREF(v);
            if (bad)
                goto done;
        }
    }
    if (tr.data_fast) {
        PyObject *o =
            Py_BuildValue("{snsnsnsnsn}", "storage", tr.storage_off, "storage_offset", tr.soffset_off, "storage_window",
                          tr.swindow, "storage_data", tr.sdata_off, "storage_check", tr.scheck_off);   /* new */
        if (!o || PyDict_Update(offs, o) < 0) {
            Py_XDECREF(o);
            goto done;
        }
        Py_DECREF(o);
    }
    const char *data_why = tr.data_fast ? NULL : !tr.fast ? "the metadata path is off" : tr.data_why_not;
    d = Py_BuildValue("{sOszsOslsOsOsOsOsz}", "fast", tr.fast ? Py_True : Py_False, "why_not",
                      tr.fast ? NULL : tr.why_not, "offsets", offs, "validated_tensors", tr.validated, "key_sets", keys,
                      "dtype_index", idx, "types", types, "data_fast", tr.data_fast ? Py_True : Py_False,
                      "data_why_not", data_why);
done:
    Py_XDECREF(offs);
    Py_XDECREF(keys);
    Py_XDECREF(idx);
    Py_XDECREF(types);
    return d;
}

PyObject *treader_py_read(PyObject *self, PyObject *obj)
{
    (void)self;
    TensorMeta m;
    int64_t st[SJ_MAX_RANK];
    const char *why;
    int fast;
    int r = read_impl(obj, &m, st, &why, &fast);
    if (r < 0)
        return NULL;
    if (r == 1)
        Py_RETURN_NONE;
    PyObject *sizes = sj_int64_tuple(m.size, m.ndim), *strides = sj_int64_tuple(st, m.ndim);    /* new */
    PyObject *res = NULL;
    if (sizes && strides)
        res = Py_BuildValue("(sOOOs)", dtype_info[m.dtype].name, sizes, strides, m.requires_grad ? Py_True : Py_False,
                            fast ? "fast" : "slow");
    Py_XDECREF(sizes);
    Py_XDECREF(strides);
    return res;
}

PyObject *treader_py_data(PyObject *self, PyObject *obj)
{
    (void)self;
    TensorMeta m;
    const char *why;
    char *data;
    int r = treader_read_data(obj, &m, NULL, &data, &why);
    if (r < 0)
        return NULL;
    if (r == 1)
        Py_RETURN_NONE;
    if (r == 2)
        return Py_BuildValue("(Os)", Py_None, "slow");
    return Py_BuildValue("(ns)", (Py_ssize_t)(uintptr_t)data, "fast");
}
