"""copy.deepcopy and copy.copy inside compiled code: constants, lists, tuples, dicts and
user objects (made in the frame or passed in) are copied by the capture, the outside
object's state guarded through its sources; anything else (a tensor inside, a class with
its own __deepcopy__) runs copy.py's code. transformers' encoder-decoders deep-copy their
config on every default call (PreTrainedConfig.get_text_config, then to_dict, delattr and
setattr on the copy, then a Cache made in the frame tested for truth): one graph, as
torch.compile. Values are eager's; graph counts are compared with torch.compile's."""
import copy
import warnings

import pytest
import torch
import torch._dynamo
from torch._dynamo.testing import CompileCounter

import shapejit


@pytest.fixture(autouse=True)
def _fresh(fresh_compilers):
    yield


class Cfg:
    def __init__(self):
        self.hidden = 8
        self.names = ["a", "b"]
        self.sub = {"k": 1.5, "nested": [1, 2]}
        self.pair = (3, 4)
        self.encoder_layers = 2
        self.decoder_layers = 3


def _torch_graphs(fn, *args):
    torch._dynamo.reset()
    cnt = CompileCounter()
    torch.compile(fn, backend=cnt)(*args)
    torch._dynamo.reset()
    return cnt.frame_count


def _same(cf, fn, *args):
    torch.testing.assert_close(cf(*args), fn(*args))


def test_deepcopy_of_an_argument_object():
    def f(x, cfg):
        c = copy.deepcopy(cfg)
        c.encoder_layers = c.decoder_layers
        c.names.append("z")
        c.sub["nested"].append(7)
        return x * c.hidden + len(c.names) + c.sub["k"] + c.encoder_layers + sum(c.sub["nested"]) + c.pair[1]

    cfg, x = Cfg(), torch.randn(3)
    cf = shapejit.compile(f)
    for _ in range(3):
        _same(cf, f, x, cfg)
    s = shapejit.stats()
    assert s["graphs"] == 1 and s["graph_breaks"] == 0 and s["recompiles"] == 0, s
    assert s["graphs"] <= _torch_graphs(f, x, cfg)
    assert cfg.names == ["a", "b"] and cfg.sub["nested"] == [1, 2] and cfg.encoder_layers == 2
    # the copy reads the object as it is now
    cfg.hidden = 5
    _same(cf, f, x, cfg)
    cfg.sub["nested"].append(10)
    _same(cf, f, x, cfg)
    cfg.extra = 1
    _same(cf, f, x, cfg)


def test_deepcopy_keeps_shared_references_and_copies_containers():
    def f(x, d):
        shared = [1, 2]
        src = {"a": shared, "b": shared, "t": (shared, 3), "s": "str"}
        c = copy.deepcopy(src)
        c["a"].append(9)             # the copy's two entries stay one list
        e = copy.deepcopy(d)
        e["w"].append(4.0)
        return x * len(c["b"]) + c["t"][0][-1] + sum(e["w"]) + len(d["w"])

    d, x = {"w": [1.0, 2.0]}, torch.randn(4)
    cf = shapejit.compile(f)
    for _ in range(2):
        _same(cf, f, x, d)
    s = shapejit.stats()
    assert s["graphs"] == 1 and s["graph_breaks"] == 0, s
    assert d == {"w": [1.0, 2.0]}


def test_shallow_copy_shares_what_copy_copy_shares():
    def f(x, cfg):
        c = copy.copy(cfg)
        c.hidden = 100               # the copy's own attribute
        return x * c.hidden + cfg.hidden + len(c.names)

    cfg, x = Cfg(), torch.randn(3)
    cf = shapejit.compile(f)
    for _ in range(2):
        _same(cf, f, x, cfg)
    assert cfg.hidden == 8
    assert shapejit.stats()["graph_breaks"] == 0


def test_shallow_copy_write_through_shared_list():
    def f(x, cfg):
        c = copy.copy(cfg)
        c.names.append("q")          # the list is cfg's own
        return x * len(cfg.names)

    x = torch.randn(3)
    a, b = Cfg(), Cfg()
    cf = shapejit.compile(f)
    got = cf(x, a)
    want = f(x, b)
    torch.testing.assert_close(got, want)
    assert a.names == b.names == ["a", "b", "q"]


class WithTensor:
    def __init__(self):
        self.t = torch.ones(3)
        self.k = 2


class OwnDeepcopy:
    def __init__(self, k):
        self.k = k

    def __deepcopy__(self, memo):
        return OwnDeepcopy(self.k * 10)


