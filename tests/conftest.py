from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

# Fixtures are data, not tests: never let pytest import them.
collect_ignore_glob = [str(ROOT / "fixtures" / "*")]
# The test project of `pytest --jaxlint` has tests of its own: tests/test_testplugin.py runs them.
collect_ignore_glob.append(str(ROOT / "tests" / "plugin_project" / "*"))
