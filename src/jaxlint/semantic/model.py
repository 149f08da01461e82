"""ModuleModel: the facade rules ask about one module, built once per file."""
# One walk over the libcst tree collects scopes, imports, bindings, calls and the nodes rules want; then
# pure bookkeeping (no further tree walks) decides which functions are traced, with which parameters
# static, following transforms, control-flow bodies and helper calls to a fixed point. Rules only ask.
from __future__ import annotations

import builtins
import collections
import copy
import os
import sys
from contextlib import contextmanager
from typing import Any, Iterable, Iterator, Optional

import libcst as cst

from ..jaxapi import (
    CALLBACKS,
    CONTAINER_ALIASES,
    CONTAINER_ANNOTATIONS,
    LAX_BODIES,
    LIBRARY_STATIC_ATTRIBUTES,
    MJX_PACKAGES,
    MJX_SIZE_ATTRIBUTES,
    STATIC_UNWRAPS,
    PALLAS_PACKAGES,
    PALLAS_REF_CALLS,
    PARTIALS,
    TRANSFORMS,
    Transform,
    static_wrapper,
)
from ..syntax import (
    DECLARED_PYTHON, SCALAR_TYPES, _arg, _target_names, _is_const, _is_literal, _returns, annotation_name, args_at, contains, descendants, dotted, iter_children, literal_truth, only_called, plain_annotation,
    scalar_annotation, union_members,
)
from .builder import _REGISTER_CALLS, _Builder, _array_test, _field_is_static, _flatten_aux, _register_options, flag_tests, guard_helper, tracer_test
from .frameworks import Frameworks
from .scopes import (
    NO_ANSWER, Asked, CallableRef, ClassFacts, ClassInfo, DIFFERENTIATING, FunctionInfo, LoopInfo, ProjectClasses,
    Record, Scope, dead_branch,
)
from .refs import pallas_refs
from .traced import ArgInfo, _Tracer, ExternalCall, static_param_names
from .values import Values, flax_collections


# NumPy's array types.
_NUMPY_ARRAYS = frozenset({"numpy.ndarray", "numpy.typing.NDArray", "numpy.typing.ArrayLike"})
# Packages whose classes jaxlint knows (what is a pytree, a model module, a plain object).
# Library array annotations that admit NumPy arrays as well as JAX ones.
_LIBRARY_NUMPY_ALIASES = frozenset({"chex.Array", "chex.ArrayNumpy", "jax.typing.ArrayLike"})
# jaxtyping's dtype annotations, subscripted with the array type first (`Float[Array, "n"]`).
_DTYPE_ANNOTATIONS = frozenset({"Float", "Int", "Bool", "Shaped", "Num", "Real", "Key", "UInt", "Complex", "Inexact",
                                "Integer", "Float32", "Float64", "Int32", "Int64"})
_KNOWN_PACKAGES = frozenset({"jax", "jaxlib", "numpy", "flax", "equinox", "haiku", "optax", "chex"})


