"""Watching the flagged lines while tests run: what ran, under which JAX trace, and what it raised.

Two backends feed one recorder. On Python >= 3.12, `sys.monitoring` (PEP 669): a PY_START callback
switches LINE events on for the code objects of flagged files that hold a flagged line and disables
itself everywhere else; a LINE callback disables itself on every line that is not flagged, so after
warm-up only the flagged lines cost anything. On 3.10/3.11, `sys.settrace` with a global function that
returns at once for every file without findings and traces lines only in code objects that hold one.
"""
from __future__ import annotations

import os
import sys
import threading
import types
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ..findings import Finding
from ..verify import checks

# What the test plugin cannot judge from a test run, beyond the rules never verified by running code.
NOT_BY_TESTS: dict[str, str] = {
    **checks.NOT_VERIFIABLE,
    "jit-method-self": "the hazard shows where the method is called, not at the flagged decorator line",
}

# What each JAX entry point puts on JAX's trace stack while the function's Python runs.
ABSTRACT = "abstract"  # jit and friends, lax bodies: values are abstract
BATCH = "batch"        # vmap
JVP = "jvp"            # grad and friends: values keep their concrete primal
_KIND_OF_TRANSFORM: dict[str, str] = {
    **{t: ABSTRACT for t in ("jit", "pjit", "pmap", "checkpoint", "eval_shape", "make_jaxpr", "flax_jit",
                             "filter_jit", "shard_map", "scan", "fori_loop", "while_loop", "cond", "switch",
                             "map", "associative_scan")},
    "vmap": BATCH,
    **{t: JVP for t in ("grad", "value_and_grad", "jacfwd", "jacrev", "hessian", "jvp", "vjp", "linearize")},
}
# JAX's trace classes (the "stackless" core of jax 0.4.36 and later) and the kind each stands for.
_KIND_OF_TRACE: dict[str, str] = {"DynamicJaxprTrace": ABSTRACT, "BatchTrace": BATCH, "JVPTrace": JVP,
                                  "LinearizeTrace": JVP}


def transform_kind(transform: Optional[str]) -> Optional[str]:
    """The trace kind a named transform runs the function under (None: unknown, any trace will do)."""
    return _KIND_OF_TRANSFORM.get(transform or "")


def kind_of(slug: str) -> Optional[str]:
    """How the shared table verifies a rule (`raises`, `trace-time`, ...); None when tests cannot judge it."""
    check = checks.check_for(slug)
    return None if check is None or slug in NOT_BY_TESTS else check.kind

_MISSING = object()
_TOOL_NAME = "jaxlint"


@dataclass
class Watch:
    """One finding, and what the tests showed at its line."""

    finding: Finding
    text: str  # the source of the flagged span (a stale global's name, a jit site's expression)
    root: Optional[str] = None  # qualname of the function JAX traces (a helper's traced caller)
    traced_runs: Counter = field(default_factory=Counter)  # frozenset of trace kinds -> runs
    eager_runs: int = 0
    failed_traced_runs: int = 0  # runs under a trace that another exception passed through
    failed_runs: int = 0  # runs, traced or not, that another exception passed through
    raised: Optional[tuple[str, str]] = None  # (the rule's JAX error, test) — the first seen
    tests: list[str] = field(default_factory=list)  # tests in which the line ran under a trace
    retraced: Optional[tuple[int, int, str]] = None  # jit-in-loop: (passes, passes that traced, test)
    first_trace: Optional[tuple[dict, Any, str]] = None  # stale-global: (module globals, value, test)
    rebound: Optional[tuple[Any, Any, str]] = None  # stale-global: (value at first trace, later value, test)
    key: Optional[str] = None  # prng-key-reuse: the key's name, and the line that consumed it first (0: a loop)
    first_use: int = 0
    key_reused: Optional[str] = None  # prng-key-reuse: the test in which the same key data came back
    key_fresh: int = 0  # prng-key-reuse: runs of the flagged line with key data not consumed before

    def note_test(self, test: str) -> None:
        if test and test not in self.tests:
            self.tests.append(test)


