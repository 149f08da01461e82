"""The project's classes (pytree bases, static fields in other files) reach every way a file is linted:
a whole-folder run, one file as pre-commit passes it (with and without --with-importers), standard
input, the fix loop and the language server's buffer lint."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jaxlint.api import Settings, lint_for_fix
from jaxlint.rules import DEFAULT_CODES

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "fixtures" / "cross-file" / "project_classes"
LEARNER = APP / "learner.py"
# What the whole package's run reports in learner.py (its `# expect:` marker): `Learner` is a pytree
# through `Agent` in base.py, and `time_axis` a static field of base.py's `Cache`.
EXPECTED = [(26, "traced-if")]


def _lint(*args: str, stdin: str | None = None) -> list[tuple[int, str]]:
    proc = subprocess.run([sys.executable, "-m", "jaxlint", "--isolated", "--no-verify", "--no-cache", "--format",
                           "json", *args], cwd=APP.parent, input=stdin, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    return [(f["line"], f["name"]) for f in json.loads(proc.stdout)["findings"]]


@pytest.mark.parametrize("args", [("project_classes",), ("project_classes/learner.py",),
                                  ("--with-importers", "project_classes/learner.py")],
                         ids=["folder", "one-file", "with-importers"])
def test_one_file_sees_the_classes_of_the_modules_it_imports(args: tuple[str, ...]) -> None:
    assert _lint(*args) == EXPECTED  # base.py has no findings: the folder's report is learner.py's


def test_standard_input_sees_the_project_classes() -> None:
    found = _lint("-", "--stdin-filename", "project_classes/learner.py", stdin=LEARNER.read_text(encoding="utf-8"))
    assert found == EXPECTED


def test_the_fix_loop_sees_the_project_classes() -> None:
    lint = lint_for_fix(Settings(paths=[str(LEARNER)], codes=set(DEFAULT_CODES)))
    found, module = lint(LEARNER.read_bytes(), str(LEARNER))
    assert module is not None
    assert [(f.line, f.name) for f in found] == EXPECTED


def test_the_language_server_lint_sees_the_project_classes() -> None:
    pytest.importorskip("pygls")
    from jaxlint.server import lint_job

    found, error = lint_job(LEARNER.read_text(encoding="utf-8"), str(LEARNER),
                            Settings(paths=[str(LEARNER)], codes=set(DEFAULT_CODES)))
    assert error is None
    assert [(f.line, f.name) for f in found] == EXPECTED


def test_pytree_bases_are_found_through_an_import_cycle(tmp_path: Path) -> None:
    """`base.py` imports `selectors.py` (for typing), which imports `middle.py`, which subclasses
    `base.Base`: whichever file is read first, every class down the chain is a pytree."""
    from project_files import write

    write(tmp_path, "pkg/__init__.py", "")
    write(tmp_path, "pkg/base.py", "import flax.struct\nfrom pkg import selectors\n\n\n"
          "class Base(flax.struct.PyTreeNode):\n    scores: object\n")
    write(tmp_path, "pkg/selectors.py", "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
          "    from pkg.middle import Middle\n")
    write(tmp_path, "pkg/middle.py", "from pkg.base import Base\n\n\nclass Middle(Base):\n    pass\n")
    write(tmp_path, "pkg/leaf.py", "import jax\nfrom pkg.base import Base\nfrom pkg.middle import Middle\n\n\n"
          "class Leaf(Middle):\n"
          "    @jax.jit\n    def best(self):\n        return self.scores.max()\n")
    proc = subprocess.run([sys.executable, "-m", "jaxlint", "--isolated", "--no-verify", "--no-cache", "--format",
                           "json", "pkg"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["findings"] == []


def test_every_fixture_and_example_is_summarised_without_fault() -> None:
    """A fault while summarising a file silently drops everything it tells the others (classes, static
    helpers, key-consuming functions): none of the bundled files may cause one."""
    from jaxlint.api import module_name
    from jaxlint.project import ProjectIndex

    files = [str(p) for folder in ("fixtures", "examples") for p in sorted((ROOT / folder).rglob("*.py"))]
    index = ProjectIndex(files, module_name)
    for path in files:
        index.functions(module_name(path), "static")
    assert not index.faults, index.faults


def test_the_project_is_read_only_where_it_can_answer(tmp_path: Path) -> None:
    """A file's questions read the files that can answer them, not the whole project: the static
    names are asked one attribute at a time of the files that could declare it, and only of an
    attribute that would otherwise be traced; a package `__init__` re-exporting a class is followed
    through its imports, not modelled."""
    from project_files import write

    from jaxlint.api import module_name
    from jaxlint.project import ProjectIndex

    write(tmp_path, "pkg/__init__.py", "from pkg.base import Agent, Cache\nfrom pkg import unrelated\n")
    write(tmp_path, "pkg/base.py", "import flax.struct\n\n\nclass Agent(flax.struct.PyTreeNode):\n    scale: float\n\n\n"
          "class Cache(flax.struct.PyTreeNode):\n    data: object\n"
          "    time_axis: int = flax.struct.field(pytree_node=False)\n")
    write(tmp_path, "pkg/unrelated.py", "import flax.struct\n\n\nclass Other(flax.struct.PyTreeNode):\n"
          "    width: int = flax.struct.field(pytree_node=False)\n")
    learner = write(tmp_path, "pkg/learner.py", "from pkg import Agent\n\n\nclass Learner(Agent):\n    pass\n")
    files = [str(p) for p in sorted(tmp_path.rglob("*.py"))]
    index = ProjectIndex(files, module_name)
    project = index.for_file(str(learner), learner.read_bytes())
    assert project is not None
    facts = project.lookup("pkg.Agent")
    assert facts is not None and facts.pytree
    assert [Path(p).name for p in index.modelled] == ["base.py"]  # the re-exporting __init__ is followed
    assert project.static_name("time_axis") and not project.static_name("scale")
    assert not project.static_name("height")
    assert "unrelated.py" not in {Path(p).name for p in index.modelled}  # it declares none of those names


@pytest.mark.parametrize("register", [True, False], ids=["registered", "plain"])
def test_modules_in_newer_python_syntax_still_tell_their_imports(tmp_path: Path, register: bool) -> None:
    """A module using syntax newer than the running Python (a generic `def register[T](cls: type[T])`,
    which libcst reads and `ast` before 3.12 does not) still tells which names it imports: a base whose
    `__init_subclass__` registers each subclass through such a helper, re-exported by the package, makes
    the subclass a pytree, so jitting its method is fine; without the registration it is not."""
    from project_files import write

    helper = ("import dataclasses\nfrom jax._src.tree_util import register_dataclass\n\n\n"
              "def register[T](cls: type[T]) -> type[T]:\n"
              "    names = [f.name for f in dataclasses.fields(cls)]\n"
              "    register_dataclass(cls, data_fields=names, meta_fields=[])\n"
              "    return cls\n")
    hook = "        register(cls)\n" if register else "        pass\n"
    write(tmp_path, "ops/__init__.py", "from ops.base import Operator\n")
    write(tmp_path, "ops/utils.py", helper)
    write(tmp_path, "ops/base.py", "from dataclasses import dataclass\n\nfrom .utils import register\n\n\n"
          "class Operator:\n    def __init_subclass__[S](cls: type[S], **kwargs) -> None:\n"
          "        dataclass(frozen=True)(cls)\n" + hook)
    write(tmp_path, "ops/scale.py", "import jax\n\nfrom ops import Operator\n\n\n"
          "class Scale(Operator):\n    factor: float\n\n"
          "    @jax.jit\n    def mv(self, x):\n        return self.factor * x\n")
    proc = subprocess.run([sys.executable, "-m", "jaxlint", "--isolated", "--no-verify", "--no-cache", "--format",
                           "json", "ops"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    found = [(Path(f["path"]).name, f["name"]) for f in json.loads(proc.stdout)["findings"]]
    assert proc.returncode == (0 if register else 1), proc.stdout + proc.stderr
    assert found == ([] if register else [("scale.py", "jit-method-self")])


def test_the_project_pass_parses_each_file_once(tmp_path: Path) -> None:
    """Within the project pass, a file the index reads for its classes and then analyses again is parsed
    once: the parsed module is shared (libcst's trees are immutable). Outside it, nothing is kept."""
    import libcst as cst

    from jaxlint import syntax

    source = b"import jax\n\n\n@jax.jit\ndef f(x):\n    return x + 1\n"
    with syntax.sharing_parses():
        first = syntax.parse_shared(source)
        assert syntax.parse_shared(source) is first
        assert syntax.parse_shared(source + b"\n") is not first
        with syntax.sharing_parses():  # (another lint at once: the table stays while any block is open)
            assert syntax.parse_shared(source) is first
        assert syntax.parse_shared(source) is first
    assert syntax.parse_shared(source) is not first  # (no cache once the block is left)
    assert isinstance(first, cst.Module) and first.code == source.decode()


def test_the_analysis_parse_skips_only_the_parsers_own_validation() -> None:
    """The analysis parses without libcst's per-node checks: the same tree as `cst.parse_module`, and nodes
    built afterwards (fixes) are checked again."""
    import libcst as cst

    from jaxlint import syntax

    source = (Path(__file__).resolve().parent.parent / "src" / "jaxlint" / "api.py").read_bytes()
    tree = syntax.parse_shared(source)
    assert tree.deep_equals(cst.parse_module(source)) and tree.code.encode() == source
    with pytest.raises(cst.ParserSyntaxError):
        syntax.parse_shared(b"def f(:\n")
    with pytest.raises(cst.CSTValidationError):
        cst.Name("not a name")


def test_a_field_name_is_looked_for_only_where_a_file_can_declare_it(tmp_path: Path) -> None:
    """Whether an attribute is a static field anywhere in the project is asked of the files that could
    declare it: a file naming it only as a keyword argument or a plain name is not modelled for it, and
    each way of declaring one still counts."""
    from project_files import write

    from jaxlint.api import module_name
    from jaxlint.project import ProjectIndex, _declared

    write(tmp_path, "pkg/__init__.py", "")
    write(tmp_path, "pkg/state.py", "import flax.struct\n\n\nclass State(flax.struct.PyTreeNode):\n"
          "    x: object\n    mode: int = flax.struct.field(pytree_node=False)\n")
    write(tmp_path, "pkg/caller.py", "import flax.struct\nimport jax\n\n\nclass Other(flax.struct.PyTreeNode):\n"
          "    y: object\n\n\ndef run(f, mode):\n    with jax.default_device(None):\n"
          "        return f(mode=mode), configure(mode=True)\n")
    user = write(tmp_path, "pkg/user.py", "def step(state):\n    return state.mode\n")
    files = [str(p) for p in sorted(tmp_path.rglob("*.py"))]
    index = ProjectIndex(files, module_name)
    project = index.for_file(str(user), user.read_bytes(), asking={"traced-if"})
    assert project is not None and project.static_name("mode")
    assert "caller.py" not in {Path(p).name for p in index.modelled}  # `mode` there is a keyword, a name
    declares = ["mode: int = 0", "    mode = 3", "self.mode = m", "return kids, (self.mode,)", "def mode(self):",
                "meta_fields=['mode']", "class C: mode: int", "x = 1; mode = 2", "cls.mode = 1",
                "def flatten(x):\n    return (x.w,), (x.mode,)",
                "register_pytree_node(C, lambda c: ((c.w,), (c.mode,)), build)"]
    assert all("mode" in _declared(text.encode()) for text in declares)
    # reads off other objects (an array's `.at`, a config's field), keywords, names and messages declare nothing
    assert not any("mode" in _declared(text.encode())
                   for text in ["f(mode=True)", "run(x, mode=mode)", "y = mode + 1", "model = 1", "if cfg.mode:",
                                "leaves, tree = jax.tree_util.tree_flatten(x)\nn = cfg.mode",
                                "mode == 3", "raise ValueError('bad mode here')", "    mode and run()"])


def test_library_bases_and_field_functions_are_not_modelled_from_the_librarys_source(tmp_path: Path) -> None:
    """Linting a framework's own repository (its tests subclass `nnx.Module`, declare `nnx.data()`
    fields, decorate with `@nnx.dataclass`): the names the model knows by name are not looked up in the framework's source, whose
    modelling would take most of the framework; the model's own knowledge of them answers, as it does
    for every project that uses the framework."""
    from project_files import write

    from jaxlint.api import analyse, module_name
    from jaxlint.project import ProjectIndex

    write(tmp_path, "flax/__init__.py", "")
    write(tmp_path, "flax/nnx/__init__.py", "from flax.nnx.module import Module\n"
          "from flax.nnx.fields import data, dataclass\n")
    write(tmp_path, "flax/nnx/module.py", "class Module:\n    def __init_subclass__(cls):\n        pass\n")
    write(tmp_path, "flax/nnx/fields.py", "import dataclasses\n\n\ndef data(value=None):\n"
          "    return dataclasses.field(default=value)\n\n\ndef dataclass(cls):\n    return dataclasses.dataclass(cls)\n")
    test = write(tmp_path, "tests/model_test.py",
                 "import jax\nfrom flax import nnx\n\n\n@nnx.dataclass\nclass Block(nnx.Module):\n    w: jax.Array = nnx.data()\n\n"
                 "    def __call__(self, x):\n        if x.sum() > 0:\n            return x\n        return -x\n\n\n"
                 "@jax.jit\ndef f(block: Block, x):\n    return block(x)\n")
    files = [str(p) for p in sorted(tmp_path.rglob("*.py"))]
    index = ProjectIndex(files, module_name)
    project = index.for_file(str(test), test.read_bytes(), asking={"traced-if"})
    assert project is not None and project.lookup("flax.nnx.Module") is None
    found, _calls = analyse(test.read_bytes(), str(test), project=project)
    assert [(f.line, f.name) for f in found] == [(10, "traced-if")]  # as for any project using nnx
    assert index.modelled == []


def test_a_key_handed_on_through_two_files_is_followed_without_modelling_their_classes(tmp_path: Path) -> None:
    """A file whose findings are all PRNG findings asks the project only which parameters its imported
    functions consume as keys (followed on through the files they call), not about any class."""
    from jaxlint.api import analyse_files, module_name, run
    from jaxlint.project import ProjectIndex, project_needs

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "draw.py").write_text("import jax\n\n\ndef draw(key, shape):\n    return jax.random.normal(key, shape)\n")
    (pkg / "nets.py").write_text("import equinox as eqx\n\n\nclass Net(eqx.Module):\n    width: int\n")
    (pkg / "wrap.py").write_text("from .draw import draw\nfrom .nets import Net\n\n\n"
                                 "def noisy(key, x, net: Net):\n    return x + draw(key, x.shape) * net.width\n")
    (pkg / "main.py").write_text("import jax\n\nfrom .wrap import noisy\n\n\n"
                                 "def twice(x, net):\n    key = jax.random.key(0)\n    a = noisy(key, x, net)\n"
                                 "    b = noisy(key, x, net)\n    return a, b\n")
    files = sorted(str(p) for p in pkg.glob("*.py"))
    settings = Settings(paths=[str(pkg)], verify=False)
    results, _ = analyse_files(files, settings)
    main = str(pkg / "main.py")
    index = ProjectIndex(files, module_name)
    assert results[main][0] == [] and project_needs(*results[main], index, main) == "keys"
    project = index.for_file(main, (pkg / "main.py").read_bytes(), keys_only=True)
    assert project is not None and project.key_params("pkg.wrap.noisy") == (("key", 0),)
    assert index.modelled == []  # no module was modelled for its classes
    found = run(Settings(paths=[str(pkg)], verify=False, cache_dir=None)).findings
    assert [(os.path.basename(f.path), f.line, f.name) for f in found] == [("main.py", 9, "prng-key-reuse")]


