/* Continuations and resume functions (see resume.h). All bytecode goes through
 * bcwriter.c. References: every PyObject local below is owned unless noted borrowed;
 * BreakCode owns its codes. */
#include "resume.h"
#include "../bytecode/bcwriter.h"
#include "sj_opcodes.h"
#include "../core/errors.h"

/* ------------------------------------------------------- the instruction ---- */

typedef struct {
    int pops;           /* operands the instruction takes from the stack */
    int nexits;         /* 1, or 2 for conditional jumps */
    int results[2];     /* values it leaves on the stack, per way out */
} BreakShape;

static int shape_of(int op, int arg, BreakShape *s)
{
    s->nexits = 1;
    s->results[0] = s->results[1] = 1;
    switch (op) {
    case SJOP_CALL:
        s->pops = arg + 2;
        return 0;
    case SJOP_CALL_FUNCTION_EX:
        s->pops = 3 + (arg & 1);
        return 0;
    case SJOP_POP_JUMP_FORWARD_IF_TRUE:
    case SJOP_POP_JUMP_FORWARD_IF_FALSE:
    case SJOP_POP_JUMP_BACKWARD_IF_TRUE:
    case SJOP_POP_JUMP_BACKWARD_IF_FALSE:
        s->pops = 1;
        s->nexits = 2;
        s->results[0] = s->results[1] = 0;
        return 0;
    case SJOP_JUMP_IF_TRUE_OR_POP:
    case SJOP_JUMP_IF_FALSE_OR_POP:
        s->pops = 1;
        s->nexits = 2;
        s->results[0] = 0;
        s->results[1] = 1;
        return 0;
    case SJOP_BINARY_OP:
    case SJOP_BINARY_SUBSCR:
    case SJOP_COMPARE_OP:
    case SJOP_CONTAINS_OP:
    case SJOP_IS_OP:
        s->pops = 2;
        return 0;
    case SJOP_LOAD_ATTR:
    case SJOP_UNARY_NEGATIVE:
    case SJOP_UNARY_POSITIVE:
    case SJOP_UNARY_INVERT:
    case SJOP_UNARY_NOT:
        s->pops = 1;
        return 0;
    case SJOP_FORMAT_VALUE:
        s->pops = (arg & 4) ? 2 : 1;
        return 0;
    case SJOP_BUILD_STRING:
        s->pops = arg;
        return 0;
    case SJOP_STORE_ATTR:
        s->pops = 2;
        s->results[0] = 0;
        return 0;
    case SJOP_STORE_SUBSCR:
        s->pops = 3;
        s->results[0] = 0;
        return 0;
    case SJOP_DELETE_SUBSCR:
        s->pops = 2;
        s->results[0] = 0;
        return 0;
    }
    return -1;
}

static int op_at(PyCodeObject *co, int32_t pc, int *arg)
{
    PyObject *code = PyCode_GetCode(co);
    if (!code)
        return -1;
    const uint16_t *u = (const uint16_t *)PyBytes_AS_STRING(code);
    int32_t n = (int32_t)(PyBytes_GET_SIZE(code) / 2);
    int op = -1;
    if (pc >= 0 && pc < n) {
        op = u[pc] & 0xff;
        int a = u[pc] >> 8;
        while (op == SJ_EXTENDED_ARG && pc + 1 < n) {
            pc++;
            op = u[pc] & 0xff;
            a = (a << 8) | (u[pc] >> 8);
        }
        *arg = a;
    }
    Py_DECREF(code);
    return op;
}

int resume_breakable(PyCodeObject *co, int32_t pc)
{
    int arg = 0;
    int op = op_at(co, pc, &arg);
    if (op < 0) {
        sj_err_clear();
        return 0;
    }
    BreakShape s;
    if (co->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR))
        return 0;
    return shape_of(op, arg, &s) == 0 && !eval_pc_in_try(co, pc);
}

static int forward_jump(int op)
{
    switch (op) {
    case SJOP_POP_JUMP_BACKWARD_IF_TRUE:
        return SJOP_POP_JUMP_FORWARD_IF_TRUE;
    case SJOP_POP_JUMP_BACKWARD_IF_FALSE:
        return SJOP_POP_JUMP_FORWARD_IF_FALSE;
    }
    return op;
}

/* ------------------------------------------------------------- the state ---- */

enum { SK_NULL = 'N', SK_VALUE = 'V', SK_ITER = 'I' };

typedef struct {
    PyCodeObject *orig;     /* borrowed */
    int32_t n0;             /* the user's co_nlocals */
    int32_t ncells;         /* the user's non-argument cells */
    Var **locals;           /* n0 values in the user's layout, NULL = unbound */
    Var **cells;            /* ncells contents, NULL = unbound */
} LiveState;

