"""`--with-importers`: a changed helper is linted with the context of the files that import it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HELPER = "import jax.numpy as jnp\n\n\ndef safe_log(x):\n    if jnp.any(x <= 0):\n        return jnp.log(jnp.abs(x) + 1e-6)\n    return jnp.log(x)\n"
CALLER = "import jax\n\nfrom .ops import safe_log\n\n\n@jax.jit\ndef step(x):\n    print(x)\n    return safe_log(x) * 2\n"


def _project(root: Path, files: dict[str, str]) -> None:
    (root / "pyproject.toml").write_text('[project]\nname = "demo"\nversion = "0"\n', encoding="utf-8")
    for name, text in {"src/demo/__init__.py": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")


def _lint(cwd: Path, *args: str) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, "-m", "jaxlint", "--no-verify", "--no-cache", "--format", "json", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_a_changed_helper_is_linted_with_its_traced_caller(tmp_path: Path) -> None:
    _project(tmp_path, {"src/demo/ops.py": HELPER, "src/demo/train.py": CALLER})
    alone_code, alone = _lint(tmp_path, "src/demo/ops.py")
    assert alone_code == 0 and alone["findings"] == []  # without the caller, nothing says `x` is traced
    code, doc = _lint(tmp_path, "--with-importers", "src/demo/ops.py")
    assert code == 1
    # Only the given file's findings: the caller's own `print` is not reported.
    assert [(f["path"], f["line"], f["name"]) for f in doc["findings"]] == [("src/demo/ops.py", 5, "traced-if")]
    assert "src/demo/train.py" in doc["findings"][0]["message"]
    assert doc["summary"]["files"] == 1


def test_only_files_that_name_the_module_are_read(tmp_path: Path) -> None:
    from jaxlint.api import Settings, importers

    _project(tmp_path, {"src/demo/ops.py": HELPER, "src/demo/train.py": CALLER,
                        "src/demo/unrelated.py": "def f(x):\n    return x\n", "tests/test_ops.py": "from demo.ops import safe_log\n"})
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        found = importers(["src/demo/ops.py"], Settings())
    finally:
        os.chdir(cwd)
    # Relative to the project's folder, as a run over the whole project names them (and caches them).
    assert sorted(found) == ["src/demo/train.py", "tests/test_ops.py"]


def test_a_file_outside_any_project_has_no_importers(tmp_path: Path) -> None:
    from jaxlint.api import Settings, importers, project_root

    lone = tmp_path / "lone.py"
    lone.write_text(HELPER, encoding="utf-8")
    if project_root(str(lone)) is None:
        assert importers([str(lone)], Settings()) == []
    code, doc = _lint(tmp_path, "--with-importers", str(lone))
    assert code == 0 and doc["findings"] == []
