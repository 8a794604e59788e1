/* The PEP 523 frame hook and the compiled-function object that turns it on.
 *
 * This is the one file that reads CPython's _PyInterpreterFrame (3.11 layout, from
 * internal/pycore_frame.h): f_code, f_func, f_globals, f_builtins and localsplus. At the
 * moment the hook runs, localsplus holds the raw arguments (MAKE_CELL and COPY_FREE_VARS
 * have not run yet). A frame the hook does not run itself goes to the exported
 * _PyEval_EvalFrameDefault; a frame it answers from a cache entry returns the rebuilt
 * result, and the caller (_PyEval_Vector) clears the frame as usual. */
#define Py_BUILD_CORE
#include <Python.h>
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE
#include <structmember.h>

#include "compile.h"
#include "../graph/ir.h"
#include "libs.h"
#include "events.h"
#include "../core/config.h"
#include "../core/log.h"
#include "../core/errors.h"

/* ------------------------------------------------------------- hook state ---- */

static _Thread_local int tls_active;                    /* >0: compiled code runs here */
static _Thread_local const CompileOptions *tls_opts;    /* options of the innermost call */
static _Thread_local int tls_top_pending;               /* the compiled function's own frame is next */
static _Thread_local int tls_run_only;                  /* >0: inside a frame past its cache limit:
                                                           cached entries still serve, nothing compiles */
static int users;                                       /* threads with tls_active > 0 */
static _PyFrameEvalFunction prev_eval;

static PyObject *sj_eval_frame(PyThreadState *ts, _PyInterpreterFrame *f, int throwflag);

static void hook_enter(void)
{
    if (tls_active++ == 0 && users++ == 0) {
        PyInterpreterState *interp = PyInterpreterState_Get();
        prev_eval = _PyInterpreterState_GetEvalFrameFunc(interp);
        _PyInterpreterState_SetEvalFrameFunc(interp, sj_eval_frame);
    }
}

static void hook_leave(void)
{
    if (--tls_active == 0 && --users == 0)
        _PyInterpreterState_SetEvalFrameFunc(PyInterpreterState_Get(), prev_eval);
}

static PyObject *run_default(PyThreadState *ts, _PyInterpreterFrame *f, int throwflag)
{
    if (prev_eval && prev_eval != sj_eval_frame)
        return prev_eval(ts, f, throwflag);
    return _PyEval_EvalFrameDefault(ts, f, throwflag);
}

/* --------------------------------------------------------------- skipping ---- */

static PyObject *skip_prefixes;   /* strong tuple of str: files never compiled */

static int init_skip_prefixes(void)
{
    if (skip_prefixes)
        return 0;
    PyObject *sc = PyImport_ImportModule("sysconfig");
    PyObject *paths = sc ? PyObject_CallMethod(sc, "get_paths", NULL) : NULL;
    PyObject *stdlib = paths ? PyDict_GetItemString(paths, "stdlib") : NULL;
    PyObject *mename = PyUnicode_FromString("shapejit");
    PyObject *me = mename ? PyImport_GetModule(mename) : NULL;   /* being imported: in sys.modules */
    Py_XDECREF(mename);
    PyObject *mefile = me ? PyObject_GetAttrString(me, "__file__") : NULL;
    PyObject *os = PyImport_ImportModule("os");
    PyObject *ospath = os ? PyObject_GetAttrString(os, "path") : NULL;
    PyObject *medir = (ospath && mefile) ? PyObject_CallMethod(ospath, "dirname", "O", mefile) : NULL;
    Py_XDECREF(ospath);
    if (stdlib && medir)
        skip_prefixes = PyUnicode_Check(stdlib) ? Py_BuildValue("(OO)", stdlib, medir) : NULL;
    Py_XDECREF(sc);
    Py_XDECREF(paths);
    Py_XDECREF(me);
    Py_XDECREF(mefile);
    Py_XDECREF(os);
    Py_XDECREF(medir);
    if (!skip_prefixes) {
        sj_err_clear();
        skip_prefixes = PyTuple_New(0);
    }
    return skip_prefixes ? 0 : -1;
}

