"""The structured trace (TORCH_TRACE): shapejit's trace rendered by the real tlparse.

Each program runs in a subprocess with TORCH_TRACE set, then the `tlparse` binary (PyPI
tlparse 0.4.3, requirements.txt) renders the trace, and its pages are checked: every
compile listed with its stack, recompile reasons, graph breaks, specialisations and the
PGO artifacts; no record tlparse cannot read, and no unknown kind torch does not write
too. The same program under plain torch.compile gives the kinds to compare with.
"""
import glob
import html
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from repo import package_parent

PACKAGE_PARENT = package_parent()
TLPARSE = shutil.which("tlparse")

pytestmark = pytest.mark.skipif(
    TLPARSE is None, reason="the tlparse binary is not installed (pip install tlparse==0.4.3)")

# The seed's programs: automatic dynamic on a size, a specialisation (iterating over a
# tensor unrolls its first dim), a graph break (print), an int argument that varies.
PROGRAM = """
import sys
import torch
backend = "eager"   # torch.compile as the oracle: dynamo without inductor's codegen
if sys.argv[1] == "shapejit":
    import shapejit
    shapejit.install_torch_compat()
    backend = None  # shapejit's default: the cpu backend (its kernel code is traced too)


def f(x):
    return x * x.size()[0]


def g(x):
    y = x.sin()
    print("break")
    return y.cos()


def h(x, n):
    out = x
    for row in x:
        out = out + row.sum()
    return out * n


cf, cg, ch = (torch.compile(fn, backend=backend) if backend else torch.compile(fn) for fn in (f, g, h))
for k in (10, 20, 30, 40):
    torch.testing.assert_close(cf(torch.rand(k)) * 0, torch.zeros(k))
x = torch.rand(3)
torch.testing.assert_close(cg(x), x.sin().cos())
for k in (3, 4):
    x = torch.rand(k, 2)
    torch.testing.assert_close(ch(x, k), h(x, k))
print("ok")
"""


def line_of(text):
    """The line number of the first line of PROGRAM that contains text."""
    lines = textwrap.dedent(PROGRAM).split("\n")
    return next(i for i, line in enumerate(lines, 1) if text in line)


