"""The source-list knobs dynamic_sources / static_sources / unbacked_sources: parsing and
matching (shapejit.dynsources), checking at set time (config attributes, patch, the
torch-compat config) and the TORCH_COMPILE_*_SOURCES environment variables."""
import os
import subprocess
import sys
import warnings

import pytest
import torch

import shapejit
from repo import package_parent
from shapejit import _C, dynsources
from shapejit.dynsources import SourceListError, parse

KNOBS = ("dynamic_sources", "static_sources", "unbacked_sources")


@pytest.fixture(autouse=True)
def _restore_state():
    knobs = shapejit.config.to_dict()
    yield
    shapejit.uninstall_torch_compat()
    for name, value in knobs.items():
        _C.config_set(name, value)


def _bad(text, knob="dynamic_sources"):
    with pytest.raises(SourceListError) as info:
        parse(text, knob)
    return info.value


# ---------------------------------------------------------------------------------------
# Parsing and lookup
# ---------------------------------------------------------------------------------------

def test_exact_names():
    spec = parse("L['x'],G['w'],L['self']._modules['fc']._parameters['weight']")
    assert [e.name for e in spec.entries] == [
        "L['x']", "G['w']", "L['self']._modules['fc']._parameters['weight']"]
    assert all(e.dim is None for e in spec.entries)
    assert spec.lookup("L['x']") is True
    assert spec.lookup("G['w']") is True
    assert spec.lookup("L['self']._modules['fc']._parameters['weight']") is True
    assert spec.lookup("L['y']") is None
    assert spec.lookup("L['x'].y") is None          # exact: no prefix matching
    assert spec.lookup("L['self']._modules['fc']") is None
    assert spec.lookup("G['x']") is None


def test_whitespace_and_empty_entries():
    spec = parse("  L['x'] ,\tL['y']  ,, ,L['n'],\n")
    assert [e.text for e in spec.entries] == ["L['x']", "L['y']", "L['n']"]
    for s in ("L['x']", "L['y']", "L['n']"):
        assert spec.lookup(s) is True
    assert not parse("")
    assert not parse(" , ,")
    assert parse(" , ,").lookup("L['x']") is None


def test_either_quote_in_keys():
    spec = parse('L["x"], L[\'self\']._modules["fc"]')
    assert spec.lookup("L['x']") is True
    assert spec.lookup("L['self']._modules['fc']") is True


def test_dim_suffix():
    spec = parse("L['x']:0, L['y'] : 2")
    assert [(e.name, e.dim) for e in spec.entries] == [("L['x']", 0), ("L['y']", 2)]
    assert spec.lookup("L['x']") == frozenset({0})
    assert spec.lookup("L['y']") == frozenset({2})
    assert isinstance(spec.lookup("L['x']"), frozenset)


def test_dims_union_and_whole_entry_wins():
    spec = parse("L['x']:0,L['x']:3,L['y']:1,L['y']")
    assert spec.lookup("L['x']") == frozenset({0, 3})
    assert spec.lookup("L['y']") is True  # an entry without :N matches: every dim
    spec = parse(r"L['y'],L\[.*\]:1")
    assert spec.lookup("L['y']") is True
    assert spec.lookup("L['z']") == frozenset({1})


def test_colon_and_comma_inside_quotes_and_brackets():
    spec = parse("L['a:b'],L['c,d']:1,L['e']")
    assert [(e.name, e.dim) for e in spec.entries] == [
        ("L['a:b']", None), ("L['c,d']", 1), ("L['e']", None)]
    assert spec.lookup("L['a:b']") is True
    assert spec.lookup("L['c,d']") == frozenset({1})
    assert spec.lookup("L['c']") is None


def test_regex_entries():
    spec = parse(r"L\['x.*'\],G\[.*\]:0")
    assert spec.lookup("L['x']") is True
    assert spec.lookup("L['x_long']") is True
    assert spec.lookup("L['y']") is None
    assert spec.lookup("G['w']") == frozenset({0})
    # fullmatch, not search or prefix match
    assert parse(r"L\['x'\]").lookup("L['x'].size()[0]") is None
    assert parse(r"L\['x'\]").lookup("L['x']") is True
    # regex groups with ':' and ',' are not split
    spec = parse(r"L\['(?:a|b){1,2}'\]:1")
    assert spec.entries[0].dim == 1
    assert spec.lookup("L['ab']") == frozenset({1})
    assert spec.lookup("L['c']") is None
    # an escaped ':' belongs to the regex
    assert parse(r"L\['a\:b'\]").lookup("L['a:b']") is True


