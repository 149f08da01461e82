"""The pipeline, top to bottom: discover files -> parse once -> model -> rules -> suppress/select -> verify."""
from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import gc
import hashlib
import json
import os
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Optional, TypeVar

T = TypeVar("T")

import libcst as cst

from .findings import Finding, Verification
from .jaxapi import Transform
from .cache import Cache, key_for
from .project import ProjectIndex, absolute, project_needs
from .semantic import Asked, ExternalCall, ModuleModel, ProjectClasses, compact, replay
from .positions import node_spans
from .rules import DEFAULT_CODES, RULES, SYNTAX_ERROR, UNSUPPORTED_SYNTAX
from .rules.base import Rule
from .rules.unused_suppression import UnusedSuppression
from .suppress import Suppressions, skips_file
from .syntax import parse_shared, sharing_parses
from .notebook import NotebookError, is_notebook, load as load_notebook, set_aside_unreadable, to_cells

if TYPE_CHECKING:
    from .fix import FixResult
    from .notebook import CellError, Notebook

SKIP_DIRS = frozenset(
    {
        ".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", "build", "dist", "__pycache__", ".mypy_cache",
        ".pytest_cache", ".ruff_cache", ".jaxlint_cache", "node_modules", ".eggs", "site-packages",
        # Jupyter's autosaved copies of every notebook (Ruff and Black skip them too)
        ".ipynb_checkpoints",
    }
)


DEFAULT_INCLUDE = ("*.py", "*.ipynb")


@dataclass
class Settings:
    paths: list[str] = field(default_factory=lambda: ["."])
    codes: set[str] = field(default_factory=lambda: set(DEFAULT_CODES))  # selected rule codes
    exclude: list[str] = field(default_factory=list)  # glob patterns, matched against path parts and paths
    force_exclude: bool = False
    verify: bool = True
    verify_timeout: float = 10.0
    verify_memory_mb: int = 2048
    jobs: int = 1  # processes; 0: chosen from the amount of work and the idle processors (auto_jobs)
    per_file_ignores: dict[str, set[str]] = field(default_factory=dict)  # glob -> codes
    trace_decorators: list[str] = field(default_factory=list)  # qualified names that act like jax.jit
    cache_dir: Optional[str] = None  # None: no cache
    # File names that folders are walked for (fnmatch on the name, or on the path when a pattern has
    # a `/`); files named explicitly are always checked.
    include: list[str] = field(default_factory=lambda: list(DEFAULT_INCLUDE))
    # Contents that stand in for files (an unsaved buffer read from stdin), by path as given.
    sources: dict[str, bytes] = field(default_factory=dict)
    # Files analysed only so that calls between them and `paths` are followed; their findings are not
    # reported (the rest of a buffer's package).
    context: list[str] = field(default_factory=list)
    tests_dir: Optional[str] = None  # verdicts recorded by `pytest --jaxlint` (None: not read)
    respect_gitignore: bool = True  # skip what .gitignore files ignore while walking folders (as Ruff)
    progress: bool = True  # a progress line on a terminal during verification
    # Also read the files of the project that import the given ones (see `importers`), for the call
    # graph only: findings are reported in the given files. For pre-commit, which passes changed files.
    with_importers: bool = False

    def cache_key(self) -> str:
        """What, besides the file itself, changes a file's static findings."""
        return json.dumps([sorted(self.codes), sorted(self.trace_decorators),
                           sorted((k, sorted(v)) for k, v in self.per_file_ignores.items())])


@dataclass
class Result:
    findings: list[Finding]
    files: int
    seconds: float
    errors: list[str] = field(default_factory=list)  # internal errors, one line each
    notes: list[str] = field(default_factory=list)  # one-line notices to show once (e.g. verification skipped)


class PathError(ValueError):
    """A path given on the command line does not exist."""


# ---- discovery --------------------------------------------------------------------------------


def _excluded(path: str, patterns: list[str]) -> bool:
    if not patterns:
        return False
    norm = path.replace(os.sep, "/")
    parts = norm.split("/")
    for pat in patterns:
        pat = pat.rstrip("/")
        if fnmatch.fnmatch(norm, pat) or fnmatch.fnmatch(norm, f"*/{pat}") or any(fnmatch.fnmatch(p, pat) for p in parts):
            return True
    return False


def _included(path: str, patterns: Iterable[str]) -> bool:
    norm = path.replace(os.sep, "/")
    name = norm.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatch(norm if "/" in p else name, p) or ("/" in p and fnmatch.fnmatch(norm, f"*/{p}"))
               for p in patterns)


def discover(paths: Iterable[str], exclude: list[str] = (), force_exclude: bool = False,  # type: ignore[assignment]
             include: Iterable[str] = DEFAULT_INCLUDE, present: Iterable[str] = (),
             respect_gitignore: bool = True) -> list[str]:
    """The Python files and notebooks to check, each once, in a stable order.

    Raises PathError for a missing path, unless it is in `present` (a buffer that stands in for it).
    """
    from .gitignore import GitIgnore

    include = list(include)
    present = set(present)
    seen: set[str] = set()
    out: list[str] = []

    def add(p: str) -> None:
        key = os.path.realpath(p)
        if key not in seen:
            seen.add(key)
            out.append(p)

    for given in paths:
        if given in present and not os.path.isdir(given):
            if not (force_exclude and _excluded(os.path.normpath(given), list(exclude))):
                add(given)
            continue
        if not os.path.lexists(given):
            raise PathError(f"path `{given}` does not exist")
        if os.path.isdir(given):
            ignored = GitIgnore(given) if respect_gitignore else None
            for root, dirs, files in os.walk(given):
                dirs[:] = sorted(
                    d for d in dirs
                    if d not in SKIP_DIRS and not d.endswith(".egg-info")
                    and not os.path.exists(os.path.join(root, d, "pyvenv.cfg"))
                    and not _excluded(os.path.normpath(os.path.join(root, d)), list(exclude))
                    and not (ignored is not None and ignored.ignored(os.path.join(root, d), is_dir=True))
                )
                for name in sorted(files):
                    p = os.path.normpath(os.path.join(root, name))
                    if not _included(p, include):
                        continue
                    if _excluded(p, list(exclude)) or not os.path.isfile(p):
                        continue
                    if ignored is not None and ignored.ignored(os.path.join(root, name), is_dir=False):
                        continue
                    add(p)
        else:
            p = os.path.normpath(given)
            if force_exclude and _excluded(p, list(exclude)):
                continue
            add(p)
    return out


