/* The graph IR: what capture records and backends consume.
 *
 * A graph is a list of nodes in execution order. Each node calls one Python callable (its
 * target: the library function eager mode would have called) with arguments that are
 * graph values, constants, or lists/tuples of those, and defines nout values. Inputs are
 * nodes too (op OP_INPUT), each naming its source (L['x']).
 *
 * Every node also carries its arguments bound to a parameter list, which is what backends
 * read (the raw args/kwargs are what the eager replay, graph_exec_node, calls target with):
 *   - a node recorded through a callables.def row has row >= 0 and one bound slot per
 *     parameter of that row's schema, in the schema's order (graph_node_params names them).
 *     A slot is a copy of the raw Arg the parameter was bound from (so it refers to the
 *     same values, constants and list items); a *varargs parameter that gathered
 *     positional arguments is an ARG_TUPLE over their pool range; a fixed parameter
 *     (@name=value) is an ARG_CONST of its value; a parameter the call did not pass is
 *     ARG_ABSENT. numpy's out=array (NODE_OUT) is the slot of the schema's `out`
 *     parameter, when the schema has one.
 *   - every other node (inputs, size arithmetic, graph scalars, autograd Functions, rnn
 *     modules, ...) has row -1 and is called with positional arguments only: its bound
 *     slots are those positional arguments (bound = args, nbound = nargs), whose meaning
 *     its op (ops.def) fixes. Inputs have bound -1, nbound 0.
 *
 * Memory: plain growable arrays, no refcounts, except the per-graph constants table (a
 * Python list) which owns every Python object the graph refers to (STYLE.md).
 *
 * Serialised form (serial.h): a graph is written as versioned text and read back with no
 * torch or numpy object alive. A constant that is a library object (dtype, device, tensor,
 * callable) is read back as a GraphRef, plain data naming the object plus how the listing
 * printed it (its repr, or a callable's name: graph_const_by_name), so the graph prints,
 * compares and serialises again as the original did;
 * graph_link (or the graph's first call) replaces each GraphRef by the object, importing
 * its library then. */
#ifndef SJ_IR_H
#define SJ_IR_H

#include <Python.h>
#include <stdint.h>
#include "../vocab/bind.h"
#include "../vocab/meta.h"
#include "../vocab/ops.h"

#define OP_INPUT ((uint16_t)OP_COUNT)   /* a graph input; not a row of ops.def */

/* ARG_ABSENT only in a node's bound arguments: a parameter of the schema the call did not
 * pass (the library's default applies). */
typedef enum { ARG_VALUE = 0, ARG_CONST, ARG_LIST, ARG_TUPLE, ARG_ABSENT } ArgKind;

typedef struct {
    uint8_t kind;      /* ArgKind */
    int32_t a;         /* VALUE: value id; CONST: constants index; LIST/TUPLE: first pool index */
    int32_t n;         /* LIST/TUPLE: item count (items are consecutive in the pool) */
} Arg;

enum {
    NODE_INPLACE = 1,   /* mutates its first argument (value a of args[0]) */
    NODE_OUT = 2,       /* numpy's out=array: writes its result into that array and returns
                           it (the array is a keyword argument; the rule saw the call
                           without it) */
};

typedef struct {
    uint16_t op;          /* OpId, or OP_INPUT */
    uint8_t flags;
    int32_t target;       /* constants index of the callable; -1 for inputs */
    int32_t args, nargs;  /* positional arguments: pool range */
    int32_t kwargs, nkw;  /* keyword argument values: pool range */
    int32_t kwnames;      /* constants index of a tuple of str, or -1 */
    int32_t first_value;  /* values [first_value, first_value + nout) */
    int32_t nout;
    int32_t where;        /* constants index of (filename, lineno, funcname, line), or -1 */
    int32_t source;       /* inputs: constants index of the source string; else -1 */
    int16_t row;          /* the callables.def row the call was recorded through, or -1 */
    int32_t bound;        /* the arguments bound to that row's schema, one slot per parameter
                             in the schema's order: pool range [bound, bound + nbound); -1
                             when the node was not bound */
    int32_t nbound;
} Node;

typedef struct {
    TensorMeta meta;
    int32_t node;         /* defining node */
    int32_t index;        /* which output of that node (multi-output nodes) */
} Value;

typedef struct Graph {
    Node *nodes;
    int32_t nnodes, cap_nodes;
    Value *values;
    int32_t nvalues, cap_values;
    Arg *pool;
    int32_t npool, cap_pool;
    int32_t *inputs;
    int32_t ninputs, cap_inputs;    /* value ids of inputs, in call order */
    int32_t *outputs;
    int32_t noutputs, cap_outputs;  /* value ids returned, in order */
    PyObject *consts;   /* strong: a list owning every object the graph refers to */
    int has_mutation;   /* some node writes into a graph input, a view of one or a constant,
                           or draws from the default random generator */
    int32_t grad_query; /* constants index of torch.is_grad_enabled when the graph switches
                           grad mode (restored if a run fails midway), else -1 */
    struct SymEnv *env; /* owned or NULL: the shape environment whose nodes the values'
                           symbolic sizes point to */
} Graph;

Graph *graph_new(void);            /* NULL with MemoryError set */
void graph_free(Graph *g);

