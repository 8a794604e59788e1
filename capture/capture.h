/* The state of one capture: the symbolic evaluation of a frame (and the calls it inlines)
 * into a graph, its sources and its guards. Internal to capture/. */
#ifndef SJ_CAPTURE_H
#define SJ_CAPTURE_H

#include <Python.h>
#include "../graph/ir.h"
#include "../guards/guards.h"
#include "../core/breaks.h"
#include "../vocab/callables.h"
#include "../shapes/rules.h"
#include "../shapes/sym.h"
#include "../shapes/env.h"
#include "../guards/code_cache.h"

/* ---------------------------------------------------------------- vars ---- */

typedef enum {
    VK_CONST,      /* obj: a Python constant folded at capture time */
    VK_TENSOR,     /* a graph value: u.t */
    VK_TUPLE,      /* u.seq */
    VK_LIST,       /* u.seq */
    VK_DICT,       /* u.dict (keys are VK_CONST) */
    VK_SLICE,      /* u.slice (some part is not constant) */
    VK_ITER,       /* u.iter: the items, materialised, and the position */
    VK_FUNC,       /* a Python function to inline: obj (a real function) or u.func (made here) */
    VK_CELL,       /* u.cell: a closure cell */
    VK_OBJECT,     /* obj: a user object read through its source */
    VK_MODULE,     /* obj: an nn.Module instance */
    VK_PYMODULE,   /* obj: a Python module */
    VK_CALLABLE,   /* obj: a builtin, a library function, a type, ... */
    VK_METHOD,     /* u.method: a bound method */
    VK_PARTIAL,    /* u.partial: functools.partial */
    VK_GRADMODE,   /* u.grad: torch.no_grad() / enable_grad() / set_grad_enabled(b) objects */
    VK_EXIT,       /* u.grad: the __exit__ that BEFORE_WITH pushes for a grad-mode block */
    VK_USEROBJ,    /* u.uobj: an instance of a user class made during capture (dataclasses);
                      with record set, a dataclass that is also a dict (transformers'
                      ModelOutput): fields in order, None fields hidden from the dict view */
    VK_SUPER,      /* u.sup: super() inside a method */
    VK_SYMINT,     /* u.s: a Python int that is a symbolic size (x.size(0), s0 * 2, an int
                      input made dynamic); never a constant node */
    VK_GSCALAR,    /* u.gs: a Python float or bool computed in the graph at run time (t.item()
                      of a float or bool tensor under capture_scalar_outputs, and arithmetic
                      on it: torch's unbacked SymFloat/SymBool); see gscalar.c */
    VK_DICTVIEW,   /* u.dview: d.keys() / d.values() / d.items() of a VK_DICT: live, as in
                      Python, so every use reads the dict as it is then */
} VarKind;

/* The Python type of a VK_GSCALAR. Ints are never graph scalars: an int computed in the
 * graph is an unbacked symbol u<N> (a VK_SYMINT). */
/* GS_NUMPY: a numpy scalar (np.int64, np.float32, ...) read from the frame; its Python type
 * is its hint's, and so is that of every result computed from it (the graph runs the real
 * operators on the real values). */
typedef enum { GS_FLOAT, GS_BOOL, GS_NUMPY } GScalarType;

typedef struct Var Var;
typedef struct LazyIter LazyIter;   /* iters.c */
typedef struct GenWatch GenWatch;   /* capture.c */
struct Var {
    uint8_t kind;          /* VarKind */
    uint32_t born;         /* Capture.serial when it was made: later vars are newer */
    uint8_t fresh;         /* a container the frame owns although it has a source (the
                              *args tuple and **kwargs dict of the compiled frame): writes
                              to it are not side effects */
    uint8_t stable;        /* an attribute of a trusted library module read without a guard
                              (np.random.rand): the same object every run, so a resume
                              function may be handed it as a constant */
    uint8_t from_module;   /* VK_OBJECT: reached through an nn.Module's attributes */
    uint8_t by_type;       /* VK_MODULE: a module from a source guarded by its type, not
                              its identity (wrap.c: wrap_stateless_module,
                              wrap_typed_module); its aliasing is guarded when the frame
                              writes attributes of its type, as a user object's */
    uint8_t untracked;     /* a list, dict or set from outside the frame reached without a
                              source (src < 0): its writes cannot be replayed after the graph,
                              so they break it (var_is_outside) */
    PyObject *orig;        /* untracked: the outside object itself (borrowed; kept alive by
                              Capture.keepalive), what a result or the code after a break
                              is handed in its place, never a copy */
    int32_t src;           /* source id, -1 when made during capture */
    PyObject *obj;         /* borrowed; kept alive by Capture.keepalive */
    union {
        struct {
            int32_t value;
            TensorMeta meta;
        } t;
        struct {
            Var **items;
            int32_t n, cap;
            PyTypeObject *subtype;
            Var *maxlen;
        } seq;
        /* subtype (borrowed, keepalive): a VK_TUPLE's tuple
                                         subclass, a VK_LIST's collections.deque, or NULL;
                                         maxlen: a deque's (a constant var) */
        struct {
            Var **keys, **vals;
            int32_t n, cap;
            PyTypeObject *subtype;
            Var *factory;
            PyObject *lazy;
        } dict;
        /* subtype (borrowed, keepalive): OrderedDict,
                                         defaultdict or Counter, or NULL (collections.c);
                                         factory: a defaultdict's default_factory;
                                         lazy (borrowed, kept by the capture): the outside
                                         dict whose entries are read on first lookup, or
                                         NULL once keys..vals hold all of it (wrap.c) */
        struct {
            Var *start, *stop, *step;
        } slice;
        struct {
            Var **items;
            int32_t n, pos;
            Var *live;
            int32_t used;
            LazyIter *lazy;
            int gen;
            GenWatch *watch;   /* gen: what its run read (capture.c), or NULL */
        } iter;
        /* live: the list (or dict, dict view) GET_ITER made
                                         it from, or NULL: a list iterator reads the list as
                                         it is at each step (items/n unused); a dict's
                                         iterator fails when the dict's size changed from
                                         used; lazy (arena): map, zip, itertools.count, ...
                                         producing each item on next() (items/n unused);
                                         gen: the items an inlined generator yielded (a
                                         generator object in eager: never rebuilt) */
        struct {
            Var *dict;
            char which;
        } dview;   /* which: 'k', 'v' or 'i' */
        struct {
            PyCodeObject *code;
            PyObject *globals;
            Var *defaults;
            Var *kwdefaults;
            Var *closure;
            PyObject *name;
        } func;   /* code/globals/name borrowed */
        struct {
            Var *contents;
            PyObject *real;
        } cell;  /* real: a cell object from outside */
        struct {
            Var *self;
            Var *fn;
        } method;
        struct {
            int32_t *kids;
            int32_t n;
        } mod;   /* VK_MODULE without a source made from a
                                      sourced container (a ModuleList / Sequential slice):
                                      kids[i] is the source of the i-th entry of its _modules
                                      (capture arena); kids NULL otherwise */
        struct {
            Var *fn;
            Var *args;
            Var *kwargs;
        } partial;
        struct {
            int enabled;
            int prev;
            int inference;
            int32_t ctx;
            int applied;
        } grad;
        /* enabled: the grad mode inside the block; prev (VK_EXIT):
                                         the one before; inference: 0 a grad-mode object, 1/2
                                         torch.inference_mode(True/False); ctx (VK_EXIT of an
                                         inference block): the graph value of torch's guard
                                         object (inference_mode.c); applied: a
                                         torch.set_grad_enabled(mode) object, whose
                                         construction already switched (prev: the mode
                                         before it) */
        struct {
            PyTypeObject *type;
            Var *attrs;
            int record;
        } uobj;   /* type borrowed (keepalive) */
        struct {
            PyTypeObject *cls;
            Var *self;
        } sup;                  /* cls borrowed (keepalive) */
        struct {
            SymNode *e;
        } s;                                      /* the capture's env */
        struct {
            int32_t value;
            uint8_t type;
            PyObject *text;
            PyObject *hint;
            Var **deps;
            int32_t ndeps;
            PyObject *recipe;
        } gs;    /* value: its graph value; type:
                                      GScalarType; text: borrowed (keepalive) str naming it in
                                      messages: zuf0, 2.0*zuf0; hint: borrowed (keepalive) value
                                      it has in this call when it is computed from dynamic float
                                      inputs only (NULL for data); deps: those inputs (capture
                                      arena); recipe: borrowed (keepalive), how it follows from
                                      its one input (guards/guards.c SCALAR_RELATION), or NULL */
    } u;
};

