"""Verdicts from `pytest --jaxlint`, kept beside the result cache and keyed on file content.

One JSON file per source file content (`<cache>/tests/ab/abcdef....json`), holding the verdicts of
the findings at (line, column, rule). A file that changes gets a new key, so an old verdict never
sticks to new code. Test runs merge into what is there (a confirmation is kept over a refutation; a
newer verdict replaces an older one of the same status), under a lock, so parallel test workers
(pytest-xdist) do not lose each other's verdicts.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from typing import Any, Callable, Iterator, Optional

from ..findings import Finding, Verification

FORMAT = 1
SOURCE = "tests"
_RANK = {"confirmed": 2, "refuted": 1}


def folder_for(cache_dir: str) -> str:
    """Where test verdicts live inside a jaxlint cache folder."""
    return os.path.join(cache_dir, "tests")


def content_key(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _entry(folder: str, key: str) -> str:
    return os.path.join(folder, key[:2], key + ".json")


def _read(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        if isinstance(doc, dict) and doc.get("format") == FORMAT and isinstance(doc.get("verdicts"), list):
            return doc
    except (OSError, ValueError):
        pass
    return {}


@contextlib.contextmanager
def _locked(folder: str) -> Iterator[None]:
    os.makedirs(folder, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # no advisory locks here: merges may race, each write is still atomic
        yield
        return
    with open(os.path.join(folder, ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def save(folder: str, path: str, data: bytes, verdicts: list[tuple[Finding, Verification]]) -> None:
    """Merge the verdicts for the findings of one file (its content `data`) into the store."""
    if not verdicts:
        return
    key = content_key(data)
    entry = _entry(folder, key)
    with _locked(folder):
        doc = _read(entry) or {"format": FORMAT, "path": path, "verdicts": []}
        rows = {(r["line"], r["column"], r["name"]): r for r in doc["verdicts"] if isinstance(r, dict)}
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for f, v in verdicts:
            k = (f.line, f.column, f.name)
            old = rows.get(k)
            if old is not None and _RANK.get(old.get("status"), 0) > _RANK.get(v.status, 0):
                continue  # a confirmation from an earlier run stands
            rows[k] = {"line": f.line, "column": f.column, "name": f.name, "status": v.status,
                       "detail": v.detail, "recorded": now}
        doc["path"] = path
        doc["verdicts"] = sorted(rows.values(), key=lambda r: (r["line"], r["column"], r["name"]))
        os.makedirs(os.path.dirname(entry), exist_ok=True)
        with open(os.path.join(folder, ".gitignore"), "w", encoding="utf-8") as f:
            f.write("# Created by jaxlint\n*\n")
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(entry), suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(doc, out, indent=1)
        os.replace(tmp, entry)


def _file(path: str) -> Optional[bytes]:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def apply(findings: list[Finding], folder: Optional[str],
          read: Optional[Callable[[str], Optional[bytes]]] = None) -> int:
    """Give each finding the verdict the tests recorded for it (tests win); how many got one.

    `read` gives the content that was analysed for a path (default: the file on disk).
    """
    if not folder or not os.path.isdir(folder):
        return 0
    by_path: dict[str, list[Finding]] = {}
    for f in findings:
        by_path.setdefault(f.path, []).append(f)
    applied = 0
    for path, group in by_path.items():
        data = read(path) if read is not None else _file(path)
        if data is None:
            continue
        doc = _read(_entry(folder, content_key(data)))
        if not doc:
            continue
        rows = {(r.get("line"), r.get("column"), r.get("name")): r for r in doc["verdicts"] if isinstance(r, dict)}
        for f in group:
            r = rows.get((f.line, f.column, f.name))
            if r is not None and r.get("status") in _RANK:
                f.verification = Verification(r["status"], str(r.get("detail", "")), SOURCE)
                applied += 1
    return applied
