"""array-item-assignment: in-place item assignment on a JAX array."""
from __future__ import annotations

from typing import Optional

import libcst as cst

from ..jaxapi import ANY_PYTREE_ANNOTATIONS, ARRAY_ANNOTATIONS, CONTAINER_ANNOTATIONS, LIST_RETURNING, STAGING_MODULES
from ..semantic import FunctionInfo, ModuleModel, Scope
from ..edits import Edit, at_update
from ..findings import Fix
from ..syntax import contains, descendants
from .base import Rule, Where

_AUG = {
    cst.AddAssign: "add", cst.SubtractAssign: "subtract", cst.MultiplyAssign: "multiply",
    cst.DivideAssign: "divide", cst.PowerAssign: "power",
}


class ArrayItemAssignment(Rule):
    """
    ## What it does
    Flags `x[i] = v`, `x[i] += v` and `x[a:b] = v` where `x` is known to be a JAX array: built by a
    `jnp.*`/`jax.random.*` call, annotated `jax.Array`/`jnp.ndarray`, or a traced argument of a
    jitted function (unless annotated as something else a pytree can be: `Any`, a dict, a list).
    Anywhere, not only in traced code.

    ## Why is this bad?
    JAX arrays are immutable: item assignment raises
    `TypeError: JAX arrays are immutable and do not support in-place item assignment`.

    ## Example
    ```python
    import jax.numpy as jnp

    def one_hot(i, n):
        x = jnp.zeros(n)
        x[i] = 1.0
        return x
    ```

    ## Use instead
    ```python
    import jax.numpy as jnp

    def one_hot(i, n):
        x = jnp.zeros(n)
        x = x.at[i].set(1.0)
        return x
    ```
    (`x[i] += v` becomes `x = x.at[i].add(v)`; also `.multiply`, `.divide`, `.power`, `.min`, `.max`.)

    ## How it is verified
    Running the statement raises JAX's immutability `TypeError`.

    ## Known limitations
    Arrays returned by functions other than JAX's own are not recognised, unless the binding is annotated
    as a JAX array (`bounds: jax.Array = initial(x)`) and its value is not visibly NumPy's.

    ## References
    - https://docs.jax.dev/en/latest/_autosummary/jax.numpy.ndarray.at.html
    """

    code = "JL304"
    name = "array-item-assignment"
    summary = "in-place item assignment on a JAX array"
    anywhere = True

    def _is_jax_array(self, name: str, where: Where, target: Optional[cst.BaseExpression] = None) -> bool:
        model = where.model
        if f"notarray:{name}" in where.guards:
            return False  # the `else` of `if isinstance(x, jnp.ndarray):` (NumPy's arrays take stores)
        owner = model.owner_of(name, where.scope)
        if owner is None or model.is_ref(name, where.scope):
            return False  # a Pallas `Ref` takes stores: that is how a kernel writes
        if isinstance(owner, FunctionInfo) and owner is where.function and target is not None:
            before = owner.bindings(name, before=target)
            if before:  # the binding in force at the store decides, not the parameter's annotation
                latest = before[-1].assigned
                jax_array = latest is not None and (
                    self._jax_value(latest, owner, where, at=before[-1].target)  # `buf = jnp.asarray(buf)`
                    or self._array_arithmetic(latest, owner, before[-1].target, model)
                    or self._annotated_array(latest, owner, model))
                # (`try: x = x.at[i].set(v)` / `except AttributeError: x[i] = v`: NumPy's fallback)
                return jax_array and not (owner.node is not None and _after_failed_at(name, target, owner.node))
        if isinstance(owner, FunctionInfo):
            p = owner.param(name)
            if p is not None:
                if p.annotation in ARRAY_ANNOTATIONS and not model.numpy_alias(p.annotation_expr, owner.parent or model.root):
                    return True  # (`x: Array` with `Array = Union[np.ndarray, jax.Array]` may be NumPy's)
                if model.project_class(p.annotation_expr, owner.parent or model.root):
                    return False  # `g: DoubleDouble`: the class's own `__setitem__`, or its own error
                # (an argument JAX flattened may be any pytree: annotated `Any`, a container or a pytree,
                # `x[i] = v` stores into the dict or list JAX rebuilt for the trace)
                if owner.traced and "flax_jit" not in owner.transforms and name in owner.pytree_params \
                        and p.annotation not in CONTAINER_ANNOTATIONS and p.annotation not in ANY_PYTREE_ANNOTATIONS \
                        and name not in owner.container_names \
                        and name in owner.traced_params and not owner.assigned.get(name):
                    return True
                return False
        values = owner.assigned.get(name, [])
        return bool(values) and all(v is not None and self._jax_value(v, owner, where) for v in values)

    def _annotated_array(self, value: cst.BaseExpression, owner: FunctionInfo, model: ModuleModel) -> bool:
        """`bounds: jax.Array = initial(x)`: the annotation of the binding says it is a JAX array (not a
        type alias that admits a NumPy array)."""
        head, ann = owner.annotated.get(id(value), (None, None))
        if head not in ARRAY_ANNOTATIONS or model.numpy_alias(ann, owner.parent or model.root):
            return False
        # (the value says otherwise: `a: Array = np.array(...).transpose(...)  # type: ignore` is NumPy's)
        e = value
        while isinstance(e, (cst.Call, cst.Attribute, cst.Subscript)):
            if isinstance(e, cst.Call) and (model.resolve(e.func, owner) or "").startswith("numpy."):
                return False
            e = e.func if isinstance(e, cst.Call) else e.value
        return True

    def _jax_value(self, value: cst.BaseExpression, owner: Scope, where: Where, depth: int = 0,
                   at: Optional[cst.CSTNode] = None) -> bool:
        """Whether `value` is a JAX array: made by JAX (`jnp.*`, `x.at[i].set(v)`), or an array method's
        result, an index or arithmetic of one; with `at` (the target of the binding `value` is assigned to),
        a name of the function read there whose last binding before it is one."""
        if depth > 4:
            return False
        if isinstance(value, cst.Call):
            q = where.model.resolve(value.func, owner)
            if q is not None and q.startswith(STAGING_MODULES):
                # (`acc = lax.fori_loop(0, n, body, acc)` with a list `acc`: a list again)
                return q not in LIST_RETURNING and not where.model.python_container(value, owner)
            func = value.func
            if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Subscript) \
                    and isinstance(func.value.value, cst.Attribute) and func.value.value.attr.value == "at":
                return True  # x.at[i].set(v) and friends return a JAX array
            if isinstance(func, cst.Attribute) and func.attr.value in _ARRAY_METHODS:
                return self._jax_value(func.value, owner, where, depth + 1, at)  # `jnp.vstack(fs).astype(i32)`
            return False
        if isinstance(value, cst.Subscript):
            return self._jax_value(value.value, owner, where, depth + 1, at)  # `vertices[faces]`: an index of one
        if isinstance(value, cst.BinaryOperation) and not isinstance(value.operator, cst.MatrixMultiply):
            if any(isinstance(side, (cst.List, cst.Tuple, cst.ListComp)) for side in (value.left, value.right)):
                return False
            return self._jax_value(value.left, owner, where, depth + 1, at) \
                or self._jax_value(value.right, owner, where, depth + 1, at)
        if isinstance(value, cst.Name) and at is not None and isinstance(owner, FunctionInfo):
            before = owner.bindings(value.value, before=at)
            last = before[-1] if before else None
            return last is not None and last.assigned is not None \
                and self._jax_value(last.assigned, owner, where, depth + 1, last.target)
        return False

    def _array_arithmetic(self, value: cst.BaseExpression, fn: FunctionInfo, at: cst.BaseExpression,
                          model: ModuleModel) -> bool:
        """`x = x * factor` where `x` is, at that point, still a parameter annotated as a JAX array."""
        if isinstance(value, cst.UnaryOperation):
            return self._array_arithmetic(value.expression, fn, at, model)
        if isinstance(value, cst.BinaryOperation):
            if any(isinstance(side, (cst.List, cst.Tuple, cst.ListComp)) for side in (value.left, value.right)):
                return False  # `[jnp.zeros(n)] * T`: a list repeated, whatever `T` is annotated
            return self._array_arithmetic(value.left, fn, at, model) or self._array_arithmetic(value.right, fn, at, model)
        if isinstance(value, cst.Name):
            p = fn.param(value.value)
            return p is not None and p.annotation in ARRAY_ANNOTATIONS and not fn.bindings(value.value, before=at) \
                and not model.numpy_alias(p.annotation_expr, fn.parent or model.root)
        return False

    def _target(self, target: cst.BaseExpression) -> Optional[cst.Name]:
        if isinstance(target, cst.Subscript) and _is_ref_write(target):
            return None  # `ref[...] = v`: JAX's mutable array references (and Flax Variables) allow it
        if isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name):
            for el in target.slice:
                if isinstance(el.slice, cst.Index) and isinstance(el.slice.value, (cst.SimpleString, cst.FormattedString)):
                    return None  # a string key: a dict
            return target.value
        return None

    def _flag(self, node: cst.CSTNode, target: cst.Subscript, method: Optional[str], value: cst.BaseExpression,
              where: Where) -> None:
        name, index = _code(target.value), _code(target.slice)
        if method is None:  # `//=`, `%=` ...: no `.at` method to rewrite to
            self.report(node, f"JAX arrays are immutable, so assigning into `{name}[{index}]` raises `TypeError`; "
                        f"compute the new value and write it with `{name} = {name}.at[{index}].set(...)`.", where)
            return
        new = at_update(target, method, value)
        self.report(
            node,
            f"JAX arrays are immutable, so assigning into `{name}[{index}]` raises `TypeError`; "
            f"write `{name} = {name}.at[{index}].{method}({_code(value)})`.",
            where,
            fix=Fix(f"Rewrite as `{name} = {name}.at[{index}].{method}(...)`", "safe"),
            edit=Edit(node, lambda old, new=new: new),
        )

    def visit_Assign(self, node: cst.Assign, where: Where) -> None:
        for t in node.targets:
            name = self._target(t.target)
            if name is not None and self._is_jax_array(name.value, where, t.target):
                assert isinstance(t.target, cst.Subscript)
                if len(node.targets) == 1:
                    self._flag(node, t.target, "set", node.value, where)
                return

    def visit_AugAssign(self, node: cst.AugAssign, where: Where) -> None:
        name = self._target(node.target)
        if name is None or not self._is_jax_array(name.value, where, node.target):
            return
        assert isinstance(node.target, cst.Subscript)
        self._flag(node, node.target, _AUG.get(type(node.operator)), node.value, where)


