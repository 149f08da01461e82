"""traced-shape: a traced value where JAX needs a static size (shapes, `arange`, `range`, slice bounds)."""
from __future__ import annotations

from typing import Optional

import libcst as cst

from ..jaxapi import SHAPE_ARGS, SHAPE_METHODS
from ..syntax import args_at
from .base import Rule, Where, tracing_phrase


class TracedShape(Rule):
    """
    ## What it does
    Flags a traced value used where JAX needs a static size: the shape of `jnp.zeros/ones/full/empty`,
    the bounds of `jnp.arange`/`range`, `jnp.eye`, `linspace(num=...)`, `lax.full`, the `shape=` of a
    `jax.random` sampler, `reshape`, `broadcast_to`, `tile`, `repeat` without `total_repeat_length=`,
    `jax.random.split(key, n)`, and slice bounds such as `x[:n]`.

    ## Why is this bad?
    Array shapes are part of the compiled program, so they must be known while JAX traces. A traced
    size raises `ConcretizationTypeError`, `TracerIntegerConversionError` or
    `TypeError: Shapes must be 1D sequences of concrete values of integer type`.

    ## Example
    ```python
    import jax
    import jax.numpy as jnp

    @jax.jit
    def first_n(x, n):
        return jnp.arange(n) * x
    ```

    ## Use instead
    ```python
    from functools import partial

    import jax
    import jax.numpy as jnp

    @partial(jax.jit, static_argnames="n")
    def first_n(x, n):
        return jnp.arange(n) * x
    ```
    Or keep a fixed maximum size and mask: `jnp.where(jnp.arange(N) < n, ..., 0)`.

    ## How it is verified
    Tracing the function raises a `ConcretizationTypeError`/`TypeError`/`IndexError` about shapes
    whose traceback passes through the flagged line.

    ## Known limitations
    Sizes computed by functions jaxlint does not know are assumed static.

    ## References
    - https://docs.jax.dev/en/latest/errors.html#jax.errors.ConcretizationTypeError
    - https://docs.jax.dev/en/latest/jit-compilation.html#marking-arguments-as-static
    """

    code = "JL301"
    name = "traced-shape"
    summary = "traced value used as a static size"

    def _report(self, node: cst.CSTNode, what: str, where: Where) -> None:
        fn = where.traced
        assert fn is not None
        self.report(
            node,
            f"{what} needs a static size, but it is traced {tracing_phrase(fn, node)}; make it a static argument "
            "(`static_argnames`) or use a fixed size with a mask.",
            where,
            evidence=node,
        )

    def visit_Call(self, node: cst.Call, where: Where) -> None:
        values = where.abstract_values
        if values is None:
            return
        qual = where.resolve(node.func)
        what: Optional[str] = None
        if qual is not None and qual in SHAPE_ARGS:
            positions, keywords = SHAPE_ARGS[qual]
            if any(values.traced(a) for a in args_at(node, positions, keywords)):
                what = f"`{qual.replace('jax.numpy.', 'jnp.').replace('jax.lax.', 'lax.').replace('builtins.', '')}`"
        elif qual is not None and qual.endswith(("numpy.repeat",)):
            if not any(a.keyword is not None and a.keyword.value == "total_repeat_length" for a in node.args):
                if any(values.traced(a) for a in args_at(node, (1,), ("repeats",))):
                    what = "`jnp.repeat` without `total_repeat_length=`"
        elif isinstance(node.func, cst.Attribute) and values.traced(node.func.value):
            meth = node.func.attr.value
            if meth in SHAPE_METHODS and any(values.traced(a.value) for a in node.args if a.keyword is None):
                what = f"`.{meth}()`"
            elif meth == "repeat" and not any(a.keyword and a.keyword.value == "total_repeat_length" for a in node.args):
                if any(values.traced(a) for a in args_at(node, (0,), ("repeats",))):
                    what = "`.repeat()` without `total_repeat_length=`"
        if what is not None:
            self._report(node, what, where)

    def visit_Subscript(self, node: cst.Subscript, where: Where) -> None:
        values = where.abstract_values
        if values is None:
            return
        for el in node.slice:
            sl = el.slice
            if isinstance(sl, cst.Slice) and any(
                    part is not None and values.traced(part) for part in (sl.lower, sl.upper, sl.step)):
                self._report(node, "A slice bound", where)
                return
