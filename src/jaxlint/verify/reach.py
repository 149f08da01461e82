"""Reaching a flagged function as a runtime object: module functions, methods on built instances,
nested definitions taken from their enclosing function's frame, and how each is called and traced."""
from __future__ import annotations

import ast
import sys
import types
from typing import Any, Callable, Optional

from ..jaxapi import TRANSFORMS
from .evidence import Captured, TimedOut, Unavailable, error_summary
from .inputs import CannotBuild, Inputs, build_instance, typed_key

# Transforms whose body is traced abstractly and cached (a second call with the same shapes is a hit).
JIT_LIKE = {"jit", "pjit", "filter_jit", "checkpoint", "remat", "scan", "fori_loop", "while_loop", "cond", "switch",
            "map", "associative_scan", "custom_jvp", "custom_vjp", "shard_map", "named_call"} | {
    t.kind for t in TRANSFORMS.values() if t.cached} - {"pmap"}
# Transforms verification applies itself to the flagged function (others are reached through their caller).
OWN_TRANSFORMS = {"jit", "pjit", "filter_jit", "flax_jit", "vmap", "pmap", "grad", "value_and_grad", "call", "helper",
                  "filter_vmap", "filter_grad", "filter_value_and_grad"}
# Transforms that trace a function passed to them inside another function's body: calling the
# enclosing function is what traces the body.
BODY_TRANSFORMS = {"scan", "fori_loop", "while_loop", "cond", "switch", "map", "associative_scan", "checkpoint",
                   "remat", "custom_jvp", "custom_vjp", "helper", "call"}


Def = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def defs_in(body: list[ast.stmt]) -> list[ast.AST]:
    """Definitions directly in `body`, including those under `if`/`try`/`with`/`for` blocks."""
    out: list[ast.AST] = []
    for stmt in body:
        if isinstance(stmt, Def):
            out.append(stmt)
        elif isinstance(stmt, (ast.If, ast.For, ast.While, ast.With, ast.Try, ast.AsyncWith, ast.AsyncFor)):
            for field in ("body", "orelse", "finalbody"):
                out.extend(defs_in(getattr(stmt, field, []) or []))
            for h in getattr(stmt, "handlers", []):
                out.extend(defs_in(h.body))
    return out


def def_chain(tree: ast.Module, qualname: str) -> Optional[list[ast.AST]]:
    """The definitions along a dotted qualname (`Test.test_x.f`), outermost first."""
    body: list[ast.stmt] = tree.body
    chain: list[ast.AST] = []
    for part in qualname.split("."):
        node = next((d for d in reversed(defs_in(body)) if d.name == part), None)  # type: ignore[attr-defined]
        if node is None:
            return None
        chain.append(node)
        body = node.body  # type: ignore[attr-defined]
    return chain


def first_line(node: ast.AST) -> int:
    decos = getattr(node, "decorator_list", [])
    return min([node.lineno] + [d.lineno for d in decos])  # type: ignore[attr-defined]


def is_method(chain: list[ast.AST], i: int) -> bool:
    node = chain[i]
    if i == 0 or not isinstance(chain[i - 1], ast.ClassDef) or not isinstance(node, ast.FunctionDef):
        return False
    if any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list):
        return False
    params = node.args.posonlyargs + node.args.args
    return bool(params) and params[0].arg in ("self", "cls")


class Reached:
    """A flagged function as a runtime object, and how to call it."""

    def __init__(self, obj: Any, node: ast.FunctionDef, instance: Any = None, raw: Any = None,
                 prebound: bool = False) -> None:
        self.obj = obj  # what to call (a bound method for methods)
        self.node = node
        self.instance = instance  # `self`, for methods
        self.raw = raw  # the class attribute itself (a jit wrapper for a decorated method)
        self.prebound = prebound  # a test method generated with its parameters: call it with no arguments



