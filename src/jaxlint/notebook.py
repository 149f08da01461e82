"""Jupyter notebooks as one Python module: code cells read and joined, IPython magics neutralised,
positions mapped back to (cell, line), and changed cell sources written back into the notebook's JSON.

The notebook is read with the standard `json` module, not `nbformat`: linting needs only the cells'
types and sources, `nbformat.read` validates the whole document against its schema (slow on a
notebook heavy with outputs), and `nbformat.write` re-serialises the whole file (sorted keys, one
space of indentation), which would rewrite notebooks saved by other editors. Writing replaces only
the JSON text of the changed cells' `source` values, so outputs, metadata, key order and indentation
stay byte for byte as they were.
"""
from __future__ import annotations

import bisect
import difflib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Optional

SUFFIX = ".ipynb"

# Cell magics whose body is Python run in the notebook's namespace; any other cell magic (`%%bash`,
# `%%html`, `%%writefile`, ...) makes the cell something else, and it is skipped.
PYTHON_CELL_MAGICS = frozenset({
    "time", "timeit", "capture", "debug", "prun", "python", "python3", "pypy", "memit", "mprun", "snakeviz",
})

# Separates the cells in the joined module text. A comment, so it changes nothing for the analysis,
# and libcst keeps it with the statement that follows: a fix that inserts a statement before the
# first statement of a cell (a jit hoisted out of a loop) lands in that cell.
_MARKER = "# jaxlint-notebook-cell {}"
_MARKER_RE = re.compile(r"# jaxlint-notebook-cell (\d+)\Z")


class NotebookError(ValueError):
    """The file is not a notebook jaxlint can read; the message says why, for the user."""


def is_notebook(path: str) -> bool:
    return path.lower().endswith(SUFFIX)


@dataclass
class CodeCell:
    number: int  # 1-based, counting every cell of the notebook (markdown and raw too), as editors do
    raw: list[str]  # the source as stored, split on "\n"
    lines: list[str]  # the same lines with IPython magics neutralised (what is analysed)
    magic: set[int]  # 0-based indexes of the neutralised lines
    as_list: bool  # stored as a list of strings (one per line) rather than one string
    start: int = 0  # 1-based line of the cell's first line in the module text
    broken: bool = False  # does not parse: blanked in the module text, reported once


@dataclass
class CellError:
    cell: int
    line: int
    column: int
    message: str


@dataclass
class Notebook:
    cells: list[CodeCell]
    errors: list[CellError] = field(default_factory=list)
    text: str = ""  # every code cell, each after its marker line

    def position(self, line: int) -> tuple[int, int]:
        """(cell number, line within the cell) of a line of the module text."""
        starts = [c.start for c in self.cells]
        i = max(0, bisect.bisect_right(starts, line) - 1)
        cell = self.cells[i]
        return cell.number, min(max(1, line - cell.start + 1), max(1, len(cell.lines)))

    def module_line(self, cell: int, line: int) -> int:
        """The line of the module text holding line `line` of cell `cell`."""
        for c in self.cells:
            if c.number == cell:
                return c.start + line - 1
        raise KeyError(cell)


# ---- reading ----------------------------------------------------------------------------------


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotebookError(f"not UTF-8 ({exc.reason} at byte {exc.start})") from None


def load(raw: bytes) -> Notebook:
    """The code cells of a notebook, magics neutralised, joined into one module text."""
    text = _decode(raw)
    try:
        doc = json.loads(text.lstrip("\ufeff"))
    except (ValueError, RecursionError) as exc:
        raise NotebookError(f"not valid JSON ({_first_line(exc)})") from None
    if not isinstance(doc, dict):
        raise NotebookError("its JSON is not an object")
    major = doc.get("nbformat")
    if major != 4:
        if isinstance(major, int) and major < 4:
            raise NotebookError(f"it is in nbformat {major}; only nbformat 4 is read "
                                "(convert it with `jupyter nbconvert --to notebook --inplace`)")
        raise NotebookError(f"its `nbformat` is {major!r}, not 4")
    cells = doc.get("cells")
    if not isinstance(cells, list):
        raise NotebookError("it has no `cells` list")
    language = _language(doc)
    out: list[CodeCell] = []
    errors: list[CellError] = []
    if language is not None and language != "python":
        return Notebook(out, errors, "")
    for number, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        if isinstance(source, list) and all(isinstance(s, str) for s in source):
            as_list, joined = True, "".join(source)
        elif isinstance(source, str):
            as_list, joined = False, source
        else:
            errors.append(CellError(number, 1, 1, "The cell's `source` is neither a string nor a list of strings; "
                                                  "the cell was not checked."))
            continue
        raw_lines = joined.split("\n")
        neutral = neutralise(raw_lines)
        if neutral is None:
            continue  # a cell magic that is not Python (`%%bash`, `%%html`, ...)
        lines, magic = neutral
        out.append(CodeCell(number, raw_lines, lines, magic, as_list))
    nb = Notebook(out, errors)
    _check_cells(nb)
    _join(nb)
    return nb


