"""Suppression comments on a flagged line: `# noqa`, `# noqa: JL101,JL201`, `# jaxlint: ignore[traced-if]`."""
from __future__ import annotations

import re

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Za-z0-9_, \t-]+))?", re.IGNORECASE)
_IGNORE = re.compile(r"#\s*jaxlint:\s*ignore(?:\[(?P<names>[^\]]*)\])?")


def is_suppressed(line_text: str, code: str, name: str) -> bool:
    if "#" not in line_text:
        return False
    m = _IGNORE.search(line_text)
    if m:
        names = m.group("names")
        if names is None:
            return True
        wanted = {n.strip() for n in names.split(",") if n.strip()}
        if name in wanted or code in wanted:
            return True
    for m in _NOQA.finditer(line_text):
        codes = m.group("codes")
        if codes is None:
            return True
        wanted = {c.strip().upper() for c in re.split(r"[,\s]+", codes) if c.strip()}
        if code.upper() in wanted:
            return True
    return False
