"""jit-in-loop: `jax.jit` of a callable built anew on each pass of a loop."""
from __future__ import annotations

from typing import Optional

import libcst as cst

from ..edits import Edit, hoist_before
from ..findings import Fix
from ..jaxapi import CALLBACKS, DTYPE_ARGS, JIT_LIKE, SHAPE_ARGS
from ..semantic import FunctionInfo, LoopInfo
from ..semantic.scopes import Scope
from ..semantic.traced import filled_args
from ..semantic.loops import (
    clears_caches, distinct_constants, distinct_shapes, from_item, literal_table, loop_invariant, loop_levels,
    loop_statements, name_reads, names_in, repeating, restarts_each_pass,
)
from ..syntax import (
    _arg, _int_leaf, _literal_values, _str_leaf, _target_names, args_at, code_of, contains, descendants, dotted,
    iter_children, name_counts,
)
from .base import Rule, Where


def _params_of(node: cst.CSTNode) -> set[str]:
    if isinstance(node, cst.Lambda):
        ps = node.params
        return {p.name.value for p in list(ps.params) + list(ps.posonly_params) + list(ps.kwonly_params)}
    return set()


def _bound_in_loop(loop: LoopInfo) -> set[str]:
    names = set(loop.bound)
    if isinstance(loop.node, cst.For):
        names |= names_in(loop.node.target)
    return names


def _free_names(node: cst.CSTNode, fn: Optional[FunctionInfo], defaults: bool = True) -> set[str]:
    """Names a callable expression reads from outside itself (for a def or lambda: not its own locals);
    with `defaults`, also the names its parameter defaults read, evaluated outside
    (`lambda t, y, vf=vf: vf(t, y)` captures the loop's `vf`)."""
    if fn is not None and isinstance(fn.node, (cst.FunctionDef, cst.Lambda)):
        names = names_in(fn.node.body) - fn.local_names
        if defaults:
            names |= {n for p in fn.params if p.default is not None for n in names_in(p.default)}
        return names
    names = names_in(node) - _params_of(node)
    if defaults and isinstance(node, cst.Lambda):
        names |= {n for p in node.params.params + node.params.kwonly_params if p.default is not None
                  for n in names_in(p.default)}
    return names


def _unpacked_values(fn: FunctionInfo, name: str) -> list[Optional[cst.BaseExpression]]:
    """The values bound to `name` in `fn`, taking a tuple assigned from a tuple element by element."""
    return [b.assigned for b in fn.bindings(name)]



_MEMOISING = frozenset({"cached_property", "cache", "lru_cache"})


def _item_function(expr: cst.BaseExpression, per_item: set[str]) -> bool:
    """Whether a callable expression is a function of the loop's item (`agent.policy`, `vmap(a.act)`):
    each item brings its own code, so each jitted function is compiled once whatever the loop does."""
    stack: list[cst.CSTNode] = [expr]
    while stack:
        n = stack.pop()
        if isinstance(n, cst.Attribute):
            root = n.value
            while isinstance(root, (cst.Attribute, cst.Subscript)):
                root = root.value
            if isinstance(root, cst.Name) and root.value in per_item:
                return True
        stack.extend(iter_children(n))
    return False


def _reads(node: cst.CSTNode, name: str) -> int:
    """How many times `name` is mentioned under `node` other than as a plain binding (`name = ...`, `def name`)."""
    mentions = stores = 0
    for n in descendants(node):
        if isinstance(n, cst.Name) and n.value == name:
            mentions += 1
        elif isinstance(n, cst.AssignTarget) and isinstance(n.target, cst.Name) and n.target.value == name \
                or isinstance(n, cst.FunctionDef) and n.name.value == name:
            stores += 1
    return mentions - stores


def _never_used(name: str, scope_node: cst.CSTNode, depth: int = 0) -> bool:
    """Whether nothing in the scope reads `name`, but defs that are themselves never used (a jitted function
    made on each pass that no one calls, or only a def no one calls does): nothing is traced, nothing compiles."""
    reads = _reads(scope_node, name)
    if reads <= 0 or depth > 2:
        return reads <= 0
    for d in descendants(scope_node):
        if isinstance(d, cst.FunctionDef) and d is not scope_node and d.name.value != name:
            inside = _reads(d, name)
            if inside and _never_used(d.name.value, scope_node, depth + 1):
                reads -= inside
    return reads <= 0


def _used_only_in_traces(name: str, fn: FunctionInfo, where: Where) -> bool:
    """Whether every use of the jitted def `name` in its scope is inside another function JAX traces: it is
    then traced only as part of that function (no compile of its own), and whether that re-traces is the
    outer function's matter."""
    scope_node = where.scope.node
    if scope_node is None:
        return False
    reads = _reads(scope_node, name)
    stack: list[cst.CSTNode] = [scope_node]
    while stack:
        n = stack.pop()
        if isinstance(n, (cst.FunctionDef, cst.Lambda)) and n is not scope_node and n is not fn.node:
            info = where.model.fn_of_node.get(id(n))
            if info is not None and info.traced:
                reads -= _reads(n, name)
                continue
        stack.extend(iter_children(n))
    return reads <= 0 < _reads(scope_node, name)


def _assigned_names(call: cst.Call, loop: LoopInfo) -> set[str]:
    """The names a loop body binds the result of `call` to (`f = jax.jit(...)`)."""
    return {t.target.value for st in loop_statements(loop) if isinstance(st, cst.Assign) and st.value is call
            for t in st.targets if isinstance(t.target, cst.Name)}


def _is_constructor(call: cst.Call, where: Where) -> bool:
    func = call.func
    name = func.value if isinstance(func, cst.Name) else func.attr.value if isinstance(func, cst.Attribute) else ""
    return name[:1].isupper() or name in where.model.root.classes


def _stores_per_item(value: cst.BaseExpression, stmts: list[cst.BaseSmallStatement], per_item: set[str],
                     depth: int = 0) -> bool:
    """Whether the loop keeps `value` per pass: appends it (alone or in a tuple) to a container, stores it
    under a key or on an object that depends on the loop item, directly or through one name bound to it."""
    for st in stmts:
        if isinstance(st, cst.Expr) and isinstance(st.value, cst.Call) and isinstance(st.value.func, cst.Attribute) \
                and st.value.func.attr.value in ("append", "add") and len(st.value.args) == 1:
            arg = st.value.args[0].value
            kept = [el.value for el in arg.elements] if isinstance(arg, cst.Tuple) else [arg]  # `append((f, g))`
            if any(a is value or (isinstance(value, cst.Name) and isinstance(a, cst.Name) and a.value == value.value)
                   for a in kept):
                return True
        if not isinstance(st, cst.Assign):
            continue
        same = st.value is value or (isinstance(value, cst.Name) and isinstance(st.value, cst.Name)
                                     and st.value.value == value.value)
        if not same:
            continue
        for t in st.targets:
            target = t.target
            if isinstance(target, cst.Subscript) and names_in(target) & per_item \
                    or isinstance(target, cst.Attribute) and names_in(target.value) & per_item:
                return True
            if isinstance(target, cst.Name) and depth == 0 and st.value is value \
                    and _stores_per_item(target, stmts, per_item, depth + 1):
                return True
    return False


def _kept_in_table(kept: cst.BaseExpression, loop: LoopInfo) -> bool:
    """Whether the loop keeps the jitted callable `kept` (the jit call, or the name bound to it) past its pass:
    appended to a container (alone or in a tuple, `fns.append((stack, unstack))`) or stored under a key or on
    an object that changes with the pass (`compiled[f"mm_{size}"] = mm`)."""
    return _stores_per_item(kept, loop_statements(loop), _bound_in_loop(loop))


def _kept_by_object(jit: cst.Call, loop: LoopInfo, where: Where) -> bool:
    """`opt = Optimizer(f=jax.jit(partial(f, size=size))); table[size] = opt` in a setup loop: the jitted
    function is handed to an object built for this item, which keeps it and calls it with its own
    arguments (so the item cannot become one), and the object is kept per item."""
    stmts = loop_statements(loop)
    per_item = _bound_in_loop(loop)
    holders = {t.target.value for st in stmts if isinstance(st, cst.Assign) and st.value is jit
               for t in st.targets if isinstance(t.target, cst.Name)}
    for st in stmts:
        stack: list[cst.CSTNode] = [st]
        while stack:
            n = stack.pop()
            if isinstance(n, cst.Call) and n is not jit and _is_constructor(n, where) and any(
                    a.value is jit or (isinstance(a.value, cst.Name) and a.value.value in holders) for a in n.args) \
                    and _stores_per_item(n, stmts, per_item):
                return True
            if not isinstance(n, (cst.Lambda, cst.FunctionDef)):
                stack.extend(iter_children(n))
    return False


