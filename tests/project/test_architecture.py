"""docs/architecture.md is a map that cannot drift: every module, test file and dotted name it
mentions exists, and every module of the package is on it."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from tests.project import layout

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


def page_rows(text: str) -> dict[str, list[str]]:
    """The package table on the page: package -> its cells."""
    out = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].isdigit():
            out[cells[1]] = cells
    return out


def table_drift(text: str) -> list[str]:
    """How the page's package table differs from ``python -m tests.project.layout``'s: a
    package missing or extra, another level, module count or summary, lines off by a quarter."""
    page = page_rows(text)
    out = [f"{r.package}: not on the page" for r in layout.rows() if r.package not in page]
    for row in layout.rows():
        cells = page.get(row.package)
        if cells is None:
            continue
        if [cells[0], cells[2], cells[4]] != [str(row.level), str(row.modules), row.holds]:
            out.append(f"{row.package}: the page says {cells}, the code {row.markdown()}")
        elif abs(int(cells[3].replace(",", "")) - row.lines) > row.lines / 4:
            out.append(f"{row.package}: {cells[3]} lines on the page, {row.lines:,} now")
    names = {r.package for r in layout.rows()}
    return out + [f"{p}: on the page, not a package" for p in page if p not in names]


def test_the_package_table_is_the_layout_printers() -> None:
    assert table_drift(DOC.read_text()) == []
    assert table_drift(layout.table()) == []
    first, *rest = layout.rows()
    changed = layout.Row(first.level, first.package, first.modules + 1, first.lines, first.holds)
    renamed = layout.Row(rest[0].level, "planted/", rest[0].modules, rest[0].lines, rest[0].holds)
    planted = "\n".join(r.markdown() for r in (changed, renamed, *rest[1:]))
    assert [d.split(":")[0] for d in table_drift(planted)] == [
        rest[0].package, first.package, "planted/"]
