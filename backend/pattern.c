/* Written-out activations that oneDNN has as one eltwise op: a run of pointwise nodes
 * after a matmul that computes, say, GPT-2's gelu_new
 *
 *     0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
 *
 * (eight nodes reading x three times) folds into the matmul as one gelu_tanh post-op
 * instead of a generated kernel over the product (step_matmul.c asks).
 *
 * The ACTIVATIONS table below is the single source: one row per recognised formula, as a
 * term over x, numbers and the ops in TERM_OPS. Matching is structural: each op of the
 * term must be a node of that op (add and mul in either operand order, add's alpha 1), a
 * number must equal the node's Python number once both are rounded to float32 (the type
 * the nodes compute in), and every node of the run must be used by the term exactly as
 * written (no extra nodes, no value of the run read outside it, x read by nothing else).
 *
 * Memory: nothing here holds a Python reference. */
#include <stdlib.h>
#include <string.h>

#include "lower_int.h"
#include "dnnl_api.h"

/* The ops a term may use: name, OpId, operands, whether operand order is free. */
static const struct {
    const char *name;
    OpId op;
    int nin;
    int commutes;
} TERM_OPS[] = {
    {"add", OP_ADD, 2, 1},
    {"mul", OP_MUL, 2, 1},
    {"pow", OP_POW, 2, 0},
    {"tanh", OP_TANH, 1, 0},
};

/* Formulas and the post-op each is. Terms: x | number | op(term[, term]). */
static const struct {
    MmPostKind kind;
    const char *term;
} ACTIVATIONS[] = {
    /* transformers' NewGELUActivation (gelu_new: GPT-2, GPT-Neo, ...) */
    {MMPO_GELU_TANH, "mul(mul(0.5,x),add(1,tanh(mul(0.7978845608028654,add(x,mul(0.044715,pow(x,3)))))))"},
};

#define PAT_MAX_NODES 16   /* nodes of one formula */

typedef struct {
    Graph *g;
    int32_t x;                         /* the value the formula is of */
    int32_t lo, hi;                    /* the node range the formula may use */
    int32_t nodes[PAT_MAX_NODES];      /* matched so far (term order) */
    int n;
} Match;

/* The end of the term starting at t (balanced parentheses), or NULL. */
static const char *skip_term(const char *t)
{
    int depth = 0;
    for (; *t; t++) {
        if (*t == '(')
            depth++;
        else if (*t == ')') {
            if (--depth < 0)
                return t;
        } else if (*t == ',' && depth == 0)
            return t;
    }
    return depth == 0 ? t : NULL;
}

static int taken(const Match *m, int32_t ni)
{
    for (int i = 0; i < m->n; i++)
        if (m->nodes[i] == ni)
            return 1;
    return 0;
}

/* Matches graph argument x against the term at t: the end of the term, or NULL. */
static const char *match_arg(Match *m, const Arg *x, const char *t)
{
    if (!x)
        return NULL;
    if (*t == 'x' && (t[1] == ',' || t[1] == ')' || t[1] == 0))
        return x->kind == ARG_VALUE && x->a == m->x ? t + 1 : NULL;
    if ((*t >= '0' && *t <= '9') || *t == '-' || *t == '.') {
        char *end;
        double want = strtod(t, &end);
        if (x->kind != ARG_CONST)
            return NULL;
        PyObject *v = PyList_GET_ITEM(m->g->consts, x->a);   /* borrowed */
        if (!PyFloat_Check(v) && !PyLong_Check(v))
            return NULL;
        double got = PyFloat_AsDouble(v);
        if (got == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            return NULL;
        }
        return (float)got == (float)want ? end : NULL;
    }
    size_t len = strcspn(t, "(");
    int k = -1;
    for (size_t i = 0; i < sizeof TERM_OPS / sizeof TERM_OPS[0] && k < 0; i++)
        if (strlen(TERM_OPS[i].name) == len && !strncmp(TERM_OPS[i].name, t, len))
            k = (int)i;
    if (k < 0 || t[len] != '(' || x->kind != ARG_VALUE)
        return NULL;
    const Value *val = &m->g->values[x->a];
    int32_t ni = val->node;
    const Arg *a, *b;
    double p[2];
    if (ni < m->lo || ni > m->hi || val->index != 0 || taken(m, ni) || m->n == PAT_MAX_NODES ||
        m->g->nodes[ni].op != TERM_OPS[k].op || lower_node_args(m->g, ni, &a, &b, p) ||
        !lower_same_dims(&val->meta, &m->g->values[m->x].meta) || (TERM_OPS[k].op == OP_ADD && p[0] != 1.0))
        return NULL;
    int mark = m->n;
    m->nodes[m->n++] = ni;
    const char *t1 = t + len + 1, *r;
    if (TERM_OPS[k].nin == 1) {
        r = b ? NULL : match_arg(m, a, t1);
    } else {
        const char *t2 = skip_term(t1);
        if (!t2 || *t2 != ',') {
            m->n = mark;
            return NULL;
        }
        t2++;
        r = match_arg(m, a, t1) ? match_arg(m, b, t2) : NULL;
        if (!r && TERM_OPS[k].commutes) {
            m->n = mark + 1;
            r = match_arg(m, b, t1) ? match_arg(m, a, t2) : NULL;
        }
    }
    if (!r || *r != ')') {
        m->n = mark;
        return NULL;
    }
    return r + 1;
}