def _built_once(jit: cst.Call, loop: LoopInfo, where: Where) -> bool:
    """`if not built: step = jax.jit(...); built = True` in a loop: the branch runs once, since it sets the flag
    it tests and the loop never clears it."""
    fn = where.function
    scope = fn if fn is not None else where.model.root
    stack: list[cst.CSTNode] = [loop.node.body] if isinstance(loop.node, (cst.For, cst.While)) else []
    while stack:
        n = stack.pop()
        if isinstance(n, (cst.FunctionDef, cst.ClassDef, cst.BaseExpression)):
            continue
        if isinstance(n, cst.If) and contains(n.body, jit):
            for flag in _negated_conjuncts(n.test):
                values = scope.assigned.get(flag, [])
                loops = scope.bind_loops.get(flag, [])
                sets = any(isinstance(st, cst.Assign) and _is_true(st.value) and any(
                    isinstance(t.target, cst.Name) and t.target.value == flag for t in st.targets)
                    for line in _block_of(n.body) if isinstance(line, cst.SimpleStatementLine) for st in line.body)
                if sets and len(values) == len(loops) and all(
                        _is_true(v) for v, l in zip(values, loops) if loop.encloses(l)):
                    return True
            for memo in _none_conjuncts(n.test):
                # `if step is None: step = jax.jit(...)`: the branch gives `step` a value, so it runs once
                # unless the loop sets it back to None
                values = scope.assigned.get(memo, [])
                loops = scope.bind_loops.get(memo, [])
                sets = any(isinstance(st, cst.Assign) and st.value is jit and any(
                    isinstance(t.target, cst.Name) and t.target.value == memo for t in st.targets)
                    for line in _block_of(n.body) if isinstance(line, cst.SimpleStatementLine) for st in line.body)
                if sets and len(values) == len(loops) and all(
                        v is not None and not (isinstance(v, cst.Name) and v.value == "None")
                        for v, l in zip(values, loops) if loop.encloses(l)):
                    return True
            for obj, attr in _missing_attributes(n.test):
                # `if not hasattr(self, "_step"): self._step = jax.jit(...)` (or `self._step is None`): the
                # attribute, once set on an object the loop keeps, makes the test fail on every later pass
                if any(isinstance(line, cst.SimpleStatementLine) and any(
                        isinstance(st, cst.Assign) and st.value is jit and any(
                            _is_attribute(t.target, obj, attr) for t in st.targets) for st in line.body)
                        for line in _block_of(n.body)) \
                        and not any(loop.encloses(l) for l in scope.bind_loops.get(obj, [])) \
                        and not _attribute_reset(loop.node, obj, attr, jit):
                    return True
        stack.extend(iter_children(n))
    return False


def _is_attribute(expr: cst.BaseExpression, obj: str, attr: str) -> bool:
    return isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == obj \
        and expr.attr.value == attr


def _missing_attributes(test: cst.BaseExpression) -> list[tuple[str, str]]:
    """The `(obj, attr)` of `not hasattr(obj, "attr")` and `obj.attr is None` terms that must all hold for
    the test to pass."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return _missing_attributes(test.left) + _missing_attributes(test.right)
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not) \
            and isinstance(test.expression, cst.Call) and dotted(test.expression.func) == "hasattr":
        args = test.expression.args
        if len(args) == 2 and isinstance(args[0].value, cst.Name) and isinstance(args[1].value, cst.SimpleString):
            name = args[1].value.evaluated_value
            if isinstance(name, str):
                return [(args[0].value.value, name)]
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 \
            and isinstance(test.comparisons[0].operator, cst.Is) \
            and isinstance(test.comparisons[0].comparator, cst.Name) and test.comparisons[0].comparator.value == "None" \
            and isinstance(test.left, cst.Attribute) and isinstance(test.left.value, cst.Name):
        return [(test.left.value.value, test.left.attr.value)]
    return []


def _attribute_reset(body: cst.CSTNode, obj: str, attr: str, jit: cst.Call) -> bool:
    """Whether the loop stores `obj.attr` other than with `jit`, deletes it, or sets it by name."""
    for n in descendants(body):
        if isinstance(n, (cst.Assign, cst.AnnAssign, cst.AugAssign)) and getattr(n, "value", None) is not jit:
            targets = [t.target for t in n.targets] if isinstance(n, cst.Assign) else [n.target]
            if any(_is_attribute(t, obj, attr) for target in targets for t in descendants(target)):
                return True
        elif isinstance(n, cst.Del) and any(_is_attribute(t, obj, attr) for t in descendants(n.target)):
            return True
        elif isinstance(n, cst.Call) and dotted(n.func) in ("setattr", "delattr"):
            return True
    return False


def _none_conjuncts(test: cst.BaseExpression) -> list[str]:
    """The names `x` of `x is None` terms that must all hold for the test to pass."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return _none_conjuncts(test.left) + _none_conjuncts(test.right)
    if isinstance(test, cst.Comparison) and isinstance(test.left, cst.Name) and len(test.comparisons) == 1 \
            and isinstance(test.comparisons[0].operator, cst.Is) \
            and isinstance(test.comparisons[0].comparator, cst.Name) and test.comparisons[0].comparator.value == "None":
        return [test.left.value]
    return []


def _block_of(body: cst.BaseSuite) -> list[cst.CSTNode]:
    return list(body.body) if isinstance(body, cst.IndentedBlock) else [body]


def _is_true(value: Optional[cst.BaseExpression]) -> bool:
    return isinstance(value, cst.Name) and value.value == "True"


def _negated_conjuncts(test: cst.BaseExpression) -> list[str]:
    """The names `x` of `not x` terms that must all hold for the test to pass (`a and not x`)."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return _negated_conjuncts(test.left) + _negated_conjuncts(test.right)
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not) \
            and isinstance(test.expression, cst.Name):
        return [test.expression.value]
    return []



def _options_vary(jit: cst.Call, loop: LoopInfo, where: Where) -> bool:
    """Whether the options of a jit call or decorator (`jax.jit(f, out_shardings=s)`,
    `@partial(jax.jit, out_shardings=s)`), or of a transform it wraps (`jax.jit(jax.vmap(f, in_axes=axes))`),
    read a name the loop binds: each pass asks for a different program (another sharding, donation, static
    set, batching), compiled anew wherever the jitted function is built."""
    varying = _bound_in_loop(loop)
    if any(a.keyword is not None and names_in(a.value) & varying for a in jit.args):
        return True
    inner = jit.args[0].value if jit.args and jit.args[0].keyword is None else None
    for _ in range(3):
        if not (isinstance(inner, cst.Call) and where.resolve(inner.func) in where.model.transforms):
            return False
        if any(names_in(a.value) & varying for a in inner.args[1:]):
            return True
        inner = inner.args[0].value if inner.args and inner.args[0].keyword is None else None
    return False


def _sweep_call(call: cst.Call, loop: LoopInfo, where: Where) -> bool:
    """A call made once per entry of a table of configurations, with the entry (or a value computed from it)
    as an argument (`for name in SETTINGS: run(name)`): each call builds what that configuration needs."""
    # (`{n: run(n) for n in SIZES}` as well as a `for` loop)
    if not any(literal_table(it, where.model, loop.scope) for _target, it in loop_levels(loop)):
        return False
    return any(from_item(a.value, loop) for a in call.args)


# Conversions whose result is a Python value, whatever they are given (`run(int(n))` for `n` of an array).
_PY_VALUE_CALLS = frozenset({"int", "float", "str", "bool", "round"})


def _python_item(expr: cst.BaseExpression, loop: LoopInfo) -> bool:
    """`int(n)`, `float(lr)`: a Python value computed from the loop's item."""
    return isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value in _PY_VALUE_CALLS \
        and from_item(expr, loop)


def _constructed(value: Optional[cst.BaseExpression], where: Where, scope: Scope) -> bool:
    """`diffrax.Kvaerno5(...)`, `LogWrapper(env)`: a call of a class (a capitalised name) that is not of
    JAX or NumPy: an object with behaviour, not an array."""
    if not isinstance(value, cst.Call):
        return False
    name = dotted(value.func) or ""
    if not name.rsplit(".", 1)[-1][:1].isupper():
        return False
    q = where.model.resolve(value.func, scope) or name
    return not q.startswith(("jax.", "numpy.", "jaxlib.", "builtins."))


def _literal_elements(it: cst.BaseExpression, where: Where, scope: Scope) -> Optional[list[cst.BaseExpression]]:
    """The elements of a list or tuple display iterated by a loop, itself or through a name bound once."""
    if isinstance(it, cst.Name):
        owner = where.model.owner_of(it.value, scope)
        values = owner.assigned.get(it.value, []) if owner is not None else []
        it = values[0] if len(values) == 1 and values[0] is not None else it
    if isinstance(it, (cst.List, cst.Tuple)) and it.elements \
            and not any(isinstance(e, cst.StarredElement) for e in it.elements):
        return [e.value for e in it.elements]
    return None


def _per_pass_objects(loop: LoopInfo, where: Where, scope: Scope) -> frozenset[str]:
    """Names a loop binds, on each pass, to a different object built by a class (last `env = LogWrapper(env)`),
    or the item of `for label, solver in [("a", Tsit5()), ("b", Kvaerno5())]`): a jitted function that
    captures one is a different program on each pass, which no hoisting would share (such an object is
    no array that could be passed as an argument)."""
    model = where.model
    # (the last binding of the pass decides: `env, params = make(name)`, then `env = LogWrapper(env)`)
    out = {name for name, values in loop.bound.items()
           if values and _constructed(values[-1], where, scope)
           and not all(v is not None and loop_invariant(v, loop, model, scope) for v in values)}
    if isinstance(loop.node, cst.For):
        target = loop.node.target
        elements = _literal_elements(loop.node.iter, where, scope)
        if elements is not None and len(elements) > 1:
            if isinstance(target, cst.Name) and all(_constructed(e, where, scope) for e in elements):
                out.add(target.value)
            elif isinstance(target, (cst.Tuple, cst.List)):
                for i, el in enumerate(target.elements):
                    if isinstance(el.value, cst.Name) and all(
                            isinstance(e, (cst.Tuple, cst.List)) and len(e.elements) > i
                            and _constructed(e.elements[i].value, where, scope) for e in elements):
                        out.add(el.value.value)
    return frozenset(out)


