"""Facts about loops that rules ask: what a loop iterates over, and what stays the same on every pass."""
from __future__ import annotations

from typing import Iterator, Optional, Union

import libcst as cst

from ..jaxapi import IMPURE_CALLS, IMPURE_PREFIXES
from ..syntax import _target_names, descendants, dotted, iter_children
from .model import ModuleModel
from .scopes import FunctionInfo, LoopInfo, Scope


def name_reads(node: cst.CSTNode) -> "Iterator[cst.Name]":
    """Every name read under `node` (the roots of attribute chains, not the attributes, nor the keyword
    names of calls: `f(x=1)` reads no `x`), once per read."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, cst.Name):
            yield n
        elif isinstance(n, cst.Attribute):
            stack.append(n.value)
        elif isinstance(n, cst.Arg):
            stack.append(n.value)
        else:
            stack.extend(iter_children(n))


def names_in(node: cst.CSTNode) -> set[str]:
    """Every name read under `node` (see `name_reads`)."""
    return {n.value for n in name_reads(node)}


def loop_statements(loop: LoopInfo) -> list[cst.BaseSmallStatement]:
    """The simple statements of a `for`/`while` loop body, in source order (not those of nested defs and
    classes)."""
    if not isinstance(loop.node, (cst.For, cst.While)):
        return []
    out: list[cst.BaseSmallStatement] = []
    stack: list[cst.CSTNode] = [loop.node.body]
    while stack:
        n = stack.pop()
        if isinstance(n, cst.SimpleStatementLine):
            out.extend(n.body)
        elif not isinstance(n, (cst.FunctionDef, cst.ClassDef, cst.BaseExpression)):
            stack.extend(reversed(list(iter_children(n))))
    return out


def distinct_constants(expr: cst.BaseExpression) -> bool:
    """A literal list, tuple or set of distinct constants (`[False, True]`, `("train", "eval")`)."""
    if not isinstance(expr, (cst.List, cst.Tuple, cst.Set)) or not expr.elements:
        return False
    codes = []
    for el in expr.elements:
        v = el.value
        if isinstance(v, cst.UnaryOperation) and isinstance(v.operator, cst.Minus):
            v = v.expression
        if not isinstance(el, cst.Element) or not (isinstance(v, (cst.Integer, cst.Float, cst.SimpleString))
                                                   or isinstance(v, cst.Name) and v.value in ("True", "False", "None")):
            return False
        codes.append(cst.Module([]).code_for_node(el.value))
    return len(set(codes)) == len(codes)


# Array constructors whose first argument is the shape.
_SHAPE_FIRST = frozenset({"zeros", "ones", "empty", "full"})


def distinct_shapes(expr: cst.BaseExpression, model: ModuleModel, scope: Scope) -> bool:
    """A literal list or tuple of arrays built with pairwise different shapes
    (`(jnp.array(1.0), jnp.ones((2,)), jnp.ones((2, 2)))`): a loop over it hands each pass a new shape."""
    if not isinstance(expr, (cst.List, cst.Tuple)) or len(expr.elements) < 2:
        return False
    keys = []
    for el in expr.elements:
        v = el.value
        if isinstance(el, cst.StarredElement) or not isinstance(v, cst.Call) or not v.args:
            return False
        q = model.resolve(v.func, scope) or ""
        module, _, name = q.rpartition(".")
        if module not in ("jax.numpy", "numpy"):
            return False
        first = v.args[0].value
        if name in _SHAPE_FIRST:
            keys.append(cst.Module([]).code_for_node(first).replace(" ", ""))
        elif name in ("array", "asarray"):
            keys.append(_literal_shape(first))
        else:
            return False
        if keys[-1] is None:
            return False
    return len(set(keys)) == len(keys)


def _literal_shape(v: cst.BaseExpression) -> Optional[str]:
    """The shape of a nested list/tuple literal of numbers, written `(2,3)` (None when it is not one)."""
    if isinstance(v, (cst.Integer, cst.Float)) or isinstance(v, cst.UnaryOperation) and isinstance(
            v.expression, (cst.Integer, cst.Float)):
        return "()"
    if isinstance(v, (cst.List, cst.Tuple)) and v.elements:
        inner = {_literal_shape(el.value) for el in v.elements}
        if len(inner) != 1 or None in inner:
            return None
        rest = inner.pop()[1:-1]
        return f"({len(v.elements)},{rest})" if rest else f"({len(v.elements)},)"
    return None


def literal_table(expr: cst.BaseExpression, model: ModuleModel, scope: Scope) -> bool:
    """A table of configurations written in the code: a dict, list or tuple literal, or a name bound
    once to one at module level or in the function (`for name in SETTINGS:`, `for n, bs in configs:`), or
    a parameter that defaults to one and is never rebound."""
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and not expr.args \
            and expr.func.attr.value in ("keys", "items", "values"):
        expr = expr.func.value
    if isinstance(expr, (cst.Dict, cst.List, cst.Tuple)):
        return _table(expr)
    if not isinstance(expr, cst.Name):
        return False
    owner = model.owner_of(expr.value, scope)
    if owner is None:
        return False
    p = owner.param(expr.value) if isinstance(owner, FunctionInfo) else None
    if p is not None:
        # `def benchmark(self, seq_lengths=[128, 256, 512])`: a sweep whose table is the default
        return isinstance(p.default, (cst.List, cst.Tuple)) and not owner.assigned.get(expr.value) \
            and _table(p.default)
    values = owner.assigned.get(expr.value, [])
    return len(values) == 1 and isinstance(values[0], (cst.Dict, cst.List, cst.Tuple)) and _table(values[0])


def _table(expr: Union[cst.Dict, cst.List, cst.Tuple]) -> bool:
    """A non-empty literal of configurations: a dict keyed by names, or rows of plain values (numbers,
    strings, names, tuples of them) — not arrays built per row (`[jnp.float32(2.0), ...]`)."""
    if isinstance(expr, cst.Dict):
        return bool(expr.elements)

    def plain(e: cst.BaseExpression) -> bool:
        if isinstance(e, (cst.Tuple, cst.List)):
            return all(plain(el.value) for el in e.elements)
        # (`dict(n=8)`, `Setting(n=8)`: a row of settings; `jnp.float32(2.0)`: an array)
        return not any(isinstance(n, cst.Call) and not (isinstance(n.func, cst.Name) and (
            n.func.value == "dict" or n.func.value[:1].isupper())) for n in descendants(e))

    return bool(expr.elements) and all(not isinstance(el, cst.StarredElement) and plain(el.value)
                                       for el in expr.elements)


def loop_invariant(value: cst.BaseExpression, loop: LoopInfo, model: ModuleModel, scope: Scope,
                   alike: frozenset[str] = frozenset()) -> bool:
    """Whether an expression gives the same value on every pass of `loop`: it reads nothing the loop binds
    (nor its target) and calls nothing random, clock-like or impure. `alike`: names the loop binds to an
    equal value on every pass."""
    varying = set(loop.bound) - alike
    node = loop.node
    if isinstance(node, cst.For):
        varying |= set(_target_names(node.target))
    stack: list[cst.CSTNode] = [value]
    while stack:
        n = stack.pop()
        if isinstance(n, cst.Name) and n.value in varying:
            return False
        if isinstance(n, cst.Call):
            q = model.resolve(n.func, scope) or ""
            if q in IMPURE_CALLS or q.startswith(IMPURE_PREFIXES + ("jax.random.", "time.")):
                return False
        if isinstance(n, (cst.Lambda, cst.BaseComp)):
            return False
        if isinstance(n, cst.Attribute):
            stack.append(n.value)  # (`args.lr`: the attribute's name is no variable)
            continue
        stack.extend(iter_children(n))
    return True


def restarts_each_pass(name: str, loop: LoopInfo, model: ModuleModel, scope: Scope) -> bool:
    """Whether each pass of `loop` binds `name` afresh, from the same value, before anything in the pass reads
    it: its first binding is a statement of the loop body itself (no branch skips it) to a loop-invariant value,
    and later bindings build only on it (`f = jax.vmap(step); f = jax.vmap(f, in_axes=1)`)."""
    values = loop.bound.get(name, [])
    node = loop.node
    if not values or values[0] is None or not isinstance(node, (cst.For, cst.While)) \
            or not isinstance(node.body, cst.IndentedBlock):
        return False
    first = values[0]
    if not any(isinstance(line, cst.SimpleStatementLine) and any(
            isinstance(st, cst.Assign) and st.value is first and len(st.targets) == 1
            and isinstance(st.targets[0].target, cst.Name) for st in line.body) for line in node.body.body):
        return False
    if not loop_invariant(first, loop, model, scope):
        return False
    return all(v is not None and loop_invariant(v, loop, model, scope, frozenset({name})) for v in values[1:])


def loop_levels(loop: LoopInfo) -> list[tuple[cst.BaseExpression, cst.BaseExpression]]:
    """(target, iterable) of a `for` loop, or of each `for` of a comprehension; none for a `while`."""
    node = loop.node
    if isinstance(node, cst.For):
        return [(node.target, node.iter)]
    levels: list[tuple[cst.BaseExpression, cst.BaseExpression]] = []
    level = node.for_in if isinstance(node, (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)) else None
    while level is not None:
        levels.append((level.target, level.iter))
        level = level.inner_for_in
    return levels


def from_item(expr: cst.BaseExpression, loop: LoopInfo, depth: int = 0) -> bool:
    """Whether an expression reads the item of a `for` loop or a comprehension, itself or through names the
    loop body binds from it (`nspb = min(cap, n)` in `for n in sizes`)."""
    if depth > 3:
        return False
    levels = loop_levels(loop)  # (`[run(x, n) for n in sizes]`: every `for` of a comprehension)
    if not levels:
        return False
    items = {name for target, _iter in levels for name in _target_names(target)}
    names: set[str] = set()
    stack: list[cst.CSTNode] = [expr]
    while stack:
        n = stack.pop()
        if isinstance(n, cst.Name):
            names.add(n.value)
        stack.extend([n.value] if isinstance(n, cst.Attribute) else iter_children(n))  # (not `.attr`)
    if names & items:
        return True
    for name in sorted(names):
        values = loop.bound.get(name, [])
        if None in values:  # `a, n = case`: the whole value unpacked
            values = values + [a.value for a in descendants(loop.node) if isinstance(a, cst.Assign)
                               and any(name in _target_names(t.target) for t in a.targets)]
        if any(v is not None and from_item(v, loop, depth + 1) for v in values):
            return True
    return False


def single_pass(loop: LoopInfo, model: Optional[ModuleModel] = None) -> bool:
    """A `for` over exactly one item, written so: `range(1)`, `range(k, k + 1)` with literal bounds (or
    names bound once to them: `repeat = 1`; with `model`, also module constants of this file or imported
    from another: `from .settings import trials`), a one-element list or tuple literal. Its body runs once,
    like straight-line code."""
    node = loop.node
    if not isinstance(node, cst.For):
        return False
    it = node.iter
    if isinstance(it, (cst.List, cst.Tuple)):
        return len(it.elements) == 1 and not isinstance(it.elements[0], cst.StarredElement)
    if isinstance(it, cst.Call) and dotted(it.func) == "range" and 1 <= len(it.args) <= 2 \
            and all(a.keyword is None and not a.star for a in it.args):
        bounds = [_int_value(a.value, loop.scope) if model is None else model.int_value(a.value, loop.scope)
                  for a in it.args]
        if any(b is None for b in bounds):
            return False
        return (bounds[0] == 1) if len(bounds) == 1 else (bounds[1] - bounds[0] == 1)  # type: ignore[operator]
    return False


def _int_value(e: cst.BaseExpression, scope: Scope) -> Optional[int]:
    """An integer literal, or a name its scope binds once, to an integer literal (`repeat = 1`)."""
    if isinstance(e, cst.Name):
        values = scope.assigned.get(e.value, [])
        if len(values) != 1 or len(scope.bind_order.get(e.value, [])) != 1:
            return None
        e = values[0]  # type: ignore[assignment]
    return int(e.value, 0) if isinstance(e, cst.Integer) else None


def repeating(loop: Optional[LoopInfo], model: Optional[ModuleModel] = None) -> Optional[LoopInfo]:
    """The innermost loop around a place that runs more than once (single-pass loops do not count)."""
    while loop is not None and single_pass(loop, model):
        loop = loop.parent
    return loop


# Calls that drop every compiled program and trace, so the next call of a jitted function traces again.
CLEAR_CACHES = frozenset({"jax.clear_caches", "equinox.clear_caches"})


def clears_caches(loop: LoopInfo, model: ModuleModel) -> bool:
    """`jax.clear_caches()` in the loop body (or in a function of the module it calls there): every pass
    traces and compiles afresh."""

    def clears(call: cst.Call, scope: Scope, depth: int = 0) -> bool:
        if model.resolve(call.func, scope) in CLEAR_CACHES:
            return True
        # `def clear_caches(): jax.clear_caches()` called in the loop
        ref = model.resolve_callable(call.func, scope) if depth < 2 else None
        return ref is not None and any(clears(c, ref.fn, depth + 1) for c in ref.fn.calls)

    return any(loop.encloses(l) and clears(c, s) for c, s, l in model.all_calls if l is not None)
