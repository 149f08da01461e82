"""Every rule on every fixture: the exact multiset of (line, slug) must match the `# expect:` markers."""
from __future__ import annotations

import functools
from collections import Counter
from pathlib import Path

import pytest

from fixture_markers import read_markers
from jaxlint.api import Settings, run
from jaxlint.rules import ALL_CODES, RULES

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
FILES = sorted(FIXTURES.rglob("*.py"))


def _describe(path: Path, items: Counter) -> str:
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return "\n".join(f"  {line}: {slug:<18} | {lines[line - 1].strip() if line <= len(lines) else ''}"
                     for (line, slug) in sorted(items.elements()))


@functools.lru_cache(maxsize=1)
def _all_findings() -> dict[str, list]:
    """One run over the whole fixture tree, as a user would run it (so calls across files are followed)."""
    result = run(Settings(paths=[str(FIXTURES)], verify=False, codes=set(ALL_CODES)))  # opt-in rules too
    assert not result.errors, result.errors
    by_path: dict[str, list] = {}
    for f in result.findings:
        by_path.setdefault(str(Path(f.path).resolve()), []).append(f)
    return by_path


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(FIXTURES)) for p in FILES])
def test_fixture(path: Path) -> None:
    markers = read_markers(path)
    expected = Counter((m.line, m.slug) for m in markers if not m.miss)
    found = _all_findings().get(str(path.resolve()), [])
    actual = Counter((f.line, f.name) for f in found)
    missing = expected - actual
    unexpected = actual - expected
    msg = []
    if missing:
        msg.append("expected but not reported:\n" + _describe(path, missing))
    if unexpected:
        msg.append("reported but not expected:\n" + _describe(path, unexpected))
    assert not msg, "\n".join(msg)
    for m in markers:
        if m.miss:
            assert (m.line, m.slug) not in actual, f"line {m.line}: `{m.slug}` is now found: flip the miss marker"


def test_every_rule_has_fixtures() -> None:
    for rule in RULES:
        folder = FIXTURES / rule.name
        files = list(folder.glob("*.py"))
        positives = [f for f in files if any(not m.miss for m in read_markers(f))]
        negatives = [f for f in files if not any(not m.miss for m in read_markers(f))]
        assert len(positives) >= 8, f"{rule.name}: only {len(positives)} positive fixtures"
        assert len(negatives) >= 8, f"{rule.name}: only {len(negatives)} negative fixtures"


def test_every_rule_module_is_registered() -> None:
    import importlib
    import pkgutil

    import jaxlint.rules as pkg
    from jaxlint.rules.base import Rule

    registered = set(RULES)
    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name == "base":
            continue
        mod = importlib.import_module(f"jaxlint.rules.{info.name}")
        for obj in vars(mod).values():
            if isinstance(obj, type) and issubclass(obj, Rule) and obj is not Rule and obj.__module__ == mod.__name__:
                assert obj in registered, f"{obj.__name__} in rules/{info.name}.py is not in RULES"


def test_codes_and_names_are_unique() -> None:
    from jaxlint.rules import PSEUDO_RULES, RETIRED

    codes = [r.code for r in RULES] + [p[0] for p in PSEUDO_RULES]
    names = [r.name for r in RULES] + [p[1] for p in PSEUDO_RULES]
    assert len(set(codes)) == len(codes)
    assert len(set(names)) == len(names)
    assert not set(codes) & set(RETIRED)
