"""Autofix: fixture pairs case.py -> case.fixed.py, idempotence, no new findings, safe writes."""
from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from jaxlint.api import lint_source
from jaxlint.cli import main
from jaxlint.fix import FileChanged, write_atomic

DATA = Path(__file__).parent / "fix_data"
CASES = sorted(p for p in DATA.glob("*.py") if not p.name.endswith(".fixed.py"))


def _fix(path: Path, *extra: str):
    return CliRunner().invoke(main, ["--no-verify", "--isolated", "--fix", *extra, str(path)])


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_fix_matches_expected_and_is_idempotent(case: Path, tmp_path: Path) -> None:
    target = tmp_path / case.name
    shutil.copy(case, target)
    unsafe = ("--unsafe-fixes",) if case.stem.endswith("_unsafe") else ()
    before = {(f.line, f.name) for f in lint_source(case.read_bytes(), str(case))
              if f.fix is None or (f.fix.applicable == "unsafe" and not unsafe)}
    _fix(target, *unsafe)
    expected = case.with_name(case.stem + ".fixed.py").read_text()
    assert target.read_text() == expected
    once = target.read_bytes()
    _fix(target, *unsafe)
    assert target.read_bytes() == once, "a second --fix changed the file again"
    after = lint_source(target.read_bytes(), str(target))
    assert all(f.fix is None or (f.fix.applicable == "unsafe" and not unsafe) for f in after), \
        [f.message for f in after]
    assert len(after) == len(before), "fixing created or removed unfixable findings"


def test_diff_does_not_write(tmp_path: Path) -> None:
    target = tmp_path / "prints.py"
    shutil.copy(DATA / "prints.py", target)
    original = target.read_bytes()
    res = CliRunner().invoke(main, ["--no-verify", "--isolated", "--diff", str(target)])
    assert res.exit_code == 1
    assert "+    jax.debug.print(\"{}\", x)" in res.output
    assert target.read_bytes() == original


def test_fix_keeps_permissions_and_crlf(tmp_path: Path) -> None:
    target = tmp_path / "crlf.py"
    target.write_bytes((DATA / "item_assignment.py").read_bytes().replace(b"\n", b"\r\n"))
    os.chmod(target, 0o751)
    _fix(target)
    data = target.read_bytes()
    assert b"x = x.at[i].set(v)\r\n" in data and b"\n" not in data.replace(b"\r\n", b"")
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o751


def test_write_refuses_a_file_changed_since_read(tmp_path: Path) -> None:
    target = tmp_path / "a.py"
    target.write_bytes(b"x = 1\n")
    with pytest.raises(FileChanged):
        write_atomic(str(target), b"x = 2\n", expected_original=b"x = 0\n")
    assert target.read_bytes() == b"x = 1\n"
    assert [p.name for p in tmp_path.iterdir()] == ["a.py"], "a temporary file was left behind"


def test_add_noqa_then_nothing_reported_and_idempotent(tmp_path: Path) -> None:
    target = tmp_path / "prints.py"
    shutil.copy(DATA / "prints.py", target)
    res = CliRunner().invoke(main, ["--no-verify", "--isolated", "--add-noqa", str(target)])
    assert res.exit_code == 0, res.output
    assert "# jaxlint: ignore[print-in-trace]" in target.read_text()
    once = target.read_bytes()
    res = CliRunner().invoke(main, ["--no-verify", "--isolated", str(target)])
    assert res.exit_code == 0, res.output
    CliRunner().invoke(main, ["--no-verify", "--isolated", "--add-noqa", str(target)])
    assert target.read_bytes() == once


def test_a_crash_between_write_and_rename_leaves_the_original_intact(tmp_path: Path) -> None:
    import subprocess
    import sys

    target = tmp_path / "victim.py"
    original = b"x = 1\n" * 1000
    target.write_bytes(original)
    script = (
        "import os, sys\n"
        "from jaxlint import fix\n"
        "os.replace = lambda *a: os._exit(9)  # the process dies after the temp file is written\n"
        f"fix.write_atomic({str(target)!r}, b'y = 2\\n', expected_original={original!r})\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True)
    assert proc.returncode == 9
    assert target.read_bytes() == original
