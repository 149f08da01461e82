"""stale-global: traced code reads a global (or closed-over) name that is rebound after the function is defined."""
from __future__ import annotations

import ast
from typing import Any, Callable, Iterator, Optional, TypeVar, Union

import libcst as cst

from ..semantic import ClassInfo, FunctionInfo, LoopInfo, ModuleModel, Scope
from ..semantic.scopes import called_only_by_parent, never_mentioned
from ..syntax import _is_const, _is_literal, _target_names, descendants, dotted, iter_children
from ..semantic.loops import clears_caches, distinct_constants, loop_invariant, loop_statements, names_in
from ..semantic.uses import ModuleUses, Uses, def_window
from ..semantic.traced import filled_args
from .base import Report, Rule, Where, tracing_phrase

T = TypeVar("T")


def _loads(node: cst.CSTNode) -> Iterator[cst.Name]:
    """Names read in a function body, in source order, not descending into nested scopes."""
    stack: list[cst.CSTNode] = [node]
    out: list[cst.Name] = []
    while stack:
        n = stack.pop()
        tp = type(n)  # (exact type tests: a failed `isinstance` on libcst's node classes is slow)
        if tp is cst.Name:
            out.append(n)  # type: ignore[arg-type]
            continue
        if tp in _SKIPPED:
            continue
        if tp is cst.Attribute or tp is cst.Arg:
            stack.append(n.value)  # type: ignore[attr-defined]
            continue
        if tp is cst.AssignTarget and type(n.target) is cst.Name:  # type: ignore[attr-defined]
            continue  # `X = …` under `global X` writes, it does not read
        stack.extend(reversed(list(iter_children(n))))
    return iter(out)


