/* Config knobs: storage, defaults, validation and the _C functions over them.
 * core/config.def is the table; nothing here names a knob except the stance and cpu_target checks. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <stddef.h>
#include <string.h>

#include "config.h"
#include "pyutil.h"

SjConfig sj_config;
int sj_stance = STANCE_DEFAULT;

const char *const sj_stance_names[STANCE_COUNT] = {
#define S(e, name) name,
    SJ_STANCES(S)
#undef S
};
_Static_assert(STANCE_DEFAULT == 0, "STANCE_DEFAULT must be the zero value");

/* ------------------------------------------------------------------------------------
 * The knob table, generated from config.def
 * ---------------------------------------------------------------------------------- */

typedef enum {
#define X(name, kind, def, doc) KNOB_##name,
#define XA(alias, target)
#include "config.def"
#undef X
#undef XA
    KNOB_COUNT
} KnobId;

/* The default column, split by kind (the other kind's slot gets a placeholder). */
#define SJ_CFG_DEFI_CFG_BOOL(d) (d)
#define SJ_CFG_DEFI_CFG_INT(d) (d)
#define SJ_CFG_DEFI_CFG_STR(d) 0
#define SJ_CFG_DEFS_CFG_BOOL(d) NULL
#define SJ_CFG_DEFS_CFG_INT(d) NULL
#define SJ_CFG_DEFS_CFG_STR(d) (d)

typedef struct {
    const char *name;
    ConfigKind kind;
    size_t offset;        /* of the field in SjConfig */
    long def_int;         /* CFG_BOOL, CFG_INT */
    const char *def_str;  /* CFG_STR */
    const char *doc;
} KnobInfo;

static const KnobInfo knobs[KNOB_COUNT] = {
#define X(name, kind, def, doc) \
    {#name, kind, offsetof(SjConfig, name), SJ_CFG_DEFI_##kind(def), SJ_CFG_DEFS_##kind(def), doc},
#define XA(alias, target)
#include "config.def"
#undef X
#undef XA
};

typedef struct {
    const char *alias;
    KnobId target;        /* a misspelt target fails to compile here */
} AliasInfo;

static const AliasInfo aliases[] = {
#define X(name, kind, def, doc)
#define XA(alias, target) {#alias, KNOB_##target},
#include "config.def"
#undef X
#undef XA
    {NULL, KNOB_COUNT}};

static const char *const kind_names[] = {"bool", "int", "str"};
_Static_assert(CFG_BOOL == 0 && CFG_INT == 1 && CFG_STR == 2, "kind_names follows ConfigKind");

#define FIELD(k, type) ((type *)((char *)&sj_config + knobs[k].offset))

/* ------------------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------------------- */

/* The knob a name (or alias) designates, or -1 if none; no exception either way. */
static int knob_find(const char *name)
{
    for (int k = 0; k < KNOB_COUNT; k++)
        if (strcmp(knobs[k].name, name) == 0)
            return k;
    for (int a = 0; aliases[a].alias; a++)
        if (strcmp(aliases[a].alias, name) == 0)
            return (int)aliases[a].target;
    return -1;
}

/* New reference: ", "-joined names of the knobs (then the aliases), or NULL. */
static PyObject *knob_list(void)
{
    PyObject *names = PyList_New(0);  /* strong, stolen by sj_join */
    if (!names)
        return NULL;
    for (int k = 0; k < KNOB_COUNT; k++) {
        PyObject *s = PyUnicode_FromString(knobs[k].name);  /* strong */
        if (!s || PyList_Append(names, s) < 0) {
            Py_XDECREF(s);
            Py_DECREF(names);
            return NULL;
        }
        Py_DECREF(s);
    }
    for (int a = 0; aliases[a].alias; a++) {
        PyObject *s =
            PyUnicode_FromFormat("%s (alias of %s)", aliases[a].alias, knobs[aliases[a].target].name);  /* strong */
        if (!s || PyList_Append(names, s) < 0) {
            Py_XDECREF(s);
            Py_DECREF(names);
            return NULL;
        }
        Py_DECREF(s);
    }
    return sj_join(", ", names);
}

/* Resolves `name` (borrowed) to a knob id; -1 with TypeError/AttributeError set. */
static int knob_lookup(PyObject *name)
{
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "shapejit.config: a knob name must be a str, not %.100s", Py_TYPE(name)->tp_name);
        return -1;
    }
    const char *s = PyUnicode_AsUTF8(name);  /* borrowed buffer, owned by name */
    if (!s)
        return -1;
    int k = knob_find(s);
    if (k >= 0)
        return k;
    PyObject *valid = knob_list();  /* strong */
    if (!valid)
        return -1;
    PyErr_Format(PyExc_AttributeError, "shapejit.config has no knob '%U'; valid knobs: %U", name, valid);
    Py_DECREF(valid);
    return -1;
}

