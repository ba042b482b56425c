"""Every name a benchmark imports from the package exists (benchmarks are not run in CI, so a
refactor that moves a function breaks them silently otherwise; they import lazily, inside
functions, which is why the check reads their source instead of importing them)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parents[2] / "benchmarks").glob("*.py"))


def _imports(path: Path) -> list[tuple[str, str]]:
    tree = ast.parse(path.read_text())
    return [(node.module, alias.name) for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module
            and node.module.split(".")[0] == "tracker" for alias in node.names]


def _missing(path: Path) -> list[str]:
    missing = []
    for module, name in _imports(path):
        mod = importlib.import_module(module)
        if not hasattr(mod, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ModuleNotFoundError:
                missing.append(f"{module}.{name}")
    return missing


@pytest.mark.parametrize("path", BENCHMARKS, ids=[p.name for p in BENCHMARKS])
def test_what_each_benchmark_imports_from_the_package_exists(path: Path) -> None:
    missing = _missing(path)
    assert not missing, f"{path.name} imports names that do not exist: {missing}"


def test_the_check_finds_a_name_that_moved(tmp_path: Path) -> None:
    bad = tmp_path / "bench.py"
    bad.write_text("def f() -> None:\n    from tracker.feasibility import constraint_keys\n"
                   "    from tracker.search.objective import constraint_keys, pick_best_level\n")
    assert _missing(bad) == ["tracker.search.objective.constraint_keys"]