# Nodes `_loads` does not look into: other scopes, and statements that only name things.
_SKIPPED = frozenset({cst.FunctionDef, cst.ClassDef, cst.Lambda, cst.Global, cst.Nonlocal, cst.Import, cst.ImportFrom})


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
    flagged here. Only the first read of each name in a function is reported. In module code run top
    to bottom, a rebinding is reported only when some call of the function (followed through the
    module-level functions and classes that reach it) can run before it and another after it; a
    `global` setter that runs once and only then calls the function is not reported. A function no
    code of its module runs is called by other files only after the module has run to its end, so a
    later module-level rebinding outside a loop is not reported for it. A function handed on or stored
    elsewhere counts as used at any time after the code that hands it on has run. A setter that nothing in the project
    calls (no other file mentions it) rebinds nothing and is not reported; linted alone, a file's
    setter counts as callable at any time. A loop that rebinds a closed-over name to an
    expression of names it never changes (`env = make_env(name)` on each pass) is taken to rebuild
    the same value, and so is a rebinding that sets the same fields to the same constants as the
    binding before it (`cfg = cfg._replace(mode=FAST)` written again). A rebinding of a name to a copy of
    its own value (`x = jax.device_put(x, dev)`, `x = jnp.asarray(x)`, `a, b = tree_map(lambda v:
    jax.device_put(v, dev), (a, b))` with the names in the same order) keeps an equal value and is not
    reported; a copy given a dtype is a new value. A name the function reads only for
    its shape (`x.shape`, `x.ndim`, `len(x)`) is stale only if a pass can change that shape: a loop that
    rebinds it from fresh PRNG keys and otherwise unchanged arguments (`theta = sample(k1, n)`) is not reported.
    A use through a wrapper made anew on each pass after the rebinding (`jax.pmap(jax.vmap(train))`: the
    cache is keyed on the new object) traces afresh, and so does a closure a factory makes anew on each
    pass (`train = make_train(cfg)`, then `jax.jit(jax.vmap(train)).lower(keys).compile()`, whose compiled
    code runs where the name it is bound to is called), unless the factory may keep what it made (a
    decorator, a `global`, a store into a table outside it); so does every pass of a loop that calls
    `jax.clear_caches()`: neither is stale. A name bound to different wrappers in different branches
    (`train_fn = jax.pmap(jax.vmap(train))` in one, `train_fn = jax.pmap(train)` in the other) runs the
    function only at the calls each binding reaches, and a call with fewer arguments than the function
    requires traces nothing. A function that reads a train state only for its `apply_fn` or `tx` (static
    fields every update carries over) is not stale when the loop only updates that state from itself
    (`state, metrics = train_step(state, batch)`). A loop whose every call of the function passes an
    array it slices anew on each pass by a bound from its own variable (`prefix = ys[:, :int(n * frac)]`
    for each stage's `frac`) feeds new shapes, so each pass traces again and sees the name as it is then;
    so does a loop that passes its counter (`for i in range(n)`, or the items of a literal table of distinct
    constants) as a static argument of the function (`static_argnums`): every pass misses the cache.
    A def decorated with `jax.jit` inside a function that only calls it (`def train(...): @jax.jit def
    step(...)`) is jitted anew by every call of that function: module code rebinding a global between
    two calls is not stale for it.
    A name the function only hands to a parameter its
    callee (a def of the module) never reads changes nothing and is not reported. A setter that binds the global only to a module it imports (a lazy import)
    sets the same object every time. A loader that works once per process (its first statement returns
    early on a module flag only it sets, `if _ready: return`) and that module code runs at import, before
    anything can trace the reader, binds the value every trace sees; a function that clears the flag
    again makes it a setter like any other. A module name bound only to a placeholder (`None`, an empty
    array or container) and filled by a loader that takes no arguments, called only outside loops
    (`load_tables()` in the setup code), is initialised, not rebound: before the loader runs it holds
    nothing a trace could compute with, and each run of the loader loads the same. A module flag that
    switches jit off (a function of the module returns its argument unjitted when the flag is set, and
    `jax.jit` of it otherwise) is a debugging mode, not state: with it set nothing is cached. A method of
    a class whose only instances are made by module code, each bound once to a name used only to call its
    methods there (`gp = Regressor(...)`, `gp.fit(...)`, `jax.vmap(gp.predict)(xs)`), runs only at the
    calls of that method and of the methods that call it through `self`: a rebinding that comes before
    all of them (or after all of them) is not seen stale.

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
        self._body = node.body  # (its reads below are found when a candidate first asks: most have none)
        self._reads: dict[str, frozenset[str]] = {}
        candidates = self._candidates(fn, where)
        if not candidates:
            return
        seen: set[str] = set()
        local = fn.local_names
        for name in _loads(node.body):
            n = name.value
            if n in candidates and n not in seen and n not in local and model.trace_counter(fn, n):
                seen.add(n)  # a trace counter a test asserts on: its value never reaches the program
                continue
            if n in candidates and n not in seen and n not in local and model.restores(fn, n):
                seen.add(n)  # read only to be put back in a `finally`: its value is never computed with
                continue
            if n in candidates and n not in seen and n not in local and _once_guard(node, n):
                seen.add(n)  # `if _REGISTERED: return` in a procedure: it decides host-side work only
                continue
            if n in candidates and n not in seen and n not in local and n in model.jit_switches() \
                    and model.owner_of(n, where.scope) is model.root:
                seen.add(n)  # a switch that turns jit off: with it set nothing is cached, so no trace is stale
                continue
            if n in candidates and n not in seen and n not in local and _passed_only_unused(n, node, fn, model):
                seen.add(n)  # `render(rays, rng)` where `render` never reads `rng`: the value changes nothing
                continue
            if n in candidates and n not in seen and n not in local:
                seen.add(n)
                how = candidates[n]
                self.reports.append(self._report(name, n, how, fn))

    def _body_reads(self, kind: str) -> frozenset[str]:
        """The names the checked function's body reads only for their shape ("shape", `_shape_only_reads`)
        or only as fields carried through a loop ("carried", `_carried_field_reads`)."""
        if kind not in self._reads:
            find = _shape_only_reads if kind == "shape" else _carried_field_reads
            self._reads[kind] = find(self._body)
        return self._reads[kind]

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
                    at_def = fn  # the def that runs in `s` (a lax body's enclosing jitted function)
                    while isinstance(at_def.parent, FunctionInfo) and at_def.parent is not s:
                        at_def = at_def.parent
                    for name in set(s.bind_order) - shadowed - set(s.defs) - set(s.classes) - set(s.imports):
                        loop = _rebinding_loop_calling(name, s, at_def, model, name in self._body_reads("carried"))
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
        loop that ends before it), rebindings to the same value, rebindings inside a loop that also
        redefines the reader (a notebook-style script re-running a cell), and rebindings that no use of the
        reader can see both sides of (a script run top to bottom) are not stale."""
        memo = _rebinding_memo(model)
        if _once(memo["same"], (name, id(owner)), lambda: _same_value(name, owner, model)):
            return None
        at_def = fn
        while at_def.parent is not owner and isinstance(at_def.parent, FunctionInfo):
            at_def = at_def.parent  # the def that runs in the owner's scope
        orders = list(owner.bind_order.get(name, []))
        loops = owner.bind_loops.get(name, [])
        later = [(order, loop) for order, loop in zip(orders, loops)
                 if order > fn.order and not _shared_loop(loop, at_def.loop_at_def)
                 and not _copies_itself(name, order, owner, model)]
        if later and owner is model.root and _jitted_per_call(fn, at_def, model):
            later = []  # a module statement runs between two calls of `at_def`, each making its own jitted def
        uses = _once(memo["readers"], id(fn), lambda: self._reader_uses(fn, model)) \
            if later and owner is model.root else None
        if uses is not None and uses.sites:
            # In module code run top to bottom, a rebinding is seen stale only by a call after it of a
            # function traced before it (a loop around both runs each of them again).
            later = [(order, loop) for order, loop in later if _before_and_after(order, loop, uses)]
        elif uses is not None and not uses.sites:
            # Nothing in this module traces it: the module's code has run to its end before any other
            # file can call it, so only a loop that keeps rebinding the name could be seen stale (and
            # nothing can, when no other file of the project names the function either)
            later = [(order, loop) for order, loop in later if loop is not None]
            if later and self._never_called(at_def, model):
                later = []
        # (a name read only for its shape is stale only if a pass can give it another shape)
        shapes = name in self._body_reads("shape")
        carried = name in self._body_reads("carried")
        later = [(order, loop) for order, loop in later
                 if loop is None or not (_rebuilt_alike(name, loop, model, owner, shapes) or clears_caches(loop, model)
                                         or carried and _rebound_from_itself(name, loop))]
        later = [(order, loop) for order, loop in later if not _repeated_replace(name, order, owner, model)]
        if later and _once(memo["applied"], id(fn), lambda: _applied_where_made(fn, model)):
            later = []  # `jax.pmap(lambda k: ...)(keys)`: traced and run once, where it is made
        if any(loop is not None for _order, loop in later):
            return "a loop rebinds it"
        if later and len(orders) >= 2:
            return "it is rebound after the function is defined"
        if owner is model.root:
            for other in _once(memo, "setters", lambda: _global_setters(model)).get(name, ()):
                if all(_copies_itself(name, order, other, model) for order in other.bind_order[name]):
                    continue  # `X = jax.device_put(X, dev)`: the same value, wherever it lives
                last = max(other.bind_order[name])
                if fn.trace_sites and all(scope is other and order > last for scope, order in fn.trace_sites):
                    continue  # only traced by `other`, after it rebinds the name: the trace sees the new value
                if self._set_once_before_use(name, other, fn, model) or self._set_at_import(other, fn, model):
                    continue
                if self._never_called(other, model) or never_mentioned(other):
                    continue  # a setter nothing in the project calls rebinds nothing
                if self._fills_placeholder(name, other, model):
                    continue  # `_table = None` filled once by its loader: nothing rebinds it after
                if all(isinstance(v, cst.Name) and v.value in other.imports for v in other.assigned.get(name, [])):
                    continue  # a lazy import (`from pkg import api as _api; api = _api`): one module object
                if model.restores(other, name) and _only_called_traced(other, model):
                    continue  # `with use_cache(c):` inside the trace: each trace sets its own value
                if other is fn:
                    return f"`{fn.qualname}` itself rebinds it with `global`"
                return f"`{other.qualname}` rebinds it with `global`"
        return None

    def _module_uses(self, model: ModuleModel) -> ModuleUses:
        found = self.__dict__.get("_uses")
        if found is None or found.model is not model:
            found = self.__dict__["_uses"] = ModuleUses(model)
        return found

    def _reader_uses(self, fn: FunctionInfo, model: ModuleModel, stop: Optional[FunctionInfo] = None
                     ) -> Optional[Uses]:
        """The calls that can trace `fn`, through the module-level def or class holding it."""
        found = _entity(fn, model)
        if found is None:
            return None
        name, closure = found
        cls = model.root.classes.get(name)
        if cls is not None and fn.parent is cls and stop is None:
            # a method of a class the module makes instances of: where those instances' methods are called
            by_instance = self._module_uses(model).method_uses(cls, fn)
            if by_instance is not None:
                return by_instance
        uses = self._module_uses(model).uses(name, stop)
        if uses is not None and closure:
            # a closure made by a call may be kept and run later, unless each call makes it anew and the name
            # its result is bound to is only used in known ways (`train = make_train(cfg)`, `jax.jit(train)`)
            made = self._module_uses(model).made_uses(name) if stop is None else None
            if made is not None:
                uses = made
            else:
                uses.lasting = True
        return _until_rebound(uses, fn, model) if uses is not None else None

    def _never_called(self, setter: FunctionInfo, model: ModuleModel) -> bool:
        """A module-level function (a setter, a reader) that this module never mentions and no other file
        of the project does either (only known in a project run: alone, a file's function may be called
        from anywhere)."""
        if setter.parent is not model.root or model.root.defs.get(setter.name) is not setter:
            return False
        if model.alone:  # (so does the project's pass decide, when another file mentions it)
            model.ask("mentioned_elsewhere", setter.name, absent=True)
            return False
        if self._module_uses(model).refs.get(setter.name):
            return False
        return not model.ask("mentioned_elsewhere", setter.name, absent=True)

    def _fills_placeholder(self, name: str, other: FunctionInfo, model: ModuleModel) -> bool:
        """`_table = None` (or an empty array or container) at module level, filled by a loader that takes
        no arguments (`global _table; _table = load(TABLE_FILE)`), which the project calls only outside
        loops, in its setup code, and no other function binds the name. Before the loader runs the name
        holds nothing a trace could compute with, so a trace that works sees the loaded value, and each
        later run of the loader loads the same again. (A setter given the value to bind, `use(name)`, can
        bind another at any time.)"""
        module_values = model.root.assigned.get(name, [])
        if other.params or other.parent is not model.root \
                or model.root.defs.get(other.name) is not other \
                or not module_values or not all(_placeholder(v) for v in module_values) \
                or any(loop is not None for loop in other.bind_loops.get(name, [])):
            return False
        if any(f is not other and name in f.declared_global and name in f.bind_order for f in model.functions):
            return False
        if model.alone:  # (so does the project's pass decide, when another file calls the loader in a loop)
            model.ask("loop_calls_elsewhere", other.name, absent=[True])
            return False
        runs = self._module_uses(model).uses(other.name)
        if runs is None or runs.lasting:
            return False
        return not any(s.loop is not None for s in runs.sites) \
            and not any(model.ask("loop_calls_elsewhere", other.name, absent=[True]))

    def _set_once_before_use(self, name: str, other: FunctionInfo, fn: FunctionInfo, model: ModuleModel) -> bool:
        """Whether `other` (a setter with `global name`) runs at most once, from straight-line module code,
        and every use of the reader is a call inside it after its last rebinding: the first trace sees the
        value set, and nothing rebinds it after."""
        if other.parent is not model.root or model.root.defs.get(other.name) is not other \
                or any(loop is not None for loop in other.bind_loops.get(name, [])):
            return False
        runs = self._module_uses(model).uses(other.name)
        if runs is None or runs.lasting or len(runs.sites) != 1 or runs.sites[0].loop is not None:
            return False
        uses = self._reader_uses(fn, model, stop=other)
        last = max(other.bind_order[name])
        return uses is not None and bool(uses.sites) and all(s.scope is other and s.stamp > last for s in uses.sites)

    def _set_at_import(self, other: FunctionInfo, fn: FunctionInfo, model: ModuleModel) -> bool:
        """Whether `other` does its work once per process (it leaves early on a module flag only it sets,
        `if _ready: return`, before any other statement) and straight-line module code runs it at import,
        before any module-level call that can trace the reader: every trace sees what that first run bound."""
        if _once_flag(other, model) is None:
            return False
        runs = self._module_uses(model).uses(other.name)
        first = min((s.stamp for s in runs.sites if s.scope is model.root and s.loop is None), default=None) \
            if runs is not None else None
        if first is None:
            return False
        reader = self._reader_uses(fn, model)
        return reader is None or all(s.stamp > first for s in reader.sites if s.scope is model.root)

    def _report(self, node: cst.Name, name: str, how: str, fn: FunctionInfo) -> Report:
        return Report(
            node,
            f"`{name}` is read {tracing_phrase(fn)}, but {how}: the value seen when JAX traced it is baked into "
            "the compiled code; pass it as an argument instead.",
            fn,
            subject={"name": name, "how": how},
        )


# Empty arrays a module binds as a placeholder for a table a loader fills (`np.empty(0)`, `jnp.zeros((0,))`).
_EMPTY_ARRAYS = frozenset({"empty", "zeros", "array", "asarray"})


def _placeholder(value: Optional[cst.BaseExpression]) -> bool:
    """`None`, an empty literal (`[]`, `{}`, `()`, `""`) or an empty array (`np.empty(0)`, `np.array([])`):
    a binding that holds nothing to compute with until something fills it."""
    if value is None:
        return False  # (bound some other way: a loop target, an import)
    if _is_const(value, "None"):
        return True
    if isinstance(value, cst.SimpleString):
        return value.evaluated_value in ("", b"")
    if isinstance(value, (cst.List, cst.Tuple, cst.Dict, cst.Set)):
        return not value.elements
    if isinstance(value, cst.Call) and (dotted(value.func) or "").split(".")[-1] in _EMPTY_ARRAYS and len(value.args) == 1:
        arg = value.args[0].value
        return isinstance(arg, cst.Integer) and arg.value == "0" or isinstance(arg, (cst.List, cst.Tuple)) \
            and (not arg.elements or len(arg.elements) == 1 and isinstance(arg.elements[0].value, cst.Integer)
                 and arg.elements[0].value.value == "0")
    return False


def _once_guard(node: Union[cst.FunctionDef, cst.Lambda], name: str) -> bool:
    """Whether a function returning no value (nor writing into its arguments, as a kernel does) reads `name`
    only to leave early: `if _REGISTERED: return` (or `if not ready: return`), the guard of a one-time
    registration. Whatever the trace saw, it decides only host-side work; the traced computation does
    not depend on it."""
    if not isinstance(node, cst.FunctionDef):
        return False
    params = {p.name.value for p in [*node.params.posonly_params, *node.params.params, *node.params.kwonly_params]}
    guards: set[int] = set()
    for n in descendants(node.body):
        if isinstance(n, (cst.AssignTarget, cst.AugAssign)) and isinstance(n.target, cst.Subscript) \
                and isinstance(n.target.value, cst.Name) and n.target.value.value in params:
            return False  # `o_ref[...] = ...`: a kernel writes its outputs, which the flag may decide
        if isinstance(n, cst.Return) and n.value is not None and not (isinstance(n.value, cst.Name) and n.value.value == "None"):
            return False  # it returns a value, which the flag may decide
        if isinstance(n, (cst.Yield, cst.Await)):
            return False
        if isinstance(n, cst.If) and n.orelse is None and _bare_return(n.body):
            test = n.test.expression if isinstance(n.test, cst.UnaryOperation) and isinstance(n.test.operator, cst.Not) \
                else n.test
            if isinstance(test, cst.Name) and test.value == name:
                guards.add(id(test))
    reads = [n for n in _loads(node.body) if n.value == name]
    return bool(reads) and all(id(r) in guards for r in reads)


def _once_flag(fn: FunctionInfo, model: ModuleModel) -> Optional[str]:
    """The module flag a function runs once by: its first statement is `if FLAG: return ...`, it sets
    `global FLAG` to True, module code binds FLAG only to False or None (or to what the function returns),
    and no other function binds it."""
    node = fn.node
    if fn.parent is not model.root or not isinstance(node, cst.FunctionDef) \
            or not isinstance(node.body, cst.IndentedBlock):
        return None

    def preamble(stmt: cst.BaseStatement) -> bool:  # a docstring, `global FLAG, VALUE`
        small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
        return isinstance(small, (cst.Global, cst.Nonlocal)) or isinstance(small, cst.Expr) \
            and isinstance(small.value, (cst.SimpleString, cst.ConcatenatedString))

    first = next((stmt for stmt in node.body.body if not preamble(stmt)), None)
    if not isinstance(first, cst.If) or first.orelse is not None or not isinstance(first.test, cst.Name):
        return None
    inner = first.body.body if isinstance(first.body, cst.IndentedBlock) else ()
    if len(inner) != 1 or not isinstance(inner[0], cst.SimpleStatementLine) \
            or not isinstance(inner[0].body[0], cst.Return):
        return None
    flag = first.test.value
    sets = fn.assigned.get(flag, [])
    if flag not in fn.declared_global or not sets or any(not (isinstance(v, cst.Name) and v.value == "True") for v in sets):
        return None

    def unset_or_ran(v: Optional[cst.BaseExpression]) -> bool:  # `_ready = False`, `_ready = init()` (its own result)
        return isinstance(v, cst.Name) and v.value in ("False", "None") or isinstance(v, cst.Call) \
            and isinstance(v.func, cst.Name) and v.func.value == fn.name and not v.args

    if not all(unset_or_ran(v) for v in model.root.assigned.get(flag, [])):
        return None
    if any(other is not fn and flag in other.declared_global and flag in other.assigned for other in model.functions):
        return None
    return flag


def _passed_only_unused(name: str, node: Union[cst.FunctionDef, cst.Lambda], fn: FunctionInfo,
                        model: ModuleModel) -> bool:
    """Whether every read of `name` in the function is an argument of a call of a def of this module whose
    parameter it fills is never read there (`render_rays(rays, vars, rng)` with `rng` unused)."""
    reads = [r for r in _loads(node.body) if r.value == name]
    if not reads:
        return False
    passed = 0
    for call in descendants(node.body):  # (the body itself included: a lambda's may be the call)
        if not isinstance(call, cst.Call) or any(a.star for a in call.args):
            continue
        args = [a for a in call.args if isinstance(a.value, cst.Name) and a.value.value == name]
        if not args:
            continue
        ref = model.resolve_callable(call.func, fn)
        if ref is None or not isinstance(ref.fn.node, cst.FunctionDef) or ref.lead:
            return False
        positional = [p for p in ref.fn.params if p.index is not None and not p.star]
        for a in args:
            if a.keyword is not None:
                param = ref.fn.param(a.keyword.value)
            else:
                at = call.args.index(a) + ref.offset
                param = positional[at] if at < len(positional) else None
            if param is None or any(isinstance(r, cst.Name) and r.value == param.name
                                    for r in descendants(ref.fn.node.body)):
                return False
            passed += 1
    return passed == len(reads)


def _bare_return(body: cst.BaseSuite) -> bool:
    stmts = body.body if isinstance(body, cst.IndentedBlock) else [body]
    return len(stmts) == 1 and isinstance(stmts[0], (cst.SimpleStatementLine, cst.SimpleStatementSuite)) \
        and len(stmts[0].body) == 1 and isinstance(stmts[0].body[0], cst.Return) and stmts[0].body[0].value is None


def _rebinding_loop_calling(name: str, owner: FunctionInfo, fn: FunctionInfo, model: ModuleModel,
                            carried: bool = False) -> Optional[LoopInfo]:
    """A loop of `owner`, run after `fn` is defined there, that both rebinds `name` and calls `fn` (by
    the name it is defined under): each pass after the first reuses the trace of the first value. With
    `carried` (`fn` reads only fields every update carries over), a loop that only updates the old value
    (`state = train_step(state, batch)`) does not count."""
    if fn.parent is not owner:
        return None
    values = owner.assigned.get(name, [])
    for i, (order, loop) in enumerate(zip(owner.bind_order.get(name, []), owner.bind_loops.get(name, []))):
        if loop is None or order < fn.order or _shared_loop(loop, fn.loop_at_def) \
                or _copies_itself(name, order, owner, model):
            continue
        value = values[i] if i < len(values) else None
        if value is not None and (loop_invariant(value, loop, model, owner) or _rebuilt_alike(name, loop, model, owner)):
            continue  # `env = make_env(cfg)` on every pass, from names the loop never changes: the same value
        if carried and _rebound_from_itself(name, loop):
            continue
        calls = _calls_in_loop(fn.name, loop, owner, model)
        if calls and not all(_resliced_each_pass(call, loop) or _static_item_each_pass(call, loop, fn, model)
                             for call in calls):
            return loop
    return None


def _rebinding_memo(model: ModuleModel) -> dict[str, Any]:
    """What stale-global works out once per module rather than once per traced function and name it reads:
    "same" ((name, id of its scope) -> `_same_value`), "readers" (id of a traced function -> the calls that
    can trace it), "applied" (the same -> `_applied_where_made`), "setters" (`_global_setters`), "loop_calls"
    ((ids of a loop and its scope) -> the calls under it, by callee name) and "alike" ((the same, shapes) ->
    `_alike_in`)."""
    return model.__dict__.setdefault("_stale_global_memo", {"same": {}, "readers": {}, "applied": {},
                                                            "loop_calls": {}, "alike": {}})


def _once(table: dict, key: Any, make: Callable[[], T]) -> T:
    """`table[key]`, made by `make()` the first time."""
    if key not in table:
        table[key] = make()
    return table[key]


def _global_setters(model: ModuleModel) -> dict[str, list[FunctionInfo]]:
    """Module-level name -> the functions that rebind it with `global`, in the module's order."""
    setters: dict[str, list[FunctionInfo]] = {}
    for other in model.functions:
        for declared in other.declared_global:
            if declared in other.bind_order:
                setters.setdefault(declared, []).append(other)
    return setters


