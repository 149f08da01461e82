"""stale-global: traced code reads a global (or closed-over) name that is rebound after the function is defined."""
from __future__ import annotations

from typing import Iterator, Optional, Union

import libcst as cst

from ..semantic import ClassInfo, FunctionInfo, LoopInfo, ModuleModel, Scope
from ..syntax import iter_children
from .base import Report, Rule, Where, tracing_phrase


def _loads(node: cst.CSTNode) -> Iterator[cst.Name]:
    """Names read in a function body, in source order, not descending into nested scopes."""
    stack: list[cst.CSTNode] = [node]
    out: list[cst.Name] = []
    while stack:
        n = stack.pop()
        if isinstance(n, cst.Name):
            out.append(n)
            continue
        if isinstance(n, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        if isinstance(n, cst.Attribute):
            stack.append(n.value)
            continue
        if isinstance(n, cst.Arg):
            stack.append(n.value)
            continue
        if isinstance(n, cst.AssignTarget) and isinstance(n.target, cst.Name):
            continue  # `X = …` under `global X` writes, it does not read
        if isinstance(n, (cst.Global, cst.Nonlocal, cst.Import, cst.ImportFrom)):
            continue
        stack.extend(reversed(list(iter_children(n))))
    return iter(out)


class StaleGlobal(Rule):
    """
    ## What it does
    Flags a read, inside traced code, of a module-level name (or a variable of an enclosing function)
    that is rebound after the traced function is defined: by a later assignment, by a loop, or by a
    `global` statement in another function.

    ## Why is this bad?
    JAX reads the name once, while tracing, and bakes its value into the compiled code. Rebinding it
    later does nothing: the jitted function keeps using the old value until it happens to re-trace.

    ## Example
    ```python
    import jax

    SCALE = 1.0

    @jax.jit
    def scale(x):
        return x * SCALE

    def set_scale(value):
        global SCALE
        SCALE = value
    ```

    ## Use instead
    ```python
    import jax

    @jax.jit
    def scale(x, factor):
        return x * factor
    ```
    Pass the value as an argument (static if it changes the program's structure).

    ## How it is verified
    The function is called, the global rebound, and the function called again: the result still
    reflects the old value.

    ## Known limitations
    Mutation of a global object's contents (`CONFIG["lr"] = ...`) is not a rebinding and is not
    flagged here. Only the first read of each name in a function is reported.

    ## References
    - https://docs.jax.dev/en/latest/notebooks/Common_Gotchas_in_JAX.html#pure-functions
    """

    code = "JL204"
    name = "stale-global"
    summary = "global rebound after tracing"
    anywhere = True  # visits the def itself, which sits outside the function it checks

    def visit_FunctionDef(self, node: cst.FunctionDef, where: Where) -> None:
        self._check(node, where)

    def visit_Lambda(self, node: cst.Lambda, where: Where) -> None:
        self._check(node, where)

    def _check(self, node: Union[cst.FunctionDef, cst.Lambda], where: Where) -> None:
        model = where.model
        fn = model.fn_of_node.get(id(node))
        if fn is None or not fn.traced or not fn.cached:
            return  # only a cached trace outlives a rebinding
        candidates = self._candidates(fn, where)
        if not candidates:
            return
        seen: set[str] = set()
        local = fn.local_names
        for name in _loads(node.body):
            n = name.value
            if n in candidates and n not in seen and n not in local:
                seen.add(n)
                how = candidates[n]
                self.reports.append(self._report(name, n, how, fn))

    def _candidates(self, fn: FunctionInfo, where: Where) -> dict[str, str]:
        model = where.model
        out: dict[str, str] = {}
        shadowed: set[str] = set(fn.local_names)
        s: Optional[Scope] = fn.parent
        while s is not None:
            if isinstance(s, ClassInfo):
                s = s.parent
                continue
            if s is not model.root:
                # Closures: the traced function is rebuilt with its enclosing function, so a rebinding
                # there is seen by a stale trace only when a loop after the def rebinds the name and
                # also calls the cached function (a training loop decaying a closed-over rate).
                if isinstance(s, FunctionInfo) and not s.traced:
                    for name in set(s.bind_order) - shadowed - set(s.defs) - set(s.classes) - set(s.imports):
                        loop = _rebinding_loop_calling(name, s, fn, model)
                        if loop is not None:
                            out[name] = f"a loop of `{s.qualname}` rebinds it between calls"
                shadowed |= set(s.bind_order) | set(s.defs) | set(s.classes) | set(s.imports)
                if isinstance(s, FunctionInfo):
                    shadowed |= {p.name for p in s.params}
                s = s.parent
                continue
            names = set(s.bind_order) | set(s.defs) | set(s.classes) | set(s.imports)
            if isinstance(s, FunctionInfo):
                names |= {p.name for p in s.params}
            for name in names - shadowed:
                if name in s.imports or name in s.defs or name in s.classes:
                    continue
                if isinstance(s, FunctionInfo) and s.traced:
                    continue  # a value of the enclosing trace, not state outside it
                how = self._rebinding(name, s, fn, model)
                if how:
                    out[name] = how
            shadowed |= names
            s = s.parent
        return out

    def _rebinding(self, name: str, owner: Scope, fn: FunctionInfo, model: ModuleModel) -> Optional[str]:
        """How `name` can be rebound after `fn` is traced, or None. Rebindings that run before the def (a
        loop that ends before it), rebindings to the same literal, and rebindings inside a loop that also
        redefines the reader (a notebook-style script re-running a cell) are not stale."""
        if _same_literal(name, owner, model):
            return None
        at_def = fn
        while at_def.parent is not owner and isinstance(at_def.parent, FunctionInfo):
            at_def = at_def.parent  # the def that runs in the owner's scope
        orders = list(owner.bind_order.get(name, []))
        loops = owner.bind_loops.get(name, [])
        later = [loop for order, loop in zip(orders, loops)
                 if order > fn.order and not _shared_loop(loop, at_def.loop_at_def)]
        if any(loop is not None for loop in later):
            return "a loop rebinds it"
        if later and len(orders) >= 2:
            first_later = min(o for o in orders if o > fn.order)
            last_use = _last_use(at_def, model)
            if last_use is not None and last_use < first_later:
                return None  # every use of the reader comes before the rebinding (a script run top to bottom)
            return "it is rebound after the function is defined"
        if owner is model.root:
            for other in model.functions:
                if name in other.declared_global and name in other.bind_order:
                    last = max(other.bind_order[name])
                    if fn.trace_sites and all(scope is other and order > last for scope, order in fn.trace_sites):
                        continue  # only traced by `other`, after it rebinds the name: the trace sees the new value
                    if other is fn:
                        return f"`{fn.qualname}` itself rebinds it with `global`"
                    return f"`{other.qualname}` rebinds it with `global`"
        return None

    def _report(self, node: cst.Name, name: str, how: str, fn: FunctionInfo) -> Report:
        return Report(
            node,
            f"`{name}` is read {tracing_phrase(fn)}, but {how}: the value seen when JAX traced it is baked into "
            "the compiled code; pass it as an argument instead.",
            fn,
            subject={"name": name, "how": how},
        )


def _last_use(fn: FunctionInfo, model: ModuleModel) -> Optional[int]:
    """The source-order stamp of the last module-level call of a module-level function, when calls there
    are all that refers to it (a loop around them ends before a rebinding that is not itself in a loop);
    None when it may be used otherwise."""
    if fn.parent is not model.root or fn.name in model.root.declared_global:
        return None
    last = None
    for call, scope, loop in model.all_calls:
        refers = isinstance(call.func, cst.Name) and call.func.value == fn.name
        passed = any(isinstance(a.value, cst.Name) and a.value.value == fn.name for a in call.args)
        if passed or (refers and scope is not model.root):
            return None  # handed on, or called from a function that may run later
        if refers:
            last = max(last or 0, model.call_order.get(id(call), 0))
    for values in model.root.assigned.values():
        if any(isinstance(v, cst.Name) and v.value == fn.name for v in values):
            return None  # aliased
    return last


def _rebinding_loop_calling(name: str, owner: FunctionInfo, fn: FunctionInfo, model: ModuleModel
                            ) -> Optional[LoopInfo]:
    """A loop of `owner`, run after `fn` is defined there, that both rebinds `name` and calls `fn` (by
    the name it is defined under): each pass after the first reuses the trace of the first value."""
    if fn.parent is not owner:
        return None
    for order, loop in zip(owner.bind_order.get(name, []), owner.bind_loops.get(name, [])):
        if loop is None or order < fn.order or _shared_loop(loop, fn.loop_at_def):
            continue
        for call, scope, call_loop in model.all_calls:
            if (scope is owner and loop.encloses(call_loop) and isinstance(call.func, cst.Name)
                    and call.func.value == fn.name):
                return loop
    return None


def _shared_loop(binding: Optional[LoopInfo], at_def: Optional[LoopInfo]) -> bool:
    """Whether one loop runs both the rebinding and the def: each pass then defines the reader anew."""
    while binding is not None:
        if binding.encloses(at_def):
            return True
        binding = binding.parent
    return False


def _same_literal(name: str, owner: Scope, model: ModuleModel) -> bool:
    """Whether every binding of `name` (in its scope and under `global` elsewhere) is the same literal."""
    values = list(owner.assigned.get(name, []))
    if owner is model.root:
        for other in model.functions:
            if name in other.declared_global:
                values.extend(other.assigned.get(name, []))
    codes = set()
    for v in values:
        if not isinstance(v, (cst.Integer, cst.Float, cst.SimpleString, cst.Name)) or (
                isinstance(v, cst.Name) and v.value not in ("True", "False", "None")):
            return False
        codes.add(cst.Module([]).code_for_node(v))
    return len(codes) == 1 and len(values) >= 2
