"""nn.Module compilation: shapejit.compile(module), custom modules, TransformerEncoderLayer
and four transformers models, BERT, GPT-2, ViT and ResNet (built from config classes,
nothing downloaded), all compared with eager."""
import copy
import logging
import warnings

import pytest
import torch
import torch.nn as nn
import transformers

import shapejit


@pytest.fixture(autouse=True)
def _fresh_shapejit():
    shapejit.reset()
    yield
    shapejit.reset()


def _close(actual, expected, rtol=1e-5, atol=1e-6):
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol)


def _counts(fn, *args, **kwargs):
    ex = shapejit.explain(fn)(*args, **kwargs)
    return ex.graph_count, ex.graph_break_count


# ---- custom modules -----------------------------------------------------------------
class MLP(nn.Module):
    def __init__(self, d_in=8, d_hidden=16, d_out=4):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(d_hidden, d_out)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Residual(nn.Module):
    """Submodules, a parameter, a buffer, a ModuleList, a Sequential and a ModuleDict."""

    def __init__(self, d=8, depth=3):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Sequential(nn.LayerNorm(d), nn.Linear(d, d), nn.SiLU())
                                     for _ in range(depth)])
        self.heads = nn.ModuleDict({"mean": nn.Linear(d, 2), "logvar": nn.Linear(d, 2)})
        self.alpha = nn.Parameter(torch.full((d,), 0.5))
        self.register_buffer("offset", torch.linspace(-1, 1, d))
        self.depth = depth

    def forward(self, x, scale=1.0):
        for i, block in enumerate(self.blocks):
            x = x + self.alpha * block(x) / (i + 1)
        x = (x + self.offset) * scale
        return {name: head(x) for name, head in self.heads.items()}


class WithMethods(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(6, 6)
        self.temperature = 2.0

    def _scores(self, x):
        return self.proj(x) / self.temperature

    def forward(self, x):
        s = self._scores(x)
        return torch.softmax(s, dim=-1), s.shape[-1]


def _build(cls, *a, **kw):
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return cls(*a, **kw).eval()


def test_compile_module_returns_module_sharing_state():
    m = _build(MLP)
    cm = shapejit.compile(m)
    assert isinstance(cm, nn.Module)
    assert list(cm.state_dict().keys()) == list(m.state_dict().keys())
    for k, v in m.state_dict().items():
        assert cm.state_dict()[k].data_ptr() == v.data_ptr(), k
    assert [n for n, _ in cm.named_parameters()] == [n for n, _ in m.named_parameters()]
    for p, q in zip(cm.parameters(), m.parameters()):
        assert p is q
    x = torch.randn(3, 8)
    _close(cm(x), m(x))


def test_compiled_module_sees_in_place_weight_updates():
    m = _build(MLP)
    cm = shapejit.compile(m, fullgraph=True)
    x = torch.randn(3, 8)
    _close(cm(x), m(x))
    with torch.no_grad():
        m.fc1.weight.mul_(-2.0)
        m.fc2.bias.add_(1.0)
    _close(cm(x), m(x))


def test_compiled_module_recompiles_on_attribute_change():
    m = _build(WithMethods)
    cm = shapejit.compile(m, fullgraph=True)
    x = torch.randn(2, 6)
    out, n = cm(x)
    ref, rn = m(x)
    _close(out, ref)
    assert n == rn
    m.temperature = 0.5
    out, _ = cm(x)
    _close(out, m(x)[0])
    assert shapejit.stats()["recompiles"] >= 1


@pytest.mark.parametrize("cls,shape", [(MLP, (4, 8)), (Residual, (2, 5, 8)), (WithMethods, (3, 6))],
                         ids=["mlp", "residual", "with_methods"])
def test_custom_module_fullgraph(cls, shape):
    m = _build(cls)
    eager = copy.deepcopy(m)
    cm = shapejit.compile(m, fullgraph=True)
    for seed in (0, 1):
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
        _close(cm(x), eager(x))
    st = shapejit.stats()
    assert st["graphs"] == 1 and st["graph_breaks"] == 0 and st["cache_entries"] == 1, st
    shapejit.reset()
    assert _counts(m, torch.randn(*shape)) == (1, 0)


def test_module_kwargs_and_no_grad():
    m = _build(Residual)
    cm = shapejit.compile(m, fullgraph=True)
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        out = cm(x, scale=0.5)
        ref = m(x, scale=0.5)
    assert list(out) == list(ref)
    for k in ref:
        _close(out[k], ref[k])
        assert not out[k].requires_grad


def test_module_training_autograd_still_works():
    m = _build(MLP).train()
    ref_m = copy.deepcopy(m)
    cm = shapejit.compile(m)
    x = torch.randn(4, 8)
    cm(x).sum().backward()
    ref_m(x).sum().backward()
    for p, q in zip(m.parameters(), ref_m.parameters()):
        _close(p.grad, q.grad)


# ---- nn.TransformerEncoderLayer -----------------------------------------------------
@pytest.mark.parametrize("backend", ["default", "cpu"])
@pytest.mark.parametrize("batch_first", [True, False], ids=["batch_first", "seq_first"])
def test_transformer_encoder_layer(batch_first, backend):
    layer = _build(nn.TransformerEncoderLayer, d_model=32, nhead=4, dim_feedforward=64,
                   dropout=0.1, batch_first=batch_first)
    shape = (2, 10, 32) if batch_first else (10, 2, 32)
    cm = shapejit.compile(layer, fullgraph=True, backend=backend)
    with torch.no_grad():
        for seed in (0, 1):
            x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
            _close(cm(x), layer(x), rtol=1e-4, atol=1e-5)
        st = shapejit.stats()
        assert st["graph_breaks"] == 0 and st["graphs"] == 1 and st["cache_entries"] == 1, st
        shapejit.reset()
        assert _counts(layer, torch.randn(*shape)) == (1, 0)


# ---- transformers models ------------------------------------------------------------
def _transformers_model(kind, attn):
    logging.getLogger("transformers").setLevel(logging.ERROR)
    kw = {} if attn is None else {"attn_implementation": attn}
    g = torch.Generator().manual_seed(0)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        if kind == "bert":
            cfg = transformers.BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2,
                                          num_attention_heads=4, intermediate_size=64,
                                          max_position_embeddings=64, **kw)
            model = transformers.BertModel(cfg)
            mask = torch.ones(2, 12, dtype=torch.long)
            mask[1, 9:] = 0
            inputs = dict(input_ids=torch.randint(0, 128, (2, 12), generator=g), attention_mask=mask)
        elif kind == "gpt2":
            cfg = transformers.GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                          bos_token_id=1, eos_token_id=2, use_cache=False, **kw)
            model = transformers.GPT2Model(cfg)
            inputs = dict(input_ids=torch.randint(0, 128, (2, 12), generator=g))
        elif kind == "vit":
            cfg = transformers.ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=32,
                                         num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, **kw)
            model = transformers.ViTModel(cfg)
            inputs = dict(pixel_values=torch.randn(2, 3, 32, 32, generator=g))
        elif kind == "resnet":
            cfg = transformers.ResNetConfig(num_channels=3, embedding_size=16, hidden_sizes=[16, 32],
                                            depths=[1, 1], layer_type="basic")
            model = transformers.ResNetModel(cfg)
            inputs = dict(pixel_values=torch.randn(2, 3, 32, 32, generator=g))
        else:
            raise ValueError(kind)
    if attn is not None:
        assert model.config._attn_implementation == attn
    return model.eval(), inputs


