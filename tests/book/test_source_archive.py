"""kvbook.sphinx.source_archive: the repository beside every built book, the workshop's books included.

A throwaway git repository stands for the checkout: a book built from it archives what git tracks; a book built
from a transformed copy of some of its sources inside an ignored folder (as the workshop's learner book is, under
_build/workshop-src/) archives the copy's versions of those sources and the checkout's version of everything else
(review R21-4: that archive was empty).
"""

from __future__ import annotations

import subprocess
import tarfile

from kvbook.sphinx.source_archive import write_archive


def _repo(tmp_path):
    repo = tmp_path / "repo"
    for name, text in {"README.md": "read me\n", "Makefile": "all:\n", "book/intro.md": "# Intro\n",
                       "book/teaching/plan.md": "# Plan (instructors)\n", "notebooks/01.ipynb": "solution\n",
                       "kvmath/__init__.py": "x = 1\n", ".gitignore": "_build/\n"}.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    (repo / "untracked.txt").write_text("not in git\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "README.md", "Makefile", "book", "notebooks", "kvmath",
                    ".gitignore"], check=True)
    return repo


def _members(archive) -> dict[str, str]:
    with tarfile.open(archive) as tar:
        return {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers()}


def test_a_checkouts_book_archives_what_git_tracks(tmp_path):
    repo = _repo(tmp_path)
    members = _members(write_archive(repo, tmp_path))
    assert sorted(members) == ["kvmath/.gitignore", "kvmath/Makefile", "kvmath/README.md", "kvmath/book/intro.md",
                               "kvmath/book/teaching/plan.md", "kvmath/kvmath/__init__.py", "kvmath/notebooks/01.ipynb"]


def test_a_copys_book_archives_the_copy_and_the_rest_of_the_checkout(tmp_path):
    repo = _repo(tmp_path)
    copy = repo / "_build" / "workshop-src" / "learner"
    (copy / "book").mkdir(parents=True)
    (copy / "notebooks").mkdir()
    (copy / "book" / "intro.md").write_text("# Intro (learner edition)\n")  # the plan page removed in the copy
    (copy / "notebooks" / "01.ipynb").write_text("no solution\n")
    (copy / "kvmath").symlink_to(repo / "kvmath")
    members = _members(write_archive(copy, tmp_path))
    assert members == {"kvmath/.gitignore": "_build/\n", "kvmath/Makefile": "all:\n", "kvmath/README.md": "read me\n",
                       "kvmath/book/intro.md": "# Intro (learner edition)\n", "kvmath/kvmath/__init__.py": "x = 1\n",
                       "kvmath/notebooks/01.ipynb": "no solution\n"}


def test_leave_out_patterns_drop_matching_files_at_any_depth(tmp_path):
    repo = _repo(tmp_path)
    members = _members(write_archive(repo, tmp_path, leave_out=["book/*", "*.ipynb"]))
    assert sorted(members) == ["kvmath/.gitignore", "kvmath/Makefile", "kvmath/README.md", "kvmath/kvmath/__init__.py"]


def test_the_learner_edition_leaves_out_the_tests_but_keeps_the_chapters_data():
    """The learner book's _config.yml carries the patterns; matched on the repository's own tracked names."""
    from kvbook.sphinx.source_archive import archived_files
    from kvbook.repo import ROOT
    from kvbook.workshop.workshop_build import LEARNER_ARCHIVE_LEAVES_OUT

    names = [name for name, _ in archived_files(ROOT, LEARNER_ARCHIVE_LEAVES_OUT)]
    tests = [n for n in names if n.startswith("tests/")]
    assert tests and all(n.startswith("tests/data/") and not n.startswith("tests/data/book_") for n in tests)
    assert "tests/data/hf_configs/README.md" in names and "kvmath/__init__.py" in names
