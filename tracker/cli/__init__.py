"""The command line: `tracker ...`.

Turns every TrackerError and OSError into a one-line message
and exit status 1 (tracker/cli/group.py).

Each command parses its options, fills defaults from the spec where one is given (promote
also opens the study's storage), calls the package and prints the result.
"""

from __future__ import annotations

from collections.abc import Sequence

from tracker.cli import deploy, peers, study  # noqa: F401  (the commands register on the group)
from tracker.cli.group import cli

__all__ = ["cli", "main"]


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="tracker")