def _calls_in_loop(name: str, loop: LoopInfo, owner: Scope, model: ModuleModel) -> list[cst.Call]:
    """The calls of `name` (a bare name) in `owner`'s code under `loop`."""
    def by_callee() -> dict[str, list[cst.Call]]:
        found: dict[str, list[cst.Call]] = {}
        for call, scope, call_loop in model.all_calls:
            if scope is owner and isinstance(call.func, cst.Name) and loop.encloses(call_loop):
                found.setdefault(call.func.value, []).append(call)
        return found

    return _once(_rebinding_memo(model)["loop_calls"], (id(loop), id(owner)), by_callee).get(name, [])


def _static_item_each_pass(call: cst.Call, loop: LoopInfo, fn: FunctionInfo, model: ModuleModel) -> bool:
    """Whether `call` passes the loop's counter as a static argument of the cached function `fn`
    (`for step in range(n): update(step, ...)` with `static_argnums=(0,)`): the counter differs on every pass,
    so each pass misses the cache, traces again and reads the names as they are then."""
    node = loop.node
    if not (fn.cached and isinstance(node, cst.For) and isinstance(node.target, cst.Name)
            and (isinstance(node.iter, cst.Call) and model.resolve(node.iter.func, loop.scope) == "builtins.range"
                 or distinct_constants(node.iter))):
        return False  # (a counter, or the items of a table of distinct constants: one value per pass)
    counter = node.target.value
    if len(loop.bound.get(counter, [])) > 1:
        return False  # (rebound in the body too: no longer one value per pass)
    filled = filled_args(fn, 0, call.args) or {}
    return any(fn.param(name) is not None and name not in fn.traced_params
               and isinstance(a.value, cst.Name) and a.value.value == counter for name, a in filled.items())