class Reaching:
    """The part of the worker that turns a qualname into something to call (mixed into `Worker`)."""

    def reach(self, qualname: str, variant: int = 0) -> Reached:
        chain = def_chain(self.tree, qualname)
        if chain is None or not isinstance(chain[-1], (ast.FunctionDef, ast.AsyncFunctionDef)):
            raise CannotBuild(f"`{qualname}` is not a function defined in this file")
        obj: Any = self.mod
        instance: Any = None
        raw: Any = None
        prebound = False
        for i, node in enumerate(chain):
            name = node.name  # type: ignore[attr-defined]
            if i > 0 and isinstance(chain[i - 1], ast.FunctionDef):
                obj = self.capture(self.reach(".".join(n.name for n in chain[:i]), variant),  # type: ignore[attr-defined]
                                   node, variant)
                instance = raw = None
                prebound = False
                continue
            holder = obj
            raw = holder.__dict__.get(name) if isinstance(holder, type) else None
            generated = _generated_test(holder, node) if isinstance(holder, type) and not hasattr(holder, name) \
                else None
            if generated is not None:
                # `@parameterized.parameters(...)` replaced the method by `test_x0`, `test_x1`, …
                instance = build_instance(holder, self.inputs(variant), method=generated)
                obj = getattr(instance, generated)
                prebound = True
                continue
            if isinstance(obj, Unavailable) or name not in getattr(holder, "__dict__", {}) and not hasattr(holder, name):
                why = self.failures.get(name) or self.failures.get(chain[0].name)  # type: ignore[attr-defined]
                raise CannotBuild(f"`{name}` could not be loaded" + (f": {why}" if why else ""))
            obj = getattr(holder, name)
            if isinstance(obj, Unavailable):
                raise CannotBuild(f"`{name}` could not be loaded: {self.failures.get(name, 'unknown error')}")
            if is_method(chain, i):
                if isinstance(raw, classmethod):
                    instance = holder
                    continue
                instance = build_instance(holder, self.inputs(variant), method=name)
                obj = getattr(instance, name)
        return Reached(obj, chain[-1], instance, raw, prebound)  # type: ignore[arg-type]

    def call_args(self, reached: Reached, inputs: Inputs, statics: set[str] = frozenset()  # type: ignore[assignment]
                  ) -> tuple[list[Any], dict[str, Any], str]:
        """Arguments for a call of the reached function (none for a generated test method)."""
        if reached.prebound:
            return [], {}, f"{reached.node.name}() as its test parameters give it"
        return inputs.arguments(reached.node, set(statics),
                                skip_first=reached.instance is not None and has_self(reached.node))

    def capture(self, outer: Reached, node: ast.AST, variant: int) -> Any:
        """Run the enclosing function until the nested definition `node` exists; return it."""
        name = node.name  # type: ignore[attr-defined]
        first = first_line(outer.node)
        code_name = outer.node.name
        end = getattr(node, "end_lineno", node.lineno)  # type: ignore[attr-defined]
        path = self.path

        def local(frame: Any, event: str, arg: Any) -> Any:
            if event == "line" and frame.f_lineno > end and name in frame.f_locals \
                    or event == "return" and name in frame.f_locals:
                raise Captured(frame.f_locals[name], dict(frame.f_locals))
            return local

        def glob(frame: Any, event: str, arg: Any) -> Any:
            code = frame.f_code
            if code.co_filename == path and code.co_name == code_name and code.co_firstlineno in (
                    first, outer.node.lineno):
                return local
            return None

        args, kwargs, sig = self.call_args(outer, self.inputs(variant, plain=True))
        fn = outer.obj
        sys.settrace(glob)
        try:
            fn(*args, **kwargs)
        except Captured as got:
            self.scope = got.scope  # names of the enclosing function: classes and values its annotations name
            return got.value
        except (TimedOut, CannotBuild):
            raise
        except BaseException as exc:  # noqa: BLE001
            raise CannotBuild(f"running the enclosing `{sig}` to reach `{name}` failed first with "
                              f"{error_summary(exc, self.watch)}") from None
        finally:
            sys.settrace(None)
        raise CannotBuild(f"running the enclosing `{sig}` never defined `{name}`")

    def callables(self, reached: Reached, target: dict[str, Any]) -> tuple[Callable, Callable, bool]:
        """(trace(*args, **kw), call(*args, **kw), cached?) for the reached function."""
        import jax

        transform = target["transform"]
        obj = reached.obj
        statics = dict(static_argnums=tuple(target.get("static_argnums", ())),
                       static_argnames=tuple(target.get("static_argnames", ())))
        if reached.instance is not None and _is_linen_instance(reached.instance):
            return self._linen_callables(reached)
        if transform in ("call", "helper"):
            return obj, obj, False
        if reached.instance is not None:
            # A transform applied to the function in the class (a decorator, `step = jax.jit(_step)`):
            # `self` is its first argument, as when the method is called on an instance.
            inst = reached.instance
            raw = reached.raw.__func__ if isinstance(reached.raw, (classmethod, staticmethod)) else reached.raw
            wrapper = raw if raw is not None and not isinstance(raw, types.FunctionType) else \
                _class_wrapper_of(type(inst) if not isinstance(inst, type) else inst, raw)
            if wrapper is not None and callable(wrapper):
                if hasattr(wrapper, "lower"):
                    return ((lambda *a, **k: _staged(wrapper)(inst, *a, **k)), (lambda *a, **k: wrapper(inst, *a, **k)),
                            True)
                return ((lambda *a, **k: wrapper(inst, *a, **k)), (lambda *a, **k: wrapper(inst, *a, **k)),
                        transform in JIT_LIKE)
        if hasattr(obj, "lower") and callable(obj):  # already jitted (the decorator form)
            return (lambda *a, **k: _staged(obj)(*a, **k)), obj, True
        wrapped = hasattr(obj, "__wrapped__") or not isinstance(obj, (types.FunctionType, types.MethodType))
        if wrapped and callable(obj):  # a transform applied by a decorator that has no `lower`: call it
            return obj, obj, transform in JIT_LIKE
        if not callable(obj):
            raise CannotBuild("the traced object is not callable")
        if transform in ("vmap", "pmap"):
            axes = tuple(None if i in target.get("_static_positions", ()) else 0
                         for i in range(len(self._params(reached))))
            mapped = jax.vmap(obj, in_axes=axes) if None in axes else jax.vmap(obj)
            return (lambda *a, **k: jax.eval_shape(mapped, *a, **k)), mapped, False
        if transform in JIT_LIKE:
            if reached.instance is not None:
                statics["static_argnums"] = tuple(i - 1 for i in statics["static_argnums"] if i > 0)
            jitted = jax.jit(obj, **statics) if transform in ("jit", "pjit", "filter_jit") else jax.jit(obj)
            return (lambda *a, **k: _staged(jitted)(*a, **k)), jitted, True
        if transform in ("grad", "value_and_grad"):
            g = jax.grad(obj) if transform == "grad" else jax.value_and_grad(obj)
            return (lambda *a, **k: jax.eval_shape(g, *a, **k)), g, False
        jitted = jax.jit(obj)
        return (lambda *a, **k: _staged(jitted)(*a, **k)), jitted, True


    def _linen_callables(self, reached: Reached) -> tuple[Callable, Callable, bool]:
        """A flax.linen module method runs bound, through `init`: trace it under jit with abstract inputs."""
        import jax

        module, method = reached.instance, reached.node.name
        rngs = {"params": typed_key(0), "dropout": typed_key(1)}

        def run(*a: Any, **k: Any) -> Any:
            return module.init_with_output(rngs, *a, method=method, **k)

        return (lambda *a, **k: jax.eval_shape(run, *a, **k)), jax.jit(run), True

    def _params(self, reached: Reached) -> list[ast.arg]:
        params = reached.node.args.posonlyargs + reached.node.args.args
        return params[1:] if reached.instance is not None and has_self(reached.node) else params