def _on_own_instance(func: cst.Attribute, fn: FunctionInfo, scope: Scope, where: Where) -> bool:
    """`self.step(...)` in a method of `fn`'s class, `trainer.step(...)` with `trainer: Trainer` or
    `trainer = Trainer(...)`: the code says the receiver is an instance of the method's class."""
    caller = scope.function_scope()
    return caller is not None and fn.cls is not None and where.model.class_of(func.value, caller) is fn.cls


def _bound_within(fn: FunctionInfo, where: Where) -> set[str]:
    """The names a def binds for itself: its locals, those of the defs nested in it, and the targets of its
    comprehensions (`def body(carry, _): state, key = carry` binds `state`)."""
    memo = where.model.__dict__.setdefault("_bound_within", {})
    known = memo.get(fn)
    if known is None:
        node = fn.node
        assert node is not None
        known = set(fn.local_names)
        under: set[int] = set()  # the nodes under the def, by identity (one walk, whatever the number of defs)
        for n in descendants(node):
            under.add(id(n))
            if isinstance(n, cst.CompFor):
                known.update(_target_names(n.target))
        for g in where.model.functions:
            if g.node is not None and g is not fn and id(g.node) in under:
                known |= g.local_names
        memo[fn] = known
    return set(known)


def _inner_free(fn: FunctionInfo, where: Where) -> set[str]:
    """The names a def reads from around it: not those it binds for itself (`_bound_within`)."""
    assert fn.node is not None
    return _free_names(fn.node, fn) - _bound_within(fn, where)


def _closure_params(fn: FunctionInfo, outer: FunctionInfo, where: Optional[Where] = None) -> frozenset[str]:
    """The parameters of `outer` that its nested def `fn` reads: itself, through the names `outer` binds
    from them (`n2 = 2 * n`), or through the other defs of `outer` it calls. With `where`, the names the
    defs nested in `fn` bind for themselves are not read from `outer`."""
    params = {p.name for p in outer.params}
    seen: set[str] = set()
    todo = sorted(_inner_free(fn, where) if where is not None else _free_names(fn.node, fn))
    found: set[str] = set()
    while todo and len(seen) < 200:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in params:
            found.add(name)
            continue
        inner = outer.defs.get(name)
        if inner is not None:
            if inner is not fn:
                todo.extend(sorted(_inner_free(inner, where) if where is not None else _free_names(inner.node, inner)))
            continue
        for b in outer.bindings(name):
            if b.value is not None:
                todo.extend(sorted(names_in(b.value)))
        for arg in _filled_in(outer).get(name, ()):  # `injectors.append(CW(mask=mask))`: what it holds
            todo.extend(sorted(names_in(arg)))
    return frozenset(found)


# Methods that put their arguments into the container they are called on.
_FILLING = frozenset({"append", "extend", "insert", "add", "update", "setdefault", "appendleft"})


def _filled_in(fn: FunctionInfo) -> dict[str, list[cst.BaseExpression]]:
    """What a function's body puts into its containers (`xs.append(v)`, `d.update(k=v)`): container name ->
    the arguments, found once per function."""
    found = fn.__dict__.get("_filled_in")
    if found is None:
        found = fn.__dict__["_filled_in"] = {}
        for c in fn.calls:
            if isinstance(c.func, cst.Attribute) and isinstance(c.func.value, cst.Name) and c.func.attr.value in _FILLING:
                found.setdefault(c.func.value.value, []).extend(a.value for a in c.args)
    return found


# Calls whose result's shape comes from their arguments (sizes, shapes, ranges).
_SHAPED = frozenset({"zeros", "ones", "empty", "full", "arange", "linspace", "eye", "identity", "reshape",
                     "normal", "uniform", "randint", "tile", "broadcast_to"})


def _called_with_item_shapes(name: str, loop: LoopInfo, where: Where, captured: frozenset[str] = frozenset()) -> bool:
    """`for d in [10, 100, 1000]: x = jnp.arange(d * n).reshape((n, d)); f(x)`: the jitted def is called
    with an array whose shape comes from the item of a sweep over constants (or that is placed on the
    item, `jax.device_put(x, dev)`), or reads one of `captured` (the names it closes over) bound to such an
    array, so every pass traces a new program whoever defines the function."""
    node = loop.node
    if not isinstance(node, cst.For):
        return False
    table = distinct_constants(node.iter) or literal_table(node.iter, where.model, loop.scope)
    items = names_in(node.target)

    def sized(expr: cst.BaseExpression, depth: int) -> bool:
        if _shaped_item(expr, loop, where):
            return True
        for n in descendants(expr):
            if isinstance(n, cst.Subscript) and any(_item_length(el.slice, loop) for el in n.slice):
                return True  # `pos[:n_real]` with `n_real` read from this pass's item: a length per pass
            if isinstance(n, cst.Call) and any(names_in(a.value) & items for a in n.args):
                q = where.resolve(n.func) or dotted(n.func) or ""
                if q == "jax.device_put":
                    return True  # `x = jax.device_put(x, dev)` in `for dev in devices`: one program per device
                if not table:
                    continue
                if q.rsplit(".", 1)[-1] in _SHAPED:
                    return True
                # `G, tau = make_test_data(n, nb, bs)`: a function of the project (not a library's, not a
                # method of some object) building data for the item
                written = dotted(n.func) or ""
                if not q.startswith(("jax.", "numpy.", "builtins.")) and (isinstance(n.func, cst.Name) or q != written):
                    return True
            if depth < 3 and isinstance(n, cst.Name) and n.value not in items:
                if any(sized(v, depth + 1) for v in _values_in_loop(loop, n.value)):
                    return True
        return False

    for c in descendants(node.body):
        if not isinstance(c, cst.Call):
            continue
        if isinstance(c.func, cst.Name) and c.func.value == name and any(sized(a.value, 0) for a in c.args):
            return True
        # `bench(step, (G, tau))`: handed to a helper that calls it with the other arguments
        if any(isinstance(a.value, cst.Name) and a.value.value == name for a in c.args) and any(
                sized(a.value, 0) for a in c.args if not (isinstance(a.value, cst.Name) and a.value.value == name)):
            return True
    # `pos = x[:n_real]` on each pass, and the jitted def reads `pos`: its constants change shape with the pass
    return any(sized(v, 1) for c in sorted(captured) for v in _values_in_loop(loop, c))


def _given(name: str, params: set[str], loop: LoopInfo) -> bool:
    """Whether a call of `name` in the loop passes one of `params` by keyword or passes any positional
    argument (which may fill it)."""
    return any(isinstance(c, cst.Call) and isinstance(c.func, cst.Name) and c.func.value == name and any(
        a.keyword is None or a.keyword.value in params for a in c.args) for c in descendants(loop.node))


def _item_length(part: cst.BaseSlice, loop: LoopInfo) -> bool:
    """A slice whose end comes from the loop's item and whose start does not (`[:n]`, `[1:int(n * f)]`): its
    length changes with the item (`[i:i + bs]`, both ends moving together, need not)."""
    return isinstance(part, cst.Slice) and part.upper is not None and from_item(part.upper, loop) \
        and (part.lower is None or not from_item(part.lower, loop))


def _shaped_item(expr: cst.BaseExpression, loop: LoopInfo, where: Where) -> bool:
    """`arg` in `for arg in (jnp.array(1.0), jnp.ones((2,)), jnp.ones((2, 2)))`: the item of a loop over
    arrays of different shapes, a new input signature on every pass."""
    node = loop.node
    return isinstance(node, cst.For) and isinstance(expr, cst.Name) and expr.value in names_in(node.target) \
        and distinct_shapes(node.iter, where.model, loop.scope)


def _values_in_loop(loop: LoopInfo, name: str) -> list[cst.BaseExpression]:
    """The values a loop body assigns to `name`, a tuple target's whole value included
    (`G, tau = make_data(n)` gives `make_data(n)`)."""
    return [st.value for st in loop_statements(loop) if isinstance(st, cst.Assign)
            and any(name in names_in(t.target) for t in st.targets)]


def _equal_each_pass(expr: cst.BaseExpression, where: Where) -> bool:
    """A callable equinox compares by structure and builds equal on every pass: equinox transforms and
    `jax.tree_util.Partial` of names and attributes (`filter_vmap(Partial(self.sample, kernel))`)."""
    if isinstance(expr, (cst.Name, cst.Attribute, cst.Integer, cst.SimpleString)):
        return True
    if isinstance(expr, (cst.Tuple, cst.List)):  # `in_axes=(0, 0, None)`
        return all(_equal_each_pass(el.value, where) for el in expr.elements)
    if not isinstance(expr, cst.Call):
        return False
    q = where.resolve(expr.func) or ""
    if not (q.startswith("equinox.filter_") or q == "jax.tree_util.Partial"):
        return False
    return all(_equal_each_pass(a.value, where) for a in expr.args)


def _names_used_as_keys(node: cst.CSTNode) -> set[str]:
    """Names a body uses as names of things — dict literal keys (`{key: p}`), attribute names
    (`getattr(obj, field)`): they choose code or structure, never data a trace could take."""
    out: set[str] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, cst.DictElement) and isinstance(n.key, cst.Name):
            out.add(n.key.value)
        elif isinstance(n, cst.Call) and dotted(n.func) in ("getattr", "setattr", "hasattr") and len(n.args) >= 2 \
                and isinstance(n.args[1].value, cst.Name):
            out.add(n.args[1].value.value)
        stack.extend(iter_children(n))
    return out


