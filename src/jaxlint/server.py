"""`jaxlint server`: a Language Server Protocol server over stdio that lints open buffers as they are edited.

The event loop only bookkeeps. Static analysis runs in a pool of worker processes (a large file or
many open files never stall the editor), at most one job per document at a time; edits arriving
meanwhile are coalesced into one later run, and a result for a version the editor has moved past is
dropped. Verification (tracing with JAX) runs only on save and only when `verify-on-save` is on.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import difflib
import io
import multiprocessing
import os
import sys
import threading
import tokenize
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from lsprotocol import types
from pygls import uris
from pygls.lsp.server import LanguageServer

from . import __version__
from .api import Settings, _excluded, _extra_transforms, analyse, check_module, codes_for, module_name, with_deep_stack
from .project import ProjectIndex, project_needs
from .suppress import skips_file
from .config import Config, ConfigError, find_pyproject, load
from .findings import Finding, Verification
from .notebook import is_notebook
from .report import help_url
from .rules import BY_CODE, SYNTAX_ERROR
from .semantic import Asked, ExternalCall, ProjectClasses, compact, replay

DEBOUNCE_SECONDS = 0.3  # typing pauses shorter than this do not start an analysis
# Cross-file following reads the whole project; beyond this many files it is left to the command line.
PROJECT_FILE_LIMIT = 3000
SOURCE = "jaxlint"
FIX_ALL_KIND = f"{types.CodeActionKind.SourceFixAll.value}.{SOURCE}"
# initializationOptions the server understands (camelCase, as editors write them).
_INIT_OPTIONS = {"verifyOnSave"}
# The command line's options, all left unset: the configuration file alone decides.
_NO_OPTIONS: dict[str, Any] = dict(paths=(), select=None, ignore=None, extend_select=[], extend_ignore=[],
                                   per_file_cli={}, exclude=None, extend_exclude=[], force_exclude=False,
                                   verify=None, timeout=None, memory=None, jobs=1, respect_gitignore=None)


# ---- the work done in the pool's processes (plain data in, plain data out) ---------------------


def _encoding(text: str) -> str:
    """The source encoding a `# -*- coding: … -*-` line declares (utf-8 when none)."""
    head = "".join(text.splitlines(keepends=True)[:2]).encode("utf-8", errors="replace")
    try:
        return tokenize.detect_encoding(io.BytesIO(head).readline)[0]
    except (SyntaxError, LookupError):
        return "utf-8"


def _to_bytes(text: str) -> tuple[bytes, str]:
    """The buffer as the file would be written, so a coding line and libcst agree on every character."""
    enc = _encoding(text)
    try:
        return text.encode(enc), enc
    except (UnicodeEncodeError, LookupError):
        return text.encode("utf-8"), "utf-8"


def _worker_init() -> None:
    # Pool processes inherit the server's stdin and stdout, which carry the LSP stream: nothing
    # they do may read from or print into it.
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr


def warm_job() -> None:
    """Nothing: submitted once at start so that the workers exist (and have imported jaxlint) before
    the first buffer opens."""


def _project_classes(path: str, data: bytes, found: list[Finding], calls: list[ExternalCall]
                     ) -> Optional[ProjectClasses]:
    """What the command line's second pass (api.with_project_classes) knows about the buffer: the
    pytree classes and static fields of the project modules it imports, and their key-consuming
    functions, read from their saved files. None when the findings cannot depend on them or the buffer
    imports none."""
    if not (path.endswith(".py") and os.path.isabs(path)):
        return None
    try:
        index = ProjectIndex([path], module_name)
        need = project_needs(found, calls, index, path)
        if need is None:
            return None
        return index.for_file(path, data, {f.name for f in found}, keys_only=need == "keys")
    except Exception:  # noqa: BLE001 - the classes refine findings; never let them stop the lint
        return None


def lint_job(text: str, path: str, settings: Settings, external: Optional[list[ExternalCall]] = None
             ) -> tuple[list[Finding], Optional[str]]:
    """Static findings for a buffer (edits dropped: they hold tree nodes), and an internal error if any.
    `external`: the calls other files of the project make into this one from traced code."""
    data, _ = _to_bytes(text)

    def work() -> list[Finding]:
        asked: list[Asked] = []
        found, calls = analyse(data, path, settings.codes, settings.trace_decorators, external, asked=asked)
        project = _project_classes(path, data, found, calls)
        if project is not None and not replay(project, compact(asked)):  # (else: the same findings again)
            found, _ = analyse(data, path, settings.codes, settings.trace_decorators, external, project)
        for f in found:
            f.edit = None
        return found

    try:
        return with_deep_stack(work), None
    except RecursionError:
        return [], "the file is nested too deeply to analyse"
    except Exception as exc:  # a bug in jaxlint must not take the server down
        return [], f"internal error while checking {path}: {type(exc).__name__}: {exc}"


Hunk = tuple[int, int, str]  # replace lines [first, last) of the buffer (0-based) by this text


@dataclass
class Action:
    """A code action computed in a worker, as whole-line hunks of the buffer."""

    title: str
    kind: str
    hunks: list[Hunk]
    finding: Optional[tuple[int, int, str]] = None  # (line, column, code) of the finding it answers
    preferred: bool = False


def _hunks(old: str, new: str) -> list[Hunk]:
    """The changed runs of lines between two versions of the buffer (a fix that also adds an import
    at the top is two small edits, not one spanning the file)."""
    a = old.splitlines(keepends=True)
    b = new.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    return [(i1, i2, "".join(b[j1:j2])) for op, i1, i2, j1, j2 in matcher.get_opcodes() if op != "equal"]


def actions_job(text: str, path: str, settings: Settings, first_line: int, last_line: int,
                fix_all: bool, external: Optional[list[ExternalCall]] = None) -> list[Action]:
    """Quick fixes (the `--fix` edits) and suppressions (the `--add-noqa` comment) for findings on
    lines first_line..last_line (1-based), and with `fix_all` the buffer with every safe fix applied."""
    import libcst as cst

    from .fix import apply_edits, fix_source
    from .suppress import add_ignore_comments

    data, enc = _to_bytes(text)
    transforms = _extra_transforms(settings.trace_decorators)
    project: Optional[ProjectClasses] = None  # set once the buffer's findings ask for it
    handoffs: list[ExternalCall] = []  # keys the buffer hands to other files (asked of the project)

    def lint(source: bytes, name: str) -> tuple[list[Finding], Optional[cst.Module]]:
        # api.lint_for_fix, plus the calls from other files: findings whose edits refer to the tree
        if skips_file(source):  # `# jaxlint: skip-file`: no diagnostics, so no fixes either
            return [], None
        try:
            module = cst.parse_module(source)
        except Exception:
            return [], None
        found, calls = check_module(module, source, name, settings.codes, transforms, external, project)
        handoffs[:] = calls
        return found, module

    def work() -> list[Action]:
        nonlocal project
        found, module = lint(data, path)
        project = _project_classes(path, data, found, handoffs)
        if project is not None:  # the findings the diagnostics show (lint_job), edits on the same tree
            found, module = lint(data, path)
        out: list[Action] = []
        for f in found:
            if f.line > last_line or f.end_line < first_line:
                continue
            key = (f.line, f.column, f.code)
            if f.edit is not None and f.fix is not None and module is not None:
                new, applied = apply_edits(data, [f], module)
                if applied and new != data:
                    unsafe = f.fix.applicable != "safe"
                    title = f"Fix {f.name}: {f.fix.description}" + (" (unsafe: may change behaviour)" if unsafe else "")
                    out.append(Action(title, types.CodeActionKind.QuickFix.value, _hunks(text, new.decode(enc)),
                                      finding=key, preferred=not unsafe))
            if f.name != SYNTAX_ERROR[1]:
                new, added = add_ignore_comments(data, [f])
                if added:
                    out.append(Action(f"Suppress {f.name} on this line (# jaxlint: ignore[{f.name}])",
                                      types.CodeActionKind.QuickFix.value, _hunks(text, new.decode(enc)),
                                      finding=key))
        if fix_all:
            res = fix_source(data, path, lint)
            if res.changed:
                n = len(res.applied)
                out.append(Action(f"Fix all safely fixable jaxlint findings ({n})", FIX_ALL_KIND,
                                  _hunks(text, res.fixed.decode(enc))))
        return out

    return with_deep_stack(work)


class _SeedRecorder:
    """Stands in for the API's workers during cross-file following and keeps, per file, the calls
    that traced code elsewhere in the project makes into it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.seeds: dict[str, list[ExternalCall]] = {}

    def run(self, items: list[tuple[str, Optional[list[ExternalCall]]]]) -> list:
        for path, calls in items:
            self.seeds[path] = list(calls or [])
        return self.inner.run(items)


