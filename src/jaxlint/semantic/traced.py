"""Which functions JAX traces and which of their parameters are static, found to a fixed point."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

import libcst as cst

from ..findings import TraceTarget
from ..jaxapi import (
    ARRAY_ANNOTATIONS,
    ARRAY_METHODS,
    CALLBACKS,
    LAX_BODIES,
    NON_ARRAY_ANNOTATIONS,
    PARTIALS,
    SHAPE_ARGS,
    SHAPE_METHODS,
    TREE_MAPS,
    Transform,
)
from ..syntax import (
    _arg, _int_leaf, _is_const, _is_literal, _literal_values, _returns, _str_leaf, args_at, children, descendants,
    DECLARED_PYTHON, dotted, literal_ident, literal_truth, name_counts, only_called, scalar_annotation,
)
from .scopes import UNSTAGED, CallableRef, ClassInfo, FunctionInfo, Param, Scope, called_only_by_parent, dead_branch
from .values import DICT_METHODS, Values

if TYPE_CHECKING:
    from .model import ModuleModel


class _Tracer:
    def __init__(self, model: ModuleModel) -> None:
        self.m = model
        self.changed = False

    def run(self, external: list["ExternalCall"]) -> None:
        m = self.m
        self.seed_external(external, m.path)
        # Seeds: decorators, transform calls and control-flow bodies anywhere in the module.
        decorated = []
        for fn in m.functions:
            outer = fn.parent or m.root
            # `n: Const[int]`: the argument is a pytree node without leaves, its value in the treedef
            fn.declared_static |= {p.name for p in fn.params if p.annotation_expr is not None
                                   and m.static_wrapper_annotation(p.annotation_expr, outer)}
            if fn.shadowed:
                continue  # defined again further down the class body: the first one is never bound
            for deco in fn.decorators:
                got = m.transform_of(deco.decorator, outer)
                if got is not None:
                    decorated.append((fn, got))
                    if got[0].statics == "custom":
                        fn.declared_static |= static_param_names(fn, got[0], got[1], 0, module=m) or set()
        for fn, (t, opts) in decorated:
            if t.statics == "jit" and not any(u.statics == "custom" for f, (u, _o) in decorated if f is fn):
                # A jitted function's static arguments are Python values inside it, whoever wraps or
                # calls it: a tracer passed there fails at the call, before the body runs. So is an argument
                # annotated with a plain class of the module (settings, an enum): jit refuses one at the call.
                statics = static_param_names(fn, t, opts, 0, module=m)
                fn.declared_static |= statics or set()
                fn.declared_static |= {p.name for p in fn.params if p.annotation_expr is not None and not p.star
                                       and self._plain_class(p.annotation_expr, outer)}
                fn.jit_entry = fn.jit_entry or (t.kind in ("jit", "pjit") and statics is not None)
            elif t.statics == "filter":
                # equinox passes non-array values through: a parameter declared a Python value
                # (`dense: Literal[False, True]`, `n: int`) stays one whoever calls the function
                fn.declared_static |= {p.name for p in fn.params if p.annotation_expr is not None and not p.star
                                       and (scalar_annotation(p.annotation_expr, DECLARED_PYTHON)
                                            or self._plain_class(p.annotation_expr, outer))}
                if len(fn.decorators) == 1:
                    # ... and so does a parameter every call of the module hands a Python literal
                    # (`check(x, "model")`), where those calls are all there are
                    fn.declared_static |= _literal_params(fn, m)
                fn.python_kwargs = True
        outermost: set[int] = set()
        deferred: list[tuple[FunctionInfo, Transform, dict[str, cst.BaseExpression], bool]] = []
        for fn, (t, opts) in decorated:
            if t.statics == "custom" and len(fn.decorators) == 1:
                # `@jax.custom_vjp` alone traces nothing: called plainly, or under `grad` (whose rule
                # gets the primal values), the body sees concrete arrays; traced callers make it traced.
                continue
            inner = id(fn) in outermost
            outermost.add(id(fn))
            if t.statics == "filter" and len(fn.decorators) == 1 and called_only_by_parent(fn):
                # equinox's filter transforms trace the arrays they are given and pass every other value
                # through: inside a traced function, its calls say which parameters are traced
                deferred.append((fn, t, opts, inner))
                continue
            fn.trace_sites.add((fn.parent or m.root, -1))  # traced wherever it is called
            self.seed(fn, t, opts, offset=0, bound=frozenset(), abstract=t.abstract, site_fn=None, inner=inner,
                      container_site=_ARGS_ELSEWHERE if _only_loop_body(fn, m) or _calls_all_known(fn, m) else None)
        self.seed_calls()
        self.settle()
        late = [d for d in deferred if not d[0].traced]  # its function is not traced: arrays from anywhere
        for fn, t, opts, inner in late:
            fn.trace_sites.add((fn.parent or m.root, -1))
            self.seed(fn, t, opts, offset=0, bound=frozenset(), abstract=t.abstract, site_fn=None, inner=inner)
        if late:
            self.settle()
        m.new_summary_round()  # the summaries asked from here on are final
        solve_flags(m.functions, m.constant_flags())
        for fn in m.functions:
            # (again where call sites fix a flag: bindings in an arm no traced call takes do not count)
            if fn.traced and (not fn.traced_names or fn.flags or fn.idents or fn.passed or fn.left_none):
                Values(m, fn).solve()
        solve_containers(m.functions, m)
        self.complete_roots()

    def settle(self) -> None:
        """Spread tracers through calls, summaries and derivative rules until nothing moves."""
        m = self.m
        rules = m.derivative_rules()
        rounds = 0
        while True:
            self.changed = False
            # what the call sites seen so far say of flags and identities: calls in an arm no trace
            # takes are not followed (a new site only makes fewer arms dead, and asks for another round)
            flags_moved = solve_flags(m.functions, m.constant_flags())
            m.new_summary_round()  # helper summaries are asked again with this round's tracers
            before = sum(len(f.traced_names) + sum(map(len, f.event_traced)) for f in m.functions)
            for fn in [f for f in m.functions if f.traced]:
                Values(m, fn).solve()
                self.follow_calls(fn)
            for call, scope in rules:
                self.seed_derivative_rules(call, scope)
            rounds += 1
            # Summaries (a helper's return value) feed back into callers: stop only when nothing moved.
            moved = sum(len(f.traced_names) + sum(map(len, f.event_traced)) for f in m.functions) != before
            if not (self.changed or moved or flags_moved) or rounds > 50:
                break

    def complete_roots(self) -> None:
        """A body seeded before its enclosing function was known to be traced has no root yet."""
        by_name = {f.qualname: f for f in self.m.functions}
        for fn in self.m.functions:
            t = fn.target
            if t is None or t.root is not None or not t.via:
                continue
            outer = by_name.get(t.via[0])
            if outer is not None and outer.target is not None and outer.target.transform != "helper" \
                    and outer is not fn:
                fn.target = dataclasses.replace(t, root=outer.target.root or outer.target)

    def seed_calls(self) -> None:
        m = self.m
        # `jax.jit(jax.grad(f))`: the inner transform is seeded through the outer one, which decides what
        # reaches f (seeding it alone would trace what the outer keeps static)
        wrapped: set[int] = set()
        for call, scope, _loop in m.all_calls:
            t = m.transforms.get(m.resolve(call.func, scope) or "")
            if t is None or not t.cached or not call.args or call.args[0].keyword is not None:
                continue
            first = call.args[0].value
            if isinstance(first, cst.Call):
                wrapped.add(id(first))
            elif isinstance(first, cst.Name) and isinstance(scope, FunctionInfo):
                # `g = jax.grad(f, argnums=(0, 1)); g = jax.jit(g, static_argnames="n")` (the name rebound to
                # its wrapper), or a name only read to be wrapped: the inner transform reaches f only through
                # the outer one
                reads = [n for n in descendants(scope.node) if isinstance(n, cst.Name) and n.value == first.value]
                values = scope.assigned.get(first.value, [])
                if len(reads) == len(values) + 1 or (len(values) == 2 and values[1] is call):
                    wrapped.update(id(v) for v in values if isinstance(v, cst.Call) and v is not call
                                   and (m.resolve(v.func, scope) or "") in m.transforms)
        for call, scope, _loop in m.all_calls:
            if id(call) in wrapped or "never:" in m.call_guards.get(id(call), frozenset()):
                continue  # (a call under a test known false never runs)
            if id(call) in m.nojit_calls and _eager_without_jit(m, call, scope):
                continue  # `with jax.disable_jit(): lax.scan(body, ...)`: a Python loop over concrete values
            if self._unused_alias(call, scope):
                continue  # `solve_jit = jax.jit(solve)` nobody calls, while the program calls `solve`
            site_fn = scope.function_scope()
            if site_fn is not None and m.only_in_dead_code(site_fn):
                continue  # a def nothing runs: its `lax.cond` bodies are never traced
            site_abstract = bool(site_fn is not None and site_fn.traced and site_fn.abstract)
            site_cached = bool(site_fn is not None and site_fn.traced and site_fn.cached)
            self.seed_call(call, scope, site_fn, site_abstract, site_cached)

    def _unused_alias(self, call: cst.Call, scope: Scope) -> bool:
        """A module-level `solve_jit = jax.jit(solve)` that nothing in the project names again, in a module
        that exports no `__all__`, while `solve` itself is called (here or by another file): the program runs
        `solve` eagerly, and the jitted alias never traces it. (Only known in a project run: linted alone,
        a file's alias may be called from anywhere.)"""
        m = self.m
        if scope is not m.root or "__all__" in m.root.assigned or not call.args \
                or call.args[0].keyword is not None or not isinstance(call.args[0].value, cst.Name):
            return False
        aliases = [n for n, values in m.root.assigned.items() if any(v is call for v in values)]
        if len(aliases) != 1 or (m.resolve(call.func, scope) or "") not in m.transforms:
            return False
        alias, wrapped = aliases[0], call.args[0].value.value
        if m.alone:  # (a pass without the project: so does the project's decide, when another file names it)
            m.ask("named_elsewhere", alias, absent=True)
            return False
        reads, calls = name_counts(m.module)
        if reads.get(alias, 0) != 1 or m.ask("named_elsewhere", alias, absent=True):
            return False  # (its one mention is the binding)
        return calls.get(wrapped, 0) > 0 or m.ask("called_by_importer", wrapped, absent=False)

    def seed_call(self, call: cst.Call, scope: Scope, site_fn: Optional[FunctionInfo], site_abstract: bool,
                  site_cached: bool = False, outer: Optional[Transform] = None,
                  outer_opts: Optional[dict[str, cst.BaseExpression]] = None) -> None:
        """`outer`/`outer_opts`: the cached transform applied around this one and its options
        (`jax.jit(jax.grad(f), static_argnames="n")`), whose static parameters stay static inside."""
        m = self.m
        # jax.jit(f, ...), and partial(jax.jit, ...)(f) / jax.jit(static_argnames=...)(f)
        got = None
        opts: dict[str, cst.BaseExpression] = {}
        qual = m.resolve(call.func, scope)
        if qual is not None and qual in m.transforms:
            got = m.transforms[qual]
            opts = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
            positional = [a.value for a in call.args if a.keyword is None and not a.star]
            if got.statics == "vmap" and len(positional) > 1 and "in_axes" not in opts:
                opts["in_axes"] = positional[1]
            if got.statics == "shard_map" and len(positional) > 2 and "in_specs" not in opts:
                opts["in_specs"] = positional[2]
        elif isinstance(call.func, cst.Call):
            if self.seed_application(call, scope, site_fn, site_abstract, site_cached):
                return
            tr = m.transform_of(call.func, scope)
            if tr is not None:
                got, opts = tr
        if got is not None:
            opts = self._bound_options(opts, scope)
            if got.statics == "grad" and id(call) in m.applied_calls and _argnums(opts) is not None \
                    and call.args and call.args[0].keyword is None and not call.args[0].star:
                return  # `jax.grad(f)(x, flag)`: seeded from the application, which knows the arguments
            if got.statics == "grad" and m.named_grad_call(call) is not None:
                return  # `grad_fn = jax.value_and_grad(f)` then `grad_fn(p, x, cfg.flag)`: each call is followed
            fexpr = None
            for a in call.args:
                if a.keyword is None and not a.star:
                    fexpr = a.value
                    break
                if a.keyword is not None and a.keyword.value in ("fun", "f", "fn"):
                    fexpr = a.value
                    break
            if fexpr is not None:
                ref = m.resolve_callable(fexpr, scope)
                if ref is not None:
                    ref = _def_in_force(ref, fexpr, scope, m.call_order.get(id(call)))
                if ref is None and isinstance(fexpr, cst.Call):
                    # jax.jit(jax.grad(f)): f runs under both transforms, abstract and cached as the outer.
                    wrapping = outer is None and got.cached
                    self.seed_call(fexpr, scope, site_fn, got.abstract or site_abstract, got.cached or site_cached,
                                   outer=got if wrapping else outer, outer_opts=opts if wrapping else outer_opts)
                    return
                if ref is not None and m.stored_unused(call, scope):
                    return  # `self._fast = jax.jit(self._slow)` that nothing calls traces nothing
                if ref is not None:
                    ref.fn.trace_sites.add((scope, m.call_order.get(id(call), 0)))
                    application = m.applied_parent.get(id(call))
                    if application is not None and not ref.lead and not any(a.star for a in application.args):
                        ref.fn.container_sites[id(application)] = (
                            ref.offset, ref.bound_names, tuple(_arg_infos(application, scope.function_scope(), None)))
                    self.seed(ref.fn, got, opts, ref.offset, ref.bound_names, got.abstract or site_abstract,
                              site_fn=None, cached=site_cached, outer=outer, lead=ref.lead,
                              application=application, outer_opts=outer_opts,
                              bound_values=_bound_idents(fexpr, scope.function_scope()),
                              left_out=self._left_out_by_alias(call, scope, ref) if application is None else None,
                              container_site=_ARGS_ELSEWHERE if application is None and got.statics == "jit"
                              and _calls_all_known(ref.fn, m) else None)
                    if site_fn is not None and site_fn.traced:
                        # `jax.vmap(partial(apply, params))(xs)` in traced code: what the partial binds
                        # is a value of the enclosing trace, a tracer where it is one there
                        bound, trees = _partial_bound_traced(m, fexpr, ref.fn, site_fn)
                        if bound:
                            # (which parameters hold containers is the transform's seed's to say)
                            self.mark(ref.fn, bound, site_fn.abstract, site_fn.cached, "helper", site_fn, trees,
                                      container_site=_ARGS_ELSEWHERE)
            return
        if qual is None:
            return
        body = LAX_BODIES.get(qual)
        if body is not None:
            kind, slots = body
            for pos, kw, is_seq in slots:
                arg = _arg(call, pos, kw)
                if arg is None:
                    continue
                exprs = [el.value for el in arg.elements] if is_seq and isinstance(arg, (cst.List, cst.Tuple)) else [arg]
                for e in exprs:
                    ref = m.resolve_callable(e, scope)
                    if ref is not None:
                        ref.fn.trace_sites.add((scope, m.call_order.get(id(call), 0)))
                        t = Transform(kind, abstract=True, cached=True)
                        carried = _carry_args(kind, call, m, scope)
                        if carried is not None:  # `fori_loop(0, n, body, [a, b])`: the carry stays a list
                            ref.fn.container_sites[id(call)] = (ref.offset, ref.bound_names, carried)
                        self.seed(ref.fn, t, {}, ref.offset, ref.bound_names, True, site_fn=site_fn,
                                  cached=site_cached, passed=_body_arity(kind, call),
                                  container_site=id(call) if carried is not None else None)
            return
        if qual in TREE_MAPS and site_fn is not None and site_fn.traced and call.args:
            ref = m.resolve_callable(call.args[0].value, scope)
            if ref is not None:
                # Leaf i of the callback comes from tree i: traced only if that tree is.
                values = Values(m, site_fn)
                trees = [a.value for a in call.args[1:] if a.keyword is None and not a.star]
                params = [p for p in ref.fn.params[ref.offset:] if p.name not in ref.bound_names]
                leaves = {p.name for p, tree in zip(params, trees) if values.traced(tree)}
                ref.fn.helper_sites.add((scope, m.call_order.get(id(call), 0)))
                self.mark(ref.fn, leaves, site_fn.abstract, site_fn.cached, "helper", site_fn, call=call)

    def seed_derivative_rules(self, call: cst.Call, scope: Scope) -> None:
        """`f.defvjp(fwd, bwd)` / `f.defjvp(jvp)`: the rules run wherever `f` is differentiated, as
        abstractly as `f` itself; nondiff arguments come first and stay Python values."""
        m = self.m
        assert isinstance(call.func, cst.Attribute)
        primal = m.resolve_callable(call.func.value, scope)
        if primal is None or not primal.fn.traced:
            return
        f = primal.fn
        nondiff = [p.name for p in f.params if p.name in f.declared_static]
        residuals: Optional[tuple[bool, ...]] = None
        for i, a in enumerate(call.args[:2]):
            ref = m.resolve_callable(a.value, scope)
            if ref is None or ref.fn is f:
                continue
            rule = ref.fn
            if call.func.attr.value == "defvjp" and i == 0:  # fwd: the primal's own signature
                rule.declared_static |= {p.name for p in rule.params if p.name in f.declared_static}
                traced = {p.name for p in rule.params if p.name in f.traced_params}
                residuals = _residuals(m, rule) if rule.traced else None
            else:  # bwd(*nondiff, res, g) / jvp(*nondiff, primals, tangents)
                positional = [p for p in rule.params if p.index is not None]
                rule.declared_static |= {p.name for p in positional[:len(nondiff)]}
                passed = positional[len(nondiff):len(nondiff) + 2]  # (res, g) / (primals, tangents)
                traced = {p.name for p in passed} | {p.name for p in rule.params if p.star == "*"}
                if call.func.attr.value == "defvjp" and passed and not passed[0].star:
                    # JAX hands the residuals to bwd as fwd built them: a Python value among them
                    # (`h0 is not None`) stays one
                    if residuals is None:
                        rule.param_elements.pop(passed[0].name, None)
                    else:
                        rule.param_elements[passed[0].name] = residuals
            if rule.target is None:
                rule.target = TraceTarget(rule.qualname, 0, "helper", (), (), (f.qualname,), _root(f))
            rule.helper_sites.add((m.root, -1))  # runs wherever `f` is differentiated
            self.mark(rule, traced, f.abstract, f.cached, f.target.transform if f.target else "helper", None,
                      staged_site=f.target is None)

    def seed_application(self, call: cst.Call, scope: Scope, site_fn: Optional[FunctionInfo], site_abstract: bool,
                         site_cached: bool) -> bool:
        """`jax.grad(f, argnums=...)(args)`: the `argnums` parameters are traced; the others receive the
        call's arguments as they are (a literal flag stays a Python value)."""
        m = self.m
        inner = call.func
        assert isinstance(inner, cst.Call)
        qual = m.resolve(inner.func, scope)
        t = m.transforms.get(qual) if qual is not None else None
        if t is None or t.statics != "grad" or not inner.args or inner.args[0].keyword is not None \
                or inner.args[0].star:
            return False
        opts = {a.keyword.value: a.value for a in inner.args if a.keyword is not None}
        nums = _argnums(opts)
        ref = m.resolve_callable(inner.args[0].value, scope)
        if ref is not None:
            ref = _def_in_force(ref, inner.args[0].value, scope, m.call_order.get(id(inner)))
        if nums is None or ref is None:
            return False
        values = Values(m, site_fn) if site_fn is not None and site_fn.traced else None
        args = _arg_infos(call, site_fn, values)
        traced, pytrees = _map_args(ref.fn, ref.offset, args, ref.bound_names)
        usable = [p for p in ref.fn.params if p.index is not None][ref.offset:]
        for n in nums:
            if -len(usable) <= n < len(usable):
                traced.add(usable[n].name)
                pytrees.add(usable[n].name)
        traced -= ref.bound_names
        if ref.fn.target is None:
            ref.fn.target = TraceTarget(ref.fn.qualname, 0, t.kind, (), (), _via(site_fn), _root(site_fn))
        ref.fn.trace_sites.add((scope, m.call_order.get(id(call), 0)))
        self.mark(ref.fn, traced, t.abstract or site_abstract, t.cached or site_cached, t.kind, None, pytrees,
                  staged_site=site_cached or bool(site_fn is not None and site_fn.traced))
        return True

    def seed(self, fn: FunctionInfo, t: Transform, opts: dict[str, cst.BaseExpression], offset: int,
             bound: frozenset[str], abstract: bool, site_fn: Optional[FunctionInfo], cached: bool = False,
             outer: Optional[Transform] = None, passed: int = 0, lead: int = 0,
             application: Optional[cst.Call] = None, inner: bool = False,
             container_site: Optional[int] = None,
             outer_opts: Optional[dict[str, cst.BaseExpression]] = None,
             bound_values: Optional[tuple[Optional[FunctionInfo], dict[str, object]]] = None,
             left_out: Optional[set[str]] = None) -> None:
        """`passed`: how many leading positional parameters the transform always fills (a control-flow
        body's carry and element), whatever their defaults say. `inner`: a decorator below another
        transform's, which gets its arguments from that transform. `container_site`: where the arguments
        that say which parameters hold containers are recorded (see `mark`); an application by default.
        `bound_values`: what a `partial` the transform is given binds (see `_bound_idents`). `left_out`:
        parameters every call of the name the transformed function is bound to leaves out."""
        opts = self._bound_options(opts, site_fn if site_fn is not None else (fn.parent or self.m.root))
        statics = static_param_names(fn, t, opts, offset, lead, self.m)
        if outer is not None and outer_opts is not None:
            # `jax.jit(jax.grad(f), static_argnames="n")`: the wrapper keeps f's signature, so the outer
            # transform's static parameters are f's; a parameter stays a Python value where the inner
            # transform passes it through (grad: not in `argnums`; vmap: `in_axes` None) and the outer
            # keeps it static.
            kept = static_param_names(fn, outer, outer_opts, offset, lead, self.m)
            passed_through = statics
            if t.statics == "grad":
                nums = _argnums(opts)
                usable = [p for p in fn.params if p.index is not None][offset:]
                made = {usable[n].name for n in nums or () if -len(usable) <= n < len(usable)}
                passed_through = None if nums is None else {p.name for p in fn.params} - made
            statics = None if kept is None or passed_through is None else kept & passed_through
        if inner and t.statics == "grad":
            # `@partial(jax.jit, static_argnames=("n",))` over `@partial(jax.grad, argnums=2)`: grad makes
            # tracers of its `argnums` only; the other arguments are what the outer transform gives.
            nums = _argnums(opts)
            usable = [p for p in fn.params if p.index is not None][offset:]
            if nums is not None:
                made = {usable[n].name for n in nums if -len(usable) <= n < len(usable)}
                statics = {p.name for p in fn.params} - made
        positional = [p for p in fn.params if p.index is not None]
        bound_pos = {p.name for p in positional[:offset]}
        given = {p.name for p in fn.params if not p.has_default}
        left_out = set(left_out or ())  # parameters the application does not pass: they keep their defaults
        if application is not None and not lead:  # `jax.jit(f)(x, rng)`, `jax.jit(f).lower(x, rng_shape)`
            given |= _passed_names(CallableRef(fn, offset, frozenset(bound)), application, None)
            if not any(a.star for a in application.args):
                left_out = _left_out(fn, offset, application)
        elif application is None and not lead and not offset and not bound and inner is False:
            # `@jax.jit def run(key, verbose=args.verbose)` called only as `run(k)`: a parameter every call
            # leaves out keeps its default, a Python value (jit traces only what a call passes)
            left_out |= self._left_out_everywhere(fn)
        _note_passed(fn, given | {p.name for p in positional[offset:offset + passed]} | bound_pos | set(bound))
        # (a transform's own call sites are not followed here: what its callers give is not known)
        _note_left_none(fn, {n for n in left_out if _is_const(fn.param(n).default, "None")}
                        if application is not None and not lead else set())
        traced = set()
        for p in fn.params:
            if p.name in bound_pos or p.name in bound:
                continue
            if statics is None or p.name in statics:
                continue
            if offset == 0 and fn.is_method and p is fn.params[0]:
                continue  # self/cls: see jit-method-self
            if (_constant_default(p.default) or self._captured_default(fn, p.default)) \
                    and not (p.index is not None and p.index - offset < passed):
                continue  # a flag with a Python default: a constant unless a caller passes it
            if p.name in left_out:
                continue
            traced.add(p.name)
        if lead and offset and fn.is_method:
            traced.add(fn.params[0].name)  # `jax.jit(model.apply)`: the variables, hence the module's, are traced
        if fn.target is None or (fn.target.transform == "helper" and site_fn is None):
            static_nums = tuple(p.index - offset for p in positional
                                if statics is not None and p.name in statics and p.index is not None and p.index >= offset)
            # Under an outer cached transform (`jax.jit(jax.vmap(f))`) the verifier re-traces through it.
            kind = outer.kind if outer is not None else t.kind
            fn.target = TraceTarget(fn.qualname, 0, kind,
                                    static_nums, tuple(sorted(statics or ())), _via(site_fn), _root(site_fn))
        entry = None
        if t.statics in _TRACING and (outer is None or outer.statics in _TRACING) and statics is not None \
                and not lead and not passed:
            # what each parameter holds: a tracer when the transform is given it, else its default
            caller, bound_vals = bound_values or (None, {})
            kinds: dict[str, object] = {}
            applied = filled_args(fn, offset, application.args) if application is not None else None
            for p in fn.params:
                if p.star or (offset == 0 and fn.is_method and p is fn.params[0]):
                    continue
                if p.name in bound_pos or p.name in bound:
                    kinds[p.name] = bound_vals.get(p.name)
                elif p.name in statics:
                    # a static argument is the Python object the application passes (`jax.vmap(f, (0,
                    # None))(x, True)`), or the default it leaves
                    given_arg = applied.get(p.name) if applied is not None else None
                    ident = literal_ident(given_arg.value) if given_arg is not None else \
                        literal_ident(p.default) if applied is not None and p.has_default else None
                    kinds[p.name] = frozenset({ident}) if ident is not None else None
                else:
                    # (None passed to a transform stays None: an empty pytree)
                    traced_kind = frozenset({"tracer"} if p.annotation in ARRAY_ANNOTATIONS else {"value", "None"})
                    default = literal_ident(p.default) if p.has_default else None
                    if p.name in left_out:
                        kinds[p.name] = frozenset({default}) if default is not None else None
                    elif not p.has_default or (application is not None and p.name in given):
                        kinds[p.name] = traced_kind
                    else:  # given by some callers, left to its default by others
                        kinds[p.name] = traced_kind | {default} if default is not None else None
            entry = (caller, tuple(sorted(kinds.items(), key=lambda kv: kv[0])))
        # Under equinox's filter transforms non-array leaves stay static, so attributes are not leaves.
        self.mark(fn, traced, abstract, t.cached or cached, t.kind, None,
                  staged_site=cached or bool(site_fn is not None and site_fn.traced)
                  or (outer is not None and outer.kind not in UNSTAGED),
                  pytrees=set() if t.statics == "filter" else traced - _graph_nodes(fn, t, self.m),
                  container_site=container_site if container_site is not None
                  else id(application) if application is not None else None, entry=entry)

    def _plain_class(self, ann: cst.BaseExpression, scope: Scope) -> bool:
        """An annotation naming a class of this module whose instances are no pytree (a frozen dataclass
        of settings, an enum): equinox's filter transforms pass such an object through as it is."""
        m = self.m
        cls = m.class_named(ann, scope)
        return cls is not None and not cls.pytree and not cls.registers_subclasses and not cls.container \
            and m.frameworks.kind(cls) is None and not m.instances_are_pytrees(cls) \
            and all(b in ("object", "enum.Enum", "enum.IntEnum", "enum.StrEnum") for b in cls.bases)

    def _left_out_by_alias(self, call: cst.Call, scope: Scope, ref: CallableRef) -> set[str]:
        """`run_jit = jax.jit(run)` then only `run_jit(key)`: the parameters with defaults every call of the
        name leaves out (the name only ever called while it holds the transform; its other bindings, if
        any, are no functions: `fps = jax.jit(f)`, later `fps = n / t`)."""
        fn = ref.fn
        opened = [p for p in fn.params if p.has_default and not p.star and not _constant_default(p.default)
                  and not (p.index is not None and p.index < ref.offset) and p.name not in ref.bound_names]
        if not opened or ref.lead or scope.node is None:
            return set()
        names = [n for n, vals in scope.assigned.items() if any(v is call for v in vals)]
        if len(names) != 1:
            return set()
        name = names[0]
        others = [v for v in scope.assigned[name] if v is not call]
        if any(v is None or isinstance(v, (cst.Name, cst.Call, cst.Attribute, cst.Lambda, cst.Subscript))
               for v in others):
            return set()  # bound again to something that may be callable
        if not others and not only_called(scope.node, name):
            return set()
        if scope is self.m.root and self.m.ask("mentioned_elsewhere", name, absent=False):
            return set()
        calls = [c for c, s, _l in self.m.all_calls if isinstance(c.func, cst.Name) and c.func.value == name
                 and self.m.owner_of(name, s) is scope]
        return _left_out_of_all(fn, ref.offset, opened, calls)

    def _left_out_everywhere(self, fn: FunctionInfo) -> set[str]:
        """The parameters with defaults that every call of a decorated def leaves out, when its name is
        only ever called (in the scope defining it, never handed on) and no call unpacks arguments."""
        m = self.m
        opened = [p for p in fn.params if p.has_default and not p.star and not _constant_default(p.default)]
        owner = fn.parent or m.root
        if not opened or not fn.decorators or isinstance(owner, ClassInfo) or owner.node is None \
                or len(owner.bind_order.get(fn.name, [])) > 1 or not only_called(owner.node, fn.name) \
                or (owner is m.root and m.ask("mentioned_elsewhere", fn.name, absent=False)):
            return set()
        calls = [c for c, _s, _l in m.all_calls if isinstance(c.func, cst.Name) and c.func.value == fn.name]
        return _left_out_of_all(fn, 0, opened, calls)

    def _bound_options(self, opts: dict[str, cst.BaseExpression], scope: Scope) -> dict[str, cst.BaseExpression]:
        """A transform's options with a name bound once to a literal written out (`axes = (None, 0)` then
        `vmap(f, in_axes=axes)`; a module constant `STATIC = (1, 2)`)."""
        out = dict(opts)
        for key, v in opts.items():
            if not isinstance(v, cst.Name) or v.value in ("None", "True", "False"):
                continue
            owner = self.m.owner_of(v.value, scope)
            values = owner.assigned.get(v.value, []) if owner is not None else []
            if len(values) != 1 or not isinstance(values[0], (cst.Tuple, cst.List, cst.Integer, cst.SimpleString)) \
                    or (isinstance(owner, FunctionInfo) and owner.param(v.value) is not None) \
                    or (owner is self.m.root and not self.m.bound_once(v.value)):
                continue
            out[key] = values[0]
        return out

    def _captured_default(self, fn: FunctionInfo, default: Optional[cst.BaseExpression]) -> bool:
        """`def rhs(t, y, n=N, w=weights)` inside a factory: a default naming a value of the enclosing
        function binds it the way a closure would; callers are not meant to pass it, and JAX traces only
        the arguments a call passes. The value is the enclosing function's: a Python value unless it is
        traced there (`stable=grad_clipping` under a `vmap` whose `in_axes` leave that flag None)."""
        if not isinstance(default, cst.Name) or fn.parent is None:
            return False
        owner = self.m.owner_of(default.value, fn.parent)
        return isinstance(owner, FunctionInfo) and (not owner.traced or default.value not in owner.traced_names)

    def mark(self, fn: FunctionInfo, params: set[str], abstract: bool, cached: bool, kind: str,
             caller: Optional[FunctionInfo], pytrees: set[str] = frozenset(),  # type: ignore[assignment]
             site: Optional[tuple] = None, call: Optional[cst.Call] = None,
             container_site: Optional[int] = None, entry: Optional[tuple] = None, staged_site: bool = False) -> None:
        """`site`: (key, caller, offset, bound names, arguments) of a call whose arguments are known;
        without one, the function is traced from somewhere its flags cannot be read. `call`: the traced
        call site these parameters come from; its answer replaces the one an earlier round gave (an early
        round asks before callbacks and summaries are known, and a guess made then must not stick).
        `container_site`: a transform application whose arguments `container_sites` records. `entry`: what
        a transform passes each parameter (see `FunctionInfo.ident_entries`)."""
        if site is None:
            fn.flags_open = True
            if entry is None:
                fn.idents_open = True
            else:
                fn.ident_entries.add(entry)
            fn.containers_open |= container_site is None or (
                container_site != _ARGS_ELSEWHERE and container_site not in fn.container_sites)
        else:
            fn.flag_sites[site[0]] = site[1:]
        grew = False
        if pytrees - fn.pytree_params:
            fn.pytree_params |= pytrees
            grew = True
        if not fn.traced:
            fn.traced = True
            grew = True
        if abstract and not fn.abstract:
            fn.abstract = True
            grew = True
        if cached and not fn.cached:
            fn.cached = True
            grew = True
        # (a helper called from another file is staged as its caller there is: `staged_site`)
        staged = (caller.staged if caller is not None else staged_site) if kind == "helper" \
            else kind not in UNSTAGED or staged_site
        if staged and not fn.staged:
            fn.staged = True
            grew = True
        if kind not in fn.transforms:
            fn.transforms.add(kind)
        if call is not None:
            fn.site_params[id(call)] = frozenset(params)
            if abstract:
                fn.abstract_sites.add(id(call))
            else:
                fn.abstract_sites.discard(id(call))
            if caller is not None:
                fn.site_calls[id(call)] = (caller, call)
        else:
            fn.seed_params |= params
            if abstract:
                fn.abstract_seed |= params
        now = fn.seed_params.union(*fn.site_params.values()) - fn.declared_static
        if now != fn.traced_params:
            fn.traced_params = now
            grew = True
        if caller is not None and fn.target is None:
            fn.target = TraceTarget(fn.qualname, 0, "helper", (), (), _via(caller), _root(caller))
        if grew:
            self.changed = True

    def follow_calls(self, fn: FunctionInfo) -> None:
        m = self.m
        values = Values(m, fn)
        for call in fn.calls:
            if dead_branch(fn, m.call_guards.get(id(call), frozenset())):
                continue  # a branch that never runs traced calls nothing while tracing
            # a parameter rebound only further down is still the argument here, and a name rebound on the
            # way is what was bound last
            values._use_order = m.call_order.get(id(call))
            values._use_arms = m.call_branches.get(id(call), ())
            values._use_loop = m.call_loops.get(id(call))
            qual = m.resolve(call.func, fn)
            if qual is not None and (qual in CALLBACKS or qual in m.transforms or qual in LAX_BODIES):
                if qual in m.transforms or qual in LAX_BODIES:
                    # transforms applied inside traced code: abstract (and cached) if the site is
                    self.seed_call(call, fn, fn, fn.abstract, fn.cached)
                continue
            if isinstance(call.func, cst.Call):
                self.seed_call(call, fn, fn, fn.abstract, fn.cached)
            if qual == "builtins.map" and len(call.args) > 1:
                ref = m.resolve_callable(call.args[0].value, fn)
                if ref is not None:  # map(f, xs): f gets the elements
                    elems = [ArgInfo("", None, values.traced(a.value), False) for a in call.args[1:]]
                    traced, _ = _map_args(ref.fn, ref.offset, elems)
                    ref.fn.helper_sites.add((fn, m.call_order.get(id(call), 0)))
                    self.mark(ref.fn, traced, fn.abstract, fn.cached, "helper", fn, call=call)
                continue
            if qual in TREE_MAPS:
                self.seed_call(call, fn, fn, fn.abstract, fn.cached)
                continue
            ref = m.resolve_callable(call.func, fn, call)
            args = _arg_infos(call, fn, values)
            if ref is None:
                elements = m.frameworks.element_callables(call.func, fn)
                for element in elements:  # `for layer in self.layers: x = layer(x)` with layers of several classes
                    self._follow(element, call, fn, values, list(args))
                if elements:
                    continue
                # Across files, follow only calls made by a function a transform traces directly
                # (`train_step` -> `losses.loss_fn`): longer chains through library internals were
                # measured to be mostly noise.
                direct = fn.target is not None and fn.target.transform != "helper"
                if direct and qual is not None and not qual.startswith("builtins.") and any(a.traced for a in args):
                    m.external_calls[id(call)] = ExternalCall(qual, tuple(args), fn.abstract, fn.cached, fn.qualname,
                                                              staged=fn.staged)
                elif direct or (fn.is_method and fn.cls is not None and m.frameworks.kind(fn.cls)):
                    # `models.CNN().apply(variables, x)`: a method of a module class imported from elsewhere,
                    # also a submodule a model module's own method calls (`self.encoder(x)`)
                    method = m.frameworks.imported_method(call, fn, values, args)
                    if method is not None:
                        m.external_calls[id(call)] = ExternalCall(method[0], method[1], fn.abstract, fn.cached,
                                                                  fn.qualname, staged=fn.staged)
                continue
            self._follow(ref, call, fn, values, args)

    def _follow(self, ref: CallableRef, call: cst.Call, fn: FunctionInfo, values: Values, args: list[ArgInfo]) -> None:
        """Mark the function a call in traced `fn` runs as traced, with the parameters its arguments fill."""
        m = self.m
        if ref.fn is fn:
            return
        if m.host_decorated(ref.fn):
            return  # `@log_on_host def log(...)`: its decorator runs the body in a host callback
        if not fn.abstract and self._custom_derivative(ref.fn):
            return  # under grad alone a custom_vjp/custom_jvp function's rule gets the concrete primals
        ref.fn.helper_sites.add((fn, m.call_order.get(id(call), 0)))
        _note_passed(ref.fn, _passed_names(ref, call, fn) if not ref.lead
                     else {p.name for p in ref.fn.params if not p.has_default})
        _note_left_none(ref.fn, _left_none(ref.fn, ref.offset, frozenset(ref.bound_names), call.args)
                        if not ref.lead else set())
        receiver = ref.receiver is not None and values.traced(ref.receiver)
        if ref.lead:  # linen's `apply(variables, ...)`: traced variables make the module's own traced
            receiver = any(a.traced for a in args[:ref.lead] if not a.star and a.keyword is None)
            args = args[ref.lead:] if all(not a.star and a.keyword is None for a in args[:ref.lead]) else []
        if not ref.lead:
            _note_kwargs(ref.fn, args)
        traced, pytrees = _map_args(ref.fn, ref.offset, args, ref.bound_names)
        if receiver and ref.offset and ref.fn.is_method:
            traced.add(ref.fn.params[0].name)  # a traced instance: its array leaves are traced in the method
        self.mark(ref.fn, traced, fn.abstract, fn.cached, "helper", fn, pytrees,
                  site=None if ref.lead else (id(call), fn, ref.offset, ref.bound_names, tuple(args)), call=call)

    def _custom_derivative(self, fn: FunctionInfo) -> bool:
        """Whether `fn` is decorated with `jax.custom_vjp`/`jax.custom_jvp`."""
        for d in fn.decorators:
            got = self.m.transform_of(d.decorator, fn.parent or self.m.root)
            if got is not None and got[0].statics == "custom":
                return True
        return False

    def seed_external(self, calls: list["ExternalCall"], origin: str) -> None:
        """Calls into this module from traced code in other files of the project."""
        m = self.m
        for ext in calls:
            if ext.kind == "ref":
                continue  # refs handed over, for `semantic/refs.py`
            fn = external_target(m, ext)
            if fn is None:
                continue
            if not ext.abstract and self._custom_derivative(fn):
                continue  # under grad alone a custom_vjp/custom_jvp function's rule gets the concrete primals
            # Across files an argument makes its parameter traced when it is evidently an array, or is a
            # parameter the caller's transform fills (`jax.jit(step)` handing `x` on): other traced objects
            # (dicts built from a trace, `**kwargs`) mostly carry configuration and metadata. As the
            # pytree's structure is not known here, its attributes are not leaves.
            arrays = [dataclasses.replace(a, traced=a.traced and (a.array or a.argument)) for a in ext.args]
            traced, _ = _map_args(fn, 0, arrays)
            pytrees: set[str] = set()  # too far from the transform to know which objects are flattened pytrees
            fn.helper_sites.add((m.root, -1))  # called from another file: the site is not known here
            if fn.target is None:
                fn.target = TraceTarget(fn.qualname, 0, "helper", (), (), (f"{ext.caller} ({ext.origin})",))
            self.mark(fn, traced, ext.abstract, ext.cached, "helper", None, pytrees,
                      site=(id(ext), None, 0, frozenset(), ext.args), staged_site=ext.staged)
            _note_passed(fn, _given_by(fn, ext.args))
            _note_left_none(fn, _left_none(fn, 0, frozenset(), ext.args))


@dataclass(frozen=True)
class ArgInfo:
    """One argument of a call, as far as tracing goes: its form and whether it carries traced values."""

    star: str  # "", "*" or "**"
    keyword: Optional[str]
    traced: bool
    pytree: bool
    array: bool = False  # evidently an array (a jnp result, arithmetic, an array-annotated parameter…)
    truth: Optional[bool] = None  # the truthiness of a literal argument (`use_jax=True`)
    name: Optional[str] = None  # the name passed, when the argument is a bare name (`use_jax=use_jax`)
    container: bool = False  # a Python container (a literal, or a name the caller knows holds one)
    # a parameter the caller's own transform fills (`step(x)` under jit hands `x` on): arrays or a pytree
    # of arrays, never Python objects with metadata
    argument: bool = False
    # what an identity test sees of it (see `FunctionInfo.idents`): a literal's object, "tracer" for an
    # evident array, "value" for another traced value; None when not known
    ident: Optional[str] = None


@dataclass(frozen=True)
class ExternalCall:
    """A call from traced code to a function imported from elsewhere (followed across files by the API)."""

    qualname: str  # as resolved through this module's imports, e.g. `.losses.l2` or `pkg.losses.l2`
    args: tuple[ArgInfo, ...]
    abstract: bool
    cached: bool
    caller: str
    origin: str = ""  # the caller's file, filled in by the API
    # "traced": a call from traced code, followed into the callee's file; "key": a PRNG key handed to a
    # function of another file, whose summary (does it consume the key?) the caller's analysis needs;
    # "ref": Pallas refs handed to a function of another file (`traced` on an argument marks a ref);
    # "global": a module constant of the caller's file taken as a flag, which no other file may set
    kind: str = "traced"
    # whether the caller is staged out (under jit, pmap, a lax body): under `grad` or `vmap` alone the
    # callee's jnp calls on Python values run eagerly and give concrete arrays
    staged: bool = True


def external_target(m: ModuleModel, ext: ExternalCall) -> Optional[FunctionInfo]:
    """The function of this module a call from another file reaches."""
    if "." in ext.qualname:  # `Class.method` of a model module class: `self` is the first argument
        return m.frameworks.method_named(ext.qualname)
    fn = m.root.defs.get(ext.qualname)
    return None if fn is not None and m.dispatched(fn) else fn


def solve_flags(functions: list[FunctionInfo], constants: Optional[dict[int, dict[str, bool]]] = None) -> bool:
    """Which parameters have one truthiness at every traced call site: a literal argument, the default
    when the argument is left out, or the caller's own such parameter passed on (`use_jax=use_jax`); and
    what identity tests see of each parameter (`FunctionInfo.idents`). The module constants a function
    tests (`ModuleModel.constant_flags`) are flags too. Whether anything changed."""
    constants = constants or {}
    fns = [f for f in functions if f.traced]
    moved = False
    for _ in range(len(fns) + 1):
        changed = False
        for f in fns:
            new: dict = {}
            if not f.flags_open and f.flag_sites:
                merged: Optional[dict[str, Optional[bool]]] = None
                for caller, offset, bound, args in f.flag_sites.values():
                    truths = _site_truths(f, offset, bound, args, caller)
                    merged = truths if merged is None else {k: v for k, v in merged.items() if truths.get(k) == v}
                new = {k: v for k, v in (merged or {}).items()
                       if v is not None and k not in f.assigned and k not in f.declared_nonlocal}
            new.update(constants.get(id(f), {}))
            if new != f.flags:
                f.flags = new
                changed = True
            idents = {} if f.idents_open else _solve_idents(f)
            if idents != f.idents:
                f.idents = idents
                changed = True
        if not changed:
            break
        moved = True
    return moved


def _solve_idents(f: FunctionInfo) -> dict[str, frozenset[str]]:
    """What each parameter holds at every call site and transform that traces `f` (see `idents`)."""
    merged: dict[str, set[str]] = {}
    unknown: set[str] = set()

    def add(name: str, kinds: object, caller: Optional[FunctionInfo]) -> None:
        if isinstance(kinds, str):  # the caller's own parameter, passed on
            kinds = caller.idents.get(kinds) if caller is not None else None
        if kinds is None:
            unknown.add(name)
        else:
            merged.setdefault(name, set()).update(kinds)  # type: ignore[arg-type]

    for caller, offset, bound, args in f.flag_sites.values():
        given = filled_args(f, offset, args)
        for p in f.params:
            if p.star:
                continue
            a = given.get(p.name) if given is not None else None
            if given is None or p.name in bound or (p.index is not None and p.index < offset):
                unknown.add(p.name)
            elif a is None:
                add(p.name, frozenset({d}) if p.has_default and (d := literal_ident(p.default)) else None, None)
            elif a.name is not None and caller is not None and caller.param(a.name) is not None \
                    and a.name in caller.idents:
                add(p.name, a.name, caller)
            else:  # a traced argument of a parameter annotated as an array is a tracer
                ident = "tracer" if a.ident == "value" and a.traced and p.annotation in ARRAY_ANNOTATIONS else a.ident
                add(p.name, frozenset({ident}) if ident is not None else None, None)
    for caller, kinds in f.ident_entries:
        for name, k in kinds:
            add(name, k, caller)
        unknown.update(p.name for p in f.params if not p.star and p.name not in dict(kinds))
    return {k: frozenset(v) for k, v in merged.items()
            if k not in unknown and k not in f.assigned and k not in f.declared_nonlocal}


# What `jax.disable_jit()` runs eagerly, on concrete values: jit and `lax` control flow (vmap, pmap and
# grad still trace).
_EAGER_WITHOUT_JIT = frozenset({"jit", "pjit", "scan", "fori_loop", "while_loop", "cond", "switch", "map"})


def _eager_without_jit(m: ModuleModel, call: cst.Call, scope: Scope) -> bool:
    """Whether a call made under `with jax.disable_jit():` runs its function without tracing it."""
    head = call.func.func if isinstance(call.func, cst.Call) else call.func
    qual = m.resolve(head, scope) or ""
    t = m.transforms.get(qual)
    if t is not None:
        return t.kind in ("jit", "pjit")
    body = LAX_BODIES.get(qual)
    return body is not None and qual.startswith("jax.lax.") and body[0] in _EAGER_WITHOUT_JIT


# Transforms whose non-static arguments reach the function as tracers.
_TRACING = frozenset({"jit", "pmap", "shard_map", "vmap"})


def _partial_bound_traced(m: ModuleModel, fexpr: cst.BaseExpression, fn: FunctionInfo,
                          site_fn: FunctionInfo) -> tuple[set[str], set[str]]:
    """The parameters of `fn` that `partial(fn, a, b=c)` (nested partials too) binds to a value traced in
    `site_fn`, the traced function the partial is made in; and those of them bound to a pytree."""
    if not isinstance(fexpr, cst.Call) or m.resolve(fexpr.func, site_fn) not in PARTIALS or not fexpr.args:
        return set(), set()
    inner = fexpr.args[0].value
    out, trees = _partial_bound_traced(m, inner, fn, site_fn)
    offset = 0  # positional parameters an inner partial (or a bound method's receiver) already took
    ref = m.resolve_callable(inner, site_fn)
    if ref is not None and ref.fn is fn:
        offset = ref.offset
    values = Values(m, site_fn)
    given = filled_args(fn, offset, [a for a in fexpr.args[1:] if not a.star]) or {}
    for name, a in given.items():
        if fn.param(name) is not None and values.traced_at(a.value, fexpr):
            out.add(name)
            if values.is_pytree(a.value):
                trees.add(name)
    return out, trees


def _bound_idents(fexpr: cst.BaseExpression, fn: Optional[FunctionInfo]
                  ) -> Optional[tuple[Optional[FunctionInfo], dict[str, object]]]:
    """What `partial(f, flag=False, check=check)` binds, as identity tests see it: a literal's object, or
    the name of the enclosing function's parameter passed on (what it holds is solved with `fn`'s)."""
    if not isinstance(fexpr, cst.Call) or (dotted(fexpr.func) or "").split(".")[-1] != "partial":
        return None
    out: dict[str, object] = {}
    for a in fexpr.args:
        if a.keyword is None:
            continue
        ident = literal_ident(a.value)
        if ident is not None:
            out[a.keyword.value] = frozenset({ident})
        elif isinstance(a.value, cst.Name) and fn is not None and fn.param(a.value.value) is not None:
            out[a.keyword.value] = a.value.value
    return fn, out


def solve_containers(functions: list[FunctionInfo], m: Optional["ModuleModel"] = None) -> None:
    """Parameters that every traced call site fills with a Python container (`state = {...}` passed on,
    a parameter annotated `hk.Params`): `if params:` on them tests emptiness."""
    # To a fixed point: a caller's own parameter passed on (`lambda i, v: helper(i, v)` as the body of a
    # loop whose carry is a list) holds a container once the caller's sites say so.
    for _ in range(4):
        changed = False
        for f in functions:
            # (a call a traced caller makes is known from that caller, whose own containers carry over)
            sites = list(f.flag_sites.values()) + [(None, *s) for k, s in f.container_sites.items()
                                                    if k not in f.flag_sites]
            if not f.traced or not sites or f.containers_open:
                continue  # traced from somewhere whose arguments are not known (a decorator, a body)
            common: Optional[set[str]] = None
            for caller, offset, bound, args in sites:
                site = _site_containers(f, offset, bound, args, caller)
                common = site if common is None else common & site
            found = (common or set()) - set(f.assigned)
            if m is not None and common and common & set(f.assigned):
                # `state = update(state)` with `update` handing back the container it is given: still one
                kept = f.container_names
                f.container_names = kept | common
                found |= {n for n in common & set(f.assigned)
                          if all(v is not None and m.python_container(v, f) for v in f.assigned[n])}
                f.container_names = kept
            if found != f.site_containers:
                changed = True
                f.site_containers = found
                f.container_names |= found
        if not changed:
            break


def filled_args(callee: FunctionInfo, offset: int, args) -> Optional[dict[str, Any]]:
    """Which argument of a call fills each parameter it names or reaches by position (after `offset`
    positional parameters a `partial` bound), for arguments as `ArgInfo`s or `cst.Arg`s; None when the
    call spreads `*xs`/`**kw` (which parameter gets what is then not known)."""
    if any(a.star for a in args):
        return None
    positional = [p for p in callee.params if p.index is not None]
    out: dict[str, Any] = {}
    pos = offset
    for a in args:
        if a.keyword is not None:
            out[a.keyword if isinstance(a.keyword, str) else a.keyword.value] = a
        elif pos < len(positional):
            out[positional[pos].name] = a
            pos += 1
    return out


def _site_containers(callee: FunctionInfo, offset: int, bound: frozenset[str], args: tuple[ArgInfo, ...],
                     caller: Optional[FunctionInfo] = None) -> set[str]:
    given = filled_args(callee, offset, args) or {}
    return {name for name, a in given.items() if name not in bound and (
        a.container or a.name is not None and caller is not None and a.name in caller.site_containers)}


def _site_truths(callee: FunctionInfo, offset: int, bound: frozenset[str], args: tuple[ArgInfo, ...],
                 caller: Optional[FunctionInfo]) -> dict[str, Optional[bool]]:
    given = filled_args(callee, offset, args)
    if given is None:
        return {}
    out: dict[str, Optional[bool]] = {}
    for p in callee.params:
        if p.star or p.name in bound or (p.index is not None and p.index < offset):
            continue
        a = given.get(p.name)
        if a is None:
            out[p.name] = literal_truth(p.default) if p.has_default else None
            continue
        truth = a.truth
        if truth is None and a.name is not None and caller is not None and caller.param(a.name) is not None:
            truth = caller.flags.get(a.name)
        out[p.name] = truth
    return out


def _note_kwargs(fn: FunctionInfo, args: list["ArgInfo"]) -> None:
    """Record what one traced call puts in `fn`'s `**kwargs` (see FunctionInfo.kw_keys)."""
    kwstar = next((p for p in fn.params if p.star == "**"), None)
    if kwstar is None:
        return
    named = {a.keyword: a.traced for a in args if a.keyword is not None and fn.param(a.keyword) is None}
    rest = any(a.traced for a in args if a.star == "**")
    if fn.kw_keys is None:
        fn.kw_keys = named
    else:  # a key some site leaves out may come from anywhere at the others
        rest = rest or any(t for k, t in named.items() if k not in fn.kw_keys) \
            or any(t for k, t in fn.kw_keys.items() if k not in named)
        fn.kw_keys = {k: t or fn.kw_keys[k] for k, t in named.items() if k in fn.kw_keys}
    fn.kw_rest = fn.kw_rest or rest


def _note_passed(fn: FunctionInfo, names: set[str]) -> None:
    fn.passed = set(names) if fn.passed is None else fn.passed & names


def _given_by(fn: FunctionInfo, args: tuple[ArgInfo, ...]) -> set[str]:
    """Parameters a call from another file gives a value that cannot be None: a traced value (a tracer is
    never None), and every parameter without a default; with `*xs`/`**kw`, only the latter are known."""
    out = {p.name for p in fn.params if not p.has_default and not p.star}
    given = filled_args(fn, 0, args) or {}
    return out | {name for name, a in given.items() if a.traced or a.array or a.argument}


def _note_left_none(fn: FunctionInfo, names: set[str]) -> None:
    fn.left_none = set(names) if fn.left_none is None else fn.left_none & names
    fn.left_none_sites.append(frozenset(names))


def _left_none(fn: FunctionInfo, offset: int, bound: frozenset[str], args) -> set[str]:
    """Parameters defaulting to None that a call (with what a `partial` bound) leaves None: leaves out, or
    gives a literal None; none when it spreads `*xs`/`**kw`."""
    given = filled_args(fn, offset, args)
    if given is None:
        return set()
    bound_pos = {p.name for p in fn.params if p.index is not None and p.index < offset}
    return {p.name for p in fn.params if p.has_default and not p.star and _is_const(p.default, "None")
            and p.name not in bound and p.name not in bound_pos
            and (p.name not in given or _is_const(getattr(given[p.name], "value", None), "None"))}


def _passed_names(ref: "CallableRef", call: cst.Call, caller: Optional[FunctionInfo]) -> set[str]:
    """Parameters this call (with what `partial` bound) gives a value that cannot be None."""
    fn = ref.fn
    positional = [p for p in fn.params if p.index is not None]
    out = {p.name for p in positional[:ref.offset]} | set(ref.bound_names)

    def not_none(value: cst.BaseExpression) -> bool:
        if _is_const(value, "None"):
            return False
        if isinstance(value, cst.Name) and caller is not None:
            p = caller.param(value.value)
            if p is not None and p.has_default and _is_const(p.default, "None"):
                return caller.passed is not None and p.name in caller.passed
        return True

    pos = ref.offset
    for a in call.args:
        if a.star:
            return out | {p.name for p in fn.params if not p.has_default}
        if a.keyword is not None:
            if not_none(a.value):
                out.add(a.keyword.value)
        elif pos < len(positional):
            if not_none(a.value):
                out.add(positional[pos].name)
            pos += 1
    return out


def _arg_infos(call: cst.Call, fn: Optional[FunctionInfo], values: Optional["Values"]) -> list[ArgInfo]:
    """The arguments of a call as tracing sees them; `*xs` of a list literal (or of a local name bound
    once to one) is spread into its elements, so each parameter gets its own element."""
    out: list[ArgInfo] = []

    def one(star: str, kw: Optional[str], value: cst.BaseExpression) -> ArgInfo:
        t = values is not None and values.traced(value)
        container = isinstance(value, (cst.Dict, cst.List, cst.Tuple, cst.DictComp, cst.ListComp)) or (
            isinstance(value, cst.Name) and fn is not None and value.value in fn.container_names) or (
            # `batch.get("inner", {})`: a container when the key is missing, hence one by design
            isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "get"
            and len(value.args) == 2 and isinstance(value.args[1].value, (cst.Dict, cst.List, cst.Tuple)))
        argument = bool(t and isinstance(value, cst.Name) and fn is not None and fn.target is not None
                        and fn.target.transform != "helper" and value.value in fn.traced_params
                        and not fn.assigned.get(value.value))
        array = t and values.is_array_like(value)  # type: ignore[union-attr]
        return ArgInfo(star, kw, t, t and values.is_pytree(value), array,  # type: ignore[union-attr]
                       literal_truth(value), value.value if isinstance(value, cst.Name) else None, container,
                       argument, literal_ident(value) or ("tracer" if array else "value" if t else None))

    for a in call.args:
        if a.star == "*":
            seq = a.value
            if isinstance(seq, cst.Name) and fn is not None and fn.param(seq.value) is None:
                bound = fn.assigned.get(seq.value, [])
                seq = bound[0] if len(bound) == 1 and bound[0] is not None else seq
            if isinstance(seq, (cst.List, cst.Tuple)) and not any(isinstance(e, cst.StarredElement) for e in seq.elements):
                out.extend(one("", None, e.value) for e in seq.elements)
                continue
        if a.star == "**":  # `**dict(idx=i, cache=c)` / `**{"idx": i}`: each key is its own keyword argument
            items = _literal_keywords(a.value, fn)
            if items is not None:
                out.extend(one("", key, value) for key, value in items)
                continue
            forwarded = _forwarded_kwargs(a.value, fn)
            if forwarded is not None:  # `**kwargs` passed on: the keys its callers named, then the rest
                out.extend(forwarded)
                continue
        out.append(one(str(a.star), a.keyword.value if a.keyword is not None else None, a.value))
    return out


def _forwarded_kwargs(expr: cst.BaseExpression, fn: Optional[FunctionInfo]) -> Optional[list[ArgInfo]]:
    """`**kwargs` of `fn`'s own `**` parameter, passed on unchanged: the keys every traced caller of `fn`
    names, each as traced as some caller made it, and one `**` for the rest. The keys a transform makes
    static (`static_argnames` naming no parameter of `fn`) arrive as Python values, whoever calls."""
    if fn is None or not isinstance(expr, cst.Name):
        return None
    kwstar = next((p for p in fn.params if p.star == "**"), None)
    if kwstar is None or kwstar.name != expr.value or expr.value in fn.assigned:
        return None
    static_keys = sorted(k for k in fn.declared_static if fn.param(k) is None)
    if (fn.kw_keys is None or fn.flags_open) and not static_keys:
        return None
    for target, _value, _how in fn.events:
        if isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name) and target.value.value == expr.value:
            return None  # `kwargs["scale"] = x`: keys added on the way
    for c in fn.calls:
        if isinstance(c.func, cst.Attribute) and isinstance(c.func.value, cst.Name) \
                and c.func.value.value == expr.value and c.func.attr.value in ("update", "setdefault", "__setitem__"):
            return None
    traced = expr.value in fn.traced_params or expr.value in fn.traced_names
    if fn.kw_keys is None or fn.flags_open:
        out = [ArgInfo("", key, False, False) for key in static_keys]
        out.append(ArgInfo("**", None, traced, False))
        return out
    out = [ArgInfo("", key, traced and t and key not in static_keys, False) for key, t in fn.kw_keys.items()]
    out.extend(ArgInfo("", key, False, False) for key in static_keys if key not in fn.kw_keys)
    out.append(ArgInfo("**", None, traced and fn.kw_rest, False))
    return out