class ModuleModel:
    """Everything rules may ask about one module."""

    def __init__(self, module: cst.Module, path: str = "<string>", wanted: frozenset[type] = frozenset(),
                 extra_transforms: Optional[dict[str, Transform]] = None,
                 external: Optional[list["ExternalCall"]] = None,
                 project: Optional[ProjectClasses] = None, trace: bool = True, source: Optional[bytes] = None) -> None:
        self.module = module
        self.path = path
        self._source = source  # the module's text, when at hand (a cheap search before some walks)
        self._project = project
        # What this pass took for the answers of the project it was not given (see `ask`).
        self.asked: list[Asked] = []
        self.transforms = dict(TRANSFORMS)
        if extra_transforms:
            self.transforms.update(extra_transforms)
        self.root = Scope("module", "<module>", "", None, module)
        self.functions: list[FunctionInfo] = []
        self.fn_of_node: dict[int, FunctionInfo] = {}
        self.records: list[Record] = []
        self.test_nodes: set[int] = set()
        self.elif_nodes: set[int] = set()
        self.nested_boolops: set[int] = set()
        self.all_calls: list[tuple[cst.Call, Scope, Optional[LoopInfo]]] = []
        self.external_calls: dict[int, ExternalCall] = {}  # by id of the call node
        # qualified names of imported functions a PRNG key is handed to, asked of the project when known
        self.key_handoffs: set[str] = set()
        self.applied_calls: set[int] = set()  # ids of calls whose result is called at once: `jax.grad(f)(x)`
        # ids of the context managers of `with ... as name:`: the name holds what `__enter__` returns
        self.entered: set[int] = set()
        self.applied_parent: dict[int, cst.Call] = {}  # id of `jax.jit(f)` -> the call giving f its arguments
        self.call_order: dict[int, int] = {}  # id of a call -> its source-order stamp
        self.call_guards: dict[int, frozenset[str]] = {}  # id of a call -> the branch guards around it
        self.call_branches: dict[int, tuple[tuple[object, bool], ...]] = {}  # id of a call -> the if arms around it
        self.if_tests: dict[int, tuple[cst.BaseExpression, Scope]] = {}  # id of an `if` -> its test, its scope
        self.ifexp_tests: dict[int, tuple[cst.BaseExpression, Scope]] = {}  # the same for `a if test else b`
        self.constants_trusted: set[str] = set()  # module constants taken as flags (see `constant_flags`)
        self.eager_calls: set[int] = set()  # ids of calls under `with jax.ensure_compile_time_eval():`
        self.nojit_calls: set[int] = set()  # ids of calls under `with jax.disable_jit():`
        self.stamp_branches: dict[int, tuple[tuple[object, bool], ...]] = {}  # stamp of a record -> its if arms
        self.stamp_loops: dict[int, LoopInfo] = {}  # stamp of a record in a loop -> the innermost loop
        self.call_loops: dict[int, LoopInfo] = {}  # id of a call inside a loop of its function -> innermost loop
        self.comprehensions: dict[int, cst.BaseComp] = {}  # id -> comprehension (for "comp:<id>" guards)
        self._returns_busy: set[int] = set()
        self._site_returns: dict[tuple[int, frozenset[str], frozenset[str]], Optional[list[bool]]] = {}
        self._return_exprs: dict[int, list[cst.BaseExpression]] = {}  # a def's returned expressions
        self._calls_busy: set[int] = set()
        self._wanted = wanted
        self._aliasing: set[str] = set()
        self._aliases_busy: set[tuple[int, str]] = set()  # local aliases being followed (`x = y.a; y = x.b`)
        self._refs: Optional[dict[int, set[str]]] = None  # Pallas refs per function, computed on first use
        self._dead_defs: Optional[set[int]] = None  # module-level defs named only in calls that never run
        self._ref_handoffs: dict[int, ExternalCall] = {}  # calls handing refs to another file's functions
        self._external = external or []
        self.frameworks = Frameworks(self)
        self._resolved: Optional[dict[tuple[str, int], Optional[str]]] = None  # once built: (name, scope) -> qualname
        _Builder(self).build()
        self._resolved = {}  # the scopes' bindings are complete: each answer holds from now on
        self._register_classes()
        if trace:  # the project index asks for class facts and summaries only: which code is traced is not needed
            _Tracer(self).run(external or [])

    # ---- the project --------------------------------------------------------------------------

    def ask(self, question: str, *args: Any, absent: Any) -> Any:
        """What the project's other files answer to `question` (a `ProjectClasses` field) about `args`, or,
        in a pass without them, `absent`: what the module takes instead at the place asking. Such a pass
        records the question with that answer (`asked`): the project's pass of the same file, given the
        same answers to all of them, follows the same path to the same findings, so it need not run (see
        `replay`). A place whose decision rests on whether the project is known at all, rather than on an
        answer, records what makes the project's pass decide the same (see `alone`)."""
        if self._project is None:
            self.asked.append((question, args, absent))
            return absent
        return getattr(self._project, question)(*args)

    @property
    def alone(self) -> bool:
        """Whether the file is analysed without the project's other files (not recorded: a place asking
        this records, through `ask`, the answer that makes the project's pass decide as it does, or
        decides nothing the findings or followed calls show)."""
        return self._project is None

    def project_classes(self) -> Optional[ProjectClasses]:
        """The project's other files as given (for the summaries the project index keeps of this module)."""
        return self._project

    # ---- names ------------------------------------------------------------------------------

    def resolve(self, expr: cst.BaseExpression, scope: Scope) -> Optional[str]:
        """The qualified name an expression refers to through imports (`jnp.sum` -> `jax.numpy.sum`).

        Unbound names resolve to `builtins.<name>`; names bound locally to anything but an import
        resolve to None.
        """
        name = dotted(expr)
        if name is None:
            return None
        memo = self._resolved
        if memo is not None:
            key = (name, id(scope))
            if key in memo:
                return memo[key]
        head, _, rest = name.partition(".")
        qual = self._resolve_head(head, scope)
        out = None if qual is None else f"{qual}.{rest}" if rest else qual
        if memo is not None:
            memo[key] = out
        return out

    def _resolve_head(self, head: str, scope: Scope) -> Optional[str]:
        s: Optional[Scope] = scope
        first = True
        while s is not None:
            if isinstance(s, ClassInfo) and not first:
                s = s.parent  # class bodies are not visible from methods
                continue
            first = False
            if isinstance(s, FunctionInfo) and (head in s.declared_global):
                s = self.root
                continue
            if head in s.imports and head not in s.defs and head not in s.classes:
                return None if head in s.ambiguous_imports else s.imports[head]
            if s.binds(head) or (isinstance(s, FunctionInfo) and s.param(head) is not None):
                if s is self.root and head in s.assigned and len(s.assigned[head]) == 1:
                    value = s.assigned[head][0]
                    if value is not None and dotted(value) and head not in self._aliasing:
                        self._aliasing.add(head)  # module-level alias: jit = jax.jit
                        try:
                            return self.resolve(value, self.root)
                        finally:
                            self._aliasing.discard(head)
                return None
            s = s.parent
        return f"builtins.{head}"

    def lookup_function(self, name: str, scope: Scope) -> Optional[FunctionInfo]:
        s: Optional[Scope] = scope
        first = True
        while s is not None:
            if isinstance(s, ClassInfo) and not first:
                s = s.parent
                continue
            first = False
            if name in s.defs:
                return s.defs[name]
            if s.binds(name) or (isinstance(s, FunctionInfo) and s.param(name) is not None):
                return None
            s = s.parent
        return None

    def _bound_once_to_call(self, name: str, scope: Scope) -> Optional[tuple[Scope, cst.Call]]:
        """The scope (a function's or the module's) that binds `name`, as seen from `scope`, and the call it
        binds it to, when that is its only binding (not a parameter, not a class attribute)."""
        s: Optional[Scope] = scope
        while s is not None and not s.binds(name) and not (isinstance(s, FunctionInfo) and s.param(name) is not None):
            s = s.parent
        if s is None or isinstance(s, FunctionInfo) and s.param(name) is not None \
                or not isinstance(s, FunctionInfo) and s is not self.root or name in s.declared_global:
            return None
        values = s.assigned.get(name, [])
        if len(values) != 1 or not isinstance(values[0], cst.Call):
            return None
        return s, values[0]

    def _named_grad(self, name: str, scope: Scope) -> Optional[cst.Call]:
        """The `jax.grad(f)`/`jax.value_and_grad(f, ...)` call a function-local name is bound to, once, when
        the name is only ever called (never passed on): its calls give `f` its arguments."""
        bound = self._bound_once_to_call(name, scope)
        if bound is None:
            return None
        s, call = bound
        t = self.transforms.get(self.resolve(call.func, s) or "")
        if t is None or t.statics != "grad":
            return None  # (most names bound to a call hold something else: ask nothing more)
        return call if self.named_grad_call(call) is not None else None

    def jitted_alias(self, expr: cst.BaseExpression, scope: Scope) -> Optional[CallableRef]:
        """What a name bound once to `jax.jit(f)` (or `jax.jit(partial(f, ...))`) of a function of this module
        runs: its calls hand `f` their arguments, and get back what `f` returns."""
        bound = self._bound_once_to_call(expr.value, scope) if isinstance(expr, cst.Name) else None
        if bound is None or not self.jitted_alias_call(bound[1], bound[0]):
            return None
        return self.resolve_callable(bound[1].args[0].value, bound[0])

    def jitted_alias_call(self, call: cst.Call, scope: Scope) -> bool:
        """`jax.jit(f)`, `jax.jit(f, static_argnums=...)`: a jit of one positional callable."""
        if not call.args or call.args[0].keyword is not None or call.args[0].star \
                or any(a.keyword is None for a in call.args[1:]):
            return False
        t = self.transforms.get(self.resolve(call.func, scope) or "")
        return t is not None and t.statics == "jit"

    def _named_partial(self, name: str, scope: Scope) -> Optional[CallableRef]:
        """What a name bound once, in a function body or at module level, to `partial(f, ...)` of a function
        of this module calls."""
        bound = self._bound_once_to_call(name, scope)
        if bound is None or self.resolve(bound[1].func, bound[0]) not in PARTIALS:
            return None
        s, call = bound
        busy = self.__dict__.setdefault("_partials_busy", set())
        key = (id(s), name)
        if key in busy:
            return None  # `f = partial(f, ...)` refers to an earlier binding of the same name
        busy.add(key)
        try:
            return self.resolve_callable(call, s)
        finally:
            busy.discard(key)

    def named_grad_call(self, call: cst.Call) -> Optional[str]:
        """The name a grad-like transform call is bound to in a function body, when that name is bound
        only to it and only called (so each call says which arguments `f` gets); else None."""
        cache = self.__dict__.setdefault("_named_grads", {})
        if id(call) in cache:
            return cache[id(call)]
        cache[id(call)] = None
        for fn in self.functions:
            for name, values in fn.assigned.items():
                if len(values) != 1 or values[0] is not call:
                    continue
                scope = fn
                t = self.transforms.get(self.resolve(call.func, scope) or "")
                if t is None or t.statics != "grad" or not call.args or call.args[0].keyword is not None \
                        or call.args[0].star or self.resolve_callable(call.args[0].value, scope) is None:
                    return None
                if only_called(fn.node, name):
                    cache[id(call)] = name
                return cache[id(call)]
        for name, values in self.root.assigned.items():
            if len(values) != 1 or values[0] is not call:
                continue
            t = self.transforms.get(self.resolve(call.func, self.root) or "")
            if t is None or t.statics != "grad" or not call.args or call.args[0].keyword is not None \
                    or call.args[0].star or self.resolve_callable(call.args[0].value, self.root) is None:
                return None
            if self._only_transformed(name):
                cache[id(call)] = name
            return cache[id(call)]
        return None

    def _only_transformed(self, name: str) -> bool:
        """Whether every read of a module-level `name` is the function a transform is applied to
        (`g = jax.jacfwd(f, argnums=1)` then `jax.vmap(g, in_axes=(None, 0))`): those transforms trace `f`."""
        handed = 0
        for call, scope, _loop in self.all_calls:
            first = call.args[0].value if call.args and call.args[0].keyword is None and not call.args[0].star else None
            if isinstance(first, cst.Name) and first.value == name and self.owner_of(name, scope) is self.root \
                    and self.transform_of(call.func, scope) is not None:
                handed += 1
        reads = sum(1 for n in descendants(self.module) if isinstance(n, cst.Name) and n.value == name)
        return handed > 0 and reads == handed + 1  # the binding, and each use handed to a transform

    def call_scopes(self, fn: "FunctionInfo") -> list[Scope]:
        """The scopes of the module's calls that run `fn` by name (not through a transform's result)."""
        return [scope for call, scope, _loop in self.all_calls
                if (ref := self.resolve_callable(call.func, scope)) is not None and ref.fn is fn]

    def differentiated_only(self, fn: "FunctionInfo") -> bool:
        """Whether every transform that reaches `fn` (directly, or through the traced functions that call
        it) only differentiates it, staging nothing (`jax.value_and_grad(loss)` without jit, no vmap):
        there its values are JVP tracers around concrete primals."""
        memo = self.__dict__.setdefault("_differentiated", {})
        if id(fn) not in memo:
            memo[id(fn)] = False  # (a cycle of helpers answers no until it is worked out)
            memo[id(fn)] = fn.traced and not fn.staged and not fn.cached \
                and fn.transforms - {"helper"} <= DIFFERENTIATING and all(
                    isinstance(scope, FunctionInfo) and scope is not fn and self.differentiated_only(scope)
                    for scope, _stamp in fn.helper_sites) and bool(fn.transforms - {"helper"} or fn.helper_sites)
        return memo[id(fn)]

    def retraced_each_call(self, fn: "FunctionInfo") -> bool:
        """A jitted def (by decorator) whose every call hands a static parameter the variable of a `for`
        loop around the call (`for env in envs: train(key, state, env)` with `env` static): each pass is
        a new static value, hence a new trace, so what runs while tracing runs on every call. Its name is
        only called, in the scope defining it."""
        owner = fn.parent or self.root
        if not fn.declared_static or not any(order == -1 for _s, order in fn.trace_sites) or owner.node is None \
                or len(owner.bind_order.get(fn.name, [])) > 1 or not only_called(owner.node, fn.name):
            return False
        calls = [(call, scope, loop) for call, scope, loop in self.all_calls
                 if isinstance(call.func, cst.Name) and call.func.value == fn.name
                 and (ref := self.resolve_callable(call.func, scope)) is not None and ref.fn is fn]
        if not calls:
            return False
        positional = [p for p in fn.params if p.index is not None]
        for call, _scope, loop in calls:
            if loop is None or not isinstance(loop.node, cst.For) or any(a.star for a in call.args):
                return False
            varying = set(_target_names(loop.node.target))
            given: dict[str, cst.BaseExpression] = {}
            for i, a in enumerate(call.args):
                name = a.keyword.value if a.keyword is not None else positional[i].name if i < len(positional) else None
                if name is not None:
                    given[name] = a.value
            if not any(isinstance(given.get(p), cst.Name) and given[p].value in varying  # type: ignore[union-attr]
                       for p in fn.declared_static):
                return False
        return True

    def only_in_dead_code(self, fn: "FunctionInfo") -> bool:
        """A module-level def that this module names only inside calls that never run (`jax.vmap(jaxspence)`
        under `if "jax" in np.__name__:` with `np` NumPy), that `__all__` does not export and that no other
        file of the project calls (when the project is known): the module wires it only into a branch that
        never runs, so nothing runs it and the lax bodies it holds are never traced."""
        if self._dead_defs is None:
            self._dead_defs = set()
            dead_refs = {id(n) for call, _scope, _loop in self.all_calls
                         if "never:" in self.call_guards.get(id(call), frozenset()) for n in descendants(call)}
            if dead_refs:
                refs: dict[str, list[int]] = {}
                nodes = list(descendants(self.module))
                own = {id(n.name) for n in nodes if isinstance(n, (cst.FunctionDef, cst.ClassDef))}
                for n in nodes:
                    if isinstance(n, cst.Name) and id(n) not in own:  # (a def's own name is no use of it)
                        refs.setdefault(n.value, []).append(id(n))
                exported = "__all__" in self.root.assigned
                for name, f in self.root.defs.items():
                    uses = refs.get(name, [])
                    if uses and all(r in dead_refs for r in uses) and not exported \
                            and not self.ask("mentioned_elsewhere", name, absent=False):
                        self._dead_defs.add(id(f))
        top = fn
        while top.parent is not None and top.parent is not self.root and isinstance(top.parent, FunctionInfo):
            top = top.parent
        return id(top) in self._dead_defs

    def restores(self, fn: "FunctionInfo", name: str) -> bool:
        """`prev = _CONTEXT; _CONTEXT = new; try: yield finally: _CONTEXT = prev`: `fn` saves the variable
        `name` in a local and puts it back in a `finally`, so what it stores there lives only while `fn` runs
        (a context manager setting trace-time state): nothing outlives the trace, and the read only saves it."""
        if not isinstance(fn.node, cst.FunctionDef):
            return False
        saved = {t.target.value for n in descendants(fn.node) if isinstance(n, cst.Assign)
                 and isinstance(n.value, cst.Name) and n.value.value == name
                 for t in n.targets if isinstance(t.target, cst.Name)}
        for n in descendants(fn.node):
            if isinstance(n, cst.Try) and n.finalbody is not None:
                for stmt in descendants(n.finalbody):
                    if isinstance(stmt, cst.Assign) and isinstance(stmt.value, cst.Name) and stmt.value.value in saved \
                            and any(isinstance(t.target, cst.Name) and t.target.value == name for t in stmt.targets):
                        return True
        return False

    def trace_counter(self, fn: "FunctionInfo", name: str) -> bool:
        """`global traces; traces += 1` (or `traces = traces + 1`) as the only use of `name` in `fn`, and an
        assertion on `name` where it lives (`assert traces == 1`, `self.assertEqual(traces, 1)`): a counter
        of traces kept on purpose, to test that a function is traced once. A closure's count that its
        function never reads is harmless too."""
        owner = self.owner_of(name, fn.parent or self.root) if fn.parent is not None else None
        if owner is None or owner.node is None or not isinstance(fn.node, cst.FunctionDef):
            return False
        writes = [n for n in descendants(fn.node) if isinstance(n, (cst.AugAssign, cst.Assign))
                  and any(isinstance(t, cst.Name) and t.value == name
                          for t in ([n.target] if isinstance(n, cst.AugAssign) else [a.target for a in n.targets]))]
        if len(writes) != 1:
            return False
        node = writes[0]
        if isinstance(node, cst.AugAssign):
            ok, uses = isinstance(node.value, (cst.Integer, cst.Float)), 2
        else:
            v = node.value
            ok = isinstance(v, cst.BinaryOperation) and isinstance(v.left, cst.Name) and v.left.value == name \
                and isinstance(v.right, (cst.Integer, cst.Float)) and len(node.targets) == 1
            uses = 3
        # the `global`/`nonlocal` declaration and the increment: nothing else reads the count
        if not ok or sum(1 for n in descendants(fn.node) if isinstance(n, cst.Name) and n.value == name) != uses:
            return False
        if isinstance(owner, FunctionInfo):
            inside = {id(n) for n in descendants(fn.node)}
            stores = {id(t.target) for n in descendants(owner.node) if isinstance(n, cst.Assign) for t in n.targets}
            if not any(isinstance(n, cst.Name) and n.value == name and id(n) not in inside and id(n) not in stores
                       for n in descendants(owner.node)):
                return True  # a count nobody reads: when it changes does not matter
        for n in descendants(owner.node):
            if isinstance(n, cst.Assert) and any(isinstance(m, cst.Name) and m.value == name for m in descendants(n.test)):
                return True
            if isinstance(n, cst.Call) and (dotted(n.func) or "").rsplit(".", 1)[-1].lower().startswith("assert") \
                    and any(isinstance(m, cst.Name) and m.value == name for a in n.args for m in descendants(a.value)):
                return True
        return False

    def scratch_attribute(self, target: cst.BaseExpression, fn: "FunctionInfo") -> bool:
        """`self.pe = np.zeros(...)` where every mention of `.pe` in this module is `self.pe` in a method
        whose straight-line body writes it before anything reads it, and no other project file mentions
        `.pe`, and the writing method reads it back: a local variable kept on the instance. Every reader
        writes it first on each call, so the tracer a trace leaves there is never looked at."""
        if not (isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name) and fn.is_method
                and fn.params and target.value.value == fn.params[0].name):
            return False
        attr = target.attr.value
        stores = {id(t.target) for n in descendants(fn.node) if isinstance(n, cst.Assign) for t in n.targets}
        if not any(isinstance(n, cst.Attribute) and n.attr.value == attr and id(n) not in stores
                   for n in descendants(fn.node)):
            return False  # only written: kept for someone outside to read (`model.last_loss`)
        known = self.__dict__.setdefault("_scratch_attributes", {})
        if attr not in known:
            known[attr] = False
            mentions = {id(n) for n in descendants(self.module) if isinstance(n, cst.Attribute) and n.attr.value == attr}
            for f in self.functions:
                if f.is_method and f.params and isinstance(f.node, cst.FunctionDef) and f.parent is f.cls:
                    mentions -= self._written_first(f, attr)
            known[attr] = not mentions and not self.ask("attribute_elsewhere", attr, absent=True)
        return known[attr]

    @staticmethod
    def _written_first(fn: "FunctionInfo", attr: str) -> set[int]:
        """The `self.<attr>` nodes of a method whose first statement mentioning one, in its straight-line
        body, assigns it without reading it; none otherwise."""
        me = fn.params[0].name
        inside = [n for n in descendants(fn.node) if isinstance(n, cst.Attribute) and n.attr.value == attr]
        ids = {id(n) for n in inside}
        if not inside or not all(isinstance(n.value, cst.Name) and n.value.value == me for n in inside):
            return set()
        body = fn.node.body.body if isinstance(fn.node.body, cst.IndentedBlock) else ()
        for stmt in body:
            if not any(id(n) in ids for n in descendants(stmt)):
                continue
            small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
            first = isinstance(small, cst.Assign) and any(id(t.target) in ids for t in small.targets) \
                and not any(id(n) in ids for n in descendants(small.value))
            return ids if first else set()
        return set()

    def stored_unused(self, call: cst.Call, scope: Scope) -> bool:
        """`self._fast = jax.jit(self._slow)` (or a local bound so) whose name nothing reads: not in this
        module, and, for an attribute, not called by another file of the project. The wrapped function is
        never traced through it (code that switched to the plain call and left the jit behind)."""
        fn = scope.function_scope()
        if fn is None or not isinstance(fn.node, cst.FunctionDef):
            return False
        targets = [t for t, v, how in fn.events if v is call and how == "="]
        if len(targets) != 1:
            return False
        target = targets[0]
        if isinstance(target, cst.Name):
            return not any(isinstance(n, cst.Name) and n.value == target.value and n is not target
                           for n in descendants(fn.node))
        if not (isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name) and fn.params
                and fn.is_method and target.value.value == fn.params[0].name):
            return False
        attr = target.attr.value
        counts = self.__dict__.get("_attribute_counts")
        if counts is None:
            counts = self.__dict__["_attribute_counts"] = collections.Counter(
                n.attr.value for n in descendants(self.module) if isinstance(n, cst.Attribute))
        if counts[attr] != 1:
            return False  # read (or stored again) somewhere in this module
        if attr.startswith("_") and fn.cls is not None and not [b for b in fn.cls.bases if b != "object"]:
            return True  # private to a class with no base that could call it (`_update` declared by a base)
        return not self.ask("mentioned_elsewhere", attr, absent=True)

    def python_container(self, value: cst.BaseExpression, scope: Scope, _busy: Optional[set] = None) -> bool:
        """Whether an expression holds a Python list or dict: a display or comprehension, a name every binding
        of which holds one, or what `lax.fori_loop`/`while_loop` return when their initial carry is one (the
        loop keeps the carry's structure)."""
        if isinstance(value, (cst.List, cst.ListComp, cst.Dict, cst.DictComp)):
            return True
        busy = set() if _busy is None else _busy
        if isinstance(value, cst.Name):
            owner = self.owner_of(value.value, scope)
            if owner is None:
                return False
            if isinstance(owner, FunctionInfo) and value.value in owner.container_names:
                return True
            key = (id(owner), value.value)
            if key in busy:
                return True  # `acc = fori_loop(..., acc)`: the other bindings decide
            busy.add(key)
            values = owner.assigned.get(value.value, [])
            return bool(values) and all(v is not None and self.python_container(v, owner, busy) for v in values)
        if isinstance(value, cst.Call):
            body = LAX_BODIES.get(self.resolve(value.func, scope) or "")
            carry = _CARRY_INIT.get(body[0]) if body is not None else None
            init = _arg(value, *carry) if carry is not None else None
            if init is not None:
                return self.python_container(init, scope, busy)
            return self._hands_back_container(value, scope, busy)
        return False

    def _hands_back_container(self, call: cst.Call, scope: Scope, busy: set) -> bool:
        """`ylm = update(ylm)` with a def of this module (or a `partial` of one) that returns only its own
        parameter, as given: the call returns the container it was handed; or that returns only a local
        holding a container (`alm = {...}; return alm`)."""
        ref = self.resolve_callable(call.func, scope) or self.jitted_alias(call.func, scope)
        if ref is None or ref.lead or not isinstance(ref.fn.node, cst.FunctionDef) or any(a.star for a in call.args):
            return False
        fn = ref.fn
        returned = {r.value.value if isinstance(r.value, cst.Name) else None for r in _returns(fn.node.body)}
        if len(returned) != 1 or None in returned:
            return False
        name = returned.pop()
        p = fn.param(name)
        if p is None and fn.assigned.get(name):
            return self.python_container(cst.Name(name), fn, busy)  # `alm = {...}; ...; return alm`
        if p is None or p.star or name in ref.bound_names or fn.assigned.get(name):
            return False
        positional = [q.name for q in fn.params if q.index is not None]
        given = None
        pos = ref.offset
        for a in call.args:
            if a.keyword is not None:
                if a.keyword.value == name:
                    given = a.value
            elif pos < len(positional):
                if positional[pos] == name:
                    given = a.value
                pos += 1
        return given is not None and self.python_container(given, scope, busy)

    def static_property(self, e: cst.Attribute, scope: Scope) -> bool:
        """Whether `obj.attr` is a property of obj's class (known from `self` or an annotation naming a class
        of this module or of another project file) that returns only shape facts (`return self.params.shape[0]`)."""
        fn = scope.function_scope()
        cls = self.class_of(e.value, fn) if fn is not None else None
        attr = e.attr.value
        if cls is None and fn is not None and attr in LIBRARY_STATIC_ATTRIBUTES.get(
                self._annotated_qualname(e.value, fn) or "", ()):
            return True  # `signal.res_beta` with `signal: e3nn.SphericalSignal`: a library class's shape fact
        if cls is None and fn is not None and attr in MJX_SIZE_ATTRIBUTES and MJX_PACKAGES & self.imported_packages() \
                and self._annotation_of(e.value, fn) is None and not self._stores_attribute(attr):
            return True  # `mjx_model.nu` of a model handed along unannotated, in a module simulating with MJX
        if cls is None and fn is not None:
            facts = self._project_class_of(e.value, fn)
            if facts is not None:
                return attr in facts.static_properties
        if cls is None:
            # the object's class is not known: every property of that name in this module returns only
            # Python values for a traced instance (a shape fact, or what a helper computes from the class's
            # static fields), and no class here stores an attribute of that name (asked per attribute read: kept);
            # else, defined in no class here, every property of that name in the project returns only
            # Python values and no project file stores an attribute of that name
            known = self.__dict__.setdefault("_shape_props", {})
            if attr not in known:
                props = [f for f in self.functions if f.is_method and f.name == attr]
                known[attr] = not any(attr in c.fields for c in self._all_classes()) and not any(
                    isinstance(t, cst.Attribute) and t.attr.value == attr
                    for f in self.functions if not self._plain_object_method(f) for t, _v, _h in f.events) and (
                    all(self._static_prop(f) for f in props) if props
                    else self.ask("static_property", attr, absent=False))
            return known[attr]
        prop = cls.defs.get(attr)
        if prop is None and attr not in cls.field_types:  # a property inherited from a base in another file
            return any(attr in f.static_properties for f in self.inherited_facts(cls))
        return prop is not None and self._static_prop(prop)

    def returns_instance(self, call: cst.Call) -> bool:
        """Whether a method call (`var.get_slot()`, the receiver's class unknown) returns an object of a class
        of this module: every method of that name here is annotated to return one (no array type is
        defined here, so the object is no tracer, whatever its fields hold)."""
        func = call.func
        if not isinstance(func, cst.Attribute):
            return False
        methods = [f for f in self.functions if f.is_method and f.name == func.attr.value]
        return bool(methods) and all(
            isinstance(f.node, cst.FunctionDef) and f.node.returns is not None
            and self._names_local_class(plain_annotation(f.node.returns.annotation)) for f in methods)

    def _names_local_class(self, ann: Optional[cst.BaseExpression]) -> bool:
        if isinstance(ann, cst.Subscript):  # `Slot[T]`
            ann = ann.value
        return isinstance(ann, cst.Name) and ann.value in self.root.classes

    def _stores_attribute(self, attr: str) -> bool:
        """Whether a class of this module has a field of this name, or a function stores one (`obj.nu = ...`)."""
        return any(attr in c.fields for c in self._all_classes()) or any(
            isinstance(t, cst.Attribute) and t.attr.value == attr for f in self.functions for t, _v, _h in f.events)

    def inherited_facts(self, cls: ClassInfo, depth: int = 0) -> list[ClassFacts]:
        """What other project files say about the bases of a class of this module (through its bases here)."""
        if depth > 8:
            return []
        out: list[ClassFacts] = []
        for b in cls.bases:
            local = self.root.classes.get(b)
            if local is not None and local is not cls:
                out += self.inherited_facts(local, depth + 1)
            elif "." in b and not b.startswith("builtins."):
                facts = self.ask("lookup", b, absent=None)
                if facts is not None:
                    out.append(facts)
        return out

    def instances_are_pytrees(self, cls: ClassInfo) -> bool:
        """Whether every instance of a class is a pytree: it is registered, or it is an abstract base (it
        declares abstract methods, so it is never instantiated itself) and each of its subclasses, in this
        file and the project's other files, is a registered pytree (one at least)."""
        if cls.pytree:
            return True
        if cls.parent is not self.root or not any(
                isinstance(fn.node, cst.FunctionDef) and any(
                    (self.resolve(d.decorator, cls) or "") in ("abc.abstractmethod", "abc.abstractproperty")
                    for d in fn.node.decorators) for fn in cls.defs.values()):
            return False
        here = [c.pytree for c in self.root.classes.values() if c is not cls and cls.name in c.bases]
        elsewhere = [f.pytree for f in self.ask("subclasses", cls.name, absent=[])]
        return bool(here + elsewhere) and all(here + elsewhere)

    def opaque_base(self, cls: ClassInfo) -> bool:
        """Whether a class derives (through its bases here and in the project's files) from a class of a
        package outside the project that is not the standard library nor JAX or a model library: what its
        instances are (a pytree, hashable) is not known (`class Orbit(coordinax.AbstractCoordinate)`)."""
        seen: set[str] = set()

        def opaque(bases: Iterable[str], depth: int) -> bool:
            for b in bases:
                if b in seen or depth > 8:
                    continue
                seen.add(b)
                local = self.root.classes.get(b)
                if local is not None:
                    if local is not cls and opaque(local.bases, depth + 1):
                        return True
                    continue
                if "." not in b:
                    if not hasattr(builtins, b):
                        return True  # a name from `import *` or a dynamic base
                    continue
                head = b.split(".")[0]
                if head in sys.stdlib_module_names or head in _KNOWN_PACKAGES:
                    continue
                if self.alone:
                    if b.startswith(".") or self._beside(head):
                        # a module of the project, maybe: the project's run, which can look, decides (the
                        # same when it knows no class of that name: None, an opaque base)
                        self.ask("lookup", b, absent=NO_ANSWER)
                        continue
                    return True
                facts = self.ask("lookup", b, absent=None)
                if facts is None or opaque(facts.bases, depth + 1):
                    return True
            return False

        return opaque(cls.bases, 0)

    def _beside(self, package: str) -> bool:
        """Whether a folder above this file holds a module or package of that name (a sibling package of
        the same repository, which the project's files may define)."""
        folder = os.path.dirname(os.path.abspath(self.path)) if self.path else ""
        for _ in range(8):
            if not folder:
                break
            if os.path.isdir(os.path.join(folder, package)) or os.path.isfile(os.path.join(folder, package + ".py")):
                return True
            parent = os.path.dirname(folder)
            if parent == folder:
                break
            folder = parent
        return False

    def _plain_object_method(self, fn: FunctionInfo) -> bool:
        """A method of a class whose instances are not pytrees nor framework modules: the attributes it
        stores are configuration of a Python object (`self.ensemble_size = ensemble_size` in a solver)."""
        cls = fn.cls
        return cls is not None and fn.is_method and not cls.pytree and self.frameworks.kind(cls) is None

    def _static_properties(self, cls: ClassInfo) -> frozenset[str]:
        """A class's properties that compute only Python values from the instance, for the other files."""
        return frozenset(name for name, fn in cls.defs.items() if fn.is_method and self._static_prop(fn))

    def _static_prop(self, prop: FunctionInfo) -> bool:
        """A property returning a shape fact, or only Python values when the instance's leaves are traced
        (`return 1 if self.pos.ndim < 3 else self.pos.shape[-3]`)."""
        if self._shape_property(prop):
            return True
        if not _is_property(prop) or len(prop.decorators) != 1:
            return False
        known = self.__dict__.setdefault("_static_props", {})
        if id(prop) not in known:
            known[id(prop)] = False  # (a property reading itself)
            known[id(prop)] = self._returns_only_python(prop)
        return known[id(prop)]

    def _shape_property(self, prop: FunctionInfo) -> bool:
        """A `@property`/`@cached_property` whose one statement returns a shape fact."""
        if not isinstance(prop.node, cst.FunctionDef) or not _is_property(prop):
            return False
        body = prop.node.body
        stmts = body.body if isinstance(body, cst.IndentedBlock) else []
        docless = [s for s in stmts if not (isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1
                                             and isinstance(s.body[0], cst.Expr)
                                             and isinstance(s.body[0].value, cst.SimpleString))]
        if len(docless) != 1 or not isinstance(docless[0], cst.SimpleStatementLine) \
                or not isinstance(docless[0].body[0], cst.Return) or docless[0].body[0].value is None:
            return False
        return shape_fact(docless[0].body[0].value)

    def callee(self, call: cst.Call, scope: Scope) -> Optional[CallableRef]:
        """The function of this module a call runs: its callable resolved, or, for a name bound once
        to a transform of a function (`step = jax.jit(train_step)`), that function."""
        ref = self.resolve_callable(call.func, scope, call)
        if ref is None and isinstance(call.func, cst.Name):
            owner = self.owner_of(call.func.value, scope)
            values = owner.assigned.get(call.func.value, []) if owner is not None else []
            if owner is not None and len(values) == 1 and isinstance(values[0], cst.Call) and values[0].args \
                    and self.resolve(values[0].func, owner) in self.transforms:
                ref = self.resolve_callable(values[0].args[0].value, owner)
        return ref

    def resolve_callable(self, expr: cst.BaseExpression, scope: Scope,
                         call: Optional[cst.Call] = None) -> Optional[CallableRef]:
        """Resolve an expression used as a callable to a def or lambda of this module (`call`, when
        given, is the call it heads: linen's `apply(..., method=...)` names the method there)."""
        if isinstance(expr, cst.Lambda):
            fn = self.fn_of_node.get(id(expr))
            return CallableRef(fn) if fn else None
        if isinstance(expr, cst.Name):
            fn = self.lookup_function(expr.value, scope)
            if fn is not None and self.dispatched(fn):
                return None  # `@multimethod` defined twice: the arguments' types pick the def at run time
            if fn is None:
                grad = self._named_grad(expr.value, scope)
                if grad is not None:  # `grad_fn(params, x, flag)`: the differentiated function, called so
                    return self.resolve_callable(grad.args[0].value, scope)
                bound = self._named_partial(expr.value, scope)
                if bound is not None:  # `step = partial(update, lr=0.1)`, then `step(x)` or `jax.jit(step)`
                    return bound
            return CallableRef(fn) if fn else self.frameworks.callable_of(expr, scope, call)
        if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name):
            owner = expr.value.value
            fscope = scope.function_scope()
            if fscope is not None and fscope.cls is not None and fscope.is_method and fscope.params \
                    and fscope.params[0].name == owner:
                fn = fscope.cls.defs.get(expr.attr.value)
                if fn is not None and fn.is_accessor:
                    return None  # `self.integral(x)` of a property: what its getter returned runs
                if fn is not None:
                    return CallableRef(fn, offset=1, receiver=expr.value) if fn.is_method else CallableRef(fn)
            cls = self.root.classes.get(owner)
            if cls is not None:
                fn = cls.defs.get(expr.attr.value)
                if fn is not None and not fn.is_accessor:  # (`SAE.create(config, key)` binds a classmethod's `cls`)
                    return CallableRef(fn, offset=1) if fn.is_classmethod else CallableRef(fn)
            found = self.frameworks.callable_of(expr, scope, call)
            if found is None:
                cls = self.constructed_class(owner, scope)
                fn = cls.defs.get(expr.attr.value) if cls is not None else None
                if fn is not None and fn.is_method and not fn.is_accessor and not fn.is_classmethod:
                    # `rec = Recorder(); jax.jit(rec.record)`: the method, its `self` bound to that instance
                    return CallableRef(fn, offset=1, receiver=expr.value)
            return found
        if isinstance(expr, cst.Call) and self.resolve(expr.func, scope) in PARTIALS and expr.args:
            inner = self.resolve_callable(expr.args[0].value, scope)
            if inner is None:
                return None
            positional = sum(1 for a in expr.args[1:] if a.keyword is None and not a.star)
            keywords = frozenset(a.keyword.value for a in expr.args[1:] if a.keyword is not None)
            for a in expr.args[1:]:
                if a.star != "**":
                    continue
                spread = self.dict_keys(a.value, scope)
                if spread is not None:
                    keywords |= spread  # `common = dict(spec=spec, repred=True)`, then `partial(step, **common)`
                else:
                    # `partial(kernel, **options)`: the keyword-only parameters are what such a splat is for
                    # (a positional caller of the partial cannot reach them), so they count as bound
                    keywords |= {p.name for p in inner.fn.params if p.index is None and not p.star}
            taken = min(positional, inner.lead)  # partial(model.apply, variables) binds the leading ones first
            return CallableRef(inner.fn, inner.offset + positional - taken, inner.bound_names | keywords,
                               inner.lead - taken, inner.receiver)
        return self.frameworks.callable_of(expr, scope, call)

    def dict_keys(self, expr: cst.BaseExpression, scope: Scope) -> Optional[frozenset[str]]:
        """The keys of a mapping spread with `**expr`, when `expr` is a name bound once to `dict(a=..., b=...)`
        or to a display with string keys (keys a later `options["c"] = ...` adds are not seen)."""
        if not isinstance(expr, cst.Name):
            return None
        owner = self.owner_of(expr.value, scope)
        values = owner.assigned.get(expr.value, []) if owner is not None else []
        if len(values) != 1 or values[0] is None:
            return None
        value = values[0]
        if isinstance(value, cst.Call) and self.resolve(value.func, owner) == "builtins.dict" \
                and all(a.keyword is not None for a in value.args):
            return frozenset(a.keyword.value for a in value.args)
        if isinstance(value, cst.Dict) and all(isinstance(el, cst.DictElement) and isinstance(el.key, cst.SimpleString)
                                               for el in value.elements):
            return frozenset(el.key.evaluated_value for el in value.elements)
        return None

    def dispatched(self, fn: FunctionInfo) -> bool:
        """A def of a name defined more than once in its scope under a multiple-dispatch decorator
        (`@multimethod`, `@dispatch(int)`): which def a call runs depends on its arguments' types."""
        owner = fn.parent or self.root
        if len(owner.def_history.get(fn.name, [])) < 2:
            return False
        for d in fn.decorators:
            head = d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator
            if (self.resolve(head, owner) or "") in _DISPATCHERS:
                return True
        return False

    def transform_of(self, expr: cst.BaseExpression, scope: Scope) -> Optional[tuple[Transform, dict[str, cst.BaseExpression]]]:
        """If `expr` names a JAX transform (`jax.jit`, `partial(jax.jit, static_argnums=1)`,
        `jax.jit(static_argnames=...)`), the transform and its keyword options."""
        qual = self.resolve(expr, scope)
        if qual is not None:
            t = self.transforms.get(qual)
            return (t, {}) if t else None
        if isinstance(expr, cst.Call):
            fq = self.resolve(expr.func, scope)
            if fq in PARTIALS and expr.args:
                inner = self.transform_of(expr.args[0].value, scope)
                if inner is not None and all(a.keyword is not None for a in expr.args[1:]):
                    opts = dict(inner[1])
                    opts.update({a.keyword.value: a.value for a in expr.args[1:] if a.keyword is not None})
                    return inner[0], opts
                return None
            if fq is not None and fq in self.transforms and all(a.keyword is not None for a in expr.args):
                return self.transforms[fq], {a.keyword.value: a.value for a in expr.args if a.keyword is not None}
        return None

    # ---- classes ----------------------------------------------------------------------------

    def _register_classes(self) -> None:
        """Module-level `register_dataclass(Cls, ...)` / `register_pytree_node(Cls, flatten, unflatten)`."""
        for call, scope, _loop in self.all_calls:
            if scope is not self.root or not call.args:
                continue
            qual = self.resolve(call.func, scope)
            first = call.args[0].value
            cls = self.root.classes.get(first.value) if isinstance(first, cst.Name) else None
            if cls is None:
                continue
            if qual not in _REGISTER_CALLS:
                local = self.root.defs.get(call.func.value) if isinstance(call.func, cst.Name) else None
                if len(call.args) == 1 and (local is not None and _registers(local, self)
                                            or qual is not None and self.registers_pytree(qual)):
                    cls.pytree = True  # `register_jax_pytree_node(Box)`: the project's own registering helper
                continue
            cls.pytree = True
            _register_options(cls, call)
            if qual in ("jax.tree_util.register_pytree_node", "jax.tree_util.register_pytree_with_keys") \
                    and len(call.args) > 1 and isinstance(call.args[1].value, cst.Name):
                flatten = self.root.defs.get(call.args[1].value.value)
                if flatten is not None and flatten.params and isinstance(flatten.node, cst.FunctionDef):
                    cls.static_fields |= _flatten_aux(flatten, flatten.params[0].name, self.root, frozenset(cls.fields))
        names: set[str] = set()
        data: set[str] = set()
        for c in self._all_classes():
            scalars = self.frameworks.python_attributes(c)  # an nnx Module's Python settings: pytree metadata
            names |= c.static_fields | scalars
            data |= c.fields - c.static_fields - scalars
        self.static_field_names = frozenset(names - data)
        self._data_field_names = frozenset(data)

    def class_facts(self) -> dict[str, ClassFacts]:
        """This module's module-level classes as the project's other files see them."""
        facts = {name: self._facts_of(c) for name, c in self.root.classes.items()}
        for name, values in self.root.assigned.items():  # `StreamDict = NestedDict[chex.Array]`: the class again
            if name not in facts and len(values) == 1 and values[0] is not None:
                cls = self.class_named(values[0], self.root)
                if cls is not None:
                    facts[name] = facts[cls.name]
        return facts

    def _facts_of(self, c: ClassInfo) -> ClassFacts:
        inherited = self.inherited_facts(c)
        fields: dict[str, str] = {}
        for f in reversed(inherited):
            fields.update(f.field_classes)
        fields.update(self._field_classes(c))
        props = frozenset(p for f in inherited for p in f.static_properties if p not in c.defs and p not in c.fields)
        return ClassFacts(c.pytree, frozenset(c.fields), frozenset(c.static_fields), self._static_methods(c),
                          c.container, self._method_classes(c), fields, self._static_properties(c) | props,
                          module_kind=self.frameworks.kind(c), python_attributes=self.frameworks.python_attributes(c),
                          registers_subclasses=c.registers_subclasses, registers_classes=c.registers_classes,
                          bases=tuple(f"local:{b}" if b in self.root.classes else b for b in c.bases),
                          pinned_methods=self._pinned_methods(c), identity_hash=identity_hash(c))

    def _pinned_methods(self, cls: ClassInfo) -> frozenset[str]:
        """Methods of `cls` that its own methods store on the instance (`self.next = self.next`,
        `self.step = jax.jit(self.step)`): on an instance, that name reads the stored object."""
        out: set[str] = set()
        for f in cls.defs.values():
            if not f.is_method or not f.params:
                continue
            me = f.params[0].name
            for target, _value, how in f.events:
                if how == "=" and isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name) \
                        and target.value.value == me and target.attr.value in cls.defs:
                    out.add(target.attr.value)
        return frozenset(out)

    def project_class(self, ann: Optional[cst.BaseExpression], scope: Scope) -> bool:
        """Whether an annotation names a class of the project (`g: DoubleDouble`, here or in another file):
        its instances are that class's objects, whatever JAX does with their leaves."""
        ann = plain_annotation(ann)
        if ann is None or not isinstance(ann, (cst.Name, cst.Attribute)):
            return False
        if isinstance(ann, cst.Name) and self.class_named(ann, scope) is not None:
            return True
        return self._facts_named(ann, scope) is not None

    def _facts_named(self, expr: cst.BaseExpression, scope: Scope) -> Optional[ClassFacts]:
        """What the project says of the class of another file an expression names (through the imports)."""
        qual = self.resolve(expr, scope) if isinstance(expr, (cst.Name, cst.Attribute)) else None
        return self.ask("lookup", qual, absent=None) if qual is not None and "." in qual else None

    def identity_instance(self, value: cst.BaseExpression, scope: Scope) -> bool:
        """Whether an expression makes a new instance of a class that compares by identity (a constructor
        call of a plain class of this module or of another project file): equal to no other."""
        if not isinstance(value, cst.Call):
            return False
        cls = self.class_named(value.func, scope) if isinstance(value.func, cst.Name) else None
        if cls is not None:
            return identity_hash(cls)
        facts = self._facts_named(value.func, scope)
        return facts is not None and facts.identity_hash

    def pinned_method(self, expr: cst.Attribute, scope: Scope) -> bool:
        """Whether `obj.name` reads a method the instance's class stores on the instance (so the same object
        on every access): `obj` is `self` in a method of the class, or a name bound once to a constructor
        call of a class of this module or of another project file."""
        if not isinstance(expr.value, cst.Name):
            return False
        name, attr = expr.value.value, expr.attr.value
        fn = scope.function_scope()
        if fn is not None and fn.is_method and fn.cls is not None and fn.params and fn.params[0].name == name:
            return attr in self._pinned_methods(fn.cls)
        owner = self.owner_of(name, scope)
        values = owner.assigned.get(name, []) if owner is not None else []
        if isinstance(owner, FunctionInfo) and values == [None]:
            values = [b.assigned for b in owner.bindings(name)]  # `loader, opt = Loader(), adam(lr)`
        if len(values) != 1 or not isinstance(values[0], cst.Call):
            return False
        func = values[0].func
        cls = self.class_named(func, owner) if isinstance(func, cst.Name) else None
        if cls is not None:
            return attr in self._pinned_methods(cls)
        facts = self._facts_named(func, owner)
        return facts is not None and attr in facts.pinned_methods

    def pytree_class(self, expr: cst.BaseExpression, scope: Scope) -> Optional[bool]:
        """For an expression naming a class of this module or of another project file, whether its instances
        are pytrees (such an object can be a jitted function's argument); None for any other expression (a
        library's class may be a pytree)."""
        cls = self.class_named(expr, scope)
        if cls is not None:
            return self.instances_are_pytrees(cls)
        facts = self._facts_named(expr, scope)
        return facts.pytree if facts is not None else None

    def class_named(self, expr: cst.BaseExpression, scope: Scope) -> Optional[ClassInfo]:
        """The module-level class an expression names (`NestedDict`, `NestedDict[T]`, or a module-level
        alias of either), if it is one of this module's."""
        for _ in range(4):
            if isinstance(expr, cst.Subscript):
                expr = expr.value
            if not isinstance(expr, cst.Name) or self.owner_of(expr.value, scope) is not self.root:
                return None
            cls = self.root.classes.get(expr.value)
            if cls is not None:
                return cls
            values = self.root.assigned.get(expr.value, [])
            if len(values) != 1 or values[0] is None:
                return None
            expr, scope = values[0], self.root
        return None

    def constructed_class(self, name: str, scope: Scope) -> Optional[ClassInfo]:
        """The class of this module that `name` holds an instance of: a name its scope binds once, outside
        a loop, to a call of the class (`rec = Recorder(size)`), and no parameter."""
        owner = self.owner_of(name, scope)
        if owner is None or name in owner.imports or name in owner.defs or name in owner.classes:
            return None
        if isinstance(owner, FunctionInfo) and owner.param(name) is not None:
            return None
        values = owner.assigned.get(name, [])
        if len(values) != 1 or not isinstance(values[0], cst.Call) or owner.bind_loops.get(name, [None]) != [None]:
            return None
        if owner is self.root and not self.bound_once(name):
            return None
        cls = self.class_named(values[0].func, owner)
        return cls if cls is not None and not cls.pytree else None

    def plain_enum_member(self, e: cst.BaseExpression, scope: Scope) -> bool:
        """`Impl.WARP` of a class deriving from `enum.Enum` alone (no `int`/`str` mix-in, as `IntEnum` has),
        here or in another file of the project: a tracer compared with it is unequal, a Python `False`
        (JAX does not take the member as an array), so `x == Impl.WARP` is a Python bool."""
        if not isinstance(e, cst.Attribute):
            return False
        cls = self.class_named(e.value, scope)
        facts = self._facts_named(e.value, scope) if cls is None else None
        bases = list(cls.bases) if cls is not None else list(facts.bases) if facts is not None else []
        return bool(bases) and all(b in ("enum.Enum", "enum.Flag") for b in bases)

    def annotated_container(self, ann: Optional[cst.BaseExpression], scope: Scope) -> bool:
        """Whether an annotation names a container class of the project (`batch: types.StreamDict`, an
        alias of a `MutableMapping` subclass), here or in another file."""
        ann = plain_annotation(ann)  # `Optional[hk.Params]`
        if ann is None:
            return False
        cls = self.class_named(ann, scope)
        if cls is not None:
            return cls.container
        head = ann.value if isinstance(ann, cst.Subscript) else ann
        qual = self.resolve(head, scope) if isinstance(head, (cst.Name, cst.Attribute)) else None
        if qual in CONTAINER_ALIASES:
            return True
        if qual is None or "." not in qual or qual.startswith("builtins."):
            return False
        facts = self.ask("lookup", qual, absent=None)
        return facts is not None and facts.container

    def _method_classes(self, cls: ClassInfo) -> dict[str, str]:
        """Methods annotated to return a class."""
        out: dict[str, str] = {}
        for name, fn in cls.defs.items():
            node = fn.node
            if fn.is_method and isinstance(node, cst.FunctionDef) and node.returns is not None:
                qual = self._class_annotation(node.returns.annotation)
                if qual is not None:
                    out[name] = qual
        return out

    def _field_classes(self, cls: ClassInfo) -> dict[str, str]:
        """Fields annotated with a class."""
        out: dict[str, str] = {}
        for name, ann in cls.field_types.items():
            qual = self._class_annotation(ann)
            if qual is not None:
                out[name] = qual
        return out

    def _class_annotation(self, ann: Optional[cst.BaseExpression]) -> Optional[str]:
        """The class an annotation names, for the other files: a name this module imports (its qualified
        name, maybe relative) or one of its own classes (`local:Name`); the project index makes both
        absolute."""
        ann = plain_annotation(ann)
        if isinstance(ann, cst.Name) and ann.value in self.root.classes:
            return "local:" + ann.value
        if isinstance(ann, (cst.Name, cst.Attribute)):
            qual = self.resolve(ann, self.root)
            if qual is not None and "." in qual and not qual.startswith(("builtins.", "typing.")):
                return qual
        return None

    def _static_methods(self, cls: ClassInfo) -> frozenset[str]:
        """Methods of a pytree class that return only Python values for a traced instance and traced
        arguments (`def dofs(self) -> int:` summing static fields)."""
        if not cls.pytree:
            return frozenset()
        return frozenset(name for name, fn in cls.defs.items()
                         if fn.is_method and not fn.decorators and fn.params and self._returns_only_python(fn))

    def self_rebuilt_per_call(self, fn: "FunctionInfo") -> bool:
        """A method of a pytree class decorated with a caching transform that traces its instance
        (`@jax.jit def init(self, ...)`, `self` not static): JAX flattens `self` at each call and hands the
        body a new object rebuilt from the leaves, so writing its attributes changes that copy only (returned
        or dropped), never the caller's object. (A bound method jitted elsewhere, `jax.jit(obj.step)`,
        closes over the real object: not this.)"""
        if not fn.is_method or fn.cls is None or not fn.params or not isinstance(fn.node, cst.FunctionDef) \
                or not (fn.cls.pytree or self.instances_are_pytrees(fn.cls)):
            return False
        for d in fn.node.decorators:
            got = self.transform_of(d.decorator, fn.parent or self.root)
            if got is not None and got[0].cached:
                statics = static_param_names(fn, got[0], got[1], 0)
                return statics is not None and fn.params[0].name not in statics
        return False

    def instance_made_in_trace(self, fn: "FunctionInfo", seen: Optional[set[int]] = None) -> bool:
        """A method that traced code only calls on objects it builds itself (`game = Game(state);
        game.step()` in a jitted step, or `self.step()` from such a method): the instance is born in the
        trace and dropped with it, so what the method writes on it is scratch of that trace."""
        seen = set() if seen is None else seen
        if id(fn) in seen:
            return True
        seen.add(id(fn))
        if not fn.is_method or not fn.params or not fn.site_calls or fn.trace_sites \
                or any(order == -1 for _scope, order in fn.helper_sites):
            return False  # (transformed itself, or called from another file: the instance comes from outside)
        for caller, call in fn.site_calls.values():
            if fn.name == "__init__" and caller.traced and self.class_named(call.func, caller) is fn.cls:
                continue  # `JaxExprEnvironment(jaxpr)` in traced code: the new instance's own constructor
            bound = call.func
            if self.resolve(call.func, caller) == "builtins.map" and call.args:
                bound = call.args[0].value  # `map(self.read, vars)`
            if not isinstance(bound, cst.Attribute) or not isinstance(bound.value, cst.Name):
                return False
            receiver = bound.value.value
            if caller.is_method and caller.params and receiver == caller.params[0].name and caller.cls is fn.cls:
                if not self.instance_made_in_trace(caller, seen):
                    return False
            elif not caller.traced or self.owner_of(receiver, caller) is not caller \
                    or self.constructed_class(receiver, caller) is None:
                return False
        return True

    def method_returns_static(self, name: str) -> Optional[bool]:
        """Whether every method `name` of this module's classes returns only Python values for a traced
        instance and traced arguments; None when no class here defines one."""
        found = [fn for fn in self.functions if fn.is_method and fn.name == name]
        if not found:
            return None
        return all(not any(self.transform_of(d.decorator, fn.parent or self.root) for d in fn.decorators)
                   and fn.params and self._returns_only_python(fn) for fn in found)

    def static_returning(self) -> frozenset[str]:
        """Module-level functions that return only Python values (shape facts, lengths, literals) even when
        every parameter is traced, and are not transformed: the other files can call them as static."""
        found = {name for name, fn in self.root.defs.items()
                 if not fn.is_method and not any(self.transform_of(d.decorator, self.root) for d in fn.decorators)
                 and self._returns_only_python(fn)}
        # and the static methods of its classes, as `Class.name` (`Irrep.l(x)` reading `x.shape`)
        for cname, cls in self.root.classes.items():
            for name, fn in cls.defs.items():
                if isinstance(fn.node, cst.FunctionDef) and len(fn.node.decorators) == 1 \
                        and dotted(fn.node.decorators[0].decorator) == "staticmethod" and self._returns_only_python(fn):
                    found.add(f"{cname}.{name}")
        return frozenset(found)

    def _returns_only_python(self, fn: FunctionInfo) -> bool:
        """Whether every `return` of `fn` gives a Python value when all its parameters are traced (`self`
        a traced pytree). Only functions annotated to return a Python scalar, or whose returns read a
        shape, a length, a literal or a static field of the instance, are summarised: the others are not
        worth the cost."""
        node = fn.node
        if not isinstance(node, cst.FunctionDef):
            return False
        if returns_python_annotation(node):
            return True
        returns = [r.value for r in _returns(node.body)]
        if not returns or any(r is None for r in returns):
            return False
        static = fn.cls.static_fields if fn.is_method and fn.cls is not None and fn.params else set()
        owner = fn.params[0].name if static else ""
        if annotation_name(node.returns) not in ("int", "bool", "str") \
                and not all(_mentions_static_fact(r) or _bound_to_static_fact(fn, r)
                            or _built_from_own_fields(fn, r, owner, static) for r in returns if r is not None):
            return False
        pytrees = {fn.params[0].name} if fn.is_method and fn.params else set()
        flags = self.returns_given(fn, {p.name for p in fn.params}, pytrees)
        return flags is not None and not any(flags)

    def scalar_annotation(self, ann: cst.BaseExpression, kinds: frozenset[str] = SCALAR_TYPES) -> bool:
        """`int`, `str`, `Optional[bool]`, `float | None`, `tuple[int, ...]`: a Python scalar of `kinds` or a
        tuple of them (the names not rebound by this module)."""
        return scalar_annotation(ann, kinds, lambda name: self.owner_of(name, self.root) is not None)

    def declared_python_params(self, fn: FunctionInfo) -> frozenset[str]:
        """The parameters a function declares to be Python values that JAX cannot trace as data: `int`, `str`,
        `bool` (optional, a union or tuple of them, a `Literal`). A kernel's `block_size: int`, a `mode: str`.
        A flag with a `True`/`False` default that the body tests with a Python `if` (`scaled=True`, then
        `if scaled:`) is one too: a traced value there would raise."""
        found = fn.__dict__.get("_declared_python")
        if found is None:
            declared = {p.name for p in fn.params if p.annotation_expr is not None and not p.star
                        and self.scalar_annotation(p.annotation_expr, DECLARED_PYTHON)}
            flags = {p.name for p in fn.params if not p.star and isinstance(p.default, cst.Name)
                     and p.default.value in ("True", "False")} - declared
            if flags and isinstance(fn.node, cst.FunctionDef):
                declared |= flags & _tested_names(fn.node.body)  # (one walk of the body per function)
            found = fn.__dict__["_declared_python"] = frozenset(declared)
        return found

    def numpy_aliases(self) -> frozenset[str]:
        """Module-level type aliases bound once to a union with a NumPy array in it
        (`Array = Union[np.ndarray, jnp.ndarray]`, `Array = np.ndarray | jax.Array`)."""
        found = self.__dict__.get("_numpy_aliases")
        if found is None:
            found = self.__dict__["_numpy_aliases"] = frozenset(
                name for name, values in self.root.assigned.items()
                if len(values) == 1 and values[0] is not None and self._admits_numpy(values[0]))
        return found

    def int_constants(self) -> dict[str, int]:
        """Module-level names bound once, by module code, to an integer literal (`trials = 1`) that no other
        given file sets (`backend.trials = 5`): what another file importing them reads."""
        found = {}
        for name, values in self.root.assigned.items():
            if len(values) == 1 and isinstance(values[0], cst.Integer) and self.bound_once(name) \
                    and not self.ask("set_elsewhere", name, absent=True):
                found[name] = int(values[0].value, 0)
        return found

    def int_value(self, e: cst.BaseExpression, scope: Scope) -> Optional[int]:
        """An integer literal, or a name bound once to one: in the scope that binds it (`repeat = 1`), at
        module level, or in another project file it is imported from (`from .settings import trials`)."""
        if isinstance(e, cst.Integer):
            return int(e.value, 0)
        if not isinstance(e, cst.Name):
            return None
        owner = self.owner_of(e.value, scope)
        if owner is self.root and e.value in self.root.imports and e.value not in self.root.assigned:
            qual = self.resolve(e, scope)
            return self.ask("int_constant", qual, absent=None) if qual is not None else None
        if owner is None or (owner is self.root and not self.bound_once(e.value)):
            return None
        values = owner.assigned.get(e.value, [])
        if len(values) != 1 or len(owner.bind_order.get(e.value, [])) != 1 \
                or (isinstance(owner, FunctionInfo) and owner.param(e.value) is not None):
            return None
        return int(values[0].value, 0) if isinstance(values[0], cst.Integer) else None

    def _admits_numpy(self, e: cst.BaseExpression) -> bool:
        if isinstance(e, cst.BinaryOperation) and isinstance(e.operator, cst.BitOr):
            return self._admits_numpy(e.left) or self._admits_numpy(e.right)
        if isinstance(e, cst.Subscript) and (dotted(e.value) or "").rpartition(".")[2] in ("Union", "Optional"):
            return any(isinstance(el.slice, cst.Index) and self._admits_numpy(el.slice.value) for el in e.slice)
        return isinstance(e, (cst.Name, cst.Attribute)) and (self.resolve(e, self.root) or "") in _NUMPY_ARRAYS

    def numpy_alias(self, ann: Optional[cst.BaseExpression], scope: Scope) -> bool:
        """Whether an annotation names a type alias (of this module or another project file) admitting a
        NumPy array: what it annotates may be a mutable NumPy array, not only a JAX one."""
        ann = plain_annotation(ann)
        if isinstance(ann, cst.Subscript) and (dotted(ann.value) or "").rpartition(".")[2] in _DTYPE_ANNOTATIONS \
                and ann.slice and isinstance(ann.slice[0].slice, cst.Index):
            ann = ann.slice[0].slice.value  # jaxtyping's `Float[np.ndarray, "n 3"]`: the array type is the first
        if not isinstance(ann, (cst.Name, cst.Attribute)):
            return False
        if isinstance(ann, cst.Name) and self.owner_of(ann.value, scope) is self.root and ann.value in self.root.assigned:
            return ann.value in self.numpy_aliases()
        qual = self.resolve(ann, scope)
        if qual in _LIBRARY_NUMPY_ALIASES or qual in _NUMPY_ARRAYS:
            return True  # `chex.Array` is a union with `np.ndarray` in it; `np.ndarray` is NumPy's own
        return qual is not None and self.ask("numpy_alias", qual, absent=False)

    def python_parameters(self) -> dict[str, tuple[tuple[str, Optional[int]], ...]]:
        """Module-level functions with parameters declared Python values (see `declared_python_params`):
        name -> those parameters with their positions (None for keyword-only ones)."""
        out: dict[str, tuple[tuple[str, Optional[int]], ...]] = {}
        for name, fn in self.root.defs.items():
            if not fn.is_method and isinstance(fn.node, cst.FunctionDef):
                names = self.declared_python_params(fn)
                if names:
                    out[name] = tuple((p.name, p.index) for p in fn.params if p.name in names)
        return out

    def python_value_args(self, call: cst.Call, scope: Scope) -> list[cst.BaseExpression]:
        """The arguments a call (or a `partial` of a function) gives to parameters its function declares
        Python values (`kernel(x, block=b)` with `block: int`), for a function of this module or of
        another project file."""
        if self.resolve(call.func, scope) in PARTIALS and call.args and call.args[0].keyword is None:
            func, call = call.args[0].value, call.with_changes(args=call.args[1:])
        else:
            func = call.func
        if isinstance(func, cst.Name) and self.resolve(func, scope) is None:
            owner = self.owner_of(func.value, scope)
            values = owner.assigned.get(func.value, []) if owner is not None else []
            if len(values) == 1 and isinstance(values[0], (cst.Name, cst.Attribute)):
                func = values[0]  # `kernel_fn = grouped_topk`: a local alias of a function
        ref = self.resolve_callable(func, scope) if isinstance(func, (cst.Name, cst.Attribute)) else None
        if ref is not None:
            names = self.declared_python_params(ref.fn)
            params = [(p.name, p.index - ref.offset if p.index is not None else None)
                      for p in ref.fn.params if p.name in names]
        else:
            qual = self.resolve(func, scope)
            params = list(self.ask("python_params", qual, absent=None) or ()) if qual is not None else []
        if not params:
            return []
        return args_at(call, tuple(i for _, i in params if i is not None and i >= 0), tuple(n for n, _ in params))

    def static_elements(self) -> dict[str, tuple[bool, ...]]:
        """Module-level functions returning a tuple some of whose elements are Python values even when every
        parameter is traced (`return batch_shape, total, n, payload` with the first three read from shapes,
        `return grid, True`):
        name -> one flag per element, True where the element is static."""
        out: dict[str, tuple[bool, ...]] = {}
        for name, fn in self.root.defs.items():
            node = fn.node
            if fn.is_method or not isinstance(node, cst.FunctionDef) \
                    or any(self.transform_of(d.decorator, self.root) for d in fn.decorators):
                continue
            returns = [r.value for r in _returns(node.body)]
            if not returns or not all(isinstance(r, cst.Tuple) for r in returns) \
                    or len({len(r.elements) for r in returns}) != 1:  # type: ignore[union-attr]
                continue
            if not any(_mentions_static_fact(el.value) or _bound_to_static_fact(fn, el.value) or _is_literal(el.value)
                       for r in returns for el in r.elements):  # type: ignore[union-attr]
                continue  # (a filter: most tuples hold arrays only)
            flags = self.returns_given(fn, {p.name for p in fn.params})
            if flags is not None and len(flags) > 1 and not all(flags):
                out[name] = tuple(not f for f in flags)
        return out

    def container_returning(self) -> frozenset[str]:
        """Module-level functions annotated to return a Python container (`-> list`, `-> dict[str, Array]`):
        `if found:` on their result tests emptiness, wherever they are called."""
        return frozenset(name for name, fn in self.root.defs.items()
                         if isinstance(fn.node, cst.FunctionDef) and returns_container(fn.node))

    def returns_container_call(self, call: cst.Call, scope: Scope) -> bool:
        """Whether a call runs a function (of this module or another project file) annotated to return
        a Python container."""
        ref = self.resolve_callable(call.func, scope) if not isinstance(call.func, cst.Call) else None
        if ref is not None:
            return isinstance(ref.fn.node, cst.FunctionDef) and (
                returns_container(ref.fn.node) or self._returns_container_names(ref.fn))
        qual = self.resolve(call.func, scope)
        return qual is not None and self.ask("container_return", qual, absent=False)

    def _returns_container_names(self, fn: FunctionInfo) -> bool:
        """A function every `return` of which gives None or a local name bound only to a Python container:
        a dict or list display, or a collection of flax variables (`cache = variables.get("cache")`)."""
        known = self.__dict__.setdefault("_container_names", {})  # (asked at each call of the function)
        if id(fn) not in known:
            known[id(fn)] = self._returns_only_container_names(fn)
        return known[id(fn)]

    def _returns_only_container_names(self, fn: FunctionInfo) -> bool:
        if not isinstance(fn.node, cst.FunctionDef):
            return False
        values = [r.value for r in _returns(fn.node.body)]
        named = [v for v in values if v is not None and not _is_const(v, "None")]
        if not named or not all(isinstance(v, cst.Name) and fn.assigned.get(v.value) for v in named):
            return False
        collections = flax_collections(fn)
        return all(v.value in collections or all(isinstance(b, _DISPLAYS) for b in fn.assigned[v.value])
                   for v in named)  # type: ignore[attr-defined]

    def foreign_bases(self) -> set[str]:
        """The qualified names of base classes imported from elsewhere (as this module resolves them)."""
        return {b for c in self._all_classes() for b in c.bases
                if "." in b and b.split(".", 1)[0] not in ("builtins", "typing", "abc", "enum", "dataclasses")}

    def _all_classes(self) -> Iterator[ClassInfo]:
        stack: list[Scope] = [self.root]
        stack.extend(self.functions)
        seen: set[int] = set()
        while stack:
            s = stack.pop()
            for c in s.classes.values():
                if id(c) not in seen:
                    seen.add(id(c))
                    yield c
                    stack.append(c)

    def class_of(self, expr: cst.BaseExpression, fn: "FunctionInfo") -> Optional[ClassInfo]:
        """The class of this module an expression's value is an instance of, where the code says so:
        `self` in a method, a parameter annotated with the class."""
        if not isinstance(expr, cst.Name):
            return None
        s: Optional[Scope] = fn
        while isinstance(s, FunctionInfo):
            p = s.param(expr.value)
            if p is not None:
                if s.is_method and s.cls is not None and p is s.params[0]:
                    return s.cls
                return self.root.classes.get(p.annotation) if p.annotation else None
            if expr.value in s.local_names:
                value = _alias_value(s, expr.value)
                if isinstance(value, cst.Call) and isinstance(value.func, cst.Name):  # `data = Data(...)`
                    name = value.func.value
                    return self.root.classes.get(name) if self.owner_of(name, s) is self.root else None
                if not isinstance(value, (cst.Name, cst.Attribute)):
                    return None
                with self._following(s, expr.value) as free:
                    if not free:
                        return None  # (`x = y.a; y = x.b`: a cycle says nothing)
                    if isinstance(value, cst.Name):
                        return self.class_of(value, s)
                    return self._field_class(value, s)
            s = s.parent
        return None

    def class_constant(self, attr: str) -> bool:
        """Whether `obj.attr` reads a constant of a class body (`_props = ("loc", "vel")`, `scale = 2`): a
        class of this module binds `attr` in its body, only ever to a literal (or a tuple of them), no class
        declares it a field, and nothing here stores it on an object (`obj.attr = ...`, a `setattr` of a
        name not written out): a Python value whichever instance it is read from, traced or not."""
        table = self.__dict__.get("_class_constants")
        if table is None:
            table = self.__dict__["_class_constants"] = self._class_constants()
        return attr in table

    def _class_constants(self) -> frozenset[str]:
        from .traced import _constant_default

        literal: dict[str, bool] = {}
        fields: set[str] = set()
        for c in self._all_classes():
            fields |= c.fields | set(c.field_types)
            for name, values in c.assigned.items():
                literal[name] = literal.get(name, True) and all(v is not None and _constant_default(v) for v in values)
        if not any(literal.values()):
            return frozenset()
        stored: set[str] = set()
        stack: list[cst.CSTNode] = [self.module]
        while stack:
            n = stack.pop()
            targets: list[cst.BaseExpression] = []
            tp = type(n)  # (exact type tests: a failed `isinstance` on libcst's node classes is slow)
            if tp is cst.Assign:
                targets = [t.target for t in n.targets]  # type: ignore[attr-defined]
            elif tp is cst.AugAssign or tp is cst.AnnAssign or tp is cst.For or tp is cst.CompFor:
                targets = [n.target]  # type: ignore[attr-defined]
            elif tp is cst.Call and (dotted(n.func) or "").rpartition(".")[2] in ("setattr", "__setattr__"):  # type: ignore[attr-defined]
                # `setattr(obj, "n", v)`, `object.__setattr__(self, "n", v)`, `self.__setattr__("n", v)`
                names = [a.value for a in n.args[:2] if isinstance(a.value, cst.SimpleString)
                         and isinstance(a.value.evaluated_value, str)]
                if not names:
                    return frozenset()  # `setattr(self, k, v)`: any attribute may be stored
                stored.add(names[0].evaluated_value)  # type: ignore[arg-type]
            while targets:
                t = targets.pop()
                if isinstance(t, cst.Attribute):
                    stored.add(t.attr.value)
                elif isinstance(t, (cst.Tuple, cst.List)):
                    targets.extend(el.value for el in t.elements)
                elif isinstance(t, cst.StarredElement):
                    targets.append(t.value)
            stack.extend(iter_children(n))
        return frozenset(n for n, ok in literal.items() if ok and n not in fields and n not in stored)

    def is_static_field(self, obj: cst.BaseExpression, attr: str, fn: "FunctionInfo") -> Optional[bool]:
        """Whether `obj.attr` reads an aux-data field of a registered pytree: a Python value, not a leaf.
        None where the class of `obj` is not known and only the project's static names could tell (see
        `project_static_name`: asked last, it reads other files)."""
        cls = self.class_of(obj, fn)
        if cls is not None and (cls.fields or cls.static_fields):
            return attr in cls.static_fields
        facts = self._annotated_facts(obj, fn) if cls is None else None
        if facts:
            return all(attr in f.static_fields for f in facts)
        if attr in self.static_field_names:
            return True
        return None if attr not in self._data_field_names else False

    def project_static_name(self, attr: str) -> bool:
        """Whether some pytree class of the project's other files declares an attribute of this name static
        (`cache.time_axis`, the class of `cache` unknown; not when this module's classes make it a leaf)."""
        return attr not in self._data_field_names and self.ask("static_name", attr, absent=False)

    def _annotated_facts(self, obj: cst.BaseExpression, fn: "FunctionInfo") -> Optional[list[ClassFacts]]:
        """The project's facts of each pytree class of another file a parameter is annotated with (`x: sc.Coo
        | sc.Csr`), where each is known to have fields; a parameter rebound only by calls handing it on
        (`x = sc.as_coo(x, label=...)`, a check that returns it) keeps its annotation."""
        if not isinstance(obj, cst.Name):
            return None
        s: Optional[Scope] = fn
        while isinstance(s, FunctionInfo):
            p = s.param(obj.value)
            if p is not None:
                break
            if obj.value in s.local_names:
                return None
            s = s.parent
        else:
            return None
        if p.annotation_expr is None or (s.is_method and p is s.params[0]) or any(
                not (isinstance(v, cst.Call) and v.args and isinstance(v.args[0].value, cst.Name)
                     and v.args[0].value.value == obj.value) for v in s.assigned.get(obj.value, [])):
            return None
        out: list[ClassFacts] = []
        for member in union_members(p.annotation_expr):
            facts = self._facts_named(member, s.parent or self.root)
            if facts is None or not facts.pytree or not (facts.fields or facts.static_fields):
                return None
            out.append(facts)
        return out

    # ---- function summaries -----------------------------------------------------------------

    def call_returns(self, call: cst.Call, values: "Values") -> Optional[list[bool]]:
        """What a call of a summarised helper returns, given the arguments of this call (a helper called
        with arrays at one site and with configuration at another returns tracers only at the first).
        None when the call runs no summarised helper."""
        # not yet traced helpers too: while the tracer is still spreading, a helper's result follows
        # the arguments it is given, not a guess from them
        from .traced import _map_args

        helper = self.summarised_callee(call, values.fn, traced_only=False)
        if helper is None:
            elements = self.frameworks.element_callables(call.func, values.fn) \
                if isinstance(call.func, (cst.Name, cst.Subscript)) else []
            if elements:
                return self._elements_return(call, values, elements)
            return self._method_returns(call, values)
        if isinstance(helper.node, cst.FunctionDef) and returns_python_annotation(helper.node):
            return [False]  # `-> tuple[int, ...]`: dimensions, names — never arrays
        if id(call) in self._calls_busy:
            return None  # (`x = step(x)`: asking about x asks about this call again)
        ref = self.resolve_callable(call.func, values.fn)
        assert ref is not None

        args, _receiver = self._call_args(call, values)
        params, _trees = _map_args(helper, ref.offset, args, ref.bound_names)
        return self.returns_given(helper, params, eager=values._unstaged())

    def _call_args(self, call: cst.Call, values: "Values", receiver: Optional[cst.BaseExpression] = None
                   ) -> tuple[list[ArgInfo], bool]:
        """Whether each argument of a call (and the object `receiver` it is called on) is traced, asked with
        the call marked busy: a binding from this very call (`x = step(x)`) is not followed back into it."""
        self._calls_busy.add(id(call))
        try:
            args = [ArgInfo(a.star, a.keyword.value if a.keyword is not None else None, values.traced(a.value), False)
                    for a in call.args]
            return args, receiver is not None and values.traced(receiver)
        finally:
            self._calls_busy.discard(id(call))

    def _elements_return(self, call: cst.Call, values: "Values", refs: list["CallableRef"]) -> Optional[list[bool]]:
        """What a call of an element of a list of modules of several classes returns: position by position,
        traced where any of the classes' `__call__` returns a traced value given these arguments."""
        from .traced import _map_args

        if id(call) in self._calls_busy:
            return None
        args, receiver = self._call_args(call, values, call.func)
        out: Optional[list[bool]] = None
        for ref in refs:
            params, _trees = _map_args(ref.fn, ref.offset, args, ref.bound_names)
            if receiver and ref.fn.params:
                params.add(ref.fn.params[0].name)  # a traced instance: its array leaves are traced
            got = self.returns_given(ref.fn, params, eager=values._unstaged())
            if got is None or out is not None and len(got) != len(out):
                return None
            out = list(got) if out is None else [a or b for a, b in zip(out, got)]
        return out

    def _method_returns(self, call: cst.Call, values: "Values") -> Optional[list[bool]]:
        """`model.dofs()` on a parameter annotated with a class of this module (or on `self`): what the
        method returns given a traced instance and these arguments."""
        from .traced import _map_args

        func = call.func
        if not isinstance(func, cst.Attribute) or id(call) in self._calls_busy:
            return None
        cls = self.class_of(func.value, values.fn)
        if cls is None:
            facts = self._project_class_of(func.value, values.fn)
            if facts is not None and func.attr.value in facts.static_methods:
                return [False]  # a method of a class in another file that returns only Python values
            cls = self._field_class(func.value, values.fn)
        method = cls.defs.get(func.attr.value) if cls is not None else None
        if method is None or not method.is_method or not isinstance(method.node, cst.FunctionDef) \
                or not method.params or method.decorators:
            return None  # (decorated methods — properties, transforms, static/class methods — are not summarised)
        args, receiver = self._call_args(call, values, func.value)
        params, _trees = _map_args(method, 1, args)
        pytrees: set[str] = set()
        if receiver:
            params.add(method.params[0].name)
            if cls is not None and cls.pytree:  # a traced pytree instance: its leaves are traced
                pytrees.add(method.params[0].name)
        return self.returns_given(method, params, pytrees)

    @contextmanager
    def _following(self, fn: Scope, name: str) -> Iterator[bool]:
        """Follow the local `name` of `fn` to what it was bound to, once: False when it is already being
        followed (`x = y.a; y = x.b`), so a cycle of aliases ends."""
        key = (id(fn), name)
        if key in self._aliases_busy:
            yield False
            return
        self._aliases_busy.add(key)
        try:
            yield True
        finally:
            self._aliases_busy.discard(key)

    def _annotation_of(self, expr: cst.BaseExpression, fn: "FunctionInfo") -> Optional[tuple[cst.BaseExpression, Scope]]:
        """The annotation that says what `expr` holds: a parameter's (`model: js.model.Model`), or a
        field's of the class `self` belongs to (`self.params` with `params: KinDynParameters` in the class
        body), with the scope to resolve it in."""
        if isinstance(expr, cst.Name):
            s: Optional[Scope] = fn
            while isinstance(s, FunctionInfo):
                p = s.param(expr.value)
                if p is not None:
                    return (p.annotation_expr, s.parent or self.root) if p.annotation_expr is not None else None
                if expr.value in s.local_names:
                    value = _alias_value(s, expr.value)  # `kp = model.params`: what `model.params` holds
                    if not isinstance(value, cst.Attribute):
                        return None
                    with self._following(s, expr.value) as free:
                        return self._annotation_of(value, s) if free else None
                s = s.parent
            return None
        if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name):
            owner = self.class_of(expr.value, fn) or self._field_class(expr.value, fn)
            if owner is not None and expr.attr.value in owner.field_types:
                return owner.field_types[expr.attr.value], owner.parent or self.root
        return None

    def _annotated_qualname(self, expr: cst.BaseExpression, fn: "FunctionInfo") -> Optional[str]:
        got = self._annotation_of(expr, fn)
        if got is None:
            return None
        ann, scope = got
        ann = plain_annotation(ann)  # `Model | None`, `"Model"`
        if not isinstance(ann, (cst.Name, cst.Attribute)):
            return None
        return self.resolve(ann, scope) or dotted(ann)

    def _field_class(self, expr: cst.BaseExpression, fn: "FunctionInfo") -> Optional[ClassInfo]:
        """The class of this module an annotated parameter or field holds (`self.params.count()`)."""
        qual = self._annotated_qualname(expr, fn)
        return self.root.classes.get(qual) if qual is not None and "." not in qual else None

    def _project_class_of(self, expr: cst.BaseExpression, fn: "FunctionInfo") -> Optional[ClassFacts]:
        """What another project file says about the class an annotated parameter or field holds, or a
        local bound to what a method of such a class is annotated to return (`sub = vals.subset(...)`)."""
        qual = self._annotated_qualname(expr, fn)
        if qual is None and isinstance(expr, cst.Name):
            s: Optional[Scope] = fn
            while isinstance(s, FunctionInfo) and expr.value not in s.local_names:
                s = s.parent
            value = _alias_value(s, expr.value) if isinstance(s, FunctionInfo) else None
            if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
                with self._following(s, expr.value) as free:  # type: ignore[arg-type]
                    receiver = self._project_class_of(value.func.value, s) if free else None  # type: ignore[arg-type]
                made = receiver.method_classes.get(value.func.attr.value) if receiver is not None else None
                return self.ask("lookup", made, absent=None) if made is not None else None
        if qual is None and isinstance(expr, cst.Attribute):  # `model.joints`: a field of another file's class
            owner = self._project_class_of(expr.value, fn)
            made = owner.field_classes.get(expr.attr.value) if owner is not None else None
            if made is None:  # a field a class of this module inherits from a base in another file
                local = self.class_of(expr.value, fn)
                if local is not None and expr.attr.value not in local.field_types:
                    made = next((f.field_classes[expr.attr.value] for f in self.inherited_facts(local)
                                 if expr.attr.value in f.field_classes), None)
            return self.ask("lookup", made, absent=None) if made is not None else None
        if qual is None or qual in self.root.classes:
            return None
        return self.ask("lookup", qual, absent=None)

    def returns_given(self, helper: "FunctionInfo", params: set[str],
                      pytrees: frozenset[str] | set[str] = frozenset(), eager: bool = False) -> Optional[list[bool]]:
        """What a traced function returns when only `params` receive tracers: one flag per element when
        every `return` gives a tuple (element i traced in any tuple that has one), else a single flag (None
        while recursing). `eager`:
        called from code that `vmap` or `grad` alone traces, where nothing is staged and JAX calls on Python
        values compute concrete arrays, wherever else the helper is also called from."""
        node = helper.node
        if not isinstance(node, (cst.Lambda, cst.FunctionDef)):
            return None
        exprs = self._return_exprs.get(id(node))
        if exprs is None:
            exprs = self._return_exprs[id(node)] = [node.body] if isinstance(node, cst.Lambda) else [
                r.value for r in _returns(node.body) if r.value is not None]
        params = params - helper.declared_static
        if helper.target is not None and helper.target.transform != "helper":
            params = set(helper.traced_params)  # traced by a transform of its own: its parameters are traced
        eager = eager and helper.target is not None and helper.target.transform == "helper"
        key = (id(helper), frozenset(params), frozenset(pytrees), eager)
        if key in self._site_returns:
            return self._site_returns[key]
        if id(helper) in self._returns_busy:
            return None
        self._returns_busy.add(id(helper))
        try:
            site = copy.copy(helper)  # the same function, with only these traced parameters
            site.traced_params = params
            site.pytree_params = (helper.pytree_params | set(pytrees)) & params
            if eager:
                site.staged, site.cached, site.transforms = False, False, {"helper"}
            Values(self, site).solve()
            inner = Values(self, site)
            tuples = [items for items in (_tuple_items(x, helper, self) for x in exprs) if items is not None]
            if exprs and len(tuples) == len(exprs):
                # (tuples of several lengths, `return x, c, n, extra` in one arm and `return x, c, n` in the
                # other: element i of any that has one; a caller unpacking n names gets an n-tuple)
                flags = [False] * max(len(items) for items in tuples)
                for items in tuples:
                    for i, el in enumerate(items):
                        flags[i] = flags[i] or inner.traced(el)
                out: Optional[list[bool]] = flags
            else:
                out = [any(inner.traced(x) for x in exprs)]
        finally:
            self._returns_busy.discard(id(helper))
        self._site_returns[key] = out
        return out

    def new_summary_round(self) -> None:
        """Forget the helper summaries asked so far: tracers spread since (kept once they are final)."""
        self._site_returns.clear()

    def summarised_callee(self, call: cst.Call, fn: "FunctionInfo", traced_only: bool = True
                          ) -> Optional["FunctionInfo"]:
        """The function of this module a call runs (a traced one unless `traced_only` is off), when its
        summary can answer for it."""
        if isinstance(call.func, cst.Call):
            return None
        ref = self.resolve_callable(call.func, fn)
        if ref is None or (traced_only and not ref.fn.traced) or ref.fn is fn or not isinstance(ref.fn.node, (cst.FunctionDef, cst.Lambda)):
            return None
        if ref.fn.decorators and any(self.transform_of(d.decorator, ref.fn.parent or self.root) for d in ref.fn.decorators):
            return None  # a transformed function's result is whatever the transform returns
        return ref.fn

    # ---- questions rules ask ----------------------------------------------------------------

    def traced_function(self, scope: Scope, guards: frozenset[str] = frozenset()) -> Optional[FunctionInfo]:
        """The innermost function around a node, if JAX traces it (and the node's branch can run traced)."""
        fn = scope.function_scope()
        if fn is None or not fn.traced or dead_branch(fn, guards) or self._probed_none(fn, guards):
            return None
        return fn

    def unread_traced(self, value: cst.BaseExpression, fn: FunctionInfo, printed: bool = False) -> bool:
        """Whether what `value` computes is never read where `fn` runs traced: it is bound by `t0 = value`
        to a local whose every read sits in a call that never runs traced (`if verbose: log(t1 - t0)` with
        every traced caller leaving `verbose` off), or flows only into locals read nowhere else. With
        `printed`, a read inside a `print(...)` is host output while tracing, not part of the program."""
        if isinstance(fn.node, cst.Lambda):
            return False
        memo = self.__dict__.setdefault("_reads_of", {})
        if id(fn) not in memo:
            calls: dict[int, tuple[Optional[str], Optional[cst.Call]]] = {}
            memo[id(fn)] = (self._local_reads(fn, calls), calls)
        reads, calls = memo[id(fn)]
        names = [name for name, values in fn.assigned.items() if any(v is value for v in values)]
        if not names and id(value) in calls:  # inside a larger expression: `dt = clock() - t0`, `print(clock())`
            into, outer = calls[id(value)]
            if into is not None:
                names = [into]
            elif outer is not None and printed and self.resolve(outer.func, fn) == "builtins.print":
                return True
        if len(names) != 1:
            return False
        pending, seen = [names[0]], set()
        while pending:
            name = pending.pop()
            if name in seen:
                continue
            seen.add(name)
            if name in fn.declared_global or name in fn.declared_nonlocal or len(fn.assigned.get(name, ())) == 0:
                return False
            for into, call in reads.get(name, ()):
                if into is not None:
                    pending.append(into)  # `dt = t1 - t0`: dt's reads decide
                elif call is None or not (dead_branch(fn, self.call_guards.get(id(call), frozenset()))
                                          or printed and self.resolve(call.func, fn) == "builtins.print"):
                    return False
        return True

    def _local_reads(self, fn: FunctionInfo, calls: Optional[dict[int, tuple[Optional[str], Optional[cst.Call]]]] = None
                     ) -> dict[str, list[tuple[Optional[str], Optional[cst.Call]]]]:
        """Each read of a name in `fn`'s own body: the local a plain `y = ...x...` binds it into, or else
        the innermost call around it (None for a read in no call, or in a nested def or lambda). `calls`
        receives the same for each call of the body (by id)."""
        out: dict[str, list[tuple[Optional[str], Optional[cst.Call]]]] = {}

        shadowed: frozenset[str] = frozenset()  # the locals of the nested defs being walked: not `fn`'s names

        def walk(node: cst.CSTNode, call: Optional[cst.Call], into: Optional[str], nested: bool) -> None:
            nonlocal shadowed
            if isinstance(node, cst.Name):
                if node.value not in shadowed:
                    out.setdefault(node.value, []).append((into, None if nested else call))
                return
            if isinstance(node, cst.Attribute):
                walk(node.value, call, into, nested)
                return
            if isinstance(node, cst.Arg):
                walk(node.value, call, into, nested)
                return
            if isinstance(node, (cst.FunctionDef, cst.Lambda)) and node is not fn.node:
                inner = self.fn_of_node.get(id(node))
                if inner is not None:  # (its defaults and decorators are read where it is defined)
                    outer, shadowed = shadowed, shadowed | frozenset(inner.local_names)
                    walk(node.body, call, into, True)
                    shadowed = outer
                    params = node.params
                    every = [*params.posonly_params, *params.params, *params.kwonly_params,
                             *(p for p in (params.star_arg, params.star_kwarg) if isinstance(p, cst.Param))]
                    for part in [*(p.default for p in every), *(p.annotation for p in every),
                                 *getattr(node, "decorators", ())]:
                        if part is not None:
                            walk(part, call, into, True)
                    return
            if isinstance(node, (cst.FunctionDef, cst.Lambda, cst.ClassDef)) and node is not fn.node:
                nested = True
            if isinstance(node, cst.Assign):
                target = node.targets[0].target if len(node.targets) == 1 else None
                bound = target.value if isinstance(target, cst.Name) and not nested else None
                for t in node.targets:
                    if not isinstance(t.target, cst.Name):
                        walk(t.target, call, into, nested)
                walk(node.value, call, bound, nested)
                return
            if isinstance(node, (cst.AnnAssign, cst.AugAssign)):
                target = node.target
                if not isinstance(target, cst.Name):
                    walk(target, call, into, nested)
                elif isinstance(node, cst.AugAssign):
                    out.setdefault(target.value, []).append((target.value, None))
                if node.value is not None:
                    walk(node.value, call, target.value if isinstance(target, cst.Name) and not nested else into, nested)
                return
            if isinstance(node, cst.Call):
                if calls is not None and not nested:
                    calls[id(node)] = (into, call)
                call = node
            for child in iter_children(node):
                walk(child, call, into, nested)

        body = fn.node.body if isinstance(fn.node, cst.FunctionDef) else None
        if body is not None:
            walk(body, None, None, False)
        return out

    def _probed_none(self, fn: FunctionInfo, guards: frozenset[str]) -> bool:
        """Past `if key is None: return`, where `key = probe(x)` and `probe` is a function of this module that
        returns None when the value it converts to a Python one (`float(x[0])` in a `try`) is a tracer, as
        every array is under a trace: the code runs only outside a trace."""
        for g in guards:
            if not g.startswith("isnot:None:"):
                continue
            name = g[11:]
            values = fn.assigned.get(name, [])
            if len(values) != 1 or fn.param(name) is not None or not isinstance(values[0], cst.Call):
                continue
            call = values[0]
            ref = self.resolve_callable(call.func, fn)
            if ref is None or ref.offset or not call.args or call.args[0].keyword is not None or call.args[0].star:
                continue
            known = self.__dict__.setdefault("_probes", {})
            if id(ref.fn) not in known:
                known[id(ref.fn)] = _none_when_converted(ref.fn)
            probed = known[id(ref.fn)]
            if probed is not None and probed == (ref.fn.params[0].name if ref.fn.params else None):
                return True  # (under a trace every array a function computes or is given is a tracer)
        return False

    def probed(self, node: cst.CSTNode, scope: Scope) -> bool:
        """Whether a node runs in the body of a `try` whose handler catches what tracing raises
        (`except Exception:`, `except TypeError:`, JAX's tracer errors, a bare `except:`): a conversion
        there is a deliberate probe of whether a value is concrete (`try: np.asarray(x)
        except Exception: return False`)."""
        return self._inside(node, scope, "try")

    def expected_to_fail(self, node: cst.CSTNode, scope: Scope) -> bool:
        """Whether a node runs under `with pytest.raises(...)` / `with self.assertRaises(...)` naming what
        tracing raises: a test showing that JAX rejects the code, as it should."""
        return self._inside(node, scope, "raises")

    def _inside(self, node: cst.CSTNode, scope: Scope, kind: str) -> bool:
        blocks = self.__dict__.setdefault("_guarded_blocks", {})
        fn = scope.function_scope()
        while fn is not None:  # (a lambda inside the block belongs to the function holding it)
            key = (id(fn), kind)
            if key not in blocks:
                blocks[key] = _guarded_blocks(fn.node, kind) if isinstance(fn.node, cst.FunctionDef) else []
            if any(contains(body, node) for body in blocks[key]):
                return True
            parent = fn.parent
            fn = parent.function_scope() if parent is not None else None
        return False

    def in_static_branch(self, call: cst.Call, scope: Scope, guards: frozenset[str] = frozenset()) -> bool:
        """Whether a call runs only in one arm of an `if` of its own function whose test is a Python value
        (configuration): which arm runs is decided while tracing, once (the code after
        `if flag: return …` is such an arm too)."""
        fn = scope.function_scope()
        for node, _arm in self.call_branches.get(id(call), ()):
            test = self.if_tests.get(node) if isinstance(node, int) else None
            if test is not None and test[1] is fn and not self.truth_traced(test[0], scope, guards):
                return True
        return False

    def is_traced(self, expr: cst.BaseExpression, scope: Scope, guards: frozenset[str] = frozenset()) -> bool:
        values = self.values(scope, guards)
        return values is not None and values.traced(expr)

    def is_test(self, node: cst.CSTNode) -> bool:
        """Whether the node is (part of the boolean skeleton of) an if/while/assert/ternary test."""
        return id(node) in self.test_nodes

    def truth_traced(self, expr: cst.BaseExpression, scope: Scope, guards: frozenset[str] = frozenset()) -> bool:
        """Whether a truth test of `expr` (if/while/and/or/not) would call bool() on a tracer whose value is
        not known: a parameter only `grad` alone (or a caller it traces) makes traced holds a concrete
        value there, and a Python value where the function is traced abstractly."""
        values = self.values(scope, guards)
        if values is None:
            return False
        values._static_override |= values.fn.concrete_params
        return values.truth_traced(expr)

    def local_name_for(self, module: str) -> Optional[str]:
        """The module-level name bound to `import module` (as written: `jax`, or `J` for `import jax as J`)."""
        for local, qual in self.root.imports.items():
            if qual == module:
                return local
        return None

    def values(self, scope: Scope, guards: frozenset[str] = frozenset()) -> Optional["Values"]:
        """The traced-value oracle of the traced function around `scope`, or None outside traced code."""
        fn = scope.function_scope()
        if fn is None or not fn.traced:
            return None
        if dead_branch(fn, guards) or self._probed_none(fn, guards):
            return None
        values = Values(self, fn)
        values._static_override = set(guards)
        for g in sorted(g for g in guards if g.startswith("comp:")):
            node = self.comprehensions.get(int(g[5:]))
            if node is not None:  # inside a comprehension, its static variables shadow the function's
                values._static_override |= values.comprehension_static(node)
        values._use_order = next((int(g[1:]) for g in guards if g.startswith("@")), None)
        if values._use_order is not None:
            values._use_arms = self.stamp_branches.get(values._use_order, ())
            values._use_loop = self.stamp_loops.get(values._use_order)
        for g in guards:
            # after `if is_tracer(x): return`, in the `else` of `if is_tracer(x) or is_tracer(y):` and of
            # `None if is_tracer(x) else float(x)`, the names tested are concrete values
            how, _, at = g.partition(":")
            test = self.if_tests.get(int(at)) if how in ("exit", "unless") else \
                self.ifexp_tests.get(int(at)) if how == "unlessexp" else None
            if test is not None:
                values._static_override |= self.untraced_unless(test[0], test[1])
        return values

    def untraced_unless(self, e: cst.BaseExpression, scope: Scope) -> set[str]:
        """The names a false test proves are no tracers: `is_tracer(x)`, `isinstance(x, jax.core.Tracer)`,
        and each side of an `or` of such tests."""
        if isinstance(e, cst.BooleanOperation) and isinstance(e.operator, cst.Or):
            return self.untraced_unless(e.left, scope) | self.untraced_unless(e.right, scope)
        if isinstance(e, cst.BooleanOperation) and isinstance(e.operator, cst.And):
            # `JAX_AVAILABLE and isinstance(x, jax.Array)`: the flag holds wherever JAX traces
            if isinstance(e.left, cst.Name) and e.left.value in self.jax_available_flags():
                return self.untraced_unless(e.right, scope)
            if isinstance(e.right, cst.Name) and e.right.value in self.jax_available_flags():
                return self.untraced_unless(e.left, scope)
            return set()
        tested = self.tracer_tested(e, scope)
        # (a tracer is also a `jax.Array`: where `isinstance(x, jax.Array)` fails, `x` is no tracer)
        return {tested} if tested is not None else set(_array_test(e))

    def jax_available_flags(self) -> frozenset[str]:
        """Module names set True by a `try:` that imports JAX (and False by its handlers) and bound no other
        way: `JAX_AVAILABLE` holds wherever JAX traces the module's code."""
        found = self.__dict__.get("_jax_flags")
        if found is None:
            names: set[str] = set()
            tries = [n for stmt in self.module.body if not isinstance(stmt, (cst.FunctionDef, cst.ClassDef))
                     for n in descendants(stmt) if isinstance(n, cst.Try)]
            for t in tries:
                if not any(_imports_jax(n) for n in descendants(t.body)):
                    continue  # (a `try:` importing JAX: True in its body, False in its handlers)
                for part, value in [(t.body, "True")] + [(h.body, "False") for h in t.handlers]:
                    names |= {tg.target.value for n in descendants(part) if isinstance(n, cst.Assign)
                              and _is_const(n.value, value) for tg in n.targets if isinstance(tg.target, cst.Name)}
            found = self.__dict__["_jax_flags"] = frozenset(
                n for n in names if self.owner_of(n, self.root) is self.root and all(
                    v is None or _is_const(v, "True") or _is_const(v, "False") for v in self.root.assigned.get(n, [])))
        return found

    def tracer_tested(self, e: cst.BaseExpression, scope: Scope) -> Optional[str]:
        """The name a test is true for only when it holds a tracer: `isinstance(x, jax.core.Tracer)`, or a
        call of a function (here or in another project file) that returns just that for its argument."""
        tested = tracer_test(e)
        if tested is not None or not isinstance(e, cst.Call) or len(e.args) != 1 \
                or not isinstance(e.args[0].value, cst.Name) or e.args[0].keyword is not None:
            return tested
        ref = self.resolve_callable(e.func, scope)
        if ref is not None:
            return e.args[0].value.value if _tests_for_tracer(ref.fn) else None
        qual = self.resolve(e.func, scope)
        if qual is not None and self.ask("guard_helper", qual, absent=None) in ("tracer", "tracers"):
            return e.args[0].value.value
        return None

    def registers_pytree(self, qual: str) -> bool:
        """Whether a decorator of the project (a def of this module, or of another file) registers the class
        it is given as a pytree: its body calls `register_pytree_node`, `register_dataclass`, …"""
        fn = self.root.defs.get(qual) if "." not in qual else None
        if fn is not None:
            return _registers(fn, self)
        return "." in qual and not qual.startswith(("jax.", "builtins.")) and self.ask("registers", qual, absent=False)

    def imported_packages(self) -> frozenset[str]:
        """The top-level packages the module imports (anywhere in it)."""
        found = self.__dict__.get("_packages")
        if found is None:
            found = self.__dict__["_packages"] = frozenset(
                q.split(".")[0] for sc in (self.root, *self.functions) for q in sc.imports.values())
        return found

    def static_unwrap(self, call: cst.Call) -> bool:
        """`x.unwrap()` in a module importing genjax, or in a project whose files import it (the wrappers made
        there reach this module's functions as arguments): the Python value a leafless `Const` wrapper keeps
        in its treedef (whatever `x` was found in, a dict of arguments included)."""
        func = call.func
        if not isinstance(func, cst.Attribute) or call.args:
            return False
        packages = [pkg for pkg, names in STATIC_UNWRAPS.items() if func.attr.value in names]
        return any(pkg in self.imported_packages() or self.ask("package_imported", pkg, absent=False)
                   for pkg in packages)

    def static_wrapper_annotation(self, ann: Optional[cst.BaseExpression], scope: Scope) -> bool:
        """Whether an annotation names a leafless wrapper of a Python value (`n: Const[int]`,
        `Optional[genjax.Const]`): what it holds is static wherever it is passed."""
        ann = plain_annotation(ann)
        head = ann.value if isinstance(ann, cst.Subscript) else ann
        return isinstance(head, (cst.Name, cst.Attribute)) and static_wrapper(self.resolve(head, scope))

    def makes_static_field(self, qual: str, func: cst.BaseExpression) -> bool:
        """Whether a call of `func` (resolved to `qual`) runs a helper, of this module or another project
        file, whose every return declares a static field: its result in a class body does too."""
        fn = self.root.defs.get(qual) if isinstance(func, cst.Name) and "." not in qual else None
        if fn is not None:
            return self._field_maker(fn)
        if isinstance(func, cst.Name) and self._partial_field_maker(func.value):
            return True  # `nonpytree_field = partial(flax.struct.field, pytree_node=False)`
        return "." in qual and not qual.startswith(("jax.", "builtins.")) \
            and self.ask("static_field_maker", qual, absent=False)

    def _partial_field_maker(self, name: str) -> bool:
        """A module-level name bound once to a `functools.partial` of a field declaration that makes it static
        (`nonpytree_field = partial(flax.struct.field, pytree_node=False)`)."""
        if self.owner_of(name, self.root) is not self.root or name in self.root.defs:
            return False
        values = self.root.assigned.get(name, [])
        if len(values) != 1 or not isinstance(values[0], cst.Call):
            return False
        v = values[0]
        if self.resolve(v.func, self.root) not in PARTIALS or not v.args or v.args[0].keyword is not None:
            return False
        return _field_is_static(self, cst.Call(func=v.args[0].value, args=v.args[1:]), self.root)

    def _field_maker(self, fn: FunctionInfo) -> bool:
        known = self.__dict__.setdefault("_field_makers", {})
        if id(fn) not in known:
            known[id(fn)] = False  # (a helper returning its own call)
            returns = [r.value for r in _returns(fn.node.body)] if isinstance(fn.node, cst.FunctionDef) else []
            known[id(fn)] = not fn.is_method and bool(returns) and all(
                r is not None and _field_is_static(self, r, fn) for r in returns)
        return known[id(fn)]

    def field_switch(self, fn: FunctionInfo) -> Optional[tuple[str, Optional[int], bool, bool]]:
        """A module-level helper whose every return declares a field whose leafness one of its parameters
        sets (`def field(default=None, jaxed=True, **kw): kw["pytree_node"] = jaxed; return
        struct.field(**kw)`): that parameter, its position, the truth that makes the field static, and
        whether its default does."""
        if fn.is_method or not isinstance(fn.node, cst.FunctionDef):
            return None
        found: set[tuple[str, bool]] = set()
        for r in _returns(fn.node.body):
            v = r.value
            if not isinstance(v, cst.Call) or (dotted(v.func) or "").rsplit(".", 1)[-1] not in ("field", "Field"):
                return None
            switch = None
            for a in v.args:
                kw = a.keyword.value if a.keyword is not None else None
                if kw in ("pytree_node", "static") and isinstance(a.value, cst.Name):
                    switch = (a.value.value, kw == "static")
                elif a.star == "**" and isinstance(a.value, cst.Name):
                    for target, value, how in fn.events:  # `kw["pytree_node"] = jaxed`
                        if how == "=" and isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name) \
                                and target.value.value == a.value.value and isinstance(value, cst.Name) \
                                and len(target.slice) == 1 and isinstance(target.slice[0].slice, cst.Index) \
                                and isinstance(target.slice[0].slice.value, cst.SimpleString) \
                                and target.slice[0].slice.value.evaluated_value in ("pytree_node", "static"):
                            switch = (value.value, target.slice[0].slice.value.evaluated_value == "static")
            if switch is None or fn.param(switch[0]) is None or switch[0] in fn.assigned:
                return None
            found.add(switch)
        if len(found) != 1:
            return None
        name, want = found.pop()
        p = fn.param(name)
        return name, p.index, want, p.has_default and literal_truth(p.default) == want  # type: ignore[union-attr]

    def field_switches(self) -> dict[str, tuple[str, Optional[int], bool, bool]]:
        """The module-level helpers of `field_switch`, by name."""
        return {name: sw for name, fn in self.root.defs.items() if (sw := self.field_switch(fn)) is not None}

    def switched_static(self, call: cst.Call, scope: Scope) -> bool:
        """Whether a call of a helper of `field_switch` (of this module or another project file) turns the
        switch to static (`field(10, jaxed=False)`)."""
        func = call.func
        qual = self.resolve(func, scope) or dotted(func) or ""
        fn = self.root.defs.get(qual) if isinstance(func, cst.Name) and "." not in qual else None
        if fn is not None:
            switch = self.field_switch(fn)
        elif "." in qual and not qual.startswith(("jax.", "builtins.")):
            switch = self.ask("field_switch", qual, absent=None)
        else:
            return False
        if switch is None:
            return False
        name, index, want, by_default = switch
        given = _arg(call, index if index is not None else 10_000, name)
        if given is None:
            return by_default and not any(a.star for a in call.args)
        return literal_truth(given) == want

    def static_field_makers(self) -> frozenset[str]:
        """Module-level functions returning a static field declaration (`return tc.field(on_setattr=[tc.freeze])`,
        `return field(pytree_node=False, **kw)`): a class of another file declares static fields with them."""
        return frozenset([name for name, fn in self.root.defs.items() if self._field_maker(fn)]
                         + [name for name in self.root.assigned if self._partial_field_maker(name)])

    def plain_functions(self) -> frozenset[str]:
        """Module-level defs (not classes): what calling one of them gives is whatever it returns, not an
        instance of a class of that name (`TransformedNet(**kw)` may return a Haiku `Transformed`)."""
        return frozenset(name for name, fn in self.root.defs.items()
                         if not fn.is_method and isinstance(fn.node, cst.FunctionDef) and name not in self.root.classes)

    def is_plain_function(self, func: cst.BaseExpression, scope: Scope) -> bool:
        """Whether a callee names a module-level def, of this module or of another project file it imports
        (not a class): its call is no constructor call, however the def's name is spelled."""
        if isinstance(func, cst.Name) and self.resolve(func, scope) is None:
            fn = self.root.defs.get(func.value)
            return fn is not None and self.owner_of(func.value, scope) is self.root \
                and func.value in self.plain_functions()
        qual = self.resolve(func, scope) if isinstance(func, (cst.Name, cst.Attribute)) else None
        return qual is not None and "." in qual and self.ask("plain_function", qual, absent=False)

    def registering(self) -> frozenset[str]:
        """Module-level functions that register the class they are given as a pytree."""
        return frozenset(name for name, fn in self.root.defs.items() if _registers(fn, self))

    def host_decorators(self) -> frozenset[str]:
        """Module-level functions that wrap the function they are given in a host callback (their nested
        wrapper calls `jax.debug.callback`, `jax.pure_callback`, …): the decorated body runs on the host."""
        return frozenset(name for name, fn in self.root.defs.items() if self._wraps_in_callback(fn))

    def _wraps_in_callback(self, fn: "FunctionInfo") -> bool:
        known = self.__dict__.setdefault("_callback_wrappers", {})  # (asked for every call of a decorated def)
        if id(fn) not in known:
            inner = [f for f in self.functions if f is not fn and _inside(f, fn)]
            known[id(fn)] = not fn.is_method and bool(fn.params) and isinstance(fn.node, cst.FunctionDef) \
                and any(self.resolve(c.func, f) in CALLBACKS for f in inner for c in f.calls)
        return known[id(fn)]

    def host_decorated(self, fn: "FunctionInfo") -> bool:
        """Whether a decorator of `fn` runs it through a host callback (here or in another project file)."""
        for d in fn.decorators:
            expr = d.decorator
            if isinstance(expr, cst.Name) and expr.value in self.root.defs:
                if self._wraps_in_callback(self.root.defs[expr.value]):
                    return True
                continue
            qual = self.resolve(expr, fn.parent or self.root)
            if qual is not None and "." in qual and self.ask("host_decorator", qual, absent=False):
                return True
        return False

    def derivative_rules(self) -> list[tuple[cst.Call, Scope]]:
        """Where custom derivative rules are given: `f.defjvp(jvp)`, `f.defvjp(fwd, bwd)`, and the decorator
        form `@f.defjvp` over `def jvp(...)` (as the call it stands for)."""
        found = self.__dict__.get("_derivative_rules")
        if found is None:
            found = self.__dict__["_derivative_rules"] = [
                (c, s) for c, s, _ in self.all_calls
                if isinstance(c.func, cst.Attribute) and c.func.attr.value in ("defvjp", "defjvp")]
            for fn in self.functions:
                if not isinstance(fn.node, cst.FunctionDef):
                    continue
                for d in fn.decorators:
                    if isinstance(d.decorator, cst.Attribute) and d.decorator.attr.value == "defjvp":
                        found.append((cst.Call(func=d.decorator, args=[cst.Arg(cst.Name(fn.name))]), fn.parent or self.root))
        return found

    def derivative_rule_functions(self) -> set[int]:
        """The functions (by id) given as custom derivative rules of a function of this module."""
        found = self.__dict__.get("_rule_functions")
        if found is None:
            found = self.__dict__["_rule_functions"] = set()
            for call, scope in self.derivative_rules():
                assert isinstance(call.func, cst.Attribute)
                primal = self.resolve_callable(call.func.value, scope)
                if primal is None:
                    continue
                for a in call.args[:2]:
                    ref = self.resolve_callable(a.value, scope)
                    if ref is not None and ref.fn is not primal.fn:
                        found.add(id(ref.fn))
        return found

    def constant_flags(self) -> dict[int, dict[str, bool]]:
        """Per function (by id), the truth of the module constants its `if` tests read: a global bound once,
        at module level, to a literal (`DEBUG = False`), that no function declares `global` and no other
        given file sets (without the project, trusted and listed in `constants_trusted`). The arm the
        constant rules out never runs, traced or not."""
        cached = self.__dict__.get("_constant_flags")
        if cached is not None:
            return cached
        root, out = self.root, self.__dict__.setdefault("_constant_flags", {})
        known: dict[str, Optional[bool]] = {}
        for test, scope in self.if_tests.values():
            fn = scope.function_scope()
            if fn is None:
                continue
            for g in flag_tests(test, True):
                name = g.partition(":")[2]
                if name not in known:
                    known[name] = self._constant_truth(name)
                if known[name] is not None and self.owner_of(name, scope) is root:
                    out.setdefault(id(fn), {})[name] = known[name]
        return out

    def bound_once(self, name: str) -> bool:
        """Whether a module-level name is bound exactly once, by module code outside a loop, and declared
        `global` by no function: the same object from then on."""
        root = self.root
        if len(root.assigned.get(name, [])) != 1 or root.bind_loops.get(name, [None]) != [None] \
                or name in root.defs or name in root.classes or name in root.imports:
            return False
        rebound = self.__dict__.get("_global_names")
        if rebound is None:
            rebound = self.__dict__["_global_names"] = {n for f in self.functions for n in f.declared_global}
        return name not in rebound

    def fixed_truth(self, test: cst.BaseExpression, scope: Scope, constants: bool = True) -> Optional[bool]:
        """The truth of a test that cannot change where it runs: `flag` / `not flag` with `flag` bound
        once to a literal, a local of the function (`uniform = True` above the `if`; not a parameter,
        bound in no loop, set by no nested function) or, with `constants`, a module constant (see
        `constant_flags`; a script's `train = False` is also a switch its user edits)."""
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            inner = self.fixed_truth(test.expression, scope, constants)
            return None if inner is None else not inner
        if not isinstance(test, cst.Name):
            return None
        name = test.value
        owner = self.owner_of(name, scope)
        if owner is self.root:
            return self._constant_truth(name) if constants and name in self.root.assigned else None
        if not isinstance(owner, FunctionInfo) or owner.param(name) is not None or name in owner.declared_global \
                or owner.bind_loops.get(name, [None]) != [None] or len(owner.assigned.get(name, [])) != 1 \
                or any(name in f.declared_nonlocal for f in self.functions if f.parent is owner):
            return None
        return literal_truth(owner.assigned[name][0])

    def _constant_truth(self, name: str) -> Optional[bool]:
        v = self.root.assigned[name][0] if self.bound_once(name) else None
        if isinstance(v, cst.Name) and v.value in ("True", "False", "None"):
            truth = v.value == "True"
        elif isinstance(v, cst.Integer):
            truth = v.evaluated_value != 0
        else:
            return None
        if self.ask("set_elsewhere", name, absent=False):
            return None
        self.constants_trusted.add(name)  # (asked of the project when this file is analysed without it)
        return truth

    def tracer_testing(self) -> dict[str, str]:
        """Module-level functions that only test for a trace, by name: what they test (see `guard_helper`).
        Read off the module's top-level defs (the builder asks before any scope exists; the project reads
        another file's with `trace_testing_defs`, without modelling it)."""
        found = self.__dict__.get("_tracer_testing")
        if found is None:
            found = self.__dict__["_tracer_testing"] = trace_testing_defs(self.module, self._source)
        return found

    def jit_switches(self) -> frozenset[str]:
        """Module globals that switch jit off: a module-level function returns its function argument as it
        is when the flag is set and jitted otherwise (`if _NO_JIT: return fn` / `return jax.jit(fn)`, or the
        reverse under `not`). A branch on such a flag runs only with jit off, on concrete values (see the
        `eager:` guard), and a trace that read it saw the mode the code meant (a debugging switch)."""
        found = self.__dict__.get("_jit_switches")
        if found is None:
            found = self.__dict__["_jit_switches"] = frozenset(
                flag for stmt in self.module.body if isinstance(stmt, cst.FunctionDef)
                for flag in [_jit_switch(stmt)] if flag is not None
                and self.module_global_flag(flag))
        return found

    def module_global_flag(self, name: str) -> bool:
        """A name bound at module level to `True` or `False` (and nowhere else at module level otherwise)."""
        values = [st.value for stmt in self.module.body if isinstance(stmt, cst.SimpleStatementLine)
                  for st in stmt.body if isinstance(st, (cst.Assign, cst.AnnAssign))
                  and any(isinstance(t, cst.Name) and t.value == name
                          for t in ([tt.target for tt in st.targets] if isinstance(st, cst.Assign) else [st.target]))]
        return bool(values) and all(isinstance(v, cst.Name) and v.value in ("True", "False") for v in values)

    def is_local(self, name: str, scope: Scope) -> bool:
        fn = scope.function_scope()
        return fn is not None and name in fn.local_names

    def reads_directly(self, fn: "FunctionInfo", name: str) -> bool:
        """Whether `fn`'s own body (not its nested functions) reads `name`, other than as the object of
        a store (`xs[i] = v`, `xs.append(v)` alone on a line)."""
        stack: list[cst.CSTNode] = [fn.node.body] if fn.node is not None else []  # type: ignore[attr-defined]
        while stack:
            n = stack.pop()
            if isinstance(n, cst.Name):
                if n.value == name:
                    return True
                continue
            if isinstance(n, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                continue
            if isinstance(n, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.Del)):
                target = n.target
                while isinstance(target, (cst.Subscript, cst.Attribute)):
                    if isinstance(target, cst.Subscript):
                        stack.extend(iter_children(target.slice[0]) if len(target.slice) == 1 else target.slice)
                    target = target.value
                if isinstance(n, (cst.AugAssign, cst.AnnAssign)) and n.value is not None:
                    stack.append(n.value)
                continue
            if isinstance(n, cst.Expr) and isinstance(n.value, cst.Call) and isinstance(n.value.func, cst.Attribute):
                stack.extend(a.value for a in n.value.args)
                recv = n.value.func.value
                if not (isinstance(recv, cst.Name) and recv.value == name):
                    stack.append(recv)
                continue
            stack.extend(iter_children(n))
        return False

    # ---- Pallas refs -------------------------------------------------------------------------

    def is_pallas_ref_api(self, expr: cst.BaseExpression, scope: Scope) -> bool:
        """Whether `expr` names a Pallas call whose callable receives refs (`pl.pallas_call`,
        `pltpu.emit_pipeline`, `pl.run_scoped`…), bare or as `functools.partial(pl.pallas_call, …)`."""
        if isinstance(expr, cst.Call):
            if self.resolve(expr.func, scope) not in PARTIALS or not expr.args:
                return False
            expr = expr.args[0].value
        q = self.resolve(expr, scope)
        return q is not None and q.startswith(PALLAS_PACKAGES) and q.rsplit(".", 1)[-1] in PALLAS_REF_CALLS

    def is_ref(self, name: str, scope: Scope) -> bool:
        """Whether `name`, seen from `scope`, is bound to a Pallas `Ref`: a parameter of a function handed
        to `pallas_call`/`emit_pipeline`/`run_scoped` (scratch refs included) or annotated `jax.Ref`, a
        parameter that receives a ref from a call (in this module or another), or a local bound only to
        views of refs (`o_ref.at[0]`, `ref.bitcast(jnp.uint32)`)."""
        owner = self.owner_of(name, scope)
        return isinstance(owner, FunctionInfo) and name in self._pallas_refs().get(id(owner), ())

    def dispose(self) -> None:
        """Drop what the model holds, once its findings are made: scopes point at their parents and the model
        at its helpers that point back, so the model is a web of cycles that only the cyclic collector could
        free (hundreds of thousands of objects for a large file, traversed once more to be found garbage);
        emptied, it is freed as its last reference goes. Nothing may ask the model anything afterwards."""
        scopes: list[Scope] = [self.root, *self.functions]
        for scope in list(scopes):
            scopes.extend(scope.classes.values())
        for scope in scopes:
            scope.__dict__.clear()
        self.frameworks.__dict__.clear()
        self.__dict__.clear()

    def ref_handoffs(self) -> list[ExternalCall]:
        """Calls handing Pallas refs to functions of other files, followed there by the API."""
        self._pallas_refs()
        return list(self._ref_handoffs.values())

    def _pallas_refs(self) -> dict[int, set[str]]:
        if self._refs is None:
            if self._source is not None and b"pallas" not in self._source and b"Ref" not in self._source \
                    and not any(ext.kind == "ref" for ext in self._external):
                # (a module that imports no Pallas package and names no `Ref` annotation, and is handed no
                # refs by another file, has no refs)
                self._refs, self._ref_handoffs = {}, {}
            else:
                self._refs, self._ref_handoffs = pallas_refs(self, self._external)
        return self._refs

    def used_as_array(self, expr: cst.BaseExpression, fns: list[Scope]) -> bool:
        """Whether the code of `fns` reads an array attribute of `expr` (`buf.shape`, `self.s.buf.dtype`,
        `buf.at[...]`, `buf.astype(...)`): then `expr` is an array or a Pallas ref, never a Python
        container, so a store into it is a ref write or an array error, not a container mutated in place."""
        for fn in fns:
            if fn.node is None:
                continue
            stack: list[cst.CSTNode] = [fn.node]
            while stack:
                n = stack.pop()
                if isinstance(n, cst.Attribute) and n.attr.value in _ARRAY_USES and n.value.deep_equals(expr):
                    return True
                stack.extend(iter_children(n))
        return False

    def owner_of(self, name: str, scope: Scope) -> Optional[Scope]:
        """The scope that binds `name` as seen from `scope` (module scope for globals), or None if unbound."""
        fn = scope.function_scope()
        if fn is not None and name in fn.declared_global:
            return self.root if self.root.binds(name) else None
        s: Optional[Scope] = fn if fn is not None else scope
        while s is not None:
            if isinstance(s, ClassInfo):
                s = s.parent
                continue
            if s.binds(name) or (isinstance(s, FunctionInfo) and s.param(name) is not None):
                if isinstance(s, FunctionInfo) and name in s.declared_nonlocal:
                    s = s.parent
                    continue
                return s
            s = s.parent
        return None