def buffer_context(path: str, include: Iterable[str] = DEFAULT_INCLUDE) -> list[str]:
    """The files around a buffer named `path` that cross-file following reads: its whole top-level
    package when it is in one, else the modules beside it (which it imports by their bare names)."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return []
    top = None
    while os.path.isfile(os.path.join(folder, "__init__.py")) and os.path.dirname(folder) != folder:
        top, folder = folder, os.path.dirname(folder)
    if top is not None:
        return [_relative(top)]
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    return [_relative(os.path.join(folder, n)) for n in names
            if n.endswith(".py") and os.path.isfile(os.path.join(folder, n)) and _included(n, include)]


def _relative(path: str) -> str:
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


# ---- one file ---------------------------------------------------------------------------------


def _rules_for(codes: set[str]) -> list[type[Rule]]:
    return [r for r in RULES if r.code in codes]


def _syntax_finding(path: str, line: int, col: int, message: str) -> Finding:
    code, name, _ = SYNTAX_ERROR
    return Finding(path, line, col, line, col, code, name, message, None, Verification("not-run", ""))


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _syntax_error(raw: bytes, path: str, exc: cst.ParserSyntaxError) -> Finding:
    """CPython's own message and position where it agrees the file is invalid; libcst's otherwise."""
    if b"\x00" in raw:
        line = raw[:raw.index(b"\x00")].count(b"\n") + 1
        return _syntax_finding(path, line, 1, "The file contains a NUL byte; the file was not checked.")
    try:
        compile(raw, path, "exec", flags=0x400, dont_inherit=True)  # ast.PyCF_ONLY_AST
    except SyntaxError as py:
        if py.lineno:
            return _syntax_finding(path, py.lineno, max(1, py.offset or 1),
                                   f"Syntax error: {py.msg}; the file was not checked.")
    except (ValueError, RecursionError, MemoryError):
        pass
    else:
        # CPython reads the file: the syntax is valid, only jaxlint's parser (libcst) lacks it.
        code, name, _ = UNSUPPORTED_SYNTAX
        return Finding(path, exc.editor_line, exc.editor_column, exc.editor_line, exc.editor_column, code, name,
                       "jaxlint's parser could not read this file; it was not checked "
                       f"(CPython compiles it; the parser stopped at line {exc.editor_line}).",
                       None, Verification("not-run", ""))
    return _syntax_finding(path, exc.editor_line, exc.editor_column,
                           f"Syntax error: {_one_line(exc)}; the file was not checked.")


# What a file names when its own code can trace a function, hold a PRNG key or declare a pytree class: the
# libraries the model knows (`jax` covers jaxlib, jax_dataclasses, genjax, …) and suppression comments
# (whose findings need the analysis). See `inert`.
_JAX_MARKERS = re.compile(rb"jax|flax|equinox|haiku|treex|treeo|penzai|chex|optax|numpyro|distrax|brax|mujoco"
                          rb"|pytreeclass|simple_pytree|plum|multimethod|(?i:jaxlint|noqa)")
_IMPORTS = re.compile(rb"^[ \t]*(?:from[ \t]+(\.*)([\w.]*)[ \t]+import\b|import[ \t]+([^\n#;]+))", re.MULTILINE)
_HEAD = re.compile(rb"[\s(\\]*(\w+)")  # the top-level package an imported name starts with


def inert(raw: bytes, path: str, packages: frozenset[str], trace_decorators: Iterable[str] = ()) -> bool:
    """Whether the first pass over a file would find nothing and see no call worth following: it names no
    JAX library (`_JAX_MARKERS`) nor a part of a configured trace decorator's name, imports no module of
    the project (no relative import, no top-level package in `packages`: a project's own wrappers of
    `jax.random` or its `Array` alias reach a file that way), and CPython reads it. Such a file is only
    parsed by CPython: libcst's tree, most of what a file costs, is spared (12 % of the bytes of the 478
    repositories of the precision corpus). Called from traced code of another file, it is analysed with
    those calls as any other (`follow_across_files`)."""
    if _JAX_MARKERS.search(raw) or any(part.encode() in raw for name in trace_decorators
                                       for part in name.split(".") if part):
        return False
    for m in _IMPORTS.finditer(raw):
        if m.group(1):
            return False  # a relative import: a module of the project
        for name in [m.group(2)] if m.group(3) is None else m.group(3).split(b","):
            head = _HEAD.match(name)
            if head is not None and head.group(1).decode("ascii") in packages:
                return False
    try:
        compile(raw, path, "exec", flags=0x400, dont_inherit=True)  # ast.PyCF_ONLY_AST
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False  # (libcst's parse says what is wrong, or reads what CPython cannot)
    return True


def _extra_transforms(names: Iterable[str]) -> dict[str, Transform]:
    return {n: Transform("jit", abstract=True, cached=True, statics="jit") for n in names}


def lint_source(source: bytes | str, path: str, codes: Optional[set[str]] = None,
                trace_decorators: Iterable[str] = ()) -> list[Finding]:
    """All findings for one file's source, after suppression comments; sorted."""
    return analyse(source, path, codes, trace_decorators)[0]


def analyse(source: bytes | str, path: str, codes: Optional[set[str]] = None, trace_decorators: Iterable[str] = (),
            external: Optional[list[ExternalCall]] = None, project: Optional[ProjectClasses] = None,
            asked: Optional[list[Asked]] = None) -> tuple[list[Finding], list[ExternalCall]]:
    """Findings for one file, and the calls its traced code makes into other modules. Without `project`,
    `asked` (when given, for a Python file) receives what the analysis took for the project's answers (see
    `ModuleModel.ask`)."""
    # The tree and the model of one file are hundreds of thousands of objects that all live until
    # the file is done: the cyclic collector, run as they are allocated, would only traverse them
    # again and again (a fifth of the whole pass). Pause it for the file; what little cyclic
    # garbage the model leaves is young, and the first collection after the file frees it.
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        if is_notebook(path):
            return _analyse_notebook(source, path, codes, trace_decorators, external, project, paused)
        return _analyse(source, path, codes, trace_decorators, external, project, paused, asked)
    finally:
        if paused:
            gc.unfreeze()
            gc.enable()
            # Now rather than at some later allocation, which may come only once the next file has paused
            # the collector: its freeze would then keep this file's garbage until a full collection.
            gc.collect(0)


def _analyse(source: bytes | str, path: str, codes: Optional[set[str]], trace_decorators: Iterable[str],
             external: Optional[list[ExternalCall]], project: Optional[ProjectClasses] = None,
             freeze_tree: bool = False, asked: Optional[list[Asked]] = None
             ) -> tuple[list[Finding], list[ExternalCall]]:
    """With `freeze_tree` (the collector paused by the caller, who unfreezes it afterwards), the parsed tree
    is frozen away from the collector: it holds no cycles and dies with the model that refers to it, so
    the collection after the file need not traverse its nodes (most of what that collection costs)."""
    codes = set(DEFAULT_CODES) if codes is None else codes
    raw = source.encode("utf-8") if isinstance(source, str) else source
    if skips_file(raw):
        return [], []
    try:
        module = parse_shared(raw)
    except cst.ParserSyntaxError as exc:
        return _only_if(codes, _syntax_error(raw, path, exc)), []
    except (SyntaxError, UnicodeDecodeError, LookupError) as exc:
        return _only_if(codes, _syntax_finding(
            path, 1, 1, f"Cannot decode the file ({_one_line(exc)}); the file was not checked.")), []
    except RecursionError:
        return _only_if(codes, _syntax_finding(
            path, 1, 1, "The file is nested too deeply for the parser; the file was not checked.")), []
    if freeze_tree:
        gc.freeze()
    return check_module(module, raw, path, codes, _extra_transforms(trace_decorators), external, project, asked)


