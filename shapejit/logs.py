"""Log channels: ``shapejit.set_logs(...)`` and the ``TORCH_LOGS`` environment variable.

The channels are core/logs.def's (``_C.log_channels()``). C formats a message only when
its channel is on, and hands it to this module's sink, which logs it through
``logging.getLogger("shapejit.<channel>")``. The ``shapejit`` logger has its own stderr
handler (``[shapejit] <message>``), so messages show without any logging set-up; it does
not propagate to the root logger (configure ``logging.getLogger("shapejit")`` to redirect).

TORCH_LOGS="graph_breaks,+dynamic,-recompiles": a plain name turns the channel on at INFO,
``+name`` at DEBUG (everything), ``-name`` turns it off. Read once, at import.

TORCH_LOGS is torch's variable too, and a process that imports shapejit usually imports
torch, which parses it at its own import. So shapejit reads a name the way torch does:
- shapejit's channels, and torch's names for groups of them: ``all`` and ``torch`` (every
  channel), ``dynamo`` (every channel of the frontend: all but output_code), ``inductor``
  (output_code); ``+all`` / ``+dynamo`` put the group at DEBUG, ``-dynamo`` turns it off;
- torch's names for a more or less verbose form of a channel (``recompiles_verbose``,
  ``verbose_guards``, ``graph_code_verbose``, ``graph_sizes``, ``kernel_code``): that
  channel;
- any other name torch knows (its log and artifact names, a module name such as
  ``torch._dynamo.guards``): a warning naming it, never an import failure;
- ``help`` / ``+help``, and a name neither knows: a ValueError listing the valid names,
  as ``import torch`` raises with the same TORCH_LOGS.
"""
import logging
import os
import sys

from . import _C

CHANNELS = {name: doc for name, doc in _C.log_channels()}
ENV_VAR = "TORCH_LOGS"

_logger = logging.getLogger("shapejit")


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is at the time (so redirections and pytest's capture
    see the messages)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):  # logging.StreamHandler.__init__ assigns it; ignored
        pass


def _install_handler():
    if not any(isinstance(h, _StderrHandler) for h in _logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("[shapejit] %(message)s"))
        _logger.addHandler(handler)
    _logger.propagate = False


def _sink(channel, level, message):
    logging.getLogger("shapejit." + channel).log(level, message)


def _valid():
    return ", ".join(CHANNELS)


# torch's names for groups of channels (and a verbose form of one channel): what they
# turn on here. A name maps onto channels; None in the tuple stands for every channel.
GROUPS = {
    "all": None,
    "torch": None,
    "dynamo": tuple(n for n in CHANNELS if n != "output_code"),
    "inductor": ("output_code",),
    "recompiles_verbose": ("recompiles",),
    "verbose_guards": ("guards",),
    "graph_code_verbose": ("graph_code",),
    "graph_sizes": ("graph",),
    "kernel_code": ("output_code",),
}

# torch 2.13's own log and artifact names (torch._logging's registry), so that a
# TORCH_LOGS written for torch never stops shapejit's import even when torch is not
# imported yet; the live registry is consulted too when torch is loaded.
TORCH_NAMES = frozenset("""
    aot async_compile autograd c10d cache ddp distributed dtensor dynamic dynamo export
    fake_tensor fsdp inductor native_dsl onnx pp torch all
    annotation aot_graphs aot_graphs_effects aot_joint_graph auto_chunker autotuning
    benchmarking bytecode caching compiled_autograd compiled_autograd_verbose
    compute_dependencies cudagraph_static_inputs cudagraphs custom_format_test_artifact
    ddp_graphs fusion graph graph_breaks graph_code graph_code_verbose
    graph_region_expansion graph_sizes guards hierarchical_compile incremental
    inductor_metrics ir_post_fusion ir_pre_fusion kernel_code loop_ordering loop_tiling
    node_runtime_estimation not_implemented onnx_diagnostics output_code overlap
    overlap_scheduling perf_hints post_grad_graphs pre_grad_graphs recompiles
    recompiles_verbose schedule side_effects sym_node trace_bytecode trace_call
    trace_shape_events trace_source verbose_guards
""".split())


