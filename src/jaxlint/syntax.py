"""libcst helpers without model knowledge: child iteration, dotted names, call arguments, literals."""
from __future__ import annotations

import contextlib
import dataclasses
import threading
from typing import Any, Callable, Iterator, Optional, Union

import libcst as cst


FuncNode = Union[cst.FunctionDef, cst.Lambda]

# ---------------------------------------------------------------------------------------------
# A fast child iterator: libcst's own visitors rebuild nodes as they go; reading dataclass fields
# directly, and skipping whitespace and punctuation, is several times cheaper.

_SKIP_FIELDS = frozenset(
    {
        "lpar", "rpar", "leading_lines", "lines_after_decorators", "comma", "equal", "colon", "dot",
        "semicolon", "header", "footer", "indent", "lbracket", "rbracket", "lbrace", "rbrace",
        "trailing_whitespace", "newline", "asynchronous", "posonly_ind", "operator", "star",
        "whitespace_after_star", "default_newline", "default_indent", "encoding", "arrow",
    }
)
_FIELDS: dict[type, tuple[str, ...]] = {}


def _fields_of(tp: type) -> tuple[str, ...]:
    names = tuple(
        f.name
        for f in dataclasses.fields(tp)
        if f.name not in _SKIP_FIELDS and not f.name.startswith("whitespace")
        and f.type not in (str, bool, int)  # plain values (Name.value, ...) never hold nodes
    )
    _FIELDS[tp] = names
    return names


# Per value type: 1 a node, 2 a sequence that may hold nodes, 0 neither. (isinstance against libcst's
# abstract base classes costs a Python-level ABC check per call; a dict lookup does not.)
_KIND: dict[type, int] = {}


def _kind_of(tp: type) -> int:
    kind = 1 if issubclass(tp, cst.CSTNode) else 2 if issubclass(tp, (tuple, list)) else 0
    _KIND[tp] = kind
    return kind