def _literal_keywords(expr: cst.BaseExpression, fn: Optional[FunctionInfo]
                      ) -> Optional[list[tuple[str, cst.BaseExpression]]]:
    """The keys and values of a mapping written out (`dict(a=x)`, `{"a": x}`), directly or through a
    local name bound once to one; None otherwise."""
    if isinstance(expr, cst.Name) and fn is not None and fn.param(expr.value) is None:
        bound = fn.assigned.get(expr.value, [])
        if len(bound) != 1 or bound[0] is None or any(
                isinstance(c.func, cst.Attribute) and isinstance(c.func.value, cst.Name)
                and c.func.value.value == expr.value for c in fn.calls):
            return None  # rebound, or changed through its methods (`kw.update(...)`)
        expr = bound[0]
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value == "dict" \
            and all(a.keyword is not None and not a.star for a in expr.args):
        return [(a.keyword.value, a.value) for a in expr.args]  # type: ignore[union-attr]
    if isinstance(expr, cst.Dict) and all(isinstance(e, cst.DictElement) and isinstance(e.key, cst.SimpleString)
                                          and isinstance(e.key.evaluated_value, str) for e in expr.elements):
        return [(e.key.evaluated_value, e.value) for e in expr.elements]  # type: ignore[union-attr]
    return None


