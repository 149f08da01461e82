"""The package as users install it: the wheel's name, extras and console script, and the README's install
and CI lines run as written against it."""
from __future__ import annotations

import email
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import jaxlint

ROOT = Path(__file__).resolve().parent.parent
DISTRIBUTION = "jax-trace-hazards"
HAZARD = "import jax\n\n\n@jax.jit\ndef step(x):\n    if x > 0:\n        return x\n    return -x\n"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from a copy of the project (the build writes into the tree it builds)."""
    tmp = tmp_path_factory.mktemp("wheel")
    project = tmp / "project"
    project.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, project / name)
    shutil.copytree(ROOT / "src", project / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    out = tmp / "dist"
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(project)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [built] = out.glob("*.whl")
    return built


def _dist_info(wheel: Path, name: str) -> str:
    with zipfile.ZipFile(wheel) as z:
        [member] = [n for n in z.namelist() if n.endswith(f".dist-info/{name}")]
        return z.read(member).decode("utf-8")


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel installed into a folder of its own (its dependencies come from this environment)."""
    target = tmp_path_factory.mktemp("installed")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", str(target),
                           str(wheel)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return target


def _jaxlint(installed: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    script = installed / "bin" / "jaxlint"
    env = {**os.environ, "PYTHONPATH": str(installed)}  # this install, not the source tree
    return subprocess.run([str(script), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_wheel_metadata_names_the_distribution_and_its_extras(wheel: Path) -> None:
    meta = email.message_from_string(_dist_info(wheel, "METADATA"))
    assert meta["Name"] == DISTRIBUTION
    assert meta["Version"] == jaxlint.__version__  # the one place the version is written
    assert wheel.name.startswith("jax_trace_hazards-")
    assert "verify" in meta.get_all("Provides-Extra")
    requires = meta.get_all("Requires-Dist")
    for dep in ("jax", "jaxlib"):
        assert any(re.match(rf"{dep}\b.*extra == .verify.", r) for r in requires), requires
    # The static pass needs no JAX: nothing but the extras pulls it in.
    assert not any(r.startswith(("jax", "jaxlib")) and "extra ==" not in r for r in requires)


def test_wheel_ships_the_console_script_and_only_the_package(wheel: Path) -> None:
    entry = _dist_info(wheel, "entry_points.txt")
    assert re.search(r"^\[console_scripts\]\s*\njaxlint = jaxlint\.launch:main\s*$", entry, flags=re.M), entry
    with zipfile.ZipFile(wheel) as z:
        tops = {n.split("/")[0] for n in z.namelist()}
    assert tops == {"jaxlint", wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1] + ".dist-info"}


def test_installed_console_script_runs_and_reports_its_version(installed: Path, tmp_path: Path) -> None:
    meta = email.message_from_string((next(installed.glob("*.dist-info")) / "METADATA").read_text())
    proc = _jaxlint(installed, "--version", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"jaxlint, version {meta['Version']}"
    proc = _jaxlint(installed, "--no-verify", "--isolated", "--no-cache", str(ROOT / "examples" / "train.py"),
                    cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "5 findings in 1 file" in proc.stdout


def _readme() -> str:
    return (ROOT / "README.md").read_text(encoding="utf-8")


def test_every_install_line_in_the_readme_names_this_distribution(wheel: Path) -> None:
    extras = set(email.message_from_string(_dist_info(wheel, "METADATA")).get_all("Provides-Extra"))
    # Commands: indented code lines and workflow steps (prose may name other projects).
    code = [line for line in _readme().splitlines() if line.startswith(("    ", "- run: "))]
    lines = [m.group(1) for line in code for m in re.finditer(r"pip install ([^#&]+)", line)]
    assert len(lines) >= 6
    for line in lines:
        for req in line.split():
            req = req.strip("'\"")
            name, _, rest = req.partition("[")
            assert name in (".", DISTRIBUTION), f"README installs `{req}`"
            for extra in rest.rstrip("]").split(","):
                assert not extra or extra in extras, f"README asks for the extra `{extra}`, which does not exist"


def test_readme_ci_commands_run_as_written(installed: Path, tmp_path: Path) -> None:
    (tmp_path / "step.py").write_text(HAZARD, encoding="utf-8")
    commands = re.findall(r"^- run: (jaxlint [^\n]*)$", _readme(), flags=re.M)
    assert commands
    for command in commands:
        args = command.replace(" || true", "").split()[1:]
        if "--no-verify" not in args:
            continue  # verification needs the project's environment: covered by tests/test_examples.py
        proc = _jaxlint(installed, "--isolated", "--no-cache", *args, cwd=tmp_path)
        assert proc.returncode == 1, (command, proc.stderr)
        if "github" in args:
            assert proc.stdout.startswith("::error file=step.py,line=6"), proc.stdout
        if "sarif" in args:
            assert '"version": "2.1.0"' in (tmp_path / "jaxlint.sarif").read_text(encoding="utf-8")


def test_pre_commit_hooks_pass_importers_and_install_this_project() -> None:
    hooks = (ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8")
    entries = re.findall(r"^\s*entry: (.*)$", hooks, flags=re.M)
    assert entries and all(e.startswith("jaxlint ") and "--with-importers" in e for e in entries)
