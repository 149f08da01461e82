"""The result cache: one JSON file per (file content, jaxlint version, settings, cross-file seeds).

Entries are written atomically (temporary file + rename), so concurrent runs never see a torn entry;
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

FORMAT = 1


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
    def __init__(self, folder: str) -> None:
        self.folder = os.path.join(folder, f"v{FORMAT}")

    def _path(self, key: str) -> str:
        return os.path.join(self.folder, key[:2], key + ".json")

    def get(self, key: str) -> Optional[tuple[list[Finding], list[ExternalCall]]]:
        try:
            with open(self._path(key), "r", encoding="utf-8") as f:
                doc = json.load(f)
            if doc.get("version") != __version__ or doc.get("key") != key:
                return None
            return ([_finding_from_json(d) for d in doc["findings"]],
                    [_call_from_json(d) for d in doc["calls"]])
        except (OSError, ValueError, KeyError, TypeError):
            return None  # missing, truncated or corrupt: recompute

    def put(self, key: str, findings: list[Finding], calls: list[ExternalCall]) -> None:
        path = self._path(key)
        doc = {"version": __version__, "key": key, "findings": [_finding_to_json(f) for f in findings],
               "calls": [_call_to_json(c) for c in calls]}
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            gitignore = os.path.join(os.path.dirname(self.folder), ".gitignore")
            if not os.path.exists(gitignore):
                with open(gitignore, "w", encoding="utf-8") as f:
                    f.write("# Created by jaxlint\n*\n")
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(doc, f)
            os.replace(tmp, path)
        except OSError:
            pass  # a read-only tree: run without caching


def clean(folder: str) -> bool:
    if os.path.isdir(folder):
        shutil.rmtree(folder, ignore_errors=True)
        return True
    return False


def _finding_to_json(f: Finding) -> dict[str, Any]:
    d = f.to_json()
    d["target"] = f.target.to_json() if f.target is not None else None
    return d


def _finding_from_json(d: dict[str, Any]) -> Finding:
    t = d.get("target")
    target = TraceTarget.from_json(t) if t is not None else None
    fix = Fix(**d["fix"]) if d.get("fix") else None
    return Finding(d["path"], d["line"], d["column"], d["end_line"], d["end_column"], d["code"], d["name"],
                   d["message"], d["function"], Verification(**d["verification"]), fix, target,
                   cell=d.get("cell"))


def _call_to_json(c: ExternalCall) -> dict[str, Any]:
    return {"qualname": c.qualname, "args": [[a.star, a.keyword, a.traced, a.pytree, a.array] for a in c.args],
            "abstract": c.abstract, "cached": c.cached, "caller": c.caller, "origin": c.origin}


def _call_from_json(d: dict[str, Any]) -> ExternalCall:
    return ExternalCall(d["qualname"], tuple(ArgInfo(*a) for a in d["args"]), d["abstract"], d["cached"],
                        d["caller"], d["origin"])