/* ------------------------------------------------------------ frames ---- */

typedef struct EvalFrame EvalFrame;
struct EvalFrame {
    EvalFrame *parent;
    PyCodeObject *code;        /* borrowed (keepalive) */
    PyObject *globals;         /* borrowed */
    PyObject *builtins;        /* borrowed */
    PyObject *instrs;          /* strong: co_code bytes (de-specialised) */
    const uint16_t *ins;       /* into instrs */
    int32_t ninstr;            /* code units */
    int32_t pc;                /* code unit index of the instruction being evaluated */
    Var **locals;              /* co_nlocalsplus */
    Var **stack;
    int32_t sp, stack_cap;
    int trusted;               /* library code (torch/numpy): globals read without guards */
    int is_top;                /* the frame being compiled: globals are G[...] */
    int generator;             /* inlined generator: yields go to gen_items */
    Var *gen_items;            /* VK_LIST collecting yields */
    PyObject *kwnames;         /* borrowed: set by KW_NAMES for the next CALL */
    Var *fn;                   /* the function var being run, or NULL for the top frame */
    PyObject **pending;        /* top frame: live arguments not wrapped yet (borrowed) */
    PyObject *closure;         /* top frame: the function's closure tuple (borrowed) */
};

/* ------------------------------------------------------------ capture ---- */

typedef struct ArenaBlock ArenaBlock;

/* An attribute written on an object that exists outside the capture. Capture reads see
 * the new value; the result plan replays the final value of each attribute after the graph
 * runs (compile.c, "w"), in the order of the first writes, as the frame would have made
 * them. attrs.c admits only writes that a replay reproduces: a plain instance attribute
 * (no data descriptor on the class) of an object whose __setattr__ and __getattribute__
 * are object's, nn.Module's (a name none of its parameter, buffer and submodule dicts
 * holds) or a transformers config's. */
typedef struct AttrWrite {
    struct AttrWrite *next;
    Var *target;           /* the object's var: its source finds the object at run time */
    PyObject *obj;         /* borrowed (keepalive): the object written */
    PyObject *name;        /* borrowed (keepalive) */
    Var *value;            /* the current value */
    int owned;             /* the object was made during capture: its writes never escape */
    int generic;           /* written through object.__setattr__: replayed that way */
    int item;              /* written as o[name] on a transformers ModelOutput (its __setitem__
                              sets the item and the attribute): replayed that way */
} AttrWrite;

/* A user object read through a source (VK_OBJECT, guarded by type only): a later call may
 * pass one object where capture saw two, or the reverse, so a frame that writes one of
 * them guards their aliasing (attr_check_writes). */
typedef struct ObjRead {
    struct ObjRead *next;
    Var *v;
} ObjRead;

/* A list or dict from outside written in place during capture: the capture works on its
 * var, and the entry writes the final contents back after the graph runs. */
typedef struct Mutated {
    struct Mutated *next;
    Var *v;
} Mutated;

typedef struct Capture {
    Graph *g;                  /* owned until handed to the entry */
    SourceTable src;           /* owned */
    GuardSet guards;           /* owned */
    PyObject *keepalive;       /* strong list */
    PyObject *wrapped;         /* strong dict: id(obj) -> index into by_obj (tensors); (id(obj),) ->
                                  address of the var (lists and dicts, wrap.c) */
    Var **by_obj;
    int32_t nby_obj, cap_by_obj;
    ArenaBlock *arena;
    EvalFrame *frame;          /* innermost */
    int depth;
    int nops;                  /* op nodes recorded */
    int used_torch;            /* some op or input belongs to torch */
    int grad_mode;             /* grad mode at this point of the captured program */
    int infer_depth;           /* inference_mode blocks open at this point (inference_mode.c) */
    PyObject *linecache;       /* strong dict: (code, line) -> where tuple */
    /* the failure */
    BreakReason reason;
    PyObject *reason_msg;      /* strong str or NULL */
    PyObject *user_stack;      /* strong list of (file, line, func, text) or NULL */
    PyObject *exc;             /* strong or NULL: with BR_USER_EXCEPTION, the exception user
                                  code raised during capture (a handler may catch it) */
    AttrWrite *writes;         /* attribute writes on outside objects, first write first (arena) */
    ObjRead *objreads;         /* user objects and modules guarded by type, read through a
                                  source (arena) */
    Mutated *mutated;          /* outside lists/dicts written in place (arena) */
    uint32_t serial;           /* vars made so far (Var.born) */
    GenWatch **watches;        /* arena: materialised generators whose items may be read */
    int32_t nwatches, capwatches;
    GenWatch *gen_runs[16];    /* the generators whose runs are under way, innermost last */
    int ngen_runs;
    /* frame splitting (resume.c): a failure in the compiled frame's own instruction can
     * become a graph break there; capture is then run again and stopped before it */
    long top_step;             /* instructions of the compiled frame begun so far */
    long fail_step;            /* top_step when the failure was recorded */
    int32_t fail_pc;           /* the compiled frame's instruction (code unit) at the failure */
    long stop_step;            /* > 0: stop before the stop_step-th instruction */
    int stopped;               /* it stopped there; the state below is valid */
    int32_t stop_pc;
    Var **stop_stack;          /* arena: the evaluation stack (NULL items are NULL) */
    int32_t stop_sp;
    Var **stop_locals;         /* arena: localsplus vars (NULL = unbound or not read yet) */
    PyObject **stop_pending;   /* arena: live arguments not read yet (borrowed) */
    PyObject *stop_kwnames;    /* borrowed: KW_NAMES for a stopped CALL */
    /* symbolic shapes (symbolic.c) */
    int dynamic;               /* compile(dynamic=): -1 automatic, 0 False, 1 True */
    PyObject *fstate;          /* borrowed dict or NULL: the code's frame state (CodeState) */
    SymEnv *env;               /* borrowed: g->env (the graph owns it); NULL until needed */
    SymRuleCtx rctx;           /* env + guard callback for the shape rules */
    ShapeEnv shape;            /* owned: symbols and the relations relied on (over env) */
    PyObject *symvals;         /* strong dict: node address -> graph value id */
    PyObject *violations;      /* strong list of str or NULL: mark_dynamic dims specialised */
    PyObject *wrap_owner;      /* borrowed or NULL: while an nn.Module's attribute is wrapped,
                                  that module (attrs.c wrap_attr) */
    int wrap_in_module;        /* while what hangs off an nn.Module (through user objects too)
                                  is wrapped: user objects made then are from_module */
    int wrap_plain_attr;       /* while an attribute of a user object not reached through a
                                  module is wrapped: its numbers follow automatic dynamic, as
                                  the frame's own locals do (symbolic.c) */
    int32_t nufloats;          /* graph floats made so far (zuf<N>, gscalar.c) */
    /* the result */
    Var *result;
    int32_t distinct_srcs[256];
    int32_t ndistinct;
} Capture;