def _analyse_notebook(source: bytes | str, path: str, codes: Optional[set[str]], trace_decorators: Iterable[str],
                      external: Optional[list[ExternalCall]], project: Optional[ProjectClasses] = None,
                      freeze_tree: bool = False) -> tuple[list[Finding], list[ExternalCall]]:
    """A notebook's code cells analysed as one module; positions in (cell, line within the cell)."""
    codes = set(DEFAULT_CODES) if codes is None else codes
    raw = source.encode("utf-8") if isinstance(source, str) else source
    try:
        nb = load_notebook(raw)
    except NotebookError as exc:
        return _only_if(codes, _syntax_finding(path, 1, 1, f"Cannot read the notebook: {exc}; the file was not checked.")), []
    if _notebook_skipped(nb):
        return [], []
    broken = [dataclasses.replace(_syntax_finding(path, e.line, e.column, e.message), cell=e.cell) for e in nb.errors]
    # Cells that only libcst rejects are left out and the rest checked, as for cells that do not parse.
    # The first analysis tells (an unsupported-syntax finding) unless that rule is not selected: then
    # libcst is asked beforehand.
    unsupported = UNSUPPORTED_SYNTAX[0]
    unreadable = set_aside_unreadable(nb) if unsupported not in codes else []
    found, calls = _analyse(nb.text, path, codes, trace_decorators, external, project, freeze_tree) \
        if nb.cells else ([], [])
    if any(f.code == unsupported for f in found):
        unreadable = set_aside_unreadable(nb)
        if unreadable:
            found, calls = _analyse(nb.text, path, codes, trace_decorators, external, project, freeze_tree)
    broken += [_unsupported_cell(path, e) for e in unreadable]
    found = to_cells(nb, found) + [f for f in broken if f.code in codes]
    found.sort(key=Finding.sort_key)
    return found, calls


def _unsupported_cell(path: str, error: "CellError") -> Finding:
    code, name, _ = UNSUPPORTED_SYNTAX
    return Finding(path, error.line, error.column, error.line, error.column, code, name, error.message, None,
                   Verification("not-run", ""), cell=error.cell)


def _only_if(codes: set[str], finding: Finding) -> list[Finding]:
    return [finding] if finding.code in codes else []


def lint_for_fix(settings: "Settings") -> "Callable[[bytes, str], tuple[list[Finding], Optional[cst.Module]]]":
    """A lint function for fix.fix_source: findings whose edits refer to the returned tree."""

    def lint(data: bytes, path: str) -> tuple[list[Finding], Optional[cst.Module]]:
        if skips_file(data):  # `# jaxlint: skip-file`: not checked, so never fixed either
            return [], None
        try:
            module = cst.parse_module(data)
        except Exception:
            return [], None
        codes = codes_for(path, settings) - {UnusedSuppression.code}
        transforms = _extra_transforms(settings.trace_decorators)
        asked: list[Asked] = []
        found, calls = check_module(module, data, path, codes, transforms, asked=asked)
        if path.endswith(".py"):
            # As run()'s with_project_classes: never fix what the project's classes show is no hazard.
            index = ProjectIndex([path], module_name)
            need = project_needs(found, calls, index, path)
            project = index.for_file(path, data, {f.name for f in found}, keys_only=need == "keys") \
                if need is not None else None
            if project is not None and not replay(project, asked):
                found, _ = check_module(module, data, path, codes, transforms, project=project)
        return found, module

    return lint


def fix_paths(settings: "Settings", unsafe: bool, write: bool) -> tuple[list["FixResult"], list[str]]:
    """Apply (or, with write=False, only compute) the autofixes of every file; (results, error lines)."""
    from .fix import FileChanged, fix_source, write_atomic
    from .suppress import remove_unused

    lint = lint_for_fix(settings)
    results: list[FixResult] = []
    errors: list[str] = []
    # Whether a suppression is unused can depend on traced callers in other files, which the per-file
    # fix loop does not see: take those findings from a whole run and remove them as text first.
    stale: dict[str, list[Finding]] = {}
    if UnusedSuppression.code in settings.codes:
        for f in run(dataclasses.replace(settings, verify=False)).findings:
            if f.code == UnusedSuppression.code:
                stale.setdefault(f.path, []).append(f)
    for path in _discover(settings):
        data, err = _read(path, settings.sources)
        if data is None:
            continue
        try:
            if is_notebook(path):
                res = _fix_notebook(data, path, lint, unsafe, stale.get(path, []))
                if res is None:
                    continue
            else:
                start, removed = remove_unused(data, stale[path]) if path in stale else (data, 0)
                res = fix_source(start, path, lint, unsafe=unsafe)
                res.original = data
                res.applied[:0] = stale.get(path, [])[:removed]
        except Exception as exc:  # never write a half-fixed file
            errors.append(f"could not fix {path}: {type(exc).__name__}: {exc}")
            continue
        if not res.changed:
            continue
        if write and path not in settings.sources:
            try:
                write_atomic(path, res.fixed, expected_original=data)
            except (FileChanged, OSError) as exc:
                errors.append(str(exc))
                continue
        results.append(res)
    return results, errors


def _fix_notebook(data: bytes, path: str, lint: "Callable[[bytes, str], tuple[list[Finding], Optional[cst.Module]]]",
                  unsafe: bool, stale: list[Finding] = ()) -> "Optional[FixResult]":  # type: ignore[assignment]
    """Fix a notebook's joined cells (first removing the unused suppressions in `stale`, which are
    positioned in cells), then write the changed cells back into its JSON."""
    from .fix import fix_source
    from .notebook import split_cells, write_sources
    from .suppress import remove_unused

    try:
        nb = load_notebook(data)
    except NotebookError:
        return None  # reported by the lint run as a finding
    if _notebook_skipped(nb):
        return None
    set_aside_unreadable(nb)  # cells libcst cannot read are left as they are
    text = nb.text.encode("utf-8")
    start, removed = text, 0
    if stale:
        in_module = [dataclasses.replace(f, line=nb.module_line(f.cell, f.line),
                                         end_line=nb.module_line(f.cell, f.end_line), cell=None)
                     for f in stale if f.cell is not None]
        start, removed = remove_unused(text, in_module)
    res = fix_source(start, path, lint, unsafe=unsafe)
    res.applied[:0] = list(stale)[:removed]
    if res.fixed == text:
        return None
    changed = split_cells(nb, res.fixed.decode("utf-8"))
    return dataclasses.replace(res, original=data, fixed=write_sources(data, nb, changed))


def _notebook_skipped(nb: "Notebook") -> bool:
    """`# jaxlint: skip-file` in any code cell skips the whole notebook (the file it names), even in a
    cell that does not parse; each cell is read on its own, so one broken cell cannot hide it."""
    return any(skips_file("\n".join(c.lines).encode("utf-8")) for c in nb.cells)


def _discover(settings: Settings) -> list[str]:
    return discover(settings.paths, settings.exclude, settings.force_exclude, settings.include, settings.sources,
                    settings.respect_gitignore)


