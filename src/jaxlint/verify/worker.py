"""The verification worker: loads a file as the module it is, reaches each flagged function, traces, classifies.

Two ways to start it:

- `python -m jaxlint.verify.worker JOB.json RESULT.json` verifies one file and exits;
- `python -m jaxlint.verify.worker --serve [MODULE ...]` imports JAX (and the listed libraries) once,
  then reads job lines from stdin and forks one child per file, in its own session, so the parent can
  fence each file by time and memory and kill it with its process group.

A child writes the result file after every verdict, so a crash or a time-out still leaves the
verdicts reached so far. How each rule is judged is the table in `checks.py`.
"""
from __future__ import annotations

import ast
import builtins
import json
import os
import signal
import sys
import traceback
import types
from typing import Any, Callable, Optional

from ..jaxapi import TRANSFORMS
from . import checks
from .inputs import SHAPE_VARIANTS, CannotBuild, Inputs, build_instance
from .slicing import slice_module

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


class TimedOut(BaseException):
    pass


class _Captured(BaseException):
    """Raised from the line tracer once a nested definition exists in its enclosing frame."""

    def __init__(self, value: Any, scope: Optional[dict[str, Any]] = None) -> None:
        self.value = value
        self.scope = scope or {}


def _on_alarm(signum: int, frame: Any) -> None:
    raise TimedOut()


class UnavailableName(RuntimeError):
    """The code used a name whose import or definition failed while the module loaded."""


class Unavailable:
    """Stands in for a name whose import or definition failed, so the rest of the module still loads."""

    def __init__(self, name: str, reason: str) -> None:
        self._name = name
        self._reason = reason

    def _fail(self, *args: Any, **kwargs: Any) -> Any:
        raise UnavailableName(f"`{self._name}` is unavailable, its import or definition failed: {self._reason}")

    __call__ = _fail

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        self._fail()

    def __mro_entries__(self, bases: tuple) -> tuple:
        self._fail()
        return ()


# Any use of a stand-in (arithmetic with an array, indexing, iteration, truth) names the failure.
for _op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or", "xor", "lshift",
            "rshift"):
    setattr(Unavailable, f"__{_op}__", Unavailable._fail)
    setattr(Unavailable, f"__r{_op}__", Unavailable._fail)
for _op in ("getitem", "setitem", "iter", "len", "bool", "neg", "pos", "abs", "float", "int", "index", "array",
            "jax_array", "enter", "lt", "le", "gt", "ge"):
    setattr(Unavailable, f"__{_op}__", Unavailable._fail)


# ---- evidence ----------------------------------------------------------------------------------


def _one_sentence(text: str, limit: int = 300) -> str:
    """The first sentence of an error message, never cut in the middle of one."""
    text = " ".join(text.strip().split("\n")[0].split())
    if len(text) <= limit:
        return text
    cut = max(text.rfind(". ", 0, limit), text.rfind("; ", 0, limit))
    if cut > 40:
        return text[:cut + 1]
    cut = text.rfind(" ", 0, limit)
    return text[:cut if cut > 40 else limit] + " …"


def error_summary(exc: BaseException, paths: set[str]) -> str:
    """`TypeError at line 12 in `step`: message` — the innermost frame of the user's files."""
    frames = [fr for fr in traceback.extract_tb(exc.__traceback__) if os.path.abspath(fr.filename) in paths]
    where = ""
    if frames:
        fr = frames[-1]
        name = "" if fr.name == "<module>" else f" in `{fr.name}`"
        where = f" at line {fr.lineno}{name}" + (f" of {os.path.basename(fr.filename)}"
                                                   if len(paths) > 1 else "")
    text = _one_sentence(str(exc)) if str(exc).strip() else ""
    return f"{type(exc).__name__}{where}" + (f": {text}" if text else "")


# ---- the results file --------------------------------------------------------------------------


class Results:
    def __init__(self, out_path: str) -> None:
        self.out_path = out_path
        self.data: dict[str, dict[str, Any]] = {}

    def save(self) -> None:
        tmp = self.out_path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.data, f)
        os.replace(tmp, self.out_path)

    def has(self, f: dict[str, Any]) -> bool:
        return str(f["idx"]) in self.data

    def put(self, f: dict[str, Any], status: str, detail: str, retry: bool = False) -> None:
        if not self.has(f):
            self.data[str(f["idx"])] = {"status": status, "detail": detail, **({"retry": True} if retry else {})}
            self.save()

    def rest(self, findings: list[dict[str, Any]], status: str, detail: str, retry: bool = False) -> None:
        for f in findings:
            if not self.has(f):
                self.data[str(f["idx"])] = {"status": status, "detail": detail, **({"retry": True} if retry else {})}
        self.save()


# ---- watching the user's code run --------------------------------------------------------------


class Observer:
    """Counts the lines of the watched files that run, and the prints they make."""

    def __init__(self, paths: set[str]) -> None:
        self.paths = paths
        self.flagged: set[tuple[str, int]] = set()  # lines whose runs under a JAX trace are counted
        self.tracing: Callable[[], bool] = lambda: False
        self.traced: dict[tuple[str, int], int] = {}
        self.lines: dict[tuple[str, int], int] = {}
        self.prints: list[tuple[str, int, tuple]] = []
        self._print = builtins.print

    def _local(self, frame: Any, event: str, arg: Any) -> Optional[Callable]:
        if event == "line":
            key = (frame.f_code.co_filename, frame.f_lineno)
            self.lines[key] = self.lines.get(key, 0) + 1
            if key in self.flagged and self.tracing():
                self.traced[key] = self.traced.get(key, 0) + 1
        return self._local

    def _global(self, frame: Any, event: str, arg: Any) -> Optional[Callable]:
        if frame.f_code.co_filename in self.paths:
            return self._local
        return None

    def _printer(self, *args: Any, **kwargs: Any) -> None:
        frame = sys._getframe(1)
        if frame.f_code.co_filename in self.paths:
            self.prints.append((frame.f_code.co_filename, frame.f_lineno, args))

    def run(self, fn: Callable[[], Any]) -> tuple[Optional[BaseException], dict[tuple[str, int], int], list]:
        """Run `fn`; (its exception or None, line counts, prints)."""
        self.lines = {}
        self.traced = {}
        self.prints = []
        builtins.print = self._printer
        sys.settrace(self._global)
        try:
            fn()
            exc = None
        except (TimedOut, _Captured):
            raise
        except BaseException as e:  # the user's code failed (SystemExit included): that is the evidence
            exc = e
        finally:
            sys.settrace(None)
            builtins.print = self._print
        return exc, dict(self.lines), list(self.prints)


