"""shapejit never runs one of oneDNN's reference implementations (backend/dnnl_api.c,
dnnl_api_is_ref): the benchmark suite's convolution and matmul workloads (bench/workloads.py
at small sizes), a MobileNet-style depthwise block, a small MobileNetV2 and a convolution + batch norm +
residual + relu whose post-ops oneDNN runs only with ref:any on AVX2 run compiled in
a child process with ONEDNN_VERBOSE=1, once with oneDNN (ours and torch's), our kernels
and eager torch held to AVX2 and once on the machine's own ISA; every primitive our
oneDNN executes must name a jit implementation, and every result equals eager.

Telling our oneDNN's lines from torch's: torch bundles its own oneDNN, which reads the same
variable. The child turns torch's copy off (torch._C._verbose.mkldnn_set_verbose(0), which
sets only torch's), so every execution line left is ours; it also checks that the lines are
in our library's format (2.6: "onednn_verbose,exec,..."; torch's 3.x prints
"onednn_verbose,v1,...") and that there are some (the check is not vacuous)."""
import json
import os
import subprocess
import sys

import pytest

from repo import package_parent, repo_root, source_path


# name: size (workloads.py's size tuple); "dwblock" and "mobilenet_v2" are built below
CASES = {
    "resnet": (2,), "bert": (2, 16), "gpt2": (2, 16), "vit": (2,), "mlp": (8,), "encoder_s32": (2, 16),
    "attention": (2, 16), "dwblock": (2,), "mobilenet_v2": (2,), "bn_inf_block": (8,),
}

ISAS = {
    "avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "SHAPEJIT_CPU_TARGET": "x86-64-v3", "ATEN_CPU_CAPABILITY": "avx2"},
    "native": {},
}

CHILD = r"""
import json, sys
import torch
torch.set_num_threads(1)
torch._C._verbose.mkldnn_set_verbose(0)   # torch's own oneDNN: silent from here
from torch import nn
sys.path.insert(0, sys.argv[1])   # bench/: its modules import each other by bare name
import workloads
import shapejit
shapejit.set_logs(output_code=True)   # what dnnl_api.c avoided, on stderr
import ctypes
libc = ctypes.CDLL(None)

def mark(text):
    # oneDNN writes its lines with C stdio: flush those before a marker on the same fd
    libc.fflush(None)
    print("@@ " + text, flush=True)

class DwBlock(nn.Module):
    # MobileNetV2's inverted residual: expand 1x1, depthwise 3x3, project 1x1, residual add
    def __init__(self, c=16, e=4):
        super().__init__()
        h = c * e
        self.expand = nn.Sequential(nn.Conv2d(c, h, 1, bias=False), nn.BatchNorm2d(h), nn.ReLU6())
        self.dw = nn.Sequential(nn.Conv2d(h, h, 3, padding=1, groups=h, bias=False), nn.BatchNorm2d(h), nn.ReLU6())
        self.project = nn.Sequential(nn.Conv2d(h, c, 1, bias=False), nn.BatchNorm2d(c))
    def forward(self, x):
        return x + self.project(self.dw(self.expand(x)))

def randomize_bn(m):
    g = torch.Generator().manual_seed(0)
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            n = mod.num_features
            mod.running_mean.copy_(torch.randn(n, generator=g) * 0.1)
            mod.running_var.copy_(torch.rand(n, generator=g) + 0.5)
            mod.weight.data.copy_(torch.rand(n, generator=g) + 0.5)
            mod.bias.data.copy_(torch.randn(n, generator=g) * 0.1)
    return m

class BnInfBlock(nn.Module):
    # a convolution, a batch norm whose scale is infinite in one channel (variance 0, eps 0)
    # and a residual add: the batch norm stays per-channel post-ops (not folded into the
    # weights), and on AVX2 oneDNN 2.6 has only ref:any for mul+add+sum, so the sum runs
    # after the primitive. (No relu: oneDNN's fused relu turns NaN into 0, eager keeps it.)
    def __init__(self, c=16):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(c, eps=0.0)
    def forward(self, x, r):
        return self.bn(self.conv(x)) + r

def build(name):
    torch.manual_seed(0)
    if name == "bn_inf_block":
        # small integers: the convolution is exact in any summation order, so the infinite
        # channel's inf / NaN pattern is eager's (which computes x * scale + shift too)
        m = randomize_bn(BnInfBlock().eval())
        m.bn.running_var[3] = 0.0
        m.conv.weight.data.copy_(torch.randint(-1, 2, m.conv.weight.shape).float())
        ints = lambda b: torch.randint(-2, 3, (b, 16, 16, 16)).float()   # noqa: E731
        return m, lambda b: (ints(b), ints(b))
    if name == "dwblock":
        return randomize_bn(DwBlock().eval()), lambda b: (torch.randn(b, 16, 12, 12),)
    if name == "mobilenet_v2":
        from transformers import MobileNetV2Config, MobileNetV2Model
        cfg = MobileNetV2Config(image_size=64, depth_multiplier=0.35)
        return randomize_bn(MobileNetV2Model(cfg).eval()), lambda b: (torch.randn(b, 3, 64, 64),)
    w = workloads.build(name)
    return w.fn, w.make_args

def flat(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in flat(o)]
    if hasattr(out, "to_tuple"):
        return flat(out.to_tuple())
    return []

results = {}
for name, size in json.loads(sys.argv[2]).items():
    fn, make_args = build(name)
    torch.manual_seed(1)
    args = make_args(*size)
    with torch.no_grad():
        want = flat(fn(*args))
        mark("start " + name)
        f = shapejit.compile(fn)
        f(*args)
        got = flat(f(*args))
        mark("end " + name)
    ok = len(got) == len(want) and all(
        torch.allclose(g, w, rtol=1e-4, atol=1e-5, equal_nan=True) and g.shape == w.shape for g, w in zip(got, want))
    diff = max(((g - w).nan_to_num().abs().max().item() for g, w in zip(got, want) if g.shape == w.shape and g.numel()),
               default=0)
    results[name] = {"close": ok, "max_diff": diff}
results["ref_avoided"] = shapejit._C._cg_primcache_info()["ref_avoided"]
mark("results " + json.dumps(results))
"""


