"""The verification worker: loads a file as the module it is, groups its findings, reaches and judges them.

Two ways to start it:

- `python -m jaxlint.verify.worker JOB.json RESULT.json` verifies one file and exits;
- `python -m jaxlint.verify.worker --serve [MODULE ...]` imports JAX (and the listed libraries) once,
  then reads batches of jobs from stdin and forks one child per batch, in its own session, so the
  parent can fence each file by time and memory and kill the child with its process group.

A child writes a file's result after every verdict, so a crash or a time-out still leaves the
verdicts reached so far. Reaching functions is `reach.py`, building inputs `inputs.py`, judging
`verdicts.py`, and how each rule is judged the table in `checks.py`.
"""
from __future__ import annotations

import ast
import json
import os
import signal
import sys
import types
from typing import Any, Callable, Optional

from . import checks, imports
from .evidence import Observer, Results, TimedOut, Unavailable, error_summary, on_alarm, one_sentence
from .inputs import CannotBuild, Inputs, call_sites
from .reach import BODY_TRANSFORMS, OWN_TRANSFORMS, Reaching, def_chain, is_method
from .slicing import slice_module
from .verdicts import Judging


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


def _jitted_alias(tree: ast.Module, qualname: str) -> Optional[dict[str, Any]]:
    """How a module-level `name = jax.jit(qualname, static_argnums=…)` jits a plain function of the module
    (the caller of a helper of another file is traced that way): the transform and its literal statics."""
    for stmt in tree.body:
        call = stmt.value if isinstance(stmt, ast.Assign) else None
        if not isinstance(call, ast.Call) or not call.args or not isinstance(call.args[0], ast.Name) \
                or call.args[0].id != qualname:
            continue
        func = call.func
        if (func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else "") != "jit":
            continue
        found: dict[str, Any] = {"transform": "jit", "static_argnums": [], "static_argnames": []}
        for kw in call.keywords:
            if kw.arg in ("static_argnums", "static_argnames"):
                try:
                    value = ast.literal_eval(kw.value)
                except ValueError:
                    return None  # (statics not written out: not known)
                found[kw.arg] = list(value) if isinstance(value, (tuple, list)) else [value]
        return found
    return None


_RULE_ERROR = "_jaxlint_rule_error"  # the name the rewritten lines call `checks.is_jax_error` by

# `x[i] op= v` -> the `.at[i]` method doing the same functionally
_AT_METHODS = {ast.Add: "add", ast.Mult: "multiply", ast.Div: "divide", ast.Pow: "power"}


class _FunctionalUpdates(ast.NodeTransformer):
    """Rewrites `x[i] = v` (and `x[i] += v`, ...) on the given lines to `x = x.at[i].set(v)`: an item
    assignment already confirmed to raise, made to run so that the lines after it can be traced too.
    Line numbers are kept, so tracebacks still name the original lines."""

    def __init__(self, lines: frozenset[int]) -> None:
        self.lines = lines

    def _rewrite(self, node: ast.stmt, target: ast.expr, value: ast.expr, op: Optional[ast.operator]) -> ast.stmt:
        if node.lineno not in self.lines or not (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)):
            return node
        name = target.value.id
        at = ast.Subscript(ast.Attribute(ast.Name(name, ast.Load()), "at", ast.Load()), target.slice, ast.Load())
        if op is None:
            method, arg = "set", value
        elif type(op) in _AT_METHODS:
            method, arg = _AT_METHODS[type(op)], value
        elif isinstance(op, ast.Sub):
            method, arg = "add", ast.UnaryOp(ast.USub(), value)
        else:
            method, arg = "set", ast.BinOp(ast.Subscript(ast.Name(name, ast.Load()), target.slice, ast.Load()), op, value)
        call = ast.Call(ast.Attribute(at, method, ast.Load()), [arg], [])
        update = ast.copy_location(ast.Assign([ast.Name(name, ast.Store())], call), node)
        # `try: x = x.at[i].set(v) except Exception as e: if <a rule's JAX error>(e): raise`: values built
        # for verification may not fit the update (a slice of 5 set from 3 values), which is no reason
        # to stop before the lines after it; a JAX error a rule names is still raised there.
        err = "_jaxlint_update_error"
        reraise = ast.If(ast.Call(ast.Name(_RULE_ERROR, ast.Load()), [ast.Name(err, ast.Load())], []),
                         [ast.Raise()], [])
        guarded = ast.Try([update], [ast.ExceptHandler(ast.Name("Exception", ast.Load()), err, [reraise])], [], [])
        for part in ast.walk(guarded):
            ast.copy_location(part, node)
        return ast.fix_missing_locations(guarded)

    def visit_Assign(self, node: ast.Assign) -> ast.stmt:
        self.generic_visit(node)
        return self._rewrite(node, node.targets[0], node.value, None) if len(node.targets) == 1 else node

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.stmt:
        self.generic_visit(node)
        return self._rewrite(node, node.target, node.value, node.op)


