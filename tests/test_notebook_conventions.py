"""Notebooks and standard input under the command-line conventions and suppression hygiene: comments
in cells (line, file-wide, skip-file), invalid and unused suppressions positioned in cells and removed
by `--fix` into valid notebook JSON, cells only libcst rejects, gitignore-aware discovery of notebooks,
and `--per-file-ignores` / `--statistics` / `--quiet` with a buffer read from standard input."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"


def _jaxlint(*args: str, cwd: Path, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.pop("NO_COLOR", None)
    return subprocess.run([sys.executable, "-m", "jaxlint", "--isolated", "--no-verify", "--no-cache", *args],
                          cwd=cwd, env=env, input=stdin, capture_output=True, timeout=600)


def _notebook(path: Path, *cells: tuple[str, str | list[str]]) -> Path:
    """A notebook in Jupyter's own layout; each cell is (type, source)."""
    doc = {
        "cells": [
            {"cell_type": kind, "id": f"cell-{i}", "metadata": {}, "source": source,
             **({"execution_count": None, "outputs": []} if kind == "code" else {})}
            for i, (kind, source) in enumerate(cells)
        ],
        "metadata": {"language_info": {"name": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def _validate(text: str) -> dict:
    nbformat = pytest.importorskip("nbformat")
    nbformat.validate(nbformat.reads(text, as_version=nbformat.NO_CONVERT))
    return json.loads(text)


def _sources(doc: dict) -> list[str]:
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in doc["cells"]]


def _found(res: subprocess.CompletedProcess) -> list[tuple]:
    return sorted((f.get("cell"), f["line"], f["column"], f["name"]) for f in json.loads(res.stdout)["findings"])


# A step whose `if` is suppressed on its line, a mistyped name, a comment left over from a fixed
# hazard, a `noqa` that names one stale code next to another tool's, and a bare ignore that silences
# nothing (in the cell after an IPython magic, which stays as written).
COMMENTS = (
    ("markdown", ["# Training step\n"]),
    ("code", ["import jax\n", "import jax.numpy as jnp\n"]),
    ("code", ["@jax.jit\n",
              "def step(x):\n",
              "    if x > 0:  # jaxlint: ignore[traced-if]\n",
              "        x = x - 1\n",
              "    print(x)  # jaxlint: ignore[traced-iff]\n",
              "    y = jnp.abs(x)  # jaxlint: ignore[print-in-trace]\n",
              "    return y  # noqa: JL201, E501\n"]),
    ("code", ["%load_ext autoreload\n", "out = step(jnp.ones(()))  # jaxlint: ignore\n"]),
)


def test_suppressions_in_cells_are_honoured_checked_and_positioned(tmp_path: Path) -> None:
    _notebook(tmp_path / "train.ipynb", *COMMENTS)
    res = _jaxlint("--format", "json", "--extend-select", "unused-suppression", "train.ipynb", cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    # No traced-if: the comment in cell 3 silenced it, as on a line of a .py file.
    assert _found(res) == [
        (3, 5, 5, "print-in-trace"),
        (3, 5, 33, "invalid-suppression"),
        (3, 6, 21, "unused-suppression"),
        (3, 7, 23, "unused-suppression"),
        (4, 2, 27, "unused-suppression"),
    ]
    text = _jaxlint("--show-fixes", "--extend-select", "unused-suppression", "train.ipynb", cwd=tmp_path)
    out = text.stdout.decode()
    assert "train.ipynb:cell 3:5:5: JL201 [*] [print-in-trace]" in out
    assert "train.ipynb:cell 3:5:33: JL903 [invalid-suppression]" in out  # no fix: no marker
    assert "train.ipynb:cell 3:7:23: JL904 [*] [unused-suppression] `JL201` in `# noqa: JL201, E501`" in out
    # The source line under each finding is the cell's line, and the fix is shown under it.
    assert "        return y  # noqa: JL201, E501\n                          ^^^^^\n" \
           "    = fix (safe): Remove `JL201` from the suppression comment" in out
    assert out.rstrip().endswith("[*] 4 fixable with `--fix`.")
    stats = _jaxlint("--statistics", "--extend-select", "unused-suppression", "train.ipynb", cwd=tmp_path)
    assert stats.stdout.decode().splitlines() == ["3\tJL904\t[*] unused-suppression",
                                                  "1\tJL201\t[*] print-in-trace",
                                                  "1\tJL903\t[ ] invalid-suppression"]


def test_fix_removes_unused_suppressions_from_cells_into_valid_notebook_json(tmp_path: Path) -> None:
    nb = _notebook(tmp_path / "train.ipynb", *COMMENTS)
    before = nb.read_text(encoding="utf-8")
    res = _jaxlint("--fix", "--show-fixes", "--extend-select", "unused-suppression", "train.ipynb", cwd=tmp_path)
    assert res.returncode == 1, res.stderr  # the mistyped name is left for a person
    err = res.stderr.decode()
    assert "Fixed 4 findings in 1 file:" in err and "3 × JL904 (unused-suppression)" in err
    after = nb.read_text(encoding="utf-8")
    doc = _validate(after)
    assert _sources(doc)[2].splitlines()[4:] == [
        '    jax.debug.print("{}", x)  # jaxlint: ignore[traced-iff]',
        "    y = jnp.abs(x)",
        "    return y  # noqa: E501",
    ]
    assert _sources(doc)[3] == "%load_ext autoreload\nout = step(jnp.ones(()))\n"
    # Nothing but the sources changed; the layout is the one the file had.
    old = json.loads(before)
    for a, b in zip(old["cells"], doc["cells"]):
        assert {k: v for k, v in a.items() if k != "source"} == {k: v for k, v in b.items() if k != "source"}
    assert after == json.dumps(doc, indent=1, sort_keys=True) + "\n"
    again = _jaxlint("--fix", "--extend-select", "unused-suppression", "train.ipynb", cwd=tmp_path)
    assert nb.read_text(encoding="utf-8") == after, again.stderr


def test_file_level_comments_in_a_cell_cover_the_whole_notebook(tmp_path: Path) -> None:
    hazard = ("code", ["@jax.jit\n", "def f(x):\n", "    print(x)\n", "    if x > 0:\n", "        return x\n",
                       "    return -x\n"])
    _notebook(tmp_path / "wide.ipynb", ("code", ["import jax\n"]), hazard,
              ("code", ["# jaxlint: ignore-file[print-in-trace]\n"]))
    res = _jaxlint("--format", "json", "--extend-select", "unused-suppression", "wide.ipynb", cwd=tmp_path)
    assert _found(res) == [(2, 4, 5, "traced-if")]
    # skip-file in any cell skips the notebook, even in a cell that does not parse (whose syntax error
    # is then not reported either), and `--fix` leaves every byte alone.
    skipped = _notebook(tmp_path / "skipped.ipynb", ("code", ["import jax\n"]), hazard,
                        ("code", ["def broken(:\n", "    # jaxlint: skip-file\n"]))
    data = skipped.read_bytes()
    for args in ([], ["--fix"], ["--diff"], ["--add-noqa"]):
        res = _jaxlint(*args, "skipped.ipynb", cwd=tmp_path)
        assert res.returncode == 0, (args, res.stdout, res.stderr)
        assert skipped.read_bytes() == data, args
    assert b"No findings (1 file checked)" in _jaxlint("skipped.ipynb", cwd=tmp_path).stdout


def test_fix_never_rewrites_a_python_file_that_skips_itself(tmp_path: Path) -> None:
    p = tmp_path / "legacy.py"
    p.write_text("# jaxlint: skip-file\nimport jax\n\n@jax.jit\ndef f(x):\n    print(x)\n    return x\n")
    data = p.read_bytes()
    res = _jaxlint("--fix", "legacy.py", cwd=tmp_path)
    assert res.returncode == 0 and p.read_bytes() == data, res.stderr
    diff = _jaxlint("--diff", "legacy.py", cwd=tmp_path)
    assert diff.returncode == 0 and diff.stdout == b"", diff.stdout


def test_a_cell_only_libcst_rejects_is_set_aside_and_the_others_are_checked(tmp_path: Path) -> None:
    # A parenthesised annotation target compiles in CPython; libcst cannot read it.
    nb = _notebook(tmp_path / "odd.ipynb",
                   ("code", ["import jax\n", "count = 0\n"]),
                   ("code", ["@jax.jit\n", "def f(x):\n", "    print(x)\n", "    return x\n"]),
                   ("code", ["total = 1\n", "(count): int = 1\n"]))
    res = _jaxlint("--format", "json", "odd.ipynb", cwd=tmp_path)
    assert _found(res) == [(2, 3, 5, "print-in-trace"), (3, 2, 1, "unsupported-syntax")]
    unsupported = [f for f in json.loads(res.stdout)["findings"] if f["name"] == "unsupported-syntax"]
    assert unsupported[0]["code"] == "JL902" and "could not read this cell" in unsupported[0]["message"]
    # Ignoring JL902 hides the report, not the rest of the notebook.
    assert _found(_jaxlint("--format", "json", "--ignore", "JL902", "odd.ipynb", cwd=tmp_path)) == \
        [(2, 3, 5, "print-in-trace")]
    res = _jaxlint("--fix", "odd.ipynb", cwd=tmp_path)
    doc = _validate(nb.read_text(encoding="utf-8"))
    assert _sources(doc)[1] == '@jax.jit\ndef f(x):\n    jax.debug.print("{}", x)\n    return x\n'
    assert _sources(doc)[2] == "total = 1\n(count): int = 1\n"


def test_gitignore_applies_to_notebooks_and_checkpoints_are_skipped(tmp_path: Path) -> None:
    hazard = (("code", ["import jax\n"]), ("code", ["@jax.jit\n", "def f(x):\n", "    print(x)\n", "    return x\n"]))
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("scratch/\n*.nbconvert.ipynb\n!keep.nbconvert.ipynb\n")
    for name in ("exp.ipynb", "scratch/try.ipynb", "exp.nbconvert.ipynb", "sub/keep.nbconvert.ipynb",
                 "sub/.ipynb_checkpoints/exp-checkpoint.ipynb"):
        _notebook(tmp_path / name, *hazard)

    def paths(*args: str) -> list[str]:
        res = _jaxlint("--format", "json", *args, cwd=tmp_path)
        return sorted({f["path"] for f in json.loads(res.stdout)["findings"]})

    assert paths(".") == ["exp.ipynb", "sub/keep.nbconvert.ipynb"]
    assert paths("--no-respect-gitignore", ".") == ["exp.ipynb", "exp.nbconvert.ipynb", "scratch/try.ipynb",
                                                     "sub/keep.nbconvert.ipynb"]
    assert paths("--config", "respect-gitignore = false", "--config", 'include = ["*.py"]', ".") == []
    assert paths("scratch/try.ipynb") == ["scratch/try.ipynb"]  # named: checked even when ignored


def test_stdin_with_command_line_per_file_ignores_statistics_and_quiet(tmp_path: Path) -> None:
    source = b"import jax\n\n@jax.jit\ndef f(x):\n    print(x)\n    if x > 0:\n        return x\n    return -x\n"
    ignored = _jaxlint("--format", "json", "--per-file-ignores", "tests/*:JL201", "-", "--stdin-filename",
                       "tests/test_f.py", cwd=tmp_path, stdin=source)
    assert [(f["path"], f["name"]) for f in json.loads(ignored.stdout)["findings"]] == [("tests/test_f.py", "traced-if")]
    other = _jaxlint("--format", "json", "--per-file-ignores", "tests/*:JL201", "-", "--stdin-filename",
                     "src/f.py", cwd=tmp_path, stdin=source)
    assert sorted(f["name"] for f in json.loads(other.stdout)["findings"]) == ["print-in-trace", "traced-if"]
    stats = _jaxlint("--statistics", "-", "--stdin-filename", "src/f.py", cwd=tmp_path, stdin=source)
    assert stats.returncode == 1
    assert stats.stdout.decode().splitlines() == ["1\tJL101\t[ ] traced-if", "1\tJL201\t[*] print-in-trace"]
    quiet = _jaxlint("-q", "-", "--stdin-filename", "src/f.py", cwd=tmp_path, stdin=source)
    out = quiet.stdout.decode()
    assert out.startswith("src/f.py:5:5: JL201 [*] [print-in-trace]") and "finding" not in out.splitlines()[-1]
    assert "fixable" not in out
    # --fix on a buffer: the fixed text on stdout, what is left on stderr, quiet as asked.
    fixed = _jaxlint("--fix", "-q", "-", "--stdin-filename", "src/f.py", cwd=tmp_path, stdin=source)
    assert fixed.stdout == source.replace(b"print(x)", b'jax.debug.print("{}", x)')
    assert fixed.stderr.decode().startswith("src/f.py:6:5: JL101 [traced-if]")
    assert "Fixed" not in fixed.stderr.decode()


def test_stdin_notebook_fix_removes_unused_suppressions_to_stdout(tmp_path: Path) -> None:
    nb = _notebook(tmp_path / "given.ipynb", *COMMENTS)
    data = nb.read_bytes()
    res = _jaxlint("--fix", "--extend-select", "unused-suppression", "-", "--stdin-filename", "nbs/train.ipynb",
                   cwd=tmp_path, stdin=data)
    assert res.returncode == 1
    doc = _validate(res.stdout.decode())
    assert "    y = jnp.abs(x)\n    return y  # noqa: E501\n" in _sources(doc)[2]
    assert "nbs/train.ipynb:cell 3:5:49: JL903 [invalid-suppression]" in res.stderr.decode()
    assert nb.read_bytes() == data and not (tmp_path / "nbs").exists()
