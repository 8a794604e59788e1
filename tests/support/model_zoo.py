"""The model zoo of test_model_zoo.py: small `transformers` models built from config
objects (nothing downloaded), their inputs for a (batch, seq) size, the call schedule,
and one function that runs a compiler over the schedule, checking every call against
eager and counting what it compiled.

Kept apart from the test file so that a model can be run by hand:

    python3 tests/support/model_zoo.py llama            # both compilers, counts and times
"""
import collections
import logging
import time
import warnings

import torch
import transformers

from graph_counter import GraphCounter

# Every float32 output of a compiled call equals eager's to this (the generated kernels
# reassociate sums: matmul, softmax and layer norm round differently from ATen's).
RTOL, ATOL = 1e-4, 1e-5

# (batch, seq) of the 20 checked calls: sizes change from call to call and come back.
# Sizes of 1 specialise (the 0/1 rule of both compilers), so a batch of 1 comes late,
# after the batch dim went dynamic, and costs one graph on each side.
SCHEDULE = [(2, 8), (2, 8), (3, 8), (2, 12), (4, 16), (3, 12), (2, 5), (4, 8), (3, 16),
            (2, 12), (1, 8), (4, 5), (2, 16), (3, 8), (1, 12), (4, 16), (2, 5), (3, 12),
            (1, 16), (2, 8)]
# Calls 21-30: sizes already seen, in another order; neither compiler may compile again.
REPLAY = [(4, 16), (1, 8), (3, 12), (2, 5), (2, 8), (4, 5), (1, 16), (3, 8), (2, 12),
          (4, 8)]

VOCAB = 96


def _text_ids(batch, seq, gen, low=3):
    return torch.randint(low, VOCAB, (batch, seq), generator=gen)


def _padding_mask(batch, seq):
    """Ones, but the later rows padded on the right (row r loses r tokens, never all)."""
    mask = torch.ones(batch, seq, dtype=torch.long)
    for r in range(1, batch):
        mask[r, seq - min(r, seq - 1):] = 0
    return mask


def _decoder_only(config_cls, model_cls, **extra):
    def build():
        cfg = config_cls(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=64, use_cache=False, **extra)
        return model_cls(cfg)

    def inputs(batch, seq, gen):
        return dict(input_ids=_text_ids(batch, seq, gen),
                    attention_mask=_padding_mask(batch, seq))
    return build, inputs


def _t5_config():
    return transformers.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                 num_decoder_layers=2, num_heads=4,
                                 relative_attention_num_buckets=8,
                                 relative_attention_max_distance=16, use_cache=False,
                                 decoder_start_token_id=0, pad_token_id=0)


def _bart_config():
    return transformers.BartConfig(vocab_size=VOCAB, d_model=32, encoder_layers=2,
                                   decoder_layers=2, encoder_attention_heads=4,
                                   decoder_attention_heads=4, encoder_ffn_dim=64,
                                   decoder_ffn_dim=64, max_position_embeddings=64,
                                   use_cache=False, pad_token_id=1, bos_token_id=0,
                                   eos_token_id=2, decoder_start_token_id=2)


def _encoder_inputs(batch, seq, gen):
    return dict(input_ids=_text_ids(batch, seq, gen), attention_mask=_padding_mask(batch, seq))


