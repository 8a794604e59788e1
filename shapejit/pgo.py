"""Profile-guided automatic dynamic ("PGO"): what automatic dynamic learned, kept across runs.

Why: automatic dynamic makes a dim (or an int argument) dynamic only after it has changed,
so every run pays one recompile per varying dim. With PGO on, the C compiler records each
code object's decisions here (``record``) and, at the next run of the same job, asks for
them before the first compile (``lookup``), so dims that varied before are dynamic at once.

On when ``TORCH_COMPILE_JOB_ID`` is set and ``TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO=1``
(a file per job, ``path()``) and/or ``TORCH_DYNAMO_AUTOMATIC_DYNAMIC_REMOTE_PGO=1`` (knob
``automatic_dynamic_remote_pgo``: a Redis server shared by machines, shapejit/pgo_remote.py).
Never pickle: the store is JSON, validated on every read.

A code object is keyed as torch keys it, by what it is rather than where it lives:
(hash of its file's content, firstlineno, name, closure), so a job restarted from another
checkout finds its profile. The hash is the path itself for a file that cannot be read
("<string>"); the closure part is None without a closure, else a digest of what its cells
hold (for a function: its file hash, first line and qualified name; other values count as
"something"), stable across processes. The path first seen is kept for display. Its frame
state maps a source (``"L['x']"``) to an entry:

    {"kind": "tensor", "size": [4, None], "stride": [None, 1]}   # None: dynamic ("?")
    {"kind": "scalar", "value": 5}                               # None: dynamic
    {"kind": "dynamic"}                # rank or kind changed: fully dynamic scalar or tensor

Merging is a join: equal values stay, different ones (or None on either side) become None,
a change of kind or rank makes the entry fully dynamic. So merges commute, and a record
merges with whatever another process wrote meanwhile (under a lock on the directory). The
file is rewritten only when the merged content differs from it, atomically (temp file in
the same directory, fsync, os.replace). A corrupt or foreign file is ignored with one
warning and overwritten on the next record; I/O errors warn once and never raise. Files
of version 1 (keyed by path) are still read: each path is hashed as it is now.

With both local and remote on, the profile used is the join of the two (a dim dynamic in
either is dynamic), and each record goes to both.

Log lines (channel ``dynamic``, e.g. ``TORCH_LOGS=dynamic``), named as torch's trace
artifacts: ``get_local_code_state``, ``put_local_code_state_``, ``get_remote_code_state``,
``put_remote_code_state_``.

Human-readable form: ``format_state()``, ``show()``, ``python -m shapejit.pgo [PATH | --remote]``.
"""
import contextlib
import hashlib
import json
import logging
import math
import os
import re
import stat
import sys
import tempfile
import threading
import types
import warnings

try:
    import fcntl
except ImportError:  # not POSIX: no cross-process lock
    fcntl = None

FORMAT = "shapejit-pgo"
VERSION = 2          # 1: codes keyed by path (still read)
JOB_ENV = "TORCH_COMPILE_JOB_ID"
ENABLE_ENV = "TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO"
REMOTE_ENV = "TORCH_DYNAMO_AUTOMATIC_DYNAMIC_REMOTE_PGO"   # sets the knob at import
REMOTE_KNOB = "automatic_dynamic_remote_pgo"

_lock = threading.Lock()
_cache = None      # _Store of the current path (the only cache)
_warned = set()    # keys of one-time warnings already given
_hashes = {}       # path -> (stat identity, content hash)
_log = logging.getLogger("shapejit.dynamic")


class _Corrupt(Exception):
    """The file's content is not a valid store (the message says what is wrong)."""


class _Store:
    """What this process knows of one job's profile: ``disk`` the local file as last read
    (None: missing or invalid), ``stat`` the identity of that read, ``mem`` everything known
    (disk + remote + records), ``paths`` the file path shown for each code key, ``remote``
    the job's pgo_remote.Remote once used."""

    def __init__(self, path):
        self.path = path
        self.stat = None
        self.disk = None
        self.mem = {}
        self.paths = {}
        self.remote = None