# ---- loading a file as the module it is -------------------------------------------------------


def _bound_names(stmt: ast.stmt) -> list[str]:
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name.split(".")[0]) for a in stmt.names if a.name != "*"]
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [stmt.name]
    if isinstance(stmt, ast.Assign):
        return [n.id for t in stmt.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    if isinstance(stmt, (ast.AnnAssign, ast.AugAssign)) and isinstance(stmt.target, ast.Name):
        return [stmt.target.id]
    if isinstance(stmt, ast.Try):
        return [n for s in stmt.body for n in _bound_names(s)]
    return []


def _purge_foreign(top: str, root: Optional[str]) -> None:
    """Forget a preloaded installed package that the file being verified is part of (its own copy wins)."""
    mod = sys.modules.get(top)
    where = getattr(mod, "__file__", None) or ""
    if mod is None or not root or os.path.abspath(where).startswith(os.path.abspath(root) + os.sep):
        return
    for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
        del sys.modules[name]


def load_module(path: str, name: str, root_dir: Optional[str], roots: set[str],
                failures: dict[str, str]) -> types.ModuleType:
    """Execute the imports and the definitions `roots` need, statement by statement, as module `name`.

    A statement that fails (an optional or test-only import, a definition that needs one) leaves its
    names as `Unavailable` stand-ins and is recorded in `failures`; the other definitions still load.
    """
    with open(path, "rb") as f:
        tree = ast.parse(f.read(), path)
    sliced, _ = slice_module(tree, roots)
    is_pkg = os.path.basename(path) == "__init__.py"
    for p in (root_dir, os.path.dirname(path)):
        if p and p not in sys.path:
            sys.path.insert(0, p)
    if "." in name:
        _purge_foreign(name.split(".")[0], root_dir)
    mod = types.ModuleType(name)
    mod.__file__ = path
    mod.__package__ = name if is_pkg else name.rpartition(".")[0]
    if is_pkg:
        mod.__path__ = [os.path.dirname(path)]  # type: ignore[attr-defined]
    sys.modules[name] = mod
    for stmt in sliced.body:
        try:
            exec(compile(ast.Module(body=[stmt], type_ignores=[]), path, "exec"), mod.__dict__)
        except TimedOut:
            raise
        except BaseException as exc:  # noqa: BLE001 - SystemExit too: only what needs this name is lost
            reason = error_summary(exc, {path})
            for n in _bound_names(stmt):
                if n not in mod.__dict__:
                    mod.__dict__[n] = Unavailable(n, reason)
                failures[n] = reason
    return mod


# ---- finding definitions in the source ----------------------------------------------------------

Def = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _defs_in(body: list[ast.stmt]) -> list[ast.AST]:
    """Definitions directly in `body`, including those under `if`/`try`/`with`/`for` blocks."""
    out: list[ast.AST] = []
    for stmt in body:
        if isinstance(stmt, Def):
            out.append(stmt)
        elif isinstance(stmt, (ast.If, ast.For, ast.While, ast.With, ast.Try, ast.AsyncWith, ast.AsyncFor)):
            for field in ("body", "orelse", "finalbody"):
                out.extend(_defs_in(getattr(stmt, field, []) or []))
            for h in getattr(stmt, "handlers", []):
                out.extend(_defs_in(h.body))
    return out


def def_chain(tree: ast.Module, qualname: str) -> Optional[list[ast.AST]]:
    """The definitions along a dotted qualname (`Test.test_x.f`), outermost first."""
    body: list[ast.stmt] = tree.body
    chain: list[ast.AST] = []
    for part in qualname.split("."):
        node = next((d for d in reversed(_defs_in(body)) if d.name == part), None)  # type: ignore[attr-defined]
        if node is None:
            return None
        chain.append(node)
        body = node.body  # type: ignore[attr-defined]
    return chain


def _first_line(node: ast.AST) -> int:
    decos = getattr(node, "decorator_list", [])
    return min([node.lineno] + [d.lineno for d in decos])  # type: ignore[attr-defined]


def _is_method(chain: list[ast.AST], i: int) -> bool:
    node = chain[i]
    if i == 0 or not isinstance(chain[i - 1], ast.ClassDef) or not isinstance(node, ast.FunctionDef):
        return False
    if any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list):
        return False
    params = node.args.posonlyargs + node.args.args
    return bool(params) and params[0].arg in ("self", "cls")


# ---- the worker ----------------------------------------------------------------------------------


class Reached:
    """A flagged function as a runtime object, and how to call it."""

    def __init__(self, obj: Any, node: ast.FunctionDef, instance: Any = None, raw: Any = None,
                 prebound: bool = False) -> None:
        self.obj = obj  # what to call (a bound method for methods)
        self.node = node
        self.instance = instance  # `self`, for methods
        self.raw = raw  # the class attribute itself (a jit wrapper for a decorated method)
        self.prebound = prebound  # a test method generated with its parameters: call it with no arguments


