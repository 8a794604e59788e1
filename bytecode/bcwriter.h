/* The one place that writes CPython 3.11 bytecode.
 *
 * Code is built as a list of instructions (jumps name the index of their target
 * instruction, not an offset) with a source position each, plus exception-table ranges
 * over instruction indices. bc_assemble lays them out: EXTENDED_ARG prefixes sized until
 * every jump fits, the CACHE entries each opcode needs written after it, relative jump
 * arguments, the location table, the exception table and the stack depth; then it makes
 * the code object with code.replace() on a model code object (the public API only).
 * Opcode facts come from sj_opcodes.h, generated from the running interpreter. */
#ifndef SJ_BCWRITER_H
#define SJ_BCWRITER_H

#include <Python.h>
#include <stdint.h>

typedef struct {
    int line, end_line, col, end_col;   /* line < 0: no location; col < 0: no columns */
} BcPos;

static const BcPos BC_NOPOS = {-1, -1, -1, -1};

typedef struct {
    uint8_t op;
    int32_t arg;       /* ignored for jumps: computed from target */
    int32_t target;    /* jumps: index of the target instruction; else -1 */
    BcPos pos;
} BcIns;

typedef struct {
    int32_t start, end;   /* instruction indices, end exclusive */
    int32_t handler;      /* instruction index */
    int32_t depth;
    int lasti;
} BcExc;

typedef struct {
    BcIns *ins;
    int32_t n, cap;
    BcExc *exc;
    int32_t nexc, capexc;
    PyObject *consts;     /* strong list */
    PyObject *names;      /* strong list */
    int32_t *off;         /* after bc_assemble: code unit offset of each instruction (n + 1) */
} BcAsm;

int bc_init(BcAsm *a);
void bc_free(BcAsm *a);
/* Append an instruction; returns its index or -1 (MemoryError). */
int32_t bc_emit(BcAsm *a, int op, int32_t arg, BcPos pos);
/* Append a jump to instruction index target (may be patched later through a->ins). */
int32_t bc_emit_jump(BcAsm *a, int op, int32_t target, BcPos pos);
/* Index of obj in the constants (identity first, then equality for str/int/None/tuple). */
int32_t bc_const(BcAsm *a, PyObject *obj);
int32_t bc_name(BcAsm *a, PyObject *name);
int bc_add_exc(BcAsm *a, int32_t start, int32_t end, int32_t handler, int32_t depth, int lasti);

/* Append co's instructions (EXTENDED_ARG folded, caches dropped) with their positions and
 * exception ranges; constants and names are taken over as they are (call on an empty
 * assembler). *unit_to_ins (PyMem, nunits + 1 entries) maps each code unit of co to the
 * index of the instruction covering it, and *nunits is the code's length in units; either
 * may be NULL. */
int bc_decode(BcAsm *a, PyCodeObject *co, int32_t **unit_to_ins, int32_t *nunits);

/* The handler covering code unit pc of co: 0 and its target/depth/lasti, or 1 when no
 * handler covers pc (or the table is malformed). */
int bc_find_handler(PyCodeObject *co, int pc, int *target, int *depth, int *lasti);

/* What the new code object is, beyond its instructions. */
typedef struct {
    PyObject *name, *qualname;         /* borrowed */
    PyObject *varnames, *cellvars, *freevars;   /* borrowed tuples */
    int argcount, posonlyargcount, kwonlyargcount, flags;
    int firstlineno;
} BcCodeSpec;

/* New code object laid out from a, shaped after model (filename kept). NULL + exception. */
PyObject *bc_assemble(BcAsm *a, PyCodeObject *model, const BcCodeSpec *spec);

#endif
