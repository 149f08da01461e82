"""After a plain install (no JAX), verification is skipped with one note, and findings are `not-run`."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_missing_jax_is_one_note_and_not_run(tmp_path: Path) -> None:
    # A `jax` that cannot be imported, first on the path: what a machine without JAX looks like.
    fake = tmp_path / "site" / "jax"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise ModuleNotFoundError("No module named \'jax\'", name="jax")\n')
    project = tmp_path / "project"
    project.mkdir()
    for name in ("a.py", "b.py"):
        (project / name).write_text(
            "import jax\n\n\n@jax.jit\ndef f(x):\n    if x > 0:\n        print(x)\n    return x\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "site"), str(ROOT / "src")]))
    for fmt in ("json", "text"):
        proc = subprocess.run([sys.executable, "-m", "jaxlint", "--no-cache", "--format", fmt, str(project)],
                              capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 1, proc.stderr
        assert proc.stderr.splitlines() == [
            "jaxlint: verification skipped: install the `verify` extra (`pip install 'jax-trace-hazards[verify]'`) or pass `--no-verify`"], proc.stderr
        assert "could not be imported" not in proc.stdout
        if fmt == "json":
            findings = json.loads(proc.stdout)["findings"]
            assert len(findings) == 4
            assert {f["verification"]["status"] for f in findings} == {"not-run"}