def test_a_module_read_for_its_classes_is_not_followed_into_the_modules_its_functions_call(tmp_path: Path) -> None:
    """Which parameters a module's functions consume as PRNG keys is found only when a file asks: a module
    read for its classes does not model, through the keys its functions hand on, the modules they call."""
    from project_files import write

    from jaxlint.api import module_name
    from jaxlint.project import ProjectIndex

    write(tmp_path, "pkg/__init__.py", "")
    write(tmp_path, "pkg/draw.py", "import jax\n\n\ndef draw(key, shape):\n    return jax.random.normal(key, shape)\n")
    write(tmp_path, "pkg/base.py", "import flax.struct\nimport jax.numpy as jnp\n\nfrom pkg.draw import draw\n\n\n"
          "class Agent(flax.struct.PyTreeNode):\n    scale: float\n\n\n"
          "def noisy(key, x):\n    noise = draw(key, x.shape)\n    return jnp.add(x, noise)\n")
    user = write(tmp_path, "pkg/user.py", "from pkg.base import Agent, noisy\n\n\nclass Learner(Agent):\n    pass\n")
    files = [str(p) for p in sorted(tmp_path.rglob("*.py"))]
    index = ProjectIndex(files, module_name)
    project = index.for_file(str(user), user.read_bytes())
    assert project is not None
    facts = project.lookup("pkg.base.Agent")
    assert facts is not None and facts.pytree
    assert [Path(p).name for p in index.modelled] == ["base.py"]
    assert project.key_params("pkg.base.noisy") == (("key", 0),)  # asked: followed into draw.py now
    assert [Path(p).name for p in index.modelled] == ["base.py", "draw.py"]