def _map_args(callee: FunctionInfo, offset: int, args: list[ArgInfo],
              bound: frozenset[str] = frozenset()) -> tuple[set[str], set[str]]:
    """Which parameters of `callee` receive traced values (and whole pytrees) from these arguments;
    `*xs`/`**kw` cannot reach parameters a `partial` already bound by keyword."""
    traced: set[str] = set()
    pytrees: set[str] = set()
    positional = [p for p in callee.params if p.index is not None]
    star = next((p for p in callee.params if p.star == "*"), None)
    kwstar = next((p for p in callee.params if p.star == "**"), None)
    pos = offset
    after_star = False
    tail: Optional[int] = None  # where the positional arguments after a splat go, when that is known
    for i, info in enumerate(args):
        is_t = info.traced
        if info.star == "*":
            # the positional arguments written after the splat take the last positions it could reach
            trailing = sum(1 for a in args[i + 1:] if not a.star and a.keyword is None)
            end = len(positional) if star is not None else max(pos, len(positional) - trailing)
            if is_t:  # (not the parameters the call names: a splat filling one too is a TypeError)
                named = {a.keyword for a in args if a.keyword is not None}
                # A splat whose length is not known here fills the parameters the call must fill; a
                # defaulted one (`is_causal=False` after `q, k, v`) is an option it need not reach.
                options_left = trailing == 0 and star is None
                traced.update(p.name for p in positional[pos:end] if p.name not in bound and p.name not in named
                              and not (p.has_default and options_left))
                if star:
                    traced.add(star.name)
            # `f(*pair, idx, n, key)` of a function without `*args`: the last arguments fill the last
            # parameters (the call gives every parameter a value)
            tail = end if star is None and not after_star and end + trailing == len(positional) else None
            after_star = True
            continue
        if info.star == "**":
            if is_t:  # a mapping splat fills only parameters no other argument of the call names
                given = {a.keyword for a in args if a.keyword is not None}
                traced.update(p.name for p in callee.params if (p.index is None or p.index >= pos)
                              and p.name not in bound and p.name not in given and p.star != "*")
            continue
        target = None
        if info.keyword is not None:
            p = callee.param(info.keyword)
            target = p.name if p is not None else (kwstar.name if kwstar else None)
        elif after_star and tail is not None:
            target = positional[tail].name if tail < len(positional) else None
            tail += 1
        elif after_star:  # its position depends on the splat's length
            if is_t:
                traced.update(p.name for p in positional[pos:] if p.name not in bound)
                if star:
                    traced.add(star.name)
            continue
        elif pos < len(positional):
            target = positional[pos].name
            pos += 1
        else:
            target = star.name if star is not None else None
            pos += 1
        if target and is_t:
            traced.add(target)
            if info.pytree:
                pytrees.add(target)
    return traced, pytrees


