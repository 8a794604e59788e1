"""Random Python programs over containers, objects and control flow, for differential
testing of shapejit against eager (tests/e2e/test_py_fuzz.py, scripts: `make fuzz-py`).

``generate(seed)`` returns a ``Program``: module source defining ``f(x, y, d, l, buf)`` (x, y:
torch tensors or numpy arrays; d: a dict and l: a list from the caller, which the program
may write; buf: an io.StringIO for prints) and the construct kinds it used. Each program is
a straight run of statements drawn from the constructs below, over a few typed variables
the generator keeps track of, so that most programs run; the ones that raise compare by
exception type.

Construct kinds (``Program.kinds``):
  dict, dict_update, dict_view, list, list_method, set, input_write   containers
  closure, nonlocal, lambda, decorator                                 functions
  class, setattr, getattr, property, super                             user classes
  genexpr, generator, builtins                                         generators consumed by builtins
  loop, loop_break_print, loop_break_item, loop_exit                   loops (with graph breaks)
  print, item                                                          graph breaks in straight code
  try, raise                                                           exceptions
  setitem_break, while_item, super_after_break                         writes and loops around breaks
  nested, unpack                                                       containers in containers, star calls
  list_iter_break                                                      appends to the list a loop with a break walks
"""
import random
from dataclasses import dataclass, field

PRELUDE = '''\
import functools
import io

OUT = None


def twice(fn):
    @functools.wraps(fn)
    def wrapper(*args):
        return fn(*args) * 2
    return wrapper


def scaled(k):
    def deco(fn):
        def wrapper(*args):
            return fn(*args) * k
        return wrapper
    return deco


class Box:
    def __init__(self, v, n):
        self.v = v
        self.n = n

    @property
    def double(self):
        return self.v * 2

    def bump(self, k):
        self.n = self.n + k
        return self.n


class LoggedBox(Box):
    def __init__(self, v, n):
        super().__init__(v, n)
        self.seen = 0

    def __setattr__(self, name, value):
        if name == "n":
            object.__setattr__(self, "seen", getattr(self, "seen", 0) + 1)
        super().__setattr__(name, value)

    def bump(self, k):
        return super().bump(k + 1)

    def show_bump(self, buf):
        print("show", self.n, file=buf)
        return super().bump(1) + self.seen


class Lazy:
    def __init__(self, v):
        self.v = v

    def __getattr__(self, name):
        if name.startswith("z"):
            return len(name)
        raise AttributeError(name)


def pairs(t, n):
    for i in range(n):
        yield "p%d" % i, t * i


def counter(n):
    i = 0
    while i < n:
        yield i
        i += 1
'''


@dataclass
class Program:
    source: str
    lib: str
    kinds: set = field(default_factory=set)


