"""The ``triton`` MLflow deployment target (entry point group ``mlflow.deployments``).

    mlflow deployments create -t triton [--flavor triton|onnx] --name NAME -m models:/REG/3 \
        -C repository=/models
    mlflow deployments update -t triton --name NAME -m models:/REG@production
    mlflow deployments list   -t triton          (TRACKER_TRITON_REPOSITORY / _URL set)
    mlflow deployments get    -t triton --name NAME
    mlflow deployments predict -t triton --name NAME --input-path in.json --output-path out.json
    mlflow deployments delete -t triton --name NAME

A registry version that ``create`` or ``update`` deploys gets the stage ``Production`` (the
previous one archived) and the alias ``production``, as after ``tracker promote``: the
registry says what serves (:mod:`tracker.deploy.pointers`).

It registers under the same entry point name as NVIDIA's mlflow-triton plugin and takes that
plugin's settings and commands unchanged (:mod:`tracker.deploy.nvidia`).
MLflow requires of this module exactly: ``target_help``, ``run_local`` and one subclass of
``BaseDeploymentClient`` (so no other subclass may be imported here). The work is in
:mod:`tracker.deploy.service` and :mod:`tracker.deploy.publish`; settings in
:mod:`tracker.deploy.settings`.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from mlflow.deployments import BaseDeploymentClient, PredictionsResponse
from mlflow.exceptions import MlflowException

from tracker.deploy import nvidia, service
from tracker.deploy.pointers import Pointers
from tracker.deploy.settings import help_text, resolve_settings
from tracker.errors import TrackerError
from tracker.lifecycle import Interrupted, until_signal


def _flavor_ok(flavor: str | None) -> str | None:
    if flavor not in (None, "", *nvidia.FLAVORS):
        raise MlflowException(f"the triton target deploys the flavors {list(nvidia.FLAVORS)}, "
                              f"but got flavor {flavor!r}")
    return flavor or None


def _echo(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _deploy(settings: Any, name: str, model_uri: str, *, exists: bool,
            model_flavor: str | None) -> dict[str, Any]:
    """``create`` and ``update``: a registry version gets the stage and the alias once it
    serves; a signal rolls the deployment back and is raised again, after one line."""
    try:
        return service.deploy(settings, name, model_uri, exists=exists, log=_echo,
                              model_flavor=model_flavor, pointers=Pointers())
    except TrackerError as exc:
        raise MlflowException(str(exc)) from exc
    except Interrupted as stop:
        _echo(f"{stop}: the deployment of {name!r} was rolled back (or finished, once it had "
              "switched)")
        raise


class TritonDeploymentClient(BaseDeploymentClient):
    """Deploys ``triton``-flavored MLflow models to a Triton server in explicit model control
    mode whose model repository is a local folder (settings: :func:`target_help`)."""

    def _settings(self, config: dict[str, Any] | None = None) -> Any:
        try:
            return resolve_settings(self.target_uri, config)
        except TrackerError as exc:
            raise MlflowException(str(exc)) from exc

    def create_deployment(self, name: str, model_uri: str, flavor: str | None = None,
                          config: dict[str, Any] | None = None,
                          endpoint: str | None = None) -> dict[str, Any]:
        model_flavor = _flavor_ok(flavor)
        settings = self._settings(config)
        return _deploy(settings, name, model_uri, exists=False, model_flavor=model_flavor)

    def update_deployment(self, name: str, model_uri: str | None = None,
                          flavor: str | None = None, config: dict[str, Any] | None = None,
                          endpoint: str | None = None) -> dict[str, Any]:
        model_flavor = _flavor_ok(flavor)
        settings = self._settings(config)
        if model_uri is None:  # nothing new to serve: report what serves
            try:
                return service.get_deployment(settings, name)
            except TrackerError as exc:
                raise MlflowException(str(exc)) from exc
        return _deploy(settings, name, model_uri, exists=True, model_flavor=model_flavor)

    def delete_deployment(self, name: str, config: dict[str, Any] | None = None,
                          endpoint: str | None = None) -> None:
        settings = self._settings(config)
        try:
            service.delete_deployment(settings, name, log=_echo)
        except TrackerError as exc:
            raise MlflowException(str(exc)) from exc

    def list_deployments(self, endpoint: str | None = None) -> list[dict[str, Any]]:
        try:
            return service.list_deployments(self._settings())
        except TrackerError as exc:
            raise MlflowException(str(exc)) from exc

    def get_deployment(self, name: str, endpoint: str | None = None) -> dict[str, Any]:
        try:
            return service.get_deployment(self._settings(), name)
        except TrackerError as exc:
            raise MlflowException(str(exc)) from exc

    def predict(self, deployment_name: str | None = None, inputs: Any = None,
                endpoint: str | None = None) -> PredictionsResponse:
        """``inputs``: a pandas DataFrame or a dict of numpy arrays (see
        :mod:`tracker.deploy.inference`); returns ``{"outputs": {output: nested list}}``
        (``["predictions"]`` reads the same)."""
        if not deployment_name:
            raise MlflowException("predict needs the deployment name")
        try:
            outputs = service.predict(self._settings(), deployment_name, inputs)
        except TrackerError as exc:
            raise MlflowException(str(exc)) from exc
        return nvidia.Predictions(outputs)


def target_help() -> str:
    return help_text()


def run_local(name: str, model_uri: str, flavor: str | None = None,
              config: dict[str, Any] | None = None) -> None:
    """(MLflow calls it without the target, whatever its base module's stub says.)

    Start a local Triton (the nvidia-pytriton wheel's) in explicit mode over a temporary
    repository (or ``-C repository=PATH``), deploy the model and serve until Ctrl-C or SIGTERM."""
    from tracker.triton.server.local import LocalTritonServer

    model_flavor = _flavor_ok(flavor)
    config = dict(config or {})
    with tempfile.TemporaryDirectory(prefix="triton-run-local-") as tmp:
        repository = Path(config.pop("repository", tmp))
        server = LocalTritonServer()
        try:
            with until_signal() as stop:
                server.start(repository, explicit=True)
                settings = resolve_settings("triton", {**config, "repository": str(repository),
                                                       "url": server.endpoints.grpc})
                service.deploy(settings, name, model_uri, log=_echo, model_flavor=model_flavor)
                _echo(f"serving {name!r} at grpc {server.endpoints.grpc}, "
                      f"http {server.endpoints.http}; Ctrl-C stops")
                while server.running and not stop.wait(1):
                    pass
        except TrackerError as exc:
            raise MlflowException(str(exc)) from exc
        finally:
            server.stop()
