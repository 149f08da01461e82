"""Which names hold Pallas `Ref`s: the mutable buffers a kernel writes with `o_ref[...] = v`.

A `Ref` comes from Pallas itself: the parameters of a callable handed to `pl.pallas_call`,
`pltpu.emit_pipeline`, `pl.run_scoped`… (directly, decorated, or through `functools.partial`), and
parameters annotated `jax.Ref`. A view of a ref (`ref.at[i]`, `ref.bitcast(t)`, `ref.reshape(…)`,
`ref.T`) is a ref of the same buffer, while `ref[i]` loads an array. A ref handed to a helper makes
that parameter a ref, in this module or, through `ExternalCall`s of kind "ref", in another.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import libcst as cst

from ..jaxapi import PARTIALS, REF_ANNOTATIONS, REF_VIEW_METHODS
from ..syntax import _arg
from .scopes import FunctionInfo, Scope
from .traced import ArgInfo, ExternalCall, _map_args, external_target

if TYPE_CHECKING:
    from .model import ModuleModel


def view_roots(expr: cst.BaseExpression) -> Optional[list[cst.Name]]:
    """The names a ref-view expression is taken from (`o_ref.at[b].bitcast(u32)` -> `o_ref`; both arms of
    `a.at[0] if c else b`; a `None` arm adds none), or None when `expr` is no such expression."""
    if isinstance(expr, cst.IfExp):
        roots: list[cst.Name] = []
        for arm in (expr.body, expr.orelse):
            if isinstance(arm, cst.Name) and arm.value == "None":
                continue
            got = view_roots(arm)
            if got is None:
                return None
            roots += got
        return roots or None
    while True:
        if isinstance(expr, cst.Name):
            return None if expr.value == "None" else [expr]
        if isinstance(expr, cst.Subscript) and isinstance(expr.value, cst.Attribute) and expr.value.attr.value == "at":
            expr = expr.value.value  # ref.at[i]
        elif isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) \
                and expr.func.attr.value in REF_VIEW_METHODS:
            expr = expr.func.value  # ref.bitcast(t), ref.reshape(...)
        elif isinstance(expr, cst.Attribute) and expr.attr.value == "T":
            expr = expr.value
        else:
            return None


def _is_ref_annotation(m: ModuleModel, ann: Optional[cst.BaseExpression], scope: Scope) -> bool:
    """`jax.Ref`, also inside `jax.Ref | None` and `Optional[jax.Ref]`."""
    if ann is None:
        return False
    if isinstance(ann, cst.BinaryOperation) and isinstance(ann.operator, cst.BitOr):
        return _is_ref_annotation(m, ann.left, scope) or _is_ref_annotation(m, ann.right, scope)
    if isinstance(ann, cst.Subscript) and m.resolve(ann.value, scope) in ("typing.Optional", "typing.Union"):
        return any(isinstance(el.slice, cst.Index) and _is_ref_annotation(m, el.slice.value, scope)
                   for el in ann.slice)
    return m.resolve(ann, scope) in REF_ANNOTATIONS


class _Refs:
    def __init__(self, m: ModuleModel) -> None:
        self.m = m
        self.refs: dict[int, set[str]] = {}
        self.handoffs: dict[int, ExternalCall] = {}  # by id of the call: refs handed to another file

    def add(self, fn: FunctionInfo, names: set[str]) -> bool:
        have = self.refs.setdefault(id(fn), set())
        new = names - have
        have |= new
        return bool(new)

    def is_ref(self, name: str, scope: Scope) -> bool:
        owner = self.m.owner_of(name, scope)
        return isinstance(owner, FunctionInfo) and name in self.refs.get(id(owner), ())

    def holds_ref(self, expr: cst.BaseExpression, scope: Scope, rebound: Optional[str] = None) -> bool:
        """Whether `expr` evaluates to a ref (or to None on one arm): a ref's name or a view of refs. In
        `b = b.at[i]` the name being `rebound` is a ref when its other bindings are."""
        roots = view_roots(expr)
        return roots is not None and all(r.value == rebound or self.is_ref(r.value, scope) for r in roots)

    def seed(self, external: list[ExternalCall]) -> None:
        m = self.m
        for fn in m.functions:
            outer = fn.parent or m.root
            if any(m.is_pallas_ref_api(d.decorator, outer) for d in fn.decorators):
                self.add(fn, {p.name for p in fn.params})  # @functools.partial(pl.run_scoped, buf=…)
            self.add(fn, {p.name for p in fn.params if _is_ref_annotation(m, p.annotation_expr, outer)})
        for call, scope, _loop in m.all_calls:
            target: Optional[cst.BaseExpression] = None
            if isinstance(call.func, cst.Call) and m.is_pallas_ref_api(call.func, scope):
                target = call.args[0].value if call.args else None  # partial(pl.pallas_call, …)(kernel)
            elif m.is_pallas_ref_api(call.func, scope):
                target = _arg(call, 0, "kernel") or _arg(call, 0, "body") or _arg(call, 0, "f")
            ref = m.resolve_callable(target, scope) if target is not None else None
            if ref is not None:  # what `partial` bound is its own argument: a ref only if a ref was passed
                positional = [p for p in ref.fn.params if p.index is not None][:ref.offset]
                self.add(ref.fn, {p.name for p in ref.fn.params
                                  if p not in positional and p.name not in ref.bound_names and p.star != "**"})
        for ext in external:  # a function of another file handed refs to a function of this one
            if ext.kind != "ref":
                continue
            fn = external_target(m, ext)
            if fn is not None:
                self.add(fn, self._mapped(fn, 0, list(ext.args)))

    def _mapped(self, fn: FunctionInfo, offset: int, args: list[ArgInfo],
                bound: frozenset[str] = frozenset()) -> set[str]:
        got, _ = _map_args(fn, offset, args, bound)
        return {n for n in got if (p := fn.param(n)) is not None and p.star == ""}

    def propagate(self) -> None:
        """Views bound to locals, and refs passed on to helpers (or bound by `functools.partial`)."""
        m = self.m
        for _ in range(12):
            changed = False
            for fn in m.functions:
                for target, value, how in fn.events:  # o = o_ref.at[0]: a view of a ref is a ref
                    if how != "=" or not isinstance(target, cst.Name) or value is None \
                            or target.value in self.refs.get(id(fn), ()):
                        continue
                    name = target.value
                    values = fn.assigned.get(name, [])
                    if all(v is not None and self.holds_ref(v, fn, name) for v in values) \
                            and any(self.holds_ref(v, fn) for v in values if v is not None):
                        changed |= self.add(fn, {name})
            for call, scope, _loop in m.all_calls:
                args = list(call.args)
                func: cst.BaseExpression = call.func
                if m.resolve(func, scope) in PARTIALS and args and not args[0].star:
                    func, args = args[0].value, args[1:]  # partial(kernel, scratch=scratch_ref)
                if not any(not a.star and self.holds_ref(a.value, scope) for a in args):
                    continue
                infos = [ArgInfo(str(a.star), a.keyword.value if a.keyword is not None else None,
                                 not a.star and self.holds_ref(a.value, scope), False) for a in args]
                ref = m.resolve_callable(func, scope)
                if ref is not None:
                    changed |= self.add(ref.fn, self._mapped(ref.fn, ref.offset, infos, ref.bound_names))
                    continue
                qual = m.resolve(func, scope)
                if qual is not None and id(call) not in self.handoffs and not qual.startswith(("builtins.", "jax.")):
                    owner = scope.function_scope()
                    self.handoffs[id(call)] = ExternalCall(qual, tuple(infos), False, False,
                                                           owner.qualname if owner is not None else "", kind="ref")
            if not changed:
                break


def pallas_refs(m: ModuleModel, external: list[ExternalCall]) -> tuple[dict[int, set[str]], dict[int, ExternalCall]]:
    """The names bound to Pallas refs, per function (by id), and the calls handing refs to other files."""
    refs = _Refs(m)
    refs.seed(external)
    if any(refs.refs.values()):
        refs.propagate()
    return refs.refs, refs.handoffs