@dataclass
class _File:
    path: str
    starts: dict[int, list[Watch]]  # first line of a finding -> its watches
    spans: dict[int, list[Watch]]  # every line of a finding's span -> its watches
    roots: set[str]  # qualnames whose entries are counted
    first_uses: dict[int, list[Watch]] = field(default_factory=dict)  # prng-key-reuse: the earlier consumer
    code_lines: dict[int, bool] = field(default_factory=dict)  # id(code) -> holds a flagged line
    code_roots: dict[int, bool] = field(default_factory=dict)  # id(code) -> is a counted traced function


@dataclass
class _LoopPass:
    frame: types.FrameType  # held only until the test ends
    watch: Watch
    passes: int = 0
    traced_passes: set[int] = field(default_factory=set)


def _qualname(code: types.CodeType) -> str:
    name = getattr(code, "co_qualname", code.co_name)  # co_qualname is 3.11+
    return name.replace(".<locals>", "")


class Recorder:
    """What the backends report, per finding; no JAX import until JAX is already loaded."""

    def __init__(self, findings: list[Finding], sources: dict[str, list[str]]) -> None:
        self.files: dict[str, _File] = {}
        self.watches: list[Watch] = []
        self.entries: dict[tuple[str, str], list[int]] = {}  # (path, root) -> [traced entries, eager entries]
        # (path, root) -> calls of its `jax.jit` wrapper made outside any trace; filled only by a backend
        # that can see calls of a compiled callable (sys.monitoring's CALL event, Python >= 3.12).
        self.calls: Optional[dict[tuple[str, str], int]] = None
        for f in findings:
            kind = kind_of(f.name)
            if kind is None:
                continue
            path = os.path.realpath(f.path)
            lines = sources.get(path, [])
            w = Watch(f, _span_text(lines, f), _root_of(f))
            self.watches.append(w)
            rec = self.files.setdefault(path, _File(path, {}, {}, set()))
            rec.starts.setdefault(f.line, []).append(w)
            for ln in range(f.line, max(f.line, f.end_line) + 1):
                rec.spans.setdefault(ln, []).append(w)
            if w.root and kind == checks.TRACE_TIME:
                rec.roots.add(w.root)
                self.entries.setdefault((path, w.root), [0, 0])
            if kind == checks.KEY_REUSE:
                w.key, w.first_use = _key_and_first_use_of(f) if (f.subject or {}).get("key") \
                    else _key_and_first_use(lines, f)
                if w.first_use > 0:
                    rec.first_uses.setdefault(w.first_use, []).append(w)
                    rec.starts.setdefault(w.first_use, [])  # so the backends stop there too
        self.test = ""
        self._by_name: dict[str, Optional[_File]] = {}  # co_filename -> file record (None: not watched)
        self._core: Any = None
        self._loops: dict[tuple[int, int], _LoopPass] = {}  # (id(frame), id(watch)) -> passes
        self._keys: dict[int, tuple[types.FrameType, dict[int, set]]] = {}  # id(frame) -> consumed key data
        self.error: Optional[str] = None  # an internal error that stopped the watching

    # ---- lookups the backends share -------------------------------------------------------------

    def file_of(self, filename: str) -> Optional[_File]:
        rec = self._by_name.get(filename, _MISSING)
        if rec is _MISSING:
            rec = self.files.get(os.path.realpath(filename)) if filename and filename[0] != "<" else None
            self._by_name[filename] = rec
        return rec  # type: ignore[return-value]

    def holds_flagged_line(self, rec: _File, code: types.CodeType) -> bool:
        known = rec.code_lines.get(id(code))
        if known is None:
            known = any(ln in rec.starts or ln in rec.spans for _, _, ln in code.co_lines() if ln is not None)
            rec.code_lines[id(code)] = known
        return known

    def trace_kinds(self) -> frozenset:
        """The kinds of JAX trace active right now (empty: no trace, or JAX not loaded)."""
        core = self._core
        if core is None:
            core = sys.modules.get("jax._src.core")
            if core is None:
                return frozenset()
            self._core = core
        try:
            trace = core.trace_ctx.trace
        except AttributeError:  # another JAX core: no trace information
            return frozenset()
        kinds = set()
        while trace is not None:
            kind = _KIND_OF_TRACE.get(type(trace).__name__)
            if kind is not None:
                kinds.add(kind)
            elif type(trace).__name__ != "EvalTrace":
                kinds.add(type(trace).__name__)
            trace = getattr(trace, "parent_trace", None)
        return frozenset(kinds)

    # ---- events ---------------------------------------------------------------------------------

    def is_root(self, rec: _File, code: types.CodeType) -> bool:
        known = rec.code_roots.get(id(code))
        if known is None:
            known = rec.code_roots[id(code)] = _qualname(code) in rec.roots
        return known

    def on_entry(self, rec: _File, code: types.CodeType) -> None:
        if self.is_root(rec, code):
            counts = self.entries[(rec.path, _qualname(code))]
            counts[0 if self.trace_kinds() else 1] += 1

    def on_wrapper_call(self, rec: _File, code: types.CodeType) -> None:
        """A call of the `jax.jit` wrapper of a counted traced function: the calls outside any trace are
        the ones JAX either traces (a body run under a trace follows) or answers from its cache."""
        if self.calls is not None and self.is_root(rec, code) and not self.trace_kinds():
            key = (rec.path, _qualname(code))
            self.calls[key] = self.calls.get(key, 0) + 1

    def on_line(self, rec: _File, line: int, frame: types.FrameType) -> None:
        for w in rec.first_uses.get(line, ()):
            self._consumed(w, frame, fresh_check=False)
        watches = rec.starts.get(line)
        if not watches:
            return
        kinds = self.trace_kinds()
        for w in watches:
            if kinds:
                w.traced_runs[kinds] += 1
                w.note_test(self.test)
            else:
                w.eager_runs += 1
            kind = kind_of(w.finding.name)
            if kind == checks.JIT_IN_LOOP:
                self._loop_pass(w, frame)
            elif kind == checks.STALE and kinds and w.first_trace is None and w.text in frame.f_globals:
                w.first_trace = (frame.f_globals, frame.f_globals[w.text], self.test)
            elif kind == checks.KEY_REUSE and w.key:
                self._consumed(w, frame, fresh_check=True)

    def _consumed(self, w: Watch, frame: types.FrameType, fresh_check: bool) -> None:
        """Note the key data `w.key` holds as a consumer line starts; at the flagged line, was it consumed?"""
        fp = _key_fingerprint(_lookup(frame, w.key or ""))
        if fp is None:
            return
        held = self._keys.get(id(frame))
        if held is None or held[0] is not frame:
            held = self._keys[id(frame)] = (frame, {})
        seen = held[1].setdefault(id(w), set())
        if fresh_check:
            if fp in seen:
                if w.key_reused is None:
                    w.key_reused = self.test
            elif seen and w.first_use >= 0:
                # Only a run after a consumption counts as fresh (a loop's first pass proves nothing).
                w.key_fresh += 1
                w.note_test(self.test)
        seen.add(fp)

    def on_raise(self, rec: _File, line: int, exc: BaseException) -> None:
        watches = rec.spans.get(line)
        if not watches:
            return
        kinds = None
        for w in watches:
            if checks.confirms(w.finding.name, exc):
                if w.raised is None:
                    w.raised = (type(exc).__name__, self.test)
            else:
                if kinds is None:
                    kinds = self.trace_kinds()
                w.failed_runs += 1
                if kinds:
                    w.failed_traced_runs += 1

    def _loop_pass(self, w: Watch, frame: types.FrameType) -> None:
        key = (id(frame), id(w))
        lp = self._loops.get(key)
        if lp is None or lp.frame is not frame:
            lp = self._loops[key] = _LoopPass(frame, w)
        lp.passes += 1

    def on_jaxpr_trace(self, fun_name: str) -> None:
        """JAX finished tracing `fun_name` at top level: credit the jit sites whose frames are live."""
        if not self._loops:
            return
        live: set[int] = set()
        frame: Optional[types.FrameType] = sys._getframe(1)
        while frame is not None:
            live.add(id(frame))
            frame = frame.f_back
        for (frame_id, _), lp in self._loops.items():
            if frame_id not in live or not _names_site(fun_name, lp.watch.text):
                continue
            lp.traced_passes.add(lp.passes)
            w = lp.watch
            if len(lp.traced_passes) >= 2 and (w.retraced is None or len(lp.traced_passes) > w.retraced[1]):
                w.retraced = (lp.passes, len(lp.traced_passes), self.test)

    # ---- test boundaries ------------------------------------------------------------------------

    def begin_test(self, nodeid: str) -> None:
        self.test = nodeid

    def end_test(self) -> None:
        self._loops.clear()  # frames of the finished test must not outlive it
        self._keys.clear()
        self.check_rebound()
        self.test = ""

    def check_rebound(self) -> None:
        for w in self.watches:
            if w.first_trace is None or w.rebound is not None:
                continue
            module_globals, value, _test = w.first_trace
            now = module_globals.get(w.text, _MISSING)
            if now is not _MISSING and now is not value and not _equal(now, value):
                w.rebound = (value, now, self.test)


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # arrays and other values without a single truth value: treat as different
        return False


