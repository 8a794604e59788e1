"""Log channels: ``shapejit.set_logs(...)`` and the ``TORCH_LOGS`` environment variable.

The channels are core/logs.def's (``_C.log_channels()``). C formats a message only when
its channel is on, and hands it to this module's sink, which logs it through
``logging.getLogger("shapejit.<channel>")``. The ``shapejit`` logger has its own stderr
handler (``[shapejit] <message>``), so messages show without any logging set-up; it does
not propagate to the root logger (configure ``logging.getLogger("shapejit")`` to redirect).

TORCH_LOGS="graph_breaks,+dynamic,-recompiles": a plain name turns the channel on at INFO,
``+name`` at DEBUG (everything), ``-name`` turns it off. Read once, at import.
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

    Each value is a bool (True = INFO) or a ``logging`` level. As with the anchor's
    set_logs, every call starts from all channels off: channels not named are turned off.
    An unknown channel is a ValueError listing the valid ones.
    """
    unknown = [name for name in channels if name not in CHANNELS]
    if unknown:
        raise ValueError("shapejit.set_logs: unknown log channel%s %s; valid channels: %s"
                         % ("s" if len(unknown) > 1 else "",
                            ", ".join(repr(n) for n in unknown), _valid()))
    levels = {name: _level_of(name, value) for name, value in channels.items()}
    _apply(levels)


def parse_spec(spec, origin=ENV_VAR):
    """{channel: level} of a TORCH_LOGS-style string; ValueError naming `origin` on a bad
    channel name."""
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
        if name not in CHANNELS:
            raise ValueError("%s=%r: unknown log channel %r; valid channels: %s "
                             "(prefix '+' for debug level, '-' to turn one off)"
                             % (origin, spec, name, _valid()))
        levels[name] = level
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