def add_noqa(settings: "Settings") -> tuple[int, list[str]]:
    """Add `# jaxlint: ignore[...]` to every line with a finding; (comments added, error lines)."""
    from .fix import FileChanged, write_atomic
    from .suppress import add_ignore_comments

    result = run(dataclasses.replace(settings, verify=False))
    by_path: dict[str, list[Finding]] = {}
    for f in result.findings:
        # A comment cannot silence a file that was not parsed, nor a finding about a comment.
        if f.name not in (SYNTAX_ERROR[1], UNSUPPORTED_SYNTAX[1], "invalid-suppression", UnusedSuppression.name):
            by_path.setdefault(f.path, []).append(f)
    added = 0
    errors = list(result.errors)
    for path, found in sorted(by_path.items()):
        data, err = _read(path, settings.sources)
        if data is None or path in settings.sources:
            continue
        try:
            if is_notebook(path):
                from .notebook import split_cells, write_sources

                nb = load_notebook(data)
                set_aside_unreadable(nb)
                lines = [dataclasses.replace(f, line=nb.module_line(f.cell, f.line), cell=None) for f in found]
                text, count = add_ignore_comments(nb.text.encode("utf-8"), lines)
                cst.parse_module(text)
                new = write_sources(data, nb, split_cells(nb, text.decode("utf-8"))) if count else data
            else:
                new, count = add_ignore_comments(data, found)
                if count:
                    cst.parse_module(new)
            if count == 0:
                continue
            write_atomic(path, new, expected_original=data)
        except (FileChanged, OSError, cst.ParserSyntaxError, ValueError) as exc:
            errors.append(f"could not add suppressions to {path}: {exc}")
            continue
        added += count
    return added, errors


def check_module(module: cst.Module, raw: bytes, path: str, codes: set[str],
                 extra_transforms: Optional[dict[str, Transform]] = None,
                 external: Optional[list[ExternalCall]] = None, project: Optional[ProjectClasses] = None,
                 asked: Optional[list[Asked]] = None) -> tuple[list[Finding], list[ExternalCall]]:
    rules = [r() for r in _rules_for(codes)]
    if not rules:
        return [], []
    dispatch: dict[type, list] = {}
    for rule in rules:
        for tp, meth in rule.visitors().items():
            dispatch.setdefault(tp, []).append((rule, getattr(rule, meth)))
    model = ModuleModel(module, path, frozenset(dispatch), extra_transforms, external, project, source=raw)
    try:
        return _check(model, module, raw, path, codes, rules, dispatch)
    finally:
        if asked is not None:
            asked += model.asked
        model.dispose()


def _check(model: ModuleModel, module: cst.Module, raw: bytes, path: str, codes: set[str], rules: list[Rule],
           dispatch: dict[type, list]) -> tuple[list[Finding], list[ExternalCall]]:
    calls = [dataclasses.replace(c, origin=path)
             for c in list(model.external_calls.values()) + model.ref_handoffs()]
    from .rules.base import Where  # local: keeps the import graph of this module small

    tops: set[Optional[int]] = set()  # the top-level statements holding the reported nodes
    # per scope (by id), the visitors per node type that apply there: all of them in (or in) a traced
    # function, else only those of the rules that look anywhere
    anywhere = {tp: [(rule, visit) for rule, visit in handlers if rule.anywhere] for tp, handlers in dispatch.items()}
    scope_dispatch: dict[int, dict[type, list]] = {}
    for rec in model.records:
        scope = rec.scope
        table = scope_dispatch.get(id(scope))
        if table is None:
            table = scope_dispatch[id(scope)] = dispatch if model.traced_function(scope) is not None else anywhere
        handlers = table[type(rec.node)]
        if not handlers:
            continue
        where = Where(model, scope, rec.loop, rec.guards)
        for rule, visit in handlers:
            before = len(rule.reports)
            visit(rec.node, where)
            if len(rule.reports) != before:
                tops.add(rec.top)
    reports = [(rule, rep) for rule in rules for rep in rule.reports]
    calls += [ExternalCall(q, (), False, False, "", path, kind="key") for q in sorted(model.key_handoffs)]
    calls += [ExternalCall(name, (), False, False, "", path, kind="global") for name in sorted(model.constants_trusted)]
    suppressions = Suppressions.scan(raw)
    if not reports:
        return sorted(suppressions.findings(path, codes), key=Finding.sort_key), calls
    # Positions cost code generation: only files with findings pay for it, and only for the
    # top-level statements that hold them.
    wanted: list[cst.CSTNode] = []
    for rule, rep in reports:
        wanted.append(rep.node)
        if rep.end_node is not None:
            wanted.append(rep.end_node)
        wanted.extend((rep.subject_nodes or {}).values())
        fn = rep.function
        if fn is not None and (rep.target or fn.target) is not None:
            wanted.append(fn.node.name if isinstance(fn.node, cst.FunctionDef) else fn.node)
            tops.add(fn.top)
    try:
        text: Optional[str] = raw.decode(module.encoding)
    except (UnicodeDecodeError, LookupError):
        text = None
    positions = node_spans(module, text, wanted, tops)
    findings: list[Finding] = []
    for rule, rep in reports:
        start_line, start_col = positions[id(rep.node)][:2]
        end_line, end_col = positions[id(rep.end_node if rep.end_node is not None else rep.node)][2:]
        if suppressions.suppresses(start_line, rule.code):
            continue
        target = None
        fn = rep.function
        chosen = rep.target or (fn.target if fn is not None else None)
        if fn is not None and chosen is not None:
            name_node = fn.node.name if isinstance(fn.node, cst.FunctionDef) else fn.node
            target = dataclasses.replace(chosen, def_line=positions[id(name_node)][0])
        subject = dict(rep.subject) if rep.subject is not None else None
        if subject is not None and rep.subject_nodes:
            subject.update({k: positions[id(n)][0] for k, n in rep.subject_nodes.items()})
        findings.append(
            Finding(
                path, start_line, start_col + 1, end_line, end_col + 1, rule.code, rule.name, rep.message,
                fn.qualname if fn is not None else None, Verification(), rep.fix, target, rep.edit,
                subject=subject,
            )
        )
    findings += suppressions.findings(path, codes)
    findings.sort(key=Finding.sort_key)
    return findings, calls


def _read(path: str, sources: Optional[dict[str, bytes]] = None) -> tuple[Optional[bytes], Optional[str]]:
    if sources and path in sources:
        return sources[path], None
    try:
        with open(path, "rb") as f:
            return f.read(), None
    except OSError as exc:
        return None, exc.strerror or str(exc)


def codes_for(path: str, settings: Settings) -> set[str]:
    """The selected codes minus the per-file ignores matching this path."""
    codes = settings.codes
    for pattern, ignored in settings.per_file_ignores.items():
        if _excluded(path, [pattern]):
            codes = codes - ignored
    return codes


def _analyse_file(path: str, settings: Settings, external: Optional[list[ExternalCall]] = None,
                  data: Optional[bytes] = None, asked: Optional[list[Asked]] = None
                  ) -> tuple[list[Finding], list[ExternalCall], Optional[str]]:
    """(findings, calls into other modules, internal error) for one file; never raises. `asked`: see
    `analyse`."""
    if data is None:
        data, err = _read(path, settings.sources)
        if data is None:
            return [_syntax_finding(path, 1, 1, f"Cannot read the file ({err}); the file was not checked.")], [], None
    try:
        found, calls = analyse(data, path, codes_for(path, settings), settings.trace_decorators, external,
                               asked=asked)
    except RecursionError:
        found, calls = [_syntax_finding(path, 1, 1, "The file is nested too deeply to analyse; "
                                        "the file was not checked.")], []
    except Exception as exc:  # a bug in jaxlint must not hide the other files' findings
        return [], [], f"internal error while checking {path}: {type(exc).__name__}: {exc}"
    for f in found:
        f.edit = None  # edits hold tree nodes: they serve --fix only, which analyses afresh
    return found, calls, None


