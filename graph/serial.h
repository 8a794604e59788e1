/* A graph as text, and graphs compared (graph/serial.c).
 *
 * The text (version 1, described at the top of serial.c) holds everything a Graph holds:
 * nodes, values with their metadata and the symbolic expressions of their sizes, the
 * argument pool, the constants, inputs and outputs. Reading it back needs neither torch
 * nor numpy: a constant that is a library object (a dtype, a device, a tensor, a callable)
 * comes back as a GraphRef, an unresolved reference that prints as the object did; linking
 * (graph_link) imports the library and puts the objects in its place.
 *
 * Return convention: 0 / a new reference on success; -1 / NULL with an exception set. */
#ifndef SJ_SERIAL_H
#define SJ_SERIAL_H

#include <Python.h>
#include "ir.h"

/* The text of g, named name (a str, borrowed): a new str. TypeError naming the constant's
 * type and the node holding it when a constant has no serialised form. */
PyObject *graph_serialize(Graph *g, PyObject *name);

/* A new graph read from text (a str); *name receives its name (a new str). ValueError
 * naming the line and what is wrong when the text is malformed, truncated, of another
 * version, or names an op or a callables row this build does not have. The graph's library
 * constants are unresolved (graph_is_linked is 0 when it has any). */
Graph *graph_deserialize(PyObject *text, PyObject **name);

/* 1 when a and b are the same graph: the same nodes, values, metadata, symbolic sizes, pool,
 * inputs and outputs, with constants equal by their serialised form (whatever their place
 * in the constants table and whether they are live or unresolved); 0 when not; -1 on error.
 * A constant with no serialised form is equal only to itself. */
int graph_equal(Graph *a, Graph *b);

/* Resolve every unresolved constant of g (importing torch / numpy as needed). 0 or -1. */
int graph_link(Graph *g);
/* 1 when g holds no unresolved constant. */
int graph_is_linked(Graph *g);

/* Registers _C.GraphRef. */
int serial_init_types(PyObject *module);

#endif