/* 1 when code of this file is never compiled. */
static int skip_file(PyObject *filename)
{
    const char *f = PyUnicode_AsUTF8(filename);
    if (!f) {
        sj_err_clear();
        return 1;
    }
    if (f[0] == '<' && strncmp(f, "<string>", 8) != 0 && strncmp(f, "<stdin>", 7) != 0)
        return strncmp(f, "<frozen", 7) == 0;
    if (strstr(f, "/site-packages/torch/")) {
        /* nn module forwards are compiled when they are the function a user compiled; the
         * module call machinery itself is not */
        return !strstr(f, "/torch/nn/modules/") || strstr(f, "/torch/nn/modules/module.py");
    }
    if (strstr(f, "/site-packages/numpy/"))
        return 1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(skip_prefixes); i++) {
        const char *p = PyUnicode_AsUTF8(PyTuple_GET_ITEM(skip_prefixes, i));
        if (p && strncmp(f, p, strlen(p)) == 0 && !strstr(f, "/site-packages/"))
            return 1;
        if (p && i == 1 && strncmp(f, p, strlen(p)) == 0)
            return 1;   /* shapejit's own package */
    }
    return 0;
}

static int decide_skip(PyCodeObject *co, _PyInterpreterFrame *f)
{
    if (!(co->co_flags & CO_OPTIMIZED) || !f->f_func)
        return 1;
    if (co->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE)) {
        if (!skip_file(co->co_filename)) {
            sj_stats.graph_breaks++;
            PyObject *reason = PyUnicode_FromFormat("generators and coroutines are not compiled: %U", co->co_qualname);
            if (reason) {
                if (sj_log_on(LOG_GRAPH_BREAKS, SJ_INFO))
                    sj_log(LOG_GRAPH_BREAKS, SJ_INFO, "Graph break in user code at %U:%d\nGraph Break Reason: %U",
                           co->co_filename, co->co_firstlineno, reason);
                events_emit_break(reason, NULL);
                Py_DECREF(reason);
            }
            sj_err_clear();
        }
        return 1;
    }
    return skip_file(co->co_filename);
}

/* ------------------------------------------------------- tensor precheck ---- */

static int holds_tensor(PyObject *v, int depth)
{
    if (libs_is_tensor(v) || libs_is_ndarray(v) || libs_is_module(v))
        return 1;
    if (depth > 0 && (PyList_Check(v) || PyTuple_Check(v))) {
        PyObject *fast = PySequence_Fast(v, "");
        if (!fast) {
            sj_err_clear();
            return 0;
        }
        int r = 0;
        for (Py_ssize_t i = 0; !r && i < PySequence_Fast_GET_SIZE(fast); i++)
            r = holds_tensor(PySequence_Fast_GET_ITEM(fast, i), depth - 1);
        Py_DECREF(fast);
        return r;
    }
    if (depth > 0 && PyDict_Check(v)) {
        Py_ssize_t pos = 0;
        PyObject *k, *x;
        while (PyDict_Next(v, &pos, &k, &x))
            if (holds_tensor(x, depth - 1))
                return 1;
    }
    return 0;
}

/* Frames reached from eager code are compiled only when they see a tensor, an array or a
 * module among their arguments or closure (the function a user compiled always is). */
static int frame_has_tensors(PyCodeObject *co, _PyInterpreterFrame *f)
{
    if (libs_refresh() < 0) {
        sj_err_clear();
        return 0;
    }
    int nargs = co->co_argcount + co->co_kwonlyargcount + ((co->co_flags & CO_VARARGS) != 0) +
                ((co->co_flags & CO_VARKEYWORDS) != 0);
    for (int i = 0; i < nargs && i < co->co_nlocalsplus; i++)
        if (f->localsplus[i] && holds_tensor(f->localsplus[i], 2))
            return 1;
    PyObject *clo = f->f_func->func_closure;
    for (Py_ssize_t i = 0; clo && i < PyTuple_GET_SIZE(clo); i++) {
        PyObject *v = PyCell_GET(PyTuple_GET_ITEM(clo, i));
        if (v && holds_tensor(v, 1))
            return 1;
    }
    return 0;
}

