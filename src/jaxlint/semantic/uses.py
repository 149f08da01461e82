"""Where module-level code can run a module-level function or class: the use sites stale-global orders rebindings against."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import libcst as cst

from ..jaxapi import LAX_BODIES, MUTATING_METHODS
from ..syntax import descendants, iter_children, only_called
from .loops import names_in
from .model import ModuleModel
from .scopes import ClassInfo, FunctionInfo, LoopInfo, Scope, called_only_by_parent


@dataclass
class Site:
    """A call that can run (and so trace) the function: its scope, source-order stamp and loop."""

    scope: Scope
    stamp: int
    loop: Optional[LoopInfo]
    # through a caching transform (`step = jax.jit(f)`, `@jax.jit`): the call can make or reuse a trace,
    # where a plain call of the function runs it eagerly
    cached: bool = False
    # through a wrapper made anew each time its expression runs (`train_fn = jax.vmap(train)`, then
    # `jax.pmap(train_fn)`): the source-order stamp and loop of the latest such wrapper. A cache keyed on
    # the new object holds no trace older than the wrapper.
    made: Optional[int] = None
    made_loop: Optional[LoopInfo] = None
    # the module-level call itself, where the site is one (its arguments and its place in the code)
    call: Optional[cst.Call] = None


@dataclass
class Uses:
    sites: list[Site] = field(default_factory=list)
    # an object made at a site (an instance, a closure) may run the function at any later time
    lasting: bool = False

    def merge(self, other: "Uses") -> None:
        self.sites.extend(other.sites)
        self.lasting = self.lasting or other.lasting

    def between(self, window: tuple[int, float]) -> "Uses":
        """The uses at sites strictly inside a source-order window (see `def_window`)."""
        return Uses([site for site in self.sites if window[0] < site.stamp < window[1]], self.lasting)


@dataclass
class _Ref:
    scope: Scope
    kind: str  # "call": `f(...)`; "arg": `g(f)`; "other": anything else
    call: Optional[cst.Call]
    alias: Optional[str]  # the module-level name `f` (or the call holding it) is assigned to


class ModuleUses:
    """Every reference to a module-level name, found in one walk; `uses` follows them to module-level calls."""

    def __init__(self, model: ModuleModel) -> None:
        self.model = model
        self.refs: dict[str, list[_Ref]] = {}
        self.loop_of: dict[int, Optional[LoopInfo]] = {id(c): loop for c, _s, loop in model.all_calls}
        self.classes: dict[int, ClassInfo] = {}
        stack: list[Scope] = [model.root, *model.functions]
        while stack:
            s = stack.pop()
            for c in s.classes.values():
                if id(c.node) not in self.classes:
                    self.classes[id(c.node)] = c
                    stack.append(c)
        self.names = set(model.root.defs) | set(model.root.classes) | set(model.root.assigned)
        for stmt in model.module.body:
            self._visit(stmt, model.root)

    # ---- the walk -----------------------------------------------------------------------------

    def _record(self, name: cst.Name, scope: Scope, kind: str, call: Optional[cst.Call], alias: Optional[str]) -> None:
        if name.value in self.names and self.model.owner_of(name.value, scope) is self.model.root:
            self.refs.setdefault(name.value, []).append(_Ref(scope, kind, call, alias))

    def _visit_call(self, call: cst.Call, scope: Scope, alias: Optional[str]) -> None:
        if isinstance(call.func, cst.Name):
            self._record(call.func, scope, "call", call, alias)
        elif (lowered := _lowering_call(call.func)) is not None:
            # `compiled = step.lower(x).compile()`: traced here, and the compiled trace runs where `compiled` is called
            self._record(lowered.func.value, scope, "aot", lowered, alias)  # type: ignore[attr-defined]
            for a in lowered.args:
                self._visit(a.value, scope)
        else:
            self._visit(call.func, scope)
        wraps = alias is not None and self._transform(call, scope)
        for a in call.args:
            if isinstance(a.value, cst.Name) and not a.star:
                self._record(a.value, scope, "arg", call, alias)
            elif wraps and isinstance(a.value, cst.Call) and self._transform(a.value, scope):
                self._visit_call(a.value, scope, alias)  # `step = jax.jit(jax.grad(f))`: f runs where step does
            else:
                self._visit(a.value, scope)

    def _transform(self, call: cst.Call, scope: Scope) -> bool:
        return (self.model.resolve(call.func, scope) or "") in self.model.transforms

    def _visit(self, node: cst.CSTNode, scope: Scope) -> None:
        tp = type(node)  # (exact type tests: a failed `isinstance` on libcst's node classes is slow)
        if tp is cst.Name:
            self._record(node, scope, "other", None, None)
        elif tp is cst.Call:
            self._visit_call(node, scope, None)
        elif tp is cst.Assign:
            alias = None
            if scope is self.model.root and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
                alias = node.targets[0].target.value
            if isinstance(node.value, cst.Call):
                self._visit_call(node.value, scope, alias)
            elif isinstance(node.value, cst.Name):
                self._record(node.value, scope, "other", None, alias)
            else:
                self._visit(node.value, scope)
            for t in node.targets:
                if not isinstance(t.target, cst.Name):
                    self._visit(t.target, scope)
        elif tp is cst.FunctionDef or tp is cst.Lambda:
            fn = self.model.fn_of_node.get(id(node))
            for d in getattr(node, "decorators", ()):
                self._visit(d, scope)
            params = node.params
            for p in [*params.posonly_params, *params.params, *params.kwonly_params]:
                if p.default is not None:
                    self._visit(p.default, scope)
            if fn is not None:
                self._visit(node.body, fn)
        elif tp is cst.ClassDef:
            for part in [*node.decorators, *node.bases, *node.keywords]:
                self._visit(part, scope)
            cls = self.classes.get(id(node))
            if cls is not None:
                self._visit(node.body, cls)
        elif tp is cst.Attribute:
            self._visit(node.value, scope)
        elif tp is cst.Import or tp is cst.ImportFrom or tp is cst.Global or tp is cst.Nonlocal:
            return
        elif tp is cst.For or tp is cst.CompFor:
            for child in iter_children(node):
                if child is not node.target:  # a store, not a use
                    self._visit(child, scope)
        elif tp is cst.AugAssign or tp is cst.AnnAssign:
            if node.value is not None:
                self._visit(node.value, scope)
            if not isinstance(node.target, cst.Name):
                self._visit(node.target, scope)
        elif tp is cst.NamedExpr:
            self._visit(node.value, scope)
        elif tp is cst.Expr and type(node.value) is cst.Call and all(type(a.value) is cst.Name for a in node.value.args) \
                and self.model.resolve(node.value.func, scope) in _INERT:
            return  # `jax.block_until_ready(compiled)` on its own: it waits, and neither keeps nor runs what it is given
        elif tp is cst.AsName or tp is cst.Del:
            return
        elif tp is cst.Arg:
            self._visit(node.value, scope)
        else:
            for child in iter_children(node):
                self._visit(child, scope)

    # ---- questions ----------------------------------------------------------------------------

    @property
    def _flows(self) -> "_Flows":
        found = self.__dict__.get("_flows_cache")
        if found is None:
            found = self.__dict__["_flows_cache"] = _Flows(self.model)
        return found

    def _cannot_bind(self, r: _Ref, site: Site, entity: Optional[Scope]) -> bool:
        """Whether a site calls the alias a transform binds (`train_fn = jax.pmap(train)`, then
        `train_fn(rng, state)`) with fewer positional arguments than the function requires: Python raises
        before the body runs, so nothing is traced there (and no trace is cached)."""
        if not isinstance(entity, FunctionInfo) or site.call is None or r.call is None or r.alias is None:
            return False
        call = site.call
        if not (isinstance(call.func, cst.Name) and call.func.value == r.alias) \
                or any(a.star or a.keyword is not None for a in call.args):
            return False
        if not self._flows.direct(r.alias, r.call, site):
            return False  # (reached through a rewrapping, `f = jax.jit(f)`: its arity is not followed)
        t = self.model.transforms.get(self.model.resolve(r.call.func, r.scope) or "")
        if t is None or t.kind not in _SAME_ARITY:
            return False
        params = entity.params
        if any(p.star for p in params):
            return False
        required = sum(1 for p in params if p.index is not None and not p.has_default)
        return len(call.args) < required

    def _immediate(self, call: cst.Call, scope: Scope) -> bool:
        """Whether a call runs the callable it is given before it returns (`lax.cond(p, f, g, x)`,
        `jax.jit(f)(x)`) rather than keeping it for later."""
        qual = self.model.resolve(call.func, scope)
        return id(call) in self.model.applied_calls or qual in LAX_BODIES or qual in _RUNS_AT_ONCE

    def _fresh_wrapper(self, call: cst.Call, scope: Scope) -> bool:
        """Whether a call wraps the callable it is given in a new function object each time it runs, one
        that no cache has seen: a transform that does not cache (`jax.vmap(f)`, `jax.grad(f)`)."""
        t = self.model.transforms.get(self.model.resolve(call.func, scope) or "")
        return t is not None and not t.cached

    def _caching(self, call: cst.Call, scope: Scope) -> bool:
        """Whether a call applies a transform that caches its traces (`jax.jit(f)`, `jax.pmap(f)`)."""
        t = self.model.transforms.get(self.model.resolve(call.func, scope) or "")
        return t is not None and t.cached

    def _cached_alias(self, call: cst.Call, scope: Scope, alias: str) -> bool:
        """Whether the name a transform call is bound to holds a cached function: the call caches, or a
        caching transform wraps it (`g = jax.jit(jax.grad(f))`)."""
        return self._caching(call, scope) or any(
            isinstance(v, cst.Call) and self._caching(v, self.model.root) and any(a.value is call for a in v.args)
            for v in self.model.root.assigned.get(alias, []))

    def _holding_call(self, fn: FunctionInfo) -> Optional[cst.Call]:
        """The module-level call a module-level lambda is handed to (`timeit(lambda: step(x), number=1)`)."""
        for call, scope, _loop in self.model.all_calls:
            if scope is self.model.root and any(a.value is fn.node for a in call.args):
                return call
        return None

    def _called_where_made(self, call: cst.Call, scope: Scope) -> bool:
        """Whether a transform's result is bound to a local that its function only calls
        (`step = jax.pmap(train_step)` then `step(batch)`): the function runs while that function runs."""
        if not isinstance(scope, FunctionInfo) or self.model.resolve(call.func, scope) not in self.model.transforms:
            return False
        for local, values in scope.assigned.items():
            if any(v is call for v in values):
                return len(values) == 1 and only_called(scope.node, local)
        return False

    def uses(self, name: str, stop: Optional[FunctionInfo] = None, busy: frozenset[str] = frozenset()
             ) -> Optional[Uses]:
        """The module-level calls (or, with `stop`, the calls in that function) that can run the module-level
        function or class `name`, following the module-level functions that use it; None when some
        reference may run it at a time this cannot tell (stored, called from a nested function). A call it
        is handed to is a site from which it may run at any later time."""
        root = self.model.root
        if name in busy:
            return Uses(lasting=name in root.classes)
        entity = root.defs.get(name) or root.classes.get(name)
        found = self._uses_of(name, stop, busy | {name}, entity)
        if found is not None and isinstance(entity, FunctionInfo) and any(
                (t := self.model.transform_of(d.decorator, root)) is not None and t[0].cached for d in entity.decorators):
            for site in found.sites:
                site.cached = True  # `@jax.jit def step`: every call of it goes through the cache
                site.made = site.made_loop = None  # (its own cache, whatever wraps it: `jax.grad(step)`)
        return found

    def made_uses(self, name: str) -> Optional[Uses]:
        """The calls that can run a function nested in the module-level def `name`, which each call of `name`
        makes anew (a closure), when every use of `name` is module code binding its result to a name
        (`train = make_train(cfg)`) whose uses are known: each such call, and the uses of the name bound
        there, marked as made by that call (a cache keyed on the new closure holds no trace older than it).
        None when a result may be kept elsewhere, or when `name` may hand back an old one (a decorator such as
        `lru_cache`, a `global`, a store into state outside it: a memo)."""
        root = self.model.root
        factory = root.defs.get(name)
        if not isinstance(factory, FunctionInfo) or factory.decorators or _may_memoize(factory, self.model):
            return None
        out = Uses()
        for r in self.refs.get(name, []):
            if _inside(r.scope, factory) or r.kind != "call" or r.scope is not root or r.alias is None \
                    or r.call is None:
                return None
            sub = self.uses(r.alias, None, frozenset({name}))
            if sub is None or sub.lasting:
                return None
            stamp, loop = self.model.call_order.get(id(r.call), 0), self.loop_of.get(id(r.call))
            sub.sites = [site for site in sub.sites if self._flows.reaches(r.alias, r.call, site)]
            for site in sub.sites:
                if site.made is None or stamp > site.made:
                    site.made, site.made_loop = stamp, loop
            out.merge(sub)
            out.sites.append(Site(root, stamp, loop, False, stamp, loop, r.call))
        return out

    def method_uses(self, cls: ClassInfo, method: FunctionInfo) -> Optional[Uses]:
        """The module-level calls that can run `method` of the module-level class `cls`, when every use of
        the class is module code making one instance bound once to a name (`gp = Regressor(...)`) and every
        use of that name reads a method of it there (`gp.fit(...)`, `jax.vmap(gp.predict)(xs)`): the calls
        of `method` and of the methods that call it through `self`. None when the instances may be used
        elsewhere (stored, handed on whole, read by a function): they may then run it at any later time."""
        model, root = self.model, self.model.root
        names: set[str] = set()
        for r in self.refs.get(cls.name, []):
            if _inside(r.scope, cls):
                continue  # (the class naming itself inside its body)
            if r.kind != "call" or r.scope is not root or r.alias is None or not model.bound_once(r.alias):
                return None
            names.add(r.alias)
        if not names:
            return None
        runs = {method.name}  # the methods that can run `method`: it, and those calling it through `self`
        methods = [f for f in cls.defs.values() if f.is_method and f.params]
        grew = True
        while grew:
            grew = False
            for f in methods:
                if f.name in runs:
                    continue
                me = f.params[0].name
                if any(isinstance(n, cst.Attribute) and n.attr.value in runs and isinstance(n.value, cst.Name)
                       and n.value.value == me for n in descendants(f.node)):
                    runs.add(f.name)
                    grew = True
        cached = any((t := model.transform_of(d.decorator, cls)) is not None and t[0].cached for d in method.decorators)
        out = Uses()
        seen = 0
        for call, scope, loop in model.all_calls:
            if scope is not root:
                continue
            for part, handed in [(call.func, False), *((a.value, True) for a in call.args)]:
                if isinstance(part, cst.Attribute) and isinstance(part.value, cst.Name) and part.value.value in names:
                    seen += 1
                    if part.attr.value in runs:
                        stamp = model.call_order.get(id(call), 0)
                        out.sites.append(Site(root, stamp, loop, cached or handed))
                        out.lasting = out.lasting or (handed and not self._immediate(call, root))
        mentions = sum(1 for n in descendants(model.module) if isinstance(n, cst.Name) and n.value in names)
        return out if seen == mentions - len(names) else None

    def _uses_of(self, name: str, stop: Optional[FunctionInfo], busy: frozenset[str], entity: Optional[Scope]
                 ) -> Optional[Uses]:
        root = self.model.root
        out = Uses(lasting=name in root.classes)
        for r in self.refs.get(name, []):
            if entity is not None and _inside(r.scope, entity):
                # it runs only while the function or class is already in use (recursion, `isinstance(o, C)`)
                out.lasting = out.lasting or r.kind != "call"
                continue
            if r.kind == "aot":
                # `step.lower(x)` traces where it runs; what it compiles runs where the name bound to
                # `step.lower(x).compile()` is called (bound some other way, it may run at any later time)
                if r.alias is not None and r.scope is root:
                    sub = self.uses(r.alias, stop, busy)
                    if sub is None:
                        return None
                    for site in sub.sites:
                        site.cached = True  # (each runs the trace made at `lower`)
                    out.merge(sub)
                else:
                    out.lasting = True
                if r.scope is root or r.scope is stop:
                    stamp, loop = self.model.call_order.get(id(r.call), 0), self.loop_of.get(id(r.call))
                    out.sites.append(Site(r.scope, stamp, loop, True, call=r.call if r.scope is root else None))
                    continue
                return None
            aliased = r.alias is not None and r.scope is root and r.kind != "call"  # (a call's result is not f)
            sub = self.uses(r.alias, stop, busy) if aliased else None
            if sub is not None and r.call is not None:
                # (a name bound more than once, `train_fn = jax.pmap(jax.vmap(train))` in one arm and
                # `train_fn = jax.pmap(train)` in the other: each binding runs `f` only at the calls it reaches)
                sub.sites = [site for site in sub.sites if self._flows.reaches(r.alias, r.call, site)
                             and not self._cannot_bind(r, site, entity)]
            if sub is not None:
                if r.call is not None and self._cached_alias(r.call, r.scope, r.alias):
                    for site in sub.sites:
                        site.cached = True
                if r.call is not None and self._fresh_wrapper(r.call, r.scope):
                    stamp = self.model.call_order.get(id(r.call), 0)
                    for site in sub.sites:
                        if site.made is None or stamp > site.made:
                            site.made, site.made_loop = stamp, self.loop_of.get(id(r.call))
                out.merge(sub)
                if r.kind == "other" or r.call is None or not self._immediate(r.call, r.scope):
                    continue  # `g = f`, `step = jax.jit(f)`: f runs where g or step does
            elif aliased and (r.kind != "arg" or r.call is None or self._transform(r.call, root)):
                return None  # (`solver = Minimizer(loss)`, whose uses are not known, hands `loss` on: below)
            elif r.kind == "other" or r.call is None:
                return None
            # handed to a call that may keep it (`minimize(fun=loss)`, `MCMC(NUTS(model))`): it can run,
            # through whatever cache the callee keeps, from that call on, but not before it
            handed = r.kind == "arg" and not self._immediate(r.call, r.scope) and not self._called_where_made(r.call, r.scope)
            s = r.scope
            if s is root or s is stop:
                stamp, loop = self.model.call_order.get(id(r.call), 0), self.loop_of.get(id(r.call))
                fresh = self._fresh_wrapper(r.call, r.scope)  # `jax.pmap(jax.vmap(train))`: a new object each time
                out.sites.append(Site(s, stamp, loop, handed, stamp if fresh else None, loop if fresh else None,
                                      r.call if s is root else None))
                out.lasting = out.lasting or handed
                continue
            if isinstance(s, FunctionInfo) and s.parent is root and (window := def_window(s, root)) is not None:
                # a def the module defines more than once runs at the calls of its name between its def
                # and the next (notebook cells exported as a script)
                sub = self.uses(s.name, stop, busy)
                if sub is not None:
                    sub = sub.between(window)
            elif isinstance(s, FunctionInfo) and s.parent is root and root.defs.get(s.name) is s:
                sub = self.uses(s.name, stop, busy)
            elif isinstance(s, FunctionInfo) and isinstance(s.parent, ClassInfo) and s.parent.parent is root \
                    and root.classes.get(s.parent.name) is s.parent:
                sub = self.uses(s.parent.name, stop, busy)
            elif isinstance(s, FunctionInfo) and s.parent is root and isinstance(s.node, cst.Lambda) \
                    and (holder := self._holding_call(s)) is not None and self._immediate(holder, root):
                # `timeit(lambda: step(x), number=1)`: the lambda runs where it is handed on
                out.sites.append(Site(root, self.model.call_order.get(id(holder), 0), self.loop_of.get(id(holder))))
                continue
            elif isinstance(s, FunctionInfo) and s.parent is root and isinstance(s.node, cst.Lambda) \
                    and (bound := [n for n, vals in root.assigned.items() if any(v is s.node for v in vals)]) \
                    and len(bound) == 1:
                sub = self.uses(bound[0], stop, busy)  # `model = lambda p, x: forward(p, x)`: where `model` runs
            elif (top := _module_level_def(s, root)) is not None:
                # a nested function may be handed on and run later, but only once its module-level
                # def has run: that def's uses, kept open (with `stop`, runs only after them)
                sub = self.uses(top.name, stop, busy)
                if sub is not None and not _only_called_within(s, top):
                    sub.lasting = True
            else:
                return None  # a nested function may be handed on and run later
            if sub is None:
                return None
            if handed:
                sub.lasting = True
                for site in sub.sites:
                    site.cached = True
            out.merge(sub)
        return out


def _only_called_within(fn: Scope, top: FunctionInfo) -> bool:
    """Whether a function nested in `top` runs only while `top` runs: it and each def around it below
    `top` is only called by the function that defines it (never handed on, stored or returned)."""
    s = fn
    while s is not top:
        if not called_only_by_parent(s):
            return False
        s = s.parent  # type: ignore[assignment]
    return True


def def_window(fn: FunctionInfo, root: Scope) -> Optional[tuple[int, float]]:
    """For a module-level def of a name the module defines more than once, each time in straight-line
    code (no loop, no `if` around it): the source-order stamps of its def and of the next def of the name
    (infinity for the last). The module-level calls of the name between the two run this def."""
    history = root.def_history.get(fn.name, [])
    if len(history) < 2 or any(f.loop_at_def is not None or f.arms_at_def for _s, f in history):
        return None
    stamps = [stamp for stamp, f in history]
    for i, (stamp, f) in enumerate(history):
        if f is fn:
            return stamp, stamps[i + 1] if i + 1 < len(stamps) else float("inf")
    return None


def _module_level_def(scope: Scope, root: Scope) -> Optional[FunctionInfo]:
    """The module-level def (not a method) a nested function sits in, if any."""
    while isinstance(scope, FunctionInfo) and scope.parent is not root:
        scope = scope.parent
    if isinstance(scope, FunctionInfo) and root.defs.get(scope.name) is scope:
        return scope
    return None


# Transforms whose result takes the arguments of the function they wrap.
_SAME_ARITY = frozenset({"jit", "pjit", "pmap", "vmap", "grad", "value_and_grad", "jacfwd", "jacrev", "hessian",
                         "checkpoint", "filter_jit", "shard_map"})


class _Flows:
    """Which module-level binding of a name reaches which module-level call: a binding reaches a later
    call unless another binding of the name runs in between on every path to it (in the same block or one
    around it), and a binding later in a loop reaches the calls of the next pass. A rewrapping
    (`f = jax.jit(f)`) passes on what reaches it."""

    def __init__(self, model: ModuleModel) -> None:
        self.model = model
        self.paths: dict[int, tuple[int, ...]] = {}
        for stmt in model.module.body:
            self._walk(stmt, ())

    def _walk(self, node: cst.CSTNode, path: tuple[int, ...]) -> None:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return  # module-level code only
        if isinstance(node, cst.Call):
            self.paths[id(node)] = path
        if isinstance(node, cst.BaseSuite):
            path = path + (id(node),)
        for child in iter_children(node):
            self._walk(child, path)

    def _bindings(self, name: str) -> Optional[list[tuple[cst.Call, int, tuple[int, ...], Optional[LoopInfo]]]]:
        root = self.model.root
        out = []
        for value, stamp, loop in zip(root.assigned.get(name, []), root.bind_order.get(name, []),
                                      root.bind_loops.get(name, [])):
            if not isinstance(value, cst.Call) or id(value) not in self.paths:
                return None  # bound some other way: not followed
            out.append((value, stamp, self.paths[id(value)], loop))
        return out

    def _reaching(self, name: str, stamp: int, path: tuple[int, ...], loop: Optional[LoopInfo],
                  bindings: list) -> list[int]:
        def dominates(k: int) -> bool:
            kpath = bindings[k][2]
            return path[:len(kpath)] == kpath

        out = []
        for i, (_value, bstamp, _bpath, bloop) in enumerate(bindings):
            if bstamp < stamp:
                if not any(bstamp < bindings[k][1] < stamp and dominates(k) for k in range(len(bindings))):
                    out.append(i)
                continue
            common = loop
            while common is not None and not common.encloses(bloop):
                common = common.parent
            if common is not None and not any(bindings[k][1] < stamp and dominates(k) and common.encloses(bindings[k][3])
                                              for k in range(len(bindings))):
                out.append(i)  # bound later in a loop around both: seen on the next pass
        return out

    def _index(self, bindings: list, call: cst.Call) -> Optional[int]:
        for i, (value, *_rest) in enumerate(bindings):
            if value is call or any(a.value is call for a in value.args):
                return i
        return None

    def _position(self, site: Site) -> Optional[tuple[int, tuple[int, ...], Optional[LoopInfo]]]:
        if site.call is None or site.scope is not self.model.root or id(site.call) not in self.paths:
            return None
        return site.stamp, self.paths[id(site.call)], site.loop

    def direct(self, name: str, call: cst.Call, site: Site) -> bool:
        """Whether the binding made by `call` reaches the site as it is, not through a rewrapping."""
        bindings = self._bindings(name)
        pos = self._position(site)
        if bindings is None or pos is None:
            return False
        b = self._index(bindings, call)
        return b is not None and b in self._reaching(name, *pos, bindings)

    def reaches(self, name: str, call: cst.Call, site: Site) -> bool:
        """Whether the binding made by `call` (module-level `name = ...call...`) can be what `name` holds
        at the site; True wherever that cannot be told."""
        bindings = self._bindings(name)
        pos = self._position(site)
        if bindings is None or len(bindings) < 2 or pos is None:
            return True
        b = self._index(bindings, call)
        if b is None:
            return True
        seen: set[int] = set()
        todo = [pos]
        while todo:
            reaching = self._reaching(name, *todo.pop(), bindings)
            if b in reaching:
                return True
            for k in reaching:
                value, kstamp, kpath, kloop = bindings[k]
                if k not in seen and any(isinstance(a.value, cst.Name) and a.value.value == name for a in value.args):
                    seen.add(k)  # `name = jax.jit(name)`: what reached the rewrapping reaches on
                    todo.append((self.model.call_order.get(id(value), kstamp), kpath, kloop))
        return False


def _may_memoize(factory: FunctionInfo, model: ModuleModel) -> bool:
    """Whether a function can keep a function it makes beyond its own call, and so hand back an old one
    later: it (or one nested in it) declares a name `global` or `nonlocal`, or stores a function it makes
    (a nested def or lambda, or a local bound to an expression of one) into an item or attribute of a name
    not its own, or hands it to a mutating method of one (`CACHE[key] = step`, `made.append(step)`)."""
    scopes = [f for f in model.functions if _inside(f, factory)]
    if any(f.declared_global or f.declared_nonlocal for f in scopes):
        return True
    own: set[str] = set()
    for f in scopes:
        own |= f.local_names - {p.name for p in f.params}  # (a parameter holds an object from outside)
    made = {f.name for f in scopes if f is not factory}
    grew = True
    while grew:  # (`step = jax.jit(train)`, `fns = (init, step)`: locals holding a made function)
        grew = False
        for f in scopes:
            for local, values in f.assigned.items():
                if local not in made and any(v is not None and names_in(v) & made for v in values):
                    made.add(local)
                    grew = True

    def base(e: cst.BaseExpression) -> Optional[str]:
        while isinstance(e, (cst.Attribute, cst.Subscript)):
            e = e.value
        return e.value if isinstance(e, cst.Name) else None

    def keeps(value: Optional[cst.CSTNode]) -> bool:
        return value is not None and (bool(names_in(value) & made) or any(
            isinstance(n, cst.Lambda) for n in descendants(value)))

    for n in descendants(factory.node):
        if isinstance(n, cst.Assign):
            if any(isinstance(t.target, (cst.Attribute, cst.Subscript)) and base(t.target) not in own
                   for t in n.targets) and keeps(n.value):
                return True
        elif isinstance(n, (cst.AugAssign, cst.AnnAssign)):
            if isinstance(n.target, (cst.Attribute, cst.Subscript)) and base(n.target) not in own and keeps(n.value):
                return True
        elif isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value in MUTATING_METHODS:
            if base(n.func.value) not in own and any(keeps(a.value) for a in n.args):
                return True
    return False


# Calls that neither keep nor run what they are given (they wait for it, and hand it back).
_INERT = frozenset({"jax.block_until_ready"})


def _lowering_call(func: cst.BaseExpression) -> Optional[cst.Call]:
    """The `step.lower(x)` call in `step.lower(x).compile`."""
    if isinstance(func, cst.Attribute) and func.attr.value == "compile" and isinstance(func.value, cst.Call) \
            and isinstance(func.value.func, cst.Attribute) and func.value.func.attr.value == "lower" \
            and isinstance(func.value.func.value, cst.Name):
        return func.value
    return None


# Functions that call the callable they are given before they return (timing helpers).
_RUNS_AT_ONCE = frozenset({"timeit.timeit", "timeit.repeat"})


def _inside(scope: Optional[Scope], entity: Scope) -> bool:
    while scope is not None:
        if scope is entity:
            return True
        scope = scope.parent
    return False
