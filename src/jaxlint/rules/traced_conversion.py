"""traced-conversion: converting a traced value to a Python or NumPy value."""
from __future__ import annotations

import libcst as cst

from ..jaxapi import NUMPY_CONVERTING
from ..semantic import ClassInfo
from .base import Rule, Where, tracing_phrase

_CONTAINER_LITERALS = (cst.List, cst.Tuple, cst.Dict, cst.ListComp, cst.DictComp)


# NumPy's explicit conversions: an object's `__array__` hands them its data, tracer or not.
_EXPLICIT = frozenset({"asarray", "array", "asanyarray", "ascontiguousarray", "asfortranarray", "copy"})


class TracedConversion(Rule):
    """
    ## What it does
    Flags `float()`, `int()`, `complex()`, `bool()`, `.item()`, `.tolist()`, `np.asarray`/`np.array` and NumPy
    ufuncs (`np.exp`, `np.sqrt`, …) applied to a traced value, and indexing a Python list, tuple or dict
    with a traced value.

    ## Why is this bad?
    A tracer has no concrete value to hand to Python or NumPy: JAX raises `ConcretizationTypeError`,
    `TracerIntegerConversionError` or `TracerArrayConversionError`.

    ## Example
    ```python
    import jax

    @jax.jit
    def scale(x, s):
        return x * float(s)
    ```

    ## Use instead
    ```python
    import jax

    @jax.jit
    def scale(x, s):
        return x * s
    ```
    Stay in `jnp` (`jnp.exp`, `jnp.asarray`), use `x.astype(...)` for dtype changes, index a
    `jnp.array` instead of a Python list, or make the value static.

    ## How it is verified
    Tracing raises `ConcretizationTypeError`, `TracerArrayConversionError` or
    `TracerIntegerConversionError` at the flagged line.

    ## Known limitations
    Under `jax.grad` alone values are concrete and only `float()`/`complex()` are flagged. A truth
    test without `bool()` (`if x:`) is `traced-if`. A NumPy ufunc applied to objects of a class that is
    not JAX's or NumPy's, built from the traced values (`x = xarray_jax.Variable(dims, v); np.abs(x + 2)`),
    is left to that class's `__array_ufunc__`; NumPy's explicit conversions (`np.asarray`) are not. A
    key that passed an `isinstance` test of a class that is no array type (`if isinstance(slot, Slot):
    table[slot]`) is an object of that class, not a tracer; so is one bound to what a method returns that
    every definition of that name in the module is annotated to return an instance of one of its classes
    (`key = var.get_slot()` with `def get_slot(self) -> Slot`).

    ## References
    - https://docs.jax.dev/en/latest/errors.html#jax.errors.ConcretizationTypeError
    - https://docs.jax.dev/en/latest/errors.html#jax.errors.TracerArrayConversionError
    """

    code = "JL303"
    name = "traced-conversion"
    summary = "traced value converted to Python or NumPy"

    def _report(self, node: cst.CSTNode, what: str, where: Where, fix: str) -> None:
        fn = where.traced
        assert fn is not None
        if where.model.probed(node, where.scope):
            return  # `try: np.asarray(x) except Exception: return False`: a probe of whether x is concrete
        self.report(node, f"{what} needs a concrete value, but it is traced {tracing_phrase(fn, node)}; {fix}.", where,
                    evidence=node)

    def visit_Call(self, node: cst.Call, where: Where) -> None:
        fn = where.traced
        values = where.values
        if fn is None or values is None:
            return
        qual = where.resolve(node.func) or ""
        positional = [a.value for a in node.args if a.keyword is None and not a.star]
        if qual == "builtins.bool" and len(node.args) == 1 and len(positional) == 1:
            if fn.abstract and where.truth_traced(positional[0]):
                self._report(node, "`bool()`", where, "use `jnp.where` or `jax.lax.cond`, or make it static")
            return
        if qual in ("builtins.float", "builtins.complex", "builtins.int") and 1 <= len(positional) <= (
                2 if qual == "builtins.complex" else 1):
            if (fn.abstract or qual != "builtins.int") and any(values.traced(p) for p in positional):
                py = qual.split(".")[-1]
                self._report(node, f"`{py}()`", where, f"keep it an array (`x.astype(jnp.{'float32' if py == 'float' else py + '32' if py == 'int' else 'complex64'})`) or make it static")
            return
        if qual.startswith("numpy.") and qual[len("numpy."):] in NUMPY_CONVERTING:
            name = qual[len("numpy."):]
            if any(values.traced(p) for p in positional) and not (  # fails under grad alone too
                    positional and name not in _EXPLICIT and values.wrapper_objects(positional[0], node)):
                self._report(node, f"`np.{name}`", where, f"use `jnp.{name}`")
            return
        if isinstance(node.func, cst.Attribute) and node.func.attr.value in ("item", "tolist") and not node.args:
            if fn.abstract and values.traced(node.func.value):
                self._report(node, f"`.{node.func.attr.value}()`", where, "keep it an array")

    def visit_Subscript(self, node: cst.Subscript, where: Where) -> None:
        fn = where.traced
        values = where.values
        if fn is None or not fn.abstract or values is None or not isinstance(node.value, cst.Name):
            return
        if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
            return
        index = node.slice[0].slice.value
        if not values.traced(index) or values.proven_object(index) or values.traced(node.value):
            return
        owner = where.model.owner_of(node.value.value, where.scope)
        if owner is None or isinstance(owner, ClassInfo):
            return
        assigned = owner.assigned.get(node.value.value, [])
        if assigned and all(isinstance(v, _CONTAINER_LITERALS) for v in assigned):
            self._report(node, f"Indexing the Python container `{node.value.value}`", where,
                         "make it a `jnp.array` (or use `lax.switch` for a list of functions)")
