"""What `pytest --jaxlint` costs on a real test run, and how many findings it gives a verdict.

    python bench/plugin.py PROJECT TEST [TEST ...] [--runs N] [--python PY]

Runs `PY -m pytest -q -p no:cacheprovider TEST...` in PROJECT, with and without `--jaxlint`, in turn
(A B A B ...) so that drift of a shared machine hits both alike, and prints the median wall and CPU
seconds of each and their ratio (the first pair is a warm-up that also fills jaxlint's cache). Then
`jaxlint --no-verify --format json` over the test modules and over every file the plugin checked says
how many findings got a verdict from the tests. PY must have jaxlint installed (the entry point) or on
PYTHONPATH, and the project's test dependencies. The project is never modified apart from its
`.jaxlint_cache/`.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time


def _run(cmd: list[str], cwd: str) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (user + system of the children) and stdout of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.stdout + proc.stderr


def _coverage(py: str, project: str, paths: list[str]) -> tuple[int, int, int]:
    """(findings, confirmed by tests, refuted by tests) over `paths`."""
    out = subprocess.run([py, "-m", "jaxlint", "--no-verify", "--format", "json", *paths], cwd=project,
                         capture_output=True, text=True).stdout
    found = json.loads(out)["findings"] if out.strip() else []
    tests = [f for f in found if f["verification"].get("source") == "tests"]
    return (len(found), sum(f["verification"]["status"] == "confirmed" for f in tests),
            sum(f["verification"]["status"] == "refuted" for f in tests))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("project")
    ap.add_argument("tests", nargs="+")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    base = [args.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args.tests]
    with_plugin = base[:4] + ["--jaxlint"] + base[4:]
    a: list[tuple[float, float]] = []
    b: list[tuple[float, float]] = []
    summary = ""
    for i in range(args.runs + 1):
        wall, cpu, out = _run(with_plugin, args.project)
        summary = "\n".join(line for line in out.splitlines() if line.startswith("jaxlint:"))
        if i:
            a.append((wall, cpu))
        wall, cpu, _ = _run(base, args.project)
        if i:
            b.append((wall, cpu))
    med = lambda xs, k: statistics.median(x[k] for x in xs)  # noqa: E731
    ratios = [x[0] / y[0] for x, y in zip(a, b)]
    cpu_ratios = [x[1] / y[1] for x, y in zip(a, b)]
    print(f"{' '.join(args.tests)} in {args.project} ({args.runs} runs each, Python {args.python})")
    print(f"  without --jaxlint: {med(b, 0):7.1f} s wall, {med(b, 1):7.1f} s CPU (medians)")
    print(f"  with    --jaxlint: {med(a, 0):7.1f} s wall, {med(a, 1):7.1f} s CPU (medians)")
    print(f"  ratio, pair by pair: {statistics.median(ratios):.2f}x wall, {statistics.median(cpu_ratios):.2f}x CPU")
    print("  " + summary.replace("\n", "\n  "))
    n, c, r = _coverage(args.python, args.project, args.tests)
    print(f"  findings in the test modules: {n}, with a verdict from the tests: {c + r} "
          f"({c} confirmed, {r} refuted){f', {100 * (c + r) / n:.0f} %' if n else ''}")
    m = re.search(r"jaxlint: (\d+) findings? in \d+ files checked", summary)
    v = re.search(r"jaxlint: (\d+) confirmed, (\d+) refuted", summary)
    if m and v and int(m.group(1)):
        total, got = int(m.group(1)), int(v.group(1)) + int(v.group(2))
        print(f"  findings in every file the plugin checked: {total}, with a verdict: {got} "
              f"({100 * got / total:.0f} %)")


if __name__ == "__main__":
    main()
