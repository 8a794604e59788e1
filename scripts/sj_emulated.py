"""pytest plugin for `make test-avx2-emu` (scripts/run-avx2-emu loads it with -p): shows the
emulated CPU in the header and deselects the tests listed in scripts/avx2-emu-deselect.txt
(the file says why each group is there: minutes each under qemu, or a failure that only
qemu-user shows), unless SHAPEJIT_EMU_ALL=1."""
import os

_HERE = os.path.dirname(os.path.abspath(__file__))
DESELECT_LIST = os.path.join(_HERE, "avx2-emu-deselect.txt")


def listed_names():
    """The test function names of the list (a name covers all its parameters)."""
    with open(DESELECT_LIST, encoding="utf-8") as f:
        return {w for w in (line.split("#", 1)[0].strip() for line in f) if w}


def pytest_report_header(config):
    import torch
    return "emulated CPU: qemu-x86_64 -cpu %s (torch ISA %s)" % (
        os.environ.get("QEMU_CPU", "?"), torch.backends.cpu.get_cpu_capability())


def pytest_collection_modifyitems(config, items):
    if os.environ.get("SHAPEJIT_EMU_ALL") == "1":
        return
    listed = listed_names()
    keep, drop = [], []
    for item in items:
        name = getattr(item, "originalname", None) or item.name.split("[", 1)[0]
        (drop if name in listed else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
