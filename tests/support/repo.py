"""Where the tests find what lies outside the test tree: the source checkout (for the few
tests that check a source file, a tool or the benchmark suite against the build) and the
directory a child interpreter imports this very shapejit from.

Everything else a test needs it reads from the built extension (shapejit._C), never from
the sources, so that the tests check what was built."""
import functools
import importlib
import importlib.util
import os
import sys


@functools.lru_cache(maxsize=None)
def repo_root():
    """The source checkout holding this test tree (tests/support/ is two levels below it)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert os.path.isfile(os.path.join(root, "setup.py")), root
    return root


def source_path(*parts):
    """A file or folder of the checkout, by its path from the top (source_path("vocab",
    "ops.def"))."""
    return os.path.join(repo_root(), *parts)


def package_parent():
    """The directory the running shapejit was imported from (the checkout for an in-place
    build, build/asan under `make asan`): a child's PYTHONPATH, so that it tests the same
    extension as the parent."""
    import shapejit
    return os.path.dirname(os.path.dirname(os.path.abspath(shapejit.__file__)))


def tool(name):
    """The module of tools/<name>.py, loaded from its file (tools/ is a folder of scripts,
    not a package)."""
    spec = importlib.util.spec_from_file_location(name, source_path("tools", name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def bench(name):
    """The module bench/<name>.py. The benchmark suite runs its files as scripts, which
    import each other by bare name, so its folder goes on sys.path, once and last (a
    bench module never hides another module of the same name)."""
    folder = source_path("bench")
    if folder not in sys.path:
        sys.path.append(folder)
    return importlib.import_module(name)