def _names_used_statically(node: cst.CSTNode, where: Where) -> set[str]:
    """Names a body uses where JAX needs a Python value — a shape or size (`jnp.zeros((n, 3))`), a dtype
    (`dtype=dt`, `x.astype(dt)`, `random.normal(key, shape, dt)`), an argument of a parameter declared a
    Python value (`kernel(x, block=b)` with `block: int`): a function reading the loop item there is
    a different program for each item, and taking the item as an argument would have to make it static."""
    out: set[str] = set()
    for n in descendants(node):
        if not isinstance(n, cst.Call):
            continue
        used: list[cst.BaseExpression] = [a.value for a in n.args
                                          if a.keyword is not None and a.keyword.value == "dtype"]
        if isinstance(n.func, cst.Attribute) and n.func.attr.value == "astype" and n.args:
            used.append(n.args[0].value)
        q = where.resolve(n.func)
        if q is not None:
            positions, keywords = SHAPE_ARGS.get(q, ((), ()))
            used += [v for v in (_arg(n, i, kw) for i, kw in
                                 zip(positions + (-1,) * len(keywords), ("",) * len(positions) + keywords))
                     if v is not None]
            if q in DTYPE_ARGS:
                v = _arg(n, DTYPE_ARGS[q], "dtype")
                if v is not None:
                    used.append(v)
        used += where.model.python_value_args(n, where.scope)  # `kernel(x, block=b)` with `block: int`
        for v in used:
            out |= names_in(v)
    # `f(*args)[i]` where `f` gives a tuple: a tuple takes only a Python int as index, never a traced one
    for n in descendants(node):
        if isinstance(n, cst.Subscript) and isinstance(n.value, cst.Call) and len(n.slice) == 1 \
                and isinstance(n.slice[0].slice, cst.Index) and _gives_tuple(n.value.func, where):
            out |= names_in(n.slice[0].slice.value)
    return out


def _gives_tuple(func: cst.BaseExpression, where: Where) -> bool:
    """Whether calls of `func` give a tuple: the enclosing function unpacks one of them into several names
    (`rgb, disp, acc = render(...)`), or it is a def of this module whose every `return` is a tuple literal."""
    written = dotted(func)
    scope_node = where.scope.node if where.scope.node is not None else where.model.root.node
    if written and scope_node is not None:
        for a in descendants(scope_node):
            if isinstance(a, cst.Assign) and isinstance(a.value, cst.Call) and dotted(a.value.func) == written \
                    and any(isinstance(t.target, (cst.Tuple, cst.List)) and len(t.target.elements) > 1 for t in a.targets):
                return True
    ref = where.model.resolve_callable(func, where.scope) if isinstance(func, cst.Name) else None
    if ref is None or not isinstance(ref.fn.node, cst.FunctionDef):
        return False
    returns = [r for r in descendants(ref.fn.node.body) if isinstance(r, cst.Return)]
    return bool(returns) and all(isinstance(r.value, cst.Tuple) for r in returns)


def _static_positions(jit: cst.Call) -> tuple[set[int], set[str]]:
    """The positions and parameter names a jit call's options make static."""
    nums = _arg(jit, -1, "static_argnums")
    names = _arg(jit, -1, "static_argnames")
    return (set(_literal_values(nums, _int_leaf) or ()) if nums is not None else set(),
            set(_literal_values(names, _str_leaf) or ()) if names is not None else set())


def _core_params(expr: cst.BaseExpression, where: Where, loop: LoopInfo, depth: int = 0) -> list[str]:
    """The parameter names of the def a callable wraps (`jax.grad(f)`, `partial(f)`, a name the loop bound to
    one of those), or [] when unknown."""
    if depth > 4:
        return []
    if isinstance(expr, cst.Call) and expr.args and expr.args[0].keyword is None:
        q = where.resolve(expr.func) or ""
        if q == "functools.partial" or q in where.model.transforms:
            return _core_params(expr.args[0].value, where, loop, depth + 1)
        return []
    if not isinstance(expr, cst.Name):
        return []
    for value in loop.bound.get(expr.value, []):
        if value is not None and not (isinstance(value, cst.Call) and (where.resolve(value.func) or "") in JIT_LIKE):
            return _core_params(value, where, loop, depth + 1)
    fn = where.model.lookup_function(expr.value, where.scope)
    return [p.name for p in fn.params] if fn is not None else []


def _static_args(body: cst.CSTNode, callee: set[str], params: list[str], nums: set[int], names: set[str],
                 where: Where) -> list[cst.BaseExpression]:
    """The arguments calls under `body` give to the static parameters of a jitted function bound to one of
    `callee` (`f(a, n)`, or `partial(f, a, n)` which fills the same positions)."""
    out: list[cst.BaseExpression] = []
    positions = tuple(sorted(nums | {i for i, p in enumerate(params) if p in names}))
    keywords = tuple(sorted(names))
    for call in descendants(body):
        if not isinstance(call, cst.Call):
            continue
        args = call.args
        if isinstance(call.func, cst.Name) and call.func.value in callee:
            pass
        elif where.resolve(call.func) == "functools.partial" and args and args[0].keyword is None \
                and isinstance(args[0].value, cst.Name) and args[0].value.value in callee:
            call = call.with_changes(args=args[1:])  # the partial fills the callee's positions from its second
        else:
            continue
        out += args_at(call, positions, keywords)
    return out


def _decorator_statics(fn: FunctionInfo) -> tuple[set[int], set[str]]:
    """The static positions and names a def's jit decorator declares (`@partial(jax.jit, static_argnames=...)`)."""
    nums: set[int] = set()
    names: set[str] = set()
    for d in fn.decorators:
        if isinstance(d.decorator, cst.Call):
            n, m = _static_positions(d.decorator)
            nums |= n
            names |= m
    return nums, names


def _fresh_name(where: Where, base: str, also_taken: set[str]) -> str:
    fn = where.function
    taken = set(where.model.root.assigned) | set(where.model.root.defs) | set(where.model.root.imports) | also_taken
    if fn is not None:
        taken |= fn.local_names
    name, i = base, 2
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    also_taken.add(name)
    return name


