/* Binding call arguments to the parameter lists ("schemas") of vocab/callables.def.
 *
 * Schemas are parsed once and cached by the address of the schema string: every schema
 * comes from the static callables table, so the address is a stable key and binding a call
 * costs a hash probe plus a pass over the arguments. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#include "bind.h"
#include "../core/errors.h"

#define NAME_MAX_LEN ((int)sizeof(((SchemaParam *)0)->name))
#define CACHE_SIZE 2048    /* a power of two, well above the number of callables rows */

typedef SchemaParam Param;

typedef struct {
    const char *key;                 /* the schema string; NULL = empty slot */
    int n;
    Param p[SJ_MAX_PARAMS];
} Schema;

static Schema cache[CACHE_SIZE];

static int copy_name(char *dst, const char *s, size_t len, ShapeErr *err, const char *schema)
{
    while (len && isspace((unsigned char)*s)) {
        s++;
        len--;
    }
    while (len && isspace((unsigned char)s[len - 1]))
        len--;
    if (len == 0 || len >= (size_t)NAME_MAX_LEN) {
        sj_err(err, "bad schema \"%.180s\"", schema);
        return -1;
    }
    for (size_t i = 0; i < len; i++)
        if (!(isalnum((unsigned char)s[i]) || s[i] == '_')) {
            sj_err(err, "bad name in schema \"%.180s\"", schema);
            return -1;
        }
    memcpy(dst, s, len);
    dst[len] = 0;
    return 0;
}

/* One comma-separated item [s, s+len) of the schema. */
static int parse_item(Schema *sc, const char *s, size_t len, int *kwonly_mode, ShapeErr *err, const char *schema)
{
    while (len && isspace((unsigned char)*s)) {
        s++;
        len--;
    }
    while (len && isspace((unsigned char)s[len - 1]))
        len--;
    if (len == 1 && s[0] == '/') {
        for (int i = 0; i < sc->n; i++)
            sc->p[i].posonly = 1;
        return 0;
    }
    if (len == 1 && s[0] == '*') {
        *kwonly_mode = 1;
        return 0;
    }
    if (sc->n >= SJ_MAX_PARAMS) {
        sj_err(err, "schema has too many parameters: \"%.160s\"", schema);
        return -1;
    }
    Param *p = &sc->p[sc->n];
    memset(p, 0, sizeof *p);
    p->kwonly = (unsigned char)*kwonly_mode;
    if (len && s[0] == '*') {
        p->varargs = 1;
        *kwonly_mode = 1;
        s++;
        len--;
    } else if (len && s[0] == '@') {
        p->fixed = 1;
        s++;
        len--;
    } else if (len && s[0] == '!') {
        p->refused = 1;
        s++;
        len--;
    } else if (len && s[0] == '&') {
        p->tensor_only = 1;
        s++;
        len--;
    }
    const char *eq = memchr(s, '=', len);
    size_t head = eq ? (size_t)(eq - s) : len;
    if (eq)
        p->optional = 1;
    const char *arrow = NULL;
    for (size_t i = 0; i + 1 < head; i++)
        if (s[i] == '-' && s[i + 1] == '>') {
            arrow = s + i;
            break;
        }
    if (arrow) {
        if (copy_name(p->call_name, s, (size_t)(arrow - s), err, schema) ||
            copy_name(p->name, arrow + 2, head - (size_t)(arrow - s) - 2, err, schema))
            return -1;
    } else {
        if (copy_name(p->call_name, s, head, err, schema))
            return -1;
        strcpy(p->name, p->call_name);
    }
    if (p->fixed) {
        if (!eq) {
            sj_err(err, "fixed parameter without a value in \"%.160s\"", schema);
            return -1;
        }
        const char *v = eq + 1;
        size_t vlen = len - head - 1;
        while (vlen && isspace((unsigned char)*v)) {
            v++;
            vlen--;
        }
        p->fixed_value = PyUnicode_FromStringAndSize(v, (Py_ssize_t)vlen);    /* kept forever */
        if (!p->fixed_value) {
            sj_err_clear();
            sj_err(err, "out of memory parsing a schema");
            return -1;
        }
    }
    sc->n++;
    return 0;
}

static int parse_schema(Schema *sc, const char *schema, ShapeErr *err)
{
    sc->n = 0;
    int kwonly_mode = 0, depth = 0;
    char quote = 0;
    const char *start = schema;
    for (const char *c = schema;; c++) {
        if (quote) {
            if (*c == quote)
                quote = 0;
            else if (!*c)
                break;
            continue;
        }
        if (*c == '\'' || *c == '"') {
            quote = *c;
            continue;
        }
        if (*c == '(' || *c == '[')
            depth++;
        if (*c == ')' || *c == ']')
            depth--;
        if ((*c == ',' && depth == 0) || !*c) {
            size_t len = (size_t)(c - start);
            int blank = 1;
            for (size_t i = 0; i < len; i++)
                if (!isspace((unsigned char)start[i]))
                    blank = 0;
            if (!blank && parse_item(sc, start, len, &kwonly_mode, err, schema))
                return -1;
            if (!*c)
                break;
            start = c + 1;
        }
    }
    if (quote || depth) {
        sj_err(err, "unbalanced schema \"%.180s\"", schema);
        return -1;
    }
    return 0;
}

