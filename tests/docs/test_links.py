"""The doc links outside docs/ resolve: a ``docs/page.md#anchor`` in a sample spec, the
MLproject, the scripts or the code's comments names a page that exists and a heading it has
(the strict build checks the links between pages; nothing else would check these)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from markdown.extensions.toc import slugify

from tests.docs.pages import DOCS, REPO

LINK = re.compile(r"(?<![\w/.-])docs/([\w-]+\.md)(?:#([\w-]+))?")


def sources() -> list[Path]:
    """The files outside docs/ whose comments point users at a page."""
    return sorted({*REPO.glob("projects/*/*.yaml"), *REPO.glob("projects/*/README.md"),
                   REPO / "MLproject", *REPO.glob("scripts/*.sh"), REPO / "pyproject.toml"})


def code() -> list[Path]:
    """The package's modules, whose comments and docstrings may link a page's section."""
    return sorted((REPO / "tracker").rglob("*.py"))


def anchors(page: Path) -> set[str]:
    """The anchors mkdocs gives the headings of ``page`` (the toc extension's slugs of the
    heading text without its code marks), code blocks left out."""
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {slugify(h.replace("`", "").strip(), "-") for h in
            re.findall(r"^#{1,6} (.+?)#*$", text, flags=re.M)}


def broken(text: str, docs: Path = DOCS) -> list[str]:
    """Each ``docs/page.md#anchor`` of ``text`` whose page or anchor does not exist."""
    out = []
    for page, anchor in LINK.findall(text):
        path = docs / page
        if not path.is_file():
            out.append(f"docs/{page}: no such page")
        elif anchor and anchor not in anchors(path):
            out.append(f"docs/{page}#{anchor}: no such heading")
    return out


@pytest.mark.parametrize("source", sources(), ids=lambda p: str(p.relative_to(REPO)))
def test_doc_links_outside_docs_resolve(source: Path) -> None:
    assert broken(source.read_text(encoding="utf-8")) == []


def test_doc_links_in_the_code_resolve() -> None:
    problems = [f"{p.relative_to(REPO)}: {b}" for p in code()
                for b in broken(p.read_text(encoding="utf-8"))]
    assert problems == []


def test_the_sample_specs_link_the_docs() -> None:
    """The check has something to check: the specs and the MLproject carry links."""
    text = "".join(p.read_text(encoding="utf-8") for p in sources())
    assert len(LINK.findall(text)) >= 5 and any(a for _, a in LINK.findall(text))


def test_a_broken_page_or_anchor_is_caught(tmp_path: Path) -> None:
    (tmp_path / "confirmation.md").write_text("# The confirmation\n\n## The `verdict`\n\n"
                                              "```\n## not a heading\n```\n")
    text = ("# docs/confirmation.md#the-verdict docs/confirmation.md "
            "docs/confirmation.md#not-a-heading docs/gone.md#x")
    assert broken(text, tmp_path) == ["docs/confirmation.md#not-a-heading: no such heading",
                                      "docs/gone.md: no such page"]
