"""How each rule is verified: the ONE table, slug -> kind of check and the errors that confirm it.

Used by the synthesized verification worker and by the pytest plugin; importing it never imports
JAX (exceptions are matched by the names of their classes). The API:

    CHECKS[slug]            -> Check(kind, errors, phrases, refutable, how)
    NOT_VERIFIABLE[slug]    -> why a rule is never verified by running code
    check_for(slug)         -> the Check, or None for an unknown or not-verifiable slug
    confirms(slug, exc)     -> True when `exc`, raised at the flagged line, proves the finding
    is_jax_error(exc)       -> True when `exc` is a tracing error of any rule (not a bad input)

Kinds (what the verifier does and what the verdicts mean):

- ``raises``: trace the function; `exc` at the flagged line with `confirms(slug, exc)` -> confirmed;
  the flagged line ran while tracing and nothing was raised -> refuted (the value was concrete).
- ``trace-time``: a side effect (print, mutation, impure call) happens while tracing and not on a
  second call with inputs of the same shapes -> confirmed; it happens on every call -> refuted.
- ``stale``: call, rebind the module-level name, call again: the old result -> confirmed.
- ``method-self``: trace the method on an instance: `confirms(slug, exc)` on `self` -> confirmed.
- ``jit-in-loop``: evaluate the jit expression twice as the loop would: a second trace -> confirmed.
- ``key-reuse``: run with `jax_debug_key_reuse`: `KeyReuseError` -> confirmed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

RAISES = "raises"
TRACE_TIME = "trace-time"
STALE = "stale"
METHOD_SELF = "method-self"
JIT_IN_LOOP = "jit-in-loop"
KEY_REUSE = "key-reuse"
KINDS = (RAISES, TRACE_TIME, STALE, METHOD_SELF, JIT_IN_LOOP, KEY_REUSE)

# JAX's errors for a value that is abstract where Python needs a concrete one.
_CONCRETIZATION = ("ConcretizationTypeError", "TracerBoolConversionError", "TracerIntegerConversionError",
                   "TracerArrayConversionError")


@dataclass(frozen=True)
class Check:
    """How one rule is verified."""

    kind: str
    # Exception class names (any class in the raised exception's MRO) that confirm the finding.
    errors: tuple[str, ...] = ()
    # Or: a TypeError/IndexError/ValueError whose message contains one of these phrases.
    phrases: tuple[str, ...] = ()
    # For `raises`: the flagged line running under a trace without an error refutes the finding.
    refutable: bool = False
    how: str = ""


CHECKS: dict[str, Check] = {
    "traced-if": Check(RAISES, ("ConcretizationTypeError", "TracerBoolConversionError"), refutable=True,
                       how="tracing raises TracerBoolConversionError at the line"),
    "traced-while": Check(RAISES, ("ConcretizationTypeError", "TracerBoolConversionError"), refutable=True,
                          how="tracing raises TracerBoolConversionError at the line"),
    "traced-shape": Check(RAISES, _CONCRETIZATION,
                          ("concrete", "static", "Shapes must be", "must have __hash__",
                           "Non-hashable static arguments"), refutable=True,
                          how="tracing raises a concretization or shape error at the line"),
    "traced-bool-index": Check(RAISES, ("NonConcreteBooleanIndexError",) + _CONCRETIZATION, refutable=True,
                               how="tracing raises NonConcreteBooleanIndexError at the line"),
    "traced-conversion": Check(RAISES, _CONCRETIZATION, refutable=True,
                               how="tracing raises a concretization or conversion error at the line"),
    "array-item-assignment": Check(RAISES, (), ("immutable", "does not support item assignment"),
                                   refutable=True, how="running the line raises JAX's immutability TypeError"),
    "print-in-trace": Check(TRACE_TIME, how="prints while tracing, not on a second call"),
    "global-mutation": Check(TRACE_TIME, how="the state changes while tracing, not on a second call"),
    "impure-call": Check(TRACE_TIME, how="the call runs while tracing, not on a second call"),
    "stale-global": Check(STALE, how="after rebinding the global, the cached result is the old one"),
    "jit-method-self": Check(METHOD_SELF, (), ("valid JAX type", "as an abstract array", "not a valid JAX type"),
                             how="tracing the method raises TypeError on `self`"),
    "jit-in-loop": Check(JIT_IN_LOOP, how="the second pass of the loop traces the callable anew"),
    "prng-key-reuse": Check(KEY_REUSE, ("KeyReuseError",), how="jax_debug_key_reuse raises KeyReuseError"),
}

NOT_VERIFIABLE: dict[str, str] = {
    "syntax-error": "the file does not parse: there is no code to run",
    "unsupported-syntax": "jaxlint's parser could not read the file: there is no finding in code to run",
    "invalid-suppression": "the finding is about a suppression comment, not about code JAX runs",
    "unused-suppression": "the finding is about a suppression comment, not about code JAX runs",
}


def check_for(slug: str) -> Optional[Check]:
    """The check of a rule, or None when the rule is unknown or never verified by running code."""
    return CHECKS.get(slug)


def _class_names(exc: BaseException) -> set[str]:
    return {c.__name__ for c in type(exc).__mro__}


def confirms(slug: str, exc: BaseException) -> bool:
    """True when `exc`, raised at the flagged line (or, for key reuse, anywhere), proves the finding."""
    check = CHECKS.get(slug)
    if check is None:
        return False
    if check.errors and _class_names(exc) & set(check.errors):
        return True
    # (ValueError: a tracer reaching a static argument of JAX's own jitted functions, `jnp.argpartition`'s
    # `kth`, raises "Non-hashable static arguments are not supported")
    if check.phrases and isinstance(exc, (TypeError, IndexError, ValueError)):
        text = str(exc)
        return any(p in text for p in check.phrases)
    return False


def is_jax_error(exc: BaseException) -> bool:
    """A tracing error of some rule: the inputs were good enough to reach a hazard (do not retry others)."""
    return any(confirms(slug, exc) for slug, check in CHECKS.items() if check.kind in (RAISES, KEY_REUSE)) \
        or "JAXTypeError" in _class_names(exc)