def _resliced_each_pass(call: cst.Call, loop: LoopInfo) -> bool:
    """Whether `call` passes an argument the loop slices anew on each pass by a bound taken from its own
    variable (`for lr, length in stages: ys_ = ys[:, :int(n * length)]; step(ys_, ...)`): each pass feeds
    arrays of another shape, so the cached function is traced again and reads the names as they are then."""
    if not isinstance(loop.node, cst.For):
        return False
    varying = set(_target_names(loop.node.target))
    sliced: set[str] = set()
    for st in loop_statements(loop):
        if not (isinstance(st, cst.Assign) and len(st.targets) == 1 and isinstance(st.targets[0].target, cst.Name)):
            continue
        value, target = st.value, st.targets[0].target.value
        bounds = [part for el in value.slice if isinstance(el.slice, cst.Slice)
                  for part in (el.slice.lower, el.slice.upper, el.slice.step) if part is not None] \
            if isinstance(value, cst.Subscript) else []
        if any(names_in(b) & varying for b in bounds):
            sliced.add(target)
        elif names_in(value) & varying:
            varying.add(target)  # `n = int(size * frac)`: a bound computed from the loop variable
    return any(isinstance(a.value, cst.Name) and a.value.value in sliced for a in call.args)


def _rebuilt_alike(name: str, loop: LoopInfo, model: ModuleModel, owner: Scope, shapes: bool = False) -> bool:
    """`opt_init, opt_update = get_optimizer(name, sched)` on every pass of a loop, from arguments the loop
    never changes (or rebuilds alike itself, `sched = get_scheduler(lr)`, or reads again, `lr = args.lr`):
    each pass builds an equal value,
    so a trace of the first one is not stale. Only calls of functions given arguments count (`env.reset()`
    or `next(it)` give a new value each time). With `shapes` (the reader looks only at the name's shape),
    a fresh PRNG key on each pass (`key = PRNGKey(i)`, `k1, k2 = split(key)`) counts as alike: the values
    differ, their shapes do not, so `theta = sample(k1, n)` keeps its shape."""
    return name in _once(_rebinding_memo(model)["alike"], (id(loop), id(owner), shapes),
                         lambda: _alike_in(loop, model, owner, shapes))


