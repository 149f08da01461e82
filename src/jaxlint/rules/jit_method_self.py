"""jit-method-self: `jax.jit` on a method whose `self` is neither static nor a pytree."""
from __future__ import annotations

from typing import Optional

import libcst as cst

from ..semantic import ClassInfo, FunctionInfo, ModuleModel, static_param_names
from .base import Report, Rule, Where

_JIT_KINDS = ("jit", "pjit", "pmap")


class JitMethodSelf(Rule):
    """
    ## What it does
    Flags `jax.jit` applied to an instance method — as a decorator, or as `jax.jit(method)` in the
    class body — when `self` is neither marked static (`static_argnums=0`) nor an instance of a
    registered pytree class (`flax.struct.dataclass`, `equinox.Module`,
    `@jax.tree_util.register_pytree_node_class`, `register_dataclass`, a subclass of a base whose
    `__init_subclass__` registers `cls`, a class made by a metaclass that registers it). A method of an
    abstract base (it declares abstract methods) is not flagged when every subclass the project defines
    is a registered pytree. Nor is a method of a class derived (through the project's classes) from a
    class of a package outside the project other than the standard library, JAX and the model
    libraries: whether that base makes its instances pytrees cannot be read.

    ## Why is this bad?
    `jax.jit` traces every non-static argument, and `self` is an argument. An ordinary object is not a
    valid JAX type, so the call fails with `TypeError`; and once it is made static, attributes read
    through `self` are baked into the compiled code.

    ## Example
    ```python
    import jax

    class Scaler:
        def __init__(self, factor):
            self.factor = factor

        @jax.jit
        def __call__(self, x):
            return x * self.factor
    ```

    ## Use instead
    ```python
    from functools import partial

    import jax

    class Scaler:
        def __init__(self, factor):
            self.factor = factor

        @partial(jax.jit, static_argnums=0)
        def __call__(self, x):
            return x * self.factor
    ```
    (with `__hash__`/`__eq__` that cover `factor`), or register the class as a pytree, or jit a
    plain function that takes the state explicitly.

    ## How it is verified
    Tracing the method as written raises `TypeError` on `self`.

    ## Known limitations
    `jax.jit(self.method)` binds `self` as a constant and is not flagged.

    ## References
    - https://docs.jax.dev/en/latest/faq.html#how-to-use-jit-with-methods
    """

    code = "JL402"
    name = "jit-method-self"
    summary = "jit on a method with a non-static `self`"
    anywhere = True  # visits the def itself, which sits outside the function it checks

    def _self_ok(self, fn: FunctionInfo, t: object, opts: dict) -> bool:
        statics = static_param_names(fn, t, opts, 0)  # type: ignore[arg-type]
        return statics is None or fn.params[0].name in statics

    def _flag(self, node: cst.CSTNode, fn: FunctionInfo) -> None:
        who = fn.params[0].name
        self.reports.append(Report(
            node,
            f"`jax.jit` on the method `{fn.qualname}` traces `{who}`, which is neither static nor a pytree "
            f"(`TypeError` on call); use `partial(jax.jit, static_argnums=0)` or register the class as a pytree.",
            fn,
            subject={"method": fn.qualname},
        ))

    def _method(self, fn: Optional[FunctionInfo], model: ModuleModel) -> Optional[FunctionInfo]:
        if fn is None or not fn.is_method or fn.cls is None or model.instances_are_pytrees(fn.cls):
            return None
        if model.opaque_base(fn.cls):
            return None  # a base from a package jaxlint cannot see may make the instances pytrees
        if fn.shadowed:
            return None  # defined again further down the class body: this def is never bound
        if not isinstance(fn.node, cst.FunctionDef):
            return None
        decos = {(d.decorator.value if isinstance(d.decorator, cst.Name) else "") for d in fn.node.decorators}
        if "staticmethod" in decos or "property" in decos:
            return None
        if not fn.params:
            return None
        if fn.params[0].name not in ("self", "cls"):
            # `@jit def clip(pos, face)` in a class used as a namespace, called as `Render.clip(...)`: a
            # def whose first parameter is not named for the instance is not written as a method
            return None
        return fn

    def visit_FunctionDef(self, node: cst.FunctionDef, where: Where) -> None:
        jits = [(deco, got) for deco in node.decorators
                if (got := where.model.transform_of(deco.decorator, where.scope)) is not None and got[0].kind in _JIT_KINDS]
        if not jits:
            return  # (asked first: whether the def is a method of a class whose instances are no pytrees
            # reads the class's bases, here and in the project)
        fn = self._method(where.model.fn_of_node.get(id(node)), where.model)
        if fn is None:
            return
        for deco, got in jits:
            if not self._self_ok(fn, got[0], got[1]):
                self._flag(deco, fn)
                return

    def visit_Call(self, node: cst.Call, where: Where) -> None:
        if not isinstance(where.scope, ClassInfo) or not node.args or node.args[0].keyword is not None:
            return
        q = where.resolve(node.func)
        t = where.model.transforms.get(q or "")
        if t is None or t.kind not in _JIT_KINDS or not isinstance(node.args[0].value, cst.Name):
            return
        fn = self._method(where.scope.defs.get(node.args[0].value.value), where.model)
        if fn is None:
            return
        opts = {a.keyword.value: a.value for a in node.args if a.keyword is not None}
        if not self._self_ok(fn, t, opts):
            self._flag(node, fn)
