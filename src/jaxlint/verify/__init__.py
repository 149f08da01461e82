"""The dynamic verification stage: each file's findings are checked by a fenced worker process.

The parent never imports JAX. Per file it starts `python -m jaxlint.verify.worker` in a new session
(so the whole process group can be killed), in an empty temporary working directory, with a memory
limit (RLIMIT_AS) and a time limit (per traced function inside the worker, and a hard wall-clock
limit here). A worker that hangs, crashes, exits or runs out of memory costs only its own verdicts.
"""
from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Optional

from ..findings import Finding, Verification

# Rules whose findings are never verified by tracing: they are about the file, not about JAX.
_NOT_RUN = {"syntax-error", "unsupported-syntax", "invalid-suppression", "unused-suppression"}
_STARTUP_SECONDS = 20.0  # importing JAX in a fresh process, on a busy machine


def _limits(memory_mb: int) -> None:  # runs in the child before exec
    import resource

    # XLA reserves far more address space than it touches, so the address-space limit is only a
    # backstop; the real limit is the resident size, watched by the parent (_rss_mb).
    limit = max(memory_mb * 8, 16384) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return 0.0


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _package_root(path: str) -> str:
    folder = os.path.dirname(os.path.abspath(path))
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return folder


def _job(path: str, findings: list[Finding], timeout: float) -> dict[str, Any]:
    from ..api import module_name

    return {
        "path": os.path.abspath(path),
        "module": module_name(path),
        "sys_path": _package_root(path),
        "timeout": timeout,
        "findings": [
            {"idx": i, "name": f.name, "line": f.line, "column": f.column, "end_line": f.end_line,
             "function": f.function,
             "target": f.target.to_json() if f.target is not None else None}
            for i, f in enumerate(findings)
        ],
    }


def _run_worker(path: str, findings: list[Finding], timeout: float, memory_mb: int) -> dict[str, dict[str, str]]:
    """Verdicts by finding index; missing ones mean the worker died before reaching them."""
    with tempfile.TemporaryDirectory(prefix="jaxlint-verify-") as tmp:
        job_path = os.path.join(tmp, "job.json")
        out_path = os.path.join(tmp, "result.json")
        work = os.path.join(tmp, "cwd")
        os.mkdir(work)
        with open(job_path, "w", encoding="utf-8") as f:
            json.dump(_job(path, findings, timeout), f)
        env = dict(os.environ)
        env.setdefault("JAX_PLATFORMS", "cpu")
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["XLA_FLAGS"] = env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=1"
        wall = _STARTUP_SECONDS + timeout * (len({id(f.target) for f in findings}) + 1)
        started = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "jaxlint.verify.worker", job_path, out_path],
            cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, preexec_fn=lambda: _limits(memory_mb),
        )
        reason: Optional[str] = None
        deadline = started + wall
        try:
            while True:
                try:
                    code = proc.wait(timeout=0.05)
                    if code != 0:
                        reason = _exit_reason(code, memory_mb)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if time.monotonic() > deadline:
                    reason = f"the verification worker exceeded its time limit ({wall:.0f} s)"
                    break
                if _rss_mb(proc.pid) > memory_mb:
                    reason = f"the verification worker exceeded its memory limit ({memory_mb} MiB)"
                    break
        finally:
            _kill_group(proc)  # also reaps anything the user's code forked
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        results: dict[str, dict[str, str]] = {}
        try:
            with open(out_path, encoding="utf-8") as f:
                results = json.load(f)
        except (OSError, ValueError):
            pass
        for i in range(len(findings)):
            if str(i) not in results:
                results[str(i)] = {"status": "unverified",
                                   "detail": reason or f"the verification worker stopped after "
                                                       f"{time.monotonic() - started:.1f} s without a verdict",
                                   "retry": True}
        return results