def _language(doc: dict[str, Any]) -> Optional[str]:
    meta = doc.get("metadata")
    if not isinstance(meta, dict):
        return None
    info = meta.get("language_info")
    name = info.get("name") if isinstance(info, dict) else None
    if name is None:
        spec = meta.get("kernelspec")
        name = spec.get("language") if isinstance(spec, dict) else None
    return name.lower() if isinstance(name, str) else None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _check_cells(nb: Notebook) -> None:
    """A cell that does not parse on its own is reported and left out; the other cells are still checked
    (Jupyter runs them regardless)."""
    flags = 0x400 | 0x2000  # ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    for cell in nb.cells:
        try:
            compile("\n".join(cell.lines) + "\n", "<cell>", "exec", flags=flags, dont_inherit=True)
        except SyntaxError as exc:
            line = min(max(1, exc.lineno or 1), max(1, len(cell.lines)))
            nb.errors.append(CellError(cell.number, line, max(1, exc.offset or 1),
                                       f"Syntax error: {exc.msg}; the cell was not checked."))
            cell.broken = True
        except (ValueError, RecursionError, MemoryError) as exc:
            nb.errors.append(CellError(cell.number, 1, 1, f"The cell cannot be parsed ({_first_line(exc)}); the cell was not checked."))
            cell.broken = True


def _join(nb: Notebook) -> None:
    parts: list[str] = []
    for cell in nb.cells:
        parts.append(_MARKER.format(cell.number))
        cell.start = len(parts) + 1
        parts.extend("" if cell.broken else line for line in cell.lines)
    nb.text = "\n".join(parts) + "\n" if parts else ""


UNREADABLE_CELL = "jaxlint's parser could not read this cell; the cell was not checked (CPython compiles it)."


def set_aside_unreadable(nb: Notebook) -> list[CellError]:
    """Cells that CPython compiles but jaxlint's parser (libcst) rejects, left out of the module text as
    cells that do not parse are, so that one such cell does not stop the whole notebook from being
    checked; their errors, for the caller to report as unsupported syntax. Line numbers of the module
    text do not change."""
    import libcst as cst

    if not nb.cells:
        return []
    try:
        cst.parse_module(nb.text)
        return []
    except cst.ParserSyntaxError:
        pass
    except (RecursionError, MemoryError, ValueError):
        return []
    out: list[CellError] = []
    for cell in nb.cells:
        if cell.broken:
            continue
        try:
            cst.parse_module("\n".join(cell.lines) + "\n")
        except cst.ParserSyntaxError as exc:
            # libcst may point past the statement it rejects: stay on the cell's last line of code.
            last = max((i for i, l in enumerate(cell.lines, 1) if l.strip()), default=1)
            line = min(max(1, exc.editor_line), last)
            column = max(1, exc.editor_column) if line == exc.editor_line else 1
            out.append(CellError(cell.number, line, column, UNREADABLE_CELL))
            cell.broken = True
        except (RecursionError, MemoryError, ValueError):
            continue
    if out:
        _join(nb)
    return out


# ---- IPython syntax -----------------------------------------------------------------------------

_ASSIGN_MAGIC = re.compile(r"(?P<target>[A-Za-z_][\w.\[\]'\", ()*]*?)\s*=\s*[%!]")


