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
#include <pthread.h>

#include "compile.h"
#include "../graph/ir.h"
#include "../vocab/libs.h"
#include "events.h"
#include "../core/config.h"
#include "../core/log.h"
#include "../core/trace.h"
#include "../core/errors.h"
#include "../core/pyutil.h"

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
    if (skip_file(co->co_filename))
        return 1;
    /* the __init__ of an nn.Module runs in the interpreter with everything it calls
     * (reset_parameters, nn.init), as under torch.compile: a module made in a compiled frame
     * is made at run time, its parameters' initialisation drawing from the global generator */
    if (co->co_argcount > 0 && f->localsplus[0] && PyUnicode_CompareWithASCIIString(co->co_name, "__init__") == 0) {
        if (libs_refresh() < 0)
            sj_err_clear();
        if (libs.module_type && PyObject_TypeCheck(f->localsplus[0], (PyTypeObject *)libs.module_type))
            return SKIP_INIT_WITH_CALLEES;
    }
    return 0;
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
    return sj_join("\n    ", lines);
}

/* What the hook does with a frame besides returning a result or NULL with an exception: */
#define RUN_EAGER ((PyObject *)-1)          /* the interpreter runs the frame */
#define RUN_CONTINUATION ((PyObject *)-2)   /* hook_frame: call the prepared continuation */
#define RUN_ONLY ((PyObject *)-3)           /* hook_frame: run the frame, and what it calls, without compiling */

/* Run a graph entry: the result (new reference), NULL with an exception, or RUN_EAGER.
 * *wrote is set once the result plan has written into an outside list or dict. */
static PyObject *run_entry(CacheEntry *e, GuardCall *call, int *wrote)
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
        /* strong: a log sink runs Python code, which may run this graph again and
         * replace its mismatch text */
        PyObject *why = Py_NewRef(((SjGraphObject *)e->graph)->mismatch);
        if (sj_log_on(LOG_GRAPH_BREAKS, SJ_WARNING))
            sj_log(LOG_GRAPH_BREAKS, SJ_WARNING, "shapejit internal: %U; this entry runs eagerly from now on", why);
        e->action = ENTRY_EAGER;
        Py_XSETREF(e->reason, PyUnicode_FromFormat("internal: %U", why));
        Py_DECREF(why);
        if (!e->has_mutation) {
            Py_DECREF(outs);
            return RUN_EAGER;
        }
    }
    PyObject *fast = PySequence_Fast(outs, "shapejit: the compiled graph must return a tuple or list");
    Py_DECREF(outs);
    if (!fast)
        return NULL;
    PyObject *r = compile_build_result(e->plan, fast, memo, t, call->fv, wrote);
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

/* A continuation ready to run: the function and its arguments (both strong). The hook
 * fills it while it holds the cache, and calls it from sj_eval_frame once everything
 * else of the lookup is off the C stack. */
typedef struct {
    PyObject *fn;
    PyObject *args;   /* tuple: what the plan rebuilt, then one resume function per way out */
} Continuation;

/* ENTRY_BREAK: the continuation and its arguments, from the values the graph and plan
 * rebuilt (args, a tuple; stolen) and one resume function per way out, made with the
 * frame's globals and closure. 0, or -1 with an exception. */
