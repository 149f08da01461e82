"""Building what a flagged function is called with: arguments from how the body uses them, and instances.

Runs inside the verification worker (it imports JAX lazily). A parameter's structure is read from
the function's own body — subscripts with string keys make a dict, integer subscripts and
unpacking a tuple, iteration a list, attribute reads a record — and its leaves are arrays of one
of a few candidate shapes, tried in turn until tracing reaches the flagged line. Static values come
from defaults, annotations (`int`, `bool`, `Literal[...]`) and literal arguments at call sites in
the same file. Instances are built the way the class says it is built.
"""
from __future__ import annotations

import ast
import collections
import dataclasses
import inspect
import math
import operator
import os
from typing import Any, Optional

ARRAY_NAMES = {"Array", "ndarray", "array", "ArrayLike", "Float", "Int", "Bool", "Shaped", "Num", "Real", "Inexact",
               "Integer", "UInt", "Complex", "ShapeDtypeStruct", "ArrayTree", "PyTree", "Tensor"}
KEY_NAMES = {"key", "rng", "rng_key", "prng_key", "subkey", "prng", "seed_key", "dropout_key", "sample_key"}
KEY_ANNOTATIONS = {"PRNGKeyArray", "KeyArray", "PRNGKey", "Key"}
# (shape, integer?) tried in turn for array leaves: a scalar, an integer scalar (indices, counts),
# then small arrays whose matmuls and reshapes are consistent with each other, then wider ones (a row
# unpacked after a slice, `a, b, c, d = row[:4]`, or read at a fixed position, `row[4]`).
SHAPE_VARIANTS = [((), False), ((), True), ((3,), False), ((3, 3), False), ((6, 6), False)]
WIDE_VARIANT = len(SHAPE_VARIANTS) - 1  # the wide one: a run with it that reaches the line refutes nothing
_ARRAY_ATTRS = {"shape", "ndim", "dtype", "size", "T", "at", "real", "imag", "sum", "mean", "max", "min",
                "reshape", "astype", "item", "tolist", "std", "any", "all", "dot", "nonzero", "repeat", "squeeze",
                "transpose", "flatten", "ravel", "clip", "argmax", "argmin", "var", "prod", "cumsum", "conj",
                "swapaxes", "round", "sort", "block_until_ready", "mT", "take", "view", "copy"}
# Names that, for a plain (untraced) call, usually hold Python values rather than arrays.
_COUNT_NAMES = {"n", "k", "num", "steps", "depth", "count", "length", "size", "dim", "features", "width",
                "hidden", "num_steps", "n_steps", "batch_size", "seed", "axis", "i", "idx", "index"}


def _record_class(name: str, attrs: list[str]) -> type:
    """A named tuple (a pytree) with the attributes `attrs`, in that order. A name a named tuple cannot
    have as a field (`_pad_token`) is stored under another and read through a property of that name."""
    fields = [a if not a.startswith("_") else f"field{a}" for a in attrs]
    base = collections.namedtuple(name, fields)  # type: ignore[misc]
    aliases = {a: property(operator.itemgetter(i)) for i, (a, f) in enumerate(zip(attrs, fields)) if a != f}
    return type(name, (base,), {"__slots__": (), "_attributes": tuple(attrs), **aliases}) if aliases else base


def _count_name(name: str) -> bool:
    """A name that says it holds a count (`n_layers`, `num_heads`, `hidden_size`, `unit_type_bits`)."""
    return name in _COUNT_NAMES or name.startswith(("n_", "num_")) \
        or name.endswith(("_size", "_dim", "_len", "_length", "_steps", "_bits")) or "_bits_" in name


class CannotBuild(Exception):
    """The inputs for a function could not be built; the message says why."""


# ---- structure read from how the body uses a parameter -------------------------------------------

Spec = tuple  # ("array",) | ("array", rank, exact) | ("dict", {key: Spec}) | ("seq", [Spec], iterated) |
#               ("obj", {attr: Spec}) | ("key",) | ("keyfn",) | ("call",) | ("bool",) | ("int",) | ("index",)
# ("index",): used alone as an index (`table[agent_id]`): an integer scalar.
# ("bool",): only tested for truth (`if cfg.use_bias:`); ("int",): a count (`range(cfg.n_layers)`). Either
# is built as a Python value only where the object holding it is one JAX never traces (an instance's
# attributes); elsewhere, as any other leaf, it is an array.
_SCALARS = ("bool", "int")


def _rank(a: Spec, b: Spec) -> Spec:
    """Two array uses together: an exact rank (`n, d = x.shape`) wins over a least one (`x[:, 0]`)."""
    ra, ea = (a[1], a[2]) if len(a) > 1 else (0, False)
    rb, eb = (b[1], b[2]) if len(b) > 1 else (0, False)
    if ea and eb and ra != rb:
        return ("array",)  # the body reads two different ranks: no evidence either way
    if ea or eb:
        return ("array", ra if ea else rb, True)
    return ("array", max(ra, rb), False) if max(ra, rb) else ("array",)