def _alike_in(loop: LoopInfo, model: ModuleModel, owner: Scope, shapes: bool) -> set[str]:
    """The names `_rebuilt_alike` holds built alike on every pass of `loop` (once per loop, for all names)."""
    if not isinstance(loop.node, (cst.For, cst.While)):
        return set()
    values: dict[str, list[cst.BaseExpression]] = {}
    other: set[str] = set()  # names bound some other way (augmented, loop targets, `with`)
    stack: list[cst.CSTNode] = [loop.node.body]
    while stack:
        n = stack.pop()
        if isinstance(n, (cst.FunctionDef, cst.ClassDef, cst.BaseExpression)):
            continue
        if isinstance(n, cst.Assign):
            for target in n.targets:
                for t in _target_names(target.target):
                    values.setdefault(t, []).append(n.value)
        elif isinstance(n, (cst.AugAssign, cst.AnnAssign, cst.For)):
            other.update(_target_names(n.target))
        stack.extend(reversed(list(iter_children(n))))  # (popped in source order)

    def plain_call(v: cst.BaseExpression) -> bool:
        return isinstance(v, cst.Call) and bool(v.args) and isinstance(v.func, (cst.Name, cst.Attribute)) \
            and not (isinstance(v.func, cst.Attribute) and model.resolve(v.func, owner) is None)

    def plain_read(v: cst.BaseExpression) -> bool:  # `lr = args.lr`, `n = 8`: a setting read again
        return _is_literal(v) or dotted(v) is not None

    candidates = {n for n, vs in values.items() if n not in other and all(plain_call(v) or plain_read(v) for v in vs)}
    alike: set[str] = set()
    if shapes:
        alike = {n for n, vs in values.items() if n not in other and all(_fresh_key(v, loop, model, owner) for v in vs)}
    grew = True
    while grew:  # grown from calls of fixed values only, so `state = step(state, cfg)` never joins
        grew = False
        for n in sorted(candidates - alike):
            # (a later binding in the pass may build on the earlier one: `opt = adam(lr)` then
            # `opt = chain(opt, clip)` is the same value on every pass)
            first, *rest = values[n]
            if loop_invariant(first, loop, model, owner, frozenset(alike)) \
                    and all(loop_invariant(v, loop, model, owner, frozenset(alike | {n})) for v in rest):
                alike.add(n)
                grew = True
    return alike