/* ------------------------------------------------------------ the hook ---- */

/* "- 0/1: tensor 'x' size mismatch ..." for each entry, oldest first (new str). */
static PyObject *explain_failures(CodeState *st, GuardCall *call)
{
    PyObject *lines = PyList_New(0);
    if (!lines)
        return NULL;
    for (CacheEntry *e = st->entries; e; e = e->next) {
        PyObject *why = guard_entry_explain(call, &e->ge);
        PyObject *line = NULL;
        if (why && why != Py_None)
            line = PyUnicode_FromFormat("- %d/%d: %U", st->frame_id, e->compile_id, why);
        Py_XDECREF(why);
        if (line) {
            int r = PyList_Insert(lines, 0, line);
            Py_DECREF(line);
            if (r < 0) {
                Py_DECREF(lines);
                return NULL;
            }
        } else if (PyErr_Occurred()) {
            sj_err_clear();
        }
    }
    PyObject *nl = PyUnicode_FromString("\n    ");
    PyObject *r = nl ? PyUnicode_Join(nl, lines) : NULL;
    Py_XDECREF(nl);
    Py_DECREF(lines);
    return r;
}

/* Run a graph entry; NULL with an exception, or (PyObject *)-1 for "run eagerly instead". */
#define RUN_EAGER ((PyObject *)-1)

static PyObject *run_entry(CacheEntry *e, GuardCall *call)
{
    PyObject **memo = call->memo;
    const SourceTable *t = &call->t->src;
    PyObject *small[16];
    PyObject **in = e->ninputs <= 16 ? small : PyMem_Malloc(sizeof(PyObject *) * (size_t)e->ninputs);
    if (!in)
        return PyErr_NoMemory();
    for (int32_t i = 0; i < e->ninputs; i++)
        if (!(in[i] = sources_resolve(t, e->inputs[i], call->fv, memo))) {
            if (in != small)
                PyMem_Free(in);
            return NULL;
        }
    PyObject *outs = e->compiled ? PyObject_Vectorcall(e->compiled, in, (size_t)e->ninputs, NULL) : PyTuple_New(0);
    if (in != small)
        PyMem_Free(in);
    if (!outs)
        return NULL;
    if (e->graph && ((SjGraphObject *)e->graph)->mismatch) {
        /* a shape rule disagreed with the real op: never trust this entry again */
        PyObject *why = ((SjGraphObject *)e->graph)->mismatch;
        if (sj_log_on(LOG_GRAPH_BREAKS, SJ_WARNING))
            sj_log(LOG_GRAPH_BREAKS, SJ_WARNING, "shapejit internal: %U; this entry runs eagerly from now on", why);
        e->action = ENTRY_EAGER;
        Py_XSETREF(e->reason, PyUnicode_FromFormat("internal: %U", why));
        if (!e->has_mutation) {
            Py_DECREF(outs);
            return RUN_EAGER;
        }
    }
    PyObject *fast = PySequence_Fast(outs, "shapejit: the compiled graph must return a tuple or list");
    Py_DECREF(outs);
    if (!fast)
        return NULL;
    PyObject *r = compile_build_result(e->plan, fast, memo, t, call->fv);
    Py_DECREF(fast);
    return r;
}

/* A graph raised (bad data for an index, say). It changed nothing (no in-place op), so
 * the frame runs again in the interpreter: the user's own try/except sees the error, and
 * its traceback shows the user's lines. */
