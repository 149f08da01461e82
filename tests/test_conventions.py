"""Options users bring from Ruff and flake8: aliases, selection that adds up, overrides, colour, quiet, gitignore."""
from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from jaxlint.cli import main
from project_files import write as _write

# Three findings: print-in-trace (safe fix), traced-if on an `int` parameter (unsafe fix: mark it
# static), and traced-while (no fix).
MIXED = textwrap.dedent(
    """\
    import jax

    @jax.jit
    def step(x, n: int):
        print("x", x)
        if n > 0:
            x = x + 1
        while x > 10:
            x = x / 2
        return x
    """
)
HAZARD = textwrap.dedent(
    """\
    import jax

    @jax.jit
    def step(x):
        print(x)
        if x > 0:
            return x
        return -x
    """
)




def _run(*args: str, env: dict | None = None):
    return CliRunner().invoke(main, ["--no-verify", "--no-cache", *args], catch_exceptions=False, env=env)


def _names(res) -> list[str]:
    return sorted(f["name"] for f in json.loads(res.output)["findings"])


def test_output_format_is_an_alias_of_format(tmp_path: Path) -> None:
    p = _write(tmp_path, "a.py", HAZARD)
    res = _run("--isolated", "--output-format", "json", str(p))
    assert res.exit_code == 1
    assert _names(res) == ["print-in-trace", "traced-if"]


def test_statistics_prints_only_the_table(tmp_path: Path) -> None:
    p = _write(tmp_path, "a.py", MIXED)
    res = _run("--isolated", "--statistics", str(p))
    assert res.exit_code == 1
    assert res.output.splitlines() == ["1\tJL101\t[ ] traced-if", "1\tJL102\t[ ] traced-while",
                                       "1\tJL201\t[*] print-in-trace"]


def test_statistics_as_json(tmp_path: Path) -> None:
    p = _write(tmp_path, "a.py", MIXED)
    res = _run("--isolated", "--statistics", "--format", "json", str(p))
    rows = json.loads(res.output)
    assert rows == [
        {"code": "JL101", "name": "traced-if", "count": 1, "fixable": False},
        {"code": "JL102", "name": "traced-while", "count": 1, "fixable": False},
        {"code": "JL201", "name": "print-in-trace", "count": 1, "fixable": True},
    ]


def test_fixable_marker_and_summary(tmp_path: Path) -> None:
    p = _write(tmp_path, "a.py", MIXED)
    lines = _run("--isolated", str(p)).output.splitlines()
    heads = [line for line in lines if line.startswith(str(p))]
    assert heads[0].startswith(f"{p}:5:5: JL201 [*] [print-in-trace] ")
    assert heads[1].startswith(f"{p}:6:5: JL101 [traced-if] ")  # its fix is unsafe: no marker by default
    assert heads[2].startswith(f"{p}:8:5: JL102 [traced-while] ")
    assert lines[-1] == "[*] 1 fixable with `--fix` (1 more with `--fix --unsafe-fixes`)."
    lines = _run("--isolated", "--unsafe-fixes", str(p)).output.splitlines()
    assert any(line.startswith(f"{p}:6:5: JL101 [*] [traced-if] ") for line in lines)
    assert lines[-1] == "[*] 2 fixable with `--fix --unsafe-fixes`."


def test_show_fixes_before_and_after_fixing(tmp_path: Path) -> None:
    p = _write(tmp_path, "a.py", MIXED)
    out = _run("--isolated", "--show-fixes", str(p)).output
    assert "    = fix (safe): Replace `print` with `jax.debug.print`" in out
    assert "    = fix (unsafe): Mark `n` static with `static_argnames`" in out
    res = _run("--isolated", "--fix", "--show-fixes", str(p))
    assert f"Fixed 1 finding in 1 file:\n- {p}:\n    1 × JL201 (print-in-trace)" in res.output
    assert "jax.debug.print" in p.read_text()


def test_repeated_select_and_ignore_add_up(tmp_path: Path) -> None:
    p = _write(tmp_path, "a.py", MIXED)
    assert _names(_run("--isolated", "--format", "json", "--select", "JL101", "--select", "JL201", str(p))) == \
        ["print-in-trace", "traced-if"]
    assert _names(_run("--isolated", "--format", "json", "--ignore", "JL101", "--ignore", "JL201", str(p))) == \
        ["traced-while"]


def test_extend_ignore_adds_to_the_configured_ignore(tmp_path: Path) -> None:
    _write(tmp_path, "pyproject.toml", "[tool.jaxlint]\nignore = ['traced-if']\n")
    p = _write(tmp_path, "a.py", MIXED)
    assert _names(_run("--format", "json", str(p))) == ["print-in-trace", "traced-while"]
    assert _names(_run("--format", "json", "--extend-ignore", "JL201", str(p))) == ["traced-while"]
    _write(tmp_path, "pyproject.toml", "[tool.jaxlint]\nextend-ignore = ['JL102']\n")
    assert _names(_run("--format", "json", str(p))) == ["print-in-trace", "traced-if"]


