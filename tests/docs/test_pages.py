"""Pages hold the product, not a log: the page of measurements holds results with their
conditions, the generated reference keeps its tables in their sections, and a reference to
another page's section is a link the strict build checks. A page is as long as its subject
needs (no line cap)."""

from __future__ import annotations

import re

from tests.docs.pages import DOCS, GENERATED, hand_written, prose


def test_the_generated_pages_exist() -> None:
    for name in GENERATED:
        assert "<!-- generated:" in (DOCS / name).read_text(encoding="utf-8"), name


def test_validation_holds_results_not_history() -> None:
    """The page of measurements states each figure's conditions (the machine's load), not
    when it was measured; only its section on the test suite holds no figure of a run."""
    text = (DOCS / "validation.md").read_text(encoding="utf-8")
    dated = re.findall(r"\b20\d\d-\d\d-\d\d\b|\b(?:afternoon|evening|night|yesterday)\b|"
                       r"[Uu]ntil 20\d\d|the next lever|not adopted|was tried|\bearlier run",
                       text)
    assert not dated, f"validation.md reads as a log: {dated}; dated changes go to CHANGELOG.md"
    sections = re.findall(r"^## (.+)$", text, flags=re.M)
    assert len(sections) == len(set(sections)) and len(sections) >= 8, sections
    for section in text.split("\n## ")[1:]:
        name = section.splitlines()[0]
        assert name == "What the test suite covers" or \
            re.search(r"\bload\b", section, flags=re.I), f"no machine load in {name!r}"


def test_cross_references_are_links_the_build_checks() -> None:
    """A reference to another page's section is a link (``[the verdict](confirmation.md#the-
    verdict)``), which ``mkdocs build --strict`` checks; a plain ``page.md, "Section"`` would
    break unseen when the section moves."""
    plain = [f"{p.name}: {m.group(0)}" for p in hand_written()
             for m in re.finditer(r'(?<![\[(/])\b[\w-]+\.md,\s+"[^"]+"', prose(p.read_text()))]
    assert plain == [], plain


def test_the_spec_reference_keeps_each_table_in_its_section() -> None:
    """A field table the generator appends (a new section of the spec) lands at the end of
    spec.md, under "Limits" in the table of contents: each must stand above "Limits", a
    ``###`` table under the ``##`` section it belongs to."""
    text = (DOCS / "spec.md").read_text(encoding="utf-8")
    limits = text.index("\n## Limits\n")
    tables = re.finditer(r"^#+ `([\w.]+)`\n\n<!-- generated: spec ", text, flags=re.M)
    late = [m.group(1) for m in tables if m.start() > limits]
    assert late == [], f"move these tables of spec.md above '## Limits', into their section: {late}"
    sections = [(m.start(), m.group(1)) for m in
                re.finditer(r"^## `([\w.]+)`$", text, flags=re.M)]
    for m in re.finditer(r"^### `([\w.]+)`$", text, flags=re.M):
        parent = [name for start, name in sections if start < m.start()][-1]
        assert m.group(1).startswith(parent + "."), (m.group(1), parent)
