"""The structured trace: ``TORCH_TRACE=<dir>`` (knob ``config.trace_dir``).

Each process writes one file in the directory, in the line format of torch's structured
trace, so the ``tlparse`` report tool renders it (``tlparse <file> -o out`` or
``tlparse <dir> --latest -o out``). A record is one line

    V<MMDD> <HH:MM:SS.micro> <pid> <site>:<line>] <JSON metadata>

followed, when the metadata has ``has_payload`` (the md5 of the payload), by the payload's
lines, each prefixed with a tab. Records made while a frame compiles carry its compile id
(``frame_id``, ``frame_compile_id``, ``attempt``: tlparse writes it ``[0/1]``). The site is
the C (or Python) place of shapejit that made the event, which tlparse shows as the
framework stack.

The compiler's C code reports events through one sink (core/trace.c); this module turns
them into torch's records:

- ``dynamo_start`` (the user stack of the compiled frame), ``dynamo_output_graph`` (the
  graph printout), ``dynamo_guards`` and ``dynamo_cpp_guards_str`` (the entry's guards),
  ``compilation_metrics`` (times, counts, the recompile reason, graph breaks, failures);
- artifacts ``recompile_reasons``, ``dynamo_graph_break_reason``, ``kernel_code`` (the C
  the cpu backend compiles), ``get_local_code_state`` / ``put_local_code_state`` (PGO,
  from shapejit.pgo) and ``torch_version``;
- symbolic shapes: ``create_symbol``, ``guard_added_fast``,
  ``symbolic_shape_specialization`` (with user and framework stacks).

Writing never breaks compilation: any error while tracing gives one warning and turns
tracing off for the rest of the process.
"""
import hashlib
import json
import os
import sys
import tempfile
import threading
import time
import traceback
import warnings

from . import _C

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_PKG_DIR)   # where the C sources' __FILE__ paths are relative to

_lock = threading.RLock()


class _State:
    def __init__(self, directory):
        self.dir = directory
        self.file = None        # opened on the first record (a process that compiles nothing writes nothing)
        self.path = None
        self.pid = None
        self.strings = {}       # interned file names: {name: index}
        self.recompile = {}     # (frame_id, frame_compile_id) -> reason, until its compile starts
        self.pgo_got = False    # get_local_code_state written (once per process, as torch)
        self.local = threading.local()   # per thread: the compile under way (threads compile apart)

    # (frame_id, frame_compile_id) of this thread's compile under way, or None
    cid = property(lambda self: getattr(self.local, "cid", None),
                   lambda self, v: setattr(self.local, "cid", v))
    # what this thread's compile under way gathered for its metrics, or None
    compile = property(lambda self: getattr(self.local, "compile", None),
                       lambda self, v: setattr(self.local, "compile", v))


_state = None


def active():
    """True while a trace is being written."""
    return _state is not None


def path():
    """The file this process writes (None before its first record or when off)."""
    return _state.path if _state else None


# --- the file --------------------------------------------------------------------------

def _open(st):
    os.makedirs(st.dir, exist_ok=True)
    fd, p = tempfile.mkstemp(prefix="dedicated_log_torch_trace_", suffix=".log", dir=st.dir)
    st.file = os.fdopen(fd, "w", encoding="utf-8")
    st.path = p
    st.pid = os.getpid()
    st.strings = {}    # a new file (a forked child's too) starts its own table
    torch = sys.modules.get("torch")
    version = getattr(torch, "__version__", None) if torch else None
    if version is not None:
        _write(st, {"artifact": {"name": "torch_version", "encoding": "json"}},
               json.dumps({"pytorch_version": str(version), "shapejit": True}, indent=0),
               site=("shapejit/trace.py", 0), context=False)


def _ensure_open(st):
    if st.file is None or st.pid != os.getpid():
        _open(st)


