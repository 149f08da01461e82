"""Benchmark jaxlint against libcst's parser (and Ruff, if installed), all in one run.

    python bench/bench.py [FOLDER ...] [--jobs N] [--skip-verify]

Default folder: bench/.corpus (fill it with `python bench/bench.py --fetch`, which downloads the
sources of a few JAX libraries from PyPI into that ignored folder), else fixtures/. Every row is
measured in a fresh child process, so peak memory (max RSS) is per phase; the CLI rows run with
jaxlint's bytecode compiled beforehand (into a temporary folder), as an installed package has it, even
where PYTHONDONTWRITEBYTECODE is set. The machines are shared and noisy: compare the ratios within one
run, not seconds across runs.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CORPUS = os.path.join(HERE, ".corpus")
PACKAGES = ["flax", "optax", "equinox", "diffrax", "numpyro", "chex", "distrax", "blackjax"]


def fetch() -> None:
    os.makedirs(CORPUS, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, *PACKAGES],
                       check=True)
        for name in os.listdir(tmp):
            if name.endswith(".whl"):
                dest = os.path.join(CORPUS, name.split("-")[0])
                shutil.rmtree(dest, ignore_errors=True)
                with zipfile.ZipFile(os.path.join(tmp, name)) as z:
                    z.extractall(dest)
    print(f"corpus in {CORPUS}")


# ---- phases, each run in a child process ---------------------------------------------------------


def _files(folders: list[str]) -> list[str]:
    sys.path.insert(0, os.path.join(ROOT, "src"))
    from jaxlint.api import discover

    return discover(folders)


def phase_parse(folders: list[str]) -> dict:
    import libcst

    files = _files(folders)
    sources = [open(p, "rb").read() for p in files]
    t = time.perf_counter()
    for s in sources:
        try:
            libcst.parse_module(s)
        except Exception:
            pass
    return {"seconds": time.perf_counter() - t, "files": len(files),
            "lines": sum(s.count(b"\n") for s in sources)}


def phase_static(folders: list[str]) -> dict:
    from collections import Counter

    from jaxlint.api import lint_source

    files = _files(folders)
    sources = [open(p, "rb").read() for p in files]
    t = time.perf_counter()
    counts: Counter = Counter()
    for p, s in zip(files, sources):
        for f in lint_source(s, p):
            counts[f.name] += 1
    return {"seconds": time.perf_counter() - t, "findings": dict(counts)}


def _child(phase: str, folders: list[str]) -> dict:
    code = (f"import json, sys; sys.path.insert(0, {os.path.join(ROOT, 'src')!r}); "
            f"sys.path.insert(0, {HERE!r}); import bench; "
            f"print(json.dumps(bench.phase_{phase}({folders!r})))")
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    result["peak_mb"] = max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
    return result


# The jaxlint commands run with their modules' bytecode at hand, as an installed package has it (pip compiles
# it at install time): where PYTHONDONTWRITEBYTECODE is set, every run would otherwise compile jaxlint's
# sources first (about 0.2 s), which the parse row, reading libcst's installed bytecode, does not pay.
_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _compile_jaxlint(pycache: str) -> None:
    """jaxlint's bytecode written under `pycache` (the children's PYTHONPYCACHEPREFIX), before any timing."""
    _ENV["PYTHONPYCACHEPREFIX"] = pycache
    where = subprocess.run([sys.executable, "-c", "import jaxlint, os; print(os.path.dirname(jaxlint.__file__))"],
                           capture_output=True, text=True, check=True, env=_ENV).stdout.strip()
    subprocess.run([sys.executable, "-m", "compileall", "-q", where], check=True, env=_ENV)


def _command(cmd: list[str]) -> tuple[float, float, str]:
    """Wall time, peak RSS (MiB) and stdout of a command, run as a fresh child."""
    wrapper = ("import resource, subprocess, sys, time, json; t = time.perf_counter(); "
               "p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
               "print(json.dumps({'s': time.perf_counter() - t, "
               "'rss': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 'out': p.stdout}))")
    out = subprocess.run([sys.executable, "-c", wrapper, *cmd], capture_output=True, text=True, env=_ENV).stdout
    d = json.loads(out.strip().splitlines()[-1])
    return d["s"], d["rss"], d["out"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="*")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--fetch", action="store_true", help="download the corpus into bench/.corpus and stop")
    ap.add_argument("--skip-verify", action="store_true", help="skip the verification rows")
    args = ap.parse_args()
    if args.fetch:
        fetch()
        return
    folders = args.folders or ([CORPUS] if os.path.isdir(CORPUS) else [os.path.join(ROOT, "fixtures")])
    for f in folders:
        if not os.path.isdir(f):
            sys.exit(f"bench: folder {f} does not exist (run `python bench/bench.py --fetch` for the default corpus)")
    jaxlint = [sys.executable, "-m", "jaxlint"]
    rows = []
    parse = _child("parse", folders)
    static = _child("static", folders)
    n, kloc = parse["files"], parse["lines"] / 1000
    rows.append(("libcst.parse_module only", parse["seconds"], parse["peak_mb"]))
    rows.append(("jaxlint static pass, serial (in-process)", static["seconds"], static["peak_mb"]))
    pycache = tempfile.TemporaryDirectory()
    _compile_jaxlint(pycache.name)
    with tempfile.TemporaryDirectory() as cache:
        s, rss, _ = _command(jaxlint + ["--no-verify", "--no-cache", "--jobs", "1", "--format", "json", *folders])
        rows.append(("jaxlint CLI --jobs 1, cold", s, rss))
        s, rss, _ = _command(jaxlint + ["--no-verify", "--no-cache", "--jobs", str(args.jobs), "--format", "json",
                                         *folders])
        rows.append((f"jaxlint CLI --jobs {args.jobs}, cold", s, rss))
        _command(jaxlint + ["--no-verify", "--cache-dir", cache, "--format", "json", *folders])
        s, rss, _ = _command(jaxlint + ["--no-verify", "--cache-dir", cache, "--format", "json", *folders])
        rows.append(("jaxlint CLI, warm cache", s, rss))
    if shutil.which("ruff"):
        s, rss, _ = _command(["ruff", "check", "--select", "E9,F", "--no-cache", "--exit-zero", "-q", *folders])
        rows.append(("ruff check --select E9,F --no-cache", s, rss))
    print(f"corpus: {', '.join(folders)}: {n} files, {kloc:.1f} kLOC\n")
    print(f"{'phase':<44} {'seconds':>8} {'files/s':>9} {'kLOC/s':>8} {'x parse':>8} {'peak MiB':>9}")
    for name, secs, mb in rows:
        print(f"{name:<44} {secs:8.2f} {n / secs:9.0f} {kloc / secs:8.1f} {secs / parse['seconds']:8.2f} {mb:9.0f}")
    print(f"\nfindings per rule (static): {json.dumps(static['findings'], sort_keys=True)}")
    if not args.skip_verify:
        fixtures = os.path.join(ROOT, "fixtures")
        # `--jobs` as given: left to itself, jaxlint uses only the processors the load average says are
        # idle, which on a shared machine turns a 2-lane measurement into a 1-lane one.
        lanes = ["--jobs", str(args.jobs)]
        s_static, _, _ = _command(jaxlint + ["--no-verify", "--no-cache", *lanes, "--format", "json", fixtures])
        s_verify, rss, out = _command(jaxlint + ["--no-cache", *lanes, "--format", "json", fixtures])
        doc = json.loads(out)
        functions = len({(f["path"], f["function"]) for f in doc["findings"]})
        print(f"\nverification over fixtures/ (--jobs {args.jobs}): static {s_static:.1f} s, "
              f"with verification {s_verify:.1f} s "
              f"({s_verify / s_static:.1f}x), {functions} flagged functions, "
              f"{(s_verify - s_static) / max(1, functions):.2f} s per function; peak {rss:.0f} MiB")
        target = 1.0 + 0.060 * functions
        spent = s_verify - s_static
        print(f"verification cost {spent:.1f} s cold against the target 1 s + 60 ms x {functions} = {target:.1f} s: "
              f"{'met' if spent <= target else 'not met'}")
        summary = doc["summary"]
        print(f"verdicts: {summary['confirmed']} confirmed, {summary['unverified']} unverified, "
              f"{summary['refuted']} refuted of {len(doc['findings'])} findings")


if __name__ == "__main__":
    main()
