"""set_stance(): how compiled functions behave, as a call, context manager or decorator.

    shapejit.set_stance("force_eager")            # from now on
    with shapejit.set_stance("eager_on_recompile"):  # for a block
        ...
    @shapejit.set_stance("fail_on_recompile")      # around each call
    def serve(x): ...

Stances: default, force_eager, eager_on_recompile, fail_on_recompile, eager_then_compile
(the `stance` config knob; an unknown one is a ValueError listing them).
"""
import functools

from . import _C


class set_stance:
    """Sets the stance now; as a context manager puts the previous one back on exit; as a
    decorator undoes the immediate change and sets the stance around each call."""

    def __init__(self, stance="default", *, skip_guard_eval_unsafe=False, force_backend=None):
        if not isinstance(stance, str):
            raise TypeError("shapejit.set_stance: stance must be a str, got %s"
                            % type(stance).__name__)
        if skip_guard_eval_unsafe:
            raise ValueError("shapejit.set_stance: skip_guard_eval_unsafe is not supported "
                             "(shapejit always evaluates guards)")
        if force_backend is not None:
            raise ValueError("shapejit.set_stance: force_backend is not supported; pass "
                             "backend= to shapejit.compile instead")
        self.stance = stance
        self.prev = _C.config_get("stance")
        _C.config_set("stance", stance)  # ValueError listing the valid stances

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _C.config_set("stance", self.prev)
        return False

    def __call__(self, fn):
        if not callable(fn):
            raise TypeError("shapejit.set_stance(...) decorates a callable, not %s"
                            % type(fn).__name__)
        _C.config_set("stance", self.prev)  # a decorator changes nothing until called
        stance = self.stance

        @functools.wraps(fn)
        def with_stance(*args, **kwargs):
            prev = _C.config_get("stance")
            _C.config_set("stance", stance)
            try:
                return fn(*args, **kwargs)
            finally:
                _C.config_set("stance", prev)

        return with_stance

    def __repr__(self):
        return "shapejit.set_stance(%r)" % self.stance