def load_module(path: str, name: str, root_dir: Optional[str], roots: set[str],
                failures: dict[str, str], rewrites: frozenset[int] = frozenset()) -> types.ModuleType:
    """Execute the imports and the definitions `roots` need, statement by statement, as module `name`.

    A statement that fails (an optional or test-only import, a definition that needs one) leaves its
    names as `Unavailable` stand-ins and is recorded in `failures`; the other definitions still load.
    Item assignments on the lines `rewrites` run as functional `.at[...]` updates.
    """
    with open(path, "rb") as f:
        tree = ast.parse(f.read(), path)
    sliced, _ = slice_module(tree, roots)
    if rewrites:
        sliced = _FunctionalUpdates(rewrites).visit(sliced)
    is_pkg = os.path.basename(path) == "__init__.py"
    # Only the package root: the module is loaded as the package module it is, and the folder of a
    # package is not where Python looks for top-level modules (a sibling `nn.py` must not shadow the
    # project's `nn/` package). Script-style sibling imports are still found, last, by `imports.PROJECT`.
    p = root_dir or os.path.dirname(path)
    if p not in sys.path:
        sys.path.insert(0, p)
    if "." in name:
        _purge_foreign(name.split(".")[0], root_dir)
    mod = types.ModuleType(name)
    mod.__file__ = path
    mod.__package__ = name if is_pkg else name.rpartition(".")[0]
    if is_pkg:
        mod.__path__ = [os.path.dirname(path)]  # type: ignore[attr-defined]
    sys.modules[name] = mod
    if rewrites:
        mod.__dict__[_RULE_ERROR] = checks.is_jax_error
    imports.PROJECT.add(path)
    imports.ABSENT.active = True
    stars: list[str] = []
    try:
        for stmt in sliced.body:
            try:
                exec(compile(ast.Module(body=[stmt], type_ignores=[]), path, "exec"), mod.__dict__)
            except TimedOut:
                raise
            except BaseException as exc:  # noqa: BLE001 - SystemExit too: only what needs this name is lost
                reason = error_summary(exc, {path})
                if isinstance(stmt, ast.ImportFrom) and any(a.name == "*" for a in stmt.names):
                    # (the names it should have bound are not known: a later NameError says which failed)
                    stars.append(f"`from {'.' * stmt.level}{stmt.module or ''} import *` failed: {reason}")
                elif isinstance(exc, NameError) and stars:
                    reason += f" ({'; '.join(stars)})"
                for n in _bound_names(stmt):
                    if n not in mod.__dict__:
                        mod.__dict__[n] = Unavailable(n, reason)
                    failures[n] = reason
    finally:
        imports.ABSENT.active = False
    return mod



