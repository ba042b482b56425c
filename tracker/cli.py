"""`tracker ...`: the command line. Turns every TrackerError into a message and exit status 1.

Each command parses its options, fills defaults from the spec where one is given (promote
also opens the study's storage), calls the package and prints the result.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from tracker.cli_params import OptionalChoice as _Choice
from tracker.cli_params import OptionalNumber as _Optional
from tracker.cli_params import blank as _blank
from tracker.cli_params import gpu_list as _gpu_list
from tracker.cli_params import print_version as _print_version
from tracker.cli_params import tracking_uri_env as _tracking_uri
from tracker.errors import TrackerError
from tracker.launch_modes import MODES


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


# -- study spec check (tracker/spec/, tracker/search/summary.py) --
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


# -- tuning studies (tracker/runner.py, docs/tuning.md) --
@cli.command("tune")
@click.argument("spec_path", metavar="SPEC", type=click.Path(path_type=Path))
# (each two-word option also as --word_word: what `mlflow run -P word_word=...` appends)
@click.option("--n-trials", "--n_trials", "n_trials", type=_Optional(int),
              help="Complete trials the study should hold, across runs and workers "
              "(default: the spec's search.n_trials).")
@click.option("--timeout", "timeout_s", type=_Optional(float),
              help="Stop starting trials after this many seconds.")
@click.option("--study-name", "--study_name", "study_name", help="Optuna study name "
              "(default: search.study_name or the model name). The same name and storage "
              "resume the study.")
@click.option("--storage", help="Optuna storage URL, e.g. postgresql://user@host/db "
              "(default: search.storage, else optuna.db beside the MLflow sqlite database). "
              "${VAR} is read from the environment.")
@click.option("--sampler", type=_Choice(["tpe", "random", "grid", "nsga2"]))
@click.option("--seed", type=_Optional(int))
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
def tune_command(spec_path: Path, n_trials: int | None, timeout_s: float | None,
                 study_name: str | None, storage: str | None, sampler: str | None,
                 seed: int | None, patience: int | None, mode: str | None, strategy: str | None,
                 url: str | None, image: str | None, no_bar: bool, gpus: str | None,
                 heartbeat_interval: int | None, grace_period: int | None) -> None:
    """Run (or resume) the tuning study of SPEC: one MLflow child run per trial under the
    study's parent run. Ctrl-C stops cleanly (exit 130); the same command resumes."""
    from tracker.runner import Interrupted, TuneOptions, tune

    options = TuneOptions(
        n_trials=n_trials, timeout_s=timeout_s, study_name=_blank(study_name),
        storage=_blank(storage), sampler=_blank(sampler), seed=seed, patience=patience,
        server={"mode": _blank(mode), "strategy": _blank(strategy), "url": _blank(url),
                "image": _blank(image), "gpus": _gpu_list(gpus)},
        bar=False if no_bar else None, heartbeat_interval=heartbeat_interval,
        grace_period=grace_period)
    try:
        tune(spec_path, options)
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
              "measured included (confirm.rounds).")
@click.option("--top-k", "--top_k", "top_k", type=click.IntRange(min=1),
              help="Configurations besides the default (confirm.top_k).")
@click.option("--new", "new", is_flag=True, help="Start a new confirmation instead of "
              "continuing the study's rounds.")
def confirm_command(spec_path: Path, study_name: str | None, storage: str | None,
                    rounds: int | None, top_k: int | None, new: bool) -> None:
    """Re-measure the best configurations of SPEC's finished study and the default in
    interleaved rounds (not the search) until the verdict is decided, print it with its 95%
    intervals, rewrite the study's report. The study's rounds are continued (an interrupted or
    inconclusive confirmation goes on where it stopped, up to --rounds); --new starts over."""
    from tracker.confirm_study import confirm_study
    from tracker.runner import Interrupted

    try:
        result = confirm_study(spec_path, study_name=_blank(study_name),
                               storage=_blank(storage), rounds=rounds, top_k=top_k, new=new)
    except Interrupted as stop:
        click.echo(str(stop), err=True)
        sys.exit(stop.exit_code)
    click.echo(result.summary)
    click.echo(f"verdict: {result.verdict or 'none (nothing to confirm)'}; MLflow parent run "
               f"{result.parent_run_id}")


@cli.command("profile")
@click.argument("spec_path", metavar="SPEC", type=click.Path(path_type=Path))
@click.option("--set", "assignments", multiple=True, metavar="PATH=VALUE",
              help="Set a config field (or concurrency) by its path; repeatable.")
