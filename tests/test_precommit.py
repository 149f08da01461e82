"""The pre-commit hook, for real: `pre-commit try-repo` against this repository."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
                        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"})


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_try_repo_fails_then_passes(tmp_path: Path) -> None:
    pytest.importorskip("pre_commit")
    if not (ROOT / ".git").exists():
        pytest.skip("the project is not a git checkout")
    repo = tmp_path / "user-repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    bad = repo / "step.py"
    bad.write_text("import jax\n\n\n@jax.jit\ndef step(x):\n    if x > 0:\n        return x\n    return -x\n")
    _git(repo, "add", "step.py")
    _git(repo, "commit", "-q", "-m", "hazard")
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pc-home")}
    cmd = [sys.executable, "-m", "pre_commit", "try-repo", str(ROOT), "jaxlint", "--all-files"]
    first = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    assert first.returncode == 1, first.stdout + first.stderr
    assert "traced-if" in first.stdout
    bad.write_text("import jax\nimport jax.numpy as jnp\n\n\n@jax.jit\ndef step(x):\n    return jnp.where(x > 0, x, -x)\n")
    _git(repo, "commit", "-q", "-am", "fix")
    second = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    assert second.returncode == 0, second.stdout + second.stderr


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_try_repo_checks_notebooks(tmp_path: Path) -> None:
    """The hooks declare `types_or: [python, jupyter]`: pre-commit hands them notebooks too."""
    import json

    pytest.importorskip("pre_commit")
    if not (ROOT / ".git").exists():
        pytest.skip("the project is not a git checkout")
    repo = tmp_path / "user-repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    nb = repo / "explore.ipynb"

    def write(source: list[str]) -> None:
        cell = {"cell_type": "code", "execution_count": None, "id": "a1", "metadata": {}, "outputs": [],
                "source": source}
        nb.write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1))

    write(["%matplotlib inline\n", "import jax\n", "\n", "@jax.jit\n", "def step(x):\n", "    if x > 0:\n",
           "        return x\n", "    return -x"])
    _git(repo, "add", "explore.ipynb")
    _git(repo, "commit", "-q", "-m", "notebook")
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pc-home")}
    cmd = [sys.executable, "-m", "pre_commit", "try-repo", str(ROOT), "jaxlint", "--all-files"]
    first = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    assert first.returncode == 1, first.stdout + first.stderr
    assert "explore.ipynb:cell 1:6:5: JL101 [traced-if]" in first.stdout
    write(["%matplotlib inline\n", "import jax\n", "import jax.numpy as jnp\n", "\n", "@jax.jit\n", "def step(x):\n",
           "    return jnp.where(x > 0, x, -x)"])
    _git(repo, "commit", "-q", "-am", "fix")
    second = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    assert second.returncode == 0, second.stdout + second.stderr
