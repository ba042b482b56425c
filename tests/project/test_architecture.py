"""docs/architecture.md is a map that cannot drift: every module, test file and dotted name it
mentions exists, and every module of the package is on it."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "architecture.md"

_PATH = re.compile(r"(?<![\w/.])((?:tracker|tests|benchmarks|docs)/[\w/.]*\w)")
_DOTTED = re.compile(r"(?<![\w.])(tracker(?:\.\w+)+)")


def missing_paths(text: str, root: Path = REPO) -> list[str]:
    """Paths (``tracker/tuning/loop.py``, ``tracker/triton/server/``) that do not exist."""
    return sorted({p for p in _PATH.findall(text) if not (root / p).exists()})


def missing_names(text: str) -> list[str]:
    """Dotted names (``tracker.tuning.trial.record_result``) that do not resolve: the longest
    importable module prefix, then attributes."""
    bad = set()
    for name in set(_DOTTED.findall(text)):
        parts = name.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                obj: object = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            try:
                for attr in parts[cut:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                bad.add(name)
            break
        else:
            bad.add(name)
    return sorted(bad)


def unmapped_modules(text: str, root: Path = REPO) -> list[str]:
    """Modules of the package (``__init__.py`` files aside) that the map does not name."""
    named = set(_PATH.findall(text))
    modules = (str(p.relative_to(root)) for p in (root / "tracker").rglob("*.py")
               if p.name != "__init__.py")
    return sorted(m for m in modules if m not in named)


def test_every_path_the_map_names_exists() -> None:
    assert missing_paths(DOC.read_text()) == []


def test_every_dotted_name_the_map_names_exists() -> None:
    assert missing_names(DOC.read_text()) == []


def test_every_module_is_on_the_map() -> None:
    assert unmapped_modules(DOC.read_text()) == []


def test_the_checks_see_what_is_wrong(tmp_path: Path) -> None:
    text = ("`tracker/tuning/loop.py`, `tracker/study/nothing.py`, "
            "`tracker.tuning.trial.record_result`, `tracker.tuning.trial.no_such_function`, "
            "`tracker.no_such_module.f`")
    assert missing_paths(text) == ["tracker/study/nothing.py"]
    assert missing_names(text) == ["tracker.no_such_module.f",
                                   "tracker.tuning.trial.no_such_function"]
    (tmp_path / "tracker" / "a").mkdir(parents=True)
    (tmp_path / "tracker" / "a" / "b.py").write_text("")
    (tmp_path / "tracker" / "a" / "__init__.py").write_text("")
    assert unmapped_modules("`tracker/a/`", tmp_path) == ["tracker/a/b.py"]
    assert unmapped_modules("`tracker/a/b.py`", tmp_path) == []
