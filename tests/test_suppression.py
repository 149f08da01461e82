"""Suppression hygiene, by real runs on real files: file-level forms, mistyped and unused comments, and
files the parser cannot read."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from click.testing import CliRunner

from jaxlint.cli import main
from project_files import write as _write

HAZARD = textwrap.dedent(
    """\
    {head}import jax

    @jax.jit
    def step(x):
        print(x)
        if x > 0:{comment}
            return x
        return -x
    """
)




def _findings(*args: str) -> list[dict]:
    res = CliRunner().invoke(main, ["--no-verify", "--no-cache", "--isolated", "--format", "json", *args],
                             catch_exceptions=False)
    assert res.exit_code in (0, 1), res.output
    return json.loads(res.output)["findings"]


def _names(*args: str) -> list[tuple[int, str]]:
    return sorted((f["line"], f["name"]) for f in _findings(*args))


def test_skip_file(tmp_path: Path) -> None:
    p = _write(tmp_path, "a.py", HAZARD.format(head="# jaxlint: skip-file\n", comment=""))
    res = CliRunner().invoke(main, ["--no-verify", "--no-cache", "--isolated", str(p)])
    assert res.exit_code == 0 and "No findings (1 file checked)." in res.output


def test_skip_file_also_skips_a_file_that_does_not_parse(tmp_path: Path) -> None:
    p = _write(tmp_path, "a.py", "# jaxlint: skip-file\ndef f(:\n")
    assert _names(str(p)) == []


def test_ignore_file_by_name_and_code(tmp_path: Path) -> None:
    p = _write(tmp_path, "a.py", HAZARD.format(head="# jaxlint: ignore-file[traced-if]\n", comment=""))
    assert _names(str(p)) == [(6, "print-in-trace")]
    p.write_text(HAZARD.format(head="# jaxlint: ignore-file[JL201, traced-if]\n", comment=""))
    assert _names(str(p)) == []
    p.write_text(HAZARD.format(head="# jaxlint: ignore-file\n", comment=""))
    assert _names(str(p)) == []


def test_mistyped_rule_in_a_comment_is_reported(tmp_path: Path) -> None:
    p = _write(tmp_path, "a.py", HAZARD.format(head="", comment="  # jaxlint: ignore[traced-iff]"))
    found = _findings(str(p))
    assert sorted(f["name"] for f in found) == ["invalid-suppression", "print-in-trace", "traced-if"]
    bad = next(f for f in found if f["name"] == "invalid-suppression")
    assert (bad["code"], bad["line"], bad["column"], bad["end_column"]) == ("JL903", 6, 34, 44)
    assert "`traced-iff`" in bad["message"] and "did you mean `traced-if`?" in bad["message"]


def test_unused_suppression_is_opt_in(tmp_path: Path) -> None:
    p = _write(tmp_path, "a.py", "import jax\n\n@jax.jit\ndef f(x):\n    return x + 1  # jaxlint: ignore[traced-if]\n")
    assert _names(str(p)) == []
    assert _names("--extend-select", "unused-suppression", str(p)) == [(5, "unused-suppression")]
    assert _names("--select", "ALL", str(p)) == [(5, "unused-suppression")]
    # a rule that did not run does not make its comment unused
    assert _names("--select", "JL2,JL904", str(p)) == []


def test_fix_removes_unused_suppressions_and_keeps_the_rest(tmp_path: Path) -> None:
    source = textwrap.dedent(
        """\
        import os  # noqa: F401
        import jax

        # jaxlint: ignore-file[prng-key-reuse]
        @jax.jit
        def step(x):
            print(x)  # jaxlint: ignore[print-in-trace, traced-if]
            y = x * 2  # noqa: JL101, E501
            z = y + 1  # jaxlint: ignore  # the note stays
            if x > 0:  # noqa: JL101
                return z
            return -x
        """
    )
    p = _write(tmp_path, "a.py", source)
    res = CliRunner().invoke(main, ["--no-verify", "--no-cache", "--isolated", "--extend-select", "JL904", "--fix",
                                    str(p)])
    assert res.exit_code == 0, res.output
    assert "Fixed 4 findings in 1 file." in res.output
    assert p.read_text() == textwrap.dedent(
        """\
        import os  # noqa: F401
        import jax

        @jax.jit
        def step(x):
            print(x)  # jaxlint: ignore[print-in-trace]
            y = x * 2  # noqa: E501
            z = y + 1  # the note stays
            if x > 0:  # noqa: JL101
                return z
            return -x
        """
    )
    assert _names("--extend-select", "JL904", str(p)) == []


def test_fix_keeps_a_suppression_used_by_a_caller_in_another_file(tmp_path: Path) -> None:
    """The helper is traced only because a jitted function in another file calls it: its comment is used."""
    _write(tmp_path, "pkg/__init__.py", "")
    helper = _write(tmp_path, "pkg/helpers.py",
                    "import jax.numpy as jnp\n\n\ndef clip(x):\n    if jnp.any(x > 0):  # jaxlint: ignore[traced-if]\n"
                    "        return x\n    return -x\n")
    _write(tmp_path, "pkg/train.py",
           "import jax\n\nfrom .helpers import clip\n\n\n@jax.jit\ndef step(x):\n    return clip(x)\n")
    before = helper.read_text()
    assert _names("--extend-select", "JL904", str(tmp_path / "pkg")) == []
    res = CliRunner().invoke(main, ["--no-verify", "--no-cache", "--isolated", "--extend-select", "JL904", "--fix",
                                    str(tmp_path / "pkg")])
    assert res.exit_code == 0, res.output
    assert helper.read_text() == before
    # alone, the helper is not traced and its comment is unused
    assert _names("--extend-select", "JL904", str(helper)) == [(5, "unused-suppression")]


def test_diff_shows_the_removal_without_writing(tmp_path: Path) -> None:
    p = _write(tmp_path, "a.py", "x = 1  # noqa: JL201\n")
    res = CliRunner().invoke(main, ["--no-verify", "--no-cache", "--isolated", "--extend-select", "JL904", "--diff",
                                    str(p)])
    assert res.exit_code == 1
    assert "-x = 1  # noqa: JL201\n+x = 1\n" in res.output
    assert p.read_text() == "x = 1  # noqa: JL201\n"


def test_rule_docs_of_the_new_rules() -> None:
    for name, code in (("invalid-suppression", "JL903"), ("unused-suppression", "JL904")):
        res = CliRunner().invoke(main, ["rule", name])
        assert res.exit_code == 0 and f"# {name} ({code})" in res.output and "## Example" in res.output
    res = CliRunner().invoke(main, ["rule", "--all"])
    assert "JL904  unused-suppression" in res.output and "(opt-in)" in res.output


def test_file_libcst_cannot_parse_but_cpython_can(tmp_path: Path) -> None:
    # A parenthesised annotation target is valid Python that libcst rejects.
    p = _write(tmp_path, "a.py", "import jax\n\ncount = 0\n(count): int = 1\n")
    _write(tmp_path, "b.py", HAZARD.format(head="", comment=""))
    # naming no JAX library, the same code has nothing to check: CPython's parser alone reads it
    _write(tmp_path, "c.py", "count = 0\n(count): int = 1\n")
    found = _findings(str(tmp_path))
    by_name = {f["name"]: f for f in found}
    assert set(by_name) == {"unsupported-syntax", "print-in-trace", "traced-if"}
    f = by_name["unsupported-syntax"]
    assert f["code"] == "JL902" and f["path"] == str(p) and f["line"] == 4
    assert f["message"].startswith("jaxlint's parser could not read this file; it was not checked")
    assert "Syntax error" not in f["message"]


def test_file_neither_parser_accepts_gets_cpythons_message(tmp_path: Path) -> None:
    source = "x = 1\ny = 1__0\n"
    _write(tmp_path, "a.py", source)
    try:
        compile(source, "a.py", "exec")
    except SyntaxError as exc:
        cpython = exc
    (f,) = _findings(str(tmp_path))
    assert (f["name"], f["code"], f["line"], f["column"]) == ("syntax-error", "JL901", 2, cpython.offset)
    assert f["message"] == f"Syntax error: {cpython.msg}; the file was not checked."
    assert "Syntax Error @" not in f["message"]  # not libcst's raw text


def test_console_script_reports_unsupported_syntax(tmp_path: Path) -> None:
    p = _write(tmp_path, "a.py", "import jax\n(name): int = 1\n")
    proc = subprocess.run([sys.executable, "-m", "jaxlint", "--no-verify", "--no-cache", "--isolated", str(p)],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert f"{p}:2:1: JL902 [unsupported-syntax] jaxlint's parser could not read this file" in proc.stdout


def test_comment_and_parser_findings_are_not_sent_to_verification(tmp_path: Path) -> None:
    _write(tmp_path, "a.py", "x = 1  # jaxlint: ignore[traced-iff]\n")
    _write(tmp_path, "b.py", "import jax\n(name): int = 1\n")
    _write(tmp_path, "c.py", "y = 2  # noqa: JL201\n")
    res = CliRunner().invoke(main, ["--verify", "--no-cache", "--isolated", "--format", "json", "--select", "ALL",
                                    str(tmp_path)], catch_exceptions=False)
    found = json.loads(res.output)["findings"]
    assert sorted(f["name"] for f in found) == ["invalid-suppression", "unsupported-syntax", "unused-suppression"]
    assert {f["verification"]["status"] for f in found} == {"not-run"}