class JitInLoop(Rule):
    """
    ## What it does
    Flags `jax.jit` (also `pjit`, `pmap`, `eqx.filter_jit`) inside a `for`/`while` loop or a
    comprehension when the callable it is given is created anew on each pass: a `lambda`, a
    `functools.partial(...)`, a function defined in the loop body, a bound method (`obj.method`), or
    the result of another transform (`jax.grad(f)`, `jax.vmap(f)`). A `@jax.jit` decorator on a def
    inside a loop is flagged too.

    ## Why is this bad?
    JAX caches compiled code per callable object. A new callable on every pass misses the cache, so
    each iteration re-traces and re-compiles — often the slowest line of a training loop.
    `jax.jit(named_function)` in a loop is fine: the function object is the same, and so is the cache.

    ## Example
    ```python
    import jax

    def scale(x, factor):
        return x * factor

    def run(xs):
        out = []
        for x in xs:
            out.append(jax.jit(lambda v: scale(v, 2.0))(x))
        return out
    ```

    ## Use instead
    ```python
    import jax

    def scale(x, factor):
        return x * factor

    def run(xs):
        scale_twice = jax.jit(lambda v: scale(v, 2.0))
        return [scale_twice(x) for x in xs]
    ```

    ## How it is verified
    The jit expression is evaluated twice in its scope and JAX's own trace counter shows a second
    trace rather than a cache hit.

    ## Known limitations
    A callable returned by a factory function (`jax.jit(make_step(cfg))`) is not flagged, nor is
    `obj.attr` unless `obj` is `self` or was built by a constructor call (`model = MLP(...)`):
    attributes of other objects may be plain functions, the same object on every access. A def of the
    project named like a class (`net = TransformedNet(...)`, a def returning a Haiku `Transformed`) is
    no constructor. A loop over configurations whose item the callable captures — a literal list of constants
    (`for mode in ("train", "eval"): jax.jit(partial(step, mode=mode))`) or a table of settings
    written in the code, or names the code uses as dict keys or attribute names — builds one program
    per item by design and is not flagged; nor is a function that jits a def and is called once per
    entry of such a table (`for name in SETTINGS: run_setting(name)`). A jitted function called with a
    static argument that is a new instance of a plain class (made on each pass, equal to no other) compiles
    on each pass wherever it is jitted, and is not flagged. A loop written to run once
    (`for i in range(1)`, a one-item list) is straight-line code. A loop that calls
    `jax.clear_caches()` recompiles on purpose, and `eqx.filter_jit` of a wrapper built equal on
    every pass (`filter_vmap(Partial(self.sample, kernel))`) hits equinox's cache: neither is flagged.
    Nor are passes that must compile anyway or that keep what they build: a jitted function stored
    past its pass (a table filled in a setup loop) that reads nothing changing between passes (a name
    each pass binds afresh from the same value, `f = jax.vmap(step); f = jax.vmap(f)`, does not change); jit
    options (or the options of a transform the jit wraps, `jax.jit(jax.vmap(f, in_axes=axes))` with the axes
    worked out on each pass) or a static argument that take (a value computed from) the pass's item; a loop over arrays
    of different shapes, or over sizes (a table, or the list a parameter defaults to) the jitted function
    is called with arrays of; the item used as the index of a returned tuple; a jitted def that calls a
    function its enclosing function builds from a factory on each call (an optimizer's update); a
    jitted def used only inside other traced functions; arrays cut to a length read from the pass's item
    (`pos[:n_real]` for each padded bucket), which the jitted function is given or closes over, are a new
    shape on each pass; a size bound as the default of a jitted def called without it
    (`def run(chunk_size=chunk)`) is that pass's Python value. The item bound (by a `partial` or a closure) to a
    parameter its function declares a Python value (`block: int`, `mode: str`, in this file or another
    project file) is a different program for each item: a tuning sweep over block sizes is not flagged.
    Nor is a script loop that rebinds module globals (`config, env = make(name)`) which the jitted function
    reads, itself or through the module's functions it calls: each pass is a different program, and a
    jit hoisted out of the loop would keep the first pass's values. Nor is a jitted function that captures
    an object each pass builds anew from a class (`for label, solver in [("a", dfx.Tsit5()), ("b",
    dfx.Kvaerno5(...))]`, or `env = LogWrapper(Env(name))` handed to the function that jits a rollout): it
    is a different program on each pass, and the object is no array that could be passed instead. The
    same holds for a jitted def inside a function that a loop calls once per case, when the def (or a def
    it calls or hands on, `lax.fori_loop(0, n, body, u)`) uses an object the function builds from its
    arguments with a project class that is no pytree (`ops = Stencil(spacing=dx)`), or closes over a
    parameter the function declares a Python value (`n_cells: int`) that the loop gives its item. Nor is
    a jitted function that hands text new on each pass (`answers = []`, filled with `raw.decode()`) to
    the Python function of a host callback: text is neither an argument nor an operand. A captured
    number or array still is flagged: it could be an argument.

    ## References
    - https://docs.jax.dev/en/latest/jit-compilation.html#caching
    """

    code = "JL401"
    name = "jit-in-loop"
    summary = "`jax.jit` rebuilt on every loop iteration"
    anywhere = True

    def _fresh(self, expr: cst.BaseExpression, where: Where, loop: LoopInfo,
               site: Optional[cst.CSTNode] = None) -> Optional[str]:
        """What makes the callable new on each pass, or None if it is the same object every time."""
        model = where.model
        if isinstance(expr, cst.Lambda):
            return "a `lambda`"
        if isinstance(expr, cst.Call):
            q = where.resolve(expr.func)
            if q == "functools.partial":
                return "a `functools.partial`"
            if q is not None and q in model.transforms:
                return f"the result of `{q.split('.')[-1]}(...)`"
            return None
        if isinstance(expr, cst.Name):
            fn = model.lookup_function(expr.value, where.scope)
            if fn is not None and loop.encloses(fn.loop_at_def):
                return f"`{expr.value}`, a function defined in the loop body"
            l: Optional[LoopInfo] = loop
            while l is not None:
                for value in l.bound.get(expr.value, []):
                    if value is site:
                        continue  # `f = jax.jit(f)`: the rebinding is this very call
                    why = self._fresh(value, where, l, site) if value is not None else None
                    if why:
                        return f"`{expr.value}`, rebound in the loop to {why}"
                l = l.parent
            return None
        if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and self._is_instance(expr.value, where) \
                and not model.pinned_method(expr, where.scope):  # (`self.next = self.next`: one stored object)
            return f"the bound method `{expr.value.value}.{expr.attr.value}`"
        return None

    def _is_instance(self, name: cst.Name, where: Where) -> bool:
        """Whether `name` is known to hold a class instance, so `name.method` is a new bound method each time.

        `self` in a method is; so is a name assigned from a constructor call (`model = MLP(...)`, a class
        of this module or any capitalised callable). Other objects are not assumed: `opt.update` on an
        optax transformation is a plain function stored in a tuple, the same object on every access.
        """
        model = where.model
        fn = where.function
        if fn is not None and fn.is_method and fn.params and fn.params[0].name == name.value:
            return True
        owner = model.owner_of(name.value, where.scope)
        if owner is None:
            return False
        values = owner.assigned.get(name.value, [])
        if not values:
            return False
        if isinstance(owner, FunctionInfo) and None in values:
            values = _unpacked_values(owner, name.value)  # `model, opt = MLP(...), adam(...)`
        for value in values:
            if not isinstance(value, cst.Call) or id(value) in model.entered:
                return False  # (`with Bind(model) as ctx:` binds what `__enter__` returns, not the instance)
            callee = value.func.attr.value if isinstance(value.func, cst.Attribute) else (
                value.func.value if isinstance(value.func, cst.Name) else "")
            if not (callee[:1].isupper() or callee in model.root.classes):
                return False
            if model.is_plain_function(value.func, where.scope):
                return False  # `TransformedNet(**kw)`, a def of the project: it returns what it returns
        return True

    # ---- passes that must compile anyway ----------------------------------------------------

    def _factory_bound(self, names: set[str], where: Where, loop: LoopInfo, depth: int = 0) -> Optional[str]:
        """A captured name that the loop rebinds from a factory call (`init, apply = make_sim(kT)`), directly
        or through a lambda or def of the loop body: the callable really differs on each pass."""
        if depth > 4:
            return None
        targets = names_in(loop.node.target) if isinstance(loop.node, cst.For) else set()
        for name in sorted(names):
            values = loop.bound.get(name)
            if not values or name in targets:
                continue
            for value in values:
                if value is None or (isinstance(value, cst.Call) and not self._fresh(value, where, loop)):
                    return name  # a factory call's result (or a tuple unpacked from one)
                if isinstance(value, (cst.Lambda, cst.Call)) and self._factory_bound(
                        _free_names(value, None), where, loop, depth + 1):
                    return name  # a lambda or a partial over something the loop rebuilt that way
            fn = where.model.lookup_function(name, where.scope)
            if fn is not None and loop.encloses(fn.loop_at_def) and self._factory_bound(
                    _free_names(fn.node, fn), where, loop, depth + 1):
                return name
        return None

    def _captures_item(self, callable_: cst.BaseExpression, where: Where, loop: LoopInfo, depth: int = 0) -> bool:
        """Whether the callable reads the item of a loop over configurations — a literal list of distinct
        constants (`for mode in ("train", "eval")`), or items the code uses as names (a dict key, an
        attribute name) or as Python values (a size, a declared `int`/`str`/flag parameter, directly or
        computed from the item, or as the default of a jitted def called without it) — itself, through a
        name the loop binds, or through a def of the loop body: each pass is a different program, compiled
        once per item whatever the code does."""
        node = loop.node
        if not isinstance(node, cst.For) or depth > 4:
            return False
        items = names_in(node.target)
        constants = distinct_constants(node.iter) or literal_table(node.iter, where.model, where.scope)
        ref = where.model.resolve_callable(callable_, where.scope) if isinstance(callable_, (cst.Name, cst.Lambda)) else None
        fn = ref.fn if ref is not None else None

        def reads_item(body: cst.CSTNode, free: set[str]) -> bool:
            static = _names_used_as_keys(body) | _names_used_statically(body, where)
            if free & items and (constants or static & items):
                return True
            # `scaled=case["scaled"]` with `case = cases.iloc[i]`: a Python value the pass computes from its item
            return any(from_item(cst.Name(n), loop) for n in sorted((free & static) - items))

        # (the item bound as a default, `lambda x, t=t: clip(x, t)`, is a value one function could take)
        if reads_item(fn.node if fn is not None else callable_, _free_names(callable_, fn, defaults=False)):
            return True
        # `def run(chunk_size=chunk)`, jitted and called without it: the default is the pass's Python value,
        # and a body using it as a size or a declared Python value is a different program for each item
        defaulted = {p.name for p in fn.params if p.default is not None and names_in(p.default) & items} \
            if fn is not None else set()
        if defaulted and defaulted & _names_used_statically(fn.node.body, where) \
                and not _given(fn.name, defaulted, loop):
            return True
        # (a name the loop binds to a `partial` resolves to the function it wraps: its binding is read too)
        own = {callable_.value} if isinstance(callable_, cst.Name) else set()
        for name in sorted((_free_names(callable_, fn) | own) - items):
            for value in loop.bound.get(name, []):
                if value is not None and value is not callable_ and self._captures_item(value, where, loop, depth + 1):
                    return True
            inner = where.model.lookup_function(name, where.scope)
            if inner is not None and loop.encloses(inner.loop_at_def) and reads_item(inner.node, _free_names(inner.node, inner)):
                return True
        return False

    def _wraps_item(self, callable_: cst.BaseExpression, where: Where, loop: LoopInfo, depth: int = 0) -> bool:
        """`for fun in constraints: jac = jax.jit(jax.jacfwd(partial(fun, model=m)))`: the function jitted is
        the loop's item (or a method of it: `jax.jit(env.step)` for each environment), so each pass compiles
        a different function and none could be built before the loop."""
        if depth > 4 or not isinstance(loop.node, cst.For):
            return False
        if isinstance(callable_, cst.Call) and callable_.args and callable_.args[0].keyword is None:
            q = where.resolve(callable_.func) or ""
            if q == "functools.partial" and any(self._wraps_item(a.value, where, loop, depth + 1)
                                                for a in callable_.args[1:] if self._callable_value(a.value, where, loop)):
                return True  # `partial(self.hvp, f=cfun)`, `cfun` a partial of the item: a function is no traced argument
            if q == "functools.partial" or q in where.model.transforms:
                return self._wraps_item(callable_.args[0].value, where, loop, depth + 1)
            return False
        if isinstance(callable_, cst.Attribute) and isinstance(callable_.value, cst.Name) \
                and callable_.value.value in names_in(loop.node.target):
            return True  # `for name, env in envs.items(): jax.jit(env.step)`: a method of each item
        if isinstance(callable_, cst.Lambda):
            # `lambda t, impl=fn: impl(nu, t)` over `for name, fn in kernels.items()`: it calls the item it binds
            items = names_in(loop.node.target)
            called = {c.func.value for c in descendants(callable_.body)
                      if isinstance(c, cst.Call) and isinstance(c.func, cst.Name)}
            return any(isinstance(p.default, cst.Name) and p.default.value in items and p.name.value in called
                       for p in list(callable_.params.params) + list(callable_.params.kwonly_params))
        if not isinstance(callable_, cst.Name):
            return False
        if callable_.value in names_in(loop.node.target):
            return where.model.lookup_function(callable_.value, where.scope) is None
        values = loop.bound.get(callable_.value, [])
        return bool(values) and all(v is not None and self._wraps_item(v, where, loop, depth + 1) for v in values)

    def _callable_value(self, expr: cst.BaseExpression, where: Where, loop: LoopInfo) -> bool:
        """Whether a name the loop binds holds a callable made there: a partial or a transform of something."""
        values = loop.bound.get(expr.value, []) if isinstance(expr, cst.Name) else []
        return bool(values) and all(isinstance(v, cst.Call) and bool(v.args) and (
            where.resolve(v.func) == "functools.partial" or (where.resolve(v.func) or "") in where.model.transforms)
            for v in values)

    def _captures_varying(self, callable_: cst.BaseExpression, where: Where, loop: LoopInfo, depth: int = 0) -> bool:
        """Whether the callable reads a value that changes from pass to pass (the loop's item, or a name the
        loop binds to something that is not the same on every pass), itself or through a def of the loop body."""
        ref = where.model.resolve_callable(callable_, where.scope) if isinstance(callable_, (cst.Name, cst.Lambda)) else None
        fn = ref.fn if ref is not None else None
        for name in _free_names(callable_, fn):
            if _varies(name, loop, where, where.scope, nested=False):
                return True
            inner = where.model.lookup_function(name, where.scope)
            if inner is not None and inner is not fn and loop.encloses(inner.loop_at_def) and (
                    depth > 3 or self._captures_varying(cst.Name(name), where, loop, depth + 1)):
                return True
        return False

    def _item_static_at_call(self, node: cst.Call, where: Where, loop: LoopInfo) -> bool:
        """`f = jax.jit(g, static_argnames="implicit"); f(a, b, implicit)` in `for implicit in (True, False)`:
        the call gives (a value computed from) the loop's item to a static parameter, so every pass compiles
        for its item even with one jitted function built before the loop."""
        nums, names = _static_positions(node)
        if not (nums or names) or not isinstance(loop.node, cst.For):
            return False
        params = _core_params(node.args[0].value, where, loop) if names else []
        return any(from_item(a, loop) for a in _static_args(loop.node.body, _assigned_names(node, loop),
                                                            params, nums, names, where))

    def _new_static_object(self, jit: cst.Call, applied: cst.Call, where: Where, loop: LoopInfo) -> bool:
        """Whether the jitted function is called, on each pass, with a static argument that is a new instance
        of a class comparing by identity (made on that pass): JAX keys its cache on static arguments by
        equality, so every pass compiles anew wherever the function is jitted."""
        nums, names = _static_positions(jit)
        if not (nums or names):
            return False
        model = where.model
        made_here = {name for name, values in loop.bound.items()
                     if values and all(v is not None and model.identity_instance(v, where.scope) for v in values)}
        return any(model.identity_instance(a, where.scope) or isinstance(a, cst.Name) and a.value in made_here
                   for a in args_at(applied, tuple(sorted(nums)), tuple(sorted(names))))

    def _static_from_item(self, fn: FunctionInfo, loop: LoopInfo, where: Where) -> bool:
        """`@partial(jax.jit, static_argnames="tiling") def run(x, tiling)` called in the loop with a tiling
        computed from the item: each pass compiles for its own static value wherever the def is."""
        nums, names = _decorator_statics(fn)
        if not (nums or names) or not isinstance(loop.node, cst.For):
            return False
        params = [p.name for p in fn.params]
        return any(from_item(a, loop) for a in _static_args(loop.node.body, {fn.name}, params, nums, names, where))

    def _clears_caches(self, loop: LoopInfo, where: Where) -> bool:
        """`jax.clear_caches()` in the loop body: every pass is meant to compile afresh (a benchmark)."""
        return clears_caches(loop, where.model)

    def _compiles_anyway(self, node: cst.Call, callable_: cst.BaseExpression, where: Where, loop: LoopInfo) -> bool:
        if self._clears_caches(loop, where):
            return True
        applied = where.model.applied_parent.get(id(node))
        if applied is not None and isinstance(applied.func, cst.Attribute) and applied.func.attr.value in ("lower", "trace"):
            return True  # `jax.jit(f).lower(...).compile()`: ahead-of-time compilation per shape or sharding
        if self._captures_item(callable_, where, loop):
            return True  # `for mode in ("train", "eval")`: one program per item of a collection
        if self._wraps_item(callable_, where, loop) or self._item_static_at_call(node, where, loop):
            return True  # each pass jits its item's function, or calls with its item as a static argument
        captured = frozenset(_free_names(callable_, None))
        if any(_called_with_item_shapes(name, loop, where, captured) for name in sorted(_assigned_names(node, loop))):
            return True  # `qr = jax.jit(lambda g: ...)` then called with this configuration's arrays
        if applied is not None and self._new_static_object(node, applied, where, loop):
            return True  # `jit(f, static_argnums=0)(Likelihood(...), x)`: a static argument equal to no earlier one
        if applied is not None and any(_shaped_item(a.value, loop, where) for a in applied.args):
            return True  # `jax.jit(f)(arg)` over arrays of different shapes: each pass traces anew anyway
        if _options_vary(node, loop, where):
            return True  # the jit options (shardings, donation…) change with the loop
        comp = loop.node
        if isinstance(comp, (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)) \
                and node is (comp.value if isinstance(comp, cst.DictComp) else comp.elt):
            targets: set[str] = set()
            level: Optional[cst.CompFor] = comp.for_in
            while level is not None:
                targets |= names_in(level.target)
                level = level.inner_for_in
            if names_in(callable_) & targets:
                return True  # `{a: jax.jit(sampler(a)) for a in agents}`: a table of distinct jitted functions
        ref = where.model.resolve_callable(callable_, where.scope) if isinstance(callable_, (cst.Name, cst.Lambda)) else None
        fn = ref.fn if ref is not None else None
        if _host_only_per_pass(callable_, fn, where, loop):
            return True  # `host_callback.call(partial(check, cases=cases), x)` with this pass's `cases`
        if _reads_rebound_global(_free_names(callable_, fn), where, loop):
            return True  # `jax.jit(jax.vmap(train))` where `train` reads the `config` this loop rebinds
        return self._factory_bound(_free_names(callable_, fn), where, loop) is not None

    # ---- visitors ---------------------------------------------------------------------------

    @property
    def _stored(self) -> set[int]:
        """Ids of jit calls whose result is stored per loop item (visited before the call itself)."""
        return self.__dict__.setdefault("_stored_ids", set())

    def visit_Assign(self, node: cst.Assign, where: Where) -> None:
        """`agent.policy = jax.jit(...)` / `fns[name] = jax.jit(...)` in a loop over agents or names: one
        jitted function stored per item, built once each (the compile per item cannot be avoided)."""
        loop = where.loop
        if loop is None or not isinstance(node.value, cst.Call):
            return
        per_item = _bound_in_loop(loop)
        if not node.value.args or not _item_function(node.value.args[0].value, per_item):
            return  # `CLIPPERS[t] = jax.jit(lambda x, t=t: ...)`: one function could take `t` as an argument
        for t in node.targets:
            target = t.target
            if isinstance(target, cst.Attribute) and names_in(target.value) & per_item \
                    or isinstance(target, cst.Subscript) and names_in(target) & per_item:
                self._stored.add(id(node.value))

    def visit_Call(self, node: cst.Call, where: Where) -> None:
        loop = repeating(where.loop, where.model)  # (`for i in range(1):` runs its body once)
        func = node.func
        if loop is not None and isinstance(func, cst.Attribute) and func.attr.value in ("append", "add") \
                and len(node.args) == 1:
            arg = node.args[0].value  # `compiled.append(jax.jit(agent.policy))`: a table being built
            if isinstance(arg, cst.Call) and arg.args and _item_function(arg.args[0].value, _bound_in_loop(loop)):
                self._stored.add(id(arg))
        if where.resolve(node.func) not in JIT_LIKE or not node.args:
            return
        if id(node) in self._stored:
            return
        first = node.args[0]
        if first.keyword is not None or first.star:
            return
        if loop is None:
            self._check_per_step_method(node, first.value, where)
            return
        why = self._fresh(first.value, where, loop, node)
        if why is None or self._compiles_anyway(node, first.value, where, loop):
            return
        if where.resolve(node.func) == "equinox.filter_jit" and _equal_each_pass(first.value, where):
            return  # filter_jit caches on the wrapper's structure: an equal wrapper is a cache hit
        if _kept_by_object(node, loop, where) or _built_once(node, loop, where):
            return
        if _free_names(first.value, None) & _per_pass_objects(loop, where, where.scope):
            return  # it captures the pass's own solver or environment: one program per pass, by need
        if not self._captures_varying(first.value, where, loop) and (
                _kept_in_table(node, loop) or any(_kept_in_table(cst.Name(n), loop) for n in _assigned_names(node, loop))):
            return  # a table of jitted functions built in a setup loop: each entry is kept, compiled once, reused
        bound = _assigned_names(node, loop)
        if bound and where.scope.node is not None and all(_never_used(n, where.scope.node) for n in bound):
            return  # made on every pass, but never called: nothing is traced
        fix = edit = None
        if isinstance(loop.node, (cst.For, cst.While)) and isinstance(first.value, (cst.Lambda, cst.Call)):
            # Hoisting is exact when nothing the callable captures is rebound in the loop.
            captured = names_in(first.value) - _params_of(first.value)
            varying = captured & set(_bound_in_loop(loop))
            name = _fresh_name(where, "jitted", self.__dict__.setdefault("_names", set()))
            fix = Fix(f"Build the jitted callable once, as `{name}`, before the loop",
                      "unsafe" if varying else "safe")
            edit = Edit(loop.node, hoist_before(loop.node, node, name))
        self.report(
            node,
            f"`{_short(where.resolve(node.func) or 'jax.jit')}` of {why} inside a loop builds a new callable on "
            "every pass, so JAX re-traces and "
            "re-compiles each time; create the jitted function once, before the loop.",
            where,
            fix=fix,
            edit=edit,
            subject={"callable": code_of(first.value)},
            subject_nodes={"loop_line": loop.node},
        )

    def _loop_caller(self, fn: FunctionInfo, where: Where, by_attribute: bool,
                     static: frozenset[str] = frozenset(), closed: frozenset[str] = frozenset(),
                     captured: frozenset[str] = frozenset(), declared: frozenset[str] = frozenset()) -> Optional[str]:
        """Where `fn` is called inside a loop of this module (by name, or as `obj.name(...)` for a method),
        but for calls that give (a value computed from) the loop's item to one of the parameters `static`,
        or a Python value converted from the item (`int(n)`) to one of the parameters `closed` (any value
        computed from the item, for those of them in `declared`: parameters `fn` declares Python values,
        `n_atoms: int`), and for loops that rebind, pass by pass, one of the names `captured` (read by the
        jitted def from around `fn`)."""
        model = where.model
        for call, scope, loop in model.all_calls:
            loop = repeating(loop, where.model)
            if loop is None:
                continue
            func = call.func
            if by_attribute:
                # `self.train(...)` in a method of the class runs this method; `vtr.train(...)`, the receiver's
                # class unknown, runs it only if no other project file defines a `train`
                hit = isinstance(func, cst.Attribute) and func.attr.value == fn.name and (
                    _on_own_instance(func, fn, scope, where)
                    or not model.ask("defined_elsewhere", fn.name, absent=False))
            else:
                ref = model.resolve_callable(func, scope) if isinstance(func, cst.Name) else None
                hit = ref is not None and ref.fn is fn
            if not hit or _sweep_call(call, loop, where):
                continue
            if any(where.model.owner_of(n, scope) is (scope.function_scope() or where.model.root)
                   and _varies(n, loop, where, scope)
                   for n in sorted(captured)):
                # `iter` reads the caller's `train_state`, which the loop rebinds: a jit made once would keep the
                # first pass's value baked in (stale), so each pass must trace its own program anyway
                continue
            filled = (filled_args(fn, 0, call.args) or {}) if static or closed else {}
            objects = _per_pass_objects(loop, where, scope) if closed else frozenset()
            if not any(p in static and from_item(a.value, loop)
                       or p in closed and (_python_item(a.value, loop) or p in declared and from_item(a.value, loop))
                       or p in closed and isinstance(a.value, cst.Name) and a.value.value in objects
                       for p, a in filled.items()):
                caller = scope.function_scope()
                return f"`{caller.qualname}`" if caller is not None else "the module"
        return None

    def _calls_built_function(self, fn: FunctionInfo, outer: FunctionInfo, where: Where, depth: int = 0,
                              handed: bool = False) -> bool:
        """Whether `fn` (or a def of `outer` it calls) calls a function that `outer` builds on each of its calls
        from a factory (`opt_init, opt_update, get_params = adam(lr)`), or `fn` (or a def of `outer` it calls
        or hands on, `lax.fori_loop(0, n, body, x)`: `handed`) uses an object `outer` builds from its
        arguments with a project class that is no pytree (`ops = Stencil(spacing=dx)`, then `step(u, ops)`
        or `ops.laplacian(u)`): every call of `outer` then traces a different program, which taking arrays
        as arguments would not avoid."""
        calls = [c for c in descendants(fn.node) if isinstance(c, cst.Call)]
        called = {c.func.value for c in calls if isinstance(c.func, cst.Name)}
        # `optimizer.update(...)` of an object a factory builds per call (`optimizer = make_adamw(lr)`), not
        # an array's method (`data = jnp.ones(n)`, then `data.sum()`)
        methods = {c.func.value.value for c in calls if isinstance(c.func, cst.Attribute)
                   and isinstance(c.func.value, cst.Name)}
        passed = {a.value.value for c in calls for a in c.args if isinstance(a.value, cst.Name)}
        params = {p.name for p in outer.params}
        for name in sorted((called | methods | passed) - fn.local_names):
            bindings = outer.bindings(name)
            values = [b.source for b in bindings]
            if not handed and name in called | methods and bindings and all(
                    b.how == "=" and _factory_result(v, where, outer, objects=name not in called)
                    for b, v in zip(bindings, values)) \
                    and (name in called or all(_from_arguments(v, outer, params) for v in values if v is not None)):
                # (an object's methods count when `outer` builds it from its arguments: `optax.adam(LR)` of a
                # constant is the same optimizer on every call, and could be built once, outside)
                return True
            if name in passed | methods and bindings and all(
                    b.how == "=" and isinstance(v, cst.Call) and v is b.assigned
                    and where.model.pytree_class(v.func, outer) is False and _from_arguments(v, outer, params)
                    for b, v in zip(bindings, values)):
                return True  # an object (no array, no pytree) made from this call's arguments: no argument could carry it
            inner = outer.defs.get(name) if depth < 2 else None
            if inner is not None and inner is not fn and self._calls_built_function(
                    inner, outer, where, depth + 1, handed=handed or name not in called):
                return True
        return False

    def _check_per_step_method(self, node: cst.Call, expr: cst.BaseExpression, where: Where) -> None:
        """`self.apply = jax.jit(self._apply)` in a method that a loop calls on every step."""
        fn = where.function
        if fn is None or fn.cls is None or not fn.is_method or fn.name in ("__init__", "setup", "__post_init__"):
            return
        if any((dotted(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator) or "").split(".")[-1]
               in _MEMOISING for d in fn.decorators):
            return  # `@functools.cached_property`: the body runs once per instance, the loop reuses its result
        if not (isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name)
                and expr.value.value == fn.params[0].name and expr.attr.value in fn.cls.defs):
            return
        if sum(1 for f in where.model.functions if f.name == fn.name and f.is_method) != 1:
            return  # the method name must identify the method
        caller = self._loop_caller(fn, where, by_attribute=True)
        if caller is None:
            return
        self.report(
            node,
            f"`jax.jit` of the bound method `{expr.value.value}.{expr.attr.value}` in `{fn.qualname}`, which a "
            f"loop in {caller} calls on every pass, builds a new callable each time, so JAX re-traces and "
            "re-compiles; jit it once, in `__init__`.",
            where,
            subject={"callable": code_of(expr)},
        )

    def visit_Decorator(self, node: cst.Decorator, where: Where) -> None:
        loop = repeating(where.loop, where.model)
        got = where.model.transform_of(node.decorator, where.scope)
        if got is None or got[0].kind not in ("jit", "pjit", "pmap", "filter_jit"):
            return
        fn = next((f for f in where.model.functions if isinstance(f.node, cst.FunctionDef)
                   and node in f.node.decorators), None)
        if loop is None:
            self._check_def_in_called_function(node, fn, where)
            return
        if isinstance(node.decorator, cst.Call) and _options_vary(node.decorator, loop, where):
            return  # `@partial(jax.jit, out_shardings=s)` with `s` made on each pass: one program per pass
        if fn is not None and (self._factory_bound(_free_names(fn.node, fn), where, loop)
                               or self._captures_item(cst.Name(fn.name), where, loop)
                               or _called_with_item_shapes(fn.name, loop, where, frozenset(_free_names(fn.node, fn)))
                               or where.scope.node is not None and _never_used(fn.name, where.scope.node)
                               or _used_only_in_traces(fn.name, fn, where)
                               or self._static_from_item(fn, loop, where)
                               or _kept_in_table(cst.Name(fn.name), loop)
                               and not self._captures_varying(cst.Name(fn.name), where, loop)
                               or bool(_free_names(fn.node, fn) & _per_pass_objects(loop, where, where.scope))) \
                or self._clears_caches(loop, where):
            return  # it closes over a callable the loop builds anew (or the loop clears JAX's caches): each pass compiles
        self.report(
            node,
            "A jitted function defined inside a loop is a new function on every pass, so JAX re-traces and "
            "re-compiles each time; define it once, before the loop.",
            where,
            subject={"callable": "", "def": fn.name if fn is not None else ""},
            subject_nodes={"loop_line": loop.node},
        )

    def _check_def_in_called_function(self, node: cst.Decorator, fn: Optional[FunctionInfo], where: Where) -> None:
        """A jitted def inside a function that calls it (not a factory returning it) and runs in a loop."""
        outer = fn.parent if fn is not None else None
        if not isinstance(outer, FunctionInfo) or fn is None:
            return
        if outer.traced and outer.cached:
            return  # the def runs only while JAX traces `outer`: its cached calls do not make it again
        if not any(isinstance(c.func, cst.Name) and c.func.value == fn.name for c in outer.calls):
            return
        if self._calls_built_function(fn, outer, where):
            return  # it calls a function `outer` makes on each call: one program per call, whatever is hoisted
        # `outer(..., n)` where `n` goes on to a static parameter of `fn`: a loop giving each call its item's
        # value compiles once per item wherever `fn` is defined
        nums, names = _decorator_statics(fn)
        static = frozenset(a.value for a in _static_args(outer.node, {fn.name}, [p.name for p in fn.params], nums, names,
                                                         where)
                           if isinstance(a, cst.Name) and outer.param(a.value) is not None) if nums or names else frozenset()
        # `outer(..., int(n))` where `fn` closes over that parameter: each call bakes another Python value
        # into the program, which must compile for each value wherever `fn` is defined
        closed = _closure_params(fn, outer)
        captured = _captured(fn, outer, where)
        # `outer(n_atoms=n)` where `fn` closes over `n_atoms: int`: each call bakes in that pass's Python value
        declared = _closure_params(fn, outer, where) & where.model.declared_python_params(outer)
        caller = self._loop_caller(outer, where, by_attribute=False, static=static, closed=closed, captured=captured,
                                   declared=declared)
        if caller is None:
            return
        self.report(
            node,
            f"`{fn.name}` is jitted inside `{outer.qualname}`, which a loop in {caller} calls on every pass: "
            "each call makes a new function, so JAX re-traces and re-compiles; define it once, outside.",
            where,
            subject={"callable": "", "def": fn.name},
        )


