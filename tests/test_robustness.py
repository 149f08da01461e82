"""Bad input never crashes jaxlint: odd files, odd trees, generated and mangled sources, a damaged cache."""
from __future__ import annotations

import json
import os
import random
import string
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxlint.api import lint_source
from jaxlint.cli import main

HAZARD = b"import jax\n\n@jax.jit\ndef f(x):\n    if x > 0:\n        return x\n    return -x\n"


def _json(*args: str) -> tuple[int, dict]:
    res = CliRunner().invoke(main, ["--no-verify", "--isolated", "--no-cache", "--format", "json", *args])
    assert res.exit_code in (0, 1), res.output
    return res.exit_code, json.loads(res.stdout)


CASES = {
    "empty.py": (b"", []),
    "comments.py": (b"# just a comment\n# another\n", []),
    "bom.py": (b"\xef\xbb\xbf" + HAZARD, ["traced-if"]),
    "crlf.py": (HAZARD.replace(b"\n", b"\r\n"), ["traced-if"]),
    "mixed_endings.py": (HAZARD.replace(b"\n", b"\r\n", 3), ["traced-if"]),
    "tabs.py": (HAZARD.replace(b"    ", b"\t"), ["traced-if"]),
    "latin1_declared.py": (b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + HAZARD, ["traced-if"]),
    "latin1_undeclared.py": (b"x = '\xe9'\n", ["syntax-error"]),
    "nul_byte.py": (b"x = 1\x00\n", ["syntax-error"]),
    "py312.py": (b"def f[T](x: T) -> T:\n    return x\n\ntype Alias = list[int]\n", None),
    "match.py": (b"def f(v):\n    match v:\n        case [a, b]:\n            return a\n        case _:\n            return None\n", []),
    "fstrings.py": (b"x = 1\ny = f\"{f'{x!r:>{4}}'}\"\n", []),
    "huge_line.py": (b"x = [" + b",".join(str(i).encode() for i in range(100000)) + b"]\n", []),
    "deep_expr.py": (b"x = " + b"(" * 150 + b"1" + b")" * 150 + b"\n", []),
    "long_chain.py": (b"x = " + b" + ".join([b"1"] * 3000) + b"\n", []),
    "deep_defs.py": (b"".join(b"    " * i + f"def f{i}(x):\n".encode() for i in range(90)) + b"    " * 90 + b"return x\n",
                     []),
    "truncated.py": (HAZARD[:40], ["syntax-error"]),
    # locals bound to each other's attributes: following receivers to their classes must stop
    "alias_cycle.py": (b"import jax\n\n@jax.jit\ndef f(p):\n    x = y.a\n    y = x.b\n    return x.count() + p\n", []),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_odd_files(tmp_path: Path, name: str) -> None:
    data, expected = CASES[name]
    (tmp_path / name).write_bytes(data)
    code, doc = _json(str(tmp_path))
    names = [f["name"] for f in doc["findings"]]
    if expected is not None:
        assert names == expected, doc["findings"]
    else:  # new syntax: parsed, or reported, never a crash
        assert set(names) <= {"syntax-error"}
    for f in doc["findings"]:
        assert "\n" not in f["message"]


def test_large_generated_file(tmp_path: Path) -> None:
    body = "".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(25000))
    (tmp_path / "big.py").write_text("import jax\n" + body + "\n@jax.jit\ndef g(x):\n    if x > 0:\n        return x\n    return x\n")
    code, doc = _json(str(tmp_path))
    assert code == 1 and [f["name"] for f in doc["findings"]] == ["traced-if"]


def test_odd_trees(tmp_path: Path) -> None:
    (tmp_path / "ok.py").write_bytes(HAZARD)
    (tmp_path / "dir.py").mkdir()  # a directory named like a module
    (tmp_path / "broken.py").symlink_to(tmp_path / "missing.py")
    (tmp_path / "loop").symlink_to(tmp_path)  # a symlink loop
    locked = tmp_path / "locked.py"
    locked.write_bytes(HAZARD)
    os.chmod(locked, 0)
    try:
        code, doc = _json(str(tmp_path), str(tmp_path / "ok.py"))
    finally:
        os.chmod(locked, 0o644)
    by_path = {Path(f["path"]).name: f for f in doc["findings"]}
    assert by_path["ok.py"]["name"] == "traced-if"
    if os.geteuid() != 0:  # root can read anything
        assert by_path["locked.py"]["name"] == "syntax-error"
        assert "Cannot read" in by_path["locked.py"]["message"]
    assert doc["summary"]["files"] >= 2