def static_param_names(fn: FunctionInfo, t: Transform, opts: dict[str, cst.BaseExpression], offset: int,
                       lead: int = 0, module: Optional["ModuleModel"] = None) -> Optional[set[str]]:
    """Names of parameters JAX treats as static under this transform; None when unknowable.

    `lead` arguments of the transformed callable come before the function's own (linen's and haiku's
    `apply` take variables first): argument indices count them, parameters do not receive them. With the
    `module`, a tuple of the module spliced into the option is read too (`(*SETTINGS, "seed")`).
    A name that is no parameter of `fn` names a key of its `**kwargs` (see `_forwarded_kwargs`)."""
    positional = [p for p in fn.params if p.index is not None]
    out: set[str] = set()

    def by_index(expr: cst.BaseExpression) -> bool:
        expr = _spliced(expr, fn, module)
        nums = _literal_values(expr, _int_leaf)
        if nums is None:
            return False
        usable = positional[offset:]
        for n in nums:
            n = n - lead if n >= lead else (n if n < 0 else len(usable))
            if -len(usable) <= n < len(usable):
                out.add(usable[n].name)
        return True

    def by_position(spec: Optional[cst.BaseExpression]) -> None:
        """`in_axes=(None, 0)` / `in_specs=(P(), None)`: the argument at a `None` is passed through."""
        elements = _spec_elements(spec) if spec is not None else None
        if elements is not None:
            usable: list[Optional[Param]] = [None] * lead + positional[offset:]
            for i, el in enumerate(elements):
                p = usable[i] if i < len(usable) else None
                if p is not None and _is_const(el, "None"):
                    out.add(p.name)

    def by_name(expr: cst.BaseExpression) -> bool:
        names = _literal_values(_spliced(expr, fn, module), _str_leaf)
        out.update(names or ())
        return names is not None

    # transform kind -> (option naming static positions, option naming static parameters)
    options = {"jit": ("static_argnums", "static_argnames"), "pmap": ("static_broadcasted_argnums", ""),
               "custom": ("nondiff_argnums", "nondiff_argnames")}
    if t.statics in options:
        nums, names = options[t.statics]
        if nums in opts and not by_index(opts[nums]):
            return None
        if names and names in opts and not by_name(opts[names]):
            return None
    elif t.statics == "shard_map":
        # An argument whose in_spec is None is passed through as the Python value it is.
        by_position(opts.get("in_specs"))
    elif t.statics == "vmap":
        axes = opts.get("in_axes")
        if axes is not None:
            if isinstance(axes, cst.Name) and axes.value == "None":
                return None
            by_position(axes)
    elif t.statics == "filter":
        for p in fn.params:
            ann = p.annotation
            if ann in NON_ARRAY_ANNOTATIONS or (
                    p.annotation_expr is not None and not p.star and scalar_annotation(p.annotation_expr, DECLARED_PYTHON)):
                out.add(p.name)  # (`dense: Literal[False, True] = False`, `n: int | None`)
            elif ann is None and p.has_default and isinstance(
                    p.default, (cst.Integer, cst.Float, cst.SimpleString, cst.Name, cst.ConcatenatedString)):
                if not isinstance(p.default, cst.Name) or p.default.value in ("True", "False", "None"):
                    out.add(p.name)
            elif ann is None and not p.star and _python_valued(fn, p.name):
                out.add(p.name)
    return out