def test_whether_the_project_has_static_names_stops_at_the_first_one_confirmed(tmp_path: Path) -> None:
    """A file that imports nothing of the project and that no file imports is told only the project's
    static names, and only if there are any: the first name confirmed answers, and the declaring files
    not needed to confirm it are not modelled."""
    from project_files import write

    from jaxlint.api import module_name
    from jaxlint.project import ProjectIndex

    for name, cls, field in [("a_state", "State", "mode"), ("b_other", "Other", "depth"), ("c_more", "More", "width")]:
        write(tmp_path, f"{name}.py", f"import flax.struct\n\n\nclass {cls}(flax.struct.PyTreeNode):\n"
              f"    x: object\n    {field}: int = flax.struct.field(pytree_node=False)\n")
    write(tmp_path, "registry.py", "import a_state\nimport b_other\nimport c_more\n")
    user = write(tmp_path, "d_user.py", "import jax\n\n\n@jax.jit\ndef step(s):\n    return s.x * 2\n")
    files = [str(p) for p in sorted(tmp_path.rglob("*.py"))]
    index = ProjectIndex(files, module_name)
    project = index.for_file(str(user), user.read_bytes())
    assert project is not None
    assert [Path(p).name for p in index.modelled] == ["a_state.py"]  # its `mode` answers
    assert project.static_name("mode") and project.static_name("width") and not project.static_name("x")
    lone = ProjectIndex([str(user)], module_name)
    assert lone.for_file(str(user), user.read_bytes()) is None and lone.modelled == []