def _merge(a: Optional[Spec], b: Optional[Spec]) -> Optional[Spec]:
    if a is not None and b is not None and a[0] == b[0] == "array":
        return _rank(a, b)
    if a is not None and a[0] in _SCALARS and b is not None:
        return b  # (any other use says more)
    if b is not None and b[0] in _SCALARS and a is not None:
        return a
    if a is None or a[0] == "array":
        return b if b is not None else a
    if b is None or b[0] == "array":
        return a
    if a[0] == b[0] == "dict" or a[0] == b[0] == "obj":
        keys = dict(a[1])
        for k, v in b[1].items():
            keys[k] = _merge(keys.get(k), v)
        return (a[0], keys)
    if a[0] == "seq" and b[0] == "dict" and a[2]:  # iterating a dict yields its keys
        return b
    if b[0] == "seq" and a[0] == "dict" and b[2]:
        return a
    if a[0] == b[0] == "seq":
        n = max(len(a[1]), len(b[1]))
        items = [_merge(a[1][i] if i < len(a[1]) else None, b[1][i] if i < len(b[1]) else None) for i in range(n)]
        return ("seq", items, a[2] or b[2])
    return a


class _Usage:
    """Reads a parameter's structure from the expressions that use it inside one function."""

    def __init__(self, fn: ast.AST, tree: Optional[ast.Module] = None,
                 namespace: Optional[dict[str, Any]] = None) -> None:
        self.fn = fn
        self.tree = tree
        self.namespace = namespace or {}
        self.parents: dict[ast.AST, ast.AST] = {}
        self.loads: dict[str, list[ast.Name]] = collections.defaultdict(list)
        for node in ast.walk(fn):
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                self.loads[node.id].append(node)

    def of_name(self, name: str, depth: int = 0, seen: Optional[set[str]] = None) -> Optional[Spec]:
        seen = seen or set()
        if name in seen or depth > 6:
            return None
        seen = seen | {name}
        spec: Optional[Spec] = None
        for node in self.loads.get(name, []):
            spec = _merge(spec, self.of_expr(node, depth, seen))
        return spec

    def _callee(self, func: ast.expr) -> tuple[Optional[ast.FunctionDef], Optional[ast.Module], int]:
        """The def a call runs, its module, and how many leading parameters the call does not fill (1 for
        a bound method: `tracker.advance(dt)` fills `dt`, not `self`)."""
        if isinstance(func, ast.Name) and self.tree is not None:
            local = next((s for s in self.tree.body if isinstance(s, ast.FunctionDef) and s.name == func.id), None)
            if local is not None:
                return local, self.tree, 0
        if not isinstance(func, (ast.Name, ast.Attribute)) or not self.namespace:
            return None, None, 0
        try:  # `squared_error` or `losses.squared_error`, imported from another module
            obj = eval(compile(ast.Expression(func), "<callee>", "eval"), {}, self.namespace)
        except Exception:  # noqa: BLE001
            return None, None, 0
        code = getattr(inspect.unwrap(obj), "__code__", None) if callable(obj) else None
        if code is None or f"{os.sep}site-packages{os.sep}" in code.co_filename:
            return None, None, 0  # only the project's own functions: libraries' usage is not the caller's
        tree = _parsed(code.co_filename)
        if tree is None:
            return None, None, 0
        found = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == code.co_name
                      and code.co_firstlineno in (n.lineno, min([n.lineno] + [d.lineno for d in n.decorator_list]))),
                     None)
        return found, tree, 1 if inspect.ismethod(obj) else 0

    def _target(self, target: ast.AST, depth: int, seen: set[str]) -> Optional[Spec]:
        if isinstance(target, ast.Name):
            return self.of_name(target.id, depth + 1, seen)
        if isinstance(target, (ast.Tuple, ast.List)):
            return ("seq", [self._target(t, depth, seen) for t in target.elts], False)
        return None

    def of_expr(self, node: ast.AST, depth: int, seen: set[str]) -> Optional[Spec]:
        """What the value of `node` must look like, judging by its parent."""
        parent = self.parents.get(node)
        if parent is None:
            return None
        if isinstance(parent, ast.Subscript) and parent.slice is node and isinstance(parent.ctx, ast.Load):
            return ("index",)
        if isinstance(parent, ast.Subscript) and parent.value is node:
            inner = self.of_expr(parent, depth + 1, seen) if isinstance(parent.ctx, ast.Load) else None
            key = parent.slice
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                return ("dict", {key.value: inner})
            if isinstance(key, ast.Constant) and isinstance(key.value, int) and not isinstance(key.value, bool) \
                    and 0 <= key.value < 8 and inner is not None and inner[0] != "array":
                # `x[0]` alone fits an array as well; `params[0]["w"]` is a sequence of records.
                return ("seq", [None] * key.value + [inner], False)
            parts = key.elts if isinstance(key, ast.Tuple) else [key]
            if any(isinstance(k, ast.Starred) for k in parts):
                return ("array",)
            # `x[..., 0]`, `x[:, i]`: at least as many axes as the index names (`None` adds one, `...` none).
            axes = sum(1 for k in parts if not (isinstance(k, ast.Constant) and (k.value is None or k.value is ...)))
            return ("array", axes, False) if axes else ("array",)
        if isinstance(parent, ast.Attribute) and parent.value is node:
            if parent.attr == "shape":
                return _shape_use(parent, self.parents)
            if parent.attr in _ARRAY_ATTRS:
                return ("array",)
            call = self.parents.get(parent)
            if isinstance(call, ast.Call) and call.func is parent:
                return ("obj", {parent.attr: ("call",)})
            if parent.attr.startswith("__"):
                return None  # `fn.__name__`, `x.__class__`: any object has these
            return ("obj", {parent.attr: self.of_expr(parent, depth + 1, seen)})
        if isinstance(parent, (ast.For, ast.comprehension)) and parent.iter is node:
            return ("seq", [self._target(parent.target, depth, seen)] * 2, True)
        if isinstance(parent, (ast.If, ast.While, ast.IfExp, ast.Assert)) and parent.test is node \
                or isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not):
            return ("bool",)
        if isinstance(parent, ast.BoolOp):
            return ("bool",) if self.of_expr(parent, depth + 1, seen) == ("bool",) else None
        if isinstance(parent, ast.Call):
            func = parent.func
            fname = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if func is node:
                return ("call",)
            if fname == "range" and isinstance(func, ast.Name) and node in parent.args:
                return ("int",)
            if fname == "len" and parent.args and parent.args[0] is node:
                return ("seq", [None, None], True)
            if fname in ("enumerate", "zip", "reversed") and node in parent.args:
                outer = self.parents.get(parent)
                if isinstance(outer, (ast.For, ast.comprehension)) and outer.iter is parent:
                    t = outer.target
                    elem: Optional[Spec] = None
                    if isinstance(t, ast.Tuple):
                        pos = 1 if fname == "enumerate" else parent.args.index(node)
                        if pos < len(t.elts):
                            elem = self._target(t.elts[pos], depth, seen)
                    elif fname == "reversed":
                        elem = self._target(t, depth, seen)
                    return ("seq", [elem] * 2, True)
            if node in parent.args and depth < 4:
                # Passed to a function of this module or one it imports: how that function uses it.
                callee, tree, bound = self._callee(func)
                if callee is not None and callee is not self.fn:
                    params = (callee.args.posonlyargs + callee.args.args)[bound:]
                    pos = parent.args.index(node)
                    if pos < len(params) and not any(isinstance(a, ast.Starred) for a in parent.args[:pos]):
                        return _Usage(callee, tree, self.namespace).of_name(params[pos].arg, depth + 1)
            return None
        if isinstance(parent, ast.Assign) and parent.value is node:
            spec: Optional[Spec] = None
            for t in parent.targets:
                spec = _merge(spec, self._target(t, depth, seen))
            return spec
        if isinstance(parent, (ast.Starred,)):
            return ("seq", [None, None], True)
        return None


