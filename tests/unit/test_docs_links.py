"""Every relative link of the README and the pages under docs/ (and the READMEs of tests/
and benchmarks/) resolves: the file exists, and a ``#fragment`` names one of its headings
as GitHub makes their anchors."""

from __future__ import annotations

import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGES = ["README.md", "tests/README.md", "benchmarks/README.md"] + sorted(
    f"docs/{n}" for n in os.listdir(os.path.join(ROOT, "docs")) if n.endswith(".md")
)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _text(page: str) -> str:
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        return f.read()


def _without_code_blocks(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def anchors(text: str) -> set:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to
    hyphens, ``-1``, ``-2`` ... for repeats."""
    seen: dict = {}
    out = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *$", _without_code_blocks(text), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def test_anchors_follow_githubs_rule():
    text = "# A title\n## `--tfds-image`: every record's image\n## A title\n"
    assert anchors(text) == {"a-title", "--tfds-image-every-records-image", "a-title-1"}


@pytest.mark.parametrize("page", [p for p in PAGES if os.path.exists(os.path.join(ROOT, p))])
def test_relative_links_resolve(page):
    broken = []
    for target in LINK.findall(_without_code_blocks(_text(page))):
        if re.match(r"[a-z]+:", target):  # https:, mailto: ...
            continue
        path, _, fragment = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        if not os.path.exists(os.path.join(ROOT, dest)):
            broken.append(target)
        elif fragment and dest.endswith(".md") and fragment not in anchors(_text(dest)):
            broken.append(target)
    assert not broken, f"{page}: links that do not resolve: {broken}"
