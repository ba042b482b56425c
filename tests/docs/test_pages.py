"""Pages a user reads whole: no hand-written page is longer than a few screens, and the
benchmarks page holds current results, not a dated log."""

from __future__ import annotations

import re

from tests.docs.pages import DOCS, GENERATED, MAX_LINES, hand_written, prose


def test_no_hand_written_page_is_over_the_limit() -> None:
    long = {p.name: n for p in hand_written()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, (f"pages over {MAX_LINES} lines (split them by task, or move history to "
                      f"CHANGELOG.md): {long}")


def test_the_generated_pages_exist() -> None:
    for name in GENERATED:
        assert "<!-- generated:" in (DOCS / name).read_text(encoding="utf-8"), name


def test_benchmarks_hold_results_not_history() -> None:
    text = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    dated = re.findall(r"\b20\d\d-\d\d-\d\d\b|\b(?:afternoon|evening|night|yesterday)\b|"
                       r"[Uu]ntil 20\d\d|the next lever|not adopted|was tried", text)
    assert not dated, f"benchmarks.md reads as a log: {dated}; dated changes go to CHANGELOG.md"
    sections = re.findall(r"^## (.+)$", text, flags=re.M)
    assert len(sections) == len(set(sections)) and len(sections) >= 8, sections
    for section in text.split("\n## ")[1:]:
        name = section.splitlines()[0]
        assert re.search(r"\bload\b", section, flags=re.I), f"no machine load in {name!r}"


def test_cross_references_are_links_the_build_checks() -> None:
    """A reference to another page's section is a link (``[the verdict](confirmation.md#the-
    verdict)``), which ``mkdocs build --strict`` checks; a plain ``page.md, "Section"`` would
    break unseen when the section moves."""
    plain = [f"{p.name}: {m.group(0)}" for p in hand_written()
             for m in re.finditer(r'(?<![\[(/])\b[\w-]+\.md,\s+"[^"]+"', prose(p.read_text()))]
    assert plain == [], plain