class Worker:
    def __init__(self, job: dict[str, Any], out_path: str) -> None:
        self.job = job
        self.path = os.path.abspath(job["path"])
        self.results = Results(out_path)
        self.watch = {self.path}
        self.observer = Observer(self.watch)
        self.failures: dict[str, str] = {}
        self.timeout = float(job.get("timeout", 10.0))
        self.roots: set[str] = set()
        self.current_instance: Any = None
        self.scope: dict[str, Any] = {}

    # -- loading --
    def load(self) -> types.ModuleType:
        name = self.job.get("module") or "jaxlint_verified"
        self.failures = {}
        self.mod = load_module(self.path, name, self.job.get("sys_path"), self.roots, self.failures)
        return self.mod

    def inputs(self, variant: int = 0, batch: bool = False, plain: bool = False, lead: int = 2) -> Inputs:
        return Inputs(self.tree, variant, batch=batch, lead=lead, plain_call=plain,
                      namespace={**self.mod.__dict__, **self.scope})

    # -- reaching a function by its qualname --
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
            if _is_method(chain, i):
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
                                skip_first=reached.instance is not None and _has_self(reached.node))

    def capture(self, outer: Reached, node: ast.AST, variant: int) -> Any:
        """Run the enclosing function until the nested definition `node` exists; return it."""
        name = node.name  # type: ignore[attr-defined]
        first = _first_line(outer.node)
        code_name = outer.node.name
        end = getattr(node, "end_lineno", node.lineno)  # type: ignore[attr-defined]
        path = self.path

        def local(frame: Any, event: str, arg: Any) -> Any:
            if event == "line" and frame.f_lineno > end and name in frame.f_locals \
                    or event == "return" and name in frame.f_locals:
                raise _Captured(frame.f_locals[name], dict(frame.f_locals))
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
        except _Captured as got:
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

    # -- how to call what was reached --
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
                    return ((lambda *a, **k: wrapper.lower(inst, *a, **k)), (lambda *a, **k: wrapper(inst, *a, **k)),
                            True)
                return ((lambda *a, **k: wrapper(inst, *a, **k)), (lambda *a, **k: wrapper(inst, *a, **k)),
                        transform in JIT_LIKE)
        if hasattr(obj, "lower") and callable(obj):  # already jitted (the decorator form)
            return (lambda *a, **k: obj.lower(*a, **k)), obj, True
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
            return (lambda *a, **k: jitted.lower(*a, **k)), jitted, True
        if transform in ("grad", "value_and_grad"):
            g = jax.grad(obj) if transform == "grad" else jax.value_and_grad(obj)
            return (lambda *a, **k: jax.eval_shape(g, *a, **k)), g, False
        jitted = jax.jit(obj)
        return (lambda *a, **k: jitted.lower(*a, **k)), jitted, True

    def _linen_callables(self, reached: Reached) -> tuple[Callable, Callable, bool]:
        """A flax.linen module method runs bound, through `init`: trace it under jit with abstract inputs."""
        import jax

        module, method = reached.instance, reached.node.name
        rngs = {"params": jax.random.key(0), "dropout": jax.random.key(1)}

        def run(*a: Any, **k: Any) -> Any:
            return module.init_with_output(rngs, *a, method=method, **k)

        return (lambda *a, **k: jax.eval_shape(run, *a, **k)), jax.jit(run), True

    def _params(self, reached: Reached) -> list[ast.arg]:
        params = reached.node.args.posonlyargs + reached.node.args.args
        return params[1:] if reached.instance is not None and _has_self(reached.node) else params

    # -- one traced function and its findings --
    def verify_group(self, target: dict[str, Any], findings: list[dict[str, Any]]) -> None:
        import jax

        plain = target["transform"] in ("call", "helper")
        batch = target["transform"] in ("vmap", "pmap")
        exc: Optional[BaseException] = None
        lines: dict = {}
        sig = target["qualname"]
        problem: Optional[str] = None
        reached = None
        self.omitted: list[str] = []
        call_args: tuple[list, dict] = ([], {})
        key_run: Optional[tuple[Optional[BaseException], dict]] = None
        for variant in range(len(SHAPE_VARIANTS)):
            try:
                reached = self.reach(target["qualname"], variant)
                params = [p.arg for p in self._params(reached)]
                statics = set(target.get("static_argnames", ())) | {
                    params[i - (1 if reached.instance is not None and _has_self(reached.node) else 0)]
                    for i in target.get("static_argnums", ())
                    if 0 <= i - (1 if reached.instance is not None and _has_self(reached.node) else 0) < len(params)}
                target["_static_positions"] = [i for i, p in enumerate(params) if p in statics]
                trace, call, cached = self.callables(reached, target)
                inputs = self.inputs(variant, batch=batch, plain=plain, lead=1 if target["transform"] == "pmap" else 2)
                args, kwargs, sig = self.call_args(reached, inputs, statics)
            except CannotBuild as e:
                problem = str(e)
                if variant + 1 < len(SHAPE_VARIANTS) and "could not build" not in problem:
                    continue
                break
            problem = None
            call_args = (args, kwargs)
            self.current_instance = reached.instance
            self.omitted = inputs.omitted
            if all(checks.CHECKS[f["name"]].kind == checks.KEY_REUSE for f in findings):
                # Only the run under JAX's key-reuse checker is needed.
                key_run = self.run_key_reuse(lambda: call(*args, **kwargs))
                if key_run[0] is not None and not checks.is_jax_error(key_run[0]) \
                        and variant + 1 < len(SHAPE_VARIANTS):
                    continue
                break
            exc, lines, _ = self.observer.run(lambda: trace(*args, **kwargs))
            if exc is not None and not checks.is_jax_error(exc) and variant + 1 < len(SHAPE_VARIANTS):
                continue  # maybe the inputs had the wrong rank or kind: try the next candidate
            break
        if problem is not None or reached is None:
            self.results.rest(findings, "unverified", problem or "no inputs could be built")
            return
        args, kwargs = call_args
        by_kind: dict[str, list[dict[str, Any]]] = {}
        for f in findings:
            check = checks.check_for(f["name"])
            by_kind.setdefault(check.kind if check else "", []).append(f)
        for f in by_kind.get(checks.RAISES, []) + by_kind.get(checks.METHOD_SELF, []):
            self.classify_error(f, exc, lines, sig)
        if by_kind.get(checks.KEY_REUSE):
            kexc, klines = key_run if key_run is not None else self.run_key_reuse(lambda: call(*args, **kwargs))
            for f in by_kind[checks.KEY_REUSE]:
                self.classify_key_reuse(f, kexc, klines, sig)
        if by_kind.get(checks.STALE):
            if exc is not None:
                self.results.rest(by_kind[checks.STALE], "unverified",
                                  f"tracing {sig} failed first with {error_summary(exc, self.watch)}")
            else:
                for f in by_kind[checks.STALE]:
                    self.verify_stale(f, target, args, kwargs, sig)
        if by_kind.get(checks.TRACE_TIME):
            if exc is not None:
                self.results.rest(by_kind[checks.TRACE_TIME], "unverified",
                                  f"tracing {sig} failed first with {error_summary(exc, self.watch)}")
            else:
                # The abstract trace above already ran the function's Python once: start again from
                # freshly executed definitions, so the first call really is the first trace.
                self.load()
                fresh = self.reach(target["qualname"], 0) if target["qualname"] else reached
                _, call, cached = self.callables(fresh, target)
                self.classify_trace_time(by_kind[checks.TRACE_TIME], call, args, kwargs, sig, cached, jax)
        for f in findings:
            self.results.put(f, "unverified", f"no verifier for `{f['name']}` yet")

    def classify_error(self, f: dict[str, Any], exc: Optional[BaseException], lines: dict, sig: str) -> None:
        path = f.get("path", self.path)
        span = range(f["line"], f["end_line"] + 1)
        if checks.CHECKS[f["name"]].kind == checks.METHOD_SELF:
            if exc is not None and checks.confirms(f["name"], exc):
                owner = type(self.current_instance).__name__ if self.current_instance is not None else "?"
                self.results.put(f, "confirmed", f"{type(exc).__name__} tracing {sig}: its `self`, a `{owner}`, is not "
                                 "a valid JAX type")
            elif exc is None:
                self.results.put(f, "refuted", f"{sig} traced without an error on its instance")
            else:
                self.results.put(f, "unverified", f"tracing {sig} failed first with {error_summary(exc, self.watch)}")
            return
        if exc is not None:
            here = [fr for fr in traceback.extract_tb(exc.__traceback__) if os.path.abspath(fr.filename) in self.watch]
            at_line = any(os.path.abspath(fr.filename) == path and fr.lineno in span for fr in here)
            if at_line and checks.confirms(f["name"], exc):
                where = next((fr.name for fr in here if fr.lineno in span), "")
                self.results.put(f, "confirmed", f"{type(exc).__name__} at line {f['line']}"
                                 + (f" in `{where}`" if where and where != "<module>" else "")
                                 + f" while tracing {sig}")
            else:
                self.results.put(f, "unverified", f"tracing {sig} failed first with {error_summary(exc, self.watch)}")
            return
        defaulted = sorted({n.id for n in ast.walk(self.tree) if isinstance(n, ast.Name) and n.id in self.omitted
                            and n.lineno in span} if path == self.path else set())
        if lines.get((path, f["line"])) and defaulted:
            self.results.put(f, "unverified", f"line {f['line']} ran while tracing {sig} with `{defaulted[0]}` left "
                             "to its default, which callers may override")
        elif lines.get((path, f["line"])) and checks.CHECKS[f["name"]].refutable:
            self.results.put(f, "refuted", f"line {f['line']} ran while tracing {sig} without an error")
        else:
            self.results.put(f, "unverified", f"line {f['line']} was not reached while tracing {sig}")

    # -- key reuse: run with JAX's checker, with `PRNGKey` giving the typed keys it tracks --
    def run_key_reuse(self, fn: Callable[[], Any]) -> tuple[Optional[BaseException], dict]:
        import jax

        original = jax.random.PRNGKey

        def typed(seed: Any, impl: Any = None) -> Any:
            return jax.random.key(seed, impl=impl)

        patched = [m for m in list(sys.modules.values()) if isinstance(getattr(m, "__dict__", None), dict)
                   and getattr(m, "__file__", None) in self.watch]
        jax.random.PRNGKey = typed
        for m in patched:
            for k, v in list(m.__dict__.items()):
                if v is original:
                    m.__dict__[k] = typed
        jax.config.update("jax_debug_key_reuse", True)
        try:
            if hasattr(self.current_instance, "setUp"):  # keys a test's setUp made before the patch
                try:
                    self.current_instance.setUp()
                except Exception:  # noqa: BLE001 - the run below reports what is missing
                    pass
            exc, lines, _ = self.observer.run(fn)
        finally:
            jax.config.update("jax_debug_key_reuse", False)
            jax.random.PRNGKey = original
            for m in patched:
                for k, v in list(m.__dict__.items()):
                    if v is typed:
                        m.__dict__[k] = original
        return exc, lines

    def classify_key_reuse(self, f: dict[str, Any], exc: Optional[BaseException], lines: dict, sig: str) -> None:
        path = f.get("path", self.path)
        if exc is not None and checks.confirms(f["name"], exc):
            here = [fr for fr in traceback.extract_tb(exc.__traceback__) if os.path.abspath(fr.filename) == path]
            at = [fr.lineno for fr in here]
            span = range(f["line"], f["end_line"] + 1)
            if any(ln in span for ln in at) or not at or f["line"] in {ln for (p, ln) in lines if p == path}:
                self.results.put(f, "confirmed", f"KeyReuseError while running {sig} with jax_debug_key_reuse: "
                                 f"{_one_sentence(str(exc), 140)}")
                return
        if exc is not None:
            self.results.put(f, "unverified", f"running {sig} failed first with {error_summary(exc, self.watch)}")
        elif lines.get((path, f["line"])):
            # JAX's checker does not see every reuse (`fold_in` of the same data twice): no refutation.
            self.results.put(f, "unverified", f"line {f['line']} ran in {sig} under jax_debug_key_reuse (with typed "
                             "keys) without a KeyReuseError")
        else:
            self.results.put(f, "unverified", f"line {f['line']} was not reached while running {sig}")

    # -- trace-time side effects: first call traces, the second (same shapes) must not run them --
    def classify_trace_time(self, findings: list[dict[str, Any]], call: Callable, args: list, kwargs: dict,
                            sig: str, cached: bool, jax: Any) -> None:
        jax.clear_caches()  # the abstract trace above must not turn the first call into a cache hit
        mod_globals = self.mod.__dict__
        watched = {f["idx"]: n for f in findings if f["name"] == "global-mutation"
                   for n in [self.watched_name(f)] if n and n in mod_globals}
        before = {i: _snapshot(mod_globals.get(n)) for i, n in watched.items()}
        exc1, lines1, prints1 = self.observer.run(lambda: call(*args, **kwargs))
        mid = {i: _snapshot(mod_globals.get(n)) for i, n in watched.items()}
        exc2, lines2, prints2 = self.observer.run(lambda: call(*args, **kwargs))
        after = {i: _snapshot(mod_globals.get(n)) for i, n in watched.items()}
        if exc1 is not None or exc2 is not None:
            err = exc1 or exc2
            self.results.rest(findings, "unverified", f"calling {sig} failed with {error_summary(err, self.watch)}")
            return
        for f in findings:
            path = f.get("path", self.path)
            line = f["line"]
            n1, n2 = lines1.get((path, line), 0), lines2.get((path, line), 0)
            if f["name"] == "print-in-trace":
                p1 = sum(1 for p, ln, _ in prints1 if p == path and ln == line)
                p2 = sum(1 for p, ln, _ in prints2 if p == path and ln == line)
                tracer = any(p == path and ln == line and any(isinstance(a, jax.core.Tracer) for a in printed)
                             for p, ln, printed in prints1 + prints2)
                if cached and p1 and not p2:
                    self.results.put(f, "confirmed", f"printed {p1} time{'s' if p1 != 1 else ''} while tracing "
                                     f"{sig}, 0 times on a second call with the same shapes")
                elif p1 and p2 and tracer:
                    self.results.put(f, "confirmed", f"printed a tracer, not a value, on every call of {sig}")
                elif p1 and p2 and cached:
                    self.results.put(f, "refuted", f"printed on the second call of {sig} too: not cached by a trace")
                else:
                    self.results.put(f, "unverified", f"line {line} did not print while calling {sig}")
                continue
            name = watched.get(f["idx"])
            if name is not None:
                changed1, changed2 = before[f["idx"]] != mid[f["idx"]], mid[f["idx"]] != after[f["idx"]]
                if not cached and changed1 and _holds_tracer(mod_globals.get(name), jax):
                    self.results.put(f, "confirmed", f"`{name}` received a tracer while calling {sig}: "
                                     "a leaked tracer, not a value")
                    continue
                if cached and changed1 and not changed2:
                    self.results.put(f, "confirmed", f"`{name}` {_change(before[f['idx']], mid[f['idx']])} while "
                                     f"tracing {sig} and did not change on a second call")
                    continue
            what = "the mutation" if f["name"] == "global-mutation" else "the call"
            if cached and n1 and not n2:
                self.results.put(f, "confirmed", f"line {line} ({what}) ran {n1} time{'s' if n1 != 1 else ''} while "
                                 f"tracing {sig} and not on a second call with the same shapes")
            elif cached and n2:
                self.results.put(f, "refuted", f"line {line} ran again on a second call of {sig}: not trace-time only")
            elif not n1:
                self.results.put(f, "unverified", f"line {line} was not reached while calling {sig}")
            else:
                self.results.put(f, "unverified", f"{sig} is not cached by its transform: line {line} runs on "
                                 "every call")

    def watched_name(self, f: dict[str, Any]) -> Optional[str]:
        """The module-level name the flagged statement mutates (the static pass's subject when it sent one)."""
        if f.get("subject"):
            return f["subject"]
        for node in ast.walk(self.tree):
            if isinstance(node, ast.stmt) and getattr(node, "lineno", None) == f["line"] and not isinstance(
                    node, (ast.FunctionDef, ast.ClassDef, ast.If, ast.For, ast.While, ast.With)):
                target: Optional[ast.AST] = None
                if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
                    target = node.value.func
                    if isinstance(target, ast.Attribute):
                        target = target.value
                elif isinstance(node, ast.Assign):
                    target = node.targets[0]
                elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                    target = node.target
                elif isinstance(node, ast.Delete):
                    target = node.targets[0]
                while isinstance(target, (ast.Attribute, ast.Subscript)):
                    target = target.value
                if isinstance(target, ast.Name) and target.id != "self":
                    return target.id
        return None

    # -- stale-global: call, rebind, call again --
    def verify_stale(self, f: dict[str, Any], target: dict[str, Any], args: list, kwargs: dict, sig: str) -> None:
        import jax
        import numpy as np

        self.load()
        _, call, _ = self.callables(self.reach(target["qualname"]), target)
        mod = self.mod
        name = f.get("subject") or next((n.id for n in ast.walk(self.tree) if isinstance(n, ast.Name)
                                         and n.lineno == f["line"] and n.col_offset == f.get("column", 0) - 1), None)
        old = mod.__dict__.get(name) if name else None
        if isinstance(old, bool):
            new: Any = not old
        elif isinstance(old, (int, float)):
            new = old * 2 + 1
        else:
            self.results.put(f, "unverified", f"`{name}` is not a number or flag that verification can rebind")
            return
        jax.clear_caches()
        first = np.asarray(jax.tree_util.tree_leaves(call(*args, **kwargs))[0])
        mod.__dict__[name] = new
        fresh = np.asarray(jax.tree_util.tree_leaves(call(*args, **kwargs))[0])
        jax.clear_caches()
        retraced = np.asarray(jax.tree_util.tree_leaves(call(*args, **kwargs))[0])
        mod.__dict__[name] = old
        if np.array_equal(first, fresh) and not np.array_equal(fresh, retraced):
            self.results.put(f, "confirmed", f"after rebinding `{name}` from {old!r} to {new!r}, {sig} still "
                             "returned the old result until its cache was cleared")
        elif not np.array_equal(first, fresh):
            self.results.put(f, "refuted", f"rebinding `{name}` changed the result of {sig} at once")
        else:
            self.results.put(f, "unverified", f"the result of {sig} does not depend on `{name}`")

    # -- jit-in-loop: rebuild the callable twice, as two passes of the loop would --
    def jit_expression(self, f: dict[str, Any]) -> Optional[ast.AST]:
        """The flagged `jax.jit(...)` call, or the def carrying the flagged `@jax.jit` decorator."""
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call) and node.lineno == f["line"] and node.args and \
                    ast.unparse(node.func).split(".")[-1] in ("jit", "pjit", "pmap", "filter_jit"):
                return node
            if isinstance(node, ast.FunctionDef) and any(d.lineno == f["line"] for d in node.decorator_list):
                return node
        return None

    def binding_before(self, name: str, line: int) -> Optional[ast.stmt]:
        """The nearest `def name` or `name = <lambda | call>` above `line` (inside a function or loop)."""
        best: Optional[ast.stmt] = None
        for node in ast.walk(self.tree):
            if getattr(node, "lineno", line) >= line or node in self.tree.body:
                continue
            if isinstance(node, ast.FunctionDef) and node.name == name:
                best = node if best is None or node.lineno > best.lineno else best
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                    and node.targets[0].id == name and isinstance(node.value, (ast.Lambda, ast.Call)):
                best = node if best is None or node.lineno > best.lineno else best
        return best

    def verify_jit_in_loop(self, f: dict[str, Any], expr: Optional[ast.AST]) -> None:
        import inspect

        import jax
        from jax import monitoring

        if expr is None:
            raise CannotBuild("could not find the flagged jit expression")
        env: dict[str, Any] = dict(self.mod.__dict__)
        free = {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)} - set(env) - set(dir(builtins))
        # Names the loop body binds to callables or instances (`step = lambda ...`, `def step`,
        # `scaler = Scaler(2.0)`): re-run those bindings on each pass, as the loop does.
        preamble = [b for b in (self.binding_before(n, f["line"]) for n in sorted(free)) if b is not None]
        for stmt in preamble:
            free |= {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)} - set(env) - set(dir(builtins))
        for name in free:
            if name in ("self", "cls"):
                raise CannotBuild("the callable is a bound method of an instance verification cannot construct")
            env[name] = 1.0  # a loop variable: any value will do, the callable is what is rebuilt
        jitted = []
        for _ in range(2):  # two passes through the loop body
            if preamble:
                exec(compile(ast.Module(body=[_without_nonlocal(s) for s in preamble], type_ignores=[]),
                             self.path, "exec"), env)
            if isinstance(expr, ast.FunctionDef):
                exec(compile(ast.Module(body=[_without_nonlocal(expr)], type_ignores=[]), self.path, "exec"), env)
                jitted.append(env[expr.name])
            else:
                jitted.append(eval(compile(ast.Expression(expr), self.path, "eval"), env))
        inner = getattr(jitted[0], "__wrapped__", None) or jitted[0]
        try:
            sig = inspect.signature(inner)
            n_args = sum(1 for p in sig.parameters.values()
                         if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
        except (TypeError, ValueError):
            n_args = 1
        traces: list[str] = []
        monitoring.register_event_duration_secs_listener(
            lambda event, duration, **kw: traces.append(event) if event.endswith("jaxpr_trace_duration") else None)
        counts = []
        for fn in jitted:
            before = len(traces)
            for shape in ((), (3,)):
                try:
                    fn(*[jax.numpy.ones(shape) for _ in range(n_args)])
                    break
                except Exception:  # noqa: BLE001 - try the next shape
                    continue
            counts.append(len(traces) - before)
        if counts[0] == 0:
            self.results.put(f, "unverified", "the rebuilt callable could not be called with simple inputs")
        elif counts[1] > 0:
            self.results.put(f, "confirmed", "each of 2 passes through the loop body traced the jitted callable "
                             f"anew ({sum(counts)} traces on JAX's own trace counter)")
        else:
            self.results.put(f, "refuted", "the second pass hit JAX's cache: no new trace")

    # -- a helper reached from another file: verify it by tracing that caller --
    def verify_through_caller(self, caller: dict[str, Any], findings: list[dict[str, Any]]) -> None:
        sub = Worker({"path": caller["path"], "module": caller["module"], "sys_path": caller["sys_path"],
                      "timeout": self.timeout, "findings": []}, self.results.out_path)
        sub.results = self.results
        sub.watch |= self.watch
        sub.observer = Observer(sub.watch)
        with open(sub.path, "rb") as fh:
            sub.tree = ast.parse(fh.read(), sub.path)
        sub.roots = {caller["qualname"].split(".")[0]}
        sub.load()
        outer = sub.enclosing(caller["qualname"])
        if outer is not None:
            sub.observe(outer, {"transform": "jit"}, findings)
            findings = [f for f in findings if not self.results.has(f)]
            if not findings:
                return
            sub.load()
        reached = sub.reach(caller["qualname"])
        transform = "jit" if hasattr(reached.obj, "lower") or hasattr(reached.raw, "lower") else "call"
        sub.verify_group({"qualname": caller["qualname"], "transform": transform, "static_argnums": [],
                          "static_argnames": []}, findings)

    # -- nested functions: run the enclosing function as it is and watch the flagged lines --
    def enclosing(self, qualname: str) -> Optional[str]:
        """The outermost function a nested definition lives in (`Test.test_x` for `Test.test_x.f`)."""
        chain = def_chain(self.tree, qualname)
        if not chain:
            return None
        for i, node in enumerate(chain[:-1]):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return ".".join(n.name for n in chain[:i + 1])  # type: ignore[attr-defined]
        return None

    def observe(self, outer: str, target: dict[str, Any], findings: list[dict[str, Any]]) -> None:
        """Verdicts from one run of the enclosing function (a test, a `main`) with what it really passes.

        A rule's error raised at the flagged line confirms it; the flagged line running under a JAX
        trace without one refutes it (for rules that raise), or confirms a trace-time side effect
        (for a cached transform). Findings the run did not decide are left for the synthesized inputs.
        """
        from jax._src import core

        reached = self.reach(outer)
        args, kwargs, sig = self.call_args(reached, self.inputs(0, plain=True))
        self.observer.flagged = {(f.get("path", self.path), f["line"]) for f in findings}
        self.observer.tracing = lambda: not core.trace_state_clean()
        try:
            exc, lines, _ = self.observer.run(lambda: reached.obj(*args, **kwargs))
            traced = dict(self.observer.traced)
        finally:
            self.observer.flagged = set()
        cached = target.get("transform") in JIT_LIKE
        for f in findings:
            check = checks.CHECKS[f["name"]]
            key = (f.get("path", self.path), f["line"])
            ran, under = lines.get(key, 0), traced.get(key, 0)
            if check.kind == checks.RAISES:
                span = range(f["line"], f["end_line"] + 1)
                here = [fr for fr in traceback.extract_tb(exc.__traceback__)] if exc is not None else []
                hit = [fr for fr in here if os.path.abspath(fr.filename) == key[0] and fr.lineno in span]
                if hit and checks.confirms(f["name"], exc):  # type: ignore[arg-type]
                    self.results.put(f, "confirmed", f"{type(exc).__name__} at line {f['line']} in `{hit[-1].name}` "
                                     f"while running {sig}, the enclosing function")
                elif under and not hit and check.refutable:
                    self.results.put(f, "refuted", f"line {f['line']} ran {under} time{'s' if under != 1 else ''} "
                                     f"under a JAX trace while running {sig}, without an error")
            elif check.kind == checks.TRACE_TIME and cached and under and under == ran:
                self.results.put(f, "confirmed", f"line {f['line']} ran {under} time{'s' if under != 1 else ''} while "
                                 f"running {sig}, each time under a JAX trace of a cached transform: it does not "
                                 "run on later calls")

    # -- main --
    def group(self, findings: list[dict[str, Any]]) -> tuple[dict[str, tuple[dict, list]], list[dict]]:
        groups: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
        loops: list[dict[str, Any]] = []
        for f in findings:
            check = checks.check_for(f["name"])
            if check is None:
                self.results.put(f, "not-run", checks.NOT_VERIFIABLE.get(f["name"], "no verifier for this rule"))
                continue
            target = f.get("target")
            if check.kind == checks.JIT_IN_LOOP:
                loops.append(f)
                continue
            if target is None:
                if not f.get("function"):
                    self.results.put(f, "unverified", "at module level: verification never runs a module's "
                                     "top-level statements")
                    continue
                if check.kind not in (checks.RAISES, checks.KEY_REUSE) or f["name"] != "array-item-assignment" \
                        and check.kind != checks.KEY_REUSE:
                    self.results.put(f, "unverified", "the finding is not inside a traced function")
                    continue
                target = {"qualname": f["function"], "transform": "call", "static_argnums": [], "static_argnames": []}
            if f.get("caller"):
                c = f["caller"]
                key = json.dumps(["caller", c], sort_keys=True)
                groups.setdefault(key, ({"qualname": c["qualname"], "transform": "caller", "caller": c}, []))[1].append(f)
                continue
            if target.get("transform") == "helper" and not target.get("root"):
                via = ", ".join(target.get("via", []))
                self.results.put(f, "unverified", f"reached from another file ({via}); verification traces only "
                                 "callers in the same file")
                continue
            root = dict(target.get("root") or target)
            chain = def_chain(self.tree, root["qualname"])
            caller = (target.get("via") or [None])[0] if not target.get("root") else None
            if root["transform"] not in OWN_TRANSFORMS and caller and def_chain(self.tree, caller):
                # A function handed to `lax.scan`/`odeint`/… by a plain function of this file: calling
                # that function is what traces it, with the arguments it really passes.
                root = {"qualname": caller, "transform": "call", "static_argnums": [], "static_argnames": []}
            elif chain is None and "." in root["qualname"]:
                outer = root["qualname"].rsplit(".", 1)[0]  # a lambda: its enclosing function traces it
                root = {"qualname": outer, "transform": "call", "static_argnums": [], "static_argnames": []}
            elif chain and len(chain) > 1 and isinstance(chain[-2], ast.FunctionDef) \
                    and root["transform"] in BODY_TRANSFORMS and not _is_method(chain, len(chain) - 1):
                root = {"qualname": ".".join(n.name for n in chain[:-1]), "transform": "call",  # type: ignore[attr-defined]
                        "static_argnums": [], "static_argnames": []}
            key = json.dumps(root, sort_keys=True)
            groups.setdefault(key, (root, []))[1].append(f)
        return groups, loops

    def run(self) -> None:
        findings = self.job["findings"]
        with open(self.path, "rb") as fh:
            self.tree = ast.parse(fh.read(), self.path)
        groups, loops = self.group(findings)
        if not groups and not loops:
            return
        # Helpers reached from another file first: the caller imports this module as it is, before
        # the sliced copy below replaces it.
        for key in [k for k, (root, _) in groups.items() if root["transform"] == "caller"]:
            root, group = groups.pop(key)
            self._fenced(group, lambda root=root, group=group: self.verify_through_caller(root["caller"], group),
                         f"tracing `{root['qualname']}` in {os.path.basename(root['caller']['path'])}")
        if not groups and not loops:
            return
        roots = {g[0]["qualname"].split(".")[0] for g in groups.values()}
        loop_exprs = {f["idx"]: self.jit_expression(f) for f in loops}
        for f in loops:
            expr = loop_exprs[f["idx"]]
            if expr is not None:
                names = {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}
                for name in list(names):
                    binding = self.binding_before(name, f["line"])
                    if binding is not None:
                        names |= {n.id for n in ast.walk(binding) if isinstance(n, ast.Name)}
                roots |= names
        self.roots = roots
        signal.setitimer(signal.ITIMER_REAL, self.timeout)
        try:
            self.load()
        except TimedOut:
            self.results.rest(findings, "unverified", f"loading the module's definitions took longer than "
                              f"{self.timeout:g} s", retry=True)
            return
        except BaseException as exc:  # noqa: BLE001 - only this file's verdicts are lost
            self.results.rest(findings, "unverified", f"the module could not be loaded: "
                              f"{error_summary(exc, self.watch)}")
            return
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        for f in loops:
            self._fenced([f], lambda f=f: self.verify_jit_in_loop(f, loop_exprs[f["idx"]]),
                         "re-creating the jitted callable")
        for root, group in groups.values():
            outer = self.enclosing(root["qualname"])
            if outer is not None:
                self._fenced(group, lambda outer=outer, root=root, group=group: self.observe(outer, root, group),
                             f"running `{outer}`", final=False)
                group = [f for f in group if not self.results.has(f)]
                if not group:
                    continue
                self._fenced(group, self.load, "reloading the module")  # the run may have changed its state
            self._fenced(group, lambda root=root, group=group: self.verify_group(root, group),
                         f"tracing `{root['qualname']}`")

    def _fenced(self, group: list[dict[str, Any]], fn: Callable[[], Any], what: str, final: bool = True) -> None:
        """Run one step under the time limit; unless `final` is False, a failure is the group's verdict."""
        signal.setitimer(signal.ITIMER_REAL, self.timeout)
        try:
            fn()
        except TimedOut:
            if final:
                self.results.rest(group, "unverified", f"{what} took longer than {self.timeout:g} s", retry=True)
        except CannotBuild as exc:
            if final:
                self.results.rest(group, "unverified", str(exc))
        except BaseException as exc:  # noqa: BLE001
            if final:
                self.results.rest(group, "unverified", f"verification failed: {error_summary(exc, self.watch)}")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            sys.settrace(None)


# ---- helpers ------------------------------------------------------------------------------------


def _has_self(node: ast.FunctionDef) -> bool:
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
                    node.lineno, _first_line(node)):  # type: ignore[attr-defined]
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


