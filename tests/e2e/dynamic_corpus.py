"""The dynamic-shapes sweep corpus: functions and modules called with changing sizes and
ints, for test_dynamic_oracle.py, which runs every case under each of its modes through
torch.compile (the oracle, with a graph-counting backend) and through shapejit, and
checks that both compile the same number of graphs and that every result equals eager.

A ``Case`` holds:

- ``fn``: the function; for ``module=True`` cases a factory returning an ``nn.Module``
  instance (the instance is compiled, and called eagerly for the reference);
- ``calls``: a zero-argument function building the call sequence, a list whose items are
  argument tuples or ``Call`` objects (a ``Call`` may also set attributes of the module
  before the call). It is rebuilt, under ``torch.manual_seed(seed)``, for every run, so
  every run sees fresh tensors with the same values (and modules the same parameters);
- the modes it runs under (``Case.modes``):

  ``auto``      the default compile (dynamic=None): sizes start static and become
                dynamic once seen to change (automatic dynamic);
  ``dyn_true``  dynamic=True: every size and int dynamic from the first compile;
  ``dyn_false`` dynamic=False: every size static, each new size recompiles (up to the
                cache limit, 8 for both torch and shapejit);
  ``mark``      the default compile, with ``mark_fn`` (mark_dynamic or
                maybe_mark_dynamic) applied to each (arg index, dim) of ``mark`` before
                the FIRST call only (as the seed document's example does) or, with
                ``mark_each=True``, before EVERY call (on that call's fresh tensors);
  ``sources``   the default compile with the ``dynamic_sources`` knob set to
                ``sources`` (torch.compiler.config.patch / shapejit.config.patch) around
                all the calls.

  ``mark`` is in the modes only when ``mark`` is given, ``sources`` only when
  ``sources`` is given; ``modes=`` overrides the whole list.

Everything is torch-only, CPU, float32 and small. Graph counts are never written here: the
oracle is torch.compile, run in the same test session.
"""
import dataclasses
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

BASE_MODES = ("auto", "dyn_true", "dyn_false")
ALL_MODES = BASE_MODES + ("mark", "sources")


@dataclasses.dataclass
class Call:
    """One call: positional args, and module attributes to set before it (module cases)."""
    args: Tuple
    attrs: Dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Case:
    name: str
    fn: Callable                     # the function, or a module factory when module=True
    calls: Callable[[], List[Any]]   # builds [args tuple | Call, ...]
    mark: Tuple[Tuple[int, int], ...] = ()   # (arg index, dim) pairs for mode "mark"
    mark_each: bool = False          # mark before every call (else before the first only)
    mark_fn: str = "mark_dynamic"    # or "maybe_mark_dynamic"
    sources: str = ""                # dynamic_sources for mode "sources"
    module: bool = False
    modes: Optional[Tuple[str, ...]] = None
    seed: int = 0
    rtol: float = 1e-5
    atol: float = 1e-5
    note: str = ""

    def __post_init__(self):
        if self.modes is None:
            modes = list(BASE_MODES)
            if self.mark:
                modes.append("mark")
            if self.sources:
                modes.append("sources")
            self.modes = tuple(modes)
        unknown = set(self.modes) - set(ALL_MODES)
        if unknown:
            raise ValueError("%s: unknown modes %s" % (self.name, sorted(unknown)))
        if "mark" in self.modes and not self.mark:
            raise ValueError("%s: mode 'mark' needs mark=" % self.name)
        if "sources" in self.modes and not self.sources:
            raise ValueError("%s: mode 'sources' needs sources=" % self.name)
        if self.mark_fn not in ("mark_dynamic", "maybe_mark_dynamic"):
            raise ValueError("%s: mark_fn must be mark_dynamic or maybe_mark_dynamic"
                             % self.name)

    def build(self):
        """(module or None, [Call, ...]) with fresh, seeded tensors and parameters. The
        global RNG state is left as it was."""
        with torch.random.fork_rng():
            torch.manual_seed(self.seed)
            module = self.fn() if self.module else None
            if module is not None:
                module.eval()
            calls = [c if isinstance(c, Call) else Call(tuple(c)) for c in self.calls()]
        return module, calls

    def __repr__(self):
        return "<dynamic case %s>" % self.name


CASES: List[Case] = []


def case(calls, **kw):
    """Decorator: registers the function (or module factory) as a Case named after it."""
    def deco(fn):
        name = fn.__name__
        if any(c.name == name for c in CASES):
            raise ValueError("duplicate dynamic case %s" % name)
        CASES.append(Case(name=name, fn=fn, calls=calls, **kw))
        return fn
    return deco


