"""Threads with small C stacks (threading.stack_size): compiled functions give eager's
values and never overflow the C stack. Where the stack cannot hold a compile, the frame
runs eagerly; where it can, it is compiled (the kernel disk cache read and written too)."""
import os
import subprocess
import sys

from repo import repo_root


_PROG = r"""
import sys, threading, torch, numpy as np, shapejit

def l3(x):
    return (x * 2 + 1).clip(0, 5) + x.mean()

def l2(x):
    return l3(x) + l3(x * 2)

def t_loop(x, n):
    for i in range(n):
        x = l2(x)
    print(end="")   # a graph break
    return x.sum()

def np_loop(x, n):
    while n > 0:
        x = np.sin(l2(x)) * 2
        n -= 1
    print(end="")
    return x.sum()

out = []
def run(size):
    res = []
    for fn, make in ((t_loop, lambda: torch.arange(4.0)), (np_loop, lambda: np.arange(4.0))):
        c = shapejit.compile(fn)(make(), 3)
        e = fn(make(), 3)
        res.append(abs(float(c) - float(e)) <= 1e-9 * max(1.0, abs(float(e))))
    out.append((size, all(res), shapejit._C.stats()["graphs"]))

for kib in (32, 48, 64, 96, 256):
    shapejit.reset()
    threading.stack_size(kib * 1024)
    t = threading.Thread(target=run, args=(kib,))
    t.start()
    t.join()
print(out)
"""


def _run(cache_dir):
    env = dict(os.environ, SHAPEJIT_CACHE_DIR=cache_dir,
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    return subprocess.run([sys.executable, "-c", _PROG], capture_output=True, text=True,
                          env=env, timeout=300, cwd=repo_root())


def test_small_thread_stacks_never_crash(tmp_path):
    for attempt in ("cold disk cache", "warm disk cache"):
        p = _run(str(tmp_path / "cache"))
        assert p.returncode == 0, (attempt, p.returncode, p.stderr[-2000:])
        rows = eval(p.stdout.strip().splitlines()[-1])
        assert [r[0] for r in rows] == [32, 48, 64, 96, 256], rows
        assert all(r[1] for r in rows), (attempt, rows)   # eager's values everywhere
        assert rows[-1][2] > 0, rows                       # a 256 KiB stack compiles
