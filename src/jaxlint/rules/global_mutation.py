"""global-mutation: traced code writing state that outlives the trace."""
from __future__ import annotations

from typing import Optional

import libcst as cst

from ..jaxapi import MUTATING_METHODS
from ..model import ClassInfo, FunctionInfo, Scope
from .base import Rule, Where, tracing_phrase

# Methods that only a list/set/deque has: safe to flag even when the receiver's type is unknown.
# (`update`, `pop`, `clear` are also names of pure functional APIs, e.g. an optax optimizer's `update`.)
_CONTAINER_ONLY = frozenset({"append", "extend", "insert", "appendleft", "extendleft", "setdefault", "add", "discard"})
_CONTAINER_FACTORIES = frozenset(
    {
        "builtins.list", "builtins.dict", "builtins.set", "collections.defaultdict", "collections.deque",
        "collections.OrderedDict", "collections.Counter",
    }
)


def _root_name(expr: cst.BaseExpression) -> Optional[cst.Name]:
    while isinstance(expr, (cst.Attribute, cst.Subscript)):
        expr = expr.value
    return expr if isinstance(expr, cst.Name) else None


def _passes_through_at(expr: cst.BaseExpression) -> bool:
    while isinstance(expr, (cst.Attribute, cst.Subscript)):
        if isinstance(expr, cst.Attribute) and expr.attr.value == "at":
            return True
        expr = expr.value
    return False


