"""The deployment commands: ``tracker promote``, ``watch``, ``status``, ``serve``."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import click

from tracker.cli.group import cli
from tracker.cli.params import OptionalNumber, packed
from tracker.cli.params import tracking_uri_env as _tracking_uri


# -- promotion and deployment (tracker/deploy/, docs/deploy.md) --
def _deploy_options(fn: Any) -> Any:
    for option in reversed([
        click.option("--url", help="gRPC endpoint of the serving Triton, host:port "
                     "[TRACKER_TRITON_URL; default localhost:8001]."),
        click.option("--repository", help="The serving Triton's model repository (a local "
                     "folder) [TRACKER_TRITON_REPOSITORY]."),
        click.option("--serving", help="How an ONNX model is served: auto, onnxruntime or python "
                     "[TRACKER_TRITON_SERVING; default auto]."),
        click.option("--tracking-uri", help="MLflow tracking/registry URI "
                     "[MLFLOW_TRACKING_URI; default sqlite:///mlflow.db]."),
    ]):
        fn = option(fn)
    return fn


@dataclass(frozen=True)
class DeployArgs:
    """The options of :func:`_deploy_options`: where the serving Triton is, where MLflow is."""

    url: str | None
    repository: str | None
    serving: str | None
    tracking_uri: str | None

    def settings(self, give: str = "pass --repository PATH") -> Any:
        """Target settings; an empty option (an MLproject parameter's default) is not given."""
        from tracker.deploy.settings import resolve_settings

        given = {"url": self.url, "repository": self.repository, "serving": self.serving}
        return resolve_settings("triton", {k: v for k, v in given.items() if v}, give)


@dataclass(frozen=True)
class PromoteArgs(DeployArgs):
    """``tracker promote``'s options as given."""

    spec_path: Path | None
    study_name: str | None
    storage: str | None
    registered_model: str | None
    deployment_name: str | None
    stage: str
    alias: str
    no_deploy: bool
    force: bool
    trial: int | None


@cli.command("promote")
@click.argument("spec_path", metavar="[SPEC]", required=False, type=click.Path(path_type=Path))
@click.option("--study", "study_name", help="Study name (default: the spec's search.study_name "
              "or model name; required without SPEC).")
@click.option("--storage", help="Optuna storage URL (default: the spec's, else optuna.db beside "
              "the MLflow sqlite database).")
@click.option("--registered-model", help="Registered model name (default: the spec's "
              "mlflow.registered_model or model name; the study name without SPEC).")
@click.option("--name", "deployment_name", help="Triton model name to serve the (first) entry "
              "model as (default: the spec's (first) model name; the study name without "
              "SPEC).")
@click.option("--stage", default="Production", show_default=True,
              help="Registry stage to move the version to.")
@click.option("--alias", default="production", show_default=True,
              help="Alias to point at the version.")
@click.option("--no-deploy", is_flag=True, help="Register, stage and alias only.")
@click.option("--force", is_flag=True, help="Promote the best configuration even when the "
              "confirmation keeps the default (equivalent or inconclusive).")
@click.option("--trial", "trial", type=OptionalNumber(int), metavar="N",
              help="Promote trial N instead (any feasible COMPLETE trial, e.g. another point "
              "of a Pareto front); the version's tag tracker.chosen_by says so.")
@_deploy_options
@packed(PromoteArgs)
def promote_command(g: PromoteArgs) -> None:
    """Register the study's best feasible trial (the confirmed one after a confirmation; with
    two objectives the Pareto front's point best on the first) or trial N, move it to STAGE
    with ALIAS, deploy it. A study whose confirmation says equivalent or inconclusive is
    refused unless --force or --trial.

    Exit status 1 with Triton's message when the deployment fails; the version that served
    before keeps serving and the new version is tagged tracker.deploy.status=failed.
    """
    from tracker.deploy.choose import Ask
    from tracker.deploy.pointers import Pointers
    from tracker.deploy.promote import Release, promote
    from tracker.errors import DeployError
    from tracker.search.optuna_study import default_storage
    from tracker.search.storage import make_storage

    settings = None if g.no_deploy else g.settings(
        "pass --repository PATH (or --no-deploy to register without deploying)")
    objectives: dict[str, str] = {}
    constraints: dict[str, Any] | None = None
    if g.spec_path is not None:  # the spec's values where no option gives one
        from tracker.spec import load_spec

        spec = load_spec(g.spec_path)
        g = replace(g, tracking_uri=g.tracking_uri or spec.mlflow.tracking_uri,
                    study_name=g.study_name or spec.study_name,
                    storage=g.storage or spec.search.storage,
                    registered_model=g.registered_model or spec.registered_model_name,
                    deployment_name=g.deployment_name or spec.model.names[0])
        objectives, constraints = dict(spec.objectives), dict(spec.constraints)
    if not g.study_name:
        raise DeployError("tracker promote needs a SPEC or --study NAME")
    import optuna

    with _tracking_uri(g.tracking_uri) as uri:
        storage = g.storage or default_storage(uri)
        try:
            study = optuna.load_study(study_name=g.study_name,
                                      storage=make_storage(storage, heartbeat_interval=None))
        except KeyError as exc:
            raise DeployError(f"no study named {g.study_name!r} in {storage}") from exc
        objectives = objectives or dict(study.user_attrs.get("objectives")
                                        or {"perf_throughput": "maximize"})
        result = promote(study, objectives=objectives, constraints=constraints,
                         release=Release(g.registered_model or g.study_name,
                                         g.deployment_name or g.study_name,
                                         Pointers(g.stage, g.alias)),
                         settings=settings, ask=Ask(g.trial, g.force),
                         log=lambda line: click.echo(line, err=True))
    served = (f"; serving as Triton model {result.deployment['name']!r} version "
              f"{result.deployment['version']}" if result.deployment else "")
    click.echo(f"{result.registered_model} version {result.version} (trial {result.trial}) is in "
               f"{result.stage} with alias {result.alias!r}{served}")


@dataclass(frozen=True)
class WatchArgs(DeployArgs):
    """``tracker watch``'s options as given."""

    interval: float
    models: tuple[str, ...]
    stage: str
    alias: str
    once: bool


@cli.command("watch")
@click.option("--interval", default=10.0, show_default=True, type=float,
              help="Seconds between polls of the registry.")
@click.option("--model", "models", multiple=True, help="Registered model to watch (repeatable; "
              "default: every model tagged tracker.flavor=triton).")
@click.option("--stage", default="Production", show_default=True,
              help="Deploy each version that enters this stage.")
@click.option("--alias", default="production", show_default=True,
              help="Deploy each version that receives this alias.")
@click.option("--once", is_flag=True, help="Poll once and exit: status 1 when the poll fails "
              "(registry or server unreachable) or a deployment it made fails.")
@_deploy_options
@packed(WatchArgs)
def watch_command(g: WatchArgs) -> None:
    """Deploy each version that enters STAGE or receives ALIAS in the registry (one log line
    per action). Restart-safe: what was handled is kept in the registry's tags. SIGTERM and
    Ctrl-C stop it at once, also while MLflow is retrying a request; a deployment in progress
    is rolled back (or finished, when it had already switched) first."""
    from tracker.deploy.watch import Watcher

    watcher = Watcher(g.settings(), models=g.models, stage=g.stage, alias=g.alias,
                      log=lambda line: click.echo(line))
    if g.once:  # a signal stops it as any command (tracker/cli/group.py)
        with _tracking_uri(g.tracking_uri):
            watcher.once()
        return
    from tracker.lifecycle import until_signal

    with _tracking_uri(g.tracking_uri), until_signal() as stop:
        watcher.run(g.interval, stop=stop)


@cli.command("status")
@click.option("--model", "models", multiple=True, help="Registered model to show (repeatable; "
              "default: every model tagged tracker.flavor=triton).")
@click.option("--stage", default="Production", show_default=True,
              help="Registry stage to show.")
@click.option("--alias", default="production", show_default=True,
              help="Alias to show.")
@_deploy_options
def status_command(models: tuple[str, ...], stage: str, alias: str, **options: Any) -> None:
    """What Triton serves and what the registry says (stage, alias, deploy status)."""
    from tracker.deploy.status import report_for
    with _tracking_uri(options.pop("tracking_uri")):
        click.echo(report_for(options, models=models, stage=stage, alias=alias))


@cli.command("serve")
@click.argument("repository", type=click.Path(path_type=Path, file_okay=False))
@click.option("--grpc-port", default=8001, show_default=True, type=int,
              help="The server's gRPC port.")
@click.option("--http-port", default=8000, show_default=True, type=int,
              help="The server's HTTP port.")
@click.option("--metrics-port", default=8002, show_default=True, type=int,
              help="The server's metrics port.")
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