def test_a_key_question_follows_only_the_function_asked_about(tmp_path: Path) -> None:
    """Which parameters an imported function consumes as a key is answered from that function and the
    ones it hands them to, here or in other files: not from every function of its module, whose calls
    into other files would model those files too."""
    from project_files import write

    from jaxlint.api import module_name
    from jaxlint.project import ProjectIndex

    write(tmp_path, "pkg/__init__.py", "")
    write(tmp_path, "pkg/draw.py", "import jax\n\n\ndef draw(key, shape):\n    return jax.random.normal(key, shape)\n")
    write(tmp_path, "pkg/mix.py", "import jax\n\n\ndef mix(rng, x):\n    return x + jax.random.uniform(rng, x.shape)\n")
    write(tmp_path, "pkg/ops.py", "from pkg.draw import draw\nfrom pkg.mix import mix\n\n\n"
          "def _inner(seed, shape):\n    return draw(seed, shape)\n\n\n"
          "def noisy(key, x):\n    return x + _inner(key, x.shape)\n\n\n"
          "def mixed(rng, x):\n    return mix(rng, x)\n\n\n"
          "def plain(key, x):\n    return x * 2\n")
    user = write(tmp_path, "pkg/user.py", "import jax\n\nfrom pkg.ops import noisy, plain\n\n\n"
                 "def run(x):\n    key = jax.random.key(0)\n    return noisy(key, x), plain(key, x)\n")
    files = [str(p) for p in sorted(tmp_path.rglob("*.py"))]
    index = ProjectIndex(files, module_name)
    project = index.for_file(str(user), user.read_bytes(), keys_only=True)
    assert project is not None
    assert project.key_params("pkg.ops.noisy") == (("key", 0),)  # through `_inner`, then draw.py
    assert project.key_params("pkg.ops.plain") is None
    assert sorted(Path(p).name for p in index.modelled_for_keys) == ["draw.py", "ops.py"]  # mix.py: not asked


