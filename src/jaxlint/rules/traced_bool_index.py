"""traced-bool-index: boolean-mask indexing and size-changing calls on traced values."""
from __future__ import annotations

import libcst as cst

from ..jaxapi import NONZERO_LIKE
from .base import Rule, Where, tracing_phrase


class TracedBoolIndex(Rule):
    """
    ## What it does
    Flags indexing with a traced boolean mask (`x[mask]`, `x.at[mask]`), one-argument `jnp.where`, and
    `jnp.nonzero`/`argwhere`/`flatnonzero`/`unique`/`compress`/`extract` on traced input without `size=`.

    ## Why is this bad?
    The size of the result depends on the values in the mask, and array sizes must be known while JAX
    traces: JAX raises `NonConcreteBooleanIndexError` or `ConcretizationTypeError`.

    ## Example
    ```python
    import jax

    @jax.jit
    def positive_sum(x):
        return x[x > 0].sum()
    ```

    ## Use instead
    ```python
    import jax
    import jax.numpy as jnp

    @jax.jit
    def positive_sum(x):
        return jnp.where(x > 0, x, 0).sum()
    ```
    Or give the size: `jnp.nonzero(mask, size=k, fill_value=0)`.

    ## How it is verified
    Tracing raises `NonConcreteBooleanIndexError` (or `ConcretizationTypeError`) at the flagged line.

    ## Known limitations
    A mask is recognised when it is built by a comparison, `~`/`&`/`|`, a `jnp.is*`/`logical_*`
    function or `.astype(bool)`; masks from other functions are not.

    ## References
    - https://docs.jax.dev/en/latest/errors.html#jax.errors.NonConcreteBooleanIndexError
    """

    code = "JL302"
    name = "traced-bool-index"
    summary = "dynamic-size boolean indexing"

    def visit_Subscript(self, node: cst.Subscript, where: Where) -> None:
        values = where.abstract_values
        if values is None:
            return
        fn = values.fn
        for el in node.slice:
            if isinstance(el.slice, cst.Index) and values.is_bool_array(el.slice.value):
                self.report(
                    node,
                    f"Indexing with a traced boolean mask {tracing_phrase(fn, node)} gives a result whose size depends on "
                    "the data (`NonConcreteBooleanIndexError`); use `jnp.where(mask, x, 0)` or a fixed `size=`.",
                    where,
                    evidence=node,
                )
                return

    def visit_Call(self, node: cst.Call, where: Where) -> None:
        values = where.abstract_values
        if values is None:
            return
        fn = values.fn
        if any(a.keyword is not None and a.keyword.value == "size" for a in node.args):
            return
        qual = where.resolve(node.func) or ""
        name = qual[len("jax.numpy."):] if qual.startswith("jax.numpy.") else None
        method = node.func.attr.value if isinstance(node.func, cst.Attribute) and qual == "" else None
        positional = [a.value for a in node.args if a.keyword is None and not a.star]
        if name == "where":
            if len(positional) == 1 and len(node.args) == 1 and values.traced(positional[0]):
                self.report(node, f"One-argument `jnp.where` {tracing_phrase(fn, node)} returns indices of data-dependent "
                            "size; use `jnp.where(cond, x, y)` or pass `size=` and `fill_value=`.", where,
                            evidence=node)
            return
        if name in NONZERO_LIKE and positional and any(values.traced(p) for p in positional):
            self.report(node, f"`jnp.{name}` {tracing_phrase(fn, node)} returns a data-dependent number of elements; "
                        "pass `size=` (and `fill_value=`).", where, evidence=node)
        elif method in ("nonzero",) and values.traced(node.func.value):  # type: ignore[union-attr]
            self.report(node, f"`.nonzero()` {tracing_phrase(fn, node)} returns a data-dependent number of elements; "
                        "use `jnp.nonzero(x, size=...)`.", where, evidence=node)