/* capture.c: the arena */
void *cap_alloc(Capture *c, size_t n);          /* zeroed; NULL with MemoryError */
void cap_arena_free(Capture *c);
/* Keep obj alive for the capture; returns obj (borrowed) or NULL on error. */
PyObject *cap_keep(Capture *c, PyObject *obj);
/* Same, stealing a new reference (NULL passes through). */
PyObject *cap_keep_steal(Capture *c, PyObject *obj);
/* A call's argument named name (a keyword), else the one at position pos (pos < 0: by
 * keyword only); NULL when absent. Borrowed from args. */
Var *cap_arg(Var **args, int32_t nargs, PyObject *kwnames, int32_t pos, const char *name);

/* Var constructors (vars.c). All return NULL with cap failure set on error. */
Var *var_new(Capture *c, VarKind k);
Var *var_const(Capture *c, PyObject *obj);           /* obj borrowed */
Var *var_const_steal(Capture *c, PyObject *obj);     /* obj: new reference */
Var *var_seq(Capture *c, VarKind k, Var **items, int32_t n);
/* A bound method: fn (a var, or a name constant for methods dispatched by name) bound to
 * self. NULL when fn is NULL (its failure already set) or on error. */
Var *var_method(Capture *c, Var *self, Var *fn);
int var_seq_append(Capture *c, Var *seq, Var *item);
Var *var_dict(Capture *c);
int var_dict_set(Capture *c, Var *d, Var *key, Var *val);
Var *var_dict_get(Capture *c, Var *d, Var *key, int *found);
/* 1 when v can key a dict var: a constant, or a torch tensor (keyed by identity). */
int var_is_dict_key(const Var *v);
/* d.keys() / values() / items() as a new list var (which: 'k', 'v' or 'i'); skip_none
 * leaves out entries whose value is None (ModelOutput's dict view). */
Var *var_dict_view(Capture *c, Var *d, char which, int skip_none);
/* Remove key from dict var d: 1 when it was there, 0 when not, -1 with an exception. */
int var_dict_del(Capture *c, Var *d, Var *key);
/* d.update(src) for src a dict var or an iterable of (key, value) pairs: 0, or -1 with
 * the capture failed (a graph break; mappings of other kinds are not modelled). */
int var_dict_merge(Capture *c, Var *d, Var *src);
/* A live view (VK_DICTVIEW) of dict var d: which is 'k', 'v' or 'i'. */
Var *var_dict_live_view(Capture *c, Var *d, char which);
/* The list a live dict view reads as now (a new VK_LIST var). */
Var *var_view_list(Capture *c, Var *view);
/* The method name of a dict view ("keys", "values", "items"). */
const char *var_view_method(const Var *view);
/* A constant, or a list/tuple made only of constants at any depth (NULL counts). */
int var_deep_const(const Var *v);
int var_is_const(const Var *v);
int var_all_const(Var *const *vs, int32_t n);
/* New reference: the Python value of a var made of constants (tuples/lists/dicts/slices of
 * constants included); NULL with *fail set when it holds graph values. */
PyObject *var_to_py(Capture *c, Var *v);
const char *var_kind_name(const Var *v);

/* names.c: names in break reasons. Strings returned as const char * live in the capture's
 * arena; New references are never NULL without reason, and no exception is left set. */
/* "a numpy array", "an io.StringIO object", "torch.rand", "a torch.no_grad() object". */
const char *var_a(Capture *c, const Var *v);
/* "collections.OrderedDict", "torch.nn.Linear", "Point" (a class of the script). */
const char *sj_type_name(Capture *c, PyTypeObject *t);
/* "a collections.OrderedDict" (+ " what" when what is not NULL). */
const char *sj_type_a(Capture *c, PyTypeObject *t, const char *what);
/* The path a user writes for a callable: torch.rand, torch.Tensor.addcdiv_,
 * numpy.add.outer, numpy.random.randn, functools._lru_cache_wrapper of f. */
const char *sj_callable_name(Capture *c, PyObject *fn);
/* The Python type of v as a path ("list", "collections.OrderedDict", "Tensor"), for
 * "type.method" texts. */
const char *sj_var_type_name(Capture *c, const Var *v);
/* After a call of method func on self failed as unsupported, naming func: name the
 * bound method instead when a module holds it (numpy.random.randn, not
 * numpy.random.RandomState.randn). */
void sj_name_bound_call(Capture *c, PyObject *func, PyObject *self);
/* "torch.no_grad()", "torch.set_grad_enabled(True)", ... for a VK_GRADMODE var. Static. */
const char *sj_grad_mode_text(const Var *v);

/* wrap.c: a live object reached by source src becomes a var, with its guards. */
Var *wrap_value(Capture *c, PyObject *obj, int32_t src);
/* A live object with no source (library constants, trusted globals). */
Var *wrap_untracked(Capture *c, PyObject *obj);
/* wrap_untracked of getattr(obj, name) (both borrowed); an exception it raises fails the
 * capture as the user's (the interpreter raises it again). */
