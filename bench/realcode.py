"""Precision of jaxlint on real repositories, against verdicts judged by people.

    python bench/realcode.py CORPUS_DIR [--judged bench/realcode/judged.json]
        [--repos bench/realcode/repos.json] [--jobs N] [--save-findings FILE] [--select RULES] [--verify]

CORPUS_DIR holds one folder per repository, named as the keys of repos.json (the sources at the
commits recorded there); repositories that are missing are skipped. Export only the Python files,
`git --git-dir=GITDIR archive COMMIT -- ':(glob)**/*.py' | tar -x -C CORPUS_DIR/KEY`: a repository
snapshot may lack large non-Python blobs (images, notebooks), and an archive of the whole tree stops
at the first one it cannot read, silently leaving the folder incomplete. Each one is linted by a
`jaxlint --no-verify --no-cache --format json` child process (only the files matching its
"include" glob, when repos.json gives one). A finding is matched to a judgement on
(repo, path, line, rule), with the path relative to the repository folder, and on its subject when the
judgement records one: the first `name` its message quotes. A finding on a judged line about another
name than the one judged is a new finding, not the judged one.

judged.json is {"findings": [{"repo", "path", "line", "rule", "verdict": "TRUE"|"FALSE",
"reason", "cause"?, "subject"?}, ...]}. The table counts, per rule: judged TRUE and still reported (kept),
judged TRUE and no longer reported (lost), judged FALSE and still reported, judged FALSE and
gone, and findings nobody judged yet (new); precision = kept / (kept + FALSE still reported).
The lost and the new findings are listed after it, for a reviewer to judge.

--jobs N lints N repositories at a time. --select is passed to jaxlint and also limits which
judgements count. --save-findings writes every finding, with its verdict if judged, as JSON;
--from-findings reads such a file instead of running jaxlint (the report of an earlier run against the
judgements as they are now). --record-subjects writes into the judged file the subject of each judged
line reported about one name only, for the judgements that lack one.
--verify runs jaxlint's verification too (it imports and traces the repositories' code, fenced as
jaxlint always fences it; slow) and adds a second table: per rule, how the judged findings were
verified (confirmed / refuted / unverified, for TRUE and for FALSE ones), then every judged finding
the verifier contradicts (a TRUE one refuted, a FALSE one confirmed), with its evidence.
Exit status: 0, or 2 for a usage error or when jaxlint failed on a repository.
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
NOT_TRACE_MODEL = {"prng-key-reuse", "syntax-error"}
Key = tuple[str, str, int, str]  # (repo, path, line, rule)


class UsageError(Exception):
    pass


def load_json(path: str, what: str) -> Any:
    if not os.path.isfile(path):
        raise UsageError(f"{what} not found: {path}")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot read {what} {path}: {e}") from None


def load_judged(path: str) -> dict[Key, dict]:
    data = load_json(path, "judged file")
    entries = data.get("findings") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise UsageError(f'{path}: expected {{"findings": [...]}}')
    judged: dict[Key, dict] = {}
    for i, e in enumerate(entries):
        try:
            key = (e["repo"], e["path"], int(e["line"]), e["rule"])
            if e["verdict"] not in ("TRUE", "FALSE"):
                raise ValueError(f"verdict {e['verdict']!r}")
        except (KeyError, TypeError, ValueError) as err:
            raise UsageError(f"{path}: entry {i} is malformed ({err})") from None
        if key in judged and judged[key]["verdict"] != e["verdict"]:
            print(f"warning: conflicting verdicts for {key}; keeping the first", file=sys.stderr)
        judged.setdefault(key, e)
    return judged


_QUOTED = re.compile(r"`([^`]+)`")


def subject_of(finding: dict) -> str:
    """The name a finding is about: the first one its message quotes ("" when it quotes none)."""
    m = _QUOTED.search(finding.get("message") or "")
    return m.group(1) if m else ""


def rule_codes() -> dict[str, str]:
    """Rule name -> code, from `jaxlint rule --all`."""
    out = subprocess.run([sys.executable, "-m", "jaxlint", "rule", "--all", "--format", "json"],
                         capture_output=True, text=True)
    try:
        return {r["name"]: r["code"] for r in json.loads(out.stdout)}
    except (ValueError, KeyError, TypeError):
        return {}


def selector(select: str | None) -> Any:
    """A predicate on rule names mirroring jaxlint's --select (codes, code prefixes, names)."""
    if not select:
        return lambda rule: True
    tokens = [t.strip() for t in select.split(",") if t.strip()]
    codes = rule_codes()
    return lambda rule: any(t == rule or codes.get(rule, "").startswith(t.upper()) for t in tokens)


