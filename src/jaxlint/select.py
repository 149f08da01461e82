"""Rule selection: comma lists of codes (`JL101`), prefixes (`JL1`) or slugs (`traced-if`)."""
from __future__ import annotations

from typing import Iterable

from .rules import ALL_CODES
from .suppress import suggest


class SelectionError(ValueError):
    """A selector names no rule."""


def expand(selectors: Iterable[str], *, option: str = "--select") -> set[str]:
    """Codes matched by the selectors; raises SelectionError naming a selector that matches nothing.

    `ALL` and prefixes select opt-in rules too (as Ruff's `ALL` does); only the default leaves them out.
    """
    out: set[str] = set()
    for raw in selectors:
        sel = raw.strip()
        if not sel:
            continue
        if sel.upper() == "ALL":
            out.update(ALL_CODES)
            continue
        hits = {c for c, n in ALL_CODES.items() if n == sel or c.upper().startswith(sel.upper())}
        if not hits:
            close = suggest(sel, [*ALL_CODES.values(), *ALL_CODES])
            hint = f"; did you mean `{close}`?" if close else " (see `jaxlint rule --all`)."
            raise SelectionError(f"{option}: `{sel}` is not a jaxlint rule code, prefix or name{hint}")
        out.update(hits)
    return out


def split(value: str | Iterable[str] | None) -> list[str]:
    """Selectors from a comma list, or from several (repeated options accumulate)."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    return [v for part in value for v in (p.strip() for p in part.split(",")) if v]
