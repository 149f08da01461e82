"""The verification worker: runs in its own process, imports JAX, traces flagged functions, classifies.

Invoked as `python -m jaxlint.verify.worker JOB.json RESULT.json`. It writes the result file after
every verdict, so a crash or a time-out still leaves the verdicts reached so far.
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

from .slicing import slice_module

ARRAY_NAMES = {"Array", "ndarray", "ArrayLike", "Float", "Int", "Bool", "Shaped", "Num", "Real", "Inexact",
               "Integer", "UInt", "Complex", "ShapeDtypeStruct"}
JIT_LIKE = {"jit", "pjit", "filter_jit", "checkpoint", "scan", "fori_loop", "while_loop", "cond", "switch", "map",
            "associative_scan"}
# Inputs tried in turn for traced array parameters: (shape, integer?) — a scalar first, then an integer
# scalar (indices, counts), then small arrays — until tracing reaches a JAX error or succeeds.
SHAPE_VARIANTS = [((), False), ((), True), ((3,), False), ((3, 3), False)]


class CannotBuild(Exception):
    """The inputs for a function could not be built; the message says why."""


class TimedOut(BaseException):
    pass


def _entry(status: str, detail: str, retry: bool) -> dict[str, Any]:
    # `retry` marks an outcome of the moment (a time-out on a busy machine), not of the code: the
    # parent never caches it. It is a field of its own so that no verdict's wording decides that.
    return {"status": status, "detail": detail, **({"retry": True} if retry else {})}


def _on_alarm(signum: int, frame: Any) -> None:
    raise TimedOut()


# ---------------------------------------------------------------------------------------------


class Worker:
    def __init__(self, job: dict[str, Any], out_path: str) -> None:
        self.job = job
        self.out_path = out_path
        self.path = os.path.abspath(job["path"])
        self.results: dict[str, dict[str, str]] = {}
        self.prints: list[tuple[int, Any]] = []  # (line, first argument) of each print in the file
        self.lines: set[int] = set()
        self.plain_call = False
        self.pmap = False
        self.seed_value = 0
        self.in_axes: tuple = ()

    def save(self) -> None:
        tmp = self.out_path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.results, f)
        os.replace(tmp, self.out_path)

    def verdict(self, idx: int, status: str, detail: str, *, retry: bool = False) -> None:
        self.results[str(idx)] = _entry(status, detail, retry)
        self.save()

    def all(self, findings: list[dict[str, Any]], status: str, detail: str, *, retry: bool = False) -> None:
        for f in findings:
            if str(f["idx"]) not in self.results:
                self.results[str(f["idx"])] = _entry(status, detail, retry)
        self.save()

    # ---- loading ------------------------------------------------------------------------------

    def load(self, roots: set[str]) -> types.ModuleType:
        with open(self.path, "rb") as f:
            source = f.read()
        self.tree = ast.parse(source, self.path)
        sliced, _ = slice_module(self.tree, roots)
        name = self.job.get("module") or "jaxlint_verified"
        mod = types.ModuleType(name)
        mod.__file__ = self.path
        if "." in name:
            mod.__package__ = name.rsplit(".", 1)[0]
        root_dir = self.job.get("sys_path")
        for p in (root_dir, os.path.dirname(self.path)):
            if p and p not in sys.path:
                sys.path.insert(0, p)
        sys.modules[name] = mod
        mod.__dict__["print"] = self._print  # count prints made by this module's code
        exec(compile(sliced, self.path, "exec"), mod.__dict__)
        return mod

    def _print(self, *args: Any, **kwargs: Any) -> None:
        frame = sys._getframe(1)
        if os.path.abspath(frame.f_code.co_filename) == self.path:
            self.prints.append((frame.f_lineno, args))

    def _tracer(self, frame: Any, event: str, arg: Any) -> Optional[Callable]:
        if frame.f_code.co_filename != self.path:
            return None
        if event == "line":
            self.lines.add(frame.f_lineno)
        return self._tracer

    def run_traced(self, fn: Callable[[], Any]) -> tuple[Optional[BaseException], set[int], list[tuple[int, Any]]]:
        """Run `fn`, recording the lines of the target file it executes and the prints it makes."""
        self.lines = set()
        self.prints = []
        sys.settrace(self._tracer)
        try:
            fn()
            exc = None
        except TimedOut:
            raise
        except Exception as e:  # the user's code failed: that is the evidence
            exc = e
        finally:
            sys.settrace(None)
        return exc, set(self.lines), list(self.prints)

    # ---- inputs -------------------------------------------------------------------------------

    def find_def(self, qualname: str) -> Optional[ast.FunctionDef]:
        body: list[ast.stmt] = self.tree.body
        node: Optional[ast.AST] = None
        for part in qualname.split("."):
            node = next((s for s in body if isinstance(s, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                         and s.name == part), None)
            if node is None:
                return None
            body = node.body  # type: ignore[attr-defined]
        return node if isinstance(node, ast.FunctionDef) else None

    def build_inputs(self, node: ast.FunctionDef, target: dict[str, Any], variant: int, batch: bool
                     ) -> tuple[list[Any], str]:
        import jax
        import jax.numpy as jnp

        args = node.args
        params = args.posonlyargs + args.args
        defaults = [None] * (len(params) - len(args.defaults)) + list(args.defaults)
        static_names = set(target.get("static_argnames", []))
        static_nums = set(target.get("static_argnums", []))
        values: list[Any] = []
        desc: list[str] = []
        required = len(params) - len(args.defaults)
        for i, (p, default) in enumerate(zip(params, defaults)):
            ann = _annotation_head(p.annotation)
            is_static = p.arg in static_names or i in static_nums
            if is_static:
                if default is not None:
                    try:
                        values.append(ast.literal_eval(default))
                    except ValueError:
                        raise CannotBuild(f"no value for static parameter `{p.arg}`") from None
                elif ann in ("int",):
                    values.append(3)
                elif ann == "bool":
                    values.append(True)
                elif ann == "float":
                    values.append(1.0)
                elif ann == "str":
                    values.append("")
                elif target["transform"] in ("vmap", "pmap"):
                    values.append(0.5)  # an unmapped (in_axes=None) argument: any concrete value will do
                else:
                    raise CannotBuild(f"no value for static parameter `{p.arg}` (give it a default or an annotation)")
                desc.append(f"{p.arg}={values[-1]!r}")
                continue
            if default is not None and i >= required and _is_literal(default) and ann not in ARRAY_NAMES:
                break  # leave literal defaults (and everything after) to the function
            value = self._abstract_for(p, ann, node, variant, batch, jnp, jax)
            values.append(value)
            desc.append(f"{p.arg}: {_describe(value)}")
        return values, f"{node.name}({', '.join(desc)})"

    def _abstract_for(self, p: ast.arg, ann: Optional[str], node: ast.FunctionDef, variant: int, batch: bool,
                      jnp: Any, jax: Any) -> Any:
        shape, integer = SHAPE_VARIANTS[variant]
        lead = ((1,) if self.pmap else (2,)) if batch else ()
        name = p.arg
        if self.plain_call and ann in ("int", "float", "bool", "str"):
            return {"int": 3, "float": 1.0, "bool": True, "str": ""}[ann]
        if self.plain_call and ann is None:
            # A plain function called with concrete values: guess Python values from common names.
            if name in ("shape", "size", "dims"):
                return (3,)
            if name in ("sizes", "shapes", "layer_sizes"):
                return [3, 3, 2]
            if name in ("seed",):
                return 0
            if name in ("n", "k", "num", "steps", "depth", "count", "length") or name.startswith(("n_", "num_")):
                return 3
        if ann in ("dict", "Dict", "Mapping") or (ann is None and _string_keys(node, name)):
            keys = _string_keys(node, name)
            if not keys:
                raise CannotBuild(f"could not build inputs for `{name}`: unknown dict structure")
            return {k: jnp.zeros(lead + shape, jnp.float32) for k in sorted(keys)}
        if ann is None and _attributes_used(node, name):
            raise CannotBuild(f"could not build inputs for `{name}`: unknown structure")
        if name in ("key", "rng", "rng_key", "prng_key", "subkey") or ann in ("PRNGKeyArray", "KeyArray"):
            return jax.random.key(0)  # a new-style key: JAX's key-reuse checker only tracks these
        if ann == "int":
            return jnp.zeros(lead, jnp.int32) + 2
        if ann == "bool":
            return jnp.zeros(lead, jnp.bool_)
        if ann in ("float", None) or ann in ARRAY_NAMES:
            dtype = jnp.int32 if integer and ann != "float" else jnp.float32
            dims = shape
            if ann in ("Int", "Integer", "UInt"):
                dtype = jnp.int32
            elif ann == "Bool":
                dtype = jnp.bool_
            jt = _jaxtyping_dims(p.annotation)
            if jt is not None:
                dims = jt
            # Distinct, non-degenerate values per parameter: results must depend on what they read.
            self.seed_value += 1
            full = lead + dims
            n = 1
            for d in full:
                n *= d
            values = 0.25 * self.seed_value + 0.5 + 0.1 * jnp.arange(n).reshape(full)
            return values.astype(dtype) if dtype != jnp.bool_ else values > 1.0
        raise CannotBuild(f"could not build inputs for `{name}`: annotation `{ann}` is not an array")

    # ---- the callables ------------------------------------------------------------------------

    def resolve(self, mod: types.ModuleType, qualname: str) -> Any:
        obj: Any = mod
        for part in qualname.split("."):
            if not hasattr(obj, part):
                raise CannotBuild(f"`{qualname}` is defined inside another function; verification only reaches "
                                  "module-level functions and class attributes")
            obj = getattr(obj, part)
        return obj

    def callables(self, obj: Any, target: dict[str, Any]) -> tuple[Callable, Callable, bool]:
        """(trace(*args) -> abstract trace, call(*args) -> a real call, cached?) for the root."""
        import jax

        transform = target["transform"]
        statics = dict(static_argnums=tuple(target.get("static_argnums", ())),
                       static_argnames=tuple(target.get("static_argnames", ())))
        if transform == "call":
            return obj, obj, False
        if hasattr(obj, "lower"):  # already jitted (decorator form)
            return (lambda *a: obj.lower(*a)), obj, True
        if hasattr(obj, "__wrapped__") and transform in ("vmap", "grad", "value_and_grad", "checkpoint", "pmap"):
            return (lambda *a: jax.eval_shape(obj, *a)), obj, False
        if not callable(obj):
            raise CannotBuild("the traced object is not callable")
        if transform in JIT_LIKE:
            jitted = jax.jit(obj, **statics) if transform in ("jit", "pjit", "filter_jit") else jax.jit(obj)
            return (lambda *a: jitted.lower(*a)), jitted, True
        if transform in ("vmap", "pmap"):
            mapped = jax.vmap(obj, in_axes=self.in_axes) if None in self.in_axes else jax.vmap(obj)
            return (lambda *a: jax.eval_shape(mapped, *a)), mapped, False
        if transform in ("grad", "value_and_grad"):
            g = jax.grad(obj) if transform == "grad" else jax.value_and_grad(obj)
            return (lambda *a: jax.eval_shape(g, *a)), g, False
        raise CannotBuild(f"no verifier for functions traced by `{transform}`")

    # ---- verdicts -----------------------------------------------------------------------------

    def verify_group(self, mod: types.ModuleType, target: dict[str, Any], findings: list[dict[str, Any]]) -> None:
        import jax

        node = self.find_def(target["qualname"])
        if node is None:
            raise CannotBuild(f"`{target['qualname']}` is not a module-level function")
        if "." in target["qualname"] and node.args.args and node.args.args[0].arg in ("self", "cls"):
            selfish = [f for f in findings if f["name"] == "jit-method-self"]
            if selfish:
                self.verify_method_self(mod, node, target, selfish)
            raise CannotBuild(f"`{target['qualname']}` is a method: verification does not construct instances "
                              "of the class")
        self.plain_call = target["transform"] == "call"
        self.pmap = target["transform"] == "pmap"
        obj = self.resolve(mod, target["qualname"])
        params = [a.arg for a in node.args.posonlyargs + node.args.args]
        statics = set(target.get("static_argnames", ())) | {params[i] for i in target.get("static_argnums", ())
                                                             if i < len(params)}
        self.in_axes = tuple(None if p in statics else 0 for p in params)
        trace, call, cached = self.callables(obj, target)
        batch = target["transform"] in ("vmap", "pmap") or (
            hasattr(obj, "__wrapped__") and target["transform"] in ("vmap", "pmap"))
        for variant in range(len(SHAPE_VARIANTS)):
            try:
                args, sig = self.build_inputs(node, target, variant, batch)
            except CannotBuild:
                raise
            exc, lines, prints = self.run_traced(lambda: trace(*args))
            if exc is not None and not _is_jax_error(exc, jax) and variant + 1 < len(SHAPE_VARIANTS):
                continue  # maybe the inputs had the wrong rank: try the next shape
            break
        pending = [f for f in findings if str(f["idx"]) not in self.results]
        keyed = [f for f in pending if f["name"] == "prng-key-reuse"]
        if keyed:
            jax.config.update("jax_debug_key_reuse", True)
            try:
                kexc, klines, _ = self.run_traced(lambda: call(*args))
            finally:
                jax.config.update("jax_debug_key_reuse", False)
            for f in keyed:
                self.classify_error(f, kexc, klines, sig, jax)
        abstract = [f for f in pending if f["name"] in _ERRORS]
        for f in abstract:
            self.classify_error(f, exc, lines, sig, jax)
        stale = [f for f in pending if f["name"] == "stale-global"]
        if stale and exc is None:
            mod = self.load(self.roots)
            _, call, cached = self.callables(self.resolve(mod, target["qualname"]), target)
            for f in stale:
                self.verify_stale(mod, f, call, args, sig)
        dynamic = [f for f in pending if f["name"] in ("print-in-trace", "global-mutation", "impure-call")]
        if dynamic:
            # The abstract trace above already ran the function's Python once: start again from freshly
            # executed definitions, so the first call really is the first trace.
            mod = self.load(self.roots)
            _, call, cached = self.callables(self.resolve(mod, target["qualname"]), target)
            self.classify_dynamic(dynamic, call, args, sig, cached, exc, jax)
        for f in pending:
            if str(f["idx"]) not in self.results:
                self.verdict(f["idx"], "unverified", f"no verifier for `{f['name']}` yet")

    def classify_error(self, f: dict[str, Any], exc: Optional[BaseException], lines: set[int], sig: str,
                       jax: Any) -> None:
        span = range(f["line"], f["end_line"] + 1)
        if exc is not None:
            here = [fr.lineno for fr in traceback.extract_tb(exc.__traceback__)
                    if os.path.abspath(fr.filename) == self.path]
            at = here[-1] if here else None
            if f["name"] == "prng-key-reuse" and _expected(f["name"], exc, jax) and at is None:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                self.verdict(f["idx"], "confirmed", f"KeyReuseError while running {sig} with jax_debug_key_reuse: {first}")
            elif at is not None and (at in span or any(h in span for h in here)) and _expected(f["name"], exc, jax):
                self.verdict(f["idx"], "confirmed", f"{type(exc).__name__} at line {f['line']} while tracing {sig}")
            elif at is not None and at < f["line"]:
                self.verdict(f["idx"], "unverified",
                             f"tracing {sig} stopped earlier, at line {at} ({type(exc).__name__})")
            else:
                self.verdict(f["idx"], "unverified", f"tracing {sig} failed first with {_error_summary(exc, self.path)}")
            return
        if f["name"] == "prng-key-reuse":
            self.verdict(f["idx"], "unverified", f"no KeyReuseError while running {sig}; JAX's key-reuse checker "
                         "tracks only new-style `jax.random.key` keys")
        elif f["line"] in lines:
            self.verdict(f["idx"], "refuted", f"line {f['line']} ran while tracing {sig} without an error")
        else:
            self.verdict(f["idx"], "unverified", f"line {f['line']} was not reached while tracing {sig}")

    def classify_dynamic(self, findings: list[dict[str, Any]], call: Callable, args: list[Any], sig: str,
                         cached: bool, trace_exc: Optional[BaseException], jax: Any) -> None:
        if trace_exc is not None:
            for f in findings:
                self.verdict(f["idx"], "unverified", f"tracing {sig} failed first with "
                             f"{_error_summary(trace_exc, self.path)}")
            return
        jax.clear_caches()  # the abstract trace above must not turn the first call into a cache hit
        watched = {f["idx"]: self.watched_name(f) for f in findings if f["name"] == "global-mutation"}
        mod_globals = sys.modules[self.job.get("module") or "jaxlint_verified"].__dict__
        watched = {i: n for i, n in watched.items() if n and n in mod_globals}
        before = {i: _snapshot(mod_globals.get(n)) for i, n in watched.items() if n}
        exc1, lines1, prints1 = self.run_traced(lambda: call(*args))
        mid = {i: _snapshot(mod_globals.get(n)) for i, n in watched.items() if n}
        exc2, lines2, prints2 = self.run_traced(lambda: call(*args))
        after = {i: _snapshot(mod_globals.get(n)) for i, n in watched.items() if n}
        if exc1 is not None or exc2 is not None:
            err = exc1 or exc2
            for f in findings:
                self.verdict(f["idx"], "unverified", f"calling {sig} failed with {_error_summary(err, self.path)}")
            return
        for f in findings:
            line = f["line"]
            if f["name"] == "print-in-trace":
                n1 = sum(1 for ln, _ in prints1 if ln == line)
                n2 = sum(1 for ln, _ in prints2 if ln == line)
                tracer = any(ln == line and any(isinstance(a, jax.core.Tracer) for a in printed)
                             for ln, printed in prints1 + prints2)
                if cached and n1 and not n2:
                    self.verdict(f["idx"], "confirmed", f"printed {n1} time{'s' if n1 != 1 else ''} while tracing "
                                 f"{sig}, 0 times on a second call with the same shapes")
                elif not cached and n1 and n2 and tracer:
                    self.verdict(f["idx"], "confirmed", f"printed a tracer, not a value, on every call of {sig}")
                elif n1 and n2 and cached:
                    self.verdict(f["idx"], "refuted", f"printed on the second call of {sig} too: not cached by a trace")
                else:
                    self.verdict(f["idx"], "unverified", f"line {line} did not print while calling {sig}")
            elif f["name"] == "impure-call":
                if cached and line in lines1 and line not in lines2:
                    self.verdict(f["idx"], "confirmed", f"line {line} ran while tracing {sig} and not on a second call; "
                                 "its result is a constant of the compiled code")
                elif line in lines2:
                    self.verdict(f["idx"], "refuted", f"line {line} ran again on a second call of {sig}")
                else:
                    self.verdict(f["idx"], "unverified", f"line {line} was not reached while calling {sig}")
            else:
                name = watched.get(f["idx"])
                if not name or f["idx"] not in before:
                    self.verdict(f["idx"], "unverified", "the mutated state is not module-level; it was not observed")
                    continue
                changed1, changed2 = before[f["idx"]] != mid[f["idx"]], mid[f["idx"]] != after[f["idx"]]
                if not cached and changed1 and _holds_tracer(mod_globals.get(name), jax):
                    self.verdict(f["idx"], "confirmed", f"`{name}` received a tracer while calling {sig}: "
                                 "a leaked tracer, not a value")
                elif changed1 and not changed2:
                    self.verdict(f["idx"], "confirmed", f"`{name}` {_change(before[f['idx']], mid[f['idx']])} during "
                                 f"tracing {sig} and did not change on a second call")
                elif changed2:
                    self.verdict(f["idx"], "refuted", f"`{name}` changed on the second call too: it is not trace-time only")
                else:
                    self.verdict(f["idx"], "unverified", f"`{name}` did not change while calling {sig}")

    # ---- stale-global and jit-method-self -----------------------------------------------------

    def verify_stale(self, mod: types.ModuleType, f: dict[str, Any], call: Callable, args: list[Any], sig: str) -> None:
        import jax
        import numpy as np

        name = next((n.id for n in ast.walk(self.tree) if isinstance(n, ast.Name) and n.lineno == f["line"]
                     and n.col_offset == f.get("column", 0) - 1), None)
        old = mod.__dict__.get(name) if name else None
        if isinstance(old, bool):
            new: Any = not old
        elif isinstance(old, (int, float)):
            new = old * 2 + 1
        else:
            self.verdict(f["idx"], "unverified", f"`{name}` is not a number or flag that verification can rebind")
            return
        jax.clear_caches()
        first = np.asarray(jax.tree_util.tree_leaves(call(*args))[0])
        mod.__dict__[name] = new
        fresh = np.asarray(jax.tree_util.tree_leaves(call(*args))[0])
        jax.clear_caches()
        retraced = np.asarray(jax.tree_util.tree_leaves(call(*args))[0])
        mod.__dict__[name] = old
        if np.array_equal(first, fresh) and not np.array_equal(fresh, retraced):
            self.verdict(f["idx"], "confirmed", f"after rebinding `{name}` from {old!r} to {new!r}, {sig} still returned "
                         "the old result until its cache was cleared")
        elif not np.array_equal(first, fresh):
            self.verdict(f["idx"], "refuted", f"rebinding `{name}` changed the result of {sig} at once")
        else:
            self.verdict(f["idx"], "unverified", f"the result of {sig} does not depend on `{name}`")

    def verify_method_self(self, mod: types.ModuleType, node: ast.FunctionDef, target: dict[str, Any],
                           findings: list[dict[str, Any]]) -> None:
        import copy

        cls_name, _, meth = target["qualname"].rpartition(".")
        cls = self.resolve(mod, cls_name)
        method = getattr(cls, meth, None)
        if method is None:
            for f in findings:
                self.verdict(f["idx"], "unverified", f"`{target['qualname']}` is not reachable on the class")
            return
        instance = cls.__new__(cls)  # no __init__: only the object's type matters to jit
        bare = copy.copy(node)
        bare.args = copy.copy(node.args)
        bare.args.args = node.args.args[1:]
        shifted = dict(target, static_argnums=[i - 1 for i in target.get("static_argnums", ()) if i > 0])
        args, sig = self.build_inputs(bare, shifted, 0, False)
        exc, lines, _ = self.run_traced(lambda: method(instance, *args))
        for f in findings:
            if exc is not None and isinstance(exc, TypeError) and (
                    "valid JAX type" in str(exc) or "as an abstract array" in str(exc)):
                self.verdict(f["idx"], "confirmed", f"TypeError calling {target['qualname']} on a {cls.__name__}: "
                             f"{str(exc).strip().splitlines()[0][:120]}")
            elif exc is None:
                self.verdict(f["idx"], "refuted", f"calling {target['qualname']} on a {cls.__name__} traced without error")
            else:
                self.verdict(f["idx"], "unverified", f"calling {target['qualname']} failed first with "
                             f"{_error_summary(exc, self.path)}")

    # ---- jit-in-loop: rebuild the callable twice, as two passes of the loop would --------------

    def jit_expression(self, f: dict[str, Any]) -> Optional[ast.AST]:
        """The flagged `jax.jit(...)` call, or the def carrying the flagged `@jax.jit` decorator."""
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call) and node.lineno == f["line"] and node.args and \
                    ast.unparse(node.func).split(".")[-1] in ("jit", "pjit", "pmap", "filter_jit"):
                return node
            if isinstance(node, ast.FunctionDef) and any(d.lineno == f["line"] for d in node.decorator_list):
                return node
        return None

    def verify_jit_in_loop(self, mod: types.ModuleType, f: dict[str, Any], expr: Optional[ast.AST]) -> None:
        import inspect

        import jax
        from jax import monitoring

        if expr is None:
            raise CannotBuild("could not find the flagged jit expression")
        env: dict[str, Any] = dict(mod.__dict__)
        free = {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)} - set(env) - set(dir(builtins))
        # Names the loop body binds to callables or instances (`step = lambda ...`, `def step`,
        # `scaler = Scaler(2.0)`): re-run those bindings on each pass, as the loop does.
        preamble = [b for b in (self._binding_before(n, f["line"]) for n in sorted(free)) if b is not None]
        for stmt in preamble:
            free |= {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)} - set(env) - set(dir(builtins))
        for name in free:
            if name in ("self", "cls"):
                raise CannotBuild("the callable is a bound method of an instance verification cannot construct")
            env[name] = 1.0  # a loop variable: any value will do, the callable is what is rebuilt
        jitted = []
        for _ in range(2):  # two passes through the loop body
            if preamble:
                exec(compile(ast.Module(body=preamble, type_ignores=[]), self.path, "exec"), env)
            if isinstance(expr, ast.FunctionDef):
                exec(compile(ast.Module(body=[expr], type_ignores=[]), self.path, "exec"), env)
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
                except Exception:
                    continue
            counts.append(len(traces) - before)
        if counts[0] == 0:
            self.verdict(f["idx"], "unverified", "the rebuilt callable could not be called with simple inputs")
        elif counts[1] > 0:
            self.verdict(f["idx"], "confirmed", "each of 2 passes through the loop body traced the jitted callable "
                         f"anew ({sum(counts)} traces on JAX's own trace counter)")
        else:
            self.verdict(f["idx"], "refuted", "the second pass hit JAX's cache: no new trace")

    def _binding_before(self, name: str, line: int) -> Optional[ast.stmt]:
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

    def watched_name(self, f: dict[str, Any]) -> Optional[str]:
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

    # ---- main ---------------------------------------------------------------------------------

    def _outer_is_function(self, qualname: str) -> bool:
        with open(self.path, "rb") as f:
            tree = ast.parse(f.read(), self.path)
        head = qualname.split(".")[0]
        return any(isinstance(s, ast.FunctionDef) and s.name == head for s in tree.body)

    def run(self) -> None:
        findings = self.job["findings"]
        try:
            import jax  # noqa: F401
        except Exception as exc:
            self.all(findings, "unverified", f"jax could not be imported in the verification worker ({exc})")
            return
        groups: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
        loops: list[dict[str, Any]] = []
        for f in findings:
            target = f.get("target")
            if f["name"] == "jit-in-loop":
                loops.append(f)
                continue
            if target is None:
                if not f.get("function"):
                    self.verdict(f["idx"], "unverified", "at module level: verification never runs a module's "
                                 "top-level statements")
                    continue
                if f["name"] not in ("array-item-assignment", "prng-key-reuse"):
                    self.verdict(f["idx"], "unverified", "the finding is not inside a traced function")
                    continue
                target = {"qualname": f["function"], "transform": "call", "static_argnums": [], "static_argnames": []}
            if target.get("transform") == "helper" and not target.get("root"):
                self.verdict(f["idx"], "unverified", f"reached from another file ({', '.join(target.get('via', []))}); "
                             "cross-file verification is not attempted")
                continue
            root = target.get("root") or target
            if "." in root["qualname"] and self._outer_is_function(root["qualname"]):
                # A body defined inside a plain function (lax.scan(body, ...) in `run`): calling the
                # enclosing function is what traces it.
                root = {"qualname": root["qualname"].split(".")[0], "transform": "call",
                        "static_argnums": [], "static_argnames": []}
            key = json.dumps(root, sort_keys=True)
            groups.setdefault(key, (root, []))[1].append(f)
        if not groups and not loops:
            return
        roots = {g[0]["qualname"].split(".")[0] for g in groups.values()}
        with open(self.path, "rb") as fh:
            self.tree = ast.parse(fh.read(), self.path)
        loop_exprs = {f["idx"]: self.jit_expression(f) for f in loops}
        for f in loops:
            expr = loop_exprs[f["idx"]]
            if expr is not None:
                names = {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}
                for name in list(names):
                    binding = self._binding_before(name, f["line"])
                    if binding is not None:
                        names |= {n.id for n in ast.walk(binding) if isinstance(n, ast.Name)}
                roots |= names
        self.roots = roots
        timeout = float(self.job.get("timeout", 10.0))
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            mod = self.load(roots)
        except TimedOut:
            self.all(findings, "unverified", f"loading the module's definitions took longer than {timeout:g} s",
                     retry=True)
            return
        except BaseException as exc:  # SystemExit too: only this file's verdicts are lost
            self.all(findings, "unverified", f"the module's definitions failed to load: {_error_summary(exc, self.path)}")
            return
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        for f in loops:
            signal.setitimer(signal.ITIMER_REAL, timeout)
            try:
                self.verify_jit_in_loop(mod, f, loop_exprs[f["idx"]])
            except TimedOut:
                self.verdict(f["idx"], "unverified", f"re-creating the jitted callable took longer than {timeout:g} s",
                             retry=True)
            except CannotBuild as exc:
                self.verdict(f["idx"], "unverified", str(exc))
            except BaseException as exc:
                self.verdict(f["idx"], "unverified", f"verification failed: {_error_summary(exc, self.path)}")
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        for root, group in groups.values():
            signal.setitimer(signal.ITIMER_REAL, timeout)
            try:
                self.verify_group(mod, root, group)
            except TimedOut:
                self.all(group, "unverified", f"tracing `{root['qualname']}` took longer than {timeout:g} s", retry=True)
            except CannotBuild as exc:
                self.all(group, "unverified", str(exc))
            except BaseException as exc:
                self.all(group, "unverified", f"verification failed: {_error_summary(exc, self.path)}")
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)


# ---- helpers ------------------------------------------------------------------------------------

_ERRORS = {"traced-if", "traced-while", "traced-shape", "traced-bool-index", "traced-conversion",
           "array-item-assignment"}


def _expected(rule: str, exc: BaseException, jax: Any) -> bool:
    errs = jax.errors
    concretization = (errs.ConcretizationTypeError, errs.TracerBoolConversionError,
                      errs.TracerIntegerConversionError, errs.TracerArrayConversionError)
    if rule in ("traced-if", "traced-while"):
        return isinstance(exc, (errs.ConcretizationTypeError, errs.TracerBoolConversionError))
    if rule == "traced-shape":
        text = str(exc)
        return isinstance(exc, concretization) or (isinstance(exc, (TypeError, IndexError)) and (
            "concrete" in text or "static" in text or "Shapes must be" in text or "must have __hash__" in text))
    if rule == "traced-bool-index":
        return isinstance(exc, (errs.NonConcreteBooleanIndexError,) + concretization)
    if rule == "traced-conversion":
        return isinstance(exc, concretization)
    if rule == "array-item-assignment":
        return isinstance(exc, TypeError) and "immutable" in str(exc)
    if rule == "prng-key-reuse":
        return isinstance(exc, errs.KeyReuseError)
    return False


def _is_jax_error(exc: BaseException, jax: Any) -> bool:
    return isinstance(exc, (jax.errors.JAXTypeError, jax.errors.ConcretizationTypeError,
                            jax.errors.NonConcreteBooleanIndexError, jax.errors.TracerArrayConversionError,
                            jax.errors.TracerIntegerConversionError, jax.errors.TracerBoolConversionError)) \
        or (isinstance(exc, (TypeError, IndexError)) and any(
            t in str(exc) for t in ("immutable", "concrete", "must have __hash__", "Shapes must be")))


def _error_summary(exc: BaseException, path: str) -> str:
    here = [fr.lineno for fr in traceback.extract_tb(exc.__traceback__) if os.path.abspath(fr.filename) == path]
    where = f" at line {here[-1]}" if here else ""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}{where}" + (f": {text[:160]}" if text else "")


def _annotation_head(ann: Optional[ast.expr]) -> Optional[str]:
    if ann is None:
        return None
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        return ann.value.split("[")[0].split(".")[-1].strip()
    if isinstance(ann, ast.Subscript):
        ann = ann.value
    if isinstance(ann, ast.Attribute):
        return ann.attr
    if isinstance(ann, ast.Name):
        return ann.id
    return None


def _jaxtyping_dims(ann: Optional[ast.expr]) -> Optional[tuple[int, ...]]:
    """`Float[Array, "b n"]` -> (2, 3); None when the annotation is not jaxtyping-style."""
    if not isinstance(ann, ast.Subscript) or not isinstance(ann.slice, ast.Tuple) or len(ann.slice.elts) != 2:
        return None
    spec = ann.slice.elts[1]
    if not isinstance(spec, ast.Constant) or not isinstance(spec.value, str):
        return None
    dims = []
    for i, tok in enumerate(spec.value.split()):
        tok = tok.lstrip("*#_")
        dims.append(int(tok) if tok.isdigit() else 2 + (i % 2))
    return tuple(dims)


def _is_literal(node: ast.expr) -> bool:
    try:
        ast.literal_eval(node)
        return True
    except (ValueError, SyntaxError):
        return False


def _string_keys(fn: ast.FunctionDef, name: str) -> set[str]:
    keys = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == name \
                and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
            keys.add(node.slice.value)
    return keys


def _attributes_used(fn: ast.FunctionDef, name: str) -> bool:
    array_attrs = {"shape", "ndim", "dtype", "size", "T", "at", "real", "imag", "sum", "mean", "max", "min",
                   "reshape", "astype", "item", "tolist", "std", "any", "all", "dot", "nonzero", "repeat", "squeeze"}
    return any(isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == name
               and n.attr not in array_attrs for n in ast.walk(fn))


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_describe(v)}" for k, v in value.items()) + "}"
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is None or dtype is None:
        return repr(value)
    short = {"float32": "f32", "int32": "i32", "bool": "bool", "uint32": "u32"}.get(str(dtype), str(dtype))
    if short.startswith("key<"):
        return "key"
    return f"{short}[{','.join(str(d) for d in shape)}]"


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


def main() -> None:
    job_path, out_path = sys.argv[1], sys.argv[2]
    with open(job_path, encoding="utf-8") as f:
        job = json.load(f)
    signal.signal(signal.SIGALRM, _on_alarm)
    # The user's code must not be able to print into our result channel or read our stdin.
    sys.stdin = open(os.devnull)
    worker = Worker(job, out_path)
    worker.save()
    try:
        worker.run()
    finally:
        worker.save()
    os._exit(0)  # skip interpreter shutdown: threads or atexit hooks of the user's code must not hang us


if __name__ == "__main__":
    main()
