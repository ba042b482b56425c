"""Publish a pipeline (an entry model and its composing models) into a Triton model repository:
every model switched to the new version, READY as a whole, or every model rolled back.

The entry serves under the deployment name, each composing model under its own name (the
entry's config calls them by name). Publishing version N:

1. every model's files are staged aside and renamed to ``<repo>/<model>/N/``;
2. in load order (composing models first, the entry last) each model's config.pbtxt lists
   the versions it serves now and N, and it is loaded: N loads beside the serving version,
   which keeps answering; each must be READY; the entry then answers one inference sent to
   version N (when its inputs are numbers: random bytes mean nothing to a model that
   decodes them);
3. entry first, then the composing models, config.pbtxt lists only N and is loaded again:
   the old versions are dropped; every model is READY again;
4. any failure on the way: in reverse load order (the entry first) every model gets its
   previous config.pbtxt back and is loaded again, a model that did not exist before is
   unloaded and its folder removed, the N folders are removed; :class:`DeployError` names the
   model, the step and Triton's message. The previous version of every model serves as before.

A composing model's ``deployment.json`` says ``part_of: <deployment>``: a model another
deployment owns (or a folder no deployment wrote) is never taken over. Models the previous
version had and this one has not are unloaded and removed after the switch.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tritonclient.grpc import model_config_pb2

from tracker.deploy import steps
from tracker.deploy.publish import DeploymentState, Publisher, PublishResult
from tracker.errors import DeployError, ServerError
from tracker.tracking.flavor import CONFIG_FILE, TritonModelDir, validate_model_name
from tracker.triton import model_config

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from tracker.tracking.pipeline_flavor import TritonRepositoryDir

PART_OF = "part_of"   #: deployment.json of a composing model: the pipeline's deployment
MODELS = "models"     #: deployment.json of the entry: every model, load order
SERVING = "pipeline"  #: the entry's ``serving`` (each model's is in its own deployment.json)


@dataclass
class _Model:
    """One model of the switch and what it takes to undo it."""

    name: str
    source: TritonModelDir
    production: ModelConfig
    previous: tuple[int, ...]
    old_text: str | None
    existed: bool
    modes: list[str]
    served: ModelConfig | None = None
    created: bool = False
    touched: bool = False
    staging: tuple[Path, ...] = ()


def digest(source: TritonRepositoryDir, name: str) -> str:
    """What makes two deployments of a pipeline the same: every model's files and config."""
    h = hashlib.sha256(name.encode())
    for model in source.models:
        h.update(f"\0{model.name}\0{steps.source_digest(model)}".encode())
    return h.hexdigest()[:16]


def _numeric_inputs(cfg: ModelConfig) -> bool:
    return all(i.data_type != model_config_pb2.TYPE_STRING for i in cfg.input)


def _refuse_foreign(name: str, names: list[str],
                    states: Mapping[str, DeploymentState | None]) -> None:
    entry = states[name]
    if entry is not None and entry.meta.get(PART_OF):
        raise DeployError(f"{name!r} is a composing model of deployment "
                          f"{entry.meta[PART_OF]!r}; deploy the pipeline under another name")
    for other in names[:-1]:
        state = states[other]
        if state is None or state.meta.get(PART_OF) == name:
            continue
        owner = state.meta.get(PART_OF)
        what = (f"a composing model of deployment {owner!r}" if owner
                else "a deployment of its own" if state.meta
                else "a model this target did not deploy")
        raise DeployError(f"model {other!r} of pipeline {name!r} is already in the repository "
                          f"as {what}; a composing model belongs to one pipeline, so it is not "
                          "taken over (remove it first)")