class _Gen:
    def __init__(self, rng, lib):
        self.r = rng
        self.lib = lib
        self.lines = []
        self.kinds = set()
        self.tensors = ["x", "y"]
        self.dicts = ["d"]          # str keys only
        self.lists = ["l"]          # lists of tensors
        self.ints = ["n"]
        self.views = []
        self.objs = []
        self.consts = []   # lists of constants: returned only
        self.counter = 0
        self.depth = 1
        self.new_ints, self.new_tensors = [], []

    # ---- helpers ----
    def name(self, p):
        self.counter += 1
        return f"{p}{self.counter}"

    def emit(self, text, kind=None):
        self.lines.append("    " * self.depth + text)
        if kind:
            self.kinds.add(kind)
        # names made while the line was formatted exist from the next line on
        self.ints += self.new_ints
        self.tensors += self.new_tensors
        self.new_ints, self.new_tensors = [], []

    def t(self):
        return self.r.choice(self.tensors)

    def texpr(self):
        a, b = self.t(), self.t()
        return self.r.choice([f"{a} + 1", f"{a} * 0.5", f"{a} - {b}", f"{a} * {b}", f"({a} + {b}) * 0.25",
                              f"{a} + {self.r.choice(self.ints)}"])

    def key(self):
        return repr(self.r.choice("abcde"))

    def new_tensor(self, expr):
        v = self.name("t")
        self.emit(f"{v} = {expr}")
        self.tensors.append(v)
        return v

    # ---- constructs ----
    def s_dict(self):
        v = self.name("dd")
        items = ", ".join(f"{self.key()}: {self.texpr()}" for _ in range(self.r.randint(0, 3)))
        self.emit(f"{v} = {{{items}}}", "dict")
        self.dicts.append(v)

    def s_dict_write(self):
        d = self.r.choice(self.dicts)
        kind = "input_write" if d == "d" else "dict"
        c = self.r.randint(0, 4)
        if c == 0:
            self.emit(f"{d}[{self.key()}] = {self.texpr()}", kind)
        elif c == 1:
            self.emit(f"{d}.pop({self.key()}, None)", kind)
        elif c == 2:
            self.emit(f"{self.new_name_int()} = len({d}.setdefault({self.key()}, {self.texpr()}).shape)", kind)
        elif c == 3:
            t = self.new_name_tensor()
            self.emit(f"{t} = {d}.get({self.key()}, {self.t()})", "dict")
        else:
            k = self.key()
            self.emit(f"if {k} in {d}:", kind)
            self.depth += 1
            self.emit(f"del {d}[{k}]")
            self.depth -= 1

    def new_name_int(self):
        v = self.name("n")
        self.new_ints.append(v)
        return v

    def new_name_tensor(self):
        v = self.name("t")
        self.new_tensors.append(v)
        return v

    def s_dict_update(self):
        d = self.r.choice(self.dicts)
        self.kinds.add("input_write" if d == "d" else "dict_update")
        self.kinds.add("dict_update")
        c = self.r.randint(0, 6)
        if c == 0:
            self.emit(f"{d}.update([({self.key()}, {self.texpr()})])")
        elif c == 1:
            self.emit(f"{d}.update({self.r.choice('abcde')}={self.texpr()})")
        elif c == 2:
            self.emit(f"{d}.update(({self.key()} + str(i), {self.t()} * i) for i in range(2))")
        elif c == 3:
            self.emit(f"{d}.update({self.r.choice(self.dicts)})")
        elif c == 4:
            self.emit(f"{d}.update({self.r.choice(self.dicts)}.items())")
        elif c == 5:
            self.emit(f"{d}.update(zip(['a', 'q'], [{self.t()}, {self.t()}]))")
        else:
            v = self.name("dd")
            self.emit(f"{v} = dict({d}, z={self.t()})")
            self.dicts.append(v)

    def s_dict_view(self):
        d = self.r.choice(self.dicts)
        v = self.name("dv")
        self.emit(f"{v} = {d}.{self.r.choice(['keys', 'values', 'items'])}()", "dict_view")
        self.views.append(v)

    def s_view_use(self):
        if not self.views:
            return self.s_dict_view()
        v = self.r.choice(self.views)
        self.kinds.add("dict_view")
        c = self.r.randint(0, 3)
        if c == 0:
            self.emit(f"{self.new_name_int()} = len({v})")
        elif c == 1:
            self.emit(f"{self.new_name_int()} = int({self.key()} in {v}) + int(bool({v}))")
        elif c == 2:
            self.emit(f"{self.new_name_int()} = sum(1 for _ in {v})")
        else:
            self.emit(f"{self.new_name_int()} = len(list({v}))")

    def s_list(self):
        v = self.name("ll")
        self.emit(f"{v} = [{', '.join(self.texpr() for _ in range(self.r.randint(0, 3)))}]", "list")
        self.lists.append(v)

    def s_list_method(self):
        lst = self.r.choice(self.lists)
        self.kinds.add("input_write" if lst == "l" else "list_method")
        self.kinds.add("list_method")
        c = self.r.randint(0, 7)
        if c == 0:
            self.emit(f"{lst}.append({self.texpr()})")
        elif c == 1:
            self.emit(f"{lst}.extend({self.t()} * i for i in range(2))")
        elif c == 2:
            self.emit(f"{lst}.insert({self.r.randint(-2, 2)}, {self.texpr()})")
        elif c == 3:
            self.emit(f"if {lst}:")
            self.depth += 1
            self.emit(f"{self.new_name_tensor()} = {lst}.pop()")
            self.depth -= 1
            self.emit("else:")
            self.depth += 1
            self.emit(f"{self.tensors[-1]} = x")
            self.depth -= 1
        elif c == 4:
            self.emit(f"{lst}.reverse()")
        elif c == 5:
            self.emit(f"{lst} += [{self.texpr()}]")
        elif c == 6:
            alias = self.name("ll")
            self.emit(f"{alias} = {lst}")
            self.lists.append(alias)
        else:
            self.emit(f"{self.new_name_int()} = len({lst}) + len({lst}.copy())")

    def s_set(self):
        v = self.name("ss")
        self.emit(f"{v} = {{1, {self.r.randint(0, 5)}}}", "set")
        c = self.r.randint(0, 2)
        if c == 0:
            self.emit(f"{v}.add({self.r.choice(self.ints)})")
        self.emit(f"{self.new_name_int()} = len({v} | {{3}}) + len({v} & {{1, 2}}) + int(2 in {v})")

    def s_closure(self):
        fn = self.name("cl")
        k = self.r.choice(self.ints)
        a = self.t()
        self.emit(f"def {fn}(u):", "closure")
        self.depth += 1
        self.emit(f"return u * {k} + {a}")
        self.depth -= 1
        self.new_tensor(f"{fn}({self.t()})")

    def s_nonlocal(self):
        fn, cnt = self.name("nl"), self.name("cnt")
        self.emit(f"{cnt} = 0", "nonlocal")
        self.emit(f"def {fn}(u):")
        self.depth += 1
        self.emit(f"nonlocal {cnt}")
        self.emit(f"{cnt} += 1")
        self.emit("return u + " + cnt)
        self.depth -= 1
        self.new_tensor(f"{fn}({self.t()}) + {fn}({self.t()})")
        self.ints.append(cnt)

    def s_lambda(self):
        k = self.r.choice(self.ints)
        self.new_tensor(f"(lambda u, w={k}: u * w - 1)({self.t()})")
        self.kinds.add("lambda")

    def s_decorator(self):
        fn = self.name("dec")
        deco = self.r.choice(["@twice", f"@scaled({self.r.randint(1, 3)})"])
        self.emit(deco, "decorator")
        self.emit(f"def {fn}(u, w):")
        self.depth += 1
        self.emit("return u + w")
        self.depth -= 1
        self.new_tensor(f"{fn}({self.t()}, {self.t()})")

    def s_class(self):
        o = self.name("ob")
        cls = self.r.choice(["Box", "LoggedBox"])
        self.emit(f"{o} = {cls}({self.texpr()}, {self.r.choice(self.ints)})", "class")
        self.objs.append((o, cls))
        c = self.r.randint(0, 4)
        if c == 4 and cls == "LoggedBox":
            self.emit(f"{self.new_name_int()} = {o}.show_bump(buf)")
            self.kinds.update({"super", "super_after_break"})
        elif c == 0 or c == 4:
            self.new_tensor(f"{o}.double + {o}.v")
            self.kinds.add("property")
        elif c == 1:
            self.emit(f"{self.new_name_int()} = {o}.bump({self.r.randint(0, 3)})")
            if cls == "LoggedBox":
                self.kinds.update({"super", "setattr"})
        elif c == 2:
            self.emit(f"{o}.v = {self.texpr()}")
            if cls == "LoggedBox":
                self.kinds.add("setattr")
        else:
            self.emit(f"{self.new_name_int()} = {o}.n + getattr({o}, 'seen', 0)")

    def s_getattr(self):
        o = self.name("lz")
        self.emit(f"{o} = Lazy({self.t()})", "getattr")
        self.emit(f"{self.new_name_int()} = {o}.zz + {o}.zebra")
        self.new_tensor(f"{o}.v * 2")

    def s_genexpr(self):
        lst = self.r.choice(self.lists)
        c = self.r.randint(0, 4)
        self.kinds.add("genexpr")
        if c == 0:
            self.emit(f"{self.new_name_int()} = sum(1 for u in {lst})")
        elif c == 1:
            self.new_tensor(f"sum((u * 0.5 for u in {lst}), {self.t()})")
        elif c == 2:
            self.emit(f"{self.new_name_int()} = max([len(u.shape) for u in {lst}], default=0)")
        elif c == 3:
            self.emit(f"{self.new_name_int()} = len(sorted({self.r.choice(self.dicts)}))")
        else:
            v = self.name("dd")
            self.emit(f"{v} = {{k: u for k, u in zip('abc', {lst})}}")
            self.dicts.append(v)

    def s_generator(self):
        self.kinds.add("generator")
        c = self.r.randint(0, 2)
        if c == 0:
            v = self.name("dd")
            self.emit(f"{v} = dict(pairs({self.t()}, {self.r.randint(0, 3)}))")
            self.dicts.append(v)
        elif c == 1:
            self.emit(f"{self.new_name_int()} = sum(counter({self.r.randint(0, 4)}))")
        else:
            v = self.name("ll")
            self.emit(f"{v} = [u for _, u in pairs({self.t()}, 2)]")
            self.lists.append(v)

    def s_builtins(self):
        self.kinds.add("builtins")
        lst = self.r.choice(self.lists)
        c = self.r.randint(0, 3)
        if c == 0:
            self.emit(f"{self.new_name_int()} = len(list(enumerate({lst})))")
        elif c == 1:
            self.emit(f"{self.new_name_int()} = int(any(k == 'a' for k in {self.r.choice(self.dicts)}))")
        elif c == 2:
            self.emit(f"{self.new_name_int()} = min({self.r.choice(self.ints)}, {self.r.choice(self.ints)}) + abs(-3)")
        else:
            v = self.name("ll")
            self.emit(f"{v} = list(reversed({lst}))")
            self.lists.append(v)

    def s_loop(self):
        i = self.name("i")
        k = self.r.randint(1, 3)
        brk = self.r.choice([None, "print", "item"])
        self.emit(f"for {i} in range({k}):", "loop")
        self.depth += 1
        t = self.t()
        self.emit(f"{t} = {t} + {i} * 0.25")
        if brk == "print":
            self.emit(f"print('p', {i}, len({self.r.choice(self.dicts)}), file=buf)", "loop_break_print")
        elif brk == "item":
            self.emit(f"{self.ints[0]} = {self.ints[0]} + int({self.t()}.sum().item() > 0)", "loop_break_item")
        if self.r.random() < 0.3:
            self.emit(f"if {i} == {self.r.randint(0, k)}:", "loop_exit")
            self.depth += 1
            self.emit(self.r.choice(["break", "continue"]))
            self.depth -= 1
        self.emit(f"{self.r.choice(self.lists)}.append({t} * 0.5)")
        self.depth -= 1
        self.kinds.add("list_method")

    def s_setitem_break(self):
        t = self.r.choice(["x", "y"])
        self.emit(f"{t}[{self.r.randint(0, 2)}] = {self.r.choice(self.ints)}", "setitem_break")
        if self.r.random() < 0.5:
            self.emit(f"print('w', file=buf)")
        else:
            self.emit(f"{self.ints[0]} = {self.ints[0]} + int({self.t()}.sum().item() > 0)")

    def s_while(self):
        i = self.name("w")
        self.emit(f"{i} = 0", "while_item")
        self.emit(f"while {i} < {self.r.randint(1, 4)} and {self.t()}.sum().item() > -50:")
        self.depth += 1
        self.emit(f"{i} += 1")
        t = self.t()
        self.emit(f"{t} = {t} - 0.5")
        self.depth -= 1
        self.ints.append(i)

    def s_nested(self):
        """Containers inside containers, written through the inner reference."""
        self.kinds.add("nested")
        c = self.r.randint(0, 3)
        if c == 0:
            v = self.name("dd")
            inner = self.r.choice(self.lists)
            self.emit(f"{v} = {{'in': {inner}, 'k': {self.texpr()}}}")
            self.emit(f"{v}['in'].append({self.t()} * 3)")
            self.dicts.append(v)
        elif c == 1:
            v = self.name("ll")
            self.emit(f"{v} = [{self.r.choice(self.dicts)}, {self.r.choice(self.lists)}]")
            self.emit(f"{v}[1].append({self.texpr()})")
            self.emit(f"{self.new_name_int()} = len({v}[0]) + len({v}[1])")
        elif c == 2:
            lst = self.r.choice(self.lists)
            fn = self.name("add")
            self.emit(f"def {fn}(u):")
            self.depth += 1
            self.emit(f"{lst}.append(u)")
            self.emit(f"return len({lst})")
            self.depth -= 1
            self.emit(f"{self.new_name_int()} = {fn}({self.texpr()})")
            self.kinds.add("closure")
        else:
            lst = self.r.choice(self.lists)
            self.emit(f"{self.new_name_int()} = len({lst}[1:]) + len({lst}[::-1])")

    def s_unpack(self):
        """Unpacking, star-args and keyword-args calls, comprehensions."""
        self.kinds.add("unpack")
        c = self.r.randint(0, 4)
        if c == 0:
            a, b = self.name("t"), self.name("t")
            self.emit(f"{a}, *{b} = [{self.texpr()}, {self.t()}, {self.t()}]")
            self.tensors.append(a)
            self.lists.append(b)
        elif c == 1:
            fn = self.name("kw")
            self.emit(f"def {fn}(u, *rest, scale=1, **extra):")
            self.depth += 1
            self.emit("return u * scale + len(rest) + len(extra)")
            self.depth -= 1
            lst = self.r.choice(self.lists)
            self.emit(f"if {lst}:")
            self.depth += 1
            self.emit(f"{self.new_name_tensor()} = {fn}(*{lst}, scale=2, **{{'q': 1}})")
            self.depth -= 1
            self.emit("else:")
            self.depth += 1
            self.emit(f"{self.tensors[-1]} = x")
            self.depth -= 1
        elif c == 2:
            v = self.name("dd")
            self.emit(f"{v} = {{k: u * 2 for k, u in {self.r.choice(self.dicts)}.items() if k != 'b'}}")
            self.dicts.append(v)
        elif c == 3:
            self.emit(f"{self.new_name_int()} = sum(1 for k, u in sorted({self.r.choice(self.dicts)}.items(), "
                      f"key=lambda kv: kv[0]))")
        else:
            v = self.name("ll")
            self.emit(f"{v} = [*{self.r.choice(self.lists)}, {self.t()}]")
            self.lists.append(v)

    def s_const_container(self):
        """Sets and lists the capture can fold to constants, returned to the caller."""
        self.kinds.add("set")
        v = self.name("ll")
        c = self.r.randint(0, 2)
        if c == 0:
            self.emit(f"{v} = sorted({self.r.choice(self.dicts)})")
        elif c == 1:
            self.emit(f"{v} = [k for k in 'abc' if k != {self.key()}]")
        else:
            s = self.name("ss")
            self.emit(f"{s} = set()")
            self.emit(f"{s}.add({self.r.choice(self.ints)})")
            self.emit(f"{v} = [{s}, {s}]")
        self.consts.append(v)

    def s_list_iter_break(self):
        """A for loop over a list that the body appends to, with a graph break in the body."""
        v, t = self.name("todo"), self.name("it")
        self.emit(f"{v} = [{self.t()}]", "list_iter_break")
        self.emit(f"for {t} in {v}:")
        self.depth += 1
        self.emit(f"if len({v}) < {self.r.randint(2, 4)}:")
        self.depth += 1
        self.emit(f"{v}.append({t} + 1)")
        self.depth -= 1
        self.emit(f"print('it', len({v}), file=buf)")
        self.depth -= 1
        self.lists.append(v)

    def s_isinstance(self):
        self.kinds.add("builtins")
        v = self.r.choice(self.dicts + self.lists + self.views)
        self.emit(f"{self.new_name_int()} = int(isinstance({v}, dict)) + 2 * int(isinstance({v}, list))"
                  f" + 4 * int(type({v}).__name__.startswith('dict_'))")

    def s_print(self):
        self.emit(f"print('s', len({self.r.choice(self.lists)}), sorted({self.r.choice(self.dicts)}), file=buf)",
                  "print")

    def s_item(self):
        v = self.name("n")
        self.emit(f"{v} = int({self.t()}.sum().item() * 10) % 7", "item")
        self.ints.append(v)

    def s_try(self):
        d = self.r.choice(self.dicts)
        c = self.r.randint(0, 2)
        self.emit("try:", "try")
        self.depth += 1
        if c == 0:
            self.emit(f"{self.new_name_tensor()} = {d}[{self.key()}] * 2")
        elif c == 1:
            self.emit(f"{self.new_name_tensor()} = {self.r.choice(self.lists)}[{self.r.randint(-3, 3)}]")
        else:
            self.emit(f"if len({d}) > {self.r.randint(0, 3)}:")
            self.depth += 1
            self.emit("raise ValueError('big')")
            self.depth -= 1
            self.emit(f"{self.new_name_tensor()} = {self.t()} + 1")
        self.depth -= 1
        self.emit("except (KeyError, IndexError, ValueError):")
        self.depth += 1
        self.emit(f"{self.tensors[-1]} = x * 0")
        self.depth -= 1

    def s_raise(self):
        self.emit(f"if len({self.r.choice(self.lists)}) > {self.r.randint(2, 6)}:", "raise")
        self.depth += 1
        self.emit(f"raise {self.r.choice(['ValueError', 'KeyError', 'RuntimeError'])}('gen')")
        self.depth -= 1

    STATEMENTS = [
        (s_dict, 3), (s_dict_write, 3), (s_dict_update, 3), (s_dict_view, 2), (s_view_use, 3),
        (s_list, 2), (s_list_method, 4), (s_set, 1), (s_closure, 1), (s_nonlocal, 1), (s_lambda, 1),
        (s_decorator, 1), (s_class, 2), (s_getattr, 1), (s_genexpr, 2), (s_generator, 1),
        (s_builtins, 2), (s_loop, 2), (s_print, 1), (s_item, 1), (s_try, 1), (s_raise, 1),
        (s_setitem_break, 1), (s_while, 1), (s_nested, 2), (s_unpack, 2), (s_isinstance, 1),
        (s_const_container, 1), (s_list_iter_break, 0.3),
    ]

    def body(self, n):
        fns, weights = zip(*self.STATEMENTS)
        for _ in range(n):
            self.r.choices(fns, weights)[0](self)

    def result(self):
        parts = self.tensors[2:][-3:] + self.ints[-3:] + self.dicts[1:][-2:] + self.lists[1:][-2:] + self.views[-2:]
        parts += self.consts[-2:] + ["x", "y"]
        return "return (" + ", ".join(parts) + ",)"


def generate(seed, size=None):
    """The program of one seed: (Program). size: the number of statements (random 3..10)."""
    r = random.Random(seed)
    lib = "numpy" if r.random() < 0.3 else "torch"
    g = _Gen(r, lib)
    g.body(size if size is not None else r.randint(3, 10))
    lines = [PRELUDE, "", "def f(x, y, d, l, buf):", "    n = len(l) + 1"] + g.lines + ["    " + g.result(), ""]
    return Program("\n".join(lines), lib, g.kinds)
