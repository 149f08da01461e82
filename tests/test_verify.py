"""Verification: verdicts from JAX on the fixtures, a refutation, and the fences around user code."""
from __future__ import annotations

import os
import time
from collections import defaultdict
from pathlib import Path

import pytest

from fixture_markers import read_markers
from jaxlint.api import Settings, lint_source, run
from jaxlint.findings import Finding, TraceTarget
from jaxlint.verify import verify_findings

pytest.importorskip("jax")

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "verify_data"


@pytest.fixture(scope="module")
def verified() -> dict[str, list[Finding]]:
    result = run(Settings(paths=[str(ROOT / "fixtures")], verify=True, verify_timeout=20.0, jobs=2))
    by_path: dict[str, list[Finding]] = defaultdict(list)
    for f in result.findings:
        by_path[str(Path(f.path).resolve())].append(f)
    return by_path


def test_fixture_verdicts_match_markers(verified: dict[str, list[Finding]]) -> None:
    problems = []
    for path in sorted((ROOT / "fixtures").rglob("*.py")):
        wanted = {(m.line, m.slug): m.status for m in read_markers(path) if not m.miss}
        for f in verified.get(str(path.resolve()), []):
            status = f.verification.status
            expected = wanted.get((f.line, f.name))
            if expected in ("confirmed", "refuted") and status != expected:
                problems.append(f"{path.relative_to(ROOT)}:{f.line} {f.name}: expected {expected}, got {status} "
                                f"({f.verification.detail})")
            if expected is None and status == "refuted":
                problems.append(f"{path.relative_to(ROOT)}:{f.line} {f.name}: a marked hazard was refuted "
                                f"({f.verification.detail})")
            if f.name != "syntax-error" and not f.verification.detail and status != "not-run":
                problems.append(f"{path.relative_to(ROOT)}:{f.line} {f.name}: verdict without evidence")
    assert not problems, "\n".join(problems)


def test_core_rules_confirmed_where_inputs_can_be_built(verified: dict[str, list[Finding]]) -> None:
    core = {"traced-if", "traced-while", "print-in-trace", "global-mutation"}
    confirmed = [f for fs in verified.values() for f in fs if f.name in core and f.verification.status == "confirmed"]
    assert len(confirmed) >= 40


def _finding(path: Path, line: int, name: str = "traced-if", transform: str = "jit", qualname: str = "f") -> Finding:
    target = TraceTarget(qualname, 0, transform)
    return Finding(str(path), line, 5, line, 10, "JL101", name, "", qualname, target=target)


def test_a_static_lookalike_forced_through_is_refuted() -> None:
    # The static pass knows `x.ndim` is static and stays quiet; force a finding there to see JAX disagree.
    path = DATA / "refutable.py"
    assert not lint_source(path.read_bytes(), str(path))
    f = _finding(path, 6)
    verify_findings([f], timeout=20)
    assert f.verification.status == "refuted", f.verification.detail
    assert "line 6 ran" in f.verification.detail


def test_pytree_structure_is_read_from_attribute_reads() -> None:
    path = DATA / "unknown_pytree.py"
    f = _finding(path, 6)
    verify_findings([f], timeout=20)
    assert f.verification.status == "confirmed", f.verification.detail
    assert "state: StateRecord(step=" in f.verification.detail


def test_an_input_that_cannot_be_built_is_unverified_with_reason() -> None:
    path = DATA / "method_called_on_input.py"
    f = _finding(path, 6)
    verify_findings([f], timeout=20)
    assert f.verification.status == "unverified"
    assert "`optimizer`" in f.verification.detail and "`update`" in f.verification.detail


