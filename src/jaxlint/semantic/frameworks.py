"""Model frameworks (equinox, flax nnx and linen, haiku, treex): which class an instance belongs to, which method a
call on it runs, and which of its attributes are array leaves rather than configuration.

The tracer asks `callable_of` when a call does not name a def (`model(x)`, `self.encoder(x)`,
`model.apply(variables, x, train=True)`, `net.apply(params, rng, x)`); the value oracle asks
`attribute_traced` about `self.weight`, `self.w.value` or `self.features` of a traced instance. Everything
is resolved within the module; when unsure the answer is "not known", and the model stays quiet.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Optional

import libcst as cst

from ..jaxapi import (
    ARRAY_ANNOTATIONS,
    HAIKU_TRANSFORMS,
    HAIKU_WITHOUT_RNG,
    LINEN_CLASS_LIFTS,
    MODULE_BASES,
    MODULE_PACKAGES,
    NNX_VARIABLES,
    STAGING_MODULES,
)
from ..syntax import _target_names

_FRAMEWORK_PACKAGES = frozenset({"flax", "equinox", "haiku", "treex", "treeo"})

from .scopes import FunctionInfo

if TYPE_CHECKING:
    from .model import ModuleModel
    from .scopes import CallableRef, ClassInfo, Scope
    from .traced import ArgInfo
    from .values import Values

# What an attribute of a module instance holds; PYTHON is configuration known to be a Python scalar (or a
# tuple of them), which an nnx Module keeps as static metadata of its pytree.
ARRAY, VARIABLE, MODULE, MODULES, CONFIG, PYTHON = "array", "variable", "module", "modules", "config", "python"
_LEAVES = frozenset({ARRAY, VARIABLE, MODULE, MODULES})
_SETTINGS = frozenset({CONFIG, PYTHON})
_SEQUENCES = frozenset({"list", "List", "tuple", "Tuple", "Sequence"})


class Frameworks:
    """Framework knowledge for one module model (answers are cached; the model is read only)."""

    def __init__(self, model: "ModuleModel") -> None:
        self.m = model
        self._kind: dict[int, Optional[str]] = {}
        self._fields: dict[int, dict[str, tuple[str, Optional["ClassInfo"]]]] = {}
        self._callers: Optional[dict[int, list[tuple[cst.Call, "Scope", int]]]] = None
        self._busy: set[int] = set()
        self._active: Optional[bool] = None
        self._instances: dict[tuple[int, int], tuple[cst.BaseExpression, Optional["ClassInfo"]]] = {}
        self._apply_fns: Optional[list[tuple[cst.Attribute, "Scope"]]] = None
        # (id of a class, attribute) -> the module classes of a list built from several (`layers.append(...)`)
        self._mixed: dict[tuple[int, str], list["ClassInfo"]] = {}

    @property
    def active(self) -> bool:
        """Whether this file imports a model framework at all: local module classes and library modules
        (`nn.Dense`) need one; most files of a project do not, and skip every question below."""
        if self._active is None:
            scopes: list["Scope"] = [self.m.root, *self.m.functions]
            self._active = any(q.split(".")[0] in _FRAMEWORK_PACKAGES
                               for sc in scopes for q in sc.imports.values())
        return self._active

    # ---- classes ----------------------------------------------------------------------------

    def kind(self, cls: "ClassInfo") -> Optional[str]:
        """eqx, nnx, linen or haiku for a model module class of this file (through its bases, here or in
        another project file), else None."""
        key = id(cls)
        if key not in self._kind:
            self._kind[key] = None  # cycles
            found = None
            for base in cls.bases:
                found = MODULE_BASES.get(base)
                local = self.m.root.classes.get(base)
                if found is None and local is not None and local is not cls:
                    found = self.kind(local)
                elif found is None and local is None and "." in base:
                    facts = self.m.ask("lookup", base, absent=None)  # `class JaxMoE(JaxModule)`, the base in another file
                    found = facts.module_kind if facts is not None else None
                if found:
                    break
            self._kind[key] = found
        return self._kind[key]

    def method(self, cls: "ClassInfo", name: str, depth: int = 0) -> Optional["FunctionInfo"]:
        """A method by name, looked up through the class's bases defined in this module."""
        if name in cls.defs:
            return cls.defs[name]
        for base in cls.bases:
            local = self.m.root.classes.get(base)
            if local is not None and local is not cls and depth < 8:
                found = self.method(local, name, depth + 1)
                if found is not None:
                    return found
        return None

    def module_class(self, expr: cst.BaseExpression, scope: "Scope") -> Optional["ClassInfo"]:
        """The framework class an expression names: `MLP`, `nn.remat(Block)`, or a name bound to `nn.scan(Block, ...)`."""
        if isinstance(expr, cst.Name):
            fn = scope.function_scope()
            if fn is not None and fn.is_classmethod and fn.cls is not None and fn.params[0].name == expr.value:
                return fn.cls if self.kind(fn.cls) else None  # `cls(...)` in a classmethod
            cls = self.m.root.classes.get(expr.value)
            if cls is not None and self.m.lookup_function(expr.value, scope) is None:
                return cls if self.kind(cls) else None
            values = self.m.root.assigned.get(expr.value, [])
            if len(values) == 1 and isinstance(values[0], cst.Call):
                return self.module_class(values[0], self.m.root)
            return None
        if isinstance(expr, cst.Call) and expr.args and self.m.resolve(expr.func, scope) in LINEN_CLASS_LIFTS:
            return self.module_class(expr.args[0].value, scope)
        return None

    # ---- instances --------------------------------------------------------------------------

    def instance_class(self, expr: cst.BaseExpression, scope: "Scope", depth: int = 0) -> Optional["ClassInfo"]:
        """The framework class of the instance an expression holds, when this module says so unambiguously."""
        if depth > 6 or not self.active:
            return None
        if depth == 0:  # structural facts of the file: the same answer every time it is asked
            key = (id(expr), id(scope))
            hit = self._instances.get(key)
            if hit is None or hit[0] is not expr:  # the node is kept, so its id cannot be reused
                hit = self._instances[key] = (expr, self._instance_class(expr, scope, 0))
            return hit[1]
        return self._instance_class(expr, scope, depth)

    def _instance_class(self, expr: cst.BaseExpression, scope: "Scope", depth: int) -> Optional["ClassInfo"]:
        if isinstance(expr, cst.Call):
            return self.module_class(expr.func, scope)
        if isinstance(expr, cst.Attribute):
            owner = self.instance_class(expr.value, scope, depth + 1)
            if owner is None:
                return None
            kind, cls = self.field(owner, expr.attr.value)
            return cls if kind == MODULE else None
        if isinstance(expr, cst.Subscript):
            owner_expr = expr.value
            if isinstance(owner_expr, cst.Attribute):
                owner = self.instance_class(owner_expr.value, scope, depth + 1)
                if owner is not None:
                    kind, cls = self.field(owner, owner_expr.attr.value)
                    return cls if kind == MODULES else None
            return None
        if isinstance(expr, cst.Name):
            return self._name_class(expr.value, scope, depth)
        return None

    def _name_class(self, name: str, scope: "Scope", depth: int) -> Optional["ClassInfo"]:
        from .scopes import FunctionInfo

        fn = scope.function_scope()
        if fn is not None and fn.is_method and fn.cls is not None and fn.params and fn.params[0].name == name:
            # (a classmethod's first parameter is the class: calling it constructs, it runs no `__call__`)
            return fn.cls if self.kind(fn.cls) and not fn.is_classmethod else None
        owner = self.m.owner_of(name, scope)
        if owner is None:
            return None
        if isinstance(owner, FunctionInfo):
            p = owner.param(name)
            if p is not None:
                return self._param_class(owner, p.name, depth)
            found: list[Optional[ClassInfo]] = []
            for target, value, how in owner.events:
                if how == "for" and value is not None and isinstance(target, (cst.Tuple, cst.List)):
                    source = _zipped(target, value, name)  # `for attn, block in zip(self.attns, self.blocks)`
                    if source is not None:
                        found.append(self._element_class(source, owner, depth))
                    elif any(name in _target_names(el.value) for el in target.elements):
                        return None
                    continue
                if not (isinstance(target, cst.Name) and target.value == name):
                    continue
                if how == "for" and value is not None:
                    found.append(self._element_class(value, owner, depth))
                elif how == "=" and value is not None:
                    found.append(self.instance_class(value, owner, depth + 1))
                else:
                    return None
            return _agree(found)
        if owner is self.m.root:
            return _agree([self.instance_class(v, owner, depth + 1) if v is not None else None
                           for v in owner.assigned.get(name, [])])
        return None

    def _element_class(self, it: cst.BaseExpression, scope: "Scope", depth: int) -> Optional["ClassInfo"]:
        """The class of the modules a `for` loop runs over (`for layer in self.layers`, `self.layers[1:]`)."""
        it = _unsliced(it)
        if isinstance(it, cst.Attribute):
            owner = self.instance_class(it.value, scope, depth + 1)
            if owner is not None:
                kind, cls = self.field(owner, it.attr.value)
                return cls if kind == MODULES else None
        return None

    def _param_class(self, fn: "FunctionInfo", name: str, depth: int) -> Optional["ClassInfo"]:
        p = fn.param(name)
        assert p is not None
        if p.annotation is not None:
            cls = self.m.root.classes.get(p.annotation)
            return cls if cls is not None and self.kind(cls) else None
        if id(fn) in self._busy or depth > 4:
            return None
        self._busy.add(id(fn))
        try:
            found = []
            for call, scope, lead in self.callers().get(id(fn), []):
                arg = _argument_for(call, fn, name, lead)
                if arg is not None:
                    found.append(self.instance_class(arg, scope, depth + 1))
            known = [c for c in found if c is not None]
            return known[0] if known and all(c is known[0] for c in known) else None
        finally:
            self._busy.discard(id(fn))

    def callers(self) -> dict[int, list[tuple[cst.Call, "Scope", int]]]:
        """Calls of each function of the module: `f(model)`, `jax.jit(f)(model)`, `step(model)` after
        `step = nnx.jit(f)` (a function that is handed straight to a transform and called)."""
        if self._callers is None:
            out: dict[int, list[tuple[cst.Call, "Scope", int]]] = {}
            for call, scope, _loop in self.m.all_calls:
                fn = self._called_def(call.func, scope)
                if fn is not None:
                    out.setdefault(id(fn), []).append((call, scope, 0))
            self._callers = out
        return self._callers

    def _called_def(self, func: cst.BaseExpression, scope: "Scope") -> Optional["FunctionInfo"]:
        if isinstance(func, cst.Name):
            fn = self.m.lookup_function(func.value, scope)
            if fn is not None:
                return fn
            owner = self.m.owner_of(func.value, scope)
            values = owner.assigned.get(func.value, []) if owner is not None else []
            if len(values) == 1 and isinstance(values[0], cst.Call):
                return self._called_def(values[0], owner)
            return None
        if isinstance(func, cst.Call) and func.args and self.m.transform_of(func.func, scope) is not None:
            inner = func.args[0].value
            return self.m.lookup_function(inner.value, scope) if isinstance(inner, cst.Name) else None
        return None

    # ---- attributes -------------------------------------------------------------------------

    def field(self, cls: "ClassInfo", attr: str) -> tuple[Optional[str], Optional["ClassInfo"]]:
        """What `instance.attr` holds: (ARRAY | VARIABLE | MODULE | MODULES | CONFIG, the module class if local)."""
        fields = self._fields.get(id(cls))
        if fields is None:
            fields = self._fields[id(cls)] = {}
            self._collect(cls, fields, 0)
        return fields.get(attr, (None, None))

    def python_attributes(self, cls: "ClassInfo") -> frozenset[str]:
        """The attributes an nnx Module (or a treex Module, a treeo Tree) class gives Python scalars: static
        metadata of its pytree, so Python values wherever an instance is traced (an equinox Module's are
        leaves under `jax.jit`)."""
        if self.kind(cls) not in ("nnx", "treeo"):
            return frozenset()
        self.field(cls, "")
        return frozenset(name for name, (k, _c) in self._fields[id(cls)].items() if k == PYTHON)

    def _collect(self, cls: "ClassInfo", fields: dict, depth: int) -> None:
        for base in cls.bases:  # inherited fields first, so the subclass's own win
            local = self.m.root.classes.get(base)
            if local is not None and local is not cls and depth < 8:
                self._collect(local, fields, depth + 1)
        kind = self.kind(cls)
        declared: dict[str, set] = {}  # class-level annotations (eqx fields, linen attributes) win
        seen: dict[str, set] = {}
        body = cls.node.body.body if isinstance(cls.node, cst.ClassDef) and isinstance(cls.node.body, cst.IndentedBlock) else ()
        for stmt in body:
            if not isinstance(stmt, cst.SimpleStatementLine):
                continue
            for small in stmt.body:
                if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                    declared.setdefault(small.target.value, set()).add(self._annotated(small, cls, kind))
                elif isinstance(small, cst.Assign) and kind == "linen":
                    for t in small.targets:
                        if isinstance(t.target, cst.Name):
                            seen.setdefault(t.target.value, set()).add(self._value_kind(small.value, cls, None))
        for init in ("__init__", "setup"):
            fn = cls.defs.get(init)
            if fn is None or not fn.params:
                continue
            me = fn.params[0].name
            built = self._appended(fn, me)  # lists filled by `append` (of the instance, or local)
            for target, value, how in fn.events:
                if isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name) \
                        and target.value.value == me and value is not None and how == "=":
                    attr = target.attr.value
                    inner = self._list_of(value, fn)
                    if (me, attr) in built and (isinstance(inner, (cst.List, cst.Tuple)) and not inner.elements
                                                or _is_attribute(inner, me, attr)):
                        continue  # `self.layers = []` before the appends, `self.layers = nnx.data(self.layers)` after
                    if isinstance(inner, cst.Name) and inner.value == "None":
                        continue  # `self.upsamplers = None` (or `nnx.data(None)`): an optional submodule, set or not
                    if isinstance(inner, cst.Name) and ("", inner.value) in built:
                        kind = self._modules_kind(built[("", inner.value)], cls, attr)  # `self.blocks = nnx.data(blocks)`
                    else:
                        kind = self._value_kind(value, fn, fn)
                    seen.setdefault(attr, set()).add(kind)
            for (owner, attr), kinds in built.items():
                if owner == me:
                    seen.setdefault(attr, set()).add(self._modules_kind(kinds, cls, attr))
        for table in (seen, declared):
            for name, kinds in table.items():
                fields[name] = kinds.pop() if len(kinds) == 1 else (None, None)
        for name, kinds in seen.items():  # `n: int` declared, `self.n = jnp.asarray(n)` stored: not a scalar
            if fields[name][0] == PYTHON and any(k in _LEAVES or k is None for k, _c in kinds):
                fields[name] = (CONFIG, None)

    def _appended(self, fn: "FunctionInfo", me: str) -> dict[tuple[str, str], list[tuple[Optional[str], Optional["ClassInfo"]]]]:
        """What `__init__` appends to lists: `self.layers.append(Block(...))` under (me, "layers"), a local
        `blocks.append(Block(...))` under ("", "blocks"); the kind of each value appended."""
        out: dict[tuple[str, str], list[tuple[Optional[str], Optional["ClassInfo"]]]] = {}
        for call in fn.calls:
            f = call.func
            if not (isinstance(f, cst.Attribute) and f.attr.value == "append" and len(call.args) == 1):
                continue
            r = f.value
            if isinstance(r, cst.Attribute) and isinstance(r.value, cst.Name) and r.value.value == me:
                key = (me, r.attr.value)
            elif isinstance(r, cst.Name) and r.value in fn.local_names and fn.param(r.value) is None:
                key = ("", r.value)
            else:
                continue
            value = call.args[0].value
            if isinstance(value, cst.Name) and value.value in fn.local_names and fn.param(value.value) is None:
                # `block = Block(...); self.blocks.append(block)`: what the local was bound to
                bound = [b.value for b in fn.bindings(value.value)]
                kinds = {self._value_kind(v, fn, fn) if v is not None else (None, None) for v in bound}
                out.setdefault(key, []).append(kinds.pop() if len(kinds) == 1 else (None, None))
                continue
            out.setdefault(key, []).append(self._value_kind(value, fn, fn))
        for key in [k for k in out if not k[0]]:  # a local list starts as a literal: `blocks = [Block(...)]`
            starts = [b.value for b in fn.bindings(key[1])]
            if not starts or any(not isinstance(v, (cst.List, cst.Tuple)) for v in starts):
                del out[key]
                continue
            for v in starts:
                out[key].extend(self._value_kind(el.value, fn, fn) for el in v.elements)  # type: ignore[union-attr]
        return out

    def _list_of(self, value: cst.BaseExpression, scope: "Scope") -> cst.BaseExpression:
        """The list a wrapper keeps as it is: `nnx.data(blocks)`, `nnx.List(blocks)`, `list(blocks)`."""
        if isinstance(value, cst.Call) and len(value.args) == 1 and not value.args[0].keyword \
                and self.m.resolve(value.func, scope) in ("flax.nnx.data", "flax.nnx.List", "builtins.list", "builtins.tuple"):
            return value.args[0].value
        return value

    def _modules_kind(self, kinds: list[tuple[Optional[str], Optional["ClassInfo"]]], cls: "ClassInfo", attr: str
                      ) -> tuple[Optional[str], Optional["ClassInfo"]]:
        """The kind of a list built from these values: modules of one class, or of several classes of this
        file (kept for the calls of its elements), or unknown."""
        if not kinds or any(k != MODULE for k, _c in kinds):
            return (None, None)
        classes = list(dict.fromkeys(c for _k, c in kinds if c is not None))
        if len(classes) == 1 and all(c is not None for _k, c in kinds):
            return (MODULES, classes[0])
        if all(c is not None for _k, c in kinds):
            self._mixed[(id(cls), attr)] = classes
        return (MODULES, None)

    def element_callables(self, expr: cst.BaseExpression, scope: "Scope") -> list["CallableRef"]:
        """The `__call__` methods a call of an element of a list of modules of several classes may run:
        `for layer in self.layers: x = layer(x)`, `self.blocks[0](x)`. Empty when not such a list."""
        from .scopes import CallableRef

        if not self.active:
            return []
        source: Optional[cst.BaseExpression] = None
        if isinstance(expr, cst.Subscript):
            source = expr.value
        elif isinstance(expr, cst.Name):
            owner = self.m.owner_of(expr.value, scope)
            if isinstance(owner, FunctionInfo) and owner.param(expr.value) is None:
                bound = [(_zipped(t, v, expr.value) if isinstance(t, (cst.Tuple, cst.List)) else v, how)
                         for t, v, how in owner.events if expr.value in _target_names(t)]
                if len(bound) == 1 and bound[0][1] == "for":
                    source = bound[0][0]
            scope = owner if isinstance(owner, FunctionInfo) else scope
        source = _unsliced(source) if source is not None else None
        if not isinstance(source, cst.Attribute):
            return []
        cls = self.instance_class(source.value, scope)
        if cls is None:
            return []
        self.field(cls, source.attr.value)
        classes = self._mixed.get((id(cls), source.attr.value), [])
        methods = [self.method(c, "__call__") for c in classes]
        if not methods or any(m is None or not m.is_method for m in methods):
            return []
        return [CallableRef(m, 1, receiver=expr) for m in methods if m is not None]

    def _annotated(self, node: cst.AnnAssign, cls: "ClassInfo", kind: Optional[str]) -> tuple[Optional[str], Optional["ClassInfo"]]:
        from ..syntax import annotation_name

        if isinstance(node.value, cst.Call) and self.m.resolve(node.value.func, cls) in ("equinox.field", "equinox.static_field"):
            if any(a.keyword is not None and a.keyword.value == "static" for a in node.value.args):
                return (CONFIG, None)
        ann = node.annotation.annotation
        if self.m.scalar_annotation(ann):
            return (PYTHON, None)
        if isinstance(ann, cst.Subscript) and (dotted_head(ann.value) or "") in _SEQUENCES:
            inner = ann.slice[0].slice if ann.slice else None
            if isinstance(inner, cst.Index):
                sub = self.module_class(inner.value, cls)
                return (MODULES, sub) if sub is not None else (CONFIG, None)
        head = annotation_name(node.annotation)
        if head in ARRAY_ANNOTATIONS:
            # A linen module is no pytree: its dataclass fields hold what it was built with, outside the
            # trace (only the variables `apply` is given are traced), whatever their annotation says.
            return (CONFIG, None) if kind == "linen" else (ARRAY, None)
        sub = self.module_class(ann, cls) if isinstance(ann, cst.Name) else None
        if sub is not None:
            return (MODULE, sub)
        qual = self.m.resolve(ann, cls) if isinstance(ann, (cst.Name, cst.Attribute)) else None
        if qual is not None and _library_module(qual):
            return (MODULE, None)
        return (CONFIG, None)

    def _value_kind(self, value: cst.BaseExpression, scope: "Scope", init: Optional["FunctionInfo"]
                    ) -> tuple[Optional[str], Optional["ClassInfo"]]:
        if isinstance(value, (cst.List, cst.Tuple)):
            elems = [self._value_kind(e.value, scope, init) for e in value.elements]
            classes = {c for k, c in elems}
            if elems and all(k == MODULE for k, _ in elems):
                return (MODULES, classes.pop() if len(classes) == 1 else None)
            if isinstance(value, cst.Tuple) and all(k == PYTHON for k, _ in elems):
                return (PYTHON, None)
            return (CONFIG, None) if all(k in _SETTINGS for k, _ in elems) else (None, None)
        if isinstance(value, cst.ListComp):
            k, c = self._value_kind(value.elt, scope, init)
            return (MODULES, c) if k == MODULE else (None, None) if k not in _SETTINGS else (CONFIG, None)
        if isinstance(value, cst.Call):
            cls = self.module_class(value.func, scope)
            if cls is not None:
                return (MODULE, cls)
            qual = self.m.resolve(value.func, scope)
            if isinstance(value.func, cst.Name) and self._local_variable(value.func.value):
                return (VARIABLE, None)
            if qual is not None:
                if qual in NNX_VARIABLES:
                    return (VARIABLE, None)
                if qual in ("flax.nnx.List", "flax.nnx.Sequential", "flax.linen.Sequential") and value.args:
                    return self._value_kind(value.args[0].value, scope, init) if qual.endswith("List") else (MODULE, None)
                if _library_module(qual):
                    return (MODULE, None)
                if qual.startswith(STAGING_MODULES) or qual in ("haiku.get_parameter", "haiku.get_state"):
                    return (ARRAY, None)
            if init is not None and isinstance(value.func, cst.Attribute) and isinstance(value.func.value, cst.Name) \
                    and value.func.value.value == init.params[0].name:
                if value.func.attr.value == "param":
                    return (ARRAY, None)
                if value.func.attr.value == "variable":
                    return (VARIABLE, None)
            return (None, None)
        if isinstance(value, cst.Name) and init is not None:
            p = init.param(value.value)
            if p is not None:
                if p.annotation in ARRAY_ANNOTATIONS:
                    return (ARRAY, None)
                sub = self.m.root.classes.get(p.annotation or "")
                if sub is not None and self.kind(sub):
                    return (MODULE, sub)
                if p.annotation_expr is not None and self.m.scalar_annotation(p.annotation_expr):
                    return (PYTHON, None)  # `def __init__(self, n: int): self.n = n`
                return (CONFIG, None) if p.annotation not in (None, "Any") else (None, None)
        if isinstance(value, (cst.Integer, cst.Float, cst.SimpleString, cst.ConcatenatedString)) or (
                isinstance(value, cst.Name) and value.value in ("True", "False", "None")):
            return (PYTHON, None)
        return (None, None)

    def _local_variable(self, name: str) -> bool:
        """A Variable subclass of this module (`class Count(nnx.Variable)`)."""
        cls = self.m.root.classes.get(name)
        return cls is not None and any(b in NNX_VARIABLES for b in cls.bases)

    def is_variable(self, expr: cst.BaseExpression, values: "Values") -> bool:
        """An nnx Variable (`self.w`) or a linen `self.variable(...)`: its `.value` is an array."""
        if isinstance(expr, cst.Attribute):
            owner = self.instance_class(expr.value, values.fn)
            return owner is not None and self.field(owner, expr.attr.value)[0] == VARIABLE
        if isinstance(expr, cst.Call):
            qual = self.m.resolve(expr.func, values.fn)
            if qual in NNX_VARIABLES:
                return True
            f = expr.func
            return isinstance(f, cst.Attribute) and f.attr.value == "variable" and \
                self.instance_class(f.value, values.fn) is not None
        if isinstance(expr, cst.Name) and expr.value in values.fn.local_names and values.fn.param(expr.value) is None:
            bound = [b.value for b in values.fn.bindings(expr.value)]
            return bool(bound) and all(v is not None and isinstance(v, (cst.Call, cst.Attribute))
                                       and self.is_variable(v, values) for v in bound)
        return False

    def attribute_traced(self, values: "Values", e: cst.Attribute) -> bool:
        """`self.weight` of a traced eqx module, `self.w.value` of a traced nnx module: array leaves are traced;
        `self.features`, static fields and other configuration are not."""
        base = e.value
        if not values.traced(base):
            return False
        if e.attr.value in ("value", "raw_value"):
            return self.is_variable(base, values)
        cls = self.instance_class(base, values.fn)
        if cls is None:
            return False
        return self.field(cls, e.attr.value)[0] in _LEAVES

    # ---- calls ------------------------------------------------------------------------------

    def callable_of(self, expr: cst.BaseExpression, scope: "Scope", call: Optional[cst.Call]) -> Optional["CallableRef"]:
        """The method (or haiku function) a call of `expr` runs, with how its arguments map."""
        from .scopes import CallableRef

        if not self.active:
            return None

        cls = self.instance_class(expr, scope)  # `model`, `self.encoder`, `self.layers[0]`, `Block(...)`
        if cls is not None:
            fn = self.method(cls, "__call__")
            if fn is None or not fn.is_method:
                return None
            receiver = expr
            outer = scope.function_scope()
            if isinstance(expr, cst.Call) and self.kind(cls) == "linen" and outer is not None and outer.is_method \
                    and outer.cls is not None and self.kind(outer.cls) == "linen":
                # `Block(...)(x)` inside a linen method: the child's variables are part of the parent's.
                receiver = cst.Name(outer.params[0].name)
            return CallableRef(fn, 1, receiver=receiver)
        if isinstance(expr, cst.Attribute) and expr.attr.value == "apply_fn":
            # `state.apply_fn(variables, x)`: the `apply` a train state was created with
            refs = [self.callable_of(source, where, None) for source, where in self._apply_fn_sources()]
            if refs and all(r is not None and r.fn is refs[0].fn for r in refs):
                return refs[0]
            return None
        if isinstance(expr, cst.Attribute):
            meth = expr.attr.value
            if meth in ("apply", "init"):
                haiku = self._haiku_function(expr.value, scope)
                if haiku is not None:
                    fn, lead, bound = haiku
                    if meth == "init":
                        lead = 1
                    return CallableRef(fn, 0, bound, lead=lead)
            cls = self.instance_class(expr.value, scope)
            if cls is None:
                return None
            if meth in ("apply", "init") and self.kind(cls) == "linen" and self.method(cls, meth) is None:
                name = "__call__"
                chosen = _keyword(call, "method") if call is not None else None
                if chosen is not None:
                    name = _method_name(chosen) or ""
                fn = self.method(cls, name)
                return CallableRef(fn, 1, lead=1) if fn is not None and fn.is_method else None
            fn = self.method(cls, meth)
            if fn is None or not fn.is_method or fn.is_accessor:
                return None
            return CallableRef(fn, 1, receiver=expr.value)
        return None

    def _apply_fn_sources(self) -> list[tuple[cst.Attribute, "Scope"]]:
        """The `X.apply` expressions this module passes as `apply_fn=` (flax's `TrainState.create`
        and look-alikes), with the scope of each call."""
        if self._apply_fns is None:
            self._apply_fns = []
            for call, scope, _loop in self.m.all_calls:
                value = _keyword(call, "apply_fn")
                if isinstance(value, cst.Attribute) and value.attr.value == "apply":
                    self._apply_fns.append((value, scope))
        return self._apply_fns

    def _haiku_function(self, expr: cst.BaseExpression, scope: "Scope", depth: int = 0
                        ) -> Optional[tuple["FunctionInfo", int, frozenset[str]]]:
        """`hk.transform(f)` (or a name bound to it, or `@hk.transform def f`): f, the number of leading
        `.apply` arguments (params, [state,] rng) f does not receive, and the parameters a `partial` given
        to the transform binds by keyword."""
        if depth > 4:
            return None
        if isinstance(expr, cst.Call) and expr.args:
            qual = self.m.resolve(expr.func, scope)
            if qual == HAIKU_WITHOUT_RNG:
                inner = self._haiku_function(expr.args[0].value, scope, depth + 1)
                return (inner[0], inner[1] - 1, inner[2]) if inner is not None else None
            if qual in HAIKU_TRANSFORMS:
                ref = self.m.resolve_callable(expr.args[0].value, scope)
                return (ref.fn, HAIKU_TRANSFORMS[qual], frozenset(ref.bound_names)) \
                    if ref is not None and ref.offset == 0 else None
            return None
        if isinstance(expr, cst.Name):
            fn = self.m.lookup_function(expr.value, scope)
            if fn is not None:
                for d in fn.decorators:
                    qual = self.m.resolve(d.decorator, fn.parent or self.m.root)
                    if qual in HAIKU_TRANSFORMS:
                        return fn, HAIKU_TRANSFORMS[qual], frozenset()
                return None
            owner = self.m.owner_of(expr.value, scope)
            bound = owner.assigned.get(expr.value, []) if owner is not None else []
            if len(bound) == 1 and bound[0] is not None:
                return self._haiku_function(bound[0], owner, depth + 1)
        return None

    # ---- across files -----------------------------------------------------------------------

    def imported_method(self, call: cst.Call, fn: "FunctionInfo", values: "Values", args: list["ArgInfo"]
                        ) -> Optional[tuple[str, tuple["ArgInfo", ...]]]:
        """`models.CNN().apply(variables, x)`, `model(x)` with `model = models.CNN()`: the imported class's
        method (`models.CNN.__call__`) and its arguments with `self` first (traced when the variables, or the
        instance, are). The callee's module decides whether the class is a model module at all."""
        from .traced import ArgInfo

        func = call.func
        cls, meth, receiver, lead = None, "__call__", func, 0
        if isinstance(func, cst.Attribute) and func.attr.value == "apply_fn":
            found = {self._imported_class(source.value, where) for source, where in self._apply_fn_sources()}
            if len(found) != 1:
                return None
            cls, lead = found.pop(), 1
        elif isinstance(func, cst.Attribute):
            cls, meth, receiver = self._imported_class(func.value, fn), func.attr.value, func.value
            if meth in ("apply", "init"):
                chosen = _keyword(call, "method")
                meth, lead = (_method_name(chosen) if chosen is not None else "__call__"), 1
        if cls is None:  # `model(x)`, `models.CNN(config)(x)`
            cls, meth, receiver, lead = self._imported_class(func, fn), "__call__", func, 0
        if cls is None or meth is None:
            return None
        if lead:
            head = args[:lead]
            if len(head) < lead or any(a.star or a.keyword for a in head):
                return None
            self_traced = any(a.traced for a in head)
            rest = args[lead:]
        else:
            self_traced = values.traced(receiver)
            rest = args
        if not any(a.traced for a in rest) and not self_traced:
            return None
        # The module's own leaves, and its traced inputs: across files only evident arrays make parameters
        # traced, and the inputs a traced step hands a model are its arrays (flags stay literal or static).
        me = ArgInfo("", None, self_traced, False, self_traced)
        return f"{cls}.{meth}", (me, *(dataclasses.replace(a, array=a.traced) for a in rest))

    def _imported_class(self, expr: cst.BaseExpression, scope: "Scope", depth: int = 0) -> Optional[str]:
        """The qualified name of an imported, capitalised class an expression is an instance of."""
        if isinstance(expr, cst.Call):
            qual = self.m.resolve(expr.func, scope)
            if qual is None or qual.startswith(("builtins.", "jax.", "flax.", "equinox.", "haiku.", "optax.", "numpy.")):
                return None
            return qual if "." in qual and qual.rsplit(".", 1)[-1][:1].isupper() else None
        if isinstance(expr, cst.Name) and depth < 3:
            owner = self.m.owner_of(expr.value, scope)
            param = owner.param(expr.value) if isinstance(owner, FunctionInfo) else None
            if param is not None:  # `def step(model: models.CNN, x)`: the annotation names the class
                ann = param.annotation_expr
                qual = self.m.resolve(ann, owner) if isinstance(ann, (cst.Name, cst.Attribute)) else None
                if qual is None or qual.startswith(("builtins.", "jax.", "flax.", "equinox.", "haiku.", "optax.",
                                                    "numpy.", "typing.")):
                    return None
                return qual if "." in qual and qual.rsplit(".", 1)[-1][:1].isupper() else None
            bound = owner.assigned.get(expr.value, []) if owner is not None else []
            if len(bound) == 1 and bound[0] is not None:
                return self._imported_class(bound[0], owner, depth + 1)
        if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and depth < 3:
            # `self.encoder(x)` with `self.encoder = Encoder(...)` in `setup`/`__init__`, `Encoder` imported
            fn = scope.function_scope()
            if fn is None or not fn.is_method or fn.cls is None or not fn.params \
                    or fn.params[0].name != expr.value.value:
                return None
            values = [(value, init) for init in (fn.cls.defs.get("__init__"), fn.cls.defs.get("setup"))
                      if init is not None and init.params
                      for target, value, how in init.events
                      if how == "=" and isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name)
                      and target.value.value == init.params[0].name and target.attr.value == expr.attr.value]
            if len(values) == 1 and values[0][0] is not None:
                return self._imported_class(values[0][0], values[0][1], depth + 1)
        return None

    def method_named(self, qualname: str) -> Optional["FunctionInfo"]:
        """`CNN.__call__` of a model module class of this module (a call from another file)."""
        cls_name, _, meth = qualname.rpartition(".")
        cls = self.m.root.classes.get(cls_name)
        if cls is None or not self.kind(cls):
            return None
        fn = self.method(cls, meth)
        return fn if fn is not None and fn.is_method else None