class GlobalMutation(Rule):
    """
    ## What it does
    Flags traced code that writes state living outside the trace: assignment to a `global` or
    `nonlocal` name, mutation of a module-level or closed-over container (`append`, `update`,
    `x[k] = v`, `del x[k]`), attribute assignment on a module-level object, and assignment to
    attributes of `self` inside a jitted method.

    ## Why is this bad?
    The write happens once, while JAX traces the function; later calls run the compiled program and
    never repeat it. The written value is a tracer, which leaks out of the trace
    (`UnexpectedTracerError` when used later).

    ## Example
    ```python
    import jax

    LOSSES = []

    @jax.jit
    def step(x):
        loss = (x ** 2).sum()
        LOSSES.append(loss)
        return loss
    ```

    ## Use instead
    ```python
    import jax

    @jax.jit
    def step(x):
        return (x ** 2).sum()

    LOSSES = []
    LOSSES.append(step(1.0))
    ```
    Return the values and keep state outside, or thread it through the function explicitly.

    ## How it is verified
    The named state is observed before and after tracing and after a second call with inputs of the
    same shapes: it changes during the trace and not on the second call.

    ## Known limitations
    Method calls on objects of unknown type are only flagged for list/set-only methods (`append`,
    `extend`, `add`, …): `update` or `pop` may be pure APIs such as an optimizer's `update`.

    ## References
    - https://docs.jax.dev/en/latest/stateful-computations.html
    - https://docs.jax.dev/en/latest/errors.html#jax.errors.UnexpectedTracerError
    """

    code = "JL202"
    name = "global-mutation"
    summary = "state mutated while tracing"

    # ---- helpers ----------------------------------------------------------------------------

    def _outliving_owner(self, name: str, where: Where) -> Optional[Scope]:
        """The scope owning `name` if the name lives outside the trace of the current function."""
        fn = where.scope.function_scope()
        if fn is None:
            return None
        if name in fn.local_names:
            return None
        owner = where.model.owner_of(name, where.scope)
        if owner is None:
            return None
        if owner is where.model.root:
            if name in owner.imports:
                return None  # attributes of imported modules: out of scope
            return owner
        if isinstance(owner, FunctionInfo) and not owner.traced:
            return owner
        return None  # owned by a traced enclosing function: same trace

    def _is_self(self, name: str, fn: FunctionInfo) -> bool:
        return fn.is_method and bool(fn.params) and fn.params[0].name == name

    def _known_container(self, name: str, owner: Scope, where: Where) -> bool:
        for value in owner.assigned.get(name, []):
            if isinstance(value, (cst.List, cst.Dict, cst.Set, cst.ListComp, cst.DictComp, cst.SetComp)):
                return True
            if isinstance(value, cst.Call) and where.model.resolve(value.func, owner) in _CONTAINER_FACTORIES:
                return True
        return False

    def _flag(self, node: cst.CSTNode, what: str, where: Where) -> None:
        fn = where.traced
        assert fn is not None
        self.report(
            node,
            f"{what} {tracing_phrase(fn)} happens once per trace, not on each call, and can leak tracers; "
            "return the value or pass state in and out explicitly.",
            where,
        )

    def _check_target(self, target: cst.BaseExpression, node: cst.CSTNode, where: Where) -> None:
        fn = where.traced
        if fn is None:
            return
        if isinstance(target, cst.Name):
            if target.value in fn.declared_global:
                self._flag(node, f"Assigning global `{target.value}`", where)
            elif target.value in fn.declared_nonlocal:
                owner = where.model.owner_of(target.value, where.scope)
                if not (isinstance(owner, FunctionInfo) and owner.traced):
                    self._flag(node, f"Assigning nonlocal `{target.value}`", where)
            return
        if isinstance(target, (cst.Tuple, cst.List)):
            for el in target.elements:
                self._check_target(el.value, node, where)
            return
        if not isinstance(target, (cst.Subscript, cst.Attribute)) or _passes_through_at(target):
            return
        if isinstance(target, cst.Subscript) and len(target.slice) == 1 and isinstance(target.slice[0].slice, cst.Index) \
                and isinstance(target.slice[0].slice.value, cst.Ellipsis):
            return  # `ref[...] = v`: a mutable array reference, updated through the trace by design
        root = _root_name(target)
        if root is None:
            return
        if self._is_self(root.value, fn):
            if "flax_jit" in fn.transforms or where.model.frameworks.self_updates_propagate(fn):
                return  # Flax's jit (and nnx's transforms) propagate Module state updates out of the trace
            if isinstance(target, cst.Attribute) or isinstance(target.value, cst.Attribute):
                self._flag(node, f"Writing `{root.value}` state", where)
            return
        owner = self._outliving_owner(root.value, where)
        if owner is None:
            return
        if isinstance(target, cst.Attribute) and isinstance(owner, ClassInfo):
            return
        kind = "module-level" if owner is where.model.root else "closed-over"
        self._flag(node, f"Writing {kind} `{root.value}`", where)

    # ---- visitors ---------------------------------------------------------------------------

    def visit_Assign(self, node: cst.Assign, where: Where) -> None:
        for t in node.targets:
            self._check_target(t.target, node, where)

    def visit_AugAssign(self, node: cst.AugAssign, where: Where) -> None:
        self._check_target(node.target, node, where)

    def visit_AnnAssign(self, node: cst.AnnAssign, where: Where) -> None:
        if node.value is not None:
            self._check_target(node.target, node, where)

    def visit_Del(self, node: cst.Del, where: Where) -> None:
        self._check_target(node.target, node, where)

    def visit_Call(self, node: cst.Call, where: Where) -> None:
        fn = where.traced
        func = node.func
        if fn is None or not isinstance(func, cst.Attribute) or func.attr.value not in MUTATING_METHODS:
            return
        if _passes_through_at(func.value):
            return
        root = _root_name(func.value)
        if root is None:
            return
        method = func.attr.value
        if self._is_self(root.value, fn):
            if method in _CONTAINER_ONLY and isinstance(func.value, (cst.Attribute, cst.Subscript)) \
                    and "flax_jit" not in fn.transforms:
                self._flag(node, f"Mutating `{root.value}` state with `.{method}()`", where)
            return
        owner = self._outliving_owner(root.value, where)
        if owner is None:
            return
        direct = func.value is root
        if not (method in _CONTAINER_ONLY or (direct and self._known_container(root.value, owner, where))):
            return
        kind = "module-level" if owner is where.model.root else "closed-over"
        self._flag(node, f"Mutating {kind} `{root.value}` with `.{method}()`", where)