Row = tuple[str, list[Finding], list[ExternalCall], Optional[str]]
Item = tuple[str, Optional[list[ExternalCall]]]  # a path, and the calls into it from other files
Job = tuple[str, Optional[list[ExternalCall]], Optional[bytes]]  # an item, and its bytes when already read


# A file's analysis knowing the project, done by a pool worker right after the file's first pass (see
# `_Workers.project`): the digest of the bytes analysed, the rules the first pass found (what the project
# is asked about), and what `_refine` gave.
Early = tuple[bytes, frozenset[str], Optional[tuple[list[Finding], list[ExternalCall]]]]
# The project's files and the files whose findings are reported, for the workers' early project pass.
EarlyFor = tuple[list[str], frozenset[str]]
# What a file's pass without the project took for the project's answers (see `ModuleModel.ask`), with the
# digest of the bytes analysed and the calls into it from other files it was analysed with.
Taken = tuple[bytes, Optional[list[ExternalCall]], list[Asked]]


def _analyse_chunk(args: tuple[list[Job], Settings, Optional[EarlyFor], bool]
                   ) -> tuple[list[Row], dict[str, Early], list[str], dict[str, Taken]]:
    """Rows for the jobs. With the project (`early_for`, a first pass), files that `inert` says hold
    nothing are not parsed, and with `refine` (a pool worker) the reported files are analysed knowing the
    project right after their first pass (see `_Workers.project`). Also the files found inert, and what
    the files the project pass may analyse again took for the project's answers."""
    jobs, settings, early_for, refine = args
    early: dict[str, Early] = {}
    inert_paths: list[str] = []
    taken: dict[str, Taken] = {}
    packages = _project_packages(early_for[0]) if early_for is not None else frozenset()

    def one(path: str, ext: Optional[list[ExternalCall]], data: Optional[bytes]) -> Row:
        if early_for is None or not path.endswith(".py"):
            return (path, *_analyse_file(path, settings, ext, data))
        if data is None:
            data, _err = _read(path, settings.sources)
            if data is None:
                return (path, *_analyse_file(path, settings, ext, data))
        if ext is None and inert(data, path, packages, settings.trace_decorators):
            inert_paths.append(path)
            return (path, [], [], None)
        asked: list[Asked] = []
        early_pass = refine and ext is None and path in early_for[1]
        with sharing_parses() if early_pass else contextlib.nullcontext():  # (the project pass below
            found, calls, err = _analyse_file(path, settings, ext, data, asked)  # analyses the same tree again)
            if err is not None or not found and not any(c.kind in ("key", "global") for c in calls):
                return (path, found, calls, err)  # (nothing the project pass would look at again)
            asked = compact(asked)
            taken[path] = (hashlib.sha256(data).digest(), ext, asked)
            if early_pass and project_needs(found) == "all":
                asking = frozenset(f.name for f in found)
                out = _refine((path, data, None, asking, False, asked), _worker_index(early_for[0]), settings)
                early[path] = (taken[path][0], asking, (found, calls) if out == SAME else out)
        return (path, found, calls, err)

    rows = with_deep_stack(lambda: [one(p, ext, data) for p, ext, data in jobs])
    return rows, early, inert_paths, taken


# What a process keeps about the project it was last given (a pool worker, between the chunks it is handed):
# "project" (the files, joined) and, made on first use, "packages" and "index".
_PER_PROJECT: dict[str, object] = {}


def _kept_for(project: list[str], what: str, make: "Callable[[], T]") -> "T":
    """`make()`, kept while this process is given the same project, made anew for another."""
    marker = "\0".join(project)
    if _PER_PROJECT.get("project") != marker:
        _PER_PROJECT.clear()
        _PER_PROJECT["project"] = marker
    if what not in _PER_PROJECT:
        _PER_PROJECT[what] = make()
    return _PER_PROJECT[what]  # type: ignore[return-value]


def _project_packages(project: list[str]) -> frozenset[str]:
    """The top-level packages (and script modules) of the project's files: what a file importing the project
    names first (see `inert`)."""
    return _kept_for(project, "packages", lambda: frozenset(
        name.split(".")[0] for p in project if not is_notebook(p)
        for name in (module_name(p), namespace_name(p)) if name))


def with_deep_stack(fn: "Callable[[], T]") -> "T":
    """Run `fn` in a thread with a large stack and recursion limit.

    Deeply nested code (thousands of chained operators, hundreds of nested calls) is valid Python;
    the tree walks are recursive, and the default limits would turn such files into errors.
    """
    import sys
    import threading

    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # re-raised in the calling thread
            box["error"] = exc

    old_limit = sys.getrecursionlimit()
    old_size = threading.stack_size()
    try:
        threading.stack_size(512 * 1024 * 1024)
        sys.setrecursionlimit(max(old_limit, 60000))
        t = threading.Thread(target=target, name="jaxlint-analysis")
        t.start()
        t.join()
    finally:
        threading.stack_size(old_size)
        sys.setrecursionlimit(old_limit)
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]


# Source bytes worth a process of their own. The static pass costs about 8 µs of CPU per byte, and a
# pool costs a fixed 0.1-0.25 s (forking, results sent back) plus about a tenth more CPU: below about
# 64 KiB per process the pool loses to one process (measured with the bundled fixtures, 160 KiB, and a
# generated tree of 2,000 small files, 600 KiB).
BYTES_PER_JOB = 64 * 1024


