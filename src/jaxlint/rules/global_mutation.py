"""global-mutation: traced code writing state that outlives the trace."""
from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from ..jaxapi import LAX_BODIES, MUTATING_METHODS, STATIC_ATTRS, STATIC_CALLS, TREE_MAPS
from ..semantic import ClassInfo, FunctionInfo, ModuleModel, Scope
from ..syntax import _target_names, code_of, contains, descendants, iter_children
from .base import Rule, Where, tracing_phrase

# Methods that only a list/set/deque has: safe to flag even when the receiver's type is unknown.
# (`update`, `pop`, `clear` are also names of pure functional APIs, e.g. an optax optimizer's `update`.)
# Container methods that return None: a call whose result is used is some other object's method.
_RETURNS_NONE = frozenset({"append", "extend", "insert", "appendleft", "extendleft", "add", "discard", "update",
                           "clear", "remove", "sort", "reverse"})
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


# Python container methods and how many positional arguments they take: a method of that name called
# with another arity (`buffer.add(state, x)`) is some other API.
_ARITY = {"append": (1, 1), "extend": (1, 1), "add": (1, 1), "discard": (1, 1), "appendleft": (1, 1),
          "extendleft": (1, 1), "insert": (2, 2), "setdefault": (1, 2)}
# Calls whose result is a pytree structure (a treedef or a Flax graphdef), never a tracer; the int is the
# position of the structure in a tuple result (None: the whole result).
_STRUCTURE_CALLS = {
    "jax.tree_util.tree_structure": None, "jax.tree.structure": None, "flax.nnx.graphdef": None,
    "jax.tree_util.tree_flatten": 1, "jax.tree.flatten": 1, "flax.nnx.split": 0,
    "jax.tree_structure": None, "jax.tree_flatten": 1,  # (the old aliases, still in older code)
}


# Transforms that run the function they are given at once, with the arguments given alongside it, and never
# again: the function `jax.vjp` and `jax.linearize` return runs the recorded computation, not the Python code.
_RUN_AT_ONCE = frozenset({"jax.eval_shape", "jax.vjp", "jax.jvp", "jax.linearize"})

# Classes whose `forward` method runs when `Cls.apply(...)` is called, and only then (PyTorch's custom
# autograd functions; its `backward` runs later, when gradients flow).
_APPLY_RUNS_FORWARD = frozenset({"torch.autograd.Function"})

# Calls making a weak reference: it does not keep its referent (a trace's tracer) alive.
_WEAK_REFERENCES = frozenset({"weakref.ref", "weakref.proxy", "weakref.WeakMethod"})


def _subject(name: str, container: str, target: cst.BaseExpression) -> dict:
    """What the verifier watches: the root name, where it lives, and the mutated expression's text."""
    return {"name": name, "container": container, "target": code_of(target)}


def _passes_through_at(expr: cst.BaseExpression) -> bool:
    while isinstance(expr, (cst.Attribute, cst.Subscript)):
        if isinstance(expr, cst.Attribute) and expr.attr.value == "at":
            return True
        expr = expr.value
    return False


def _fresh_per_trace(name: str, owner: FunctionInfo) -> bool:
    """Whether `name` is an argument JAX rebuilt for this trace of `owner` (a transform's own pytree argument,
    never rebound): no caller holds that container."""
    return name in owner.pytree_params and "helper" not in owner.transforms and bool(owner.transforms) \
        and name not in owner.assigned


def _called_directly(fn: FunctionInfo, model: ModuleModel) -> bool:
    """Whether some call in the module runs `fn` itself, outside a trace: its caller's container is then the
    one written."""
    if any(order == -1 for _scope, order in fn.trace_sites):
        return False  # a decorated function: every call of it goes through the transform
    return any(model.traced_function(scope) is None for scope in model.call_scopes(fn))


def _mentions(node: cst.CSTNode, name: str) -> bool:
    stack: list[cst.CSTNode] = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, cst.Name) and n.value == name:
            return True
        stack.extend(iter_children(n))
    return False



def _consumed_by_own_method(target: cst.Attribute, owner: Scope, where: Where) -> bool:
    """`model.params = params; out = model.generate(batch)` in a traced function: the object's own method
    reads the value within the same trace, and after the function is defined the owner uses the object
    outside a trace only to store that attribute again or with the value passed explicitly
    (`model.save_pretrained(dir, params=params)`) — the tracer left on it is never looked at."""
    fn = where.traced
    if fn is None or not isinstance(fn.node, cst.FunctionDef) or not isinstance(target.value, cst.Name):
        return False
    obj, attr = target.value.value, target.attr.value
    after_write = False
    uses_method = False
    for stmt in fn.node.body.body if isinstance(fn.node.body, cst.IndentedBlock) else ():
        if after_write and any(isinstance(c, cst.Call) and isinstance(c.func, cst.Attribute)
                               and isinstance(c.func.value, cst.Name) and c.func.value.value == obj
                               for c in descendants(stmt)):
            uses_method = True
        if contains(stmt, target):
            after_write = True
    if not uses_method or owner.node is None:
        return False
    traced = [f.node for f in where.model.functions if f.traced and f.node is not None]
    seen_def = False
    allowed: set[int] = set()
    for n in descendants(owner.node):
        if n is fn.node:
            seen_def = True
            continue
        if not seen_def:
            continue
        if isinstance(n, cst.Assign):  # `model.params = new`: a store replaces the leaked value
            allowed.update(id(t.target.value) for t in n.targets if isinstance(t.target, cst.Attribute)
                           and t.target.attr.value == attr and isinstance(t.target.value, cst.Name))
        elif isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and isinstance(n.func.value, cst.Name) \
                and any(a.keyword is not None and a.keyword.value == attr for a in n.args):
            allowed.add(id(n.func.value))  # `model.save_pretrained(dir, params=params)`: given explicitly
        elif isinstance(n, cst.Name) and n.value == obj and id(n) not in allowed \
                and not any(contains(t, n) for t in traced):
            return False  # the object is used again outside a trace: it could read the leaked tracer
    return True