@pytest.mark.parametrize("make", [WithTensor, lambda: OwnDeepcopy(3)])
def test_unmodelled_copies_run_as_eager(make):
    def f(x, o):
        c = copy.deepcopy(o)
        return x * c.k

    o, x = make(), torch.randn(3)
    cf = shapejit.compile(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(2):
            _same(cf, f, x, o)


class Sized:
    def __init__(self, items):
        self.items = list(items)

    def __len__(self):
        return len(self.items)


class Truthy:
    def __init__(self, flag):
        self.flag = flag

    def __bool__(self):
        return self.flag > 0


def test_truth_of_objects_made_in_the_frame():
    def f(x, n):
        s = Sized(range(n))
        t = Truthy(n - 2)
        y = x + 1 if s else x - 1
        return y * 2 if t else y * 3

    x = torch.randn(3)
    cf = shapejit.compile(f)
    for n in (0, 1, 3, 3):
        _same(cf, f, x, n)
    assert shapejit.stats()["graph_breaks"] == 0


def test_delattr_on_an_object_made_in_the_frame():
    class Obj:
        pass

    def f(x):
        o = Obj()
        o.a = 2
        o.b = 3
        delattr(o, "a")
        return x * (o.b + (10 if hasattr(o, "a") else 0))

    def g(x):
        o = Obj()
        delattr(o, "missing")
        return x

    x = torch.randn(3)
    cf = shapejit.compile(f)
    _same(cf, f, x)
    assert shapejit.stats()["graph_breaks"] == 0
    with pytest.raises(AttributeError):
        shapejit.compile(g)(x)


def test_del_statement_on_attributes():
    """del o.a is delattr(o, "a"): captured on an object made in the frame; on an object
    from outside it breaks (a side effect the graph does not replay), and a missing
    attribute raises as eager."""
    class Obj:
        pass

    def f(x):
        o = Obj()
        o.a, o.b = 2, 3
        del o.a
        return x * (o.b + (10 if hasattr(o, "a") else 0))

    def outside(x, o):
        del o.a
        return x * 2

    def missing(x):
        o = Obj()
        del o.missing
        return x

    x = torch.randn(3)
    cf = shapejit.compile(f)
    _same(cf, f, x)
    assert shapejit.stats()["graph_breaks"] == 0
    o1, o2 = Obj(), Obj()
    o1.a = o2.a = 1
    torch.testing.assert_close(shapejit.compile(outside)(x, o1), outside(x, o2))
    assert not hasattr(o1, "a") and not hasattr(o2, "a")
    with pytest.raises(AttributeError):
        shapejit.compile(missing)(x)


def test_vars_and_dict_of_an_object_made_in_the_frame():
    """importlib.metadata's Context.__init__ does vars(self).update(kwargs)."""
    class Ctx:
        def __init__(self, **kw):
            vars(self).update(kw)

    def f(x):
        c = Ctx(a=2, b=3)
        vars(c)["d"] = 4
        c.__dict__["e"] = 5
        return x * c.a + c.b + c.d + c.e + len(vars(c))

    x = torch.randn(3)
    cf = shapejit.compile(f)
    _same(cf, f, x)
    assert shapejit.stats()["graph_breaks"] == 0


def test_transformers_config_copy_and_get_text_config():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BartConfig(vocab_size=50, d_model=16, encoder_layers=2, decoder_layers=3,
                                  encoder_attention_heads=2, decoder_attention_heads=4,
                                  encoder_ffn_dim=32, decoder_ffn_dim=32)

    def f(x, cfg):
        dec = cfg.get_text_config(decoder=True)
        d = copy.deepcopy(cfg).to_dict()
        return x * dec.num_hidden_layers + dec.num_attention_heads + len(d) + d["d_model"]

    x = torch.randn(3)
    cf = shapejit.compile(f)
    for _ in range(2):
        _same(cf, f, x, cfg)
    s = shapejit.stats()
    assert s["graphs"] == 1 and s["graph_breaks"] == 0, s
    assert cfg.num_hidden_layers == 2   # the original is untouched
    cfg.decoder_layers = 5
    _same(cf, f, x, cfg)


def _flat(o):
    if isinstance(o, torch.Tensor):
        return [o]
    if hasattr(o, "to_tuple"):
        return [t for v in o.to_tuple() for t in _flat(v)]
    if isinstance(o, (list, tuple)):
        return [t for v in o for t in _flat(v)]
    if hasattr(o, "self_attention_cache"):
        return _flat(o.self_attention_cache) + _flat(o.cross_attention_cache)
    if hasattr(o, "layers"):
        return [t for layer in o.layers for t in (layer.keys, layer.values) if isinstance(t, torch.Tensor)]
    return []


def test_encoder_decoder_default_call_is_one_graph():
    """BartModel called as users call it (use_cache defaults to True): the decoder makes an
    EncoderDecoderCache from its config on every call, returned in the output."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.BartModel(transformers.BartConfig(
        vocab_size=100, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64)).eval()
    g = torch.Generator().manual_seed(1)
    inp = dict(input_ids=torch.randint(3, 100, (2, 12), generator=g),
               decoder_input_ids=torch.randint(3, 100, (2, 8), generator=g))
    with torch.no_grad():
        ref = _flat(model(**inp))
        cf = shapejit.compile(model)
        for _ in range(3):
            out = _flat(cf(**inp))
            assert len(out) == len(ref) == 10
            for a, b in zip(out, ref):
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    s = shapejit.stats()
    assert s["graphs"] == 1 and s["graph_breaks"] == 0 and s["recompiles"] == 0, s
