"""The product speaks for itself: no word about how the work was organised (who worked on it when, tracker
numbers, borrowed machines) in the README, docs, code, tests, examples, benchmarks, drafter cards or file
names, and every repository path that code and tests name exists. Results name date, commit and machine."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

#: Where the product's text lives.
TEXT_GLOBS = ("README.md", "Makefile", "setup.cfg", "pyproject.toml", "docs/**/*", "hf_specdec/**/*.py",
              "tests/**/*.py", "examples/**/*", "benchmarks/**/*", "drafters/*/README.md")
TEXT_SUFFIXES = {"", ".md", ".py", ".sh", ".cfg", ".toml", ".txt", ".csv", ".json", ".jsonl"}

#: Tracker numbers (with or without "#", spaced or not), work-session letters, and the word for a borrowed machine.
ORGANISATION_WORDS = re.compile(
    r"\bissues?\s*#?\d+|issue\d+|\bsessions?[ -][a-z]\b(?![-'])|\blent\b", re.IGNORECASE
)

#: This file: it holds the planted examples the check must find.
THIS_FILE = "tests/test_product_words.py"

#: A repository path named in code: docs/..., benchmarks/..., drafters/..., examples/..., tests/..., hf_specdec/...
_REPO_PATH = re.compile(r"(?<![\w/.-])((?:docs|benchmarks|drafters|examples|tests|hf_specdec)/[\w./-]*\w)")


def _product_files() -> list[Path]:
    files = set()
    for pattern in TEXT_GLOBS:
        files.update(path for path in REPO.glob(pattern)
                     if path.is_file() and path.suffix in TEXT_SUFFIXES and "__pycache__" not in path.parts)
    return sorted(files)


def _relative(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def organisation_words(text: str) -> list[str]:
    return [match.group(0) for match in ORGANISATION_WORDS.finditer(text)]


@pytest.mark.parametrize("text", [
    "Measured in session v on a Zen 4.", "issue 24's goals", "Issues 9 and 10", "see issue #31",
    "docs/bench/issue24/run.sh", "sessions f and g", "results/session-h/", "the fourth machine lent to us",
])
def test_a_planted_organisation_word_is_found(text):
    assert organisation_words(text)


@pytest.mark.parametrize("text", [
    "FeatureDraftSession", "a session of the loop", "# 2. verify", "lenient", "the session's cache",
    "per-session state", "tissue 4", "an issue with 4 rows",
])
def test_ordinary_words_are_not_organisation_words(text):
    assert organisation_words(text) == []


def test_no_product_file_says_how_the_work_was_organised():
    found = {}
    for path in _product_files():
        name = _relative(path)
        words = organisation_words(name)
        if name != THIS_FILE:
            words += organisation_words(path.read_text(encoding="utf-8", errors="replace"))
        if words:
            found[name] = sorted(set(words))
    assert found == {}


def test_every_repository_path_named_in_code_and_tests_exists():
    missing = {}
    for path in _product_files():
        if (path.suffix != ".py" and path.name != "Makefile") or _relative(path) == THIS_FILE:
            continue
        for named in _REPO_PATH.findall(path.read_text(encoding="utf-8")):
            named = named.rstrip(".")
            if not (REPO / named).exists():
                missing.setdefault(_relative(path), []).append(named)
    assert missing == {}