def _read_count(node: cst.CSTNode, name: str) -> int:
    """How many times `name` is read under `node` (not as an attribute's or a keyword's name)."""
    return sum(1 for n in name_reads(node) if n.value == name)


# Methods that change a container in place (`cases.append(...)` fills this pass's list).
_MUTATORS = frozenset({"append", "extend", "insert", "update", "add", "setdefault"})


# Methods of `str` and `bytes` giving text.
_TEXT_METHODS = frozenset({"decode", "format", "join", "strip", "lower", "upper", "replace", "lstrip", "rstrip"})


def _text(value: cst.BaseExpression) -> bool:
    """A value that is visibly a string: a literal, an f-string, `str(...)`, `raw.decode(...)`."""
    if isinstance(value, (cst.SimpleString, cst.FormattedString, cst.ConcatenatedString)):
        return True
    return isinstance(value, cst.Call) and (
        isinstance(value.func, cst.Name) and value.func.value == "str"
        or isinstance(value.func, cst.Attribute) and value.func.attr.value in _TEXT_METHODS)


def _host_only_per_pass(callable_: cst.BaseExpression, fn: Optional[FunctionInfo], where: Where,
                        loop: LoopInfo) -> bool:
    """Whether the jitted callable reads text that is new on each pass (the loop rebinds the name to another
    string, or fills a list it binds afresh with strings: `cases = []`, then `cases.append(raw.decode())`)
    only inside the Python function it hands to a host callback (`host_callback.call(partial(check,
    cases=cases), x, ...)`). The callback receives it as a Python value baked into the program; text is
    neither a jitted function's argument nor a callback's operand, so each pass is a different program by
    need."""
    body = fn.node if fn is not None and fn.node is not None else callable_
    host = [c.args[0].value for c in descendants(body) if isinstance(c, cst.Call) and c.args
            and c.args[0].keyword is None and where.resolve(c.func) in CALLBACKS]
    if not host:
        return False
    # what the pass puts into a container it binds afresh (`cases.append(raw.decode())`)
    filled: dict[str, list[cst.BaseExpression]] = {}
    for st in loop_statements(loop):
        for c in descendants(st):
            if isinstance(c, cst.Call) and isinstance(c.func, cst.Attribute) and c.func.attr.value in _MUTATORS \
                    and isinstance(c.func.value, cst.Name) and c.args:
                filled.setdefault(c.func.value.value, []).append(c.args[-1].value)
    for name in sorted(_free_names(callable_, fn)):
        values = loop.bound.get(name, [])
        if isinstance(loop.node, cst.For) and name in names_in(loop.node.target) or not values \
                or not all(v is not None and (_text(v) or isinstance(v, (cst.List, cst.Set)) and not v.elements
                                              and filled.get(name) and all(_text(e) for e in filled[name]))
                           for v in values):
            continue  # (text only: a number or an array could reach the callback as one of its operands)
        if not (_varies(name, loop, where, where.scope, nested=False) or name in filled):
            continue
        inside = sum(_read_count(part, name) for part in host)
        if inside and inside == _read_count(body, name):
            return True
    return False


