/* Kernel steps and eager steps of the cpu backend. A kernel step calls a generated kernel
 * (build.c) through its libffi description; an eager step runs its node's original call.
 *
 * Per kernel call: read each input's sizes, strides and data pointer (the tensor reader
 * for torch, the buffer protocol for numpy), broadcast them into the iteration space,
 * allocate the outputs (lower_new_output_dt: from the graph's buffer pool or the library's
 * empty(), contiguous, of each value's meta dtype) and call the kernel; a kernel that
 * returns 1 (an integer division by zero) has its nodes rerun eagerly; a lean reduction
 * that returns SJ_KERNEL_WANTS_FULL (rows it was built without, nothing written) gets
 * its full variant built (lower_build_full) and called instead, from then on. Anything
 * unexpected about an input (a dtype or a shape the plan did not foresee) runs that
 * kernel's nodes eagerly instead: never wrong, only slower.
 *
 * Memory: the plan's kernels and their node lists are PyMem of the plan; outputs go into
 * the run's vals[] as strong references; numpy inputs' buffers are held only during the
 * call. */
#include <string.h>

#include "lower_int.h"

/* The kernel's nodes, run the original way (an input the plan did not foresee). */
static int run_eagerly(LowerPlan *p, Graph *g, const Kernel *k, PyObject **vals)
{
    p->kernel_eager_runs++;
    for (int32_t i = 0; i < k->nnodes; i++)
        if (lower_exec_node(g, k->nodes[i], vals) < 0)
            return -1;
    return 0;
}

int step_kernel_run(Graph *g, LowerPlan *p, int32_t idx, PyObject **vals)
{
    const Kernel *k = &p->kernels[idx];   /* lower_build_full may set its `full` */
    if (k->nout == 0)
        return 0;   /* nothing it computes is read */
    if (k->over_budget) {   /* never compiled (build.c's budget): its nodes one by one */
        for (int32_t i = 0; i < k->nnodes; i++)
            if (lower_exec_node(g, k->nodes[i], vals) < 0)
                return -1;
        return 0;
    }
    int r = k->rank, nops = (int)(k->nin + k->nout);
    Operand ops[SJ_KMAX_OPERANDS];
    int nread = 0, rc = 0;
    int64_t n[SJ_MAX_RANK + 1];
    for (int d = 0; d < r; d++)
        n[d] = 1;
    for (int32_t i = 0; i < k->nin && rc == 0; i++) {
        Operand *op = &ops[k->nout + i];
        rc = lower_read_input_dt(vals[k->ins[i]], k->lib, (DType)g->values[k->ins[i]].meta.dtype, op);
        nread = i + 1;
        if (rc == 0 && op->ndim > r)
            rc = 1;
        /* broadcast into the iteration space, right-aligned */
        for (int d = 0; rc == 0 && d < op->ndim; d++) {
            int64_t s = op->size[d], *t = &n[r - op->ndim + d];
            if (s != 1 && *t != 1 && s != *t)
                rc = 1;
            else if (s != 1)
                *t = s;
        }
    }
    int64_t st[SJ_KMAX_OPERANDS * SJ_MAX_RANK];
    char *ptrs[SJ_KMAX_OPERANDS];
    int64_t dense = 1;
    if (rc == 0) {
        for (int32_t i = 0; i < k->nin; i++) {
            Operand *op = &ops[k->nout + i];
            int64_t expect = 1;
            for (int d = r - 1; d >= 0; d--) {
                int od = d - (r - op->ndim);
                int64_t s = od >= 0 ? op->size[od] : 1;
                st[(k->nout + i) * r + d] = od < 0 || (s == 1 && n[d] != 1) ? 0 : op->stride[od];
                if (s != n[d] || (n[d] != 1 && op->stride[od] != expect))
                    dense = 0;
                expect *= n[d];
            }
            ptrs[k->nout + i] = op->data;
        }
        for (int32_t j = 0; j < k->nout && rc == 0; j++) {
            int64_t osize[SJ_MAX_RANK + 1];
            int orank = lower_out_layout(k, (int)j, n, osize, &st[j * r]);
            if (orank < 0) {
                rc = 1;
                break;
            }
            DType odt = (DType)g->values[k->outs[j]].meta.dtype;
            PyObject *o = lower_new_output_dt(k->lib, odt, osize, orank);
            if (!o) {
                rc = -1;
                break;
            }
            Py_XSETREF(vals[k->outs[j]], o);
            Operand *op = &ops[j];
            if ((rc = lower_read_input_dt(o, k->lib, odt, op)) != 0) {
                if (op->has_view)
                    PyBuffer_Release(&op->view);
                break;
            }
            ptrs[j] = op->data;
            /* an output array's buffer is only needed for its pointer: numpy keeps the
             * array (vals holds it) */
            if (op->has_view)
                PyBuffer_Release(&op->view);
        }
    }
    if (rc == 0) {
        void *args[4];
        int64_t bad = 0;
        const int64_t *pn = n;
        char *const *pp = ptrs;
        const int64_t *pst = st;
        args[0] = &pn;
        args[1] = &pp;
        args[2] = &pst;
        args[3] = &dense;
        CgFn *call = k->full ? &k->full->call : (CgFn *)&k->call;
        Py_BEGIN_ALLOW_THREADS cg_fn_call(call, &bad, args);
        Py_END_ALLOW_THREADS p->kernel_calls++;
        if (bad == SJ_KERNEL_WANTS_FULL && k->lean) {   /* it wrote nothing */
            int b = lower_build_full(g, p, idx);
            bad = b != 0;   /* another thread's build under way: eagerly this time */
            if (b < 0)
                rc = -1;
            else if (b == 0) {
                call = &k->full->call;
                Py_BEGIN_ALLOW_THREADS cg_fn_call(call, &bad, args);
                Py_END_ALLOW_THREADS
            }
        }
        if (rc == 0)
            rc = bad != 0;   /* an element eager must handle (integer division by zero) */
    }
    for (int i = 0; i < nread; i++)
        if (ops[k->nout + i].has_view)
            PyBuffer_Release(&ops[k->nout + i].view);
    (void)nops;
    if (rc > 0) {
        /* the outputs allocated for the kernel are replaced by eager's */
        for (int32_t j = 0; j < k->nout; j++)
            Py_CLEAR(vals[k->outs[j]]);
        return run_eagerly(p, g, k, vals);
    }
    return rc;
}

