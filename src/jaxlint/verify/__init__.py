"""The dynamic verification stage: each file's findings are checked by a fenced worker process.

The parent never imports JAX. It starts one `python -m jaxlint.verify.worker --serve` per parallel
lane; each imports JAX once and forks a child per file, in a new session (so the whole process group
can be killed), in an empty temporary working directory, with a memory limit (RLIMIT_AS, and the
resident size watched here) and a time limit (per traced function inside the child, and a hard
wall-clock limit here). A child that hangs, crashes, exits or runs out of memory costs only its own
file's verdicts. An interrupt kills every child and server, removes the temporary folders, caches
nothing and raises `Cancelled`.
"""
from __future__ import annotations

import concurrent.futures
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Optional

from ..findings import Finding, Verification
from .checks import NOT_VERIFIABLE, check_for

# Rules whose findings are never verified by tracing (they are about the file, not about JAX).
_NOT_RUN = frozenset(NOT_VERIFIABLE)

_STARTUP_SECONDS = 30.0  # importing JAX (and the preloaded libraries) in a fresh process, on a busy machine
_FORK_SECONDS = 10.0  # a file's own start in its child: loading its module and its imports
_BATCH = 16  # files per child at most (16 rather than 8: 6 % less CPU over fixtures/, one backend start per 16)
_NO_JAX = "JAX is not installed"
NO_JAX_NOTE = "verification skipped: install the `verify` extra (`pip install 'jax-trace-hazards[verify]'`) or pass `--no-verify`"
# Libraries worth importing once per server rather than once per file, when the files import them.
_PRELOAD = ("numpy", "scipy", "flax", "flax.linen", "flax.nnx", "equinox", "optax", "haiku", "chex", "numpyro",
            "jaxtyping", "distrax", "diffrax", "orbax", "absl.testing.absltest", "absl.testing.parameterized",
            "pytest")


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return 0.0


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
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


def _caller(f: Finding) -> Optional[dict[str, Any]]:
    """For a helper reached only from another file: that traced caller, to be verified through."""
    import re

    from ..api import module_name

    t = f.target
    if t is None or t.transform != "helper" or t.root is not None or not t.via:
        return None
    m = re.match(r"^(?P<qualname>[\w.<>]+) \((?P<path>.+)\)$", t.via[0])
    if m is None or not os.path.isfile(m.group("path")):
        return None
    caller = m.group("path")
    return {"qualname": m.group("qualname"), "path": os.path.abspath(caller), "module": module_name(caller),
            "sys_path": _package_root(caller)}


def _job(path: str, findings: list[Finding], timeout: float) -> dict[str, Any]:
    from ..api import module_name

    return {
        "path": os.path.abspath(path),
        "module": module_name(path),
        "sys_path": _package_root(path),
        "timeout": timeout,
        "findings": [
            {"idx": i, "name": f.name, "path": os.path.abspath(f.path), "line": f.line, "column": f.column,
             "end_line": f.end_line, "function": f.function,
             "target": f.target.to_json() if f.target is not None else None, "caller": _caller(f),
             # What the static pass knew (the mutated name, the jitted expression, the key): the worker
             # uses it first and searches the flagged line only when it is absent.
             **({"subject": f.subject} if f.subject else {})}
            for i, f in enumerate(findings)
        ],
    }


class Cancelled(Exception):
    """Verification was interrupted (Ctrl-C, SIGTERM): no verdict, nothing cached."""