@pytest.mark.parametrize(
    "name, words",
    [
        ("hang_at_import.py", ("longer than", "time limit")),
        ("exits_at_import.py", ("status 3",)),
        ("allocates_at_import.py", ("MemoryError", "memory", "killed")),
        ("import_fails.py", ("ModuleNotFoundError",)),
        ("exits_while_tracing.py", ("SystemExit",)),
        ("kills_itself.py", ("SIGKILL",)),
        ("interrupts.py", ("KeyboardInterrupt",)),
        ("opens_socket.py", ("ConnectionRefusedError", "OSError", "timeout")),
    ],
)
def test_fences_cost_only_the_verdict(name: str, words: tuple[str, ...]) -> None:
    path = DATA / name
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "if x > 0" in text)
    f = _finding(path, line)
    other = _finding(DATA / "refutable.py", 6)
    started = time.monotonic()
    verify_findings([f, other], timeout=8, memory_mb=1024, jobs=2)
    assert time.monotonic() - started < 60
    assert f.verification.status == "unverified"
    assert any(w in f.verification.detail for w in words), f.verification.detail
    assert other.verification.status == "refuted"  # the other file's verdict is unaffected


def test_a_missing_test_only_import_does_not_sink_the_other_definitions() -> None:
    path = DATA / "missing_test_helper.py"
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if "if x > 0" in t)
    f = _finding(path, line)
    verify_findings([f], timeout=20)
    assert f.verification.status == "confirmed", f.verification.detail


def test_top_level_training_does_not_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "trained.txt"
    monkeypatch.setenv("JAXLINT_TEST_MARKER", str(marker))
    path = DATA / "trains_at_top_level.py"
    found = lint_source(path.read_bytes(), str(path))
    assert [x.name for x in found] == ["traced-if"]
    verify_findings(found, timeout=20)
    assert found[0].verification.status == "confirmed", found[0].verification.detail
    assert not marker.exists(), "verification ran the module's top-level training loop"


def test_working_tree_unchanged(tmp_path: Path) -> None:
    before = sorted(os.listdir(DATA))
    f = _finding(DATA / "refutable.py", 6)
    verify_findings([f], timeout=20)
    assert sorted(os.listdir(DATA)) == before


def test_jit_of_a_named_function_in_a_loop_is_refuted() -> None:
    # `jax.jit(step)` in a loop is cached by JAX; forcing a jit-in-loop finding there must be refuted.
    path = ROOT / "fixtures" / "jit-in-loop" / "neg_named_function_in_loop.py"
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if "jax.jit(step)" in t)
    f = Finding(str(path), line, 13, line, 30, "JL401", "jit-in-loop", "", "train")
    verify_findings([f], timeout=20)
    assert f.verification.status == "refuted", f.verification.detail


def test_children_forked_by_user_code_do_not_outlive_the_worker(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    pid_file = tmp_path / "child.pid"
    monkeypatch.setenv("JAXLINT_TEST_CHILD", str(pid_file))
    path = DATA / "forks_at_import.py"
    f = _finding(path, next(i for i, t in enumerate(path.read_text().splitlines(), 1) if "if x > 0" in t))
    verify_findings([f], timeout=20)
    assert f.verification.status == "confirmed", f.verification.detail
    deadline = time.monotonic() + 10
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    pid = int(pid_file.read_text())
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, 9)
        pytest.fail("a process forked by the verified module survived the worker")


@pytest.mark.parametrize("name", ["noisy_at_import.py", "writes_files.py"])
def test_output_and_files_of_user_code_stay_fenced(name: str) -> None:
    before = sorted(p.name for p in ROOT.rglob("*") if p.is_file() and ".git" not in p.parts)
    line = next(i for i, t in enumerate((DATA / name).read_text().splitlines(), 1) if "if x > 0" in t)
    f = _finding(DATA / name, line)
    verify_findings([f], timeout=20)
    assert f.verification.status == "confirmed", f.verification.detail
    after = sorted(p.name for p in ROOT.rglob("*") if p.is_file() and ".git" not in p.parts)
    assert "litter.txt" not in after and len(after) == len(before)