class Worker(Reaching, Judging):
    """Verifies the findings of one file: groups them by the function that is traced, reaches and judges."""

    def __init__(self, job: dict[str, Any], out_path: str) -> None:
        self.job = job
        self.path = os.path.abspath(job["path"])
        self.results = Results(out_path, veto=imports.used_stand_ins)
        self.watch = {self.path}
        self.observer = Observer(self.watch)
        self.failures: dict[str, str] = {}
        self.timeout = float(job.get("timeout", 10.0))
        self.roots: set[str] = set()
        self.current_instance: Any = None
        self.scope: dict[str, Any] = {}
        self.rewrites: set[int] = set()  # lines of confirmed item assignments, run functionally on reload
        self.site_choice = 0  # which call in the file gives its literal arguments first (see `Inputs`)
        self.flags_off: frozenset[str] = frozenset()  # flags only tested for truth built False (see `Inputs`)
        self.run_errors: list[BaseException] = []  # what the candidates of the last `verify_group` raised
        self.flags_built: list[str] = []  # the flags built with it while judging the current group

    def load(self) -> types.ModuleType:
        name = self.job.get("module") or "jaxlint_verified"
        self.failures = {}
        self.mod = load_module(self.path, name, self.job.get("sys_path"), self.roots, self.failures,
                               frozenset(self.rewrites))
        return self.mod

    def inputs(self, variant: int = 0, batch: bool = False, plain: bool = False, lead: int = 2) -> Inputs:
        return Inputs(self.tree, variant, batch=batch, lead=lead, plain_call=plain,
                      namespace={**self.mod.__dict__, **self.scope}, site_choice=self.site_choice,
                      flags_off=self.flags_off, flags=self.flags_built)

    def enclosing(self, qualname: str) -> Optional[str]:
        """The outermost function a nested definition lives in (`Test.test_x` for `Test.test_x.f`)."""
        chain = def_chain(self.tree, qualname)
        if not chain:
            return None
        for i, node in enumerate(chain[:-1]):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return ".".join(n.name for n in chain[:i + 1])  # type: ignore[attr-defined]
        return None

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
        target: dict[str, Any] = {"qualname": caller["qualname"], "transform": "call", "static_argnums": [],
                                  "static_argnames": []}
        if hasattr(reached.obj, "lower") or hasattr(reached.raw, "lower"):
            target["transform"] = "jit"
        else:
            target.update(_jitted_alias(sub.tree, caller["qualname"]) or {})  # `step_jit = jax.jit(step)`
        sub.verify_group(target, findings)

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
            if target is None and check.kind == checks.METHOD_SELF and (f.get("subject") or {}).get("method"):
                # The static pass named the jitted method: trace it, whatever the flagged line holds.
                target = {"qualname": f["subject"]["method"], "transform": "jit", "static_argnums": [],
                          "static_argnames": []}
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
                    and root["transform"] in BODY_TRANSFORMS and not is_method(chain, len(chain) - 1):
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
            self.flags_built.clear()
            self._fenced(group, lambda root=root, group=group: self.verify_group(root, group),
                         f"tracing `{root['qualname']}`")
            self._past_item_assignments(root, group)
            self._other_call_sites(root, group)
            self._other_flags(root, group)

    def _other_flags(self, root: dict[str, Any], group: list[dict[str, Any]]) -> None:
        """Flags only tested for truth were built `True`; when the run failed before the flagged lines, or
        never reached them, build `False` first the flags whose `if` led to the failure (`if
        self.obs_pathing_grid: raise NotImplementedError`), then all of them."""
        for _ in range(2):
            if not self.flags_built or "*" in self.flags_off:
                break
            undecided = [f for f in group if any(why in self.results.status(f)[1]
                                                 for why in ("was not reached", "failed first"))]
            if not undecided:
                break
            guards = set().union(*(_guarding_flags(self.tree, self.path, e, set(self.flags_built))
                                   for e in self.run_errors)) - self.flags_off
            self.flags_off = self.flags_off | guards if guards else frozenset({"*"})
            self.flags_built.clear()
            self.results.forget(undecided)
            self._fenced(undecided, self.load, "reloading the module")
            self._fenced(undecided, lambda: self.verify_group(root, undecided),
                         f"tracing `{root['qualname']}` with flags off")
            self._past_item_assignments(root, undecided)
        self.flags_off = frozenset()

    def _other_call_sites(self, root: dict[str, Any], group: list[dict[str, Any]]) -> None:
        """Lines a run with the first call's literal arguments never reached (the `"2-sided"` branch when
        the first call passes `"1-sided"`): run again with each other call's arguments, as it passes them."""
        chain = def_chain(self.tree, root["qualname"])
        if not chain:
            return
        sites = call_sites(self.tree, chain[-1].name)  # type: ignore[attr-defined]
        try:
            for choice in range(1, len(sites)):
                unreached = [f for f in group if "was not reached" in self.results.status(f)[1]]
                if not unreached:
                    return
                self.site_choice = choice
                self.results.forget(unreached)
                self._fenced(unreached, self.load, "reloading the module")
                self._fenced(unreached, lambda: self.verify_group(root, unreached),
                             f"tracing `{root['qualname']}` with the arguments of another call in the file")
                self._past_item_assignments(root, unreached)
        finally:
            self.site_choice = 0

    def _past_item_assignments(self, root: dict[str, Any], group: list[dict[str, Any]]) -> None:
        """A trace stops at the first item assignment that raises, so the findings after it could not be
        judged: run the confirmed ones as the functional updates they should be and trace again, until
        no new one is confirmed."""
        for _ in range(len(group)):
            confirmed = {f["line"] for f in group if f["name"] == "array-item-assignment"
                         and self.results.status(f)[0] == "confirmed"}
            blocked = [f for f in group if f["line"] not in confirmed and "failed first" in self.results.status(f)[1]]
            if not blocked or confirmed <= self.rewrites:
                return
            self.rewrites |= confirmed
            self.results.forget(blocked)
            self._fenced(blocked, self.load, "reloading the module")
            self._fenced(blocked, lambda: self.verify_group(root, blocked),
                         f"tracing `{root['qualname']}` past the confirmed item assignments")
            group = [f for f in group if f not in blocked or self.results.has(f)]

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