def _spliced(expr: cst.BaseExpression, fn: FunctionInfo, module: Optional["ModuleModel"]) -> cst.BaseExpression:
    """`(*SETTINGS, "seed")` with `SETTINGS` a tuple or list literal bound once at module level: the tuple
    written out; the expression itself otherwise."""
    if module is None or not isinstance(expr, (cst.Tuple, cst.List)) \
            or not any(isinstance(e, cst.StarredElement) for e in expr.elements):
        return expr
    elements: list[cst.BaseElement] = []
    for e in expr.elements:
        if not isinstance(e, cst.StarredElement):
            elements.append(e)
            continue
        name = e.value
        if not isinstance(name, cst.Name) or module.owner_of(name.value, fn.parent or module.root) is not module.root \
                or not module.bound_once(name.value):
            return expr
        value = module.root.assigned[name.value][0]
        if not isinstance(value, (cst.Tuple, cst.List)) or any(isinstance(v, cst.StarredElement) for v in value.elements):
            return expr
        elements.extend(value.elements)
    return cst.Tuple(elements=elements)


def _python_valued(fn: FunctionInfo, name: str, depth: int = 0) -> bool:
    """Under equinox's filter transforms, non-array arguments stay Python values: an unannotated parameter
    the body uses only as one (`match kind: case "r":`, `kind in ("a", "b")`, a `range` bound, a size:
    `jr.split(key, n)`, `jnp.zeros((n, 3))`, `x[:-n]`) and never as an array (no attribute, subscript, call
    of it, or other jnp/lax argument) is taken to be one. Where JAX needs a static size, an array would not
    do: the author passes a Python int there."""
    if _only_tested(fn, name):
        return True
    python = array = False
    sizes: set[int] = set()  # ids of the nodes under a size position
    for n in descendants(fn.node):
        if isinstance(n, cst.Name) and n.value == name and id(n) in sizes:
            python = True
        elif isinstance(n, cst.Match) and isinstance(n.subject, cst.Name) and n.subject.value == name:
            python = True
        elif isinstance(n, cst.Comparison) and isinstance(n.left, cst.Name) and n.left.value == name:
            python = python or any(_literal_values(c.comparator, _str_leaf) for c in n.comparisons)
        elif isinstance(n, cst.Slice):
            for bound in (n.lower, n.upper, n.step):
                if bound is not None:
                    sizes.update(id(d) for d in descendants(bound))
        elif isinstance(n, cst.Call):
            q = _qualified(fn, n.func)
            size_args = _size_arguments(n, q)
            for v in size_args:
                sizes.update(id(d) for d in descendants(v))
            named = any(_operand_mentions(a.value, name, fn) for a in n.args if not any(a.value is v for v in size_args)
                        and not _makes_function(fn, a.value))  # `jax.vmap(partial(f, n))` hands on a function
            if q == "builtins.range" and any(isinstance(d, cst.Name) and d.value == name
                                             for a in n.args for d in descendants(a.value)):
                python = True
            elif depth < 3 and _passed_as_python(fn, n, q, name, depth):
                python = True  # handed on to a helper that uses it as a Python value
            elif named and q.split(".")[0] in ("jax", "numpy"):
                array = True
            if isinstance(n.func, cst.Name) and n.func.value == name:
                array = True
        elif isinstance(n, (cst.Attribute, cst.Subscript)) and isinstance(n.value, cst.Name) and n.value.value == name:
            array = True
        if array:
            return False
    if not python and depth < 3:  # `pad = padding` then `jnp.arange(-pad, n + pad)`
        python = any(len(vals) == 1 and isinstance(vals[0], cst.Name) and vals[0].value == name and alias != name
                     and fn.param(alias) is None and _python_valued(fn, alias, depth + 1)
                     for alias, vals in fn.assigned.items())
    return python


