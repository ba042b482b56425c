"""The package table of docs/architecture.md: each package of ``tracker`` (top tier first),
its modules, its lines and what it holds (the first line of its ``__init__`` docstring).

    python -m tests.project.layout

prints it as the Markdown table the page shows; tests/project/test_architecture.py fails when
the page's table and this one differ (the lines may drift by a quarter)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from tests.project.test_layers import PKG, ROOT_MODULES, TIERS

HEADER = ("| level | package | modules | lines | what it holds |\n"
          "| --- | --- | --- | --- | --- |")


@dataclass(frozen=True)
class Row:
    level: int
    package: str
    modules: int
    lines: int
    holds: str

    def markdown(self) -> str:
        return f"| {self.level} | {self.package} | {self.modules} | {self.lines:,} | {self.holds} |"


def _lines(files: list[Path]) -> int:
    return sum(len(f.read_text().splitlines()) for f in files)


def summary(init: Path) -> str:
    """The first line of a package's docstring, Sphinx's double backquotes made single."""
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    return doc.split("\n", 1)[0].replace("``", "`")


def rows(root: Path = PKG) -> list[Row]:
    """One row per package, the top level first; the root modules (level 0) last."""
    out = []
    for level in range(len(TIERS) - 1, 0, -1):
        for name in TIERS[level]:
            files = sorted((root / name).rglob("*.py"))
            modules = [f for f in files if f.name != "__init__.py"]
            out.append(Row(level, f"{name}/", len(modules), _lines(files),
                           summary(root / name / "__init__.py")))
    roots = [root / f"{m}.py" for m in ROOT_MODULES]
    out.append(Row(0, "root modules", len(roots), _lines(roots),
                   "The shared vocabulary: errors, tags, metrics, signals."))
    return out


def table(root: Path = PKG) -> str:
    return "\n".join([HEADER, *(r.markdown() for r in rows(root))])


if __name__ == "__main__":
    print(table())
