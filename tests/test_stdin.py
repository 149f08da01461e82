"""`jaxlint -` reads the file from standard input; `--stdin-filename PATH` names it for messages,
configuration, per-file ignores and cross-file following (Ruff's convention). Real subprocess runs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"

BUFFER = textwrap.dedent(
    """\
    import jax


    @jax.jit
    def step(x):
        if x > 0:
            print(x)
        return x
    """
)


def _run(*args: str, cwd: Path, stdin: str = BUFFER) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run([sys.executable, "-m", "jaxlint", *args], cwd=cwd, env=env, input=stdin,
                          capture_output=True, text=True, timeout=600)


def _package(tmp: Path) -> None:
    (tmp / "pkg").mkdir()
    (tmp / "pkg" / "__init__.py").write_text("")
    (tmp / "pkg" / "m.py").write_text("X = 1\n")  # on disk: clean; the buffer is what counts


def test_findings_are_reported_under_the_stdin_filename(tmp_path: Path) -> None:
    _package(tmp_path)
    res = _run("--no-verify", "--isolated", "-", "--stdin-filename", "pkg/m.py", cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    assert res.stdout.startswith("pkg/m.py:6:5: JL101 [traced-if]")
    assert "pkg/m.py:7:9: JL201 [*] [print-in-trace]" in res.stdout  # fixable: Ruff's marker
    assert "        if x > 0:\n        ^^^^^^^^" in res.stdout  # the source line comes from the buffer
    assert "2 findings in 1 file (1 checked)" in res.stdout
    js = json.loads(_run("--no-verify", "--isolated", "--format", "json", "-", "--stdin-filename", "pkg/m.py",
                         cwd=tmp_path).stdout)
    assert [(f["path"], f["line"], f["name"]) for f in js["findings"]] == [
        ("pkg/m.py", 6, "traced-if"), ("pkg/m.py", 7, "print-in-trace")]
    clean = _run("--no-verify", "--isolated", "-", "--stdin-filename", "pkg/m.py", cwd=tmp_path, stdin="X = 2\n")
    assert clean.returncode == 0 and "No findings (1 file checked)" in clean.stdout


def test_configuration_and_per_file_ignores_follow_the_name(tmp_path: Path) -> None:
    _package(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.jaxlint]\nper-file-ignores = { "pkg/*" = ["print-in-trace"] }\n')
    res = _run("--no-verify", "-", "--stdin-filename", "pkg/m.py", cwd=tmp_path)
    assert res.returncode == 1 and "traced-if" in res.stdout and "print-in-trace" not in res.stdout
    other = _run("--no-verify", "-", "--stdin-filename", "scripts/run.py", cwd=tmp_path)
    assert "print-in-trace" in other.stdout


def test_calls_from_the_rest_of_the_package_are_followed(tmp_path: Path) -> None:
    _package(tmp_path)
    (tmp_path / "pkg" / "train.py").write_text(textwrap.dedent(
        """\
        import jax

        from .m import clip


        @jax.jit
        def train(x: jax.Array) -> jax.Array:
            return clip(x)
        """))
    helper = "def clip(x):\n    if x > 1:\n        return 1.0\n    return x\n"
    res = _run("--no-verify", "--isolated", "--format", "json", "-", "--stdin-filename", "pkg/m.py", cwd=tmp_path,
               stdin=helper)
    found = json.loads(res.stdout)["findings"]
    assert [(f["path"], f["line"], f["name"]) for f in found] == [("pkg/m.py", 2, "traced-if")]
    assert "`train` in `pkg/train.py`" in found[0]["message"]
    assert json.loads(res.stdout)["summary"]["files"] == 1  # the package was read, not reported


def test_verification_traces_the_buffer_not_the_file_on_disk(tmp_path: Path) -> None:
    _package(tmp_path)
    res = _run("--isolated", "--no-cache", "--format", "json", "-", "--stdin-filename", "pkg/m.py", cwd=tmp_path)
    found = json.loads(res.stdout)["findings"]
    traced_if = next(f for f in found if f["name"] == "traced-if")
    assert traced_if["verification"]["status"] == "confirmed", traced_if
    assert "line 6" in traced_if["verification"]["detail"]


def test_fix_writes_the_fixed_buffer_to_stdout(tmp_path: Path) -> None:
    _package(tmp_path)
    res = _run("--no-verify", "--isolated", "--fix", "-", "--stdin-filename", "pkg/m.py", cwd=tmp_path)
    assert res.returncode == 1  # the traced `if` has no fix and is still reported, on stderr
    assert res.stdout == BUFFER.replace("print(x)", 'jax.debug.print("{}", x)')
    assert "pkg/m.py:6:5: JL101" in res.stderr
    assert (tmp_path / "pkg" / "m.py").read_text() == "X = 1\n"  # the file on disk is never written


def test_bad_combinations_are_usage_errors(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    for args in (["-", "a.py"], ["--stdin-filename", "m.py", "a.py"], ["--add-noqa", "-"]):
        res = _run("--no-verify", "--isolated", *args, cwd=tmp_path)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert "Error:" in res.stderr and "Traceback" not in res.stderr
    # --stdin-filename alone reads standard input, as Ruff does.
    res = _run("--no-verify", "--isolated", "--stdin-filename", "m.py", cwd=tmp_path)
    assert res.returncode == 1 and res.stdout.startswith("m.py:6:5: JL101")