def _key_and_first_use_of(f: Finding) -> tuple[Optional[str], int]:
    """The key and the line that consumed it first, as the static pass knew them (0 for a loop; -1 for
    an earlier use on the same line, which a line-start watcher cannot tell apart: no verdict)."""
    subject = f.subject or {}
    if subject.get("loop"):
        return subject["key"], 0
    first = int(subject.get("first_line") or 0)
    return subject["key"], first if 0 < first < f.line else -1


def _key_and_first_use(lines: list[str], f: Finding) -> tuple[Optional[str], int]:
    """The key a prng-key-reuse finding names, and the line above that consumed it first (0 for a loop).

    The rule's message names both (`key` was already consumed by `jax.random.normal`); the first use is
    the nearest line above, in the same function, that calls that consumer with that key.
    """
    import re

    names = re.findall(r"`([^`]+)`", f.message)
    if not names or not re.fullmatch(r"[A-Za-z_][\w.]*", names[0]):
        return None, 0
    key = names[0]
    if "already" not in f.message or len(names) < 2:
        return key, 0
    callee = names[1] + "("
    indent = len(lines[f.line - 1]) - len(lines[f.line - 1].lstrip()) if 0 < f.line <= len(lines) else 0
    for ln in range(f.line - 1, 0, -1):
        text = lines[ln - 1]
        stripped = text.lstrip()
        if stripped.startswith(("def ", "async def ")) and len(text) - len(stripped) < indent:
            break
        if callee in text and re.search(rf"\b{re.escape(key)}\b", text):
            return key, ln
    return key, -1  # the first consumer was not found: no verdict from key data


