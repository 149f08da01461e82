"""What a file's model learns from the project's other files: the classes it imports from them.

A subclass of a pytree class defined in another file is a pytree too (`class SACLearner(Agent)` with
`Agent(struct.PyTreeNode)` in `agents/agent.py`), and `cache.time_axis` reads a static field when the
project declares `time_axis` a static field of a registered pytree. A file's own pass cannot see
either. After the project-wide pass, each file that has findings of the traced-code model is analysed
once more with what the project modules it imports say about their classes.
"""
from __future__ import annotations

import ast
import collections
import dataclasses
import functools
import os
import re
from typing import Any, Callable, Iterable, Iterator, Optional, Union

import libcst as cst

from .jaxapi import library_api
from .semantic import ClassFacts, ModuleModel, ProjectClasses, may_test_for_a_trace, trace_testing_defs
from .semantic.keys import ConsumedParam, KeyTable
from .syntax import children, parse_shared

# Text that declares a static pytree field somewhere in a file (a cheap filter before modelling it).
_STATIC_MARKERS = (b"pytree_node=False", b"static=True", b"static_field", b".static(", b"meta_fields", b"register_static",
                   b"\"static\": True", b"'static': True", b"Static[", b"aux_fields", b"static_fields", b"ClassVar",
                   b"nnx", b"treex", b"treeo",  # an nnx (or treex) Module's Python settings are static pytree metadata
                   b"register_pytree_node(")  # flatten functions, whose aux data is static

# What the project knows of a module's key-consuming functions: a table asked one function at a time, or
# nothing (`{}`: the module cannot be read, or is being read through an import cycle).
Keys = Union[KeyTable, dict[str, tuple[ConsumedParam, ...]]]

# What a helper making fields whose leafness its argument sets contains (see ModuleModel.field_switch):
# `kw["pytree_node"] = jaxed`, or `pytree_node=` given a name (not `pytree_node=False`).
_SWITCH_MARKER = re.compile(rb"\[[\"'](?:pytree_node|static)[\"']\]|\bpytree_node\s*=\s*(?!True\b|False\b)[A-Za-z_]")

# The tables of `ProjectIndex.functions` that a module's text alone decides (see ProjectIndex._syntactic).
_SYNTACTIC_KINDS = frozenset({"registers", "host", "plain"})

# Rules whose findings depend on which values the model takes for traced.
_UNAFFECTED = {"prng-key-reuse", "syntax-error", "unsupported-syntax", "invalid-suppression",
               "unused-suppression"}


