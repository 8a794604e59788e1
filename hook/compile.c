/* Capture a frame into a cache entry. */
#include "compile.h"
#include "../capture/capture.h"
#include "../vocab/libs.h"
#include "../core/config.h"
#include "../core/log.h"
#include "../core/trace.h"
#include "events.h"
#include "../resume/resume.h"
#include "collective.h"
#include "result.h"
#include <time.h>
#include "../core/errors.h"
#include "../core/pyutil.h"

PyObject *SjUnsupported;
static long graph_counter;

/* ------------------------------------------------------------------ logs ---- */

static PyObject *format_stack(PyObject *stack)
{
    PyObject *lines = PyList_New(0);
    if (!lines || !stack)
        return lines;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(stack); i++) {
        PyObject *w = PyList_GET_ITEM(stack, i);
        PyObject *l = PyUnicode_FromFormat("  File \"%U\", line %S, in %U\n    %U", PyTuple_GET_ITEM(w, 0),
                                           PyTuple_GET_ITEM(w, 1), PyTuple_GET_ITEM(w, 2), PyTuple_GET_ITEM(w, 3));
        if (!l || PyList_Append(lines, l) < 0) {
            Py_XDECREF(l);
            Py_DECREF(lines);
            return NULL;
        }
        Py_DECREF(l);
    }
    return sj_join("\n", lines);   /* lines stolen */
}

static PyObject *reason_text(Capture *c)
{
    return PyUnicode_FromFormat("%s: %S", break_messages[c->reason], c->reason_msg ? c->reason_msg : Py_None);
}

static PyObject *seen_breaks;   /* strong set of (file, line, reason): logged in full once */

void compile_forget_breaks(void)
{
    Py_CLEAR(seen_breaks);
}

static void report_break(Capture *c, PyCodeObject *co, PyObject *reason)
{
    PyObject *stack = c->user_stack;
    PyObject *top = (stack && PyList_GET_SIZE(stack)) ? PyList_GET_ITEM(stack, PyList_GET_SIZE(stack) - 1) : NULL;
    int seen = 0;
    if (top && (seen_breaks || (seen_breaks = PySet_New(NULL)))) {
        PyObject *key = PyTuple_Pack(3, PyTuple_GET_ITEM(top, 0), PyTuple_GET_ITEM(top, 1), reason);
        seen = key ? PySet_Contains(seen_breaks, key) : -1;
        if (seen == 0 && PySet_Add(seen_breaks, key) < 0)
            seen = -1;
        Py_XDECREF(key);
        if (seen < 0) {
            sj_err_clear();
            seen = 0;
        }
    }
    if (seen && sj_log_on(LOG_GRAPH_BREAKS, SJ_INFO)) {
        sj_log(LOG_GRAPH_BREAKS, SJ_INFO,
               "Graph break (user stack suppressed due to duplicate graph break) in user code at %U:%S\n"
               "Graph Break Reason: %U",
               PyTuple_GET_ITEM(top, 0), PyTuple_GET_ITEM(top, 1), reason);
        sj_err_clear();
    } else if (sj_log_on(LOG_GRAPH_BREAKS, SJ_INFO)) {
        PyObject *tb = format_stack(stack);
        if (top)
            sj_log(LOG_GRAPH_BREAKS, SJ_INFO,
                   "Graph break in user code at %U:%S\nGraph Break Reason: %U\nUser code traceback:\n%S",
                   PyTuple_GET_ITEM(top, 0), PyTuple_GET_ITEM(top, 1), reason, tb ? tb : Py_None);
        else
            sj_log(LOG_GRAPH_BREAKS, SJ_INFO, "Graph break in %U (%U:%d)\nGraph Break Reason: %U", co->co_qualname,
                   co->co_filename, co->co_firstlineno, reason);
        Py_XDECREF(tb);
        sj_err_clear();
    }
    events_emit_break(reason, stack);
    if (sj_trace_on)
        SJ_TRACE("graph_break", "(OOO)", reason, stack ? stack : Py_None, (PyObject *)co);
}

/* ------------------------------------------------------------------ entry ---- */

