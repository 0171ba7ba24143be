"""Every relative markdown link in the docs resolves: to a file that exists and, after `#`, to a heading in it.

Run as a script (`python tests/doc_links.py`) to list broken links; tests/test_docs.py runs it in the suite.
Anchors are GitHub's heading slugs: lowercase, punctuation other than `-` and `_` dropped, spaces to `-`,
and `-1`, `-2`, ... for repeated headings. Links and headings inside fenced code blocks do not count.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

#: The hand-written pages: the README, everything under docs/ (benchmark reports included), the drafter cards.
DOC_GLOBS = ("README.md", "docs/**/*.md", "drafters/*/README.md")

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# [text](target) and ![alt](target); the target stops at whitespace or ')', an optional "title" may follow.
_LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_INLINE_CODE = re.compile(r"`[^`]*`")
_EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, ...


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) for every line outside fenced code blocks."""
    lines, in_fence = [], False
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if not in_fence:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text (before de-duplication)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading anchors on its text
    text = text.lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a markdown file, repeated headings numbered as GitHub does."""
    seen: dict[str, int] = {}
    result = set()
    for _, line in _prose_lines(path.read_text(encoding="utf-8")):
        match = _HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def _shown(path: Path, root: Path) -> str:
    path = path.resolve()
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def broken_links(paths: list[Path], root: Path = REPO) -> list[str]:
    """'file:line: target (why)' for every relative link in `paths` that does not resolve."""
    broken, anchor_cache = [], {}
    for path in paths:
        for number, line in _prose_lines(path.read_text(encoding="utf-8")):
            for target in _LINK.findall(_INLINE_CODE.sub("", line)):
                if _EXTERNAL.match(target):
                    continue
                file_part, _, anchor = target.partition("#")
                dest = (path.parent / file_part).resolve() if file_part else path.resolve()
                where = f"{_shown(path, root)}:{number}: {target}"
                if not dest.exists():
                    broken.append(f"{where} (no such file)")
                elif anchor:
                    if dest.suffix != ".md":
                        broken.append(f"{where} (an anchor into a file that is not markdown)")
                        continue
                    if dest not in anchor_cache:
                        anchor_cache[dest] = anchors(dest)
                    if anchor.lower() not in anchor_cache[dest]:
                        broken.append(f"{where} (no heading with this anchor)")
    return broken


def doc_files(root: Path = REPO) -> list[Path]:
    return sorted({p for pattern in DOC_GLOBS for p in root.glob(pattern) if p.is_file()})


if __name__ == "__main__":
    problems = broken_links(doc_files())
    print("\n".join(problems) or f"all relative links resolve in {len(doc_files())} files")
    sys.exit(1 if problems else 0)