/* A local the capture never read: handed over by source, with no guard. */
static Var *pending_var(Capture *c, PyCodeObject *co, int32_t slot, PyObject *obj)
{
    Var *v = var_new(c, VK_OBJECT);
    if (!v)
        return NULL;
    v->obj = obj;
    v->src = sources_add(&c->src, SRC_LOCAL, -1, slot, PyTuple_GET_ITEM(co->co_localsplusnames, slot), NULL);
    if (v->src < 0) {
        cap_fail_exc(c, BR_INTERNAL);
        return NULL;
    }
    return v;
}

static Var *slot_value(Capture *c, PyCodeObject *co, int32_t slot, int *ok)
{
    *ok = 1;
    Var *v = c->stop_locals[slot];
    if (!v && c->stop_pending && c->stop_pending[slot]) {
        v = pending_var(c, co, slot, c->stop_pending[slot]);
        *ok = v != NULL;
        return v;
    }
    if (v && v->kind == VK_CELL) {
        if (v->u.cell.real) {
            cap_fail(c, BR_UNSUPPORTED_VALUE, "a closure cell from outside at a graph break");
            *ok = 0;
            return NULL;
        }
        v = v->u.cell.contents;
    }
    return v;
}

/* -------------------------------------------------------------- resume ---- */

static PyObject *names_tuple(PyObject *base, PyObject *extra)
{
    PyObject *l = PySequence_List(base);
    if (!l)
        return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(extra); i++)
        if (PyList_Append(l, PyList_GET_ITEM(extra, i)) < 0) {
            Py_DECREF(l);
            return NULL;
        }
    PyObject *t = PyList_AsTuple(l);
    Py_DECREF(l);
    return t;
}

/* The resume function's code for target unit tu of orig (decoded as body, omap) with this
 * stack layout (a string of SK_*) and these locals/cells unbound (masks of '0'/'1'); loop:
 * it runs in the interpreter (ROLE_RESUME_LOOP). New reference. */