def _lookup(frame: types.FrameType, dotted: str) -> Any:
    head, *rest = dotted.split(".")
    value = frame.f_locals.get(head, frame.f_globals.get(head, _MISSING))
    for part in rest:
        value = getattr(value, part, _MISSING)
    return value


def _key_fingerprint(value: Any) -> Optional[tuple]:
    """The key data of a concrete PRNG key (new-style or a raw uint32 array); None for anything else."""
    jax = sys.modules.get("jax")
    core = sys.modules.get("jax._src.core")
    if jax is None or value is _MISSING or (core is not None and isinstance(value, core.Tracer)):
        return None
    try:
        import numpy as np

        if jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key):
            value = jax.random.key_data(value)
        elif not np.issubdtype(value.dtype, np.unsignedinteger):
            return None
        arr = np.asarray(value)
    except Exception:
        return None
    return (arr.dtype.str, arr.shape, arr.tobytes())


def _names_site(fun_name: str, text: str) -> bool:
    """Whether a trace of `fun_name` is a trace of the callable built by the jit site `text`."""
    if fun_name == "<lambda>":
        return "lambda" in text
    return bool(fun_name) and fun_name in text


def _span_text(lines: list[str], f: Finding) -> str:
    if not (0 < f.line <= len(lines)):
        return ""
    if f.end_line == f.line:
        return lines[f.line - 1][f.column - 1:f.end_column - 1]
    return "\n".join(lines[f.line - 1:f.end_line])


