"""shapejit's capture corpus: small torch and numpy functions grouped by construct.

``ENTRIES`` lists every entry (see ``_base.Entry``); ``ORACLE_DIFFERENCES`` maps the name
of each torch entry whose shapejit graph/break counts differ on purpose from
``torch._dynamo.explain``'s (the oracle) to the reason. docs/oracle_differences.md lists
the same entries with the same reasons (tests/capture/test_corpus.py checks that they agree).
"""
from ._base import REGISTRY, Entry, reseed  # noqa: F401
from . import (  # noqa: F401  (importing a module registers its entries)
    t_scopes, t_calls, t_control, t_data, t_ops, t_inplace, t_modules, t_ops2,
    np_scopes, np_calls, np_control, np_data, np_ops, np_inplace, np_kernels, np_more, np_ops2,
    uncapturable, t_breaks, np_breaks, np_scalars,
    np_mech, t_npmix, t_pyobj, np_pyobj, t_mech, t_model_calls,
    t_pyiter, np_pyiter, t_random, t_pymisc, np_pymisc, t_attrw, t_tonumpy,
)

ENTRIES = list(REGISTRY.values())
TORCH_ENTRIES = [e for e in ENTRIES if e.lib == "torch"]
NUMPY_ENTRIES = [e for e in ENTRIES if e.lib == "numpy"]

# Keep in step with docs/oracle_differences.md (one table row per key, same reason text).
ORACLE_DIFFERENCES = {
    "t_to_own_dtype_memory_format":
        "a cast to the tensor's own dtype with memory_format=contiguous_format returns the tensor itself when it already has that layout; shapejit's capture does not track layouts, so the call runs in the interpreter (torch.compile knows the fake tensor's strides)",
    "t_uncap_tensor_slice_bound":
        "the frame runs in the interpreter in both (a break inside a subscript is not a split point, 0 graphs); shapejit's explain records that break, torch.compile's records none when it gives up on a whole frame",
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
    "t_npmix_mask_assign_from_other":
        "torch.compile compiles an op-less graph (it returns its inputs) before a mask selection that is the frame's first op; shapejit makes no graph without ops",
    "t_obj_deque_rotate":
        "torch.compile does not trace deque.rotate (a graph break); shapejit runs it on the deque's shadow (placeholders for its tensors) and captures the frame whole",
    "t_obj_counter_most_common":
        "torch.compile cannot trace Counter.most_common (its heap makes an object()) and skips the frame (0 graphs); shapejit runs it over the Counter's constant counts",
    "t_obj_ordereddict_fromkeys":
        'torch.compile cannot rebuild an OrderedDict made by OrderedDict.fromkeys that leaves the frame and skips the frame (0 graphs); shapejit rebuilds it from the result plan',
    "t_obj_user_module_made_in_frame":
        "the break at the module's construction comes before any op: shapejit counts it (the module is made at run time, in the interpreter, as torch.compile does), torch.compile's explain lists only breaks that end a non-empty graph",
    "t_obj_nn_linear_made_in_frame":
        "the break at the module's construction comes before any op: shapejit counts it (the module is made at run time, in the interpreter, as torch.compile does), torch.compile's explain lists only breaks that end a non-empty graph",
    # t_mech: recurrent layers
    "t_mech_lstm_batch_first":
        "torch.compile does not trace nn.LSTM / GRU / RNN (torch._dynamo.config.allow_rnn is off) and runs a frame that calls one eagerly (0 graphs); shapejit captures the recurrent layer as the library call its forward makes (torch.lstm / gru / rnn_tanh / rnn_relu)",
    "t_mech_lstm_initial_state":
        "torch.compile does not trace nn.LSTM / GRU / RNN (torch._dynamo.config.allow_rnn is off) and runs a frame that calls one eagerly (0 graphs); shapejit captures the recurrent layer as the library call its forward makes (torch.lstm / gru / rnn_tanh / rnn_relu)",
    "t_mech_gru_no_grad":
        "torch.compile does not trace nn.LSTM / GRU / RNN (torch._dynamo.config.allow_rnn is off) and runs a frame that calls one eagerly (0 graphs); shapejit captures the recurrent layer as the library call its forward makes (torch.lstm / gru / rnn_tanh / rnn_relu)",
    "t_mech_gru_bidirectional_state":
        "torch.compile does not trace nn.LSTM / GRU / RNN (torch._dynamo.config.allow_rnn is off) and runs a frame that calls one eagerly (0 graphs); shapejit captures the recurrent layer as the library call its forward makes (torch.lstm / gru / rnn_tanh / rnn_relu)",
    "t_mech_rnn_relu_bidirectional":
        "torch.compile does not trace nn.LSTM / GRU / RNN (torch._dynamo.config.allow_rnn is off) and runs a frame that calls one eagerly (0 graphs); shapejit captures the recurrent layer as the library call its forward makes (torch.lstm / gru / rnn_tanh / rnn_relu)",
    "t_mech_lstm_unbatched_proj":
        "torch.compile does not trace nn.LSTM / GRU / RNN (torch._dynamo.config.allow_rnn is off) and runs a frame that calls one eagerly (0 graphs); shapejit captures the recurrent layer as the library call its forward makes (torch.lstm / gru / rnn_tanh / rnn_relu)",
    "t_mech_lstm_subclass_super_forward":
        "torch.compile does not trace nn.LSTM / GRU / RNN (torch._dynamo.config.allow_rnn is off) and runs a frame that calls one eagerly (0 graphs); shapejit captures the recurrent layer as the library call its forward makes (torch.lstm / gru / rnn_tanh / rnn_relu)",
    "t_mech_torch_lstm_call":
        "torch.compile runs a frame that calls torch.lstm eagerly (0 graphs); shapejit records torch.lstm as one graph node",
    "t_mech_lstm_text_encoder":
        "torch.compile does not trace nn.LSTM / GRU / RNN (torch._dynamo.config.allow_rnn is off) and breaks the graph at a nested one; shapejit captures the recurrent layer as the library call its forward makes (torch.lstm / gru / rnn_tanh / rnn_relu)",
    # torch ops (tests/support/corpus/t_ops2.py)
    "t_op2_random_int_range":
        "torch.compile does not trace Tensor.random_ (a graph break at each call); shapejit captures it as an eager step that draws from the default generator in program order, so the values and the generator's state match eager",
    "t_op2_is_contiguous_of_view":
        "Tensor.is_contiguous of a value computed in the graph breaks in shapejit, which does not model strides (of a graph input it folds, the input's layout being guarded); torch.compile's fake tensors carry strides",
    "t_it_max_tensor_and_number":
        'max() of a tensor and a Python number gives either object in eager (the tensor, or the number itself, as the data decides); torch.compile turns it into a clamp (always a tensor); shapejit breaks at the comparison',
    # library queries folded to constants (tests/support/corpus/t_pymisc.py)
    "t_misc_result_type_cast":
        "torch.compile breaks at torch.result_type of two tensors (a torch op returning a dtype); shapejit folds it from the tensors' dtypes and ranks, which their guards fix",
}

# Entries shapejit cannot capture yet: the corpus tests mark them xfail(strict=True), so an
# entry that starts to pass fails the suite until it is taken off this list. Keep in step
# with docs/status.md ("Known gaps").
KNOWN_GAPS = {}   # every corpus entry captures as expected