static PyObject *make_resume(PyCodeObject *orig, CodeState *ost, const BcAsm *body, const int32_t *omap, int32_t tu,
                             const char *stack, const char *lmask, const char *cmask, int loop)
{
    PyObject *key = Py_BuildValue("(isssi)", (int)tu, stack, lmask, cmask, loop);
    if (!key)
        return NULL;
    if (ost->resumes) {
        PyObject *hit = PyDict_GetItemWithError(ost->resumes, key);
        if (hit || PyErr_Occurred()) {
            Py_DECREF(key);
            return Py_XNewRef(hit);
        }
    }
    BcAsm r;
    PyObject *result = NULL, *extra = NULL, *varnames = NULL, *name = NULL;
    if (bc_init(&r) < 0) {
        Py_DECREF(key);
        return NULL;
    }
    int32_t tidx = omap[tu];
    if (tidx >= body->n) {
        PyErr_SetString(PyExc_SystemError, "shapejit: resume target past the end of the code");
        goto done;
    }
    int32_t n0 = orig->co_nlocals;
    extra = PyList_New(0);
    if (!extra)
        goto done;
    for (int i = 0; stack[i]; i++) {
        if (stack[i] == SK_NULL)
            continue;
        PyObject *nm = PyUnicode_FromFormat("___stack%d", i);
        if (!nm || PyList_Append(extra, nm) < 0) {
            Py_XDECREF(nm);
            goto done;
        }
        Py_DECREF(nm);
    }
    int nstackargs = (int)PyList_GET_SIZE(extra);
    for (int j = 0; cmask[j]; j++) {
        if (cmask[j] != '1')
            continue;
        PyObject *nm = PyUnicode_FromFormat("___cell_%U", PyTuple_GET_ITEM(orig->co_localsplusnames, n0 + j));
        if (!nm || PyList_Append(extra, nm) < 0) {
            Py_XDECREF(nm);
            goto done;
        }
        Py_DECREF(nm);
    }
    int32_t nextra = (int32_t)PyList_GET_SIZE(extra);
    BcPos tpos = body->ins[tidx].pos;
    /* prologue: unbound locals, cells and free variables, then the stack */
    for (int i = 0; lmask[i]; i++)
        if (lmask[i] == '0' && bc_emit(&r, SJOP_DELETE_FAST, i, tpos) < 0)
            goto done;
    for (int32_t i = 0; i < body->n && body->ins[i].op != SJOP_RESUME; i++) {
        BcIns *in = &body->ins[i];
        if (in->op != SJOP_MAKE_CELL && in->op != SJOP_COPY_FREE_VARS)
            continue;
        int32_t arg = in->op == SJOP_MAKE_CELL && in->arg >= n0 ? in->arg + nextra : in->arg;
        if (bc_emit(&r, in->op, arg, tpos) < 0)
            goto done;
    }
    if (bc_emit(&r, SJOP_RESUME, 0, tpos) < 0)
        goto done;
    for (int j = 0, k = nstackargs; cmask[j]; j++) {
        if (cmask[j] != '1')
            continue;
        if (bc_emit(&r, SJOP_LOAD_FAST, n0 + k++, tpos) < 0 || bc_emit(&r, SJOP_STORE_DEREF, n0 + nextra + j, tpos) < 0)
            goto done;
    }
    for (int i = 0, k = 0; stack[i]; i++) {
        if (stack[i] == SK_NULL) {
            if (bc_emit(&r, SJOP_PUSH_NULL, 0, tpos) < 0)
                goto done;
            continue;
        }
        if (bc_emit(&r, SJOP_LOAD_FAST, n0 + k++, tpos) < 0)
            goto done;
        if (stack[i] == SK_ITER && bc_emit(&r, SJOP_GET_ITER, 0, tpos) < 0)
            goto done;
    }
    int32_t P = r.n + 1;   /* the body starts after the jump */
    if (bc_emit_jump(&r, SJOP_JUMP_FORWARD, P + tidx, tpos) < 0)
        goto done;
    /* the user's code, unchanged but for cell indices moved by the added arguments */
    for (int32_t i = 0; i < body->n; i++) {
        BcIns *in = &body->ins[i];
        int32_t arg = (sj_op_hasfree[in->op] && in->arg >= n0) ? in->arg + nextra : in->arg;
        int32_t k =
            in->target >= 0 ? bc_emit_jump(&r, in->op, in->target + P, in->pos) : bc_emit(&r, in->op, arg, in->pos);
        if (k < 0)
            goto done;
    }
    for (int32_t e = 0; e < body->nexc; e++) {
        BcExc *x = &body->exc[e];
        if (bc_add_exc(&r, x->start + P, x->end + P, x->handler + P, x->depth, x->lasti) < 0)
            goto done;
    }
    Py_SETREF(r.consts, PySequence_List(body->consts));
    Py_SETREF(r.names, PySequence_List(body->names));
    if (!r.consts || !r.names)
        goto done;
    PyObject *ov = PyCode_GetVarnames(orig);
    varnames = ov ? names_tuple(ov, extra) : NULL;
    Py_XDECREF(ov);
    name = PyUnicode_FromFormat("resume_in_%U_at_%d", orig->co_name, tpos.line > 0 ? tpos.line : orig->co_firstlineno);
    PyObject *cellvars = PyCode_GetCellvars(orig);
    PyObject *freevars = PyCode_GetFreevars(orig);
    if (varnames && name && cellvars && freevars) {
        BcCodeSpec spec = {name,
                           name,
                           varnames,
                           cellvars,
                           freevars,
                           (int)PyTuple_GET_SIZE(varnames),
                           0,
                           0,
                           orig->co_flags & ~(CO_VARARGS | CO_VARKEYWORDS),
                           orig->co_firstlineno};
        result = bc_assemble(&r, orig, &spec);
    }
    Py_XDECREF(cellvars);
    Py_XDECREF(freevars);
    if (!result)
        goto done;
    CodeState *rst = code_state_get((PyCodeObject *)result);
    PyObject *wr = rst ? PyWeakref_NewRef((PyObject *)orig, NULL) : NULL;
    if (!wr) {
        Py_CLEAR(result);
        goto done;
    }
    rst->role = loop ? ROLE_RESUME_LOOP : ROLE_RESUME;
    Py_XSETREF(rst->orig, wr);
    rst->shift = r.off[P];
    rst->nextra = nextra;
    if (!ost->resumes && !(ost->resumes = PyDict_New())) {
        Py_CLEAR(result);
        goto done;
    }
    if (PyDict_SetItem(ost->resumes, key, result) < 0)
        Py_CLEAR(result);
done:
    bc_free(&r);
    Py_DECREF(key);
    Py_XDECREF(extra);
    Py_XDECREF(varnames);
    Py_XDECREF(name);
    return result;
}

/* ------------------------------------------------------------ liveness ---- */

/* 1 when code uses zero-argument super() (or reads __class__): "__class__" is among its
 * free variables. */
static int uses_class_cell(PyCodeObject *co)
{
    int32_t first = co->co_nlocalsplus - co->co_nfreevars;
    for (int32_t i = first; i < co->co_nlocalsplus; i++)
        if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(co->co_localsplusnames, i), "__class__") == 0)
            return 1;
    return 0;
}

#define LIVE_WORDS 8   /* frames up to 512 locals (resume_build refuses bigger ones) */
typedef struct {
    uint64_t w[LIVE_WORDS];
} LiveSet;

static int is_terminal_op(int op)
{
    return op == SJOP_RETURN_VALUE || op == SJOP_RAISE_VARARGS || op == SJOP_RERAISE || op == SJOP_JUMP_FORWARD ||
           op == SJOP_JUMP_BACKWARD || op == SJOP_JUMP_BACKWARD_NO_INTERRUPT;
}

/* The instructions control may go to after instruction i of a: the next one (unless i
 * ends its block), its jump target, and the handlers of the try ranges covering it. Fills
 * out (room for 2 + a->nexc) and returns how many. */
static int32_t successors(const BcAsm *a, int32_t i, int32_t *out)
{
    int32_t n = 0;
    const BcIns *x = &a->ins[i];
    if (!is_terminal_op(x->op) && i + 1 < a->n)
        out[n++] = i + 1;
    if (x->target >= 0 && x->target < a->n)
        out[n++] = x->target;
    for (int32_t e = 0; e < a->nexc; e++)
        if (i >= a->exc[e].start && i < a->exc[e].end)
            out[n++] = a->exc[e].handler;
    return n;
}