Var *wrap_untracked_attr(Capture *c, PyObject *obj, PyObject *name);
/* The source the cells and defaults of fn (a function var being inlined) are read
 * through: fn's own, or for a function from outside reached without one (a method found
 * on its class, a staticmethod, a property getter, a partial's func) the function itself
 * held by the source table, so the outside objects it holds are tracked as the frame's
 * own are (guarded, their writes replayed) and never copied. -1 for a function made
 * during capture (its cells are vars); -2 with the failure set. */
int32_t wrap_fn_source(Capture *c, Var *fn);
/* A C method bound to the object it was read from (obj borrowed): a new object on every
 * read, guarded by its type, never by identity. */
Var *wrap_bound_builtin(Capture *c, PyObject *obj, int32_t src);
int guard_add_dict_version(Capture *c, int32_t src, PyObject *d);
int guard_add_simple(Capture *c, GuardKind kind, int32_t src, PyObject *expected);
/* Guards the keys of dict d (borrowed), read at src: 0, or -1 with an exception. */
int guard_dict_keys(Capture *c, int32_t src, PyObject *d);
/* The source base.attr of the dict d (borrowed), its keys guarded (DICT_KEYS): the
 * source, or -1 with an exception set. */
int32_t guard_dict_attr_keys(Capture *c, int32_t base, const char *attr, PyObject *d);
/* Lazy dict var d (an outside dict read through a source): key's entry read from the live
 * dict and guarded, present (its value wrapped and added to d) or absent (DICT_CONTAINS).
 * 1 found (*val the value var), 0 absent, -1 with the failure set. */
int var_dict_lazy_lookup(Capture *c, Var *d, Var *key, Var **val);
/* Makes d hold every entry of the dict it reads lazily (its keys guarded, DICT_KEYS, and
 * each value wrapped), keeping the entries already read: what every use of a dict but a
 * lookup by a constant key needs. 0 (also for any other var), or -1 with the failure set. */
int var_dict_force(Capture *c, Var *d);

/* failures (capture.c) */
/* Record why capture stops (printf-like msg). Always returns -1. Clears nothing. */
int cap_fail(Capture *c, BreakReason r, const char *fmt, ...);
/* Turn a pending Python exception into the failure reason. Returns -1. */
int cap_fail_exc(Capture *c, BreakReason r);
int cap_failed(const Capture *c);
/* Forget the current failure (an exception handler caught it). */
void cap_clear_failure(Capture *c);
/* Fail with BR_USER_EXCEPTION carrying exc (borrowed; an instance or a class). */
int cap_raise(Capture *c, PyObject *exc);
/* New reference: (filename, lineno, funcname, line) of the current instruction. */
PyObject *cap_where(Capture *c);
/* New reference: the user frames of the capture now, outermost first, each
 * (file, line, function, source line); NULL with an exception. */
PyObject *cap_user_stack(Capture *c);

/* evaluator.c */
/* Evaluate code with the given locals (localsplus layout) and return its result var. */
Var *eval_frame(Capture *c, PyCodeObject *code, PyObject *globals, PyObject *builtins, Var **locals, Var *fn,
                int generator);
/* The frame being compiled: locals are the live frame's (borrowed) values. */
Var *eval_top(Capture *c, PyCodeObject *code, PyObject *globals, PyObject *builtins, PyObject *const *live_locals,
              PyObject *closure);

/* 1 when a write into v changes an object from outside the frame: one with a source that
 * the frame does not own, or one reached without a source (untracked). */
static inline int var_is_outside(const Var *v)
{
    return (v->src >= 0 && !v->fresh) || v->untracked;
}

/* Generators are run to completion when called (evaluator.c), their items kept. That is
 * eager's order only when nothing they read changes before their items are taken and their
 * runs change nothing outside themselves: GenWatch records, per run, the vars it pushed on
 * an evaluation stack (what it read), whether it recorded graph ops, and whether it read
 * through an iterator whose sources are not listed. A change (cap_note_change) to a var a
 * pending generator read, or any in-place tensor write after a generator that computed
 * from tensors, makes that generator stale, and taking an item of a stale generator fails
 * the capture (BR_GENERATOR); so does a change, during a generator's run, to a var older
 * than the run, or an in-place tensor write there. */
struct GenWatch {
    Var **touched;        /* arena: vars its run pushed (duplicates kept) */
    int32_t ntouched, cap;
    uint32_t floor;       /* Capture.serial when its run began: vars born since are its own */
    int nops;             /* Capture.nops when its run began */
    int computed;         /* its run recorded graph ops */
    int unknown;          /* it read through a map, zip, filter or the like */
    int stale;
    Var *it;              /* the materialised iterator, once made */
};
/* Generator runs (eval_frame): begin before the body runs, end with its iterator (NULL when
 * the run failed). 0, or -1 with the failure set. */
int cap_gen_begin(Capture *c);
int cap_gen_end(Capture *c, Var *it);
/* v was pushed on an evaluation stack while generators run: they read it. 0 or -1. */
int cap_gen_touch(Capture *c, Var *v);
/* Var t is about to change in place by the user's code (a container's items, an object's
 * attribute: not capture filling in what it wraps, so not in vars.c's helpers); NULL
 * when what changes is not one var (an in-place tensor write: `tensor` 1). 0, or -1 with
 * the failure set. */
int cap_note_change(Capture *c, const Var *t, int tensor);
/* 0 when the next item of materialised generator it may be taken, else -1 with the
 * failure set. */
int cap_gen_check(Capture *c, const Var *it);

/* An outside container (var_is_outside) is about to be written in place: lists and dicts
 * with a source are noted for write-back; anything else (an untracked one, whose write
 * could not be replayed) fails with BR_SIDE_EFFECT. 0 or -1. */
int cap_note_mutation(Capture *c, Var *container, const char *what);

/* 1 when code unit pc of co is covered by an exception handler (try/with). */
int eval_pc_in_try(PyCodeObject *co, int32_t pc);

/* symbolic.c: the shape environment of a capture */
/* Create the env (once per capture, on first need). 0 or -1. */
int symb_ensure(Capture *c);
void symb_release(Capture *c);
/* Decide which dims of a tensor input are dynamic and give them symbols: sets m->sym[],
 * *dyn (bit per dynamic dim), updates the frame state. 0 or -1 (failure recorded). */
int symb_wrap_tensor(Capture *c, PyObject *obj, int32_t src, TensorMeta *m, int32_t value, uint8_t *dyn);
/* An int input: a VK_SYMINT var when it is dynamic, else NULL with nothing recorded
 * (*handled = 0): the caller guards it by value. */
Var *symb_wrap_int(Capture *c, PyObject *obj, int32_t src, int *handled);
/* The same for a float or a real numpy scalar (dynamic from the first call, as torch
 * treats them): a dynamic one is a graph scalar read from the frame at run time. */