static PyObject *rerun_eagerly(void)
{
    if (!PyErr_ExceptionMatches(PyExc_Exception) || PyErr_ExceptionMatches(PyExc_MemoryError))
        return NULL;   /* KeyboardInterrupt, SystemExit, MemoryError: the user sees them */
    if (sj_log_on(LOG_GRAPH_BREAKS, SJ_DEBUG)) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        sj_log(LOG_GRAPH_BREAKS, SJ_DEBUG, "a compiled graph raised %R; running the frame eagerly", ev ? ev : et);
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
    }
    sj_err_clear();
    return RUN_EAGER;
}

/* 1 when every resume code of a break entry still exists (the user's code keeps them; a
 * resume function kept alive elsewhere may outlive it). Otherwise the entry turns eager. */
static int resumes_alive(CacheEntry *e)
{
    for (int i = 0; i < e->nresume; i++)
        if (PyWeakref_GetObject(e->resume[i]) == Py_None) {
            e->action = ENTRY_EAGER;
            Py_XSETREF(e->reason, PyUnicode_FromString("the resume function's code is gone"));
            return 0;
        }
    return 1;
}

/* ENTRY_BREAK: call the continuation with the values the graph and plan rebuilt (args,
 * a tuple) and one resume function per way out, made with the frame's globals and
 * closure. The hook is on again for what the continuation runs. */
static PyObject *call_continuation(CacheEntry *e, PyObject *args, _PyInterpreterFrame *f)
{
    PyObject *fns[2] = {NULL, NULL}, *cont = NULL, *r = NULL;
    PyObject *closure = f->f_func->func_closure;
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    PyObject **argv = PyMem_Malloc(sizeof(PyObject *) * ((size_t)n + 3));
    if (!argv)
        return PyErr_NoMemory();
    for (int i = 0; i < e->nresume; i++) {
        PyObject *code = PyWeakref_GetObject(e->resume[i]);   /* borrowed; checked by resumes_alive */
        fns[i] = PyFunction_New(code, f->f_globals);
        if (!fns[i] || (closure && PyFunction_SetClosure(fns[i], closure) < 0))
            goto done;
    }
    cont = PyFunction_New(e->cont, f->f_globals);
    if (!cont)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++)
        argv[i] = PyTuple_GET_ITEM(args, i);
    int nargs = (int)n + e->nresume;
    for (int i = 0; i < e->nresume; i++)
        argv[n + i] = fns[i];
    /* e is not touched after this point: user code runs, and may reset() */
    code_cache_busy_leave();
    r = PyObject_Vectorcall(cont, argv, (size_t)nargs, NULL);
    code_cache_busy_enter();
done:
    PyMem_Free(argv);
    Py_XDECREF(fns[0]);
    Py_XDECREF(fns[1]);
    Py_XDECREF(cont);
    return r;
}

/* Answer the frame from entry e (its guards passed, memo holds its sources): RUN_EAGER,
 * or what the graph and plan give — for ENTRY_BREAK the continuation's arguments. */
static PyObject *answer(CacheEntry *e, GuardCall *call)
{
    if (e->action == ENTRY_EAGER || (e->action == ENTRY_BREAK && !resumes_alive(e)))
        return RUN_EAGER;
    PyObject *r = run_entry(e, call);
    return (!r && !e->has_mutation) ? rerun_eagerly() : r;
}

/* After the memo is released: an ENTRY_BREAK result is the continuation's arguments. */
static PyObject *finish(CacheEntry *e, PyObject *r, _PyInterpreterFrame *f, int saved)
{
    if (r && r != RUN_EAGER && e->action == ENTRY_BREAK) {
        tls_active = saved;
        Py_SETREF(r, call_continuation(e, r, f));
    }
    return r;
}

