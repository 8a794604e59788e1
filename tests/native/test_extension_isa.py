"""shapejit._C itself runs on any x86-64: no AVX-512 instruction in the extension.

The extension is built once (a wheel, an in-place build on a developer's AVX-512 machine)
and loaded on other CPUs; only generated kernels are built for the machine they run on
(the cpu_target knob). An AVX-512 instruction in _C (setup.py or $CFLAGS with
-march=native, an intrinsic without a runtime check) would be a SIGILL on an AVX2 CPU.
Code that picks an instruction set at run time (target_clones, as backend/step_common.c's
finite check with its AVX2 clone) is dispatched through cpuid and is allowed; AVX-512 has
no such clone, so none of its instructions may appear. `make test-avx2-emu` runs the
backend tests under an emulated AVX2 CPU for what disassembly cannot see."""
import re
import shutil
import subprocess

import pytest

from shapejit import _C

# What only AVX-512 (EVEX) code has: zmm registers, the upper 16 xmm/ymm registers, mask
# registers, embedded broadcast and masking, and instructions with no VEX form.
AVX512 = re.compile(
    r"%zmm\d|%[xy]mm(?:1[6-9]|2\d|3[01])\b|%k[0-7]\b|\{1to\d+\}|\{%k[0-7]\}"
    r"|\b(?:vpternlog[dq]|vperm[it]2\w+|vprol[dq]|vpror[dq]|vpcompress\w|vcompressp\w|vpexpand\w"
    r"|vexpandp\w|vrndscale\w+|vscalef\w+|vgetexp\w+|vgetmant\w+|vfixupimm\w+|vrcp14\w+"
    r"|vrsqrt14\w+|valign[dq]|vpconflict\w|vplzcnt\w|vpmov[dq]2m|vpmovm2\w)\b")

SAMPLE = """
void scale(float *restrict y, const float *restrict x, int n)
{
    for (int i = 0; i < n; i++)
        y[i] = x[i] * 3.0f + (x[i] > 0.f ? x[i] : 0.f);
}
"""


def avx512_lines(path):
    r = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(path)], capture_output=True, text=True,
                       check=True)
    return [line for line in r.stdout.splitlines() if AVX512.search(line)]


@pytest.fixture(scope="module")
def objdump():
    if not shutil.which("objdump"):
        pytest.skip("objdump (binutils) is not installed")


def test_the_check_sees_avx512(objdump, tmp_path):
    """The pattern finds the instructions of an object built for AVX-512, and none in the
    same code built for AVX2."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    src = tmp_path / "sample.c"
    src.write_text(SAMPLE)
    found = {}
    for march in ("x86-64-v3", "x86-64-v4"):
        obj = tmp_path / ("sample-%s.o" % march)
        subprocess.run([cc, "-O3", "-march=" + march, "-mprefer-vector-width=512", "-c", "-o", str(obj), str(src)],
                       check=True)
        found[march] = avx512_lines(obj)
    assert found["x86-64-v4"], "no AVX-512 instruction seen in code built for x86-64-v4"
    assert not found["x86-64-v3"], found["x86-64-v3"][:5]


def test_extension_has_no_avx512_instruction(objdump):
    lines = avx512_lines(_C.__file__)
    assert not lines, "%d AVX-512 instructions in %s, e.g.\n%s" % (len(lines), _C.__file__, "\n".join(lines[:10]))