/* Locals of the user's code (decoded as a, map; n0 locals) that may be read before being
 * written from any of the code units starts[0..nstarts) onwards: a backward data-flow
 * fixpoint, exception handlers included. Slots that become cells are always live (they
 * are read through the cell), and so is the first argument of code that uses zero-argument
 * super() (the interpreter reads it from the frame, with no LOAD_FAST). */
static int live_locals(const BcAsm *pa, const int32_t *map, PyCodeObject *orig, const int32_t *starts, int nstarts,
                       LiveSet *out)
{
    const BcAsm a = *pa;
    int32_t n0 = orig->co_nlocals;
    LiveSet *in = PyMem_Calloc((size_t)a.n + 1, sizeof(LiveSet));
    int32_t *succ = PyMem_Malloc(sizeof(int32_t) * ((size_t)a.nexc + 2));
    if (!in || !succ) {
        PyMem_Free(in);
        PyMem_Free(succ);
        PyErr_NoMemory();
        return -1;
    }
    LiveSet always;
    memset(&always, 0, sizeof always);
    for (int32_t i = 0; i < a.n; i++)
        if (a.ins[i].op == SJOP_MAKE_CELL && a.ins[i].arg < n0)
            always.w[a.ins[i].arg / 64] |= 1ull << (a.ins[i].arg % 64);
    if (orig->co_argcount > 0 && uses_class_cell(orig))
        always.w[0] |= 1;
    for (int changed = 1; changed;) {
        changed = 0;
        for (int32_t i = a.n - 1; i >= 0; i--) {
            BcIns *x = &a.ins[i];
            LiveSet o;
            memset(&o, 0, sizeof o);
            int32_t ns = successors(&a, i, succ);
            for (int32_t s = 0; s < ns; s++)
                for (int w = 0; w < LIVE_WORDS; w++)
                    o.w[w] |= in[succ[s]].w[w];
            if (x->arg < LIVE_WORDS * 64) {
                uint64_t bit = 1ull << (x->arg % 64);
                if (x->op == SJOP_STORE_FAST || x->op == SJOP_DELETE_FAST)
                    o.w[x->arg / 64] &= ~bit;
                else if (x->op == SJOP_LOAD_FAST)
                    o.w[x->arg / 64] |= bit;
            }
            if (memcmp(&o, &in[i], sizeof o)) {
                in[i] = o;
                changed = 1;
            }
        }
    }
    *out = always;
    for (int s = 0; s < nstarts; s++)
        for (int w = 0; w < LIVE_WORDS; w++)
            out->w[w] |= in[map[starts[s]]].w[w];
    PyMem_Free(in);
    PyMem_Free(succ);
    return 0;
}

/* 1 when instruction `to` of a can be reached from instruction `from` (a path of one or
 * more steps: `from` itself counts only through a loop), 0 if not, -1 on no memory. */
static int reaches(const BcAsm *a, int32_t from, int32_t to)
{
    char *seen = PyMem_Calloc((size_t)a->n + 1, 1);
    int32_t *work = PyMem_Malloc(sizeof(int32_t) * ((size_t)a->n + 1));
    int32_t *succ = PyMem_Malloc(sizeof(int32_t) * ((size_t)a->nexc + 2));
    int found = 0;
    if (!seen || !work || !succ) {
        PyErr_NoMemory();
        found = -1;
        goto done;
    }
    int32_t nwork = 0;
    work[nwork++] = from;
    seen[from] = 1;
    while (nwork > 0 && !found) {
        int32_t i = work[--nwork];
        if (i == to) {
            found = 1;
            break;
        }
        int32_t ns = successors(a, i, succ);
        for (int32_t s = 0; s < ns; s++)
            if (!seen[succ[s]]) {
                seen[succ[s]] = 1;
                work[nwork++] = succ[s];
            }
    }
done:
    PyMem_Free(seen);
    PyMem_Free(work);
    PyMem_Free(succ);
    return found;
}

/* --------------------------------------------------------- continuation ---- */

void resume_code_clear(BreakCode *b)
{
    Py_CLEAR(b->cont);
    for (int i = 0; i < 2; i++)
        Py_CLEAR(b->resume[i]);
    b->nresume = 0;
    b->loop[0] = b->loop[1] = 0;
}

static int32_t start_unit(const int32_t *map, int32_t nunits, int32_t idx)
{
    for (int32_t u = 0; u < nunits; u++)
        if (map[u] == idx)
            return u;
    return nunits;
}

/* One graph break being split into a continuation and resume functions: what the steps of
 * resume_build share. Vars live in the capture's arena; nothing here owns a reference. */
