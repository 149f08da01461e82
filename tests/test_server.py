"""`jaxlint server` end to end: a real subprocess spoken to in LSP over stdio with JSON-RPC framing."""
from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

ROOT = Path(__file__).resolve().parent.parent
WAIT = 180.0  # seconds before a missing message fails the test (a hang guard on a busy machine, not a speed check)

SOURCE = '''\
import time

import jax
import jax.numpy as jnp


@jax.jit
def scale(x, factor):
    jitter = time.time() % 1e-3
    print("scaling by", factor)
    if factor > 1:
        return x * factor + jitter
    return x
'''

HELPER = '''\
"""Loud helpers."""
from jax import jit


@jit
def shout(x):
    y = x * 2
    print(y)
    return y
'''

CLEAN_BODY = "    return jnp.where(factor > 1, x * factor, x)\n"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


class Client:
    """A minimal LSP client: Content-Length framed JSON-RPC over the server's stdin and stdout."""

    def __init__(self, cwd: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "jaxlint", "server"], cwd=cwd, env=_env(),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.inbox: "queue.Queue[Optional[dict]]" = queue.Queue()
        self.seen: list[dict] = []
        self.stderr: list[bytes] = []
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()

    def _read(self) -> None:
        out = self.proc.stdout
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    self.inbox.put(None)
                    return
                line = line.strip()
                if not line:
                    break
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            assert length is not None, "a message without Content-Length"
            self.inbox.put(json.loads(out.read(length)))

    def send(self, msg: dict) -> None:
        body = json.dumps({"jsonrpc": "2.0", **msg}).encode("utf-8")
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def notify(self, method: str, params: Any) -> None:
        self.send({"method": method, "params": params})

    def open(self, uri: str, text: str) -> None:
        """Open a Python document (version 1) in the server."""
        self.notify("textDocument/didOpen", {"textDocument": {
            "uri": uri, "languageId": "python", "version": 1, "text": text}})

    def request(self, method: str, params: Any) -> Any:
        self.next_id += 1
        rid = self.next_id
        self.send({"id": rid, "method": method, "params": params})
        reply = self.wait(lambda m: m.get("id") == rid and "method" not in m, f"the reply to {method}")
        assert "error" not in reply, reply
        return reply["result"]

    def wait(self, match: Callable[[dict], bool], what: str) -> dict:
        while True:
            try:
                msg = self.inbox.get(timeout=WAIT)
            except queue.Empty:
                raise AssertionError(f"no {what} within {WAIT:.0f} s; stderr: {b''.join(self.stderr)[-2000:]!r}")
            if msg is None:
                raise AssertionError(f"the server exited before {what}; stderr: {b''.join(self.stderr)[-2000:]!r}")
            self.seen.append(msg)
            if "method" in msg and "id" in msg:  # a request from the server (registrations, progress): accept
                self.send({"id": msg["id"], "result": None})
                continue
            if match(msg):
                return msg

    def diagnostics(self, uri: str, version: Optional[int] = None) -> dict:
        return self.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics"
                         and m["params"]["uri"] == uri
                         and (version is None or m["params"].get("version") == version),
                         f"diagnostics for {uri} version {version}")["params"]

    def start(self, root: Path, options: Optional[dict] = None, capabilities: Optional[dict] = None) -> dict:
        result = self.request("initialize", {
            "processId": os.getpid(), "rootUri": root.as_uri(), "capabilities": capabilities or {},
            "initializationOptions": options or {},
            "workspaceFolders": [{"uri": root.as_uri(), "name": root.name}]})
        self.notify("initialized", {})
        return result

    def stop(self) -> int:
        assert self.request("shutdown", None) is None
        self.notify("exit", None)
        self.proc.stdin.close()
        return self.proc.wait(timeout=WAIT)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _apply(text: str, edits: list[dict]) -> str:
    """Apply LSP TextEdits (ASCII text: UTF-16 units are characters) to `text`."""
    lines = text.splitlines(keepends=True)
    starts = [0]
    for ln in lines:
        starts.append(starts[-1] + len(ln))

    def offset(pos: dict) -> int:
        return starts[pos["line"]] + pos["character"] if pos["line"] < len(lines) else len(text)

    for e in sorted(edits, key=lambda e: offset(e["range"]["start"]), reverse=True):
        text = text[:offset(e["range"]["start"])] + e["newText"] + text[offset(e["range"]["end"]):]
    return text