def project_seeds_job(root: str, settings: Settings) -> tuple[dict[str, list[ExternalCall]], Optional[str]]:
    """The command line's cross-file following over the saved files of the project at `root`: for each
    file (by real path), the calls into it from traced code in other files. Only these seeds leave the
    job (its findings are dropped), so api.with_project_classes has nothing to refine here: a buffer's
    own lint applies the project's classes itself (_project_classes)."""
    from .api import _Workers, analyse_files, discover, follow_across_files

    try:
        files = discover([root], settings.exclude, False, settings.include,
                         respect_gitignore=settings.respect_gitignore)
        if len(files) > PROJECT_FILE_LIMIT:
            return {}, (f"{root} holds {len(files)} Python files; cross-file following in the editor stops "
                        f"at {PROJECT_FILE_LIMIT} (run `jaxlint` on the project for it)")
        with _Workers(settings) as inner:
            results, errors = analyse_files(files, settings, inner)
            recorder = _SeedRecorder(inner)
            follow_across_files(files, results, settings, errors, workers=recorder)
    except Exception as exc:  # following is a bonus: never let it stop the buffer's own linting
        return {}, f"cross-file following failed: {type(exc).__name__}: {exc}"
    return {os.path.realpath(p): [dataclasses.replace(c, origin=os.path.relpath(c.origin, root)) for c in calls]
            for p, calls in recorder.seeds.items()}, None