def _captured(fn: FunctionInfo, outer: FunctionInfo, where: Where) -> frozenset[str]:
    """The names `fn`, a def nested in `outer`, reads from the scopes around `outer`: not those bound by `fn`,
    `outer`, a def nested in `fn`, or a comprehension of `fn` (`{p: v[i] for i, p in enumerate(ps)}`)."""
    assert fn.node is not None
    return frozenset(names_in(fn.node) - outer.local_names - _bound_within(fn, where))


def _varies(name: str, loop: LoopInfo, where: Where, scope: Scope, nested: bool = True) -> bool:
    """Whether the loop gives `name` a value that is not the same on every pass (its item, or a binding in
    its body that is not loop-invariant and not restarted at the top of each pass; with `nested`, also a
    binding in an inner loop that moves the name on)."""
    if isinstance(loop.node, cst.For) and name in names_in(loop.node.target):
        return True
    if any(v is None or not loop_invariant(v, loop, where.model, scope) for v in loop.bound.get(name, [])) \
            and not restarts_each_pass(name, loop, where.model, scope):
        return True
    # a binding in a loop nested in this one that builds on the name's last value (`for batch in data:
    # state = step(state, batch)`): the state moves on with every pass
    fn = scope.function_scope()
    return nested and fn is not None and name not in loop.bound and any(
        name in _target_names(target) and contains(loop.node, target)
        and (value is None or name in names_in(value) or not loop_invariant(value, loop, where.model, scope))
        for target, value, _how in fn.events)