@click.option("--set-all", "set_all", default="", metavar="'PATH=VALUE ...'",
              help="Several PATH=VALUE separated by spaces (the MLproject's `set`).")
@click.option("--mode", type=_Choice(list(MODES)))
@click.option("--strategy", type=_Choice(["restart", "reload"]))
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
def profile_command(spec_path: Path, assignments: tuple[str, ...], set_all: str,
                    mode: str | None, strategy: str | None, url: str | None,
                    image: str | None, config_path: Path | None, concurrency: str,
                    csv_path: Path, use_perf_analyzer: bool) -> None:
    """Measure one configuration of SPEC's model (its default, --config, with --set fields
    applied) over the load sweep, logged as one MLflow run; print the sweep, write the CSV.
    The server is stopped at the end, also on errors and Ctrl-C."""
    from tracker.measure.csvio import write_csv
    from tracker.measure.report import table
    from tracker.profile import profile
    from tracker.runner import Interrupted
    from tracker.triton.model_config import parse_assignment

    texts = [*assignments, *set_all.split()]
    values = dict(parse_assignment(text) for text in texts)
    try:
        levels = [float(part) for part in concurrency.split(",") if part.strip()] or None
    except ValueError:
        raise click.BadParameter(f"must be numbers separated by commas, like 1,4,16, but got "
                                 f"{concurrency!r}", param_hint="--concurrency") from None
    try:
        result = profile(spec_path, values, server_overrides={
            "mode": _blank(mode), "strategy": _blank(strategy), "url": _blank(url),
            "image": _blank(image)}, config_path=config_path, levels=levels,
            backend="perf_analyzer" if use_perf_analyzer else "builtin")
    except Interrupted as stop:
        click.echo(str(stop), err=True)
        sys.exit(stop.exit_code)
    click.echo(f"{table(result.measurements)}\nwrote {write_csv(result.measurements, csv_path)}")
    best = result.choice
    click.echo(f"best level: concurrency {best.concurrency}, "
               f"{best.metrics.get('perf_throughput', 0):,.1f} infer/s, "
               f"{'meets' if best.feasible else 'violates'} the constraints"
               f"{'' if best.stable else ' (UNSTABLE: its windows never agreed)'}; "
               f"MLflow run {result.run_id}")


# -- promotion and deployment (tracker/deploy/, docs/deploy.md) --
def _deploy_options(fn: Any) -> Any:
    for option in reversed([
        click.option("--url", help="gRPC endpoint of the serving Triton, host:port "
                     "[TRACKER_TRITON_URL; default localhost:8001]."),
        click.option("--repository", help="The serving Triton's model repository (a local "
                     "folder) [TRACKER_TRITON_REPOSITORY]."),
        click.option("--serving", help="How an ONNX model is served: auto, native or python "
                     "[TRACKER_TRITON_SERVING; default auto]."),
        click.option("--tracking-uri", help="MLflow tracking/registry URI "
                     "[MLFLOW_TRACKING_URI; default sqlite:///mlflow.db]."),
    ]):
        fn = option(fn)
    return fn


def _deploy_settings(url: str | None, repository: str | None, serving: str | None) -> Any:
    """Target settings; an empty option (an MLproject parameter's default) is not given."""
    from tracker.deploy.settings import resolve_settings

    given = {"url": url, "repository": repository, "serving": serving}
    return resolve_settings("triton", {k: v for k, v in given.items() if v})


@cli.command("promote")
@click.argument("spec_path", metavar="[SPEC]", required=False, type=click.Path(path_type=Path))
@click.option("--study", "study_name", help="Study name (default: the spec's search.study_name "
              "or model name; required without SPEC).")
@click.option("--storage", help="Optuna storage URL (default: the spec's, else optuna.db beside "
              "the MLflow sqlite database).")
@click.option("--registered-model", help="Registered model name (default: the spec's "
              "mlflow.registered_model or model name; the study name without SPEC).")
@click.option("--name", "deployment_name", help="Triton model name to serve it as (default: "
              "the spec's model name; the study name without SPEC).")
@click.option("--stage", default="Production", show_default=True)
@click.option("--alias", default="production", show_default=True)
@click.option("--no-deploy", is_flag=True, help="Register, stage and alias only.")
@click.option("--force", is_flag=True, help="Promote the best configuration even when the "
              "confirmation keeps the default (equivalent or inconclusive).")