def _write(st, record, payload=None, site=("shapejit/trace.py", 0), context=True):
    _ensure_open(st)
    if context and st.cid is not None:
        record["frame_id"], record["frame_compile_id"] = st.cid
        record["attempt"] = 0
    if payload is not None:
        record["has_payload"] = hashlib.md5(payload.encode("utf-8"), usedforsecurity=False).hexdigest()
    now = time.time()
    lt = time.localtime(now)
    prefix = "V%s.%06d %d %s:%d]" % (time.strftime("%m%d %H:%M:%S", lt), int((now % 1) * 1e6), st.pid,
                                      site[0], site[1])
    line = "%s %s" % (prefix, json.dumps(record, default=repr))
    if payload is not None:
        line += "".join("\n\t" + part for part in payload.split("\n"))
    st.file.write(line + "\n")
    st.file.flush()


def _intern(st, filename):
    _ensure_open(st)   # before the lookup: opening starts a new table
    idx = st.strings.get(filename)
    if idx is None:
        idx = st.strings[filename] = len(st.strings)
        _write(st, {"str": [filename, idx]}, context=False)
    return idx


def _frames(st, frames):
    """StackSummary entries of (file, line, function, text) tuples."""
    return [{"line": line, "name": name, "filename": _intern(st, filename), "loc": text}
            for filename, line, name, text in frames]


def _site_frame(st, site):
    """The framework stack of a C event: the C function that made it."""
    filename, line, func = site
    return [{"line": line, "name": func, "filename": _intern(st, _site_name(filename)), "loc": None}]


def _site_name(filename):
    if os.path.isabs(filename):
        try:
            return "shapejit/" + os.path.relpath(filename, _ROOT)
        except ValueError:
            return filename
    return "shapejit/" + filename


_SKIP_DIRS = tuple(d + os.sep for d in (_PKG_DIR, os.path.dirname(os.__file__)))


def _user_stack():
    """The user frames calling into the compiler now, outermost first: shapejit's own frames
    and the standard library's are left out (torch's are kept only outside torch)."""
    torch = sys.modules.get("torch")
    skip = _SKIP_DIRS
    if torch is not None and getattr(torch, "__file__", None):
        skip = skip + (os.path.dirname(torch.__file__) + os.sep,)
    out = []
    for fs in traceback.extract_stack(sys._getframe(2)):
        if fs.filename.startswith(skip) or fs.filename.startswith("<frozen"):
            continue
        out.append((fs.filename, fs.lineno, fs.name, fs.line))
    return out


# --- events from C ---------------------------------------------------------------------

def _compile_start(st, site, code, frame_id, compile_id):
    st.cid = (frame_id, compile_id)
    stack = _user_stack() + [(code.co_filename, code.co_firstlineno, code.co_name, None)]
    st.compile = {"start": time.time(), "stack": stack, "graph": None, "guards": 0,
                  "restarts": [], "breaks": 0,
                  "recompile": st.recompile.pop((frame_id, compile_id), None)}
    frames = [{"line": line, "name": name, "filename": _intern(st, filename)}
              for filename, line, name, _ in stack]
    _write(st, {"dynamo_start": {"stack": frames}}, site=_site(site))


def _recompile(st, site, code, frame_id, compile_id, why):
    # one "- <entry id>: <failure>" line per cache entry that missed
    reasons = [line.strip()[2:] if line.strip().startswith("- ") else line.strip()
               for line in str(why).splitlines() if line.strip()] if why is not None else []
    reasons = reasons or ["unknown"]
    st.recompile[(frame_id, compile_id)] = "\n".join(reasons)
    saved, st.cid = st.cid, (frame_id, compile_id)
    try:
        _write(st, {"artifact": {"name": "recompile_reasons", "encoding": "json"}},
               json.dumps(reasons, indent=0), site=_site(site))
    finally:
        st.cid = saved


