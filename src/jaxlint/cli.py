"""The command line: options -> Settings, run the pipeline, print, pick the exit code. No analysis here."""
from __future__ import annotations

import os
import signal
import sys
import threading
import traceback
from typing import TYPE_CHECKING, NoReturn, Optional, TextIO

import click

from . import __version__
from .api import DEFAULT_INCLUDE, PathError, Settings, buffer_context, add_noqa as add_noqa_comments, fix_paths, run
from .fix import unified_diff
from .config import Config, ConfigError, find_pyproject, load, override
from .report import statistics, to_github, to_json, to_sarif, to_text, visible
from .rules import ALL_CODES, BY_CODE, BY_NAME, DEFAULT_CODES, PSEUDO_RULES, RULES
from .select import SelectionError, expand, split
from .suppress import suggest

if TYPE_CHECKING:
    from .fix import FixResult


class CliError(click.ClickException):
    """A bad option, configuration or path: one line on stderr and exit 2, without click's usage text."""

    exit_code = 2


class _DefaultToCheck(click.Group):
    """`jaxlint PATH...` runs `check`; `jaxlint rule NAME` runs a subcommand; `jaxlint --help` shows both."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ctx.help_option_names):
            args = ["check", *args]
        return super().parse_args(ctx, args)

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage(ctx.command_path, "[OPTIONS] [PATHS]...")
        formatter.write_usage(ctx.command_path, "COMMAND [ARGS]...", prefix="       ")

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self.format_usage(ctx, formatter)
        self.format_help_text(ctx, formatter)
        self.format_commands(ctx, formatter)
        # The options of the default command, which is what `jaxlint [OPTIONS] [PATHS]` runs.
        check_cmd = self.commands["check"]
        with click.Context(check_cmd, info_name=ctx.command_path, help_option_names=["-h", "--help"]) as sub:
            with formatter.section("Options (of `check`, the default command)"):
                formatter.write_dl([r for p in check_cmd.get_params(sub)
                                    if isinstance(p, click.Option) and (r := p.get_help_record(sub))])


@click.group(cls=_DefaultToCheck, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """jaxlint: find JAX trace hazards and prove them by tracing.

    `jaxlint [OPTIONS] [PATHS]` checks files and folders (the `check` command, the default);
    the commands below do the rest. Exit status: 0 no findings, 1 findings, 2 usage, configuration
    or internal error.
    """


def _given(values: tuple[str, ...]) -> Optional[list[str]]:
    """The selectors of a repeatable option (repeats accumulate); None when the option was not given."""
    return split(values) if values else None


def _per_file_ignores(values: tuple[str, ...]) -> dict[str, list[str]]:
    """`--per-file-ignores` in Ruff's form: `GLOB:CODES`, comma-separated; a bare code continues the last glob."""
    out: dict[str, list[str]] = {}
    glob: Optional[str] = None
    for value in values:
        for part in (p.strip() for p in value.split(",")):
            if not part:
                continue
            if ":" in part:
                glob, _, part = (x.strip() for x in part.rpartition(":"))
                if not glob or not part:
                    raise CliError(f"--per-file-ignores: `{value}` is not `GLOB:CODES` (such as `tests/*:JL201`).")
            elif glob is None:
                raise CliError(f"--per-file-ignores: `{part}` has no glob; write `GLOB:CODES` (such as `tests/*:JL201`).")
            out.setdefault(glob, []).append(part)
    return out