def _without_nonlocal(stmt: ast.stmt) -> ast.stmt:
    """A copy of a nested def without `nonlocal` lines, so it compiles outside its enclosing function."""
    import copy

    class Strip(ast.NodeTransformer):
        def visit_Nonlocal(self, node: ast.Nonlocal) -> Any:
            return ast.copy_location(ast.Pass(), node)

    return Strip().visit(copy.deepcopy(stmt))


def _snapshot(value: Any) -> Any:
    if isinstance(value, (list, dict, set, tuple)) or hasattr(value, "__len__") and not hasattr(value, "shape"):
        try:
            return ("len", len(value))
        except TypeError:
            pass
    if isinstance(value, (int, float, str, bool, type(None))):
        return ("value", value)
    if hasattr(value, "__dict__"):
        return ("attrs", tuple(sorted((k, id(v)) for k, v in vars(value).items())))
    return ("id", id(value))


def _holds_tracer(value: Any, jax: Any) -> bool:
    items: list[Any] = []
    if isinstance(value, dict):
        items = list(value.values())
    elif isinstance(value, (list, tuple, set)):
        items = list(value)
    elif hasattr(value, "__dict__"):
        items = list(vars(value).values())
    return any(isinstance(v, jax.core.Tracer) for v in items)


def _change(a: Any, b: Any) -> str:
    if a[0] == "len" and b[0] == "len":
        d = b[1] - a[1]
        return f"grew by {d}" if d >= 0 else f"shrank by {-d}"
    return "changed"


