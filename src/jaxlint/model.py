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
from .frameworks import Frameworks
from .jaxapi import (
    ARRAY_ANNOTATIONS,
    ARRAY_ATTRS,
    CALLBACKS,
    CONTAINER_ANNOTATIONS,
    LAX_BODIES,
    LIST_RETURNING,
    NON_ARRAY_ANNOTATIONS,
    PALLAS_PACKAGES,
    PALLAS_REF_CALLS,
    PYTREE_BASES,
    PYTREE_CLASS_DECORATORS,
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
    bind_loops: dict[str, list[Optional["LoopInfo"]]] = field(default_factory=dict)  # the loop of each binding
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
    # Registered pytrees: annotated fields, and those that are aux data (static Python values, not
    # leaves): `field(metadata={"static": True})`, `struct.field(pytree_node=False)`,
    # `eqx.field(static=True)`, `static_field()`, `meta_fields=[...]`, a `tree_flatten`'s aux part.
    fields: set[str] = field(default_factory=set)
    static_fields: set[str] = field(default_factory=set)
    pytree: bool = False


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
    # Parameters that are Python values whoever calls: nondiff arguments of a custom_vjp/custom_jvp.
    declared_static: set[str] = field(default_factory=set)
    # Where a transform is applied to this function: (scope, source-order stamp); -1 for a decorator.
    trace_sites: set[tuple[Scope, int]] = field(default_factory=set)
    # Parameters every traced call site gives a value other than None (None until a site is seen).
    passed: Optional[set[str]] = None
    # Parameters that receive a whole pytree JAX flattened (a transform's own arguments, or such a
    # value passed straight on): their attributes are leaves, hence traced. Other traced objects may
    # be mixed Python objects whose attributes are configuration.
    pytree_params: set[str] = field(default_factory=set)
    pytree_names: set[str] = field(default_factory=set)
    traced_names: set[str] = field(default_factory=set)
    container_names: set[str] = field(default_factory=set)
    dict_names: set[str] = field(default_factory=set)  # names holding dicts: iterating them gives keys
    key_subscripts: set[tuple[str, str]] = field(default_factory=set)  # (d, k) for each `d[k]` in the body
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
    lead: int = 0  # leading call arguments the function does not receive (`variables` of linen's `apply`)
    receiver: Optional[cst.BaseExpression] = None  # the instance a method is called on, when it is an argument


_BOOL_FUNCS = frozenset({
    "isnan", "isinf", "isfinite", "isposinf", "isneginf", "logical_and", "logical_or", "logical_not", "logical_xor",
    "less", "less_equal", "greater", "greater_equal", "equal", "not_equal", "isclose", "signbit", "isin",
})
_NUMPY_ARRAY_TYPES = frozenset({"np.ndarray", "numpy.ndarray", "onp.ndarray", "np.generic", "numpy.generic"})
_PY_SCALARS = frozenset({"int", "float", "bool", "str", "complex", "tuple", "list", "dict", "type(None)"})
_STATIC_NAME = re.compile(r"(^|_)(size|sizes|shape|shapes|ndim|len|length|dtype|count)(_|$)|^(is|has)_", re.I)
_SHAPE_NAME = re.compile(r"(^|_)(shape|shapes|ndim|dtype|dtypes)(_|$)", re.I)
_DICT_METHODS = frozenset({"items", "keys", "values", "get"})
_STR_METHODS = frozenset({"startswith", "endswith", "lower", "upper", "strip", "lstrip", "rstrip", "isdigit",
                          "isalpha", "isidentifier", "casefold", "removeprefix", "removesuffix"})
_DICT_ANNOTATIONS = frozenset({"dict", "Dict", "Mapping", "MutableMapping", "FrozenDict"})
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
        self.applied_calls: set[int] = set()  # ids of calls whose result is called at once: `jax.grad(f)(x)`
        self.applied_parent: dict[int, cst.Call] = {}  # id of `jax.jit(f)` -> the call giving f its arguments
        self.call_order: dict[int, int] = {}  # id of a call -> its source-order stamp
        self.summaries_final = False
        self._returns: dict[int, bool] = {}
        self._returns_busy: set[int] = set()
        self._wanted = wanted
        self._aliasing: set[str] = set()
        self._refs: Optional[dict[int, set[str]]] = None  # Pallas refs per function, computed on first use
        self.frameworks = Frameworks(self)
        _Builder(self).build()
        self._register_classes()
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

    def resolve_callable(self, expr: cst.BaseExpression, scope: Scope,
                         call: Optional[cst.Call] = None) -> Optional[CallableRef]:
        """Resolve an expression used as a callable to a def or lambda of this module (`call`, when
        given, is the call it heads: linen's `apply(..., method=...)` names the method there)."""
        if isinstance(expr, cst.Lambda):
            fn = self.fn_of_node.get(id(expr))
            return CallableRef(fn) if fn else None
        if isinstance(expr, cst.Name):
            fn = self.lookup_function(expr.value, scope)
            return CallableRef(fn) if fn else self.frameworks.callable_of(expr, scope, call)
        if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name):
            owner = expr.value.value
            fscope = scope.function_scope()
            if fscope is not None and fscope.cls is not None and fscope.is_method and fscope.params \
                    and fscope.params[0].name == owner:
                fn = fscope.cls.defs.get(expr.attr.value)
                if fn is not None:
                    return CallableRef(fn, offset=1, receiver=expr.value) if fn.is_method else CallableRef(fn)
            cls = self.root.classes.get(owner)
            if cls is not None:
                fn = cls.defs.get(expr.attr.value)
                if fn is not None:
                    return CallableRef(fn)
            return self.frameworks.callable_of(expr, scope, call)
        if isinstance(expr, cst.Call) and self.resolve(expr.func, scope) == "functools.partial" and expr.args:
            inner = self.resolve_callable(expr.args[0].value, scope)
            if inner is None:
                return None
            positional = sum(1 for a in expr.args[1:] if a.keyword is None and not a.star)
            keywords = frozenset(a.keyword.value for a in expr.args[1:] if a.keyword is not None)
            taken = min(positional, inner.lead)  # partial(model.apply, variables) binds the leading ones first
            return CallableRef(inner.fn, inner.offset + positional - taken, inner.bound_names | keywords,
                               inner.lead - taken, inner.receiver)
        return self.frameworks.callable_of(expr, scope, call)

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

    # ---- classes ----------------------------------------------------------------------------

    def _register_classes(self) -> None:
        """Module-level `register_dataclass(Cls, ...)` / `register_pytree_node(Cls, flatten, unflatten)`."""
        for call, scope, _loop in self.all_calls:
            if scope is not self.root or not call.args:
                continue
            qual = self.resolve(call.func, scope)
            if qual not in _REGISTER_CALLS:
                continue
            first = call.args[0].value
            cls = self.root.classes.get(first.value) if isinstance(first, cst.Name) else None
            if cls is None:
                continue
            cls.pytree = True
            _register_options(self, cls, call, scope, 0)
            if qual in ("jax.tree_util.register_pytree_node", "jax.tree_util.register_pytree_with_keys") \
                    and len(call.args) > 1 and isinstance(call.args[1].value, cst.Name):
                flatten = self.root.defs.get(call.args[1].value.value)
                if flatten is not None and flatten.params and isinstance(flatten.node, cst.FunctionDef):
                    cls.static_fields |= _flatten_aux(flatten, flatten.params[0].name)
        names: set[str] = set()
        data: set[str] = set()
        for c in self._all_classes():
            names |= c.static_fields
            data |= c.fields - c.static_fields
        self.static_field_names = frozenset(names - data)

    def _all_classes(self) -> Iterator[ClassInfo]:
        stack: list[Scope] = [self.root]
        stack.extend(self.functions)
        seen: set[int] = set()
        while stack:
            s = stack.pop()
            for c in s.classes.values():
                if id(c) not in seen:
                    seen.add(id(c))
                    yield c
                    stack.append(c)

    def class_of(self, expr: cst.BaseExpression, fn: "FunctionInfo") -> Optional[ClassInfo]:
        """The class of this module an expression's value is an instance of, where the code says so:
        `self` in a method, a parameter annotated with the class."""
        if not isinstance(expr, cst.Name):
            return None
        s: Optional[Scope] = fn
        while isinstance(s, FunctionInfo):
            p = s.param(expr.value)
            if p is not None:
                if s.is_method and s.cls is not None and p is s.params[0]:
                    return s.cls
                return self.root.classes.get(p.annotation) if p.annotation else None
            if expr.value in s.local_names:
                return None
            s = s.parent
        return None

    def is_static_field(self, obj: cst.BaseExpression, attr: str, fn: "FunctionInfo") -> bool:
        """Whether `obj.attr` reads an aux-data field of a registered pytree: a Python value, not a leaf."""
        cls = self.class_of(obj, fn)
        if cls is not None and (cls.fields or cls.static_fields):
            return attr in cls.static_fields
        return attr in self.static_field_names

    # ---- function summaries -----------------------------------------------------------------

    def returns_traced(self, fn: "FunctionInfo") -> bool:
        """Whether a traced function's return value carries tracers, given what its callers pass."""
        key = id(fn)
        if key in self._returns:
            return self._returns[key]
        if key in self._returns_busy:
            return False  # recursion: the other returns decide
        node = fn.node
        if isinstance(node, cst.Lambda):
            exprs: list[cst.BaseExpression] = [node.body]
        elif isinstance(node, cst.FunctionDef):
            exprs = [r.value for r in _returns(node.body) if r.value is not None]
        else:
            return True
        self._returns_busy.add(key)
        try:
            values = Values(self, fn)
            out = any(values.traced(x) for x in exprs)
        finally:
            self._returns_busy.discard(key)
        if self.summaries_final:
            self._returns[key] = out
        return out

    def summarised_callee(self, call: cst.Call, fn: "FunctionInfo") -> Optional["FunctionInfo"]:
        """The traced function of this module a call runs, when its summary can answer for it."""
        if isinstance(call.func, cst.Call):
            return None
        ref = self.resolve_callable(call.func, fn)
        if ref is None or not ref.fn.traced or ref.fn is fn or not isinstance(ref.fn.node, (cst.FunctionDef, cst.Lambda)):
            return None
        if ref.fn.decorators and any(self.transform_of(d.decorator, ref.fn.parent or self.root) for d in ref.fn.decorators):
            return None  # a transformed function's result is whatever the transform returns
        return ref.fn

    # ---- questions rules ask ----------------------------------------------------------------

    def traced_function(self, scope: Scope, guards: frozenset[str] = frozenset()) -> Optional[FunctionInfo]:
        """The innermost function around a node, if JAX traces it (and the node's branch can run traced)."""
        fn = scope.function_scope()
        if fn is None or not fn.traced or _dead(fn, guards):
            return None
        return fn

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
        if _dead(fn, guards):
            return None
        values = Values(self, fn)
        values._static_override = set(guards)
        return values

    def is_local(self, name: str, scope: Scope) -> bool:
        fn = scope.function_scope()
        return fn is not None and name in fn.local_names

    def reads_directly(self, fn: "FunctionInfo", name: str) -> bool:
        """Whether `fn`'s own body (not its nested functions) reads `name`, other than as the object of
        a store (`xs[i] = v`, `xs.append(v)` alone on a line)."""
        stack: list[cst.CSTNode] = [fn.node.body] if fn.node is not None else []  # type: ignore[attr-defined]
        while stack:
            n = stack.pop()
            if isinstance(n, cst.Name):
                if n.value == name:
                    return True
                continue
            if isinstance(n, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                continue
            if isinstance(n, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.Del)):
                target = n.target
                while isinstance(target, (cst.Subscript, cst.Attribute)):
                    if isinstance(target, cst.Subscript):
                        stack.extend(iter_children(target.slice[0]) if len(target.slice) == 1 else target.slice)
                    target = target.value
                if isinstance(n, (cst.AugAssign, cst.AnnAssign)) and n.value is not None:
                    stack.append(n.value)
                continue
            if isinstance(n, cst.Expr) and isinstance(n.value, cst.Call) and isinstance(n.value.func, cst.Attribute):
                stack.extend(a.value for a in n.value.args)
                recv = n.value.func.value
                if not (isinstance(recv, cst.Name) and recv.value == name):
                    stack.append(recv)
                continue
            stack.extend(iter_children(n))
        return False

    # ---- Pallas refs -------------------------------------------------------------------------

    def is_pallas_ref_api(self, expr: cst.BaseExpression, scope: Scope) -> bool:
        """Whether `expr` names a Pallas call whose callable receives refs (`pl.pallas_call`,
        `pltpu.emit_pipeline`, `pl.run_scoped`…), bare or as `functools.partial(pl.pallas_call, …)`."""
        if isinstance(expr, cst.Call):
            if self.resolve(expr.func, scope) != "functools.partial" or not expr.args:
                return False
            expr = expr.args[0].value
        q = self.resolve(expr, scope)
        return q is not None and q.startswith(PALLAS_PACKAGES) and q.rsplit(".", 1)[-1] in PALLAS_REF_CALLS

    def is_ref(self, name: str, scope: Scope) -> bool:
        """Whether `name`, seen from `scope`, is bound to a Pallas `Ref`: a parameter of a function handed
        to `pallas_call`/`emit_pipeline`/`run_scoped` (scratch refs included), a parameter that receives such
        a ref from a call in this module, or a local bound only to a view of one (`o_ref.at[0]`)."""
        if self._refs is None:
            self._refs = {}
            _pallas_refs(self, self._refs)
        owner = self.owner_of(name, scope)
        return isinstance(owner, FunctionInfo) and name in self._refs.get(id(owner), ())

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

    def _params(self, params: cst.Parameters, scope: Scope) -> list[Param]:
        out: list[Param] = []
        idx = 0
        for p in list(params.posonly_params) + list(params.params):
            out.append(Param(p.name.value, idx, self._annotation(p.annotation, scope), p.default is not None, p.default))
            idx += 1
        if isinstance(params.star_arg, cst.Param):
            out.append(Param(params.star_arg.name.value, None, None, False, None, "*"))
        for p in params.kwonly_params:
            out.append(Param(p.name.value, None, self._annotation(p.annotation, scope), p.default is not None, p.default))
        if params.star_kwarg is not None:
            out.append(Param(params.star_kwarg.name.value, None, None, False, None, "**"))
        return out

    def _annotation(self, ann: Optional[cst.Annotation], scope: Scope) -> Optional[str]:
        """The annotation's head name; NumPy's (`np.ndarray`, `npt.NDArray`) keep their module, since
        a NumPy array is mutable and concrete, unlike `jnp.ndarray`."""
        name = annotation_name(ann)
        if ann is None or name is None:
            return name
        expr = ann.annotation
        if name in CONTAINER_ANNOTATIONS and _scalar_items(expr):
            return "ScalarSequence"  # `tuple[str, ...]`: no array inside, static under equinox's filters
        while isinstance(expr, (cst.Subscript, cst.BinaryOperation)):
            if isinstance(expr, cst.BinaryOperation):
                expr = expr.left
            else:
                head = dotted(expr.value) or ""
                if head.split(".")[-1] == "Optional" and expr.slice and isinstance(expr.slice[0].slice, cst.Index):
                    expr = expr.slice[0].slice.value
                else:
                    expr = expr.value
        qual = self.m.resolve(expr, scope) if dotted(expr) else None
        if qual is not None and qual.startswith("numpy."):
            return f"numpy.{name}"
        return name

    def _new_function(self, node: FuncNode, name: str, scope: Scope, loop: Optional[LoopInfo]) -> FunctionInfo:
        qual = name if scope is self.m.root else f"{scope.qualname}.{name}"
        fn = FunctionInfo("function", name, qual, scope, node)
        fn.params = self._params(node.params, scope)
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
        _read_class_fields(self.m, cls, node, scope)

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
            scope.bind_loops.setdefault(name, []).append(loop)
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
            scope.bind_loops.setdefault(node.target.value, []).append(loop)
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
        self.guards = saved | _scalar_guard_names(node.test) | _none_tests(node.test)
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

    def on_subscript(self, node: cst.Subscript, scope: Scope, loop: Optional[LoopInfo]) -> None:
        if isinstance(node.value, cst.Name) and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index) \
                and isinstance(node.slice[0].slice.value, cst.Name) and isinstance(scope, FunctionInfo):
            scope.key_subscripts.add((node.value.value, node.slice[0].slice.value.value))
        for child in iter_children(node):
            self.walk(child, scope, loop)

    def on_call(self, node: cst.Call, scope: Scope, loop: Optional[LoopInfo]) -> None:
        self.m.call_order[id(node)] = self.counter
        if isinstance(node.func, cst.Call):
            self.m.applied_calls.add(id(node.func))
            self.m.applied_parent[id(node.func)] = node
        elif isinstance(node.func, cst.Attribute) and isinstance(node.func.value, cst.Call) \
                and node.func.attr.value in ("lower", "trace", "eval_shape"):
            self.m.applied_parent[id(node.func.value)] = node  # jax.jit(f).lower(args): f receives args
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
    cst.Subscript: _Builder.on_subscript,
    cst.BooleanOperation: _Builder.on_booleanoperation,
}