def targets(folder: str, include: str | None) -> list[str]:
    if not include:
        return [folder]
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            rel = os.path.relpath(os.path.join(root, name), folder)
            if name.endswith(".py") and (fnmatch.fnmatch(rel, include) or fnmatch.fnmatch(name, include)):
                found.append(os.path.join(root, name))
    return found


def lint(repo: str, folder: str, include: str | None, select: str | None,
         jobs: int, verify: bool = False) -> tuple[list[dict], str | None]:
    """Findings of one repository (paths relative to its folder), or an error message."""
    paths = targets(folder, include)
    if not paths:
        return [], None
    cmd = [sys.executable, "-m", "jaxlint", "--verify" if verify else "--no-verify", "--no-cache",
           "--format", "json", "-j", str(jobs)]
    if select:
        cmd += ["--select", select]
    start = time.perf_counter()
    proc = subprocess.run(cmd + paths, capture_output=True, text=True)
    SECONDS[repo] = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        lines = proc.stderr.strip().splitlines() or ["(no output)"]
        more = f" (and {len(lines) - 3} more lines)" if len(lines) > 3 else ""
        return [], f"jaxlint exited {proc.returncode}: " + "\n  ".join(lines[:3]) + more
    try:
        raw = json.loads(proc.stdout)["findings"]
    except (ValueError, KeyError, TypeError) as e:
        return [], f"unreadable jaxlint output ({e})"
    return [{"repo": repo, "path": os.path.relpath(f["path"], folder).replace(os.sep, "/"),
             "line": f["line"], "rule": f["name"], "code": f.get("code"), "column": f.get("column"),
             "function": f.get("function"), "message": f.get("message", ""),
             **({"verification": f["verification"]} if verify and f.get("verification") else {})} for f in raw], None


# Wall time of each repository's jaxlint run (with --jobs N, N runs share the machine: a guide, not a benchmark).
SECONDS: dict[str, float] = {}

COLUMNS = ["TRUE kept", "TRUE lost", "FALSE still", "FALSE gone", "new", "precision"]


def row(c: dict[str, int]) -> list[str]:
    judged = c["TRUE kept"] + c["FALSE still"]
    prec = f"{c['TRUE kept'] / judged:.0%}" if judged else "-"
    return [str(c[k]) for k in COLUMNS[:-1]] + [prec]


STATUSES = ["confirmed", "refuted", "unverified"]


