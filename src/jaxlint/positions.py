"""Source positions of a few nodes, the same as libcst's `PositionProvider` gives, at a fraction of its cost.

libcst computes positions by generating the code of the whole module while counting lines, after a
metadata visit of every node. Here code generation runs with a lean state (no visit, no context
manager per node, no regular expression per token), and only over the top-level statements that
hold the wanted nodes: each starts at column 0 of a line that CPython's own (much faster) parser
gives. The generated text of each such statement is compared with the source at that line, and any
doubt (a mismatch, a node not found) falls back to generating the whole module, so the positions
are always exactly libcst's.
"""
from __future__ import annotations

import ast
import re
from typing import Iterable, Optional, Sequence

import libcst as cst
from libcst._nodes.internal import CodegenState

from .syntax import children

# (start line, start column, end line, end column): lines one-based, columns zero-based, like libcst
Span = tuple[int, int, int, int]

_NEWLINE = re.compile(r"\r\n?|\n")


class _State(CodegenState):
    """libcst's PositionProvidingCodegenState, without the per-node overheads."""

    def __init__(self, module: cst.Module, line: int) -> None:
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        self.line = line
        self.column = 0
        self.computed: dict[int, Span] = {}
        self.stack: list[tuple[int, int]] = []

    def add_indent_tokens(self) -> None:
        for token in self.indent_tokens:
            self.add_token(token)

    def add_token(self, value: str) -> None:
        self.tokens.append(value)
        if "\n" in value or "\r" in value:
            segments = _NEWLINE.split(value)
            self.line += len(segments) - 1
            self.column = len(segments[-1])
        else:
            self.column += len(value)

    def before_codegen(self, node: cst.CSTNode) -> None:
        self.stack.append((self.line, self.column))

    def after_codegen(self, node: cst.CSTNode) -> None:
        line, column = self.stack.pop()
        key = id(node)
        if key not in self.computed:  # a syntactic position, already recorded, wins
            self.computed[key] = (line, column, self.line, self.column)

    def record_syntactic_position(self, node: cst.CSTNode, *, start_node: Optional[cst.CSTNode] = None,
                                  end_node: Optional[cst.CSTNode] = None) -> "_Syntactic":
        return _Syntactic(self, node, start_node, end_node)


class _Syntactic:
    __slots__ = ("state", "node", "start_node", "end_node", "line", "column")

    def __init__(self, state: _State, node: cst.CSTNode, start_node: Optional[cst.CSTNode],
                 end_node: Optional[cst.CSTNode]) -> None:
        self.state = state
        self.node = node
        self.start_node = start_node
        self.end_node = end_node

    def __enter__(self) -> None:
        self.line = self.state.line
        self.column = self.state.column

    def __exit__(self, *exc: object) -> None:
        state = self.state
        computed = state.computed
        if self.start_node is not None:
            sl, sc = computed[id(self.start_node)][:2]
        else:
            sl, sc = self.line, self.column
        if self.end_node is not None:
            el, ec = computed[id(self.end_node)][2:]
        else:
            el, ec = state.line, state.column
        computed[id(self.node)] = (sl, sc, el, ec)


def _whole(module: cst.Module) -> dict[int, Span]:
    state = _State(module, 1)
    module._codegen(state)
    return state.computed


def _ast_of(text: str) -> Optional[ast.Module]:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _body_lines(body: Sequence[cst.BaseStatement], stmts: list[ast.stmt]) -> Optional[list[tuple[int, ast.stmt]]]:
    """For each statement of a block, the line on which its code begins (its leading blank and comment lines
    included) and CPython's node of its first statement; None when the two parsers do not line up."""
    out: list[tuple[int, ast.stmt]] = []
    i = 0
    for stmt in body:
        if i >= len(stmts):
            return None
        node = stmts[i]
        if isinstance(stmt, cst.SimpleStatementLine):
            line = node.lineno
            i += len(stmt.body)
        else:
            i += 1
            decorators = getattr(stmt, "decorators", ())
            if decorators:
                deco_list = getattr(node, "decorator_list", None)
                if not deco_list:
                    return None
                line = deco_list[0].lineno - len(decorators[0].leading_lines)
            else:
                line = node.lineno
        out.append((line - len(stmt.leading_lines), node))
    if i != len(stmts):
        return None
    return out


