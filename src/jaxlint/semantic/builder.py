"""The single walk over a module that records scopes, imports, bindings, calls and the nodes rules want."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import libcst as cst

from ..jaxapi import (
    CONTAINER_ANNOTATIONS, CONTAINER_BASES, LEAF_FIELD_ANNOTATIONS, LEAF_MARKING_DECORATORS, PARTIALS, PYTREE_BASES,
    PYTREE_CLASS_DECORATORS, STATIC_FIELD_ANNOTATIONS,
)
from ..syntax import (
    container_path,
    FuncNode,
    _is_const,
    _literal_values,
    _module_name,
    _returns,
    _str_leaf,
    _target_names,
    annotation_name,
    children,
    dotted,
    iter_children,
)
from .scopes import ClassFacts, ClassInfo, FunctionInfo, LoopInfo, Param, Record, Scope

if TYPE_CHECKING:
    from .model import ModuleModel


_NUMPY_ARRAY_TYPES = frozenset({"np.ndarray", "numpy.ndarray", "onp.ndarray", "np.generic", "numpy.generic"})
_PY_SCALARS = frozenset({"int", "float", "bool", "str", "complex", "tuple", "list", "dict", "type(None)"})
# Classes every tracer is an instance of: where `isinstance(x, jax.Array)` is false, `x` is no tracer.
_JAX_ARRAY_TYPES = frozenset({"jax.Array", "jnp.ndarray", "jax.numpy.ndarray", "jnp.DeviceArray", "jax.core.Tracer"})


# ---------------------------------------------------------------------------------------------
# Pass 1: one walk that collects scopes, imports, bindings, calls and the records rules want.


class _Builder:
    def __init__(self, model: ModuleModel) -> None:
        self.m = model
        self.guards: frozenset[str] = frozenset()
        self.branches: tuple[tuple[object, bool], ...] = ()  # the if/else arms around the walk: (if node, in body)
        self.eager = False  # inside `with jax.ensure_compile_time_eval():`
        self.nojit = False  # inside `with jax.disable_jit():`
        self.counter = 0
        self.top: Optional[int] = None
        self.guard_helpers = model.tracer_testing()

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
            guards = self.guards
            if isinstance(scope, FunctionInfo):
                guards = guards | {f"@{self.counter}"}  # where it runs (see Values)
                if self.branches:
                    self.m.stamp_branches[self.counter] = self.branches
                if loop is not None:
                    self.m.stamp_loops[self.counter] = loop
            self.m.records.append(Record(node, scope, loop, guards, self.top))
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
            out.append(Param(p.name.value, idx, self._annotation(p.annotation, scope), p.default is not None, p.default,
                             annotation_expr=p.annotation.annotation if p.annotation is not None else None))
            idx += 1
        if isinstance(params.star_arg, cst.Param):
            out.append(Param(params.star_arg.name.value, None, None, False, None, "*"))
        for p in params.kwonly_params:
            out.append(Param(p.name.value, None, self._annotation(p.annotation, scope), p.default is not None, p.default,
                             annotation_expr=p.annotation.annotation if p.annotation is not None else None))
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
                expr = expr.right if _is_const(expr.left, "None") else expr.left
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
            fn.is_classmethod = fn.is_method and "classmethod" in decos
        self.m.functions.append(fn)
        self.m.fn_of_node[id(node)] = fn
        return fn

    def on_functiondef(self, node: cst.FunctionDef, scope: Scope, loop: Optional[LoopInfo]) -> None:
        saved, self.guards = self.guards, frozenset()
        arms, self.branches = self.branches, ()  # (the arms of the enclosing function's ifs are not this body's)
        try:
            self._on_functiondef(node, scope, loop, arms)
        finally:
            self.guards, self.branches = saved, arms

    def _on_functiondef(self, node: cst.FunctionDef, scope: Scope, loop: Optional[LoopInfo],
                        arms: tuple[tuple[object, bool], ...]) -> None:
        fn = self._new_function(node, node.name.value, scope, loop)
        fn.decorators = list(node.decorators)
        fn.arms_at_def = arms
        scope.defs[node.name.value] = fn
        scope.def_history.setdefault(node.name.value, []).append((self.counter, fn))
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
        heads = [a.value.value if isinstance(a.value, cst.Subscript) else a.value for a in node.bases]  # `Mapping[str, T]`
        cls.bases = [self.m.resolve(h, scope) or (dotted(h) or "") for h in heads]
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
                _note_import(scope, alias.asname.name.value, full)
            else:
                head = full.split(".")[0]
                _note_import(scope, head, head)

    def on_importfrom(self, node: cst.ImportFrom, scope: Scope, loop: Optional[LoopInfo]) -> None:
        if isinstance(node.names, cst.ImportStar):
            return
        mod = _module_name(node.module) if node.module is not None else ""
        prefix = "." * len(node.relative) + mod
        for alias in node.names:
            name = _module_name(alias.name)
            local = alias.asname.name.value if alias.asname is not None and isinstance(alias.asname.name, cst.Name) else name
            _note_import(scope, local, f"{prefix}.{name}" if prefix and not prefix.endswith(".") else f"{prefix}{name}")

    # ---- bindings ---------------------------------------------------------------------------

    def _bind_target(self, target: cst.BaseExpression, value: Optional[cst.BaseExpression], scope: Scope,
                     loop: Optional[LoopInfo]) -> None:
        if isinstance(target, cst.Name):
            name = target.value
            if name in scope.defs and value is not None and not isinstance(value, cst.Lambda) \
                    and not _wraps_itself(value, name):
                del scope.defs[name]  # (`step = jax.jit(step)` keeps the def: it is decorated by hand)
            scope.assigned.setdefault(name, []).append(value)
            scope.bind_order.setdefault(name, []).append(self.counter)
            scope.bind_loops.setdefault(name, []).append(loop)
            if loop is not None:
                loop.bound.setdefault(name, []).append(value)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for el in target.elements:
                inner = el.value
                self._bind_target(inner, None, scope, loop)
        elif isinstance(target, cst.StarredElement):
            self._bind_target(target.value, None, scope, loop)

    def _event(self, scope: Scope, target: cst.BaseExpression, value: Optional[cst.BaseExpression], how: str) -> None:
        if isinstance(scope, FunctionInfo):
            scope.events.append((target, value, how))
            scope.event_orders.append(self.counter)
            scope.event_branches.append(self.branches)

    def on_assign(self, node: cst.Assign, scope: Scope, loop: Optional[LoopInfo]) -> None:
        self.walk(node.value, scope, loop)
        if len(node.targets) == 1:
            for name in _target_names(node.targets[0].target):
                scope.bound_from[(name, self.counter)] = (node.targets[0].target, node.value)
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
            if isinstance(node.target, cst.Name):
                head = self._annotation(node.annotation, scope)
                if head is not None:
                    scope.annotated[id(node.value)] = (head, node.annotation.annotation)
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
        # Code inside runs with the comprehension's own variables: the token lets the model shadow
        # the function's bindings of those names with the comprehension's (see ModuleModel.values).
        saved = self.guards
        self.m.comprehensions[id(node)] = node
        self.guards = saved | {f"comp:{id(node)}"}
        comp: Optional[cst.CompFor] = first
        while comp is not None:
            if comp is not first:
                self.walk(comp.iter, scope, inner)
            self._bind_target(comp.target, None, scope, None)
            self._event(scope, comp.target, comp.iter, "for")
            for cond in comp.ifs:
                self._mark_test(cond.test)
                if type(cond) in self.m._wanted:
                    self.m.records.append(Record(cond, scope, inner, self.guards, self.top))
                self.walk(cond.test, scope, inner)
            comp = comp.inner_for_in
        if isinstance(node, cst.DictComp):
            self.walk(node.key, scope, inner)
            self.walk(node.value, scope, inner)
        else:
            self.walk(node.elt, scope, inner)
        self.guards = saved

    def on_block(self, node: cst.IndentedBlock, scope: Scope, loop: Optional[LoopInfo]) -> None:
        """The statements of a block; those after a `return`, `raise`, `break` or `continue` of the block
        itself never run (`never:`)."""
        added = False
        for child in children(node):
            self.walk(child, scope, loop)
            if not added and "never:" not in self.guards and isinstance(child, cst.SimpleStatementLine) \
                    and any(isinstance(small, (cst.Return, cst.Raise, cst.Break, cst.Continue)) for small in child.body):
                self.guards = self.guards | {"never:"}
                added = True
        if added:
            self.guards = self.guards - {"never:"}

    def on_with(self, node: cst.With, scope: Scope, loop: Optional[LoopInfo]) -> None:
        eager = nojit = False
        for item in node.items:
            self.walk(item.item, scope, loop)
            if item.asname is not None:
                self.m.entered.add(id(item.item))
                self._bind_target(item.asname.name, item.item, scope, loop)
                self._event(scope, item.asname.name, item.item, "with")
            if isinstance(item.item, cst.Call) and self.m.resolve(item.item.func, scope) == "jax.ensure_compile_time_eval":
                eager = True
            nojit = nojit or _disables_jit(item.item, self.m.resolve, scope)
        # `with jax.ensure_compile_time_eval():` — jnp calls on concrete values compute concrete values
        saved, self.eager = self.eager, self.eager or eager
        saved_nojit, self.nojit = self.nojit, self.nojit or nojit
        self.walk(node.body, scope, loop)
        self.eager, self.nojit = saved, saved_nojit

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

    @staticmethod
    def _entry_values(tests: frozenset[str], unbound: frozenset[str]) -> frozenset[str]:
        """`given:x` for a parameter `x` nothing had rebound when the test ran (`unbound`): the test reads
        the value the caller gave, so `given@:x` says so too (a rebinding in the other arm, `x = default`,
        does not change what was given)."""
        entry = {f"given@:{g[6:]}" for g in tests if g.startswith("given:") and g[6:] in unbound}
        return tests | entry if entry else tests

    @staticmethod
    def _unbound_params(scope: Scope, loop: Optional[LoopInfo]) -> frozenset[str]:
        """The parameters of the function that nothing has bound again so far (outside loops: a later
        pass may have rebound them)."""
        if loop is not None or not isinstance(scope, FunctionInfo):
            return frozenset()
        return frozenset(p.name for p in scope.params if not scope.bind_order.get(p.name))

    def on_if(self, node: cst.If, scope: Scope, loop: Optional[LoopInfo]) -> None:
        if isinstance(node.orelse, cst.If):
            self.m.elif_nodes.add(id(node.orelse))
        self._mark_test(node.test)
        self.walk(node.test, scope, loop)
        self.m.if_tests[id(node)] = (node.test, scope)
        saved = self.guards
        unbound = self._unbound_params(scope, loop)
        self.guards = saved | _scalar_guard_names(node.test) | self._entry_values(arm_tests(node.test, True), unbound) \
            | instance_guards(node.test) \
            | _not_jax_array(node.test, True) | self._helper_tests(node.test, True, scope)
        self.guards = self.guards | self._replaced_entries(self.guards - saved, scope, loop)
        if _disable_jit_test(node.test) or isinstance(node.test, cst.Name) and scope is not self.m.root \
                and node.test.value in self.m.jit_switches() and not self.m.is_local(node.test.value, scope):
            self.guards = self.guards | {"eager:"}  # `if jax.config.jax_disable_jit:` runs only without jit
        known = self._module_test(node.test, scope)
        if known is False:
            self.guards = self.guards | {"never:"}  # `if "jax" in np.__name__:` with `np` NumPy: never runs
        branches = self.branches
        start = self.counter
        # the arm of this `if`, and of every `if flag:` testing the same name (`use_jax` branches agree)
        self.branches = branches + ((id(node), True),) + tuple(
            (g.partition(":")[2], g.startswith("true:")) for g in flag_tests(node.test, True))
        self.walk(node.body, scope, loop)
        self.guards = saved
        if node.orelse is not None:
            # `if isinstance(x, jnp.ndarray): … else: …`: in the else arm `x` is not a tracer
            self.guards = saved | self._entry_values(arm_tests(node.test, False), unbound) \
                | _array_test(node.test) | _not_tracer(node.test) \
                | _not_jax_array(node.test, False) | self._helper_tests(node.test, False, scope) | (
                {"never:"} if known is True else frozenset()) | {f"unless:{id(node)}"}
            self.guards = self.guards | self._replaced_entries(self.guards - saved, scope, loop)
            self.branches = branches + ((id(node), False),) + tuple(
                (g.partition(":")[2], g.startswith("true:")) for g in flag_tests(node.test, False))
            self.walk(node.orelse, scope, loop)
            self.guards = saved
        elif isinstance(scope, FunctionInfo) and loop is None and isinstance(scope.node, cst.FunctionDef) \
                and isinstance(scope.node.body, cst.IndentedBlock) \
                and any(node is stmt for stmt in scope.node.body.body) and _always_exits(node.body):
            scope.none_exits.extend((self.counter, g[5:]) for g in none_tests(node.test))
        self.branches = branches
        if isinstance(scope, FunctionInfo) and loop is None and _always_exits(node.body):
            # `if x is not None: … return`: whatever was bound to `x` before, it is None past this `if`
            scope.none_past.extend((start, self.counter, name, branches) for name in not_none_tests(node.test))
        if node.orelse is None and _always_exits(node.body):
            # `if use_jax: return …`: the rest of the block runs only when the test was false
            self.guards = self.guards | flag_tests(node.test, False) | ident_tests(node.test, False) \
                | self._helper_tests(node.test, False, scope) | _array_test(node.test) | _not_tracer(node.test) \
                | {f"exit:{id(node)}"}
            self.branches = branches + ((id(node), False),)

    def _replaced_entries(self, guards: frozenset[str], scope: Scope, loop: Optional[LoopInfo]) -> frozenset[str]:
        """`notracer!:x` beside `notracer:x` for a parameter `x` that a plain `x = ...` has replaced before
        the test, wherever the test runs (`logits = jnp.asarray(logits)` first thing, then `if not
        is_tracer(logits):`): what the test sees is what the body bound, not the argument."""
        if not isinstance(scope, FunctionInfo) or loop is not None:
            return frozenset()
        out = set()
        for g in guards:
            if not g.startswith("notracer:"):
                continue
            name = g[9:]
            if scope.param(name) is None:
                continue
            for order, bound_in in zip(scope.bind_order.get(name, ()), scope.bind_loops.get(name, ())):
                if bound_in is not None:
                    continue
                for (target, _value, how), at, arms in zip(scope.events, scope.event_orders, scope.event_branches):
                    if at == order and how == "=" and isinstance(target, cst.Name) and target.value == name \
                            and self.branches[:len(arms)] == arms:
                        out.add(f"notracer!:{name}")
        return frozenset(out)

    def _helper_tests(self, e: cst.BaseExpression, holds: bool, scope: Scope) -> frozenset[str]:
        """What a test of this module's trace-testing helpers says where it is `holds`: where `is_traced(x)`
        is false, `x` is a concrete value ({"x", "notracer:x"}); where `under_transform()` is false, or
        `trace_state_clean()` true, nothing is being traced ({"eager:"})."""
        if isinstance(e, cst.UnaryOperation) and isinstance(e.operator, cst.Not):
            return self._helper_tests(e.expression, not holds, scope)
        if isinstance(e, cst.BooleanOperation) and isinstance(e.operator, cst.And if holds else cst.Or):
            return self._helper_tests(e.left, holds, scope) | self._helper_tests(e.right, holds, scope)
        if not isinstance(e, cst.Call):
            return frozenset()
        if _trace_state_test(e):
            return frozenset({"eager:"}) if holds else frozenset()
        if holds:
            return frozenset()
        kind = self.guard_helpers.get(e.func.value) if isinstance(e.func, cst.Name) else None
        if kind is None:
            qual = self.m.resolve(e.func, scope)  # (a helper imported from another file of the project)
            kind = self.m.ask("guard_helper", qual, absent=None) if qual is not None else None
        if kind is None:
            return frozenset()
        if kind == "tracing":
            return frozenset({"eager:"}) if not e.args else frozenset()
        tested = e.args if kind == "tracers" else e.args[:1] if len(e.args) == 1 else ()
        names = [a.value.value for a in tested if isinstance(a.value, cst.Name) and a.keyword is None and not a.star]
        return frozenset(names) | frozenset(f"notracer:{name}" for name in names)

    def _module_test(self, e: cst.BaseExpression, scope: Scope) -> Optional[bool]:
        """The value of a test that only asks which array module a name is (`"jax" in np.__name__`,
        `xp is jnp`, `np.__name__ == "numpy"`), when the names are modules this module imports and never
        rebinds; None for any other test."""
        if isinstance(e, cst.UnaryOperation) and isinstance(e.operator, cst.Not):
            inner = self._module_test(e.expression, scope)
            return None if inner is None else not inner
        if isinstance(e, cst.Call) and isinstance(e.func, cst.Attribute) \
                and e.func.attr.value in ("startswith", "endswith") and len(e.args) == 1:
            name, text = self._module_name_of(e.func.value, scope), _str_leaf(e.args[0].value)
            if name is None or text is None:
                return None
            return name.startswith(text) if e.func.attr.value == "startswith" else name.endswith(text)
        if not isinstance(e, cst.Comparison) or len(e.comparisons) != 1:
            return None
        op, right = e.comparisons[0].operator, e.comparisons[0].comparator
        if isinstance(op, (cst.Is, cst.IsNot)):
            a, b = self._known_module(e.left, scope), self._known_module(right, scope)
            if a is None or b is None:
                return None
            return (a == b) == isinstance(op, cst.Is)
        if isinstance(op, (cst.In, cst.NotIn)):
            text, name = _str_leaf(e.left), self._module_name_of(right, scope)
            if text is None or name is None:
                return None
            return (text in name) == isinstance(op, cst.In)
        if isinstance(op, (cst.Equal, cst.NotEqual)):
            name, text = self._module_name_of(e.left, scope), _str_leaf(right)
            if name is None or text is None:
                return None
            return (name == text) == isinstance(op, cst.Equal)
        return None

    def _module_name_of(self, e: cst.BaseExpression, scope: Scope) -> Optional[str]:
        """`np.__name__` for a known array module: its name."""
        if isinstance(e, cst.Attribute) and e.attr.value == "__name__":
            return self._known_module(e.value, scope)
        return None

    def _known_module(self, e: cst.BaseExpression, scope: Scope) -> Optional[str]:
        """The array module a name holds, when it is an import of one that this module never rebinds."""
        if not isinstance(e, cst.Name):
            return None
        root = self.m.root
        if self.m.owner_of(e.value, scope) is not root or e.value in root.assigned \
                or e.value in root.ambiguous_imports or e.value not in root.imports:
            return None
        qual = root.imports[e.value]
        return qual if qual in _ARRAY_MODULES else None

    def on_ifexp(self, node: cst.IfExp, scope: Scope, loop: Optional[LoopInfo]) -> None:
        self._mark_test(node.test)
        self.walk(node.test, scope, loop)
        saved = self.guards
        # `int(res) if isinstance(res, float) else res`: in the body, `res` is a Python scalar
        self.guards = saved | _scalar_guard_names(node.test) | instance_guards(node.test)
        self.walk(node.body, scope, loop)
        # `None if is_tracer(x) else float(x)`: in the `else`, `x` is no tracer
        self.m.ifexp_tests[id(node)] = (node.test, scope)
        self.guards = saved | {f"unlessexp:{id(node)}"}
        self.walk(node.orelse, scope, loop)
        self.guards = saved

    def on_assert(self, node: cst.Assert, scope: Scope, loop: Optional[LoopInfo]) -> None:
        self._mark_test(node.test)
        self.walk(node.test, scope, loop)
        if node.msg is not None:
            self.walk(node.msg, scope, loop)

    def on_booleanoperation(self, node: cst.BooleanOperation, scope: Scope, loop: Optional[LoopInfo]) -> None:
        for side in (node.left, node.right):
            if isinstance(side, cst.BooleanOperation):
                self.m.nested_boolops.add(id(side))
        self.walk(node.left, scope, loop)
        # Python evaluates the right operand only when the left one did not decide: after a true left
        # operand of `and`, after a false one of `or` (`not isinstance(x, jax.core.Tracer) and bool(x)`
        # never converts a tracer; `flag is True and check(x)` never runs `check` on a traced `flag`).
        saved = self.guards
        holds = isinstance(node.operator, cst.And)
        self.guards = saved | arm_tests(node.left, holds) | self._helper_tests(node.left, holds, scope) | (
            _scalar_guard_names(node.left) | instance_guards(node.left) if holds else _not_tracer(node.left))
        self.guards = self.guards | self._replaced_entries(self.guards - saved, scope, loop)
        self.walk(node.right, scope, loop)
        self.guards = saved

    def on_subscript(self, node: cst.Subscript, scope: Scope, loop: Optional[LoopInfo]) -> None:
        if len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index) \
                and isinstance(node.slice[0].slice.value, cst.Name) and isinstance(scope, FunctionInfo):
            path = container_path(node.value)
            if path is not None:
                scope.key_subscripts.add((path, node.slice[0].slice.value.value))
        if len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index) \
                and isinstance(node.slice[0].slice.value, (cst.SimpleString, cst.ConcatenatedString)) \
                and isinstance(node.value, cst.Name) and isinstance(scope, FunctionInfo):
            scope.string_keyed.add(node.value.value)  # `batch["rewards"]`: no array takes a string index
        for child in iter_children(node):
            self.walk(child, scope, loop)

    def on_call(self, node: cst.Call, scope: Scope, loop: Optional[LoopInfo]) -> None:
        self.m.call_order[id(node)] = self.counter
        if loop is not None:
            self.m.call_loops[id(node)] = loop
        if self.guards:
            self.m.call_guards[id(node)] = self.guards
        if self.branches:
            self.m.call_branches[id(node)] = self.branches
        if self.eager:
            self.m.eager_calls.add(id(node))
        if self.nojit:
            self.m.nojit_calls.add(id(node))
        func = node.func
        ftp = type(func)  # (exact type tests: a failed `isinstance` on libcst's node classes is slow)
        if ftp is cst.Call:
            self.m.applied_calls.add(id(func))
            self.m.applied_parent[id(func)] = node
        elif ftp is cst.Attribute and type(func.value) is cst.Call \
                and func.attr.value in ("lower", "trace", "eval_shape"):  # type: ignore[attr-defined]
            # jax.jit(f).lower(args): f receives args
            self.m.applied_parent[id(func.value)] = node  # type: ignore[attr-defined]
        if isinstance(scope, FunctionInfo):
            scope.calls.append(node)
            if ftp is cst.Attribute and type(func.value) is cst.Name and node.args \
                    and func.attr.value in ("pop", "get", "setdefault") and not node.args[0].keyword \
                    and isinstance(node.args[0].value, (cst.SimpleString, cst.ConcatenatedString)):
                scope.string_keyed.add(func.value.value)  # `aux.pop("penalty")`: arrays have no such method
        self.m.all_calls.append((node, scope, loop))
        self.walk(node.func, scope, loop)
        for a in node.args:
            self.walk(a.value, scope, loop)


_HANDLERS = {
    cst.IndentedBlock: _Builder.on_block,
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


def _project_register_options(cls: ClassInfo, call: cst.Call) -> None:
    """Keywords of a project decorator that say which fields are aux data, in JAX's words:
    `aux_fields=("n",)`, `static_fields="n"`, `meta_fields=...` (Ellipsis or True: every field)."""
    for a in call.args:
        if a.keyword is None or not any(w in a.keyword.value.lower() for w in ("aux", "static", "meta")) \
                or "invert" in a.keyword.value.lower():
            continue
        value = a.value
        if isinstance(value, cst.Ellipsis) or isinstance(value, cst.Name) and value.value in ("Ellipsis", "True"):
            cls.static_fields |= cls.fields
        else:
            cls.static_fields.update(_literal_values(value, _str_leaf) or ())
    if any(a.keyword is not None and "invert" in a.keyword.value.lower() for a in call.args):
        cls.static_fields = set()  # the selection is turned around: not read


def _field_is_static(model: "ModuleModel", value: cst.BaseExpression, scope: Scope) -> bool:
    """Whether a class-body default such as `field(pytree_node=False)` declares an aux-data field."""
    if not isinstance(value, cst.Call):
        return False
    qual = model.resolve(value.func, scope) or dotted(value.func) or ""
    last = qual.rsplit(".", 1)[-1]
    if last == "static_field" or (last == "static" and isinstance(value.func, cst.Attribute)):
        return True  # jax-md's dataclasses.static_field(), equinox's old spelling, `jax.tree.static()`, `Pytree.static()`
    if model.makes_static_field(qual, value.func):
        return True  # `frozen_field(default=...)`: a helper of this module or the project returning such a field
    if model.switched_static(value, scope):
        return True  # `field(10, jaxed=False)`: a helper whose argument sets `pytree_node`
    if last not in ("field", "Field"):
        return False
    for a in value.args:
        kw = a.keyword.value if a.keyword is not None else None
        if kw == "pytree_node" and _is_const(a.value, "False"):
            return True
        if kw == "static" and _is_const(a.value, "True"):
            return True
        if kw == "on_setattr" and isinstance(a.value, (cst.List, cst.Tuple)) and any(
                model.resolve(el.value, scope) == "pytreeclass.freeze" for el in a.value.elements
                if not isinstance(el, cst.StarredElement)):
            return True  # pytreeclass stores the value wrapped by `tc.freeze`: a leafless node, aux data
        if kw == "metadata" and isinstance(a.value, cst.Dict):
            for el in a.value.elements:
                if isinstance(el, cst.DictElement) and isinstance(el.key, cst.SimpleString):
                    key = el.key.evaluated_value
                    if (key == "static" and _is_const(el.value, "True")) or \
                            (key == "pytree_node" and _is_const(el.value, "False")):
                        return True
    return False


def _register_options(cls: ClassInfo, call: cst.Call) -> None:
    """`register_dataclass(Cls, [data...], [meta...])` at module level, or its keywords `data_fields=`,
    `meta_fields=` (the only form a `partial(...)` decorator can give)."""
    for i, a in enumerate(call.args):
        kw = a.keyword.value if a.keyword is not None else None
        if kw is None and not a.star:
            kw = {1: "data_fields", 2: "meta_fields"}.get(i)
        if kw in ("meta_fields", "data_fields"):
            names = _literal_values(a.value, _str_leaf)
            if names is not None:
                (cls.static_fields if kw == "meta_fields" else cls.fields).update(names)


def _flatten_aux(fn: "FunctionInfo", owner: str = "self", root: Optional[Scope] = None,
                 fields: frozenset[str] = frozenset()) -> set[str]:
    """`self.x` attributes returned in the aux part of a flatten function: `return children, (self.a,)`
    (or a dict of them). Fields named by a list of strings (`root`: the module scope, for a module-level
    list) count too: `{f: getattr(self, f) for f in STATIC}` as the aux part, or, of the class `fields`,
    those left out of children made as `tuple(getattr(self, f) for f in LEAVES)`."""
    out: set[str] = set()
    if not isinstance(fn.node, cst.FunctionDef):
        return out
    for stmt in _returns(fn.node.body):
        value = stmt.value
        if isinstance(value, cst.Tuple) and len(value.elements) == 2:
            children, aux = (_local_value(fn, el.value) for el in value.elements)
            named = _named_fields(aux, owner, root)
            if named is not None:
                out |= named
                continue
            leaves = _named_fields(children, owner, root)
            if leaves is not None and fields:
                out |= fields - leaves
                continue
            parts = [el.value for el in aux.elements] if isinstance(aux, (cst.Tuple, cst.List)) else \
                [el.value for el in aux.elements if isinstance(el, cst.DictElement)] if isinstance(aux, cst.Dict) \
                else [aux]  # (`return children, {"rows": self.rows}`: a dict of aux data too)
            for part in parts:
                if isinstance(part, cst.Call) and dotted(part.func) in ("int", "bool", "float", "str", "tuple") \
                        and len(part.args) == 1:
                    part = part.args[0].value  # `int(self.rhs_mode)`: the field, as a Python value
                if isinstance(part, cst.Attribute) and isinstance(part.value, cst.Name) and part.value.value == owner:
                    out.add(part.attr.value)
    return out


def _local_value(fn: "FunctionInfo", e: cst.BaseExpression) -> cst.BaseExpression:
    """`aux = {...}` then `return children, aux`: the value a name returned was bound to once."""
    if isinstance(e, cst.Name) and len(fn.assigned.get(e.value, [])) == 1 and fn.assigned[e.value][0] is not None:
        return fn.assigned[e.value][0]
    return e


def _named_fields(e: cst.BaseExpression, owner: str, root: Optional[Scope]) -> Optional[frozenset[str]]:
    """The field names a comprehension over a list of strings reads off `owner` (`getattr(owner, f)`, or
    `state.pop(f)` of a copy of its fields): `{f: getattr(p, f) for f in NAMES}`,
    `tuple(getattr(self, f) for f in ("a", "b"))`; None for anything else."""
    if isinstance(e, cst.Call) and dotted(e.func) in ("tuple", "list") and len(e.args) == 1:
        e = e.args[0].value
    if not isinstance(e, (cst.GeneratorExp, cst.ListComp, cst.DictComp)) or e.for_in.inner_for_in is not None \
            or e.for_in.ifs or not isinstance(e.for_in.target, cst.Name):
        return None
    var = e.for_in.target.value
    item = e.value if isinstance(e, cst.DictComp) else e.elt
    if not isinstance(item, cst.Call):
        return None
    if dotted(item.func) == "getattr" and len(item.args) == 2 and dotted(item.args[0].value) == owner:
        key = item.args[1].value
    elif isinstance(item.func, cst.Attribute) and item.func.attr.value in ("pop", "get") and len(item.args) == 1:
        key = item.args[0].value
    else:
        return None
    if not (isinstance(key, cst.Name) and key.value == var):
        return None
    names = e.for_in.iter
    if isinstance(names, cst.Name) and root is not None and len(root.assigned.get(names.value, [])) == 1:
        names = root.assigned[names.value][0]
    if not isinstance(names, (cst.Tuple, cst.List)) or not all(
            isinstance(el.value, cst.SimpleString) and isinstance(el.value.evaluated_value, str) for el in names.elements):
        return None
    return frozenset(el.value.evaluated_value for el in names.elements)  # type: ignore[union-attr,misc]


def _registers_name(model: "ModuleModel", fn: FunctionInfo, name: str) -> bool:
    """Whether a def's body hands the class bound to `name` to a pytree registration: JAX's
    (`register_pytree_node(cls, ...)`, `register_dataclass(cls)`), a pytree dataclass decorator called on
    it (`flax.struct.dataclass(cls)`), or a registering helper of the module or the project."""
    for call in fn.calls:
        if not call.args or not isinstance(call.args[0].value, cst.Name) or call.args[0].value.value != name:
            continue
        qual = model.resolve(call.func, fn)
        if qual in _REGISTER_CALLS or qual in PYTREE_CLASS_DECORATORS and qual != "equinox.filter_jit":
            return True
        if qual is None and isinstance(call.func, cst.Name):
            qual = call.func.value  # a def of this module
        if qual is not None and model.registers_pytree(qual):
            return True
    return False


def _lambda_decorator(model: "ModuleModel", expr: cst.BaseExpression) -> Optional[str]:
    """`static_dataclass = lambda cls: jax.tree_util.register_static(dataclasses.dataclass(cls))`, bound once
    at module level: the decorator the lambda applies last (outermost), as a qualified name."""
    if not isinstance(expr, cst.Name):
        return None
    values = model.root.assigned.get(expr.value, [])
    if len(values) != 1 or not isinstance(values[0], cst.Lambda) or len(values[0].params.params) != 1:
        return None
    body = values[0].body
    return model.resolve(body.func, model.root) if isinstance(body, cst.Call) else None


def _read_registering_hooks(model: "ModuleModel", cls: ClassInfo) -> None:
    """The class hooks that register classes as pytrees when Python creates them: `__init_subclass__`
    registering `cls` (every subclass is a pytree, not the class itself), and a metaclass's `__new__`
    registering the class it returns or its `__init__` / `__call__` registering `cls` (every class made
    with `metaclass=` it is a pytree)."""
    hook = cls.defs.get("__init_subclass__")
    if hook is not None and hook.params and _registers_name(model, hook, hook.params[0].name):
        cls.registers_subclasses = True
    for name in ("__init__", "__call__"):
        hook = cls.defs.get(name)
        if hook is not None and hook.params and _registers_name(model, hook, hook.params[0].name):
            cls.registers_classes = True
    hook = cls.defs.get("__new__")
    if hook is not None and isinstance(hook.node, cst.FunctionDef):
        made = {r.value.value for r in _returns(hook.node.body) if isinstance(r.value, cst.Name)}
        if any(_registers_name(model, hook, m) for m in made):
            cls.registers_classes = True


def _metaclass(model: "ModuleModel", node: cst.ClassDef, scope: Scope) -> Optional[ClassInfo | ClassFacts]:
    """The class a `metaclass=` keyword names: one of this module's, or what the project says of it."""
    for kw in node.keywords:
        if kw.keyword is None or kw.keyword.value != "metaclass":
            continue
        name = model.resolve(kw.value, scope) or dotted(kw.value) or ""
        local = model.root.classes.get(name)
        if local is not None:
            return local
        return model.ask("lookup", name, absent=None) if "." in name else None
    return None