# ---- entry points ---------------------------------------------------------------------------------


def run_job(job_path: str, out_path: str) -> None:
    """Verify one file (in this process) and leave the verdicts in `out_path`."""
    with open(job_path, encoding="utf-8") as f:
        job = json.load(f)
    signal.signal(signal.SIGALRM, _on_alarm)
    # The user's code must not be able to print into our result channel or read our stdin.
    sys.stdin = open(os.devnull)
    worker = Worker(job, out_path)
    worker.results.save()
    try:
        import jax  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        worker.results.rest(job["findings"], "not-run", f"jax could not be imported ({_one_sentence(str(exc))})")
        return
    try:
        worker.run()
    finally:
        worker.results.save()


def run_batch(jobs: list[dict[str, str]]) -> None:
    """Verify several files one after the other in this process (JAX's backend started once).

    After each file its `done` marker is written, so the parent can time and blame each file; the
    project's own modules a file loaded are forgotten, so the next file loads them afresh.
    """
    import jax

    baseline = set(sys.modules)
    for job in jobs:
        os.chdir(job["cwd"])
        run_job(job["job"], job["out"])
        for name in [n for n in sys.modules if n not in baseline]:
            where = getattr(sys.modules[name], "__file__", None) or ""
            if f"{os.sep}site-packages{os.sep}" not in where:
                del sys.modules[name]
        jax.config.update("jax_debug_key_reuse", False)
        jax.config.update("jax_enable_x64", False)
        jax.clear_caches()
        with open(job["out"] + ".done", "w"):
            pass