# ---- input helpers (called inside Case.build, under the case's seed) -----------------
def R(*shape):
    return torch.randn(*shape)


def each(shapes):
    """A call per shape, one fresh tensor argument each."""
    return lambda: [(R(*s),) for s in shapes]


def sizes(*ns):
    return each([(n,) for n in ns])


# =======================================================================================
# Size reads in pointwise code
# =======================================================================================
@case(sizes(10, 20, 30, 40), mark=((0, 0),), sources="L['x']",
      note="the seed documents' f: x * x.size()[0]")
def size0_mul(x):
    return x * x.size()[0]


@case(each([(4, 3), (4, 5), (4, 7), (4, 9)]), mark=((0, 1),), sources="L['x']")
def shape_last(x):
    return x * x.shape[-1] + 1


@case(sizes(5, 6, 7, 8, 9), mark=((0, 0),), mark_each=True, sources="L['x']")
def len_add(x):
    return x + len(x)


@case(each([(2, 3), (2, 5), (3, 5), (4, 6), (5, 7)]), mark=((0, 0), (0, 1)),
      sources="L['x']")
def numel_div(x):
    return x / x.numel()


@case(each([(3, 4), (5, 4), (5, 6), (7, 8)]), mark=((0, 0), (0, 1)), sources="L['x']")
def size_arith(x):
    a, b = x.shape
    return x * (a * 2 + b - 1) - (a * b) % 5


@case(sizes(3, 4, 5, 6), sources="L['x']",
      note="no tensor op: dynamo makes no graph at all")
def size_only(x):
    return x.shape[0] * 2 + 1


@case(sizes(3, 4, 5, 6), sources="L['nope'],L['x'].nope",
      note="dynamic_sources naming nothing that exists: no error, automatic dynamic")
def sources_missing(x):
    return x.cos() * x.shape[0]


# =======================================================================================
# Views and reshapes
# =======================================================================================
@case(each([(3, 2, 3), (4, 2, 3), (6, 2, 3), (9, 2, 3)]), mark=((0, 0),), sources="L['x']")
def view_minus1(x):
    return x.view(-1, 6).sum(1) + x.view(-1)[:3].sum()


@case(each([(2, 3, 4), (3, 3, 4), (3, 5, 4), (4, 5, 4)]), mark=((0, 0), (0, 1)),
      sources="L['x']")
def reshape_expr(x):
    return x.reshape(x.shape[0] * x.shape[1], x.shape[2]).cumsum(0)