# ---------------------------------------------------------------------------------------------
# Registered pytree classes and their static (aux data) fields.

_REGISTER_CALLS = frozenset({
    "jax.tree_util.register_dataclass", "jax.tree_util.register_pytree_node_class",
    "jax.tree_util.register_pytree_node", "jax.tree_util.register_pytree_with_keys",
    "jax.tree_util.register_pytree_with_keys_class", "jax.tree_util.register_static",
})


def _is_const(expr: Optional[cst.BaseExpression], value: str) -> bool:
    return isinstance(expr, cst.Name) and expr.value == value


def _field_is_static(model: "ModuleModel", value: cst.BaseExpression, scope: Scope) -> bool:
    """Whether a class-body default such as `field(pytree_node=False)` declares an aux-data field."""
    if not isinstance(value, cst.Call):
        return False
    qual = model.resolve(value.func, scope) or dotted(value.func) or ""
    last = qual.rsplit(".", 1)[-1]
    if last == "static_field":  # jax-md's dataclasses.static_field(), equinox's old spelling
        return True
    if last not in ("field", "Field"):
        return False
    for a in value.args:
        kw = a.keyword.value if a.keyword is not None else None
        if kw == "pytree_node" and _is_const(a.value, "False"):
            return True
        if kw == "static" and _is_const(a.value, "True"):
            return True
        if kw == "metadata" and isinstance(a.value, cst.Dict):
            for el in a.value.elements:
                if isinstance(el, cst.DictElement) and isinstance(el.key, cst.SimpleString):
                    key = el.key.evaluated_value
                    if (key == "static" and _is_const(el.value, "True")) or \
                            (key == "pytree_node" and _is_const(el.value, "False")):
                        return True
    return False