def test_the_static_pass_subject_tells_apart_two_candidates_on_one_line() -> None:
    # Each flagged line holds two candidates (two globals, two jits, two impure calls, two keys): the
    # static pass hands the verifier the one it flagged, so the verdict is about that one.
    path = DATA / "two_on_a_line.py"
    found = lint_source(path.read_bytes(), str(path))
    assert all(f.subject for f in found), [f.name for f in found if not f.subject]
    assert all("subject" not in f.to_json() for f in found)  # not part of the output contract
    verify_findings(found, timeout=20)
    text = path.read_text().splitlines()

    def verdict(name: str, needle: str, subject_key: str, value: str) -> Finding:
        line = next(i for i, t in enumerate(text, 1) if needle in t)
        return next(f for f in found if f.name == name and f.line == line and f.subject[subject_key] == value)

    history = verdict("global-mutation", "HISTORY.append", "name", "HISTORY")
    tally = verdict("global-mutation", "HISTORY.append", "name", "TALLY")
    assert history.verification.status == tally.verification.status == "confirmed"
    assert "`HISTORY` grew" in history.verification.detail and "`TALLY` grew" in tally.verification.detail
    # Under `jax.grad` alone only the leaked tracer matters, and it is in the second global of the line.
    leak = verdict("global-mutation", "TRACERS.append", "name", "TRACERS")
    assert leak.verification.status == "confirmed", leak.verification.detail
    assert "`TRACERS` received a tracer" in leak.verification.detail
    # `jax.jit(double)` is cached by JAX; the lambda beside it is the one rebuilt on every pass.
    rebuilt = verdict("jit-in-loop", "jax.jit(double)", "callable", "lambda v: v * i")
    assert rebuilt.verification.status == "confirmed", rebuilt.verification.detail
    # JAX's checker does not see a repeated `fold_in`; the error raised two lines later is another reuse.
    folded = verdict("prng-key-reuse", "b = jax.random.fold_in", "key", "key")
    assert folded.verification.status == "unverified", folded.verification.detail
    drawn = verdict("prng-key-reuse", "y = jax.random.normal", "key", "a")
    assert drawn.verification.status == "confirmed" and "`a`" in drawn.verification.detail
    # The line runs while tracing, but only one of its two impure calls does.
    skipped = verdict("impure-call", "np.random.rand()", "callee", "numpy.random.rand")
    stamped = verdict("impure-call", "np.random.rand()", "callee", "time.time")
    assert skipped.verification.status == "unverified", skipped.verification.detail
    assert stamped.verification.status == "confirmed", stamped.verification.detail


def test_the_job_carries_the_subject_and_the_lint_cache_keeps_it(tmp_path: Path) -> None:
    from jaxlint.cache import _finding_from_json, _finding_to_json
    from jaxlint.verify import _job

    path = DATA / "two_on_a_line.py"
    found = lint_source(path.read_bytes(), str(path))
    job = _job(str(path), found, 10.0)
    assert [f["subject"] for f in job["findings"]] == [f.subject for f in found]
    assert [_finding_from_json(_finding_to_json(f)).subject for f in found] == [f.subject for f in found]


def test_key_reuse_is_checked_on_the_trace_and_by_running_when_it_cannot_be_traced() -> None:
    path = DATA / "key_reuse_needs_values.py"
    found = [f for f in lint_source(path.read_bytes(), str(path)) if f.name == "prng-key-reuse"]
    assert sorted(f.function for f in found) == ["noisy_when_positive", "traceable"]
    verify_findings(found, timeout=20)
    by_function = {f.function: f.verification for f in found}
    assert by_function["traceable"].status == "confirmed", by_function["traceable"].detail
    assert "key-reuse checker on the trace of traceable" in by_function["traceable"].detail
    eager = by_function["noisy_when_positive"]
    assert eager.status == "confirmed", eager.detail
    assert "with jax_debug_key_reuse" in eager.detail


def test_the_loop_named_by_the_static_pass_keeps_a_binding_above_it_out_of_each_pass() -> None:
    # Forced through (the rule stays quiet here): without the loop's first line, the binding of `step`
    # would be re-run on each pass as if it were in the loop body, and the jit "confirmed".
    path = DATA / "callable_bound_before_the_loop.py"
    lines = path.read_text().splitlines()
    loop = next(i for i, t in enumerate(lines, 1) if t.strip().startswith("for "))
    site = next(i for i, t in enumerate(lines, 1) if "jax.jit(step)" in t)
    f = Finding(str(path), site, 20, site, 35, "JL401", "jit-in-loop", "", "train",
                subject={"callable": "step", "loop_line": loop})
    verify_findings([f], timeout=20)
    assert f.verification.status == "refuted", f.verification.detail