class _Lines:
    """The reply lines of a server, read from its pipe with `os.read` into a buffer of our own.

    A buffered file object reads ahead: one read can take a child's pid and its exit status
    together, and `select()` on the descriptor then never reports the second line, which waits in
    Python's buffer; the parent would miss the child's end, pass its deadline and wait for good.
    Here every byte read is in `buf`, so a line is either there or still in the pipe, where
    `select()` sees it.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = b""
        self.eof = False

    def next(self, wait: float) -> Optional[str]:
        """The next line; "" at the end of the output; None when none came within `wait` seconds."""
        import select

        if b"\n" not in self.buf and not self.eof:
            ready, _, _ = select.select([self.fd], [], [], wait)
            if ready:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:
                    chunk = b""
                if chunk:
                    self.buf += chunk
                else:
                    self.eof = True
        end = self.buf.find(b"\n") + 1
        if end == 0:
            if not self.eof:
                return None
            end = len(self.buf)  # a last line without its newline, then ""
        line, self.buf = self.buf[:end], self.buf[end:]
        return line.decode("utf-8", "replace")


def _server_command(preload: list[str]) -> list[str]:
    return [sys.executable, "-m", "jaxlint.verify.worker", "--serve", *preload]


class _Server:
    """One long-lived `worker --serve` process: imports JAX once, forks one fenced child per file."""

    def __init__(self, tmp: str, memory_mb: int, preload: list[str], cancel: threading.Event) -> None:
        self.memory_mb = memory_mb
        self.cancel = cancel
        self.child: Optional[int] = None
        self.nojax: Optional[str] = None
        self.failed: Optional[str] = None
        env = dict(os.environ)
        env.setdefault("JAX_PLATFORMS", "cpu")
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["XLA_FLAGS"] = env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=1"
        self.proc = subprocess.Popen(
            _server_command(preload),
            cwd=tmp, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            start_new_session=True, text=True, bufsize=1,
        )
        assert self.proc.stdout is not None
        self.lines = _Lines(self.proc.stdout.fileno())  # never read through the file object: see _Lines
        _LIVE.add(self)
        msg = self._read(time.monotonic() + _STARTUP_SECONDS)
        if msg is None or not msg.get("ready"):
            if msg is not None and msg.get("nojax"):
                self.nojax = msg.get("detail", "")
            self.failed = (msg or {}).get("detail") or "the verification worker did not start"
            self.close()

    def _read(self, deadline: float) -> Optional[dict[str, Any]]:
        """The next reply line, or None at the deadline, on cancellation or when the server died."""
        while True:
            if self.cancel.is_set():
                return None
            line = self.lines.next(0.05)
            if line == "":
                return None
            if line is not None:
                try:
                    return json.loads(line)
                except ValueError:
                    continue
            if time.monotonic() > deadline:
                return None

    def run(self, jobs: list[dict[str, Any]]) -> tuple[int, Optional[str]]:
        """Verify a batch of files in one fresh child, each file fenced by its own time limit.

        Returns (how many files finished, why the child stopped early or None). The file in
        progress when a limit is hit is the one blamed; the caller resubmits the rest.
        """
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps({"jobs": [{k: j[k] for k in ("job", "out", "cwd")} for j in jobs],
                                              "memory_mb": self.memory_mb}) + "\n")
            self.proc.stdin.flush()
        except (OSError, ValueError):
            self.failed = "the verification worker stopped"
            return 0, self.failed
        started = time.monotonic()
        msg = self._read(started + 10)
        if msg is None or "pid" not in msg:
            self.failed = "the verification worker stopped"
            return 0, "cancelled" if self.cancel.is_set() else self.failed
        self.child = int(msg["pid"])
        reason: Optional[str] = None
        done = 0
        deadline = time.monotonic() + jobs[0]["wall"]
        while True:
            if self.cancel.is_set():
                _kill_group(self.child)
                self.child = None
                return done, "cancelled"
            while done < len(jobs) and os.path.exists(jobs[done]["out"] + ".done"):
                done += 1
                if done < len(jobs):
                    deadline = time.monotonic() + jobs[done]["wall"]
            line = self.lines.next(0.05)
            if line is not None:
                if not line:
                    self.failed = "the verification worker stopped"
                    return done, reason or self.failed
                code = int(json.loads(line).get("status", 0))
                _kill_group(self.child)  # whatever the user's code forked dies with its files
                self.child = None
                while done < len(jobs) and os.path.exists(jobs[done]["out"] + ".done"):
                    done += 1
                if reason is None and code != 0:
                    reason = _exit_reason(code, self.memory_mb)
                return done, reason
            if reason is None and time.monotonic() > deadline:
                reason = f"the verification worker exceeded its time limit ({jobs[done]['wall']:.0f} s)"
                _kill_group(self.child)
            elif reason is None and _rss_mb(self.child) > self.memory_mb:
                reason = f"the verification worker exceeded its memory limit ({self.memory_mb} MiB)"
                _kill_group(self.child)

    def close(self) -> None:
        if self.child is not None:
            _kill_group(self.child)
            self.child = None
        _kill_group(self.proc.pid)
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        _LIVE.discard(self)


_LIVE: set[_Server] = set()  # every server still running, so an interrupt can stop them all


class _Slot:
    """One lane of parallel work: a server started on first use and replaced when it dies."""

    def __init__(self, tmp: str, memory_mb: int, preload: list[str], cancel: threading.Event) -> None:
        self.args = (tmp, memory_mb, preload, cancel)
        self.server: Optional[_Server] = None

    def get(self) -> _Server:
        if self.server is None or self.server.failed:
            if self.server is not None:
                self.server.close()
            self.server = _Server(*self.args)
        return self.server

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None


def _run_batch(batch: list[tuple[str, list[Finding]]], timeout: float, memory_mb: int,
               slot: _Slot) -> list[dict[str, dict[str, Any]]]:
    """Verdicts by finding index for each file of the batch; missing ones mean its child died first."""
    cancel = slot.args[3]
    with tempfile.TemporaryDirectory(prefix="jaxlint-verify-") as tmp:
        jobs: list[dict[str, Any]] = []
        for n, (path, findings) in enumerate(batch):
            folder = os.path.join(tmp, str(n))
            os.makedirs(os.path.join(folder, "cwd"))
            job = {"job": os.path.join(folder, "job.json"), "out": os.path.join(folder, "result.json"),
                   "cwd": os.path.join(folder, "cwd"),
                   "wall": _FORK_SECONDS + timeout * (len({id(f.target) for f in findings}) + 1)}
            with open(job["job"], "w", encoding="utf-8") as f:
                json.dump(_job(path, findings, timeout), f)
            jobs.append(job)
        reasons: dict[int, str] = {}
        start = 0
        while start < len(jobs):
            server = slot.get()
            if server.nojax is not None:
                return [{str(i): {"status": "not-run", "detail": _NO_JAX, "nojax": True} for i in range(len(fs))}
                        for _, fs in batch]
            if server.failed:
                for i in range(start, len(jobs)):
                    reasons[i] = server.failed
                break
            done, reason = server.run(jobs[start:])
            if cancel.is_set():
                raise Cancelled()
            if reason is not None and start + done < len(jobs):
                reasons[start + done] = reason  # the file in progress pays; the rest go to a new child
                done += 1
            start += max(done, 1)
        out: list[dict[str, dict[str, Any]]] = []
        for n, (path, findings) in enumerate(batch):
            results: dict[str, dict[str, Any]] = {}
            try:
                with open(jobs[n]["out"], encoding="utf-8") as f:
                    results = json.load(f)
            except (OSError, ValueError):
                pass
            for i in range(len(findings)):
                if str(i) not in results:
                    results[str(i)] = {"status": "unverified", "retry": True,
                                       "detail": reasons.get(n, "the verification worker stopped without a verdict")}
            out.append(results)
        return out


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
    job = _job(path, findings, timeout)["findings"]
    for caller in sorted({f["caller"]["path"] for f in job if f.get("caller")}):
        try:
            with open(caller, "rb") as fh:
                h.update(caller.encode() + hashlib.sha256(fh.read()).digest())
        except OSError:
            return None
    h.update(json.dumps(job, sort_keys=True).encode())
    return h.hexdigest()


def _cache_entry(path: str, findings: list[Finding], timeout: float, memory_mb: int,
                 cache_dir: Optional[str]) -> Optional[str]:
    key = _cache_key(path, findings, timeout, memory_mb) if cache_dir else None
    return os.path.join(cache_dir, "verdicts", key[:2], key + ".json") if cache_dir and key else None


def _cache_get(entry: Optional[str], n: int) -> Optional[dict[str, dict[str, Any]]]:
    if entry is None:
        return None
    try:
        with open(entry, encoding="utf-8") as f:
            cached = json.load(f)
        if isinstance(cached, dict) and all(str(i) in cached for i in range(n)):
            return cached
    except (OSError, ValueError):
        pass
    return None


def _cache_put(entry: Optional[str], results: dict[str, dict[str, Any]]) -> None:
    # Only definite outcomes are worth keeping: a time-out or a lost worker on a busy machine, or a
    # missing JAX, should be tried again next time.
    if entry is None or any(r.get("retry") or r.get("nojax") for r in results.values()):
        return
    tmp = ""
    try:
        os.makedirs(os.path.dirname(entry), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(entry), suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(results, f)
        os.replace(tmp, entry)
    except OSError:
        pass
    except BaseException:  # an interrupt between the write and the rename: no half-written entry
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _preload(paths: list[str]) -> list[str]:
    """The libraries from `_PRELOAD` that the files import (read from their import statements)."""
    import ast

    wanted: set[str] = set()
    for path in paths:
        try:
            with open(path, "rb") as f:
                tree = ast.parse(f.read())
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                wanted.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                wanted.add(node.module)
                wanted.update(f"{node.module}.{a.name}" for a in node.names)
    tops = {w.split(".")[0] for w in wanted}
    return [m for m in _PRELOAD if m in wanted or (m.split(".")[0] in tops and "." not in m)]


def verify_findings(findings: list[Finding], *, timeout: float = 10.0, memory_mb: int = 2048, jobs: int = 2,
                    progress: bool = False, cache_dir: Optional[str] = None) -> list[str]:
    """Set `verification` on every finding: confirmed / refuted / unverified / not-run (with evidence).

    Returns notes to show once (for example that JAX is not installed). On an interrupt
    (KeyboardInterrupt, or SIGTERM turned into one by the caller) every worker is stopped, the
    temporary folders removed and nothing half-written is left in the cache; then it re-raises.
    """
    by_path: dict[str, list[Finding]] = {}
    for f in findings:
        if check_for(f.name) is None:  # never verified by running code (checks.NOT_VERIFIABLE)
            f.verification = Verification("not-run", "")
            continue
        by_path.setdefault(f.path, []).append(f)
    if not by_path:
        return []
    notes: list[str] = []
    bar = _Progress(len(by_path)) if progress else None

    def settle(group: list[Finding], results: dict[str, dict[str, Any]]) -> None:
        for i, f in enumerate(group):
            r = results.get(str(i), {})
            if r.get("nojax"):
                if NO_JAX_NOTE not in notes:
                    notes.append(NO_JAX_NOTE)
                f.verification = Verification("not-run", "")
            else:
                f.verification = Verification(r.get("status", "unverified"), r.get("detail", ""))
        if bar:
            bar.step()

    pending: list[tuple[str, list[Finding], Optional[str]]] = []
    for path, group in sorted(by_path.items(), key=lambda kv: -len(kv[1])):  # the most work first
        entry = _cache_entry(path, group, timeout, memory_mb, cache_dir)
        hit = _cache_get(entry, len(group))
        if hit is not None:
            settle(group, hit)
        else:
            pending.append((path, group, entry))
    if not pending:
        if bar:
            bar.done()
        return notes
    lanes = max(1, min(jobs, len(pending)))
    # Several files per child start JAX's backend once for all of them; small enough batches keep
    # the lanes even at the end.
    size = max(1, min(_BATCH, -(-len(pending) // (lanes * 2))))
    batches = [pending[k:k + size] for k in range(0, len(pending), size)]
    cancel = threading.Event()
    tmp = tempfile.mkdtemp(prefix="jaxlint-verify-")
    free: list[_Slot] = []
    slots: list[_Slot] = []
    lock = threading.Lock()
    preload = _preload([p for p, _, _ in pending])
    missing_jax: list[bool] = []  # set once a server found no JAX: the other batches need not try

    def task(batch: list[tuple[str, list[Finding], Optional[str]]]) -> list[dict[str, dict[str, Any]]]:
        if missing_jax:
            return [{str(i): {"status": "not-run", "detail": _NO_JAX, "nojax": True} for i in range(len(g))}
                    for _, g, _ in batch]
        with lock:
            slot = free.pop() if free else None
            if slot is None:
                slot = _Slot(tmp, memory_mb, preload, cancel)
                slots.append(slot)
        try:
            if cancel.is_set():
                raise Cancelled()
            results = _run_batch([(p, g) for p, g, _ in batch], timeout, memory_mb, slot)
            if any(r.get("nojax") for res in results for r in res.values()):
                missing_jax.append(True)
            for (_, _, entry), res in zip(batch, results):
                _cache_put(entry, res)
            return results
        finally:
            with lock:
                free.append(slot)

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=lanes)
    finished: queue.SimpleQueue[concurrent.futures.Future] = queue.SimpleQueue()
    try:
        futures: dict[concurrent.futures.Future, list[tuple[str, list[Finding], Optional[str]]]] = {}
        for batch in batches:
            fut = pool.submit(task, batch)
            futures[fut] = batch
            fut.add_done_callback(finished.put)
        for _ in range(len(futures)):
            fut = _next_finished(finished)
            batch = futures[fut]
            try:
                results = fut.result()
            except Cancelled:
                raise
            except Exception as exc:  # the parent must survive anything
                results = [{str(i): {"status": "unverified", "detail": f"verification could not run: {exc}"}
                            for i in range(len(g))} for _, g, _ in batch]
            for (_, group, _), res in zip(batch, results):
                settle(group, res)
    except BaseException:
        # Ctrl-C or SIGTERM: stop queued work, kill the running children and servers, then let the
        # lanes (which see `cancel`) remove their temporary folders before we return.
        cancel.set()
        for server in list(_LIVE):
            if server.child is not None:
                _kill_group(server.child)
            _kill_group(server.proc.pid)
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        pool.shutdown(wait=True)
        for slot in slots:
            slot.close()
        shutil.rmtree(tmp, ignore_errors=True)
        if bar:
            bar.done()
    return notes


def _next_finished(finished: queue.SimpleQueue) -> concurrent.futures.Future:
    """The next finished lane's future, waited for in short slices so that Ctrl-C and SIGTERM work.

    Python runs a signal's handler in the main thread only, but the kernel may hand the signal to
    any thread of the process: a lane's thread that forks a server (or changes its signal mask)
    takes a signal that is pending for the process. The handler then runs only when the main
    thread next executes Python code; blocked for good (in `as_completed`, say) it would wait for
    the next file to finish, minutes for code that hangs. Waking every tenth of a second bounds it.
    """
    while True:
        try:
            return finished.get(timeout=0.1)
        except queue.Empty:
            pass


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