def _settings(paths: tuple[str, ...], cfg: Config, select: Optional[list[str]], ignore: Optional[list[str]],
              extend_select: list[str], extend_ignore: list[str], per_file_cli: dict[str, list[str]],
              exclude: Optional[list[str]], extend_exclude: list[str], force_exclude: bool, verify: Optional[bool],
              timeout: Optional[float], memory: Optional[int], jobs: Optional[int],
              respect_gitignore: Optional[bool]) -> Settings:
    try:
        # Every configured list is checked, even one the command line overrides: a typo there is
        # blamed on its file and key, never on the option that happens to be in force.
        for key in ("select", "ignore", "extend-select", "extend-ignore"):
            expand(getattr(cfg, key.replace("-", "_")) or [], option=cfg.source(key))
        per_file = {glob: expand(v, option=f"{cfg.source('per-file-ignores')} (`{glob}`)")
                    for glob, v in cfg.per_file_ignores.items()}
        if per_file_cli:  # the command line's table replaces the configured one, as Ruff's does
            per_file = {glob: expand(v, option=f"--per-file-ignores `{glob}`") for glob, v in per_file_cli.items()}
        if select is not None:
            codes = expand(select, option="--select")
        elif cfg.select is not None:
            codes = expand(cfg.select, option=cfg.source("select"))
        else:
            codes = set(DEFAULT_CODES)
        codes |= expand(cfg.extend_select, option=cfg.source("extend-select"))
        codes |= expand(extend_select, option="--extend-select")
        codes -= expand(ignore if ignore is not None else cfg.ignore,
                        option="--ignore" if ignore is not None else cfg.source("ignore"))
        codes -= expand(cfg.extend_ignore, option=cfg.source("extend-ignore"))
        codes -= expand(extend_ignore, option="--extend-ignore")
    except SelectionError as exc:
        raise CliError(str(exc)) from None
    excl = exclude if exclude is not None else (cfg.exclude or [])
    excl = excl + extend_exclude + cfg.extend_exclude
    return Settings(
        paths=list(paths) or ["."],
        codes=codes,
        exclude=excl,
        force_exclude=force_exclude,
        verify=verify if verify is not None else (cfg.verify if cfg.verify is not None else True),
        verify_timeout=timeout or cfg.verify_timeout or 10.0,
        verify_memory_mb=memory or cfg.verify_memory or 2048,
        jobs=jobs or 0,  # 0: from the amount of work (api.auto_jobs)
        per_file_ignores=per_file,
        trace_decorators=list(cfg.extend_trace_decorators),
        include=list(cfg.include if cfg.include is not None else DEFAULT_INCLUDE) + list(cfg.extend_include),
        respect_gitignore=respect_gitignore if respect_gitignore is not None else (
            cfg.respect_gitignore if cfg.respect_gitignore is not None else True),
    )


def _load_config(config_opts: tuple[str, ...], isolated: bool, paths: tuple[str, ...]) -> Config:
    """The configuration file (found, named by `--config PATH`, or none with `--isolated`), then the
    `--config KEY=VALUE` overrides on top, in the order given."""
    files = [c for c in config_opts if os.path.isfile(c)]
    overrides = [c for c in config_opts if not os.path.isfile(c)]
    for item in overrides:
        if "=" not in item:
            raise CliError(f"--config: file `{item}` does not exist (nor is it a TOML `KEY = VALUE` such as "
                           "`verify = false`).")
    if len(files) > 1:
        raise CliError(f"--config: give one configuration file, not {len(files)} ({', '.join(files)}).")
    try:
        pyproject = None if isolated else (files[0] if files else find_pyproject(paths[0] if paths else "."))
        cfg = load(pyproject)
        for item in overrides:
            override(cfg, item)
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    return cfg


def _use_color(choice: str, to_file: bool, stream: "TextIO") -> bool:
    """`--color`: `auto` colours a terminal only (`stream`, where the report goes), and never when
    NO_COLOR is set (https://no-color.org)."""
    if choice != "auto":
        return choice == "always"
    return not to_file and not os.environ.get("NO_COLOR") and stream.isatty()


@main.command("check", context_settings={"help_option_names": ["-h", "--help"]},
              short_help="Check files and folders for JAX trace hazards (the default command).")
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--format", "--output-format", "fmt", type=click.Choice(["text", "json", "sarif", "github"]),
              default="text", show_default=True,
              help="text for people, json for tools, sarif for code scanning, github for Actions.")
@click.option("--select", metavar="CODES", multiple=True,
              help="Rule codes, prefixes or names to check, comma-separated; repeats add up "
                   "(default: all but opt-in rules; ALL selects every rule).")
@click.option("--ignore", metavar="CODES", multiple=True, help="Rules to skip (replaces the configured `ignore`).")
@click.option("--extend-select", metavar="CODES", multiple=True, help="Rules to add to the selection.")
@click.option("--extend-ignore", metavar="CODES", multiple=True, help="Rules to skip in addition to the ignored ones.")
@click.option("--per-file-ignores", "per_file_ignores", metavar="GLOB:CODES", multiple=True,
              help="Rules to skip in files matching GLOB, such as `tests/*:JL201,JL202` (replaces the configured table).")