# Attributes only arrays (and Pallas refs) have: reading one shows the object is not a Python container.
_ARRAY_USES = frozenset({"shape", "dtype", "ndim", "at", "astype"})


def _alias_value(fn: FunctionInfo, name: str) -> Optional[cst.BaseExpression]:
    """The one value a local name is bound to in its function (`kp = model.params`), if it is bound once
    by a plain `=` to a name, an attribute or a call."""
    if fn.param(name) is not None or len(fn.assigned.get(name, ())) != 1:
        return None
    found = fn.bindings(name)
    if len(found) != 1:
        return None
    value = found[0].assigned
    return value if isinstance(value, (cst.Name, cst.Attribute, cst.Call)) else None


def _registers(fn: FunctionInfo, model: "ModuleModel") -> bool:
    """A function whose first parameter is handed to a JAX pytree registration call in its body."""
    if not fn.params or fn.is_method or not isinstance(fn.node, cst.FunctionDef):
        return False
    first = fn.params[0].name
    for call in fn.calls:
        if call.args and isinstance(call.args[0].value, cst.Name) and call.args[0].value.value == first \
                and model.resolve(call.func, fn) in _REGISTER_CALLS:
            return True
    return False


def _tests_for_tracer(fn: FunctionInfo) -> bool:
    """`def is_tracer(x): return isinstance(x, jax.core.Tracer)`."""
    return isinstance(fn.node, cst.FunctionDef) and not fn.is_method and guard_helper(fn.node) in ("tracer", "tracers")


