/* The compiled graph of the generated-C backend: a callable that runs a graph's steps
 * through the step kinds' table (steps.def): eager nodes through their library calls,
 * fused kernels through generated C (step_kernel.c), oneDNN, concatenation and view steps
 * through their files. Here: the CompiledGraph object, reading operands, allocating
 * outputs (from the graph's buffer pool, bufpool.c), the run loop and its releases.
 *
 * Memory: the object holds a strong reference to its _C.Graph and owns its plan (PyMem);
 * the kernels' library stays loaded for the life of the process (native/native.h). Values live
 * in the run's vals[] as strong references (graph_run_with), each dropped after the last
 * step that reads it (the plan's release lists). */
#include <string.h>

#include "lower_int.h"
#include "dnnl_api.h"
#include "../vocab/tensor_reader.h"
#include "../vocab/libs.h"
#include "../core/config.h"

#include <omp.h>

typedef struct {
    PyObject_HEAD PyObject *graph;     /* strong: the _C.Graph */
    PyObject *source;    /* strong str: the kernels' C source */
    LowerPlan plan;
    vectorcallfunc vectorcall;
    int threads;         /* the OpenMP thread count of the last run */
    BufPool pool;        /* dropped intermediates kept for reuse (bufpool.c) */
    int64_t *step_ns;    /* PyMem, nsteps entries: each step's wall time summed over the runs
                            since `profile` was set; NULL when not profiling */
} CompiledGraph;

/* ------------------------------------------------------------- operands ---- */

static PyObject *str_data_ptr;   /* strong, interned "data_ptr" */

/* 1 when a numpy buffer's format and itemsize are dtype dt's (native byte order). */
static int buffer_is(const Py_buffer *v, DType dt)
{
    const char *f = v->format;
    if (!f || v->itemsize != dtype_info[dt].itemsize)
        return 0;
    if (*f == '@' || *f == '=' || *f == '<')
        f++;
    if (f[0] == 0 || f[1] != 0)
        return 0;
    switch (dt) {
    case DT_F32:
        return *f == 'f';
    case DT_F64:
        return *f == 'd';
    case DT_I64:
        return *f == 'l' || *f == 'q';
    case DT_I32:
        return *f == 'i' || *f == 'l';
    case DT_BOOL:
        return *f == '?';
    default:
        return 0;
    }
}

int lower_read_input(PyObject *obj, Lib lib, Operand *op)
{
    return lower_read_input_dt(obj, lib, DT_F32, op);
}

/* 0 and op filled; 1 when obj is not what the kernel expects (run eagerly); -1 error. */
int lower_read_input_dt(PyObject *obj, Lib lib, DType dt, Operand *op)
{
    if (lib == LIB_TORCH && lazyview_check(obj))
        return lazyview_read(obj, dt, op);
    memset(op, 0, sizeof *op);
    if (lib == LIB_TORCH) {
        TensorMeta m;
        const char *why = NULL;
        int r = treader_read_data(obj, &m, op->stride, &op->data, &why);
        if (r == 1 || r < 0)
            return r;
        if (m.dtype != dt || m.lib != LIB_TORCH || m.ndim > SJ_MAX_RANK)
            return 1;
        op->ndim = m.ndim;
        memcpy(op->size, m.size, sizeof(int64_t) * (size_t)m.ndim);
        if (r == 0)
            return 0;   /* the data pointer read from memory */
        if (!str_data_ptr && !(str_data_ptr = PyUnicode_InternFromString("data_ptr")))
            return -1;
        PyObject *p = PyObject_CallMethodNoArgs(obj, str_data_ptr);   /* new */
        if (!p)
            return -1;
        op->data = (char *)PyLong_AsVoidPtr(p);
        Py_DECREF(p);
        return op->data || !PyErr_Occurred() ? 0 : -1;
    }
    if (!PyObject_CheckBuffer(obj) || PyObject_GetBuffer(obj, &op->view, PyBUF_RECORDS_RO) < 0) {
        PyErr_Clear();
        return 1;
    }
    op->has_view = 1;
    if (!buffer_is(&op->view, dt) || op->view.ndim > SJ_MAX_RANK)
        return 1;
    op->ndim = op->view.ndim;
    op->data = op->view.buf;
    for (int d = 0; d < op->ndim; d++) {
        op->size[d] = op->view.shape[d];
        if (op->view.strides[d] % op->view.itemsize != 0)
            return 1;
        op->stride[d] = op->view.strides[d] / op->view.itemsize;
    }
    return 0;
}