def test_per_file_ignores_on_the_command_line(tmp_path: Path) -> None:
    _write(tmp_path, "legacy/old.py", MIXED)
    _write(tmp_path, "new.py", MIXED)
    res = _run("--isolated", "--format", "json", "--per-file-ignores", "legacy/*:JL101,JL201",
               "--per-file-ignores", "*/new.py:traced-while", str(tmp_path))
    got = sorted((Path(f["path"]).name, f["name"]) for f in json.loads(res.output)["findings"])
    assert got == [("new.py", "print-in-trace"), ("new.py", "traced-if"), ("old.py", "traced-while")]
    bad = _run("--isolated", "--per-file-ignores", "JL101", str(tmp_path))
    assert bad.exit_code == 2 and "GLOB:CODES" in bad.output
    bad = _run("--isolated", "--per-file-ignores", "legacy/*:JL1O1", str(tmp_path))
    assert bad.exit_code == 2 and "did you mean `JL101`?" in bad.output


def test_config_key_value_overrides(tmp_path: Path) -> None:
    _write(tmp_path, "pyproject.toml", "[tool.jaxlint]\nignore = ['traced-if']\n")
    p = _write(tmp_path, "a.py", MIXED)
    res = _run("--format", "json", "--config", "ignore = ['print-in-trace']", "--config", "extend-ignore=['JL102']",
               str(p))
    assert _names(res) == ["traced-if"]
    # a path still works, and overrides apply on top of it
    other = _write(tmp_path, "conf/pyproject.toml", "[tool.jaxlint]\nselect = ['JL102']\n")
    assert _names(_run("--format", "json", "--config", str(other), str(p))) == ["traced-while"]
    assert _names(_run("--format", "json", "--config", str(other), "--config", "select=['JL2']", str(p))) == \
        ["print-in-trace"]


@pytest.mark.parametrize("value, words", [
    ("verfy = false", ["unknown key `verfy`", "did you mean `verify`?"]),
    ("verify = 'yes'", ["`verify` must be true or false"]),
    ("select = JL1", ["not a path to a pyproject.toml nor a TOML `KEY = VALUE`"]),
    ("ignore = ['traced-iff']", ["--config `ignore = ['traced-iff']`", "did you mean `traced-if`?"]),
    ("missing.toml", ["file `missing.toml` does not exist"]),
])
def test_config_override_errors(tmp_path: Path, value: str, words: list[str]) -> None:
    p = _write(tmp_path, "a.py", MIXED)
    res = _run("--isolated", "--config", value, str(p))
    assert res.exit_code == 2
    for w in words:
        assert w in res.output
    assert "Usage:" not in res.output


def test_quiet_prints_findings_only(tmp_path: Path) -> None:
    p = _write(tmp_path, "a.py", HAZARD)
    res = _run("--isolated", "--quiet", str(p))
    assert res.exit_code == 1
    assert res.output.splitlines()[0].startswith(f"{p}:5:5: JL201")
    assert "finding" not in res.output.splitlines()[-1] and "fixable" not in res.output
    ok = _write(tmp_path, "ok.py", "x = 1\n")
    res = _run("--isolated", "-q", str(ok))
    assert res.exit_code == 0 and res.output == ""


def test_color_always_and_never(tmp_path: Path) -> None:
    p = _write(tmp_path, "a.py", HAZARD)
    assert "\x1b[" in _run("--isolated", "--color", "always", str(p)).output
    assert "\x1b[" not in _run("--isolated", "--color", "never", str(p)).output
    assert "\x1b[" not in _run("--isolated", str(p)).output  # auto: the runner is not a terminal