# ---- the server ---------------------------------------------------------------------------------


@dataclass
class _Context:
    """Where a file lives, as the command line would see it."""

    settings: Optional[Settings]  # for this file; None when [tool.jaxlint] excludes it
    cfg: Config
    project: Settings  # for the whole project (with its per-file ignores)
    root: Optional[str]  # the folder of the nearest pyproject.toml; None: no project to follow calls across


@dataclass
class _Project:
    """The calls into each file from traced code in the project's other (saved) files."""

    settings: Settings
    seeds: dict[str, list[ExternalCall]] = field(default_factory=dict)  # real path -> calls
    stale: bool = True  # files were saved since the seeds were computed
    task: Optional["asyncio.Task[None]"] = None


@dataclass
class _Run:
    verify: bool  # a save: verify afterwards (when verify-on-save is on)
    task: Optional["asyncio.Task[None]"] = None
    job: Optional[concurrent.futures.Future] = None  # set while the static pass is queued or running
    verifying: bool = False  # past the static pass, tracing the saved file

    def supersede(self) -> bool:
        """Drop this run for a newer one, unless it is too far along; whether it was dropped."""
        if self.task is None or self.task.done():
            return False
        if self.verifying:
            return False  # verdicts about the saved file stay useful; publishing checks the version
        if self.job is not None and not self.job.cancel():
            return False  # running in a worker: let it finish; its result for an old version is dropped
        self.task.cancel()  # debouncing, waiting its turn or queued in the pool
        return True


@dataclass
class _DocState:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one static job per document at a time
    run: Optional[_Run] = None
    version: Optional[int] = None  # the version `findings` belong to
    findings: list[Finding] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)  # the text `findings` were computed on
    # Verdicts of the last verification, carried over to later edits while a finding stays the same.
    verdicts: dict[tuple, Verification] = field(default_factory=dict)


def _verdict_key(f: Finding, lines: list[str]) -> tuple:
    text = lines[f.line - 1].strip() if 0 < f.line <= len(lines) else ""
    return (f.code, f.function, f.message, text)


