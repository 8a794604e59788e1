"""The ranks of tests/hook/test_collectives.py, started by torch.multiprocessing.spawn: a module
of its own so that each rank imports torch, torch.distributed and shapejit only (not pytest,
not the test file), which keeps the ranks' start-up short on a loaded machine."""
import json
import os
import time
import warnings

import torch
import torch.distributed as dist

import shapejit

BATCH = [4, 6, 9]   # rank r's first batch size; later each rank runs the others' sizes too


def _model(x, n):
    return torch.relu(x @ x.t()).sum(1) * n + x.mean()


def _with_break(x, n):
    y = torch.relu(x) * n
    if y.sum() > -1e9:   # a graph break: the rest is a resume function, compiled on its own
        y = y + 1
    return y.sum(1)


TABLE = [3, 5, 7]   # rank r's first row count of _table, a global the arguments do not reach
_table = None


def _with_global(x, n):
    return (x @ _table.t()).sum(0) * n + x.sum()


def _phase(knob_on, world, rank, model=_model):
    """One compiled function called with this rank's batch first, then the others'.
    Returns (recompiles, graphs, every result equal to eager). The eager backend keeps the
    ranks short (what is compiled is decided before the backend runs); torch's spelling
    (torch.compile, torch._dynamo.config) is tested in one process with a stand-in peer,
    as importing torch._dynamo in every rank costs seconds."""
    shapejit.reset()
    fn = shapejit.compile(lambda x, n: model(x, n), backend="eager")
    global _table
    order = [rank] + [r for r in range(world) if r != rank]
    ok = True
    with shapejit.config.patch(enable_compiler_collectives=knob_on):
        for r in order:
            _table = torch.randn(TABLE[r], 8)
            x = torch.randn(BATCH[r], 8)
            ok = ok and torch.allclose(fn(x, 3), model(x, 3), atol=1e-5)
    s = shapejit.stats()
    return {"recompiles": s["recompiles"], "graphs": s["graphs"], "equal": bool(ok)}


def run(rank, world, port, out_dir, timeout_rank):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        result = {"off": _phase(False, world, rank)}
        dist.barrier()
        result["on"] = _phase(True, world, rank)
        dist.barrier()
        result["break_off"] = _phase(False, world, rank, _with_break)
        dist.barrier()
        result["break_on"] = _phase(True, world, rank, _with_break)
        dist.barrier()
        result["global_off"] = _phase(False, world, rank, _with_global)
        dist.barrier()
        result["global_on"] = _phase(True, world, rank, _with_global)
        dist.barrier()
        # one rank runs eagerly: the others compile alone and must not wait past the timeout
        shapejit.reset()
        fn = shapejit.compile(lambda x: torch.tanh(x) * 2, backend="eager")
        x = torch.randn(BATCH[rank], 5)
        with shapejit.config.patch(enable_compiler_collectives=True, compiler_collectives_timeout=1):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                t0 = time.monotonic()
                y = fn(x) if rank != timeout_rank else torch.tanh(x) * 2
                waited = time.monotonic() - t0
        result["timeout"] = {"waited": waited, "equal": bool(torch.allclose(y, torch.tanh(x) * 2)),
                             "warnings": [str(w.message) for w in caught],
                             "graphs": shapejit.stats()["graphs"]}
        dist.barrier()
    finally:
        dist.destroy_process_group()
    with open(os.path.join(out_dir, "rank%d.json" % rank), "w") as f:
        json.dump(result, f)
