"""Resources of loaded kernel libraries stay bounded (native/loader.c): a library keeps
no file descriptor once loaded, so a long-lived process that loads many (a notebook, a
server seeing many shapes) never meets its open-file limit."""
import os
import subprocess
import sys
import textwrap

from repo import package_parent

PACKAGE_PARENT = package_parent()


def test_many_libraries_under_a_low_open_file_limit(tmp_path):
    """Under `ulimit -n 256`, with most descriptors already taken by the program, more
    distinct libraries are built and loaded than descriptors are left; every one runs
    its own code, and the open descriptors do not grow with the count."""
    script = textwrap.dedent(r"""
        import os, resource, uuid
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
        from shapejit import _C
        held = [os.open("/dev/null", os.O_RDONLY) for _ in range(200)]   # the program's own
        before = len(os.listdir("/proc/self/fd"))
        src = "#include <stdint.h>\nCG_EXPORT int64_t f(int64_t x) { return x + %d; }\n"
        srcs = ["/* %s */\n" % uuid.uuid4().hex + src % i for i in range(120)]
        fns = [_C._cg_build(s, "f", "ll") for s in srcs]
        assert all(_C._cg_call(f, 1000) == 1000 + i for i, f in enumerate(fns))
        # the memo forgot them: each is found again (on disk, already loaded): no descriptor kept
        _C._cg_forget()
        again = [_C._cg_build(s, "f", "ll") for s in srcs]
        assert all(_C._cg_call(f, 1000) == 1000 + i for i, f in enumerate(again))
        after = len(os.listdir("/proc/self/fd"))
        print("fds", before, after)
        assert after <= before + 4, (before, after)
        names = os.listdir(os.path.join(os.environ["SHAPEJIT_CACHE_DIR"], "kernels"))
        assert not [n for n in names if n.startswith(".tmp.ld.")], names
    """)
    env = dict(os.environ, SHAPEJIT_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "-c", script], cwd=PACKAGE_PARENT, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "fds" in r.stdout
