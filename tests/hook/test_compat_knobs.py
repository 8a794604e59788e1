"""Knobs written through the torch compat layer (torch._dynamo.config, torch.compiler.config):
shapejit's knobs reach shapejit; a torch knob shapejit does not implement warns, naming it;
a name neither has is an AttributeError, as torch's own config raises."""
import warnings

import pytest
import torch
import torch._dynamo
import torch.compiler

import shapejit
from shapejit import compat


@pytest.fixture(autouse=True)
def _installed():
    real = torch._dynamo.config
    shapejit.install_torch_compat()
    compat._warned.clear()
    yield
    shapejit.uninstall_torch_compat()
    assert torch._dynamo.config is real


def _warnings(fn):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        fn()
    return [str(m.message) for m in w]


def _set(config, name, value):
    return lambda: setattr(config, name, value)


@pytest.mark.parametrize("config_name", ["dynamo", "compiler"])
def test_unknown_knob_is_an_error(config_name):
    config = torch._dynamo.config if config_name == "dynamo" else torch.compiler.config
    with pytest.raises(AttributeError, match="no_such_knob"):
        config.no_such_knob = 1
    # as torch's: the patch is made, and fails when it applies
    with pytest.raises(AttributeError, match="no_such_knob"):
        with config.patch(no_such_knob=1):
            pass
    with pytest.raises(AttributeError, match="no_such_knob"):
        with config.patch("no_such_knob", 1):
            pass
    with pytest.raises(AttributeError):
        config.no_such_knob   # noqa: B018
    # torch raises for the same names
    shapejit.uninstall_torch_compat()
    torch_config = torch._dynamo.config if config_name == "dynamo" else torch.compiler.config
    with pytest.raises(AttributeError):
        torch_config.no_such_knob = 1
    shapejit.install_torch_compat()


@pytest.mark.parametrize("name, value", [
    ("replay_record_enabled", True),
    ("fail_on_recompile_limit_hit", True),
    ("verbose", True),
])
def test_torch_knob_not_implemented_warns_naming_it(name, value):
    config = torch._dynamo.config
    msgs = _warnings(_set(config, name, value))
    assert len(msgs) == 1 and name in msgs[0] and "does not implement" in msgs[0]
    assert getattr(config, name) == value
    msgs = []
    compat._warned.clear()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with config.patch(**{name: value}):
            assert getattr(config, name) == value
    assert [str(m.message) for m in w if name in str(m.message)]


def test_torch_knob_set_to_torch_value_is_silent():
    config = torch._dynamo.config
    default = config.replay_record_enabled
    assert _warnings(_set(config, "replay_record_enabled", default)) == []


@pytest.mark.parametrize("name, value, knob", [
    ("cache_size_limit", 3, "cache_size_limit"),
    ("recompile_limit", 5, "cache_size_limit"),
    ("accumulated_recompile_limit", 77, "accumulated_cache_size_limit"),
    ("suppress_errors", True, "suppress_errors"),
    ("specialize_int", True, "specialize_int"),
])
def test_shapejit_knobs_reach_shapejit_silently(name, value, knob):
    config = torch._dynamo.config
    before = getattr(shapejit.config, knob)
    try:
        assert _warnings(_set(config, name, value)) == []
        assert getattr(shapejit.config, knob) == value
    finally:
        setattr(shapejit.config, knob, before)
    with config.patch(**{name: value}):
        assert getattr(shapejit.config, knob) == value
    assert getattr(shapejit.config, knob) == before


def test_bad_patch_sets_nothing():
    before = shapejit.config.cache_size_limit
    with pytest.raises(AttributeError):
        with torch._dynamo.config.patch(cache_size_limit=2, no_such_knob=1):
            pass
    assert shapejit.config.cache_size_limit == before


def test_patch_of_a_newer_torch_knob_fails_only_when_applied():
    # a test class decorated for a newer torch imports; its tests fail when they run
    deco = torch._dynamo.config.patch(no_such_knob=True)

    @deco
    def f():
        return 1

    with pytest.raises(AttributeError, match="no_such_knob"):
        f()