static PyObject *torch_empty, *np_empty, *kw_dtype;   /* strong, once */
static PyObject *dtypes[2][DT_COUNT];                 /* strong, per library: each on first use */

PyObject *lower_new_output(Lib lib, const int64_t *n, int r)
{
    return lower_new_output_dt(lib, DT_F32, n, r);
}

PyObject *lower_dtype_object(Lib lib, DType dt)
{
    if (!dtypes[lib][dt])
        dtypes[lib][dt] = dtype_to_py(dt, lib);
    return dtypes[lib][dt];
}

/* A new contiguous array or tensor of dtype dt and the given sizes. */
PyObject *lower_empty(Lib lib, DType dt, const int64_t *n, int r)
{
    /* each library's empty() is looked up once that library is loaded: the first
     * graph of a process may be a torch one, numpy's coming later (or the reverse) */
    const char *lib_name = lib == LIB_TORCH ? "torch" : "numpy";
    PyObject **slot = lib == LIB_TORCH ? &torch_empty : &np_empty;
    if (!*slot && (lib == LIB_TORCH ? libs.torch : libs.numpy)) {
        PyObject *m = PyImport_ImportModule(lib_name);
        if (!m)
            return NULL;
        *slot = PyObject_GetAttrString(m, "empty");
        Py_DECREF(m);
        if (!*slot)
            return NULL;
    }
    if (!kw_dtype && !(kw_dtype = Py_BuildValue("(s)", "dtype")))
        return NULL;
    if (!lower_dtype_object(lib, dt))
        PyErr_Clear();
    PyObject *empty = lib == LIB_TORCH ? torch_empty : np_empty, *dto = dtypes[lib][dt];
    if (!empty || !dto) {
        PyErr_SetString(PyExc_RuntimeError, "shapejit: the library's empty() is not available");
        return NULL;
    }
    if (lib == LIB_TORCH && r >= 1 && r <= SJ_MAX_RANK) {
        /* torch.empty(n0, n1, ..., dtype=dt): torch's argument parser takes the sizes as
         * separate ints ~0.5 us faster than as one tuple (1.0 vs 1.5 us a call), which is
         * a third of a small kernel step. (With no sizes it would mean shape (0,).) */
        PyObject *args[SJ_MAX_RANK + 1];   /* args[0..r): new references */
        int made = 0;
        for (; made < r; made++)
            if (!(args[made] = PyLong_FromLongLong(n[made])))
                break;
        PyObject *res = NULL;
        if (made == r) {
            args[r] = dto;
            res = PyObject_Vectorcall(empty, args, (size_t)r, kw_dtype);
        }
        for (int d = 0; d < made; d++)
            Py_DECREF(args[d]);
        return res;
    }
    PyObject *shape = sj_int64_tuple(n, r);   /* new */
    if (!shape)
        return NULL;
    PyObject *args[2] = {shape, dto};
    PyObject *res = PyObject_Vectorcall(empty, args, 1, kw_dtype);
    Py_DECREF(shape);
    return res;
}

/* A new output: a buffer the run's pool kept, else the library's empty(). Either way the
 * run notes it as its own (bufpool.c offers back only those). */