def _read_class_fields(model: "ModuleModel", cls: ClassInfo, node: cst.ClassDef, scope: Scope) -> None:
    leaves: set[str] = set()  # fields annotated as leaves (`Dynamic[...]`)
    for stmt in node.body.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                    cls.fields.add(small.target.value)
                    cls.field_types[small.target.value] = small.annotation.annotation
                    if small.value is not None and _field_is_static(model, small.value, cls):
                        cls.static_fields.add(small.target.value)
                    ann = small.annotation.annotation
                    if isinstance(ann, cst.Subscript) and model.resolve(ann.value, scope) in STATIC_FIELD_ANNOTATIONS:
                        cls.static_fields.add(small.target.value)  # `link_names: jax_dataclasses.Static[tuple]`
                    if model.resolve(ann.value if isinstance(ann, cst.Subscript) else ann, scope) in LEAF_FIELD_ANNOTATIONS:
                        leaves.add(small.target.value)
                    if model.static_wrapper_annotation(ann, scope):
                        cls.static_fields.add(small.target.value)  # `length: Const[int]`: a leafless node
                    if model.resolve(ann.value if isinstance(ann, cst.Subscript) else ann, scope) == "typing.ClassVar":
                        cls.static_fields.add(small.target.value)  # `tangent_dim: ClassVar[int]`: a class attribute, no field
    for d in node.decorators:
        expr = d.decorator
        call = expr if isinstance(expr, cst.Call) else None
        qual = model.resolve(call.func if call is not None else expr, scope)
        if qual in PARTIALS and call is not None and call.args:
            qual = model.resolve(call.args[0].value, scope)
        if call is None and qual not in _REGISTER_CALLS and qual not in PYTREE_CLASS_DECORATORS:
            qual = _lambda_decorator(model, expr) or qual
        if qual in _REGISTER_CALLS or qual in PYTREE_CLASS_DECORATORS:
            cls.pytree = True
            if call is not None:  # decorator calls carry keywords only
                _register_options(cls, cst.Call(call.func, [a for a in call.args if a.keyword is not None]))
            if qual == "jax.tree_util.register_static":
                cls.static_fields.update(cls.fields)
            if qual in LEAF_MARKING_DECORATORS:
                cls.static_fields.update(cls.fields - leaves)  # `res_x: int` beside `origin: Dynamic[jax.Array]`
        elif qual is not None and model.registers_pytree(qual):
            # the project's own `@pytree_dataclass(aux_fields=...)`: a pytree whose options name its aux data
            cls.pytree = True
            if call is not None:
                _project_register_options(cls, call)
    if any(b in PYTREE_BASES or b in ("typing.NamedTuple", "NamedTuple")
           or (b.endswith(("Module", "PyTreeNode")) and b.startswith(("equinox", "flax.struct", "flax.nnx")))
           for b in cls.bases):
        cls.pytree = True
    cls.container = any(b in CONTAINER_BASES for b in cls.bases)
    _read_registering_hooks(model, cls)
    for b in cls.bases:  # a subclass of a registered pytree class (of this module or the project) is one too
        base = model.root.classes.get(b)
        facts = model.ask("lookup", b, absent=None) if base is None else None
        if base is not None and base is not cls and base.container or facts is not None and facts.container:
            cls.container = True
        if base is not None and base is not cls:
            cls.registers_classes |= base.registers_classes  # a metaclass deriving from a registering one
        elif facts is not None:
            cls.registers_classes |= facts.registers_classes
        # a base whose `__init_subclass__` registers `cls` makes this class a pytree as it is created
        if base is not None and base is not cls and (base.pytree or base.registers_subclasses):
            cls.pytree = True
            cls.fields |= base.fields
            cls.static_fields |= base.static_fields
        elif base is None:
            if facts is not None and (facts.pytree or facts.registers_subclasses):
                cls.pytree = True
                cls.fields |= facts.fields
                cls.static_fields |= facts.static_fields
    meta = _metaclass(model, node, scope)
    if meta is not None and meta.registers_classes:
        cls.pytree = True  # `class Data(metaclass=JAXDataclassMeta)`: the metaclass registers every class it makes
    flatten = cls.defs.get("tree_flatten")
    if flatten is not None:
        cls.static_fields |= _flatten_aux(flatten, "self", model.root, frozenset(cls.fields))
    if cls.pytree and cls.fields and cls.fields <= cls.static_fields:
        # a pytree without leaves: whatever its properties compute from its fields is a Python value too
        cls.static_fields |= {name for name, fn in cls.defs.items() if isinstance(fn.node, cst.FunctionDef)
                              and any(dotted(d.decorator) in ("property", "functools.cached_property", "cached_property")
                                      for d in fn.node.decorators)}


