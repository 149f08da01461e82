"""What verification records while the user's code runs, and how it words the evidence."""
from __future__ import annotations

import builtins
import json
import os
import sys
import traceback
from typing import Any, Callable, Optional


class TimedOut(BaseException):
    pass


class Captured(BaseException):
    """Raised from the line tracer once a nested definition exists in its enclosing frame."""

    def __init__(self, value: Any, scope: Optional[dict[str, Any]] = None) -> None:
        self.value = value
        self.scope = scope or {}


def on_alarm(signum: int, frame: Any) -> None:
    raise TimedOut()


def one_sentence(text: str, limit: int = 300) -> str:
    """The first sentence of an error message, never cut in the middle of one."""
    text = " ".join(text.strip().split("\n")[0].split())
    if len(text) <= limit:
        return text
    cut = max(text.rfind(". ", 0, limit), text.rfind("; ", 0, limit))
    if cut > 40:
        return text[:cut + 1]
    cut = text.rfind(" ", 0, limit)
    return text[:cut if cut > 40 else limit] + " …"


def error_summary(exc: BaseException, paths: set[str]) -> str:
    """`TypeError at line 12 in `step`: message` — the innermost frame of the user's files."""
    frames = [fr for fr in traceback.extract_tb(exc.__traceback__) if os.path.abspath(fr.filename) in paths]
    where = ""
    if frames:
        fr = frames[-1]
        name = "" if fr.name == "<module>" else f" in `{fr.name}`"
        where = f" at line {fr.lineno}{name}" + (f" of {os.path.basename(fr.filename)}"
                                                   if len(paths) > 1 else "")
    text = one_sentence(str(exc)) if str(exc).strip() else ""
    return f"{type(exc).__name__}{where}" + (f": {text}" if text else "")


class Results:
    def __init__(self, out_path: str, veto: Callable[[], Optional[str]] = lambda: None) -> None:
        self.out_path = out_path
        self.data: dict[str, dict[str, Any]] = {}
        self.veto = veto  # why no refutation may be given now (the run leaned on a stand-in), or None

    def save(self) -> None:
        tmp = self.out_path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.data, f)
        os.replace(tmp, self.out_path)

    def has(self, f: dict[str, Any]) -> bool:
        return str(f["idx"]) in self.data

    def status(self, f: dict[str, Any]) -> tuple[Optional[str], str]:
        """The verdict given so far and its evidence ((None, "") if none)."""
        got = self.data.get(str(f["idx"]), {})
        return got.get("status"), got.get("detail", "")

    def forget(self, findings: list[dict[str, Any]]) -> None:
        """Take back the verdicts of `findings`, to judge them again (after a change that lets them be reached)."""
        for f in findings:
            self.data.pop(str(f["idx"]), None)

    def put(self, f: dict[str, Any], status: str, detail: str, retry: bool = False) -> None:
        if not self.has(f):
            self.rest([f], status, detail, retry)

    def rest(self, findings: list[dict[str, Any]], status: str, detail: str, retry: bool = False) -> None:
        why = self.veto() if status == "refuted" else None
        if why:
            status, detail = "unverified", f"{detail}, but {why}: no refutation"
        for f in findings:
            if not self.has(f):
                self.data[str(f["idx"])] = {"status": status, "detail": detail, **({"retry": True} if retry else {})}
        self.save()


class Observer:
    """Counts the lines of the watched files that run, and the prints they make."""

    def __init__(self, paths: set[str]) -> None:
        self.paths = paths
        self.flagged: set[tuple[str, int]] = set()  # lines whose runs under a JAX trace are counted
        self.tracing: Callable[[], bool] = lambda: False
        self.traced: dict[tuple[str, int], int] = {}
        self.lines: dict[tuple[str, int], int] = {}
        # the first exception raised at each line of the watched files, even one the code catches itself
        # (`try: np.asarray(x) except Exception: warn(...)`: the conversion failed all the same)
        self.raised: dict[tuple[str, int], BaseException] = {}
        self.prints: list[tuple[str, int, tuple]] = []
        self._print = builtins.print

    def _local(self, frame: Any, event: str, arg: Any) -> Optional[Callable]:
        if event == "line":
            key = (frame.f_code.co_filename, frame.f_lineno)
            self.lines[key] = self.lines.get(key, 0) + 1
            if key in self.flagged and self.tracing():
                self.traced[key] = self.traced.get(key, 0) + 1
        elif event == "exception":
            self.raised.setdefault((frame.f_code.co_filename, frame.f_lineno), arg[1])
        return self._local

    def _global(self, frame: Any, event: str, arg: Any) -> Optional[Callable]:
        if frame.f_code.co_filename in self.paths:
            return self._local
        return None

    def _printer(self, *args: Any, **kwargs: Any) -> None:
        frame = sys._getframe(1)
        if frame.f_code.co_filename in self.paths:
            self.prints.append((frame.f_code.co_filename, frame.f_lineno, args))

    def run(self, fn: Callable[[], Any]) -> tuple[Optional[BaseException], dict[tuple[str, int], int], list]:
        """Run `fn`; (its exception or None, line counts, prints)."""
        self.lines = {}
        self.traced = {}
        self.raised = {}
        self.prints = []
        builtins.print = self._printer
        sys.settrace(self._global)
        try:
            fn()
            exc = None
        except (TimedOut, Captured):
            raise
        except BaseException as e:  # the user's code failed (SystemExit included): that is the evidence
            exc = e
        finally:
            sys.settrace(None)
            builtins.print = self._print
        return exc, dict(self.lines), list(self.prints)


class UnavailableName(RuntimeError):
    """The code used a name whose import or definition failed while the module loaded."""


class Unavailable:
    """Stands in for a name whose import or definition failed, so the rest of the module still loads."""

    def __init__(self, name: str, reason: str) -> None:
        self._name = name
        self._reason = reason

    def _fail(self, *args: Any, **kwargs: Any) -> Any:
        raise UnavailableName(self._text())

    def _text(self) -> str:
        return f"`{self._name}` is unavailable, its import or definition failed: {self._reason}"

    __call__ = _fail

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        self._fail()

    def __mro_entries__(self, bases: tuple) -> tuple:
        self._fail()
        return ()


class Unbuilt(Unavailable):
    """Stands in for an attribute of an instance that verification could not build (`self.model` whose
    methods the method calls): any use fails, saying why."""

    def _text(self) -> str:
        return f"`{self._name}` could not be built: {self._reason}"


# Any use of a stand-in (arithmetic with an array, indexing, iteration, truth) names the failure.
for _op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or", "xor", "lshift",
            "rshift"):
    setattr(Unavailable, f"__{_op}__", Unavailable._fail)
    setattr(Unavailable, f"__r{_op}__", Unavailable._fail)
for _op in ("getitem", "setitem", "iter", "len", "bool", "neg", "pos", "abs", "float", "int", "index", "array",
            "jax_array", "enter", "lt", "le", "gt", "ge"):
    setattr(Unavailable, f"__{_op}__", Unavailable._fail)