static CacheEntry *entry_new(void)
{
    CacheEntry *e = PyMem_Calloc(1, sizeof(CacheEntry));
    if (!e)
        PyErr_NoMemory();
    else
        e->ge.sig = -1;
    return e;
}

static int add_final_guards(Capture *c)
{
    if (c->used_torch) {
        Guard g;
        memset(&g, 0, sizeof g);
        g.kind = GK_GLOBAL_STATE;
        g.src = g.src2 = -1;
        if (guards_read_global_state(&g.gs) < 0)
            return -1;
        if (guards_add(&c->guards, &g) < 0)
            return -1;
    }
    if (c->ndistinct > 1) {
        Guard g;
        memset(&g, 0, sizeof g);
        g.kind = GK_DISTINCT;
        g.src = g.src2 = -1;
        g.srcs = c->distinct_srcs;
        g.nsrcs = c->ndistinct;
        if (guards_add(&c->guards, &g) < 0)
            return -1;
    }
    return 0;
}

PyObject *SjBackendCompilerFailed;

/* The backend raised, or returned a non-callable (an exception is set either way). An
 * interrupt, SystemExit or any other non-Exception propagates as it is. A failure of
 * shapejit's own backends is internal: it becomes c's reason and the frame runs eagerly.
 * A user backend's error raises BackendCompilerFailed naming the backend, with the error
 * as __cause__; with config.suppress_errors it is a warning and the frame runs eagerly.
 * 0 (c holds the reason, no exception), or -1 with the exception to raise. */
static int backend_failed(Capture *c, const CompileOptions *opts)
{
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        return -1;
    if (opts->internal) {
        cap_fail_exc(c, BR_INTERNAL);
        return 0;
    }
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyErr_NormalizeException(&et, &ev, &tb);
    if (tb && ev)
        PyException_SetTraceback(ev, tb);
    PyObject *msg = PyUnicode_FromFormat("backend=%R raised:\n%s: %S", opts->name, Py_TYPE(ev)->tp_name, ev);
    if (!msg)
        goto fail;
    if (sj_config.suppress_errors) {
        PyObject *w = PyUnicode_FromFormat("shapejit: %U\nThe frame runs eagerly (config.suppress_errors=True).", msg);
        int r = w ? PyErr_WarnEx(PyExc_UserWarning, PyUnicode_AsUTF8(w), 1) : -1;
        Py_XDECREF(w);
        if (r < 0)   /* warnings turned into errors: the user asked to see it */
            goto fail;
        cap_fail(c, BR_BACKEND_FAILED, "%U", msg);
        Py_DECREF(msg);
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
        return 0;
    }
    PyObject *exc = PyObject_CallOneArg(sj_raise_class(SjBackendCompilerFailed), msg);
    Py_DECREF(msg);
    if (!exc)
        goto fail;
    PyException_SetCause(exc, Py_NewRef(ev));     /* steals the new reference */
    PyException_SetContext(exc, Py_NewRef(ev));   /* steals the new reference */
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
    Py_XDECREF(et);
    Py_XDECREF(ev);
    Py_XDECREF(tb);
    return -1;
fail:
    /* the message or the exception could not be made, or the warning was turned into an
     * error: that error is raised */
    Py_XDECREF(et);
    Py_XDECREF(ev);
    Py_XDECREF(tb);
    return -1;
}

/* Every entry, eager ones included, serves only calls made with the options it was
 * compiled with: the same function compiled with another backend, fullgraph or dynamic
 * gets an entry of its own. */
static int add_options_guard(Capture *c, const CompileOptions *opts)
{
    Guard g;
    memset(&g, 0, sizeof g);
    g.kind = GK_BACKEND_MATCH;
    g.src = g.src2 = -1;
    g.expected = opts->key;   /* guards_add takes its own reference */
    return guards_add(&c->guards, &g);
}