def _torch_knows(name):
    """True when torch's TORCH_LOGS accepts name: one of its log or artifact names, or
    the name of an importable module (torch turns on that module's logger)."""
    if name in TORCH_NAMES:
        return True
    internal = sys.modules.get("torch._logging._internal")
    registry = getattr(internal, "log_registry", None)
    if registry is not None:
        try:
            if registry.is_log(name) or registry.is_artifact(name):
                return True
        except Exception:   # a registry of another torch version: the static list decides
            pass
    if not all(part.isidentifier() for part in name.split(".")):
        return False
    import importlib.util
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def channels_of(name):
    """The shapejit channels a TORCH_LOGS / set_logs name turns on: a tuple, () for a
    name torch knows that has no counterpart here, or None for a name nobody knows."""
    if name in CHANNELS:
        return (name,)
    if name in GROUPS:
        return GROUPS[name] or tuple(CHANNELS)
    if _torch_knows(name):
        return ()
    return None


def _level_of(name, value):
    """A set_logs() value as a logging level (0 off)."""
    if value is None or value is False:
        return 0
    if value is True:
        return logging.INFO
    if isinstance(value, int):
        if value < 0:
            raise ValueError("shapejit.set_logs: the level of %r must be >= 0, got %d"
                             % (name, value))
        return value
    raise TypeError(
        "shapejit.set_logs: %s=%r: expected a bool or a logging level such as "
        "logging.DEBUG, got %s" % (name, value, type(value).__name__))


def _apply(levels):
    """levels: {channel: level}; channels not in it go off."""
    for name in CHANNELS:
        level = levels.get(name, 0)
        _C.set_log_level(name, level)
        # the channel logger must let the records through; 0 means "inherit" for logging
        logging.getLogger("shapejit." + name).setLevel(level if level else logging.WARNING)


def set_logs(**channels):
    """Turns log channels on or off: ``set_logs(graph_breaks=True, dynamic=logging.DEBUG)``.
    torch's group names (``all``, ``dynamo``, ...; see GROUPS) set every channel of the
    group; a channel named as well gets its own value.

    Each value is a bool (True = INFO) or a ``logging`` level. As with
    torch._logging.set_logs, every call starts from all channels off: channels not named are turned off.
    An unknown channel is a ValueError listing the valid ones.
    """
    unknown = [name for name in channels if name not in CHANNELS and name not in GROUPS]
    if unknown:
        raise ValueError("shapejit.set_logs: unknown log channel%s %s; valid channels: %s "
                         "(groups: %s)"
                         % ("s" if len(unknown) > 1 else "",
                            ", ".join(repr(n) for n in unknown), _valid(), ", ".join(GROUPS)))
    levels = {}
    for name, value in channels.items():   # groups first: a channel named too wins
        if name in GROUPS:
            level = _level_of(name, value)
            for channel in channels_of(name):
                levels[channel] = max(levels.get(channel, 0), level)
    for name, value in channels.items():
        if name in CHANNELS:
            levels[name] = _level_of(name, value)
    _apply(levels)


def parse_spec(spec, origin=ENV_VAR):
    """{channel: level} of a TORCH_LOGS-style string (see the module doc). A name torch
    knows and shapejit does not is a warning; ``help`` or a name neither knows is a
    ValueError naming `origin` and listing the valid names."""
    levels = {}
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        if item[0] == "+":
            name, level = item[1:].strip(), logging.DEBUG
        elif item[0] == "-":
            name, level = item[1:].strip(), 0
        else:
            name, level = item, logging.INFO
        channels = None if name == "help" else channels_of(name)
        if channels is None:
            raise ValueError("%s=%r: unknown log channel %r; valid channels: %s; torch's "
                             "names for groups of them: %s; other torch log names are "
                             "accepted and ignored (prefix '+' for debug level, '-' to "
                             "turn one off)"
                             % (origin, spec, name, _valid(), ", ".join(GROUPS)))
        if not channels:
            import warnings
            warnings.warn("shapejit: %s=%r: %r is a torch log that shapejit does not have; "
                          "ignored here (shapejit's channels: %s)"
                          % (origin, spec, name, _valid()), UserWarning, stacklevel=2)
        for channel in channels:
            levels[channel] = level
    return levels


def levels():
    """{channel: level} as C has them now (0 off)."""
    return dict(_C.log_levels())


def _init():
    _install_handler()
    _C.set_log_sink(_sink)
    spec = os.environ.get(ENV_VAR)
    _apply(parse_spec(spec) if spec else {})


_init()
