"""`tracker ...`: the command line. Turns every TrackerError into a message and exit status 1.

Each command is a thin shell: it parses options, calls one function of the package and prints
the result. The work lives in the modules; nothing here is needed to use them from Python.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
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


# -- config.pbtxt (tracker/triton/model_config.py) --
@cli.command("config")
@click.argument("model_path", type=click.Path(path_type=Path))
@click.option("--name", help="Triton model name (default: the directory name, or the file's "
              "stem for an .onnx file).")
@click.option("--base", "base_config", type=click.Path(path_type=Path),
              help="A config.pbtxt whose fields win over the derived defaults.")
@click.option("--set", "assignments", multiple=True, metavar="PATH=VALUE",
              help="Set a config field by its path, e.g. instance_group.count=2 or "
              "dynamic_batching.preferred_batch_size=[4,8]. Repeatable.")
def config_command(model_path: Path, name: str | None, base_config: Path | None,
                   assignments: tuple[str, ...]) -> None:
    """Print the config.pbtxt Triton would use for MODEL_PATH (an .onnx file or a model
    directory), with any --set field paths applied."""
    from tracker.triton import model_config

    model_name = name or (model_path.name if model_path.is_dir() else model_path.stem)
    info = model_config.load_model_info(model_path, model_name, base_config)
    values = dict(model_config.parse_assignment(text) for text in assignments)
    cfg = model_config.apply(info, values) if values else info.config
    click.echo(model_config.dumps(cfg), nl=False)


# -- study spec check (tracker/spec.py, tracker/search/summary.py) --
@cli.command("check")
@click.argument("spec_path", metavar="SPEC", type=click.Path(path_type=Path))
def check_command(spec_path: Path) -> None:
    """Validate the study spec SPEC against its model and show what the study will do.

    Builds the model first when the spec's `model.build` script has not made it yet.
    Exit status 1, with one line per problem, when the spec is invalid.
    """
    from tracker.search.summary import check
    from tracker.spec import ensure_model, load_spec
    from tracker.triton.model_config import model_info

    spec = load_spec(spec_path)
    if not spec.model.path.exists() and spec.model.build is not None:
        click.echo(f"building {spec.model.path.name} with {spec.model.build.name} ...", err=True)
    ensure_model(spec)
    click.echo(check(spec, model_info(spec.model)))


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="tracker")


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])
