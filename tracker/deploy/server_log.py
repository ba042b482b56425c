"""The server log's lines about a model: Triton answers a config it refuses while reading the
repository with only "failed to poll from model repository"; the reason is in its log."""

from __future__ import annotations

from pathlib import Path


def size(path: Path | None) -> int:
    """Where the log ends now (0 when there is none or it cannot be read)."""
    try:
        return path.stat().st_size if path else 0
    except OSError:
        return 0


def error_lines(path: Path | None, name: str, offset: int) -> str:
    """``"; server log: ..."`` with the error lines about ``name`` written since ``offset``,
    or "" when there are none (or no readable log)."""
    if path is None:
        return ""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            text = fh.read(1 << 20).decode(errors="replace")
    except OSError:
        return ""
    lines = [line.split("] ", 1)[-1].strip() for line in text.splitlines()
             if line.startswith("E") and f"'{name}'" in line]
    return ("; server log: " + " | ".join(dict.fromkeys(lines))) if lines else ""
