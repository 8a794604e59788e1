"""Compiler collective: the ranks of a torch.distributed job agree on automatic dynamic.

Why: automatic dynamic makes a dim dynamic only after this process has seen it change.
In an SPMD job every rank runs the same program on different data, so a batch size that
differs across ranks makes each rank compile a static graph first and recompile later,
when it meets a size that another rank already saw, and ranks compile at different
times. With ``enable_compiler_collectives`` on, every compile of a frame starts with an
exchange: each rank publishes what automatic dynamic knows of the frame's arguments (the
sizes of the tensors and the values of the ints among its arguments, also inside list,
tuple and dict arguments, joined with what earlier compiles of the frame saw), and every rank joins all of them. A dim that differs
across ranks is then dynamic on every rank, at the first compile, so ranks compile the
same graphs in the same order.

The exchange goes through the key-value store of the default process group (the one
``init_process_group`` made): rank r writes ``shapejit/cc/<n>/<r>`` (JSON, for its n-th
compile) and waits for the other ranks' keys with a timeout; right after the first capture
of that compile a second round (``exchange_traced``, keys ``shapejit/cc/<n>/traced/<r>``)
joins what the capture read beyond the arguments (attributes, globals, closures), and a
dim that differs there makes the compiler capture once more. Nothing is unpickled, no
backend collective runs (so a CPU-only exchange works under nccl too), and a rank that
does not compile costs the others at most ``compiler_collectives_timeout`` seconds: they
warn and compile with their own sizes. The compiler calls ``exchange`` from inside the
frame hook, where the hook is off, so torch.distributed's Python code runs eagerly.

No exchange happens when the knob is off, when torch.distributed was never imported or
has no default process group, or when the world size is 1.
"""
import json
import logging
import os
import sys
import threading
import time
import warnings

PREFIX = "shapejit/cc"

_seq = 0          # compiles that exchanged in the current process group
_group = None     # the default group _seq counts for (a new group starts over)
_this = threading.local()   # .last: (seq, every peer answered) of this thread's latest
                            # exchange, for the second round of the same compile