/* Stance enum of a str, or -1 (no exception). */
static int stance_find(PyObject *s)
{
    for (int i = 0; i < STANCE_COUNT; i++)
        if (PyUnicode_CompareWithASCIIString(s, sj_stance_names[i]) == 0)
            return i;
    return -1;
}

/* New reference: ", "-joined stance names, or NULL. */
static PyObject *stance_list(void)
{
    return sj_join_names(", ", sj_stance_names, STANCE_COUNT);
}

int sj_cpu_target_valid(const char *t)
{
    size_t n = strlen(t);
    if (n == 0 || n > SJ_CPU_TARGET_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = t[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* Stores `value` (borrowed) in knob k after checking it. 0, or -1 with an exception. */
static int knob_set(int k, PyObject *value)
{
    const KnobInfo *ki = &knobs[k];
    switch (ki->kind) {
    case CFG_BOOL:
        if (!PyBool_Check(value)) {
            PyErr_Format(PyExc_TypeError, "shapejit.config.%s expects a bool (True or False), got %.100s", ki->name,
                         Py_TYPE(value)->tp_name);
            return -1;
        }
        *FIELD(k, int) = (value == Py_True);
        return 0;
    case CFG_INT: {
        if (!PyLong_Check(value) || PyBool_Check(value)) {
            PyErr_Format(PyExc_TypeError, "shapejit.config.%s expects an int, got %.100s", ki->name,
                         Py_TYPE(value)->tp_name);
            return -1;
        }
        int overflow = 0;
        long v = PyLong_AsLongAndOverflow(value, &overflow);
        if (v == -1 && PyErr_Occurred())
            return -1;
        if (overflow || v < 0) {
            PyErr_Format(PyExc_ValueError, "shapejit.config.%s expects an int between 0 and %ld, got %R", ki->name,
                         LONG_MAX, value);
            return -1;
        }
        *FIELD(k, long) = v;
        return 0;
    }
    case CFG_STR: {
        if (!PyUnicode_Check(value)) {
            PyErr_Format(PyExc_TypeError, "shapejit.config.%s expects a str, got %.100s", ki->name,
                         Py_TYPE(value)->tp_name);
            return -1;
        }
        int stance = -1;
        if (k == KNOB_stance) {
            stance = stance_find(value);
            if (stance < 0) {
                PyObject *valid = stance_list();  /* strong */
                if (valid)
                    PyErr_Format(PyExc_ValueError, "shapejit.config.stance: unknown stance %R; valid stances: %U",
                                 value, valid);
                Py_XDECREF(valid);
                return -1;
            }
        }
        if (k == KNOB_automatic_dynamic_shapes_mark_as && PyUnicode_CompareWithASCIIString(value, "dynamic") != 0 &&
            PyUnicode_CompareWithASCIIString(value, "unbacked") != 0 &&
            PyUnicode_CompareWithASCIIString(value, "oblivious") != 0) {
            PyErr_Format(PyExc_ValueError,
                         "shapejit.config.automatic_dynamic_shapes_mark_as: unknown value %R; valid "
                         "values: dynamic, unbacked, oblivious",
                         value);
            return -1;
        }
        if (k == KNOB_cpu_target) {
            /* checked as ASCII first: a lone surrogate must fail here, not in an encoder */
            const char *t = PyUnicode_IS_ASCII(value) ? PyUnicode_AsUTF8(value) : "";
            if (!t)
                return -1;
            if (!sj_cpu_target_valid(t)) {
                PyErr_Format(PyExc_ValueError,
                             "shapejit.config.cpu_target: bad target %R: expected native, x86-64-v2, "
                             "x86-64-v3, x86-64-v4 or a gcc -march name (1 to %d characters of a-z 0-9 . _ -)",
                             value, SJ_CPU_TARGET_MAX);
                return -1;
            }
        }
        /* keep an exact str, so a str subclass cannot run code when C reads it */
        PyObject *s = PyUnicode_CheckExact(value) ? Py_NewRef(value) : PyUnicode_FromObject(value);  /* strong */
        if (!s)
            return -1;
        Py_XSETREF(*FIELD(k, PyObject *), s);  /* the field takes s */
        if (stance >= 0)
            sj_stance = stance;
        return 0;
    }
    }
    PyErr_SetString(PyExc_SystemError, "shapejit.config: bad knob kind");
    return -1;
}

/* New reference: the default of knob k as a Python object. */
static PyObject *knob_default(int k)
{
    switch (knobs[k].kind) {
    case CFG_BOOL:
        return PyBool_FromLong(knobs[k].def_int);
    case CFG_INT:
        return PyLong_FromLong(knobs[k].def_int);
    case CFG_STR:
        return PyUnicode_FromString(knobs[k].def_str);
    }
    PyErr_SetString(PyExc_SystemError, "shapejit.config: bad knob kind");
    return NULL;
}

/* New reference: the current value of knob k. */
static PyObject *knob_get(int k)
{
    switch (knobs[k].kind) {
    case CFG_BOOL:
        return PyBool_FromLong(*FIELD(k, int));
    case CFG_INT:
        return PyLong_FromLong(*FIELD(k, long));
    case CFG_STR:
        return Py_NewRef(*FIELD(k, PyObject *));
    }
    PyErr_SetString(PyExc_SystemError, "shapejit.config: bad knob kind");
    return NULL;
}

/* ------------------------------------------------------------------------------------
 * Public C API
 * ---------------------------------------------------------------------------------- */

int config_init(void)
{
    for (int k = 0; k < KNOB_COUNT; k++) {
        PyObject *d = knob_default(k);  /* strong */
        if (!d)
            return -1;
        int rc = knob_set(k, d);  /* a bad default in config.def fails here, loudly */
        Py_DECREF(d);
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------
 * _C functions
 * ---------------------------------------------------------------------------------- */

static PyObject *py_config_knobs(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    PyObject *out = PyList_New(KNOB_COUNT);  /* strong */
    if (!out)
        return NULL;
    for (int k = 0; k < KNOB_COUNT; k++) {
        PyObject *d = knob_default(k);  /* strong */
        if (!d) {
            Py_DECREF(out);
            return NULL;
        }
        PyObject *row = Py_BuildValue("(ssNs)", knobs[k].name, kind_names[knobs[k].kind], d,
                                      knobs[k].doc);  /* strong; steals d (N) */
        if (!row) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, k, row);  /* steals row */
    }
    return out;
}

static PyObject *py_config_get(PyObject *self, PyObject *name)
{
    (void)self;
    int k = knob_lookup(name);
    if (k < 0)
        return NULL;
    return knob_get(k);
}

static PyObject *py_config_set(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *name, *value;  /* borrowed */
    if (!PyArg_ParseTuple(args, "OO:config_set", &name, &value))
        return NULL;
    int k = knob_lookup(name);
    if (k < 0 || knob_set(k, value) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *py_config_aliases(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    PyObject *out = PyDict_New();  /* strong */
    if (!out)
        return NULL;
    for (int a = 0; aliases[a].alias; a++) {
        PyObject *v = PyUnicode_FromString(knobs[aliases[a].target].name);  /* strong */
        if (!v || PyDict_SetItemString(out, aliases[a].alias, v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(v);
    }
    return out;
}

PyMethodDef sj_config_methods[] = {
    {"config_knobs", py_config_knobs, METH_NOARGS,
     "config_knobs() -> [(name, kind, default, doc)], kind 'bool', 'int' or 'str'"},
    {"config_get", py_config_get, METH_O, "config_get(name) -> the knob's value"},
    {"config_set", py_config_set, METH_VARARGS,
     "config_set(name, value): TypeError/ValueError naming the knob on a bad value"},
    {"config_aliases", py_config_aliases, METH_NOARGS, "config_aliases() -> {alias: knob}"},
    {NULL, NULL, 0, NULL},
};