def _seq2seq_inputs(batch, seq, gen):
    """Encoder tokens of length seq, decoder tokens of length seq // 2 + 1."""
    return dict(input_ids=_text_ids(batch, seq, gen), attention_mask=_padding_mask(batch, seq),
                decoder_input_ids=_text_ids(batch, seq // 2 + 1, gen))


# Whisper's encoder accepts exactly 2 * max_source_positions frames: only the batch varies.
WHISPER_FRAMES = 32
WHISPER_MELS = 16


def _whisper_build():
    cfg = transformers.WhisperConfig(vocab_size=VOCAB, d_model=32, encoder_layers=2,
                                     decoder_layers=2, encoder_attention_heads=4,
                                     decoder_attention_heads=4, encoder_ffn_dim=64,
                                     decoder_ffn_dim=64, num_mel_bins=WHISPER_MELS,
                                     max_source_positions=WHISPER_FRAMES // 2,
                                     max_target_positions=32, pad_token_id=1, bos_token_id=0,
                                     eos_token_id=2, decoder_start_token_id=0)
    return transformers.WhisperModel(cfg).get_encoder()


def _whisper_inputs(batch, seq, gen):
    return dict(input_features=torch.randn(batch, WHISPER_MELS, WHISPER_FRAMES, generator=gen))


def _clip_text_build():
    cfg = transformers.CLIPTextConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      max_position_embeddings=32, eos_token_id=2)
    return transformers.CLIPTextModel(cfg)


def _clip_text_inputs(batch, seq, gen):
    ids = _text_ids(batch, seq, gen)
    ids[:, -1] = 2  # the pooled output reads the eos position
    return dict(input_ids=ids, attention_mask=_padding_mask(batch, seq))


# CLIP's vision tower takes images of its configured size: only the batch varies.
CLIP_IMAGE = 32


def _clip_vision_build():
    cfg = transformers.CLIPVisionConfig(hidden_size=32, intermediate_size=64,
                                        num_hidden_layers=2, num_attention_heads=4,
                                        image_size=CLIP_IMAGE, patch_size=8)
    return transformers.CLIPVisionModel(cfg)


def _clip_vision_inputs(batch, seq, gen):
    return dict(pixel_values=torch.randn(batch, 3, CLIP_IMAGE, CLIP_IMAGE, generator=gen))


def _clip_vision_resized_inputs(batch, seq, gen):
    """Images whose side grows with seq (2x2 to 5x5 patches), the position embeddings
    interpolated to the grid (bicubic)."""
    side = 8 * (2 + seq // 5)
    return dict(pixel_values=torch.randn(batch, 3, side, side, generator=gen),
                interpolate_pos_encoding=True)


def _llama_hidden_states_inputs(batch, seq, gen):
    return dict(_llama_inputs(batch, seq, gen), output_hidden_states=True)


def _t5_cache_build():
    cfg = _t5_config()
    cfg.use_cache = True  # the default of the generation models: the cache comes back
    return transformers.T5ForConditionalGeneration(cfg)


def _encoder(config_cls, model_cls, **extra):
    """A BERT-like encoder of the coverage list (tools/torch_call_coverage.py)."""
    def build():
        cfg = config_cls(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64,
                         **extra)
        return model_cls(cfg)
    return build


def _gpt2_build():
    return transformers.GPT2Model(transformers.GPT2Config(
        vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64, use_cache=False))


# Vision models of the coverage list take images of one size: only the batch varies.
def _image_inputs(batch, seq, gen):
    return dict(pixel_values=torch.randn(batch, 3, 32, 32, generator=gen))


def _vit_build():
    return transformers.ViTModel(transformers.ViTConfig(
        image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64))


def _resnet_build():
    return transformers.ResNetModel(transformers.ResNetConfig(
        embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="bottleneck"))


def _convnext_build():
    return transformers.ConvNextModel(transformers.ConvNextConfig(
        hidden_sizes=[16, 32], depths=[1, 1], num_stages=2))


Model = collections.namedtuple("Model", "build inputs")

_llama_build, _llama_inputs = _decoder_only(transformers.LlamaConfig, transformers.LlamaModel)
def _mixtral_build():
    cfg = transformers.MixtralConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                     max_position_embeddings=64, num_local_experts=4,
                                     num_experts_per_tok=2, use_cache=False)
    return transformers.MixtralModel(cfg)


def _mamba_build():
    cfg = transformers.MambaConfig(vocab_size=VOCAB, hidden_size=32, state_size=8, num_hidden_layers=2,
                                   expand=2, conv_kernel=4, use_cache=False)
    return transformers.MambaModel(cfg)


def _ids_only_inputs(batch, seq, gen):
    return dict(input_ids=_text_ids(batch, seq, gen))


ZOO = {
    "llama": Model(_llama_build, _llama_inputs),
    "mistral": Model(*_decoder_only(transformers.MistralConfig, transformers.MistralModel)),
    "t5_encoder": Model(lambda: transformers.T5EncoderModel(_t5_config()), _encoder_inputs),
    "t5_seq2seq": Model(lambda: transformers.T5ForConditionalGeneration(_t5_config()),
                        _seq2seq_inputs),
    "bart": Model(lambda: transformers.BartModel(_bart_config()), _seq2seq_inputs),
    "whisper_encoder": Model(_whisper_build, _whisper_inputs),
    "clip_text": Model(_clip_text_build, _clip_text_inputs),
    "clip_vision": Model(_clip_vision_build, _clip_vision_inputs),
    # the same models used another common way
    "llama_hidden_states": Model(_llama_build, _llama_hidden_states_inputs),
    "t5_seq2seq_cache": Model(_t5_cache_build, _seq2seq_inputs),
    "clip_vision_resized": Model(_clip_vision_build, _clip_vision_resized_inputs),
    # more architectures of the coverage list (docs/torch_call_coverage.md) that capture
    # without a break
    "bert": Model(_encoder(transformers.BertConfig, transformers.BertModel), _encoder_inputs),
    "deberta_v2": Model(_encoder(transformers.DebertaV2Config, transformers.DebertaV2Model,
                                 position_buckets=8, max_relative_positions=16), _encoder_inputs),
    "gpt2": Model(_gpt2_build, _encoder_inputs),
    "qwen2": Model(*_decoder_only(transformers.Qwen2Config, transformers.Qwen2Model)),
    "gemma": Model(*_decoder_only(transformers.GemmaConfig, transformers.GemmaModel,
                                       head_dim=8)),
    "vit": Model(_vit_build, _image_inputs),
    "resnet": Model(_resnet_build, _image_inputs),
    "convnext": Model(_convnext_build, _image_inputs),
    # mixture of experts (transformers' grouped experts call a torch.library custom op) and
    # a state-space model (its scan is torch's associative_scan under a compiler, its
    # convolution a depthwise conv1d)
    "mixtral": Model(_mixtral_build, _encoder_inputs),
    "mamba": Model(_mamba_build, _ids_only_inputs),
}


def build(name):
    """The model, in eval mode, with weights from seed 0."""
    logging.getLogger("transformers").setLevel(logging.ERROR)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return ZOO[name].build().eval()


def inputs(name, index, batch, seq):
    """The kwargs of call `index` (the data depends on the call, not only the size)."""
    return ZOO[name].inputs(batch, seq, torch.Generator().manual_seed(1000 + index))


def tensors_of(out, path="out"):
    """(path, tensor) of every tensor in a model's output, in a fixed order."""
    if isinstance(out, torch.Tensor):
        return [(path, out)]
    if isinstance(out, dict):  # ModelOutput is an OrderedDict
        return [t for k, v in out.items() for t in tensors_of(v, "%s.%s" % (path, k))]
    if isinstance(out, (list, tuple)):
        return [t for i, v in enumerate(out) for t in tensors_of(v, "%s[%d]" % (path, i))]
    if type(out).__module__ == "transformers.cache_utils":  # a returned cache: its tensors
        return [t for k, v in sorted(vars(out).items()) for t in tensors_of(v, "%s.%s" % (path, k))]
    return []


def check_same(got, expected, where):
    assert type(got) is type(expected), "%s: %s, eager %s" % (where, type(got), type(expected))
    if isinstance(expected, dict):
        assert list(got.keys()) == list(expected.keys()), where
    mine, theirs = tensors_of(got), tensors_of(expected)
    assert [p for p, _ in mine] == [p for p, _ in theirs], where
    for (path, a), (_, b) in zip(mine, theirs):
        torch.testing.assert_close(a, b, rtol=RTOL, atol=ATOL,
                                   msg=lambda m, p=path: "%s, %s: %s" % (where, p, m))


Counts = collections.namedtuple("Counts", "graphs recompiles frames seconds")


def run_schedule(name, model, compiled, counts, schedule, first=0):
    """Calls compiled and eager on each size of the schedule; returns counts() after."""
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, (batch, seq) in enumerate(schedule, first):
            kwargs = inputs(name, i, batch, seq)
            expected = model(**kwargs)
            got = compiled(**kwargs)
            check_same(got, expected, "%s call %d (batch %d, seq %d)" % (name, i + 1, batch, seq))
    return counts()


class TorchCounter(GraphCounter):
    """torch.compile's side: the graphs its backend is handed, and recompiles from
    dynamo's per-frame compile ids (a frame's compiles after its first)."""

    def __init__(self):
        import torch._dynamo
        torch._dynamo.reset()
        super().__init__()
        self.start = time.perf_counter()

    def counts(self):
        from torch._dynamo import convert_frame
        per_frame = convert_frame.FRAME_COMPILE_COUNTER.values()
        return Counts(self.graphs, sum(n - 1 for n in per_frame), sum(per_frame),
                      time.perf_counter() - self.start)


def torch_compiled(model):
    counter = TorchCounter()
    return torch.compile(model, backend=counter), counter.counts


def shapejit_compiled(model, **options):
    import shapejit
    shapejit.reset()
    start = time.perf_counter()

    def counts():
        st = shapejit.stats()
        return Counts(st["graphs"], st["recompiles"], st["frames"], time.perf_counter() - start)
    return shapejit.compile(model, **options), counts


if __name__ == "__main__":
    import sys
    import traceback
    for name in sys.argv[1:] or list(ZOO):
        for side, make in (("torch", torch_compiled), ("shapejit", shapejit_compiled)):
            model = build(name)
            compiled, counts = make(model)
            try:
                first = run_schedule(name, model, compiled, counts, SCHEDULE)
                again = run_schedule(name, model, compiled, counts, REPLAY, len(SCHEDULE))
                print("%-16s %-9s %s  replay %s" % (name, side, first, again), flush=True)
            except Exception:
                print("%-16s %-9s FAILED %s" % (name, side, counts()), flush=True)
                traceback.print_exc(limit=-3)
