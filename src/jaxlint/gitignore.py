"""What `.gitignore` files (nested ones and negations included) and `.git/info/exclude` ignore, as git reads them.

Read with `pathspec`'s `GitIgnoreSpec` rather than by asking `git check-ignore`: it needs no git
binary and no subprocess, works outside a work tree (an unpacked sdist, a copied folder), and gives
the same answer for the same files wherever jaxlint runs.
"""
from __future__ import annotations

import os
from typing import Optional

import pathspec


def _repo_root(start: str) -> Optional[str]:
    """The nearest folder at or above `start` holding `.git` (a folder, or a file in a worktree)."""
    here = start
    while True:
        if os.path.exists(os.path.join(here, ".git")):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def _read_spec(path: str) -> Optional[pathspec.GitIgnoreSpec]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    return pathspec.GitIgnoreSpec.from_lines(lines) if lines else None


class GitIgnore:
    """Answers "does git ignore this path?" for paths found while walking the folder `top`.

    Like git: the `.gitignore` of a deeper folder wins over the ones above it, the last matching
    line of a file wins within it (so `!keep.py` re-includes), `.git/info/exclude` comes below every
    `.gitignore`, and a file under an ignored folder is never reached (the walk prunes the folder).
    Inside a repository the `.gitignore` files from its root down to `top` apply too; outside one,
    only those at and below `top`. A folder named on the command line is walked even when git
    ignores it (as a file named there is checked): then only the `.gitignore` files inside it count.
    """

    def __init__(self, top: str) -> None:
        self.top = os.path.abspath(top)
        self.root = _repo_root(self.top) or self.top
        self.specs: dict[str, Optional[pathspec.GitIgnoreSpec]] = {}
        self.exclude = _read_spec(os.path.join(self.root, ".git", "info", "exclude")) \
            if os.path.isdir(os.path.join(self.root, ".git")) else None
        chain = []
        here = self.top
        while len(here) > len(self.root):
            chain.append(here)
            here = os.path.dirname(here)
        if any(self.ignored(folder, is_dir=True) for folder in reversed(chain)):
            self.root, self.exclude = self.top, None

    def _spec(self, folder: str) -> Optional[pathspec.GitIgnoreSpec]:
        if folder not in self.specs:
            self.specs[folder] = _read_spec(os.path.join(folder, ".gitignore"))
        return self.specs[folder]

    def ignored(self, path: str, is_dir: bool) -> bool:
        full = os.path.abspath(path)
        folder = os.path.dirname(full)
        suffix = "/" if is_dir else ""
        # Deepest .gitignore first: the first one with an opinion (ignore or re-include) decides.
        while True:
            spec = self._spec(folder)
            if spec is not None:
                rel = os.path.relpath(full, folder).replace(os.sep, "/") + suffix
                verdict = spec.check_file(rel).include
                if verdict is not None:
                    return verdict
            if folder == self.root or len(folder) <= len(self.root):
                break
            folder = os.path.dirname(folder)
        if self.exclude is not None:
            rel = os.path.relpath(full, self.root).replace(os.sep, "/") + suffix
            return bool(self.exclude.check_file(rel).include)
        return False