def _root_of(f: Finding) -> Optional[str]:
    t = f.target
    if t is None:
        return f.function
    while t.root is not None:
        t = t.root
    return t.qualname


def named_transform(f: Finding) -> Optional[str]:
    """The transform the finding names: its own, or for a helper that of its outermost traced caller."""
    t = f.target
    if t is None:
        return None
    if t.transform == "helper" and t.root is not None:
        t = t.root
    return t.transform


# ---- backends -------------------------------------------------------------------------------------


class SettraceBackend:
    """Python 3.10/3.11: `sys.settrace`, tracing lines only in code objects that hold a flagged line."""

    name = "sys.settrace"

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec
        self._global = self._make_global()

    def _make_global(self) -> Callable:
        # Called on every Python call in the process: locals only, one dict lookup for unwatched files.
        by_name = self.rec._by_name
        file_of = self.rec.file_of
        missing = _MISSING

        def global_hook(frame: types.FrameType, event: str, arg: Any) -> Optional[Callable]:
            rec = by_name.get(frame.f_code.co_filename, missing)
            if rec is None:
                return None
            if rec is missing:
                rec = file_of(frame.f_code.co_filename)
                if rec is None:
                    return None
            return self._enter(rec, frame.f_code)

        return global_hook

    def start(self) -> Optional[str]:
        if sys.gettrace() is not None:
            return "another tracer (a debugger or coverage) is active; run the tests without it to watch them"
        sys.settrace(self._global)
        threading.settrace(self._global)
        return None

    def stop(self) -> None:
        if sys.gettrace() == self._global:
            sys.settrace(None)
        threading.settrace(None)  # type: ignore[arg-type]

    def _enter(self, rec: _File, code: types.CodeType) -> Optional[Callable]:
        try:
            if rec.roots:
                self.rec.on_entry(rec, code)
            if not self.rec.holds_flagged_line(rec, code):
                return None
        except Exception as exc:  # the watcher must never break the user's tests
            self._fail(exc)
            return None
        return self._local

    def _local(self, frame: types.FrameType, event: str, arg: Any) -> Optional[Callable]:
        try:
            if event == "line":
                rec = self.rec.file_of(frame.f_code.co_filename)
                if rec is not None and frame.f_lineno in rec.starts:
                    self.rec.on_line(rec, frame.f_lineno, frame)
            elif event == "exception":
                rec = self.rec.file_of(frame.f_code.co_filename)
                if rec is not None and frame.f_lineno in rec.spans:
                    self.rec.on_raise(rec, frame.f_lineno, arg[1])
        except Exception as exc:
            self._fail(exc)
            return None
        return self._local

    def _fail(self, exc: Exception) -> None:
        self.rec.error = f"{type(exc).__name__}: {exc}"
        self.stop()