def _staged(jitted: Any) -> Callable:
    """How to trace a jitted callable without running it: `.trace` (the Python body runs, every
    tracing error is raised) where JAX offers it, else `.lower`, which also lowers to MLIR (about
    5x the cost, and no error a rule names is raised there)."""
    return getattr(jitted, "trace", None) or jitted.lower


def has_self(node: ast.FunctionDef) -> bool:
    params = node.args.posonlyargs + node.args.args
    return bool(params) and params[0].arg in ("self", "cls")


def _generated_test(cls: type, node: ast.AST) -> Optional[str]:
    """The name of a method generated from `node` (absl's or pytest-style parameterized tests)."""
    import inspect

    for klass in cls.__mro__:
        for attr, value in vars(klass).items():
            if not callable(value) or attr == node.name:  # type: ignore[attr-defined]
                continue
            try:
                code = getattr(inspect.unwrap(value), "__code__", None)
            except ValueError:
                continue
            if code is not None and code.co_name == node.name and code.co_firstlineno in (  # type: ignore[attr-defined]
                    node.lineno, first_line(node)):  # type: ignore[attr-defined]
                return attr
    return None


def _class_wrapper_of(cls: type, fn: Any) -> Any:
    """A class attribute that wraps `fn` in a transform (`step = jax.jit(_step)` in the class body)."""
    if fn is None:
        return None
    for klass in cls.__mro__:
        for value in vars(klass).values():
            if value is not fn and getattr(value, "__wrapped__", None) is fn:
                return value
    return None


def _is_linen_instance(obj: Any) -> bool:
    return any(c.__module__.startswith("flax.linen") and c.__name__ == "Module" for c in type(obj).__mro__)