_DEFS = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _holds(node: cst.CSTNode, wanted: set[int], skip: Optional[cst.CSTNode] = None) -> bool:
    """Whether a wanted node lies in the subtree of `node` (outside `skip`)."""
    stack = [node]
    while stack:
        n = stack.pop()
        if id(n) in wanted:
            return True
        stack.extend(c for c in children(n) if c is not skip)
    return False


def _pieces(stmt: cst.BaseStatement, node: ast.stmt, line: int, indents: list[str], wanted: set[int],
            default_indent: str, out: list[tuple[cst.BaseStatement, int, list[str]]]) -> None:
    """The statements whose code to generate for the wanted nodes inside `stmt`, which begins on `line`
    inside blocks indented by `indents`: `stmt` itself, or, for a class or a def none of whose header holds a
    wanted node, the statements of its body that hold them (a method of a large test class, not the class)."""
    body = getattr(stmt, "body", None)
    if isinstance(stmt, (cst.ClassDef, cst.FunctionDef)) and isinstance(body, cst.IndentedBlock) \
            and isinstance(node, _DEFS) and id(body) not in wanted and not _holds(stmt, wanted, skip=body):
        lines = _body_lines(body.body, node.body)
        if lines is not None:
            inner = indents + [body.indent if body.indent is not None else default_indent]
            for child, (child_line, child_node) in zip(body.body, lines):
                if _holds(child, wanted):
                    _pieces(child, child_node, child_line, inner, wanted, default_indent, out)
            return
    out.append((stmt, line, indents))


def node_spans(module: cst.Module, text: Optional[str], nodes: Iterable[cst.CSTNode],
               tops: Iterable[Optional[int]]) -> dict[int, Span]:
    """Spans (by node id) of at least `nodes`, which lie within the top-level statements numbered `tops`
    (None: unknown). `text` is the decoded source of the module (None: unknown)."""
    wanted = {id(n) for n in nodes}
    indices = set(tops)
    if text is None or None in indices or not wanted:
        return _whole(module)
    tree = _ast_of(text)
    starts = _body_lines(module.body, tree.body) if tree is not None else None
    if starts is None:
        return _whole(module)
    line_starts = [0] + [m.end() for m in _NEWLINE.finditer(text)]
    computed: dict[int, Span] = {}
    last = len(module.body) - 1
    for index in sorted(indices):  # type: ignore[type-var]
        if not 0 <= index <= last:  # type: ignore[operator]
            return _whole(module)
        top = module.body[index]  # type: ignore[index]
        line, node = starts[index]  # type: ignore[index]
        pieces: list[tuple[cst.BaseStatement, int, list[str]]] = []
        if index == last and not module.footer and not module.has_trailing_newline:
            pieces.append((top, line, []))  # (the file's missing final newline: see below)
        else:
            _pieces(top, node, line, [], wanted, module.default_indent, pieces)
        for stmt, line, indents in pieces:
            if not 1 <= line <= len(line_starts):
                return _whole(module)
            state = _State(module, line)
            state.indent_tokens = list(indents)
            stmt._codegen(state)
            tokens = state.tokens
            if stmt is top and index == last and not module.footer and not module.has_trailing_newline and tokens:
                tokens = tokens[:-1]  # as Module._codegen_impl drops the file's missing final newline
            code = "".join(tokens)
            offset = line_starts[line - 1]
            if text[offset:offset + len(code)] != code:
                return _whole(module)
            computed.update(state.computed)
    if not wanted <= computed.keys():
        return _whole(module)
    return computed