@case(each([(2, 4), (3, 6), (4, 8), (5, 10)]), mark=((0, 0), (0, 1)), sources="L['x']")
def view_size_expr(x):
    return x.view(x.size(0), x.size(1) // 2, 2).amax(-1)


@case(each([(2, 3, 4), (3, 3, 4), (4, 3, 4), (5, 3, 4)]), mark=((0, 0),), sources="L['x']")
def transpose_permute(x):
    return x.transpose(0, 1).contiguous() * 2 + x.permute(2, 1, 0).sum(-1).t().unsqueeze(1)


@case(each([(2, 3), (4, 3), (5, 3), (7, 3)]), mark=((0, 0),), sources="L['x']")
def unsqueeze_expand(x):
    return x.unsqueeze(0).expand(3, -1, -1) + x.unsqueeze(1).expand(-1, 2, -1).sum(1)


# =======================================================================================
# Reductions, normalisation, matmul
# =======================================================================================
@case(each([(3, 4), (5, 4), (5, 7), (8, 9)]), mark=((0, 0), (0, 1)), sources="L['x']")
def sum_mean_dims(x):
    return x.sum(dim=1) + x.mean(dim=0, keepdim=True).sum() - x.sum((0, 1))


@case(each([(2, 3), (2, 8), (2, 17), (2, 30)]), mark=((0, 1),), sources="L['x']")
def softmax_seq(x):
    return F.softmax(x, dim=-1) * x.shape[-1]


@case(each([(2, 3, 8), (2, 5, 8), (3, 9, 8), (4, 12, 8)]), mark=((0, 1),), mark_each=True,
      sources="L['x']")
def layernorm_seq(x):
    return F.layer_norm(x, (8,)) + F.log_softmax(x, dim=1)


@case(each([(2, 3, 8), (2, 5, 8), (3, 9, 16), (4, 6, 24)]), mark=((0, 1), (0, 2)), sources="L['x']")
def rmsnorm_seq_hidden(x):
    return F.rms_norm(x, (x.shape[-1],)) * torch.rms_norm(x, x.shape[-2:], eps=1e-6)


_W = torch.Generator().manual_seed(1)
_MATMUL_W = torch.randn(4, 5, generator=_W)


@case(each([(2, 4), (3, 4), (6, 4), (9, 4)]), mark=((0, 0),), sources="L['x']")
def matmul_const_weight(x):
    return x @ _MATMUL_W


@case(lambda: [(R(n, 3), R(3, m)) for n, m in [(2, 4), (3, 5), (4, 6), (5, 7)]],
      mark=((0, 0), (1, 1)), sources="L['x'],L['y']")
def matmul_two(x, y):
    return torch.matmul(x, y).relu()


# =======================================================================================
# Several inputs: cat/stack, duck sizing, broadcasting
# =======================================================================================
@case(lambda: [(R(n, 3), R(m, 3)) for n, m in [(2, 3), (4, 3), (4, 6), (7, 5)]],
      mark=((0, 0), (1, 0)), sources="L['x'],L['y']")
def cat_inputs(x, y):
    return torch.cat([x, y, x], dim=0) * 2


@case(lambda: [(R(n), R(n)) for n in (3, 5, 8, 11)], mark=((0, 0), (1, 0)),
      sources="L['x'],L['y']", note="equal sizes: one symbol for both (duck sizing)")
def stack_equal(x, y):
    return torch.stack([x, y], dim=1).sum(1)


@case(lambda: [(R(n), R(n)) for n in (4, 6, 9, 12)], mark=((0, 0),),
      mark_fn="maybe_mark_dynamic", sources="L['x']",
      note="duck sizing; only x is marked / listed (mark_dynamic would be a constraint "
           "violation in torch: y's equal, static size specialises x's)")
def duck_add(x, y):
    return x + y * y.shape[0]


@case(lambda: [(R(n), R(m)) for n, m in [(3, 3), (4, 5), (6, 2), (7, 7)]],
      mark=((0, 0), (1, 0)), sources="L['x'],L['y']",
      note="sizes equal on the first call, then independent")
def duck_then_split(x, y):
    return x.sum() * y.shape[0] + y.mean() * x.shape[0]


@case(lambda: [(R(n, m), R(1, m)) for n, m in [(2, 3), (5, 3), (5, 4), (8, 6)]],
      mark=((0, 0), (0, 1), (1, 1)), sources="L['x'],L['y']")
def broadcast_row(x, y):
    return x + y


# =======================================================================================
# Slicing
# =======================================================================================
@case(sizes(6, 8, 10, 13, 20), mark=((0, 0),), sources="L['x']")
def slice_half(x):
    return x[: x.shape[0] // 2] * 2 + x[x.shape[0] // 2 : 2 * (x.shape[0] // 2)]


@case(lambda: [(R(12), n) for n in (3, 4, 5, 7, 9)], sources="L['n']",
      note="an int argument used as a slice bound")
def slice_int(x, n):
    return x[:n] * 2


@case(lambda: [(R(n + 3), n) for n in (2, 4, 6, 9)], mark=((0, 0),),
      sources="L['x'],L['n']")
def slice_neg_int(x, n):
    return x[-n:] + x[:n].flip(0)


# =======================================================================================
# Branches on sizes
# =======================================================================================
@case(sizes(8, 12, 20, 24, 10, 30), mark=((0, 0),), sources="L['x']")
def branch_gt16(x):
    if x.shape[0] > 16:
        return x * 2
    return x - 1


@case(sizes(10, 20, 30, 40, 50), mark=((0, 0),), mark_fn="maybe_mark_dynamic",
      sources="L['x']",
      note="the seed documents' specialization example (== 10 specialises the size)")
def branch_eq10_le30(x):
    if x.size()[0] == 10:
        return x * 10
    if x.size()[0] <= 30:
        return x * 200
    return x * x.size()[0]


@case(lambda: [(R(n), R(m)) for n, m in [(5, 5), (10, 12), (20, 15), (3, 4), (30, 40)]],
      mark=((0, 0), (1, 0)), sources="L['x'],L['y']")
def branch_sum_sizes(x, y):
    if x.shape[0] + y.shape[0] <= 30:
        return x.sum() + y.sum()
    return x.mean() - y.mean()


@case(each([(4, 4), (5, 5), (3, 6), (6, 3), (7, 7)]), mark=((0, 0), (0, 1)),
      mark_fn="maybe_mark_dynamic", sources="L['x']")
def branch_square(x):
    if x.shape[0] == x.shape[1]:
        return x @ x
    return x.t() @ x


# =======================================================================================
# Int arguments
# =======================================================================================
@case(lambda: [(R(4), n) for n in (2, 3, 4, 5, 6)], sources="L['n']")
def int_mul(x, n):
    return x * n + n


@case(lambda: [(R(m), 3) for m in (4, 6, 8, 10)], mark=((0, 0),), sources="L['x']",
      note="the int stays 3; only the tensor size changes")
def int_const(x, n):
    return x * n


@case(lambda: [(R(m), n) for m, n in [(4, 2), (6, 3), (8, 4), (10, 5)]], mark=((0, 0),),
      sources="L['x'],L['n']")
def int_and_size(x, n):
    return x.sum() * n + x.shape[0] * n - n // 2


@case(lambda: [(R(n), n) for n in (2, 3, 4, 6)], sources="L['n']",
      note="factory from an int argument")
def arange_n(x, n):
    return torch.arange(n) * 1.5 + x


@case(lambda: [(R(n, 2), 2) for n in (3, 5, 7, 9)], mark=((0, 0),), sources="L['x']")
def int_branch(x, k):
    if k > 1:
        return x.repeat(k, 1)
    return x


@case(lambda: [(R(4), n) for n in (1, 2, 3, 0, 5)], sources="L['n']",
      note="ints 0 and 1 are not sizes: no 0/1 specialisation")
def int_zero_one(x, n):
    return x * n + n


@case(lambda: [(R(3, 4), d) for d in (0, 1, 0)], sources="L['d']",
      note="an int read as a dim is specialised (guarded) even when it is symbolic")
def int_as_dim(x, d):
    return x.sum(d) + 1


# =======================================================================================
# 0/1 sizes in the sequence
# =======================================================================================
@case(sizes(2, 3, 1, 4, 0, 5, 1), mark=((0, 0),), mark_fn="maybe_mark_dynamic",
      sources="L['x']", note="sizes 0 and 1 are specialised")
def zero_one_seq(x):
    return x * 2 + x.shape[0]


@case(each([(1, 3), (2, 3), (5, 3), (1, 4), (6, 1)]), mark=((0, 0),),
      mark_fn="maybe_mark_dynamic", sources="L['x']")
def zero_one_2d(x):
    return x.sum(0) + x.shape[1] * x.mean(1).sum()


# =======================================================================================
# Factories from sizes
# =======================================================================================
@case(each([(3, 2), (4, 2), (6, 2), (8, 2)]), mark=((0, 0),), sources="L['x']")
def zeros_factory(x):
    return torch.zeros(x.shape[0]) + x.sum(1) + torch.ones(x.shape[0], 1).sum(1)


@case(each([(3, 4), (5, 4), (6, 5), (9, 5)]), mark=((0, 0), (0, 1)), sources="L['x']")
def new_ones(x):
    return x.new_ones(x.shape[0], 2) * x[:, :1] + x.new_zeros(x.shape).sum(1, keepdim=True)


@case(each([(3, 2), (5, 2), (7, 2), (9, 2)]), mark=((0, 0),), sources="L['x']")
def arange_size(x):
    return x * torch.arange(x.shape[0]).unsqueeze(1).float()


# =======================================================================================
# Python loops over sizes
# =======================================================================================
@case(each([(2, 3), (3, 3), (4, 3), (5, 3)]), mark=((0, 0),), mark_fn="maybe_mark_dynamic",
      sources="L['x']", note="range(x.shape[0]) unrolls: specialises the size")
def range_loop(x):
    acc = x[0] * 0
    for i in range(x.shape[0]):
        acc = acc + x[i] * (i + 1)
    return acc


@case(sizes(4, 5, 6, 7), mark=((0, 0),), sources="L['x']")
def fixed_loop(x):
    for _ in range(3):
        x = torch.sin(x) + x.shape[0]
    return x


# =======================================================================================
# Modules
# =======================================================================================
@case(each([(2, 8), (3, 8), (5, 8), (9, 8)]), module=True, mark=((0, 0),),
      modes=("auto", "dyn_true", "dyn_false", "mark"),
      note="no sources mode: torch.compile of a torch.nn module compiles a wrapper frame, "
           "where the input is L['args'][0]; user modules below cover dynamic_sources")
def linear_module():
    return nn.Linear(8, 4)


class _MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))

    def forward(self, x):
        return self.net(x)