def publish_pipeline(pub: Publisher, name: str, version: int, source: TritonRepositoryDir, *,
                     meta: Mapping[str, Any] | None = None) -> PublishResult:
    """Serve ``source`` as version ``version`` of every model, the entry as ``name`` (see the
    module docstring). Raises :class:`DeployError` (with the server's message) after rolling
    every model back."""
    validate_model_name(name)
    if not isinstance(version, int) or version < 1:
        raise DeployError(f"a Triton version must be a positive integer, but got {version!r}")
    names = [*(m.name for m in source.composing), name]
    if name in names[:-1]:
        raise DeployError(f"deployment name {name!r} is also the name of a composing model of "
                          f"the pipeline {list(source.names)}")
    with pub.locked():
        start = time.monotonic()
        states = {n: pub.state(n) for n in names}
        _refuse_foreign(name, names, states)
        before = states[name]
        sha = digest(source, name)
        if (before is not None and before.meta.get("source_digest") == sha
                and all(s is not None and s.ready_versions == (version,)
                        for s in states.values())):
            pub.log(f"{name}: version {version} of the pipeline already serves; nothing to do")
            production = steps.production_of(source.entry, name)
            return PublishResult(name, version, (), SERVING, production, production, 0.0)
        plan = [_plan(pub, n, src, version, states[n]) for n, src in zip(names, source.models,
                                                                         strict=True)]
        try:
            for model in plan:
                _stage(pub, model, version, model.modes[0])
            for model in plan:
                _load_beside(pub, model, version, entry=model is plan[-1])
            for model in reversed(plan):
                _drop_old(pub, model, version)
            entry = plan[-1]
            assert entry.served is not None
            if _numeric_inputs(entry.served):
                steps.check_inference(pub.client, name, version, entry.served)
        except (steps.StepFailed, OSError) as exc:
            fail = exc if isinstance(exc, steps.StepFailed) else steps.StepFailed(
                "writing the version folders", str(exc))
            _rollback(pub, plan, version)
            serving = before.version if before is not None else None
            still = (f"version {serving} of every model still serves" if serving
                     else "nothing serves under these names")
            raise DeployError(f"deploying version {version} of pipeline {name!r} "
                              f"({', '.join(names)}) failed while {fail.step}; every model is "
                              f"rolled back, {still}. Triton said: {fail.message}") from None
        finally:
            for model in plan:
                for folder in model.staging:
                    shutil.rmtree(folder, ignore_errors=True)
        common = {**dict(meta or {})}
        for model in plan[:-1]:
            steps.drop_other_versions(pub.model_dir(model.name), version)
            pub.write_meta(pub.model_dir(model.name), model.name, version, model.modes[0],
                           {**common, PART_OF: name,
                            "source_digest": steps.source_digest(model.source)})
        steps.drop_other_versions(pub.model_dir(name), version)
        pub.write_meta(pub.model_dir(name), name, version, SERVING,
                       {**common, MODELS: names, "source_digest": sha,
                        "model_serving": {m.name: m.modes[0] for m in plan}})
        _remove_left_behind(pub, name, before, names)
        took = time.monotonic() - start
        previous = plan[-1].previous
        pub.log(f"{name}: version {version} of the pipeline serves ({', '.join(names)})"
                + (f", replaced {list(previous)}" if previous else "") + f" in {took:.1f} s")
        assert plan[-1].served is not None
        return PublishResult(name, version, previous, SERVING,
                             steps.with_policy(plan[-1].served, name, [version]),
                             plan[-1].production, took)


def _plan(pub: Publisher, name: str, source: TritonModelDir, version: int,
          state: DeploymentState | None) -> _Model:
    production = steps.production_of(source, name)
    config_path = pub.model_dir(name) / CONFIG_FILE
    previous = tuple(v for v in (state.ready_versions if state else ()) if v != version)
    return _Model(name=name, source=source, production=production, previous=previous,
                  old_text=config_path.read_text() if config_path.is_file() else None,
                  existed=pub.model_dir(name).exists(),
                  modes=pub.modes(name, production, previous))


def _stage(pub: Publisher, model: _Model, version: int, mode: str) -> None:
    model_dir = pub.model_dir(model.name)
    existed = (model_dir / str(version)).exists()
    staging, model.served = steps.stage(model_dir, version, model.source, model.production,
                                        mode)
    model.staging = (*model.staging, staging)
    steps.put_in_place(model_dir, version, staging)
    model.created = model.created or not existed