Var *symb_wrap_float(Capture *c, PyObject *obj, int32_t src, int *handled);
/* A var for e: a constant int var when e is constant, else VK_SYMINT. */
Var *symb_var(Capture *c, SymNode *e);
/* Unbacked symbols (capture_scalar_outputs / capture_dynamic_output_shape_ops): a new u<N>
 * whose run-time value is graph value `value` (an item node), or, when value is -1, the
 * size of dim `dim` of graph tensor `tensor_value` (nonzero's rows). Logged as
 * create_unbacked_symint. NULL with an exception. */
SymNode *symb_unbacked(Capture *c, int32_t value, int32_t tensor_value, int dim, SymRange r);
/* t.item() of a one-element torch tensor: an item node and, for an integer tensor, a
 * VK_SYMINT var over a new unbacked symbol, for a float or bool tensor a VK_GSCALAR
 * (gscalar_item); complex tensors break the graph (BR_SCALAR_OUTPUT). */
Var *symb_item(Capture *c, Var *t);
/* An int computed by graph value `value` at run time: a VK_SYMINT var over a new unbacked
 * symbol u<N> bound to it. NULL with the failure recorded. */
Var *symb_unbacked_value(Capture *c, int32_t value);
/* A bool computed by graph value `value`: a new unbacked symbol u<N> in [0, 1] naming it
 * (torch's create_unbacked_symbool; the VK_GSCALAR holds the value). NULL with an exception. */
SymNode *symb_unbacked_bool(Capture *c, int32_t value);
/* "<line>  # file:line in fn" of the instruction being captured (new str, never NULL
 * unless out of memory). */
PyObject *symb_where_text(Capture *c);

/* args.c: a graph node that computes a Python value, not a tensor (size arithmetic, a
 * slice, an assertion): op calling target over pool args [first, first + n). -1. */
int32_t cap_scalar_node(Capture *c, OpId op, PyObject *target, int32_t first, int32_t n);

/* checks.c: user hints and run-time assertions */
/* rel (over unbacked symbols, undecidable by the ranges) must hold: narrow the ranges by
 * it and assert it in the graph at run time (logged as runtime_assert). 0 or -1. */
int symb_runtime_assert(Capture *c, SymNode *rel);
/* shapejit.check / constrain_range, torch._check / _check_is_size: handled (*handled = 1)
 * as hints on symbolic ints; NULL with *handled = 0 for any other function. */
Var *check_call(Capture *c, PyObject *fn, Var **args, int32_t nargs, PyObject *kwnames, int *handled);
/* Truth of rel at the hints, guarded (nothing guarded when the ranges decide). */
int symb_decide(Capture *c, SymNode *rel, int *truth);
/* The int value of e, guarded equal to it (specialisation). why: what needs the value,
 * logged (dynamic channel) with the symbol and the line whenever e was not constant. */
int symb_specialize(Capture *c, SymNode *e, int64_t *value, const char *why);
/* A graph value computing e at run time (e not constant). -1 on failure. */
int32_t symb_materialize(Capture *c, SymNode *e);
/* Integer arithmetic / comparison on vars holding ints (VK_SYMINT or int constants, at
 * least one symbolic): a var, or NULL with *handled = 0 when not applicable. */
Var *symb_binary(Capture *c, int nb, Var *a, Var *b, int *handled);
Var *symb_compare(Capture *c, int cmp, Var *a, Var *b, int *handled);
/* The node of an int var (constant or symbolic), or NULL when v is not an int. */
SymNode *symb_node_of(Capture *c, Var *v);
/* At the end of a successful capture: the shape guards, marks violations. 0 or -1; a
 * violation of mark_dynamic sets *violation (a new str: the error text). */
int symb_finish(Capture *c, PyObject **violation);
extern PyObject *SjConstraintViolation;   /* shapejit._C.ConstraintViolationError */
/* PGO (TORCH_COMPILE_JOB_ID + TORCH_DYNAMO_AUTOMATIC_DYNAMIC_{LOCAL,REMOTE}_PGO=1,
 * shapejit/pgo.py): a code's first compile starts from the saved frame state; each compile
 * saves it. The closure (a tuple of cells or NULL) is part of the code's identity there. */
void symb_pgo_load(CodeState *st, PyCodeObject *co, PyObject *closure);
void symb_pgo_save(CodeState *st, PyCodeObject *co, PyObject *closure);
int symb_init_module(PyObject *m);
int checks_init_module(PyObject *m);

/* gscalar.c: graph scalars (VK_GSCALAR) */
/* The item node of one-element torch tensor t (float or bool dtype) and its graph scalar. */
Var *gscalar_item(Capture *c, Var *t);
/* Python operators with a graph scalar among the operands (no tensor): a new graph scalar,
 * an unbacked VK_SYMINT for an int result, or NULL with the failure recorded. */
Var *gscalar_binary(Capture *c, int nb, Var *a, Var *b);
Var *gscalar_compare(Capture *c, int cmp, Var *a, Var *b);
Var *gscalar_unary(Capture *c, int opcode, Var *a);   /* UNARY_* opcodes, UNARY_NOT included */
/* A call of fn with a graph scalar among args (float(), abs(), math.sqrt(), ...): *handled
 * = 0 when no argument is a graph scalar; else the result or NULL with the failure set. */
Var *gscalar_call(Capture *c, PyObject *fn, Var **args, int32_t nargs, PyObject *kwnames, int *handled);
/* The truth of a graph scalar for a branch: computed from one dynamic input, the branch
 * is guarded as a relation on it (SCALAR_RELATION); from several, they are specialised;
 * from data, fails with BR_DATA_DEPENDENT naming it. 0, or -1 with the failure set. */
int gscalar_truth(Capture *c, Var *v, int *truth);
/* A dynamic float input of the frame (source src, live value obj) as graph input value. */
Var *gscalar_input(Capture *c, int32_t value, PyObject *obj, int32_t src, PyObject *name, int type);
/* The Python value of a graph scalar computed from dynamic float inputs only, its inputs
 * guarded equal to their values (specialisation; why is logged): borrowed. NULL without an
 * exception when the value is data (an item()). */
PyObject *gscalar_pin(Capture *c, Var *v, const char *why);
/* args with every graph scalar among them pinned (gscalar_pin) into out (n slots): 1 when
 * all of them are constants then, 0 (nothing pinned) when some is not, -1 on failure. */
int gscalar_pin_args(Capture *c, Var **args, int32_t n, Var **out, const char *why);
/* Every graph scalar with a known value among args replaced by that value, pinned
 * (gscalar_pin): the count, or -1 on failure. */
