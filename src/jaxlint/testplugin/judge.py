"""From what the tests showed at each flagged line to a verdict with its evidence (or none)."""
from __future__ import annotations

import os
from typing import Optional

from ..findings import Verification
from ..verify import checks
from .watch import Recorder, Watch, kind_of, named_transform, transform_kind

# Rules whose hazard needs no trace (JAX arrays are immutable everywhere): any run without the error refutes.
_ANYWHERE = frozenset({"array-item-assignment"})


def _times(n: int) -> str:
    return f"{n} time{'s' if n != 1 else ''}"


def _where(tests: list[str]) -> str:
    if not tests:
        return ""
    more = f" and {len(tests) - 1} more test{'s' if len(tests) > 2 else ''}" if len(tests) > 1 else ""
    return f" in {tests[0]}{more}"


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def judge(w: Watch, rec: Recorder) -> Optional[Verification]:
    """The verdict the tests support for one finding; None when they showed nothing decisive."""
    f = w.finding
    slug = f.name
    kind = kind_of(slug)
    line = f.line
    traced = sum(w.traced_runs.values())
    if kind in (checks.RAISES, checks.KEY_REUSE) and w.raised is not None:
        exc, test = w.raised
        return Verification("confirmed", f"{exc} at line {line}" + (f" in {test}" if test else ""))
    if kind == checks.KEY_REUSE:
        return _key_reuse(w)
    if kind == checks.RAISES and checks.CHECKS[slug].refutable:
        if slug in _ANYWHERE:
            runs = traced + w.eager_runs
            if runs and not w.failed_runs:
                return Verification("refuted", f"line {line} ran {_times(runs)} without an error: the object "
                                    f"assigned into was not a JAX array{_where(w.tests)}")
            return None
        transform = named_transform(f)
        need = transform_kind(transform)
        through = sum(n for kinds, n in w.traced_runs.items() if need is None or need in kinds)
        if traced and not w.failed_traced_runs and through:
            via = f" ({through} through `{transform}`)" if transform else ""
            return Verification("refuted", f"line {line} ran {_times(traced)} under a JAX trace{via} without an "
                                f"error: the value was concrete there{_where(w.tests)}")
        return None
    if kind == checks.TRACE_TIME and traced:
        detail = f"line {line} ran {_times(traced)} while JAX traced it{_where(w.tests)}"
        key = (os.path.realpath(f.path), w.root or "")
        counts = rec.entries.get(key)
        if counts is not None and w.root:
            detail += (f"; `{w.root}` ran its Python body {_times(counts[0])} under a trace and "
                       f"{_times(counts[1])} without one")
            calls = rec.calls.get(key, 0) if rec.calls is not None else None
            if calls is None:
                detail += " (calls answered by JAX's cache run no Python, and only Python 3.12 or later counts them)"
            elif not calls:
                # Traced, but never through a `jax.jit` wrapper seen at a call site: an `eqx.filter_jit`,
                # a Flax lifted transform, or a call from a generic call site that was switched off.
                detail += " (its calls were not made through a `jax.jit` wrapper jaxlint counts)"
            elif calls >= counts[0]:
                detail += (f"; its `jax.jit` wrapper was called {_times(calls)} outside any trace, "
                           f"{calls - counts[0]} of them answered by JAX's cache without running Python")
            else:
                detail += f"; its `jax.jit` wrapper was called {_times(calls)} outside any trace"
        return Verification("confirmed", detail)
    if kind == checks.JIT_IN_LOOP and w.retraced is not None:
        passes, traced_passes, test = w.retraced
        return Verification("confirmed", f"the jit at line {line} ran {passes} times in one call"
                            f"{' in ' + test if test else ''} and JAX traced its callable anew on {traced_passes} "
                            "of those passes")
    if kind == checks.STALE and w.rebound is not None and w.first_trace is not None:
        old, new, test = w.rebound
        first = w.first_trace[2]
        return Verification("confirmed", f"`{w.text}` was {_short(old)} when line {line} was first traced"
                            f"{' in ' + first if first else ''} and {_short(new)} after "
                            f"{test or 'the tests'}; code traced before the change keeps the first value")
    return None


def _key_reuse(w: Watch) -> Optional[Verification]:
    line = w.finding.line
    if w.key_reused is not None:
        where = f" in {w.key_reused}" if w.key_reused else ""
        if w.first_use > 0:
            return Verification("confirmed", f"`{w.key}` reached line {line} holding the key data that line "
                                f"{w.first_use} had already consumed{where}: both draw the same numbers")
        return Verification("confirmed", f"`{w.key}` held the same key data on two runs of line {line}{where}: "
                            "each run draws the same numbers")
    if w.key_fresh:
        after = f"line {w.first_use} or " if w.first_use > 0 else ""
        return Verification("refuted", f"`{w.key}` held new key data each of the {_times(w.key_fresh)} line {line} "
                            f"ran after {after}an earlier run had consumed a key{_where(w.tests)}")
    return None