def _edits(action: dict, uri: str, version: Optional[int] = None) -> list[dict]:
    """The edits of a code action: versioned `documentChanges` when the client said it takes them."""
    if version is None:
        assert list(action["edit"]["changes"]) == [uri]
        return action["edit"]["changes"][uri]
    changes = action["edit"]["documentChanges"]
    assert [(c["textDocument"]["uri"], c["textDocument"]["version"]) for c in changes] == [(uri, version)]
    return changes[0]["edits"]


def _cli_json(path: Path) -> list[dict]:
    proc = subprocess.run([sys.executable, "-m", "jaxlint", "--no-verify", "--no-cache", "--format", "json", path.name],
                          cwd=path.parent, env=_env(), capture_output=True, text=True)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)["findings"]


def _cli_rewrite(path: Path, flag: str) -> str:
    copy = path.parent / "cli_copy" / path.name
    copy.parent.mkdir(exist_ok=True)
    shutil.copy(path.parent / "pyproject.toml", copy.parent / "pyproject.toml")
    shutil.copy(path, copy)
    proc = subprocess.run([sys.executable, "-m", "jaxlint", "--no-verify", "--no-cache", flag, copy.name],
                          cwd=copy.parent, env=_env(), capture_output=True, text=True)
    assert proc.returncode in (0, 1), proc.stderr
    return copy.read_text()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    pytest.importorskip("pygls")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "demo"\n\n[tool.jaxlint]\nignore = ["impure-call"]\n')
    (tmp_path / "model.py").write_text(SOURCE)
    return tmp_path