def returns_python_annotation(node: cst.FunctionDef) -> bool:
    """Whether a def is annotated to return a string or a sequence of ints, strings or bools
    (`-> tuple[int, ...] | None`): dimensions and names, which a trace cannot make arrays. (`-> int` and
    `-> float` are not enough: losses and counts computed with jnp are annotated so.)"""
    ann = plain_annotation(node.returns.annotation if node.returns is not None else None)
    if ann is None:
        return False
    if dotted(ann) == "str":
        return True
    if not isinstance(ann, cst.Subscript) or (dotted(ann.value) or "").split(".")[-1] not in (
            "tuple", "Tuple", "list", "List", "Sequence"):
        return False
    items = [el.slice.value for el in ann.slice if isinstance(el.slice, cst.Index)]
    return len(items) == len(ann.slice) and bool(items) and all(
        isinstance(i, cst.Ellipsis) or dotted(i) in ("int", "str", "bool") for i in items) \
        and not all(isinstance(i, cst.Ellipsis) for i in items)


_DISPLAYS = (cst.Dict, cst.DictComp, cst.List, cst.ListComp)


def returns_container(node: cst.FunctionDef) -> bool:
    """`def f(...) -> list:` / `-> dict[str, Array]` / `-> Sequence[...]`: the result is a Python container."""
    return node.returns is not None and annotation_name(node.returns) in CONTAINER_ANNOTATIONS