def test_missing_path_is_a_usage_error(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["--no-verify", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "does not exist" in res.output


# ---- generated and mangled sources --------------------------------------------------------------

FRAGMENTS = [
    "import jax\n", "import jax.numpy as jnp\n", "from functools import partial\n", "from jax import lax\n",
    "@jax.jit\n", "@partial(jax.jit, static_argnums=(1,))\n", "@jax.vmap\n",
    "def f(x, n):\n", "def g(x):\n", "    if x > 0:\n", "        x = x + 1\n", "    while n > 0:\n",
    "        n -= 1\n", "    print(x)\n", "    return x\n", "    return jnp.arange(n)\n", "    y = x[x > 0]\n",
    "    LOG.append(x)\n", "LOG = []\n", "for i in range(3):\n", "    h = jax.jit(lambda v: v + i)\n",
    "    key = jax.random.key(0)\n", "    a = jax.random.normal(key)\n", "    b = jax.random.normal(key)\n",
    "class M:\n", "    @jax.jit\n", "    def m(self, x):\n", "        return lax.scan(g, x, None)\n",
    "x = (\n", ")\n", "'''\n", "    else:\n", "\t", "\r\n", "\\\n", "async def h():\n", "    await x\n",
]


@st.composite
def sources(draw: st.DrawFn) -> bytes:
    parts = draw(st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=30))
    text = "".join(parts)
    mangle = draw(st.sampled_from(["none", "truncate", "splice", "reindent", "noise"]))
    if mangle == "truncate" and text:
        text = text[: draw(st.integers(0, len(text)))]
    elif mangle == "splice" and text:
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(0, len(text)))
        text = text[:i] + text[j:]
    elif mangle == "reindent":
        text = text.replace("    ", draw(st.sampled_from(["", "  ", "\t", "        "])))
    elif mangle == "noise":
        text += draw(st.text(alphabet=string.printable, max_size=20))
    return text.encode("utf-8", errors="replace")


@settings(max_examples=int(os.environ.get("JAXLINT_FUZZ_EXAMPLES", "150")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(sources())
def test_generated_sources_never_crash(source: bytes) -> None:
    findings = lint_source(source, "generated.py")
    for f in findings:
        assert f.line >= 1 and f.column >= 1
        json.dumps(f.to_json())


def test_generated_sources_through_the_cli(tmp_path: Path) -> None:
    rng = random.Random(7)
    for i in range(40):
        text = "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 25)))
        (tmp_path / f"gen_{i}.py").write_text(text[: rng.randint(0, len(text))])
    code, doc = _json(str(tmp_path))
    checked = doc["summary"]["files"]
    assert checked == 40
    assert all(f["name"] != "" for f in doc["findings"])


# ---- the cache ----------------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jaxlint", "--no-verify", "--isolated", "--format", "json", *args],
                          capture_output=True, text=True)


def test_damaged_cache_is_ignored_and_rebuilt(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.py").write_bytes(HAZARD)
    cache = tmp_path / "cache"
    first = _cli("--cache-dir", str(cache), str(src))
    entries = [p for p in cache.rglob("*.json")]
    assert entries
    for i, p in enumerate(entries):
        p.write_text(["", "{not json", '{"version": "0.0.0", "key": "x", "findings": [], "calls": []}'][i % 3])
    second = _cli("--cache-dir", str(cache), str(src))
    assert second.returncode == first.returncode == 1
    strip = lambda out: [f for f in json.loads(out)["findings"]]  # noqa: E731
    assert strip(second.stdout) == strip(first.stdout)


def test_concurrent_runs_share_the_cache(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for i in range(30):
        (src / f"m{i}.py").write_bytes(HAZARD)
    cache = tmp_path / "cache"
    cmd = [sys.executable, "-m", "jaxlint", "--no-verify", "--isolated", "--format", "json", "--cache-dir", str(cache),
           str(src)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate() for p in procs]
    assert all(p.returncode == 1 for p in procs), [o[1] for o in outs]
    docs = [json.loads(o[0])["findings"] for o in outs]
    assert docs[0] == docs[1] == docs[2]
    assert _cli("--cache-dir", str(cache), str(src)).returncode == 1
    assert not list(cache.rglob("*.tmp"))


def test_jobs_do_not_change_the_output(tmp_path: Path) -> None:
    fixtures = Path(__file__).resolve().parent.parent / "fixtures"
    one = _cli("--no-cache", "--jobs", "1", str(fixtures))
    two = _cli("--no-cache", "--jobs", "2", str(fixtures))
    a, b = json.loads(one.stdout), json.loads(two.stdout)
    a["summary"].pop("seconds"), b["summary"].pop("seconds")
    assert a == b


@pytest.mark.slow
def test_many_files_bounded_memory_and_same_output(tmp_path: Path) -> None:
    """A bounded version of the 5,000-file load test (JAXLINT_LOAD_FILES raises it)."""
    import resource
    import shutil

    fixtures = sorted((Path(__file__).resolve().parent.parent / "fixtures").rglob("*.py"))
    fixtures = [p for p in fixtures if "cross-file" not in p.parts]
    n = int(os.environ.get("JAXLINT_LOAD_FILES", "500"))
    for i in range(n):
        src = fixtures[i % len(fixtures)]
        shutil.copy(src, tmp_path / f"f{i:05d}_{src.name}")
    one = _cli("--no-cache", "--jobs", "1", str(tmp_path))
    two = _cli("--no-cache", "--jobs", "2", str(tmp_path))
    a, b = json.loads(one.stdout), json.loads(two.stdout)
    a["summary"].pop("seconds"), b["summary"].pop("seconds")
    assert a == b and a["summary"]["files"] == n
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    assert peak_mib < 1024, f"peak RSS {peak_mib:.0f} MiB"