def _line(path: Path, needle: str) -> int:
    return next(i for i, t in enumerate(path.read_text().splitlines(), 1) if needle in t)


def test_the_rank_the_body_reads_shapes_the_input() -> None:
    # `b, n, d = q.shape` fails on every candidate of another rank before the flagged line is reached.
    path = DATA / "rank_from_shape.py"
    found = {f.function: f for f in lint_source(path.read_bytes(), str(path))}
    verify_findings(list(found.values()), timeout=20)
    assert found["attend"].verification.status == "confirmed", found["attend"].verification.detail
    assert "q: f32[3,3,3]" in found["attend"].verification.detail
    assert found["last_channel"].verification.status == "confirmed", found["last_channel"].verification.detail
    # Forced through (the rule knows `d` is static): JAX runs the line, so the finding is refuted.
    static = _finding(path, _line(path, "if d > 2"), qualname="scale_by_width")
    verify_findings([static], timeout=20)
    assert static.verification.status == "refuted", static.verification.detail


def test_a_project_that_is_not_installed_imports_its_own_package_and_stands_in_for_absent_ones() -> None:
    path = DATA / "own_project" / "scripts" / "uses_own_package.py"
    found = {f.function: f for f in lint_source(path.read_bytes(), str(path))}
    assert sorted(found) == ["plotted_step", "step"]
    # A forced finding where JAX runs the line, but only after the code caught the stand-in's error.
    guarded = _finding(path, _line(path, "if x.ndim == 0"), qualname="guarded_step")
    verify_findings(list(found.values()), timeout=20)
    verify_findings([guarded], timeout=20)
    assert found["step"].verification.status == "confirmed", found["step"].verification.detail
    used = found["plotted_step"].verification
    assert used.status == "unverified" and "not installed" in used.detail, used.detail
    assert guarded.verification.status == "unverified", guarded.verification.detail
    assert "stand-in" in guarded.verification.detail and "no refutation" in guarded.verification.detail


def test_a_folder_of_modules_without_an_init_is_found_as_a_namespace_package() -> None:
    # `ownns_for_verify/solvers/norms.py` with no `__init__.py` anywhere: run from the project's root,
    # Python imports it as a namespace package, and so does verification.
    path = DATA / "own_project" / "scripts" / "uses_namespace_package.py"
    found = lint_source(path.read_bytes(), str(path))
    assert [f.function for f in found] == ["step"]
    verify_findings(found, timeout=20)
    assert found[0].verification.status == "confirmed", found[0].verification.detail


def test_a_sibling_module_inside_a_package_does_not_shadow_the_projects_top_level_package() -> None:
    # `layered_for_verify/agents/model.py` imports `toolbox_for_verify`; a module of that name sits beside it
    # (in a package folder) and the project's package of that name at its root. Run from the root, Python
    # imports the package: the package folder is never where top-level modules are looked up.
    path = DATA / "own_project" / "layered_for_verify" / "agents" / "model.py"
    found = lint_source(path.read_bytes(), str(path))
    assert [f.function for f in found] == ["step"]
    verify_findings(found, timeout=20)
    assert found[0].verification.status == "confirmed", found[0].verification.detail


def test_attributes_a_method_reads_from_self_are_built_as_it_reads_them() -> None:
    # `Pricer(path)` fails, so the instance is bare: `self.market.spot` is a record, `self.model.apply`
    # an object verification cannot build, which the evidence names instead of an AttributeError.
    path = DATA / "records_on_self.py"
    found = {f.function: f for f in lint_source(path.read_bytes(), str(path))}
    verify_findings(list(found.values()), timeout=20)
    assert found["Pricer.price"].verification.status == "confirmed", found["Pricer.price"].verification.detail
    unbuilt = found["Pricer.predict"].verification
    assert unbuilt.status == "unverified" and "`self.model` could not be built" in unbuilt.detail, unbuilt.detail


