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
        print("step")
        return x * 2
    """
)
SLEEPS = textwrap.dedent(
    """\
    import time

    import jax


    @jax.jit
    def step(x):
        print("step")
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


HAZARD = "import jax\n\n\n@jax.jit\ndef step(x):\n    if x > 0:\n        return x\n    return -x\n"


def _static(paths: list[Path], cache: Path, jobs: int = 1):
    return run(Settings(paths=[str(p) for p in paths], verify=False, cache_dir=str(cache), jobs=jobs))


def test_a_cold_run_writes_a_few_shards_not_a_file_per_source_file(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for i in range(60):
        (src / f"m{i:02d}.py").write_text(HAZARD.replace("step", f"step{i}"), encoding="utf-8")
    cache = tmp_path / "cache"
    first = _static([src], cache, jobs=2)
    written = [p for p in cache.rglob("*") if p.is_file() and p.suffix == ".json"]
    assert 1 <= len(written) <= 16, [p.name for p in written]
    entries = sum(len(json.loads(p.read_text(encoding="utf-8"))["entries"]) for p in written)
    assert entries == 60
    # A warm run answers from the shards: the results are the same, and nothing is rewritten.
    stamps = {p: p.stat().st_mtime_ns for p in written}
    second = _static([src], cache, jobs=2)
    assert [f.to_json() for f in second.findings] == [f.to_json() for f in first.findings]
    assert {p: p.stat().st_mtime_ns for p in written} == stamps


def test_a_cached_result_is_what_the_run_returns(tmp_path: Path) -> None:
    src = tmp_path / "a.py"
    src.write_text(HAZARD, encoding="utf-8")
    cache = tmp_path / "cache"
    _static([src], cache)
    [shard] = [p for p in cache.rglob("*.json")]
    doc = json.loads(shard.read_text(encoding="utf-8"))
    [entry] = doc["entries"].values()
    entry["findings"][0]["message"] = "served from the cache"
    shard.write_text(json.dumps(doc), encoding="utf-8")
    [found] = _static([src], cache).findings
    assert found.message == "served from the cache"


def test_entries_of_old_contents_are_pruned(tmp_path: Path) -> None:
    from jaxlint.cache import KEEP_PER_PATH

    src = tmp_path / "a.py"
    cache = tmp_path / "cache"
    for i in range(KEEP_PER_PATH + 5):
        src.write_text(HAZARD + f"\nVERSION = {i}\n", encoding="utf-8")
        _static([src], cache)
    entries = [e for p in cache.rglob("*.json") for e in json.loads(p.read_text(encoding="utf-8"))["entries"].values()]
    assert len(entries) == KEEP_PER_PATH
    assert all(e["path"] == str(src) for e in entries)


# ---- the default number of processes ---------------------------------------------------------


class _NoPool:
    def __init__(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("a process pool was started for a small amount of work")


def test_default_jobs_run_a_small_tree_in_one_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import concurrent.futures

    from click.testing import CliRunner

    from jaxlint.cli import main

    for i in range(12):
        (tmp_path / f"m{i:02d}.py").write_text(HAZARD, encoding="utf-8")
    monkeypatch.setattr("jaxlint.api.idle_cpus", lambda: 4)
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", _NoPool)
    res = CliRunner().invoke(main, ["--no-verify", "--isolated", "--no-cache", "--format", "json", str(tmp_path)])
    assert res.exit_code == 1, res.output
    assert json.loads(res.output)["summary"]["findings"] == 12


def test_auto_jobs_grow_with_the_work_up_to_the_idle_processors(monkeypatch: pytest.MonkeyPatch) -> None:
    from jaxlint import api

    monkeypatch.setattr(api, "idle_cpus", lambda: 4)
    assert api.auto_jobs(0) == 1
    assert api.auto_jobs(api.BYTES_PER_JOB - 1) == 1
    assert api.auto_jobs(2 * api.BYTES_PER_JOB) == 2
    assert api.auto_jobs(100 * api.BYTES_PER_JOB) == 4
    monkeypatch.setattr(api, "idle_cpus", lambda: 1)  # every processor busy: a pool would only add overhead
    assert api.auto_jobs(100 * api.BYTES_PER_JOB) == 1


def test_idle_cpus_is_within_the_processors_this_process_may_use() -> None:
    from jaxlint.api import idle_cpus

    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    assert 1 <= idle_cpus() <= n


def test_auto_jobs_use_a_pool_for_a_large_tree_with_the_same_output(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from jaxlint import api

    big = HAZARD + "".join(f"\n\ndef helper_{i}(x):\n    return x + {i}\n" for i in range(400))
    for i in range(12):
        (tmp_path / f"m{i}.py").write_text(big, encoding="utf-8")
    assert 12 * len(big) > 2 * api.BYTES_PER_JOB
    monkeypatch.setattr(api, "idle_cpus", lambda: 2)
    pools = []
    real = api._Workers._analyse

    def spy(self: api._Workers, items: list) -> list:
        rows = real(self, items)
        pools.append(self.pool is not None)
        return rows

    monkeypatch.setattr(api._Workers, "_analyse", spy)
    auto = run(Settings(paths=[str(tmp_path)], verify=False, jobs=0))
    assert pools and pools[0]
    serial = run(Settings(paths=[str(tmp_path)], verify=False, jobs=1))
    assert [f.to_json() for f in auto.findings] == [f.to_json() for f in serial.findings]


# ---- the project pass ------------------------------------------------------------------------------


def test_the_project_pass_is_cached_under_every_project_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A warm run over an unchanged project reads the project pass back (no module is modelled again);
    an edit of an imported module, with the importing file unchanged, runs the pass again."""
    import shutil

    import jaxlint.project

    app = tmp_path / "app"
    shutil.copytree(Path(__file__).resolve().parent.parent / "fixtures" / "cross-file" / "project_classes", app)
    cache = tmp_path / "cache"

    def found() -> list[tuple[str, int, str]]:
        return [(Path(f.path).name, f.line, f.name) for f in _static([app], cache).findings]

    cold = found()
    assert cold == [("learner.py", 26, "traced-if")]  # `Learner` is a pytree through base.py's `Agent`

    class _Unwanted:
        def __init__(self, *args: object, **kwargs: object) -> None:
            raise AssertionError("the project was modelled again for an unchanged tree")

    with monkeypatch.context() as m:
        m.setattr(jaxlint.project, "ProjectIndex", _Unwanted)
        assert found() == cold

    base = app / "base.py"
    base.write_text(base.read_text(encoding="utf-8").replace("class Agent(struct.PyTreeNode):", "class Agent:"),
                    encoding="utf-8")
    assert ("learner.py", 9, "jit-method-self") in found()  # no longer a pytree: `self` is not a valid argument
