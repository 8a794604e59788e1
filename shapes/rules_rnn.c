/* The recurrent ops torch's RNN modules call: torch.lstm / torch.gru / torch.rnn_tanh /
 * torch.rnn_relu (input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
 * batch_first), the padded-tensor form. Their outputs are (output, h_n[, c_n]): h_n and c_n
 * are shaped like the initial states, and output like the input with its last dim
 * directions * h_n.size(-1). The packed-sequence overload (data, batch_sizes, ...) has a
 * tensor where hx is and is refused. */
#include "rules.h"
#include "rules_util.h"

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
    if (x->dtype != DT_F32 && x->dtype != DT_F64 && x->dtype != DT_F16 && x->dtype != DT_BF16)
        return sj_err(err, "%s: input must be floating point", op_info[op].name);
    out[0] = *x;
    out[0].size[2] = (bidir ? 2 : 1) * h->size[2];
    out[0].sym[2] = NULL;
    if (h->sym[2])
        return sj_err(err, "%s: symbolic hidden size", op_info[op].name);
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