def _shape_use(shape: ast.Attribute, parents: dict[ast.AST, ast.AST]) -> Spec:
    """The rank `x.shape` tells: `b, n, d = x.shape` is exactly 3 axes; `x.shape[2]` at least 3."""
    use = parents.get(shape)
    if isinstance(use, ast.Assign) and use.value is shape and len(use.targets) == 1 \
            and isinstance(use.targets[0], (ast.Tuple, ast.List)) \
            and not any(isinstance(t, ast.Starred) for t in use.targets[0].elts):
        return ("array", len(use.targets[0].elts), True)
    if isinstance(use, ast.Subscript) and use.value is shape and isinstance(use.slice, ast.Constant) \
            and isinstance(use.slice.value, int) and not isinstance(use.slice.value, bool):
        k = use.slice.value
        return ("array", k + 1 if k >= 0 else -k, False)
    return ("array",)


_PARSED: dict[str, Optional[ast.Module]] = {}


def _parsed(path: str) -> Optional[ast.Module]:
    if path not in _PARSED:
        try:
            with open(path, "rb") as f:
                _PARSED[path] = ast.parse(f.read(), path)
        except (OSError, SyntaxError, ValueError):
            _PARSED[path] = None
    return _PARSED[path]


def structure(fn: ast.AST, name: str, tree: Optional[ast.Module] = None,
              namespace: Optional[dict[str, Any]] = None) -> Optional[Spec]:
    """The structure of parameter `name` of `fn` as its body (and the same-module functions it passes
    the parameter to) uses it; None when there is no evidence (an array)."""
    return _Usage(fn, tree, namespace).of_name(name)


# ---- values --------------------------------------------------------------------------------------


def annotation_head(ann: Optional[ast.expr]) -> Optional[str]:
    if ann is None:
        return None
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        text = ann.value.split("[")[0].split("|")[0].strip()
        return text.split(".")[-1] or None
    if isinstance(ann, ast.Subscript):
        head = annotation_head(ann.value)
        if head == "Optional":
            return annotation_head(ann.slice)
        return head
    if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):  # `int | None`
        return annotation_head(ann.left)
    if isinstance(ann, ast.Attribute):
        return ann.attr
    if isinstance(ann, ast.Name):
        return ann.id
    return None


def _static_guess(p: ast.arg, spec: Optional[Spec]) -> Any:
    """A hashable value for a static parameter nothing gives one: a count for a count's name or a use as
    one (`range(n)`), `True` for a flag only tested, a tuple of small ints for a `tuple[int, ...]`
    annotation or a sequence the body only unpacks or indexes (`h, w = orig_hw`); None otherwise."""
    ann = p.annotation
    while isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):  # `tuple[int, int] | None`
        ann = ann.left
    if isinstance(ann, ast.Subscript) and annotation_head(ann.value) in ("tuple", "Tuple"):
        items = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
        names = [annotation_head(i) if not (isinstance(i, ast.Constant) and i.value is ...) else "..." for i in items]
        if names and all(n in ("int", "...") for n in names):
            return (3,) * max(2, len([n for n in names if n == "int"]))
    if _count_name(p.arg) or spec == ("int",):
        return 3
    if spec == ("bool",):
        return True
    if spec is not None and spec[0] == "seq" and all(item is None or item == ("int",) for item in spec[1]):
        return (3,) * max(2, len(spec[1]))
    return None


