"""Printing results: text for people, JSON for tools (docs/contract.md)."""
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


def _read(path: str, sources: Optional[dict[str, bytes]]) -> bytes:
    if sources and path in sources:
        return sources[path]
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def _source_line(path: str, line: int, cache: dict, cell: Optional[int] = None,
                 sources: Optional[dict[str, bytes]] = None) -> Optional[str]:
    if path not in cache:
        data = _read(path, sources)
        if cell is not None:
            from .notebook import source_lines

            cache[path] = {n: lines for n, (lines, _) in source_lines(data).items()}
        else:
            cache[path] = data.decode("utf-8", errors="replace").splitlines()
    entry = cache[path]
    lines = entry.get(cell, []) if isinstance(entry, dict) else entry
    return lines[line - 1] if 0 < line <= len(lines) else None


def _where(f: Finding) -> str:
    """`path:line:col`, or `path:cell N:line:col` in a notebook."""
    return f"{f.path}:cell {f.cell}:{f.line}:{f.column}" if f.cell is not None else f"{f.path}:{f.line}:{f.column}"


def _notebook_place(f: Finding, cache: dict, sources: Optional[dict[str, bytes]]) -> tuple[int, str]:
    """For formats that know only files and lines: the notebook file's line storing the finding's cell
    line, and words naming the cell for the message."""
    if f.path not in cache:
        from .notebook import source_lines

        cache[f.path] = source_lines(_read(f.path, sources))
    lines = cache[f.path].get(f.cell, ([], []))[1]
    at = lines[f.line - 1] if 0 < f.line <= len(lines) else 1
    return at, f"cell {f.cell}, line {f.line}, column {f.column}"


def fixable(f: Finding, unsafe_fixes: bool = False) -> bool:
    """Whether `--fix` (with `--unsafe-fixes` when given) would fix the finding."""
    return f.fix is not None and (unsafe_fixes or f.fix.applicable == "safe")


def fix_summary(findings: list[Finding], unsafe_fixes: bool) -> str:
    """Ruff's closing hint: how many findings `--fix` would fix, and how many more with `--unsafe-fixes`."""
    safe = sum(1 for f in findings if fixable(f, unsafe_fixes))
    more = 0 if unsafe_fixes else sum(1 for f in findings if f.fix is not None and f.fix.applicable != "safe")
    flags = "`--fix --unsafe-fixes`" if unsafe_fixes else "`--fix`"
    if safe and more:
        return f"[*] {safe} fixable with {flags} ({more} more with `--fix --unsafe-fixes`)."
    if safe:
        return f"[*] {safe} fixable with {flags}."
    if more:
        return f"{more} fixable with `--fix --unsafe-fixes`."
    return ""


def to_text(findings: list[Finding], files: int, *, verified: bool, style: Callable[..., str] = click.style,
            show_links: bool = False, show_fixes: bool = False, unsafe_fixes: bool = False,
            quiet: bool = False, sources: Optional[dict[str, bytes]] = None) -> str:
    """Findings with their source line and a caret; `quiet` leaves out the closing summary."""
    out: list[str] = []
    cache: dict = {}
    for f in findings:
        head = (
            style(f"{_where(f)}:", bold=True)
            + " "
            + style(f.code, fg="red", bold=True)
            + (" " + style("[*]", fg="cyan") if fixable(f, unsafe_fixes) else "")
            + f" [{f.name}] {f.message}"
        )
        mark = _MARKS.get(f.verification.status)
        if mark:
            head += " " + style(mark[0], fg=mark[1])
        out.append(head)
        src = _source_line(f.path, f.line, cache, f.cell, sources)
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
        if show_fixes and f.fix is not None:
            out.append("    " + style(f"= fix ({f.fix.applicable}): {f.fix.description}", fg="cyan"))
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
    if quiet:
        return "\n".join(out)
    if out:
        out.append("")
    out.append(style(line, bold=True))
    hint = fix_summary(counted, unsafe_fixes)
    if hint:
        out.append(hint)
    return "\n".join(out)