# ---------------------------------------------------------------------------------------------
# Pass 2: which functions are traced, with which parameters traced, to a fixed point.


def _isinstance_test(e: cst.BaseExpression) -> Optional[tuple[cst.BaseExpression, list[str]]]:
    """`isinstance(subject, A)` / `isinstance(subject, (A, B))`: the subject and the classes as written."""
    if not (isinstance(e, cst.Call) and dotted(e.func) == "isinstance" and len(e.args) == 2):
        return None
    kinds = e.args[1].value
    names = [el.value for el in kinds.elements] if isinstance(kinds, cst.Tuple) else [kinds]
    return e.args[0].value, [dotted(n) or "" for n in names]


def _array_test(e: cst.BaseExpression) -> frozenset[str]:
    """`isinstance(x, jax.Array)` (or `jnp.ndarray`), or `hasattr(x, "shape")` (an attribute every tracer
    has): the name tested, which is no tracer where the test fails."""
    test = _isinstance_test(e)
    if test is not None and isinstance(test[0], cst.Name) and test[1] and all(n in _JAX_ARRAY_TYPES for n in test[1]):
        return frozenset({test[0].value})
    if isinstance(e, cst.Call) and dotted(e.func) == "hasattr" and len(e.args) == 2 \
            and isinstance(e.args[0].value, cst.Name) and _str_leaf(e.args[1].value) in _TRACER_ATTRIBUTES:
        return frozenset({e.args[0].value.value})
    return frozenset()