class MonitoringBackend:
    """Python >= 3.12: `sys.monitoring`, events only where a flagged line is."""

    name = "sys.monitoring"

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec
        self.tool: Optional[int] = None
        self._lines: dict[int, list[tuple[int, int, int]]] = {}  # id(code) -> (start, end, line)

    def start(self) -> Optional[str]:
        mon = sys.monitoring  # type: ignore[attr-defined]
        for tool in (4, 3, 2, 1, 0, 5):  # the conventional ids of debuggers and coverage last
            if mon.get_tool(tool) is None:
                self.tool = tool
                break
        else:
            return "every sys.monitoring tool id is in use"
        ev = mon.events
        mon.use_tool_id(self.tool, _TOOL_NAME)
        mon.register_callback(self.tool, ev.PY_START, self._start)
        mon.register_callback(self.tool, ev.LINE, self._line)
        mon.register_callback(self.tool, ev.RAISE, self._raise)
        events = ev.PY_START | ev.RAISE
        if any(rec.roots for rec in self.rec.files.values()):
            # Calls of a jitted function that JAX answers from its cache run no Python (no PY_START):
            # only the CALL event at the call site sees them. Each call site that calls anything but
            # the `jax.jit` wrapper of a counted function is switched off the first time it fires.
            mon.register_callback(self.tool, ev.CALL, self._call)
            events |= ev.CALL
            self.rec.calls = {}
        # RAISE cannot be set per code object; the callback returns after one dict lookup elsewhere.
        mon.set_events(self.tool, events)
        return None

    def stop(self) -> None:
        if self.tool is None:
            return
        mon = sys.monitoring  # type: ignore[attr-defined]
        mon.set_events(self.tool, 0)
        for event in (mon.events.PY_START, mon.events.LINE, mon.events.RAISE, mon.events.CALL):
            mon.register_callback(self.tool, event, None)
        mon.free_tool_id(self.tool)
        self.tool = None

    def _start(self, code: types.CodeType, offset: int) -> Any:
        mon = sys.monitoring  # type: ignore[attr-defined]
        rec = self.rec.file_of(code.co_filename)
        if rec is None:
            return mon.DISABLE
        try:
            if self.rec.holds_flagged_line(rec, code):
                mon.set_local_events(self.tool, code, mon.get_local_events(self.tool, code) | mon.events.LINE)
            if rec.roots and self.rec.is_root(rec, code):
                self.rec.on_entry(rec, code)
                return None  # keep counting entries of the traced function
        except Exception as exc:
            self._fail(exc)
        return mon.DISABLE

    def _call(self, code: types.CodeType, offset: int, callable_: Any, arg0: Any) -> Any:
        mon = sys.monitoring  # type: ignore[attr-defined]
        target = callable_.__func__ if type(callable_) is types.MethodType else callable_
        # Only JAX's own jit wrapper (a C++ `PjitFunction`): reading `__wrapped__` of it runs no user code.
        if type(target).__name__ != "PjitFunction":
            return mon.DISABLE
        try:
            inner = getattr(getattr(target, "__wrapped__", None), "__code__", None)
            rec = self.rec.file_of(inner.co_filename) if inner is not None else None
            if rec is None or not rec.roots or not self.rec.is_root(rec, inner):
                return mon.DISABLE
            self.rec.on_wrapper_call(rec, inner)
        except Exception as exc:
            self._fail(exc)
            return mon.DISABLE
        return None

    def _line(self, code: types.CodeType, line: int) -> Any:
        rec = self.rec.file_of(code.co_filename)
        if rec is None or line not in rec.starts:
            return sys.monitoring.DISABLE  # type: ignore[attr-defined]
        try:
            self.rec.on_line(rec, line, sys._getframe(1))
        except Exception as exc:
            self._fail(exc)
        return None

    def _raise(self, code: types.CodeType, offset: int, exc: BaseException) -> None:
        rec = self.rec.file_of(code.co_filename)
        if rec is None:
            return
        try:
            line = self._line_of(code, offset)
            if line is not None and line in rec.spans:
                self.rec.on_raise(rec, line, exc)
        except Exception as err:
            self._fail(err)

    def _line_of(self, code: types.CodeType, offset: int) -> Optional[int]:
        table = self._lines.get(id(code))
        if table is None:
            table = self._lines[id(code)] = [t for t in code.co_lines() if t[2] is not None]  # type: ignore[misc]
        for start, end, line in table:
            if start <= offset < end:
                return line
        return None

    def _fail(self, exc: Exception) -> None:
        self.rec.error = f"{type(exc).__name__}: {exc}"
        self.stop()


def backend_for(rec: Recorder) -> "SettraceBackend | MonitoringBackend":
    return MonitoringBackend(rec) if sys.version_info >= (3, 12) else SettraceBackend(rec)
