"""torch: Python iteration idioms inside compiled frames: functools.reduce, map, filter,
sorted / list.sort with key, zip(strict=True), reversed, any/all over generators, the
itertools (product, chain, combinations, permutations, islice, accumulate, repeat, count),
min/max/sum over sizes and tensors, math functions of sizes, random."""
import functools
import itertools
import math
import operator
import random

import torch
import torch.nn.functional as F

from ._base import T, TP, torch_case, with_breaks


def _residual(h, w):
    return h + torch.tanh(h @ w)


def _say(*parts):
    print("shapejit corpus:", *parts)


# ---- functools.reduce ----------------------------------------------------------------
@torch_case(lambda: (T(3, 4), T(3, 4), T(3, 4)))
def t_it_reduce_lambda_sum(x, y, z):
    return functools.reduce(lambda a, b: a + b, [x, y * 2, z * 3])


@torch_case(lambda: (T(2, 4), [T(4, 4), T(4, 4), T(4, 4)]))
def t_it_reduce_initial_matmul(x, weights):
    return functools.reduce(lambda h, w: torch.relu(h @ w), weights, x)


@torch_case(lambda: (T(2, 3, 4, 5),))
def t_it_reduce_operator_mul_flatten(x):
    feat = functools.reduce(operator.mul, x.shape[1:], 1)
    return x.reshape(x.shape[0], feat).sum(-1)


@torch_case(lambda: (T(2, 4), T(4, 4), T(4, 4)))
def t_it_reduce_user_function(x, w1, w2):
    return functools.reduce(_residual, (w1, w2), x)


@torch_case(lambda: (T(3, 4), T(3, 4)))
def t_it_reduce_operator_add_single(x, y):
    # one item and no initial value: the item itself, the function is never called
    return functools.reduce(operator.add, [x * y])


# ---- map / filter ----------------------------------------------------------------------
@torch_case(lambda: ([T(3, 4), T(3, 4), T(3, 4)],))
def t_it_map_lambda(xs):
    return list(map(lambda t: t * 2 + 1, xs))


@torch_case(lambda: (T(3, 4), T(3, 4)))
def t_it_map_torch_relu(x, y):
    return torch.stack(list(map(torch.relu, [x, -y, x - y])))


@torch_case(lambda: ([T(3), T(3)], [T(3), T(3)]))
def t_it_map_two_iterables(xs, ws):
    return sum(map(lambda a, b: a * b, xs, ws))


@torch_case(lambda: (T(2, 3), T(2, 5)))
def t_it_map_size_getter(x, y):
    widths = list(map(lambda t: t.shape[-1], [x, y]))
    return torch.cat([x, y], dim=-1).reshape(-1, sum(widths))


@torch_case(lambda: (T(3, 4), None, T(3, 4)))
def t_it_filter_optional_tensors(x, mask, bias):
    parts = list(filter(lambda t: t is not None, [x, mask, bias]))
    return torch.stack(parts).sum(0)


@torch_case(lambda: (T(2, 3, 4),))
def t_it_filter_none_dims(x):
    dims = tuple(filter(None, [0, 1, 2]))   # drops the 0
    return x.sum(dims)


@torch_case(lambda: ([T(3, 4), T(3, 4), T(3, 4), T(3, 4)],))
def t_it_enumerate_filter_pipeline(xs):
    kept = filter(lambda p: p[0] % 2 == 0, enumerate(map(torch.sigmoid, xs)))
    return [t * i for i, t in kept]


@torch_case(lambda: ([T(3), T(3), T(3)],))
def t_it_next_then_rest_of_map(xs):
    it = map(lambda t: t.exp(), xs)
    first = next(it)
    rest = list(it)
    return first, rest, next(it, None)


# ---- sorted / list.sort ------------------------------------------------------------------
@torch_case(lambda: (T(2, 4), T(5, 4), T(3, 4)))
def t_it_sorted_key_lambda(a, b, c):
    ordered = sorted([a, b, c], key=lambda t: t.shape[0])
    return torch.cat(ordered)[:4] * 2


@torch_case(lambda: (T(4), T(4), T(4)))
def t_it_sorted_key_len_reverse(x, y, z):
    groups = [[x], [x, y, z], [y, z]]
    biggest = sorted(groups, key=len, reverse=True)[0]
    return torch.stack(biggest).mean(0)


@torch_case(lambda: (T(2, 3, 4),))
def t_it_sorted_reverse_dims(x):
    return x.permute(*sorted(range(x.dim()), reverse=True)).contiguous()


