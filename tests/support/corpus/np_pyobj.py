"""numpy: Python objects in the frame: collections (OrderedDict, defaultdict, deque,
Counter, namedtuple) holding arrays, and equality of user objects."""
import dataclasses
from collections import Counter, OrderedDict, defaultdict, deque, namedtuple

import numpy as np

from ._base import A, AP, numpy_case


@numpy_case(lambda: (A(3, 4),))
def np_obj_ordereddict_layers(x):
    layers = OrderedDict()
    layers["scale"] = x * 2.0
    layers["shift"] = x + 1.0
    layers["square"] = x ** 2
    layers.move_to_end("scale")
    _, dropped = layers.popitem(last=False)
    return np.stack(list(layers.values())), dropped, list(layers)


@numpy_case(lambda: (A(6, 2),))
def np_obj_defaultdict_buckets(x):
    buckets = defaultdict(list)
    for i in range(6):
        buckets[i % 3].append(x[i])
    return [np.stack(buckets[k]).sum(axis=0) for k in sorted(buckets)]


@numpy_case(lambda: (A(5, 3),))
def np_obj_deque_moving_average(x):
    window = deque(maxlen=2)
    out = []
    for row in x:
        window.append(row)
        out.append(np.stack(list(window)).mean(axis=0))
    return np.stack(out)


@numpy_case(lambda: (AP(4),))
def np_obj_counter_class_weights(x):
    labels = ["a", "b", "a", "a", "c", "b"]
    freq = Counter(labels)
    weights = np.array([1.0 / freq[k] for k in sorted(freq)])
    return x[:3] * weights, freq.most_common(2)


Stats = namedtuple("Stats", "mean std count")


@numpy_case(lambda: (A(10),))
def np_obj_namedtuple_stats(x):
    s = Stats(x.mean(), x.std(), len(x))
    t = s._replace(mean=s.mean - 1.0)
    return t, t._asdict(), s.count


@dataclasses.dataclass
class Grid:
    rows: int
    cols: int


@numpy_case(lambda: (A(2, 3),))
def np_obj_dataclass_equality(x):
    g = Grid(2, 3)
    if g == Grid(*x.shape):
        return x * 2.0
    return x


@numpy_case(lambda: (A(3), A(3)))
def np_obj_counter_of_zipped_signs(a, b):
    names = ["pos" if s > 0 else "neg" for s in (1, -1, 1)]
    counts = Counter(zip(names, range(3)))
    od = OrderedDict(zip(names, (a, b, a * b)))
    return od["pos"] * len(counts), sorted(od)
