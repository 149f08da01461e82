"""`pytest --jaxlint` end to end: a real test project, a real pytest run, then a real `jaxlint` run."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import jaxlint
from jaxlint.findings import Finding, Verification
from jaxlint.testplugin import store
from jaxlint.testplugin.watch import NOT_BY_TESTS, kind_of

pytest.importorskip("jax")
pytest.importorskip("equinox")

PROJECT = Path(__file__).resolve().parent / "plugin_project"
SRC = str(Path(jaxlint.__file__).resolve().parent.parent)
TEST = "tests/test_steps.py::"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("JAX_PLATFORMS", "cpu")
    env.pop("PYTEST_ADDOPTS", None)
    return env


def _plugin_args() -> list[str]:
    """Load the plugin by its entry point when this environment has it installed, else by name."""
    registered = any(ep.value == "jaxlint.testplugin" for ep in metadata.entry_points(group="pytest11"))
    return [] if registered else ["-p", "jaxlint.testplugin"]


def _pytest(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", *_plugin_args(), *args], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=600)


def _jaxlint(cwd: Path, *args: str) -> dict[int, list[dict]]:
    proc = subprocess.run([sys.executable, "-m", "jaxlint", "--format", "json", *args, "."], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stderr
    by_line: dict[int, list[dict]] = {}
    for f in json.loads(proc.stdout)["findings"]:
        assert f["path"] == os.path.join("trainer", "steps.py")
        by_line.setdefault(f["line"], []).append(f)
    return by_line


def _one(by_line: dict[int, list[dict]], line: int, name: str) -> dict:
    [f] = [f for f in by_line[line] if f["name"] == name]
    return f["verification"]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test project after one `pytest --jaxlint` run."""
    root = tmp_path_factory.mktemp("plugin") / "project"
    shutil.copytree(PROJECT, root)
    proc = _pytest(root, "--jaxlint")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "jaxlint: 11 findings in 3 files checked" in proc.stdout, proc.stdout
    assert "jaxlint: 9 confirmed, 1 refuted, 1 without a verdict from these tests" in proc.stdout, proc.stdout
    return root


@pytest.mark.slow
def test_verdicts_from_the_tests_reach_the_next_jaxlint_run(project: Path) -> None:
    by_line = _jaxlint(project)
    v = _one(by_line, 15, "traced-if")
    assert v == {"status": "confirmed", "source": "tests",
                 "detail": f"TracerBoolConversionError at line 15 in {TEST}test_clipped_update_rejects_a_traced_limit"}
    # The look-alike: filter_jit keeps the Python int static, so the comparison was concrete.
    v = _one(by_line, 23, "traced-if")
    assert (v["status"], v["source"]) == ("refuted", "tests")
    assert v["detail"].startswith("line 23 ran 1 time under a JAX trace (1 through `filter_jit`) without an error")
    for line, name in ((30, "print-in-trace"), (31, "global-mutation"), (32, "impure-call")):
        v = _one(by_line, line, name)
        assert (v["status"], v["source"]) == ("confirmed", "tests")
        assert v["detail"].startswith(f"line {line} ran 1 time while JAX traced it in {TEST}test_logged_step")
        assert "`logged_step` ran its Python body 1 time under a trace and 0 times without one" in v["detail"]
        if sys.version_info >= (3, 12):  # the test calls it 3 times: 1 trace, 2 calls served by JAX's cache
            assert ("its `jax.jit` wrapper was called 3 times outside any trace, 2 of them answered by JAX's "
                    "cache without running Python") in v["detail"], v["detail"]
        else:
            assert "only Python 3.12 or later counts them" in v["detail"], v["detail"]
    v = _one(by_line, 38, "jit-in-loop")
    assert (v["status"], v["source"]) == ("confirmed", "tests")
    assert "ran 3 times in one call" in v["detail"] and "traced its callable anew on 3 of those passes" in v["detail"]
    for line in (33, 38, 45):
        v = _one(by_line, line, "stale-global")
        assert (v["status"], v["source"]) == ("confirmed", "tests")
        assert v["detail"].startswith("`LEARNING_RATE` was 0.1 when line") and "and 0.5 after" in v["detail"]
    v = _one(by_line, 63, "prng-key-reuse")
    assert v == {"status": "confirmed", "source": "tests",
                 "detail": "`key` reached line 63 holding the key data that line 62 had already consumed in "
                           f"{TEST}test_noisy_init_shapes: both draw the same numbers"}
    # No test reaches `untested`: its verdict comes from synthesized verification.
    v = _one(by_line, 56, "traced-if")
    assert (v["status"], v["source"]) == ("confirmed", "synthesized")