def run(tmp_path, name, compiler, **env):
    prog = tmp_path / "prog.py"
    if not prog.exists():
        prog.write_text(textwrap.dedent(PROGRAM))
    trace = tmp_path / name
    # the cache directory stays the user's, so the kernel cache is warm (no C compiles);
    # the PGO store of the test's own job is removed by the fixture
    full = dict(os.environ, PYTHONPATH=PACKAGE_PARENT, TORCH_TRACE=str(trace),
                TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))
    for var in ("TORCH_LOGS", "TORCH_COMPILE_DYNAMIC_SOURCES", "TORCH_COMPILE_JOB_ID",
                "TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO"):
        full.pop(var, None)
    full.update(env)
    p = subprocess.run([sys.executable, str(prog), compiler], env=full, cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.endswith("ok\n"), p.stdout + p.stderr
    return trace, p


def trace_file(trace):
    files = sorted(glob.glob(str(trace / "*.log")))
    assert len(files) == 1, files   # one file per process
    return files[0]


def tlparse(trace, out):
    """Runs tlparse; returns (its stderr, {compile id dir: [file names]})."""
    p = subprocess.run([TLPARSE, trace_file(trace), "-o", str(out), "--overwrite", "--no-browser"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    dirs = {d: sorted(os.listdir(out / d)) for d in os.listdir(out)
            if (out / d).is_dir() and d.startswith("-_")}
    return p.stderr, dirs


def stats(stderr):
    """tlparse's summary line as a dict: Stats { ok: 27, unknown: 1 }."""
    m = re.search(r"Stats \{([^}]*)\}", stderr)
    assert m, stderr
    return {k.strip(): int(v) for k, v in (kv.split(":") for kv in m.group(1).split(",") if kv.strip())}


def unknown_fields(stderr):
    m = re.search(r"Unknown fields: \{([^}]*)\}", stderr)
    return set(re.findall(r'"([^"]+)"', m.group(1))) if m else set()


def text_of(path):
    s = open(path, encoding="utf-8").read()
    s = re.sub(r"<(style|script).*?</\1>", "", s, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", s))


def kinds(trace):
    """The record kinds of a trace: the metadata key of each line ("artifact:<name>" for
    artifacts), compile-id keys left out."""
    out = set()
    for line in open(trace_file(trace), encoding="utf-8"):
        if not line.startswith(("V", "I", "W")):
            continue
        record = json.loads(line.split("] ", 1)[1])
        for key, value in record.items():
            if key in ("frame_id", "frame_compile_id", "attempt", "has_payload", "rank", "stack"):
                continue
            out.add("artifact:" + value["name"] if key == "artifact" else key)
    return out


def one(dirs, out, cid, prefix):
    names = [n for n in dirs[cid] if n.startswith(prefix)]
    assert names, (cid, prefix, dirs[cid])
    return open(out / cid / names[0], encoding="utf-8").read()


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """The program traced under shapejit (PGO cold then warm run) and under torch.compile."""
    from shapejit import pgo as store
    tmp = tmp_path_factory.mktemp("trace")
    job = "shapejit-test-trace-%d-%s" % (os.getpid(), os.path.basename(str(tmp)))
    saved = os.environ.get(store.JOB_ENV)
    os.environ[store.JOB_ENV] = job
    try:
        store_path = store.path()
    finally:
        if saved is None:
            del os.environ[store.JOB_ENV]
        else:
            os.environ[store.JOB_ENV] = saved
    pgo = {store.JOB_ENV: job, store.ENABLE_ENV: "1"}
    try:
        cold, _ = run(tmp, "cold", "shapejit", **pgo)
        warm, _ = run(tmp, "warm", "shapejit", **pgo)
        torch_trace, _ = run(tmp, "torch", "torch")
        yield tmp, cold, warm, torch_trace
    finally:
        if os.path.exists(store_path):
            os.unlink(store_path)


def test_line_format(traces):
    """Every line is a glog-style record or a tab-indented payload line; payload md5s match."""
    import hashlib
    _, cold, _, _ = traces
    lines = open(trace_file(cold), encoding="utf-8").read().split("\n")
    prefix = re.compile(r"^V\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ [^:]+:\d+\] \{")
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line:
            i += 1
            continue
        assert prefix.match(line), line
        record = json.loads(line.split("] ", 1)[1])
        j = i + 1
        while j < len(lines) and lines[j].startswith("\t"):
            j += 1
        if "has_payload" in record:
            payload = "\n".join(part[1:] for part in lines[i + 1:j])
            assert hashlib.md5(payload.encode()).hexdigest() == record["has_payload"], line
        else:
            assert j == i + 1, line
        i = j


def test_tlparse_renders_every_compile(traces):
    tmp, cold, _, _ = traces
    out = tmp / "out_cold"
    stderr, dirs = tlparse(cold, out)
    st = stats(stderr)
    assert {k: v for k, v in st.items() if k.startswith("fail")} == {}, stderr
    assert unknown_fields(stderr) <= {"create_symbol"}, stderr   # torch 2.13 writes it too
    # f: static then dynamic (automatic dynamic); g: a break and its resume; h: two compiles
    for cid in ("-_0_0_0", "-_0_1_0", "-_1_0_0", "-_2_0_0", "-_3_0_0", "-_3_1_0"):
        assert cid in dirs, sorted(dirs)
        assert any(n.startswith("compilation_metrics") for n in dirs[cid]), dirs[cid]
        assert any(n.startswith("dynamo_output_graph") for n in dirs[cid]), dirs[cid]
        assert any(n.startswith("dynamo_cpp_guards_str") for n in dirs[cid]), dirs[cid]
    index = text_of(out / "index.html")
    for link in ("[0/0]", "[0/1]", "[1/0]", "[2/0]", "[3/0]", "[3/1]"):
        assert link in index, index
    # the stack trie: each compile under the user line that called it
    for frame in ("%d in f" % line_of("def f("), "%d in g" % line_of("def g("), "%d in h" % line_of("def h("),
                  "%d in <module>" % line_of("torch.rand(k)) * 0")):
        assert "prog.py:" + frame in index, (frame, index)
    assert "resume_in_g_at_%d" % line_of('print("break")') in index, index
    # its build products: the recompile reasons, the PGO artifact, the break, the metrics
    for product in ("-_0_1_0/recompile_reasons_", "-_0_1_0/put_local_code_state_",
                    "-_1_0_0/dynamo_graph_break_reason_", "-_3_1_0/compilation_metrics_"):
        assert product in index, (product, index)

    # the recompile reason of f, and the recompile of h (its size specialised)
    reasons = json.loads(one(dirs, out, "-_0_1_0", "recompile_reasons"))
    assert reasons == ["0/0: tensor 'x' size mismatch at index 0. expected 10, actual 20"], reasons
    assert json.loads(one(dirs, out, "-_3_1_0", "recompile_reasons"))[0].startswith("3/0: "), dirs

    # the captured graph, readable, with the symbol of the dynamic size
    graph = one(dirs, out, "-_0_1_0", "dynamo_output_graph")
    assert "L['x']" in graph and "s0" in graph and "prog.py:%d" % line_of("return x * x.size") in graph, graph
    assert "TENSOR_MATCH" in one(dirs, out, "-_0_0_0", "dynamo_cpp_guards_str")
    assert "TENSOR_MATCH" in text_of(out / "-_0_0_0" / [n for n in dirs["-_0_0_0"]
                                                       if n.startswith("dynamo_guards")][0])

    # the graph break: its reason and user stack, and the index's failures page
    brk = one(dirs, out, "-_1_0_0", "dynamo_graph_break_reason")
    assert "Graph Break Reason" in brk and "print" in brk and 'line %d, in g' % line_of('print("break")') in brk, brk
    restarts = text_of(out / "failures_and_restarts.html")
    assert "[1/0]" in restarts and "print" in restarts, restarts

    # compilation metrics: counts, the specialisation of h with both stacks
    metrics = text_of(out / "-_3_1_0" / [n for n in dirs["-_3_1_0"] if n.startswith("compilation_metrics")][0])
    assert "Cache Size: 1" in metrics, metrics
    assert "L['x'].size()[0]" in metrics and "for row in x:" in metrics, metrics
    assert "symbolic.c" in metrics, metrics   # the framework stack: where shapejit specialised
    assert "Eq(s0, 4)" in metrics, metrics    # the guard it added

    # the generated kernel code and the PGO artifact
    assert any(n.startswith("kernel_code") for d in dirs.values() for n in d), dirs
    put = one(dirs, out, "-_0_1_0", "put_local_code_state")
    assert "prog.py:%d:f:" % line_of("def f(") in put and "L['x']: tensor size=[?]" in put, put
    assert 'TORCH_COMPILE_DYNAMIC_SOURCES="' in put and "L['x']" in put, put


def test_warm_pgo_run(traces):
    """The second run of the job reads the profile (get_local_code_state) and compiles f
    once, dynamic from the start."""
    tmp, _, warm, _ = traces
    out = tmp / "out_warm"
    stderr, dirs = tlparse(warm, out)
    assert {k: v for k, v in stats(stderr).items() if k.startswith("fail")} == {}, stderr
    got = one(dirs, out, "-_0_0_0", "get_local_code_state")
    assert "L['x']: tensor size=[?]" in got, got
    assert "-_0_1_0" not in dirs, sorted(dirs)   # no recompile of f
    assert "s0" in one(dirs, out, "-_0_0_0", "dynamo_output_graph")


def test_kinds_match_torch(traces):
    """The kinds shapejit writes are kinds torch writes for the same program (plus the
    guard list tlparse renders and shapejit's kernel code), and the core ones are there."""
    tmp, cold, _, torch_trace = traces
    ours, theirs = kinds(cold), kinds(torch_trace)
    core = {"dynamo_start", "dynamo_output_graph", "dynamo_cpp_guards_str", "compilation_metrics",
            "str", "create_symbol", "artifact:recompile_reasons", "artifact:dynamo_graph_break_reason",
            "artifact:torch_version"}
    assert core <= ours and core <= theirs, (core - ours, core - theirs)
    extra = ours - theirs - {"dynamo_guards", "artifact:kernel_code", "artifact:put_local_code_state",
                             "guard_added_fast", "symbolic_shape_specialization"}
    assert extra == set(), extra
    # the torch run gives tlparse no more trouble than ours
    _, _ = tlparse(torch_trace, tmp / "out_torch")


def test_reducing_compilations_walkthrough(traces):
    """The seed's step 1: copy the dynamic sources from the PGO artifact into
    TORCH_COMPILE_DYNAMIC_SOURCES; the next run compiles f once."""
    tmp, cold, _, _ = traces
    out = tmp / "out_walk"
    _, dirs = tlparse(cold, out)
    put = one(dirs, out, "-_0_1_0", "put_local_code_state")
    sources = re.search(r'TORCH_COMPILE_DYNAMIC_SOURCES="([^"]*)"', put).group(1)
    assert "L['x']" in sources.split(","), sources
    trace, _ = run(tmp, "walk", "shapejit", TORCH_COMPILE_DYNAMIC_SOURCES=sources)
    _, dirs = tlparse(trace, tmp / "out_walk2")
    assert "-_0_0_0" in dirs and "-_0_1_0" not in dirs, sorted(dirs)


def test_knob_env_and_io_error(tmp_path):
    """config.trace_dir is the knob TORCH_TRACE sets; setting it opens a trace, "" closes
    it. A directory that cannot be made: one warning naming it, tracing off, results intact."""
    code = textwrap.dedent("""
        import os, sys, warnings, torch, shapejit
        from shapejit import config, trace
        assert config.trace_dir == os.environ["TORCH_TRACE"] and trace.active()
        f = shapejit.compile(lambda x: x + 1, backend="eager")
        f(torch.ones(2))
        first = trace.path()
        config.trace_dir = sys.argv[1]
        f2 = shapejit.compile(lambda x: x - 1, backend="eager")
        f2(torch.ones(2))
        assert trace.path() != first and trace.path().startswith(sys.argv[1])
        config.trace_dir = ""
        assert not trace.active() and trace.path() is None
        config.trace_dir = os.path.join(sys.argv[2], "sub")   # sys.argv[2] is a file
        f3 = shapejit.compile(lambda x: x * 3)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for n in (2, 3, 4):
                assert torch.equal(f3(torch.ones(n)), torch.full((n,), 3.0))
        messages = [str(w.message) for w in caught]
        assert len(messages) == 1 and "structured trace" in messages[0], messages
        assert sys.argv[2] in messages[0] and not trace.active(), messages
        print("ok")
    """)
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    env = dict(os.environ, PYTHONPATH=PACKAGE_PARENT, TORCH_TRACE=str(tmp_path / "a"))
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path / "b"), str(blocker)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout == "ok\n", p.stdout + p.stderr
    assert len(os.listdir(tmp_path / "a")) == 1 and len(os.listdir(tmp_path / "b")) == 1