def _register_options(model: "ModuleModel", cls: ClassInfo, call: cst.Call, scope: Scope, first: int) -> None:
    """`register_dataclass(Cls, data_fields=[...], meta_fields=[...])` (or as a decorator)."""
    for i, a in enumerate(call.args):
        kw = a.keyword.value if a.keyword is not None else None
        if kw is None and i - first == 1:
            kw = "data_fields"
        elif kw is None and i - first == 2:
            kw = "meta_fields"
        if kw in ("meta_fields", "data_fields"):
            names = _literal_values(a.value, _str_leaf)
            if names is not None:
                (cls.static_fields if kw == "meta_fields" else cls.fields).update(names)


def _flatten_aux(fn: "FunctionInfo", owner: str = "self") -> set[str]:
    """`self.x` attributes returned in the aux part of a flatten function: `return children, (self.a,)`."""
    out: set[str] = set()
    if not isinstance(fn.node, cst.FunctionDef):
        return out
    for stmt in _returns(fn.node.body):
        value = stmt.value
        if isinstance(value, cst.Tuple) and len(value.elements) == 2:
            aux = value.elements[1].value
            parts = [el.value for el in aux.elements] if isinstance(aux, (cst.Tuple, cst.List)) else [aux]
            for part in parts:
                if isinstance(part, cst.Attribute) and isinstance(part.value, cst.Name) and part.value.value == owner:
                    out.add(part.attr.value)
    return out


