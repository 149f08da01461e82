"""How a verified file's imports are found: its project's own packages, and stand-ins for packages not installed.

Two finders go at the end of `sys.meta_path`, so they answer only for a name every normal finder
gave up on:

- `ProjectPackages` finds the project's own top-level packages when the project is not installed
  (a `tests/` folder importing `mypkg`, a script in `examples/`): it looks in the folders from the
  verified file up to the nearest one holding a project marker (`pyproject.toml`, `setup.py`,
  `setup.cfg`, `.git`), and in their `src/`, as running the code from the project's root would.
- `Absent` stands in for a top-level package that is not installed, while the module's definitions
  load: `import h5py` binds a module that raises `ModuleNotFoundError` as soon as anything is read
  from it. Code that never uses the package runs as it would with it installed; code that uses it
  fails at that use, as it would have failed at the import; `from h5py import File` binds a stand-in
  for `File` that fails when it is called, subclassed, tested or read from. Each use is recorded, so
  a run that used a stand-in refutes nothing.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import types
from typing import Any, Optional, Sequence

MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
_LEVELS = 4  # folders above the file's own searched at most, when no marker is found sooner


def project_folders(path: str) -> list[str]:
    """The folders where the project of `path` may keep its top-level packages, nearest first."""
    out: list[str] = []
    folder = os.path.dirname(os.path.abspath(path))
    for _ in range(_LEVELS + 1):
        out += [folder, os.path.join(folder, "src")]
        if any(os.path.exists(os.path.join(folder, m)) for m in MARKERS):
            break
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return out


class ProjectPackages(importlib.abc.MetaPathFinder):
    """Finds a top-level module or regular package of the verified file's project that is not installed."""

    def __init__(self) -> None:
        self.folders: list[str] = []

    def add(self, path: str) -> None:
        self.folders += [f for f in project_folders(path) if f not in self.folders]

    def holds(self, filename: str) -> bool:
        """Whether `filename` is a file of the verified project (not of an installed library)."""
        where = os.path.abspath(filename)
        return "site-packages" not in where.split(os.sep) and "dist-packages" not in where.split(os.sep) \
            and any(where.startswith(f + os.sep) for f in self.folders)

    def find_spec(self, name: str, path: Optional[Sequence[str]] = None, target: Any = None
                  ) -> Optional[importlib.machinery.ModuleSpec]:
        if path is not None or "." in name:
            return None  # submodules are found through their package's `__path__`
        # Folders that are regular packages last: Python never looks for top-level modules inside a
        # package when the project runs, so a module there (`algo/ppo/nn.py`) is only a script-style
        # sibling import, never the project's top-level package of the same name (`nn/`).
        ordered = sorted(self.folders, key=lambda f: os.path.isfile(os.path.join(f, "__init__.py")))
        for folder in ordered:
            spec = importlib.machinery.PathFinder.find_spec(name, [folder])
            # Only real code: a bare folder of that name (`data/`, `tests/`) is not the package, but a
            # folder of modules without an `__init__.py` (`agents/ppo/train.py`) is a namespace package.
            if spec is not None and ((spec.origin or "").endswith(".py") or _holds_code(spec)):
                return spec
        return None


def _holds_code(spec: importlib.machinery.ModuleSpec) -> bool:
    """Whether a namespace package's folders hold Python modules, directly or one folder down."""
    for folder in spec.submodule_search_locations or ():
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if entry.name.endswith(".py"):
                return True
            if entry.is_dir() and not entry.name.startswith((".", "__")):
                try:
                    if any(n.endswith(".py") for n in os.listdir(entry.path)):
                        return True
                except OSError:
                    continue
    return False


def _used(name: str) -> ModuleNotFoundError:
    top = name.split(".")[0]
    Absent.used.add(top)
    return ModuleNotFoundError(f"No module named '{top}' (not installed: verification gave the import a stand-in, "
                               f"which fails where `{name}` is used)", name=top)


class _AbsentModule(types.ModuleType):
    """`import h5py` of a package not installed: names read from it are stand-ins too (`from PIL import Image`)."""

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)  # `__all__`, `__wrapped__`: what import machinery and inspect probe
        return _AbsentName(f"{self.__name__}.{attr}")


class _AbsentName:
    """A name of a package not installed: any use of it (call, attribute, subclassing, test) fails and is recorded."""

    __slots__ = ("_name",)
    __hash__ = object.__hash__

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_name", name)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        raise _used(f"{self._name}.{attr}")

    def __repr__(self) -> str:
        return f"<stand-in for {self._name}, not installed>"

    def _use(self, *args: Any, **kwargs: Any) -> Any:
        raise _used(self._name)

    __call__ = __getitem__ = __setattr__ = __iter__ = __len__ = __bool__ = __eq__ = __ne__ = __lt__ = __gt__ = _use
    __mro_entries__ = __instancecheck__ = __subclasscheck__ = __contains__ = __enter__ = __int__ = __float__ = _use
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __matmul__ = __or__ = __ror__ = _use
    __array__ = __index__ = __jax_array__ = _use


class Absent(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Stand-ins for packages not installed, while `active` (the module's definitions loading)."""

    used: set[str] = set()  # packages whose stand-in something tried to use, since the file began

    def __init__(self) -> None:
        self.active = False

    def find_spec(self, name: str, path: Optional[Sequence[str]] = None, target: Any = None
                  ) -> Optional[importlib.machinery.ModuleSpec]:
        top = name.split(".")[0]
        if isinstance(sys.modules.get(top), _AbsentModule):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        if not self.active or "." in name or not PROJECT.holds(_importer()):
            # Libraries probe for optional packages (`try: import x except ImportError`) and must keep
            # seeing them missing; a submodule missing from an installed package is a real error.
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        mod = _AbsentModule(spec.name)
        mod.__path__ = []  # type: ignore[attr-defined] # a package: `import h5py.h5f` gets a stand-in too
        return mod

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def _importer() -> str:
    """The file whose `import` statement is being executed (the first frame outside importlib)."""
    frame = sys._getframe(1)
    while frame is not None and (frame.f_code.co_filename.startswith("<frozen")
                                 or frame.f_code.co_filename == __file__
                                 or os.sep + "importlib" + os.sep in frame.f_code.co_filename):
        frame = frame.f_back  # type: ignore[assignment]
    return frame.f_code.co_filename if frame is not None else ""


PROJECT = ProjectPackages()
ABSENT = Absent()


def install() -> None:
    """Put both finders at the end of `sys.meta_path` (once per process) and forget earlier uses."""
    for finder in (PROJECT, ABSENT):
        if finder not in sys.meta_path:
            sys.meta_path.append(finder)
    Absent.used = set()


def forget() -> None:
    """Drop the stand-ins and the project's folders (between files)."""
    PROJECT.folders = []
    ABSENT.active = False
    Absent.used = set()
    for name in [n for n, m in sys.modules.items() if isinstance(m, _AbsentModule)]:
        del sys.modules[name]


def used_stand_ins() -> Optional[str]:
    """Why a run cannot refute anything: the stand-ins it tried to use."""
    if not Absent.used:
        return None
    names = ", ".join(f"`{n}`" for n in sorted(Absent.used))
    return f"the run used {names}, not installed here (a stand-in took its place)"
