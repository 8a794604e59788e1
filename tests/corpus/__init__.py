"""shapejit's capture corpus: small torch and numpy functions grouped by construct.

``ENTRIES`` lists every entry (see ``_base.Entry``); ``ORACLE_DIFFERENCES`` maps the name
of each torch entry whose shapejit graph/break counts differ on purpose from
``torch._dynamo.explain``'s (the oracle) to the reason. docs/oracle_differences.md lists
the same entries with the same reasons (tests/test_corpus.py checks that they agree).
"""
from ._base import REGISTRY, Entry, reseed  # noqa: F401
from . import (  # noqa: F401  (importing a module registers its entries)
    t_scopes, t_calls, t_control, t_data, t_ops, t_inplace, t_modules,
    np_scopes, np_calls, np_control, np_data, np_ops, np_inplace, np_kernels, np_more,
    uncapturable, t_breaks, np_breaks, t_pyiter, np_pyiter,
)

ENTRIES = list(REGISTRY.values())
TORCH_ENTRIES = [e for e in ENTRIES if e.lib == "torch"]
NUMPY_ENTRIES = [e for e in ENTRIES if e.lib == "numpy"]

# Keep in step with docs/oracle_differences.md (one table row per key, same reason text).
ORACLE_DIFFERENCES = {
    "t_brk_print_first":
        "the break comes before any op: shapejit counts it (print runs in the interpreter), torch.compile's explain lists only breaks that end a non-empty graph",
    "t_brk_in_helper":
        "a break inside an inlined call is counted at the call in the caller (the call then runs in the interpreter) and again in the callee's own frame; torch.compile's explain lists one break per non-empty graph a break ends",
    "t_brk_in_helper_two_deep":
        "a break inside an inlined call is counted at the call in the caller (the call then runs in the interpreter) and again in the callee's own frame; torch.compile's explain lists one break per non-empty graph a break ends",
    "t_brk_helper_kwonly":
        "a break inside an inlined call is counted at the call in the caller (the call then runs in the interpreter) and again in the callee's own frame; torch.compile's explain lists one break per non-empty graph a break ends",
    "t_brk_module_forward":
        "a break inside an inlined call is counted at the call in the caller (the call then runs in the interpreter) and again in the callee's own frame; torch.compile's explain lists one break per non-empty graph a break ends",
    "t_brk_submodule_forward":
        "a break inside an inlined call is counted at the call in the caller (the call then runs in the interpreter) and again in the callee's own frame; torch.compile's explain lists one break per non-empty graph a break ends",
    "t_brk_method":
        "a break inside an inlined call is counted at the call in the caller (the call then runs in the interpreter) and again in the callee's own frame; torch.compile's explain lists one break per non-empty graph a break ends",
    "t_brk_for_range":
        'torch.compile skips a frame with a graph break inside a loop (0 graphs); shapejit keeps the graph before the break and the interpreter runs the rest of the loop',
    "t_brk_for_list":
        'torch.compile skips a frame with a graph break inside a loop (0 graphs); shapejit keeps the graph before the break and the interpreter runs the rest of the loop',
    "t_brk_while":
        'torch.compile skips a frame with a graph break inside a loop (0 graphs); shapejit keeps the graph before the break and the interpreter runs the rest of the loop',
    "t_brk_loop_enumerate":
        'torch.compile skips a frame with a graph break inside a loop (0 graphs); shapejit keeps the graph before the break and the interpreter runs the rest of the loop',
    "t_it_max_tensor_and_number":
        'max() of a tensor and a Python number gives either object in eager (the tensor, or the number itself, as the data decides); torch.compile turns it into a clamp (always a tensor); shapejit breaks at the comparison',
}

# Entries shapejit cannot capture yet: the corpus tests mark them xfail(strict=True), so an
# entry that starts to pass fails the suite until it is taken off this list. Keep in step
# with docs/status.md ("Known gaps").
KNOWN_GAPS = {}   # every corpus entry captures as expected