def idle_cpus() -> int:
    """Processors this process may use that other work does not keep busy (1-minute load average)."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # no load average on this platform: assume the processors are free
        return n
    return max(1, min(n, n - int(load)))


def auto_jobs(total_bytes: int) -> int:
    """The default number of processes: one below BYTES_PER_JOB per process, never more than are idle.
    On a machine whose processors are all busy, more processes only add their overhead."""
    return max(1, min(idle_cpus(), total_bytes // BYTES_PER_JOB))


def _worker_start() -> None:
    """A pool worker dies of Ctrl-C (a terminal signals the whole process group) and of the parent's
    `terminate()`: caught as an exception (the CLI's SIGTERM handler is inherited by a fork), either would
    report the interrupted file and wait for more work, outliving a parent that has stopped."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


class _Workers:
    """Runs the per-file analysis over `settings.jobs` processes when there is enough work; the same
    processes serve the first pass and the re-analyses of cross-file following. It owns the result
    cache: files are looked up here, only misses are analysed, and new entries are written once, at
    the end of the run (a write per file made a first run slower than no cache)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.jobs = max(0, settings.jobs)
        self.pool = None
        self.cache = Cache(settings.cache_dir) if settings.cache_dir else None
        # Set by `run` for its first pass: the project's files and the reported ones. A worker then analyses
        # a reported file whose findings the project's classes and functions may change knowing the project
        # too, right after its first pass (on the tree just parsed), and keeps the results in `early` for
        # `with_project_classes`. Spread over the first pass, that work balances across the workers; done
        # after it, the one file whose project pass is slowest keeps one worker busy while the other waits.
        self.project: Optional[EarlyFor] = None
        self.early: dict[str, Early] = {}
        # Files the first pass found `inert`: their empty rows are not cached, since whether a file is inert
        # depends on the project's other files (the packages it may import), which the cache key leaves out.
        self.inert: set[str] = set()
        # What each file's last pass (with findings) took for the project's answers: where the project
        # answers the same, its project pass would find the same (see `_refine`).
        self.taken: dict[str, Taken] = {}

    def __enter__(self) -> "_Workers":
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if self.pool is not None:
            if exc_type is not None:
                # Interrupted (or failed): the workers' chunks are not wanted; stop them now rather than
                # wait for the files they are on.
                for proc in list(getattr(self.pool, "_processes", {}).values()):
                    proc.terminate()
                self.pool.shutdown(wait=False, cancel_futures=True)
            else:
                self.pool.shutdown()
            self.pool = None
        if self.cache is not None and exc_type is None:
            self.cache.flush()

    def run(self, items: list[Item]) -> list[Row]:
        """One row per item, in the order of `items` (output never depends on the number of jobs)."""
        rows: list[Optional[Row]] = [None] * len(items)
        todo: list[int] = []
        jobs: list[Job] = []
        keys: dict[int, str] = {}
        for i, (path, ext) in enumerate(items):
            data: Optional[bytes] = None
            if self.cache is not None:
                data, _ = _read(path, self.settings.sources)  # analysed from these bytes: the key matches
                if data is not None:
                    keys[i] = key_for(data, self.settings.cache_key() + "|" + path, ext or [])
                    hit = self.cache.get(keys[i], path)
                    if hit is not None:
                        rows[i] = (path, hit[0], hit[1], None)
                        self.taken.pop(path, None)  # (not known of a row read back)
                        continue
            todo.append(i)
            jobs.append((path, ext, data))
        for i, row in zip(todo, self._analyse(jobs)):
            rows[i] = row
            if self.cache is not None and i in keys and row[3] is None and row[0] not in self.inert:
                self.cache.put(keys[i], row[0], row[1], row[2])
        return rows  # type: ignore[return-value]

    def _analyse(self, items: list[Job]) -> list[Row]:
        sizes = []
        for path, _, data in items:
            try:
                sizes.append(len(data) if data is not None else os.path.getsize(path))
            except OSError:
                sizes.append(0)
        jobs = self.jobs or auto_jobs(sum(sizes))  # 0 (auto): decided per batch until a pool exists
        if jobs == 1 or len(items) < (2 if self.pool is not None else 2 * jobs):
            rows, _early, inert_paths, taken = _analyse_chunk((items, self.settings, self.project, False))
            self._took(rows, taken)
            self.inert.update(inert_paths)
            return rows
        if self.pool is None:
            self.jobs = jobs  # the pool's size from now on
            import concurrent.futures
            import multiprocessing

            ctx = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
            self.pool = concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=ctx,
                                                               initializer=_worker_start)
        # Largest files first, in chunks of about equal bytes small enough to balance the tail.
        order = sorted(range(len(items)), key=lambda i: -sizes[i])
        target = max(1, sum(sizes) // (jobs * 16))
        chunks: list[list[int]] = []
        current: list[int] = []
        weight = 0
        for i in order:
            current.append(i)
            weight += sizes[i]
            if weight >= target or len(current) >= 32:
                chunks.append(current)
                current, weight = [], 0
        if current:
            chunks.append(current)
        rows: list[Optional[Row]] = [None] * len(items)
        done = self.pool.map(_analyse_chunk, [([items[i] for i in chunk], self.settings, self.project, True)
                                              for chunk in chunks])
        for chunk, (chunk_rows, early, inert_paths, taken) in zip(chunks, done):
            for i, row in zip(chunk, chunk_rows):
                rows[i] = row
            self._took(chunk_rows, taken)
            self.early.update(early)
            self.inert.update(inert_paths)
        return rows  # type: ignore[return-value]

    def _took(self, rows: list[Row], taken: dict[str, Taken]) -> None:
        """Keep what the files just analysed took for the project's answers (forget an earlier pass's)."""
        for path, *_ in rows:
            self.taken.pop(path, None)
        self.taken.update(taken)


def analyse_files(files: list[str], settings: Settings, workers: Optional[_Workers] = None
                  ) -> tuple[dict[str, tuple[list[Finding], list[ExternalCall]]], list[str]]:
    """The per-file static pass, over `settings.jobs` processes when there is enough work."""
    results: dict[str, tuple[list[Finding], list[ExternalCall]]] = {}
    errors: list[str] = []
    if workers is None:
        with _Workers(settings) as own:
            rows = own.run([(p, None) for p in files])
    else:
        rows = workers.run([(p, None) for p in files])
    for path, found, calls, err in rows:
        results[path] = (found, calls)
        if err:
            errors.append(err)
    return results, errors


def module_name(path: str) -> str:
    """The dotted module name of a file, climbing through packages (folders with `__init__.py`)."""
    full = os.path.abspath(path)
    folder, base = os.path.split(full)
    parts = [] if base == "__init__.py" else [base[:-3] if base.endswith(".py") else base]
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        folder, name = os.path.split(folder)
        parts.insert(0, name)
        if not name:
            break
    return ".".join(parts)


def namespace_name(path: str) -> Optional[str]:
    """The module name a file has inside a namespace package: its package's folder sits in a folder
    without `__init__.py` (`src/galax/potential/base.py` imported as `galax.potential.base`)."""
    name = module_name(path)
    if "." not in name and os.path.basename(path) != "__init__.py":
        return None  # (a top-level module is not a package's)
    folder = os.path.abspath(path)
    for _ in range(name.count(".") + 1 + (os.path.basename(path) == "__init__.py")):
        folder = os.path.dirname(folder)
    portion = os.path.basename(folder)
    return f"{portion}.{name}" if portion.isidentifier() else None


def follow_across_files(files: list[str], results: dict[str, tuple[list[Finding], list[ExternalCall]]],
                        settings: Settings, errors: list[str], rounds: int = 6,
                        workers: Optional[_Workers] = None,
                        seeds: Optional[dict[str, dict[tuple, ExternalCall]]] = None) -> None:
    """Re-analyse modules whose functions are called from traced code in other files of the project
    (`seeds`, when given, receives the calls each module was re-analysed with)."""
    by_module = {name: p for p in files if not is_notebook(p)  # a notebook is never imported
                 for name in (namespace_name(p), module_name(p)) if name}
    seeds = {} if seeds is None else seeds
    pending = list(files)
    for _ in range(rounds):
        touched: set[str] = set()
        for path in pending:
            caller_mod = module_name(path)
            is_pkg = os.path.basename(path) == "__init__.py"
            for call in results[path][1]:
                if call.kind in ("key", "global"):
                    continue  # (a key handed to another file is asked of the project summaries instead)
                full = absolute(call.qualname, caller_mod, is_pkg)
                mod, _, func = full.rpartition(".")
                if mod not in by_module and "." in mod:  # `pkg.models.CNN.__call__`: a method of a class
                    mod, _, cls = mod.rpartition(".")
                    func = f"{cls}.{func}"
                target = by_module.get(mod)
                if target is None or target == path:
                    continue
                key = (call.origin, call.caller, call.qualname, call.kind,
                       tuple((a.traced, a.pytree) for a in call.args))
                bucket = seeds.setdefault(target, {})
                if key not in bucket:
                    bucket[key] = dataclasses.replace(call, qualname=func)
                    touched.add(target)
        if not touched:
            return
        items: list[Item] = [(target, list(seeds[target].values())) for target in sorted(touched)]
        if workers is None:
            with _Workers(settings) as own:
                rows = own.run(items)
        else:
            rows = workers.run(items)
        for target, found, calls, err in rows:
            results[target] = (found, calls)
            if err:
                errors.append(err)
        pending = sorted(touched)


# Files that mark the top folder of a project, nearest first.
PROJECT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")


def project_root(path: str) -> Optional[str]:
    """The nearest folder above `path` holding a project marker (pyproject.toml, setup.py, setup.cfg, .git)."""
    folder = os.path.dirname(os.path.abspath(path))
    while True:
        if any(os.path.exists(os.path.join(folder, m)) for m in PROJECT_MARKERS):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def importers(files: list[str], settings: Settings, rounds: int = 1) -> list[str]:
    """The files of the given files' projects that import them (with `rounds` > 1, also their importers).

    A file counts when its text names the module of a given file (or of an importer found before)
    as a whole word: cheap, and it errs on the side of reading a file too many. Cross-file following
    then decides from the real imports which calls reach the given files. One round is enough while
    that following goes one file deep (a function a transform traces directly, calling into another
    file: semantic/traced.py); importers of importers could not change the given files' findings.
    """
    given = {os.path.realpath(p) for p in files}
    roots: set[str] = set()
    for path in files:
        root = project_root(path)
        if root is not None:
            rel = os.path.relpath(root)
            # Relative where the root holds the current folder, so paths (and cache keys) are the
            # ones a run over the whole project uses.
            roots.add(root if rel.startswith("..") else rel)
    if not roots:
        return []
    candidates = [p for p in discover(sorted(roots), settings.exclude, include=settings.include,
                                      respect_gitignore=settings.respect_gitignore)
                  if os.path.realpath(p) not in given]
    texts: dict[str, bytes] = {}
    found: list[str] = []
    frontier = list(files)
    for _ in range(rounds):
        names = {module_name(p).rpartition(".")[2] for p in frontier if not is_notebook(p)} - {""}
        if not names or not candidates:
            break
        word = re.compile(rb"\b(?:" + b"|".join(re.escape(n.encode()) for n in sorted(names)) + rb")\b")
        frontier = []
        for path in candidates:
            if path not in texts:
                texts[path] = _read(path)[0] or b""
            if word.search(texts[path]):
                frontier.append(path)
        found += frontier
        taken = set(frontier)
        candidates = [p for p in candidates if p not in taken]
    return found


def with_project_classes(files: list[str], results: dict[str, tuple[list[Finding], list[ExternalCall]]],
                         settings: Settings, seeds: dict[str, dict[tuple, ExternalCall]],
                         project_files: Optional[list[str]] = None, cache: Optional[Cache] = None,
                         workers: Optional[_Workers] = None) -> None:
    """Analyse again, knowing the classes they import from the project, the files whose findings
    depend on it (few: most files have no findings). `project_files` (default: `files`) are the
    modules whose classes count. Notebooks are left as they are: nothing imports them, and their
    cells rarely import the project's pytree classes by relative names. With a `cache`, what a file's
    analysis found knowing the project is kept under the contents of every project file, so a run over
    an unchanged project reads it back instead of modelling the modules it imports again. With `workers`
    whose pool is running, the files are analysed there, each worker keeping its own index of the
    project between the files it is given."""
    index: Optional[ProjectIndex] = None
    project_key: Optional[str] = None
    project = project_files if project_files is not None else files
    pending = [p for p in files if p.endswith(".py")]
    reported = set(pending)
    early = workers.early if workers is not None else {}
    taken = workers.taken if workers is not None else {}
    for round_ in range(3):
        dropped: dict[str, list[ExternalCall]] = {}  # what a file's traced code calls, known the project
        todo: list[Refine] = []
        keys: list[Optional[str]] = []
        for path in pending:
            found, calls = results[path]
            if any(c.kind in ("key", "global") for c in calls):
                index = index or ProjectIndex(project_files if project_files is not None else files, module_name)
            need = project_needs(found, calls, index, path)
            if need is None:
                continue
            data, _err = _read(path, settings.sources)  # a buffer from standard input is what was analysed
            if data is None:
                continue
            external = list(seeds.get(path, {}).values()) or None
            key = None
            if cache is not None:
                if project_key is None:
                    project_key = _project_key(project_files if project_files is not None else files, settings)
                key = key_for(data, f"{settings.cache_key()}|project:{project_key}|{path}", external or [])
                hit = cache.get(key, path)
                if hit is not None:
                    results[path] = (hit[0], calls)
                    dropped[path] = hit[1]
                    continue
            took = taken.get(path)
            asked = took[2] if took is not None and took[:2] == (hashlib.sha256(data).digest(), external) else None
            todo.append((path, data, external, frozenset(f.name for f in found), need == "keys", asked))
            keys.append(key)
        # Analysed so already by a worker, right after its first pass (see `_Workers.project`): the same
        # bytes, no calls into it from other files, the same findings asked about.
        done: dict[int, Optional[tuple[list[Finding], list[ExternalCall]] | str]] = {}
        for i, (path, data, external, asking, keys_only, _asked) in enumerate(todo):
            got = early.get(path) if round_ == 0 and external is None and not keys_only else None
            if got is not None and got[:2] == (hashlib.sha256(data).digest(), asking):
                done[i] = got[2]
        rest = [i for i in range(len(todo)) if i not in done]
        if workers is not None and workers.pool is not None and len(rest) >= 2:
            done.update(zip(rest, workers.pool.map(_refine_in_worker, [(todo[i], project, settings) for i in rest])))
        elif rest:
            index = index or ProjectIndex(project, module_name)
            done.update((i, _refine(todo[i], index, settings)) for i in rest)
        for i, ((path, *_), key) in enumerate(zip(todo, keys)):
            out = done[i]
            if out is None:
                continue
            refined, refined_calls = results[path] if out == SAME else out
            results[path] = (refined, results[path][1])
            dropped[path] = refined_calls
            if cache is not None and key is not None:
                cache.put(key, path, refined, refined_calls)
        # A call the first pass followed into another file that the file's code no longer makes once the
        # project is known (its caller is traced only through a jitted alias nothing calls): the files it
        # reached are analysed again without it.
        pending = sorted(_drop_stale_seeds(seeds, dropped, reported))
        if not pending:
            return
        for path in pending:
            data, _err = _read(path, settings.sources)
            if data is None:
                continue
            external = list(seeds.get(path, {}).values()) or None
            asked = []
            found, calls, err = _analyse_file(path, settings, external, data, asked)
            taken.pop(path, None)
            if err is None:  # (an internal error keeps what the first pass found)
                results[path] = (found, calls)
                taken[path] = (hashlib.sha256(data).digest(), external, compact(asked))


# A file to analyse again knowing the project: its path, the bytes analysed, the calls into it from
# other files, the rules its first pass found (what the project is asked about), whether only the
# key-consuming functions of the project bear on them (see project.project_needs), and what the pass
# without the project took for its answers, when known (see `ModuleModel.ask`).
Refine = tuple[str, bytes, Optional[list[ExternalCall]], frozenset[str], bool, Optional[list[Asked]]]

# What `_refine` gives for a file whose pass knowing the project would find what the pass without it found.
SAME = "same"


def _refine(item: Refine, index: ProjectIndex, settings: Settings
            ) -> Optional[tuple[list[Finding], list[ExternalCall]] | str]:
    """A file's findings and calls into other files, analysed knowing the project (None: nothing the
    project says bears on it, or the file is nested too deeply). SAME, without analysing the file again,
    when the project answers every question the pass without it asked as that pass took it: the pass
    knowing the project would take the same path to the same findings and calls. (Only the keys the pass
    without the project saw handed to other files' functions differ: it lists them to ask the project
    about, while the pass knowing the project asks as it goes; the project pass follows no such call.)"""
    path, data, external, asking, keys_only, asked = item
    project = index.for_file(path, data, asking, keys_only)
    if project is None:
        return None
    if asked is not None and replay(project, asked):
        return SAME
    try:
        found, calls = with_deep_stack(lambda: analyse(
            data, path, codes_for(path, settings), settings.trace_decorators, external, project))
    except RecursionError:
        return None
    for f in found:
        f.edit = None  # (as the first pass: edits hold tree nodes, and --fix analyses afresh)
    return found, calls


def _refine_in_worker(args: tuple[Refine, list[str], Settings]
                      ) -> Optional[tuple[list[Finding], list[ExternalCall]] | str]:
    """`_refine` in a pool worker, with an index of the project the worker keeps while it is the same
    project (the modules one file's pass models are often the next file's imports)."""
    item, project, settings = args
    with sharing_parses():
        return _refine(item, _worker_index(project), settings)


def _worker_index(project: list[str]) -> ProjectIndex:
    """The index of the project this pool worker keeps, made anew when the project is another."""
    return _kept_for(project, "index", lambda: ProjectIndex(project, module_name))


def _project_key(paths: list[str], settings: Settings) -> str:
    """A digest of every project file's path and contents: what the project pass of any file may read."""
    import hashlib

    h = hashlib.sha256()
    for path in sorted(set(paths)):
        data, _err = _read(path, settings.sources)
        h.update(path.encode("utf-8", "surrogateescape") + b"\0")
        h.update(hashlib.sha256(data).digest() if data is not None else b"-")
    return h.hexdigest()


