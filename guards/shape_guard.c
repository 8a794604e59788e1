/* SHAPE_ENV leaves: relations between sizes (and int inputs) that a capture relied on,
 * compiled by the shape environment (shapes/env.c, which declares the program format) into
 * a small postfix program over source values, so a check needs no shape environment:
 * Ne(L['x'].size()[0], 10), 2 <= L['x'].size()[0], Eq(L['y'].size()[0], L['x'].size()[0]). */
#include "tree.h"
#include "../shapes/env.h"
#include "../core/errors.h"
#include "../core/pyutil.h"

static int src_value(const Guard *g, GuardCall *call, int32_t id, int64_t *out, int *bad)
{
    PyObject *v = sources_resolve(&call->t->src, id, call->fv, call->memo);
    if (!v)
        return -1;
    if (!PyLong_CheckExact(v)) {
        *bad = 1;   /* an int input that is no longer an int: TYPE_MATCH reports it */
        return -1;
    }
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) {
        sj_err_clear();
        *bad = 1;
        return -1;
    }
    (void)g;
    *out = x;
    return 0;
}

int shape_guard_eval(const Guard *g, GuardCall *call, int64_t *out, int *bad)
{
    const int64_t *p = (const int64_t *)PyBytes_AS_STRING(PyTuple_GET_ITEM(g->expected, 0));
    Py_ssize_t n = PyBytes_GET_SIZE(PyTuple_GET_ITEM(g->expected, 0)) / (Py_ssize_t)(2 * sizeof(int64_t));
    int64_t st[SG_MAX_DEPTH];
    int sp = 0;
    *bad = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        int64_t op = p[2 * k], arg = p[2 * k + 1];
        switch (op) {
        case SG_CONST:
            if (sp >= SG_MAX_DEPTH)
                goto fail;
            st[sp++] = arg;
            continue;
        case SG_SRC:
            if (sp >= SG_MAX_DEPTH)
                goto fail;
            if (src_value(g, call, (int32_t)arg, &st[sp], bad) < 0)
                return -1;
            sp++;
            continue;
        case SG_ADD:
        case SG_MUL:
        case SG_MIN:
        case SG_MAX: {
            if (arg < 1 || arg > sp)
                goto fail;
            int64_t r = st[sp - arg];
            for (int64_t i = sp - arg + 1; i < sp; i++) {
                int64_t x = st[i];
                if (op == SG_ADD) {
                    if (__builtin_add_overflow(r, x, &r))
                        goto fail;
                } else if (op == SG_MUL) {
                    if (__builtin_mul_overflow(r, x, &r))
                        goto fail;
                } else if (op == SG_MIN) {
                    r = x < r ? x : r;
                } else {
                    r = x > r ? x : r;
                }
            }
            sp -= (int)arg;
            st[sp++] = r;
            continue;
        }
        default: {
            if (sp < 2)
                goto fail;
            int64_t a = st[sp - 2], b = st[sp - 1], r;
            switch (op) {
            case SG_FLOORDIV:
                if (b == 0 || (a == INT64_MIN && b == -1))
                    goto fail;
                r = sj_floordiv(a, b);
                break;
            case SG_MOD:
                if (b == 0 || (a == INT64_MIN && b == -1))
                    goto fail;
                r = sj_floormod(a, b);
                break;
            case SG_EQ:
                r = a == b;
                break;
            case SG_NE:
                r = a != b;
                break;
            case SG_LT:
                r = a < b;
                break;
            case SG_LE:
                r = a <= b;
                break;
            default:
                goto fail;
            }
            sp -= 2;
            st[sp++] = r;
            continue;
        }
        }
    }
    if (sp != 1)
        goto fail;
    *out = st[0];
    return 0;
fail:
    *bad = 1;
    return -1;
}