def _guarding_flags(tree: ast.Module, path: str, exc: Optional[BaseException], flags: set[str]) -> set[str]:
    """The flags (`self.<flag>`) tested by the `if`s whose body holds the line of `path` where `exc` was raised."""
    import traceback

    if exc is None:
        return set()
    lines = [fr.lineno for fr in traceback.extract_tb(exc.__traceback__) if os.path.abspath(fr.filename) == path]
    if not lines:
        return set()
    line = lines[-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and node.body and node.body[0].lineno <= line <= (node.body[-1].end_lineno or 0):
            found |= {n.attr for n in ast.walk(node.test) if isinstance(n, ast.Attribute)
                      and isinstance(n.value, ast.Name) and n.value.id == "self" and n.attr in flags}
    return found


# ---- entry points ---------------------------------------------------------------------------------


def run_job(job_path: str, out_path: str) -> None:
    """Verify one file (in this process) and leave the verdicts in `out_path`."""
    with open(job_path, encoding="utf-8") as f:
        job = json.load(f)
    signal.signal(signal.SIGALRM, on_alarm)
    # The user's code must not be able to print into our result channel or read our stdin.
    sys.stdin = open(os.devnull)
    worker = Worker(job, out_path)
    worker.results.save()
    try:
        import jax  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        worker.results.rest(job["findings"], "not-run", f"jax could not be imported ({one_sentence(str(exc))})")
        return
    imports.install()
    try:
        worker.run()
    finally:
        imports.forget()
        worker.results.save()


def run_batch(jobs: list[dict[str, str]]) -> None:
    """Verify several files one after the other in this process (JAX's backend started once).

    After each file its `done` marker is written, so the parent can time and blame each file; the
    project's own modules a file loaded are forgotten, so the next file loads them afresh.
    """
    import jax

    baseline = dict(sys.modules)
    path = list(sys.path)
    x64 = bool(jax.config.jax_enable_x64)  # as the environment set it, for every file
    # Verification raises and catches hundreds of errors; JAX's traceback filtering walks every frame
    # of each (an eighth of the run). Only the frames of the user's files are read, filtered or not.
    jax.config.update("jax_traceback_filtering", "off")
    for job in jobs:
        os.chdir(job["cwd"])
        run_job(job["job"], job["out"])
        for name in [n for n in sys.modules if n not in baseline]:
            where = getattr(sys.modules[name], "__file__", None) or ""
            if f"{os.sep}site-packages{os.sep}" not in where:
                del sys.modules[name]
        sys.modules.update(baseline)  # preloaded libraries a file's own package copy displaced
        sys.path[:] = path
        jax.config.update("jax_debug_key_reuse", False)
        jax.config.update("jax_enable_x64", x64)
        # JAX's caches are kept from one file to the next: they are keyed by the (weakly held) function
        # objects, and each file's functions are new ones, so no trace of an earlier file is reused;
        # what is kept is the compiled kernels of JAX's own operations (an `add` of f32[3] compiled once).
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
        _reply(out, {"nojax": missing.split(".")[0] == "jax", "detail": one_sentence(str(exc))})
        return
    signal.signal(signal.SIGALRM, on_alarm)
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