int gscalar_pin_hinted(Capture *c, Var **args, int32_t n, const char *why);
/* A numpy-scalar graph scalar as numpy itself treats it inside its functions: a 0-d value
 * of its dtype (NEP 50: a numpy scalar promotes as a 0-d array does). A new VK_TENSOR var
 * (np_scalar) over the same graph value; v itself when v is anything else; NULL with the
 * failure recorded. */
Var *gscalar_as_np_value(Capture *c, Var *v);
/* A Python value of the graph scalar's type for the shape rules (their dtype logic); they
 * must not read the number (BoundArg.data). Borrowed, or NULL with the failure set. */
PyObject *gscalar_standin(Capture *c, Var *v);

/* inference_mode.c: torch.inference_mode blocks and decorators (VK_GRADMODE vars with
 * u.grad.inference set) */
/* torch.inference_mode(mode=True) called in the frame. */
Var *infmode_new(Capture *c, Var **args, int32_t nargs, PyObject *kwnames);
/* Fill v (VK_GRADMODE) from a live inference_mode object read at src: 0 or -1. */
int infmode_wrap(Capture *c, Var *v, PyObject *obj, int32_t src);
Var *infmode_attr(Capture *c, Var *o, PyObject *name);
/* BEFORE_WITH on mgr: the enter node, noted in ex (its VK_EXIT). 0 or -1. */
int infmode_enter(Capture *c, Var *mgr, Var *ex);
/* The normal exit of the block ex was pushed for. 0 or -1. */
int infmode_exit(Capture *c, Var *ex);

/* autograd_fn.c: torch.autograd.Function.apply */
/* 1 when fn (borrowed) is the function under Function.apply. */
int autograd_fn_is_apply(PyObject *fn);
/* Its call, args[0] the Function subclass: forward inlined with grad mode off, else one
 * graph node running cls.apply. */
Var *autograd_fn_apply(Capture *c, Var **args, int32_t nargs, PyObject *kwnames);

/* library_ops.c: torch.ops.<namespace>.<name> operators */
/* 1 when fn (borrowed) is an operator packet or overload of torch.library. */
int library_op_is(PyObject *fn);
/* Its call: one graph node calling the operator, its results shaped by a run on meta
 * tensors; a break when the operator writes to or aliases an argument. */
Var *library_op_call(Capture *c, PyObject *fn, Var **args, int32_t nargs, PyObject *kwnames);

/* conv_depthwise.c: F.conv1d of a depthwise convolution with a short kernel, captured as a
 * sum of shifted products (*handled 1), else NULL with *handled 0 and nothing recorded. */
Var *conv_depthwise_as_sum(Capture *c, Var **args, int32_t nargs, PyObject *kwnames, int *handled);

/* polyfills.c: torch functions replaced by a Python version (shapejit/_polyfills.py) */
/* The polyfill (borrowed) to inline for a call of fn, or NULL. */
PyObject *polyfill_for(PyObject *fn);
/* 1 when fn is _C._pointwise_call. */
int polyfill_is_pointwise_call(PyObject *fn);
/* _C._pointwise_call(fn, *args): fn inlined; a failure unless it recorded only pointwise
 * ops. */
Var *polyfill_pointwise_call(Capture *c, Var **args, int32_t nargs, PyObject *kwnames);
/* 1 when fn is _C._static_int; its call: None for a symbolic size, else its argument. */
int polyfill_is_static_int(PyObject *fn);
Var *polyfill_static_int(Capture *c, Var **args, int32_t nargs, PyObject *kwnames);
int polyfills_init_module(PyObject *m);

/* standins.c: meta tensors standing in for graph values */
/* New reference: a meta tensor shaped like m, or NULL with an exception. */
PyObject *cap_meta_standin(const TensorMeta *m);
/* The meta of a tensor a stand-in run returned: 0, 1 when it is not a tensor a TensorMeta
 * describes, -1 with an exception. */
int cap_meta_of_standin(PyObject *t, TensorMeta *m);
/* fn(*args, **kw) run in the captured program's grad mode: new reference, or NULL with the
 * exception fn raised. */
PyObject *cap_standin_call(Capture *c, PyObject *fn, PyObject *const *args, Py_ssize_t npos, PyObject *kwnames);
/* One graph node of op calling target (kept alive by the caller) with args (the last
 * len(kwnames) by keyword), run as is (an eager step), its nout results shaped as outs: the
 * result var, one tensor (seq VK_TENSOR) or a tuple or list of them (VK_TUPLE / VK_LIST).
 * NULL with the failure recorded. */
Var *cap_opaque_node(Capture *c, OpId op, PyObject *target, Var **args, int32_t nargs, PyObject *kwnames,
                     const TensorMeta *outs, int32_t nout, VarKind seq);

/* rnn.c: nn.LSTM / nn.GRU / nn.RNN modules */
/* 1 when fn (borrowed) is the forward of one of them. */
int rnn_is_forward(PyObject *fn);
/* The call of module m's forward fwd (args without self): the library call forward makes
 * (torch.lstm, ...), the module's weights as graph inputs and its settings as guarded
 * constants. *handled = 0 (nothing recorded) when the input is not one it models (forward
 * is then inlined). */
Var *rnn_module_call(Capture *c, Var *m, Var *fwd, Var **args, int32_t nargs, PyObject *kwnames, int *handled);

/* disabled.c: functions wrapped by torch.compiler.disable / torch._dynamo.disable */
/* 1 when fn (borrowed) is such a wrapper. */
int disabled_is_wrapper(PyObject *fn);
/* Their call: the function it wraps is marked never compiled (with what it calls, when
 * the wrapper is recursive) and capture fails with BR_DISABLED. Always NULL. */
Var *disabled_call(Capture *c, PyObject *fn);
/* torch.compiler.disable / torch._dynamo.disable themselves (borrowed fn): 1 or 0. */
int disabled_is_factory(PyObject *fn);
/* Their call inside a capture: the wrapper, made now from the function's live value. */
Var *disabled_make(Capture *c, PyObject *factory, Var **args, int32_t nargs, PyObject *kwnames);

/* calls.c */
Var *call_var(Capture *c, Var *fn, Var **args, int32_t nargs, PyObject *kwnames);
Var *call_function_ex(Capture *c, Var *fn, Var *args, Var *kwargs);

/* attrs.c */
/* x.numel(): a constant or a symbolic int var. */
Var *tensor_numel_var(Capture *c, const TensorMeta *m);
Var *attr_load(Capture *c, Var *obj, PyObject *name);
/* o.name where the class of o (named tp_name) holds prop, a property (borrowed): its getter
 * inlined on o when it is a Python function, else a BR_UNSUPPORTED_VALUE failure (NULL). */
Var *attr_property(Capture *c, Var *o, PyObject *prop, PyObject *name, const char *tp_name);
/* obj.name = val. generic: through object.__setattr__(obj, name, val). 0, or -1 with the
 * failure recorded (a write the result plan cannot replay is a BR_SIDE_EFFECT break). */
