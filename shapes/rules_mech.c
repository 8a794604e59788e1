/* The rules of ops the torch mechanisms reach (the capture corpus's t_mech files): the recurrent
 * layers, and the parametrizations' torch._weight_norm and matrix_exp.
 *
 * The recurrent ops torch's RNN modules call: torch.lstm / torch.gru / torch.rnn_tanh /
 * torch.rnn_relu (input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
 * batch_first), the padded-tensor form. Their outputs are (output, h_n[, c_n]): h_n and c_n
 * are shaped like the initial states, and output like the input with its last dim
 * directions * h_n.size(-1). The packed-sequence overload (data, batch_sizes, ...) has a
 * tensor where hx is and is refused. Symbolic batch and sequence sizes pass through with
 * their symbols; a symbolic feature or hidden size (the weights fix both) is specialised. */
#include "rules.h"
#include "rules_util.h"
#include "../core/errors.h"

int rule_rnn(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    const BoundArg *hx = ba_get(b, "hx");
    const TensorMeta *h = NULL, *cst = NULL;
    int want = op == OP_LSTM ? 2 : 1;
    if (op == OP_LSTM) {
        if (!hx || hx->kind != BA_LIST || hx->n != 2 || hx->items[0].kind != BA_TENSOR ||
            hx->items[1].kind != BA_TENSOR)
            return sj_err(err, "lstm: hx must be a pair of tensors (the packed-sequence form is not supported)");
        h = hx->items[0].meta;
        cst = hx->items[1].meta;
    } else {
        if (!hx || hx->kind != BA_TENSOR)
            return sj_err(err, "%s: hx must be a tensor", op_info[op].name);
        h = hx->meta;
    }
    int bidir = 0, batch_first = 0;
    if (sj_get_bool(b, "bidirectional", 0, &bidir, err) || sj_get_bool(b, "batch_first", 0, &batch_first, err))
        return -1;
    if (x->ndim != 3 || h->ndim != 3 || (cst && cst->ndim != 3))
        return sj_err(err, "%s: expected a 3-D input and 3-D states", op_info[op].name);
    if (x->sym[2] || h->sym[2])
        return 1;   /* sizes the weights fix: capture specialises them */
    if (x->dtype != DT_F32 && x->dtype != DT_F64 && x->dtype != DT_F16 && x->dtype != DT_BF16)
        return sj_err(err, "%s: input must be floating point", op_info[op].name);
    out[0] = *x;
    out[0].size[2] = (bidir ? 2 : 1) * h->size[2];
    out[0].sym[2] = NULL;
    out[1] = *h;
    if (cst)
        out[2] = *cst;
    for (int i = 0; i < want + 1; i++) {
        out[i].lib = (unsigned char)lib;
        out[i].dtype = x->dtype;
        out[i].np_scalar = 0;
    }
    *nout = want + 1;
    return 0;
}

/* torch.matrix_exp: a batch of square float matrices, shaped like the input. */
int rule_matrix_exp(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    if (x->dtype != DT_F32 && x->dtype != DT_F64)
        return sj_err(err, "matrix_exp: float32 or float64 input expected");
    if (x->ndim < 2)
        return sj_err(err, "matrix_exp: expected a tensor of at least 2 dimensions");
    int eq = sj_dims_equal(x, x->ndim - 2, x, x->ndim - 1, err);
    if (eq <= 0)
        return eq < 0 ? -1 : sj_err(err, "matrix_exp: expected square matrices");
    out[0] = *x;
    out[0].lib = (unsigned char)lib;
    *nout = 1;
    return 0;
}

/* torch._weight_norm(v, g, dim): v * g / ||v|| (over every dim but dim; dim -1 the whole
 * tensor), shaped like v. Only g shaped as weight_norm makes it is accepted: for dim d,
 * v.size(d) values laid along d ([n] or [1, ..., n, ..., 1]); for -1, a tensor that
 * broadcasts to v. */
