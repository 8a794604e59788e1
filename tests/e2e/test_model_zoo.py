"""The model zoo: `transformers` models nobody here wrote (Llama, Mistral, T5 encoder and
seq2seq, BART, Whisper's encoder, CLIP text and vision, Mixtral (its experts a torch.library
custom op), Mamba (torch's associative_scan, a depthwise conv1d); with SJ_ZOO=full also BERT,
DeBERTa-v2, GPT-2, Qwen2, Gemma, ViT, ResNet and ConvNeXt), built from small configs
(tests/support/model_zoo.py), each compiled with shapejit's default backend and with
torch.compile, both under automatic dynamic (dynamic=None), over the same 20 calls of
changing batch and sequence sizes (model_zoo.SCHEDULE, sizes revisited).

Every call of both equals eager (every tensor of the output, rtol 1e-4 / atol 1e-5 in
float32: the generated kernels sum in another order than ATen). shapejit compiles no more
graphs, and recompiles no more, than torch.compile over those calls: torch.compile is the
oracle, counted in the same test with a backend that counts the graphs it is handed
(recompiles: dynamo's compiles of a frame after its first). Calls 21-30 revisit sizes
already seen: neither compiler may compile anything then.

Runtime: about 30-60 s a model on a loaded 2-core machine (dynamo traces each graph in
seconds, and shapejit's first compile of a graph builds its C kernels). The default run
takes the models whose mechanisms differ; the rest (ZOO_HEAVY) run when SJ_ZOO=full is
set (`make zoo`).
"""
import os

import pytest
import torch
import torch._dynamo

import model_zoo
import shapejit

FULL = os.environ.get("SJ_ZOO", "") == "full"

# Models run only with SJ_ZOO=full: each repeats a mechanism a default one covers
# (Mistral is Llama's code with a sliding window; BART's encoder-decoder is T5's shape;
# CLIP vision resized is CLIP vision with its position table interpolated bicubically),
# or is a known gap whose failing run costs minutes (dozens of graphs on both sides of
# each break).
ZOO_HEAVY = {"mistral", "bart", "llama_hidden_states", "t5_seq2seq_cache",
             "clip_vision_resized",
             # architectures of the coverage list (docs/torch_call_coverage.md) that capture
             # without a break: each repeats mechanisms of the default set
             "bert", "deberta_v2", "gpt2", "qwen2", "gemma", "vit", "resnet", "convnext"}

# Models that still fail, with the mechanisms (strict: the test turns red once it passes,
# and the line must go). None today.
ZOO_GAPS = {}


def _params():
    params = []
    for name in model_zoo.ZOO:
        marks = []
        if name in ZOO_HEAVY:
            marks.append(pytest.mark.skipif(not FULL, reason="SJ_ZOO=full (make zoo) runs it"))
        if name in ZOO_GAPS:
            marks.append(pytest.mark.xfail(strict=True, reason=ZOO_GAPS[name]))
        params.append(pytest.param(name, marks=marks, id=name))
    return params


pytestmark = pytest.mark.usefixtures("fresh_compilers")


def _run(name, make):
    """Counts after the 20 calls and after the 10 more; every call checked."""
    model = model_zoo.build(name)
    compiled, counts = make(model)
    first = model_zoo.run_schedule(name, model, compiled, counts, model_zoo.SCHEDULE)
    again = model_zoo.run_schedule(name, model, compiled, counts, model_zoo.REPLAY,
                                   first=len(model_zoo.SCHEDULE))
    return first, again


@pytest.mark.slow
@pytest.mark.parametrize("name", _params())
def test_model_zoo(name):
    theirs, theirs_again = _run(name, model_zoo.torch_compiled)
    torch._dynamo.reset()
    assert theirs_again[:3] == theirs[:3], "the oracle compiled on seen sizes: %s" % (theirs_again,)
    ours, ours_again = _run(name, model_zoo.shapejit_compiled)
    print("%s: torch.compile %s, shapejit %s" % (name, theirs, ours))
    assert ours.graphs <= theirs.graphs and ours.recompiles <= theirs.recompiles, (
        "shapejit %s, torch.compile %s" % (ours, theirs))
    assert ours_again[:3] == ours[:3], "calls on seen sizes compiled again: %s -> %s" % (
        ours, ours_again)