@torch_case(lambda: (T(3, 6), T(3, 2), T(3, 4)))
def t_it_list_sort_key(a, b, c):
    feats = [a, b, c]
    feats.sort(key=lambda t: t.shape[-1])
    return torch.cat(feats, dim=-1)


@torch_case(lambda: ({"b": T(3), "a": T(3), "c": T(3)},))
def t_it_sorted_dict_items_by_key(d):
    return torch.stack([v for _, v in sorted(d.items(), key=lambda kv: kv[0])])


# ---- zip / reversed ------------------------------------------------------------------
@torch_case(lambda: ([T(3), T(3)], [T(3), T(3)]))
def t_it_zip_strict(xs, ws):
    return [x * w for x, w in zip(xs, ws, strict=True)]


@torch_case(lambda: (T(3),))
def t_it_zip_strict_mismatch_caught(x):
    try:
        pairs = list(zip([x, x + 1], [1.0], strict=True))
    except ValueError:
        pairs = [(x, -1.0)]
    return [a * b for a, b in pairs]


@torch_case(lambda: (T(3), T(3), T(3)))
def t_it_zip_names_to_dict(q, k, v):
    return {name: t.relu() for name, t in zip(("q", "k", "v"), (q, k, v))}


@torch_case(lambda: ([T(3), T(3), T(3)],))
def t_it_zip_shares_iterator(xs):
    # zip takes one item from `it` per row: the rest is left for the loop below
    it = iter(xs)
    head = [a * w for a, w in zip(it, [2.0])]
    return head, [t + 1 for t in it]


@torch_case(lambda: ([T(3), T(3), T(3)],))
def t_it_reversed_list_tuple_range(xs):
    out = xs[0]
    for t in reversed(xs):
        out = out * 0.5 + t
    for i in reversed(range(3)):
        out = out + i
    return [t.sum() for t in reversed((out, xs[1]))]


# ---- any / all -----------------------------------------------------------------------
@torch_case(lambda: (T(3, 4),))
def t_it_all_sizes_generator(x):
    if all(d > 1 for d in x.shape):
        return x.softmax(-1)
    return x


@torch_case(lambda: (T(3, 4),))
def t_it_any_constant_generator(x):
    modes = ("mean", "max")
    if any(m == "max" for m in modes):
        return x.amax(-1)
    return x.mean(-1)


# ---- itertools -------------------------------------------------------------------------
@torch_case(lambda: (T(2, 2, 3),))
def t_it_product_grid(x):
    out = torch.zeros(3)
    for i, j in itertools.product(range(x.shape[0]), range(x.shape[1])):
        out = out + x[i, j] * (i + 1) * (j + 1)
    return out


@torch_case(lambda: ([T(3), T(3)], T(3)))
def t_it_chain_lists(xs, y):
    return torch.stack(list(itertools.chain(xs, [y], (y * 2,))))


@torch_case(lambda: ([[T(2), T(2)], [T(2)]],))
def t_it_chain_from_iterable(groups):
    return torch.cat(list(itertools.chain.from_iterable(groups)))


@torch_case(lambda: ([T(4), T(4), T(4)],))
def t_it_combinations_pairwise_dots(xs):
    return torch.stack([a @ b for a, b in itertools.combinations(xs, 2)])


@torch_case(lambda: (T(3), T(3)))
def t_it_permutations_differences(x, y):
    return [a - b for a, b in itertools.permutations([x, y, x * y], 2)]


@torch_case(lambda: ([T(3), T(3), T(3), T(3), T(3)],))
def t_it_islice_every_other(xs):
    return torch.stack(list(itertools.islice(xs, 1, None, 2)))


@torch_case(lambda: ([T(3), T(3), T(3)],))
def t_it_accumulate_running_sum(xs):
    return list(itertools.accumulate(xs))


@torch_case(lambda: (T(9, 2),))
def t_it_accumulate_split_offsets(x):
    sizes = [2, 3, 4]
    offsets = list(itertools.accumulate(sizes, initial=0))
    return [x[s:e].sum(0) for s, e in zip(offsets, offsets[1:])]


@torch_case(lambda: ([T(3), T(3)], T(3)))
def t_it_accumulate_func_max(xs, y):
    return list(itertools.accumulate([y] + xs, torch.maximum))


@torch_case(lambda: ([T(3), T(3), T(3)],))
def t_it_repeat_zip(xs):
    return [t * s for t, s in zip(xs, itertools.repeat(0.5))]


