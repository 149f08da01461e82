"""bench/realcode.py matches findings to judgements by line and rule, and by the name a judgement is about
when it records one: a finding that moves to another name on a judged line is new, not the judged one."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import realcode  # noqa: E402


def _finding(line: int, rule: str, name: str) -> dict:
    return {"repo": "demo", "path": "train.py", "line": line, "rule": rule, "code": None, "column": 1,
            "function": "step", "message": f"`{name}` is read in `step` under `jax.jit`, but a loop rebinds it."}


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "corpus" / "demo").mkdir(parents=True)
    (tmp_path / "repos.json").write_text(json.dumps({"demo": {"commit": "0" * 40}}))
    judged = {"findings": [
        {"repo": "demo", "path": "train.py", "line": 3, "rule": "stale-global", "verdict": "TRUE",
         "reason": "the loop rebinds lr after the first trace", "subject": "lr"},
        {"repo": "demo", "path": "train.py", "line": 8, "rule": "stale-global", "verdict": "FALSE",
         "reason": "rebound to the same value"},
    ]}
    (tmp_path / "judged.json").write_text(json.dumps(judged, indent=1) + "\n")
    found = [_finding(3, "stale-global", "rng"), _finding(8, "stale-global", "scale")]
    (tmp_path / "found.json").write_text(json.dumps({"findings": found}))
    return {"corpus": tmp_path / "corpus", "repos": tmp_path / "repos.json", "judged": tmp_path / "judged.json",
            "found": tmp_path / "found.json"}


def _run(files: dict[str, Path], *extra: str) -> int:
    return realcode.main([str(files["corpus"]), "--repos", str(files["repos"]), "--judged", str(files["judged"]),
                          "--from-findings", str(files["found"]), *extra])


def test_a_finding_about_another_name_on_a_judged_line_is_new(files: dict[str, Path],
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(files) == 0
    out = capsys.readouterr().out
    row = next(line.split() for line in out.splitlines() if line.startswith("stale-global"))
    assert row[1:6] == ["0", "1", "1", "0", "1"]  # TRUE kept, TRUE lost, FALSE still, FALSE gone, new
    assert "train.py:3 stale-global  `rng` is read" in out and "judged TRUE for `lr`" in out


def test_subjects_are_recorded_for_judged_lines_about_one_name(files: dict[str, Path],
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(files, "--record-subjects") == 0
    entries = json.loads(files["judged"].read_text())["findings"]
    assert [e.get("subject") for e in entries] == ["lr", "scale"]  # a recorded subject is kept as judged
    assert "subjects recorded" in capsys.readouterr().out
