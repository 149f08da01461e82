"""Suppression comments: the line forms (`# noqa: JL101`, `# jaxlint: ignore[traced-if]`), the file forms
(`# jaxlint: skip-file`, `# jaxlint: ignore-file[...]`), and which of them are mistyped or unused."""
from __future__ import annotations

import difflib
import io
import re
import sys
import tokenize
from dataclasses import dataclass
from typing import Iterable, Optional

from .findings import Finding, Fix, Verification

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Za-z0-9_, \t-]+))?", re.IGNORECASE)
_IGNORE = re.compile(r"#\s*jaxlint:\s*ignore(?:\[(?P<names>[^\]]*)\])?")
# Any `# jaxlint:` directive; the word decides which (a word that is none of them is a typo).
_DIRECTIVE = re.compile(r"#\s*jaxlint:\s*(?P<word>[A-Za-z_-]*)(?:\[(?P<names>[^\]]*)\])?")
_WORDS = ("ignore", "ignore-file", "skip-file")
_JL_CODE = re.compile(r"^JL\d+$", re.IGNORECASE)
_HINT = re.compile(rb"noqa|jaxlint", re.IGNORECASE)
_ITEM = re.compile(r"[^,\s]+")


@dataclass
class Item:
    """One rule named in a suppression comment, as written."""

    text: str
    column: int  # 1-based, on the comment's line
    code: Optional[str]  # the jaxlint code it names; None for another tool's code or a typo
    invalid: bool = False
    used: bool = False


@dataclass
class Directive:
    """One suppression comment (or the suppression part of a longer comment)."""

    kind: str  # "noqa" | "ignore" | "ignore-file" | "skip-file" | "unknown"
    line: int
    column: int  # 1-based start of the directive text
    end_column: int  # 1-based, exclusive
    text: str
    items: Optional[list[Item]]  # None: every rule
    used: bool = False


def _codes_by_key() -> dict[str, str]:
    from .rules import ALL_CODES

    keys = {code.upper(): code for code in ALL_CODES}
    keys.update({name: code for code, name in ALL_CODES.items()})
    return keys


def suggest(word: str, choices: Iterable[str]) -> Optional[str]:
    """The closest of `choices` to a mistyped `word` (difflib), or None."""
    choices = list(choices)
    hits = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    if not hits:
        upper = {c.upper(): c for c in choices}
        hits = [upper[h] for h in difflib.get_close_matches(word.upper(), list(upper), n=1, cutoff=0.6)]
    return hits[0] if hits else None


def _comments(raw: bytes) -> list[tuple[int, int, str]]:
    """(line, 0-based column, text) of every comment, from the tokenizer (so `#` inside strings is not one)."""
    out: list[tuple[int, int, str]] = []
    try:
        for tok in tokenize.tokenize(io.BytesIO(raw).readline):
            if tok.type == tokenize.COMMENT:
                out.append((tok.start[0], tok.start[1], tok.string))
        return out
    except (tokenize.TokenError, SyntaxError, UnicodeDecodeError, LookupError, ValueError):
        pass
    # A file the tokenizer rejects: read comments line by line (a `#` in a string may be taken for one).
    out = []
    for no, line in enumerate(raw.decode("utf-8", errors="replace").splitlines(), 1):
        pos = line.find("#")
        if pos >= 0:
            out.append((no, pos, line[pos:]))
    return out


def _items(body: str, start: int, keys: dict[str, str], jaxlint_only: bool) -> list[Item]:
    """The rules named in `body` (which starts at 1-based column `start`)."""
    items = []
    for m in _ITEM.finditer(body):
        text = m.group(0)
        code = keys.get(text) or keys.get(text.upper())
        # In `# noqa: ...` other tools' codes are fine; only a `JL` code that is not ours is a typo.
        invalid = code is None and (not jaxlint_only or bool(_JL_CODE.match(text)))
        items.append(Item(text, start + m.start(), code, invalid))
    return items


