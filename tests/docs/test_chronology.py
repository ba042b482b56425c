"""The pages describe the product as it is: no chronology ("an earlier run", "before the
change", a load average, a date) outside docs/validation.md, the one page of measurements,
where the load is a measurement's condition."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.docs.pages import DOCS, REPO, prose

VALIDATION = DOCS / "validation.md"
#: what reads as a log of how the product was measured or changed, each with why
CHRONOLOGY = {
    r"\b(?:earlier|previous|last) runs?\b": "a run in time",
    r"\bload averages?\b": "a measurement's condition (docs/validation.md)",
    r"\bbefore the (?:change|fix)\b|\bafter the (?:change|fix)\b": "a change in time",
    r"\b20\d\d-\d\d(?:-\d\d)?\b": "a date",
    r"\b(?:yesterday|nowadays|these days)\b": "a change in time",
}


def chronology(text: str) -> list[str]:
    """``line N: 'match' (why)`` for each chronological phrase of ``text``'s prose."""
    out = []
    for number, line in enumerate(prose(text).splitlines(), 1):
        for pattern, why in CHRONOLOGY.items():
            out += [f"line {number}: {m.group(0)!r} ({why})"
                    for m in re.finditer(pattern, line, flags=re.I)]
    return out


def pages() -> list[Path]:
    return [REPO / "README.md", *(p for p in sorted(DOCS.glob("*.md")) if p != VALIDATION)]


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_chronology_outside_validation(page: Path) -> None:
    found = chronology(page.read_text(encoding="utf-8"))
    assert found == [], (f"{page.name}: the product in the present tense; measurements and "
                         "their conditions go to docs/validation.md:\n" + "\n".join(found))


def test_each_phrase_is_caught_and_code_is_not() -> None:
    text = ("as an earlier run showed\nat load average 2\nbefore the change it hung\n"
            "checked 2026-12-01\nas seen yesterday\n`2026-12-01` in code\n")
    assert [p.split(":")[0] for p in chronology(text)] == [
        "line 1", "line 2", "line 3", "line 4", "line 5"]


def test_validation_exists_and_states_its_conditions() -> None:
    text = VALIDATION.read_text(encoding="utf-8")
    assert re.search(r"\bload\b", text, flags=re.I)