def print_verification(reported: dict[Key, dict], judged: dict[Key, dict], in_scope: Any) -> None:
    """How the verifier's verdicts on the judged findings still reported agree with the judgements."""
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    contradicted: list[tuple[Key, str, dict]] = []
    for key, f in reported.items():
        j = judged.get(key)
        if j is None or not in_scope(key[3]):
            continue
        status = (f.get("verification") or {}).get("status", "not-run")
        if status not in STATUSES:
            status = "unverified"
        counts[key[3]][f"{j['verdict']} {status}"] += 1
        if (j["verdict"], status) in (("TRUE", "refuted"), ("FALSE", "confirmed")):
            contradicted.append((key, j["verdict"], f))
    columns = [f"{v} {s}" for v in ("TRUE", "FALSE") for s in STATUSES]
    rules = sorted(counts)
    model = [r for r in rules if r not in NOT_TRACE_MODEL]
    table = [["rule", *columns]] + [[r, *(str(counts[r][c]) for c in columns)] for r in rules]
    table.append(["trace-model rules", *(str(sum(counts[r][c] for r in model)) for c in columns)])
    widths = [max(len(line[i]) for line in table) for i in range(len(columns) + 1)]
    print("\nverification of the judged findings (judged verdict, verifier's status):")
    for i, line in enumerate(table):
        print("  ".join([line[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(line[1:], widths[1:])]))
        if i == 0 or i == len(table) - 2:
            print("-" * (sum(widths) + 2 * len(columns)))
    print(f"\ncontradicted by the verifier ({len(contradicted)}):")
    for (repo, path, line_no, rule), verdict, f in sorted(contradicted, key=lambda x: x[0]):
        detail = (f.get("verification") or {}).get("detail", "")
        print(f"  {repo} {path}:{line_no} {rule} judged {verdict}: {detail}")


def record_subjects(path: str, on_line: dict[Key, list[dict]], measured: set[str]) -> int:
    """Add to the judged file's entries without a subject the subject of their line's findings, where the
    line is reported (in a measured repository) about one name only; how many were added."""
    data = load_json(path, "judged file")
    added = 0
    for e in data["findings"]:
        fs = on_line.get((e["repo"], e["path"], int(e["line"]), e["rule"]), [])
        subjects = {subject_of(f) for f in fs}
        if "subject" not in e and e["repo"] in measured and len(subjects) == 1 and "" not in subjects:
            e["subject"] = subjects.pop()
            added += 1
    with open(path, "w", encoding="utf-8") as out:
        json.dump(data, out, indent=1, ensure_ascii=False)
        out.write("\n")
    return added


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("corpus", metavar="CORPUS_DIR")
    p.add_argument("--judged", default=os.path.join(HERE, "realcode", "judged.json"))
    p.add_argument("--repos", default=os.path.join(HERE, "realcode", "repos.json"))
    p.add_argument("--jobs", type=int, default=1, help="repositories linted at a time")
    p.add_argument("--save-findings", metavar="FILE")
    p.add_argument("--select", metavar="RULES", help="rule codes, prefixes or names (as jaxlint)")
    p.add_argument("--verify", action="store_true", help="verify the findings too, and compare the verdicts")
    p.add_argument("--from-findings", metavar="FILE", help="a file --save-findings wrote, instead of running jaxlint")
    p.add_argument("--record-subjects", action="store_true",
                   help="write the subjects of the judged lines reported about one name into the judged file")
    args = p.parse_args(argv)
    try:
        if not os.path.isdir(args.corpus):
            raise UsageError(f"corpus folder not found: {args.corpus}")
        repos: dict[str, dict] = load_json(args.repos, "repository list")
        judged = load_judged(args.judged)
    except UsageError as e:
        print(f"realcode: {e}", file=sys.stderr)
        return 2

    present = [r for r in repos if os.path.isdir(os.path.join(args.corpus, r))]
    missing = [r for r in repos if r not in present]
    if args.from_findings:
        try:
            earlier = load_json(args.from_findings, "findings file").get("findings", [])
        except (UsageError, AttributeError) as e:
            print(f"realcode: {e}", file=sys.stderr)
            return 2
        results: dict[str, tuple[list[dict], str | None]] = {r: ([], None) for r in present}
        for f in earlier:
            if f.get("repo") in results:
                results[f["repo"]][0].append({k: v for k, v in f.items() if k != "verdict"})
    else:
        jobs = max(1, args.jobs)
        per_run = max(1, (os.cpu_count() or 1) // jobs)
        with ThreadPoolExecutor(jobs) as pool:
            results = dict(zip(present, pool.map(
                lambda r: lint(r, os.path.abspath(os.path.join(args.corpus, r)), repos[r].get("include"),
                               args.select, per_run, args.verify), present)))
    failed = {r: err for r, (_, err) in results.items() if err}
    measured = {r for r in present if r not in failed}
    in_scope = selector(args.select)

    on_line: dict[Key, list[dict]] = defaultdict(list)  # every finding, by judged key
    for r in present:
        for f in results[r][0]:
            on_line[(f["repo"], f["path"], f["line"], f["rule"])].append(f)

    def judged_one(key: Key, f: dict) -> bool:
        """Whether the judgement of this key is about this finding (its subject, when it records one)."""
        j = judged.get(key)
        return j is not None and (not j.get("subject") or j["subject"] == subject_of(f))

    # the first finding of each judged or new key, for the verification table and the saved verdicts
    reported: dict[Key, dict] = {}
    counts: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(COLUMNS[:-1], 0))
    lost: list[tuple[Key, dict]] = []
    new: list[dict] = []
    for key, j in judged.items():
        if key[0] not in measured or not in_scope(key[3]):
            continue
        hits = [f for f in on_line.get(key, []) if judged_one(key, f)]
        if hits:
            reported[key] = hits[0]
        column = ("TRUE kept" if hits else "TRUE lost") if j["verdict"] == "TRUE" \
            else ("FALSE still" if hits else "FALSE gone")
        counts[key[3]][column] += 1
        if column == "TRUE lost":
            lost.append((key, j))
    for key, fs in on_line.items():
        others = [f for f in fs if not judged_one(key, f)]
        if others and (key not in judged or key[0] in measured and in_scope(key[3])):
            counts[key[3]]["new"] += 1
            new.append(others[0])
            reported.setdefault(key, others[0])

    def total(rules: list[str]) -> dict[str, int]:
        return {c: sum(counts[r][c] for r in rules) for c in COLUMNS[:-1]}

    rules = sorted(counts)
    table = [["rule", *COLUMNS]] + [[r, *row(counts[r])] for r in rules]
    table.append(["trace-model rules", *row(total([r for r in rules if r not in NOT_TRACE_MODEL]))])
    table.append(["total", *row(total(rules))])
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS) + 1)]
    print(f"repositories: {len(measured)} measured"
          + (f", failed (not counted, see stderr): {', '.join(sorted(failed))}" if failed else "")
          + (f", missing from {args.corpus}: {', '.join(missing)}" if missing else ""))
    for i, line in enumerate(table):
        print("  ".join([line[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(line[1:], widths[1:])]))
        if i == 0 or i == len(table) - 3:
            print("-" * (sum(widths) + 2 * len(COLUMNS)))

    print(f"\nTRUE lost ({len(lost)}):")
    for (repo, path, line_no, rule), j in sorted(lost, key=lambda x: x[0]):
        print(f"  {repo} {path}:{line_no} {rule}  (judged: {j.get('reason', '')})")
    print(f"\nunjudged findings ({len(new)}):")
    for f in sorted(new, key=lambda f: (f["repo"], f["path"], f["line"], f["rule"])):
        j = judged.get((f["repo"], f["path"], f["line"], f["rule"]))
        moved = f"  (the line was judged {j['verdict']} for `{j['subject']}`)" if j else ""
        print(f"  {f['repo']} {f['path']}:{f['line']} {f['rule']}  {f['message']}{moved}")

    if args.verify:
        print_verification(reported, judged, in_scope)

    if args.record_subjects:
        recorded = record_subjects(args.judged, on_line, measured)
        print(f"\nsubjects recorded in {args.judged}: {recorded}")
    if args.save_findings:
        saved = [{**f, "verdict": judged[k]["verdict"]} if judged_one(k, f) else f
                 for k, fs in sorted(on_line.items()) for f in fs]
        with open(args.save_findings, "w", encoding="utf-8") as out:
            json.dump({"findings": saved}, out, indent=1)
            out.write("\n")
    if SECONDS:
        slowest = sorted(SECONDS.items(), key=lambda kv: -kv[1])[:10]
        print(f"\njaxlint time: {sum(SECONDS.values()):.0f} s over {len(SECONDS)} repositories; slowest: "
              + ", ".join(f"{r} {s:.1f} s" for r, s in slowest))
    for r, err in failed.items():
        print(f"realcode: {r}: {err}", file=sys.stderr)
    return 2 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
