"""docs/contract.md is true to the code: its JSON example has the keys `--format json` prints, its rule
table is the rule registry, and every place that points readers at the contract points at that file."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from jaxlint.findings import STATUSES
from jaxlint.rules import PSEUDO_RULES, RETIRED, RULES

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "contract.md"


def _doc() -> str:
    return DOC.read_text(encoding="utf-8")


def _json_example() -> dict:
    blocks = re.findall(r"```json\n(.*?)```", _doc(), flags=re.S)
    assert len(blocks) == 1, "docs/contract.md should hold one JSON example"
    return json.loads(blocks[0])


def _real_report() -> dict:
    proc = subprocess.run([sys.executable, "-m", "jaxlint", "--isolated", "--no-cache", "--no-verify", "--format",
                           "json", "examples/train.py"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def _shape(value: object) -> object:
    """The keys of a JSON document, recursively (lists by their first element)."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(value[0])] if value else []
    return type(value).__name__ if value is not None else None


def test_json_example_has_exactly_the_keys_jaxlint_prints() -> None:
    example, real = _json_example(), _real_report()
    assert list(example) == list(real)
    assert list(example["summary"]) == list(real["summary"])
    with_fix = next(f for f in real["findings"] if f["fix"] is not None)
    shown = dict(example["findings"][0], verification=dict(example["findings"][0]["verification"]))
    # `source` appears only with a verdict; the report compared here is made with --no-verify.
    assert shown["verification"].pop("source") in ("synthesized", "tests")
    assert "source" not in with_fix["verification"]
    assert _shape(shown) == _shape(with_fix)


def test_json_example_is_a_finding_jaxlint_reports_on_the_example() -> None:
    shown = _json_example()["findings"][0]
    real = next(f for f in _real_report()["findings"] if (f["path"], f["line"]) == (shown["path"], shown["line"]))
    for key in ("column", "end_line", "end_column", "code", "name", "message", "function", "fix"):
        assert shown[key] == real[key], key


def test_every_key_and_status_is_explained() -> None:
    text = _doc()
    example = _json_example()
    keys = set(example) | set(example["findings"][0]) | {f"summary.{k}" for k in example["summary"]} \
        | {f"verification.{k}" for k in example["findings"][0]["verification"]}
    for key in keys:
        assert f"`{key}`" in text, f"the key `{key}` is not explained in docs/contract.md"
    for status in STATUSES:
        assert f"`{status}`" in text


def _rule_rows() -> dict[str, str]:
    rows = re.findall(r"^\| (JL\d{3}) \| `([a-z0-9-]+)` \|", _doc(), flags=re.M)
    codes = [code for code, _ in rows]
    assert len(codes) == len(set(codes)), "a code appears twice in the rule table"
    return dict(rows)


def test_rule_table_is_the_registry() -> None:
    registry = {r.code: r.name for r in RULES} | {code: name for code, name, _ in PSEUDO_RULES} | dict(RETIRED)
    assert _rule_rows() == registry


def test_exit_codes_are_documented() -> None:
    table = re.findall(r"^\| (\d+) \| ", _doc().split("## Exit codes", 1)[1].split("##", 1)[0], flags=re.M)
    assert table == ["0", "1", "2", "130"]


def test_nothing_points_at_a_contract_outside_the_repository() -> None:
    for path in [ROOT / "README.md", *sorted((ROOT / "src").rglob("*.py"))]:
        assert "SPEC.md" not in path.read_text(encoding="utf-8"), f"{path.relative_to(ROOT)} cites SPEC.md"
    assert "docs/contract.md" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_opt_in_rules_are_marked_in_the_rule_table() -> None:
    marked = set(re.findall(r"^\| (JL\d{3}) \| `[a-z0-9-]+` \| [^|]*\(opt-in\)", _doc(), flags=re.M))
    assert marked == {r.code for r in RULES if r.opt_in}