def jaxtyping_dims(ann: Optional[ast.expr]) -> Optional[tuple[int, ...]]:
    """`Float[Array, "b n"]` -> (2, 3); None when the annotation is not jaxtyping-style."""
    if not isinstance(ann, ast.Subscript) or not isinstance(ann.slice, ast.Tuple) or len(ann.slice.elts) != 2:
        return None
    spec = ann.slice.elts[1]
    if not isinstance(spec, ast.Constant) or not isinstance(spec.value, str):
        return None
    dims = []
    for i, tok in enumerate(spec.value.split()):
        tok = tok.lstrip("*#_")
        if tok == "...":
            continue
        dims.append(int(tok) if tok.isdigit() else 2 + (i % 2))
    return tuple(dims)


def _literal_choice(ann: Optional[ast.expr]) -> tuple[bool, Any]:
    """(True, first value) for `Literal["a", "b"]`."""
    if isinstance(ann, ast.Subscript) and annotation_head(ann.value) == "Literal":
        first = ann.slice.elts[0] if isinstance(ann.slice, ast.Tuple) else ann.slice
        try:
            return True, ast.literal_eval(first)
        except ValueError:
            pass
    return False, None


def is_literal(node: ast.expr) -> bool:
    try:
        ast.literal_eval(node)
        return True
    except (ValueError, SyntaxError, TypeError, RecursionError):
        return False


def call_sites(tree: ast.Module, name: str) -> list[dict[Any, Any]]:
    """The literal arguments of each call of `name(...)` in the file, one {position or keyword: value}
    per call that gives any, without repeats, in the order of the file."""
    sites: list[dict[Any, Any]] = []
    for node in sorted((n for n in ast.walk(tree) if isinstance(n, ast.Call)), key=lambda n: (n.lineno, n.col_offset)):
        f = node.func
        callee = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
        if callee != name:
            continue
        found: dict[Any, Any] = {}
        for i, a in enumerate(node.args):
            if isinstance(a, ast.Starred):
                break
            if is_literal(a):
                found[i] = ast.literal_eval(a)
        for kw in node.keywords:
            if kw.arg and is_literal(kw.value):
                found[kw.arg] = ast.literal_eval(kw.value)
        if found and found not in sites:
            sites.append(found)
    return sites


def call_site_values(tree: ast.Module, name: str, choice: int = 0) -> dict[Any, Any]:
    """Literal arguments given to `name(...)` anywhere in the file: {position or keyword: value}; those of
    the `choice`-th call (counted as `call_sites` counts them) first, then the first call's that give one."""
    sites = call_sites(tree, name)
    found: dict[Any, Any] = dict(sites[choice]) if 0 <= choice < len(sites) else {}
    for site in sites:
        for k, v in site.items():
            found.setdefault(k, v)
    return found


# Array builders whose shape argument gives an argument's shape at a call site: `zeros((4, 3))`,
# `jax.random.normal(key, (4, 3))`, `np.random.randn(4, 3)`.
_SHAPE_FIRST = {"zeros", "ones", "empty", "full"}
_SHAPE_SECOND = {"normal", "uniform", "bernoulli", "randint", "truncated_normal", "gumbel", "laplace", "cauchy"}
_SHAPE_STARRED = {"randn", "rand"}
_MAX_ELEMENTS = 4096  # larger arrays cost compile and run time without telling more


def _dims(value: Any) -> Optional[tuple[int, ...]]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value,)
    if isinstance(value, (tuple, list)) and all(isinstance(d, int) and not isinstance(d, bool) and d > 0
                                                for d in value):
        return tuple(value) if math.prod(value) <= _MAX_ELEMENTS else None
    return None


def _built_shape(node: ast.expr, scope: Optional[ast.AST]) -> Optional[tuple[int, ...]]:
    """The shape of the array an argument expression builds with literal sizes, or None."""
    if isinstance(node, ast.Name) and scope is not None:
        bound = [s.value for s in ast.walk(scope) if isinstance(s, ast.Assign) and len(s.targets) == 1
                 and isinstance(s.targets[0], ast.Name) and s.targets[0].id == node.id]
        return _built_shape(bound[0], None) if len(bound) == 1 else None  # bound once: that is its value
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return None
    kind = node.func.attr
    shape = next((k.value for k in node.keywords if k.arg == "shape"), None)
    if shape is None and kind in _SHAPE_FIRST and node.args:
        shape = node.args[0]
    elif shape is None and kind in _SHAPE_SECOND and len(node.args) >= 2:
        shape = node.args[1]
    elif kind in _SHAPE_STARRED and node.args and all(is_literal(a) for a in node.args):
        return _dims([ast.literal_eval(a) for a in node.args])
    if shape is None or kind not in _SHAPE_FIRST | _SHAPE_SECOND or not is_literal(shape):
        return None
    return _dims(ast.literal_eval(shape))


