"""Publish a configuration (one model, a pipeline, several entry models with their composing
models) into a Triton model repository: every model switched to the new version, or every
model rolled back. One model is the configuration of one model, its only entry: the same
steps, run once.

The first entry serves under the deployment name; every other model (composing models, the
other entries) under its own name (an entry's config calls its steps by name). Publishing
version N:

1. every model's files are staged aside and renamed to ``<repo>/<model>/N/`` (a version
   folder is complete or absent);
2. in load order (composing models first, the entries last) each model's config.pbtxt lists
   the versions it serves now and N, and it is loaded: N loads beside the serving version,
   which keeps answering; each must be READY (an ONNX model on a server without the
   onnxruntime backend is staged again with the onnxruntime shim, ``serving: auto``);
3. :func:`verify`: the new version of every model is loaded and READY beside the old one and
   nothing has switched yet; each entry answers one inference sent to version N (when its
   inputs are numbers: random bytes mean nothing to a model that decodes them). **A check
   of the new version before it takes traffic belongs here.**
4. in reverse load order (the entries first) config.pbtxt lists only N and is loaded again:
   the old versions are dropped (requests without a version go to the newest READY one, so
   clients see no failed request); every model is READY again;
5. any failure on the way: in reverse load order every model gets its previous config.pbtxt
   back and is loaded again, a model that did not exist before is unloaded and its folder
   removed, the N folders are removed; :class:`DeployError` names the model, the step and
   Triton's message. The previous version of every model serves as before.

The deployment's record (``deployment.json`` of the first entry) lists every model
(``models``, load order) and the entries; every other model's says ``part_of:
<deployment>``: a model another deployment owns (or a folder no deployment wrote) is never
taken over. Models the previous version had and this one has not are unloaded and removed
after the switch.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import time
from collections.abc import Callable, Mapping
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

PART_OF = "part_of"   #: deployment.json of a model served for another: the deployment
MODELS = "models"     #: deployment.json of the first entry: every model, load order
ENTRIES = "entries"   #: deployment.json of the first entry: the entries (served names)


@dataclass
class _Model:
    """One model of the switch and what it takes to undo it."""

    name: str  #: the name it serves as
    source: TritonModelDir
    production: ModelConfig
    previous: tuple[int, ...]
    old_text: str | None
    existed: bool
    modes: list[str]
    entry: bool
    served: ModelConfig | None = None
    created: bool = False
    touched: bool = False
    staging: tuple[Path, ...] = ()


def served_names(source: TritonRepositoryDir, name: str) -> list[str]:
    """The name each model serves as, in load order: the first entry as ``name``."""
    first = source.entries[0]
    return [name if m.name == first else m.name for m in source.models]


def digest(source: TritonRepositoryDir, name: str) -> str:
    """What makes two deployments the same: every model's name, files and config."""
    h = hashlib.sha256(name.encode())
    for served, model in zip(served_names(source, name), source.models, strict=True):
        h.update(f"\0{served}\0{steps.source_digest(model)}".encode())
    return h.hexdigest()[:16]


def _numeric_inputs(cfg: ModelConfig) -> bool:
    return all(i.data_type != model_config_pb2.TYPE_STRING for i in cfg.input)


def _refuse_foreign(name: str, names: list[str],
                    states: Mapping[str, DeploymentState | None]) -> None:
    holder = states[name]
    if holder is not None and holder.meta.get(PART_OF):
        raise DeployError(f"{name!r} is a model of deployment {holder.meta[PART_OF]!r}; "
                          "deploy under another name")
    for other in (n for n in names if n != name):
        state = states[other]
        if state is None or state.meta.get(PART_OF) == name:
            continue
        owner = state.meta.get(PART_OF)
        what = (f"a model of deployment {owner!r}" if owner
                else "a deployment of its own" if state.meta
                else "a model this target did not deploy")
        raise DeployError(f"model {other!r} of deployment {name!r} is already in the "
                          f"repository as {what}; a model belongs to one deployment, so it is "
                          "not taken over (remove it first)")


