"""The study commands: ``tracker config``, ``check``, ``tune``, ``confirm``, ``profile``."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import click

from tracker.cli.group import cli
from tracker.cli.params import OptionalChoice as _Choice
from tracker.cli.params import OptionalNumber as _Optional
from tracker.cli.params import blank as _blank
from tracker.cli.params import gpu_list as _gpu_list
from tracker.cli.params import packed
from tracker.launch_modes import MODES
from tracker.samplers import SAMPLERS


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
    from tracker.triton.formats import load_model_info

    model_name = name or (model_path.name if model_path.is_dir() else model_path.stem)
    info = load_model_info(model_path, model_name, base_config)
    values = dict(model_config.parse_assignment(text) for text in assignments)
    cfg = model_config.apply(info, values) if values else info.config
    click.echo(model_config.dumps(cfg), nl=False)


# -- study spec check (tracker/spec/, tracker/search/summary.py) --
@cli.command("check")
@click.argument("spec_path", metavar="SPEC", type=click.Path(path_type=Path))
@click.option("--outputs", is_flag=True, help="Also serve the default configuration, send "
              "it the output check's probes twice and say which outputs are not "
              "deterministic (starts Triton).")
def check_command(spec_path: Path, outputs: bool) -> None:
    """Validate the study spec SPEC against its model and show what the study will do.

    Builds the model first when the spec's `model.build` script has not made it yet.
    Exit status 1, with one line per problem, when the spec is invalid.
    """
    from tracker.invocation import remembered
    from tracker.invocation.session import spec_configuration
    from tracker.outputs.default import probe_default, static_check
    from tracker.spec import ensure_model, load_spec
    from tracker.triton.server.modes import make_server
    from tracker.tuning.preflight import check_study

    spec = load_spec(spec_path)
    if not spec.model.path.exists() and spec.model.build is not None:
        click.echo(f"building {spec.model.path.name} with {spec.model.build.name} ...", err=True)
    ensure_model(spec)
    conf = spec_configuration(spec)  # starts Triton once for a model it auto-completes
    server = make_server(spec.server)  # constructed, never started
    click.echo(check_study(spec, conf, server))
    warm = remembered.for_check(spec, conf, server)  # search.warm_start: what is reused
    if warm:
        click.echo(warm)
    click.echo(static_check(spec, conf))
    if outputs:
        click.echo(probe_default(spec_path))


# -- tuning studies (tracker/tuning/, docs/tuning.md) --
@dataclass(frozen=True)
class ServerArgs:
    """The server options of ``tune`` and ``profile`` ("" from an MLproject parameter: not
    given)."""

    mode: str | None
    strategy: str | None
    url: str | None
    image: str | None

    def overrides(self) -> dict[str, object]:
        """The spec's server section values these options override (None: the spec's)."""
        return {"mode": _blank(self.mode), "strategy": _blank(self.strategy),
                "url": _blank(self.url), "image": _blank(self.image)}


@dataclass(frozen=True)
class TuneArgs(ServerArgs):
    """``tracker tune``'s options as given."""

    spec_path: Path
    n_trials: int | None
    timeout_s: float | None
    study_name: str | None
    storage: str | None
    sampler: str | None
    seed: int | None
    patience: int | None
    no_bar: bool
    gpus: str | None
    heartbeat_interval: int | None
    grace_period: int | None
    use_perf_analyzer: bool


@cli.command("tune")
@click.argument("spec_path", metavar="SPEC", type=click.Path(path_type=Path))
# (each two-word option also as --word_word: what `mlflow run -P word_word=...` appends)
@click.option("--n-trials", "--n_trials", "n_trials", type=_Optional(int),
              help="Distinct configurations the study should measure, across runs and "
              "workers; a repeated proposal is kept as a COMPLETE trial marked duplicate_of "
              "and does not count (default: the spec's search.n_trials).")
@click.option("--timeout", "timeout_s", type=_Optional(float),
              help="Stop starting trials after this many seconds.")
@click.option("--study-name", "--study_name", "study_name", help="Optuna study name "
              "(default: search.study_name or the model name). The same name and storage "
              "resume the study.")
@click.option("--storage", help="Optuna storage URL, e.g. postgresql://user@host/db "
              "(default: search.storage, else optuna.db beside the MLflow sqlite database). "
              "${VAR} is read from the environment.")