def iter_children(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    return iter(children(node))


def children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The child nodes of `node` that can hold names and expressions (whitespace and punctuation skipped)."""
    out: list[cst.CSTNode] = []
    kinds = _KIND
    names = _FIELDS.get(type(node))
    if names is None:  # (an empty tuple, as for `Name`, is a cached answer too)
        names = _fields_of(type(node))
    for name in names:
        value = getattr(node, name)
        tp = type(value)
        kind = kinds.get(tp)
        if kind is None:
            kind = _kind_of(tp)
        if kind == 1:
            out.append(value)
        elif kind == 2:
            for item in value:
                tp = type(item)
                kind = kinds.get(tp)
                if kind is None:
                    kind = _kind_of(tp)
                if kind == 1:
                    out.append(item)
    return out


# libcst checks every node as it is built (`CSTNode.__post_init__` calls `_validate`): a fifth of a parse,
# spent on trees its parser built from source, which are valid by construction (libcst's own comment there
# says as much). The analysis parses without those checks; nodes built elsewhere (fixes, edits) are checked,
# except while a parse in another thread has them switched off.
_CHECK_NODE = cst.CSTNode.__post_init__
_UNCHECKED_LOCK = threading.Lock()
_UNCHECKED = {"parses": 0}


def _no_check(self: cst.CSTNode) -> None:
    pass


def _parse_unchecked(source: bytes) -> cst.Module:
    """`cst.parse_module(source)`, without validating each node the parser builds (the same tree)."""
    with _UNCHECKED_LOCK:
        _UNCHECKED["parses"] += 1
        cst.CSTNode.__post_init__ = _no_check  # type: ignore[method-assign]
    try:
        return cst.parse_module(source)
    finally:
        with _UNCHECKED_LOCK:
            _UNCHECKED["parses"] -= 1
            if not _UNCHECKED["parses"]:
                cst.CSTNode.__post_init__ = _CHECK_NODE  # type: ignore[method-assign]


# Parsed modules shared while `sharing_parses()` is active (the project pass: the files it reads for their
# summaries and the files it analyses again are often the same, and parsing is most of the cost). The
# analysis runs on threads of its own (deep stacks), so the table is the process's, kept while any block
# is open (the editor server may run several lints at once).
_SHARED_LOCK = threading.Lock()
_SHARED: dict[str, Any] = {"open": 0, "modules": None}
_SHARED_MAX = 64


@contextlib.contextmanager
def sharing_parses() -> Iterator[None]:
    """Within the block, `parse_shared` parses each distinct source once (at most 64 kept)."""
    with _SHARED_LOCK:
        if not _SHARED["open"]:
            _SHARED["modules"] = {}
        _SHARED["open"] += 1
    try:
        yield
    finally:
        with _SHARED_LOCK:
            _SHARED["open"] -= 1
            if not _SHARED["open"]:
                _SHARED["modules"] = None


def parse_shared(source: bytes) -> cst.Module:
    """`cst.parse_module(source)` (see `_parse_unchecked`), or the module already parsed from the same bytes
    inside `sharing_parses()` (libcst's trees are immutable, so one can serve every reader)."""
    shared: Optional[dict[bytes, cst.Module]] = _SHARED["modules"]
    if shared is None:
        return _parse_unchecked(source)
    module = shared.get(source)
    if module is None:
        module = _parse_unchecked(source)
        with _SHARED_LOCK:
            if len(shared) >= _SHARED_MAX:
                del shared[next(iter(shared))]  # (the oldest)
            shared[source] = module
    return module


_NAME, _ATTRIBUTE = cst.Name, cst.Attribute


def dotted(expr: cst.BaseExpression) -> Optional[str]:
    """`a.b.c` for a Name/Attribute chain, else None."""
    # (exact type tests: libcst's node classes check `isinstance` through their ABC metaclass, which is
    # slow when it fails, and this runs for nearly every node the model resolves)
    tp = type(expr)
    if tp is _NAME:
        return expr.value  # type: ignore[attr-defined]
    if tp is not _ATTRIBUTE:
        return None
    parts: list[str] = []
    while tp is _ATTRIBUTE:
        parts.append(expr.attr.value)  # type: ignore[attr-defined]
        expr = expr.value  # type: ignore[attr-defined]
        tp = type(expr)
    if tp is _NAME:
        parts.append(expr.value)  # type: ignore[attr-defined]
        return ".".join(reversed(parts))
    return None


def _module_name(node: Union[cst.Attribute, cst.Name]) -> str:
    return dotted(node) or ""


def annotation_name(ann: Optional[cst.Annotation]) -> Optional[str]:
    """The head name of an annotation: `jax.Array` -> Array, `Float[Array, "n"]` -> Float, `"int"` -> int."""
    if ann is None:
        return None
    expr = ann.annotation
    if isinstance(expr, cst.SimpleString):
        return expr.evaluated_value.split("[")[0].split(".")[-1].strip() if isinstance(expr.evaluated_value, str) else None
    if isinstance(expr, cst.Subscript):
        head = dotted(expr.value)
        if head and head.split(".")[-1] == "Optional" and expr.slice:
            inner = expr.slice[0].slice
            if isinstance(inner, cst.Index):
                return annotation_name(cst.Annotation(inner.value))
        expr = expr.value
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.BitOr):
        # `X | None` is X; a union of different kinds (`Array | list[Array]`) says nothing certain
        heads = {annotation_name(cst.Annotation(side)) for side in (expr.left, expr.right)
                 if not _is_const(side, "None")}
        return heads.pop() if len(heads) == 1 else None
    name = dotted(expr)
    return name.split(".")[-1] if name else None


def _is_const(expr: Optional[cst.BaseExpression], value: str) -> bool:
    return isinstance(expr, cst.Name) and expr.value == value


def _returns(node: cst.CSTNode) -> Iterator[cst.Return]:
    """Return statements of a function body, not of nested functions or classes."""
    for child in iter_children(node):
        tp = type(child)  # (exact type tests: a failed `isinstance` on libcst's node classes is slow)
        if tp is cst.Return:
            yield child  # type: ignore[misc]
        elif tp is not cst.FunctionDef and tp is not cst.ClassDef and tp is not cst.Lambda:
            yield from _returns(child)


def _int_leaf(expr: cst.BaseExpression) -> Optional[int]:
    if isinstance(expr, cst.Integer):
        return int(expr.value, 0)
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus) \
            and isinstance(expr.expression, cst.Integer):
        return -int(expr.expression.value, 0)
    return None


def _str_leaf(expr: cst.BaseExpression) -> Optional[str]:
    if isinstance(expr, cst.SimpleString) and isinstance(expr.evaluated_value, str):
        return expr.evaluated_value
    return None


def _literal_values(expr: cst.BaseExpression, leaf: "Callable[[cst.BaseExpression], Any]") -> Optional[list]:
    """`1`, `(1, 2)`, `["a", "b"]`, `range(5, 10)` -> their values; None when any element is not such a
    literal."""
    value = leaf(expr)
    if value is not None:
        return [value]
    if leaf is _int_leaf and isinstance(expr, cst.Call) and dotted(expr.func) == "range" \
            and 1 <= len(expr.args) <= 3 and all(a.keyword is None and not a.star for a in expr.args):
        bounds = [_int_leaf(a.value) for a in expr.args]  # `nondiff_argnums=range(5, 10)`
        if all(b is not None for b in bounds):
            return list(range(*bounds))  # type: ignore[arg-type]
        return None
    if isinstance(expr, (cst.Tuple, cst.List, cst.Set)):
        out: list = []
        for el in expr.elements:
            vals = _literal_values(el.value, leaf)
            if vals is None:
                return None
            out.extend(vals)
        return out
    return None