@torch_case(lambda: (T(3),))
def t_it_repeat_times(x):
    return torch.stack(list(itertools.repeat(x, 3))) + torch.arange(3.0)[:, None]


@torch_case(lambda: ([T(3), T(3), T(3)],))
def t_it_count_zip(xs):
    return [t * i for i, t in zip(itertools.count(1, 2), xs)]


# ---- min / max / sum -----------------------------------------------------------------
@torch_case(lambda: (T(3, 5),))
def t_it_max_min_of_shape(x):
    big, small = max(x.shape), min(x.shape)
    return F.pad(x, (0, big - x.shape[1], 0, big - x.shape[0])) * small


@torch_case(lambda: ([T(3, 4), T(3, 4), T(3, 4)],))
def t_it_sum_tensor_list(xs):
    return sum(xs) / len(xs), sum(xs, torch.ones(3, 4))


@torch_case(lambda: (T(1)[0], T(1)[0]))
def t_it_max_of_0d_tensors(a, b):
    # the value of the larger, as torch.compile gives it (torch.maximum: a new tensor)
    return max(a, b) * 2, min(a, b, a * 0.5) + 1


@torch_case(lambda: (T(3),))
def t_it_max_default_empty(x):
    extra = []
    return x * max(extra, default=1.5) + max([t.shape[0] for t in extra], default=0)


@torch_case(lambda: (T(2, 4), T(6, 4), T(3, 4)))
def t_it_min_key_by_rows(a, b, c):
    smallest = min([a, b, c], key=lambda t: t.shape[0])
    largest = max((a, b, c), key=lambda t: t.shape[0])
    return smallest.sum(0) + largest.sum(0)


# ---- math on sizes ---------------------------------------------------------------------
@torch_case(lambda: (T(2, 5, 8), T(2, 5, 8)))
def t_it_math_scaled_attention(q, k):
    d = q.shape[-1]
    scores = q @ k.transpose(-1, -2) / math.sqrt(d)
    return scores.softmax(-1) * math.log(d) + math.exp(-1.0) * math.pi


@torch_case(lambda: (T(7, 3),))
def t_it_math_ceil_floor_prod(x):
    half = math.ceil(x.shape[0] / 2)
    low = math.floor(x.shape[0] / 2)
    return x[:half].sum() * math.prod(x.shape) + x[low:].sum()


@torch_case(lambda: (T(3, 4),))
def t_it_math_inf_clamp(x):
    return x.clamp(-math.inf, 1.0).masked_fill(x > 1.5, -math.inf).softmax(-1)


# ---- random --------------------------------------------------------------------------
@with_breaks("torch", lambda: (T(3),), graphs=2, breaks=1, reads_data=True)
def t_it_random_random(x):
    y = x.relu()
    if random.random() < 2.0:   # always true; the call breaks the graph
        y = y + 1
    return y


@with_breaks("torch", lambda: (T(3),), graphs=2, breaks=1, reads_data=True)
def t_it_random_scale(x):
    return x.relu() * (1.0 + 0.0 * random.random())


@torch_case(lambda: ([T(3), T(3), T(3), T(3)],))
def t_it_pairwise_differences(xs):
    return torch.stack([b - a for a, b in itertools.pairwise(xs)])


@torch_case(lambda: (T(3), T(3)))
def t_it_starmap_scaled(x, y):
    return list(itertools.starmap(lambda t, s: t * s, [(x, 2.0), (y, 0.5), (x + y, -1.0)]))


@torch_case(lambda: ([T(3), T(3), T(3)], [T(3)]))
def t_it_zip_longest_fill(xs, ys):
    return [a + (0.0 if b is None else b) for a, b in itertools.zip_longest(xs, ys)]


@torch_case(lambda: (T(2, 3, 4),))
def t_it_join_map_str_shape(x):
    tag = "x".join(map(str, x.shape))
    return {tag: x.flatten(1)}


@torch_case(lambda: (T(4, 6),))
def t_it_set_of_mapped_parities(x):
    parities = set(map(lambda d: d % 4, x.shape))
    return x * len(parities) + sum(map(float, x.shape))


@with_breaks("torch", lambda: (T(3),), graphs=2, breaks=1, reads_data=True)
def t_it_max_tensor_and_number(x):
    floor = max(x.sum(), 0.0)   # a tensor or the float 0.0, as the data decides
    return x * floor
