"""traced-while: a Python `while` loop whose condition is a traced value."""
from __future__ import annotations

import libcst as cst

from .base import Rule, Where, static_argnames_fix, tracing_phrase


class TracedWhile(Rule):
    """
    ## What it does
    Flags a Python `while` loop whose condition depends on a value JAX traces abstractly.

    ## Why is this bad?
    The condition is evaluated with `bool()` on a tracer while JAX traces the function, which raises
    `TracerBoolConversionError`: the number of iterations must be known at trace time.

    ## Example
    ```python
    import jax

    @jax.jit
    def halve_until_small(x):
        while x > 1.0:
            x = x / 2
        return x
    ```

    ## Use instead
    ```python
    import jax
    from jax import lax

    @jax.jit
    def halve_until_small(x):
        return lax.while_loop(lambda v: v > 1.0, lambda v: v / 2, x)
    ```
    Use `jax.lax.fori_loop` or `lax.scan` when the number of iterations is fixed.

    ## How it is verified
    The function is traced with abstract inputs; a `TracerBoolConversionError` raised at the flagged
    line confirms it.

    ## Known limitations
    A `while` under `jax.grad` alone sees concrete values and is not flagged.

    ## References
    - https://docs.jax.dev/en/latest/errors.html#jax.errors.TracerBoolConversionError
    - https://docs.jax.dev/en/latest/_autosummary/jax.lax.while_loop.html
    """

    code = "JL102"
    name = "traced-while"
    summary = "Python `while` on a traced condition"

    def visit_While(self, node: cst.While, where: Where) -> None:
        fn = where.traced
        if fn is None or not fn.abstract:
            return
        if not where.truth_traced(node.test):
            return
        fix, edit = static_argnames_fix(where, fn, node.test)
        self.report(
            node,
            f"Python `while` on a traced condition {tracing_phrase(fn, node.test)} raises `TracerBoolConversionError`; "
            "use `jax.lax.while_loop`, or `lax.fori_loop` for a fixed number of steps.",
            where,
            end_node=node.test,
            fix=fix,
            edit=edit,
            evidence=node.test,
        )
