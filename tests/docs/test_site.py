"""The documentation site builds with ``mkdocs build --strict`` (a broken link, a missing
anchor or a page left out of the nav fails it), and its nav has the four parts."""

from __future__ import annotations

import fnmatch
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.docs.pages import DOCS, REPO

PARTS = ["Tutorial", "How-to guides", "Reference", "Explanation"]


def nav_pages(nav: list[object]) -> list[str]:
    out: list[str] = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        out += nav_pages(value) if isinstance(value, list) else [str(value)]
    return out


def test_the_nav_has_four_parts_and_every_page() -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    top = [next(iter(e)) for e in config["nav"] if isinstance(e, dict)]
    assert [t for t in top if t in PARTS] == PARTS, top
    listed = nav_pages(config["nav"])
    assert sorted(set(listed)) == sorted(listed), "a page is in the nav twice"
    pending = [line.strip().lstrip("/") for line in config.get("not_in_nav", "").splitlines()]
    pages = {p.name for p in DOCS.glob("*.md")
             if not any(fnmatch.fnmatch(p.name, pattern) for pattern in pending if pattern)}
    assert set(listed) - {p.name for p in DOCS.glob("*.md")} == set(), "a page that is gone"
    assert pages - set(listed) == set(), "a page the nav does not list"


def test_the_site_builds_strict(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None or \
            importlib.util.find_spec("material") is None:
        pytest.skip("mkdocs and mkdocs-material are not installed: pip install -e '.[docs]'")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "-f", str(REPO / "mkdocs.yml"), "-d", str(tmp_path / "site")],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
                          check=False)
    warnings = [line for line in (proc.stdout + proc.stderr).splitlines()
                if "WARNING" in line or "ERROR" in line or "Aborted" in line]
    assert proc.returncode == 0, "mkdocs build --strict failed:\n" + "\n".join(warnings)
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "confirmation" / "index.html").is_file()


def test_a_broken_anchor_fails_the_build(tmp_path: Path) -> None:
    """The strict build is what catches a broken cross-reference: one planted is refused."""
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed: pip install -e '.[docs]'")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\nSee [the verdict](other.md#no-such-part).\n")
    (docs / "other.md").write_text("# Other\n\n## The verdict\n")
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    config.update(nav=["index.md", "other.md"], docs_dir=str(docs), theme={"name": "mkdocs"})
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "-d", str(tmp_path / "site")], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, check=False,
                          env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})
    assert proc.returncode != 0
    assert "no-such-part" in proc.stdout + proc.stderr