typedef struct {
    Capture *c;
    PyCodeObject *co;          /* borrowed: the frame's code */
    PyCodeObject *orig;        /* borrowed: the user's code it continues (co unless a resume) */
    BcAsm *fa;                 /* co decoded */
    int32_t k;                 /* the break instruction's index in fa */
    BcIns *I;                  /* fa->ins[k] */
    BreakShape shape;
    Var *super_args[2];        /* zero-argument super(): __class__ and self, else NULL */
    int nsuper;                /* 2 with super_args, else 0 */
    int32_t ndeep;             /* stack items below the instruction's operands */
    int32_t exit_unit[2];      /* where each way out continues, a unit of orig */
    LiveState ls;
    char lmask[512], cmask[512];   /* '1' per local/cell handed over, '0' unbound */
    char stack[2][520];        /* per way out: the resume function's stack layout (SK_*) */
    /* the continuation's argument layout, by first index: operands (and super's), locals,
     * deep stack, cells, resume functions; then the temporaries for the results (a_temp is
     * thus the number of arguments) */
    int32_t a_ops, a_locals, a_deep, a_cells, a_resume, a_temp;
} Split;

/* Zero-argument super() reads __class__ and the first argument from the frame that calls
 * it, and the continuation is another frame: it calls super(__class__, self) with the
 * values of the user's frame instead. 0, or -1 with the failure recorded. */
static int super_operands(Split *s)
{
    Capture *c = s->c;
    PyCodeObject *co = s->co;
    s->super_args[0] = s->super_args[1] = NULL;
    s->nsuper = 0;
    if (!(s->I->op == SJOP_CALL && s->I->arg == 0 && c->stop_stack[c->stop_sp - 1] &&
          c->stop_stack[c->stop_sp - 1]->obj == (PyObject *)&PySuper_Type))
        return 0;
    int ok = co->co_argcount > 0;
    for (int32_t i = co->co_nlocalsplus - co->co_nfreevars; ok && i < co->co_nlocalsplus; i++)
        if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(co->co_localsplusnames, i), "__class__") == 0)
            s->super_args[0] = objects_cell_contents(c, c->stop_locals[i]);
    if (ok && s->super_args[0])
        s->super_args[1] = slot_value(c, co, 0, &ok);
    if (!ok || !s->super_args[0] || !s->super_args[1]) {
        if (!cap_failed(c))
            cap_fail(c, BR_UNSUPPORTED_CALL, "zero-argument super() at a graph break without __class__ or self");
        return -1;
    }
    s->nsuper = 2;
    return 0;
}

/* The live state in the user's layout: only locals read after the break (ob, obmap: orig
 * decoded) travel to the resume function; every cell does. 0, or -1 with the failure
 * recorded. */
static int live_state(Split *s, const BcAsm *ob, const int32_t *obmap, int32_t nextra_old)
{
    Capture *c = s->c;
    LiveState *ls = &s->ls;
    *ls = (LiveState){s->orig, s->orig->co_nlocals, s->orig->co_nplaincellvars, NULL, NULL};
    ls->locals = cap_alloc(c, sizeof(Var *) * ((size_t)ls->n0 + 1));
    ls->cells = cap_alloc(c, sizeof(Var *) * ((size_t)ls->ncells + 1));
    if (!ls->locals || !ls->cells)
        return cap_fail_exc(c, BR_INTERNAL);
    if (ls->n0 >= LIVE_WORDS * 64 - 8 || ls->ncells >= 500 || c->stop_sp >= 500)
        return cap_fail(c, BR_UNSUPPORTED_VALUE, "a frame too large to split");
    LiveSet live;
    if (live_locals(ob, obmap, s->orig, s->exit_unit, s->shape.nexits, &live) < 0)
        return cap_fail_exc(c, BR_INTERNAL);
    for (int32_t i = 0; i < ls->n0; i++) {
        int ok = 1;
        if (live.w[i / 64] & (1ull << (i % 64)))
            ls->locals[i] = slot_value(c, s->co, i, &ok);
        if (!ok)
            return -1;
        s->lmask[i] = ls->locals[i] ? '1' : '0';
    }
    s->lmask[ls->n0] = 0;
    for (int32_t j = 0; j < ls->ncells; j++) {
        int ok;
        ls->cells[j] = slot_value(c, s->co, ls->n0 + nextra_old + j, &ok);
        if (!ok)
            return -1;
        s->cmask[j] = ls->cells[j] ? '1' : '0';
    }
    s->cmask[ls->ncells] = 0;
    return 0;
}

/* An iterator that cannot be rebuilt from a recipe as the real iterator: what an inlined
 * generator yields, a dict's keys. */
static int iter_without_recipe(const Var *v)
{
    return v && v->kind == VK_ITER && (v->u.iter.gen || (v->u.iter.live && v->u.iter.live->kind != VK_LIST));
}

/* The stack: deep items pass through, operands feed the instruction. Fills s->stack; 0, or
 * -1 with the failure recorded. */