# Attributes every tracer has (those of a `jax.Array`): where `hasattr(x, "shape")` fails, `x` is no tracer.
_TRACER_ATTRIBUTES = frozenset({"shape", "dtype", "ndim", "size", "aval", "at", "astype", "reshape", "T",
                                "weak_type", "sharding"})


def _not_jax_array(e: cst.BaseExpression, holds: bool) -> frozenset[str]:
    """`notarray:x` where an `if` arm proves `x` no JAX array, concrete or traced: the `else` of
    `isinstance(x, jax.Array)`, the body of `isinstance(x, np.ndarray)` (a NumPy array takes stores)."""
    test = _isinstance_test(e)
    if test is None or not isinstance(test[0], cst.Name) or not test[1]:
        return frozenset()
    types = _NUMPY_ARRAY_TYPES if holds else _JAX_ARRAY_TYPES - {"jax.core.Tracer"}  # (a concrete array is none)
    return frozenset({f"notarray:{test[0].value}"}) if all(n in types for n in test[1]) else frozenset()


def _scalar_guard_names(e: cst.BaseExpression) -> frozenset[str]:
    """Names that a true `e` proves to be Python scalars: `isinstance(n, int)` (and conjunctions)."""
    if isinstance(e, cst.BooleanOperation) and isinstance(e.operator, cst.And):
        return _scalar_guard_names(e.left) | _scalar_guard_names(e.right)
    test = _isinstance_test(e)
    if test is not None:
        subject, names = test
        if isinstance(subject, cst.Name) and all(n in _PY_SCALARS or _numpy_scalar(n) for n in names):
            return frozenset({subject.value})  # (`isinstance(v, (int, float, np.number))`: no tracer is one)
        # `isinstance(x[0], np.ndarray)` is false for a tracer: the branch never runs under a trace.
        while isinstance(subject, (cst.Subscript, cst.Attribute)):
            subject = subject.value
        if isinstance(subject, cst.Name) and all(n in _NUMPY_ARRAY_TYPES for n in names):
            return frozenset({subject.value})
    if isinstance(e, cst.UnaryOperation) and isinstance(e.operator, cst.Not):
        # `not isinstance(n, jax.core.Tracer)`, `not hasattr(n, "shape")`: n is a concrete value
        return _not_tracer(e.expression) | _array_test(e.expression)
    exact = _type_is_test(e)  # `type(st) is str`: a tracer's type is a tracer class
    if exact is not None and isinstance(exact[0], cst.Name) and exact[1] and all(n in _PY_SCALARS for n in exact[1]):
        return frozenset({exact[0].value})
    return frozenset()