def _reads_rebound_global(names: set[str], where: Where, loop: LoopInfo) -> bool:
    """Whether a module-level function among `names` (or one it calls, a few levels down) reads a module
    global that this module-level loop rebinds to a new value on each pass (`config, env = make(name)`):
    every pass is then a different program, and a jit hoisted out of the loop would keep the first pass's
    values (a stale global) rather than save a compile."""
    model = where.model
    if loop.scope is not model.root:
        return False
    varying = {n for n, values in loop.bound.items()
               if any(v is None or not loop_invariant(v, loop, model, model.root) for v in values)}
    if isinstance(loop.node, cst.For):
        varying |= names_in(loop.node.target)
    varying -= set(model.root.defs) | set(model.root.classes)
    if not varying:
        return False
    names = set(names)
    for n in sorted(names):  # `train_fn = jax.vmap(train)` in the loop, then `jax.pmap(train_fn)`
        names |= {m for v in loop.bound.get(n, []) if v is not None for m in _free_names(v, None)}
    seen: set[int] = set()
    stack = [(n, 0) for n in sorted(names)]
    while stack:
        name, depth = stack.pop()
        fn = model.root.defs.get(name)
        if fn is None or fn.node is None or id(fn) in seen or depth > 3:
            continue
        seen.add(id(fn))
        reads = set(name_counts(fn.node)[0]) - fn.local_names
        if reads & varying:
            return True
        stack.extend((n, depth + 1) for n in sorted(reads) if n in model.root.defs)
    return False


def _from_arguments(value: cst.BaseExpression, outer: FunctionInfo, params: set[str], depth: int = 0) -> bool:
    """Whether a value `outer` computes depends on its arguments: it names a parameter, or a local bound
    from one (`cfg, label = lookup(name)`, then `make_env(cfg)`), a few bindings deep."""
    names = names_in(value)
    if names & params:
        return True
    if depth >= 5:
        return False
    for name in sorted(names - outer.defs.keys()):
        for b in outer.bindings(name):
            v = b.source
            if v is not None and v is not value and _from_arguments(v, outer, params, depth + 1):
                return True
    return False


def _factory_result(binding_value: Optional[cst.BaseExpression], where: Where, scope: Scope,
                    objects: bool = False) -> bool:
    """A value made by calling something that is not a transform or a partial (`adam(lr)`, `make_mlp()`,
    `a, b = make_sim(kT)`): when it is called, it is a function built anew on each evaluation. With
    `objects`, the value's methods are asked about: not a value of JAX or NumPy (an array's methods are
    no functions built per call)."""
    if not isinstance(binding_value, cst.Call):
        return False
    q = where.model.resolve(binding_value.func, scope) or ""
    if not q and isinstance(binding_value.func, cst.Name) and binding_value.func.value in where.model.root.defs:
        q = binding_value.func.value  # a factory of this module (`env = make_env(cfg)`)
    if objects and (q.startswith(("jax.", "numpy.", "builtins.")) or q in ("jax", "numpy") or not q):
        return False
    return not (q == "functools.partial" or q in where.model.transforms or q in JIT_LIKE)


def _short(qual: str) -> str:
    """`jax.jit`, `jax.pmap`, `eqx.filter_jit`: the transform as users write it."""
    return qual.replace("equinox.", "eqx.", 1) if qual.startswith("equinox.") else qual
