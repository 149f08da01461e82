"""The result cache of the static pass: findings and cross-file calls per (file content, jaxlint, settings, seeds).

Entries live in 16 shard files (by a hash of the source path, so that all entries of a file sit in
one shard and old ones can be pruned) and a run writes each shard it changed once, at its end: thousands of small files made a first run slower than no cache at all.
A shard is replaced atomically (temporary file + rename) under a lock, merged with what other runs
wrote meanwhile, so concurrent runs never see a torn shard and do not drop each other's entries;
anything unreadable, truncated or from another version is ignored and rebuilt.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from typing import Any, Optional

from . import __version__
from .findings import Finding, Fix, TraceTarget, Verification
from .semantic import ArgInfo, ExternalCall

FORMAT = 2
# Entries kept per source path in a shard (newest first): enough for a few settings and the
# cross-file seeds of each, while edits of a file do not pile up entries for its old contents.
KEEP_PER_PATH = 8


_CODE: Optional[str] = None


def code_fingerprint() -> str:
    """jaxlint's own code (names, sizes, mtimes): an edited checkout must not reuse stale results."""
    global _CODE
    if _CODE is None:
        h = hashlib.sha256()
        pkg = os.path.dirname(os.path.abspath(__file__))
        for folder, _dirs, files in sorted(os.walk(pkg)):
            for name in sorted(files):
                if name.endswith(".py"):
                    st = os.stat(os.path.join(folder, name))
                    h.update(f"{os.path.relpath(os.path.join(folder, name), pkg)}|{st.st_size}|{st.st_mtime_ns}".encode())
        _CODE = h.hexdigest()[:16]
    return _CODE


def key_for(data: bytes, settings_key: str, seeds: list[ExternalCall]) -> str:
    h = hashlib.sha256()
    h.update(f"{FORMAT}|{__version__}|{code_fingerprint()}|{settings_key}|".encode())
    h.update(hashlib.sha256(data).digest())
    for s in sorted(json.dumps(_call_to_json(c), sort_keys=True) for c in seeds):
        h.update(s.encode())
    return h.hexdigest()


class Cache:
    """Reads shards lazily, once per instance; `put` only collects, `flush` writes."""

    def __init__(self, folder: str) -> None:
        self.root = folder
        self.folder = os.path.join(folder, f"v{FORMAT}")
        self._shards: dict[str, dict[str, Any]] = {}
        self._new: dict[str, dict[str, Any]] = {}  # key -> entry, written by flush()

    def _path(self, shard: str) -> str:
        return os.path.join(self.folder, f"{shard}.json")

    def _read(self, shard: str) -> dict[str, Any]:
        try:
            with open(self._path(shard), "r", encoding="utf-8") as f:
                doc = json.load(f)
            # Keys hold jaxlint's version and code: entries of other versions are never hits, and
            # stay until pruned, so two versions sharing a cache do not wipe each other's shards.
            if isinstance(doc, dict) and isinstance(doc.get("entries"), dict):
                return doc["entries"]
        except (OSError, ValueError):
            pass  # missing, truncated or corrupt: start the shard afresh
        return {}

    def get(self, key: str, path: str) -> Optional[tuple[list[Finding], list[ExternalCall]]]:
        if key in self._new:
            entry = self._new[key]
        else:
            name = _shard(path)
            shard = self._shards.get(name)
            if shard is None:
                shard = self._shards[name] = self._read(name)
            entry = shard.get(key)
        if not isinstance(entry, dict):
            return None
        try:
            return ([_finding_from_json(d) for d in entry["findings"]], [_call_from_json(d) for d in entry["calls"]])
        except (KeyError, TypeError, ValueError):
            return None

    def put(self, key: str, path: str, findings: list[Finding], calls: list[ExternalCall]) -> None:
        self._new[key] = {"path": path, "findings": [_finding_to_json(f) for f in findings],
                          "calls": [_call_to_json(c) for c in calls]}

    def flush(self) -> None:
        """Write the collected entries: one atomic replacement per shard touched."""
        if not self._new:
            return
        by_shard: dict[str, dict[str, Any]] = {}
        for key, entry in self._new.items():
            by_shard.setdefault(_shard(entry["path"]), {})[key] = entry
        self._new = {}
        try:
            os.makedirs(self.folder, exist_ok=True)
            gitignore = os.path.join(self.root, ".gitignore")
            if not os.path.exists(gitignore):
                with open(gitignore, "w", encoding="utf-8") as f:
                    f.write("# Created by jaxlint\n*\n")
            with _Lock(os.path.join(self.folder, "lock")):
                for shard, added in sorted(by_shard.items()):
                    entries = self._read(shard)  # afresh: other runs may have written since we read it
                    for key in added:
                        entries.pop(key, None)  # re-inserted last: the newest entries come last
                    entries.update(added)
                    entries = _prune(entries)
                    fd, tmp = tempfile.mkstemp(dir=self.folder, suffix=".tmp")
                    with os.fdopen(fd, "w", encoding="utf-8") as f:
                        json.dump({"entries": entries}, f, separators=(",", ":"))
                    os.replace(tmp, self._path(shard))
                    self._shards[shard] = entries
        except OSError:
            pass  # a read-only tree: run without caching