PyObject *lower_new_output_dt(Lib lib, DType dt, const int64_t *n, int r)
{
    BufPool *pool = bufpool_current();
    PyObject *res = pool ? bufpool_take(pool, lib, dt, n, r) : NULL;
    if (!res)
        res = lower_empty(lib, dt, n, r);
    if (res && pool)
        bufpool_note(pool, res);
    return res;
}

/* Runs the plan's steps (graph_run_with's exec; the compiled graph never verifies shape
 * rules, so mismatch is NULL and eager steps pass none on). */
static int exec_steps(void *ctx, Graph *g, PyObject **vals, PyObject **mismatch)
{
    CompiledGraph *cg = ctx;
    (void)mismatch;
    for (int32_t i = 0; i < cg->plan.nsteps; i++) {
        const Step *s = &cg->plan.steps[i];
        double t0 = cg->step_ns ? omp_get_wtime() : 0.;
        bufpool_lend(!cg->plan.step_out[i]);
        if (step_kinds[s->kind].run(g, &cg->plan, s->index, vals) < 0)
            return -1;
        if (cg->step_ns)
            cg->step_ns[i] += (int64_t)((omp_get_wtime() - t0) * 1e9);
        /* drop the values no later step reads (plan.c); intermediates may be kept for reuse */
        for (int32_t j = cg->plan.release_at[i]; j < cg->plan.release_at[i + 1]; j++) {
            int32_t v = cg->plan.release[j];
            PyObject *o = vals[v];
            vals[v] = NULL;
            const TensorMeta *m = &g->values[v].meta;
            if (o && g->nodes[g->values[v].node].op != OP_INPUT && !m->requires_grad && !m->symint && !m->np_scalar &&
                lower_dtype_ok((DType)m->dtype))
                bufpool_offer(&cg->pool, o, (Lib)m->lib, (DType)m->dtype);   /* steals o */
            else
                Py_XDECREF(o);
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- object ---- */

static PyObject *cg_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    CompiledGraph *cg = (CompiledGraph *)self;
    Graph *g = ((SjGraphObject *)cg->graph)->g;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (kwnames && PyTuple_GET_SIZE(kwnames)) {
        PyErr_SetString(PyExc_TypeError, "shapejit compiled graph: no keyword arguments");
        return NULL;
    }
    if (n != g->ninputs) {
        PyErr_Format(PyExc_TypeError, "shapejit compiled graph: expected %d inputs, got %zd", (int)g->ninputs, n);
        return NULL;
    }
    /* threads: the OpenMP runtime is shared with torch and oneDNN (one libgomp in the
     * process), so by default kernels run with what torch.set_num_threads set; the knob
     * overrides it for the run and puts it back after */
    int want = (int)sj_config.threads, had = omp_get_max_threads();
    if (want > 0 && want != had)
        omp_set_num_threads(want);
    cg->threads = want > 0 ? want : had;
    BufPool *prev = bufpool_enter(&cg->pool);
    PyObject *r = graph_run_with(g, args, NULL, exec_steps, cg);
    if (r)
        bufpool_keep_outputs(&cg->pool, r);
    bufpool_leave(&cg->pool, prev);
    if (want > 0 && want != had)
        omp_set_num_threads(had);
    return r;
}

static void cg_dealloc(CompiledGraph *cg)
{
    Py_XDECREF(cg->graph);
    Py_XDECREF(cg->source);
    PyMem_Free(cg->step_ns);
    bufpool_clear(&cg->pool);
    lower_plan_free(&cg->plan);
    Py_TYPE(cg)->tp_free((PyObject *)cg);
}

static Graph *g_of(CompiledGraph *cg)
{
    return ((SjGraphObject *)cg->graph)->g;
}

static PyObject *cg_get_stats(CompiledGraph *cg, void *unused)
{
    (void)unused;
    PyObject *d = Py_BuildValue("{s:i,s:i,s:L,s:L,s:L,s:i,s:L}", "steps", (int)cg->plan.nsteps, "threads", cg->threads,
                                "buffers_kept", (long long)cg->pool.kept, "buffers_reused", (long long)cg->pool.reused,
                                "buffers_resized", (long long)cg->pool.resized, "buffers_held", cg->pool.n,
                                "outputs_recycled", (long long)cg->pool.recycled);   /* new */
    for (int kind = 0; d && kind < STEP_COUNT; kind++)
        if (step_kinds[kind].stats && step_kinds[kind].stats(g_of(cg), &cg->plan, d) < 0)
            Py_CLEAR(d);
    return d;
}

/* The kind of each step, in run order (steps.def's names). New tuple. */
static PyObject *cg_get_step_kinds(CompiledGraph *cg, void *unused)
{
    (void)unused;
    PyObject *t = PyTuple_New(cg->plan.nsteps);   /* new */
    for (int32_t i = 0; t && i < cg->plan.nsteps; i++) {
        PyObject *name = PyUnicode_FromString(step_kinds[cg->plan.steps[i].kind].name);   /* new: stolen */
        if (!name)
            Py_CLEAR(t);
        else
            PyTuple_SET_ITEM(t, i, name);
    }
    return t;
}

/* profile: True while each step's time is summed (setting it True starts from zero). */
static PyObject *cg_get_profile(CompiledGraph *cg, void *unused)
{
    (void)unused;
    return PyBool_FromLong(cg->step_ns != NULL);
}

static int cg_set_profile(CompiledGraph *cg, PyObject *v, void *unused)
{
    (void)unused;
    int on = v ? PyObject_IsTrue(v) : 0;
    if (on < 0)
        return -1;
    PyMem_Free(cg->step_ns);
    cg->step_ns = NULL;
    if (on && !(cg->step_ns = PyMem_Calloc((size_t)cg->plan.nsteps + 1, sizeof(int64_t)))) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* The seconds each step took, summed over the runs since profile was set (zeros when not
 * profiling). New tuple. */
static PyObject *cg_get_step_times(CompiledGraph *cg, void *unused)
{
    (void)unused;
    PyObject *t = PyTuple_New(cg->plan.nsteps);   /* new */
    for (int32_t i = 0; t && i < cg->plan.nsteps; i++) {
        PyObject *x = PyFloat_FromDouble(cg->step_ns ? (double)cg->step_ns[i] * 1e-9 : 0.);   /* new: stolen */
        if (!x)
            Py_CLEAR(t);
        else
            PyTuple_SET_ITEM(t, i, x);
    }
    return t;
}

/* Per step, the graph nodes it runs (indices into graph.nodes), in graph order. New tuple. */
static PyObject *cg_get_step_nodes(CompiledGraph *cg, void *unused)
{
    (void)unused;
    const Graph *g = g_of(cg);
    PyObject *t = PyTuple_New(cg->plan.nsteps);   /* new */
    for (int32_t i = 0; t && i < cg->plan.nsteps; i++) {
        PyObject *l = PyList_New(0);   /* new: stolen */
        if (!l) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, l);
        for (int32_t ni = 0; ni < g->nnodes; ni++) {
            if (cg->plan.node_step[ni] != i)
                continue;
            PyObject *x = PyLong_FromLong(ni);   /* new */
            if (!x || PyList_Append(l, x) < 0) {
                Py_XDECREF(x);
                Py_CLEAR(t);
                break;
            }
            Py_DECREF(x);
        }
    }
    return t;
}

static PyObject *cg_get_source(CompiledGraph *cg, void *unused)
{
    (void)unused;
    return Py_NewRef(cg->source ? cg->source : Py_None);
}

static PyObject *cg_get_graph(CompiledGraph *cg, void *unused)
{
    (void)unused;
    return Py_NewRef(cg->graph);
}

static PyGetSetDef cg_getset[] = {
    {"stats", (getter)cg_get_stats, NULL,
     "kernels (distinct functions, over the compile budget), steps, kernel "
     "calls, eager fallbacks",
     NULL},
    {"step_kinds", (getter)cg_get_step_kinds, NULL, "the kind of each step, in run order", NULL},
    {"source", (getter)cg_get_source, NULL, "the generated C source", NULL},
    {"profile", (getter)cg_get_profile, (setter)cg_set_profile,
     "True: each run adds each step's wall time to step_times (setting it starts from zero)", NULL},
    {"step_times", (getter)cg_get_step_times, NULL, "seconds spent in each step while profile was on", NULL},
    {"step_nodes", (getter)cg_get_step_nodes, NULL, "the graph nodes each step runs", NULL},
    {"graph", (getter)cg_get_graph, NULL, "the graph it runs", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject SjCompiledGraph_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shapejit._C.CompiledGraph",
    .tp_basicsize = sizeof(CompiledGraph),
    .tp_dealloc = (destructor)cg_dealloc,
    .tp_vectorcall_offset = offsetof(CompiledGraph, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_getset = cg_getset,
    .tp_doc = "A graph lowered to generated C kernels and eager steps (the 'cpu' backend).",
};

/* _C._cg_compile_graph(graph): a CompiledGraph, or the graph itself when no node of it
 * lowers (nothing to gain). */
static PyObject *compile_graph(PyObject *self, PyObject *arg)
{
    (void)self;
    if (!PyObject_TypeCheck(arg, &SjGraph_Type)) {
        PyErr_Format(PyExc_TypeError, "_cg_compile_graph expects a shapejit graph, got %s", Py_TYPE(arg)->tp_name);
        return NULL;
    }
    if (graph_py_link_once((SjGraphObject *)arg) < 0)
        return NULL;
    Graph *g = ((SjGraphObject *)arg)->g;
    CompiledGraph *cg = PyObject_New(CompiledGraph, &SjCompiledGraph_Type);
    if (!cg)
        return NULL;
    cg->graph = Py_NewRef(arg);
    cg->source = NULL;
    cg->vectorcall = cg_vectorcall;
    cg->threads = 0;
    cg->step_ns = NULL;
    memset(&cg->plan, 0, sizeof cg->plan);
    memset(&cg->pool, 0, sizeof cg->pool);
    if (lower_plan(g, &cg->plan) < 0)
        goto fail;
    int lowers = 0;   /* a step of a kind worth a compiled graph (steps.def) */
    for (int32_t i = 0; i < cg->plan.nsteps; i++)
        lowers |= step_kinds[cg->plan.steps[i].kind].lowers;
    if (!lowers) {
        Py_DECREF(cg);
        return Py_NewRef(arg);
    }
    if (cg->plan.nkernels == 0 && cg->plan.nattns == 0)
        return (PyObject *)cg;   /* oneDNN steps only: no C to compile */
    if (lower_build(g, &cg->plan, &cg->source) < 0)
        goto fail;
    return (PyObject *)cg;
fail:
    Py_DECREF(cg);
    return NULL;
}

static PyMethodDef lower_methods[] = {
    {"_cg_compile_graph", compile_graph, METH_O,
     "_cg_compile_graph(graph): the graph lowered to generated C kernels (the 'cpu' backend)"},
    {"_lower_rows", lower_py_rows, METH_NOARGS, "The pointwise lowerings of lower.def (tests)."},
    {"_step_kinds", steps_py_kinds, METH_NOARGS, "The step kinds of steps.def (tests)."},
    {NULL, NULL, 0, NULL},
};

int lower_init_module(PyObject *m)
{
    if (primcache_init_module(m) < 0 || lazyview_init_type() < 0 || PyType_Ready(&SjCompiledGraph_Type) < 0 ||
        PyModule_AddObjectRef(m, "CompiledGraph", (PyObject *)&SjCompiledGraph_Type) < 0)
        return -1;
    return PyModule_AddFunctions(m, lower_methods);
}