@_deploy_options
def promote_command(spec_path: Path | None, study_name: str | None, storage: str | None,
                    registered_model: str | None, deployment_name: str | None, stage: str,
                    alias: str, no_deploy: bool, force: bool, url: str | None,
                    repository: str | None,
                    serving: str | None, tracking_uri: str | None) -> None:
    """Register the study's best feasible trial (the confirmed one after a confirmation),
    move it to STAGE with ALIAS, deploy it. A study whose confirmation says equivalent or
    inconclusive is refused unless --force.

    Exit status 1 with Triton's message when the deployment fails; the version that served
    before keeps serving and the new version is tagged tracker.deploy.status=failed.
    """
    from tracker.deploy.promote import promote
    from tracker.errors import DeployError
    from tracker.search.storage import make_storage
    from tracker.search.study import default_storage

    settings = None if no_deploy else _deploy_settings(url, repository, serving)
    objectives: dict[str, str] = {}
    constraints: dict[str, Any] | None = None
    if spec_path is not None:
        from tracker.spec import load_spec

        spec = load_spec(spec_path)
        tracking_uri = tracking_uri or spec.mlflow.tracking_uri
        study_name = study_name or spec.study_name
        storage = storage or spec.search.storage
        registered_model = registered_model or spec.registered_model_name
        deployment_name = deployment_name or spec.model.name
        objectives, constraints = dict(spec.objectives), dict(spec.constraints)
    if not study_name:
        raise DeployError("tracker promote needs a SPEC or --study NAME")
    import optuna

    with _tracking_uri(tracking_uri) as uri:
        storage = storage or default_storage(uri)
        try:
            study = optuna.load_study(study_name=study_name,
                                      storage=make_storage(storage, heartbeat_interval=None))
        except KeyError as exc:
            raise DeployError(f"no study named {study_name!r} in {storage}") from exc
        objectives = objectives or dict(study.user_attrs.get("objectives")
                                        or {"perf_throughput": "maximize"})
        result = promote(study, objectives=objectives, constraints=constraints,
                         registered_model=registered_model or study_name,
                         deployment_name=deployment_name or study_name, stage=stage,
                         alias=alias, settings=settings, force=force,
                         log=lambda line: click.echo(line, err=True))
    served = (f"; serving as Triton model {result.deployment['name']!r} version "
              f"{result.deployment['version']}" if result.deployment else "")
    click.echo(f"{result.registered_model} version {result.version} (trial {result.trial}) is in "
               f"{result.stage} with alias {result.alias!r}{served}")


@cli.command("watch")
@click.option("--interval", default=10.0, show_default=True, type=float,
              help="Seconds between polls of the registry.")
@click.option("--model", "models", multiple=True, help="Registered model to watch (repeatable; "
              "default: every model tagged tracker.flavor=triton).")
@click.option("--stage", default="Production", show_default=True)
@click.option("--alias", default="production", show_default=True)
@click.option("--once", is_flag=True, help="Poll once and exit.")
@_deploy_options
def watch_command(interval: float, models: tuple[str, ...], stage: str, alias: str, once: bool,
                  url: str | None, repository: str | None, serving: str | None,
                  tracking_uri: str | None) -> None:
    """Deploy each version that enters STAGE or receives ALIAS in the registry (one log line
    per action). Restart-safe: what was handled is kept in the registry's tags."""
    import signal
    import threading

    from tracker.deploy.watch import Watcher

    watcher = Watcher(_deploy_settings(url, repository, serving), models=models, stage=stage,
                      alias=alias, log=lambda line: click.echo(line))
    stop = threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
    with _tracking_uri(tracking_uri):
        watcher.run(interval, stop=stop, max_polls=1 if once else None)


@cli.command("serve")
@click.argument("repository", type=click.Path(path_type=Path, file_okay=False))
@click.option("--grpc-port", default=8001, show_default=True, type=int)
@click.option("--http-port", default=8000, show_default=True, type=int)
@click.option("--metrics-port", default=8002, show_default=True, type=int)
@click.option("--log-dir", type=click.Path(path_type=Path, file_okay=False),
              help="Where the server log goes (default: a temporary folder).")
def serve_command(repository: Path, grpc_port: int, http_port: int, metrics_port: int,
                  log_dir: Path | None) -> None:
    """Run the nvidia-pytriton wheel's Triton in explicit model control mode over REPOSITORY
    (created when missing) on 127.0.0.1 until Ctrl-C: a serving Triton for `tracker promote`,
    `tracker watch` and `mlflow deployments -t triton`."""
    from tracker.deploy.serve import serve_forever

    serve_forever(repository, grpc_port=grpc_port, http_port=http_port,
                  metrics_port=metrics_port, log_dir=log_dir, echo=click.echo)


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="tracker")


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])
