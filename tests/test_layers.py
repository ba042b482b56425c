"""Layers point one way (docs/architecture.md): a module never imports from a layer above it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "tracker"

# layer -> the tracker packages/modules it must never import
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "tracker.errors": ("tracker.",),
    "tracker.trial_attrs": ("tracker.",),
    "tracker.spec": ("tracker.triton", "tracker.measure", "tracker.search", "tracker.tracking",
                     "tracker.deploy", "tracker.runner", "tracker.cli"),
    # spec.py's helpers sit in its layer
    **{name: ("tracker.triton", "tracker.measure", "tracker.search", "tracker.tracking",
              "tracker.deploy", "tracker.runner", "tracker.cli", "tracker.spec.")
       for name in ("tracker.spec_sections", "tracker.spec_checks", "tracker.spec_messages",
                    "tracker.config_fields")},
    "tracker.triton": ("tracker.measure", "tracker.search", "tracker.tracking", "tracker.deploy",
                       "tracker.runner", "tracker.cli"),
    "tracker.measure": ("tracker.search", "tracker.tracking", "tracker.deploy", "tracker.runner",
                        "tracker.cli", "tracker.triton.server"),
    "tracker.search": ("tracker.measure.loadgen", "tracker.tracking", "tracker.deploy",
                       "tracker.runner", "tracker.cli", "tracker.triton.server"),
    "tracker.tracking": ("tracker.triton.server", "tracker.triton.client",
                         "tracker.measure.loadgen",
                         "tracker.search", "tracker.deploy", "tracker.runner", "tracker.cli"),
    "tracker.deploy": ("tracker.search", "tracker.measure", "tracker.runner", "tracker.cli"),
}

ALLOWED_SELF = {"tracker.errors": ("tracker.errors",)}


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names.extend(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _layer(module: str) -> str | None:
    for layer in sorted(FORBIDDEN, key=len, reverse=True):
        if module == layer or module.startswith(layer + "."):
            return layer
    return None


MODULES = sorted(PKG.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PKG)))
def test_no_upward_imports(path: Path) -> None:
    module = _module_name(path)
    layer = _layer(module)
    if layer is None:
        return
    bad = [
        name for name in _imports(path)
        for prefix in FORBIDDEN[layer]
        if (name == prefix.rstrip(".") or name.startswith(prefix if prefix.endswith(".")
            else prefix + ".") or name == prefix)
        and not name.startswith(ALLOWED_SELF.get(layer, ("\0",)))
    ]
    assert not bad, f"{module} (layer {layer}) imports from a layer above it: {sorted(set(bad))}"


def test_checker_sees_a_violation(tmp_path: Path) -> None:
    """The checker itself must be able to fail: an import of tracker.search is flagged."""
    fake = tmp_path / "x.py"
    fake.write_text("from tracker.search import space\nimport tracker.runner\n")
    names = _imports(fake)
    assert "tracker.search" in names and "tracker.runner" in names


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PKG)))
def test_modules_stay_small(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= 450, f"{path.name} has {lines} lines; split it (DESIGN.md: about 400 at most)"