def _balanced_in_try(call: cst.Call, method: str, receiver: cst.BaseExpression, fn: FunctionInfo) -> bool:
    """Whether `call` is a `receiver.append(...)` in the body of a `try` of `fn` whose `finally` pops the same
    receiver, or that `pop` itself: a stack pushed and popped around the traced code is left as it was."""
    if method not in ("append", "pop"):
        return False
    shown = code_of(receiver)

    def calls(block: cst.CSTNode, name: str) -> bool:
        return any(isinstance(c, cst.Call) and isinstance(c.func, cst.Attribute) and c.func.attr.value == name
                   and code_of(c.func.value) == shown for c in descendants(block))

    for node in descendants(fn.node):
        if isinstance(node, cst.Try) and node.finalbody is not None:
            if method == "append" and contains(node.body, call) and calls(node.finalbody, "pop"):
                return True
            if method == "pop" and contains(node.finalbody, call) and calls(node.body, "append"):
                return True
    return False


def _block(node: cst.BaseSuite) -> list[cst.CSTNode]:
    return list(node.body) if isinstance(node, cst.IndentedBlock) else [node]


def _mentioned_after(stmts: list[cst.CSTNode], target: cst.CSTNode, name: str) -> bool:
    """Whether code that can run after the def `target` (in these statements, in source order) mentions
    `name`: the statements after it, and the rest of the branch holding it (not the other branch of its
    `if`); a loop holding it counts whole, since it runs again."""
    for i, stmt in enumerate(stmts):
        if not contains(stmt, target):
            continue
        rest = _read_later(stmts[i + 1:], target, name)
        if stmt is target:
            return rest
        if isinstance(stmt, cst.If):
            branch = stmt.body if contains(stmt.body, target) else stmt.orelse
            inner = branch.body if isinstance(branch, cst.Else) else branch
            if isinstance(inner, cst.If):
                return rest or _mentioned_after([inner], target, name)
            return rest or (inner is not None and _mentioned_after(_block(inner), target, name))
        if isinstance(stmt, cst.With):
            return rest or _mentioned_after(_block(stmt.body), target, name)
        return True  # a loop, a try, or an expression holding it: assume it may be read afterwards
    return True


def _runs_within(owner: FunctionInfo, fn: FunctionInfo, where: Where) -> bool:
    """Whether `owner` only calls the def `fn` or hands it to a loop or branch primitive (`lax.scan(fn,
    ...)`): it never returns or stores it, so the def runs only during the call of `owner` that made it."""
    if owner.node is None or fn.name in owner.assigned:
        return False
    allowed: set[int] = set()
    for call in owner.calls:
        if isinstance(call.func, cst.Name):
            allowed.add(id(call.func))
        if where.model.resolve(call.func, owner) in LAX_BODIES:
            allowed.update(id(a.value) for a in call.args)
    return all(id(n) in allowed for n in descendants(owner.node) if isinstance(n, cst.Name) and n.value == fn.name
               and not (isinstance(fn.node, cst.FunctionDef) and n is fn.node.name))


def _read_later(stmts: list[cst.CSTNode], body: cst.CSTNode, name: str) -> bool:
    """Whether these statements read `name` as the body `def` left it: a statement that hands the body to
    JAX and binds `name` from the result (`(acc, n), _ = jax.lax.scan(body, (acc, n), xs)`) reads only the
    value from before (its arguments) and replaces what the body wrote."""
    fname = body.name.value if isinstance(body, cst.FunctionDef) else None
    for stmt in stmts:
        small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
        if fname is not None and isinstance(small, cst.Assign) and isinstance(small.value, cst.Call) \
                and any(isinstance(a.value, cst.Name) and a.value.value == fname for a in small.value.args) \
                and any(n == name for t in small.targets for n in _target_names(t.target)):
            return False
        if _mentions(stmt, name):
            return True
    return False


def _reads_back(fn: FunctionInfo, target: cst.BaseExpression, write: cst.CSTNode) -> bool:
    """Whether `fn` reads the whole written target before or while writing it (`state.I = state.I * w`): it
    feeds on what an earlier run left there, a tracer once a trace has run."""
    text = code_of(target)
    prefixes: set[int] = set()  # `state.I` in `state.I.shape`: a part of it read, not the value written

    def whole(n: cst.CSTNode) -> bool:
        if isinstance(n, (cst.Attribute, cst.Subscript)):
            prefixes.add(id(n.value))
        return type(n) is type(target) and n is not target and id(n) not in prefixes and code_of(n) == text

    for n in descendants(fn.node):
        if n is write:
            return any(whole(m) for m in descendants(n))  # (the written value reading the target)
        if whole(n):
            return True
    return False


