"""The docs hold together: every relative link and anchor resolves, and the README gives CI's test command."""

from pathlib import Path

import doc_links

def test_every_relative_link_and_anchor_in_the_docs_resolves():
    files = doc_links.doc_files()
    assert doc_links.REPO / "README.md" in files and doc_links.REPO / "docs" / "README.md" in files
    assert doc_links.broken_links(files) == []


def test_the_readme_links_nowhere_that_breaks_outside_the_repository():
    """README.md is the package's long description (setup.cfg): on a package index a relative link breaks."""
    readme = doc_links.REPO / "README.md"
    assert doc_links.broken_links([readme], root=doc_links.REPO) == []
    relative = [target for _, line in doc_links._prose_lines(readme.read_text(encoding="utf-8"))
                for target in doc_links._LINK.findall(doc_links._INLINE_CODE.sub("", line))
                if not doc_links._EXTERNAL.match(target)]
    assert relative == []


def test_the_link_check_reports_missing_files_and_anchors_and_ignores_code(tmp_path: Path):
    # Negative control: the checker must flag each broken link, and only those.
    (tmp_path / "other.md").write_text("# Other page\n\n## A `code` heading: with (punctuation)\n\n## Twice\n\n## Twice\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n"
        "[ok](other.md#a-code-heading-with-punctuation) [ok](other.md#twice-1) [ok](#page) [web](https://x.org/#y)\n"
        "[missing file](nowhere.md) [missing anchor](other.md#no-such-heading) [third twice](other.md#twice-2)\n"
        "[self anchor](#not-here) `[in code](nowhere.md)`\n"
        "```\n[in a fence](nowhere.md)\n# not a heading\n```\n"
        "[fenced heading](#not-a-heading)\n"
    )
    broken = doc_links.broken_links([page], root=tmp_path)
    assert [line.split(": ", 1)[1] for line in broken] == [
        "nowhere.md (no such file)",
        "other.md#no-such-heading (no heading with this anchor)",
        "other.md#twice-2 (no heading with this anchor)",
        "#not-here (no heading with this anchor)",
        "#not-a-heading (no heading with this anchor)",
    ]


def test_the_readme_gives_the_test_command_ci_runs():
    ci = (doc_links.REPO / ".ci" / "run").read_text()
    readme = (doc_links.REPO / "README.md").read_text()
    assert "\nmake test\n" in ci
    assert "\nmake test " in readme or "\nmake test\n" in readme
