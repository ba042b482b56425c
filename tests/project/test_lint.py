"""ruff and strict mypy are part of the suite, so code that breaks them cannot land unnoticed
(the configuration is pyproject.toml's)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    path = BIN / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: it is one of the dev extras (pip install -e .[dev])")
    return found


def test_ruff_finds_nothing() -> None:
    out = subprocess.run([_tool("ruff"), "check", "tracker", "tests", "benchmarks", "projects"],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


@pytest.mark.slow
def test_mypy_strict_finds_nothing() -> None:
    out = subprocess.run([_tool("mypy"), "tracker"], cwd=REPO, capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