def test_an_error_the_enclosing_function_catches_still_confirms() -> None:
    # The test calls the jitted function in a `try` and goes on: the line ran under the trace and raised;
    # that the code caught the error does not make the line safe (it was refuted before).
    path = DATA / "caught_by_the_enclosing_test.py"
    found = lint_source(path.read_bytes(), str(path))
    assert [(f.name, f.line) for f in found] == [("traced-shape", _line(path, "for i in range(n)"))]
    verify_findings(found, timeout=20)
    v = found[0].verification
    assert v.status == "confirmed" and "caught by the code itself" in v.detail, v.detail


def test_flags_counts_and_indices_are_built_as_the_body_uses_them() -> None:
    # A bare instance: `self.use_bias` is only tested (a Python bool), `self.n_features` and
    # `range(self.num_rounds)` are counts (Python ints), `table[agent_id]` makes `agent_id` an integer
    # scalar. Built as arrays, the body failed before the flagged line and gave no verdict.
    path = DATA / "flags_and_counts_on_self.py"
    found = lint_source(path.read_bytes(), str(path))
    assert [(f.name, f.line) for f in found] == [("traced-if", _line(path, "if row.sum() > 0"))]
    verify_findings(found, timeout=20)
    assert found[0].verification.status == "confirmed", found[0].verification.detail


def test_an_attribute_with_a_leading_underscore_is_a_field_of_the_record() -> None:
    """`batch._pad_token`: a named tuple cannot have that field; the record stores it under another name
    and reads it through a property, so the trace reaches the flagged line."""
    path = DATA / "underscore_attribute.py"
    found = lint_source(path.read_bytes(), str(path))
    assert [f.name for f in found] == ["traced-if"]
    verify_findings(found, timeout=20)
    assert found[0].verification.status == "confirmed", found[0].verification.detail


def test_a_shape_a_call_site_builds_is_the_input_and_two_different_ones_give_none() -> None:
    path = DATA / "shape_from_call_site.py"
    found = {f.function: f for f in lint_source(path.read_bytes(), str(path))}
    verify_findings(list(found.values()), timeout=20)
    patches = found["to_patches"].verification
    assert patches.status == "confirmed" and "img: f32[2,6]" in patches.detail, patches.detail
    # Called with (2, 6) and with (3, 5): no shape is taken, and no candidate reaches the line.
    assert found["to_rows"].verification.status == "unverified", found["to_rows"].verification.detail


def test_findings_after_a_confirmed_item_assignment_are_traced_past_it() -> None:
    # The first item assignment raises and stops the trace; run as the functional update it should be,
    # the trace goes on and confirms the second assignment and the Python `if` after it.
    path = DATA / "several_item_assignments.py"
    found = lint_source(path.read_bytes(), str(path))
    assert sorted((f.name, f.line) for f in found) == [
        ("array-item-assignment", _line(path, "grid[0, 0] = x.sum()")),
        ("array-item-assignment", _line(path, "grid[1] += x.mean()")),
        ("traced-if", _line(path, "if grid.sum() > 0")),
    ]
    verify_findings(found, timeout=20)
    assert all(f.verification.status == "confirmed" for f in found), [
        (f.line, f.verification.status, f.verification.detail) for f in found]


def test_a_function_run_as_plain_python_gets_each_call_sites_literal_arguments() -> None:
    # `adjust(x0, h, 1, "1-sided")` and `adjust(x0, h, 1, "2-sided")`: run with an array for `scheme`,
    # the body raised its own ValueError first; run with the first call's string, the `"2-sided"` branch
    # is not reached, so the second call's arguments run it. `h.copy()` is an array method, not a record's.
    path = DATA / "scheme_from_call_sites.py"
    found = {f.line: f for f in lint_source(path.read_bytes(), str(path))}
    one, two = _line(path, "h_adjusted[0] ="), _line(path, "h_adjusted[1] =")
    assert sorted(found) == [one, two]
    verify_findings(list(found.values()), timeout=20)
    assert found[one].verification.status == "confirmed", found[one].verification.detail
    assert "scheme: '1-sided'" in found[one].verification.detail
    assert found[two].verification.status == "confirmed", found[two].verification.detail
    assert "scheme: '2-sided'" in found[two].verification.detail