def call_site_shapes(tree: ast.Module, name: str) -> dict[Any, tuple[int, ...]]:
    """Shapes of arrays built with literal sizes and passed to `name(...)` in the file (directly or
    through a name bound once in the calling function): {position or keyword: shape}. A parameter
    given two different shapes at two sites gets none."""
    found: dict[Any, Optional[tuple[int, ...]]] = {}

    def visit(scope: ast.AST, node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else scope
            if isinstance(child, ast.Call):
                f = child.func
                callee = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
                if callee == name:
                    slots = list(enumerate(child.args))
                    if any(isinstance(a, ast.Starred) for _, a in slots):
                        slots = slots[:next(i for i, a in slots if isinstance(a, ast.Starred))]
                    for key, arg in slots + [(k.arg, k.value) for k in child.keywords if k.arg]:
                        dims = _built_shape(arg, scope if scope is not tree else None)
                        if dims is not None:
                            found[key] = dims if found.get(key, dims) == dims else None
            visit(inner, child)

    visit(tree, tree)
    return {k: v for k, v in found.items() if v is not None}


def describe(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {describe(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(describe(v) for v in value) + "]"
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        names = getattr(type(value), "_attributes", value._fields)  # (a record's attributes as the code reads them)
        return f"{type(value).__name__}(" + ", ".join(f"{k}={describe(v)}" for k, v in zip(names, value)) + ")"
    if isinstance(value, tuple):
        return "(" + ", ".join(describe(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is None or dtype is None:
        text = repr(value)
        return text if len(text) <= 40 else f"a {type(value).__name__}"
    short = {"float32": "f32", "int32": "i32", "bool": "bool", "uint32": "u32"}.get(str(dtype), str(dtype))
    if short.startswith("key<"):
        return "key"
    return f"{short}[{','.join(str(d) for d in shape)}]"


def typed_key(seed: int) -> Any:
    """`jax.random.key(seed)` without compiling its seeding kernel (tens of ms once caches are cleared).

    For the default threefry implementation the key data of a seed below 2**32 is `[0, seed]`;
    wrapping that data is what `jax.random.key` computes. Other implementations seed the usual way.
    """
    import jax
    import numpy as np

    if str(jax.config.jax_default_prng_impl) == "threefry2x32" and 0 <= seed < 2 ** 32:
        return jax.random.wrap_key_data(np.array([0, seed], dtype=np.uint32))
    return jax.random.key(seed)


class Inputs:
    """Builds the arguments of one call of a flagged function, for one candidate shape."""

    def __init__(self, tree: ast.Module, variant: int = 0, batch: bool = False, lead: int = 2,
                 plain_call: bool = False, namespace: Optional[dict[str, Any]] = None, site_choice: int = 0,
                 flags_off: frozenset[str] = frozenset(), flags: Optional[list[str]] = None) -> None:
        self.tree = tree
        self.namespace = namespace or {}
        self.variant = variant
        self.batch = batch
        self.lead = lead
        self.plain_call = plain_call
        self.counter = 0
        self.key_counter = 0
        self.omitted: list[str] = []  # parameters left to their defaults by the last `arguments`
        self.guessed: list[str] = []  # static parameters the last `arguments` gave a guessed value
        self.site_shapes: dict[Any, tuple[int, ...]] = {}  # shapes call sites in the file give parameters
        self.site_choice = site_choice  # whose literal arguments come first (see `call_site_values`)
        # A flag only tested for truth, where it is built as a Python bool, is True unless named here
        # ("*": every flag is False).
        self.flags_off = flags_off
        self.flags = flags if flags is not None else []  # the flags built so far (their names)

    # -- leaves --
    def array(self, dims: Optional[tuple[int, ...]] = None, integer: bool = False, boolean: bool = False,
              offset: int = 0, rank: Optional[tuple[int, bool]] = None) -> Any:
        import jax
        import numpy as np

        shape, variant_int = SHAPE_VARIANTS[self.variant]
        if rank is not None and (len(shape) < rank[0] or rank[1] and len(shape) != rank[0]):
            shape = (shape[0] if shape else 3,) * rank[0]  # the rank the body reads (`n, d = x.shape`)
        full = ((self.lead,) if self.batch else ()) + (dims if dims is not None else shape)
        # Distinct, non-degenerate values per leaf: results must depend on what they read. Built in
        # NumPy and transferred with `device_put`, which compiles nothing (`jnp.asarray` compiles a
        # conversion kernel, about 10 ms each once the caches are cleared between files).
        self.counter += 1
        values = 0.25 * self.counter + 0.5 + 0.1 * np.arange(int(np.prod(full))).reshape(full) + offset
        if boolean:
            return jax.device_put(values > 1.0)
        if integer or (variant_int and dims is None):
            return jax.device_put(values.astype(np.int32))
        return jax.device_put(values.astype(np.float32))

    def key(self) -> Any:
        self.key_counter += 1
        return typed_key(self.key_counter)

    def from_spec(self, spec: Optional[Spec], name: str, scalars: bool = False) -> Any:
        """A value shaped as `spec` says; with `scalars`, flags and counts as Python values (see `Spec`)."""
        if spec is not None and spec[0] in _SCALARS:
            if scalars and spec[0] == "bool":
                self.flags.append(name)
                return not ("*" in self.flags_off or name in self.flags_off)
            if scalars:
                return 3
            spec = None
        if spec is None or spec[0] == "array":
            rank = (spec[1], spec[2]) if spec is not None and len(spec) > 1 else None
            if rank is None and (self.plain_call or scalars) and _count_name(name):
                return 3  # a count read from a configuration record
            return self.key() if name in KEY_NAMES else self.array(rank=rank)
        kind = spec[0]
        if kind == "index":
            return self.array(dims=(), integer=True)
        if kind == "dict":
            return {k: self.from_spec(v, k, scalars) for k, v in sorted(spec[1].items())}
        if kind == "seq":
            items = [self.from_spec(s, name, scalars) for s in spec[1]]
            return items if spec[2] else tuple(items)
        if kind == "obj":
            attrs = spec[1]
            if any(v is not None and v[0] == "call" for v in attrs.values()):
                raise CannotBuild(f"could not build inputs for `{name}`: it is an object whose methods "
                                  f"(`{'`, `'.join(sorted(k for k, v in attrs.items() if v and v[0] == 'call'))}`) "
                                  "are called")
            cls = _record_class(f"{name.title().replace('_', '')}Record", sorted(attrs))
            return cls(*[self.from_spec(attrs[k], k, scalars) for k in sorted(attrs)])
        if kind == "call":
            raise CannotBuild(f"could not build inputs for `{name}`: it is called as a function")
        return self.array()

    # -- parameters --
    def value_for(self, fn: ast.AST, p: ast.arg, static: bool, default: Optional[ast.expr],
                  site: dict[Any, Any], index: int) -> Any:
        """The value for one parameter; raises CannotBuild with the reason."""
        ann = annotation_head(p.annotation)
        name = p.arg
        lit, choice = _literal_choice(p.annotation)
        if self.plain_call and not static and (index in site or name in site) and ann not in ARRAY_NAMES:
            # A function run as plain Python gets what a call in this file passes it: the literal
            # `"1-sided"` or `1`, not an array (no trace turns it into one).
            return site.get(name, site.get(index))
        if static or (self.plain_call and ann in ("int", "float", "bool", "str")):
            if index in site or name in site:
                return site.get(name, site.get(index))
            if default is not None and is_literal(default):
                return ast.literal_eval(default)
            if lit:
                return choice
            if ann in {"int": 0, "bool": 0, "float": 0, "str": 0}:
                return {"int": 3, "bool": True, "float": 1.0, "str": ""}[ann]
            if not static:
                pass
            elif self.batch:
                return 0.5  # an unmapped argument: any concrete value will do
            else:
                guess = _static_guess(p, structure(fn, name, self.tree, self.namespace))
                if guess is not None:
                    self.guessed.append(name)  # (a trace that runs the flagged line with it refutes nothing)
                    return guess
                raise CannotBuild(f"no value for static parameter `{name}` (give it a default, an annotation "
                                  "or call it with a literal in this file)")
        if name == "getkey" or ann == "getkey":  # equinox's test fixture: a function returning fresh keys
            return self.key_factory()
        if name in ("capfd", "capsys", "tmp_path", "monkeypatch", "request"):
            raise CannotBuild(f"`{name}` is a pytest fixture that verification does not provide")
        if name in ("rngs",) or ann == "Rngs":
            from flax import nnx  # noqa: PLC0415 - only code that asks for `rngs` needs flax

            return nnx.Rngs(0)
        if name in KEY_NAMES or ann in KEY_ANNOTATIONS:
            return self.key()
        if self.plain_call and ann is None:
            if name in ("shape", "dims") or name.endswith("_shape"):
                return (3,)
            if name in ("sizes", "shapes", "layer_sizes", "features_list"):
                return [3, 3, 2]
            if _count_name(name):
                return 3
        if lit:
            return choice
        if ann == "int":
            return self.array(integer=True, offset=2) if not self.plain_call else 3
        if ann == "bool":
            return self.array(boolean=True)
        if ann in ("str",):
            raise CannotBuild(f"no value for string parameter `{name}`")
        spec = structure(fn, name, self.tree, self.namespace)
        if ann in ("dict", "Dict", "Mapping", "list", "List", "tuple", "Tuple", "Sequence", None) or ann in ARRAY_NAMES:
            if spec is None and ann in ("dict", "Dict", "Mapping"):
                raise CannotBuild(f"could not build inputs for `{name}`: a dict whose keys the function does not "
                                  "name")
            dims = jaxtyping_dims(p.annotation)
            built = self.site_shapes.get(name, self.site_shapes.get(index))
            if dims is None and built is not None and (spec is None or spec[0] == "array" and (
                    len(spec) == 1 or (len(built) == spec[1] if spec[2] else len(built) >= spec[1]))):
                dims = built  # the shape a call in this file gives it (`step(jnp.zeros((4, 3)))`)
            if ann in ARRAY_NAMES and ann not in ("PyTree", "ArrayTree") and spec is not None and spec[0] != "array":
                spec = None  # the annotation says array: subscripts and unpacking are array operations
            if dims is not None and (spec is None or spec[0] == "array"):
                h = ann or ""
                return self.array(dims, integer=h in ("Int", "Integer", "UInt"), boolean=h == "Bool")
            return self.from_spec(spec, name)
        if ann == "float":
            return self.array()
        instance = self.instance_by_name(ann)
        if instance is None and p.annotation is not None:
            try:  # a dotted annotation (`nnx.Linear`), read in the function's own namespace
                cls = eval(compile(ast.Expression(p.annotation), "<annotation>", "eval"), {}, self.namespace)
            except Exception:  # noqa: BLE001 - an annotation that does not evaluate gives no instance
                cls = None
            if isinstance(cls, type):
                instance = build_instance(cls, self, depth=1)
        if instance is not None:
            return instance
        if spec is not None and spec[0] in ("obj", "dict", "seq"):
            return self.from_spec(spec, name)  # a configuration object: the fields the body reads
        raise CannotBuild(f"could not build inputs for `{name}`: annotation `{ann}` is not an array")

    def key_factory(self) -> Any:
        def getkey() -> Any:
            return self.key()

        return getkey

    def instance_by_name(self, ann: Optional[str]) -> Any:
        """An instance of a class named in an annotation, when the module defines or imports it."""
        cls = self.namespace.get(ann) if ann else None
        if isinstance(cls, type):
            return build_instance(cls, self, depth=1)
        return None

    def arguments(self, fn: ast.FunctionDef, statics: set[str], skip_first: bool = False
                  ) -> tuple[list[Any], dict[str, Any], str]:
        """(positional args, keyword args, a description) for a call of `fn`."""
        args = fn.args
        params = args.posonlyargs + args.args
        defaults: list[Optional[ast.expr]] = [None] * (len(params) - len(args.defaults)) + list(args.defaults)
        if skip_first:
            params, defaults = params[1:], defaults[1:]
        site = call_site_values(self.tree, fn.name, self.site_choice)
        self.site_shapes = call_site_shapes(self.tree, fn.name)
        self.omitted = [p.arg for p in args.kwonlyargs]
        self.guessed = []
        if args.kwarg is not None:  # `**options` is left empty: what callers put in it is not known here
            self.omitted.append("**" + args.kwarg.arg)
        values: list[Any] = []
        desc: list[str] = []
        required = len(params) - len([d for d in defaults if d is not None])
        for i, (p, default) in enumerate(zip(params, defaults)):
            static = p.arg in statics
            if default is not None and i >= required and not static and is_literal(default) \
                    and annotation_head(p.annotation) not in ARRAY_NAMES and p.arg not in site and i not in site:
                # Leave literal defaults (and everything after them) to the function.
                self.omitted += [q.arg for q in params[i:]]
                break
            value = self.value_for(fn, p, static, default, site, i)
            values.append(value)
            desc.append(f"{p.arg}={value!r}" if static else f"{p.arg}: {describe(value)}")
        kwargs: dict[str, Any] = {}
        for p, default in zip(args.kwonlyargs, args.kw_defaults):
            if default is not None:
                continue
            value = self.value_for(fn, p, p.arg in statics, None, site, p.arg)
            kwargs[p.arg] = value
            desc.append(f"{p.arg}: {describe(value)}")
        return values, kwargs, f"{fn.name}({', '.join(desc)})"


# ---- instances -----------------------------------------------------------------------------------


def _value_for_type(tp: Any, name: str, inputs: Inputs, depth: int) -> Any:
    """A value for a field or `__init__` parameter, from its (possibly string) annotation."""
    text = tp if isinstance(tp, str) else getattr(tp, "__forward_arg__", None) or getattr(tp, "__name__", None) \
        or repr(tp)
    head = text.split("[")[0].split("|")[0].strip().split(".")[-1]
    if name == "rngs" or head == "Rngs":
        from flax import nnx

        return nnx.Rngs(0)
    if name in KEY_NAMES or head in KEY_ANNOTATIONS:
        return inputs.key()
    if head == "int" or (head in ("", "Any") and _count_name(name)):
        return 3
    if head == "float":
        return 0.5
    if head == "bool":
        return False
    if head == "str":
        return "x"
    if head in ("tuple", "Tuple", "Sequence") and ("int" in text):
        return (3, 3)
    if head in ARRAY_NAMES or head in ("", "Any", "object"):
        return inputs.array()
    if isinstance(tp, type) and depth < 3:
        return build_instance(tp, inputs, depth + 1)
    raise CannotBuild(f"no value for `{name}: {text}`")


def _is_linen(cls: type) -> bool:
    return any(c.__module__.startswith("flax.linen") and c.__name__ == "Module" for c in cls.__mro__)


def build_instance(cls: type, inputs: Inputs, depth: int = 0, method: str = "") -> Any:
    """An instance of `cls`, built the way the class says it is built; CannotBuild with the reason."""
    import unittest

    if issubclass(cls, unittest.TestCase):
        inst = cls(method) if method and hasattr(cls, method) else cls()
        try:
            inst.setUp()
        except Exception:  # noqa: BLE001 - a failing setUp leaves what the test method needs unset
            pass
        return inst
    problems: list[str] = []
    if isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields"):  # NamedTuple
        hints = getattr(cls, "__annotations__", {})
        defaults = getattr(cls, "_field_defaults", {})
        return cls(**{f: _value_for_type(hints.get(f, ""), f, inputs, depth) for f in cls._fields if f not in defaults})
    init = cls.__dict__.get("__init__") or next((c.__dict__["__init__"] for c in cls.__mro__[1:]
                                                  if "__init__" in c.__dict__), None)
    generated = dataclasses.is_dataclass(cls) and (init is None or getattr(init, "__qualname__", "").endswith(
        "__create_fn__.<locals>.__init__") or "__create_fn__" in getattr(init, "__qualname__", ""))
    if dataclasses.is_dataclass(cls) and (generated or _is_linen(cls)):
        kwargs = {}
        for f in dataclasses.fields(cls):
            if not f.init or f.name in ("parent", "name"):
                continue
            if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
                continue
            kwargs[f.name] = _value_for_type(f.type, f.name, inputs, depth)
        try:
            return cls(**kwargs)
        except Exception as exc:  # noqa: BLE001
            problems.append(f"{cls.__name__}(**fields) raised {type(exc).__name__}")
    else:
        try:
            sig = inspect.signature(cls)
        except (TypeError, ValueError):
            sig = None
        if sig is not None:
            args: list[Any] = []
            kwargs = {}
            try:
                for p in sig.parameters.values():
                    if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.default is not p.empty:
                        continue
                    ann = p.annotation if p.annotation is not p.empty else ""
                    value = _value_for_type(ann, p.name, inputs, depth)
                    if p.kind == p.KEYWORD_ONLY:
                        kwargs[p.name] = value
                    else:
                        args.append(value)
                return cls(*args, **kwargs)
            except CannotBuild as exc:
                problems.append(str(exc))
            except Exception as exc:  # noqa: BLE001
                problems.append(f"{cls.__name__}(...) raised {type(exc).__name__}")
    if depth > 0:
        raise CannotBuild(f"could not construct a `{cls.__name__}`" + (f" ({problems[0]})" if problems else ""))
    return bare_instance(cls, inputs, method)


def bare_instance(cls: type, inputs: Inputs, method: str) -> Any:
    """`cls.__new__(cls)` with array values for the attributes `method` reads and the class lacks."""
    try:
        inst = object.__new__(cls) if cls.__new__ is object.__new__ else cls.__new__(cls)
    except Exception as exc:  # noqa: BLE001
        raise CannotBuild(f"could not construct a `{cls.__name__}`: {type(exc).__name__}") from None
    reads, specs = _self_reads(cls, method, inputs, set()) if method else (set(), {})
    for attr in sorted(reads):
        if hasattr(cls, attr):
            continue
        try:
            object.__setattr__(inst, attr, _attribute_value(specs.get(attr), attr, inputs))
        except Exception:  # noqa: BLE001 - slots or a frozen class: leave it unset
            pass
    return inst


def _self_reads(cls: type, method: str, inputs: Inputs, seen: set[str], depth: int = 0
                ) -> tuple[set[str], dict[str, Optional[Spec]]]:
    """The attributes of `self` that `method` reads, and how it uses them, with those of the methods of
    the class it calls on `self` (`pos = self.recover_pos(x)` reads what `recover_pos` reads)."""
    seen.add(method)
    fn = getattr(cls, method, None)
    code = getattr(inspect.unwrap(fn), "__code__", None) if fn is not None else None
    if code is None:
        return set(), {}
    try:
        src = ast.parse(inspect.cleandoc("\n" + inspect.getsource(code)))
    except (OSError, TypeError, SyntaxError):
        return set(), {}
    reads = {n.attr for n in ast.walk(src) if isinstance(n, ast.Attribute)
             and isinstance(n.value, ast.Name) and n.value.id == "self"}
    used = _Usage(src, None, inputs.namespace).of_name("self")
    specs: dict[str, Optional[Spec]] = dict(used[1]) if used is not None and used[0] == "obj" else {}
    if depth < 3:
        called = {n.func.attr for n in ast.walk(src) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                  and isinstance(n.func.value, ast.Name) and n.func.value.id == "self"}
        for name in sorted(called - seen):
            if not inspect.isfunction(inspect.getattr_static(cls, name, None)):
                continue  # (a staticmethod, a property, an attribute holding a callable: not read through self)
            more, how = _self_reads(cls, name, inputs, seen, depth + 1)
            reads |= more
            for attr, spec in how.items():
                specs[attr] = _merge(specs.get(attr), spec)
    return reads, specs


def _attribute_value(spec: Optional[Spec], attr: str, inputs: Inputs) -> Any:
    """A value for `self.attr` as the method reads it: a record for `self.process.s0`, an array of the
    rank it reads, else a small array; an object whose methods are called cannot be built: a stand-in
    says so where the method uses it (before the flagged line, so without a verdict)."""
    if spec is not None and (spec[0] in ("obj", "dict", "seq", *_SCALARS) or spec[0] == "array" and len(spec) > 1) \
            or _count_name(attr):
        try:
            return inputs.from_spec(spec, attr, scalars=True)
        except CannotBuild as exc:
            from .evidence import Unbuilt

            return Unbuilt(f"self.{attr}", str(exc).split(": ", 1)[-1])
    if spec is None:
        # Read only in arithmetic and comparisons (`self.map_x / 2`, `d < self.sight_range`): a scalar,
        # as such an attribute mostly is (a size, a rate); an array attribute is indexed or has its
        # array methods called.
        return inputs.array(())
    return inputs.array((3,))