def _makes_function(fn: FunctionInfo, e: cst.BaseExpression) -> bool:
    """A lambda, or a `functools.partial` of something: a function, not an array."""
    return isinstance(e, cst.Lambda) or (isinstance(e, cst.Call) and _qualified(fn, e.func) in PARTIALS)


def _only_tested(fn: FunctionInfo, name: str) -> bool:
    """Whether every read of the parameter `name` is the truth test of an `if`, `while` or conditional
    expression (alone, negated, or in an `and`/`or` of such tests): `if stateful:` is all the body does
    with it. An array there would fail on every call; what the author passes is a Python flag."""
    tests: set[int] = set()

    def test(e: cst.BaseExpression) -> None:
        if isinstance(e, cst.Name):
            tests.add(id(e))
        elif isinstance(e, cst.UnaryOperation) and isinstance(e.operator, cst.Not):
            test(e.expression)
        elif isinstance(e, cst.BooleanOperation):
            test(e.left)
            test(e.right)

    reads = []
    for n in descendants(fn.node.body):
        if isinstance(n, (cst.If, cst.While, cst.IfExp)):
            test(n.test)
        elif isinstance(n, cst.Name) and n.value == name:
            reads.append(n)
        elif isinstance(n, (cst.FunctionDef, cst.Lambda, cst.ClassDef)) and any(
                isinstance(d, (cst.Name, cst.Param)) and getattr(d, "value", None) == name for d in descendants(n)):
            return False  # a nested scope that reads or binds the name: not followed
    if not reads or not all(id(r) in tests for r in reads):
        return False
    # unless a call here hands it an array made on the spot (`calc(x, jnp.array(True))`)
    root: Scope = fn
    while root.parent is not None:
        root = root.parent
    param = fn.param(name)
    positional = [p for p in fn.params if p.index is not None]
    for n in descendants(root.node) if root.node is not None else ():
        if isinstance(n, cst.Call) and isinstance(n.func, cst.Name) and n.func.value == fn.name:
            for i, a in enumerate(n.args):
                hit = a.keyword.value == name if a.keyword is not None else (
                    not a.star and i < len(positional) and positional[i] is param)
                if hit and isinstance(a.value, cst.Call) \
                        and (dotted(a.value.func) or "").split(".")[0] in ("jnp", "jax", "np", "numpy"):
                    return False
    return True


