"""How the test plugin judges each rule from what it observed (slug -> kind of evidence).

TO MOVE: this table belongs in `jaxlint.verify.checks`, the one table of how each rule is verified,
shared by the synthesized worker and this plugin. Until that module exists, this is the only copy
the plugin uses; nothing else in the plugin tests a slug.
"""
from __future__ import annotations

from typing import Optional

# The flagged line raised one of these (by class name, anywhere in the exception's MRO): confirmed.
_CONCRETIZATION = ("ConcretizationTypeError", "TracerBoolConversionError", "TracerIntegerConversionError",
                   "TracerArrayConversionError")
RAISES: dict[str, tuple[str, ...]] = {
    "traced-if": ("ConcretizationTypeError", "TracerBoolConversionError"),
    "traced-while": ("ConcretizationTypeError", "TracerBoolConversionError"),
    "traced-shape": _CONCRETIZATION,
    "traced-bool-index": ("NonConcreteBooleanIndexError",) + _CONCRETIZATION,
    "traced-conversion": _CONCRETIZATION,
    "array-item-assignment": (),  # a plain TypeError, recognised by its message below
    "prng-key-reuse": ("KeyReuseError",),
}
# Message fragments of the plain TypeError/IndexError JAX raises for these rules.
_MESSAGES: dict[str, tuple[str, ...]] = {
    "traced-shape": ("concrete", "static", "Shapes must be", "must have __hash__"),
    "array-item-assignment": ("immutable",),
}

# Ran under a trace without raising: the value was concrete there, so the finding is a false alarm
# (only when every traced run was concrete and one came through the transform the finding names).
REFUTED_WHEN_CONCRETE = frozenset({"traced-if", "traced-while", "traced-shape", "traced-bool-index",
                                   "traced-conversion"})
# Ran while a trace was active: the side effect happened at trace time.
TRACE_TIME = frozenset({"print-in-trace", "global-mutation", "impure-call"})
# The same jit site traced again on a later pass of its loop, in one call of the enclosing function.
RETRACED = frozenset({"jit-in-loop"})
# The module-level name read at the flagged line was rebound after the first trace.
STALE = frozenset({"stale-global"})
# The same key data reached the flagged consumer again (after the earlier consumer the rule names, or on
# a later pass of its loop): confirmed; new key data every time after a consumption: refuted.
KEY_DATA = frozenset({"prng-key-reuse"})
# Rules the plugin cannot judge from a test run, and why (reported as "no verdict").
NOT_BY_TESTS: dict[str, str] = {
    "jit-method-self": "the hazard shows at the call, not at the flagged decorator line",
    "syntax-error": "a file that does not parse never runs",
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
# JAX's trace classes (jax 0.4.36+ "stackless" core) and the kind each stands for.
KIND_OF_TRACE: dict[str, str] = {"DynamicJaxprTrace": ABSTRACT, "BatchTrace": BATCH, "JVPTrace": JVP,
                                 "LinearizeTrace": JVP}


def transform_kind(transform: Optional[str]) -> Optional[str]:
    """The trace kind a named transform runs the function under (None: unknown, any trace will do)."""
    return _KIND_OF_TRANSFORM.get(transform or "")


def expected_error(slug: str, exc: BaseException) -> bool:
    """Whether `exc`, raised at a flagged line, is the JAX error the rule `slug` predicts."""
    names = {c.__name__ for c in type(exc).__mro__}
    if names & set(RAISES.get(slug, ())):
        return True
    fragments = _MESSAGES.get(slug, ())
    if fragments and isinstance(exc, (TypeError, IndexError)):
        text = str(exc)
        return any(f in text for f in fragments)
    return False