def test_diagnostics_quick_fixes_and_edits(project: Path) -> None:
    path = project / "model.py"
    uri = path.as_uri()
    cli = _cli_json(path)
    assert [f["name"] for f in cli] == ["print-in-trace", "traced-if"]  # impure-call ignored by pyproject

    client = Client(project)
    try:
        caps = client.start(project, capabilities={"workspace": {"workspaceEdit": {"documentChanges": True}}})[
            "capabilities"]
        assert caps["codeActionProvider"] and caps["textDocumentSync"]

        # Open: the buffer's findings, where the CLI puts them; configuration from [tool.jaxlint].
        client.open(uri, SOURCE)
        diags = client.diagnostics(uri, 1)["diagnostics"]
        assert [d["code"] for d in diags] == [f["code"] for f in cli] == ["JL201", "JL101"]
        for d, f in zip(diags, cli):
            assert d["range"] == {"start": {"line": f["line"] - 1, "character": f["column"] - 1},
                                  "end": {"line": f["end_line"] - 1, "character": f["end_column"] - 1}}
            assert d["source"] == "jaxlint" and d["message"] == f["message"]
            assert d["severity"] == 2  # Warning: not verified (verification runs only on save, when enabled)
            assert d["codeDescription"]["href"].startswith("https://docs.jax.dev/")
        lines = SOURCE.splitlines()
        print_line = next(i for i, ln in enumerate(lines) if "print(" in ln)
        assert diags[0]["range"]["start"] == {"line": print_line, "character": lines[print_line].index("print")}

        # Hover on a flagged span: the rule's documentation, as `jaxlint rule` prints it; nothing elsewhere.
        hover = client.request("textDocument/hover", {"textDocument": {"uri": uri},
                                                      "position": {"line": print_line, "character": 6}})
        assert "print-in-trace (JL201)" in hover["contents"]["value"]
        assert "## What it does" in hover["contents"]["value"]
        assert client.request("textDocument/hover", {"textDocument": {"uri": uri},
                                                     "position": {"line": print_line, "character": 1}}) is None

        # Code actions on the print: the --fix edit, and the --add-noqa comment.
        actions = client.request("textDocument/codeAction", {
            "textDocument": {"uri": uri}, "range": diags[0]["range"],
            "context": {"diagnostics": [diags[0]]}})
        fixes = [a for a in actions if a["title"].startswith("Fix ")]
        suppress = [a for a in actions if a["title"].startswith("Suppress ")]
        assert len(fixes) == 1 and len(suppress) == 1, [a["title"] for a in actions]
        fix = fixes[0]
        assert fix["kind"] == "quickfix" and fix["isPreferred"] and fix["diagnostics"] == [diags[0]]
        fixed = _apply(SOURCE, _edits(fix, uri, 1))
        assert fixed == _cli_rewrite(path, "--fix")
        assert 'jax.debug.print("scaling by {}", factor)' in fixed
        suppressed = _apply(SOURCE, _edits(suppress[0], uri, 1)).splitlines()
        assert suppressed[print_line].endswith("# jaxlint: ignore[print-in-trace]")
        assert suppressed[print_line] == _cli_rewrite(path, "--add-noqa").splitlines()[print_line]
        assert suppressed[:print_line] + suppressed[print_line + 1:] == lines[:print_line] + lines[print_line + 1:]

        # A line without findings has no actions.
        assert client.request("textDocument/codeAction", {
            "textDocument": {"uri": uri}, "range": {"start": {"line": 0, "character": 0},
                                                    "end": {"line": 0, "character": 0}},
            "context": {"diagnostics": []}}) == []

        # An incremental change that removes both hazards: empty diagnostics for that version.
        client.notify("textDocument/didChange", {
            "textDocument": {"uri": uri, "version": 2},
            "contentChanges": [{"range": {"start": {"line": print_line, "character": 0},
                                          "end": {"line": len(lines), "character": 0}},
                                "text": CLEAN_BODY}]})
        assert client.diagnostics(uri, 2)["diagnostics"] == []

        # A burst of edits: only the newest version's findings stand at the end, never an older
        # version's after a newer one.
        body = SOURCE.splitlines(keepends=True)
        for version in (3, 4, 5):
            text = "".join(body[:print_line]) + "    print(factor)\n" * (version - 2) + CLEAN_BODY
            client.notify("textDocument/didChange", {
                "textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": text}]})
        last = client.diagnostics(uri, 5)["diagnostics"]
        assert [(d["code"], d["range"]["start"]["line"]) for d in last] == [
            ("JL201", print_line), ("JL201", print_line + 1), ("JL201", print_line + 2)]
        published = [m["params"]["version"] for m in client.seen
                     if m.get("method") == "textDocument/publishDiagnostics" and m["params"]["uri"] == uri]
        assert published == sorted(published) and published[-1] == 5

        # A buffer that does not parse: one syntax-error diagnostic, an Error.
        broken = (project / "broken.py").as_uri()
        client.open(broken, "def f(:\n    pass\n")
        (syntax,) = client.diagnostics(broken, 1)["diagnostics"]
        assert syntax["code"] == "JL901" and syntax["severity"] == 1 and syntax["range"]["start"]["line"] == 0

        # Columns count UTF-16 code units, the protocol's default: an emoji before the flagged
        # call is two of them, though one character to Python.
        wide = (project / "wide.py").as_uri()
        wide_text = SOURCE.replace('print("scaling by", factor)', 'label = "\U0001F600"; print(label, factor)')
        client.open(wide, wide_text)
        (wide_print,) = [d for d in client.diagnostics(wide, 1)["diagnostics"] if d["code"] == "JL201"]
        prefix = wide_text.splitlines()[print_line].split("print(")[0]
        assert wide_print["range"]["start"] == {"line": print_line,
                                                "character": len(prefix.encode("utf-16-le")) // 2}
        assert wide_print["range"]["start"]["character"] == len(prefix) + 1

        # Closing a buffer clears its diagnostics.
        client.notify("textDocument/didClose", {"textDocument": {"uri": broken}})
        assert client.diagnostics(broken)["diagnostics"] == []

        assert client.stop() == 0
    finally:
        client.kill()


def test_fix_all_on_request(project: Path) -> None:
    path = project / "model.py"
    uri = path.as_uri()
    client = Client(project)
    try:
        client.start(project)
        client.open(uri, SOURCE)
        client.diagnostics(uri, 1)
        whole = {"start": {"line": 0, "character": 0}, "end": {"line": len(SOURCE.splitlines()), "character": 0}}
        (action,) = client.request("textDocument/codeAction", {
            "textDocument": {"uri": uri}, "range": whole,
            "context": {"diagnostics": [], "only": ["source.fixAll"]}})
        assert action["kind"] == "source.fixAll.jaxlint"
        assert _apply(SOURCE, _edits(action, uri)) == _cli_rewrite(path, "--fix")
        # A fix that also adds `import jax` at the top: two small edits, not one spanning the file.
        helper = project / "helper.py"
        helper.write_text(HELPER)
        client.open(helper.as_uri(), HELPER)
        (shout,) = client.diagnostics(helper.as_uri(), 1)["diagnostics"]
        actions = client.request("textDocument/codeAction", {
            "textDocument": {"uri": helper.as_uri()}, "range": shout["range"], "context": {"diagnostics": [shout]}})
        (fix,) = [a for a in actions if a["title"].startswith("Fix ")]
        edits = _edits(fix, helper.as_uri())
        assert len(edits) == 2
        assert _apply(HELPER, edits) == _cli_rewrite(helper, "--fix")

        # Saving re-lints; with verify-on-save off (the default) nothing is verified.
        client.notify("textDocument/didSave", {"textDocument": {"uri": uri}})
        saved = client.diagnostics(uri, 1)["diagnostics"]
        assert [(d["code"], d["severity"], d["data"]["status"]) for d in saved] == [
            ("JL201", 2, "not-run"), ("JL101", 2, "not-run")]
        assert client.stop() == 0
    finally:
        client.kill()


@pytest.mark.slow
def test_verify_on_save(project: Path) -> None:
    pytest.importorskip("jax")
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + "verify-on-save = true\n")
    path = project / "model.py"
    assert _cli_json(path)  # the command line accepts the key (and ignores it)
    uri = path.as_uri()
    client = Client(project)
    try:
        client.start(project)
        client.open(uri, SOURCE)
        opened = client.diagnostics(uri, 1)["diagnostics"]
        assert [d["severity"] for d in opened] == [2, 2]  # opening does not verify
        client.notify("textDocument/didSave", {"textDocument": {"uri": uri}})
        verified = client.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics"
                               and any("confirmed" in d["message"] for d in m["params"]["diagnostics"]),
                               "verified diagnostics")["params"]["diagnostics"]
        by_code = {d["code"]: d for d in verified}
        assert by_code["JL101"]["severity"] == 1  # confirmed by tracing: an Error
        assert "TracerBoolConversionError" in by_code["JL101"]["message"]
        assert client.stop() == 0
    finally:
        client.kill()


