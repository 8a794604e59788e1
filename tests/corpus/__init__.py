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
    uncapturable,
)

ENTRIES = list(REGISTRY.values())
TORCH_ENTRIES = [e for e in ENTRIES if e.lib == "torch"]
NUMPY_ENTRIES = [e for e in ENTRIES if e.lib == "numpy"]

# Keep in step with docs/oracle_differences.md (one table row per key, same reason text).
ORACLE_DIFFERENCES = {
    "t_uncap_print":
        "print() is not capturable; shapejit runs the whole frame eagerly (0 graphs, 1 break) "
        "until frame-splitting graph breaks land, torch.compile splits the frame (2 graphs, 1 break)",
    "t_uncap_item_branch":
        "a branch on Tensor.item() is data-dependent; shapejit runs the whole frame eagerly "
        "(0 graphs, 1 break), torch.compile splits the frame (2 graphs, 1 break)",
    "t_uncap_tensor_bool_branch":
        "a branch on a tensor's truth value (if x.sum() > 0) is data-dependent; shapejit runs the "
        "whole frame eagerly (0 graphs, 1 break), torch.compile splits the frame (2 graphs, 1 break)",
    "t_uncap_unknown_c_function":
        "a call into an unknown C function (zlib.crc32) is not capturable; shapejit runs the whole "
        "frame eagerly (0 graphs, 1 break), torch.compile splits the frame (2 graphs, 1 break)",
    "t_uncap_nonzero_dynamic_shape":
        "boolean-mask indexing has a data-dependent output shape; shapejit runs the whole frame "
        "eagerly (0 graphs, 1 break), torch.compile splits the frame (2 graphs, 1 break)",
}

# Entries shapejit cannot capture yet: the corpus tests mark them xfail(strict=True), so an
# entry that starts to pass fails the suite until it is taken off this list. Keep in step
# with docs/status.md ("Known gaps").
KNOWN_GAPS = {}   # every corpus entry captures as expected