class ProjectIndex:
    """The project's modules by dotted name, with the class facts of each, read on first use."""

    def __init__(self, files: list[str], module_name: Callable[[str], str]) -> None:
        self._module_name = module_name
        self.given = {module_name(p): p for p in files if p.endswith(".py")}  # the files the run was given
        self.by_module: dict[str, Optional[str]] = dict(self.given)
        # The folders the files' top-level modules sit in: a module no given file is (pre-commit and
        # the editor pass one file; its base classes live beside it) is looked for there.
        self._roots: list[str] = []
        for p in files:
            if not p.endswith(".py"):
                continue
            mod = module_name(p)
            root = os.path.dirname(os.path.abspath(p))
            for _ in range(mod.count(".") + (os.path.basename(p) == "__init__.py")):
                root = os.path.dirname(root)
            if root not in self._roots:
                self._roots.append(root)
        self._facts: dict[str, dict[str, ClassFacts]] = {}
        self._static_fns: dict[str, frozenset[str]] = {}  # per file: functions returning only Python values
        self._container_fns: dict[str, frozenset[str]] = {}  # per file: functions annotated `-> list` and the like
        self._imports: dict[str, dict[str, str]] = {}  # per file: module-level imported name -> absolute name
        self._guard_defs: dict[str, dict[str, str]] = {}  # per file: functions testing for a trace, what they test
        self._keys_alone: dict[str, Keys] = {}  # see _key_consumers
        self._register_fns: dict[str, frozenset[str]] = {}  # per file: functions registering a class as a pytree
        self._plain_fns: dict[str, frozenset[str]] = {}  # per file: module-level defs (not classes)
        self._host_fns: dict[str, frozenset[str]] = {}  # per file: decorators running their function in a callback
        self._field_fns: dict[str, frozenset[str]] = {}  # per file: functions returning a static field declaration
        self._numpy_aliases: dict[str, frozenset[str]] = {}  # per file: type aliases that admit a NumPy array
        self._element_fns: dict[str, dict[str, tuple[bool, ...]]] = {}  # per file: tuple returns, static elements
        self._python_params: dict[str, dict[str, tuple[tuple[str, Optional[int]], ...]]] = {}  # per file: parameters declared Python values
        self._switch_fns: dict[str, dict[str, tuple[str, Optional[int], bool, bool]]] = {}  # per file: see ModuleModel.field_switch
        self._key_fns: dict[str, Keys] = {}  # per file: key-consuming functions (see _module_keys)
        self._keys_wanted: set[str] = set()  # files whose key-consuming functions were asked (see _module_keys)
        self._int_consts: dict[str, dict[str, int]] = {}  # per file: module-level names bound once to an integer
        # Files that parse but whose summaries could not be computed, with the fault: each such file tells
        # the others nothing (its classes, static helpers, key-consuming functions), so tests watch this.
        self.faults: dict[str, str] = {}
        self._reading: list[str] = []  # files being read (an import cycle meets one of them again)
        # Files read while a file they import was still being read (or was read so): in order of reading.
        self._partial: dict[str, None] = {}
        self._static: Optional[frozenset[str]] = None
        self._packages: dict[str, bool] = {}
        self._static_answers: dict[str, bool] = {}  # name -> in `static_names`, asked one name at a time
        self._declaring: Optional[list[tuple[str, str, bytes]]] = None
        self._declared_names: dict[str, frozenset[str]] = {}  # per declaring file: see `_declared`
        self._texts: Optional[dict[str, bytes]] = None  # the given files' bytes, read on first `mentions`
        self._real: Optional[dict[str, str]] = None  # the given files' real paths (see `_others`)
        self._static_methods: dict[str, bool] = {}  # method name -> every project method of that name is static
        self._static_properties: dict[str, bool] = {}  # property name -> each is static, none is stored
        self._defs: Optional[dict[str, tuple[list[str], int]]] = None  # def name -> (files of its defs, property defs)
        self._indented_defs: dict[str, set[str]] = {}  # def name -> the files where one is indented (see `_def_index`)
        self._method_answers: dict[tuple[str, str], Optional[bool]] = {}
        self._plain_models: dict[str, Optional[ModuleModel]] = {}  # files searched for a method, modelled alone
        self._syntactic_tables: dict[str, dict[str, Any]] = {}  # per file: see _syntactic
        self._import_words: Optional[dict[str, set[bytes]]] = None  # per given file: the words of its imports

    @property
    def modelled(self) -> list[str]:
        """The files modelled so far (in order): what the project's answers have cost."""
        return list(self._facts)

    @property
    def modelled_for_keys(self) -> list[str]:
        """The files modelled only for their key-consuming functions (see `for_file` with `keys_only`)."""
        return list(self._keys_alone)

    def defines(self, qualname: str, path: str) -> bool:
        """Whether a function a file names (`.noise.sample`, `pkg.utils.draw`, as its imports resolve it)
        lives in a project file other than that one."""
        me = self._module_name(path)
        full = absolute(qualname, me, os.path.basename(path) == "__init__.py")
        module = full.rpartition(".")[0]
        found = self.path_of(module) or self.path_of(module.rpartition(".")[0])  # a function, or `Class.method`
        return found is not None and os.path.abspath(found) != os.path.abspath(path)

    def path_of(self, module: str) -> Optional[str]:
        """The project file of a module: a given file, else a module file under the files' roots."""
        if module in self.by_module:
            return self.by_module[module]
        path = None
        if module:
            head = module.split(".")[0]
            # a root named like the module's first part may be a portion of a namespace package
            # (`src/galax/` without `__init__.py` holding the package `potential`): `galax.potential...`
            # is found from the folder above it
            for root in self._roots + [os.path.dirname(r) for r in self._roots if os.path.basename(r) == head]:
                base = os.path.join(root, *module.split("."))
                path = next((c for c in (base + ".py", os.path.join(base, "__init__.py")) if os.path.isfile(c)), None)
                if path is not None:
                    break
        self.by_module[module] = path  # None: looked for, not there
        return path

    def classes(self, module: str) -> dict[str, ClassFacts]:
        path = self.path_of(module)
        if path is None:
            return {}
        if self._reading and (path in self._reading or path in self._partial):
            # an import cycle: the reader sees no (or unfinished) classes yet, and is read again later
            self._partial[self._reading[-1]] = None
        self._read(path)
        return self._facts[path]

    def origin(self, qualname: str, depth: int = 0) -> str:
        """Where a module's name really lives: `pkg.orbits.Orbit`, when `pkg/orbits/__init__.py` imports
        `Orbit` from `pkg.orbits.transit`, is `pkg.orbits.transit.Orbit` (followed through re-exports)."""
        module, _, name = qualname.rpartition(".")
        path = self.path_of(module) if module else None
        if path is None or depth > 4:
            return qualname
        target = self._import_map(path).get(name)
        if target is None or target == qualname or target.rpartition(".")[0] == module:
            return qualname
        return self.origin(target, depth + 1)

    def functions(self, module: str, kind: str) -> frozenset[str]:
        """A module's functions that return only Python values (`kind` "static"), are annotated to
        return a container ("container"), register the
        class they are given as a pytree ("registers"), are module-level defs at all ("plain"), decorate a
        function to run it in a host callback
        ("host"), or return a static field declaration ("field"); or its type aliases admitting a NumPy
        array ("numpy_alias")."""
        path = self.path_of(module)
        if path is None:
            return frozenset()
        if kind in _SYNTACTIC_KINDS:
            return self._syntactic(path)[kind]
        self._read(path)
        return {"static": self._static_fns, "container": self._container_fns,
                "registers": self._register_fns, "plain": self._plain_fns, "host": self._host_fns, "field": self._field_fns,
                "numpy_alias": self._numpy_aliases}[kind][path]

    def _read(self, path: str) -> None:
        """A module's classes, knowing the classes of the modules it imports in turn (`C(B)`, `B(A)`),
        and its functions that return only Python values."""
        if path in self._facts:
            return
        self._facts[path] = {}  # while it is read: an import cycle sees no classes
        self._static_fns[path] = frozenset()
        self._container_fns[path] = frozenset()
        self._register_fns[path] = frozenset()
        self._plain_fns[path] = frozenset()
        self._host_fns[path] = frozenset()
        self._field_fns[path] = frozenset()
        self._numpy_aliases[path] = frozenset()
        self._element_fns[path] = {}
        self._python_params[path] = {}
        self._switch_fns[path] = {}
        if path in self._keys_wanted:
            self._key_fns[path] = {}
        self._int_consts[path] = {}
        self._reading.append(path)
        try:
            self._model(path)
        finally:
            self._reading.pop()
        # Files read inside an import cycle saw an unfinished file: read them again now that the whole
        # cycle is known (`GARepertoire(Repertoire)` read while `repertoire.py` was still being read).
        # A round that changes no file's facts has reached the fixed point: reading the same files again
        # would see the same facts (a module whose class facts ask whether an attribute it declares itself
        # is static reads itself among the declaring files, and marks itself unfinished on every read).
        for _ in range(3):
            if self._reading or not self._partial:
                break
            again, self._partial = list(self._partial), {}
            changed = False
            for p in again:
                before = self._tables(p)
                self._reading.append(p)
                try:
                    self._model(p)
                finally:
                    self._reading.pop()
                changed = changed or self._tables(p) != before
            if not changed:
                self._partial = {}

    def _tables(self, path: str) -> tuple:
        """Everything a read of the file at `path` tells the project (to see whether a read changed it)."""
        return (self._facts.get(path), *(table.get(path) for table in (
            self._static_fns, self._container_fns, self._register_fns, self._plain_fns,
            self._host_fns, self._field_fns, self._numpy_aliases, self._element_fns, self._python_params,
            self._switch_fns, self._int_consts)), self.faults.get(path))

    def _model(self, path: str) -> None:
        """The tables of the module at `path` filled from its model, made knowing the project."""
        try:
            with open(path, "rb") as f:
                source = f.read()
            model = ModuleModel(parse_shared(source), path, project=self.for_file(path, source), trace=False, source=source)
            me, is_pkg = self._module_name(path), os.path.basename(path) == "__init__.py"
            self._facts[path] = {name: _absolute_methods(facts, me, is_pkg) for name, facts in model.class_facts().items()}
            self._static_fns[path] = model.static_returning()
            self._container_fns[path] = model.container_returning()
            self._register_fns[path] = model.registering()
            self._plain_fns[path] = model.plain_functions()
            self._host_fns[path] = model.host_decorators()
            self._field_fns[path] = model.static_field_makers()
            self._numpy_aliases[path] = model.numpy_aliases()
            self._element_fns[path] = model.static_elements()
            self._python_params[path] = model.python_parameters()
            self._switch_fns[path] = model.field_switches()
            if path in self._keys_wanted:
                self._key_fns[path] = KeyTable(model, self._fault_of(path))
            self._int_consts[path] = model.int_constants()
            model.dispose()  # (its tables are read: freed now rather than by the cyclic collector)
        except (OSError, UnicodeError, cst.ParserSyntaxError):
            pass  # a file that cannot be read or parsed tells nothing
        except Exception as exc:  # noqa: BLE001 - nor does one the model cannot summarise
            self._fault_of(path)(exc)

    def _key_table(self, path: str, keys_only: bool) -> "Keys":
        """The `KeyTable` of the module at `path`, modelled knowing the project (with `keys_only`, knowing
        only the same of the modules it imports); `{}` for a file that cannot be read or modelled."""
        try:
            with open(path, "rb") as f:
                source = f.read()
            model = ModuleModel(parse_shared(source), path, project=self.for_file(path, source, keys_only=keys_only),
                                trace=False)
            table = KeyTable(model, self._fault_of(path))
            model.dispose()
            return table
        except (OSError, UnicodeError, cst.ParserSyntaxError):
            return {}
        except Exception as exc:  # noqa: BLE001 - nor does one the model cannot summarise
            self._fault_of(path)(exc)
            return {}

    def _fault_of(self, path: str) -> Callable[[Exception], None]:
        """What records a fault of the file at `path` met after its model is gone (see `faults`)."""
        return lambda exc: self.faults.__setitem__(path, f"{type(exc).__name__}: {exc}")

    def _module_keys(self, path: str) -> "Keys":
        """A module's functions that consume a key parameter (a `KeyTable`), the module modelled with
        the project like its other tables, but only once some file asks: finding them asks the same of
        every module its functions hand a parameter to, so a module read only for its classes would
        otherwise model, through its calls, much of the project."""
        if path not in self._keys_wanted:
            self._keys_wanted.add(path)
            if path not in self._facts:
                self._read(path)  # (its keys with its other tables)
            elif path not in self._reading:  # (while it is read, `_model` finds them once the model is built)
                self._key_fns[path] = {}  # while they are found: an import cycle back to it sees none
                self._reading.append(path)
                try:
                    self._key_fns[path] = self._key_table(path, keys_only=False)
                finally:
                    self._reading.pop()
        return self._key_fns.get(path, {})

    def _trace_tests(self, path: str) -> dict[str, str]:
        """A module's functions that only test for a trace (see `ModuleModel.tracer_testing`): read off its
        top-level defs, without modelling it (nor, through it, the modules it imports)."""
        known = self._guard_defs.get(path)
        if known is None:
            try:
                with open(path, "rb") as f:
                    text = f.read()
                known = trace_testing_defs(parse_shared(text)) if may_test_for_a_trace(text) else {}
            except Exception:  # noqa: BLE001 - a file that cannot be read or parsed tells nothing
                known = {}
            self._guard_defs[path] = known
        return known

    def _import_map(self, path: str) -> dict[str, str]:
        """A module's module-level imported names -> absolute names (a name imported twice differently
        is left out), read without modelling the module: a package's `__init__.py` that re-exports a
        class is only followed, never modelled."""
        known = self._imports.get(path)
        if known is None:
            try:
                with open(path, "rb") as f:
                    tree = import_tree(f.read(), module_level=True)
            except OSError:
                tree = None
            me, is_pkg = self._module_name(path), os.path.basename(path) == "__init__.py"
            known = self._imports[path] = {local: absolute(qual, me, is_pkg)
                                           for local, qual in module_imports(tree).items()} if tree else {}
        return known

    def _given_texts(self) -> dict[str, bytes]:
        """The given files' bytes, read once."""
        if self._texts is None:
            self._texts = {}
            for path in self.given.values():
                try:
                    with open(path, "rb") as f:
                        self._texts[path] = f.read()
                except OSError:
                    continue
        return self._texts

    def _others(self, besides: str, name: str) -> Iterator[tuple[str, bytes]]:
        """The given files other than the one at `besides` whose text holds `name` at all (what each search
        of a name below needs first): path, text."""
        if self._real is None:
            self._real = {path: os.path.realpath(path) for path in self._given_texts()}
        here = os.path.realpath(besides)
        raw = name.encode()
        for path, text in self._given_texts().items():
            if raw in text and self._real[path] != here:
                yield path, text

    def package_imported(self, package: str) -> bool:
        """Whether a given file imports this top-level package (`import genjax`, `from genjax import Pytree`)."""
        known = self._packages.get(package)
        if known is None:
            statement = re.compile(rb"^[ \t]*(?:import|from)[ \t]+" + re.escape(package.encode()) + rb"\b", re.M)
            known = self._packages[package] = any(statement.search(raw) for raw in self._given_texts().values())
        return known

    def mentions(self, name: str, besides: str, importing: bool = False, called: bool = True) -> bool:
        """Whether a given file other than `besides` calls something named `name` (a setter called from a
        script): a cheap search of `name(`, not a resolution. With `importing`, only a file that also names
        the module of `besides` (`from .driver import solve`) counts; without `called`, any mention of the
        name but a binding of its own (`steps = (solve_jit, other)`, not `solve_jit = ...`) counts."""
        memo = self.__dict__.setdefault("_mention_answers", {})
        key = (name, besides, importing, called)
        if key not in memo:
            memo[key] = self._search_mentions(name, besides, importing, called)
        return memo[key]

    def _search_mentions(self, name: str, besides: str, importing: bool, called: bool) -> bool:
        # (not in a comment: `# encode(batch)` is a call someone took out)
        tail = rb"\s*\(" if called else rb"\b(?!\s*=[^=])"
        word = _mention(name, tail)
        here = os.path.realpath(besides)
        stem = os.path.splitext(os.path.basename(here))[0]
        if stem == "__init__":
            stem = os.path.basename(os.path.dirname(here))
        module = re.compile(rb"\b" + re.escape(stem.encode()) + rb"\b")
        # A file with a module-level def, class or binding of its own under that name, which it does not
        # import, means its own by the bare name: only `mod.name` there can be this file's.
        escaped = re.escape(name.encode())
        own = re.compile(rb"^(?:(?:async[ \t]+)?def|class)[ \t]+" + escaped + rb"\b|^" + escaped + rb"[ \t]*=(?!=)", re.M)
        imported = re.compile(rb"^[ \t]*(?:from|import)[ \t][^\n]*\b" + escaped + rb"\b", re.M)
        dotted_word = re.compile(rb"^[^#\n]*\." + escaped + tail, re.M)

        def names_it(text: bytes) -> bool:
            if own.search(text) and not imported.search(text):
                return bool(dotted_word.search(text))
            return bool(word.search(text))

        return any(names_it(text) and (not importing or module.search(text)) for _p, text in self._others(besides, name))

    def calls_in_loops(self, name: str, besides: str) -> list[bool]:
        """For each call of something named `name` in a given file other than `besides` (a cheap search of
        `name(` as `mentions` makes, not a resolution), whether the call sits in the body of a `for` or
        `while` of that file: a statement indented under one."""
        memo = self.__dict__.setdefault("_loop_call_answers", {})
        key = (name, besides)
        if key not in memo:
            word = _mention(name, rb"\s*\(")
            found: list[bool] = []
            for _p, text in self._others(besides, name):
                found.extend(_under_loop(text, m.start()) for m in word.finditer(text))
            memo[key] = found
        return memo[key]

    def reads_attribute(self, name: str, besides: str) -> bool:
        """Whether a given file other than `besides` mentions an attribute of that name on something other
        than its own `self` (`obj.pe`): a cheap search of `.name`, not a resolution."""
        word = re.compile(rb"(?<!\bself)\." + re.escape(name.encode()) + rb"\b")
        return any(word.search(text) for _p, text in self._others(besides, name))

    def sets_global(self, name: str, besides: str) -> bool:
        """Whether a given file other than `besides` may set a module global of that name from outside
        (`solver.DEBUG = True`, `monkeypatch.setattr(solver, "DEBUG", True)`): a cheap search, not a
        resolution."""
        name_b = re.escape(name.encode())
        word = re.compile(rb"\." + name_b + rb"[ \t]*=(?!=)|setattr\([^()\n]*[\"']" + name_b + rb"[\"']")
        return any(word.search(text) for _p, text in self._others(besides, name))

    def static_method(self, name: str) -> bool:
        """Whether the project's given files define methods named `name` and every one of them returns only
        Python values (files found by a search for `def name(`, modelled once each; more than 12 such
        files are not searched)."""
        known = self._static_methods.get(name)
        if known is None:
            paths = list(dict.fromkeys(self._def_index().get(name, ([], 0))[0]))  # (each file once)
            known = False
            if len(paths) <= 12:
                # (a file whose every def of that name starts a line is modelled for nothing: a method's def
                # is indented in its class body; the first method that may return an array settles it)
                indented = self._indented_defs.get(name, set())
                for p in (p for p in paths if p in indented):
                    answer = self._method_static(p, name)
                    if answer is False:
                        known = False
                        break
                    known = known or bool(answer)
            self._static_methods[name] = known
        return known

    def _def_index(self) -> dict[str, tuple[list[str], int]]:
        """def name -> (the given file of each def of that name, how many are right under `@property`),
        from one pass over the files' text; and, in `_indented_defs`, the files where a def of that name
        is indented (in a class body, or a function's)."""
        if self._defs is None:
            self._defs = {}
            for path, text in self._given_texts().items():
                for m in _DEF_HEAD.finditer(text):
                    name = m.group(1).decode()
                    start = m.start()
                    at = text.rfind(b"@", max(0, start - 64), start)  # (a property decorator right above)
                    prop = at >= 0 and _PROPERTY_ABOVE.match(text, at, start) is not None
                    paths, props = self._defs.setdefault(name, ([], 0))
                    paths.append(path)
                    self._defs[name] = (paths, props + prop)
                    line = text.rfind(b"\n", 0, start) + 1
                    if text[line:line + 1] in (b" ", b"\t"):
                        self._indented_defs.setdefault(name, set()).add(path)
        return self._defs

    def static_property(self, name: str) -> bool:
        """Whether every def named `name` in the project's given files is a property returning only Python
        values (as `static_method`) and no given file stores an attribute of that name: no field annotation
        `name: T` in a class body, no `obj.name = ...` (a cheap search of the text). A field of a class that
        is no pytree (a plain dataclass standing in for the real one in a test) stores nothing JAX traces:
        such an object is never a traced argument, its fields hold what it was built with."""
        known = self._static_properties.get(name)
        if known is None:
            paths, props = self._def_index().get(name, ([], 0))
            known = False
            if paths and len(paths) == props:
                word = re.escape(name.encode())
                declared = re.compile(_field_annotation(word), re.M)
                assigned = re.compile(rb"\." + word + rb"[ \t]*=(?!=)")
                # (the defs first: each is modelled alone, where a file declaring the name is modelled
                # knowing its imports, and through them much of the project)
                known = self.static_method(name) and not any(
                    assigned.search(t) or declared.search(t) and not self._plain_fields(p, name)
                    for p, t in self._given_texts().items())
            self._static_properties[name] = known
        return known

    def _plain_fields(self, path: str, name: str) -> bool:
        """Whether the module-level classes of a file declaring a field of this name are all plain classes,
        no pytree and no model module."""
        owners = [f for f in self.classes(self._module_name(path)).values() if name in f.fields]
        return bool(owners) and all(not f.pytree and f.module_kind is None for f in owners)

    def _imported_elsewhere(self, module: str, path: str) -> bool:
        """Whether a given file other than `path` may import from `module` (an import line naming its last
        part: a cheap search, not a resolution): its classes may have subclasses there."""
        if self._import_words is None:  # the words of each given file's import lines, read once
            line = re.compile(rb"^[ \t]*(?:from|import)[ \t][^\n]*", re.M)
            self._import_words = {os.path.realpath(p): {w for m in line.finditer(text) for w in re.findall(rb"\w+", m.group())}
                                  for p, text in self._given_texts().items()}
        word = module.rpartition(".")[2].encode()
        here = os.path.realpath(path)
        return any(word in words for p, words in self._import_words.items() if p != here)

    def subclasses(self, qualname: str, besides: str) -> list[ClassFacts]:
        """The classes of the given files other than `besides` that derive from the class `qualname`
        (files found by a search for a class header naming it; more than 30 such files are not read)."""
        name = qualname.rpartition(".")[2]
        header = re.compile(rb"^\s*class\s+\w+\s*\([^)]*\b" + re.escape(name.encode()) + rb"\b", re.M)
        paths = [p for p, text in self._others(besides, name) if header.search(text)]
        if len(paths) > 30:
            return []
        target = self.origin(qualname)
        out: list[ClassFacts] = []
        for path in paths:
            for facts in self.classes(self._module_name(path)).values():
                if any(self.origin(b) == target for b in facts.bases):
                    out.append(facts)
        return out

    def _syntactic(self, path: str) -> dict[str, Any]:
        """The tables of a module that its own text decides (see `_SYNTACTIC_KINDS`; "switches": its
        `field_switches`): the calls a def makes and what its body returns, resolved through the module's
        imports. Read off the module alone, not modelling the modules it imports for the other tables (a
        registering helper's module would otherwise be modelled whole, and the modules it imports, for every
        call handing `self` to a function in a class's `__init__`)."""
        known = self._syntactic_tables.get(path)
        if known is None:
            kept = path in self._plain_models
            model = self._plain_model(path) if kept else self._model_alone(path)
            known = {"registers": frozenset(), "host": frozenset(), "plain": frozenset(), "switches": {}}
            if model is not None:
                try:
                    known = {"registers": model.registering(), "host": model.host_decorators(),
                             "plain": model.plain_functions(), "switches": model.field_switches()}
                except Exception:  # noqa: BLE001 - a file the model cannot summarise tells nothing
                    pass
                if not kept:
                    model.dispose()  # (only `_method_static` keeps the models it asks)
            self._syntactic_tables[path] = known
        return known

    def _plain_model(self, path: str) -> Optional[ModuleModel]:
        """`_model_alone`, made once and kept."""
        if path not in self._plain_models:
            self._plain_models[path] = self._model_alone(path)
        return self._plain_models[path]

    @staticmethod
    def _model_alone(path: str) -> Optional[ModuleModel]:
        """The file's model made alone (no project: the modules it imports are not modelled); None for a file
        that cannot be read or modelled."""
        try:
            with open(path, "rb") as f:
                return ModuleModel(parse_shared(f.read()), path, trace=False)
        except Exception:  # noqa: BLE001 - a file that cannot be modelled tells nothing
            return None

    def _method_static(self, path: str, name: str) -> Optional[bool]:
        key = (path, name)
        if key not in self._method_answers:
            model = self._plain_model(path)
            try:
                self._method_answers[key] = model.method_returns_static(name) if model is not None else False
            except Exception:  # noqa: BLE001
                self._method_answers[key] = False
        return self._method_answers[key]

    def _declaring_files(self) -> list[tuple[str, str, bytes]]:
        """The given files that may declare static pytree fields (module, path, text): a cheap search for
        the ways to declare one, the project's own field helpers (`field(10, jaxed=False)`) among them."""
        if self._declaring is None:
            # The given files only: modules found beside them (path_of) join by_module while this runs.
            texts = self._given_texts()
            markers = list(_STATIC_MARKERS)
            for path, raw in texts.items():
                if _SWITCH_MARKER.search(raw):
                    switches = self._syntactic(path)["switches"]  # (read off the helper's own body)
                    markers += [f"{name}={want}".encode() for name, _i, want, _d in switches.values()]
            self._declaring = [(mod, path, texts[path]) for mod, path in list(self.given.items())
                               if path in texts and any(marker in texts[path] for marker in markers)]
        return self._declaring

    def _declares(self, files: Iterable[tuple[str, str, bytes]]) -> tuple[set[str], set[str]]:
        """The names the classes of these files declare static, and those they declare leaves."""
        static: set[str] = set()
        data: set[str] = set()
        for mod, _path, _raw in files:
            for facts in self.classes(mod).values():
                # a plain class's static names are its `ClassVar`s: class attributes, on every instance
                static |= facts.static_fields | facts.python_attributes
                if facts.module_kind != "linen":  # a linen Module's attributes are settings, never leaves
                    data |= facts.fields - facts.static_fields - facts.python_attributes
        return static, data

    def static_names(self) -> frozenset[str]:
        """Names that some pytree class of the project declares static and none declares a leaf (`cache.
        time_axis` on an object passed around as `Any`). Only files that declare static fields are read."""
        if self._static is None:
            files = self._declaring_files()
            static, data = self._declares(files)
            found = frozenset(static - data)
            if self._unfinished(files):
                return found  # asked while one of them is read: its classes are not known yet, ask again later
            self._static = found
        return self._static

    def _unfinished(self, files: list[tuple[str, str, bytes]]) -> bool:
        """Whether one of these files is being read (its classes seen empty by the question being answered)."""
        return bool(self._reading) and any(path in self._reading for _mod, path, _raw in files)

    def static_name(self, name: str) -> bool:
        """Whether `name` is one of `static_names`, reading only the declaring files that name it."""
        if self._static is not None:
            return name in self._static
        known = self._static_answers.get(name)
        if known is None:
            files = [f for f in self._declaring_files() if name in self._declared_in(f[1], f[2])]
            # The answer does not depend on the order the files are read in (a leaf anywhere makes it False,
            # else a static field anywhere True), but the cost does: files that plainly declare the name a
            # field come first, since one declaring it a leaf ends the search before the files that only may
            # (a parameter `name: bool = False,`, an attribute read in a flatten file) are modelled.
            plain = _plain_declaration(name)
            files.sort(key=lambda f: plain.search(f[2]) is None)
            read: list[tuple[str, str, bytes]] = []
            known = False
            for f in files:  # (a file declaring it a leaf settles the answer: the rest are not modelled)
                read.append(f)
                static, data = self._declares([f])
                if name in data:
                    known = False
                    break
                known = known or name in static
            if not self._unfinished(read):
                self._static_answers[name] = known
        return known

    def _declared_in(self, path: str, text: bytes) -> frozenset[str]:
        """`_declared` of a declaring file, scanned once."""
        known = self._declared_names.get(path)
        if known is None:
            known = self._declared_names[path] = _declared(text)
        return known

    def _any_static_name(self) -> bool:
        """Whether `static_names` holds any name: each declaring file read in turn, the static names it
        declares are asked of `static_name` (which reads only the files naming each), and the first one
        confirmed settles it, without reading every declaring file of the project for every name."""
        if self._static is not None:
            return bool(self._static)
        tried: set[str] = set()
        for f in self._declaring_files():
            static, _data = self._declares([f])
            for name in sorted(static - tried):
                tried.add(name)
                if self.static_name(name):
                    return True
        return bool(self.static_names())  # (every declaring file is read by now: nothing more to model)

    def for_file(self, path: str, source: bytes, asking: Iterable[str] = (), keys_only: bool = False
                 ) -> Optional[ProjectClasses]:
        """The project's classes and functions as the file at `path` sees them: None when there is nothing
        to tell, unless the file has findings of rules (`asking`, rule names) that want to know that
        too (that no other file calls its functions, that its bases are no project classes). With
        `keys_only` (see `project_needs`), only which parameters the imported functions consume as PRNG
        keys: what a file whose findings the traced-code model does not decide asks, found without
        modelling the modules the answers' modules import for their classes."""
        me = self._module_name(path)
        is_pkg = os.path.basename(path) == "__init__.py"
        imported = [m for m in _imported_modules(source, me, is_pkg) if m != me and self.path_of(m)]
        if keys_only:
            return self._keys_for(me, is_pkg, imported) if imported else None
        if not imported and not _ISOLATION_RULES.intersection(asking) and not self._imported_elsewhere(me, path) \
                and not self._any_static_name():
            return None
        @functools.lru_cache(maxsize=None)
        def imported_static() -> frozenset[str]:  # the imported modules' pytree classes' static names
            return frozenset(n for mod in imported for facts in self.classes(mod).values() if facts.pytree
                             for n in facts.static_fields | facts.python_attributes)

        def static_name(name: str) -> bool:
            return self.static_name(name) or name in imported_static()  # (read on the first question)

        def lookup(qualname: str) -> Optional[ClassFacts]:
            full = absolute(qualname, me, is_pkg)
            if full.rpartition(".")[0] == me or library_api(full):
                return None
            mod, _, name = self.origin(full).rpartition(".")
            return self.classes(mod).get(name) if mod != me else None

        def summary(table: dict[str, dict]) -> Callable[[str], Any]:
            def read(path: str) -> dict:  # the module modelled, with its summaries
                self._read(path)
                return table.get(path, {})
            return summary_of(read)

        def summary_of(read: Callable[[str], dict]) -> Callable[[str], Any]:
            """A question about a function of an imported project module, answered from what `read` gives
            for the module's file."""
            def ask(qualname: str) -> Any:
                full = absolute(qualname, me, is_pkg)
                if full.rpartition(".")[0] not in imported or library_api(full):
                    return None
                mod, _, name = self.origin(full).rpartition(".")
                path = self.path_of(mod) if mod != me else None
                if path is None:
                    return None
                return read(path).get(name)
            return ask

        def returns(kind: str) -> Callable[[str], bool]:
            def ask(qualname: str) -> bool:
                full = absolute(qualname, me, is_pkg)
                if library_api(full):
                    return False
                if full.rpartition(".")[0] not in imported:
                    # `Irrep.l` of `from .irrep import Irrep`: a static method of an imported class
                    owner, _, method = full.rpartition(".")
                    if kind != "static" or owner.rpartition(".")[0] not in imported:
                        return False
                    mod, _, cls = self.origin(owner).rpartition(".")
                    return mod != me and f"{cls}.{method}" in self.functions(mod, kind)
                mod, _, name = self.origin(full).rpartition(".")
                return mod != me and name in self.functions(mod, kind)
            return ask

        return ProjectClasses(lookup, static_name, static_return=returns("static"),
                              container_return=returns("container"),
                              registers=returns("registers"), mentioned_elsewhere=lambda name: self.mentions(name, path),
                              called_by_importer=lambda name: self.mentions(name, path, importing=True),
                              named_elsewhere=lambda name: self.mentions(name, path, called=False),
                              set_elsewhere=lambda name: self.sets_global(name, path),
                              loop_calls_elsewhere=lambda name: self.calls_in_loops(name, path),
                              attribute_elsewhere=lambda name: self.reads_attribute(name, path),
                              static_method=self.static_method, host_decorator=returns("host"),
                              defined_elsewhere=lambda name: any(
                                  os.path.abspath(q) != os.path.abspath(path) for q in self._def_index().get(name, ([], 0))[0]),
                              static_elements=summary(self._element_fns), guard_helper=summary_of(self._trace_tests),
                              python_params=summary(self._python_params), key_params=summary_of(self._module_keys),
                              subclasses=lambda name: self.subclasses(f"{me}.{name}", path),
                              static_field_maker=returns("field"), static_property=self.static_property,
                              field_switch=summary(self._switch_fns),
                              numpy_alias=returns("numpy_alias"), int_constant=summary(self._int_consts),
                              plain_function=returns("plain"),
                              package_imported=self.package_imported)

    def _keys_for(self, me: str, is_pkg: bool, imported: list[str]) -> ProjectClasses:
        """`for_file` with `keys_only`: the key-consuming parameters of the functions a module imports."""
        def key_params(qualname: str) -> Optional[tuple[ConsumedParam, ...]]:
            full = absolute(qualname, me, is_pkg)
            if full.rpartition(".")[0] not in imported:
                return None
            mod, _, name = self.origin(full).rpartition(".")
            path = self.path_of(mod) if mod != me else None
            return self._key_consumers(path).get(name) if path is not None else None

        return ProjectClasses(lambda qualname: None, key_params=key_params)

    def _key_consumers(self, path: str) -> "Keys":
        """A module's functions that consume a key parameter (a `KeyTable`), the module modelled
        knowing only the same of the modules it imports (a module met again through an import cycle
        consumes none, as in `_read`)."""
        known = self._keys_alone.get(path)
        if known is None:
            self._keys_alone[path] = {}
            known = self._keys_alone[path] = self._key_table(path, keys_only=True)
        return known


