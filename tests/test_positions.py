"""The lean positions agree with libcst's PositionProvider, node for node, pruned or whole."""
from __future__ import annotations

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from jaxlint import positions
from jaxlint.syntax import children

SOURCES = {
    "plain": b"import jax\n\n\n@jax.jit\ndef f(x):\n    return x + 1\n\ny = f(2); z = 3;\n",
    "crlf": b"import jax\r\n\r\n# c\r\n@jax.jit\r\ndef f(x):\r\n    return x\r\nx = 1; y = 2\r\n",
    "cr": b"import jax\r# c\r@jax.jit\rdef f(x):\r    return x\r",
    "bom": b"\xef\xbb\xbfimport jax\nx = jax.numpy.ones(3)\n",
    "no_final_newline": b"import jax\n\ndef f(x):\n    return x\ny = 3",
    "decorators": (b"# header\n\nimport jax\n\n\n# hello\n@jax.jit  # c\n# between\n@ (\n  jax.jit)\n\ndef f(x):\n"
                   b"    return x\n    # trailing indented\n\n  # weird\nx = \\\n  1\n\x0c\nclass A:\n    pass\n"),
    "compound": (b'if True:\n    pass\nelse:\n    pass\nasync def g():\n    async with a as b:\n        pass\n'
                 b'z = """\nmulti\n"""; w = 1;\ntry:\n    pass\nexcept E as e:\n    pass\nfinally:\n    pass\n'),
    "comments_only": b"# only a comment\n",
    "nested": (b"import jax\n\n\nclass T(Base):\n    \"\"\"doc\"\"\"\n\n    x: int = 1\n\n    # about f\n    @jax.jit\n"
               b"    # between\n    def f(self, a):\n        if a:\n            b = 1; c = 2\n\n        # c\n"
               b"        return a\n\n    class Inner:\n      def g(self): return 3\n      async def h(self):\n"
               b"        pass\n    def k(self):\n        pass\n        # trailing\n\n\ndef top():\n  y = [\n    1,\n"
               b"  ]\n  return y\n"),
    "nested_crlf_no_final_newline": b"class A:\r\n    def f(self):\r\n        return 1\r\n    def g(self):\r\n        x = 2",
}


def _nodes(node: cst.CSTNode) -> list[cst.CSTNode]:
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        out.append(n)
        stack.extend(n.children)
    return out


def _expected(module: cst.Module) -> dict[int, positions.Span]:
    ref = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    return {id(n): (r.start.line, r.start.column, r.end.line, r.end.column) for n, r in ref.items()}


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_spans_match_libcst(name: str) -> None:
    raw = SOURCES[name]
    module = cst.parse_module(raw)
    expected = _expected(module)
    assert positions._whole(module) == expected
    text = raw.decode(module.encoding)
    for index, stmt in enumerate(module.body):
        nodes = _nodes(stmt)
        got = positions.node_spans(module, text, nodes, [index])
        assert {id(n): got[id(n)] for n in nodes} == {id(n): expected[id(n)] for n in nodes}
    # Unknown statements, or a wrong guess, fall back to the whole module.
    if module.body:
        last = _nodes(module.body[-1])
        assert positions.node_spans(module, text, last, [None]) == expected
        if len(module.body) > 1:
            got = positions.node_spans(module, text, last, [0])
            assert {id(n): got[id(n)] for n in last} == {id(n): expected[id(n)] for n in last}


def test_children_skip_plain_values() -> None:
    call = cst.parse_expression("f(a, b=1)")
    assert [type(c).__name__ for c in children(call)] == ["Name", "Arg", "Arg"]
    assert children(cst.Name("x")) == []


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_spans_of_single_nodes_inside_classes_and_defs_match_libcst(name: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Asked for one node, only the innermost statements of its class or def that hold it are generated
    (never the whole module here): still libcst's positions, node for node."""
    raw = SOURCES[name]
    module = cst.parse_module(raw)
    expected = _expected(module)
    text = raw.decode(module.encoding)
    whole: list = []
    real = positions._whole
    monkeypatch.setattr(positions, "_whole", lambda m: whole.append(m) or real(m))
    for index, stmt in enumerate(module.body):
        for node in _reportable(stmt):
            got = positions.node_spans(module, text, [node], [index])
            assert got[id(node)] == expected[id(node)]
    assert whole == []


def _reportable(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The nodes a finding can point at: statements, names and expressions (no whitespace or punctuation)."""
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        out.append(n)
        stack.extend(children(n))
    return out


def test_only_the_statements_holding_the_nodes_are_generated() -> None:
    raw = SOURCES["nested"]
    module = cst.parse_module(raw)
    cls = module.body[1]
    ret = cls.body.body[2].body.body[-1]  # `return a` in `def f`
    tree = positions._ast_of(raw.decode())
    pieces: list = []
    positions._pieces(cls, tree.body[1], 4, [], {id(ret.body[0])}, "    ", pieces)
    assert [(type(p).__name__, line, indents) for p, line, indents in pieces] == [
        ("SimpleStatementLine", 15, ["    ", "    "])]  # (its code begins with the blank line and comment above it)
