"""Judging findings by what JAX did: one method per kind of check in `checks.py`."""
from __future__ import annotations

import ast
import builtins
import os
import sys
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Optional

from . import checks
from .evidence import error_summary, one_sentence
from .inputs import SHAPE_VARIANTS, WIDE_VARIANT, CannotBuild
from .reach import JIT_LIKE, has_self


@dataclass
class _Run:
    """One candidate's run, kept to fall back on when no later candidate reaches a flagged line: what it
    ran (`result`: reached, exc, lines, sig, call_args, call, key_run) and the worker's state it left."""

    result: tuple
    instance: Any
    omitted: list[str]
    guessed: list[str]
    widened: bool
    raised: dict

    def restore(self, worker: "Judging") -> tuple:
        worker.current_instance, worker.omitted, worker.guessed = self.instance, self.omitted, self.guessed
        worker.widened, worker.observer.raised = self.widened, self.raised
        return self.result


class Judging:
    """The part of the worker that traces, runs and classifies (mixed into `Worker`)."""

    key_checker = "running {sig} with jax_debug_key_reuse"  # how the last key-reuse check ran, for evidence
    flags_off: frozenset[str]  # (set by the worker: flags built False while judging, see `Inputs`)
    flags_built: list[str]  # the flags built while judging the current group

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
        self.guessed: list[str] = []
        self.widened = False
        call_args: tuple[list, dict] = ([], {})
        key_run: Optional[tuple[Optional[BaseException], dict]] = None
        flagged = {(f.get("path", self.path), n) for f in findings for n in range(f["line"], f["end_line"] + 1)}
        fallback: Optional[_Run] = None
        last = len(SHAPE_VARIANTS) - 1
        self.run_errors: list[BaseException] = []  # (which flags led to them: see the worker's `_other_flags`)
        for variant in range(len(SHAPE_VARIANTS)):
            try:
                reached = self.reach(target["qualname"], variant)
                params = [p.arg for p in self._params(reached)]
                statics = set(target.get("static_argnames", ())) | {
                    params[i - (1 if reached.instance is not None and has_self(reached.node) else 0)]
                    for i in target.get("static_argnums", ())
                    if 0 <= i - (1 if reached.instance is not None and has_self(reached.node) else 0) < len(params)}
                target["_static_positions"] = [i for i, p in enumerate(params) if p in statics]
                trace, call, cached = self.callables(reached, target)
                inputs = self.inputs(variant, batch=batch, plain=plain, lead=1 if target["transform"] == "pmap" else 2)
                args, kwargs, sig = self.call_args(reached, inputs, statics)
                off = self.flags_off
                shown = sorted({n for n in self.flags_built if "*" in off or n in off})
                if shown:
                    sig += " with `" + "`, `".join(shown) + "` False"
            except CannotBuild as e:
                problem = str(e)
                if variant < last and "could not build" not in problem:
                    continue
                break
            problem = None
            call_args = (args, kwargs)
            self.current_instance = reached.instance
            self.omitted = inputs.omitted
            self.guessed = inputs.guessed
            self.widened = variant >= WIDE_VARIANT
            if all(checks.CHECKS[f["name"]].kind == checks.KEY_REUSE for f in findings):
                # Only the run under JAX's key-reuse checker is needed.
                key_run = self.run_key_reuse(lambda: call(*args, **kwargs), call, args, kwargs)
                exc, lines = key_run
            else:
                exc, lines, _ = self.observer.run(lambda: trace(*args, **kwargs))
            if exc is not None:
                self.run_errors.append(exc)
            if variant == last or self._decides(findings, flagged, exc, lines):
                break
            if fallback is None and (exc is None or checks.is_jax_error(exc)):
                # Where the search stopped before: kept, should no other candidate reach a flagged line.
                fallback = _Run((reached, exc, lines, sig, call_args, call, key_run), reached.instance,
                                inputs.omitted, inputs.guessed, self.widened, dict(self.observer.raised))
            # maybe the inputs had the wrong rank or kind, or steered the body past the flagged lines:
            # try the next candidate
        if fallback is not None and (problem is not None or not self._decides(findings, flagged, exc, lines)):
            problem = None
            reached, exc, lines, sig, call_args, call, key_run = fallback.restore(self)
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
            kexc, klines = key_run if key_run is not None else \
                self.run_key_reuse(lambda: call(*args, **kwargs), call, args, kwargs)
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

    def _decides(self, findings: list[dict[str, Any]], flagged: set[tuple[str, int]],
                 exc: Optional[BaseException], lines: dict) -> bool:
        """Whether a run with one candidate of inputs can judge the group: it ran a flagged line, raised a
        rule's JAX error there, or raised the error of a rule judged wherever it is raised (key reuse, a
        rejected `self`). Any other error means the inputs may have had the wrong rank or kind."""
        if exc is None:
            return any(key in lines for key in flagged)
        if not checks.is_jax_error(exc):
            return False
        if any(checks.CHECKS[f["name"]].kind in (checks.KEY_REUSE, checks.METHOD_SELF) and checks.confirms(f["name"], exc)
               for f in findings):
            return True
        return any((os.path.abspath(fr.filename), fr.lineno) in flagged for fr in _frames(exc))

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
        spread = next((n for n in self.omitted if n.startswith("**")), None)
        if lines.get((path, f["line"])) and defaulted:
            self.results.put(f, "unverified", f"line {f['line']} ran while tracing {sig} with `{defaulted[0]}` left "
                             "to its default, which callers may override")
        elif lines.get((path, f["line"])) and spread is not None:
            self.results.put(f, "unverified", f"line {f['line']} ran while tracing {sig} with `{spread}` empty; "
                             "callers may pass keyword arguments through it")
        elif lines.get((path, f["line"])) and any(
                isinstance(caught, BaseException) and checks.confirms(f["name"], caught)
                for (p, n), caught in self.observer.raised.items() if p == path and n in span):
            caught = next(c for (p, n), c in self.observer.raised.items() if p == path and n in span)
            self.results.put(f, "confirmed", f"{type(caught).__name__} at line {f['line']} while tracing {sig}, "
                             "caught by the code itself (the conversion fails on every traced call)")
        elif lines.get((path, f["line"])) and self.guessed and checks.CHECKS[f["name"]].refutable:
            self.results.put(f, "unverified", f"line {f['line']} ran while tracing {sig} without an error, with "
                             f"`{self.guessed[0]}` (static, given no value in this file) guessed")
        elif lines.get((path, f["line"])) and self.widened and checks.CHECKS[f["name"]].refutable:
            # (arrays wider than any the code was written for may steer a test away from what it checks)
            self.results.put(f, "unverified", f"line {f['line']} ran while tracing {sig} without an error, "
                             "but only with arrays wider than the smaller candidates could run")
        elif lines.get((path, f["line"])) and checks.CHECKS[f["name"]].refutable:
            self.results.put(f, "refuted", f"line {f['line']} ran while tracing {sig} without an error")
        else:
            self.results.put(f, "unverified", f"line {f['line']} was not reached while tracing {sig}")

    def run_key_reuse(self, fn: Callable[[], Any], call: Optional[Callable] = None, args: tuple = (),
                      kwargs: Optional[dict] = None) -> tuple[Optional[BaseException], dict]:
        """Run `fn` with PRNGKey patched to typed keys, under JAX's key-reuse checker.

        When `call` is given, JAX's static checker runs first on the trace of `call(*args, **kwargs)`:
        the same rules as the eager checker, on the same operations, for the cost of one trace instead
        of running (and compiling) every random operation. Only a trace that fails for another reason
        (a Python branch on a value, a non-array argument) falls back to the eager run.
        """
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
            exc: Optional[BaseException] = None
            static = _static_key_check(call, args, kwargs or {}) if call is not None else None
            if static is not None:
                exc, lines, _ = self.observer.run(static)
                if exc is None or "KeyReuseError" in {c.__name__ for c in type(exc).__mro__}:
                    self.key_checker = "JAX's key-reuse checker on the trace of {sig}"
                    return exc, lines
            self.key_checker = "running {sig} with jax_debug_key_reuse"
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
            here = [fr for fr in _frames(exc) if os.path.abspath(fr.filename) == path]
            at = [fr.lineno for fr in here]
            span = range(f["line"], f["end_line"] + 1)
            subject = f.get("subject") or {}
            key = subject.get("key")
            named = "" if not key else f" of `{key}` (reused on each pass of a loop)" if subject.get("loop") \
                else f" of `{key}` (first used at line {subject['first_line']})" if subject.get("first_line") else ""
            if any(ln in span for ln in at) or not at:
                self.results.put(f, "confirmed", f"KeyReuseError{named} from {self.key_checker.format(sig=sig)}: "
                                 f"{one_sentence(str(exc), 140)}")
                return
            if key:
                # The static pass named the key and its second use: an error raised at another line is
                # another reuse, and says nothing about this one.
                self.results.put(f, "unverified", f"{self.key_checker.format(sig=sig)} raised KeyReuseError at line "
                                 f"{at[-1]}, not at line {f['line']} where `{key}` is used again")
                return
            if f["line"] in {ln for (p, ln) in lines if p == path}:
                self.results.put(f, "confirmed", f"KeyReuseError from {self.key_checker.format(sig=sig)}: "
                                 f"{one_sentence(str(exc), 140)}")
                return
        if exc is not None:
            self.results.put(f, "unverified", f"running {sig} failed first with {error_summary(exc, self.watch)}")
        elif lines.get((path, f["line"])):
            # JAX's checker does not see every reuse (`fold_in` of the same data twice): no refutation.
            self.results.put(f, "unverified", f"line {f['line']} ran in {sig} under JAX's key-reuse checker (with "
                             "typed keys) without a KeyReuseError")
        else:
            self.results.put(f, "unverified", f"line {f['line']} was not reached while running {sig}")

    def classify_trace_time(self, findings: list[dict[str, Any]], call: Callable, args: list, kwargs: dict,
                            sig: str, cached: bool, jax: Any) -> None:
        jax.clear_caches()  # the abstract trace above must not turn the first call into a cache hit
        mod_globals = self.mod.__dict__
        watched = {f["idx"]: n for f in findings if f["name"] == "global-mutation"
                   for n in [self.watched_name(f)] if n and n in mod_globals}
        before = {i: _snapshot(mod_globals.get(n)) for i, n in watched.items()}
        calls = _CallCounter([f for f in findings if f["name"] == "impure-call"], self.path, self.mod)
        try:
            exc1, lines1, prints1 = self.observer.run(lambda: call(*args, **kwargs))
            mid = {i: _snapshot(mod_globals.get(n)) for i, n in watched.items()}
            calls1 = dict(calls.counts)
            exc2, lines2, prints2 = self.observer.run(lambda: call(*args, **kwargs))
            after = {i: _snapshot(mod_globals.get(n)) for i, n in watched.items()}
            calls2 = {i: c - calls1[i] for i, c in calls.counts.items()}
        finally:
            calls.restore()
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
            if f["idx"] in calls1:
                # The static pass named the impure function: count its calls from the flagged line, not
                # the runs of a line that may skip it (`x if flag else time.time()`) or hold another.
                c1, c2 = calls1[f["idx"]], calls2[f["idx"]]
                shown = f"`{calls.shown[f['idx']]}()`"
                if cached and c1 and not c2:
                    self.results.put(f, "confirmed", f"{shown} was called {c1} time{'s' if c1 != 1 else ''} at line "
                                     f"{line} while tracing {sig} and not on a second call with the same shapes")
                elif cached and c2:
                    self.results.put(f, "refuted", f"{shown} was called again at line {line} on a second call of "
                                     f"{sig}: not trace-time only")
                elif not c1:
                    self.results.put(f, "unverified", f"{shown} was not called at line {line} while calling {sig}")
                else:
                    self.results.put(f, "unverified", f"{sig} is not cached by its transform: {shown} runs on "
                                     "every call")
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
        """The module-level name the flagged statement mutates (the static pass's subject when it sent one).

        None for state that is not module-level (a closed-over container, an attribute of `self`): the
        run then judges by how often the flagged line ran, never by a module global of the same name.
        """
        subject = f.get("subject") or {}
        if subject.get("name"):
            return subject["name"] if subject.get("container", "module") == "module" else None
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

    def verify_stale(self, f: dict[str, Any], target: dict[str, Any], args: list, kwargs: dict, sig: str) -> None:
        import jax
        import numpy as np

        self.load()
        _, call, cached = self.callables(self.reach(target["qualname"]), target)
        if not cached and target["transform"] in ("vmap", "pmap"):
            # (the rule reports only functions some cache keeps a trace of: a batched one, through the
            # `jax.jit(jax.vmap(f))` that caches it, since vmap alone traces afresh on every call)
            call = jax.jit(call)
        mod = self.mod
        name = (f.get("subject") or {}).get("name") or next(
            (n.id for n in ast.walk(self.tree) if isinstance(n, ast.Name)
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
                caught = next((c for (p, n), c in self.observer.raised.items()
                               if p == key[0] and n in span and checks.confirms(f["name"], c)), None)
                if hit and checks.confirms(f["name"], exc):  # type: ignore[arg-type]
                    self.results.put(f, "confirmed", f"{type(exc).__name__} at line {f['line']} in `{hit[-1].name}` "
                                     f"while running {sig}, the enclosing function")
                elif under and caught is not None:  # `try: sum1(n) except Exception: ...`: it failed all the same
                    self.results.put(f, "confirmed", f"{type(caught).__name__} at line {f['line']} while running {sig}, "
                                     "the enclosing function, caught by the code itself")
                elif under and not hit and check.refutable:
                    self.results.put(f, "refuted", f"line {f['line']} ran {under} time{'s' if under != 1 else ''} "
                                     f"under a JAX trace while running {sig}, without an error")
            elif check.kind == checks.TRACE_TIME and cached and under and under == ran:
                self.results.put(f, "confirmed", f"line {f['line']} ran {under} time{'s' if under != 1 else ''} while "
                                 f"running {sig}, each time under a JAX trace of a cached transform: it does not "
                                 "run on later calls")

    def jit_expression(self, f: dict[str, Any]) -> Optional[ast.AST]:
        """The flagged `jax.jit(...)` call, or the def carrying the flagged `@jax.jit` decorator.

        With the static pass's subject, the call whose callable is the one it flagged (a line may hold
        several jits) or the def it named; otherwise the first candidate on the line.
        """
        subject = f.get("subject") or {}
        if subject.get("callable"):
            wanted = _normalised(subject["callable"])
            for node in ast.walk(self.tree):
                if isinstance(node, ast.Call) and node.lineno <= f["line"] <= (node.end_lineno or node.lineno) \
                        and node.args and ast.unparse(node.func).split(".")[-1] in _JITS \
                        and ast.unparse(node.args[0]) == wanted:
                    return node
        elif subject.get("def"):
            for node in ast.walk(self.tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == subject["def"] \
                        and any(d.lineno == f["line"] for d in node.decorator_list):
                    return node
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
        import numpy as np
        from jax import monitoring

        if expr is None:
            raise CannotBuild("could not find the flagged jit expression")
        env: dict[str, Any] = dict(self.mod.__dict__)
        free = _free_names(expr) - set(env) - set(dir(builtins))
        # Names the loop body binds to callables or instances (`step = lambda ...`, `def step`,
        # `scaler = Scaler(2.0)`): re-run those bindings on each pass, as the loop does.
        preamble = [b for b in (self.binding_before(n, f["line"]) for n in sorted(free)) if b is not None]
        # With the loop the static pass named, a binding above it runs once, before the loop, not on
        # each pass (without it, every binding found is taken to be in the loop body).
        since = (f.get("subject") or {}).get("loop_line", 0)
        setup = [b for b in preamble if b.lineno < since]
        preamble = [b for b in preamble if b.lineno >= since]
        for stmt in setup + preamble:
            free |= _free_names(stmt) - set(env) - set(dir(builtins))
        counters = _counted_names(self.tree, since)
        for name in free:
            if name in ("self", "cls"):
                raise CannotBuild("the callable is a bound method of an instance verification cannot construct")
            # a loop variable: any value will do, the callable is what is rebuilt (an index counts: `range`)
            env[name] = 0 if name in counters else 1.0
        jitted = []
        if setup:
            exec(compile(ast.Module(body=[_without_nonlocal(s) for s in setup], type_ignores=[]), self.path, "exec"),
                 env)
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
                    fn(*[jax.device_put(np.ones(shape, np.float32)) for _ in range(n_args)])  # compiles nothing
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


def _free_names(node: ast.AST) -> set[str]:
    """The names `node` reads from outside. Inside the defs and lambdas in it, their parameters and the
    names their bodies bind are their own (`state` in `def loss_fn(state, ...)` is not the loop's
    `state`); their decorators and defaults (`lambda x, t=t: ...`) are read outside."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        a = node.args
        outer: set[str] = set()
        for part in list(a.defaults) + [d for d in a.kw_defaults if d is not None] \
                + list(getattr(node, "decorator_list", [])):
            outer |= _free_names(part)
        params = {p.arg for p in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg] if p is not None}
        body = node.body if isinstance(node.body, list) else [node.body]
        inner: set[str] = set()
        stored: set[str] = set()
        for stmt in body:
            inner |= _free_names(stmt)
            stored |= {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        return outer | (inner - params - stored)
    if isinstance(node, ast.Name):
        return {node.id}
    found: set[str] = set()
    for child in ast.iter_child_nodes(node):
        found |= _free_names(child)
    return found


def _static_key_check(call: Callable, args: Any, kwargs: dict) -> Optional[Callable[[], Any]]:
    """JAX's static key-reuse check of one call, or None when this JAX has none."""
    try:
        from jax.experimental.key_reuse._core import check_key_reuse
    except ImportError:
        return None
    return lambda: check_key_reuse(lambda *a: call(*a, **kwargs), *args)


def _frames(exc: BaseException) -> list[traceback.FrameSummary]:
    """The frames of `exc`, and of the user's code that JAX attached as its cause (the static key-reuse
    check raises after tracing; the operation's source is in a `JaxStackTraceBeforeTransformation`)."""
    frames = list(traceback.extract_tb(exc.__traceback__))
    cause = exc.__cause__
    if cause is not None and type(cause).__name__ == "JaxStackTraceBeforeTransformation":
        frames += traceback.extract_tb(cause.__traceback__)
    return frames


class _CallCounter:
    """Counts the calls of the functions the static pass named in impure-call findings, made from the
    flagged lines: each function is wrapped where the code finds it (its module's attribute, and any
    name of the user's module bound to it) until `restore`. A function that cannot be wrapped (a method
    of a built-in type, `os.environ`) is left alone, and its findings are judged by line runs."""

    def __init__(self, findings: list[dict[str, Any]], path: str, mod: Any) -> None:
        self.counts: dict[int, int] = {}
        self.shown: dict[int, str] = {}
        self.undo: list[tuple[Any, str, Any]] = []
        wanted: dict[str, list[dict[str, Any]]] = {}
        for f in findings:
            callee = (f.get("subject") or {}).get("callee")
            if callee and f.get("path", path) == path:
                wanted.setdefault(callee, []).append(f)
        for callee, fs in wanted.items():
            found = _resolve(callee)
            if found is None:
                continue
            owner, attr, original = found
            sites = [(f["idx"], range(f["line"], f["end_line"] + 1)) for f in fs]
            wrapper = self._wrap(original, path, sites)
            try:
                setattr(owner, attr, wrapper)
            except (AttributeError, TypeError):
                continue
            self.undo.append((owner, attr, original))
            for k, v in list(mod.__dict__.items()):
                if v is original:
                    mod.__dict__[k] = wrapper
                    self.undo.append((mod, k, original))
            for idx, _ in sites:
                self.counts[idx] = 0
                self.shown[idx] = callee.replace("builtins.", "")

    def _wrap(self, original: Callable, path: str, sites: list[tuple[int, range]]) -> Callable:
        counts = self.counts

        def counted(*args: Any, **kwargs: Any) -> Any:
            frame = sys._getframe(1)
            if frame.f_code.co_filename == path:
                for idx, span in sites:
                    if frame.f_lineno in span:
                        counts[idx] += 1
            return original(*args, **kwargs)

        return counted

    def restore(self) -> None:
        for owner, attr, original in reversed(self.undo):
            setattr(owner, attr, original)
        self.undo = []


def _resolve(qualname: str) -> Optional[tuple[Any, str, Any]]:
    """(object holding it, attribute, the function) for a dotted name such as `numpy.random.rand`."""
    import importlib

    parts = qualname.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            owner: Any = importlib.import_module(".".join(parts[:cut]))
        except Exception:  # noqa: BLE001 - not a module at this depth: try a shorter prefix
            continue
        try:
            for name in parts[cut:-1]:
                owner = getattr(owner, name)
            original = getattr(owner, parts[-1])
        except AttributeError:
            return None
        return (owner, parts[-1], original) if callable(original) and not isinstance(original, type) else None
    return None


_JITS = ("jit", "pjit", "pmap", "filter_jit")


def _normalised(source: str) -> str:
    """The source of an expression as `ast.unparse` writes it (the static pass keeps the user's spacing)."""
    try:
        return ast.unparse(ast.parse("(" + source.strip() + "\n)", mode="eval").body)
    except SyntaxError:
        return source


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


def _counted_names(tree: ast.AST, line: int) -> set[str]:
    """The names the `for` loop at `line` binds to counts: `i` of `for i in range(n)` and of
    `for i, x in enumerate(xs)`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.For) and node.lineno == line and isinstance(node.iter, ast.Call) \
                and isinstance(node.iter.func, ast.Name):
            if node.iter.func.id == "range" and isinstance(node.target, ast.Name):
                return {node.target.id}
            if node.iter.func.id == "enumerate" and isinstance(node.target, ast.Tuple) and node.target.elts \
                    and isinstance(node.target.elts[0], ast.Name):
                return {node.target.elts[0].id}
    return set()