def _absolute_methods(facts: ClassFacts, module: str, is_package: bool) -> ClassFacts:
    """A class's method return and field classes made absolute: the module's own (`local:Name`) and
    those it imports relatively (`.params.Joints`)."""
    def made_absolute(table: dict[str, str]) -> dict[str, str]:
        return {k: f"{module}.{q[6:]}" if q.startswith("local:") else absolute(q, module, is_package)
                for k, q in table.items()}

    return dataclasses.replace(facts, method_classes=made_absolute(facts.method_classes),
                               field_classes=made_absolute(facts.field_classes),
                               bases=tuple(made_absolute(dict(enumerate(facts.bases))).values()))


# Rules whose findings change when the project says a file imports nothing of it and nothing imports it.
_ISOLATION_RULES = frozenset({"stale-global", "jit-method-self", "global-mutation", "array-item-assignment"})


def project_needs(findings: list, calls: list = (), index: Optional["ProjectIndex"] = None,  # type: ignore[assignment]
                  path: str = "") -> Optional[str]:
    """What of the project a file's findings could change with. "all" it says about its classes and
    functions: for a finding that depends on them, or a module constant taken as a flag that another file
    may set (asked of `index` for the file at `path`). Only "keys": when every finding is of a rule the
    traced-code model does not decide and a PRNG key is handed to a function of another project file, what
    that function does with it. None: nothing."""
    if any(f.name not in _UNAFFECTED for f in findings):
        return "all"
    if index is None:
        return None
    if any(c.kind == "global" and index.sets_global(c.qualname, path) for c in calls):
        return "all"  # a debug switch taken as a constant may be set by another file
    handoffs = [c.qualname for c in calls if c.kind == "key"]
    return "keys" if handoffs and any(index.defines(q, path) for q in handoffs) else None