def neutralise(lines: list[str]) -> Optional[tuple[list[str], set[int]]]:
    """The cell's lines with IPython's own syntax replaced by plain Python on the same lines, and the
    indexes of the replaced lines; None for a cell that is not Python (a non-Python cell magic).

    Only lines that start a logical line are candidates: a `%` inside a string or a bracket is Python.
    """
    out = list(lines)
    magic: set[int] = set()
    first = next((i for i, l in enumerate(lines) if l.strip()), None)
    if first is not None and lines[first].lstrip().startswith("%%"):
        name = lines[first].lstrip()[2:].split(maxsplit=1)
        if not name or name[0] not in PYTHON_CELL_MAGICS:
            return None
        out[first] = ""
        magic.add(first)
    state = _ScanState()
    continued_magic = False
    for i, line in enumerate(lines):
        if i in magic:
            continue
        if continued_magic:  # the tail of a magic continued with a backslash
            out[i] = ""
            magic.add(i)
            continued_magic = line.rstrip().endswith("\\")
            continue
        at_start = state.quote is None and state.depth == 0 and not state.continued
        after, code_end = _scan(line, state)
        if at_start:
            replacement = _magic_line(line, line[:code_end])
            if replacement is not None:
                out[i] = replacement
                magic.add(i)
                continued_magic = line.rstrip().endswith("\\")
                continue  # the magic's text does not open strings or brackets
        state = after
    return out, magic


def _magic_line(line: str, code: str) -> Optional[str]:
    stripped = line.lstrip()
    indent = line[: len(line) - len(stripped)]
    if not stripped or stripped.startswith("#"):
        return None
    if stripped[0] in "%!?":  # %magic, %%magic, !shell, ?help, ??help
        return indent + "pass"
    if stripped[0] in "/,;":  # IPython's autocall forms: never Python at the start of a line
        return indent + "pass"
    if code.rstrip().endswith("?"):  # obj? and obj?? (help)
        return indent + "pass"
    m = _ASSIGN_MAGIC.match(stripped)
    if m and not m.group("target").rstrip().endswith(("=", "!", "<", ">")):
        return indent + m.group("target").rstrip() + " = None"
    return None


@dataclass
class _ScanState:
    quote: Optional[str] = None  # the open triple quote, if a line ended inside one
    depth: int = 0  # open brackets
    continued: bool = False  # the line ended with a backslash


def _scan(line: str, before: _ScanState) -> tuple[_ScanState, int]:
    """The state after `line`, and where its code ends (the start of its comment, or its length)."""
    quote, depth = before.quote, before.depth
    i, n = 0, len(line)
    code_end = n
    while i < n:
        ch = line[i]
        if quote is not None:
            if ch == "\\":
                i += 2
                continue
            if line.startswith(quote, i):
                i += len(quote)
                quote = None
                continue
            i += 1
            continue
        if ch == "#":
            code_end = i
            break
        if ch in "\"'":
            triple = line[i:i + 3]
            if triple in ('"""', "'''"):
                quote = triple
                i += 3
                continue
            # a one-line string: skip to its end (an unterminated one ends the line)
            j = i + 1
            while j < n and line[j] != ch:
                j += 2 if line[j] == "\\" else 1
            i = j + 1
            continue
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        i += 1
    continued = quote is None and line[:code_end].rstrip("\r").endswith("\\")
    return _ScanState(quote, depth, continued), code_end


# ---- positions of findings ----------------------------------------------------------------------


def to_cells(nb: Notebook, findings: list[Any]) -> list[Any]:
    """Move findings from module-text lines to (cell, line within the cell), in place."""
    for f in findings:
        cell, line = nb.position(f.line)
        end_cell, end_line = nb.position(f.end_line)
        f.cell, f.line = cell, line
        if end_cell != cell:  # a span never leaves its cell; clamp to be safe
            end_line, f.end_column = line, f.column + 1
        f.end_line = end_line
    return findings


def detail_in_cells(nb: Notebook, detail: str) -> str:
    """Verification evidence speaks of lines of the module text: name the cell and its line instead."""
    def repl(m: re.Match) -> str:
        cell, line = nb.position(int(m.group(1)))
        return f"cell {cell}, line {line}"

    return re.sub(r"\bline (\d+)", repl, detail)


# ---- writing back --------------------------------------------------------------------------------


class WriteBackError(ValueError):
    """The fixed module text cannot be put back into the notebook's cells; nothing is written."""


