"""check and constrain_range: hints about sizes, given by the user's own code.

Eagerly they are plain assertions. Inside a compiled function (capture/checks.c) a
condition on sizes that depend on data (``t.item()``, ``nonzero()``, ``mark_unbacked``)
narrows the range of the symbol and is asserted when the graph runs; one on ordinary
dynamic sizes is decided like a branch and guarded.
"""


def _is_bool(cond):
    return isinstance(cond, bool) or type(cond).__name__ == "bool_"


def check(cond, message=None):
    """Asserts that cond holds (a bool such as ``n >= 0``); RuntimeError when it does not.

    message: a str, or a callable returning one, used in the error."""
    if not _is_bool(cond):
        raise TypeError("shapejit.check expects a bool (a condition such as n >= 0), got %s"
                        % type(cond).__name__)
    if message is not None and not isinstance(message, str) and not callable(message):
        raise TypeError("shapejit.check: message must be a str or a callable returning one, got %s"
                        % type(message).__name__)
    if not cond:
        text = message() if callable(message) else message
        raise RuntimeError("shapejit.check failed" + (": %s" % text if text else ""))


def _int_arg(name, v, allow_none):
    if v is None and allow_none:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError("shapejit.constrain_range: %s must be an int%s, got %s"
                        % (name, " or None" if allow_none else "", type(v).__name__))
    return v


def constrain_range(n, *, min=None, max=None):
    """Asserts min <= n <= max (either bound may be None); ValueError when n is outside."""
    n = _int_arg("n", n, False)
    lo = _int_arg("min", min, True)
    hi = _int_arg("max", max, True)
    if lo is not None and hi is not None and lo > hi:
        raise ValueError("shapejit.constrain_range: min (%d) is greater than max (%d)" % (lo, hi))
    if (lo is not None and n < lo) or (hi is not None and n > hi):
        raise ValueError("shapejit.constrain_range: %d is outside [%s, %s]"
                         % (n, "-inf" if lo is None else lo, "inf" if hi is None else hi))