static PyObject *sj_eval_frame(PyThreadState *ts, _PyInterpreterFrame *f, int throwflag)
{
    if (tls_active <= 0 || throwflag || sj_stance == STANCE_FORCE_EAGER)
        return run_default(ts, f, throwflag);
    /* Everything below may run Python code (imports, properties read by guards, the
     * backend): none of those frames may be compiled, so the hook is off until we either
     * return a result or hand the frame to the interpreter. */
    int saved = tls_active;
    tls_active = 0;
    code_cache_busy_enter();   /* entries and trees stay put until busy_leave */
    PyObject *r = NULL;
    PyCodeObject *co = f->f_code;
    CodeState *st = code_state_get(co);
    if (!st) {
        sj_err_clear();
        goto eager;
    }
    if (st->role == ROLE_CONT)
        goto eager;
    if (st->skip < 0)
        st->skip = st->role == ROLE_RESUME ? 0 : decide_skip(co, f);
    if (st->skip)
        goto eager;
    int is_top = tls_top_pending;
    tls_top_pending = 0;
    st->calls++;
    FrameView fv = {f->localsplus, f->f_func->func_closure, f->f_globals, f->f_builtins};

    /* ---- look for an entry whose guards pass ---- */
    GuardCall call;
    if (guard_call_begin(&call, &st->tree, &fv, tls_opts ? tls_opts->key : NULL) < 0) {
        sj_err_clear();
        goto eager;
    }
    GuardEntry *hit = st->nentries ? guard_tree_find(&call) : NULL;
    if (sj_err_deferred()) {   /* interrupted while guards were read: not a miss */
        guard_call_end(&call);
        goto out;
    }
    if (hit) {
        CacheEntry *e = hit->owner;
        r = answer(e, &call);
        guard_call_end(&call);
        if (r == RUN_EAGER)
            goto eager;
        r = finish(e, r, f, saved);
        goto out;
    }

    /* ---- a miss: compile, unless a limit or the stance says otherwise ---- */
    PyObject *why = NULL;
    int compile = 1;
    if (tls_run_only)
        compile = 0;   /* called from a frame past its cache limit */
    else if (!is_top && st->role != ROLE_RESUME &&
        (!frame_has_tensors(co, f) || PyUnicode_READ_CHAR(co->co_name, 0) == '<'))
        compile = 0;   /* comprehension bodies reached from eager code iterate live iterators */
    else if (sj_stance == STANCE_EAGER_ON_RECOMPILE)
        compile = 0;   /* as torch: cached entries only, a first compile included */
    else if (st->nentries == 0 && sj_stance == STANCE_EAGER_THEN_COMPILE && st->calls == 1) {
        compile = 0;
        if (symb_record_call(st, co, f->localsplus) < 0)
            sj_err_clear();   /* a missing record only costs a static first compile */
    }
    else if (st->warned_limit && (st->nentries >= sj_config.cache_size_limit ||
                                  sj_stats.cache_entries >= sj_config.accumulated_cache_size_limit)) {
        guard_call_end(&call);
        goto run_only;   /* past the limit and already said so: no reason to work out */
    }
    if (compile && st->nentries > 0) {
        why = explain_failures(st, &call);
        if (!why)
            sj_err_clear();
        else
            Py_XSETREF(st->last_reason, Py_NewRef(why));
    }
    guard_call_end(&call);
    if (!compile)
        goto eager;
    if (st->nentries > 0 && sj_stance == STANCE_FAIL_ON_RECOMPILE) {
        PyErr_Format(PyExc_RuntimeError,
                     "Detected recompile when torch.compile stance is 'fail_on_recompile'. "
                     "filename: '%U', function name: '%U', line number: %d",
                     co->co_filename, co->co_name, co->co_firstlineno);
        Py_XDECREF(why);
        goto out;
    }
    if (st->nentries >= sj_config.cache_size_limit ||
        sj_stats.cache_entries >= sj_config.accumulated_cache_size_limit) {
        if (!st->warned_limit) {
            st->warned_limit = 1;
            PyObject *none_yet = PyUnicode_FromString("none (no entry of this function yet)");
            if (!none_yet) {
                sj_err_clear();
                Py_XDECREF(why);
                goto eager;
            }
            int per_code = st->nentries >= sj_config.cache_size_limit;
            PyObject *msg = PyUnicode_FromFormat(
                "shapejit hit config.%s (%ld)\n   function: '%U' (%U:%d)\n   last reason: %U\n"
                "To log all recompilation reasons, use TORCH_LOGS=\"recompiles\". New inputs of this "
                "function run eagerly; its existing compiled entries are still used.",
                per_code ? "cache_size_limit" : "accumulated_cache_size_limit",
                per_code ? sj_config.cache_size_limit : sj_config.accumulated_cache_size_limit,
                co->co_name, co->co_filename, co->co_firstlineno, why ? why : none_yet);
            if (msg) {
                if (PyErr_WarnEx(PyExc_UserWarning, PyUnicode_AsUTF8(msg), 1) < 0)
                    sj_err_clear();
                Py_DECREF(msg);
            }
            Py_DECREF(none_yet);
            sj_err_clear();
        }
        Py_XDECREF(why);
        goto run_only;
    }
    if (st->nentries > 0) {
        sj_stats.recompiles++;
        if (sj_log_on(LOG_RECOMPILES, SJ_INFO))
            sj_log(LOG_RECOMPILES, SJ_INFO,
                   "Recompiling function %U in %U:%d\n    triggered by the following guard failure(s):\n    %S",
                   co->co_name, co->co_filename, co->co_firstlineno, why ? why : Py_None);
    }
    Py_XDECREF(why);
    /* fullgraph=True speaks for the function the user compiled; frames that its eager
     * fallback reaches are compiled on a best-effort basis */
    CompileOptions local;
    const CompileOptions *opts = NULL;
    if (tls_opts) {
        local = *tls_opts;
        local.fullgraph = tls_opts->fullgraph && is_top;
        opts = &local;
    }
    CacheEntry *e = opts ? compile_frame(co, f->localsplus, f->f_func->func_closure, f->f_globals,
                                         f->f_builtins, opts, st)
                         : NULL;
    if (!e) {
        if (PyErr_Occurred() || sj_err_deferred())
            goto out;   /* fullgraph=True failure, out of memory, an interrupt: the user sees it */
        goto eager;
    }
    if (e->action == ENTRY_EAGER)
        goto eager;
    /* run the new entry: its guards pass by construction */
    if (guard_call_begin(&call, &st->tree, &fv, opts->key) < 0)
        goto out;
    r = answer(e, &call);
    guard_call_end(&call);
    if (r == RUN_EAGER)
        goto eager;
    r = finish(e, r, f, saved);
out:
    code_cache_busy_leave();
    tls_active = saved;
    if (sj_err_deferred()) {   /* an interrupt met on the way wins over any result */
        Py_CLEAR(r);
        sj_err_raise_deferred();
    }
    return r;
eager:
    code_cache_busy_leave();
    tls_active = saved;
    if (sj_err_raise_deferred() < 0)
        return NULL;   /* interrupted: the frame does not start */
    return run_default(ts, f, throwflag);
run_only:
    /* Past the cache limit the frame runs as eager code, and so does everything it
     * calls, for this call: callees use their cached entries but never compile (as
     * torch's RUN_ONLY), so no frame is captured on behalf of a frame that is not. */
    code_cache_busy_leave();
    tls_active = saved;
    if (sj_err_raise_deferred() < 0)
        return NULL;
    tls_run_only++;
    r = run_default(ts, f, throwflag);
    tls_run_only--;
    return r;
}