def split_cells(nb: Notebook, fixed: str) -> dict[int, str]:
    """The new source of every code cell whose text changed in `fixed` (a rewrite of `nb.text`)."""
    lines = fixed.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    marks: list[tuple[int, int]] = []  # (index in lines, cell number)
    for i, line in enumerate(lines):
        m = _MARKER_RE.match(line)
        if m:
            marks.append((i, int(m.group(1))))
    if [n for _, n in marks] != [c.number for c in nb.cells]:
        raise WriteBackError("the cell boundaries did not survive the change")
    changed: dict[int, str] = {}
    for k, cell in enumerate(nb.cells):
        begin = marks[k][0] + 1
        end = marks[k + 1][0] if k + 1 < len(marks) else len(lines)
        new = lines[begin:end]
        if k == 0 and marks[0][0] > 0:
            new = lines[:marks[0][0]] + new  # inserted above the first cell: it belongs to it
        if cell.broken:
            if any(l.strip() for l in new):
                raise WriteBackError(f"a change reached cell {cell.number}, which does not parse")
            continue
        if new == cell.lines:
            continue
        changed[cell.number] = "\n".join(_restore(cell, new))
    return changed


def _restore(cell: CodeCell, new: list[str]) -> list[str]:
    """Put the neutralised IPython lines back: unchanged stretches take the stored lines."""
    if not cell.magic:
        return new
    out: list[str] = []
    sm = difflib.SequenceMatcher(None, cell.lines, new, autojunk=False)
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal":
            out.extend(cell.raw[i1:i2])
            continue
        if any(i in cell.magic for i in range(i1, i2)):
            raise WriteBackError(f"a change in cell {cell.number} touches a line with IPython syntax")
        out.extend(new[j1:j2])
    return out


def write_sources(raw: bytes, nb: Notebook, changed: dict[int, str]) -> bytes:
    """The notebook's bytes with the `source` of each changed cell replaced, and nothing else touched."""
    if not changed:
        return raw
    text = _decode(raw)
    spans = _source_spans(text)
    as_list = {c.number: c.as_list for c in nb.cells}
    ascii_only = text.isascii()
    pieces: list[str] = []
    pos = 0
    for number in sorted(changed):
        if number not in spans:
            raise WriteBackError(f"cell {number}'s source was not found in the notebook's text")
        start, end = spans[number]
        pieces.append(text[pos:start])
        pieces.append(_list_value(text[start:end], changed[number], ascii_only) if as_list[number]
                      else json.dumps(changed[number], ensure_ascii=ascii_only))
        pos = end
    pieces.append(text[pos:])
    out = "".join(pieces)
    # The result must read back as the same notebook with exactly the new sources.
    doc = json.loads(out.lstrip("\ufeff"))
    for number, source in changed.items():
        got = doc["cells"][number - 1]["source"]
        if ("".join(got) if isinstance(got, list) else got) != source:
            raise WriteBackError(f"cell {number} did not read back as written")
    return out.encode("utf-8")


_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def _skip(text: str, i: int) -> int:
    return _WS.match(text, i).end()  # type: ignore[union-attr]


def _expect(text: str, i: int, ch: str) -> int:
    if i >= len(text) or text[i] != ch:
        raise WriteBackError(f"unexpected notebook JSON at character {i}")
    return i + 1


def _members(text: str, i: int):  # yields (key, value start) and expects the caller to set the end
    """Walk a JSON object starting at `text[i] == '{'`: yield (key, index of its value)."""
    i = _skip(text, _expect(text, i, "{"))
    if text[i] == "}":
        return
    while True:
        key, i = json.decoder.scanstring(text, _expect(text, i, '"'))  # type: ignore[attr-defined]
        i = _skip(text, _expect(text, _skip(text, i), ":"))
        end = yield key, i
        i = _skip(text, end)
        if text[i] == "}":
            return
        i = _skip(text, _expect(text, i, ","))


def _value_end(text: str, i: int) -> int:
    return _DECODER.raw_decode(text, i)[1]