def test_regex_any_local():
    spec = parse(r"L\[.*\]")
    assert spec.lookup("L['x']") is True
    assert spec.lookup("L['self']._modules['fc']._parameters['weight']") is True
    assert spec.lookup("G['w']") is None


def test_source_name_that_is_not_a_regex_matches_exactly():
    # "\q" is a bad escape for re, but the entry reads as a source name
    spec = parse(r"L['d']['a\q']")
    assert spec.entries[0].regex is None
    assert spec.lookup("L['d'][%r]" % "a\\q") is True
    assert spec.lookup("L['d']['aq']") is None


@pytest.mark.parametrize("entry, reason", [
    ("L['x']:a", "the part after ':' must be a dimension number"),
    ("L['x']:-1", "the part after ':' must be a dimension number"),
    ("L['x']:", "the part after ':' must be a dimension number"),
    ("L['x']:1.5", "the part after ':' must be a dimension number"),
    ("L['x']:1:2", "the part after ':' must be a dimension number"),
    (":0", "there is no source name before ':'"),
    ("L[", "not a source name (like L['x']) and not a valid regex"),
    ("L['x'](", "not a source name (like L['x']) and not a valid regex"),
    ("*x", "not a source name (like L['x']) and not a valid regex"),
])
def test_bad_entries(entry, reason):
    err = _bad("L['ok'], %s ,L['y']" % entry, "static_sources")
    assert isinstance(err, ValueError)
    assert err.knob == "static_sources" and err.entry == entry
    assert str(err).startswith('shapejit: static_sources: bad entry "%s": %s' % (entry, reason))


def test_bad_entry_exact_message():
    assert str(_bad("L['x'],L['x']:a")) == (
        "shapejit: dynamic_sources: bad entry \"L['x']:a\": "
        "the part after ':' must be a dimension number")
    assert str(_bad("L['x']:0,:3", "unbacked_sources")) == (
        "shapejit: unbacked_sources: bad entry \":3\": there is no source name before ':'")


def test_lookup_reads_current_knob():
    for knob in KNOBS:
        _C.config_set(knob, "")
        assert dynsources.lookup(knob, "L['x']") is None
        _C.config_set(knob, "L['x']:1, L['y']")
        assert dynsources.lookup(knob, "L['x']") == frozenset({1})
        assert dynsources.lookup(knob, "L['y']") is True
        assert dynsources.lookup(knob, "L['z']") is None
        _C.config_set(knob, "L['z']")
        assert dynsources.lookup(knob, "L['z']") is True
        assert dynsources.lookup(knob, "L['x']") is None
    assert dynsources.current("static_sources").text == "L['z']"
    # the parsed spec is reused while the value stays the same
    assert dynsources.current("static_sources") is dynsources.current("static_sources")


def test_lookup_skips_bad_entries_stored_behind_the_check():
    # _C.config_set does not parse: the compiler's lookup warns once and skips them
    _C.config_set("dynamic_sources", "L['x'],L['y']:b")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert dynsources.lookup("dynamic_sources", "L['x']") is True
        assert dynsources.lookup("dynamic_sources", "L['y']") is None
    msgs = [str(m.message) for m in w]
    assert len(msgs) == 1 and "L['y']:b" in msgs[0], msgs
    # and the check at set time still rejects that same value
    with pytest.raises(ValueError, match="L\\['y'\\]:b"):
        shapejit.config.dynamic_sources = "L['x'],L['y']:b"


# ---------------------------------------------------------------------------------------
# Checked at set time: nothing stored on error
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("knob", KNOBS)
def test_config_attribute_checks(knob):
    setattr(shapejit.config, knob, "L['keep']")
    with pytest.raises(ValueError) as info:
        setattr(shapejit.config, knob, "L['x']:a")
    assert str(info.value) == ("shapejit: %s: bad entry \"L['x']:a\": the part after ':' "
                               "must be a dimension number" % knob)
    assert getattr(shapejit.config, knob) == "L['keep']"
    assert _C.config_get(knob) == "L['keep']"
    setattr(shapejit.config, knob, r"L\[.*\]:0, L['y']")
    assert _C.config_get(knob) == r"L\[.*\]:0, L['y']"
    with pytest.raises(TypeError, match=knob):  # the C type check still applies
        setattr(shapejit.config, knob, 3)
    assert _C.config_get(knob) == r"L\[.*\]:0, L['y']"