def _warn_once(key, message):
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, UserWarning, stacklevel=3)


# --- environment ---------------------------------------------------------------------

def local_enabled():
    """True when TORCH_COMPILE_JOB_ID is non-empty and TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO
    is on ("1"/"true"). A malformed value warns once and counts as off."""
    if not os.environ.get(JOB_ENV):
        return False
    value = os.environ.get(ENABLE_ENV, "")
    flag = value.lower()
    if flag in ("1", "true"):
        return True
    if flag not in ("", "0", "false"):
        _warn_once(("env", value), "%s=%r is not one of 0, 1, true, false; PGO is off"
                   % (ENABLE_ENV, value))
    return False


def remote_enabled():
    """True when TORCH_COMPILE_JOB_ID is non-empty and the knob automatic_dynamic_remote_pgo
    is on (TORCH_DYNAMO_AUTOMATIC_DYNAMIC_REMOTE_PGO=1 at import, or set later)."""
    if not os.environ.get(JOB_ENV):
        return False
    try:
        from . import config  # noqa: F401  (applies the environment to the knobs)
        from . import _C
        return bool(_C.config_get(REMOTE_KNOB))
    except (ImportError, AttributeError, KeyError, ValueError):
        return False


def enabled():
    """True when local or remote PGO is on (see local_enabled, remote_enabled)."""
    return local_enabled() or remote_enabled()


def _cache_dir():
    explicit = os.environ.get("SHAPEJIT_CACHE_DIR")
    if explicit:
        return explicit
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return os.path.join(xdg, "shapejit")
    return os.path.join(os.path.expanduser("~"), ".cache", "shapejit")