@click.option("--exclude", metavar="GLOBS", multiple=True, help="Glob patterns of files and folders to skip.")
@click.option("--extend-exclude", metavar="GLOBS", multiple=True, help="Patterns to skip in addition to the configured ones.")
@click.option("--force-exclude", is_flag=True, help="Apply exclusions to files named on the command line too (for pre-commit).")
@click.option("--respect-gitignore/--no-respect-gitignore", default=None,
              help="Skip files that .gitignore files ignore when walking folders [default: on].")
@click.option("--with-importers", is_flag=True,
              help="Also read the project's files that import the given files, so hazards their traced callers "
                   "reach are found; findings are reported only in the given files (for pre-commit).")
@click.option("--verify/--no-verify", default=None,
              help="Verify each finding by tracing it with JAX in a sandboxed worker (default: on).")
@click.option("--verify-timeout", type=click.FloatRange(min=0.1), default=None, metavar="SECONDS",
              help="Time limit per verified function [default: 10].")
@click.option("--verify-memory", type=click.IntRange(min=64), default=None, metavar="MIB",
              help="Memory limit of a verification worker in MiB [default: 2048].")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None, help="Parallel processes [default: from the amount of work and the idle CPUs].")
@click.option("--no-cache", is_flag=True, help="Do not read or write the result cache.")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
              help="Where to keep the result cache [default: .jaxlint_cache next to pyproject.toml, or in the current folder].")
@click.option("--fix", is_flag=True, help="Apply safe autofixes in place.")
@click.option("--unsafe-fixes", is_flag=True, help="Also apply fixes that may change behaviour (with --fix or --diff).")
@click.option("--diff", "show_diff", is_flag=True, help="Print the fixes as a diff instead of writing them.")
@click.option("--add-noqa", is_flag=True, help="Add `# jaxlint: ignore[...]` to every line with a finding.")
@click.option("--show-fixes", is_flag=True, help="Show the fix of each fixable finding, and list what --fix fixed.")
@click.option("--show-refuted", is_flag=True, help="Also print findings that verification proved false.")
@click.option("--statistics", "show_stats", is_flag=True,
              help="Print only the number of findings per rule (a JSON list with --format json).")
@click.option("--show-links", is_flag=True, help="Print a link to the JAX documentation under each finding.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings.")
@click.option("--output-file", "-o", type=click.Path(dir_okay=False, writable=True), help="Write the report to a file.")
@click.option("--config", "config_opts", metavar="PATH|KEY=VALUE", multiple=True,
              help="Use this pyproject.toml, or override one setting in TOML syntax (`verify = false`); repeatable.")
@click.option("--isolated", is_flag=True, help="Ignore all configuration files.")
@click.option("--quiet", "-q", is_flag=True, help="Print the findings only: no summary, no progress.")
@click.option("--color", type=click.Choice(["auto", "always", "never"]), default="auto", show_default=True,
              help="Colour the text output (auto: on a terminal, unless NO_COLOR is set).")
@click.option("--verbose", "-v", is_flag=True, help="Show tracebacks of internal errors.")
@click.option("--stdin-filename", metavar="PATH", default=None,
              help="With `-`: the file that standard input holds, for messages, configuration, per-file ignores "
                   "and cross-file following.")
