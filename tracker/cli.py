"""`tracker ...`: the command line. Turns every TrackerError into a message and exit status 1.

Each command is a thin shell: it parses options, calls one function of the package and prints
the result. The work lives in the modules; nothing here is needed to use them from Python.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import click

from tracker.errors import TrackerError


class _Group(click.Group):
    """A click group that reports TrackerError as a message (no traceback) and exits 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except TrackerError as err:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"error: {err}", err=True)
            ctx.exit(1)


@click.group(cls=_Group)
@click.option("--debug", is_flag=True, help="Show tracebacks instead of short error messages.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Tune Triton Inference Server model configurations, tracked in MLflow."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


# ---- commands are registered below, one block per capability ----


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="tracker")


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])