def _is_literal(expr: Optional[cst.BaseExpression]) -> bool:
    if expr is None:
        return False
    if isinstance(expr, (cst.Integer, cst.Float, cst.SimpleString, cst.ConcatenatedString)):
        return True
    if isinstance(expr, cst.Name):
        return expr.value in ("True", "False", "None")
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        return _is_literal(expr.expression)
    return False


def literal_truth(expr: Optional[cst.BaseExpression]) -> Optional[bool]:
    """Truthiness of a literal (`True`, `0`, `"jax"`, `None`, `()`); None when it is not a literal."""
    if isinstance(expr, cst.Name) and expr.value in ("True", "False", "None"):
        return expr.value == "True"
    if isinstance(expr, cst.Integer):
        return expr.evaluated_value != 0
    if isinstance(expr, cst.Float):
        return expr.evaluated_value != 0.0
    if isinstance(expr, cst.SimpleString) and isinstance(expr.evaluated_value, (str, bytes)):
        return bool(expr.evaluated_value)
    if isinstance(expr, (cst.Tuple, cst.List)) and not expr.elements:
        return False
    return None


def literal_ident(expr: Optional[cst.BaseExpression]) -> Optional[str]:
    """What an identity test sees of a literal: "True", "False" or "None" for those objects, "str:" and the
    text for a string, "value" for any other literal (a number, a container display: never one of them);
    None otherwise."""
    if isinstance(expr, cst.Name) and expr.value in ("True", "False", "None"):
        return expr.value
    if isinstance(expr, cst.SimpleString) and isinstance(expr.evaluated_value, str):
        return "str:" + expr.evaluated_value  # (a string, for equality tests: `if loop == "lax":`)
    if _is_literal(expr) or isinstance(expr, (cst.Tuple, cst.List, cst.Dict, cst.Set, cst.FormattedString)):
        return "value"
    return None


def _arg(call: cst.Call, pos: int, kw: str) -> Optional[cst.BaseExpression]:
    i = 0
    for a in call.args:
        if a.keyword is not None:
            if a.keyword.value == kw:
                return a.value
            continue
        if a.star:
            return None
        if i == pos:
            return a.value
        i += 1
    return None


def _target_names(target: cst.BaseExpression) -> Iterator[str]:
    if isinstance(target, cst.Name):
        yield target.value
    elif isinstance(target, (cst.Tuple, cst.List)):
        for el in target.elements:
            yield from _target_names(el.value)
    elif isinstance(target, cst.StarredElement):
        yield from _target_names(target.value)


def _flatten(value: Union[bool, list]) -> Iterator[bool]:
    if isinstance(value, list):
        for v in value:
            yield from _flatten(v)
    else:
        yield value


def container_path(expr: cst.BaseExpression) -> Optional[str]:
    """`d`, `cfg.items_`, `batch["inputs"]`: a name for a container reached by names, attributes and string
    keys (so `for k in batch["inputs"]: batch["inputs"][k]` can be recognised), else None."""
    if isinstance(expr, cst.Subscript):
        if len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index) \
                and isinstance(expr.slice[0].slice.value, cst.SimpleString):
            base = container_path(expr.value)
            return f"{base}[{expr.slice[0].slice.value.value}]" if base is not None else None
        return None
    return dotted(expr)


def code_of(node: cst.CSTNode) -> str:
    """The code a node was written as."""
    return cst.Module([]).code_for_node(node)


def contains(node: cst.CSTNode, target: cst.CSTNode) -> bool:
    """Whether `target` is `node` or one of its descendants."""
    stack: list[cst.CSTNode] = [node]
    while stack:
        n = stack.pop()
        if n is target:
            return True
        stack.extend(iter_children(n))
    return False


def descendants(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The node and every node under it, in source order (a parent before its children)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(children(n)))


def plain_annotation(ann: Optional[cst.BaseExpression]) -> Optional[cst.BaseExpression]:
    """An annotation as an expression, unquoted (`"Model"`) and without its optionality (`Optional[X]`,
    `X | None`, `None | X` are X); None when a quoted one does not parse."""
    if isinstance(ann, cst.SimpleString):
        text = ann.evaluated_value
        if not isinstance(text, str):
            return None
        try:
            ann = cst.parse_expression(text)
        except cst.ParserSyntaxError:
            return None
    if isinstance(ann, cst.BinaryOperation) and isinstance(ann.operator, cst.BitOr):
        return plain_annotation(ann.right if _is_const(ann.left, "None") else ann.left)
    if isinstance(ann, cst.Subscript) and (dotted(ann.value) or "").split(".")[-1] == "Optional" \
            and len(ann.slice) == 1 and isinstance(ann.slice[0].slice, cst.Index):
        return plain_annotation(ann.slice[0].slice.value)
    return ann