class Suppressions:
    """The suppression comments of one file, and which of them silenced something."""

    def __init__(self, directives: list[Directive]) -> None:
        self.directives = directives
        self.skip_file = any(d.kind == "skip-file" for d in directives)
        self.file_wide = [d for d in directives if d.kind == "ignore-file"]
        self.by_line: dict[int, list[Directive]] = {}
        for d in directives:
            if d.kind in ("noqa", "ignore"):
                self.by_line.setdefault(d.line, []).append(d)

    @classmethod
    def scan(cls, raw: bytes) -> "Suppressions":
        if not _HINT.search(raw):  # most files have no suppression at all: skip the tokenizer
            return cls([])
        keys = _codes_by_key()
        found: list[Directive] = []
        for line, col0, text in _comments(raw):
            for m in _DIRECTIVE.finditer(text):
                word, names = m.group("word"), m.group("names")
                col = col0 + m.start() + 1
                kind = word if word in _WORDS else "unknown"
                items = None
                if names is not None and kind != "skip-file":
                    items = _items(names, col0 + m.start("names") + 1, keys, jaxlint_only=False)
                found.append(Directive(kind, line, col, col0 + m.end() + 1, m.group(0), items))
            for m in _NOQA.finditer(text):
                codes = m.group("codes")
                items = None
                if codes is not None:
                    # The code list ends at the last code: a trailing explanation is not part of it.
                    items = _items(codes, col0 + m.start("codes") + 1, keys, jaxlint_only=True)
                end = col0 + (m.start("codes") + len(codes.rstrip()) if codes is not None else m.end()) + 1
                found.append(Directive("noqa", line, col0 + m.start() + 1, end, text[m.start():end - col0 - 1], items))
        return cls(found)

    def suppresses(self, line: int, code: str, mark: bool = True, besides: Optional[Directive] = None) -> bool:
        """Whether a finding of `code` on `line` is silenced (by a comment on that line or a file-wide one,
        other than `besides`)."""
        hit = False
        for d in self.file_wide + self.by_line.get(line, []):
            if d is besides:
                continue
            if d.items is None:
                hit = True
                d.used = d.used or mark
                continue
            for item in d.items:
                if item.code == code:
                    hit = True
                    item.used = item.used or mark
                    d.used = d.used or mark
        return hit

    def findings(self, path: str, codes: set[str]) -> list[Finding]:
        """invalid-suppression and unused-suppression findings (when selected), after suppression."""
        from .rules.invalid_suppression import InvalidSuppression
        from .rules.unused_suppression import UnusedSuppression

        out: list[Finding] = []
        if InvalidSuppression.code in codes:
            bad: list[Finding] = []
            for d in self.directives:
                if d.kind == "unknown":
                    word = d.text.split(":", 1)[1].strip().split("[", 1)[0]
                    msg = InvalidSuppression.directive_message(word, suggest(word, _WORDS))
                    bad.append(_finding(path, d.line, d.column, d.end_column, InvalidSuppression, msg))
                    continue
                if d.items == [] and d.kind != "noqa":
                    msg = InvalidSuppression.message("", d.text, None)
                    bad.append(_finding(path, d.line, d.column, d.end_column, InvalidSuppression, msg))
                for item in d.items or []:
                    if item.invalid:
                        msg = InvalidSuppression.message(item.text, d.text, suggest(item.text, _codes_by_key()))
                        bad.append(_finding(path, d.line, item.column, item.column + len(item.text),
                                            InvalidSuppression, msg))
            out += [f for f in bad if not self.suppresses(f.line, f.code)]
        if UnusedSuppression.code in codes:
            # Only rules that ran on this file count: a comment for a rule left out of this run may be needed.
            ran = codes - {UnusedSuppression.code}
            unused: list[tuple[Finding, Directive]] = []
            for d in self.directives:
                if d.kind not in ("noqa", "ignore", "ignore-file"):
                    continue
                if d.items is None:
                    # A bare `# noqa` may serve flake8 or Ruff as well: it is never called unused.
                    if d.kind != "noqa" and not d.used and ran:
                        unused.append((_finding(path, d.line, d.column, d.end_column, UnusedSuppression,
                                                UnusedSuppression.message(d.text, [], True), _REMOVE), d))
                    continue
                stale = [i for i in d.items if i.code is not None and i.code in ran and not i.used]
                if not stale:
                    continue
                if len(stale) == len(d.items):
                    unused.append((_finding(path, d.line, d.column, d.end_column, UnusedSuppression,
                                            UnusedSuppression.message(d.text, [i.text for i in stale], True),
                                            _REMOVE), d))
                    continue
                for i in stale:
                    unused.append((_finding(path, d.line, i.column, i.column + len(i.text), UnusedSuppression,
                                            UnusedSuppression.message(d.text, [i.text], False),
                                            Fix(f"Remove `{i.text}` from the suppression comment", "safe")), d))
            # A comment never silences the report about itself (a bare `# jaxlint: ignore` would).
            out += [f for f, d in unused if not self.suppresses(f.line, f.code, mark=False, besides=d)]
        return out


_REMOVE = Fix("Remove the unused suppression comment", "safe")


def _finding(path: str, line: int, col: int, end_col: int, rule: type, message: str,
             fix: Optional[Fix] = None) -> Finding:
    return Finding(path, line, col, line, end_col, rule.code, rule.name, message, None, Verification("not-run", ""),
                   fix)


def skips_file(raw: bytes) -> bool:
    """Whether the file asks not to be checked at all (`# jaxlint: skip-file`)."""
    return b"skip-file" in raw and Suppressions.scan(raw).skip_file


_LINES = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


def remove_unused(source: bytes, findings: list[Finding]) -> tuple[bytes, int]:
    """Remove what unused-suppression findings point at (a whole comment, or one name in it)."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
    lines = _LINES.findall(source.decode(encoding))
    removed = 0
    drop: set[int] = set()
    for f in sorted(findings, key=lambda f: (f.line, -f.column)):
        if not 0 < f.line <= len(lines):
            continue
        raw = lines[f.line - 1]
        body = raw.rstrip("\r\n")
        ending = raw[len(body):]
        before, span, after = body[:f.column - 1], body[f.column - 1:f.end_column - 1], body[f.end_column - 1:]
        if span.startswith("#"):  # the whole directive
            rest = after.strip()
            if not rest:
                body = before.rstrip()
            elif rest.startswith("#"):
                body = before + rest
            else:  # keep a trailing explanation a comment
                body = before + "# " + rest
            if not body.strip():
                drop.add(f.line)
        elif before.rstrip().endswith(","):
            body = before.rstrip()[:-1] + after
        else:
            after = after.lstrip()
            body = before + (after[1:].lstrip() if after.startswith(",") else after)
        lines[f.line - 1] = body + ending
        removed += 1
    kept = [text for no, text in enumerate(lines, 1) if no not in drop]
    return "".join(kept).encode(encoding), removed


def _string_interior_lines(source: bytes) -> set[int]:
    """Lines where a comment cannot go: inside multi-line strings, or ending in a backslash."""
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
    encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
    text = source.decode(encoding)
    lines = text.splitlines(keepends=True)
    blocked = _string_interior_lines(source)
    present = Suppressions.scan(source)
    wanted: dict[int, set[str]] = {}
    for f in findings:
        if not present.suppresses(f.line, f.code, mark=False):
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
