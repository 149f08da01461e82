"""Suppression comments on a flagged line: `# noqa`, `# noqa: JL101,JL201`, `# jaxlint: ignore[traced-if]`."""
from __future__ import annotations

import re
import sys

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


def _string_interior_lines(source: bytes) -> set[int]:
    """Lines where a comment cannot go: inside multi-line strings, or ending in a backslash."""
    import io
    import tokenize

    lines: set[int] = set()
    try:
        for tok in tokenize.tokenize(io.BytesIO(source).readline):
            if tok.type == tokenize.STRING and tok.end[0] > tok.start[0]:
                lines.update(range(tok.start[0], tok.end[0]))
            elif sys.version_info >= (3, 12) and tok.type == getattr(tokenize, "FSTRING_MIDDLE", -1) \
                    and tok.end[0] > tok.start[0]:
                lines.update(range(tok.start[0], tok.end[0]))
    except (tokenize.TokenError, SyntaxError):
        pass
    return lines


def add_ignore_comments(source: bytes, findings: list) -> tuple[bytes, int]:
    """Append `# jaxlint: ignore[name, ...]` to each flagged line (merging with one already there)."""
    import io
    import tokenize

    encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
    text = source.decode(encoding)
    lines = text.splitlines(keepends=True)
    blocked = _string_interior_lines(source)
    wanted: dict[int, set[str]] = {}
    for f in findings:
        wanted.setdefault(f.line, set()).add(f.name)
    added = 0
    for line_no, names in sorted(wanted.items()):
        if line_no in blocked or not 0 < line_no <= len(lines):
            continue
        raw = lines[line_no - 1]
        body = raw.rstrip("\r\n")
        ending = raw[len(body):]
        if body.rstrip().endswith("\\"):
            continue
        if all(is_suppressed(body, "", n) for n in names):
            continue
        m = _IGNORE.search(body)
        if m and m.group("names") is not None:
            have = {n.strip() for n in m.group("names").split(",") if n.strip()}
            merged = ", ".join(sorted(have | names))
            body = body[:m.start()] + f"# jaxlint: ignore[{merged}]" + body[m.end():]
        else:
            body = body.rstrip() + f"  # jaxlint: ignore[{', '.join(sorted(names))}]"
        lines[line_no - 1] = body + ending
        added += 1
    return "".join(lines).encode(encoding), added