def _fresh_key(value: cst.BaseExpression, loop: LoopInfo, model: ModuleModel, owner: Scope) -> bool:
    """A PRNG key (or keys) of the same shape on every pass: `PRNGKey(i)`, `fold_in(key, i)`, or
    `split(key)` / `split(key, n)` with a count the loop never changes."""
    if not isinstance(value, cst.Call):
        return False
    q = model.resolve(value.func, owner) or ""
    if q in ("jax.random.PRNGKey", "jax.random.key", "jax.random.fold_in"):
        return True
    return q == "jax.random.split" and all(loop_invariant(a.value, loop, model, owner) for a in value.args[1:])


def _shape_only_reads(body: cst.CSTNode) -> frozenset[str]:
    """The names a function body reads only for a shape fact (`x.shape`, `x.ndim`, `x.dtype`, `len(x)`):
    the trace depends on nothing else of their values."""
    return _read_only_through(body, frozenset({"shape", "ndim", "dtype", "size"}), frozenset({"len", "shape", "ndim"}))


# The fields of a Flax `TrainState` that are static pytree metadata: the model's `apply` and the optimizer.
# `apply_gradients`, `replace` of other fields and every JAX transform (a pmapped step returning the new
# state, `replicate`) carry them over unchanged.
_CARRIED_FIELDS = frozenset({"apply_fn", "tx"})


def _carried_field_reads(body: cst.CSTNode) -> frozenset[str]:
    """The names a function body reads only for a train state's static fields (`state.apply_fn(...)`)."""
    return _read_only_through(body, _CARRIED_FIELDS)


def _read_only_through(body: cst.CSTNode, attrs: frozenset[str], calls: frozenset[str] = frozenset()
                       ) -> frozenset[str]:
    """The names a function body reads only as `name.<one of attrs>` or as the one argument of a call
    named in `calls` (`len(name)`)."""
    facts: set[int] = set()
    for n in descendants(body):
        if isinstance(n, cst.Attribute) and isinstance(n.value, cst.Name) and n.attr.value in attrs:
            facts.add(id(n.value))
        elif calls and isinstance(n, cst.Call) and len(n.args) == 1 and isinstance(n.args[0].value, cst.Name) \
                and (dotted(n.func) or "").rpartition(".")[2] in calls:
            facts.add(id(n.args[0].value))
    reads: dict[str, bool] = {}
    for name in _loads(body):
        reads[name.value] = reads.get(name.value, True) and id(name) in facts
    return frozenset(n for n, only in reads.items() if only)


def _rebound_from_itself(name: str, loop: LoopInfo) -> bool:
    """Whether every binding of `name` in the loop body computes the new value from the old one
    (`state, metrics = p_train_step(state, batch)`, `state = state.apply_gradients(grads=g)`), never a
    fresh one (`state = create_train_state(...)`) nor one replacing a carried field (`replace(tx=...)`)."""
    if not isinstance(loop.node, (cst.For, cst.While)):
        return False
    found = False
    for n in descendants(loop.node.body):
        if isinstance(n, (cst.AugAssign, cst.AnnAssign, cst.For, cst.With)):
            targets = [n.target] if not isinstance(n, cst.With) else [i.asname.name for i in n.items if i.asname]
            if any(name in _target_names(t) for t in targets):
                return False
        if not isinstance(n, cst.Assign) or not any(name in _target_names(t.target) for t in n.targets):
            continue
        if not any(isinstance(r, cst.Name) and r.value == name for r in descendants(n.value)) or any(
                isinstance(a, cst.Arg) and a.keyword is not None and a.keyword.value in _CARRIED_FIELDS
                for a in descendants(n.value)):
            return False
        found = True
    return found


def _applied_where_made(fn: FunctionInfo, model: ModuleModel) -> bool:
    """A lambda handed straight to a transform whose result is called at once (`jax.jit(lambda x: ...)(x)`):
    nothing keeps it, so no later call can run its old trace."""
    if not isinstance(fn.node, cst.Lambda):
        return False
    for call, _scope, _loop in model.all_calls:
        if call.args and call.args[0].value is fn.node and call.args[0].keyword is None:
            return id(call) in model.applied_parent and model.applied_parent[id(call)].func is call
    return False



def _only_called_traced(fn: FunctionInfo, model: ModuleModel) -> bool:
    """Whether every call of `fn` in the module is in traced code (and it has one): what it sets for the
    extent of a call is set again by every trace that reads it."""
    scopes = model.call_scopes(fn)
    return bool(scopes) and all(model.traced_function(scope) is not None for scope in scopes)


def _jitted_per_call(fn: FunctionInfo, at_def: FunctionInfo, model: ModuleModel) -> bool:
    """Whether `fn`, or a def around it inside `at_def`, is decorated with `jax.jit` inside a function that
    only calls it there (`def train(...): @jax.jit def step(...): ...`): each call of that function jits
    a new def, whose trace, and the globals it read, last only as long as the call."""
    s: Optional[Scope] = fn
    while isinstance(s, FunctionInfo) and s is not at_def:
        if isinstance(s.parent, FunctionInfo) and called_only_by_parent(s) and any(
                (got := model.transform_of(d.decorator, s.parent)) is not None and got[0].kind in ("jit", "pjit")
                for d in s.decorators):
            return True
        s = s.parent
    return False


