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


def _user_repo(tmp_path: Path) -> Path:
    """An empty git repository for `pre-commit try-repo` (skips when pre-commit or the checkout is missing)."""
    pytest.importorskip("pre_commit")
    if not (ROOT / ".git").exists():
        pytest.skip("the project is not a git checkout")
    repo = tmp_path / "user-repo"
    repo.mkdir(parents=True)
    _git(repo, "init", "-q")
    return repo


def _try_repo(repo: Path, tmp_path: Path, option: str = "--all-files") -> subprocess.CompletedProcess:
    """`pre-commit try-repo` of this checkout's jaxlint hook in `repo` (every file, or the staged ones)."""
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pc-home")}
    cmd = [sys.executable, "-m", "pre_commit", "try-repo", str(ROOT), "jaxlint", option]
    return subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_try_repo_fails_then_passes(tmp_path: Path) -> None:
    repo = _user_repo(tmp_path)
    bad = repo / "step.py"
    bad.write_text("import jax\n\n\n@jax.jit\ndef step(x):\n    if x > 0:\n        return x\n    return -x\n")
    _git(repo, "add", "step.py")
    _git(repo, "commit", "-q", "-m", "hazard")
    first = _try_repo(repo, tmp_path)
    assert first.returncode == 1, first.stdout + first.stderr
    assert "traced-if" in first.stdout
    bad.write_text("import jax\nimport jax.numpy as jnp\n\n\n@jax.jit\ndef step(x):\n    return jnp.where(x > 0, x, -x)\n")
    _git(repo, "commit", "-q", "-am", "fix")
    second = _try_repo(repo, tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_try_repo_checks_notebooks(tmp_path: Path) -> None:
    """The hooks declare `types_or: [python, jupyter]`: pre-commit hands them notebooks too."""
    import json

    repo = _user_repo(tmp_path)
    nb = repo / "explore.ipynb"

    def write(source: list[str]) -> None:
        cell = {"cell_type": "code", "execution_count": None, "id": "a1", "metadata": {}, "outputs": [],
                "source": source}
        nb.write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1))

    write(["%matplotlib inline\n", "import jax\n", "\n", "@jax.jit\n", "def step(x):\n", "    if x > 0:\n",
           "        return x\n", "    return -x"])
    _git(repo, "add", "explore.ipynb")
    _git(repo, "commit", "-q", "-m", "notebook")
    first = _try_repo(repo, tmp_path)
    assert first.returncode == 1, first.stdout + first.stderr
    assert "explore.ipynb:cell 1:6:5: JL101 [traced-if]" in first.stdout
    write(["%matplotlib inline\n", "import jax\n", "import jax.numpy as jnp\n", "\n", "@jax.jit\n", "def step(x):\n",
           "    return jnp.where(x > 0, x, -x)"])
    _git(repo, "commit", "-q", "-am", "fix")
    second = _try_repo(repo, tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_try_repo_checks_a_changed_helper_with_its_traced_caller(tmp_path: Path) -> None:
    """pre-commit passes only the changed helper; the hazard its jitted caller reaches is still found."""
    repo = _user_repo(tmp_path)
    pkg = repo / "src" / "demo"
    pkg.mkdir(parents=True)
    (repo / "pyproject.toml").write_text('[project]\nname = "demo"\nversion = "0"\n')
    (pkg / "__init__.py").write_text("")
    (pkg / "ops.py").write_text("import jax.numpy as jnp\n\n\ndef safe_log(x):\n    return jnp.log(x)\n")
    # The caller has a hazard of its own, committed long ago: not part of this change, not reported.
    (pkg / "train.py").write_text("import jax\n\nfrom .ops import safe_log\n\n\n@jax.jit\ndef step(x):\n"
                                  "    print(x)\n    return safe_log(x) * 2\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "start")
    # The change: only the helper, which now branches on its (traced) argument.
    (pkg / "ops.py").write_text("import jax.numpy as jnp\n\n\ndef safe_log(x):\n    if jnp.any(x <= 0):\n"
                                "        return jnp.log(jnp.abs(x) + 1e-6)\n    return jnp.log(x)\n")
    _git(repo, "add", "src/demo/ops.py")
    proc = _try_repo(repo, tmp_path, "--verbose")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "src/demo/ops.py:5:5: JL101 [traced-if]" in out
    assert "called from `step` in `src/demo/train.py`" in out
    assert "print-in-trace" not in out and "train.py:8" not in out
