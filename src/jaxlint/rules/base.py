"""The rule interface: a rule sees only the nodes it names in `visit_<NodeType>` methods and asks the model."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, ClassVar, Optional

import libcst as cst

from ..edits import Edit, make_static
from ..findings import Fix, TraceTarget
from ..semantic import FunctionInfo, LoopInfo, ModuleModel, Scope, Values, target_through
from ..syntax import iter_children


@dataclass
class Where:
    """Where a visited node sits: its scope and innermost loop, and the model to ask."""

    model: ModuleModel
    scope: Scope
    loop: Optional[LoopInfo]
    guards: frozenset[str] = frozenset()

    @property
    def traced(self) -> Optional[FunctionInfo]:
        """The traced function the node is in, if any."""
        return self.model.traced_function(self.scope, self.guards)

    @property
    def function(self) -> Optional[FunctionInfo]:
        return self.scope.function_scope()

    def is_traced(self, expr: cst.BaseExpression) -> bool:
        return self.model.is_traced(expr, self.scope, self.guards)

    @property
    def values(self) -> Optional["Values"]:
        return self.model.values(self.scope, self.guards)

    @property
    def abstract_values(self) -> Optional["Values"]:
        """The traced-value oracle, only inside code JAX traces abstractly (jit, vmap, lax bodies…)."""
        fn = self.traced
        return self.values if fn is not None and fn.abstract else None

    def truth_traced(self, expr: cst.BaseExpression) -> bool:
        return self.model.truth_traced(expr, self.scope, self.guards)

    def resolve(self, expr: cst.BaseExpression) -> Optional[str]:
        return self.model.resolve(expr, self.scope)


@dataclass
class Report:
    node: cst.CSTNode
    message: str
    function: Optional[FunctionInfo]
    end_node: Optional[cst.CSTNode] = None  # where the span ends, when not at the end of `node`
    fix: Optional[Fix] = None
    edit: Optional[Edit] = None
    # What the static pass knew about the flagged code, handed to the verifier (never shown):
    #   global-mutation  {"name": root name, "container": "module" | "closure" | "self", "target": source text}
    #   stale-global     {"name": the global read, "how": why it may be rebound}
    #   jit-in-loop      {"callable": source of the jitted callable ("" for a jitted def: "def" names it),
    #                     "loop_line": first line of the loop (absent when the loop is in a caller)}
    #   jit-method-self  {"method": qualname of the method}
    #   prng-key-reuse   {"key": the key expression, "first_line": line of the earlier use, "line": this use,
    #                     "loop": whether this same call reuses it on each pass of a loop}
    #   print-in-trace / impure-call  {"callee": the qualified name of the function called}
    # Lines are filled in by the runner from the nodes in `subject_nodes` (key -> node).
    subject: Optional[dict] = None
    subject_nodes: Optional[dict] = None
    target: Optional[TraceTarget] = None  # how the function is reached for this hazard, when not `function.target`


@dataclass
class Rule:
    """Base class for rules. Subclasses set the class variables and define `visit_<NodeType>` methods."""

    code: ClassVar[str]
    name: ClassVar[str]
    summary: ClassVar[str]
    # Rules that only make sense in traced code are skipped elsewhere by the runner.
    anywhere: ClassVar[bool] = False
    # Off unless selected explicitly (by code, prefix, name or `ALL`), as Ruff's RUF100.
    opt_in: ClassVar[bool] = False

    reports: list[Report] = field(default_factory=list)

    def report(self, node: cst.CSTNode, message: str, where: Where, *, end_node: Optional[cst.CSTNode] = None,
               fix: Optional[Fix] = None, edit: Optional[Edit] = None, subject: Optional[dict] = None,
               subject_nodes: Optional[dict] = None, evidence: Optional[cst.CSTNode] = None) -> None:
        """`evidence`: the traced value the hazard is about (a test, a size), when a caller that passes a
        tracer into it should be the one shown and verified (see `tracing_phrase`)."""
        if where.model.expected_to_fail(node, where.scope):
            return  # `with pytest.raises(TracerBoolConversionError):` — the test wants JAX to reject it
        if any(r.node is node and r.message == message for r in self.reports):
            return  # `self.a, self.b = ...`: one statement, one finding, however many of its targets qualify
        fn = where.traced if not self.anywhere else (where.traced or where.function)
        target = target_through(fn, evidence) if fn is not None and evidence is not None else None
        self.reports.append(Report(node, message, fn, end_node, fix, edit, subject, subject_nodes, target))

    @classmethod
    def visitors(cls) -> dict[type, str]:
        cached = cls.__dict__.get("_visitors")
        if cached is not None:
            return dict(cached)
        out: dict[type, str] = {}
        for attr in dir(cls):
            if attr.startswith("visit_"):
                out[getattr(cst, attr[len("visit_"):])] = attr
        cls._visitors = dict(out)  # type: ignore[attr-defined]  # per class: subclasses compute their own
        return out


def static_argnames_fix(where: Where, fn: FunctionInfo, expr: cst.BaseExpression) -> tuple[Optional[Fix], Optional[Edit]]:
    """For a hazard on a parameter annotated `int`/`bool`/`str` in a function under a bare `@jax.jit`:
    mark the parameter static (unsafe: every new value compiles anew, and callers must pass it hashable)."""
    if not isinstance(fn.node, cst.FunctionDef):
        return None, None
    names: list[str] = []
    stack: list[cst.CSTNode] = [expr]
    while stack:
        n = stack.pop()
        if isinstance(n, cst.Name):
            p = fn.param(n.value)
            if p is not None and p.annotation in ("int", "bool", "str") and n.value in fn.traced_params \
                    and n.value not in names:
                names.append(n.value)
        elif isinstance(n, cst.Attribute):
            stack.append(n.value)
        else:
            stack.extend(iter_children(n))
    if not names:
        return None, None
    model = where.model
    outer = fn.parent or model.root
    for deco in fn.node.decorators:
        if isinstance(deco.decorator, cst.Call) or model.resolve(deco.decorator, outer) != "jax.jit":
            continue
        partial_local = next((k for k, v in model.root.imports.items() if v == "functools.partial"), None)
        functools_local = model.local_name_for("functools")
        if partial_local:
            partial_expr: cst.BaseExpression = cst.Name(partial_local)
        else:
            partial_expr = cst.Attribute(cst.Name(functools_local or "functools"), cst.Name("partial"))
        new = make_static(deco, partial_expr, sorted(names))
        shown = ", ".join(f"`{n}`" for n in sorted(names))
        return (Fix(f"Mark {shown} static with `static_argnames` (each new value re-compiles)", "unsafe"),
                Edit(deco, lambda _old, new=new: new, None if partial_local or functools_local else "functools"))
    return None, None


def function_label(fn: Optional[FunctionInfo]) -> str:
    return f"`{fn.qualname}`" if fn is not None else "the traced function"


_TRANSFORM_TEXT = {
    "jit": "`jax.jit`", "pjit": "`pjit`", "pmap": "`jax.pmap`", "vmap": "`jax.vmap`", "grad": "`jax.grad`",
    "value_and_grad": "`jax.value_and_grad`", "checkpoint": "`jax.checkpoint`", "filter_jit": "`eqx.filter_jit`",
    "jacfwd": "`jax.jacfwd`", "jacrev": "`jax.jacrev`", "hessian": "`jax.hessian`",
    "eval_shape": "`jax.eval_shape`", "make_jaxpr": "`jax.make_jaxpr`", "linearize": "`jax.linearize`",
    "jvp": "`jax.jvp`", "vjp": "`jax.vjp`", "custom_jvp": "`jax.custom_jvp`", "custom_vjp": "`jax.custom_vjp`",
    "shard_map": "`shard_map`", "odeint": "`odeint`", "custom_root": "`lax.custom_root`",
    "flax_jit": "Flax's `jit`",
}


def tracing_phrase(fn: FunctionInfo, evidence: Optional[cst.CSTNode] = None) -> str:
    """How JAX reaches the function, for messages: "in `step` under `jax.jit`", "in `body` (a `lax.scan` body)".
    With `evidence` (the traced value a hazard is about), a helper is shown through a caller that passes a
    tracer into it (give `report` the same evidence)."""
    t = target_through(fn, evidence) if evidence is not None else fn.target
    if t is None:
        return f"in `{fn.qualname}`"
    if t.transform == "helper":
        chain = " -> ".join(f"`{q}`" if " (" not in q else f"`{q.split(' (')[0]}` in `{q.split(' (')[1][:-1]}`"
                            for q in t.via) if t.via else "traced code"
        return f"in `{fn.qualname}` (called from {chain})"
    if t.transform in _TRANSFORM_TEXT and not t.via:
        return f"in `{fn.qualname}` under {_TRANSFORM_TEXT[t.transform]}"
    if t.transform in _TRANSFORM_TEXT:
        return f"in `{fn.qualname}` (traced by {_TRANSFORM_TEXT[t.transform]} in `{t.via[-1]}`)"
    return f"in `{fn.qualname}` (a `lax.{t.transform}` body)"


VisitFn = Callable[[cst.CSTNode, Where], None]