def _shared_loop(binding: Optional[LoopInfo], at_def: Optional[LoopInfo]) -> bool:
    """Whether one loop runs both the rebinding and the def: each pass then defines the reader anew."""
    while binding is not None:
        if binding.encloses(at_def):
            return True
        binding = binding.parent
    return False


def _module_level_holder(fn: FunctionInfo, model: ModuleModel) -> Scope:
    """The def or class in the module's own body that holds `fn` (`fn` itself at module level)."""
    s: Scope = fn
    while s.parent is not None and s.parent is not model.root:
        s = s.parent
    return s


def _entity(fn: FunctionInfo, model: ModuleModel) -> Optional[tuple[str, bool]]:
    """The module-level name whose uses can run `fn`: the def or class holding it (and whether `fn` is a
    closure made by calling that def), or the name a module-level lambda is bound to, alone or through
    one transform (`render = jax.jit(lambda x: ...)`)."""
    root = model.root
    s = _module_level_holder(fn, model)
    if isinstance(s, FunctionInfo) and (root.defs.get(s.name) is s or s.parent is root and def_window(s, root)):
        return s.name, s is not fn  # (a def shadowed by a later one runs until that one: `_until_rebound`)
    if isinstance(s, FunctionInfo) and s.parent is root and root.assigned.get(s.name) and all(
            isinstance(v, cst.Call) and v.args and isinstance(v.args[0].value, cst.Name)
            and v.args[0].value.value == s.name and model.resolve(v.func, root) in model.transforms
            for v in root.assigned[s.name]):
        return s.name, s is not fn  # `def step(...)` then `step = jax.jit(step)`
    if isinstance(s, ClassInfo) and root.classes.get(s.name) is s:
        return s.name, False
    if s is fn and isinstance(fn.node, cst.Lambda):
        for name, values in root.assigned.items():
            if any(isinstance(v, cst.Call) and any(a.value is fn.node for a in v.args)
                   and model.resolve(v.func, root) in model.transforms for v in values):
                return name, False
    return None


def _until_rebound(uses: Uses, fn: FunctionInfo, model: ModuleModel) -> Uses:
    """The uses of a module-level name holding `fn` (`apply = jax.jit(lambda x: ...)`) that run it: those
    before the name is bound again in source order (a second `apply = jax.jit(...)` holds another
    function). A binding in a loop is made again on each pass, so it holds `fn` on every pass."""
    found = _entity(fn, model)
    if found is None:
        return uses
    name = found[0]
    if not isinstance(fn.node, cst.Lambda):
        # a def (or the def holding it) defined more than once runs at the calls between its def and the next
        top = _module_level_holder(fn, model)
        window = def_window(top, model.root) if isinstance(top, FunctionInfo) else None
        return uses if window is None else uses.between(window)
    orders = model.root.bind_order.get(name, [])
    values = model.root.assigned.get(name, [])
    if len(values) != len(orders):
        return uses  # bound also by a loop, a `with` or an import: which binding holds what is not known

    def holds_fn(v: Optional[cst.BaseExpression]) -> bool:  # the lambda, or it wrapped again (`f = jit(f)`)
        return v is fn.node or (isinstance(v, cst.Call) and any(
            a.value is fn.node or (isinstance(a.value, cst.Name) and a.value.value == name) for a in v.args))

    other = [o for o, v in zip(orders, values) if o >= fn.order and not holds_fn(v)]
    if not other:
        return uses
    return Uses([site for site in uses.sites if site.stamp < min(other)], uses.lasting)


def _before_and_after(order: int, loop: Optional[LoopInfo], uses: Uses) -> bool:
    """Whether some use can run before the rebinding at `order` (and so trace the old value) and some use
    after it (and so run that trace). Only uses through a caching transform make or reuse a trace: a plain
    call of the function (`loss_fn(x)` before `jax.jit(jax.grad(loss_fn))` is made) runs it eagerly and
    reads the variable as it is then (when no use is known to go through a cache, all of them count)."""
    sites = [s for s in uses.sites if s.cached] or uses.sites

    def fresh(s) -> bool:
        # a use through a wrapper made anew on each pass of the loop that rebinds the name
        # (`train_fn = jax.pmap(jax.vmap(train))`): no trace of an earlier pass survives into this one
        return s.made is not None and loop is not None and s.made_loop is not None and loop.encloses(s.made_loop)

    before = any(s.stamp < order or (not fresh(s) and _shared_loop(loop, s.loop)) for s in sites)
    after = uses.lasting or any(s.stamp > order or (not fresh(s) and _shared_loop(loop, s.loop)) for s in sites)
    if before and after and all(fresh(s) for s in sites):
        # within one pass: stale only if a call before the rebinding made the trace a later call reuses
        return any(s.stamp < order for s in sites) and any(s.stamp > order for s in sites)
    return before and after


def _same_value(name: str, owner: Scope, model: ModuleModel) -> bool:
    """Whether every binding of `name` (in its scope and under `global` elsewhere) is the same expression
    of literals and of module-level names that never change (`keep = grid * 3 // 4` written twice)."""
    values = list(owner.assigned.get(name, []))
    if owner is model.root:
        for other in model.functions:
            if name in other.declared_global:
                values.extend(other.assigned.get(name, []))
    if len(values) < 2 or any(v is None for v in values):
        return False
    codes = {cst.Module([]).code_for_node(v) for v in values if v is not None}
    first = min(owner.bind_order.get(name, [0]))
    return len(codes) == 1 and _constant(values[0], owner, model, first, 0)


def _repeated_replace(name: str, order: int, owner: Scope, model: ModuleModel) -> bool:
    """Whether the binding of `name` at `order` repeats the one in force before it, and that one only set
    fields to constants: `cfg = cfg._replace(mode=FAST)` written again (`_replace`, `.replace`,
    `dataclasses.replace`) gives an equal value, so nothing changes."""
    orders, values = owner.bind_order.get(name, []), owner.assigned.get(name, [])
    if len(orders) != len(values) or order not in orders:
        return False
    i = orders.index(order)
    if i == 0 or values[i] is None or values[i - 1] is None:
        return False
    now, before = values[i], values[i - 1]
    if not isinstance(now, cst.Call) or _shape_of(now) != _shape_of(before):
        return False
    func = now.func
    if isinstance(func, cst.Attribute) and func.attr.value in ("_replace", "replace") \
            and isinstance(func.value, cst.Name) and func.value.value == name:
        args = list(now.args)
    elif model.resolve(func, owner) == "dataclasses.replace" and now.args and isinstance(now.args[0].value, cst.Name) \
            and now.args[0].value.value == name and now.args[0].keyword is None:
        args = list(now.args[1:])
    else:
        return False
    return bool(args) and all(a.keyword is not None and _constant(a.value, owner, model, orders[i - 1], 0)
                              for a in args)


