"""The texts of graph-break reasons: each names the real cause and the real callable, by
the path a user would write (torch.rand, torch.Tensor.share_memory_, numpy.add.reduceat),
and names values with their type and the right article (capture/names.c)."""
import collections
import functools
import io
import random

import numpy as np
import pytest
import torch

import shapejit


def reasons(fn, *args):
    out = shapejit.explain(fn)(*args)
    return [b.reason for b in out.break_reasons]


def only_reason(fn, *args):
    rs = reasons(fn, *args)
    assert len(rs) == 1, rs
    return rs[0]


CALL = "call to an unsupported function: "


# --------------------------------------------------------------- callable names ----

def test_method_of_a_c_type_is_named_by_the_public_class():
    def f(x):
        y = x * 2
        return y + 1, y.storage_offset()
    assert only_reason(f, torch.randn(3)) == CALL + "torch.Tensor.storage_offset"


def test_python_method_of_torch_tensor_is_named_by_the_public_class():
    def f(x):
        y = x * 2
        return y + 1, y.is_shared()
    assert only_reason(f, torch.randn(3)) == (
        CALL + "torch.Tensor.is_shared is not supported (not in shapejit's callables table)")


def test_unbound_method_of_a_collections_type():
    def f(x, d):
        collections.OrderedDict.__setitem__(d, "b", x)
        return x + 1
    assert only_reason(f, torch.randn(3), collections.OrderedDict(a=1)) == (
        CALL + "collections.OrderedDict.__setitem__")


def test_inherited_builtin_method_is_named_by_its_owner():
    # OrderedDict.__getitem__ is dict's own method
    def f(x, d):
        return x + collections.OrderedDict.__getitem__(d, "a")
    assert only_reason(f, torch.randn(3), collections.OrderedDict(a=torch.randn(3))) == (
        CALL + "dict.__getitem__")


def test_ufunc_method_is_named_by_the_ufunc():
    def f(x):
        return x + 1, np.add.reduceat(np.ones(4), [0, 2])
    assert only_reason(f, torch.randn(3)) == CALL + "numpy.add.reduceat"


def test_pybind11_function_is_named_by_its_module():
    def f(x):
        if torch._C._get_max_operator_version() < 0:
            return x
        return x + 1
    assert only_reason(f, torch.randn(3)) == CALL + "torch._C._get_max_operator_version"


def test_torch_function_is_named_torch_dot_name():
    def f(x):
        return x + torch._C._VariableFunctions.poisson(x.abs())
    assert only_reason(f, torch.randn(3)) == CALL + "torch.poisson"


def test_bound_method_of_an_input_object():
    def f(x, s):
        s.write("abc")
        return x + 1
    assert only_reason(f, torch.randn(3), io.StringIO()) == CALL + "io.StringIO.write"


def test_builtin_is_named_by_its_builtin_name():
    def f(x):
        with open("/dev/null") as fh:
            fh.read()
        return x + 1
    assert reasons(f, torch.randn(3))[0] == CALL + "open"


# --------------------------------------------------------- what was called ----

def test_module_level_bound_method_is_named_by_the_module():
    # numpy.random.randn is a method of numpy's global RandomState
    def f(x):
        return x + 1, np.random.randn(2, 2)
    assert only_reason(f, torch.randn(3)) == CALL + "numpy.random.randn"


def test_method_of_a_hidden_instance_is_named_by_the_module():
    # random.random is a method of the random module's own Random instance
    def f(x):
        return x * random.random()
    assert only_reason(f, torch.randn(3)) == CALL + "random.random"


@functools.lru_cache
def _cached(n):
    return n * 2


def test_lru_cache_wrapper_is_inlined_not_a_break():
    def f(x):
        return x * _cached(3)
    assert reasons(f, torch.randn(3)) == []


def test_staticmethod_object_names_what_it_wraps():
    sm = staticmethod(lambda t: t + 1)

    def f(x):
        return sm(x) * 2
    assert only_reason(f, torch.randn(3)) == (
        CALL + "staticmethod of %s.test_staticmethod_object_names_what_it_wraps.<locals>.<lambda>" % __name__)


