"""The rule registry: one line per rule; codes are never reused (retired codes stay listed in RETIRED)."""
from __future__ import annotations

from .array_item_assignment import ArrayItemAssignment
from .base import Rule
from .global_mutation import GlobalMutation
from .impure_call import ImpureCall
from .invalid_suppression import InvalidSuppression
from .jit_in_loop import JitInLoop
from .jit_method_self import JitMethodSelf
from .print_in_trace import PrintInTrace
from .prng_key_reuse import PrngKeyReuse
from .stale_global import StaleGlobal
from .traced_bool_index import TracedBoolIndex
from .traced_conversion import TracedConversion
from .traced_if import TracedIf
from .traced_shape import TracedShape
from .traced_while import TracedWhile
from .unused_suppression import UnusedSuppression

RULES: tuple[type[Rule], ...] = (
    TracedIf,
    TracedWhile,
    PrintInTrace,
    GlobalMutation,
    ImpureCall,
    StaleGlobal,
    TracedShape,
    TracedBoolIndex,
    TracedConversion,
    ArrayItemAssignment,
    JitInLoop,
    JitMethodSelf,
    PrngKeyReuse,
    InvalidSuppression,
    UnusedSuppression,
)

# The syntax-error pseudo-rule has no module: the parser reports it.
SYNTAX_ERROR = ("JL901", "syntax-error", "The file does not parse, so it was not checked.")
# CPython compiles the file but libcst rejects it: the file is valid, jaxlint just cannot read it.
UNSUPPORTED_SYNTAX = ("JL902", "unsupported-syntax",
                      "jaxlint's parser could not read the file (CPython can), so it was not checked.")
PSEUDO_RULES = (SYNTAX_ERROR, UNSUPPORTED_SYNTAX)

# Codes that were once assigned and must never be reused: code -> former slug.
RETIRED: dict[str, str] = {}

BY_NAME = {r.name: r for r in RULES}
BY_CODE = {r.code: r for r in RULES}
ALL_CODES = {r.code: r.name for r in RULES} | {code: name for code, name, _ in PSEUDO_RULES}
# What runs when nothing is selected: every rule but the opt-in ones (which `ALL` and prefixes do select).
DEFAULT_CODES = frozenset(c for c in ALL_CODES if not (c in BY_CODE and BY_CODE[c].opt_in))