def _dies_with_owner(name: str, owner: FunctionInfo, fn: FunctionInfo, where: Where) -> bool:
    """Whether an object that the function `owner` makes for itself (`readout = Readout(n)`, `batch =
    next(loader)`) and that its nested def `fn` writes under a transform dies with that call of `owner`
    without being read again: `fn` is only called or handed to a transform that is called at once
    (`jax.grad(loss_fn)(w)`, `jax.eval_shape(init_fn, rng)`), never returned or stored; `owner` only reads
    the object's attributes and items (never hands the object itself on), and mentions it nowhere after the
    last statement running `fn`. The tracer left on it is then never seen."""
    if fn.parent is not owner or not isinstance(owner.node, cst.FunctionDef) or not isinstance(fn.node, cst.FunctionDef) \
            or owner.param(name) is not None or name in owner.declared_global or name in owner.declared_nonlocal:
        return False
    values = owner.assigned.get(name, [])
    if not values or not all(isinstance(v, cst.Call) for v in values):
        return False  # (an object it was given, or an alias of one, may be read elsewhere)
    if any(f is not fn and f.node is not None and _mentions(f.node, name) for f in owner.defs.values()):
        return False  # another nested def reading it may run later
    model = where.model
    applied = _applied_classes(owner, fn, name, where)
    last: Optional[cst.CSTNode] = None  # the last statement of `owner` running `fn`
    for n, up, stmt in _names_in_order(owner.node.body, fn.node, *applied.values()):
        parent = up[0]
        if n.value in applied:
            if not (isinstance(parent, cst.Attribute) and parent.value is n and parent.attr.value == "apply"
                    and isinstance(up[1], cst.Call) and up[1].func is parent):
                return False  # the class handed on: its `forward` may run after `owner` returns
            last = stmt  # `Cls.apply(x)` runs `forward`, and `fn` in it, here
        elif n.value == fn.name:
            if not _runs_at_once(n, up, owner, where):
                return False  # returned, stored or handed on: it may run after `owner` returns
            last = stmt
        elif n.value == name and not (isinstance(parent, (cst.Attribute, cst.Subscript)) and parent.value is n
                                      or isinstance(parent, cst.AssignTarget)):
            return False  # the object itself handed on or aliased
    if last is None or not isinstance(last, cst.SimpleStatementLine):
        return False
    return not _mentioned_after(_block(owner.node.body), last, name)


def _runs_at_once(n: cst.Name, up: tuple[Optional[cst.CSTNode], ...], scope: Scope, where: Where) -> bool:
    """Whether this mention of a function (its name `n`, with its three nearest ancestors `up`) runs it
    here and only here: a call of it, or a transform applied to it and called at once (`jax.grad(f)(x)`),
    a loop or branch primitive, or a transform that runs it as it is given (`jax.vjp(f, x)`)."""
    parent = up[0]
    if isinstance(parent, cst.Call) and parent.func is n:
        return True
    if isinstance(parent, cst.Arg) and isinstance(up[1], cst.Call):
        call, applied = up[1], up[2]
        q = where.model.resolve(call.func, scope) or ""
        return q in where.model.transforms and isinstance(applied, cst.Call) and applied.func is call \
            or q in LAX_BODIES or q in _RUN_AT_ONCE
    return False


def _applied_classes(owner: FunctionInfo, fn: FunctionInfo, name: str, where: Where) -> dict[str, cst.ClassDef]:
    """The custom autograd functions of PyTorch (`class F(torch.autograd.Function)`) that `owner` defines
    in its body and whose `forward` runs `fn` (a call of it, or `jax.vjp(fn, *args)`): `F.apply(x)` runs
    `forward` then and there. The other methods never mention `fn`, and no method mentions `name`.
    Each is keyed by its name."""
    out: dict[str, cst.ClassDef] = {}
    if not isinstance(owner.node, cst.FunctionDef):
        return out
    for stmt in _block(owner.node.body):
        cls = owner.classes.get(stmt.name.value) if isinstance(stmt, cst.ClassDef) else None
        if cls is None or cls.node is not stmt or not any(b in _APPLY_RUNS_FORWARD for b in cls.bases) \
                or _mentions(stmt, name) or not _mentions(stmt, fn.name):
            continue
        forward = [m for m in _block(stmt.body) if isinstance(m, cst.FunctionDef) and m.name.value == "forward"]
        if len(forward) != 1 or any(m is not forward[0] and _mentions(m, fn.name) for m in _block(stmt.body)):
            continue
        method = next((f for f in where.model.functions if f.node is forward[0]), None)
        if method is None or any(n.value == fn.name and not _runs_at_once(n, up, method, where)
                                 for n, up, _stmt in _names_in_order(forward[0].body, forward[0].name)):
            continue
        out[stmt.name.value] = stmt
    return out


def _parents(root: cst.CSTNode) -> dict[int, cst.CSTNode]:
    out: dict[int, cst.CSTNode] = {}
    for n in descendants(root):
        for c in iter_children(n):
            out[id(c)] = n
    return out


def _only_run_during(parent: FunctionInfo, f: FunctionInfo, where: Where) -> bool:
    """Whether `parent` only runs its nested def `f` during its own call: it calls it, hands it to a loop
    or branch primitive, or to a transform that runs it at once (`jax.grad(f)(x)`, `jax.vjp(f, x)`), and
    never rebinds, returns or stores it."""
    if not isinstance(parent.node, cst.FunctionDef) or not isinstance(f.node, cst.FunctionDef) or f.name in parent.assigned:
        return False
    model = where.model
    for n, up, _stmt in _names_in_order(parent.node.body, f.node):
        if n.value != f.name:
            continue
        if isinstance(up[0], cst.Call) and up[0].func is n:
            continue
        if isinstance(up[0], cst.Arg) and isinstance(up[1], cst.Call):
            call, applied = up[1], up[2]
            q = model.resolve(call.func, parent) or ""
            if q in model.transforms and isinstance(applied, cst.Call) and applied.func is call \
                    or q in LAX_BODIES or q in _RUN_AT_ONCE:
                continue
        return False
    return True