def test_config_patch_checks():
    c = shapejit.config
    c.dynamic_sources = "L['keep']"
    with pytest.raises(ValueError, match="bad entry \":1\""):
        c.patch(dynamic_sources="L['x'],:1")
    with pytest.raises(ValueError, match="bad entry \"L\\[\""):
        c.patch("static_sources", "L[")
    with pytest.raises(ValueError, match="unbacked_sources"):
        c.patch({"unbacked_sources": "L['x']:y"})
    assert c.dynamic_sources == "L['keep']" and c.static_sources == "" \
        and c.unbacked_sources == ""
    # other knobs in the same bad patch are not touched either
    with pytest.raises(ValueError):
        c.patch(cache_size_limit=1, dynamic_sources="L['x']:z")
    assert c.cache_size_limit == 8 and c.dynamic_sources == "L['keep']"
    with c.patch(dynamic_sources="L['x']:0"):
        assert c.dynamic_sources == "L['x']:0"
        assert dynsources.lookup("dynamic_sources", "L['x']") == frozenset({0})
    assert c.dynamic_sources == "L['keep']"

    @c.patch(unbacked_sources="L['u']")
    def f():
        return c.unbacked_sources

    assert f() == "L['u']" and c.unbacked_sources == ""


def test_torch_compat_checks():
    shapejit.install_torch_compat()
    try:
        torch.compiler.config.dynamic_sources = "L['keep']"
        assert shapejit.config.dynamic_sources == "L['keep']"
        with pytest.raises(ValueError) as info:
            torch.compiler.config.dynamic_sources = "L['x']:a"
        assert 'bad entry "L[\'x\']:a"' in str(info.value)
        assert shapejit.config.dynamic_sources == "L['keep']"
        with pytest.raises(ValueError, match="bad entry \":0\""):
            torch.compiler.config.patch(dynamic_sources=":0")
        with pytest.raises(ValueError, match="static_sources"):
            torch._dynamo.config.patch(static_sources="L['x']:-2", optimize_ddp=False)
        assert shapejit.config.dynamic_sources == "L['keep']"
        assert shapejit.config.static_sources == ""
        assert "optimize_ddp" not in torch._dynamo.config._extra
        with torch.compiler.config.patch(dynamic_sources=r"L\['x'\]:1"):
            assert shapejit.config.dynamic_sources == r"L\['x'\]:1"
            assert dynsources.lookup("dynamic_sources", "L['x']") == frozenset({1})
        assert shapejit.config.dynamic_sources == "L['keep']"
    finally:
        shapejit.uninstall_torch_compat()


# ---------------------------------------------------------------------------------------
# Environment variables, read at import
# ---------------------------------------------------------------------------------------

_CHILD = """
import warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as w:
    import shapejit
for m in w:
    print("WARNING", m.category.__name__, m.message)
for k in ("dynamic_sources", "static_sources", "unbacked_sources"):
    print("KNOB", k, repr(getattr(shapejit.config, k)))
"""


def _run_child(**env_vars):
    env = {k: v for k, v in os.environ.items() if not k.endswith("_SOURCES")}
    root = package_parent()
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in [env.get("PYTHONPATH")] if p])
    env.update(env_vars)
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, cwd=root,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    knobs = {}
    for line in lines:
        if line.startswith("KNOB "):
            _, name, value = line.split(" ", 2)
            knobs[name] = eval(value)
    warns = [line for line in lines if line.startswith("WARNING ")]
    return knobs, warns


def test_env_good_values():
    knobs, warns = _run_child(
        TORCH_COMPILE_DYNAMIC_SOURCES="L['x'], L['y']:1",
        TORCH_COMPILE_STATIC_SOURCES=r"L\['s.*'\]",
        TORCH_COMPILE_UNBACKED_SOURCES="L['u']:0")
    assert warns == []
    assert knobs == {"dynamic_sources": "L['x'], L['y']:1",
                     "static_sources": r"L\['s.*'\]",
                     "unbacked_sources": "L['u']:0"}


def test_env_bad_value_warns_and_leaves_knob_empty():
    knobs, warns = _run_child(
        TORCH_COMPILE_DYNAMIC_SOURCES="L['x'],L['x']:a",
        TORCH_COMPILE_STATIC_SOURCES="L['s']",
        TORCH_COMPILE_UNBACKED_SOURCES="L[")
    assert knobs == {"dynamic_sources": "", "static_sources": "L['s']",
                     "unbacked_sources": ""}
    assert len(warns) == 2, warns
    dyn = [w for w in warns if "TORCH_COMPILE_DYNAMIC_SOURCES" in w]
    unb = [w for w in warns if "TORCH_COMPILE_UNBACKED_SOURCES" in w]
    assert len(dyn) == 1 and len(unb) == 1, warns
    assert dyn[0].startswith("WARNING UserWarning ")
    assert "bad entry \"L['x']:a\"" in dyn[0]
    assert "the part after ':' must be a dimension number" in dyn[0]
    assert "bad entry \"L[\"" in unb[0] and "not a valid regex" in unb[0]
