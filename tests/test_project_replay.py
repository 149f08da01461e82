"""A file's pass without the project records what it took for the project's answers; where the project
answers every question the same, its pass knowing the project is not run (`api._refine` gives SAME).
That is only right if the pass knowing the project would find exactly what the first pass found: checked
here on every file of the cross-file fixture projects, each analysed both ways."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest

from jaxlint.api import SAME, Settings, _analyse_file, _refine, analyse, codes_for, discover, module_name
from jaxlint.project import ProjectIndex, project_needs
from jaxlint.semantic import NO_ANSWER, ProjectClasses, compact, replay

ROOT = Path(__file__).resolve().parent.parent
PROJECTS = sorted(p for p in (ROOT / "fixtures" / "cross-file").iterdir() if p.is_dir())


def _in_thread(fn):  # the analysis runs with a deep stack, as the CLI runs it
    box = {}
    threading.stack_size(256 * 1024 * 1024)
    t = threading.Thread(target=lambda: box.setdefault("out", fn()))
    t.start()
    t.join()
    threading.stack_size(0)
    return box["out"]


def _both_ways(project: Path) -> list[tuple[str, bool, tuple, tuple]]:
    """Per file that the project pass would look at: whether the answers replay, what the first pass
    found, and what the pass knowing the project finds (findings, and the calls it follows into other
    files: the key hand-offs, which only a pass without the project records, left out)."""
    settings = Settings(paths=[str(project)], verify=False)
    files = discover([str(project)])
    index = ProjectIndex(files, module_name)
    out = []
    for path in files:
        data = Path(path).read_bytes()
        asked: list = []
        found, calls, err = _analyse_file(path, settings, None, data, asked)
        need = project_needs(found, calls, index, path)
        if err is not None or need is None:
            continue
        classes = index.for_file(path, data, {f.name for f in found}, keys_only=need == "keys")
        if classes is None:
            continue
        again, again_calls = analyse(data, path, codes_for(path, settings), (), None, classes)

        def shown(fs, cs):
            return (tuple((f.line, f.column, f.name, f.message) for f in fs),
                    tuple(repr(c) for c in cs if c.kind != "key"))

        out.append((path, replay(classes, compact(asked)), shown(found, calls), shown(again, again_calls)))
    return out


@pytest.mark.parametrize("project", PROJECTS, ids=[p.name for p in PROJECTS])
def test_answers_that_replay_mean_the_same_findings(project: Path) -> None:
    for path, same, first, knowing in _in_thread(lambda: _both_ways(project)):
        if same:
            assert first == knowing, path


def test_both_outcomes_occur_over_the_fixtures() -> None:
    """The check above means something: some files are spared their project pass, others are not (their
    findings change once the project is known)."""
    outcomes = [(same, first == knowing) for project in PROJECTS
                for _path, same, first, knowing in _in_thread(lambda: _both_ways(project))]
    assert (True, True) in outcomes
    assert (False, False) in outcomes


def test_a_changed_answer_runs_the_project_pass() -> None:
    learner = ROOT / "fixtures" / "cross-file" / "project_classes" / "learner.py"
    settings = Settings(paths=[str(learner.parent)], verify=False)
    files = discover([str(learner.parent)])
    data = learner.read_bytes()

    def run():
        asked: list = []
        found, _calls, _err = _analyse_file(str(learner), settings, None, data, asked)
        index = ProjectIndex(files, module_name)
        item = (str(learner), data, None, frozenset(f.name for f in found), False, compact(asked))
        return found, _refine(item, index, settings)

    found, refined = _in_thread(run)
    assert refined != SAME  # `Learner` is a pytree through `Agent` in base.py: not what the first pass took
    assert [(f.line, f.name) for f in refined[0]] == [(26, "traced-if")]
    assert [(f.line, f.name) for f in found] != [(26, "traced-if")]


def test_replay_compares_each_answer_taken() -> None:
    project = ProjectClasses(lambda qual: None, static_name=lambda name: name == "axis")
    assert replay(project, [("lookup", ("pkg.A",), None), ("static_name", ("size",), False)])
    assert not replay(project, [("static_name", ("axis",), False)])
    assert not replay(project, [("lookup", ("pkg.A",), NO_ANSWER)])  # taken where no answer would do
    # one question asked in two places, each taking another answer: both must hold
    assert not replay(project, [("mentioned_elsewhere", ("f",), True), ("mentioned_elsewhere", ("f",), False)])


def test_compact_keeps_each_answer_once() -> None:
    asked = [("lookup", ("a.B",), None), ("lookup", ("a.B",), None), ("subclasses", ("B",), []),
             ("subclasses", ("B",), []), ("lookup", ("a.B",), NO_ANSWER), ("lookup", ("a.B",), NO_ANSWER)]
    assert compact(asked) == [("lookup", ("a.B",), None), ("subclasses", ("B",), []),
                              ("lookup", ("a.B",), NO_ANSWER)]