def _mentions_static_fact(e: cst.BaseExpression) -> bool:
    """Whether an expression reads a shape, a length or a literal somewhere (a filter, not a proof)."""
    found = False

    class _Seek(cst.CSTVisitor):
        def visit_Attribute(self, node: cst.Attribute) -> bool:
            nonlocal found
            found = found or node.attr.value in ("shape", "ndim", "size", "dtype")
            return not found

        def visit_Call(self, node: cst.Call) -> bool:
            nonlocal found
            found = found or (isinstance(node.func, cst.Name) and node.func.value == "len")
            return not found

    if isinstance(e, (cst.Integer, cst.SimpleString)):
        return True
    e.visit(_Seek())
    return found


_CONVERSIONS = frozenset({"float", "int", "bool", "complex"})


def _none_when_converted(fn: FunctionInfo) -> Optional[str]:
    """The parameter a probe function converts to a Python value, when it returns None for a tracer: its
    body is a `try` (after a docstring) whose handlers all `return None`, and whose every other `return`
    gives None or converts that parameter (`float(arr[0])`, `int(arr.sum())`), which raises on a tracer."""
    node = fn.node
    if not isinstance(node, cst.FunctionDef) or not fn.params or not isinstance(node.body, cst.IndentedBlock):
        return None
    name = fn.params[0].name
    body = [s for s in node.body.body if not (isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1
                                               and isinstance(s.body[0], cst.Expr)
                                               and isinstance(s.body[0].value, (cst.SimpleString, cst.ConcatenatedString)))]
    if len(body) != 1 or not isinstance(body[0], cst.Try) or not body[0].handlers:
        return None
    attempt = body[0]

    def none(e: Optional[cst.BaseExpression]) -> bool:
        return e is None or (isinstance(e, cst.Name) and e.value == "None")

    for h in attempt.handlers:
        returns = _returns(h.body)
        if not returns or not all(none(r.value) for r in returns) or not _always_returns(h.body):
            return None
    returns = _returns(attempt.body)
    if not returns:
        return None
    for r in returns:
        if none(r.value):
            continue
        if not any(isinstance(c, cst.Call) and isinstance(c.func, cst.Name) and c.func.value in _CONVERSIONS
                   and c.args and _mentions_value(c.args[0].value, name) for c in descendants(r.value)):
            return None
    return name