def test_bad_configuration_is_shown_and_linting_goes_on(project: Path) -> None:
    (project / "pyproject.toml").write_text("[tool.jaxlint]\nverify-on-safe = true\n")
    uri = (project / "model.py").as_uri()
    client = Client(project)
    try:
        client.start(project, {"verifyOnSave": "yes", "colour": 1})
        client.open(uri, SOURCE)
        diags = client.diagnostics(uri, 1)["diagnostics"]
        assert "JL203" in {d["code"] for d in diags}  # defaults: impure-call is no longer ignored
        shown = [m["params"]["message"] for m in client.seen if m.get("method") == "window/showMessage"]
        assert any("`verify-on-safe`" in s and "pyproject.toml" in s for s in shown), shown
        assert any("`colour`" in s for s in shown), shown
        assert any("`verifyOnSave` must be true or false" in s for s in shown), shown
        assert client.stop() == 0
    finally:
        client.kill()


def test_configuration_change_relints_open_buffers(project: Path) -> None:
    uri = (project / "model.py").as_uri()
    client = Client(project)
    try:
        client.start(project, capabilities={"workspace": {"didChangeWatchedFiles": {"dynamicRegistration": True}}})
        client.open(uri, SOURCE)
        assert [d["code"] for d in client.diagnostics(uri, 1)["diagnostics"]] == ["JL201", "JL101"]
        registered = [m for m in client.seen if m.get("method") == "client/registerCapability"]
        assert registered[0]["params"]["registrations"][0]["method"] == "workspace/didChangeWatchedFiles"
        pyproject = project / "pyproject.toml"
        pyproject.write_text(pyproject.read_text().replace('["impure-call"]', '["impure-call", "JL201"]'))
        st = pyproject.stat()
        os.utime(pyproject, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # a coarse clock still sees a change
        client.notify("workspace/didChangeWatchedFiles", {"changes": [{"uri": pyproject.as_uri(), "type": 2}]})
        assert [d["code"] for d in client.diagnostics(uri, 1)["diagnostics"]] == ["JL101"]
        # A file the configuration excludes gets no diagnostics in the editor.
        pyproject.write_text(pyproject.read_text() + 'exclude = ["model.py"]\n')
        os.utime(pyproject, ns=(st.st_atime_ns, st.st_mtime_ns + 2 * 10**9))
        client.notify("workspace/didChangeWatchedFiles", {"changes": [{"uri": pyproject.as_uri(), "type": 2}]})
        assert client.diagnostics(uri, 1)["diagnostics"] == []
        assert client.stop() == 0
    finally:
        client.kill()


TRAIN = '''\
import jax

from .losses import penalty


@jax.jit
def step(w, x):
    return w - 0.1 * penalty(w, x)
'''

LOSSES = '''\
import jax.numpy as jnp


def penalty(w, x):
    total = jnp.sum(w * x)
    print(total)
    if total > 0:
        return total
    return -total
'''


def test_calls_from_other_saved_files_are_followed(tmp_path: Path) -> None:
    pytest.importorskip("pygls")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "demo"\n')
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text(TRAIN)
    losses = pkg / "losses.py"
    losses.write_text(LOSSES)
    proc = subprocess.run([sys.executable, "-m", "jaxlint", "--no-verify", "--no-cache", "--format", "json", "."],
                          cwd=tmp_path, env=_env(), capture_output=True, text=True)
    cli = json.loads(proc.stdout)["findings"]
    assert [(f["path"], f["code"]) for f in cli] == [("pkg/losses.py", "JL201"), ("pkg/losses.py", "JL101")]

    # The buffer differs from the saved file (a line added on top): its own text is linted, with
    # the calls that the saved train.py makes into it.
    buffer = "# edited, not saved\n" + LOSSES
    uri = losses.as_uri()
    client = Client(tmp_path)
    try:
        client.start(tmp_path)
        client.open(uri, buffer)
        diags = client.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics"
                            and m["params"]["uri"] == uri and m["params"]["diagnostics"],
                            "diagnostics reached through train.py")["params"]["diagnostics"]
        assert [(d["code"], d["range"]["start"]["line"], d["message"]) for d in diags] == [
            (f["code"], f["line"], f["message"]) for f in cli]  # one line lower: 0-based equals 1-based
        assert "called from `step` in `pkg/train.py`" in diags[1]["message"]
        actions = client.request("textDocument/codeAction", {
            "textDocument": {"uri": uri}, "range": diags[0]["range"], "context": {"diagnostics": [diags[0]]}})
        (fix,) = [a for a in actions if a["title"].startswith("Fix ")]
        assert "jax.debug.print" in _apply(buffer, _edits(fix, uri))
        assert client.stop() == 0
    finally:
        client.kill()


