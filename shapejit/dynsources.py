"""The source-list knobs: ``dynamic_sources``, ``static_sources``, ``unbacked_sources``.

Each is a str of comma-separated entries (also read at import from
TORCH_COMPILE_DYNAMIC_SOURCES, TORCH_COMPILE_STATIC_SOURCES and
TORCH_COMPILE_UNBACKED_SOURCES)::

    shapejit.config.dynamic_sources = "L['x'], L['self']._modules['fc']._parameters['weight']:0"
    shapejit.config.dynamic_sources = r"L\\['x.*'\\]"        # a regex

Entries
    Whitespace around an entry is ignored, and so are empty entries (``"L['x'],"``).
    Commas inside quotes or brackets do not split (``L['a,b']``, ``x{1,3}``).
    An entry is a source name as shapejit prints it (``L['x']``, ``G['w']``,
    ``L['self'].w``), optionally followed by ``:N`` with N an int >= 0: only dimension N
    of that tensor. The ``:`` taken as this separator is the first one outside quotes
    and brackets, so ``L['a:b']`` and ``(?:...)`` in a regex are left alone (write
    ``\\:`` for any other ':' a regex needs).

Exact or regex
    An entry matches a source name when it is equal to it (string keys may be written
    with either quote: ``L["x"]`` equals ``L['x']``), OR when the entry, compiled as a
    Python regex, ``re.fullmatch``-es it. Both are tried for every entry; there is no
    syntax to choose one. This is safe because a plain source name read as a regex
    (``L['x']``: ``L`` then one of the characters ``'x``) only fullmatches two-character
    strings, which no source name is. An entry that is not a valid regex is still
    accepted if it reads as a source name (then it only matches exactly); one that is
    neither is a ValueError.

Errors
    A bad entry is a ``SourceListError`` (a ValueError) naming the knob, the entry and
    the reason, e.g.
    ``shapejit: dynamic_sources: bad entry "L['x']:a": the part after ':' must be a dimension number``.
    shapejit.config, shapejit.config.patch and the torch-compat config check values with
    parse() before storing them, so a bad value changes nothing. A bad environment
    variable only warns at import and leaves its knob empty.

Lookup
    ``Spec.lookup(source)`` / ``lookup(knob, source)`` give None (not listed), True
    (listed for every dimension, or a scalar source listed at all) or a frozenset of the
    dimensions named by the ``:N`` entries that match (their union; an entry without
    ``:N`` that also matches makes it True).
"""
import ast
import re
import warnings

from . import _C

SOURCE_KNOBS = ("dynamic_sources", "static_sources", "unbacked_sources")

# A source name as shapejit prints it: a base name, then [key], .attr or .method() steps.
_STEP = r"""(?:\[(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|-?\d+)\]|\.[A-Za-z_]\w*(?:\(\))?)"""
_SOURCE_RE = re.compile(r"[A-Za-z_]\w*" + _STEP + "*", re.S)
_KEY_RE = re.compile(r"""\[('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")\]""", re.S)

_OPEN = "[({"
_CLOSE = "])}"


class SourceListError(ValueError):
    """A malformed entry of a source-list knob; .knob, .entry and .reason."""

    def __init__(self, knob, entry, reason):
        self.knob, self.entry, self.reason = knob, entry, reason
        super().__init__('shapejit: %s: bad entry "%s": %s' % (knob, entry, reason))


# ------------------------------------------------------------------------------------
# Scanning: top-level commas and colons
# ------------------------------------------------------------------------------------

def _top_level(text, quotes):
    """Indices of the characters of text outside brackets (and, if quotes, outside
    '...' / "..."), backslash escapes skipped; None if the brackets or quotes do not
    balance."""
    out = []
    depth = 0
    quote = None
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if quote:
            if c == quote:
                quote = None
        elif quotes and c in "'\"":
            quote = c
        elif c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            if depth == 0:
                return None
            depth -= 1
        elif depth == 0:
            out.append(i)
        i += 1
    if quote or depth:
        return None
    return out


def _positions(text, char):
    """Where char occurs at top level: outside quotes and brackets if the text balances
    so, else outside brackets only, else anywhere (None for the last case)."""
    for quotes in (True, False):
        top = _top_level(text, quotes)
        if top is not None:
            return [i for i in top if text[i] == char]
    return None


def _split(text):
    cuts = _positions(text, ",")
    if cuts is None:
        return text.split(",")
    parts, start = [], 0
    for i in cuts:
        parts.append(text[start:i])
        start = i + 1
    parts.append(text[start:])
    return parts


# ------------------------------------------------------------------------------------
# Entries and specs
# ------------------------------------------------------------------------------------

def _canonical(name):
    """name with every string key written as repr() writes it, if name reads as a
    source name; else None."""
    if not _SOURCE_RE.fullmatch(name):
        return None

    def fix(m):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # invalid escape sequences
                return "[%r]" % (ast.literal_eval(m.group(1)),)
        except (ValueError, SyntaxError):
            return m.group(0)

    return _KEY_RE.sub(fix, name)