def _load_beside(pub: Publisher, model: _Model, version: int, *, entry: bool) -> None:
    """Load version ``version`` beside the serving ones; an ONNX model on a server without the
    onnxruntime backend falls back to the shim (``serving: auto``), as for one model."""
    while True:
        assert model.served is not None
        config_path = pub.model_dir(model.name) / CONFIG_FILE
        both = steps.with_policy(model.served, model.name, [*model.previous, version])
        steps.write_atomic(config_path, model_config.dumps(both))
        model.touched = True
        beside = (f" beside its serving version(s) {list(model.previous)}"
                  if model.previous else "")
        try:
            pub.load(model.name, f"loading {model.name!r}{beside}")
            steps.wait_ready(pub.client, model.name, version, pub.ready_timeout_s,
                             step=f"waiting for {model.name!r} to be READY")
            return
        except steps.StepFailed as fail:
            if not (model.modes[0] == "onnxruntime" and len(model.modes) > 1
                    and steps.MISSING_BACKEND in fail.message):
                raise
        pub.log(f"{model.name}: the server has no onnxruntime backend; serving version "
                f"{version} through the Python backend")
        model.modes = model.modes[1:]
        _stage(pub, model, version, model.modes[0])


def _drop_old(pub: Publisher, model: _Model, version: int) -> None:
    assert model.served is not None
    only = steps.with_policy(model.served, model.name, [version])
    steps.write_atomic(pub.model_dir(model.name) / CONFIG_FILE, model_config.dumps(only))
    if model.previous:
        pub.load(model.name, f"dropping version(s) {list(model.previous)} of {model.name!r}")
        steps.wait_ready(pub.client, model.name, version, pub.ready_timeout_s,
                         step=f"waiting for {model.name!r} to be READY")


def _rollback(pub: Publisher, plan: list[_Model], version: int) -> None:
    """Every model back as it was, the entry first (module docstring, step 4)."""
    for model in reversed(plan):
        model_dir = pub.model_dir(model.name)
        if model.old_text is not None:
            steps.write_atomic(model_dir / CONFIG_FILE, model.old_text)
        if model.touched and model.previous:
            try:
                pub.client.load_model(model.name)
            except ServerError as exc:  # the old version serves through a failed load
                pub.log(f"{model.name}: restoring the previous config: {exc.reason}")
        elif model.touched:
            with contextlib.suppress(ServerError):
                pub.client.unload_model(model.name, wait_s=10)
        if model.created:
            shutil.rmtree(model_dir / str(version), ignore_errors=True)
        if not model.existed:
            shutil.rmtree(model_dir, ignore_errors=True)


def _remove_left_behind(pub: Publisher, name: str, before: DeploymentState | None,
                        names: list[str]) -> None:
    """Composing models of the previous version that this one no longer has."""
    old = before.meta.get(MODELS) if before is not None else None
    for other in reversed([str(n) for n in old or [] if str(n) not in names]):
        state = pub.state(other)
        if state is not None and state.meta.get(PART_OF) == name:
            _unload_and_remove(pub, other)


def _unload_and_remove(pub: Publisher, name: str) -> None:
    with contextlib.suppress(ServerError):
        pub.client.unload_model(name, wait_s=30)
    shutil.rmtree(pub.model_dir(name), ignore_errors=True)
    pub.log(f"{name}: removed")


def remove_pipeline(pub: Publisher, name: str) -> bool:
    """Unload and delete the pipeline deployed as ``name``: the entry, then its composing
    models (those whose deployment.json says they are part of it). A composing model alone
    is refused: deleting it would break the pipeline. False when there was nothing."""
    state = pub.state(name)
    if state is not None and state.meta.get(PART_OF):
        raise DeployError(f"{name!r} is a composing model of deployment "
                          f"{state.meta[PART_OF]!r}; delete that deployment instead")
    models = [str(m) for m in (state.meta.get(MODELS) or []) if str(m) != name] \
        if state is not None else []
    removed = pub.remove(name)
    with pub.locked():
        for other in reversed(models):
            found = pub.state(other)
            if found is not None and found.meta.get(PART_OF) == name:
                _unload_and_remove(pub, other)
    return removed