def statistics_rows(findings: list[Finding], unsafe_fixes: bool = False) -> list[dict]:
    """Findings per rule, most frequent first (refuted ones do not count): code, name, count, fixable."""
    counts = Counter((f.code, f.name) for f in findings if f.verification.status != "refuted")
    fixes = {(f.code, f.name) for f in findings if fixable(f, unsafe_fixes)}
    rows = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [{"code": code, "name": name, "count": n, "fixable": (code, name) in fixes} for (code, name), n in rows]


def statistics(findings: list[Finding], unsafe_fixes: bool = False, fmt: str = "text") -> str:
    """The `--statistics` table (as Ruff prints it), or the same rows as JSON."""
    rows = statistics_rows(findings, unsafe_fixes)
    if fmt == "json":
        return json.dumps(rows, indent=2)
    marks = any(r["fixable"] for r in rows)
    width = max((len(str(r["count"])) for r in rows), default=1)
    return "\n".join(f"{r['count']:>{width}}\t{r['code']}\t" + (("[*] " if r["fixable"] else "[ ] ") if marks else "")
                     + r["name"] for r in rows)



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


def to_sarif(findings: list[Finding], root: str, sources: Optional[dict[str, bytes]] = None) -> str:
    """SARIF 2.1.0: rule metadata, relative URIs against %SRCROOT%, verification status in properties."""
    import os
    from pathlib import Path

    from .rules import PSEUDO_RULES, RULES

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
    for code, name, summary in PSEUDO_RULES:
        index[code] = len(rules_meta)
        rules_meta.append({
            "id": code, "name": name, "shortDescription": {"text": summary},
            "fullDescription": {"text": summary}, "defaultConfiguration": {"level": "error"},
        })
    root_abs = os.path.abspath(root)
    results = []
    cells: dict = {}
    for f in findings:
        rel = os.path.relpath(os.path.abspath(f.path), root_abs)
        uri = Path(rel).as_posix() if not rel.startswith("..") else Path(os.path.abspath(f.path)).as_uri()
        location: dict = {"artifactLocation": {"uri": uri}}
        if not uri.startswith("file:"):
            location["artifactLocation"]["uriBaseId"] = "%SRCROOT%"
        location["region"] = {"startLine": f.line, "startColumn": f.column, "endLine": f.end_line,
                              "endColumn": f.end_column}
        status = f.verification.status
        message = f.message
        properties = {"name": f.name, "function": f.function, "verification": f.verification.to_json()}
        if f.cell is not None:  # SARIF knows no cells: the line of the notebook file, the cell in words
            at, words = _notebook_place(f, cells, sources)
            location["region"] = {"startLine": at}
            message = f"{message} ({words})"
            properties.update(cell=f.cell, cellLine=f.line, cellColumn=f.column)
        results.append({
            "ruleId": f.code,
            "ruleIndex": index.get(f.code, 0),
            "level": {"refuted": "note", "unverified": "warning"}.get(status, "error"),
            "message": {"text": message},
            "locations": [{"physicalLocation": location}],
            "properties": properties,
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


def to_github(findings: list[Finding], sources: Optional[dict[str, bytes]] = None) -> str:
    """GitHub Actions workflow commands: one `::error` annotation per finding."""
    lines = []
    cells: dict = {}
    for f in findings:
        if f.cell is not None:  # the notebook file's line, and the cell named in the message
            at, words = _notebook_place(f, cells, sources)
            props = [f"file={_gh_escape(f.path, True)}", f"line={at}",
                     f"title={_gh_escape(f'jaxlint ({f.code}) {words}', True)}"]
            level = "warning" if f.verification.status == "unverified" else "error"
            lines.append(f"::{level} {','.join(props)}::{_gh_escape(f'[{f.name}] {words}: {f.message}')}")
            continue
        props = [f"file={_gh_escape(f.path, True)}", f"line={f.line}"]
        if f.end_line == f.line:
            props += [f"col={f.column}", f"endLine={f.end_line}", f"endColumn={f.end_column}"]
        else:
            props += [f"endLine={f.end_line}"]
        props.append(f"title={_gh_escape(f'jaxlint ({f.code})', True)}")
        level = "warning" if f.verification.status == "unverified" else "error"
        lines.append(f"::{level} {','.join(props)}::{_gh_escape(f'[{f.name}] {f.message}')}")
    return "\n".join(lines)