def _mentions_value(e: cst.BaseExpression, name: str) -> bool:
    """Whether `e` reads the values of `name` (`arr[0]`, `arr.sum()`), not only its shape or dtype."""
    stack: list[cst.CSTNode] = [e]
    while stack:
        n = stack.pop()
        if isinstance(n, cst.Attribute) and n.attr.value in ("shape", "ndim", "dtype", "size"):
            continue
        if isinstance(n, cst.Name) and n.value == name:
            return True
        stack.extend(iter_children(n))
    return False


def _always_returns(block: cst.BaseSuite) -> bool:
    """Whether a handler's block ends in a `return` (it does not fall through to code after the `try`)."""
    stmts = block.body if isinstance(block, cst.IndentedBlock) else []
    last = stmts[-1] if stmts else None
    return isinstance(last, cst.SimpleStatementLine) and any(isinstance(s, cst.Return) for s in last.body)


def _imports_jax(n: cst.CSTNode) -> bool:
    """`import jax...` or `from jax... import ...`."""
    if isinstance(n, cst.Import):
        return any((dotted(a.name) or "").split(".")[0] == "jax" for a in n.names)
    return isinstance(n, cst.ImportFrom) and n.module is not None and not n.relative \
        and (dotted(n.module) or "").split(".")[0] == "jax"