def _drop_stale_seeds(seeds: dict[str, dict[tuple, ExternalCall]], refined: dict[str, list[ExternalCall]],
                      reported: set[str]) -> set[str]:
    """Remove the seeds whose calling file, analysed again, no longer makes them; the reported files whose
    seeds changed."""
    made = {(c.origin, c.caller, c.qualname, c.kind) for calls in refined.values() for c in calls}
    # the calls as the calling file, knowing the project, makes them: with the arguments it now passes
    # (`n = layer.num_experts // shards`, an nnx Module's int setting, is no tracer once its class is known)
    remade: dict[tuple, dict[tuple, ExternalCall]] = {}
    for calls in refined.values():
        for c in calls:
            remade.setdefault((c.origin, c.caller, c.qualname, c.kind), {})[
                tuple((a.traced, a.pytree) for a in c.args)] = c
    touched: set[str] = set()
    for target, bucket in seeds.items():
        stale = [key for key in bucket if key[0] in refined and key[:4] not in made]
        for key in stale:
            del bucket[key]
        # a call still made with other arguments: its seed takes the arguments the refined pass gives
        changed = [key for key in bucket if key[0] in refined and key[:4] in made and key[4] not in remade[key[:4]]]
        for key in changed:
            func = bucket.pop(key).qualname
            for args, call in remade[key[:4]].items():
                bucket.setdefault((*key[:4], args), dataclasses.replace(call, qualname=func))
        if (stale or changed) and target in reported:
            touched.add(target)
    return touched