static void capture_release(Capture *c)
{
    symb_release(c);
    graph_free(c->g);
    c->g = NULL;
    sources_clear(&c->src);
    guards_clear(&c->guards);
    Py_CLEAR(c->keepalive);
    Py_CLEAR(c->wrapped);
    Py_CLEAR(c->linecache);
    Py_CLEAR(c->reason_msg);
    Py_CLEAR(c->user_stack);
    Py_CLEAR(c->exc);
    PyMem_Free(c->by_obj);
    c->by_obj = NULL;
    cap_arena_free(c);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static CacheEntry *eager_entry(Capture *c, PyCodeObject *co, const CompileOptions *opts, int count_break)
{
    if (sj_err_deferred())
        return NULL;   /* interrupted: no reason of the frame's, nothing reported or kept */
    PyObject *reason = reason_text(c);
    if (!reason)
        return NULL;
    if (opts->fullgraph && c->reason != BR_USER_EXCEPTION) {
        PyObject *stack = format_stack(c->user_stack);
        PyErr_Format(sj_raise_class(SjUnsupported), "shapejit (fullgraph=True) cannot capture %U: %U\n%S",
                     co->co_qualname, reason, stack ? stack : Py_None);
        Py_XDECREF(stack);
        Py_DECREF(reason);
        return NULL;
    }
    if (sj_config.raise_internal_errors && c->reason == BR_INTERNAL) {
        PyErr_Format(PyExc_RuntimeError, "shapejit internal error in %U: %U", co->co_qualname, reason);
        Py_DECREF(reason);
        return NULL;
    }
    if (count_break) {
        sj_stats.graph_breaks++;
        report_break(c, co, reason);
    }
    sj_stats.eager_frames++;
    CacheEntry *e = entry_new();
    if (!e) {
        Py_DECREF(reason);
        return NULL;
    }
    e->action = ENTRY_EAGER;
    e->reason = reason;
    return e;
}

/* A capture starts from the sources of the code's guard tree, so ids stay shared. */
static int capture_init(Capture *c, CodeState *st, int dynamic)
{
    memset(c, 0, sizeof *c);
    c->dynamic = dynamic;
    if (!st->fstate && !(st->fstate = PyDict_New()))
        return -1;
    c->fstate = st->fstate;
    c->g = graph_new();
    c->keepalive = PyList_New(0);
    c->wrapped = PyDict_New();
    c->linecache = PyDict_New();
    GlobalState gs;
    if (!c->g || !c->keepalive || !c->wrapped || !c->linecache || libs_refresh() < 0 ||
        guards_read_global_state(&gs) < 0 || meta_refresh_torch_default() < 0 ||
        guard_tree_copy_sources(&st->tree, &c->src) < 0)
        return -1;
    c->grad_mode = gs.grad_enabled;
    return 0;
}

/* Under torch.autocast the library casts inside each op, which the graph's ops do not
 * model: a capture that recorded torch work then fails, and the frame runs in the
 * interpreter (GLOBAL_STATE keeps an entry made without autocast from serving a call under
 * it). 0, or -1 with the failure set. */
static int check_autocast(Capture *c)
{
    if (!c->used_torch)
        return 0;
    GlobalState gs;
    if (guards_read_global_state(&gs) < 0)
        return cap_fail_exc(c, BR_INTERNAL);
    if (gs.autocast > 0)
        return cap_fail(c, BR_UNSUPPORTED_VALUE, "torch.autocast is enabled: ops under autocast are not modelled");
    return 0;
}

static void log_code(const char *what, PyObject *code)
{
    PyObject *dis = PyImport_ImportModule("dis");
    PyObject *bc = dis ? PyObject_CallMethod(dis, "Bytecode", "O", code) : NULL;
    PyObject *text = bc ? PyObject_CallMethod(bc, "dis", NULL) : NULL;
    if (text)
        sj_log(LOG_BYTECODE, SJ_INFO, "%s %U %U line %d\n%U", what, ((PyCodeObject *)code)->co_qualname,
               ((PyCodeObject *)code)->co_filename, ((PyCodeObject *)code)->co_firstlineno, text);
    Py_XDECREF(dis);
    Py_XDECREF(bc);
    Py_XDECREF(text);
    sj_err_clear();
}

/* The first capture failed at an instruction of the frame itself that can be a graph
 * break: capture again, stop before that instruction and build the continuation. 0 with
 * *bk filled (the capture in c is the second one), or -1 with c holding the first
 * failure again (the frame then runs eagerly). */
static int split_frame(Capture *c, PyCodeObject *co, PyObject *const *locals, PyObject *closure, PyObject *globals,
                       PyObject *builtins, CodeState *st, BreakCode *bk)
{
    long step = c->fail_step;
    BreakReason reason = c->reason;
    PyObject *msg = Py_XNewRef(c->reason_msg), *stack = Py_XNewRef(c->user_stack);
    int dynamic = c->dynamic;
    capture_release(c);
    if (capture_init(c, st, dynamic) < 0)
        goto undo;
    int grad0 = c->grad_mode;
    c->stop_step = step;
    (void)eval_top(c, co, globals, builtins, locals, closure);
    if (!c->stopped || cap_failed(c) || attr_check_writes(c) < 0 || check_autocast(c) < 0)
        goto undo;
    if (c->grad_mode != grad0 || c->infer_depth)
        goto undo;   /* the continuation would run with the wrong grad or inference mode */
    if (resume_build(c, co, st, bk) < 0) {
        sj_err_clear();
        goto undo;
    }
    /* the break is reported with the first capture's reason and user stack */
    cap_clear_failure(c);
    c->reason = reason;
    c->reason_msg = msg;
    c->user_stack = stack;
    return 0;
undo:
    sj_err_clear();
    cap_clear_failure(c);
    c->reason = reason;
    c->reason_msg = msg;
    c->user_stack = stack;
    return -1;
}

static int can_split(Capture *c, PyCodeObject *co, const CompileOptions *opts)
{
    if (opts->fullgraph || c->fail_step <= 0 || c->fail_pc < 0)
        return 0;
    if (c->reason == BR_USER_EXCEPTION || c->reason == BR_INTERNAL || c->reason == BR_GENERATOR)
        return 0;
    return resume_breakable(co, c->fail_pc);
}

/* The guards log and explain()'s Out Guards for a new entry. */
static void log_guards(PyCodeObject *co, CodeState *st, CacheEntry *e)
{
    if (sj_log_on(LOG_GUARDS, SJ_INFO)) {
        PyObject *tree = guard_entry_format(&st->tree, &e->ge);
        if (tree)
            sj_log(LOG_GUARDS, SJ_INFO, "GUARDS for %U (%U:%d), entry %d/%d:\n%U", co->co_qualname, co->co_filename,
                   co->co_firstlineno, st->frame_id, e->compile_id, tree);
        Py_XDECREF(tree);
    }
    if (sj_trace_on) {
        PyObject *tree = guard_entry_format(&st->tree, &e->ge), *lines = guard_entry_lines(&st->tree, &e->ge);
        if (tree && lines)
            SJ_TRACE("guards", "(OO)", lines, tree);
        Py_XDECREF(tree);
        Py_XDECREF(lines);
        sj_err_clear();
    }
    if (events_active()) {
        PyObject *lines = guard_entry_lines(&st->tree, &e->ge);
        if (lines)
            events_emit_guards(lines);
        Py_XDECREF(lines);
    }
    sj_err_clear();
}

/* compilation_metrics of one compile: what became of it (graph, break, eager, error with
 * the pending exception), the counts only C knows, and the times. */
static void trace_compile_end(PyCodeObject *co, CodeState *st, CacheEntry *e, int32_t nshape_guards, double backend_s,
                              double total_s)
{
    const char *status = !e                         ? "error"
                         : e->action == ENTRY_GRAPH ? "graph"
                         : e->action == ENTRY_BREAK ? "break"
                                                    : "eager";
    PyObject *et = NULL, *ev = NULL, *tb = NULL;   /* strong: a fullgraph error, put back below */
    if (!e && PyErr_Occurred()) {
        PyErr_Fetch(&et, &ev, &tb);
        PyErr_NormalizeException(&et, &ev, &tb);
    }
    SJ_TRACE("compile_end", "(OiisOOiiiddO)", (PyObject *)co, st->frame_id, e ? e->compile_id : st->ncompiles, status,
             e && e->reason ? e->reason : Py_None, e && e->graph ? e->graph : Py_None, (int)nshape_guards,
             (int)st->nentries, (int)sj_stats.cache_entries, backend_s, total_s, ev ? ev : Py_None);
    if (et)
        PyErr_Restore(et, ev, tb);   /* steals all three */
}

/* One capture of the frame, split at a graph break when it fails at one: the result var,
 * or NULL with the failure in c. */
static Var *capture_frame(Capture *c, PyCodeObject *co, PyObject *const *locals, PyObject *closure, PyObject *globals,
                          PyObject *builtins, const CompileOptions *opts, CodeState *st, BreakCode *bk, int *is_break)
{
    Var *r = eval_top(c, co, globals, builtins, locals, closure);
    if (r && (attr_check_writes(c) < 0 || check_autocast(c) < 0))
        r = NULL;
    if (!r && can_split(c, co, opts) && split_frame(c, co, locals, closure, globals, builtins, st, bk) == 0) {
        r = bk->args;
        *is_break = 1;
    }
    return r;
}

/* Entry e of a frame that breaks its graph: the continuation and the resume functions
 * (taken from bk), the break reported. 0, or -1 with e freed (out of memory). */
static int break_entry(CacheEntry *e, Capture *c, PyCodeObject *co, BreakCode *bk)
{
    e->cont = bk->cont;
    bk->cont = NULL;
    e->nresume = bk->nresume;
    for (int i = 0; i < e->nresume; i++)
        if (!(e->resume[i] = PyWeakref_NewRef(bk->resume[i], NULL))) {
            cache_entry_free(e);   /* out of memory; it takes NULL slots */
            return -1;
        }
    PyObject *reason = reason_text(c);
    if (reason) {
        sj_stats.graph_breaks++;
        report_break(c, co, reason);
        Py_DECREF(reason);
    }
    for (int i = 0; i < e->nresume; i++)
        if (bk->loop[i] && sj_log_on(LOG_GRAPH_BREAKS, SJ_INFO))
            sj_log(LOG_GRAPH_BREAKS, SJ_INFO,
                   "%U runs in the interpreter: the graph break in %U (%U:%d) lies inside a loop, and "
                   "a compiled resume would break there again on every iteration",
                   ((PyCodeObject *)bk->resume[i])->co_name, co->co_qualname, co->co_filename,
                   PyCode_Addr2Line(co, c->stop_pc * 2));
    sj_err_clear();
    if (sj_log_on(LOG_BYTECODE, SJ_INFO)) {
        log_code("MODIFIED BYTECODE (continuation of)", e->cont);
        for (int i = 0; i < e->nresume; i++)
            log_code("RESUME FUNCTION BYTECODE", bk->resume[i]);
    }
    return 0;
}

/* The frame's guards would read more than GUARD_MAX_SOURCES values (a list of 30,000
 * values crossing a break is guarded item by item): past the limit the code is not
 * compiled again (until a reset), and this call runs in the interpreter; under fullgraph
 * that is an error, left set. */
static void too_many_sources(Capture *c, PyCodeObject *co, const CompileOptions *opts, CodeState *st)
{
    PyObject *reason = PyUnicode_FromFormat("%s: the frame's guards would read %d values (at most %d); "
                                            "it runs in the interpreter",
                                            break_messages[BR_UNSUPPORTED_VALUE], (int)c->src.n, GUARD_MAX_SOURCES);
    if (reason && opts->fullgraph) {
        PyErr_Format(sj_raise_class(SjUnsupported), "shapejit (fullgraph=True) cannot capture %U: %U", co->co_qualname,
                     reason);
    } else if (reason) {
        st->skip = 1;
        sj_stats.graph_breaks++;
        sj_stats.eager_frames++;
        report_break(c, co, reason);
    }
    Py_XDECREF(reason);
    if (!opts->fullgraph)
        sj_err_clear();
}

/* The entry of a frame with nothing to compile (only Python work). Like torch ("skipping
 * because no content in function call"), the code is not looked at again until reset(),
 * whatever later calls pass. NULL when out of memory. */
static CacheEntry *no_ops_entry(CodeState *st)
{
    CacheEntry *e = entry_new();
    if (e) {
        e->action = ENTRY_EAGER;
        e->reason = PyUnicode_FromString("no tensor ops in the frame");
    }
    if (st->skip != 2 && st->skip != SKIP_DISABLED_WITH_CALLEES)
        st->skip = 1;
    return e;
}

/* A captured graph on its way to the backend: the graph_code log, explain's events, the
 * trace. */
static void show_graph(PyObject *gobj, PyCodeObject *co)
{
    if (sj_log_on(LOG_GRAPH_CODE, SJ_INFO)) {
        PyObject *code = PyObject_GetAttrString(gobj, "code");
        if (code)
            sj_log(LOG_GRAPH_CODE, SJ_INFO, "TRACED GRAPH %U (%U %U:%d)\n%U", ((SjGraphObject *)gobj)->name,
                   co->co_qualname, co->co_filename, co->co_firstlineno, code);
        Py_XDECREF(code);
        sj_err_clear();
    }
    events_emit_graph(gobj);
    if (sj_trace_on)
        SJ_TRACE("graph", "(O)", gobj);
}

CacheEntry *compile_frame(PyCodeObject *co, PyObject *const *locals, PyObject *closure, PyObject *globals,
                          PyObject *builtins, const CompileOptions *opts, CodeState *st)
{
    double t0 = now_s();
    Capture c;
    CacheEntry *e = NULL;
    PyObject *plan = NULL, *example = NULL, *gobj = NULL, *compiled = NULL;
    BreakCode bk;
    memset(&bk, 0, sizeof bk);
    int is_break = 0;
    int32_t *inputs = NULL;
    int32_t ninputs = 0;
    int has_mutation = 0;
    double backend_s = 0;
    int32_t nshape_guards = 0;
    PyObject *before = NULL;   /* the frame state before the capture, when the collective may run */
    if (st->frame_id < 0)
        st->frame_id = (int)events_next_frame_id();
    if (sj_trace_on)
        SJ_TRACE("compile_start", "(Oii)", (PyObject *)co, st->frame_id, st->ncompiles);
    symb_pgo_load(st, co, closure);
    collective_exchange(st, co, locals);   /* after PGO: every rank joins what it loaded */
    before = collective_snapshot(st);
    if (capture_init(&c, st, opts->dynamic) < 0)
        goto internal;
    sj_stats.frames++;
    if (sj_log_on(LOG_BYTECODE, SJ_INFO))
        log_code("ORIGINAL BYTECODE", (PyObject *)co);
    Var *r = capture_frame(&c, co, locals, closure, globals, builtins, opts, st, &bk, &is_break);
    if (before && collective_retrace(st, co, before)) {
        /* the ranks disagree on a size the capture read beyond the arguments: capture once
         * more with the joined frame state. Nothing of the first capture is kept: its
         * graph, guards, sources and break are released here, and nothing was reported,
         * counted or cached yet (that all happens below). */
        capture_release(&c);
        resume_code_clear(&bk);
        is_break = 0;
        if (capture_init(&c, st, opts->dynamic) < 0)
            goto internal;
        r = capture_frame(&c, co, locals, closure, globals, builtins, opts, st, &bk, &is_break);
    }
    if (r) {
        plan = result_plan(&c, r);
        if (!plan && !cap_failed(&c))
            goto internal;
        has_mutation = c.mutated != NULL;   /* the plan writes back into outside lists, dicts */
    }
    if (!r || !plan) {
        if (PyErr_Occurred() && !cap_failed(&c))
            cap_fail_exc(&c, BR_INTERNAL);
        sj_err_clear();
        e = eager_entry(&c, co, opts, 1);
        goto done;
    }
    if (c.nops == 0 && !is_break) {
        e = no_ops_entry(st);   /* nothing to compile: the frame only does Python work */
        goto done;
    }
    if (add_final_guards(&c) < 0)
        goto internal;
    PyObject *violation = NULL;
    if (symb_finish(&c, &violation) < 0)
        goto internal;
    if (violation) {
        PyErr_SetObject(sj_raise_class(SjConstraintViolation), violation);
        Py_DECREF(violation);
        goto done_err;
    }
    if (c.nops > 0 || c.g->noutputs > 0) {
        /* hand the graph to the backend */
        PyObject *name = PyUnicode_FromFormat("__compiled_fn_%ld", ++graph_counter);
        if (!name)
            goto internal;
        Graph *g = c.g;
        c.g = NULL;
        ninputs = g->ninputs;
        has_mutation |= g->has_mutation;
        gobj = graph_py_wrap(g, name);
        Py_DECREF(name);
        if (!gobj)
            goto internal;
        example = PyList_New(0);
        if (!example)
            goto internal;
        /* example inputs: the live objects behind each graph input, in order */
        inputs = PyMem_Calloc((size_t)ninputs + 1, sizeof(int32_t));
        if (!inputs)
            goto internal;
        /* graph input i was made by wrap_tensor for the var at by_obj order */
        int32_t k = 0;
        for (int32_t i = 0; i < c.nby_obj && k < ninputs; i++) {
            Var *v = c.by_obj[i];
            inputs[k++] = v->src;
            if (PyList_Append(example, v->obj) < 0)
                goto internal;
        }
        ((SjGraphObject *)gobj)->verify_next = sj_config.verify_graphs;
        show_graph(gobj, co);
        double tb0 = now_s();
        compiled = PyObject_CallFunctionObjArgs(opts->backend, gobj, example, NULL);
        backend_s = now_s() - tb0;
        if (compiled && !PyCallable_Check(compiled)) {
            PyErr_Format(PyExc_TypeError,
                         "the backend returned an object of type %s, which is not callable (a backend "
                         "returns a callable that runs the graph)",
                         Py_TYPE(compiled)->tp_name);
            Py_CLEAR(compiled);
        }
        if (!compiled) {
            if (backend_failed(&c, opts) < 0)
                goto done_err;
            if (opts->fullgraph && opts->internal)
                goto internal_raise;
            e = eager_entry(&c, co, opts, 1);
            goto done;
        }
        sj_stats.graphs++;
        sj_stats.unique_graphs++;
    }
    e = entry_new();
    if (!e)
        goto done_err;
    e->action = is_break ? ENTRY_BREAK : ENTRY_GRAPH;
    e->inputs = inputs;
    inputs = NULL;
    e->ninputs = ninputs;
    e->compiled = compiled;
    compiled = NULL;
    e->graph = gobj;
    gobj = NULL;
    e->plan = plan;
    plan = NULL;
    e->has_mutation = has_mutation;
    if (is_break && break_entry(e, &c, co, &bk) < 0)
        goto done_err;
    goto done;

internal:
    if (PyErr_Occurred())
        cap_fail_exc(&c, BR_INTERNAL);
    else if (!cap_failed(&c))
        cap_fail(&c, BR_INTERNAL, "capture failed");
internal_raise:
    e = eager_entry(&c, co, opts, 1);
    goto done;
done_err:
    e = NULL;
done:
    resume_code_clear(&bk);
    Py_XDECREF(before);
    PyMem_Free(inputs);
    Py_XDECREF(plan);
    Py_XDECREF(example);
    Py_XDECREF(gobj);
    Py_XDECREF(compiled);
    if (e && sj_err_deferred()) {
        /* interrupted while compiling: nothing of this capture is kept (its reason would
         * be the interrupt, not the frame); the hook raises the interrupt */
        cache_entry_free(e);
        e = NULL;
    }
    if (e && add_options_guard(&c, opts) < 0) {
        cache_entry_free(e);
        e = NULL;
        sj_err_clear();   /* out of memory: the frame runs eagerly this time */
    }
    if (e && c.src.n > GUARD_MAX_SOURCES) {
        cache_entry_free(e);
        e = NULL;
        too_many_sources(&c, co, opts, st);
    }
    if (e) {
        int r = code_cache_insert(st, e, &c.src, &c.guards);
        if (r != 0) {
            cache_entry_free(e);   /* another thread's compile of this code won; or no memory */
            e = NULL;
        } else {
            e->compile_id = st->ncompiles++;
            sj_stats.cache_entries++;
            log_guards(co, st, e);
        }
    }
    nshape_guards = c.shape.nrels;
    capture_release(&c);
    symb_pgo_save(st, co, closure);
    double dt_s = now_s() - t0;
    sj_stats.compile_time_s += dt_s;
    events_emit_compile_time(dt_s);
    if (sj_trace_on)
        trace_compile_end(co, st, e, nshape_guards, backend_s, dt_s);
    return e;
}
