"""Ctrl-C and SIGTERM during verification: a real signal to a real `jaxlint` run stops it at once, cleanly."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("jax")

ROOT = Path(__file__).resolve().parent.parent
HANGS = Path(__file__).resolve().parent / "verify_data" / "hang_at_import.py"


def _descendants(pid: int) -> dict[int, str]:
    """Every process below `pid` (pid -> command line), from `ps`."""
    out = subprocess.run(["ps", "-eo", "pid=,ppid=,args="], capture_output=True, text=True, check=True).stdout
    children: dict[int, list[tuple[int, str]]] = {}
    for line in out.splitlines():
        parts = line.split(None, 2)
        if len(parts) >= 2:
            children.setdefault(int(parts[1]), []).append((int(parts[0]), parts[2] if len(parts) > 2 else ""))
    found: dict[int, str] = {}
    todo = [pid]
    while todo:
        for child, args in children.get(todo.pop(), []):
            found[child] = args
            todo.append(child)
    return found


def _alive(pids: list[int]) -> list[int]:
    out = subprocess.run(["ps", "-eo", "pid=,stat="], capture_output=True, text=True, check=True).stdout
    running = {int(p) for p, st in (line.split() for line in out.splitlines()) if not st.startswith("Z")}
    return [p for p in pids if p in running]


@pytest.mark.parametrize("how", ["SIGINT to the process group", "SIGTERM to jaxlint"])
def test_a_signal_during_verification_stops_everything(tmp_path: Path, how: str) -> None:
    project = tmp_path / "project"
    project.mkdir()
    for i in range(3):  # several files, so that work is queued when the signal arrives
        shutil.copy(HANGS, project / f"hangs_{i}.py")
    temp = tmp_path / "tmp"
    temp.mkdir()
    cache = tmp_path / "cache"
    env = dict(os.environ, TMPDIR=str(temp), PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "jaxlint", "--cache-dir", str(cache), "--verify-timeout", "60", "--jobs", "2",
         str(project)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
    )
    try:
        # Wait until a forked verification child is running user code (a server with a child).
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            procs = _descendants(proc.pid)
            servers = [p for p, a in procs.items() if "jaxlint.verify.worker" in a]
            if any(_descendants(s) for s in servers):
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        else:
            pytest.fail("verification never started")
        time.sleep(1.0)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    seen, elapsed = _signal_and_check(proc, "SIGINT" if how.startswith("SIGINT") else "SIGTERM", how)
    # The hanging files would take minutes: stopping well before that is the behaviour under test.
    assert elapsed < 10, elapsed
    time.sleep(0.5)
    assert not _alive(seen), f"left running: {_alive(seen)}"
    assert not list(temp.iterdir()), f"temporary files left: {list(temp.iterdir())}"
    assert not [p for p in cache.rglob("*") if p.name.endswith(".tmp")]
    verdicts = cache / "verdicts"
    assert not verdicts.exists() or not list(verdicts.rglob("*.json")), "an interrupted run cached verdicts"


def _signal_and_check(proc: subprocess.Popen, how: str, label: str) -> tuple[list[int], float]:
    """Send SIGINT to the run's process group (a terminal's Ctrl-C) or SIGTERM to jaxlint alone (a CI
    runner's cancel), wait for the end, and check it is the one-line exit 130 (not an abort, not a
    traceback). Returns the processes that ran below it and the seconds it took to stop."""
    try:
        assert proc.poll() is None, proc.communicate()
        seen = list(_descendants(proc.pid))
        started = time.monotonic()
        if how == "SIGINT":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            os.kill(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        elapsed = time.monotonic() - started
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    print(f"{label}: stopped {elapsed:.2f} s after the signal")
    assert proc.returncode == 130, (proc.returncode, err)
    assert err.strip().splitlines() == ["jaxlint: interrupted"], err
    assert out == ""
    return seen, elapsed


def _busy_project(root: Path) -> Path:
    """Enough plain jitted code that the static pass alone runs for many seconds."""
    project = root / "project"
    project.mkdir()
    body = "".join(
        f"@jax.jit\ndef step_{k}(x, y):\n    z = jnp.tanh(x @ y) + {k}\n    return jnp.where(z > 0, z, -z).sum()\n\n\n"
        for k in range(150))
    for i in range(120):
        (project / f"mod_{i}.py").write_text("import jax\nimport jax.numpy as jnp\n\n\n" + body)
    return project


@pytest.mark.parametrize("jobs,delay,how", [("1", 3.0, "SIGINT"), ("2", 3.0, "SIGINT"), ("1", 0.3, "SIGINT"),
                                            ("2", 3.0, "SIGTERM")],
                         ids=["static pass, one process", "static pass, two processes", "while loading",
                              "SIGTERM to jaxlint alone, two processes"])
def test_a_signal_during_the_static_pass_stops_at_once(tmp_path: Path, jobs: str, delay: float, how: str) -> None:
    project = _busy_project(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "jaxlint", "--no-cache", "--no-verify", "--jobs", jobs, str(project)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
    )
    time.sleep(delay)
    seen, _ = _signal_and_check(proc, how, f"jobs {jobs}")
    time.sleep(0.5)
    assert not _alive(seen), f"left running: {_alive(seen)}"
