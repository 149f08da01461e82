"""The records that form jaxlint's output contract (docs/contract.md); a leaf module that imports nothing of jaxlint."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

STATUSES = ("confirmed", "refuted", "unverified", "not-run")


@dataclass
class Verification:
    status: str = "not-run"
    detail: str = ""
    # Where the verdict came from: "tests" (observed by `pytest --jaxlint`), "synthesized" (traced by
    # the verification worker with inputs it built), or None (no verdict was attempted).
    source: Optional[str] = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status, "detail": self.detail}
        if self.source is not None:  # an addition to docs/contract.md's fields, present only with a verdict
            out["source"] = self.source
        return out


@dataclass
class Fix:
    description: str
    applicable: str  # "safe" | "unsafe"

    def to_json(self) -> dict[str, Any]:
        return {"description": self.description, "applicable": self.applicable}


@dataclass(frozen=True)
class TraceTarget:
    """How JAX traces a function, as written in the source: what the verifier needs to re-trace it.

    ``qualname`` is dotted through classes and functions (``Model.step``, ``outer.body``);
    ``transform`` is the JAX entry point (``jit``, ``vmap``, ``grad``, ``scan``, ``fori_loop`` …)
    or ``helper`` for a function reached only by a call from traced code, in which case
    ``via`` names the traced caller chain, outermost first.
    """

    qualname: str
    def_line: int
    transform: str
    static_argnums: tuple[int, ...] = ()
    static_argnames: tuple[str, ...] = ()
    via: tuple[str, ...] = ()
    # For helpers and bodies reached from another traced function: how that outermost function is traced.
    root: Optional["TraceTarget"] = None

    def to_json(self) -> dict[str, Any]:
        return {
            "qualname": self.qualname,
            "def_line": self.def_line,
            "transform": self.transform,
            "static_argnums": list(self.static_argnums),
            "static_argnames": list(self.static_argnames),
            "via": list(self.via),
            "root": self.root.to_json() if self.root is not None else None,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "TraceTarget":
        return cls(d["qualname"], d["def_line"], d["transform"], tuple(d["static_argnums"]),
                   tuple(d["static_argnames"]), tuple(d["via"]),
                   cls.from_json(d["root"]) if d.get("root") else None)


@dataclass
class Finding:
    path: str
    line: int
    column: int
    end_line: int
    end_column: int
    code: str
    name: str
    message: str
    function: Optional[str] = None
    verification: Verification = field(default_factory=Verification)
    fix: Optional[Fix] = None
    # Not part of the JSON contract: what the verifier needs, and the autofix edit (see edits.py).
    target: Optional[TraceTarget] = None
    edit: Optional[Any] = field(default=None, repr=False, compare=False)
    # In a notebook: the cell (counted from 1, every cell counts), and `line`/`end_line` count within it.
    # For a notebook, `target.def_line` is a line of the joined cells, the module the verifier loads.
    cell: Optional[int] = None
    # Not part of the JSON contract either: what the static pass knew about the flagged code, so the
    # verifier need not re-find it by line (the mutated name, the jitted expression, the reused key).
    # Keys by rule: see `rules/base.py` (`Report.subject`); lines in it count in the analysed module text.
    subject: Optional[dict[str, Any]] = field(default=None, compare=False)

    def sort_key(self) -> tuple[str, int, int, int, str]:
        return (self.path, self.cell or 0, self.line, self.column, self.code)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            **({"cell": self.cell} if self.cell is not None else {}),
            "line": self.line,
            "column": self.column,
            "end_line": self.end_line,
            "end_column": self.end_column,
            "code": self.code,
            "name": self.name,
            "message": self.message,
            "function": self.function,
            "verification": self.verification.to_json(),
            "fix": self.fix.to_json() if self.fix else None,
        }