def _graph(st, site, graph):
    code = graph.code
    sizes = {}
    for line in code.splitlines():
        head = line.strip().split(" = ", 1)[0]
        if ": " in head and "[" in head and head.endswith("]"):
            name, ty = head.split(": ", 1)
            dims = ty[ty.index("[") + 1:-1]
            sizes[name] = [int(d) if d.strip().lstrip("-").isdigit() else d.strip()
                           for d in dims.split(",") if d.strip()]
    if st.compile is not None:
        st.compile["graph"] = (graph.op_count, len(graph.nodes), len(graph.inputs), sizes)
    _write(st, {"dynamo_output_graph": {"sizes": sizes}}, code, site=_site(site))


def _guards(st, site, lines, tree):
    if st.compile is not None:
        st.compile["guards"] = len(lines)
    _write(st, {"dynamo_guards": {}}, "[\n" + ",\n".join(json.dumps({"code": str(g)}) for g in lines) + "\n]",
           site=_site(site))
    _write(st, {"dynamo_cpp_guards_str": {}}, str(tree), site=_site(site))


def _graph_break(st, site, reason, stack, code):
    frames = list(stack) if stack else []
    if frames:
        top = frames[-1]
        head = "Graph break in user code at %s:%s" % (top[0], top[1])
    else:
        head = "Graph break in %s (%s:%d)" % (code.co_qualname, code.co_filename, code.co_firstlineno)
    text = "%s\nGraph Break Reason: %s" % (head, reason)
    if frames:
        text += "\nUser code traceback:\n" + "".join(
            '  File "%s", line %s, in %s\n    %s\n' % f for f in frames).rstrip("\n")
    if st.compile is not None:
        st.compile["restarts"].append(str(reason))
        st.compile["breaks"] += 1
    _write(st, {"artifact": {"name": "dynamo_graph_break_reason", "encoding": "string"}}, text,
           site=_site(site))


def _create_symbol(st, site, symbol, hint, vr, source, stack):
    _write(st, {"create_symbol": {"symbol": "s%d" % symbol, "val": str(hint), "vr": str(vr),
                                  "source": str(source), "user_stack": _frames(st, stack),
                                  "stack": _site_frame(st, site)}}, site=_site(site))


def _guard_added(st, site, expr, stack):
    _write(st, {"guard_added_fast": {"expr": str(expr), "user_stack": _frames(st, stack),
                                     "stack": _site_frame(st, site)}}, site=_site(site))


def _specialize(st, site, symbol, source, value, why, stack):
    _write(st, {"symbolic_shape_specialization": {
        "symbol": str(symbol), "sources": [str(source)], "value": repr(value), "reason": str(why),
        "stack": _site_frame(st, site), "user_stack": _frames(st, stack)}}, site=_site(site))


def _kernel_code(st, site, tag, code, digest):
    _write(st, {"artifact": {"name": "kernel_code", "encoding": "string"}},
           "// %s, kernel cache entry %s\n%s" % (tag, digest, code), site=_site(site))