def absolute(qualname: str, module: str, is_package: bool) -> str:
    """A name as a module resolves it (`.losses.l2`) made absolute (`pkg.losses.l2`)."""
    if not qualname.startswith("."):
        return qualname
    dots = len(qualname) - len(qualname.lstrip("."))
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (dots - 1)] if dots > 1 else base
    rest = qualname[dots:]
    parts = base + [rest] if rest else base  # `from . import losses`: the package itself
    return ".".join(parts)


def import_tree(source: bytes, module_level: bool) -> Optional[ast.Module]:
    """The module as Python's `ast` reads it, for its import statements. Syntax newer than the running
    Python (`def f[T](x: T)`, which libcst reads) is read with libcst instead, keeping only the import
    statements (those of functions and classes too, unless `module_level`): a module written for a newer
    Python still tells which names it imports."""
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        pass
    try:
        module = cst.parse_module(source)
    except (cst.ParserSyntaxError, RecursionError, UnicodeError, ValueError):
        return None
    body: list[ast.stmt] = []
    stack: list[cst.CSTNode] = [module]
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.Import, cst.ImportFrom)):
            try:  # (an import statement alone is valid on every Python 3)
                body.extend(ast.parse(module.code_for_node(node)).body)
            except (SyntaxError, ValueError):
                pass
            continue
        if isinstance(node, cst.BaseExpression) or module_level and isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            continue
        stack.extend(reversed(children(node)))
    return ast.Module(body=body, type_ignores=[])