# NumPy's scalar classes (`np.number`, `np.floating`, `np.float32`...): a tracer is an instance of none.
_NUMPY_SCALARS = frozenset({"number", "integer", "floating", "complexfloating", "signedinteger", "unsignedinteger",
                            "generic", "bool_", "float16", "float32", "float64", "int8", "int16", "int32", "int64",
                            "uint8", "uint16", "uint32", "uint64", "complex64", "complex128"})


def _numpy_scalar(name: str) -> bool:
    head, _, last = name.rpartition(".")
    return head in ("np", "numpy") and last in _NUMPY_SCALARS


def instance_guards(e: cst.BaseExpression) -> frozenset[str]:
    """`instance:x` for each name a true `e` proves an instance of a class that is no array type
    (`isinstance(leaf, VariableSlot) and ...`): whatever its attributes hold, `x` itself is no tracer, so
    it can be a dict key or be hashed."""
    if isinstance(e, cst.BooleanOperation) and isinstance(e.operator, cst.And):
        return instance_guards(e.left) | instance_guards(e.right)
    test = _isinstance_test(e)
    if test is None or not isinstance(test[0], cst.Name) or not test[1]:
        return frozenset()
    for name in test[1]:
        last = name.split(".")[-1]
        if not name or name in _JAX_ARRAY_TYPES or name in _NUMPY_ARRAY_TYPES or last == "object" \
                or any(part in last for part in ("Array", "ndarray", "Tracer", "Number", "generic")):
            return frozenset()
    return frozenset({f"instance:{test[0].value}"})


