"""The module model: names, scopes, which functions JAX traces and which values are traced, built once per file.

One walk over the libcst tree collects scopes, imports, bindings, calls and the nodes rules want; then
pure bookkeeping (no further tree walks) decides which functions are traced, with which parameters
static, following transforms, control-flow bodies and helper calls to a fixed point. Rules only ask.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional, Union

import libcst as cst

from .findings import TraceTarget
from .jaxapi import (
    ARRAY_ANNOTATIONS,
    ARRAY_ATTRS,
    CALLBACKS,
    CONTAINER_ANNOTATIONS,
    LAX_BODIES,
    NON_ARRAY_ANNOTATIONS,
    STAGING_MODULES,
    STATIC_ATTRS,
    STATIC_CALLS,
    TRANSFORMS,
    TREE_MAPS,
    Transform,
)

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
    for name in _FIELDS.get(type(node)) or _fields_of(type(node)):
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


def dotted(expr: cst.BaseExpression) -> Optional[str]:
    """`a.b.c` for a Name/Attribute chain, else None."""
    parts: list[str] = []
    while isinstance(expr, cst.Attribute):
        parts.append(expr.attr.value)
        expr = expr.value
    if isinstance(expr, cst.Name):
        parts.append(expr.value)
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
    if isinstance(expr, cst.BinaryOperation):  # X | None
        return annotation_name(cst.Annotation(expr.left))
    name = dotted(expr)
    return name.split(".")[-1] if name else None


# ---------------------------------------------------------------------------------------------
# Scopes


@dataclass
class Param:
    name: str
    index: Optional[int]  # position among positional parameters, None for keyword-only/star
    annotation: Optional[str]
    has_default: bool
    default: Optional[cst.BaseExpression]
    star: str = ""  # "", "*" or "**"


@dataclass(eq=False)
class Scope:
    kind: str  # module | class | function
    name: str
    qualname: str
    parent: Optional["Scope"]
    node: Optional[cst.CSTNode] = None
    imports: dict[str, str] = field(default_factory=dict)
    defs: dict[str, "FunctionInfo"] = field(default_factory=dict)
    classes: dict[str, "ClassInfo"] = field(default_factory=dict)
    # name -> value expressions assigned to it (None where the value is not a plain expression)
    assigned: dict[str, list[Optional[cst.BaseExpression]]] = field(default_factory=dict)
    declared_global: set[str] = field(default_factory=set)
    declared_nonlocal: set[str] = field(default_factory=set)
    # name -> source-order stamps of its bindings in this scope (for "rebound after the def")
    bind_order: dict[str, list[int]] = field(default_factory=dict)
    loop_bound: set[str] = field(default_factory=set)  # names rebound by a loop in this scope
    order: int = 0  # source-order stamp of the scope's definition

    def binds(self, name: str) -> bool:
        return name in self.assigned or name in self.defs or name in self.classes or name in self.imports

    def function_scope(self) -> Optional["FunctionInfo"]:
        s: Optional[Scope] = self
        while s is not None and not isinstance(s, FunctionInfo):
            s = s.parent
        return s


@dataclass(eq=False)
class ClassInfo(Scope):
    bases: list[str] = field(default_factory=list)
    decorators: list[str] = field(default_factory=list)


@dataclass(eq=False)
class FunctionInfo(Scope):
    params: list[Param] = field(default_factory=list)
    is_method: bool = False  # first parameter is self/cls
    cls: Optional[ClassInfo] = None
    loop_at_def: Optional["LoopInfo"] = None
    decorators: list[cst.Decorator] = field(default_factory=list)
    # Binding events in this function body: (target, value, how) — how is "=", "aug", "for", "with", "walrus".
    events: list[tuple[cst.BaseExpression, Optional[cst.BaseExpression], str]] = field(default_factory=list)
    calls: list[cst.Call] = field(default_factory=list)
    # Trace state, filled in by the model.
    traced: bool = False
    abstract: bool = False
    cached: bool = False
    transforms: set[str] = field(default_factory=set)
    traced_params: set[str] = field(default_factory=set)
    # Parameters that receive a whole pytree JAX flattened (a transform's own arguments, or such a
    # value passed straight on): their attributes are leaves, hence traced. Other traced objects may
    # be mixed Python objects whose attributes are configuration.
    pytree_params: set[str] = field(default_factory=set)
    pytree_names: set[str] = field(default_factory=set)
    traced_names: set[str] = field(default_factory=set)
    container_names: set[str] = field(default_factory=set)
    target: Optional[TraceTarget] = None
    top: Optional[int] = None  # index of the enclosing top-level statement

    @property
    def local_names(self) -> set[str]:
        names = {p.name for p in self.params}
        names.update(self.assigned, self.defs, self.classes, self.imports)
        return names - self.declared_global - self.declared_nonlocal

    def param(self, name: str) -> Optional[Param]:
        for p in self.params:
            if p.name == name:
                return p
        return None


@dataclass(eq=False)
class LoopInfo:
    node: cst.CSTNode  # For, While, or a comprehension
    parent: Optional["LoopInfo"]
    scope: Scope
    # names bound inside the loop body (assignments), with their values
    bound: dict[str, list[Optional[cst.BaseExpression]]] = field(default_factory=dict)

    def encloses(self, other: Optional["LoopInfo"]) -> bool:
        while other is not None:
            if other is self:
                return True
            other = other.parent
        return False


@dataclass
class Record:
    """A node some rule wants to see, with where it sits."""

    node: cst.CSTNode
    scope: Scope
    loop: Optional[LoopInfo]
    guards: frozenset[str] = frozenset()  # names proven Python scalars by enclosing `if isinstance(...)`
    top: Optional[int] = None  # index of the enclosing top-level statement (None: the module itself)


@dataclass
class CallableRef:
    """A callable expression resolved to a function of this module."""

    fn: FunctionInfo
    offset: int = 0  # leading parameters already bound (self of a bound method, partial's positional args)
    bound_names: frozenset[str] = frozenset()  # parameters bound by partial keywords


_BOOL_FUNCS = frozenset({
    "isnan", "isinf", "isfinite", "isposinf", "isneginf", "logical_and", "logical_or", "logical_not", "logical_xor",
    "less", "less_equal", "greater", "greater_equal", "equal", "not_equal", "isclose", "signbit", "isin",
})
_PY_SCALARS = frozenset({"int", "float", "bool", "str", "complex", "tuple", "list", "dict", "type(None)"})
_STATIC_NAME = re.compile(r"(^|_)(size|sizes|shape|shapes|ndim|len|length|dtype|count)(_|$)|^(is|has)_", re.I)
_SHAPE_NAME = re.compile(r"(^|_)(shape|shapes|ndim|dtype|dtypes)(_|$)", re.I)
_DICT_METHODS = frozenset({"items", "keys", "values", "get"})
_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


class ModuleModel:
    """Everything rules may ask about one module."""

    def __init__(self, module: cst.Module, path: str = "<string>", wanted: frozenset[type] = frozenset(),
                 extra_transforms: Optional[dict[str, Transform]] = None,
                 external: Optional[list["ExternalCall"]] = None) -> None:
        self.module = module
        self.path = path
        self.transforms = dict(TRANSFORMS)
        if extra_transforms:
            self.transforms.update(extra_transforms)
        self.root = Scope("module", "<module>", "", None, module)
        self.functions: list[FunctionInfo] = []
        self.fn_of_node: dict[int, FunctionInfo] = {}
        self.records: list[Record] = []
        self.test_nodes: set[int] = set()
        self.elif_nodes: set[int] = set()
        self.nested_boolops: set[int] = set()
        self.all_calls: list[tuple[cst.Call, Scope, Optional[LoopInfo]]] = []
        self.external_calls: dict[int, ExternalCall] = {}  # by id of the call node
        self._wanted = wanted
        self._aliasing: set[str] = set()
        _Builder(self).build()
        _Tracer(self).run(external or [])

    # ---- names ------------------------------------------------------------------------------

    def resolve(self, expr: cst.BaseExpression, scope: Scope) -> Optional[str]:
        """The qualified name an expression refers to through imports (`jnp.sum` -> `jax.numpy.sum`).

        Unbound names resolve to `builtins.<name>`; names bound locally to anything but an import
        resolve to None.
        """
        name = dotted(expr)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        qual = self._resolve_head(head, scope)
        if qual is None:
            return None
        return f"{qual}.{rest}" if rest else qual

    def _resolve_head(self, head: str, scope: Scope) -> Optional[str]:
        s: Optional[Scope] = scope
        first = True
        while s is not None:
            if isinstance(s, ClassInfo) and not first:
                s = s.parent  # class bodies are not visible from methods
                continue
            first = False
            if isinstance(s, FunctionInfo) and (head in s.declared_global):
                s = self.root
                continue
            if head in s.imports and head not in s.defs and head not in s.classes:
                return s.imports[head]
            if s.binds(head) or (isinstance(s, FunctionInfo) and s.param(head) is not None):
                if s is self.root and head in s.assigned and len(s.assigned[head]) == 1:
                    value = s.assigned[head][0]
                    if value is not None and dotted(value) and head not in self._aliasing:
                        self._aliasing.add(head)  # module-level alias: jit = jax.jit
                        try:
                            return self.resolve(value, self.root)
                        finally:
                            self._aliasing.discard(head)
                return None
            s = s.parent
        return f"builtins.{head}"

    def lookup_function(self, name: str, scope: Scope) -> Optional[FunctionInfo]:
        s: Optional[Scope] = scope
        first = True
        while s is not None:
            if isinstance(s, ClassInfo) and not first:
                s = s.parent
                continue
            first = False
            if name in s.defs:
                return s.defs[name]
            if s.binds(name) or (isinstance(s, FunctionInfo) and s.param(name) is not None):
                return None
            s = s.parent
        return None

    def resolve_callable(self, expr: cst.BaseExpression, scope: Scope) -> Optional[CallableRef]:
        """Resolve an expression used as a callable to a def or lambda of this module."""
        if isinstance(expr, cst.Lambda):
            fn = self.fn_of_node.get(id(expr))
            return CallableRef(fn) if fn else None
        if isinstance(expr, cst.Name):
            fn = self.lookup_function(expr.value, scope)
            return CallableRef(fn) if fn else None
        if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name):
            owner = expr.value.value
            fscope = scope.function_scope()
            if fscope is not None and fscope.cls is not None and fscope.is_method and fscope.params \
                    and fscope.params[0].name == owner:
                fn = fscope.cls.defs.get(expr.attr.value)
                if fn is not None:
                    return CallableRef(fn, offset=1 if fn.is_method else 0)
            cls = self.root.classes.get(owner)
            if cls is not None:
                fn = cls.defs.get(expr.attr.value)
                if fn is not None:
                    return CallableRef(fn)
            return None
        if isinstance(expr, cst.Call) and self.resolve(expr.func, scope) == "functools.partial" and expr.args:
            inner = self.resolve_callable(expr.args[0].value, scope)
            if inner is None:
                return None
            positional = sum(1 for a in expr.args[1:] if a.keyword is None and not a.star)
            keywords = frozenset(a.keyword.value for a in expr.args[1:] if a.keyword is not None)
            return CallableRef(inner.fn, inner.offset + positional, inner.bound_names | keywords)
        return None

    def transform_of(self, expr: cst.BaseExpression, scope: Scope) -> Optional[tuple[Transform, dict[str, cst.BaseExpression]]]:
        """If `expr` names a JAX transform (`jax.jit`, `partial(jax.jit, static_argnums=1)`,
        `jax.jit(static_argnames=...)`), the transform and its keyword options."""
        qual = self.resolve(expr, scope)
        if qual is not None:
            t = self.transforms.get(qual)
            return (t, {}) if t else None
        if isinstance(expr, cst.Call):
            fq = self.resolve(expr.func, scope)
            if fq == "functools.partial" and expr.args:
                inner = self.transform_of(expr.args[0].value, scope)
                if inner is not None and all(a.keyword is not None for a in expr.args[1:]):
                    opts = dict(inner[1])
                    opts.update({a.keyword.value: a.value for a in expr.args[1:] if a.keyword is not None})
                    return inner[0], opts
                return None
            if fq is not None and fq in self.transforms and all(a.keyword is not None for a in expr.args):
                return self.transforms[fq], {a.keyword.value: a.value for a in expr.args if a.keyword is not None}
        return None

    # ---- questions rules ask ----------------------------------------------------------------

    def traced_function(self, scope: Scope) -> Optional[FunctionInfo]:
        """The innermost function around a node, if JAX traces it."""
        fn = scope.function_scope()
        return fn if fn is not None and fn.traced else None

    def is_traced(self, expr: cst.BaseExpression, scope: Scope, guards: frozenset[str] = frozenset()) -> bool:
        values = self.values(scope, guards)
        return values is not None and values.traced(expr)

    def is_test(self, node: cst.CSTNode) -> bool:
        """Whether the node is (part of the boolean skeleton of) an if/while/assert/ternary test."""
        return id(node) in self.test_nodes

    def truth_traced(self, expr: cst.BaseExpression, scope: Scope, guards: frozenset[str] = frozenset()) -> bool:
        """Whether a truth test of `expr` (if/while/and/or/not) would call bool() on a tracer."""
        values = self.values(scope, guards)
        return values is not None and values.truth_traced(expr)

    def local_name_for(self, module: str) -> Optional[str]:
        """The module-level name bound to `import module` (as written: `jax`, or `J` for `import jax as J`)."""
        for local, qual in self.root.imports.items():
            if qual == module:
                return local
        return None

    def values(self, scope: Scope, guards: frozenset[str] = frozenset()) -> Optional["Values"]:
        """The traced-value oracle of the traced function around `scope`, or None outside traced code."""
        fn = scope.function_scope()
        if fn is None or not fn.traced:
            return None
        values = Values(self, fn)
        values._static_override = set(guards)
        return values

    def is_local(self, name: str, scope: Scope) -> bool:
        fn = scope.function_scope()
        return fn is not None and name in fn.local_names

    def owner_of(self, name: str, scope: Scope) -> Optional[Scope]:
        """The scope that binds `name` as seen from `scope` (module scope for globals), or None if unbound."""
        fn = scope.function_scope()
        if fn is not None and name in fn.declared_global:
            return self.root if self.root.binds(name) else None
        s: Optional[Scope] = fn if fn is not None else scope
        while s is not None:
            if isinstance(s, ClassInfo):
                s = s.parent
                continue
            if s.binds(name) or (isinstance(s, FunctionInfo) and s.param(name) is not None):
                if isinstance(s, FunctionInfo) and name in s.declared_nonlocal:
                    s = s.parent
                    continue
                return s
            s = s.parent
        return None


# ---------------------------------------------------------------------------------------------
# Pass 1: one walk that collects scopes, imports, bindings, calls and the records rules want.


class _Builder:
    def __init__(self, model: ModuleModel) -> None:
        self.m = model
        self.guards: frozenset[str] = frozenset()
        self.counter = 0
        self.top: Optional[int] = None

    def build(self) -> None:
        if cst.Module in self.m._wanted:
            self.m.records.append(Record(self.m.module, self.m.root, None))
        for i, stmt in enumerate(self.m.module.body):
            self.top = i
            self.walk(stmt, self.m.root, None)

    # The walk is recursive on purpose: scopes and loops are passed down explicitly, so no
    # enter/leave state can go stale on nested definitions.
    def walk(self, node: cst.CSTNode, scope: Scope, loop: Optional[LoopInfo]) -> None:
        self.counter += 1
        tp = type(node)
        if tp in self.m._wanted:
            self.m.records.append(Record(node, scope, loop, self.guards, self.top))
        handler = _HANDLERS.get(tp)
        if handler is not None:
            handler(self, node, scope, loop)
            return
        for child in children(node):
            self.walk(child, scope, loop)

    # ---- definitions ------------------------------------------------------------------------

    def _params(self, params: cst.Parameters) -> list[Param]:
        out: list[Param] = []
        idx = 0
        for p in list(params.posonly_params) + list(params.params):
            out.append(Param(p.name.value, idx, annotation_name(p.annotation), p.default is not None, p.default))
            idx += 1
        if isinstance(params.star_arg, cst.Param):
            out.append(Param(params.star_arg.name.value, None, None, False, None, "*"))
        for p in params.kwonly_params:
            out.append(Param(p.name.value, None, annotation_name(p.annotation), p.default is not None, p.default))
        if params.star_kwarg is not None:
            out.append(Param(params.star_kwarg.name.value, None, None, False, None, "**"))
        return out

    def _new_function(self, node: FuncNode, name: str, scope: Scope, loop: Optional[LoopInfo]) -> FunctionInfo:
        qual = name if scope is self.m.root else f"{scope.qualname}.{name}"
        fn = FunctionInfo("function", name, qual, scope, node)
        fn.params = self._params(node.params)
        fn.loop_at_def = loop
        fn.order = self.counter
        fn.top = self.top
        if isinstance(scope, ClassInfo) and isinstance(node, cst.FunctionDef):
            fn.cls = scope
            decos = {dotted(d.decorator) for d in node.decorators}
            fn.is_method = "staticmethod" not in decos and bool(fn.params) and fn.params[0].index == 0
        self.m.functions.append(fn)
        self.m.fn_of_node[id(node)] = fn
        return fn

    def on_functiondef(self, node: cst.FunctionDef, scope: Scope, loop: Optional[LoopInfo]) -> None:
        saved, self.guards = self.guards, frozenset()
        try:
            self._on_functiondef(node, scope, loop)
        finally:
            self.guards = saved

    def _on_functiondef(self, node: cst.FunctionDef, scope: Scope, loop: Optional[LoopInfo]) -> None:
        fn = self._new_function(node, node.name.value, scope, loop)
        fn.decorators = list(node.decorators)
        scope.defs[node.name.value] = fn
        scope.assigned.pop(node.name.value, None)
        if loop is not None:
            loop.bound.setdefault(node.name.value, []).append(None)
        for d in node.decorators:
            self.walk(d, scope, loop)
        self._walk_param_parts(node.params, scope, loop)
        if node.returns is not None:
            self.walk(node.returns, scope, loop)
        self.walk(node.body, fn, None)

    def _walk_param_parts(self, params: cst.Parameters, scope: Scope, loop: Optional[LoopInfo]) -> None:
        allp = list(params.posonly_params) + list(params.params) + list(params.kwonly_params)
        for extra in (params.star_arg, params.star_kwarg):
            if isinstance(extra, cst.Param):
                allp.append(extra)
        for p in allp:
            if p.default is not None:
                self.walk(p.default, scope, loop)
            if p.annotation is not None:
                self.walk(p.annotation, scope, loop)

    def on_lambda(self, node: cst.Lambda, scope: Scope, loop: Optional[LoopInfo]) -> None:
        fn = self._new_function(node, "<lambda>", scope, loop)
        self._walk_param_parts(node.params, scope, loop)
        self.walk(node.body, fn, None)

    def on_classdef(self, node: cst.ClassDef, scope: Scope, loop: Optional[LoopInfo]) -> None:
        qual = node.name.value if scope is self.m.root else f"{scope.qualname}.{node.name.value}"
        cls = ClassInfo("class", node.name.value, qual, scope, node)
        cls.bases = [self.m.resolve(a.value, scope) or (dotted(a.value) or "") for a in node.bases]
        cls.decorators = [self.m.resolve(d.decorator if not isinstance(d.decorator, cst.Call) else d.decorator.func, scope) or "" for d in node.decorators]
        scope.classes[node.name.value] = cls
        for d in node.decorators:
            self.walk(d, scope, loop)
        for a in list(node.bases) + list(node.keywords):
            self.walk(a, scope, loop)
        self.walk(node.body, cls, None)

    # ---- imports ----------------------------------------------------------------------------

    def on_import(self, node: cst.Import, scope: Scope, loop: Optional[LoopInfo]) -> None:
        for alias in node.names:
            full = _module_name(alias.name)
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                scope.imports[alias.asname.name.value] = full
            else:
                head = full.split(".")[0]
                scope.imports[head] = head

    def on_importfrom(self, node: cst.ImportFrom, scope: Scope, loop: Optional[LoopInfo]) -> None:
        if isinstance(node.names, cst.ImportStar):
            return
        mod = _module_name(node.module) if node.module is not None else ""
        prefix = "." * len(node.relative) + mod
        for alias in node.names:
            name = _module_name(alias.name)
            local = alias.asname.name.value if alias.asname is not None and isinstance(alias.asname.name, cst.Name) else name
            scope.imports[local] = f"{prefix}.{name}" if prefix and not prefix.endswith(".") else f"{prefix}{name}"

    # ---- bindings ---------------------------------------------------------------------------

    def _bind_target(self, target: cst.BaseExpression, value: Optional[cst.BaseExpression], scope: Scope,
                     loop: Optional[LoopInfo]) -> None:
        if isinstance(target, cst.Name):
            name = target.value
            if name in scope.defs and value is not None and not isinstance(value, cst.Lambda):
                del scope.defs[name]
            scope.assigned.setdefault(name, []).append(value)
            scope.bind_order.setdefault(name, []).append(self.counter)
            if loop is not None:
                loop.bound.setdefault(name, []).append(value)
                scope.loop_bound.add(name)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for el in target.elements:
                inner = el.value
                self._bind_target(inner, None, scope, loop)
        elif isinstance(target, cst.StarredElement):
            self._bind_target(target.value, None, scope, loop)

    def _event(self, scope: Scope, target: cst.BaseExpression, value: Optional[cst.BaseExpression], how: str) -> None:
        if isinstance(scope, FunctionInfo):
            scope.events.append((target, value, how))

    def on_assign(self, node: cst.Assign, scope: Scope, loop: Optional[LoopInfo]) -> None:
        self.walk(node.value, scope, loop)
        for t in node.targets:
            self._bind_target(t.target, node.value, scope, loop)
            self._event(scope, t.target, node.value, "=")
            if not isinstance(t.target, cst.Name):
                self.walk(t.target, scope, loop)
        if isinstance(node.value, cst.Lambda) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            fn = self.m.fn_of_node.get(id(node.value))
            if fn is not None:
                fn.name = node.targets[0].target.value
                fn.qualname = fn.name if scope is self.m.root else f"{scope.qualname}.{fn.name}"
                scope.defs[fn.name] = fn

    def on_annassign(self, node: cst.AnnAssign, scope: Scope, loop: Optional[LoopInfo]) -> None:
        if node.value is not None:
            self.walk(node.value, scope, loop)
            self._bind_target(node.target, node.value, scope, loop)
            self._event(scope, node.target, node.value, "=")
        if not isinstance(node.target, cst.Name):
            self.walk(node.target, scope, loop)

    def on_augassign(self, node: cst.AugAssign, scope: Scope, loop: Optional[LoopInfo]) -> None:
        self.walk(node.value, scope, loop)
        if isinstance(node.target, cst.Name):
            scope.assigned.setdefault(node.target.value, []).append(None)
            scope.bind_order.setdefault(node.target.value, []).append(self.counter)
            if loop is not None:
                scope.loop_bound.add(node.target.value)
                loop.bound.setdefault(node.target.value, []).append(None)
        else:
            self.walk(node.target, scope, loop)
        self._event(scope, node.target, node.value, "aug")

    def on_namedexpr(self, node: cst.NamedExpr, scope: Scope, loop: Optional[LoopInfo]) -> None:
        self.walk(node.value, scope, loop)
        fscope = scope.function_scope() or self.m.root
        self._bind_target(node.target, node.value, fscope, loop)
        self._event(fscope, node.target, node.value, "=")

    def on_for(self, node: cst.For, scope: Scope, loop: Optional[LoopInfo]) -> None:
        self.walk(node.iter, scope, loop)
        inner = LoopInfo(node, loop, scope)
        self._bind_target(node.target, None, scope, inner)
        self._event(scope, node.target, node.iter, "for")
        if not isinstance(node.target, (cst.Name, cst.Tuple, cst.List)):
            self.walk(node.target, scope, inner)
        self.walk(node.body, scope, inner)
        if node.orelse is not None:
            self.walk(node.orelse, scope, loop)

    def on_while(self, node: cst.While, scope: Scope, loop: Optional[LoopInfo]) -> None:
        inner = LoopInfo(node, loop, scope)
        self._mark_test(node.test)
        self.walk(node.test, scope, inner)
        self.walk(node.body, scope, inner)
        if node.orelse is not None:
            self.walk(node.orelse, scope, loop)

    def on_comprehension(self, node: cst.BaseComp, scope: Scope, loop: Optional[LoopInfo]) -> None:
        # The first iterable is evaluated outside the comprehension; the rest runs once per element.
        first = node.for_in
        self.walk(first.iter, scope, loop)
        inner = LoopInfo(node, loop, scope)
        comp: Optional[cst.CompFor] = first
        while comp is not None:
            if comp is not first:
                self.walk(comp.iter, scope, inner)
            self._bind_target(comp.target, None, scope, None)
            self._event(scope, comp.target, comp.iter, "for")
            for cond in comp.ifs:
                self._mark_test(cond.test)
                if type(cond) in self.m._wanted:
                    self.m.records.append(Record(cond, scope, inner, frozenset(), self.top))
                self.walk(cond.test, scope, inner)
            comp = comp.inner_for_in
        if isinstance(node, cst.DictComp):
            self.walk(node.key, scope, inner)
            self.walk(node.value, scope, inner)
        else:
            self.walk(node.elt, scope, inner)

    def on_with(self, node: cst.With, scope: Scope, loop: Optional[LoopInfo]) -> None:
        for item in node.items:
            self.walk(item.item, scope, loop)
            if item.asname is not None:
                self._bind_target(item.asname.name, item.item, scope, loop)
                self._event(scope, item.asname.name, item.item, "with")
        self.walk(node.body, scope, loop)

    def on_excepthandler(self, node: cst.ExceptHandler, scope: Scope, loop: Optional[LoopInfo]) -> None:
        if node.type is not None:
            self.walk(node.type, scope, loop)
        if node.name is not None and isinstance(node.name.name, cst.Name):
            scope.assigned.setdefault(node.name.name.value, []).append(None)
        self.walk(node.body, scope, loop)

    def on_global(self, node: cst.Global, scope: Scope, loop: Optional[LoopInfo]) -> None:
        scope.declared_global.update(n.name.value for n in node.names)

    def on_nonlocal(self, node: cst.Nonlocal, scope: Scope, loop: Optional[LoopInfo]) -> None:
        scope.declared_nonlocal.update(n.name.value for n in node.names)

    # ---- tests and calls --------------------------------------------------------------------

    def _mark_test(self, expr: cst.BaseExpression) -> None:
        self.m.test_nodes.add(id(expr))
        if isinstance(expr, cst.BooleanOperation):
            self._mark_test(expr.left)
            self._mark_test(expr.right)
        elif isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
            self._mark_test(expr.expression)
        elif isinstance(expr, cst.Call) and dotted(expr.func) == "bool" and len(expr.args) == 1:
            self._mark_test(expr.args[0].value)

    def on_if(self, node: cst.If, scope: Scope, loop: Optional[LoopInfo]) -> None:
        if isinstance(node.orelse, cst.If):
            self.m.elif_nodes.add(id(node.orelse))
        self._mark_test(node.test)
        self.walk(node.test, scope, loop)
        saved = self.guards
        self.guards = saved | _scalar_guard_names(node.test)
        self.walk(node.body, scope, loop)
        self.guards = saved
        if node.orelse is not None:
            self.walk(node.orelse, scope, loop)

    def on_ifexp(self, node: cst.IfExp, scope: Scope, loop: Optional[LoopInfo]) -> None:
        self._mark_test(node.test)
        for child in (node.test, node.body, node.orelse):
            self.walk(child, scope, loop)

    def on_assert(self, node: cst.Assert, scope: Scope, loop: Optional[LoopInfo]) -> None:
        self._mark_test(node.test)
        self.walk(node.test, scope, loop)
        if node.msg is not None:
            self.walk(node.msg, scope, loop)

    def on_booleanoperation(self, node: cst.BooleanOperation, scope: Scope, loop: Optional[LoopInfo]) -> None:
        for side in (node.left, node.right):
            if isinstance(side, cst.BooleanOperation):
                self.m.nested_boolops.add(id(side))
            self.walk(side, scope, loop)

    def on_call(self, node: cst.Call, scope: Scope, loop: Optional[LoopInfo]) -> None:
        if isinstance(scope, FunctionInfo):
            scope.calls.append(node)
        self.m.all_calls.append((node, scope, loop))
        self.walk(node.func, scope, loop)
        for a in node.args:
            self.walk(a.value, scope, loop)


_HANDLERS = {
    cst.FunctionDef: _Builder.on_functiondef,
    cst.Lambda: _Builder.on_lambda,
    cst.ClassDef: _Builder.on_classdef,
    cst.Import: _Builder.on_import,
    cst.ImportFrom: _Builder.on_importfrom,
    cst.Assign: _Builder.on_assign,
    cst.AnnAssign: _Builder.on_annassign,
    cst.AugAssign: _Builder.on_augassign,
    cst.NamedExpr: _Builder.on_namedexpr,
    cst.For: _Builder.on_for,
    cst.While: _Builder.on_while,
    cst.ListComp: _Builder.on_comprehension,
    cst.SetComp: _Builder.on_comprehension,
    cst.DictComp: _Builder.on_comprehension,
    cst.GeneratorExp: _Builder.on_comprehension,
    cst.With: _Builder.on_with,
    cst.ExceptHandler: _Builder.on_excepthandler,
    cst.Global: _Builder.on_global,
    cst.Nonlocal: _Builder.on_nonlocal,
    cst.If: _Builder.on_if,
    cst.IfExp: _Builder.on_ifexp,
    cst.Assert: _Builder.on_assert,
    cst.Call: _Builder.on_call,
    cst.BooleanOperation: _Builder.on_booleanoperation,
}


# ---------------------------------------------------------------------------------------------
# Pass 2: which functions are traced, with which parameters traced, to a fixed point.


def _scalar_guard_names(e: cst.BaseExpression) -> frozenset[str]:
    """Names that a true `e` proves to be Python scalars: `isinstance(n, int)` (and conjunctions)."""
    if isinstance(e, cst.BooleanOperation) and isinstance(e.operator, cst.And):
        return _scalar_guard_names(e.left) | _scalar_guard_names(e.right)
    if isinstance(e, cst.Call) and dotted(e.func) == "isinstance" and len(e.args) == 2 \
            and isinstance(e.args[0].value, cst.Name):
        kinds = e.args[1].value
        names = [el.value for el in kinds.elements] if isinstance(kinds, cst.Tuple) else [kinds]
        if all(dotted(n) in _PY_SCALARS for n in names):
            return frozenset({e.args[0].value.value})
    return frozenset()


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
    """`1`, `(1, 2)`, `["a", "b"]` -> their values; None when any element is not such a literal."""
    value = leaf(expr)
    if value is not None:
        return [value]
    if isinstance(expr, (cst.Tuple, cst.List, cst.Set)):
        out: list = []
        for el in expr.elements:
            vals = _literal_values(el.value, leaf)
            if vals is None:
                return None
            out.extend(vals)
        return out
    return None


class _Tracer:
    def __init__(self, model: ModuleModel) -> None:
        self.m = model
        self.changed = False

    def run(self, external: list["ExternalCall"]) -> None:
        m = self.m
        self.seed_external(external, m.path)
        # Seeds: decorators, transform calls and control-flow bodies anywhere in the module.
        for fn in m.functions:
            if not fn.decorators:
                continue
            outer = fn.parent or m.root
            for deco in fn.decorators:
                got = m.transform_of(deco.decorator, outer)
                if got is not None:
                    t, opts = got
                    self.seed(fn, t, opts, offset=0, bound=frozenset(), abstract=t.abstract, site_fn=None)
        self.seed_calls()
        rounds = 0
        while True:
            self.changed = False
            for fn in [f for f in m.functions if f.traced]:
                Values(m, fn).solve()
                self.follow_calls(fn)
            rounds += 1
            if not self.changed or rounds > 50:
                break
        for fn in m.functions:
            if fn.traced and not fn.traced_names:
                Values(m, fn).solve()

    def seed_calls(self) -> None:
        m = self.m
        for call, scope, _loop in m.all_calls:
            site_fn = scope.function_scope()
            site_abstract = bool(site_fn is not None and site_fn.traced and site_fn.abstract)
            self.seed_call(call, scope, site_fn, site_abstract)

    def seed_call(self, call: cst.Call, scope: Scope, site_fn: Optional[FunctionInfo], site_abstract: bool) -> None:
        m = self.m
        # jax.jit(f, ...), and partial(jax.jit, ...)(f) / jax.jit(static_argnames=...)(f)
        got = None
        opts: dict[str, cst.BaseExpression] = {}
        qual = m.resolve(call.func, scope)
        if qual is not None and qual in m.transforms:
            got = m.transforms[qual]
            opts = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
            positional = [a.value for a in call.args if a.keyword is None and not a.star]
            if got.statics == "vmap" and len(positional) > 1 and "in_axes" not in opts:
                opts["in_axes"] = positional[1]
        elif isinstance(call.func, cst.Call):
            tr = m.transform_of(call.func, scope)
            if tr is not None:
                got, opts = tr
        if got is not None:
            fexpr = None
            for a in call.args:
                if a.keyword is None and not a.star:
                    fexpr = a.value
                    break
                if a.keyword is not None and a.keyword.value in ("fun", "f", "fn"):
                    fexpr = a.value
                    break
            if fexpr is not None:
                ref = m.resolve_callable(fexpr, scope)
                if ref is None and isinstance(fexpr, cst.Call):
                    # jax.jit(jax.grad(f)): the inner transform is seeded by its own call record.
                    return
                if ref is not None:
                    self.seed(ref.fn, got, opts, ref.offset, ref.bound_names, got.abstract or site_abstract,
                              site_fn=None)
            return
        if qual is None:
            return
        body = LAX_BODIES.get(qual)
        if body is not None:
            kind, slots = body
            for pos, kw, is_seq in slots:
                arg = _arg(call, pos, kw)
                if arg is None:
                    continue
                exprs = [el.value for el in arg.elements] if is_seq and isinstance(arg, (cst.List, cst.Tuple)) else [arg]
                for e in exprs:
                    ref = m.resolve_callable(e, scope)
                    if ref is not None:
                        t = Transform(kind, abstract=True, cached=True)
                        self.seed(ref.fn, t, {}, ref.offset, ref.bound_names, True, site_fn=site_fn)
            return
        if qual in TREE_MAPS and site_fn is not None and site_fn.traced and call.args:
            ref = m.resolve_callable(call.args[0].value, scope)
            if ref is not None:
                # Leaf i of the callback comes from tree i: traced only if that tree is.
                values = Values(m, site_fn)
                trees = [a.value for a in call.args[1:] if a.keyword is None and not a.star]
                params = [p for p in ref.fn.params[ref.offset:] if p.name not in ref.bound_names]
                leaves = {p.name for p, tree in zip(params, trees) if values.traced(tree)}
                self.mark(ref.fn, leaves, site_fn.abstract, site_fn.cached, "helper", site_fn)

    def seed(self, fn: FunctionInfo, t: Transform, opts: dict[str, cst.BaseExpression], offset: int,
             bound: frozenset[str], abstract: bool, site_fn: Optional[FunctionInfo]) -> None:
        statics = static_param_names(fn, t, opts, offset)
        positional = [p for p in fn.params if p.index is not None]
        bound_pos = {p.name for p in positional[:offset]}
        traced = set()
        for p in fn.params:
            if p.name in bound_pos or p.name in bound:
                continue
            if statics is None or p.name in statics:
                continue
            if offset == 0 and fn.is_method and p is fn.params[0]:
                continue  # self/cls: see jit-method-self
            if _is_literal(p.default):
                continue  # a flag with a Python default: a constant unless a caller passes it
            traced.add(p.name)
        if fn.target is None or (fn.target.transform == "helper" and site_fn is None):
            static_nums = tuple(p.index - offset for p in positional
                                if statics is not None and p.name in statics and p.index is not None and p.index >= offset)
            fn.target = TraceTarget(fn.qualname, 0, t.kind,
                                    static_nums, tuple(sorted(statics or ())), _via(site_fn), _root(site_fn))
        # Under equinox's filter transforms non-array leaves stay static, so attributes are not leaves.
        self.mark(fn, traced, abstract, t.cached, t.kind, None, pytrees=set() if t.statics == "filter" else traced)

    def mark(self, fn: FunctionInfo, params: set[str], abstract: bool, cached: bool, kind: str,
             caller: Optional[FunctionInfo], pytrees: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        grew = False
        if pytrees - fn.pytree_params:
            fn.pytree_params |= pytrees
            grew = True
        if not fn.traced:
            fn.traced = True
            grew = True
        if abstract and not fn.abstract:
            fn.abstract = True
            grew = True
        if cached and not fn.cached:
            fn.cached = True
            grew = True
        if kind not in fn.transforms:
            fn.transforms.add(kind)
        new = params - fn.traced_params
        if new:
            fn.traced_params |= new
            grew = True
        if caller is not None and fn.target is None:
            fn.target = TraceTarget(fn.qualname, 0, "helper", (), (), _via(caller), _root(caller))
        if grew:
            self.changed = True

    def follow_calls(self, fn: FunctionInfo) -> None:
        m = self.m
        values = Values(m, fn)
        for call in fn.calls:
            qual = m.resolve(call.func, fn)
            if qual is not None and (qual in CALLBACKS or qual in m.transforms or qual in LAX_BODIES):
                if qual in m.transforms or qual in LAX_BODIES:
                    # transforms applied inside traced code: abstract if the site is
                    self.seed_call(call, fn, fn, fn.abstract)
                continue
            if isinstance(call.func, cst.Call):
                self.seed_call(call, fn, fn, fn.abstract)
            if qual in TREE_MAPS:
                self.seed_call(call, fn, fn, fn.abstract)
                continue
            ref = m.resolve_callable(call.func, fn)
            args = [ArgInfo(str(a.star), a.keyword.value if a.keyword is not None else None, t,
                            t and values.is_pytree(a.value), t and values.is_array_like(a.value))
                    for a in call.args for t in (values.traced(a.value),)]
            if ref is None:
                # Across files, follow only calls made by a function a transform traces directly
                # (`train_step` -> `losses.loss_fn`): longer chains through library internals were
                # measured to be mostly noise.
                direct = fn.target is not None and fn.target.transform != "helper"
                if direct and qual is not None and not qual.startswith("builtins.") and any(a.traced for a in args):
                    m.external_calls[id(call)] = ExternalCall(qual, tuple(args), fn.abstract, fn.cached, fn.qualname)
                continue
            if ref.fn is fn:
                continue
            traced, pytrees = _map_args(ref.fn, ref.offset, args)
            self.mark(ref.fn, traced, fn.abstract, fn.cached, "helper", fn, pytrees)

    def seed_external(self, calls: list["ExternalCall"], origin: str) -> None:
        """Calls into this module from traced code in other files of the project."""
        m = self.m
        for ext in calls:
            fn = m.root.defs.get(ext.qualname.rsplit(".", 1)[-1])
            if fn is None:
                continue
            # Across files only arguments that are evidently arrays make parameters traced: objects
            # handed to library helpers are mostly configuration and bookkeeping.
            arrays = [dataclasses.replace(a, traced=a.traced and a.array) for a in ext.args]
            traced, _ = _map_args(fn, 0, arrays)
            pytrees: set[str] = set()  # too far from the transform to know which objects are flattened pytrees
            if fn.target is None:
                fn.target = TraceTarget(fn.qualname, 0, "helper", (), (), (f"{ext.caller} ({ext.origin})",))
            self.mark(fn, traced, ext.abstract, ext.cached, "helper", None, pytrees)


@dataclass(frozen=True)
class ArgInfo:
    """One argument of a call, as far as tracing goes: its form and whether it carries traced values."""

    star: str  # "", "*" or "**"
    keyword: Optional[str]
    traced: bool
    pytree: bool
    array: bool = False  # evidently an array (a jnp result, arithmetic, an array-annotated parameter…)


@dataclass(frozen=True)
class ExternalCall:
    """A call from traced code to a function imported from elsewhere (followed across files by the API)."""

    qualname: str  # as resolved through this module's imports, e.g. `.losses.l2` or `pkg.losses.l2`
    args: tuple[ArgInfo, ...]
    abstract: bool
    cached: bool
    caller: str
    origin: str = ""  # the caller's file, filled in by the API


def _map_args(callee: FunctionInfo, offset: int, args: list[ArgInfo]) -> tuple[set[str], set[str]]:
    """Which parameters of `callee` receive traced values (and whole pytrees) from these arguments."""
    traced: set[str] = set()
    pytrees: set[str] = set()
    positional = [p for p in callee.params if p.index is not None]
    star = next((p for p in callee.params if p.star == "*"), None)
    kwstar = next((p for p in callee.params if p.star == "**"), None)
    pos = offset
    for info in args:
        is_t = info.traced
        if info.star == "*":
            if is_t:
                traced.update(p.name for p in positional[pos:])
                if star:
                    traced.add(star.name)
            continue
        if info.star == "**":
            if is_t:
                traced.update(p.name for p in callee.params if p.index is None or p.index >= pos)
            continue
        target = None
        if info.keyword is not None:
            p = callee.param(info.keyword)
            target = p.name if p is not None else (kwstar.name if kwstar else None)
        elif pos < len(positional):
            target = positional[pos].name
            pos += 1
        else:
            target = star.name if star is not None else None
            pos += 1
        if target and is_t:
            traced.add(target)
            if info.pytree:
                pytrees.add(target)
    return traced, pytrees


def static_param_names(fn: FunctionInfo, t: Transform, opts: dict[str, cst.BaseExpression], offset: int) -> Optional[set[str]]:
    """Names of parameters JAX treats as static under this transform; None when unknowable."""
    positional = [p for p in fn.params if p.index is not None]
    out: set[str] = set()

    def by_index(expr: cst.BaseExpression) -> bool:
        nums = _literal_values(expr, _int_leaf)
        if nums is None:
            return False
        usable = positional[offset:]
        for n in nums:
            if -len(usable) <= n < len(usable):
                out.add(usable[n].name)
        return True

    if t.statics == "jit":
        for key in ("static_argnums",):
            if key in opts and not by_index(opts[key]):
                return None
        if "static_argnames" in opts:
            names = _literal_values(opts["static_argnames"], _str_leaf)
            if names is None:
                return None
            out.update(names)
    elif t.statics == "pmap":
        if "static_broadcasted_argnums" in opts and not by_index(opts["static_broadcasted_argnums"]):
            return None
    elif t.statics == "custom":
        if "nondiff_argnums" in opts and not by_index(opts["nondiff_argnums"]):
            return None
    elif t.statics == "vmap":
        axes = opts.get("in_axes")
        if axes is not None:
            if isinstance(axes, cst.Name) and axes.value == "None":
                return None
            if isinstance(axes, (cst.Tuple, cst.List)):
                usable = positional[offset:]
                for i, el in enumerate(axes.elements):
                    if isinstance(el.value, cst.Name) and el.value.value == "None" and i < len(usable):
                        out.add(usable[i].name)
    elif t.statics == "filter":
        for p in fn.params:
            ann = p.annotation
            if ann in NON_ARRAY_ANNOTATIONS:
                out.add(p.name)
            elif ann is None and p.has_default and isinstance(
                    p.default, (cst.Integer, cst.Float, cst.SimpleString, cst.Name, cst.ConcatenatedString)):
                if not isinstance(p.default, cst.Name) or p.default.value in ("True", "False", "None"):
                    out.add(p.name)
    return out


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


def _root(site_fn: Optional[FunctionInfo]) -> Optional[TraceTarget]:
    """How the outermost traced function on the way to `site_fn` (inclusive) is traced."""
    if site_fn is None or site_fn.target is None:
        return None
    return site_fn.target.root or site_fn.target


def _via(site_fn: Optional[FunctionInfo]) -> tuple[str, ...]:
    """The chain of traced callers through which a function is reached, outermost first."""
    if site_fn is None:
        return ()
    outer = site_fn.target.via if site_fn.target is not None else ()
    return outer + (site_fn.qualname,)


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


# ---------------------------------------------------------------------------------------------
# Traced values inside one traced function: a flow-insensitive fixed point over its bindings.


class Values:
    def __init__(self, model: ModuleModel, fn: FunctionInfo) -> None:
        self.m = model
        self.fn = fn
        self._locals = fn.local_names
        self._static_override: set[str] = set()

    def solve(self) -> None:
        fn = self.fn
        names = set(fn.traced_params)
        fn.traced_names = names
        trees = set(fn.pytree_params)
        fn.pytree_names = trees
        containers = {p.name for p in fn.params if p.annotation in CONTAINER_ANNOTATIONS}
        for call in fn.calls:  # `params.items()`, `batch.get("x")`, `len(xs)`: the name holds a container
            f = call.func
            if isinstance(f, cst.Attribute) and isinstance(f.value, cst.Name) and f.attr.value in _DICT_METHODS:
                containers.add(f.value.value)
            elif isinstance(f, cst.Name) and f.value == "len" and len(call.args) == 1 \
                    and isinstance(call.args[0].value, cst.Name):
                containers.add(call.args[0].value.value)
        fn.container_names = containers
        for _ in range(20):
            before = len(names)
            before_trees = len(trees)
            for target, value, how in fn.events:
                if value is None:
                    continue
                if how in ("=", "for") and self.is_pytree(value):
                    for n in _target_names(target):
                        trees.add(n)
                if how == "for":
                    self._bind(target, self._elements(value), names)
                elif how == "aug":
                    if isinstance(target, cst.Name) and self.traced(value):
                        names.add(target.value)
                else:
                    if isinstance(target, cst.Name) and isinstance(value, (cst.Dict, cst.List, cst.Tuple, cst.DictComp, cst.ListComp)):
                        containers.add(target.value)
                    self._bind(target, self._unpack(value), names)
            if len(names) == before and len(trees) == before_trees:
                break

    def _unpack(self, value: cst.BaseExpression) -> Union[bool, list]:
        if isinstance(value, (cst.Tuple, cst.List)) and not any(isinstance(e, cst.StarredElement) for e in value.elements):
            return [self._unpack(e.value) for e in value.elements]
        return self.traced(value)

    def _elements(self, it: cst.BaseExpression) -> Union[bool, list]:
        """Tracedness of the elements produced by iterating `it` (per position when unpacked)."""
        if isinstance(it, cst.Call):
            fq = self.m.resolve(it.func, self.fn)
            if fq == "builtins.enumerate" and it.args:
                return [False, self._elements(it.args[0].value)]
            if fq is not None and fq.rsplit(".", 1)[-1] in ("zip", "safe_zip"):
                return [self._elements(a.value) for a in it.args]
            if fq in ("builtins.range", "builtins.reversed", "builtins.sorted") and it.args:
                return any(self.traced(a.value) for a in it.args) if fq == "builtins.range" else self._elements(it.args[0].value)
            if isinstance(it.func, cst.Attribute) and not it.args:
                meth = it.func.attr.value
                if meth == "items":
                    return [False, self.traced(it.func.value)]
                if meth == "keys":
                    return False
                if meth == "values":
                    return self.traced(it.func.value)
        if isinstance(it, (cst.Tuple, cst.List)):
            return any(self.traced(e.value) for e in it.elements)
        return self.traced(it)

    def _bind(self, target: cst.BaseExpression, value: Union[bool, list], names: set[str]) -> None:
        if isinstance(target, cst.Name):
            if value is True or (isinstance(value, list) and any(_flatten(value))):
                names.add(target.value)
            return
        if isinstance(target, (cst.Tuple, cst.List)):
            els = target.elements
            if isinstance(value, list) and len(value) == len(els) and not any(isinstance(e, cst.StarredElement) for e in els):
                for el, v in zip(els, value):
                    self._bind(el.value, v, names)
            else:
                flag = value if isinstance(value, bool) else any(_flatten(value))
                for el in els:
                    self._bind(el.value, flag, names)
        elif isinstance(target, cst.StarredElement):
            self._bind(target.value, value, names)

    # ---- the question -----------------------------------------------------------------------

    def _scalar_guards(self, e: cst.BaseExpression) -> set[str]:
        return set(_scalar_guard_names(e))

    def name_traced(self, name: str) -> bool:
        if name in self._static_override or _SHAPE_NAME.search(name):
            return False  # `sample_shape`, `batch_size`, `ndim`: named for static facts
        fn = self.fn
        if name in self._locals:
            return name in fn.traced_names
        s = fn.parent
        while s is not None:
            if isinstance(s, FunctionInfo):
                if name in s.local_names:
                    return s.traced and name in s.traced_names
            elif s is self.m.root:
                return False
            s = s.parent
        return False

    def traced(self, e: cst.BaseExpression) -> bool:  # noqa: C901 - one dispatch on node type
        if isinstance(e, cst.Name):
            return self.name_traced(e.value)
        if isinstance(e, cst.Attribute):
            if e.attr.value in STATIC_ATTRS:
                return False
            if e.attr.value in ARRAY_ATTRS or self.is_pytree(e.value):
                return self.traced(e.value)
            return False  # an attribute of a traced Python object: usually configuration
        if isinstance(e, cst.Subscript):
            if not self.is_pytree(e.value) and any(
                    isinstance(el.slice, cst.Index) and isinstance(el.slice.value, cst.SimpleString) for el in e.slice):
                return False  # obj["key"] on a Python object: arrays have no string keys
            return self.traced(e.value)
        if isinstance(e, cst.Call):
            return self._call_traced(e)
        if isinstance(e, cst.BinaryOperation):
            return self.traced(e.left) or self.traced(e.right)
        if isinstance(e, cst.UnaryOperation):
            if isinstance(e.operator, cst.Not):
                return False  # the bool() happens here; the result is a Python bool
            return self.traced(e.expression)
        if isinstance(e, cst.BooleanOperation):
            if self.traced(e.left):
                return True
            guarded = self._scalar_guards(e.left) if isinstance(e.operator, cst.And) else set()
            if guarded:  # `isinstance(n, int) and n == 1`: n is a Python scalar on the right
                saved = self._static_override
                self._static_override = saved | guarded
                try:
                    return self.traced(e.right)
                finally:
                    self._static_override = saved
            return self.traced(e.right)
        if isinstance(e, cst.Comparison):
            return self._compare_traced(e)
        if isinstance(e, cst.IfExp):
            return self.traced(e.body) or self.traced(e.orelse)
        if isinstance(e, (cst.Tuple, cst.List, cst.Set)):
            return any(self.traced(el.value) for el in e.elements)
        if isinstance(e, cst.Dict):
            return any(isinstance(el, cst.DictElement) and self.traced(el.value) for el in e.elements)
        if isinstance(e, (cst.ListComp, cst.SetComp, cst.GeneratorExp)):
            return self.traced(e.elt)
        if isinstance(e, cst.DictComp):
            return self.traced(e.value)
        if isinstance(e, cst.NamedExpr):
            return self.traced(e.value)
        if isinstance(e, cst.StarredElement):
            return self.traced(e.value)
        if isinstance(e, cst.Await):
            return self.traced(e.expression)
        return False

    def is_array_like(self, e: cst.BaseExpression, depth: int = 0) -> bool:
        """Whether a traced expression is evidently an array, not some object that holds tracers."""
        if depth > 6 or not self.traced(e):
            return False
        if isinstance(e, (cst.BinaryOperation, cst.UnaryOperation)):
            return True
        if isinstance(e, cst.Call):
            q = self.m.resolve(e.func, self.fn)
            if q is not None and q.startswith(STAGING_MODULES):
                return True
            return isinstance(e.func, cst.Attribute) and self.is_array_like(e.func.value, depth + 1)
        if isinstance(e, cst.Subscript):
            return self.is_pytree(e.value) or self.is_array_like(e.value, depth + 1)
        if isinstance(e, cst.Attribute):
            return e.attr.value in ARRAY_ATTRS and self.is_array_like(e.value, depth + 1)
        if isinstance(e, cst.Name):
            p = self.fn.param(e.value)
            if p is not None:
                return p.annotation in ARRAY_ANNOTATIONS
            values = [v for t, v, how in self.fn.events if how == "=" and isinstance(t, cst.Name) and t.value == e.value]
            return bool(values) and all(v is not None and self.is_array_like(v, depth + 1) for v in values)
        return False

    def is_pytree(self, e: cst.BaseExpression) -> bool:
        """Whether the expression is (part of) a pytree JAX flattened: a chain of subscripts and
        attributes rooted at such a parameter."""
        while isinstance(e, (cst.Attribute, cst.Subscript)):
            e = e.value
        if not isinstance(e, cst.Name):
            return False
        name = e.value
        if name in self._locals:
            return name in self.fn.pytree_names
        s = self.fn.parent
        while s is not None:
            if isinstance(s, FunctionInfo) and name in s.local_names:
                return s.traced and name in s.pytree_names
            s = s.parent
        return False

    def is_bool_array(self, e: cst.BaseExpression, depth: int = 0) -> bool:
        """Whether `e` is a traced boolean array (a mask): comparisons, `~`/`&`/`|` of masks,
        `jnp.isnan`-style predicates, `.astype(bool)`, or a name bound to one."""
        if depth > 8 or not self.traced(e):
            return False
        if isinstance(e, cst.Comparison):
            return True
        if isinstance(e, cst.UnaryOperation) and isinstance(e.operator, cst.BitInvert):
            return self.is_bool_array(e.expression, depth + 1)
        if isinstance(e, cst.BinaryOperation) and isinstance(e.operator, (cst.BitAnd, cst.BitOr, cst.BitXor)):
            return self.is_bool_array(e.left, depth + 1) or self.is_bool_array(e.right, depth + 1)
        if isinstance(e, cst.Call):
            q = self.m.resolve(e.func, self.fn)
            if q is not None and q.startswith("jax.numpy.") and q[len("jax.numpy."):] in _BOOL_FUNCS:
                return True
            if isinstance(e.func, cst.Attribute) and e.func.attr.value == "astype" and e.args:
                t = dotted(e.args[0].value) or ""
                return t.split(".")[-1] in ("bool", "bool_")
            return False
        if isinstance(e, cst.Name):
            values = [v for t, v, how in self.fn.events
                      if how == "=" and isinstance(t, cst.Name) and t.value == e.value]
            return bool(values) and all(v is not None and self.is_bool_array(v, depth + 1) for v in values)
        return False

    def truth_traced(self, e: cst.BaseExpression) -> bool:
        """Whether Python's truth test of `e` (in `if`, `while`, `and`, `not` ...) calls bool() on a tracer.

        `if params:` on a container is a static length test; a call to a function JAX does not
        define, used directly as a condition (`if is_array(x)`, `if not_tracer(i)`), is taken to be a
        Python predicate.
        """
        if isinstance(e, cst.BooleanOperation):
            if self.truth_traced(e.left):
                return True
            guarded = self._scalar_guards(e.left) if isinstance(e.operator, cst.And) else set()
            saved = self._static_override
            self._static_override = saved | guarded
            try:
                return self.truth_traced(e.right)
            finally:
                self._static_override = saved
        if isinstance(e, cst.UnaryOperation) and isinstance(e.operator, cst.Not):
            return self.truth_traced(e.expression)
        if isinstance(e, cst.Name) and e.value in self.fn.container_names:
            return False
        if isinstance(e, cst.Call) and self._is_predicate_call(e):
            return False
        if self._pytree_member(e):
            return False  # `if state.dynamic_scale:`: an optional sub-object of a pytree, tested for presence
        return self.traced(e)

    def _pytree_member(self, e: cst.BaseExpression) -> bool:
        """An attribute of a flattened pytree (directly, or a name bound only to one)."""
        if isinstance(e, cst.Attribute):
            return e.attr.value not in ARRAY_ATTRS and self.is_pytree(e.value)
        if isinstance(e, cst.Name) and e.value in self._locals and self.fn.param(e.value) is None:
            values = [v for t, v, how in self.fn.events if isinstance(t, cst.Name) and t.value == e.value]
            return bool(values) and all(v is not None and isinstance(v, cst.Attribute) and self._pytree_member(v)
                                        for v in values)
        return False

    def _is_predicate_call(self, e: cst.Call) -> bool:
        qual = self.m.resolve(e.func, self.fn)
        if qual is not None and (qual.startswith(STAGING_MODULES) or qual == "builtins.bool"):
            return False
        if isinstance(e.func, cst.Attribute) and self.traced(e.func.value):
            return False  # x.any(), x.all()
        return True

    def _compare_traced(self, e: cst.Comparison) -> bool:
        operands = [e.left] + [c.comparator for c in e.comparisons]
        for c in e.comparisons:
            if isinstance(c.operator, (cst.Is, cst.IsNot, cst.In, cst.NotIn)):
                return False
        if any(isinstance(o, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)) for o in operands):
            return False
        if any(isinstance(o, cst.Name) and o.value == "None" for o in operands):
            return False
        return any(self.traced(o) for o in operands)

    def _call_traced(self, e: cst.Call) -> bool:
        qual = self.m.resolve(e.func, self.fn)
        if qual is not None:
            if qual in STATIC_CALLS:
                return False
            if qual.startswith("numpy.") or qual.startswith("math."):
                return False  # conversion to NumPy fails on a tracer, or the call is static
            if qual.startswith(STAGING_MODULES):
                return True
            if qual == "builtins.getattr" and len(e.args) >= 2:
                obj, attr = e.args[0].value, e.args[1].value
                if isinstance(attr, cst.SimpleString) and attr.evaluated_value in STATIC_ATTRS:
                    return False
                return self.is_pytree(obj) and self.traced(obj)
        func = e.func
        callee = func.attr.value if isinstance(func, cst.Attribute) else (func.value if isinstance(func, cst.Name) else "")
        if _STATIC_NAME.search(callee) and (qual is None or not qual.startswith(STAGING_MODULES)):
            return False  # `pytree_size(x)`, `get_shape(x)`: functions named for static facts
        if isinstance(func, cst.Attribute):
            if func.attr.value in ("keys", "__len__"):
                return False
            if self.traced(func.value):
                return True  # a method of a traced value: x.sum(), x.astype(...)
        return any(self.traced(a.value) for a in e.args)


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