@click.version_option(__version__, "--version", prog_name="jaxlint")
def check(paths: tuple[str, ...], fmt: str, select: tuple[str, ...], ignore: tuple[str, ...],
          extend_select: tuple[str, ...], extend_ignore: tuple[str, ...], per_file_ignores: tuple[str, ...],
          exclude: tuple[str, ...], extend_exclude: tuple[str, ...], force_exclude: bool,
          respect_gitignore: Optional[bool], with_importers: bool, verify: Optional[bool], verify_timeout: Optional[float],
          verify_memory: Optional[int], jobs: Optional[int], no_cache: bool, cache_dir: Optional[str], fix: bool,
          unsafe_fixes: bool, show_diff: bool, add_noqa: bool, show_fixes: bool, show_refuted: bool,
          show_stats: bool, show_links: bool, exit_zero: bool, output_file: Optional[str],
          config_opts: tuple[str, ...], isolated: bool, quiet: bool, color: str, verbose: bool,
          stdin_filename: Optional[str]) -> None:
    """Check PATHS (files or folders; default: the current folder) for JAX trace hazards.

    Exit status: 0 no findings, 1 findings, 2 usage, configuration or internal error, 130 interrupted.
    `jaxlint rule NAME` explains a rule; `jaxlint rule --all` lists them.
    """
    stdin_name = _stdin_name(paths, stdin_filename, add_noqa)
    output_to_stderr = False
    if stdin_name is not None:
        paths = (stdin_name,)
    # CI cancels with SIGTERM: stop as on Ctrl-C (workers killed, temporary folders removed, exit 130).
    signal.signal(signal.SIGTERM, _interrupt)
    cfg = _load_config(config_opts, isolated, paths)
    settings = _settings(paths, cfg, _given(select), _given(ignore), split(extend_select), split(extend_ignore),
                         _per_file_ignores(per_file_ignores), _given(exclude), split(extend_exclude), force_exclude,
                         verify, verify_timeout, verify_memory, jobs, respect_gitignore)
    settings.progress = not quiet
    settings.with_importers = with_importers
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
            n = sum(len(r.applied) for r in fixes)
            files = f"{len(fixes)} file{'s' if len(fixes) != 1 else ''}"
            if show_diff:
                for res in fixes:
                    click.echo(unified_diff(res), nl=False)
                if not quiet:
                    click.echo(f"{n} fix{'es' if n != 1 else ''} available in {files}.", err=True)
                sys.exit(1 if fixes else 0)
            if n and not quiet:
                click.echo(f"Fixed {n} finding{'s' if n != 1 else ''} in {files}" + (":" if show_fixes else "."),
                           err=True)
                if show_fixes:
                    click.echo(_fixed_list(fixes), err=True)
        result = run(settings)
    except PathError as exc:
        raise CliError(str(exc)) from None
    except KeyboardInterrupt:
        _stop_interrupted()
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one line, exit 2
        if verbose:
            traceback.print_exc()
        click.echo(f"jaxlint: internal error: {type(exc).__name__}: {exc} (run with --verbose for details)", err=True)
        sys.exit(2)

    shown = visible(result.findings, show_refuted)
    use_color = _use_color(color, output_file is not None, sys.stderr if output_to_stderr else sys.stdout)
    if show_stats:  # only the table, as Ruff prints it
        text = statistics(shown, unsafe_fixes, "json" if fmt == "json" else "text")
    elif fmt == "json":
        text = to_json(result.findings, result.files, result.seconds)
    elif fmt == "sarif":
        text = to_sarif(shown, os.getcwd(), sources=settings.sources)
    elif fmt == "github":
        text = to_github(shown, sources=settings.sources)
    else:
        style = click.style if use_color else (lambda s, **_: s)
        text = to_text(shown, result.files, verified=settings.verify, style=style, show_links=show_links,
                       show_fixes=show_fixes, unsafe_fixes=unsafe_fixes, quiet=quiet, sources=settings.sources)
    if output_file is not None:
        with open(output_file, "w", encoding="utf-8") as f:
            f.write(text + "\n" if text else "")
    elif text:
        click.echo(text, err=output_to_stderr, color=use_color)
    for note in result.notes:
        click.echo(f"jaxlint: {note}", err=True)
    for err in result.errors:
        click.echo(f"jaxlint: {err}", err=True)
    if result.errors:
        sys.exit(2)
    counted = [f for f in result.findings if f.verification.status != "refuted"]
    sys.exit(0 if exit_zero or not counted else 1)


def _fixed_list(fixes: list["FixResult"]) -> str:
    """What `--fix` fixed, per file and rule (Ruff's `--show-fixes` list)."""
    from collections import Counter

    out = []
    for res in fixes:
        out.append(f"- {res.path}:")
        for (code, name), n in sorted(Counter((f.code, f.name) for f in res.applied).items()):
            out.append(f"    {n} × {code} ({name})")
    return "\n".join(out)


