"""The mutation check itself (scripts/mutation_check.py), on a toy package: a mutant the tests pin is
killed, one they do not pin survives, a line no test runs is "not covered", and only the tests that
execute a mutated line are chosen for it."""

from __future__ import annotations

import textwrap

import mutation_check as mc

TOY = '''
def area(w, h):
    return w * h


def is_big(x):
    return x >= 10


def unused(x):
    return x + 1
'''

TESTS = '''
from toy.calc import area, is_big


def test_area():
    assert area(2, 3) == 6


def test_is_big():
    assert is_big(20) and not is_big(1)  # 10 itself is never tried: >= -> > survives
'''


def test_a_pinned_mutant_is_killed_an_unpinned_one_survives(tmp_path):
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "__init__.py").write_text("")
    (tmp_path / "toy" / "calc.py").write_text(textwrap.dedent(TOY))
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_calc.py").write_text(textwrap.dedent(TESTS))
    project = mc.Project(str(tmp_path), "toy", ["calc.py"], ["tests/test_calc.py"], ["tests"])
    mutants = mc.candidates("calc.py", project)
    # w * h: swapped to /, each factor dropped; x >= 10 -> >; x + 1 -> -
    assert [(m.line, m.what) for m in mutants] == [
        (3, "* -> /"), (3, "drop factor h"), (3, "drop factor w"), (7, ">= -> >"), (11, "+ -> -")]
    results, mapping = mc.run_mutants(project, mutants, jobs=1, timeout=60, cache=None, report=lambda _: None)
    outcome = {(m.line, m.what): (killed, reason) for m, killed, reason, _ in results}
    # 2 * 3 = 6; 2 / 3, 2 and 3 are not
    assert outcome[(3, "* -> /")] == (True, "tests/test_calc.py::test_area")
    assert outcome[(3, "drop factor h")] == (True, "tests/test_calc.py::test_area")
    assert outcome[(3, "drop factor w")] == (True, "tests/test_calc.py::test_area")
    assert outcome[(7, ">= -> >")] == (False, "")
    assert outcome[(11, "+ -> -")] == (False, "not covered")
    assert mc.select_tests(mutants[0], mapping) == ["tests/test_calc.py::test_area"]
    assert mc.select_tests(mutants[3], mapping) == ["tests/test_calc.py::test_is_big"]