def _type_is_test(e: cst.BaseExpression) -> Optional[tuple[cst.BaseExpression, list[str]]]:
    """`type(subject) is A`, `type(subject) == A`, `type(subject) in (A, B)`: the subject and the classes
    as written. (Only where the test holds does it say anything: a tracer of a jax.Array fails
    `type(x) is jax.Array` too.)"""
    if not (isinstance(e, cst.Comparison) and len(e.comparisons) == 1):
        return None
    left, target = e.left, e.comparisons[0]
    if not (isinstance(left, cst.Call) and dotted(left.func) == "type" and len(left.args) == 1):
        return None
    if isinstance(target.operator, (cst.Is, cst.Equal)):
        names = [target.comparator]
    elif isinstance(target.operator, cst.In) and isinstance(target.comparator, (cst.Tuple, cst.List, cst.Set)):
        names = [el.value for el in target.comparator.elements]
    else:
        return None
    return left.args[0].value, [dotted(n) or "" for n in names]


def guard_helper(node: cst.FunctionDef) -> Optional[str]:
    """What a def returns, and nothing else, when it only tests for a trace: "tracer" for
    `isinstance(x, jax.core.Tracer)` of its first parameter, "tracers" for `any(isinstance(v, Tracer) for
    v in xs)` of its `*xs`, "tracing" for `not trace_state_clean()` (true inside any JAX transform)."""
    returns = [r.value for r in _returns(node.body)]
    if len(returns) != 1 or returns[0] is None:
        return None
    ret, params = returns[0], node.params
    first = next(iter([*params.posonly_params, *params.params]), None)
    if first is not None and tracer_test(ret) == first.name.value:
        return "tracer"
    if isinstance(ret, cst.UnaryOperation) and isinstance(ret.operator, cst.Not) and isinstance(ret.expression, cst.Call) \
            and _trace_state_test(ret.expression):
        return "tracing"
    star = params.star_arg.name.value if isinstance(params.star_arg, cst.Param) else None
    if star is not None and isinstance(ret, cst.Call) and dotted(ret.func) == "any" and len(ret.args) == 1:
        gen = ret.args[0].value
        if isinstance(gen, (cst.GeneratorExp, cst.ListComp)) and gen.for_in.inner_for_in is None \
                and not gen.for_in.ifs and isinstance(gen.for_in.target, cst.Name) \
                and isinstance(gen.for_in.iter, cst.Name) and gen.for_in.iter.value == star \
                and tracer_test(gen.elt) == gen.for_in.target.value:
            return "tracers"
    return None