# Methods of a JAX array that give a JAX array back (not `tolist`, `item`, `__array__`...).
_ARRAY_METHODS = frozenset({"astype", "reshape", "transpose", "squeeze", "ravel", "flatten", "copy", "swapaxes",
                            "clip", "round", "conj", "real", "imag", "repeat", "take"})


def _after_failed_at(name: str, target: cst.CSTNode, body: cst.CSTNode) -> bool:
    """Whether `target` sits in the `except AttributeError` (or a broader) handler of a `try` whose body
    writes `name` through `name.at[...]`: the handler runs where `name` has no `.at`, so it is no JAX array."""
    for t in descendants(body):
        if not isinstance(t, cst.Try):
            continue
        for h in t.handlers:
            caught = h.type
            names = [caught] if not isinstance(caught, cst.Tuple) else [el.value for el in caught.elements]
            broad = caught is None or any(isinstance(n, cst.Name) and n.value in ("AttributeError", "Exception",
                                                                                  "BaseException") for n in names)
            if broad and contains(h.body, target) and any(
                    isinstance(n, cst.Attribute) and n.attr.value == "at" and isinstance(n.value, cst.Name)
                    and n.value.value == name for n in descendants(t.body)):
                return True
    return False


def _is_ref_write(target: cst.Subscript) -> bool:
    return len(target.slice) == 1 and isinstance(target.slice[0].slice, cst.Index) and \
        isinstance(target.slice[0].slice.value, cst.Ellipsis)


def _code(node: object) -> str:
    if isinstance(node, (tuple, list)):
        return ", ".join(_code(n) for n in node)
    if isinstance(node, cst.SubscriptElement):
        return cst.Module([]).code_for_node(node.slice)
    return cst.Module([]).code_for_node(node)  # type: ignore[arg-type]