def _source_spans(text: str) -> dict[int, tuple[int, int]]:
    """(start, end) in `text` of each cell's `source` value, by cell number."""
    spans: dict[int, tuple[int, int]] = {}
    top = _members(text, _skip(text, 1 if text.startswith("\ufeff") else 0))
    try:
        key, i = next(top)
        while True:
            if key == "cells":
                j = _skip(text, _expect(text, i, "["))
                number = 0
                while text[j] != "]":
                    number += 1
                    cell = _members(text, j)
                    try:
                        ckey, k = next(cell)
                        while True:
                            end = _value_end(text, k)
                            if ckey == "source":
                                spans[number] = (k, end)
                            ckey, k = cell.send(end)
                    except StopIteration:
                        pass
                    j = _skip(text, _value_end(text, j))
                    if text[j] == ",":
                        j = _skip(text, j + 1)
                end = j + 1
            else:
                end = _value_end(text, i)
            key, i = top.send(end)
    except StopIteration:
        pass
    return spans


def _list_value(old: str, source: str, ascii_only: bool) -> str:
    """A JSON list of the source's lines laid out like `old` (the list it replaces); unchanged lines
    keep their exact JSON text."""
    items: list[tuple[int, int]] = []
    i = _skip(old, _expect(old, 0, "["))
    while old[i] != "]":
        end = _value_end(old, i)
        items.append((i, end))
        i = _skip(old, end)
        if old[i] == ",":
            i = _skip(old, i + 1)
    known = {json.loads(old[s:e]): old[s:e] for s, e in items}
    new_items = re.findall(r"[^\n]*\n|[^\n]+\Z", source)
    if not new_items:
        return "[]"
    if items:
        lead = old[1:items[0][0]]
        tail = old[items[-1][1]:len(old) - 1]
        sep = old[items[0][1]:items[1][0]] if len(items) > 1 else "," + (lead or " ")
    else:
        lead, tail, sep = "", "", ", "
    body = sep.join(known.get(s) or json.dumps(s, ensure_ascii=ascii_only) for s in new_items)
    return "[" + lead + body + tail + "]"


def cell_diff(path: str, original: bytes, fixed: bytes) -> str:
    """A unified diff per changed cell (`a/nb.ipynb:cell 3`), the way the cells read in an editor."""
    try:
        old = _sources(original)
        new = _sources(fixed)
    except (ValueError, KeyError, TypeError):
        return ""
    out: list[str] = []
    for number in sorted(set(old) & set(new)):
        if old[number] != new[number]:
            out.extend(difflib.unified_diff(
                old[number].splitlines(keepends=True), new[number].splitlines(keepends=True),
                fromfile=f"a/{path}:cell {number}", tofile=f"b/{path}:cell {number}"))
            if out and not out[-1].endswith("\n"):
                out[-1] += "\n"
    return "".join(out)


def source_lines(raw: bytes) -> dict[int, tuple[list[str], list[int]]]:
    """For each cell: its source lines, and for each the line of the notebook file that stores it (the
    best a format that knows nothing of cells can point at). Empty for a notebook that cannot be read."""
    try:
        text = _decode(raw)
        spans = _source_spans(text)
        doc = json.loads(text.lstrip("\ufeff"))
    except (ValueError, RecursionError, IndexError):
        return {}
    newlines = [m.start() for m in re.finditer("\n", text)]

    def file_line(offset: int) -> int:
        return bisect.bisect_left(newlines, offset) + 1

    out: dict[int, tuple[list[str], list[int]]] = {}
    for number, (start, end) in spans.items():
        try:
            value = doc["cells"][number - 1]["source"]
        except (KeyError, IndexError, TypeError):
            continue
        if isinstance(value, str):
            lines = value.split("\n")
            out[number] = (lines, [file_line(start)] * len(lines))
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            lines, where = [""], [file_line(start)]
            i = _skip(text, start + 1)
            for item in value:
                parts = item.split("\n")
                if lines[-1] == "":
                    where[-1] = file_line(i)  # the line starts in this item
                lines[-1] += parts[0]
                for part in parts[1:]:
                    lines.append(part)
                    where.append(file_line(i))
                i = _skip(text, _value_end(text, i))
                if i < len(text) and text[i] == ",":
                    i = _skip(text, i + 1)
            out[number] = (lines, where)
    return out


def _sources(raw: bytes) -> dict[int, str]:
    doc = json.loads(raw.decode("utf-8").lstrip("\ufeff"))
    out: dict[int, str] = {}
    for number, cell in enumerate(doc["cells"], start=1):
        src = cell.get("source", "")
        out[number] = "".join(src) if isinstance(src, list) else src
    return out