int attr_store(Capture *c, Var *obj, PyObject *name, Var *val);
int attr_store_generic(Capture *c, Var *obj, PyObject *name, Var *val);
/* o[key] = val with a str key on a transformers ModelOutput: from outside, recorded as a
 * write of attribute key replayed through the object's __setitem__; made in the frame (a
 * record), its field set when the dict order stays the field order (*handled = 1); for
 * any other object *handled = 0 and nothing is recorded. 0, or -1 with the failure
 * recorded. */
int attr_store_item(Capture *c, Var *obj, Var *key, Var *val, int *handled);
/* At the end of a capture that writes attributes of outside objects: guards that the
 * user objects it read alias one another as they did at capture (a write through one
 * is seen through the others). 0, or -1 with the failure recorded. */
int attr_check_writes(Capture *c);
/* 1 when the capture wrote obj.name (obj borrowed). */
int attr_written(Capture *c, PyObject *obj, PyObject *name);
/* hasattr(o, name) gave has for o, a user object or module read through a source: a
 * HASATTR guard keeps it so for the entry. 0, or -1 with the failure recorded. */
int attr_guard_hasattr(Capture *c, Var *o, PyObject *name, int has);
/* o.name was found on o's class (descr, borrowed): a CLASS_ATTR guard keeps it the class's,
 * and with shadow set, not shadowed by an instance attribute. 0, or -1 with the failure
 * recorded. No guard for o without a source. */
int attr_guard_class(Capture *c, Var *o, PyObject *name, PyObject *descr, int shadow);
/* 1 when t is a transformers config class whose __getattribute__ and __setattr__ map the
 * names of attribute_map, then act as object's (after @strict's validators). */
int attr_is_config_type(PyTypeObject *t);
/* The validators huggingface_hub's @strict runs on a new value of config field name of
 * class t: 0 when there are none or val is a constant they accept, else -1 with the
 * failure set. */
int attr_config_validate(Capture *c, PyTypeObject *t, PyObject *name, Var *val);
/* 1 when o is a Python constant the capture folds (None, numbers, str, bytes, slices,
 * ranges, code), or a tuple of them. */
int wrap_is_constant(PyObject *o);
/* 1 when the capture wrote an attribute of an outside object (the plan replays it). */
int attr_has_writes(const Capture *c);
/* LOAD_METHOD: *meth = the unbound function (or NULL), *self_or_attr per 3.11's rules */
int attr_load_method(Capture *c, Var *obj, PyObject *name, Var **meth, Var **self_or_attr);
/* For a module var made during capture from a sourced container (u.mod.kids): the source
 * of the entry of its _modules named key (or, key NULL, holding child; borrowed), else -1.
 * Never fails. */
int32_t module_kid_source(const Var *m, PyObject *key, PyObject *child);

/* ops.c: bytecode operators and recorded library calls */
Var *op_binary(Capture *c, int nb_op, Var *a, Var *b);
/* The BINARY_OP oparg of operator.<name> ("add", "imul", ...), or -1. */
int op_nb_index(const char *name);
Var *op_compare(Capture *c, int cmp, Var *a, Var *b);
Var *op_unary(Capture *c, int opcode, Var *a);
Var *op_subscr(Capture *c, Var *obj, Var *key);
int op_store_subscr(Capture *c, Var *obj, Var *key, Var *val);
/* lst[slice] = val (any iterable var), or del lst[slice] when val is NULL, on list var lst
 * (already noted as mutated when it comes from outside). 0, or -1 with the failure set. */
int op_list_slice_write(Capture *c, Var *list, PyObject *slice, Var *val);
int op_truth(Capture *c, Var *v, int *truth);   /* 0 ok; -1 failure (data-dependent etc.) */
Var *op_contains(Capture *c, Var *item, Var *container);
/* v as argument slot `slot` of the graph's pool (reserved by graph_pool): a value, a
 * constant or a list of them. 0, or -1 with the failure recorded. */
int cap_to_arg(Capture *c, Var *v, int32_t slot);
/* v as a shape rule sees it (args.c): lists and tuples of constants become one constant,
 * those holding tensors a BA_LIST. With specialize (the reason, logged) symbolic sizes and
 * ints are pinned to their hints (guarded), for a rule that handles static shapes only.
 * 0, or -1 with the failure recorded. */
int cap_to_bound(Capture *c, Var *v, BoundArg *out, const char *specialize);
/* The tensor vars of node outputs v .. v + nout - 1 with their metas: an array in the
 * capture's arena (nout slots), or NULL on failure. */
Var **cap_node_outputs(Capture *c, int32_t v, const TensorMeta *outs, int nout);
/* Record a call of a callables.def row. args: receiver first for methods. */
Var *op_record(Capture *c, int row, Var **args, int32_t nargs, PyObject *kwnames);
/* The same through the first row of a callable's path ("torch.permute"). */
Var *op_record_path(Capture *c, const char *path, Var **args, int32_t nargs);
int op_iterate(Capture *c, Var *v, Var ***items, int32_t *n);   /* materialise an iterable */
Var *op_len(Capture *c, Var *v);

/* np.add.reduce and the other methods of numpy ufuncs (capture/ufuncs.c) */
Var *ufunc_method_call(Capture *c, PyObject *fn, Var **args, int32_t nargs, PyObject *kwnames, int *handled);
/* np.meshgrid, np.mgrid[...], np.ogrid[...], np.indices (capture/npgrid.c) */
Var *npgrid_call(Capture *c, PyObject *fn, Var **args, int32_t nargs, PyObject *kwnames, int *handled);

/* copies.c: copy.deepcopy(x) and copy.copy(x) of modelled values: *handled = 0 for other
 * callables, or when x holds what copy.py's code must decide (it is inlined then). */
Var *copies_call(Capture *c, PyObject *fn, Var **args, int32_t nargs, PyObject *kwnames, int *handled);

/* einsum.c: torch.einsum(eq, a, b) as permutes, a matmul and a reshape: *handled = 0 for
 * the equations and operands it leaves to the einsum node. */
Var *einsum_as_matmul(Capture *c, Var **args, int32_t nargs, PyObject *kwnames, int *handled);

/* folds.c: library queries answered by a constant (folds.def) */
/* A call of a row's callable: *handled = 1 with the constant (guarded where the row says)
 * or NULL with the failure set; *handled = 0 for any other callable, or for graph values
 * among the arguments. */
Var *folds_call(Capture *c, PyObject *fn, Var **args, int32_t nargs, PyObject *kwnames, int *handled);

/* builtins.c */
/* Call fn now with the Python values of args (constants, live objects); a new reference,
 * or NULL with the failure recorded (BR_USER_EXCEPTION: user code raised). */
