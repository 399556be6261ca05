"""Every relative link in README.md and docs/*.md points at a file that exists, and at a heading that
exists when it names one (GitHub's anchor rules), so moving text between pages cannot strand a link."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set:
    """GitHub's heading ids: lower case, punctuation other than '-' and '_' dropped, spaces to '-'."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


def _links(page: Path):
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+://|mailto:", t)]


def _broken(page: Path) -> list:
    broken = []
    for target in _links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.name}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page):
    assert not _broken(page)


def test_a_moved_section_or_file_is_reported(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n\n## Kept: a section\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#kept-a-section) [gone](other.md#moved) [file](missing.md) "
                    "![pic](img/none.png) [web](https://example.org/x)\n```\n[in code](nowhere.md)\n```\n")
    assert _broken(page) == ["other.md#moved: no heading #moved in other.md", "missing.md: no such file",
                             "img/none.png: no such file"]


def test_the_anchor_rule_matches_githubs_on_known_headings():
    assert "the-training-task-the-kfp-way" in _anchors(REPO / "README.md")
    assert "troubleshooting-my-job-is-stuck-pending" in _anchors(REPO / "docs" / "cluster.md")
    assert "ctr_training_pipeline" in _anchors(REPO / "docs" / "parameters.md")