class JaxlintServer(LanguageServer):
    """Diagnostics, quick fixes and rule documentation for open Python buffers."""

    def __init__(self) -> None:
        super().__init__(SOURCE, __version__, text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
        self.docs: dict[str, _DocState] = {}
        self.verify_on_save: Optional[bool] = None  # from initializationOptions; None: ask pyproject.toml
        self.debounce = DEBOUNCE_SECONDS
        self.shut_down = False
        # "lint" serves the open buffers; "project", one process, the cross-file following, so that
        # reading a whole project never delays a buffer's diagnostics.
        self._pools: dict[str, concurrent.futures.ProcessPoolExecutor] = {}
        self._closing = False
        # One core stays with the editor; more than four buys little for the files open at once.
        self.workers = max(1, min(4, (os.cpu_count() or 2) - 1))
        self.projects: dict[str, _Project] = {}  # pyproject.toml folder -> following state
        self._configs: dict[str, tuple[int, Config, Optional[str]]] = {}  # pyproject -> (mtime, config, error)
        self._reported: set[str] = set()  # configuration errors already shown

    # -- workers --

    def pool(self, kind: str = "lint") -> concurrent.futures.ProcessPoolExecutor:
        if self._closing:
            raise BrokenProcessPool("the server is stopping")  # never start workers that nothing will stop
        if kind not in self._pools:
            # spawn, not fork: the server runs threads (the stdin reader), and fork copies their locks.
            self._pools[kind] = concurrent.futures.ProcessPoolExecutor(
                max_workers=self.workers if kind == "lint" else 1,
                mp_context=multiprocessing.get_context("spawn"), initializer=_worker_init)
        return self._pools[kind]

    async def in_pool(self, fn: Callable[..., Any], *args: Any, run: Optional[_Run] = None,
                      kind: str = "lint") -> Any:
        """Run `fn(*args)` in a worker process; a pool broken by a crashed worker is replaced once."""
        for attempt in (1, 2):
            try:
                fut = self.pool(kind).submit(fn, *args)
            except BrokenProcessPool:
                if self._closing:
                    raise
                self._pools.pop(kind, None)
                continue
            if run is not None:
                run.job = fut
            try:
                return await asyncio.wrap_future(fut)
            except BrokenProcessPool:
                self._pools.pop(kind, None)
                if attempt == 2 or self._closing:
                    raise
            finally:
                if run is not None:
                    run.job = None
        raise BrokenProcessPool("the analysis workers keep failing")

    def stop_workers(self) -> None:
        self._closing = True
        pools, self._pools = self._pools, {}
        for pool in pools.values():
            # A worker busy with a huge file would hold up the editor's exit: stop it rather than wait.
            for proc in list(getattr(pool, "_processes", {}).values()):
                try:
                    proc.terminate()
                except Exception:
                    pass
            pool.shutdown(wait=False, cancel_futures=True)

    def shutdown(self) -> None:  # called by pygls when the connection ends, however it ends
        self.stop_workers()
        super().shutdown()

    # -- configuration --

    def _config(self, pyproject: Optional[str]) -> Config:
        if pyproject is None:
            return Config()
        try:
            mtime = os.stat(pyproject).st_mtime_ns
        except OSError:
            return Config()
        cached = self._configs.get(pyproject)
        if cached is None or cached[0] != mtime:
            try:
                cached = (mtime, load(pyproject), None)
            except ConfigError as exc:
                cached = (mtime, Config(), str(exc))
            self._configs[pyproject] = cached
        if cached[2] is not None:
            self._show_once(f"jaxlint: {cached[2]} Linting with the default configuration.")
        return cached[1]

    def _show_once(self, message: str, kind: types.MessageType = types.MessageType.Error) -> None:
        if message not in self._reported:
            self._reported.add(message)
            self.window_show_message(types.ShowMessageParams(type=kind, message=message))

    def context_for(self, path: str) -> "_Context":
        """The command line's settings for one file, from the nearest pyproject.toml."""
        from .cli import _settings  # the one mapping of [tool.jaxlint] onto Settings
        import click

        start = path if os.path.isabs(path) else (self.workspace.root_path or os.getcwd())
        pyproject = find_pyproject(start)
        cfg = self._config(pyproject)
        try:
            project = _settings(cfg=cfg, **_NO_OPTIONS)
        except click.ClickException as exc:  # a bad selection in [tool.jaxlint] (cli.CliError)
            self._show_once(f"jaxlint: {exc.format_message()} Linting with the default configuration.")
            cfg = Config()
            project = _settings(cfg=cfg, **_NO_OPTIONS)
        root = os.path.dirname(pyproject) if pyproject else (self.workspace.root_path or os.getcwd())
        rel = os.path.relpath(path, root) if os.path.isabs(path) else path
        if pyproject is not None:
            project.cache_dir = os.path.join(root, ".jaxlint_cache")  # shared with the command line
        # A notebook opened as a text document is JSON: its findings sit in cells, not in that text.
        skip = _excluded(rel, project.exclude) or is_notebook(path)
        own = None if skip else dataclasses.replace(project, codes=codes_for(rel, project), per_file_ignores={})
        return _Context(own, cfg, project, root if pyproject is not None else None)

    def wants_verify(self, cfg: Config) -> bool:
        if self.verify_on_save is not None:
            return self.verify_on_save
        return bool(cfg.verify_on_save)

    # -- cross-file following --

    def follow(self, root: str, settings: Settings) -> None:
        """(Re)compute, in the background, the calls into each file of the project at `root`."""
        proj = self.projects.setdefault(root, _Project(settings))
        proj.settings, proj.stale = settings, True
        if proj.task is None or proj.task.done():
            proj.task = asyncio.get_running_loop().create_task(self._follow(root, proj))

    async def _follow(self, root: str, proj: _Project) -> None:
        while proj.stale and not self.shut_down:
            proj.stale = False
            try:
                seeds, note = await self.in_pool(project_seeds_job, root, proj.settings, kind="project")
            except BrokenProcessPool as exc:
                seeds, note = proj.seeds, f"cross-file following failed ({exc})"
            if note:
                self.window_log_message(types.LogMessageParams(type=types.MessageType.Warning,
                                                               message=f"jaxlint: {note}"))
            old, proj.seeds = proj.seeds, seeds
            for uri in list(self.docs):
                key = os.path.realpath(_path_of(uri))
                if old.get(key, []) != seeds.get(key, []):
                    self.schedule(uri, 0.0)  # what other files call in this one, and how, changed

    def seeds_for(self, ctx: _Context, path: str) -> Optional[list[ExternalCall]]:
        proj = self.projects.get(ctx.root) if ctx.root is not None else None
        if proj is None or not os.path.isabs(path):
            return None
        return proj.seeds.get(os.path.realpath(path)) or None

    # -- diagnostics --

    def schedule(self, uri: str, delay: float, verify: bool = False, edited: bool = False) -> None:
        """Lint `uri` after `delay` seconds, superseding a run that has not reached a worker yet.
        `verify`: a save; `edited`: the text changed (a superseded save is then not verified)."""
        state = self.docs.setdefault(uri, _DocState())
        prev = state.run
        if prev is not None and prev.supersede() and prev.verify and not edited:
            verify = True  # re-linting for another reason must not lose a save's verification
        run = _Run(verify)
        run.task = asyncio.get_running_loop().create_task(self._lint(uri, delay, run))
        state.run = run

    async def _lint(self, uri: str, delay: float, run: _Run) -> None:
        try:
            await self._lint_now(uri, delay, run)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a task's error would otherwise vanish: say it where the editor logs
            self.window_log_message(types.LogMessageParams(
                type=types.MessageType.Error, message=f"jaxlint: internal error: {type(exc).__name__}: {exc}"))

    async def _lint_now(self, uri: str, delay: float, run: _Run) -> None:
        if delay:
            await asyncio.sleep(delay)
        state = self.docs.get(uri)
        if state is None:
            return
        async with state.lock:
            doc = self.workspace.get_text_document(uri)
            version, text = doc.version, doc.source
            path = _path_of(uri)
            ctx = self.context_for(path)
            settings = ctx.settings
            if ctx.root is not None and ctx.root not in self.projects:
                self.follow(ctx.root, ctx.project)
            if settings is None:  # excluded in [tool.jaxlint]
                found: list[Finding] = []
            else:
                try:
                    found, error = await self.in_pool(lint_job, text, path, settings, self.seeds_for(ctx, path),
                                                      run=run)
                except BrokenProcessPool as exc:
                    found, error = [], f"the analysis workers failed ({exc})"
                if error:
                    self.window_log_message(types.LogMessageParams(type=types.MessageType.Error,
                                                                   message=f"jaxlint: {error}"))
        if self.docs.get(uri) is not state or self.workspace.get_text_document(uri).version != version:
            return  # the buffer moved on (or was closed) while we worked
        lines = text.splitlines()
        for f in found:
            old = state.verdicts.get(_verdict_key(f, lines))
            if old is not None:
                f.verification = old
        self.publish(uri, version, text, found)
        if run.verify and settings is not None and found and self.wants_verify(ctx.cfg) and os.path.isabs(path):
            run.verifying = True
            await self._verify(uri, version, text, path, settings, found)

    async def _verify(self, uri: str, version: Optional[int], text: str, path: str, settings: Settings,
                      found: list[Finding]) -> None:
        data, _ = _to_bytes(text)
        try:
            with open(path, "rb") as f:
                on_disk = f.read()
        except OSError:
            return
        if on_disk != data:
            return  # verification traces the saved file; this buffer is not what was saved
        fresh = [dataclasses.replace(f, verification=Verification()) for f in found]
        await _in_thread(_verify_findings, fresh, settings)
        state = self.docs.get(uri)
        if state is None or self.workspace.get_text_document(uri).version != version:
            return
        lines = text.splitlines()
        state.verdicts = {_verdict_key(f, lines): f.verification for f in fresh}
        self.publish(uri, version, text, fresh)

    def publish(self, uri: str, version: Optional[int], text: str, found: list[Finding]) -> None:
        state = self.docs[uri]
        state.version, state.findings, state.lines = version, found, text.splitlines(keepends=True)
        doc = self.workspace.get_text_document(uri)
        diagnostics = [d for d in (self.diagnostic(f, state.lines, doc.position_codec) for f in found) if d]
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics, version=version))

    def diagnostic(self, f: Finding, lines: list[str], codec: Any) -> Optional[types.Diagnostic]:
        status = f.verification.status
        if status == "refuted":
            return None  # proven a false alarm by tracing; hidden, as the CLI hides it
        if status == "confirmed" or f.name == SYNTAX_ERROR[1]:
            severity = types.DiagnosticSeverity.Error
        else:
            severity = types.DiagnosticSeverity.Warning  # unverified, or not verified (not-run)
        message = f.message
        if status in ("confirmed", "unverified") and f.verification.detail:
            message += f"\n{status}: {f.verification.detail}"
        url = help_url(f.code)
        return types.Diagnostic(
            range=_client_range(lines, codec, f.line, f.column, f.end_line, f.end_column),
            message=message,
            severity=severity,
            code=f.code,
            code_description=types.CodeDescription(href=url) if url else None,
            source=SOURCE,
            data={"name": f.name, "status": status,
                  "fix": f.fix.to_json() if f.fix is not None else None},
        )

    def findings_at(self, uri: str, first: int, last: int) -> Optional[list[Finding]]:
        """Findings of the published version on lines first..last (0-based), None if that version is stale."""
        state = self.docs.get(uri)
        if state is None or state.version != self.workspace.get_text_document(uri).version:
            return None
        return [f for f in state.findings if f.line - 1 <= last and f.end_line - 1 >= first]


    def findings_under(self, uri: str, position: types.Position) -> list[Finding]:
        """Findings of the current version whose span holds `position` (in the client's units)."""
        state = self.docs.get(uri)
        doc = self.workspace.get_text_document(uri)
        if state is None or state.version != doc.version or not state.lines:
            return []
        at = doc.position_codec.position_from_client_units(state.lines, position)
        here = (at.line + 1, at.character + 1)
        return [f for f in state.findings if (f.line, f.column) <= here <= (f.end_line, f.end_column)]