PyObject *cap_call_live(Capture *c, PyObject *fn, Var **args, int32_t nargs, PyObject *kwnames);
/* The same, as a constant var. */
Var *cap_fold_call(Capture *c, PyObject *fn, Var **args, int32_t nargs, PyObject *kwnames);
Var *builtin_call(Capture *c, PyObject *fn, Var **args, int32_t nargs, PyObject *kwnames, int *handled);

/* collections.c: OrderedDict, defaultdict, Counter (dict vars with a subtype), deque (a
 * list var with a subtype), namedtuple methods, dict.fromkeys */
/* 1 when obj is exactly an OrderedDict, defaultdict, Counter or deque. */
int collections_is_container(PyObject *obj);
/* A container of those from outside, wrapped as dict or list var v at src: v's subtype,
 * and a defaultdict's factory or a deque's maxlen read and guarded. 0 or -1. */
int collections_wrap_extra(Capture *c, Var *v, PyObject *obj, int32_t src);
/* The collections type of a var (its subtype) when it is one of them, else NULL. */
PyTypeObject *collections_type_of(const Var *v);
/* cls(*args) for cls one of the four types: *handled = 0 for any other callable. */
Var *collections_construct(Capture *c, PyObject *cls, Var **args, int32_t nargs, PyObject *kwnames, int *handled);
/* Calls of Python functions this file answers instead of inlining them (a namedtuple's
 * _make, _replace and _asdict, collections.namedtuple itself): *handled = 0 otherwise. */
Var *collections_call_function(Capture *c, PyObject *fn, Var **args, int32_t nargs, PyObject *kwnames, int *handled);
/* A call of a C callable this file answers (dict.fromkeys and the subclasses'). */
Var *collections_call_builtin(Capture *c, PyObject *fn, Var **args, int32_t nargs, PyObject *kwnames, int *handled);
/* o.name for a collection var or a namedtuple var: *handled = 0 when the caller's own
 * reading applies (fields, the methods of dict and list that are modelled). */
Var *collections_attr(Capture *c, Var *o, PyObject *name, int *handled);
/* self.name(*args) for a collection var: *handled = 0 when container_call applies. */
Var *collections_method(Capture *c, Var *self, const char *name, Var **args, int32_t nargs, PyObject *kwnames,
                        int *handled);
/* d[key] of a collection dict var without the key: defaultdict's factory, Counter's 0;
 * *handled = 0 for the others (KeyError). */
Var *collections_missing(Capture *c, Var *d, Var *key, int *handled);
/* A binary operator or comparison with a collection var among the operands, or a
 * comparison of two dict vars (nb >= 0: a BINARY_OP oparg; else cmp = -1 - nb is a
 * COMPARE_OP oparg): *handled = 0 otherwise. */
Var *collections_operator(Capture *c, int nb, Var *a, Var *b, int *handled);
/* iters.c: iterators (materialised or lazy) and the builtins that consume them */
/* iter(v) as GET_ITER does it: v itself when it is an iterator. NULL with the failure set. */
Var *iter_get(Capture *c, Var *v);
/* next(it): 1 with *out set, 0 when exhausted, -1 with the failure set. */
int iter_next(Capture *c, Var *it, Var **out);
/* The rest of iterator it, read now (it is left exhausted): 0, or -1. */
int iter_drain(Capture *c, Var *it, Var ***items, int32_t *n);
/* Whether it computes its items when read (map, filter, zip over such, a live list's
 * iterator): a consumer that changes state between items must read it one at a time. */
int iter_is_lazy(const Var *it);
/* The rest of iterator it, each item handed to add(c, ctx, item) before the next is read
 * (as list.extend reads an iterator): 0, or -1 with the failure set. */
int iter_each(Capture *c, Var *it, int (*add)(Capture *c, void *ctx, Var *item), void *ctx);
/* How to rebuild iterator it as the real iterator at its state: *fn (borrowed, kept alive)
 * called with *args (arena; the last len(*kwnames) are keyword values; *kwnames borrowed
 * or NULL), then, when *state is set, given it by __setstate__. 0, or -1 with the failure
 * set. */
int iter_recipe(Capture *c, Var *it, PyObject **fn, Var ***args, int32_t *nargs, PyObject **kwnames, Var **state);
/* map, filter, zip, enumerate, iter, sorted, min, max, functools.reduce and itertools:
 * *handled = 0 for other functions (or argument forms left to builtins.c). */
Var *iters_call(Capture *c, PyObject *fn, Var **args, int32_t nargs, PyObject *kwnames, int *handled);
/* list.sort(key=..., reverse=...) on list var l, in place. */
Var *iters_list_sort(Capture *c, Var *l, Var **args, int32_t nargs, PyObject *kwnames);

/* objects.c: instances of user classes and namedtuples made during capture */
/* Construct cls(*args): *handled = 0 when cls is not a class capture can model. */
Var *objects_construct(Capture *c, PyObject *cls, Var **args, int32_t nargs, PyObject *kwnames, int *handled);
Var *objects_attr_load(Capture *c, Var *o, PyObject *name);
int objects_attr_store(Capture *c, Var *o, PyObject *name, Var *val);
/* delattr(o, name) on user object o made in the frame: 0, or -1 with the failure set. */
int objects_attr_delete(Capture *c, Var *o, PyObject *name);
/* The field names of a namedtuple or structseq type (new tuple of str), or NULL. */
PyObject *objects_fields(PyTypeObject *t);
/* Records (ModelOutput): the values that are not None, in field order (a new VK_TUPLE). */
Var *objects_record_tuple(Capture *c, Var *o);
Var *objects_record_call(Capture *c, Var *o, const char *name, Var **args, int32_t nargs, int *handled);
Var *objects_super(Capture *c, Var **args, int32_t nargs);
/* What a cell var holds (a cell from outside: its contents, wrapped with the cell's
 * source); v itself when it is not a cell; NULL when the cell is empty. */
Var *objects_cell_contents(Capture *c, Var *v);
Var *objects_super_attr(Capture *c, Var *s, PyObject *name);
/* `a is b` where a or b is a user object (made in the frame, or from outside: its identity
 * then guarded): 0 with *same set, 1 when not such a pair, -1 with the failure set. */
int objects_is(Capture *c, Var *a, Var *b, int *same);
/* a == b / a != b (cmp Py_EQ / Py_NE) with a user object among them: its class's __eq__ /
 * __ne__ inlined, else identity. *handled = 0 when not such a pair. */
Var *objects_compare(Capture *c, int cmp, Var *a, Var *b, int *handled);
/* id(v) of an object from outside (guarded by identity); fails for a made object. */
Var *objects_id(Capture *c, Var *v);
/* hash(v): constants folded, a class's __hash__ inlined, object's hash of an outside
 * object folded under an identity guard. */
Var *objects_hash(Capture *c, Var *v);

#endif