def test_a_candidate_that_never_reaches_a_flagged_line_does_not_end_the_search() -> None:
    # A scalar skips the rank-1 branch without an error; float sizes raise JAX's shape error at the
    # line above the flagged one. Neither says anything about the flagged line, so the next candidates
    # (an array, integer sizes) are tried, and they reach it.
    path = DATA / "reached_by_a_later_candidate.py"
    found = {f.function: f for f in lint_source(path.read_bytes(), str(path))}
    assert sorted(found) == ["decode", "grid"]
    verify_findings(list(found.values()), timeout=20)
    assert found["decode"].verification.status == "confirmed", found["decode"].verification.detail
    assert "v: f32[3]" in found["decode"].verification.detail
    assert found["grid"].verification.status == "confirmed", found["grid"].verification.detail


def test_a_bare_instance_gets_what_the_methods_it_calls_on_self_read() -> None:
    # `Projection()` fails, so the instance is bare. `cell_of` reads nothing itself; `self.recover` reads
    # `self.scale` and `self.offset`, only in arithmetic: scalars (a small array made `int(...)` fail).
    # `grid_cell_of` raises NotImplementedError under `self.use_grid` built True: that flag, the one whose
    # `if` led to the error, is built False next, and `self.keep_cell` stays True (all False skip the line).
    path = DATA / "reads_through_helper_methods.py"
    found = {f.function: f for f in lint_source(path.read_bytes(), str(path))}
    assert sorted(found) == ["Projection.cell_of", "Projection.grid_cell_of"]
    verify_findings(list(found.values()), timeout=20)
    plain = found["Projection.cell_of"].verification
    assert plain.status == "confirmed", plain.detail
    flagged = found["Projection.grid_cell_of"].verification
    assert flagged.status == "confirmed" and flagged.detail.endswith("with `use_grid` False"), flagged.detail


def test_the_parameters_of_a_jitted_def_in_a_loop_are_not_the_loops_names() -> None:
    # `def advance(state)` in the loop body: its parameter `state` is not the `state = env.observe()` of the
    # loop, which re-running each pass (with a placeholder `env`) failed before the def was rebuilt.
    path = DATA / "jit_def_param_named_like_a_loop_local.py"
    found = lint_source(path.read_bytes(), str(path))
    assert [(f.name, f.line) for f in found] == [("jit-in-loop", _line(path, "@jax.jit"))]
    verify_findings(found, timeout=20)
    assert found[0].verification.status == "confirmed", found[0].verification.detail


def test_a_failing_star_import_is_named_where_its_names_are_missing() -> None:
    # `from failing_star_for_verify import *` fails, binding nothing; the class built on one of its names
    # then fails with a NameError, and the evidence says which import failed, and why.
    path = DATA / "star_import_fails.py"
    f = _finding(path, _line(path, "if x > 0"), qualname="Model.step")
    verify_findings([f], timeout=20)
    assert f.verification.status == "unverified"
    assert "`from failing_star_for_verify import *` failed: ImportError" in f.verification.detail, \
        f.verification.detail


def test_a_confirmed_item_assignment_whose_update_does_not_fit_the_built_values_is_skipped() -> None:
    # `out[1:] = feats` is confirmed; run as `out = out.at[1:].set(feats)`, the built `feats` (3 values)
    # does not fit the 4 slots, which says nothing about the code: the update is skipped, and the
    # assignment after it is reached and confirmed.
    path = DATA / "update_that_does_not_fit.py"
    found = {f.line: f for f in lint_source(path.read_bytes(), str(path))}
    later = _line(path, "out[0] = first")
    assert sorted(found) == [_line(path, "out[1:] = feats"), later]
    verify_findings(list(found.values()), timeout=20)
    assert all(f.verification.status == "confirmed" for f in found.values()), [
        (f.line, f.verification.detail) for f in found.values()]