def _operand_mentions(e: cst.BaseExpression, name: str, fn: Optional[FunctionInfo] = None) -> bool:
    """Whether `name` is part of the value of `e`, not only of an index or slice bound inside it
    (`jnp.mean(x[:-n])` takes `x`'s slice as its operand, `n` only bounds it), nor, with the function `fn`
    it is read in, only of a size inside it (`scan(step, c, jnp.ones(n))`: `n` only sizes the array)."""
    stack: list[cst.CSTNode] = [e]
    while stack:
        n = stack.pop()
        if isinstance(n, cst.Name) and n.value == name:
            return True
        if isinstance(n, cst.Subscript):
            stack.append(n.value)
            continue
        if fn is not None and isinstance(n, cst.Call):
            sizes = _size_arguments(n, _qualified(fn, n.func))
            if sizes:
                stack.append(n.func)
                stack.extend(a.value for a in n.args if not any(a.value is v for v in sizes))
                continue
        stack.extend(children(n))
    return False


def _passed_as_python(fn: FunctionInfo, call: cst.Call, q: str, name: str, depth: int) -> bool:
    """Whether `call` hands the parameter `name` on (as itself) to a def of the module, directly, through
    `functools.partial` or through a local bound to a transform or partial of it, whose parameter there
    is itself used only as a Python value."""
    args = list(call.args)
    target = None
    offset = 0
    if q in PARTIALS and args:
        target, args = _def_named(fn, args[0].value), args[1:]
    else:
        target, offset = _callee_def(fn, call.func)
    if target is None or target is fn or target.node is None:
        return False
    positional = [p for p in target.params if p.index is not None]
    for i, a in enumerate(args):
        if a.star or not (isinstance(a.value, cst.Name) and a.value.value == name):
            continue
        if a.keyword is not None:
            p = target.param(a.keyword.value)
        else:
            p = positional[i + offset] if i + offset < len(positional) else None
        if p is not None and p.annotation is None and not p.star and _python_valued(target, p.name, depth + 1):
            return True
    return False


def _def_named(fn: FunctionInfo, expr: cst.BaseExpression) -> Optional[FunctionInfo]:
    """The def a plain name refers to from `fn` (the nearest scope that binds it must hold a def)."""
    if not isinstance(expr, cst.Name):
        return None
    s: Optional[Scope] = fn
    while s is not None:
        if expr.value in s.defs:
            return s.defs[expr.value]
        if s.binds(expr.value) or (isinstance(s, FunctionInfo) and s.param(expr.value) is not None):
            return None
        s = s.parent
    return None


def _callee_def(fn: FunctionInfo, func: cst.BaseExpression) -> tuple[Optional[FunctionInfo], int]:
    """The def a call runs, with how many of its positional parameters are already filled: a def's name,
    or a local bound once to `partial(f, a, b)` or to a transform of `f` (`filter_value_and_grad(f)`), or a
    method of the class called on the method's own instance (`self.__call__(x, n)`: `self` is filled)."""
    if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and fn.is_method and fn.params \
            and fn.cls is not None and func.value.value == fn.params[0].name:
        method = fn.cls.defs.get(func.attr.value)
        return (method, 1) if method is not None and method.is_method and method.params else (None, 0)
    found = _def_named(fn, func)
    if found is not None or not isinstance(func, cst.Name):
        return found, 0
    values = fn.assigned.get(func.value, [])
    if len(values) != 1 or not isinstance(values[0], cst.Call) or not values[0].args:
        return None, 0
    made = values[0]
    head = _def_named(fn, made.args[0].value)
    if head is None:
        return None, 0
    if _qualified(fn, made.func) in PARTIALS:
        return head, sum(1 for a in made.args[1:] if a.keyword is None and not a.star)
    return (head, 0) if len(made.args) == 1 else (None, 0)


def _qualified(fn: FunctionInfo, func: cst.BaseExpression) -> str:
    """`jr.normal` -> `jax.random.normal` through the imports of the scopes around `fn`; a bare builtin
    name -> `builtins.NAME`; otherwise the dotted text."""
    text = dotted(func) or ""
    head, dot, rest = text.partition(".")
    s: Optional[Scope] = fn
    while s is not None:
        if head in s.imports:
            return s.imports[head] + dot + rest
        if s.binds(head):
            return text
        s = s.parent
    return "builtins." + text if text in ("range",) else text


def _size_arguments(call: cst.Call, q: str) -> list[cst.BaseExpression]:
    """The arguments of `call` that JAX needs as static sizes: shapes, counts, `reshape` sizes."""
    if q in SHAPE_ARGS:
        return args_at(call, *SHAPE_ARGS[q])
    if isinstance(call.func, cst.Attribute) and call.func.attr.value in SHAPE_METHODS:
        return [a.value for a in call.args if a.keyword is None and not a.star]
    return []


def _spec_elements(spec: cst.BaseExpression, depth: int = 0) -> Optional[list[cst.BaseExpression]]:
    """The entries of an `in_axes`/`in_specs` sequence, also when built by list arithmetic
    (`[0] + [None] * 9`); None when they cannot be read."""
    if depth > 8:
        return None
    if isinstance(spec, (cst.Tuple, cst.List)):
        if any(isinstance(el, cst.StarredElement) for el in spec.elements):
            return None
        return [el.value for el in spec.elements]
    if isinstance(spec, cst.BinaryOperation) and isinstance(spec.operator, cst.Add):
        left, right = _spec_elements(spec.left, depth + 1), _spec_elements(spec.right, depth + 1)
        return left + right if left is not None and right is not None else None
    if isinstance(spec, cst.BinaryOperation) and isinstance(spec.operator, cst.Multiply):
        seq, times = (spec.left, spec.right) if isinstance(spec.right, cst.Integer) else (spec.right, spec.left)
        items = _spec_elements(seq, depth + 1) if isinstance(times, cst.Integer) else None
        count = times.evaluated_value if isinstance(times, cst.Integer) else 0
        return items * count if items is not None and 0 <= count <= 256 else None
    return None


def _def_in_force(ref: CallableRef, fexpr: cst.BaseExpression, scope: Scope, at: Optional[int]) -> CallableRef:
    """`jax.pmap(partial(step, ...))` written between two `def step`: the transform wraps the def made
    before it in the same body, not the one that later takes the name."""
    name = fexpr.args[0].value if isinstance(fexpr, cst.Call) and fexpr.args else fexpr
    if not isinstance(name, cst.Name) or at is None:
        return ref
    # (only where the transform is written in the body that makes the defs: a call in a nested function
    # runs when that function does, and then the name holds the latest def)
    history = scope.def_history.get(name.value, [])
    if len(history) < 2 or ref.fn is not history[-1][1]:
        return ref
    before = [fn for stamp, fn in history if stamp < at]
    return dataclasses.replace(ref, fn=before[-1]) if before else ref


def _left_out_of_all(fn: FunctionInfo, offset: int, opened: list[Param], calls: list[cst.Call]) -> set[str]:
    """Those of the `opened` parameters that every one of `calls` leaves out; none when there is no call
    or one unpacks arguments."""
    if not calls or any(a.star for c in calls for a in c.args):
        return set()
    out = {p.name for p in opened}
    for c in calls:
        out &= _left_out(fn, offset, c)
    return out


def _left_out(fn: FunctionInfo, offset: int, call: cst.Call) -> set[str]:
    """The parameters with defaults that a call (with no `*args`/`**kw`) neither names nor fills by position
    (after the `offset` already bound): they keep their defaults."""
    named = {a.keyword.value for a in call.args if a.keyword is not None}
    filled = sum(1 for a in call.args if a.keyword is None)
    by_position = {p.name for p in [q for q in fn.params if q.index is not None][offset:offset + filled]}
    return {p.name for p in fn.params if p.has_default and not p.star and p.name not in named | by_position}


def _constant_default(expr: Optional[cst.BaseExpression]) -> bool:
    """A default that is a Python constant: a literal, a tuple of literals, arithmetic on numbers, or a class-level constant
    (`NormalizationType.NORMAL`, which JAX could not take as an array argument anyway)."""
    if _is_literal(expr):
        return True
    if isinstance(expr, cst.Tuple):
        return all(_constant_default(el.value) for el in expr.elements)
    if isinstance(expr, cst.BinaryOperation):  # `40 * 1024 * 1024`, `2 ** 20`
        return _numeric_constant(expr)
    return isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value[:1].isupper() \
        and expr.attr.value[:1].isupper()


def _numeric_constant(expr: cst.BaseExpression) -> bool:
    """Arithmetic on number literals (`40 * 1024 * 1024`, `-1`, `1e-3 / 2`)."""
    if isinstance(expr, cst.UnaryOperation):
        return _numeric_constant(expr.expression)
    if isinstance(expr, cst.BinaryOperation):
        return _numeric_constant(expr.left) and _numeric_constant(expr.right)
    return isinstance(expr, (cst.Integer, cst.Float))


# `container_site` of a seed whose arguments other seeds give (a jitted def only handed to a loop primitive).
_ARGS_ELSEWHERE = -1


def _residuals(m: ModuleModel, fwd: FunctionInfo) -> Optional[tuple[bool, ...]]:
    """Whether each residual a custom_vjp forward rule returns is traced, when every `return` of it gives
    `(out, (r1, r2, ...))` with residual tuples of one length; None otherwise."""
    if not isinstance(fwd.node, cst.FunctionDef):
        return None
    shapes = [r.value for r in _returns(fwd.node.body)]
    res = [x.elements[1].value for x in shapes if isinstance(x, cst.Tuple) and len(x.elements) == 2
           and not any(isinstance(el, cst.StarredElement) for el in x.elements)]
    displays = [r for r in res if isinstance(r, cst.Tuple)
                and not any(isinstance(el, cst.StarredElement) for el in r.elements)]
    if not shapes or len(displays) != len(shapes) or len({len(r.elements) for r in displays}) != 1:
        return None
    values = Values(m, fwd)
    return tuple(any(values.traced(r.elements[i].value) for r in displays)
                 for i in range(len(displays[0].elements)))


def _graph_nodes(fn: FunctionInfo, t: Transform, m: ModuleModel) -> set[str]:
    """Parameters that hold flax nnx Modules: annotated `nnx.Module`, or, under nnx's own transforms, used
    as one by the body (called, `model(x)`, or with a method called that no array or mapping has,
    `model.encode(x)`). A Module goes through a transform as its Variables, which are traced, and the rest
    of its graph, which is static: `model.cfg.num_layers` stays a Python int."""
    scope = fn.parent or m.root
    out = {p.name for p in fn.params if p.annotation_expr is not None and not p.star
           and m.resolve(p.annotation_expr, scope) in _NNX_MODULES}
    if not t.graph:
        return out
    params = {p.name for p in fn.params if not p.star}
    for call in fn.calls:
        f = call.func
        if isinstance(f, cst.Attribute) and f.attr.value not in ARRAY_METHODS and f.attr.value not in DICT_METHODS:
            f = f.value
        if isinstance(f, cst.Name) and f.value in params:
            out.add(f.value)
    return out


