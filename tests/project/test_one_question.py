"""One question, one place (DESIGN.md, "One path"): only ``Configuration``
(tracker/triton/configuration.py) and the spec's validation (tracker/spec/) ask whether a
configuration has several entries. Any other module that tests the number of entries,
``Configuration.single``, ``is_joint`` or the objective's name to choose a path fails here.

``PENDING`` lists the modules that still ask, each with the developer item that removes the
question; the list may only shrink (a module that no longer asks must leave it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PKG = REPO / "tracker"
ALLOWED = {"tracker/triton/configuration.py"}
ALLOWED_DIRS = ("tracker/spec/",)
QUESTIONS = {
    "Configuration.single": re.compile(r"\.single\b"),
    "is_joint": re.compile(r"\bis_joint\("),
    "a count of entries": re.compile(r"len\([^()]*\bentries\)"),
    "a count of the spec's models": re.compile(r"len\((?:[\w.]*spec\.)?model\.names\)"),
    "the objective's name": re.compile(r"WEIGHTED_GAIN\s+(?:not\s+)?in\b|==\s*WEIGHTED_GAIN\b"),
}
#: modules that still ask, and who removes the question (issue 30's items)
PENDING: dict[str, str] = {}


def askers(root: Path = PKG, repo: Path = REPO) -> dict[str, list[str]]:
    """Module path -> the questions it asks (outside the allowed places)."""
    out: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(repo).as_posix()
        if rel in ALLOWED or rel.startswith(ALLOWED_DIRS):
            continue
        text = path.read_text()
        found = [name for name, pattern in QUESTIONS.items() if pattern.search(text)]
        if found:
            out[rel] = found
    return out


def test_only_the_configuration_asks_how_many() -> None:
    asked = askers()
    new = {path: found for path, found in asked.items() if path not in PENDING}
    assert not new, f"only tracker/triton/configuration.py asks how many entries: {new}"
    done = sorted(set(PENDING) - set(asked))
    assert not done, f"these modules no longer ask: remove them from PENDING: {done}"


@pytest.mark.parametrize("line", [
    "if conf.single:", "several = joint.is_joint(spec)", "if len(conf.entries) > 1:",
    "if len(spec.model.names) < 2:", "if WEIGHTED_GAIN in objectives:",
    "if metric == WEIGHTED_GAIN:"])
def test_the_check_sees_a_question(tmp_path: Path, line: str) -> None:
    (tmp_path / "tracker").mkdir()
    (tmp_path / "tracker" / "mod.py").write_text(f"def f():\n    {line}\n        pass\n")
    assert askers(tmp_path / "tracker", tmp_path) == {"tracker/mod.py": [
        name for name, p in QUESTIONS.items() if p.search(line)]}


def test_the_docs_name_every_sampler_of_the_table() -> None:
    """Samplers are one table (tracker/samplers.py): the spec's choices, the CLI's and the
    search's builders read it, and the docs name each of them."""
    from tracker.samplers import SAMPLERS
    from tracker.search import optuna_study
    from tracker.spec.search_section import SearchSection

    tuning = (REPO / "docs" / "tuning.md").read_text()
    spec = (REPO / "docs" / "spec.md").read_text()
    for name in SAMPLERS:
        assert f"`{name}`" in tuning and f"`{name}`" in spec, name
        assert SearchSection(sampler=name).sampler == name
    assert set(optuna_study._BUILD) == set(SAMPLERS)
