"""Output formats for CI: GitHub annotations, SARIF, statistics, --exit-zero, --output-file."""
from __future__ import annotations

import json
import os
from pathlib import Path

from click.testing import CliRunner

from jaxlint.cli import main

HAZARD = "import jax\n\n@jax.jit\ndef f(x):\n    if x > 0:\n        print(x)\n    return x\n"
MULTILINE = "import jax\n\n@jax.jit\ndef f(x):\n    y = (x if x > 0\n         else -x)\n    return y\n"


def _run(tmp: Path, *args: str):
    old = os.getcwd()
    os.chdir(tmp)
    try:
        return CliRunner().invoke(main, ["--no-verify", "--isolated", "--no-cache", *args])
    finally:
        os.chdir(old)


def test_github_annotations(tmp_path: Path) -> None:
    (tmp_path / "a,b.py").write_text(HAZARD)
    res = _run(tmp_path, "--format", "github", "a,b.py")
    assert res.exit_code == 1
    lines = res.output.splitlines()
    assert lines[0].startswith("::error file=a%2Cb.py,line=5,col=5,endLine=5,endColumn=13,title=jaxlint (JL101)::"
                               "[traced-if] ")
    assert "title=jaxlint (JL201)" in lines[1]


def test_github_omits_columns_for_multiline_spans(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(MULTILINE)
    res = _run(tmp_path, "--format", "github", "m.py")
    assert res.output.startswith("::error file=m.py,line=5,endLine=6,title=jaxlint (JL101)::")


def test_sarif_structure(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text(HAZARD)
    res = _run(tmp_path, "--format", "sarif", "pkg")
    doc = json.loads(res.output)
    assert doc["version"] == "2.1.0"
    run = doc["runs"][0]
    rules = {r["id"]: r for r in run["tool"]["driver"]["rules"]}
    assert rules["JL101"]["name"] == "traced-if" and rules["JL101"]["helpUri"].startswith("https://")
    assert rules["JL101"]["shortDescription"]["text"] and rules["JL101"]["fullDescription"]["text"]
    result = run["results"][0]
    loc = result["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"] == {"uri": "pkg/a.py", "uriBaseId": "%SRCROOT%"}
    assert loc["region"]["startLine"] == 5 and loc["region"]["startColumn"] == 5
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"].startswith("file://")
    assert result["properties"]["verification"]["status"] == "not-run"
    assert run["tool"]["driver"]["rules"][result["ruleIndex"]]["id"] == result["ruleId"]


def test_statistics_exit_zero_and_output_file(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(HAZARD)
    res = _run(tmp_path, "--statistics", "--exit-zero", "--output-file", "report.txt", "a.py")
    assert res.exit_code == 0
    report = (tmp_path / "report.txt").read_text()
    assert report.splitlines() == ["1\tJL101\t[ ] traced-if", "1\tJL201\t[*] print-in-trace"]
    assert "\x1b[" not in report


def test_sarif_validates_against_the_official_schema(tmp_path: Path) -> None:
    import jsonschema

    schema = json.loads((Path(__file__).parent / "sarif-schema-2.1.0.json").read_text())
    fixtures = Path(__file__).resolve().parent.parent / "fixtures"
    res = CliRunner().invoke(main, ["--no-verify", "--isolated", "--no-cache", "--format", "sarif", str(fixtures)])
    doc = json.loads(res.output)
    assert doc["runs"][0]["results"]
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors[:10])