def _path_of(uri: str) -> str:
    path = uris.to_fs_path(uri) if uri.startswith("file:") else None
    return path or uri.rsplit("/", 1)[-1] or "untitled.py"


def _client_range(lines: list[str], codec: Any, line: int, col: int, end_line: int, end_col: int) -> types.Range:
    """A finding's 1-based code-point span as an LSP range in the client's position encoding."""
    def pos(ln: int, c: int) -> types.Position:
        ln = max(0, ln - 1)
        c = max(0, c - 1)
        if ln >= len(lines):
            return types.Position(line=ln, character=0)
        return codec.position_to_client_units(lines, types.Position(line=ln, character=c))

    return types.Range(start=pos(line, col), end=pos(end_line, end_col))


def _verify_findings(findings: list[Finding], settings: Settings) -> None:
    from .verify import verify_findings  # only now: the static server never needs it

    verify_findings(findings, timeout=settings.verify_timeout, memory_mb=settings.verify_memory_mb, jobs=1,
                    progress=False, cache_dir=settings.cache_dir)


async def _in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """Run `fn` in a daemon thread: verification mostly waits on its own worker process, and a
    daemon thread never holds up the editor's exit (the worker stops at its own time limit)."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future = loop.create_future()

    def settle(error: Optional[BaseException], value: Any) -> None:
        if fut.done():
            return
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(value)

    def target() -> None:
        error: Optional[BaseException] = None
        value = None
        try:
            value = fn(*args)
        except BaseException as exc:  # handed to the awaiting coroutine
            error = exc
        try:
            loop.call_soon_threadsafe(settle, error, value)
        except RuntimeError:
            pass  # the server has stopped: nobody is waiting

    threading.Thread(target=target, name="jaxlint-verify", daemon=True).start()
    return await fut


def _text_edit(lines: list[str], codec: Any, hunk: Hunk) -> types.TextEdit:
    """Replace whole lines [first, last) of the buffer (`lines` keep their line endings)."""
    first, last, text = hunk
    start = types.Position(line=first, character=0)
    if last < len(lines) or not lines or lines[-1].endswith(("\n", "\r")):
        end = types.Position(line=last, character=0)
    else:  # the buffer's last line has no line ending: end at its last character
        end = types.Position(line=len(lines) - 1, character=codec.client_num_units(lines[-1]))
    return types.TextEdit(range=types.Range(start=start, end=end), new_text=text)


def _kind(kind: Any) -> str:
    return kind.value if isinstance(kind, types.CodeActionKind) else str(kind)


def _rule_doc(code: str) -> Optional[str]:
    import inspect

    cls = BY_CODE.get(code)
    if cls is None:
        return None
    return f"### {cls.name} ({cls.code})\n\n{inspect.cleandoc(cls.__doc__ or '')}"


def create_server() -> JaxlintServer:
    server = JaxlintServer()

    @server.feature(types.INITIALIZE)
    def initialize(ls: JaxlintServer, params: types.InitializeParams) -> None:
        opts = params.initialization_options
        if opts is None:
            return
        if not isinstance(opts, dict):
            ls._show_once("jaxlint: initializationOptions must be an object; ignoring them.")
            return
        for key in sorted(set(opts) - _INIT_OPTIONS):
            ls._show_once(f"jaxlint: unknown initialization option `{key}` (known: {', '.join(sorted(_INIT_OPTIONS))}).")
        if "verifyOnSave" in opts:
            if isinstance(opts["verifyOnSave"], bool):
                ls.verify_on_save = opts["verifyOnSave"]
            else:
                ls._show_once(f"jaxlint: initialization option `verifyOnSave` must be true or false, "
                              f"got {opts['verifyOnSave']!r}.")

    @server.feature(types.INITIALIZED)
    def initialized(ls: JaxlintServer, params: types.InitializedParams) -> None:
        pool = ls.pool()
        for _ in range(ls.workers):
            pool.submit(warm_job)
        caps = ls.client_capabilities.workspace
        if caps and caps.did_change_watched_files and caps.did_change_watched_files.dynamic_registration:
            # Ask to hear about edits of the configuration made outside the open buffers.
            ls.client_register_capability(types.RegistrationParams(registrations=[types.Registration(
                id="jaxlint-pyproject", method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                register_options=types.DidChangeWatchedFilesRegistrationOptions(
                    watchers=[types.FileSystemWatcher(glob_pattern="**/pyproject.toml")]))]))

    @server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def watched_files_changed(ls: JaxlintServer, params: types.DidChangeWatchedFilesParams) -> None:
        if any(c.uri.endswith("/pyproject.toml") for c in params.changes):
            for uri in list(ls.docs):
                ls.schedule(uri, 0.0)  # the configuration cache notices the new modification time
            for root in list(ls.projects):
                ls.follow(root, ls.context_for(os.path.join(root, "pyproject.toml")).project)

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: JaxlintServer, *args: Any) -> None:
        ls.shut_down = True
        for state in ls.docs.values():
            if state.run is not None and state.run.task is not None:
                state.run.task.cancel()
        ls.stop_workers()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: JaxlintServer, params: types.DidOpenTextDocumentParams) -> None:
        ls.schedule(params.text_document.uri, 0.0)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: JaxlintServer, params: types.DidChangeTextDocumentParams) -> None:
        ls.schedule(params.text_document.uri, ls.debounce, edited=True)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE, types.SaveOptions(include_text=False))
    def did_save(ls: JaxlintServer, params: types.DidSaveTextDocumentParams) -> None:
        uri = params.text_document.uri
        ls.schedule(uri, 0.0, verify=True)
        ctx = ls.context_for(_path_of(uri))
        if ctx.root is not None:
            ls.follow(ctx.root, ctx.project)  # the saved file may call into others differently now

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: JaxlintServer, params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        state = ls.docs.pop(uri, None)
        if state is not None and state.run is not None and state.run.task is not None:
            state.run.task.cancel()
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(
        code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL_KIND], resolve_provider=False))
    async def code_action(ls: JaxlintServer, params: types.CodeActionParams) -> Optional[list[types.CodeAction]]:
        uri = params.text_document.uri
        only = [_kind(k) for k in params.context.only] if params.context.only is not None else None
        wants_fixes = only is None or any(types.CodeActionKind.QuickFix.value.startswith(k) for k in only)
        # Fix-all is what editors ask for on save (`source.fixAll`); it is never offered unasked.
        wants_all = only is not None and any(FIX_ALL_KIND.startswith(k) and k.startswith("source") for k in only)
        first, last = params.range.start.line, params.range.end.line
        if wants_fixes and not wants_all:
            here = ls.findings_at(uri, first, last)
            if here is not None and not here:
                return []  # nothing published on these lines: no need to ask a worker
        if not (wants_fixes or wants_all):
            return []
        doc = ls.workspace.get_text_document(uri)
        version, text = doc.version, doc.source
        path = _path_of(uri)
        ctx = ls.context_for(path)
        if ctx.settings is None:
            return []
        actions: list[Action] = await ls.in_pool(actions_job, text, path, ctx.settings, first + 1, last + 1,
                                                 wants_all, ls.seeds_for(ctx, path))
        if ls.workspace.get_text_document(uri).version != version:
            return []  # computed on a buffer the editor has since changed
        lines = text.splitlines(keepends=True)
        caps = ls.client_capabilities.workspace
        versioned = bool(caps and caps.workspace_edit and caps.workspace_edit.document_changes)
        published = {(d.range.start.line, d.code): d for d in params.context.diagnostics if d.source == SOURCE}
        out: list[types.CodeAction] = []
        for a in actions:
            if a.kind == FIX_ALL_KIND and not wants_all or a.kind != FIX_ALL_KIND and not wants_fixes:
                continue
            diags = None
            if a.finding is not None:
                d = published.get((a.finding[0] - 1, a.finding[2]))
                diags = [d] if d is not None else None
            edits = [_text_edit(lines, doc.position_codec, h) for h in a.hunks]
            if versioned:  # the editor refuses the edit if the buffer changed meanwhile
                edit = types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(
                    text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version),
                    edits=edits)])
            else:
                edit = types.WorkspaceEdit(changes={uri: edits})
            out.append(types.CodeAction(title=a.title, kind=a.kind, diagnostics=diags, edit=edit,
                                        is_preferred=a.preferred or None))
        return out

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    def hover(ls: JaxlintServer, params: types.HoverParams) -> Optional[types.Hover]:
        here = ls.findings_under(params.text_document.uri, params.position)
        docs = []
        for code in dict.fromkeys(f.code for f in here):
            doc = _rule_doc(code)
            if doc:
                docs.append(doc)
        if not docs:
            return None
        return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value="\n\n---\n\n".join(docs)))

    return server


def serve() -> int:
    """Speak LSP on stdin/stdout until the editor says `exit`; the exit status the protocol asks for."""
    server = create_server()
    server.start_io()
    return 0 if server.shut_down else 1