def _exit_reason(code: int, memory_mb: int) -> str:
    if code < 0:
        sig = -code
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        return f"the verification worker was killed by {name}"
    if code == 1:
        return f"the verification worker failed (possibly its {memory_mb} MiB memory limit)"
    return f"the verification worker exited with status {code}"


def _cache_key(path: str, findings: list[Finding], timeout: float, memory_mb: int) -> Optional[str]:
    """The file, the Python files beside it (what it may import from the project), and the findings."""
    import hashlib

    from .. import __version__

    from ..cache import code_fingerprint

    h = hashlib.sha256(f"{__version__}|{code_fingerprint()}|{timeout}|{memory_mb}|".encode())
    try:
        folder = os.path.dirname(os.path.abspath(path))
        with open(path, "rb") as f:
            h.update(f.read())
        for name in sorted(os.listdir(folder)):
            if name.endswith(".py"):
                with open(os.path.join(folder, name), "rb") as f:
                    h.update(name.encode() + hashlib.sha256(f.read()).digest())
    except OSError:
        return None
    h.update(json.dumps(_job(path, findings, timeout)["findings"], sort_keys=True).encode())
    return h.hexdigest()


def _cached_run(path: str, findings: list[Finding], timeout: float, memory_mb: int,
                cache_dir: Optional[str]) -> dict[str, dict[str, str]]:
    key = _cache_key(path, findings, timeout, memory_mb) if cache_dir else None
    entry = os.path.join(cache_dir, "verdicts", key[:2], key + ".json") if cache_dir and key else None
    if entry is not None:
        try:
            with open(entry, encoding="utf-8") as f:
                cached = json.load(f)
            if isinstance(cached, dict) and all(str(i) in cached for i in range(len(findings))):
                return cached
        except (OSError, ValueError):
            pass
    results = _run_worker(path, findings, timeout, memory_mb)
    # Only definite outcomes are worth keeping: a time-out on a busy machine, or a worker that stopped
    # without a verdict, should be retried. The worker and _run_worker mark those with `retry`.
    if entry is not None and not any(r.get("retry") for r in results.values()):
        try:
            os.makedirs(os.path.dirname(entry), exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(entry), suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(results, f)
            os.replace(tmp, entry)
        except OSError:
            pass
    return results


def verify_findings(findings: list[Finding], *, timeout: float = 10.0, memory_mb: int = 2048, jobs: int = 2,
                    progress: bool = False, cache_dir: Optional[str] = None) -> None:
    """Set `verification` on every finding: confirmed / refuted / unverified (with evidence)."""
    by_path: dict[str, list[Finding]] = {}
    for f in findings:
        if f.name in _NOT_RUN:
            f.verification = Verification("not-run", "")
            continue
        by_path.setdefault(f.path, []).append(f)
    if not by_path:
        return
    bar = _Progress(len(by_path)) if progress else None
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(_cached_run, path, group, timeout, memory_mb, cache_dir): group
                   for path, group in sorted(by_path.items())}
        for fut in concurrent.futures.as_completed(futures):
            group = futures[fut]
            try:
                results = fut.result()
            except Exception as exc:  # the parent must survive anything
                results = {str(i): {"status": "unverified", "detail": f"verification could not run: {exc}"}
                           for i in range(len(group))}
            for i, f in enumerate(group):
                r = results.get(str(i), {})
                f.verification = Verification(r.get("status", "unverified"), r.get("detail", ""))
            if bar:
                bar.step()
    if bar:
        bar.done()


class _Progress:
    """A one-line progress bar on stderr (callers only create it on a TTY)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.count = 0

    def step(self) -> None:
        self.count += 1
        width = 30
        filled = int(width * self.count / self.total)
        sys.stderr.write(f"\rverifying [{'#' * filled}{'.' * (width - filled)}] {self.count}/{self.total} files")
        sys.stderr.flush()

    def done(self) -> None:
        sys.stderr.write("\r" + " " * 70 + "\r")
        sys.stderr.flush()