def publish(pub: Publisher, name: str, version: int, source: TritonRepositoryDir, *,
            meta: Mapping[str, Any] | None = None,
            check: Callable[[Any, str, int], None] | None = None) -> PublishResult:
    """Serve ``source`` as version ``version`` of every model, the first entry as ``name``
    (the module docstring). Raises :class:`DeployError` (with the server's message) after
    rolling every model back."""
    validate_model_name(name)
    if not isinstance(version, int) or version < 1:
        raise DeployError(f"a Triton version must be a positive integer, but got {version!r}")
    names = served_names(source, name)
    if names.count(name) > 1:
        raise DeployError(f"deployment name {name!r} is also the name of another model of "
                          f"the configuration {list(source.names)}")
    with pub.locked():
        start = time.monotonic()
        states = {n: pub.state(n) for n in names}
        _refuse_foreign(name, names, states)
        before = states[name]
        sha = digest(source, name)
        if (before is not None and before.meta.get("source_digest") == sha
                and all(s is not None and s.ready_versions == (version,)
                        for s in states.values())):
            pub.log(f"{name}: version {version} already serves ({', '.join(names)}); "
                    "nothing to do")
            production = steps.production_of(source.entry, name)
            return PublishResult(name, version, (), str(before.meta.get("serving", "")),
                                 production, production, 0.0)
        entries = {name if e == source.entries[0] else e for e in source.entries}
        plan = [_plan(pub, n, src, version, states[n], entry=n in entries)
                for n, src in zip(names, source.models, strict=True)]
        _switch(pub, name, version, plan, before, check)
        _record(pub, name, version, plan, sha, meta)
        _remove_left_behind(pub, name, before, names)
        took = time.monotonic() - start
        holder = next(m for m in plan if m.name == name)
        pub.log(f"{name}: version {version} serves ({', '.join(names)})"
                + (f", replaced {list(holder.previous)}" if holder.previous else "")
                + f" in {took:.1f} s")
        assert holder.served is not None
        return PublishResult(name, version, holder.previous, holder.modes[0],
                             steps.with_policy(holder.served, name, [version]),
                             holder.production, took)


def _switch(pub: Publisher, name: str, version: int, plan: list[_Model],
            before: DeploymentState | None, check: Callable[[Any, str, int], None] | None
            ) -> None:
    """Steps 1 to 5 of the module docstring: every model on ``version``, or every model as
    it was and :class:`DeployError`."""
    try:
        for model in plan:
            _stage(pub, model, version, model.modes[0])
        for model in plan:
            _load_beside(pub, model, version)
        verify(pub, plan, version)
        if check is not None:  # the output check (deploy/verify.py)
            check(pub.client, name, version)
        for model in reversed(plan):
            _drop_old(pub, model, version)
    except (steps.StepFailed, OSError) as exc:
        fail = exc if isinstance(exc, steps.StepFailed) else steps.StepFailed(
            "writing the version folders", str(exc))
        _rollback(pub, plan, version)
        serving = before.version if before is not None else None
        still = (f"version {serving} still serves" if serving
                 else "nothing served before, nothing serves now")
        raise DeployError(f"deploying version {version} of {name!r} (models: "
                          f"{', '.join(m.name for m in plan)}) failed while {fail.step}; "
                          f"every model is rolled back: {still}. Triton said: "
                          f"{fail.message}") from None
    finally:
        for model in plan:
            for folder in model.staging:
                shutil.rmtree(folder, ignore_errors=True)


def verify(pub: Publisher, plan: list[_Model], version: int) -> None:
    """After load, before switch: version ``version`` of every model is READY beside the
    serving one, which still takes the traffic. Each entry answers one inference sent to
    ``version`` (when its inputs are numbers). Raises :class:`~tracker.deploy.steps.StepFailed`,
    which rolls every model back. Checks of the new version's outputs go here."""
    for model in plan:
        assert model.served is not None
        if model.entry and _numeric_inputs(model.served):
            steps.check_inference(pub.client, model.name, version, model.served)