def _trace_state_test(e: cst.Call) -> bool:
    """`jax.core.trace_state_clean()`: true only where nothing is being traced."""
    return not e.args and (dotted(e.func) or "").split(".")[-1] == "trace_state_clean"


def _not_tracer(e: cst.BaseExpression) -> frozenset[str]:
    """Where `isinstance(x, jax.core.Tracer)` (`core.Tracer`, any class named `...Tracer`) is false,
    `x` is a concrete value: the name tested."""
    tested = tracer_test(e)
    return frozenset({tested}) if tested is not None else frozenset()


def tracer_test(e: cst.BaseExpression) -> Optional[str]:
    """`isinstance(n, jax.core.Tracer)` (any class named `...Tracer`), or the same test of any leaf of `n`
    (`any(isinstance(leaf, Tracer) for leaf in jax.tree_util.tree_leaves(n))`, `... for leaf in n`): the
    name tested, else None."""
    test = _isinstance_test(e)
    if test is not None and isinstance(test[0], cst.Name) and test[1] \
            and all(n.split(".")[-1] == "Tracer" for n in test[1]):
        return test[0].value
    if isinstance(e, cst.Call) and dotted(e.func) == "any" and len(e.args) == 1 \
            and isinstance(e.args[0].value, (cst.GeneratorExp, cst.ListComp)):
        gen = e.args[0].value
        level = gen.for_in
        if level.inner_for_in is not None or level.ifs or not isinstance(level.target, cst.Name) \
                or tracer_test(gen.elt) != level.target.value:
            return None
        it = level.iter
        if isinstance(it, cst.Call) and (dotted(it.func) or "").rpartition(".")[2] in ("tree_leaves", "leaves") \
                and len(it.args) == 1:
            it = it.args[0].value
        return it.value if isinstance(it, cst.Name) else None
    return None


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


# JAX's private modules whose names are the public modules' own objects (`from jax._src.tree_util import
# register_pytree_with_keys` is `jax.tree_util.register_pytree_with_keys`).
_PRIVATE_HOMES = {
    "jax._src.api": "jax",
    "jax._src.tree_util": "jax.tree_util",
    "jax._src.random": "jax.random",
    "jax._src.numpy.lax_numpy": "jax.numpy",
    "jax._src.lax.lax": "jax.lax",
    "jax._src.lax.control_flow": "jax.lax",
    "jax._src.custom_derivatives": "jax",
    "jax._src.debugging": "jax.debug",
}


def public_name(qual: str) -> str:
    """`jax._src.tree_util.register_pytree_node` -> `jax.tree_util.register_pytree_node`; others unchanged."""
    if qual.startswith("jax._src."):
        module, _, name = qual.rpartition(".")
        for private in (qual, module):
            home = _PRIVATE_HOMES.get(private)
            if home is not None:
                return home if private == qual else f"{home}.{name}"
    return qual


def _note_import(scope: Scope, local: str, qual: str) -> None:
    qual = public_name(qual)
    if scope.imports.get(local, qual) != qual:
        scope.ambiguous_imports.add(local)
    scope.imports[local] = qual