@click.option("--sampler", type=_Choice(list(SAMPLERS)),
              help="Optuna sampler (overrides search.sampler).")
@click.option("--seed", type=_Optional(int), help="Sampler seed (overrides search.seed).")
@click.option("--patience", type=_Optional(int),
              help="Stop after this many trials without improvement.")
@click.option("--mode", type=_Choice(list(MODES)),
              help="Server launch mode (overrides server.mode).")
@click.option("--strategy", type=_Choice(["restart", "reload"]),
              help="How a trial config reaches the server (overrides server.strategy).")
@click.option("--url", help="Remote server gRPC host:port (server.url, mode remote).")
@click.option("--image", help="Docker image (server.image, mode docker).")
@click.option("--no-bar", is_flag=True, help="No progress bar (lines only).")
@click.option("--gpus", help="GPUs of this worker's Triton: 'all' or indices '0,1' "
              "(server.gpus; CUDA_VISIBLE_DEVICES for local, a device request for docker). "
              "One worker per GPU: docs/scale-out.md.")
@click.option("--heartbeat-interval", "--heartbeat_interval", "heartbeat_interval",
              type=_Optional(int), help="Seconds between a running trial's heartbeats in the "
              "study storage (default 10).")
@click.option("--grace-period", "--grace_period", "grace_period", type=_Optional(int),
              help="Seconds without heartbeat after which another worker fails a trial and "
              "retries it (default 2 x interval).")
@click.option("--perf-analyzer", "use_perf_analyzer", is_flag=True,
              help="Measure every trial (and the confirmation) with the perf_analyzer binary on "
              "PATH instead of the built-in load generator (load.perf_analyzer_flags added).")
@packed(TuneArgs)
def tune_command(g: TuneArgs) -> None:
    """Run (or resume) the tuning study of SPEC: one MLflow child run per trial under the
    study's parent run. Ctrl-C stops cleanly (exit 130); the same command resumes."""
    from tracker.invocation.session import TuneOptions
    from tracker.lifecycle import Interrupted
    from tracker.tuning.tune import tune

    options = TuneOptions(
        n_trials=g.n_trials, timeout_s=g.timeout_s, study_name=_blank(g.study_name),
        storage=_blank(g.storage), sampler=_blank(g.sampler), seed=g.seed, patience=g.patience,
        server={**g.overrides(), "gpus": _gpu_list(g.gpus)},
        bar=False if g.no_bar else None, heartbeat_interval=g.heartbeat_interval,
        grace_period=g.grace_period,
        load_client="perf_analyzer" if g.use_perf_analyzer else "builtin")
    try:
        tune(g.spec_path, options)
    except Interrupted as stop:
        click.echo(f"{stop}: the current trial is marked FAIL and will be measured again; "
                   "run the same command to resume.", err=True)
        sys.exit(stop.exit_code)


@cli.command("confirm")
@click.argument("spec_path", metavar="SPEC", type=click.Path(path_type=Path))
@click.option("--study", "--study_name", "study_name", help="Study name (default: the spec's "
              "search.study_name or model name).")
@click.option("--storage", help="Optuna storage URL (default: as for tracker tune).")
@click.option("--rounds", type=click.IntRange(min=1), help="Most rounds in all, those already "
              "measured included (confirm.rounds; paired design: 3 pairs per round); no "
              "budget stops them, only a decided verdict.")
@click.option("--top-k", "--top_k", "top_k", type=click.IntRange(min=1),
              help="Configurations besides the default (confirm.top_k; in rounds only, the "
              "paired design confirms the best).")
@click.option("--new", "new", is_flag=True, help="Start a new confirmation instead of "
              "continuing the study's rounds.")
def confirm_command(spec_path: Path, study_name: str | None, storage: str | None,
                    rounds: int | None, top_k: int | None, new: bool) -> None:
    """Re-measure the best configuration of SPEC's finished study against the default (side
    by side in pairs, or in interleaved rounds where pairing cannot hold; not the search) until
    the verdict is decided, print it with its 95% intervals, rewrite the study's report. The
    study's pairs or rounds are continued (an interrupted or inconclusive confirmation goes on
    where it stopped, up to --rounds); --new starts over."""
    from tracker.confirm.command import confirm_study
    from tracker.lifecycle import Interrupted

    try:
        result = confirm_study(spec_path, study_name=_blank(study_name),
                               storage=_blank(storage), rounds=rounds, top_k=top_k, new=new)
    except Interrupted as stop:
        click.echo(str(stop), err=True)
        sys.exit(stop.exit_code)
    click.echo(result.summary)
    click.echo(f"verdict: {result.verdict or 'none (nothing to confirm)'}; MLflow parent run "
               f"{result.parent_run_id}")