def test_text_output_says_where_a_verdict_came_from(project: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "jaxlint", "--no-verify", "--show-refuted", "."], cwd=project,
                          env=_env(), capture_output=True, text=True, timeout=600)
    assert "= refuted (from tests): line 23 ran 1 time" in proc.stdout, proc.stdout


def test_a_changed_file_loses_its_test_verdicts(project: Path, tmp_path: Path) -> None:
    copy = tmp_path / "project"
    shutil.copytree(project, copy)
    with open(copy / "trainer" / "steps.py", "a", encoding="utf-8") as f:
        f.write("# edited after the test run\n")
    by_line = _jaxlint(copy, "--no-verify")
    assert all(f["verification"] == {"status": "not-run", "detail": ""}
               for found in by_line.values() for f in found)


def test_the_plugin_is_inert_without_the_option(tmp_path: Path) -> None:
    root = tmp_path / "project"
    shutil.copytree(PROJECT, root)
    proc = _pytest(root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "jaxlint:" not in proc.stdout
    assert not (root / ".jaxlint_cache").exists()


def test_a_bad_configuration_is_a_usage_error(tmp_path: Path) -> None:
    root = tmp_path / "project"
    shutil.copytree(PROJECT, root)
    with open(root / "pyproject.toml", "a", encoding="utf-8") as f:
        f.write("\n[tool.jaxlint]\nselect = [\"no-such-rule\"]\n")
    proc = _pytest(root, "--jaxlint")
    assert proc.returncode == 4, proc.stdout + proc.stderr  # pytest's exit code for usage errors
    assert "--jaxlint:" in proc.stderr and "no-such-rule" in proc.stderr


def test_a_confirmation_outlives_a_later_refutation(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("x = 1\n")
    data = src.read_bytes()
    f = Finding(str(src), 1, 1, 1, 5, "JL101", "traced-if", "m")
    folder = str(tmp_path / "tests")
    store.save(folder, str(src), data, [(f, Verification("confirmed", "TracerBoolConversionError at line 1"))])
    store.save(folder, str(src), data, [(f, Verification("refuted", "line 1 ran 1 time ..."))])
    g = Finding(str(src), 1, 1, 1, 5, "JL101", "traced-if", "m")
    assert store.apply([g], folder) == 1
    assert (g.verification.status, g.verification.source) == ("confirmed", "tests")


def test_every_rule_is_judged_from_tests_or_says_why_not() -> None:
    from jaxlint.rules import RULES, SYNTAX_ERROR

    for name in [r.name for r in RULES] + [SYNTAX_ERROR[1]]:
        assert (kind_of(name) is None) == (name in NOT_BY_TESTS), name


def _static_pass_line(root: Path) -> str:
    proc = _pytest(root, "--jaxlint", "--collect-only", "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [line] = [ln for ln in proc.stdout.splitlines() if ln.startswith("jaxlint: ") and " checked " in ln]
    return line


def test_the_static_pass_reads_the_files_and_rules_the_configuration_gives(tmp_path: Path) -> None:
    root = tmp_path / "project"
    shutil.copytree(PROJECT, root)
    # A module the tests import (through the package) but git ignores, with a hazard of its own.
    (root / "trainer" / "scratch.py").write_text(
        "import jax\n\n\n@jax.jit\ndef sign(x):\n    if x > 0:\n        return x\n    return -x\n")
    with open(root / "trainer" / "__init__.py", "a", encoding="utf-8") as f:
        f.write("from . import scratch  # noqa: F401\n")
    (root / ".gitignore").write_text("trainer/scratch.py\n")
    with open(root / "pyproject.toml", "a", encoding="utf-8") as f:
        f.write('\n[tool.jaxlint]\ninclude = ["trainer/*.py"]\nextend-ignore = ["print-in-trace"]\n')
    # The test module is outside `include`, scratch.py is ignored by git, print-in-trace is not selected.
    assert _static_pass_line(root).startswith("jaxlint: 10 findings in 2 files checked")
    with open(root / "pyproject.toml", "a", encoding="utf-8") as f:
        f.write("respect-gitignore = false\n")
    assert _static_pass_line(root).startswith("jaxlint: 11 findings in 3 files checked")