static const Schema *get_schema(const char *schema, ShapeErr *err)
{
    uintptr_t h = (uintptr_t)schema;
    h ^= h >> 17;
    h *= 0x9E3779B1u;
    size_t i = (size_t)(h & (CACHE_SIZE - 1));
    for (size_t probes = 0; probes < CACHE_SIZE; probes++, i = (i + 1) & (CACHE_SIZE - 1)) {
        if (cache[i].key == schema)
            return &cache[i];
        if (!cache[i].key) {
            if (parse_schema(&cache[i], schema, err)) {
                /* Partially parsed fixed values are small and this only happens for a
                 * broken table row, so they are not reclaimed. */
                cache[i].n = 0;
                return NULL;
            }
            cache[i].key = schema;
            return &cache[i];
        }
    }
    sj_err(err, "schema cache full");
    return NULL;
}

int bind_schema(const char *schema, const SchemaParam **params, ShapeErr *err)
{
    const Schema *sc = get_schema(schema, err);
    if (!sc)
        return -1;
    *params = sc->p;
    return sc->n;
}

int bind_args(const char *schema, const BoundArg *pos, int npos, const char *const *kwnames, const BoundArg *kw,
              int nkw, BoundArgs *out, ShapeErr *err)
{
    const Schema *sc = get_schema(schema, err);
    if (!sc)
        return -1;
    out->n = sc->n;
    for (int i = 0; i < sc->n; i++) {
        out->names[i] = sc->p[i].name;
        memset(&out->args[i], 0, sizeof out->args[i]);
        out->from[i] = -1;
        out->nfrom[i] = 0;
        if (sc->p[i].fixed) {
            out->args[i].kind = BA_CONST;
            out->args[i].value = sc->p[i].fixed_value;
        }
    }
    int k = 0;
    for (int i = 0; i < sc->n && k < npos; i++) {
        const Param *p = &sc->p[i];
        if (p->fixed)
            continue;
        if (p->varargs) {
            out->args[i].kind = BA_LIST;
            out->args[i].n = npos - k;
            out->args[i].items = pos + k;
            out->from[i] = (int16_t)k;
            out->nfrom[i] = (int16_t)(npos - k);
            k = npos;
            break;
        }
        if (p->kwonly)
            break;
        out->from[i] = (int16_t)k;
        out->args[i] = pos[k++];
    }
    if (k < npos) {
        sj_err(err, "too many positional arguments (%d given)", npos);
        return -1;
    }
    for (int j = 0; j < nkw; j++) {
        int found = -1;
        for (int i = 0; i < sc->n; i++) {
            const Param *p = &sc->p[i];
            if (!p->fixed && !p->posonly && strcmp(p->call_name, kwnames[j]) == 0) {
                found = i;
                break;
            }
        }
        if (found < 0) {
            sj_err(err, "unexpected keyword argument '%.60s'", kwnames[j]);
            return -1;
        }
        if (out->args[found].kind != BA_ABSENT) {
            sj_err(err, "multiple values for argument '%.60s'", kwnames[j]);
            return -1;
        }
        out->args[found] = kw[j];
        out->from[found] = (int16_t)(npos + j);
    }
    for (int i = 0; i < sc->n; i++) {
        const Param *p = &sc->p[i];
        const BoundArg *a = &out->args[i];
        if (a->kind == BA_ABSENT && !p->optional && !p->varargs && !p->fixed) {
            sj_err(err, "missing required argument '%.60s'", p->call_name);
            return -1;
        }
        int passed = a->kind != BA_ABSENT && !(a->kind == BA_CONST && a->value == Py_None);
        if (passed && p->tensor_only && a->kind != BA_TENSOR) {
            sj_err(err, "argument '%.60s' must be a tensor", p->call_name);
            return -1;
        }
        if (passed && !p->fixed && (p->refused || strcmp(p->name, "out") == 0)) {
            sj_err(err, "%.60s= is not supported", p->call_name);
            return -1;
        }
    }
    return 0;
}

/* Several parameters may share a canonical name (numpy's clip(a, a_min, a_max, *, min, max)
 * maps both spellings to min/max): the first one passed wins. */
int sj_err(ShapeErr *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return -1;
}

const BoundArg *ba_get(const BoundArgs *b, const char *name)
{
    for (int i = 0; i < b->n; i++)
        if (strcmp(b->names[i], name) == 0) {
            const BoundArg *a = &b->args[i];
            if (a->kind == BA_ABSENT || (a->kind == BA_CONST && a->value == Py_None))
                continue;
            return a;
        }
    return NULL;
}