def _wraps_itself(value: cst.BaseExpression, name: str) -> bool:
    """`step = jax.jit(step)`, `f = partial(jax.jit, static_argnums=1)(f)`: a def rebound to a wrapper
    of itself, as a decorator would."""
    return isinstance(value, cst.Call) and bool(value.args) and value.args[0].keyword is None \
        and not value.args[0].star and isinstance(value.args[0].value, cst.Name) \
        and value.args[0].value.value == name and not (isinstance(value.func, cst.Name) and value.func.value == name) \
        and (dotted(value.func) or "").split(".")[-1] != "partial"  # `f = partial(f, n=3)` binds arguments


def _always_exits(block: cst.BaseSuite) -> bool:
    """Whether a block ends in `return` or `raise` (the code after its `if` runs only when the test failed)."""
    if isinstance(block, cst.SimpleStatementSuite):
        last = block.body[-1] if block.body else None
    elif isinstance(block, cst.IndentedBlock) and block.body:
        stmt = block.body[-1]
        last = stmt.body[-1] if isinstance(stmt, cst.SimpleStatementLine) and stmt.body else None
    else:
        last = None
    return isinstance(last, (cst.Return, cst.Raise))


# Modules whose `__name__` is the name they are imported by (`import numpy as np`: "numpy").
_ARRAY_MODULES = frozenset({"numpy", "jax.numpy", "jax", "math", "scipy", "jax.scipy", "cupy", "torch",
                            "autograd.numpy", "tensorflow", "tensorflow.experimental.numpy"})


def _disables_jit(e: cst.BaseExpression, resolve, scope: Scope) -> bool:
    """`jax.disable_jit()` (or `jax.disable_jit(True)`): a context in which jit and `lax` control flow run
    their functions eagerly, on concrete values."""
    if not isinstance(e, cst.Call) or resolve(e.func, scope) != "jax.disable_jit":
        return False
    args = [a for a in e.args if a.keyword is None or a.keyword.value == "disable"]
    return not args or (len(args) == 1 and isinstance(args[0].value, cst.Name) and args[0].value.value == "True")


def _disable_jit_test(e: cst.BaseExpression) -> bool:
    """`jax.config.jax_disable_jit` (or `jax.config.read("jax_disable_jit")`): true only when jit is off."""
    name = dotted(e) or ""
    if name.endswith("config.jax_disable_jit"):
        return True
    return isinstance(e, cst.Call) and (dotted(e.func) or "").endswith("config.read") and len(e.args) == 1 \
        and isinstance(e.args[0].value, cst.SimpleString) and e.args[0].value.evaluated_value == "jax_disable_jit"


def flag_tests(e: cst.BaseExpression, holds: bool) -> frozenset[str]:
    """`if use_jax:` → {"true:use_jax"} in its body and {"false:use_jax"} in its `else` (and the reverse
    for `if not use_jax:`): a branch that runs only for one truth value of a name."""
    if isinstance(e, cst.Name) and e.value not in ("True", "False", "None"):
        return frozenset({f"{'true' if holds else 'false'}:{e.value}"})
    if isinstance(e, cst.UnaryOperation) and isinstance(e.operator, cst.Not):
        return flag_tests(e.expression, not holds)
    if isinstance(e, cst.BooleanOperation) and isinstance(e.operator, cst.And if holds else cst.Or):
        return flag_tests(e.left, holds) | flag_tests(e.right, holds)
    return frozenset()


def arm_tests(e: cst.BaseExpression, holds: bool) -> frozenset[str]:
    """What an `if` arm's test says about the names it tests (the body: `holds`; the `else`: not): flag
    truth values, names given or left None."""
    return flag_tests(e, holds) | given_tests(e, holds) | (none_tests(e) if holds else frozenset()) \
        | ident_tests(e, holds)


def ident_tests(e: cst.BaseExpression, holds: bool) -> frozenset[str]:
    """`if flag is True:` → {"is:True:flag"} in its body and {"isnot:True:flag"} in its `else` (the reverse
    for `is not`; also False and None; `if mode == "lax":` → {"eq:lax:mode"}, {"neq:lax:mode"}), and
    where `isinstance(x, jax.core.Tracer)` is false, {"notracer:x"}: a branch that runs only when a name
    is that object (or string), or is no tracer."""
    if isinstance(e, cst.UnaryOperation) and isinstance(e.operator, cst.Not):
        return ident_tests(e.expression, not holds)
    if isinstance(e, cst.BooleanOperation) and isinstance(e.operator, cst.And if holds else cst.Or):
        return ident_tests(e.left, holds) | ident_tests(e.right, holds)
    if isinstance(e, cst.Comparison) and isinstance(e.left, cst.Name) and len(e.comparisons) == 1:
        op, right = e.comparisons[0].operator, e.comparisons[0].comparator
        if isinstance(op, (cst.Is, cst.IsNot)) and isinstance(right, cst.Name) \
                and right.value in ("True", "False", "None"):
            how = "is" if isinstance(op, cst.Is) == holds else "isnot"
            return frozenset({f"{how}:{right.value}:{e.left.value}"})
        if isinstance(op, (cst.Equal, cst.NotEqual)) and isinstance(right, cst.SimpleString) \
                and isinstance(right.evaluated_value, str):
            # `if loop == "lax":` → {"eq:lax:loop"} in its body, {"neq:lax:loop"} in its `else`
            how = "eq" if isinstance(op, cst.Equal) == holds else "neq"
            return frozenset({f"{how}:{right.evaluated_value}:{e.left.value}"})
    return frozenset(f"notracer:{name}" for name in _not_tracer(e) | _array_test(e)) if not holds else frozenset()


def given_tests(e: cst.BaseExpression, holds: bool) -> frozenset[str]:
    """`if x is not None:` → {"given:x"} in its body, and in the `else` of `if x is None:`: the branch runs
    only when `x` was given a value."""
    if isinstance(e, cst.Comparison) and isinstance(e.left, cst.Name) and len(e.comparisons) == 1 \
            and _is_const(e.comparisons[0].comparator, "None"):
        op = e.comparisons[0].operator
        if (isinstance(op, cst.IsNot) and holds) or (isinstance(op, cst.Is) and not holds):
            return frozenset({f"given:{e.left.value}"})
    if isinstance(e, cst.BooleanOperation) and isinstance(e.operator, cst.And) and holds:
        return given_tests(e.left, True) | given_tests(e.right, True)
    return frozenset()


def not_none_tests(e: cst.BaseExpression) -> frozenset[str]:
    """`if x is not None:` → {"x"}: the branch runs only when `x` holds something."""
    if isinstance(e, cst.Comparison) and isinstance(e.left, cst.Name) and len(e.comparisons) == 1 \
            and isinstance(e.comparisons[0].operator, cst.IsNot) and _is_const(e.comparisons[0].comparator, "None"):
        return frozenset({e.left.value})
    return frozenset()


def none_tests(e: cst.BaseExpression) -> frozenset[str]:
    """`if x is None:` → {"none:x"}: the branch runs only when `x` was not given."""
    if isinstance(e, cst.Comparison) and isinstance(e.left, cst.Name) and len(e.comparisons) == 1 \
            and isinstance(e.comparisons[0].operator, cst.Is) and _is_const(e.comparisons[0].comparator, "None"):
        return frozenset({f"none:{e.left.value}"})
    return frozenset()