@dataclass(frozen=True)
class ProfileArgs(ServerArgs):
    """``tracker profile``'s options as given."""

    spec_path: Path
    assignments: tuple[str, ...]
    set_all: str
    config_path: Path | None
    concurrency: str
    csv_path: Path
    use_perf_analyzer: bool


@cli.command("profile")
@click.argument("spec_path", metavar="SPEC", type=click.Path(path_type=Path))
@click.option("--set", "assignments", multiple=True, metavar="PATH=VALUE",
              help="Set a config field (or concurrency) by its path; repeatable.")
@click.option("--set-all", "set_all", default="", metavar="'PATH=VALUE ...'",
              help="Several PATH=VALUE separated by spaces (the MLproject's `set`).")
@click.option("--mode", type=_Choice(list(MODES)),
              help="Server launch mode (overrides server.mode).")
@click.option("--strategy", type=_Choice(["restart", "reload"]),
              help="How the config reaches the server (overrides server.strategy).")
@click.option("--url", help="Remote server gRPC host:port.")
@click.option("--image", help="Docker image.")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False,
                                                           path_type=Path),
              help="A config.pbtxt to serve (its fields win over the derived defaults; "
              "default: the spec's model.config, else the model's default config).")
@click.option("--concurrency", "concurrency", default="", metavar="1,4,16",
              help="Concurrency levels to sweep instead of the spec's load.concurrency "
              "(request rates when the spec sets load.request_rate).")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("perf.csv"), show_default=True,
              help="Where to write the sweep in perf_analyzer's CSV columns.")
@click.option("--perf-analyzer", "use_perf_analyzer", is_flag=True,
              help="Measure with the perf_analyzer binary on PATH instead of the built-in "
              "load generator.")
@packed(ProfileArgs)
def profile_command(g: ProfileArgs) -> None:
    """Measure one configuration of SPEC's model (its default, --config, with --set fields
    applied) over the load sweep, logged as one MLflow run; print the sweep, write the CSV.
    The server is stopped at the end, also on errors and Ctrl-C."""
    from tracker.lifecycle import Interrupted
    from tracker.measure.csvio import write_csv
    from tracker.measure.sweep_text import table
    from tracker.profile.command import profile
    from tracker.triton.model_config import parse_assignment

    texts = [*g.assignments, *g.set_all.split()]
    values = dict(parse_assignment(text) for text in texts)
    try:
        levels = [float(part) for part in g.concurrency.split(",") if part.strip()] or None
    except ValueError:
        raise click.BadParameter(f"must be numbers separated by commas, like 1,4,16, but got "
                                 f"{g.concurrency!r}", param_hint="--concurrency") from None
    try:
        result = profile(g.spec_path, values, server_overrides=g.overrides(),
                         config_path=g.config_path, levels=levels,
                         load_client="perf_analyzer" if g.use_perf_analyzer else "builtin")
    except Interrupted as stop:
        click.echo(str(stop), err=True)
        sys.exit(stop.exit_code)
    best = result.choice
    verdict = (f"{'meets' if best.feasible else 'violates'} the constraints"
               f"{'' if best.stable else ' (UNSTABLE: its windows never agreed)'}; "
               f"MLflow run {result.run_id}")
    if result.named:  # several entry models, measured together
        for name in result.named:
            got = result.by_model[name]
            out = g.csv_path.with_name(f"{g.csv_path.stem}-{name}{g.csv_path.suffix}")
            click.echo(f"model {name}:\n{table(got)}\nwrote {write_csv(got, out)}")
        each = "; ".join(
            f"{n} concurrency {best.metrics.get(f'{n}/concurrency', 0):g}, "
            f"{best.metrics.get(f'{n}/perf_throughput', 0):,.1f} infer/s"
            for n in result.named)
        click.echo(f"best joint level: {each}; {verdict}")
        return
    click.echo(f"{table(result.measurements)}\nwrote {write_csv(result.measurements, g.csv_path)}")
    click.echo(f"best level: concurrency {best.concurrency}, "
               f"{best.metrics.get('perf_throughput', 0):,.1f} infer/s, {verdict}")
