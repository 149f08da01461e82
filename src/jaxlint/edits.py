"""Autofix edits: small libcst rewrites that rules attach to their reports."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Optional

import libcst as cst


@dataclass(frozen=True)
class Edit:
    """Replace `node` (of the analysed tree) by `rewrite(node)`; `needs_import` names a module to import."""

    node: cst.CSTNode
    rewrite: Callable[[cst.CSTNode], cst.CSTNode]
    needs_import: Optional[str] = None


# ---- print -> jax.debug.print ------------------------------------------------------------------


def _escape_braces(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


_PERCENT = re.compile(r"%(?:\((?P<key>\w+)\))?(?P<spec>[-+ #0]*\d*(?:\.\d+)?)(?P<conv>[sdifreEgGx%])")


def _percent_to_braces(fmt: str) -> Optional[tuple[str, int]]:
    """`"x=%.3f n=%d"` -> (`"x={:.3f} n={}"`, 2); None for forms we do not convert."""
    out: list[str] = []
    count = 0
    pos = 0
    for m in _PERCENT.finditer(fmt):
        out.append(_escape_braces(fmt[pos:m.start()]))
        pos = m.end()
        if m.group("conv") == "%":
            out.append("%")
            continue
        if m.group("key"):
            return None
        spec, conv = m.group("spec"), m.group("conv")
        if conv in "sr":
            out.append("{}")
        elif conv in "di":
            out.append("{:" + spec + "d}" if spec else "{}")
        else:
            out.append("{:" + spec + conv + "}")
        count += 1
    out.append(_escape_braces(fmt[pos:]))
    return "".join(out), count


def print_to_debug_print(call: cst.Call, jax_name: str) -> Optional[tuple[cst.Call, bool]]:
    """The `jax.debug.print` call for a `print` call, and whether the rewrite is exact (safe)."""
    if any(a.star for a in call.args):
        return None
    keywords = {a.keyword.value: a for a in call.args if a.keyword is not None}
    if set(keywords) - {"sep", "end", "flush"}:
        return None  # file= etc.: not a console print
    sep = " "
    safe = True
    if "sep" in keywords:
        v = keywords["sep"].value
        if not isinstance(v, cst.SimpleString):
            return None
        sep = str(v.evaluated_value)
    if "end" in keywords:
        safe = False  # jax.debug.print always ends the line
    parts: list[str] = []
    args: list[cst.Arg] = []
    for a in call.args:
        if a.keyword is not None:
            continue
        v = a.value
        if isinstance(v, cst.SimpleString) and isinstance(v.evaluated_value, str):
            parts.append(_escape_braces(v.evaluated_value))
        elif isinstance(v, cst.FormattedString):
            text = []
            for piece in v.parts:
                if isinstance(piece, cst.FormattedStringText):
                    text.append(piece.value)
                else:
                    if piece.conversion is not None or piece.equal is not None:
                        return None
                    spec = ""
                    if piece.format_spec:
                        if not all(isinstance(s, cst.FormattedStringText) for s in piece.format_spec):
                            return None
                        spec = ":" + "".join(s.value for s in piece.format_spec)  # type: ignore[union-attr]
                    text.append("{" + spec + "}")
                    args.append(cst.Arg(piece.expression))
            parts.append("".join(text))
        elif isinstance(v, cst.BinaryOperation) and isinstance(v.operator, cst.Modulo) \
                and isinstance(v.left, cst.SimpleString):
            conv = _percent_to_braces(str(v.left.evaluated_value))
            if conv is None:
                return None
            fmt, n = conv
            values = [e.value for e in v.right.elements] if isinstance(v.right, cst.Tuple) else [v.right]
            if len(values) != n:
                return None
            parts.append(fmt)
            args.extend(cst.Arg(x) for x in values)
        elif isinstance(v, cst.Call) and isinstance(v.func, cst.Attribute) and v.func.attr.value == "format" \
                and isinstance(v.func.value, cst.SimpleString) and all(x.keyword is None and not x.star for x in v.args):
            fmt = str(v.func.value.evaluated_value)
            fields = re.findall(r"\{[^{}]*\}", fmt.replace("{{", "").replace("}}", ""))
            if not all(re.fullmatch(r"\{(:[^{}]*)?\}", f) for f in fields) or len(fields) != len(v.args):
                return None  # numbered or named fields
            parts.append(fmt)
            args.extend(cst.Arg(x.value) for x in v.args)
        else:
            parts.append("{}")
            args.append(cst.Arg(v))
    fmt_literal = cst.SimpleString(_py_str(sep.join(parts)))
    func = cst.Attribute(cst.Attribute(cst.Name(jax_name), cst.Name("debug")), cst.Name("print"))
    new = call.with_changes(func=func, args=[cst.Arg(fmt_literal)] + [
        a.with_changes(comma=cst.MaybeSentinel.DEFAULT) for a in args])
    return _fix_commas(new), safe


def _py_str(text: str) -> str:
    """A double-quoted Python literal for `text` (repr picks single quotes)."""
    r = repr(text)
    if r.startswith("'") and '"' not in text:
        r = '"' + r[1:-1].replace("\\'", "'") + '"'
    return r


def _fix_commas(call: cst.Call) -> cst.Call:
    args = list(call.args)
    for i in range(len(args) - 1):
        args[i] = args[i].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    if args:
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return call.with_changes(args=args)


# ---- x[i] = v -> x = x.at[i].set(v) ------------------------------------------------------------


def at_update(target: cst.Subscript, method: str, value: cst.BaseExpression) -> cst.Assign:
    name = target.value
    at = cst.Subscript(cst.Attribute(name, cst.Name("at")), target.slice)
    call = cst.Call(cst.Attribute(at, cst.Name(method)), [cst.Arg(value)])
    return cst.Assign([cst.AssignTarget(name)], call)


# ---- jax.jit(...) in a loop -> built once before the loop --------------------------------------


class _ReplaceByCode(cst.CSTTransformer):
    def __init__(self, code: str, replacement: cst.BaseExpression) -> None:
        super().__init__()
        self.code = code
        self.replacement = replacement
        self.done = False

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if not self.done and cst.Module([]).code_for_node(original) == self.code:
            self.done = True
            return self.replacement
        return updated


def hoist_before(loop: cst.CSTNode, call: cst.Call, name: str) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """A rewrite of `loop` that binds `name = <call>` just before it and uses `name` inside."""
    code = cst.Module([]).code_for_node(call)

    def rewrite(updated: cst.CSTNode) -> cst.CSTNode:
        replacer = _ReplaceByCode(code, cst.Name(name))
        new_loop = updated.visit(replacer)
        if not replacer.done:
            return updated
        assign = cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(name))], call)],
                                         leading_lines=getattr(updated, "leading_lines", ()))
        new_loop = new_loop.with_changes(leading_lines=()) if hasattr(new_loop, "leading_lines") else new_loop
        return cst.FlattenSentinel([assign, new_loop])  # type: ignore[return-value]

    return rewrite


# ---- a Python-typed parameter -> static_argnames ------------------------------------------------


def make_static(decorator: cst.Decorator, partial_expr: cst.BaseExpression, names: list[str]) -> cst.Decorator:
    """`@jax.jit` -> `@functools.partial(jax.jit, static_argnames=("n",))`."""
    strings = [cst.Element(cst.SimpleString(_py_str(n))) for n in names]
    value = cst.Tuple(strings) if len(strings) != 1 else cst.Tuple(
        [strings[0].with_changes(comma=cst.Comma())])
    call = cst.Call(partial_expr, [
        cst.Arg(decorator.decorator, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
        cst.Arg(value, keyword=cst.Name("static_argnames"), equal=cst.AssignEqual(
            whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))),
    ])
    return decorator.with_changes(decorator=call)
