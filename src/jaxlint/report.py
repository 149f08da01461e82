"""Printing results: text for people, JSON for tools (SPEC.md)."""
from __future__ import annotations

import json
from collections import Counter
from typing import Callable, Optional

import click

from . import __version__
from .findings import Finding

_MARKS = {"confirmed": ("✓ confirmed", "green"), "unverified": ("? unverified", "yellow"),
          "refuted": ("✗ refuted", "blue")}


def visible(findings: list[Finding], show_refuted: bool) -> list[Finding]:
    """Findings that count: refuted ones are proven false alarms and are hidden unless asked for."""
    return [f for f in findings if show_refuted or f.verification.status != "refuted"]


def summary_counts(findings: list[Finding]) -> dict[str, int]:
    c = Counter(f.verification.status for f in findings)
    return {"confirmed": c["confirmed"], "refuted": c["refuted"], "unverified": c["unverified"]}


def to_json(findings: list[Finding], files: int, seconds: float) -> str:
    counted = [f for f in findings if f.verification.status != "refuted"]
    doc = {
        "version": __version__,
        "findings": [f.to_json() for f in findings],
        "summary": {"files": files, "findings": len(counted), **summary_counts(findings), "seconds": round(seconds, 3)},
    }
    return json.dumps(doc, indent=2, ensure_ascii=False)


def _source_line(path: str, line: int, cache: dict[str, list[str]]) -> Optional[str]:
    if path not in cache:
        try:
            with open(path, "rb") as f:
                cache[path] = f.read().decode("utf-8", errors="replace").splitlines()
        except OSError:
            cache[path] = []
    lines = cache[path]
    return lines[line - 1] if 0 < line <= len(lines) else None


def to_text(findings: list[Finding], files: int, *, verified: bool, style: Callable[..., str] = click.style) -> str:
    out: list[str] = []
    cache: dict[str, list[str]] = {}
    for f in findings:
        head = (
            style(f"{f.path}:{f.line}:{f.column}:", bold=True)
            + " "
            + style(f.code, fg="red", bold=True)
            + f" [{f.name}] {f.message}"
        )
        mark = _MARKS.get(f.verification.status)
        if mark:
            head += " " + style(mark[0], fg=mark[1])
        out.append(head)
        src = _source_line(f.path, f.line, cache)
        if src is not None and src.strip():
            text = src.expandtabs(1) if "\t" in src else src
            end = f.end_column if f.end_line == f.line and f.end_column > f.column else len(text.rstrip()) + 1
            width = max(1, end - f.column)
            out.append("    " + text.rstrip())
            out.append("    " + " " * (f.column - 1) + style("^" * width, fg="red"))
        if f.verification.detail and f.verification.status in ("confirmed", "refuted", "unverified"):
            out.append("    " + style(f"= {f.verification.status}: {f.verification.detail}", dim=True))
    counted = [f for f in findings if f.verification.status != "refuted"]
    if counted:
        nfiles = len({f.path for f in counted})
        line = (f"{len(counted)} finding{'s' if len(counted) != 1 else ''} in {nfiles} file{'s' if nfiles != 1 else ''} "
                f"({files} checked)")
        if verified:
            c = summary_counts(findings)
            line += f": {c['confirmed']} confirmed, {c['unverified']} unverified, {c['refuted']} refuted (hidden)"
    else:
        line = f"No findings ({files} file{'s' if files != 1 else ''} checked)."
    if out:
        out.append("")
    out.append(style(line, bold=True))
    return "\n".join(out)


def statistics(findings: list[Finding]) -> str:
    counts = Counter((f.code, f.name) for f in findings if f.verification.status != "refuted")
    rows = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return "\n".join(f"{n:>5}\t{code}\t{name}" for (code, name), n in rows)