/* ------------------------------------------------------- CompiledFunction ---- */

typedef struct {
    PyObject_HEAD
    PyObject *fn;          /* strong */
    PyObject *options;     /* strong */
    PyObject *key;         /* strong: options.key (copts.key borrows it) */
    PyObject *name;        /* strong: options.backend_name (copts.name borrows it) */
    PyObject *dict;        /* strong: __name__, __doc__, ... */
    CompileOptions copts;  /* backend borrowed from options (kept alive by it) */
    PyObject *backend;     /* strong: options.backend */
    vectorcallfunc vectorcall;
} SjCompiledFunction;

static PyObject *cf_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    SjCompiledFunction *cf = (SjCompiledFunction *)self;
    const CompileOptions *prev = tls_opts;
    int prev_top = tls_top_pending, prev_run_only = tls_run_only;
    tls_opts = &cf->copts;
    tls_top_pending = 1;
    tls_run_only = 0;   /* a compiled function called from a frame past its limit is compiled */
    hook_enter();
    PyObject *r = PyObject_Vectorcall(cf->fn, args, nargsf, kwnames);
    hook_leave();
    if (sj_err_deferred()) {   /* kept aside by work outside any frame of the hook */
        Py_CLEAR(r);
        sj_err_raise_deferred();
    }
    tls_opts = prev;
    tls_top_pending = prev_top;
    tls_run_only = prev_run_only;
    return r;
}