def test_a_static_name_is_sought_first_where_a_file_plainly_declares_it(tmp_path: Path) -> None:
    """The files that only may declare a name (a parameter `mode: str = "a",`, an attribute read in a file
    defining a flatten function) are modelled after those declaring it plainly (`mode: str` in a class
    body): one declaring it a leaf settles the answer, and the others are not modelled at all."""
    from project_files import write

    from jaxlint.api import module_name
    from jaxlint.project import ProjectIndex

    write(tmp_path, "a_config.py", "import flax.struct\n\n\nclass Config(flax.struct.PyTreeNode):\n"
          "    tag: str = flax.struct.field(pytree_node=False)\n\n\n"
          "def build(\n    mode: str = 'a',\n    size: int = 1,\n):\n    return mode, size\n")
    write(tmp_path, "b_tree.py", "import jax\n\n\ndef flatten(x):\n    return (x.mode,), None\n\n\n"
          "jax.tree_util.register_pytree_node(object, flatten, None)\n")
    write(tmp_path, "c_state.py", "import flax.struct\n\n\nclass State(flax.struct.PyTreeNode):\n    mode: int\n"
          "    name: str = flax.struct.field(pytree_node=False)\n")
    files = [str(p) for p in sorted(tmp_path.rglob("*.py"))]
    index = ProjectIndex(files, module_name)
    assert not index.static_name("mode")  # a leaf of `State`
    # (c_state.py, modelled first, imports nothing of the project: whether the project declares any static
    # name is asked for its model, which reads the other declaring files, but only after it)
    assert Path(index.modelled[0]).name == "c_state.py"


def test_only_files_defining_a_method_of_that_name_are_modelled_for_it(tmp_path: Path) -> None:
    """Whether every method `n` of the project returns a Python value: a file whose `def n(` starts a line
    defines a module-level function, no method, and is not modelled to find out."""
    from project_files import write

    from jaxlint.api import module_name
    from jaxlint.project import ProjectIndex

    write(tmp_path, "a_free.py", "def count(x):\n    return x.sum()\n")
    write(tmp_path, "b_grid.py", "class Grid:\n    def __init__(self, cells):\n        self.cells = cells\n\n"
          "    @property\n    def count(self):\n        return self.cells.shape[0]\n")
    files = [str(p) for p in sorted(tmp_path.rglob("*.py"))]
    index = ProjectIndex(files, module_name)
    assert index.static_method("count")
    assert [Path(p).name for p in index._plain_models] == ["b_grid.py"]
    paths, props = index._def_index()["count"]
    assert [Path(p).name for p in paths] == ["a_free.py", "b_grid.py"] and props == 1