def _distributed():
    """(store, rank, world size, group) of the default process group, or None when there is no
    group of more than one rank. Never imports torch.distributed itself."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    world = dist.get_world_size()
    if world <= 1:
        return None
    from torch.distributed import distributed_c10d
    return distributed_c10d._get_default_store(), dist.get_rank(), world, dist.group.WORLD


def active():
    """True when a compile would exchange now (the knob is on and a default process group of
    more than one rank exists)."""
    from . import _C
    return bool(_C.config_get("enable_compiler_collectives")) and _distributed() is not None


def _join_entry(a, b):
    """The join of two frame-state entries: a list of sizes (None where they differ) for a
    tensor, a value (None once it differs) for an int, as the compiler merges them; a
    change of rank or kind makes every dim dynamic (the shape of ``a`` is kept)."""
    if isinstance(a, list):
        if isinstance(b, list) and len(a) == len(b):
            return [x if x is not None and x == y else None for x, y in zip(a, b)]
        return [None] * len(a)
    if isinstance(b, list):
        return None
    return a if a is not None and a == b else None


def _valid_entry(v):
    """An entry that came from another rank: a list of ints/None or an int/None."""
    if isinstance(v, list):
        return all(x is None or type(x) is int for x in v)
    return v is None or type(v) is int


_DEPTH = 3        # containers looked into below an argument (xs[0], batch["ids"][1])
_ENTRIES = 256    # sources sent per compile at most


def _walk(source, v, depth, out, torch):
    """Adds {source: entry} for v, a tensor (its sizes) or an int (its value), or for the
    tensors and ints inside v when it is a list, tuple or dict (named as the compiler names
    them: L['xs'][0], L['batch']['ids'])."""
    if len(out) >= _ENTRIES:
        return
    if torch is not None and isinstance(v, torch.Tensor):
        out[source] = [int(d) for d in v.shape]
    elif type(v) is int:
        out[source] = v
    elif depth > 0 and type(v) in (list, tuple):
        for i, item in enumerate(v[:_ENTRIES]):
            _walk("%s[%d]" % (source, i), item, depth - 1, out, torch)
    elif depth > 0 and type(v) is dict:
        for key, item in list(v.items())[:_ENTRIES]:
            if type(key) in (str, int):
                _walk("%s[%r]" % (source, key), item, depth - 1, out, torch)


def _local_state(fstate, names, values):
    """{source: entry} for the tensors and ints among the arguments (and inside list,
    tuple and dict arguments): now, joined with what automatic dynamic kept from earlier
    compiles (fstate, the compiler's dict or None); and the rest of what it kept (sources
    the arguments do not reach, such as attributes and globals, seen by earlier compiles),
    so that ranks agree on those from the second compile of a frame on."""
    out = {}
    torch = sys.modules.get("torch")
    for name, v in zip(names, values):
        _walk("L[%r]" % name, v, _DEPTH, out, torch)
    for source, old in (fstate or {}).items():
        if source in out:
            out[source] = _join_entry(out[source], old)
        elif len(out) < _ENTRIES and type(source) is str and _valid_entry(old):
            out[source] = list(old) if isinstance(old, list) else old
    return out


def _same_code(theirs, filename, firstlineno, name):
    """Whether a peer's [file, line, name] is this code: the same name, first line and file
    name (ranks may run the same script from different directories)."""
    return (isinstance(theirs, list) and len(theirs) == 3 and theirs[1:] == [firstlineno, name]
            and isinstance(theirs[0], str)
            and os.path.basename(theirs[0]) == os.path.basename(filename))


def _fail(code, what, then):
    warnings.warn("shapejit: compiler collective for %s: %s; %s (all ranks must compile the "
                  "same frames in the same order, see docs/distributed.md)"
                  % (code, what, then), UserWarning, stacklevel=3)


def _show(entry):
    if isinstance(entry, list):
        return "[%s]" % ", ".join("?" if d is None else str(d) for d in entry)
    return "?" if entry is None else str(entry)


def _log_join(code, ranks, local, merged):
    """On the dynamic channel (INFO): the sources the other ranks made dynamic, e.g.
    ``compiler collective for f (t.py:3) over 2 ranks: L['x'] [4, 8] -> [?, 8]``."""
    from . import _C, logs
    level = _C.log_levels().get("dynamic", 0)
    if not level or level > logging.INFO:
        return
    changed = ["%s %s -> %s" % (src, _show(local[src]), _show(merged[src]))
               for src in sorted(local) if merged.get(src) != local[src]]
    logs._sink("dynamic", logging.INFO, "compiler collective for %s over %d ranks: %s"
               % (code, ranks, "; ".join(changed) if changed else "the ranks agree"))


def _wait(store, keys, timeout):
    """True once every key is in the store, False past timeout seconds. Polls with short
    sleeps rather than blocking in store.wait: Ctrl-C stays prompt during a long wait (the
    sleep is where Python runs signal handlers), and a timeout is not a c10d error."""
    deadline = time.monotonic() + timeout
    delay = 0.0005
    while not store.check(keys):
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(delay, left))
        delay = min(delay * 2, 0.02)
    return True


def exchange(filename, firstlineno, name, fstate, names, values, timeout):
    """Called by the compiler at the start of each compile of a frame, with its code's
    identity, its frame state (dict or None), its argument names and values, and the
    timeout in seconds. Returns the new frame state (this rank's state joined with every
    rank's that compiled the same code), or None when no exchange took place (nothing
    changes then)."""
    global _seq, _group
    found = _distributed()
    if found is None:
        return None
    store, rank, world, group = found
    if group is not _group:
        _group, _seq = group, 0
    seq = _seq
    _seq += 1
    _this.last = None   # a store that fails here: no second round either
    code = "%s (%s:%d)" % (name, filename, firstlineno)
    state = _local_state(fstate, names, values)
    merged = _round(store, rank, world, "%s/%d" % (PREFIX, seq), filename, firstlineno, name, code,
                    fstate, state, timeout)
    _this.last = (seq, merged is not None)
    return merged


def _round(store, rank, world, prefix, filename, firstlineno, name, code, fstate, state, timeout,
           wait=True, log_agreement=True):
    """Publishes state under prefix/<rank>, waits for the other ranks' and returns fstate
    joined with all of them (None when a peer did not answer in time, or wait is False)."""
    payload = json.dumps({"code": [filename, firstlineno, name], "state": state})
    keys = ["%s/%d" % (prefix, r) for r in range(world)]
    store.set(keys[rank], payload)
    if not wait:
        return None
    others = [k for r, k in enumerate(keys) if r != rank]
    if not _wait(store, others, timeout):
        missing = [r for r, k in enumerate(keys) if r != rank and not store.check([k])]
        _fail(code, "rank(s) %s did not compile it within %s s "
              "(config.compiler_collectives_timeout)" % (", ".join(map(str, missing)), timeout),
              "this rank compiles with its own sizes only")
        return None
    merged = dict(fstate) if fstate else {}
    merged.update(state)
    strangers = []
    for r, raw in enumerate(store.multi_get(others)):
        peer = others[r].rsplit("/", 1)[1]
        try:
            doc = json.loads(bytes(raw).decode("utf-8"))
            if not _same_code(doc["code"], filename, firstlineno, name):
                strangers.append("%s compiled %s (%s:%s)" % (peer, doc["code"][2], doc["code"][0],
                                                            doc["code"][1]))
                continue
            theirs = doc["state"]
            if not isinstance(theirs, dict) or not all(map(_valid_entry, theirs.values())):
                raise ValueError("malformed state")
        except (ValueError, KeyError, IndexError, TypeError) as e:
            strangers.append("%s sent an unreadable entry (%s)" % (peer, e))
            continue
        for source, entry in theirs.items():
            if source in merged:
                merged[source] = _join_entry(merged[source], entry)
    if strangers:
        _fail(code, "rank " + "; rank ".join(strangers),
              "their sizes are not used" if len(strangers) < world - 1
              else "this rank compiles with its own sizes only")
    if log_agreement or any(merged.get(src) != state[src] for src in state):
        _log_join(code, world - len(strangers), state, merged)
    return merged


def exchange_traced(filename, firstlineno, name, before, fstate, timeout):
    """Called by the compiler right after the first capture of a compile that exchanged
    (``exchange``): the second round. ``before`` is the frame state the capture started
    from, ``fstate`` the one it left; their difference is what the capture read that the
    arguments did not reach (tensors held by attributes, globals, closures; ints among
    them). The ranks join those entries under ``<prefix>/<n>/traced/<rank>``, n being the
    first round's number, so the rounds of one compile match on every rank. Returns the
    joined frame state when a dim differs across ranks (the compiler then captures once
    more with it), else None. A rank whose first round timed out publishes its entry for
    its peers but does not wait for theirs."""
    found, last = _distributed(), getattr(_this, "last", None)
    _this.last = None
    if found is None or last is None:
        return None
    store, rank, world, _ = found
    seq, answered = last
    code = "%s (%s:%d)" % (name, filename, firstlineno)
    state = {}
    for source, entry in fstate.items():
        if (type(source) is str and _valid_entry(entry) and len(state) < _ENTRIES
                and (source not in before or before[source] != entry)):
            state[source] = list(entry) if isinstance(entry, list) else entry
    merged = _round(store, rank, world, "%s/%d/traced" % (PREFIX, seq), filename, firstlineno,
                    name, code, fstate, state, timeout, wait=answered, log_agreement=False)
    if merged is None or all(merged.get(s) == e for s, e in state.items()):
        return None
    return merged