static int stack_layout(Split *s)
{
    Capture *c = s->c;
    s->ndeep = c->stop_sp - s->shape.pops;
    for (int e = 0; e < s->shape.nexits; e++) {
        int32_t i = 0;
        for (; i < s->ndeep; i++) {
            Var *v = c->stop_stack[i];
            s->stack[e][i] = !v ? SK_NULL : v->kind == VK_ITER ? SK_ITER : SK_VALUE;
        }
        for (int r = 0; r < s->shape.results[e]; r++)
            s->stack[e][i++] = SK_VALUE;
        s->stack[e][i] = 0;
    }
    /* an operand of the instruction is handed over as itself: an iterator must be one that
     * is rebuilt as the real iterator (list(map(f, xs)) with a print in f) */
    for (int32_t i = s->ndeep; i < c->stop_sp; i++)
        if (iter_without_recipe(c->stop_stack[i]))
            return cap_fail(c, BR_UNSUPPORTED_VALUE, "an iterator as the operand of a graph break");
    return 0;
}

/* Appends a name to the list names (borrowed). 0, or -1 with an exception set. */
static int append_name(PyObject *names, PyObject *nm)
{
    int rc = nm && PyList_Append(names, nm) == 0 ? 0 : -1;
    Py_XDECREF(nm);
    return rc;
}

/* One argument of the continuation: its name (appended to names) and its value (to the
 * tuple args). 0, or -1 with the failure recorded. */
static int cont_arg(Capture *c, Var *args, PyObject *names, Var *v, PyObject *nm)
{
    if (append_name(names, nm) < 0)
        return cap_fail_exc(c, BR_INTERNAL);
    return var_seq_append(c, args, v) < 0 ? -1 : 0;
}

/* The continuation's arguments (a VK_TUPLE) and their names (appended to names, then the
 * resume functions' and the result temporaries'); sets the a_* layout. NULL with the
 * failure recorded. */
static Var *cont_args(Split *s, PyObject *names)
{
    Capture *c = s->c;
    PyObject *lnames = s->orig->co_localsplusnames;
    Var *args = var_seq(c, VK_TUPLE, NULL, 0);
    if (!args)
        return NULL;
    s->a_ops = 0;
    for (int32_t i = s->ndeep; i < c->stop_sp; i++)
        if (c->stop_stack[i] &&
            cont_arg(c, args, names, c->stop_stack[i], PyUnicode_FromFormat("___op%d", (int)s->a_ops++)) < 0)
            return NULL;
    for (int i = 0; i < s->nsuper; i++)
        if (cont_arg(c, args, names, s->super_args[i], PyUnicode_FromFormat("___op%d", (int)s->a_ops++)) < 0)
            return NULL;
    s->a_locals = (int32_t)PyList_GET_SIZE(names);
    for (int32_t i = 0; i < s->ls.n0; i++) {
        Var *v = s->ls.locals[i];
        if (!v && !(v = var_const(c, Py_None)))
            return NULL;
        if (cont_arg(c, args, names, v, PyUnicode_FromFormat("%U", PyTuple_GET_ITEM(lnames, i))) < 0)
            return NULL;
    }
    s->a_deep = (int32_t)PyList_GET_SIZE(names);
    for (int32_t i = 0; i < s->ndeep; i++) {
        Var *v = c->stop_stack[i];
        if (!v)
            continue;
        if (iter_without_recipe(v)) {
            /* what an inlined generator yielded, a dict's keys: the rest as a tuple (they
             * have no recipe to be rebuilt from) */
            v = var_seq(c, VK_TUPLE, v->u.iter.items + v->u.iter.pos, v->u.iter.n - v->u.iter.pos);
            if (!v)
                return NULL;
        }
        /* any other iterator is handed over as the real iterator at its state (a list's
         * iterator reads the list as it is then, items appended after the break included;
         * map, zip, count, ... are rebuilt from their recipes, their calls run when the
         * loop asks for items), one object however many slots hold it */
        if (cont_arg(c, args, names, v, PyUnicode_FromFormat("___stack%d", (int)i)) < 0)
            return NULL;
    }
    s->a_cells = (int32_t)PyList_GET_SIZE(names);
    for (int32_t j = 0; j < s->ls.ncells; j++)
        if (s->ls.cells[j] && cont_arg(c, args, names, s->ls.cells[j],
                                       PyUnicode_FromFormat("___cell_%U", PyTuple_GET_ITEM(lnames, s->ls.n0 + j))) < 0)
            return NULL;
    s->a_resume = (int32_t)PyList_GET_SIZE(names);
    for (int e = 0; e < s->shape.nexits; e++)
        if (append_name(names, PyUnicode_FromFormat("___resume%d", e)) < 0) {
            cap_fail_exc(c, BR_INTERNAL);
            return NULL;
        }
    s->a_temp = (int32_t)PyList_GET_SIZE(names);
    for (int r = 0; r < 2; r++)
        if (append_name(names, PyUnicode_FromFormat("___result%d", r)) < 0) {
            cap_fail_exc(c, BR_INTERNAL);
            return NULL;
        }
    return args;
}

