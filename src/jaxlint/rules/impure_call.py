"""impure-call: clocks, Python/NumPy randomness, input, files and network inside traced code."""
from __future__ import annotations

import libcst as cst

from ..jaxapi import CLOCKS, IMPURE_CALLS, IMPURE_PREFIXES
from ..syntax import _is_const
from .print_in_trace import announces_tracing
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
    keep; the draws after it are flagged, not the seeding. A generator of its own made with a seed
    (`np.random.RandomState(seed)`, `np.random.default_rng(0)`) draws what its seed fixes, so it is not
    flagged (without a seed, it is). A clock read into a local that only code never
    running traced reads (`if verbose: log(t1 - t0)` with every traced caller leaving `verbose` off) bakes
    nothing in and is not flagged, nor is one only printed by a function that announces its compilation
    (`print(f"compiling {f.__name__}")`, then the seconds it took): it times the compilation on purpose.
    A draw bound to a local that nothing reads (`mask = np.random.binomial(...)` left behind after a move to
    `jax.random`; a nested def's parameter of the same name is another variable) bakes in a constant
    nothing uses and is not flagged.
    A fresh identifier turned into a string (`str(uuid.uuid4())`, `uuid.uuid4().hex`) names the trace's
    own Python objects (a graph node, a scope) and never becomes array data: it is not flagged.
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

    def visit_Attribute(self, node: cst.Attribute, where: Where) -> None:
        if node.attr.value in ("hex", "urn") and isinstance(node.value, cst.Call):
            self.__dict__.setdefault("_names", set()).add(id(node.value))  # `uuid4().hex`: a name

    def visit_Call(self, node: cst.Call, where: Where) -> None:
        fn = where.traced
        if fn is None or not fn.cached:
            return
        qual = where.resolve(node.func)
        if qual is None:
            return
        if qual == "builtins.str" and len(node.args) == 1 and isinstance(node.args[0].value, cst.Call):
            self.__dict__.setdefault("_names", set()).add(id(node.args[0].value))  # `str(uuid4())`: a name
        if qual in _IDENTIFIERS and id(node) in self.__dict__.get("_names", ()):
            return  # a fresh identifier for the trace's own Python objects (a graph node, a scope): no data
        if qual in _SEEDING:
            return  # it returns nothing to bake in: the draws after it (flagged themselves) do
        if qual in _GENERATORS and node.args and not (node.args[0].keyword is None and _is_const(node.args[0].value, "None")):
            return  # `np.random.RandomState(seed)`: a generator of its own, as deterministic as its seed
        if qual in IMPURE_CALLS or qual.startswith(IMPURE_PREFIXES):
            if where.model.unread_traced(node, fn, printed=qual in CLOCKS and announces_tracing(fn.node)):
                # `t0 = time.perf_counter()` read only by logging that never runs traced, or only printed by a
                # function announcing that it is being compiled (it times the compilation on purpose); a
                # draw bound to a name nothing reads: no constant baked in is ever used
                return
            shown = qual.replace("builtins.", "").replace("numpy.", "np.")
            self._flag(node, f"`{shown}()`", where, qual)



# Calls that make a fresh identifier: made into a string, it names Python objects, never array data.
_IDENTIFIERS = frozenset({"uuid.uuid1", "uuid.uuid4"})

# Calls that set the state of a host random generator and return nothing.
_SEEDING = frozenset({"numpy.random.seed", "random.seed"})

# Constructors of a generator of its own: given a seed, what it draws is fixed by that seed, so baking
# it into the compiled code changes nothing.
_GENERATORS = frozenset({"numpy.random.RandomState", "numpy.random.default_rng", "numpy.random.Generator",
                         "numpy.random.PCG64", "numpy.random.MT19937", "numpy.random.Philox", "numpy.random.SFC64",
                         "numpy.random.SeedSequence", "random.Random"})