MODELS = [("bert", "eager"), ("bert", "sdpa"), ("gpt2", "eager"), ("gpt2", "sdpa"),
          ("vit", "eager"), ("vit", "sdpa"), ("resnet", None)]

# Known gaps (strict: a model that starts to capture whole fails here until its line goes).
# Keep in step with docs/status.md. Empty: every model here captures whole.
MODEL_GAPS = {}


def _model_params():
    return [pytest.param(k, a, id=f"{k}-{a}" if a else k,
                         marks=[pytest.mark.xfail(strict=True, reason=MODEL_GAPS[(k, a)])]
                         if (k, a) in MODEL_GAPS else [])
            for k, a in MODELS]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["default", "cpu"])
@pytest.mark.parametrize("kind,attn", _model_params())
def test_transformers_model(kind, attn, backend):
    """Whole models in one graph, with eager's results (rtol 1e-4, float32) through the
    eager replay and through the generated-C / oneDNN backend."""
    model, inputs = _transformers_model(kind, attn)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = model(**inputs)
        compiled = shapejit.compile(model, fullgraph=True, backend=backend)
        actual = compiled(**inputs)
        assert type(actual) is type(expected)
        assert list(actual.keys()) == list(expected.keys())
        for k in expected.keys():
            _close(actual[k], expected[k], rtol=1e-4, atol=1e-5)
        st = shapejit.stats()
        assert st["graph_breaks"] == 0 and st["graphs"] == 1, st
        again = compiled(**inputs)  # cache hit
        _close(again[0], expected[0], rtol=1e-4, atol=1e-5)
        assert shapejit.stats()["graphs"] == 1 and shapejit.stats()["frames"] == st["frames"]
        shapejit.reset()
        ex = shapejit.explain(model)(**inputs)
        assert (ex.graph_count, ex.graph_break_count) == (1, 0), ex.break_reasons


@pytest.mark.slow
def test_gpt2_default_use_cache_returns_a_working_cache():
    """GPT2Model's default forward builds a DynamicCache and returns it: the compiled call
    rebuilds it with the same tensors, and it works for the next decoding step."""
    cfg = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=100, n_positions=64,
                                  bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2Model(cfg).eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 100, (2, 8), generator=g)
    shapejit.reset()
    with torch.no_grad():
        out = shapejit.compile(model, fullgraph=True)(ids)
        ref = model(ids)
        assert shapejit.stats()["graphs"] == 1 and shapejit.stats()["graph_breaks"] == 0
        torch.testing.assert_close(out.last_hidden_state, ref.last_hidden_state, rtol=1e-4, atol=1e-5)
        mine, theirs = out.past_key_values, ref.past_key_values
        assert type(mine) is type(theirs) and len(mine.layers) == len(theirs.layers)
        for a, b in zip(mine.layers, theirs.layers):
            torch.testing.assert_close(a.keys, b.keys)
            torch.testing.assert_close(a.values, b.values)
        assert mine.get_seq_length() == theirs.get_seq_length() == 8
        nxt = torch.randint(0, 100, (2, 1), generator=g)
        torch.testing.assert_close(model(nxt, past_key_values=mine).last_hidden_state,
                                   model(nxt, past_key_values=theirs).last_hidden_state)
