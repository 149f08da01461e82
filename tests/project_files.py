"""Writing small project files for tests that run jaxlint on a temporary folder."""
from __future__ import annotations

from pathlib import Path


def write(tmp: Path, name: str, text: str) -> Path:
    """Write `text` to `tmp/name` (creating folders) and return the path."""
    p = tmp / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")
    return p