def module_imports(tree: ast.Module) -> dict[str, str]:
    """The names a module's own statements import (not its functions' or classes'), each with the name
    it imports as written (`.losses.l2`); a name imported twice differently is left out."""
    found: dict[str, str] = {}
    ambiguous: set[str] = set()

    def note(local: str, qual: str) -> None:
        if found.get(local, qual) != qual:
            ambiguous.add(local)
        found[local] = qual

    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname is not None:
                    note(a.asname, a.name)
                else:
                    head = a.name.split(".")[0]
                    note(head, head)
        elif isinstance(node, ast.ImportFrom):
            prefix = "." * node.level + (node.module or "")
            for a in node.names:
                if a.name == "*":
                    break
                qual = f"{prefix}.{a.name}" if prefix and not prefix.endswith(".") else f"{prefix}{a.name}"
                note(a.asname or a.name, qual)
        elif isinstance(node, ast.stmt) or node is tree or isinstance(node, (ast.excepthandler, ast.match_case)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                stack.extend(reversed([c for c in ast.iter_child_nodes(node)
                                       if isinstance(c, (ast.stmt, ast.excepthandler, ast.match_case))]))
    return {k: v for k, v in found.items() if k not in ambiguous}


@functools.lru_cache(maxsize=512)  # (a file is asked again each time the project pass reads it)
def _imported_modules(source: bytes, module: str, is_package: bool) -> tuple[str, ...]:
    """The absolute names of the modules a file imports from (and of the names it imports, which may
    be modules themselves: `from pkg import agents`)."""
    tree = import_tree(source, module_level=False)
    if tree is None:
        return ()
    out: list[str] = []
    for node in _statements(tree):
        if isinstance(node, ast.ImportFrom):
            base = absolute("." * node.level + (node.module or ""), module, is_package) if node.level \
                else (node.module or "")
            out.append(base)
            out.extend(f"{base}.{a.name}" for a in node.names if a.name != "*")
        elif isinstance(node, ast.Import):
            for a in node.names:  # `import pkg.core` binds `pkg` too: `pkg.field` is read through it
                parts = a.name.split(".")
                out.extend(".".join(parts[:i]) for i in range(len(parts), 0, -1) if a.asname is None or i == len(parts))
    return tuple(out)


def _statements(tree: ast.Module) -> Iterable[ast.AST]:
    """The nodes of `tree` that are or hold statements, in `ast.walk`'s order: an import is a statement, and
    only statements (with `except` and `case` clauses) hold statements, so expressions need no visit."""
    todo: collections.deque[ast.AST] = collections.deque([tree])
    while todo:
        node = todo.popleft()
        todo.extend(c for c in ast.iter_child_nodes(node) if isinstance(c, (ast.stmt, ast.excepthandler, ast.match_case)))
        yield node


def _declared(text: bytes) -> frozenset[str]:
    """The names a file's text may declare a field, static or not: bound first on a line or after `;`
    or `:` (`name: int = 0` in a class body, `class C: name: int`), an attribute of the instance or the
    class (`self.name = ...`), a method (`def name(self)`), or a whole string (`meta_fields=["name"]`).
    In a file defining a flatten function, any attribute read counts too (`return children,
    (x.name,)` in `def flatten(x)`). A file that only reads a name off other objects (`x.at[i].set(v)`,
    `cfg.config`), passes it as a keyword (`var_defaults(name=True)`) or writes it in a message declares no
    field of that name, and is not modelled to find out."""
    decoded = text.decode("utf-8", "replace")
    names = set(_BOUND.findall(decoded))
    names.update(_ON_SELF.findall(decoded), _DEF.findall(decoded), _WHOLE_STRING.findall(decoded))
    if _FLATTENS.search(text):
        names.update(_ATTRIBUTE_READ.findall(decoded))
    return frozenset(names)


# A def's head (`def name(`), and what makes it a property: the decorator on the line right above.
_DEF_HEAD = re.compile(rb"\bdef[ \t]+(\w+)[ \t]*\(")
_PROPERTY_ABOVE = re.compile(rb"@(?:functools\.)?(?:cached_)?property[ \t]*\r?\n[ \t]*$")


def _plain_declaration(name: str) -> "re.Pattern[bytes]":
    """A search for a plain declaration of a field `name` in a file's text: an annotated statement on a line
    of its own that is no parameter of a signature written one per line (`name: bool`, not `name: bool =
    None,` nor the last one before the `)`), or a store on the instance (`self.name = ...`). (A whole string,
    `meta_fields=["name"]`, is as often a dictionary's key.)"""
    word = re.escape(name.encode())
    return re.compile(_field_annotation(word) + rb"|\b(?:self|cls)[ \t]*\.[ \t]*" + word + rb"[ \t]*=(?!=)", re.M)


def _field_annotation(word: bytes) -> bytes:
    """A pattern (for `re.M`) of `word` (escaped) annotated on a line of its own, as a field is in a class
    body: not a parameter of a signature written one per line (`horizon: int,`, or the last one before the
    `)`), which stores nothing."""
    return rb"^[ \t]+" + word + rb"[ \t]*:(?!=)(?![^\n]*,[ \t]*(?:#[^\n]*)?$)(?![^\n]*\n[ \t]*\))"


# The ways `_declared` reads a name (lookaheads, not consumed, so that `a: b = 0` yields both names).
_BOUND = re.compile(r"(?:^|[;:])[ \t]*(\w+)(?=[ \t]*(?::|=(?!=)))", re.M)
_ON_SELF = re.compile(r"\b(?:self|cls)[ \t]*\.[ \t]*(\w+)")
_DEF = re.compile(r"\bdef[ \t]+(\w+)")
_WHOLE_STRING = re.compile(r"[\"'](\w+)(?=[\"'])")
# An attribute read in a file's text (`x.name`), which a file defining a flatten function may declare a field.
_ATTRIBUTE_READ = re.compile(r"\.[ \t]*(\w+)")


# A file defining a flatten function: a def named so, or one handed to `register_pytree_node` (a lambda).
_FLATTENS = re.compile(rb"\bdef[ \t]+\w*flatten|register_pytree_node\b")


def _mention(name: str, tail: bytes) -> "re.Pattern[bytes]":
    """A line naming `name` followed by `tail` (`rb"\\s*\\("` for a call), outside a comment and not its def."""
    return re.compile(rb"^[^#\n]*(?<!def )\b" + re.escape(name.encode()) + tail, re.M)


_LOOP_HEADER = re.compile(rb"[ \t]*(?:async[ \t]+)?(?:for|while)\b")


def _under_loop(text: bytes, at: int) -> bool:
    """Whether the line holding offset `at` is indented under a `for` or `while` header: walking up, each
    line indented less than the last one seen opens a block around it."""
    start = text.rfind(b"\n", 0, at) + 1
    end = text.find(b"\n", start)
    line = text[start:end if end >= 0 else len(text)]
    indent = len(line) - len(line.lstrip())
    for prev in reversed(text[:start].split(b"\n")):
        stripped = prev.lstrip()
        if not stripped or stripped.startswith(b"#"):
            continue
        depth = len(prev) - len(stripped)
        if depth < indent:
            if _LOOP_HEADER.match(prev):
                return True
            indent = depth
            if depth == 0:
                return False
    return False
