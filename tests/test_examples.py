"""The bundled examples, run as the README's first command runs them: exactly the marked hazards, verified."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixture_markers import read_markers

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

pytest.importorskip("jax")


def test_examples_report_exactly_the_marked_hazards_with_their_verdicts(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "jaxlint", "--isolated", "--cache-dir", str(tmp_path / "cache"), "--format", "json",
         "examples"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    actual = sorted((f["path"], f["line"], f["name"], f["verification"]["status"]) for f in doc["findings"])
    expected = sorted(
        (os.path.join("examples", path.name), m.line, m.slug, m.status)
        for path in sorted(EXAMPLES.glob("*.py")) for m in read_markers(path) if not m.miss
    )
    assert expected, "the examples mark no hazard"
    assert all(status is not None for *_, status in expected), "every example marker names its verdict"
    assert actual == expected, "\n".join(
        [f"expected: {e}" for e in expected] + [f"actual:   {a}" for a in actual]
        + [f"  {f['line']}: {f['verification']['detail']}" for f in doc["findings"]])
    assert doc["summary"]["files"] == len(list(EXAMPLES.glob("*.py")))


def test_the_fixed_example_trains(tmp_path: Path) -> None:
    """The fixed script is not only clean for jaxlint: it runs, and the loss goes down."""
    code = ("import sys; sys.path.insert(0, 'examples'); import train_fixed; "
            "losses = train_fixed.main(n_batches=60); print(losses[0], losses[-1])")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 0, proc.stderr
    first, last = map(float, proc.stdout.split("\n")[-2].split())
    assert last < first / 10
