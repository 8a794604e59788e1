"""Builds shapejit and its C extension shapejit._C.

    pip install .                         # or
    python3 setup.py build_ext --inplace  # what `make build` runs

SHAPEJIT_SANITIZE=1 builds with AddressSanitizer and UBSan (see `make asan`).
The build needs numpy's headers, xxHash (libxxhash-dev) and a C11 compiler; never torch.
"""
import glob
import os
import subprocess
import sys

if sys.version_info[:2] != (3, 11):
    sys.exit(
        "shapejit needs CPython 3.11: its frame hook and symbolic evaluator work on 3.11 "
        "bytecode and frames only. This is Python %d.%d (%s). Run the build with a 3.11 "
        "interpreter, e.g. `python3.11 -m pip install .`."
        % (sys.version_info[0], sys.version_info[1], sys.executable))

from setuptools import Extension, find_packages, setup  # noqa: E402
from setuptools.command.build_ext import build_ext  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
os.chdir(HERE)  # every path below is relative to the repository root

# The C folders, bottom layer first (docs/architecture.md): every *.c under them (at any
# depth) goes into the one extension. Data flows one way: a folder includes only the
# folders on its line (tests/test_layers.py checks every #include against this table), and
# no folder but backend includes a backend header (the hook reaches the backend through
# its module init only).
#
#   folder   | may include                                                   | what it is
#   core     | -                                                             | config knobs, log channels, errors, trace, break reasons, policies
#   vocab    | core                                                          | op vocabulary, callables, dtypes, tensor metadata, binder, libraries
#   bytecode | core                                                          | 3.11 bytecode decoder and assembler
#   native   | core                                                          | compile and load C: compiler driver, disk cache, loader
#   shapes   | core vocab                                                    | shape and dtype rules, symbolic ints, the shape environment
#   graph    | core vocab shapes                                             | the graph IR
#   guards   | core vocab shapes                                             | guard trees, dispatch, sources, shape guards, per-code cache
#   capture  | core vocab bytecode shapes graph guards                       | the symbolic evaluator
#   backend  | core vocab shapes graph native                                | the cpu backend: plan, lower, emit, steps, oneDNN
#   resume   | core vocab bytecode shapes graph guards capture               | continuations after graph breaks
#   hook     | core vocab bytecode shapes graph guards capture resume native | frame hook, compile driver, module init
C_DIRS = ["core", "vocab", "bytecode", "native", "shapes", "graph", "guards", "capture",
          "backend", "resume", "hook"]
GEN_DIR = os.path.join("build", "gen")
OPCODES_H = os.path.join(GEN_DIR, "sj_opcodes.h")

# Libraries linked into _C: xxhash (libxxhash-dev), ffi (libffi-dev: calls into generated
# kernels), dl (dlopen of kernel libraries), dnnl (oneDNN 2.6, libdnnl-dev: the matmul
# steps, backend/dnnl_api.c) and gomp (omp_get_max_threads: the OpenMP runtime libdnnl
# and torch already share).
LIBRARIES = ["xxhash", "ffi", "dl", "dnnl", "gomp"]

# -fvisibility=hidden: only PyInit__C is exported, so calls between our own functions are
# direct (no PLT) and can be inlined; -flto lets that happen across files. Both matter on
# the guard path, which is made of many small calls (bench/overhead.py measures it).
CFLAGS = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-g", "-fno-strict-aliasing",
          "-fvisibility=hidden"]
LDFLAGS = []
if os.environ.get("SHAPEJIT_SANITIZE") != "1":
    CFLAGS += ["-flto=auto"]
    LDFLAGS += ["-flto=auto", "-O2"]
if os.environ.get("SHAPEJIT_SANITIZE") == "1":
    # later flags win: -O1 replaces -O2 (ASan's recommended level)
    # -UNDEBUG: assert() is on in this build (Python's own CFLAGS turn it off)
    SAN = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-O1", "-UNDEBUG"]
    CFLAGS += SAN
    LDFLAGS += SAN


def c_sources():
    srcs = []
    for d in C_DIRS:
        srcs += glob.glob(os.path.join(d, "**", "*.c"), recursive=True)
    return sorted(srcs)


def c_depends():
    """Headers and tables: a change to any of them rebuilds the extension."""
    deps = ["setup.py", os.path.join("tools", "gen_opcodes.py"), OPCODES_H]  # flags live in setup.py
    for d in C_DIRS:
        for pat in ("*.h", "*.def"):
            deps += glob.glob(os.path.join(d, "**", pat), recursive=True)
    return sorted(deps)


def generate_opcodes():
    """Writes build/gen/sj_opcodes.h from the running interpreter; the file is replaced
    only when its text changes, so an unchanged header does not force a rebuild."""
    os.makedirs(GEN_DIR, exist_ok=True)
    tmp = OPCODES_H + ".tmp"
    subprocess.check_call([sys.executable, os.path.join("tools", "gen_opcodes.py"), tmp])
    with open(tmp) as fh:
        new = fh.read()
    old = None
    if os.path.exists(OPCODES_H):
        with open(OPCODES_H) as fh:
            old = fh.read()
    if new != old:
        os.replace(tmp, OPCODES_H)
    else:
        os.remove(tmp)


class BuildExt(build_ext):
    def finalize_options(self):
        super().finalize_options()
        if self.parallel is None:  # compile the C files on every core
            self.parallel = os.cpu_count() or 1
        import numpy  # a build requirement (pyproject.toml); headers only

        for ext in self.extensions:
            if numpy.get_include() not in ext.include_dirs:
                ext.include_dirs.append(numpy.get_include())

    def run(self):
        generate_opcodes()
        missing = [e.name for e in self.extensions if not e.sources]
        if missing:
            raise SystemExit("shapejit: no C sources found under %s" % ", ".join(C_DIRS))
        super().run()


ext = Extension(
    "shapejit._C",
    sources=c_sources(),
    depends=c_depends(),
    include_dirs=[".", GEN_DIR],
    libraries=LIBRARIES,
    extra_compile_args=CFLAGS,
    extra_link_args=LDFLAGS,
    language="c",
)

setup(
    name="shapejit",
    version="0.0.1",
    description="A JIT compiler for Python array code (torch and numpy) on CPython 3.11",
    python_requires="==3.11.*",
    packages=find_packages(include=["shapejit", "shapejit.*"]),
    ext_modules=[ext],
    cmdclass={"build_ext": BuildExt},
    install_requires=["numpy"],
    zip_safe=False,
)