def dotted_head(expr: cst.BaseExpression) -> Optional[str]:
    from ..syntax import dotted

    name = dotted(expr)
    return name.split(".")[-1] if name else None


def _library_module(qual: str) -> bool:
    """`flax.linen.Dense`, `equinox.nn.Linear`, `haiku.Linear`: a capitalised class of a model library."""
    last = qual.rsplit(".", 1)[-1]
    return qual.startswith(MODULE_PACKAGES) and last[:1].isupper() and qual not in NNX_VARIABLES


def _agree(found: list) -> Optional["ClassInfo"]:
    return found[0] if found and found[0] is not None and all(c is found[0] for c in found) else None


def _keyword(call: cst.Call, name: str) -> Optional[cst.BaseExpression]:
    for a in call.args:
        if a.keyword is not None and a.keyword.value == name:
            return a.value
    return None


def _method_name(expr: cst.BaseExpression) -> Optional[str]:
    """`method=Model.encode`, `method="encode"` or `method=model.encode` -> encode."""
    if isinstance(expr, cst.SimpleString) and isinstance(expr.evaluated_value, str):
        return expr.evaluated_value
    if isinstance(expr, cst.Attribute):
        return expr.attr.value
    return None


def _argument_for(call: cst.Call, fn: "FunctionInfo", name: str, lead: int) -> Optional[cst.BaseExpression]:
    """The argument a call passes for parameter `name` of `fn` (plain positional and keyword arguments only)."""
    positional = [p.name for p in fn.params if p.index is not None]
    i = 0
    for a in call.args:
        if a.star:
            return None
        if a.keyword is not None:
            if a.keyword.value == name:
                return a.value
            continue
        if i >= lead and i - lead < len(positional) and positional[i - lead] == name:
            return a.value
        i += 1
    return None