def identity_hash(cls: ClassInfo) -> bool:
    """A plain class (no base but `object`, no decorator, no `__eq__`/`__hash__`): its instances compare
    and hash by identity."""
    return all(b in ("object", "builtins.object") for b in cls.bases) and not cls.decorators \
        and "__eq__" not in cls.defs and "__hash__" not in cls.defs and not cls.pytree


def _reads_own_field(e: cst.BaseExpression, owner: str, fields: set[str], nested: frozenset[str] = frozenset()) -> bool:
    """Whether an expression reads one of these fields of the instance (`self._grid_slice_tuple`), or an
    attribute of one of its `nested` fields (`self.structure.atomic_numbers`, whose class says)."""
    if not fields:
        return False
    found = False

    class _Seek(cst.CSTVisitor):
        def visit_Attribute(self, node: cst.Attribute) -> bool:
            nonlocal found
            inner = node.value
            found = found or (isinstance(inner, cst.Name) and inner.value == owner and node.attr.value in fields) \
                or (isinstance(inner, cst.Attribute) and isinstance(inner.value, cst.Name)
                    and inner.value.value == owner and inner.attr.value in nested)
            return not found

    e.visit(_Seek())
    return found


def _built_from_own_fields(fn: FunctionInfo, e: cst.BaseExpression, owner: str, fields: set[str],
                           depth: int = 0, seen: frozenset[str] = frozenset()) -> bool:
    """`box = np.asarray(self.box_size); f = np.clip(box, 0, 1); return np.min(box / f)`: a return that reads
    the instance's static fields, directly or through locals each binding of which does (or reads a shape, a
    length or a literal). A filter, not a proof: the summary then decides."""
    if not fields or depth > 3:
        return False
    nested = frozenset(fn.cls.field_types) - fields if fn.cls is not None else frozenset()
    if _reads_own_field(e, owner, fields, nested) or depth and _mentions_static_fact(e):
        return True
    names = {n.value for n in descendants(e) if isinstance(n, cst.Name)
             and n.value in fn.assigned and fn.param(n.value) is None}
    if not names:
        return False
    for name in names - seen:  # (`f = 1.0 + np.minimum(f, 1.0 - f)`: its other bindings decide)
        values = [v for t, v, how in fn.events if how in ("=", "aug") and isinstance(t, cst.Name) and t.value == name]
        if len(values) != len(fn.assigned[name]) or not all(
                v is not None and _built_from_own_fields(fn, v, owner, fields, depth + 1, seen | {name})
                for v in values):
            return False
    return True


