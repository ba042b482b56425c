"""Where a spec file given on the command line is.

An absolute path is taken as it is. A relative one is looked for, in this order:

1. in the current folder. Under ``mlflow run`` that is the project's folder (MLflow runs every
   entry point there, in a fresh clone for a repository URI), so the project's own specs
   (``projects/quickstart/study.yaml``) are found however and wherever the project was run;
2. in ``$TRACKER_CALLER_DIR``: the MLproject sets it to the folder ``mlflow run`` was started
   in (a ``type: path`` parameter, which MLflow itself resolves there), so a user's own spec
   given relative to where they typed the command is found too.

A file of the same name in both: the first wins and a line on stderr says so (give the path
absolute to mean the other). Found nowhere: one :class:`SpecNotFoundError` line naming every
place looked in.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tracker.errors import SpecError

CALLER_DIR_ENV = "TRACKER_CALLER_DIR"


class SpecNotFoundError(SpecError):
    """The spec file is in none of the places looked in; ``str(err)`` is one line."""

    def __init__(self, given: Path, places: list[tuple[Path, str]]) -> None:
        super().__init__([f"spec file not found: {given}"], str(given))
        where = " and in ".join(f"{folder} ({why})" for folder, why in places)
        self.args = (f"spec file not found: {given}" + (f"; looked in {where}" if places
                                                          else ""),)

    def __str__(self) -> str:
        return str(self.args[0])


def _places() -> list[tuple[Path, str]]:
    cwd = Path.cwd()
    under_mlflow_run = bool(os.environ.get("MLFLOW_RUN_ID"))
    places = [(cwd, "the project folder `mlflow run` runs in" if under_mlflow_run
               else "the current folder")]
    caller = os.environ.get(CALLER_DIR_ENV)
    if caller and Path(caller).absolute() != cwd:
        places.append((Path(caller).absolute(), "the folder `mlflow run` was started in"))
    return places


def locate_spec(path: str | Path) -> Path:
    """The spec file ``path`` names (see the module doc). Raises SpecNotFoundError."""
    given = Path(path).expanduser()
    if given.is_absolute():
        if not given.exists():
            raise SpecNotFoundError(given, [])
        return given
    places = _places()
    found = [(folder / given, why) for folder, why in places if (folder / given).exists()]
    if not found:
        raise SpecNotFoundError(given, places)
    chosen, why = found[0]
    others = [p for p, _ in found[1:] if not _same(p, chosen)]
    if others:
        print(f"note: spec {given}: using {chosen} ({why}), not {others[0]}; give an absolute "
              "path to use the other", file=sys.stderr)
    return chosen


def _same(a: Path, b: Path) -> bool:
    try:
        return a.samefile(b) or (a.is_file() and b.is_file()
                                 and a.read_bytes() == b.read_bytes())
    except OSError:
        return False