def only_called(node: Optional[cst.CSTNode], name: str) -> bool:
    """Whether every read of `name` in a body (nested functions included) is the callee of a call."""
    if node is None:
        return False
    reads, calls = name_counts(node)
    n = calls.get(name, 0)
    return n > 0 and reads.get(name, 0) == n + 1  # the one binding, and each use a call


# The last few nodes counted: a module's body and its functions are asked about name after name.
_COUNTS: dict[int, tuple[cst.CSTNode, tuple[dict[str, int], dict[str, int]]]] = {}


def name_counts(node: cst.CSTNode) -> tuple[dict[str, int], dict[str, int]]:
    """How often each name occurs in a node (every `Name`, attributes' and bindings' too), and how often
    each is the bare callee of a call (`f(...)`)."""
    hit = _COUNTS.get(id(node))
    if hit is not None and hit[0] is node:
        return hit[1]
    reads: dict[str, int] = {}
    calls: dict[str, int] = {}
    stack = [node]
    while stack:
        n = stack.pop()
        tp = type(n)
        if tp is cst.Name:
            reads[n.value] = reads.get(n.value, 0) + 1
            continue
        if tp is cst.Call and type(n.func) is cst.Name:
            calls[n.func.value] = calls.get(n.func.value, 0) + 1
        stack.extend(children(n))
    if len(_COUNTS) >= 32:
        _COUNTS.clear()
    _COUNTS[id(node)] = (node, (reads, calls))
    return reads, calls


def args_at(call: cst.Call, positions: tuple[int, ...], keywords: tuple[str, ...]) -> list[cst.BaseExpression]:
    """The argument values a call passes at these positions or keywords (up to a `*args`)."""
    out: list[cst.BaseExpression] = []
    pos = 0
    for a in call.args:
        if a.star:
            break
        if a.keyword is not None:
            if a.keyword.value in keywords:
                out.append(a.value)
            continue
        if pos in positions:
            out.append(a.value)
        pos += 1
    return out


SCALAR_TYPES = frozenset({"int", "float", "bool", "str", "complex"})
# Annotations of values a function uses as Python values, never as array data (a float may be either).
DECLARED_PYTHON = frozenset({"int", "bool", "str"})


def scalar_annotation(ann: cst.BaseExpression, kinds: frozenset[str] = SCALAR_TYPES,
                      rebound: Callable[[str], bool] = lambda name: False) -> bool:
    """`int`, `str`, `Optional[bool]`, `float | None`, `tuple[int, ...]`, `Literal["a", "b"]`: a Python
    scalar of `kinds` or a tuple of them (`rebound` says which type names the module rebinds)."""
    if isinstance(ann, cst.BinaryOperation) and isinstance(ann.operator, cst.BitOr) \
            or isinstance(ann, cst.Subscript) and (dotted(ann.value) or "").rpartition(".")[2] == "Union":
        # `int | None`, `Union[Tuple, int]`: each member a scalar, or a bare `tuple` beside one (an int
        # or a tuple of them: `in_axes`, `axis`)
        members = union_members(ann)
        scalars = [m for m in members if scalar_annotation(m, kinds, rebound)]
        return bool(scalars) and all(m in scalars or isinstance(m, cst.Name) and m.value in ("tuple", "Tuple")
                                     and not rebound(m.value) for m in members)
    if isinstance(ann, cst.Name):
        return ann.value in kinds and not rebound(ann.value)
    if isinstance(ann, cst.Subscript):
        head = (dotted(ann.value) or "").rpartition(".")[2]
        args = [el.slice.value for el in ann.slice if isinstance(el.slice, cst.Index)]
        if len(args) != len(ann.slice) or not args:
            return False
        if head == "Literal":
            return all(isinstance(a, (cst.SimpleString, cst.Integer)) or _is_const(a, "True") or _is_const(a, "False")
                       for a in args)
        if head == "Optional":
            return scalar_annotation(args[0], kinds, rebound)
        if head in ("tuple", "Tuple"):
            rest = [a for a in args if not isinstance(a, cst.Ellipsis) and not _is_const(a, "None")]
            return bool(rest) and all(scalar_annotation(a, kinds, rebound) for a in rest)
    return False


def union_members(ann: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The classes of an annotation (`A | B | None`, `Union[A, B]`, `Optional[A]`), without None."""
    if isinstance(ann, cst.BinaryOperation) and isinstance(ann.operator, cst.BitOr):
        return union_members(ann.left) + union_members(ann.right)
    if isinstance(ann, cst.Subscript) and (dotted(ann.value) or "").rpartition(".")[2] in ("Union", "Optional"):
        return [m for el in ann.slice if isinstance(el.slice, cst.Index) for m in union_members(el.slice.value)]
    if isinstance(ann, cst.Name) and ann.value == "None":
        return []
    return [ann]