static PyObject *cf_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *fn, *options;
    static char *kwlist[] = {"fn", "options", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO:CompiledFunction", kwlist, &fn, &options))
        return NULL;
    if (!PyCallable_Check(fn)) {
        PyErr_Format(PyExc_TypeError, "shapejit can only compile callables, not %s", Py_TYPE(fn)->tp_name);
        return NULL;
    }
    PyObject *backend = PyObject_GetAttrString(options, "backend");
    if (!backend)
        return NULL;
    if (!PyCallable_Check(backend)) {
        PyErr_Format(PyExc_TypeError, "options.backend must be callable, not %s", Py_TYPE(backend)->tp_name);
        Py_DECREF(backend);
        return NULL;
    }
    PyObject *fg = PyObject_GetAttrString(options, "fullgraph");
    int fullgraph = fg ? PyObject_IsTrue(fg) : -1;
    Py_XDECREF(fg);
    if (fullgraph < 0) {
        Py_DECREF(backend);
        return NULL;
    }
    PyObject *dyn = PyObject_GetAttrString(options, "dynamic");
    int dynamic = !dyn ? -2 : dyn == Py_None ? -1 : PyObject_IsTrue(dyn);
    Py_XDECREF(dyn);
    if (dynamic < -1) {
        sj_err_clear();
        dynamic = -1;   /* options without the attribute: automatic */
    }
    PyObject *key = PyObject_GetAttrString(options, "key");
    PyObject *name = key ? PyObject_GetAttrString(options, "backend_name") : NULL;
    PyObject *internal = name ? PyObject_GetAttrString(options, "internal") : NULL;
    int is_internal = internal ? PyObject_IsTrue(internal) : -1;
    Py_XDECREF(internal);
    if (is_internal < 0 || !PyUnicode_Check(name)) {
        if (name && !PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "options.backend_name must be a str");
        Py_DECREF(backend);
        Py_XDECREF(key);
        Py_XDECREF(name);
        return NULL;
    }
    SjCompiledFunction *cf = (SjCompiledFunction *)type->tp_alloc(type, 0);
    if (!cf) {
        Py_DECREF(backend);
        Py_DECREF(key);
        Py_DECREF(name);
        return NULL;
    }
    cf->key = key;
    cf->copts.key = key;
    cf->name = name;
    cf->copts.name = name;
    cf->copts.internal = is_internal;
    cf->copts.dynamic = dynamic;
    cf->fn = Py_NewRef(fn);
    cf->options = Py_NewRef(options);
    cf->backend = backend;
    cf->copts.backend = backend;
    cf->copts.fullgraph = fullgraph;
    cf->vectorcall = cf_vectorcall;
    cf->dict = PyDict_New();
    if (!cf->dict) {
        Py_DECREF(cf);
        return NULL;
    }
    static const char *const copied[] = {"__name__", "__qualname__", "__doc__", "__module__"};
    for (size_t i = 0; i < sizeof copied / sizeof *copied; i++) {
        PyObject *v = PyObject_GetAttrString(fn, copied[i]);
        if (!v) {
            sj_err_clear();
            continue;
        }
        int r = PyDict_SetItemString(cf->dict, copied[i], v);
        Py_DECREF(v);
        if (r < 0) {
            Py_DECREF(cf);
            return NULL;
        }
    }
    return (PyObject *)cf;
}