def safe_job(job):
    """The job id with characters outside [A-Za-z0-9_.-] replaced by "_" (file and key names)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", job)


def path():
    """The current job's store: <cache dir>/pgo/code_state_<job id>.json (the job id with
    characters outside [A-Za-z0-9_.-] replaced by "_"). RuntimeError without a job id."""
    job = os.environ.get(JOB_ENV)
    if not job:
        raise RuntimeError("%s is not set: there is no PGO store" % JOB_ENV)
    return os.path.join(_cache_dir(), "pgo", "code_state_%s.json" % safe_job(job))


# --- code identity -------------------------------------------------------------------

def file_hash(filename):
    """"sha256:<hex>" of the content of the file ``filename`` (cached while its stat does not
    change), or ``filename`` itself when it is not a readable regular file ("<string>")."""
    try:
        st = os.stat(filename)
    except (OSError, ValueError, TypeError):
        return filename
    if not stat.S_ISREG(st.st_mode):
        return filename
    ident = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    hit = _hashes.get(filename)
    if hit is not None and hit[0] == ident:
        return hit[1]
    h = hashlib.sha256()
    try:
        with open(filename, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return filename
    digest = "sha256:" + h.hexdigest()[:32]
    _hashes[filename] = (ident, digest)
    return digest


def closure_key(closure):
    """None without a closure; else a digest of what the cells hold: a function (or a
    method's function) counts by its file hash, first line and qualified name, anything
    else (or an empty cell) as "something". Only attributes of functions are read, so no
    user code runs."""
    if not closure:
        return None
    if not isinstance(closure, tuple):
        raise TypeError("a closure is a tuple of cells, got %s" % type(closure).__name__)
    parts = []
    for cell in closure:
        try:
            value = cell.cell_contents if isinstance(cell, types.CellType) else None
        except ValueError:  # an empty cell
            value = None
        if isinstance(value, types.MethodType):
            value = value.__func__
        if isinstance(value, types.FunctionType):
            code = value.__code__
            parts.append([file_hash(code.co_filename), code.co_firstlineno, code.co_qualname])
        else:
            parts.append(None)
    return "sha256:" + hashlib.sha256(json.dumps(parts).encode("utf-8")).hexdigest()[:16]


# --- validation and merging ----------------------------------------------------------

def _is_int(x):
    return type(x) is int


def _is_finite_float(x):
    return type(x) is float and math.isfinite(x)


def _check_dims(dims, where, allow_negative):
    if not isinstance(dims, (list, tuple)):
        raise _Corrupt("%s is not a list" % where)
    for d in dims:
        if d is not None and (not _is_int(d) or (d < 0 and not allow_negative)):
            raise _Corrupt("%s has %r (not an int%s or null)"
                           % (where, d, "" if allow_negative else " >= 0"))
    return list(dims)


def _check_entry(entry, where):
    """A validated, fresh copy of one entry."""
    if not isinstance(entry, dict):
        raise _Corrupt("%s is not an object" % where)
    kind = entry.get("kind")
    keys = {"tensor": {"kind", "size", "stride"}, "scalar": {"kind", "value"},
            "dynamic": {"kind"}}.get(kind) if isinstance(kind, str) else None
    if keys is None:
        raise _Corrupt("%s has kind %r (not tensor, scalar or dynamic)" % (where, kind))
    if set(entry) != keys:
        raise _Corrupt("%s (kind %s) has keys %s, expected %s"
                       % (where, kind, sorted(entry), sorted(keys)))
    if kind == "dynamic":
        return {"kind": "dynamic"}
    if kind == "scalar":
        value = entry["value"]
        if value is not None and not (_is_int(value) or _is_finite_float(value)):
            raise _Corrupt("%s has value %r (not an int, a float or null)" % (where, value))
        return {"kind": "scalar", "value": value}
    size = _check_dims(entry["size"], where + " size", False)
    stride = _check_dims(entry["stride"], where + " stride", True)
    if len(size) != len(stride):
        raise _Corrupt("%s has %d sizes but %d strides" % (where, len(size), len(stride)))
    return {"kind": "tensor", "size": size, "stride": stride}


def _check_state(state, where):
    """A validated, fresh copy of one frame state."""
    if not isinstance(state, dict):
        raise _Corrupt("%s is not an object" % where)
    out = {}
    for source, entry in state.items():
        if not isinstance(source, str):
            raise _Corrupt("%s has a non-string source %r" % (where, source))
        out[source] = _check_entry(entry, "%s[%r]" % (where, source))
    return out


def _check_header(doc, job, versions=(1, VERSION)):
    if not isinstance(doc, dict):
        raise _Corrupt("the top level is not an object")
    if doc.get("format") != FORMAT:
        raise _Corrupt("format is %r, not %r" % (doc.get("format"), FORMAT))
    if not _is_int(doc.get("version")) or doc["version"] not in versions:
        raise _Corrupt("version is %r, not %s"
                       % (doc.get("version"), " or ".join(map(str, versions))))
    if not isinstance(doc.get("job_id"), str):
        raise _Corrupt("job_id is %r, not a string" % (doc.get("job_id"),))
    if job is not None and doc["job_id"] != job:
        raise _Corrupt("it belongs to job %r, not to this job %r" % (doc["job_id"], job))


def check_code(item, where):
    """(key, file, state) of a version-2 code record {file, hash, line, name, closure,
    state}; _Corrupt naming ``where`` when it is not one."""
    fields = {"file", "hash", "line", "name", "closure", "state"}
    if not isinstance(item, dict) or set(item) != fields:
        raise _Corrupt("%s is not an object with keys %s" % (where, ", ".join(sorted(fields))))
    key = (item["hash"], item["line"], item["name"], item["closure"])
    if not (isinstance(item["file"], str) and isinstance(key[0], str) and _is_int(key[1])
            and key[1] >= 0 and isinstance(key[2], str)
            and (key[3] is None or isinstance(key[3], str))):
        raise _Corrupt("%s has file/hash/line/name/closure %r" % (where, (item["file"],) + key))
    return key, item["file"], _check_state(item["state"], where + " state")


def _parse(doc, job=None):
    """({code key: state}, {code key: file}) of a loaded document; _Corrupt if it is not a
    valid store (or, with ``job``, belongs to another job). Version 1 keyed codes by path:
    each path is hashed as the file is now."""
    _check_header(doc, job)
    if set(doc) != {"format", "version", "job_id", "codes"}:
        raise _Corrupt("top-level keys are %s" % sorted(doc))
    if not isinstance(doc["codes"], list):
        raise _Corrupt("codes is not a list")
    codes, paths, seen = {}, {}, set()
    for i, item in enumerate(doc["codes"]):
        where = "codes[%d]" % i
        if doc["version"] == 1:
            if not isinstance(item, dict) or set(item) != {"file", "line", "name", "state"}:
                raise _Corrupt("%s is not an object with keys file, line, name, state" % where)
            raw = (item["file"], item["line"], item["name"])
            if not (isinstance(raw[0], str) and _is_int(raw[1]) and raw[1] >= 0
                    and isinstance(raw[2], str)):
                raise _Corrupt("%s has file/line/name %r" % (where, raw))
            key, file = (file_hash(raw[0]), raw[1], raw[2], None), raw[0]
            state = _check_state(item["state"], where + " state")
        else:
            key, file, state = check_code(item, where)
            raw = key
        if raw in seen:
            raise _Corrupt("%s repeats code %s:%d:%s" % (where, file, key[1], key[2]))
        seen.add(raw)
        # two paths of one content (version 1) are one code now
        codes[key] = _merge_state(codes.get(key), state)
        paths.setdefault(key, file)
    return codes, paths


def _join(a, b):
    return a if a == b else None


def _merge_entry(a, b):
    if a == b:
        return _check_entry(a, "")
    if a["kind"] != b["kind"] or a["kind"] == "dynamic":
        return {"kind": "dynamic"}
    if a["kind"] == "scalar":
        return {"kind": "scalar", "value": None}
    if len(a["size"]) != len(b["size"]):
        return {"kind": "dynamic"}
    return {"kind": "tensor",
            "size": [_join(x, y) for x, y in zip(a["size"], b["size"])],
            "stride": [_join(x, y) for x, y in zip(a["stride"], b["stride"])]}


def _merge_state(a, b):
    out = dict(_check_state(a or {}, ""))
    for source, entry in b.items():
        out[source] = _merge_entry(out[source], entry) if source in out else \
            _check_entry(entry, "")
    return out


def _merge_codes(a, b):
    out = dict(a)
    for key, state in b.items():
        out[key] = _merge_state(out.get(key), state)
    return out


# --- the file ------------------------------------------------------------------------

def _read(p, job=None):
    """((codes, paths), stat identity) of the file at ``p``. (None, None) when it is
    missing; _Corrupt when it is invalid; OSError for other I/O failures."""
    try:
        f = open(p, "rb")
    except (FileNotFoundError, NotADirectoryError):  # no such file
        return None, None
    with f:
        st = os.fstat(f.fileno())
        raw = f.read()
    ident = (st.st_ino, st.st_size, st.st_mtime_ns)
    try:
        try:
            doc = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError) as e:  # includes JSON and UTF-8 decode errors
            raise _Corrupt("not valid JSON (%s)" % e) from None
        return _parse(doc, job), ident
    except _Corrupt as e:
        e.ident = ident  # which version of the file was bad
        raise


def _identity(p):
    try:
        st = os.stat(p)
    except (FileNotFoundError, NotADirectoryError):  # no such file
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _store():
    """The cache for the current job: with local PGO on, the file re-read when it changed
    since the last read; with remote PGO on, the server's profile read once. What is read
    is merged into what this process knows. Call with _lock held."""
    global _cache
    p = path()
    if _cache is None or _cache.path != p:
        _cache = _Store(p)
    store = _cache
    if local_enabled():
        _load_local(store)
    if remote_enabled():
        _load_remote(store)
    return store


def _merge_into(store, codes, paths):
    store.mem = _merge_codes(store.mem, codes)
    for key, file in paths.items():
        store.paths.setdefault(key, file)


def _load_local(store):
    p = store.path
    try:
        if store.stat is not None and _identity(p) == store.stat:
            return
        try:
            disk, ident = _read(p, os.environ[JOB_ENV])
        except _Corrupt as e:
            # warn for each version of the file read (a rewritten file is re-read)
            store.disk, store.stat = None, e.ident
            warnings.warn("ignoring the PGO file %s: %s; it will be overwritten"
                          % (p, e), UserWarning, stacklevel=4)
            return
        store.disk, store.stat = (disk[0] if disk else None), ident
        if disk:
            _merge_into(store, *disk)
            _log.info("get_local_code_state %s: hit, %d entries", p, len(disk[0]))
    except OSError as e:
        store.disk, store.stat = None, None
        _warn_once(("read", p), "cannot read the PGO file %s: %s" % (p, e))


def _remote(store):
    from . import pgo_remote
    job = os.environ[JOB_ENV]
    if store.remote is None or store.remote.job != job:
        store.remote = pgo_remote.Remote(job)
    return store.remote


def _load_remote(store):
    remote = _remote(store)
    if remote.loaded:
        return
    got = remote.load()   # warns and returns {} on any trouble
    if got:
        _merge_into(store, {k: v[1] for k, v in got.items()}, {k: v[0] for k, v in got.items()})


def _sort_key(key, paths):
    return (paths.get(key, key[0]), key[1], key[2], key[0], key[3] or "")


def code_record(key, file, state):
    """The version-2 record of one code object (the file's "codes" item, a remote entry)."""
    return {"file": file, "hash": key[0], "line": key[1], "name": key[2], "closure": key[3],
            "state": {source: state[source] for source in sorted(state)}}


def _document(codes, paths, job):
    items = [code_record(key, paths.get(key, key[0]), codes[key])
             for key in sorted(codes, key=lambda k: _sort_key(k, paths))]
    return {"format": FORMAT, "version": VERSION, "job_id": job, "codes": items}


def _write_atomic(p, text):
    directory = os.path.dirname(p)
    fd, tmp = tempfile.mkstemp(prefix=".code_state_", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def _dir_locked(directory):
    """An exclusive flock on the directory itself (serialises read-merge-write across
    processes; leaves no lock file behind)."""
    if fcntl is None:
        yield
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


# --- API -----------------------------------------------------------------------------

def _key(filename, firstlineno, name, closure=None):
    if not (isinstance(filename, str) and _is_int(firstlineno) and isinstance(name, str)):
        raise TypeError("a code object is keyed by (filename: str, firstlineno: int, "
                        "name: str), got %r" % ((filename, firstlineno, name),))
    return (file_hash(filename), firstlineno, name, closure_key(closure))


def lookup(filename, firstlineno, name, closure=None):
    """The saved frame state of that code object (a fresh dict), or None when PGO is off or
    nothing is saved for it. The code is found by its file's content, not its path."""
    if not enabled():
        return None
    key = _key(filename, firstlineno, name, closure)
    with _lock:
        state = _store().mem.get(key)
        return _check_state(state, "") if state is not None else None


def record(filename, firstlineno, name, state, closure=None):
    """Merge ``state`` into what is saved for that code object, and write the local file
    and/or the remote entry when their content changes. No-op when PGO is off. A malformed
    ``state`` raises ValueError; I/O and server problems only warn."""
    if not enabled():
        return
    key = _key(filename, firstlineno, name, closure)
    try:
        new = _check_state(state, "state")
    except _Corrupt as e:
        raise ValueError("pgo.record: %s" % e) from None
    with _lock:
        store = _store()
        _merge_into(store, {key: new}, {key: filename})
        if local_enabled():
            _put_local(store)
        if remote_enabled():
            remote = _remote(store)
            merged = remote.put(key, store.paths[key], store.mem[key])
            if merged is not None:
                _merge_into(store, {key: merged}, {})


def _put_local(store):
    p = store.path
    try:
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with _dir_locked(os.path.dirname(p)):
            _load_local(store)  # another process may have written since
            if store.mem == store.disk:
                return
            _write_atomic(p, json.dumps(_document(store.mem, store.paths, os.environ[JOB_ENV]),
                                        indent=1) + "\n")
            store.disk, store.stat = _merge_codes({}, store.mem), _identity(p)
            _log.info("put_local_code_state_: wrote %s, %d entries", p, len(store.mem))
    except OSError as e:
        _warn_once(("write", p), "cannot write the PGO file %s: %s" % (p, e))


# ---- the compiler's side: its frame state <-> this store's entries -------------------
# The compiler keeps, per code object, {source: [size or None, ...]} for tensors and
# {source: int or None} for ints (capture/symbolic.c). It calls these two at compile time
# when a job id is set (the pgo_load and pgo_save policies, registered by __init__.py); strides are not tracked there, so they are stored as unknown.

def load_frame_state(filename, firstlineno, name, closure=None):
    """The saved decisions of a code object as the compiler's frame state, or None."""
    if not enabled():
        return None
    state = lookup(filename, firstlineno, name, closure)
    _trace_state("get_local_code_state", only_once=True)
    if not state:
        return None
    out = {}
    for src, entry in state.items():
        kind = entry.get("kind")
        if kind == "tensor":
            out[src] = list(entry["size"])
        elif kind == "scalar":
            out[src] = entry["value"]
        else:
            out[src] = None   # fully dynamic
    return out


def save_frame_state(filename, firstlineno, name, fstate, closure=None):
    """Record the compiler's frame state for a code object (no-op when disabled)."""
    if not enabled() or not fstate:
        return
    state = {}
    for src, v in fstate.items():
        if isinstance(v, list):
            state[src] = {"kind": "tensor", "size": list(v), "stride": [None] * len(v)}
        elif v is None or _is_int(v) or _is_finite_float(v):   # float arguments too
            state[src] = {"kind": "scalar", "value": v}
    if state:
        record(filename, firstlineno, name, state, closure)
        _trace_state("put_local_code_state")


def dynamic_sources(codes):
    """The sources whose size, value or kind PGO saw change, in the order of
    format_state(): what TORCH_COMPILE_DYNAMIC_SOURCES takes to compile them dynamic from
    the first call."""
    out = []
    for key in sorted(codes):
        for source in sorted(codes[key]):
            entry = codes[key][source]
            if (entry["kind"] == "dynamic" or (entry["kind"] == "scalar" and entry["value"] is None)
                    or (entry["kind"] == "tensor" and None in entry["size"])):
                if source not in out:
                    out.append(source)
    return out


def render_for_trace(codes, paths=None):
    """The store as the structured trace's PGO artifact shows it: format_state()'s form
    (``paths``: the file each code key was last seen at, as the store keeps them), then
    the dynamic sources as a TORCH_COMPILE_DYNAMIC_SOURCES value ready to copy."""
    text = _format_codes(codes, paths or {}).rstrip("\n")
    sources = dynamic_sources(codes)
    if sources:
        text += ("\n\nDynamic sources (varied between calls; set them dynamic from the first "
                 "compile with):\nTORCH_COMPILE_DYNAMIC_SOURCES=\"%s\"" % ",".join(sources))
    return text


def _trace_state(name, only_once=False):
    """Writes the store as a PGO artifact of the structured trace, when one is open."""
    trace = sys.modules.get("shapejit.trace")
    if trace is None or not trace.active():
        return
    if only_once and not trace.pgo_loaded_once():
        return   # the store as this process first found it, or nothing if it was empty
    with _lock:
        store = _store()
        codes, paths = _merge_codes({}, store.mem), dict(store.paths)
    if not codes:
        return
    trace.artifact(name, render_for_trace(codes, paths))


def _format_entry(entry):
    def dims(values):
        return "[%s]" % ", ".join("?" if v is None else str(v) for v in values)
    if entry["kind"] == "dynamic":
        return "fully dynamic scalar or tensor"
    if entry["kind"] == "scalar":
        return "scalar %s" % ("?" if entry["value"] is None else entry["value"])
    return "tensor size=%s stride=%s" % (dims(entry["size"]), dims(entry["stride"]))


def _format_codes(codes, paths):
    lines = []
    for key in sorted(codes, key=lambda k: _sort_key(k, paths)):
        lines.append("%s:%d:%s:" % (paths.get(key, key[0]), key[1], key[2]))
        state = codes[key]
        lines.extend("  %s: %s" % (s, _format_entry(state[s])) for s in sorted(state))
    return "".join(line + "\n" for line in lines)


def format_state(data=None):
    """The human-readable form: for each code object (sorted) a line ``file:line:name:``
    then ``  <source>: <entry>`` per source (sorted). ``data``: a store document (as in
    the file), a {(file, line, name): state} mapping, or None for the current job's store."""
    if data is None:
        with _lock:
            store = _store()
            return _format_codes(store.mem, store.paths)
    if isinstance(data, dict) and "format" in data:
        try:
            return _format_codes(*_parse(data))
        except _Corrupt as e:
            raise ValueError("not a PGO store: %s" % e) from None
    codes, paths = {}, {}
    for key, state in data.items():
        if not (isinstance(key, tuple) and len(key) == 3):
            raise TypeError("format_state: keys are (file, line, name), got %r" % (key,))
        full = (key[0], key[1], key[2], None)
        codes[full], paths[full] = _check_state(state, ""), key[0]
    return _format_codes(codes, paths)


def _describe(p=None):
    """(text, ok): the human-readable form of the file at ``p`` (default: the current
    job's), or a message saying why there is none."""
    if p is None:
        if not os.environ.get(JOB_ENV):
            return ("no PGO file: %s is not set (give a path: python -m shapejit.pgo PATH)"
                    % JOB_ENV, False)
        p = path()
    try:
        got, _ = _read(p)
    except _Corrupt as e:
        return "the PGO file %s is corrupt: %s" % (p, e), False
    except OSError as e:
        return "cannot read the PGO file %s: %s" % (p, e), False
    if got is None:
        return "no PGO file at %s" % p, False
    if not got[0]:
        return "the PGO file %s records no code objects" % p, True
    return _format_codes(*got).rstrip("\n"), True


def show(path=None, file=None):
    """Print the human-readable form of the store at ``path`` (default: the current job's)
    to ``file`` (default sys.stdout); a missing or corrupt file is said so. Returns True
    when a valid store was shown."""
    text, ok = _describe(path)
    print(text, file=file if file is not None else sys.stdout)
    return ok


def _describe_remote():
    """(text, ok): the human-readable form of the current job's remote profile, or why
    there is none (the server's problems also warn)."""
    job = os.environ.get(JOB_ENV)
    if not job:
        return "no remote PGO profile: %s is not set" % JOB_ENV, False
    from . import pgo_remote
    remote = pgo_remote.Remote(job)
    got = remote.load()
    if remote.down:
        return "cannot read the remote PGO profile (%s): %s" % (remote.where(), remote.down), False
    if not got:
        return "no remote PGO profile for job %r (%s)" % (job, remote.where()), False
    return _format_codes({k: v[1] for k, v in got.items()},
                         {k: v[0] for k, v in got.items()}).rstrip("\n"), True


def main(argv=None):
    """``python -m shapejit.pgo [PATH | --remote]``: 0 after printing a store, 1 for a
    missing or corrupt one (the message on stderr), 2 for bad arguments."""
    args = sys.argv[1:] if argv is None else list(argv)
    if len(args) > 1 or (args and args[0].startswith("-") and args[0] != "--remote"):
        print("usage: python -m shapejit.pgo [PATH | --remote]  (default: the file of the job "
              "in %s; --remote: its profile on the Redis server at %s)"
              % (JOB_ENV, "TORCHINDUCTOR_REDIS_HOST/PORT"), file=sys.stderr)
        return 0 if args and args[0] in ("-h", "--help") else 2
    if args == ["--remote"]:
        text, ok = _describe_remote()
    else:
        text, ok = _describe(args[0] if args else None)
    print(text, file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


def _reset():
    """Forget the cache and the one-time warnings (for tests)."""
    global _cache
    with _lock:
        _cache = None
        _warned.clear()
        _hashes.clear()


if __name__ == "__main__":
    sys.exit(main())
