"""The parent's side of the verification server protocol, against fake servers (no JAX needed).

The server answers each batch with two lines, the child's pid and then its exit status. A child
that ends at once has both lines in the pipe before the parent reads the first: the parent must
still see the second, not wait for the pipe to become readable again.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

import jaxlint.verify as verify
from jaxlint.verify import _Lines, _Server

# Writes its first argument (the "ready" line), then answers every request with its second: both
# reply lines in one write, as from a child that ended before the parent read its pid.
FAKE_SERVER = """\
import os, sys
os.write(1, sys.argv[1].encode())
for line in sys.stdin:
    os.write(1, sys.argv[2].encode())
"""


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen]:
    """A process in its own session: the fake child, whose group the parent may kill."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def _server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, start: str, reply: str) -> _Server:
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE_SERVER)
    monkeypatch.setattr(verify, "_server_command", lambda preload: [sys.executable, str(script), start, reply])
    server = _Server(str(tmp_path), 2048, [], threading.Event())
    assert server.failed is None
    return server


def test_lines_split_in_one_read_are_all_returned() -> None:
    r, w = os.pipe()
    try:
        lines = _Lines(r)
        os.write(w, b'{"pid": 7}\n{"status": 0}\n{"par')
        assert lines.next(1.0) == '{"pid": 7}\n'
        assert lines.next(0.0) == '{"status": 0}\n'  # already read: no wait for the pipe
        assert lines.next(0.0) is None  # half a line is not a line
        os.write(w, b'tial": 1}\n')
        assert lines.next(1.0) == '{"partial": 1}\n'
        os.write(w, b"no newline")
        os.close(w)
        w = -1
        assert lines.next(1.0) is None  # the bytes are read, the end of the output not yet
        assert lines.next(1.0) == "no newline"
        assert lines.next(1.0) == ""
        assert lines.next(1.0) == ""
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


def test_a_line_read_with_the_one_before_is_not_lost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = _server(tmp_path, monkeypatch, '{"ready": true}\n{"pid": 1}\n', "")
    try:
        start = time.monotonic()
        assert server._read(time.monotonic() + 1.0) == {"pid": 1}
        assert time.monotonic() - start < 0.5
    finally:
        server.close()


def test_a_child_that_ends_before_its_pid_is_read_does_not_hang(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sleeper: subprocess.Popen) -> None:
    server = _server(tmp_path, monkeypatch, '{"ready": true}\n', f'{{"pid": {sleeper.pid}}}\n{{"status": 0}}\n')
    jobs = [{"job": str(tmp_path / "job.json"), "out": str(tmp_path / "result.json"), "cwd": str(tmp_path),
             "wall": 0.5}]
    result: list[Any] = []
    lane = threading.Thread(target=lambda: result.append(server.run(jobs)), daemon=True)
    try:
        lane.start()
        lane.join(timeout=3.0)
        assert not lane.is_alive(), "the lane still waits for a reply it has already read"
        assert result == [(0, None)]  # the child's own status, not a time limit
        assert sleeper.wait(timeout=5) is not None  # and its group was killed, as after every child
    finally:
        server.cancel.set()  # releases a lane that hangs
        lane.join(timeout=2.0)
        server.close()
