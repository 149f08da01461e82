"""One `pytest --jaxlint` session: static pass after collection, watch the tests, store the verdicts."""
from __future__ import annotations

import os
import sys
import time
from typing import Any, Optional

import pytest

from ..api import SKIP_DIRS, Settings, _included, analyse_files, discover, follow_across_files
from ..findings import Finding, Verification
from ..gitignore import GitIgnore
from ..notebook import is_notebook
from . import store
from .judge import judge
from .watch import Recorder, backend_for

_TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"


class JaxlintSession:
    """The plugin object registered for a session run with `--jaxlint`."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.rootdir = str(config.rootpath)
        self.settings, self.cache_dir = _settings(self.rootdir)
        self.recorder: Optional[Recorder] = None
        self.backend: Any = None
        self.sources: dict[str, bytes] = {}  # realpath -> content at the static pass
        self.lines: list[str] = []  # the terminal summary
        self._listener: Any = None
        self.static_seconds = 0.0

    # ---- before the tests: the static pass, then start watching ----------------------------------

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: Any) -> None:
        started = time.perf_counter()
        files = self._files(session)
        findings = self._static_pass(files)
        self.static_seconds = time.perf_counter() - started
        texts = {p: data.decode("utf-8", errors="replace").splitlines() for p, data in self.sources.items()}
        self.recorder = Recorder(findings, texts)
        self.lines.append(f"jaxlint: {len(findings)} finding{'s' if len(findings) != 1 else ''} in {len(files)} "
                          f"file{'s' if len(files) != 1 else ''} checked ({self.static_seconds:.1f} s)")
        if not self.recorder.watches:
            return
        self.backend = backend_for(self.recorder)
        problem = self.backend.start()
        if problem is not None:
            self.backend = None
            self.lines.append(f"jaxlint: not watching the tests: {problem}")
            return
        if any(w.finding.name == "jit-in-loop" for w in self.recorder.watches):
            self._listen_for_traces()

    def _files(self, session: Any) -> list[str]:
        given = self.config.getoption("jaxlint_path") or []
        if given:
            try:
                found = discover(given, self.settings.exclude, include=self.settings.include,
                                 respect_gitignore=self.settings.respect_gitignore)
            except ValueError as exc:
                raise pytest.UsageError(f"--jaxlint-path: {exc}") from None
            # Python files only: pytest runs no notebook cells, so their lines are never watched.
            return [p for p in found if not is_notebook(p)]
        root = os.path.realpath(self.rootdir)
        # What `jaxlint` would walk in the root folder: the configured `include` (and `extend-include`)
        # and, unless `respect-gitignore = false`, not what .gitignore files ignore.
        ignored = GitIgnore(root) if self.settings.respect_gitignore else None
        found: set[str] = set()
        # The project's own modules that collection imported, and the collected test files.
        candidates = [getattr(m, "__file__", None) for m in list(sys.modules.values())]
        candidates += [str(getattr(item, "path", "")) for item in session.items]
        for path in candidates:
            if not path or not path.endswith(".py"):
                continue
            real = os.path.realpath(path)
            rel = os.path.relpath(real, root)
            if rel.startswith(".."):
                continue
            parts = rel.split(os.sep)
            if any(p in SKIP_DIRS or p.endswith(".egg-info") for p in parts[:-1]):
                continue
            if not _included(rel, self.settings.include):
                continue
            if ignored is not None and _git_ignored(ignored, root, parts):
                continue
            found.add(real)
        cwd = os.getcwd()
        rel_paths = [os.path.relpath(p, cwd) if not os.path.relpath(p, cwd).startswith("..") else p
                     for p in sorted(found)]
        return discover(rel_paths, self.settings.exclude, force_exclude=True) if rel_paths else []

    def _static_pass(self, files: list[str]) -> list[Finding]:
        results, errors = analyse_files(files, self.settings)
        follow_across_files(files, results, self.settings, errors)
        for err in errors:
            self.lines.append(f"jaxlint: {err}")
        findings = [f for p in files for f in results.get(p, ([], []))[0] if f.name != "syntax-error"]
        for path in {f.path for f in findings}:
            try:
                with open(path, "rb") as fh:
                    self.sources[os.path.realpath(path)] = fh.read()
            except OSError:
                pass
        return [f for f in findings if os.path.realpath(f.path) in self.sources]

    def _listen_for_traces(self) -> None:
        try:
            from jax import monitoring
        except ImportError:
            return
        rec = self.recorder

        def listener(event: str, duration: float, **kwargs: Any) -> None:
            if event == _TRACE_EVENT and rec is not None:
                try:
                    rec.on_jaxpr_trace(str(kwargs.get("fun_name", "")))
                except Exception as exc:  # never break the user's tests
                    rec.error = f"{type(exc).__name__}: {exc}"

        monitoring.register_event_duration_secs_listener(listener)
        self._listener = listener

    # ---- during the tests -------------------------------------------------------------------------

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: Any, nextitem: Any) -> Any:
        rec = self.recorder
        if rec is not None:
            rec.begin_test(item.nodeid)
        yield
        if rec is not None:
            rec.end_test()

    # ---- after the tests --------------------------------------------------------------------------

    def pytest_sessionfinish(self, session: Any, exitstatus: int) -> None:
        rec = self.recorder
        if self.backend is not None:
            self.backend.stop()
            self.backend = None
        if self._listener is not None:
            try:
                from jax import monitoring

                monitoring.unregister_event_duration_listener(self._listener)
            except (ImportError, AttributeError, ValueError):
                pass
            self._listener = None
        if rec is None or not rec.watches:
            return
        rec.check_rebound()
        if rec.error:
            self.lines.append(f"jaxlint: watching stopped after an internal error ({rec.error}); "
                              "verdicts cover the tests before it")
        by_path: dict[str, list[tuple[Finding, Verification]]] = {}
        counts = {"confirmed": 0, "refuted": 0}
        for w in rec.watches:
            try:
                v = judge(w, rec)
            except Exception as exc:  # a bug here must not fail the user's session
                self.lines.append(f"jaxlint: no verdict for {w.finding.path}:{w.finding.line} ({exc})")
                continue
            if v is None:
                continue
            v.source = store.SOURCE
            counts[v.status] += 1
            by_path.setdefault(w.finding.path, []).append((w.finding, v))
        folder = store.folder_for(self.cache_dir)
        for path, verdicts in sorted(by_path.items()):
            try:
                store.save(folder, path, self.sources[os.path.realpath(path)], verdicts)
            except OSError as exc:
                self.lines.append(f"jaxlint: could not store verdicts for {path}: {exc}")
        none = len(rec.watches) - counts["confirmed"] - counts["refuted"]
        self.lines.append(f"jaxlint: {counts['confirmed']} confirmed, {counts['refuted']} refuted, {none} without a "
                          f"verdict from these tests (watched with {_backend_name()}); verdicts in "
                          f"{os.path.relpath(folder)}")

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        for line in self.lines:
            terminalreporter.write_line(line)


def _backend_name() -> str:
    return "sys.monitoring" if sys.version_info >= (3, 12) else "sys.settrace"


def _git_ignored(ignored: GitIgnore, root: str, parts: list[str]) -> bool:
    """Whether the file at `root/parts` is ignored, or lies in an ignored folder (which a walk skips)."""
    here = root
    for name in parts[:-1]:
        here = os.path.join(here, name)
        if ignored.ignored(here, is_dir=True):
            return True
    return ignored.ignored(os.path.join(root, *parts), is_dir=False)


def _settings(rootdir: str) -> tuple[Settings, str]:
    """The project's `[tool.jaxlint]` as the `jaxlint` command would read it, and its cache folder."""
    import click

    from ..cli import _settings as cli_settings
    from ..config import ConfigError, find_pyproject, load

    pyproject = find_pyproject(rootdir)
    try:
        cfg = load(pyproject)
        # As `jaxlint` with no options: the configuration alone decides selection, files and ignores.
        settings = cli_settings((rootdir,), cfg, select=None, ignore=None, extend_select=[], extend_ignore=[],
                                per_file_cli={}, exclude=None, extend_exclude=[], force_exclude=False, verify=None,
                                timeout=None, memory=None, jobs=1, respect_gitignore=None)
    except (ConfigError, click.ClickException) as exc:
        raise pytest.UsageError(f"--jaxlint: {exc}") from None
    base = os.path.dirname(cfg.path) if cfg.path else rootdir
    cache_dir = os.path.join(base, ".jaxlint_cache")
    settings.cache_dir = cache_dir
    return settings, cache_dir
