"""The result cache: which verdicts are kept, batched writes of the static results, and the jobs default."""
from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from jaxlint.api import Settings, run

PRINTS = textwrap.dedent(
    """\
    import jax


    @jax.jit
    def step(x):
        print("tracing step")
        return x * 2
    """
)
SLEEPS = textwrap.dedent(
    """\
    import time

    import jax


    @jax.jit
    def step(x):
        print("tracing step")
        time.sleep(60)
        return x * 2
    """
)


def _verdict_entries(cache: Path) -> list[Path]:
    return sorted((cache / "verdicts").rglob("*.json")) if (cache / "verdicts").is_dir() else []


def _verified(path: Path, cache: Path, timeout: float = 20.0):
    return run(Settings(paths=[str(path)], verify=True, verify_timeout=timeout, cache_dir=str(cache))).findings


def test_a_verdict_that_mentions_time_is_cached_and_reused(tmp_path: Path) -> None:
    pytest.importorskip("jax")
    src = tmp_path / "step.py"
    src.write_text(PRINTS, encoding="utf-8")
    cache = tmp_path / "cache"
    [first] = _verified(src, cache)
    assert first.verification.status == "confirmed"
    assert "time" in first.verification.detail  # "printed 1 time while tracing …": the wording must not matter
    [entry] = _verdict_entries(cache)
    # Mark the stored verdict: the second run must return it instead of starting a worker again.
    stored = json.loads(entry.read_text(encoding="utf-8"))
    stored["0"]["detail"] = "read from the cache"
    entry.write_text(json.dumps(stored), encoding="utf-8")
    [second] = _verified(src, cache)
    assert (second.verification.status, second.verification.detail) == ("confirmed", "read from the cache")


def test_a_time_out_is_not_cached(tmp_path: Path) -> None:
    pytest.importorskip("jax")
    src = tmp_path / "step.py"
    src.write_text(SLEEPS, encoding="utf-8")
    cache = tmp_path / "cache"
    found = _verified(src, cache, timeout=1.0)
    assert {f.name for f in found} == {"print-in-trace", "impure-call"}
    assert all(f.verification.status == "unverified" and "longer than 1 s" in f.verification.detail
               for f in found), [f.verification for f in found]
    assert _verdict_entries(cache) == []
    assert not list(cache.rglob("*.tmp"))