def _run_child(isa):
    env = dict(os.environ, ONEDNN_VERBOSE="1", OMP_NUM_THREADS="1", PYTHONPATH=package_parent())
    for k in ("ONEDNN_MAX_CPU_ISA", "SHAPEJIT_CPU_TARGET", "ATEN_CPU_CAPABILITY", "TORCH_LOGS"):
        env.pop(k, None)
    env.update(ISAS[isa])
    p = subprocess.run([sys.executable, "-c", CHILD, source_path("bench"), json.dumps(CASES)], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=900, cwd=repo_root())
    assert p.returncode == 0, p.stdout[-4000:]
    return p.stdout


@pytest.fixture(scope="module", params=sorted(ISAS))
def child(request):
    return request.param, _run_child(request.param)


def _exec_lines(log):
    """Our oneDNN's execution lines, by workload: {name: [line, ...]}."""
    by, cur = {}, None
    for line in log.splitlines():
        if line.startswith("@@ start "):
            cur = line.split()[2]
            by[cur] = []
        elif line.startswith("@@ end "):
            cur = None
        elif cur and line.startswith("onednn_verbose,") and ",exec," in line:
            by[cur].append(line)
    return by


@pytest.mark.slow
def test_no_reference_implementation(child):
    isa, log = child
    assert "oneDNN v2." in log   # our library printed its banner: the check below sees it
    assert "onednn_verbose,v1," not in log, "torch's oneDNN should be silent in the child"
    by = _exec_lines(log)
    assert set(by) == set(CASES)
    total = 0
    for name, lines in by.items():
        for line in lines:
            fields = line.split(",")
            assert fields[1] == "exec", line       # 2.6's format: onednn_verbose,exec,cpu,<kind>,<impl>,...
            impl = fields[4]
            assert not impl.startswith(("ref", "simple")), f"{isa} {name}: {line}"
        total += len(lines)
    # every convolution model runs its convolutions in oneDNN (the test would pass
    # vacuously if they all ran eagerly)
    for name in ("resnet", "dwblock", "mobilenet_v2"):
        assert any(",convolution," in line for line in by[name]), name
    assert total > 0


@pytest.mark.slow
def test_results_equal_eager(child):
    isa, log = child
    line = next(ln for ln in log.splitlines() if ln.startswith("@@ results "))
    results = json.loads(line[len("@@ results "):])
    avoided = results.pop("ref_avoided")
    bad = {k: v for k, v in results.items() if not v["close"]}
    assert not bad, f"{isa}: {bad}"
    notes = [ln for ln in log.splitlines() if ln.startswith("[shapejit] oneDNN")]
    assert all(ln.isprintable() for ln in log.splitlines() if ln.startswith("[shapejit]"))
    assert len(notes) >= avoided   # each avoided reference implementation is logged (and any refusal)
    if isa == "avx2":   # oneDNN 2.6 on AVX2: ref:any for mul+add+sum (bn_inf_block)
        assert any("post-ops sum run after the primitive (ref:any with them)" in ln for ln in notes), notes