/* Emits LOAD_FAST of arguments [from, to). 0, or -1 with an exception set. */
static int load_range(BcAsm *ca, int32_t from, int32_t to, BcPos pos)
{
    for (int32_t i = from; i < to; i++)
        if (bc_emit(ca, SJOP_LOAD_FAST, i, pos) < 0)
            return -1;
    return 0;
}

/* The continuation's code: push the operands, run the break's instruction sequence from
 * g0, then per way out call its resume function with the live state and return what it
 * returns. 0, or -1 with an exception set. */
static int emit_cont(Split *s, BcAsm *ca, int32_t g0)
{
    Capture *c = s->c;
    BcPos pos = s->I->pos;
    if (bc_emit(ca, SJOP_RESUME, 0, pos) < 0)
        return -1;
    for (int32_t i = s->ndeep, a = 0; i < c->stop_sp; i++)
        if (bc_emit(ca, c->stop_stack[i] ? SJOP_LOAD_FAST : SJOP_PUSH_NULL, c->stop_stack[i] ? a++ : 0, pos) < 0)
            return -1;
    if (load_range(ca, s->a_ops - s->nsuper, s->a_ops, pos) < 0)
        return -1;
    int32_t jump_at = -1;
    for (int32_t i = g0; i <= s->k; i++) {
        BcIns *in = &s->fa->ins[i];
        int32_t arg = in->arg;
        if (s->nsuper && (in->op == SJOP_PRECALL || in->op == SJOP_CALL)) {
            arg = s->nsuper;
        } else if (in->op == SJOP_KW_NAMES) {
            arg = bc_const(ca, PyTuple_GET_ITEM(s->co->co_consts, in->arg));
        } else if (in->op == SJOP_LOAD_ATTR || in->op == SJOP_STORE_ATTR) {
            arg = bc_name(ca, PyTuple_GET_ITEM(s->co->co_names, in->arg));
        }
        if (arg < 0)
            return -1;
        if (i == s->k && s->shape.nexits > 1) {
            jump_at = bc_emit_jump(ca, forward_jump(in->op), -1, in->pos);
            if (jump_at < 0)
                return -1;
        } else if (bc_emit(ca, in->op, arg, in->pos) < 0) {
            return -1;
        }
    }
    for (int e = 0; e < s->shape.nexits; e++) {
        if (e == 1)
            ca->ins[jump_at].target = ca->n;
        int nres = s->shape.results[e];
        for (int r = nres - 1; r >= 0; r--)
            if (bc_emit(ca, SJOP_STORE_FAST, s->a_temp + r, pos) < 0)
                return -1;
        if (bc_emit(ca, SJOP_PUSH_NULL, 0, pos) < 0 || bc_emit(ca, SJOP_LOAD_FAST, s->a_resume + e, pos) < 0)
            return -1;
        /* the resume function's parameters: locals, deep stack, results, cells */
        int32_t n = (s->a_cells - s->a_locals) + nres + (s->a_resume - s->a_cells);
        if (load_range(ca, s->a_locals, s->a_cells, pos) < 0 || load_range(ca, s->a_temp, s->a_temp + nres, pos) < 0 ||
            load_range(ca, s->a_cells, s->a_resume, pos) < 0)
            return -1;
        if (bc_emit(ca, SJOP_PRECALL, n, pos) < 0 || bc_emit(ca, SJOP_CALL, n, pos) < 0 ||
            bc_emit(ca, SJOP_RETURN_VALUE, 0, pos) < 0)
            return -1;
    }
    return 0;
}

/* The continuation code object from its bytecode ca and argument names (a list,
 * borrowed); new reference, or NULL with an exception set. */
static PyObject *assemble_cont(Split *s, BcAsm *ca, PyObject *names)
{
    PyObject *cont = NULL;
    PyObject *vn = PyList_AsTuple(names);
    PyObject *empty = PyTuple_New(0);
    if (vn && empty) {
        BcCodeSpec spec = {s->orig->co_name,
                           s->orig->co_qualname,
                           vn,
                           empty,
                           empty,
                           s->a_temp,
                           0,
                           0,
                           CO_OPTIMIZED | CO_NEWLOCALS,
                           s->orig->co_firstlineno};
        cont = bc_assemble(ca, s->co, &spec);
    }
    Py_XDECREF(vn);
    Py_XDECREF(empty);
    if (!cont)
        return NULL;
    CodeState *cst = code_state_get((PyCodeObject *)cont);
    if (!cst) {
        Py_DECREF(cont);
        return NULL;
    }
    cst->role = ROLE_CONT;
    return cont;
}

/* Where each way out continues, in the user's code (s->exit_unit), and whether control can
 * come back to the break from there (out->loop). 0, or -1 with the failure recorded.
 *
 * A way out from which control can come back to this break (the break lies in a loop) gets
 * a resume function that the interpreter runs: compiled, it would break here again and
 * nest one more continuation and resume frame per iteration, without bound on the C
 * stack, with one cache entry per remaining trip count. Frames it calls are still
 * compiled. Every compiled resume function's break site is thus unreachable from its own
 * start, so a chain of compiled resumes visits each site at most once. */
