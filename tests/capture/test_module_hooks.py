"""Forward pre-hooks and forward hooks of the modules a compiled function calls are
followed in the graph, as Module.__call__ runs them: a pre-hook may replace the positional
args (a non-tuple result becomes a 1-tuple), a forward hook the result, None keeps them;
hooks run in registration order and their side effects on live lists happen once per
call. Adding or removing a hook recompiles. Compared with eager (values, the hooks' side
effects) and with torch.compile's graph count (a counting backend); hooks of the kinds not
followed (with_kwargs, backward, global) still give eager's results."""
import pytest
import torch
import torch.nn as nn

import shapejit
from graph_counter import GraphCounter


pytestmark = pytest.mark.usefixtures("fresh_compilers")


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(4, 4)
        self.norm = nn.LayerNorm(4)

    def forward(self, x, scale=1.0):
        return self.norm(self.inner(x)) * scale


def _model():
    torch.manual_seed(0)
    return nn.Sequential(Block(), nn.ReLU(), Block())


def pre_tuple(mod, args):
    return (args[0] + 1,) + tuple(args[1:])


def pre_single(mod, args):
    return args[0] * 0.5


def pre_none(mod, args):
    return None


def post_scale(mod, args, out):
    return out * 2 + args[0].mean()


def post_tuple_out(mod, args, out):
    return out.tanh()


def post_none(mod, args, out):
    return None


def _record(log):
    def post_record(mod, args, out):
        log.append(out.sum())
    return post_record


HOOKS = {
    "pre_tuple": [("inner", "pre", pre_tuple)],
    "pre_single": [("inner", "pre", pre_single)],
    "pre_none_post_none": [("inner", "pre", pre_none), ("norm", "post", post_none)],
    "post": [("norm", "post", post_scale)],
    "chain": [("block", "pre", pre_tuple), ("inner", "pre", pre_single), ("inner", "post", post_scale),
              ("block", "post", post_tuple_out), ("norm", "post", post_scale)],
    "record": [("inner", "post", "record"), ("block", "post", "record")],
}


def _install(model, spec, log):
    handles = []
    for where, kind, hook in spec:
        target = {"inner": model[0].inner, "norm": model[2].norm, "block": model[2]}[where]
        hook = _record(log) if hook == "record" else hook
        register = target.register_forward_pre_hook if kind == "pre" else target.register_forward_hook
        handles.append(register(hook))
    return handles


def _inputs(seed, batch=3):
    return torch.randn(batch, 4, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("as_module", [False, True], ids=["function", "module"])
@pytest.mark.parametrize("name", list(HOOKS))
def test_forward_hooks_followed(name, as_module):
    model = _model()
    log = []
    _install(model, HOOKS[name], log)

    def fn(x):
        return model(x).sum(dim=-1)

    target = model if as_module else fn
    counter = GraphCounter()
    theirs = torch.compile(target, backend=counter)
    ours = shapejit.compile(target)
    with torch.no_grad():
        for seed in range(3):
            x = _inputs(seed)
            log.clear()
            expected = target(x)
            eager_log = list(log)
            log.clear()
            torch.testing.assert_close(ours(x), expected)
            assert len(log) == len(eager_log)
            for a, b in zip(log, eager_log):
                torch.testing.assert_close(a, b)
            log.clear()
            torch.testing.assert_close(theirs(x), expected)
    st = shapejit.stats()
    assert st["graph_breaks"] == 0 and st["graphs"] == counter.graphs == 1, (st, counter.graphs)


def test_adding_and_removing_a_hook_recompiles():
    model = _model()

    def fn(x):
        return model(x)

    compiled = shapejit.compile(fn)
    x = _inputs(0)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), fn(x))
        handle = model[0].inner.register_forward_hook(post_scale)
        torch.testing.assert_close(compiled(x), fn(x))
        handle.remove()
        torch.testing.assert_close(compiled(x), fn(x))
        pre = model[2].register_forward_pre_hook(pre_single)
        torch.testing.assert_close(compiled(x), fn(x))
        pre.remove()
        torch.testing.assert_close(compiled(x), fn(x))
    st = shapejit.stats()
    assert st["graph_breaks"] == 0 and st["recompiles"] == 2, st


def test_hook_replaced_in_place_recompiles():
    """The dict keeps its keys when a hook is swapped under the same id: each hook is
    guarded by identity."""
    model = _model()
    handle = model[0].inner.register_forward_hook(post_scale)

    def fn(x):
        return model(x)

    compiled = shapejit.compile(fn)
    x = _inputs(1)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), fn(x))
        model[0].inner._forward_hooks[handle.id] = post_tuple_out
        torch.testing.assert_close(compiled(x), fn(x))


@pytest.mark.parametrize("kind", ["with_kwargs", "pre_with_kwargs", "always_called"])
def test_other_hook_kinds_keep_eager_results(kind):
    model = _model()
    block = model[2]
    if kind == "with_kwargs":
        block.register_forward_hook(lambda m, a, kw, out: out + kw.get("scale", 1.0), with_kwargs=True)
    elif kind == "pre_with_kwargs":
        block.register_forward_pre_hook(lambda m, a, kw: ((a[0] * 3,), kw), with_kwargs=True)
    else:
        block.register_forward_hook(post_scale, always_call=True)

    def fn(x):
        return model(x) + 1

    with torch.no_grad():
        for seed in range(2):
            x = _inputs(seed)
            torch.testing.assert_close(shapejit.compile(fn)(x), fn(x))
