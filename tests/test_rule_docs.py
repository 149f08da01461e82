"""Every rule's documentation: the Example must trigger the rule, the Use instead must not."""
from __future__ import annotations

import inspect
import re

import pytest

from jaxlint.api import lint_source
from jaxlint.rules import DEFAULT_CODES, RULES

_SECTIONS = ("What it does", "Why is this bad?", "Example", "Use instead", "How it is verified",
             "Known limitations", "References")


def _code_after(doc: str, heading: str) -> str:
    part = doc.split(f"## {heading}", 1)[1]
    m = re.search(r"```python\n(.*?)```", part, re.S)
    assert m, f"no python block under {heading}"
    return m.group(1)


@pytest.mark.parametrize("rule", RULES, ids=[r.name for r in RULES])
def test_doc_sections(rule) -> None:
    doc = inspect.cleandoc(rule.__doc__ or "")
    for heading in _SECTIONS:
        assert f"## {heading}" in doc, f"{rule.name}: missing '## {heading}'"


@pytest.mark.parametrize("rule", RULES, ids=[r.name for r in RULES])
def test_example_triggers_and_fix_does_not(rule) -> None:
    doc = inspect.cleandoc(rule.__doc__ or "")
    # With the default rules too: whether a suppression comment is used depends on the rules that ran.
    codes = set(DEFAULT_CODES) | {rule.code}
    bad = [f for f in lint_source(_code_after(doc, "Example"), "example.py", codes) if f.code == rule.code]
    good = [f for f in lint_source(_code_after(doc, "Use instead"), "use_instead.py", codes) if f.code == rule.code]
    assert bad, f"{rule.name}: the Example does not trigger the rule"
    assert not good, f"{rule.name}: the 'Use instead' code triggers: {[f.message for f in good]}"