/* ------------------------------------------------------------------ uses ---- */

struct reads {
    int32_t v;
    int n;
};

static void count_read(void *ctx, int32_t ni, int32_t v)
{
    struct reads *c = ctx;
    (void)ni;
    c->n += v == c->v;
}

int lower_value_uses(const Graph *g, int32_t v)
{
    struct reads c = {v, 0};
    for (int32_t ni = 0; ni < g->nnodes; ni++)
        lower_node_reads(g, ni, count_read, &c);
    for (int32_t i = 0; i < g->noutputs; i++)
        c.n += g->outputs[i] == v;
    return c.n;
}

/* Reads of value v by the matched nodes. */
static int reads_inside(const Match *m, int32_t v)
{
    struct reads c = {v, 0};
    for (int i = 0; i < m->n; i++)
        lower_node_reads(m->g, m->nodes[i], count_read, &c);
    return c.n;
}

/* 1 when the matched nodes are exactly the non-input nodes of [lo, end] and nothing
 * outside them reads x or a value they make (but end's). */
static int closed(const Match *m, int32_t end)
{
    int count = 0;
    for (int32_t ni = m->lo; ni <= end; ni++)
        if (m->g->nodes[ni].op != OP_INPUT) {
            if (!taken(m, ni))
                return 0;
            count++;
        }
    if (count != m->n || lower_value_uses(m->g, m->x) != reads_inside(m, m->x))
        return 0;
    for (int i = 0; i < m->n; i++) {
        int32_t v = m->g->nodes[m->nodes[i]].first_value;
        if (m->nodes[i] != end && lower_value_uses(m->g, v) != reads_inside(m, v))
            return 0;
    }
    return 1;
}

static int by_index(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int lower_match_activation(Graph *g, int32_t x, int32_t from, int32_t *nodes, int max, int *n, int32_t *last)
{
    Match m;
    m.g = g;
    m.x = x;
    m.lo = from;
    int seen = 0;
    for (int32_t end = from; end < g->nnodes && seen < PAT_MAX_NODES; end++) {
        const Node *nd = &g->nodes[end];
        if (nd->op == OP_INPUT)
            continue;
        if (nd->nout != 1 || op_info[nd->op].kind != OPK_POINTWISE)
            return 0;   /* the run of pointwise nodes ends before any formula does */
        seen++;
        m.hi = end;
        Arg root = {ARG_VALUE, nd->first_value, 0};
        for (size_t r = 0; r < sizeof ACTIVATIONS / sizeof ACTIVATIONS[0]; r++) {
            m.n = 0;
            const char *e = match_arg(&m, &root, ACTIVATIONS[r].term);
            if (!e || *e || m.n > max || !closed(&m, end))
                continue;
            memcpy(nodes, m.nodes, sizeof(int32_t) * (size_t)m.n);
            qsort(nodes, (size_t)m.n, sizeof(int32_t), by_index);
            *n = m.n;
            *last = end;
            return ACTIVATIONS[r].kind;
        }
    }
    return 0;
}
