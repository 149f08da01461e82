"""Rule selection: comma lists of codes (`JL101`), prefixes (`JL1`) or slugs (`traced-if`)."""
from __future__ import annotations

from typing import Iterable

from .rules import ALL_CODES


class SelectionError(ValueError):
    """A selector names no rule."""


def expand(selectors: Iterable[str], *, option: str = "--select") -> set[str]:
    """Codes matched by the selectors; raises SelectionError naming a selector that matches nothing."""
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
            raise SelectionError(f"{option}: `{sel}` is not a jaxlint rule code, prefix or name (see `jaxlint rule --all`).")
        out.update(hits)
    return out


def split(value: str | Iterable[str] | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [v for v in (p.strip() for p in value.split(",")) if v]
    return [v.strip() for v in value if v.strip()]