class Entry:
    """One entry: .text (as written), .name, .dim (None or an int), .exact (names it
    equals), .regex (compiled, or None)."""

    __slots__ = ("text", "name", "dim", "exact", "regex")

    def __init__(self, text, name, dim, exact, regex):
        self.text, self.name, self.dim, self.exact, self.regex = text, name, dim, exact, regex

    def matches(self, source):
        return source in self.exact or (self.regex is not None
                                        and self.regex.fullmatch(source) is not None)

    def __repr__(self):
        return "Entry(%r)" % self.text


def _parse_entry(text, knob):
    colons = _positions(text, ":")
    if colons is None:  # unbalanced: only a trailing ':<digits>' is a dimension
        m = re.fullmatch(r"(.*?)\s*:\s*(\d+)", text, re.S)
        name, dim_text = (m.group(1), m.group(2)) if m else (text, None)
    elif colons:
        name, dim_text = text[:colons[0]].rstrip(), text[colons[0] + 1:].strip()
    else:
        name, dim_text = text, None
    dim = None
    if dim_text is not None:
        if not name:
            raise SourceListError(knob, text, "there is no source name before ':'")
        if not (dim_text.isascii() and dim_text.isdigit()):
            raise SourceListError(knob, text, "the part after ':' must be a dimension number")
        dim = int(dim_text)
    canon = _canonical(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FutureWarning "possible nested set" and such
        try:
            regex = re.compile(name, re.S)
        except re.error as e:
            if canon is None:
                raise SourceListError(
                    knob, text, "not a source name (like L['x']) and not a valid regex "
                    "(%s)" % e) from None
            regex = None
    exact = frozenset(n for n in (name, canon) if n is not None)
    return Entry(text, name, dim, exact, regex)


class Spec:
    """A parsed source list. .knob, .text, .entries (a tuple of Entry)."""

    _MEMO_LIMIT = 4096

    def __init__(self, knob, text, entries, errors=()):
        self.knob, self.text, self.entries = knob, text, tuple(entries)
        self.errors = tuple(errors)  # bad entries left out (lenient parse only)
        self._memo = {}

    def __bool__(self):
        return bool(self.entries)

    def lookup(self, source):
        """None if no entry matches source; True if an entry without ':N' matches; else
        the frozenset of the dims of the matching ':N' entries."""
        try:
            return self._memo[source]
        except KeyError:
            pass
        dims = set()
        result = None
        for e in self.entries:
            if e.matches(source):
                if e.dim is None:
                    result = True
                    break
                dims.add(e.dim)
        if result is None and dims:
            result = frozenset(dims)
        if len(self._memo) >= self._MEMO_LIMIT:
            self._memo.clear()
        self._memo[source] = result
        return result

    def __repr__(self):
        return "Spec(%s=%r)" % (self.knob, self.text)


def _parse(text, knob, errors=None):
    """parse(); with errors a list, bad entries are appended to it and left out instead
    of raising."""
    if not isinstance(text, str):
        raise TypeError("shapejit: %s must be a str, not %s" % (knob, type(text).__name__))
    entries = []
    for piece in _split(text):
        piece = piece.strip()
        if not piece:
            continue
        try:
            entries.append(_parse_entry(piece, knob))
        except SourceListError as e:
            if errors is None:
                raise
            errors.append(e)
    return Spec(knob, text, entries, errors or ())


def parse(text, knob="dynamic_sources"):
    """The Spec of a source-list string; SourceListError (a ValueError) naming the knob
    and the first bad entry if there is one."""
    return _parse(text, knob)


def check(knob, value):
    """Raises SourceListError if knob is a source-list knob and value a str that does
    not parse; nothing otherwise (a non-str is left to the C type check)."""
    if knob in SOURCE_KNOBS and isinstance(value, str) and value.strip():
        _spec(knob, str(value), strict=True)


# ------------------------------------------------------------------------------------
# Lookup against the current knob values (called by the compiler)
# ------------------------------------------------------------------------------------

_SPECS = {}         # (knob, text) -> Spec
_SPECS_LIMIT = 64
_warned = set()


def _spec(knob, text, strict=False):
    key = (knob, text)
    spec = _SPECS.get(key)
    if spec is not None and not (strict and spec.errors):
        return spec
    if strict:
        spec = _parse(text, knob)
    else:
        # a value stored without the check (e.g. _C.config_set directly): skip the bad
        # entries, with one warning per value
        errors = []
        spec = _parse(text, knob, errors)
        if errors and key not in _warned:
            _warned.add(key)
            warnings.warn("%s (entry ignored)" % "; ".join(map(str, errors)),
                          UserWarning, stacklevel=3)
    if len(_SPECS) >= _SPECS_LIMIT:
        _SPECS.clear()
    _SPECS[key] = spec
    return spec


def current(knob):
    """The Spec of a source-list knob's current value."""
    return _spec(knob, _C.config_get(knob))


def lookup(knob, source):
    """Spec.lookup(source) for the current value of knob (one of SOURCE_KNOBS)."""
    text = _C.config_get(knob)
    if not text:
        return None
    return _spec(knob, text).lookup(source)