def linen_variables_at(value: cst.BaseExpression) -> Optional[int]:
    """Where a flax linen call's result holds a variables dict, a mapping from collection names to
    collections: the whole result of `init(..., method=...)` or `init(..., mutable=...)` (-1), element 1 of
    `apply(..., mutable=...)` and of `init_with_output(...)`; None for any other expression. The keywords
    are linen's own: they tell its `init`/`apply` from another library's."""
    if not isinstance(value, cst.Call) or not isinstance(value.func, cst.Attribute):
        return None
    meth = value.func.attr.value
    mutable = _keyword(value, "mutable")
    if meth == "init" and (mutable is not None or _keyword(value, "method") is not None):
        return -1
    if meth == "init_with_output" or meth == "apply" and mutable is not None and not (
            isinstance(mutable, cst.Name) and mutable.value in ("False", "None")):
        return 1
    return None


def _is_attribute(expr: cst.BaseExpression, owner: str, attr: str) -> bool:
    """`owner.attr` itself."""
    return isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == owner \
        and expr.attr.value == attr


def _zipped(target: cst.BaseExpression, it: Optional[cst.BaseExpression], name: str) -> Optional[cst.BaseExpression]:
    """The sequence a name of a tuple loop target runs over: `zip(a, b)` gives `b` for the second name,
    `enumerate(a)` gives `a` for the second."""
    if not isinstance(target, (cst.Tuple, cst.List)) or not isinstance(it, cst.Call) or not isinstance(it.func, cst.Name):
        return None
    names = [el.value.value if isinstance(el.value, cst.Name) else None for el in target.elements]
    if name not in names or any(a.keyword or a.star for a in it.args):
        return None
    i = names.index(name)
    if it.func.value == "zip" and len(it.args) == len(names):
        return it.args[i].value
    if it.func.value == "enumerate" and len(names) == 2 and i == 1 and it.args:
        return it.args[0].value
    return None


def _unsliced(expr: cst.BaseExpression) -> cst.BaseExpression:
    """`self.layers[1:]` is a run of `self.layers`' elements."""
    if isinstance(expr, cst.Subscript) and len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Slice):
        return expr.value
    return expr
