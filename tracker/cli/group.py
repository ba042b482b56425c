"""The ``tracker`` command group: reports every TrackerError as a message and exit status 1;
the commands register on it (tracker/cli/study.py, tracker/cli/deploy.py)."""

from __future__ import annotations

from typing import Any

import click

from tracker.cli.params import print_version as _print_version
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


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_print_version, help="Show the version (and the packages that decide "
              "how Triton is run and measured) and exit.")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of short error messages.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Tune Triton Inference Server model configurations, tracked in MLflow."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
