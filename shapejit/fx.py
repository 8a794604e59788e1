"""A captured graph as a torch.fx.GraphModule: what a backend written for torch.compile
reads (``gm.graph.nodes``) and runs (``gm.forward``).

``Graph.to_fx()`` builds it: one ``placeholder`` per graph input (named after its
source, ``L['x']`` -> ``l_x_``, as torch names them), one ``call_function`` node per op
calling the op's original callable (``torch.add``, ``torch.Tensor.add_``,
``operator.getitem``...) with the op's arguments, an ``operator.getitem`` node per
output of a multi-output op, and an ``output`` node returning the graph's outputs as a
tuple (what the compiled callable must return to shapejit). Constants that Python source
cannot spell (tensors, arrays, arbitrary objects) are attributes of the module, read by
``get_attr`` nodes, as torch does for its constant tensors.

Imported at the first ``Graph.to_fx()`` (the to_fx policy, registered by __init__.py), so
numpy-only users never import torch.
"""
import math
import operator
import re

import torch
import torch.fx

# constants FX writes into the generated source as they are
_LITERAL = (type(None), bool, int, float, str, complex, slice, type(Ellipsis), torch.dtype,
            torch.device, torch.layout, torch.memory_format)


def _literal(obj):
    """True for a constant FX can write into generated source as it is."""
    if isinstance(obj, float):
        return math.isfinite(obj)
    if isinstance(obj, _LITERAL):
        return True   # (a torch.Size is not: FX would write it as a plain tuple)
    if type(obj) in (tuple, list):
        return all(_literal(o) for o in obj)
    return False


def _nameable(target):
    """target itself when FX can name it in generated code; else a function calling it
    (numpy's method descriptors have no __module__, callable objects no __name__), with
    the original as __wrapped__."""
    try:
        # FX's own naming (it knows torch.Tensor's methods, which have no __module__)
        torch.fx.node._get_qualified_name(target)
        return target
    except Exception:   # noqa: BLE001 - whatever FX cannot name is wrapped
        pass

    def call(*args, **kwargs):
        return target(*args, **kwargs)

    name = getattr(target, "__name__", None) or type(target).__name__
    call.__name__ = name
    call.__qualname__ = getattr(target, "__qualname__", None) or name
    call.__wrapped__ = target
    return call


def _placeholder_name(source):
    name = re.sub(r"[^0-9a-zA-Z_]+", "_", str(source).replace("'", "")).lower()
    name = name if name.endswith("_") else name + "_"
    return name if name[0].isalpha() or name[0] == "_" else "_" + name


class _Builder:
    def __init__(self):
        self.graph = torch.fx.Graph()
        self.root = torch.nn.Module()
        self.env = {}      # value id -> fx Node
        self.consts = 0

    def const(self, obj):
        if _literal(obj):
            return obj
        name = "_sj_constant%d" % self.consts
        self.consts += 1
        setattr(self.root, name, obj)
        return self.graph.get_attr(name)

    def arg(self, part):
        tag, body = part
        if tag == "v":
            return self.env[body]
        if tag == "c":
            return self.const(body)
        items = [self.arg(p) for p in body]
        return items if tag == "l" else tuple(items)


def _size_reads(inputs, nodes):
    """{value id of a sym_size node reading dim d of graph input i: (i, d)}."""
    position = {vid: i for i, (vid, _) in enumerate(inputs)}
    reads = {}
    for op, _, args, _, kwargs, first, nout, _ in nodes:
        if op == "sym_size" and nout == 1 and not kwargs and len(args) == 2 and \
                args[0][0] == "v" and args[0][1] in position and args[1][0] == "c" and \
                type(args[1][1]) is int:
            reads[first] = (position[args[0][1]], args[1][1])
    return reads


def to_fx(graph, size_inputs=False):
    """The torch.fx.GraphModule of a shapejit Graph (see the module doc).

    size_inputs=True gives the module torch's calling convention (what the torch compat
    layer uses): as torch's graphs take their symbolic sizes, the sizes of inputs the graph
    reads (its sym_size nodes on inputs) become placeholders s0, s1, ... placed before the
    inputs' own, and gm.meta["shapejit_size_inputs"] lists (input index, dim) for each; and
    as torch's graphs return a Python float (a SymFloat) as a 0-dim float64 tensor, such
    outputs go through torch.scalar_tensor, their positions in
    gm.meta["shapejit_float_outputs"]."""
    inputs, nodes, outputs = graph._parts()
    # a Python float: the value of an item() or size-arithmetic node of a floating dtype
    float_values = set()
    if size_inputs:
        ops = [n for n in graph.nodes if n.op != "input"]
        for (op, _, _, _, _, first, nout, _), n in zip(nodes, ops):
            if nout == 1 and (op == "item" or op.startswith("sym_")) and \
                    n.dtype in ("float64", "float32", "float16", "bfloat16"):
                float_values.add(first)
    b = _Builder()
    reads = _size_reads(inputs, nodes) if size_inputs else {}
    spec = []
    by_read = {}
    for vid, read in reads.items():
        if read not in by_read:
            by_read[read] = b.graph.placeholder("s%d" % len(spec))
            spec.append(read)
        b.env[vid] = by_read[read]
    for vid, source in inputs:
        b.env[vid] = b.graph.placeholder(_placeholder_name(source))
    for op, target, args, kwnames, kwargs, first, nout, writes_first in nodes:
        if first in reads:
            continue
        fx_args = tuple(b.arg(a) for a in args)
        fx_kwargs = {name: b.arg(a) for name, a in zip(kwnames or (), kwargs)}
        node = b.graph.call_function(_nameable(target), fx_args, fx_kwargs)
        node.meta["shapejit_op"] = op
        if nout == 1:
            # an op that writes into its first argument may return None (setitem): the
            # value it defines is that argument, as when the graph itself runs
            b.env[first] = fx_args[0] if writes_first else node
        else:
            for k in range(nout):
                b.env[first + k] = b.graph.call_function(operator.getitem, (node, k))
    results = []
    float_outputs = []
    for k, v in enumerate(outputs):
        node = b.env.get(v)
        if v in float_values:
            node = b.graph.call_function(torch.scalar_tensor, (node,), {"dtype": torch.float64})
            float_outputs.append(k)
        results.append(node)
    b.graph.output(tuple(results))
    gm = torch.fx.GraphModule(b.root, b.graph)   # class GraphModule, as torch names it
    gm.meta["shapejit_graph"] = graph
    if size_inputs:
        gm.meta["shapejit_size_inputs"] = spec
        gm.meta["shapejit_float_outputs"] = float_outputs
    return gm
