"""The command-line contract: exit codes, JSON shape and order, suppression, selection, configuration."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from jaxlint.cli import main
from project_files import write as _write

HAZARD = textwrap.dedent(
    """\
    import jax

    @jax.jit
    def step(x):
        if x > 0:{comment}
            return x
        return -x
    """
)
CLEAN = textwrap.dedent(
    """\
    import jax
    import jax.numpy as jnp

    @jax.jit
    def step(x):
        if x.ndim == 2:
            return x
        return jnp.where(x > 0, x, -x)
    """
)




def _run(*args: str, cwd: Path | None = None):
    runner = CliRunner()
    if cwd is not None:
        with runner.isolated_filesystem(temp_dir=cwd):
            pass
    return runner.invoke(main, ["--no-verify", "--isolated", *args], catch_exceptions=False)


def _json(*args: str) -> dict:
    res = _run("--format", "json", *args)
    return json.loads(res.output)


def test_exit_0_on_clean_code(tmp_path: Path) -> None:
    _write(tmp_path, "ok.py", CLEAN)
    res = _run(str(tmp_path))
    assert res.exit_code == 0, res.output
    assert "No findings (1 file checked)." in res.output


def test_exit_1_with_text_caret_and_summary(tmp_path: Path) -> None:
    p = _write(tmp_path, "bad.py", HAZARD.format(comment=""))
    res = _run(str(p))
    assert res.exit_code == 1
    lines = res.output.splitlines()
    assert lines[0].startswith(f"{p}:5:5: JL101 [traced-if] ")
    assert lines[1] == "        if x > 0:"
    assert lines[2] == "        ^^^^^^^^"
    assert lines[-1] == "1 finding in 1 file (1 checked)"


def test_exit_2_for_missing_path(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["--no-verify", str(tmp_path / "nope.py")])
    assert res.exit_code == 2
    assert "nope.py" in res.output and "does not exist" in res.output


def test_exit_2_for_unknown_selector(tmp_path: Path) -> None:
    _write(tmp_path, "ok.py", CLEAN)
    res = CliRunner().invoke(main, ["--no-verify", "--select", "traced-iff", str(tmp_path)])
    assert res.exit_code == 2
    assert "traced-iff" in res.output


def test_exit_2_for_unknown_config_key_names_key_and_file(tmp_path: Path) -> None:
    _write(tmp_path, "pyproject.toml", "[tool.jaxlint]\nselekt = ['JL1']\n")
    _write(tmp_path, "ok.py", CLEAN)
    res = CliRunner().invoke(main, ["--no-verify", str(tmp_path)])
    assert res.exit_code == 2
    assert "selekt" in res.output and "pyproject.toml" in res.output


def test_exit_2_for_bad_config_value(tmp_path: Path) -> None:
    _write(tmp_path, "pyproject.toml", "[tool.jaxlint]\nverify = 'yes'\n")
    _write(tmp_path, "ok.py", CLEAN)
    res = CliRunner().invoke(main, ["--no-verify", str(tmp_path)])
    assert res.exit_code == 2
    assert "`verify`" in res.output


def test_config_select_and_cli_wins(tmp_path: Path) -> None:
    _write(tmp_path, "pyproject.toml", "[tool.jaxlint]\nignore = ['traced-if']\n")
    _write(tmp_path, "bad.py", HAZARD.format(comment=""))
    res = CliRunner().invoke(main, ["--no-verify", str(tmp_path)])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, ["--no-verify", "--ignore", "", str(tmp_path)])
    assert res.exit_code == 1, res.output


def test_per_file_ignores_and_exclude(tmp_path: Path) -> None:
    _write(tmp_path, "pyproject.toml", "[tool.jaxlint]\nper-file-ignores = { 'legacy/*' = ['JL1'] }\nexclude = ['gen_*.py']\n")
    _write(tmp_path, "legacy/old.py", HAZARD.format(comment=""))
    _write(tmp_path, "gen_code.py", HAZARD.format(comment=""))
    _write(tmp_path, "ok.py", CLEAN)
    res = CliRunner().invoke(main, ["--no-verify", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "(2 files checked)" in res.output


def test_json_fields_and_order(tmp_path: Path) -> None:
    _write(tmp_path, "b.py", HAZARD.format(comment=""))
    _write(tmp_path, "a.py", HAZARD.format(comment="\n        print(x)"))
    doc = _json(str(tmp_path))
    assert list(doc) == ["version", "findings", "summary"]
    f0 = doc["findings"][0]
    assert list(f0) == ["path", "line", "column", "end_line", "end_column", "code", "name", "message", "function",
                        "verification", "fix"]
    assert f0["verification"] == {"status": "not-run", "detail": ""}
    assert f0["function"] == "step" and f0["fix"] is None
    keys = [(f["path"], f["line"], f["column"], f["code"]) for f in doc["findings"]]
    assert keys == sorted(keys)
    assert [f["name"] for f in doc["findings"]] == ["traced-if", "print-in-trace", "traced-if"]
    assert doc["summary"]["files"] == 2 and doc["summary"]["findings"] == 3
    assert set(doc["summary"]) == {"files", "findings", "confirmed", "refuted", "unverified", "seconds"}


@pytest.mark.parametrize(
    "comment, suppressed",
    [
        ("  # noqa", True),
        ("  # noqa: JL101", True),
        ("  # noqa: JL201, JL101", True),
        ("  # noqa: JL201", False),
        ("  # jaxlint: ignore[traced-if]", True),
        ("  # jaxlint: ignore[print-in-trace]", False),
        ("  # jaxlint: ignore", True),
    ],
)
def test_suppression(tmp_path: Path, comment: str, suppressed: bool) -> None:
    p = _write(tmp_path, "s.py", HAZARD.format(comment=comment))
    doc = _json(str(p))
    assert (len(doc["findings"]) == 0) is suppressed


def test_selection_by_code_prefix_and_name(tmp_path: Path) -> None:
    p = _write(tmp_path, "a.py", HAZARD.format(comment="\n        print(x)"))
    assert {f["name"] for f in _json("--select", "JL2", str(p))["findings"]} == {"print-in-trace"}
    assert {f["name"] for f in _json("--select", "traced-if", str(p))["findings"]} == {"traced-if"}
    assert {f["name"] for f in _json("--ignore", "JL101", str(p))["findings"]} == {"print-in-trace"}


def test_syntax_error_reported_and_other_files_checked(tmp_path: Path) -> None:
    _write(tmp_path, "broken.py", "def f(:\n    pass\n")
    _write(tmp_path, "bad.py", HAZARD.format(comment=""))
    doc = _json(str(tmp_path))
    by_name = {f["name"]: f for f in doc["findings"]}
    assert set(by_name) == {"syntax-error", "traced-if"}
    se = by_name["syntax-error"]
    assert (se["line"], se["column"], se["code"]) == (1, 7, "JL901")
    assert se["verification"]["status"] == "not-run"


def test_undecodable_file_is_a_syntax_error(tmp_path: Path) -> None:
    (tmp_path / "latin.py").write_bytes(b"x = '\xe9t\xe9'\n")
    doc = _json(str(tmp_path))
    assert [f["name"] for f in doc["findings"]] == ["syntax-error"]


def test_path_given_twice_is_checked_once(tmp_path: Path) -> None:
    p = _write(tmp_path, "bad.py", HAZARD.format(comment=""))
    doc = _json(str(p), str(p), str(tmp_path))
    assert len(doc["findings"]) == 1 and doc["summary"]["files"] == 1


def test_rule_docs() -> None:
    res = CliRunner().invoke(main, ["rule", "traced-if"])
    assert res.exit_code == 0 and "## Why is this bad?" in res.output
    res = CliRunner().invoke(main, ["rule", "JL201"])
    assert res.exit_code == 0 and "print-in-trace" in res.output
    res = CliRunner().invoke(main, ["rule", "--all", "--format", "json"])
    assert {r["name"] for r in json.loads(res.output)} >= {"traced-if", "jit-in-loop", "syntax-error"}
    assert CliRunner().invoke(main, ["rule", "nope"]).exit_code == 2


def test_console_script_end_to_end(tmp_path: Path) -> None:
    p = _write(tmp_path, "bad.py", HAZARD.format(comment=""))
    proc = subprocess.run([sys.executable, "-m", "jaxlint", "--no-verify", "--isolated", "--format", "json", str(p)],
                          capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["findings"][0]["name"] == "traced-if"


def test_show_links(tmp_path: Path) -> None:
    p = _write(tmp_path, "bad.py", HAZARD.format(comment=""))
    res = _run("--show-links", str(p))
    assert "= help: https://docs.jax.dev/" in res.output