def _bound_to_static_fact(fn: FunctionInfo, e: cst.BaseExpression) -> bool:
    """`n = leaves[0].shape[axis]; ...; return n`: a returned local whose every binding reads a shape, a
    length or a literal (the summary then decides whether it is static). An augmented assignment counts
    by its right side (`total = 0`, then `total += ids.shape[-1] * k` in a loop)."""
    if not isinstance(e, cst.Name) or e.value not in fn.assigned or fn.param(e.value) is not None:
        return False
    values = [v for t, v, how in fn.events if how in ("=", "aug") and isinstance(t, cst.Name) and t.value == e.value]
    return len(values) == len(fn.assigned[e.value]) and bool(values) \
        and all(v is not None and _mentions_static_fact(v) for v in values)


# Where `lax.fori_loop` and `lax.while_loop` take the initial carry whose structure they return.
_CARRY_INIT = {"fori_loop": (3, "init_val"), "while_loop": (2, "init_val")}


# Decorators that keep every def of a name and pick one by the arguments' types at each call.
_DISPATCHERS = frozenset({"multimethod.multimethod", "multimethod.multidispatch", "multipledispatch.dispatch",
                          "plum.dispatch", "fastcore.dispatch.typedispatch"})


def _is_property(fn: "FunctionInfo") -> bool:
    return any((dotted(d.decorator) or "").split(".")[-1] in ("property", "cached_property") for d in fn.decorators)


def shape_fact(e: cst.BaseExpression) -> bool:
    """An expression made only of shape facts: `x.shape[0]`, `x.ndim`, `len(x)`, integer literals and
    arithmetic on them (a Python int whatever `x` holds)."""
    if isinstance(e, cst.Integer):
        return True
    if isinstance(e, cst.Attribute):
        return e.attr.value in ("shape", "ndim", "size")
    if isinstance(e, cst.Subscript):
        return isinstance(e.value, cst.Attribute) and e.value.attr.value == "shape"
    if isinstance(e, cst.Call):
        return dotted(e.func) == "len" and len(e.args) == 1
    if isinstance(e, cst.BinaryOperation):
        return shape_fact(e.left) and shape_fact(e.right)
    if isinstance(e, cst.UnaryOperation):
        return shape_fact(e.expression)
    return False


def _inside(inner: "FunctionInfo", outer: "FunctionInfo") -> bool:
    s = inner.parent
    while s is not None:
        if s is outer:
            return True
        s = s.parent
    return False


# Exceptions a failed conversion of a tracer raises (or a class of them).
_TRACING_ERRORS = frozenset({"Exception", "BaseException", "TypeError", "TracerArrayConversionError",
                             "ConcretizationTypeError", "TracerBoolConversionError",
                             "TracerIntegerConversionError", "JAXTypeError"})


def _guarded_blocks(node: cst.FunctionDef, kind: str) -> list[cst.BaseSuite]:
    """The bodies of a function's `try` statements catching what tracing raises (`kind` "try"), or of its
    `with pytest.raises(E)` / `with self.assertRaises(E)` blocks naming such an exception ("raises")."""
    out: list[cst.BaseSuite] = []
    for n in descendants(node):
        if kind == "try" and isinstance(n, cst.Try) and any(_catches_tracing(h.type) and _quiet(h) for h in n.handlers):
            out.append(n.body)
        elif kind == "raises" and isinstance(n, cst.With) and any(
                isinstance(item.item, cst.Call) and (dotted(item.item.func) or "").rsplit(".", 1)[-1]
                in ("raises", "assertRaises", "assertRaisesRegex") and item.item.args
                and item.item.args[0].value is not None and _catches_tracing(item.item.args[0].value)
                for item in n.items):
            out.append(n.body)
    return out


def _quiet(handler: cst.ExceptHandler) -> bool:
    """A handler that only answers (`return False`, `pass`, `ok = False`, `continue`): the failure is an
    expected outcome of a probe. One that warns, logs or tries again treats it as a surprise. It may look
    at the exception first and raise again what it does not expect (`if "Tracer" in name: return None`
    then `raise`)."""
    caught = handler.name.name.value if handler.name is not None and isinstance(handler.name.name, cst.Name) else None
    return _quiet_block(handler.body, caught)


def _quiet_block(block: cst.BaseSuite, caught: Optional[str]) -> bool:
    """Whether a handler's block only answers (see `_quiet`), somewhere: one that only raises again
    catches nothing."""
    answers = False
    for line in block.body if isinstance(block, cst.IndentedBlock) else []:
        if isinstance(line, cst.If) and line.orelse is None and _quiet_block(line.body, caught):
            answers = True
            continue
        if not isinstance(line, cst.SimpleStatementLine):
            return False
        for small in line.body:
            if isinstance(small, cst.Raise) and small.exc is None:
                continue  # (a bare `raise` passes on what the probe did not expect)
            if isinstance(small, (cst.Pass, cst.Continue, cst.Break)):
                answers = True
                continue
            value = small.value if isinstance(small, (cst.Return, cst.Assign)) else None
            if isinstance(small, cst.Assign) and caught is not None and value is not None \
                    and caught in {n.value for n in descendants(value) if isinstance(n, cst.Name)}:
                continue  # `name = type(exc).__name__`: reading the exception
            if not isinstance(small, (cst.Return, cst.Assign)) or (value is not None and not _is_literal(value)):
                return False
            answers = True
    return answers


def _catches_tracing(kind: Optional[cst.BaseExpression]) -> bool:
    if kind is None:
        return True  # a bare `except:`
    if isinstance(kind, cst.Tuple):
        return any(_catches_tracing(el.value) for el in kind.elements)
    name = dotted(kind)
    return name is not None and name.rsplit(".", 1)[-1] in _TRACING_ERRORS


def _tested_names(body: cst.CSTNode) -> set[str]:
    """Names an `if`/`elif`/`while` of a body (not of its nested defs) tests bare or negated (`if flag:`,
    `elif not flag:`)."""
    out: set[str] = set()
    stack: list[cst.CSTNode] = [body]
    while stack:
        n = stack.pop()
        if isinstance(n, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        if isinstance(n, (cst.If, cst.While)):
            test = n.test
            if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
                test = test.expression
            if isinstance(test, cst.Name):
                out.add(test.value)
        stack.extend(iter_children(n))
    return out


# Calls that return one array per positional argument (`jnp.broadcast_arrays(a, b, c)` gives three).
_ONE_PER_ARGUMENT = frozenset({"jax.numpy.broadcast_arrays", "jax.numpy.meshgrid", "jax.numpy.atleast_1d",
                               "jax.numpy.atleast_2d", "jax.numpy.atleast_3d", "numpy.broadcast_arrays",
                               "numpy.meshgrid"})


def _tuple_items(expr: cst.BaseExpression, fn: "FunctionInfo", m: "ModuleModel"
                 ) -> Optional[list[cst.BaseExpression]]:
    """The elements of a returned tuple, position by position: a starred element of known length (a name
    bound once to a tuple or list display, or to `jnp.broadcast_arrays(a, b, c)`) stands for that many
    elements of its own value (`return (*broadcast, is_scalar)`). None for no tuple, or a starred element
    of unknown length."""
    if not isinstance(expr, cst.Tuple):
        return None
    out: list[cst.BaseExpression] = []
    for el in expr.elements:
        if not isinstance(el, cst.StarredElement):
            out.append(el.value)
            continue
        value = el.value
        if isinstance(value, cst.Name):
            bound = fn.assigned.get(value.value, [])
            value = bound[0] if len(bound) == 1 and bound[0] is not None else value
        if isinstance(value, (cst.Tuple, cst.List)) and not any(isinstance(e, cst.StarredElement) for e in value.elements):
            n = len(value.elements)
        elif isinstance(value, cst.Call) and m.resolve(value.func, fn) in _ONE_PER_ARGUMENT \
                and len(value.args) > 1 and all(a.keyword is None and not a.star for a in value.args):
            n = len(value.args)
        else:
            return None
        out.extend([el.value] * n)
    return out


def _jit_switch(fn: cst.FunctionDef) -> Optional[str]:
    """The flag a function tests to return its function parameter unjitted (`if FLAG: return fn`) and
    jitted otherwise (`else: return jit(fn, ...)`), or the reverse under `not FLAG`; else None."""
    body = fn.body.body if isinstance(fn.body, cst.IndentedBlock) else []
    params = {p.name.value for p in fn.params.params}
    if len(body) != 1 or not isinstance(body[0], cst.If) or not isinstance(body[0].orelse, cst.Else):
        return None
    node = body[0]
    test, negated = node.test, False
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test, negated = test.expression, True
    if not isinstance(test, cst.Name):
        return None

    def returned(block: cst.BaseSuite) -> Optional[cst.BaseExpression]:
        stmts = block.body if isinstance(block, cst.IndentedBlock) else []
        if len(stmts) == 1 and isinstance(stmts[0], cst.SimpleStatementLine) and len(stmts[0].body) == 1 \
                and isinstance(stmts[0].body[0], cst.Return):
            return stmts[0].body[0].value
        return None

    def plain(e: Optional[cst.BaseExpression]) -> bool:
        return isinstance(e, cst.Name) and e.value in params

    def jitted(e: Optional[cst.BaseExpression]) -> bool:
        return isinstance(e, cst.Call) and (dotted(e.func) or "").rpartition(".")[2] in ("jit", "pjit") \
            and bool(e.args) and plain(e.args[0].value)

    off, on = returned(node.body), returned(node.orelse.body)
    if negated:
        off, on = on, off
    return test.value if plain(off) and jitted(on) else None


def may_test_for_a_trace(source: bytes) -> bool:
    """Whether a module's text names what a function testing for a trace tests with (see `guard_helper`): a
    class named `Tracer`, or `trace_state_clean`."""
    return b"Tracer" in source or b"trace_state_clean" in source


def trace_testing_defs(module: cst.Module, source: Optional[bytes] = None) -> dict[str, str]:
    """A module's top-level functions that only test for a trace, by name: what they test (see
    `guard_helper`). Read off the defs alone, so the project asks it of a file without modelling it. (A
    module whose text, when given, fails `may_test_for_a_trace` has none.)"""
    if source is not None and not may_test_for_a_trace(source):
        return {}
    return {stmt.name.value: kind for stmt in module.body
            if isinstance(stmt, cst.FunctionDef) and (kind := guard_helper(stmt)) is not None}
