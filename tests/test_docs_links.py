"""Every relative link in README.md and docs/ resolves to a file of the checkout (a page moved or
renamed leaves no dead link behind); the checker is shown to catch one."""

import re
from pathlib import Path

from ai4ai import PROJECT_ROOT

# [text](target) in Markdown, not images' alt text; the target up to a space, `)` or `#`
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s#]*)(#[^)\s]*)?\)")


def pages(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def dead_links(page: Path) -> list[str]:
    """The relative links of `page` whose file does not exist, as `page: target`."""
    out = []
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code blocks hold no links
    for m in LINK.finditer(text):
        target = m.group(1)
        if not target or re.match(r"[a-z][a-z0-9+.-]*:", target):  # an anchor in the page, or a URL
            continue
        if not (page.parent / target).exists():
            out.append(f"{page.name}: {target}")
    return out


def test_every_relative_link_resolves():
    assert len(pages(PROJECT_ROOT)) > 5
    assert [d for p in pages(PROJECT_ROOT) for d in dead_links(p)] == []


def test_the_checker_finds_a_dead_link(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "here.md").write_text("x")
    (tmp_path / "README.md").write_text(
        "[ok](docs/here.md) [anchor](#top) [web](https://example.org/a.md) ![img](gone.png)\n"
        "[gone](docs/gone.md#part) [up](../README.md)\n```\n[in code](nowhere.md)\n```\n"
    )
    (tmp_path / "docs" / "page.md").write_text("[back](../README.md) [moved](old.md)\n")
    found = [d for p in pages(tmp_path) for d in dead_links(p)]
    assert found == ["README.md: docs/gone.md", "README.md: ../README.md", "page.md: old.md"]