def _plan(pub: Publisher, name: str, source: TritonModelDir, version: int,
          state: DeploymentState | None, *, entry: bool) -> _Model:
    production = steps.production_of(source, name)
    config_path = pub.model_dir(name) / CONFIG_FILE
    previous = tuple(v for v in (state.ready_versions if state else ()) if v != version)
    return _Model(name=name, source=source, production=production, previous=previous,
                  old_text=config_path.read_text() if config_path.is_file() else None,
                  existed=pub.model_dir(name).exists(),
                  modes=pub.modes(name, production, previous), entry=entry)


def _stage(pub: Publisher, model: _Model, version: int, mode: str) -> None:
    model_dir = pub.model_dir(model.name)
    for left in model_dir.glob(f"{steps.STAGING}*") if model_dir.is_dir() else []:
        if left not in model.staging:
            shutil.rmtree(left, ignore_errors=True)  # a crashed publish's leftovers
    existed = (model_dir / str(version)).exists()
    staging, model.served = steps.stage(model_dir, version, model.source, model.production,
                                        mode)
    model.staging = (*model.staging, staging)
    steps.put_in_place(model_dir, version, staging)
    model.created = model.created or not existed


def _load_beside(pub: Publisher, model: _Model, version: int) -> None:
    """Load version ``version`` beside the serving ones; an ONNX model on a server without the
    onnxruntime backend falls back to the shim (``serving: auto``)."""
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
    """Every model back as it was, in reverse load order (module docstring, step 5)."""
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


def _record(pub: Publisher, name: str, version: int, plan: list[_Model], sha: str,
            meta: Mapping[str, Any] | None) -> None:
    """The old version folders removed; deployment.json of every model."""
    common = dict(meta or {})
    for model in plan:
        model_dir = pub.model_dir(model.name)
        steps.drop_other_versions(model_dir, version)
        if model.name != name:
            pub.write_meta(model_dir, model.name, version, model.modes[0],
                           {**common, PART_OF: name,
                            "source_digest": steps.source_digest(model.source)})
    holder = next(m for m in plan if m.name == name)
    pub.write_meta(pub.model_dir(name), name, version, holder.modes[0],
                   {**common, MODELS: [m.name for m in plan], "source_digest": sha,
                    ENTRIES: [m.name for m in plan if m.entry],
                    "model_serving": {m.name: m.modes[0] for m in plan}})


def _remove_left_behind(pub: Publisher, name: str, before: DeploymentState | None,
                        names: list[str]) -> None:
    """Models of the previous version that this one no longer has."""
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


def remove(pub: Publisher, name: str) -> bool:
    """Unload and delete the deployment ``name``: its first entry, then every other model its
    record lists (those whose deployment.json says they are part of it). A model that is part
    of another deployment is refused: deleting it would break that one. False when there was
    nothing (idempotent)."""
    with pub.locked():
        state = pub.state(name)
        if state is not None and state.meta.get(PART_OF):
            raise DeployError(f"{name!r} is a model of deployment {state.meta[PART_OF]!r}; "
                              "delete that deployment instead")
        model_dir = pub.model_dir(name)
        existed = model_dir.exists()
        try:
            pub.client.unload_model(name, wait_s=30)
        except ServerError as exc:
            if existed:
                raise DeployError(f"cannot unload {name!r}: {exc.reason}") from exc
        if existed:
            shutil.rmtree(model_dir)
            pub.log(f"{name}: removed")
        others = [str(m) for m in (state.meta.get(MODELS) or []) if str(m) != name] \
            if state is not None else []
        for other in reversed(others):
            found = pub.state(other)
            if found is not None and found.meta.get(PART_OF) == name:
                _unload_and_remove(pub, other)
        return existed