_NNX_MODULES = frozenset({"flax.nnx.Module", "flax.nnx.module.Module", "flax.nnx.Object"})


def _only_loop_body(fn: FunctionInfo, m: ModuleModel) -> bool:
    """A def nested in a function that only hands it to loop primitives (`@jit def body(i, val)` then
    `fori_loop(0, n, body, [a, b])`): what it is called with is what those primitives give it."""
    outer = fn.parent
    if not isinstance(outer, FunctionInfo) or not isinstance(outer.node, cst.FunctionDef):
        return False
    handed = 0
    for call in outer.calls:
        kind = LAX_BODIES.get(m.resolve(call.func, outer) or "")
        if kind is not None and kind[0] in _CARRIES:
            handed += sum(1 for a in call.args if isinstance(a.value, cst.Name) and a.value.value == fn.name)
    reads = sum(1 for n in descendants(outer.node) if isinstance(n, cst.Name) and n.value == fn.name)
    return handed > 0 and reads == handed + 1  # the def's own name, and each use a loop body


def _calls_all_known(fn: FunctionInfo, m: ModuleModel) -> bool:
    """A decorated def (`@jax.jit def update(i, state)`) that its module only calls, or hands to loop
    primitives or to a `partial` bound to a name used the same way, and that no other file names: its calls
    say what it is given. Their arguments are recorded as the sites that say which parameters hold Python
    containers (`update(i, {"a": a})`)."""
    memo = m.__dict__.setdefault("_calls_known", {})
    if id(fn) not in memo:
        memo[id(fn)] = _find_all_calls(fn, m)
    return memo[id(fn)]


def _find_all_calls(fn: FunctionInfo, m: ModuleModel) -> bool:
    owner = fn.parent or m.root
    if owner is m.root and "__all__" in m.root.assigned:
        return False  # (exported: any caller could pass anything)
    if owner is m.root and m.alone:  # (linted alone: any caller could; so does the project's pass decide,
        m.ask("named_elsewhere", fn.name, absent=True)  # when another file names it)
        return False
    if (not isinstance(owner, FunctionInfo) and owner is not m.root) or len(owner.def_history.get(fn.name, [])) > 1:
        return False  # (a method, or a name defined twice)
    index = _call_index(m)
    sites: dict[int, tuple] = {}
    aliases: dict[str, CallableRef] = {fn.name: CallableRef(fn)}
    homes: dict[str, Scope] = {fn.name: owner}
    for call, scope in index.partials.get(fn.name, ()):
        if m.lookup_function(fn.name, scope) is not fn:
            continue
        held = index.wrapped.get(id(call), call)  # `jax.jit(partial(f, n))` bound to a name: the same calls
        bound = [n for n, values in scope.assigned.items() if any(v is held for v in values)] \
            if isinstance(scope, FunctionInfo) or scope is m.root else []
        ref = m.resolve_callable(call, scope)
        if len(bound) != 1 or ref is None or ref.fn is not fn:
            return False
        aliases[bound[0]] = ref
        homes[bound[0]] = scope
    used = dict.fromkeys(aliases, 0)
    for name, ref in aliases.items():
        for call, scope in index.named.get(name, ()):
            if m.owner_of(name, scope) is not homes[name]:
                continue  # another binding of the name
            if (m.resolve_callable(call.func, scope) or m.jitted_alias(call.func, scope) or ref).fn is not fn:
                continue
            if any(a.star for a in call.args):
                return False
            used[name] += 1
            args = [dataclasses.replace(info, container=True) if not info.container
                    and m.python_container(a.value, scope) else info
                    for info, a in zip(_arg_infos(call, scope.function_scope(), None), call.args)]
            sites[id(call)] = (ref.offset, ref.bound_names, tuple(args))
        used[name] += sum(1 for scope in index.handoffs.get(name, ()) if m.owner_of(name, scope) is homes[name])
    if not any(used.values()):
        return False
    for name in aliases:
        # every mention of the name where it is bound is a call or a handoff counted above (and its binding)
        home = homes[name]
        mentions = name_counts(home.node if isinstance(home, FunctionInfo) else m.module)[0].get(name, 0)
        made = sum(1 for other in aliases if other != fn.name) if name == fn.name else 0
        if mentions != used[name] + 1 + made:
            return False
    if owner is m.root and m.ask("named_elsewhere", fn.name, absent=True):
        return False  # another file may call it with anything (asked last: it searches the project's text)
    fn.container_sites.update(sites)
    if len(aliases) == 1 and not used[fn.name] - len(sites):  # called by its name only, never handed on
        m.__dict__.setdefault("_literal_params", {})[id(fn)] = _given_literals(
            fn, [call for call, _scope in index.named.get(fn.name, ()) if id(call) in sites])
    return True


def _literal_params(fn: FunctionInfo, m: ModuleModel) -> set[str]:
    """The parameters of `fn` to which every call passes a Python literal (`"model"`, `0.5`, `None`, an
    f-string), or that a call leaves to a literal default, when the module's calls of `fn` by its name
    are all the calls there are (see `_calls_all_known`); empty otherwise."""
    if not _calls_all_known(fn, m):
        return set()
    return set(m.__dict__.get("_literal_params", {}).get(id(fn), ()))


def _given_literals(fn: FunctionInfo, calls: list[cst.Call]) -> set[str]:
    positional = [p for p in fn.params if p.index is not None]
    out = {p.name for p in fn.params if not p.star}
    for call in calls:
        given: dict[str, cst.BaseExpression] = {}
        for i, a in enumerate(call.args):
            if a.keyword is not None:
                given[a.keyword.value] = a.value
            elif i < len(positional):
                given[positional[i].name] = a.value
        out = {name for name in out if _python_literal(
            given[name] if name in given else fn.param(name).default)}  # type: ignore[union-attr]
    return out if calls else set()


def _python_literal(e: Optional[cst.BaseExpression]) -> bool:
    """A literal that evaluates to a Python scalar or string: a number, a string (an f-string or a
    concatenation too: always a `str`), True/False/None, or a sign or arithmetic of such literals."""
    if isinstance(e, (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString,
                      cst.FormattedString)):
        return True
    if isinstance(e, cst.Name):
        return e.value in ("True", "False", "None")
    if isinstance(e, cst.UnaryOperation) and isinstance(e.operator, (cst.Minus, cst.Plus)):
        return _python_literal(e.expression)
    if isinstance(e, cst.BinaryOperation):
        return _python_literal(e.left) and _python_literal(e.right)
    return False


@dataclass
class _CallIndex:
    """A module's calls by the bare name they call, the `partial`s of a bare name, how often each name is
    handed to a loop primitive, and the `jax.jit(...)` call around a call it wraps."""

    named: dict[str, list[tuple[cst.Call, Scope]]]
    partials: dict[str, list[tuple[cst.Call, Scope]]]
    handoffs: dict[str, list[Scope]]  # one entry per argument naming it
    wrapped: dict[int, cst.Call]


def _call_index(m: ModuleModel) -> _CallIndex:
    index = m.__dict__.get("_call_index")
    if index is not None:
        return index
    index = _CallIndex({}, {}, {}, {})
    for call, scope, _loop in m.all_calls:
        func = call.func
        if isinstance(func, cst.Name):
            index.named.setdefault(func.value, []).append((call, scope))
        if not call.args:
            continue
        first = call.args[0].value
        qual = m.resolve(func, scope) or ""
        if qual in PARTIALS and isinstance(first, cst.Name):
            index.partials.setdefault(first.value, []).append((call, scope))
        if qual in LAX_BODIES:
            for a in call.args:
                if isinstance(a.value, cst.Name):
                    index.handoffs.setdefault(a.value.value, []).append(scope)
        if isinstance(first, cst.Call) and m.jitted_alias_call(call, scope):
            index.wrapped[id(first)] = call
    m.__dict__["_call_index"] = index
    return index


# Where a loop primitive takes its initial carry, and where its body receives it: (argument position,
# keyword, the body's parameter position, how many parameters the body takes).
_CARRIES = {"fori_loop": (3, "init_val", 1, 2), "while_loop": (2, "init_val", 0, 1), "scan": (1, "init", 0, 2)}


def _carry_args(kind: str, call: cst.Call, m: "ModuleModel", scope: Scope) -> Optional[tuple["ArgInfo", ...]]:
    """The arguments a loop body receives, as far as containers go, when the initial carry is a Python
    container (a literal list or dict, or a name the caller knows holds one), or `scan`'s `xs` is a tuple,
    list or dict display (each step gets a slice of every leaf in that structure: `scan(f, c, (xs, ys))`
    gives f a tuple per step): None otherwise."""
    spec = _CARRIES.get(kind)
    init = _arg(call, spec[0], spec[1]) if spec is not None else None
    if spec is None:
        return None
    carry = init is not None and (isinstance(init, cst.Tuple) or m.python_container(init, scope))
    xs = _arg(call, 2, "xs") if kind == "scan" else None
    step = isinstance(xs, (cst.Tuple, cst.List, cst.Dict)) and not any(
        isinstance(el, (cst.StarredElement, cst.StarredDictElement)) for el in xs.elements)
    if not carry and not step:
        return None
    return tuple(ArgInfo("", None, False, False, container=(carry and i == spec[2] or step and i == 1))
                 for i in range(spec[3]))


def _body_arity(kind: str, call: cst.Call) -> int:
    """How many positional arguments a control-flow primitive passes to its body."""
    positional = sum(1 for a in call.args if a.keyword is None and not a.star)
    if kind in ("scan", "fori_loop", "associative_scan", "custom_root"):
        return 2
    if kind in ("while_loop", "map"):
        return 1
    if kind == "odeint":  # func(y, t, *args)
        return 2 + max(0, positional - 3)
    if kind in ("cond", "switch"):  # branch(*operands)
        return max(0, positional - (3 if kind == "cond" else 2))
    return 0


def _argnums(opts: dict[str, cst.BaseExpression]) -> Optional[list[int]]:
    """The `argnums` of a grad-like transform (default 0), or None when not a literal."""
    if "argnums" not in opts:
        return [0]
    return _literal_values(opts["argnums"], _int_leaf)


def _root(site_fn: Optional[FunctionInfo]) -> Optional[TraceTarget]:
    """How the outermost traced function on the way to `site_fn` (inclusive) is traced."""
    if site_fn is None or site_fn.target is None:
        return None
    return site_fn.target.root or site_fn.target


def target_through(fn: FunctionInfo, evidence: Optional[cst.CSTNode]) -> Optional[TraceTarget]:
    """How JAX reaches `fn` for a hazard on the traced parameters `evidence` reads (directly, or through the
    locals it names): a helper is shown, and verified, through a caller that passes a tracer into one of
    them, when the first caller found (`fn.target`) passes none (`forward(tokens, gd)` called from
    `loss_fn` with a static `gd` and from `evaluate` with a traced one: `if not gd` is reached via `evaluate`)."""
    t = fn.target
    if t is None or t.transform != "helper" or evidence is None or len(fn.site_calls) < 2:
        return t
    names = _params_read(fn, evidence)
    callers = [fn.site_calls[k][0] for k, params in fn.site_params.items() if params & names and k in fn.site_calls]
    if not callers or any(_via(c) == t.via for c in callers):
        return t
    return TraceTarget(fn.qualname, 0, "helper", (), (), _via(callers[0]), _root(callers[0]))


def _params_read(fn: FunctionInfo, node: cst.CSTNode) -> set[str]:
    """The traced parameters of `fn` an expression reads, directly or through locals bound from them
    (two bindings deep)."""
    names = {n.value for n in descendants(node) if isinstance(n, cst.Name)}
    found = names & fn.traced_params
    frontier = names - found
    for _ in range(2):
        reached: set[str] = set()
        for name in frontier:
            for value in fn.assigned.get(name, []):
                if value is not None:
                    reached |= {n.value for n in descendants(value) if isinstance(n, cst.Name)}
        found |= reached & fn.traced_params
        frontier = reached - found - frontier
    return found


def _via(site_fn: Optional[FunctionInfo]) -> tuple[str, ...]:
    """The chain of traced callers through which a function is reached, outermost first."""
    if site_fn is None:
        return ()
    outer = site_fn.target.via if site_fn.target is not None else ()
    return outer + (site_fn.qualname,)