def _on_a_terminal(args: list[str], env_extra: dict[str, str]) -> str:
    """Run jaxlint as a process whose stdout is a pseudo-terminal; what it printed."""
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    env.update(TERM="xterm", **env_extra)
    proc = subprocess.Popen([sys.executable, "-m", "jaxlint", "--no-verify", "--no-cache", "--isolated", *args],
                            stdout=slave, stderr=subprocess.DEVNULL, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(master)
    return b"".join(chunks).decode("utf-8", errors="replace")


def test_color_auto_on_a_terminal_and_no_color(tmp_path: Path) -> None:
    p = _write(tmp_path, "a.py", HAZARD)
    assert "\x1b[" in _on_a_terminal([str(p)], {})
    plain = _on_a_terminal([str(p)], {"NO_COLOR": "1"})
    assert "JL201" in plain and "\x1b[" not in plain
    assert "\x1b[" in _on_a_terminal(["--color", "always", str(p)], {"NO_COLOR": "1"})


def _git_tree(tmp: Path) -> Path:
    root = tmp / "repo"
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    _write(root, ".gitignore", "generated/\n*_gen.py\n!keep_gen.py\n")
    _write(root, "src/pkg/.gitignore", "scratch.py\n!*_gen.py\n")
    (root / ".git" / "info").mkdir(parents=True, exist_ok=True)
    (root / ".git" / "info" / "exclude").write_text("local_only.py\n")
    for name in ["src/pkg/model.py", "src/pkg/scratch.py", "src/pkg/table_gen.py", "src/other_gen.py",
                 "src/keep_gen.py", "generated/out.py", "local_only.py", "src/pkg/deep/scratch.py"]:
        _write(root, name, HAZARD)
    return root


def _checked(res) -> list[str]:
    return sorted({Path(f["path"]).as_posix() for f in json.loads(res.output)["findings"]})


def test_respect_gitignore_nested_and_negated(tmp_path: Path) -> None:
    root = _git_tree(tmp_path)
    cwd = os.getcwd()
    os.chdir(root)
    try:
        res = _run("--isolated", "--format", "json", "--select", "JL201", ".")
        # root .gitignore: generated/ and *_gen.py, but keep_gen.py; src/pkg/.gitignore: scratch.py
        # (also in deep/), and it re-includes *_gen.py below it; .git/info/exclude: local_only.py
        assert _checked(res) == ["src/keep_gen.py", "src/pkg/model.py", "src/pkg/table_gen.py"]
        # walking a subfolder still applies the .gitignore files above it, up to the repository root
        assert _checked(_run("--isolated", "--format", "json", "--select", "JL201", "src/pkg")) == \
            ["src/pkg/model.py", "src/pkg/table_gen.py"]
        every = _checked(_run("--isolated", "--format", "json", "--select", "JL201", "--no-respect-gitignore", "."))
        assert len(every) == 8
        _write(root, "pyproject.toml", "[tool.jaxlint]\nrespect-gitignore = false\n")
        assert len(_checked(_run("--format", "json", "--select", "JL201", "."))) == 8
        # a folder named on the command line is walked even when ignored; .gitignore files inside count
        _write(root, "generated/.gitignore", "skip_me.py\n")
        _write(root, "generated/skip_me.py", HAZARD)
        assert _checked(_run("--isolated", "--format", "json", "--select", "JL201", "generated")) == \
            ["generated/out.py"]
        # a file named on the command line is checked even when ignored (as git lints tracked files)
        assert _checked(_run("--isolated", "--format", "json", "--select", "JL201", "generated/out.py")) == \
            ["generated/out.py"]
    finally:
        os.chdir(cwd)


def test_help_lists_commands_and_check_options() -> None:
    res = CliRunner().invoke(main, ["--help"], prog_name="jaxlint")
    assert res.exit_code == 0
    out = res.output
    assert "Commands:" in out
    for word in ("check", "rule", "clean", "--select", "--output-format", "--statistics", "--color"):
        assert word in out
    assert "Usage: jaxlint [OPTIONS] [PATHS]..." in out


def test_config_errors_have_no_usage_noise_and_blame_the_file(tmp_path: Path) -> None:
    _write(tmp_path, "pyproject.toml", "[tool.jaxlint]\nignore = ['traced-iff']\n")
    _write(tmp_path, "a.py", HAZARD)
    res = _run(str(tmp_path))
    assert res.exit_code == 2
    assert "Usage:" not in res.output and "--ignore" not in res.output
    assert f"{tmp_path / 'pyproject.toml'}: [tool.jaxlint] `ignore`: `traced-iff`" in res.output
    assert "did you mean `traced-if`?" in res.output
    # even when the command line overrides that key
    res = _run("--ignore", "JL2", str(tmp_path))
    assert res.exit_code == 2 and "[tool.jaxlint] `ignore`" in res.output


@pytest.mark.parametrize("toml, option, hint", [
    ("selekt = ['JL1']", None, "did you mean `select`?"),
    ("per-file-ignores = { 'a/*' = ['print-in-trase'] }", None, "did you mean `print-in-trace`?"),
    ("", ("--select", "JL1O1"), "did you mean `JL101`?"),
    ("", ("--extend-select", "unused-supression"), "did you mean `unused-suppression`?"),
])
def test_did_you_mean(tmp_path: Path, toml: str, option, hint: str) -> None:
    _write(tmp_path, "pyproject.toml", f"[tool.jaxlint]\n{toml}\n")
    _write(tmp_path, "a.py", HAZARD)
    res = _run(*(option or ()), str(tmp_path))
    assert res.exit_code == 2, res.output
    assert hint in res.output and "Usage:" not in res.output


def test_rule_command_suggests_a_name() -> None:
    res = CliRunner().invoke(main, ["rule", "traced-iff"])
    assert res.exit_code == 2 and "did you mean `traced-if`?" in res.output


def test_console_script_help_names_jaxlint() -> None:
    proc = subprocess.run([sys.executable, "-m", "jaxlint", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0
    assert re.search(r"^Usage: jaxlint \[OPTIONS\] \[PATHS\]\.\.\.$", proc.stdout, re.M)
    assert "rule" in proc.stdout and "clean" in proc.stdout
