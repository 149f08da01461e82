"""What verification executes of a module: its imports and the definitions the traced function needs.

Top-level statements are kept only if they are imports (or `try:` blocks of imports), or if they
define (def, class, assignment) a name that the traced function uses, transitively. Everything else —
a training loop without a `__main__` guard, a call at top level, `if __name__ == "__main__":` — is
dropped. The kept statements are the original AST nodes, so line numbers stay true.
"""
from __future__ import annotations

import ast
from typing import Iterable


def _names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _is_import_block(stmt: ast.stmt) -> bool:
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return True
    if isinstance(stmt, ast.Try):
        parts = stmt.body + [s for h in stmt.handlers for s in h.body] + stmt.orelse + stmt.finalbody
        return all(isinstance(s, (ast.Import, ast.ImportFrom, ast.Pass, ast.Assign)) for s in parts)
    return False


def _defined(stmt: ast.stmt) -> set[str]:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    if isinstance(stmt, ast.Assign):
        return {n.id for t in stmt.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    if isinstance(stmt, (ast.AnnAssign, ast.AugAssign)) and isinstance(stmt.target, ast.Name):
        return {stmt.target.id}
    return set()


def slice_module(tree: ast.Module, roots: Iterable[str]) -> tuple[ast.Module, list[int]]:
    """The sub-module that defines `roots`, and the line numbers of the top-level statements it keeps."""
    defines: dict[str, list[int]] = {}
    keep: set[int] = set()
    for i, stmt in enumerate(tree.body):
        if _is_import_block(stmt):
            keep.add(i)
            continue
        for name in _defined(stmt):
            defines.setdefault(name, []).append(i)
    work = list(roots)
    seen: set[str] = set()
    while work:
        name = work.pop()
        if name in seen:
            continue
        seen.add(name)
        for i in defines.get(name, []):
            if i not in keep:
                keep.add(i)
                work.extend(_names_in(tree.body[i]) - seen)
    body = [stmt for i, stmt in enumerate(tree.body) if i in keep]
    return ast.Module(body=body, type_ignores=[]), sorted(tree.body[i].lineno for i in keep)