static int prepare_continuation(CacheEntry *e, PyObject *args, _PyInterpreterFrame *f, Continuation *k)
{
    PyObject *closure = f->f_func->func_closure;
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    PyObject *all = PyTuple_New(n + e->nresume);
    if (!all) {
        Py_DECREF(args);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        PyTuple_SET_ITEM(all, i, Py_NewRef(PyTuple_GET_ITEM(args, i)));
    Py_DECREF(args);
    for (int i = 0; i < e->nresume; i++) {
        PyObject *code = PyWeakref_GetObject(e->resume[i]);   /* borrowed; checked by resumes_alive */
        PyObject *fn = PyFunction_New(code, f->f_globals);
        if (!fn || (closure && PyFunction_SetClosure(fn, closure) < 0)) {
            Py_XDECREF(fn);
            Py_DECREF(all);
            return -1;
        }
        PyTuple_SET_ITEM(all, n + i, fn);
    }
    k->fn = PyFunction_New(e->cont, f->f_globals);
    if (!k->fn) {
        Py_DECREF(all);
        return -1;
    }
    k->args = all;
    return 0;
}

/* Answer the frame from entry e (its guards passed, memo holds its sources): RUN_EAGER,
 * or what the graph and plan give; for a break entry *is_break is set and the result is
 * the continuation's arguments. */
static PyObject *answer(CacheEntry *e, GuardCall *call, int *is_break)
{
    if (e->action == ENTRY_EAGER || (e->action == ENTRY_BREAK && !resumes_alive(e)))
        return RUN_EAGER;
    /* what the plan builds is decided now: a run that finds a shape-rule mismatch turns
     * the entry eager for later calls, but when the graph wrote into an input this
     * call's result (a break's continuation arguments) is still used as planned */
    *is_break = e->action == ENTRY_BREAK;
    int wrote = 0;
    PyObject *r = run_entry(e, call, &wrote);
    /* a failure after the graph or the plan changed an input propagates: running the
     * frame again would apply its writes twice */
    return (!r && !e->has_mutation && !wrote) ? rerun_eagerly() : r;
}

/* After the memo is released: a break entry's result becomes the continuation to run. */
static PyObject *finish(CacheEntry *e, PyObject *r, _PyInterpreterFrame *f, int is_break, Continuation *k)
{
    if (r && r != RUN_EAGER && is_break) {
        if (prepare_continuation(e, r, f, k) < 0)
            return NULL;
        return RUN_CONTINUATION;
    }
    return r;
}

/* The hook's work on one frame of user code or of a compiled resume function: the
 * result, NULL with an exception, RUN_EAGER (the interpreter runs the frame), RUN_ONLY
 * (the interpreter runs it, and nothing it calls compiles) or
 * RUN_CONTINUATION (*k filled). Its locals (the guard call's memo, the compile options)
 * are large, so it returns before the frame or the continuation runs: a recursion through
 * compiled frames costs sj_eval_frame's small frame per level, not this one. */
static __attribute__((noinline)) PyObject *hook_frame(_PyInterpreterFrame *f, CodeState *st, Continuation *k)
{
    /* Everything below may run Python code (imports, properties read by guards, the
     * backend): none of those frames may be compiled, so the hook is off until we either
     * return a result or hand the frame to the interpreter. */
    int saved = tls_active;
    tls_active = 0;
    code_cache_busy_enter();   /* entries and trees stay put until busy_leave */
    PyObject *r = NULL;
    PyCodeObject *co = f->f_code;
    if (st->skip < 0)
        st->skip = st->role == ROLE_RESUME ? 0 : decide_skip(co, f);
    if (st->skip == SKIP_DISABLED_WITH_CALLEES || st->skip == SKIP_INIT_WITH_CALLEES)
        goto run_only;   /* torch.compiler.disable(recursive=True), an nn.Module's __init__ */
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
        int is_break = 0;
        r = answer(e, &call, &is_break);
        guard_call_end(&call);
        if (r == RUN_EAGER)
            goto eager;
        r = finish(e, r, f, is_break, k);
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
    } else if (st->warned_limit && (st->nentries >= sj_config.cache_size_limit ||
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
        PyErr_Format(sj_raise_class(SjRecompileError),
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
                per_code ? sj_config.cache_size_limit : sj_config.accumulated_cache_size_limit, co->co_name,
                co->co_filename, co->co_firstlineno, why ? why : none_yet);
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
        if (sj_trace_on)
            SJ_TRACE("recompile", "(OiiO)", (PyObject *)co, st->frame_id, st->ncompiles, why ? why : Py_None);
    }
    Py_XDECREF(why);
    if (sj_err_deferred())
        goto out;   /* interrupted while the miss was explained or logged: nothing compiles */
    /* fullgraph=True speaks for the function the user compiled; frames that its eager
     * fallback reaches are compiled on a best-effort basis */
    CompileOptions local;
    const CompileOptions *opts = NULL;
    if (tls_opts) {
        local = *tls_opts;
        local.fullgraph = tls_opts->fullgraph && is_top;
        opts = &local;
    }
    CacheEntry *e =
        opts ? compile_frame(co, f->localsplus, f->f_func->func_closure, f->f_globals, f->f_builtins, opts, st) : NULL;
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
    int is_break = 0;
    r = answer(e, &call, &is_break);
    guard_call_end(&call);
    if (r == RUN_EAGER)
        goto eager;
    r = finish(e, r, f, is_break, k);
out:
    code_cache_busy_leave();
    tls_active = saved;
    if (sj_err_deferred()) {   /* an interrupt met on the way wins over any result */
        if (r == RUN_CONTINUATION) {
            Py_CLEAR(k->fn);
            Py_CLEAR(k->args);
        } else if (r != RUN_EAGER && r != RUN_ONLY)
            Py_XDECREF(r);
        r = NULL;
        sj_err_raise_deferred();
    }
    return r;
eager:
    code_cache_busy_leave();
    tls_active = saved;
    if (sj_err_raise_deferred() < 0)
        return NULL;   /* interrupted: the frame does not start */
    return RUN_EAGER;
run_only:
    /* Past the cache limit the frame runs as eager code, and so does everything it
     * calls, for this call: callees use their cached entries but never compile (as
     * torch's RUN_ONLY), so no frame is captured on behalf of a frame that is not. */
    code_cache_busy_leave();
    tls_active = saved;
    if (sj_err_raise_deferred() < 0)
        return NULL;
    return RUN_ONLY;
}

/* ------------------------------------------------------------ recursion ---- */
/* A frame the hook answers never reaches the interpreter, which counts one level of
 * Python's recursion limit per frame; the continuation and resume frames that the
 * interpreter does run are shapejit's, not the user's. So the hook counts one level for
 * each frame of user code, whoever runs it, and none for its own frames: a recursion
 * raises RecursionError at the depth eager code would, and a depth eager code handles
 * gives its value. A frame the interpreter runs is counted by the interpreter; the hook
 * gives that count back around it (uncounted) or takes it in advance (counted, so the
 * error comes before any graph runs, as eager raises before the frame's first
 * instruction). Every frame the hook handles is also a C recursion (PEP 523 turns off the
 * interpreter's inlined calls), so the remaining C stack is checked too. */

#define COMPILE_STACK (64 * 1024)   /* C stack a compile needs, with a margin */
static _Thread_local char *tls_stack_low;   /* lowest usable address of this thread's stack */
static _Thread_local int tls_stack_known;   /* 0 not looked up yet, 1 known, -1 unknown */

/* How much C stack is left below here: 2 less than a hook frame needs to answer or
 * compile a frame (a capture inlines calls, a backend runs), 1 not even enough to go on
 * through the interpreter, 0 plenty or unknown. */
static int c_stack_left(void)
{
    char here;
    static _Thread_local size_t tls_stack_size;
    if (tls_stack_known == 0) {
        pthread_attr_t a;
        void *addr;
        size_t size;
        tls_stack_known = -1;
        if (pthread_getattr_np(pthread_self(), &a) == 0) {
            if (pthread_attr_getstack(&a, &addr, &size) == 0 && size > 0) {
                tls_stack_low = (char *)addr;
                tls_stack_size = size;
                tls_stack_known = 1;
            }
            pthread_attr_destroy(&a);
        }
    }
    if (tls_stack_known != 1 || &here < tls_stack_low)
        return 0;
    size_t left = (size_t)(&here - tls_stack_low);
    /* a quarter of the stack, at most 512 KiB, but never less than what one compile takes
     * by itself (capture, backend, compiler driver and disk cache: about 40 KiB, measured
     * on threads with small stacks), whatever the thread's stack size: a thread whose stack
     * is smaller runs its frames eagerly rather than overflow in a compile */
    size_t need_compile = tls_stack_size / 4 < 512 * 1024 ? tls_stack_size / 4 : 512 * 1024;
    if (need_compile < COMPILE_STACK)
        need_compile = COMPILE_STACK;
    size_t need_run = tls_stack_size / 16 < 128 * 1024 ? tls_stack_size / 16 : 128 * 1024;
    return left < need_run ? 1 : left < need_compile ? 2 : 0;
}

static PyObject *run_uncounted(PyThreadState *ts, _PyInterpreterFrame *f, int throwflag)
{
    ts->recursion_remaining++;
    PyObject *r = run_default(ts, f, throwflag);
    ts->recursion_remaining--;
    return r;
}

static PyObject *sj_eval_frame(PyThreadState *ts, _PyInterpreterFrame *f, int throwflag)
{
    if (tls_active <= 0 || throwflag || sj_stance == STANCE_FORCE_EAGER)
        return run_default(ts, f, throwflag);
    CodeState *st = code_state_get(f->f_code);
    if (!st) {
        sj_err_clear();
        return run_default(ts, f, throwflag);
    }
    if (st->role == ROLE_CONT || st->role == ROLE_RESUME_LOOP)
        return run_uncounted(ts, f, throwflag);
    int user = st->role == ROLE_USER;
    int low = c_stack_left();
    if (low == 1) {
        PyErr_SetString(PyExc_RecursionError,
                        "maximum recursion depth exceeded (the C stack is nearly exhausted under shapejit's frame "
                        "hook: lower sys.setrecursionlimit() or the recursion)");
        return NULL;
    }
    if (user && Py_EnterRecursiveCall(""))
        return NULL;
    Continuation k = {NULL, NULL};
    PyObject *r = low ? RUN_EAGER : hook_frame(f, st, &k);
    if (r == RUN_EAGER) {
        r = run_uncounted(ts, f, throwflag);
    } else if (r == RUN_ONLY) {
        tls_run_only++;
        r = run_uncounted(ts, f, throwflag);
        tls_run_only--;
    } else if (r == RUN_CONTINUATION) {
        /* the hook is on for what the continuation runs; the cache is not touched from
         * here on: user code runs, and may reset() */
        r = PyObject_Call(k.fn, k.args, NULL);
        Py_DECREF(k.fn);
        Py_DECREF(k.args);
    }
    if (user)
        Py_LeaveRecursiveCall();
    return r;
}

/* ------------------------------------------------------- CompiledFunction ---- */

typedef struct {
    PyObject_HEAD PyObject *fn;          /* strong */
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
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shapejit._C.CompiledFunction",
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
    SjRecompileError = PyErr_NewException("shapejit._C.RecompileError", PyExc_RuntimeError, NULL);
    if (!SjRecompileError || PyModule_AddObjectRef(m, "RecompileError", SjRecompileError) < 0)
        return -1;
    return code_cache_init();
}

PyObject *SjRecompileError;
extern PyObject *SjConstraintViolation;   /* capture/symbolic.c */

/* (shapejit class, class raised instead) pairs set by _set_exception_classes */
#define SJ_NRAISE 4
static PyObject *raise_from[SJ_NRAISE], *raise_as[SJ_NRAISE];   /* strong */

PyObject *sj_raise_class(PyObject *cls)
{
    for (int i = 0; i < SJ_NRAISE; i++)
        if (raise_from[i] == cls && raise_as[i])
            return raise_as[i];
    return cls;
}

/* _set_exception_classes({shapejit class: subclass} or None): the errors shapejit raises
 * of each class are raised as the subclass (the torch compat layer makes them instances of
 * torch's exception classes too); None or {} puts the plain classes back. */
PyObject *hook_py_set_exception_classes(PyObject *self, PyObject *map)
{
    (void)self;
    PyObject *own[SJ_NRAISE] = {SjUnsupported, SjBackendCompilerFailed, SjRecompileError, SjConstraintViolation};
    PyObject *as[SJ_NRAISE] = {NULL, NULL, NULL, NULL};
    if (map != Py_None && !PyDict_Check(map)) {
        PyErr_Format(PyExc_TypeError, "_set_exception_classes takes a dict or None, not %s", Py_TYPE(map)->tp_name);
        return NULL;
    }
    if (map != Py_None) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(map, &pos, &k, &v)) {
            int i = 0;
            while (i < SJ_NRAISE && own[i] != k)
                i++;
            if (i == SJ_NRAISE) {
                PyErr_Format(PyExc_ValueError, "_set_exception_classes: %R is not one of shapejit's error classes", k);
                return NULL;
            }
            int sub = PyType_Check(v) ? PyObject_IsSubclass(v, k) : 0;
            if (sub < 0)
                return NULL;
            if (!sub) {
                PyErr_Format(PyExc_TypeError, "_set_exception_classes: %R is not a subclass of %R", v, k);
                return NULL;
            }
            as[i] = v;
        }
    }
    for (int i = 0; i < SJ_NRAISE; i++) {
        Py_XSETREF(raise_as[i], Py_XNewRef(as[i]));
        Py_XSETREF(raise_from[i], Py_NewRef(own[i]));
    }
    Py_RETURN_NONE;
}