def test_grad_mode_decorator_on_a_nested_function():
    def f(x):
        @torch.no_grad()
        def inner(y):
            return y * 2
        return inner(x) + 1
    assert only_reason(f, torch.randn(3)) == (
        CALL + "torch.no_grad() used as a decorator on "
        "test_grad_mode_decorator_on_a_nested_function.<locals>.f.<locals>.inner, "
        "a function defined in the frame")


# ---------------------------------------------------------------- the cause ----

def test_tensor_numpy_of_a_grad_tensor_names_the_cause():
    def f(x):
        y = x * 2
        try:
            return y.numpy()
        except RuntimeError:
            return None
    assert only_reason(f, torch.randn(3, requires_grad=True)) == (
        "call to an unsupported function: Tensor.numpy() of a tensor that requires grad raises")


def test_array_attribute_says_array():
    def f(a):
        return a.strides, a * 2
    assert only_reason(f, np.ones((2, 2))) == (
        "an input or value shapejit cannot model: numpy array attribute 'strides'")


def test_array_data_read_says_array():
    def f(a):
        return a.tolist(), a + 1
    assert only_reason(f, np.ones(2)) == (
        "a tensor or array value read as a Python scalar: ndarray.tolist() reads array data "
        "into Python")


def test_tensor_data_read_names_the_value():
    def f(x):
        return x + int(x)
    assert only_reason(f, torch.randn(1)) == (
        "a tensor or array value read as a Python scalar: int() of a tensor reads its data")


def test_collections_built_in_the_frame_take_item_assignment():
    def f(x):
        d = collections.OrderedDict()
        d["a"] = x
        dd = collections.defaultdict(list)
        dd["b"].append(x)
        dd["c"] = x
        return d["a"] + dd["b"][0] + dd["c"]
    assert reasons(f, torch.randn(3)) == []


class _MyOD(collections.OrderedDict):
    pass


def test_item_assignment_on_an_outside_object_names_its_type():
    def f(x, o):
        o["k"] = x
        return x + 1
    assert only_reason(f, torch.randn(3), _MyOD()) == (
        "a side effect shapejit cannot replay yet: item assignment on a %s._MyOD object "
        "from outside the frame" % __name__)


# ------------------------------------------------------------ the article ----

def test_values_are_named_with_type_and_article():
    def f(x, s):
        for _ in s:
            x = x + 1
        return x
    assert only_reason(f, torch.randn(3), io.StringIO("a\nb")) == (
        "an input or value shapejit cannot model: iteration over an io.StringIO object")


def test_with_on_an_object_names_its_type_once():
    def f(x, s):
        with s:
            y = x + 1
        return y
    assert only_reason(f, torch.randn(3), io.StringIO()) == (
        "unsupported bytecode: 'with' on an io.StringIO object")


def test_article_before_a_consonant():
    def f(x, m):
        with m:
            y = x + 1
        return y
    assert only_reason(f, torch.randn(3), memoryview(b"ab")) == (
        "unsupported bytecode: 'with' on a memoryview object")


class _Record(collections.OrderedDict):
    def __setitem__(self, key, value):
        super().__setitem__(key, value)


def test_method_reached_through_super_is_named_by_its_owner():
    # the method of the C base, called on a subclass instance: named by the base
    def f(x, r):
        r["a"] = x
        return x + 1
    rs = reasons(f, torch.randn(3), _Record())
    assert CALL + "collections.OrderedDict.__setitem__" in rs, rs


def test_in_on_an_object_without_contains_is_not_a_user_exception():
    def f(x, m):
        return x + 1, 97 in m
    assert only_reason(f, torch.randn(3), memoryview(b"ab")) == (
        "an input or value shapejit cannot model: 'in' on a memoryview object, which has "
        "no __contains__")


def test_tensor_dict_key_names_the_key():
    def f(x, d):
        d[x] = 1
        return x + 1
    assert only_reason(f, torch.randn(3), {}) == (
        "an input or value shapejit cannot model: a tensor as the key of a dict from outside "
        "the frame (written back from constant keys only)")


def test_explicit_graph_break_says_so():
    def f(x):
        y = x + 1
        torch._dynamo.graph_break()
        return y * 2
    assert only_reason(f, torch.randn(3)) == CALL + "torch._dynamo.graph_break() asks for a break here"
