"""Python versions of torch functions whose own code the capture does not follow: capture
inlines these in their place (capture/polyfills.c reads POLYFILLS through the "polyfills"
policy, table), as torch.compile traces its polyfills. They never run outside a capture;
when capture cannot follow one, the call breaks and torch's own function runs."""
import torch

from . import _C


def table():
    """The polyfills as (module, name, function) rows: the one list of them."""
    return tuple((module, name, fn) for (module, name), fn in POLYFILLS.items())


def _leaves(tree):
    """The tensors of a tensor or a nested tuple / list of them, in order."""
    if isinstance(tree, (tuple, list)):
        out = []
        for item in tree:
            out.extend(_leaves(item))
        return out
    return [tree]


def _rebuild(tree, leaves, at=0):
    """tree with its leaves replaced, in order, by leaves[at:]; returns (tree, next)."""
    if isinstance(tree, (tuple, list)):
        items = []
        for item in tree:
            new, at = _rebuild(item, leaves, at)
            items.append(new)
        return (tuple(items) if isinstance(tree, tuple) else items), at
    return leaves[at], at + 1


# Scans of up to this many elements along a static dim run as a left fold: one combine_fn
# call per element, each on one element as torch's vmap gives it, which the cpu backend
# fuses into one kernel; longer or symbolic dims take the log-depth scan.
FOLD_MAX = 128


def associative_scan(combine_fn, xs, dim, reverse=False, combine_mode="pointwise"):
    """torch._higher_order_ops.associative_scan: an inclusive scan of xs (a tensor or a
    nested tuple / list of same-shaped tensors) along dim with combine_fn.

    Along a short static dim, a left fold: element i is combine_fn(result i-1, element
    i), combine_fn seeing one element at a time as under torch's vmap, so any combine_fn
    gives what torch's does (up to the order of an associative combination's rounding).
    Otherwise a log-depth (Hillis-Steele) scan: at offset 1, 2, 4, ... every element past
    the offset is combined with the one offset before it, combine_fn running on whole
    slices with the scan dim moved first; that agrees with vmap's one element at a time
    only for a pointwise combine_fn, which the capture checks (_C._pointwise_call),
    breaking otherwise."""
    leaves = _leaves(xs)
    if not callable(combine_fn) or not isinstance(dim, int) or not isinstance(reverse, bool):
        raise ValueError("associative_scan: combine_fn must be callable, dim an int, reverse a bool")
    if combine_mode not in ("pointwise", "generic") or not leaves:
        raise ValueError("associative_scan: combine_mode must be 'pointwise' or 'generic', xs not empty")
    if combine_mode == "pointwise" and not all(isinstance(leaf, torch.Tensor) and leaf.device.type in ("cuda", "xpu")
                                               for leaf in leaves):
        raise ValueError("For combine_mode='pointwise', all input tensors need to be on CUDA or XPU")
    for leaf in leaves:
        if not isinstance(leaf, torch.Tensor) or leaf.shape != leaves[0].shape:
            raise ValueError("associative_scan: the leaves of xs must be tensors of one shape")
    ndim = leaves[0].dim()
    if not -ndim <= dim < ndim:
        raise ValueError("associative_scan: dim out of range")
    dim = dim % ndim
    n = leaves[0].shape[dim]
    if n == 0:
        raise ValueError("associative_scan: the scan dim is empty")
    moved = [torch.movedim(leaf, dim, 0) for leaf in leaves]
    static_n = _C._static_int(n)
    if static_n is not None and static_n <= FOLD_MAX:
        order = range(static_n - 1, -1, -1) if reverse else range(static_n)
        acc, rows = None, [[] for _ in leaves]
        for i in order:
            here, _ = _rebuild(xs, [leaf[i] for leaf in moved])
            acc = _leaves(here) if acc is None else _leaves(combine_fn(_rebuild(xs, acc)[0], here))
            if len(acc) != len(leaves):
                raise ValueError("associative_scan: combine_fn must return a tree like xs")
            for row, a in zip(rows, acc):
                row.append(a)
        if reverse:
            rows = [row[::-1] for row in rows]
        out, _ = _rebuild(xs, [torch.stack(row, dim) for row in rows])
        return out
    leaves = [torch.flip(leaf, [0]) for leaf in moved] if reverse else moved
    offset = 1
    while offset < n:
        left, _ = _rebuild(xs, [leaf[:n - offset] for leaf in leaves])
        right, _ = _rebuild(xs, [leaf[offset:] for leaf in leaves])
        combined = _leaves(_C._pointwise_call(combine_fn, left, right))
        if len(combined) != len(leaves):
            raise ValueError("associative_scan: combine_fn must return a tree like xs")
        leaves = [torch.cat([leaf[:offset], c], 0) for leaf, c in zip(leaves, combined)]
        offset *= 2
    if reverse:
        leaves = [torch.flip(leaf, [0]) for leaf in leaves]
    out, _ = _rebuild(xs, [torch.movedim(leaf, 0, dim) for leaf in leaves])
    return out


POLYFILLS = {
    ("torch._higher_order_ops.associative_scan", "associative_scan"): associative_scan,
}
