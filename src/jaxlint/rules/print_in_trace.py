"""print-in-trace: the built-in `print` inside code JAX traces."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Optional

import libcst as cst

from ..edits import Edit, print_to_debug_print
from ..findings import Fix
from .base import Rule, Where, tracing_phrase

if TYPE_CHECKING:
    from ..semantic import FunctionInfo


class PrintInTrace(Rule):
    """
    ## What it does
    Flags calls to the built-in `print` inside code that JAX traces, including helpers called from it
    and the bodies of `lax` control flow.

    A print that shows nothing traced is reported only under `jax.jit` (or another cached trace) and
    only when it is a bare literal message such as `print("step")`, which reads as if it ran on every
    call. Messages built from static values (shapes, configuration), literal warnings and caveats
    (`print("WARNING: ... is deprecated")`, `print("Note: this ignores ...")`), messages that announce compiling or tracing
    (`print("Compiling train step...")`), the other literal messages of a function that prints such an
    announcement (its progress report while tracing) and messages in an arm of an `if` on configuration
    (`if cfg.use_aux: print("with the auxiliary loss")`) are deliberate trace-time logging and are not
    reported; nor is a print in a function that also prints with `jax.debug.print` (its author shows the
    trace-time view beside the run-time one, on purpose); nor is a print of a value a test proved a
    Python value (`if type(part) is str: print(part)` in a logging helper that hands everything else to
    `jax.debug.callback`).

    ## Why is this bad?
    Under `jax.jit` (and in `lax.scan`/`cond`/`while_loop` bodies) the Python function runs only while
    JAX traces it: `print` fires once per trace, shows abstract tracers instead of values, and never
    runs on later calls. It leaves nothing in the compiled program. Under `vmap` alone it runs every
    call but still prints tracers. Under `grad` alone (no jit) it runs every call and a printed tracer
    shows its value (`GradTracer(primal=0.84, ...)`), so it is not reported there; nor under an eager
    `shard_map` alone, which runs its body on every call and prints each device's shard.

    ## Example
    ```python
    import jax

    @jax.jit
    def step(x):
        print("x =", x)
        return x * 2
    ```

    ## Use instead
    ```python
    import jax

    @jax.jit
    def step(x):
        jax.debug.print("x = {}", x)
        return x * 2
    ```

    ## How it is verified
    The function is traced, then called a second time with inputs of the same shapes: the print ran
    during tracing, not on the second call, and the jaxpr has no effect for it.

    ## Known limitations
    Printing static values (shapes, dtypes) during tracing is sometimes intended; suppress those lines.

    ## References
    - https://docs.jax.dev/en/latest/debugging/print_breakpoint.html
    """

    code = "JL201"
    name = "print-in-trace"
    summary = "`print` in traced code"

    def visit_Call(self, node: cst.Call, where: Where) -> None:
        fn = where.traced
        if fn is None or where.resolve(node.func) != "builtins.print":
            return
        if not fn.cached and (not fn.abstract or fn.transforms == {"shard_map"}):
            # Only differentiated (`jax.grad(f)(x)` without jit): f runs on every call with concrete values,
            # and a printed tracer shows its value (`GradTracer(primal=0.84, ...)`). Only under an eager
            # shard_map: f runs on every call, and a printed value shows each device's shard.
            return
        args = [a.value for a in node.args if a.keyword is None]
        shows = any(where.is_traced(a) or _formats_traced(a, where) for a in args)
        if not shows:
            # Nothing traced is printed: without a cache it prints on every call as Python would;
            # under jit, a message built from static facts (shapes, configuration) is deliberate
            # trace-time logging, and so is a warning (once per trace is what a warning wants), and so is
            # a message in an arm of an `if` on configuration (it says which path is being traced). Only
            # a bare literal message under jit misleads about when it runs.
            if not fn.cached or any(not _is_text(a) for a in args) or any(_is_warning(a) for a in args) \
                    or where.model.in_static_branch(node, where.scope, where.guards) or announces_tracing(fn.node) \
                    or where.model.retraced_each_call(fn):
                return  # (the last: each call passes a new static value, so it is traced, and prints, each time)
        if shows and _prints_at_run_time(fn, where):
            return  # the function prints at run time too: this print is the trace-time view, on purpose
        if fn.cached:
            what = "runs only while JAX traces it, not on each call" + (
                ", and shows tracers instead of values" if shows else "")
        else:
            what = "prints tracers instead of values"
        jax_name = where.model.local_name_for("jax") or "jax"
        fix = edit = None
        converted = print_to_debug_print(node, jax_name)
        if converted is not None:
            new, safe = converted
            fix = Fix(f"Replace `print` with `{jax_name}.debug.print`", "safe" if safe else "unsafe")
            edit = Edit(node, lambda _old, new=new: new, None if where.model.local_name_for("jax") else "jax")
        self.report(node, f"`print` {tracing_phrase(fn)} {what}; use `jax.debug.print`.", where, fix=fix, edit=edit,
                    subject={"callee": "builtins.print"})


def _prints_at_run_time(fn: "FunctionInfo", where: Where) -> bool:
    """Whether the function also prints with `jax.debug.print` (`print("[trace]", x)` beside
    `jax.debug.print("[run] {}", x)`): its author knows which runs when, and prints at trace time on purpose."""
    return any(where.resolve(call.func) == "jax.debug.print" for call in fn.calls)


def _is_text(expr: cst.BaseExpression) -> bool:
    """A literal message: a string (an f-string without placeholders counts), a number."""
    if isinstance(expr, (cst.SimpleString, cst.Integer, cst.Float)):
        return True
    if isinstance(expr, cst.ConcatenatedString):
        return _is_text(expr.left) and _is_text(expr.right)
    if isinstance(expr, cst.FormattedString):
        return not any(isinstance(p, cst.FormattedStringExpression) for p in expr.parts)
    return False


def _literal_text(expr: cst.BaseExpression) -> Optional[str]:
    """The text of a literal string message, or None."""
    try:
        text = expr.evaluated_value if isinstance(expr, (cst.SimpleString, cst.ConcatenatedString)) else None
    except Exception:  # noqa: BLE001 - libcst cannot evaluate some byte/escape forms
        return None
    return text if isinstance(text, str) else None


def _is_warning(expr: cst.BaseExpression) -> bool:
    """A literal message that announces itself as a warning, a deprecation notice or trace-time work."""
    text = _literal_text(expr)
    return text is not None and _WARNING.search(text) is not None


def announces_tracing(fn_node: cst.CSTNode) -> bool:
    """Whether the function prints a literal message saying it is being compiled or traced
    (`print("step recompiled")`): its other literal prints are the same trace-time progress report."""
    found = []

    class _Finder(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is fn_node  # the function's own body, not nested functions

        def visit_Call(self, node: cst.Call) -> None:
            first = node.args[0].value if node.args else None
            # (an f-string's literal parts: `f"Compiling {fun.__name__}..."`)
            text = "".join(p.value for p in first.parts if isinstance(p, cst.FormattedStringText)) \
                if isinstance(first, cst.FormattedString) else (_literal_text(first) if first is not None else None)
            if isinstance(node.func, cst.Name) and node.func.value == "print" and text is not None \
                    and _TRACING.search(text) is not None:
                found.append(node)

    fn_node.visit(_Finder())
    return bool(found)


# A message that says it is printed while compiling (`"Compiling train step..."`, `"step recompiled"`).
_TRACING = re.compile(r"\b(re)?compil(e|es|ed|ing)\b|\b(re)?trac(e|es|ed|ing)\b|\b(re)?jit+(s|ed|ing)?\b", re.IGNORECASE)
# ... or a warning or a caveat (`"Note: ... ignores the corrections"`).
_WARNING = re.compile(_TRACING.pattern + r"|\bwarn(ing)?\b|deprecat|^\W*(note|caution|notice|attention)\b",
                      re.IGNORECASE)


def _formats_traced(expr: cst.BaseExpression, where: Where) -> bool:
    """An f-string that formats a traced value (it shows the tracer)."""
    return isinstance(expr, cst.FormattedString) and any(
        isinstance(p, cst.FormattedStringExpression) and where.is_traced(p.expression) for p in expr.parts)
