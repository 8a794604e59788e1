"""mark_dynamic, maybe_mark_dynamic, mark_static, mark_unbacked.

A mark is a set of dim indices stored on the tensor under the attribute names torch's own
marking functions use (``_dynamo_dynamic_indices``, ``_dynamo_weak_dynamic_indices``,
``_dynamo_static_indices``, ``_dynamo_unbacked_indices``, and ``_dynamo_dynamic_range``
for mark_dynamic's min/max), so a tensor marked by either library is read the same way by
the compiler (capture/symbolic.c) at the next compile that sees it.
"""
import operator
import sys


def _add(t, attr, dims):
    marks = getattr(t, attr, None)
    if not isinstance(marks, set):
        marks = set(marks) if marks else set()
    marks.update(dims)
    setattr(t, attr, marks)


def _check_tensor(name, t):
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(t, torch.Tensor):
        raise TypeError("shapejit.%s expects a torch.Tensor as its first argument, got %s"
                        % (name, type(t).__name__))


def _check_dims(name, t, dim, allow_none=False):
    """The dims as a list of ints in [0, rank); None (all dims) when allowed."""
    if dim is None:
        if allow_none:
            return None
        raise TypeError("shapejit.%s: dim is required (an int or a list of ints)" % name)
    dims = list(dim) if isinstance(dim, (list, tuple)) else [dim]
    rank = t.dim()
    out = []
    for d in dims:
        if isinstance(d, bool):
            raise TypeError("shapejit.%s: dim must be an int, got bool" % name)
        try:
            d = operator.index(d)
        except TypeError:
            raise TypeError("shapejit.%s: dim must be an int or a list of ints, got %s"
                            % (name, type(d).__name__)) from None
        if not -rank <= d < rank:
            raise IndexError("shapejit.%s: dim %d is out of range for a tensor of rank %d "
                             "(valid: %d to %d)" % (name, d, rank, -rank, rank - 1)
                             if rank else
                             "shapejit.%s: dim %d is out of range: the tensor has rank 0 "
                             "(no dims)" % (name, d))
        out.append(d % rank)
    return out


def _check_bound(name, which, v):
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError("shapejit.%s: %s must be an int or None, got %s"
                        % (name, which, type(v).__name__))
    if v < 0:
        raise ValueError("shapejit.%s: %s must be >= 0, got %d" % (name, which, v))
    return v


def _mark_with_range(name, t, dim, lo, hi, unsupported, attr, range_attr, default_lo):
    """Validates and records a mark with optional bounds: the dims go into attr, the bounds
    into range_attr as {dim: (min, max)}."""
    if unsupported:
        raise TypeError("shapejit.%s: unsupported argument(s) %s" % (name, ", ".join(sorted(unsupported))))
    _check_tensor(name, t)
    dims = _check_dims(name, t, dim)
    lo = _check_bound(name, "min", lo)
    hi = _check_bound(name, "max", hi)
    if lo is not None and hi is not None and lo > hi:
        raise ValueError("shapejit.%s: min (%d) is greater than max (%d)" % (name, lo, hi))
    _add(t, attr, dims)
    if lo is not None or hi is not None:
        ranges = dict(getattr(t, range_attr, None) or {})
        for d in dims:
            ranges[d] = (lo if lo is not None else default_lo, hi)
        setattr(t, range_attr, ranges)


def mark_dynamic(t, dim, min=None, max=None, **unsupported):
    """Marks dim(s) of t dynamic from the first compile, optionally within [min, max]."""
    _mark_with_range("mark_dynamic", t, dim, min, max, unsupported, "_dynamo_dynamic_indices",
                     "_dynamo_dynamic_range", 2)


def maybe_mark_dynamic(t, dim):
    """Like mark_dynamic, but never an error if the code specialises the dim."""
    _check_tensor("maybe_mark_dynamic", t)
    _add(t, "_dynamo_weak_dynamic_indices", _check_dims("maybe_mark_dynamic", t, dim))


def mark_static(t, dim=None):
    """Keeps dim(s) of t (all of them when dim is None) static."""
    torch = sys.modules.get("torch")
    if torch is not None and (isinstance(t, torch.nn.Module) or
                              (isinstance(t, type) and issubclass(t, torch.nn.Module))):
        if dim is not None:
            raise TypeError("shapejit.mark_static: dim makes no sense for a module")
        # a module or module class: under force_nn_module_property_static_shapes (the
        # default) the tensors it holds get static shapes, as a torch.nn module's do
        t._dynamo_marked_static = True
        return t
    _check_tensor("mark_static", t)
    dims = _check_dims("mark_static", t, dim, allow_none=True)
    _add(t, "_dynamo_static_indices", range(t.dim()) if dims is None else dims)
    return t


def mark_unbacked(t, dim, min=None, max=None, **unsupported):
    """Marks dim(s) of t unbacked: never assumed 0 or 1, no hint used for branching, no
    guard on the size (a branch on it breaks the graph); within [min, max] when given."""
    _mark_with_range("mark_unbacked", t, dim, min, max, unsupported, "_dynamo_unbacked_indices",
                     "_dynamo_unbacked_range", 0)