@case(each([(2, 8), (4, 8), (7, 8), (16, 8), (1, 8)]), module=True, mark=((0, 0),),
      mark_fn="maybe_mark_dynamic", sources="L['x']",
      note="a small MLP; the batch sizes end with 1")
def mlp_module():
    return _MLP()


class _Scaled(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.k = k
        self.fc = nn.Linear(6, 6)

    def forward(self, x):
        return self.fc(x).repeat(1, self.k) * self.k


@case(each([(2, 6), (3, 6), (5, 6), (8, 6)]), module=True, mark=((0, 0),), sources="L['x']",
      note="an int attribute that stays 2")
def module_int_attr():
    return _Scaled(2)


@case(lambda: [Call((R(3, 6),), {"k": k}) for k in (1, 2, 3, 4)], module=True,
      sources="L['x']", modes=("auto", "dyn_true", "dyn_false"),
      note="the int attribute changes: nn-module ints are specialised")
def module_int_attr_changes():
    return _Scaled(1)


class _Encoderish(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)

    def forward(self, x):
        h = self.norm(self.proj(x))
        w = torch.softmax(h.sum(-1), dim=-1)
        return (h * w.unsqueeze(-1)).sum(1) / x.shape[1]


@case(each([(2, 3, 8), (2, 5, 8), (3, 5, 8), (4, 9, 8)]), module=True,
      mark=((0, 0), (0, 1)), sources="L['x']")
def encoder_module():
    return _Encoderish()


# =======================================================================================
# narrow/select/split/chunk/unbind, setitem, conv/pool (symbolic twins)
# =======================================================================================
@case(each([(8, 3), (9, 4), (11, 5), (12, 6)]), mark=((0, 0),), sources="L['x']",
      note="split(3) guards the piece count: 8 and 9 rows are 3 pieces, 11 and 12 four")
def split_count(x):
    a = x.split(3)
    return torch.cat([t * i for i, t in enumerate(a)]) + x.narrow(0, 1, 3).sum() + x.select(1, -1).sum()


@case(each([(8, 3), (9, 5), (10, 7), (13, 4)]), mark=((0, 0),), sources="L['x']")
def chunk_unbind(x):
    a, b, c = x.chunk(3)
    return a.sum(0) + b.sum(0) + c.sum(0), [t * 2 for t in x[:2].unbind(0)]


@case(lambda: [(R(n, 3), R(m, 3)) for n, m in [(7, 4), (8, 5), (9, 6), (12, 4)]],
      mark=((0, 0), (1, 0)), sources="L['x'],L['y']")
def setitem_slice(x, y):
    x = x.clone()
    x[1:y.shape[0] + 1] = y * 2
    return x


class _SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3)
        self.head = nn.Linear(32, 5)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.conv(x)), 2)
        h = F.avg_pool2d(self.conv2(h), 2, ceil_mode=True)
        return self.head(F.adaptive_avg_pool2d(h, (2, 2)).flatten(1))


