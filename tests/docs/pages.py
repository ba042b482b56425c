"""The documentation's pages, for the tests of this folder: which are hand-written, which are
generated reference, and their text with code removed where a word may name code."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
#: pages whose bulk is generated from the code (tracker/cli/reference*.py)
GENERATED = {"spec.md", "cli.md"}


def user_pages() -> list[Path]:
    """README.md, CHANGELOG.md and every page of docs/."""
    pages = [REPO / "README.md", *sorted(DOCS.glob("*.md"))]
    changelog = REPO / "CHANGELOG.md"
    return [*pages, changelog] if changelog.exists() else pages


def hand_written() -> list[Path]:
    return [p for p in sorted(DOCS.glob("*.md")) if p.name not in GENERATED]


def prose(text: str) -> str:
    """``text`` without fenced code blocks and inline code spans (which may name code, such as
    a module ``session.py``); line numbers kept."""
    text = re.sub(r"^```.*?^```", lambda m: "\n" * m.group(0).count("\n"), text,
                  flags=re.S | re.M)  # the same lines, so that line numbers still hold
    return re.sub(r"`[^`\n]*`", "", text)
