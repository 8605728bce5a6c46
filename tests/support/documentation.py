"""The project's prose as the tests read it: the README and the manual in docs/ (and the benchmarks' results).

Tests that hold a quoted figure or a documented setting to the code read `manual_text()`, so a passage can
move between the README and a docs page without the test losing sight of it."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
README = PROJECT_ROOT / "README.md"
DOCS = PROJECT_ROOT / "docs"
README_MAX_LINES = 200


def pages() -> list[Path]:
    """The README first, then every page of the manual, in a fixed order."""
    return [README, *sorted(DOCS.glob("*.md"))]


def manual_text() -> str:
    """The README and every docs page, one after the other."""
    return "\n".join(page.read_text() for page in pages())


_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
_CODE_SPAN = re.compile(r"(`+).+?\1", re.S)
_LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def _prose(text: str) -> str:
    """The text without fenced blocks and code spans: a `[x](y)` there is code, not a link."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def anchor(heading: str) -> str:
    """The id Python-Markdown's toc extension (MkDocs, and GitHub for these headings) gives a heading."""
    text = re.sub(r"[`*_]", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    return {anchor(heading) for heading in _HEADING.findall(_FENCE.sub("", page.read_text()))}


def broken_links(page: Path) -> list[str]:
    """Every relative link of `page` whose file does not exist, or whose #anchor is no heading of it."""
    broken = []
    for target in _LINK.findall(_prose(page.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not a file of the repository
            continue
        path, _, fragment = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{page.name}: {target} (no such file)")
        elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
            broken.append(f"{page.name}: {target} (no such heading)")
    return broken
