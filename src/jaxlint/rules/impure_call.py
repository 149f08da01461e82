"""impure-call: clocks, Python/NumPy randomness, input, files and network inside traced code."""
from __future__ import annotations

from typing import Optional

import libcst as cst

from ..jaxapi import IMPURE_CALLS, IMPURE_PREFIXES
from ..syntax import descendants
from .base import Rule, Where, tracing_phrase


class ImpureCall(Rule):
    """
    ## What it does
    Flags calls whose result depends on the outside world — `time.time()`, `time.perf_counter()`,
    Python's `random`, `np.random`, `datetime.now()`, `input()`, `open()`, network calls — inside
    jitted code (`jax.jit`, `pmap`, `eqx.filter_jit`, `lax` bodies).

    ## Why is this bad?
    They run once, while JAX traces the function; the compiled program holds their result as a
    constant. Later calls get the same "random" number, the same timestamp, the same file contents.

    ## Example
    ```python
    import jax
    import numpy as np

    @jax.jit
    def add_noise(x):
        return x + np.random.normal()
    ```

    ## Use instead
    ```python
    import jax

    @jax.jit
    def add_noise(x, key):
        return x + jax.random.normal(key)
    ```
    Pass randomness as a `jax.random` key, and read clocks, files and settings outside the jitted
    function (or in a `jax.debug.callback`).

    ## How it is verified
    The call runs during tracing and not again on a second call with inputs of the same shapes.

    ## Known limitations
    Under `vmap` or `grad` alone the function runs on every call, so these calls are not flagged there.
    Seeding the host generator (`np.random.seed(0)`, `random.seed(0)`) returns nothing the trace could
    keep; the draws after it are flagged, not the seeding. A value that only reaches printed or logged
    messages (`start = time.time()` read only by `print(f"traced in {time.time() - start} s")`), or that
    nothing reads, never enters the compiled program and is not flagged.
    Settings read from the environment (`os.environ`, `os.getenv`) are not flagged: they are fixed for
    the process by convention, and code reads them while tracing on purpose (a kernel's interpret mode,
    a debug switch); a setting changed between two calls of a compiled function would go unnoticed.

    ## References
    - https://docs.jax.dev/en/latest/random-numbers.html
    - https://docs.jax.dev/en/latest/notebooks/Common_Gotchas_in_JAX.html#pure-functions
    """

    code = "JL203"
    name = "impure-call"
    summary = "impure call baked into a trace"

    def _flag(self, node: cst.CSTNode, what: str, where: Where, callee: str) -> None:
        fn = where.traced
        assert fn is not None
        self.report(
            node,
            f"{what} runs once while JAX traces {tracing_phrase(fn)[3:]}, and its result is baked into the compiled "
            "code as a constant; pass the value in as an argument (use `jax.random` with a key for randomness).",
            where,
            subject={"callee": callee},
        )

    def visit_Call(self, node: cst.Call, where: Where) -> None:
        fn = where.traced
        if fn is None or not fn.cached:
            return
        qual = where.resolve(node.func)
        if qual is None:
            return
        if qual in _SEEDING:
            return  # it returns nothing to bake in: the draws after it (flagged themselves) do
        if qual in IMPURE_CALLS or qual.startswith(IMPURE_PREFIXES):
            if _only_shown(node, fn, where):
                return  # `st = time.time()` read only by `print(f"took {time.time() - st}")`: nothing is compiled in
            shown = qual.replace("builtins.", "").replace("numpy.", "np.")
            self._flag(node, f"`{shown}()`", where, qual)



def _only_shown(call: cst.Call, fn, where: Where) -> bool:
    """Whether a call's result only reaches printed or logged messages: it is an argument of `print`
    (or a logger's method), or bound to a name the function reads only there (`st = time.time()`, later
    `print(f"... {time.time() - st} s")`). Such a value is shown while tracing and never enters the
    compiled program."""
    node = fn.node
    if node is None:
        return False
    shown: set[int] = set()  # ids of the nodes inside the arguments of a print or a log call
    target: Optional[str] = None
    for n in descendants(node):
        if isinstance(n, cst.Call) and _is_message(n, where):
            shown.update(id(d) for a in n.args for d in descendants(a.value))
        elif isinstance(n, cst.Assign) and n.value is call and len(n.targets) == 1 \
                and isinstance(n.targets[0].target, cst.Name):
            target = n.targets[0].target.value
    if id(call) in shown:
        return True
    if target is None:
        return False
    binding = 0
    for n in descendants(node):
        if isinstance(n, cst.Name) and n.value == target:
            if id(n) in shown:
                continue
            binding += 1  # (the one binding is allowed; any other read is a use)
            if binding > 1:
                return False
    return binding == 1


def _is_message(call: cst.Call, where: Where) -> bool:
    q = where.resolve(call.func) or ""
    if q == "builtins.print" or q.startswith("logging."):
        return True
    return isinstance(call.func, cst.Attribute) and call.func.attr.value in _LOG_METHODS \
        and isinstance(call.func.value, cst.Name) and call.func.value.value in ("logger", "log", "logging", "LOGGER")


_LOG_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "critical", "exception", "log"})


# Calls that set the state of a host random generator and return nothing.
_SEEDING = frozenset({"numpy.random.seed", "random.seed"})