int rule_weight_norm(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    (void)op;
    const TensorMeta *v, *g;
    if (sj_tensor2(b, "input", &v, "other", &g, err))
        return -1;
    if ((v->dtype != DT_F32 && v->dtype != DT_F64) || g->dtype != v->dtype)
        return sj_err(err, "_weight_norm: v and g must be float32 or float64 of one dtype");
    int64_t dim = 0;
    const BoundArg *d = ba_get(b, "dim");
    if (d) {
        if (d->kind != BA_CONST || !PyLong_Check(d->value) || d->sym)
            return sj_err(err, "_weight_norm: dim must be an int");
        dim = PyLong_AsLongLong(d->value);
        if (dim == -1 && PyErr_Occurred()) {
            sj_err_clear();
            return sj_err(err, "_weight_norm: dim out of range");
        }
    }
    for (int i = 0; i < v->ndim; i++)
        if (v->sym[i])
            return sj_err(err, "_weight_norm: symbolic sizes");
    for (int i = 0; i < g->ndim; i++)
        if (g->sym[i])
            return sj_err(err, "_weight_norm: symbolic sizes");
    if (dim == -1) {
        if (g->ndim > v->ndim)
            return sj_err(err, "_weight_norm: g has more dimensions than v");
        for (int i = 0; i < g->ndim; i++) {
            int64_t gs = g->size[g->ndim - 1 - i], vs = v->size[v->ndim - 1 - i];
            if (gs != 1 && gs != vs)
                return sj_err(err, "_weight_norm: g does not broadcast to v");
        }
    } else {
        if (dim < 0 || dim >= v->ndim)
            return sj_err(err, "_weight_norm: dim out of range");
        int ok = g->ndim == 1 && g->size[0] == v->size[dim];
        if (g->ndim == v->ndim) {
            ok = 1;
            for (int i = 0; i < g->ndim; i++)
                if (g->size[i] != (i == dim ? v->size[dim] : 1))
                    ok = 0;
        }
        if (!ok)
            return sj_err(err, "_weight_norm: g must hold v.size(dim) values along dim");
    }
    out[0] = *v;
    out[0].lib = (unsigned char)lib;
    *nout = 1;
    return 0;
}

/* torch.lstm_cell / gru_cell / rnn_tanh_cell / rnn_relu_cell (input, hx, w_ih, w_hh, b_ih,
 * b_hh): one step of a cell on a 2-D batch; the new states are shaped like hx (for the
 * LSTM cell the pair (h, c), and it returns (h', c')). */
int rule_rnn_cell(OpId op, Lib lib, const BoundArgs *b, TensorMeta *out, int *nout, ShapeErr *err)
{
    const TensorMeta *x = sj_tensor(b, "input", err);
    if (!x)
        return -1;
    const BoundArg *hx = ba_get(b, "hx");
    const TensorMeta *st[2] = {NULL, NULL};
    int n = op == OP_LSTM_CELL ? 2 : 1;
    if (op == OP_LSTM_CELL) {
        if (!hx || hx->kind != BA_LIST || hx->n != 2 || hx->items[0].kind != BA_TENSOR ||
            hx->items[1].kind != BA_TENSOR)
            return sj_err(err, "lstm_cell: hx must be a pair of tensors");
        st[0] = hx->items[0].meta;
        st[1] = hx->items[1].meta;
    } else {
        if (!hx || hx->kind != BA_TENSOR)
            return sj_err(err, "%s: hx must be a tensor", op_info[op].name);
        st[0] = hx->meta;
    }
    if (x->dtype != DT_F32 && x->dtype != DT_F64)
        return sj_err(err, "%s: input must be float32 or float64", op_info[op].name);
    if (x->ndim != 2)
        return sj_err(err, "%s: expected a 2-D input", op_info[op].name);
    for (int i = 0; i < n; i++) {
        if (st[i]->ndim != 2 || st[i]->dtype != x->dtype)
            return sj_err(err, "%s: states must be 2-D of the input's dtype", op_info[op].name);
        int eq = sj_dims_equal(st[i], 0, x, 0, err);
        if (eq <= 0)
            return eq < 0 ? -1 : sj_err(err, "%s: input and state batch sizes differ", op_info[op].name);
        out[i] = *st[i];
        out[i].lib = (unsigned char)lib;
    }
    *nout = n;
    return 0;
}
