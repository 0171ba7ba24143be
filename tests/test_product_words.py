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

#: The words themselves (a tracker's item, a stretch of work, a borrowed machine's participle), joined from parts so
#: that this file, like every other, never spells them.
ITEM, STRETCH, LOANED = "is" "sue", "ses" "sion", "le" "nt"

#: Tracker numbers (with or without "#", spaced or not), work-stretch letters, and the word for a borrowed machine.
ORGANISATION_WORDS = re.compile(
    rf"\b{ITEM}s?\s*#?\d+|{ITEM}\d+|\b{STRETCH}s?[ -][a-z]\b(?![-'])|\b{LOANED}\b", re.IGNORECASE
)

#: This file: its planted examples name a path that does not exist.
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
    f"Measured in {STRETCH} v on a Zen 4.", f"{ITEM} 24's goals", f"{ITEM.title()}s 9 and 10", f"see {ITEM} #31",
    f"docs/bench/{ITEM}24/run.sh", f"{STRETCH}s f and g", f"results/{STRETCH}-h/", f"the fourth machine {LOANED} to us",
])
def test_a_planted_organisation_word_is_found(text):
    assert organisation_words(text)


@pytest.mark.parametrize("text", [
    f"FeatureDraft{STRETCH.title()}", f"a {STRETCH} of the loop", "# 2. verify", "le" "nient", f"the {STRETCH}'s cache",
    f"per-{STRETCH} state", f"t{ITEM} 4", f"an {ITEM} with 4 rows",
])
def test_ordinary_words_are_not_organisation_words(text):
    assert organisation_words(text) == []


def test_no_product_file_says_how_the_work_was_organised():
    found = {}
    for path in _product_files():
        name = _relative(path)
        words = organisation_words(name) + organisation_words(path.read_text(encoding="utf-8", errors="replace"))
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