def _overwritten_after(name: str, target: cst.BaseExpression, owner: FunctionInfo, writer: FunctionInfo,
                       where: Where) -> bool:
    """`params["w"] = w` in a def that `owner` runs through a transform (`jax.grad(loss)(w)` in a step it
    calls in a loop), where `params` is a local of `owner`: whether the tracer left in that slot is never
    looked at. The def holding the write is a statement of `owner`'s body, run only during `owner`'s call
    (never returned or stored, and so are the defs between it and the write); after that statement the
    first statement mentioning `params` stores the same slot again (`params["w"] = w_final`), and nothing
    after it runs the def. Until then `owner` reads only slots as deep as the one written (old values,
    never a container holding it) and hands neither `params` nor a part holding the slot to anything."""
    if not isinstance(owner.node, cst.FunctionDef) or owner.param(name) is not None \
            or name in owner.declared_global or name in owner.declared_nonlocal or not owner.assigned.get(name):
        return False
    inner: Scope = writer
    while inner.parent is not owner:  # the def of `owner` holding the write, and the defs on the way
        up = inner.parent
        if not isinstance(inner, FunctionInfo) or not isinstance(up, FunctionInfo) or not _only_run_during(up, inner, where):
            return False
        inner = up
    if not isinstance(inner, FunctionInfo) or not _only_run_during(owner, inner, where):
        return False
    if any(f is not inner and f.node is not None and _mentions(f.node, name) for f in owner.defs.values()):
        return False  # another nested def may read it
    body = _block(owner.node.body)
    if inner.node not in body:
        return False
    after = body[body.index(inner.node) + 1:]
    shown = code_of(target)
    store: Optional[int] = None
    for i, stmt in enumerate(after):
        if _mentions(stmt, name):
            small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
            if not (isinstance(small, cst.Assign) and len(small.targets) == 1
                    and code_of(small.targets[0].target) == shown and not _mentions(small.value, name)):
                return False
            store = i
            break
    if store is None or any(_mentions(stmt, inner.name) for stmt in after[store:]):
        return False
    # every other mention of the container in `owner`: a binding of the name, or a slot read as deep as the
    # one written (an old value); never the container, or a part of it holding the slot, handed on
    parents = _parents(owner.node)
    skip = {id(n) for n in descendants(inner.node)} | {id(n) for stmt in after[store:] for n in descendants(stmt)}
    for n in descendants(owner.node):
        if not isinstance(n, cst.Name) or n.value != name or id(n) in skip:
            continue
        top: cst.CSTNode = n
        while isinstance(parents.get(id(top)), (cst.Attribute, cst.Subscript)) and parents[id(top)].value is top:
            top = parents[id(top)]
        parent = parents.get(id(top))
        if top is n and (isinstance(parent, cst.AssignTarget) or isinstance(parent, cst.AnnAssign) and parent.target is n):
            continue
        if top is n or isinstance(parent, cst.Call) and parent.func is top \
                or code_of(top) != shown and shown.startswith(code_of(top)):
            return False
    return True


def _early_return_on(stmt: cst.CSTNode, flag: str) -> bool:
    """`if FLAG: return` (or `if FLAG is not None: return ...`), with no `else`."""
    if not isinstance(stmt, cst.If) or stmt.orelse is not None:
        return False
    test = stmt.test
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 \
            and isinstance(test.comparisons[0].operator, cst.IsNot) \
            and isinstance(test.comparisons[0].comparator, cst.Name) and test.comparisons[0].comparator.value == "None":
        test = test.left
    body = _block(stmt.body)
    return isinstance(test, cst.Name) and test.value == flag and len(body) == 1 \
        and isinstance(body[0], cst.SimpleStatementLine) and len(body[0].body) == 1 \
        and isinstance(body[0].body[0], cst.Return)


def _once_only(node: cst.CSTNode, fn: Optional[FunctionInfo]) -> bool:
    """Whether `node` runs at most once however often `fn` is called or traced: `fn` sets a module flag
    (`global _LOADED`) guarding it, a one-time initializer. In the straight-line block holding `node`
    (the function's body, or a `with` block in it, as `with _LOCK:`), or in a block around it, `if _LOADED:
    return` comes before the statement holding `node`; after that statement, in the same block and with no
    `return` on the way, `_LOADED = True` (or another non-None literal) sets the flag."""
    if fn is None or not isinstance(fn.node, cst.FunctionDef):
        return False
    flags = fn.declared_global
    block = _block(fn.node.body)
    guarded: set[str] = set()
    while True:
        holder = next((s for s in block if contains(s, node)), None)
        if holder is None:
            return False
        i = block.index(holder)
        guarded |= {f for f in flags if any(_early_return_on(s, f) for s in block[:i])}
        if guarded:
            for stmt in block[i + 1:]:
                if isinstance(stmt, cst.SimpleStatementLine):
                    for small in stmt.body:
                        if isinstance(small, cst.Assign) and len(small.targets) == 1 \
                                and isinstance(small.targets[0].target, cst.Name) \
                                and small.targets[0].target.value in guarded \
                                and (isinstance(small.value, (cst.Integer, cst.Float, cst.SimpleString))
                                     or isinstance(small.value, cst.Name) and small.value.value == "True"):
                            return True
                if any(isinstance(n, cst.Return) for n in descendants(stmt)):
                    break
        if not isinstance(holder, cst.With):
            return False
        block = _block(holder.body)