def test_server_without_pygls_says_what_to_install() -> None:
    # A None entry in sys.modules makes `import pygls` fail as if it were not installed.
    code = ("import sys; sys.modules['pygls'] = None; sys.argv = ['jaxlint', 'server']; "
            "from jaxlint.cli import entry; entry()")
    proc = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 2
    assert "pip install 'jax-trace-hazards[lsp]'" in proc.stderr and "Traceback" not in proc.stderr


def _big_module(functions: int, marker: str) -> str:
    """A long module of jitted functions, each with one traced `if`; `marker` makes versions differ."""
    parts = ["import jax\nimport jax.numpy as jnp\n\n"]
    for i in range(functions):
        parts.append(f"\n@jax.jit\ndef step_{i}(x, y):\n    z = jnp.tanh(x * {i} + y)  # {marker}\n"
                     f"    if z.sum() > 0:\n        z = z - 1\n    return z\n\n")
    return "".join(parts)


def test_a_large_buffer_does_not_block_other_requests(project: Path) -> None:
    small = (project / "model.py").as_uri()
    big = (project / "big.py").as_uri()
    client = Client(project)
    try:
        client.start(project)
        client.open(small, SOURCE)
        print_line = next(i for i, ln in enumerate(SOURCE.splitlines()) if "print(" in ln)
        client.diagnostics(small, 1)
        first, second = _big_module(1500, "first"), _big_module(1499, "second")
        client.open(big, first)
        client.notify("textDocument/didChange", {
            "textDocument": {"uri": big, "version": 2}, "contentChanges": [{"text": second}]})
        # The analysis of the large buffer runs in a worker process: the server answers meanwhile.
        hover = client.request("textDocument/hover", {"textDocument": {"uri": small},
                                                      "position": {"line": print_line, "character": 6}})
        assert "print-in-trace" in hover["contents"]["value"]
        assert not [m for m in client.seen if m.get("method") == "textDocument/publishDiagnostics"
                    and m["params"]["uri"] == big], "the hover waited for the large buffer's analysis"
        diags = client.diagnostics(big, 2)["diagnostics"]
        assert len(diags) == 1499 and {d["code"] for d in diags} == {"JL101"}
        # Version 1 was superseded: if its result was published at all, it came before version 2's.
        versions = [m["params"]["version"] for m in client.seen
                    if m.get("method") == "textDocument/publishDiagnostics" and m["params"]["uri"] == big]
        assert versions[-1] == 2 and versions == sorted(versions)
        assert client.stop() == 0
    finally:
        client.kill()