def _returns(node: cst.CSTNode) -> Iterator[cst.Return]:
    """Return statements of a function body, not of nested functions or classes."""
    for child in iter_children(node):
        if isinstance(child, cst.Return):
            yield child
        elif not isinstance(child, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            yield from _returns(child)


def _read_class_fields(model: "ModuleModel", cls: ClassInfo, node: cst.ClassDef, scope: Scope) -> None:
    for stmt in node.body.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                    cls.fields.add(small.target.value)
                    if small.value is not None and _field_is_static(model, small.value, cls):
                        cls.static_fields.add(small.target.value)
    for d in node.decorators:
        expr = d.decorator
        call = expr if isinstance(expr, cst.Call) else None
        qual = model.resolve(call.func if call is not None else expr, scope)
        first = 0
        if qual == "functools.partial" and call is not None and call.args:
            qual = model.resolve(call.args[0].value, scope)
            first = 0  # partial(register_dataclass, data_fields=..., meta_fields=...): keywords only
        if qual in _REGISTER_CALLS or qual in PYTREE_CLASS_DECORATORS:
            cls.pytree = True
            if call is not None:
                _register_options(model, cls, call, scope, first if qual != "functools.partial" else 0)
            if qual == "jax.tree_util.register_static":
                cls.static_fields.update(cls.fields)
    if any(d in PYTREE_CLASS_DECORATORS for d in cls.decorators):
        cls.pytree = True
    if any(b in PYTREE_BASES or b in ("typing.NamedTuple", "NamedTuple")
           or (b.endswith(("Module", "PyTreeNode")) and b.startswith(("equinox", "flax.struct", "flax.nnx")))
           for b in cls.bases):
        cls.pytree = True
    for b in cls.bases:  # a subclass of a registered pytree class of this module is one too
        base = model.root.classes.get(b)
        if base is not None and base is not cls and base.pytree:
            cls.pytree = True
            cls.fields |= base.fields
            cls.static_fields |= base.static_fields
    flatten = cls.defs.get("tree_flatten")
    if flatten is not None:
        cls.static_fields |= _flatten_aux(flatten)


# ---------------------------------------------------------------------------------------------
# Pass 2: which functions are traced, with which parameters traced, to a fixed point.


def _scalar_guard_names(e: cst.BaseExpression) -> frozenset[str]:
    """Names that a true `e` proves to be Python scalars: `isinstance(n, int)` (and conjunctions)."""
    if isinstance(e, cst.BooleanOperation) and isinstance(e.operator, cst.And):
        return _scalar_guard_names(e.left) | _scalar_guard_names(e.right)
    if isinstance(e, cst.Call) and dotted(e.func) == "isinstance" and len(e.args) == 2:
        kinds = e.args[1].value
        names = [el.value for el in kinds.elements] if isinstance(kinds, cst.Tuple) else [kinds]
        subject = e.args[0].value
        if isinstance(subject, cst.Name) and all(dotted(n) in _PY_SCALARS for n in names):
            return frozenset({subject.value})
        # `isinstance(x[0], np.ndarray)` is false for a tracer: the branch never runs under a trace.
        while isinstance(subject, (cst.Subscript, cst.Attribute)):
            subject = subject.value
        if isinstance(subject, cst.Name) and all(dotted(n) in _NUMPY_ARRAY_TYPES for n in names):
            return frozenset({subject.value})
    return frozenset()


def _scalar_items(expr: cst.BaseExpression) -> bool:
    """`tuple[str, ...]`, `Sequence[int] | None`: a container annotation whose items are Python scalars."""
    if isinstance(expr, cst.BinaryOperation):
        return _scalar_items(expr.left) and _is_const(expr.right, "None")
    if not isinstance(expr, cst.Subscript):
        return False
    for el in expr.slice:
        item = el.slice.value if isinstance(el.slice, cst.Index) else None
        if isinstance(item, cst.Ellipsis):
            continue
        if item is None or dotted(item) not in ("str", "int", "float", "bool"):
            return False
    return True


def _none_tests(e: cst.BaseExpression) -> frozenset[str]:
    """`if x is None:` → {"none:x"}: the branch runs only when `x` was not given."""
    if isinstance(e, cst.Comparison) and isinstance(e.left, cst.Name) and len(e.comparisons) == 1 \
            and isinstance(e.comparisons[0].operator, cst.Is) and _is_const(e.comparisons[0].comparator, "None"):
        return frozenset({f"none:{e.left.value}"})
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


def _pallas_refs(m: ModuleModel, refs: dict[int, set[str]]) -> None:
    """Fill `refs` with the names bound to Pallas refs, per function (by id): seeded by the callables handed
    to Pallas, then followed through calls that pass a ref on and through locals bound to views of a ref."""

    def add(fn: FunctionInfo, names: set[str]) -> bool:
        have = refs.setdefault(id(fn), set())
        new = names - have
        have |= new
        return bool(new)

    for fn in m.functions:  # @functools.partial(pl.pallas_call, out_shape=…) on the kernel itself
        outer = fn.parent or m.root
        if any(m.is_pallas_ref_api(d.decorator, outer) for d in fn.decorators):
            add(fn, {p.name for p in fn.params})
    for call, scope, _loop in m.all_calls:
        target: Optional[cst.BaseExpression] = None
        if isinstance(call.func, cst.Call) and m.is_pallas_ref_api(call.func, scope):
            target = call.args[0].value if call.args else None  # partial(pl.pallas_call, …)(kernel)
        elif m.is_pallas_ref_api(call.func, scope):
            target = _arg(call, 0, "kernel") or _arg(call, 0, "body") or _arg(call, 0, "f")
        ref = m.resolve_callable(target, scope) if target is not None else None
        if ref is not None:
            positional = [p for p in ref.fn.params if p.index is not None][:ref.offset]
            add(ref.fn, {p.name for p in ref.fn.params
                         if p not in positional and p.name not in ref.bound_names and p.star != "**"})
    for _ in range(10):
        changed = False
        for fn in m.functions:
            for target, value, how in fn.events:  # o = o_ref.at[0]: a view of a ref is a ref
                if how == "=" and isinstance(target, cst.Name) and value is not None:
                    root = value
                    while isinstance(root, (cst.Attribute, cst.Subscript)):
                        root = root.value
                    if root is not value and isinstance(root, cst.Name) and root.value != target.value \
                            and m.is_ref(root.value, fn) and all(
                                v is not None and isinstance(v, (cst.Attribute, cst.Subscript))
                                for v in fn.assigned.get(target.value, [])):
                        changed |= add(fn, {target.value})
        for call, scope, _loop in m.all_calls:
            names = [a for a in call.args if not a.star and isinstance(a.value, cst.Name)
                     and m.is_ref(a.value.value, scope)]
            if not names:
                continue
            ref = m.resolve_callable(call.func, scope)
            if ref is None:
                continue
            args = [ArgInfo(str(a.star), a.keyword.value if a.keyword is not None else None,
                            isinstance(a.value, cst.Name) and m.is_ref(a.value.value, scope) and not a.star, False)
                    for a in call.args]
            mapped, _ = _map_args(ref.fn, ref.offset, args)
            changed |= add(ref.fn, {n for n in mapped if ref.fn.param(n) is not None and ref.fn.param(n).star == ""})
        if not changed:
            break


class _Tracer:
    def __init__(self, model: ModuleModel) -> None:
        self.m = model
        self.changed = False

    def run(self, external: list["ExternalCall"]) -> None:
        m = self.m
        self.seed_external(external, m.path)
        # Seeds: decorators, transform calls and control-flow bodies anywhere in the module.
        decorated = []
        for fn in m.functions:
            outer = fn.parent or m.root
            for deco in fn.decorators:
                got = m.transform_of(deco.decorator, outer)
                if got is not None:
                    decorated.append((fn, got))
                    if got[0].statics == "custom":
                        fn.declared_static |= static_param_names(fn, got[0], got[1], 0) or set()
        for fn, (t, opts) in decorated:
            fn.trace_sites.add((fn.parent or m.root, -1))  # traced wherever it is called
            self.seed(fn, t, opts, offset=0, bound=frozenset(), abstract=t.abstract, site_fn=None)
        self.seed_calls()
        rules = [(c, s) for c, s, _ in m.all_calls
                 if isinstance(c.func, cst.Attribute) and c.func.attr.value in ("defvjp", "defjvp")]
        rounds = 0
        while True:
            self.changed = False
            before = sum(len(f.traced_names) for f in m.functions)
            for fn in [f for f in m.functions if f.traced]:
                Values(m, fn).solve()
                self.follow_calls(fn)
            for call, scope in rules:
                self.seed_derivative_rules(call, scope)
            rounds += 1
            # Summaries (a helper's return value) feed back into callers: stop only when nothing moved.
            moved = sum(len(f.traced_names) for f in m.functions) != before
            if not (self.changed or moved) or rounds > 50:
                break
        m.summaries_final = True
        for fn in m.functions:
            if fn.traced and not fn.traced_names:
                Values(m, fn).solve()
        self.complete_roots()

    def complete_roots(self) -> None:
        """A body seeded before its enclosing function was known to be traced has no root yet."""
        by_name = {f.qualname: f for f in self.m.functions}
        for fn in self.m.functions:
            t = fn.target
            if t is None or t.root is not None or not t.via:
                continue
            outer = by_name.get(t.via[0])
            if outer is not None and outer.target is not None and outer.target.transform != "helper" \
                    and outer is not fn:
                fn.target = dataclasses.replace(t, root=outer.target.root or outer.target)

    def seed_calls(self) -> None:
        m = self.m
        for call, scope, _loop in m.all_calls:
            site_fn = scope.function_scope()
            site_abstract = bool(site_fn is not None and site_fn.traced and site_fn.abstract)
            site_cached = bool(site_fn is not None and site_fn.traced and site_fn.cached)
            self.seed_call(call, scope, site_fn, site_abstract, site_cached)

    def seed_call(self, call: cst.Call, scope: Scope, site_fn: Optional[FunctionInfo], site_abstract: bool,
                  site_cached: bool = False, outer: Optional[Transform] = None) -> None:
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
            if got.statics == "shard_map" and len(positional) > 2 and "in_specs" not in opts:
                opts["in_specs"] = positional[2]
        elif isinstance(call.func, cst.Call):
            if self.seed_application(call, scope, site_fn, site_abstract, site_cached):
                return
            tr = m.transform_of(call.func, scope)
            if tr is not None:
                got, opts = tr
        if got is not None:
            if got.statics == "grad" and id(call) in m.applied_calls and _argnums(opts) is not None \
                    and call.args and call.args[0].keyword is None and not call.args[0].star:
                return  # `jax.grad(f)(x, flag)`: seeded from the application, which knows the arguments
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
                    # jax.jit(jax.grad(f)): f runs under both transforms, abstract and cached as the outer.
                    self.seed_call(fexpr, scope, site_fn, got.abstract or site_abstract, got.cached or site_cached,
                                   outer=outer or (got if got.cached else None))
                    return
                if ref is not None:
                    ref.fn.trace_sites.add((scope, m.call_order.get(id(call), 0)))
                    self.seed(ref.fn, got, opts, ref.offset, ref.bound_names, got.abstract or site_abstract,
                              site_fn=None, cached=site_cached, outer=outer, lead=ref.lead,
                              application=m.applied_parent.get(id(call)))
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
                        self.seed(ref.fn, t, {}, ref.offset, ref.bound_names, True, site_fn=site_fn,
                                  cached=site_cached, passed=_body_arity(kind, call))
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

    def seed_derivative_rules(self, call: cst.Call, scope: Scope) -> None:
        """`f.defvjp(fwd, bwd)` / `f.defjvp(jvp)`: the rules run wherever `f` is differentiated, as
        abstractly as `f` itself; nondiff arguments come first and stay Python values."""
        m = self.m
        assert isinstance(call.func, cst.Attribute)
        primal = m.resolve_callable(call.func.value, scope)
        if primal is None or not primal.fn.traced:
            return
        f = primal.fn
        nondiff = [p.name for p in f.params if p.name in f.declared_static]
        for i, a in enumerate(call.args[:2]):
            ref = m.resolve_callable(a.value, scope)
            if ref is None or ref.fn is f:
                continue
            rule = ref.fn
            if call.func.attr.value == "defvjp" and i == 0:  # fwd: the primal's own signature
                rule.declared_static |= {p.name for p in rule.params if p.name in f.declared_static}
                traced = {p.name for p in rule.params if p.name in f.traced_params}
            else:  # bwd(*nondiff, res, g) / jvp(*nondiff, primals, tangents)
                positional = [p for p in rule.params if p.index is not None]
                rule.declared_static |= {p.name for p in positional[:len(nondiff)]}
                passed = positional[len(nondiff):len(nondiff) + 2]  # (res, g) / (primals, tangents)
                traced = {p.name for p in passed} | {p.name for p in rule.params if p.star == "*"}
            if rule.target is None:
                rule.target = TraceTarget(rule.qualname, 0, "helper", (), (), (f.qualname,), _root(f))
            self.mark(rule, traced, f.abstract, f.cached, f.target.transform if f.target else "helper", None)

    def seed_application(self, call: cst.Call, scope: Scope, site_fn: Optional[FunctionInfo], site_abstract: bool,
                         site_cached: bool) -> bool:
        """`jax.grad(f, argnums=...)(args)`: the `argnums` parameters are traced; the others receive the
        call's arguments as they are (a literal flag stays a Python value)."""
        m = self.m
        inner = call.func
        assert isinstance(inner, cst.Call)
        qual = m.resolve(inner.func, scope)
        t = m.transforms.get(qual) if qual is not None else None
        if t is None or t.statics != "grad" or not inner.args or inner.args[0].keyword is not None \
                or inner.args[0].star:
            return False
        opts = {a.keyword.value: a.value for a in inner.args if a.keyword is not None}
        nums = _argnums(opts)
        ref = m.resolve_callable(inner.args[0].value, scope)
        if nums is None or ref is None:
            return False
        values = Values(m, site_fn) if site_fn is not None and site_fn.traced else None
        args = _arg_infos(call, site_fn, values)
        traced, pytrees = _map_args(ref.fn, ref.offset, args)
        usable = [p for p in ref.fn.params if p.index is not None][ref.offset:]
        for n in nums:
            if -len(usable) <= n < len(usable):
                traced.add(usable[n].name)
                pytrees.add(usable[n].name)
        traced -= ref.bound_names
        if ref.fn.target is None:
            ref.fn.target = TraceTarget(ref.fn.qualname, 0, t.kind, (), (), _via(site_fn), _root(site_fn))
        self.mark(ref.fn, traced, t.abstract or site_abstract, t.cached or site_cached, t.kind, None, pytrees)
        return True

    def seed(self, fn: FunctionInfo, t: Transform, opts: dict[str, cst.BaseExpression], offset: int,
             bound: frozenset[str], abstract: bool, site_fn: Optional[FunctionInfo], cached: bool = False,
             outer: Optional[Transform] = None, passed: int = 0, lead: int = 0,
             application: Optional[cst.Call] = None) -> None:
        """`passed`: how many leading positional parameters the transform always fills (a control-flow
        body's carry and element), whatever their defaults say."""
        statics = static_param_names(fn, t, opts, offset, lead)
        positional = [p for p in fn.params if p.index is not None]
        bound_pos = {p.name for p in positional[:offset]}
        given = {p.name for p in fn.params if not p.has_default}
        if application is not None and not lead:  # `jax.jit(f)(x, rng)`, `jax.jit(f).lower(x, rng_shape)`
            given |= _passed_names(CallableRef(fn, offset, frozenset(bound)), application, None)
        _note_passed(fn, given | {p.name for p in positional[offset:offset + passed]} | bound_pos | set(bound))
        traced = set()
        for p in fn.params:
            if p.name in bound_pos or p.name in bound:
                continue
            if statics is None or p.name in statics:
                continue
            if offset == 0 and fn.is_method and p is fn.params[0]:
                continue  # self/cls: see jit-method-self
            if _is_literal(p.default) and not (p.index is not None and p.index - offset < passed):
                continue  # a flag with a Python default: a constant unless a caller passes it
            traced.add(p.name)
        if lead and offset and fn.is_method:
            traced.add(fn.params[0].name)  # `jax.jit(model.apply)`: the variables, hence the module's, are traced
        if fn.target is None or (fn.target.transform == "helper" and site_fn is None):
            static_nums = tuple(p.index - offset for p in positional
                                if statics is not None and p.name in statics and p.index is not None and p.index >= offset)
            # Under an outer cached transform (`jax.jit(jax.vmap(f))`) the verifier re-traces through it.
            kind = outer.kind if outer is not None else t.kind
            fn.target = TraceTarget(fn.qualname, 0, kind,
                                    static_nums, tuple(sorted(statics or ())), _via(site_fn), _root(site_fn))
        # Under equinox's filter transforms non-array leaves stay static, so attributes are not leaves.
        self.mark(fn, traced, abstract, t.cached or cached, t.kind, None,
                  pytrees=set() if t.statics == "filter" else traced)

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
        new = params - fn.traced_params - fn.declared_static
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
                    # transforms applied inside traced code: abstract (and cached) if the site is
                    self.seed_call(call, fn, fn, fn.abstract, fn.cached)
                continue
            if isinstance(call.func, cst.Call):
                self.seed_call(call, fn, fn, fn.abstract, fn.cached)
            if qual == "builtins.map" and len(call.args) > 1:
                ref = m.resolve_callable(call.args[0].value, fn)
                if ref is not None:  # map(f, xs): f gets the elements
                    elems = [ArgInfo("", None, values.traced(a.value), False) for a in call.args[1:]]
                    traced, _ = _map_args(ref.fn, ref.offset, elems)
                    self.mark(ref.fn, traced, fn.abstract, fn.cached, "helper", fn)
                continue
            if qual in TREE_MAPS:
                self.seed_call(call, fn, fn, fn.abstract, fn.cached)
                continue
            ref = m.resolve_callable(call.func, fn, call)
            args = _arg_infos(call, fn, values)
            if ref is None:
                # Across files, follow only calls made by a function a transform traces directly
                # (`train_step` -> `losses.loss_fn`): longer chains through library internals were
                # measured to be mostly noise.
                direct = fn.target is not None and fn.target.transform != "helper"
                if direct and qual is not None and not qual.startswith("builtins.") and any(a.traced for a in args):
                    m.external_calls[id(call)] = ExternalCall(qual, tuple(args), fn.abstract, fn.cached, fn.qualname)
                elif direct:  # `models.CNN().apply(variables, x)`: a method of a module class imported from elsewhere
                    method = m.frameworks.imported_method(call, fn, values, args)
                    if method is not None:
                        m.external_calls[id(call)] = ExternalCall(method[0], method[1], fn.abstract, fn.cached,
                                                                  fn.qualname)
                continue
            if ref.fn is fn:
                continue
            _note_passed(ref.fn, _passed_names(ref, call, fn) if not ref.lead
                         else {p.name for p in ref.fn.params if not p.has_default})
            receiver = ref.receiver is not None and values.traced(ref.receiver)
            if ref.lead:  # linen's `apply(variables, ...)`: traced variables make the module's own traced
                receiver = any(a.traced for a in args[:ref.lead] if not a.star and a.keyword is None)
                args = args[ref.lead:] if all(not a.star and a.keyword is None for a in args[:ref.lead]) else []
            traced, pytrees = _map_args(ref.fn, ref.offset, args)
            if receiver and ref.offset and ref.fn.is_method:
                traced.add(ref.fn.params[0].name)  # a traced instance: its array leaves are traced in the method
            self.mark(ref.fn, traced, fn.abstract, fn.cached, "helper", fn, pytrees)

    def seed_external(self, calls: list["ExternalCall"], origin: str) -> None:
        """Calls into this module from traced code in other files of the project."""
        m = self.m
        for ext in calls:
            fn = m.root.defs.get(ext.qualname.rsplit(".", 1)[-1])
            if "." in ext.qualname:  # `Class.method` of a model module class: `self` is the first argument
                fn = m.frameworks.method_named(ext.qualname)
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


def _dead(fn: FunctionInfo, guards: frozenset[str]) -> bool:
    """`if rng is None:` where every traced caller passes an `rng`: the branch never runs traced."""
    return fn.passed is not None and any(g.startswith("none:") and g[5:] in fn.passed for g in guards)


def _note_passed(fn: FunctionInfo, names: set[str]) -> None:
    fn.passed = set(names) if fn.passed is None else fn.passed & names


def _passed_names(ref: "CallableRef", call: cst.Call, caller: Optional[FunctionInfo]) -> set[str]:
    """Parameters this call (with what `partial` bound) gives a value that cannot be None."""
    fn = ref.fn
    positional = [p for p in fn.params if p.index is not None]
    out = {p.name for p in positional[:ref.offset]} | set(ref.bound_names)

    def not_none(value: cst.BaseExpression) -> bool:
        if _is_const(value, "None"):
            return False
        if isinstance(value, cst.Name) and caller is not None:
            p = caller.param(value.value)
            if p is not None and p.has_default and _is_const(p.default, "None"):
                return caller.passed is not None and p.name in caller.passed
        return True

    pos = ref.offset
    for a in call.args:
        if a.star:
            return out | {p.name for p in fn.params if not p.has_default}
        if a.keyword is not None:
            if not_none(a.value):
                out.add(a.keyword.value)
        elif pos < len(positional):
            if not_none(a.value):
                out.add(positional[pos].name)
            pos += 1
    return out


def _arg_infos(call: cst.Call, fn: Optional[FunctionInfo], values: Optional["Values"]) -> list[ArgInfo]:
    """The arguments of a call as tracing sees them; `*xs` of a list literal (or of a local name bound
    once to one) is spread into its elements, so each parameter gets its own element."""
    out: list[ArgInfo] = []

    def one(star: str, kw: Optional[str], value: cst.BaseExpression) -> ArgInfo:
        t = values is not None and values.traced(value)
        return ArgInfo(star, kw, t, t and values.is_pytree(value), t and values.is_array_like(value))  # type: ignore[union-attr]

    for a in call.args:
        if a.star == "*":
            seq = a.value
            if isinstance(seq, cst.Name) and fn is not None and fn.param(seq.value) is None:
                bound = fn.assigned.get(seq.value, [])
                seq = bound[0] if len(bound) == 1 and bound[0] is not None else seq
            if isinstance(seq, (cst.List, cst.Tuple)) and not any(isinstance(e, cst.StarredElement) for e in seq.elements):
                out.extend(one("", None, e.value) for e in seq.elements)
                continue
        out.append(one(str(a.star), a.keyword.value if a.keyword is not None else None, a.value))
    return out


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


def static_param_names(fn: FunctionInfo, t: Transform, opts: dict[str, cst.BaseExpression], offset: int,
                       lead: int = 0) -> Optional[set[str]]:
    """Names of parameters JAX treats as static under this transform; None when unknowable.

    `lead` arguments of the transformed callable come before the function's own (linen's and haiku's
    `apply` take variables first): argument indices count them, parameters do not receive them."""
    positional = [p for p in fn.params if p.index is not None]
    out: set[str] = set()

    def by_index(expr: cst.BaseExpression) -> bool:
        nums = _literal_values(expr, _int_leaf)
        if nums is None:
            return False
        usable = positional[offset:]
        for n in nums:
            n = n - lead if n >= lead else (n if n < 0 else len(usable))
            if -len(usable) <= n < len(usable):
                out.add(usable[n].name)
        return True

    def by_position(spec: Optional[cst.BaseExpression]) -> None:
        """`in_axes=(None, 0)` / `in_specs=(P(), None)`: the argument at a `None` is passed through."""
        if isinstance(spec, (cst.Tuple, cst.List)):
            usable: list[Optional[Param]] = [None] * lead + positional[offset:]
            for i, el in enumerate(spec.elements):
                p = usable[i] if i < len(usable) else None
                if p is not None and _is_const(el.value, "None"):
                    out.add(p.name)

    def by_name(expr: cst.BaseExpression) -> bool:
        names = _literal_values(expr, _str_leaf)
        out.update(names or ())
        return names is not None

    # transform kind -> (option naming static positions, option naming static parameters)
    options = {"jit": ("static_argnums", "static_argnames"), "pmap": ("static_broadcasted_argnums", ""),
               "custom": ("nondiff_argnums", "nondiff_argnames")}
    if t.statics in options:
        nums, names = options[t.statics]
        if nums in opts and not by_index(opts[nums]):
            return None
        if names and names in opts and not by_name(opts[names]):
            return None
    elif t.statics == "shard_map":
        # An argument whose in_spec is None is passed through as the Python value it is.
        by_position(opts.get("in_specs"))
    elif t.statics == "vmap":
        axes = opts.get("in_axes")
        if axes is not None:
            if isinstance(axes, cst.Name) and axes.value == "None":
                return None
            by_position(axes)
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


def _body_arity(kind: str, call: cst.Call) -> int:
    """How many positional arguments a control-flow primitive passes to its body."""
    positional = sum(1 for a in call.args if a.keyword is None and not a.star)
    if kind in ("scan", "fori_loop", "associative_scan", "custom_root"):
        return 2
    if kind in ("while_loop", "map"):
        return 1
    if kind == "odeint":  # func(y, t, *args)
        return 2 + max(0, positional - 3)
    if kind in ("cond", "switch"):  # branch(*operands)
        return max(0, positional - (3 if kind == "cond" else 2))
    return 0


def _argnums(opts: dict[str, cst.BaseExpression]) -> Optional[list[int]]:
    """The `argnums` of a grad-like transform (default 0), or None when not a literal."""
    if "argnums" not in opts:
        return [0]
    return _literal_values(opts["argnums"], _int_leaf)


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
        dicts = {p.name for p in fn.params if p.annotation in _DICT_ANNOTATIONS}
        for target, value, how in fn.events:
            if how == "=" and isinstance(target, cst.Name) and isinstance(value, (cst.Dict, cst.DictComp)):
                dicts.add(target.value)
            if how == "=" and isinstance(target, cst.Name) and isinstance(value, cst.Call) \
                    and self.m.resolve(value.func, fn) in LIST_RETURNING:
                containers.add(target.value)  # `leaves = jax.tree_util.tree_leaves(x)`: `if not leaves:` is static
        for call in fn.calls:  # `params.items()`, `batch.get("x")`, `len(xs)`: the name holds a container
            f = call.func
            if isinstance(f, cst.Attribute) and isinstance(f.value, cst.Name) and f.attr.value in _DICT_METHODS:
                containers.add(f.value.value)
                dicts.add(f.value.value)
            elif isinstance(f, cst.Name) and f.value == "len" and len(call.args) == 1 \
                    and isinstance(call.args[0].value, cst.Name):
                containers.add(call.args[0].value.value)
        for target, value, how in fn.events:  # `for i, g in enumerate(grads):` — grads is a sequence
            if how == "for" and value is not None:
                it = value
                if isinstance(it, cst.Call) and isinstance(it.func, cst.Name) and it.func.value in ("enumerate", "zip") \
                        and it.args:
                    it = it.args[0].value
                if isinstance(it, cst.Name):
                    containers.add(it.value)
        fn.container_names = containers
        fn.dict_names = dicts
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
                    if isinstance(target, cst.Name) and isinstance(value, cst.Name) \
                            and (value.value, target.value) in fn.key_subscripts:
                        continue  # `for k in d: ... d[k]`: iterating a mapping gives its keys
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
            rows = [e.value for e in it.elements]
            if rows and all(isinstance(r, cst.Tuple) and len(r.elements) == len(rows[0].elements) for r in rows):
                # `for name, a, b in [("i2t", x, y), ...]`: position by position
                return [any(self.traced(r.elements[i].value) for r in rows)  # type: ignore[attr-defined]
                        for i in range(len(rows[0].elements))]  # type: ignore[attr-defined]
            return any(self.traced(e.value) for e in it.elements)
        if isinstance(it, cst.Name) and it.value in self.fn.dict_names and it.value in self._locals:
            return False  # iterating a dict gives its keys: Python values even when the leaves are traced
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
            if self.m.static_field_names and self.m.is_static_field(e.value, e.attr.value, self.fn):
                return False  # an aux-data field of a registered pytree: a Python value
            if e.attr.value not in ARRAY_ATTRS and self.m.frameworks.instance_class(e.value, self.fn) is not None:
                return self.m.frameworks.attribute_traced(self, e)  # a model module: its fields say
            if e.attr.value in ARRAY_ATTRS or self.is_pytree(e.value):
                return self.traced(e.value)
            # An attribute of a traced Python object is usually configuration, unless a model framework
            # says it is an array leaf (`self.weight` of an equinox Module, `self.w.value` in nnx).
            return self.m.frameworks.attribute_traced(self, e)
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
        callee = self.m.summarised_callee(e, self.fn)
        if callee is not None:
            return not self.m.returns_traced(callee)  # `if converged(h, tol):` returns a traced comparison
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
            if qual == "jax.lax.psum" and e.args and _is_literal(e.args[0].value):
                return False  # psum of a Python constant is the axis size times it, a Python number
            if qual.startswith(STAGING_MODULES):
                return True
            if qual == "builtins.getattr" and len(e.args) >= 2:
                obj, attr = e.args[0].value, e.args[1].value
                if isinstance(attr, cst.SimpleString) and attr.evaluated_value in STATIC_ATTRS:
                    return False
                return self.is_pytree(obj) and self.traced(obj)
        func = e.func
        helper = self.m.summarised_callee(e, self.fn)
        if helper is not None:
            return self.m.returns_traced(helper)  # the helper's summary, not a guess from names or arguments
        callee = func.attr.value if isinstance(func, cst.Attribute) else (func.value if isinstance(func, cst.Name) else "")
        if _STATIC_NAME.search(callee) and (qual is None or not qual.startswith(STAGING_MODULES)):
            return False  # `pytree_size(x)`, `get_shape(x)`: functions named for static facts
        if isinstance(func, cst.Attribute):
            if func.attr.value in ("keys", "__len__") or func.attr.value in _STR_METHODS:
                return False  # `k.startswith("w")`: arrays have no such method, the receiver is a string
            if self.traced(func.value):
                return True  # a method of a traced value: x.sum(), x.astype(...)
        if qual == "builtins.map" and len(e.args) > 1:
            ref = self.m.resolve_callable(e.args[0].value, self.fn)
            if ref is not None and ref.fn.traced:
                return self.m.returns_traced(ref.fn)
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