def _limits(memory_mb: int) -> None:
    import resource

    # XLA reserves far more address space than it touches, so the address-space limit is only a
    # backstop; the real limit is the resident size, watched by the parent.
    limit = max(memory_mb * 8, 16384) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _reply(out: Any, msg: dict[str, Any]) -> None:
    out.write(json.dumps(msg) + "\n")
    out.flush()


def serve(preload: list[str]) -> None:
    """Import JAX once, then fork one fenced child per job line read from stdin."""
    out = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)  # nothing imported here may write into the reply channel
    try:
        import jax  # noqa: F401
        import jax.numpy  # noqa: F401
    except ImportError as exc:
        missing = getattr(exc, "name", "") or ""
        _reply(out, {"nojax": missing.split(".")[0] == "jax", "detail": _one_sentence(str(exc))})
        return
    signal.signal(signal.SIGALRM, _on_alarm)
    for name in preload:
        signal.setitimer(signal.ITIMER_REAL, 10.0)
        try:
            __import__(name)
        except BaseException:  # noqa: BLE001 - a library that fails here is imported (or not) by the child
            pass
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    from jax._src import xla_bridge

    if getattr(xla_bridge, "_backends", None):  # a preloaded library started XLA: forking it is unsafe
        _reply(out, {"ready": False, "detail": "a preloaded library initialised XLA"})
        return
    # Modules every child needs for its first lowering: imported here once, not once per child.
    for name in ("jax._src.interpreters.mlir", "jax._src.interpreters.pxla", "jax._src.compiler",
                 "jaxlib.mlir.dialects.mhlo", "jaxlib.mlir.dialects.stablehlo", "jaxlib.mlir.dialects.func"):
        try:
            __import__(name)
        except ImportError:
            pass
    _reply(out, {"ready": True})
    for line in sys.stdin:
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:
            try:
                os.setsid()
                _limits(int(req["memory_mb"]))
                os.dup2(devnull, 0)
                os.dup2(devnull, 2)
                run_batch(req["jobs"])
            finally:
                os._exit(0)  # skip interpreter shutdown: the user's threads or atexit hooks must not hang us
        _reply(out, {"pid": pid})
        _, status = os.waitpid(pid, 0)
        _reply(out, {"status": os.waitstatus_to_exitcode(status)})


def main() -> None:
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2:])
        os._exit(0)
    run_job(sys.argv[1], sys.argv[2])
    os._exit(0)


if __name__ == "__main__":
    main()
