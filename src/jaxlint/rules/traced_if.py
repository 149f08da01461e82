"""traced-if: Python truth tests (`if`, ternary, `assert`, `and`/`or`/`not`) on traced values."""
from __future__ import annotations

import libcst as cst

from .base import Rule, Where, static_argnames_fix, tracing_phrase


class TracedIf(Rule):
    """
    ## What it does
    Flags a Python `if`/`elif`, conditional expression, `assert`, `and`/`or`/`not`, chained
    comparison whose truth depends on a value JAX traces abstractly (under `jax.jit`,
    `vmap`, `pmap`, `checkpoint`, or inside a `lax.scan`/`fori_loop`/`while_loop`/`cond` body).

    ## Why is this bad?
    While tracing, arrays are abstract: JAX knows their shape and dtype but not their values, so it
    cannot pick a branch: the truth test raises `TracerBoolConversionError`. An explicit `bool(x)`
    is a conversion and is reported by `traced-conversion`.

    ## Example
    ```python
    import jax

    @jax.jit
    def relu(x):
        if x > 0:
            return x
        return 0.0 * x
    ```

    ## Use instead
    ```python
    import jax
    import jax.numpy as jnp

    @jax.jit
    def relu(x):
        return jnp.where(x > 0, x, 0.0)
    ```
    Use `jax.lax.cond` to choose between computations, or mark the argument static
    (`static_argnums`/`static_argnames`) when it really is a Python value.

    ## How it is verified
    The function is traced with abstract inputs; a `TracerBoolConversionError` (or another
    `ConcretizationTypeError`) whose traceback passes through the flagged line confirms it.

    ## Known limitations
    Under `jax.grad` or `value_and_grad` alone values are concrete and `if x > 0` works, so those
    functions are not flagged; nor is a test of a parameter that only such transforms make a tracer
    in a function also traced abstractly elsewhere (there its callers give it a Python value).
    Truth tests of attributes of `self` are assumed static.

    ## References
    - https://docs.jax.dev/en/latest/errors.html#jax.errors.TracerBoolConversionError
    - https://docs.jax.dev/en/latest/control-flow.html
    """

    code = "JL101"
    name = "traced-if"
    summary = "Python truth test on a traced value"

    def _check(self, node: cst.CSTNode, test: cst.BaseExpression, what: str, where: Where,
               end: cst.CSTNode | None = None) -> None:
        fn = where.traced
        if fn is None or not fn.abstract:
            return
        if not where.truth_traced(test):
            return
        fix, edit = static_argnames_fix(where, fn, test)
        self.report(
            node,
            f"Python {what} on a traced value {tracing_phrase(fn, test)} raises `TracerBoolConversionError`; "
            f"use `jnp.where` or `jax.lax.cond`, or mark the argument static.",
            where,
            end_node=end,
            fix=fix,
            edit=edit,
            evidence=test,
        )

    def visit_If(self, node: cst.If, where: Where) -> None:
        what = "`elif`" if id(node) in where.model.elif_nodes else "`if`"
        self._check(node, node.test, what, where, end=node.test)

    def visit_IfExp(self, node: cst.IfExp, where: Where) -> None:
        self._check(node, node.test, "conditional expression", where)

    def visit_Assert(self, node: cst.Assert, where: Where) -> None:
        self._check(node, node.test, "`assert`", where)

    def visit_CompIf(self, node: cst.CompIf, where: Where) -> None:
        self._check(node, node.test, "comprehension `if`", where)

    def visit_BooleanOperation(self, node: cst.BooleanOperation, where: Where) -> None:
        model = where.model
        if model.is_test(node) or id(node) in model.nested_boolops:
            return
        values = where.values
        if values is not None and values.container_fallback(node):
            return  # `stats or {}`: a container (or None) tested for emptiness
        # Python calls bool() on every operand but the last (libcst nests `a and b and c` to the left).
        word = "`and`" if isinstance(node.operator, cst.And) else "`or`"
        self._check(node, node.left, word, where)

    def visit_UnaryOperation(self, node: cst.UnaryOperation, where: Where) -> None:
        if isinstance(node.operator, cst.Not) and not where.model.is_test(node):
            self._check(node, node.expression, "`not`", where)

    def visit_Comparison(self, node: cst.Comparison, where: Where) -> None:
        if len(node.comparisons) > 1 and not where.model.is_test(node):
            self._check(node, node, "chained comparison", where)

