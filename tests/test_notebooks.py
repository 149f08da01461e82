"""Notebooks, for real: the fixture notebook linted and verified through the command line, fixed and
suppressed in place (valid nbformat, nothing but the cell sources changed), bad notebooks, and the
other output formats."""
from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

from fixture_markers import _EXPECT, _ITEM
from jaxlint.notebook import load, neutralise

DATA = Path(__file__).parent / "notebook_data"
HAZARDS = DATA / "hazards.ipynb"
SRC = Path(__file__).resolve().parent.parent / "src"


def _jaxlint(*args: str, cwd: Path, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run([sys.executable, "-m", "jaxlint", "--isolated", *args], cwd=cwd, env=env,
                          input=stdin, capture_output=True, timeout=600)


def _markers(path: Path) -> set[tuple[int, int, str, str | None]]:
    """(cell, line, slug, status) of every `# expect:` marker, read with tokenize from the cells' Python."""
    out = set()
    for cell in load(path.read_bytes()).cells:
        text = "\n".join(cell.lines) + "\n"
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT and (m := _EXPECT.search(tok.string)):
                for item in m.group("body").split(","):
                    im = _ITEM.match(item.strip())
                    out.add((cell.number, tok.start[0], im.group("slug"), im.group("status")))
    return out


def _validate(path: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbformat.validate(nbformat.reads(path.read_text(encoding="utf-8"), as_version=nbformat.NO_CONVERT))


def test_fixture_notebook_findings_in_cells_json_and_text_verified(tmp_path: Path) -> None:
    nb = tmp_path / "hazards.ipynb"
    shutil.copy(HAZARDS, nb)
    cache = str(tmp_path / "cache")
    res = _jaxlint("--format", "json", "--cache-dir", cache, "hazards.ipynb", cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    doc = json.loads(res.stdout)
    got = {(f["cell"], f["line"], f["name"], f["verification"]["status"]) for f in doc["findings"]}
    assert got == {(c, l, s, st) for c, l, s, st in _markers(HAZARDS)}
    assert len(doc["findings"]) == len(got) == 5
    assert all(list(f)[:3] == ["path", "cell", "line"] for f in doc["findings"])
    # The cross-cell hazard: `report` (cell 4) is traced because `train` (cell 7) calls it.
    printed = next(f for f in doc["findings"] if f["name"] == "print-in-trace")
    assert "called from `train`" in printed["message"]
    # Evidence speaks in cells too.
    traced_if = next(f for f in doc["findings"] if f["name"] == "traced-if")
    assert "cell 3, line 3" in traced_if["verification"]["detail"]

    text = _jaxlint("--cache-dir", cache, "hazards.ipynb", cwd=tmp_path)
    heads = re.findall(r"^(hazards\.ipynb:cell \d+:\d+:\d+: JL\d+)", text.stdout.decode(), re.M)
    assert heads == [f"hazards.ipynb:cell {f['cell']}:{f['line']}:{f['column']}: {f['code']}"
                     for f in doc["findings"]]
    assert "    if x > 0:  # expect: traced-if[confirmed]\n        ^^^^^^^^" in text.stdout.decode()


def test_notebooks_are_found_in_folders_and_include_is_configurable(tmp_path: Path) -> None:
    shutil.copy(HAZARDS, tmp_path / "exp.ipynb")
    res = _jaxlint("--no-verify", "--format", "json", ".", cwd=tmp_path)
    assert {f["path"] for f in json.loads(res.stdout)["findings"]} == {"exp.ipynb"}
    (tmp_path / "pyproject.toml").write_text('[tool.jaxlint]\ninclude = ["*.py"]\n')
    off = subprocess.run([sys.executable, "-m", "jaxlint", "--no-verify", "."], cwd=tmp_path, capture_output=True,
                         env={**os.environ, "PYTHONPATH": str(SRC)}, text=True)
    assert off.returncode == 0 and "0 files checked" in off.stdout


def _without_sources(text: str) -> list:
    doc = json.loads(text, object_pairs_hook=list)
    return [[kv for kv in cell if kv[0] != "source"] for cell in dict(doc)["cells"]], [kv for kv in doc if kv[0] != "cells"]


def test_fix_changes_only_the_fixed_cell_sources(tmp_path: Path) -> None:
    nb = tmp_path / "hazards.ipynb"
    shutil.copy(HAZARDS, nb)
    before = nb.read_text(encoding="utf-8")
    res = _jaxlint("--no-verify", "--fix", "hazards.ipynb", cwd=tmp_path)
    assert res.returncode == 1, res.stderr  # traced-if and traced-conversion have no fix
    after = nb.read_text(encoding="utf-8")
    _validate(nb)
    old, new = json.loads(before)["cells"], json.loads(after)["cells"]
    changed = [i + 1 for i, (a, b) in enumerate(zip(old, new)) if a != b]
    assert changed == [4, 7, 9]
    assert _without_sources(before) == _without_sources(after)  # outputs, metadata, ids, key order
    # Formatting: the fixture is in Jupyter's own layout, and stays in it byte for byte.
    assert after == json.dumps(json.loads(after), indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    assert "".join(new[3]["source"]).splitlines()[2] == '    jax.debug.print("value {}", v)  # expect: print-in-trace[confirmed]'
    assert new[8]["source"].splitlines()[2].startswith("arr = arr.at[0].set(1.0)")
    assert isinstance(new[8]["source"], str) and isinstance(new[6]["source"], list)
    cell7 = "".join(new[6]["source"])
    assert "files = !ls\njitted = jax.jit(lambda y: y * 2.0)\nfor i in range(3):\n    g = jitted" in cell7
    assert "%timeit train(jnp.ones(3)).block_until_ready()" in cell7  # magics come back as written
    again = _jaxlint("--no-verify", "--fix", "hazards.ipynb", cwd=tmp_path)
    assert nb.read_text(encoding="utf-8") == after, again.stderr


def test_fix_keeps_an_unusual_layout(tmp_path: Path) -> None:
    # Two-space indentation, keys out of order, sources as strings, non-ASCII escaped.
    doc = {"nbformat_minor": 5, "nbformat": 4, "metadata": {"language_info": {"name": "python"}},
           "cells": [{"source": "import jax\n\n@jax.jit\ndef f(x):\n    print('é', x)\n    return x", "outputs": [],
                      "metadata": {"tags": ["ünïcode"]}, "cell_type": "code", "id": "a1", "execution_count": None}]}
    text = json.dumps(doc, indent=2, ensure_ascii=True)
    nb = tmp_path / "odd.ipynb"
    nb.write_text(text, encoding="utf-8")
    res = _jaxlint("--no-verify", "--fix", "odd.ipynb", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    after = nb.read_text(encoding="utf-8")
    assert after.isascii()
    old_source = re.search(r'"source": ("(?:[^"\\]|\\.)*")', text).group(1)
    new_source = re.search(r'"source": ("(?:[^"\\]|\\.)*")', after).group(1)
    assert after == text.replace(old_source, new_source)
    assert "jax.debug.print(\"\u00e9 {}\", x)" in json.loads(new_source)
    _validate(nb)


def test_add_noqa_in_cells_then_clean(tmp_path: Path) -> None:
    nb = tmp_path / "hazards.ipynb"
    shutil.copy(HAZARDS, nb)
    res = _jaxlint("--no-verify", "--add-noqa", "hazards.ipynb", cwd=tmp_path)
    assert res.returncode == 0 and b"Added 5 suppression comments" in res.stdout, res.stderr
    _validate(nb)
    assert _without_sources(HAZARDS.read_text(encoding="utf-8")) == _without_sources(nb.read_text(encoding="utf-8"))
    assert _jaxlint("--no-verify", "hazards.ipynb", cwd=tmp_path).returncode == 0


BAD = {
    "truncated.ipynb": b'{"cells": [{"cell_type": "code", "source": "x = 1"',
    "v3.ipynb": json.dumps({"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "worksheets": []}).encode(),
    "binary.ipynb": b"\xff\xfe\x00junk",
    "list.ipynb": b"[1, 2, 3]",
}


def test_bad_notebooks_are_findings_not_crashes(tmp_path: Path) -> None:
    for name, data in BAD.items():
        (tmp_path / name).write_bytes(data)
    cell = lambda src: {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": src}
    mixed = {"nbformat": 4, "nbformat_minor": 4, "metadata": {}, "cells": [
        cell(7), cell(["import jax\n", "@jax.jit\n", "def f(x):\n", "    if x:\n", "        return x\n", "    return -x"]),
        cell("def broken(:\n    pass"), cell("@jax.jit\ndef g(x):\n    return float(x)")]}
    (tmp_path / "mixed.ipynb").write_text(json.dumps(mixed))
    res = _jaxlint("--no-verify", "--format", "json", ".", cwd=tmp_path)
    assert res.returncode == 1 and not res.stderr, res.stderr
    found = {(f["path"], f.get("cell"), f["line"], f["name"]) for f in json.loads(res.stdout)["findings"]}
    assert found == {
        ("truncated.ipynb", None, 1, "syntax-error"), ("v3.ipynb", None, 1, "syntax-error"),
        ("binary.ipynb", None, 1, "syntax-error"), ("list.ipynb", None, 1, "syntax-error"),
        ("mixed.ipynb", 1, 1, "syntax-error"), ("mixed.ipynb", 2, 4, "traced-if"),
        ("mixed.ipynb", 3, 1, "syntax-error"),  # the broken cell is reported; the cells after it are still checked
        ("mixed.ipynb", 4, 3, "traced-conversion"),
    }
    messages = {f["path"]: f["message"] for f in json.loads(res.stdout)["findings"] if f.get("cell") is None}
    assert "nbformat 3" in messages["v3.ipynb"] and "not valid JSON" in messages["truncated.ipynb"]


def test_a_large_notebook_of_outputs(tmp_path: Path) -> None:
    blob = "A" * (5 * 1024 * 1024)  # 10 such outputs: a 50 MB notebook
    cells = [{"cell_type": "code", "execution_count": i, "id": f"c{i}", "metadata": {},
              "outputs": [{"data": {"image/png": blob}, "metadata": {}, "output_type": "display_data"}],
              "source": ["import jax\n", "@jax.jit\n", f"def f{i}(x):\n", "    print(x)\n", "    return x"]}
             for i in range(10)]
    nb = tmp_path / "big.ipynb"
    nb.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1))
    res = _jaxlint("--no-verify", "--fix", "big.ipynb", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert nb.stat().st_size > 50_000_000
    doc = json.loads(nb.read_text())
    assert all("jax.debug.print" in "".join(c["source"]) and c["outputs"][0]["data"]["image/png"] == blob
               for c in doc["cells"])


def test_sarif_and_github_point_at_the_notebook_file(tmp_path: Path) -> None:
    nb = tmp_path / "hazards.ipynb"
    shutil.copy(HAZARDS, nb)
    file_lines = nb.read_text(encoding="utf-8").splitlines()
    sarif = json.loads(_jaxlint("--no-verify", "--format", "sarif", "hazards.ipynb", cwd=tmp_path).stdout)
    results = sarif["runs"][0]["results"]
    assert len(results) == 5
    first = next(r for r in results if r["ruleId"] == "JL101")
    loc = first["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"]["uri"] == "hazards.ipynb"
    assert "if x > 0:" in file_lines[loc["region"]["startLine"] - 1]  # the file's line storing the flagged line
    assert first["properties"]["cell"] == 3 and "(cell 3, line 3, column 5)" in first["message"]["text"]
    import jsonschema

    schema = json.loads((Path(__file__).parent / "sarif-schema-2.1.0.json").read_text())
    jsonschema.validators.validator_for(schema)(schema).validate(sarif)
    gh = _jaxlint("--no-verify", "--format", "github", "hazards.ipynb", cwd=tmp_path).stdout.decode()
    line = next(l for l in gh.splitlines() if "JL304" in l)
    at = int(re.search(r",line=(\d+)", line).group(1))
    assert "arr[0] = 1.0" in file_lines[at - 1] and "cell 9, line 3" in line


@pytest.mark.parametrize("lines, expected", [
    (["%timeit f(x)", "x = 1"], ["pass", "x = 1"]),
    (["for i in r:", "    %time f(i)"], ["for i in r:", "    pass"]),
    (["!pip install \\", "   numpy", "y = 2"], ["pass", "", "y = 2"]),
    (["obj?", "obj.attr??", "?jnp.where", "x = 1  # why?"], ["pass", "pass", "pass", "x = 1  # why?"]),
    (["files = !ls", "t = %time f()"], ["files = None", "t = None"]),
    (['s = """', "%d items", "!done", '"""', "%who"], ['s = """', "%d items", "!done", '"""', "pass"]),
    (["x = (1 +", "%2)"], ["x = (1 +", "%2)"]),
    (["%%time", "a = 1"], ["", "a = 1"]),
    (["y = a % b", "z = not_magic!= 3"], ["y = a % b", "z = not_magic!= 3"]),
])
def test_neutralise(lines: list[str], expected: list[str]) -> None:
    out = neutralise(lines)
    assert out is not None and out[0] == expected


def test_non_python_cell_magics_are_skipped() -> None:
    assert neutralise(["%%bash", "echo hi"]) is None
    assert neutralise(["", "%%html", "<b>x</b>"]) is None


def test_stdin_notebook(tmp_path: Path) -> None:
    res = _jaxlint("--no-verify", "--format", "json", "-", "--stdin-filename", "lab/exp.ipynb", cwd=tmp_path,
                   stdin=HAZARDS.read_bytes())
    assert res.returncode == 1, res.stderr
    found = json.loads(res.stdout)["findings"]
    assert {(f["path"], f["cell"], f["line"]) for f in found} == {("lab/exp.ipynb", c, l) for c, l, _, _ in _markers(HAZARDS)}