def run(settings: Settings) -> Result:
    """Lint (and verify) the configured paths."""
    started = time.perf_counter()
    files = _discover(settings)
    known = {os.path.realpath(p) for p in files}
    context: list[str] = []
    if settings.context:
        context = [p for p in discover(settings.context, settings.exclude, True, settings.include,
                                       respect_gitignore=settings.respect_gitignore)
                   if os.path.realpath(p) not in known]
    if settings.with_importers:
        # Importers are read for the call graph only; their own findings are not reported.
        known |= {os.path.realpath(p) for p in context}
        context += [p for p in importers(files, settings) if os.path.realpath(p) not in known]
    cache = Cache(settings.cache_dir) if settings.cache_dir else None
    with _Workers(settings) as workers:
        workers.project = (files + context, frozenset(files))
        results, errors = analyse_files(files + context, settings, workers)
        seeds: dict[str, dict[tuple, ExternalCall]] = {}
        follow_across_files(files + context, results, settings, errors, workers=workers, seeds=seeds)
        # Only the reported files are analysed again; the context files (a buffer's package, importers)
        # serve as the project whose classes they see.
        with sharing_parses():  # (the files the project pass reads and those it analyses again overlap)
            with_project_classes(files, results, settings, seeds, project_files=files + context, cache=cache,
                                 workers=workers)
    if cache is not None:
        cache.flush()
    findings = [f for path in files for f in results[path][0]]
    notes: list[str] = []
    if settings.tests_dir and findings:
        from .testplugin.store import apply as apply_test_verdicts

        # A verdict observed in the tests wins; keyed on the content analysed (a buffer's, not the disk's).
        apply_test_verdicts(findings, settings.tests_dir, lambda p: _read(p, settings.sources)[0])
    pending = [f for f in findings if f.verification.source is None]
    if settings.verify and pending:
        from .verify import verify_findings  # imported lazily: the static pass never needs it
        from .notebook import VerifyCopies

        import sys

        # Notebooks and buffers are verified through a .py copy of what was analysed.
        with VerifyCopies(pending, lambda p: _read(p, settings.sources)[0], settings.sources) as copies:
            notes = verify_findings(copies.findings, timeout=settings.verify_timeout, memory_mb=settings.verify_memory_mb,
                                    jobs=settings.jobs or idle_cpus(),
                                    progress=settings.progress and sys.stderr.isatty() and len(pending) > 5,
                                    cache_dir=settings.cache_dir)
        for f in pending:
            if f.verification.status in ("confirmed", "refuted", "unverified"):
                f.verification.source = "synthesized"
    findings.sort(key=Finding.sort_key)
    return Result(findings, len(files), time.perf_counter() - started, errors, notes)
