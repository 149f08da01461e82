"""Applying autofixes: rewrite the analysed tree, re-lint until nothing more applies, write atomically."""
from __future__ import annotations

import difflib
import hashlib
import os
import tempfile
from dataclasses import dataclass, field
from typing import Iterable, Optional

import libcst as cst

from .edits import Edit
from .findings import Finding


class FileChanged(Exception):
    """The file changed on disk between reading and writing; nothing was written."""


@dataclass
class FixResult:
    path: str
    original: bytes
    fixed: bytes
    applied: list[Finding] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.fixed != self.original


class _Apply(cst.CSTTransformer):
    def __init__(self, edits: list[Edit]) -> None:
        super().__init__()
        self.by_id = {id(e.node): e for e in edits}

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode):  # type: ignore[override]
        edit = self.by_id.get(id(original))
        return edit.rewrite(updated) if edit is not None else updated


def _add_import(module: cst.Module, name: str) -> cst.Module:
    """Insert `import name` after the docstring, `__future__` imports and the leading import block."""
    body = list(module.body)
    pos = 0
    for i, stmt in enumerate(body):
        if isinstance(stmt, cst.SimpleStatementLine) and stmt.body and isinstance(
                stmt.body[0], (cst.Import, cst.ImportFrom, cst.Expr)):
            if isinstance(stmt.body[0], cst.Expr) and i > 0:
                break
            pos = i + 1
        else:
            break
    body.insert(pos, cst.SimpleStatementLine([cst.Import([cst.ImportAlias(cst.Name(name))])]))
    return module.with_changes(body=body)


def apply_edits(source: bytes, findings: Iterable[Finding], module: cst.Module) -> tuple[bytes, list[Finding]]:
    """Apply non-overlapping edits of `findings` (which were computed on `module`)."""
    chosen: list[Finding] = []
    spans: list[tuple[int, int, int, int]] = []
    for f in sorted(findings, key=Finding.sort_key):
        span = (f.line, f.column, f.end_line, f.end_column)
        if any(not (span[2:] < s[:2] or span[:2] > s[2:]) for s in spans):
            continue  # overlaps an edit already chosen: the next round will see it again
        spans.append(span)
        chosen.append(f)
    if not chosen:
        return source, []
    new = module.visit(_Apply([f.edit for f in chosen]))
    for mod in sorted({f.edit.needs_import for f in chosen if f.edit.needs_import}):
        new = _add_import(new, mod)
    return new.bytes, chosen


def fix_source(source: bytes, path: str, lint: "object", unsafe: bool = False, rounds: int = 8) -> FixResult:
    """Fix until a fixed point. `lint(source, path) -> (findings, module)` runs the static pass."""
    result = FixResult(path, source, source)
    current = source
    for _ in range(rounds):
        findings, module = lint(current, path)  # type: ignore[operator]
        if module is None:
            break
        fixable = [f for f in findings if f.edit is not None and f.fix is not None
                   and (unsafe or f.fix.applicable == "safe")]
        if not fixable:
            break
        new, applied = apply_edits(current, fixable, module)
        if new == current:
            break
        cst.parse_module(new)  # a fix must never produce a file that does not parse
        result.applied.extend(applied)
        current = new
    result.fixed = current
    return result


def unified_diff(result: FixResult) -> str:
    if result.path.lower().endswith(".ipynb"):
        from .notebook import cell_diff  # a notebook's diff is shown per cell, as the code reads

        return cell_diff(result.path, result.original, result.fixed)
    enc = "utf-8"
    a = result.original.decode(enc, errors="replace").splitlines(keepends=True)
    b = result.fixed.decode(enc, errors="replace").splitlines(keepends=True)
    return "".join(difflib.unified_diff(a, b, fromfile=f"a/{result.path}", tofile=f"b/{result.path}"))


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_atomic(path: str, data: bytes, expected_original: Optional[bytes] = None) -> None:
    """Write via a temporary file in the same folder, fsync, then rename; keep permission bits.

    Refuses (FileChanged) if the file on disk no longer holds `expected_original`.
    """
    if expected_original is not None:
        with open(path, "rb") as f:
            if digest(f.read()) != digest(expected_original):
                raise FileChanged(f"{path} changed since it was read; not writing the fix")
    folder = os.path.dirname(os.path.abspath(path))
    mode = os.stat(path).st_mode & 0o7777
    fd, tmp = tempfile.mkstemp(prefix=".jaxlint-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
