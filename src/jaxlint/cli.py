"""The command line: options -> Settings, run the pipeline, print, pick the exit code. No analysis here."""
from __future__ import annotations

import os
import signal
import sys
import traceback
from typing import Optional

import click

from . import __version__
from .api import DEFAULT_INCLUDE, PathError, Settings, buffer_context, add_noqa as add_noqa_comments, fix_paths, run
from .fix import unified_diff
from .config import Config, ConfigError, find_pyproject, load
from .report import statistics, to_github, to_json, to_sarif, to_text, visible
from .rules import BY_CODE, BY_NAME, RULES, SYNTAX_ERROR
from .select import SelectionError, expand, split


class _DefaultToCheck(click.Group):
    """`jaxlint PATH...` runs `check`; `jaxlint rule NAME` runs a subcommand."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or args[0] not in self.commands:
            args = ["check", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_DefaultToCheck, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """jaxlint: find JAX trace hazards and prove them by tracing."""


def _settings(paths: tuple[str, ...], cfg: Config, select: Optional[str], ignore: Optional[str],
              extend_select: Optional[str], exclude: Optional[str], extend_exclude: Optional[str],
              force_exclude: bool, verify: Optional[bool], timeout: Optional[float], memory: Optional[int],
              jobs: Optional[int]) -> Settings:
    try:
        sel_src = split(select) if select is not None else (cfg.select if cfg.select is not None else ["ALL"])
        codes = expand(sel_src, option="--select" if select is not None else "select")
        codes |= expand(split(extend_select) or cfg.extend_select, option="--extend-select")
        codes -= expand(split(ignore) if ignore is not None else cfg.ignore, option="--ignore")
    except SelectionError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        per_file = {glob: expand(v, option=f"per-file-ignores.{glob}") for glob, v in cfg.per_file_ignores.items()}
    except SelectionError as exc:
        raise click.UsageError(f"{cfg.path}: {exc}") from None
    excl = split(exclude) if exclude is not None else (cfg.exclude or [])
    excl += split(extend_exclude) + cfg.extend_exclude
    return Settings(
        paths=list(paths) or ["."],
        codes=codes,
        exclude=excl,
        force_exclude=force_exclude,
        verify=verify if verify is not None else (cfg.verify if cfg.verify is not None else True),
        verify_timeout=timeout or cfg.verify_timeout or 10.0,
        verify_memory_mb=memory or cfg.verify_memory or 2048,
        jobs=jobs or os.cpu_count() or 1,
        per_file_ignores=per_file,
        trace_decorators=list(cfg.extend_trace_decorators),
        include=list(cfg.include if cfg.include is not None else DEFAULT_INCLUDE) + list(cfg.extend_include),
    )


@main.command("check", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["text", "json", "sarif", "github"]), default="text",
              show_default=True, help="text for people, json for tools, sarif for code scanning, github for Actions.")
@click.option("--select", metavar="CODES", help="Comma list of rule codes, prefixes or names to check (default: all).")
@click.option("--ignore", metavar="CODES", help="Comma list of rule codes, prefixes or names to skip.")
@click.option("--extend-select", metavar="CODES", help="Rules to add to the selection from the configuration.")
@click.option("--exclude", metavar="GLOBS", help="Comma list of glob patterns of files and folders to skip.")
@click.option("--extend-exclude", metavar="GLOBS", help="Patterns to skip in addition to the configured ones.")
@click.option("--force-exclude", is_flag=True, help="Apply exclusions to files named on the command line too (for pre-commit).")
@click.option("--verify/--no-verify", default=None,
              help="Verify each finding by tracing it with JAX in a sandboxed worker (default: on).")
@click.option("--verify-timeout", type=click.FloatRange(min=0.1), default=None, metavar="SECONDS",
              help="Time limit per verified function [default: 10].")
@click.option("--verify-memory", type=click.IntRange(min=64), default=None, metavar="MIB",
              help="Memory limit of a verification worker in MiB [default: 2048].")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None, help="Parallel workers [default: CPU count].")
@click.option("--no-cache", is_flag=True, help="Do not read or write the result cache.")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
              help="Where to keep the result cache [default: .jaxlint_cache next to pyproject.toml, or in the current folder].")
@click.option("--fix", is_flag=True, help="Apply safe autofixes in place.")
@click.option("--unsafe-fixes", is_flag=True, help="Also apply fixes that may change behaviour (with --fix or --diff).")
@click.option("--diff", "show_diff", is_flag=True, help="Print the fixes as a diff instead of writing them.")
@click.option("--add-noqa", is_flag=True, help="Add `# jaxlint: ignore[...]` to every line with a finding.")
@click.option("--show-refuted", is_flag=True, help="Also print findings that verification proved false.")
@click.option("--statistics", "show_stats", is_flag=True, help="Print the number of findings per rule.")
@click.option("--show-links", is_flag=True, help="Print a link to the JAX documentation under each finding.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings.")
@click.option("--output-file", "-o", type=click.Path(dir_okay=False, writable=True), help="Write the report to a file.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="Use this pyproject.toml.")
@click.option("--isolated", is_flag=True, help="Ignore all configuration files.")
@click.option("--verbose", "-v", is_flag=True, help="Show tracebacks of internal errors.")
@click.option("--stdin-filename", metavar="PATH", default=None,
              help="With `-`: the file that standard input holds, for messages, configuration, per-file ignores "
                   "and cross-file following.")
@click.version_option(__version__, "--version", prog_name="jaxlint")
def check(paths: tuple[str, ...], fmt: str, select: Optional[str], ignore: Optional[str],
          extend_select: Optional[str], exclude: Optional[str], extend_exclude: Optional[str], force_exclude: bool,
          verify: Optional[bool], verify_timeout: Optional[float], verify_memory: Optional[int], jobs: Optional[int],
          no_cache: bool, cache_dir: Optional[str], fix: bool, unsafe_fixes: bool, show_diff: bool, add_noqa: bool, show_refuted: bool, show_stats: bool, show_links: bool, exit_zero: bool,
          output_file: Optional[str],
          config_path: Optional[str], isolated: bool, verbose: bool, stdin_filename: Optional[str]) -> None:
    """Check PATHS (files or folders; default: the current folder) for JAX trace hazards.

    Exit status: 0 no findings, 1 findings, 2 usage, configuration or internal error.
    `jaxlint rule NAME` explains a rule; `jaxlint rule --all` lists them.
    """
    stdin_name = _stdin_name(paths, stdin_filename, add_noqa)
    output_to_stderr = False
    if stdin_name is not None:
        paths = (stdin_name,)
    try:
        if config_path is not None and not os.path.isfile(config_path):
            raise click.UsageError(f"--config: file `{config_path}` does not exist.")
        pyproject = None if isolated else (config_path or find_pyproject(paths[0] if paths else "."))
        cfg = load(pyproject)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    # CI cancels with SIGTERM: stop as on Ctrl-C (workers killed, temporary folders removed, exit 130).
    signal.signal(signal.SIGTERM, _interrupt)
    settings = _settings(paths, cfg, select, ignore, extend_select, exclude, extend_exclude, force_exclude, verify,
                         verify_timeout, verify_memory, jobs)
    base = os.path.dirname(cfg.path) if cfg.path else os.getcwd()
    if not no_cache:
        settings.cache_dir = cache_dir or os.path.join(base, ".jaxlint_cache")
    # Verdicts recorded by `pytest --jaxlint` are evidence, not a cache: read them even with --no-cache.
    settings.tests_dir = os.path.join(cache_dir or os.path.join(base, ".jaxlint_cache"), "tests")
    if stdin_name is not None:
        settings.sources = {stdin_name: click.get_binary_stream("stdin").read()}
        settings.context = buffer_context(stdin_name, settings.include) if stdin_name != "-" else []
    try:
        if add_noqa:
            added, errors = add_noqa_comments(settings)
            for err in errors:
                click.echo(f"jaxlint: {err}", err=True)
            click.echo(f"Added {added} suppression comment{'s' if added != 1 else ''}.")
            sys.exit(2 if errors else 0)
        if show_diff or fix:
            fixes, errors = fix_paths(settings, unsafe=unsafe_fixes, write=fix and not show_diff)
            for err in errors:
                click.echo(f"jaxlint: {err}", err=True)
            if fix and not show_diff and stdin_name is not None:
                # Ruff's convention: the fixed buffer on stdout, the findings left on stderr.
                fixed = fixes[0].fixed if fixes else settings.sources[stdin_name]
                click.get_binary_stream("stdout").write(fixed)
                settings.sources = {stdin_name: fixed}
                output_to_stderr = True
            if show_diff:
                for res in fixes:
                    click.echo(unified_diff(res), nl=False)
                n = sum(len(r.applied) for r in fixes)
                click.echo(f"{n} fix{'es' if n != 1 else ''} available in {len(fixes)} file{'s' if len(fixes) != 1 else ''}.",
                           err=True)
                sys.exit(1 if fixes else 0)
            n = sum(len(r.applied) for r in fixes)
            if n:
                click.echo(f"Fixed {n} finding{'s' if n != 1 else ''} in {len(fixes)} file{'s' if len(fixes) != 1 else ''}.",
                           err=True)
        result = run(settings)
    except PathError as exc:
        raise click.UsageError(str(exc)) from None
    except KeyboardInterrupt:
        click.echo("jaxlint: interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one line, exit 2
        if verbose:
            traceback.print_exc()
        click.echo(f"jaxlint: internal error: {type(exc).__name__}: {exc} (run with --verbose for details)", err=True)
        sys.exit(2)

    shown = visible(result.findings, show_refuted)
    if fmt == "json":
        text = to_json(result.findings, result.files, result.seconds)
    elif fmt == "sarif":
        text = to_sarif(shown, os.getcwd(), sources=settings.sources)
    elif fmt == "github":
        text = to_github(shown, sources=settings.sources)
    else:
        plain = output_file is not None
        style = (lambda s, **_: s) if plain else click.style
        text = to_text(shown, result.files, verified=settings.verify, style=style, show_links=show_links,
                       sources=settings.sources)
    if show_stats and fmt == "text":
        stats = statistics(shown)
        text = (stats + "\n" + text) if stats else text
    if output_file is not None:
        with open(output_file, "w", encoding="utf-8") as f:
            f.write(text + "\n" if text else "")
    elif text:
        click.echo(text, err=output_to_stderr)
    for note in result.notes:
        click.echo(f"jaxlint: {note}", err=True)
    for err in result.errors:
        click.echo(f"jaxlint: {err}", err=True)
    if result.errors:
        sys.exit(2)
    counted = [f for f in result.findings if f.verification.status != "refuted"]
    sys.exit(0 if exit_zero or not counted else 1)


def _stdin_name(paths: tuple[str, ...], stdin_filename: Optional[str], add_noqa: bool) -> Optional[str]:
    """The name standard input goes by when the file is read from it (`-`), else None."""
    if "-" not in paths and not (stdin_filename is not None and not paths):
        if stdin_filename is not None:
            raise click.UsageError("--stdin-filename names the file read from standard input; pass `-` instead of paths.")
        return None
    if any(p != "-" for p in paths):
        raise click.UsageError("`-` (read the file from standard input) cannot be combined with other paths.")
    if add_noqa:
        raise click.UsageError("--add-noqa writes comments into files; it cannot be used with standard input.")
    return stdin_filename or "-"


@main.command("clean", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None, help="The cache folder to remove.")
def clean(cache_dir: Optional[str]) -> None:
    """Remove the result cache."""
    from .cache import clean as remove

    pyproject = find_pyproject(".")
    folder = cache_dir or os.path.join(os.path.dirname(pyproject) if pyproject else os.getcwd(), ".jaxlint_cache")
    click.echo(f"Removed {folder}" if remove(folder) else f"No cache at {folder}")


@main.command("rule", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("name", required=False)
@click.option("--all", "show_all", is_flag=True, help="List every rule.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def rule(name: Optional[str], show_all: bool, fmt: str) -> None:
    """Explain the rule NAME (a slug such as `traced-if`, or a code such as `JL101`)."""
    import inspect
    import json

    if show_all or name is None:
        rows = [{"code": r.code, "name": r.name, "summary": r.summary} for r in RULES]
        rows.append({"code": SYNTAX_ERROR[0], "name": SYNTAX_ERROR[1], "summary": SYNTAX_ERROR[2]})
        if fmt == "json":
            click.echo(json.dumps(rows, indent=2))
        else:
            for r in rows:
                click.echo(f"{r['code']}  {r['name']:<24} {r['summary']}")
        return
    cls = BY_NAME.get(name) or BY_CODE.get(name.upper())
    if cls is None:
        raise click.UsageError(f"`{name}` is not a jaxlint rule (see `jaxlint rule --all`).")
    doc = inspect.cleandoc(cls.__doc__ or "")
    if fmt == "json":
        click.echo(json.dumps({"code": cls.code, "name": cls.name, "summary": cls.summary, "doc": doc}, indent=2))
    else:
        click.echo(f"# {cls.name} ({cls.code})\n\n{doc}")


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def entry() -> None:
    """The console script: click's own handling, and one line instead of a traceback for anything else."""
    try:
        main(standalone_mode=True)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        click.echo("jaxlint: interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001
        if "--verbose" in sys.argv or "-v" in sys.argv:
            traceback.print_exc()
        click.echo(f"jaxlint: internal error: {type(exc).__name__}: {exc} (run with --verbose for details)", err=True)
        sys.exit(2)


if __name__ == "__main__":  # pragma: no cover
    entry()