/* Append a constant; returns its index or -1 (exception set). Does not steal. */
int32_t graph_const(Graph *g, PyObject *obj);
/* Reserve n consecutive pool slots; returns the first or -1 (exception set). */
int32_t graph_pool(Graph *g, int32_t n);
/* New input value with the given source string (borrowed); returns the value id or -1. */
int32_t graph_add_input(Graph *g, const TensorMeta *meta, PyObject *source);
/* New op node. args/kwargs are pool ranges already filled. metas: nout output metas.
 * target and kwnames borrowed (kwnames may be NULL), where borrowed (may be NULL).
 * Returns the first value id or -1 (exception set). */
int32_t graph_add_node(Graph *g, OpId op, int flags, PyObject *target, int32_t args, int32_t nargs, int32_t kwargs,
                       int32_t nkw, PyObject *kwnames, const TensorMeta *metas, int32_t nout, PyObject *where);
int graph_add_output(Graph *g, int32_t value);
/* Give node ni (not an input) the arguments bound to callables row `row`: the pool range
 * [bound, bound + nbound), filled by the caller (the rule at the top of this file). */
void graph_node_bind(Graph *g, int32_t ni, int row, int32_t bound, int32_t nbound);
/* Calls fn(ctx, ni, v) for each value v node ni reads when it runs (its raw arguments,
 * list items included; a value read twice is reported twice). */
void graph_node_reads(const Graph *g, int32_t ni, void (*fn)(void *ctx, int32_t ni, int32_t v), void *ctx);
/* The parameters node ni's bound slots follow (the schema of its row, static storage):
 * returns their number, or 0 for a node of row -1 (its slots are positional). */
int graph_node_params(const Graph *g, int32_t ni, const SchemaParam **params);
/* The bound slot of node ni whose parameter has the canonical name `name`; NULL when the
 * call did not pass it, passed None, the schema has no such parameter, or the node has
 * row -1. Several parameters may share a canonical name: the first one passed wins. */
const Arg *graph_node_arg(const Graph *g, int32_t ni, const char *name);
/* 1 when value vid is a graph input or may share its memory (a view of one, an input
 * written in place, a constant tensor or a view of one): writing into it changes what the
 * caller sees. 0 when it is memory the graph allocated. */
int graph_value_may_alias_input(const Graph *g, int32_t vid);

/* Run the graph with the original library calls. inputs: borrowed array of ninputs.
 * Returns a new tuple of noutputs values, or NULL with the exception set. When mismatch is
 * not NULL, each node's outputs are checked against their predicted metadata and the first
 * disagreement is described in *mismatch (a new str; the run itself completes). */
PyObject *graph_run(Graph *g, PyObject *const *inputs, PyObject **mismatch);
/* The same with the nodes run by exec(ctx, g, vals, mismatch) instead of one by one:
 * vals[] holds the inputs on entry (strong references), exec fills the value of every
 * node it runs (a strong reference each; slots it leaves NULL read as None) and returns 0,
 * or -1 with an exception. A backend's steps (backend/runtime.c). */
typedef int (*GraphExec)(void *ctx, struct Graph *g, PyObject **vals, PyObject **mismatch);
PyObject *graph_run_with(Graph *g, PyObject *const *inputs, PyObject **mismatch, GraphExec exec, void *ctx);
/* Run node ni the original way, storing its outputs in vals (strong) and, when mismatch is
 * given, checking them against their predicted metadata. 0 or -1 with an exception. */
int graph_exec_node(Graph *g, int32_t ni, PyObject **vals, PyObject **mismatch);

/* Readable listing (the graph_code log): new str. */
PyObject *graph_format(Graph *g, const char *name);
/* The listing with each call as the backends read it: the callables.def path of the node's
 * row and its bound arguments by canonical parameter name, those not passed left out
 * ("torch.nn.functional.linear(input=v0, weight=v1, bias=v2)"), the op named in the
 * comment; a node of row -1 keeps its target and positional arguments. New str. */
PyObject *graph_format_bound(Graph *g, const char *name);
/* How graph_format names a node's target: "module.qualname", an operator of torch.library
 * "torch.ops.<namespace>.<name>.<overload>" (new str). */
PyObject *graph_target_name(PyObject *target);
/* 1 when graph_format prints constant c by its name (graph_target_name), as it prints a
 * target, rather than by its repr: a callable that is not a class. A function's repr holds
 * its address, which would make the listing (and a serialised graph) differ from one
 * process to the next. */
int graph_const_by_name(PyObject *c);
/* (namespace, name, overload) of an operator overload of torch.library (torch.ops.aten.add.
 * Tensor), a new tuple; NULL, with no exception, for any other object. */
PyObject *graph_torch_op_data(PyObject *t);

/* ---- Python face (graph_py.c) ---- */
extern PyTypeObject SjGraph_Type;
extern PyTypeObject SjNode_Type;

typedef struct {
    PyObject_HEAD Graph *g;           /* owned */
    PyObject *name;     /* strong: str */
    int verify_next;    /* verify the next run against predicted metadata */
    int verified;       /* a run was verified */
    PyObject *mismatch; /* strong str or NULL: what the verified run found wrong */
    int unlinked;       /* read from text (graph/serial.h) and not linked yet: its library
                           constants are GraphRef objects until the first call or link() */
} SjGraphObject;

/* New reference: wraps g (steals it). */
PyObject *graph_py_wrap(Graph *g, PyObject *name);
/* Makes self's graph ready to run: a graph read from text resolves its library constants
 * (once; the first call does it too), so a backend may take a Graph object as it comes.
 * 0, or -1 with an exception (ImportError when a library or callable does not resolve). */
int graph_py_link_once(SjGraphObject *self);
int graph_py_init_types(PyObject *module);

#endif