def _names_in_order(body: cst.CSTNode, skip: cst.CSTNode, *also: cst.CSTNode
                    ) -> Iterator[tuple[cst.Name, tuple[Optional[cst.CSTNode], ...], Optional[cst.CSTNode]]]:
    """The names under `body` in source order (not under `skip`, nor under the nodes `also`), each with its
    three nearest ancestors (nearest first) and the statement holding it."""
    stack: list[tuple[cst.CSTNode, tuple[Optional[cst.CSTNode], ...], Optional[cst.CSTNode]]] = [
        (body, (None, None, None), None)]
    while stack:
        n, up, stmt = stack.pop()
        if n is skip or any(n is a for a in also):
            continue
        if isinstance(n, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            stmt = n
        if isinstance(n, cst.Name):
            yield n, up, stmt
            continue
        stack.extend((c, (n, up[0], up[1]), stmt) for c in reversed(list(iter_children(n))))


# Bodies JAX traces once for each call of the function handing them over (a loop or branch primitive).
_ONCE_PER_CALL = frozenset({name for name, _slots in LAX_BODIES.values()})


def _read_after(owner: FunctionInfo, writer: FunctionInfo, name: str) -> bool:
    """Whether `owner` can read `name` after handing the nested function holding the write (`writer` or the
    def it sits in) to JAX: a body's tracer written there leaks into the enclosing trace only if read there."""
    inner: Scope = writer
    while inner.parent is not owner:
        if inner.parent is None:
            return True
        inner = inner.parent
    others = [f for f in owner.defs.values() if f is not inner and f.parent is owner]
    if any(f.node is not None and _mentions(f.node, name) for f in others):
        return True  # a helper reading it may run after the body
    if not isinstance(owner.node, cst.FunctionDef) or inner.node is None:
        return True
    return _mentioned_after(_block(owner.node.body), inner.node, name)


class GlobalMutation(Rule):
    """
    ## What it does
    Flags traced code that writes state living outside the trace: assignment to a `global` or
    `nonlocal` name, mutation of a module-level or closed-over container (`append`, `update`,
    `x[k] = v`, `del x[k]`), attribute assignment on a module-level object, and assignment to
    attributes of `self` inside a jitted method. A counter of traces that the code asserts on
    (`traces += 1` in the jitted function, `assert traces == 1` in the test) counts traces on purpose
    and is not flagged.

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
    `extend`, `add`, …): `update` or `pop` may be pure APIs such as an optimizer's `update`. Code past
    `if key is None: return`, where `key` comes from a helper of the module that returns None when it
    cannot convert an array to Python values (`float(arr[0])` in a `try`), runs only outside a trace and
    is not flagged. A method of a pytree class decorated with `jax.jit` (or `pmap`) gets `self` rebuilt
    from its leaves on each call: writing its attributes changes that copy only and is not flagged. A bound
    method jitted where it is called (`jax.jit(obj.step)`) is followed to its class when `obj` is bound once
    to a call of a class of the same module (`obj = Recorder()`); an instance from a parameter or another
    file is not. A method that traced code only calls on objects it builds itself (`sim = Sim(state);
    sim.advance(dt)` inside the jitted step, and the methods those call on `self`) writes an object of
    that trace only, and is not flagged. Nor is a write, in a def that a function only runs through a
    transform called at once (`jax.grad(loss)(w)`, `jax.vjp(loss, w)`), or through a custom autograd
    function of PyTorch that it defines and applies (`Bridge.apply(x)`, whose `forward` runs
    `jax.vjp(loss, x)` then and there), onto an object that function made for itself (`readout = Readout(n)`) when it never hands the object on and never mentions it after that
    statement: the tracer dies with the call. Nor is such a write into one slot of a local container
    (`params["w"] = w` in a loss differentiated by a step the function calls in a loop) when the
    function's first mention of the container after the step's def stores that slot again, before
    anything reads it, and never hands the container (or a part holding the slot) on before. A def that
    reads back the value it writes (`state.scale = state.scale * w`) is still flagged. A memo entry
    keyed by static values that keeps a weak reference (`weakref.ref(op)`) next to static values is not
    flagged: a weak reference keeps no tracer alive. Nor is a store of values that cannot be tracers in a
    one-time initializer (`if _LOADED: return` ... `_LIBS.append(lib); _LOADED = True`, with `_LOADED` a
    `global` of the function): it runs once per process, not once per trace.

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
            if isinstance(value, cst.BinaryOperation) and isinstance(value.left, (cst.List, cst.Tuple)):
                return True  # [None] * n
            if isinstance(value, cst.Call) and where.model.resolve(value.func, owner) in _CONTAINER_FACTORIES:
                return True
        return False

    def _array_argument(self, subject: cst.BaseExpression, root: str, where: Where) -> bool:
        """`buf[i] = v` on a parameter (or an attribute path of one) that the code reads `.shape`/`.dtype`
        of: an array or a Pallas ref handed in, never a Python container that could keep a tracer."""
        owner = where.model.owner_of(root, where.scope)
        if not isinstance(owner, FunctionInfo) or owner.param(root) is None or root in owner.assigned:
            return False
        fn = where.traced
        assert fn is not None
        return where.model.used_as_array(subject, [fn, owner] if owner is not fn else [fn])

    def _static_argument(self, value: cst.BaseExpression, where: Where) -> bool:
        """An attribute path (`self.config.size`) of a parameter that no trace gives a tracer: a static
        argument of the transform (`static_argnums=(0,)` on a method), a hashed Python object."""
        while isinstance(value, cst.Attribute):
            value = value.value
        fn = where.traced
        return isinstance(value, cst.Name) and fn is not None and fn.cached and fn.param(value.value) is not None \
            and value.value not in fn.traced_params and value.value not in fn.assigned

    def _untraceable(self, value: Optional[cst.BaseExpression], where: Where, depth: int = 0) -> bool:
        """Whether `value` cannot hold a tracer: a literal, a function or jitted callable, a pytree structure."""
        model = where.model
        if value is None or depth > 4:
            return False
        if isinstance(value, (cst.Integer, cst.Float, cst.SimpleString, cst.ConcatenatedString, cst.Lambda)):
            return True
        if isinstance(value, (cst.Tuple, cst.List)):
            return all(self._untraceable(el.value, where, depth + 1) for el in value.elements)
        if isinstance(value, cst.Dict):  # `{"evaluate": evaluate, "suffix": suffix}`: a table of functions
            return all(isinstance(el, cst.DictElement) and self._untraceable(el.value, where, depth + 1)
                       for el in value.elements)
        if isinstance(value, (cst.ListComp, cst.SetComp, cst.GeneratorExp)):
            return self._untraceable(value.elt, where, depth + 1)  # `[jnp.shape(x) for x in leaves]`
        if isinstance(value, cst.Attribute):
            if value.attr.value in STATIC_ATTRS:
                return True  # `x.shape`, `x.dtype`: Python values of any array, traced or not
            base = value.value
            while isinstance(base, cst.Attribute):
                base = base.value
            if isinstance(base, cst.Name) and model.owner_of(base.value, where.scope) is model.root \
                    and base.value in model.root.imports and base.value not in model.root.assigned:
                return True  # `ctypes.RTLD_GLOBAL`: a name of an imported module, made before any trace
            return self._static_argument(value, where)  # `self.config.buffer_size` of a static `self`
        if isinstance(value, cst.Subscript):  # `self.color_ids[rgba]`: an entry of a static argument's table
            return self._static_argument(value.value, where) and all(
                isinstance(el.slice, cst.Index) and self._untraceable(el.slice.value, where, depth + 1)
                for el in value.slice)
        if isinstance(value, cst.Call):
            q = model.resolve(value.func, where.scope)
            if q is None and (self._static_argument(value.func, where) or model.class_named(value.func, where.scope)) \
                    and all(self._untraceable(a.value, where, depth + 1) for a in value.args):
                # `self.config.q_network(self.n_actions, self.config)`, `Decay(rate=0.1)`: built from static values
                return True
            if q in STATIC_CALLS and q not in ("builtins.int", "builtins.float", "builtins.bool", "builtins.complex"):
                return True  # shapes, dtypes, lengths: Python values of any argument
            if q in ("builtins.int", "builtins.float", "builtins.bool", "builtins.complex", "builtins.str") \
                    and all(self._untraceable(a.value, where, depth + 1) for a in value.args):
                return True  # `int(color_id)` of a value that holds no tracer
            if q in model.transforms or (isinstance(value.func, cst.Call) and model.transform_of(value.func, where.scope)):
                return True  # jax.jit(f): a callable
            if q in TREE_MAPS and value.args:
                # a tree of whatever the callback returns: static if its summary says so
                ref = model.resolve_callable(value.args[0].value, where.scope)
                return ref is not None and ref.fn.traced and not where.is_traced(value)
            if q in _STRUCTURE_CALLS:
                return _STRUCTURE_CALLS[q] is None
            values = where.values
            returned = model.call_returns(value, values) if values is not None else None
            if returned is not None and not any(returned):
                return True  # a helper or method whose summary returns only Python values for these arguments
            # a library function (not JAX's own) of values that hold no tracer builds none either
            return q is not None and not q.startswith(("jax.", "builtins.")) and bool(value.args) \
                and all(self._untraceable(a.value, where, depth + 1) for a in value.args)
        if isinstance(value, cst.Name):
            if value.value in ("True", "False", "None") or model.lookup_function(value.value, where.scope):
                return True
            root = model.root
            if model.owner_of(value.value, where.scope) is root and value.value not in root.assigned \
                    and (value.value in root.imports or value.value in root.classes):
                return True  # an imported function, module or constant, or a class: made before any trace
            if model.owner_of(value.value, where.scope) is root and model.bound_once(value.value):
                return True  # bound once, by module code, before any trace: the same object on every call
            fn = where.function
            if fn is not None and value.value in fn.imports and value.value not in fn.assigned:
                return True  # `import distrax` inside the function: a module object
            if fn is not None and fn.param(value.value) is not None and value.value not in fn.assigned:
                # a parameter no traced call site fills with a tracer (`set_backend("coix.numpyro")`), when
                # every site is known
                return not fn.flags_open and bool(fn.flag_sites) and value.value not in fn.traced_params
            if fn is None or value.value not in fn.local_names:
                return False
            found = False
            for b in fn.bindings(value.value):
                if b.how == "aug":
                    continue
                if b.unpacked is not None:
                    whole, index = b.unpacked
                    if isinstance(whole, cst.Call):
                        q = model.resolve(whole.func, where.scope)
                        if (q not in _STRUCTURE_CALLS or _STRUCTURE_CALLS[q] != index) \
                                and not self._untraceable(whole, where, depth + 1):
                            return False  # (the parts of a result that holds no tracer hold none either)
                        found = True
                    continue
                if b.value is None:
                    continue
                if not self._untraceable(b.value, where, depth + 1):
                    return False
                found = True
            return found
        return False

    def _flag(self, node: cst.CSTNode, what: str, where: Where, subject: Optional[dict] = None) -> None:
        fn = where.traced
        assert fn is not None
        if fn.cached:
            text = "happens once per trace, not on each call, and can leak tracers"
        else:  # grad/vmap alone re-run the Python function on every call: only the tracer is the problem
            text = "stores a traced value that outlives the trace (a leaked tracer)"
        self.report(
            node,
            f"{what} {tracing_phrase(fn)} {text}; return the value or pass state in and out explicitly.",
            where,
            subject=subject,
        )

    def _leaks(self, values: list[cst.BaseExpression], where: Where) -> bool:
        """Whether writing `values` outlives the trace badly: always under a cached trace (it happens once
        per trace), only for traced values when the function re-runs on every call (grad, vmap alone)."""
        fn = where.traced
        assert fn is not None
        return fn.cached or any(where.is_traced(v) for v in values)

    def _scratch(self, name: str, owner: Scope, values: list[cst.BaseExpression], where: Where) -> bool:
        """A container of an enclosing function that leaks nothing: the values written cannot be tracers,
        or the enclosing function never reads it back (only the nested trace does). A module-level container
        written under a cached trace is never scratch: the write itself happens once per trace."""
        cached = where.traced is not None and where.traced.cached
        if values and (isinstance(owner, FunctionInfo) or not cached) and all(self._untraceable(v, where) for v in values):
            return True
        if isinstance(owner, FunctionInfo) and owner.traced and where.traced is not None:
            return _fresh_per_trace(name, owner) and not _called_directly(owner, where.model) \
                and not _read_after(owner, where.traced, name)
        return isinstance(owner, FunctionInfo) and not where.model.reads_directly(owner, name)

    def _container_owner(self, name: str, where: Where) -> Optional[Scope]:
        """The scope owning a container mutated in traced code, if the mutation can outlive the trace."""
        owner = self._outliving_owner(name, where)
        if owner is not None:
            return owner
        fn = where.traced
        assert fn is not None
        owner = where.model.owner_of(name, where.scope)
        if isinstance(owner, FunctionInfo) and owner.traced and owner is not fn.function_scope() \
                and name not in fn.local_names and fn.transforms - {"helper"}:
            return owner  # a lax body (its own trace) writing a container of the enclosing trace
        return None

    def _check_target(self, target: cst.BaseExpression, node: cst.CSTNode, values: list[cst.BaseExpression],
                      where: Where) -> None:
        fn = where.traced
        if fn is None:
            return
        # `_BACKENDS[name] = {"sample": sample}`, `_ACTIVE = name`: a plain store of values that cannot be
        # tracers writes the same thing on every call, so doing it once per trace changes nothing
        def idempotent() -> bool:
            return isinstance(node, cst.Assign) and bool(values) and all(self._untraceable(v, where) for v in values)

        if isinstance(target, cst.Name):
            if target.value not in fn.declared_global and target.value not in fn.declared_nonlocal:
                return  # a local of the function
            if where.model.trace_counter(fn, target.value) or idempotent():
                return  # a trace counter a test asserts on, or the same Python value on every call
            if target.value in fn.declared_global:
                if where.model.restores(fn, target.value):
                    return  # set for the extent of a `with`, put back in a `finally`
                if self._leaks(values, where):
                    self._flag(node, f"Assigning global `{target.value}`", where,
                               _subject(target.value, "module", target))
            elif target.value in fn.declared_nonlocal:
                owner = where.model.owner_of(target.value, where.scope)
                # (a def decorated with jit inside the owner is a new function on each call: traced anew)
                fresh = fn.parent is owner and any(order == -1 for _scope, order in fn.trace_sites) \
                    and _runs_within(owner, fn, where)
                once = fn.transforms and (fn.transforms <= _ONCE_PER_CALL or fresh and fn.transforms - _ONCE_PER_CALL <= {"jit"})
                if isinstance(owner, FunctionInfo) and (owner.traced or (once and not _read_after(owner, fn, target.value))):
                    return  # one trace, or a lax body's scratch variable the enclosing function never reads after it
                if self._leaks(values, where):
                    self._flag(node, f"Assigning nonlocal `{target.value}`", where,
                               _subject(target.value, "closure", target))
            return
        if isinstance(target, (cst.Tuple, cst.List)):
            for el in target.elements:
                self._check_target(el.value, node, values, where)
            return
        if not isinstance(target, (cst.Subscript, cst.Attribute)) or _passes_through_at(target):
            return
        if isinstance(target, cst.Subscript) and len(target.slice) == 1 and isinstance(target.slice[0].slice, cst.Index) \
                and isinstance(target.slice[0].slice.value, cst.Ellipsis):
            return  # `ref[...] = v`: a mutable array reference, updated through the trace by design
        root = _root_name(target)
        if root is None or where.model.is_ref(root.value, where.scope):
            return  # a Pallas `Ref`: stores are how a kernel writes its outputs and scratch
        if isinstance(target, cst.Subscript) and self._array_argument(target.value, root.value, where):
            return  # `buf[i] = v` where `buf.shape`/`buf.dtype` is read: a ref write or an array error, no container
        if not self._leaks(values, where):
            return
        if self._is_self(root.value, fn):
            if "flax_jit" in fn.transforms or (fn.cls is not None and where.model.frameworks.kind(fn.cls) is not None):
                # Flax's lifted jit and nnx's transforms propagate Module state updates out of the trace; a
                # haiku/linen module instance lives inside the transformed function (linen and equinox
                # modules refuse the write outright): its attributes do not outlive the trace.
                return
            if values and all(self._untraceable(v, where) for v in values):
                return  # caching a jitted callable or a literal on the instance leaks nothing
            if where.model.self_rebuilt_per_call(fn):
                return  # `@jax.jit def init(self, ...)` of a pytree class: `self` is the trace's own copy
            if where.model.scratch_attribute(target, fn):
                return  # written before it is read on every call, and read nowhere else
            if where.model.instance_made_in_trace(fn):
                return  # `game = Game(state); game.step()` inside the trace: an object of that trace only
            if isinstance(target, cst.Attribute) or isinstance(target.value, cst.Attribute):
                self._flag(node, f"Writing `{root.value}` state", where, _subject(root.value, "self", target))
            return
        owner = self._container_owner(root.value, where) if isinstance(target, cst.Subscript) \
            else self._outliving_owner(root.value, where)
        if owner is None:
            return
        if isinstance(target, cst.Attribute) and isinstance(owner, ClassInfo):
            return
        writer = where.scope.function_scope()
        if isinstance(owner, FunctionInfo) and writer is not None and not _reads_back(writer, target, node) \
                and (_dies_with_owner(root.value, owner, writer, where)
                     or _overwritten_after(root.value, target, owner, writer, where)):
            return  # an object of one call of `owner`, never read after the transform has run, or a slot
            # `owner` stores again before it reads it
        if isinstance(target, cst.Attribute) and (idempotent() or self._restore(target, values, fn)
                                                  or self._restored_later(target, node, fn, where)):
            return  # `saved = m.signals; m.signals = traced; ...; m.signals = saved`: put back before returning
        if isinstance(target, cst.Attribute) and target.value is root and _consumed_by_own_method(target, owner, where):
            return
        if isinstance(target, cst.Subscript) and (idempotent() or self._memo_store(target, node, values, where)
                                                  or self._scratch(root.value, owner, values, where)):
            return
        if values and all(self._untraceable(v, where) for v in values) and _once_only(node, where.scope.function_scope()):
            return  # a store in an initializer a module flag lets run once: not once per trace
        kind = "module-level" if owner is where.model.root else "closed-over"
        self._flag(node, f"Writing {kind} `{root.value}`", where,
                   _subject(root.value, "module" if owner is where.model.root else "closure", target))

    def _memo_store(self, target: cst.Subscript, node: cst.CSTNode, values: list[cst.BaseExpression],
                    where: Where) -> bool:
        """`_PLANS[key] = plan` where neither the key nor the value is traced: a memo table keyed by
        static facts (shapes, dtypes), filled while tracing and read back by later traces. Storing it once
        per trace is what a memo wants, and no tracer leaks."""
        keys = [el.slice.value for el in target.slice if isinstance(el.slice, cst.Index)]
        return isinstance(node, cst.Assign) and bool(values) and len(keys) == len(target.slice) \
            and not any(where.is_traced(v) for v in self._strong_parts(values, where) + keys)

    def _strong_parts(self, values: list[cst.BaseExpression], where: Where) -> list[cst.BaseExpression]:
        """The parts of stored values that hold what they refer to: the elements of a tuple or list
        written out, less weak references (`weakref.ref(op)`), which keep nothing alive. An object a trace
        built dies with the trace, and the weak reference to it goes dead; one that outlives the trace is
        held, and leaked, elsewhere."""
        out: list[cst.BaseExpression] = []
        for v in values:
            if isinstance(v, (cst.Tuple, cst.List)) and not any(isinstance(el, cst.StarredElement) for el in v.elements):
                out.extend(self._strong_parts([el.value for el in v.elements], where))
            elif not (isinstance(v, cst.Call) and where.model.resolve(v.func, where.scope) in _WEAK_REFERENCES):
                out.append(v)
        return out

    def _restore(self, target: cst.Attribute, values: list[cst.BaseExpression], fn: FunctionInfo) -> bool:
        """`obj.attr = saved` where `saved = obj.attr` was read in this function: the value it had."""
        if len(values) != 1 or not isinstance(values[0], cst.Name):
            return False
        bound = fn.assigned.get(values[0].value, [])
        return len(bound) == 1 and bound[0] is not None and code_of(bound[0]) == code_of(target)

    def _restored_later(self, target: cst.Attribute, node: cst.CSTNode, fn: FunctionInfo, where: Where) -> bool:
        """A later statement of the same body (not under an `if` or loop) stores a saved or non-traced value
        back into the same attribute, before the function returns."""
        body = fn.node.body.body if isinstance(fn.node, cst.FunctionDef) and isinstance(fn.node.body, cst.IndentedBlock) else ()
        seen = False
        for stmt in body:
            if not seen:
                seen = contains(stmt, node)
                continue
            if not isinstance(stmt, cst.SimpleStatementLine):
                continue
            for small in stmt.body:
                if isinstance(small, cst.Assign) and any(code_of(t.target) == code_of(target) for t in small.targets) \
                        and (self._untraceable(small.value, where) or self._restore(target, [small.value], fn)):
                    return True
        return False

    # ---- visitors ---------------------------------------------------------------------------

    @property
    def _assigned_calls(self) -> set[int]:
        """Ids of calls whose result an assignment binds (visited before the call itself)."""
        return self.__dict__.setdefault("_assigned_ids", set())

    def visit_Assign(self, node: cst.Assign, where: Where) -> None:
        if isinstance(node.value, cst.Call):
            self._assigned_calls.add(id(node.value))
        for t in node.targets:
            self._check_target(t.target, node, [node.value], where)

    def visit_AugAssign(self, node: cst.AugAssign, where: Where) -> None:
        self._check_target(node.target, node, [node.value], where)

    def visit_AnnAssign(self, node: cst.AnnAssign, where: Where) -> None:
        if node.value is not None:
            self._check_target(node.target, node, [node.value], where)

    def visit_Del(self, node: cst.Del, where: Where) -> None:
        self._check_target(node.target, node, [], where)

    def visit_Call(self, node: cst.Call, where: Where) -> None:
        self._check_call(node, where, bare=False)

    def visit_Expr(self, node: cst.Expr, where: Where) -> None:
        if isinstance(node.value, cst.Call):
            self._check_call(node.value, where, bare=True)

    def _check_call(self, node: cst.Call, where: Where, bare: bool) -> None:
        """`xs.append(v)`: a receiver known to be a Python container (bound to a literal or constructor)
        is checked wherever the call sits; any other receiver only for a container method used as a bare
        statement with a container's arity (`state = buffer.add(state, x)` is a functional API)."""
        fn = where.traced
        func = node.func
        if fn is None or not isinstance(func, cst.Attribute) or func.attr.value not in MUTATING_METHODS:
            return
        if _passes_through_at(func.value):
            return
        root = _root_name(func.value)
        if root is None or where.model.is_ref(root.value, where.scope):
            return
        method = func.attr.value
        if method in _RETURNS_NONE and id(node) in self._assigned_calls:
            return  # `updates, state = optimizer.update(grads, state)`: a used result is no `dict.update`
        values = [a.value for a in node.args]
        positional = [a for a in node.args if a.keyword is None and not a.star]
        lo, hi = _ARITY.get(method, (0, 0))
        container_call = method in _CONTAINER_ONLY and len(positional) == len(node.args) and lo <= len(positional) <= hi
        if not self._leaks(values, where):
            return
        if self._is_self(root.value, fn):
            if bare and container_call and isinstance(func.value, (cst.Attribute, cst.Subscript)) \
                    and "flax_jit" not in fn.transforms:
                self._flag(node, f"Mutating `{root.value}` state with `.{method}()`", where,
                           _subject(root.value, "self", func.value))
            return
        owner = self._container_owner(root.value, where)
        if owner is None:
            return
        known = func.value is root and self._known_container(root.value, owner, where)
        if bare == known or not (known or container_call):
            return  # known containers are checked from visit_Call, the others from visit_Expr
        if self._scratch(root.value, owner, values, where):
            return
        if values and all(self._untraceable(v, where) for v in values) and _once_only(node, where.scope.function_scope()):
            return  # `_LIBS.append(lib)` in an initializer a module flag lets run once: not once per trace
        if _balanced_in_try(node, method, func.value, fn):
            return  # `stack.append(ctx)` in a `try` whose `finally` pops it: a scope, balanced in the same trace
        kind = "module-level" if owner is where.model.root else "closed-over"
        self._flag(node, f"Mutating {kind} `{root.value}` with `.{method}()`", where,
                   _subject(root.value, "module" if owner is where.model.root else "closure", func.value))
