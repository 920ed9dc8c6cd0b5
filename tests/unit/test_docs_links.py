"""Every relative link in README.md and docs/*.md leads somewhere.

The reference moved from one long README into docs/ pages that link to each other by file and
by heading (`security.md#tls`); a heading renamed or a section moved to another page breaks
such links silently on GitHub. This test reads the Markdown as GitHub renders it: links inside
code (fenced blocks, inline spans) are not links, and an anchor is the GitHub slug of a heading
of the target file (lower case, punctuation dropped, spaces as hyphens, `-1`, `-2` for repeats).
No link is skipped: a page a link names must exist in the tree.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(number, line) of the lines outside fenced code blocks."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            out.append((number, line))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: markup and punctuation dropped, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text stays
    text = re.sub(r"<[^>]+>", "", text).lower()
    text = re.sub(r"[^\w\- ]", "", text)  # \w keeps letters, digits and '_', as GitHub does
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a page's headings; a repeated heading gets -1, -2, ... as on GitHub."""
    found: set[str] = set()
    counts: dict[str, int] = {}
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if match:
            base = slug(match.group(2))
            found.add(f"{base}-{counts[base]}" if base in counts else base)
            counts[base] = counts.get(base, 0) + 1
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every link outside code; a link whose text is code still counts."""
    found = []
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        # code spans are masked (same length) so that brackets in code make no link
        bare = INLINE_CODE.sub(lambda m: "x" * len(m.group(0)), line)
        found += [(number, line[m.start(1):m.end(1)]) for m in LINK.finditer(bare)]
    return found


def broken_links() -> list[str]:
    broken = []
    for page in pages():
        for number, target in links(page):
            if EXTERNAL.match(target):
                continue
            file_part, _, anchor = target.partition("#")
            dest = (page.parent / file_part).resolve() if file_part else page
            where = f"{page.relative_to(ROOT)}:{number}: {target}"
            if not dest.exists():
                broken.append(f"{where}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{where}: no heading with anchor #{anchor} in {dest.name}")
    return broken


def test_every_relative_link_and_anchor_in_the_docs_resolves():
    broken = broken_links()
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_the_checker_sees_links_and_github_anchors():
    assert slug("Master HA (`master/raft.py`)") == "master-ha-masterraftpy"
    assert slug("Load tests (Locust, `load/locustfile.py`)") == "load-tests-locust-loadlocustfilepy"
    assert slug("Full disk") == "full-disk"
    readme = ROOT / "README.md"
    assert any(target.startswith("docs/") for _, target in links(readme))