def _shape_of(e: cst.BaseExpression) -> str:
    """An expression's code without its layout (line breaks, trailing commas, spacing)."""
    code = cst.Module([]).code_for_node(e).strip()
    try:
        return ast.dump(ast.parse(code, mode="eval"))
    except (SyntaxError, ValueError, RecursionError):
        return code


def _constant(e: Optional[cst.BaseExpression], owner: Scope, model: ModuleModel, before: int, depth: int) -> bool:
    """Whether an expression has one value wherever it is evaluated after the stamp `before`: literals,
    arithmetic on them, and names bound in `owner` only to one such value (or once, before `before`)."""
    if e is None or depth > 4:
        return False
    if isinstance(e, (cst.Integer, cst.Float, cst.SimpleString)):
        return True
    if isinstance(e, cst.BinaryOperation):
        return _constant(e.left, owner, model, before, depth + 1) and _constant(e.right, owner, model, before, depth + 1)
    if isinstance(e, cst.UnaryOperation):
        return _constant(e.expression, owner, model, before, depth + 1)
    if not isinstance(e, cst.Name):
        return False
    if e.value in ("True", "False", "None"):
        return True
    if owner is model.root and any(e.value in f.declared_global for f in model.functions):
        return False
    if e.value in owner.imports and e.value not in owner.assigned and e.value not in owner.ambiguous_imports:
        return True  # an imported object, never rebound here: one object
    values = owner.assigned.get(e.value, [])
    if not values or any(v is None for v in values):
        return False
    if len(values) == 1:
        return max(owner.bind_order.get(e.value, [before])) < before \
            and _constant(values[0], owner, model, before, depth + 1)
    return len({cst.Module([]).code_for_node(v) for v in values if v is not None}) == 1 \
        and _constant(values[0], owner, model, before, depth + 1)


# Calls that give back their first argument's value unchanged, as a copy or the same object: a transfer to
# a device or sharding, a wait for it to be computed, a conversion of an array to an array.
_COPIES = frozenset({"jax.device_put", "jax.block_until_ready", "jax.numpy.asarray", "jax.numpy.array"})
# What a copying call may be given besides its value: where to put it, and whether to copy.
_COPY_KEYWORDS = frozenset({"device", "src", "donate", "may_alias", "copy"})


def _copies_itself(name: str, order: int, owner: Scope, model: ModuleModel) -> bool:
    """Whether the binding of `name` at `order` binds it to a copy of its own value: `x = jax.device_put(x, dev)`,
    `x = jnp.asarray(x)`, `x.block_until_ready()`, or, unpacked, `a, b = tree_map(lambda v: jax.device_put(v, d),
    (a, b))`, `a, b = jax.device_put((a, b), d)`, `a, b = jnp.asarray(a), jnp.asarray(b)` (each name from its
    own place). The name holds equal values before and after, so a trace of the old one is not stale."""
    found = owner.bound_from.get((name, order))
    if found is None:
        return False
    target, value = found
    if isinstance(target, cst.Name):
        return _copy_of(value, name, model, owner)
    if not isinstance(target, (cst.Tuple, cst.List)) \
            or not all(isinstance(el, cst.Element) and isinstance(el.value, cst.Name) for el in target.elements):
        return False
    names = [el.value.value for el in target.elements]

    def same_names(tree: cst.BaseExpression) -> bool:  # `(a, b)` for the target `a, b`
        return isinstance(tree, (cst.Tuple, cst.List)) and len(tree.elements) == len(names) and all(
            isinstance(el, cst.Element) and isinstance(el.value, cst.Name) and el.value.value == n
            for el, n in zip(tree.elements, names))

    if isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == len(names):
        return all(isinstance(el, cst.Element) and _copy_of(el.value, n, model, owner)
                   for el, n in zip(value.elements, names))
    if not isinstance(value, cst.Call) or not value.args or value.args[0].keyword is not None or value.args[0].star:
        return False
    if same_names(value.args[0].value):
        return _copy_of(value, None, model, owner)  # `jax.device_put((a, b), d)`: each leaf copied
    q = model.resolve(value.func, owner)
    if q not in ("jax.tree_util.tree_map", "jax.tree_map", "jax.tree.map") or len(value.args) != 2 \
            or any(a.keyword is not None or a.star for a in value.args) or not same_names(value.args[1].value):
        return False
    f = value.args[0].value
    if isinstance(f, cst.Lambda):
        ps = f.params
        if len(ps.params) != 1 or ps.posonly_params or ps.kwonly_params or isinstance(ps.star_arg, cst.Param) \
                or ps.star_kwarg is not None:
            return False
        return _copy_of(f.body, ps.params[0].name.value, model, owner)
    return model.resolve(f, owner) in _COPIES  # `tree_map(jax.device_put, (a, b))`


def _copy_of(value: cst.BaseExpression, name: Optional[str], model: ModuleModel, owner: Scope) -> bool:
    """Whether `value` is a copying call of the name `name` (`jax.device_put(x, dev)`, `jnp.asarray(x)`,
    `x.block_until_ready()`), given nothing that changes it (a dtype); with `name` None, of any first argument."""
    if not isinstance(value, cst.Call):
        return False
    if isinstance(value.func, cst.Attribute) and value.func.attr.value == "block_until_ready" and not value.args:
        subject = value.func.value
        return name is not None and isinstance(subject, cst.Name) and subject.value == name
    q = model.resolve(value.func, owner)
    if q not in _COPIES or not value.args:
        return False
    first, rest = value.args[0], value.args[1:]
    if first.keyword is not None or first.star:
        return False
    if name is not None and not (isinstance(first.value, cst.Name) and first.value.value == name):
        return False
    if q == "jax.device_put":
        # (its second argument is the device or sharding; nothing it is given changes the value)
        return all(not a.star and (a.keyword is None and i == 0 or a.keyword is not None
                                   and a.keyword.value in _COPY_KEYWORDS) for i, a in enumerate(rest))
    return all(not a.star and a.keyword is not None and a.keyword.value in _COPY_KEYWORDS for a in rest)
