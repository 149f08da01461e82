"""Files that name no JAX library and import nothing of the project are read by CPython's parser only: the
run spares them libcst's tree, and finds in them what a full analysis would (nothing on their own, the
hazards of their code when traced code of another file calls it)."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from jaxlint import api
from jaxlint.api import Settings, inert, run

PLAIN = b"import numpy as np\n\n\ndef scale(x, factor):\n    return np.asarray(x) * factor\n"


@pytest.mark.parametrize("source, expected", [
    (PLAIN, True),
    (b"# Copyright The Flax Authors.\nimport os\n\nPATH = os.sep\n", True),  # a name in prose, capitalised
    (b"import jax.numpy as jnp\n", False),
    (b"from flax import nnx\n", False),
    (b"import equinox as eqx\n", False),
    (b"import haiku as hk\n", False),
    (b"x = [1, 2]  # NOQA: JL301\n", False),  # a suppression comment: its findings need the analysis
    (b"x = 1  # jaxlint: ignore[traced-if]\n", False),
    (b"from . import backend\n", False),  # a module of the project
    (b"from .backend import random\n", False),
    (b"import proj.backend.random as random\n", False),
    (b"import os, proj\n", False),
    (b"from proj.backend import (\n    random,\n)\n", False),
    (b"import projection\n", True),  # another package whose name starts alike
    (b"def f(:\n    pass\n", False),  # a syntax error: libcst's parse reports it
])
def test_inert_files(source: bytes, expected: bool) -> None:
    assert inert(source, "m.py", frozenset({"proj"})) is expected


def test_a_configured_trace_decorator_makes_a_file_worth_analysing() -> None:
    source = b"from tools.compile import fast\n\n\n@fast\ndef step(x):\n    print(x)\n    return x\n"
    assert inert(source, "m.py", frozenset())
    assert not inert(source, "m.py", frozenset(), ["tools.compile.fast"])


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


PROJECT = {
    "proj/__init__.py": "",
    "proj/backend/__init__.py": "",
    "proj/backend/random.py": """\
        import jax


        def normal(key, shape):
            return jax.random.normal(key, shape)
        """,
    # names no JAX library: reached from jitted code in train.py, its `if` is a hazard all the same
    "proj/helpers.py": """\
        import numpy as np


        def scale(x, factor):
            if x.sum() > 0:
                return x * factor
            return x - np.pi
        """,
    "proj/train.py": """\
        import jax

        from proj.helpers import scale


        @jax.jit
        def step(x):
            return scale(x, 2.0)
        """,
    # names no JAX library either, but draws through the project's own wrapper of jax.random
    "proj/sim.py": """\
        from proj.backend import random


        def simulate(key):
            a = random.normal(key, (2,))
            b = random.normal(key, (2,))
            return a + b
        """,
    "proj/report.py": """\
        import json


        def dump(rows, path):
            with open(path, "w") as f:
                json.dump(rows, f)
        """,
}


@pytest.mark.parametrize("jobs", [1, 2])
def test_hazards_reached_through_jax_free_files_are_found(tmp_path: Path, jobs: int,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path, PROJECT)
    monkeypatch.setattr(api, "BYTES_PER_JOB", 1)  # (a pool even for this small tree, when jobs > 1)
    found = sorted((Path(f.path).name, f.line, f.name) for f in run(Settings(
        paths=[str(tmp_path / "proj")], verify=False, jobs=jobs)).findings)
    assert found == [("helpers.py", 5, "traced-if"), ("sim.py", 6, "prng-key-reuse")]


def test_an_inert_file_is_not_parsed_by_libcst(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from jaxlint import syntax

    _write(tmp_path, PROJECT)
    parsed: list[bytes] = []
    real = syntax._parse_unchecked

    def spy(source: bytes):
        parsed.append(source)
        return real(source)

    monkeypatch.setattr(syntax, "_parse_unchecked", spy)
    run(Settings(paths=[str(tmp_path / "proj")], verify=False, jobs=1))
    report = (tmp_path / "proj" / "report.py").read_bytes()
    helpers = (tmp_path / "proj" / "helpers.py").read_bytes()
    assert report not in parsed
    assert helpers in parsed  # train.py's traced code calls into it
    assert (tmp_path / "proj" / "sim.py").read_bytes() in parsed


def test_an_inert_file_with_a_syntax_error_is_reported(tmp_path: Path) -> None:
    _write(tmp_path, {"app/broken.py": "import os\n\ndef f(:\n    pass\n", "app/ok.py": "import os\n"})
    found = [(Path(f.path).name, f.name) for f in run(Settings(paths=[str(tmp_path / "app")], verify=False,
                                                               jobs=1)).findings]
    assert found == [("broken.py", "syntax-error")]


def test_inert_files_are_not_cached_as_analysed(tmp_path: Path) -> None:
    """Whether a file is inert depends on the project's packages: a file importing `proj` is inert until
    a package of that name joins the project, so its empty result is not kept under its own contents."""
    _write(tmp_path, {"app/sim.py": PROJECT["proj/sim.py"], "app/other.py": "import os\n"})
    cache = tmp_path / "cache"

    def found() -> list[tuple[str, str]]:
        return [(Path(f.path).name, f.name) for f in run(Settings(
            paths=[str(tmp_path / "app")], verify=False, jobs=1, cache_dir=str(cache))).findings]

    assert found() == []
    _write(tmp_path / "app", {k: v for k, v in PROJECT.items() if k.startswith("proj/")})
    assert ("sim.py", "prng-key-reuse") in found()