# ---- verification ------------------------------------------------------------------------------


class VerifyCopies:
    """Stand-ins for the verifier, which loads a module by path: a notebook's findings (and a
    buffer's, whose file on disk is not what was analysed) point at a .py copy of the analysed text.

    The copy sits in a temporary folder that mirrors the file's own — its siblings, and the packages
    above it, linked in — so the copy imports what the file would import and keeps its module name.
    The fence is the verifier's own: it loads the copy exactly as it loads any module.
    """

    def __init__(self, findings: list[Any], read: Any, sources: dict[str, bytes]) -> None:
        self.originals = findings
        self.read = read  # path -> bytes of what was analysed (None when unreadable)
        self.sources = sources
        self.findings: list[Any] = []  # what the verifier is given
        self._pairs: list[tuple[Any, Any, Optional[Notebook], str]] = []
        self._folders: list[str] = []

    def __enter__(self) -> "VerifyCopies":
        import dataclasses

        from .findings import Verification

        groups: dict[str, list[Any]] = {}
        for f in self.originals:
            if is_notebook(f.path) or f.path in self.sources:
                groups.setdefault(f.path, []).append(f)
            else:
                self.findings.append(f)
        for path, group in groups.items():
            nb: Optional[Notebook] = None
            try:
                data = self.read(path)
                if data is None:
                    raise OSError("the file cannot be read")
                if is_notebook(path):
                    nb = load(data)
                    data = nb.text.encode("utf-8")
                copy = self._mirror(path, data)
            except (OSError, NotebookError) as exc:
                from .verify import _NOT_RUN  # findings about the file itself are never traced

                for f in group:
                    if f.name not in _NOT_RUN:
                        f.verification = Verification("unverified", f"no copy of the file could be made to verify it: {exc}")
                continue
            for f in group:
                if nb is not None and f.cell is not None:
                    stand_in = dataclasses.replace(f, path=copy, line=nb.module_line(f.cell, f.line),
                                                   end_line=nb.module_line(f.cell, f.end_line), cell=None)
                else:
                    stand_in = dataclasses.replace(f, path=copy)
                self._pairs.append((f, stand_in, nb, copy))
                self.findings.append(stand_in)
        return self

    def __exit__(self, exc_type: Any, *rest: Any) -> None:
        import os
        import shutil

        from .findings import Verification

        try:
            if exc_type is None:
                for original, stand_in, nb, copy in self._pairs:
                    detail = stand_in.verification.detail.replace(os.path.abspath(copy), original.path)
                    if nb is not None:
                        detail = detail_in_cells(nb, detail)
                    original.verification = Verification(stand_in.verification.status, detail)
        finally:
            for folder in self._folders:
                shutil.rmtree(folder, ignore_errors=True)

    def _mirror(self, path: str, text: bytes) -> str:
        import os
        import tempfile

        folder = os.path.dirname(os.path.abspath(path))
        base = os.path.basename(path)
        if is_notebook(base):
            stem = base[: -len(SUFFIX)]
            name = stem + ".py"
            if os.path.exists(os.path.join(folder, name)):
                name = stem + "_ipynb.py"
        else:
            name = base if base.endswith(".py") else base + ".py"
        chain: list[str] = []  # the packages holding the file, outermost first
        root = folder
        while os.path.isfile(os.path.join(root, "__init__.py")) and os.path.dirname(root) != root:
            chain.insert(0, os.path.basename(root))
            root = os.path.dirname(root)
        tmp = tempfile.mkdtemp(prefix="jaxlint-copy-")
        self._folders.append(tmp)
        real, here = root, tmp
        for depth, step in enumerate(chain + [name]):
            try:
                entries = os.listdir(real) if os.path.isdir(real) else []
            except OSError:
                entries = []
            for entry in entries:
                if entry != step and not entry.startswith("."):
                    try:
                        os.symlink(os.path.join(real, entry), os.path.join(here, entry))
                    except OSError:
                        pass  # no links on this system: sibling imports will not resolve
            if depth < len(chain):
                real, here = os.path.join(real, step), os.path.join(here, step)
                os.mkdir(here)
        target = os.path.join(here, name)
        with open(target, "wb") as f:
            f.write(text)
        return target