void step_kernel_free(LowerPlan *p)
{
    for (int32_t i = 0; i < p->nkernels; i++) {
        PyMem_Free(p->kernels[i].nodes);
        PyMem_Free(p->kernels[i].full);
    }
    PyMem_Free(p->kernels);
    p->kernels = NULL;
    p->nkernels = 0;
}

int step_kernel_stats(const Graph *g, const LowerPlan *p, PyObject *d)
{
    (void)g;
    long long over = 0, nfn = 0, full = 0;
    for (int32_t i = 0; i < p->nkernels; i++) {
        const Kernel *k = &p->kernels[i];
        over += k->over_budget;
        int first = k->fn != NULL;   /* the first kernel with its function */
        for (int32_t j = 0; j < i && first; j++)
            first = p->kernels[j].fn != k->fn;
        nfn += first;
        full += k->full != NULL;
    }
    static const char *const names[7] = {"kernels",         "kernel_functions", "kernels_over_budget",
                                         "kernel_calls",    "eager_fallbacks",  "full_variants_built",
                                         "recomputed_nodes"};
    long long vals[7] = {p->nkernels, nfn, over, p->kernel_calls, p->kernel_eager_runs, full, p->kernel_copies};
    return lower_put_counts(d, 7, names, vals);
}

/* --------------------------------------------------------------- eager ---- */

int step_eager_run(Graph *g, LowerPlan *p, int32_t ni, PyObject **vals)
{
    (void)p;
    return lower_exec_node(g, ni, vals);
}

int step_eager_stats(const Graph *g, const LowerPlan *p, PyObject *d)
{
    PyObject *ops = PyDict_New();   /* new */
    if (!ops)
        return -1;
    long neager = 0;
    for (int32_t i = 0; i < p->nsteps; i++) {
        const Step *s = &p->steps[i];
        if (s->kind != STEP_EAGER)
            continue;
        neager++;
        int op = g->nodes[s->index].op;
        const char *name = op >= 0 && op < OP_COUNT ? op_info[op].name : "input";
        PyObject *had = PyDict_GetItemString(ops, name);   /* borrowed */
        PyObject *n = PyLong_FromLong(had ? PyLong_AsLong(had) + 1 : 1);   /* new */
        if (!n || PyDict_SetItemString(ops, name, n) < 0) {
            Py_XDECREF(n);
            Py_DECREF(ops);
            return -1;
        }
        Py_DECREF(n);
    }
    PyObject *cnt = PyLong_FromLong(neager);   /* new */
    int rc = cnt && PyDict_SetItemString(d, "eager_steps", cnt) == 0 && PyDict_SetItemString(d, "eager_ops", ops) == 0
                 ? 0
                 : -1;
    Py_XDECREF(cnt);
    Py_DECREF(ops);
    return rc;
}