static int cf_traverse(SjCompiledFunction *cf, visitproc visit, void *arg)
{
    Py_VISIT(cf->fn);
    Py_VISIT(cf->options);
    Py_VISIT(cf->dict);
    Py_VISIT(cf->backend);
    Py_VISIT(cf->key);
    Py_VISIT(cf->name);
    return 0;
}

static int cf_clear(SjCompiledFunction *cf)
{
    Py_CLEAR(cf->fn);
    Py_CLEAR(cf->options);
    Py_CLEAR(cf->dict);
    Py_CLEAR(cf->backend);
    Py_CLEAR(cf->key);
    Py_CLEAR(cf->name);
    return 0;
}

static void cf_dealloc(SjCompiledFunction *cf)
{
    PyObject_GC_UnTrack(cf);
    cf_clear(cf);
    Py_TYPE(cf)->tp_free((PyObject *)cf);
}

static PyObject *cf_descr_get(PyObject *self, PyObject *obj, PyObject *type)
{
    (void)type;
    if (!obj || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static PyObject *cf_repr(SjCompiledFunction *cf)
{
    return PyUnicode_FromFormat("<shapejit compiled %R>", cf->fn);
}

static PyMemberDef cf_members[] = {
    {"__wrapped__", T_OBJECT, offsetof(SjCompiledFunction, fn), READONLY, "the original callable"},
    {"_options", T_OBJECT, offsetof(SjCompiledFunction, options), READONLY, "compile options"},
    {"__dictoffset__", T_PYSSIZET, offsetof(SjCompiledFunction, dict), READONLY, NULL},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(SjCompiledFunction, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject SjCompiledFunction_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shapejit._C.CompiledFunction",
    .tp_basicsize = sizeof(SjCompiledFunction),
    .tp_dealloc = (destructor)cf_dealloc,
    .tp_vectorcall_offset = offsetof(SjCompiledFunction, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_repr = (reprfunc)cf_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_traverse = (traverseproc)cf_traverse,
    .tp_clear = (inquiry)cf_clear,
    .tp_members = cf_members,
    .tp_descr_get = cf_descr_get,
    .tp_dictoffset = offsetof(SjCompiledFunction, dict),
    .tp_getattro = PyObject_GenericGetAttr,
    .tp_setattro = PyObject_GenericSetAttr,
    .tp_new = cf_new,
    .tp_doc = "A callable that runs fn with shapejit's frame hook on.",
};

int hook_init_types(PyObject *m)
{
    if (init_skip_prefixes() < 0)
        return -1;
    if (PyType_Ready(&SjCompiledFunction_Type) < 0)
        return -1;
    if (PyModule_AddObjectRef(m, "CompiledFunction", (PyObject *)&SjCompiledFunction_Type) < 0)
        return -1;
    SjUnsupported = PyErr_NewException("shapejit._C.Unsupported", PyExc_RuntimeError, NULL);
    if (!SjUnsupported || PyModule_AddObjectRef(m, "Unsupported", SjUnsupported) < 0)
        return -1;
    SjBackendCompilerFailed = PyErr_NewException("shapejit._C.BackendCompilerFailed", PyExc_RuntimeError, NULL);
    if (!SjBackendCompilerFailed || PyModule_AddObjectRef(m, "BackendCompilerFailed", SjBackendCompilerFailed) < 0)
        return -1;
    return code_cache_init();
}
