"""Model Analyzer's and Perf Analyzer's commands: ``tracker model-analyzer profile|analyze|
report`` and ``tracker perf-analyzer`` take their flags and config files unchanged
(tracker/peers/, docs/migrate-model-analyzer.md)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import click

from tracker.cli.group import cli

_RAW = {"ignore_unknown_options": True, "allow_extra_args": True,
        "help_option_names": ["--help"]}


@cli.group("model-analyzer")
@click.option("-m", "--mode", type=click.Choice(["online", "offline"]), default="online",
              show_default=True, help="Model Analyzer's mode: online (throughput under "
              "latency constraints) is the one honoured.")
def model_analyzer(mode: str) -> None:
    """Model Analyzer's commands, run as tracked studies: the same flags and config files."""
    if mode == "offline":
        from tracker.peers.ma_options import PeerOptionError

        raise PeerOptionError("--mode offline cannot be honoured: it ranks configurations by "
                              "throughput alone with latency unbounded; give the objective "
                              "(perf_throughput) without a latency constraint in online mode")


def _help(args: list[str], usage: Callable[[], str]) -> bool:
    """Print the peer's usage when ``args`` ask for it (-h, --help or -?, anywhere)."""
    from tracker.peers.peer_help import wants_help

    if wants_help(args):
        click.echo(usage(), nl=False)
    return wants_help(args)


def _profile(args: list[str], command: str) -> None:
    from tracker.lifecycle import Interrupted
    from tracker.peers.ma_outputs import plain
    from tracker.peers.model_analyzer import profile
    from tracker.peers.peer_help import ma_usage

    if _help(args, lambda: ma_usage(command)):
        return

    try:
        done = profile(args, Path.cwd(), click.echo)
    except Interrupted as stop:
        click.echo(f"{stop}: run the same command again: the profile resumes.", err=True)
        sys.exit(stop.exit_code)
    for model, text in done.sentences.items():
        click.echo(f"{model}: {plain(text)}")
    for path in done.written:
        click.echo(f"wrote {path}")


@model_analyzer.command("profile", context_settings=_RAW, add_help_option=False)
@click.pass_context
def profile_command(ctx: click.Context) -> None:
    """Model Analyzer's profile: its flags (--model-repository, --profile-models, ...) and
    -f config.yaml, run as one study per model."""
    _profile(list(ctx.args), "profile")


@model_analyzer.command("analyze", context_settings=_RAW, add_help_option=False)
@click.pass_context
def analyze_command(ctx: click.Context) -> None:
    """Aliased to profile, as in Model Analyzer."""
    _profile(list(ctx.args), "analyze")


@model_analyzer.command("report", context_settings=_RAW, add_help_option=False)
@click.pass_context
def report_command(ctx: click.Context) -> None:
    """The summary of a finished profile; with -n/--report-model-configs, the detailed report
    of each configuration named (-e export path, -s checkpoint directory)."""
    from tracker.peers.model_analyzer import report
    from tracker.peers.peer_help import report_usage

    if not _help(list(ctx.args), report_usage):
        report(list(ctx.args), Path.cwd(), click.echo)


@cli.command("perf-analyzer", context_settings=_RAW, add_help_option=False)
@click.pass_context
def perf_analyzer_command(ctx: click.Context) -> None:
    """Perf Analyzer's command line (-m, -u, -i, --concurrency-range, -p, -f, ...), measured by
    the tracker's client and logged as an MLflow run."""
    from tracker.peers.peer_help import pa_usage
    from tracker.peers.perf_analyzer import measure

    if _help(list(ctx.args), pa_usage):
        return
    done = measure(list(ctx.args), click.echo)
    click.echo(f"MLflow run {done.run_id}")