def _compile_end(st, site, code, frame_id, compile_id, status, reason, graph, nshape_guards, nentries,
                 accumulated, backend_s, total_s, exc):
    info = st.compile or {"start": time.time() - total_s, "stack": [], "graph": None, "guards": 0,
                          "restarts": [], "breaks": 0, "recompile": None}
    st.cid = (frame_id, compile_id)
    ops, nodes, inputs, sizes = info["graph"] or (0, 0, 0, {})
    restarts = list(info["restarts"])
    if status == "eager" and reason is not None and not restarts and str(reason) != "no tensor ops in the frame":
        restarts.append(str(reason))
    inserted = status != "error"
    metrics = {
        "compile_id": "%d/%d" % (frame_id, compile_id),
        "co_name": code.co_name,
        "co_filename": code.co_filename,
        "co_firstlineno": code.co_firstlineno,
        "cache_size": max(nentries - 1, 0) if inserted else nentries,
        "accumulated_cache_size": max(accumulated - 1, 0) if inserted else accumulated,
        "guard_count": info["guards"],
        "shape_env_guard_count": nshape_guards,
        "graph_op_count": ops,
        "graph_node_count": nodes,
        "graph_input_count": inputs,
        "start_time": info["start"],
        "entire_frame_compile_time_s": round(total_s, 6),
        "backend_compile_time_s": round(backend_s, 6),
        "inductor_compile_time_s": None,
        "code_gen_time_s": None,
        "fail_type": type(exc).__name__ if exc is not None else None,
        "fail_reason": str(exc) if exc is not None else None,
        "fail_user_frame_filename": None,
        "fail_user_frame_lineno": None,
        "non_compliant_ops": [],
        "compliant_custom_ops": [],
        "restart_reasons": restarts,
        "dynamo_time_before_restart_s": 0.0,
        "stack_trace": ["Line: %s, Name: %s, Filename: %s" % (line, name, filename)
                        for filename, line, name, _ in info["stack"]],
        "graph_node_shapes": str(sizes),
        "has_guarded_code": inserted,
        "recompile_reason": info["recompile"],
        "num_graph_breaks": info["breaks"],
        "status": status,
        "config": json.dumps(_config_dict(), default=repr, sort_keys=True),
    }
    try:
        _write(st, {"compilation_metrics": metrics}, site=_site(site))
    finally:
        st.cid = None
        st.compile = None


def _config_dict():
    from . import config
    return config.to_dict()


def _site(site):
    return (_site_name(site[0]), site[1])


_HANDLERS = {
    "compile_start": _compile_start,
    "recompile": _recompile,
    "graph": _graph,
    "guards": _guards,
    "graph_break": _graph_break,
    "create_symbol": _create_symbol,
    "guard_added": _guard_added,
    "specialize": _specialize,
    "kernel_code": _kernel_code,
    "compile_end": _compile_end,
}


def _sink(kind, site, *args):
    st = _state
    if st is None:
        return
    with _lock:
        try:
            _HANDLERS[kind](st, site, *args)
        except Exception as e:   # never into the compiler: one warning, tracing off
            _disable("shapejit: the structured trace in %s stopped: %s: %s"
                     % (st.dir, type(e).__name__, e))


def _disable(message):
    global _state
    st, _state = _state, None
    _C.set_trace_sink(None)
    if st is not None and st.file is not None:
        try:
            st.file.close()
        except OSError:
            pass
    warnings.warn(message, RuntimeWarning, stacklevel=3)


# --- events from Python (shapejit.pgo) ---------------------------------------------------

def artifact(name, payload, encoding="string"):
    """Writes an artifact record (under the compile under way, if any). No-op when off."""
    st = _state
    if st is None:
        return
    caller = sys._getframe(1)
    site = (os.path.relpath(os.path.abspath(caller.f_code.co_filename), _ROOT), caller.f_lineno)
    with _lock:
        try:
            _write(st, {"artifact": {"name": name, "encoding": encoding}}, payload, site=site)
        except Exception as e:
            _disable("shapejit: the structured trace in %s stopped: %s: %s" % (st.dir, type(e).__name__, e))


def pgo_loaded_once():
    """True the first time it is asked in a traced process (get_local_code_state is
    written once, as torch does at its first lookup)."""
    st = _state
    if st is None or st.pgo_got:
        return False
    st.pgo_got = True
    return True


# --- switching on and off ----------------------------------------------------------------

def configure():
    """Opens or closes the trace to follow ``config.trace_dir`` (called at import and when
    the knob is set)."""
    global _state
    directory = _C.config_get("trace_dir")
    with _lock:
        if _state is not None and _state.dir == directory:
            return
        if _state is not None:
            old, _state = _state, None
            _C.set_trace_sink(None)
            if old.file is not None:
                try:
                    old.file.close()
                except OSError:
                    pass
        if directory:
            _state = _State(os.path.abspath(os.path.expanduser(directory)))
            _C.set_trace_sink(_sink)


configure()
