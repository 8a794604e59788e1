"""The C tree keeps one layout: every .c and .h under the C folders is what clang-format
makes of it with the repository's .clang-format (clang-format is pinned in
requirements.txt). A failure names the files; `clang-format -i FILE` fixes them."""
import os
import subprocess

import clang_format

import repo

# the C folders, as setup.py lists them
C_DIRS = ["core", "vocab", "bytecode", "native", "shapes", "graph", "guards", "capture", "backend", "resume",
          "hook"]


def c_files():
    out = []
    for d in C_DIRS:
        for name in sorted(os.listdir(repo.source_path(d))):
            if name.endswith((".c", ".h")):
                out.append(repo.source_path(d, name))
    return out


def test_c_folders_are_listed_as_setup_py_lists_them():
    with open(repo.source_path("setup.py"), encoding="utf-8") as f:
        text = f.read()
    start = text.index("C_DIRS = [")
    listed = [s.strip().strip('"') for s in text[start + len("C_DIRS = ["):text.index("]", start)].split(",")]
    assert listed == C_DIRS


def test_c_sources_are_formatted():
    exe = clang_format.get_executable("clang-format")
    files = c_files()
    assert len(files) > 100
    proc = subprocess.run([exe, "--dry-run", "-Werror", "--style=file"] + files, cwd=repo.repo_root(),
                          capture_output=True, text=True, timeout=300)
    bad = sorted({line.split(":", 1)[0] for line in proc.stderr.splitlines() if ": error:" in line})
    assert proc.returncode == 0 and not bad, "not formatted (clang-format -i FILE): %s" % bad