def _shard(path: str) -> str:
    return hashlib.sha256(path.encode("utf-8", "surrogateescape")).hexdigest()[0]


def _prune(entries: dict[str, Any]) -> dict[str, Any]:
    """Keep the newest KEEP_PER_PATH entries of each source path."""
    seen: dict[Any, int] = {}
    kept: list[str] = []
    for key in reversed(list(entries)):
        path = entries[key].get("path") if isinstance(entries[key], dict) else None
        seen[path] = seen.get(path, 0) + 1
        if seen[path] <= KEEP_PER_PATH:
            kept.append(key)
    return {key: entries[key] for key in reversed(kept)}


class _Lock:
    """An exclusive advisory lock on a file, where the platform has one (best effort elsewhere)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd: Optional[int] = None

    def __enter__(self) -> "_Lock":
        try:
            import fcntl
        except ImportError:  # Windows: concurrent runs may drop each other's new entries, never corrupt them
            return self
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing releases the lock


def clean(folder: str) -> bool:
    if os.path.isdir(folder):
        shutil.rmtree(folder, ignore_errors=True)
        return True
    return False


def _finding_to_json(f: Finding) -> dict[str, Any]:
    d = f.to_json()
    d["target"] = f.target.to_json() if f.target is not None else None
    if f.subject is not None:
        d["subject"] = f.subject
    return d


def _finding_from_json(d: dict[str, Any]) -> Finding:
    t = d.get("target")
    target = TraceTarget.from_json(t) if t is not None else None
    fix = Fix(**d["fix"]) if d.get("fix") else None
    return Finding(d["path"], d["line"], d["column"], d["end_line"], d["end_column"], d["code"], d["name"],
                   d["message"], d["function"], Verification(**d["verification"]), fix, target,
                   cell=d.get("cell"), subject=d.get("subject"))


def _call_to_json(c: ExternalCall) -> dict[str, Any]:
    return {"qualname": c.qualname, "args": [[a.star, a.keyword, a.traced, a.pytree, a.array, a.argument,
                                              a.truth, a.ident] for a in c.args],
            "abstract": c.abstract, "cached": c.cached, "caller": c.caller, "origin": c.origin, "kind": c.kind}


def _call_from_json(d: dict[str, Any]) -> ExternalCall:
    return ExternalCall(d["qualname"], tuple(ArgInfo(*a[:5], argument=bool(a[5:6] and a[5]),
                                                     truth=a[6] if len(a) > 6 else None,
                                                     ident=a[7] if len(a) > 7 else None) for a in d["args"]),
                        d["abstract"], d["cached"],
                        d["caller"], d["origin"], d.get("kind", "traced"))