def _stdin_name(paths: tuple[str, ...], stdin_filename: Optional[str], add_noqa: bool) -> Optional[str]:
    """The name standard input goes by when the file is read from it (`-`), else None."""
    if "-" not in paths and not (stdin_filename is not None and not paths):
        if stdin_filename is not None:
            raise CliError("--stdin-filename names the file read from standard input; pass `-` instead of paths.")
        return None
    if any(p != "-" for p in paths):
        raise CliError("`-` (read the file from standard input) cannot be combined with other paths.")
    if add_noqa:
        raise CliError("--add-noqa writes comments into files; it cannot be used with standard input.")
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
        rows = [{"code": r.code, "name": r.name, "summary": r.summary, "default": r.code in DEFAULT_CODES}
                for r in RULES]
        rows += [{"code": code, "name": nm, "summary": summary, "default": True} for code, nm, summary in PSEUDO_RULES]
        rows.sort(key=lambda r: r["code"])
        if fmt == "json":
            click.echo(json.dumps(rows, indent=2))
        else:
            for r in rows:
                click.echo(f"{r['code']}  {r['name']:<24} {r['summary']}" + ("" if r["default"] else " (opt-in)"))
        return
    cls = BY_NAME.get(name) or BY_CODE.get(name.upper())
    if cls is None:
        pseudo = next((p for p in PSEUDO_RULES if name in (p[1], p[0]) or name.upper() == p[0]), None)
        if pseudo is not None:
            code, nm, summary = pseudo
            if fmt == "json":
                click.echo(json.dumps({"code": code, "name": nm, "summary": summary, "doc": summary}, indent=2))
            else:
                click.echo(f"# {nm} ({code})\n\n{summary} It is reported by the parser, not by a rule module, "
                           "and a line comment cannot suppress it (the file was not read); `# jaxlint: skip-file` or "
                           "`per-file-ignores` can.")
            return
        close = suggest(name, [*ALL_CODES.values(), *ALL_CODES])
        hint = f"; did you mean `{close}`?" if close else " (see `jaxlint rule --all`)."
        raise CliError(f"`{name}` is not a jaxlint rule{hint}")
    doc = inspect.cleandoc(cls.__doc__ or "")
    if fmt == "json":
        click.echo(json.dumps({"code": cls.code, "name": cls.name, "summary": cls.summary, "doc": doc}, indent=2))
    else:
        click.echo(f"# {cls.name} ({cls.code})\n\n{doc}")


@main.command("server", context_settings={"help_option_names": ["-h", "--help"]})
def server() -> None:
    """Run the language server for editors (LSP over stdin/stdout; needs `pip install 'jax-trace-hazards[lsp]'`)."""
    try:
        from .server import serve
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in ("pygls", "lsprotocol", "cattrs"):
            raise
        click.echo(f"jaxlint: `jaxlint server` needs {exc.name}, which is not installed; "
                   "install it with `pip install 'jax-trace-hazards[lsp]'`.", err=True)
        sys.exit(2)
    sys.exit(serve())


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _stop_interrupted() -> NoReturn:
    """Exit 130 at once. The static pass may still be running on its own thread (the main thread only
    waits for it): letting the interpreter shut down around it aborts the process, so with another thread
    alive the process ends here, once its output is flushed (worker processes and temporary folders
    were already seen to on the way out)."""
    # The pool's and the analysis's threads may fail as the workers go: that is the stop, not news.
    threading.excepthook = lambda args: None
    click.echo("jaxlint: interrupted", err=True)
    import multiprocessing

    for child in multiprocessing.active_children():  # pool workers a SIGTERM to jaxlint alone did not reach
        child.terminate()
    if threading.active_count() > 1:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(130)
    sys.exit(130)


def entry() -> None:
    """The console script: click's handling of usage errors, exit 130 for an interrupt wherever it lands
    (click itself would turn one that arrives while it parses the options into "Aborted!" and exit 1),
    and one line instead of a traceback for anything else."""
    try:
        code = main(standalone_mode=False, prog_name="jaxlint")
    except SystemExit:
        raise
    except (KeyboardInterrupt, click.exceptions.Abort):
        _stop_interrupted()
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except BrokenPipeError:  # `jaxlint . | head`: the reader left; say nothing more
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - (the interpreter flushes it on the way out)
        sys.exit(1)
    except Exception as exc:  # noqa: BLE001
        if "--verbose" in sys.argv or "-v" in sys.argv:
            traceback.print_exc()
        click.echo(f"jaxlint: internal error: {type(exc).__name__}: {exc} (run with --verbose for details)", err=True)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":  # pragma: no cover
    entry()