static int exits(Split *s, const int32_t *fmap, int32_t nunits, int32_t shift, const BcAsm *ob, const int32_t *obmap,
                 BreakCode *out)
{
    s->exit_unit[0] = start_unit(fmap, nunits, s->k + 1) - shift;
    s->exit_unit[1] = s->shape.nexits > 1 ? start_unit(fmap, nunits, s->I->target) - shift : -1;
    for (int e = 0; e < s->shape.nexits; e++)
        if (s->exit_unit[e] < 0 || s->exit_unit[e] >= nunits - shift)
            return cap_fail(s->c, BR_UNSUPPORTED_OPCODE, "a graph break whose continuation lies outside the code");
    int32_t kb = s->orig == s->co ? s->k : obmap[start_unit(fmap, nunits, s->k) - shift];
    for (int e = 0; e < s->shape.nexits; e++) {
        int r = reaches(ob, obmap[s->exit_unit[e]], kb);
        if (r < 0)
            return cap_fail_exc(s->c, BR_INTERNAL);
        out->loop[e] = r;
    }
    return 0;
}

int resume_build(Capture *c, PyCodeObject *co, CodeState *st, BreakCode *out)
{
    memset(out, 0, sizeof *out);
    PyCodeObject *orig = co;
    int32_t shift = 0, nextra_old = 0;
    if (st->role == ROLE_RESUME) {
        PyObject *o = st->orig ? PyWeakref_GetObject(st->orig) : NULL;
        if (!o || !PyCode_Check(o))
            return cap_fail(c, BR_INTERNAL, "the code this resume function continues is gone");
        orig = (PyCodeObject *)o;
        shift = st->shift;
        nextra_old = st->nextra;
    }
    CodeState *ost = orig == co ? st : code_state_get(orig);
    if (!ost)
        return cap_fail_exc(c, BR_INTERNAL);
    /* the frame's code (for the break instruction) and the user's code it continues (for
     * liveness and the resume functions): the same one unless the frame is a resume */
    BcAsm fa, oa, ca;
    int32_t *fmap = NULL, *omap = NULL, nunits = 0;
    int rc = -1;
    PyObject *cvarnames = NULL;
    if (bc_init(&fa) < 0)
        return cap_fail_exc(c, BR_INTERNAL);
    if (bc_init(&oa) < 0 || bc_init(&ca) < 0) {
        bc_free(&fa);
        bc_free(&oa);
        return cap_fail_exc(c, BR_INTERNAL);
    }
    if (bc_decode(&fa, co, &fmap, &nunits) < 0 || (orig != co && bc_decode(&oa, orig, &omap, NULL) < 0))
        goto internal;
    const BcAsm *ob = orig == co ? &fa : &oa;
    const int32_t *obmap = orig == co ? fmap : omap;
    Split s;
    s.c = c;
    s.co = co;
    s.orig = orig;
    s.fa = &fa;
    s.k = fmap[c->stop_pc];
    s.I = &fa.ins[s.k];
    if (shape_of(s.I->op, s.I->arg, &s.shape) < 0) {
        cap_fail(c, BR_UNSUPPORTED_OPCODE, "a graph break at %s", sj_op_names[s.I->op]);
        goto fail;
    }
    if (c->stop_sp < s.shape.pops) {
        cap_fail(c, BR_INTERNAL, "evaluation stack shorter than the break instruction's operands");
        goto fail;
    }
    int32_t g0 = s.k;
    if (s.I->op == SJOP_CALL && g0 > 0 && fa.ins[g0 - 1].op == SJOP_PRECALL) {
        g0--;
        if (g0 > 0 && fa.ins[g0 - 1].op == SJOP_KW_NAMES)
            g0--;
    }
    if (super_operands(&s) < 0 || exits(&s, fmap, nunits, shift, ob, obmap, out) < 0 ||
        live_state(&s, ob, obmap, nextra_old) < 0 || stack_layout(&s) < 0)
        goto fail;
    for (int e = 0; e < s.shape.nexits; e++) {
        out->resume[e] = make_resume(orig, ost, ob, obmap, s.exit_unit[e], s.stack[e], s.lmask, s.cmask, out->loop[e]);
        if (!out->resume[e])
            goto internal;
        out->nresume = e + 1;
    }
    cvarnames = PyList_New(0);
    if (!cvarnames)
        goto internal;
    Var *args = cont_args(&s, cvarnames);
    if (!args)
        goto fail;
    if (emit_cont(&s, &ca, g0) < 0 || !(out->cont = assemble_cont(&s, &ca, cvarnames)))
        goto internal;
    out->args = args;
    rc = 0;
    goto done;
internal:
    cap_fail_exc(c, BR_INTERNAL);
fail:
    resume_code_clear(out);
done:
    PyMem_Free(fmap);
    PyMem_Free(omap);
    bc_free(&fa);
    bc_free(&oa);
    bc_free(&ca);
    Py_XDECREF(cvarnames);
    return rc;
}
