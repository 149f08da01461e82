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


def to_text(findings: list[Finding], files: int, *, verified: bool, style: Callable[..., str] = click.style,
            show_links: bool = False) -> str:
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
            text = (src.expandtabs(1) if "\t" in src else src).rstrip()
            if f.end_line != f.line:
                end = len(text) + 1
            else:
                end = max(f.end_column, f.column + 1)
            start = f.column - 1
            # Keep very long lines readable: a window around the flagged span.
            offset = max(0, start - 40) if len(text) > 160 else 0
            shown = text[offset:offset + 160]
            width = max(1, min(end - 1, offset + 160) - start)
            out.append("    " + shown)
            out.append("    " + " " * (start - offset) + style("^" * width, fg="red"))
        if f.verification.detail and f.verification.status in ("confirmed", "refuted", "unverified"):
            by = " (from tests)" if f.verification.source == "tests" else ""
            out.append("    " + style(f"= {f.verification.status}{by}: {f.verification.detail}", dim=True))
        if show_links:
            url = help_url(f.code)
            out.append("    " + style(f"= help: {url or 'jaxlint rule ' + f.name}", dim=True))
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



def help_url(code: str) -> str:
    """The JAX documentation page a rule's docs point to first ('' for none)."""
    from .rules import BY_CODE

    rule = BY_CODE.get(code)
    return _doc_parts(rule)[1] if rule is not None else ""


def _doc_parts(rule: type) -> tuple[str, str, str]:
    """(full description, first reference URL, markdown help) of a rule class."""
    import inspect
    import re

    doc = inspect.cleandoc(rule.__doc__ or "")
    what = doc.split("## What it does", 1)[-1].split("##", 1)[0].strip().replace("\n", " ")
    refs = re.findall(r"https?://\S+", doc.split("## References", 1)[-1])
    return what, (refs[0] if refs else ""), doc


def to_sarif(findings: list[Finding], root: str) -> str:
    """SARIF 2.1.0: rule metadata, relative URIs against %SRCROOT%, verification status in properties."""
    import os
    from pathlib import Path

    from .rules import RULES, SYNTAX_ERROR

    rules_meta = []
    index: dict[str, int] = {}
    for rule in RULES:
        full, url, doc = _doc_parts(rule)
        meta = {
            "id": rule.code,
            "name": rule.name,
            "shortDescription": {"text": rule.summary},
            "fullDescription": {"text": full},
            "help": {"text": full, "markdown": doc},
            "defaultConfiguration": {"level": "error"},
            "properties": {"tags": ["jax"]},
        }
        if url:
            meta["helpUri"] = url
        index[rule.code] = len(rules_meta)
        rules_meta.append(meta)
    index[SYNTAX_ERROR[0]] = len(rules_meta)
    rules_meta.append({
        "id": SYNTAX_ERROR[0], "name": SYNTAX_ERROR[1], "shortDescription": {"text": SYNTAX_ERROR[2]},
        "fullDescription": {"text": SYNTAX_ERROR[2]}, "defaultConfiguration": {"level": "error"},
    })
    root_abs = os.path.abspath(root)
    results = []
    for f in findings:
        rel = os.path.relpath(os.path.abspath(f.path), root_abs)
        uri = Path(rel).as_posix() if not rel.startswith("..") else Path(os.path.abspath(f.path)).as_uri()
        location: dict = {"artifactLocation": {"uri": uri}}
        if not uri.startswith("file:"):
            location["artifactLocation"]["uriBaseId"] = "%SRCROOT%"
        location["region"] = {"startLine": f.line, "startColumn": f.column, "endLine": f.end_line,
                              "endColumn": f.end_column}
        status = f.verification.status
        results.append({
            "ruleId": f.code,
            "ruleIndex": index.get(f.code, 0),
            "level": {"refuted": "note", "unverified": "warning"}.get(status, "error"),
            "message": {"text": f.message},
            "locations": [{"physicalLocation": location}],
            "properties": {"name": f.name, "function": f.function, "verification": f.verification.to_json()},
        })
    doc = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "jaxlint", "version": __version__, "semanticVersion": __version__,
                                "rules": rules_meta}},
            "originalUriBaseIds": {"%SRCROOT%": {"uri": Path(root_abs).as_uri() + "/"}},
            "results": results,
        }],
    }
    return json.dumps(doc, indent=2, ensure_ascii=False)


def _gh_escape(text: str, prop: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if prop:
        text = text.replace(":", "%3A").replace(",", "%2C")
    return text


def to_github(findings: list[Finding]) -> str:
    """GitHub Actions workflow commands: one `::error` annotation per finding."""
    lines = []
    for f in findings:
        props = [f"file={_gh_escape(f.path, True)}", f"line={f.line}"]
        if f.end_line == f.line:
            props += [f"col={f.column}", f"endLine={f.end_line}", f"endColumn={f.end_column}"]
        else:
            props += [f"endLine={f.end_line}"]
        props.append(f"title={_gh_escape(f'jaxlint ({f.code})', True)}")
        level = "warning" if f.verification.status == "unverified" else "error"
        lines.append(f"::{level} {','.join(props)}::{_gh_escape(f'[{f.name}] {f.message}')}")
    return "\n".join(lines)