@case(each([(2, 3, 16, 16), (3, 3, 20, 17), (5, 3, 33, 29), (4, 3, 15, 15)]), module=True,
      mark=((0, 0), (0, 2), (0, 3)), sources="L['x']",
      note="square images first: H and W duck-sized, then a recompile gives them their own symbols")
def small_cnn():
    return _SmallCNN()


# =======================================================================================
# The batch x sequence sweep function (also used by the 0/1 grid test)
# =======================================================================================
def batch_seq_fn(x):
    """x: (batch, seq, 4)."""
    h = F.layer_norm(x, (4,))
    w = torch.softmax(h.sum(-1), dim=-1)            # (batch, seq)
    return (h * w.unsqueeze(-1)).sum(1) / x.shape[1]  # (batch, 4)


CASES.append(Case(
    name="batch_seq_small", fn=batch_seq_fn,
    calls=each([(2, 2, 4), (3, 5, 4), (1, 5, 4), (3, 1, 4), (1, 1, 4), (4, 7, 4)]),
    mark=((0, 0), (0, 1)), mark_fn="maybe_mark_dynamic", sources="L['x']"))


def case_ids():
    return [c.name for c in CASES]


def params():
    """[(case, mode), ...] in corpus order."""
    return [(c, m) for c in CASES for m in c.modes]
